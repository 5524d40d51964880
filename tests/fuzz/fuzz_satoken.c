/* libFuzzer target: service-account token verification (bearer tokens come
 * from any HTTP client), plus the time and quantity parsers the kubelet
 * applies to stored objects. A token that verifies must re-mint to itself. */
#include "devctl/kobj.h"
#include "devctl/satoken.h"
#include "kubelet/podplan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    unsigned char key[SATOKEN_KEY_LEN];
    memset(key, 0x5a, sizeof key);
    struct satoken_claims c;
    if (satoken_verify(key, s, &c, NULL) == 0) {
        char *again = NULL;
        if (satoken_mint(key, c.ns, c.name, c.uid, &again, NULL) != 0 || strcmp(again, s) != 0)
            abort();
        free(again);
    }
    int64_t v;
    (void)kobj_parse_time(s, &v);
    (void)podplan_quantity(s, 1000, &v);
    free(s);
    return 0;
}
