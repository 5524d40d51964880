/* bstore.h - team budgets in etcd: the operator's mirror of each
 * AgentBudget, the counters of its windows, its concurrency ledger, and the
 * reservations of model calls, all changed by compare-and-swap
 * transactions (docs/budgets.md, "In etcd").
 *
 * Keys (the journal's etcd, beside /tern/v1/s/):
 *   /tern/v1/bs/<ns>/<budget>            the AgentBudget as the operator mirrors
 *                                        it (bspec.h), read by runners
 *   /tern/v1/b/<ns>/<budget>/w/<window>  one window's counters (ledger.h)
 *   /tern/v1/b/<ns>/<budget>/slots       the sessions holding a concurrency slot
 *   /tern/v1/bm/<ns>/<uid>               a session's memo: {"started": [budgets
 *                                        that counted it as started]}
 *   /tern/v1/br/<ns>/<uid>/<id %016x>    an open reservation of a model call:
 *                                        the data of its budget_reserved event
 *
 * Every change is one etcd txn that compares the mod_revision of each key it
 * read (counters, ledgers, memo, the mirrors whose limits it checked) and
 * is retried from a fresh read when another writer came first (at most
 * TERN_BUDGET_TXN_ATTEMPTS rounds). A reservation creates its record in the
 * same txn as it adds to the counters, and settling deletes the record in
 * the txn that moves the amount from reserved to used: a repeated settle
 * (a crash, a lost reply) finds no record and changes nothing, so nothing is
 * ever counted twice. Unreachable etcd is retried for up to 30 s.
 *
 * Ownership: returned arrays are the caller's (bstore_budgets_free). The
 * struct etcd is borrowed. Errors: etcd's, TERN_ECONFLICT (still contended
 * after the retries), TERN_EINVALID (a bad value in etcd, a zone that cannot
 * be loaded), TERN_ETOOLARGE (more than TERN_BUDGET_MAX_PER_NS budgets).
 */
#ifndef TERN_BUDGET_BSTORE_H
#define TERN_BUDGET_BSTORE_H

#include "base/err.h"
#include "budget/bspec.h"
#include "budget/ledger.h"
#include "budget/tzwin.h"
#include "etcd/etcd.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct journal;

/* Keys, newly allocated. */
char *bstore_key_spec(const char *ns, const char *name);
char *bstore_key_window(const char *ns, const char *name, const char *window);
char *bstore_key_slots(const char *ns, const char *name);
char *bstore_key_memo(const char *ns, const char *uid);
char *bstore_key_res(const char *ns, const char *uid, uint64_t id);

/* A budget as etcd has it, with its window at the time it was loaded. */
struct bstore_budget {
    struct bspec spec;
    int64_t rev;            /* mod_revision of the mirror */
    struct tzwin_window win;
};
void bstore_budgets_free(struct bstore_budget *b, size_t n);

/* Time zones loaded once per name (a small cache the caller keeps; not
 * thread-safe). */
struct bstore_zones;
struct bstore_zones *bstore_zones_new(void);
void bstore_zones_free(struct bstore_zones *z);
/* The zone (borrowed from the cache) or an error (-ENOENT, TERN_EINVALID). */
int bstore_zone(struct bstore_zones *z, const char *name, const struct tzwin_zone **ret,
                struct tern_err *err);

/* The mirrored budgets of namespace ns that apply to a session with these
 * labels (labels NULL and all true: every budget of ns), with their windows
 * at now. Returns 0 and *ret / *ret_n (possibly 0), or an error; a mirror
 * that does not parse or whose zone cannot be loaded is an error naming
 * it. */
int bstore_load(struct etcd *c, struct bstore_zones *zones, const char *ns, const cJSON *labels,
                bool all, int64_t now, struct bstore_budget **ret, size_t *ret_n,
                struct tern_err *err);

/* ---- the operator's mirror --------------------------------------------------- */

/* Writes the mirror of b unless etcd already has exactly it. *ret_changed
 * (may be NULL) says whether it wrote. */
int bstore_put_mirror(struct etcd *c, const struct bspec *b, bool *ret_changed,
                      struct tern_err *err);
/* Deletes the mirror and every key of the budget (counters, ledger). */
int bstore_delete_budget(struct etcd *c, const char *ns, const char *name, struct tern_err *err);
/* The "<ns>/<name>" of every mirror in etcd (all namespaces), newly
 * allocated strings. */
int bstore_list_mirrors(struct etcd *c, char ***ret, size_t *ret_n, struct tern_err *err);
/* Deletes the windows of a budget other than keep_a and keep_b. */
int bstore_gc_windows(struct etcd *c, const char *ns, const char *name, const char *keep_a,
                      const char *keep_b, struct tern_err *err);

/* What a budget's current window and ledger hold (for its status). */
struct bstore_usage {
    struct ledger_counters win;
    struct ledger_slots slots;
};
int bstore_usage(struct etcd *c, const struct bstore_budget *b, struct bstore_usage *ret,
                 struct tern_err *err);
void bstore_usage_done(struct bstore_usage *u);

/* Removes from the budget's ledger every holder keep(ctx, uid) says is
 * gone (a session deleted while the operator was away). Returns 0 and the
 * number removed in *ret_n (may be NULL). */
int bstore_prune_slots(struct etcd *c, const char *ns, const char *name,
                       bool (*keep)(void *ctx, const char *uid), void *ctx, size_t *ret_n,
                       struct tern_err *err);

/* ---- model calls (the runner) ------------------------------------------------ */

/* Reserves r->amount against every budget r->refs names (b[i] is the
 * loaded budget of r->refs[i]), under the record key of (ns, uid, r->id),
 * in one txn; the limits are those of the mirrors as they are when the txn
 * commits (a mirror that is gone no longer applies). Returns 0 with
 * *ret_refused false (reserved; also when the record exists already, an
 * earlier attempt's), or with *ret_refused true and *ret_refusal /
 * *ret_which (the index into r->refs) saying which budget turned it away;
 * the refusal is counted in that window's counters. */
int bstore_reserve(struct etcd *c, const char *ns, const char *uid,
                   const struct ledger_reservation *r, const struct bstore_budget *b,
                   bool *ret_refused, struct ledger_refusal *ret_refusal, size_t *ret_which,
                   struct tern_err *err);

/* Settles the reservation (ns, uid, id): its reserved amount (from the
 * record) leaves reserved and `used` (NULL = release) is added to used, in
 * every window it names, and the record goes. No record: nothing to do,
 * *ret_settled (may be NULL) false. */
int bstore_settle(struct etcd *c, const char *ns, const char *uid, uint64_t id,
                  const struct ledger_amount *used, bool *ret_settled, struct tern_err *err);

/* The ids of the session's open reservations (ascending), newly
 * allocated. */
int bstore_open_reservations(struct etcd *c, const char *ns, const char *uid, uint64_t **ret,
                             size_t *ret_n, struct tern_err *err);

/* Settles or releases every open reservation of a session from its journal
 * (the caller holds the session's turn lock, so no runner is making one):
 * the events after each reservation say whether its call answered (settle
 * at its usage) or not (release). *ret_n (may be NULL): how many. */
int bstore_resolve(struct etcd *c, struct journal *j, const char *ns, const char *uid,
                   size_t *ret_n, struct tern_err *err);

/* ---- sessions (the operator) ---------------------------------------------------- */

/* Who waits for each budget, in any order (ledger_queue_position sorts). */
struct bstore_waiters {
    struct ledger_waiter *w;
    size_t n;
};

struct bstore_admission {
    bool admitted;
    size_t which;         /* the budget that holds the session back */
    enum bspec_dim dim;   /* BSPEC_CONCURRENT or BSPEC_STARTED */
    int64_t used, limit;  /* holders (sessions started) of the limit */
    size_t position;      /* the session's place in that budget's queue (1 = next) */
    size_t waiting;       /* how many wait there */
};

/* Admits session (uid, name) to run (hold a sandbox, run turns) under the
 * budgets b (those that apply to it), in one txn: it takes a slot in every
 * concurrency ledger it is not in, and counts it as started in the current
 * window of every budget with a sessionsStarted limit that did not count it
 * yet (the memo remembers). Only the first `free` sessions of a queue in
 * creation order (waiters[i], for b[i]) may go. force: take the slots
 * without looking at limits or queues (a session that already holds a
 * sandbox), and count nothing as started. Returns 0 and *ret. */
int bstore_admit(struct etcd *c, const char *ns, const char *uid, const char *name,
                 const struct bstore_budget *b, size_t n, struct bstore_waiters *waiters,
                 bool force, struct bstore_admission *ret, struct tern_err *err);

/* Whether the session holds a slot in budget name (0 and *ret). */
int bstore_holds(struct etcd *c, const char *ns, const char *name, const char *uid, bool *ret,
                 struct tern_err *err);

/* Leaves the concurrency ledgers of the named budgets; *ret_removed (may
 * be NULL): how many it was in. */
int bstore_release(struct etcd *c, const char *ns, const char *uid, const char *const *names,
                   size_t n, size_t *ret_removed, struct tern_err *err);

/* A deleted session: leaves the named ledgers and drops its memo. */
int bstore_forget(struct etcd *c, const char *ns, const char *uid, const char *const *names,
                  size_t n, struct tern_err *err);

#endif
