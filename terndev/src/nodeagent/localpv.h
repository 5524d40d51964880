/* localpv.h - tern-node's local-path volume provisioner: what a cluster's
 * storage plugin does for claims of a StorageClass whose provisioner is
 * ours (tern-node's: "tern.dev/local-path"), with one directory per claim on
 * the node.
 *
 * Decision (pure, localpv_decide): for each claim that is Pending, not being
 * deleted, without spec.volumeName, whose class (spec.storageClassName, or
 * the annotation volume.kubernetes.io/storage-provisioner the PV controller
 * sets) is served by us: a PersistentVolume "pvc-<claim uid>" pre-bound to
 * it (claimRef with uid), hostPath ROOT/pvc-<claim uid> (DirectoryOrCreate),
 * the claim's requested storage and access modes, the class's reclaim
 * policy (Delete when unset), annotation pv.kubernetes.io/provisioned-by.
 * The cluster's PV controller binds the two. For each PV we provisioned
 * that is Released or Failed with reclaim policy Delete: remove its
 * directory (only when it lies directly under ROOT) and delete the PV.
 *
 * Shell (localpv_sync): lists StorageClasses, claims and PVs through an
 * objstore, applies the decision; AlreadyExists and NotFound are success
 * (another pass did it), other failures are returned after the rest ran.
 */
#ifndef TERN_LOCALPV_H
#define TERN_LOCALPV_H

#include "base/err.h"
#include "devctl/objstore.h"

#include <cJSON.h>
#include <stddef.h>

#define LOCALPV_PROVISIONER "tern.dev/local-path"

struct localpv_cfg {
    const char *provisioner; /* LOCALPV_PROVISIONER when NULL */
    const char *root;        /* absolute directory holding the volumes */
};

struct localpv_actions {
    cJSON *create;    /* array of PersistentVolume objects to create */
    cJSON *remove;    /* array of PV names to delete */
    char **dirs;      /* directories to remove first, one per remove entry (or NULL) */
    size_t ndirs;
};

/* Decides over the three lists' items arrays (any may be NULL). */
void localpv_decide(const struct localpv_cfg *cfg, const cJSON *classes, const cJSON *claims,
                    const cJSON *pvs, struct localpv_actions *ret);
void localpv_actions_done(struct localpv_actions *a);

/* One pass through s. */
int localpv_sync(const struct objstore *s, const struct localpv_cfg *cfg, struct tern_err *err);

#endif
