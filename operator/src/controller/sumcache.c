/* sumcache.c - journal summaries read ahead (see sumcache.h). */
#include "controller/sumcache.h"

#include "base/mem.h"
#include "kube/kmap.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct entry {
    bool claimed; /* being read: no summary yet */
    struct journal_sum_read sum;
};

struct sumcache {
    pthread_mutex_t mu;
    pthread_cond_t settled; /* a claim ended */
    struct kmap *entries;   /* uid -> struct entry * */
    size_t kept;            /* entries read (not claims) */
    size_t max;
    bool live;         /* the summary watch is running */
    int64_t delivered; /* no change later than this reached sumcache_changed */
};

static void entry_free(struct entry *e)
{
    journal_sum_read_done(&e->sum);
    free(e);
}

static int drop_kept(void *ctx, const char *key, void *value)
{
    struct sumcache *sc = ctx;
    struct entry *e = value;
    if (!e->claimed) {
        kmap_del(sc->entries, key); /* (the current key: allowed) */
        entry_free(e);
    }
    return 0;
}

/* Drops what was read; claims stay (their puts are judged when they come). */
static void drop_all_kept(struct sumcache *sc)
{
    kmap_each(sc->entries, drop_kept, sc);
    sc->kept = 0;
}

static int free_any(void *ctx, const char *key, void *value)
{
    (void)ctx;
    (void)key;
    entry_free(value);
    return 0;
}

struct sumcache *sumcache_new(size_t max)
{
    struct sumcache *sc = xcalloc(1, sizeof *sc);
    pthread_mutex_init(&sc->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sc->settled, &ca);
    pthread_condattr_destroy(&ca);
    sc->entries = kmap_new();
    sc->max = max;
    return sc;
}

void sumcache_free(struct sumcache *sc)
{
    if (!sc)
        return;
    kmap_each(sc->entries, free_any, NULL);
    kmap_free(sc->entries);
    pthread_cond_destroy(&sc->settled);
    pthread_mutex_destroy(&sc->mu);
    free(sc);
}

void sumcache_watch_started(struct sumcache *sc, int64_t rev)
{
    pthread_mutex_lock(&sc->mu);
    drop_all_kept(sc);
    sc->live = true;
    sc->delivered = rev;
    pthread_mutex_unlock(&sc->mu);
}

void sumcache_watch_stopped(struct sumcache *sc)
{
    pthread_mutex_lock(&sc->mu);
    drop_all_kept(sc);
    sc->live = false;
    pthread_mutex_unlock(&sc->mu);
}

void sumcache_changed(struct sumcache *sc, const char *uid, int64_t rev)
{
    pthread_mutex_lock(&sc->mu);
    struct entry *e = kmap_get(sc->entries, uid);
    if (e && !e->claimed) {
        kmap_del(sc->entries, uid);
        sc->kept--;
        entry_free(e);
    }
    /* (a claim's read is judged by this at its put) */
    if (rev > sc->delivered)
        sc->delivered = rev;
    pthread_mutex_unlock(&sc->mu);
}

bool sumcache_claim(struct sumcache *sc, const char *uid)
{
    pthread_mutex_lock(&sc->mu);
    bool claim = sc->live && sc->max > 0 && !kmap_has(sc->entries, uid);
    if (claim) {
        struct entry *e = xcalloc(1, sizeof *e);
        e->claimed = true;
        kmap_put(sc->entries, uid, e);
    }
    pthread_mutex_unlock(&sc->mu);
    return claim;
}

/* Ends uid's claim (if it is one); the caller holds mu. */
static void unclaim(struct sumcache *sc, const char *uid)
{
    struct entry *e = kmap_get(sc->entries, uid);
    if (e && e->claimed) {
        kmap_del(sc->entries, uid);
        entry_free(e);
    }
    pthread_cond_broadcast(&sc->settled);
}

bool sumcache_put(struct sumcache *sc, const char *uid, struct journal_sum_read *r,
                  int64_t read_rev)
{
    pthread_mutex_lock(&sc->mu);
    unclaim(sc, uid);
    bool keep = sc->live && sc->delivered <= read_rev && sc->max > 0;
    if (keep) {
        struct entry *old = kmap_get(sc->entries, uid);
        if (!old && sc->kept >= sc->max)
            drop_all_kept(sc);
        struct entry *e = xcalloc(1, sizeof *e);
        e->sum = *r;
        *r = (struct journal_sum_read){0};
        old = kmap_put(sc->entries, uid, e);
        if (old)
            entry_free(old);
        else
            sc->kept++;
    }
    pthread_mutex_unlock(&sc->mu);
    return keep;
}

void sumcache_release(struct sumcache *sc, const char *uid)
{
    pthread_mutex_lock(&sc->mu);
    unclaim(sc, uid);
    pthread_mutex_unlock(&sc->mu);
}

bool sumcache_take(struct sumcache *sc, const char *uid, struct journal_sum_read *ret,
                   long wait_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&sc->mu);
    struct entry *e;
    while ((e = kmap_get(sc->entries, uid)) && e->claimed) {
        if (pthread_cond_timedwait(&sc->settled, &sc->mu, &until) == ETIMEDOUT)
            break;
    }
    bool got = e && !e->claimed;
    if (got) {
        kmap_del(sc->entries, uid);
        sc->kept--;
        *ret = e->sum;
        free(e);
    }
    pthread_mutex_unlock(&sc->mu);
    return got;
}

size_t sumcache_len(struct sumcache *sc)
{
    pthread_mutex_lock(&sc->mu);
    size_t n = sc->kept;
    pthread_mutex_unlock(&sc->mu);
    return n;
}
