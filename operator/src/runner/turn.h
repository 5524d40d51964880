/* turn.h - one turn of one session: the runner's I/O shell (docs/design.md,
 * "A turn, step by step").
 *
 *   1. take the session's turn lock (waiting up to lock_wait_ms for a
 *      previous owner's lease to end);
 *   2. replay the journal into a struct replay_state (runner/replay.h);
 *   3. loop: plan_next -> perform the one action -> journal its event ->
 *      fold that event into the state, until the plan says the turn is over.
 *
 * Every side effect is journaled exactly once: a model response is
 * journaled before anything acts on it; a tool call is journaled
 * (tool_call) before sandboxd is called with Idempotency-Key
 * <uid>/<callId>, and its result after. A runner that loses its lock or
 * whose append is fenced by another writer stops at once without acting.
 *
 * Returns 0 when the turn ended for a reason the journal records (or had
 * already ended), TERN_EINVALID for configuration errors (exit 78), and any
 * other negative code for retryable failures (exit 75): etcd unreachable
 * beyond the journal's retry budget, lock held by a live runner, fenced,
 * model unreachable or overloaded after retries, sandboxd unreachable.
 */
#ifndef TERN_RUNNER_TURN_H
#define TERN_RUNNER_TURN_H

#include "base/err.h"
#include "runner/config.h"

#include <stdatomic.h>
#include <stdint.h>

struct turn_stats {
    int64_t steps;          /* actions performed (each journaled at least one event) */
    int64_t appends;        /* events appended */
    int64_t replayed;       /* events replayed at start */
    int64_t lock_wait_ms;   /* time spent waiting for the lock */
    int64_t replay_ms;      /* replay time */
    int64_t first_append_ms;/* from turn_run's start to the first append committed (0 = none) */
    int64_t model_ms;       /* time in model calls */
    int64_t tool_ms;        /* time in sandboxd calls */
    int64_t journal_ms;     /* time in journal appends */
    int64_t total_ms;
    int64_t model_calls, tool_calls;
    char outcome[32];       /* the turn_finished outcome written or found, "" if none */
    /* why turn_run failed, for the termination message the operator reads
     * (CamelCase, "" when it did not): ModelUnreachable, ModelRateLimited,
     * ModelServerError, SandboxUnreachable, SandboxBusy, JournalUnavailable,
     * LockBusy, Fenced, Stopped, ConfigError, ToolServerUnreachable */
    char failure_class[32];
    /* allowed MCP tools that are not offered, and why (for the log; "" if none) */
    char tool_notes[1024];
};

/* Runs the turn. stop (may be NULL) is checked between steps and aborts a
 * model call in flight; then the lock is released and -ECANCELED returned.
 * stats (may be NULL) receives the counters. */
int turn_run(const struct runner_config *cfg, atomic_bool *stop, struct turn_stats *stats,
             struct tern_err *err);

#endif
