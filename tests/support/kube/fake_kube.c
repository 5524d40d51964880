/* fake_kube.c - fake Kubernetes API server for tests. See fake_kube.h. */
#include "fake_kube.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"
#include "kube/kmap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct fobj {
    char *key; /* coll|ns|name */
    char *coll, *ns, *name;
    cJSON *obj;
};

struct fev {
    long long rv;
    char *coll, *ns;
    const char *type;
    char *json; /* the object */
};

struct fault {
    char *method, *prefix, *body;
    int status, retry_after, times;
};

struct freq {
    char *method, *path, *query, *ctype, *body;
};

struct fake_kube {
    struct MHD_Daemon *d;
    int port;
    char url[64];
    pthread_mutex_t mu;
    pthread_cond_t cond; /* new events, closes */
    struct fobj **objs;
    size_t nobjs, capobjs;
    struct kmap *index; /* key -> fobj */
    struct fev *log;
    size_t nlog, caplog;
    long long rv, floor;
    unsigned uid_seq;
    char *token;
    struct fault *faults;
    size_t nfaults;
    bool split;
    unsigned watch_gen, bookmark_gen;
    bool stopping;
    bool end_clean; /* the last watch_gen bump ends streams cleanly */
    bool paused;    /* watches hold back events */
    int watchers;
    struct freq *reqs;
    size_t nreqs;
};

/* ---- helpers ---- */

static char *mkkey(const char *coll, const char *ns, const char *name)
{
    return xasprintf("%s|%s|%s", coll, ns ? ns : "", name);
}

static cJSON *md_of(cJSON *obj)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    if (!cJSON_IsObject(md)) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "metadata");
        md = cJSON_AddObjectToObject(obj, "metadata");
    }
    return md;
}

static void set_str(cJSON *o, const char *k, const char *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    json_add_string(o, k, v);
}

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void log_event(struct fake_kube *fk, const char *type, struct fobj *f)
{
    if (fk->nlog == fk->caplog) {
        fk->caplog = fk->caplog ? fk->caplog * 2 : 256;
        fk->log = xreallocarray(fk->log, fk->caplog, sizeof *fk->log);
    }
    fk->log[fk->nlog++] = (struct fev){fk->rv, xstrdup(f->coll), xstrdup(f->ns ? f->ns : ""),
                                       type, json_print(f->obj)};
    pthread_cond_broadcast(&fk->cond);
}

static void bump(struct fake_kube *fk, cJSON *obj)
{
    char rv[32];
    snprintf(rv, sizeof rv, "%lld", ++fk->rv);
    set_str(md_of(obj), "resourceVersion", rv);
}

static struct fobj *find(struct fake_kube *fk, const char *coll, const char *ns, const char *name)
{
    char *k = mkkey(coll, ns, name);
    struct fobj *f = kmap_get(fk->index, k);
    free(k);
    return f;
}

static struct fobj *insert(struct fake_kube *fk, const char *coll, const char *ns, const char *name,
                           cJSON *obj)
{
    struct fobj *f = xcalloc(1, sizeof *f);
    f->key = mkkey(coll, ns, name);
    f->coll = xstrdup(coll);
    f->ns = xstrdup(ns ? ns : "");
    f->name = xstrdup(name);
    f->obj = obj;
    if (fk->nobjs == fk->capobjs) {
        fk->capobjs = fk->capobjs ? fk->capobjs * 2 : 64;
        fk->objs = xreallocarray(fk->objs, fk->capobjs, sizeof *fk->objs);
    }
    fk->objs[fk->nobjs++] = f;
    kmap_put(fk->index, f->key, f);
    return f;
}

static void fobj_free(struct fobj *f)
{
    free(f->key);
    free(f->coll);
    free(f->ns);
    free(f->name);
    cJSON_Delete(f->obj);
    free(f);
}

static void unlink_obj(struct fake_kube *fk, struct fobj *f)
{
    kmap_del(fk->index, f->key);
    for (size_t i = 0; i < fk->nobjs; i++) {
        if (fk->objs[i] == f) {
            memmove(&fk->objs[i], &fk->objs[i + 1], (fk->nobjs - i - 1) * sizeof *fk->objs);
            fk->nobjs--;
            break;
        }
    }
}

static void stamp_new(struct fake_kube *fk, cJSON *obj, const char *ns)
{
    cJSON *md = md_of(obj);
    char uid[64];
    snprintf(uid, sizeof uid, "uid-%u-%lld", ++fk->uid_seq, fk->rv + 1);
    set_str(md, "uid", uid);
    if (ns && ns[0])
        set_str(md, "namespace", ns);
    set_str(md, "creationTimestamp", "2026-01-01T00:00:00Z");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "generation");
    json_add_int64(md, "generation", 1);
    bump(fk, obj);
}

/* ---- parsing paths ---- */

struct route {
    char coll[512]; /* e.g. /apis/g/v/namespaces/ns/res with ns removed: /apis/g/v/res */
    char ns[256];
    char name[256];
    char sub[64];
};

/* /api/v1[/namespaces/NS]/RES[/NAME[/SUB]] or /apis/G/V/... */
static int parse_route(const char *url, struct route *rt)
{
    char *copy = xstrdup(url), *save = NULL;
    char *seg[16];
    int n = 0;
    for (char *p = strtok_r(copy, "/", &save); p && n < 16; p = strtok_r(NULL, "/", &save))
        seg[n++] = p;
    int i, r = -1;
    memset(rt, 0, sizeof *rt);
    if (n >= 3 && strcmp(seg[0], "api") == 0) {
        snprintf(rt->coll, sizeof rt->coll, "/api/%s", seg[1]);
        i = 2;
    } else if (n >= 4 && strcmp(seg[0], "apis") == 0) {
        snprintf(rt->coll, sizeof rt->coll, "/apis/%s/%s", seg[1], seg[2]);
        i = 3;
    } else {
        goto out;
    }
    if (n - i >= 3 && strcmp(seg[i], "namespaces") == 0) {
        snprintf(rt->ns, sizeof rt->ns, "%s", seg[i + 1]);
        i += 2;
    }
    size_t l = strlen(rt->coll);
    snprintf(rt->coll + l, sizeof rt->coll - l, "/%s", seg[i++]);
    if (i < n)
        snprintf(rt->name, sizeof rt->name, "%s", seg[i++]);
    if (i < n)
        snprintf(rt->sub, sizeof rt->sub, "%s", seg[i++]);
    r = i == n ? 0 : -1;
out:
    free(copy);
    return r;
}

/* "/apis/g/v/namespaces/ns/res" -> coll "/apis/g/v/res", ns */
static void split_coll(const char *path, char *coll, size_t ccap, char *ns, size_t ncap)
{
    struct route rt;
    if (parse_route(path, &rt) == 0) {
        snprintf(coll, ccap, "%s", rt.coll);
        snprintf(ns, ncap, "%s", rt.ns);
    } else {
        snprintf(coll, ccap, "%s", path);
        ns[0] = '\0';
    }
}

/* ---- selectors ---- */

static bool labels_match(const cJSON *obj, const char *sel)
{
    if (!sel || !sel[0])
        return true;
    const cJSON *labels = json_get(json_get(obj, "metadata"), "labels");
    char *copy = xstrdup(sel), *save = NULL;
    bool ok = true;
    for (char *p = strtok_r(copy, ",", &save); p && ok; p = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(p, '=');
        if (!eq) {
            ok = json_get(labels, p) != NULL;
            continue;
        }
        *eq = '\0';
        const char *v = eq[1] == '=' ? eq + 2 : eq + 1;
        const char *have = str_of(labels, p);
        ok = have && strcmp(have, v) == 0;
    }
    free(copy);
    return ok;
}

static bool fields_match(const cJSON *obj, const char *sel)
{
    if (!sel || !sel[0])
        return true;
    const cJSON *md = json_get(obj, "metadata");
    char *copy = xstrdup(sel), *save = NULL;
    bool ok = true;
    for (char *p = strtok_r(copy, ",", &save); p && ok; p = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(p, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *v = eq[1] == '=' ? eq + 2 : eq + 1;
        const char *have = strcmp(p, "metadata.name") == 0        ? str_of(md, "name")
                           : strcmp(p, "metadata.namespace") == 0 ? str_of(md, "namespace")
                                                                  : NULL;
        ok = have && strcmp(have, v) == 0;
    }
    free(copy);
    return ok;
}

/* ---- responses ---- */

struct conn {
    struct buf body;
    bool started;
};

/* What to answer; filled under fk->mu, sent after it is released (MHD
 * takes its own locks, and calls watch_read with them held). */
struct reply {
    int status;
    char *body;
    int retry_after;
    struct watch *watch; /* a streamed answer instead of body */
};

static enum MHD_Result send_json(struct reply *rp, int status, const char *json, int retry_after)
{
    rp->status = status;
    free(rp->body);
    rp->body = xstrdup(json);
    rp->retry_after = retry_after;
    return MHD_YES;
}

static char *status_json(int code, const char *reason, const char *msg)
{
    cJSON *s = cJSON_CreateObject();
    json_add_string(s, "kind", "Status");
    json_add_string(s, "apiVersion", "v1");
    cJSON_AddObjectToObject(s, "metadata");
    json_add_string(s, "status", code < 300 ? "Success" : "Failure");
    json_add_string(s, "message", msg);
    json_add_string(s, "reason", reason);
    json_add_int64(s, "code", code);
    char *out = json_print(s);
    cJSON_Delete(s);
    return out;
}

static enum MHD_Result send_status(struct reply *rp, int code, const char *reason,
                                   const char *msg)
{
    char *s = status_json(code, reason, msg);
    enum MHD_Result r = send_json(rp, code, s, -1);
    free(s);
    return r;
}

static enum MHD_Result send_obj(struct reply *rp, int code, const cJSON *obj)
{
    char *s = json_print(obj);
    enum MHD_Result r = send_json(rp, code, s, -1);
    free(s);
    return r;
}

/* ---- watch streaming ---- */

struct watch {
    struct fake_kube *fk;
    char coll[512], ns[256], label[256], field[256];
    size_t log_idx;
    unsigned gen, bookmark_gen;
    bool bookmarks;
    long long deadline_ms;
    struct buf pending;
    size_t off;
    size_t split_at; /* bytes of pending to hand out before pausing, 0 = none */
    bool end_after_pending;
};

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void watch_line(struct watch *w, const char *type, const char *json)
{
    size_t start = w->pending.len;
    buf_printf(&w->pending, "{\"type\":\"%s\",\"object\":%s}\n", type, json);
    if (w->fk->split && !w->split_at)
        w->split_at = start + (w->pending.len - start) / 2;
}

static ssize_t watch_read(void *cls, uint64_t pos, char *out, size_t max)
{
    struct watch *w = cls;
    struct fake_kube *fk = w->fk;
    (void)pos;
    if (w->off < w->pending.len) {
        size_t end = w->pending.len;
        if (w->split_at > w->off)
            end = w->split_at;
        else if (w->split_at && w->split_at == w->off) {
            /* the second half of a cut line, after a pause */
            struct timespec ts = {0, 30 * 1000000L};
            nanosleep(&ts, NULL);
            w->split_at = 0;
        }
        size_t n = end - w->off;
        if (n > max)
            n = max;
        memcpy(out, w->pending.data + w->off, n);
        w->off += n;
        if (w->off == w->pending.len) {
            buf_reset(&w->pending);
            w->off = 0;
            w->split_at = 0;
        }
        return (ssize_t)n;
    }
    if (w->end_after_pending)
        return MHD_CONTENT_READER_END_OF_STREAM;
    pthread_mutex_lock(&fk->mu);
    for (;;) {
        if (fk->stopping || w->gen != fk->watch_gen) {
            bool clean = !fk->stopping && fk->end_clean;
            pthread_mutex_unlock(&fk->mu);
            return clean ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (w->deadline_ms && now_ms() >= w->deadline_ms) {
            pthread_mutex_unlock(&fk->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        bool got = false;
        while (!fk->paused && w->log_idx < fk->nlog) {
            struct fev *e = &fk->log[w->log_idx++];
            if (strcmp(e->coll, w->coll) != 0 || (w->ns[0] && strcmp(e->ns, w->ns) != 0))
                continue;
            cJSON *o = NULL;
            if (json_parse(e->json, strlen(e->json), &o, NULL) == 0 && labels_match(o, w->label) &&
                fields_match(o, w->field)) {
                watch_line(w, e->type, e->json);
                got = true;
            }
            cJSON_Delete(o);
            if (got)
                break;
        }
        if (!got && w->bookmarks && w->bookmark_gen != fk->bookmark_gen) {
            w->bookmark_gen = fk->bookmark_gen;
            char bm[256];
            snprintf(bm, sizeof bm,
                     "{\"kind\":\"Bookmark\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"%lld\"}}",
                     fk->rv);
            watch_line(w, "BOOKMARK", bm);
            got = true;
        }
        if (got)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&fk->cond, &fk->mu, &ts);
    }
    pthread_mutex_unlock(&fk->mu);
    return watch_read(cls, pos, out, max);
}

static void watch_free(void *cls)
{
    struct watch *w = cls;
    pthread_mutex_lock(&w->fk->mu);
    w->fk->watchers--;
    pthread_mutex_unlock(&w->fk->mu);
    buf_done(&w->pending);
    free(w);
}

static const char *arg(struct MHD_Connection *c, const char *k)
{
    return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
}

static enum MHD_Result start_watch(struct fake_kube *fk, struct MHD_Connection *c, struct reply *rp,
                                   const struct route *rt)
{
    struct watch *w = xcalloc(1, sizeof *w);
    w->fk = fk;
    snprintf(w->coll, sizeof w->coll, "%s", rt->coll);
    snprintf(w->ns, sizeof w->ns, "%s", rt->ns);
    snprintf(w->label, sizeof w->label, "%s", arg(c, "labelSelector") ? arg(c, "labelSelector") : "");
    snprintf(w->field, sizeof w->field, "%s", arg(c, "fieldSelector") ? arg(c, "fieldSelector") : "");
    const char *bm = arg(c, "allowWatchBookmarks");
    w->bookmarks = bm && strcmp(bm, "true") == 0;
    const char *to = arg(c, "timeoutSeconds");
    int64_t tos = 0;
    if (to && num_parse_i64(to, &tos) == 0 && tos > 0)
        w->deadline_ms = now_ms() + tos * 1000;
    buf_init(&w->pending, 64u << 20);
    const char *rvs = arg(c, "resourceVersion");
    int64_t rv = 0;
    /* fk->mu is held by on_request */
    fk->watchers++;
    w->gen = fk->watch_gen;
    w->bookmark_gen = fk->bookmark_gen;
    if (!rvs || !rvs[0] || strcmp(rvs, "0") == 0) {
        for (size_t i = 0; i < fk->nobjs; i++) {
            struct fobj *f = fk->objs[i];
            if (strcmp(f->coll, w->coll) || (w->ns[0] && strcmp(f->ns, w->ns)) ||
                !labels_match(f->obj, w->label) || !fields_match(f->obj, w->field))
                continue;
            char *s = json_print(f->obj);
            buf_printf(&w->pending, "{\"type\":\"ADDED\",\"object\":%s}\n", s);
            free(s);
        }
        w->log_idx = fk->nlog;
    } else if (num_parse_i64(rvs, &rv) || rv < fk->floor) {
        char msg[128];
        snprintf(msg, sizeof msg, "too old resource version: %s (%lld)", rvs, fk->floor);
        char *st = status_json(410, "Expired", msg);
        watch_line(w, "ERROR", st);
        free(st);
        w->split_at = 0;
        w->end_after_pending = true;
    } else {
        size_t i = 0;
        while (i < fk->nlog && fk->log[i].rv <= rv)
            i++;
        w->log_idx = i;
    }
    rp->status = 200;
    rp->watch = w;
    return MHD_YES;
}

/* ---- patches ---- */

static cJSON *merge_patch(cJSON *target, const cJSON *patch)
{
    if (!cJSON_IsObject(patch)) {
        cJSON_Delete(target);
        return json_dup(patch);
    }
    if (!cJSON_IsObject(target)) {
        cJSON_Delete(target);
        target = cJSON_CreateObject();
    }
    const cJSON *p;
    cJSON_ArrayForEach(p, patch)
    {
        if (cJSON_IsNull(p)) {
            cJSON_DeleteItemFromObjectCaseSensitive(target, p->string);
            continue;
        }
        cJSON *cur = cJSON_DetachItemFromObjectCaseSensitive(target, p->string);
        cJSON_AddItemToObject(target, p->string, merge_patch(cur, p));
    }
    return target;
}

/* Resolves a JSON pointer's parent; *last is the final token (owned). */
static cJSON *pointer_parent(cJSON *root, const char *ptr, char **last)
{
    if (ptr[0] != '/')
        return NULL;
    char *copy = xstrdup(ptr + 1);
    cJSON *cur = root;
    char *tok = copy;
    for (;;) {
        char *slash = strchr(tok, '/');
        if (!slash)
            break;
        *slash = '\0';
        if (cJSON_IsArray(cur)) {
            int64_t i;
            cur = num_parse_i64(tok, &i) == 0 ? cJSON_GetArrayItem(cur, (int)i) : NULL;
        } else {
            cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        }
        if (!cur) {
            free(copy);
            return NULL;
        }
        tok = slash + 1;
    }
    *last = xstrdup(tok);
    free(copy);
    return cur;
}

static int json_patch(cJSON *root, const cJSON *ops)
{
    const cJSON *op;
    if (!cJSON_IsArray(ops))
        return -1;
    cJSON_ArrayForEach(op, ops)
    {
        const char *o = str_of(op, "op"), *path = str_of(op, "path");
        const cJSON *value = json_get(op, "value");
        char *last = NULL;
        if (!o || !path)
            return -1;
        cJSON *parent = pointer_parent(root, path, &last);
        if (!parent) {
            free(last);
            return -1;
        }
        int r = 0;
        int64_t idx = -1;
        bool arr = cJSON_IsArray(parent);
        if (arr && strcmp(last, "-") != 0 && num_parse_i64(last, &idx))
            r = -1;
        if (!r && strcmp(o, "test") == 0) {
            cJSON *cur = arr ? cJSON_GetArrayItem(parent, (int)idx)
                             : cJSON_GetObjectItemCaseSensitive(parent, last);
            char *a = cur ? json_print(cur) : xstrdup(""), *b = value ? json_print(value) : xstrdup("");
            r = strcmp(a, b) == 0 ? 0 : -2;
            free(a);
            free(b);
        } else if (!r && (strcmp(o, "remove") == 0 || strcmp(o, "replace") == 0)) {
            cJSON *cur = arr ? cJSON_GetArrayItem(parent, (int)idx)
                             : cJSON_GetObjectItemCaseSensitive(parent, last);
            if (!cur)
                r = -1;
            else if (o[2] == 'm')
                cJSON_Delete(cJSON_DetachItemViaPointer(parent, cur));
            else if (value && arr)
                cJSON_ReplaceItemViaPointer(parent, cur, json_dup(value));
            else if (value)
                cJSON_ReplaceItemInObjectCaseSensitive(parent, last, json_dup(value));
            else
                r = -1;
        } else if (!r && strcmp(o, "add") == 0 && value) {
            if (!arr) {
                cJSON_DeleteItemFromObjectCaseSensitive(parent, last);
                cJSON_AddItemToObject(parent, last, json_dup(value));
            } else if (idx < 0) {
                cJSON_AddItemToArray(parent, json_dup(value));
            } else {
                cJSON_InsertItemInArray(parent, (int)idx, json_dup(value));
            }
        } else if (!r) {
            r = -1;
        }
        free(last);
        if (r)
            return r;
    }
    return 0;
}

/* ---- handlers ---- */

static void record(struct fake_kube *fk, const char *method, const char *url,
                   struct MHD_Connection *c, const struct buf *body)
{
    struct buf q;
    buf_init(&q, 8192);
    static const char *const keys[] = {"watch", "resourceVersion", "labelSelector", "fieldSelector",
                                       "limit", "continue", "allowWatchBookmarks",
                                       "timeoutSeconds", "fieldManager", "force", NULL};
    for (int i = 0; keys[i]; i++) {
        const char *v = arg(c, keys[i]);
        if (v)
            buf_printf(&q, "%s%s=%s", q.len ? "&" : "", keys[i], v);
    }
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (fk->nreqs < 20000) {
        fk->reqs = xreallocarray(fk->reqs, fk->nreqs + 1, sizeof *fk->reqs);
        fk->reqs[fk->nreqs++] = (struct freq){xstrdup(method), xstrdup(url), buf_steal(&q),
                                              xstrdup(ct ? ct : ""),
                                              xstrdup(body->len ? body->data : "")};
    }
    buf_done(&q);
}

static bool auth_ok(struct fake_kube *fk, struct MHD_Connection *c)
{
    if (!fk->token)
        return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return h && strncmp(h, "Bearer ", 7) == 0 && strcmp(h + 7, fk->token) == 0;
}

static enum MHD_Result do_list(struct fake_kube *fk, struct MHD_Connection *c, struct reply *rp,
                               const struct route *rt)
{
    const char *label = arg(c, "labelSelector"), *field = arg(c, "fieldSelector");
    const char *lim = arg(c, "limit"), *cont = arg(c, "continue");
    int64_t limit = 0, offset = 0, listrv = fk->rv;
    if (lim && num_parse_i64(lim, &limit))
        return send_status(rp, 400, "BadRequest", "bad limit");
    if (cont && cont[0]) {
        const char *colon = strchr(cont, ':');
        if (!colon || num_parse_i64n(cont, (size_t)(colon - cont), &listrv) ||
            num_parse_i64(colon + 1, &offset))
            return send_status(rp, 400, "BadRequest", "bad continue token");
        if (listrv < fk->floor)
            return send_status(rp, 410, "Expired", "The provided continue parameter is too old");
    }
    cJSON *list = cJSON_CreateObject();
    json_add_string(list, "kind", "List");
    json_add_string(list, "apiVersion", "v1");
    cJSON *md = cJSON_AddObjectToObject(list, "metadata");
    cJSON *items = cJSON_AddArrayToObject(list, "items");
    int64_t seen = 0, added = 0;
    bool more = false;
    for (size_t i = 0; i < fk->nobjs; i++) {
        struct fobj *f = fk->objs[i];
        if (strcmp(f->coll, rt->coll) || (rt->ns[0] && strcmp(f->ns, rt->ns)) ||
            !labels_match(f->obj, label) || !fields_match(f->obj, field))
            continue;
        if (seen++ < offset)
            continue;
        if (limit > 0 && added >= limit) {
            more = true;
            break;
        }
        cJSON_AddItemToArray(items, json_dup(f->obj));
        added++;
    }
    char rv[32];
    snprintf(rv, sizeof rv, "%lld", (long long)listrv);
    json_add_string(md, "resourceVersion", rv);
    if (more) {
        char tok[64];
        snprintf(tok, sizeof tok, "%lld:%lld", (long long)listrv, (long long)(offset + added));
        json_add_string(md, "continue", tok);
    }
    enum MHD_Result r = send_obj(rp, 200, list);
    cJSON_Delete(list);
    return r;
}

static bool spec_changed(const cJSON *a, const cJSON *b)
{
    const cJSON *sa = json_get(a, "spec"), *sb = json_get(b, "spec");
    char *x = sa ? json_print(sa) : xstrdup(""), *y = sb ? json_print(sb) : xstrdup("");
    bool ch = strcmp(x, y) != 0;
    free(x);
    free(y);
    return ch;
}

/* Stores next as f's new state (keeping identity fields), logs MODIFIED. */
static void store_update(struct fake_kube *fk, struct fobj *f, cJSON *next, const char *sub)
{
    cJSON *old = f->obj;
    cJSON *nmd = md_of(next), *omd = md_of(old);
    static const char *const keep[] = {"uid", "creationTimestamp", "namespace", "name",
                                       "deletionTimestamp", NULL};
    for (int i = 0; keep[i]; i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(nmd, keep[i]);
        const cJSON *v = json_get(omd, keep[i]);
        if (v)
            cJSON_AddItemToObject(nmd, keep[i], json_dup(v));
    }
    if (sub && strcmp(sub, "status") == 0) {
        /* only status changes */
        cJSON *st = cJSON_DetachItemFromObjectCaseSensitive(next, "status");
        cJSON_Delete(next);
        next = json_dup(old);
        cJSON_DeleteItemFromObjectCaseSensitive(next, "status");
        if (st)
            cJSON_AddItemToObject(next, "status", st);
    } else {
        cJSON_DeleteItemFromObjectCaseSensitive(next, "status");
        const cJSON *st = json_get(old, "status");
        if (st)
            cJSON_AddItemToObject(next, "status", json_dup(st));
    }
    int64_t gen = 1;
    json_get_int64(omd, "metadata", "generation", JSON_OPTIONAL, &gen, NULL);
    if (spec_changed(old, next))
        gen++;
    nmd = md_of(next);
    cJSON_DeleteItemFromObjectCaseSensitive(nmd, "generation");
    json_add_int64(nmd, "generation", gen);
    /* a no-op write is not stored */
    cJSON_DeleteItemFromObjectCaseSensitive(nmd, "resourceVersion");
    const cJSON *orv = json_get(omd, "resourceVersion");
    if (orv)
        cJSON_AddItemToObject(nmd, "resourceVersion", json_dup(orv));
    char *a = json_print(old), *b = json_print(next);
    bool same = strcmp(a, b) == 0;
    free(a);
    free(b);
    if (same) {
        cJSON_Delete(next);
        return;
    }
    bump(fk, next);
    f->obj = next;
    cJSON_Delete(old);
    /* finalizers emptied on a deleting object: it goes away */
    const cJSON *fin = json_get(md_of(next), "finalizers");
    if (json_get(md_of(next), "deletionTimestamp") && (!fin || cJSON_GetArraySize(fin) == 0)) {
        unlink_obj(fk, f);
        log_event(fk, "DELETED", f);
        fobj_free(f);
        return;
    }
    log_event(fk, "MODIFIED", f);
}

static enum MHD_Result handle(struct fake_kube *fk, struct MHD_Connection *c, struct reply *rp, const char *method,
                              const char *url, const struct buf *body)
{
    if (strcmp(url, "/version") == 0)
        return send_json(rp, 200, "{\"major\":\"1\",\"minor\":\"32\"}", -1);
    struct route rt;
    if (parse_route(url, &rt))
        return send_status(rp, 404, "NotFound", "the server could not find the requested resource");
    cJSON *in = NULL;
    if (body->len && strcmp(method, "PATCH") != 0 && strcmp(method, "DELETE") != 0 &&
        json_parse(body->data, body->len, &in, NULL))
        return send_status(rp, 400, "BadRequest", "malformed JSON body");
    enum MHD_Result ret;
    char msg[600];
    struct fobj *f = rt.name[0] ? find(fk, rt.coll, rt.ns, rt.name) : NULL;
    const char *res = strrchr(rt.coll, '/') + 1;
    snprintf(msg, sizeof msg, "%s \"%s\" not found", res, rt.name);

    if (strcmp(method, "GET") == 0) {
        if (!rt.name[0]) {
            const char *w = arg(c, "watch");
            if (w && (strcmp(w, "true") == 0 || strcmp(w, "1") == 0))
                ret = start_watch(fk, c, rp, &rt);
            else
                ret = do_list(fk, c, rp, &rt);
        } else {
            ret = f ? send_obj(rp, 200, f->obj) : send_status(rp, 404, "NotFound", msg);
        }
    } else if (strcmp(method, "POST") == 0 && !rt.name[0]) {
        const char *name = str_of(json_get(in, "metadata"), "name");
        if (!cJSON_IsObject(in) || !name || !name[0]) {
            ret = send_status(rp, 422, "Invalid", "metadata.name: Required value");
        } else if (find(fk, rt.coll, rt.ns, name)) {
            snprintf(msg, sizeof msg, "%s \"%s\" already exists", res, name);
            ret = send_status(rp, 409, "AlreadyExists", msg);
        } else {
            cJSON *obj = json_dup(in);
            stamp_new(fk, obj, rt.ns);
            f = insert(fk, rt.coll, rt.ns, name, obj);
            log_event(fk, "ADDED", f);
            ret = send_obj(rp, 201, f->obj);
        }
    } else if (strcmp(method, "PUT") == 0 && rt.name[0]) {
        const char *rv = str_of(json_get(in, "metadata"), "resourceVersion");
        if (!f) {
            ret = send_status(rp, 404, "NotFound", msg);
        } else if (!rv || !rv[0]) {
            ret = send_status(rp, 422, "Invalid",
                              "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update");
        } else if (strcmp(rv, str_of(json_get(f->obj, "metadata"), "resourceVersion")) != 0) {
            snprintf(msg, sizeof msg,
                     "Operation cannot be fulfilled on %s \"%s\": the object has been modified; "
                     "please apply your changes to the latest version and try again",
                     res, rt.name);
            ret = send_status(rp, 409, "Conflict", msg);
        } else {
            store_update(fk, f, json_dup(in), rt.sub[0] ? rt.sub : NULL);
            f = find(fk, rt.coll, rt.ns, rt.name);
            ret = f ? send_obj(rp, 200, f->obj) : send_status(rp, 200, "", "deleted");
        }
    } else if (strcmp(method, "PATCH") == 0 && rt.name[0]) {
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        cJSON *p = NULL;
        if (!ct)
            ct = "";
        if (json_parse(body->data ? body->data : "", body->len, &p, NULL)) {
            ret = send_status(rp, 400, "BadRequest", "malformed patch");
        } else if (strcmp(ct, "application/strategic-merge-patch+json") == 0) {
            ret = send_status(rp, 415, "UnsupportedMediaType",
                              "the body of the request was in an unknown format");
        } else if (strcmp(ct, "application/apply-patch+yaml") == 0 && !arg(c, "fieldManager")) {
            ret = send_status(rp, 400, "BadRequest",
                              "PATCH, application/apply-patch+yaml requires fieldManager");
        } else if (!f && strcmp(ct, "application/apply-patch+yaml") != 0) {
            ret = send_status(rp, 404, "NotFound", msg);
        } else if (!f) {
            cJSON *obj = json_dup(p);
            stamp_new(fk, obj, rt.ns);
            f = insert(fk, rt.coll, rt.ns, rt.name, obj);
            log_event(fk, "ADDED", f);
            ret = send_obj(rp, 201, f->obj);
        } else {
            cJSON *next = json_dup(f->obj);
            int jr = 0;
            if (strcmp(ct, "application/json-patch+json") == 0)
                jr = json_patch(next, p);
            else if (strcmp(ct, "application/merge-patch+json") == 0 ||
                     strcmp(ct, "application/apply-patch+yaml") == 0)
                next = merge_patch(next, p);
            else
                jr = -3;
            if (jr == -3) {
                cJSON_Delete(next);
                ret = send_status(rp, 415, "UnsupportedMediaType", "unknown patch type");
            } else if (jr == -2) {
                cJSON_Delete(next);
                ret = send_status(rp, 422, "Invalid", "the test operation failed");
            } else if (jr) {
                cJSON_Delete(next);
                ret = send_status(rp, 422, "Invalid", "the patch could not be applied");
            } else {
                store_update(fk, f, next, rt.sub[0] ? rt.sub : NULL);
                f = find(fk, rt.coll, rt.ns, rt.name);
                ret = f ? send_obj(rp, 200, f->obj) : send_status(rp, 200, "", "deleted");
            }
        }
        cJSON_Delete(p);
    } else if (strcmp(method, "DELETE") == 0 && rt.name[0]) {
        cJSON *opts = NULL;
        if (body->len)
            json_parse(body->data, body->len, &opts, NULL);
        const cJSON *pre = json_get(opts, "preconditions");
        const char *puid = str_of(pre, "uid"), *prv = str_of(pre, "resourceVersion");
        const cJSON *md = f ? json_get(f->obj, "metadata") : NULL;
        if (!f) {
            ret = send_status(rp, 404, "NotFound", msg);
        } else if ((puid && strcmp(puid, str_of(md, "uid")) != 0) ||
                   (prv && strcmp(prv, str_of(md, "resourceVersion")) != 0)) {
            snprintf(msg, sizeof msg,
                     "Operation cannot be fulfilled on %s \"%s\": Precondition failed", res,
                     rt.name);
            ret = send_status(rp, 409, "Conflict", msg);
        } else {
            const cJSON *fin = json_get(md, "finalizers");
            if (fin && cJSON_GetArraySize(fin) > 0) {
                if (!json_get(md, "deletionTimestamp")) {
                    cJSON *m = md_of(f->obj);
                    json_add_string(m, "deletionTimestamp", "2026-01-01T00:00:01Z");
                    bump(fk, f->obj);
                    log_event(fk, "MODIFIED", f);
                }
                ret = send_obj(rp, 200, f->obj);
            } else {
                unlink_obj(fk, f);
                bump(fk, f->obj);
                log_event(fk, "DELETED", f);
                char *st = status_json(200, "", "deleted");
                ret = send_json(rp, 200, st, -1);
                free(st);
                fobj_free(f);
            }
        }
        cJSON_Delete(opts);
    } else {
        ret = send_status(rp, 405, "MethodNotAllowed", "method not allowed");
    }
    cJSON_Delete(in);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct fake_kube *fk = cls;
    (void)version;
    struct conn *cc = *con_cls;
    if (!cc) {
        cc = xcalloc(1, sizeof *cc);
        buf_init(&cc->body, 8u << 20);
        *con_cls = cc;
        return MHD_YES;
    }
    if (*upload_size) {
        if (buf_append(&cc->body, upload, *upload_size))
            return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    struct reply rp_ = {.retry_after = -1}, *rp = &rp_;
    pthread_mutex_lock(&fk->mu);
    record(fk, method, url, c, &cc->body);
    enum MHD_Result ret;
    if (!auth_ok(fk, c)) {
        ret = send_status(rp, 401, "Unauthorized", "Unauthorized");
        goto out;
    }
    for (size_t i = 0; i < fk->nfaults; i++) {
        struct fault *ft = &fk->faults[i];
        if (ft->times <= 0 || (ft->method && strcmp(ft->method, method) != 0) ||
            strncmp(url, ft->prefix, strlen(ft->prefix)) != 0)
            continue;
        ft->times--;
        char *b = ft->body ? xstrdup(ft->body) : status_json(ft->status, ft->status == 429 ? "TooManyRequests" : "InternalError", "injected");
        ret = send_json(rp, ft->status, b, ft->retry_after);
        free(b);
        goto out;
    }
    ret = handle(fk, c, rp, method, url, &cc->body);
out:
    pthread_mutex_unlock(&fk->mu);
    if (ret != MHD_YES) {
        free(rp->body);
        return ret;
    }
    struct MHD_Response *r;
    if (rp->watch)
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, watch_read, rp->watch,
                                              watch_free);
    else
        r = MHD_create_response_from_buffer(strlen(rp->body ? rp->body : ""),
                                            rp->body ? rp->body : (char *)"", MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (rp->retry_after >= 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", rp->retry_after);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    ret = MHD_queue_response(c, (unsigned)rp->status, r);
    MHD_destroy_response(r);
    free(rp->body);
    return ret;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    struct conn *cc = *con_cls;
    if (cc) {
        buf_done(&cc->body);
        free(cc);
        *con_cls = NULL;
    }
}

static int listen_on(struct fake_kube *fk, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fk->stopping = false;
    fk->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION,
                             0, NULL, NULL, on_request, fk, MHD_OPTION_SOCK_ADDR, &sa,
                             MHD_OPTION_LISTENING_ADDRESS_REUSE, 1U, MHD_OPTION_NOTIFY_COMPLETED,
                             on_done, fk, MHD_OPTION_CONNECTION_TIMEOUT, 120U, MHD_OPTION_END);
    if (!fk->d)
        return -1;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(fk->d, MHD_DAEMON_INFO_BIND_PORT);
    fk->port = di ? di->port : port;
    snprintf(fk->url, sizeof fk->url, "http://127.0.0.1:%d", fk->port);
    return 0;
}

struct fake_kube *fake_kube_start(void)
{
    struct fake_kube *fk = xcalloc(1, sizeof *fk);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&fk->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_cond_init(&fk->cond, NULL);
    fk->index = kmap_new();
    if (listen_on(fk, 0)) {
        free(fk);
        return NULL;
    }
    return fk;
}

void fake_kube_stop(struct fake_kube *fk)
{
    if (!fk->d)
        return;
    pthread_mutex_lock(&fk->mu);
    fk->stopping = true;
    pthread_cond_broadcast(&fk->cond);
    pthread_mutex_unlock(&fk->mu);
    MHD_stop_daemon(fk->d);
    fk->d = NULL;
}

int fake_kube_restart(struct fake_kube *fk)
{
    if (fk->d)
        return 0;
    return listen_on(fk, fk->port);
}

void fake_kube_free(struct fake_kube *fk)
{
    if (!fk)
        return;
    fake_kube_stop(fk);
    for (size_t i = 0; i < fk->nobjs; i++)
        fobj_free(fk->objs[i]);
    free(fk->objs);
    kmap_free(fk->index);
    for (size_t i = 0; i < fk->nlog; i++) {
        free(fk->log[i].coll);
        free(fk->log[i].ns);
        free(fk->log[i].json);
    }
    free(fk->log);
    for (size_t i = 0; i < fk->nfaults; i++) {
        free(fk->faults[i].method);
        free(fk->faults[i].prefix);
        free(fk->faults[i].body);
    }
    free(fk->faults);
    for (size_t i = 0; i < fk->nreqs; i++) {
        free(fk->reqs[i].method);
        free(fk->reqs[i].path);
        free(fk->reqs[i].query);
        free(fk->reqs[i].ctype);
        free(fk->reqs[i].body);
    }
    free(fk->reqs);
    free(fk->token);
    pthread_mutex_destroy(&fk->mu);
    pthread_cond_destroy(&fk->cond);
    free(fk);
}

int fake_kube_port(struct fake_kube *fk)
{
    return fk->port;
}

const char *fake_kube_url(struct fake_kube *fk)
{
    return fk->url;
}

void fake_kube_require_token(struct fake_kube *fk, const char *token)
{
    pthread_mutex_lock(&fk->mu);
    free(fk->token);
    fk->token = token ? xstrdup(token) : NULL;
    pthread_mutex_unlock(&fk->mu);
}

void fake_kube_inject(struct fake_kube *fk, const char *method, const char *prefix, int status,
                      const char *body, int retry_after, int times)
{
    pthread_mutex_lock(&fk->mu);
    fk->faults = xreallocarray(fk->faults, fk->nfaults + 1, sizeof *fk->faults);
    fk->faults[fk->nfaults++] = (struct fault){method ? xstrdup(method) : NULL, xstrdup(prefix),
                                               body ? xstrdup(body) : NULL, status, retry_after,
                                               times};
    pthread_mutex_unlock(&fk->mu);
}

void fake_kube_split_watch(struct fake_kube *fk, bool on)
{
    pthread_mutex_lock(&fk->mu);
    fk->split = on;
    pthread_mutex_unlock(&fk->mu);
}

void fake_kube_compact(struct fake_kube *fk)
{
    pthread_mutex_lock(&fk->mu);
    fk->rv++; /* as if another resource changed: every older version is gone */
    fk->floor = fk->rv;
    fk->end_clean = true;
    fk->paused = false;
    fk->watch_gen++;
    pthread_cond_broadcast(&fk->cond);
    pthread_mutex_unlock(&fk->mu);
}

void fake_kube_pause_watches(struct fake_kube *fk)
{
    pthread_mutex_lock(&fk->mu);
    fk->paused = true;
    pthread_mutex_unlock(&fk->mu);
}

void fake_kube_close_watches(struct fake_kube *fk)
{
    pthread_mutex_lock(&fk->mu);
    fk->end_clean = false;
    fk->paused = false;
    fk->watch_gen++;
    pthread_cond_broadcast(&fk->cond);
    pthread_mutex_unlock(&fk->mu);
}

void fake_kube_bookmark(struct fake_kube *fk)
{
    pthread_mutex_lock(&fk->mu);
    fk->rv++; /* as if another resource changed */
    fk->bookmark_gen++;
    pthread_cond_broadcast(&fk->cond);
    pthread_mutex_unlock(&fk->mu);
}

long long fake_kube_upsert(struct fake_kube *fk, const char *collpath, const cJSON *obj)
{
    char coll[512], ns[256];
    split_coll(collpath, coll, sizeof coll, ns, sizeof ns);
    const char *name = str_of(json_get(obj, "metadata"), "name");
    if (!name)
        return -1;
    pthread_mutex_lock(&fk->mu);
    struct fobj *f = find(fk, coll, ns, name);
    cJSON *o = json_dup(obj);
    long long rv;
    if (!f) {
        stamp_new(fk, o, ns);
        f = insert(fk, coll, ns, name, o);
        log_event(fk, "ADDED", f);
    } else {
        cJSON *md = md_of(o), *omd = md_of(f->obj);
        const char *uid = str_of(omd, "uid");
        set_str(md, "uid", uid ? uid : "");
        if (ns[0])
            set_str(md, "namespace", ns);
        bump(fk, o);
        cJSON_Delete(f->obj);
        f->obj = o;
        log_event(fk, "MODIFIED", f);
    }
    rv = fk->rv;
    pthread_mutex_unlock(&fk->mu);
    return rv;
}

long long fake_kube_remove(struct fake_kube *fk, const char *collpath, const char *name)
{
    char coll[512], ns[256];
    split_coll(collpath, coll, sizeof coll, ns, sizeof ns);
    pthread_mutex_lock(&fk->mu);
    struct fobj *f = find(fk, coll, ns, name);
    long long rv = -1;
    if (f) {
        unlink_obj(fk, f);
        bump(fk, f->obj);
        log_event(fk, "DELETED", f);
        fobj_free(f);
        rv = fk->rv;
    }
    pthread_mutex_unlock(&fk->mu);
    return rv;
}

cJSON *fake_kube_object(struct fake_kube *fk, const char *path)
{
    struct route rt;
    if (parse_route(path, &rt))
        return NULL;
    pthread_mutex_lock(&fk->mu);
    struct fobj *f = find(fk, rt.coll, rt.ns, rt.name);
    cJSON *o = f ? json_dup(f->obj) : NULL;
    pthread_mutex_unlock(&fk->mu);
    return o;
}

long long fake_kube_rv(struct fake_kube *fk)
{
    pthread_mutex_lock(&fk->mu);
    long long rv = fk->rv;
    pthread_mutex_unlock(&fk->mu);
    return rv;
}

static bool req_match(const struct freq *q, const char *method, const char *prefix)
{
    return (!method || strcmp(q->method, method) == 0) &&
           strncmp(q->path, prefix, strlen(prefix)) == 0;
}

int fake_kube_count(struct fake_kube *fk, const char *method, const char *prefix)
{
    int n = 0;
    pthread_mutex_lock(&fk->mu);
    for (size_t i = 0; i < fk->nreqs; i++)
        n += req_match(&fk->reqs[i], method, prefix);
    pthread_mutex_unlock(&fk->mu);
    return n;
}

char *fake_kube_last(struct fake_kube *fk, const char *method, const char *prefix,
                     char **ret_query, char **ret_ctype)
{
    char *body = NULL;
    pthread_mutex_lock(&fk->mu);
    for (size_t i = fk->nreqs; i-- > 0;) {
        if (!req_match(&fk->reqs[i], method, prefix))
            continue;
        body = fk->reqs[i].body;
        if (ret_query)
            *ret_query = fk->reqs[i].query;
        if (ret_ctype)
            *ret_ctype = fk->reqs[i].ctype;
        break;
    }
    pthread_mutex_unlock(&fk->mu);
    return body;
}

int fake_kube_watchers(struct fake_kube *fk)
{
    pthread_mutex_lock(&fk->mu);
    int n = fk->watchers;
    pthread_mutex_unlock(&fk->mu);
    return n;
}

/* ---- TLS terminator ---- */

struct fake_tls {
    SSL_CTX *ctx;
    int lfd, port, backend;
    pthread_t thread;
    int wake[2];
};

struct tls_conn {
    struct fake_tls *t;
    int fd;
};

static void *tls_relay(void *arg)
{
    struct tls_conn *tc = arg;
    SSL *ssl = SSL_new(tc->t->ctx);
    int bfd = -1;
    SSL_set_fd(ssl, tc->fd);
    if (SSL_accept(ssl) != 1)
        goto out;
    bfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)tc->t->backend)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(bfd, (struct sockaddr *)&sa, sizeof sa))
        goto out;
    char b[16384];
    for (;;) {
        if (SSL_pending(ssl) == 0) {
            struct pollfd p[2] = {{.fd = tc->fd, .events = POLLIN}, {.fd = bfd, .events = POLLIN}};
            if (poll(p, 2, 200) < 0)
                break;
            if (p[1].revents) {
                ssize_t n = read(bfd, b, sizeof b);
                if (n <= 0 || SSL_write(ssl, b, (int)n) <= 0)
                    break;
            }
            if (!(p[0].revents))
                continue;
        }
        int n = SSL_read(ssl, b, sizeof b);
        if (n <= 0)
            break;
        if (write(bfd, b, (size_t)n) != n)
            break;
    }
out:
    SSL_free(ssl);
    if (bfd >= 0)
        close(bfd);
    close(tc->fd);
    free(tc);
    return NULL;
}

static void *tls_accept(void *arg)
{
    struct fake_tls *t = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = t->lfd, .events = POLLIN}, {.fd = t->wake[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        if (!p[0].revents)
            continue;
        int fd = accept4(t->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        struct tls_conn *tc = xcalloc(1, sizeof *tc);
        tc->t = t;
        tc->fd = fd;
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &at, tls_relay, tc)) {
            close(fd);
            free(tc);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

struct fake_tls *fake_tls_start(int backend_port, const char *cert, const char *key,
                                const char *client_ca)
{
    struct fake_tls *t = xcalloc(1, sizeof *t);
    t->backend = backend_port;
    t->ctx = SSL_CTX_new(TLS_server_method());
    if (SSL_CTX_use_certificate_chain_file(t->ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1)
        goto fail;
    if (client_ca) {
        if (SSL_CTX_load_verify_locations(t->ctx, client_ca, NULL) != 1)
            goto fail;
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    if (bind(t->lfd, (struct sockaddr *)&sa, sizeof sa) || listen(t->lfd, 64) ||
        getsockname(t->lfd, (struct sockaddr *)&sa, &sl))
        goto fail;
    t->port = ntohs(sa.sin_port);
    if (pipe(t->wake))
        goto fail;
    pthread_create(&t->thread, NULL, tls_accept, t);
    return t;
fail:
    SSL_CTX_free(t->ctx);
    free(t);
    return NULL;
}

int fake_tls_port(struct fake_tls *t)
{
    return t->port;
}

/* Relay threads are detached and end with their connections; the process
 * (a forked test) exits soon after. */
void fake_tls_free(struct fake_tls *t)
{
    if (!t)
        return;
    if (write(t->wake[1], "x", 1) != 1)
        abort();
    pthread_join(t->thread, NULL);
    close(t->lfd);
    close(t->wake[0]);
    close(t->wake[1]);
    /* SSL_CTX is reference-counted by live SSL objects */
    SSL_CTX_free(t->ctx);
    free(t);
}
