/* observe.c - children's status as reconcile_decide sees it. See observe.h. */
#include "controller/observe.h"

#include "controller/children.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *str_at(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(o, k);
    return cJSON_IsString(v) && *v->valuestring ? v->valuestring : NULL;
}

static const cJSON *cond(const cJSON *obj, const char *type)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, json_get(json_get(obj, "status"), "conditions"))
    {
        const char *t = str_at(c, "type");
        if (t && strcmp(t, type) == 0)
            return c;
    }
    return NULL;
}

static bool cond_is(const cJSON *obj, const char *type, const char *status)
{
    const char *s = str_at(cond(obj, type), "status");
    return s && strcmp(s, status) == 0;
}

double observe_time(const char *s)
{
    struct tm tm = {0};
    const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!end)
        return 0;
    double frac = 0, scale = 0.1;
    if (*end == '.')
        for (end++; *end >= '0' && *end <= '9'; end++, scale /= 10)
            frac += (*end - '0') * scale;
    return (double)timegm(&tm) + frac;
}

/* A container status's waiting {reason, message}, or the first one of the
 * pod's containers (init containers first). */
static void waiting_of(const cJSON *pod, const char **ret_reason, const char **ret_message)
{
    static const char *const lists[] = {"initContainerStatuses", "containerStatuses"};
    *ret_reason = *ret_message = NULL;
    for (int l = 0; l < 2; l++) {
        const cJSON *cs;
        cJSON_ArrayForEach(cs, json_get(json_get(pod, "status"), lists[l]))
        {
            const cJSON *w = json_get(json_get(cs, "state"), "waiting");
            const char *r = str_at(w, "reason");
            if (!r)
                continue;
            const char *m = str_at(w, "message");
            if (!m && strcmp(r, "CrashLoopBackOff") == 0)
                m = str_at(json_get(json_get(cs, "lastState"), "terminated"), "message");
            if (strcmp(r, "ContainerCreating") == 0 || strcmp(r, "PodInitializing") == 0) {
                if (!*ret_reason) { /* keep looking for a worse one */
                    *ret_reason = r;
                    *ret_message = m;
                }
                continue;
            }
            *ret_reason = r;
            *ret_message = m;
            return;
        }
    }
}

static int64_t unschedulable_since(const cJSON *pod)
{
    double t = observe_time(str_at(cond(pod, "PodScheduled"), "lastTransitionTime"));
    return t > 0 ? (int64_t)t : 0;
}

static const char *unschedulable_of(const cJSON *pod)
{
    const cJSON *c = cond(pod, "PodScheduled");
    const char *s = str_at(c, "status"), *r = str_at(c, "reason");
    if (s && strcmp(s, "False") == 0 && r && strcmp(r, "Unschedulable") == 0) {
        const char *m = str_at(c, "message");
        return m ? m : "Unschedulable";
    }
    return NULL;
}

void observe_pod(const cJSON *pod, struct observed_pod *o)
{
    memset(o, 0, sizeof *o);
    if (!pod)
        return;
    o->exists = true;
    o->deleting = json_get(json_get(pod, "metadata"), "deletionTimestamp") != NULL;
    o->phase = str_at(json_get(pod, "status"), "phase");
    o->ready = cond_is(pod, "Ready", "True");
    o->ip = str_at(json_get(pod, "status"), "podIP");
    o->sandbox_hash =
        str_at(json_get(json_get(pod, "metadata"), "annotations"), CHILDREN_ANN_SANDBOX_HASH);
    waiting_of(pod, &o->waiting_reason, &o->waiting_message);
    o->unschedulable = unschedulable_of(pod);
    o->unschedulable_since = o->unschedulable ? unschedulable_since(pod) : 0;
}

void observe_job(const cJSON *job, struct observed_job *o)
{
    memset(o, 0, sizeof *o);
    o->last_exit_code = -1;
    if (!job)
        return;
    o->exists = true;
    const cJSON *t = json_get(json_get(json_get(job, "metadata"), "labels"), CHILDREN_LABEL_TURN);
    if (json_item_int64(t, &o->turn) != 0)
        o->turn = 0;
    o->complete = cond_is(job, "Complete", "True");
    o->failed = cond_is(job, "Failed", "True");
    if (o->failed) {
        o->failed_reason = str_at(cond(job, "Failed"), "reason");
        o->failed_message = str_at(cond(job, "Failed"), "message");
    }
    json_get_int64(json_get(job, "status"), "status", "failed", JSON_OPTIONAL, &o->failed_pods,
                   NULL);
}

void observe_job_pod(const cJSON *pod, struct observed_job *o)
{
    const cJSON *cs;
    bool terminated = false;
    cJSON_ArrayForEach(cs, json_get(json_get(pod, "status"), "containerStatuses"))
    {
        const cJSON *t = json_get(json_get(cs, "state"), "terminated");
        int64_t code = 0;
        if (!t || json_get_int64(t, "terminated", "exitCode", JSON_OPTIONAL, &code, NULL) != 0)
            continue;
        terminated = true;
        if (code == 0)
            continue;
        double at = observe_time(str_at(t, "finishedAt"));
        if (o->last_exit_code < 0 || at >= (double)o->last_failed_at) {
            o->last_exit_code = (int)code;
            o->last_message = str_at(t, "message");
            if (!o->last_message)
                o->last_message = str_at(t, "reason");
            o->last_failed_at = (int64_t)at;
        }
    }
    const char *phase = str_at(json_get(pod, "status"), "phase");
    bool done = terminated || (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")));
    if (done || json_get(json_get(pod, "metadata"), "deletionTimestamp"))
        return;
    const char *r, *m;
    waiting_of(pod, &r, &m);
    if (r && strcmp(r, "ContainerCreating") != 0 && strcmp(r, "PodInitializing") != 0) {
        o->pod_waiting_reason = r;
        o->pod_waiting_message = m;
    }
    if (unschedulable_of(pod)) {
        o->pod_unschedulable = unschedulable_of(pod);
        o->pod_unschedulable_since = unschedulable_since(pod);
    }
}
