/* controller.h - the operator's shell around reconcile_decide.
 *
 * Watches AgentSessions and the children the operator labels
 * (app.kubernetes.io/managed-by=tern) with informers, and the journal
 * summaries with one etcd watch on the journal prefix; every change enqueues
 * the session's key ("namespace/name") in a rate-limited work queue. Workers
 * (started only while this replica leads) observe, decide and apply — see
 * reconcile.h and docs/operator.md.
 *
 * Threads: one per informer, one for the summary watch, `workers` queue
 * workers. Ownership: the controller borrows the kubeconfig, etcd client,
 * recorder and metrics, which must outlive it.
 */
#ifndef TERN_CONTROLLER_H
#define TERN_CONTROLLER_H

#include "base/err.h"
#include "controller/artifacts.h"
#include "controller/children.h"
#include "controller/jaccess.h"
#include "etcd/etcd.h"
#include "kube/kubeconfig.h"
#include "kube/recorder.h"
#include "metrics/metrics.h"

#include <cJSON.h>
#include <stdbool.h>

/* The trail an applied memory proposal leaves on the memory ConfigMap
 * (docs/operator.md, "Memory proposals"): the last application in four
 * annotations, and tern.dev/memory-history, a JSON array of the last
 * TERN_MEMORY_MAX_HISTORY applications {proposal, session, approvedBy,
 * previousSha256, sha256, time}, which a retry after a crash recognises. */
#define CONTROLLER_ANN_MEMORY_APPLIED     "tern.dev/memory-applied-proposal"
#define CONTROLLER_ANN_MEMORY_SESSION     "tern.dev/memory-proposed-by"
#define CONTROLLER_ANN_MEMORY_APPROVED_BY "tern.dev/memory-approved-by"
#define CONTROLLER_ANN_MEMORY_PREVIOUS    "tern.dev/memory-previous-sha256"
#define CONTROLLER_ANN_MEMORY_HISTORY     "tern.dev/memory-history"

/* Reconcile workers unless told: a reconcile mostly waits on the API server
 * and etcd, so more workers than cores keep both busy. */
#define CONTROLLER_DEFAULT_WORKERS 8

struct controller_config {
    struct kubeconfig *kube;
    struct etcd *etcd;
    struct jaccess *jaccess;      /* a locked journal: per-session access; or NULL */
    struct recorder *recorder;
    struct metrics *metrics;      /* families declared by controller_new */
    const char *namespace;        /* "" or NULL = all namespaces */
    struct children_config children;
    struct artifacts_config artifacts; /* the artifact store's bounds */
    int workers;                  /* 0 = CONTROLLER_DEFAULT_WORKERS */
    /* "namespace/name" of the price table's ConfigMap (controller/prices.h),
     * or NULL: sessions with a cost limit are then refused */
    const char *prices_configmap;
    /* test hook: a file holding seconds to add to the clock of AgentBudget
     * windows (controller/budgets.h), or NULL */
    const char *test_clock_file;
    /* test hook: "SESSION=SPEC": turn Jobs of the session named SESSION get
     * TERN_TEST_HOOK=SPEC (runner/testhook.h), or NULL */
    const char *test_runner_hook;
    /* called from a worker after a failed reconcile (the library does not
     * log; the daemon does); retry_ms is the backoff before the next try */
    void (*on_error)(void *ctx, const char *key, const struct tern_err *err, long retry_ms);
    /* what happened to a session, after a reconcile that applied it (each
     * may be NULL): every Event the operator recorded on it, a phase that
     * changed (from may be NULL for a new session), and, for debugging, what
     * was decided and why it is requeued */
    void (*on_event)(void *ctx, const char *key, const char *type, const char *reason,
                     const char *note);
    void (*on_phase)(void *ctx, const char *key, const char *from, const char *to,
                     const char *reason, const char *message);
    void (*on_decided)(void *ctx, const char *key, const char *phase, size_t nactions,
                       int64_t requeue_s, bool refs_checked);
    void *ctx;
};

struct controller;

/* Builds the controller (no thread started). Returns 0 and *ret or an error. */
int controller_new(const struct controller_config *cfg, struct controller **ret,
                   struct tern_err *err);
/* Starts the informers and the summary watch. */
int controller_start(struct controller *c, struct tern_err *err);
/* True once every informer has listed. */
bool controller_synced(struct controller *c);
/* Starts / stops the queue workers (on gaining / losing leadership). */
void controller_run_workers(struct controller *c);
void controller_stop_workers(struct controller *c);
/* Reconciles one key on the calling thread. 0, or the first failing
 * action's error. */
int controller_reconcile(struct controller *c, const char *key, struct tern_err *err);
/* Stops everything and frees (accepts NULL). */
void controller_free(struct controller *c);

/* The informers' caches, for the aggregated API (streamapi/): a copy of
 * one cached object (owned by the caller) or NULL, and a walk over a kind
 * (fn's non-zero return stops it). Thread-safe. */
enum controller_cache {
    CONTROLLER_SESSIONS,
    CONTROLLER_PODS,
    CONTROLLER_SECRETS,
    CONTROLLER_JOBS,
};
cJSON *controller_cached(struct controller *c, enum controller_cache k, const char *ns,
                         const char *name);
int controller_each_cached(struct controller *c, enum controller_cache k,
                           int (*fn)(void *ctx, const cJSON *obj), void *ctx);

/* Refreshes the census gauges (sessions by phase, approvals waiting, usage)
 * from the informer cache; called before /metrics is rendered. */
void controller_census(struct controller *c);

#endif
