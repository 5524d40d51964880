/* libFuzzer target: propose_memory_update's arguments (memprop_parse_args)
 * and the section replacement on a simple.md. Input: the arguments' JSON,
 * a NUL, the document. Invariants (abort otherwise): accepted arguments
 * are within the bounds; a replacement that applies is within
 * TERN_MEMORY_MAX_FILE, differs from the document, and applying it again
 * to its result changes nothing (refused as not applying). */
#include "memory/memprop.h"

#include "base/limits.h"
#include "base/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    char *buf = xmalloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    size_t al = strlen(buf);
    const char *doc = al < size ? buf + al + 1 : "";
    size_t dl = al < size ? size - al - 1 : 0;
    struct memprop_args a = {0};
    if (memprop_parse_args(buf, al, &a, NULL) == 0) {
        if (!*a.reason || strlen(a.reason) > TERN_MEMORY_MAX_REASON ||
            strlen(a.heading) > TERN_MEMORY_MAX_HEADING ||
            strlen(a.content) > TERN_MEMORY_MAX_SECTION ||
            !memprop_heading_level(a.heading, strlen(a.heading)))
            abort();
        char *out = NULL;
        if (memprop_replace_section(doc, dl, a.heading, a.content, &out, NULL) == 0) {
            size_t ol = strlen(out);
            if (ol > TERN_MEMORY_MAX_FILE || (ol == dl && memcmp(out, doc, dl) == 0))
                abort();
            char *again = NULL;
            if (memprop_replace_section(out, ol, a.heading, a.content, &again, NULL) == 0)
                abort();
            free(again);
        }
        free(out);
    }
    memprop_args_done(&a);
    free(buf);
    return 0;
}
