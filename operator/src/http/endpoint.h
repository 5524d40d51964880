/* endpoint.h - a tiny HTTP server for a daemon's own endpoints (/metrics,
 * /healthz, /readyz) on libmicrohttpd.
 *
 * GET/HEAD only, no request bodies, answers produced by one callback on
 * libmicrohttpd's internal thread. The callback fills `body` (bounded by
 * TERN_HTTP_MAX_BODY) and returns the HTTP status. Not for APIs with request
 * bodies or streams (tern-sandboxd and tern-dev have their own servers).
 */
#ifndef TERN_ENDPOINT_H
#define TERN_ENDPOINT_H

#include "base/buf.h"
#include "base/err.h"

typedef int (*endpoint_fn)(void *ctx, const char *path, struct buf *body,
                           const char **content_type);

struct endpoint;

/* Listens on addr ("HOST:PORT", ":PORT" = all interfaces, port 0 = any free
 * port) and serves fn. Returns 0 and *ret, or -EINVAL (bad address) /
 * -EADDRINUSE / -EIO with err set. */
int endpoint_start(const char *addr, endpoint_fn fn, void *ctx, struct endpoint **ret,
                   struct tern_err *err);
/* The bound port. */
int endpoint_port(const struct endpoint *e);
/* Stops and frees (accepts NULL). */
void endpoint_stop(struct endpoint *e);

#endif
