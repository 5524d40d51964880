/* recorder.c - Event recorder with series aggregation. See recorder.h. */
#include "recorder.h"

#include "base/buf.h"
#include "base/mem.h"
#include "json/json.h"
#include "kube/kmap.h"
#include "kube/ktime.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct kgvr EVENTS = {"events.k8s.io", "v1", "events"};

struct rec {
    struct rec *next;
    char *api_version, *kind, *ns, *name, *uid;
    char *type, *reason, *action, *note;
    struct timespec when;
};

struct series {
    char *key;
    char *event_ns, *event_name; /* the Event object written */
    long count, written;         /* observed / last written */
    long long last_ms, last_write_ms;
    struct timespec last_when;
};

struct recorder {
    struct kubeconfig *cfg;
    struct recorder_opts o;
    char *controller, *instance;
    struct kclient *kc;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;         /* work, stop */
    pthread_cond_t idle;         /* queue drained */
    struct rec *head, *tail;
    size_t qlen;
    bool busy;                   /* the thread is writing */
    bool stop;
    unsigned flush_req;          /* flush-all requests */
    struct kmap *series;         /* key -> struct series (thread only) */
    struct recorder_stats stats;
    unsigned seq;
};

size_t recorder_truncate_utf8(char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max)
        return n;
    n = max;
    /* back off continuation bytes so the cut is at a character start */
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    s[n] = '\0';
    return n;
}

static void rec_free(struct rec *e)
{
    if (!e)
        return;
    free(e->api_version);
    free(e->kind);
    free(e->ns);
    free(e->name);
    free(e->uid);
    free(e->type);
    free(e->reason);
    free(e->action);
    free(e->note);
    free(e);
}

static void series_free(struct series *s)
{
    if (!s)
        return;
    free(s->key);
    free(s->event_ns);
    free(s->event_name);
    free(s);
}

void recorder_ref_of(const cJSON *obj, struct recorder_ref *ref)
{
    const cJSON *md = json_get(obj, "metadata");
    const cJSON *v;
    memset(ref, 0, sizeof *ref);
    v = json_get(obj, "apiVersion");
    ref->api_version = cJSON_IsString(v) ? v->valuestring : "";
    v = json_get(obj, "kind");
    ref->kind = cJSON_IsString(v) ? v->valuestring : "";
    v = json_get(md, "namespace");
    ref->namespace = cJSON_IsString(v) ? v->valuestring : "";
    v = json_get(md, "name");
    ref->name = cJSON_IsString(v) ? v->valuestring : "";
    v = json_get(md, "uid");
    ref->uid = cJSON_IsString(v) ? v->valuestring : "";
}

static bool valid_word(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 128)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == ':' || c == ',' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

int recorder_event(struct recorder *r, const struct recorder_ref *regarding, const char *type,
                   const char *reason, const char *action, const char *fmt, ...)
{
    if (!regarding || !regarding->name || !regarding->name[0] || !regarding->kind ||
        !type || (strcmp(type, "Normal") != 0 && strcmp(type, "Warning") != 0) ||
        !valid_word(reason) || !valid_word(action))
        return -EINVAL;
    struct rec *e = xcalloc(1, sizeof *e);
    e->api_version = xstrdup(regarding->api_version ? regarding->api_version : "");
    e->kind = xstrdup(regarding->kind);
    e->ns = xstrdup(regarding->namespace ? regarding->namespace : "");
    e->name = xstrdup(regarding->name);
    e->uid = xstrdup(regarding->uid ? regarding->uid : "");
    e->type = xstrdup(type);
    e->reason = xstrdup(reason);
    e->action = xstrdup(action);
    struct buf b;
    buf_init(&b, 64u << 10);
    va_list ap;
    va_start(ap, fmt);
    if (buf_vprintf(&b, fmt, ap))
        buf_puts(&b, "(note too long)");
    va_end(ap);
    e->note = buf_steal(&b);
    buf_done(&b);
    recorder_truncate_utf8(e->note, TERN_KUBE_MAX_EVENT_NOTE);
    clock_gettime(CLOCK_REALTIME, &e->when);

    pthread_mutex_lock(&r->mu);
    if (r->qlen >= TERN_KUBE_MAX_EVENT_QUEUE || r->stop) {
        r->stats.dropped++;
        pthread_mutex_unlock(&r->mu);
        rec_free(e);
        return TERN_ETOOLARGE;
    }
    if (r->tail)
        r->tail->next = e;
    else
        r->head = e;
    r->tail = e;
    r->qlen++;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static char *series_key(const struct rec *e)
{
    return xasprintf("%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s", e->ns, e->kind, e->name,
                     e->uid, e->type, e->reason, e->action, e->note);
}

static int create_event(struct recorder *r, const struct rec *e, struct series *s)
{
    char when[32], name[300];
    kclient_microtime(&e->when, when);
    const char *ns = e->ns[0] ? e->ns : "default";
    /* name: <regarding>.<unique hex>, like client-go */
    snprintf(name, sizeof name, "%.200s.%llx%04x", e->name,
             (unsigned long long)e->when.tv_sec * 1000000000ull + (unsigned long long)e->when.tv_nsec,
             (r->seq++) & 0xffff);
    cJSON *ev = cJSON_CreateObject();
    json_add_string(ev, "apiVersion", "events.k8s.io/v1");
    json_add_string(ev, "kind", "Event");
    cJSON *md = cJSON_AddObjectToObject(ev, "metadata");
    json_add_string(md, "name", name);
    json_add_string(md, "namespace", ns);
    json_add_string(ev, "eventTime", when);
    json_add_string(ev, "reportingController", r->controller);
    json_add_string(ev, "reportingInstance", r->instance);
    json_add_string(ev, "action", e->action);
    json_add_string(ev, "reason", e->reason);
    json_add_string(ev, "type", e->type);
    json_add_string(ev, "note", e->note);
    cJSON *reg = cJSON_AddObjectToObject(ev, "regarding");
    if (e->api_version[0])
        json_add_string(reg, "apiVersion", e->api_version);
    json_add_string(reg, "kind", e->kind);
    if (e->ns[0])
        json_add_string(reg, "namespace", e->ns);
    json_add_string(reg, "name", e->name);
    if (e->uid[0])
        json_add_string(reg, "uid", e->uid);
    if (s->count > 1) {
        cJSON *ser = cJSON_AddObjectToObject(ev, "series");
        json_add_int64(ser, "count", s->count);
        char last[32];
        json_add_string(ser, "lastObservedTime", kclient_microtime(&s->last_when, last));
    }
    struct kclient_err err;
    int rc = kclient_create(r->kc, &EVENTS, ns, ev, NULL, &err);
    cJSON_Delete(ev);
    if (rc == 0) {
        free(s->event_ns);
        free(s->event_name);
        s->event_ns = xstrdup(ns);
        s->event_name = xstrdup(name);
        s->written = s->count;
        s->last_write_ms = ktime_mono_ms();
    }
    return rc;
}

static int patch_series(struct recorder *r, struct series *s, const struct rec *e)
{
    char last[32];
    cJSON *p = cJSON_CreateObject();
    cJSON *ser = cJSON_AddObjectToObject(p, "series");
    json_add_int64(ser, "count", s->count);
    json_add_string(ser, "lastObservedTime", kclient_microtime(&s->last_when, last));
    char *body = json_print(p);
    cJSON_Delete(p);
    struct kclient_err err;
    int rc = kclient_patch(r->kc, &EVENTS, s->event_ns, s->event_name, KCLIENT_PATCH_MERGE, body,
                           strlen(body), NULL, NULL, &err);
    free(body);
    if (rc == TERN_ENOTFOUND && e) /* the Event expired: start it again */
        return create_event(r, e, s);
    if (rc == 0) {
        s->written = s->count;
        s->last_write_ms = ktime_mono_ms();
    }
    return rc;
}

struct evict_ctx {
    struct recorder *r;
    long long cutoff;
    struct series *oldest;
};

static int evict_cb(void *ctx, const char *key, void *value)
{
    struct evict_ctx *ec = ctx;
    struct series *s = value;
    if (s->last_ms < ec->cutoff && s->written == s->count) {
        kmap_del(ec->r->series, key);
        series_free(s);
        return 0;
    }
    if (!ec->oldest || s->last_ms < ec->oldest->last_ms)
        ec->oldest = s;
    return 0;
}

static void evict(struct recorder *r)
{
    struct evict_ctx ec = {r, ktime_mono_ms() - r->o.series_window_ms, NULL};
    kmap_each(r->series, evict_cb, &ec);
    while (kmap_len(r->series) >= TERN_KUBE_MAX_EVENT_SERIES) {
        ec.oldest = NULL;
        ec.cutoff = 0;
        kmap_each(r->series, evict_cb, &ec);
        if (!ec.oldest)
            break;
        kmap_del(r->series, ec.oldest->key);
        series_free(ec.oldest);
    }
}

static void stat_inc(struct recorder *r, unsigned long *f)
{
    pthread_mutex_lock(&r->mu);
    (*f)++;
    pthread_mutex_unlock(&r->mu);
}

static void handle(struct recorder *r, struct rec *e)
{
    char *key = series_key(e);
    struct series *s = kmap_get(r->series, key);
    long long now = ktime_mono_ms();
    if (s && now - s->last_ms > r->o.series_window_ms) {
        kmap_del(r->series, key);
        series_free(s);
        s = NULL;
    }
    if (!s) {
        if (kmap_len(r->series) >= TERN_KUBE_MAX_EVENT_SERIES)
            evict(r);
        s = xcalloc(1, sizeof *s);
        s->key = key;
        s->count = 1;
        s->last_ms = now;
        s->last_when = e->when;
        kmap_put(r->series, key, s);
        int rc = create_event(r, e, s);
        stat_inc(r, rc ? &r->stats.failed : &r->stats.created);
        return;
    }
    free(key);
    s->count++;
    s->last_ms = now;
    s->last_when = e->when;
    if (!s->event_name) { /* the first write failed: try to create it now */
        int rc = create_event(r, e, s);
        stat_inc(r, rc ? &r->stats.failed : &r->stats.created);
    } else if (now - s->last_write_ms >= r->o.series_flush_ms) {
        int rc = patch_series(r, s, e);
        stat_inc(r, rc ? &r->stats.failed : &r->stats.patched);
    }
}

struct flush_ctx {
    struct recorder *r;
    bool all;
    long long next_due; /* earliest pending flush, or 0 */
};

static int flush_cb(void *ctx, const char *key, void *value)
{
    struct flush_ctx *fc = ctx;
    struct series *s = value;
    (void)key;
    if (s->written == s->count || !s->event_name)
        return 0;
    long long due = s->last_write_ms + fc->r->o.series_flush_ms;
    if (fc->all || ktime_mono_ms() >= due) {
        int rc = patch_series(fc->r, s, NULL);
        stat_inc(fc->r, rc ? &fc->r->stats.failed : &fc->r->stats.patched);
        if (rc)
            s->written = s->count; /* do not retry forever */
    } else if (!fc->next_due || due < fc->next_due) {
        fc->next_due = due;
    }
    return 0;
}

static void *run(void *arg)
{
    struct recorder *r = arg;
    long long next_due = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->head && !r->stop && !r->flush_req) {
            if (next_due) {
                long long wait = next_due - ktime_mono_ms();
                if (wait <= 0)
                    break;
                struct timespec ts;
                ktime_deadline(wait, &ts);
                pthread_cond_timedwait(&r->cond, &r->mu, &ts);
            } else {
                pthread_cond_wait(&r->cond, &r->mu);
            }
        }
        struct rec *batch = r->head;
        r->head = r->tail = NULL;
        r->qlen = 0;
        bool all = r->stop || r->flush_req;
        unsigned req = r->flush_req;
        bool stop = r->stop;
        r->busy = true;
        pthread_mutex_unlock(&r->mu);
        while (batch) {
            struct rec *n = batch->next;
            handle(r, batch);
            rec_free(batch);
            batch = n;
        }
        struct flush_ctx fc = {r, all, 0};
        kmap_each(r->series, flush_cb, &fc);
        next_due = fc.next_due;
        pthread_mutex_lock(&r->mu);
        r->busy = false;
        if (req && r->flush_req == req)
            r->flush_req = 0;
        if (!r->head)
            pthread_cond_broadcast(&r->idle);
        if (stop && !r->head)
            break;
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

struct recorder *recorder_new(struct kubeconfig *cfg, const struct recorder_opts *opts)
{
    if (!opts->controller || !opts->controller[0] || !opts->instance || !opts->instance[0])
        return NULL;
    struct recorder *r = xcalloc(1, sizeof *r);
    r->cfg = cfg;
    r->o = *opts;
    if (r->o.series_flush_ms <= 0)
        r->o.series_flush_ms = 30000;
    if (r->o.series_window_ms <= 0)
        r->o.series_window_ms = 360000;
    r->controller = xstrdup(opts->controller);
    r->instance = xstrdup(opts->instance);
    r->o.controller = r->o.instance = NULL;
    r->kc = kclient_new(cfg, &r->o.client);
    r->series = kmap_new();
    pthread_mutex_init(&r->mu, NULL);
    ktime_cond_init(&r->cond);
    ktime_cond_init(&r->idle);
    if (pthread_create(&r->thread, NULL, run, r))
        abort();
    return r;
}

static int free_series_cb(void *ctx, const char *key, void *value)
{
    (void)ctx;
    (void)key;
    series_free(value);
    return 0;
}

void recorder_free(struct recorder *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    kmap_each(r->series, free_series_cb, NULL);
    kmap_free(r->series);
    kclient_free(r->kc);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cond);
    pthread_cond_destroy(&r->idle);
    free(r->controller);
    free(r->instance);
    free(r);
}

void recorder_flush(struct recorder *r)
{
    pthread_mutex_lock(&r->mu);
    unsigned req = ++r->flush_req;
    if (req == 0)
        req = r->flush_req = 1;
    pthread_cond_signal(&r->cond);
    while (r->head || r->busy || r->flush_req == req)
        pthread_cond_wait(&r->idle, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

void recorder_get_stats(struct recorder *r, struct recorder_stats *ret)
{
    pthread_mutex_lock(&r->mu);
    *ret = r->stats;
    pthread_mutex_unlock(&r->mu);
}
