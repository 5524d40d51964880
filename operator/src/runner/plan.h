/* plan.h - what the runner does next, decided from the replayed state (pure).
 *
 * The turn is a loop: plan_next(state) -> one action -> the shell performs it
 * and journals its event(s) -> the same events are folded into the state with
 * replay_apply -> plan again. Because the state is always exactly the fold of
 * the journal, a runner restarted at any point (after kill -9) plans the same
 * next action from a fresh replay: recorded steps are never redone, and the
 * one step that may be repeated (a model call cut off before its response was
 * journaled, a tool call journaled but without result: sandboxd answers it
 * from its record under the same Idempotency-Key) is repeated safely.
 */
#ifndef TERN_RUNNER_PLAN_H
#define TERN_RUNNER_PLAN_H

#include "journal/journal.h"
#include "policy/policy.h"
#include "runner/replay.h"

#include <cJSON.h>

#include <stddef.h>
#include <stdint.h>

enum plan_action {
    PLAN_DONE = 0,          /* the turn is over (or a newer turn exists): exit 0, no write */
    PLAN_START_TURN,        /* journal turn_started */
    PLAN_TOOL_REFUSE,       /* journal tool_result{status, output} without running anything */
    PLAN_REQUEST_APPROVAL,  /* journal approval_requested, then turn_finished(approval_requested) */
    PLAN_WAIT_APPROVAL,     /* already requested, undecided: journal turn_finished(approval_requested) */
    PLAN_TOOL_START,        /* journal tool_call */
    PLAN_TOOL_EXECUTE,      /* call sandboxd (key <uid>/<callId>), journal tool_result */
    PLAN_LIMIT,             /* journal limit_reached, then turn_finished(limit_reached) */
    PLAN_MODEL_REQUEST,     /* journal model_request */
    PLAN_MODEL_CALL,        /* call the model, journal model_response */
    PLAN_FINISH,            /* journal turn_finished(outcome) */
    PLAN_RESULT_INVALID,    /* journal result_invalid{attempt, problem, message}: the final
                             * answer failed spec.result.schema; the model is told */
};

struct plan_input {
    const char *uid;               /* session uid (approval ids, idempotency keys) */
    int64_t turn;                  /* TERN_TURN */
    const struct policy_config *policy;
    int64_t now_ms;                /* Unix ms, for the wall-time limit */
    int64_t session_start_ms;      /* 0 = the first journaled event's time */
    int max_bad_responses;         /* malformed/empty responses in a row before giving up; 0 = 3 */
    const cJSON *result_schema;    /* spec.result.schema (checked), or NULL: free text */
    int64_t max_result_attempts;   /* answers checked per turn; 0 = 3 */
};

struct plan {
    enum plan_action action;
    const struct replay_call *call;  /* tool actions: borrowed from the state */
    enum policy_tool tool;           /* tool actions with a known tool */
    struct policy_args args;         /* TOOL_START / TOOL_EXECUTE / REQUEST_APPROVAL: owned */
    bool has_args;
    struct policy_decision decision; /* tool actions */
    char *status;                    /* TOOL_REFUSE: "invalid" | "denied"; owned */
    char *output;                    /* TOOL_REFUSE: the tool message for the model; owned */
    char approval_id[20];            /* REQUEST/WAIT_APPROVAL */
    char *summary;                   /* REQUEST_APPROVAL: e.g. the command; owned */
    enum policy_limit limit;         /* LIMIT */
    const char *limit_name;          /* LIMIT: a limit policy/ does not know
                                      * ("maxResultAttempts"), or NULL; static */
    int64_t limit_used, limit_max;
    const char *outcome;             /* FINISH / LIMIT / approvals: static string */
    char *reason;                    /* FINISH: detail, or NULL; owned */
    char *message;                   /* FINISH: why, for people (status, Events), or NULL; owned */
    cJSON *result;                   /* FINISH completed with a schema: the valid answer; owned */
    int64_t attempt;                 /* RESULT_INVALID: which answer (1, 2, ...) */
    /* RESULT_INVALID: output = what the model is told, reason = the problem */
};

#define PLAN_LIMIT_RESULT_ATTEMPTS "maxResultAttempts"

/* Outcomes journaled in turn_finished{outcome}. */
#define PLAN_OUTCOME_COMPLETED JOURNAL_OUTCOME_COMPLETED
#define PLAN_OUTCOME_APPROVAL JOURNAL_OUTCOME_APPROVAL
#define PLAN_OUTCOME_LIMIT JOURNAL_OUTCOME_LIMIT
#define PLAN_OUTCOME_REFUSED JOURNAL_OUTCOME_REFUSED
#define PLAN_OUTCOME_ERROR JOURNAL_OUTCOME_ERROR

/* Decides the next action. Always succeeds (*ret filled; release with
 * plan_done). */
void plan_next(const struct replay_state *s, const struct plan_input *in, struct plan *ret);
void plan_done(struct plan *p);

const char *plan_action_str(enum plan_action a);

/* The people's text of a limit (newly allocated): "maxTokens: used 1686 of
 * 1500"; timeoutSeconds (used/max in ms) in seconds. */
char *plan_limit_message(const char *limit, int64_t used, int64_t max);

/* A copy of v cut to at most max bytes on a UTF-8 boundary (new string). */
char *plan_bounded(const char *v, size_t max);

#endif
