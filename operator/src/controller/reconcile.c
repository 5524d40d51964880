/* reconcile.c - the operator's decision for one AgentSession. See
 * reconcile.h and docs/operator.md. */
#include "reconcile.h"

#include "base/limits.h"
#include "base/mem.h"
#include "controller/artstore.h"
#include "controller/conditions.h"
#include "journal/journal.h"
#include "json/json.h"
#include "memory/memprop.h"
#include "sandbox/sandbox_contract.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void reconcile_output_done(struct reconcile_output *out)
{
    for (size_t i = 0; i < out->nactions; i++) {
        struct reconcile_action *a = &out->actions[i];
        free(a->type_name);
        free(a->key);
        cJSON_Delete(a->data);
        free(a->resource);
        free(a->name);
        cJSON_Delete(a->object);
        for (size_t k = 0; k < sizeof a->keys / sizeof a->keys[0]; k++)
            free(a->keys[k]);
        free(a->from_uid);
        free(a->event_type);
        free(a->reason);
        free(a->note);
    }
    free(out->actions);
    cJSON_Delete(out->status);
    memset(out, 0, sizeof *out);
}

static struct reconcile_action *add(struct reconcile_output *out, enum reconcile_action_kind k)
{
    out->actions = xreallocarray(out->actions, out->nactions + 1, sizeof *out->actions);
    struct reconcile_action *a = &out->actions[out->nactions++];
    memset(a, 0, sizeof *a);
    a->kind = k;
    return a;
}

static void append(struct reconcile_output *out, const char *type, int64_t turn, const char *key,
                   cJSON *data)
{
    struct reconcile_action *a = add(out, RA_JOURNAL_APPEND);
    a->type_name = xstrdup(type);
    a->turn = turn;
    a->key = key ? xstrdup(key) : NULL;
    a->data = data ? data : cJSON_CreateObject();
}

static void create(struct reconcile_output *out, const char *resource, cJSON *obj)
{
    struct reconcile_action *a = add(out, RA_CREATE);
    a->resource = xstrdup(resource);
    a->object = obj;
}

static void delete_child(struct reconcile_output *out, const char *resource, char *name_owned)
{
    struct reconcile_action *a = add(out, RA_DELETE);
    a->resource = xstrdup(resource);
    a->name = name_owned;
}

static void event(struct reconcile_output *out, const char *type, const char *reason,
                  const char *note)
{
    struct reconcile_action *a = add(out, RA_EVENT);
    a->event_type = xstrdup(type);
    a->reason = xstrdup(reason);
    a->note = xstrdup(note);
}

/* An Event that announces what the new status says (a phase, a reason):
 * the shell records it after the status is written. */
static void status_event(struct reconcile_output *out, const char *type, const char *reason,
                         const char *note)
{
    event(out, type, reason, note);
    out->actions[out->nactions - 1].after_status = true;
}

static void artifacts_condition(cJSON *st, const struct reconcile_input *in, bool wanted);

static const char *old_str(const cJSON *status, const char *k1, const char *k2)
{
    const cJSON *v = json_get(status, k1);
    if (k2)
        v = json_get(v, k2);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* A new status object carrying the old conditions (so transition times
 * survive) and the old fork list. */
static cJSON *status_base(const struct reconcile_input *in)
{
    cJSON *st = cJSON_CreateObject();
    const cJSON *conds = json_get(in->status, "conditions");
    cJSON_AddItemToObject(st, "conditions",
                          cJSON_IsArray(conds) ? json_dup(conds) : cJSON_CreateArray());
    json_add_int64(st, "observedGeneration", in->generation);
    return st;
}

static void set_cond(cJSON *st, const struct reconcile_input *in, const char *type, bool v,
                     const char *reason, const char *msg)
{
    char now[32];
    conditions_set(cJSON_GetObjectItemCaseSensitive(st, "conditions"), type,
                   v ? COND_TRUE : COND_FALSE, reason, msg, in->generation,
                   conditions_time(in->now, now));
}

#define STATUS_MESSAGE_MAX 4096 /* status.message's maxLength in the CRD */

/* A copy of v cut to at most max bytes on a UTF-8 boundary. */
static char *cond_bounded(const char *v, size_t max)
{
    size_t n = v ? strlen(v) : 0;
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)v[n] & 0xC0) == 0x80)
            n--;
    }
    return xstrndup(v ? v : "", n);
}

static int count_kind(const struct reconcile_output *out, enum reconcile_action_kind k)
{
    int n = 0;
    for (size_t i = 0; i < out->nactions; i++)
        n += out->actions[i].kind == k;
    return n;
}

static void decide_invalid(const struct reconcile_input *in, struct reconcile_output *out,
                           const char *why)
{
    cJSON *st = status_base(in);
    json_add_string(st, "phase", "Failed");
    const char *msg = why ? why : "invalid spec";
    set_cond(st, in, "Ready", false, "InvalidSpec", msg);
    set_cond(st, in, "Failed", true, "InvalidSpec", msg);
    json_add_string(st, "reason", "InvalidSpec");
    char *m = cond_bounded(msg, STATUS_MESSAGE_MAX);
    json_add_string(st, "message", m);
    free(m);
    /* one Warning per distinct problem, not one per resync */
    const cJSON *old = conditions_find(json_get(in->status, "conditions"), "Failed");
    if (!old || !streq(old_str(old, "message", NULL), msg)) {
        status_event(out, "Warning", "InvalidSpec", msg);
        if (!streq(old_str(in->status, "phase", NULL), "Failed"))
            out->signals.ended_reason = "InvalidSpec";
    }
    out->status = st;
    out->phase = "Failed";
    out->reason = "InvalidSpec";
}

/* The approval intent carried by annotations, if any. */

/* The data of a human's decision (approval or memory proposal): id,
 * decision, who, and the reason bounded (it is told to the model). */
static cJSON *decision_data(const struct reconcile_input *in, const char *id,
                            const char *decision)
{
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "id", id);
    json_add_string(d, "decision", decision);
    if (in->ann_decided_by)
        json_add_string(d, "decidedBy", in->ann_decided_by);
    if (in->ann_reason) {
        char *why = cond_bounded(in->ann_reason, TERN_APPROVAL_MAX_REASON);
        json_add_string(d, "reason", why);
        free(why);
    }
    return d;
}
static void decide_approval(const struct reconcile_input *in, struct reconcile_output *out,
                            bool *ret_decided)
{
    const char *id = in->ann_approve ? in->ann_approve : in->ann_deny;
    if (!id)
        return;
    bool approve = in->ann_approve != NULL;
    struct reconcile_action *rm = NULL;
    if (in->ann_approve && in->ann_deny) {
        event(out, "Warning", "ApprovalRejected",
              "both tern.dev/approve and tern.dev/deny are set; neither was applied");
    } else if (streq(id, in->journal.pending_id)) {
        cJSON *d = decision_data(in, id, approve ? "approved" : "denied");
        out->signals.approval_wait = (double)(in->now - in->journal.pending_requested_at);
        char *key = xasprintf("decision/%s", id);
        append(out, "approval_decided", in->journal.turn, key, d);
        free(key);
        char *note = xasprintf("%s %s (%s)%s%s", approve ? "approved" : "denied", id,
                               in->journal.pending_summary ? in->journal.pending_summary : "",
                               in->ann_decided_by ? " by " : "",
                               in->ann_decided_by ? in->ann_decided_by : "");
        event(out, "Normal", approve ? "ApprovalGranted" : "ApprovalDenied", note);
        free(note);
        *ret_decided = true;
    } else if (!streq(id, in->journal.last_decided_id)) {
        /* (the last decided id is a decision already recorded whose
         * annotation removal was interrupted: removed silently) */
        char *note;
        if (in->journal.pending_id)
            note = xasprintf("approval %s is not pending (pending: %s); the annotation was removed",
                             id, in->journal.pending_id);
        else
            note = xasprintf("approval %s is not pending; the annotation was removed", id);
        event(out, "Warning", "ApprovalRejected", note);
        free(note);
    }
    rm = add(out, RA_REMOVE_ANNOTATIONS);
    size_t k = 0;
    if (in->ann_approve)
        rm->keys[k++] = xstrdup(RECONCILE_ANN_APPROVE);
    if (in->ann_deny)
        rm->keys[k++] = xstrdup(RECONCILE_ANN_DENY);
    if (in->ann_decided_by)
        rm->keys[k++] = xstrdup(RECONCILE_ANN_DECIDED_BY);
    if (in->ann_reason)
        rm->keys[k++] = xstrdup(RECONCILE_ANN_REASON);
}

/* The memory proposal decision carried by annotations, and the application
 * of approved proposals (docs/operator.md, "Memory proposals"). Between
 * turns only: the operator's appends would fence a running turn's runner. */
static void decide_memory(const struct reconcile_input *in, struct reconcile_output *out)
{
    const struct session_spec *s = in->spec;
    const char *id = in->ann_memory_approve ? in->ann_memory_approve : in->ann_memory_reject;
    bool approve = in->ann_memory_approve != NULL;
    const char *approved_now = NULL;
    if (id) {
        const cJSON *p = NULL, *it;
        cJSON_ArrayForEach(it, in->journal.memory)
        {
            if (streq(old_str(it, "id", NULL), id))
                p = it;
        }
        const char *state = p ? old_str(p, "state", NULL) : NULL;
        /* decided this way already (Approved, Applied, Conflict / Rejected) */
        bool same_way = approve ? !streq(state, "Rejected") : streq(state, "Rejected");
        if (in->ann_memory_approve && in->ann_memory_reject) {
            event(out, "Warning", "MemoryDecisionRejected",
                  "both tern.dev/memory-approve and tern.dev/memory-reject are set; neither was "
                  "applied");
        } else if (!p) {
            char *note = xasprintf("memory proposal %.100s is not one of this session's; the "
                                   "annotation was removed",
                                   id);
            event(out, "Warning", "MemoryProposalUnknown", note);
            free(note);
        } else if (streq(state, "Pending")) {
            cJSON *d = decision_data(in, id, approve ? "approved" : "rejected");
            char *key = xasprintf("memory/%s/decision", id);
            append(out, "memory_decided", in->journal.turn, key, d);
            free(key);
            char *note = xasprintf("memory proposal %s (%s) %s%s%s", id,
                                   old_str(p, "heading", NULL) ? old_str(p, "heading", NULL) : "",
                                   approve ? "approved" : "rejected",
                                   in->ann_decided_by ? " by " : "",
                                   in->ann_decided_by ? in->ann_decided_by : "");
            event(out, "Normal", approve ? "MemoryProposalApproved" : "MemoryProposalRejected",
                  note);
            free(note);
            if (approve)
                approved_now = id;
        } else if (!same_way) {
            /* (decided the same way already: an interrupted annotation
             * removal, removed silently) */
            char *note = xasprintf("memory proposal %s is already %s; the annotation was removed",
                                   id, state ? state : "decided");
            event(out, "Warning", "MemoryDecisionRejected", note);
            free(note);
        }
        struct reconcile_action *rm = add(out, RA_REMOVE_ANNOTATIONS);
        size_t k = 0;
        if (in->ann_memory_approve)
            rm->keys[k++] = xstrdup(RECONCILE_ANN_MEMORY_APPROVE);
        if (in->ann_memory_reject)
            rm->keys[k++] = xstrdup(RECONCILE_ANN_MEMORY_REJECT);
        if (in->ann_decided_by)
            rm->keys[k++] = xstrdup(RECONCILE_ANN_DECIDED_BY);
        if (in->ann_reason)
            rm->keys[k++] = xstrdup(RECONCILE_ANN_REASON);
    }
    /* approved proposals (now, or before a crash) are applied */
    const cJSON *p;
    cJSON_ArrayForEach(p, in->journal.memory)
    {
        const char *pid = old_str(p, "id", NULL);
        if (!pid || !(streq(old_str(p, "state", NULL), "Approved") || streq(pid, approved_now)))
            continue;
        cJSON *pd = json_dup(p);
        if (streq(pid, approved_now) && in->ann_decided_by) {
            cJSON_DeleteItemFromObjectCaseSensitive(pd, "decidedBy");
            json_add_string(pd, "decidedBy", in->ann_decided_by);
        }
        if (!s->memory) {
            cJSON_Delete(pd);
            cJSON *d = cJSON_CreateObject();
            json_add_string(d, "id", pid);
            json_add_string(d, "result", "conflict");
            json_add_string(d, "message", "the session has no spec.memory any more: nothing to "
                                          "apply the proposal to");
            char *key = xasprintf("memory/%s/applied", pid);
            append(out, "memory_applied", in->journal.turn, key, d);
            free(key);
            char *note = xasprintf("memory proposal %s not applied: the session has no "
                                   "spec.memory",
                                   pid);
            event(out, "Warning", "MemoryConflict", note);
            free(note);
            continue;
        }
        struct reconcile_action *a = add(out, RA_MEMORY_APPLY);
        a->name = xstrdup(s->memory);
        a->key = xstrdup(pid);
        a->turn = in->journal.turn;
        a->data = pd;
    }
}

/* status.memoryProposals: the summary's proposals with their provenance
 * and a bounded preview (not the whole content). */
static void memory_status(const struct reconcile_input *in, cJSON *st)
{
    if (cJSON_GetArraySize(in->journal.memory) == 0)
        return;
    cJSON *arr = cJSON_AddArrayToObject(st, "memoryProposals");
    const cJSON *p;
    cJSON_ArrayForEach(p, in->journal.memory)
    {
        cJSON *o = cJSON_CreateObject();
        static const char *const keys[] = {"id",        "toolCallId", "reason",     "baseSha256",
                                           "heading",   "state",      "decidedBy",  "message",
                                           "proposedAt", "decidedAt", NULL};
        json_add_string(o, "session", in->name);
        for (size_t i = 0; keys[i]; i++) {
            const char *v = old_str(p, keys[i], NULL);
            if (v && *v)
                json_add_string(o, keys[i], v);
        }
        int64_t turn = 0;
        if (json_get_int64(p, "", "turn", JSON_OPTIONAL, &turn, NULL) == 0)
            json_add_int64(o, "turn", turn);
        char *pv = memprop_preview(old_str(p, "heading", NULL), old_str(p, "content", NULL));
        json_add_string(o, "preview", pv);
        free(pv);
        cJSON_AddItemToArray(arr, o);
    }
}

/* A DNS-1123 label of at most SESSION_MAX_NAME characters. */
static bool valid_session_name(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > SESSION_MAX_NAME)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = n[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                  (ch == '-' && i > 0 && i + 1 < len);
        if (!ok)
            return false;
    }
    return true;
}

/* The child AgentSession of a fork: the parent's spec with forkFrom set,
 * not owned by the parent (the two are independent afterwards). */
static cJSON *fork_child(const struct reconcile_input *in, const char *child, uint64_t at_seq)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "apiVersion", "tern.dev/v1alpha1");
    json_add_string(o, "kind", "AgentSession");
    cJSON *meta = cJSON_AddObjectToObject(o, "metadata");
    json_add_string(meta, "name", child);
    json_add_string(meta, "namespace", in->ns);
    cJSON *labels = cJSON_AddObjectToObject(meta, "labels");
    json_add_string(labels, RECONCILE_LABEL_FORK_OF, in->uid);
    json_add_string(labels, "tern.dev/forked-from", in->name);
    cJSON *spec = in->spec_json ? json_dup(in->spec_json) : cJSON_CreateObject();
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "forkFrom");
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "suspend");
    cJSON *ff = cJSON_AddObjectToObject(spec, "forkFrom");
    json_add_string(ff, "session", in->name);
    json_add_string(ff, "uid", in->uid);
    json_add_int64(ff, "atSeq", (int64_t)at_seq);
    cJSON_AddItemToObject(o, "spec", spec);
    return o;
}

static void remove_annotation(struct reconcile_output *out, const char *key)
{
    struct reconcile_action *rm = add(out, RA_REMOVE_ANNOTATIONS);
    rm->keys[0] = xstrdup(key);
}

/* The fork intent of a parent: create the child, journal the fork point,
 * remove the annotation. Only when nothing else moves the journal in this
 * pass, so the fork point is exactly the last event seen; a failed session
 * forks at its last good point (before the failure's tail), so the child
 * continues from there instead of starting failed. A name that is taken by
 * a session that is not this one's fork is refused. */
static void decide_fork(const struct reconcile_input *in, struct reconcile_output *out,
                        cJSON *st, cJSON *forks, bool failed)
{
    const char *child = in->ann_fork;
    char *note = NULL;
    const char *why = NULL;
    if (!valid_session_name(child) || strcmp(child, in->name) == 0) {
        why = "InvalidName";
        note = xasprintf("tern.dev/fork: \"%s\" is not a usable session name (a DNS "
                         "label of at most %d characters, not this session's own); the "
                         "annotation was removed",
                         child, SESSION_MAX_NAME);
    } else if (in->fork_target_exists && !in->fork_target_ours) {
        why = "NameInUse";
        note = xasprintf("tern.dev/fork: agentsession %s already exists and is not a fork of "
                         "%s; nothing was forked and the annotation was removed (choose "
                         "another name)",
                         child, in->name);
    }
    if (why) {
        event(out, "Warning", "ForkRejected", note);
        set_cond(st, in, "ForkRejected", true, why, note);
        free(note);
        remove_annotation(out, RECONCILE_ANN_FORK);
        return;
    }
    uint64_t at = failed ? in->journal.good_seq : in->journal.last_seq;
    create(out, "tern.dev/v1alpha1/agentsessions", fork_child(in, child, at));
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "child", child);
    json_add_int64(d, "atSeq", (int64_t)at);
    char *key = xasprintf("fork/%s", child);
    append(out, "fork_created", in->journal.turn, key, d);
    free(key);
    remove_annotation(out, RECONCILE_ANN_FORK);
    if (failed)
        note = xasprintf("forked into %s at journal seq %llu, the last good point before the "
                         "failure (seq %llu is the last)",
                         child, (unsigned long long)at, (unsigned long long)in->journal.last_seq);
    else
        note = xasprintf("forked into %s at journal seq %llu", child, (unsigned long long)at);
    event(out, "Normal", "ForkCreated", note);
    if (conditions_find(json_get(st, "conditions"), "ForkRejected"))
        set_cond(st, in, "ForkRejected", false, "ForkCreated", note);
    free(note);
    bool listed = false;
    const cJSON *f;
    cJSON_ArrayForEach(f, forks) listed = listed || (cJSON_IsString(f) && strcmp(f->valuestring, child) == 0);
    if (!listed)
        cJSON_AddItemToArray(forks, cJSON_CreateString(child));
}

static bool terminal_outcome(const char *o)
{
    return streq(o, JOURNAL_OUTCOME_LIMIT) || streq(o, JOURNAL_OUTCOME_ERROR) ||
           streq(o, JOURNAL_OUTCOME_REFUSED);
}

/* ---- why a session failed, and whether it can go on -------------------- */

struct failure {
    const char *reason;   /* CamelCase (static) */
    char *message;        /* for people */
    bool blocked;         /* a limit still reached: raising it is the way on */
    char *hint;           /* how to continue */
    const char *model_error; /* metrics class, or NULL */
};

/* The current spec value of a limit (timeoutSeconds in ms, as journaled);
 * -1 for a name this build does not know. */
static int64_t limit_value(const struct session_spec *s, const char *name)
{
    if (streq(name, "maxModelTurns"))
        return s->limits.max_model_turns;
    if (streq(name, "maxToolCalls"))
        return s->limits.max_tool_calls;
    if (streq(name, "maxTokens"))
        return s->limits.max_tokens;
    if (streq(name, "maxCostMicroUSD"))
        return s->limits.max_cost_micro_usd;
    if (streq(name, "timeoutSeconds"))
        return s->limits.timeout_seconds * 1000;
    if (streq(name, "maxResultAttempts"))
        return s->limits.max_result_attempts;
    return -1;
}

/* A limit is still reached when the spec allows no more than was used
 * (maxCostMicroUSD 0 means no cost limit). */
static bool limit_still_reached(const struct session_spec *s, const struct observed_journal *j)
{
    int64_t v = limit_value(s, j->limit);
    if (!j->limit || v < 0)
        return false;
    if (streq(j->limit, "maxCostMicroUSD") && v == 0)
        return false;
    return v <= j->limit_used;
}

static const char *failure_reason(const struct observed_journal *j, const char **ret_model)
{
    static const struct {
        const char *journal, *reason, *model;
    } map[] = {
        {"model_error", "ModelError", "bad_request"},
        {"context_length_exceeded", "ContextLengthExceeded", "context_length"},
        {"malformed_output", "MalformedOutput", "malformed"},
        {"request_build_failed", "RequestBuildFailed", NULL},
        {"refusal", "Refused", NULL},
        {"ApprovalTimeout", "ApprovalTimeout", NULL},
        {"JobFailed", "JobFailed", NULL},
        {"RunnerConfigError", "RunnerConfigError", NULL},
        {"RunnerExitedEarly", "RunnerExitedEarly", NULL},
        {"ForkCopyFailed", "ForkCopyFailed", NULL},
    };
    *ret_model = NULL;
    if (streq(j->outcome, JOURNAL_OUTCOME_LIMIT))
        return "LimitReached";
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (streq(j->reason, map[i].journal)) {
            *ret_model = map[i].model;
            return map[i].reason;
        }
    if (j->reason && strstr(j->reason, "malformed")) { /* journals before reasons were words */
        *ret_model = "malformed";
        return "MalformedOutput";
    }
    if (streq(j->outcome, JOURNAL_OUTCOME_REFUSED))
        return "Refused";
    return "TurnFailed";
}

static void failure_of(const struct reconcile_input *in, struct failure *f)
{
    const struct observed_journal *j = &in->journal;
    const struct session_spec *s = in->spec;
    memset(f, 0, sizeof *f);
    f->reason = failure_reason(j, &f->model_error);
    if (j->message && *j->message)
        f->message = xasprintf("turn %lld: %s", (long long)j->turn, j->message);
    else if (j->limit)
        f->message = xasprintf("turn %lld: %s: used %lld of %lld", (long long)j->turn, j->limit,
                               (long long)j->limit_used, (long long)j->limit_max);
    else
        f->message = xasprintf("turn %lld ended: %s%s%s", (long long)j->turn,
                               j->outcome ? j->outcome : "error", j->reason ? " " : "",
                               j->reason ? j->reason : "");
    f->blocked = streq(j->outcome, JOURNAL_OUTCOME_LIMIT) && limit_still_reached(s, j);
    if (f->blocked && streq(j->limit, "timeoutSeconds"))
        f->hint = xasprintf("raise spec.limits.timeoutSeconds above %lld to continue",
                            (long long)(j->limit_used / 1000));
    else if (f->blocked)
        f->hint = xasprintf("raise spec.limits.%s above %lld to continue", j->limit,
                            (long long)j->limit_used);
    else if (streq(j->outcome, JOURNAL_OUTCOME_LIMIT) && j->limit && limit_value(s, j->limit) >= 0)
        /* raised: the next pass between turns journals the retry by itself
         * (once the turn's Job has ended) */
        f->hint = xasprintf("spec.limits.%s was raised: a new turn continues from the journal",
                            j->limit);
    else
        f->hint = xstrdup("continue with a new message (kubectl tern say) or kubectl tern retry");
}

static void failure_done(struct failure *f)
{
    free(f->message);
    free(f->hint);
}

/* The retry event that continues a failed session. */
static void append_retry(struct reconcile_output *out, const struct reconcile_input *in,
                         const char *why, cJSON *d, const char *key_suffix)
{
    json_add_string(d, "reason", why);
    json_add_int64(d, "turn", in->journal.turn);
    if (in->journal.reason)
        json_add_string(d, "after", in->journal.reason);
    char *key = xasprintf("retry/%lld/%s", (long long)in->journal.turn, key_suffix);
    append(out, "retry", in->journal.turn, key, d);
    free(key);
}

/* ---- stuck sessions -------------------------------------------------------- */

/* Waiting reasons that do not go away by waiting (the kubelet's). */
/* Unschedulable for RECONCILE_UNSCHEDULABLE_GRACE seconds or more (or for
 * an unknown time); a younger one is looked at again when the grace ends. */
static bool unschedulable_for_long(const char *msg, int64_t since, int64_t now,
                                   struct reconcile_output *out)
{
    if (!msg)
        return false;
    if (since <= 0 || now - since >= RECONCILE_UNSCHEDULABLE_GRACE)
        return true;
    int64_t left = RECONCILE_UNSCHEDULABLE_GRACE - (now - since);
    if (!out->requeue_after || left < out->requeue_after)
        out->requeue_after = left;
    return false;
}

static bool stuck_waiting(const char *r)
{
    return r && strcmp(r, "ContainerCreating") != 0 && strcmp(r, "PodInitializing") != 0;
}

/* "ModelUnreachable: model http://...: Couldn't connect" -> "ModelUnreachable"
 * into out (a CamelCase word of at most 63 characters), else NULL. */
static const char *message_class(const char *msg, char out[64])
{
    if (!msg)
        return NULL;
    size_t n = 0;
    while (n < 63 && ((msg[n] >= 'A' && msg[n] <= 'Z') || (msg[n] >= 'a' && msg[n] <= 'z') ||
                      (msg[n] >= '0' && msg[n] <= '9')))
        n++;
    if (n == 0 || msg[n] != ':' || !(msg[0] >= 'A' && msg[0] <= 'Z'))
        return NULL;
    memcpy(out, msg, n);
    out[n] = 0;
    return out;
}

static const char *model_error_class(const char *cls)
{
    if (streq(cls, "ModelUnreachable"))
        return "unreachable";
    if (streq(cls, "ModelRateLimited"))
        return "rate_limited";
    if (streq(cls, "ModelServerError"))
        return "server_error";
    return NULL;
}

/* ---- the children of the sandbox and the Jobs ------------------------------ */

/* What uses the token Secret, the task ConfigMap and the NetworkPolicy. */
struct runtime_use {
    bool pod;       /* the sandbox pod exists (also while it goes) or is created now */
    bool jobs;      /* a turn or fork copy Job runs or is created now */
    bool turn_open; /* the journal has a turn that started and did not finish:
                     * its runner and sandbox may be ahead of the caches */
};

/* Moves the actions from index from to the end so that they start at
 * index at (order kept). */
static void move_actions(struct reconcile_output *out, size_t at, size_t from)
{
    size_t n = out->nactions - from;
    if (n == 0 || at >= from)
        return;
    struct reconcile_action *tmp = xcalloc(n, sizeof *tmp);
    memcpy(tmp, out->actions + from, n * sizeof *tmp);
    memmove(out->actions + at + n, out->actions + at, (from - at) * sizeof *tmp);
    memcpy(out->actions + at, tmp, n * sizeof *tmp);
    free(tmp);
}

/* The token Secret (the sandbox pod, every runner Job and the file viewer
 * mount it), the task ConfigMap (the sandbox pod's task.md) and the
 * NetworkPolicy (the walls of the sandbox pod and of the viewer) exist
 * only while something uses them. Missing ones are created at index at of
 * the actions, before the pod or Job that needs them (the shell stops at
 * the first failure: never a pod without its policy); unused ones are
 * deleted (the policy only once the pod is gone, not while it
 * terminates). A parked session holds only its workspace claim. A
 * suspended viewer Job is resumed once its Secret and policy are there. */
static void runtime_children(const struct reconcile_input *in, struct reconcile_output *out,
                             size_t at, const struct runtime_use *u)
{
    const struct session_spec *s = in->spec;
    bool pod_side = u->pod || u->turn_open;
    bool want_task = pod_side;
    bool want_netpol = pod_side || in->viewer_running;
    bool want_token = pod_side || u->jobs || in->viewer_running;
    size_t from = out->nactions;
    if (want_token && !in->token_exists && in->new_token)
        create(out, "v1/secrets", children_token_secret(s, in->new_token));
    if (want_task && !in->task_exists)
        create(out, "v1/configmaps", children_task_configmap(s));
    if (want_netpol && !in->netpol_exists)
        create(out, "networking.k8s.io/v1/networkpolicies", children_network_policy(s, in->cfg));
    move_actions(out, at, from);
    if (!want_token && in->token_exists)
        delete_child(out, "v1/secrets", children_name(s->name, "sandbox-token"));
    if (!want_task && in->task_exists)
        delete_child(out, "v1/configmaps", children_name(s->name, "task"));
    if (!want_netpol && in->netpol_exists)
        delete_child(out, "networking.k8s.io/v1/networkpolicies",
                     children_name(s->name, "sandbox"));
    if (in->viewer_suspended && (in->token_exists || in->new_token)) {
        struct reconcile_action *a = add(out, RA_PATCH);
        a->resource = xstrdup("batch/v1/jobs");
        a->name = xstrdup(in->viewer_suspended);
        a->data = cJSON_CreateObject();
        cJSON_AddFalseToObject(cJSON_AddObjectToObject(a->data, "spec"), "suspend");
    }
}

/* ---- the decision ------------------------------------------------------------ */

void reconcile_decide(const struct reconcile_input *in, struct reconcile_output *out)
{
    memset(out, 0, sizeof *out);
    out->signals.first_request_latency = -1;
    out->signals.approval_wait = -1;
    out->signals.old_phase = old_str(in->status, "phase", NULL);
    const struct observed_journal *j = &in->journal;

    if (in->deleting) {
        if (in->has_finalizer) {
            if (!in->retain_journal)
                add(out, RA_DELETE_JOURNAL);
            add(out, RA_REMOVE_FINALIZER);
        }
        out->phase = "Deleting";
        return; /* children go with their owner (garbage collector) */
    }
    if (!in->has_finalizer)
        add(out, RA_ADD_FINALIZER);
    if (!in->spec) {
        decide_invalid(in, out, in->invalid);
        return;
    }
    const struct session_spec *s = in->spec;
    /* a cost limit needs a price: refused, not silently unlimited */
    if (s->limits.max_cost_micro_usd > 0 && !in->price_json) {
        char *msg;
        if (in->price_error)
            msg = xasprintf("spec.limits.maxCostMicroUSD: the price table (%s) cannot be read "
                            "(%s), so the cost limit cannot be enforced; fix it or set "
                            "maxCostMicroUSD: 0",
                            in->price_table ? in->price_table : "none", in->price_error);
        else if (!in->price_table)
            msg = xasprintf("spec.limits.maxCostMicroUSD: the operator has no price table "
                            "(--prices-configmap), so the cost limit cannot be enforced; set "
                            "maxCostMicroUSD: 0 or install the price table");
        else
            msg = xasprintf("spec.limits.maxCostMicroUSD: model \"%s\" has no price in the "
                            "price table (%s); add an entry for it there or set "
                            "maxCostMicroUSD: 0",
                            s->model.name ? s->model.name : "", in->price_table);
        decide_invalid(in, out, msg);
        free(msg);
        out->requeue_after = 30; /* the price table is not watched: look again */
        return;
    }

    /* --- the state of the current turn ---------------------------------- */
    bool job_active = in->job.exists && !in->job.complete && !in->job.failed;
    bool running = job_active; /* a turn Job is working */
    bool between_turns = !job_active;
    bool job_end_recorded = false;
    /* a Job that ended without its turn ending in the journal: its turn
     * started and did not finish, or it never started (the runner failed
     * before it could journal turn_started, e.g. exit 78) */
    bool ended = in->job.exists && (in->job.complete || in->job.failed);
    bool unfinished = in->job.turn == j->turn && !j->outcome && j->turn > 0;
    bool never_started = in->job.turn > j->turn;
    if (ended && (unfinished || never_started)) {
        cJSON *d = cJSON_CreateObject();
        char cls_buf[64];
        const char *cls = message_class(in->job.last_message, cls_buf);
        char *msg;
        const char *reason;
        if (in->job.failed && streq(in->job.failed_reason, "DeadlineExceeded")) {
            /* the Job's activeDeadlineSeconds is the session's timeoutSeconds */
            json_add_string(d, "outcome", JOURNAL_OUTCOME_LIMIT);
            reason = "timeoutSeconds";
            json_add_string(d, "limit", "timeoutSeconds");
            json_add_int64(d, "used", s->limits.timeout_seconds * 1000);
            json_add_int64(d, "max", s->limits.timeout_seconds * 1000);
            msg = xasprintf("timeoutSeconds: turn Job %s-t%lld ran into its deadline, %d s past "
                            "the session's %lld s (a model or tool call outlasted the session's "
                            "time)",
                            s->name, (long long)in->job.turn, CHILDREN_DEADLINE_GRACE,
                            (long long)s->limits.timeout_seconds);
        } else if (in->job.failed) {
            json_add_string(d, "outcome", JOURNAL_OUTCOME_ERROR);
            bool config = in->job.last_exit_code == CHILDREN_RUNNER_EXIT_CONFIG;
            reason = config ? "RunnerConfigError" : "JobFailed";
            char attempt[TERN_TERMINATION_MAX + 64] = "";
            if (in->job.last_exit_code > 0)
                snprintf(attempt, sizeof attempt, "; the last attempt exited %d%s%s",
                         in->job.last_exit_code, in->job.last_message ? ": " : "",
                         in->job.last_message ? in->job.last_message : "");
            msg = xasprintf("turn Job %s-t%lld failed%s%s%s%s%s", s->name,
                            (long long)in->job.turn,
                            never_started ? " before its turn started" : "",
                            in->job.failed_reason ? " (" : "",
                            in->job.failed_reason ? in->job.failed_reason : "",
                            in->job.failed_reason ? ")" : "", attempt);
            if (!config && cls && model_error_class(cls))
                out->signals.model_error = model_error_class(cls);
        } else {
            json_add_string(d, "outcome", JOURNAL_OUTCOME_ERROR);
            reason = "RunnerExitedEarly";
            msg = xasprintf("turn Job %s-t%lld completed without finishing the turn", s->name,
                            (long long)in->job.turn);
        }
        json_add_string(d, "reason", reason);
        json_add_string(d, "message", msg);
        char *key = xasprintf("turn/%lld/job-ended", (long long)in->job.turn);
        append(out, "turn_finished", in->job.turn, key, d);
        /* (the Warning comes with the Failed status on the next pass) */
        free(key);
        free(msg);
        out->requeue_after = 1;
        job_end_recorded = true;
    }

    /* --- a fork copies its parent's journal and workspace first ---------- */
    bool is_fork = s->fork_from.set;
    uint64_t fork_at = is_fork ? (uint64_t)s->fork_from.at_seq : 0;
    bool forked = !is_fork || j->last_seq > fork_at;
    if (!forked && j->last_seq < fork_at) {
        struct reconcile_action *a = add(out, RA_COPY_JOURNAL);
        a->from_uid = xstrdup(s->fork_from.uid);
        a->upto = fork_at;
    }
    cJSON *forks = cJSON_IsArray(json_get(in->status, "forks"))
                       ? json_dup(json_get(in->status, "forks"))
                       : cJSON_CreateArray();
    cJSON *st = status_base(in);

    /* --- failed? (a continuation in the journal lifts it) --------------- */
    bool failed = terminal_outcome(j->outcome) && !j->intent_pending && !job_end_recorded;
    struct failure fail = {0};
    if (failed)
        failure_of(in, &fail);

    /* --- parked by a team budget: the last model call was refused -------- */
    const struct observed_budgets *tb = in->budgets;
    bool budget_parked = streq(j->outcome, JOURNAL_OUTCOME_BUDGET) && !j->intent_pending &&
                         !job_end_recorded;
    bool budget_room = !tb || tb->resumable; /* (no budget applies any more: room) */
    bool budget_hold = budget_parked && !budget_room;

    /* --- intents, only between turns ---------------------------------- */
    bool decided = false;
    bool fresh = j->last_seq == 0;
    bool new_intent = false;
    int64_t waiting_messages = 0;
    int64_t intent_requeue = 0;
    if (between_turns && !job_end_recorded && forked) {
        if (fresh && !s->fork_from.set) {
            cJSON *d = cJSON_CreateObject();
            json_add_string(d, "source", "objective");
            json_add_string(d, "text", s->objective);
            append(out, "user_message", 0, "objective", d);
            new_intent = true;
        }
        decide_approval(in, out, &decided);
        new_intent = new_intent || decided;
        decide_memory(in, out);
        /* queued messages: spec.messages[i] is journal message i+1; a
         * session stopped at a limit takes them once the limit is raised */
        int64_t done = j->messages > 0 ? j->messages - 1 : 0;
        if (!j->pending_id && !fresh) {
            if ((failed && fail.blocked) || budget_hold) {
                waiting_messages = (int64_t)s->nmessages - done;
            } else {
                for (int64_t i = done; i < (int64_t)s->nmessages; i++) {
                    cJSON *d = cJSON_CreateObject();
                    json_add_string(d, "source", "spec.messages");
                    json_add_int64(d, "index", i);
                    json_add_string(d, "text", s->messages[i]);
                    char *key = xasprintf("message/%lld", (long long)i);
                    append(out, "user_message", j->turn, key, d);
                    free(key);
                    new_intent = true;
                }
            }
        }
        /* a failed session continues when its failure is removed */
        if (failed && !new_intent) {
            if (in->ann_retry) {
                if (fail.blocked) {
                    char *note = xasprintf("not retried: %s; %s", fail.message, fail.hint);
                    event(out, "Warning", "RetryRejected", note);
                    free(note);
                } else {
                    cJSON *d = cJSON_CreateObject();
                    if (in->ann_decided_by)
                        json_add_string(d, "by", in->ann_decided_by);
                    append_retry(out, in, "Retry", d, "retry");
                    char *note = xasprintf("retrying: a new turn continues from the journal "
                                           "after %s (%s)",
                                           fail.reason, fail.message);
                    event(out, "Normal", "Retrying", note);
                    free(note);
                    new_intent = true;
                }
            } else if (streq(j->outcome, JOURNAL_OUTCOME_LIMIT) && j->limit && !fail.blocked) {
                int64_t now_v = limit_value(s, j->limit);
                cJSON *d = cJSON_CreateObject();
                json_add_string(d, "limit", j->limit);
                json_add_int64(d, "from", j->limit_max);
                json_add_int64(d, "to", now_v);
                append_retry(out, in, "LimitRaised", d, "limit");
                char *note = xasprintf("spec.limits.%s is now %lld (was %lld, %lld used): a new "
                                       "turn continues from the journal",
                                       j->limit,
                                       (long long)(streq(j->limit, "timeoutSeconds")
                                                       ? now_v / 1000 : now_v),
                                       (long long)(streq(j->limit, "timeoutSeconds")
                                                       ? j->limit_max / 1000 : j->limit_max),
                                       (long long)(streq(j->limit, "timeoutSeconds")
                                                       ? j->limit_used / 1000 : j->limit_used));
                event(out, "Normal", "Retrying", note);
                free(note);
                new_intent = true;
            }
        } else if (in->ann_retry) {
            /* (failed but continued by a message in this pass: nothing to say) */
            if (!failed) {
                char *note = xasprintf("not retried: nothing failed (the last turn ended %s)",
                                       j->outcome ? j->outcome : "without an outcome yet");
                event(out, "Warning", "RetryRejected", note);
                free(note);
            }
        }
        /* a session parked by a budget goes on once the budget has room */
        if (budget_parked && budget_room && !new_intent) {
            cJSON *d = cJSON_CreateObject();
            json_add_string(d, "budget", j->reason ? j->reason : "");
            append_retry(out, in, "BudgetAvailable", d, "budget");
            char *note = xasprintf("AgentBudget %s has room again: a new turn continues from "
                                   "the journal",
                                   j->reason ? j->reason : "");
            event(out, "Normal", "Retrying", note);
            free(note);
            new_intent = true;
        }
        if (in->ann_retry) {
            struct reconcile_action *rm = add(out, RA_REMOVE_ANNOTATIONS);
            rm->keys[0] = xstrdup(RECONCILE_ANN_RETRY);
            if (in->ann_decided_by && !in->ann_approve && !in->ann_deny)
                rm->keys[1] = xstrdup(RECONCILE_ANN_DECIDED_BY);
        }
        /* approval timeout */
        if (j->pending_id && !decided && s->approval.timeout_seconds > 0) {
            int64_t deadline = j->pending_requested_at + s->approval.timeout_seconds;
            if (in->now >= deadline) {
                bool fail_it = s->approval.on_timeout == SESSION_ON_TIMEOUT_FAIL;
                cJSON *d = cJSON_CreateObject();
                json_add_string(d, "id", j->pending_id);
                json_add_string(d, "decision", "denied");
                json_add_string(d, "decidedBy", "tern.dev/approval-timeout");
                char *why = xasprintf("no decision within %lld s",
                                      (long long)s->approval.timeout_seconds);
                json_add_string(d, "reason", why);
                free(why);
                char *key = xasprintf("decision/%s", j->pending_id);
                append(out, "approval_decided", j->turn, key, d);
                free(key);
                char *note = xasprintf("approval %s timed out after %lld s: %s", j->pending_id,
                                       (long long)s->approval.timeout_seconds,
                                       fail_it ? "session failed" : "denied");
                event(out, "Warning", "ApprovalTimedOut", note);
                out->signals.approval_wait = (double)(in->now - j->pending_requested_at);
                if (fail_it) {
                    cJSON *f = cJSON_CreateObject();
                    json_add_string(f, "outcome", JOURNAL_OUTCOME_ERROR);
                    json_add_string(f, "reason", "ApprovalTimeout");
                    json_add_string(f, "message", note);
                    char *k2 = xasprintf("turn/%lld/approval-timeout", (long long)j->turn);
                    append(out, "turn_finished", j->turn, k2, f);
                    free(k2);
                }
                free(note);
                decided = true;
                new_intent = !fail_it;
            } else {
                intent_requeue = deadline - in->now;
            }
        }
    }
    if (new_intent)
        failed = false; /* continued: decided again from the journal next pass */
    /* after our own appends the journal moves on; decide the rest on the
     * next pass (triggered by the summary watch), except for children that
     * do not depend on it */
    bool journal_moving = false;
    for (size_t i = 0; i < out->nactions; i++)
        journal_moving = journal_moving || out->actions[i].kind == RA_JOURNAL_APPEND ||
                         out->actions[i].kind == RA_COPY_JOURNAL;
    /* forks are taken between turns, also while an approval is pending (the
     * child inherits it and decides it on its own) */
    if (in->ann_fork && between_turns && forked && !journal_moving && !job_end_recorded) {
        decide_fork(in, out, st, forks, failed);
        journal_moving = journal_moving || count_kind(out, RA_JOURNAL_APPEND) > 0;
    }
    if (intent_requeue && (!out->requeue_after || intent_requeue < out->requeue_after))
        out->requeue_after = intent_requeue;

    /* artifacts: the files under output/ are copied to the store after a
     * completed turn (and when asked), before the sandbox may be parked */
    const char *persist_req = NULL;
    bool persist_wanted = !failed && forked && !s->suspend &&
                          artstore_wanted(j->result_artifacts, j->result_turn, j->persisted,
                                          j->persist_request, in->ann_persist, &persist_req);

    bool limit = failed && streq(j->outcome, JOURNAL_OUTCOME_LIMIT);
    bool want_turn = !failed && !job_end_recorded && !s->suspend && !j->pending_id && !running &&
                     forked && in->forks_copying == 0 && (j->intent_pending || new_intent);

    /* --- the workspace claim, always (the other children come with what
     * uses them, created here in the action order: see "what the sandbox
     * and the Jobs use" below) ------------------------------------------ */
    if (!in->pvc_exists)
        create(out, "v1/persistentvolumeclaims", children_pvc(s, in->cfg));
    size_t children_at = out->nactions;

    /* --- stuck: something the session needs is missing or failing -------- */
    const char *stuck = NULL; /* CamelCase reason */
    char *stuck_msg = NULL;
    bool stuck_sandbox = false, stuck_runner = false;
    /* (a failed parent keeps serving its workspace to forks that copy it) */
    bool need_sandbox = (!failed && (running || (want_turn && !s->suspend) || !forked)) ||
                        in->forks_copying > 0 || persist_wanted;
    if (!failed && in->refs_checked && want_turn && in->runner_refs.reason) {
        stuck = in->runner_refs.reason;
        stuck_msg = xstrdup(in->runner_refs.message ? in->runner_refs.message : "");
        stuck_runner = true;
    } else if (!failed && in->refs_checked && need_sandbox && !in->pod.exists &&
               in->sandbox_refs.reason) {
        stuck = in->sandbox_refs.reason;
        stuck_msg = xstrdup(in->sandbox_refs.message ? in->sandbox_refs.message : "");
        stuck_sandbox = true;
    } else if (!failed && need_sandbox && in->pod.exists && !in->pod.deleting &&
               unschedulable_for_long(in->pod.unschedulable, in->pod.unschedulable_since, in->now,
                                      out)) {
        stuck = "Unschedulable";
        stuck_msg = xasprintf("sandbox pod %s-sandbox cannot be scheduled: %s", s->name,
                              in->pod.unschedulable);
        stuck_sandbox = true;
    } else if (!failed && need_sandbox && in->pod.exists && !in->pod.deleting &&
               !in->pod.ready && stuck_waiting(in->pod.waiting_reason)) {
        stuck = in->pod.waiting_reason;
        stuck_msg = xasprintf("sandbox pod %s-sandbox: %s%s%s", s->name, in->pod.waiting_reason,
                              in->pod.waiting_message ? ": " : "",
                              in->pod.waiting_message ? in->pod.waiting_message : "");
        stuck_sandbox = true;
    } else if (!failed && job_active &&
               unschedulable_for_long(in->job.pod_unschedulable,
                                      in->job.pod_unschedulable_since, in->now, out)) {
        stuck = "Unschedulable";
        stuck_msg = xasprintf("turn %lld's runner pod cannot be scheduled: %s",
                              (long long)in->job.turn, in->job.pod_unschedulable);
        stuck_runner = true;
    } else if (!failed && job_active && stuck_waiting(in->job.pod_waiting_reason)) {
        stuck = in->job.pod_waiting_reason;
        stuck_msg = xasprintf("turn %lld's runner pod: %s%s%s", (long long)in->job.turn,
                              in->job.pod_waiting_reason, in->job.pod_waiting_message ? ": " : "",
                              in->job.pod_waiting_message ? in->job.pod_waiting_message : "");
        stuck_runner = true;
    } else if (!failed && job_active && in->job.failed_pods > 0 && in->job.last_exit_code > 0 &&
               in->job.last_failed_at >= j->updated_at) {
        /* attempts fail and nothing was journaled since the last one */
        char cls_buf[64];
        const char *cls = message_class(in->job.last_message, cls_buf);
        stuck = cls ? (streq(cls, "ModelUnreachable")     ? "ModelUnreachable"
                       : streq(cls, "ModelRateLimited")   ? "ModelRateLimited"
                       : streq(cls, "ModelServerError")   ? "ModelServerError"
                       : streq(cls, "SandboxUnreachable") ? "SandboxUnreachable"
                       : streq(cls, "JournalUnavailable") ? "JournalUnavailable"
                       : streq(cls, "SandboxNotReady")    ? "SandboxNotReady"
                       : streq(cls, "ToolServerUnreachable") ? "ToolServerUnreachable"
                                                          : "AttemptFailed")
                    : "AttemptFailed";
        stuck_msg = xasprintf("turn %lld: attempt %lld of %lld failed (exit %d)%s%s; the Job "
                              "retries",
                              (long long)in->job.turn, (long long)in->job.failed_pods,
                              (long long)in->cfg->turn_backoff_limit + 1,
                              in->job.last_exit_code, in->job.last_message ? ": " : "",
                              in->job.last_message ? in->job.last_message : "");
        stuck_runner = true;
        /* counted once per attempt, when the attempt is first told */
        if (!streq(old_str(in->status, "message", NULL), stuck_msg) && cls)
            out->signals.model_error = model_error_class(cls);
    }
    /* blocked on a reference before: check again whether it is there now */
    const char *old_reason = old_str(in->status, "reason", NULL);
    if (!in->refs_checked &&
        (streq(old_reason, "SecretNotFound") || streq(old_reason, "SecretKeyNotFound") ||
         streq(old_reason, "ConfigMapNotFound") || streq(old_reason, "ServiceAccountNotFound")))
        out->wants_refs = true;
    bool refs_block = stuck && in->refs_checked &&
                      (stuck == in->runner_refs.reason || stuck == in->sandbox_refs.reason);
    if (refs_block && (!out->requeue_after || out->requeue_after > 10))
        out->requeue_after = 10; /* the referenced objects are not watched */

    /* --- the sandbox pod ------------------------------------------------ */
    char hash[17];
    children_sandbox_hash(s, in->cfg, hash);
    bool pod_usable = in->pod.exists && !in->pod.deleting && !streq(in->pod.phase, "Failed") &&
                      !streq(in->pod.phase, "Succeeded");
    bool pod_stale = pod_usable && !streq(in->pod.sandbox_hash, hash);
    bool sandbox_ready = pod_usable && !pod_stale && in->pod.ready && in->pod.ip;
    /* a session whose turn cannot start (its runner is blocked, no Job
     * runs) waits like an idle one: no new sandbox, and the one it has goes
     * after idleSuspendSeconds (it comes back with the turn) */
    bool idle_blocked = stuck_runner && !running;
    /* a turn whose runner is up but has not journaled turn_started yet (it
     * waits for the sandbox) may have its sandbox replaced like no turn */
    bool turn_underway = running && !(in->job.turn > j->turn);
    if (in->pod.exists && !in->pod.deleting && (!turn_underway || !pod_usable)) {
        bool park = false;
        const char *why = NULL;
        if (!pod_usable) {
            why = "the sandbox pod ended; it is recreated when needed";
        } else if (pod_stale && turn_underway) {
            /* the turn ends on the sandbox it started with */
        } else if (pod_stale) {
            why = "spec.sandbox changed; the sandbox is recreated on the same workspace";
            cJSON *d = cJSON_CreateObject();
            json_add_string(d, "from", in->pod.sandbox_hash ? in->pod.sandbox_hash : "");
            json_add_string(d, "to", hash);
            char *key = xasprintf("sandbox/%s", hash);
            append(out, "sandbox_switched", j->turn, key, d);
            free(key);
        } else if (running) {
            /* a turn's runner is waiting for this sandbox */
        } else if ((s->suspend || failed || budget_hold) && in->forks_copying == 0) {
            why = s->suspend ? "suspended: the sandbox pod is removed, the workspace kept"
                  : failed   ? "the session ended: the sandbox pod is removed"
                             : "parked by an AgentBudget: the sandbox pod is removed, the "
                               "workspace kept";
        } else if (!need_sandbox && tb && tb->others_waiting) {
            park = true;
            why = "idle while another session waits for a slot of its AgentBudget: the sandbox "
                  "pod is parked, the workspace kept";
        } else if ((!need_sandbox || idle_blocked) && !persist_wanted &&
                   s->sandbox.idle_suspend_seconds > 0) {
            int64_t idle_until = j->updated_at + s->sandbox.idle_suspend_seconds;
            if (in->now >= idle_until) {
                park = true;
                why = "idle: the sandbox pod is parked, the workspace kept";
            } else if (!out->requeue_after || idle_until - in->now < out->requeue_after) {
                out->requeue_after = idle_until - in->now;
            }
        }
        if (why) {
            delete_child(out, "v1/pods", children_name(s->name, "sandbox"));
            event(out, "Normal", park ? "SandboxParked" : "SandboxRemoved", why);
            pod_usable = false;
            sandbox_ready = false;
        }
    }
    /* a team budget may hold a new sandbox back (a concurrency cap, the
     * sessions started in a window): the shell asks, then decides again */
    bool budget_queued = tb && tb->checked && !tb->admitted;
    bool sandbox_created = false;
    if (need_sandbox && !idle_blocked && !in->pod.exists && !journal_moving && !stuck_sandbox) {
        if (tb && !tb->checked)
            out->wants_admission = true;
        if (!in->refs_checked)
            out->wants_refs = true;
        if (!budget_queued) {
            create(out, "v1/pods", children_sandbox_pod(s, in->cfg));
            event(out, "Normal", "SandboxCreated", "sandbox pod created");
            sandbox_created = true;
            if (s->permissions.nhosts && !in->cfg->egress_proxy) {
                char *note = xasprintf(
                    "spec.permissions.networkAllowlist names hosts (the first: %s), but this "
                    "operator runs without an egress proxy (--egress-proxy), so they allow "
                    "nothing; only the CIDR entries are reachable",
                    s->permissions.hosts[0].text);
                event(out, "Warning", "EgressProxyMissing", note);
                free(note);
            }
        }
    } else {
        budget_queued = false;
    }
    /* the turn's runner starts beside its sandbox, not after it: the runner
     * waits for the sandbox's address and for tern-sandboxd to answer, so
     * the two pods start at once (apply -> first model request) */
    bool sandbox_coming = sandbox_ready || sandbox_created ||
                          (pod_usable && !pod_stale && !stuck_sandbox);

    /* --- a fork's workspace copy ------------------------------------------ */
    bool copy_created = false;
    if (!forked && j->last_seq == fork_at && !journal_moving) {
        if (in->copy_job.exists && in->copy_job.complete) {
            cJSON *d = cJSON_CreateObject();
            json_add_string(d, "session", s->fork_from.session);
            json_add_string(d, "uid", s->fork_from.uid);
            json_add_int64(d, "atSeq", (int64_t)fork_at);
            append(out, "forked_from", j->turn, "forked-from", d);
            event(out, "Normal", "ForkReady", "journal and workspace copied from the parent");
        } else if (in->copy_job.exists && in->copy_job.failed) {
            cJSON *d = cJSON_CreateObject();
            json_add_string(d, "outcome", JOURNAL_OUTCOME_ERROR);
            json_add_string(d, "reason", "ForkCopyFailed");
            char *msg = xasprintf("the workspace copy Job %s-copy failed%s%s", s->name,
                                  in->copy_job.failed_message ? ": " : "",
                                  in->copy_job.failed_message ? in->copy_job.failed_message : "");
            json_add_string(d, "message", msg);
            free(msg);
            append(out, "turn_finished", j->turn, "fork/copy-failed", d);
        } else if (!in->copy_job.exists && sandbox_ready && in->fork_parent_address) {
            char *to = xasprintf("%s:%d", in->pod.ip, SANDBOX_PORT);
            char *ptok = children_name(s->fork_from.session, "sandbox-token");
            create(out, "batch/v1/jobs",
                   children_copy_job(s, in->cfg, in->fork_parent_address, to, ptok));
            copy_created = true;
            free(ptok);
            free(to);
            event(out, "Normal", "ForkCopying", "copying the parent's workspace");
        }
    }

    /* --- artifacts (before the next turn changes output/) --------------- */
    bool persisting = persist_wanted && sandbox_ready && !running && !journal_moving;
    if (persisting) {
        struct reconcile_action *a = add(out, RA_PERSIST_ARTIFACTS);
        a->turn = persist_req ? j->turn : j->result_turn;
        a->key = persist_req ? xstrdup(persist_req) : NULL;
        a->name = xasprintf("%s:%d", in->pod.ip, SANDBOX_PORT);
        a->data = cJSON_CreateObject();
        cJSON_AddBoolToObject(a->data, "retain", s->retain_artifacts.set);
        json_add_int64(a->data, "ttlSeconds", s->retain_artifacts.ttl_seconds);
    }

    /* --- the next turn ------------------------------------------------ */
    int64_t next_turn = j->turn + 1;
    bool job_for_next = in->job.exists && in->job.turn == next_turn;
    bool turn_created = false;
    if (want_turn && sandbox_coming && !journal_moving && !persisting && !job_for_next &&
        !stuck_runner && !stuck_sandbox) {
        if (!in->refs_checked)
            out->wants_refs = true;
        create(out, "batch/v1/jobs", children_turn_job(s, in->cfg, next_turn, in->price_json));
        char *note = xasprintf("turn %lld started", (long long)next_turn);
        event(out, "Normal", "TurnStarted", note);
        free(note);
        running = true;
        turn_created = true;
    }
    if (job_for_next && !in->job.complete && !in->job.failed)
        running = true;

    /* --- what the sandbox and the Jobs use ------------------------------ */
    bool copy_active = in->copy_job.exists && !in->copy_job.complete && !in->copy_job.failed;
    runtime_children(in, out, children_at,
                     &(struct runtime_use){
                         .pod = in->pod.exists || sandbox_created,
                         .jobs = job_active || turn_created || copy_active || copy_created,
                         .turn_open = j->turn > 0 && !j->outcome,
                     });

    /* --- status ------------------------------------------------------- */
    bool completed = streq(j->outcome, JOURNAL_OUTCOME_COMPLETED) && !j->intent_pending &&
                     !new_intent && !journal_moving && !j->pending_id && !running;
    bool queued = !failed && !stuck && !running && (budget_queued || budget_hold);
    const char *phase;
    if (failed)
        phase = "Failed";
    else if (stuck)
        phase = "Blocked";
    else if (queued)
        phase = "Queued";
    else if (!forked)
        phase = "Provisioning";
    else if (running) /* the runner may be up before its sandbox */
        phase = sandbox_ready || !need_sandbox ? "Running" : "Provisioning";
    else if (j->pending_id)
        phase = "WaitingForApproval";
    else if (completed) /* a finished session stays finished when suspended */
        phase = "Succeeded";
    else if (s->suspend)
        phase = "Suspended";
    else if (want_turn || journal_moving)
        phase = j->last_seq == 0 && !in->pod.exists ? "Pending" : "Provisioning";
    else
        phase = "Pending";
    out->phase = phase;

    /* --- a finished session past its time to live ----------------------- */
    int64_t ttl = children_session_ttl(s, in->cfg);
    if (ttl >= 0 && (streq(phase, "Succeeded") || streq(phase, "Failed")) && j->last_seq > 0 &&
        !persist_wanted) {
        int64_t expires = j->updated_at + ttl;
        if (in->now >= expires) {
            char *note = xasprintf("finished %lld s ago (ttlSecondsAfterFinished %lld): the "
                                   "session is deleted%s",
                                   (long long)(in->now - j->updated_at), (long long)ttl,
                                   in->retain_journal ? ", its journal kept" : "");
            event(out, "Normal", "Expired", note);
            free(note);
            delete_child(out, "tern.dev/v1alpha1/agentsessions", xstrdup(in->name));
        } else if (!out->requeue_after || expires - in->now < out->requeue_after) {
            out->requeue_after = expires - in->now;
        }
    }

    json_add_string(st, "phase", phase);
    const char *ready_reason = phase;
    const char *ready_msg = "";
    if (!forked && !failed && !stuck) {
        ready_reason = "Forking";
        ready_msg = "copying the parent's journal and workspace";
    }
    char *fail_msg = NULL;
    if (failed) {
        if (waiting_messages > 0)
            fail_msg = xasprintf("%s; %s (%lld message%s of spec.messages wait%s for that)",
                                 fail.message, fail.hint, (long long)waiting_messages,
                                 waiting_messages == 1 ? "" : "s",
                                 waiting_messages == 1 ? "s" : "");
        else
            fail_msg = xasprintf("%s; %s", fail.message, fail.hint);
        ready_reason = fail.reason;
        ready_msg = fail_msg;
        out->reason = fail.reason;
    } else if (stuck) {
        ready_reason = stuck;
        ready_msg = stuck_msg;
        out->reason = stuck;
    }
    /* held back by a team budget: which one and why */
    char *queue_msg = NULL;
    const char *queue_reason = NULL, *queue_budget = NULL, *queue_dim = NULL;
    if (queued) {
        const char *base = budget_hold ? (tb && tb->exhausted_message ? tb->exhausted_message
                                          : j->message ? j->message : "an AgentBudget refused "
                                                                      "the model call")
                                       : tb->queue_message ? tb->queue_message : "";
        if (waiting_messages > 0)
            queue_msg = xasprintf("%s (%lld message%s of spec.messages wait%s for that)", base,
                                  (long long)waiting_messages, waiting_messages == 1 ? "" : "s",
                                  waiting_messages == 1 ? "s" : "");
        else
            queue_msg = xstrdup(base);
        queue_dim = budget_hold ? (tb && tb->exhausted_reason ? tb->exhausted_reason : "Tokens")
                                : tb->queue_reason;
        queue_budget = budget_hold ? j->reason : tb->queue_budget;
        queue_reason = streq(queue_dim, "ConcurrentSessions") ? "ConcurrencyLimit"
                                                              : "BudgetExhausted";
        ready_reason = queue_reason;
        ready_msg = queue_msg;
        out->reason = queue_reason;
        int64_t again = tb && tb->retry_after > 0 && tb->retry_after < 30 ? tb->retry_after : 30;
        if (!out->requeue_after || again < out->requeue_after)
            out->requeue_after = again; /* the budget controller also wakes it on a change */
    }
    set_cond(st, in, "Ready", !failed && !stuck && strcmp(phase, "Pending") &&
                                  strcmp(phase, "Provisioning"),
             ready_reason, ready_msg);
    if (stuck_sandbox)
        set_cond(st, in, "SandboxReady", false, stuck, stuck_msg);
    else
        set_cond(st, in, "SandboxReady", sandbox_ready, sandbox_ready ? "PodReady" : "NoSandbox",
                 sandbox_ready ? "" : "the sandbox pod is not running");
    if (stuck_runner)
        set_cond(st, in, "TurnRunning", running, running ? "Retrying" : stuck, stuck_msg);
    else
        set_cond(st, in, "TurnRunning", running, running ? "JobActive" : "BetweenTurns", "");
    set_cond(st, in, "ApprovalPending", j->pending_id != NULL,
             j->pending_id ? "WaitingForDecision" : "NothingPending",
             j->pending_summary ? j->pending_summary : "");
    bool team_exhausted = queued && streq(queue_reason, "BudgetExhausted");
    set_cond(st, in, "BudgetExhausted", limit || team_exhausted,
             limit ? "LimitReached" : team_exhausted ? queue_dim : "WithinLimits",
             limit ? fail.message : team_exhausted ? queue_msg : "");
    set_cond(st, in, "Completed", completed && !failed && !stuck,
             completed ? "FinalAnswer" : "NotFinished", "");
    set_cond(st, in, "Failed", failed, failed ? fail.reason : "NotFailed",
             failed ? fail_msg : "");
    if (failed || stuck) {
        char *m = cond_bounded(failed ? fail_msg : stuck_msg, STATUS_MESSAGE_MAX);
        json_add_string(st, "reason", failed ? fail.reason : stuck);
        json_add_string(st, "message", m);
        free(m);
    } else if (queued) {
        char *m = cond_bounded(queue_msg, STATUS_MESSAGE_MAX);
        json_add_string(st, "reason", queue_reason);
        json_add_string(st, "message", m);
        free(m);
        cJSON *q = cJSON_AddObjectToObject(st, "queue");
        json_add_string(q, "budget", queue_budget ? queue_budget : "");
        json_add_string(q, "reason", queue_dim ? queue_dim : "");
        if (budget_queued) {
            json_add_int64(q, "position", tb->position);
            json_add_int64(q, "waiting", tb->waiting);
        }
    }
    if (failed) {
        cJSON *f = cJSON_AddObjectToObject(st, "failure");
        json_add_int64(f, "turn", j->turn);
        json_add_string(f, "reason", fail.reason);
        char *m = cond_bounded(fail.message, STATUS_MESSAGE_MAX);
        json_add_string(f, "message", m);
        free(m);
        if (j->limit) {
            json_add_string(f, "limit", j->limit);
            json_add_int64(f, "used", j->limit_used);
            json_add_int64(f, "max", j->limit_max);
        }
        cJSON_AddItemToObject(f, "blocked", cJSON_CreateBool(fail.blocked));
        json_add_string(f, "hint", fail.hint);
    }

    cJSON *sb = cJSON_AddObjectToObject(st, "sandbox");
    char *podname = children_name(s->name, "sandbox");
    json_add_string(sb, "pod", podname);
    free(podname);
    /* the address once the pod runs (the runner may connect as soon as
     * tern-sandboxd answers; a Pending pod's IP may never serve); ready once
     * the pod's readiness probe passed */
    if (pod_usable && !pod_stale && in->pod.ip && streq(in->pod.phase, "Running")) {
        char *addr = xasprintf("%s:%d", in->pod.ip, SANDBOX_PORT);
        json_add_string(sb, "address", addr);
        free(addr);
    }
    cJSON_AddItemToObject(sb, "ready", cJSON_CreateBool(sandbox_ready));

    int64_t shown_turn = running && job_for_next ? next_turn : j->turn;
    if (shown_turn > 0) {
        cJSON *t = cJSON_AddObjectToObject(st, "turn");
        json_add_int64(t, "number", shown_turn);
        char *jn = children_job_name(s->name, shown_turn);
        json_add_string(t, "job", jn);
        free(jn);
        int64_t attempt = in->job.exists && in->job.turn == shown_turn ? in->job.failed_pods + 1 : 1;
        json_add_int64(t, "attempt", attempt);
    }
    cJSON *u = cJSON_AddObjectToObject(st, "usage");
    json_add_int64(u, "modelTurns", j->model_turns);
    json_add_int64(u, "toolCalls", j->tool_calls);
    json_add_int64(u, "promptTokens", j->prompt_tokens);
    json_add_int64(u, "completionTokens", j->completion_tokens);
    json_add_int64(u, "costMicroUSD", j->cost_micro_usd);
    if (j->pending_id) {
        cJSON *p = cJSON_AddObjectToObject(st, "pendingApproval");
        json_add_string(p, "id", j->pending_id);
        if (j->pending_tool)
            json_add_string(p, "tool", j->pending_tool);
        if (j->pending_summary)
            json_add_string(p, "summary", j->pending_summary);
        char t[32];
        json_add_string(p, "requestedAt", conditions_time(j->pending_requested_at, t));
        /* a newly pending approval is announced once */
        if (!streq(old_str(in->status, "pendingApproval", "id"), j->pending_id)) {
            char *note = xasprintf("approval %s requested: %s", j->pending_id,
                                   j->pending_summary ? j->pending_summary : "");
            status_event(out, "Normal", "ApprovalRequested", note);
            free(note);
        }
    }
    json_add_int64(cJSON_AddObjectToObject(st, "journal"), "lastSeq", (int64_t)j->last_seq);
    memory_status(in, st);
    json_add_int64(st, "messagesProcessed", j->messages > 0 ? j->messages - 1 : 0);
    if (j->result_summary) {
        cJSON *r = cJSON_AddObjectToObject(st, "result");
        json_add_string(r, "summary", j->result_summary);
        cJSON *arts = artstore_status_list(j->result_artifacts, j->result_turn, j->persisted);
        if (arts)
            cJSON_AddItemToObject(r, "artifacts", arts);
        if (j->result_value && !cJSON_IsNull(j->result_value)) /* not nullable in the CRD */
            cJSON_AddItemToObject(r, "value", json_dup(j->result_value));
        if (j->result_ref) {
            int64_t size = 0;
            json_add_string(r, "valueRef", json_get(j->result_ref, "path")->valuestring);
            if (json_item_int64(json_get(j->result_ref, "size"), &size) == 0)
                json_add_int64(r, "valueSize", size);
            json_add_string(r, "valueSha256", json_get(j->result_ref, "sha256")->valuestring);
        }
    }
    artifacts_condition(st, in, persist_wanted);
    if (j->first_request) {
        json_add_string(st, "firstModelRequestTime", j->first_request);
        if (!old_str(in->status, "firstModelRequestTime", NULL) && !is_fork &&
            j->first_request_at >= in->created_at && in->created_at > 0)
            out->signals.first_request_latency = j->first_request_at - in->created_at;
    }
    if (cJSON_GetArraySize(forks) > 0)
        cJSON_AddItemToObject(st, "forks", forks);
    else
        cJSON_Delete(forks);
    forks = NULL;
    /* announce transitions once: terminal ones, and every new reason or
     * message of a failure or of being stuck */
    const char *old_phase = out->signals.old_phase;
    const char *old_msg = old_str(in->status, "message", NULL);
    const char *new_msg = old_str(st, "message", NULL);
    if (!streq(old_phase, phase) && strcmp(phase, "Succeeded") == 0) {
        status_event(out, "Normal", "Completed", j->result_summary ? j->result_summary : "done");
        out->signals.ended_reason = "Completed";
    } else if (failed && (!streq(old_phase, phase) || !streq(old_msg, new_msg))) {
        status_event(out, "Warning", fail.reason, new_msg);
        if (!streq(old_phase, phase)) {
            out->signals.ended_reason = fail.reason;
            if (!out->signals.model_error)
                out->signals.model_error = fail.model_error;
        }
    } else if (stuck && (!streq(old_phase, phase) || !streq(old_msg, new_msg))) {
        status_event(out, "Warning", stuck, new_msg);
    } else if (queued) {
        /* told once per budget and reason that turns it away (not for every
         * move in the line) */
        const cJSON *oq = json_get(in->status, "queue");
        if (!streq(old_phase, phase) || !streq(old_str(oq, "budget", NULL), queue_budget) ||
            !streq(old_str(oq, "reason", NULL), queue_dim)) {
            if (streq(queue_reason, "ConcurrencyLimit"))
                status_event(out, "Normal", "Queued", new_msg);
            else
                status_event(out, "Warning", "BudgetExhausted", new_msg);
            out->signals.budget = queue_budget;
            out->signals.budget_reason = queue_dim;
        }
    }
    free(queue_msg);
    failure_done(&fail);
    free(fail_msg);
    free(stuck_msg);
    out->status = st;
}

/* ArtifactsPersisted: whether the last answer's files are in the store. */
static void artifacts_condition(cJSON *st, const struct reconcile_input *in, bool wanted)
{
    const struct observed_journal *j = &in->journal;
    if (cJSON_GetArraySize(j->result_artifacts) == 0 && !j->persisted && !wanted)
        return;
    const cJSON *e = json_get(j->persisted, "error");
    if (wanted) {
        set_cond(st, in, "ArtifactsPersisted", false, "Pending",
                 "the files under output/ are copied to the artifact store once the sandbox "
                 "is ready");
        return;
    }
    if (!j->persisted) {
        /* an answer recorded before the summary kept its turn */
        set_cond(st, in, "ArtifactsPersisted", false, "NotPersisted",
                 j->result_turn > 0
                     ? "not copied while the session is suspended or Failed; they are once it "
                       "goes on"
                     : "this answer was recorded before the artifact store: kubectl tern "
                       "persist copies output/ now");
        return;
    }
    if (e) {
        set_cond(st, in, "ArtifactsPersisted", false,
                 old_str(e, "reason", NULL) ? old_str(e, "reason", NULL) : "PersistFailed",
                 old_str(e, "message", NULL) ? old_str(e, "message", NULL) : "");
        return;
    }
    int n = 0, missing = 0;
    const char *first = NULL, *first_msg = NULL;
    const cJSON *a;
    cJSON_ArrayForEach(a, json_get(j->persisted, "artifacts"))
    {
        n++;
        if (!cJSON_IsTrue(json_get(a, "stored"))) {
            if (!missing++) {
                first = old_str(a, "path", NULL);
                first_msg = old_str(a, "message", NULL);
            }
        }
    }
    char *msg;
    if (missing) {
        msg = xasprintf("%d of %d files not stored; %s: %s", missing, n, first ? first : "?",
                        first_msg ? first_msg : "");
        char *m = cond_bounded(msg, 1024);
        set_cond(st, in, "ArtifactsPersisted", false, "NotAllStored", m);
        free(m);
    } else {
        msg = xasprintf("%d files in ConfigMap %s", n,
                        old_str(j->persisted, "configMap", NULL) ? old_str(j->persisted,
                                                                           "configMap", NULL)
                                                                 : "?");
        set_cond(st, in, "ArtifactsPersisted", true, "Persisted", msg);
    }
    free(msg);
}

int reconcile_new_token(char out[65])
{
    unsigned char b[32];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        return -EIO;
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 0;
}
