/* egresolve.c - name lookups. See egresolve.h. */
#include "egress/egresolve.h"

#include "base/limits.h"
#include "base/mem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct host_ent {
    char *name;
    struct egpolicy_addr addr;
};

struct egresolve {
    bool static_map;
    struct host_ent *hosts;
    size_t nhosts;
};

void egresolve_free(struct egresolve *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nhosts; i++)
        free(r->hosts[i].name);
    free(r->hosts);
    free(r);
}

static bool space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

int egresolve_new_text(const char *text, size_t len, struct egresolve **ret, struct tern_err *err)
{
    struct egresolve *r = xcalloc(1, sizeof *r);
    r->static_map = true;
    size_t lineno = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        lineno++;
        const char *hash = memchr(p, '#', (size_t)(e - p));
        if (hash)
            e = hash;
        /* fields */
        const char *f[64];
        size_t fl[64], nf = 0;
        for (const char *q = p; q < e;) {
            while (q < e && space(*q))
                q++;
            if (q == e)
                break;
            const char *s = q;
            while (q < e && !space(*q))
                q++;
            if (nf == 64)
                goto bad;
            f[nf] = s;
            fl[nf++] = (size_t)(q - s);
        }
        if (nf == 1)
            goto bad;
        if (nf >= 2) {
            char a[INET6_ADDRSTRLEN];
            struct egpolicy_addr addr = {0};
            if (fl[0] >= sizeof a)
                goto bad;
            memcpy(a, f[0], fl[0]);
            a[fl[0]] = '\0';
            if (inet_pton(AF_INET, a, addr.addr) == 1)
                addr.family = AF_INET;
            else if (inet_pton(AF_INET6, a, addr.addr) == 1)
                addr.family = AF_INET6;
            else
                goto bad;
            for (size_t i = 1; i < nf; i++) {
                if (fl[i] > 253 || r->nhosts == TERN_EGRESS_MAX_HOSTS)
                    goto bad;
                char *name = xstrndup(f[i], fl[i]);
                for (char *c = name; *c; c++)
                    if (*c >= 'A' && *c <= 'Z')
                        *c = (char)(*c + 32);
                r->hosts = xreallocarray(r->hosts, r->nhosts + 1, sizeof *r->hosts);
                r->hosts[r->nhosts++] = (struct host_ent){name, addr};
            }
        }
        p = nl ? nl + 1 : end;
    }
    *ret = r;
    return 0;
bad:
    egresolve_free(r);
    return err_set(err, TERN_EPARSE, "hosts file line %zu: expected ADDRESS NAME [NAME...]",
                   lineno);
}

int egresolve_new(const char *hosts_file, struct egresolve **ret, struct tern_err *err)
{
    if (!hosts_file) {
        *ret = xcalloc(1, sizeof **ret);
        return 0;
    }
    int fd = open(hosts_file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, -errno, "%s: %s", hosts_file, strerror(errno));
    char *buf = xmalloc(TERN_EGRESS_MAX_HOSTS_FILE + 1);
    size_t n = 0;
    int rc = 0;
    for (;;) {
        ssize_t k = read(fd, buf + n, TERN_EGRESS_MAX_HOSTS_FILE + 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = err_set(err, -errno, "%s: %s", hosts_file, strerror(errno));
            break;
        }
        if (k == 0)
            break;
        n += (size_t)k;
        if (n > TERN_EGRESS_MAX_HOSTS_FILE) {
            rc = err_set(err, TERN_ETOOLARGE, "%s: larger than %u bytes", hosts_file,
                         TERN_EGRESS_MAX_HOSTS_FILE);
            break;
        }
    }
    close(fd);
    if (rc == 0)
        rc = egresolve_new_text(buf, n, ret, err);
    free(buf);
    return rc;
}

int egresolve_lookup(struct egresolve *r, const char *name, struct egpolicy_addr *out, size_t max,
                     size_t *ret_n, struct tern_err *err)
{
    size_t n = 0;
    if (r->static_map) {
        for (size_t i = 0; i < r->nhosts && n < max; i++)
            if (strcmp(r->hosts[i].name, name) == 0)
                out[n++] = r->hosts[i].addr;
        if (n == 0)
            return err_set(err, TERN_ENOTFOUND, "%s: no such name (static name map)", name);
        *ret_n = n;
        return 0;
    }
    char *abs = xasprintf("%s.", name);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_ADDRCONFIG};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(abs, NULL, &hints, &res);
    free(abs);
    if (g != 0) {
        int code = g == EAI_AGAIN ? -EAGAIN : TERN_ENOTFOUND;
        return err_set(err, code, "%s: %s", name, gai_strerror(g));
    }
    for (struct addrinfo *a = res; a && n < max; a = a->ai_next) {
        struct egpolicy_addr x = {0};
        if (a->ai_family == AF_INET) {
            x.family = AF_INET;
            memcpy(x.addr, &((struct sockaddr_in *)a->ai_addr)->sin_addr, 4);
        } else if (a->ai_family == AF_INET6) {
            x.family = AF_INET6;
            memcpy(x.addr, &((struct sockaddr_in6 *)a->ai_addr)->sin6_addr, 16);
        } else {
            continue;
        }
        bool dup = false;
        for (size_t i = 0; i < n; i++)
            dup = dup || (out[i].family == x.family && memcmp(out[i].addr, x.addr, 16) == 0);
        if (!dup)
            out[n++] = x;
    }
    freeaddrinfo(res);
    if (n == 0)
        return err_set(err, TERN_ENOTFOUND, "%s: no address", name);
    *ret_n = n;
    return 0;
}
