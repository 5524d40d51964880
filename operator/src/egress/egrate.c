/* egrate.c - refusal Event rate limit. See egrate.h. */
#include "egress/egrate.h"

#include "base/limits.h"
#include "base/mem.h"
#include "kube/kmap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct slot {
    int64_t last_ms;     /* time of the last report */
    uint64_t suppressed; /* held back since */
};

struct egrate {
    pthread_mutex_t mu;
    int64_t interval_ms;
    struct kmap *keys; /* key -> struct slot */
    uint64_t total;
};

struct egrate *egrate_new(int64_t interval_ms)
{
    struct egrate *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->interval_ms = interval_ms;
    r->keys = kmap_new();
    return r;
}

static int free_cb(void *ctx, const char *key, void *v)
{
    (void)ctx;
    (void)key;
    free(v);
    return 0;
}

void egrate_free(struct egrate *r)
{
    if (!r)
        return;
    kmap_each(r->keys, free_cb, NULL);
    kmap_free(r->keys);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

struct oldest {
    char *key;
    int64_t ms;
};

static int oldest_cb(void *ctx, const char *key, void *v)
{
    struct oldest *o = ctx;
    struct slot *s = v;
    if (!o->key || s->last_ms < o->ms) {
        free(o->key);
        o->key = xstrdup(key);
        o->ms = s->last_ms;
    }
    return 0;
}

bool egrate_allow(struct egrate *r, const char *key, int64_t now_ms, uint64_t *ret_suppressed)
{
    bool ok = false;
    pthread_mutex_lock(&r->mu);
    struct slot *s = kmap_get(r->keys, key);
    if (!s) {
        if (kmap_len(r->keys) >= TERN_EGRESS_MAX_RATE_KEYS) {
            struct oldest o = {0};
            kmap_each(r->keys, oldest_cb, &o);
            if (o.key)
                free(kmap_del(r->keys, o.key));
            free(o.key);
        }
        s = xcalloc(1, sizeof *s);
        kmap_put(r->keys, key, s);
        s->last_ms = now_ms;
        *ret_suppressed = 0;
        ok = true;
    } else if (now_ms - s->last_ms >= r->interval_ms) {
        *ret_suppressed = s->suppressed;
        s->suppressed = 0;
        s->last_ms = now_ms;
        ok = true;
    } else {
        s->suppressed++;
        r->total++;
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

uint64_t egrate_suppressed_total(struct egrate *r)
{
    pthread_mutex_lock(&r->mu);
    uint64_t t = r->total;
    pthread_mutex_unlock(&r->mu);
    return t;
}
