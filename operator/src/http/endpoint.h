/* endpoint.h - a tiny HTTP server for a daemon's own endpoints (/metrics,
 * /healthz, /readyz) on libmicrohttpd.
 *
 * endpoint_start: GET/HEAD only, no request bodies, answers produced by one
 * callback on libmicrohttpd's internal thread. The callback fills `body`
 * (bounded by TERN_HTTP_MAX_BODY) and returns the HTTP status.
 *
 * endpoint_start_opts: the same server with HTTPS (a certificate and key in
 * PEM), bounded request bodies and a thread per connection, for small
 * request/response APIs such as the operator's webhook receiver. A body over
 * max_body is not kept: the callback sees body_too_large (and, when
 * Content-Length announces it, is called before any of it is read). Not for
 * streams (tern-sandboxd and tern-dev have their own servers).
 */
#ifndef TERN_ENDPOINT_H
#define TERN_ENDPOINT_H

#include "base/buf.h"
#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>

typedef int (*endpoint_fn)(void *ctx, const char *path, struct buf *body,
                           const char **content_type);

struct endpoint;

struct endpoint_request {
    const char *method, *path;
    const char *body; /* the raw body, NUL-terminated ("" when none) */
    size_t body_len;
    bool body_too_large; /* over max_body: body is empty */
    void *conn;          /* libmicrohttpd's connection (endpoint_header) */
};

/* A request header's value (name case-insensitive), or NULL. Borrowed for
 * the call. */
const char *endpoint_header(const struct endpoint_request *req, const char *name);

typedef int (*endpoint_req_fn)(void *ctx, const struct endpoint_request *req, struct buf *body,
                               const char **content_type);

struct endpoint_opts {
    const char *cert_pem, *key_pem; /* both: HTTPS; neither: HTTP */
    size_t max_body;                /* request bodies up to this many bytes */
    unsigned max_connections;       /* 0 = 64 */
    endpoint_req_fn fn;
    void *ctx;
};

/* Listens on addr ("HOST:PORT", ":PORT" = all interfaces, port 0 = any free
 * port) and serves fn. Returns 0 and *ret, or -EINVAL (bad address) /
 * -EADDRINUSE / -EIO with err set. */
int endpoint_start(const char *addr, endpoint_fn fn, void *ctx, struct endpoint **ret,
                   struct tern_err *err);
/* Listens on addr with o (copied; the PEM strings too). Errors as
 * endpoint_start, and -EINVAL for half a TLS pair. */
int endpoint_start_opts(const char *addr, const struct endpoint_opts *o, struct endpoint **ret,
                        struct tern_err *err);
/* The bound port. */
int endpoint_port(const struct endpoint *e);
/* Stops and frees (accepts NULL). */
void endpoint_stop(struct endpoint *e);

#endif
