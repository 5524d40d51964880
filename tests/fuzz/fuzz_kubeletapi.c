/* libFuzzer target: the request head tern-node's kubelet endpoint parses
 * (nodeagent/kubeletapi.h), bytes from any TLS client with a certificate.
 * A parsed request must name only DNS-safe fields and sane numbers. */
#include "nodeagent/kubeletapi.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_name(const char *s)
{
    if (!*s || strlen(s) > 253 || strstr(s, "..") || strchr(s, '/'))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 16384)
        return 0;
    struct kubeletapi_req r;
    struct tern_err e = {0};
    if (kubeletapi_parse((const char *)data, size, &r, &e) != 0)
        return 0;
    if (r.route == KUBELETAPI_LOGS) {
        check_name(r.ns);
        check_name(r.pod);
        check_name(r.container);
    } else if (r.route != KUBELETAPI_HEALTHZ) {
        abort();
    }
    if (r.tail_lines < -1 || r.limit_bytes < -1 || r.limit_bytes == 0)
        abort();
    return 0;
}
