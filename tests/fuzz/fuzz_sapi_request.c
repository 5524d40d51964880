/* libFuzzer target: the request head of the operator's aggregated API
 * (streamapi/sapi.h), bytes from any TLS client (the front-proxy check comes
 * after parsing). A parsed request names only DNS-safe namespaces and
 * names, has a known route, bounded numbers and headers without control
 * bytes. */
#include "streamapi/sapi.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_name(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n > max || strstr(s, "..") || strchr(s, '/'))
        abort();
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
              s[i] == '.'))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16384)
        return 0;
    static struct sapi_req r;
    struct tern_err e = {0};
    if (sapi_parse((const char *)data, size, &r, &e) != 0)
        return 0;
    if (r.route <= SAPI_NOT_FOUND || r.route > SAPI_ARTIFACTS)
        abort();
    check_name(r.ns, 63);
    check_name(r.name, 253);
    if (r.route >= SAPI_SESSION && (!r.ns[0] || !r.name[0]))
        abort();
    if (r.limit < 0 || r.limit > TERN_SAPI_MAX_PAGE || r.depth < -1 ||
        r.depth > TERN_SANDBOX_MAX_LIST_DEPTH || r.timeout_s < 0 || r.nheaders > TERN_SAPI_MAX_HEADERS)
        abort();
    for (size_t i = 0; i < r.nheaders; i++) {
        for (const char *p = r.headers[i].value; *p; p++)
            if ((unsigned char)*p < 0x20 && *p != '\t')
                abort();
        for (const char *p = r.headers[i].name; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                abort();
    }
    for (const char *p = r.path; *p; p++)
        if ((unsigned char)*p < 0x20)
            abort();
    if (r.path[0] == '/')
        abort();
    return 0;
}
