/* devctl.h - tern-dev's controllers (the shell around the pure decisions):
 * Job (jobctl.h), Deployment (deployctl.h), garbage collector (gc.h),
 * namespace lifecycle, default ServiceAccounts and PVC binding, acting
 * through an objstore (objstore.h).
 *
 * Level-triggered: devctl_sync brings its cache of every resource it needs
 * up to date (objcache.h: listed once, then the store's changes), decides
 * over the whole lists, writes the differences, and reports when a
 * time-driven change is due; devctl_run loops sync + objstore wait until
 * *stop. Writes that conflict are dropped and retried at the next sync. A
 * sync that finds nothing changed since a pass that met no error, before
 * its time-driven change is due and within 10 s of it, decides nothing
 * (the decision would be the same).
 *
 * Namespace lifecycle: "default" is created when missing; every active
 * namespace gets a ServiceAccount "default". A deleting namespace has every
 * object of the namespaced resources below deleted; when none is left its
 * spec.finalizers ("kubernetes") is cleared by an update, so the store
 * removes it.
 *
 * PVC binding: an unbound claim gets the directory VOLDIR/<ns>/<uid>
 * (mode 0777: pods run under various uids), spec.volumeName
 * "pvc-<uid>", the finalizer kubernetes.io/pvc-protection, and status
 * {phase: Bound, accessModes, capacity.storage = requested}. No
 * PersistentVolume object is created. When the claim is deleted and no
 * running pod (not Succeeded/Failed) uses it, the directory is removed and the
 * finalizer dropped.
 */
#ifndef TERN_DEVCTL_H
#define TERN_DEVCTL_H

#include "base/err.h"
#include "devctl/jobctl.h"
#include "devctl/objstore.h"

#include <stdint.h>

struct devctl_cfg {
    const char *volume_dir;     /* PVC directories: VOLDIR/<ns>/<pvc-uid> */
    struct jobctl_cfg job;      /* backoff; {10, 600} in Kubernetes */
    /* extra resources the GC and namespace deletion cover, as
     * "<gvr>=<Kind>", e.g. "tern.dev/v1alpha1/agentsessions=AgentSession" */
    const char *const *extra;
    size_t nextra;
};

struct devctl;

/* Borrows store (must outlive the controller); copies cfg. Never fails. */
struct devctl *devctl_new(const struct objstore *store, const struct devctl_cfg *cfg);
void devctl_free(struct devctl *d);

/* One pass of every controller at time now (Unix seconds). Returns 0 or the
 * first error met (the pass continues past errors); *ret_next (may be NULL)
 * receives the seconds until a time-driven change (-1 none). */
int devctl_sync(struct devctl *d, int64_t now, int64_t *ret_next, struct tern_err *err);

/* Loops: sync, then wait for a store change (at most the requeue time,
 * capped at max_wait_ms) until *stop becomes non-zero. Returns 0. */
int devctl_run(struct devctl *d, volatile int *stop, int max_wait_ms);

#endif
