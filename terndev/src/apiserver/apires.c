/* apires.c - resource table and discovery. See apires.h. */
#include "apires.h"

#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

struct builtin {
    const char *group, *version, *plural, *singular, *kind;
    bool namespaced, has_status;
    const char *shorts, *cats; /* comma-separated */
    const char *prefix;
    const char *fields;        /* comma-separated extra field selectors */
};

static const struct builtin builtins[] = {
    {"", "v1", "namespaces", "namespace", "Namespace", false, true, "ns", "", "/registry/namespaces",
     "status.phase"},
    {"", "v1", "pods", "pod", "Pod", true, true, "po", "all", "/registry/pods",
     "spec.nodeName,spec.restartPolicy,spec.schedulerName,spec.serviceAccountName,"
     "spec.hostNetwork,status.phase,status.podIP,status.nominatedNodeName"},
    {"", "v1", "secrets", "secret", "Secret", true, false, "", "", "/registry/secrets", "type"},
    {"", "v1", "configmaps", "configmap", "ConfigMap", true, false, "cm", "",
     "/registry/configmaps", ""},
    {"", "v1", "services", "service", "Service", true, true, "svc", "all",
     "/registry/services/specs", "spec.clusterIP,spec.type"},
    {"", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, false, "sa", "",
     "/registry/serviceaccounts", ""},
    {"", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", true,
     true, "pvc", "", "/registry/persistentvolumeclaims", ""},
    {"", "v1", "nodes", "node", "Node", false, true, "no", "", "/registry/minions",
     "spec.unschedulable"},
    {"", "v1", "events", "event", "Event", true, false, "ev", "", "/registry/events",
     "involvedObject.kind,involvedObject.namespace,involvedObject.name,involvedObject.uid,"
     "involvedObject.apiVersion,involvedObject.resourceVersion,involvedObject.fieldPath,"
     "reason,reportingComponent,source,type"},
    {"batch", "v1", "jobs", "job", "Job", true, true, "", "all", "/registry/jobs",
     "status.successful"},
    {"apps", "v1", "deployments", "deployment", "Deployment", true, true, "deploy", "all",
     "/registry/deployments", ""},
    {"coordination.k8s.io", "v1", "leases", "lease", "Lease", true, false, "", "",
     "/registry/leases", ""},
    {"networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy", true, false,
     "netpol", "", "/registry/networkpolicies", ""},
    {"rbac.authorization.k8s.io", "v1", "roles", "role", "Role", true, false, "", "",
     "/registry/roles", ""},
    {"rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", true, false,
     "", "", "/registry/rolebindings", ""},
    {"rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", false,
     false, "", "", "/registry/clusterroles", ""},
    {"rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding",
     "ClusterRoleBinding", false, false, "", "", "/registry/clusterrolebindings", ""},
    {"events.k8s.io", "v1", "events", "event", "Event", true, false, "ev", "", "/registry/events",
     "regarding.kind,regarding.namespace,regarding.name,regarding.uid,regarding.apiVersion,"
     "regarding.resourceVersion,regarding.fieldPath,reason,reportingController,type"},
    {"authorization.k8s.io", "v1", "selfsubjectaccessreviews", "selfsubjectaccessreview",
     "SelfSubjectAccessReview", false, false, "", "", "/registry/selfsubjectaccessreviews", ""},
    {"authentication.k8s.io", "v1", "selfsubjectreviews", "selfsubjectreview",
     "SelfSubjectReview", false, false, "", "", "/registry/selfsubjectreviews", ""},
    {"authorization.k8s.io", "v1", "subjectaccessreviews", "subjectaccessreview",
     "SubjectAccessReview", false, false, "", "", "/registry/subjectaccessreviews", ""},
    {"apiregistration.k8s.io", "v1", "apiservices", "apiservice", "APIService", false, true, "",
     "api-extensions", "/registry/apiregistration.k8s.io/apiservices", ""},
    {"discovery.k8s.io", "v1", "endpointslices", "endpointslice", "EndpointSlice", true, false,
     "", "", "/registry/endpointslices", ""},
    {"apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition",
     "CustomResourceDefinition", false, true, "crd,crds", "api-extensions",
     "/registry/apiextensions.k8s.io/customresourcedefinitions", ""},
};

static char **split_list(const char *s)
{
    size_t n = 0;
    char **v = xcalloc(1, sizeof(char *));
    while (s && *s) {
        const char *c = strchr(s, ',');
        size_t len = c ? (size_t)(c - s) : strlen(s);
        v = xreallocarray(v, n + 2, sizeof(char *));
        v[n++] = xstrndup(s, len);
        v[n] = NULL;
        s = c ? c + 1 : s + len;
    }
    return v;
}

static char **strv_from_json(const cJSON *arr)
{
    size_t n = 0;
    char **v = xcalloc(1, sizeof(char *));
    for (const cJSON *c = cJSON_IsArray(arr) ? arr->child : NULL; c; c = c->next) {
        if (!cJSON_IsString(c))
            continue;
        v = xreallocarray(v, n + 2, sizeof(char *));
        v[n++] = xstrdup(c->valuestring);
        v[n] = NULL;
    }
    return v;
}

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static void res_done(struct apires *r)
{
    free(r->group);
    free(r->version);
    free(r->plural);
    free(r->singular);
    free(r->kind);
    free(r->list_kind);
    strv_free(r->short_names);
    strv_free(r->categories);
    free(r->prefix);
    strv_free(r->fields);
    free(r->storage_version);
    free(r->crd_name);
}

static void table_free(struct apires_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        res_done(&t->v[i]);
    free(t->v);
    cJSON_Delete(t->crds);
    free(t);
}

static struct apires *table_add(struct apires_table *t)
{
    t->v = xreallocarray(t->v, t->n + 1, sizeof(*t->v));
    struct apires *r = &t->v[t->n++];
    memset(r, 0, sizeof(*r));
    return r;
}

static bool crd_established(const cJSON *crd)
{
    const cJSON *conds = json_get(json_get(crd, "status"), "conditions");
    for (const cJSON *c = conds ? conds->child : NULL; c; c = c->next) {
        const cJSON *t = json_get(c, "type"), *s = json_get(c, "status");
        if (cJSON_IsString(t) && strcmp(t->valuestring, "Established") == 0 &&
            cJSON_IsString(s) && strcmp(s->valuestring, "True") == 0)
            return true;
    }
    return false;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static void add_crd(struct apires_table *t, const cJSON *crd)
{
    const cJSON *spec = json_get(crd, "spec");
    const cJSON *names = json_get(spec, "names");
    const char *group = jstr(spec, "group");
    const char *storage = "";
    const cJSON *versions = json_get(spec, "versions");
    for (const cJSON *v = versions ? versions->child : NULL; v; v = v->next)
        if (cJSON_IsTrue(json_get(v, "storage")))
            storage = jstr(v, "name");
    for (const cJSON *v = versions ? versions->child : NULL; v; v = v->next) {
        if (!cJSON_IsTrue(json_get(v, "served")))
            continue;
        struct apires *r = table_add(t);
        r->group = xstrdup(group);
        r->version = xstrdup(jstr(v, "name"));
        r->plural = xstrdup(jstr(names, "plural"));
        const char *sing = jstr(names, "singular");
        r->singular = xstrdup(*sing ? sing : r->plural);
        r->kind = xstrdup(jstr(names, "kind"));
        const char *lk = jstr(names, "listKind");
        r->list_kind = *lk ? xstrdup(lk) : xasprintf("%sList", r->kind);
        r->namespaced = strcmp(jstr(spec, "scope"), "Cluster") != 0;
        r->has_status = json_get(json_get(v, "subresources"), "status") != NULL;
        r->short_names = strv_from_json(json_get(names, "shortNames"));
        r->categories = strv_from_json(json_get(names, "categories"));
        r->prefix = xasprintf("/registry/%s/%s", group, r->plural);
        /* selectableFields (1.32): field selectors on the listed paths */
        r->fields = split_list("");
        const cJSON *sf = json_get(v, "selectableFields");
        size_t nf = 0;
        for (const cJSON *f = cJSON_IsArray(sf) ? sf->child : NULL; f; f = f->next) {
            const char *jp = jstr(f, "jsonPath");
            if (!*jp)
                continue;
            r->fields = xreallocarray(r->fields, nf + 2, sizeof(char *));
            r->fields[nf++] = xstrdup(jp[0] == '.' ? jp + 1 : jp);
            r->fields[nf] = NULL;
        }
        r->crd = true;
        r->schema = json_get(json_get(v, "schema"), "openAPIV3Schema");
        r->columns = json_get(v, "additionalPrinterColumns");
        r->storage_version = xstrdup(storage);
        r->crd_name = xstrdup(jstr(json_get(crd, "metadata"), "name"));
    }
}

static struct apires_table *table_build(cJSON *crds)
{
    struct apires_table *t = xcalloc(1, sizeof(*t));
    for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
        const struct builtin *b = &builtins[i];
        struct apires *r = table_add(t);
        r->group = xstrdup(b->group);
        r->version = xstrdup(b->version);
        r->plural = xstrdup(b->plural);
        r->singular = xstrdup(b->singular);
        r->kind = xstrdup(b->kind);
        r->list_kind = xasprintf("%sList", b->kind);
        r->namespaced = b->namespaced;
        r->review = strcmp(b->kind, "SelfSubjectAccessReview") == 0 ||
                    strcmp(b->kind, "SelfSubjectReview") == 0 ||
                    strcmp(b->kind, "SubjectAccessReview") == 0;
        r->has_status = b->has_status;
        r->core_event = strcmp(b->group, "events.k8s.io") == 0;
        r->short_names = split_list(b->shorts);
        r->categories = split_list(b->cats);
        r->prefix = xstrdup(b->prefix);
        r->fields = split_list(b->fields);
        r->storage_version = xstrdup(b->version);
    }
    t->crds = crds ? crds : cJSON_CreateArray();
    for (const cJSON *c = t->crds->child; c; c = c->next)
        if (crd_established(c))
            add_crd(t, c);
    t->refs = 1;
    return t;
}

void apires_registry_init(struct apires_registry *r)
{
    pthread_mutex_init(&r->mu, NULL);
    r->cur = table_build(NULL);
}

void apires_registry_done(struct apires_registry *r)
{
    if (r->cur && --r->cur->refs == 0)
        table_free(r->cur);
    r->cur = NULL;
    pthread_mutex_destroy(&r->mu);
}

struct apires_table *apires_get(struct apires_registry *r)
{
    pthread_mutex_lock(&r->mu);
    struct apires_table *t = r->cur;
    t->refs++;
    pthread_mutex_unlock(&r->mu);
    return t;
}

void apires_put(struct apires_registry *r, struct apires_table *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&r->mu);
    bool last = --t->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        table_free(t);
}

void apires_registry_set_crds(struct apires_registry *r, cJSON *crds)
{
    struct apires_table *t = table_build(crds);
    pthread_mutex_lock(&r->mu);
    struct apires_table *old = r->cur;
    r->cur = t;
    bool last = --old->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        table_free(old);
}

const struct apires *apires_find(const struct apires_table *t, const char *group,
                                 const char *version, const char *plural)
{
    for (size_t i = 0; i < t->n; i++) {
        const struct apires *r = &t->v[i];
        if (strcmp(r->group, group) == 0 && strcmp(r->version, version) == 0 &&
            strcmp(r->plural, plural) == 0)
            return r;
    }
    return NULL;
}

bool apires_has_group(const struct apires_table *t, const char *group)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].group, group) == 0)
            return true;
    return false;
}

bool apires_has_group_version(const struct apires_table *t, const char *group,
                              const char *version)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].group, group) == 0 && strcmp(t->v[i].version, version) == 0)
            return true;
    return false;
}

char *apires_key(const struct apires *res, const char *ns, const char *name)
{
    if (!name) {
        if (res->namespaced && ns && *ns)
            return xasprintf("%s/%s/", res->prefix, ns);
        return xasprintf("%s/", res->prefix);
    }
    if (res->namespaced)
        return xasprintf("%s/%s/%s", res->prefix, ns ? ns : "", name);
    return xasprintf("%s/%s", res->prefix, name);
}

char *apires_api_version(const struct apires *res)
{
    if (!*res->group)
        return xstrdup(res->version);
    return xasprintf("%s/%s", res->group, res->version);
}

cJSON *apires_api_versions(const char *server_address)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "APIVersions");
    cJSON *v = cJSON_AddArrayToObject(o, "versions");
    cJSON_AddItemToArray(v, cJSON_CreateString("v1"));
    cJSON *a = cJSON_AddArrayToObject(o, "serverAddressByClientCIDRs");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "clientCIDR", "0.0.0.0/0");
    cJSON_AddStringToObject(e, "serverAddress", server_address ? server_address : "");
    cJSON_AddItemToArray(a, e);
    return o;
}

static cJSON *group_obj(const struct apires_table *t, const char *group)
{
    cJSON *g = cJSON_CreateObject();
    cJSON_AddStringToObject(g, "name", group);
    cJSON *vs = cJSON_AddArrayToObject(g, "versions");
    const char *first = NULL;
    for (size_t i = 0; i < t->n; i++) {
        const struct apires *r = &t->v[i];
        if (strcmp(r->group, group) != 0)
            continue;
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            if (strcmp(t->v[j].group, group) == 0 && strcmp(t->v[j].version, r->version) == 0)
                seen = true;
        if (seen)
            continue;
        cJSON *v = cJSON_CreateObject();
        char *gv = apires_api_version(r);
        cJSON_AddStringToObject(v, "groupVersion", gv);
        cJSON_AddStringToObject(v, "version", r->version);
        free(gv);
        cJSON_AddItemToArray(vs, v);
        /* preferred: the storage version of a CRD, else the first */
        if (!first || (r->crd && strcmp(r->version, r->storage_version) == 0))
            first = r->version;
    }
    cJSON *p = cJSON_CreateObject();
    char *gv = xasprintf("%s/%s", group, first ? first : "v1");
    cJSON_AddStringToObject(p, "groupVersion", gv);
    cJSON_AddStringToObject(p, "version", first ? first : "v1");
    free(gv);
    cJSON_AddItemToObject(g, "preferredVersion", p);
    return g;
}

cJSON *apires_group_list(const struct apires_table *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "APIGroupList");
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    cJSON *gs = cJSON_AddArrayToObject(o, "groups");
    for (size_t i = 0; i < t->n; i++) {
        const char *g = t->v[i].group;
        if (!*g)
            continue;
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            if (strcmp(t->v[j].group, g) == 0)
                seen = true;
        if (!seen)
            cJSON_AddItemToArray(gs, group_obj(t, g));
    }
    return o;
}

cJSON *apires_group(const struct apires_table *t, const char *group)
{
    cJSON *g = group_obj(t, group);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "APIGroup");
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    for (cJSON *c = g->child; c;) {
        cJSON *next = c->next;
        cJSON_AddItemToObject(o, c->string, cJSON_DetachItemViaPointer(g, c));
        c = next;
    }
    cJSON_Delete(g);
    return o;
}

static cJSON *strv_json(char **v)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; v && v[i]; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
    return a;
}

static cJSON *verbs(bool full, bool collection_delete)
{
    static const char *all[] = {"create", "delete", "deletecollection", "get", "list",
                                "patch",  "update", "watch"};
    static const char *sub[] = {"get", "patch", "update"};
    cJSON *a = cJSON_CreateArray();
    const char **v = full ? all : sub;
    size_t n = full ? 8 : 3;
    for (size_t i = 0; i < n; i++)
        if (collection_delete || strcmp(v[i], "deletecollection") != 0)
            cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
    return a;
}

cJSON *apires_resource_list(const struct apires_table *t, const char *group, const char *version)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "APIResourceList");
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    char *gv = *group ? xasprintf("%s/%s", group, version) : xstrdup(version);
    cJSON_AddStringToObject(o, "groupVersion", gv);
    free(gv);
    cJSON *rs = cJSON_AddArrayToObject(o, "resources");
    for (size_t i = 0; i < t->n; i++) {
        const struct apires *r = &t->v[i];
        if (strcmp(r->group, group) != 0 || strcmp(r->version, version) != 0)
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", r->plural);
        cJSON_AddStringToObject(e, "singularName", r->singular);
        cJSON_AddBoolToObject(e, "namespaced", r->namespaced);
        cJSON_AddStringToObject(e, "kind", r->kind);
        if (r->review) {
            cJSON *v = cJSON_AddArrayToObject(e, "verbs");
            cJSON_AddItemToArray(v, cJSON_CreateString("create"));
        } else {
            cJSON_AddItemToObject(e, "verbs",
                                  verbs(true, r->crd || strcmp(r->kind, "Namespace") != 0));
        }
        if (r->short_names && r->short_names[0])
            cJSON_AddItemToObject(e, "shortNames", strv_json(r->short_names));
        if (r->categories && r->categories[0])
            cJSON_AddItemToObject(e, "categories", strv_json(r->categories));
        cJSON_AddItemToArray(rs, e);
        if (!r->crd && strcmp(r->kind, "Pod") == 0) {
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "name", "pods/binding");
            cJSON_AddStringToObject(b, "singularName", "");
            cJSON_AddBoolToObject(b, "namespaced", true);
            cJSON_AddStringToObject(b, "kind", "Binding");
            cJSON *v = cJSON_AddArrayToObject(b, "verbs");
            cJSON_AddItemToArray(v, cJSON_CreateString("create"));
            cJSON_AddItemToArray(rs, b);
        }
        if (r->has_status) {
            cJSON *s = cJSON_CreateObject();
            char *n = xasprintf("%s/status", r->plural);
            cJSON_AddStringToObject(s, "name", n);
            free(n);
            cJSON_AddStringToObject(s, "singularName", "");
            cJSON_AddBoolToObject(s, "namespaced", r->namespaced);
            cJSON_AddStringToObject(s, "kind", r->kind);
            cJSON_AddItemToObject(s, "verbs", verbs(false, false));
            cJSON_AddItemToArray(rs, s);
        }
    }
    return o;
}
