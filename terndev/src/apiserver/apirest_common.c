/* apirest_common.c - what every handler of the REST layer uses: query
 * arguments, small object helpers, responses (JSON, Status errors, store
 * errors as Status), the representation a client asked for (served
 * version, Table, PartialObjectMetadata) and decoding a request body (JSON,
 * YAML, protobuf). See apirest_internal.h. */
#include "apirest_internal.h"

#include "apievent.h"
#include "apiproto.h"
#include "apistatus.h"
#include "apitable.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"
#include "yaml/yamljson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- small helpers ------------------------------------------------------- */

const char *apirest__arg(const struct apirest_req *r, const char *k)
{
    for (size_t i = 0; i < r->nargs; i++)
        if (strcmp(r->args[i].key, k) == 0)
            return r->args[i].value ? r->args[i].value : "";
    return NULL;
}

bool apirest__arg_true(const struct apirest_req *r, const char *k)
{
    const char *v = apirest__arg(r, k);
    return v && (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 || strcmp(v, "1") == 0);
}

void apirest__now_str(char out[32])
{
    apitable_format_time(time(NULL), out, 32);
}

char *apirest__uuid4(void)
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

const char *apirest__jstr(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

cJSON *apirest__ensure_obj(cJSON *o, const char *k)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsObject(v)) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, k);
        v = cJSON_AddObjectToObject(o, k);
    }
    return v;
}

void apirest__set_str(cJSON *o, const char *k, const char *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    cJSON_AddStringToObject(o, k, v);
}

void apirest__set_item(cJSON *o, const char *k, cJSON *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    cJSON_AddItemToObject(o, k, v);
}

int64_t apirest__rv_of(const cJSON *obj)
{
    const char *rv = apirest__jstr(json_get(obj, "metadata"), "resourceVersion");
    int64_t v = 0;
    if (!rv || num_parse_i64(rv, &v) || v < 0)
        return -1;
    return v;
}

bool apirest__is_kind(const struct apires *res, const char *kind)
{
    return !res->crd && strcmp(res->kind, kind) == 0;
}

bool apirest__is_crd(const struct apires *res)
{
    return !res->crd && strcmp(res->kind, "CustomResourceDefinition") == 0;
}

char *apirest__obj_key(struct rq *q)
{
    return apires_key(q->res, q->ns, q->name);
}

/* ---- responses ----------------------------------------------------------- */

void apirest__respond_json(struct apirest_resp *resp, int code, cJSON *body)
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

void apirest__respond_status(struct apirest_resp *resp, cJSON *status)
{
    apirest__respond_json(resp, apistatus_code(status), status);
}

void apirest__not_found_path(struct apirest_resp *resp)
{
    apirest__respond_status(resp, apistatus_new(404, "NotFound",
                                                "the server could not find the requested resource",
                                                NULL, NULL, NULL));
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

cJSON *apirest__status_from_store(int rc, const struct apires *res, const char *name,
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

/* ---- representations ----------------------------------------------------- */

/* What kube-apiserver's Go structs always marshal, where absent: a zero
 * metav1.Time is null and a zero struct is {} (omitempty omits neither).
 * Pods: each status condition's lastProbeTime and lastTransitionTime.
 * Nodes: spec {}, status.daemonEndpoints.kubeletEndpoint.Port 0 and every
 * string of status.nodeInfo. For answers only. */
static void fill_zero(const char *kind, cJSON *obj)
{
    if (strcmp(kind, "Pod") == 0) {
        cJSON *conds = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(obj, "status"), "conditions");
        for (cJSON *c = cJSON_IsArray(conds) ? conds->child : NULL; c; c = c->next) {
            if (!cJSON_IsObject(c))
                continue;
            if (!cJSON_GetObjectItemCaseSensitive(c, "lastProbeTime"))
                cJSON_AddNullToObject(c, "lastProbeTime");
            if (!cJSON_GetObjectItemCaseSensitive(c, "lastTransitionTime"))
                cJSON_AddNullToObject(c, "lastTransitionTime");
        }
    } else if (strcmp(kind, "Node") == 0) {
        apirest__ensure_obj(obj, "spec");
        cJSON *st = apirest__ensure_obj(obj, "status");
        cJSON *ke = apirest__ensure_obj(apirest__ensure_obj(st, "daemonEndpoints"),
                                        "kubeletEndpoint");
        if (!cJSON_GetObjectItemCaseSensitive(ke, "Port"))
            cJSON_AddNumberToObject(ke, "Port", 0);
        cJSON *ni = apirest__ensure_obj(st, "nodeInfo");
        static const char *const f[] = {"machineID",       "systemUUID",     "bootID",
                                        "kernelVersion",   "osImage",
                                        "containerRuntimeVersion", "kubeletVersion",
                                        "kubeProxyVersion", "operatingSystem", "architecture"};
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
            if (!cJSON_GetObjectItemCaseSensitive(ni, f[i]))
                cJSON_AddStringToObject(ni, f[i], "");
    }
}

/* The object as the client asked for it: with the served apiVersion (an
 * events.k8s.io Event converted from the stored core shape). */
void apirest__to_served_version(const struct apires *res, cJSON *obj)
{
    if (res->core_event) {
        apievent_to_v1(obj);
        apievent_fill_zero(obj, 0);
    } else if (!res->crd && strcmp(res->kind, "Event") == 0) {
        apievent_fill_zero(obj, 1);
    } else if (!res->crd) {
        fill_zero(res->kind, obj);
    }
    if (!res->crd)
        return;
    char *av = apires_api_version(res);
    apirest__set_str(obj, "apiVersion", av);
    free(av);
}

/* An item of a list as kube-apiserver serializes it: the items of a typed
 * (built-in) list carry no kind and apiVersion (the list's say them);
 * custom resources' items, unstructured, keep theirs. */
void apirest__list_item(const struct apires *res, cJSON *obj)
{
    if (res->crd || !cJSON_IsObject(obj))
        return;
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "kind");
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "apiVersion");
}

/* The object as it is stored (an events.k8s.io Event as a core one). */
void apirest__to_storage_version(const struct apires *res, cJSON *obj)
{
    if (res->core_event)
        apievent_to_core(obj);
}

cJSON *apirest__partial_of(const cJSON *obj)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "kind", "PartialObjectMetadata");
    cJSON_AddStringToObject(p, "apiVersion", "meta.k8s.io/v1");
    const cJSON *md = json_get(obj, "metadata");
    cJSON_AddItemToObject(p, "metadata", md ? json_dup(md) : cJSON_CreateObject());
    return p;
}

/* Sends one object in the representation requested. Takes obj. */
void apirest__respond_object(struct rq *q, int code, cJSON *obj)
{
    apirest__to_served_version(q->res, obj);
    if (q->want == WANT_TABLE) {
        cJSON *t = apitable_build(q->res, &obj, 1, q->include, NULL, time(NULL));
        cJSON_Delete(obj);
        apirest__respond_json(q->resp, code, t);
    } else if (q->want == WANT_PARTIAL) {
        cJSON *p = apirest__partial_of(obj);
        cJSON_Delete(obj);
        apirest__respond_json(q->resp, code, p);
    } else {
        apirest__respond_json(q->resp, code, obj);
    }
}

/* ---- request bodies ------------------------------------------------------ */

/* Parses the request body as a JSON object. Returns NULL and *ret, or an
 * error Status. dup receives the first duplicate key path. */
cJSON *apirest__decode_body(struct rq *q, cJSON **ret, char dup[256], bool allow_array)
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
