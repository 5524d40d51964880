/* apirest.c - the REST layer's entry points (apirest.h): URL path parsing,
 * routing a request to its handler (apirest_handle; a resource path by
 * method, subresource and query), init, done and bootstrap, and in-process
 * requests (apirest_do). The handlers are in the other apirest_*.c files
 * (apirest_internal.h). */
#include "apirest_internal.h"

#include "apistatus.h"
#include "apitable.h"
#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- paths --------------------------------------------------------------- */

void apirest_path_done(struct apirest_path *p)
{
    free(p->group);
    free(p->version);
    free(p->ns);
    free(p->resource);
    free(p->name);
    free(p->sub);
    memset(p, 0, sizeof(*p));
}

static int hexv(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Splits path into at most 10 decoded segments. Returns the count or -1. */
static int split_path(const char *path, char *segs[10])
{
    int n = 0;
    const char *p = path;
    if (*p != '/')
        return -1;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (n == 10)
            goto fail;
        char *s = xmalloc(len + 1);
        size_t j = 0;
        for (size_t i = 0; i < len; i++) {
            if (p[i] == '%' && i + 2 < len + 1 && hexv(p[i + 1]) >= 0 && hexv(p[i + 2]) >= 0) {
                s[j++] = (char)(hexv(p[i + 1]) << 4 | hexv(p[i + 2]));
                i += 2;
            } else {
                s[j++] = p[i];
            }
        }
        s[j] = 0;
        if (strlen(s) != j) { /* embedded NUL */
            free(s);
            goto fail;
        }
        segs[n++] = s;
        p += len;
    }
    return n;
fail:
    for (int i = 0; i < n; i++)
        free(segs[i]);
    return -1;
}

int apirest_parse_path(const char *path, struct apirest_path *p)
{
    memset(p, 0, sizeof(*p));
    char *s[10] = {0};
    int n = split_path(path, s);
    if (n < 0)
        return -EINVAL;
    int rc = 0;
    int i = 0;
    if (n == 1 && strcmp(s[0], "version") == 0) {
        p->kind = APIREST_P_VERSION;
    } else if (n == 1 && (strcmp(s[0], "healthz") == 0 || strcmp(s[0], "readyz") == 0 ||
                          strcmp(s[0], "livez") == 0)) {
        p->kind = APIREST_P_HEALTH;
    } else if (n >= 2 && strcmp(s[0], "openapi") == 0) {
        p->kind = strcmp(s[1], "v2") == 0 ? APIREST_P_OPENAPI_V2 : APIREST_P_OPENAPI_V3;
        if (n >= 4) { /* /openapi/v3/apis/G/V or /openapi/v3/api/v1 */
            p->group = xstrdup(strcmp(s[2], "api") == 0 ? "" : s[3]);
            p->version = xstrdup(strcmp(s[2], "api") == 0 ? s[3] : (n >= 5 ? s[4] : ""));
        }
    } else if (n >= 1 && strcmp(s[0], "api") == 0) {
        if (n == 1) {
            p->kind = APIREST_P_API;
        } else {
            p->group = xstrdup("");
            p->version = xstrdup(s[1]);
            i = 2;
            p->kind = n == 2 ? APIREST_P_GROUPVERSION : APIREST_P_RESOURCE;
        }
    } else if (n >= 1 && strcmp(s[0], "apis") == 0) {
        if (n == 1) {
            p->kind = APIREST_P_APIS;
        } else if (n == 2) {
            p->kind = APIREST_P_GROUP;
            p->group = xstrdup(s[1]);
        } else {
            p->group = xstrdup(s[1]);
            p->version = xstrdup(s[2]);
            i = 3;
            p->kind = n == 3 ? APIREST_P_GROUPVERSION : APIREST_P_RESOURCE;
        }
    } else {
        rc = -EINVAL;
    }
    if (!rc && p->kind == APIREST_P_RESOURCE) {
        int rest = n - i;
        /* namespaces/NS/RES[/NAME[/SUB]] unless it is the namespace itself */
        if (strcmp(s[i], "namespaces") == 0 && rest >= 3 && strcmp(s[i + 2], "status") != 0 &&
            strcmp(s[i + 2], "finalize") != 0) {
            p->ns = xstrdup(s[i + 1]);
            i += 2;
            rest -= 2;
        }
        if (rest < 1 || rest > 3) {
            rc = -EINVAL;
        } else {
            p->resource = xstrdup(s[i]);
            if (rest >= 2)
                p->name = xstrdup(s[i + 1]);
            if (rest == 3)
                p->sub = xstrdup(s[i + 2]);
        }
    }
    for (int k = 0; k < n; k++)
        free(s[k]);
    if (rc)
        apirest_path_done(p);
    return rc;
}

/* ---- dispatch ------------------------------------------------------------ */

static enum want parse_accept(const char *accept)
{
    if (!accept)
        return WANT_OBJECT;
    /* the first acceptable media type wins; kubectl lists Table first */
    const char *p = accept;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char *m = xstrndup(p, n);
        enum want w = WANT_OBJECT;
        bool json = strstr(m, "application/json") != NULL || strstr(m, "*/*") != NULL;
        if (json && strstr(m, "as=Table"))
            w = WANT_TABLE;
        else if (json && strstr(m, "as=PartialObjectMetadata"))
            w = WANT_PARTIAL;
        free(m);
        if (json)
            return w;
        p = e ? e + 1 : NULL;
    }
    return WANT_OBJECT;
}

static bool is_namespace(const struct apires *res)
{
    return !res->crd && strcmp(res->kind, "Namespace") == 0;
}

static void handle_resource(struct apirest *s, const struct apirest_req *req,
                            const struct apirest_path *p, struct apirest_resp *resp)
{
    struct rq q = {.s = s, .req = req, .resp = resp};
    q.tab = apires_get(&s->reg);
    q.res = apires_find(q.tab, p->group, p->version, p->resource);
    const char *m = req->method ? req->method : "GET";
    bool binding = q.res && !q.res->crd && strcmp(q.res->kind, "Pod") == 0 && p->sub &&
                   strcmp(p->sub, "binding") == 0 && strcmp(m, "POST") == 0 && p->name;
    bool podlog = q.res && apirest__is_kind(q.res, "Pod") && p->sub && strcmp(p->sub, "log") == 0 &&
                  strcmp(m, "GET") == 0 && p->name && s->log_path;
    bool finalize = q.res && apirest__is_kind(q.res, "Namespace") && p->sub &&
                    strcmp(p->sub, "finalize") == 0 && strcmp(m, "PUT") == 0;
    if (!q.res || (!q.res->namespaced && p->ns) ||
        (p->sub && !binding && !finalize && !podlog &&
         !(strcmp(p->sub, "status") == 0 && q.res->has_status))) {
        apirest__not_found_path(resp);
        goto out;
    }
    q.ns = p->ns;
    q.name = p->name;
    q.sub = p->sub;
    q.want = parse_accept(req->accept);
    const char *inc = apirest__arg(req, "includeObject");
    q.include = APITABLE_METADATA;
    if (inc && strcmp(inc, "Object") == 0)
        q.include = APITABLE_OBJECT;
    else if (inc && strcmp(inc, "None") == 0)
        q.include = APITABLE_NONE;
    const char *dr = apirest__arg(req, "dryRun");
    q.dry_run = dr && strcmp(dr, "All") == 0;
    const char *fv = apirest__arg(req, "fieldValidation");
    q.field_validation = fv && (strcmp(fv, "Strict") == 0 || strcmp(fv, "Ignore") == 0) ? fv
                                                                                          : "Warn";
    if (fv && *fv && strcmp(fv, "Strict") && strcmp(fv, "Warn") && strcmp(fv, "Ignore")) {
        char *msg = xasprintf("fieldValidation parameter unsupported: %s", fv);
        apirest__respond_status(resp, apistatus_bad_request(msg));
        free(msg);
        goto out;
    }
    if (q.res->namespaced && !q.ns && (q.name || strcmp(m, "POST") == 0)) {
        apirest__not_found_path(resp);
        goto out;
    }
    if (q.res->review) {
        if (strcmp(m, "POST") == 0 && !q.name && !q.ns)
            apirest__handle_review(&q);
        else
            apirest__respond_status(resp,
                                    apistatus_method_not_allowed(
                                        "the server does not allow this method on the requested "
                                        "resource"));
    } else if (binding) {
        apirest__handle_binding(&q);
    } else if (podlog) {
        apirest__handle_log(&q);
    } else if (q.name) {
        if (strcmp(m, "GET") == 0 && apirest__arg_true(req, "watch") && !q.sub)
            apirest__handle_watch(&q);
        else if (strcmp(m, "GET") == 0)
            apirest__handle_get(&q);
        else if (strcmp(m, "PUT") == 0)
            apirest__handle_put(&q);
        else if (strcmp(m, "PATCH") == 0)
            apirest__handle_patch(&q);
        else if (strcmp(m, "DELETE") == 0 && !q.sub)
            apirest__handle_delete(&q);
        else
            apirest__respond_status(resp,
                                    apistatus_method_not_allowed(
                                        "the server does not allow this method on the requested "
                                        "resource"));
    } else {
        if (strcmp(m, "GET") == 0) {
            if (apirest__arg_true(req, "watch"))
                apirest__handle_watch(&q);
            else
                apirest__handle_list(&q);
        } else if (strcmp(m, "POST") == 0) {
            apirest__handle_create(&q);
        } else if (strcmp(m, "DELETE") == 0 && !is_namespace(q.res)) {
            apirest__handle_delete_collection(&q);
        } else {
            apirest__respond_status(resp,
                                    apistatus_method_not_allowed(
                                        "the server does not allow this method on the requested "
                                        "resource"));
        }
    }
out:
    if (q.tab)
        apires_put(&s->reg, q.tab);
}

void apirest_handle(struct apirest *s, const struct apirest_req *req, struct apirest_resp *resp)
{
    buf_init(&resp->body, SIZE_MAX / 2);
    struct apirest_path p;
    if (apirest_parse_path(req->path ? req->path : "", &p)) {
        apirest__not_found_path(resp);
        return;
    }
    const char *m = req->method ? req->method : "GET";
    switch (p.kind) {
    case APIREST_P_VERSION: apirest__handle_version(resp); break;
    case APIREST_P_HEALTH:
        resp->status = 200;
        resp->content_type = "text/plain; charset=utf-8";
        buf_puts(&resp->body, "ok");
        break;
    case APIREST_P_OPENAPI_V2:
        /* an empty protobuf document: kubectl's client-side validation
         * finds no schemas and defers to the server (fieldValidation) */
        resp->status = 200;
        resp->content_type = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
        break;
    case APIREST_P_OPENAPI_V3: apirest__handle_openapi_v3(s, &p, resp); break;
    case APIREST_P_API:
    case APIREST_P_APIS:
    case APIREST_P_GROUP:
    case APIREST_P_GROUPVERSION:
        if (strcmp(m, "GET") != 0)
            apirest__respond_status(
                resp, apistatus_method_not_allowed("the server does not allow this "
                                                   "method on the requested resource"));
        else
            apirest__handle_discovery(s, &p, resp);
        break;
    case APIREST_P_RESOURCE: handle_resource(s, req, &p, resp); break;
    default: apirest__not_found_path(resp); break;
    }
    apirest_path_done(&p);
}

/* ---- lifecycle ----------------------------------------------------------- */

int apirest_init(struct apirest *s, struct etcd *etcd, struct apiwatch_hub *hub,
                 const char *server_address, struct tern_err *err)
{
    (void)err;
    memset(s, 0, sizeof(*s));
    apistore_init(&s->store, etcd);
    s->hub = hub;
    apires_registry_init(&s->reg);
    pthread_mutex_init(&s->crd_mu, NULL);
    s->server_address = xstrdup(server_address ? server_address : "");
    pthread_mutex_lock(&s->crd_mu);
    apirest__reload_crds(s);
    pthread_mutex_unlock(&s->crd_mu);
    return 0;
}

void apirest_done(struct apirest *s)
{
    apires_registry_done(&s->reg);
    pthread_mutex_destroy(&s->crd_mu);
    free(s->server_address);
}

int apirest_bootstrap(struct apirest *s, struct tern_err *err)
{
    static const char *names[] = {"default", "kube-system", "kube-public", "kube-node-lease"};
    for (size_t i = 0; i < 4; i++) {
        char *key = xasprintf("/registry/namespaces/%s", names[i]);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", "Namespace");
        cJSON_AddStringToObject(o, "apiVersion", "v1");
        cJSON *md = cJSON_AddObjectToObject(o, "metadata");
        cJSON_AddStringToObject(md, "name", names[i]);
        char *uid = apirest__uuid4();
        cJSON_AddStringToObject(md, "uid", uid);
        free(uid);
        char now[32];
        apirest__now_str(now);
        cJSON_AddStringToObject(md, "creationTimestamp", now);
        cJSON *labels = cJSON_AddObjectToObject(md, "labels");
        cJSON_AddStringToObject(labels, "kubernetes.io/metadata.name", names[i]);
        cJSON *spec = cJSON_AddObjectToObject(o, "spec");
        cJSON *f = cJSON_AddArrayToObject(spec, "finalizers");
        cJSON_AddItemToArray(f, cJSON_CreateString("kubernetes"));
        cJSON *st = cJSON_AddObjectToObject(o, "status");
        cJSON_AddStringToObject(st, "phase", "Active");
        int64_t rev;
        int rc = apistore_create(&s->store, key, o, &rev, err);
        cJSON_Delete(o);
        free(key);
        if (rc && rc != TERN_ECONFLICT)
            return rc;
    }
    return 0;
}

/* ---- in-process requests ------------------------------------------------- */

static char *pct_decode(const char *s, size_t n)
{
    char *out = xmalloc(n + 1);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n + 1 && hexv(s[i + 1]) >= 0 && hexv(s[i + 2]) >= 0) {
            out[j++] = (char)(hexv(s[i + 1]) << 4 | hexv(s[i + 2]));
            i += 2;
        } else if (s[i] == '+') {
            out[j++] = ' ';
        } else {
            out[j++] = s[i];
        }
    }
    out[j] = 0;
    return out;
}

int apirest_do(struct apirest *s, const char *method, const char *path,
               const char *content_type, const char *body, cJSON **ret_body)
{
    const char *q = strchr(path, '?');
    char *p = q ? xstrndup(path, (size_t)(q - path)) : xstrdup(path);
    struct apirest_arg *args = NULL;
    size_t nargs = 0;
    bool watch = false;
    for (const char *a = q ? q + 1 : NULL; a && *a && nargs < 64;) {
        const char *amp = strchr(a, '&');
        size_t len = amp ? (size_t)(amp - a) : strlen(a);
        const char *eq = memchr(a, '=', len);
        args = xreallocarray(args, nargs + 1, sizeof(*args));
        args[nargs].key = pct_decode(a, eq ? (size_t)(eq - a) : len);
        args[nargs].value = eq ? pct_decode(eq + 1, len - (size_t)(eq + 1 - a)) : xstrdup("");
        if (strcmp(args[nargs].key, "watch") == 0 && strcmp(args[nargs].value, "false") != 0 &&
            strcmp(args[nargs].value, "0") != 0)
            watch = true;
        nargs++;
        a = amp ? amp + 1 : NULL;
    }
    struct apirest_req req = {.method = method, .path = p, .args = args, .nargs = nargs,
                              .content_type = content_type, .body = body ? body : "",
                              .body_len = body ? strlen(body) : 0};
    struct apirest_resp resp = {0};
    int status;
    if (watch) {
        buf_init(&resp.body, 4096);
        apirest__respond_status(&resp,
                                apistatus_bad_request("watch is not available in process: use "
                                                      "apiwatch_subscribe"));
    } else {
        apirest_handle(s, &req, &resp);
    }
    status = resp.status;
    if (ret_body) {
        cJSON *j = NULL;
        *ret_body = json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &j, NULL) == 0
                        ? j
                        : NULL;
    }
    apirest_resp_done(&resp);
    for (size_t i = 0; i < nargs; i++) {
        free((char *)args[i].key);
        free((char *)args[i].value);
    }
    free(args);
    free(p);
    return status;
}
