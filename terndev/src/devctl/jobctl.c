/* jobctl.c - the Job controller's decision. See jobctl.h. */
#include "jobctl.h"

#include "base/mem.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_act(struct jobctl_out *o, enum jobctl_act kind, cJSON *obj, const char *name)
{
    o->acts = xreallocarray(o->acts, o->nacts + 1, sizeof *o->acts);
    o->acts[o->nacts++] = (struct jobctl_action){kind, obj, name};
}

void jobctl_out_done(struct jobctl_out *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->nacts; i++)
        cJSON_Delete(o->acts[i].obj);
    free(o->acts);
    cJSON_Delete(o->status);
    memset(o, 0, sizeof *o);
}

static void set_label(cJSON *pod, const char *k, const char *v)
{
    cJSON *labels = kobj_obj(pod, "metadata.labels");
    cJSON_DeleteItemFromObjectCaseSensitive(labels, k);
    json_add_string(labels, k, v);
}

cJSON *jobctl_pod_from_template(const cJSON *job)
{
    const char *name = kobj_str(job, "metadata.name"), *uid = kobj_str(job, "metadata.uid");
    const char *ns = kobj_str(job, "metadata.namespace");
    cJSON *pod = cJSON_CreateObject();
    json_add_string(pod, "apiVersion", "v1");
    json_add_string(pod, "kind", "Pod");
    cJSON *md = cJSON_AddObjectToObject(pod, "metadata");
    char gen[300];
    snprintf(gen, sizeof gen, "%s-", name ? name : "job");
    json_add_string(md, "generateName", gen);
    if (ns)
        json_add_string(md, "namespace", ns);
    const cJSON *tl = kobj_at(job, "spec.template.metadata.labels");
    if (cJSON_IsObject(tl))
        cJSON_AddItemToObject(md, "labels", json_dup(tl));
    const cJSON *ta = kobj_at(job, "spec.template.metadata.annotations");
    if (cJSON_IsObject(ta))
        cJSON_AddItemToObject(md, "annotations", json_dup(ta));
    set_label(pod, "batch.kubernetes.io/controller-uid", uid ? uid : "");
    set_label(pod, "batch.kubernetes.io/job-name", name ? name : "");
    set_label(pod, "controller-uid", uid ? uid : "");
    set_label(pod, "job-name", name ? name : "");
    cJSON *refs = cJSON_AddArrayToObject(md, "ownerReferences");
    cJSON *ref = kobj_owner_ref(job, true, true);
    if (!kobj_str(ref, "apiVersion")[0])
        kobj_set_str(ref, "apiVersion", "batch/v1");
    if (!kobj_str(ref, "kind")[0])
        kobj_set_str(ref, "kind", "Job");
    cJSON_AddItemToArray(refs, ref);
    kobj_add_finalizer(pod, JOBCTL_TRACKING_FINALIZER);
    const cJSON *spec = kobj_at(job, "spec.template.spec");
    cJSON_AddItemToObject(pod, "spec", spec ? json_dup(spec) : cJSON_CreateObject());
    return pod;
}

static bool phase_is(const cJSON *pod, const char *ph)
{
    const char *p = kobj_str(pod, "status.phase");
    return p && strcmp(p, ph) == 0;
}

/* A deleting pod that never reached a node (grace 0, no nodeName) will never
 * run again: it counts as failed. */
static bool pod_lost(const cJSON *pod)
{
    return kobj_deleting(pod) && !kobj_str(pod, "spec.nodeName") &&
           kobj_int(pod, "metadata.deletionGracePeriodSeconds", 0) == 0 &&
           !phase_is(pod, "Succeeded") && !phase_is(pod, "Failed");
}

static bool pod_terminal(const cJSON *pod)
{
    return phase_is(pod, "Succeeded") || phase_is(pod, "Failed") || pod_lost(pod);
}

static int64_t pod_finish_time(const cJSON *pod, int64_t def)
{
    int64_t best = -1;
    const char *lists[] = {"status.containerStatuses", "status.initContainerStatuses"};
    for (int l = 0; l < 2; l++) {
        const cJSON *cs;
        cJSON_ArrayForEach(cs, kobj_at(pod, lists[l]))
        {
            int64_t t = kobj_time(cs, "state.terminated.finishedAt", -1);
            if (t > best)
                best = t;
        }
    }
    if (best < 0)
        best = kobj_time(pod, "metadata.deletionTimestamp", -1);
    return best < 0 ? def : best;
}

static bool in_int_values(const cJSON *values, int64_t v)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, values)
    {
        int64_t x;
        if (json_item_int64(it, &x) == 0 && x == v)
            return true;
    }
    return false;
}

static bool rule_matches(const cJSON *rule, const cJSON *pod, char msg[256], int idx)
{
    const char *action = kobj_str(rule, "action");
    const cJSON *oec = kobj_at(rule, "onExitCodes");
    const char *ns = kobj_str(pod, "metadata.namespace"), *pn = kobj_str(pod, "metadata.name");
    if (oec) {
        const char *cname = kobj_str(oec, "containerName");
        const char *op = kobj_str(oec, "operator");
        const cJSON *vals = kobj_at(oec, "values");
        const char *lists[] = {"status.initContainerStatuses", "status.containerStatuses"};
        for (int l = 0; l < 2; l++) {
            const cJSON *cs;
            cJSON_ArrayForEach(cs, kobj_at(pod, lists[l]))
            {
                const char *n = kobj_str(cs, "name");
                if (cname && (!n || strcmp(n, cname) != 0))
                    continue;
                if (!kobj_has(cs, "state.terminated"))
                    continue;
                int64_t code = kobj_int(cs, "state.terminated.exitCode", 0);
                if (code == 0)
                    continue;
                bool in = in_int_values(vals, code);
                if ((op && strcmp(op, "In") == 0 && in) ||
                    (op && strcmp(op, "NotIn") == 0 && !in)) {
                    snprintf(msg, 256,
                             "Container %s for pod %s/%s failed with exit code %lld matching "
                             "%s rule at index %d",
                             n ? n : "", ns ? ns : "", pn ? pn : "", (long long)code,
                             action ? action : "", idx);
                    return true;
                }
            }
        }
        return false;
    }
    const cJSON *opc = kobj_at(rule, "onPodConditions");
    const cJSON *pat;
    cJSON_ArrayForEach(pat, opc)
    {
        const char *type = kobj_str(pat, "type");
        const char *want = kobj_str(pat, "status");
        if (!type)
            continue;
        const char *have = kobj_str(kobj_cond(pod, type), "status");
        if (have && strcmp(have, want ? want : "True") == 0) {
            snprintf(msg, 256, "Pod %s/%s has condition %s matching %s rule at index %d",
                     ns ? ns : "", pn ? pn : "", type, action ? action : "", idx);
            return true;
        }
    }
    return false;
}

const char *jobctl_failure_policy(const cJSON *job, const cJSON *pod, int *ret_rule,
                                  char msg[256])
{
    msg[0] = 0;
    *ret_rule = -1;
    const cJSON *rules = kobj_at(job, "spec.podFailurePolicy.rules");
    const cJSON *r;
    int i = 0;
    cJSON_ArrayForEach(r, rules)
    {
        if (rule_matches(r, pod, msg, i)) {
            const char *a = kobj_str(r, "action");
            *ret_rule = i;
            if (a && (strcmp(a, "FailJob") == 0 || strcmp(a, "Ignore") == 0))
                return a;
            return "Count";
        }
        i++;
    }
    return "Count";
}

static bool uid_in(const cJSON *arr, const char *uid)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        if (cJSON_IsString(it) && uid && strcmp(it->valuestring, uid) == 0)
            return true;
    }
    return false;
}

static const cJSON *pod_by_uid(const cJSON *const *pods, size_t n, const char *uid)
{
    for (size_t i = 0; i < n; i++) {
        const char *u = kobj_str(pods[i], "metadata.uid");
        if (u && uid && strcmp(u, uid) == 0)
            return pods[i];
    }
    return NULL;
}

/* Moves uids of arr whose pod is gone or has no finalizer into a count. */
static int64_t settle(cJSON *arr, const cJSON *const *pods, size_t n)
{
    int64_t moved = 0;
    int i = 0;
    cJSON *it = arr ? arr->child : NULL;
    while (it) {
        cJSON *next = it->next;
        const cJSON *p = cJSON_IsString(it) ? pod_by_uid(pods, n, it->valuestring) : NULL;
        if (!p || !kobj_has_finalizer(p, JOBCTL_TRACKING_FINALIZER)) {
            cJSON_DeleteItemFromArray(arr, i);
            moved++;
        } else {
            i++;
        }
        it = next;
    }
    return moved;
}

static cJSON *array_at(cJSON *o, const char *key)
{
    cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(a)) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, key);
        a = cJSON_AddArrayToObject(o, key);
    }
    return a;
}

static void set_counter(cJSON *st, const char *key, int64_t v, bool omit_zero)
{
    if (v == 0 && omit_zero)
        kobj_del(st, key);
    else
        kobj_set_int(st, key, v);
}

static void requeue(struct jobctl_out *o, int64_t after)
{
    if (after < 0)
        after = 0;
    if (o->requeue_after < 0 || after < o->requeue_after)
        o->requeue_after = after;
}

static cJSON *remove_finalizer_copy(const cJSON *pod)
{
    cJSON *c = json_dup(pod);
    kobj_remove_finalizer(c, JOBCTL_TRACKING_FINALIZER);
    return c;
}

int jobctl_reconcile(const struct jobctl_cfg *cfg, const cJSON *job, const cJSON *const *pods,
                     size_t npods, int64_t now, struct jobctl_out *ret, struct tern_err *err)
{
    const char *uid = kobj_str(job, "metadata.uid"), *name = kobj_str(job, "metadata.name");
    if (!uid || !name || !kobj_at(job, "spec.template"))
        return err_set(err, TERN_EINVALID, "job: metadata.uid, metadata.name and spec.template "
                                           "are required");
    struct jobctl_out o = {.requeue_after = -1};
    const cJSON *old_st = kobj_at(job, "status");
    cJSON *wrap = cJSON_CreateObject(); /* {"status": ...} so kobj_set_cond works */
    cJSON_AddItemToObject(wrap, "status",
                          cJSON_IsObject(old_st) ? json_dup(old_st) : cJSON_CreateObject());
    cJSON *st = cJSON_GetObjectItemCaseSensitive(wrap, "status");
    bool finished = kobj_cond_true(wrap, "Complete") || kobj_cond_true(wrap, "Failed");

    /* 1. settle uncounted pods whose finalizer is gone */
    cJSON *unc = kobj_obj(st, "uncountedTerminatedPods");
    cJSON *unc_s = array_at(unc, "succeeded"), *unc_f = array_at(unc, "failed");
    int64_t succeeded = kobj_int(st, "succeeded", 0) + settle(unc_s, pods, npods);
    int64_t failed = kobj_int(st, "failed", 0) + settle(unc_f, pods, npods);

    /* 2. terminal pods: record, then release their finalizer */
    const char *failjob_msg = NULL;
    char pfp_msg[256] = "";
    int64_t last_fail = -1;
    for (size_t i = 0; i < npods; i++) {
        const cJSON *p = pods[i];
        if (!pod_terminal(p))
            continue;
        bool ok = phase_is(p, "Succeeded");
        if (!ok) {
            int64_t t = pod_finish_time(p, now);
            if (t > last_fail)
                last_fail = t;
        }
        if (!kobj_has_finalizer(p, JOBCTL_TRACKING_FINALIZER))
            continue;
        const char *puid = kobj_str(p, "metadata.uid");
        if (!uid_in(unc_s, puid) && !uid_in(unc_f, puid)) {
            if (ok) {
                cJSON_AddItemToArray(unc_s, cJSON_CreateString(puid ? puid : ""));
            } else {
                int rule;
                char msg[256];
                const char *act = jobctl_failure_policy(job, p, &rule, msg);
                if (strcmp(act, "Ignore") == 0) {
                    add_act(&o, JOBCTL_UPDATE_POD, remove_finalizer_copy(p), NULL);
                    continue;
                }
                if (strcmp(act, "FailJob") == 0 && !failjob_msg) {
                    memcpy(pfp_msg, msg, sizeof pfp_msg);
                    failjob_msg = pfp_msg;
                }
                cJSON_AddItemToArray(unc_f, cJSON_CreateString(puid ? puid : ""));
            }
        }
        add_act(&o, JOBCTL_UPDATE_POD, remove_finalizer_copy(p), NULL);
    }
    int64_t succ_total = succeeded + cJSON_GetArraySize(unc_s);
    int64_t fail_total = failed + cJSON_GetArraySize(unc_f);

    /* 3. classify the rest */
    size_t nactive = 0, nterminating = 0, nready = 0;
    for (size_t i = 0; i < npods; i++) {
        if (pod_terminal(pods[i]))
            continue;
        if (kobj_deleting(pods[i])) {
            nterminating++;
        } else {
            nactive++;
            if (kobj_cond_true(pods[i], "Ready"))
                nready++;
        }
    }

    bool suspend = kobj_bool(job, "spec.suspend", false);
    if (!finished && !suspend && !kobj_str(st, "startTime")) {
        char ts[32];
        kobj_set_str(st, "startTime", kobj_fmt_time(now, ts));
    }
    int64_t start = kobj_time(st, "startTime", -1);
    int64_t completions = kobj_int(job, "spec.completions", -1);
    int64_t parallelism = kobj_int(job, "spec.parallelism", 1);
    int64_t backoff_limit = kobj_int(job, "spec.backoffLimit", 6);
    int64_t deadline = kobj_int(job, "spec.activeDeadlineSeconds", -1);

    /* 4. terminal targets */
    bool target = kobj_cond_true(wrap, "FailureTarget") || kobj_cond_true(wrap, "SuccessCriteriaMet");
    if (!finished && !target) {
        if (failjob_msg) {
            kobj_set_cond(wrap, "FailureTarget", "True", "PodFailurePolicy", failjob_msg, now);
        } else if (fail_total > backoff_limit) {
            kobj_set_cond(wrap, "FailureTarget", "True", "BackoffLimitExceeded",
                          "Job has reached the specified backoff limit", now);
        } else if (deadline >= 0 && start >= 0 && now - start >= deadline && !suspend) {
            kobj_set_cond(wrap, "FailureTarget", "True", "DeadlineExceeded",
                          "Job was active longer than specified deadline", now);
        } else if ((completions >= 0 && succ_total >= completions) ||
                   (completions < 0 && succ_total > 0 && nactive == 0)) {
            kobj_set_cond(wrap, "SuccessCriteriaMet", "True", "CompletionsReached",
                          "Reached expected number of succeeded pods", now);
        } else if (deadline >= 0 && start >= 0 && !suspend) {
            requeue(&o, start + deadline - now);
        }
    }
    bool fail_target = kobj_cond_true(wrap, "FailureTarget");
    bool succ_target = kobj_cond_true(wrap, "SuccessCriteriaMet");

    int64_t created = 0, deleted = 0;
    if (finished || fail_target || succ_target) {
        for (size_t i = 0; i < npods; i++) {
            if (!pod_terminal(pods[i]) && !kobj_deleting(pods[i])) {
                add_act(&o, JOBCTL_DELETE_POD, NULL, kobj_str(pods[i], "metadata.name"));
                deleted++;
            }
        }
        if (!finished && nactive == 0 && nterminating == 0 && cJSON_GetArraySize(unc_s) == 0 &&
            cJSON_GetArraySize(unc_f) == 0) {
            if (fail_target) {
                const cJSON *ft = kobj_cond(wrap, "FailureTarget");
                kobj_set_cond(wrap, "Failed", "True", kobj_str(ft, "reason"),
                              kobj_str(ft, "message"), now);
            } else {
                char ts[32];
                kobj_set_cond(wrap, "Complete", "True", NULL, NULL, now);
                kobj_set_str(st, "completionTime", kobj_fmt_time(now, ts));
            }
            finished = true;
        }
    } else {
        int64_t want;
        if (suspend)
            want = 0;
        else if (completions >= 0)
            want = completions - succ_total < parallelism ? completions - succ_total : parallelism;
        else
            want = succ_total > 0 ? 0 : parallelism;
        if (want < 0)
            want = 0;
        if ((int64_t)nactive < want) {
            int64_t wait = 0;
            if (fail_total > 0 && last_fail >= 0) {
                int64_t d = cfg->backoff_base_s;
                for (int64_t k = 1; k < fail_total && d < cfg->backoff_max_s; k++)
                    d *= 2;
                if (d > cfg->backoff_max_s)
                    d = cfg->backoff_max_s;
                if (last_fail + d > now)
                    wait = last_fail + d - now;
            }
            if (wait > 0) {
                requeue(&o, wait);
            } else {
                for (int64_t k = (int64_t)nactive; k < want; k++) {
                    add_act(&o, JOBCTL_CREATE_POD, jobctl_pod_from_template(job), NULL);
                    created++;
                }
            }
        } else if ((int64_t)nactive > want) {
            int64_t extra = (int64_t)nactive - want;
            for (size_t i = npods; i-- > 0 && extra > 0;) {
                if (!pod_terminal(pods[i]) && !kobj_deleting(pods[i])) {
                    add_act(&o, JOBCTL_DELETE_POD, NULL, kobj_str(pods[i], "metadata.name"));
                    deleted++;
                    extra--;
                }
            }
        }
    }

    /* 5. counters */
    set_counter(st, "active", (int64_t)nactive + created - deleted, true);
    set_counter(st, "succeeded", succeeded, true);
    set_counter(st, "failed", failed, true);
    set_counter(st, "ready", (int64_t)nready, false);
    set_counter(st, "terminating", (int64_t)nterminating + deleted, false);
    if (cJSON_GetArraySize(unc_s) == 0)
        cJSON_DeleteItemFromObjectCaseSensitive(unc, "succeeded");
    if (cJSON_GetArraySize(unc_f) == 0)
        cJSON_DeleteItemFromObjectCaseSensitive(unc, "failed");

    /* 6. TTL after finished */
    int64_t ttl = kobj_int(job, "spec.ttlSecondsAfterFinished", -1);
    if (finished && ttl >= 0) {
        int64_t fin = kobj_time(st, "completionTime", -1);
        if (fin < 0)
            fin = kobj_time(kobj_cond(wrap, "Failed"), "lastTransitionTime", now);
        if (now >= fin + ttl)
            add_act(&o, JOBCTL_DELETE_JOB, NULL, name);
        else
            requeue(&o, fin + ttl - now);
    }

    o.status = cJSON_DetachItemFromObjectCaseSensitive(wrap, "status");
    cJSON_Delete(wrap);
    *ret = o;
    return 0;
}
