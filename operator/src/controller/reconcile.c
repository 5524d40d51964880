/* reconcile.c - the operator's decision for one AgentSession. See
 * reconcile.h and docs/operator.md. */
#include "reconcile.h"

#include "base/mem.h"
#include "controller/conditions.h"
#include "journal/journal.h"
#include "json/json.h"
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

static void decide_invalid(const struct reconcile_input *in, struct reconcile_output *out)
{
    cJSON *st = status_base(in);
    json_add_string(st, "phase", "Failed");
    const char *msg = in->invalid ? in->invalid : "invalid spec";
    set_cond(st, in, "Ready", false, "InvalidSpec", msg);
    set_cond(st, in, "Failed", true, "InvalidSpec", msg);
    /* one Warning per distinct problem, not one per resync */
    const cJSON *old = conditions_find(json_get(in->status, "conditions"), "Failed");
    if (!old || !streq(old_str(old, "message", NULL), msg))
        event(out, "Warning", "InvalidSpec", msg);
    out->status = st;
    out->phase = "Failed";
}

/* The approval intent carried by annotations, if any. */
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
        cJSON *d = cJSON_CreateObject();
        json_add_string(d, "id", id);
        json_add_string(d, "decision", approve ? "approved" : "denied");
        if (in->ann_decided_by)
            json_add_string(d, "decidedBy", in->ann_decided_by);
        if (in->ann_reason)
            json_add_string(d, "reason", in->ann_reason);
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
 * pass, so the fork point is exactly the last event seen. */
static void decide_fork(const struct reconcile_input *in, struct reconcile_output *out,
                        cJSON *forks)
{
    const char *child = in->ann_fork;
    if (!valid_session_name(child) || strcmp(child, in->name) == 0) {
        char *note = xasprintf("tern.dev/fork: \"%s\" is not a usable session name (a DNS "
                               "label of at most %d characters, not this session's own)",
                               child, SESSION_MAX_NAME);
        event(out, "Warning", "ForkRejected", note);
        free(note);
        remove_annotation(out, RECONCILE_ANN_FORK);
        return;
    }
    uint64_t at = in->journal.last_seq;
    create(out, "tern.dev/v1alpha1/agentsessions", fork_child(in, child, at));
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "child", child);
    json_add_int64(d, "atSeq", (int64_t)at);
    char *key = xasprintf("fork/%s", child);
    append(out, "fork_created", in->journal.turn, key, d);
    free(key);
    remove_annotation(out, RECONCILE_ANN_FORK);
    char *note = xasprintf("forked into %s at journal seq %llu", child, (unsigned long long)at);
    event(out, "Normal", "ForkCreated", note);
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

void reconcile_decide(const struct reconcile_input *in, struct reconcile_output *out)
{
    memset(out, 0, sizeof *out);
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
        decide_invalid(in, out);
        return;
    }
    const struct session_spec *s = in->spec;

    /* --- the state of the current turn ---------------------------------- */
    bool job_active = in->job.exists && !in->job.complete && !in->job.failed;
    bool running = job_active; /* a turn Job is working */
    bool between_turns = !job_active;
    /* a Job that ended without its turn ending in the journal */
    if (in->job.exists && (in->job.complete || in->job.failed) && in->job.turn >= j->turn &&
        !j->outcome && j->turn > 0) {
        cJSON *d = cJSON_CreateObject();
        json_add_string(d, "outcome", JOURNAL_OUTCOME_ERROR);
        json_add_string(d, "reason", in->job.failed ? "JobFailed" : "RunnerExitedEarly");
        char *msg = xasprintf("turn Job %s-t%lld %s%s%s", s->name, (long long)in->job.turn,
                              in->job.failed ? "failed" : "completed without finishing the turn",
                              in->job.failed_reason ? ": " : "",
                              in->job.failed_reason ? in->job.failed_reason : "");
        json_add_string(d, "message", msg);
        char *key = xasprintf("turn/%lld/job-ended", (long long)in->job.turn);
        append(out, "turn_finished", in->job.turn, key, d);
        event(out, "Warning", "TurnFailed", msg);
        free(key);
        free(msg);
        out->requeue_after = 1;
        /* the status follows from the journal on the next pass */
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

    /* --- intents, only between turns ---------------------------------- */
    bool decided = false;
    bool fresh = j->last_seq == 0;
    bool new_intent = false;
    if (between_turns && !out->requeue_after && forked) {
        if (fresh && !s->fork_from.set) {
            cJSON *d = cJSON_CreateObject();
            json_add_string(d, "source", "objective");
            json_add_string(d, "text", s->objective);
            append(out, "user_message", 0, "objective", d);
            new_intent = true;
        }
        decide_approval(in, out, &decided);
        new_intent = new_intent || decided;
        /* queued messages: spec.messages[i] is journal message i+1 */
        int64_t done = j->messages > 0 ? j->messages - 1 : 0;
        if (!j->pending_id && !fresh) {
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
        /* approval timeout */
        if (j->pending_id && !decided && s->approval.timeout_seconds > 0) {
            int64_t deadline = j->pending_requested_at + s->approval.timeout_seconds;
            if (in->now >= deadline) {
                bool fail = s->approval.on_timeout == SESSION_ON_TIMEOUT_FAIL;
                cJSON *d = cJSON_CreateObject();
                json_add_string(d, "id", j->pending_id);
                json_add_string(d, "decision", "denied");
                json_add_string(d, "decidedBy", "tern.dev/approval-timeout");
                char *key = xasprintf("decision/%s", j->pending_id);
                append(out, "approval_decided", j->turn, key, d);
                free(key);
                char *note = xasprintf("approval %s timed out after %lld s: %s", j->pending_id,
                                       (long long)s->approval.timeout_seconds,
                                       fail ? "session failed" : "denied");
                event(out, "Warning", "ApprovalTimedOut", note);
                free(note);
                if (fail) {
                    cJSON *f = cJSON_CreateObject();
                    json_add_string(f, "outcome", JOURNAL_OUTCOME_ERROR);
                    json_add_string(f, "reason", "ApprovalTimeout");
                    char *k2 = xasprintf("turn/%lld/approval-timeout", (long long)j->turn);
                    append(out, "turn_finished", j->turn, k2, f);
                    free(k2);
                }
                decided = true;
                new_intent = !fail;
            } else {
                out->requeue_after = deadline - in->now;
            }
        }
    }
    /* after our own appends the journal moves on; decide the rest on the
     * next pass (triggered by the summary watch), except for children that
     * do not depend on it */
    bool journal_moving = false;
    for (size_t i = 0; i < out->nactions; i++)
        journal_moving = journal_moving || out->actions[i].kind == RA_JOURNAL_APPEND ||
                         out->actions[i].kind == RA_COPY_JOURNAL;
    if (in->ann_fork && between_turns && forked && !journal_moving && !out->requeue_after) {
        decide_fork(in, out, forks);
        journal_moving = true;
    }

    bool limit = streq(j->outcome, JOURNAL_OUTCOME_LIMIT);
    bool failed = terminal_outcome(j->outcome);
    bool want_turn = !failed && !s->suspend && !j->pending_id && !running && forked &&
                     in->forks_copying == 0 && (j->intent_pending || new_intent);

    /* --- children that always exist ---------------------------------- */
    if (!in->pvc_exists)
        create(out, "v1/persistentvolumeclaims", children_pvc(s, in->cfg));
    if (!in->token_exists && in->new_token)
        create(out, "v1/secrets", children_token_secret(s, in->new_token));
    if (!in->task_exists)
        create(out, "v1/configmaps", children_task_configmap(s));
    if (!in->netpol_exists)
        create(out, "networking.k8s.io/v1/networkpolicies", children_network_policy(s, in->cfg));

    /* --- the sandbox pod ------------------------------------------------ */
    char hash[17];
    children_sandbox_hash(s, in->cfg, hash);
    bool pod_usable = in->pod.exists && !in->pod.deleting && !streq(in->pod.phase, "Failed") &&
                      !streq(in->pod.phase, "Succeeded");
    bool pod_stale = pod_usable && !streq(in->pod.sandbox_hash, hash);
    bool need_sandbox = !failed && (running || (want_turn && !s->suspend) || !forked ||
                                    in->forks_copying > 0);
    bool sandbox_ready = pod_usable && !pod_stale && in->pod.ready && in->pod.ip;
    if (in->pod.exists && !in->pod.deleting && !running) {
        bool park = false;
        const char *why = NULL;
        if (!pod_usable) {
            why = "the sandbox pod ended; it is recreated when needed";
        } else if (pod_stale) {
            why = "spec.sandbox changed; the sandbox is recreated on the same workspace";
            cJSON *d = cJSON_CreateObject();
            json_add_string(d, "from", in->pod.sandbox_hash ? in->pod.sandbox_hash : "");
            json_add_string(d, "to", hash);
            char *key = xasprintf("sandbox/%s", hash);
            append(out, "sandbox_switched", j->turn, key, d);
            free(key);
        } else if (s->suspend || failed) {
            why = s->suspend ? "suspended: the sandbox pod is removed, the workspace kept"
                             : "the session ended: the sandbox pod is removed";
        } else if (!need_sandbox && s->sandbox.idle_suspend_seconds > 0) {
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
    if (need_sandbox && !in->pod.exists && !journal_moving) {
        create(out, "v1/pods", children_sandbox_pod(s, in->cfg));
        event(out, "Normal", "SandboxCreated", "sandbox pod created");
        if (s->permissions.nhosts && !in->cfg->egress_proxy) {
            char *note = xasprintf(
                "spec.permissions.networkAllowlist names hosts (the first: %s), but this operator "
                "runs without an egress proxy (--egress-proxy), so they allow nothing; only the "
                "CIDR entries are reachable",
                s->permissions.hosts[0].text);
            event(out, "Warning", "EgressProxyMissing", note);
            free(note);
        }
    }

    /* --- a fork's workspace copy ------------------------------------------ */
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
            append(out, "turn_finished", j->turn, "fork/copy-failed", d);
            event(out, "Warning", "ForkCopyFailed", "the workspace copy Job failed");
        } else if (!in->copy_job.exists && sandbox_ready && in->fork_parent_address) {
            char *to = xasprintf("%s:%d", in->pod.ip, SANDBOX_PORT);
            char *ptok = children_name(s->fork_from.session, "sandbox-token");
            create(out, "batch/v1/jobs",
                   children_copy_job(s, in->cfg, in->fork_parent_address, to, ptok));
            free(ptok);
            free(to);
            event(out, "Normal", "ForkCopying", "copying the parent's workspace");
        }
    }

    /* --- the next turn ------------------------------------------------ */
    int64_t next_turn = j->turn + 1;
    bool job_for_next = in->job.exists && in->job.turn == next_turn;
    if (want_turn && sandbox_ready && !journal_moving && !job_for_next) {
        create(out, "batch/v1/jobs", children_turn_job(s, in->cfg, next_turn));
        char *note = xasprintf("turn %lld started", (long long)next_turn);
        event(out, "Normal", "TurnStarted", note);
        free(note);
        running = true;
    }
    if (job_for_next && !in->job.complete && !in->job.failed)
        running = true;

    /* --- status ------------------------------------------------------- */
    const char *phase;
    if (failed)
        phase = "Failed";
    else if (!forked)
        phase = "Provisioning";
    else if (running)
        phase = "Running";
    else if (j->pending_id)
        phase = "WaitingForApproval";
    else if (s->suspend)
        phase = "Suspended";
    else if (want_turn || journal_moving)
        phase = j->last_seq == 0 && !in->pod.exists ? "Pending" : "Provisioning";
    else if (streq(j->outcome, JOURNAL_OUTCOME_COMPLETED))
        phase = "Succeeded";
    else
        phase = "Pending";
    out->phase = phase;

    cJSON *st = status_base(in);
    json_add_string(st, "phase", phase);
    bool ok = !failed;
    const char *ready_reason = phase;
    if (!forked && !failed)
        ready_reason = "Forking";
    set_cond(st, in, "Ready", ok && strcmp(phase, "Pending") && strcmp(phase, "Provisioning"),
             failed ? (limit ? "BudgetExhausted"
                       : streq(j->outcome, JOURNAL_OUTCOME_REFUSED) ? "Refused" : "TurnFailed")
                    : ready_reason,
             failed ? "the session failed"
                    : (!forked ? "copying the parent's journal and workspace" : ""));
    set_cond(st, in, "SandboxReady", sandbox_ready, sandbox_ready ? "PodReady" : "NoSandbox",
             sandbox_ready ? "" : "the sandbox pod is not running");
    set_cond(st, in, "TurnRunning", running, running ? "JobActive" : "BetweenTurns", "");
    set_cond(st, in, "ApprovalPending", j->pending_id != NULL,
             j->pending_id ? "WaitingForDecision" : "NothingPending",
             j->pending_summary ? j->pending_summary : "");
    set_cond(st, in, "BudgetExhausted", limit, limit ? "LimitReached" : "WithinLimits", "");
    set_cond(st, in, "Completed", strcmp(phase, "Succeeded") == 0,
             strcmp(phase, "Succeeded") == 0 ? "FinalAnswer" : "NotFinished", "");
    set_cond(st, in, "Failed", failed, failed ? (limit ? "LimitReached" : "TurnFailed") : "NotFailed",
             "");

    cJSON *sb = cJSON_AddObjectToObject(st, "sandbox");
    char *podname = children_name(s->name, "sandbox");
    json_add_string(sb, "pod", podname);
    free(podname);
    if (sandbox_ready) {
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
            event(out, "Normal", "ApprovalRequested", note);
            free(note);
        }
    }
    json_add_int64(cJSON_AddObjectToObject(st, "journal"), "lastSeq", (int64_t)j->last_seq);
    json_add_int64(st, "messagesProcessed", j->messages > 0 ? j->messages - 1 : 0);
    if (j->result_summary) {
        cJSON *r = cJSON_AddObjectToObject(st, "result");
        json_add_string(r, "summary", j->result_summary);
        if (j->result_artifacts)
            cJSON_AddItemToObject(r, "artifacts", json_dup(j->result_artifacts));
    }
    if (cJSON_GetArraySize(forks) > 0)
        cJSON_AddItemToObject(st, "forks", forks);
    else
        cJSON_Delete(forks);
    forks = NULL;
    /* announce terminal transitions once */
    const char *old_phase = old_str(in->status, "phase", NULL);
    if (!streq(old_phase, phase)) {
        if (strcmp(phase, "Succeeded") == 0)
            event(out, "Normal", "Completed", j->result_summary ? j->result_summary : "done");
        else if (strcmp(phase, "Failed") == 0)
            event(out, "Warning", limit ? "BudgetExhausted" : "Failed",
                  limit ? "a limit was reached" : "the session failed");
    }
    out->status = st;
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
