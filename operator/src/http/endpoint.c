/* endpoint.c - a tiny HTTP server on libmicrohttpd. See endpoint.h. */
#include "endpoint.h"

#include "base/mem.h"
#include "base/num.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct endpoint {
    struct MHD_Daemon *d;
    endpoint_fn fn;
    void *ctx;
    int port;
    struct endpoint_opts o; /* endpoint_start_opts */
    char *cert, *key;
};

/* One request's upload (endpoint_start_opts). */
struct upload {
    struct buf body;
    bool too_large;
    bool answered;
};

const char *endpoint_header(const struct endpoint_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

static enum MHD_Result send_body(struct MHD_Connection *conn, int status, struct buf *body,
                                 const char *ct)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(body->len, body->data ? body->data : (char *)"",
                                        MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", ct);
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result call_opts(struct endpoint *e, struct MHD_Connection *conn,
                                 const char *url, const char *method, struct upload *u)
{
    struct endpoint_request req = {
        .method = method,
        .path = url,
        .body = u->too_large ? "" : buf_str(&u->body),
        .body_len = u->too_large ? 0 : u->body.len,
        .body_too_large = u->too_large,
        .conn = conn,
    };
    struct buf out;
    buf_init(&out, TERN_HTTP_MAX_BODY);
    const char *ct = "text/plain; charset=utf-8";
    int status = e->o.fn(e->o.ctx, &req, &out, &ct);
    u->answered = true;
    enum MHD_Result ok = send_body(conn, status, &out, ct);
    buf_done(&out);
    return ok;
}

static enum MHD_Result answer_opts(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version, const char *upload,
                                   size_t *upload_size, void **state)
{
    (void)version;
    struct endpoint *e = cls;
    struct upload *u = *state;
    if (!u) { /* first call: headers only */
        u = xcalloc(1, sizeof *u);
        buf_init(&u->body, e->o.max_body);
        *state = u;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        int64_t n;
        if (cl && num_parse_range(cl, 0, INT64_MAX, &n) == 0 && (uint64_t)n > e->o.max_body) {
            u->too_large = true; /* answered before a byte of it is read */
            return call_opts(e, conn, url, method, u);
        }
        return MHD_YES;
    }
    if (u->answered) {
        *upload_size = 0; /* the rest of a refused body is dropped */
        return MHD_YES;
    }
    if (*upload_size) {
        if (!u->too_large && buf_append(&u->body, upload, *upload_size)) {
            u->too_large = true;
            buf_done(&u->body);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return call_opts(e, conn, url, method, u);
}

static void completed(void *cls, struct MHD_Connection *conn, void **state,
                      enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    struct upload *u = *state;
    if (u) {
        buf_done(&u->body);
        free(u);
    }
    *state = NULL;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state)
{
    (void)version;
    (void)upload;
    struct endpoint *e = cls;
    if (!*state) { /* first call: headers only */
        *state = e;
        return MHD_YES;
    }
    if (*upload_size) /* no bodies accepted */
        *upload_size = 0;
    struct buf body;
    buf_init(&body, TERN_HTTP_MAX_BODY);
    const char *ct = "text/plain; charset=utf-8";
    int status;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        status = 405;
        buf_puts(&body, "method not allowed\n");
    } else {
        status = e->fn(e->ctx, url, &body, &ct);
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(body.len, body.data ? body.data : (char *)"",
                                        MHD_RESPMEM_MUST_COPY);
    buf_done(&body);
    MHD_add_response_header(r, "Content-Type", ct);
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static int parse_addr(const char *addr, struct sockaddr_in *sa, struct tern_err *err)
{
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return err_set(err, -EINVAL, "address %s: expected HOST:PORT", addr);
    int64_t port;
    if (num_parse_range(colon + 1, 0, 65535, &port))
        return err_set(err, -EINVAL, "address %s: bad port", addr);
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    size_t hl = (size_t)(colon - addr);
    char host[64];
    if (hl >= sizeof host)
        return err_set(err, -EINVAL, "address %s: bad host", addr);
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (hl == 0 || strcmp(host, "0.0.0.0") == 0)
        sa->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return err_set(err, -EINVAL, "address %s: host must be an IPv4 address", addr);
    return 0;
}

static void set_port(struct endpoint *e, const struct sockaddr_in *sa)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(e->d, MHD_DAEMON_INFO_BIND_PORT);
    e->port = info ? info->port : (int)ntohs(sa->sin_port);
}

int endpoint_start(const char *addr, endpoint_fn fn, void *ctx, struct endpoint **ret,
                   struct tern_err *err)
{
    struct sockaddr_in sa;
    int r = parse_addr(addr, &sa, err);
    if (r)
        return r;
    struct endpoint *e = xcalloc(1, sizeof *e);
    e->fn = fn;
    e->ctx = ctx;
    e->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            answer, e, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_END);
    if (!e->d) {
        free(e);
        return err_set(err, -EADDRINUSE, "cannot listen on %s", addr);
    }
    set_port(e, &sa);
    *ret = e;
    return 0;
}

int endpoint_start_opts(const char *addr, const struct endpoint_opts *o, struct endpoint **ret,
                        struct tern_err *err)
{
    struct sockaddr_in sa;
    int r = parse_addr(addr, &sa, err);
    if (r)
        return r;
    bool tls = o->cert_pem && *o->cert_pem;
    if (tls != (o->key_pem && *o->key_pem))
        return err_set(err, -EINVAL, "%s: a TLS certificate needs its key and the key its "
                                     "certificate", addr);
    struct endpoint *e = xcalloc(1, sizeof *e);
    e->o = *o;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG;
    unsigned maxc = o->max_connections ? o->max_connections : 64;
    if (tls) {
        e->cert = xstrdup(o->cert_pem);
        e->key = xstrdup(o->key_pem);
        e->d = MHD_start_daemon(flags | MHD_USE_TLS, 0, NULL, NULL, answer_opts, e,
                                MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                MHD_OPTION_HTTPS_MEM_KEY, e->key, MHD_OPTION_HTTPS_MEM_CERT,
                                e->cert, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                                MHD_OPTION_CONNECTION_LIMIT, maxc, MHD_OPTION_END);
    } else {
        e->d = MHD_start_daemon(flags, 0, NULL, NULL, answer_opts, e, MHD_OPTION_SOCK_ADDR,
                                (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, completed,
                                NULL, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                                MHD_OPTION_CONNECTION_LIMIT, maxc, MHD_OPTION_END);
    }
    if (!e->d) {
        free(e->cert);
        free(e->key);
        free(e);
        return err_set(err, -EADDRINUSE, "cannot listen on %s%s", addr,
                       tls ? " with TLS (is the certificate and key PEM valid?)" : "");
    }
    set_port(e, &sa);
    *ret = e;
    return 0;
}

int endpoint_port(const struct endpoint *e)
{
    return e->port;
}

void endpoint_stop(struct endpoint *e)
{
    if (!e)
        return;
    MHD_stop_daemon(e->d);
    free(e->cert);
    free(e->key);
    free(e);
}
