/* localpv.c - the local-path provisioner (see localpv.h): the pure decision
 * over StorageClasses, claims and PersistentVolumes, and the watch-driven
 * shell that applies it through an objstore. */
#include "nodeagent/localpv.h"

#include "base/mem.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "json/json.h"
#include "kube/informer.h"
#include "kube/workqueue.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PROVISIONED_BY "pv.kubernetes.io/provisioned-by"
#define CLAIM_PROVISIONER "volume.kubernetes.io/storage-provisioner"

static const char *prov_of(const struct localpv_cfg *cfg)
{
    return cfg->provisioner ? cfg->provisioner : LOCALPV_PROVISIONER;
}

static const char *annotation(const cJSON *o, const char *key)
{
    const cJSON *a = json_get(kobj_at(o, "metadata.annotations"), key);
    return cJSON_IsString(a) ? a->valuestring : NULL;
}

static const cJSON *class_named(const cJSON *classes, const char *name)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, classes)
    {
        const char *n = kobj_str(c, "metadata.name");
        if (n && name && strcmp(n, name) == 0)
            return c;
    }
    return NULL;
}

static bool pv_exists(const cJSON *pvs, const char *name)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, pvs)
    {
        const char *n = kobj_str(p, "metadata.name");
        if (n && strcmp(n, name) == 0)
            return true;
    }
    return false;
}

/* The PV for claim (class may be NULL: the claim named our provisioner). */
static cJSON *new_pv(const struct localpv_cfg *cfg, const cJSON *claim, const cJSON *class,
                     const char *pv_name)
{
    cJSON *pv = cJSON_CreateObject();
    json_add_string(pv, "apiVersion", "v1");
    json_add_string(pv, "kind", "PersistentVolume");
    kobj_set_str(pv, "metadata.name", pv_name);
    json_add_string(kobj_obj(pv, "metadata.annotations"), PROVISIONED_BY, prov_of(cfg));
    const char *req = kobj_str(claim, "spec.resources.requests.storage");
    kobj_set_str(pv, "spec.capacity.storage", req ? req : "1Gi");
    const cJSON *modes = kobj_at(claim, "spec.accessModes");
    cJSON *m = cJSON_IsArray(modes) && cJSON_GetArraySize(modes) > 0 ? json_dup(modes) : NULL;
    if (!m) {
        m = cJSON_CreateArray();
        cJSON_AddItemToArray(m, cJSON_CreateString("ReadWriteOnce"));
    }
    kobj_set_item(pv, "spec.accessModes", m);
    const char *vm = kobj_str(claim, "spec.volumeMode");
    kobj_set_str(pv, "spec.volumeMode", vm ? vm : "Filesystem");
    const char *sc = kobj_str(claim, "spec.storageClassName");
    if (sc)
        kobj_set_str(pv, "spec.storageClassName", sc);
    const char *reclaim = kobj_str(class, "reclaimPolicy");
    kobj_set_str(pv, "spec.persistentVolumeReclaimPolicy", reclaim ? reclaim : "Delete");
    char *path = xasprintf("%s/%s", cfg->root, pv_name);
    kobj_set_str(pv, "spec.hostPath.path", path);
    kobj_set_str(pv, "spec.hostPath.type", "DirectoryOrCreate");
    free(path);
    cJSON *ref = kobj_obj(pv, "spec.claimRef");
    json_add_string(ref, "apiVersion", "v1");
    json_add_string(ref, "kind", "PersistentVolumeClaim");
    json_add_string(ref, "namespace", kobj_str(claim, "metadata.namespace"));
    json_add_string(ref, "name", kobj_str(claim, "metadata.name"));
    json_add_string(ref, "uid", kobj_str(claim, "metadata.uid"));
    return pv;
}

/* The directory of a PV we made, when it is ROOT/<one safe name>. */
static char *owned_dir(const struct localpv_cfg *cfg, const cJSON *pv)
{
    const char *path = kobj_str(pv, "spec.hostPath.path");
    size_t rl = strlen(cfg->root);
    if (!path || strncmp(path, cfg->root, rl) != 0 || path[rl] != '/')
        return NULL;
    const char *name = path + rl + 1;
    if (!*name || strchr(name, '/') || name[0] == '.')
        return NULL;
    return xstrdup(path);
}

void localpv_decide(const struct localpv_cfg *cfg, const cJSON *classes, const cJSON *claims,
                    const cJSON *pvs, struct localpv_actions *ret)
{
    *ret = (struct localpv_actions){cJSON_CreateArray(), cJSON_CreateArray(), NULL, 0};
    const char *prov = prov_of(cfg);
    const cJSON *c;
    cJSON_ArrayForEach(c, claims)
    {
        const char *uid = kobj_str(c, "metadata.uid");
        const char *phase = kobj_str(c, "status.phase");
        if (!uid || !kobj_str(c, "metadata.name") || kobj_deleting(c) ||
            kobj_str(c, "spec.volumeName") || (phase && strcmp(phase, "Pending") != 0))
            continue;
        const cJSON *class = class_named(classes, kobj_str(c, "spec.storageClassName"));
        const char *want = class ? kobj_str(class, "provisioner") : annotation(c, CLAIM_PROVISIONER);
        if (!want || strcmp(want, prov) != 0)
            continue;
        char *name = xasprintf("pvc-%s", uid);
        if (!pv_exists(pvs, name))
            cJSON_AddItemToArray(ret->create, new_pv(cfg, c, class, name));
        free(name);
    }
    const cJSON *pv;
    cJSON_ArrayForEach(pv, pvs)
    {
        const char *by = annotation(pv, PROVISIONED_BY);
        const char *phase = kobj_str(pv, "status.phase");
        const char *reclaim = kobj_str(pv, "spec.persistentVolumeReclaimPolicy");
        const char *name = kobj_str(pv, "metadata.name");
        if (!by || strcmp(by, prov) != 0 || !phase || !name || kobj_deleting(pv) ||
            (strcmp(phase, "Released") != 0 && strcmp(phase, "Failed") != 0) ||
            (reclaim && strcmp(reclaim, "Delete") != 0))
            continue;
        cJSON_AddItemToArray(ret->remove, cJSON_CreateString(name));
        ret->dirs = xreallocarray(ret->dirs, ret->ndirs + 1, sizeof *ret->dirs);
        ret->dirs[ret->ndirs++] = owned_dir(cfg, pv);
    }
}

void localpv_actions_done(struct localpv_actions *a)
{
    cJSON_Delete(a->create);
    cJSON_Delete(a->remove);
    for (size_t i = 0; i < a->ndirs; i++)
        free(a->dirs[i]);
    free(a->dirs);
    *a = (struct localpv_actions){0};
}

/* ---- the shell: caches, a queue of what changed, one worker ---- */

struct localpv {
    struct localpv_cfg cfg; /* root is root_copy */
    char *root_copy;
    const struct objstore *s;
    struct informer *classes, *claims, *volumes;
    struct workqueue *q;
    pthread_t worker;
    bool worker_started;
    void (*on_error)(void *ctx, const char *msg);
    void *on_error_ctx;
};

/* What the decision reads of a claim or a volume, and nothing else: with a
 * claim per session the caches hold 10,000 of each. */
static const char *const claim_fields[] = {
    "metadata.name", "metadata.namespace", "metadata.uid", "metadata.resourceVersion",
    "metadata.deletionTimestamp", "spec.volumeName", "spec.storageClassName",
    "spec.resources.requests.storage", "spec.accessModes", "spec.volumeMode", "status.phase",
    NULL};
static const char *const volume_fields[] = {
    "metadata.name", "metadata.resourceVersion", "metadata.deletionTimestamp",
    "spec.persistentVolumeReclaimPolicy", "spec.hostPath.path", "spec.claimRef.namespace",
    "spec.claimRef.name", "status.phase", NULL};

static void keep_only(cJSON *obj, const char *const *fields, const char *annotation_key)
{
    cJSON *kept = cJSON_CreateObject();
    for (size_t i = 0; fields[i]; i++) {
        const cJSON *v = kobj_at(obj, fields[i]);
        if (v)
            kobj_set_item(kept, fields[i], json_dup(v));
    }
    const cJSON *a = json_get(kobj_at(obj, "metadata.annotations"), annotation_key);
    if (cJSON_IsString(a))
        json_add_string(kobj_obj(kept, "metadata.annotations"), annotation_key, a->valuestring);
    while (obj->child)
        cJSON_Delete(cJSON_DetachItemViaPointer(obj, obj->child));
    while (kept->child) {
        cJSON *it = cJSON_DetachItemViaPointer(kept, kept->child);
        cJSON_AddItemToObject(obj, it->string, it);
    }
    cJSON_Delete(kept);
}

void localpv_trim_claim(cJSON *claim)
{
    keep_only(claim, claim_fields, CLAIM_PROVISIONER);
}

void localpv_trim_volume(cJSON *pv)
{
    keep_only(pv, volume_fields, PROVISIONED_BY);
}

static void trim_claim(void *ctx, cJSON *obj)
{
    (void)ctx;
    localpv_trim_claim(obj);
}

static void trim_volume(void *ctx, cJSON *obj)
{
    (void)ctx;
    localpv_trim_volume(obj);
}

static void enqueue(struct localpv *p, char kind, const char *ns, const char *name)
{
    if (!name)
        return;
    char *key = ns ? xasprintf("%c/%s/%s", kind, ns, name) : xasprintf("%c/%s", kind, name);
    workqueue_add(p->q, key);
    free(key);
}

bool localpv_claim_wants_volume(const cJSON *claim)
{
    return !kobj_deleting(claim) && !kobj_str(claim, "spec.volumeName");
}

bool localpv_volume_wants_reclaim(const cJSON *pv)
{
    const char *phase = kobj_str(pv, "status.phase");
    return !kobj_deleting(pv) && phase &&
           (strcmp(phase, "Released") == 0 || strcmp(phase, "Failed") == 0);
}

static void claim_changed(void *ctx, const cJSON *obj)
{
    if (localpv_claim_wants_volume(obj))
        enqueue(ctx, 'c', kobj_str(obj, "metadata.namespace"), kobj_str(obj, "metadata.name"));
}

static void claim_updated(void *ctx, const cJSON *old_obj, const cJSON *obj)
{
    (void)old_obj;
    claim_changed(ctx, obj);
}

static void volume_changed(void *ctx, const cJSON *obj)
{
    if (localpv_volume_wants_reclaim(obj))
        enqueue(ctx, 'v', NULL, kobj_str(obj, "metadata.name"));
}

static void volume_updated(void *ctx, const cJSON *old_obj, const cJSON *obj)
{
    (void)old_obj;
    volume_changed(ctx, obj);
}

/* A volume gone before its claim was bound: the claim may need another. */
static void volume_deleted(void *ctx, const cJSON *obj)
{
    enqueue(ctx, 'c', kobj_str(obj, "spec.claimRef.namespace"),
            kobj_str(obj, "spec.claimRef.name"));
}

/* A class that appears or changes may make waiting claims ours: look at
 * every claim again (the handlers only queue keys; thread-safe). */
static void class_changed(void *ctx, const cJSON *obj)
{
    (void)obj;
    struct localpv *p = ctx;
    informer_resync(p->claims);
}

static void class_updated(void *ctx, const cJSON *old_obj, const cJSON *obj)
{
    (void)old_obj;
    class_changed(ctx, obj);
}

static int collect(void *ctx, const cJSON *obj)
{
    cJSON_AddItemToArray(ctx, json_dup(obj));
    return 0;
}

static int apply(struct localpv *p, struct localpv_actions *a, struct tern_err *err)
{
    int rc = 0;
    const cJSON *pv;
    cJSON_ArrayForEach(pv, a->create)
    {
        struct tern_err e = {0};
        int r = fsutil_mkdirs(kobj_str(pv, "spec.hostPath.path"), 0777, &e);
        if (r == 0)
            r = objstore_create(p->s, "v1/persistentvolumes", "", pv, NULL, &e);
        if (r && r != -EEXIST && !rc)
            rc = err_set(err, r, "persistentvolume %s: %s", kobj_str(pv, "metadata.name"), e.msg);
    }
    for (int i = 0; i < cJSON_GetArraySize(a->remove); i++) {
        const char *name = cJSON_GetArrayItem(a->remove, i)->valuestring;
        struct tern_err e = {0};
        int r = a->dirs[i] ? fsutil_rmtree(a->dirs[i], &e) : 0;
        if (r == 0)
            r = objstore_remove(p->s, "v1/persistentvolumes", "", name, NULL, NULL, &e);
        if (r && r != TERN_ENOTFOUND && !rc)
            rc = err_set(err, r, "persistentvolume %s: %s", name, e.msg);
    }
    return rc;
}

/* One key: "c/<namespace>/<name>" (a claim) or "v/<name>" (a volume),
 * decided from the caches as they are now. */
static int handle(struct localpv *p, const char *key, struct tern_err *err)
{
    cJSON *classes = cJSON_CreateArray(), *claims = cJSON_CreateArray();
    cJSON *pvs = cJSON_CreateArray();
    if (key[0] == 'c') {
        const char *ns = key + 2, *slash = strchr(ns, '/');
        char *nsdup = slash ? xstrndup(ns, (size_t)(slash - ns)) : NULL;
        cJSON *claim = nsdup ? informer_get(p->claims, nsdup, slash + 1) : NULL;
        free(nsdup);
        if (claim) {
            informer_each(p->classes, collect, classes);
            char *pv_name = xasprintf("pvc-%s", kobj_str(claim, "metadata.uid")
                                                    ? kobj_str(claim, "metadata.uid")
                                                    : "");
            cJSON *pv = informer_get(p->volumes, NULL, pv_name);
            free(pv_name);
            if (pv)
                cJSON_AddItemToArray(pvs, pv);
            cJSON_AddItemToArray(claims, claim);
        }
    } else {
        cJSON *pv = informer_get(p->volumes, NULL, key + 2);
        if (pv)
            cJSON_AddItemToArray(pvs, pv);
    }
    struct localpv_actions a;
    localpv_decide(&p->cfg, classes, claims, pvs, &a);
    int rc = apply(p, &a, err);
    localpv_actions_done(&a);
    cJSON_Delete(classes);
    cJSON_Delete(claims);
    cJSON_Delete(pvs);
    return rc;
}

static void *worker_main(void *arg)
{
    struct localpv *p = arg;
    char *key;
    while (workqueue_get(p->q, &key) == 0) {
        struct tern_err err = {0};
        if (handle(p, key, &err)) {
            workqueue_add_rate_limited(p->q, key, NULL);
            if (p->on_error)
                p->on_error(p->on_error_ctx, err.msg);
        } else {
            workqueue_forget(p->q, key);
        }
        workqueue_done(p->q, key);
        free(key);
    }
    return NULL;
}

int localpv_start(struct kubeconfig *kc, const struct objstore *s, const struct localpv_cfg *cfg,
                  void (*on_error)(void *ctx, const char *msg), void *on_error_ctx,
                  struct localpv **ret, struct tern_err *err)
{
    struct localpv *p = xcalloc(1, sizeof *p);
    p->root_copy = xstrdup(cfg->root);
    p->cfg = (struct localpv_cfg){cfg->provisioner, p->root_copy};
    p->s = s;
    p->on_error = on_error;
    p->on_error_ctx = on_error_ctx;
    struct workqueue_opts qo = {.base_delay_ms = 500, .max_delay_ms = 30000};
    p->q = workqueue_new(&qo);
    struct informer_opts classes = {.gvr = {"storage.k8s.io", "v1", "storageclasses"}};
    struct informer_opts claims = {.gvr = {"", "v1", "persistentvolumeclaims"},
                                   .transform = trim_claim};
    struct informer_opts volumes = {.gvr = {"", "v1", "persistentvolumes"},
                                    .transform = trim_volume};
    struct informer_handlers hc = {class_changed, class_updated, NULL, p};
    struct informer_handlers hl = {claim_changed, claim_updated, NULL, p};
    struct informer_handlers hv = {volume_changed, volume_updated, volume_deleted, p};
    p->classes = informer_new(kc, &classes, &hc);
    p->claims = informer_new(kc, &claims, &hl);
    p->volumes = informer_new(kc, &volumes, &hv);
    int rc = 0;
    if (pthread_create(&p->worker, NULL, worker_main, p) != 0) {
        rc = err_set(err, -EAGAIN, "cannot start the provisioner thread");
        goto fail;
    }
    p->worker_started = true;
    /* claims and volumes first: a class's resync walks the claims' cache */
    int r;
    if ((r = informer_start(p->claims)) || (r = informer_start(p->volumes)) ||
        (r = informer_start(p->classes))) {
        rc = err_set(err, r, "cannot start the provisioner's watches: %s", strerror(-r));
        goto fail;
    }
    *ret = p;
    return 0;
fail:
    localpv_stop(p);
    return rc;
}

void localpv_stop(struct localpv *p)
{
    if (!p)
        return;
    informer_cancel(p->classes);
    informer_cancel(p->claims);
    informer_cancel(p->volumes);
    informer_free(p->classes); /* joins; its handler may resync the claims */
    informer_free(p->claims);
    informer_free(p->volumes);
    workqueue_shutdown(p->q);
    if (p->worker_started)
        pthread_join(p->worker, NULL);
    workqueue_drain(p->q);
    workqueue_free(p->q);
    free(p->root_copy);
    free(p);
}
