/* libFuzzer target: the informers' packing of cached JSON text
 * (kube/kpack.h). Input: any text. Invariants (abort otherwise): text with
 * a byte in 0x01..0x1f is refused; any other text is packed to at most its
 * own length and unpacks to exactly itself. */
#include "kube/kpack.h"

#include "base/mem.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    char *text = xmalloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    size_t n = strlen(text);
    bool control = false;
    for (size_t i = 0; i < n; i++)
        control = control || (unsigned char)text[i] < 0x20;
    char *p = kpack_pack(text);
    if (control != (p == NULL))
        abort();
    if (p) {
        size_t un = 0;
        char *u = kpack_unpack(p, &un);
        if (strlen(p) > n || un != n || strcmp(u, text) != 0)
            abort();
        free(u);
    }
    free(p);
    free(text);
    return 0;
}
