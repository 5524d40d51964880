/* apiagg.h - tern-dev's aggregation layer (kube-aggregator's part that
 * Tern uses): an APIService (apiregistration.k8s.io/v1) with spec.service
 * makes /apis/<group>/<version>/... a proxy to that Service's backend, the
 * way kube-apiserver does it with --enable-aggregator-routing:
 *
 *   - the backend: the Service's EndpointSlices (label
 *     kubernetes.io/service-name), a ready endpoint on the slice port named
 *     like the Service port; for a Service with a selector and no slices
 *     (tern-dev runs no EndpointSlice controller), a ready pod it selects,
 *     on the port's targetPort;
 *   - TLS verified against spec.caBundle for the name <service>.<ns>.svc
 *     (or not at all with insecureSkipTLSVerify), presenting tern-dev's
 *     front-proxy client certificate (CN front-proxy-client);
 *   - the caller (already authenticated and authorized by tern-dev's RBAC)
 *     in X-Remote-User and X-Remote-Group; any such header of the client is
 *     dropped;
 *   - the answer streamed back as it comes (watches, follow streams);
 *   - discovery: the group in /apis, /apis/<group> answered here, the rest
 *     (including /apis/<group>/<version>) by the backend.
 * APIService status is not maintained (kube-aggregator's availability
 * controller): a backend that does not answer is a 503 for that request.
 *
 * APIServices are read from the store at most once a second. Thread-safe.
 */
#ifndef TERN_APIAGG_H
#define TERN_APIAGG_H

#include "apirest.h"
#include "base/err.h"
#include "rbac.h"

#include <cJSON.h>
#include <stdbool.h>
#include <sys/types.h>

struct apiagg;

struct apiagg_config {
    struct apirest *rest;        /* borrowed: APIServices, Services, slices, pods */
    const char *client_cert_pem; /* the front-proxy client certificate and key (copied) */
    const char *client_key_pem;
};

int apiagg_new(const struct apiagg_config *cfg, struct apiagg **ret, struct tern_err *err);
void apiagg_free(struct apiagg *a);

/* The APIService serving path (/apis/G or /apis/G/V[/...]), a copy owned
 * by the caller, or NULL (not aggregated: tern-dev serves it). */
cJSON *apiagg_match(struct apiagg *a, const char *path);
/* Adds an APIGroup object for every aggregated group to groups (/apis). */
void apiagg_add_groups(struct apiagg *a, cJSON *groups);
/* /apis/<group> of an aggregated group (owned), or NULL. */
cJSON *apiagg_group_doc(struct apiagg *a, const char *group);

struct apiagg_conn;

/* Proxies one request to apiservice's backend: connects, sends method
 * path_query (body: n bytes, may be 0), user and groups, reads the answer's
 * head. Returns 0 and *ret, or TERN_EUNREACHABLE (no endpoint, connection or
 * TLS failed: answer 503) with the reason in err. */
int apiagg_open(struct apiagg *a, const cJSON *apiservice, const char *method,
                const char *path_query, const char *accept, const char *content_type,
                const char *body, size_t n, const struct rbac_user *user,
                struct apiagg_conn **ret, struct tern_err *err);
int apiagg_status(const struct apiagg_conn *c);
/* The answer's Content-Type, or "application/json". */
const char *apiagg_content_type(const struct apiagg_conn *c);
/* The next bytes of the answer's body (chunked encoding removed): > 0, 0 at
 * its end, -EAGAIN when nothing came within timeout_ms, another negative
 * errno when the connection failed. */
ssize_t apiagg_read(struct apiagg_conn *c, char *out, size_t max, int timeout_ms);
void apiagg_close(struct apiagg_conn *c);

#endif
