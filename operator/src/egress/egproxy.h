/* egproxy.h - the egress proxy's server: HTTP CONNECT tunnels and plain-HTTP
 * forwarding, each connection decided for the session its client belongs to
 * (docs/egress.md).
 *
 * Per connection, on a thread of its own:
 *   1. the client is its source address (getpeername), looked up in the
 *      egmap; nothing it sends identifies it;
 *   2. the request head is read (TERN_EGRESS_MAX_HEAD bytes within
 *      head_timeout_ms) and parsed (proxyreq.h): 400 on a malformed or
 *      unserved request;
 *   3. egpolicy decides the target; a name is resolved once (egresolve.h)
 *      and one accepted address chosen; the proxy connects to exactly that
 *      address (the next accepted one if that fails), so a rebinding answer
 *      is never used: 403 when refused, 502 when the name does not resolve
 *      or no connection is made;
 *   4. CONNECT: "200 Connection established", then bytes both ways
 *      untouched (TLS is never terminated or inspected); a plain-HTTP
 *      request: the head rewritten for the origin (origin-form target, Host
 *      from the URI, hop-by-hop fields dropped, Connection: close), then
 *      bytes both ways until the origin closes (one request per connection);
 *   5. idle_timeout_s without traffic either way ends a connection.
 * Refusals are answered with a status line whose reason phrase carries the
 * short reason (pip and Python show it for CONNECT) and a text/plain body
 * with the whole explanation (curl and git show it for plain HTTP), plus the
 * header X-Tern-Egress-Refused: <reason>.
 *
 * Every decision is reported once through on_decision (from the connection's
 * thread), for metrics, logs and Events; the library itself does not log.
 */
#ifndef TERN_EGPROXY_H
#define TERN_EGPROXY_H

#include "base/buf.h"
#include "base/err.h"
#include "egress/egmap.h"
#include "egress/egpolicy.h"
#include "egress/egresolve.h"

#include <stddef.h>
#include <stdint.h>

struct egproxy_decision {
    const struct egmap_client *client; /* NULL: the source identifies no session */
    const char *source;                /* the client's address */
    const char *method;                /* "CONNECT", "GET", ...; "" before parsing */
    const char *target;                /* "host:port"; "" before parsing */
    const char *address;               /* the address connected to, or "" */
    enum egpolicy_reason reason;
    const char *message;               /* the explanation the client got */
};

struct egproxy_config {
    const char *listen;        /* "HOST:PORT", ":PORT", "[v6]:PORT"; port 0 = any */
    struct egmap *map;         /* borrowed */
    struct egresolve *resolver; /* borrowed */
    const struct session_cidr *assume_public; /* borrowed; tests only */
    size_t nassume;
    int head_timeout_ms;       /* default 10000 */
    int connect_timeout_ms;    /* default 10000 */
    int idle_timeout_s;        /* default 600 */
    unsigned max_connections;  /* default 1024; more are answered 503 */
    void (*on_decision)(void *ctx, const struct egproxy_decision *d);
    void *ctx;
};

struct egproxy;

/* Binds and starts the accept thread. Returns 0 and *ret, or -errno /
 * -EINVAL (bad address) with err set. */
int egproxy_start(const struct egproxy_config *cfg, struct egproxy **ret, struct tern_err *err);
/* The bound port. */
int egproxy_port(const struct egproxy *p);
/* Connections being served now. */
unsigned egproxy_active(struct egproxy *p);
/* Stops accepting, ends every connection, waits for their threads, frees.
 * Accepts NULL. */
void egproxy_stop(struct egproxy *p);

/* The refusal answer for a decision (status line, headers, body), appended
 * to out; status 400, 403, 502 or 503. Pure; used by the server and tests. */
void egproxy_refusal(int status, enum egpolicy_reason reason, const char *message,
                     struct buf *out);

#endif
