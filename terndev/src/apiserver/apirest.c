/* apirest.c - Kubernetes REST semantics. See apirest.h. */
#include "apirest.h"

#include "apicrd.h"
#include "apievent.h"
#include "apiproto.h"
#include "apipatch.h"
#include "apischema.h"
#include "apiselector.h"
#include "apistatus.h"
#include "apitable.h"
#include "base/base64.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"
#include "yaml/yamljson.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>
#include <time.h>

#define CT_JSON "application/json"
#define MAX_RETRIES 16

/* ---- paths -------------------------------------------------------------- */

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

/* ---- small helpers ------------------------------------------------------ */

static const char *arg(const struct apirest_req *r, const char *k)
{
    for (size_t i = 0; i < r->nargs; i++)
        if (strcmp(r->args[i].key, k) == 0)
            return r->args[i].value ? r->args[i].value : "";
    return NULL;
}

static bool arg_true(const struct apirest_req *r, const char *k)
{
    const char *v = arg(r, k);
    return v && (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 || strcmp(v, "1") == 0);
}

static void now_str(char out[32])
{
    apitable_format_time(time(NULL), out, 32);
}

static char *uuid4(void)
{
    unsigned char b[16];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        /* getrandom does not fail for 16 bytes once the pool is ready */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        for (size_t i = 0; i < sizeof(b); i++)
            b[i] = (unsigned char)((ts.tv_nsec >> (i % 8)) ^ (unsigned long)i * 131u);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    return xasprintf("%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                     b[12], b[13], b[14], b[15]);
}

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

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static cJSON *ensure_obj(cJSON *o, const char *k)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsObject(v)) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, k);
        v = cJSON_AddObjectToObject(o, k);
    }
    return v;
}

static void set_str(cJSON *o, const char *k, const char *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    cJSON_AddStringToObject(o, k, v);
}

static void set_item(cJSON *o, const char *k, cJSON *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    cJSON_AddItemToObject(o, k, v);
}

static int64_t rv_of(const cJSON *obj)
{
    const char *rv = jstr(json_get(obj, "metadata"), "resourceVersion");
    int64_t v = 0;
    if (!rv || num_parse_i64(rv, &v) || v < 0)
        return -1;
    return v;
}

static void respond_json(struct apirest_resp *resp, int code, cJSON *body)
{
    resp->status = code;
    resp->content_type = CT_JSON;
    char *s = json_print(body);
    buf_reset(&resp->body);
    buf_puts(&resp->body, s);
    buf_putc(&resp->body, '\n');
    free(s);
    cJSON_Delete(body);
}

static void respond_status(struct apirest_resp *resp, cJSON *status)
{
    respond_json(resp, apistatus_code(status), status);
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

void apirest_resp_done(struct apirest_resp *resp)
{
    buf_done(&resp->body);
    free(resp->warning);
    resp->warning = NULL;
    if (resp->watch)
        apirest_watch_free(resp->watch);
    resp->watch = NULL;
}

static cJSON *status_from_store(int rc, const struct apires *res, const char *name,
                                const struct tern_err *e)
{
    switch (rc) {
    case TERN_ENOTFOUND: return apistatus_not_found(res->group, res->plural, name);
    case TERN_ECONFLICT: return apistatus_conflict(res->group, res->plural, name, NULL);
    case TERN_ETOOLARGE: return apistatus_too_large("Request entity too large: limit is 3145728");
    case TERN_ECOMPACTED:
        return apistatus_expired(
            "The provided continue parameter is too old to display a consistent list result. "
            "You can start a new list without the continue parameter, or use the continue "
            "token in this response to retrieve the remainder of the results. Continuing with "
            "the provided token results in an inconsistent list - objects that were created, "
            "modified, or deleted between the time the first chunk was returned and now may "
            "show up in the list.");
    case TERN_EUNREACHABLE:
    case TERN_ETIMEOUT: {
        cJSON *s = apistatus_new(504, "Timeout", "etcd is unavailable", NULL, NULL, NULL);
        return s;
    }
    default: return apistatus_internal(e && e->msg[0] ? e->msg : err_str(rc));
    }
}

/* ---- discovery ---------------------------------------------------------- */

static void handle_version(struct apirest_resp *resp)
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
    respond_json(resp, 200, v);
}

static void handle_discovery(struct apirest *s, const struct apirest_path *p,
                             struct apirest_resp *resp)
{
    struct apires_table *t = apires_get(&s->reg);
    switch (p->kind) {
    case APIREST_P_API: respond_json(resp, 200, apires_api_versions(s->server_address)); break;
    case APIREST_P_APIS: respond_json(resp, 200, apires_group_list(t)); break;
    case APIREST_P_GROUP:
        if (apires_has_group(t, p->group))
            respond_json(resp, 200, apires_group(t, p->group));
        else
            respond_status(resp, apistatus_new(404, "NotFound", "the server could not find the "
                                               "requested resource", NULL, NULL, NULL));
        break;
    case APIREST_P_GROUPVERSION:
        if (apires_has_group_version(t, p->group, p->version))
            respond_json(resp, 200, apires_resource_list(t, p->group, p->version));
        else
            respond_status(resp, apistatus_new(404, "NotFound", "the server could not find the "
                                               "requested resource", NULL, NULL, NULL));
        break;
    default: break;
    }
    apires_put(&s->reg, t);
}

/* ---- request context ---------------------------------------------------- */

enum want { WANT_OBJECT, WANT_TABLE, WANT_PARTIAL };

struct rq {
    struct apirest *s;
    const struct apirest_req *req;
    struct apirest_resp *resp;
    struct apires_table *tab;
    const struct apires *res;
    const char *ns, *name, *sub;
    enum want want;
    enum apitable_include include;
    bool dry_run;
    const char *field_validation; /* Strict, Warn, Ignore */
};

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

/* The object as the client asked for it: with the served apiVersion (an
 * events.k8s.io Event converted from the stored core shape). */
static void to_served_version(const struct apires *res, cJSON *obj)
{
    if (res->core_event)
        apievent_to_v1(obj);
    if (!res->crd)
        return;
    char *av = apires_api_version(res);
    set_str(obj, "apiVersion", av);
    free(av);
}

/* The object as it is stored (an events.k8s.io Event as a core one). */
static void to_storage_version(const struct apires *res, cJSON *obj)
{
    if (res->core_event)
        apievent_to_core(obj);
}

static cJSON *partial_of(const cJSON *obj)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "kind", "PartialObjectMetadata");
    cJSON_AddStringToObject(p, "apiVersion", "meta.k8s.io/v1");
    const cJSON *md = json_get(obj, "metadata");
    cJSON_AddItemToObject(p, "metadata", md ? json_dup(md) : cJSON_CreateObject());
    return p;
}

/* Sends one object in the representation requested. Takes obj. */
static void respond_object(struct rq *q, int code, cJSON *obj)
{
    to_served_version(q->res, obj);
    if (q->want == WANT_TABLE) {
        cJSON *t = apitable_build(q->res, &obj, 1, q->include, NULL, time(NULL));
        cJSON_Delete(obj);
        respond_json(q->resp, code, t);
    } else if (q->want == WANT_PARTIAL) {
        cJSON *p = partial_of(obj);
        cJSON_Delete(obj);
        respond_json(q->resp, code, p);
    } else {
        respond_json(q->resp, code, obj);
    }
}

/* ---- decoding and validation ------------------------------------------- */

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

/* Parses the request body as a JSON object. Returns NULL and *ret, or an
 * error Status. dup receives the first duplicate key path. */
static cJSON *decode_body(struct rq *q, cJSON **ret, char dup[256], bool allow_array)
{
    const struct apirest_req *r = q->req;
    dup[0] = 0;
    if (r->body_too_large)
        return apistatus_too_large("Request entity too large: limit is 3145728");
    const char *ct = r->content_type ? r->content_type : CT_JSON;
    if (strstr(ct, "protobuf")) {
        cJSON *pobj = NULL;
        struct tern_err pe = {0};
        int prc = apiproto_decode(r->body, r->body_len, &pobj, &pe);
        if (prc == TERN_EPARSE)
            return apistatus_bad_request(pe.msg);
        if (prc)
            return apistatus_unsupported_media(
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json, application/yaml");
        *ret = pobj;
        return NULL;
    }
    if (!r->body_len) {
        return apistatus_bad_request("the body of the request was empty");
    }
    struct json_parse_opts o = {.max_bytes = TERN_KUBE_MAX_OBJECT, .dups = JSON_DUPS_LAST_WINS};
    struct tern_err e = {0};
    cJSON *obj = NULL;
    int rc;
    if (strstr(ct, "yaml")) {
        struct yamljson_opts yo = {.max_bytes = TERN_KUBE_MAX_OBJECT};
        rc = yamljson_parse_one(r->body, r->body_len, &yo, &obj, &e);
        if (rc == TERN_EPARSE || (rc == TERN_ETOOLARGE && r->body_len <= TERN_KUBE_MAX_OBJECT)) {
            char *m = xasprintf("error converting YAML to JSON: %s", e.msg);
            cJSON *st = apistatus_bad_request(m);
            free(m);
            return st;
        }
        o.dup_path[0] = 0;
    } else {
        rc = json_parse_opts(r->body, r->body_len, &o, &obj, &e);
    }
    if (rc == TERN_ETOOLARGE && r->body_len > TERN_KUBE_MAX_OBJECT)
        return apistatus_too_large("Request entity too large: limit is 3145728");
    if (rc) {
        char *m = xasprintf("couldn't get version/kind; json parse error: %s", e.msg);
        cJSON *st = apistatus_bad_request(m);
        free(m);
        return st;
    }
    if (!cJSON_IsObject(obj) && !(allow_array && cJSON_IsArray(obj))) {
        cJSON_Delete(obj);
        return apistatus_bad_request("couldn't get version/kind; json parse error: json: cannot "
                                     "unmarshal non-object into Go value of type struct");
    }
    snprintf(dup, 256, "%s", o.dup_path);
    *ret = obj;
    return NULL;
}

static const char *check_name(const struct apires *res, const char *name)
{
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return "may not be '.' or '..'";
    if (strchr(name, '/') || strchr(name, '%'))
        return "may not contain '/' or '%'";
    if (!res->crd && strcmp(res->kind, "Namespace") == 0)
        return apicrd_check_label(name);
    if (!res->crd && (strcmp(res->kind, "Role") == 0 || strcmp(res->kind, "ClusterRole") == 0 ||
                      strcmp(res->kind, "RoleBinding") == 0 ||
                      strcmp(res->kind, "ClusterRoleBinding") == 0))
        return NULL; /* path segment names */
    if (!res->crd && strcmp(res->kind, "Service") == 0) {
        const char *e = apicrd_check_label(name);
        if (!e && !(name[0] >= 'a' && name[0] <= 'z'))
            return "a DNS-1035 label must consist of lower case alphanumeric characters or "
                   "'-', start with an alphabetic character, and end with an alphanumeric "
                   "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                   "'[a-z]([-a-z0-9]*[a-z0-9])?')";
        return e;
    }
    return apicrd_check_subdomain(name);
}

static void validate_meta(const struct apires *res, const cJSON *obj, struct apistatus_fields *f)
{
    const cJSON *md = json_get(obj, "metadata");
    const cJSON *name = json_get(md, "name");
    if (cJSON_IsString(name)) {
        const char *e = check_name(res, name->valuestring);
        if (e)
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.name", name, e);
    }
    const cJSON *labels = json_get(md, "labels");
    if (labels && !cJSON_IsObject(labels))
        apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.labels", labels,
                             "must be a map of strings");
    for (const cJSON *l = cJSON_IsObject(labels) ? labels->child : NULL; l; l = l->next) {
        const char *ke = apisel_check_label_key(l->string);
        if (ke) {
            cJSON *k = cJSON_CreateString(l->string);
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.labels", k, ke);
            cJSON_Delete(k);
        }
        if (!cJSON_IsString(l)) {
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.labels", l,
                                 "must be a string");
            continue;
        }
        const char *ve = apisel_check_label_value(l->valuestring);
        if (ve)
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.labels", l, ve);
    }
    const cJSON *ann = json_get(md, "annotations");
    size_t total = 0;
    for (const cJSON *a = cJSON_IsObject(ann) ? ann->child : NULL; a; a = a->next) {
        const char *ke = apisel_check_label_key(a->string);
        if (ke) {
            cJSON *k = cJSON_CreateString(a->string);
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.annotations", k, ke);
            cJSON_Delete(k);
        }
        if (!cJSON_IsString(a))
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.annotations", a,
                                 "must be a string");
        else
            total += strlen(a->string) + strlen(a->valuestring);
    }
    if (total > 256 * 1024)
        apistatus_fields_addv(f, APISTATUS_F_TOOLONG, "metadata.annotations", NULL,
                              "may not be more than 262144 bytes");
    const cJSON *owners = json_get(md, "ownerReferences");
    int i = 0, controllers = 0;
    for (const cJSON *o = cJSON_IsArray(owners) ? owners->child : NULL; o; o = o->next, i++) {
        static const char *req[] = {"apiVersion", "kind", "name", "uid"};
        for (size_t k = 0; k < 4; k++) {
            const char *v = jstr(o, req[k]);
            if (!v || !*v) {
                char *p = xasprintf("metadata.ownerReferences[%d].%s", i, req[k]);
                apistatus_fields_addv(f, APISTATUS_F_INVALID, p, "\"\"",
                                      k == 3 ? "uid must not be empty"
                                             : k == 2 ? "name must not be empty"
                                             : k == 1 ? "kind must not be empty"
                                                      : "version must not be empty");
                free(p);
            }
        }
        if (cJSON_IsTrue(json_get(o, "controller")))
            controllers++;
    }
    if (controllers > 1)
        apistatus_fields_addv(f, APISTATUS_F_INVALID, "metadata.ownerReferences", NULL,
                              "Only one reference can have Controller set to true");
    const cJSON *fin = json_get(md, "finalizers");
    i = 0;
    for (const cJSON *c = cJSON_IsArray(fin) ? fin->child : NULL; c; c = c->next, i++) {
        if (!cJSON_IsString(c) || apisel_check_label_key(c->valuestring)) {
            char *p = xasprintf("metadata.finalizers[%d]", i);
            apistatus_fields_add(f, APISTATUS_F_INVALID, p, c,
                                 "name part must consist of alphanumeric characters, '-', '_' "
                                 "or '.', and must start and end with an alphanumeric "
                                 "character");
            free(p);
        }
    }
}

static bool is_kind(const struct apires *res, const char *kind)
{
    return !res->crd && strcmp(res->kind, kind) == 0;
}

/* ---- built-in validation (a subset of the API validation packages) ---- */

static const char config_key_msg[] =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')";

static void validate_config_keys(const cJSON *obj, const char *field, struct apistatus_fields *f)
{
    const cJSON *m = json_get(obj, field);
    for (const cJSON *c = cJSON_IsObject(m) ? m->child : NULL; c; c = c->next) {
        bool ok = *c->string && strlen(c->string) <= 253 && strcmp(c->string, ".") &&
                  strcmp(c->string, "..");
        for (const char *p = c->string; ok && *p; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 *p == '-' || *p == '_' || *p == '.';
        char *path = xasprintf("%s[%s]", field, c->string);
        if (!ok) {
            cJSON *k = cJSON_CreateString(c->string);
            apistatus_fields_add(f, APISTATUS_F_INVALID, path, k, config_key_msg);
            cJSON_Delete(k);
        } else if (!cJSON_IsString(c)) {
            apistatus_fields_add(f, APISTATUS_F_INVALID, path, c, "must be a string");
        }
        free(path);
    }
}

static void validate_containers(const cJSON *spec, const char *path, const char *list,
                                bool required, struct apistatus_fields *f)
{
    const cJSON *cs = json_get(spec, list);
    char *lp = xasprintf("%s.%s", path, list);
    if (required && (!cJSON_IsArray(cs) || !cs->child))
        apistatus_fields_addv(f, APISTATUS_F_REQUIRED, lp, NULL, NULL);
    int i = 0;
    for (const cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next, i++) {
        const char *name = jstr(c, "name"), *image = jstr(c, "image");
        char *np = xasprintf("%s[%d].name", lp, i), *ip = xasprintf("%s[%d].image", lp, i);
        if (!name || !*name) {
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, np, NULL, NULL);
        } else {
            const char *e = apicrd_check_label(name);
            if (e)
                apistatus_fields_add(f, APISTATUS_F_INVALID, np, json_get(c, "name"), e);
            for (const cJSON *d = cs->child; d != c; d = d->next) {
                const char *dn = jstr(d, "name");
                if (dn && strcmp(dn, name) == 0) {
                    apistatus_fields_add(f, APISTATUS_F_DUPLICATE, np, json_get(c, "name"), NULL);
                    break;
                }
            }
        }
        if (!image || !*image)
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, ip, NULL, NULL);
        free(np);
        free(ip);
    }
    free(lp);
}

static void validate_pod_spec(const cJSON *spec, const char *path, bool job,
                              struct apistatus_fields *f)
{
    if (!cJSON_IsObject(spec)) {
        apistatus_fields_addv(f, APISTATUS_F_REQUIRED, path, NULL, NULL);
        return;
    }
    validate_containers(spec, path, "containers", true, f);
    validate_containers(spec, path, "initContainers", false, f);
    const char *rp = jstr(spec, "restartPolicy");
    char *rpp = xasprintf("%s.restartPolicy", path);
    if (job) {
        if (!rp || (strcmp(rp, "Never") && strcmp(rp, "OnFailure"))) {
            if (!rp || strcmp(rp, "Always") == 0)
                apistatus_fields_addv(f, APISTATUS_F_REQUIRED, rpp, NULL,
                                      "valid values: \"OnFailure\", \"Never\"");
            else
                apistatus_fields_add(f, APISTATUS_F_UNSUPPORTED, rpp, json_get(spec, "restartPolicy"),
                                     "supported values: \"OnFailure\", \"Never\"");
        }
    } else if (rp && strcmp(rp, "Always") && strcmp(rp, "Never") && strcmp(rp, "OnFailure")) {
        apistatus_fields_add(f, APISTATUS_F_UNSUPPORTED, rpp, json_get(spec, "restartPolicy"),
                             "supported values: \"Always\", \"Never\", \"OnFailure\"");
    }
    free(rpp);
}

/* The pod spec fields an update may change (ValidatePodUpdate): container
 * images, activeDeadlineSeconds, tolerations (additions), and the grace
 * period. Returns true when something else changed. */
static bool pod_spec_changed(const cJSON *old, const cJSON *neu)
{
    cJSON *a = json_dup(old), *b = json_dup(neu);
    static const char *lists[] = {"containers", "initContainers"};
    for (size_t l = 0; l < 2; l++) {
        cJSON *ca = cJSON_GetObjectItemCaseSensitive(a, lists[l]);
        cJSON *cb = cJSON_GetObjectItemCaseSensitive(b, lists[l]);
        for (cJSON *x = cJSON_IsArray(ca) ? ca->child : NULL; x; x = x->next)
            cJSON_DeleteItemFromObjectCaseSensitive(x, "image");
        for (cJSON *x = cJSON_IsArray(cb) ? cb->child : NULL; x; x = x->next)
            cJSON_DeleteItemFromObjectCaseSensitive(x, "image");
    }
    static const char *mutable_fields[] = {"activeDeadlineSeconds", "tolerations",
                                           "terminationGracePeriodSeconds"};
    for (size_t i = 0; i < 3; i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(a, mutable_fields[i]);
        cJSON_DeleteItemFromObjectCaseSensitive(b, mutable_fields[i]);
    }
    bool changed = !cJSON_Compare(a, b, 1);
    cJSON_Delete(a);
    cJSON_Delete(b);
    return changed;
}

static void validate_builtin(const struct apires *res, const cJSON *obj, const cJSON *old,
                             const char *sub, struct apistatus_fields *f)
{
    if (res->crd || (sub && *sub))
        return;
    const char *k = res->kind;
    const cJSON *spec = json_get(obj, "spec");
    if (strcmp(k, "ConfigMap") == 0) {
        validate_config_keys(obj, "data", f);
        validate_config_keys(obj, "binaryData", f);
    } else if (strcmp(k, "Secret") == 0) {
        validate_config_keys(obj, "data", f);
    } else if (strcmp(k, "Pod") == 0) {
        validate_pod_spec(spec, "spec", false, f);
        if (old && cJSON_IsObject(spec) && pod_spec_changed(json_get(old, "spec"), spec))
            apistatus_fields_addv(
                f, APISTATUS_F_FORBIDDEN, "spec", NULL,
                "pod updates may not change fields other than `spec.containers[*].image`,"
                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)");
    } else if (strcmp(k, "Job") == 0) {
        const cJSON *tmpl = json_get(spec, "template");
        if (!cJSON_IsObject(tmpl))
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, "spec.template", NULL, NULL);
        else
            validate_pod_spec(json_get(tmpl, "spec"), "spec.template.spec", true, f);
        if (old) {
            const cJSON *os = json_get(old, "spec");
            static const char *immutable[] = {"selector", "completions", "completionMode",
                                              "podFailurePolicy"};
            for (size_t i = 0; i < 4; i++) {
                const cJSON *a = json_get(os, immutable[i]), *b = json_get(spec, immutable[i]);
                if ((a || b) && !(a && b && cJSON_Compare(a, b, 1))) {
                    char *p = xasprintf("spec.%s", immutable[i]);
                    apistatus_fields_add(f, APISTATUS_F_INVALID, p, b, "field is immutable");
                    free(p);
                }
            }
            const cJSON *ot = json_get(os, "template");
            if (tmpl && ot && !cJSON_Compare(ot, tmpl, 1) &&
                !cJSON_IsTrue(json_get(os, "suspend")))
                apistatus_fields_addv(f, APISTATUS_F_INVALID, "spec.template", NULL,
                                      "field is immutable");
        }
    } else if (strcmp(k, "PersistentVolumeClaim") == 0) {
        const cJSON *am = json_get(spec, "accessModes");
        if (!cJSON_IsArray(am) || !am->child)
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, "spec.accessModes", NULL,
                                  "at least 1 access mode is required");
        if (!json_get(json_get(json_get(spec, "resources"), "requests"), "storage") && !old)
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, "spec.resources[storage]", NULL, NULL);
    }
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
    return res->crd || strcmp(res->kind, "Job") == 0 || strcmp(res->kind, "Deployment") == 0 ||
           strcmp(res->kind, "CustomResourceDefinition") == 0 ||
           strcmp(res->kind, "NetworkPolicy") == 0;
}

static void default_container(cJSON *c)
{
    if (!cJSON_IsObject(c))
        return;
    if (!json_get(c, "terminationMessagePath"))
        cJSON_AddStringToObject(c, "terminationMessagePath", "/dev/termination-log");
    if (!json_get(c, "terminationMessagePolicy"))
        cJSON_AddStringToObject(c, "terminationMessagePolicy", "File");
    if (!json_get(c, "imagePullPolicy")) {
        const char *img = jstr(c, "image");
        bool latest = img && (!strchr(img, ':') || strstr(img, ":latest"));
        cJSON_AddStringToObject(c, "imagePullPolicy", latest ? "Always" : "IfNotPresent");
    }
    if (!json_get(c, "resources"))
        cJSON_AddObjectToObject(c, "resources");
    cJSON *ports = cJSON_GetObjectItemCaseSensitive(c, "ports");
    for (cJSON *p = cJSON_IsArray(ports) ? ports->child : NULL; p; p = p->next)
        if (cJSON_IsObject(p) && !json_get(p, "protocol"))
            cJSON_AddStringToObject(p, "protocol", "TCP");
}

static void default_pod_spec(cJSON *spec)
{
    if (!cJSON_IsObject(spec))
        return;
    if (!json_get(spec, "restartPolicy"))
        cJSON_AddStringToObject(spec, "restartPolicy", "Always");
    if (!json_get(spec, "terminationGracePeriodSeconds"))
        json_add_int64(spec, "terminationGracePeriodSeconds", 30);
    if (!json_get(spec, "dnsPolicy"))
        cJSON_AddStringToObject(spec, "dnsPolicy", "ClusterFirst");
    if (!json_get(spec, "securityContext"))
        cJSON_AddObjectToObject(spec, "securityContext");
    if (!json_get(spec, "schedulerName"))
        cJSON_AddStringToObject(spec, "schedulerName", "default-scheduler");
    const char *lists[] = {"containers", "initContainers"};
    for (size_t i = 0; i < 2; i++) {
        cJSON *cs = cJSON_GetObjectItemCaseSensitive(spec, lists[i]);
        for (cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next)
            default_container(c);
    }
}

/* Built-in defaulting (a subset of pkg/apis/.../defaults.go) on create. */
static void default_builtin(const struct apires *res, cJSON *obj, const char *uid)
{
    const char *k = res->kind;
    if (strcmp(k, "Pod") == 0) {
        default_pod_spec(cJSON_GetObjectItemCaseSensitive(obj, "spec"));
    } else if (strcmp(k, "Secret") == 0) {
        if (!json_get(obj, "type"))
            cJSON_AddStringToObject(obj, "type", "Opaque");
    } else if (strcmp(k, "Namespace") == 0) {
        cJSON *spec = ensure_obj(obj, "spec");
        if (!json_get(spec, "finalizers")) {
            cJSON *f = cJSON_AddArrayToObject(spec, "finalizers");
            cJSON_AddItemToArray(f, cJSON_CreateString("kubernetes"));
        }
        cJSON *md = ensure_obj(obj, "metadata");
        cJSON *labels = ensure_obj(md, "labels");
        set_str(labels, "kubernetes.io/metadata.name", jstr(md, "name"));
    } else if (strcmp(k, "Job") == 0) {
        cJSON *spec = ensure_obj(obj, "spec");
        if (!json_get(spec, "parallelism"))
            json_add_int64(spec, "parallelism", 1);
        if (!json_get(spec, "completions") && !json_get(spec, "completionMode"))
            json_add_int64(spec, "completions", 1);
        if (!json_get(spec, "backoffLimit"))
            json_add_int64(spec, "backoffLimit", 6);
        if (!json_get(spec, "completionMode"))
            cJSON_AddStringToObject(spec, "completionMode", "NonIndexed");
        if (!json_get(spec, "suspend"))
            cJSON_AddFalseToObject(spec, "suspend");
        if (!json_get(spec, "podReplacementPolicy"))
            cJSON_AddStringToObject(spec, "podReplacementPolicy", "TerminatingOrFailed");
        if (!cJSON_IsTrue(json_get(spec, "manualSelector")) && uid) {
            const char *name = jstr(json_get(obj, "metadata"), "name");
            cJSON *sel = cJSON_CreateObject();
            cJSON *ml = cJSON_AddObjectToObject(sel, "matchLabels");
            cJSON_AddStringToObject(ml, "batch.kubernetes.io/controller-uid", uid);
            set_item(spec, "selector", sel);
            cJSON *tmd = ensure_obj(ensure_obj(spec, "template"), "metadata");
            cJSON *tl = ensure_obj(tmd, "labels");
            set_str(tl, "batch.kubernetes.io/controller-uid", uid);
            set_str(tl, "batch.kubernetes.io/job-name", name ? name : "");
            set_str(tl, "controller-uid", uid);
            set_str(tl, "job-name", name ? name : "");
        }
        cJSON *tspec = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(spec, "template"), "spec");
        default_pod_spec(tspec);
    } else if (strcmp(k, "Deployment") == 0) {
        cJSON *spec = ensure_obj(obj, "spec");
        if (!json_get(spec, "replicas"))
            json_add_int64(spec, "replicas", 1);
        if (!json_get(spec, "revisionHistoryLimit"))
            json_add_int64(spec, "revisionHistoryLimit", 10);
        if (!json_get(spec, "progressDeadlineSeconds"))
            json_add_int64(spec, "progressDeadlineSeconds", 600);
        if (!json_get(spec, "strategy")) {
            cJSON *s = cJSON_AddObjectToObject(spec, "strategy");
            cJSON_AddStringToObject(s, "type", "RollingUpdate");
            cJSON *ru = cJSON_AddObjectToObject(s, "rollingUpdate");
            cJSON_AddStringToObject(ru, "maxUnavailable", "25%");
            cJSON_AddStringToObject(ru, "maxSurge", "25%");
        }
        default_pod_spec(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(spec, "template"), "spec"));
    } else if (strcmp(k, "Service") == 0) {
        cJSON *spec = ensure_obj(obj, "spec");
        if (!json_get(spec, "type"))
            cJSON_AddStringToObject(spec, "type", "ClusterIP");
        if (!json_get(spec, "sessionAffinity"))
            cJSON_AddStringToObject(spec, "sessionAffinity", "None");
        cJSON *ports = cJSON_GetObjectItemCaseSensitive(spec, "ports");
        for (cJSON *p = cJSON_IsArray(ports) ? ports->child : NULL; p; p = p->next) {
            if (!json_get(p, "protocol"))
                cJSON_AddStringToObject(p, "protocol", "TCP");
            if (!json_get(p, "targetPort") && json_get(p, "port"))
                cJSON_AddItemToObject(p, "targetPort", json_dup(json_get(p, "port")));
        }
    } else if (strcmp(k, "PersistentVolumeClaim") == 0) {
        cJSON *spec = ensure_obj(obj, "spec");
        if (!json_get(spec, "volumeMode"))
            cJSON_AddStringToObject(spec, "volumeMode", "Filesystem");
    }
}

/* Secret stringData is merged into data (base64) on every write. */
static void secret_string_data(const struct apires *res, cJSON *obj)
{
    if (res->crd || strcmp(res->kind, "Secret") != 0)
        return;
    cJSON *sd = cJSON_DetachItemFromObjectCaseSensitive(obj, "stringData");
    if (!cJSON_IsObject(sd)) {
        cJSON_Delete(sd);
        return;
    }
    cJSON *data = ensure_obj(obj, "data");
    for (cJSON *c = sd->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            continue;
        char *b = base64_encode(c->valuestring, strlen(c->valuestring));
        set_str(data, c->string, b);
        free(b);
    }
    cJSON_Delete(sd);
}

/* Status set by the server on create (PrepareForCreate). */
static void initial_status(const struct apires *res, cJSON *obj)
{
    if (res->crd) {
        if (res->has_status)
            cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
        return;
    }
    const char *k = res->kind;
    if (strcmp(k, "Pod") == 0) {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddStringToObject(st, "phase", "Pending");
        cJSON_AddStringToObject(st, "qosClass", "BestEffort");
        set_item(obj, "status", st);
    } else if (strcmp(k, "Namespace") == 0) {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddStringToObject(st, "phase", "Active");
        set_item(obj, "status", st);
    } else if (strcmp(k, "Job") == 0 || strcmp(k, "Deployment") == 0 ||
               strcmp(k, "Service") == 0) {
        set_item(obj, "status", cJSON_CreateObject());
    } else if (strcmp(k, "PersistentVolumeClaim") == 0) {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddStringToObject(st, "phase", "Pending");
        set_item(obj, "status", st);
    }
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

/* ---- writes --------------------------------------------------------------- */

static cJSON *check_gvk(struct rq *q, cJSON *obj)
{
    char *want_av = apires_api_version(q->res);
    if (!q->res->crd) {
        /* typed endpoints default the group/version/kind of the body */
        const char *k0 = jstr(obj, "kind"), *a0 = jstr(obj, "apiVersion");
        if (!k0 || !*k0)
            set_str(obj, "kind", q->res->kind);
        if (!a0 || !*a0)
            set_str(obj, "apiVersion", want_av);
    }
    const char *kind = jstr(obj, "kind"), *av = jstr(obj, "apiVersion");
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

/* After a CRD write: reload the CRDs into a new resource table. */
static void reload_crds(struct apirest *s)
{
    struct apires_table *t = apires_get(&s->reg);
    const struct apires *crdres = apires_find(t, "apiextensions.k8s.io", "v1",
                                              "customresourcedefinitions");
    char *prefix = apires_key(crdres, NULL, NULL);
    apires_put(&s->reg, t);
    struct apistore_list l = {0};
    if (apistore_list(&s->store, prefix, NULL, 0, 0, &l, NULL) == 0) {
        cJSON *arr = cJSON_CreateArray();
        for (size_t i = 0; i < l.n; i++) {
            cJSON_AddItemToArray(arr, l.objs[i]);
            l.objs[i] = NULL;
        }
        apires_registry_set_crds(&s->reg, arr);
        l.n = 0;
    }
    apistore_list_done(&l);
    free(prefix);
}

static bool is_crd(const struct apires *res)
{
    return !res->crd && strcmp(res->kind, "CustomResourceDefinition") == 0;
}

/* Checks that the namespace exists and is not terminating. */
static cJSON *check_namespace(struct rq *q)
{
    if (!q->res->namespaced)
        return NULL;
    char *key = xasprintf("/registry/namespaces/%s", q->ns);
    cJSON *nsobj = NULL;
    int rc = apistore_get(&q->s->store, key, &nsobj, NULL, NULL);
    free(key);
    if (rc == TERN_ENOTFOUND)
        return apistatus_not_found("", "namespaces", q->ns);
    if (rc)
        return status_from_store(rc, q->res, q->ns, NULL);
    cJSON *st = NULL;
    if (jstr(json_get(nsobj, "metadata"), "deletionTimestamp")) {
        char *m = xasprintf("unable to create new content in namespace %s because it is being "
                            "terminated",
                            q->ns);
        st = apistatus_forbidden(q->res->group, q->res->plural, jstr(json_get(nsobj, "metadata"),
                                                                     "name"), m);
        apistatus_add_cause(st, "NamespaceTerminating", m, NULL);
        free(m);
    }
    cJSON_Delete(nsobj);
    return st;
}

/* The object's metadata.namespace: the request's for namespaced resources
 * (a different one in the body is refused, as kube-apiserver does), none for
 * cluster-scoped ones. Returns a Status on failure, else NULL. */
static cJSON *place_namespace(struct rq *q, cJSON *md)
{
    const char *bns = jstr(md, "namespace");
    if (q->res->namespaced) {
        if (bns && *bns && strcmp(bns, q->ns) != 0)
            return apistatus_bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request");
        set_str(md, "namespace", q->ns);
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(md, "namespace");
    }
    return NULL;
}

/* Create-time preparation. Takes nothing; modifies obj. Returns a Status on
 * failure. */
static cJSON *prepare_create(struct rq *q, cJSON *obj, const char *dup)
{
    cJSON *st = check_gvk(q, obj);
    if (st)
        return st;
    cJSON *md = ensure_obj(obj, "metadata");
    cJSON *nst = place_namespace(q, md);
    if (nst)
        return nst;
    struct apischema_paths unknown = {0};
    drop_unknown_common(q->res, obj, &unknown);
    struct apistatus_fields f = {0};
    const char *name = jstr(md, "name");
    const char *gen = jstr(md, "generateName");
    if ((!name || !*name) && gen && *gen) {
        char *sfx = random_suffix();
        char *n = xasprintf("%s%s", gen, sfx);
        set_str(md, "name", n);
        free(n);
        free(sfx);
        name = jstr(md, "name");
    }
    if (!name || !*name)
        apistatus_fields_addv(&f, APISTATUS_F_REQUIRED, "metadata.name", NULL,
                              "name or generateName is required");
    char *uid = uuid4();
    char now[32];
    now_str(now);
    set_str(md, "uid", uid);
    set_str(md, "creationTimestamp", now);
    cJSON_DeleteItemFromObjectCaseSensitive(md, "resourceVersion");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "deletionTimestamp");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "deletionGracePeriodSeconds");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "selfLink");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "generation");
    if (uses_generation(q->res))
        json_add_int64(md, "generation", 1);
    if (!q->res->crd) {
        default_builtin(q->res, obj, uid);
        secret_string_data(q->res, obj);
    }
    initial_status(q->res, obj);
    cr_schema(q, obj, &unknown, &f);
    st = field_validation(q, &unknown, dup);
    if (!st && is_crd(q->res)) {
        apicrd_prepare(obj, NULL, now, &f);
    }
    if (!st) {
        validate_meta(q->res, obj, &f);
        validate_builtin(q->res, obj, NULL, NULL, &f);
    }
    if (!st && f.n) {
        st = apistatus_invalid(q->res->crd || is_crd(q->res) ? q->res->group : q->res->group,
                               q->res->kind, name, &f);
    }
    apistatus_fields_done(&f);
    apischema_paths_done(&unknown);
    free(uid);
    return st;
}

/* Update-time preparation of obj (the desired object) against cur. */
static cJSON *prepare_update(struct rq *q, const cJSON *cur, cJSON **objp, const char *dup,
                             bool check_kind)
{
    cJSON *obj = *objp;
    cJSON *st = check_kind ? check_gvk(q, obj) : NULL;
    if (st)
        return st;
    cJSON *md = ensure_obj(obj, "metadata");
    const cJSON *cmd = json_get(cur, "metadata");
    const char *name = jstr(md, "name");
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
    if (is_kind(q->res, "Namespace") && q->sub && strcmp(q->sub, "finalize") == 0) {
        /* namespaces/NAME/finalize changes spec.finalizers only */
        cJSON *n = json_dup(cur);
        cJSON *fin = cJSON_DetachItemFromObjectCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(obj, "spec"), "finalizers");
        cJSON *nspec = ensure_obj(n, "spec");
        cJSON_DeleteItemFromObjectCaseSensitive(nspec, "finalizers");
        if (fin)
            cJSON_AddItemToObject(nspec, "finalizers", fin);
        cJSON_Delete(obj);
        obj = n;
        *objp = n;
        md = ensure_obj(obj, "metadata");
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
            md = ensure_obj(obj, "metadata");
        } else {
            const cJSON *cs = json_get(cur, "status");
            cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
            if (cs)
                cJSON_AddItemToObject(obj, "status", json_dup(cs));
        }
    }
    secret_string_data(q->res, obj);
    struct apistatus_fields f = {0};
    cr_schema(q, obj, &unknown, &f);
    st = field_validation(q, &unknown, dup);
    if (!st && is_crd(q->res)) {
        char now[32];
        now_str(now);
        apicrd_prepare(obj, cur, now, &f);
    }
    /* finalizers while deleting */
    if (!st && jstr(cmd, "deletionTimestamp")) {
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
        validate_meta(q->res, obj, &f);
        validate_builtin(q->res, obj, cur, q->sub, &f);
    }
    if (!st && f.n)
        st = apistatus_invalid(q->res->group, q->res->kind, q->name, &f);
    apistatus_fields_done(&f);
    apischema_paths_done(&unknown);
    return st;
}

static bool finalizers_empty(const cJSON *obj)
{
    const cJSON *f = json_get(json_get(obj, "metadata"), "finalizers");
    return !cJSON_IsArray(f) || !f->child;
}

/* A deleting object goes when nothing holds it: no finalizers, for pods a
 * grace period run down to 0, for namespaces empty spec.finalizers. */
static bool removable(const struct apires *res, const cJSON *obj)
{
    if (!finalizers_empty(obj))
        return false;
    if (is_kind(res, "Pod")) {
        int64_t g = 0;
        const cJSON *gv = json_get(json_get(obj, "metadata"), "deletionGracePeriodSeconds");
        if (gv && json_item_int64(gv, &g) == 0 && g > 0)
            return false;
    }
    if (is_kind(res, "Namespace")) {
        const cJSON *sf = json_get(json_get(obj, "spec"), "finalizers");
        if (cJSON_IsArray(sf) && sf->child)
            return false;
    }
    return true;
}

static char *obj_key(struct rq *q)
{
    return apires_key(q->res, q->ns, q->name);
}

static void after_write(struct rq *q, int64_t rev)
{
    if (is_crd(q->res)) {
        pthread_mutex_lock(&q->s->crd_mu);
        reload_crds(q->s);
        pthread_mutex_unlock(&q->s->crd_mu);
    }
    /* no need to wait for the hub: a watch started after this reply starts
     * after a revision >= rev and the hub delivers in revision order */
    (void)rev;
}

static void handle_create(struct rq *q)
{
    cJSON *obj = NULL;
    char dup[256];
    cJSON *st = decode_body(q, &obj, dup, false);
    if (st)
        goto fail;
    st = prepare_create(q, obj, dup);
    if (st)
        goto fail;
    q->name = jstr(json_get(obj, "metadata"), "name");
    st = check_namespace(q);
    if (st)
        goto fail;
    if (q->dry_run) {
        respond_object(q, 201, obj);
        return;
    }
    char *key = obj_key(q);
    int64_t rev = 0;
    struct tern_err e = {0};
    to_storage_version(q->res, obj);
    int rc = apistore_create(&q->s->store, key, obj, &rev, &e);
    free(key);
    if (rc == TERN_ECONFLICT) {
        st = apistatus_already_exists(q->res->group, q->res->plural, q->name);
        goto fail;
    }
    if (rc) {
        st = status_from_store(rc, q->res, q->name, &e);
        goto fail;
    }
    char b[21];
    set_str(ensure_obj(obj, "metadata"), "resourceVersion", num_fmt_i64(rev, b));
    after_write(q, rev);
    respond_object(q, 201, obj);
    return;
fail:
    cJSON_Delete(obj);
    respond_status(q->resp, st);
}

static void handle_get(struct rq *q)
{
    char *key = obj_key(q);
    cJSON *obj = NULL;
    struct tern_err e = {0};
    int rc = apistore_get(&q->s->store, key, &obj, NULL, &e);
    free(key);
    if (rc) {
        respond_status(q->resp, status_from_store(rc, q->res, q->name, &e));
        return;
    }
    respond_object(q, 200, obj);
}

/* ---- list ----------------------------------------------------------------- */

struct selectors {
    struct apisel *labels, *fields;
};

static void selectors_done(struct selectors *sel)
{
    apisel_free(sel->labels);
    apisel_free(sel->fields);
}

static cJSON *parse_selectors(struct rq *q, struct selectors *sel)
{
    struct tern_err e = {0};
    memset(sel, 0, sizeof(*sel));
    if (apisel_parse_labels(arg(q->req, "labelSelector"), &sel->labels, &e))
        return apistatus_bad_request(e.msg);
    if (apisel_parse_fields(arg(q->req, "fieldSelector"), &sel->fields, &e)) {
        selectors_done(sel);
        return apistatus_bad_request(e.msg);
    }
    for (size_t i = 0; i < sel->fields->n; i++) {
        const char *k = sel->fields->r[i].key;
        bool ok = strcmp(k, "metadata.name") == 0 || strcmp(k, "metadata.namespace") == 0;
        for (size_t j = 0; q->res->fields && q->res->fields[j]; j++)
            ok |= strcmp(k, q->res->fields[j]) == 0;
        if (!ok) {
            char *m = q->res->crd
                          ? xasprintf("\"%s\" is not a known field selector: only "
                                      "\"metadata.name\", \"metadata.namespace\"",
                                      k)
                          : xasprintf("field label not supported: %s", k);
            cJSON *st = apistatus_bad_request(m);
            free(m);
            selectors_done(sel);
            return st;
        }
        /* selectors match stored objects: events.k8s.io labels as core ones */
        const char *ck = q->res->core_event ? apievent_field_to_core(k) : NULL;
        if (ck && strcmp(ck, k) != 0) {
            free(sel->fields->r[i].key);
            sel->fields->r[i].key = xstrdup(ck);
        }
    }
    return NULL;
}

static bool sel_match(const struct selectors *sel, const cJSON *obj)
{
    return apisel_match_labels(sel->labels, json_get(json_get(obj, "metadata"), "labels")) &&
           apisel_match_fields(sel->fields, obj);
}

static char *continue_token(int64_t rev, const char *start_rel)
{
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "v", "meta.k8s.io/v1");
    json_add_int64(t, "rv", rev);
    cJSON_AddStringToObject(t, "start", start_rel);
    char *s = json_print(t);
    cJSON_Delete(t);
    char *b = base64_encode(s, strlen(s));
    free(s);
    /* URL-safe without padding, like the real tokens */
    for (char *p = b; *p; p++) {
        if (*p == '+')
            *p = '-';
        else if (*p == '/')
            *p = '_';
    }
    char *eq = strchr(b, '=');
    if (eq)
        *eq = 0;
    return b;
}

static int parse_continue(const char *tok, int64_t *ret_rev, char **ret_start)
{
    size_t n = strlen(tok);
    if (n == 0 || n > 4096)
        return -EINVAL;
    char *b = xmalloc(n + 4);
    memcpy(b, tok, n);
    for (size_t i = 0; i < n; i++) {
        if (b[i] == '-')
            b[i] = '+';
        else if (b[i] == '_')
            b[i] = '/';
    }
    while (n % 4)
        b[n++] = '=';
    b[n] = 0;
    unsigned char *raw = NULL;
    size_t rawlen = 0;
    int rc = base64_decode(b, n, &raw, &rawlen);
    free(b);
    if (rc)
        return -EINVAL;
    cJSON *t = NULL;
    rc = json_parse((const char *)raw, rawlen, &t, NULL);
    free(raw);
    if (rc)
        return -EINVAL;
    int64_t rev = 0;
    const char *start = jstr(t, "start");
    const cJSON *rv = json_get(t, "rv");
    if (!start || !rv || json_item_int64(rv, &rev) || rev <= 0 || strstr(start, "..")) {
        cJSON_Delete(t);
        return -EINVAL;
    }
    *ret_rev = rev;
    *ret_start = xstrdup(start);
    cJSON_Delete(t);
    return 0;
}

/* Reads the matching objects (all, or one page). */
static cJSON *do_list(struct rq *q, const struct selectors *sel, int64_t limit,
                      const char *cont, struct apistore_list *out, char **ret_cont)
{
    char *prefix = apires_key(q->res, q->ns, NULL);
    int64_t rev = 0;
    char *start = NULL;
    cJSON *st = NULL;
    *ret_cont = NULL;
    if (cont && *cont) {
        char *rel = NULL;
        if (parse_continue(cont, &rev, &rel)) {
            free(prefix);
            return apistatus_bad_request("continue key is not valid: illegal base64 data");
        }
        start = xasprintf("%s%s", prefix, rel);
        free(rel);
    }
    struct apistore_list acc = {0};
    for (;;) {
        struct apistore_list page = {0};
        int64_t want = limit > 0 ? limit - (int64_t)acc.n : 0;
        struct tern_err e = {0};
        int rc = apistore_list(&q->s->store, prefix, start, rev, want, &page, &e);
        if (rc) {
            st = status_from_store(rc, q->res, NULL, &e);
            break;
        }
        rev = page.revision;
        for (size_t i = 0; i < page.n; i++) {
            if (sel_match(sel, page.objs[i])) {
                acc.objs = xreallocarray(acc.objs, acc.n + 1, sizeof(cJSON *));
                acc.objs[acc.n++] = page.objs[i];
            } else {
                cJSON_Delete(page.objs[i]);
            }
            page.objs[i] = NULL;
        }
        free(start);
        start = page.next_key ? xstrdup(page.next_key) : NULL;
        apistore_list_done(&page);
        if (!start)
            break;
        if (limit > 0 && (int64_t)acc.n >= limit) {
            *ret_cont = continue_token(rev, start + strlen(prefix));
            break;
        }
    }
    acc.revision = rev;
    free(start);
    free(prefix);
    if (st) {
        apistore_list_done(&acc);
        return st;
    }
    *out = acc;
    return NULL;
}

static void handle_list(struct rq *q)
{
    struct selectors sel;
    cJSON *st = parse_selectors(q, &sel);
    if (st) {
        respond_status(q->resp, st);
        return;
    }
    int64_t limit = 0;
    const char *ls = arg(q->req, "limit");
    if (ls && *ls && (num_parse_i64(ls, &limit) || limit < 0))
        limit = 0;
    struct apistore_list l = {0};
    char *cont = NULL;
    st = do_list(q, &sel, limit, arg(q->req, "continue"), &l, &cont);
    selectors_done(&sel);
    if (st) {
        respond_status(q->resp, st);
        return;
    }
    char rvb[21];
    num_fmt_i64(l.revision, rvb);
    for (size_t i = 0; i < l.n; i++)
        to_served_version(q->res, l.objs[i]);
    cJSON *out;
    if (q->want == WANT_TABLE) {
        out = apitable_build(q->res, l.objs, l.n, q->include, rvb, time(NULL));
        if (cont)
            cJSON_AddStringToObject(json_get(out, "metadata") ? cJSON_GetObjectItemCaseSensitive(out, "metadata") : out,
                                    "continue", cont);
    } else {
        out = cJSON_CreateObject();
        bool partial = q->want == WANT_PARTIAL;
        cJSON_AddStringToObject(out, "kind", partial ? "PartialObjectMetadataList" : q->res->list_kind);
        char *av = apires_api_version(q->res);
        cJSON_AddStringToObject(out, "apiVersion", partial ? "meta.k8s.io/v1" : av);
        free(av);
        cJSON *md = cJSON_AddObjectToObject(out, "metadata");
        cJSON_AddStringToObject(md, "resourceVersion", rvb);
        if (cont)
            cJSON_AddStringToObject(md, "continue", cont);
        cJSON *items = cJSON_AddArrayToObject(out, "items");
        for (size_t i = 0; i < l.n; i++) {
            if (partial) {
                cJSON_AddItemToArray(items, partial_of(l.objs[i]));
            } else {
                cJSON_AddItemToArray(items, l.objs[i]);
                l.objs[i] = NULL;
            }
        }
    }
    free(cont);
    apistore_list_done(&l);
    respond_json(q->resp, 200, out);
}

/* ---- update and patch ------------------------------------------------------ */

enum mut_kind { MUT_PUT, MUT_JSONPATCH, MUT_MERGE, MUT_SMP, MUT_APPLY };

/* Computes the desired object from cur. Returns NULL and *ret, or a Status. */
static cJSON *mutate(struct rq *q, enum mut_kind k, const cJSON *body, const cJSON *cur,
                     cJSON **ret)
{
    struct tern_err e = {0};
    int rc = 0;
    switch (k) {
    case MUT_PUT: *ret = json_dup(body); return NULL;
    case MUT_MERGE:
    case MUT_APPLY: *ret = apipatch_merge(cur, body); break;
    case MUT_JSONPATCH: rc = apipatch_json(cur, body, ret, &e); break;
    case MUT_SMP: rc = apipatch_strategic(cur, body, ret, &e); break;
    }
    if (rc == TERN_EPARSE)
        return apistatus_bad_request(e.msg);
    if (rc) {
        cJSON *st = apistatus_new(422, "Invalid", e.msg, NULL, NULL, NULL);
        return st;
    }
    if (!cJSON_IsObject(*ret)) {
        cJSON_Delete(*ret);
        *ret = NULL;
        return apistatus_bad_request("the patched object is not a JSON object");
    }
    (void)q;
    return NULL;
}

static void delete_and_reply(struct rq *q, const char *key, cJSON *obj, int64_t rev,
                             bool as_object);

static void handle_update(struct rq *q, enum mut_kind k, const cJSON *body, const char *dup)
{
    char *key = obj_key(q);
    cJSON *st = NULL;
    for (int attempt = 0; attempt < MAX_RETRIES; attempt++) {
        cJSON *cur = NULL, *obj = NULL;
        int64_t rev = 0;
        struct tern_err e = {0};
        int rc = apistore_get(&q->s->store, key, &cur, &rev, &e);
        if (rc == TERN_ENOTFOUND && k == MUT_APPLY && !q->sub) {
            obj = json_dup(body);
            st = prepare_create(q, obj, dup);
            if (!st)
                st = check_namespace(q);
            if (!st) {
                int64_t nrev = 0;
                to_storage_version(q->res, obj);
                rc = apistore_create(&q->s->store, key, obj, &nrev, &e);
                if (rc == TERN_ECONFLICT) {
                    cJSON_Delete(obj);
                    continue;
                }
                if (rc) {
                    st = status_from_store(rc, q->res, q->name, &e);
                } else {
                    char b[21];
                    set_str(ensure_obj(obj, "metadata"), "resourceVersion", num_fmt_i64(nrev, b));
                    after_write(q, nrev);
                    respond_object(q, 201, obj);
                    free(key);
                    return;
                }
            }
            cJSON_Delete(obj);
            goto out;
        }
        if (rc) {
            st = status_from_store(rc, q->res, q->name, &e);
            goto out;
        }
        if (q->res->core_event)
            apievent_to_v1(cur); /* patches apply to the served shape */
        st = mutate(q, k, body, cur, &obj);
        if (st) {
            cJSON_Delete(cur);
            goto out;
        }
        /* the resourceVersion precondition */
        bool pinned = false;
        int64_t want = rv_of(obj);
        if (k == MUT_PUT) {
            if (want <= 0) {
                if (q->res->crd) {
                    struct apistatus_fields f = {0};
                    apistatus_fields_addv(&f, APISTATUS_F_INVALID, "metadata.resourceVersion",
                                          "0x0", "must be specified for an update");
                    st = apistatus_invalid(q->res->group, q->res->kind, q->name, &f);
                    apistatus_fields_done(&f);
                    cJSON_Delete(cur);
                    cJSON_Delete(obj);
                    goto out;
                }
            } else {
                pinned = true;
            }
        } else if (want > 0 && want != rev) {
            pinned = true;
        }
        if (pinned && want != rev) {
            st = apistatus_conflict(q->res->group, q->res->plural, q->name, NULL);
            cJSON_Delete(cur);
            cJSON_Delete(obj);
            goto out;
        }
        st = prepare_update(q, cur, &obj, dup, k == MUT_PUT);
        if (st) {
            cJSON_Delete(cur);
            cJSON_Delete(obj);
            goto out;
        }
        char b[21];
        set_str(ensure_obj(obj, "metadata"), "resourceVersion", num_fmt_i64(rev, b));
        if (cJSON_Compare(cur, obj, 1) || q->dry_run) {
            cJSON_Delete(cur);
            respond_object(q, 200, obj);
            free(key);
            return;
        }
        cJSON_Delete(cur);
        if (jstr(json_get(obj, "metadata"), "deletionTimestamp") && removable(q->res, obj)) {
            delete_and_reply(q, key, obj, rev, true);
            free(key);
            return;
        }
        int64_t nrev = 0;
        to_storage_version(q->res, obj);
        rc = apistore_update(&q->s->store, key, obj, rev, &nrev, &e);
        if (rc == TERN_ECONFLICT && !pinned) {
            cJSON_Delete(obj);
            continue;
        }
        if (rc == TERN_ECONFLICT) {
            st = apistatus_conflict(q->res->group, q->res->plural, q->name, NULL);
            cJSON_Delete(obj);
            goto out;
        }
        if (rc) {
            st = status_from_store(rc, q->res, q->name, &e);
            cJSON_Delete(obj);
            goto out;
        }
        set_str(ensure_obj(obj, "metadata"), "resourceVersion", num_fmt_i64(nrev, b));
        after_write(q, nrev);
        respond_object(q, 200, obj);
        free(key);
        return;
    }
    st = apistatus_conflict(q->res->group, q->res->plural, q->name, NULL);
out:
    free(key);
    respond_status(q->resp, st);
}

static void handle_put(struct rq *q)
{
    cJSON *body = NULL;
    char dup[256];
    cJSON *st = decode_body(q, &body, dup, false);
    if (st) {
        respond_status(q->resp, st);
        return;
    }
    handle_update(q, MUT_PUT, body, dup);
    cJSON_Delete(body);
}

static void handle_patch(struct rq *q)
{
    const char *ct = q->req->content_type ? q->req->content_type : "";
    enum mut_kind k;
    if (strncmp(ct, "application/json-patch+json", 27) == 0) {
        k = MUT_JSONPATCH;
    } else if (strncmp(ct, "application/merge-patch+json", 28) == 0) {
        k = MUT_MERGE;
    } else if (strncmp(ct, "application/strategic-merge-patch+json", 38) == 0 && !q->res->crd) {
        k = MUT_SMP;
    } else if (strncmp(ct, "application/apply-patch+yaml", 28) == 0) {
        k = MUT_APPLY;
    } else {
        respond_status(q->resp, apistatus_unsupported_media(
                                    "the body of the request was in an unknown format - accepted "
                                    "media types include: application/json-patch+json, "
                                    "application/merge-patch+json, application/apply-patch+yaml"));
        return;
    }
    if (k == MUT_APPLY) {
        const char *fm = arg(q->req, "fieldManager");
        if (!fm || !*fm) {
            struct apistatus_fields f = {0};
            apistatus_fields_addv(&f, APISTATUS_F_REQUIRED, "fieldManager", NULL,
                                  "is required for apply patch");
            cJSON *st = apistatus_invalid("meta.k8s.io", "PatchOptions", "", &f);
            apistatus_fields_done(&f);
            respond_status(q->resp, st);
            return;
        }
    } else if (arg_true(q->req, "force")) {
        struct apistatus_fields f = {0};
        apistatus_fields_addv(&f, APISTATUS_F_FORBIDDEN, "force", NULL,
                              "may not be specified for non-apply patch");
        cJSON *st = apistatus_invalid("meta.k8s.io", "PatchOptions", "", &f);
        apistatus_fields_done(&f);
        respond_status(q->resp, st);
        return;
    }
    cJSON *body = NULL;
    char dup[256];
    const char *saved = q->req->content_type;
    (void)saved;
    cJSON *st = decode_body(q, &body, dup, k == MUT_JSONPATCH);
    if (st) {
        respond_status(q->resp, st);
        return;
    }
    if (k == MUT_APPLY) {
        /* the applied configuration must be a full object of this kind */
        const char *n = jstr(json_get(body, "metadata"), "name");
        st = check_gvk(q, body);
        if (!st && (!n || strcmp(n, q->name) != 0)) {
            char *m = xasprintf("the name of the object (%s) does not match the name on the URL (%s)",
                                n ? n : "", q->name);
            st = apistatus_bad_request(m);
            free(m);
        }
        if (st) {
            cJSON_Delete(body);
            respond_status(q->resp, st);
            return;
        }
    }
    handle_update(q, k, body, dup);
    cJSON_Delete(body);
}

/* ---- delete ----------------------------------------------------------------- */

/* Deletes every namespaced object of namespace ns (all resources). */
static void delete_namespace_content(struct rq *q, const char *ns)
{
    for (size_t i = 0; i < q->tab->n; i++) {
        const struct apires *r = &q->tab->v[i];
        if (!r->namespaced)
            continue;
        bool first = true; /* CRD versions share a prefix */
        for (size_t j = 0; j < i; j++)
            if (strcmp(q->tab->v[j].prefix, r->prefix) == 0)
                first = false;
        if (!first)
            continue;
        char *p = apires_key(r, ns, NULL);
        apistore_delete_prefix(&q->s->store, p, NULL);
        free(p);
    }
}

static void delete_and_reply(struct rq *q, const char *key, cJSON *obj, int64_t rev,
                             bool as_object)
{
    int64_t drev = 0;
    struct tern_err e = {0};
    int rc = 0;
    if (!q->dry_run) {
        if (is_crd(q->res)) {
            const cJSON *spec = json_get(obj, "spec");
            char *p = xasprintf("/registry/%s/%s/", jstr(spec, "group") ? jstr(spec, "group") : "",
                                jstr(json_get(spec, "names"), "plural")
                                    ? jstr(json_get(spec, "names"), "plural")
                                    : "");
            apistore_delete_prefix(&q->s->store, p, NULL);
            free(p);
        }
        if (!q->res->crd && strcmp(q->res->kind, "Namespace") == 0)
            delete_namespace_content(q, q->name);
        rc = apistore_delete(&q->s->store, key, rev, &drev, &e);
    }
    if (rc) {
        cJSON_Delete(obj);
        respond_status(q->resp, status_from_store(rc, q->res, q->name, &e));
        return;
    }
    if (!q->dry_run)
        after_write(q, drev);
    if (q->res->crd && !as_object) {
        cJSON *s = apistatus_success(q->res->group, q->res->plural, q->name,
                                     jstr(json_get(obj, "metadata"), "uid"));
        cJSON_Delete(obj);
        respond_json(q->resp, 200, s);
        return;
    }
    respond_object(q, 200, obj);
}

static void handle_delete(struct rq *q)
{
    cJSON *opts = NULL;
    if (q->req->body_len) {
        char dup[256];
        cJSON *st = decode_body(q, &opts, dup, false);
        if (st) {
            respond_status(q->resp, st);
            return;
        }
    }
    const char *pp = jstr(opts, "propagationPolicy");
    if (!pp)
        pp = arg(q->req, "propagationPolicy");
    if (pp && strcmp(pp, "Foreground") && strcmp(pp, "Background") && strcmp(pp, "Orphan")) {
        struct apistatus_fields f = {0};
        cJSON *v = cJSON_CreateString(pp);
        apistatus_fields_add(&f, APISTATUS_F_UNSUPPORTED, "propagationPolicy", v,
                             "supported values: \"Foreground\", \"Background\", \"Orphan\"");
        cJSON_Delete(v);
        respond_status(q->resp, apistatus_invalid("meta.k8s.io", "DeleteOptions", "", &f));
        apistatus_fields_done(&f);
        cJSON_Delete(opts);
        return;
    }
    const cJSON *pre = json_get(opts, "preconditions");
    const char *pre_uid = jstr(pre, "uid"), *pre_rv = jstr(pre, "resourceVersion");
    const cJSON *dr = json_get(opts, "dryRun");
    if (cJSON_IsArray(dr) && dr->child)
        q->dry_run = true;
    char *key = obj_key(q);
    cJSON *st = NULL;
    for (int attempt = 0; attempt < MAX_RETRIES; attempt++) {
        cJSON *cur = NULL;
        int64_t rev = 0;
        struct tern_err e = {0};
        int rc = apistore_get(&q->s->store, key, &cur, &rev, &e);
        if (rc) {
            st = status_from_store(rc, q->res, q->name, &e);
            goto out;
        }
        const cJSON *md = json_get(cur, "metadata");
        const char *uid = jstr(md, "uid"), *rv = jstr(md, "resourceVersion");
        if (pre_uid && uid && strcmp(pre_uid, uid) != 0) {
            char *m = xasprintf("Precondition failed: UID in precondition: %s, UID in object "
                                "meta: %s",
                                pre_uid, uid);
            st = apistatus_conflict(q->res->group, q->res->plural, q->name, m);
            free(m);
            cJSON_Delete(cur);
            goto out;
        }
        if (pre_rv && rv && strcmp(pre_rv, rv) != 0) {
            char *m = xasprintf("Precondition failed: ResourceVersion in precondition: %s, "
                                "ResourceVersion in meta: %s",
                                pre_rv, rv);
            st = apistatus_conflict(q->res->group, q->res->plural, q->name, m);
            free(m);
            cJSON_Delete(cur);
            goto out;
        }
        /* graceful deletion of a pod bound to a node and not finished */
        int64_t grace = 0;
        bool is_pod = is_kind(q->res, "Pod");
        if (is_pod) {
            const cJSON *gp = json_get(opts, "gracePeriodSeconds");
            const char *gq = arg(q->req, "gracePeriodSeconds");
            int64_t v;
            const char *phase = jstr(json_get(cur, "status"), "phase");
            if (gp && json_item_int64(gp, &v) == 0)
                grace = v;
            else if (gq && num_parse_i64(gq, &v) == 0)
                grace = v;
            else if (json_get(json_get(cur, "spec"), "terminationGracePeriodSeconds") &&
                     json_item_int64(json_get(json_get(cur, "spec"),
                                              "terminationGracePeriodSeconds"),
                                     &v) == 0)
                grace = v;
            else
                grace = 30;
            if (grace < 0)
                grace = 0;
            const char *node = jstr(json_get(cur, "spec"), "nodeName");
            if (!node || !*node ||
                (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)))
                grace = 0;
        }
        const char *policy = pp;
        if (!policy && q->s->lifecycle_controllers && is_kind(q->res, "Job"))
            policy = "Orphan"; /* batch/v1 jobs' default GC policy */
        if (cJSON_IsTrue(json_get(opts, "orphanDependents")))
            policy = "Orphan";
        const char *add_fin = NULL;
        if (q->s->lifecycle_controllers && policy && strcmp(policy, "Foreground") == 0)
            add_fin = "foregroundDeletion";
        else if (q->s->lifecycle_controllers && policy && strcmp(policy, "Orphan") == 0)
            add_fin = "orphan";
        bool ns_terminating = q->s->lifecycle_controllers && is_kind(q->res, "Namespace");
        bool deleting = jstr(md, "deletionTimestamp") != NULL;
        if (deleting && is_pod) {
            /* a shorter grace period shortens the deletion; 0 finishes it */
            int64_t curg = 0;
            const cJSON *cg = json_get(md, "deletionGracePeriodSeconds");
            if (cg)
                json_item_int64(cg, &curg);
            if (grace < curg) {
                cJSON *m3 = ensure_obj(cur, "metadata");
                time_t when = time(NULL) + grace;
                char ts[32];
                apitable_format_time(when, ts, sizeof(ts));
                set_str(m3, "deletionTimestamp", ts);
                cJSON_DeleteItemFromObjectCaseSensitive(m3, "deletionGracePeriodSeconds");
                json_add_int64(m3, "deletionGracePeriodSeconds", grace);
                if (removable(q->res, cur)) {
                    if (q->dry_run) {
                        respond_object(q, 200, cur);
                        goto done;
                    }
                    int64_t drev = 0;
                    rc = apistore_delete(&q->s->store, key, rev, &drev, &e);
                    if (rc == TERN_ECONFLICT) {
                        cJSON_Delete(cur);
                        continue;
                    }
                    if (rc) {
                        st = status_from_store(rc, q->res, q->name, &e);
                        cJSON_Delete(cur);
                        goto out;
                    }
                    respond_object(q, 200, cur);
                    goto done;
                }
                goto mark;
            }
        }
        if (!finalizers_empty(cur) || grace > 0 || add_fin || ns_terminating) {
            if (deleting) {
                respond_object(q, 200, cur); /* already being deleted */
                goto done;
            }
        mark:;
            cJSON *m2 = ensure_obj(cur, "metadata");
            if (!deleting) {
                char now[32];
                apitable_format_time(time(NULL) + grace, now, sizeof(now));
                set_str(m2, "deletionTimestamp", now);
                cJSON_DeleteItemFromObjectCaseSensitive(m2, "deletionGracePeriodSeconds");
                json_add_int64(m2, "deletionGracePeriodSeconds", grace);
                int64_t g = 0;
                const cJSON *gv = json_get(m2, "generation");
                if (gv && json_item_int64(gv, &g) == 0) {
                    cJSON_DeleteItemFromObjectCaseSensitive(m2, "generation");
                    json_add_int64(m2, "generation", g + 1);
                }
                if (add_fin) {
                    cJSON *fz = cJSON_GetObjectItemCaseSensitive(m2, "finalizers");
                    if (!cJSON_IsArray(fz)) {
                        cJSON_DeleteItemFromObjectCaseSensitive(m2, "finalizers");
                        fz = cJSON_AddArrayToObject(m2, "finalizers");
                    }
                    cJSON_AddItemToArray(fz, cJSON_CreateString(add_fin));
                }
                if (ns_terminating)
                    set_str(ensure_obj(cur, "status"), "phase", "Terminating");
            }
            if (q->dry_run) {
                respond_object(q, 200, cur);
                goto done;
            }
            int64_t nrev = 0;
            rc = apistore_update(&q->s->store, key, cur, rev, &nrev, &e);
            if (rc == TERN_ECONFLICT) {
                cJSON_Delete(cur);
                continue;
            }
            if (rc) {
                st = status_from_store(rc, q->res, q->name, &e);
                cJSON_Delete(cur);
                goto out;
            }
            char b[21];
            set_str(m2, "resourceVersion", num_fmt_i64(nrev, b));
            after_write(q, nrev);
            respond_object(q, 200, cur);
            goto done;
        }
        if (!q->dry_run) {
            /* a delete must hit the version we read (to return it) */
            int64_t drev = 0;
            rc = 0;
            if (!is_crd(q->res) &&
                !(is_kind(q->res, "Namespace") && !q->s->lifecycle_controllers)) {
                rc = apistore_delete(&q->s->store, key, rev, &drev, &e);
                if (rc == TERN_ECONFLICT) {
                    cJSON_Delete(cur);
                    continue;
                }
                if (rc) {
                    st = status_from_store(rc, q->res, q->name, &e);
                    cJSON_Delete(cur);
                    goto out;
                }
                after_write(q, drev);
                q->dry_run = true; /* already deleted: just reply */
                delete_and_reply(q, key, cur, rev, false);
                goto done;
            }
        }
        delete_and_reply(q, key, cur, rev, false);
        goto done;
    }
    st = apistatus_conflict(q->res->group, q->res->plural, q->name, NULL);
out:
    respond_status(q->resp, st);
done:
    free(key);
    cJSON_Delete(opts);
}

static void handle_delete_collection(struct rq *q)
{
    struct selectors sel;
    cJSON *st = parse_selectors(q, &sel);
    if (st) {
        respond_status(q->resp, st);
        return;
    }
    struct apistore_list l = {0};
    char *cont = NULL;
    st = do_list(q, &sel, 0, NULL, &l, &cont);
    selectors_done(&sel);
    free(cont);
    if (st) {
        respond_status(q->resp, st);
        return;
    }
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "kind", q->res->list_kind);
    char *av = apires_api_version(q->res);
    cJSON_AddStringToObject(out, "apiVersion", av);
    free(av);
    cJSON *md = cJSON_AddObjectToObject(out, "metadata");
    cJSON *items = cJSON_AddArrayToObject(out, "items");
    int64_t last = 0;
    for (size_t i = 0; i < l.n; i++) {
        const cJSON *m = json_get(l.objs[i], "metadata");
        char *key = apires_key(q->res, jstr(m, "namespace"), jstr(m, "name"));
        int64_t rev = 0;
        if (finalizers_empty(l.objs[i]) && !q->dry_run &&
            apistore_delete(&q->s->store, key, rv_of(l.objs[i]), &rev, NULL) == 0) {
            last = rev;
            to_served_version(q->res, l.objs[i]);
            cJSON_AddItemToArray(items, l.objs[i]);
            l.objs[i] = NULL;
        } else if (!finalizers_empty(l.objs[i]) && !q->dry_run &&
                   !jstr(json_get(l.objs[i], "metadata"), "deletionTimestamp")) {
            /* held by finalizers: marked for deletion, as a single delete does */
            cJSON *md2 = ensure_obj(l.objs[i], "metadata");
            char now[32];
            now_str(now);
            set_str(md2, "deletionTimestamp", now);
            cJSON_DeleteItemFromObjectCaseSensitive(md2, "deletionGracePeriodSeconds");
            json_add_int64(md2, "deletionGracePeriodSeconds", 0);
            int64_t g = 0;
            const cJSON *gv = json_get(md2, "generation");
            if (gv && json_item_int64(gv, &g) == 0) {
                cJSON_DeleteItemFromObjectCaseSensitive(md2, "generation");
                json_add_int64(md2, "generation", g + 1);
            }
            if (apistore_update(&q->s->store, key, l.objs[i], rv_of(l.objs[i]), &rev, NULL) == 0) {
                char b[21];
                set_str(md2, "resourceVersion", num_fmt_i64(rev, b));
                last = rev;
                to_served_version(q->res, l.objs[i]);
                cJSON_AddItemToArray(items, l.objs[i]);
                l.objs[i] = NULL;
            }
        }
        free(key);
    }
    char b[21];
    cJSON_AddStringToObject(md, "resourceVersion", num_fmt_i64(last ? last : l.revision, b));
    if (last)
        after_write(q, last);
    apistore_list_done(&l);
    respond_json(q->resp, 200, out);
}

/* ---- watch ------------------------------------------------------------------ */

struct apirest_watch {
    struct apirest *s;
    struct apires_table *tab;
    const struct apires *res;
    struct selectors sel;
    enum want want;
    enum apitable_include include;
    bool bookmarks;
    struct apiwatch_sub *sub;
    cJSON **initial;
    size_t ninit, init_pos;
    time_t deadline;
    time_t next_bookmark;
    bool sent_columns;
    char *final_line;
    /* pods/log?follow=true streams a file instead of events */
    bool log_mode;
    int log_fd;
    char *log_key;
    char *log_container;
    int64_t log_restarts;
    time_t log_next_check;
};

void apirest_watch_free(struct apirest_watch *w)
{
    if (!w)
        return;
    if (w->log_mode)
        close(w->log_fd);
    free(w->log_key);
    free(w->log_container);
    apiwatch_unsubscribe(w->sub);
    for (size_t i = w->init_pos; i < w->ninit; i++)
        cJSON_Delete(w->initial[i]);
    free(w->initial);
    selectors_done(&w->sel);
    if (w->tab)
        apires_put(&w->s->reg, w->tab);
    free(w->final_line);
    free(w);
}

/* Appends {"type":T,"object":obj}\n; takes obj. */
static void emit(struct apirest_watch *w, struct buf *out, const char *type, cJSON *obj)
{
    cJSON *payload = obj;
    if (strcmp(type, "ERROR") != 0 && strcmp(type, "BOOKMARK") != 0) {
        to_served_version(w->res, obj);
        if (w->want == WANT_TABLE) {
            payload = apitable_build(w->res, &obj, 1, w->include, NULL, time(NULL));
            if (w->sent_columns)
                cJSON_DeleteItemFromObjectCaseSensitive(payload, "columnDefinitions");
            w->sent_columns = true;
            cJSON_Delete(obj);
        } else if (w->want == WANT_PARTIAL) {
            payload = partial_of(obj);
            cJSON_Delete(obj);
        }
    }
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", type);
    cJSON_AddItemToObject(ev, "object", payload);
    char *s = json_print(ev);
    cJSON_Delete(ev);
    /* the watch buffer is bounded by the caller; an event never exceeds it */
    buf_puts(out, s);
    buf_putc(out, '\n');
    free(s);
}

static char *expired_line(int64_t rv, int64_t oldest)
{
    char *m = xasprintf("too old resource version: %lld (%lld)", (long long)rv,
                        (long long)oldest);
    cJSON *st = apistatus_expired(m);
    free(m);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "type", "ERROR");
    cJSON_AddItemToObject(ev, "object", st);
    char *s = json_print(ev);
    cJSON_Delete(ev);
    char *line = xasprintf("%s\n", s);
    free(s);
    return line;
}

static void convert_event(struct apirest_watch *w, const struct apiwatch_event *ev,
                          struct buf *out)
{
    cJSON *cur = NULL, *prev = NULL;
    if (ev->value)
        apistore_decode(ev->value, ev->value_len, ev->revision, &cur, NULL);
    if (ev->prev_value)
        apistore_decode(ev->prev_value, ev->prev_len, ev->revision, &prev, NULL);
    bool cm = cur && sel_match(&w->sel, cur);
    bool pm = prev && sel_match(&w->sel, prev);
    if (ev->deleted) {
        if (pm) {
            emit(w, out, "DELETED", prev);
            prev = NULL;
        }
    } else if (cm && pm) {
        emit(w, out, "MODIFIED", cur);
        cur = NULL;
    } else if (cm) {
        emit(w, out, "ADDED", cur);
        cur = NULL;
    } else if (pm) {
        emit(w, out, "DELETED", cur);
        cur = NULL;
    }
    cJSON_Delete(cur);
    cJSON_Delete(prev);
}

static int log_next(struct apirest_watch *w, struct buf *out, long timeout_ms);

int apirest_watch_next(struct apirest_watch *w, struct buf *out, long timeout_ms)
{
    if (w->log_mode)
        return log_next(w, out, timeout_ms);
    if (w->final_line) {
        buf_puts(out, w->final_line);
        return 1;
    }
    if (w->init_pos < w->ninit) {
        for (int i = 0; i < 200 && w->init_pos < w->ninit && out->len < (1u << 20); i++) {
            emit(w, out, "ADDED", w->initial[w->init_pos]);
            w->initial[w->init_pos++] = NULL;
        }
        return 0;
    }
    time_t now = time(NULL);
    if (now >= w->deadline)
        return 1;
    long wait = timeout_ms;
    if ((w->deadline - now) * 1000 < wait)
        wait = (long)(w->deadline - now) * 1000;
    struct apiwatch_event *ev = NULL;
    int rc = apiwatch_next(w->sub, wait, &ev);
    if (rc == 0) {
        int n = 0;
        do {
            convert_event(w, ev, out);
            apiwatch_event_free(ev);
            ev = NULL;
        } while (++n < 256 && out->len < (1u << 20) && apiwatch_next(w->sub, 0, &ev) == 0);
        return 0;
    }
    if (rc == -ETIMEDOUT) {
        if (w->bookmarks && time(NULL) >= w->next_bookmark) {
            cJSON *b = cJSON_CreateObject();
            cJSON_AddStringToObject(b, "kind", w->res->kind);
            char *av = apires_api_version(w->res);
            cJSON_AddStringToObject(b, "apiVersion", av);
            free(av);
            cJSON *md = cJSON_AddObjectToObject(b, "metadata");
            char rb[21];
            cJSON_AddStringToObject(md, "resourceVersion",
                                    num_fmt_i64(apiwatch_sub_progress(w->sub), rb));
            emit(w, out, "BOOKMARK", b);
            w->next_bookmark = time(NULL) + 30;
        }
        return 0;
    }
    if (rc == TERN_ECOMPACTED) {
        char *line = expired_line(apiwatch_sub_progress(w->sub), apiwatch_hub_oldest(w->s->hub));
        buf_puts(out, line);
        free(line);
    }
    return 1;
}

static void handle_watch(struct rq *q)
{
    struct apirest_watch *w = xcalloc(1, sizeof(*w));
    w->s = q->s;
    w->want = q->want;
    w->include = q->include;
    w->bookmarks = arg_true(q->req, "allowWatchBookmarks");
    cJSON *st = parse_selectors(q, &w->sel);
    if (st) {
        free(w);
        respond_status(q->resp, st);
        return;
    }
    if (q->name) {
        /* a watch on an object path watches that name only */
        struct apisel *f = w->sel.fields;
        f->r = xreallocarray(f->r, f->n + 1, sizeof(*f->r));
        struct apisel_req *r = &f->r[f->n++];
        memset(r, 0, sizeof(*r));
        r->key = xstrdup("metadata.name");
        r->op = APISEL_EQ;
        r->values = xcalloc(1, sizeof(char *));
        r->values[0] = xstrdup(q->name);
        r->nvalues = 1;
    }
    const char *rvs = arg(q->req, "resourceVersion");
    int64_t rv = 0;
    if (rvs && *rvs && (num_parse_i64(rvs, &rv) || rv < 0)) {
        selectors_done(&w->sel);
        free(w);
        char *m = xasprintf("resourceVersion: Invalid value: \"%s\": must be a non-negative "
                            "integer",
                            rvs);
        respond_status(q->resp, apistatus_bad_request(m));
        free(m);
        return;
    }
    int64_t ts = 0;
    const char *tss = arg(q->req, "timeoutSeconds");
    if (!tss || num_parse_i64(tss, &ts) || ts <= 0) {
        unsigned r = 0;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            r = 0;
        ts = 1800 + r % 1800;
    }
    w->deadline = time(NULL) + ts;
    w->next_bookmark = time(NULL) + 30;
    char *prefix = apires_key(q->res, q->ns, NULL);
    if (rv == 0) {
        struct apistore_list l = {0};
        char *cont = NULL;
        st = do_list(q, &w->sel, 0, NULL, &l, &cont);
        free(cont);
        if (st) {
            free(prefix);
            apirest_watch_free(w);
            respond_status(q->resp, st);
            return;
        }
        rv = l.revision;
        w->initial = l.objs;
        w->ninit = l.n;
        l.objs = NULL;
        l.n = 0;
        apistore_list_done(&l);
    }
    if (apiwatch_subscribe(q->s->hub, prefix, rv, &w->sub) == TERN_ECOMPACTED)
        w->final_line = expired_line(rv, apiwatch_hub_oldest(q->s->hub));
    free(prefix);
    /* the watch keeps its own reference to the resource table */
    w->tab = q->tab;
    q->tab = NULL;
    w->res = q->res;
    q->resp->status = 200;
    q->resp->content_type = CT_JSON;
    q->resp->watch = w;
}

/* ---- dispatch ------------------------------------------------------------------ */

static void not_found_path(struct apirest_resp *resp)
{
    respond_status(resp, apistatus_new(404, "NotFound",
                                       "the server could not find the requested resource", NULL,
                                       NULL, NULL));
}

/* ---- pods/log ------------------------------------------------------------ */

static int64_t restart_count(const cJSON *pod, const char *container)
{
    const cJSON *cs = json_get(json_get(pod, "status"), "containerStatuses");
    int64_t n = 0;
    for (const cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next) {
        const char *name = jstr(c, "name");
        if (name && container && strcmp(name, container) == 0)
            json_item_int64(json_get(c, "restartCount"), &n);
    }
    return n;
}

/* The container a log request means, or NULL with *st set. */
static const char *log_container(const cJSON *pod, const char *want, const char *podname,
                                 cJSON **st)
{
    const cJSON *cs = json_get(json_get(pod, "spec"), "containers");
    if (want && *want) {
        static const char *lists[] = {"containers", "initContainers"};
        for (size_t l = 0; l < 2; l++) {
            const cJSON *arr = json_get(json_get(pod, "spec"), lists[l]);
            for (const cJSON *c = cJSON_IsArray(arr) ? arr->child : NULL; c; c = c->next)
                if (jstr(c, "name") && strcmp(jstr(c, "name"), want) == 0)
                    return want;
        }
        char *m = xasprintf("container %s is not valid for pod %s", want, podname);
        *st = apistatus_bad_request(m);
        free(m);
        return NULL;
    }
    const char *def = jstr(json_get(json_get(pod, "metadata"), "annotations"),
                           "kubectl.kubernetes.io/default-container");
    if (def)
        return def;
    if (cJSON_GetArraySize(cs) == 1)
        return jstr(cs->child, "name");
    struct buf b;
    buf_init(&b, 1u << 16);
    for (const cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next)
        buf_printf(&b, "%s%s", c == cs->child ? "" : " ", jstr(c, "name") ? jstr(c, "name") : "");
    char *m = xasprintf("a container name must be specified for pod %s, choose one of: [%s]",
                        podname, buf_str(&b));
    *st = apistatus_bad_request(m);
    free(m);
    buf_done(&b);
    return NULL;
}

static void handle_log(struct rq *q)
{
    cJSON *st = NULL, *pod = NULL;
    char *key = obj_key(q), *path = NULL;
    struct tern_err e = {0};
    int fd = -1;
    int rc = apistore_get(&q->s->store, key, &pod, NULL, &e);
    if (rc) {
        st = status_from_store(rc, q->res, q->name, &e);
        goto out;
    }
    const char *container = log_container(pod, arg(q->req, "container"), q->name, &st);
    if (!container)
        goto out;
    bool previous = arg_true(q->req, "previous");
    rc = q->s->log_path(q->s->log_ctx, pod, container, previous, &path, &e);
    if (rc) {
        char *m = previous ? xasprintf("previous terminated container \"%s\" in pod \"%s\" not "
                                       "found",
                                       container, q->name)
                           : xasprintf("container \"%s\" in pod \"%s\" is waiting to start: %s",
                                       container, q->name, e.msg[0] ? e.msg : "no log yet");
        st = apistatus_bad_request(m);
        free(m);
        goto out;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        char *m = xasprintf("container \"%s\" in pod \"%s\" is waiting to start: no log file",
                            container, q->name);
        st = apistatus_bad_request(m);
        free(m);
        goto out;
    }
    int64_t tail = -1, limit = -1;
    const char *ts = arg(q->req, "tailLines"), *lb = arg(q->req, "limitBytes");
    if (ts && (num_parse_i64(ts, &tail) || tail < 0))
        tail = -1;
    if (lb && (num_parse_i64(lb, &limit) || limit <= 0))
        limit = -1;
    off_t size = lseek(fd, 0, SEEK_END);
    off_t start = size > (off_t)TERN_KUBE_MAX_OBJECT * 4 ? size - (off_t)TERN_KUBE_MAX_OBJECT * 4 : 0;
    struct buf b;
    buf_init(&b, (size_t)TERN_KUBE_MAX_OBJECT * 4 + 1);
    char tmp[65536];
    ssize_t n;
    while ((n = pread(fd, tmp, sizeof(tmp), start + (off_t)b.len)) > 0 && buf_append(&b, tmp, (size_t)n) == 0)
        ;
    size_t from = 0;
    if (tail >= 0) {
        /* the last tail lines */
        size_t i = b.len;
        int64_t lines = 0;
        if (i && b.data[i - 1] == '\n')
            i--;
        while (i > 0) {
            if (b.data[i - 1] == '\n' && ++lines == tail)
                break;
            i--;
        }
        from = tail == 0 ? b.len : i;
    }
    size_t len = b.len - from;
    if (limit > 0 && (size_t)limit < len)
        len = (size_t)limit;
    buf_reset(&q->resp->body);
    buf_append(&q->resp->body, b.data ? b.data + from : "", len);
    buf_done(&b);
    q->resp->status = 200;
    q->resp->content_type = "text/plain";
    if (arg_true(q->req, "follow") && !previous && q->s->log_running) {
        struct apirest_watch *w = xcalloc(1, sizeof(*w));
        w->s = q->s;
        w->log_mode = true;
        w->log_fd = fd;
        fd = -1;
        w->log_key = key;
        key = NULL;
        w->log_container = xstrdup(container);
        w->log_restarts = restart_count(pod, container);
        w->deadline = time(NULL) + 24 * 3600;
        /* the first chunk is what was read above; continue after it */
        lseek(w->log_fd, start + (off_t)(from + len), SEEK_SET);
        w->final_line = q->resp->body.len ? xstrndup(q->resp->body.data, q->resp->body.len) : NULL;
        buf_reset(&q->resp->body);
        q->resp->watch = w;
    }
out:
    if (fd >= 0)
        close(fd);
    free(path);
    free(key);
    cJSON_Delete(pod);
    if (st)
        respond_status(q->resp, st);
}

static int log_next(struct apirest_watch *w, struct buf *out, long timeout_ms)
{
    if (w->final_line) {
        buf_puts(out, w->final_line);
        free(w->final_line);
        w->final_line = NULL;
        return 0;
    }
    char tmp[65536];
    long waited = 0;
    for (;;) {
        ssize_t n = read(w->log_fd, tmp, sizeof(tmp));
        if (n > 0) {
            buf_append(out, tmp, (size_t)n);
            return 0;
        }
        time_t now = time(NULL);
        if (now >= w->log_next_check) {
            w->log_next_check = now + 1;
            cJSON *pod = NULL;
            bool running = false;
            if (apistore_get(&w->s->store, w->log_key, &pod, NULL, NULL) == 0)
                running = w->s->log_running(w->s->log_ctx, pod, w->log_container,
                                            w->log_restarts);
            cJSON_Delete(pod);
            if (!running) {
                /* drain what the container wrote before it stopped */
                while ((n = read(w->log_fd, tmp, sizeof(tmp))) > 0 &&
                       buf_append(out, tmp, (size_t)n) == 0)
                    ;
                return 1;
            }
        }
        if (waited >= timeout_ms)
            return 0;
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        waited += 200;
    }
}

/* POST pods/NAME/binding: what the scheduler does (pkg/registry/core/pod
 * BindingREST): sets spec.nodeName once and the PodScheduled condition. */
static void handle_binding(struct rq *q)
{
    cJSON *b = NULL;
    char dup[256];
    cJSON *st = decode_body(q, &b, dup, false);
    if (st) {
        respond_status(q->resp, st);
        return;
    }
    const char *node = jstr(json_get(b, "target"), "name");
    const char *bname = jstr(json_get(b, "metadata"), "name");
    if (!node || !*node || (bname && strcmp(bname, q->name) != 0)) {
        struct apistatus_fields f = {0};
        if (!node || !*node)
            apistatus_fields_addv(&f, APISTATUS_F_REQUIRED, "target.name", NULL, NULL);
        else
            apistatus_fields_add(&f, APISTATUS_F_INVALID, "metadata.name",
                                 json_get(json_get(b, "metadata"), "name"),
                                 "must match the pod name");
        st = apistatus_invalid("", "Binding", q->name, &f);
        apistatus_fields_done(&f);
        goto out;
    }
    char *key = obj_key(q);
    for (int attempt = 0; attempt < MAX_RETRIES && !st; attempt++) {
        cJSON *pod = NULL;
        int64_t rev = 0;
        struct tern_err e = {0};
        int rc = apistore_get(&q->s->store, key, &pod, &rev, &e);
        if (rc) {
            st = status_from_store(rc, q->res, q->name, &e);
            break;
        }
        cJSON *spec = ensure_obj(pod, "spec");
        const char *cur = jstr(spec, "nodeName");
        if (cur && *cur) {
            char *msg = xasprintf("pod %s is already assigned to node \"%s\"", q->name, cur);
            st = apistatus_conflict("", "pods/binding", q->name, msg);
            free(msg);
            cJSON_Delete(pod);
            break;
        }
        if (jstr(json_get(pod, "metadata"), "deletionTimestamp")) {
            char *msg = xasprintf("pod %s is being deleted, cannot be assigned to a host", q->name);
            st = apistatus_conflict("", "pods/binding", q->name, msg);
            free(msg);
            cJSON_Delete(pod);
            break;
        }
        set_str(spec, "nodeName", node);
        cJSON *status = ensure_obj(pod, "status");
        cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
        if (!cJSON_IsArray(conds)) {
            cJSON_DeleteItemFromObjectCaseSensitive(status, "conditions");
            conds = cJSON_AddArrayToObject(status, "conditions");
        }
        cJSON *c = cJSON_CreateObject();
        char now[32];
        now_str(now);
        cJSON_AddStringToObject(c, "type", "PodScheduled");
        cJSON_AddStringToObject(c, "status", "True");
        cJSON_AddNullToObject(c, "lastProbeTime");
        cJSON_AddStringToObject(c, "lastTransitionTime", now);
        cJSON_AddItemToArray(conds, c);
        int64_t nrev = 0;
        rc = q->dry_run ? 0 : apistore_update(&q->s->store, key, pod, rev, &nrev, &e);
        cJSON_Delete(pod);
        if (rc == TERN_ECONFLICT)
            continue;
        if (rc)
            st = status_from_store(rc, q->res, q->name, &e);
        else
            respond_json(q->resp, 201, apistatus_new(201, NULL, NULL, NULL, NULL, NULL));
        free(key);
        goto out;
    }
    if (!st)
        st = apistatus_conflict(q->res->group, q->res->plural, q->name, NULL);
    free(key);
out:
    cJSON_Delete(b);
    if (st)
        respond_status(q->resp, st);
}

static bool is_namespace(const struct apires *res)
{
    return !res->crd && strcmp(res->kind, "Namespace") == 0;
}

/* SelfSubjectReview (kubectl auth whoami): the requesting user. */
static void handle_whoami(struct rq *q)
{
    static const struct rbac_user in_process = {"system:apiserver", {"system:masters"}, 1};
    const struct rbac_user *u = q->req->user ? q->req->user : &in_process;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "kind", q->res->kind);
    cJSON_AddStringToObject(out, "apiVersion", "authentication.k8s.io/v1");
    cJSON_AddNullToObject(cJSON_AddObjectToObject(out, "metadata"), "creationTimestamp");
    cJSON *ui = cJSON_AddObjectToObject(cJSON_AddObjectToObject(out, "status"), "userInfo");
    cJSON_AddStringToObject(ui, "username", u->name);
    cJSON *groups = cJSON_AddArrayToObject(ui, "groups");
    for (size_t i = 0; i < u->ngroups; i++)
        cJSON_AddItemToArray(groups, cJSON_CreateString(u->groups[i]));
    respond_json(q->resp, 201, out);
}

/* POST of a review: SelfSubjectAccessReview (the answer for the requesting
 * user, computed from the spec) or SelfSubjectReview; never stored. */
static void handle_review(struct rq *q)
{
    if (strcmp(q->res->kind, "SelfSubjectReview") == 0) {
        handle_whoami(q);
        return;
    }
    cJSON *obj = NULL;
    char dup[256];
    cJSON *st = decode_body(q, &obj, dup, false);
    if (st) {
        respond_status(q->resp, st);
        return;
    }
    const cJSON *spec = json_get(obj, "spec");
    const cJSON *ra = json_get(spec, "resourceAttributes");
    const cJSON *na = json_get(spec, "nonResourceAttributes");
    if (!cJSON_IsObject(ra) == !cJSON_IsObject(na)) {
        struct apistatus_fields f = {0};
        apistatus_fields_addv(&f, APISTATUS_F_INVALID, "spec.resourceAttributes", "null",
                              "exactly one of nonResourceAttributes or resourceAttributes must "
                              "be specified");
        respond_status(q->resp, apistatus_invalid(q->res->group, q->res->kind, "", &f));
        apistatus_fields_done(&f);
        cJSON_Delete(obj);
        return;
    }
    struct rbac_request r = {0};
    if (ra) {
        r.resource_request = true;
        r.verb = jstr(ra, "verb");
        r.group = jstr(ra, "group") ? jstr(ra, "group") : "";
        r.resource = jstr(ra, "resource") ? jstr(ra, "resource") : "";
        r.subresource = jstr(ra, "subresource");
        r.ns = jstr(ra, "namespace");
        r.name = jstr(ra, "name");
    } else {
        r.verb = jstr(na, "verb");
        r.path = jstr(na, "path") ? jstr(na, "path") : "";
    }
    char reason[1024] = "";
    bool allowed = true;
    if (q->req->can)
        allowed = q->req->can(q->req->can_ctx, &r, reason, sizeof reason);
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "kind", q->res->kind);
    cJSON_AddStringToObject(out, "apiVersion", "authorization.k8s.io/v1");
    cJSON_AddNullToObject(cJSON_AddObjectToObject(out, "metadata"), "creationTimestamp");
    cJSON_AddItemToObject(out, "spec", json_dup(spec));
    cJSON *status = cJSON_AddObjectToObject(out, "status");
    cJSON_AddBoolToObject(status, "allowed", allowed);
    if (reason[0])
        cJSON_AddStringToObject(status, "reason", reason);
    respond_json(q->resp, 201, out);
    cJSON_Delete(obj);
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
    bool podlog = q.res && is_kind(q.res, "Pod") && p->sub && strcmp(p->sub, "log") == 0 &&
                  strcmp(m, "GET") == 0 && p->name && s->log_path;
    bool finalize = q.res && is_kind(q.res, "Namespace") && p->sub &&
                    strcmp(p->sub, "finalize") == 0 && strcmp(m, "PUT") == 0;
    if (!q.res || (!q.res->namespaced && p->ns) ||
        (p->sub && !binding && !finalize && !podlog &&
         !(strcmp(p->sub, "status") == 0 && q.res->has_status))) {
        not_found_path(resp);
        goto out;
    }
    q.ns = p->ns;
    q.name = p->name;
    q.sub = p->sub;
    q.want = parse_accept(req->accept);
    const char *inc = arg(req, "includeObject");
    q.include = APITABLE_METADATA;
    if (inc && strcmp(inc, "Object") == 0)
        q.include = APITABLE_OBJECT;
    else if (inc && strcmp(inc, "None") == 0)
        q.include = APITABLE_NONE;
    const char *dr = arg(req, "dryRun");
    q.dry_run = dr && strcmp(dr, "All") == 0;
    const char *fv = arg(req, "fieldValidation");
    q.field_validation = fv && (strcmp(fv, "Strict") == 0 || strcmp(fv, "Ignore") == 0) ? fv
                                                                                          : "Warn";
    if (fv && *fv && strcmp(fv, "Strict") && strcmp(fv, "Warn") && strcmp(fv, "Ignore")) {
        char *msg = xasprintf("fieldValidation parameter unsupported: %s", fv);
        respond_status(resp, apistatus_bad_request(msg));
        free(msg);
        goto out;
    }
    if (q.res->namespaced && !q.ns && (q.name || strcmp(m, "POST") == 0)) {
        not_found_path(resp);
        goto out;
    }
    if (q.res->review) {
        if (strcmp(m, "POST") == 0 && !q.name && !q.ns)
            handle_review(&q);
        else
            respond_status(resp, apistatus_method_not_allowed(
                                     "the server does not allow this method on the requested "
                                     "resource"));
    } else if (binding) {
        handle_binding(&q);
    } else if (podlog) {
        handle_log(&q);
    } else if (q.name) {
        if (strcmp(m, "GET") == 0 && arg_true(req, "watch") && !q.sub)
            handle_watch(&q);
        else if (strcmp(m, "GET") == 0)
            handle_get(&q);
        else if (strcmp(m, "PUT") == 0)
            handle_put(&q);
        else if (strcmp(m, "PATCH") == 0)
            handle_patch(&q);
        else if (strcmp(m, "DELETE") == 0 && !q.sub)
            handle_delete(&q);
        else
            respond_status(resp, apistatus_method_not_allowed(
                                     "the server does not allow this method on the requested "
                                     "resource"));
    } else {
        if (strcmp(m, "GET") == 0) {
            if (arg_true(req, "watch"))
                handle_watch(&q);
            else
                handle_list(&q);
        } else if (strcmp(m, "POST") == 0) {
            handle_create(&q);
        } else if (strcmp(m, "DELETE") == 0 && !is_namespace(q.res)) {
            handle_delete_collection(&q);
        } else {
            respond_status(resp, apistatus_method_not_allowed(
                                     "the server does not allow this method on the requested "
                                     "resource"));
        }
    }
out:
    if (q.tab)
        apires_put(&s->reg, q.tab);
}

/* ---- OpenAPI v3 (for kubectl explain and kubectl's field-validation probe) -- */

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

static void handle_openapi_v3(struct apirest *s, const struct apirest_path *p,
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
        respond_json(resp, 200, idx);
    } else if (apires_has_group_version(t, p->group ? p->group : "", p->version)) {
        respond_json(resp, 200, openapi_gv(t, p->group ? p->group : "", p->version));
    } else {
        not_found_path(resp);
    }
    apires_put(&s->reg, t);
}

void apirest_handle(struct apirest *s, const struct apirest_req *req, struct apirest_resp *resp)
{
    buf_init(&resp->body, SIZE_MAX / 2);
    struct apirest_path p;
    if (apirest_parse_path(req->path ? req->path : "", &p)) {
        not_found_path(resp);
        return;
    }
    const char *m = req->method ? req->method : "GET";
    switch (p.kind) {
    case APIREST_P_VERSION: handle_version(resp); break;
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
    case APIREST_P_OPENAPI_V3: handle_openapi_v3(s, &p, resp); break;
    case APIREST_P_API:
    case APIREST_P_APIS:
    case APIREST_P_GROUP:
    case APIREST_P_GROUPVERSION:
        if (strcmp(m, "GET") != 0)
            respond_status(resp, apistatus_method_not_allowed("the server does not allow this "
                                                              "method on the requested resource"));
        else
            handle_discovery(s, &p, resp);
        break;
    case APIREST_P_RESOURCE: handle_resource(s, req, &p, resp); break;
    default: not_found_path(resp); break;
    }
    apirest_path_done(&p);
}

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
    reload_crds(s);
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
        char *uid = uuid4();
        cJSON_AddStringToObject(md, "uid", uid);
        free(uid);
        char now[32];
        now_str(now);
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

/* ---- in-process requests ---------------------------------------------------- */

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
        respond_status(&resp, apistatus_bad_request("watch is not available in process: use "
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
