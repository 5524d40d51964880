/* budgetgate.h - the runner's side of team budgets (AgentBudget,
 * docs/budgets.md): before each model call it reserves the call's worst
 * case against every budget of the session's namespace whose selector
 * matches the session, and after the call it settles what the call used.
 *
 * The budgets come from the operator's mirrors in etcd (budget/bstore.h),
 * read before every call, so a budget created, raised or lowered applies
 * from the next call of every running turn.
 *
 * Per call (the shell, runner/turn.c, calls these in order):
 *   gate_prepare  loads the budgets; says which max_completion_tokens to
 *                 send (TERN_BUDGET_DEFAULT_COMPLETION when a budget
 *                 limits tokens or cost and none is configured: the worst
 *                 case needs a bound);
 *   gate_reserve  journals budget_reserved {uid, step, tokens, costMicroUSD,
 *                 budgets: [{name, window}]} (its seq is the reservation's
 *                 id), then reserves in one etcd txn; a budget that refuses
 *                 makes it journal budget_refused and turn_finished
 *                 {outcome: budget_exhausted} instead: the call is not made;
 *   gate_settle   (before every step) once the journal says how the call
 *                 ended: model_response -> settle at its usage; error or
 *                 turn_finished without one -> release.
 * The journal is the source of truth across crashes: the fold
 * (gate_observe, fed every replayed and appended event) finds the last
 * reservation and what happened to it, and etcd's record of the
 * reservation makes settling it a second time a no-op. A reservation still
 * open when a new call is about to be made (its call was cut off) is
 * released first.
 *
 * Ownership: the gate borrows its config's pointers (etcd, labels, price),
 * which must outlive it.
 */
#ifndef TERN_RUNNER_BUDGETGATE_H
#define TERN_RUNNER_BUDGETGATE_H

#include "base/err.h"
#include "etcd/etcd.h"
#include "model/price.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>



struct gate_config {
    struct etcd *etcd;
    const char *ns, *uid;
    const cJSON *labels;              /* the session's labels, or NULL */
    const struct price_entry *price;  /* the session model's price, or NULL */
    int64_t clock_offset_s;           /* test hook: added to the wall clock */
    bool crash_after_reserve;         /* test hook: SIGKILL right after a reservation */
    /* journals one event (data consumed) and folds it (so gate_observe sees
     * it); returns 0 and its seq */
    int (*append)(void *ctx, const char *type, cJSON *data, uint64_t *ret_seq,
                  struct tern_err *err);
    void *ctx;
};

struct gate;

struct gate *gate_new(const struct gate_config *cfg);
void gate_free(struct gate *g);

/* Folds one journal event (replayed or just appended). */
void gate_observe(struct gate *g, const char *type, uint64_t seq, const cJSON *data);

/* Settles or releases the last reservation if its call has ended and it
 * was not settled yet by this process. Returns 0 or an etcd error. */
int gate_settle(struct gate *g, struct tern_err *err);

/* Loads the budgets that apply now. *ret_send: the max_completion_tokens
 * to send (max_completion, or the default under a budget). Returns 0, or
 * an etcd error, or TERN_EINVALID (a mirror or time zone it cannot use). */
int gate_prepare(struct gate *g, int64_t max_completion, int64_t *ret_send, struct tern_err *err);

/* Reserves a call of step `step` whose request body is body_len bytes and
 * which sends max_completion (from gate_prepare). *ret_refused: a budget
 * turned it away and the turn's end was journaled (do not call). Returns
 * 0 or an error (nothing is called then either). */
int gate_reserve(struct gate *g, int64_t step, size_t body_len, int64_t max_completion,
                 bool *ret_refused, struct tern_err *err);

/* Counters for the turn's stats and tests. */
struct gate_stats {
    int64_t reserved, settled, released, refused;
};
void gate_get_stats(const struct gate *g, struct gate_stats *ret);

#endif
