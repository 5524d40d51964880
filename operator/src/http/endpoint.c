/* endpoint.c - a tiny HTTP server on libmicrohttpd. See endpoint.h. */
#include "endpoint.h"

#include "base/mem.h"
#include "base/num.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct endpoint {
    struct MHD_Daemon *d;
    endpoint_fn fn;
    void *ctx;
    int port;
};

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

int endpoint_start(const char *addr, endpoint_fn fn, void *ctx, struct endpoint **ret,
                   struct tern_err *err)
{
    const char *colon = strrchr(addr, ':');
    if (!colon)
        return err_set(err, -EINVAL, "address %s: expected HOST:PORT", addr);
    int64_t port;
    if (num_parse_range(colon + 1, 0, 65535, &port))
        return err_set(err, -EINVAL, "address %s: bad port", addr);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    size_t hl = (size_t)(colon - addr);
    char host[64];
    if (hl >= sizeof host)
        return err_set(err, -EINVAL, "address %s: bad host", addr);
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (hl == 0 || strcmp(host, "0.0.0.0") == 0)
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return err_set(err, -EINVAL, "address %s: host must be an IPv4 address", addr);
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
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(e->d, MHD_DAEMON_INFO_BIND_PORT);
    e->port = info ? info->port : (int)port;
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
    free(e);
}
