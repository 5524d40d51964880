/* deployctl.h - the apps/v1 Deployment controller's decision (pure).
 *
 * Design: a Deployment owns its pods directly (no ReplicaSet objects: tern
 * needs replicas of one pod template and nothing more). Each pod carries
 * the label pod-template-hash = deployctl_template_hash(spec.template), an
 * ownerReference to the Deployment (controller, blockOwnerDeletion) and the
 * template's labels. Every template change is rolled out by Recreate,
 * whatever spec.strategy says: pods of another hash are deleted first, and
 * new pods are created only once none of them is left.
 *
 * Replicas: spec.replicas (default 1) active pods of the current hash;
 * terminal pods (Succeeded/Failed) are deleted and replaced; extra pods are
 * deleted. Status: observedGeneration, replicas (non-terminal pods),
 * updatedReplicas (current hash, not deleting), readyReplicas and
 * availableReplicas (Ready=True for at least spec.minReadySeconds),
 * unavailableReplicas, conditions Available (MinimumReplicasAvailable /
 * MinimumReplicasUnavailable) and Progressing (NewReplicaSetAvailable when
 * the rollout is done, else ReplicaSetUpdated).
 */
#ifndef TERN_DEPLOYCTL_H
#define TERN_DEPLOYCTL_H

#include "base/err.h"

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

enum deployctl_act {
    DEPLOYCTL_CREATE_POD, /* obj: the pod (generateName set) */
    DEPLOYCTL_DELETE_POD, /* name */
};

struct deployctl_action {
    enum deployctl_act kind;
    cJSON *obj;       /* owned */
    const char *name; /* borrowed from the input */
};

struct deployctl_out {
    struct deployctl_action *acts;
    size_t nacts;
    cJSON *status;         /* owned: the full new status */
    int64_t requeue_after; /* seconds, -1 none */
};

/* A 10-character hash of the pod template (stable across runs). out must
 * hold 11 bytes; returns out. */
char *deployctl_template_hash(const cJSON *template_, char out[11]);

/* Decides for one Deployment and the pods it controls. Returns 0, or
 * TERN_EINVALID without metadata.uid/name or spec.template. Release *ret
 * with deployctl_out_done. */
int deployctl_reconcile(const cJSON *dep, const cJSON *const *pods, size_t npods, int64_t now,
                        struct deployctl_out *ret, struct tern_err *err);
void deployctl_out_done(struct deployctl_out *o);

#endif
