/* apirest.h - the Kubernetes REST semantics, independent of HTTP.
 *
 * apirest_handle takes one decoded request (method, path, query arguments,
 * headers that matter, body) and produces the response: a status code and a
 * JSON body (always a Status object on errors), or a watch stream the HTTP
 * layer pumps with apirest_watch_next. It implements discovery, CRUD with
 * the real preconditions and errors, patches, CRD handling and custom
 * resources, server-side tables, selectors, pagination and watches, on top
 * of apistore (etcd) and apiwatch (the shared watch).
 *
 * Thread-safe: many requests may be handled concurrently.
 */
#ifndef TERN_APIREST_H
#define TERN_APIREST_H

#include "apires.h"
#include "apistore.h"
#include "apiwatch.h"
#include "base/buf.h"
#include "rbac.h"

#include <cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct apirest {
    struct apistore store;
    struct apiwatch_hub *hub;       /* borrowed */
    struct apires_registry reg;
    pthread_mutex_t crd_mu;         /* serialises CRD writes and table reloads */
    char *server_address;           /* host:port for /api */
    /* Set (before serving) when a garbage collector and a namespace
     * controller run in the process (part 2). Then, as in Kubernetes,
     * propagationPolicy Foreground/Orphan add the foregroundDeletion/orphan
     * finalizers (jobs default to Orphan), and deleting a namespace marks it
     * Terminating until its spec.finalizers are emptied through
     * namespaces/NAME/finalize. When false both complete at once: there is
     * nobody to remove those finalizers. */
    bool lifecycle_controllers;
    /* Optional (part 2's kubelet): pods/log. log_path gives the log file of
     * a container of pod (container NULL = the default one; previous = the
     * run before the current one) as a new path, or TERN_ENOTFOUND;
     * log_running says whether that file may still grow (follow=true reads
     * it until then). NULL: pods/log answers 404. */
    int (*log_path)(void *ctx, const cJSON *pod, const char *container, bool previous,
                    char **ret, struct tern_err *err);
    bool (*log_running)(void *ctx, const cJSON *pod, const char *container,
                        int64_t restart_count);
    void *log_ctx;
};

struct apirest_arg {
    const char *key;
    const char *value;
};

struct apirest_req {
    const char *method;
    const char *path;               /* without the query string */
    const struct apirest_arg *args; /* decoded query arguments */
    size_t nargs;
    const char *content_type;       /* or NULL */
    const char *accept;             /* or NULL */
    const char *body;
    size_t body_len;
    bool body_too_large;            /* the HTTP layer stopped reading at the limit */
    /* What the requesting user may do, for SelfSubjectAccessReviews (the
     * HTTP layer passes apiauth's decision); NULL = everything (in-process
     * callers). reason as rbac_allows. */
    bool (*can)(void *ctx, const struct rbac_request *r, char *reason, size_t reason_len);
    void *can_ctx;
    const struct rbac_user *user;   /* who asks (SelfSubjectReview); NULL = in-process */
    /* What any user may do, for SubjectAccessReviews (apiauth_review);
     * NULL = everything. */
    bool (*review)(void *ctx, const struct rbac_user *u, const struct rbac_request *r,
                   char *reason, size_t reason_len);
    void *review_ctx;
};

struct apirest_watch;

struct apirest_resp {
    int status;
    const char *content_type;       /* static string */
    struct buf body;
    char *warning;                  /* value of one Warning header, or NULL */
    struct apirest_watch *watch;    /* non-NULL: stream this (status 200) */
};

/* Sets up the REST layer over an etcd client and a running hub (both
 * borrowed). Loads the CRDs. Returns 0 or an etcd error. */
int apirest_init(struct apirest *s, struct etcd *etcd, struct apiwatch_hub *hub,
                 const char *server_address, struct tern_err *err);
void apirest_done(struct apirest *s);

/* Creates the namespaces every cluster has (default, kube-system,
 * kube-public, kube-node-lease) when missing. */
int apirest_bootstrap(struct apirest *s, struct tern_err *err);

/* Handles one request; resp must be zeroed; release with apirest_resp_done. */
void apirest_handle(struct apirest *s, const struct apirest_req *req, struct apirest_resp *resp);
void apirest_resp_done(struct apirest_resp *resp);

/* In-process request for controllers living in the same process (part 2):
 * the same semantics as over HTTPS (defaulting, validation, generation and
 * status rules, patches, Status errors). path may carry a query string
 * ("...?labelSelector=app%3Dweb"); body is JSON text or NULL; content_type
 * NULL means application/json (use the patch types for PATCH). Returns the
 * HTTP status and sets *ret_body (may be NULL) to the parsed response (an
 * object or a Status), owned by the caller. Watches are refused (400): use
 * apiwatch_subscribe. */
int apirest_do(struct apirest *s, const char *method, const char *path,
               const char *content_type, const char *body, cJSON **ret_body);

/* Streams a watch: appends zero or more complete event lines to out,
 * waiting at most timeout_ms for something to send. Returns 0 to continue,
 * 1 when the stream is over (out may still hold final lines). */
int apirest_watch_next(struct apirest_watch *w, struct buf *out, long timeout_ms);
void apirest_watch_free(struct apirest_watch *w);

/* The changes of resources, for watch-driven caches in the same process
 * (tern-dev's controllers and kubelet, through objstore_changes): every
 * change under the resources gvrs[0..n) ("v1/pods", "batch/v1/jobs",
 * "tern.dev/v1alpha1/agentsessions") after revision after, in revision
 * order. Each object is in the served shape with apiVersion and kind (what
 * a list's items are with those added); a deletion gives the last state
 * (or only metadata.namespace and name when the hub has no previous
 * value). fn takes obj; its non-zero return stops and is returned.
 * First waits (at most timeout_ms) until the hub has seen the store's
 * current revision, so a caller sees every write completed before the
 * call. Returns 0 and *ret_rev (every change up to it was given: at least
 * that revision unless the wait timed out), TERN_ECOMPACTED when after is
 * older than the hub's window, -ECANCELED (the hub stopped), etcd errors.
 * n == 0 returns 0 at once. */
typedef int (*apirest_change_fn)(void *ctx, size_t which, bool deleted, int64_t rev,
                                 cJSON *obj);
int apirest_changes(struct apirest *s, const char *const *gvrs, size_t n, int64_t after,
                    long timeout_ms, apirest_change_fn fn, void *ctx, int64_t *ret_rev,
                    struct tern_err *err);

/* Path parsing (exposed for tests and the fuzzer). */
enum apirest_path_kind {
    APIREST_P_INVALID = 0,
    APIREST_P_VERSION,      /* /version */
    APIREST_P_HEALTH,       /* /healthz /readyz /livez */
    APIREST_P_API,          /* /api */
    APIREST_P_APIS,         /* /apis */
    APIREST_P_GROUP,        /* /apis/G */
    APIREST_P_GROUPVERSION, /* /api/v1, /apis/G/V */
    APIREST_P_RESOURCE,     /* a collection or an object */
    APIREST_P_OPENAPI_V2,
    APIREST_P_OPENAPI_V3,
};

struct apirest_path {
    enum apirest_path_kind kind;
    char *group, *version, *ns, *resource, *name, *sub; /* owned, NULL when absent */
};

/* Parses a URL path (percent-decoded segments). Returns 0 and fills p
 * (release with apirest_path_done), or -EINVAL. */
int apirest_parse_path(const char *path, struct apirest_path *p);
void apirest_path_done(struct apirest_path *p);

#endif
