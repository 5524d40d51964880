/* libFuzzer target: base/glob, differential. Input: one mode byte (low three
 * bits: GLOB_TEXT, GLOB_PERIOD, GLOB_NO_DIR_SELF), then pattern, a NUL, the
 * subject. Short inputs are checked against the naive reference matcher of
 * glob_ref.h (abort on any disagreement, or when glob_valid and the
 * reference's validity differ); longer ones only run, under the sanitizers. */
#include "glob_ref.h"

#include "base/glob.h"
#include "base/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REF_MAX_PATTERN 12
#define REF_MAX_SUBJECT 14

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 8192)
        return 0;
    unsigned mode = data[0] & (GLOB_TEXT | GLOB_PERIOD | GLOB_NO_DIR_SELF);
    char *buf = xmalloc(size + 1); /* data[1..] plus a NUL */
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    const char *pat = buf;
    size_t pl = strlen(pat);
    const char *s = pl + 1 < size ? buf + pl + 1 : "";
    bool got = glob_match(pat, s, mode);
    bool valid = glob_valid(pat);
    if (valid != ref_valid(pat))
        abort();
    if (!valid && got)
        abort(); /* a malformed pattern matches nothing */
    if (pl <= REF_MAX_PATTERN && strlen(s) <= REF_MAX_SUBJECT && got != ref_match(pat, s, mode))
        abort();
    free(buf);
    return 0;
}
