/* rbac.h - Kubernetes RBAC authorization, as a pure decision.
 *
 * Decides whether a user may make a request, from the Roles, ClusterRoles,
 * RoleBindings and ClusterRoleBindings of rbac.authorization.k8s.io/v1 (the
 * rules of k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac):
 *
 *   - a ClusterRoleBinding grants its ClusterRole everywhere (cluster scope
 *     and every namespace); a RoleBinding grants its Role (same namespace)
 *     or ClusterRole only inside the binding's namespace;
 *   - subjects: User (name), Group (one of the user's groups),
 *     ServiceAccount ("system:serviceaccount:NS:NAME", NS defaulting to the
 *     RoleBinding's namespace);
 *   - a rule matches when verbs, apiGroups and resources match ("*" is a
 *     wildcard; a resource is "res" or "res/sub", and "*\/sub" matches any
 *     resource's sub), and resourceNames is empty or names the object (a
 *     request without a name never matches a rule with resourceNames);
 *     nonResourceURLs match exactly or by a trailing-"*" prefix and only
 *     count from ClusterRoleBindings;
 *   - built in, as the default system:discovery, system:public-info-viewer
 *     and system:basic-user bindings do: every member of
 *     system:authenticated may GET /api, /apis, /version, /openapi and the
 *     health paths, with or without a trailing path, and create
 *     selfsubjectaccessreviews, selfsubjectrulesreviews and
 *     (authentication.k8s.io) selfsubjectreviews;
 *   - the group system:masters is allowed everything.
 *
 * Nothing is allowed unless a rule says so. A rule with an unknown field
 * type (not a list of strings) is ignored, never widened. Aggregated
 * ClusterRoles count with the rules stored in them (tern-dev runs no
 * aggregation controller).
 *
 * Inputs are borrowed; nothing is retained.
 */
#ifndef TERN_RBAC_H
#define TERN_RBAC_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#define RBAC_MAX_GROUPS 8

struct rbac_user {
    const char *name;
    const char *groups[RBAC_MAX_GROUPS];
    size_t ngroups;
};

/* The request attributes (k8s.io/apiserver's authorizer.Attributes). */
struct rbac_request {
    const char *verb;        /* get list watch create update patch delete deletecollection,
                              * or the lowercase HTTP method for non-resource paths */
    bool resource_request;
    const char *group;       /* "" = core */
    const char *resource;    /* plural */
    const char *subresource; /* "" or NULL = none */
    const char *ns;          /* "" or NULL = cluster scope */
    const char *name;        /* "" or NULL = none */
    const char *path;        /* the URL path (non-resource requests) */
};

/* The objects, as JSON arrays of the stored objects (NULL = none). */
struct rbac_policy {
    const cJSON *roles, *rolebindings, *clusterroles, *clusterrolebindings;
};

/* True when allowed. reason gets kube-apiserver's explanation ("RBAC:
 * allowed by ClusterRoleBinding \"x\" of ClusterRole \"y\" to
 * ServiceAccount \"sa/ns\"") or, when denied, "" (RBAC has no opinion). */
bool rbac_allows(const struct rbac_policy *p, const struct rbac_user *u,
                 const struct rbac_request *r, char *reason, size_t reason_len);

/* The verb of an HTTP request on a resource: GET is get with a name (even
 * with watch=true, as in kube-apiserver), else watch with watch=true, else list; POST create; PUT update; PATCH patch; DELETE
 * delete with a name, else deletecollection. NULL for other methods. */
const char *rbac_verb(const char *method, bool has_name, bool watch);

/* kube-apiserver's text after "is forbidden: ":
 * User "U" cannot VERB resource "res[/sub]" in API group "G" in the
 * namespace "NS" | at the cluster scope; or, for paths,
 * User "U" cannot VERB path "/p". Caller frees. */
char *rbac_denial(const struct rbac_user *u, const struct rbac_request *r);

#endif
