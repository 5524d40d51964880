/* sblive.c - live output of running executions. See sblive.h. */
#include "sblive.h"

#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"
#include "sandbox/sbapi.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ring {
    char *data;   /* bytes [base, base + len) of the stream */
    size_t len;
    uint64_t base;
};

struct sblive_exec {
    struct sblive *owner; /* its mutex guards everything below */
    char *key;
    int refs;             /* under the registry's mutex */
    struct ring s[2];
    bool done;
    char *final;          /* the done line (JSON text) */
    time_t ended;
    struct sblive_exec *next;
};

struct sblive {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* any execution changed */
    struct sblive_exec *head;
};

struct sblive *sblive_new(void)
{
    struct sblive *l = xcalloc(1, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &a);
    pthread_condattr_destroy(&a);
    return l;
}

static void exec_free(struct sblive_exec *e)
{
    free(e->key);
    free(e->s[0].data);
    free(e->s[1].data);
    free(e->final);
    free(e);
}

/* Drops ended executions past their time (or beyond the count); mu held. */
static void sweep(struct sblive *l)
{
    time_t now = time(NULL);
    size_t ended = 0;
    for (struct sblive_exec **pp = &l->head; *pp;) {
        struct sblive_exec *e = *pp;
        bool old = e->done && (now - e->ended > TERN_SANDBOX_LIVE_KEEP_S ||
                               ended >= TERN_SANDBOX_LIVE_MAX);
        if (e->done && !old)
            ended++;
        if (old) {
            *pp = e->next;
            e->next = NULL;
            if (--e->refs == 0)
                exec_free(e);
            continue;
        }
        pp = &e->next;
    }
}

void sblive_free(struct sblive *l)
{
    if (!l)
        return;
    /* no reader or writer is left (sandboxd stopped serving first) */
    while (l->head) {
        struct sblive_exec *e = l->head;
        l->head = e->next;
        exec_free(e);
    }
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

struct sblive_exec *sblive_begin(struct sblive *l, const char *key)
{
    struct sblive_exec *e = xcalloc(1, sizeof *e);
    e->owner = l;
    e->key = xstrdup(key);
    e->refs = 2; /* the registry's and the caller's */
    pthread_mutex_lock(&l->mu);
    sweep(l);
    for (struct sblive_exec **pp = &l->head; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->key, key) == 0) {
            struct sblive_exec *old = *pp;
            *pp = old->next;
            old->next = NULL;
            if (--old->refs == 0)
                exec_free(old);
            break;
        }
    }
    e->next = l->head;
    l->head = e;
    pthread_mutex_unlock(&l->mu);
    return e;
}

static pthread_mutex_t *mutex_of(struct sblive_exec *e)
{
    return &e->owner->mu;
}

void sblive_write(struct sblive_exec *e, int stream, const char *p, size_t n)
{
    if (!e || n == 0 || (stream != 0 && stream != 1))
        return;
    pthread_mutex_lock(mutex_of(e));
    struct ring *r = &e->s[stream];
    size_t cap = TERN_SANDBOX_LIVE_RING;
    if (n >= cap) { /* only the last cap bytes can be kept */
        r->base += r->len + (n - cap);
        p += n - cap;
        n = cap;
        r->len = 0;
    } else if (r->len + n > cap) {
        size_t drop = r->len + n - cap;
        memmove(r->data, r->data + drop, r->len - drop);
        r->len -= drop;
        r->base += drop;
    }
    if (!r->data)
        r->data = xmalloc(cap);
    memcpy(r->data + r->len, p, n);
    r->len += n;
    pthread_cond_broadcast(&e->owner->cv);
    pthread_mutex_unlock(mutex_of(e));
}

void sblive_end(struct sblive_exec *e, const cJSON *final)
{
    if (!e)
        return;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddTrueToObject(d, "done");
    static const char *const keep[] = {"status", "exitCode", "signal", "durationMs"};
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) {
        const cJSON *v = json_get(final, keep[i]);
        if (v)
            cJSON_AddItemToObject(d, keep[i], cJSON_Duplicate(v, 1));
    }
    pthread_mutex_lock(mutex_of(e));
    json_add_int64(d, "stdoutBytes", (int64_t)(e->s[0].base + e->s[0].len));
    json_add_int64(d, "stderrBytes", (int64_t)(e->s[1].base + e->s[1].len));
    e->final = json_print(d);
    e->done = true;
    e->ended = time(NULL);
    pthread_cond_broadcast(&e->owner->cv);
    pthread_mutex_unlock(mutex_of(e));
    cJSON_Delete(d);
}

struct sblive_exec *sblive_find(struct sblive *l, const char *key)
{
    struct sblive_exec *found = NULL;
    pthread_mutex_lock(&l->mu);
    sweep(l);
    for (struct sblive_exec *e = l->head; e; e = e->next)
        if (strcmp(e->key, key) == 0) {
            found = e;
            e->refs++;
            break;
        }
    pthread_mutex_unlock(&l->mu);
    return found;
}

void sblive_put(struct sblive_exec *e)
{
    if (!e)
        return;
    pthread_mutex_t *mu = mutex_of(e);
    pthread_mutex_lock(mu);
    bool last = --e->refs == 0;
    pthread_mutex_unlock(mu);
    if (last)
        exec_free(e);
}

/* How many bytes of p[0..n) end in an incomplete UTF-8 sequence (0..3). */
static size_t utf8_tail(const char *p, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)p[n - back];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

static const char *const names[2] = {"stdout", "stderr"};

/* Lines for one stream (mu held). Returns lines written. */
static size_t read_stream(struct sblive_exec *e, int s, uint64_t *off, size_t *budget,
                          struct buf *out)
{
    struct ring *r = &e->s[s];
    size_t lines = 0;
    uint64_t end = r->base + r->len;
    if (*off < r->base) {
        buf_printf(out, "{\"stream\":\"%s\",\"skipped\":%llu}\n", names[s],
                   (unsigned long long)(r->base - *off));
        *off = r->base;
        lines++;
    }
    if (*off >= end || *budget == 0)
        return lines;
    size_t from = (size_t)(*off - r->base), n = (size_t)(end - *off);
    if (n > *budget)
        n = *budget;
    if (!e->done || from + n < r->len)
        n -= utf8_tail(r->data + from, n); /* the rest of a sequence comes later */
    if (n == 0)
        return lines;
    struct buf txt;
    buf_init(&txt, 4 * n + 16);
    sbapi_utf8_sanitize(r->data + from, n, &txt);
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "stream", names[s]);
    json_add_int64(o, "offset", (int64_t)*off);
    json_add_string(o, "data", buf_str(&txt));
    char *line = json_print(o);
    cJSON_Delete(o);
    buf_done(&txt);
    buf_puts(out, line);
    buf_putc(out, '\n');
    free(line);
    *off += n;
    *budget -= n;
    return lines + 1;
}

size_t sblive_read(struct sblive_exec *e, uint64_t off[2], size_t max_bytes, long wait_ms,
                   struct buf *out, bool *ret_done)
{
    *ret_done = false;
    pthread_mutex_t *mu = mutex_of(e);
    pthread_mutex_lock(mu);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    size_t lines = 0;
    for (;;) {
        size_t budget = max_bytes ? max_bytes : TERN_SANDBOX_LIVE_RING;
        lines += read_stream(e, 0, &off[0], &budget, out);
        lines += read_stream(e, 1, &off[1], &budget, out);
        bool drained = off[0] >= e->s[0].base + e->s[0].len &&
                       off[1] >= e->s[1].base + e->s[1].len;
        if (e->done && drained) {
            buf_puts(out, e->final);
            buf_putc(out, '\n');
            *ret_done = true;
            lines++;
        }
        if (lines || wait_ms <= 0)
            break;
        if (pthread_cond_timedwait(&e->owner->cv, mu, &until) == ETIMEDOUT)
            wait_ms = 0; /* one last look */
    }
    pthread_mutex_unlock(mu);
    return lines;
}
