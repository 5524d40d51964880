/* objrest.c - objstore over the Kubernetes REST API. See objrest.h. */
#include "objrest.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "base/limits.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "kube/kubeconfig.h"
#include "http/httpc.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct objrest {
    struct objrest_transport t;
    char *sel_gvr, *sel_query; /* objrest_set_list_selector */
    objrest_wait_fn wait_fn;
    void *wait_ctx;
    objrest_changes_fn changes_fn;
    void *changes_ctx;
};

void objrest_set_changes_fn(struct objrest *r, objrest_changes_fn fn, void *ctx)
{
    r->changes_fn = fn;
    r->changes_ctx = ctx;
}

void objrest_set_wait_fn(struct objrest *r, objrest_wait_fn fn, void *ctx)
{
    r->wait_fn = fn;
    r->wait_ctx = ctx;
}

struct objrest *objrest_new(const struct objrest_transport *t)
{
    struct objrest *r = xcalloc(1, sizeof *r);
    r->t = *t;
    return r;
}

void objrest_free(struct objrest *r)
{
    if (!r)
        return;
    free(r->sel_gvr);
    free(r->sel_query);
    free(r);
}

void objrest_set_list_selector(struct objrest *r, const char *gvr, const char *selector)
{
    free(r->sel_gvr);
    free(r->sel_query);
    char *e = httpc_escape(selector);
    r->sel_gvr = xstrdup(gvr);
    r->sel_query = xasprintf("?fieldSelector=%s", e);
    free(e);
}

static bool cluster_scoped(const char *res)
{
    static const char *const cs[] = {"namespaces",   "nodes", "persistentvolumes",
                                     "clusterroles", "clusterrolebindings",
                                     "customresourcedefinitions"};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        if (strcmp(res, cs[i]) == 0)
            return true;
    return false;
}

/* "/api/v1[/namespaces/NS]/RES[/NAME[/SUB]]" from a gvr. */
static char *path_of(const char *gvr, const char *ns, const char *name, const char *sub)
{
    const char *slash = strrchr(gvr, '/');
    if (!slash)
        return NULL;
    const char *res = slash + 1;
    size_t avl = (size_t)(slash - gvr);
    bool core = memchr(gvr, '/', avl) == NULL; /* "v1" has no group */
    struct buf b;
    buf_init(&b, 4096);
    buf_printf(&b, "/%s/%.*s", core ? "api" : "apis", (int)avl, gvr);
    if (!cluster_scoped(res) && ns && *ns) {
        char *e = httpc_escape(ns);
        buf_printf(&b, "/namespaces/%s", e);
        free(e);
    }
    buf_printf(&b, "/%s", res);
    if (name) {
        char *e = httpc_escape(name);
        buf_printf(&b, "/%s", e);
        free(e);
    }
    if (sub)
        buf_printf(&b, "/%s", sub);
    return buf_steal(&b);
}

static int map_status(int status, const cJSON *body, struct tern_err *err)
{
    if (status >= 200 && status < 300)
        return 0;
    const char *msg = kobj_str(body, "message");
    const char *reason = kobj_str(body, "reason");
    int code = status == 404                                           ? TERN_ENOTFOUND
               : status == 409 && reason && !strcmp(reason, "AlreadyExists") ? -EEXIST
               : status == 409                                         ? TERN_ECONFLICT
               : status == 400 || status == 422                        ? TERN_EINVALID
               : status == 401 || status == 403                        ? TERN_EAUTH
                                                                       : TERN_EHTTP;
    return err_set(err, code, "HTTP %d: %s", status, msg ? msg : "(no message)");
}

/* One request with an optional JSON body; *ret gets the parsed response
 * (may be NULL for an empty body). */
static int call(struct objrest *r, const char *method, const char *path, const cJSON *body,
                cJSON **ret, struct tern_err *err)
{
    char *b = body ? json_print(body) : NULL;
    int status = 0;
    char *resp = NULL;
    size_t len = 0;
    int rc = r->t.request(r->t.ctx, method, path, b, b ? strlen(b) : 0, &status, &resp, &len, err);
    free(b);
    if (rc)
        return rc;
    cJSON *j = NULL;
    struct tern_err perr = {0};
    bool unparsed = resp && len > 0 && json_parse(resp, len, &j, &perr) != 0;
    free(resp);
    if (unparsed && status >= 200 && status < 300)
        /* (never an empty answer in its place: an empty list taken for
         * the truth makes a controller act on objects it cannot see) */
        return err_set(err, TERN_EPARSE, "%s %s: response of %zu bytes: %s", method, path, len,
                       perr.msg);
    rc = map_status(status, j, err);
    if (rc == 0 && ret)
        *ret = j;
    else
        cJSON_Delete(j);
    return rc;
}

int objrest_call(struct objrest *r, const char *method, const char *path, const cJSON *body,
                 cJSON **ret, struct tern_err *err)
{
    return call(r, method, path, body, ret, err);
}

static int r_get(void *ctx, const char *gvr, const char *ns, const char *name, cJSON **ret,
                 struct tern_err *err)
{
    char *p = path_of(gvr, ns, name, NULL);
    if (!p)
        return err_set(err, TERN_EINVALID, "bad resource %s", gvr);
    cJSON *o = NULL;
    int rc = call(ctx, "GET", p, NULL, &o, err);
    free(p);
    if (rc == 0 && !o)
        rc = err_set(err, TERN_EPARSE, "empty response");
    if (rc == 0 && ret)
        *ret = o;
    else
        cJSON_Delete(o);
    return rc;
}

/* A list is read in pages of OBJREST_LIST_PAGE (one snapshot: the pages
 * after the first follow its continue token), so no one response grows
 * with the number of objects past the JSON parser's bound (16 MiB: 10,000
 * AgentSessions are about 50 MB). */
#define OBJREST_LIST_PAGE 500

static int r_list(void *ctx, const char *gvr, const char *ns, cJSON **ret, struct tern_err *err)
{
    struct objrest *r = ctx;
    char *base = path_of(gvr, ns, NULL, NULL);
    if (!base)
        return err_set(err, TERN_EINVALID, "bad resource %s", gvr);
    const char *sel = r->sel_gvr && strcmp(r->sel_gvr, gvr) == 0 ? r->sel_query : NULL;
    /* l: the first page (its metadata is the snapshot's), items: all */
    cJSON *l = NULL, *all = cJSON_CreateArray();
    char *cont = NULL;
    int rc = 0;
    for (;;) {
        char *ec = cont ? httpc_escape(cont) : NULL;
        char *p = xasprintf("%s%s%slimit=%d%s%s", base, sel ? sel : "", sel ? "&" : "?",
                            OBJREST_LIST_PAGE, ec ? "&continue=" : "", ec ? ec : "");
        free(ec);
        cJSON *page = NULL;
        rc = call(ctx, "GET", p, NULL, &page, err);
        free(p);
        if (rc == 0 && !page)
            rc = err_set(err, TERN_EPARSE, "list %s: empty response", gvr);
        if (rc)
            break;
        cJSON *items = cJSON_DetachItemFromObjectCaseSensitive(page, "items");
        cJSON *it;
        while (cJSON_IsArray(items) && (it = cJSON_DetachItemFromArray(items, 0)))
            cJSON_AddItemToArray(all, it);
        cJSON_Delete(items);
        const char *next = kobj_str(page, "metadata.continue");
        free(cont);
        cont = next && next[0] ? xstrdup(next) : NULL;
        if (!l)
            l = page;
        else
            cJSON_Delete(page);
        if (!cont)
            break;
    }
    free(cont);
    free(base);
    if (rc) {
        cJSON_Delete(l);
        cJSON_Delete(all);
        return rc;
    }
    cJSON *md = (cJSON *)kobj_at(l, "metadata");
    if (cJSON_IsObject(md))
        cJSON_DeleteItemFromObjectCaseSensitive(md, "continue");
    cJSON_AddItemToObject(l, "items", all);
    const char *av = kobj_str(l, "apiVersion"), *kind = kobj_str(l, "kind");
    char ik[256] = "";
    if (kind && strlen(kind) > 4 && strlen(kind) < sizeof ik &&
        strcmp(kind + strlen(kind) - 4, "List") == 0)
        snprintf(ik, sizeof ik, "%.*s", (int)(strlen(kind) - 4), kind);
    cJSON *it;
    cJSON_ArrayForEach(it, (cJSON *)kobj_at(l, "items"))
    {
        if (av && !kobj_str(it, "apiVersion"))
            kobj_set_str(it, "apiVersion", av);
        if (ik[0] && !kobj_str(it, "kind"))
            kobj_set_str(it, "kind", ik);
    }
    *ret = l;
    return 0;
}

static int write_obj(struct objrest *r, const char *method, const char *gvr, const char *ns,
                     const char *name, const char *sub, const cJSON *obj, cJSON **ret,
                     struct tern_err *err)
{
    char *p = path_of(gvr, ns, name, sub);
    if (!p)
        return err_set(err, TERN_EINVALID, "bad resource %s", gvr);
    cJSON *o = NULL;
    int rc = call(r, method, p, obj, &o, err);
    free(p);
    if (rc == 0 && ret)
        *ret = o;
    else
        cJSON_Delete(o);
    return rc;
}

static int r_create(void *ctx, const char *gvr, const char *ns, const cJSON *obj, cJSON **ret,
                    struct tern_err *err)
{
    return write_obj(ctx, "POST", gvr, ns, NULL, NULL, obj, ret, err);
}

static int r_update(void *ctx, const char *gvr, const char *ns, const cJSON *obj, cJSON **ret,
                    struct tern_err *err)
{
    const char *name = kobj_str(obj, "metadata.name");
    if (!name)
        return err_set(err, TERN_EINVALID, "metadata.name: Required value");
    const char *sub = strcmp(gvr, "v1/namespaces") == 0 && kobj_deleting(obj) ? "finalize" : NULL;
    return write_obj(ctx, "PUT", gvr, ns, name, sub, obj, ret, err);
}

static int r_update_status(void *ctx, const char *gvr, const char *ns, const cJSON *obj,
                           cJSON **ret, struct tern_err *err)
{
    const char *name = kobj_str(obj, "metadata.name");
    if (!name)
        return err_set(err, TERN_EINVALID, "metadata.name: Required value");
    return write_obj(ctx, "PUT", gvr, ns, name, "status", obj, ret, err);
}

static int r_remove(void *ctx, const char *gvr, const char *ns, const char *name,
                    const struct objstore_delete_opts *o, cJSON **ret_obj, struct tern_err *err)
{
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "kind", "DeleteOptions");
    json_add_string(d, "apiVersion", "v1");
    if (o->propagation)
        json_add_string(d, "propagationPolicy", o->propagation);
    if (o->grace_seconds >= 0)
        json_add_int64(d, "gracePeriodSeconds", o->grace_seconds);
    if (o->uid)
        kobj_set_str(d, "preconditions.uid", o->uid);
    if (o->resource_version)
        kobj_set_str(d, "preconditions.resourceVersion", o->resource_version);
    cJSON *resp = NULL;
    int rc = write_obj(ctx, "DELETE", gvr, ns, name, NULL, d, &resp, err);
    cJSON_Delete(d);
    if (rc == 0 && ret_obj) {
        const char *kind = kobj_str(resp, "kind");
        if (!resp || (kind && strcmp(kind, "Status") == 0)) {
            *ret_obj = NULL;
            cJSON_Delete(resp);
        } else {
            *ret_obj = resp;
        }
        resp = NULL;
    }
    cJSON_Delete(resp);
    return rc;
}

static int r_bind(void *ctx, const char *ns, const char *name, const char *node,
                  struct tern_err *err)
{
    cJSON *b = cJSON_CreateObject();
    json_add_string(b, "apiVersion", "v1");
    json_add_string(b, "kind", "Binding");
    kobj_set_str(b, "metadata.name", name);
    if (ns)
        kobj_set_str(b, "metadata.namespace", ns);
    kobj_set_str(b, "target.apiVersion", "v1");
    kobj_set_str(b, "target.kind", "Node");
    kobj_set_str(b, "target.name", node);
    int rc = write_obj(ctx, "POST", "v1/pods", ns, name, "binding", b, NULL, err);
    cJSON_Delete(b);
    if (rc == TERN_ENOTFOUND || rc == TERN_EHTTP) {
        /* a server without pods/binding: set spec.nodeName by an update */
        cJSON *pod = NULL;
        rc = r_get(ctx, "v1/pods", ns, name, &pod, err);
        if (rc == 0 && kobj_str(pod, "spec.nodeName"))
            rc = strcmp(kobj_str(pod, "spec.nodeName"), node) == 0
                     ? 0
                     : err_set(err, TERN_ECONFLICT, "pod %s is already bound", name);
        else if (rc == 0) {
            kobj_set_str(pod, "spec.nodeName", node);
            rc = r_update(ctx, "v1/pods", ns, pod, NULL, err);
        }
        cJSON_Delete(pod);
    }
    return rc;
}

static int r_wait(void *ctx, const char *after_rv, int timeout_ms, struct tern_err *err)
{
    int64_t after = 0;
    if (after_rv && num_parse_i64(after_rv, &after) != 0)
        return err_set(err, TERN_EINVALID, "bad resourceVersion \"%s\"", after_rv);
    struct objrest *self = ctx;
    if (self->wait_fn)
        return self->wait_fn(self->wait_ctx, after, timeout_ms);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        cJSON *l = NULL;
        struct objrest *r = ctx;
        int rc = call(r, "GET", "/api/v1/namespaces?limit=1", NULL, &l, err);
        int64_t rv = kobj_int(l, "metadata.resourceVersion", -1);
        if (rv < 0) {
            const char *s = kobj_str(l, "metadata.resourceVersion");
            if (!s || num_parse_i64(s, &rv) != 0)
                rv = -1;
        }
        cJSON_Delete(l);
        if (rc == 0 && rv > after)
            return 0;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t el = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (el >= timeout_ms)
            return TERN_ETIMEOUT;
        int64_t nap = timeout_ms - el < 200 ? timeout_ms - el : 200;
        struct timespec ts = {(time_t)(nap / 1000), (long)(nap % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int r_changes(void *ctx, const char *const *gvrs, size_t n, const char *after_rv,
                     struct objstore_changes *ret, struct tern_err *err)
{
    struct objrest *r = ctx;
    if (!r->changes_fn)
        return err_set(err, -ENOTSUP, "no watch in process: list instead");
    for (size_t i = 0; i < n && r->sel_gvr; i++)
        if (strcmp(gvrs[i], r->sel_gvr) == 0)
            return err_set(err, -ENOTSUP, "%s is listed with a selector", gvrs[i]);
    return r->changes_fn(r->changes_ctx, gvrs, n, after_rv, ret, err);
}

static const struct objstore_ops rest_ops = {
    .changes = r_changes,
    .get = r_get,
    .list = r_list,
    .create = r_create,
    .update = r_update,
    .update_status = r_update_status,
    .remove = r_remove,
    .wait = r_wait,
    .bind = r_bind,
};

struct objstore objrest_objstore(struct objrest *r)
{
    return (struct objstore){&rest_ops, r};
}

/* ---- HTTPS transport ---- */

struct objrest_https {
    pthread_mutex_t mu;
    struct httpc *c;
    char *server, *ca, *auth, *ua;
    char *cert, *key;
    size_t cert_len, key_len;
};

int objrest_https_new(const char *server, const char *ca_pem, const char *token,
                      struct objrest_https **ret, struct tern_err *err)
{
    if (!server || strncmp(server, "http", 4) != 0)
        return err_set(err, TERN_EINVALID, "bad server URL");
    struct objrest_https *h = xcalloc(1, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    h->c = httpc_new();
    h->server = xstrdup(server);
    h->ca = ca_pem ? xstrdup(ca_pem) : NULL;
    h->auth = token ? xasprintf("Authorization: Bearer %s", token) : NULL;
    h->ua = xstrdup("User-Agent: tern-node/0.1.0");
    *ret = h;
    return 0;
}

int objrest_https_from_kubeconfig(const struct kubeconfig *kc, struct objrest_https **ret,
                                  struct tern_err *err)
{
    char *ca = NULL;
    if (kc->ca_pem) {
        ca = xmalloc(kc->ca_pem_len + 1);
        memcpy(ca, kc->ca_pem, kc->ca_pem_len);
        ca[kc->ca_pem_len] = 0;
    } else if (kc->ca_file) {
        size_t len;
        int rc = fsutil_read(kc->ca_file, TERN_KUBE_MAX_KUBECONFIG, &ca, &len, err);
        if (rc)
            return rc;
    }
    int rc = objrest_https_new(kc->server, ca, kc->token, ret, err);
    free(ca);
    if (rc)
        return rc;
    if (kc->cert_pem && kc->key_pem) {
        (*ret)->cert = xmemdup(kc->cert_pem, kc->cert_pem_len);
        (*ret)->cert_len = kc->cert_pem_len;
        (*ret)->key = xmemdup(kc->key_pem, kc->key_pem_len);
        (*ret)->key_len = kc->key_pem_len;
    }
    return 0;
}

void objrest_https_free(struct objrest_https *h)
{
    if (!h)
        return;
    httpc_free(h->c);
    pthread_mutex_destroy(&h->mu);
    free(h->server);
    free(h->ca);
    free(h->auth);
    free(h->ua);
    if (h->key)
        explicit_bzero(h->key, h->key_len);
    free(h->cert);
    free(h->key);
    free(h);
}

static int https_request(void *ctx, const char *method, const char *path, const char *body,
                         size_t body_len, int *ret_status, char **ret_body, size_t *ret_len,
                         struct tern_err *err)
{
    struct objrest_https *h = ctx;
    char *url = xasprintf("%s%s", h->server, path);
    /* the User-Agent names the field manager of our writes on kube-apiserver */
    const char *headers[5] = {"Content-Type: application/json", "Accept: application/json",
                              h->ua, h->auth, NULL};
    struct httpc_tls tls = {.ca_pem = h->ca,
                            .ca_pem_len = h->ca ? strlen(h->ca) : 0,
                            .cert_pem = h->cert,
                            .cert_pem_len = h->cert_len,
                            .key_pem = h->key,
                            .key_pem_len = h->key_len};
    struct httpc_request req = {.method = method,
                                .url = url,
                                .headers = headers,
                                .body = body,
                                .body_len = body_len,
                                .timeout_ms = 30000,
                                .tls = h->ca || h->cert ? &tls : NULL};
    struct httpc_response resp = {0};
    pthread_mutex_lock(&h->mu);
    int rc = httpc_do(h->c, &req, &resp, err);
    pthread_mutex_unlock(&h->mu);
    if (rc == 0) {
        *ret_status = (int)resp.status;
        *ret_len = resp.body.len;
        *ret_body = buf_steal(&resp.body);
    }
    httpc_response_done(&resp);
    free(url);
    return rc;
}

void objrest_https_set_user_agent(struct objrest_https *h, const char *ua)
{
    free(h->ua);
    h->ua = xasprintf("User-Agent: %s", ua);
}

struct objrest_transport objrest_https_transport(struct objrest_https *h)
{
    return (struct objrest_transport){https_request, h};
}
