/* ledger.h - the arithmetic of team budgets (pure): a window's counters,
 * reserving a model call's worst case and settling what it used, the
 * concurrency ledger, the admission queue's order, and which reservation
 * a session's journal leaves open.
 *
 * Counters of one budget window (the value of
 * /tern/v1/b/<ns>/<budget>/w/<window>, docs/budgets.md):
 *   {"tokens", "costMicroUSD"            settled use
 *    "reservedTokens", "reservedCostMicroUSD"   reserved, not yet settled
 *    "calls", "refused", "sessionsStarted", "start", "end"}
 * A call may be made only if, for every limited dimension of every budget
 * that applies, used + reserved + its worst case <= the limit; its
 * reservation is then added to reserved in the same etcd transaction, and
 * settling moves it from reserved to used at its actual size. Since the
 * actual use of a call is at most its worst case, used never passes the
 * limit (docs/budgets.md says when a model breaks that promise).
 *
 * The worst case of a call: its prompt cannot have more tokens than the
 * request body has bytes, and its completion no more than the
 * max_completion_tokens it sends; the cost prices both at the input and
 * output prices of the price table.
 *
 * The concurrency ledger (/tern/v1/b/<ns>/<budget>/slots) is the set of
 * sessions holding a slot, {"<uid>": "<session name>"}.
 *
 * Ownership: structs own what they point to (their *_done functions).
 */
#ifndef TERN_BUDGET_LEDGER_H
#define TERN_BUDGET_LEDGER_H

#include "base/err.h"
#include "budget/bspec.h"
#include "budget/tzwin.h"
#include "model/price.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ledger_amount {
    int64_t tokens;
    int64_t cost; /* micro-USD; -1: unknown (the model has no price) */
};

struct ledger_counters {
    int64_t tokens, cost;         /* settled */
    int64_t res_tokens, res_cost; /* reserved */
    int64_t calls;                /* settled calls */
    int64_t refused;              /* calls and sessions turned away */
    int64_t started;              /* sessions started */
    int64_t start, end;           /* the window, Unix seconds (informational) */
};

/* Parses a counters value (absent members are 0). Returns 0 or
 * TERN_EPARSE / TERN_EINVALID. */
int ledger_counters_parse(const char *v, size_t len, struct ledger_counters *ret,
                          struct tern_err *err);
cJSON *ledger_counters_json(const struct ledger_counters *c);

/* The worst case of a model call whose request body is body_bytes long and
 * that sends max_completion tokens; price may be NULL (cost -1). */
void ledger_worst_case(size_t body_bytes, int64_t max_completion, const struct price_entry *price,
                       struct ledger_amount *ret);

/* Why a budget refuses: the dimension and the numbers. */
struct ledger_refusal {
    enum bspec_dim dim;
    int64_t used, reserved, want, limit;
};

/* Whether `want` fits into budget b with counters c: true, or false and
 * *ret (may be NULL) says which dimension refuses first (tokens before
 * cost). An unknown cost never fits a cost limit. */
bool ledger_fits(const struct bspec *b, const struct ledger_counters *c,
                 const struct ledger_amount *want, struct ledger_refusal *ret);

/* reserved += a */
void ledger_reserve(struct ledger_counters *c, const struct ledger_amount *a);
/* reserved -= reserved_amount (never below 0); with actual (may be NULL =
 * release): used += actual and calls++. Sums saturate. */
void ledger_settle(struct ledger_counters *c, const struct ledger_amount *reserved_amount,
                   const struct ledger_amount *actual);

/* The people's text of a refusal: "tokens: 9850 used + 1200 reserved + 400
 * needed > 10000"; newly allocated. */
char *ledger_refusal_text(const struct ledger_refusal *r);

/* ---- concurrency ------------------------------------------------------- */

struct ledger_slots {
    char **uids, **names;
    size_t n;
};

/* Parses {"<uid>": "<name>", ...} (at most TERN_BUDGET_MAX_HOLDERS).
 * Returns 0, TERN_EPARSE, TERN_ETOOLARGE. */
int ledger_slots_parse(const char *v, size_t len, struct ledger_slots *ret, struct tern_err *err);
cJSON *ledger_slots_json(const struct ledger_slots *s);
void ledger_slots_done(struct ledger_slots *s);
bool ledger_slots_has(const struct ledger_slots *s, const char *uid);
/* Adds (0, or TERN_ETOOLARGE when full) / removes (true if it was there). */
int ledger_slots_add(struct ledger_slots *s, const char *uid, const char *name);
bool ledger_slots_remove(struct ledger_slots *s, const char *uid);

/* ---- admission order ------------------------------------------------------ */

/* A session waiting to be admitted by a budget. */
struct ledger_waiter {
    const char *uid, *name;
    double created; /* metadata.creationTimestamp, Unix seconds */
};

/* Orders waiters by creation, then name, then uid (a total order, the same
 * after any restart). */
int ledger_waiter_cmp(const struct ledger_waiter *a, const struct ledger_waiter *b);

/* The 1-based place of uid among the waiters that are not holders (w is
 * sorted in place), and how many wait; 0 when uid is not among them. */
size_t ledger_queue_position(struct ledger_waiter *w, size_t n, const struct ledger_slots *holders,
                             const char *uid, size_t *ret_waiting);

/* Whether a holder should give its slot up: every one of the limit's slots
 * is held and more sessions that hold none wait than `yielding` other
 * holders are giving theirs up already (w: the waiters as the cache shows
 * them, some perhaps admitted since; the holders, from the ledger,
 * decide). w is sorted in place. */
bool ledger_slot_wanted(struct ledger_waiter *w, size_t n, const struct ledger_slots *holders,
                        int64_t limit, size_t yielding);

/* ---- the reservation a journal leaves open --------------------------------- */

/* A budget and the window a reservation counts in. */
struct ledger_ref {
    char name[TERN_BUDGET_MAX_NAME + 1];
    char window[TZWIN_KEY_MAX];
};

struct ledger_reservation {
    uint64_t id;      /* the seq of its budget_reserved event */
    int64_t step;     /* the model step it is for */
    struct ledger_amount amount;
    struct ledger_ref *refs;
    size_t nrefs;
};

/* The data of a budget_reserved event for r, made by session uid. */
cJSON *ledger_reservation_json(const struct ledger_reservation *r, const char *uid);
/* ... and back (id from the event's seq). Returns 0 or TERN_EINVALID. */
int ledger_reservation_parse(const cJSON *data, uint64_t id, struct ledger_reservation *ret,
                             struct tern_err *err);
void ledger_reservation_done(struct ledger_reservation *r);

enum ledger_state {
    LEDGER_NONE = 0, /* no reservation of this session's */
    LEDGER_OPEN,     /* reserved; the call has not answered yet (or the
                      * reservation may still be being made) */
    LEDGER_USED,     /* the call answered: settle at `used` */
    LEDGER_UNUSED,   /* the call was not made or failed: release */
    LEDGER_REFUSED,  /* refused: nothing was reserved */
};

/* The fold over a session's events (in order) that tracks its latest
 * reservation. Only reservations made under uid count (a fork's copied
 * events carry its parent's). */
struct ledger_track {
    char uid[TERN_JOURNAL_MAX_UID + 1];
    struct ledger_reservation res;
    enum ledger_state state;
    struct ledger_amount used;
};

void ledger_track_init(struct ledger_track *t, const char *uid);
void ledger_track_done(struct ledger_track *t);
/* Folds one event: budget_reserved opens a reservation; model_response
 * makes it USED (usage.prompt_tokens + completion_tokens, cost_micro_usd);
 * error and turn_finished make an open one UNUSED (a newer budget_reserved
 * replaces it: the runner resolves one before it journals the next);
 * budget_refused for it makes it REFUSED. Anything else is ignored. */
void ledger_track_apply(struct ledger_track *t, const char *type, uint64_t seq, const cJSON *data);

#endif
