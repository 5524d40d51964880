/* deployctl.c - Deployment controller decision. See deployctl.h. */
#include "deployctl.h"

#include "base/mem.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *deployctl_template_hash(const cJSON *tmpl, char out[11])
{
    static const char al[] = "bcdfghjklmnpqrstvwxz2456789";
    char *s = tmpl ? json_print(tmpl) : xstrdup("null");
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = s; *p; p++) {
        h ^= (unsigned char)*p;
        h *= 1099511628211ULL;
    }
    free(s);
    for (int i = 0; i < 10; i++) {
        out[i] = al[h % (sizeof al - 1)];
        h /= (sizeof al - 1);
        if (h == 0)
            h = 0x9e3779b97f4a7c15ULL;
    }
    out[10] = 0;
    return out;
}

static void add_act(struct deployctl_out *o, enum deployctl_act k, cJSON *obj, const char *name)
{
    o->acts = xreallocarray(o->acts, o->nacts + 1, sizeof *o->acts);
    o->acts[o->nacts++] = (struct deployctl_action){k, obj, name};
}

void deployctl_out_done(struct deployctl_out *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->nacts; i++)
        cJSON_Delete(o->acts[i].obj);
    free(o->acts);
    cJSON_Delete(o->status);
    memset(o, 0, sizeof *o);
}

static bool terminal(const cJSON *pod)
{
    const char *ph = kobj_str(pod, "status.phase");
    return ph && (strcmp(ph, "Succeeded") == 0 || strcmp(ph, "Failed") == 0);
}

static cJSON *new_pod(const cJSON *dep, const char *hash)
{
    const char *name = kobj_str(dep, "metadata.name"), *ns = kobj_str(dep, "metadata.namespace");
    cJSON *pod = cJSON_CreateObject();
    json_add_string(pod, "apiVersion", "v1");
    json_add_string(pod, "kind", "Pod");
    cJSON *md = cJSON_AddObjectToObject(pod, "metadata");
    char gen[300];
    snprintf(gen, sizeof gen, "%s-%s-", name, hash);
    json_add_string(md, "generateName", gen);
    if (ns)
        json_add_string(md, "namespace", ns);
    const cJSON *tl = kobj_at(dep, "spec.template.metadata.labels");
    cJSON_AddItemToObject(md, "labels", cJSON_IsObject(tl) ? json_dup(tl) : cJSON_CreateObject());
    kobj_set_str(pod, "metadata.labels.pod-template-hash", hash);
    const cJSON *ta = kobj_at(dep, "spec.template.metadata.annotations");
    if (cJSON_IsObject(ta))
        cJSON_AddItemToObject(md, "annotations", json_dup(ta));
    cJSON *refs = cJSON_AddArrayToObject(md, "ownerReferences");
    cJSON *ref = kobj_owner_ref(dep, true, true);
    if (!kobj_str(ref, "apiVersion")[0])
        kobj_set_str(ref, "apiVersion", "apps/v1");
    if (!kobj_str(ref, "kind")[0])
        kobj_set_str(ref, "kind", "Deployment");
    cJSON_AddItemToArray(refs, ref);
    const cJSON *spec = kobj_at(dep, "spec.template.spec");
    cJSON_AddItemToObject(pod, "spec", spec ? json_dup(spec) : cJSON_CreateObject());
    return pod;
}

int deployctl_reconcile(const cJSON *dep, const cJSON *const *pods, size_t npods, int64_t now,
                        struct deployctl_out *ret, struct tern_err *err)
{
    const char *uid = kobj_str(dep, "metadata.uid"), *name = kobj_str(dep, "metadata.name");
    const cJSON *tmpl = kobj_at(dep, "spec.template");
    if (!uid || !name || !tmpl)
        return err_set(err, TERN_EINVALID,
                       "deployment: metadata.uid, metadata.name and spec.template are required");
    struct deployctl_out o = {.requeue_after = -1};
    char hash[11];
    deployctl_template_hash(tmpl, hash);
    int64_t want = kobj_int(dep, "spec.replicas", 1);
    if (want < 0)
        want = 0;
    int64_t min_ready = kobj_int(dep, "spec.minReadySeconds", 0);
    bool deleting = kobj_deleting(dep);

    int64_t old_left = 0, cur_active = 0, replicas = 0, ready = 0, available = 0;
    for (size_t i = 0; i < npods; i++) {
        const cJSON *p = pods[i];
        const char *h = kobj_label(p, "pod-template-hash");
        bool cur = h && strcmp(h, hash) == 0;
        if (terminal(p)) {
            if (!kobj_deleting(p))
                add_act(&o, DEPLOYCTL_DELETE_POD, NULL, kobj_str(p, "metadata.name"));
            continue;
        }
        replicas++;
        if (!cur) {
            old_left++;
            if (!kobj_deleting(p))
                add_act(&o, DEPLOYCTL_DELETE_POD, NULL, kobj_str(p, "metadata.name"));
            continue;
        }
        if (kobj_deleting(p))
            continue;
        cur_active++;
        if (kobj_cond_true(p, "Ready")) {
            ready++;
            int64_t since = kobj_time(kobj_cond(p, "Ready"), "lastTransitionTime", now);
            if (now - since >= min_ready)
                available++;
            else if (o.requeue_after < 0 || since + min_ready - now < o.requeue_after)
                o.requeue_after = since + min_ready - now;
        }
    }
    int64_t created = 0;
    if (!deleting && old_left == 0 && cur_active < want) {
        for (int64_t k = cur_active; k < want; k++) {
            add_act(&o, DEPLOYCTL_CREATE_POD, new_pod(dep, hash), NULL);
            created++;
        }
    } else if (cur_active > want) {
        int64_t extra = cur_active - want;
        /* prefer deleting pods that are not ready, then the last ones */
        for (int pass = 0; pass < 2 && extra > 0; pass++) {
            for (size_t i = npods; i-- > 0 && extra > 0;) {
                const cJSON *p = pods[i];
                const char *h = kobj_label(p, "pod-template-hash");
                if (terminal(p) || kobj_deleting(p) || !h || strcmp(h, hash) != 0)
                    continue;
                if (pass == 0 && kobj_cond_true(p, "Ready"))
                    continue;
                bool dup = false;
                for (size_t a = 0; a < o.nacts; a++)
                    dup |= o.acts[a].name && strcmp(o.acts[a].name, kobj_str(p, "metadata.name")) == 0;
                if (dup)
                    continue;
                add_act(&o, DEPLOYCTL_DELETE_POD, NULL, kobj_str(p, "metadata.name"));
                extra--;
            }
        }
    }

    cJSON *wrap = cJSON_CreateObject();
    const cJSON *old = kobj_at(dep, "status");
    cJSON_AddItemToObject(wrap, "status", cJSON_IsObject(old) ? json_dup(old) : cJSON_CreateObject());
    cJSON *st = cJSON_GetObjectItemCaseSensitive(wrap, "status");
    kobj_set_int(st, "observedGeneration", kobj_int(dep, "metadata.generation", 1));
    kobj_set_int(st, "replicas", replicas + created);
    kobj_set_int(st, "updatedReplicas", cur_active + created);
    kobj_set_int(st, "readyReplicas", ready);
    kobj_set_int(st, "availableReplicas", available);
    int64_t unavail = want - available;
    kobj_set_int(st, "unavailableReplicas", unavail > 0 ? unavail : 0);
    if (available >= want)
        kobj_set_cond(wrap, "Available", "True", "MinimumReplicasAvailable",
                      "Deployment has minimum availability.", now);
    else
        kobj_set_cond(wrap, "Available", "False", "MinimumReplicasUnavailable",
                      "Deployment does not have minimum availability.", now);
    char msg[512];
    if (old_left == 0 && cur_active == want && available == want) {
        snprintf(msg, sizeof msg, "Deployment \"%s\" has successfully progressed.", name);
        kobj_set_cond(wrap, "Progressing", "True", "NewReplicaSetAvailable", msg, now);
    } else {
        snprintf(msg, sizeof msg, "Deployment \"%s\" is progressing (pod-template-hash %s).",
                 name, hash);
        kobj_set_cond(wrap, "Progressing", "True", "ReplicaSetUpdated", msg, now);
    }
    o.status = cJSON_DetachItemFromObjectCaseSensitive(wrap, "status");
    cJSON_Delete(wrap);
    *ret = o;
    return 0;
}
