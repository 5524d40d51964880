/* journal.h - the durable, exactly-once session journal in etcd.
 *
 * Keys per session UID (see docs/journal.md for the full schema):
 *   /tern/v1/s/<uid>/meta                 {"namespace","name","createdAt"}
 *   /tern/v1/s/<uid>/ev/<seq %016x>       one event (JSON), never rewritten
 *   /tern/v1/s/<uid>/ch/<seq %016x>/<id>/<i %04x>
 *                                         chunks of an oversize event's data
 *   /tern/v1/s/<uid>/sum                  the summary (a fold over the events)
 *   /tern/v1/s/<uid>/lock                 the turn lock, bound to a lease
 *
 * Two layers:
 *  - a pure core (no I/O): event decoding (schema v1 and the pre-release
 *    v0), encoding, and the summary fold journal_summary_apply. Replaying a
 *    journal is "decode every event, fold". The runner builds its own
 *    agent-state replay the same way, on journal_replay's callback.
 *  - the etcd shell: struct journal (one writer's view of one session),
 *    append / replay / tail / compact / copy_until / delete and the turn lock.
 *
 * Exactly once: an append is one txn
 *     create_revision(ev/<seq>) == 0  AND  mod_revision(sum) == <seen>
 *     -> put ev/<seq>, put sum
 * where <seen> is the summary revision this writer last read or wrote. A
 * second writer of the same session (a stale runner pod, the operator
 * appending while a turn runs) loses the compare and gets TERN_EFENCED; its
 * handle is stale until journal_refresh. A txn whose reply was lost
 * (TERN_EUNKNOWN from etcd) is resolved by reading ev/<seq> and sum back:
 * committed (same bytes) -> success; absent and sum unchanged -> re-sent (the
 * create-if-absent compare makes that safe); anything else -> TERN_EFENCED.
 * Appends never create a duplicate or a gap.
 *
 * Ownership: decoded events and summaries own their strings and cJSON trees
 * (free with journal_event_done / journal_summary_done). Events passed to a
 * callback are borrowed for the duration of the call (copy with
 * journal_event_copy to keep one). A struct journal is used by one thread at
 * a time; different handles (even for the same session) may be used from
 * different threads. It borrows the struct etcd, which must outlive it.
 *
 * Errors: TERN_EFENCED (another writer appended first), TERN_EUNKNOWN (a
 * write could not be resolved within the retry budget: the handle refuses
 * appends until journal_resolve), TERN_ECOMPACTED (events before a snapshot
 * were dropped), TERN_ETOOLARGE (event data over TERN_JOURNAL_MAX_DATA),
 * TERN_EPARSE (a stored event or summary is malformed), TERN_EINVALID (bad
 * uid, type or argument), TERN_ECONFLICT (lock held by another owner), -ECANCELED,
 * plus the etcd client's errors.
 */
#ifndef TERN_JOURNAL_H
#define TERN_JOURNAL_H

#include "base/err.h"
#include "etcd/etcd.h"

#include <cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JOURNAL_SCHEMA_VERSION 1

/* turn_finished data.outcome: why a turn ended (written by the runner, and
 * by the operator for turns whose Job ended without saying). A completed
 * turn carries data.summary (the final answer) and data.artifacts (paths
 * under output/). */
#define JOURNAL_OUTCOME_COMPLETED "completed"
#define JOURNAL_OUTCOME_APPROVAL  "approval_requested"
#define JOURNAL_OUTCOME_LIMIT     "limit_reached"
#define JOURNAL_OUTCOME_REFUSED   "refused"
#define JOURNAL_OUTCOME_ERROR     "error"
#define JOURNAL_OUTCOME_BUDGET    "budget_exhausted" /* an AgentBudget refused a model call */

enum journal_type {
    JOURNAL_EV_UNKNOWN = 0, /* a type this build does not know: kept, not folded */
    JOURNAL_EV_USER_MESSAGE,
    JOURNAL_EV_TURN_STARTED,
    JOURNAL_EV_MODEL_REQUEST,
    JOURNAL_EV_MODEL_RESPONSE,
    JOURNAL_EV_TOOL_CALL,
    JOURNAL_EV_TOOL_RESULT,
    JOURNAL_EV_APPROVAL_REQUESTED,
    JOURNAL_EV_APPROVAL_DECIDED,
    JOURNAL_EV_TURN_FINISHED,
    JOURNAL_EV_FORK_CREATED,
    JOURNAL_EV_FORKED_FROM,
    JOURNAL_EV_LIMIT_REACHED,
    JOURNAL_EV_ERROR,
    JOURNAL_EV_SNAPSHOT, /* compaction: data {"upto", "summary", "state"} */
    JOURNAL_EV_RETRY,    /* the operator continues a failed session: data {"reason", ...} */
    JOURNAL_EV_MEMORY_DECIDED, /* a human decided a memory proposal: data {"id",
                                * "decision": approved|rejected, "decidedBy", "reason"} */
    JOURNAL_EV_MEMORY_APPLIED, /* the operator applied it (or could not): data {"id",
                                * "result": applied|conflict, "message", ...} */
    JOURNAL_EV_ARTIFACTS_PERSISTED, /* the operator stored output/: data {"turn", "request",
                                     * "configMap", "artifacts", "error"} (docs/operator.md) */
};

/* "user_message" ... for a known type, NULL for UNKNOWN. */
const char *journal_type_name(enum journal_type t);
/* The type for a name (JOURNAL_EV_UNKNOWN when not known). */
enum journal_type journal_type_parse(const char *name);

/* One decoded event. */
struct journal_event {
    int v;        /* schema version it was stored with (0 or 1) */
    uint64_t seq; /* 1, 2, 3, ... without gaps */
    enum journal_type type;
    char *type_name; /* the stored type string (also for UNKNOWN) */
    char *time;      /* RFC 3339 UTC with nanoseconds */
    int64_t turn;    /* turn number (0 = between turns) */
    char *key;       /* idempotency key, or NULL */
    cJSON *data;     /* always an object (empty if absent) */
};

void journal_event_done(struct journal_event *ev);
/* A deep copy (data copied with exact numbers). */
void journal_event_copy(struct journal_event *dst, const struct journal_event *src);

/* Decodes one stored event value (v1, or v0 converted to v1 fields). For a
 * chunked v1 event head, data is empty and *ret_chunks (may be NULL)
 * receives the chunk descriptor (owned by the caller, cJSON_Delete) so the
 * shell can reassemble it. Pure. Returns 0 and *ret, TERN_EPARSE /
 * TERN_ETOOLARGE (bounded by TERN_JOURNAL_MAX_EVENT) with the reason. */
int journal_event_decode(const char *value, size_t len, struct journal_event *ret,
                         cJSON **ret_chunks, struct tern_err *err);

/* Encodes an event as schema v1 JSON (compact; newly allocated). */
char *journal_event_encode(const struct journal_event *ev);

/* The summary (value of the sum key): a pure fold over the events. */
struct journal_pending {
    char *id; /* approval id, NULL when nothing is pending */
    char *tool;
    char *summary;
    char *requested_at;
};

struct journal_usage {
    int64_t model_turns;
    int64_t tool_calls;
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cost_micro_usd;
};

struct journal_summary {
    uint64_t last_seq;
    int64_t turn; /* highest turn seen */
    struct journal_usage usage;
    int64_t messages; /* user_message events */
    struct journal_pending pending;
    char *outcome;          /* last turn_finished outcome; NULL while a turn runs */
    uint64_t snapshot_seq;  /* seq of the latest snapshot event, 0 if none */
    char *updated;          /* time of the last event */
    /* for the operator (docs/journal.md, "summary"): */
    bool intent;            /* a user_message or approval_decided after the
                             * last turn_started: a turn has work to do */
    char *last_decided;     /* id of the last approval_decided, or NULL */
    char *result;           /* the last final answer (turn_finished data.summary
                             * with outcome "completed"), or NULL */
    cJSON *artifacts;       /* its data.artifacts (array of strings), or NULL */
    cJSON *result_value;    /* its data.result (the answer valid against
                             * spec.result.schema, at most TERN_RESULT_MAX_VALUE
                             * bytes as compact JSON), or NULL */
    cJSON *result_ref;      /* its data.resultRef {path, size, sha256} (a larger
                             * valid answer in the workspace), or NULL */
    int64_t result_turn;    /* the turn of that answer, 0 before any */
    cJSON *persisted;       /* the last artifacts_persisted data, or NULL */
    char *persist_request;  /* the last such event's data.request, or NULL */
    /* why the last turn ended (turn_finished data; cleared by turn_started): */
    char *reason;           /* data.reason, or NULL */
    char *message;          /* data.message, at most TERN_JOURNAL_MAX_REASON bytes */
    char *limit;            /* data.limit (a limit_reached outcome), or NULL */
    int64_t limit_used, limit_max; /* data.used / data.max with it */
    uint64_t good_seq;      /* the last event that is not part of a failure's
                             * tail (limit_reached, error, a turn_finished whose
                             * outcome is limit_reached/error/refused): where a
                             * fork of a failed session starts */
    char *first_request;    /* time of the first model_request, or NULL */
    /* memory proposals (docs/journal.md, "memory proposals"): an array of
     * at most TERN_MEMORY_MAX_PROPOSALS objects {id, turn, toolCallId,
     * reason, baseSha256, heading, content, sha256, state, decidedBy,
     * message, proposedAt}, oldest first; NULL when there are none */
    cJSON *memory;
};

void journal_summary_init(struct journal_summary *s);
void journal_summary_done(struct journal_summary *s);
void journal_summary_copy(struct journal_summary *dst, const struct journal_summary *src);

/* Folds one event into s (pure). Rules (docs/journal.md): last_seq/turn/
 * updated from every event; user_message -> messages++; model_response ->
 * model_turns++ and usage from data.usage {prompt_tokens, completion_tokens,
 * cost_micro_usd}; tool_call -> tool_calls++; approval_requested -> pending
 * = data {id, tool, summary}; approval_decided with data.id == pending id ->
 * pending cleared, last_decided = data.id; user_message, approval_decided
 * and retry -> intent = true; forked_from while a copied turn had not
 * finished (outcome NULL, turn > 0) -> intent = true (the fork continues
 * that turn); turn_started -> outcome, reason, message and limit cleared,
 * intent = false; turn_finished -> intent = false, outcome = data.outcome, reason/message/
 * limit/used/max from data (and result/artifacts/result_value/result_ref
 * from data.summary, data.artifacts, data.result and data.resultRef when
 * the outcome is completed, result_turn = its turn); artifacts_persisted ->
 * persisted = data, persist_request = data.request when present;
 * model_request -> the first
 * one's time; good_seq follows every event except a failure's tail;
 * snapshot -> s replaced by data.summary; tool_result with a valid
 * data.memoryProposal -> a Pending proposal (once per id; when the list is
 * full the oldest decided one makes room, and with none decided the new
 * one is dropped); memory_decided of a Pending one -> Approved / Rejected
 * with decidedBy and message; memory_applied of an Approved one ->
 * Applied / Conflict with message. Returns 0, or
 * TERN_EINVALID if ev.seq is not s->last_seq + 1 (a gap or a repeat; the
 * first event of a replay that starts at a snapshot is exempt). */
int journal_summary_apply(struct journal_summary *s, const struct journal_event *ev);

/* Proposals waiting for a decision or for being applied (Pending and
 * Approved) in s->memory. */
int journal_memory_pending(const struct journal_summary *s);
/* The proposal of s->memory with this id (borrowed), or NULL. */
const cJSON *journal_memory_find(const struct journal_summary *s, const char *id);

/* JSON of the summary (newly allocated tree / text), and back. */
cJSON *journal_summary_to_json(const struct journal_summary *s);
int journal_summary_decode(const char *value, size_t len, struct journal_summary *ret,
                           struct tern_err *err);

/* ---- the etcd shell ---------------------------------------------------- */

struct journal;

/* The retry budget for an etcd that cannot be reached: appends, reads and
 * the turn lock's lease (grant and keepalive) all wait this long. */
#define JOURNAL_RETRY_MS 30000

struct journal_opts {
    long retry_ms;    /* budget for retrying unreachable etcd / resolving
                       * unknown outcomes within one call; 0 = JOURNAL_RETRY_MS */
    size_t page_size; /* replay page; 0 = 1000 events */
};

/* The key prefix "/tern/v1/s/<uid>/" (newly allocated). uid: 1..128 chars of
 * [A-Za-z0-9._-]. Returns NULL for a bad uid. */
char *journal_prefix(const char *uid);

/* What a key under /tern/v1/s/ is (for a watch over all sessions, e.g. the
 * operator's summary watch: it sees every key and keeps the sum ones). */
enum journal_key_kind {
    JOURNAL_KEY_OTHER = 0, /* not a journal key */
    JOURNAL_KEY_META,
    JOURNAL_KEY_EVENT, /* *ret_seq set */
    JOURNAL_KEY_CHUNK,
    JOURNAL_KEY_SUM,
    JOURNAL_KEY_LOCK,
};
#define JOURNAL_ALL_PREFIX "/tern/v1/s/"
/* the team budgets' keys (budget/bstore.h: /tern/v1/bs/, b/, bm/, br/),
 * the operator's too */
#define JOURNAL_BUDGET_PREFIX "/tern/v1/b"

/* Classifies key; for journal keys copies the session uid into uid (at
 * least TERN_JOURNAL_MAX_UID + 1 bytes) and, for events, sets *ret_seq (may
 * be NULL). Pure. */
enum journal_key_kind journal_key_parse(const char *key, char *uid, uint64_t *ret_seq);

/* Opens one session's journal: reads sum (its value and revision) so the
 * handle can append. A journal without a sum key (new, or written by schema
 * v0, which kept no summary) gets its summary by replaying the events.
 * Returns 0 and *ret, or TERN_EINVALID (bad uid) / etcd errors. */
int journal_open(struct etcd *c, const char *uid, const struct journal_opts *opts,
                 struct journal **ret, struct tern_err *err);
void journal_free(struct journal *j);

/* Summaries read ahead (the operator reads many sessions' summaries in one
 * request, rather than one per journal_open, when it reconciles them all
 * after a start). */
#define JOURNAL_SUM_BATCH 32 /* sessions per journal_read_sums: 32 sums of at
                              * most TERN_ETCD_MAX_VALUE fit one reply */
struct journal_sum_read {
    bool present;         /* the session has a sum key (else: new, or schema v0) */
    char *value;          /* its bytes, owned (present only) */
    size_t value_len;
    int64_t mod_revision; /* the sum key's revision: what an append compares */
};
void journal_sum_read_done(struct journal_sum_read *r);

/* Reads the sum keys of n (1..JOURNAL_SUM_BATCH) sessions in one etcd txn
 * of ranges; ret[i] is uids[i]'s (release each with journal_sum_read_done)
 * and *ret_rev the store revision the reads saw. Returns 0, TERN_EINVALID (a
 * bad uid or n), or etcd errors (then nothing is returned). */
int journal_read_sums(struct etcd *c, const char *const *uids, size_t n,
                      struct journal_sum_read *ret, int64_t *ret_rev, struct tern_err *err);

/* journal_open from a summary read by journal_read_sums (borrowed): no etcd
 * read when it is present; an absent one opens as journal_open does (the
 * events are folded). The caller answers for the read being recent enough:
 * an append made on an older one is TERN_EFENCED, as for any stale handle.
 * Returns as journal_open, and TERN_EPARSE for a summary that does not
 * decode. */
int journal_open_read(struct etcd *c, const char *uid, const struct journal_opts *opts,
                      const struct journal_sum_read *sum, struct journal **ret,
                      struct tern_err *err);

/* Writes meta if absent ({"namespace","name","createdAt"}). Idempotent. */
int journal_create_meta(struct journal *j, const char *ns, const char *name, struct tern_err *err);

/* The handle's current view: summary (borrowed, valid until the next call on
 * j) and the summary revision it will compare against. */
const struct journal_summary *journal_summary(const struct journal *j);
int64_t journal_seen_revision(const struct journal *j);

/* What to append: seq, time and v are assigned by the journal. data may be
 * NULL (stored as {}); it is borrowed. */
struct journal_append_req {
    enum journal_type type;
    const char *type_name; /* overrides type when non-NULL (future types) */
    int64_t turn;
    const char *key; /* idempotency key or NULL */
    const cJSON *data;
};

/* Appends one event exactly once as seq = last_seq + 1. Data whose JSON
 * exceeds TERN_JOURNAL_MAX_EVENT is written as chunks first (each chunk put
 * fenced like the append itself), then the head and the summary in the
 * final txn; over TERN_JOURNAL_MAX_DATA it fails with TERN_ETOOLARGE and
 * nothing is written (the caller truncates with an explicit marker, see
 * journal_truncate_data). Returns 0 and *ret_seq (may be NULL), or
 * TERN_EFENCED, TERN_EUNKNOWN (unresolved after retry_ms), ... */
int journal_append(struct journal *j, const struct journal_append_req *req, uint64_t *ret_seq,
                   struct tern_err *err);

/* After TERN_EUNKNOWN: reads back and says whether the pending append was
 * committed (*ret_committed, and its *ret_seq). Afterwards the handle accepts
 * appends again. Returns 0, or an etcd error (still unresolved). */
int journal_resolve(struct journal *j, bool *ret_committed, uint64_t *ret_seq,
                    struct tern_err *err);

/* Counters of one handle (for tests, metrics and the benchmark). */
struct journal_stats {
    uint64_t appends;          /* committed appends */
    uint64_t unknown_outcomes; /* commit replies lost, resolved by read-back */
    uint64_t resends;          /* commits re-sent after a read-back found them absent */
    uint64_t retries;          /* retries after etcd was unreachable */
    uint64_t chunked;          /* appends stored in chunks */
};
void journal_get_stats(const struct journal *j, struct journal_stats *ret);

/* Re-reads sum after TERN_EFENCED (adopting the other writer's progress). */
int journal_refresh(struct journal *j, struct tern_err *err);

/* Replaces data that is too large with an explicit marker object
 * {"truncated": true, "originalBytes": N, "preview": "<first bytes of the
 * JSON text>"} no larger than max_bytes (0 = TERN_JOURNAL_MAX_EVENT).
 * Returns a new tree owned by the caller. Pure. */
cJSON *journal_truncate_data(const cJSON *data, size_t max_bytes);

/* Called for each event in seq order; return non-zero to stop (returned by
 * the caller of the iteration). */
typedef int (*journal_event_fn)(void *ctx, const struct journal_event *ev);

#define JOURNAL_FROM_SNAPSHOT 0 /* from_seq: start at the latest snapshot (or 1) */

/* Replays events from from_seq (JOURNAL_FROM_SNAPSHOT = the latest snapshot
 * event, else seq 1) to the end, reading pages of page_size events, and
 * folds them into a summary returned in *ret_sum (may be NULL; release with
 * journal_summary_done). fn may be NULL. Chunked events arrive reassembled.
 * Stops with TERN_EPARSE at a malformed event, TERN_EINVALID at a gap, and
 * TERN_ECOMPACTED if from_seq precedes the oldest kept event. Does not use
 * or change j's append state. */
int journal_replay(struct journal *j, uint64_t from_seq, journal_event_fn fn, void *ctx,
                   struct journal_summary *ret_sum, struct tern_err *err);

/* Delivers every event from from_seq on, in order, exactly once: first the
 * stored ones (paged), then new ones as they are appended (etcd watch on the
 * ev/ prefix). If etcd compacts the watched revision away, the tail relists
 * from the next undelivered seq and resumes, so nothing is missed or
 * repeated. Blocks until fn returns non-zero (returned), *cancel is raised
 * (-ECANCELED) or an error (etcd unreachable for longer than retry_ms, a
 * malformed event). */
int journal_tail(struct journal *j, uint64_t from_seq, journal_event_fn fn, void *ctx,
                 atomic_bool *cancel, struct tern_err *err);

/* Compaction: appends a snapshot event (seq = last_seq + 1) whose data is
 * {"upto": last_seq, "summary": <summary>, "state": state} (state: the
 * caller's folded agent state, may be NULL), then, if drop_old, deletes the
 * events before it. Replay from JOURNAL_FROM_SNAPSHOT then starts there.
 * Returns 0 and *ret_seq (may be NULL), or append's errors. */
int journal_compact(struct journal *j, const cJSON *state, bool drop_old, uint64_t *ret_seq,
                    struct tern_err *err);

/* Deletes the events (and their chunks) before seq, which must be a stored
 * event: a snapshot, so that replays from JOURNAL_FROM_SNAPSHOT and forks
 * from it still work. Idempotent (retried within retry_ms). Returns 0,
 * TERN_EINVALID for a seq past the end, or the etcd error. */
int journal_drop_before(struct journal *j, uint64_t seq, struct tern_err *err);

/* Fork: copies events 1..upto_seq of src_uid (byte for byte, chunks
 * included) into dst_uid and writes dst's summary, in fenced batches. If it
 * is interrupted, calling it again continues after dst's last copied seq.
 * A dst that already holds events beyond upto_seq, or whose events differ
 * from src's, fails with TERN_ECONFLICT. If src was compacted past upto_seq
 * the copy starts at the latest snapshot <= upto_seq; TERN_ECOMPACTED when
 * none is available. Returns 0 and the number of events copied by this
 * call in *ret_copied (may be NULL). */
int journal_copy_until(struct etcd *c, const char *src_uid, const char *dst_uid, uint64_t upto_seq,
                       uint64_t *ret_copied, struct tern_err *err);

/* Deletes every key of the session (events, chunks, sum, meta, lock). */
int journal_delete(struct etcd *c, const char *uid, struct tern_err *err);

/* ---- access: the journal's etcd users and roles (access.c) -------------
 *
 * The journal's etcd runs with client-certificate TLS and etcd auth
 * (docs/journal.md, "The locked door"): every request needs a certificate
 * signed by the journal's CA (the door) and a user (who may touch which
 * keys). etcd's gateway does not map a certificate to a user (it refuses a
 * client certificate with a CommonName when auth is on), so users log in
 * with a password:
 *   root             etcd's root role: user and role administration only
 *   <operator user>  role of the same name: READWRITE on JOURNAL_ALL_PREFIX
 *                    and JOURNAL_BUDGET_PREFIX
 *   tern-s-<uid>     role of the same name: READWRITE on /tern/v1/s/<uid>/,
 *                    one per session, for that session's runner
 * A session's user can read and write its own journal (events, chunks,
 * summary, meta, lock) and nothing else: no other session's keys, no user
 * or role administration. */
#define JOURNAL_ROOT_USER            "root"
#define JOURNAL_OPERATOR_USER        "tern-operator"
#define JOURNAL_SESSION_USER_PREFIX  "tern-s-"

/* "tern-s-<uid>" (newly allocated; also the role's name), NULL for a bad uid. */
char *journal_session_user(const char *uid);

struct journal_access_init {
    const struct etcd_config *base;  /* endpoints and TLS (its user is ignored) */
    const char *root_password;
    const char *operator_user;
    const char *operator_password;
    bool *ret_enabled;               /* set true when this call enabled auth; may be NULL */
};

/* Sets the journal's etcd up, idempotently: when auth is not enabled yet,
 * creates root (with the root role), the operator's user and role, then
 * enables auth; when it is, logs in as root and repairs the operator's user
 * (password) and role. Returns 0, TERN_EAUTH (root's password differs from
 * the one auth was enabled with), or etcd errors. */
int journal_access_init(const struct journal_access_init *in, struct tern_err *err);

/* Gives session uid its user and role (admin: a client of the root user).
 * Idempotent; an existing user gets password. With ns (the session's
 * namespace; NULL: the journal only) the role also reads the namespace's
 * AgentBudget mirrors (/tern/v1/bs/<ns>/) and writes their counters
 * (/tern/v1/b/<ns>/) and its own reservations (/tern/v1/br/<ns>/<uid>/).
 * Returns 0 or etcd errors. */
int journal_access_grant(struct etcd *admin, const char *uid, const char *ns,
                         const char *password, struct tern_err *err);
/* *ret_ok: the session's user exists and holds its role. */
int journal_access_check(struct etcd *admin, const char *uid, bool *ret_ok,
                         struct tern_err *err);
/* Removes the session's user and role (absent ones are fine). */
int journal_access_revoke(struct etcd *admin, const char *uid, struct tern_err *err);

/* ---- the turn lock ----------------------------------------------------- */

struct journal_lock;

/* Takes /tern/v1/s/<uid>/lock for owner (e.g. the runner pod name) with a
 * lease of ttl_s seconds, kept alive by a background thread until release.
 * An etcd that cannot be reached is retried for JOURNAL_RETRY_MS, as the
 * journal's writes are, both here (grant, create, read-back) and by the
 * keeper (the lock counts as lost only when etcd says the lease is gone or
 * after that long without a refresh). Returns 0 and *ret, TERN_ECONFLICT
 * naming the current owner (it frees when that owner releases or its lease
 * expires), or the etcd error once the budget is spent. */
int journal_lock_acquire(struct etcd *c, const char *uid, const char *owner, int64_t ttl_s,
                         struct journal_lock **ret, struct tern_err *err);
/* True when the lease was lost (expired): the owner must stop writing. */
bool journal_lock_lost(const struct journal_lock *l);
int64_t journal_lock_lease(const struct journal_lock *l);
/* Stops the keepalive, revokes the lease (deleting the lock key) and frees
 * l (accepts NULL). Returns 0 or the revoke error (the lease then expires
 * by itself). */
int journal_lock_release(struct journal_lock *l, struct tern_err *err);

#endif
