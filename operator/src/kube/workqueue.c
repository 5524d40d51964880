/* workqueue.c - rate-limited work queue. See workqueue.h. */
#include "workqueue.h"

#include "base/err.h"
#include "base/mem.h"
#include "kube/kmap.h"
#include "kube/ktime.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct delayed {
    int64_t due_ms;
    char *key;
};

struct workqueue {
    pthread_mutex_t mu;
    pthread_cond_t cond;      /* items, due delays, shutdown */
    pthread_cond_t idle;      /* processing became empty */
    struct workqueue_opts o;
    /* FIFO of waiting keys (ring) */
    char **ring;
    size_t head, len, cap;
    struct kmap *dirty;       /* key -> NULL: waiting or re-add pending */
    struct kmap *processing;  /* key -> NULL */
    struct kmap *failures;    /* key -> (intptr_t) count */
    struct kmap *pending;     /* key -> (intptr_t) due time of its delayed add */
    struct delayed *heap;     /* min-heap by due_ms; stale entries skipped */
    size_t nheap, capheap;
    double tokens;
    int64_t last_ms;
    bool shutdown;
};

struct workqueue *workqueue_new(const struct workqueue_opts *opts)
{
    struct workqueue *q = xcalloc(1, sizeof *q);
    if (opts)
        q->o = *opts;
    if (q->o.base_delay_ms <= 0)
        q->o.base_delay_ms = 5;
    if (q->o.max_delay_ms <= 0)
        q->o.max_delay_ms = 1000L * 1000;
    if (q->o.qps <= 0)
        q->o.qps = 10;
    if (q->o.burst <= 0)
        q->o.burst = 100;
    q->tokens = q->o.burst;
    q->last_ms = ktime_mono_ms();
    pthread_mutex_init(&q->mu, NULL);
    ktime_cond_init(&q->cond);
    ktime_cond_init(&q->idle);
    q->dirty = kmap_new();
    q->processing = kmap_new();
    q->failures = kmap_new();
    q->pending = kmap_new();
    return q;
}

void workqueue_free(struct workqueue *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->len; i++)
        free(q->ring[(q->head + i) % q->cap]);
    free(q->ring);
    for (size_t i = 0; i < q->nheap; i++)
        free(q->heap[i].key);
    free(q->heap);
    kmap_free(q->dirty);
    kmap_free(q->processing);
    kmap_free(q->failures);
    kmap_free(q->pending);
    pthread_cond_destroy(&q->cond);
    pthread_cond_destroy(&q->idle);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

static void ring_push(struct workqueue *q, const char *key)
{
    if (q->len == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 16;
        char **n = xcalloc(ncap, sizeof *n);
        for (size_t i = 0; i < q->len; i++)
            n[i] = q->ring[(q->head + i) % q->cap];
        free(q->ring);
        q->ring = n;
        q->cap = ncap;
        q->head = 0;
    }
    q->ring[(q->head + q->len) % q->cap] = xstrdup(key);
    q->len++;
}

static char *ring_pop(struct workqueue *q)
{
    char *k = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return k;
}

static size_t tracked(struct workqueue *q)
{
    return kmap_len(q->dirty) + kmap_len(q->processing) + kmap_len(q->pending);
}

/* The add itself, under the lock. */
static int add_locked(struct workqueue *q, const char *key)
{
    if (q->shutdown)
        return -ECANCELED;
    if (kmap_has(q->dirty, key))
        return 0;
    if (tracked(q) >= TERN_KUBE_MAX_QUEUE_ITEMS)
        return TERN_ETOOLARGE;
    kmap_put(q->dirty, key, NULL);
    if (kmap_has(q->processing, key))
        return 0; /* re-queued by workqueue_done */
    ring_push(q, key);
    pthread_cond_signal(&q->cond);
    return 0;
}

int workqueue_add(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    int r = add_locked(q, key);
    pthread_mutex_unlock(&q->mu);
    return r;
}

static void heap_push(struct workqueue *q, int64_t due, const char *key)
{
    if (q->nheap == q->capheap) {
        q->capheap = q->capheap ? q->capheap * 2 : 16;
        q->heap = xreallocarray(q->heap, q->capheap, sizeof *q->heap);
    }
    size_t i = q->nheap++;
    q->heap[i] = (struct delayed){due, xstrdup(key)};
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (q->heap[p].due_ms <= q->heap[i].due_ms)
            break;
        struct delayed t = q->heap[p];
        q->heap[p] = q->heap[i];
        q->heap[i] = t;
        i = p;
    }
}

static struct delayed heap_pop(struct workqueue *q)
{
    struct delayed top = q->heap[0];
    q->heap[0] = q->heap[--q->nheap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < q->nheap && q->heap[l].due_ms < q->heap[m].due_ms)
            m = l;
        if (r < q->nheap && q->heap[r].due_ms < q->heap[m].due_ms)
            m = r;
        if (m == i)
            break;
        struct delayed t = q->heap[m];
        q->heap[m] = q->heap[i];
        q->heap[i] = t;
        i = m;
    }
    return top;
}

static int add_after_locked(struct workqueue *q, const char *key, long delay_ms)
{
    if (q->shutdown)
        return -ECANCELED;
    if (delay_ms <= 0)
        return add_locked(q, key);
    int64_t due = ktime_mono_ms() + delay_ms;
    if (kmap_has(q->pending, key)) {
        int64_t cur = (int64_t)(intptr_t)kmap_get(q->pending, key);
        if (cur <= due)
            return 0; /* an earlier add is already pending */
    } else if (tracked(q) >= TERN_KUBE_MAX_QUEUE_ITEMS) {
        return TERN_ETOOLARGE;
    }
    kmap_put(q->pending, key, (void *)(intptr_t)due);
    heap_push(q, due, key);
    pthread_cond_broadcast(&q->cond); /* a sleeper may need an earlier wake-up */
    return 0;
}

int workqueue_add_after(struct workqueue *q, const char *key, long delay_ms)
{
    pthread_mutex_lock(&q->mu);
    int r = add_after_locked(q, key, delay_ms);
    pthread_mutex_unlock(&q->mu);
    return r;
}

int workqueue_add_rate_limited(struct workqueue *q, const char *key, long *ret_delay_ms)
{
    pthread_mutex_lock(&q->mu);
    intptr_t n = (intptr_t)kmap_get(q->failures, key);
    long d = q->o.base_delay_ms;
    for (intptr_t i = 0; i < n && d < q->o.max_delay_ms; i++)
        d *= 2;
    if (d > q->o.max_delay_ms)
        d = q->o.max_delay_ms;
    if (!q->shutdown && (n > 0 || tracked(q) < TERN_KUBE_MAX_QUEUE_ITEMS))
        kmap_put(q->failures, key, (void *)(n + 1));
    /* token bucket: reserve one token, waiting for it if the bucket is empty */
    int64_t now = ktime_mono_ms();
    q->tokens += (double)(now - q->last_ms) * q->o.qps / 1000.0;
    if (q->tokens > q->o.burst)
        q->tokens = q->o.burst;
    q->last_ms = now;
    q->tokens -= 1;
    long bucket = q->tokens < 0 ? (long)(-q->tokens * 1000.0 / q->o.qps) : 0;
    if (bucket > d)
        d = bucket;
    int r = add_after_locked(q, key, d);
    pthread_mutex_unlock(&q->mu);
    if (r == 0 && ret_delay_ms)
        *ret_delay_ms = d;
    return r;
}

void workqueue_forget(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    kmap_del(q->failures, key);
    pthread_mutex_unlock(&q->mu);
}

int workqueue_requeues(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    int n = (int)(intptr_t)kmap_get(q->failures, key);
    pthread_mutex_unlock(&q->mu);
    return n;
}

/* Moves due delayed adds into the queue; returns ms until the next, or -1. */
static long promote_due(struct workqueue *q)
{
    int64_t now = ktime_mono_ms();
    while (q->nheap) {
        if (q->heap[0].due_ms > now)
            return (long)(q->heap[0].due_ms - now);
        struct delayed d = heap_pop(q);
        /* stale unless it is the key's current pending time */
        if (kmap_has(q->pending, d.key) &&
            (int64_t)(intptr_t)kmap_get(q->pending, d.key) == d.due_ms) {
            kmap_del(q->pending, d.key);
            add_locked(q, d.key);
        }
        free(d.key);
    }
    return -1;
}

int workqueue_get(struct workqueue *q, char **ret)
{
    pthread_mutex_lock(&q->mu);
    for (;;) {
        long wait = q->shutdown ? -1 : promote_due(q);
        if (q->len)
            break;
        if (q->shutdown) {
            pthread_mutex_unlock(&q->mu);
            return -ECANCELED;
        }
        if (wait < 0) {
            pthread_cond_wait(&q->cond, &q->mu);
        } else {
            struct timespec ts;
            ktime_deadline(wait, &ts);
            pthread_cond_timedwait(&q->cond, &q->mu, &ts);
        }
    }
    char *k = ring_pop(q);
    kmap_del(q->dirty, k);
    kmap_put(q->processing, k, NULL);
    pthread_mutex_unlock(&q->mu);
    *ret = k;
    return 0;
}

void workqueue_done(struct workqueue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    kmap_del(q->processing, key);
    if (kmap_has(q->dirty, key)) {
        ring_push(q, key);
        pthread_cond_signal(&q->cond);
    }
    if (kmap_len(q->processing) == 0)
        pthread_cond_broadcast(&q->idle);
    pthread_mutex_unlock(&q->mu);
}

size_t workqueue_len(struct workqueue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

size_t workqueue_peek(struct workqueue *q, char **ret, size_t max)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->len < max ? q->len : max;
    for (size_t i = 0; i < n; i++)
        ret[i] = xstrdup(q->ring[(q->head + i) % q->cap]);
    pthread_mutex_unlock(&q->mu);
    return n;
}

void workqueue_shutdown(struct workqueue *q)
{
    pthread_mutex_lock(&q->mu);
    q->shutdown = true;
    while (q->nheap) {
        struct delayed d = heap_pop(q);
        free(d.key);
    }
    kmap_free(q->pending);
    q->pending = kmap_new();
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->mu);
}

void workqueue_drain(struct workqueue *q)
{
    pthread_mutex_lock(&q->mu);
    while (kmap_len(q->processing) > 0)
        pthread_cond_wait(&q->idle, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

bool workqueue_shutting_down(struct workqueue *q)
{
    pthread_mutex_lock(&q->mu);
    bool s = q->shutdown;
    pthread_mutex_unlock(&q->mu);
    return s;
}
