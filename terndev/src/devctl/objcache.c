/* objcache.c - watch-driven cache of whole resources. See objcache.h. */
#include "objcache.h"

#include "base/mem.h"
#include "base/num.h"
#include "devctl/kobj.h"
#include "kube/kmap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cres {
    char *gvr;
    cJSON *list;         /* {"items": [...]} */
    cJSON *items;        /* borrowed from list */
    struct kmap *by_key; /* "ns/name" -> item in items */
    int64_t floor;       /* listed at this revision: changes up to it are in */
    bool ok;
};

struct objcache {
    const struct objstore *s;
    struct cres *r;
    const char **gvrs; /* borrowed from r[i].gvr, for objstore_changes */
    size_t n;
    int resync_s;
    bool synced;       /* every resource listed once */
    int64_t listed_at; /* time of the last full list */
    int64_t rv;        /* complete up to */
    char rvs[24];
    struct objcache_stats stats;
};

static void res_reset(struct cres *r)
{
    kmap_free(r->by_key);
    cJSON_Delete(r->list);
    r->list = cJSON_CreateObject();
    r->items = cJSON_AddArrayToObject(r->list, "items");
    r->by_key = kmap_new();
    r->floor = 0;
    r->ok = false;
}

struct objcache *objcache_new(const struct objstore *s, const char *const *gvrs, size_t n,
                              int resync_s)
{
    struct objcache *c = xcalloc(1, sizeof *c);
    c->s = s;
    c->n = n;
    c->r = xcalloc(n ? n : 1, sizeof *c->r);
    c->gvrs = xcalloc(n ? n : 1, sizeof *c->gvrs);
    for (size_t i = 0; i < n; i++) {
        c->r[i].gvr = xstrdup(gvrs[i]);
        c->gvrs[i] = c->r[i].gvr;
        res_reset(&c->r[i]);
    }
    c->resync_s = resync_s > 0 ? resync_s : OBJCACHE_RESYNC_S;
    snprintf(c->rvs, sizeof c->rvs, "0");
    return c;
}

void objcache_free(struct objcache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->r[i].gvr);
        kmap_free(c->r[i].by_key);
        cJSON_Delete(c->r[i].list);
    }
    free(c->r);
    free(c->gvrs);
    free(c);
}

/* "ns/name" of an object (cluster-scoped: "/name"); false without a name. */
static bool key_of(const cJSON *o, char *out, size_t len)
{
    const char *ns = kobj_str(o, "metadata.namespace"), *name = kobj_str(o, "metadata.name");
    if (!name)
        return false;
    int w = snprintf(out, len, "%s/%s", ns ? ns : "", name);
    return w > 0 && (size_t)w < len;
}

static int64_t rv_of(const cJSON *o)
{
    const char *s = kobj_str(o, "metadata.resourceVersion");
    int64_t v = 0;
    return s && num_parse_i64(s, &v) == 0 ? v : 0;
}

/* Lists resource r again. Returns 0 or the list's error (r is then empty). */
static int relist_one(struct objcache *c, struct cres *r, struct tern_err *err)
{
    res_reset(r);
    cJSON *l = NULL;
    int rc = objstore_list(c->s, r->gvr, NULL, &l, err);
    if (rc)
        return rc;
    r->floor = rv_of(l);
    cJSON *items = cJSON_DetachItemFromObjectCaseSensitive(l, "items");
    cJSON_Delete(l);
    if (cJSON_IsArray(items)) {
        cJSON_ReplaceItemInObjectCaseSensitive(r->list, "items", items);
        r->items = items;
    } else {
        cJSON_Delete(items);
    }
    char key[512];
    cJSON *it;
    cJSON_ArrayForEach(it, r->items)
    {
        if (key_of(it, key, sizeof key))
            kmap_put(r->by_key, key, it);
    }
    r->ok = true;
    return 0;
}

static void apply(struct objcache *c, struct cres *r, struct objstore_change *ch)
{
    char key[512];
    if (ch->rev <= r->floor || !key_of(ch->obj, key, sizeof key))
        return; /* already in the list it was read with */
    cJSON *old = kmap_get(r->by_key, key);
    if (ch->deleted) {
        if (old) {
            kmap_del(r->by_key, key);
            cJSON_Delete(cJSON_DetachItemViaPointer(r->items, old));
            c->stats.deletions++;
        }
        return;
    }
    if (kobj_deleting(ch->obj) && !(old && kobj_deleting(old)))
        c->stats.deletions++;
    cJSON *nu = ch->obj;
    ch->obj = NULL; /* taken */
    if (old)
        cJSON_ReplaceItemViaPointer(r->items, old, nu);
    else
        cJSON_AddItemToArray(r->items, nu);
    kmap_put(r->by_key, key, nu);
}

static int relist_all(struct objcache *c, int64_t now, struct tern_err *err)
{
    int rc = 0;
    int64_t low = -1;
    for (size_t i = 0; i < c->n; i++) {
        struct tern_err e = {0};
        int r = relist_one(c, &c->r[i], &e);
        if (r && !rc) {
            rc = r;
            if (err)
                *err = e;
        }
        if (r == 0 && (low < 0 || c->r[i].floor < low))
            low = c->r[i].floor;
    }
    /* the changes after the earliest list: each resource skips those its
     * own list already had */
    c->rv = low > 0 ? low : 0;
    num_fmt_i64(c->rv, c->rvs);
    c->synced = true;
    c->listed_at = now;
    c->stats.relists++;
    return rc;
}

int objcache_sync(struct objcache *c, int64_t now, struct tern_err *err)
{
    if (!c->synced || c->rv <= 0 || now - c->listed_at >= c->resync_s || now < c->listed_at)
        return relist_all(c, now, err);
    struct objstore_changes ch = {0};
    int rc = objstore_changes(c->s, c->gvrs, c->n, c->rvs, &ch, NULL);
    int64_t upto = 0;
    if (rc == 0 && num_parse_i64(ch.rv, &upto) != 0)
        rc = TERN_EPARSE;
    if (rc) { /* compacted, or no changes kept, or failed: read it all */
        objstore_changes_done(&ch);
        return relist_all(c, now, err);
    }
    for (size_t i = 0; i < ch.n; i++) {
        if (ch.v[i].which < c->n)
            apply(c, &c->r[ch.v[i].which], &ch.v[i]);
    }
    c->stats.changes += ch.n;
    objstore_changes_done(&ch);
    if (upto > c->rv) {
        c->rv = upto;
        num_fmt_i64(c->rv, c->rvs);
    }
    /* resources the store did not serve: try again */
    rc = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->r[i].ok)
            continue;
        struct tern_err e = {0};
        int r = relist_one(c, &c->r[i], &e);
        if (r && !rc) {
            rc = r;
            if (err)
                *err = e;
        }
    }
    return rc;
}

const cJSON *objcache_list(const struct objcache *c, size_t i)
{
    return i < c->n ? c->r[i].list : NULL;
}

bool objcache_ok(const struct objcache *c, size_t i)
{
    return i < c->n && c->r[i].ok;
}

const char *objcache_rv(const struct objcache *c)
{
    return c->rvs;
}

void objcache_stats(const struct objcache *c, struct objcache_stats *ret)
{
    *ret = c->stats;
}
