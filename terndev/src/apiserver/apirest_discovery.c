/* apirest_discovery.c - what describes the API rather than objects:
 * /version, the discovery documents (/api, /apis, /apis/G, /api/v1,
 * /apis/G/V) and OpenAPI v3 (its index and one document per group
 * version). See apirest_internal.h. */
#include "apirest_internal.h"

#include "apistatus.h"
#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

/* ---- version and discovery ----------------------------------------------- */

void apirest__handle_version(struct apirest_resp *resp)
{
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "major", "1");
    cJSON_AddStringToObject(v, "minor", "32");
    cJSON_AddStringToObject(v, "gitVersion", "v1.32.0-tern");
    cJSON_AddStringToObject(v, "gitCommit", "0000000000000000000000000000000000000000");
    cJSON_AddStringToObject(v, "gitTreeState", "clean");
    cJSON_AddStringToObject(v, "buildDate", "2026-11-30T00:00:00Z");
    cJSON_AddStringToObject(v, "goVersion", "go1.23.0");
    cJSON_AddStringToObject(v, "compiler", "gc");
    cJSON_AddStringToObject(v, "platform", "linux/amd64");
    apirest__respond_json(resp, 200, v);
}

void apirest__handle_discovery(struct apirest *s, const struct apirest_path *p,
                               struct apirest_resp *resp)
{
    struct apires_table *t = apires_get(&s->reg);
    switch (p->kind) {
    case APIREST_P_API:
        apirest__respond_json(resp, 200, apires_api_versions(s->server_address));
        break;
    case APIREST_P_APIS:
        apirest__respond_json(resp, 200, apires_group_list(t));
        break;
    case APIREST_P_GROUP:
        if (apires_has_group(t, p->group))
            apirest__respond_json(resp, 200, apires_group(t, p->group));
        else
            apirest__respond_status(resp, apistatus_new(404, "NotFound",
                                                        "the server could not find the "
                                                        "requested resource",
                                                        NULL, NULL, NULL));
        break;
    case APIREST_P_GROUPVERSION:
        if (apires_has_group_version(t, p->group, p->version))
            apirest__respond_json(resp, 200, apires_resource_list(t, p->group, p->version));
        else
            apirest__respond_status(resp, apistatus_new(404, "NotFound",
                                                        "the server could not find the "
                                                        "requested resource",
                                                        NULL, NULL, NULL));
        break;
    default: break;
    }
    apires_put(&s->reg, t);
}

/* ---- OpenAPI v3 (for kubectl explain and kubectl's field-validation probe) ---- */

static char *schema_name(const struct apires *r)
{
    /* io.k8s.api.<group-first-label or core>.<version>.<Kind>, CRDs: reversed group */
    if (r->crd || strchr(r->group, '.')) {
        struct buf b;
        buf_init(&b, 1024);
        const char *g = r->group;
        const char *end = g + strlen(g);
        while (end > g) {
            const char *dot = end;
            while (dot > g && dot[-1] != '.')
                dot--;
            buf_printf(&b, "%.*s.", (int)(end - dot), dot);
            end = dot > g ? dot - 1 : g;
        }
        buf_printf(&b, "%s.%s", r->version, r->kind);
        return buf_steal(&b);
    }
    return xasprintf("io.k8s.api.%s.%s.%s", *r->group ? r->group : "core", r->version, r->kind);
}

static cJSON *gvk_ext(const struct apires *r)
{
    cJSON *a = cJSON_CreateArray();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "group", r->group);
    cJSON_AddStringToObject(o, "kind", r->kind);
    cJSON_AddStringToObject(o, "version", r->version);
    cJSON_AddItemToArray(a, o);
    return a;
}

static cJSON *resource_schema(const struct apires *r)
{
    cJSON *sc = r->crd && cJSON_IsObject(r->schema) ? json_dup(r->schema) : cJSON_CreateObject();
    if (!json_get(sc, "type"))
        cJSON_AddStringToObject(sc, "type", "object");
    cJSON *props = cJSON_GetObjectItemCaseSensitive(sc, "properties");
    if (!props)
        props = cJSON_AddObjectToObject(sc, "properties");
    static const char *top[] = {"apiVersion", "kind"};
    for (size_t i = 0; i < 2; i++)
        if (!json_get(props, top[i])) {
            cJSON *p = cJSON_AddObjectToObject(props, top[i]);
            cJSON_AddStringToObject(p, "type", "string");
        }
    if (!json_get(props, "metadata")) {
        cJSON *p = cJSON_AddObjectToObject(props, "metadata");
        cJSON_AddStringToObject(p, "type", "object");
        cJSON_AddStringToObject(p, "description", "Standard object's metadata.");
    }
    if (!r->crd)
        cJSON_AddTrueToObject(sc, "x-kubernetes-preserve-unknown-fields");
    cJSON_AddItemToObject(sc, "x-kubernetes-group-version-kind", gvk_ext(r));
    return sc;
}

static cJSON *operation(const struct apires *r, const char *action, bool field_validation)
{
    cJSON *op = cJSON_CreateObject();
    cJSON_AddStringToObject(op, "operationId", action);
    cJSON *params = cJSON_AddArrayToObject(op, "parameters");
    if (field_validation) {
        cJSON *fv = cJSON_CreateObject();
        cJSON_AddStringToObject(fv, "name", "fieldValidation");
        cJSON_AddStringToObject(fv, "in", "query");
        cJSON *sch = cJSON_AddObjectToObject(fv, "schema");
        cJSON_AddStringToObject(sch, "type", "string");
        cJSON_AddItemToArray(params, fv);
    }
    cJSON *resp = cJSON_AddObjectToObject(op, "responses");
    cJSON *ok = cJSON_AddObjectToObject(resp, "200");
    cJSON_AddStringToObject(ok, "description", "OK");
    cJSON_AddStringToObject(op, "x-kubernetes-action", action);
    cJSON *gvk = cJSON_AddObjectToObject(op, "x-kubernetes-group-version-kind");
    cJSON_AddStringToObject(gvk, "group", r->group);
    cJSON_AddStringToObject(gvk, "kind", r->kind);
    cJSON_AddStringToObject(gvk, "version", r->version);
    return op;
}

static cJSON *openapi_gv(const struct apires_table *t, const char *group, const char *version)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "openapi", "3.0.0");
    cJSON *info = cJSON_AddObjectToObject(d, "info");
    cJSON_AddStringToObject(info, "title", "Kubernetes");
    cJSON_AddStringToObject(info, "version", "v1.32.0");
    cJSON *paths = cJSON_AddObjectToObject(d, "paths");
    cJSON *schemas = cJSON_AddObjectToObject(cJSON_AddObjectToObject(d, "components"), "schemas");
    for (size_t i = 0; i < t->n; i++) {
        const struct apires *r = &t->v[i];
        if (strcmp(r->group, group) != 0 || strcmp(r->version, version) != 0)
            continue;
        char *base = *group ? xasprintf("/apis/%s/%s", group, version) : xasprintf("/api/%s", version);
        char *path = r->namespaced ? xasprintf("%s/namespaces/{namespace}/%s/{name}", base, r->plural)
                                   : xasprintf("%s/%s/{name}", base, r->plural);
        char *coll = r->namespaced ? xasprintf("%s/namespaces/{namespace}/%s", base, r->plural)
                                   : xasprintf("%s/%s", base, r->plural);
        cJSON *item = cJSON_AddObjectToObject(paths, path);
        cJSON_AddItemToObject(item, "get", operation(r, "get", false));
        cJSON_AddItemToObject(item, "put", operation(r, "put", true));
        cJSON_AddItemToObject(item, "patch", operation(r, "patch", true));
        cJSON_AddItemToObject(item, "delete", operation(r, "delete", false));
        cJSON *citem = cJSON_AddObjectToObject(paths, coll);
        cJSON_AddItemToObject(citem, "get", operation(r, "list", false));
        cJSON_AddItemToObject(citem, "post", operation(r, "post", true));
        char *name = schema_name(r);
        if (!json_get(schemas, name))
            cJSON_AddItemToObject(schemas, name, resource_schema(r));
        free(name);
        free(base);
        free(path);
        free(coll);
    }
    return d;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void apirest__handle_openapi_v3(struct apirest *s, const struct apirest_path *p,
                                struct apirest_resp *resp)
{
    struct apires_table *t = apires_get(&s->reg);
    if (!p->version) {
        cJSON *idx = cJSON_CreateObject();
        cJSON *paths = cJSON_AddObjectToObject(idx, "paths");
        for (size_t i = 0; i < t->n; i++) {
            const struct apires *r = &t->v[i];
            char *key = *r->group ? xasprintf("apis/%s/%s", r->group, r->version)
                                  : xasprintf("api/%s", r->version);
            if (!json_get(paths, key)) {
                cJSON *doc = openapi_gv(t, r->group, r->version);
                char *text = json_print(doc);
                char *url = xasprintf("/openapi/v3/%s?hash=%016llX", key,
                                      (unsigned long long)fnv1a(text));
                cJSON *e = cJSON_AddObjectToObject(paths, key);
                cJSON_AddStringToObject(e, "serverRelativeURL", url);
                free(url);
                free(text);
                cJSON_Delete(doc);
            }
            free(key);
        }
        apirest__respond_json(resp, 200, idx);
    } else if (apires_has_group_version(t, p->group ? p->group : "", p->version)) {
        apirest__respond_json(resp, 200, openapi_gv(t, p->group ? p->group : "", p->version));
    } else {
        apirest__not_found_path(resp);
    }
    apires_put(&s->reg, t);
}
