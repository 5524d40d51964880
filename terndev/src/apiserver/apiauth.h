/* apiauth.h - who a tern-dev request comes from, and whether it may go on.
 *
 * Authentication (bearer tokens only):
 *   - tern-dev's own token (the kubeconfig's) is the user "tern-dev:admin"
 *     in the groups system:masters and system:authenticated: unrestricted,
 *     and neither authorized nor logged (the operator's tests and kubectl
 *     run as this user);
 *   - a service-account token minted by the local kubelet (devctl/satoken.h)
 *     is "system:serviceaccount:NS:NAME" in system:serviceaccounts,
 *     system:serviceaccounts:NS and system:authenticated, as long as its MAC
 *     verifies AND the ServiceAccount NS/NAME still exists with the uid the
 *     token names (a deleted and re-created account invalidates old tokens);
 *   - anything else is 401.
 * A user may act as another (Impersonate-User / Impersonate-Group headers,
 * as `kubectl --as=... --as-group=...` sends) when RBAC allows it the verb
 * `impersonate` on `users`, `groups` or, for a service account,
 * `serviceaccounts` NS/NAME (admins may); the request is then authorized
 * as that user, who is always in system:authenticated (and, for a service
 * account named without groups, in its account groups).
 *
 * Authorization of every other user is RBAC (rbac.h) over the Roles,
 * ClusterRoles and bindings stored in etcd. They are read at most once a
 * second (a cache); a denial is decided again on a fresh read, so a binding
 * is effective for the very next request after it was written, and a
 * revocation within a second. Then, as the OwnerReferencesPermissionEnforcement
 * admission plugin does, a create (POST) or update (PUT) whose JSON body has
 * an ownerReference with blockOwnerDeletion=true also needs `update` on the
 * owner's `<resource>/finalizers` in the request's namespace (PATCH bodies are
 * not inspected: a documented gap).
 *
 * Denials are 403 Forbidden Statuses with kube-apiserver's message.
 *
 * Decision log (optional, tern-dev's own format, one JSON object per line,
 * for tests that check a manifest's RBAC is exactly what a component uses):
 *   {"user":"system:serviceaccount:ns:sa","verb":"list","apiGroup":"",
 *    "resource":"pods","subresource":"","namespace":"","name":"",
 *    "path":"/api/v1/pods","allowed":true,"reason":"RBAC: allowed by ..."}
 * one line per decision, including each ownerReference check.
 *
 * Thread-safe (called from the server's connection threads).
 */
#ifndef TERN_APIAUTH_H
#define TERN_APIAUTH_H

#include "apirest.h"
#include "base/err.h"
#include "rbac.h"

#include <cJSON.h>
#include <stdbool.h>

#define APIAUTH_ADMIN_USER "tern-dev:admin"

struct apiauth;

struct apiauth_config {
    struct apirest *rest;            /* borrowed; the objects and resource table */
    const char *admin_token;         /* copied; required */
    const unsigned char *sa_key;     /* SATOKEN_KEY_LEN bytes (copied); NULL: no SA tokens */
    const char *log_path;            /* decision log, appended; NULL: none */
};

/* The authenticated user of one request. */
struct apiauth_identity {
    struct apiauth *auth;
    bool admin;
    char name[560];
    char groups[RBAC_MAX_GROUPS][300];
    struct rbac_user user; /* points into this struct: do not copy it */
};

/* Returns 0 and *ret, or -errno when the log cannot be opened. */
int apiauth_new(const struct apiauth_config *cfg, struct apiauth **ret, struct tern_err *err);
void apiauth_free(struct apiauth *a);

/* Authenticates the value of an Authorization header (NULL when absent).
 * Returns 0 and fills *ret, or TERN_EAUTH (answer 401). */
int apiauth_authenticate(struct apiauth *a, const char *authorization,
                         struct apiauth_identity *ret);

/* Makes id act as user (may be NULL when ngroups is 0: no impersonation)
 * in groups. Returns 0, or TERN_EAUTH / TERN_EINVALID with *ret_status a
 * 403 (not allowed to impersonate) or 400 (groups without a user, too many
 * groups, names too long) Status (caller owns it). */
int apiauth_impersonate(struct apiauth *a, struct apiauth_identity *id, const char *user,
                        const char *const *groups, size_t ngroups, cJSON **ret_status);

/* What id (a struct apiauth_identity *) may do: apirest_req.can. Admins
 * may do everything. Not logged (a review is not a use). */
bool apiauth_can(void *id, const struct rbac_request *r, char *reason, size_t reason_len);

/* What user u may do (apirest_req.review, for SubjectAccessReviews: ctx is
 * the struct apiauth *): RBAC, and everything for system:masters. Not logged. */
bool apiauth_review(void *auth, const struct rbac_user *u, const struct rbac_request *r,
                    char *reason, size_t reason_len);

/* Authorizes one request of id (admins always pass). Returns 0 to go on, or
 * TERN_EAUTH with *ret_status a 403 Status (caller owns it). */
int apiauth_authorize(struct apiauth *a, const struct apiauth_identity *id,
                      const struct apirest_req *req, cJSON **ret_status);

#endif
