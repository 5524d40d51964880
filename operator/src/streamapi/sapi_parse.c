/* sapi_parse.c - the request head of the aggregated API, pure. See sapi.h. */
#include "sapi.h"

#include "base/num.h"

#include <ctype.h>
#include <string.h>

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes [s, s+n) into out (size outsz). plus: '+' is a space (a
 * query). Returns 0, or -1 when malformed, too long, or decoding to a NUL
 * or a control byte. */
static int decode(const char *s, size_t n, char *out, size_t outsz, bool plus)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0)
                return -1;
            c = (unsigned char)(h * 16 + l);
            i += 2;
        } else if (c == '+' && plus) {
            c = ' ';
        }
        if (c < 0x20 || c == 0x7f || o + 1 >= outsz)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = 0;
    return 0;
}

/* A DNS-1123 subdomain (namespace and object names): labels of [a-z0-9-]
 * that start and end with [a-z0-9], joined by single dots. */
static bool dns_name(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        bool edge = i == 0 || i == n - 1 || s[i - 1] == '.' || s[i + 1] == '.';
        if (c == '.') {
            if (i == 0 || i == n - 1 || s[i - 1] == '.')
                return false;
        } else if (!alnum && (c != '-' || edge)) {
            return false;
        }
    }
    return true;
}

static bool truthy(const char *v)
{
    return strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "True") == 0;
}

static int parse_query(const char *q, size_t n, struct sapi_req *r, struct tern_err *err)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && q[j] != '&')
            j++;
        const char *eq = memchr(q + i, '=', j - i);
        size_t kl = eq ? (size_t)(eq - (q + i)) : j - i;
        char key[64], val[TERN_SANDBOX_MAX_PATH + 1];
        if (decode(q + i, kl, key, sizeof key, true) != 0 ||
            decode(eq ? eq + 1 : q + j, eq ? (size_t)(q + j - eq - 1) : 0, val, sizeof val,
                   true) != 0)
            return err_set(err, TERN_EINVALID, "malformed query");
        int64_t v = 0;
        if (strcmp(key, "sinceSeq") == 0 || strcmp(key, "continue") == 0) {
            if (num_parse_range(val, 0, INT64_MAX, &v) != 0)
                return err_set(err, TERN_EINVALID, "%s: a number >= 0", key);
            r->since_seq = (uint64_t)v;
        } else if (strcmp(key, "limit") == 0) {
            if (num_parse_range(val, 0, TERN_SAPI_MAX_PAGE, &v) != 0)
                return err_set(err, TERN_EINVALID, "limit: a number from 0 to %d",
                               TERN_SAPI_MAX_PAGE);
            r->limit = v;
        } else if (strcmp(key, "depth") == 0) {
            if (num_parse_range(val, 0, TERN_SANDBOX_MAX_LIST_DEPTH, &v) != 0)
                return err_set(err, TERN_EINVALID, "depth: a number from 0 to %d",
                               TERN_SANDBOX_MAX_LIST_DEPTH);
            r->depth = v;
        } else if (strcmp(key, "timeoutSeconds") == 0) {
            if (num_parse_range(val, 0, 86400, &v) != 0)
                return err_set(err, TERN_EINVALID, "timeoutSeconds: a number from 0 to 86400");
            r->timeout_s = v;
        } else if (strcmp(key, "watch") == 0) {
            r->watch = truthy(val);
        } else if (strcmp(key, "follow") == 0) {
            r->follow = truthy(val);
        } else if (strcmp(key, "path") == 0) {
            /* workspace-relative; sandboxd validates it again */
            const char *p = val;
            while (*p == '/')
                p++;
            memmove(val, p, strlen(p) + 1);
            memcpy(r->path, val, strlen(val) + 1);
        } /* anything else (resourceVersion, pretty, ...) is ignored */
        i = j + 1;
    }
    return 0;
}

/* Splits the path into segments (at most 8). Returns the count, -1 when
 * malformed. */
static int segments(const char *p, size_t n, char seg[8][256])
{
    int k = 0;
    size_t i = 0;
    if (n == 0 || p[0] != '/')
        return -1;
    while (i < n) {
        while (i < n && p[i] == '/')
            i++;
        if (i >= n)
            break;
        size_t j = i;
        while (j < n && p[j] != '/')
            j++;
        if (k == 8 || decode(p + i, j - i, seg[k], 256, false) != 0)
            return -1;
        k++;
        i = j;
    }
    return k;
}

static int route(struct sapi_req *r, char seg[8][256], int k, struct tern_err *err)
{
    if (k == 1 && strcmp(seg[0], "apis") == 0)
        return r->route = SAPI_APIS, 0;
    if (k == 2 && strcmp(seg[0], "openapi") == 0 && strcmp(seg[1], "v2") == 0)
        return r->route = SAPI_OPENAPI_V2, 0;
    if (k >= 2 && strcmp(seg[0], "openapi") == 0 && strcmp(seg[1], "v3") == 0)
        return r->route = SAPI_OPENAPI_V3, 0;
    if (k < 2 || strcmp(seg[0], "apis") != 0 || strcmp(seg[1], SAPI_GROUP) != 0)
        return err_set(err, TERN_ENOTFOUND, "not found");
    if (k == 2)
        return r->route = SAPI_GROUP_DOC, 0;
    if (strcmp(seg[2], SAPI_VERSION) != 0)
        return err_set(err, TERN_ENOTFOUND, "not found");
    if (k == 3)
        return r->route = SAPI_VERSION_DOC, 0;
    int at = 3;
    if (strcmp(seg[3], "namespaces") == 0) {
        if (k < 6 || !dns_name(seg[4], 63))
            return err_set(err, k < 6 ? TERN_ENOTFOUND : TERN_EINVALID,
                           k < 6 ? "not found" : "bad namespace");
        memcpy(r->ns, seg[4], strlen(seg[4]) + 1);
        at = 5;
    }
    if (strcmp(seg[at], "sessions") != 0)
        return err_set(err, TERN_ENOTFOUND, "the server could not find the requested resource");
    if (k == at + 1)
        return r->route = SAPI_SESSIONS, 0;
    if (!r->ns[0])
        return err_set(err, TERN_ENOTFOUND, "sessions are namespaced");
    if (!dns_name(seg[at + 1], 253))
        return err_set(err, TERN_EINVALID, "bad session name");
    memcpy(r->name, seg[at + 1], strlen(seg[at + 1]) + 1);
    if (k == at + 2)
        return r->route = SAPI_SESSION, 0;
    if (k != at + 3)
        return err_set(err, TERN_ENOTFOUND, "not found");
    static const struct {
        const char *sub;
        enum sapi_route route;
    } subs[] = {{"events", SAPI_EVENTS},   {"log", SAPI_LOG},         {"output", SAPI_OUTPUT},
                {"files", SAPI_FILES},     {"content", SAPI_CONTENT}, {"artifacts", SAPI_ARTIFACTS}};
    for (size_t i = 0; i < sizeof subs / sizeof *subs; i++)
        if (strcmp(seg[at + 2], subs[i].sub) == 0)
            return r->route = subs[i].route, 0;
    return err_set(err, TERN_ENOTFOUND, "no such subresource %s", seg[at + 2]);
}

/* One header line "Name: value" into r. */
static int header(const char *p, size_t n, struct sapi_req *r, struct tern_err *err)
{
    const char *colon = memchr(p, ':', n);
    if (!colon || colon == p)
        return err_set(err, TERN_EINVALID, "malformed header line");
    size_t nl = (size_t)(colon - p);
    const char *v = colon + 1;
    size_t vl = n - nl - 1;
    while (vl && (*v == ' ' || *v == '\t'))
        v++, vl--;
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
    if (r->nheaders == TERN_SAPI_MAX_HEADERS)
        return err_set(err, TERN_EINVALID, "more than %d headers", TERN_SAPI_MAX_HEADERS);
    struct sapi_header *h = &r->headers[r->nheaders];
    if (nl >= sizeof h->name || vl >= sizeof h->value)
        return err_set(err, TERN_EINVALID, "header too long");
    for (size_t i = 0; i < nl; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= ' ' || c >= 0x7f)
            return err_set(err, TERN_EINVALID, "bad header name");
        h->name[i] = (char)tolower(c);
    }
    h->name[nl] = 0;
    for (size_t i = 0; i < vl; i++)
        if ((unsigned char)v[i] < 0x20 && v[i] != '\t')
            return err_set(err, TERN_EINVALID, "control byte in a header value");
    memcpy(h->value, v, vl);
    h->value[vl] = 0;
    r->nheaders++;
    return 0;
}

const char *sapi_header(const struct sapi_req *r, const char *name, size_t index)
{
    for (size_t i = 0; i < r->nheaders; i++)
        if (strcmp(r->headers[i].name, name) == 0 && index-- == 0)
            return r->headers[i].value;
    return NULL;
}

int sapi_parse(const char *head, size_t len, struct sapi_req *ret, struct tern_err *err)
{
    struct sapi_req *r = ret;
    memset(r, 0, sizeof *r);
    r->depth = -1;
    const char *eol = memchr(head, '\n', len);
    if (!eol)
        return err_set(err, TERN_EINVALID, "no request line");
    size_t ll = (size_t)(eol - head);
    if (ll > 0 && head[ll - 1] == '\r')
        ll--;
    const char *sp1 = memchr(head, ' ', ll);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', ll - (size_t)(sp1 + 1 - head)) : NULL;
    if (!sp1 || !sp2 || sp1 == head || (size_t)(sp1 - head) >= sizeof r->method)
        return err_set(err, TERN_EINVALID, "malformed request line");
    memcpy(r->method, head, (size_t)(sp1 - head));
    r->method[sp1 - head] = 0;
    size_t vl = ll - (size_t)(sp2 + 1 - head);
    if (vl != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0)
        return err_set(err, TERN_EINVALID, "not HTTP/1.x");
    /* headers, through the blank line */
    const char *p = eol + 1, *end = head + len;
    for (;;) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e)
            return err_set(err, TERN_EINVALID, "the head does not end");
        size_t n = (size_t)(e - p);
        if (n > 0 && p[n - 1] == '\r')
            n--;
        if (n == 0)
            break;
        if (*p == ' ' || *p == '\t')
            return err_set(err, TERN_EINVALID, "folded header lines are not accepted");
        int rc = header(p, n, r, err);
        if (rc)
            return rc;
        p = e + 1;
    }
    const char *target = sp1 + 1;
    size_t tl = (size_t)(sp2 - target);
    const char *qm = memchr(target, '?', tl);
    size_t pl = qm ? (size_t)(qm - target) : tl;
    char seg[8][256];
    int k = segments(target, pl, seg);
    if (k < 0)
        return err_set(err, TERN_EINVALID, "malformed path");
    int rc = route(r, seg, k, err);
    if (rc)
        return rc;
    if (qm && (rc = parse_query(qm + 1, tl - pl - 1, r, err)))
        return rc;
    return 0;
}
