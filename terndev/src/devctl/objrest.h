/* objrest.h - the objstore interface (objstore.h) over the Kubernetes REST
 * API: each operation is one request, so the controllers and the kubelet
 * can run against tern-dev's REST layer in-process (a transport calling
 * apirest_handle) or over HTTPS (objrest_https_transport, e.g. against a
 * running tern-dev or a real cluster).
 *
 * Mapping (gvr "v1/pods" -> /api/v1, "batch/v1/jobs" -> /apis/batch/v1;
 * cluster-scoped: namespaces, nodes, persistentvolumes, clusterroles,
 * clusterrolebindings, customresourcedefinitions):
 *   get            GET    .../namespaces/NS/RES/NAME
 *   list           GET    .../[namespaces/NS/]RES  (items get the list's
 *                         apiVersion and kind, which the API omits)
 *   create         POST   .../namespaces/NS/RES
 *   update         PUT    .../RES/NAME; for a deleting namespace PUT
 *                         .../namespaces/NAME/finalize
 *   update_status  PUT    .../RES/NAME/status
 *   remove         DELETE .../RES/NAME with a DeleteOptions body
 *                         (propagationPolicy, gracePeriodSeconds,
 *                         preconditions uid / resourceVersion)
 *   bind           POST   /api/v1/namespaces/NS/pods/NAME/binding (when the
 *                         server answers 404/405 for it: GET the pod, set
 *                         spec.nodeName, PUT)
 *   wait           polls GET /api/v1/namespaces?limit=1 every 200 ms until
 *                  the list resourceVersion passes after_rv
 *   changes        from objrest_set_changes_fn (tern-dev: its watch hub, in
 *                  process); without one, -ENOTSUP (a cache lists instead)
 * Status codes: 404 -> TERN_ENOTFOUND, 409 AlreadyExists -> -EEXIST,
 * 409 otherwise -> TERN_ECONFLICT, 400/422 -> TERN_EINVALID, 401/403 ->
 * TERN_EAUTH, other non-2xx -> TERN_EHTTP; the Status message goes to err.
 */
#ifndef TERN_OBJREST_H
#define TERN_OBJREST_H

#include "base/err.h"
#include "devctl/objstore.h"

#include <cJSON.h>

#include <stddef.h>
#include <stdint.h>

/* One HTTP exchange. path includes the query string. Returns 0 with the
 * status and a response body (owned by the caller, may be NULL when
 * empty), or an error when no response was obtained. */
struct objrest_transport {
    int (*request)(void *ctx, const char *method, const char *path, const char *body,
                   size_t body_len, int *ret_status, char **ret_body, size_t *ret_len,
                   struct tern_err *err);
    void *ctx;
};

struct objrest;

/* A REST-backed store over t (copied; t->ctx borrowed). Thread-safe when
 * the transport is. Never fails. */
struct objrest *objrest_new(const struct objrest_transport *t);
void objrest_free(struct objrest *r);
struct objstore objrest_objstore(struct objrest *r);

/* wait is done by fn instead of polling the namespaces list every 200 ms
 * (tern-dev: its watch hub, woken by the very write; tern-node: a watch of
 * its own pods, as a node may not list namespaces). fn returns 0 once the
 * store's revision passed after (or something changed), TERN_ETIMEOUT
 * otherwise. */
typedef int (*objrest_wait_fn)(void *ctx, int64_t after, int timeout_ms);
void objrest_set_wait_fn(struct objrest *r, objrest_wait_fn fn, void *ctx);

/* changes are answered by fn (same contract as objstore_ops.changes):
 * tern-dev's in-process watch hub. Without it (tern-node over HTTPS) and
 * for a resource with a list selector (the changes would not be filtered)
 * objstore_changes answers -ENOTSUP. */
typedef int (*objrest_changes_fn)(void *ctx, const char *const *gvrs, size_t n,
                                  const char *after_rv, struct objstore_changes *ret,
                                  struct tern_err *err);
void objrest_set_changes_fn(struct objrest *r, objrest_changes_fn fn, void *ctx);

/* Every list of gvr gets fieldSelector=selector (e.g. "v1/pods" with
 * "spec.nodeName=NODE": a node may list only its own pods). Copied; one
 * gvr at a time. */
void objrest_set_list_selector(struct objrest *r, const char *gvr, const char *selector);

/* One request outside the objstore operations (a subresource such as
 * serviceaccounts/NAME/token): body (may be NULL) is sent as JSON; on 2xx
 * returns 0 and *ret (the parsed body or NULL; ret may be NULL), else the
 * status mapped as above. */
int objrest_call(struct objrest *r, const char *method, const char *path, const cJSON *body,
                 cJSON **ret, struct tern_err *err);

/* An HTTPS transport (libcurl) to server (e.g. "https://127.0.0.1:6443")
 * with a CA PEM (NULL: system CAs) and bearer token (may be NULL); requests
 * are serialised by a mutex. Returns 0 and *ret. */
struct objrest_https;
int objrest_https_new(const char *server, const char *ca_pem, const char *token,
                      struct objrest_https **ret, struct tern_err *err);
/* The same from a kubeconfig (server, CA, client certificate and key or a
 * static token; copied): how tern-node talks to a real API server as
 * system:node:<name>. */
struct kubeconfig;
int objrest_https_from_kubeconfig(const struct kubeconfig *kc, struct objrest_https **ret,
                                  struct tern_err *err);
void objrest_https_free(struct objrest_https *h);
/* The User-Agent of its requests (default "tern-node/0.1.0"); kube-apiserver
 * names the field manager of our writes after the part before the '/'. */
void objrest_https_set_user_agent(struct objrest_https *h, const char *ua);
struct objrest_transport objrest_https_transport(struct objrest_https *h);

#endif
