/* apiwatch.c - shared etcd watch with a ring of recent events. See
 * apiwatch.h. */
#include "apiwatch.h"

#include "base/mem.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_RING 20000
#define RING_MAX_BYTES (256u << 20) /* values and previous values kept */

struct ring_ev {
    struct apiwatch_event ev;
    uint64_t seq;
};

struct apiwatch_hub {
    struct etcd *etcd;
    char *prefix;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    atomic_bool cancel;
    bool stopped;
    struct ring_ev *ring;
    size_t cap;
    uint64_t first_seq; /* seq of the oldest event kept */
    uint64_t next_seq;  /* seq the next event gets */
    int64_t oldest_rev; /* every event after this revision is in the ring */
    int64_t seen_rev;   /* newest revision seen */
    size_t bytes;       /* value bytes held by the ring */
    int nsubs;
};

struct apiwatch_sub {
    struct apiwatch_hub *h;
    char *prefix;
    size_t prefix_len;
    int64_t after_rev;
    uint64_t pos;       /* next seq to look at */
    int64_t progress;
};

void apiwatch_event_free(struct apiwatch_event *e)
{
    if (!e)
        return;
    free(e->key);
    free(e->value);
    free(e->prev_value);
    free(e);
}

static void ev_clear(struct apiwatch_event *e)
{
    free(e->key);
    free(e->value);
    free(e->prev_value);
    memset(e, 0, sizeof(*e));
}

static struct ring_ev *slot(struct apiwatch_hub *h, uint64_t seq)
{
    return &h->ring[seq % h->cap];
}

static void evict_oldest(struct apiwatch_hub *h)
{
    struct ring_ev *old = slot(h, h->first_seq);
    h->oldest_rev = old->ev.revision;
    h->bytes -= old->ev.value_len + old->ev.prev_len;
    ev_clear(&old->ev);
    h->first_seq++;
}

static void push(struct apiwatch_hub *h, const struct etcd_event *e, int64_t rev)
{
    size_t add = (e->type == ETCD_EVENT_DELETE ? 0 : e->kv.value_len) +
                 (e->has_prev_kv ? e->prev_kv.value_len : 0);
    while (h->next_seq > h->first_seq &&
           (h->next_seq - h->first_seq == h->cap || h->bytes + add > RING_MAX_BYTES))
        evict_oldest(h);
    struct ring_ev *r = slot(h, h->next_seq);
    r->seq = h->next_seq++;
    r->ev.deleted = e->type == ETCD_EVENT_DELETE;
    r->ev.key = xstrdup(e->kv.key);
    r->ev.revision = e->kv.mod_revision ? e->kv.mod_revision : rev;
    if (!r->ev.deleted) {
        r->ev.value = xmemdup(e->kv.value, e->kv.value_len + 1);
        r->ev.value_len = e->kv.value_len;
    }
    if (e->has_prev_kv) {
        r->ev.prev_value = xmemdup(e->prev_kv.value, e->prev_kv.value_len + 1);
        r->ev.prev_len = e->prev_kv.value_len;
    }
    h->bytes += r->ev.value_len + r->ev.prev_len;
}

static int on_batch(void *ctx, const struct etcd_watch_batch *b)
{
    struct apiwatch_hub *h = ctx;
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i < b->nevents; i++)
        push(h, &b->events[i], b->header.revision);
    if (b->header.revision > h->seen_rev)
        h->seen_rev = b->header.revision;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mu);
    return 0;
}

static void *hub_main(void *arg)
{
    struct apiwatch_hub *h = arg;
    while (!atomic_load(&h->cancel)) {
        pthread_mutex_lock(&h->mu);
        int64_t from = h->seen_rev + 1;
        pthread_mutex_unlock(&h->mu);
        struct etcd_watch_req rq = {.keys = {.key = h->prefix, .prefix = true},
                                    .start_revision = from,
                                    .prev_kv = true,
                                    .progress_notify = true,
                                    .give_up_ms = -1};
        int64_t compact = 0;
        int rc = etcd_watch(h->etcd, &rq, on_batch, h, &h->cancel, &compact, NULL);
        if (rc == -ECANCELED || atomic_load(&h->cancel))
            break;
        /* the hub fell behind a compaction (or etcd failed for good): start
         * over from the current revision; every subscriber must relist */
        int64_t now = 0;
        if (etcd_revision(h->etcd, &now, NULL) != 0) {
            struct timespec ts = {0, 200 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        pthread_mutex_lock(&h->mu);
        while (h->first_seq < h->next_seq)
            ev_clear(&slot(h, h->first_seq++)->ev);
        h->bytes = 0;
        h->oldest_rev = now;
        h->seen_rev = now;
        pthread_cond_broadcast(&h->cond);
        pthread_mutex_unlock(&h->mu);
    }
    pthread_mutex_lock(&h->mu);
    h->stopped = true;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int apiwatch_hub_start(struct etcd *etcd, const char *prefix, int64_t from_rev, size_t max_events,
                       struct apiwatch_hub **ret, struct tern_err *err)
{
    struct apiwatch_hub *h = xcalloc(1, sizeof(*h));
    h->etcd = etcd;
    h->prefix = xstrdup(prefix);
    h->cap = max_events ? max_events : DEFAULT_RING;
    h->ring = xcalloc(h->cap, sizeof(*h->ring));
    h->oldest_rev = from_rev;
    h->seen_rev = from_rev;
    atomic_init(&h->cancel, false);
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&h->thread, NULL, hub_main, h);
    if (rc) {
        pthread_cond_destroy(&h->cond);
        pthread_mutex_destroy(&h->mu);
        free(h->ring);
        free(h->prefix);
        free(h);
        return err_set(err, -rc, "pthread_create failed");
    }
    *ret = h;
    return 0;
}

void apiwatch_hub_stop(struct apiwatch_hub *h)
{
    if (!h)
        return;
    atomic_store(&h->cancel, true);
    pthread_join(h->thread, NULL);
    for (uint64_t s = h->first_seq; s < h->next_seq; s++)
        ev_clear(&slot(h, s)->ev);
    free(h->ring);
    free(h->prefix);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

int64_t apiwatch_hub_revision(struct apiwatch_hub *h)
{
    pthread_mutex_lock(&h->mu);
    int64_t r = h->seen_rev;
    pthread_mutex_unlock(&h->mu);
    return r;
}

int64_t apiwatch_hub_oldest(struct apiwatch_hub *h)
{
    pthread_mutex_lock(&h->mu);
    int64_t r = h->oldest_rev;
    pthread_mutex_unlock(&h->mu);
    return r;
}

static void deadline(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

bool apiwatch_hub_wait(struct apiwatch_hub *h, int64_t rev, long timeout_ms)
{
    struct timespec ts;
    deadline(&ts, timeout_ms);
    pthread_mutex_lock(&h->mu);
    while (h->seen_rev < rev && !h->stopped)
        if (pthread_cond_timedwait(&h->cond, &h->mu, &ts) == ETIMEDOUT)
            break;
    bool ok = h->seen_rev >= rev;
    pthread_mutex_unlock(&h->mu);
    return ok;
}

int apiwatch_subscribe(struct apiwatch_hub *h, const char *prefix, int64_t after_rev,
                       struct apiwatch_sub **ret)
{
    pthread_mutex_lock(&h->mu);
    if (after_rev < h->oldest_rev) {
        pthread_mutex_unlock(&h->mu);
        return TERN_ECOMPACTED;
    }
    struct apiwatch_sub *s = xcalloc(1, sizeof(*s));
    s->h = h;
    s->prefix = xstrdup(prefix);
    s->prefix_len = strlen(prefix);
    s->after_rev = after_rev;
    s->progress = after_rev;
    /* the first kept event with a greater revision */
    uint64_t lo = h->first_seq, hi = h->next_seq;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (slot(h, mid)->ev.revision <= after_rev)
            lo = mid + 1;
        else
            hi = mid;
    }
    s->pos = lo;
    h->nsubs++;
    pthread_mutex_unlock(&h->mu);
    *ret = s;
    return 0;
}

void apiwatch_unsubscribe(struct apiwatch_sub *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->h->mu);
    s->h->nsubs--;
    pthread_mutex_unlock(&s->h->mu);
    free(s->prefix);
    free(s);
}

static struct apiwatch_event *copy_ev(const struct apiwatch_event *e)
{
    struct apiwatch_event *c = xcalloc(1, sizeof(*c));
    c->deleted = e->deleted;
    c->key = xstrdup(e->key);
    if (e->value) {
        c->value = xmemdup(e->value, e->value_len + 1);
        c->value_len = e->value_len;
    }
    if (e->prev_value) {
        c->prev_value = xmemdup(e->prev_value, e->prev_len + 1);
        c->prev_len = e->prev_len;
    }
    c->revision = e->revision;
    return c;
}

int apiwatch_next(struct apiwatch_sub *s, long timeout_ms, struct apiwatch_event **ret)
{
    struct apiwatch_hub *h = s->h;
    struct timespec ts;
    deadline(&ts, timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        if (h->stopped) {
            rc = -ECANCELED;
            break;
        }
        if (s->pos < h->first_seq) {
            rc = TERN_ECOMPACTED;
            break;
        }
        bool found = false;
        while (s->pos < h->next_seq) {
            struct ring_ev *r = slot(h, s->pos++);
            if (r->ev.revision <= s->after_rev)
                continue;
            if (strncmp(r->ev.key, s->prefix, s->prefix_len) != 0)
                continue;
            *ret = copy_ev(&r->ev);
            if (r->ev.revision > s->progress)
                s->progress = r->ev.revision;
            found = true;
            break;
        }
        if (found)
            break;
        if (h->seen_rev > s->progress)
            s->progress = h->seen_rev;
        if (pthread_cond_timedwait(&h->cond, &h->mu, &ts) == ETIMEDOUT) {
            rc = -ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

int64_t apiwatch_sub_progress(struct apiwatch_sub *s)
{
    pthread_mutex_lock(&s->h->mu);
    int64_t p = s->progress;
    pthread_mutex_unlock(&s->h->mu);
    return p;
}
