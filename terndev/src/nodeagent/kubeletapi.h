/* kubeletapi.h - tern-node's kubelet endpoint: the HTTPS server a real API
 * server calls for `kubectl logs` (GET /containerLogs/NS/POD/CONTAINER with
 * follow, previous, tailLines, limitBytes), served from the kubelet's log
 * files (kubelet/podlog.h).
 *
 * Trust: TLS with the node's serving certificate; every client must present
 * a certificate signed by the client CA (the API server presents its
 * --kubelet-client-certificate). The certificate's CN is the user and its O
 * entries the groups, and each request is authorized like a kubelet with
 * webhook authorization does it: a SubjectAccessReview for verb get on
 * nodes/proxy (nodes/healthz for /healthz) of this node, through the
 * authorize callback. Nothing is served to anyone else.
 *
 * One thread accepts; each connection gets its own thread (at most
 * TERN_KUBELETAPI_MAX_CONNS at once, beyond that a connection is closed at
 * once), one request per connection (Connection: close). A follow streams
 * chunked until the container stops, the client goes away or the server
 * stops. The process must ignore SIGPIPE.
 */
#ifndef TERN_KUBELETAPI_H
#define TERN_KUBELETAPI_H

#include "base/err.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A parsed request line + the query options it carries (pure, for tests
 * and the fuzz target). */
struct kubeletapi_req {
    char method[8];
    enum { KUBELETAPI_HEALTHZ = 1, KUBELETAPI_LOGS } route;
    char ns[254], pod[254], container[254];
    bool follow, previous;
    int64_t tail_lines;  /* -1: all */
    int64_t limit_bytes; /* -1: none */
};

/* Parses the head of an HTTP/1.x request (up to the blank line, len bytes).
 * Returns 0 and *ret, TERN_ENOTFOUND for a path that is not served,
 * TERN_EINVALID for a malformed request (message in err): bad request
 * line, a name that is not a DNS-1123 label/subdomain, a bad number. */
int kubeletapi_parse(const char *head, size_t len, struct kubeletapi_req *ret,
                     struct tern_err *err);

struct kubeletapi_cfg {
    const char *listen;         /* "host:port"; port 0 = any free port */
    const char *cert_file;      /* serving certificate (PEM chain) */
    const char *key_file;
    const char *client_ca_file; /* CA of acceptable client certificates */
    const char *dir;            /* the kubelet's DIR (log files) */
    const char *node;           /* this node's name */
    /* May user (with groups) do verb on nodes/<subresource> of node?
     * 0 allowed, TERN_EAUTH denied, other codes: could not tell (denied). */
    int (*authorize)(void *ctx, const char *user, const char *const *groups, size_t ngroups,
                     const char *verb, const char *subresource, struct tern_err *err);
    /* The pod ns/name as it is now (owned by the caller) or TERN_ENOTFOUND. */
    int (*get_pod)(void *ctx, const char *ns, const char *name, cJSON **ret,
                   struct tern_err *err);
    void *ctx;
};

struct kubeletapi;

/* Loads the TLS material, binds and starts serving. Returns 0 and *ret, or
 * an error naming the file or the address. */
int kubeletapi_start(const struct kubeletapi_cfg *cfg, struct kubeletapi **ret,
                     struct tern_err *err);
/* The port it listens on. */
int kubeletapi_port(const struct kubeletapi *a);
/* Stops accepting, ends the streams, waits for every connection thread,
 * frees. Accepts NULL. */
void kubeletapi_stop(struct kubeletapi *a);

#endif
