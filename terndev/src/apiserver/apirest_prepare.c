/* apirest_prepare.c - a write's object before it is stored: unknown and
 * duplicate fields under fieldValidation (Strict, Warn, Ignore), kind and
 * apiVersion, the namespace, metadata set on create (name from
 * generateName, uid, timestamps, generation) and kept on update, the
 * status and finalize subresources, CR schemas, defaulting and
 * validation. See apirest_internal.h. */
#include "apirest_internal.h"

#include "apicrd.h"
#include "apischema.h"
#include "apistatus.h"
#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ---- unknown fields ------------------------------------------------------ */

static const char *const meta_fields[] = {
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields", NULL};

struct kind_fields {
    const char *kind;
    const char *fields; /* allowed top-level fields besides apiVersion, kind, metadata */
};

static const struct kind_fields kind_fields[] = {
    {"ConfigMap", ",data,binaryData,immutable,"},
    {"Secret", ",data,stringData,type,immutable,"},
    {"ServiceAccount", ",secrets,imagePullSecrets,automountServiceAccountToken,"},
    {"Role", ",rules,"},
    {"ClusterRole", ",rules,aggregationRule,"},
    {"RoleBinding", ",subjects,roleRef,"},
    {"ClusterRoleBinding", ",subjects,roleRef,"},
    {"EndpointSlice", ",addressType,endpoints,ports,"},
    {"SubjectAccessReview", ",spec,status,"},
};

static const char *allowed_top(const struct apires *res)
{
    if (strcmp(res->kind, "Event") == 0) {
        if (*res->group)
            return ",eventTime,series,reportingController,reportingInstance,action,reason,"
                   "regarding,related,note,type,deprecatedSource,deprecatedFirstTimestamp,"
                   "deprecatedLastTimestamp,deprecatedCount,";
        return ",involvedObject,reason,message,source,firstTimestamp,lastTimestamp,count,type,"
               "eventTime,series,action,related,reportingComponent,reportingInstance,";
    }
    for (size_t i = 0; i < sizeof(kind_fields) / sizeof(kind_fields[0]); i++)
        if (strcmp(kind_fields[i].kind, res->kind) == 0)
            return kind_fields[i].fields;
    return ",spec,status,";
}

static void add_path(struct apischema_paths *p, const char *s)
{
    p->v = xreallocarray(p->v, p->n + 1, sizeof(char *));
    p->v[p->n++] = xstrdup(s);
}

/* Unknown fields outside the CR schema: top level of built-ins and
 * ObjectMeta of everything. Removes them and records their paths. */
static void drop_unknown_common(const struct apires *res, cJSON *obj, struct apischema_paths *u)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    for (cJSON *c = cJSON_IsObject(md) ? md->child : NULL; c;) {
        cJSON *next = c->next;
        bool ok = false;
        for (size_t i = 0; meta_fields[i]; i++)
            ok |= strcmp(meta_fields[i], c->string) == 0;
        if (!ok) {
            char *p = xasprintf("metadata.%s", c->string);
            add_path(u, p);
            free(p);
            cJSON_Delete(cJSON_DetachItemViaPointer(md, c));
        }
        c = next;
    }
    if (res->crd)
        return;
    const char *allowed = allowed_top(res);
    for (cJSON *c = obj->child; c;) {
        cJSON *next = c->next;
        char *needle = xasprintf(",%s,", c->string);
        bool ok = strcmp(c->string, "apiVersion") == 0 || strcmp(c->string, "kind") == 0 ||
                  strcmp(c->string, "metadata") == 0 || strstr(allowed, needle);
        free(needle);
        if (!ok) {
            add_path(u, c->string);
            cJSON_Delete(cJSON_DetachItemViaPointer(obj, c));
        }
        c = next;
    }
}

static void add_warning(struct apirest_resp *resp, const char *text)
{
    /* Warning: 299 - "text" (one header; several warnings joined) */
    cJSON *s = cJSON_CreateString(text);
    char *q = json_print(s);
    cJSON_Delete(s);
    char *w = resp->warning ? xasprintf("%s, 299 - %s", resp->warning, q)
                            : xasprintf("299 - %s", q);
    free(q);
    free(resp->warning);
    resp->warning = w;
}

/* Applies the fieldValidation directive to the unknown/duplicate fields
 * found. Returns a Status (Strict) or NULL. */
static cJSON *field_validation(struct rq *q, const struct apischema_paths *u, const char *dup)
{
    if (!u->n && !(dup && *dup))
        return NULL;
    const char *fv = q->field_validation;
    if (strcmp(fv, "Ignore") == 0)
        return NULL;
    struct buf b;
    buf_init(&b, 1u << 20);
    if (dup && *dup)
        buf_printf(&b, "json: duplicate field \"%s\"", dup);
    for (size_t i = 0; i < u->n; i++)
        buf_printf(&b, "%sunknown field \"%s\"", b.len ? ", " : "", u->v[i]);
    cJSON *st = NULL;
    if (strcmp(fv, "Strict") == 0) {
        char *m = xasprintf("%s in version \"%s\" cannot be handled as a %s: strict decoding "
                            "error: %s",
                            q->res->kind, q->res->version, q->res->kind, buf_str(&b));
        st = apistatus_bad_request(m);
        free(m);
    } else {
        if (dup && *dup) {
            char *w = xasprintf("duplicate field \"%s\"", dup);
            add_warning(q->resp, w);
            free(w);
        }
        for (size_t i = 0; i < u->n; i++) {
            char *w = xasprintf("unknown field \"%s\"", u->v[i]);
            add_warning(q->resp, w);
            free(w);
        }
    }
    buf_done(&b);
    return st;
}

/* ---- create and update --------------------------------------------------- */

static char *random_suffix(void)
{
    static const char alphabet[] = "bcdfghjklmnpqrstvwxz2456789";
    unsigned char b[5];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
        memset(b, 7, sizeof(b));
    char *s = xmalloc(6);
    for (int i = 0; i < 5; i++)
        s[i] = alphabet[b[i] % (sizeof(alphabet) - 1)];
    s[5] = 0;
    return s;
}

/* Everything outside metadata (and status when it has its own endpoint). */
static bool differs_outside(const cJSON *a, const cJSON *b, bool skip_status)
{
    cJSON *x = json_dup(a), *y = json_dup(b);
    cJSON_DeleteItemFromObjectCaseSensitive(x, "metadata");
    cJSON_DeleteItemFromObjectCaseSensitive(y, "metadata");
    if (skip_status) {
        cJSON_DeleteItemFromObjectCaseSensitive(x, "status");
        cJSON_DeleteItemFromObjectCaseSensitive(y, "status");
    }
    bool d = !cJSON_Compare(x, y, 1);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return d;
}

static bool uses_generation(const struct apires *res)
{
    /* pods too since 1.33 (PodObservedGenerationTracking): 1 on create,
     * +1 when the spec changes or graceful deletion starts */
    return res->crd || strcmp(res->kind, "Job") == 0 || strcmp(res->kind, "Deployment") == 0 ||
           strcmp(res->kind, "Pod") == 0 ||
           strcmp(res->kind, "CustomResourceDefinition") == 0 ||
           strcmp(res->kind, "NetworkPolicy") == 0;
}

/* Schema processing of a custom resource: prune, default, validate. */
static void cr_schema(struct rq *q, cJSON *obj, struct apischema_paths *unknown,
                      struct apistatus_fields *f)
{
    if (!q->res->crd || !q->res->schema)
        return;
    apischema_prune(q->res->schema, obj, unknown);
    apischema_default(q->res->schema, obj);
    apischema_validate(q->res->schema, obj, f);
}

cJSON *apirest__check_gvk(struct rq *q, cJSON *obj)
{
    char *want_av = apires_api_version(q->res);
    if (!q->res->crd) {
        /* typed endpoints default the group/version/kind of the body */
        const char *k0 = apirest__jstr(obj, "kind"), *a0 = apirest__jstr(obj, "apiVersion");
        if (!k0 || !*k0)
            apirest__set_str(obj, "kind", q->res->kind);
        if (!a0 || !*a0)
            apirest__set_str(obj, "apiVersion", want_av);
    }
    const char *kind = apirest__jstr(obj, "kind"), *av = apirest__jstr(obj, "apiVersion");
    cJSON *st = NULL;
    if (!kind || !*kind) {
        char *body = json_print(obj);
        if (strlen(body) > 200)
            body[200] = 0;
        char *m = xasprintf("Object 'Kind' is missing in '%s'", body);
        st = apistatus_bad_request(m);
        free(m);
        free(body);
    } else if (!av || !*av) {
        char *m = xasprintf("Object 'apiVersion' is missing in '{\"kind\":\"%s\"}'", kind);
        st = apistatus_bad_request(m);
        free(m);
    } else if (strcmp(av, want_av) != 0) {
        char *m = xasprintf("the API version in the data (%s) does not match the expected API "
                            "version (%s)",
                            av, want_av);
        st = apistatus_bad_request(m);
        free(m);
    } else if (strcmp(kind, q->res->kind) != 0) {
        char *m = xasprintf("%s in version \"%s\" cannot be handled as a %s: no kind \"%s\" is "
                            "registered for version \"%s\"",
                            kind, q->res->version, q->res->kind, kind, want_av);
        st = apistatus_bad_request(m);
        free(m);
    }
    free(want_av);
    return st;
}

/* The object's metadata.namespace: the request's for namespaced resources
 * (a different one in the body is refused, as kube-apiserver does), none for
 * cluster-scoped ones. Returns a Status on failure, else NULL. */
static cJSON *place_namespace(struct rq *q, cJSON *md)
{
    const char *bns = apirest__jstr(md, "namespace");
    if (q->res->namespaced) {
        if (bns && *bns && strcmp(bns, q->ns) != 0)
            return apistatus_bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request");
        apirest__set_str(md, "namespace", q->ns);
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(md, "namespace");
    }
    return NULL;
}

/* Create-time preparation. Takes nothing; modifies obj. Returns a Status on
 * failure. */
cJSON *apirest__prepare_create(struct rq *q, cJSON *obj, const char *dup)
{
    cJSON *st = apirest__check_gvk(q, obj);
    if (st)
        return st;
    cJSON *md = apirest__ensure_obj(obj, "metadata");
    cJSON *nst = place_namespace(q, md);
    if (nst)
        return nst;
    struct apischema_paths unknown = {0};
    drop_unknown_common(q->res, obj, &unknown);
    struct apistatus_fields f = {0};
    const char *name = apirest__jstr(md, "name");
    const char *gen = apirest__jstr(md, "generateName");
    if ((!name || !*name) && gen && *gen) {
        char *sfx = random_suffix();
        char *n = xasprintf("%s%s", gen, sfx);
        apirest__set_str(md, "name", n);
        free(n);
        free(sfx);
        name = apirest__jstr(md, "name");
    }
    if (!name || !*name)
        apistatus_fields_addv(&f, APISTATUS_F_REQUIRED, "metadata.name", NULL,
                              "name or generateName is required");
    char *uid = apirest__uuid4();
    char now[32];
    apirest__now_str(now);
    apirest__set_str(md, "uid", uid);
    apirest__set_str(md, "creationTimestamp", now);
    cJSON_DeleteItemFromObjectCaseSensitive(md, "resourceVersion");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "deletionTimestamp");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "deletionGracePeriodSeconds");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "selfLink");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "generation");
    if (uses_generation(q->res))
        json_add_int64(md, "generation", 1);
    if (!q->res->crd) {
        apirest__default_builtin(q->res, obj, uid);
        apirest__secret_string_data(q->res, obj);
    }
    apirest__initial_status(q->res, obj);
    cr_schema(q, obj, &unknown, &f);
    st = field_validation(q, &unknown, dup);
    if (!st && apirest__is_crd(q->res)) {
        apicrd_prepare(obj, NULL, now, &f);
    }
    if (!st) {
        apirest__omit_empty(q->res, obj);
        apirest__validate_meta(q->res, obj, &f);
        apirest__validate_builtin(q->res, obj, NULL, NULL, &f);
    }
    if (!st && f.n) {
        st = apistatus_invalid(q->res->crd || apirest__is_crd(q->res) ? q->res->group
                                                                      : q->res->group,
                               q->res->kind, name, &f);
    }
    apistatus_fields_done(&f);
    apischema_paths_done(&unknown);
    free(uid);
    return st;
}

/* Update-time preparation of obj (the desired object) against cur. */
cJSON *apirest__prepare_update(struct rq *q, const cJSON *cur, cJSON **objp, const char *dup,
                               bool check_kind)
{
    cJSON *obj = *objp;
    cJSON *st = check_kind ? apirest__check_gvk(q, obj) : NULL;
    if (st)
        return st;
    cJSON *md = apirest__ensure_obj(obj, "metadata");
    const cJSON *cmd = json_get(cur, "metadata");
    const char *name = apirest__jstr(md, "name");
    if (!name || strcmp(name, q->name) != 0) {
        char *m = xasprintf("the name of the object (%s) does not match the name on the URL (%s)",
                            name ? name : "", q->name);
        st = apistatus_bad_request(m);
        free(m);
        return st;
    }
    cJSON *nst = place_namespace(q, md);
    if (nst)
        return nst;
    struct apischema_paths unknown = {0};
    drop_unknown_common(q->res, obj, &unknown);
    static const char *immutable[] = {"uid", "creationTimestamp", "deletionTimestamp",
                                      "deletionGracePeriodSeconds", "generation"};
    for (size_t i = 0; i < 5; i++) {
        const cJSON *v = json_get(cmd, immutable[i]);
        cJSON_DeleteItemFromObjectCaseSensitive(md, immutable[i]);
        if (v)
            cJSON_AddItemToObject(md, immutable[i], json_dup(v));
    }
    cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "selfLink");
    if (apirest__is_kind(q->res, "Namespace") && q->sub && strcmp(q->sub, "finalize") == 0) {
        /* namespaces/NAME/finalize changes spec.finalizers only */
        cJSON *n = json_dup(cur);
        cJSON *fin = cJSON_DetachItemFromObjectCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(obj, "spec"), "finalizers");
        cJSON *nspec = apirest__ensure_obj(n, "spec");
        cJSON_DeleteItemFromObjectCaseSensitive(nspec, "finalizers");
        if (fin)
            cJSON_AddItemToObject(nspec, "finalizers", fin);
        cJSON_Delete(obj);
        obj = n;
        *objp = n;
        md = apirest__ensure_obj(obj, "metadata");
    } else if (q->res->has_status) {
        bool status_ep = q->sub && strcmp(q->sub, "status") == 0;
        if (status_ep) {
            /* only status changes through /status */
            cJSON *n = json_dup(cur);
            cJSON *ns = cJSON_DetachItemFromObjectCaseSensitive(obj, "status");
            cJSON_DeleteItemFromObjectCaseSensitive(n, "status");
            if (ns)
                cJSON_AddItemToObject(n, "status", ns);
            cJSON_Delete(obj);
            obj = n;
            *objp = n;
            md = apirest__ensure_obj(obj, "metadata");
        } else {
            const cJSON *cs = json_get(cur, "status");
            cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
            if (cs)
                cJSON_AddItemToObject(obj, "status", json_dup(cs));
        }
    }
    apirest__secret_string_data(q->res, obj);
    struct apistatus_fields f = {0};
    cr_schema(q, obj, &unknown, &f);
    st = field_validation(q, &unknown, dup);
    if (!st && apirest__is_crd(q->res)) {
        char now[32];
        apirest__now_str(now);
        apicrd_prepare(obj, cur, now, &f);
    }
    /* finalizers while deleting */
    if (!st && apirest__jstr(cmd, "deletionTimestamp")) {
        const cJSON *of = json_get(cmd, "finalizers"), *nf = json_get(md, "finalizers");
        struct buf nb;
        buf_init(&nb, 1u << 16);
        for (const cJSON *c = cJSON_IsArray(nf) ? nf->child : NULL; c; c = c->next) {
            bool old = false;
            for (const cJSON *o = cJSON_IsArray(of) ? of->child : NULL; o; o = o->next)
                old |= cJSON_Compare(o, c, 1);
            if (!old && cJSON_IsString(c))
                buf_printf(&nb, "%s\"%s\"", nb.len ? ", " : "", c->valuestring);
        }
        if (nb.len) {
            char *d = xasprintf("no new finalizers can be added if the object is being deleted, "
                                "found new finalizers []string{%s}",
                                buf_str(&nb));
            apistatus_fields_addv(&f, APISTATUS_F_FORBIDDEN, "metadata.finalizers", NULL, d);
            free(d);
        }
        buf_done(&nb);
    }
    if (!st && uses_generation(q->res) && differs_outside(cur, obj, q->res->has_status)) {
        int64_t g = 0;
        const cJSON *gv = json_get(cmd, "generation");
        if (gv)
            json_item_int64(gv, &g);
        cJSON_DeleteItemFromObjectCaseSensitive(md, "generation");
        json_add_int64(md, "generation", g + 1);
    }
    if (!st) {
        apirest__omit_empty(q->res, obj);
        apirest__validate_meta(q->res, obj, &f);
        apirest__validate_builtin(q->res, obj, cur, q->sub, &f);
    }
    if (!st && f.n)
        st = apistatus_invalid(q->res->group, q->res->kind, q->name, &f);
    apistatus_fields_done(&f);
    apischema_paths_done(&unknown);
    return st;
}
