/* informer.c - list+watch cache. See informer.h. */
#include "informer.h"

#include "base/mem.h"
#include "json/json.h"
#include "kube/kmap.h"
#include "kube/kpack.h"
#include "kube/ktime.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A cached object is kept as compact JSON text (about a tenth of the memory
 * of a cJSON tree), packed (kpack.h: its common keys as single bytes, a
 * third less again); trees are made again when a handler or reader needs
 * one. */
struct ientry {
    char *json;    /* packed, or the text itself when !packed */
    bool packed;
    char *key;
    char *rv;
    char **owners; /* owner UIDs */
    size_t nowners;
    size_t bytes;  /* what it holds (informer_cache_bytes) */
};

struct oset {
    struct ientry **v;
    size_t n, cap;
};

struct informer {
    struct kubeconfig *cfg;
    struct informer_opts o;
    char *group, *version, *resource, *ns, *label, *field;
    struct informer_handlers h;
    struct kclient *kc;

    pthread_rwlock_t lock;        /* cache, owners, rv, bytes */
    struct kmap *cache;           /* key -> struct ientry */
    size_t bytes;                 /* the cached entries' bytes */
    struct kmap *owners;          /* owner uid -> struct oset */
    char *rv;

    pthread_mutex_t mu;           /* synced, stop, stats */
    pthread_cond_t cond;
    bool synced;
    atomic_bool stop;
    bool running;
    pthread_t thread;
    struct informer_stats stats;
    unsigned seed;
};

/* ---- entries and indexes (write lock held by callers) ---- */

char *informer_key(const cJSON *obj)
{
    const cJSON *md = json_get(obj, "metadata");
    const cJSON *n = json_get(md, "name"), *ns = json_get(md, "namespace");
    if (!cJSON_IsString(n) || !n->valuestring[0])
        return NULL;
    if (cJSON_IsString(ns) && ns->valuestring[0])
        return xasprintf("%s/%s", ns->valuestring, n->valuestring);
    return xstrdup(n->valuestring);
}

static const char *obj_rv(const cJSON *obj)
{
    const cJSON *rv = json_get(json_get(obj, "metadata"), "resourceVersion");
    return cJSON_IsString(rv) ? rv->valuestring : "";
}

static void entry_free(struct ientry *e)
{
    if (!e)
        return;
    free(e->json);
    free(e->key);
    free(e->rv);
    for (size_t i = 0; i < e->nowners; i++)
        free(e->owners[i]);
    free(e->owners);
    free(e);
}

/* The entry for obj (which is left to the caller, with managedFields
 * removed unless kept); NULL when it has no name. */
static struct ientry *entry_new(struct informer *inf, cJSON *obj)
{
    char *key = informer_key(obj);
    if (!key)
        return NULL;
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    if (!inf->o.keep_managed_fields)
        cJSON_DeleteItemFromObjectCaseSensitive(md, "managedFields");
    if (inf->o.transform)
        inf->o.transform(inf->o.transform_ctx, obj);
    md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    struct ientry *e = xcalloc(1, sizeof *e);
    char *text = json_print(obj);
    e->json = kpack_pack(text);
    e->packed = e->json != NULL;
    if (e->packed)
        free(text);
    else
        e->json = xrealloc(text, strlen(text) + 1); /* no slack: this is what stays */
    e->key = key;
    e->rv = xstrdup(obj_rv(obj));
    const cJSON *refs = json_get(md, "ownerReferences"), *it;
    if (cJSON_IsArray(refs)) {
        e->owners = xcalloc((size_t)cJSON_GetArraySize(refs), sizeof *e->owners);
        cJSON_ArrayForEach(it, refs)
        {
            const cJSON *uid = json_get(it, "uid");
            if (cJSON_IsString(uid) && uid->valuestring[0])
                e->owners[e->nowners++] = xstrdup(uid->valuestring);
        }
    }
    e->bytes = sizeof *e + strlen(e->json) + 1 + strlen(e->key) + 1 + strlen(e->rv) + 1 +
               e->nowners * sizeof *e->owners;
    for (size_t i = 0; i < e->nowners; i++)
        e->bytes += strlen(e->owners[i]) + 1;
    return e;
}

static void index_add(struct informer *inf, struct ientry *e)
{
    for (size_t i = 0; i < e->nowners; i++) {
        struct oset *s = kmap_get(inf->owners, e->owners[i]);
        if (!s) {
            s = xcalloc(1, sizeof *s);
            kmap_put(inf->owners, e->owners[i], s);
        }
        if (s->n == s->cap) {
            s->cap = s->cap ? s->cap * 2 : 2;
            s->v = xreallocarray(s->v, s->cap, sizeof *s->v);
        }
        s->v[s->n++] = e;
    }
}

static void index_del(struct informer *inf, struct ientry *e)
{
    for (size_t i = 0; i < e->nowners; i++) {
        struct oset *s = kmap_get(inf->owners, e->owners[i]);
        if (!s)
            continue;
        for (size_t k = 0; k < s->n; k++) {
            if (s->v[k] == e) {
                s->v[k] = s->v[--s->n];
                break;
            }
        }
        if (s->n == 0) {
            kmap_del(inf->owners, e->owners[i]);
            free(s->v);
            free(s);
        }
    }
}

/* Replaces (or inserts) e in the cache; returns the previous entry. */
static struct ientry *cache_put(struct informer *inf, struct ientry *e)
{
    struct ientry *old = kmap_put(inf->cache, e->key, e);
    if (old) {
        index_del(inf, old);
        inf->bytes -= old->bytes;
    }
    index_add(inf, e);
    inf->bytes += e->bytes;
    return old;
}

static struct ientry *cache_del(struct informer *inf, const char *key)
{
    struct ientry *old = kmap_del(inf->cache, key);
    if (old) {
        index_del(inf, old);
        inf->bytes -= old->bytes;
    }
    return old;
}

static void set_rv(struct informer *inf, const char *rv)
{
    if (!rv || !rv[0])
        return;
    free(inf->rv);
    inf->rv = xstrdup(rv);
}

/* ---- deferred handler calls ---- */

enum dtype { D_ADD, D_UPDATE, D_DELETE };
struct deferred {
    enum dtype type;
    struct ientry *old; /* owned (update/delete) */
    cJSON *new_obj;     /* owned (add/update): the new state */
    /* or the cached entry holding it (a relist's): its tree is made only for
     * the handler's call, so a relist of N objects never holds N trees (the
     * peak that stayed resident after a restart). The informer thread is the
     * cache's only writer, so the entry lives until dl_run is done. */
    const struct ientry *new_entry;
    cJSON *del_obj;     /* owned: the last state of a delete, when not old's */
};
struct dlist {
    struct deferred *v;
    size_t n, cap;
};

static void dl_push(struct dlist *l, struct deferred d)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = xreallocarray(l->v, l->cap, sizeof *l->v);
    }
    l->v[l->n++] = d;
}

/* A tree of a cached entry's text (which we printed ourselves). */
/* The entry's JSON text (owned by the caller). */
static char *entry_text(const struct ientry *e, size_t *ret_len)
{
    if (e->packed)
        return kpack_unpack(e->json, ret_len);
    *ret_len = strlen(e->json);
    return xstrdup(e->json);
}

static cJSON *entry_tree(const struct ientry *e)
{
    cJSON *o = NULL;
    size_t n;
    char *text = entry_text(e, &n);
    if (json_parse(text, n, &o, NULL))
        abort(); /* cannot happen: the text came from json_print */
    free(text);
    return o;
}

/* Runs the handlers without the cache lock and frees what they referred to. */
static void dl_run(struct informer *inf, struct dlist *l)
{
    for (size_t i = 0; i < l->n; i++) {
        struct deferred *d = &l->v[i];
        cJSON *old = NULL;
        if (!d->new_obj && d->new_entry)
            d->new_obj = entry_tree(d->new_entry);
        switch (d->type) {
        case D_ADD:
            if (inf->h.on_add)
                inf->h.on_add(inf->h.ctx, d->new_obj);
            break;
        case D_UPDATE:
            if (inf->h.on_update) {
                old = entry_tree(d->old);
                inf->h.on_update(inf->h.ctx, old, d->new_obj);
            }
            break;
        case D_DELETE:
            if (inf->h.on_delete) {
                if (!d->del_obj)
                    old = entry_tree(d->old);
                inf->h.on_delete(inf->h.ctx, d->del_obj ? d->del_obj : old);
            }
            break;
        }
        cJSON_Delete(old);
        entry_free(d->old);
        cJSON_Delete(d->new_obj);
        cJSON_Delete(d->del_obj);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* ---- thread ---- */

static long jitter(struct informer *inf, long ms)
{
    return ms - (long)(rand_r(&inf->seed) % (unsigned)(ms / 5 + 1));
}

/* Sleeps about ms (jittered) unless stopped; returns true when stopped. */
static bool nap(struct informer *inf, long ms)
{
    return ktime_sleep_or_stop(&inf->mu, &inf->cond, &inf->stop, jitter(inf, ms));
}

static void stat_add(struct informer *inf, unsigned long *field, unsigned long n)
{
    pthread_mutex_lock(&inf->mu);
    *field += n;
    pthread_mutex_unlock(&inf->mu);
}

struct list_ctx {
    struct informer *inf;
    struct kmap *fresh; /* key -> entry */
    unsigned long items;
};

static int on_list_item(void *ctx, cJSON *item)
{
    struct list_ctx *lc = ctx;
    struct ientry *e = entry_new(lc->inf, item);
    cJSON_Delete(item); /* keep only text while the list is assembled */
    if (!e)
        return 0;
    struct ientry *dup = kmap_put(lc->fresh, e->key, e);
    entry_free(dup);
    lc->items++;
    return 0;
}

struct diff_ctx {
    struct informer *inf;
    struct kmap *fresh;
    struct dlist *dl;
};

static int diff_removed(void *ctx, const char *key, void *value)
{
    struct diff_ctx *dc = ctx;
    if (kmap_has(dc->fresh, key))
        return 0;
    struct ientry *old = cache_del(dc->inf, key);
    (void)value;
    dl_push(dc->dl, (struct deferred){.type = D_DELETE, .old = old});
    return 0;
}

static int diff_added(void *ctx, const char *key, void *value)
{
    struct diff_ctx *dc = ctx;
    struct ientry *e = value;
    struct ientry *old = kmap_get(dc->inf->cache, key);
    if (old && strcmp(old->rv, e->rv) == 0) {
        entry_free(e); /* unchanged: keep the cached tree, no handler call */
        return 0;
    }
    old = cache_put(dc->inf, e);
    bool wanted = old ? dc->inf->h.on_update != NULL : dc->inf->h.on_add != NULL;
    if (old || wanted)
        dl_push(dc->dl, (struct deferred){.type = old ? D_UPDATE : D_ADD, .old = old,
                                          .new_entry = wanted ? e : NULL});
    return 0;
}

static int free_entry_cb(void *ctx, const char *key, void *value)
{
    (void)ctx;
    (void)key;
    entry_free(value);
    return 0;
}

static int do_list(struct informer *inf, struct kclient_err *err)
{
    struct list_ctx lc = {.inf = inf, .fresh = kmap_new()};
    struct kclient_list_opts lo = {
        .label_selector = inf->label,
        .field_selector = inf->field,
        .limit = inf->o.page_size,
    };
    char *rv = NULL;
    struct dlist dl = {0};
    int r = kclient_list_each(inf->kc, &(struct kgvr){inf->group, inf->version, inf->resource},
                              inf->ns, &lo, on_list_item, &lc, &rv, err);
    stat_add(inf, &inf->stats.lists, 1);
    if (r) {
        kmap_each(lc.fresh, free_entry_cb, NULL);
        kmap_free(lc.fresh);
        goto out;
    }
    pthread_rwlock_wrlock(&inf->lock);
    struct diff_ctx dc = {.inf = inf, .fresh = lc.fresh, .dl = &dl};
    kmap_each(inf->cache, diff_removed, &dc);
    kmap_each(lc.fresh, diff_added, &dc);
    set_rv(inf, rv);
    pthread_rwlock_unlock(&inf->lock);
    kmap_free(lc.fresh);
    lc.fresh = NULL;
    dl_run(inf, &dl);
out:
    free(rv);
    return r;
}

struct watch_ctx {
    struct informer *inf;
    unsigned long events;
};

static int on_event(void *ctx, enum kwatch_type type, cJSON *obj)
{
    struct watch_ctx *wc = ctx;
    struct informer *inf = wc->inf;
    struct dlist dl = {0};
    wc->events++;
    stat_add(inf, &inf->stats.events, 1);
    if (type == KWATCH_BOOKMARK) {
        stat_add(inf, &inf->stats.bookmarks, 1);
        pthread_rwlock_wrlock(&inf->lock);
        set_rv(inf, obj_rv(obj));
        pthread_rwlock_unlock(&inf->lock);
        cJSON_Delete(obj);
        return 0;
    }
    char *rv = xstrdup(obj_rv(obj));
    pthread_rwlock_wrlock(&inf->lock);
    if (type == KWATCH_DELETED) {
        char *key = informer_key(obj);
        struct ientry *old = key ? cache_del(inf, key) : NULL;
        free(key);
        if (old)
            dl_push(&dl, (struct deferred){.type = D_DELETE, .old = old, .del_obj = obj});
        else
            cJSON_Delete(obj);
    } else {
        struct ientry *e = entry_new(inf, obj);
        struct ientry *cur = e ? kmap_get(inf->cache, e->key) : NULL;
        if (!e || (cur && strcmp(cur->rv, e->rv) == 0)) {
            entry_free(e); /* already seen (e.g. replayed after a relist) */
            cJSON_Delete(obj);
        } else {
            struct ientry *old = cache_put(inf, e);
            dl_push(&dl, (struct deferred){.type = old ? D_UPDATE : D_ADD, .old = old,
                                           .new_obj = obj});
        }
    }
    set_rv(inf, rv);
    pthread_rwlock_unlock(&inf->lock);
    free(rv);
    dl_run(inf, &dl);
    return 0;
}

static void *run(void *arg)
{
    struct informer *inf = arg;
    struct kgvr gvr = {inf->group, inf->version, inf->resource};
    long delay = inf->o.backoff_ms;
    bool first = true;
    while (!atomic_load(&inf->stop)) {
        struct kclient_err err = {0};
        if (!first)
            stat_add(inf, &inf->stats.relists, 1);
        int r = do_list(inf, &err);
        if (r) {
            if (atomic_load(&inf->stop))
                break;
            stat_add(inf, &inf->stats.errors, 1);
            if (nap(inf, delay))
                break;
            delay = delay * 2 > inf->o.max_backoff_ms ? inf->o.max_backoff_ms : delay * 2;
            continue;
        }
        first = false;
        pthread_mutex_lock(&inf->mu);
        inf->synced = true;
        pthread_cond_broadcast(&inf->cond);
        pthread_mutex_unlock(&inf->mu);
        /* watch until the stream fails */
        for (;;) {
            if (atomic_load(&inf->stop))
                goto done;
            char *rv = informer_resource_version(inf);
            long to = inf->o.watch_timeout_s;
            if (to <= 0)
                to = 300 + (long)(rand_r(&inf->seed) % 300);
            struct kclient_list_opts wo = {
                .label_selector = inf->label,
                .field_selector = inf->field,
                .resource_version = rv,
                .allow_bookmarks = true,
                .timeout_seconds = to,
            };
            struct watch_ctx wc = {.inf = inf};
            stat_add(inf, &inf->stats.watches, 1);
            r = kclient_watch(inf->kc, &gvr, inf->ns, &wo, on_event, &wc, &err);
            free(rv);
            if (wc.events)
                delay = inf->o.backoff_ms; /* the stream worked */
            if (r == 0) {
                /* closed by the server: resume from the tracked version (after a
                 * pause if it closed at once, so a misbehaving server is not
                 * hammered) */
                if (wc.events == 0 && nap(inf, inf->o.backoff_ms))
                    goto done;
                continue;
            }
            if (atomic_load(&inf->stop))
                goto done;
            stat_add(inf, &inf->stats.errors, 1);
            if (r != TERN_ECOMPACTED || wc.events == 0) {
                if (nap(inf, delay))
                    goto done;
                delay = delay * 2 > inf->o.max_backoff_ms ? inf->o.max_backoff_ms : delay * 2;
            }
            break; /* relist */
        }
    }
done:
    return NULL;
}

struct informer *informer_new(struct kubeconfig *cfg, const struct informer_opts *opts,
                              const struct informer_handlers *h)
{
    struct informer *inf = xcalloc(1, sizeof *inf);
    inf->cfg = cfg;
    inf->o = *opts;
    inf->group = xstrdup(opts->gvr.group ? opts->gvr.group : "");
    inf->version = xstrdup(opts->gvr.version);
    inf->resource = xstrdup(opts->gvr.resource);
    inf->ns = opts->namespace && opts->namespace[0] ? xstrdup(opts->namespace) : NULL;
    inf->label = opts->label_selector ? xstrdup(opts->label_selector) : NULL;
    inf->field = opts->field_selector ? xstrdup(opts->field_selector) : NULL;
    inf->o.namespace = inf->o.label_selector = inf->o.field_selector = NULL;
    inf->o.gvr = (struct kgvr){0};
    if (inf->o.page_size <= 0)
        inf->o.page_size = 100;
    if (inf->o.backoff_ms <= 0)
        inf->o.backoff_ms = 800;
    if (inf->o.max_backoff_ms <= 0)
        inf->o.max_backoff_ms = 30000;
    if (h)
        inf->h = *h;
    inf->kc = kclient_new(cfg, &inf->o.client);
    kclient_set_cancel(inf->kc, &inf->stop);
    pthread_rwlock_init(&inf->lock, NULL);
    inf->cache = kmap_new();
    inf->owners = kmap_new();
    inf->rv = xstrdup("");
    pthread_mutex_init(&inf->mu, NULL);
    ktime_cond_init(&inf->cond);
    atomic_init(&inf->stop, false);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    inf->seed = (unsigned)(ts.tv_nsec ^ (uintptr_t)inf);
    return inf;
}

int informer_start(struct informer *inf)
{
    if (inf->running)
        return -EALREADY;
    atomic_store(&inf->stop, false);
    int r = pthread_create(&inf->thread, NULL, run, inf);
    if (r)
        return -r;
    inf->running = true;
    return 0;
}

void informer_cancel(struct informer *inf)
{
    if (!inf || !inf->running)
        return;
    pthread_mutex_lock(&inf->mu);
    atomic_store(&inf->stop, true);
    pthread_cond_broadcast(&inf->cond);
    pthread_mutex_unlock(&inf->mu);
}

void informer_stop(struct informer *inf)
{
    if (!inf->running)
        return;
    informer_cancel(inf);
    pthread_join(inf->thread, NULL);
    inf->running = false;
}

static int free_oset_cb(void *ctx, const char *key, void *value)
{
    (void)ctx;
    (void)key;
    struct oset *s = value;
    free(s->v);
    free(s);
    return 0;
}

void informer_free(struct informer *inf)
{
    if (!inf)
        return;
    informer_stop(inf);
    kmap_each(inf->cache, free_entry_cb, NULL);
    kmap_free(inf->cache);
    kmap_each(inf->owners, free_oset_cb, NULL);
    kmap_free(inf->owners);
    kclient_free(inf->kc);
    pthread_rwlock_destroy(&inf->lock);
    pthread_mutex_destroy(&inf->mu);
    pthread_cond_destroy(&inf->cond);
    free(inf->rv);
    free(inf->group);
    free(inf->version);
    free(inf->resource);
    free(inf->ns);
    free(inf->label);
    free(inf->field);
    free(inf);
}

bool informer_has_synced(struct informer *inf)
{
    pthread_mutex_lock(&inf->mu);
    bool s = inf->synced;
    pthread_mutex_unlock(&inf->mu);
    return s;
}

int informer_wait_synced(struct informer *inf, long timeout_ms)
{
    struct timespec ts;
    ktime_deadline(timeout_ms, &ts);
    pthread_mutex_lock(&inf->mu);
    while (!inf->synced) {
        if (pthread_cond_timedwait(&inf->cond, &inf->mu, &ts) == ETIMEDOUT)
            break;
    }
    bool s = inf->synced;
    pthread_mutex_unlock(&inf->mu);
    return s ? 0 : TERN_ETIMEOUT;
}

cJSON *informer_get(struct informer *inf, const char *ns, const char *name)
{
    char *key = ns && ns[0] ? xasprintf("%s/%s", ns, name) : xstrdup(name);
    pthread_rwlock_rdlock(&inf->lock);
    struct ientry *e = kmap_get(inf->cache, key);
    cJSON *copy = e ? entry_tree(e) : NULL;
    pthread_rwlock_unlock(&inf->lock);
    free(key);
    return copy;
}

size_t informer_cache_bytes(struct informer *inf)
{
    pthread_rwlock_rdlock(&inf->lock);
    size_t n = inf->bytes;
    pthread_rwlock_unlock(&inf->lock);
    return n;
}

size_t informer_len(struct informer *inf)
{
    pthread_rwlock_rdlock(&inf->lock);
    size_t n = kmap_len(inf->cache);
    pthread_rwlock_unlock(&inf->lock);
    return n;
}

struct each_ctx {
    int (*fn)(void *ctx, const cJSON *obj);
    void *ctx;
    const char *needle; /* only entries whose text holds it, or NULL */
};

static int each_cb(void *ctx, const char *key, void *value)
{
    struct each_ctx *ec = ctx;
    (void)key;
    if (ec->needle) {
        size_t n;
        char *text = entry_text(value, &n);
        bool has = strstr(text, ec->needle) != NULL;
        free(text);
        if (!has)
            return 0;
    }
    cJSON *o = entry_tree(value);
    int r = ec->fn(ec->ctx, o);
    cJSON_Delete(o);
    return r;
}

int informer_each(struct informer *inf, int (*fn)(void *ctx, const cJSON *obj), void *ctx)
{
    struct each_ctx ec = {fn, ctx, NULL};
    pthread_rwlock_rdlock(&inf->lock);
    int r = kmap_each(inf->cache, each_cb, &ec);
    pthread_rwlock_unlock(&inf->lock);
    return r;
}

int informer_each_containing(struct informer *inf, const char *needle,
                             int (*fn)(void *ctx, const cJSON *obj), void *ctx)
{
    struct each_ctx ec = {fn, ctx, needle};
    pthread_rwlock_rdlock(&inf->lock);
    int r = kmap_each(inf->cache, each_cb, &ec);
    pthread_rwlock_unlock(&inf->lock);
    return r;
}

int informer_each_owned(struct informer *inf, const char *owner_uid,
                        int (*fn)(void *ctx, const cJSON *obj), void *ctx)
{
    int r = 0;
    pthread_rwlock_rdlock(&inf->lock);
    struct oset *s = kmap_get(inf->owners, owner_uid);
    for (size_t i = 0; s && i < s->n && !r; i++)
    {
        cJSON *o = entry_tree(s->v[i]);
        r = fn(ctx, o);
        cJSON_Delete(o);
    }
    pthread_rwlock_unlock(&inf->lock);
    return r;
}

char *informer_resource_version(struct informer *inf)
{
    pthread_rwlock_rdlock(&inf->lock);
    char *rv = xstrdup(inf->rv);
    pthread_rwlock_unlock(&inf->lock);
    return rv;
}

void informer_get_stats(struct informer *inf, struct informer_stats *ret)
{
    pthread_mutex_lock(&inf->mu);
    *ret = inf->stats;
    pthread_mutex_unlock(&inf->mu);
}

static int resync_cb(void *ctx, const char *key, void *value)
{
    struct informer *inf = ctx;
    (void)key;
    cJSON *o = entry_tree(value);
    inf->h.on_update(inf->h.ctx, o, o);
    cJSON_Delete(o);
    return 0;
}

void informer_resync(struct informer *inf)
{
    if (!inf->h.on_update)
        return;
    pthread_rwlock_rdlock(&inf->lock);
    kmap_each(inf->cache, resync_cb, inf);
    pthread_rwlock_unlock(&inf->lock);
}
