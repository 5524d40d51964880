/* sapi_kube.h - the aggregated API's Kubernetes side (docs/stream-api.md,
 * "Wiring"): the sapi_backend of the operator, made of
 *   - SubjectAccessReviews (authorization.k8s.io/v1), answers kept 10 s;
 *   - the controller's informer caches (sessions, their pods and Secrets);
 *   - the session's sandboxd, or a read-only viewer Job (children.h,
 *     children_viewer_job) started when a parked session's files are asked
 *     for (suspended: the reconcile resumes it once the token Secret and
 *     the NetworkPolicy it needs exist), and found again while it lives;
 * and a refresh thread that, every 30 s, reads the front-proxy trust from
 * kube-system/extension-apiserver-authentication into the server and keeps
 * the APIService's caBundle equal to the serving certificate's CA file.
 *
 * The library does not log: failures of the refresh reach on_error.
 */
#ifndef TERN_SAPI_KUBE_H
#define TERN_SAPI_KUBE_H

#include "controller/children.h"
#include "controller/controller.h"
#include "kube/kubeconfig.h"
#include "streamapi/sapi.h"

struct sapi_kube_config {
    struct kubeconfig *kube;                /* borrowed */
    struct controller *ctl;                 /* its caches (borrowed) */
    const struct children_config *children; /* images and classes of viewer Jobs */
    const char *ca_file;                    /* the serving certificate's CA, for the
                                             * APIService's caBundle; NULL: leave it */
    const char *apiservice;                 /* "v1alpha1.stream.tern.dev" */
    void (*on_error)(void *ctx, const char *what, const struct tern_err *err);
    void *ctx;
};

struct sapi_kube;

int sapi_kube_new(const struct sapi_kube_config *cfg, struct sapi_kube **ret,
                  struct tern_err *err);
/* Fills *ret with this backend's callbacks (etcd: the journal, borrowed). */
void sapi_kube_backend(struct sapi_kube *k, struct etcd *etcd, struct sapi_backend *ret);
/* Reads the trust once (its error is returned: the server then answers 401
 * until a later pass succeeds) and starts the refresh thread for s. */
int sapi_kube_start(struct sapi_kube *k, struct sapi *s, struct tern_err *err);
/* Stops the thread and frees (accepts NULL); before sapi_stop is fine. */
void sapi_kube_free(struct sapi_kube *k);

#endif
