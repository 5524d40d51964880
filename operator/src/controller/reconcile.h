/* reconcile.h - the operator's decision for one AgentSession (pure).
 *
 * reconcile_decide(observed) -> actions + desired status. No I/O: the shell
 * (controller.c) gathers the observation from informer caches and the journal
 * summary, and applies the actions in order, stopping at the first failure
 * (the session is then requeued with backoff and decided again from fresh
 * observations: level-triggered). See docs/operator.md for the rules.
 *
 * Ownership: the input is borrowed. The output owns every object, string and
 * tree in it; release with reconcile_output_done.
 */
#ifndef TERN_RECONCILE_H
#define TERN_RECONCILE_H

#include "controller/children.h"
#include "spec/session_spec.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#define RECONCILE_FINALIZER      "tern.dev/journal"
#define RECONCILE_ANN_APPROVE    "tern.dev/approve"
#define RECONCILE_ANN_DENY       "tern.dev/deny"
#define RECONCILE_ANN_DECIDED_BY "tern.dev/decided-by"
#define RECONCILE_ANN_REASON     "tern.dev/reason"
#define RECONCILE_ANN_FORK       "tern.dev/fork"
#define RECONCILE_ANN_RETAIN     "tern.dev/retain-journal" /* "true": keep it on delete */
#define RECONCILE_LABEL_FORK_OF  "tern.dev/forked-from-uid" /* on fork children */

struct observed_pod {
    bool exists;
    bool deleting;
    const char *phase;        /* Pending|Running|Succeeded|Failed */
    bool ready;
    const char *ip;           /* status.podIP or NULL */
    const char *sandbox_hash; /* the tern.dev/sandbox-hash annotation */
};

struct observed_job {
    bool exists;
    int64_t turn;             /* from the name / tern.dev/turn label */
    bool complete;            /* condition Complete=True */
    bool failed;              /* condition Failed=True */
    const char *failed_reason;/* that condition's reason */
    int64_t failed_pods;      /* status.failed */
};

/* What the journal summary says (the shell maps journal_summary to this). */
struct observed_journal {
    uint64_t last_seq;
    int64_t turn;             /* highest turn started */
    const char *outcome;      /* last turn_finished outcome; NULL while a turn runs or before any */
    bool intent_pending;      /* user_message / approval_decided after the last turn_started */
    int64_t messages;         /* user_message events, the objective included */
    const char *pending_id;   /* approval waiting for a decision, or NULL */
    const char *pending_tool;
    const char *pending_summary;
    int64_t pending_requested_at; /* unix seconds */
    const char *last_decided_id;
    int64_t updated_at;       /* unix seconds of the last event */
    int64_t model_turns, tool_calls, prompt_tokens, completion_tokens, cost_micro_usd;
    const char *result_summary;   /* last final answer */
    const cJSON *result_artifacts; /* array of strings, or NULL */
};

struct reconcile_input {
    const char *name, *ns, *uid;
    int64_t generation;
    bool deleting;
    bool has_finalizer;
    const char *ann_approve, *ann_deny, *ann_decided_by, *ann_reason, *ann_fork;
    bool retain_journal;
    const struct session_spec *spec; /* NULL when the spec is invalid */
    const char *invalid;             /* the validation message when spec is NULL */
    const cJSON *status;             /* the current status, or NULL */
    const cJSON *spec_json;          /* the stored spec (copied into forks) */

    /* forks of this session still copying its workspace: the parent keeps
     * its sandbox and starts no turn until they are done */
    int forks_copying;
    /* when this session is a fork (spec.forkFrom): */
    const char *fork_parent_address; /* the parent's ready sandbox address, or NULL */
    struct observed_job copy_job;    /* the Job <name>-copy */

    bool pvc_exists, token_exists, task_exists, netpol_exists;
    struct observed_pod pod;
    struct observed_job job;         /* the Job of the highest turn, if any */
    struct observed_journal journal;

    const char *new_token;           /* for the token Secret if it must be created */
    int64_t now;                     /* unix seconds */
    const struct children_config *cfg;
};

enum reconcile_action_kind {
    RA_ADD_FINALIZER,
    RA_REMOVE_FINALIZER,
    RA_DELETE_JOURNAL,
    RA_JOURNAL_APPEND,      /* type_name, turn, key, data */
    RA_REMOVE_ANNOTATIONS,  /* keys (NULL-terminated) */
    RA_COPY_JOURNAL,        /* from_uid, upto (into this session's journal) */
    RA_CREATE,              /* resource ("v1/pods"), object */
    RA_DELETE,              /* resource, name */
    RA_EVENT,               /* event_type, reason, note */
};

struct reconcile_action {
    enum reconcile_action_kind kind;
    char *type_name;        /* journal event type */
    int64_t turn;
    char *key;              /* journal idempotency key */
    cJSON *data;            /* journal event data */
    char *resource;         /* "v1/pods", "batch/v1/jobs", ... */
    char *name;
    cJSON *object;
    char *keys[8];          /* annotation keys to remove */
    char *from_uid;         /* journal copy source */
    uint64_t upto;          /* journal copy: last seq copied */
    char *event_type;       /* Normal | Warning */
    char *reason;
    char *note;
};

struct reconcile_output {
    struct reconcile_action *actions;
    size_t nactions;
    cJSON *status;          /* the desired status; NULL = leave it alone */
    int64_t requeue_after;  /* seconds; 0 = only on change */
    const char *phase;      /* the decided phase (static string) */
};

/* Decides. Never fails: every outcome, including an invalid spec, is a
 * decision. out is overwritten. */
void reconcile_decide(const struct reconcile_input *in, struct reconcile_output *out);
void reconcile_output_done(struct reconcile_output *out);

/* The token to use for a new session's sandbox Secret: 32 random bytes as
 * 64 hex digits into out[65]. Returns 0 or -EIO. (Not pure: reads the RNG.) */
int reconcile_new_token(char out[65]);

#endif
