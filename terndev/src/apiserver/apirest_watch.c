/* apirest_watch.c - watches: the initial ADDED events (resourceVersion 0),
 * events from the shared watch (apiwatch) filtered by the selectors,
 * bookmarks, expiry (410 as an ERROR event), timeouts; and the stream
 * apirest_watch_next pumps (pods/log follow streams are in
 * apirest_special.c). See apirest_internal.h. */
#include "apirest_internal.h"

#include "apiselector.h"
#include "apistatus.h"
#include "apitable.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

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
    apirest__selectors_done(&w->sel);
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
        apirest__to_served_version(w->res, obj);
        if (w->want == WANT_TABLE) {
            payload = apitable_build(w->res, &obj, 1, w->include, NULL, time(NULL));
            if (w->sent_columns)
                cJSON_DeleteItemFromObjectCaseSensitive(payload, "columnDefinitions");
            w->sent_columns = true;
            cJSON_Delete(obj);
        } else if (w->want == WANT_PARTIAL) {
            payload = apirest__partial_of(obj);
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
    bool cm = cur && apirest__sel_match(&w->sel, cur);
    bool pm = prev && apirest__sel_match(&w->sel, prev);
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

int apirest_watch_next(struct apirest_watch *w, struct buf *out, long timeout_ms)
{
    if (w->log_mode)
        return apirest__log_next(w, out, timeout_ms);
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

void apirest__handle_watch(struct rq *q)
{
    struct apirest_watch *w = xcalloc(1, sizeof(*w));
    w->s = q->s;
    w->want = q->want;
    w->include = q->include;
    w->bookmarks = apirest__arg_true(q->req, "allowWatchBookmarks");
    cJSON *st = apirest__parse_selectors(q, &w->sel);
    if (st) {
        free(w);
        apirest__respond_status(q->resp, st);
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
    const char *rvs = apirest__arg(q->req, "resourceVersion");
    int64_t rv = 0;
    if (rvs && *rvs && (num_parse_i64(rvs, &rv) || rv < 0)) {
        apirest__selectors_done(&w->sel);
        free(w);
        char *m = xasprintf("resourceVersion: Invalid value: \"%s\": must be a non-negative "
                            "integer",
                            rvs);
        apirest__respond_status(q->resp, apistatus_bad_request(m));
        free(m);
        return;
    }
    int64_t ts = 0;
    const char *tss = apirest__arg(q->req, "timeoutSeconds");
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
        st = apirest__do_list(q, &w->sel, 0, NULL, &l, &cont);
        free(cont);
        if (st) {
            free(prefix);
            apirest_watch_free(w);
            apirest__respond_status(q->resp, st);
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

/* ---- changes for in-process caches -------------------------------------- */

struct chres {
    const struct apires *res; /* NULL: not served now (prefix by the CR rule) */
    char *prefix;             /* ends with '/' */
    size_t len;
};

/* The resource of gvr ("v1/pods", "G/V/plural") in t, and its key prefix. */
static void chres_of(const struct apires_table *t, const char *gvr, struct chres *out)
{
    memset(out, 0, sizeof(*out));
    const char *slash = strrchr(gvr, '/');
    if (!slash)
        return;
    char *av = xstrndup(gvr, (size_t)(slash - gvr));
    char *gs = strchr(av, '/');
    const char *group = "", *version = av;
    if (gs) {
        *gs = 0;
        group = av;
        version = gs + 1;
    }
    out->res = apires_find(t, group, version, slash + 1);
    if (out->res)
        out->prefix = apires_key(out->res, NULL, NULL);
    else if (*group) /* a custom resource whose CRD is gone: its deletions */
        out->prefix = xasprintf("/registry/%s/%s/", group, slash + 1);
    free(av);
    out->len = out->prefix ? strlen(out->prefix) : 0;
}

/* {"metadata":{"namespace":NS,"name":NAME}} from the rest of a key. */
static cJSON *from_key(const char *rest)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    const char *sl = strchr(rest, '/');
    if (sl) {
        char *ns = xstrndup(rest, (size_t)(sl - rest));
        cJSON_AddStringToObject(md, "namespace", ns);
        free(ns);
        rest = sl + 1;
    }
    cJSON_AddStringToObject(md, "name", rest);
    return o;
}

int apirest_changes(struct apirest *s, const char *const *gvrs, size_t n, int64_t after,
                    long timeout_ms, apirest_change_fn fn, void *ctx, int64_t *ret_rev,
                    struct tern_err *err)
{
    if (n == 0)
        return 0;
    if (!s->hub)
        return err_set(err, -ENOTSUP, "no watch hub");
    int64_t now = 0;
    int rc = apistore_revision(&s->store, &now, err);
    if (rc)
        return rc;
    /* every write before this call is then in the hub's ring (a revision
     * the hub does not reach in time, e.g. a write outside /registry/,
     * only delays what is seen) */
    apiwatch_hub_wait(s->hub, now, timeout_ms);
    struct apiwatch_sub *sub = NULL;
    rc = apiwatch_subscribe(s->hub, "/registry/", after, &sub);
    if (rc)
        return err_set(err, rc, "too old resource version: %lld (%lld)", (long long)after,
                       (long long)apiwatch_hub_oldest(s->hub));
    struct apires_table *t = apires_get(&s->reg);
    struct chres *cr = xcalloc(n, sizeof(*cr));
    for (size_t i = 0; i < n; i++)
        chres_of(t, gvrs[i], &cr[i]);
    struct apiwatch_event *ev = NULL;
    while ((rc = apiwatch_next(sub, 0, &ev)) == 0) {
        size_t w = n;
        for (size_t i = 0; i < n && w == n; i++)
            if (cr[i].prefix && strncmp(ev->key, cr[i].prefix, cr[i].len) == 0 &&
                ev->key[cr[i].len])
                w = i;
        cJSON *obj = NULL;
        if (w < n) {
            const char *v = ev->deleted ? ev->prev_value : ev->value;
            size_t vl = ev->deleted ? ev->prev_len : ev->value_len;
            if (v)
                apistore_decode(v, vl, ev->revision, &obj, NULL);
            if (!obj && ev->deleted)
                obj = from_key(ev->key + cr[w].len);
        }
        if (obj && cr[w].res) {
            apirest__to_served_version(cr[w].res, obj);
            char *av = apires_api_version(cr[w].res);
            apirest__set_str(obj, "apiVersion", av);
            apirest__set_str(obj, "kind", cr[w].res->kind);
            free(av);
        }
        int64_t erev = ev->revision;
        bool deleted = ev->deleted;
        apiwatch_event_free(ev);
        ev = NULL;
        if (obj) {
            rc = fn(ctx, w, deleted, erev, obj);
            if (rc)
                break;
        }
    }
    if (rc == -ETIMEDOUT) { /* drained */
        rc = 0;
        if (ret_rev)
            *ret_rev = apiwatch_sub_progress(sub);
    } else if (rc == TERN_ECOMPACTED) {
        rc = err_set(err, rc, "too old resource version: %lld (%lld)", (long long)after,
                     (long long)apiwatch_hub_oldest(s->hub));
    } else if (rc == -ECANCELED) {
        rc = err_set(err, rc, "the watch hub stopped");
    }
    for (size_t i = 0; i < n; i++)
        free(cr[i].prefix);
    free(cr);
    apires_put(&s->reg, t);
    apiwatch_unsubscribe(sub);
    return rc;
}
