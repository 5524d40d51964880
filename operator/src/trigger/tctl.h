/* tctl.h - the operator's shell around AgentTriggers: schedules (a work
 * queue of triggers reconciled while this replica leads) and the webhook
 * receiver (served by every replica).
 *
 * Watches AgentTriggers and the sessions they created (label
 * tern.dev/trigger). A trigger's reconcile: validate (condition Ready),
 * decide its schedule with tsched_decide (create, miss, wait), delete
 * sessions beyond the history limits, write status (active sessions, the
 * webhook path, last slot) and requeue itself for the next slot.
 *
 * tctl_webhook answers POST /hooks/<namespace>/<trigger>: reads the
 * trigger from the cache and its Secret's key, decides with webhook_decide,
 * creates the session under its deterministic name (AlreadyExists from a
 * session of this trigger and delivery = a duplicate: answered 200, nothing
 * created), then counts the outcome in status, an Event (Warning for refused
 * deliveries; never the key, the signature or the payload) and metrics.
 *
 * Threads: one per informer, one worker, and libmicrohttpd's per-connection
 * threads for tctl_webhook (each request uses its own API client).
 * Ownership: the config's pointers are borrowed and must outlive tctl.
 */
#ifndef TERN_TRIGGER_TCTL_H
#define TERN_TRIGGER_TCTL_H

#include "base/buf.h"
#include "base/err.h"
#include "http/endpoint.h"
#include "kube/kubeconfig.h"
#include "kube/recorder.h"
#include "metrics/metrics.h"

#include <stdbool.h>
#include <stdint.h>

/* Fault points for the end-to-end tests (tern-operator --fault, test
 * builds and suites only): the process exits right there. */
enum tctl_fault {
    TCTL_FAULT_NONE = 0,
    TCTL_FAULT_EXIT_BEFORE_CREATE, /* a verified delivery, before its session is created */
    TCTL_FAULT_EXIT_AFTER_CREATE,  /* after the create, before the answer */
};

struct tctl_config {
    struct kubeconfig *kube;
    struct recorder *recorder; /* may be NULL */
    struct metrics *metrics;   /* families declared by tctl_new; may be NULL */
    const char *namespace;     /* "" or NULL = all */
    const char *zoneinfo_dir;  /* NULL = /usr/share/zoneinfo */
    int64_t clock_skew;        /* seconds added to the clock (tests) */
    enum tctl_fault fault;
    /* what happened, for the daemon's log (may be NULL) */
    void (*on_log)(void *ctx, const char *level, const char *trigger, const char *what,
                   const char *detail);
    void *ctx;
};

struct tctl;

int tctl_new(const struct tctl_config *cfg, struct tctl **ret, struct tern_err *err);
/* Starts the informers. */
int tctl_start(struct tctl *t, struct tern_err *err);
bool tctl_synced(struct tctl *t);
/* Starts / stops the schedule worker (on gaining / losing leadership). */
void tctl_run_workers(struct tctl *t);
void tctl_stop_workers(struct tctl *t);
void tctl_free(struct tctl *t);

/* Reconciles one trigger ("namespace/name") on the calling thread; the
 * seconds until it wants to run again in *ret_requeue (0 = not). */
int tctl_reconcile(struct tctl *t, const char *key, int64_t *ret_requeue, struct tern_err *err);

/* The webhook receiver, an endpoint_req_fn with ctx = struct tctl. */
int tctl_webhook(void *ctx, const struct endpoint_request *req, struct buf *body,
                 const char **content_type);

#endif
