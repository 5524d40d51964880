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
#define RECONCILE_ANN_RETRY      "tern.dev/retry" /* continue a failed session (any value) */
#define RECONCILE_LABEL_FORK_OF  "tern.dev/forked-from-uid" /* on fork children */
/* a human's decision on a memory proposal (value: its id; with decided-by
 * and reason as for tool approvals) */
#define RECONCILE_ANN_MEMORY_APPROVE "tern.dev/memory-approve"
#define RECONCILE_ANN_MEMORY_REJECT  "tern.dev/memory-reject"

struct observed_pod {
    bool exists;
    bool deleting;
    const char *phase;        /* Pending|Running|Succeeded|Failed */
    bool ready;
    const char *ip;           /* status.podIP or NULL */
    const char *sandbox_hash; /* the tern.dev/sandbox-hash annotation */
    const char *waiting_reason;  /* a container's state.waiting.reason, or NULL */
    const char *waiting_message; /* ... and its message (or the last termination's) */
    const char *unschedulable;   /* PodScheduled=False/Unschedulable: its message, or NULL */
    int64_t unschedulable_since; /* that condition's lastTransitionTime (unix s), 0 unknown */
};

struct observed_job {
    bool exists;
    int64_t turn;             /* from the name / tern.dev/turn label */
    bool complete;            /* condition Complete=True */
    bool failed;              /* condition Failed=True */
    const char *failed_reason;/* that condition's reason */
    const char *failed_message; /* that condition's message */
    int64_t failed_pods;      /* status.failed */
    /* the Job's latest failed pod (an attempt that failed), if seen: */
    int last_exit_code;       /* -1 when none is known */
    const char *last_message; /* its state.terminated.message ("<Class>: ..."), or NULL */
    int64_t last_failed_at;   /* its finishedAt, unix seconds */
    /* the pod of the attempt now running, if stuck before starting: */
    const char *pod_waiting_reason, *pod_waiting_message, *pod_unschedulable;
    int64_t pod_unschedulable_since;
};

/* A pod the scheduler cannot place yet is reported (Blocked: Unschedulable)
 * once it has stayed so this long: a real scheduler says Unschedulable for
 * states that clear within seconds (a claim being provisioned and bound,
 * a node coming up). */
#define RECONCILE_UNSCHEDULABLE_GRACE 20

/* Something a session needs that is not there (found by the shell before
 * it creates a pod or a Job): a CamelCase reason and a message, or NULL. */
struct observed_blocker {
    const char *reason;
    const char *message;
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
    const cJSON *result_value;    /* the answer valid against spec.result.schema, or NULL */
    const cJSON *result_ref;      /* {path, size, sha256} of a larger one, or NULL */
    int64_t result_turn;          /* the turn of that answer */
    const cJSON *persisted;       /* the last artifacts_persisted data, or NULL */
    const char *persist_request;  /* the last request it served, or NULL */
    /* why the last turn ended (turn_finished data): */
    const char *reason;           /* "maxTokens", "model_error", "JobFailed", ... or NULL */
    const char *message;          /* for people, or NULL */
    const char *limit;            /* the limit reached, or NULL */
    int64_t limit_used, limit_max;
    uint64_t good_seq;            /* the last event before a failure's tail */
    const char *first_request;    /* RFC 3339 time of the first model request, or NULL */
    double first_request_at;      /* ... as unix seconds (0 = none) */
    const cJSON *memory;          /* the summary's memory proposals (array), or NULL */
};

/* Team budgets (AgentBudget, docs/budgets.md) that apply to the session, as
 * the shell (controller/budgets.c) found them in etcd. NULL in
 * reconcile_input when none applies: everything then is as without them. */
struct observed_budgets {
    /* admission: may the session take a sandbox (only asked when the
     * decision wants to create one: reconcile_output.wants_admission) */
    bool checked;
    bool admitted;
    const char *queue_budget;  /* not admitted: the budget that holds it back */
    const char *queue_reason;  /* "ConcurrentSessions" or "SessionsStarted" */
    const char *queue_message; /* for people: the numbers, its place in line */
    int64_t position, waiting; /* its place in that budget's queue (1 = next) */
    bool others_waiting;       /* a session waits for a slot of a budget this one holds:
                                * an idle sandbox is parked at once */
    /* the last turn ended on a budget (journal outcome budget_exhausted): */
    bool resumable;            /* that budget has room for the refused call again */
    const char *exhausted_reason;  /* "Tokens" or "CostMicroUSD" */
    const char *exhausted_message; /* names the budget and the window */
    int64_t retry_after;       /* seconds to the end of the window that holds it, 0 = none */
};

struct reconcile_input {
    const char *name, *ns, *uid;
    int64_t generation;
    bool deleting;
    bool has_finalizer;
    const char *ann_approve, *ann_deny, *ann_decided_by, *ann_reason, *ann_fork, *ann_retry;
    const char *ann_memory_approve, *ann_memory_reject;
    const char *ann_persist;         /* tern.dev/persist-artifacts, or NULL */
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

    /* The workspace claim always exists; the token Secret, the task
     * ConfigMap and the NetworkPolicy only while something uses them (the
     * sandbox pod, a turn, copy or viewer Job): a parked session holds only
     * its claim (docs/operator.md, "Parking"). */
    bool pvc_exists, token_exists, task_exists, netpol_exists;
    /* a file viewer Job (children_viewer_job) that has not finished, and
     * the name of one still suspended: it is resumed once the token Secret
     * and the NetworkPolicy it needs exist */
    bool viewer_running;
    const char *viewer_suspended;
    struct observed_pod pod;
    struct observed_job job;         /* the Job of the highest turn, if any */
    struct observed_journal journal;

    const char *new_token;           /* for the token Secret if it must be created */
    int64_t now;                     /* unix seconds */
    double created_at;               /* metadata.creationTimestamp, unix seconds */
    const struct children_config *cfg;

    /* the session named by tern.dev/fork, if it exists already */
    bool fork_target_exists;
    bool fork_target_ours;           /* ... and is a fork of this session (a retry) */

    /* what the shell found missing before creating a pod or a Job (only
     * filled when refs_checked; see reconcile_output.wants_refs) */
    bool refs_checked;
    struct observed_blocker sandbox_refs; /* ConfigMaps of context.files, skills, memory */
    struct observed_blocker runner_refs;  /* the model key Secret, the runner ServiceAccount */

    /* the price of spec.model.name for the runner Job, as a price table
     * with that one entry ({"prices": {"<model>": {...}}}), or NULL when the
     * table has none; a session with a cost limit needs one */
    const char *price_json;
    const char *price_table;         /* where the table comes from, for messages */
    const char *price_error;         /* why no table could be read, or NULL */

    const struct observed_budgets *budgets; /* NULL: no AgentBudget applies */
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
    RA_EVENT,               /* event_type, reason, note, after_status */
    RA_MEMORY_APPLY,        /* name (the memory ConfigMap), key (proposal id), turn,
                             * data (the proposal): apply an approved memory proposal
                             * and journal memory_applied (controller.c) */
    RA_PATCH,               /* resource, name, data: a merge patch of a child (a viewer
                             * Job resumed) */
    RA_PERSIST_ARTIFACTS,   /* turn, key (the request or NULL), name (sandboxd "ip:port"),
                             * data {"retain", "ttlSeconds"}: copy output/ into the artifact
                             * store, then journal artifacts_persisted (controller/artifacts.h) */
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
    bool after_status;      /* an Event announcing the new status: told once it is written */
};

/* What happened, for the shell's metrics and logs (static strings). */
struct reconcile_signals {
    const char *old_phase;        /* the phase in the observed status, or NULL */
    const char *ended_reason;     /* newly Succeeded ("Completed") or Failed (its reason) */
    double first_request_latency; /* creation -> first model request, seconds; < 0 = none */
    double approval_wait;         /* request -> decision of an approval decided now; < 0 = none */
    const char *model_error;      /* a model error told now: unreachable, rate_limited,
                                   * server_error, context_length, bad_request, malformed */
    const char *budget;           /* an AgentBudget newly turned the session away (borrowed
                                   * from the input) ... */
    const char *budget_reason;    /* ... for this (ConcurrentSessions, SessionsStarted,
                                   * Tokens, CostMicroUSD) */
};

struct reconcile_output {
    struct reconcile_action *actions;
    size_t nactions;
    cJSON *status;          /* the desired status; NULL = leave it alone */
    int64_t requeue_after;  /* seconds; 0 = only on change */
    const char *phase;      /* the decided phase (static string) */
    const char *reason;     /* status.reason (static string), or NULL */
    /* the decision would create the sandbox pod or a turn Job without
     * having seen refs_checked: the shell checks what they reference and
     * decides again */
    bool wants_refs;
    /* ... the same for team budgets: the decision would create the sandbox
     * pod and budgets apply, but admission was not asked (budgets->checked):
     * the shell asks and decides again */
    bool wants_admission;
    struct reconcile_signals signals;
};

/* Decides. Never fails: every outcome, including an invalid spec, is a
 * decision. out is overwritten. */
void reconcile_decide(const struct reconcile_input *in, struct reconcile_output *out);
void reconcile_output_done(struct reconcile_output *out);

/* The token to use for a new session's sandbox Secret: 32 random bytes as
 * 64 hex digits into out[65]. Returns 0 or -EIO. (Not pure: reads the RNG.) */
int reconcile_new_token(char out[65]);

#endif
