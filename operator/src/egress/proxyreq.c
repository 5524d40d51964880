/* proxyreq.c - proxy request heads. See proxyreq.h. */
#include "egress/proxyreq.h"

#include "base/limits.h"
#include "base/mem.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

void proxyreq_done(struct proxyreq *r)
{
    if (!r)
        return;
    free(r->path);
    free(r->headers);
    memset(r, 0, sizeof *r);
}

/* RFC 9110 tchar */
static bool tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* 1..65535 in decimal, no sign, no leading zero. */
static int parse_port(const char *s, size_t n, int *ret)
{
    if (n == 0 || n > 5 || s[0] == '0')
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > 65535)
        return -1;
    *ret = v;
    return 0;
}

/* A reg-name as clients send it: letters, digits, '-', '.', '_' (lower-cased
 * into out), no empty label, at most 253 bytes after dropping one trailing
 * dot. */
static int parse_name(const char *s, size_t n, char *out, struct tern_err *err)
{
    if (n && s[n - 1] == '.')
        n--;
    if (n == 0)
        return err_set(err, TERN_EPARSE, "empty host");
    if (n > 253)
        return err_set(err, TERN_EPARSE, "host name longer than 253 characters");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%')
            return err_set(err, TERN_EPARSE, "percent-encoded host names are not accepted");
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_'))
            return err_set(err, TERN_EPARSE, "invalid character in host name");
        if (c == '.' && (i == 0 || s[i - 1] == '.'))
            return err_set(err, TERN_EPARSE, "empty label in host name");
        out[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    out[n] = '\0';
    return 0;
}

/* Strict dotted quad: four decimal parts 0..255, no leading zeros. */
static bool dotted_quad(const char *s, uint8_t out[4])
{
    int part = 0;
    const char *p = s;
    while (part < 4) {
        if (*p < '0' || *p > '9')
            return false;
        int v = 0, digits = 0;
        const char *start = p;
        while (*p >= '0' && *p <= '9') {
            v = v * 10 + (*p - '0');
            if (++digits > 3 || v > 255)
                return false;
            p++;
        }
        if (digits > 1 && *start == '0')
            return false;
        out[part++] = (uint8_t)v;
        if (part < 4) {
            if (*p != '.')
                return false;
            p++;
        }
    }
    return *p == '\0';
}

int proxyreq_hostport(const char *s, size_t n, int default_port, struct proxyreq_target *ret,
                      struct tern_err *err)
{
    struct proxyreq_target t = {0};
    const char *host = s;
    size_t hn;
    const char *rest;
    if (n && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return err_set(err, TERN_EPARSE, "unterminated [IPv6] host");
        hn = (size_t)(close - s - 1);
        host = s + 1;
        char lit[INET6_ADDRSTRLEN];
        if (hn == 0 || hn >= sizeof lit || memchr(host, '%', hn))
            return err_set(err, TERN_EPARSE, "invalid IPv6 address");
        memcpy(lit, host, hn);
        lit[hn] = '\0';
        if (inet_pton(AF_INET6, lit, t.addr) != 1)
            return err_set(err, TERN_EPARSE, "invalid IPv6 address");
        t.family = AF_INET6;
        inet_ntop(AF_INET6, t.addr, t.host, sizeof t.host); /* canonical, lower case */
        rest = close + 1;
    } else {
        const char *colon = memchr(s, ':', n);
        hn = colon ? (size_t)(colon - s) : n;
        if (hn > PROXYREQ_MAX_HOST)
            return err_set(err, TERN_EPARSE, "host longer than %d bytes", PROXYREQ_MAX_HOST);
        if (memchr(s, '@', n))
            return err_set(err, TERN_EPARSE, "user information (user@host) is not accepted");
        if (parse_name(host, hn, t.host, err))
            return TERN_EPARSE;
        if (dotted_quad(t.host, t.addr))
            t.family = AF_INET;
        rest = s + hn;
    }
    size_t rn = (size_t)(s + n - rest);
    if (rn == 0) {
        if (default_port <= 0)
            return err_set(err, TERN_EPARSE, "a port is required (host:port)");
        t.port = default_port;
    } else if (rest[0] != ':' || parse_port(rest + 1, rn - 1, &t.port) != 0) {
        return err_set(err, TERN_EPARSE, "invalid port (1..65535)");
    }
    *ret = t;
    return 0;
}

int proxyreq_absolute_uri(const char *s, size_t n, struct proxyreq_target *ret, char **ret_path,
                          struct tern_err *err)
{
    const char *sep = n >= 3 ? memchr(s, ':', n) : NULL;
    if (!sep || (size_t)(s + n - sep) < 3 || sep[1] != '/' || sep[2] != '/') {
        if (n && s[0] == '/')
            return err_set(err, TERN_EPARSE,
                           "not a proxy request: the target must be an absolute URI "
                           "(http://host/path) or CONNECT host:port");
        return err_set(err, TERN_EPARSE, "invalid request target");
    }
    size_t sn = (size_t)(sep - s);
    if (sn == 5 && strncasecmp(s, "https", 5) == 0)
        return err_set(err, TERN_EPARSE, "https URLs go through CONNECT host:443, not GET https://");
    if (sn != 4 || strncasecmp(s, "http", 4) != 0)
        return err_set(err, TERN_EPARSE, "only http:// URLs are proxied (and CONNECT)");
    const char *auth = sep + 3, *end = s + n;
    const char *p = auth;
    while (p < end && *p != '/' && *p != '?' && *p != '#')
        p++;
    if (p < end && *p == '#')
        return err_set(err, TERN_EPARSE, "a request target has no fragment");
    if (memchr(auth, '@', (size_t)(p - auth)))
        return err_set(err, TERN_EPARSE, "user information (user@host) is not accepted");
    struct proxyreq_target t;
    if (proxyreq_hostport(auth, (size_t)(p - auth), 80, &t, err))
        return TERN_EPARSE;
    for (const char *q = p; q < end; q++) {
        unsigned char c = (unsigned char)*q;
        if (c == '#')
            return err_set(err, TERN_EPARSE, "a request target has no fragment");
        if (c <= 0x20 || c >= 0x7f)
            return err_set(err, TERN_EPARSE, "invalid character in the request target");
    }
    *ret = t;
    if (p == end)
        *ret_path = xstrdup("/");
    else if (*p == '?')
        *ret_path = xasprintf("/%.*s", (int)(end - p), p);
    else
        *ret_path = xstrndup(p, (size_t)(end - p));
    return 0;
}

void proxyreq_target_str(const struct proxyreq_target *t, char *out, size_t n)
{
    if (t->family == AF_INET6)
        snprintf(out, n, "[%s]:%d", t->host, t->port);
    else
        snprintf(out, n, "%s:%d", t->host, t->port);
}

/* ---- header fields ---- */

struct field {
    const char *name, *value;
    size_t nlen, vlen;
};

static bool name_is(const struct field *f, const char *name)
{
    return f->nlen == strlen(name) && strncasecmp(f->name, name, f->nlen) == 0;
}

/* Whether name appears as a token of a Connection field's value. */
static bool listed_in(const struct field *conn, size_t nconn, const struct field *f)
{
    for (size_t i = 0; i < nconn; i++) {
        const char *p = conn[i].value, *e = p + conn[i].vlen;
        while (p < e) {
            while (p < e && (*p == ' ' || *p == '\t' || *p == ','))
                p++;
            const char *t = p;
            while (p < e && *p != ',' && *p != ' ' && *p != '\t')
                p++;
            if ((size_t)(p - t) == f->nlen && strncasecmp(t, f->name, f->nlen) == 0)
                return true;
        }
    }
    return false;
}

static bool hop_by_hop(const struct field *f)
{
    static const char *const names[] = {"connection",          "proxy-connection",
                                        "keep-alive",          "proxy-authorization",
                                        "proxy-authenticate",  "te",
                                        "trailer",             "upgrade",
                                        "host",                NULL};
    for (size_t i = 0; names[i]; i++)
        if (name_is(f, names[i]))
            return true;
    return false;
}

/* The next line of head from *p: [*p, eol) without its CR LF; *p moves past
 * it. -1 at the end of input without a line end. */
static int next_line(const char **p, const char *end, const char **ret, size_t *ret_len)
{
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    if (!nl)
        return -1;
    const char *e = nl;
    if (e > *p && e[-1] == '\r')
        e--;
    *ret = *p;
    *ret_len = (size_t)(e - *p);
    *p = nl + 1;
    return 0;
}

int proxyreq_parse(const char *head, size_t len, struct proxyreq *ret, struct tern_err *err)
{
    if (len > TERN_EGRESS_MAX_HEAD)
        return err_set(err, TERN_EPARSE, "request head over %u bytes", TERN_EGRESS_MAX_HEAD);
    struct proxyreq r = {0};
    struct field *fields = NULL;
    int rc = TERN_EPARSE;
    const char *p = head, *end = head + len, *line;
    size_t ll;
    if (next_line(&p, end, &line, &ll) || ll == 0) {
        err_set(err, TERN_EPARSE, "no request line");
        goto out;
    }
    for (size_t i = 0; i < ll; i++)
        if ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] >= 0x7f) {
            err_set(err, TERN_EPARSE, "invalid character in the request line");
            goto out;
        }
    /* method SP target SP version */
    const char *sp1 = memchr(line, ' ', ll);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(line + ll - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || memchr(sp2 + 1, ' ', (size_t)(line + ll - sp2 - 1))) {
        err_set(err, TERN_EPARSE, "the request line must be METHOD TARGET HTTP/1.1");
        goto out;
    }
    size_t mn = (size_t)(sp1 - line), tn = (size_t)(sp2 - sp1 - 1),
           vn = (size_t)(line + ll - sp2 - 1);
    if (mn == 0 || mn >= sizeof r.method || tn == 0) {
        err_set(err, TERN_EPARSE, "the request line must be METHOD TARGET HTTP/1.1");
        goto out;
    }
    for (size_t i = 0; i < mn; i++)
        if (!tchar((unsigned char)line[i])) {
            err_set(err, TERN_EPARSE, "invalid method");
            goto out;
        }
    memcpy(r.method, line, mn);
    r.method[mn] = '\0';
    const char *ver = sp2 + 1;
    if (vn == 8 && memcmp(ver, "HTTP/1.1", 8) == 0) {
        r.http10 = false;
    } else if (vn == 8 && memcmp(ver, "HTTP/1.0", 8) == 0) {
        r.http10 = true;
    } else {
        err_set(err, TERN_EPARSE, "only HTTP/1.1 and HTTP/1.0 are spoken");
        goto out;
    }
    if (strcmp(r.method, "CONNECT") == 0) {
        r.kind = PROXYREQ_CONNECT;
        if (proxyreq_hostport(sp1 + 1, tn, 0, &r.target, err))
            goto out;
    } else {
        r.kind = PROXYREQ_FORWARD;
        if (proxyreq_absolute_uri(sp1 + 1, tn, &r.target, &r.path, err))
            goto out;
    }

    /* header fields */
    fields = xcalloc(TERN_EGRESS_MAX_HEADERS, sizeof *fields);
    size_t nf = 0;
    bool ended = false;
    while (next_line(&p, end, &line, &ll) == 0) {
        if (ll == 0) {
            ended = true;
            break;
        }
        if (line[0] == ' ' || line[0] == '\t') {
            err_set(err, TERN_EPARSE, "folded header lines are not accepted");
            goto out;
        }
        if (nf == TERN_EGRESS_MAX_HEADERS) {
            err_set(err, TERN_EPARSE, "more than %d header fields", TERN_EGRESS_MAX_HEADERS);
            goto out;
        }
        const char *colon = memchr(line, ':', ll);
        if (!colon || colon == line) {
            err_set(err, TERN_EPARSE, "malformed header field");
            goto out;
        }
        struct field f = {.name = line, .nlen = (size_t)(colon - line)};
        for (size_t i = 0; i < f.nlen; i++)
            if (!tchar((unsigned char)line[i])) {
                err_set(err, TERN_EPARSE, "invalid header field name");
                goto out;
            }
        const char *v = colon + 1, *ve = line + ll;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        for (const char *q = v; q < ve; q++)
            if (((unsigned char)*q < 0x20 && *q != '\t') || *q == 0x7f) {
                err_set(err, TERN_EPARSE, "invalid character in a header field");
                goto out;
            }
        f.value = v;
        f.vlen = (size_t)(ve - v);
        fields[nf++] = f;
    }
    if (!ended || p != end) {
        err_set(err, TERN_EPARSE, "the request head must end with an empty line");
        goto out;
    }
    if (r.kind == PROXYREQ_FORWARD) {
        /* framing: refuse what two parsers could read differently */
        const struct field *cl = NULL;
        bool te = false;
        struct field conn[8];
        size_t nconn = 0;
        for (size_t i = 0; i < nf; i++) {
            if (name_is(&fields[i], "transfer-encoding"))
                te = true;
            if (name_is(&fields[i], "content-length")) {
                if (cl && (cl->vlen != fields[i].vlen ||
                           memcmp(cl->value, fields[i].value, cl->vlen) != 0)) {
                    err_set(err, TERN_EPARSE, "conflicting Content-Length fields");
                    goto out;
                }
                if (fields[i].vlen == 0 || fields[i].vlen > 19 ||
                    strspn(fields[i].value, "0123456789") < fields[i].vlen) {
                    err_set(err, TERN_EPARSE, "invalid Content-Length");
                    goto out;
                }
                cl = &fields[i];
            }
            if (name_is(&fields[i], "connection") || name_is(&fields[i], "proxy-connection")) {
                if (nconn == sizeof conn / sizeof conn[0]) {
                    err_set(err, TERN_EPARSE, "too many Connection fields");
                    goto out;
                }
                conn[nconn++] = fields[i];
            }
        }
        if (cl && te) {
            err_set(err, TERN_EPARSE, "both Content-Length and Transfer-Encoding");
            goto out;
        }
        struct buf h;
        buf_init(&h, TERN_EGRESS_MAX_HEAD);
        for (size_t i = 0; i < nf; i++) {
            if (hop_by_hop(&fields[i]) || listed_in(conn, nconn, &fields[i]))
                continue;
            buf_append(&h, fields[i].name, fields[i].nlen);
            buf_puts(&h, ": ");
            buf_append(&h, fields[i].value, fields[i].vlen);
            buf_puts(&h, "\r\n");
        }
        r.headers_len = h.len;
        r.headers = buf_steal(&h);
    }
    *ret = r;
    memset(&r, 0, sizeof r);
    rc = 0;
out:
    free(fields);
    proxyreq_done(&r);
    return rc;
}

void proxyreq_upstream_head(const struct proxyreq *r, struct buf *out)
{
    buf_printf(out, "%s %s HTTP/1.1\r\n", r->method, r->path ? r->path : "/");
    if (r->target.family == AF_INET6)
        buf_printf(out, "Host: [%s]", r->target.host);
    else
        buf_printf(out, "Host: %s", r->target.host);
    if (r->target.port != 80)
        buf_printf(out, ":%d", r->target.port);
    buf_puts(out, "\r\n");
    if (r->headers)
        buf_append(out, r->headers, r->headers_len);
    buf_puts(out, "Connection: close\r\n\r\n");
}
