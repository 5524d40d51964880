/* Unit tests for devctl/jobctl: the Job controller's pure decision, driven
 * through a small simulated world (pods change phase when the test says). */
#include "harness.h"

#include "base/mem.h"
#include "devctl/jobctl.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <stdio.h>
#include <stdlib.h>

struct world {
    cJSON *job;
    cJSON *pods[64];
    size_t n;
    int seq;
    bool job_deleted;
    int64_t requeue;
    struct jobctl_cfg cfg;
};

static cJSON *parse(const char *s)
{
    cJSON *j;
    struct tern_err e;
    if (json_parse(s, strlen(s), &j, &e) != 0)
        th_fail(__FILE__, __LINE__, "bad json: %s", e.msg);
    return j;
}

static void world_init(struct world *w, const char *spec_extra)
{
    memset(w, 0, sizeof *w);
    w->cfg = (struct jobctl_cfg){10, 600};
    char *s = xasprintf("{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"t\","
                        "\"namespace\":\"ns\",\"uid\":\"job-uid\"},\"spec\":{%s%s\"template\":{"
                        "\"metadata\":{\"labels\":{\"app\":\"x\"}},\"spec\":{\"restartPolicy\":"
                        "\"Never\",\"containers\":[{\"name\":\"main\",\"command\":[\"true\"]}]}}}}",
                        spec_extra, *spec_extra ? "," : "");
    w->job = parse(s);
    free(s);
}

static void world_done(struct world *w)
{
    cJSON_Delete(w->job);
    for (size_t i = 0; i < w->n; i++)
        cJSON_Delete(w->pods[i]);
}

static cJSON *find_pod(struct world *w, const char *name)
{
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(kobj_str(w->pods[i], "metadata.name"), name) == 0)
            return w->pods[i];
    return NULL;
}

/* One reconcile; applies status and actions like the shell would. Returns
 * the number of pods created. */
static int step(struct world *w, int64_t now)
{
    struct jobctl_out o;
    struct tern_err e;
    ASSERT_OK(jobctl_reconcile(&w->cfg, w->job, (const cJSON *const *)w->pods, w->n, now, &o, &e));
    kobj_set_item(w->job, "status", o.status);
    o.status = NULL;
    w->requeue = o.requeue_after;
    int created = 0;
    for (size_t i = 0; i < o.nacts; i++) {
        struct jobctl_action *a = &o.acts[i];
        if (a->kind == JOBCTL_CREATE_POD) {
            char name[64], uid[64];
            snprintf(name, sizeof name, "%s%d", kobj_str(a->obj, "metadata.generateName"), ++w->seq);
            snprintf(uid, sizeof uid, "pod-uid-%d", w->seq);
            kobj_set_str(a->obj, "metadata.name", name);
            kobj_set_str(a->obj, "metadata.uid", uid);
            kobj_set_str(a->obj, "status.phase", "Pending");
            kobj_set_str(a->obj, "spec.nodeName", "tern-dev");
            ASSERT_CMP_INT(w->n, <, 64);
            w->pods[w->n++] = a->obj;
            a->obj = NULL;
            created++;
        } else if (a->kind == JOBCTL_UPDATE_POD) {
            const char *name = kobj_str(a->obj, "metadata.name");
            for (size_t k = 0; k < w->n; k++) {
                if (strcmp(kobj_str(w->pods[k], "metadata.name"), name) == 0) {
                    cJSON_Delete(w->pods[k]);
                    w->pods[k] = a->obj;
                    a->obj = NULL;
                    break;
                }
            }
            ASSERT_NULL(a->obj);
        } else if (a->kind == JOBCTL_DELETE_POD) {
            cJSON *p = find_pod(w, a->name);
            ASSERT_NOT_NULL(p);
            char ts[32];
            kobj_set_str(p, "metadata.deletionTimestamp", kobj_fmt_time(now + 30, ts));
            kobj_set_int(p, "metadata.deletionGracePeriodSeconds", 30);
        } else if (a->kind == JOBCTL_DELETE_JOB) {
            w->job_deleted = true;
        }
    }
    jobctl_out_done(&o);
    return created;
}

static void finish_pod(cJSON *p, int code, int64_t t)
{
    char ts[32];
    kobj_set_str(p, "status.phase", code == 0 ? "Succeeded" : "Failed");
    cJSON *cs = cJSON_CreateArray();
    cJSON *c = cJSON_CreateObject();
    json_add_string(c, "name", "main");
    cJSON *term = kobj_obj(c, "state.terminated");
    json_add_int64(term, "exitCode", code);
    json_add_string(term, "reason", code == 0 ? "Completed" : "Error");
    json_add_string(term, "finishedAt", kobj_fmt_time(t, ts));
    cJSON_AddItemToArray(cs, c);
    kobj_set_item(p, "status.containerStatuses", cs);
}

static cJSON *last_pod(struct world *w)
{
    ASSERT_CMP_INT(w->n, >, 0);
    return w->pods[w->n - 1];
}

static const char *cond_reason(struct world *w, const char *type)
{
    return kobj_str(kobj_cond(w->job, type), "reason");
}

TEST(pod_from_template_has_labels_owner_and_finalizer)
{
    struct world w;
    world_init(&w, "");
    ASSERT_EQ_INT(step(&w, 100), 1);
    cJSON *p = last_pod(&w);
    ASSERT_EQ_STR(kobj_label(p, "batch.kubernetes.io/job-name"), "t");
    ASSERT_EQ_STR(kobj_label(p, "batch.kubernetes.io/controller-uid"), "job-uid");
    ASSERT_EQ_STR(kobj_label(p, "job-name"), "t");
    ASSERT_EQ_STR(kobj_label(p, "controller-uid"), "job-uid");
    ASSERT_EQ_STR(kobj_label(p, "app"), "x");
    ASSERT_EQ_STR(kobj_str(p, "metadata.generateName"), "t-");
    ASSERT_EQ_STR(kobj_str(p, "metadata.namespace"), "ns");
    ASSERT_TRUE(kobj_has_finalizer(p, JOBCTL_TRACKING_FINALIZER));
    const cJSON *ref = kobj_controller_ref(p);
    ASSERT_NOT_NULL(ref);
    ASSERT_EQ_STR(kobj_str(ref, "uid"), "job-uid");
    ASSERT_EQ_STR(kobj_str(ref, "kind"), "Job");
    ASSERT_EQ_STR(kobj_str(ref, "apiVersion"), "batch/v1");
    ASSERT_TRUE(kobj_bool(ref, "blockOwnerDeletion", false));
    ASSERT_EQ_INT(kobj_int(w.job, "status.active", 0), 1);
    ASSERT_EQ_STR(kobj_str(w.job, "status.startTime"), "1970-01-01T00:01:40Z");
    /* a second reconcile does not create another pod */
    ASSERT_EQ_INT(step(&w, 101), 0);
    world_done(&w);
}

TEST(fails_twice_then_succeeds_with_backoff)
{
    struct world w;
    world_init(&w, "");
    ASSERT_EQ_INT(step(&w, 0), 1);
    finish_pod(last_pod(&w), 1, 1);
    ASSERT_EQ_INT(step(&w, 2), 0); /* recorded, finalizer released, backoff 10 s */
    ASSERT_FALSE(kobj_has_finalizer(last_pod(&w), JOBCTL_TRACKING_FINALIZER));
    ASSERT_EQ_INT(w.requeue, 9);
    ASSERT_EQ_INT(step(&w, 3), 0);
    ASSERT_EQ_INT(kobj_int(w.job, "status.failed", 0), 1);
    ASSERT_EQ_INT(step(&w, 10), 0);
    ASSERT_EQ_INT(step(&w, 11), 1);
    finish_pod(last_pod(&w), 75, 12);
    ASSERT_EQ_INT(step(&w, 13), 0);
    ASSERT_EQ_INT(step(&w, 31), 0); /* second backoff is 20 s after 12 */
    ASSERT_EQ_INT(w.requeue, 1);
    ASSERT_EQ_INT(kobj_int(w.job, "status.failed", 0), 2);
    ASSERT_EQ_INT(step(&w, 32), 1);
    finish_pod(last_pod(&w), 0, 33);
    step(&w, 34);
    ASSERT_TRUE(kobj_cond_true(w.job, "SuccessCriteriaMet"));
    ASSERT_FALSE(kobj_cond_true(w.job, "Complete")); /* still uncounted */
    step(&w, 35);
    ASSERT_TRUE(kobj_cond_true(w.job, "Complete"));
    ASSERT_FALSE(kobj_cond_true(w.job, "Failed"));
    ASSERT_EQ_INT(kobj_int(w.job, "status.failed", 0), 2);
    ASSERT_EQ_INT(kobj_int(w.job, "status.succeeded", 0), 1);
    ASSERT_EQ_INT(kobj_int(w.job, "status.active", 0), 0);
    ASSERT_EQ_STR(kobj_str(w.job, "status.completionTime"), "1970-01-01T00:00:35Z");
    ASSERT_NULL(kobj_at(w.job, "status.uncountedTerminatedPods.succeeded"));
    ASSERT_EQ_INT(step(&w, 100), 0);
    world_done(&w);
}

TEST(backoff_limit_exceeded_fails_the_job)
{
    struct world w;
    world_init(&w, "\"backoffLimit\":1");
    w.cfg.backoff_base_s = 0;
    ASSERT_EQ_INT(step(&w, 0), 1);
    finish_pod(last_pod(&w), 1, 1);
    ASSERT_EQ_INT(step(&w, 2), 1); /* failed=1 <= limit: replacement (no backoff) */
    finish_pod(last_pod(&w), 1, 3);
    ASSERT_EQ_INT(step(&w, 4), 0);
    ASSERT_EQ_STR(cond_reason(&w, "FailureTarget"), "BackoffLimitExceeded");
    step(&w, 5);
    ASSERT_TRUE(kobj_cond_true(w.job, "Failed"));
    ASSERT_EQ_STR(cond_reason(&w, "Failed"), "BackoffLimitExceeded");
    ASSERT_EQ_INT(kobj_int(w.job, "status.failed", 0), 2);
    ASSERT_FALSE(kobj_cond_true(w.job, "Complete"));
    ASSERT_NULL(kobj_at(w.job, "status.completionTime"));
    world_done(&w);
}

TEST(default_backoff_limit_is_six)
{
    struct world w;
    world_init(&w, "");
    w.cfg.backoff_base_s = 0;
    int64_t t = 0;
    for (int i = 0; i < 7; i++) {
        ASSERT_EQ_INT(step(&w, t++), 1);
        finish_pod(last_pod(&w), 2, t++);
    }
    step(&w, t++);
    step(&w, t++);
    ASSERT_EQ_STR(cond_reason(&w, "Failed"), "BackoffLimitExceeded");
    ASSERT_EQ_INT(kobj_int(w.job, "status.failed", 0), 7);
    world_done(&w);
}

TEST(active_deadline_kills_pods_and_fails)
{
    struct world w;
    world_init(&w, "\"activeDeadlineSeconds\":5");
    ASSERT_EQ_INT(step(&w, 100), 1);
    kobj_set_str(last_pod(&w), "status.phase", "Running");
    step(&w, 103);
    ASSERT_EQ_INT(w.requeue, 2);
    ASSERT_NULL(kobj_cond(w.job, "FailureTarget"));
    step(&w, 105);
    ASSERT_EQ_STR(cond_reason(&w, "FailureTarget"), "DeadlineExceeded");
    ASSERT_TRUE(kobj_deleting(last_pod(&w)));
    ASSERT_EQ_INT(kobj_int(w.job, "status.terminating", -1), 1);
    ASSERT_FALSE(kobj_cond_true(w.job, "Failed")); /* pod still terminating */
    finish_pod(last_pod(&w), 143, 106);
    step(&w, 107);
    step(&w, 108);
    ASSERT_EQ_STR(cond_reason(&w, "Failed"), "DeadlineExceeded");
    ASSERT_EQ_INT(step(&w, 200), 0);
    world_done(&w);
}

#define PFP                                                                                        \
    "\"podFailurePolicy\":{\"rules\":[{\"action\":\"FailJob\",\"onExitCodes\":{\"containerName\":"  \
    "\"main\",\"operator\":\"In\",\"values\":[78]}},{\"action\":\"Ignore\",\"onPodConditions\":"  \
    "[{\"type\":\"DisruptionTarget\"}]},{\"action\":\"Count\",\"onExitCodes\":{\"operator\":"      \
    "\"NotIn\",\"values\":[78]}}]}"

TEST(pod_failure_policy_failjob_on_exit_78)
{
    struct world w;
    world_init(&w, PFP ",\"backoffLimit\":3");
    w.cfg.backoff_base_s = 0;
    ASSERT_EQ_INT(step(&w, 0), 1);
    finish_pod(last_pod(&w), 75, 1); /* retryable: counted, replaced */
    ASSERT_EQ_INT(step(&w, 2), 1);
    finish_pod(last_pod(&w), 78, 3);
    ASSERT_EQ_INT(step(&w, 4), 0);
    ASSERT_EQ_STR(cond_reason(&w, "FailureTarget"), "PodFailurePolicy");
    ASSERT_CONTAINS(kobj_str(kobj_cond(w.job, "FailureTarget"), "message"),
                    "Container main for pod ns/t-2 failed with exit code 78 matching FailJob "
                    "rule at index 0");
    step(&w, 5);
    ASSERT_EQ_STR(cond_reason(&w, "Failed"), "PodFailurePolicy");
    ASSERT_EQ_INT(kobj_int(w.job, "status.failed", 0), 2);
    world_done(&w);
}

TEST(pod_failure_policy_ignore_does_not_count)
{
    struct world w;
    world_init(&w, PFP ",\"backoffLimit\":0");
    w.cfg.backoff_base_s = 0;
    ASSERT_EQ_INT(step(&w, 0), 1);
    cJSON *p = last_pod(&w);
    finish_pod(p, 137, 1);
    cJSON *conds = cJSON_CreateArray();
    cJSON *c = cJSON_CreateObject();
    json_add_string(c, "type", "DisruptionTarget");
    json_add_string(c, "status", "True");
    cJSON_AddItemToArray(conds, c);
    kobj_set_item(p, "status.conditions", conds);
    ASSERT_EQ_INT(step(&w, 2), 1); /* not counted: replaced despite backoffLimit 0 */
    ASSERT_EQ_INT(kobj_int(w.job, "status.failed", 0), 0);
    ASSERT_FALSE(kobj_has_finalizer(w.pods[0], JOBCTL_TRACKING_FINALIZER));
    ASSERT_NULL(kobj_cond(w.job, "FailureTarget"));
    world_done(&w);
}

TEST(failure_policy_matching_rules)
{
    struct world w;
    world_init(&w, PFP);
    cJSON *pod = jobctl_pod_from_template(w.job);
    finish_pod(pod, 0, 1);
    int rule;
    char msg[256];
    ASSERT_EQ_STR(jobctl_failure_policy(w.job, pod, &rule, msg), "Count"); /* 0 never matches */
    ASSERT_EQ_INT(rule, -1);
    finish_pod(pod, 78, 1);
    ASSERT_EQ_STR(jobctl_failure_policy(w.job, pod, &rule, msg), "FailJob");
    ASSERT_EQ_INT(rule, 0);
    kobj_set_str((cJSON *)cJSON_GetArrayItem(kobj_at(pod, "status.containerStatuses"), 0), "name",
                 "sidecar");
    ASSERT_EQ_STR(jobctl_failure_policy(w.job, pod, &rule, msg), "Count"); /* other container */
    ASSERT_EQ_INT(rule, -1);
    finish_pod(pod, 3, 1);
    ASSERT_EQ_STR(jobctl_failure_policy(w.job, pod, &rule, msg), "Count");
    ASSERT_EQ_INT(rule, 2);
    cJSON_Delete(pod);
    world_done(&w);
}

TEST(parallelism_and_completions)
{
    struct world w;
    world_init(&w, "\"completions\":3,\"parallelism\":2");
    ASSERT_EQ_INT(step(&w, 0), 2);
    ASSERT_EQ_INT(kobj_int(w.job, "status.active", 0), 2);
    finish_pod(w.pods[0], 0, 1);
    ASSERT_EQ_INT(step(&w, 2), 1); /* 1 succeeded, 1 active, 1 more wanted */
    finish_pod(w.pods[1], 0, 3);
    ASSERT_EQ_INT(step(&w, 4), 0); /* remaining 1 is active */
    finish_pod(w.pods[2], 0, 5);
    step(&w, 6);
    step(&w, 7);
    ASSERT_TRUE(kobj_cond_true(w.job, "Complete"));
    ASSERT_EQ_INT(kobj_int(w.job, "status.succeeded", 0), 3);
    world_done(&w);
}

TEST(work_queue_job_without_completions)
{
    struct world w;
    world_init(&w, "\"parallelism\":2");
    ASSERT_EQ_INT(step(&w, 0), 2);
    finish_pod(w.pods[0], 0, 1);
    ASSERT_EQ_INT(step(&w, 2), 0); /* after a success no new pods */
    ASSERT_FALSE(kobj_cond_true(w.job, "SuccessCriteriaMet"));
    finish_pod(w.pods[1], 0, 3);
    step(&w, 4);
    step(&w, 5);
    ASSERT_TRUE(kobj_cond_true(w.job, "Complete"));
    world_done(&w);
}

TEST(suspend_creates_nothing)
{
    struct world w;
    world_init(&w, "\"suspend\":true");
    ASSERT_EQ_INT(step(&w, 0), 0);
    ASSERT_NULL(kobj_str(w.job, "status.startTime"));
    world_done(&w);
}

TEST(ttl_after_finished_deletes_job)
{
    struct world w;
    world_init(&w, "\"ttlSecondsAfterFinished\":60");
    step(&w, 0);
    finish_pod(last_pod(&w), 0, 1);
    step(&w, 2);
    step(&w, 3);
    ASSERT_TRUE(kobj_cond_true(w.job, "Complete"));
    ASSERT_EQ_INT(w.requeue, 60);
    step(&w, 62);
    ASSERT_FALSE(w.job_deleted);
    step(&w, 63);
    ASSERT_TRUE(w.job_deleted);
    world_done(&w);
}

TEST(invalid_job_is_rejected)
{
    cJSON *j = parse("{\"metadata\":{\"name\":\"x\"}}");
    struct jobctl_cfg cfg = {10, 600};
    struct jobctl_out o;
    struct tern_err e;
    ASSERT_EQ_INT(jobctl_reconcile(&cfg, j, NULL, 0, 0, &o, &e), TERN_EINVALID);
    cJSON_Delete(j);
}
