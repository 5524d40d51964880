/* tctl.c - AgentTrigger schedules and the webhook receiver. See tctl.h. */
#include "trigger/tctl.h"

#include "base/base64.h"
#include "base/limits.h"
#include "base/mem.h"
#include "controller/conditions.h"
#include "controller/observe.h"
#include "json/json.h"
#include "kube/informer.h"
#include "kube/kclient.h"
#include "kube/workqueue.h"
#include "spec/session_spec.h"
#include "trigger/tmap.h"
#include "trigger/tsched.h"
#include "trigger/tspec.h"
#include "trigger/webhook.h"

#include <openssl/crypto.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct kgvr trigger_gvr = {"tern.dev", "v1alpha1", "agenttriggers"};
static const struct kgvr session_gvr = {"tern.dev", "v1alpha1", "agentsessions"};
static const struct kgvr secret_gvr = {"", "v1", "secrets"};

struct tctl {
    struct tctl_config cfg;
    struct informer *triggers, *sessions;
    struct workqueue *q;
    pthread_t worker;
    bool worker_running;
    pthread_mutex_t mu;
};

static int64_t now_s(const struct tctl *t)
{
    return (int64_t)time(NULL) + t->cfg.clock_skew;
}

static void logf_(const struct tctl *t, const char *level, const char *trigger, const char *what,
                  const char *detail)
{
    if (t->cfg.on_log)
        t->cfg.on_log(t->cfg.ctx, level, trigger, what, detail ? detail : "");
}

static const char *meta_s(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(json_get(o, "metadata"), k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *label_of(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(json_get(json_get(o, "metadata"), "labels"), k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void event(struct tctl *t, const cJSON *trigger, const char *type, const char *reason,
                  const char *note)
{
    if (t->cfg.recorder && trigger) {
        struct recorder_ref ref;
        recorder_ref_of(trigger, &ref);
        if (!ref.api_version)
            ref.api_version = "tern.dev/v1alpha1";
        if (!ref.kind)
            ref.kind = "AgentTrigger";
        recorder_event(t->cfg.recorder, &ref, type, reason, "Trigger", "%s", note);
    }
    char *key = xasprintf("%s/%s", meta_s(trigger, "namespace") ? meta_s(trigger, "namespace") : "",
                          meta_s(trigger, "name") ? meta_s(trigger, "name") : "");
    char *d = xasprintf("%s: %s", reason, note);
    logf_(t, strcmp(type, "Warning") == 0 ? "warn" : "info", key, "trigger event", d);
    free(d);
    free(key);
}

/* ---- informer handlers ----------------------------------------------------- */

/* Handlers add under mu: tctl_run_workers replaces a queue that a lost
 * leadership shut down. */
static void enqueue(struct tctl *t, const char *k)
{
    pthread_mutex_lock(&t->mu);
    workqueue_add(t->q, k);
    pthread_mutex_unlock(&t->mu);
}

static void enqueue_obj(struct tctl *t, const cJSON *o)
{
    char *k = informer_key(o);
    if (k)
        enqueue(t, k);
    free(k);
}

static void on_trigger_add(void *ctx, const cJSON *o)
{
    enqueue_obj(ctx, o);
}
static void on_trigger_update(void *ctx, const cJSON *a, const cJSON *b)
{
    (void)a;
    enqueue_obj(ctx, b);
}
static void on_trigger_delete(void *ctx, const cJSON *o)
{
    enqueue_obj(ctx, o);
}

static void enqueue_session_owner(struct tctl *t, const cJSON *s)
{
    const char *tn = label_of(s, TSPEC_LABEL_TRIGGER), *ns = meta_s(s, "namespace");
    if (!tn || !ns)
        return;
    char *k = xasprintf("%s/%s", ns, tn);
    enqueue(t, k);
    free(k);
}
static void on_session_add(void *ctx, const cJSON *o)
{
    enqueue_session_owner(ctx, o);
}
static void on_session_update(void *ctx, const cJSON *a, const cJSON *b)
{
    const cJSON *pa = json_get(json_get(a, "status"), "phase"),
                *pb = json_get(json_get(b, "status"), "phase");
    if (a == b || !json_equal(pa, pb))
        enqueue_session_owner(ctx, b);
}
static void on_session_delete(void *ctx, const cJSON *o)
{
    enqueue_session_owner(ctx, o);
}

/* ---- lifecycle ------------------------------------------------------------ */

static void declare_metrics(struct metrics *m)
{
    if (!m)
        return;
    metrics_declare(m, "tern_trigger_deliveries_total", METRICS_COUNTER,
                    "Webhook deliveries by outcome (Created, Duplicate, BadSignature, Filtered, "
                    "Malformed, TooLarge, Suspended, NotFound, SecretNotFound, Conflict, Error).",
                    NULL, 0);
    metrics_declare(m, "tern_trigger_sessions_created_total", METRICS_COUNTER,
                    "Sessions created by triggers, by source (webhook, schedule).", NULL, 0);
    metrics_declare(m, "tern_trigger_schedule_slots_total", METRICS_COUNTER,
                    "Schedule slots handled, by outcome (Created, Missed, Skipped).", NULL, 0);
    metrics_declare(m, "tern_trigger_history_deleted_total", METRICS_COUNTER,
                    "Finished sessions deleted beyond a trigger's history limits.", NULL, 0);
}

int tctl_new(const struct tctl_config *cfg, struct tctl **ret, struct tern_err *err)
{
    (void)err;
    struct tctl *t = xcalloc(1, sizeof *t);
    t->cfg = *cfg;
    pthread_mutex_init(&t->mu, NULL);
    t->q = workqueue_new(NULL);
    declare_metrics(cfg->metrics);
    struct informer_opts to = {.gvr = trigger_gvr, .namespace = cfg->namespace};
    struct informer_handlers th = {on_trigger_add, on_trigger_update, on_trigger_delete, t};
    t->triggers = informer_new(cfg->kube, &to, &th);
    struct informer_opts so = {.gvr = session_gvr, .namespace = cfg->namespace,
                               .label_selector = TSPEC_LABEL_TRIGGER};
    struct informer_handlers sh = {on_session_add, on_session_update, on_session_delete, t};
    t->sessions = informer_new(cfg->kube, &so, &sh);
    *ret = t;
    return 0;
}

int tctl_start(struct tctl *t, struct tern_err *err)
{
    int r = informer_start(t->triggers);
    if (!r)
        r = informer_start(t->sessions);
    if (r)
        return err_set(err, r, "trigger informers: %s", err_str(r));
    return 0;
}

bool tctl_synced(struct tctl *t)
{
    return informer_has_synced(t->triggers) && informer_has_synced(t->sessions);
}

static void *worker_main(void *arg)
{
    struct tctl *t = arg;
    char *key;
    while (workqueue_get(t->q, &key) == 0) {
        int64_t requeue = 0;
        struct tern_err err = {0};
        int r = tctl_reconcile(t, key, &requeue, &err);
        if (r) {
            long delay = 0;
            workqueue_add_rate_limited(t->q, key, &delay);
            logf_(t, r == TERN_ECONFLICT ? "debug" : "warn", key, "trigger reconcile failed",
                  err.msg);
        } else {
            workqueue_forget(t->q, key);
            if (requeue > 0)
                workqueue_add_after(t->q, key, (long)(requeue * 1000));
        }
        workqueue_done(t->q, key);
        free(key);
    }
    return NULL;
}

void tctl_run_workers(struct tctl *t)
{
    pthread_mutex_lock(&t->mu);
    bool resync = false;
    if (!t->worker_running) {
        if (workqueue_shutting_down(t->q)) {
            workqueue_free(t->q);
            t->q = workqueue_new(NULL);
        }
        if (pthread_create(&t->worker, NULL, worker_main, t) == 0)
            t->worker_running = true;
        resync = true;
    }
    pthread_mutex_unlock(&t->mu);
    if (resync) /* everything, now that this replica decides (handlers take mu) */
        informer_resync(t->triggers);
}

void tctl_stop_workers(struct tctl *t)
{
    pthread_mutex_lock(&t->mu);
    if (t->worker_running) {
        workqueue_shutdown(t->q);
        pthread_join(t->worker, NULL);
        t->worker_running = false;
    }
    pthread_mutex_unlock(&t->mu);
}

void tctl_free(struct tctl *t)
{
    if (!t)
        return;
    tctl_stop_workers(t);
    informer_cancel(t->triggers);
    informer_cancel(t->sessions);
    informer_free(t->triggers);
    informer_free(t->sessions);
    workqueue_shutdown(t->q);
    workqueue_drain(t->q);
    workqueue_free(t->q);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* ---- status writes ---------------------------------------------------------- */

/* What a pass or a delivery changes in a trigger's status: fields to set
 * (replacing), counts to add to. Applied on the object read fresh, so
 * concurrent writers (the schedule worker, webhook threads of any replica)
 * lose nothing. */
struct status_change {
    cJSON *set;    /* object of fields */
    cJSON *counts; /* object name -> delta */
};

static void change_init(struct status_change *c)
{
    c->set = cJSON_CreateObject();
    c->counts = cJSON_CreateObject();
}

static void change_done(struct status_change *c)
{
    cJSON_Delete(c->set);
    cJSON_Delete(c->counts);
}

static void change_count(struct status_change *c, const char *name)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(c->counts, name);
    int64_t n = 0;
    if (v)
        json_item_int64(v, &n);
    cJSON_DeleteItemFromObjectCaseSensitive(c->counts, name);
    json_add_int64(c->counts, name, n + 1);
}

static void change_set(struct status_change *c, const char *k, cJSON *v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(c->set, k);
    cJSON_AddItemToObject(c->set, k, v);
}

static int apply_change(void *ctx, cJSON *obj)
{
    const struct status_change *c = ctx;
    cJSON *st = cJSON_GetObjectItemCaseSensitive(obj, "status");
    if (!cJSON_IsObject(st)) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
        st = cJSON_AddObjectToObject(obj, "status");
    }
    cJSON *before = json_dup(st);
    const cJSON *f;
    cJSON_ArrayForEach(f, c->set)
    {
        cJSON_DeleteItemFromObjectCaseSensitive(st, f->string);
        cJSON_AddItemToObject(st, f->string, json_dup(f));
    }
    if (c->counts->child) {
        cJSON *counts = cJSON_GetObjectItemCaseSensitive(st, "counts");
        if (!cJSON_IsObject(counts)) {
            cJSON_DeleteItemFromObjectCaseSensitive(st, "counts");
            counts = cJSON_AddObjectToObject(st, "counts");
        }
        cJSON_ArrayForEach(f, c->counts)
        {
            int64_t have = 0, add = 0;
            const cJSON *h = json_get(counts, f->string);
            if (h)
                json_item_int64(h, &have);
            json_item_int64(f, &add);
            cJSON_DeleteItemFromObjectCaseSensitive(counts, f->string);
            json_add_int64(counts, f->string, have + add);
        }
    }
    bool same = json_equal(before, st);
    cJSON_Delete(before);
    return same ? 1 : 0;
}

static int write_status(struct kclient *kc, const char *ns, const char *name,
                        const struct status_change *c, struct tern_err *err)
{
    struct kclient_err ke = {0};
    int r = kclient_update_retry(kc, &trigger_gvr, ns, name, "status", apply_change, (void *)c, 0,
                                 NULL, &ke);
    if (r == TERN_ENOTFOUND)
        return 0;
    if (r)
        return err_set(err, r, "update status of agenttrigger %s/%s: %s", ns, name, ke.e.msg);
    return 0;
}

/* ---- the schedule pass ---------------------------------------------------- */

struct owned {
    const char *ns, *name, *uid;
    cJSON **items;
    size_t n;
};

static int collect_owned(void *ctx, const cJSON *s)
{
    struct owned *o = ctx;
    const char *ns = meta_s(s, "namespace"), *tn = label_of(s, TSPEC_LABEL_TRIGGER);
    if (!ns || !tn || strcmp(ns, o->ns) != 0 || strcmp(tn, o->name) != 0)
        return 0;
    bool ours = false;
    const cJSON *ref;
    cJSON_ArrayForEach(ref, json_get(json_get(s, "metadata"), "ownerReferences"))
    {
        const cJSON *u = json_get(ref, "uid");
        ours |= cJSON_IsString(u) && o->uid && strcmp(u->valuestring, o->uid) == 0;
    }
    if (!ours)
        return 0;
    o->items = xrealloc(o->items, (o->n + 1) * sizeof *o->items);
    o->items[o->n++] = json_dup(s);
    return 0;
}

static const char *phase_of(const cJSON *s)
{
    const cJSON *p = json_get(json_get(s, "status"), "phase");
    return cJSON_IsString(p) ? p->valuestring : "";
}

static bool finished(const cJSON *s)
{
    return strcmp(phase_of(s), "Succeeded") == 0 || strcmp(phase_of(s), "Failed") == 0;
}

static int by_created(const void *a, const void *b)
{
    const cJSON *x = *(cJSON *const *)a, *y = *(cJSON *const *)b;
    double tx = observe_time(meta_s(x, "creationTimestamp")),
           ty = observe_time(meta_s(y, "creationTimestamp"));
    if (tx != ty)
        return tx < ty ? -1 : 1;
    return strcmp(meta_s(x, "name") ? meta_s(x, "name") : "", meta_s(y, "name") ? meta_s(y, "name") : "");
}

/* Deletes finished sessions beyond the limits, oldest first. */
static void prune_history(struct tctl *t, struct kclient *kc, const struct tspec *ts,
                          struct owned *o)
{
    if (o->n > 1)
        qsort(o->items, o->n, sizeof *o->items, by_created);
    size_t nsucc = 0, nfail = 0;
    for (size_t i = 0; i < o->n; i++) {
        if (strcmp(phase_of(o->items[i]), "Succeeded") == 0)
            nsucc++;
        else if (strcmp(phase_of(o->items[i]), "Failed") == 0)
            nfail++;
    }
    for (size_t i = 0; i < o->n; i++) {
        const char *ph = phase_of(o->items[i]);
        bool succ = strcmp(ph, "Succeeded") == 0, fail = strcmp(ph, "Failed") == 0;
        if (!((succ && nsucc > (size_t)ts->success_history) ||
              (fail && nfail > (size_t)ts->failed_history)))
            continue;
        struct kclient_delete_opts d = {.propagation = "Background"};
        struct kclient_err ke = {0};
        int r = kclient_delete(kc, &session_gvr, o->ns, meta_s(o->items[i], "name"), &d, NULL, &ke);
        if (r == 0 || r == TERN_ENOTFOUND) {
            if (succ)
                nsucc--;
            else
                nfail--;
            if (r == 0 && t->cfg.metrics)
                metrics_add(t->cfg.metrics, "tern_trigger_history_deleted_total", "", 1);
        }
    }
}

static int64_t status_time(const cJSON *obj, const char *k)
{
    const cJSON *v = json_get(json_get(obj, "status"), k);
    return cJSON_IsString(v) ? (int64_t)observe_time(v->valuestring) : 0;
}

static void set_time(struct status_change *c, const char *k, int64_t v)
{
    char buf[32];
    change_set(c, k, cJSON_CreateString(conditions_time(v, buf)));
}

static void set_ready(struct status_change *c, const cJSON *obj, int64_t gen, int64_t now,
                      bool ok, const char *reason, const char *msg)
{
    const cJSON *old = json_get(json_get(obj, "status"), "conditions");
    cJSON *conds = cJSON_IsArray(old) ? json_dup(old) : cJSON_CreateArray();
    char ts[32];
    conditions_set(conds, "Ready", ok ? COND_TRUE : COND_FALSE, reason, msg, gen,
                   conditions_time(now, ts));
    change_set(c, "conditions", conds);
}

static int schedule_pass(struct tctl *t, struct kclient *kc, const cJSON *obj,
                         const struct tspec *ts, struct owned *o, struct status_change *c,
                         int64_t *ret_requeue, struct tern_err *err)
{
    struct tzwin_zone z = {0};
    struct tern_err ze = {0};
    int64_t now = now_s(t);
    int r = 0;
    if (tzwin_load(t->cfg.zoneinfo_dir, ts->schedule.time_zone, &z, &ze)) {
        int64_t gen = 0;
        json_get_int64(json_get(obj, "metadata"), "", "generation", JSON_OPTIONAL, &gen, NULL);
        set_ready(c, obj, gen, now, false, "InvalidTimeZone", ze.msg);
        const cJSON *oc = conditions_find(json_get(json_get(obj, "status"), "conditions"), "Ready");
        const cJSON *om = json_get(oc, "message");
        if (!cJSON_IsString(om) || strcmp(om->valuestring, ze.msg) != 0)
            event(t, obj, "Warning", "InvalidTimeZone", ze.msg);
        return 0;
    }
    size_t nactive = 0;
    for (size_t i = 0; i < o->n; i++) {
        const char *src = label_of(o->items[i], TSPEC_LABEL_SOURCE);
        if (src && strcmp(src, "schedule") == 0 && !finished(o->items[i]))
            nactive++;
    }
    struct tsched_input in = {
        .t = ts,
        .z = &z,
        .now = now,
        .last_schedule = status_time(obj, "lastScheduleTime"),
        .last_skipped = status_time(obj, "lastSkippedTime"),
        .created = (int64_t)observe_time(meta_s(obj, "creationTimestamp")),
        .nactive = nactive,
    };
    struct tsched_output out;
    tsched_decide(&in, &out);
    char local[TZWIN_TIME_MAX], *note = NULL, *objective = NULL, *context = NULL, *sname = NULL;
    cJSON *payload = NULL, *session = NULL;
    if (out.action != TSCHED_NONE)
        tzwin_format(&z, out.slot, local);
    if (out.too_many_missed && out.action != TSCHED_NONE && out.action != TSCHED_FORBIDDEN) {
        note = xasprintf("more than %d slots were missed since the last one handled; only the "
                         "latest (%s) is considered",
                         TERN_CRON_MAX_MISSED, local);
        event(t, obj, "Warning", "TooManyMissedStartTimes", note);
        free(note);
        note = NULL;
    }
    switch (out.action) {
    case TSCHED_NONE:
        break;
    case TSCHED_MISSED:
        note = xasprintf("slot %s was missed: more than %lld s late (startingDeadlineSeconds); "
                         "no session",
                         local, (long long)ts->schedule.starting_deadline);
        event(t, obj, "Warning", "MissedSchedule", note);
        change_count(c, "Missed");
        set_time(c, "lastScheduleTime", out.slot);
        if (t->cfg.metrics) {
            char *l = metrics_labels("outcome", "Missed", NULL);
            metrics_add(t->cfg.metrics, "tern_trigger_schedule_slots_total", l, 1);
            free(l);
        }
        break;
    case TSCHED_FORBIDDEN:
        if (out.new_skip) {
            note = xasprintf("slot %s waits: %zu session(s) of this schedule still run "
                             "(concurrencyPolicy Forbid)",
                             local, nactive);
            event(t, obj, "Normal", "ConcurrencyForbid", note);
            change_count(c, "Skipped");
            set_time(c, "lastSkippedTime", out.slot);
            if (t->cfg.metrics) {
                char *l = metrics_labels("outcome", "Skipped", NULL);
                metrics_add(t->cfg.metrics, "tern_trigger_schedule_slots_total", l, 1);
                free(l);
            }
        }
        break;
    case TSCHED_CREATE: {
        if (out.replace) {
            for (size_t i = 0; i < o->n; i++) {
                const char *src = label_of(o->items[i], TSPEC_LABEL_SOURCE);
                if (!src || strcmp(src, "schedule") != 0 || finished(o->items[i]))
                    continue;
                struct kclient_delete_opts d = {.propagation = "Background"};
                struct kclient_err ke = {0};
                const char *victim = meta_s(o->items[i], "name");
                int dr = kclient_delete(kc, &session_gvr, o->ns, victim, &d, NULL, &ke);
                if (dr && dr != TERN_ENOTFOUND) {
                    r = err_set(err, dr, "delete agentsession %s (Replace): %s", victim,
                                ke.e.msg);
                    goto out;
                }
                char *n2 = xasprintf("agentsession %s deleted for slot %s (concurrencyPolicy "
                                     "Replace)",
                                     victim, local);
                event(t, obj, "Normal", "SessionReplaced", n2);
                free(n2);
            }
        }
        payload = cJSON_CreateObject();
        json_add_string(payload, "scheduledTime", local);
        struct tern_err me = {0};
        if (tmap_render(ts->objective, payload, SESSION_MAX_OBJECTIVE, "spec.objective",
                        &objective, &me) ||
            (ts->context && tmap_render(ts->context, payload, SESSION_MAX_CONTEXT_TEXT,
                                        "spec.context", &context, &me))) {
            note = xasprintf("slot %s: %s (a schedule's placeholders: {{ scheduledTime }}); no "
                             "session",
                             local, me.msg);
            event(t, obj, "Warning", "MappingFailed", note);
            change_count(c, "Malformed");
            set_time(c, "lastScheduleTime", out.slot);
            break;
        }
        char utc[32];
        sname = tspec_schedule_session_name(ts->name, out.slot);
        session = tspec_session(ts, sname, objective, context, "schedule", TSPEC_ANN_SCHEDULED,
                                conditions_time(out.slot, utc));
        struct kclient_err ke = {0};
        int cr = kclient_create(kc, &session_gvr, o->ns, session, NULL, &ke);
        if (cr == 0) {
            note = xasprintf("slot %s: agentsession %s", local, sname);
            event(t, obj, "Normal", "SessionCreated", note);
            change_count(c, "Created");
            change_set(c, "lastSession", cJSON_CreateString(sname));
            set_time(c, "lastFireTime", now);
            if (t->cfg.metrics) {
                char *l = metrics_labels("source", "schedule", NULL);
                metrics_add(t->cfg.metrics, "tern_trigger_sessions_created_total", l, 1);
                free(l);
                l = metrics_labels("outcome", "Created", NULL);
                metrics_add(t->cfg.metrics, "tern_trigger_schedule_slots_total", l, 1);
                free(l);
            }
        } else if (ke.http_status != 409) {
            r = err_set(err, cr, "create agentsession %s: %s", sname, ke.e.msg);
            goto out;
        } else {
            /* 409: an earlier pass created it and did not get to record the
             * slot, or the name is someone else's */
            cJSON *have = NULL;
            struct kclient_err ge = {0};
            int gr = kclient_get(kc, &session_gvr, o->ns, sname, &have, &ge);
            const char *tl = label_of(have, TSPEC_LABEL_TRIGGER);
            bool ours = gr == 0 && tl && strcmp(tl, ts->name) == 0;
            cJSON_Delete(have);
            if (gr && gr != TERN_ENOTFOUND) {
                r = err_set(err, gr, "get agentsession %s: %s", sname, ge.e.msg);
                goto out;
            }
            if (!ours) {
                note = xasprintf("slot %s: agentsession %s exists and is not this trigger's; "
                                 "no session for this slot",
                                 local, sname);
                event(t, obj, "Warning", "NameInUse", note);
                change_count(c, "Conflict");
            }
        }
        set_time(c, "lastScheduleTime", out.slot);
        break;
    }
    }
    if (out.next > 0)
        *ret_requeue = out.next - now + 1;
out:
    free(note);
    free(objective);
    free(context);
    free(sname);
    cJSON_Delete(payload);
    cJSON_Delete(session);
    tzwin_zone_done(&z);
    return r;
}

int tctl_reconcile(struct tctl *t, const char *key, int64_t *ret_requeue, struct tern_err *err)
{
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = xstrndup(key, (size_t)(slash - key));
    const char *name = slash + 1;
    cJSON *obj = informer_get(t->triggers, ns, name);
    struct tspec *ts = NULL;
    struct owned o = {.ns = ns, .name = name};
    struct status_change c;
    struct kclient *kc = NULL;
    int r = 0;
    change_init(&c);
    *ret_requeue = 0;
    if (!obj)
        goto out; /* deleted: its sessions go with it (ownerReferences) */
    if (json_get(json_get(obj, "metadata"), "deletionTimestamp"))
        goto out;
    kc = kclient_new(t->cfg.kube, NULL);
    int64_t gen = 0, now = now_s(t);
    json_get_int64(json_get(obj, "metadata"), "", "generation", JSON_OPTIONAL, &gen, NULL);
    struct tern_err verr = {0};
    if (tspec_parse(obj, &ts, &verr)) {
        const cJSON *oc = conditions_find(json_get(json_get(obj, "status"), "conditions"), "Ready");
        const cJSON *om = json_get(oc, "message");
        if (!cJSON_IsString(om) || strcmp(om->valuestring, verr.msg) != 0)
            event(t, obj, "Warning", "InvalidSpec", verr.msg);
        set_ready(&c, obj, gen, now, false, "InvalidSpec", verr.msg);
        json_add_int64(c.set, "observedGeneration", gen);
        r = write_status(kc, ns, name, &c, err);
        goto out;
    }
    o.uid = ts->uid;
    informer_each(t->sessions, collect_owned, &o);
    set_ready(&c, obj, gen, now, true, "Ready",
              ts->suspend ? "suspended: no sessions start" : "sessions start from this trigger");
    json_add_int64(c.set, "observedGeneration", gen);
    if (ts->webhook.set) {
        char *p = xasprintf("/hooks/%s/%s", ns, name);
        change_set(&c, "webhookPath", cJSON_CreateString(p));
        free(p);
    }
    if (ts->schedule.set && (r = schedule_pass(t, kc, obj, ts, &o, &c, ret_requeue, err)))
        goto out;
    prune_history(t, kc, ts, &o);
    cJSON *active = cJSON_CreateArray();
    for (size_t i = 0; i < o.n; i++)
        if (!finished(o.items[i]) && meta_s(o.items[i], "name"))
            cJSON_AddItemToArray(active, cJSON_CreateString(meta_s(o.items[i], "name")));
    change_set(&c, "active", active);
    r = write_status(kc, ns, name, &c, err);
out:
    for (size_t i = 0; i < o.n; i++)
        cJSON_Delete(o.items[i]);
    free(o.items);
    change_done(&c);
    tspec_free(ts);
    kclient_free(kc);
    cJSON_Delete(obj);
    free(ns);
    return r;
}

/* ---- the webhook receiver ------------------------------------------------- */

static const char *req_header(void *ctx, const char *name)
{
    return endpoint_header(ctx, name);
}

static bool path_part_ok(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
              s[i] == '.'))
            return false;
    return true;
}

static void count_delivery(struct tctl *t, const char *outcome)
{
    if (!t->cfg.metrics)
        return;
    char *l = metrics_labels("outcome", outcome, NULL);
    metrics_add(t->cfg.metrics, "tern_trigger_deliveries_total", l, 1);
    free(l);
}

static int answer(struct buf *body, int status, const char *outcome, const char *session,
                  const char *message)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "outcome", outcome);
    if (session)
        json_add_string(o, "session", session);
    json_add_string(o, "message", message ? message : "");
    char *s = json_print(o);
    buf_puts(body, s);
    buf_putc(body, '\n');
    free(s);
    cJSON_Delete(o);
    return status;
}

/* The Secret's key: 0 and *ret / *ret_len, or a negative code with what went
 * wrong in why (never the key). */
static int secret_key(struct kclient *kc, const char *ns, const struct tspec *ts,
                      unsigned char **ret, size_t *ret_len, char *why, size_t whylen)
{
    cJSON *sec = NULL;
    struct kclient_err ke = {0};
    int r = kclient_get(kc, &secret_gvr, ns, ts->webhook.secret_name, &sec, &ke);
    if (r) {
        snprintf(why, whylen, "Secret %.253s: %.200s", ts->webhook.secret_name,
                 r == TERN_ENOTFOUND ? "not found" : ke.e.msg);
        return r;
    }
    const cJSON *v = json_get(json_get(sec, "data"), ts->webhook.secret_key);
    r = -ENOENT;
    if (!cJSON_IsString(v)) {
        snprintf(why, whylen, "Secret %s has no key %s", ts->webhook.secret_name,
                 ts->webhook.secret_key);
    } else if (strlen(v->valuestring) > TERN_WEBHOOK_MAX_SECRET * 2 ||
               base64_decode(v->valuestring, strlen(v->valuestring), ret, ret_len) ||
               *ret_len == 0) {
        snprintf(why, whylen, "Secret %s key %s is not a usable key (1..%d bytes)",
                 ts->webhook.secret_name, ts->webhook.secret_key, TERN_WEBHOOK_MAX_SECRET);
        r = -EINVAL;
    } else {
        r = 0;
    }
    cJSON_Delete(sec);
    return r;
}

int tctl_webhook(void *ctx, const struct endpoint_request *req, struct buf *body,
                 const char **content_type)
{
    struct tctl *t = ctx;
    *content_type = "application/json";
    const char *p = req->path;
    char *ns = NULL, *name = NULL;
    cJSON *obj = NULL;
    struct tspec *ts = NULL;
    struct kclient *kc = NULL;
    unsigned char *key = NULL;
    size_t keylen = 0;
    struct webhook_result wr = {0};
    struct status_change c;
    change_init(&c);
    int status;
    if (strcmp(p, "/healthz") == 0) {
        status = answer(body, 200, "Healthy", NULL, "ok");
        goto out;
    }
    const char *prefix = "/hooks/";
    const char *a = strncmp(p, prefix, strlen(prefix)) == 0 ? p + strlen(prefix) : NULL;
    const char *sl = a ? strchr(a, '/') : NULL;
    if (!sl || !path_part_ok(a, (size_t)(sl - a)) || !path_part_ok(sl + 1, strlen(sl + 1))) {
        count_delivery(t, "NotFound");
        status = answer(body, 404, "NotFound", NULL, "POST /hooks/<namespace>/<agenttrigger>");
        goto out;
    }
    ns = xstrndup(a, (size_t)(sl - a));
    name = xstrdup(sl + 1);
    if (strcmp(req->method, "POST") != 0) {
        status = answer(body, 405, "MethodNotAllowed", NULL, "deliveries are POSTed");
        goto out;
    }
    if (!tctl_synced(t)) {
        status = answer(body, 503, "NotReady", NULL, "the operator is starting; retry");
        goto out;
    }
    obj = informer_get(t->triggers, ns, name);
    struct tern_err pe = {0};
    if (!obj || tspec_parse(obj, &ts, &pe) || !ts->webhook.set) {
        count_delivery(t, "NotFound");
        status = answer(body, obj && !ts ? 503 : 404, "NotFound", NULL,
                        obj && !ts ? "the agenttrigger's spec is invalid (see its status)"
                                   : "no agenttrigger with a webhook here");
        goto out;
    }
    kc = kclient_new(t->cfg.kube, NULL);
    char why[512];
    if (!req->body_too_large && secret_key(kc, ns, ts, &key, &keylen, why, sizeof why)) {
        event(t, obj, "Warning", "SecretNotFound", why);
        count_delivery(t, "SecretNotFound");
        change_count(&c, "SecretNotFound");
        write_status(kc, ns, name, &c, &pe);
        status = answer(body, 503, "SecretNotFound", NULL, why);
        goto out;
    }
    struct webhook_delivery d = {.body = req->body,
                                 .len = req->body_len,
                                 .too_large = req->body_too_large,
                                 .header = req_header,
                                 .hctx = (void *)req};
    webhook_decide(ts, key, keylen, &d, &wr);
    const char *outcome = webhook_outcome_name(wr.outcome);
    if (wr.delivery_id)
        change_set(&c, "lastDelivery", cJSON_CreateString(wr.delivery_id));
    if (wr.outcome != WEBHOOK_CREATED) {
        event(t, obj, wr.outcome == WEBHOOK_FILTERED ? "Normal" : "Warning", wr.reason,
              wr.message);
        count_delivery(t, outcome);
        change_count(&c, outcome);
        write_status(kc, ns, name, &c, &pe);
        status = answer(body, wr.http_status, outcome, NULL, wr.message);
        goto out;
    }
    if (t->cfg.fault == TCTL_FAULT_EXIT_BEFORE_CREATE) {
        logf_(t, "warn", name, "fault: exit before create", wr.session_name);
        _exit(3);
    }
    struct kclient_err ke = {0};
    int r = kclient_create(kc, &session_gvr, ns, wr.session, NULL, &ke);
    if (t->cfg.fault == TCTL_FAULT_EXIT_AFTER_CREATE) {
        logf_(t, "warn", name, "fault: exit after create", wr.session_name);
        _exit(3);
    }
    if (r == 0) {
        event(t, obj, "Normal", "SessionCreated", wr.message);
        count_delivery(t, "Created");
        change_count(&c, "Created");
        change_set(&c, "lastSession", cJSON_CreateString(wr.session_name));
        set_time(&c, "lastFireTime", now_s(t));
        if (t->cfg.metrics) {
            char *l = metrics_labels("source", "webhook", NULL);
            metrics_add(t->cfg.metrics, "tern_trigger_sessions_created_total", l, 1);
            free(l);
        }
        write_status(kc, ns, name, &c, &pe);
        status = answer(body, 201, "Created", wr.session_name, wr.message);
        goto out;
    }
    if (ke.http_status == 409) {
        /* the name is taken: by this delivery's session (a redelivery, a
         * retry, another replica) or by something else */
        cJSON *have = NULL;
        struct kclient_err ge = {0};
        int gr = kclient_get(kc, &session_gvr, ns, wr.session_name, &have, &ge);
        const char *tl = label_of(have, TSPEC_LABEL_TRIGGER);
        const cJSON *dv =
            json_get(json_get(json_get(have, "metadata"), "annotations"), TSPEC_ANN_DELIVERY);
        bool same = gr == 0 && tl && strcmp(tl, name) == 0 && cJSON_IsString(dv) &&
                    strcmp(dv->valuestring, wr.delivery_id) == 0;
        cJSON_Delete(have);
        if (same) {
            char *m = xasprintf("delivery %s: agentsession %s already exists; nothing created",
                                wr.delivery_id, wr.session_name);
            event(t, obj, "Normal", "Duplicate", m);
            count_delivery(t, "Duplicate");
            change_count(&c, "Duplicate");
            write_status(kc, ns, name, &c, &pe);
            status = answer(body, 200, "Duplicate", wr.session_name, m);
            free(m);
            goto out;
        }
        if (gr == 0) {
            char *m = xasprintf("delivery %s: agentsession %s exists and is not this delivery's; "
                                "nothing created",
                                wr.delivery_id, wr.session_name);
            event(t, obj, "Warning", "NameInUse", m);
            count_delivery(t, "Conflict");
            change_count(&c, "Conflict");
            write_status(kc, ns, name, &c, &pe);
            status = answer(body, 409, "Conflict", NULL, m);
            free(m);
            goto out;
        }
    }
    char *m = xasprintf("delivery %s: creating agentsession %s failed (%s); redeliver",
                        wr.delivery_id, wr.session_name, ke.e.msg);
    event(t, obj, "Warning", "CreateFailed", m);
    count_delivery(t, "Error");
    change_count(&c, "Error");
    write_status(kc, ns, name, &c, &pe);
    status = answer(body, 503, "Error", NULL, m);
    free(m);
out:
    change_done(&c);
    webhook_result_done(&wr);
    if (key) {
        OPENSSL_cleanse(key, keylen);
        free(key);
    }
    kclient_free(kc);
    tspec_free(ts);
    cJSON_Delete(obj);
    free(ns);
    free(name);
    return status;
}
