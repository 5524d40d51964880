/* rbac.c - RBAC decision. See rbac.h. */
#include "rbac.h"

#include "base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *get(const cJSON *o, const char *k)
{
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *meta(const cJSON *o, const char *k)
{
    return str(get(o, "metadata"), k);
}

static bool empty(const char *s)
{
    return !s || !*s;
}

/* A list of strings. Anything else (missing, or a non-string member)
 * matches nothing: a malformed rule is ignored as a whole, never widened. */
static bool strings(const cJSON *list)
{
    if (!cJSON_IsArray(list))
        return false;
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        if (!cJSON_IsString(it))
            return false;
    }
    return true;
}

/* The list holds want (or, with wildcard, "*"). */
static bool holds(const cJSON *list, const char *want, bool wildcard)
{
    if (!strings(list))
        return false;
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        if ((wildcard && strcmp(it->valuestring, "*") == 0) || strcmp(it->valuestring, want) == 0)
            return true;
    }
    return false;
}

static bool resource_matches(const cJSON *list, const struct rbac_request *r)
{
    if (!strings(list))
        return false;
    bool has_sub = !empty(r->subresource);
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        const char *s = it->valuestring;
        if (strcmp(s, "*") == 0)
            return true;
        if (has_sub && strncmp(s, "*/", 2) == 0 && strcmp(s + 2, r->subresource) == 0)
            return true;
        size_t n = strlen(r->resource);
        if (strncmp(s, r->resource, n) != 0)
            continue;
        if (!has_sub ? s[n] == 0 : (s[n] == '/' && strcmp(s + n + 1, r->subresource) == 0))
            return true;
    }
    return false;
}

static bool url_matches(const cJSON *list, const char *path)
{
    if (!strings(list))
        return false;
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        const char *s = it->valuestring;
        size_t n = strlen(s);
        if (strcmp(s, "*") == 0 || strcmp(s, path) == 0)
            return true;
        if (n > 0 && s[n - 1] == '*' && strncmp(s, path, n - 1) == 0)
            return true;
    }
    return false;
}

static bool rule_allows(const cJSON *rule, const struct rbac_request *r)
{
    if (!holds(get(rule, "verbs"), r->verb, true))
        return false;
    if (!r->resource_request)
        return url_matches(get(rule, "nonResourceURLs"), r->path ? r->path : "");
    if (!holds(get(rule, "apiGroups"), r->group ? r->group : "", true))
        return false;
    if (!resource_matches(get(rule, "resources"), r))
        return false;
    const cJSON *names = get(rule, "resourceNames");
    if (!names || (cJSON_IsArray(names) && cJSON_GetArraySize(names) == 0))
        return true;
    return !empty(r->name) && holds(names, r->name, false);
}

static const cJSON *find(const cJSON *objs, const char *ns, const char *name)
{
    const cJSON *o;
    cJSON_ArrayForEach(o, objs)
    {
        const char *n = meta(o, "name"), *s = meta(o, "namespace");
        if (n && strcmp(n, name) == 0 && (ns ? s && strcmp(s, ns) == 0 : empty(s)))
            return o;
    }
    return NULL;
}

static bool role_allows(const cJSON *role, const struct rbac_request *r)
{
    const cJSON *rule;
    cJSON_ArrayForEach(rule, get(role, "rules"))
    {
        if (rule_allows(rule, r))
            return true;
    }
    return false;
}

/* The subject of binding b (namespace bns, "" for a ClusterRoleBinding)
 * that names u, or NULL; *who gets the subject as RBAC's reason prints it. */
static const cJSON *subject_of(const cJSON *b, const char *bns, const struct rbac_user *u,
                               char *who, size_t who_len)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, get(b, "subjects"))
    {
        const char *kind = str(s, "kind"), *name = str(s, "name");
        if (!kind || !name)
            continue;
        if (strcmp(kind, "User") == 0 && strcmp(name, u->name) == 0) {
            snprintf(who, who_len, "User \"%s\"", name);
            return s;
        }
        if (strcmp(kind, "Group") == 0) {
            for (size_t i = 0; i < u->ngroups; i++) {
                if (strcmp(name, u->groups[i]) == 0) {
                    snprintf(who, who_len, "Group \"%s\"", name);
                    return s;
                }
            }
        }
        if (strcmp(kind, "ServiceAccount") == 0) {
            const char *ns = str(s, "namespace");
            ns = empty(ns) ? bns : ns;
            static const char pre[] = "system:serviceaccount:";
            size_t np = sizeof pre - 1, nn = strlen(ns);
            const char *un = u->name;
            if (empty(ns) || strncmp(un, pre, np) != 0 || strncmp(un + np, ns, nn) != 0 ||
                un[np + nn] != ':' || strcmp(un + np + nn + 1, name) != 0)
                continue;
            snprintf(who, who_len, "ServiceAccount \"%s/%s\"", name, ns);
            return s;
        }
    }
    return NULL;
}

static bool in_group(const struct rbac_user *u, const char *g)
{
    for (size_t i = 0; i < u->ngroups; i++)
        if (u->groups[i] && strcmp(u->groups[i], g) == 0)
            return true;
    return false;
}

static bool discovery_path(const char *p)
{
    static const char *const roots[] = {"/api", "/apis", "/version", "/openapi",
                                        "/healthz", "/livez", "/readyz"};
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        size_t n = strlen(roots[i]);
        if (strncmp(p, roots[i], n) == 0 && (p[n] == 0 || p[n] == '/'))
            return true;
    }
    return false;
}

bool rbac_allows(const struct rbac_policy *p, const struct rbac_user *u,
                 const struct rbac_request *r, char *reason, size_t reason_len)
{
    if (reason_len)
        reason[0] = 0;
    if (!r->verb)
        return false;
    if (in_group(u, "system:masters")) {
        /* kube-apiserver's privileged-group authorizer allows with no
         * reason (a SelfSubjectAccessReview's status.reason is absent) */
        return true;
    }
    if (!r->resource_request && strcmp(r->verb, "get") == 0 && r->path &&
        discovery_path(r->path) && in_group(u, "system:authenticated")) {
        snprintf(reason, reason_len,
                 "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole "
                 "\"system:discovery\" to Group \"system:authenticated\"");
        return true;
    }
    if (r->resource_request && strcmp(r->verb, "create") == 0 && r->group && r->resource &&
        ((strcmp(r->group, "authorization.k8s.io") == 0 &&
          (strcmp(r->resource, "selfsubjectaccessreviews") == 0 ||
           strcmp(r->resource, "selfsubjectrulesreviews") == 0)) ||
         (strcmp(r->group, "authentication.k8s.io") == 0 &&
          strcmp(r->resource, "selfsubjectreviews") == 0)) &&
        empty(r->subresource) && in_group(u, "system:authenticated")) {
        snprintf(reason, reason_len,
                 "RBAC: allowed by ClusterRoleBinding \"system:basic-user\" of ClusterRole "
                 "\"system:basic-user\" to Group \"system:authenticated\"");
        return true;
    }
    if (r->resource_request && empty(r->resource))
        return false;
    char who[600];
    const cJSON *b;
    cJSON_ArrayForEach(b, p->clusterrolebindings)
    {
        const cJSON *ref = get(b, "roleRef");
        const char *kind = str(ref, "kind"), *name = str(ref, "name");
        if (!kind || !name || strcmp(kind, "ClusterRole") != 0 ||
            !subject_of(b, "", u, who, sizeof who))
            continue;
        const cJSON *role = find(p->clusterroles, NULL, name);
        if (role && role_allows(role, r)) {
            snprintf(reason, reason_len,
                     "RBAC: allowed by ClusterRoleBinding \"%s\" of ClusterRole \"%s\" to %s",
                     meta(b, "name") ? meta(b, "name") : "", name, who);
            return true;
        }
    }
    if (!r->resource_request || empty(r->ns))
        return false;
    cJSON_ArrayForEach(b, p->rolebindings)
    {
        const char *bns = meta(b, "namespace");
        if (!bns || strcmp(bns, r->ns) != 0)
            continue;
        const cJSON *ref = get(b, "roleRef");
        const char *kind = str(ref, "kind"), *name = str(ref, "name");
        if (!kind || !name || !subject_of(b, bns, u, who, sizeof who))
            continue;
        const cJSON *role = NULL;
        if (strcmp(kind, "Role") == 0)
            role = find(p->roles, bns, name);
        else if (strcmp(kind, "ClusterRole") == 0)
            role = find(p->clusterroles, NULL, name);
        if (role && role_allows(role, r)) {
            snprintf(reason, reason_len, "RBAC: allowed by RoleBinding \"%s/%s\" of %s \"%s\" to %s",
                     meta(b, "name") ? meta(b, "name") : "", bns, kind, name, who);
            return true;
        }
    }
    return false;
}

const char *rbac_verb(const char *method, bool has_name, bool watch)
{
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
        /* as kube-apiserver's RequestInfo: a named GET is get, watch=true
         * or not (a watch names one object with a field selector) */
        return has_name ? "get" : watch ? "watch" : "list";
    if (strcmp(method, "POST") == 0)
        return "create";
    if (strcmp(method, "PUT") == 0)
        return "update";
    if (strcmp(method, "PATCH") == 0)
        return "patch";
    if (strcmp(method, "DELETE") == 0)
        return has_name ? "delete" : "deletecollection";
    return NULL;
}

char *rbac_denial(const struct rbac_user *u, const struct rbac_request *r)
{
    const char *verb = r->verb ? r->verb : "";
    if (!r->resource_request)
        return xasprintf("User \"%s\" cannot %s path \"%s\"", u->name, verb, r->path ? r->path : "");
    char *res = empty(r->subresource) ? xstrdup(r->resource)
                                      : xasprintf("%s/%s", r->resource, r->subresource);
    char *m = empty(r->ns) ? xasprintf("User \"%s\" cannot %s resource \"%s\" in API group \"%s\" "
                                       "at the cluster scope",
                                       u->name, verb, res, r->group ? r->group : "")
                           : xasprintf("User \"%s\" cannot %s resource \"%s\" in API group \"%s\" "
                                       "in the namespace \"%s\"",
                                       u->name, verb, res, r->group ? r->group : "", r->ns);
    free(res);
    return m;
}
