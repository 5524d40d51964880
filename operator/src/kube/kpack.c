/* kpack.c - lossless packing of compact JSON text. See kpack.h. */
#include "kube/kpack.h"

#include "base/mem.h"

#include <string.h>

/* The strings, in the order of their bytes (0x01 first). Changing the list
 * changes only memory use: packed text never leaves the process. */
#define E(s) {s, sizeof s - 1}
static const struct {
    const char *s;
    size_t len;
} dict[] = {
    E("\"lastTransitionTime\":\""),
    E("\"observedGeneration\":"),
    E("\"message\":\""),
    E("\"reason\":\""),
    E("\"status\":\""),
    E("\"type\":\""),
    E("{\"apiVersion\":\""),
    E("\"kind\":\""),
    E("\"metadata\":{"),
    E("\"name\":\""),
    E("\"namespace\":\""),
    E("\"uid\":\""),
    E("\"resourceVersion\":\""),
    E("\"creationTimestamp\":\""),
    E("\"labels\":{"),
    E("\"annotations\":{"),
    E("\"ownerReferences\":[{"),
    E("\"blockOwnerDeletion\":true"),
    E("\"controller\":true"),
    E("\"generation\":"),
    E("\"spec\":{"),
    E("\"conditions\":[{"),
    E("\"True\""),
    E("\"False\""),
    E("tern.dev/"),
    E("\"AgentSession\""),
    E("\"finalizers\":["),
    E("\"deletionTimestamp\":\""),
    E("\"timeoutSeconds\":"),
    E("\"},{"),
    E("Seconds\":"),
};
#undef E
#define NDICT (sizeof dict / sizeof dict[0])
_Static_assert(NDICT <= 31, "one byte in 0x01..0x1f per string");

/* The byte of the longest string that text begins with, or 0. */
static size_t match(const char *p, size_t *ret_len)
{
    size_t best = 0, best_len = 0;
    for (size_t i = 0; i < NDICT; i++)
        if (dict[i].s[0] == *p && dict[i].len > best_len &&
            strncmp(p, dict[i].s, dict[i].len) == 0) {
            best = i + 1;
            best_len = dict[i].len;
        }
    *ret_len = best_len;
    return best;
}

char *kpack_pack(const char *text)
{
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)text[i] < 0x20)
            return NULL;
    char *out = xmalloc(n + 1), *o = out;
    for (const char *p = text; *p;) {
        size_t len;
        size_t b = match(p, &len);
        if (b) {
            *o++ = (char)b;
            p += len;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return xrealloc(out, (size_t)(o - out) + 1);
}

char *kpack_unpack(const char *packed, size_t *ret_len)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)packed; *p; p++)
        n += *p < 0x20 && *p <= NDICT ? dict[*p - 1].len : 1;
    char *out = xmalloc(n + 1), *o = out;
    for (const unsigned char *p = (const unsigned char *)packed; *p; p++) {
        if (*p < 0x20 && *p <= NDICT) {
            memcpy(o, dict[*p - 1].s, dict[*p - 1].len);
            o += dict[*p - 1].len;
        } else {
            *o++ = (char)*p;
        }
    }
    *o = 0;
    if (ret_len)
        *ret_len = n;
    return out;
}
