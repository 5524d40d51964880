/* libFuzzer target: egress/proxyreq, the parser of what a sandbox sends its
 * egress proxy. The first byte picks the entry point (0: a whole request
 * head, 1: an authority "host:port", 2: an absolute-form URI); the rest is
 * the input. On success the invariants the proxy relies on are checked: a
 * port in 1..65535, a host without upper case, CR, LF, '@' or '%', a
 * literal's family agreeing with its text, and an upstream head with exactly
 * one empty line (at its end) and no bare CR or LF elsewhere. */
#include "base/buf.h"
#include "base/mem.h"
#include "egress/proxyreq.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static void check_target(const struct proxyreq_target *t)
{
    if (t->port < 1 || t->port > 65535 || !t->host[0])
        abort();
    for (const char *c = t->host; *c; c++)
        if ((*c >= 'A' && *c <= 'Z') || *c == '\r' || *c == '\n' || *c == '@' || *c == '%' ||
            *c == ' ')
            abort();
    unsigned char a[16];
    if (t->family == AF_INET && (inet_pton(AF_INET, t->host, a) != 1 || memcmp(a, t->addr, 4)))
        abort();
    if (t->family == AF_INET6 &&
        (inet_pton(AF_INET6, t->host, a) != 1 || memcmp(a, t->addr, 16)))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 32768)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    struct proxyreq_target t;
    char *path = NULL;
    switch (data[0] % 3) {
    case 0: {
        struct proxyreq r;
        if (proxyreq_parse(s, n, &r, NULL) != 0)
            return 0;
        check_target(&r.target);
        if (r.kind == PROXYREQ_FORWARD) {
            if (!r.path || r.path[0] != '/')
                abort();
            struct buf b;
            buf_init(&b, 1u << 20);
            proxyreq_upstream_head(&r, &b);
            const char *end = strstr(b.data, "\r\n\r\n");
            if (!end || (size_t)(end - b.data) + 4 != b.len)
                abort();
            for (size_t i = 0; i < b.len; i++) {
                if (b.data[i] == '\n' && (i == 0 || b.data[i - 1] != '\r'))
                    abort();
                if (b.data[i] == '\r' && (i + 1 >= b.len || b.data[i + 1] != '\n'))
                    abort();
                if (b.data[i] == '\0')
                    abort();
            }
            buf_done(&b);
        }
        proxyreq_done(&r);
        break;
    }
    case 1:
        if (proxyreq_hostport(s, n, 0, &t, NULL) == 0)
            check_target(&t);
        break;
    default:
        if (proxyreq_absolute_uri(s, n, &t, &path, NULL) == 0) {
            check_target(&t);
            if (!path || path[0] != '/' || strpbrk(path, " \r\n#"))
                abort();
        }
        free(path);
        break;
    }
    return 0;
}
