/* podstatus.c - kubelet-style pod status. See podstatus.h. */
#include "podstatus.h"

#include "base/buf.h"
#include "base/mem.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *podstatus_phase(const struct podstatus_container *cs, size_t n)
{
    size_t nreg = 0, done = 0, failed = 0, started = 0;
    for (size_t i = 0; i < n; i++) {
        const struct podstatus_container *c = &cs[i];
        if (c->init) {
            bool ok = c->state == PODSTATUS_TERMINATED && c->term.exit_code == 0;
            if (c->done && !ok)
                return "Failed";
            if (!ok)
                return "Pending";
            continue;
        }
        nreg++;
        if (c->done) {
            done++;
            if (c->state != PODSTATUS_TERMINATED || c->term.exit_code != 0)
                failed++;
        }
        if (c->state != PODSTATUS_WAITING || c->restart_count > 0)
            started++;
    }
    if (nreg > 0 && done == nreg)
        return failed ? "Failed" : "Succeeded";
    return started ? "Running" : "Pending";
}

static cJSON *term_json(const struct podstatus_term *t, long pid)
{
    cJSON *o = cJSON_CreateObject();
    char ts[32];
    json_add_int64(o, "exitCode", t->exit_code);
    json_add_string(o, "reason", t->reason ? t->reason : (t->exit_code ? "Error" : "Completed"));
    if (t->message)
        json_add_string(o, "message", t->message);
    json_add_string(o, "startedAt", kobj_fmt_time(t->started_at, ts));
    json_add_string(o, "finishedAt", kobj_fmt_time(t->finished_at, ts));
    if (pid > 0) {
        char id[40];
        snprintf(id, sizeof id, "bwrap://%ld", pid);
        json_add_string(o, "containerID", id);
    }
    return o;
}

static const cJSON *spec_of(const cJSON *pod, const struct podstatus_container *c)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, kobj_at(pod, c->init ? "spec.initContainers" : "spec.containers"))
    {
        const char *n = kobj_str(x, "name");
        if (n && strcmp(n, c->name) == 0)
            return x;
    }
    return NULL;
}

static cJSON *container_json(const cJSON *pod, const struct podstatus_container *c)
{
    cJSON *o = cJSON_CreateObject();
    char ts[32];
    json_add_string(o, "name", c->name);
    const char *image = kobj_str(spec_of(pod, c), "image");
    json_add_string(o, "image", image ? image : "");
    json_add_string(o, "imageID", "");
    if (c->pid > 0) {
        char id[40];
        snprintf(id, sizeof id, "bwrap://%ld", c->pid);
        json_add_string(o, "containerID", id);
    }
    cJSON_AddBoolToObject(o, "ready", c->ready);
    cJSON_AddBoolToObject(o, "started", c->state == PODSTATUS_RUNNING && !c->startup_pending);
    json_add_int64(o, "restartCount", c->restart_count);
    cJSON *st = cJSON_AddObjectToObject(o, "state");
    if (c->state == PODSTATUS_RUNNING) {
        cJSON *r = cJSON_AddObjectToObject(st, "running");
        json_add_string(r, "startedAt", kobj_fmt_time(c->started_at, ts));
    } else if (c->state == PODSTATUS_TERMINATED) {
        cJSON_AddItemToObject(st, "terminated", term_json(&c->term, 0));
    } else {
        cJSON *w = cJSON_AddObjectToObject(st, "waiting");
        json_add_string(w, "reason", c->waiting_reason ? c->waiting_reason : "ContainerCreating");
        if (c->waiting_message)
            json_add_string(w, "message", c->waiting_message);
    }
    cJSON *ls = cJSON_AddObjectToObject(o, "lastState");
    if (c->has_last)
        cJSON_AddItemToObject(ls, "terminated", term_json(&c->last, 0));
    return o;
}

static const char *qos(const cJSON *pod)
{
    bool any = false, guaranteed = true;
    const char *lists[] = {"spec.containers", "spec.initContainers"};
    for (int l = 0; l < 2; l++) {
        const cJSON *c;
        cJSON_ArrayForEach(c, kobj_at(pod, lists[l]))
        {
            const char *res[] = {"cpu", "memory"};
            for (int r = 0; r < 2; r++) {
                char lp[64], rp[64];
                snprintf(lp, sizeof lp, "resources.limits.%s", res[r]);
                snprintf(rp, sizeof rp, "resources.requests.%s", res[r]);
                const char *lim = kobj_str(c, lp), *req = kobj_str(c, rp);
                if (lim || req)
                    any = true;
                if (!lim || (req && strcmp(req, lim) != 0))
                    guaranteed = false;
            }
        }
    }
    return !any ? "BestEffort" : guaranteed ? "Guaranteed" : "Burstable";
}

static char *names_not(const struct podstatus_container *cs, size_t n, bool init, bool want_ready)
{
    struct buf b;
    buf_init(&b, 1u << 16);
    buf_puts(&b, "[");
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (cs[i].init != init)
            continue;
        bool ok = init ? (cs[i].state == PODSTATUS_TERMINATED && cs[i].term.exit_code == 0)
                       : cs[i].ready;
        if (ok == want_ready)
            continue;
        buf_printf(&b, "%s%s", first ? "" : " ", cs[i].name);
        first = false;
    }
    buf_puts(&b, "]");
    return buf_steal(&b);
}

cJSON *podstatus_build(const cJSON *pod, const struct podstatus_container *cs, size_t n,
                       const char *pod_ip, const char *host_ip, bool sandbox_ready, int64_t now)
{
    cJSON *wrap = cJSON_CreateObject();
    const cJSON *old = kobj_at(pod, "status");
    cJSON_AddItemToObject(wrap, "status", cJSON_IsObject(old) ? json_dup(old) : cJSON_CreateObject());
    cJSON *st = cJSON_GetObjectItemCaseSensitive(wrap, "status");
    const char *phase = podstatus_phase(cs, n);
    bool terminal = strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0;
    kobj_set_str(st, "phase", phase);

    kobj_set_cond(wrap, "PodScheduled", "True", NULL, NULL, now);
    kobj_set_cond(wrap, "PodReadyToStartContainers", sandbox_ready && !terminal ? "True" : "False",
                  NULL, NULL, now);
    bool inited = true, all_ready = true;
    size_t nreg = 0;
    for (size_t i = 0; i < n; i++) {
        if (cs[i].init && !(cs[i].state == PODSTATUS_TERMINATED && cs[i].term.exit_code == 0))
            inited = false;
        if (!cs[i].init) {
            nreg++;
            all_ready &= cs[i].ready;
        }
    }
    if (inited) {
        kobj_set_cond(wrap, "Initialized", "True", NULL, NULL, now);
    } else {
        char *names = names_not(cs, n, true, true);
        char *msg = xasprintf("containers with incomplete status: %s", names);
        kobj_set_cond(wrap, "Initialized", "False", "ContainersNotInitialized", msg, now);
        free(msg);
        free(names);
    }
    if (terminal) {
        kobj_set_cond(wrap, "ContainersReady", "False", "PodCompleted", NULL, now);
        kobj_set_cond(wrap, "Ready", "False", "PodCompleted", NULL, now);
    } else if (all_ready && nreg > 0) {
        kobj_set_cond(wrap, "ContainersReady", "True", NULL, NULL, now);
        kobj_set_cond(wrap, "Ready", "True", NULL, NULL, now);
    } else {
        char *names = names_not(cs, n, false, true);
        char *msg = xasprintf("containers with unready status: %s", names);
        kobj_set_cond(wrap, "ContainersReady", "False", "ContainersNotReady", msg, now);
        kobj_set_cond(wrap, "Ready", "False", "ContainersNotReady", msg, now);
        free(msg);
        free(names);
    }
    if (host_ip) {
        kobj_set_str(st, "hostIP", host_ip);
        cJSON *a = cJSON_CreateArray(), *e = cJSON_CreateObject();
        json_add_string(e, "ip", host_ip);
        cJSON_AddItemToArray(a, e);
        kobj_set_item(st, "hostIPs", a);
    }
    if (pod_ip) {
        kobj_set_str(st, "podIP", pod_ip);
        cJSON *a = cJSON_CreateArray(), *e = cJSON_CreateObject();
        json_add_string(e, "ip", pod_ip);
        cJSON_AddItemToArray(a, e);
        kobj_set_item(st, "podIPs", a);
    }
    if (!kobj_str(st, "startTime")) {
        char ts[32];
        kobj_set_str(st, "startTime", kobj_fmt_time(now, ts));
    }
    kobj_set_str(st, "qosClass", qos(pod));
    cJSON *ics = cJSON_CreateArray(), *ccs = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(cs[i].init ? ics : ccs, container_json(pod, &cs[i]));
    if (cJSON_GetArraySize(ics) > 0)
        kobj_set_item(st, "initContainerStatuses", ics);
    else
        cJSON_Delete(ics);
    kobj_set_item(st, "containerStatuses", ccs);
    cJSON *r = cJSON_DetachItemFromObjectCaseSensitive(wrap, "status");
    cJSON_Delete(wrap);
    return r;
}

cJSON *podstatus_unschedulable(const cJSON *pod, const char *message, int64_t now)
{
    cJSON *wrap = cJSON_CreateObject();
    const cJSON *old = kobj_at(pod, "status");
    cJSON *st = old ? json_dup(old) : cJSON_CreateObject();
    cJSON_AddItemToObject(wrap, "status", st);
    kobj_set_str(wrap, "status.phase", "Pending");
    kobj_set_cond(wrap, "PodScheduled", "False", "Unschedulable", message, now);
    cJSON *ret = cJSON_DetachItemFromObjectCaseSensitive(wrap, "status");
    cJSON_Delete(wrap);
    return ret;
}
