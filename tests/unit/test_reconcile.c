/* Unit tests for controller/reconcile: the decision table, without servers. */
#include "harness.h"

#include "base/mem.h"
#include "controller/conditions.h"
#include "controller/reconcile.h"
#include "journal/journal.h"
#include "json/json.h"
#include "yaml/yamljson.h"

#include <stdio.h>
#include <stdlib.h>

static const struct children_config cfg = {
    .runner_image = "tern:test",
    .sandbox_image = "sandbox:default",
    .etcd_endpoints = "http://127.0.0.1:2379",
    .runner_service_account = "tern-runner",
    .turn_backoff_limit = 4,
    .job_ttl_seconds = 3600,
};

static struct session_spec *spec_from(const char *yaml)
{
    cJSON *obj = NULL;
    struct tern_err e = {0};
    if (yamljson_parse_one(yaml, strlen(yaml), NULL, &obj, &e))
        th_fail(__FILE__, __LINE__, "yaml: %s", e.msg);
    struct session_spec *s = NULL;
    if (session_spec_parse(obj, &s, &e))
        th_fail(__FILE__, __LINE__, "spec: %s", e.msg);
    cJSON_Delete(obj);
    return s;
}

#define SESSION_YAML(extra)                                                                        \
    "apiVersion: tern.dev/v1alpha1\nkind: AgentSession\n"                                          \
    "metadata: {name: s1, namespace: ns, uid: u-1, generation: 2}\n"                               \
    "spec:\n  objective: do it\n" extra

static struct reconcile_input base_input(const struct session_spec *s)
{
    struct reconcile_input in = {
        .name = "s1",
        .ns = "ns",
        .uid = "u-1",
        .generation = 2,
        .has_finalizer = true,
        .spec = s,
        .pvc_exists = true,
        .token_exists = true,
        .task_exists = true,
        .netpol_exists = true,
        .new_token = "00ff",
        .now = 1000000,
        .cfg = &cfg,
    };
    return in;
}

/* Counts actions of a kind, optionally matching resource / type_name / reason. */
static int count(const struct reconcile_output *o, enum reconcile_action_kind k, const char *what)
{
    int n = 0;
    for (size_t i = 0; i < o->nactions; i++) {
        const struct reconcile_action *a = &o->actions[i];
        if (a->kind != k)
            continue;
        const char *s = k == RA_JOURNAL_APPEND ? a->type_name
                        : k == RA_EVENT        ? a->reason
                        : a->resource;
        if (!what || (s && strcmp(s, what) == 0))
            n++;
    }
    return n;
}

static const struct reconcile_action *find(const struct reconcile_output *o,
                                           enum reconcile_action_kind k, const char *what)
{
    for (size_t i = 0; i < o->nactions; i++) {
        const struct reconcile_action *a = &o->actions[i];
        const char *s = k == RA_JOURNAL_APPEND ? a->type_name : k == RA_EVENT ? a->reason : a->resource;
        if (a->kind == k && (!what || (s && strcmp(s, what) == 0)))
            return a;
    }
    return NULL;
}

static const char *cond_status(const struct reconcile_output *o, const char *type)
{
    const cJSON *c = conditions_find(json_get(o->status, "conditions"), type);
    const cJSON *s = json_get(c, "status");
    return cJSON_IsString(s) ? s->valuestring : "absent";
}

TEST(invalid_spec_fails_without_children)
{
    struct reconcile_input in = base_input(NULL);
    in.invalid = "spec.limits.maxToolCalls: must be >= 1";
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Failed");
    ASSERT_EQ_INT(count(&o, RA_CREATE, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "InvalidSpec"), 1);
    const cJSON *ready = conditions_find(json_get(o.status, "conditions"), "Ready");
    ASSERT_EQ_STR(json_get(ready, "reason")->valuestring, "InvalidSpec");
    ASSERT_EQ_STR(json_get(ready, "message")->valuestring, in.invalid);
    ASSERT_EQ_STR(cond_status(&o, "Ready"), "False");
    /* the same problem again: no second Warning */
    struct reconcile_input again = in;
    again.status = o.status;
    struct reconcile_output o2;
    reconcile_decide(&again, &o2);
    ASSERT_EQ_INT(count(&o2, RA_EVENT, "InvalidSpec"), 0);
    ASSERT_TRUE(json_equal(o.status, o2.status));
    reconcile_output_done(&o2);
    reconcile_output_done(&o);
}

TEST(fresh_session_journals_objective_and_creates_children)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.has_finalizer = false;
    in.pvc_exists = in.token_exists = in.task_exists = in.netpol_exists = false;
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(o.actions[0].kind, RA_ADD_FINALIZER);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "user_message"), 1);
    ASSERT_EQ_STR(find(&o, RA_JOURNAL_APPEND, "user_message")->key, "objective");
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/persistentvolumeclaims"), 1);
    /* the token Secret, task ConfigMap and NetworkPolicy come with the pod */
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/secrets"), 0);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/configmaps"), 0);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "networking.k8s.io/v1/networkpolicies"), 0);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 0); /* after the journal moved */
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    ASSERT_EQ_STR(o.phase, "Pending");
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(pending_intent_brings_sandbox_then_turn)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.journal.last_seq = 1;
    in.journal.messages = 1;
    in.journal.intent_pending = true;
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    /* the sandbox and the turn's runner start together: the runner waits
     * for the sandbox's address (apply -> first model request) */
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 1);
    const struct reconcile_action *job = find(&o, RA_CREATE, "batch/v1/jobs");
    ASSERT_NOT_NULL(job);
    ASSERT_EQ_STR(json_get(json_get(job->object, "metadata"), "name")->valuestring, "s1-t1");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "TurnStarted"), 1);
    ASSERT_EQ_STR(o.phase, "Provisioning"); /* until the sandbox is ready */
    ASSERT_NULL(json_get(json_get(o.status, "sandbox"), "address"));
    reconcile_output_done(&o);

    /* the Job exists, the pod has an address but is not ready yet: the
     * address is published for the runner, ready stays false */
    in.job = (struct observed_job){.exists = true, .turn = 1};
    char hash[17];
    in.pod = (struct observed_pod){.exists = true, .phase = "Running", .ready = false,
                                   .ip = "127.1.0.5", .sandbox_hash = children_sandbox_hash(s, &cfg, hash)};
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    ASSERT_EQ_STR(json_get(json_get(o.status, "sandbox"), "address")->valuestring,
                  "127.1.0.5:8080");
    ASSERT_FALSE(cJSON_IsTrue(json_get(json_get(o.status, "sandbox"), "ready")));
    ASSERT_EQ_STR(o.phase, "Provisioning");
    reconcile_output_done(&o);

    in.pod.ready = true;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 0);
    ASSERT_EQ_STR(o.phase, "Running");
    ASSERT_TRUE(cJSON_IsTrue(json_get(json_get(o.status, "sandbox"), "ready")));
    reconcile_output_done(&o);

    /* the Job exists (turn 1 not yet journaled): no second Job */
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    ASSERT_EQ_STR(o.phase, "Running");
    ASSERT_EQ_STR(cond_status(&o, "TurnRunning"), "True");
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(host_entries_without_an_egress_proxy_are_reported)
{
    struct session_spec *s = spec_from(SESSION_YAML(
        "  permissions: {networkAllowlist: [\"pypi.org\", \"10.0.0.0/8\"]}\n"));
    struct reconcile_input in = base_input(s);
    in.journal.last_seq = 1;
    in.journal.messages = 1;
    in.journal.intent_pending = true;
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 1);
    const struct reconcile_action *w = find(&o, RA_EVENT, "EgressProxyMissing");
    ASSERT_NOT_NULL(w);
    ASSERT_EQ_STR(w->event_type, "Warning");
    ASSERT_CONTAINS(w->note, "the first: pypi.org");
    reconcile_output_done(&o);
    struct children_config pc = cfg;
    pc.egress_proxy = "10.96.0.42:3128";
    in.cfg = &pc;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 1);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "EgressProxyMissing"), 0);
    reconcile_output_done(&o);
    session_spec_free(s);
}

static void waiting_for(struct reconcile_input *in, const char *id)
{
    in->journal.last_seq = 9;
    in->journal.turn = 1;
    in->journal.messages = 1;
    in->journal.outcome = JOURNAL_OUTCOME_APPROVAL;
    in->journal.pending_id = id;
    in->journal.pending_tool = "exec_command";
    in->journal.pending_summary = "git push origin fix";
    in->journal.pending_requested_at = in->now - 10;
    in->journal.updated_at = in->now - 10;
    in->job = (struct observed_job){.exists = true, .turn = 1, .complete = true};
}

TEST(matching_approval_is_journaled_and_annotations_removed)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    waiting_for(&in, "ap-1");
    in.ann_approve = "ap-1";
    in.ann_decided_by = "alice";
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    const struct reconcile_action *a = find(&o, RA_JOURNAL_APPEND, "approval_decided");
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_STR(json_get(a->data, "decision")->valuestring, "approved");
    ASSERT_EQ_STR(json_get(a->data, "decidedBy")->valuestring, "alice");
    ASSERT_EQ_STR(a->key, "decision/ap-1");
    const struct reconcile_action *rm = find(&o, RA_REMOVE_ANNOTATIONS, NULL);
    ASSERT_NOT_NULL(rm);
    ASSERT_EQ_STR(rm->keys[0], RECONCILE_ANN_APPROVE);
    ASSERT_EQ_STR(rm->keys[1], RECONCILE_ANN_DECIDED_BY);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "ApprovalGranted"), 1);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0); /* next pass */
    reconcile_output_done(&o);

    /* deny */
    in.ann_approve = NULL;
    in.ann_deny = "ap-1";
    reconcile_decide(&in, &o);
    a = find(&o, RA_JOURNAL_APPEND, "approval_decided");
    ASSERT_EQ_STR(json_get(a->data, "decision")->valuestring, "denied");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "ApprovalDenied"), 1);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(mismatched_approval_is_refused_and_removed)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    waiting_for(&in, "ap-1");
    in.ann_approve = "ap-9";
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "ApprovalRejected"), 1);
    ASSERT_CONTAINS(find(&o, RA_EVENT, "ApprovalRejected")->note, "ap-9 is not pending (pending: ap-1)");
    ASSERT_EQ_INT(count(&o, RA_REMOVE_ANNOTATIONS, NULL), 1);
    ASSERT_EQ_STR(o.phase, "WaitingForApproval");
    reconcile_output_done(&o);

    /* the decision already recorded (annotation removal was interrupted) */
    in.journal.pending_id = NULL;
    in.journal.last_decided_id = "ap-9";
    in.journal.intent_pending = true;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "ApprovalRejected"), 0);
    ASSERT_EQ_INT(count(&o, RA_REMOVE_ANNOTATIONS, NULL), 1);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(approval_timeout_denies_or_fails)
{
    struct session_spec *s =
        spec_from(SESSION_YAML("  approval: {timeoutSeconds: 60, onTimeout: Deny}\n"));
    struct reconcile_input in = base_input(s);
    waiting_for(&in, "ap-1");
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    ASSERT_EQ_INT(o.requeue_after, 50); /* requested 10 s ago, 60 s timeout */
    reconcile_output_done(&o);
    in.now += 60;
    reconcile_decide(&in, &o);
    const struct reconcile_action *a = find(&o, RA_JOURNAL_APPEND, "approval_decided");
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_STR(json_get(a->data, "decision")->valuestring, "denied");
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "turn_finished"), 0);
    reconcile_output_done(&o);
    session_spec_free(s);

    s = spec_from(SESSION_YAML("  approval: {timeoutSeconds: 60, onTimeout: Fail}\n"));
    in.spec = s;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "approval_decided"), 1);
    a = find(&o, RA_JOURNAL_APPEND, "turn_finished");
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_STR(json_get(a->data, "reason")->valuestring, "ApprovalTimeout");
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(final_answer_is_succeeded_and_completed)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 12, .turn = 1, .messages = 1,
                                           .outcome = "completed", .updated_at = in.now,
                                           .result_summary = "it works"};
    in.job = (struct observed_job){.exists = true, .turn = 1, .complete = true};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Succeeded");
    ASSERT_EQ_STR(cond_status(&o, "Completed"), "True");
    ASSERT_EQ_STR(cond_status(&o, "Ready"), "True");
    ASSERT_EQ_STR(json_get(json_get(o.status, "result"), "summary")->valuestring, "it works");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "Completed"), 1);
    ASSERT_EQ_INT(count(&o, RA_CREATE, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 3); /* no pod, no Job: only the claim stays */
    /* steady state: deciding again from the written status changes nothing */
    struct reconcile_input again = in;
    again.token_exists = again.task_exists = again.netpol_exists = false;
    again.status = o.status;
    again.now += 5;
    struct reconcile_output o2;
    reconcile_decide(&again, &o2);
    ASSERT_TRUE(json_equal(o.status, o2.status));
    ASSERT_EQ_INT(o2.nactions, 0);
    reconcile_output_done(&o2);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(new_messages_become_intents_in_order)
{
    struct session_spec *s = spec_from(SESSION_YAML("  messages: [first, second]\n"));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 12, .turn = 1, .messages = 2,
                                           .outcome = "completed", .updated_at = in.now};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "user_message"), 1); /* first is done */
    const struct reconcile_action *a = find(&o, RA_JOURNAL_APPEND, "user_message");
    ASSERT_EQ_STR(a->key, "message/1");
    ASSERT_EQ_STR(json_get(a->data, "text")->valuestring, "second");
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(failed_job_without_turn_end_is_journaled_as_error)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 5, .turn = 1, .messages = 1};
    in.job = (struct observed_job){.exists = true, .turn = 1, .failed = true,
                                   .failed_reason = "PodFailurePolicy", .failed_pods = 1};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    const struct reconcile_action *a = find(&o, RA_JOURNAL_APPEND, "turn_finished");
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_STR(json_get(a->data, "outcome")->valuestring, "error");
    ASSERT_EQ_STR(json_get(a->data, "reason")->valuestring, "JobFailed");
    ASSERT_CONTAINS(json_get(a->data, "message")->valuestring,
                    "turn Job s1-t1 failed (PodFailurePolicy)");
    ASSERT_EQ_INT(a->turn, 1);
    reconcile_output_done(&o);
    in.journal.outcome = "error";
    in.journal.reason = "JobFailed";
    in.journal.message = "turn Job s1-t1 failed (PodFailurePolicy)";
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Failed");
    ASSERT_EQ_STR(cond_status(&o, "Failed"), "True");
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    /* one Warning, with the reason and the message */
    ASSERT_EQ_INT(count(&o, RA_EVENT, "JobFailed"), 1);
    ASSERT_CONTAINS(find(&o, RA_EVENT, "JobFailed")->note, "turn 1: turn Job s1-t1 failed");
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(idle_sandbox_is_parked_and_suspend_removes_it)
{
    struct session_spec *s = spec_from(SESSION_YAML("  sandbox: {idleSuspendSeconds: 300}\n"));
    struct reconcile_input in = base_input(s);
    waiting_for(&in, "ap-1");
    char hash[17];
    in.pod = (struct observed_pod){.exists = true, .phase = "Running", .ready = true,
                                   .ip = "127.1.0.5", .sandbox_hash = children_sandbox_hash(s, &cfg, hash)};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 0);
    ASSERT_EQ_INT(o.requeue_after, 290); /* idle for 10 of 300 s (approval: 1 day) */
    reconcile_output_done(&o);
    in.now = in.journal.updated_at + 300;
    in.journal.pending_requested_at = in.now; /* keep the approval timeout out of the way */
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "SandboxParked"), 1);
    ASSERT_EQ_STR(o.phase, "WaitingForApproval");
    reconcile_output_done(&o);
    session_spec_free(s);

    s = spec_from(SESSION_YAML("  suspend: true\n"));
    in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 3, .turn = 1, .messages = 1,
                                           .outcome = "completed", .intent_pending = true,
                                           .updated_at = in.now};
    in.pod = (struct observed_pod){.exists = true, .phase = "Running", .ready = true,
                                   .ip = "127.1.0.5", .sandbox_hash = children_sandbox_hash(s, &cfg, hash)};
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    ASSERT_EQ_STR(o.phase, "Suspended");
    reconcile_output_done(&o);
    session_spec_free(s);
}

/* The index of the first action of kind k on resource, or -1. */
static int index_of(const struct reconcile_output *o, enum reconcile_action_kind k,
                    const char *resource)
{
    for (size_t i = 0; i < o->nactions; i++)
        if (o->actions[i].kind == k && o->actions[i].resource &&
            strcmp(o->actions[i].resource, resource) == 0)
            return (int)i;
    return -1;
}

static const char *delete_name(const struct reconcile_output *o, const char *resource)
{
    int i = index_of(o, RA_DELETE, resource);
    return i < 0 ? NULL : o->actions[i].name;
}

/* A parked session (waiting for approval, no pod, no Job) holds only its
 * workspace claim: the token Secret, task ConfigMap and NetworkPolicy go,
 * the NetworkPolicy not before the pod is gone. */
TEST(a_parked_session_holds_only_its_claim)
{
    struct session_spec *s = spec_from(SESSION_YAML("  sandbox: {idleSuspendSeconds: 300}\n"));
    struct reconcile_input in = base_input(s);
    waiting_for(&in, "ap-1");
    in.journal.updated_at = in.journal.pending_requested_at = in.now - 300;
    char hash[17];
    in.pod = (struct observed_pod){.exists = true, .phase = "Running", .ready = true,
                                   .ip = "127.1.0.5",
                                   .sandbox_hash = children_sandbox_hash(s, &cfg, hash)};
    struct reconcile_output o;
    /* idle: the pod is parked; its children stay while it terminates */
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1);
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 1);
    reconcile_output_done(&o);
    in.pod.deleting = true;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 0);
    reconcile_output_done(&o);
    /* the pod is gone: the three go, the claim stays */
    in.pod = (struct observed_pod){0};
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "WaitingForApproval");
    ASSERT_EQ_INT(count(&o, RA_CREATE, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 3);
    ASSERT_EQ_STR(delete_name(&o, "v1/secrets"), "s1-sandbox-token");
    ASSERT_EQ_STR(delete_name(&o, "v1/configmaps"), "s1-task");
    ASSERT_EQ_STR(delete_name(&o, "networking.k8s.io/v1/networkpolicies"), "s1-sandbox");
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/persistentvolumeclaims"), 0);
    reconcile_output_done(&o);
    /* gone: nothing more to do, nothing created back */
    in.token_exists = in.task_exists = in.netpol_exists = false;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 0);
    reconcile_output_done(&o);
    /* a fresh session that waits (e.g. first start of a parked journal)
     * creates only its claim */
    in.pvc_exists = false;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, NULL), 1);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/persistentvolumeclaims"), 1);
    reconcile_output_done(&o);
    session_spec_free(s);
}

/* Woken (the approval decided, the decision journaled), the session gets
 * its Secret (a new token), ConfigMap and NetworkPolicy back in the same
 * pass as its pod and turn Job, before them in the action order. */
TEST(a_woken_session_gets_its_children_before_the_pod)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 10, .turn = 1, .messages = 1,
                                           .outcome = JOURNAL_OUTCOME_APPROVAL,
                                           .intent_pending = true, .last_decided_id = "ap-1",
                                           .updated_at = in.now};
    in.job = (struct observed_job){.exists = true, .turn = 1, .complete = true};
    in.token_exists = in.task_exists = in.netpol_exists = false;
    in.new_token = "a1b2";
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    int sec = index_of(&o, RA_CREATE, "v1/secrets");
    int cm = index_of(&o, RA_CREATE, "v1/configmaps");
    int np = index_of(&o, RA_CREATE, "networking.k8s.io/v1/networkpolicies");
    int pod = index_of(&o, RA_CREATE, "v1/pods");
    int job = index_of(&o, RA_CREATE, "batch/v1/jobs");
    ASSERT_TRUE(sec >= 0 && cm >= 0 && np >= 0 && pod >= 0 && job >= 0);
    ASSERT_TRUE(sec < pod && cm < pod && np < pod && pod < job);
    ASSERT_EQ_STR(json_get(json_get(o.actions[sec].object, "stringData"), "token")->valuestring,
                  "a1b2");
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 0);
    reconcile_output_done(&o);
    /* the next pass, the caches behind (nothing of it seen yet): the same
     * creates again (AlreadyExists is success), nothing deleted */
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 1);
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 0);
    reconcile_output_done(&o);
    /* the runner journaled turn_started before the caches saw pod and Job:
     * an open turn keeps the children */
    in.journal.turn = 2;
    in.journal.outcome = NULL;
    in.journal.intent_pending = false;
    in.token_exists = in.task_exists = in.netpol_exists = true;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 0);
    reconcile_output_done(&o);
    session_spec_free(s);
}

/* A parked session's file viewer (made suspended by the aggregated API)
 * gets the token Secret and the NetworkPolicy, then is resumed; while it
 * runs they stay (the task ConfigMap is the sandbox pod's alone). A
 * running fork copy Job keeps the token Secret. */
TEST(viewer_and_copy_jobs_keep_what_they_mount)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    waiting_for(&in, "ap-1");
    in.token_exists = in.task_exists = in.netpol_exists = false;
    in.viewer_running = true;
    in.viewer_suspended = "s1-files-abcde";
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    int sec = index_of(&o, RA_CREATE, "v1/secrets");
    int np = index_of(&o, RA_CREATE, "networking.k8s.io/v1/networkpolicies");
    int resume = index_of(&o, RA_PATCH, "batch/v1/jobs");
    ASSERT_TRUE(sec >= 0 && np >= 0 && resume > sec && resume > np);
    ASSERT_EQ_STR(o.actions[resume].name, "s1-files-abcde");
    ASSERT_FALSE(cJSON_IsTrue(json_get(json_get(o.actions[resume].data, "spec"), "suspend")));
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/configmaps"), 0);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 0);
    reconcile_output_done(&o);
    /* resumed and running: kept; a task ConfigMap left over goes */
    in.viewer_suspended = NULL;
    in.token_exists = in.task_exists = in.netpol_exists = true;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 1);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/configmaps"), 1);
    ASSERT_EQ_INT(count(&o, RA_PATCH, NULL), 0);
    reconcile_output_done(&o);
    /* the viewer ended: the rest goes */
    in.viewer_running = false;
    in.task_exists = false;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 2);
    reconcile_output_done(&o);
    /* a fork's copy Job mounts the session's token */
    in.copy_job = (struct observed_job){.exists = true};
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/secrets"), 0);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "networking.k8s.io/v1/networkpolicies"), 1);
    reconcile_output_done(&o);
    session_spec_free(s);
}

/* No pod for an idle session, whatever it waits for: a finished session
 * waiting for a follow-up message and one whose turn cannot start (its
 * runner is blocked) give up their sandbox after idleSuspendSeconds. */
TEST(every_idle_session_gives_up_its_pod)
{
    struct session_spec *s = spec_from(SESSION_YAML("  sandbox: {idleSuspendSeconds: 300}\n"));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 9, .turn = 1, .messages = 1,
                                           .outcome = "completed", .updated_at = in.now - 300};
    char hash[17];
    in.pod = (struct observed_pod){.exists = true, .phase = "Running", .ready = true,
                                   .ip = "127.1.0.5", .sandbox_hash = children_sandbox_hash(s, &cfg, hash)};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Succeeded");
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "SandboxParked"), 1);
    reconcile_output_done(&o);
    /* a turn wanted but its runner cannot start (blocked): idle all the same */
    in.journal = (struct observed_journal){.last_seq = 10, .turn = 1, .messages = 2,
                                           .outcome = "completed", .intent_pending = true,
                                           .updated_at = in.now - 300};
    in.refs_checked = true;
    in.runner_refs = (struct observed_blocker){"SecretNotFound", "secret \"openai\" not found"};
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Blocked");
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1);
    reconcile_output_done(&o);
    session_spec_free(s);
}

/* spec.ttlSecondsAfterFinished (else the operator's default): a finished
 * session is deleted that long after its last event, not before. */
TEST(a_finished_session_expires_after_its_ttl)
{
    struct session_spec *s = spec_from(SESSION_YAML("  ttlSecondsAfterFinished: 60\n"));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 9, .turn = 1, .messages = 1,
                                           .outcome = "completed", .updated_at = in.now - 20};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Succeeded");
    ASSERT_EQ_INT(count(&o, RA_DELETE, "tern.dev/v1alpha1/agentsessions"), 0);
    ASSERT_EQ_INT(o.requeue_after, 40);
    reconcile_output_done(&o);
    in.now += 40;
    reconcile_decide(&in, &o);
    const struct reconcile_action *d = find(&o, RA_DELETE, "tern.dev/v1alpha1/agentsessions");
    ASSERT_NOT_NULL(d);
    ASSERT_EQ_STR(d->name, "s1");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "Expired"), 1);
    reconcile_output_done(&o);
    /* a session that still works is not expired, whatever its age */
    in.journal.outcome = NULL;
    in.job = (struct observed_job){.exists = true, .turn = 1};
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "tern.dev/v1alpha1/agentsessions"), 0);
    reconcile_output_done(&o);
    session_spec_free(s);

    /* without the field: the operator's default, none by default */
    s = spec_from(SESSION_YAML(""));
    in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 9, .turn = 1, .messages = 1,
                                           .outcome = "completed", .updated_at = in.now - 3600};
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "tern.dev/v1alpha1/agentsessions"), 0);
    reconcile_output_done(&o);
    struct children_config c2 = cfg;
    c2.session_ttl_seconds = 600;
    in.cfg = &c2;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "tern.dev/v1alpha1/agentsessions"), 1);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(changed_sandbox_spec_recreates_the_pod_between_turns)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 3, .turn = 1, .messages = 1,
                                           .outcome = "completed", .intent_pending = true,
                                           .updated_at = in.now};
    in.pod = (struct observed_pod){.exists = true, .phase = "Running", .ready = true,
                                   .ip = "127.1.0.5", .sandbox_hash = "0000000000000000"};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "sandbox_switched"), 1);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    reconcile_output_done(&o);
    /* turn 2's runner is up but waits for the sandbox (turn 2 not yet
     * journaled): the sandbox is replaced all the same */
    in.job = (struct observed_job){.exists = true, .turn = 2};
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1);
    reconcile_output_done(&o);
    /* while turn 2 runs: left alone, the turn ends on its sandbox */
    in.journal.turn = 2;
    in.journal.outcome = NULL;
    in.journal.intent_pending = false;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, NULL), 0);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(deletion_removes_journal_then_finalizer)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.deleting = true;
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(o.nactions, 2);
    ASSERT_EQ_INT(o.actions[0].kind, RA_DELETE_JOURNAL);
    ASSERT_EQ_INT(o.actions[1].kind, RA_REMOVE_FINALIZER);
    ASSERT_NULL(o.status);
    reconcile_output_done(&o);
    in.retain_journal = true;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(o.nactions, 1);
    ASSERT_EQ_INT(o.actions[0].kind, RA_REMOVE_FINALIZER);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(fork_annotation_creates_an_independent_child_at_a_turn_boundary)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    cJSON *spec_json = NULL;
    const char *sj = "{\"objective\":\"do it\",\"suspend\":false}";
    ASSERT_OK(json_parse(sj, strlen(sj), &spec_json, NULL));
    in.spec_json = spec_json;
    in.journal = (struct observed_journal){.last_seq = 12, .turn = 1, .messages = 1,
                                           .outcome = "completed", .updated_at = in.now};
    in.ann_fork = "s1-alt";
    /* not while a turn runs */
    in.job = (struct observed_job){.exists = true, .turn = 2};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "tern.dev/v1alpha1/agentsessions"), 0);
    reconcile_output_done(&o);
    in.job = (struct observed_job){.exists = true, .turn = 1, .complete = true};
    reconcile_decide(&in, &o);
    const struct reconcile_action *c = find(&o, RA_CREATE, "tern.dev/v1alpha1/agentsessions");
    ASSERT_NOT_NULL(c);
    const cJSON *ff = json_get(json_get(c->object, "spec"), "forkFrom");
    ASSERT_EQ_STR(json_get(ff, "uid")->valuestring, "u-1");
    int64_t at = 0;
    ASSERT_OK(json_get_int64(ff, "", "atSeq", JSON_REQUIRED, &at, NULL));
    ASSERT_EQ_INT(at, 12);
    ASSERT_NULL(json_get(json_get(c->object, "metadata"), "ownerReferences")); /* independent */
    const struct reconcile_action *a = find(&o, RA_JOURNAL_APPEND, "fork_created");
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_STR(a->key, "fork/s1-alt");
    ASSERT_EQ_STR(find(&o, RA_REMOVE_ANNOTATIONS, NULL)->keys[0], RECONCILE_ANN_FORK);
    ASSERT_EQ_STR(cJSON_GetArrayItem(json_get(o.status, "forks"), 0)->valuestring, "s1-alt");
    reconcile_output_done(&o);

    /* a bad name is refused */
    in.ann_fork = "Not_A_Name";
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "tern.dev/v1alpha1/agentsessions"), 0);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "ForkRejected"), 1);
    reconcile_output_done(&o);

    /* while the fork copies, the parent keeps its sandbox and runs no turn */
    in.ann_fork = NULL;
    in.forks_copying = 1;
    in.journal.intent_pending = true;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 1);
    reconcile_output_done(&o);
    cJSON_Delete(spec_json);
    session_spec_free(s);
}

TEST(fork_child_copies_journal_then_workspace_then_runs)
{
    struct session_spec *s =
        spec_from(SESSION_YAML("  forkFrom: {session: p, uid: u-parent, atSeq: 12}\n"));
    struct reconcile_input in = base_input(s);
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    const struct reconcile_action *a = find(&o, RA_COPY_JOURNAL, NULL);
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_STR(a->from_uid, "u-parent");
    ASSERT_EQ_INT(a->upto, 12);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "user_message"), 0); /* no objective: copied */
    ASSERT_EQ_STR(o.phase, "Provisioning");
    const cJSON *ready = conditions_find(json_get(o.status, "conditions"), "Ready");
    ASSERT_EQ_STR(json_get(ready, "reason")->valuestring, "Forking");
    reconcile_output_done(&o);

    /* journal copied; sandbox ready; parent's address known -> copy Job */
    in.journal = (struct observed_journal){.last_seq = 12, .turn = 1, .messages = 1,
                                           .outcome = "completed", .updated_at = in.now};
    char hash[17];
    in.pod = (struct observed_pod){.exists = true, .phase = "Running", .ready = true,
                                   .ip = "127.1.0.9", .sandbox_hash = children_sandbox_hash(s, &cfg, hash)};
    in.fork_parent_address = "127.1.0.5:8080";
    reconcile_decide(&in, &o);
    const struct reconcile_action *job = find(&o, RA_CREATE, "batch/v1/jobs");
    ASSERT_NOT_NULL(job);
    ASSERT_EQ_STR(json_get(json_get(job->object, "metadata"), "name")->valuestring, "s1-copy");
    char *args = json_print(json_get(json_get(json_get(job->object, "spec"), "template"), "spec"));
    ASSERT_CONTAINS(args, "--from=127.1.0.5:8080");
    ASSERT_CONTAINS(args, "--to=127.1.0.9:8080");
    ASSERT_CONTAINS(args, "p-sandbox-token");
    free(args);
    reconcile_output_done(&o);

    /* copy done -> forked_from, then a normal session */
    in.copy_job = (struct observed_job){.exists = true, .complete = true};
    reconcile_decide(&in, &o);
    a = find(&o, RA_JOURNAL_APPEND, "forked_from");
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_STR(a->key, "forked-from");
    reconcile_output_done(&o);
    in.journal.last_seq = 13;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Succeeded");
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    reconcile_output_done(&o);
    session_spec_free(s);
}

/* ---- issue 16: off the happy path ----------------------------------------- */

static const char *status_str(const struct reconcile_output *o, const char *k)
{
    const cJSON *v = json_get(o->status, k);
    return cJSON_IsString(v) ? v->valuestring : "(absent)";
}

static const char *cond_field(const struct reconcile_output *o, const char *type, const char *k)
{
    const cJSON *v = json_get(conditions_find(json_get(o->status, "conditions"), type), k);
    return cJSON_IsString(v) ? v->valuestring : "(absent)";
}

static void ready_sandbox(struct reconcile_input *in, const struct session_spec *s,
                          char hash[17])
{
    in->pod = (struct observed_pod){.exists = true, .phase = "Running", .ready = true,
                                    .ip = "127.1.0.5",
                                    .sandbox_hash = children_sandbox_hash(s, &cfg, hash)};
}

static void at_token_limit(struct reconcile_input *in)
{
    in->journal = (struct observed_journal){
        .last_seq = 20, .turn = 2, .messages = 1, .outcome = "limit_reached",
        .updated_at = in->now - 5, .reason = "maxTokens",
        .message = "maxTokens: used 1686 of 1500", .limit = "maxTokens", .limit_used = 1686,
        .limit_max = 1500, .good_seq = 18};
    in->job = (struct observed_job){.exists = true, .turn = 2, .complete = true};
}

TEST(a_limit_failure_says_which_and_waits_until_the_limit_is_raised)
{
    struct session_spec *s = spec_from(SESSION_YAML("  limits: {maxTokens: 1500}\n"
                                                    "  messages: [please go on]\n"));
    struct reconcile_input in = base_input(s);
    at_token_limit(&in);
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Failed");
    ASSERT_EQ_STR(o.reason, "LimitReached");
    ASSERT_EQ_STR(status_str(&o, "reason"), "LimitReached");
    ASSERT_CONTAINS(status_str(&o, "message"), "turn 2: maxTokens: used 1686 of 1500");
    ASSERT_CONTAINS(status_str(&o, "message"), "raise spec.limits.maxTokens above 1686");
    ASSERT_CONTAINS(status_str(&o, "message"), "1 message of spec.messages waits");
    ASSERT_EQ_STR(cond_field(&o, "Failed", "reason"), "LimitReached");
    ASSERT_CONTAINS(cond_field(&o, "Failed", "message"), "maxTokens: used 1686 of 1500");
    ASSERT_EQ_STR(cond_field(&o, "Ready", "reason"), "LimitReached");
    ASSERT_EQ_STR(cond_status(&o, "BudgetExhausted"), "True");
    ASSERT_CONTAINS(cond_field(&o, "BudgetExhausted", "message"), "maxTokens: used 1686");
    const cJSON *f = json_get(o.status, "failure");
    ASSERT_EQ_STR(json_get(f, "limit")->valuestring, "maxTokens");
    ASSERT_TRUE(cJSON_IsTrue(json_get(f, "blocked")));
    /* the message is not journaled (it would not be processed) */
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "LimitReached"), 1);
    ASSERT_CONTAINS(find(&o, RA_EVENT, "LimitReached")->note, "used 1686 of 1500");
    ASSERT_EQ_STR(o.signals.ended_reason, "LimitReached");
    /* steady: no second Warning */
    struct reconcile_input again = in;
    again.status = o.status;
    struct reconcile_output o2;
    reconcile_decide(&again, &o2);
    ASSERT_EQ_INT(count(&o2, RA_EVENT, NULL), 0);
    ASSERT_NULL(o2.signals.ended_reason);
    /* kubectl tern retry is refused while the limit holds, and says why */
    again.ann_retry = "2";
    reconcile_output_done(&o2);
    reconcile_decide(&again, &o2);
    ASSERT_EQ_INT(count(&o2, RA_JOURNAL_APPEND, NULL), 0);
    ASSERT_CONTAINS(find(&o2, RA_EVENT, "RetryRejected")->note,
                    "raise spec.limits.maxTokens above 1686");
    ASSERT_EQ_STR(find(&o2, RA_REMOVE_ANNOTATIONS, NULL)->keys[0], RECONCILE_ANN_RETRY);
    reconcile_output_done(&o2);
    reconcile_output_done(&o);
    session_spec_free(s);

    /* the limit raised: the message is journaled and a turn follows */
    s = spec_from(SESSION_YAML("  limits: {maxTokens: 3000}\n  messages: [please go on]\n"));
    in.spec = s;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "user_message"), 1);
    ASSERT_TRUE(strcmp(o.phase, "Failed") != 0);
    reconcile_output_done(&o);
    session_spec_free(s);

    /* raised without a message: a retry event continues the turn */
    s = spec_from(SESSION_YAML("  limits: {maxTokens: 3000}\n"));
    in.spec = s;
    reconcile_decide(&in, &o);
    const struct reconcile_action *r = find(&o, RA_JOURNAL_APPEND, "retry");
    ASSERT_NOT_NULL(r);
    ASSERT_EQ_STR(r->key, "retry/2/limit");
    ASSERT_EQ_STR(json_get(r->data, "reason")->valuestring, "LimitRaised");
    ASSERT_EQ_STR(json_get(r->data, "limit")->valuestring, "maxTokens");
    ASSERT_CONTAINS(find(&o, RA_EVENT, "Retrying")->note, "spec.limits.maxTokens is now 3000");
    ASSERT_TRUE(strcmp(o.phase, "Failed") != 0);
    reconcile_output_done(&o);
    /* next pass: the retry is an intent -> a new turn */
    in.journal.intent_pending = true;
    in.journal.last_seq = 21;
    char hash[17];
    ready_sandbox(&in, s, hash);
    in.refs_checked = true;
    reconcile_decide(&in, &o);
    const struct reconcile_action *job = find(&o, RA_CREATE, "batch/v1/jobs");
    ASSERT_NOT_NULL(job);
    ASSERT_EQ_STR(json_get(json_get(job->object, "metadata"), "name")->valuestring, "s1-t3");
    ASSERT_EQ_STR(o.phase, "Running");
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(a_transient_failure_continues_with_a_message_or_a_retry)
{
    struct session_spec *s = spec_from(SESSION_YAML("  messages: [try again]\n"));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){
        .last_seq = 9, .turn = 1, .messages = 1, .outcome = "error", .reason = "JobFailed",
        .message = "turn Job s1-t1 failed (BackoffLimitExceeded); the last attempt exited 75: "
                   "ModelUnreachable: model: Couldn't connect to server",
        .updated_at = in.now - 100, .good_seq = 8};
    in.job = (struct observed_job){.exists = true, .turn = 1, .failed = true,
                                   .failed_reason = "BackoffLimitExceeded"};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    const struct reconcile_action *m = find(&o, RA_JOURNAL_APPEND, "user_message");
    ASSERT_NOT_NULL(m);
    ASSERT_EQ_STR(m->key, "message/0");
    ASSERT_TRUE(strcmp(o.phase, "Failed") != 0);
    reconcile_output_done(&o);
    session_spec_free(s);

    /* no message: kubectl tern retry */
    s = spec_from(SESSION_YAML(""));
    in.spec = s;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Failed");
    ASSERT_EQ_STR(o.reason, "JobFailed");
    ASSERT_CONTAINS(status_str(&o, "message"), "Couldn't connect to server");
    ASSERT_CONTAINS(status_str(&o, "message"), "kubectl tern retry");
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    reconcile_output_done(&o);
    in.ann_retry = "1";
    in.ann_decided_by = "alice";
    reconcile_decide(&in, &o);
    const struct reconcile_action *r = find(&o, RA_JOURNAL_APPEND, "retry");
    ASSERT_NOT_NULL(r);
    ASSERT_EQ_STR(r->key, "retry/1/retry");
    ASSERT_EQ_STR(json_get(r->data, "by")->valuestring, "alice");
    ASSERT_EQ_STR(json_get(r->data, "after")->valuestring, "JobFailed");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "Retrying"), 1);
    const struct reconcile_action *rm = find(&o, RA_REMOVE_ANNOTATIONS, NULL);
    ASSERT_EQ_STR(rm->keys[0], RECONCILE_ANN_RETRY);
    ASSERT_EQ_STR(rm->keys[1], RECONCILE_ANN_DECIDED_BY);
    reconcile_output_done(&o);

    /* retry on a session that did not fail: refused */
    in.journal.outcome = "completed";
    in.ann_decided_by = NULL;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    ASSERT_CONTAINS(find(&o, RA_EVENT, "RetryRejected")->note, "nothing failed");
    ASSERT_EQ_INT(count(&o, RA_REMOVE_ANNOTATIONS, NULL), 1);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(a_runner_that_fails_before_its_turn_starts_fails_the_session)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    /* turn 1's Job failed fast (exit 78) before journaling turn_started */
    in.journal = (struct observed_journal){.last_seq = 1, .turn = 0, .messages = 1,
                                           .intent_pending = true, .updated_at = in.now - 20};
    in.job = (struct observed_job){.exists = true, .turn = 1, .failed = true,
                                   .failed_reason = "PodFailurePolicy",
                                   .failed_message = "Container runner failed with exit code 78",
                                   .failed_pods = 1, .last_exit_code = 78,
                                   .last_message = "ConfigError: TERN_ETCD_ENDPOINTS: bad URL"};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    const struct reconcile_action *a = find(&o, RA_JOURNAL_APPEND, "turn_finished");
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_INT(a->turn, 1);
    ASSERT_EQ_STR(a->key, "turn/1/job-ended");
    ASSERT_EQ_STR(json_get(a->data, "reason")->valuestring, "RunnerConfigError");
    ASSERT_CONTAINS(json_get(a->data, "message")->valuestring, "before its turn started");
    ASSERT_CONTAINS(json_get(a->data, "message")->valuestring,
                    "exited 78: ConfigError: TERN_ETCD_ENDPOINTS: bad URL");
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    reconcile_output_done(&o);

    /* and so for a later turn whose Job never started it */
    in.journal = (struct observed_journal){.last_seq = 9, .turn = 2, .messages = 2,
                                           .outcome = "completed", .intent_pending = true,
                                           .updated_at = in.now - 20};
    in.job.turn = 3;
    reconcile_decide(&in, &o);
    a = find(&o, RA_JOURNAL_APPEND, "turn_finished");
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_INT(a->turn, 3);
    reconcile_output_done(&o);
    /* an older Job of a finished turn is not */
    in.job.turn = 1;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "turn_finished"), 0);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(a_job_past_its_deadline_reached_timeout_seconds)
{
    struct session_spec *s = spec_from(SESSION_YAML("  limits: {timeoutSeconds: 20}\n"));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 6, .turn = 1, .messages = 1,
                                           .updated_at = in.now - 20};
    in.job = (struct observed_job){.exists = true, .turn = 1, .failed = true,
                                   .failed_reason = "DeadlineExceeded"};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    const struct reconcile_action *a = find(&o, RA_JOURNAL_APPEND, "turn_finished");
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_STR(json_get(a->data, "outcome")->valuestring, "limit_reached");
    ASSERT_EQ_STR(json_get(a->data, "limit")->valuestring, "timeoutSeconds");
    ASSERT_CONTAINS(json_get(a->data, "message")->valuestring, "past the session's 20 s");
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(failing_attempts_block_the_session_with_the_runners_words)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 4, .turn = 1, .messages = 1,
                                           .updated_at = in.now - 30};
    char hash[17];
    ready_sandbox(&in, s, hash);
    in.job = (struct observed_job){
        .exists = true, .turn = 1, .failed_pods = 2, .last_exit_code = 75,
        .last_message = "ModelUnreachable: model http://127.0.0.1:9/v1: Couldn't connect to server",
        .last_failed_at = in.now - 2};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Blocked");
    ASSERT_EQ_STR(status_str(&o, "reason"), "ModelUnreachable");
    ASSERT_CONTAINS(status_str(&o, "message"), "attempt 2 of 5 failed (exit 75)");
    ASSERT_CONTAINS(status_str(&o, "message"), "Couldn't connect to server");
    ASSERT_EQ_STR(cond_field(&o, "TurnRunning", "reason"), "Retrying");
    ASSERT_EQ_STR(cond_field(&o, "Ready", "reason"), "ModelUnreachable");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "ModelUnreachable"), 1);
    ASSERT_EQ_STR(o.signals.model_error, "unreachable");
    /* steady: no second Warning for the same attempt */
    struct reconcile_input again = in;
    again.status = o.status;
    struct reconcile_output o2;
    reconcile_decide(&again, &o2);
    ASSERT_EQ_INT(count(&o2, RA_EVENT, NULL), 0);
    ASSERT_NULL(o2.signals.model_error);
    reconcile_output_done(&o2);
    /* the next attempt journals again: running */
    again.journal.updated_at = in.now;
    again.now = in.now + 1;
    reconcile_decide(&again, &o2);
    ASSERT_EQ_STR(o2.phase, "Running");
    ASSERT_EQ_STR(status_str(&o2, "reason"), "(absent)");
    reconcile_output_done(&o2);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(missing_references_block_before_children_are_created)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 1, .messages = 1, .intent_pending = true,
                                           .updated_at = in.now};
    char hash[17];
    ready_sandbox(&in, s, hash);
    struct reconcile_output o;
    /* first without the check: the decision asks for it */
    reconcile_decide(&in, &o);
    ASSERT_TRUE(o.wants_refs);
    reconcile_output_done(&o);
    in.refs_checked = true;
    in.runner_refs = (struct observed_blocker){
        "SecretNotFound", "Secret \"openai\" (spec.model.apiKeySecretRef) not found in "
                          "namespace ns"};
    reconcile_decide(&in, &o);
    ASSERT_FALSE(o.wants_refs);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    ASSERT_EQ_STR(o.phase, "Blocked");
    ASSERT_EQ_STR(status_str(&o, "reason"), "SecretNotFound");
    ASSERT_CONTAINS(status_str(&o, "message"), "Secret \"openai\"");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "SecretNotFound"), 1);
    ASSERT_EQ_INT(o.requeue_after, 10); /* the Secret is not watched */
    ASSERT_EQ_STR(cond_status(&o, "Ready"), "False");
    /* while the sandbox starts (nothing to create), the reference is
     * looked at again, so the session stays Blocked instead of flapping */
    struct reconcile_input later = in;
    later.status = o.status;
    later.refs_checked = false;
    later.runner_refs = (struct observed_blocker){0};
    later.pod.ready = false;
    struct reconcile_output o3;
    reconcile_decide(&later, &o3);
    ASSERT_TRUE(o3.wants_refs);
    reconcile_output_done(&o3);
    reconcile_output_done(&o);

    /* a missing ConfigMap: the sandbox pod is not created */
    in.runner_refs = (struct observed_blocker){0};
    in.pod = (struct observed_pod){0};
    in.sandbox_refs = (struct observed_blocker){
        "ConfigMapNotFound", "ConfigMap \"pr-42\" (spec.context.files[0]) not found"};
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 0);
    ASSERT_EQ_STR(o.phase, "Blocked");
    ASSERT_EQ_STR(cond_field(&o, "SandboxReady", "reason"), "ConfigMapNotFound");
    reconcile_output_done(&o);
    /* created meanwhile: on */
    in.sandbox_refs = (struct observed_blocker){0};
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 1);
    ASSERT_TRUE(strcmp(o.phase, "Blocked") != 0);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(pod_waiting_reasons_and_unschedulable_are_told)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 1, .messages = 1, .intent_pending = true,
                                           .updated_at = in.now};
    char hash[17];
    static const struct {
        const char *reason, *message, *unsched, *want;
    } cases[] = {
        {"CreateContainerConfigError", "secret \"x\" not found", NULL, "CreateContainerConfigError"},
        {"ImagePullBackOff", "Back-off pulling image \"bad\"", NULL, "ImagePullBackOff"},
        {"ErrImagePull", "manifest unknown", NULL, "ErrImagePull"},
        {"InvalidImageName", "couldn't parse image name", NULL, "InvalidImageName"},
        {"CrashLoopBackOff", "back-off 10s", NULL, "CrashLoopBackOff"},
        {NULL, NULL, "0/1 nodes are available: 1 Insufficient cpu.", "Unschedulable"},
        {"ContainerCreating", NULL, NULL, NULL}, /* waits normally */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        in.pod = (struct observed_pod){.exists = true, .phase = "Pending",
                                       .sandbox_hash = children_sandbox_hash(s, &cfg, hash),
                                       .waiting_reason = cases[i].reason,
                                       .waiting_message = cases[i].message,
                                       .unschedulable = cases[i].unsched};
        struct reconcile_output o;
        reconcile_decide(&in, &o);
        if (cases[i].want) {
            ASSERT_EQ_STR(o.phase, "Blocked");
            ASSERT_EQ_STR(status_str(&o, "reason"), cases[i].want);
            ASSERT_CONTAINS(status_str(&o, "message"), "sandbox pod s1-sandbox");
            ASSERT_CONTAINS(status_str(&o, "message"),
                            cases[i].message ? cases[i].message : cases[i].unsched);
            ASSERT_EQ_INT(count(&o, RA_EVENT, cases[i].want), 1);
            ASSERT_EQ_STR(cond_field(&o, "SandboxReady", "reason"), cases[i].want);
        } else {
            ASSERT_EQ_STR(o.phase, "Provisioning");
        }
        reconcile_output_done(&o);
    }
    /* the runner pod of an active turn */
    ready_sandbox(&in, s, hash);
    in.job = (struct observed_job){.exists = true, .turn = 1,
                                   .pod_waiting_reason = "CreateContainerConfigError",
                                   .pod_waiting_message = "secret \"openai\" not found"};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Blocked");
    ASSERT_CONTAINS(status_str(&o, "message"), "turn 1's runner pod: CreateContainerConfigError");
    reconcile_output_done(&o);
    session_spec_free(s);
}

/* A real scheduler says Unschedulable while a claim is being provisioned
 * and bound; that is no block until it has lasted the grace period. */
TEST(a_young_unschedulable_pod_is_not_blocked_yet)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 1, .messages = 1, .intent_pending = true,
                                           .updated_at = in.now};
    char hash[17];
    in.pod = (struct observed_pod){
        .exists = true,
        .phase = "Pending",
        .sandbox_hash = children_sandbox_hash(s, &cfg, hash),
        .unschedulable = "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
        .unschedulable_since = in.now - 5};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Provisioning");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "Unschedulable"), 0);
    ASSERT_TRUE(o.requeue_after > 0 && o.requeue_after <= RECONCILE_UNSCHEDULABLE_GRACE - 5);
    reconcile_output_done(&o);
    in.pod.unschedulable_since = in.now - RECONCILE_UNSCHEDULABLE_GRACE;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Blocked");
    ASSERT_EQ_STR(status_str(&o, "reason"), "Unschedulable");
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(fork_into_a_taken_name_is_refused)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 12, .turn = 1, .messages = 1,
                                           .outcome = "completed", .updated_at = in.now};
    in.job = (struct observed_job){.exists = true, .turn = 1, .complete = true};
    in.ann_fork = "other";
    in.fork_target_exists = true;
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "tern.dev/v1alpha1/agentsessions"), 0);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    ASSERT_CONTAINS(find(&o, RA_EVENT, "ForkRejected")->note, "agentsession other already exists");
    ASSERT_EQ_STR(cond_status(&o, "ForkRejected"), "True");
    ASSERT_EQ_STR(cond_field(&o, "ForkRejected", "reason"), "NameInUse");
    ASSERT_EQ_STR(find(&o, RA_REMOVE_ANNOTATIONS, NULL)->keys[0], RECONCILE_ANN_FORK);
    ASSERT_NULL(json_get(o.status, "forks"));
    /* a later fork that works clears the condition */
    in.status = o.status;
    in.ann_fork = "fresh";
    in.fork_target_exists = false;
    struct reconcile_output o2;
    reconcile_decide(&in, &o2);
    ASSERT_EQ_INT(count(&o2, RA_CREATE, "tern.dev/v1alpha1/agentsessions"), 1);
    ASSERT_EQ_STR(cond_status(&o2, "ForkRejected"), "False");
    reconcile_output_done(&o2);
    /* our own child from an interrupted fork is taken as is */
    in.ann_fork = "mine";
    in.fork_target_exists = true;
    in.fork_target_ours = true;
    reconcile_decide(&in, &o2);
    ASSERT_EQ_INT(count(&o2, RA_CREATE, "tern.dev/v1alpha1/agentsessions"), 1);
    ASSERT_EQ_INT(count(&o2, RA_EVENT, "ForkRejected"), 0);
    reconcile_output_done(&o2);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(fork_while_an_approval_waits_and_of_a_failed_session)
{
    struct session_spec *s =
        spec_from(SESSION_YAML("  approval: {timeoutSeconds: 3600, onTimeout: Deny}\n"));
    struct reconcile_input in = base_input(s);
    waiting_for(&in, "ap-1");
    in.ann_fork = "alt";
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    const struct reconcile_action *c = find(&o, RA_CREATE, "tern.dev/v1alpha1/agentsessions");
    ASSERT_NOT_NULL(c);
    int64_t at = 0;
    ASSERT_OK(json_get_int64(json_get(json_get(c->object, "spec"), "forkFrom"), "", "atSeq",
                             JSON_REQUIRED, &at, NULL));
    ASSERT_EQ_INT(at, 9);
    ASSERT_EQ_STR(o.phase, "WaitingForApproval");
    ASSERT_TRUE(o.requeue_after > 0); /* the timeout still counts */
    reconcile_output_done(&o);
    session_spec_free(s);

    /* a failed session forks at its last good point */
    s = spec_from(SESSION_YAML("  limits: {maxTokens: 1500}\n"));
    in = base_input(s);
    at_token_limit(&in);
    in.ann_fork = "alt";
    reconcile_decide(&in, &o);
    c = find(&o, RA_CREATE, "tern.dev/v1alpha1/agentsessions");
    ASSERT_NOT_NULL(c);
    ASSERT_OK(json_get_int64(json_get(json_get(c->object, "spec"), "forkFrom"), "", "atSeq",
                             JSON_REQUIRED, &at, NULL));
    ASSERT_EQ_INT(at, 18);
    ASSERT_CONTAINS(find(&o, RA_EVENT, "ForkCreated")->note, "last good point");
    reconcile_output_done(&o);
    /* the failed parent serves its workspace while the fork copies it */
    in.ann_fork = NULL;
    in.forks_copying = 1;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 1);
    ASSERT_EQ_STR(o.phase, "Failed");
    reconcile_output_done(&o);
    char hash[17];
    ready_sandbox(&in, s, hash);
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 0);
    ASSERT_TRUE(cJSON_IsTrue(json_get(json_get(o.status, "sandbox"), "ready")));
    reconcile_output_done(&o);
    in.forks_copying = 0; /* copied: the ended session's pod goes */
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(suspending_a_finished_session_keeps_it_completed)
{
    struct session_spec *s = spec_from(SESSION_YAML("  suspend: true\n"));
    struct reconcile_input in = base_input(s);
    in.journal = (struct observed_journal){.last_seq = 12, .turn = 1, .messages = 1,
                                           .outcome = "completed", .updated_at = in.now,
                                           .result_summary = "it works"};
    in.job = (struct observed_job){.exists = true, .turn = 1, .complete = true};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Succeeded");
    ASSERT_EQ_STR(cond_status(&o, "Completed"), "True");
    reconcile_output_done(&o);
    /* suspended with a message waiting: Suspended, not Completed */
    in.journal.intent_pending = true;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Suspended");
    ASSERT_EQ_STR(cond_status(&o, "Completed"), "False");
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(a_cost_limit_needs_a_price)
{
    struct session_spec *s =
        spec_from(SESSION_YAML("  limits: {maxCostMicroUSD: 1}\n  model: {name: mystery-1}\n"));
    struct reconcile_input in = base_input(s);
    in.price_table = "ConfigMap tern-system/tern-prices";
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Failed");
    ASSERT_EQ_STR(o.reason, "InvalidSpec");
    ASSERT_CONTAINS(status_str(&o, "message"),
                    "model \"mystery-1\" has no price in the price table (ConfigMap "
                    "tern-system/tern-prices)");
    ASSERT_EQ_INT(count(&o, RA_CREATE, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "InvalidSpec"), 1);
    reconcile_output_done(&o);
    in.price_table = NULL;
    reconcile_decide(&in, &o);
    ASSERT_CONTAINS(status_str(&o, "message"), "no price table");
    reconcile_output_done(&o);
    /* priced: the Job carries it */
    in.price_table = "ConfigMap tern-system/tern-prices";
    in.price_json = "{\"prices\":{\"mystery-1\":{\"input\":1,\"output\":2}}}";
    in.journal = (struct observed_journal){.last_seq = 1, .messages = 1, .intent_pending = true,
                                           .updated_at = in.now};
    char hash[17];
    ready_sandbox(&in, s, hash);
    in.refs_checked = true;
    reconcile_decide(&in, &o);
    const struct reconcile_action *job = find(&o, RA_CREATE, "batch/v1/jobs");
    ASSERT_NOT_NULL(job);
    char *txt = json_print(job->object);
    ASSERT_CONTAINS(txt, "TERN_PRICES_FILE");
    free(txt);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(signals_for_metrics)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.created_at = (double)in.now - 30;
    in.journal = (struct observed_journal){.last_seq = 4, .turn = 1, .messages = 1,
                                           .updated_at = in.now,
                                           .first_request = "2026-11-30T00:00:00Z",
                                           .first_request_at = (double)in.now - 26.5};
    in.job = (struct observed_job){.exists = true, .turn = 1};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_TRUE(o.signals.first_request_latency > 3.4 && o.signals.first_request_latency < 3.6);
    ASSERT_EQ_STR(status_str(&o, "firstModelRequestTime"), "2026-11-30T00:00:00Z");
    struct reconcile_input again = in;
    again.status = o.status;
    struct reconcile_output o2;
    reconcile_decide(&again, &o2);
    ASSERT_TRUE(o2.signals.first_request_latency < 0); /* once */
    reconcile_output_done(&o2);
    reconcile_output_done(&o);
    /* an approval decided after 10 s */
    waiting_for(&in, "ap-1");
    in.ann_approve = "ap-1";
    reconcile_decide(&in, &o);
    ASSERT_TRUE(o.signals.approval_wait > 9.9 && o.signals.approval_wait < 10.1);
    reconcile_output_done(&o);
    session_spec_free(s);
}

/* ---- team budgets (AgentBudget) ---------------------------------------------- */

static void parked_by_budget(struct reconcile_input *in)
{
    in->journal = (struct observed_journal){
        .last_seq = 12, .turn = 2, .messages = 1, .outcome = JOURNAL_OUTCOME_BUDGET,
        .updated_at = in->now - 5, .reason = "team-daily",
        .message = "AgentBudget team-daily: tokens per Day in window 2026-12-01 (UTC): ...",
        .limit = "tokens", .limit_used = 1200, .limit_max = 10000, .good_seq = 12};
    in->job = (struct observed_job){.exists = true, .turn = 2, .complete = true};
}

TEST(a_session_parked_by_a_budget_waits_without_pod_or_job)
{
    struct session_spec *s = spec_from(SESSION_YAML("  messages: [one more thing]\n"));
    struct reconcile_input in = base_input(s);
    char hash[17];
    ready_sandbox(&in, s, hash);
    in.refs_checked = true;
    parked_by_budget(&in);
    struct observed_budgets tb = {
        .exhausted_reason = "Tokens",
        .exhausted_message = "AgentBudget team-daily: tokens per Day in window 2026-12-01 (UTC): "
                             "9500 used + 0 reserved, the next call needs up to 1200 of 10000",
        .retry_after = 7200};
    in.budgets = &tb;
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Queued");
    ASSERT_EQ_STR(o.reason, "BudgetExhausted");
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1); /* parked: no pod */
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 0);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0); /* the message waits too */
    ASSERT_EQ_STR(cond_status(&o, "BudgetExhausted"), "True");
    ASSERT_EQ_STR(cond_field(&o, "BudgetExhausted", "reason"), "Tokens");
    ASSERT_CONTAINS(cond_field(&o, "BudgetExhausted", "message"), "AgentBudget team-daily");
    ASSERT_CONTAINS(cond_field(&o, "BudgetExhausted", "message"), "window 2026-12-01");
    ASSERT_EQ_STR(cond_field(&o, "Ready", "reason"), "BudgetExhausted");
    ASSERT_CONTAINS(status_str(&o, "message"), "1 message of spec.messages waits");
    const cJSON *q = json_get(o.status, "queue");
    ASSERT_EQ_STR(json_get(q, "budget")->valuestring, "team-daily");
    ASSERT_EQ_STR(json_get(q, "reason")->valuestring, "Tokens");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "BudgetExhausted"), 1);
    ASSERT_EQ_STR(o.signals.budget, "team-daily");
    ASSERT_EQ_STR(o.signals.budget_reason, "Tokens");
    ASSERT_CMP_INT(o.requeue_after, <=, 30);
    ASSERT_CMP_INT(o.requeue_after, >, 0);
    ASSERT_FALSE(o.wants_admission);
    /* steady: told once */
    struct reconcile_input again = in;
    again.status = o.status;
    again.pod = (struct observed_pod){0};
    struct reconcile_output o2;
    reconcile_decide(&again, &o2);
    ASSERT_EQ_STR(o2.phase, "Queued");
    ASSERT_EQ_INT(count(&o2, RA_EVENT, NULL), 0);
    ASSERT_NULL(o2.signals.budget);
    ASSERT_EQ_INT(count(&o2, RA_CREATE, "v1/pods"), 0);
    reconcile_output_done(&o2);

    /* the window rolled over or the limit was raised: the waiting message
     * continues it */
    tb.resumable = true;
    reconcile_decide(&again, &o2);
    ASSERT_EQ_INT(count(&o2, RA_JOURNAL_APPEND, "user_message"), 1);
    ASSERT_EQ_INT(count(&o2, RA_JOURNAL_APPEND, "retry"), 0);
    reconcile_output_done(&o2);
    /* without a message it goes on by itself */
    struct session_spec *s2 = spec_from(SESSION_YAML(""));
    again.spec = s2;
    reconcile_decide(&again, &o2);
    const struct reconcile_action *r = find(&o2, RA_JOURNAL_APPEND, "retry");
    ASSERT_NOT_NULL(r);
    ASSERT_EQ_STR(r->key, "retry/2/budget");
    ASSERT_EQ_STR(json_get(r->data, "reason")->valuestring, "BudgetAvailable");
    ASSERT_EQ_STR(json_get(r->data, "budget")->valuestring, "team-daily");
    ASSERT_CONTAINS(find(&o2, RA_EVENT, "Retrying")->note, "AgentBudget team-daily has room");
    ASSERT_TRUE(strcmp(o2.phase, "Queued") != 0);
    reconcile_output_done(&o2);
    /* the budget was deleted (none applies now): the same */
    again.budgets = NULL;
    reconcile_decide(&again, &o2);
    ASSERT_NOT_NULL(find(&o2, RA_JOURNAL_APPEND, "retry"));
    reconcile_output_done(&o2);
    reconcile_output_done(&o);
    session_spec_free(s);
    session_spec_free(s2);
}

static int64_t int_at(const cJSON *o, const char *k)
{
    int64_t v = -1;
    json_item_int64(json_get(o, k), &v);
    return v;
}

TEST(a_concurrency_cap_queues_a_new_sandbox)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    in.refs_checked = true;
    in.journal = (struct observed_journal){.last_seq = 1, .messages = 1, .intent_pending = true,
                                           .updated_at = in.now};
    struct observed_budgets tb = {0};
    in.budgets = &tb;
    struct reconcile_output o;
    /* first pass: it would create the sandbox, so the shell must ask */
    reconcile_decide(&in, &o);
    ASSERT_TRUE(o.wants_admission);
    reconcile_output_done(&o);
    /* held back: no pod, Queued with its place in line */
    tb = (struct observed_budgets){
        .checked = true, .queue_budget = "team-cap", .queue_reason = "ConcurrentSessions",
        .queue_message = "AgentBudget team-cap: concurrentSessions: 3 of 3; position 2 of 4 in "
                         "line (in order of creation)",
        .position = 2, .waiting = 4};
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Queued");
    ASSERT_EQ_STR(o.reason, "ConcurrencyLimit");
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 0);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "batch/v1/jobs"), 0);
    const cJSON *q = json_get(o.status, "queue");
    ASSERT_EQ_STR(json_get(q, "budget")->valuestring, "team-cap");
    ASSERT_EQ_INT(int_at(q, "position"), 2);
    ASSERT_EQ_INT(int_at(q, "waiting"), 4);
    ASSERT_EQ_STR(cond_field(&o, "Ready", "reason"), "ConcurrencyLimit");
    ASSERT_CONTAINS(cond_field(&o, "Ready", "message"), "position 2 of 4");
    ASSERT_EQ_STR(cond_status(&o, "BudgetExhausted"), "False");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "Queued"), 1);
    ASSERT_EQ_STR(o.signals.budget_reason, "ConcurrentSessions");
    /* moving up the line is no new Event */
    struct reconcile_input again = in;
    again.status = o.status;
    struct observed_budgets tb2 = tb;
    tb2.position = 1;
    tb2.queue_message = "... position 1 of 3 ...";
    again.budgets = &tb2;
    struct reconcile_output o2;
    reconcile_decide(&again, &o2);
    ASSERT_EQ_INT(count(&o2, RA_EVENT, NULL), 0);
    ASSERT_EQ_INT(int_at(json_get(o2.status, "queue"), "position"), 1);
    reconcile_output_done(&o2);
    /* admitted: the sandbox pod is created */
    tb2 = (struct observed_budgets){.checked = true, .admitted = true};
    reconcile_decide(&again, &o2);
    ASSERT_EQ_INT(count(&o2, RA_CREATE, "v1/pods"), 1);
    ASSERT_TRUE(strcmp(o2.phase, "Queued") != 0);
    ASSERT_NULL(json_get(o2.status, "queue"));
    reconcile_output_done(&o2);
    /* sessions started in the window used up: BudgetExhausted */
    tb2 = (struct observed_budgets){
        .checked = true, .queue_budget = "team-cap", .queue_reason = "SessionsStarted",
        .queue_message = "AgentBudget team-cap: sessionsStarted per Day ...", .position = 1,
        .waiting = 1, .retry_after = 5};
    reconcile_decide(&again, &o2);
    ASSERT_EQ_STR(o2.phase, "Queued");
    ASSERT_EQ_STR(o2.reason, "BudgetExhausted");
    ASSERT_EQ_STR(cond_field(&o2, "BudgetExhausted", "reason"), "SessionsStarted");
    ASSERT_EQ_INT(count(&o2, RA_EVENT, "BudgetExhausted"), 1); /* a new reason: told */
    ASSERT_EQ_INT(o2.requeue_after, 5);
    reconcile_output_done(&o2);
    reconcile_output_done(&o);
    /* no budget: no question asked */
    in.budgets = NULL;
    reconcile_decide(&in, &o);
    ASSERT_FALSE(o.wants_admission);
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 1);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(an_idle_sandbox_gives_its_slot_to_a_waiting_session)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    char hash[17];
    ready_sandbox(&in, s, hash);
    in.refs_checked = true;
    in.journal = (struct observed_journal){.last_seq = 6, .turn = 1, .messages = 1,
                                           .outcome = "completed", .result_summary = "done",
                                           .updated_at = in.now - 5};
    in.job = (struct observed_job){.exists = true, .turn = 1, .complete = true};
    struct observed_budgets tb = {0};
    in.budgets = &tb;
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 0); /* idle for 5 s of 600 */
    reconcile_output_done(&o);
    tb.others_waiting = true;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1);
    ASSERT_CONTAINS(find(&o, RA_EVENT, "SandboxParked")->note, "waits for a slot");
    ASSERT_EQ_STR(o.phase, "Succeeded");
    reconcile_output_done(&o);
    /* a running turn keeps it */
    in.job = (struct observed_job){.exists = true, .turn = 2};
    in.journal.intent_pending = true;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 0);
    reconcile_output_done(&o);
    session_spec_free(s);
}

TEST(validated_result_lands_in_status_result)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    cJSON *value = cJSON_Parse("{\"verdict\":\"flaky\",\"confidence\":0.8}");
    cJSON *ref = cJSON_Parse("{\"path\":\"output/result.json\",\"size\":20000,\"sha256\":"
                             "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}");
    in.journal = (struct observed_journal){.last_seq = 12, .turn = 1, .messages = 1,
                                           .outcome = "completed", .updated_at = in.now,
                                           .result_summary = "{...}", .result_value = value};
    in.job = (struct observed_job){.exists = true, .turn = 1, .complete = true};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    const cJSON *r = json_get(o.status, "result");
    ASSERT_TRUE(json_equal(json_get(r, "value"), value));
    ASSERT_NULL(json_get(r, "valueRef"));
    reconcile_output_done(&o);
    in.journal.result_value = NULL;
    in.journal.result_ref = ref;
    reconcile_decide(&in, &o);
    r = json_get(o.status, "result");
    ASSERT_NULL(json_get(r, "value"));
    ASSERT_EQ_STR(json_get(r, "valueRef")->valuestring, "output/result.json");
    int64_t size = 0;
    ASSERT_OK(json_item_int64(json_get(r, "valueSize"), &size));
    ASSERT_EQ_INT(size, 20000);
    ASSERT_CONTAINS(json_get(r, "valueSha256")->valuestring, "0123456789abcdef");
    reconcile_output_done(&o);
    cJSON_Delete(value);
    cJSON_Delete(ref);
    session_spec_free(s);
}

TEST(max_result_attempts_is_a_limit_like_the_others)
{
    struct session_spec *s = spec_from(SESSION_YAML(""));
    struct reconcile_input in = base_input(s);
    const char *msg = "maxResultAttempts: used 3 of 3; the last answer is not valid JSON: "
                      "invalid JSON at offset 0: unexpected character";
    in.journal = (struct observed_journal){
        .last_seq = 20, .turn = 1, .messages = 1, .outcome = "limit_reached",
        .updated_at = in.now - 5, .reason = "maxResultAttempts", .message = msg,
        .limit = "maxResultAttempts", .limit_used = 3, .limit_max = 3, .good_seq = 18};
    in.job = (struct observed_job){.exists = true, .turn = 1, .complete = true};
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_STR(o.phase, "Failed");
    ASSERT_EQ_STR(status_str(&o, "reason"), "LimitReached");
    ASSERT_CONTAINS(status_str(&o, "message"), "turn 1: maxResultAttempts: used 3 of 3; the last");
    ASSERT_CONTAINS(status_str(&o, "message"), "raise spec.limits.maxResultAttempts above 3");
    ASSERT_CONTAINS(find(&o, RA_EVENT, "LimitReached")->note, "maxResultAttempts: used 3 of 3");
    /* no retry of its own accord (the limit still holds) */
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    reconcile_output_done(&o);
    session_spec_free(s);
    /* raised: a retry continues */
    s = spec_from(SESSION_YAML("  limits: {maxResultAttempts: 5}\n"));
    in.spec = s;
    reconcile_decide(&in, &o);
    const struct reconcile_action *r = find(&o, RA_JOURNAL_APPEND, "retry");
    ASSERT_NOT_NULL(r);
    ASSERT_EQ_STR(json_get(r->data, "limit")->valuestring, "maxResultAttempts");
    reconcile_output_done(&o);
    session_spec_free(s);
}
