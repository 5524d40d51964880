/* kclient.c - dynamic Kubernetes API client. See kclient.h. */
#include "kclient.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "http/httpc.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct kclient {
    struct kubeconfig *cfg;
    struct httpc *http;
    struct kclient_opts o;
    atomic_bool *cancel;
    unsigned seed;
};

/* The User-Agent of clients made without one: the program's name, set once
 * by main() before any client exists (kube-apiserver names the field manager
 * of a client's writes after the part before the '/'). */
static const char *default_user_agent = "tern";

void kclient_set_default_user_agent(const char *ua)
{
    if (ua && ua[0])
        default_user_agent = ua;
}

struct kclient *kclient_new(struct kubeconfig *cfg, const struct kclient_opts *opts)
{
    struct kclient *c = xcalloc(1, sizeof *c);
    c->cfg = cfg;
    c->http = httpc_new();
    if (opts)
        c->o = *opts;
    if (c->o.max_retries == 0)
        c->o.max_retries = 5;
    if (c->o.max_retries < 0)
        c->o.max_retries = 0;
    if (c->o.backoff_ms <= 0)
        c->o.backoff_ms = 100;
    if (c->o.max_backoff_ms <= 0)
        c->o.max_backoff_ms = 10000;
    if (c->o.timeout_ms <= 0)
        c->o.timeout_ms = 30000;
    if (!c->o.user_agent)
        c->o.user_agent = default_user_agent;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c->seed = (unsigned)(ts.tv_nsec ^ (uintptr_t)c);
    return c;
}

void kclient_free(struct kclient *c)
{
    if (!c)
        return;
    httpc_free(c->http);
    free(c);
}

struct kubeconfig *kclient_config(const struct kclient *c)
{
    return c->cfg;
}

void kclient_set_cancel(struct kclient *c, atomic_bool *cancel)
{
    c->cancel = cancel;
}

char *kclient_microtime(const struct timespec *t, char out[32])
{
    struct tm tm;
    time_t s = t->tv_sec;
    gmtime_r(&s, &tm);
    size_t n = strftime(out, 20, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%06uZ", (unsigned)(t->tv_nsec / 1000) % 1000000u);
    return out;
}

char *kclient_path(const struct kgvr *gvr, const char *ns, const char *name, const char *sub)
{
    struct buf b;
    buf_init(&b, TERN_HTTP_MAX_URL);
    if (!gvr->group || !gvr->group[0])
        buf_printf(&b, "/api/%s", gvr->version);
    else
        buf_printf(&b, "/apis/%s/%s", gvr->group, gvr->version);
    if (ns && ns[0]) {
        char *e = httpc_escape(ns);
        buf_printf(&b, "/namespaces/%s", e);
        free(e);
    }
    buf_printf(&b, "/%s", gvr->resource);
    if (name && name[0]) {
        char *e = httpc_escape(name);
        buf_printf(&b, "/%s", e);
        free(e);
        if (sub && sub[0])
            buf_printf(&b, "/%s", sub);
    }
    return buf_steal(&b);
}

static void query_add(struct buf *b, const char *key, const char *value)
{
    char *e = httpc_escape(value);
    buf_printf(b, "%c%s=%s", strchr(buf_str(b), '?') ? '&' : '?', key, e);
    free(e);
}

/* ---- errors ---- */

static void kerr_reset(struct kclient_err *err)
{
    if (!err)
        return;
    memset(err, 0, sizeof *err);
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int kclient_status_error(long http_status, const char *body, size_t len, const char *what,
                         struct kclient_err *err)
{
    const char *reason = "", *message = "";
    cJSON *st = NULL;
    if (body && len && len <= TERN_KUBE_MAX_OBJECT && json_parse(body, len, &st, NULL) == 0) {
        const cJSON *k = json_get(st, "kind");
        if (cJSON_IsString(k) && strcmp(k->valuestring, "Status") == 0) {
            const cJSON *r = json_get(st, "reason"), *m = json_get(st, "message");
            const cJSON *code = json_get(st, "code");
            int64_t cv;
            if (cJSON_IsString(r))
                reason = r->valuestring;
            if (cJSON_IsString(m))
                message = m->valuestring;
            if (http_status == 200 && code && json_item_int64(code, &cv) == 0)
                http_status = cv; /* an ERROR watch event */
        }
    }
    int code;
    switch (http_status) {
    case 404: code = TERN_ENOTFOUND; break;
    case 409: code = strcmp(reason, "AlreadyExists") == 0 ? -EEXIST : TERN_ECONFLICT; break;
    case 410: code = TERN_ECOMPACTED; break;
    case 401:
    case 403: code = TERN_EAUTH; break;
    case 400:
    case 422: code = TERN_EINVALID; break;
    case 405:
    case 415: code = -EOPNOTSUPP; break;
    default: code = TERN_EHTTP; break;
    }
    if (err) {
        err->http_status = http_status;
        copy_str(err->reason, sizeof err->reason, reason);
        copy_str(err->message, sizeof err->message, message);
        err_set(&err->e, code, "%s: HTTP %ld %s%s%s", what, http_status, reason,
                message[0] ? ": " : "", message);
    }
    cJSON_Delete(st);
    return code;
}

/* ---- transport ---- */

static bool cancelled(const struct kclient *c)
{
    return c->cancel && atomic_load(c->cancel);
}

/* Sleeps ms, waking early (returning -ECANCELED) when cancelled. */
static int nap(const struct kclient *c, long ms)
{
    while (ms > 0) {
        if (cancelled(c))
            return -ECANCELED;
        long step = ms > 50 ? 50 : ms;
        struct timespec ts = {step / 1000, (step % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
    return cancelled(c) ? -ECANCELED : 0;
}

static long backoff(struct kclient *c, int attempt)
{
    long d = c->o.backoff_ms;
    for (int i = 0; i < attempt && d < c->o.max_backoff_ms; i++)
        d *= 2;
    if (d > c->o.max_backoff_ms)
        d = c->o.max_backoff_ms;
    /* jitter: 75%..100% */
    return d - (long)(rand_r(&c->seed) % (unsigned)(d / 4 + 1));
}

struct exchange {
    const char *method;
    const char *path;
    const char *content_type;
    const char *body;
    size_t body_len;
    size_t max_body;
    long timeout_ms;
    long idle_timeout_ms;
    int (*on_line)(void *ctx, const char *line, size_t len);
    int (*on_data)(void *ctx, long status, const char *p, size_t n);
    void *ctx;
    size_t max_line;
    void (*on_retry)(void *ctx); /* forget what on_line kept of a failed attempt */
    const char *accept;          /* NULL = application/json */
};

/* One HTTP exchange with the current credentials. */
static int exchange_once(struct kclient *c, const struct exchange *x, unsigned rejected_gen,
                         unsigned *ret_gen, struct httpc_response *resp, struct tern_err *err)
{
    struct kubeconfig_creds cr = {0};
    char *url = NULL, *auth = NULL, *ua = NULL, *ct = NULL;
    int r = kubeconfig_creds(c->cfg, rejected_gen, &cr, err);
    if (r) {
        memset(resp, 0, sizeof *resp);
        return r;
    }
    *ret_gen = cr.gen;
    url = xasprintf("%s%s", c->cfg->server, x->path);
    const char *hdrs[8 + TERN_KUBE_MAX_IMPERSONATE];
    char *imp[1 + TERN_KUBE_MAX_IMPERSONATE] = {0};
    int n = 0, ni = 0;
    char *acc = xasprintf("Accept: %s", x->accept ? x->accept : "application/json");
    hdrs[n++] = acc;
    ua = xasprintf("User-Agent: %s", c->o.user_agent);
    hdrs[n++] = ua;
    if (c->cfg->impersonate_user) {
        imp[ni++] = xasprintf("Impersonate-User: %s", c->cfg->impersonate_user);
        for (size_t i = 0; i < TERN_KUBE_MAX_IMPERSONATE && c->cfg->impersonate_groups[i]; i++)
            imp[ni++] = xasprintf("Impersonate-Group: %s", c->cfg->impersonate_groups[i]);
        for (int i = 0; i < ni; i++)
            hdrs[n++] = imp[i];
    }
    if (cr.token) {
        auth = xasprintf("Authorization: Bearer %s", cr.token);
        hdrs[n++] = auth;
    }
    if (x->content_type) {
        ct = xasprintf("Content-Type: %s", x->content_type);
        hdrs[n++] = ct;
    }
    hdrs[n] = NULL;
    struct httpc_tls tls = {
        .ca_file = c->cfg->ca_file,
        .ca_pem = c->cfg->ca_pem,
        .ca_pem_len = c->cfg->ca_pem_len,
        .cert_pem = cr.cert_pem,
        .cert_pem_len = cr.cert_pem_len,
        .key_pem = cr.key_pem,
        .key_pem_len = cr.key_pem_len,
        .insecure = c->cfg->insecure,
    };
    struct httpc_request req = {
        .method = x->method,
        .url = url,
        .headers = hdrs,
        .body = x->body,
        .body_len = x->body_len,
        .timeout_ms = x->timeout_ms,
        .idle_timeout_ms = x->idle_timeout_ms,
        .max_body = x->max_body ? x->max_body : TERN_KUBE_MAX_OBJECT,
        .tls = &tls,
        .on_line = x->on_line,
        .on_data = x->on_data,
        .ctx = x->ctx,
        .max_line = x->max_line,
        .cancel = c->cancel,
    };
    r = httpc_do(c->http, &req, resp, err);
    if (auth) {
        explicit_bzero(auth, strlen(auth));
        free(auth);
    }
    free(url);
    free(ua);
    free(acc);
    for (int i = 0; i < ni; i++)
        free(imp[i]);
    free(ct);
    kubeconfig_creds_done(&cr);
    return r;
}

static long retry_after(const struct httpc_response *resp)
{
    const char *v = httpc_header(resp, "retry-after");
    int64_t s;
    if (!v || num_parse_range(v, 0, 1000000, &s))
        return -1;
    return s > TERN_KUBE_MAX_RETRY_AFTER ? TERN_KUBE_MAX_RETRY_AFTER : (long)s;
}

/* The exchange with auth refresh and retries. On return resp holds the last
 * answer (release it). Returns 0 when an HTTP answer was received (any
 * status), else the transport error. */
static int exchange(struct kclient *c, const struct exchange *x, struct httpc_response *resp,
                    struct kclient_err *err)
{
    bool is_get = strcmp(x->method, "GET") == 0;
    bool refreshed = false;
    unsigned gen = 0;
    int r;
    for (int attempt = 0;; attempt++) {
        struct tern_err te = {0};
        r = exchange_once(c, x, 0, &gen, resp, &te);
        /* an error status on a stream stops on_line with a positive code */
        bool answered = r == 0 || (r > 0 && resp->status >= 300);
        if (answered && resp->status == 401 && !refreshed && gen &&
            kubeconfig_can_refresh(c->cfg)) {
            /* the plugin's credential was rejected: run it again, once */
            refreshed = true;
            httpc_response_done(resp);
            if (x->on_retry)
                x->on_retry(x->ctx);
            r = exchange_once(c, x, gen, &gen, resp, &te);
            answered = r == 0 || (r > 0 && resp->status >= 300);
        }
        long wait = -1;
        if (answered) {
            long ra = retry_after(resp);
            if (err)
                err->retry_after_s = ra > 0 ? ra : 0;
            if (resp->status == 429 || (resp->status >= 500 && ra >= 0))
                wait = ra >= 0 ? ra * 1000 : backoff(c, attempt);
            else if (is_get && resp->status >= 500)
                wait = backoff(c, attempt);
        } else if (r != -ECANCELED && r != TERN_ETOOLARGE && x->on_line == NULL &&
                   x->on_data == NULL &&
                   (is_get || !resp->sent)) {
            wait = backoff(c, attempt);
        }
        if (wait < 0 || attempt >= c->o.max_retries) {
            /* a stop requested by an on_line callback keeps the callback's err */
            if (r && err && te.code) {
                err->e = te;
                err->http_status = resp->status;
            }
            return r;
        }
        if (wait > c->o.max_backoff_ms)
            wait = c->o.max_backoff_ms;
        httpc_response_done(resp);
        if (x->on_retry)
            x->on_retry(x->ctx);
        int nr = nap(c, wait);
        if (nr) {
            memset(resp, 0, sizeof *resp);
            buf_init(&resp->body, 1);
            return err ? err_set(&err->e, nr, "%s %s: cancelled", x->method, x->path) : nr;
        }
    }
}

int kclient_request(struct kclient *c, const char *method, const char *path,
                    const char *content_type, const char *body, size_t body_len, size_t max_body,
                    cJSON **ret, struct kclient_err *err)
{
    kerr_reset(err);
    struct httpc_response resp;
    struct exchange x = {
        .method = method,
        .path = path,
        .content_type = content_type,
        .body = body,
        .body_len = body_len,
        .max_body = max_body,
        .timeout_ms = c->o.timeout_ms,
    };
    char what[256];
    snprintf(what, sizeof what, "%s %s", method, path);
    int r = exchange(c, &x, &resp, err);
    if (r)
        goto out;
    if (resp.status < 200 || resp.status > 299) {
        r = kclient_status_error(resp.status, resp.body.data, resp.body.len, what, err);
        goto out;
    }
    if (ret) {
        cJSON *j = NULL;
        if (resp.body.len) {
            struct tern_err pe = {0};
            r = json_parse(resp.body.data, resp.body.len, &j, &pe);
            if (r) {
                if (err) {
                    err->http_status = resp.status;
                    err_set(&err->e, r, "%s: response: %s", what, pe.msg);
                }
                goto out;
            }
        }
        *ret = j;
    }
out:
    httpc_response_done(&resp);
    return r;
}

/* ---- verbs ---- */

int kclient_get(struct kclient *c, const struct kgvr *gvr, const char *ns, const char *name,
                cJSON **ret, struct kclient_err *err)
{
    char *p = kclient_path(gvr, ns, name, NULL);
    int r = kclient_request(c, "GET", p, NULL, NULL, 0, 0, ret, err);
    free(p);
    return r;
}

static char *list_path(const struct kgvr *gvr, const char *ns, const struct kclient_list_opts *o,
                       bool watch)
{
    char *p = kclient_path(gvr, ns, NULL, NULL);
    struct buf b;
    buf_init(&b, TERN_HTTP_MAX_URL);
    buf_puts(&b, p);
    free(p);
    if (o && o->label_selector && o->label_selector[0])
        query_add(&b, "labelSelector", o->label_selector);
    if (o && o->field_selector && o->field_selector[0])
        query_add(&b, "fieldSelector", o->field_selector);
    if (o && o->resource_version && o->resource_version[0])
        query_add(&b, "resourceVersion", o->resource_version);
    if (!watch) {
        if (o && o->limit > 0)
            buf_printf(&b, "%climit=%ld", strchr(buf_str(&b), '?') ? '&' : '?', o->limit);
        if (o && o->continue_token && o->continue_token[0])
            query_add(&b, "continue", o->continue_token);
    } else {
        if (o && o->allow_bookmarks)
            query_add(&b, "allowWatchBookmarks", "true");
        if (o && o->timeout_seconds > 0)
            buf_printf(&b, "%ctimeoutSeconds=%ld", strchr(buf_str(&b), '?') ? '&' : '?',
                       o->timeout_seconds);
        query_add(&b, "watch", "true");
    }
    return buf_steal(&b);
}

int kclient_list(struct kclient *c, const struct kgvr *gvr, const char *ns,
                 const struct kclient_list_opts *o, cJSON **ret, struct kclient_err *err)
{
    char *p = list_path(gvr, ns, o, false);
    int r = kclient_request(c, "GET", p, NULL, NULL, 0, TERN_KUBE_MAX_LIST_BODY, ret, err);
    free(p);
    return r;
}

int kclient_list_each(struct kclient *c, const struct kgvr *gvr, const char *ns,
                      const struct kclient_list_opts *o,
                      int (*on_item)(void *ctx, cJSON *item), void *ctx, char **ret_rv,
                      struct kclient_err *err)
{
    struct kclient_list_opts lo = {0};
    if (o)
        lo = *o;
    char *cont = NULL, *rv = NULL;
    int r = 0;
    for (unsigned page = 0;; page++) {
        if (page >= TERN_KUBE_MAX_LIST_PAGES) {
            r = TERN_ETOOLARGE;
            if (err)
                err_set(&err->e, r, "list: more than %u pages", TERN_KUBE_MAX_LIST_PAGES);
            goto out;
        }
        lo.continue_token = cont;
        if (cont)
            lo.resource_version = NULL; /* the token pins the version */
        cJSON *list = NULL;
        r = kclient_list(c, gvr, ns, &lo, &list, err);
        if (r)
            goto out;
        cJSON *items = cJSON_GetObjectItemCaseSensitive(list, "items");
        const cJSON *md = json_get(list, "metadata");
        const cJSON *jrv = json_get(md, "resourceVersion");
        const cJSON *jc = json_get(md, "continue");
        if (!cJSON_IsObject(list) || (items && !cJSON_IsArray(items) && !cJSON_IsNull(items))) {
            cJSON_Delete(list);
            r = TERN_EPARSE;
            if (err)
                err_set(&err->e, r, "list: not a List object");
            goto out;
        }
        if (cJSON_IsString(jrv)) {
            free(rv);
            rv = xstrdup(jrv->valuestring);
        }
        free(cont);
        cont = cJSON_IsString(jc) && jc->valuestring[0] ? xstrdup(jc->valuestring) : NULL;
        while (cJSON_IsArray(items) && items->child) {
            cJSON *it = cJSON_DetachItemViaPointer(items, items->child);
            r = on_item(ctx, it);
            if (r) {
                cJSON_Delete(list);
                goto out;
            }
        }
        cJSON_Delete(list);
        if (!cont)
            break;
    }
    if (ret_rv) {
        *ret_rv = rv ? rv : xstrdup("");
        rv = NULL;
    }
out:
    free(cont);
    free(rv);
    return r;
}

static int add_item(void *ctx, cJSON *item)
{
    cJSON_AddItemToArray(ctx, item);
    return 0;
}

int kclient_list_all(struct kclient *c, const struct kgvr *gvr, const char *ns,
                     const struct kclient_list_opts *o, cJSON **ret, struct kclient_err *err)
{
    cJSON *list = cJSON_CreateObject();
    cJSON *items = cJSON_CreateArray();
    char *rv = NULL;
    int r = kclient_list_each(c, gvr, ns, o, add_item, items, &rv, err);
    if (r) {
        cJSON_Delete(items);
        cJSON_Delete(list);
        return r;
    }
    cJSON *md = cJSON_AddObjectToObject(list, "metadata");
    json_add_string(md, "resourceVersion", rv);
    cJSON_AddItemToObject(list, "items", items);
    free(rv);
    *ret = list;
    return 0;
}

static int write_obj(struct kclient *c, const char *method, const char *path, const cJSON *obj,
                     cJSON **ret, struct kclient_err *err)
{
    char *body = json_print(obj);
    int r;
    if (strlen(body) > TERN_KUBE_MAX_OBJECT) {
        kerr_reset(err);
        r = TERN_ETOOLARGE;
        if (err)
            err_set(&err->e, r, "%s %s: object over %u bytes", method, path, TERN_KUBE_MAX_OBJECT);
    } else {
        r = kclient_request(c, method, path, "application/json", body, strlen(body), 0, ret, err);
    }
    free(body);
    return r;
}

int kclient_create(struct kclient *c, const struct kgvr *gvr, const char *ns, const cJSON *obj,
                   cJSON **ret, struct kclient_err *err)
{
    char *p = kclient_path(gvr, ns, NULL, NULL);
    int r = write_obj(c, "POST", p, obj, ret, err);
    free(p);
    return r;
}

static const char *obj_name(const cJSON *obj)
{
    const cJSON *n = json_get(json_get(obj, "metadata"), "name");
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

static int put(struct kclient *c, const struct kgvr *gvr, const char *ns, const cJSON *obj,
               const char *sub, cJSON **ret, struct kclient_err *err)
{
    const char *name = obj_name(obj);
    if (!name || !name[0]) {
        kerr_reset(err);
        return err ? err_set(&err->e, -EINVAL, "update: metadata.name missing") : -EINVAL;
    }
    char *p = kclient_path(gvr, ns, name, sub);
    int r = write_obj(c, "PUT", p, obj, ret, err);
    free(p);
    return r;
}

int kclient_update(struct kclient *c, const struct kgvr *gvr, const char *ns, const cJSON *obj,
                   cJSON **ret, struct kclient_err *err)
{
    return put(c, gvr, ns, obj, NULL, ret, err);
}

int kclient_update_status(struct kclient *c, const struct kgvr *gvr, const char *ns,
                          const cJSON *obj, cJSON **ret, struct kclient_err *err)
{
    return put(c, gvr, ns, obj, "status", ret, err);
}

int kclient_patch(struct kclient *c, const struct kgvr *gvr, const char *ns, const char *name,
                  enum kclient_patch_type type, const char *patch, size_t patch_len,
                  const struct kclient_patch_opts *o, cJSON **ret, struct kclient_err *err)
{
    static const char *const ctypes[] = {
        [KCLIENT_PATCH_MERGE] = "application/merge-patch+json",
        [KCLIENT_PATCH_JSON] = "application/json-patch+json",
        [KCLIENT_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
        [KCLIENT_PATCH_APPLY] = "application/apply-patch+yaml",
    };
    kerr_reset(err);
    if ((unsigned)type > KCLIENT_PATCH_APPLY)
        return err ? err_set(&err->e, -EINVAL, "patch: unknown type %d", (int)type) : -EINVAL;
    if (type == KCLIENT_PATCH_APPLY && !(o && o->field_manager && o->field_manager[0]))
        return err ? err_set(&err->e, -EINVAL, "apply patch: fieldManager is required")
                   : -EINVAL;
    if (o && o->force && type != KCLIENT_PATCH_APPLY)
        return err ? err_set(&err->e, -EINVAL, "patch: force is only valid with apply")
                   : -EINVAL;
    if (patch_len > TERN_KUBE_MAX_OBJECT)
        return err ? err_set(&err->e, TERN_ETOOLARGE, "patch over %u bytes", TERN_KUBE_MAX_OBJECT)
                   : TERN_ETOOLARGE;
    char *p = kclient_path(gvr, ns, name, o ? o->subresource : NULL);
    struct buf b;
    buf_init(&b, TERN_HTTP_MAX_URL);
    buf_puts(&b, p);
    free(p);
    if (o && o->field_manager && o->field_manager[0])
        query_add(&b, "fieldManager", o->field_manager);
    if (o && o->force)
        query_add(&b, "force", "true");
    int r = kclient_request(c, "PATCH", buf_str(&b), ctypes[type], patch, patch_len, 0, ret, err);
    buf_done(&b);
    return r;
}

int kclient_delete(struct kclient *c, const struct kgvr *gvr, const char *ns, const char *name,
                   const struct kclient_delete_opts *o, cJSON **ret, struct kclient_err *err)
{
    cJSON *body = cJSON_CreateObject();
    json_add_string(body, "kind", "DeleteOptions");
    json_add_string(body, "apiVersion", "v1");
    if (o && (o->precondition_uid || o->precondition_rv)) {
        cJSON *pre = cJSON_AddObjectToObject(body, "preconditions");
        if (o->precondition_uid)
            json_add_string(pre, "uid", o->precondition_uid);
        if (o->precondition_rv)
            json_add_string(pre, "resourceVersion", o->precondition_rv);
    }
    if (o && o->propagation)
        json_add_string(body, "propagationPolicy", o->propagation);
    if (o && o->grace_period_set)
        json_add_int64(body, "gracePeriodSeconds", o->grace_period_seconds);
    char *p = kclient_path(gvr, ns, name, NULL);
    char *s = json_print(body);
    int r = kclient_request(c, "DELETE", p, "application/json", s, strlen(s), 0, ret, err);
    free(s);
    free(p);
    cJSON_Delete(body);
    return r;
}

int kclient_update_retry(struct kclient *c, const struct kgvr *gvr, const char *ns,
                         const char *name, const char *subresource,
                         int (*mutate)(void *ctx, cJSON *obj), void *ctx, int max_attempts,
                         cJSON **ret, struct kclient_err *err)
{
    if (max_attempts <= 0)
        max_attempts = 10;
    int r = 0;
    for (int i = 0; i < max_attempts; i++) {
        cJSON *obj = NULL;
        r = kclient_get(c, gvr, ns, name, &obj, err);
        if (r)
            return r;
        int m = mutate(ctx, obj);
        if (m < 0) {
            cJSON_Delete(obj);
            kerr_reset(err);
            return err ? err_set(&err->e, m, "update of %s: aborted by mutate", name) : m;
        }
        if (m == 1) {
            if (ret)
                *ret = obj;
            else
                cJSON_Delete(obj);
            return 0;
        }
        cJSON *out = NULL;
        r = put(c, gvr, ns, obj, subresource, ret ? &out : NULL, err);
        cJSON_Delete(obj);
        if (r == 0) {
            if (ret)
                *ret = out;
            return 0;
        }
        if (r != TERN_ECONFLICT)
            return r;
        int nr = nap(c, 10L << (i < 6 ? i : 6));
        if (nr)
            return nr;
    }
    return r;
}

/* ---- watches ---- */

int kclient_parse_event(const char *line, size_t len, enum kwatch_type *ret_type,
                        cJSON **ret_obj, struct tern_err *err)
{
    static const char *const names[] = {NULL, "ADDED", "MODIFIED", "DELETED", "BOOKMARK",
                                        "ERROR"};
    if (len > TERN_KUBE_MAX_WATCH_LINE)
        return err_set(err, TERN_ETOOLARGE, "watch event over %u bytes",
                       TERN_KUBE_MAX_WATCH_LINE);
    cJSON *ev = NULL;
    int r = json_parse(line, len, &ev, err);
    if (r)
        return err_wrap(err, r, "watch event");
    const char *t = NULL;
    int type = 0;
    r = json_get_string(ev, "", "type", JSON_REQUIRED, &t, err);
    if (r)
        goto out;
    for (int i = 1; i <= KWATCH_ERROR; i++)
        if (strcmp(t, names[i]) == 0)
            type = i;
    if (!type) {
        r = err_set(err, TERN_EINVALID, "watch event: unknown type \"%.40s\"", t);
        goto out;
    }
    cJSON *obj = cJSON_GetObjectItemCaseSensitive(ev, "object");
    if (!cJSON_IsObject(obj)) {
        r = err_set(err, TERN_EINVALID, "watch event: object must be an object");
        goto out;
    }
    *ret_obj = cJSON_DetachItemViaPointer(ev, obj);
    *ret_type = (enum kwatch_type)type;
out:
    cJSON_Delete(ev);
    return r;
}

struct watch_ctx {
    int (*on_event)(void *ctx, enum kwatch_type type, cJSON *obj);
    void *ctx;
    struct kclient_err *err;
    struct buf other; /* a non-event body (an error Status) */
    bool stopped_by_user;
};

#define WATCH_NOT_EVENT 1 /* on_line stopped: the body is not a stream of events */

static void on_watch_retry(void *vctx)
{
    struct watch_ctx *w = vctx;
    buf_reset(&w->other);
    if (w->err)
        memset(&w->err->e, 0, sizeof w->err->e);
}

static int on_watch_line(void *vctx, const char *line, size_t len)
{
    struct watch_ctx *w = vctx;
    if (w->other.len) /* collecting an error body */
        return buf_append(&w->other, line, len) ? WATCH_NOT_EVENT : 0;
    if (len == 0)
        return 0;
    enum kwatch_type type;
    cJSON *obj = NULL;
    struct tern_err pe = {0};
    int r = kclient_parse_event(line, len, &type, &obj, &pe);
    if (r) {
        /* maybe a Status body of a failed request: keep it for the caller */
        buf_append(&w->other, line, len);
        if (w->err)
            w->err->e = pe;
        return WATCH_NOT_EVENT;
    }
    if (type == KWATCH_ERROR) {
        char *s = json_print(obj);
        r = kclient_status_error(200, s, strlen(s), "watch", w->err);
        free(s);
        cJSON_Delete(obj);
        return r;
    }
    r = w->on_event(w->ctx, type, obj);
    if (r)
        w->stopped_by_user = true;
    return r;
}

int kclient_watch(struct kclient *c, const struct kgvr *gvr, const char *ns,
                  const struct kclient_list_opts *o,
                  int (*on_event)(void *ctx, enum kwatch_type type, cJSON *obj), void *ctx,
                  struct kclient_err *err)
{
    kerr_reset(err);
    char *path = list_path(gvr, ns, o, true);
    struct watch_ctx w = {.on_event = on_event, .ctx = ctx, .err = err};
    buf_init(&w.other, 64 << 10);
    struct exchange x = {
        .method = "GET",
        .path = path,
        .on_line = on_watch_line,
        .on_retry = on_watch_retry,
        .ctx = &w,
        .max_line = TERN_KUBE_MAX_WATCH_LINE,
        /* a silent stream is dead: bookmarks or the server timeout come first */
        .idle_timeout_ms = o && o->timeout_seconds > 0 ? (o->timeout_seconds + 30) * 1000 : 0,
    };
    struct httpc_response resp;
    struct kclient_err local;
    if (!err)
        w.err = &local;
    int r = exchange(c, &x, &resp, w.err);
    if (r == WATCH_NOT_EVENT || (r == 0 && w.other.len) ||
        (resp.status && (resp.status < 200 || resp.status > 299))) {
        if (resp.status && (resp.status < 200 || resp.status > 299))
            r = kclient_status_error(resp.status, w.other.data, w.other.len, path, w.err);
        else if (r == WATCH_NOT_EVENT || w.other.len)
            r = w.err->e.code ? w.err->e.code : TERN_EPARSE;
    }
    if (r && w.err->e.code == 0)
        err_set(&w.err->e, r, "watch %s: %s", path, err_str(r));
    httpc_response_done(&resp);
    buf_done(&w.other);
    free(path);
    return r;
}

int kclient_stream(struct kclient *c, const char *path, const char *accept,
                   int (*on_data)(void *ctx, long status, const char *p, size_t n), void *ctx,
                   struct kclient_err *err)
{
    struct exchange x = {.method = "GET", .path = path, .accept = accept, .on_data = on_data,
                         .ctx = ctx};
    struct httpc_response resp = {0};
    int r = exchange(c, &x, &resp, err);
    if (err) {
        err->http_status = resp.status;
        if (r && !err->e.code)
            err_set(&err->e, r, "GET %s: %s", path, err_str(r));
    }
    httpc_response_done(&resp);
    return r;
}
