/* leader.c - Lease-based leader election. See leader.h. */
#include "leader.h"

#include "base/mem.h"
#include "json/json.h"
#include "kube/ktime.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct kgvr LEASES = {"coordination.k8s.io", "v1", "leases"};

struct leader {
    struct kubeconfig *cfg;
    struct leader_opts o;
    char *ns, *name, *id;
    struct kclient *kc;
    pthread_t thread;
    bool running;
    atomic_bool stop;
    bool release;                /* release on stop */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool leading;
    char *holder;                /* last observed holder */
    /* observed record (under mu only for holder; the rest is thread-local) */
    char *observed_spec;         /* compact JSON of the last spec seen */
    long long observed_ms;       /* monotonic time it was seen */
    long observed_duration_s;
    unsigned seed;
};

static void now_micro(char out[32])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    kclient_microtime(&ts, out);
}

struct leader *leader_new(struct kubeconfig *cfg, const struct leader_opts *opts, int *ret_err)
{
    struct leader_opts o = *opts;
    if (o.lease_ms <= 0)
        o.lease_ms = 15000;
    if (o.renew_deadline_ms <= 0)
        o.renew_deadline_ms = 10000;
    if (o.retry_ms <= 0)
        o.retry_ms = 2000;
    if (!o.namespace || !o.name || !o.name[0] || !o.identity || !o.identity[0] ||
        o.lease_ms <= o.renew_deadline_ms || o.renew_deadline_ms <= o.retry_ms ||
        o.lease_ms < 1000) {
        if (ret_err)
            *ret_err = -EINVAL;
        return NULL;
    }
    struct leader *l = xcalloc(1, sizeof *l);
    l->cfg = cfg;
    l->o = o;
    l->ns = xstrdup(o.namespace);
    l->name = xstrdup(o.name);
    l->id = xstrdup(o.identity);
    l->o.namespace = l->o.name = l->o.identity = NULL;
    l->kc = kclient_new(cfg, &l->o.client);
    kclient_set_cancel(l->kc, &l->stop);
    atomic_init(&l->stop, false);
    pthread_mutex_init(&l->mu, NULL);
    ktime_cond_init(&l->cond);
    l->holder = xstrdup("");
    l->seed = (unsigned)(ktime_mono_ms() ^ (uintptr_t)l);
    return l;
}

static void set_holder(struct leader *l, const char *h)
{
    bool changed;
    pthread_mutex_lock(&l->mu);
    changed = strcmp(l->holder, h) != 0;
    if (changed) {
        free(l->holder);
        l->holder = xstrdup(h);
    }
    pthread_mutex_unlock(&l->mu);
    if (changed && h[0] && l->o.on_new_leader)
        l->o.on_new_leader(l->o.ctx, h);
}

static void set_leading(struct leader *l, bool v)
{
    pthread_mutex_lock(&l->mu);
    bool was = l->leading;
    l->leading = v;
    pthread_mutex_unlock(&l->mu);
    if (v && !was && l->o.on_started)
        l->o.on_started(l->o.ctx);
    if (!v && was && l->o.on_stopped)
        l->o.on_stopped(l->o.ctx);
}

static void observe(struct leader *l, const cJSON *spec)
{
    char *s = spec ? json_print(spec) : xstrdup("{}");
    if (!l->observed_spec || strcmp(s, l->observed_spec) != 0) {
        free(l->observed_spec);
        l->observed_spec = s;
        l->observed_ms = ktime_mono_ms();
        int64_t d = 0;
        json_get_int64(spec, "spec", "leaseDurationSeconds", JSON_OPTIONAL, &d, NULL);
        l->observed_duration_s = d > 0 ? (long)d : (l->o.lease_ms + 999) / 1000;
    } else {
        free(s);
    }
}

static cJSON *new_spec(const char *holder, long duration_s, const char *acquire,
                       int64_t transitions)
{
    char now[32];
    now_micro(now);
    cJSON *spec = cJSON_CreateObject();
    json_add_string(spec, "holderIdentity", holder);
    json_add_int64(spec, "leaseDurationSeconds", duration_s);
    json_add_string(spec, "acquireTime", acquire ? acquire : now);
    json_add_string(spec, "renewTime", now);
    json_add_int64(spec, "leaseTransitions", transitions);
    return spec;
}

/* One attempt to acquire or renew. Returns 0 when we hold the Lease now,
 * 1 when someone else does, or a negative error. */
static int try_acquire_or_renew(struct leader *l)
{
    struct kclient_err err;
    cJSON *lease = NULL;
    long dur = (l->o.lease_ms + 999) / 1000;
    int r = kclient_get(l->kc, &LEASES, l->ns, l->name, &lease, &err);
    if (r == TERN_ENOTFOUND) {
        cJSON *obj = cJSON_CreateObject();
        json_add_string(obj, "apiVersion", "coordination.k8s.io/v1");
        json_add_string(obj, "kind", "Lease");
        cJSON *md = cJSON_AddObjectToObject(obj, "metadata");
        json_add_string(md, "name", l->name);
        json_add_string(md, "namespace", l->ns);
        cJSON *spec = new_spec(l->id, dur, NULL, 0);
        cJSON_AddItemToObject(obj, "spec", spec);
        cJSON *created = NULL;
        r = kclient_create(l->kc, &LEASES, l->ns, obj, &created, &err);
        if (r == 0) {
            observe(l, json_get(created, "spec"));
            set_holder(l, l->id);
        }
        cJSON_Delete(created);
        cJSON_Delete(obj);
        return r == -EEXIST ? 1 : r;
    }
    if (r)
        return r;
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(lease, "spec");
    const char *holder = "";
    const cJSON *h = json_get(spec, "holderIdentity");
    if (cJSON_IsString(h))
        holder = h->valuestring;
    observe(l, spec);
    set_holder(l, holder);
    bool mine = strcmp(holder, l->id) == 0;
    long long valid_until = l->observed_ms + (long long)l->observed_duration_s * 1000;
    if (holder[0] && !mine && valid_until > ktime_mono_ms()) {
        cJSON_Delete(lease);
        return 1;
    }
    int64_t transitions = 0;
    json_get_int64(spec, "spec", "leaseTransitions", JSON_OPTIONAL, &transitions, NULL);
    const cJSON *acq = json_get(spec, "acquireTime");
    cJSON *ns = mine ? new_spec(l->id, dur, cJSON_IsString(acq) ? acq->valuestring : NULL,
                                transitions)
                     : new_spec(l->id, dur, NULL, transitions + 1);
    cJSON_ReplaceItemInObjectCaseSensitive(lease, "spec", ns);
    cJSON *updated = NULL;
    r = kclient_update(l->kc, &LEASES, l->ns, lease, &updated, &err);
    if (r == 0) {
        observe(l, json_get(updated, "spec"));
        set_holder(l, l->id);
    }
    cJSON_Delete(updated);
    cJSON_Delete(lease);
    return r == TERN_ECONFLICT ? 1 : r;
}

static void release(struct leader *l)
{
    struct kclient_err err;
    cJSON *lease = NULL;
    /* the elector's own client is cancelled by now: use a fresh one */
    struct kclient *kc = kclient_new(l->cfg, &l->o.client);
    if (kclient_get(kc, &LEASES, l->ns, l->name, &lease, &err) == 0) {
        const cJSON *h = json_get(json_get(lease, "spec"), "holderIdentity");
        if (cJSON_IsString(h) && strcmp(h->valuestring, l->id) == 0) {
            int64_t transitions = 0;
            json_get_int64(json_get(lease, "spec"), "spec", "leaseTransitions", JSON_OPTIONAL,
                           &transitions, NULL);
            cJSON_ReplaceItemInObjectCaseSensitive(lease, "spec",
                                                   new_spec("", 1, NULL, transitions));
            kclient_update(kc, &LEASES, l->ns, lease, NULL, &err);
        }
    }
    cJSON_Delete(lease);
    kclient_free(kc);
}

static void *run(void *arg)
{
    struct leader *l = arg;
    while (!atomic_load(&l->stop)) {
        /* candidate: retry until we hold the lease */
        while (!atomic_load(&l->stop)) {
            if (try_acquire_or_renew(l) == 0)
                break;
            long j = l->o.retry_ms + (long)(rand_r(&l->seed) % (unsigned)(l->o.retry_ms / 5 + 1));
            if (ktime_sleep_or_stop(&l->mu, &l->cond, &l->stop, j))
                goto done;
        }
        if (atomic_load(&l->stop))
            break;
        set_leading(l, true);
        /* leader: renew every retry period; give up after renew_deadline */
        long long last_ok = ktime_mono_ms();
        while (!atomic_load(&l->stop)) {
            if (ktime_sleep_or_stop(&l->mu, &l->cond, &l->stop, l->o.retry_ms))
                goto done;
            int r = try_acquire_or_renew(l);
            if (r == 0) {
                last_ok = ktime_mono_ms();
                continue;
            }
            if (r == 1 || ktime_mono_ms() - last_ok >= l->o.renew_deadline_ms)
                break; /* someone else holds it, or we could not renew in time */
        }
        set_leading(l, false);
    }
done:
    return NULL;
}

int leader_start(struct leader *l)
{
    if (l->running)
        return -EALREADY;
    atomic_store(&l->stop, false);
    int r = pthread_create(&l->thread, NULL, run, l);
    if (r)
        return -r;
    l->running = true;
    return 0;
}

static void stop(struct leader *l, bool rel)
{
    if (!l->running)
        return;
    pthread_mutex_lock(&l->mu);
    atomic_store(&l->stop, true);
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    l->running = false;
    if (leader_is_leader(l)) {
        if (rel)
            release(l);
        set_leading(l, false);
    }
}

void leader_stop(struct leader *l)
{
    stop(l, true);
}

void leader_abandon(struct leader *l)
{
    stop(l, false);
}

void leader_free(struct leader *l)
{
    if (!l)
        return;
    leader_stop(l);
    kclient_free(l->kc);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cond);
    free(l->observed_spec);
    free(l->holder);
    free(l->ns);
    free(l->name);
    free(l->id);
    free(l);
}

bool leader_is_leader(struct leader *l)
{
    pthread_mutex_lock(&l->mu);
    bool v = l->leading;
    pthread_mutex_unlock(&l->mu);
    return v;
}

char *leader_holder(struct leader *l)
{
    pthread_mutex_lock(&l->mu);
    char *h = xstrdup(l->holder);
    pthread_mutex_unlock(&l->mu);
    return h;
}
