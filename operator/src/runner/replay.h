/* replay.h - the runner's agent state, folded from journal events (pure).
 *
 * The runner rebuilds everything it knows from the journal: the chat
 * conversation (user messages, recorded model responses, tool results),
 * the usage counters, and where the current turn stands (started? model call
 * journaled but unanswered? tool calls of the last response without a
 * result? approvals requested / decided? finished?). The fold is linear in
 * the number of events and does no I/O: the shell feeds it what
 * journal_replay delivers, through the thin struct replay_event view (so
 * this module depends on the event format only, not on the journal shell).
 *
 * Event data the runner writes and reads (docs/runner.md has the full list):
 *   user_message       {"text", "index"?, "source"?} (also "content"/"message";
 *                       source "objective" marks the objective itself)
 *   turn_started       {"turn"}
 *   model_request      {"step", "messages"}
 *   model_response     {"step", "kind", "content", "refusal", "finishReason",
 *                       "requestId", "toolCalls": [{"id","name","arguments",
 *                       "status","problem"}], "usage": {prompt_tokens,
 *                       completion_tokens, cached_tokens, reasoning_tokens,
 *                       cost_micro_usd}}
 *   tool_call          {"callId", "tool", "arguments", "timeoutMs"}
 *   tool_result        {"callId", "tool", "status", "output", ...}
 *   approval_requested {"id", "callId", "tool", "summary", "pattern"}
 *   approval_decided   {"id", "decision": "approve"|"deny", "by", "reason"}
 *                       (reason: the approver's words, told to the model on a
 *                       denial, at most TERN_APPROVAL_MAX_REASON bytes)
 *   result_invalid     {"attempt", "problem", "message"} (a final answer that
 *                       is not valid against spec.result.schema: problem is
 *                       the parse error or the validator's errors, message
 *                       what the model is told; message enters the
 *                       conversation as a user message)
 *   limit_reached      {"limit", "used", "max"}
 *   turn_finished      {"outcome", "reason", "message", "limit", "used", "max",
 *                       "summary", "artifacts", "result", "resultRef"}
 *
 * Ownership: struct replay_state owns everything in it (replay_state_done).
 */
#ifndef TERN_RUNNER_REPLAY_H
#define TERN_RUNNER_REPLAY_H

#include "base/err.h"
#include "model/chat.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One journal event as the fold sees it (all borrowed). */
struct replay_event {
    uint64_t seq;
    const char *type;  /* "model_response", ... */
    int64_t turn;
    const char *key;   /* or NULL */
    const cJSON *data; /* an object (may be empty) */
    const char *time;  /* RFC 3339 UTC, or NULL */
};

enum replay_decision { REPLAY_UNDECIDED = 0, REPLAY_APPROVED, REPLAY_DENIED };

/* A tool call of the latest model response. */
struct replay_call {
    char *id;
    char *name;
    char *arguments;
    char *status;           /* chat_call_status_str at parse time ("ok", "bad_json", ...) */
    char *problem;          /* or NULL */
    bool started;           /* a tool_call event exists */
    bool answered;          /* a tool_result event exists */
    char *approval_id;      /* approval_requested for it, or NULL */
    enum replay_decision decision;
    char *decision_reason;  /* approval_decided data.reason (the approver's words), or NULL */
};

struct replay_state {
    struct chat_conv conv;  /* user / assistant / tool messages, in API order */
    uint64_t last_seq;
    int64_t user_messages;  /* user_message events */
    int64_t max_message_index; /* highest data.index of a user_message, -1 if none */
    bool objective_journaled;  /* a user_message with data.source "objective" (the
                                * operator journals the objective as the first message) */

    /* usage over the whole session */
    int64_t model_turns;
    int64_t tool_calls;
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cost_micro_usd;

    /* the turn being replayed (the highest turn number seen) */
    int64_t turn;
    bool turn_started;      /* turn_started for `turn` */
    bool turn_finished;     /* turn_finished for `turn` */
    char *outcome;          /* its outcome, or NULL */
    int64_t model_steps;    /* model_response events in the session */
    bool request_open;      /* a model_request without its model_response */
    int64_t consecutive_bad;/* model responses in a row that were malformed/empty */

    /* the latest model response's tool calls (all answered = nothing pending) */
    struct replay_call *calls;
    size_t ncalls;
    bool last_final;        /* the latest model response had no tool calls */
    bool last_refusal;      /* ... and was a refusal */
    bool limit_reported;    /* limit_reached journaled in `turn` */
    char *limit_name;       /* ... its data.limit, used and max */
    int64_t limit_used, limit_max;
    char *last_problem;     /* problem of the latest malformed/empty response */
    int64_t first_time_ms;  /* Unix ms of the first event with a time, 0 if none */
    char *final_text;       /* its content (the turn's answer), or NULL */
    int64_t result_failures;/* result_invalid events since the last turn_finished
                             * "completed" (answers that failed spec.result.schema) */
    char *result_problem;   /* the latest one's data.problem (bounded), or NULL */

    /* user messages that arrived while tool calls were unanswered: they
     * enter the conversation after the last tool result */
    char **deferred;
    size_t ndeferred;

    /* approval decisions whose approval_requested came later or never */
    char **decided_ids;
    enum replay_decision *decided;
    char **decided_reasons;  /* data.reason of each, or NULL */
    size_t ndecided;
};

void replay_state_init(struct replay_state *s);
void replay_state_done(struct replay_state *s);

/* Folds one event into s. Returns 0, or TERN_EINVALID when the event
 * contradicts the state in a way the runner must not paper over (a seq that
 * is not last_seq + 1, a tool_result for an unknown call); err says which.
 * Unknown event types are ignored (seq still advances). After an error the
 * state is unspecified: the shell stops (a journal it cannot fold is not one
 * to act on). */
int replay_apply(struct replay_state *s, const struct replay_event *ev, struct tern_err *err);

/* The approval id for a call: "ap-" + the first 16 hex digits of
 * SHA-256(uid "/" call_id). Stable across replays. out must hold 20 bytes. */
void replay_approval_id(const char *uid, const char *call_id, char out[20]);

/* Parses RFC 3339 UTC ("2026-11-30T00:00:00.123456789Z", fraction
 * optional) into Unix ms. Returns 0 or -EINVAL. */
int replay_parse_time(const char *s, int64_t *ret_ms);

/* The pending call at index i of s->calls that is not answered, the first
 * one, or NULL. */
const struct replay_call *replay_next_pending(const struct replay_state *s);

#endif
