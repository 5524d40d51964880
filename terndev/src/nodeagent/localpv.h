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
 * Shell (localpv_start): informers keep StorageClasses, claims and PVs
 * (claims and PVs trimmed to what the decision reads) and queue the key of
 * each claim without a volume and each Released or Failed PV as it changes;
 * a class that changes queues every claim again. One worker decides each
 * key from the caches as they are then (the claim, the classes and the
 * claim's PV if cached) and applies it through an objstore; AlreadyExists
 * and NotFound are success (a repeat), another failure is reported through
 * on_error and the key retried with backoff (0.5 s doubling to 30 s). The
 * work is proportional to what changed, not to how many claims exist: with
 * 10,000 bound claims nothing runs (a pass listing them all took most of a
 * core and outgrew the client's response bound).
 */
#ifndef TERN_LOCALPV_H
#define TERN_LOCALPV_H

#include "base/err.h"
#include "devctl/objstore.h"
#include "kube/kubeconfig.h"

#include <cJSON.h>
#include <stdbool.h>
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

/* The handlers' filters: a claim that may need a volume (not deleting, no
 * spec.volumeName), a PV that may need reclaiming (Released or Failed, not
 * deleting). localpv_decide checks the rest. */
bool localpv_claim_wants_volume(const cJSON *claim);
bool localpv_volume_wants_reclaim(const cJSON *pv);
/* Reduce a claim or a PV in place to what the decision and the filters
 * read (what the caches keep). */
void localpv_trim_claim(cJSON *claim);
void localpv_trim_volume(cJSON *pv);

struct localpv;

/* Starts the informers (on kc, borrowed; each has its own client) and the
 * worker; creates and deletes through s (borrowed). cfg is copied. Both
 * must outlive the provisioner. Returns 0 and *ret, or an error. */
int localpv_start(struct kubeconfig *kc, const struct objstore *s, const struct localpv_cfg *cfg,
                  void (*on_error)(void *ctx, const char *msg), void *on_error_ctx,
                  struct localpv **ret, struct tern_err *err);
/* Stops the informers and the worker and frees. Accepts NULL. */
void localpv_stop(struct localpv *p);

#endif
