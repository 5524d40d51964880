/* budgets.h - the operator's side of team budgets (AgentBudget,
 * docs/budgets.md): the AgentBudget controller, and what the session
 * reconcile asks of it.
 *
 * The AgentBudget controller watches AgentBudgets (an informer) and the
 * budget keys in etcd (one watch on /tern/v1/b/), and for each budget, on a
 * worker that runs only while this replica leads:
 *   - mirrors it into etcd for the runners (budget/bstore.h), or removes
 *     the mirror and every counter when it is deleted (or invalid: a spec
 *     or time zone the operator cannot use is not enforced, its Ready
 *     condition says why);
 *   - writes its status: the current window, what is used, reserved and
 *     refused in it, the sessions holding slots and queued, the "used/limit"
 *     strings the printer columns show, conditions; and the tern_budget_*
 *     gauges;
 *   - drops windows older than the previous one, and ledger entries of
 *     sessions that are gone;
 *   - wakes the sessions that wait (phase Queued) of its namespace when its
 *     window rolls over, its limits change or its counters move.
 *
 * For the session reconcile (controller.c), on its worker threads:
 *   budgets_observe  which budgets apply to the session and, for one parked
 *                    by a budget, whether that budget has room again; a
 *                    session that holds a sandbox takes its slots (over a
 *                    limit if it must: it was running before the budget);
 *   budgets_admit    asked when the decision wants a new sandbox: takes the
 *                    slots / counts the start in creation order, or says
 *                    where in line the session waits;
 *   budgets_after    leaves the ledgers when the session holds neither a
 *                    sandbox nor a running turn, and settles or releases
 *                    reservations a turn left open (under the turn lock);
 *   budgets_forget   a deleted session.
 *
 * The clock: budgets_now is the wall clock plus the offset in the test
 * clock file (budgets_config.clock_file, re-read every second), which turn
 * Jobs get as TERN_TEST_CLOCK_OFFSET_SECONDS (budgets_decorate_job).
 *
 * Ownership: the controller borrows its config's pointers.
 */
#ifndef TERN_CONTROLLER_BUDGETS_H
#define TERN_CONTROLLER_BUDGETS_H

#include "base/err.h"
#include "budget/bstore.h"
#include "controller/reconcile.h"
#include "etcd/etcd.h"
#include "kube/informer.h"
#include "kube/kubeconfig.h"
#include "kube/recorder.h"
#include "metrics/metrics.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

struct journal;

struct budgets_config {
    struct kubeconfig *kube;
    struct etcd *etcd;
    struct recorder *recorder;   /* may be NULL */
    struct metrics *metrics;     /* may be NULL; families declared by budgets_new */
    const char *namespace;       /* "" or NULL = all */
    const char *clock_file;      /* test hook, or NULL */
    struct informer *sessions;   /* the session controller's informer (borrowed) */
    /* asks the session controller to reconcile "ns/name" */
    void (*enqueue)(void *ctx, const char *key);
    void *ctx;
};

struct budgets;

int budgets_new(const struct budgets_config *cfg, struct budgets **ret, struct tern_err *err);
/* Starts the informer and the etcd watch. */
int budgets_start(struct budgets *b, struct tern_err *err);
/* Starts / stops the worker (on gaining / losing leadership). */
void budgets_run(struct budgets *b);
void budgets_stop(struct budgets *b);
void budgets_free(struct budgets *b);

/* Now for budget windows (with the test clock's offset). */
int64_t budgets_now(struct budgets *b);

/* What the session reconcile learns (owns everything obs points to). */
struct budgets_session {
    struct observed_budgets obs;
    bool any;                     /* some budget applies: pass &obs to the decision */
    struct bstore_budget *all;    /* every budget of the namespace */
    size_t nall;
    bool *applies;                /* ... and whether it applies to this session */
    char *msg_queue, *msg_exhausted;
    char *queue_budget;
    bool yield_contended; /* someone waits for a slot it holds, but other
                           * holders give enough up: look again soon */
};
void budgets_session_done(struct budgets_session *s);
/* After the decision: parked says whether it removed the sandbox pod. A
 * holder that claimed to give its slot up (obs.others_waiting) and did not
 * drops the claim, so another can. */
void budgets_yield_settle(struct budgets *b, const cJSON *session, bool parked);

/* Fills *ret for session (an AgentSession object); holding: it has a
 * sandbox pod or a running turn Job. Returns 0 or an etcd error. */
int budgets_observe(struct budgets *b, const cJSON *session, const struct observed_journal *j,
                    bool holding, struct budgets_session *ret, struct tern_err *err);
/* Admission (reconcile_output.wants_admission): sets s->obs.checked and the
 * rest. */
int budgets_admit(struct budgets *b, const cJSON *session, struct budgets_session *s,
                  struct tern_err *err);
/* After the decision was applied: holding says whether the session holds or
 * is taking a sandbox or runs a turn; turn_idle whether no turn Job runs
 * (then open reservations are resolved, j is the session's journal). */
int budgets_after(struct budgets *b, const cJSON *session, struct budgets_session *s,
                  bool holding, bool turn_idle, struct journal *j, struct tern_err *err);
/* A session being deleted: resolves its reservations (from its journal),
 * leaves every ledger of its namespace, drops its memo. */
int budgets_forget(struct budgets *b, const cJSON *session, struct tern_err *err);

/* A session a budget newly turned away (reconcile_signals.budget): an Event
 * on the AgentBudget, tern_budget_turned_away_total, and the other waiting
 * sessions of the namespace look again (their place in line). */
void budgets_turned_away(struct budgets *b, const cJSON *session, const char *budget,
                         const char *reason, const char *note);

/* Adds TERN_TEST_CLOCK_OFFSET_SECONDS to a turn Job's runner container when
 * the test clock is on. */
void budgets_decorate_job(struct budgets *b, cJSON *job);

#endif
