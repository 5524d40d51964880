/* apiserver.c - HTTPS front over libmicrohttpd. See apiserver.h. */
#include "apiserver.h"

#include "apistatus.h"
#include "base/mem.h"
#include "json/json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct apiserver {
    struct MHD_Daemon *d;
    struct apirest *rest;
    char *cert, *key, *token;
    struct apiauth *auth;
    struct apiagg *agg;
    uint16_t port;
    atomic_bool stopping;
};

struct conn_ctx {
    struct apiserver *srv;
    struct MHD_Connection *conn;
    struct buf body;
    bool too_large;
    bool authenticated;
    struct apiauth_identity who;
    cJSON *refused;      /* a Status for a refused impersonation, or NULL */
    int refused_code;
    struct apirest_resp resp;
    struct buf pending; /* watch bytes not yet handed to MHD */
    size_t pending_off;
    bool ended;
};

struct args {
    struct apirest_arg *v;
    size_t n;
};

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    struct args *a = cls;
    if (a->n >= 64)
        return MHD_NO;
    a->v = xreallocarray(a->v, a->n + 1, sizeof(*a->v));
    a->v[a->n].key = key;
    a->v[a->n].value = value ? value : "";
    a->n++;
    return MHD_YES;
}

static bool client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return true;
    return false;
}

static ssize_t watch_reader(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct conn_ctx *c = cls;
    for (;;) {
        if (c->pending.len > c->pending_off) {
            size_t n = c->pending.len - c->pending_off;
            if (n > max)
                n = max;
            memcpy(out, c->pending.data + c->pending_off, n);
            c->pending_off += n;
            if (c->pending_off == c->pending.len) {
                buf_reset(&c->pending);
                c->pending_off = 0;
            }
            return (ssize_t)n;
        }
        if (c->ended || atomic_load(&c->srv->stopping))
            return MHD_CONTENT_READER_END_OF_STREAM;
        int rc = apirest_watch_next(c->resp.watch, &c->pending, 1000);
        if (rc)
            c->ended = true;
        if (!c->pending.len && client_gone(c->conn))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void free_ctx(struct conn_ctx *c)
{
    if (!c)
        return;
    buf_done(&c->body);
    buf_done(&c->pending);
    cJSON_Delete(c->refused);
    apirest_resp_done(&c->resp);
    free(c);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    free_ctx(*con_cls);
    *con_cls = NULL;
}

static enum MHD_Result send_simple(struct MHD_Connection *conn, struct apirest_resp *r)
{
    struct MHD_Response *mr = MHD_create_response_from_buffer(
        r->body.len, r->body.len ? r->body.data : (void *)"", MHD_RESPMEM_MUST_COPY);
    if (!mr)
        return MHD_NO;
    if (r->content_type)
        MHD_add_response_header(mr, "Content-Type", r->content_type);
    if (r->warning)
        MHD_add_response_header(mr, "Warning", r->warning);
    MHD_add_response_header(mr, "Cache-Control", "no-cache, private");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, mr);
    MHD_destroy_response(mr);
    return ret;
}

static bool authenticate(struct apiserver *s, struct MHD_Connection *conn,
                         struct apiauth_identity *who)
{
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (s->auth)
        return apiauth_authenticate(s->auth, h, who) == 0;
    who->admin = true;
    if (!s->token)
        return true;
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) /* the scheme is case-insensitive */
        return false;
    const char *t = h + 7;
    size_t a = strlen(t), b = strlen(s->token);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a && i < b; i++)
        diff |= (unsigned)(t[i] ^ s->token[i]);
    return diff == 0;
}

struct impersonation {
    const char *groups[RBAC_MAX_GROUPS];
    size_t n;
    bool too_many;
};

static enum MHD_Result collect_group(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    struct impersonation *im = cls;
    if (strcasecmp(key, "Impersonate-Group") != 0 || !value)
        return MHD_YES;
    if (im->n == RBAC_MAX_GROUPS) {
        im->too_many = true;
        return MHD_NO;
    }
    im->groups[im->n++] = value;
    return MHD_YES;
}

/* Impersonate-User / Impersonate-Group (Impersonate-Uid and -Extra-* are
 * ignored: nothing here depends on them). Sets c->refused on refusal. */
static void impersonate(struct apiserver *s, struct conn_ctx *c)
{
    const char *user = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Impersonate-User");
    struct impersonation im = {0};
    MHD_get_connection_values(c->conn, MHD_HEADER_KIND, collect_group, &im);
    size_t n = im.too_many ? RBAC_MAX_GROUPS : im.n; /* one more than allowed with the user */
    int rc = apiauth_impersonate(s->auth, &c->who, user, im.groups, n, &c->refused);
    if (rc)
        c->refused_code = rc == TERN_EAUTH ? 403 : 400;
}

static enum MHD_Result send_status(struct MHD_Connection *conn, int code, cJSON *st)
{
    struct apirest_resp r = {0};
    buf_init(&r.body, 1u << 16);
    char *js = json_print(st);
    cJSON_Delete(st);
    buf_puts(&r.body, js);
    free(js);
    r.status = code;
    r.content_type = "application/json";
    enum MHD_Result ret = send_simple(conn, &r);
    apirest_resp_done(&r);
    return ret;
}

/* ---- aggregated APIs (apiagg.h) ------------------------------------------- */

struct proxied {
    struct apiserver *srv;
    struct MHD_Connection *conn;
    struct apiagg_conn *up;
};

static ssize_t proxy_reader(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct proxied *p = cls;
    for (;;) {
        if (atomic_load(&p->srv->stopping))
            return MHD_CONTENT_READER_END_OF_STREAM;
        ssize_t n = apiagg_read(p->up, out, max, 1000);
        if (n > 0)
            return n;
        if (n == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (n != -EAGAIN)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (client_gone(p->conn))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void proxy_free(void *cls)
{
    struct proxied *p = cls;
    apiagg_close(p->up);
    free(p);
}

static void escape_into(struct buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~')
            buf_putc(b, (char)*p);
        else
            buf_printf(b, "%%%02X", *p);
    }
}

/* The request, proxied to the APIService's backend as the authenticated
 * (or impersonated) user; the answer streamed back. */
static enum MHD_Result proxy(struct apiserver *s, struct conn_ctx *c, const cJSON *as,
                             const char *method, const char *url, const struct args *a)
{
    struct buf pq;
    buf_init(&pq, TERN_HTTP_MAX_URL);
    for (const char *p = url; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch <= ' ' || ch >= 0x7f || ch == '?' || ch == '#' || ch == '%')
            buf_printf(&pq, "%%%02X", ch);
        else
            buf_putc(&pq, (char)ch);
    }
    for (size_t i = 0; i < a->n; i++) {
        buf_putc(&pq, i ? '&' : '?');
        escape_into(&pq, a->v[i].key);
        buf_putc(&pq, '=');
        escape_into(&pq, a->v[i].value);
    }
    static const struct rbac_user anonymous = {"system:anonymous", {"system:unauthenticated"}, 1};
    const struct rbac_user *u = s->auth ? &c->who.user : &anonymous;
    struct apiagg_conn *up = NULL;
    struct tern_err err = {0};
    int rc = apiagg_open(s->agg, as, method, buf_str(&pq),
                         MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Accept"),
                         MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "Content-Type"),
                         c->body.data, c->body.len, u, &up, &err);
    buf_done(&pq);
    if (rc)
        return send_status(c->conn, 503,
                           apistatus_new(503, "ServiceUnavailable", err.msg, NULL, NULL, NULL));
    struct proxied *p = xcalloc(1, sizeof *p);
    p->srv = s;
    p->conn = c->conn;
    p->up = up;
    struct MHD_Response *mr =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, proxy_reader, p, proxy_free);
    if (!mr) {
        proxy_free(p);
        return MHD_NO;
    }
    MHD_add_response_header(mr, "Content-Type", apiagg_content_type(up));
    MHD_add_response_header(mr, "Cache-Control", "no-cache, private");
    enum MHD_Result ret = MHD_queue_response(c->conn, (unsigned)apiagg_status(up), mr);
    MHD_destroy_response(mr);
    return ret;
}

/* /apis lists the aggregated groups too. */
static void add_aggregated_groups(struct apiserver *s, struct apirest_resp *r)
{
    cJSON *doc = NULL;
    if (json_parse(r->body.data ? r->body.data : "", r->body.len, &doc, NULL) != 0)
        return;
    cJSON *groups = (cJSON *)json_get(doc, "groups");
    if (cJSON_IsArray(groups)) {
        apiagg_add_groups(s->agg, groups);
        char *t = json_print(doc);
        buf_reset(&r->body);
        buf_puts(&r->body, t);
        free(t);
    }
    cJSON_Delete(doc);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    (void)version;
    struct apiserver *s = cls;
    struct conn_ctx *c = *con_cls;
    if (!c) {
        c = xcalloc(1, sizeof(*c));
        c->srv = s;
        c->conn = conn;
        buf_init(&c->body, TERN_KUBE_MAX_OBJECT + 1);
        buf_init(&c->pending, 64u << 20);
        c->authenticated = authenticate(s, conn, &c->who);
        if (c->authenticated && s->auth)
            impersonate(s, c);
        *con_cls = c;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!c->too_large && buf_append(&c->body, upload, *upload_size))
            c->too_large = true;
        *upload_size = 0;
        return MHD_YES;
    }
    if (!c->authenticated)
        return send_status(conn, 401, apistatus_unauthorized());
    if (c->refused) {
        cJSON *st = c->refused;
        c->refused = NULL;
        return send_status(conn, c->refused_code, st);
    }
    struct args a = {0};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_arg, &a);
    struct apirest_req req = {
        .method = method,
        .path = url,
        .args = a.v,
        .nargs = a.n,
        .content_type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type"),
        .accept = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Accept"),
        .body = c->body.data ? c->body.data : "",
        .body_len = c->body.len,
        .body_too_large = c->too_large,
        .can = s->auth ? apiauth_can : NULL,
        .can_ctx = &c->who,
        .review = s->auth ? apiauth_review : NULL,
        .review_ctx = s->auth,
        .user = s->auth ? &c->who.user : NULL,
    };
    cJSON *as = s->agg ? apiagg_match(s->agg, url) : NULL;
    if (as && strcmp(url, "/apis/") != 0 && !strchr(url + 6, '/')) {
        /* /apis/<group> of an aggregated group: answered here, as
         * kube-aggregator does */
        free(a.v);
        cJSON *doc = apiagg_group_doc(s->agg, url + 6);
        cJSON_Delete(as);
        if (!doc)
            return send_status(conn, 404, apistatus_not_found("", "", url + 6));
        struct apirest_resp r = {.status = 200, .content_type = "application/json"};
        buf_init(&r.body, 1u << 20);
        char *t = json_print(doc);
        buf_puts(&r.body, t);
        free(t);
        cJSON_Delete(doc);
        enum MHD_Result ret = send_simple(conn, &r);
        apirest_resp_done(&r);
        return ret;
    }
    cJSON *denied = NULL;
    if (s->auth && apiauth_authorize(s->auth, &c->who, &req, &denied)) {
        free(a.v);
        cJSON_Delete(as);
        return send_status(conn, 403, denied);
    }
    if (as) {
        enum MHD_Result ret = proxy(s, c, as, method, url, &a);
        free(a.v);
        cJSON_Delete(as);
        return ret;
    }
    apirest_handle(s->rest, &req, &c->resp);
    free(a.v);
    if (s->agg && strcmp(url, "/apis") == 0 && c->resp.status == 200 && !c->resp.watch)
        add_aggregated_groups(s, &c->resp);
    if (!c->resp.watch)
        return send_simple(conn, &c->resp);
    struct MHD_Response *mr =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, watch_reader, c, NULL);
    if (!mr)
        return MHD_NO;
    MHD_add_response_header(mr, "Content-Type",
                            c->resp.content_type ? c->resp.content_type : "application/json");
    MHD_add_response_header(mr, "Cache-Control", "no-cache, private");
    enum MHD_Result ret = MHD_queue_response(conn, 200, mr);
    MHD_destroy_response(mr);
    return ret;
}

int apiserver_start(const struct apiserver_config *cfg, struct apiserver **ret,
                    struct tern_err *err)
{
    struct apiserver *s = xcalloc(1, sizeof(*s));
    s->rest = cfg->rest;
    s->cert = xstrdup(cfg->cert_pem);
    s->key = xstrdup(cfg->key_pem);
    s->token = cfg->token ? xstrdup(cfg->token) : NULL;
    s->auth = cfg->auth;
    s->agg = cfg->agg;
    atomic_init(&s->stopping, false);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(cfg->port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
                                MHD_USE_TLS,
                            0, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_HTTPS_MEM_KEY, s->key, MHD_OPTION_HTTPS_MEM_CERT, s->cert,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)4096,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)1024,
                            /* idle keep-alive connections and stalled uploads
                             * free their thread; a watch waiting for events
                             * sits in its reader callback and is not idle */
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300, MHD_OPTION_END);
    if (!s->d) {
        free(s->cert);
        free(s->key);
        free(s->token);
        free(s);
        return err_set(err, -EADDRINUSE, "cannot serve on 127.0.0.1:%u", cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    *ret = s;
    return 0;
}

uint16_t apiserver_port(const struct apiserver *s)
{
    return s->port;
}

void apiserver_stop(struct apiserver *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, true);
    MHD_stop_daemon(s->d);
    free(s->cert);
    free(s->key);
    free(s->token);
    free(s);
}
