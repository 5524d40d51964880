/* localpv.c - the local-path provisioner (see localpv.h): the pure decision
 * over StorageClasses, claims and PersistentVolumes, and the pass that
 * applies it through an objstore. */
#include "nodeagent/localpv.h"

#include "base/mem.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <errno.h>
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

static cJSON *items(const struct objstore *s, const char *gvr, int *rc, struct tern_err *err)
{
    cJSON *l = NULL;
    int r = objstore_list(s, gvr, NULL, &l, err);
    if (r) {
        if (!*rc)
            *rc = r;
        return NULL;
    }
    cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(l, "items");
    cJSON_Delete(l);
    return it;
}

int localpv_sync(const struct objstore *s, const struct localpv_cfg *cfg, struct tern_err *err)
{
    int rc = 0;
    cJSON *classes = items(s, "storage.k8s.io/v1/storageclasses", &rc, err);
    cJSON *claims = items(s, "v1/persistentvolumeclaims", &rc, err);
    cJSON *pvs = items(s, "v1/persistentvolumes", &rc, err);
    if (rc || !claims || !pvs)
        goto out;
    struct localpv_actions a;
    localpv_decide(cfg, classes, claims, pvs, &a);
    const cJSON *pv;
    cJSON_ArrayForEach(pv, a.create)
    {
        struct tern_err e = {0};
        int r = fsutil_mkdirs(kobj_str(pv, "spec.hostPath.path"), 0777, &e);
        if (r == 0)
            r = objstore_create(s, "v1/persistentvolumes", "", pv, NULL, &e);
        if (r && r != -EEXIST && !rc)
            rc = err_set(err, r, "persistentvolume %s: %s", kobj_str(pv, "metadata.name"), e.msg);
    }
    for (int i = 0; i < cJSON_GetArraySize(a.remove); i++) {
        const char *name = cJSON_GetArrayItem(a.remove, i)->valuestring;
        struct tern_err e = {0};
        int r = a.dirs[i] ? fsutil_rmtree(a.dirs[i], &e) : 0;
        if (r == 0)
            r = objstore_remove(s, "v1/persistentvolumes", "", name, NULL, NULL, &e);
        if (r && r != TERN_ENOTFOUND && !rc)
            rc = err_set(err, r, "persistentvolume %s: %s", name, e.msg);
    }
    localpv_actions_done(&a);
out:
    cJSON_Delete(classes);
    cJSON_Delete(claims);
    cJSON_Delete(pvs);
    return rc;
}
