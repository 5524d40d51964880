/* apiserver.h - the HTTPS front of tern-dev (libmicrohttpd, one thread per
 * connection).
 *
 * Authenticates `Authorization: Bearer <token>` (and, with an apiauth,
 * authorizes: apiauth.h), reads bodies up to
 * TERN_KUBE_MAX_OBJECT (+1 byte to detect oversize, then 413), decodes the
 * query, hands the request to apirest, and streams watches with chunked
 * encoding: each event line is flushed as it comes; a client that went
 * away is noticed within a second (socket hang-up) and its watch ends.
 * Paths of an aggregated API (an APIService with a service) are proxied to
 * it once authorized, and streamed back the same way.
 */
#ifndef TERN_APISERVER_H
#define TERN_APISERVER_H

#include "apiagg.h"
#include "apiauth.h"
#include "apirest.h"
#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

struct apiserver;

struct apiserver_config {
    struct apirest *rest;     /* borrowed */
    const char *cert_pem;     /* serving certificate and key (copied) */
    const char *key_pem;
    const char *token;        /* the one bearer token (copied), when auth is NULL;
                               * both NULL = no authentication */
    struct apiauth *auth;     /* borrowed, may be NULL: authentication and
                               * authorization of every request */
    struct apiagg *agg;       /* borrowed, may be NULL: APIService proxying
                               * (apiagg.h), after authorization */
    uint16_t port;            /* 0 = any free port */
};

/* Starts serving on 127.0.0.1. Returns 0 and *ret, or -EADDRINUSE / -EIO. */
int apiserver_start(const struct apiserver_config *cfg, struct apiserver **ret,
                    struct tern_err *err);
/* The bound port. */
uint16_t apiserver_port(const struct apiserver *s);
/* Ends every watch, stops accepting, joins all threads and frees. */
void apiserver_stop(struct apiserver *s);

#endif
