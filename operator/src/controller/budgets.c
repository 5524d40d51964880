/* budgets.c - the AgentBudget controller and the session reconcile's budget
 * questions. See budgets.h and docs/budgets.md. */
#include "controller/budgets.h"

#include "base/limits.h"
#include "base/mem.h"
#include "base/num.h"
#include "controller/conditions.h"
#include "controller/observe.h"
#include "journal/journal.h"
#include "json/json.h"
#include "kube/kclient.h"
#include "kube/workqueue.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct kgvr budget_gvr = {"tern.dev", "v1alpha1", "agentbudgets"};

#define GC_KEY "-gc"              /* the queue key of the orphan-mirror sweep */
#define REFRESH_S 30              /* a budget's status is refreshed at least this often */
#define GC_EVERY_MS (5 * 60 * 1000)

struct budgets {
    struct budgets_config cfg;
    char *namespace;
    struct informer *inf;
    struct workqueue *q;
    struct kclient *kc;
    pthread_t worker, watcher;
    bool worker_running, watcher_started;
    pthread_mutex_t mu;           /* guards the fields below */
    atomic_bool stop;
    bool worker_stop;
    /* namespaces that have mirrors in etcd (known once listed) */
    bool mirrors_known;
    char **mirror_ns;
    size_t nmirror_ns;
    /* the test clock */
    int64_t clock_offset;
    int64_t clock_read_at;
    /* idle holders giving a slot up to a waiter, until their slot is
     * released (so two holders do not both give one up for one waiter) */
    struct yielder *yielders;
    size_t nyielders;
};

struct yielder {
    char *ns, *budget, *uid;
    int64_t until_ms; /* monotonic: a claim not followed through expires */
};

static void yielder_free(struct yielder *y);

/* ---- small helpers ---------------------------------------------------------- */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *meta_str(const cJSON *obj, const char *key)
{
    const cJSON *v = json_get(json_get(obj, "metadata"), key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *status_str(const cJSON *obj, const char *k1, const char *k2)
{
    const cJSON *v = json_get(json_get(obj, "status"), k1);
    if (k2)
        v = json_get(v, k2);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static char *bounded(const char *v, size_t max)
{
    size_t n = v ? strlen(v) : 0;
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)v[n] & 0xC0) == 0x80)
            n--;
    }
    return xstrndup(v ? v : "", n);
}

int64_t budgets_now(struct budgets *b)
{
    int64_t now = (int64_t)time(NULL);
    if (!b || !b->cfg.clock_file)
        return now;
    pthread_mutex_lock(&b->mu);
    if (now != b->clock_read_at) {
        b->clock_read_at = now;
        int fd = open(b->cfg.clock_file, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            char buf[64];
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '\r'))
                n--;
            int64_t off;
            if (n > 0) {
                buf[n] = 0;
                if (num_parse_range(buf, -3153600000LL, 3153600000LL, &off) == 0)
                    b->clock_offset = off;
            }
        }
    }
    int64_t off = b->clock_offset;
    pthread_mutex_unlock(&b->mu);
    return now + off;
}

void budgets_decorate_job(struct budgets *b, cJSON *job)
{
    if (!b || !b->cfg.clock_file)
        return;
    int64_t off = budgets_now(b) - (int64_t)time(NULL);
    cJSON *spec = (cJSON *)json_get(json_get(json_get(job, "spec"), "template"), "spec");
    cJSON *ctr = cJSON_GetArrayItem((cJSON *)json_get(spec, "containers"), 0);
    cJSON *env = (cJSON *)json_get(ctr, "env");
    if (!cJSON_IsArray(env))
        return;
    char v[24];
    snprintf(v, sizeof v, "%lld", (long long)off);
    cJSON *e = cJSON_CreateObject();
    json_add_string(e, "name", "TERN_TEST_CLOCK_OFFSET_SECONDS");
    json_add_string(e, "value", v);
    cJSON_AddItemToArray(env, e);
}

/* ---- which namespaces have budgets -------------------------------------------- */

static void mirror_ns_note(struct budgets *b, const char *ns)
{
    pthread_mutex_lock(&b->mu);
    bool have = false;
    for (size_t i = 0; i < b->nmirror_ns && !have; i++)
        have = strcmp(b->mirror_ns[i], ns) == 0;
    if (!have) {
        b->mirror_ns = xreallocarray(b->mirror_ns, b->nmirror_ns + 1, sizeof *b->mirror_ns);
        b->mirror_ns[b->nmirror_ns++] = xstrdup(ns);
    }
    pthread_mutex_unlock(&b->mu);
}

static int load_mirror_ns(struct budgets *b, struct tern_err *err)
{
    char **names = NULL;
    size_t n = 0;
    int rc = bstore_list_mirrors(b->cfg.etcd, &names, &n, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        char *slash = strchr(names[i], '/');
        if (slash) {
            *slash = 0;
            mirror_ns_note(b, names[i]);
        }
        free(names[i]);
    }
    free(names);
    pthread_mutex_lock(&b->mu);
    b->mirrors_known = true;
    pthread_mutex_unlock(&b->mu);
    return 0;
}

struct ns_scan {
    const char *ns;
    bool found;
};

static int find_ns(void *ctx, const cJSON *obj)
{
    struct ns_scan *s = ctx;
    if (streq(meta_str(obj, "namespace"), s->ns)) {
        s->found = true;
        return 1;
    }
    return 0;
}

/* Whether the namespace may have budgets (then etcd is asked). */
static bool maybe(struct budgets *b, const char *ns)
{
    pthread_mutex_lock(&b->mu);
    bool yes = !b->mirrors_known;
    for (size_t i = 0; i < b->nmirror_ns && !yes; i++)
        yes = strcmp(b->mirror_ns[i], ns) == 0;
    pthread_mutex_unlock(&b->mu);
    if (!yes) {
        struct ns_scan s = {ns, false};
        informer_each(b->inf, find_ns, &s);
        yes = s.found;
    }
    return yes;
}

/* ---- the sessions of a namespace ---------------------------------------------- */

/* Waiting for a slot or a start: new (no status, Pending) or Queued on a
 * concurrency cap or on sessionsStarted. */
static bool waiting(const cJSON *s)
{
    const char *phase = status_str(s, "phase", NULL);
    if (!phase || !*phase || strcmp(phase, "Pending") == 0)
        return true;
    const char *why = status_str(s, "queue", "reason");
    return strcmp(phase, "Queued") == 0 &&
           (streq(why, "ConcurrentSessions") || streq(why, "SessionsStarted"));
}

struct wake_scan {
    struct budgets *b;
    const char *ns;
    bool all; /* every session, not only those that wait */
};

static int wake_one(void *ctx, const cJSON *obj)
{
    struct wake_scan *w = ctx;
    const char *ns = meta_str(obj, "namespace"), *name = meta_str(obj, "name");
    const char *phase = status_str(obj, "phase", NULL);
    if (!streq(ns, w->ns) || !name)
        return 0;
    if (w->all || !phase || !*phase || strcmp(phase, "Queued") == 0 ||
        strcmp(phase, "Pending") == 0) {
        char *key = xasprintf("%s/%s", ns, name);
        w->b->cfg.enqueue(w->b->cfg.ctx, key);
        free(key);
    }
    return 0;
}

/* Reconciles every session of ns that waits for a budget (all: every
 * session of ns, so idle holders see that someone waits). */
static void wake_some(struct budgets *b, const char *ns, bool all)
{
    if (!b->cfg.enqueue || !b->cfg.sessions)
        return;
    struct wake_scan w = {b, ns, all};
    informer_each(b->cfg.sessions, wake_one, &w);
}

static void wake(struct budgets *b, const char *ns)
{
    wake_some(b, ns, false);
}

struct waiter_scan {
    const struct bspec *spec;
    const char *ns;
    const char *skip_uid; /* not this one */
    struct ledger_waiter *w;
    size_t n;
    char **owned; /* uid and name copies, 2 per waiter */
};

static int collect_waiter(void *ctx, const cJSON *obj)
{
    struct waiter_scan *s = ctx;
    if (!streq(meta_str(obj, "namespace"), s->ns) || !meta_str(obj, "uid") ||
        !meta_str(obj, "name") || !waiting(obj) ||
        json_get(json_get(obj, "metadata"), "deletionTimestamp") ||
        !bspec_matches(s->spec, json_get(json_get(obj, "metadata"), "labels")))
        return 0;
    if (s->n >= 100000 || streq(meta_str(obj, "uid"), s->skip_uid))
        return s->n >= 100000;
    s->w = xreallocarray(s->w, s->n + 1, sizeof *s->w);
    s->owned = xreallocarray(s->owned, 2 * (s->n + 1), sizeof *s->owned);
    s->owned[2 * s->n] = xstrdup(meta_str(obj, "uid"));
    s->owned[2 * s->n + 1] = xstrdup(meta_str(obj, "name"));
    s->w[s->n] = (struct ledger_waiter){s->owned[2 * s->n], s->owned[2 * s->n + 1],
                                        observe_time(meta_str(obj, "creationTimestamp"))};
    s->n++;
    return 0;
}

struct uid_scan {
    const char *ns;
    char **uids;
    size_t n;
};

static int collect_uid(void *ctx, const cJSON *obj)
{
    struct uid_scan *s = ctx;
    const char *uid = meta_str(obj, "uid");
    if (!streq(meta_str(obj, "namespace"), s->ns) || !uid)
        return 0;
    s->uids = xreallocarray(s->uids, s->n + 1, sizeof *s->uids);
    s->uids[s->n++] = xstrdup(uid);
    return 0;
}

static bool uid_known(void *ctx, const char *uid)
{
    struct uid_scan *s = ctx;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->uids[i], uid) == 0)
            return true;
    return false;
}

/* ---- the AgentBudget controller ----------------------------------------------- */

static void on_add(void *ctx, const cJSON *obj)
{
    struct budgets *b = ctx;
    char *key = informer_key(obj);
    if (key)
        workqueue_add(b->q, key);
    free(key);
}

static void on_update(void *ctx, const cJSON *old_obj, const cJSON *new_obj)
{
    (void)old_obj;
    on_add(ctx, new_obj);
}

static void on_delete(void *ctx, const cJSON *obj)
{
    on_add(ctx, obj);
}

/* /tern/v1/b/<ns>/<name>/... -> the budget's key, a second later (a burst
 * of settles is one status write) */
static int on_counters(void *ctx, const struct etcd_watch_batch *batch)
{
    struct budgets *b = ctx;
    static const char prefix[] = "/tern/v1/b/";
    for (size_t i = 0; i < batch->nevents; i++) {
        const char *k = batch->events[i].kv.key;
        if (strncmp(k, prefix, sizeof prefix - 1) != 0)
            continue;
        const char *ns = k + sizeof prefix - 1, *s1 = strchr(ns, '/');
        const char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
        if (!s1 || !s2 || s2 - ns > 200)
            continue;
        char *key = xstrndup(ns, (size_t)(s2 - ns));
        workqueue_add_after(b->q, key, 1000);
        free(key);
    }
    return atomic_load(&b->stop) ? -ECANCELED : 0;
}

static void *watch_main(void *arg)
{
    struct budgets *b = arg;
    while (!atomic_load(&b->stop)) {
        /* start_revision 0: the watch pins "now" by a read within
         * /tern/v1/b/ (the operator's etcd role on the locked journal may
         * not read the whole key space, so etcd_revision is refused) */
        struct etcd_watch_req req = {.keys = {.key = "/tern/v1/b/", .prefix = true},
                                     .give_up_ms = -1};
        if (etcd_watch(b->cfg.etcd, &req, on_counters, b, &b->stop, NULL, NULL) == -ECANCELED)
            break;
        for (int i = 0; i < 20 && !atomic_load(&b->stop); i++) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

static void set_gauges(struct budgets *b, const struct bstore_budget *bb,
                       const struct bstore_usage *u, int64_t queued)
{
    struct metrics *m = b->cfg.metrics;
    if (!m)
        return;
    const char *ns = bb->spec.ns, *name = bb->spec.name;
    int64_t used[BSPEC_NDIMS] = {(int64_t)u->slots.n, u->win.started, u->win.tokens, u->win.cost};
    for (int d = 0; d < BSPEC_NDIMS; d++) {
        char *l = metrics_labels("namespace", ns, "budget", name, "dimension",
                                 bspec_dim_name((enum bspec_dim)d), NULL);
        metrics_set(m, "tern_budget_used", l, (double)used[d]);
        metrics_set(m, "tern_budget_limit", l,
                    bspec_limited(&bb->spec, (enum bspec_dim)d) ? (double)bb->spec.limit[d] : -1);
        if (d == BSPEC_TOKENS || d == BSPEC_COST)
            metrics_set(m, "tern_budget_reserved", l,
                        (double)(d == BSPEC_TOKENS ? u->win.res_tokens : u->win.res_cost));
        free(l);
    }
    char *l = metrics_labels("namespace", ns, "budget", name, NULL);
    metrics_set(m, "tern_budget_refused", l, (double)u->win.refused);
    metrics_set(m, "tern_budget_queued", l, (double)queued);
    free(l);
}

struct queued_scan {
    const char *ns, *name;
    int64_t n;
};

static int count_queued(void *ctx, const cJSON *obj)
{
    struct queued_scan *q = ctx;
    if (streq(meta_str(obj, "namespace"), q->ns) && streq(status_str(obj, "phase", NULL), "Queued") &&
        streq(status_str(obj, "queue", "budget"), q->name))
        q->n++;
    return 0;
}

static cJSON *budget_status(const cJSON *obj, const struct bstore_budget *bb,
                            const struct tzwin_zone *z, const struct bstore_usage *u,
                            int64_t queued, int64_t now)
{
    cJSON *st = cJSON_CreateObject();
    const cJSON *old = json_get(json_get(obj, "status"), "conditions");
    cJSON_AddItemToObject(st, "conditions", cJSON_IsArray(old) ? json_dup(old) : cJSON_CreateArray());
    json_add_int64(st, "observedGeneration", bb->spec.generation);
    char t[TZWIN_TIME_MAX];
    cJSON *w = cJSON_AddObjectToObject(st, "window");
    json_add_string(w, "period", tzwin_period_name(bb->spec.period));
    json_add_string(w, "timeZone", bb->spec.time_zone);
    json_add_string(w, "key", bb->win.key);
    json_add_string(w, "start", tzwin_format(z, bb->win.start, t));
    json_add_string(w, "end", tzwin_format(z, bb->win.end, t));
    int64_t used[BSPEC_NDIMS] = {(int64_t)u->slots.n, u->win.started, u->win.tokens, u->win.cost};
    cJSON *uo = cJSON_AddObjectToObject(st, "used");
    cJSON *disp = cJSON_AddObjectToObject(st, "display");
    bool exhausted = false;
    char why[256] = "";
    for (int d = 0; d < BSPEC_NDIMS; d++) {
        /* a dimension without a limit is not counted: "-" */
        bool lim = bspec_limited(&bb->spec, (enum bspec_dim)d);
        char a[40], l[40], shown[96];
        bspec_format((enum bspec_dim)d, used[d], a);
        bspec_format((enum bspec_dim)d, bb->spec.limit[d], l);
        if (lim) {
            json_add_int64(uo, bspec_dim_name((enum bspec_dim)d), used[d]);
            snprintf(shown, sizeof shown, "%s/%s", a, l);
        } else {
            snprintf(shown, sizeof shown, "-");
        }
        json_add_string(disp, d == BSPEC_COST ? "cost" : bspec_dim_name((enum bspec_dim)d), shown);
        int64_t total = used[d] + (d == BSPEC_TOKENS ? u->win.res_tokens
                                   : d == BSPEC_COST ? u->win.res_cost : 0);
        if (bspec_limited(&bb->spec, (enum bspec_dim)d) && total >= bb->spec.limit[d] && !exhausted) {
            exhausted = true;
            snprintf(why, sizeof why, "%s: %s of %s in window %s", bspec_dim_name((enum bspec_dim)d),
                     a, l, bb->win.key);
        }
    }
    cJSON *r = cJSON_AddObjectToObject(st, "reserved");
    json_add_int64(r, "tokens", u->win.res_tokens);
    json_add_int64(r, "costMicroUSD", u->win.res_cost);
    json_add_int64(st, "calls", u->win.calls);
    json_add_int64(st, "refused", u->win.refused);
    json_add_int64(st, "queued", queued);
    char now_s[32];
    conditions_time(now, now_s);
    cJSON *conds = cJSON_GetObjectItemCaseSensitive(st, "conditions");
    conditions_set(conds, "Ready", COND_TRUE, "Enforced",
                   "mirrored for the runners; the counters are in the journal's etcd",
                   bb->spec.generation, now_s);
    conditions_set(conds, "Exhausted", exhausted ? COND_TRUE : COND_FALSE,
                   exhausted ? "LimitUsed" : "WithinLimits", why, bb->spec.generation, now_s);
    return st;
}

static cJSON *invalid_status(const cJSON *obj, int64_t gen, const char *reason, const char *msg,
                             int64_t now)
{
    cJSON *st = cJSON_CreateObject();
    const cJSON *old = json_get(json_get(obj, "status"), "conditions");
    cJSON_AddItemToObject(st, "conditions", cJSON_IsArray(old) ? json_dup(old) : cJSON_CreateArray());
    json_add_int64(st, "observedGeneration", gen);
    char now_s[32];
    conditions_time(now, now_s);
    char *m = bounded(msg, 4000);
    char *full = xasprintf("%s; this budget is not enforced until that is fixed", m);
    conditions_set(cJSON_GetObjectItemCaseSensitive(st, "conditions"), "Ready", COND_FALSE, reason,
                   full, gen, now_s);
    free(full);
    free(m);
    return st;
}

static int write_status(struct budgets *b, const cJSON *obj, cJSON *st, struct tern_err *err)
{
    const cJSON *old = json_get(obj, "status");
    int rc = 0;
    if (!old || !json_equal(old, st)) {
        cJSON *o = json_dup(obj);
        if (json_get(o, "status"))
            cJSON_ReplaceItemInObjectCaseSensitive(o, "status", st);
        else
            cJSON_AddItemToObject(o, "status", st);
        st = NULL;
        struct kclient_err ke = {0};
        rc = kclient_update_status(b->kc, &budget_gvr, meta_str(obj, "namespace"), o, NULL, &ke);
        if (rc)
            err_set(err, rc, "update status of agentbudget %s/%s: %s", meta_str(obj, "namespace"),
                    meta_str(obj, "name"), ke.e.msg);
        cJSON_Delete(o);
    }
    cJSON_Delete(st);
    return rc;
}

/* One budget: returns seconds until it wants another look. */
static int reconcile_budget(struct budgets *b, const char *key, int64_t *ret_requeue,
                            struct tern_err *err)
{
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = xstrndup(key, (size_t)(slash - key));
    const char *name = slash + 1;
    cJSON *obj = informer_get(b->inf, ns, name);
    struct bstore_budget bb = {0};
    struct bstore_usage u = {0};
    struct tzwin_zone z = {0};
    bool have_zone = false;
    int64_t now = budgets_now(b);
    int rc = 0;
    *ret_requeue = 0;
    if (!obj) {
        /* deleted: nothing of it stays behind */
        rc = bstore_delete_budget(b->cfg.etcd, ns, name, err);
        wake(b, ns);
        goto out;
    }
    struct tern_err verr = {0};
    int64_t gen = 0;
    json_get_int64(json_get(obj, "metadata"), "metadata", "generation", JSON_OPTIONAL, &gen, NULL);
    if (bspec_parse(obj, &bb.spec, &verr) != 0) {
        char *k = bstore_key_spec(ns, name);
        struct etcd_delete_req d = {.keys = {.key = k}};
        struct etcd_delete_resp dr = {0};
        rc = etcd_delete(b->cfg.etcd, &d, &dr, err);
        etcd_delete_resp_done(&dr);
        free(k);
        if (rc == 0)
            rc = write_status(b, obj, invalid_status(obj, gen, "InvalidSpec", verr.msg, now), err);
        wake(b, ns);
        goto out;
    }
    if (tzwin_load(NULL, bb.spec.time_zone, &z, &verr) != 0) {
        char *k = bstore_key_spec(ns, name);
        struct etcd_delete_req d = {.keys = {.key = k}};
        struct etcd_delete_resp dr = {0};
        rc = etcd_delete(b->cfg.etcd, &d, &dr, err);
        etcd_delete_resp_done(&dr);
        free(k);
        char *msg = xasprintf("spec.window.timeZone: %s (the operator reads the zones from "
                              "/usr/share/zoneinfo)",
                              verr.msg);
        if (rc == 0)
            rc = write_status(b, obj, invalid_status(obj, gen, "InvalidTimeZone", msg, now), err);
        free(msg);
        wake(b, ns);
        goto out;
    }
    have_zone = true;
    if (tzwin_window(&z, bb.spec.period, now, &bb.win) != 0) {
        rc = err_set(err, -ERANGE, "agentbudget %s: the clock is out of range", key);
        goto out;
    }
    struct tzwin_window prev;
    if (tzwin_window(&z, bb.spec.period, bb.win.start - 1, &prev) != 0)
        prev = bb.win;
    bool changed = false;
    if ((rc = bstore_put_mirror(b->cfg.etcd, &bb.spec, &changed, err)))
        goto out;
    mirror_ns_note(b, ns);
    if ((rc = bstore_usage(b->cfg.etcd, &bb, &u, err)))
        goto out;
    /* holders that no longer exist (deleted while the operator was away) */
    if (b->cfg.sessions && informer_has_synced(b->cfg.sessions) && u.slots.n > 0) {
        struct uid_scan us = {.ns = ns};
        informer_each(b->cfg.sessions, collect_uid, &us);
        size_t pruned = 0;
        rc = bstore_prune_slots(b->cfg.etcd, ns, name, uid_known, &us, &pruned, err);
        for (size_t i = 0; i < us.n; i++)
            free(us.uids[i]);
        free(us.uids);
        if (rc)
            goto out;
        if (pruned) {
            bstore_usage_done(&u);
            if ((rc = bstore_usage(b->cfg.etcd, &bb, &u, err)))
                goto out;
        }
    }
    struct queued_scan qs = {ns, name, 0};
    if (b->cfg.sessions)
        informer_each(b->cfg.sessions, count_queued, &qs);
    const char *old_window = status_str(obj, "window", "key");
    if ((rc = write_status(b, obj, budget_status(obj, &bb, &z, &u, qs.n, now), err)))
        goto out;
    set_gauges(b, &bb, &u, qs.n);
    if ((rc = bstore_gc_windows(b->cfg.etcd, ns, name, bb.win.key, prev.key, err)))
        goto out;
    /* a new window, new limits, moved counters: the waiting sessions look again */
    (void)old_window;
    (void)changed;
    wake(b, ns);
    int64_t left = bb.win.end - now + 1;
    *ret_requeue = left > 0 && left < REFRESH_S ? left : REFRESH_S;
out:
    if (have_zone)
        tzwin_zone_done(&z);
    bstore_usage_done(&u);
    bspec_done(&bb.spec);
    cJSON_Delete(obj);
    free(ns);
    return rc;
}

/* Mirrors in etcd of budgets that no longer exist (deleted while the
 * operator was away). */
static int sweep(struct budgets *b, struct tern_err *err)
{
    if (!informer_has_synced(b->inf))
        return 0;
    char **names = NULL;
    size_t n = 0;
    int rc = bstore_list_mirrors(b->cfg.etcd, &names, &n, err);
    for (size_t i = 0; i < n; i++) {
        char *slash = strchr(names[i], '/');
        if (rc == 0 && slash && (!*b->namespace || strncmp(names[i], b->namespace,
                                                          (size_t)(slash - names[i])) == 0)) {
            *slash = 0;
            cJSON *obj = informer_get(b->inf, names[i], slash + 1);
            if (!obj)
                rc = bstore_delete_budget(b->cfg.etcd, names[i], slash + 1, err);
            cJSON_Delete(obj);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

static void *worker_main(void *arg)
{
    struct budgets *b = arg;
    for (;;) {
        char *key = NULL;
        if (workqueue_get(b->q, &key) != 0)
            break;
        struct tern_err err = {0};
        int64_t requeue = 0;
        int rc;
        if (strcmp(key, GC_KEY) == 0) {
            rc = sweep(b, &err);
            if (!b->mirrors_known)
                load_mirror_ns(b, NULL);
        } else {
            rc = reconcile_budget(b, key, &requeue, &err);
        }
        if (rc) {
            long delay = 0;
            workqueue_add_rate_limited(b->q, key, &delay);
            if (b->cfg.metrics)
                metrics_add(b->cfg.metrics, "tern_budget_reconcile_errors_total", "", 1);
        } else {
            workqueue_forget(b->q, key);
            if (strcmp(key, GC_KEY) == 0)
                workqueue_add_after(b->q, key, GC_EVERY_MS);
            else if (requeue > 0)
                workqueue_add_after(b->q, key, requeue * 1000);
        }
        workqueue_done(b->q, key);
        free(key);
    }
    return NULL;
}

int budgets_new(const struct budgets_config *cfg, struct budgets **ret, struct tern_err *err)
{
    if (!cfg->kube || !cfg->etcd)
        return err_set(err, -EINVAL, "budgets: kubeconfig and etcd are required");
    struct budgets *b = xcalloc(1, sizeof *b);
    b->cfg = *cfg;
    b->namespace = xstrdup(cfg->namespace ? cfg->namespace : "");
    pthread_mutex_init(&b->mu, NULL);
    b->q = workqueue_new(NULL);
    b->kc = kclient_new(cfg->kube, NULL);
    struct informer_opts o = {.gvr = budget_gvr, .namespace = b->namespace};
    struct informer_handlers h = {on_add, on_update, on_delete, b};
    b->inf = informer_new(cfg->kube, &o, &h);
    struct metrics *m = cfg->metrics;
    if (m) {
        metrics_declare(m, "tern_budget_used", METRICS_GAUGE,
                        "AgentBudget use in the current window, by dimension (concurrentSessions: "
                        "sessions holding a slot now).",
                        NULL, 0);
        metrics_declare(m, "tern_budget_reserved", METRICS_GAUGE,
                        "AgentBudget amounts reserved by model calls in flight, by dimension.",
                        NULL, 0);
        metrics_declare(m, "tern_budget_limit", METRICS_GAUGE,
                        "AgentBudget limits, by dimension (-1: not limited).", NULL, 0);
        metrics_declare(m, "tern_budget_refused", METRICS_GAUGE,
                        "Model calls an AgentBudget refused in the current window.", NULL, 0);
        metrics_declare(m, "tern_budget_queued", METRICS_GAUGE,
                        "Sessions waiting (phase Queued) on an AgentBudget.", NULL, 0);
        metrics_declare(m, "tern_budget_turned_away_total", METRICS_COUNTER,
                        "Sessions an AgentBudget turned away (queued or parked), by reason.", NULL,
                        0);
        metrics_declare(m, "tern_budget_reconcile_errors_total", METRICS_COUNTER,
                        "AgentBudget reconciles that failed and were retried.", NULL, 0);
    }
    *ret = b;
    return 0;
}

int budgets_start(struct budgets *b, struct tern_err *err)
{
    int r = informer_start(b->inf);
    if (r)
        return err_set(err, r, "starting the agentbudgets informer");
    load_mirror_ns(b, NULL); /* if etcd is not there yet: asked per session */
    r = pthread_create(&b->watcher, NULL, watch_main, b);
    if (r)
        return err_set(err, -r, "starting the budget counters watch");
    b->watcher_started = true;
    return 0;
}

void budgets_run(struct budgets *b)
{
    if (b->worker_running)
        return;
    if (workqueue_shutting_down(b->q)) {
        workqueue_free(b->q);
        b->q = workqueue_new(NULL);
    }
    informer_resync(b->inf);
    workqueue_add(b->q, GC_KEY);
    pthread_create(&b->worker, NULL, worker_main, b);
    b->worker_running = true;
}

void budgets_stop(struct budgets *b)
{
    if (!b->worker_running)
        return;
    workqueue_shutdown(b->q);
    pthread_join(b->worker, NULL);
    b->worker_running = false;
}

void budgets_free(struct budgets *b)
{
    if (!b)
        return;
    atomic_store(&b->stop, true);
    informer_cancel(b->inf); /* noticed while the others stop */
    budgets_stop(b);
    if (b->watcher_started)
        pthread_join(b->watcher, NULL);
    informer_free(b->inf);
    workqueue_free(b->q);
    kclient_free(b->kc);
    for (size_t i = 0; i < b->nmirror_ns; i++)
        free(b->mirror_ns[i]);
    free(b->mirror_ns);
    for (size_t i = 0; i < b->nyielders; i++)
        yielder_free(&b->yielders[i]);
    free(b->yielders);
    pthread_mutex_destroy(&b->mu);
    free(b->namespace);
    free(b);
}

/* ---- the session reconcile's questions --------------------------------------- */

void budgets_session_done(struct budgets_session *s)
{
    if (!s)
        return;
    bstore_budgets_free(s->all, s->nall);
    free(s->applies);
    free(s->msg_queue);
    free(s->msg_exhausted);
    free(s->queue_budget);
    memset(s, 0, sizeof *s);
}

static const struct tzwin_zone *zone_of(struct bstore_zones *zones, const struct bstore_budget *bb)
{
    const struct tzwin_zone *z = NULL;
    return bstore_zone(zones, bb->spec.time_zone, &z, NULL) == 0 ? z : NULL;
}

/* Whether a parked session's refused call fits its budget now. */
static int check_parked(struct budgets *b, struct bstore_zones *zones,
                        const struct observed_journal *j, struct budgets_session *s,
                        struct tern_err *err)
{
    const struct bstore_budget *bb = NULL;
    for (size_t i = 0; i < s->nall; i++)
        if (s->applies[i] && streq(s->all[i].spec.name, j->reason))
            bb = &s->all[i];
    enum bspec_dim dim;
    if (!bb || bspec_dim_parse(j->limit, &dim) != 0 || !bspec_limited(&bb->spec, dim) ||
        (dim != BSPEC_TOKENS && dim != BSPEC_COST)) {
        s->obs.resumable = true; /* gone, no longer applies, or no longer limits that */
        return 0;
    }
    struct bstore_usage u = {0};
    int rc = bstore_usage(b->cfg.etcd, bb, &u, err);
    if (rc)
        return rc;
    struct ledger_amount want = {dim == BSPEC_TOKENS ? j->limit_used : 0,
                                 dim == BSPEC_COST ? j->limit_used : 0};
    s->obs.resumable = ledger_fits(&bb->spec, &u.win, &want, NULL);
    int64_t used = dim == BSPEC_TOKENS ? u.win.tokens : u.win.cost;
    int64_t res = dim == BSPEC_TOKENS ? u.win.res_tokens : u.win.res_cost;
    char a[40], r[40], w[40], l[40], end[TZWIN_TIME_MAX] = "";
    const struct tzwin_zone *z = zone_of(zones, bb);
    if (z)
        tzwin_format(z, bb->win.end, end);
    int64_t lim = bb->spec.limit[dim];
    bspec_format(dim, used, a);
    bspec_format(dim, res, r);
    bspec_format(dim, j->limit_used, w);
    bspec_format(dim, lim, l);
    if (j->limit_used > lim)
        s->msg_exhausted = xasprintf(
            "AgentBudget %s: one model call needs up to %s of %s per %s, more than the whole "
            "limit: raise spec.limits.%s (or lower the completion size) to continue",
            bb->spec.name, w, bspec_dim_name(dim), tzwin_period_name(bb->spec.period),
            bspec_dim_name(dim));
    else
        s->msg_exhausted = xasprintf(
            "AgentBudget %s: %s per %s in window %s (%s): %s used + %s reserved, the next call "
            "needs up to %s of %s; the session continues by itself when the window ends (%s) or "
            "when spec.limits.%s is raised",
            bb->spec.name, bspec_dim_name(dim), tzwin_period_name(bb->spec.period), bb->win.key,
            bb->spec.time_zone, a, r, w, l, end, bspec_dim_name(dim));
    s->obs.exhausted_message = s->msg_exhausted;
    s->obs.exhausted_reason = bspec_dim_reason(dim);
    int64_t left = bb->win.end - budgets_now(b);
    s->obs.retry_after = left > 0 ? left : 1;
    bstore_usage_done(&u);
    return 0;
}

/* The budgets of s that limit session counts (concurrency, starts). */
static size_t session_limiting(const struct budgets_session *s, struct bstore_budget *out)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nall; i++)
        if (s->applies[i] && (bspec_limited(&s->all[i].spec, BSPEC_CONCURRENT) ||
                              bspec_limited(&s->all[i].spec, BSPEC_STARTED)))
            out[n++] = s->all[i]; /* shallow: borrowed from s */
    return n;
}

/* ---- giving a slot up ------------------------------------------------------------ */

static void yielder_free(struct yielder *y)
{
    free(y->ns);
    free(y->budget);
    free(y->uid);
}

/* Drops the claims of uid (all budgets when budget is NULL); b->mu held. */
static void drop_yields_locked(struct budgets *b, const char *ns, const char *budget,
                               const char *uid)
{
    size_t k = 0;
    for (size_t i = 0; i < b->nyielders; i++) {
        struct yielder *y = &b->yielders[i];
        if (streq(y->ns, ns) && streq(y->uid, uid) && (!budget || streq(y->budget, budget)))
            yielder_free(y);
        else
            b->yielders[k++] = *y;
    }
    b->nyielders = k;
}

/* Whether the holder uid should give its slot of bb up to a waiter: every
 * slot is held, and more sessions wait than other holders are already
 * giving theirs up (claims that still hold a slot and have not expired).
 * Claims it when so. contended: someone waits, but others give up enough;
 * look again soon (a claim not followed through is dropped). */
static bool claim_yield(struct budgets *b, const struct bstore_budget *bb, const char *uid,
                        struct ledger_waiter *w, size_t n, const struct ledger_slots *slots,
                        bool *contended)
{
    int64_t now = mono_ms();
    pthread_mutex_lock(&b->mu);
    size_t k = 0, others = 0;
    for (size_t i = 0; i < b->nyielders; i++) {
        struct yielder *y = &b->yielders[i];
        bool mine = streq(y->ns, bb->spec.ns) && streq(y->budget, bb->spec.name);
        if (mine && (now >= y->until_ms || !ledger_slots_has(slots, y->uid))) {
            yielder_free(y); /* released, or not followed through */
            continue;
        }
        if (mine && !streq(y->uid, uid))
            others++;
        b->yielders[k++] = *y;
    }
    b->nyielders = k;
    bool want = ledger_slot_wanted(w, n, slots, bb->spec.limit[BSPEC_CONCURRENT], others);
    if (!want && ledger_slot_wanted(w, n, slots, bb->spec.limit[BSPEC_CONCURRENT], 0))
        *contended = true;
    drop_yields_locked(b, bb->spec.ns, bb->spec.name, uid);
    if (want) {
        b->yielders = xreallocarray(b->yielders, b->nyielders + 1, sizeof *b->yielders);
        b->yielders[b->nyielders++] =
            (struct yielder){xstrdup(bb->spec.ns), xstrdup(bb->spec.name), xstrdup(uid),
                             now + TERN_BUDGET_YIELD_CLAIM_MS};
    }
    pthread_mutex_unlock(&b->mu);
    return want;
}

void budgets_yield_settle(struct budgets *b, const cJSON *session, bool parked)
{
    const char *ns = meta_str(session, "namespace"), *uid = meta_str(session, "uid");
    if (!b || !ns || !uid || parked)
        return;
    pthread_mutex_lock(&b->mu);
    drop_yields_locked(b, ns, NULL, uid);
    pthread_mutex_unlock(&b->mu);
}

int budgets_observe(struct budgets *b, const cJSON *session, const struct observed_journal *j,
                    bool holding, struct budgets_session *ret, struct tern_err *err)
{
    memset(ret, 0, sizeof *ret);
    const char *ns = meta_str(session, "namespace"), *uid = meta_str(session, "uid");
    const char *name = meta_str(session, "name");
    if (!b || !ns || !uid || !name || !maybe(b, ns))
        return 0;
    struct bstore_zones *zones = bstore_zones_new();
    int rc = bstore_load(b->cfg.etcd, zones, ns, NULL, true, budgets_now(b), &ret->all,
                         &ret->nall, err);
    if (rc)
        goto out;
    const cJSON *labels = json_get(json_get(session, "metadata"), "labels");
    ret->applies = xcalloc(ret->nall + 1, sizeof *ret->applies);
    for (size_t i = 0; i < ret->nall; i++) {
        ret->applies[i] = bspec_matches(&ret->all[i].spec, labels);
        ret->any = ret->any || ret->applies[i];
    }
    if (ret->nall)
        mirror_ns_note(b, ns);
    if (!ret->any)
        goto out;
    if (holding) {
        /* a session with a sandbox holds its slots (taken now if it ran
         * before the budget, or before its selector matched) */
        struct bstore_budget lim[TERN_BUDGET_MAX_PER_NS];
        size_t n = session_limiting(ret, lim);
        struct bstore_admission a;
        if (n && (rc = bstore_admit(b->cfg.etcd, ns, uid, name, lim, n, NULL, true, &a, err)))
            goto out;
        /* does anyone wait for one of its slots? */
        for (size_t i = 0; i < n && !ret->obs.others_waiting && b->cfg.sessions; i++) {
            if (!bspec_limited(&lim[i].spec, BSPEC_CONCURRENT))
                continue;
            struct waiter_scan ws = {.spec = &lim[i].spec, .ns = ns, .skip_uid = uid};
            informer_each(b->cfg.sessions, collect_waiter, &ws);
            /* ... and is every slot taken? The ledger, not the cache, says
             * who holds: a waiter the cache still shows Queued may have
             * been admitted already, and then nobody waits for this slot */
            struct bstore_usage u = {0};
            if (ws.n && (rc = bstore_usage(b->cfg.etcd, &lim[i], &u, err)) == 0)
                ret->obs.others_waiting =
                    claim_yield(b, &lim[i], uid, ws.w, ws.n, &u.slots, &ret->yield_contended);
            for (size_t k = 0; k < 2 * ws.n; k++)
                free(ws.owned[k]);
            free(ws.owned);
            free(ws.w);
            bstore_usage_done(&u);
            if (rc)
                goto out;
        }
    }
    if (streq(j->outcome, JOURNAL_OUTCOME_BUDGET) && !j->intent_pending &&
        (rc = check_parked(b, zones, j, ret, err)))
        goto out;
out:
    bstore_zones_free(zones);
    if (rc)
        budgets_session_done(ret);
    return rc;
}

int budgets_admit(struct budgets *b, const cJSON *session, struct budgets_session *s,
                  struct tern_err *err)
{
    const char *ns = meta_str(session, "namespace"), *uid = meta_str(session, "uid");
    const char *name = meta_str(session, "name");
    struct bstore_budget lim[TERN_BUDGET_MAX_PER_NS];
    size_t n = session_limiting(s, lim);
    s->obs.checked = true;
    s->obs.admitted = true;
    if (n == 0)
        return 0;
    struct bstore_waiters q[TERN_BUDGET_MAX_PER_NS];
    struct waiter_scan scans[TERN_BUDGET_MAX_PER_NS];
    double created = observe_time(meta_str(session, "creationTimestamp"));
    for (size_t i = 0; i < n; i++) {
        scans[i] = (struct waiter_scan){.spec = &lim[i].spec, .ns = ns};
        if (b->cfg.sessions)
            informer_each(b->cfg.sessions, collect_waiter, &scans[i]);
        /* the asking session is in line whatever its status says */
        scans[i].w = xreallocarray(scans[i].w, scans[i].n + 1, sizeof *scans[i].w);
        scans[i].w[scans[i].n++] = (struct ledger_waiter){uid, name, created};
        q[i] = (struct bstore_waiters){scans[i].w, scans[i].n};
    }
    struct bstore_admission a = {0};
    int rc = bstore_admit(b->cfg.etcd, ns, uid, name, lim, n, q, false, &a, err);
    if (rc == 0 && !a.admitted) {
        const struct bstore_budget *bb = &lim[a.which];
        s->obs.admitted = false;
        s->queue_budget = xstrdup(bb->spec.name);
        s->obs.queue_budget = s->queue_budget;
        s->obs.queue_reason = bspec_dim_reason(a.dim);
        s->obs.position = (int64_t)a.position;
        s->obs.waiting = (int64_t)a.waiting;
        if (a.dim == BSPEC_CONCURRENT) {
            s->msg_queue = xasprintf("AgentBudget %s: %lld of %lld concurrent sessions run; "
                                     "position %zu of %zu in line (in order of creation)",
                                     bb->spec.name, (long long)a.used, (long long)a.limit,
                                     a.position, a.waiting);
        } else {
            struct bstore_zones *zones = bstore_zones_new();
            const struct tzwin_zone *z = zone_of(zones, bb);
            char end[TZWIN_TIME_MAX] = "";
            if (z)
                tzwin_format(z, bb->win.end, end);
            bstore_zones_free(zones);
            s->msg_queue = xasprintf(
                "AgentBudget %s: %lld of %lld sessions started per %s in window %s (%s); "
                "position %zu of %zu in line; new sessions start when the window ends (%s) or "
                "when spec.limits.sessionsStarted is raised",
                bb->spec.name, (long long)a.used, (long long)a.limit,
                tzwin_period_name(bb->spec.period), bb->win.key, bb->spec.time_zone, a.position,
                a.waiting, end);
            int64_t left = bb->win.end - budgets_now(b);
            s->obs.retry_after = left > 0 ? left : 1;
        }
        s->obs.queue_message = s->msg_queue;
    }
    for (size_t i = 0; i < n; i++) {
        size_t owned = scans[i].n - 1; /* the last one is borrowed */
        for (size_t k = 0; k < 2 * owned; k++)
            free(scans[i].owned[k]);
        free(scans[i].owned);
        free(scans[i].w);
    }
    return rc;
}

/* The names of every budget of the namespace (ledgers to leave). */
static size_t all_names(const struct budgets_session *s, const char **out, bool only_unapplied)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nall; i++)
        if (bspec_limited(&s->all[i].spec, BSPEC_CONCURRENT) && (!only_unapplied || !s->applies[i]))
            out[n++] = s->all[i].spec.name;
    return n;
}

/* Settles or releases what a turn left reserved, if no runner is at work
 * (the turn lock is free). */
static int resolve_idle(struct budgets *b, const char *ns, const char *uid, struct journal *j,
                        struct tern_err *err)
{
    uint64_t *ids = NULL;
    size_t n = 0;
    int rc = bstore_open_reservations(b->cfg.etcd, ns, uid, &ids, &n, err);
    free(ids);
    if (rc || n == 0 || !j)
        return rc;
    struct journal_lock *lock = NULL;
    rc = journal_lock_acquire(b->cfg.etcd, uid, "tern-operator/budgets", 10, &lock, err);
    if (rc == TERN_ECONFLICT)
        return 0; /* a runner works: it resolves them itself */
    if (rc)
        return rc;
    if ((rc = journal_refresh(j, err)) == 0)
        rc = bstore_resolve(b->cfg.etcd, j, ns, uid, NULL, err);
    journal_lock_release(lock, NULL);
    return rc;
}

int budgets_after(struct budgets *b, const cJSON *session, struct budgets_session *s,
                  bool holding, bool turn_idle, struct journal *j, struct tern_err *err)
{
    const char *ns = meta_str(session, "namespace"), *uid = meta_str(session, "uid");
    if (!b || !s || s->nall == 0 || !ns || !uid)
        return 0;
    const char *names[TERN_BUDGET_MAX_PER_NS];
    size_t n = all_names(s, names, holding);
    int rc = 0;
    if (n) {
        size_t left = 0;
        rc = bstore_release(b->cfg.etcd, ns, uid, names, n, &left, err);
        if (rc == 0 && left)
            wake(b, ns); /* a slot is free */
    }
    if (rc == 0 && turn_idle)
        rc = resolve_idle(b, ns, uid, j, err);
    return rc;
}

int budgets_forget(struct budgets *b, const cJSON *session, struct tern_err *err)
{
    const char *ns = meta_str(session, "namespace"), *uid = meta_str(session, "uid");
    if (!b || !ns || !uid || !maybe(b, ns))
        return 0;
    struct budgets_session s;
    int rc = budgets_observe(b, session, &(struct observed_journal){0}, false, &s, err);
    if (rc)
        return rc;
    if (s.nall) {
        const char *names[TERN_BUDGET_MAX_PER_NS];
        size_t n = all_names(&s, names, false);
        struct journal *j = NULL;
        rc = journal_open(b->cfg.etcd, uid, NULL, &j, err);
        if (rc == 0)
            rc = resolve_idle(b, ns, uid, j, err);
        journal_free(j);
        if (rc == 0)
            rc = bstore_forget(b->cfg.etcd, ns, uid, names, n, err);
        if (rc == 0)
            wake(b, ns);
    }
    budgets_session_done(&s);
    return rc;
}

void budgets_turned_away(struct budgets *b, const cJSON *session, const char *budget,
                         const char *reason, const char *note)
{
    const char *ns = meta_str(session, "namespace"), *name = meta_str(session, "name");
    if (!b || !ns || !budget)
        return;
    if (b->cfg.metrics) {
        char *l = metrics_labels("namespace", ns, "budget", budget, "reason", reason ? reason : "",
                                 NULL);
        metrics_add(b->cfg.metrics, "tern_budget_turned_away_total", l, 1);
        free(l);
    }
    /* the others in line learn the new length of the line (and idle
     * holders that someone waits), the budget's status its new count */
    wake_some(b, ns, true);
    char *bkey = xasprintf("%s/%s", ns, budget);
    workqueue_add_after(b->q, bkey, 1000);
    free(bkey);
    cJSON *obj = informer_get(b->inf, ns, budget);
    if (obj && b->cfg.recorder) {
        struct recorder_ref ref;
        recorder_ref_of(obj, &ref);
        bool queued = streq(reason, "ConcurrentSessions");
        recorder_event(b->cfg.recorder, &ref, queued ? "Normal" : "Warning",
                       queued ? "SessionQueued" : "SessionRefused", "Admit", "session %s: %s",
                       name ? name : "?", note ? note : "");
    }
    cJSON_Delete(obj);
}
