/* controller.c - the operator's shell: observe, decide, apply. See
 * controller.h, reconcile.h and docs/operator.md. */
#include "controller.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/tlog.h"
#include "base/limits.h"
#include "controller/artstore.h"
#include "controller/budgets.h"
#include "controller/conditions.h"
#include "controller/observe.h"
#include "controller/prices.h"
#include "controller/reconcile.h"
#include "controller/refs.h"
#include "controller/sumcache.h"
#include "journal/journal.h"
#include "json/json.h"
#include "kube/informer.h"
#include "kube/kclient.h"
#include "kube/kmap.h"
#include "kube/workqueue.h"
#include "memory/memprop.h"
#include "spec/template.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum watched {
    W_SESSIONS = 0,
    W_PODS,
    W_JOBS,
    W_PVCS,
    W_SECRETS,
    W_CONFIGMAPS,
    W_NETPOLS,
    W_COUNT
};

static const struct kgvr gvrs[W_COUNT] = {
    [W_SESSIONS] = {"tern.dev", "v1alpha1", "agentsessions"},
    [W_PODS] = {"", "v1", "pods"},
    [W_JOBS] = {"batch", "v1", "jobs"},
    [W_PVCS] = {"", "v1", "persistentvolumeclaims"},
    [W_SECRETS] = {"", "v1", "secrets"},
    [W_CONFIGMAPS] = {"", "v1", "configmaps"},
    [W_NETPOLS] = {"networking.k8s.io", "v1", "networkpolicies"},
};

/* Tests only (controller_config.test_runner_hook "SESSION=SPEC"): a turn
 * Job of SESSION gets TERN_TEST_HOOK=SPEC in its first container. */
static void hook_job(const char *hook, cJSON *job)
{
    const char *eq = hook ? strchr(hook, '=') : NULL;
    if (!eq)
        return;
    cJSON *spec = (cJSON *)json_get(json_get(json_get(job, "spec"), "template"), "spec");
    cJSON *ctr = cJSON_GetArrayItem((cJSON *)json_get(spec, "containers"), 0);
    cJSON *env = (cJSON *)json_get(ctr, "env");
    bool mine = false;
    for (const cJSON *e = cJSON_IsArray(env) ? env->child : NULL; e; e = e->next) {
        const cJSON *n = json_get(e, "name"), *v = json_get(e, "value");
        if (cJSON_IsString(n) && cJSON_IsString(v) && strcmp(n->valuestring, "TERN_SESSION") == 0)
            mine = strlen(v->valuestring) == (size_t)(eq - hook) &&
                   strncmp(v->valuestring, hook, (size_t)(eq - hook)) == 0;
    }
    if (!mine)
        return;
    cJSON *e = cJSON_CreateObject();
    json_add_string(e, "name", "TERN_TEST_HOOK");
    json_add_string(e, "value", eq + 1);
    cJSON_AddItemToArray(env, e);
}

/* ---- what the caches keep ---- */

/* Only the metadata the controller reads: identity, labels, owners,
 * deletion; no annotations (but the sandbox hash of pods), no managed
 * fields (dropped by the informer). */
static void trim_metadata(cJSON *obj, bool keep_annotations)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    static const char *const keep[] = {"name",          "namespace", "uid",
                                       "resourceVersion", "labels",  "ownerReferences",
                                       "deletionTimestamp", "generation", "annotations"};
    cJSON *it = md ? md->child : NULL;
    while (it) {
        cJSON *next = it->next;
        bool k = false;
        for (size_t i = 0; i < sizeof keep / sizeof keep[0] && !k; i++)
            k = it->string && strcmp(it->string, keep[i]) == 0 &&
                (keep_annotations || strcmp(keep[i], "annotations") != 0);
        if (!k)
            cJSON_Delete(cJSON_DetachItemViaPointer(md, it));
        it = next;
    }
}

/* For children the reconcile only needs to know exist: name, uid,
 * resourceVersion, deletion, the session label (enqueue_for) and the
 * owners' UIDs (the informer's index); a few hundred bytes each instead of
 * the whole metadata (at 10,000 sessions, four such children each were a
 * third of the operator's memory). */
static void trim_to_existence(cJSON *obj)
{
    trim_metadata(obj, false);
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    cJSON_DeleteItemFromObjectCaseSensitive(md, "generation");
    cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
    for (cJSON *l = labels ? labels->child : NULL, *next; l; l = next) {
        next = l->next;
        if (!l->string || strcmp(l->string, CHILDREN_LABEL_SESSION) != 0)
            cJSON_Delete(cJSON_DetachItemViaPointer(labels, l));
    }
    cJSON *ref;
    cJSON_ArrayForEach(ref, cJSON_GetObjectItemCaseSensitive(md, "ownerReferences"))
    {
        for (cJSON *f = ref->child, *next; f; f = next) {
            next = f->next;
            if (!f->string || strcmp(f->string, "uid") != 0)
                cJSON_Delete(cJSON_DetachItemViaPointer(ref, f));
        }
    }
    for (cJSON *it = obj->child, *next; it; it = next) {
        next = it->next;
        if (!it->string || strcmp(it->string, "metadata") != 0)
            cJSON_Delete(cJSON_DetachItemViaPointer(obj, it));
    }
}

/* The cache of a watched kind keeps what the reconcile reads (10,000
 * sessions' children are most of the operator's memory): sessions whole
 * but kubectl's last-applied copy of their spec; pods and Jobs their
 * metadata and status (no spec); claims, Secrets and NetworkPolicies
 * only that they exist (trim_to_existence); ConfigMaps their metadata
 * (never a Secret's data). */
static void trim_cached(void *ctx, cJSON *obj)
{
    enum watched w = (enum watched)(intptr_t)ctx;
    switch (w) {
    case W_SESSIONS: {
        cJSON *ann = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "annotations");
        if (cJSON_IsObject(ann))
            cJSON_DeleteItemFromObjectCaseSensitive(
                ann, "kubectl.kubernetes.io/last-applied-configuration");
        break;
    }
    case W_PODS: {
        trim_metadata(obj, true);
        cJSON *ann = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "annotations");
        for (cJSON *a = ann ? ann->child : NULL, *next; a; a = next) {
            next = a->next;
            if (!a->string || strcmp(a->string, CHILDREN_ANN_SANDBOX_HASH) != 0)
                cJSON_Delete(cJSON_DetachItemViaPointer(ann, a));
        }
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "spec");
        break;
    }
    case W_JOBS: {
        trim_metadata(obj, false);
        /* of the spec only suspend (a file viewer waits for its children) */
        cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
        bool suspended = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "suspend"));
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "spec");
        if (suspended)
            cJSON_AddTrueToObject(cJSON_AddObjectToObject(obj, "spec"), "suspend");
        break;
    }
    case W_PVCS:
    case W_SECRETS:
    case W_NETPOLS:
        trim_to_existence(obj);
        break;
    default: {
        /* a retained artifact set keeps its expiry (artifacts_expire) */
        const cJSON *role = json_get(json_get(json_get(obj, "metadata"), "labels"),
                                     CHILDREN_LABEL_ROLE);
        bool art = w == W_CONFIGMAPS && cJSON_IsString(role) &&
                   strcmp(role->valuestring, ARTSTORE_ROLE) == 0;
        trim_metadata(obj, art);
        cJSON *ann = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "annotations");
        for (cJSON *a = art && ann ? ann->child : NULL, *next; a; a = next) {
            next = a->next;
            if (!a->string || strcmp(a->string, ARTSTORE_ANN_EXPIRES) != 0)
                cJSON_Delete(cJSON_DetachItemViaPointer(ann, a));
        }
        for (cJSON *it = obj->child, *next; it; it = next) {
            next = it->next;
            if (!it->string || (strcmp(it->string, "metadata") != 0 &&
                                strcmp(it->string, "apiVersion") != 0 &&
                                strcmp(it->string, "kind") != 0))
                cJSON_Delete(cJSON_DetachItemViaPointer(obj, it));
        }
        break;
    }
    }
}

struct controller;

/* The sessions' census for /metrics, kept up to date by the sessions
 * informer's handlers (add what a new state contributes, subtract what the
 * old one did), so a scrape costs nothing per session. */
#define CENSUS_MAX_PHASES 16
struct census {
    pthread_mutex_t mu;
    struct {
        char name[32];
        int64_t n;
    } phases[CENSUS_MAX_PHASES];
    size_t nphases;
    int64_t turns, tools, prompt, completion, waiting;
};

struct handler_ctx {
    struct controller *c;
    enum watched w;
};

struct worker {
    struct controller *c;
    pthread_t thread;
    struct kclient *kc;
};

struct controller {
    struct controller_config cfg;
    char *namespace;
    struct informer *inf[W_COUNT];
    struct handler_ctx hctx[W_COUNT];
    struct workqueue *q;
    struct worker *workers;
    int nworkers;
    double started_s;          /* mono_seconds() at controller_start */
    atomic_bool sync_told;     /* tern_cache_sync_seconds set */
    bool workers_running;
    pthread_mutex_t workers_mu;
    pthread_t sum_thread;
    bool sum_started;
    pthread_t sweep_thread; /* expired retained artifact sets */
    bool sweep_started;
    struct kmap *persist_tries; /* "uid/turn/request" -> failed tries (int *) */
    atomic_bool stop;
    pthread_mutex_t mu; /* guards uid_to_key and key_to_uid */
    struct kmap *uid_to_key;
    struct kmap *key_to_uid; /* "ns/name" -> uid (for reading summaries ahead) */
    struct sumcache *sums;   /* journal summaries read ahead (sumcache.h) */
    struct kclient *kc; /* for controller_reconcile on the caller's thread */
    struct prices *prices;
    struct budgets *budgets; /* AgentBudgets (controller/budgets.h) */
    struct census census;    /* kept by the sessions informer's handlers */
};

/* ---- enqueueing ------------------------------------------------------- */

static const char *meta_str(const cJSON *obj, const char *key)
{
    const cJSON *v = json_get(json_get(obj, "metadata"), key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *label(const cJSON *obj, const char *key)
{
    const cJSON *v = json_get(json_get(json_get(obj, "metadata"), "labels"), key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *annotation(const cJSON *obj, const char *key)
{
    const cJSON *v = json_get(json_get(json_get(obj, "metadata"), "annotations"), key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool streq_str(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static bool streq_rv(const cJSON *a, const cJSON *b)
{
    const char *x = meta_str(a, "resourceVersion"), *y = meta_str(b, "resourceVersion");
    return x && y && strcmp(x, y) == 0;
}

/* Whether a child's update changed only its resourceVersion in what the
 * cache keeps (trim_cached): a claim being bound, a Secret's data or an
 * annotation nobody reads. The reconcile cannot decide differently, so it is
 * not asked to (with 10,000 parked sessions, claims binding one after
 * another kept the queue busy for minutes after a start). */
static bool same_but_version(const cJSON *a, const cJSON *b)
{
    cJSON *x = json_dup(a), *y = json_dup(b);
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(x, "metadata"),
                                            "resourceVersion");
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(y, "metadata"),
                                            "resourceVersion");
    bool same = json_equal(x, y);
    cJSON_Delete(x);
    cJSON_Delete(y);
    return same;
}

static void enqueue_for(struct controller *c, enum watched w, const cJSON *obj, bool deleted)
{
    const char *ns = meta_str(obj, "namespace");
    if (w == W_SESSIONS) {
        const char *name = meta_str(obj, "name");
        const char *uid = meta_str(obj, "uid");
        if (!ns || !name)
            return;
        char *key = xasprintf("%s/%s", ns, name);
        if (uid) {
            pthread_mutex_lock(&c->mu);
            free(deleted ? kmap_del(c->uid_to_key, uid)
                         : kmap_put(c->uid_to_key, uid, xstrdup(key)));
            const char *known = kmap_get(c->key_to_uid, key);
            if (!deleted)
                free(kmap_put(c->key_to_uid, key, xstrdup(uid)));
            else if (known && strcmp(known, uid) == 0) /* (not a new one's of that name) */
                free(kmap_del(c->key_to_uid, key));
            pthread_mutex_unlock(&c->mu);
        }
        workqueue_add(c->q, key);
        free(key);
        /* a fork's progress matters to its parent, the parent's sandbox to
         * its forks */
        const char *parent_uid = label(obj, RECONCILE_LABEL_FORK_OF);
        if (parent_uid) {
            pthread_mutex_lock(&c->mu);
            const char *pk = kmap_get(c->uid_to_key, parent_uid);
            char *copy = pk ? xstrdup(pk) : NULL;
            pthread_mutex_unlock(&c->mu);
            if (copy)
                workqueue_add(c->q, copy);
            free(copy);
        }
        const cJSON *f;
        cJSON_ArrayForEach(f, json_get(json_get(obj, "status"), "forks"))
        {
            if (!cJSON_IsString(f))
                continue;
            char *fk = xasprintf("%s/%s", ns, f->valuestring);
            workqueue_add(c->q, fk);
            free(fk);
        }
        return;
    }
    const char *session = label(obj, CHILDREN_LABEL_SESSION);
    if (!ns || !session)
        return;
    char *key = xasprintf("%s/%s", ns, session);
    workqueue_add(c->q, key);
    free(key);
}

/* For the budget controller: a session to reconcile. */
static void enqueue_key(void *ctx, const char *key)
{
    struct controller *c = ctx;
    workqueue_add(c->q, key);
}

static void census_count(struct census *cs, const cJSON *obj, int sign);

static void on_add(void *ctx, const cJSON *obj)
{
    struct handler_ctx *h = ctx;
    if (h->w == W_SESSIONS)
        census_count(&h->c->census, obj, 1);
    enqueue_for(h->c, h->w, obj, false);
}

static void on_update(void *ctx, const cJSON *old_obj, const cJSON *new_obj)
{
    struct handler_ctx *h = ctx;
    /* skip updates that change nothing we decide on (resyncs) */
    if (old_obj != new_obj && streq_rv(old_obj, new_obj))
        return;
    if (old_obj != new_obj && h->w != W_SESSIONS && same_but_version(old_obj, new_obj))
        return;
    if (h->w == W_SESSIONS && old_obj != new_obj) {
        census_count(&h->c->census, old_obj, -1);
        census_count(&h->c->census, new_obj, 1);
    }
    enqueue_for(h->c, h->w, new_obj, false);
}

static void on_delete(void *ctx, const cJSON *obj)
{
    struct handler_ctx *h = ctx;
    if (h->w == W_SESSIONS)
        census_count(&h->c->census, obj, -1);
    enqueue_for(h->c, h->w, obj, true);
}

/* ---- the summary watch ---------------------------------------------------- */

/* Keys look like /tern/v1/s/<uid>/sum. */
static int on_summary_batch(void *ctx, const struct etcd_watch_batch *b)
{
    struct controller *c = ctx;
    static const char prefix[] = "/tern/v1/s/";
    for (size_t i = 0; i < b->nevents; i++) {
        const char *k = b->events[i].kv.key;
        size_t n = b->events[i].kv.key_len;
        if (n < sizeof prefix + 4 || strncmp(k, prefix, sizeof prefix - 1) != 0 ||
            strcmp(k + n - 4, "/sum") != 0)
            continue;
        char *uid = xstrndup(k + sizeof prefix - 1, n - (sizeof prefix - 1) - 4);
        sumcache_changed(c->sums, uid, b->events[i].kv.mod_revision);
        pthread_mutex_lock(&c->mu);
        const char *key = kmap_get(c->uid_to_key, uid);
        char *copy = key ? xstrdup(key) : NULL;
        pthread_mutex_unlock(&c->mu);
        if (copy)
            workqueue_add(c->q, copy);
        free(copy);
        free(uid);
    }
    return atomic_load(&c->stop) ? -ECANCELED : 0;
}

static void *summary_watch(void *arg)
{
    struct controller *c = arg;
    long backoff_ms = 200;
    while (!atomic_load(&c->stop)) {
        int64_t rev = 0;
        /* the revision read within the watched prefix: on a locked journal
         * the operator's role covers /tern/v1/s/ only, and a range outside
         * it is refused (the watch then never started: a pass that only
         * the journal triggers, such as an approval timeout, never came) */
        const struct etcd_keys keys = {.key = "/tern/v1/s/", .prefix = true};
        if (etcd_revision_in(c->cfg.etcd, &keys, &rev, NULL) == 0) {
            struct etcd_watch_req req = {
                .keys = keys,
                .start_revision = rev + 1,
                .progress_notify = true,
                .give_up_ms = -1,
            };
            sumcache_watch_started(c->sums, rev);
            int r = etcd_watch(c->cfg.etcd, &req, on_summary_batch, c, &c->stop, NULL, NULL);
            sumcache_watch_stopped(c->sums);
            if (r == -ECANCELED)
                break;
            if (c->cfg.metrics)
                metrics_add(c->cfg.metrics, "tern_summary_watch_restarts_total", "", 1);
            /* compacted or failed: everything may have changed meanwhile */
            for (int w = W_SESSIONS; w <= W_SESSIONS; w++)
                informer_resync(c->inf[w]);
            backoff_ms = 200;
        }
        for (long slept = 0; slept < backoff_ms && !atomic_load(&c->stop); slept += 50) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
        backoff_ms = backoff_ms * 2 > 5000 ? 5000 : backoff_ms * 2;
    }
    return NULL;
}

/* ---- observing ---------------------------------------------------------- */

struct owned_scan {
    const char *want;          /* a name to find, or NULL */
    bool found;
    cJSON *obj;                /* copy of the found object */
    /* jobs: the highest turn */
    const char *session;
    int64_t best_turn;
    cJSON *best;
};

static int find_named(void *ctx, const cJSON *obj)
{
    struct owned_scan *s = ctx;
    const char *name = meta_str(obj, "name");
    if (name && strcmp(name, s->want) == 0) {
        s->found = true;
        s->obj = json_dup(obj);
        return 1;
    }
    return 0;
}

static bool owned_has(struct controller *c, enum watched w, const char *uid, const char *name,
                      cJSON **ret_obj)
{
    struct owned_scan s = {.want = name};
    informer_each_owned(c->inf[w], uid, find_named, &s);
    if (ret_obj)
        *ret_obj = s.obj;
    else
        cJSON_Delete(s.obj);
    return s.found;
}

/* The session's journal user and the Secret its runners mount
 * (controller/jaccess.h): made before a turn Job is created, kept while
 * one runs or the sandbox pod is there (a turn may follow at once), and
 * removed, the user and then the Secret, while the session is parked (no
 * Job, no pod, none about to be made), so parked sessions cost etcd's auth
 * nothing and hold no credentials; the next turn gets a new password. */
static int journal_door(struct controller *c, struct kclient *kc, const struct session_spec *spec,
                        const char *name, const char *uid, bool busy,
                        const struct reconcile_output *out, struct tern_err *err)
{
    bool needed = busy;
    for (size_t i = 0; i < out->nactions && !needed; i++) {
        const struct reconcile_action *a = &out->actions[i];
        needed = a->kind == RA_CREATE && a->resource &&
                 (!strcmp(a->resource, "batch/v1/jobs") || !strcmp(a->resource, "v1/pods"));
    }
    char *jn = children_name(name, "journal");
    cJSON *js = NULL;
    bool have = owned_has(c, W_SECRETS, uid, jn, &js);
    int r;
    if (needed) {
        r = jaccess_ensure(c->cfg.jaccess, kc, spec, js, err);
    } else {
        /* parked: the user first, then its Secret (the next turn makes
         * both anew with a new password, the Secret first) */
        r = jaccess_park(c->cfg.jaccess, uid, err);
        if (!r && have) {
            struct kclient_err ke = {0};
            struct kclient_delete_opts o = {.propagation = "Background"};
            r = kclient_delete(kc, &gvrs[W_SECRETS], spec->namespace, jn, &o, NULL, &ke);
            if (r == TERN_ENOTFOUND)
                r = 0;
            else if (r)
                err_set(err, r, "delete secret %s: %s", jn, ke.e.msg);
            else if (c->cfg.metrics)
                metrics_add(c->cfg.metrics, "tern_api_writes_total", "", 1);
        }
    }
    free(jn);
    cJSON_Delete(js);
    return r;
}

static bool owned_by(const cJSON *obj, const char *uid)
{
    const cJSON *ref;
    cJSON_ArrayForEach(ref, json_get(json_get(obj, "metadata"), "ownerReferences"))
    {
        const cJSON *u = json_get(ref, "uid");
        if (uid && cJSON_IsString(u) && strcmp(u->valuestring, uid) == 0)
            return true;
    }
    return false;
}

/* A decision to delete the NetworkPolicy was made on a cache without the
 * sandbox pod: before the walls go, the API is asked whether the pod is
 * there after all (created by a pass the cache has not caught up with);
 * if so, the decision is made again with it. One read per parking, as a
 * parked session's policy is gone afterwards. */
static int confirm_pod_gone(struct kclient *kc, const char *ns, const char *name,
                            const char *uid, cJSON **pod, struct reconcile_input *in,
                            struct reconcile_output *out, struct tern_err *err)
{
    bool deletes = false;
    for (size_t i = 0; i < out->nactions && !deletes; i++)
        deletes = out->actions[i].kind == RA_DELETE &&
                  !strcmp(out->actions[i].resource, "networking.k8s.io/v1/networkpolicies");
    if (!deletes || in->pod.exists)
        return 0;
    char *sb = children_name(name, "sandbox");
    cJSON *live = NULL;
    struct kclient_err ke = {0};
    int r = kclient_get(kc, &gvrs[W_PODS], ns, sb, &live, &ke);
    if (r == TERN_ENOTFOUND) {
        r = 0;
    } else if (r) {
        err_set(err, r, "get pod %s: %s", sb, ke.e.msg);
    } else if (owned_by(live, uid)) {
        cJSON_Delete(*pod);
        *pod = live;
        live = NULL;
        observe_pod(*pod, &in->pod);
        reconcile_output_done(out);
        reconcile_decide(in, out);
    }
    cJSON_Delete(live);
    free(sb);
    return r;
}

/* File viewer Jobs of a session (role viewer): one not finished, and the
 * name of one still suspended. */
struct viewer_scan {
    bool running;
    char *suspended;
};

static int scan_viewers(void *ctx, const cJSON *obj)
{
    struct viewer_scan *v = ctx;
    const char *role = label(obj, CHILDREN_LABEL_ROLE);
    if (!role || strcmp(role, "viewer") != 0)
        return 0;
    struct observed_job o;
    observe_job(obj, &o);
    if (o.complete || o.failed)
        return 0;
    v->running = true;
    const char *name = meta_str(obj, "name");
    if (!v->suspended && name && cJSON_IsTrue(json_get(json_get(obj, "spec"), "suspend")))
        v->suspended = xstrdup(name);
    return 0;
}

static int find_latest_job(void *ctx, const cJSON *obj)
{
    struct owned_scan *s = ctx;
    const char *t = label(obj, CHILDREN_LABEL_TURN);
    int64_t turn;
    if (!t || json_item_int64(json_get(json_get(json_get(obj, "metadata"), "labels"),
                                       CHILDREN_LABEL_TURN), &turn) != 0)
        return 0;
    if (turn > s->best_turn) {
        s->best_turn = turn;
        cJSON_Delete(s->best);
        s->best = json_dup(obj);
    }
    return 0;
}

struct fork_scan {
    const char *parent_uid;
    int copying;
};

/* Forks of parent_uid that have not finished copying: their Ready condition
 * says Forking, or they have no status yet. */
static int count_copying_forks(void *ctx, const cJSON *obj)
{
    struct fork_scan *fs = ctx;
    const char *p = label(obj, RECONCILE_LABEL_FORK_OF);
    if (!p || strcmp(p, fs->parent_uid) != 0)
        return 0;
    const cJSON *st = json_get(obj, "status");
    const cJSON *c;
    bool forking = !st;
    cJSON_ArrayForEach(c, json_get(st, "conditions"))
    {
        const cJSON *t = json_get(c, "type"), *r = json_get(c, "reason");
        if (cJSON_IsString(t) && strcmp(t->valuestring, "Ready") == 0 && cJSON_IsString(r) &&
            strcmp(r->valuestring, "Forking") == 0)
            forking = true;
    }
    if (forking)
        fs->copying++;
    return 0;
}

static int64_t parse_time(const char *s)
{
    /* RFC 3339 UTC "YYYY-MM-DDTHH:MM:SS[.frac]Z" */
    struct tm tm = {0};
    if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%S", &tm))
        return 0;
    return (int64_t)timegm(&tm);
}

static void observe_journal(const struct journal_summary *s, struct observed_journal *o)
{
    o->last_seq = s->last_seq;
    o->turn = s->turn;
    o->outcome = s->outcome && *s->outcome ? s->outcome : (s->outcome ? "" : NULL);
    o->intent_pending = s->intent;
    o->messages = s->messages;
    o->pending_id = s->pending.id;
    o->pending_tool = s->pending.tool;
    o->pending_summary = s->pending.summary;
    o->pending_requested_at = parse_time(s->pending.requested_at);
    o->last_decided_id = s->last_decided;
    o->updated_at = parse_time(s->updated);
    o->model_turns = s->usage.model_turns;
    o->tool_calls = s->usage.tool_calls;
    o->prompt_tokens = s->usage.prompt_tokens;
    o->completion_tokens = s->usage.completion_tokens;
    o->cost_micro_usd = s->usage.cost_micro_usd;
    o->result_summary = s->result;
    o->result_artifacts = s->artifacts;
    o->result_value = s->result_value;
    o->result_ref = s->result_ref;
    o->result_turn = s->result_turn;
    o->persisted = s->persisted;
    o->persist_request = s->persist_request;
    o->reason = s->reason;
    o->message = s->message;
    o->limit = s->limit;
    o->limit_used = s->limit_used;
    o->limit_max = s->limit_max;
    o->good_seq = s->good_seq;
    o->first_request = s->first_request;
    o->first_request_at = observe_time(s->first_request);
    o->memory = s->memory;
}

/* ---- applying --------------------------------------------------------- */

static const struct kgvr *gvr_of(const char *resource)
{
    static const struct {
        const char *name;
        enum watched w;
    } map[] = {
        {"v1/pods", W_PODS},
        {"batch/v1/jobs", W_JOBS},
        {"v1/persistentvolumeclaims", W_PVCS},
        {"v1/secrets", W_SECRETS},
        {"v1/configmaps", W_CONFIGMAPS},
        {"networking.k8s.io/v1/networkpolicies", W_NETPOLS},
        {"tern.dev/v1alpha1/agentsessions", W_SESSIONS},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i].name, resource) == 0)
            return &gvrs[map[i].w];
    return NULL;
}

/* A merge patch of metadata with the resourceVersion precondition; *rv is
 * updated to the patched object's resourceVersion. */
static int patch_meta(struct kclient *kc, const char *ns, const char *name, cJSON *meta_patch,
                      char **rv, struct tern_err *err)
{
    cJSON *patch = cJSON_CreateObject();
    json_add_string(meta_patch, "resourceVersion", *rv);
    cJSON_AddItemToObject(patch, "metadata", meta_patch);
    char *body = json_print(patch);
    cJSON_Delete(patch);
    cJSON *out = NULL;
    struct kclient_err ke = {0};
    int r = kclient_patch(kc, &gvrs[W_SESSIONS], ns, name, KCLIENT_PATCH_MERGE, body,
                          strlen(body), NULL, &out, &ke);
    free(body);
    if (r) {
        cJSON_Delete(out);
        return err_set(err, r, "patch %s/%s metadata: %s", ns, name, ke.e.msg);
    }
    const char *nrv = meta_str(out, "resourceVersion");
    if (nrv) {
        free(*rv);
        *rv = xstrdup(nrv);
    }
    cJSON_Delete(out);
    return 0;
}

static cJSON *finalizers_with(const cJSON *obj, bool with)
{
    cJSON *list = cJSON_CreateArray();
    const cJSON *f;
    cJSON_ArrayForEach(f, json_get(json_get(obj, "metadata"), "finalizers"))
    {
        if (cJSON_IsString(f) && strcmp(f->valuestring, RECONCILE_FINALIZER) != 0)
            cJSON_AddItemToArray(list, cJSON_CreateString(f->valuestring));
    }
    if (with)
        cJSON_AddItemToArray(list, cJSON_CreateString(RECONCILE_FINALIZER));
    return list;
}

static void record(struct controller *c, const cJSON *session, const struct reconcile_action *a)
{
    if (c->cfg.on_event) {
        char *key = informer_key(session);
        c->cfg.on_event(c->cfg.ctx, key ? key : "", a->event_type, a->reason, a->note);
        free(key);
    }
    if (!c->cfg.recorder)
        return;
    struct recorder_ref ref;
    recorder_ref_of(session, &ref);
    recorder_event(c->cfg.recorder, &ref, a->event_type, a->reason, "Reconcile", "%s", a->note);
}

/* ---- memory proposals -------------------------------------------------- */

static void memory_event(struct controller *c, const cJSON *session, const char *type,
                         const char *reason, const char *note)
{
    struct reconcile_action ev = {.kind = RA_EVENT, .event_type = (char *)type,
                                  .reason = (char *)reason, .note = (char *)note};
    record(c, session, &ev);
}

/* The trail entry of the memory ConfigMap cm for this proposal, if its
 * tern.dev/memory-history says it was applied (a copy, or NULL). */
static cJSON *memory_trail_find(const cJSON *cm, const char *session_key, const char *id)
{
    const char *h = NULL;
    const cJSON *anns = json_get(json_get(cm, "metadata"), "annotations");
    const cJSON *v = json_get(anns, CONTROLLER_ANN_MEMORY_HISTORY);
    if (cJSON_IsString(v))
        h = v->valuestring;
    cJSON *arr = NULL, *found = NULL;
    if (!h || json_parse(h, strlen(h), &arr, NULL) != 0)
        return NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        const cJSON *pid = json_get(e, "proposal"), *ses = json_get(e, "session");
        if (cJSON_IsString(pid) && cJSON_IsString(ses) && strcmp(pid->valuestring, id) == 0 &&
            strcmp(ses->valuestring, session_key) == 0)
            found = json_dup(e);
    }
    cJSON_Delete(arr);
    return found;
}

static void set_annotation(cJSON *obj, const char *key, const char *value)
{
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    cJSON *anns = cJSON_GetObjectItemCaseSensitive(meta, "annotations");
    if (!cJSON_IsObject(anns)) {
        cJSON_DeleteItemFromObjectCaseSensitive(meta, "annotations");
        anns = cJSON_AddObjectToObject(meta, "annotations");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(anns, key);
    cJSON_AddItemToObject(anns, key, cJSON_CreateString(value));
}

/* Applies an approved memory proposal (RA_MEMORY_APPLY) to the memory
 * ConfigMap and journals memory_applied: GET it; a trail entry for this
 * proposal (an application whose record a crash lost) -> Applied without
 * applying again; simple.md's sha256 not the proposal's base -> Conflict
 * (a Warning Event with both hashes); else PUT with the resourceVersion
 * precondition (a 409 is retried from a new GET next pass), the new
 * content and the annotation trail. */
static int memory_apply(struct controller *c, struct kclient *kc, const cJSON *session,
                        struct journal *j, const struct reconcile_action *a, struct tern_err *err)
{
    const char *ns = meta_str(session, "namespace"), *name = meta_str(session, "name");
    const cJSON *p = a->data;
    const char *id = a->key;
    const char *base = cJSON_IsString(json_get(p, "baseSha256"))
                           ? json_get(p, "baseSha256")->valuestring : "";
    const char *heading = cJSON_IsString(json_get(p, "heading"))
                              ? json_get(p, "heading")->valuestring : "";
    const char *content = cJSON_IsString(json_get(p, "content"))
                              ? json_get(p, "content")->valuestring : "";
    const char *by = cJSON_IsString(json_get(p, "decidedBy"))
                         ? json_get(p, "decidedBy")->valuestring : "";
    char *skey = xasprintf("%s/%s", ns, name);
    static const struct kgvr cm_gvr = {"", "v1", "configmaps"};
    cJSON *cm = NULL, *res = NULL, *trail = NULL, *d = cJSON_CreateObject();
    char *doc = NULL, *msg = NULL;
    struct kclient_err ke = {0};
    struct tern_err e = {0};
    bool conflict = false;
    json_add_string(d, "id", id);
    json_add_string(d, "configMap", a->name);
    int r = kclient_get(kc, &cm_gvr, ns, a->name, &cm, &ke);
    if (r == TERN_ENOTFOUND) {
        conflict = true;
        msg = xasprintf("memory ConfigMap %s/%s not found", ns, a->name);
        r = 0;
        goto record;
    }
    if (r) {
        r = err_set(err, r, "get configmap %s/%s: %s", ns, a->name, ke.e.msg);
        goto out;
    }
    if ((trail = memory_trail_find(cm, skey, id))) {
        /* applied before a crash lost its record: recorded, not applied again */
        const cJSON *prev = json_get(trail, "previousSha256"), *now = json_get(trail, "sha256");
        if (cJSON_IsString(prev))
            json_add_string(d, "previousSha256", prev->valuestring);
        if (cJSON_IsString(now))
            json_add_string(d, "sha256", now->valuestring);
        msg = xasprintf("applied to ConfigMap %s (found in its trail)", a->name);
        goto record;
    }
    const cJSON *data = json_get(cm, "data");
    const cJSON *cur = json_get(data, "simple.md");
    const char *text = cJSON_IsString(cur) ? cur->valuestring : "";
    char sha[65];
    memprop_sha256_hex(text, strlen(text), sha);
    json_add_string(d, "previousSha256", sha);
    if (strcmp(sha, base) != 0) {
        conflict = true;
        msg = xasprintf("simple.md of ConfigMap %s changed since the proposal was made: its "
                        "sha256 is %s, the proposal's base is %s; not applied (propose again "
                        "against the current file)",
                        a->name, sha, base);
        goto record;
    }
    if (memprop_replace_section(text, strlen(text), heading, content, &doc, &e)) {
        conflict = true;
        msg = xasprintf("the proposal does not apply to ConfigMap %s: %s", a->name, e.msg);
        goto record;
    }
    char after[65];
    memprop_sha256_hex(doc, strlen(doc), after);
    cJSON *obj = json_dup(cm);
    cJSON *od = cJSON_GetObjectItemCaseSensitive(obj, "data");
    if (!cJSON_IsObject(od)) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "data");
        od = cJSON_AddObjectToObject(obj, "data");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(od, "simple.md");
    cJSON_AddItemToObject(od, "simple.md", cJSON_CreateString(doc));
    /* the trail: the last application in plain annotations, the bounded history */
    char ts[32];
    set_annotation(obj, CONTROLLER_ANN_MEMORY_APPLIED, id);
    set_annotation(obj, CONTROLLER_ANN_MEMORY_SESSION, skey);
    set_annotation(obj, CONTROLLER_ANN_MEMORY_APPROVED_BY, by);
    set_annotation(obj, CONTROLLER_ANN_MEMORY_PREVIOUS, sha);
    cJSON *hist = NULL;
    const cJSON *hv = json_get(json_get(json_get(cm, "metadata"), "annotations"),
                               CONTROLLER_ANN_MEMORY_HISTORY);
    if (!cJSON_IsString(hv) ||
        json_parse(hv->valuestring, strlen(hv->valuestring), &hist, NULL) != 0 ||
        !cJSON_IsArray(hist)) {
        cJSON_Delete(hist);
        hist = cJSON_CreateArray();
    }
    while (cJSON_GetArraySize(hist) >= TERN_MEMORY_MAX_HISTORY)
        cJSON_DeleteItemFromArray(hist, 0);
    cJSON *h = cJSON_CreateObject();
    json_add_string(h, "proposal", id);
    json_add_string(h, "session", skey);
    json_add_string(h, "approvedBy", by);
    json_add_string(h, "previousSha256", sha);
    json_add_string(h, "sha256", after);
    json_add_string(h, "time", conditions_time((int64_t)time(NULL), ts));
    cJSON_AddItemToArray(hist, h);
    char *htxt = json_print(hist);
    cJSON_Delete(hist);
    set_annotation(obj, CONTROLLER_ANN_MEMORY_HISTORY, htxt);
    free(htxt);
    r = kclient_update(kc, &cm_gvr, ns, obj, &res, &ke);
    cJSON_Delete(obj);
    if (r) {
        r = err_set(err, r, "update configmap %s/%s: %s", ns, a->name, ke.e.msg);
        goto out;
    }
    json_add_string(d, "sha256", after);
    {
        /* test hook: a crash between the ConfigMap update and its record */
        const char *hook = getenv("TERN_TEST_HOOK");
        if (hook && strstr(hook, "operator_memory_applied"))
            raise(SIGKILL);
    }
    msg = xasprintf("applied to ConfigMap %s (sha256 %s -> %s)", a->name, sha, after);
record:
    json_add_string(d, "result", conflict ? "conflict" : "applied");
    json_add_string(d, "message", msg);
    {
        char *key = xasprintf("memory/%s/applied", id);
        struct journal_append_req req = {.type = JOURNAL_EV_MEMORY_APPLIED,
                                         .turn = a->turn,
                                         .key = key,
                                         .data = d};
        r = j ? journal_append(j, &req, NULL, err) : err_set(err, -EINVAL, "journal not open");
        if (r == TERN_EUNKNOWN) {
            bool committed = false;
            r = journal_resolve(j, &committed, NULL, err);
            if (!r && !committed)
                r = err_set(err, TERN_EUNKNOWN, "journal append of memory_applied not committed");
        }
        free(key);
    }
    if (!r) {
        char *note = xasprintf("memory proposal %s: %s", id, msg);
        memory_event(c, session, conflict ? "Warning" : "Normal",
                     conflict ? "MemoryConflict" : "MemoryApplied", note);
        free(note);
    }
out:
    cJSON_Delete(cm);
    cJSON_Delete(res);
    cJSON_Delete(trail);
    cJSON_Delete(d);
    free(doc);
    free(msg);
    free(skey);
    return r;
}

static int apply(struct controller *c, struct kclient *kc, const cJSON *session,
                 struct journal *j, const struct reconcile_output *out, struct tern_err *err)
{
    const char *ns = meta_str(session, "namespace"), *name = meta_str(session, "name");
    const char *uid = meta_str(session, "uid");
    char *rv = xstrdup(meta_str(session, "resourceVersion") ? meta_str(session, "resourceVersion")
                                                            : "");
    int r = 0, deferred = 0;
    struct tern_err deferred_err = {0};
    for (size_t i = 0; i < out->nactions && !r; i++) {
        const struct reconcile_action *a = &out->actions[i];
        struct kclient_err ke = {0};
        if (c->cfg.metrics && a->kind != RA_EVENT && a->kind != RA_JOURNAL_APPEND &&
            a->kind != RA_DELETE_JOURNAL && a->kind != RA_COPY_JOURNAL)
            metrics_add(c->cfg.metrics, "tern_api_writes_total", "", 1);
        switch (a->kind) {
        case RA_ADD_FINALIZER:
        case RA_REMOVE_FINALIZER: {
            /* the session's etcd user goes with it (also when the journal
             * is retained: nothing runs for it any more) */
            if (a->kind == RA_REMOVE_FINALIZER && c->cfg.jaccess &&
                (r = jaccess_revoke(c->cfg.jaccess, uid, err)))
                break;
            cJSON *m = cJSON_CreateObject();
            cJSON_AddItemToObject(m, "finalizers",
                                  finalizers_with(session, a->kind == RA_ADD_FINALIZER));
            r = patch_meta(kc, ns, name, m, &rv, err);
            if (r == TERN_ENOTFOUND && a->kind == RA_REMOVE_FINALIZER)
                r = 0; /* already gone */
            break;
        }
        case RA_DELETE_JOURNAL:
            r = journal_delete(c->cfg.etcd, uid, err);
            break;
        case RA_COPY_JOURNAL:
            /* resumable: a second call continues after the last copied seq */
            r = journal_copy_until(c->cfg.etcd, a->from_uid, uid, a->upto, NULL, err);
            break;
        case RA_JOURNAL_APPEND: {
            struct journal_append_req req = {
                .type = journal_type_parse(a->type_name),
                .type_name = a->type_name,
                .turn = a->turn,
                .key = a->key,
                .data = a->data,
            };
            if (!j) {
                r = err_set(err, -EINVAL, "journal not open");
                break;
            }
            r = journal_append(j, &req, NULL, err);
            if (r == TERN_EUNKNOWN) {
                bool committed = false;
                r = journal_resolve(j, &committed, NULL, err);
                if (!r && !committed)
                    r = err_set(err, TERN_EUNKNOWN, "journal append of %s not committed",
                                a->type_name);
            }
            break;
        }
        case RA_REMOVE_ANNOTATIONS: {
            cJSON *m = cJSON_CreateObject();
            cJSON *anns = cJSON_AddObjectToObject(m, "annotations");
            for (size_t k = 0; k < sizeof a->keys / sizeof a->keys[0] && a->keys[k]; k++)
                cJSON_AddNullToObject(anns, a->keys[k]);
            r = patch_meta(kc, ns, name, m, &rv, err);
            break;
        }
        case RA_CREATE: {
            const struct kgvr *g = gvr_of(a->resource);
            if (!g) {
                r = err_set(err, -EINVAL, "unknown resource %s", a->resource);
                break;
            }
            if (g == &gvrs[W_JOBS]) {
                budgets_decorate_job(c->budgets, a->object); /* the test clock, if on */
                hook_job(c->cfg.test_runner_hook, a->object); /* the runner's crash points */
            }
            r = kclient_create(kc, g, ns, a->object, NULL, &ke);
            if (r == -EEXIST && g == &gvrs[W_SESSIONS]) {
                /* a fork's child name: fine if it is this fork (a retry
                 * after a crash), else decided again once the informer has
                 * the other session (and the fork is refused) */
                cJSON *cur = NULL;
                struct kclient_err ge = {0};
                const char *child = meta_str(a->object, "name");
                r = kclient_get(kc, g, ns, child, &cur, &ge);
                const char *fo = label(cur, RECONCILE_LABEL_FORK_OF);
                if (r == 0 && !(fo && uid && strcmp(fo, uid) == 0))
                    r = err_set(err, TERN_ECONFLICT, "agentsession %s/%s exists and is not a "
                                "fork of %s", ns, child, name);
                else if (r)
                    err_set(err, r, "get agentsession %s/%s: %s", ns, child, ge.e.msg);
                cJSON_Delete(cur);
            } else if (r == -EEXIST)
                r = 0;
            else if (r)
                err_set(err, r, "create %s %s: %s", a->resource,
                        meta_str(a->object, "name"), ke.e.msg);
            break;
        }
        case RA_DELETE: {
            const struct kgvr *g = gvr_of(a->resource);
            struct kclient_delete_opts o = {.propagation = "Background"};
            r = g ? kclient_delete(kc, g, ns, a->name, &o, NULL, &ke) : -EINVAL;
            if (r == TERN_ENOTFOUND)
                r = 0;
            else if (r)
                err_set(err, r, "delete %s %s: %s", a->resource, a->name, ke.e.msg);
            break;
        }
        case RA_PATCH: {
            const struct kgvr *g = gvr_of(a->resource);
            char *body = json_print(a->data);
            r = g ? kclient_patch(kc, g, ns, a->name, KCLIENT_PATCH_MERGE, body, strlen(body),
                                  NULL, NULL, &ke)
                  : -EINVAL;
            free(body);
            if (r == TERN_ENOTFOUND)
                r = 0; /* gone meanwhile: nothing to resume */
            else if (r)
                err_set(err, r, "patch %s %s: %s", a->resource, a->name, ke.e.msg);
            break;
        }
        case RA_EVENT:
            if (!a->after_status)
                record(c, session, a);
            break;
        case RA_MEMORY_APPLY: {
            /* a failure here holds nothing else of the session back: the
             * other actions and the status go on, the error is returned
             * after them (the key is retried with backoff) */
            struct tern_err me = {0};
            int mr = memory_apply(c, kc, session, j, a, &me);
            if (mr) {
                if (mr != TERN_ECONFLICT) {
                    char *note = xasprintf("memory proposal %s not applied yet (retried): %s",
                                           a->key, me.msg);
                    memory_event(c, session, "Warning", "MemoryApplyFailed", note);
                    free(note);
                }
                if (!deferred) {
                    deferred = mr;
                    deferred_err = me;
                }
            }
            break;
        }
        case RA_PERSIST_ARTIFACTS: {
            char *tk = xasprintf("%s/%lld/%s", uid ? uid : "", (long long)a->turn,
                                 a->key ? a->key : "");
            pthread_mutex_lock(&c->mu);
            int *tries = kmap_get(c->persist_tries, tk);
            int n = tries ? *tries : 0;
            pthread_mutex_unlock(&c->mu);
            r = artifacts_persist(&c->cfg.artifacts, kc, j, c->cfg.recorder, session, a, n, err);
            pthread_mutex_lock(&c->mu);
            if (r) {
                int *v = kmap_get(c->persist_tries, tk);
                if (!v) {
                    v = xcalloc(1, sizeof *v);
                    kmap_put(c->persist_tries, tk, v);
                }
                (*v)++;
            } else {
                free(kmap_del(c->persist_tries, tk));
            }
            pthread_mutex_unlock(&c->mu);
            free(tk);
            break;
        }
        }
    }
    if (!r && out->status) {
        const cJSON *old = json_get(session, "status");
        if (!old || !json_equal(old, out->status)) {
            cJSON *obj = json_dup(session);
            cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
            cJSON_ReplaceItemInObjectCaseSensitive(meta, "resourceVersion", cJSON_CreateString(rv));
            if (json_get(obj, "status"))
                cJSON_ReplaceItemInObjectCaseSensitive(obj, "status", json_dup(out->status));
            else
                cJSON_AddItemToObject(obj, "status", json_dup(out->status));
            struct kclient_err ke = {0};
            r = kclient_update_status(kc, &gvrs[W_SESSIONS], ns, obj, NULL, &ke);
            if (r)
                err_set(err, r, "update status of %s/%s: %s", ns, name, ke.e.msg);
            else if (c->cfg.metrics) {
                metrics_add(c->cfg.metrics, "tern_status_writes_total", "", 1);
                metrics_add(c->cfg.metrics, "tern_api_writes_total", "", 1);
            }
            cJSON_Delete(obj);
        }
    }
    /* Events that announce a new status, once it is written: a reconcile
     * whose status write loses a conflict is decided again from the status
     * the winner wrote, which already says it (one Event per transition,
     * not one per racing worker) */
    for (size_t i = 0; i < out->nactions && !r; i++)
        if (out->actions[i].kind == RA_EVENT && out->actions[i].after_status)
            record(c, session, &out->actions[i]);
    free(rv);
    if (!r && deferred)
        r = err_set(err, deferred, "%s", deferred_err.msg);
    return r;
}

/* ---- templates ------------------------------------------------------------ */

static const struct kgvr template_gvr = {"tern.dev", "v1alpha1", "agentsessiontemplates"};

static void template_record_event(struct controller *c, const cJSON *session, const char *type,
                                  const char *reason, const char *note)
{
    if (!c->cfg.recorder)
        return;
    struct recorder_ref ref;
    recorder_ref_of(session, &ref);
    recorder_event(c->cfg.recorder, &ref, type, reason, "ResolveTemplate", "%s", note);
    if (c->cfg.on_event) {
        char *key = xasprintf("%s/%s", ref.namespace ? ref.namespace : "", ref.name ? ref.name : "");
        c->cfg.on_event(c->cfg.ctx, key, type, reason, note);
        free(key);
    }
}

/* A session naming a template whose spec is not recorded yet: read the
 * template once and record its spec in status.template (the status write
 * wakes the session again through its informer), or say that it is missing
 * (Pending, TemplateNotFound, retried: in GitOps the template may come
 * after the session). *ret_done tells the caller to stop this pass. */
static int resolve_template(struct controller *c, struct kclient *kc, const cJSON *session,
                            const char *ns, bool *ret_done, int64_t *ret_requeue,
                            struct tern_err *err)
{
    const char *tname = template_ref_name(session);
    const cJSON *old = json_get(session, "status");
    *ret_done = false;
    if (!tname || json_get(old, "template"))
        return 0;
    cJSON *tmpl = NULL, *obj = json_dup(session);
    struct kclient_err ke = {0};
    char *note = NULL;
    int r = kclient_get(kc, &template_gvr, ns, tname, &tmpl, &ke);
    cJSON *st = cJSON_IsObject(old) ? json_dup(old) : cJSON_CreateObject();
    if (r == TERN_ENOTFOUND) {
        note = xasprintf("agentsessiontemplate %s not found in namespace %s; the session "
                         "starts once it exists",
                         tname, ns);
        const cJSON *om = json_get(old, "message");
        bool changed = !cJSON_IsString(om) || strcmp(om->valuestring, note) != 0;
        cJSON_DeleteItemFromObjectCaseSensitive(st, "phase");
        cJSON_DeleteItemFromObjectCaseSensitive(st, "reason");
        cJSON_DeleteItemFromObjectCaseSensitive(st, "message");
        json_add_string(st, "phase", "Pending");
        json_add_string(st, "reason", "TemplateNotFound");
        json_add_string(st, "message", note);
        if (changed)
            template_record_event(c, session, "Warning", "TemplateNotFound", note);
        *ret_requeue = 10;
        r = 0;
    } else if (r) {
        r = err_set(err, r, "get agentsessiontemplate %s/%s: %s", ns, tname, ke.e.msg);
        goto out;
    } else {
        cJSON *rec = cJSON_CreateObject();
        json_add_string(rec, "name", tname);
        const cJSON *meta = json_get(tmpl, "metadata");
        const cJSON *v = json_get(meta, "uid");
        if (cJSON_IsString(v))
            json_add_string(rec, "uid", v->valuestring);
        v = json_get(meta, "resourceVersion");
        if (cJSON_IsString(v))
            json_add_string(rec, "resourceVersion", v->valuestring);
        cJSON *snap = cJSON_CreateObject();
        const cJSON *f;
        cJSON_ArrayForEach(f, json_get(tmpl, "spec"))
        {
            for (size_t i = 0; f->string && template_spec_fields[i]; i++)
                if (strcmp(f->string, template_spec_fields[i]) == 0)
                    cJSON_AddItemToObject(snap, f->string, json_dup(f));
        }
        cJSON_AddItemToObject(rec, "spec", snap);
        cJSON_DeleteItemFromObjectCaseSensitive(st, "template");
        cJSON_AddItemToObject(st, "template", rec);
        const cJSON *orr = json_get(old, "reason");
        if (cJSON_IsString(orr) && strcmp(orr->valuestring, "TemplateNotFound") == 0) {
            cJSON_DeleteItemFromObjectCaseSensitive(st, "reason");
            cJSON_DeleteItemFromObjectCaseSensitive(st, "message");
        }
        note = xasprintf("spec merged with agentsessiontemplate %s (resourceVersion %s)", tname,
                         cJSON_IsString(v) ? v->valuestring : "?");
        template_record_event(c, session, "Normal", "TemplateResolved", note);
    }
    if (cJSON_GetObjectItemCaseSensitive(obj, "status"))
        cJSON_ReplaceItemInObjectCaseSensitive(obj, "status", st);
    else
        cJSON_AddItemToObject(obj, "status", st);
    st = NULL;
    r = kclient_update_status(kc, &gvrs[W_SESSIONS], ns, obj, NULL, &ke);
    if (r)
        r = err_set(err, r, "update status of %s/%s: %s", ns, meta_str(session, "name"),
                    ke.e.msg);
    else if (c->cfg.metrics)
        metrics_add(c->cfg.metrics, "tern_status_writes_total", "", 1);
    *ret_done = true;
out:
    cJSON_Delete(st);
    cJSON_Delete(obj);
    cJSON_Delete(tmpl);
    free(note);
    return r;
}

/* ---- one reconcile ------------------------------------------------------ */

/* The pods of a Job (runner attempts), kept so that what observe_job_pod
 * borrows from them lives through the decision. */
struct job_pods {
    struct observed_job *job;
    cJSON **pods;
    size_t n;
};

static int collect_job_pod(void *ctx, const cJSON *obj)
{
    struct job_pods *jp = ctx;
    if (jp->n >= 64) /* a Job retries a few times: bound the walk */
        return 1;
    jp->pods = xreallocarray(jp->pods, jp->n + 1, sizeof *jp->pods);
    jp->pods[jp->n] = json_dup(obj);
    observe_job_pod(jp->pods[jp->n], jp->job);
    jp->n++;
    return 0;
}

/* Metrics from what the decision says happened (after it was applied). */
static void count_signals(struct controller *c, const struct reconcile_output *out)
{
    struct metrics *m = c->cfg.metrics;
    if (!m)
        return;
    const struct reconcile_signals *sg = &out->signals;
    if (sg->ended_reason) {
        char *l = metrics_labels("phase", out->phase, "reason", sg->ended_reason, NULL);
        metrics_add(m, "tern_sessions_ended_total", l, 1);
        free(l);
    }
    if (sg->model_error) {
        char *l = metrics_labels("class", sg->model_error, NULL);
        metrics_add(m, "tern_model_errors_total", l, 1);
        free(l);
    }
    if (sg->first_request_latency >= 0)
        metrics_observe(m, "tern_first_model_request_seconds", "", sg->first_request_latency);
    if (sg->approval_wait >= 0)
        metrics_observe(m, "tern_approval_wait_seconds", "", sg->approval_wait);
}

/* The recorded template survives every status the decision writes. */
static void keep_template(const struct reconcile_input *in, struct reconcile_output *out)
{
    const cJSON *t = json_get(in->status, "template");
    if (t && out->status && !json_get(out->status, "template"))
        cJSON_AddItemToObject(out->status, "template", json_dup(t));
}

/* Summaries read ahead and not yet taken: a few batches for each worker. */
#define SUMS_READ_AHEAD_MAX 1024

/* Reads the summaries of the sessions queued next along with uid's, in one
 * request, and leaves theirs for their reconciles (sumcache.h). Returns
 * true with uid's in *own, or false (none queued behind to read for, or the
 * read failed: each then reads its own). */
static bool read_ahead(struct controller *c, const char *uid, struct journal_sum_read *own)
{
    char *keys[JOURNAL_SUM_BATCH - 1];
    size_t nk = workqueue_peek(c->q, keys, JOURNAL_SUM_BATCH - 1);
    const char *uids[JOURNAL_SUM_BATCH] = {uid};
    char *claimed[JOURNAL_SUM_BATCH - 1];
    size_t n = 1;
    for (size_t i = 0; i < nk; i++) {
        pthread_mutex_lock(&c->mu);
        const char *u = kmap_get(c->key_to_uid, keys[i]);
        char *copy = u && strcmp(u, uid) != 0 ? xstrdup(u) : NULL;
        pthread_mutex_unlock(&c->mu);
        if (copy && sumcache_claim(c->sums, copy)) {
            claimed[n - 1] = copy;
            uids[n++] = copy;
        } else {
            free(copy);
        }
        free(keys[i]);
    }
    if (n == 1)
        return false;
    struct journal_sum_read got[JOURNAL_SUM_BATCH];
    int64_t rev = 0;
    struct tern_err e = {0};
    bool ok = journal_read_sums(c->cfg.etcd, uids, n, got, &rev, &e) == 0;
    size_t kept = 0;
    for (size_t i = 1; i < n; i++) {
        if (ok) {
            kept += sumcache_put(c->sums, uids[i], &got[i], rev);
            journal_sum_read_done(&got[i]);
        } else {
            sumcache_release(c->sums, uids[i]);
        }
        free(claimed[i - 1]);
    }
    if (!ok) {
        tlog_debug("journal summaries not read ahead (each is read alone)", "error", e.msg);
        return false;
    }
    *own = got[0];
    if (c->cfg.metrics) {
        metrics_add(c->cfg.metrics, "tern_journal_summary_reads_total", "how=\"batched\"", 1);
        metrics_add(c->cfg.metrics, "tern_journal_summaries_read_ahead_total", "", (double)kept);
    }
    return true;
}

/* How long a reconcile waits for a summary another worker is reading. */
#define SUMS_CLAIM_WAIT_MS 2000

/* uid's journal, opened from a summary read ahead when there is one, else
 * reading it (and, when sessions are queued behind, theirs) now. */
static int open_journal(struct controller *c, const char *uid, struct journal **ret,
                        struct tern_err *err)
{
    struct journal_sum_read sum = {0};
    bool ahead = sumcache_take(c->sums, uid, &sum, SUMS_CLAIM_WAIT_MS);
    if (!ahead && !read_ahead(c, uid, &sum)) {
        if (c->cfg.metrics)
            metrics_add(c->cfg.metrics, "tern_journal_summary_reads_total", "how=\"alone\"",
                        1);
        return journal_open(c->cfg.etcd, uid, NULL, ret, err);
    }
    if (ahead && c->cfg.metrics)
        metrics_add(c->cfg.metrics, "tern_journal_summary_reads_total", "how=\"read_ahead\"",
                    1);
    int r = journal_open_read(c->cfg.etcd, uid, NULL, &sum, ret, err);
    journal_sum_read_done(&sum);
    return r;
}

static int reconcile_key(struct controller *c, struct kclient *kc, const char *key,
                         int64_t *ret_requeue, struct tern_err *err)
{
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = xstrndup(key, (size_t)(slash - key));
    const char *name = slash + 1;
    cJSON *session = informer_get(c->inf[W_SESSIONS], ns, name);
    struct session_spec *spec = NULL;
    struct journal *j = NULL;
    struct reconcile_output out = {0};
    int r = 0;
    cJSON *pod = NULL, *copy_job = NULL;
    char *parent_addr = NULL;
    struct owned_scan jobs = {0};
    struct viewer_scan viewers = {0};
    struct job_pods jp = {0};
    struct refs_result refs = {0};
    char *price_json = NULL, *price_error = NULL;
    struct budgets_session bs = {0};
    cJSON *effective = NULL;
    if (!session)
        goto done; /* deleted: children go with it */

    const char *uid = meta_str(session, "uid");
    struct reconcile_input in = {
        .name = name,
        .ns = ns,
        .uid = uid,
        .deleting = json_get(json_get(session, "metadata"), "deletionTimestamp") != NULL,
        .ann_approve = annotation(session, RECONCILE_ANN_APPROVE),
        .ann_deny = annotation(session, RECONCILE_ANN_DENY),
        .ann_decided_by = annotation(session, RECONCILE_ANN_DECIDED_BY),
        .ann_reason = annotation(session, RECONCILE_ANN_REASON),
        .ann_fork = annotation(session, RECONCILE_ANN_FORK),
        .ann_retry = annotation(session, RECONCILE_ANN_RETRY),
        .ann_memory_approve = annotation(session, RECONCILE_ANN_MEMORY_APPROVE),
        .ann_memory_reject = annotation(session, RECONCILE_ANN_MEMORY_REJECT),
        .ann_persist = annotation(session, ARTSTORE_ANN_PERSIST),
        .status = json_get(session, "status"),
        .now = (int64_t)time(NULL),
        .created_at = observe_time(meta_str(session, "creationTimestamp")),
        .cfg = &c->cfg.children,
    };
    const char *retain = annotation(session, RECONCILE_ANN_RETAIN);
    in.retain_journal = retain && strcmp(retain, "true") == 0;
    json_get_int64(json_get(session, "metadata"), "metadata", "generation", JSON_OPTIONAL,
                   &in.generation, NULL);
    const cJSON *f;
    cJSON_ArrayForEach(f, json_get(json_get(session, "metadata"), "finalizers"))
    {
        if (cJSON_IsString(f) && strcmp(f->valuestring, RECONCILE_FINALIZER) == 0)
            in.has_finalizer = true;
    }
    if (!in.deleting && uid) {
        bool resolved_now = false;
        int64_t rq = 0;
        r = resolve_template(c, kc, session, ns, &resolved_now, &rq, err);
        if (r || resolved_now) {
            if (!r && ret_requeue)
                *ret_requeue = rq;
            goto done;
        }
    }
    struct tern_err verr = {0};
    if (template_effective(session, &effective, &verr) != 0)
        effective = NULL;
    if (session_spec_parse(session, &spec, &verr) == 0)
        in.spec = spec;
    else
        in.invalid = verr.msg;

    if (!in.deleting && in.spec && uid) {
        char *pvc = children_name(name, "workspace"), *tok = children_name(name, "sandbox-token");
        char *task = children_name(name, "task"), *sb = children_name(name, "sandbox");
        in.pvc_exists = owned_has(c, W_PVCS, uid, pvc, NULL);
        in.token_exists = owned_has(c, W_SECRETS, uid, tok, NULL);
        in.task_exists = owned_has(c, W_CONFIGMAPS, uid, task, NULL);
        in.netpol_exists = owned_has(c, W_NETPOLS, uid, sb, NULL);
        if (owned_has(c, W_PODS, uid, sb, &pod))
            observe_pod(pod, &in.pod);
        free(pvc);
        free(tok);
        free(task);
        free(sb);
        informer_each_owned(c->inf[W_JOBS], uid, find_latest_job, &jobs);
        observe_job(jobs.best, &in.job);
        informer_each_owned(c->inf[W_JOBS], uid, scan_viewers, &viewers);
        in.viewer_running = viewers.running;
        in.viewer_suspended = viewers.suspended;
        if (jobs.best && meta_str(jobs.best, "uid")) {
            /* its pods: why attempts failed, or why one does not start */
            jp.job = &in.job;
            informer_each_owned(c->inf[W_PODS], meta_str(jobs.best, "uid"), collect_job_pod,
                                &jp);
        }
        in.spec_json = json_get(effective ? effective : session, "spec");
        if (cJSON_GetArraySize(json_get(in.status, "forks")) > 0) {
            /* only parents pay for the scan */
            struct fork_scan fs = {.parent_uid = uid};
            informer_each(c->inf[W_SESSIONS], count_copying_forks, &fs);
            in.forks_copying = fs.copying;
        }
        if (in.ann_fork) {
            cJSON *target = informer_get(c->inf[W_SESSIONS], ns, in.ann_fork);
            const char *fo = label(target, RECONCILE_LABEL_FORK_OF);
            in.fork_target_exists = target != NULL;
            in.fork_target_ours = fo && strcmp(fo, uid) == 0;
            cJSON_Delete(target);
        }
        if (in.spec->fork_from.set) {
            cJSON *parent = informer_get(c->inf[W_SESSIONS], ns, in.spec->fork_from.session);
            const char *puid = meta_str(parent, "uid");
            const cJSON *psb = json_get(json_get(parent, "status"), "sandbox");
            const cJSON *addr = json_get(psb, "address");
            if (puid && strcmp(puid, in.spec->fork_from.uid) == 0 &&
                cJSON_IsTrue(json_get(psb, "ready")) && cJSON_IsString(addr))
                parent_addr = xstrdup(addr->valuestring);
            cJSON_Delete(parent);
            in.fork_parent_address = parent_addr;
            char *cj = children_name(name, "copy");
            if (owned_has(c, W_JOBS, uid, cj, &copy_job))
                observe_job(copy_job, &in.copy_job);
            free(cj);
        }
        prices_lookup(c->prices, kc, in.spec->model.name, &price_json, &in.price_table,
                      &price_error);
        in.price_json = price_json;
        in.price_error = price_error;
        char token[65];
        if (!in.token_exists) {
            /* (used only if the token Secret must be created now) */
            if (reconcile_new_token(token) != 0) {
                r = err_set(err, -EIO, "no random bytes for the sandbox token");
                goto done;
            }
            in.new_token = token;
        }
        r = open_journal(c, uid, &j, err);
        if (r)
            goto done;
        observe_journal(journal_summary(j), &in.journal);
        /* team budgets: which apply, and does a parked session have room */
        bool job_active = in.job.exists && !in.job.complete && !in.job.failed;
        bool holding = in.pod.exists || job_active;
        if ((r = budgets_observe(c->budgets, session, &in.journal, holding, &bs, err)))
            goto done;
        in.budgets = bs.any ? &bs.obs : NULL;
        reconcile_decide(&in, &out);
        if (out.wants_refs || out.wants_admission) {
            /* about to create the sandbox pod or a turn Job: are the
             * objects they reference there? may a budget's session take
             * a sandbox now? */
            if (out.wants_refs) {
                refs_check(kc, in.spec, &c->cfg.children, &refs);
                in.refs_checked = true;
                in.sandbox_refs = refs.sandbox;
                in.runner_refs = refs.runner;
            }
            if (out.wants_admission && (r = budgets_admit(c->budgets, session, &bs, err)))
                goto done;
            reconcile_output_done(&out);
            reconcile_decide(&in, &out);
        }
        if ((r = confirm_pod_gone(kc, ns, name, uid, &pod, &in, &out, err)))
            goto done;
        keep_template(&in, &out);
        /* (a turn open in the journal: its runner may be ahead of the caches) */
        bool turn_open = in.journal.turn > 0 && !in.journal.outcome;
        if (c->cfg.jaccess && (r = journal_door(c, kc, spec, name, uid,
                                                job_active || in.pod.exists || turn_open, &out,
                                                err)))
            goto done;
        r = apply(c, kc, session, j, &out, err);
        if (bs.obs.others_waiting) {
            bool parked = false;
            for (size_t i = 0; i < out.nactions; i++)
                parked = parked || (out.actions[i].kind == RA_DELETE &&
                                    !strcmp(out.actions[i].resource, "v1/pods"));
            /* (a pod already going away was given up at an earlier pass) */
            budgets_yield_settle(c->budgets, session, !r && (parked || in.pod.deleting));
        }
        if (bs.yield_contended && (!out.requeue_after || out.requeue_after > 2))
            out.requeue_after = 2; /* another holder's claim may not be followed through */
        if (!r && bs.nall) {
            bool creates = false;
            for (size_t i = 0; i < out.nactions; i++)
                creates = creates || (out.actions[i].kind == RA_CREATE &&
                                      (!strcmp(out.actions[i].resource, "v1/pods") ||
                                       !strcmp(out.actions[i].resource, "batch/v1/jobs")));
            r = budgets_after(c->budgets, session, &bs, holding || creates,
                              !job_active && !creates, j, err);
        }
        if (!r && out.signals.budget)
            budgets_turned_away(c->budgets, session, out.signals.budget,
                                out.signals.budget_reason,
                                cJSON_IsString(json_get(out.status, "message"))
                                    ? json_get(out.status, "message")->valuestring
                                    : NULL);
    } else {
        reconcile_decide(&in, &out);
        /* a deleted session leaves its budgets' ledgers first */
        if (in.deleting && in.has_finalizer && (r = budgets_forget(c->budgets, session, err)))
            goto done;
        keep_template(&in, &out);
        r = apply(c, kc, session, NULL, &out, err);
    }
    if (!r) {
        count_signals(c, &out);
        if (c->cfg.on_phase && !streq_str(out.signals.old_phase, out.phase) &&
            strcmp(out.phase, "Deleting") != 0)
            c->cfg.on_phase(c->cfg.ctx, key, out.signals.old_phase, out.phase, out.reason,
                            json_get(out.status, "message") &&
                                    cJSON_IsString(json_get(out.status, "message"))
                                ? json_get(out.status, "message")->valuestring
                                : NULL);
        if (c->cfg.on_decided)
            c->cfg.on_decided(c->cfg.ctx, key, out.phase, out.nactions, out.requeue_after,
                              in.refs_checked);
    }
    if (!r && ret_requeue)
        *ret_requeue = out.requeue_after;
done:
    cJSON_Delete(effective);
    reconcile_output_done(&out);
    budgets_session_done(&bs);
    refs_result_done(&refs);
    journal_free(j);
    session_spec_free(spec);
    cJSON_Delete(pod);
    cJSON_Delete(copy_job);
    free(viewers.suspended);
    free(parent_addr);
    free(price_json);
    free(price_error);
    cJSON_Delete(jobs.best);
    for (size_t i = 0; i < jp.n; i++)
        cJSON_Delete(jp.pods[i]);
    free(jp.pods);
    cJSON_Delete(session);
    free(ns);
    return r;
}

int controller_reconcile(struct controller *c, const char *key, struct tern_err *err)
{
    return reconcile_key(c, c->kc, key, NULL, err);
}

/* ---- workers -------------------------------------------------------------- */

/* A failed reconcile is told on the session too (a Warning Event; repeats
 * aggregate into one series), so `kubectl describe` shows what the operator
 * cannot do, e.g. a create its RBAC forbids, not only its log. Conflicts
 * and vanished objects are the normal cost of optimistic concurrency and
 * are only retried. */
static void record_failure(struct controller *c, const char *key, int code,
                           const struct tern_err *err)
{
    const char *slash = strchr(key, '/');
    if (!c->cfg.recorder || !slash || code == TERN_ECONFLICT || code == TERN_ENOTFOUND)
        return;
    char *ns = xstrndup(key, (size_t)(slash - key));
    cJSON *session = informer_get(c->inf[W_SESSIONS], ns, slash + 1);
    if (session) {
        struct recorder_ref ref;
        recorder_ref_of(session, &ref);
        recorder_event(c->cfg.recorder, &ref, "Warning", "ReconcileError", "Reconcile", "%s",
                       err->msg[0] ? err->msg : err_str(code));
    }
    cJSON_Delete(session);
    free(ns);
}

static double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

#define CACHE_SYNC_WAIT_MS 30000

/* Workers start once every cache holds its first list: reconciling before
 * decides from half-filled caches, and each session is then reconciled
 * again for every cache that fills later (after a restart with 10,000
 * parked sessions, about 35,000 reconciles more than the 10,000 needed).
 * A cache that cannot list (a missing RBAC rule) holds them back at most
 * CACHE_SYNC_WAIT_MS, with a warning; /readyz says it too. */
static void wait_caches(struct controller *c)
{
    long waited = 0;
    for (int w = 0; w < W_COUNT; w++) {
        while (!informer_has_synced(c->inf[w]) && waited < CACHE_SYNC_WAIT_MS &&
               !atomic_load(&c->stop) && !workqueue_shutting_down(c->q)) {
            informer_wait_synced(c->inf[w], 100);
            waited += 100;
        }
        if (!informer_has_synced(c->inf[w]) && waited >= CACHE_SYNC_WAIT_MS) {
            tlog_warn("a cache has not synced: reconciling without it", "resource",
                      gvrs[w].resource);
        }
        char ms[24];
        snprintf(ms, sizeof ms, "%ld", waited);
        tlog_debug("cache synced", "resource", gvrs[w].resource, "waitedMs", ms);
    }
    if (c->cfg.metrics && !atomic_exchange(&c->sync_told, true))
        metrics_set(c->cfg.metrics, "tern_cache_sync_seconds", "",
                    mono_seconds() - c->started_s);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct controller *c = w->c;
    wait_caches(c);
    for (;;) {
        char *key = NULL;
        if (workqueue_get(c->q, &key) != 0)
            break;
        struct tern_err err = {0};
        int64_t requeue = 0;
        double t0 = mono_seconds();
        int r = reconcile_key(c, w->kc, key, &requeue, &err);
        double dt = mono_seconds() - t0;
        if (c->cfg.metrics) {
            metrics_add(c->cfg.metrics, "tern_reconciles_total", "", 1);
            metrics_observe(c->cfg.metrics, "tern_reconcile_duration_seconds", "", dt);
            /* a 409 (a write against a cached object that moved on) or an
             * object that vanished is optimistic concurrency at work, not
             * an error: counted apart */
            if (r == TERN_ECONFLICT || r == TERN_ENOTFOUND)
                metrics_add(c->cfg.metrics, "tern_reconcile_conflicts_total", "", 1);
            else if (r)
                metrics_add(c->cfg.metrics, "tern_reconcile_errors_total", "", 1);
        }
        if (r) {
            long delay = 0;
            workqueue_add_rate_limited(c->q, key, &delay);
            record_failure(c, key, r, &err);
            if (c->cfg.on_error)
                c->cfg.on_error(c->cfg.ctx, key, &err, delay);
        } else {
            workqueue_forget(c->q, key);
            if (requeue > 0)
                workqueue_add_after(c->q, key, requeue * 1000);
        }
        workqueue_done(c->q, key);
        free(key);
    }
    return NULL;
}

static int free_value(void *ctx, const char *key, void *value)
{
    (void)ctx;
    (void)key;
    free(value);
    return 0;
}

void controller_run_workers(struct controller *c)
{
    pthread_mutex_lock(&c->workers_mu);
    if (!c->workers_running) {
        if (!c->q || workqueue_shutting_down(c->q)) {
            workqueue_free(c->q);
            c->q = workqueue_new(NULL);
            /* everything known is reconciled by the new leader */
            informer_resync(c->inf[W_SESSIONS]);
        }
        for (int i = 0; i < c->nworkers; i++) {
            c->workers[i].c = c;
            c->workers[i].kc = kclient_new(c->cfg.kube, NULL);
            pthread_create(&c->workers[i].thread, NULL, worker_main, &c->workers[i]);
        }
        budgets_run(c->budgets);
        c->workers_running = true;
    }
    pthread_mutex_unlock(&c->workers_mu);
}

void controller_stop_workers(struct controller *c)
{
    pthread_mutex_lock(&c->workers_mu);
    if (c->workers_running) {
        budgets_stop(c->budgets);
        workqueue_shutdown(c->q);
        for (int i = 0; i < c->nworkers; i++) {
            pthread_join(c->workers[i].thread, NULL);
            kclient_free(c->workers[i].kc);
            c->workers[i].kc = NULL;
        }
        c->workers_running = false;
    }
    pthread_mutex_unlock(&c->workers_mu);
}

int controller_new(const struct controller_config *cfg, struct controller **ret,
                   struct tern_err *err)
{
    if (!cfg->kube || !cfg->etcd)
        return err_set(err, -EINVAL, "controller: kubeconfig and etcd are required");
    struct controller *c = xcalloc(1, sizeof *c);
    c->cfg = *cfg;
    c->namespace = xstrdup(cfg->namespace ? cfg->namespace : "");
    c->nworkers = cfg->workers > 0 ? cfg->workers : CONTROLLER_DEFAULT_WORKERS;
    c->workers = xcalloc((size_t)c->nworkers, sizeof *c->workers);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->census.mu, NULL);
    snprintf(c->census.phases[0].name, sizeof c->census.phases[0].name, "Unknown");
    c->census.nphases = 1;
    pthread_mutex_init(&c->workers_mu, NULL);
    c->uid_to_key = kmap_new();
    c->key_to_uid = kmap_new();
    c->sums = sumcache_new(SUMS_READ_AHEAD_MAX);
    c->persist_tries = kmap_new();
    c->q = workqueue_new(NULL);
    c->kc = kclient_new(cfg->kube, NULL);
    c->prices = prices_new(cfg->prices_configmap, 30);
    for (int w = 0; w < W_COUNT; w++) {
        c->hctx[w] = (struct handler_ctx){c, (enum watched)w};
        struct informer_opts o = {
            .gvr = gvrs[w],
            .namespace = c->namespace,
            .label_selector = w == W_SESSIONS ? NULL : "app.kubernetes.io/managed-by=tern",
            .transform = trim_cached,
            .transform_ctx = (void *)(intptr_t)w,
        };
        struct informer_handlers h = {on_add, on_update, on_delete, &c->hctx[w]};
        c->inf[w] = informer_new(cfg->kube, &o, &h);
    }
    struct budgets_config bc = {
        .kube = cfg->kube,
        .etcd = cfg->etcd,
        .recorder = cfg->recorder,
        .metrics = cfg->metrics,
        .namespace = c->namespace,
        .clock_file = cfg->test_clock_file,
        .sessions = c->inf[W_SESSIONS],
        .enqueue = enqueue_key,
        .ctx = c,
    };
    int br = budgets_new(&bc, &c->budgets, err);
    if (br) {
        controller_free(c);
        return br;
    }
    if (cfg->metrics) {
        struct metrics *m = cfg->metrics;
        metrics_declare(m, "tern_reconciles_total", METRICS_COUNTER, "Reconciles run.", NULL, 0);
        metrics_declare(m, "tern_reconcile_errors_total", METRICS_COUNTER,
                        "Reconciles that failed and were requeued (conflicts not included).",
                        NULL, 0);
        metrics_declare(m, "tern_reconcile_conflicts_total", METRICS_COUNTER,
                        "Reconciles that met a 409 conflict or a vanished object and were "
                        "decided again.",
                        NULL, 0);
        static const double latency[] = {0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600};
        metrics_declare(m, "tern_first_model_request_seconds", METRICS_HISTOGRAM,
                        "From a session's creation to its first model request.", latency,
                        sizeof latency / sizeof latency[0]);
        static const double waits[] = {1, 5, 15, 60, 300, 900, 3600, 14400, 86400};
        metrics_declare(m, "tern_approval_wait_seconds", METRICS_HISTOGRAM,
                        "From an approval request to its decision (or timeout).", waits,
                        sizeof waits / sizeof waits[0]);
        metrics_declare(m, "tern_model_errors_total", METRICS_COUNTER,
                        "Model errors told by the operator, by class (unreachable, "
                        "rate_limited, server_error, context_length, bad_request, malformed).",
                        NULL, 0);
        metrics_declare(m, "tern_sessions_ended_total", METRICS_COUNTER,
                        "Sessions that reached Succeeded or Failed, by phase and reason.", NULL,
                        0);
        metrics_declare(m, "tern_reconcile_duration_seconds", METRICS_HISTOGRAM,
                        "Time of one reconcile.", NULL, 0);
        metrics_declare(m, "tern_cache_sync_seconds", METRICS_GAUGE,
                        "From the controller's start until every cache held its first list "
                        "(the workers wait for it).",
                        NULL, 0);
        metrics_declare(m, "tern_status_writes_total", METRICS_COUNTER,
                        "Status updates written (none when nothing changed).", NULL, 0);
        metrics_declare(m, "tern_api_writes_total", METRICS_COUNTER,
                        "Kubernetes API writes (creates, deletes, patches, status updates).",
                        NULL, 0);
        metrics_declare(m, "tern_journal_summary_reads_total", METRICS_COUNTER,
                        "Journal summaries the reconciles opened, by how they were read: "
                        "alone (one request), batched (a request that read the sessions "
                        "queued next too) or read_ahead (taken from such a request).",
                        NULL, 0);
        metrics_declare(m, "tern_journal_summaries_read_ahead_total", METRICS_COUNTER,
                        "Summaries read for sessions queued next and kept for them.", NULL, 0);
        metrics_declare(m, "tern_summary_watch_restarts_total", METRICS_COUNTER,
                        "Times the journal summary watch ended and everything was resynced.",
                        NULL, 0);
        metrics_declare(m, "tern_sessions", METRICS_GAUGE, "Sessions by phase.", NULL, 0);
        metrics_declare(m, "tern_cache_objects", METRICS_GAUGE,
                        "Objects in the operator's caches, by resource.", NULL, 0);
        metrics_declare(m, "tern_cache_bytes", METRICS_GAUGE,
                        "Bytes the operator's caches hold, by resource (the objects' trimmed "
                        "JSON, keys and owner UIDs).",
                        NULL, 0);
        metrics_declare(m, "tern_approvals_waiting", METRICS_GAUGE,
                        "Sessions waiting for an approval.", NULL, 0);
        metrics_declare(m, "tern_turns", METRICS_GAUGE, "Model turns started, all sessions.",
                        NULL, 0);
        metrics_declare(m, "tern_tool_calls", METRICS_GAUGE, "Tool calls, all sessions.", NULL,
                        0);
        metrics_declare(m, "tern_tokens", METRICS_GAUGE, "Tokens used, all sessions, by kind.",
                        NULL, 0);
    }
    *ret = c;
    return 0;
}

/* Retained artifact sets past their expiry are deleted by the leader
 * (level-triggered: from the cache, every TERN_ARTIFACTS_SWEEP_S). */
struct sweep {
    struct controller *c;
    int64_t now;
    cJSON *due; /* array of cached ConfigMaps to delete */
};

static int sweep_one(void *ctx, const cJSON *cm)
{
    struct sweep *s = ctx;
    const cJSON *at = json_get(json_get(json_get(cm, "metadata"), "annotations"),
                               ARTSTORE_ANN_EXPIRES);
    if (cJSON_IsString(at) && observe_time(at->valuestring) <= (double)s->now)
        cJSON_AddItemToArray(s->due, json_dup(cm));
    return 0;
}

static void *sweep_main(void *arg)
{
    struct controller *c = arg;
    struct kclient *kc = kclient_new(c->cfg.kube, NULL);
    while (!atomic_load(&c->stop)) {
        pthread_mutex_lock(&c->workers_mu);
        bool leading = c->workers_running;
        pthread_mutex_unlock(&c->workers_mu);
        if (leading) {
            struct sweep s = {.c = c, .now = (int64_t)time(NULL), .due = cJSON_CreateArray()};
            /* only sets with an expiry are parsed (10,000 sessions' task
             * ConfigMaps every few seconds were most of an idle operator's CPU) */
            informer_each_containing(c->inf[W_CONFIGMAPS], "\"" ARTSTORE_ANN_EXPIRES "\"",
                                     sweep_one, &s);
            const cJSON *cm;
            cJSON_ArrayForEach(cm, s.due)
            {
                struct tern_err e = {0};
                if (artifacts_expire(kc, cm, s.now, &e) < 0 && c->cfg.on_error)
                    c->cfg.on_error(c->cfg.ctx, "artifacts", &e, TERN_ARTIFACTS_SWEEP_S * 1000);
            }
            cJSON_Delete(s.due);
        }
        for (long slept = 0; slept < TERN_ARTIFACTS_SWEEP_S * 1000L && !atomic_load(&c->stop);
             slept += 50) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    kclient_free(kc);
    return NULL;
}

int controller_start(struct controller *c, struct tern_err *err)
{
    c->started_s = mono_seconds();
    for (int w = 0; w < W_COUNT; w++) {
        int r = informer_start(c->inf[w]);
        if (r)
            return err_set(err, r, "starting the %s informer", gvrs[w].resource);
    }
    int r = pthread_create(&c->sum_thread, NULL, summary_watch, c);
    if (r)
        return err_set(err, -r, "starting the summary watch");
    c->sum_started = true;
    r = pthread_create(&c->sweep_thread, NULL, sweep_main, c);
    if (r)
        return err_set(err, -r, "starting the artifact sweep");
    c->sweep_started = true;
    return budgets_start(c->budgets, err);
}

bool controller_synced(struct controller *c)
{
    for (int w = 0; w < W_COUNT; w++)
        if (!informer_has_synced(c->inf[w]))
            return false;
    return true;
}

void controller_free(struct controller *c)
{
    if (!c)
        return;
    atomic_store(&c->stop, true);
    controller_stop_workers(c);
    if (c->sum_started)
        pthread_join(c->sum_thread, NULL);
    if (c->sweep_started)
        pthread_join(c->sweep_thread, NULL);
    for (int w = 0; w < W_COUNT; w++)
        informer_cancel(c->inf[w]); /* all at once: each notices within a second */
    budgets_free(c->budgets); /* it reads the session informer */
    for (int w = 0; w < W_COUNT; w++)
        informer_free(c->inf[w]);
    workqueue_free(c->q);
    kclient_free(c->kc);
    prices_free(c->prices);
    kmap_each(c->uid_to_key, free_value, NULL);
    kmap_free(c->uid_to_key);
    kmap_each(c->key_to_uid, free_value, NULL);
    kmap_free(c->key_to_uid);
    sumcache_free(c->sums);
    kmap_each(c->persist_tries, free_value, NULL);
    kmap_free(c->persist_tries);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->census.mu);
    pthread_mutex_destroy(&c->workers_mu);
    free(c->workers);
    free(c->namespace);
    free(c);
}

static int64_t usage_of(const cJSON *u, const char *key)
{
    int64_t v = 0;
    json_get_int64(u, "", key, JSON_OPTIONAL, &v, NULL);
    return v > 0 ? v : 0;
}

/* Adds (sign 1) or removes (sign -1) what session obj contributes. A phase
 * that is not a short name, or one past the table's room, counts as
 * "Unknown" (the label set stays bounded whatever the API sends). The same
 * object always lands in the same entry, so a removal undoes its add. */
static void census_count(struct census *cs, const cJSON *obj, int sign)
{
    const cJSON *st = json_get(obj, "status");
    const cJSON *ph = json_get(st, "phase");
    const char *name = cJSON_IsString(ph) && ph->valuestring[0] &&
                               strlen(ph->valuestring) < sizeof cs->phases[0].name
                           ? ph->valuestring
                           : "Unknown";
    const cJSON *u = json_get(st, "usage");
    pthread_mutex_lock(&cs->mu);
    size_t i = 0;
    while (i < cs->nphases && strcmp(cs->phases[i].name, name) != 0)
        i++;
    if (i == cs->nphases && cs->nphases == CENSUS_MAX_PHASES)
        i = 0; /* "Unknown", the first entry (controller_new) */
    if (i == cs->nphases) {
        snprintf(cs->phases[i].name, sizeof cs->phases[i].name, "%s", name);
        cs->phases[i].n = 0;
        cs->nphases++;
    }
    cs->phases[i].n += sign;
    cs->turns += sign * usage_of(u, "modelTurns");
    cs->tools += sign * usage_of(u, "toolCalls");
    cs->prompt += sign * usage_of(u, "promptTokens");
    cs->completion += sign * usage_of(u, "completionTokens");
    if (json_get(st, "pendingApproval"))
        cs->waiting += sign;
    pthread_mutex_unlock(&cs->mu);
}

void controller_census(struct controller *c)
{
    struct metrics *m = c->cfg.metrics;
    if (!m)
        return;
    struct census *cs = &c->census;
    metrics_zero(m, "tern_sessions");
    pthread_mutex_lock(&cs->mu);
    for (size_t i = 0; i < cs->nphases; i++) {
        char *l = metrics_labels("phase", cs->phases[i].name, NULL);
        metrics_set(m, "tern_sessions", l, (double)cs->phases[i].n);
        free(l);
    }
    metrics_set(m, "tern_turns", "", (double)cs->turns);
    metrics_set(m, "tern_tool_calls", "", (double)cs->tools);
    metrics_set(m, "tern_tokens", "kind=\"prompt\"", (double)cs->prompt);
    metrics_set(m, "tern_tokens", "kind=\"completion\"", (double)cs->completion);
    metrics_set(m, "tern_approvals_waiting", "", (double)cs->waiting);
    pthread_mutex_unlock(&cs->mu);
    for (int w = 0; w < W_COUNT; w++) {
        char *l = metrics_labels("resource", gvrs[w].resource, NULL);
        metrics_set(m, "tern_cache_objects", l, (double)informer_len(c->inf[w]));
        metrics_set(m, "tern_cache_bytes", l, (double)informer_cache_bytes(c->inf[w]));
        free(l);
    }
}

/* ---- the caches, for the aggregated API ------------------------------------ */

static enum watched watched_of(enum controller_cache k)
{
    switch (k) {
    case CONTROLLER_PODS: return W_PODS;
    case CONTROLLER_SECRETS: return W_SECRETS;
    case CONTROLLER_JOBS: return W_JOBS;
    default: return W_SESSIONS;
    }
}

cJSON *controller_cached(struct controller *c, enum controller_cache k, const char *ns,
                         const char *name)
{
    return informer_get(c->inf[watched_of(k)], ns, name);
}

int controller_each_cached(struct controller *c, enum controller_cache k,
                           int (*fn)(void *ctx, const cJSON *obj), void *ctx)
{
    return informer_each(c->inf[watched_of(k)], fn, ctx);
}
