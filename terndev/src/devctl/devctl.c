/* devctl.c - tern-dev's controllers: the I/O shell. See devctl.h. */
#include "devctl.h"

#include "base/mem.h"
#include "devctl/deployctl.h"
#include "devctl/fsutil.h"
#include "devctl/gc.h"
#include "devctl/kobj.h"
#include "devctl/objcache.h"
#include "json/json.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const struct {
    const char *gvr, *kind;
} base_res[] = {
    {"v1/pods", "Pod"},
    {"v1/configmaps", "ConfigMap"},
    {"v1/secrets", "Secret"},
    {"v1/services", "Service"},
    {"v1/serviceaccounts", "ServiceAccount"},
    {"v1/persistentvolumeclaims", "PersistentVolumeClaim"},
    {"v1/events", "Event"}, /* events.k8s.io/v1 events are the same objects */
    {"batch/v1/jobs", "Job"},
    {"apps/v1/deployments", "Deployment"},
    {"coordination.k8s.io/v1/leases", "Lease"},
    {"networking.k8s.io/v1/networkpolicies", "NetworkPolicy"},
    {"rbac.authorization.k8s.io/v1/roles", "Role"},
    {"rbac.authorization.k8s.io/v1/rolebindings", "RoleBinding"},
};
#define NBASE (sizeof base_res / sizeof base_res[0])

struct res {
    char *gvr;
    char *kind_key; /* "<apiVersion>/<Kind>" */
    const cJSON *list; /* this sync's view: borrowed from the cache */
};

struct devctl {
    const struct objstore *s;
    char *voldir;
    struct jobctl_cfg job;
    struct res *res;
    size_t nres;
    struct objcache *cache; /* res[0..nres) and then v1/namespaces */
    /* the last full pass: when, whether it met no error, and when its
     * time-driven change is due (-1 none) */
    int64_t last_pass, due;
    bool settled;
    /* the garbage collector's last run: when, what the cache had seen by
     * then, and whether it met no error and had nothing to do */
    int64_t gc_at;
    struct objcache_stats gc_seen;
    bool gc_settled;
};

/* A pass over an unchanged cache decides what the last one did; it is
 * skipped, but not for longer than this (seconds). */
#define IDLE_PASS_S 10

static void add_res(struct devctl *d, const char *gvr, const char *kind)
{
    const char *slash = strrchr(gvr, '/');
    if (!slash)
        return;
    d->res = xreallocarray(d->res, d->nres + 1, sizeof *d->res);
    d->res[d->nres++] = (struct res){xstrdup(gvr),
                                     xasprintf("%.*s/%s", (int)(slash - gvr), gvr, kind), NULL};
}

struct devctl *devctl_new(const struct objstore *store, const struct devctl_cfg *cfg)
{
    struct devctl *d = xcalloc(1, sizeof *d);
    d->s = store;
    d->voldir = xstrdup(cfg->volume_dir ? cfg->volume_dir : "volumes");
    d->job = cfg->job;
    for (size_t i = 0; i < NBASE; i++)
        add_res(d, base_res[i].gvr, base_res[i].kind);
    for (size_t i = 0; i < cfg->nextra; i++) {
        const char *eq = strchr(cfg->extra[i], '=');
        if (!eq)
            continue;
        char *gvr = xstrndup(cfg->extra[i], (size_t)(eq - cfg->extra[i]));
        add_res(d, gvr, eq + 1);
        free(gvr);
    }
    const char **gvrs = xcalloc(d->nres + 1, sizeof *gvrs);
    for (size_t i = 0; i < d->nres; i++)
        gvrs[i] = d->res[i].gvr;
    gvrs[d->nres] = "v1/namespaces";
    d->cache = objcache_new(store, gvrs, d->nres + 1, OBJCACHE_RESYNC_S);
    free(gvrs);
    return d;
}

void devctl_free(struct devctl *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->nres; i++) {
        free(d->res[i].gvr);
        free(d->res[i].kind_key);
    }
    objcache_free(d->cache);
    free(d->res);
    free(d->voldir);
    free(d);
}

static const cJSON *items(struct devctl *d, const char *gvr)
{
    for (size_t i = 0; i < d->nres; i++)
        if (strcmp(d->res[i].gvr, gvr) == 0)
            return kobj_at(d->res[i].list, "items");
    return NULL;
}

static void first_err(int *rc, int r)
{
    if (r && !*rc)
        *rc = r;
}

static void next_at(int64_t *next, int64_t after)
{
    if (after >= 0 && (*next < 0 || after < *next))
        *next = after;
}

static const char *ns_of(const cJSON *o)
{
    const char *ns = kobj_str(o, "metadata.namespace");
    return ns ? ns : "";
}

/* ---- namespaces and service accounts ---- */

static int sync_namespaces(struct devctl *d, const cJSON *nslist, struct tern_err *err)
{
    int rc = 0;
    bool have_default = false;
    const cJSON *ns;
    cJSON_ArrayForEach(ns, kobj_at(nslist, "items"))
    {
        const char *name = kobj_str(ns, "metadata.name");
        if (!name)
            continue;
        if (strcmp(name, "default") == 0)
            have_default = true;
        if (!kobj_deleting(ns)) {
            const cJSON *sa;
            bool found = false;
            cJSON_ArrayForEach(sa, items(d, "v1/serviceaccounts"))
            {
                found |= strcmp(ns_of(sa), name) == 0 &&
                         strcmp(kobj_str(sa, "metadata.name"), "default") == 0;
            }
            if (!found) {
                cJSON *o = cJSON_CreateObject();
                json_add_string(o, "apiVersion", "v1");
                json_add_string(o, "kind", "ServiceAccount");
                kobj_set_str(o, "metadata.name", "default");
                kobj_set_str(o, "metadata.namespace", name);
                int r = objstore_create(d->s, "v1/serviceaccounts", name, o, NULL, err);
                if (r != -EEXIST)
                    first_err(&rc, r);
                cJSON_Delete(o);
            }
            continue;
        }
        /* deleting: remove the contents, then release the namespace */
        size_t left = 0;
        for (size_t i = 0; i < d->nres; i++) {
            const cJSON *o;
            cJSON_ArrayForEach(o, kobj_at(d->res[i].list, "items"))
            {
                if (strcmp(ns_of(o), name) != 0)
                    continue;
                left++;
                if (kobj_deleting(o))
                    continue;
                int r = objstore_remove(d->s, d->res[i].gvr, name, kobj_str(o, "metadata.name"),
                                        NULL, NULL, err);
                if (r != TERN_ENOTFOUND)
                    first_err(&rc, r);
            }
        }
        if (left == 0 && cJSON_GetArraySize(kobj_at(ns, "spec.finalizers")) > 0) {
            cJSON *c = json_dup(ns);
            kobj_del(c, "spec.finalizers");
            int r = objstore_update(d->s, "v1/namespaces", "", c, NULL, err);
            if (r != TERN_ENOTFOUND && r != TERN_ECONFLICT)
                first_err(&rc, r);
            cJSON_Delete(c);
        }
    }
    if (!have_default) {
        cJSON *o = cJSON_CreateObject();
        json_add_string(o, "apiVersion", "v1");
        json_add_string(o, "kind", "Namespace");
        kobj_set_str(o, "metadata.name", "default");
        int r = objstore_create(d->s, "v1/namespaces", "", o, NULL, err);
        if (r != -EEXIST)
            first_err(&rc, r);
        cJSON_Delete(o);
    }
    return rc;
}

/* ---- PVC binding ---- */

static bool pod_uses_claim(const cJSON *pod, const char *ns, const char *claim)
{
    if (strcmp(ns_of(pod), ns) != 0)
        return false;
    const char *ph = kobj_str(pod, "status.phase");
    if (ph && (strcmp(ph, "Succeeded") == 0 || strcmp(ph, "Failed") == 0))
        return false;
    const cJSON *v;
    cJSON_ArrayForEach(v, kobj_at(pod, "spec.volumes"))
    {
        const char *c = kobj_str(v, "persistentVolumeClaim.claimName");
        if (c && strcmp(c, claim) == 0)
            return true;
    }
    return false;
}

static int sync_pvcs(struct devctl *d, struct tern_err *err)
{
    int rc = 0;
    const cJSON *pvc;
    cJSON_ArrayForEach(pvc, items(d, "v1/persistentvolumeclaims"))
    {
        /* the common case first: a bound claim nobody deletes */
        const char *phase = kobj_str(pvc, "status.phase");
        bool deleting = kobj_deleting(pvc);
        if (!deleting && phase && strcmp(phase, "Bound") == 0)
            continue;
        const char *ns = ns_of(pvc), *name = kobj_str(pvc, "metadata.name");
        const char *uid = kobj_str(pvc, "metadata.uid");
        if (!name || !uid)
            continue;
        char *dir = xasprintf("%s/%s/%s", d->voldir, ns, uid);
        if (deleting) {
            bool used = false;
            const cJSON *p;
            cJSON_ArrayForEach(p, items(d, "v1/pods")) used |= pod_uses_claim(p, ns, name);
            if (!used && kobj_has_finalizer(pvc, "kubernetes.io/pvc-protection")) {
                int r = fsutil_rmtree(dir, err);
                first_err(&rc, r);
                if (r == 0) {
                    cJSON *c = json_dup(pvc);
                    kobj_remove_finalizer(c, "kubernetes.io/pvc-protection");
                    r = objstore_update(d->s, "v1/persistentvolumeclaims", ns, c, NULL, err);
                    if (r != TERN_ENOTFOUND && r != TERN_ECONFLICT)
                        first_err(&rc, r);
                    cJSON_Delete(c);
                }
            }
            free(dir);
            continue;
        }
        int r = fsutil_mkdirs(dir, 0777, err);
        if (r == 0)
            (void)!chmod(dir, 0777);
        first_err(&rc, r);
        char vol[128];
        snprintf(vol, sizeof vol, "pvc-%s", uid);
        cJSON *c = json_dup(pvc);
        kobj_add_finalizer(c, "kubernetes.io/pvc-protection");
        kobj_set_str(c, "spec.volumeName", vol);
        cJSON *ann = kobj_obj(c, "metadata.annotations");
        cJSON_DeleteItemFromObjectCaseSensitive(ann, "pv.kubernetes.io/bind-completed");
        json_add_string(ann, "pv.kubernetes.io/bind-completed", "yes");
        cJSON *upd = NULL;
        if (r == 0)
            r = objstore_update(d->s, "v1/persistentvolumeclaims", ns, c, &upd, err);
        if (r == 0) {
            kobj_set_str(upd, "status.phase", "Bound");
            const cJSON *am = kobj_at(pvc, "spec.accessModes");
            if (am)
                kobj_set_item(upd, "status.accessModes", json_dup(am));
            const char *size = kobj_str(pvc, "spec.resources.requests.storage");
            if (size) {
                cJSON *cap = cJSON_CreateObject();
                json_add_string(cap, "storage", size);
                kobj_set_item(upd, "status.capacity", cap);
            }
            r = objstore_update_status(d->s, "v1/persistentvolumeclaims", ns, upd, NULL, err);
        }
        if (r != TERN_ENOTFOUND && r != TERN_ECONFLICT)
            first_err(&rc, r);
        cJSON_Delete(c);
        cJSON_Delete(upd);
        free(dir);
    }
    return rc;
}

/* ---- Jobs ---- */

/* The pods of ns controlled by uid (borrowed pointers into the snapshot). */
static size_t owned_pods(struct devctl *d, const char *ns, const char *uid, const cJSON ***ret)
{
    size_t n = 0;
    const cJSON **v = NULL;
    const cJSON *p;
    cJSON_ArrayForEach(p, items(d, "v1/pods"))
    {
        const cJSON *ref = kobj_controller_ref(p);
        const char *u = kobj_str(ref, "uid");
        if (strcmp(ns_of(p), ns) == 0 && u && strcmp(u, uid) == 0) {
            v = xreallocarray(v, n + 1, sizeof *v);
            v[n++] = p;
        }
    }
    *ret = v;
    return n;
}

static int release_finalizer(struct devctl *d, const cJSON *pod, struct tern_err *err)
{
    cJSON *c = json_dup(pod);
    kobj_remove_finalizer(c, JOBCTL_TRACKING_FINALIZER);
    int r = objstore_update(d->s, "v1/pods", ns_of(pod), c, NULL, err);
    cJSON_Delete(c);
    return r == TERN_ENOTFOUND || r == TERN_ECONFLICT ? 0 : r;
}

static bool status_differs(const cJSON *obj, const cJSON *st)
{
    return !kobj_equal(kobj_at(obj, "status"), st);
}

static int sync_jobs(struct devctl *d, int64_t now, int64_t *next, struct tern_err *err)
{
    int rc = 0;
    const cJSON *job;
    cJSON_ArrayForEach(job, items(d, "batch/v1/jobs"))
    {
        const char *ns = ns_of(job), *uid = kobj_str(job, "metadata.uid");
        if (!uid)
            continue;
        const cJSON **pods;
        size_t n = owned_pods(d, ns, uid, &pods);
        if (kobj_deleting(job)) {
            /* a deleting Job no longer tracks: let its pods go */
            for (size_t i = 0; i < n; i++) {
                if (kobj_has_finalizer(pods[i], JOBCTL_TRACKING_FINALIZER))
                    first_err(&rc, release_finalizer(d, pods[i], err));
            }
            free(pods);
            continue;
        }
        struct jobctl_out o;
        int r = jobctl_reconcile(&d->job, job, pods, n, now, &o, err);
        if (r) {
            free(pods);
            first_err(&rc, r);
            continue;
        }
        next_at(next, o.requeue_after);
        if (status_differs(job, o.status)) {
            cJSON *c = json_dup(job);
            kobj_set_item(c, "status", json_dup(o.status));
            r = objstore_update_status(d->s, "batch/v1/jobs", ns, c, NULL, err);
            cJSON_Delete(c);
            if (r) { /* stale: the next sync decides again */
                if (r != TERN_ECONFLICT && r != TERN_ENOTFOUND)
                    first_err(&rc, r);
                jobctl_out_done(&o);
                free(pods);
                continue;
            }
        }
        for (size_t i = 0; i < o.nacts; i++) {
            struct jobctl_action *a = &o.acts[i];
            switch (a->kind) {
            case JOBCTL_CREATE_POD:
                r = objstore_create(d->s, "v1/pods", ns, a->obj, NULL, err);
                break;
            case JOBCTL_UPDATE_POD:
                r = objstore_update(d->s, "v1/pods", ns, a->obj, NULL, err);
                break;
            case JOBCTL_DELETE_POD:
                r = objstore_remove(d->s, "v1/pods", ns, a->name, NULL, NULL, err);
                break;
            case JOBCTL_DELETE_JOB: {
                struct objstore_delete_opts dopts = {.propagation = "Background",
                                                     .grace_seconds = -1,
                                                     .uid = uid};
                r = objstore_remove(d->s, "batch/v1/jobs", ns, kobj_str(job, "metadata.name"),
                                    &dopts, NULL, err);
                break;
            }
            }
            if (r != TERN_ENOTFOUND && r != TERN_ECONFLICT)
                first_err(&rc, r);
        }
        jobctl_out_done(&o);
        free(pods);
    }
    /* pods still carrying the tracking finalizer whose Job is gone */
    const cJSON *p;
    cJSON_ArrayForEach(p, items(d, "v1/pods"))
    {
        if (!kobj_has_finalizer(p, JOBCTL_TRACKING_FINALIZER))
            continue;
        const cJSON *ref = kobj_controller_ref(p);
        const char *u = kobj_str(ref, "uid");
        bool found = false;
        cJSON_ArrayForEach(job, items(d, "batch/v1/jobs"))
        {
            const char *ju = kobj_str(job, "metadata.uid");
            found |= u && ju && strcmp(u, ju) == 0;
        }
        if (!found) {
            cJSON *live = NULL;
            /* confirm against the store: the snapshot may predate the Job */
            if (u && objstore_get(d->s, "batch/v1/jobs", ns_of(p), kobj_str(ref, "name"), &live,
                                  NULL) == 0 &&
                strcmp(kobj_str(live, "metadata.uid"), u) == 0) {
                cJSON_Delete(live);
                continue;
            }
            cJSON_Delete(live);
            first_err(&rc, release_finalizer(d, p, err));
        }
    }
    return rc;
}

/* ---- Deployments ---- */

static int sync_deployments(struct devctl *d, int64_t now, int64_t *next, struct tern_err *err)
{
    int rc = 0;
    const cJSON *dep;
    cJSON_ArrayForEach(dep, items(d, "apps/v1/deployments"))
    {
        const char *ns = ns_of(dep), *uid = kobj_str(dep, "metadata.uid");
        if (!uid)
            continue;
        const cJSON **pods;
        size_t n = owned_pods(d, ns, uid, &pods);
        struct deployctl_out o;
        int r = deployctl_reconcile(dep, pods, n, now, &o, err);
        free(pods);
        if (r) {
            first_err(&rc, r);
            continue;
        }
        next_at(next, o.requeue_after);
        if (status_differs(dep, o.status)) {
            cJSON *c = json_dup(dep);
            kobj_set_item(c, "status", json_dup(o.status));
            r = objstore_update_status(d->s, "apps/v1/deployments", ns, c, NULL, err);
            cJSON_Delete(c);
            if (r) {
                if (r != TERN_ECONFLICT && r != TERN_ENOTFOUND)
                    first_err(&rc, r);
                deployctl_out_done(&o);
                continue;
            }
        }
        for (size_t i = 0; i < o.nacts; i++) {
            struct deployctl_action *a = &o.acts[i];
            if (a->kind == DEPLOYCTL_CREATE_POD)
                r = objstore_create(d->s, "v1/pods", ns, a->obj, NULL, err);
            else
                r = objstore_remove(d->s, "v1/pods", ns, a->name, NULL, NULL, err);
            if (r != TERN_ENOTFOUND && r != TERN_ECONFLICT)
                first_err(&rc, r);
        }
        deployctl_out_done(&o);
    }
    return rc;
}

/* ---- garbage collector ---- */

static const char *gvr_for_kind(struct devctl *d, const char *av, const char *kind)
{
    if (!av || !kind)
        return NULL;
    size_t la = strlen(av);
    for (size_t i = 0; i < d->nres; i++) {
        const char *k = d->res[i].kind_key;
        if (strncmp(k, av, la) == 0 && k[la] == '/' && strcmp(k + la + 1, kind) == 0)
            return d->res[i].gvr;
    }
    return NULL;
}

/* True when some owner of o still exists in the store (by name and uid). */
static bool an_owner_exists(struct devctl *d, const cJSON *o)
{
    const cJSON *r;
    cJSON_ArrayForEach(r, kobj_at(o, "metadata.ownerReferences"))
    {
        const char *gvr = gvr_for_kind(d, kobj_str(r, "apiVersion"), kobj_str(r, "kind"));
        const char *name = kobj_str(r, "name"), *uid = kobj_str(r, "uid");
        if (!gvr || !name || !uid)
            return true; /* unknown kind: assume it exists */
        cJSON *live = NULL;
        int rc = objstore_get(d->s, gvr, ns_of(o), name, &live, NULL);
        bool same = rc == 0 && strcmp(kobj_str(live, "metadata.uid"), uid) == 0 &&
                    !kobj_has_finalizer(live, "foregroundDeletion");
        cJSON_Delete(live);
        if (same || (rc != 0 && rc != TERN_ENOTFOUND))
            return true;
    }
    return false;
}

/* *acted: whether it decided anything (its follow-ups are due at once). */
static int sync_gc(struct devctl *d, bool *acted, struct tern_err *err)
{
    size_t n = 0, cap = 0;
    struct gc_obj *objs = NULL;
    const char **kinds = xcalloc(d->nres, sizeof *kinds);
    for (size_t i = 0; i < d->nres; i++) {
        kinds[i] = d->res[i].kind_key;
        const cJSON *o;
        cJSON_ArrayForEach(o, kobj_at(d->res[i].list, "items"))
        {
            if (n == cap) {
                cap = cap ? cap * 2 : 128;
                objs = xreallocarray(objs, cap, sizeof *objs);
            }
            objs[n++] = (struct gc_obj){d->res[i].gvr, o};
        }
    }
    struct gc_plan plan;
    gc_decide(objs, n, kinds, d->nres, &plan);
    *acted = plan.n > 0;
    int rc = 0;
    for (size_t i = 0; i < plan.n; i++) {
        struct gc_action *a = &plan.acts[i];
        const struct gc_obj *g = &objs[a->idx];
        const char *ns = ns_of(g->obj), *name = kobj_str(g->obj, "metadata.name");
        int r = 0;
        if (a->kind == GC_DELETE) {
            if (strcmp(a->propagation, "Background") == 0 && an_owner_exists(d, g->obj))
                continue;
            struct objstore_delete_opts o = {.propagation = a->propagation,
                                             .grace_seconds = -1,
                                             .uid = kobj_str(g->obj, "metadata.uid")};
            r = objstore_remove(d->s, g->gvr, ns, name, &o, NULL, err);
        } else if (a->kind == GC_REMOVE_REFS) {
            cJSON *c = gc_without_refs(g->obj, a->uids, a->nuids);
            r = objstore_update(d->s, g->gvr, ns, c, NULL, err);
            cJSON_Delete(c);
        } else {
            cJSON *c = json_dup(g->obj);
            kobj_remove_finalizer(c, a->finalizer);
            r = objstore_update(d->s, g->gvr, ns, c, NULL, err);
            cJSON_Delete(c);
        }
        if (r != TERN_ENOTFOUND && r != TERN_ECONFLICT)
            first_err(&rc, r);
    }
    gc_plan_done(&plan);
    free(objs);
    free(kinds);
    return rc;
}

/* ---- the loop ---- */

int devctl_sync(struct devctl *d, int64_t now, int64_t *ret_next, struct tern_err *err)
{
    int rc = 0;
    int64_t next = -1;
    /* a resource the store does not serve is empty (its list failed) */
    struct tern_err lerr = {0};
    struct objcache_stats s0, s1;
    objcache_stats(d->cache, &s0);
    int lr = objcache_sync(d->cache, now, &lerr);
    objcache_stats(d->cache, &s1);
    if (lr == 0 && d->settled && s1.relists == s0.relists && s1.changes == s0.changes &&
        s1.changes == d->gc_seen.changes &&
        (d->due < 0 || now < d->due) && now >= d->last_pass &&
        now - d->last_pass < IDLE_PASS_S) {
        if (ret_next)
            *ret_next = d->due < 0 ? -1 : d->due - now;
        return 0;
    }
    /* The garbage collector walks every object, most of a pass beside
     * thousands of parked sessions. It runs at once after a deletion (an
     * object gone or newly marked for deletion: what its work starts
     * from), after a relist, and in the pass after one where it acted or
     * failed (the next step of a foreground or orphan deletion); after any
     * other change (a dependent made after its owner went) in the first
     * pass of the next second, so a burst of writes pays for one walk a
     * second; and at least every IDLE_PASS_S. */
    bool gc_pending = s1.changes != d->gc_seen.changes;
    bool gc_due = !d->gc_settled || s1.relists != d->gc_seen.relists ||
                  s1.deletions != d->gc_seen.deletions || now < d->gc_at ||
                  now - d->gc_at >= IDLE_PASS_S || (gc_pending && now != d->gc_at);
    for (size_t i = 0; i < d->nres; i++)
        d->res[i].list = objcache_list(d->cache, i);
    if (objcache_ok(d->cache, d->nres))
        first_err(&rc, sync_namespaces(d, objcache_list(d->cache, d->nres), err));
    else
        first_err(&rc, err_set(err, lr ? lr : TERN_EHTTP, "cannot list namespaces: %s", lerr.msg));
    first_err(&rc, sync_pvcs(d, err));
    first_err(&rc, sync_jobs(d, now, &next, err));
    first_err(&rc, sync_deployments(d, now, &next, err));
    if (gc_due) {
        bool acted = false;
        int r = sync_gc(d, &acted, err);
        first_err(&rc, r);
        d->gc_settled = r == 0 && !acted;
        d->gc_seen = s1;
        d->gc_at = now;
    } else if (gc_pending) {
        next_at(&next, 1);
    }
    d->settled = rc == 0;
    d->last_pass = now;
    d->due = next < 0 ? -1 : now + next;
    if (ret_next)
        *ret_next = next;
    return rc;
}

int devctl_run(struct devctl *d, volatile int *stop, int max_wait_ms)
{
    while (!*stop) {
        int64_t next = -1;
        devctl_sync(d, (int64_t)time(NULL), &next, NULL);
        /* the pass saw everything up to rv: its own writes, and any other,
         * end the wait at once */
        char rv[24];
        snprintf(rv, sizeof rv, "%s", objcache_rv(d->cache));
        int wait = max_wait_ms;
        if (next >= 0 && next * 1000 + 50 < wait)
            wait = (int)(next * 1000 + 50);
        objstore_wait(d->s, rv, wait, NULL);
    }
    return 0;
}
