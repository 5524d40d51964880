/* objstore.h - the object-store interface tern-dev's controllers and kubelet
 * act through, and an in-memory implementation (for tests and for running
 * the controllers without the API server).
 *
 * Objects are Kubernetes JSON objects (cJSON trees). A resource is named by
 * its "gvr" string: the apiVersion, a slash, the plural resource:
 * "v1/pods", "v1/namespaces", "batch/v1/jobs", "apps/v1/deployments".
 * ns is the namespace ("" or NULL for cluster-scoped resources; for list,
 * NULL means all namespaces).
 *
 * Every operation returns 0 or a negative code:
 *   TERN_ENOTFOUND  the object (or, on create, its namespace) does not exist
 *   -EEXIST         create of an existing name (AlreadyExists)
 *   TERN_ECONFLICT  metadata.resourceVersion (update) or a delete
 *                   precondition did not match (Conflict)
 *   TERN_EINVALID   the object is unacceptable (no name, wrong kind, ...)
 *   TERN_ETIMEOUT   wait: nothing changed in time
 * Objects returned through ret_* are new trees owned by the caller; input
 * objects are only read. The storage must give these semantics (they are
 * kube-apiserver's, reduced to what the controllers rely on):
 *
 *  create  sets metadata.uid, creationTimestamp, resourceVersion, generation
 *          1, fills metadata.name from generateName + 5 random [a-z0-9]
 *          characters when name is empty. Keeps status as given.
 *  update  replaces the object except status (kept from the stored one) when
 *          metadata.resourceVersion equals the stored one (absent = no
 *          precondition); bumps generation when spec changed; refuses new
 *          finalizers while deleting. A deleting object whose finalizers
 *          become empty is removed (pods only once their
 *          deletionGracePeriodSeconds is 0). For namespaces, update may
 *          change spec.finalizers (standing in for the namespaces/finalize
 *          subresource): a deleting namespace with neither metadata nor spec
 *          finalizers is removed.
 *  update_status  replaces only status (same precondition).
 *  remove  delete with options: preconditions uid / resourceVersion.
 *          Pods bound to a node (spec.nodeName) and not Succeeded/Failed are
 *          deleted gracefully: deletionTimestamp = now + grace,
 *          deletionGracePeriodSeconds = grace (the kubelet stops the pod and
 *          deletes again with grace 0). propagation "Foreground" adds the
 *          finalizer foregroundDeletion, "Orphan" adds "orphan", otherwise
 *          background. Namespaces get status.phase Terminating and are kept
 *          until spec.finalizers ["kubernetes"] is cleared. An object with
 *          finalizers gets deletionTimestamp (now) and
 *          deletionGracePeriodSeconds 0 and stays; else it is removed.
 *          ret_obj (may be NULL) receives the object if it still exists,
 *          else NULL.
 *  bind    sets spec.nodeName of an unbound pod (pods/binding); TERN_ECONFLICT
 *          when it is already bound elsewhere.
 *  wait    blocks until the store's revision passes after_rv (a
 *          resourceVersion seen in a list), or timeout_ms: the controllers
 *          are level-triggered and relist after each change.
 */
#ifndef TERN_OBJSTORE_H
#define TERN_OBJSTORE_H

#include "base/err.h"

#include <cJSON.h>
#include <stdint.h>

struct objstore_delete_opts {
    const char *propagation;      /* NULL, "Background", "Foreground", "Orphan" */
    int64_t grace_seconds;        /* -1: the object's default */
    const char *uid;              /* precondition, or NULL */
    const char *resource_version; /* precondition, or NULL */
};

struct objstore_ops {
    int (*get)(void *ctx, const char *gvr, const char *ns, const char *name, cJSON **ret,
               struct tern_err *err);
    /* ret: a list object {"metadata":{"resourceVersion":RV},"items":[...]} */
    int (*list)(void *ctx, const char *gvr, const char *ns, cJSON **ret, struct tern_err *err);
    int (*create)(void *ctx, const char *gvr, const char *ns, const cJSON *obj, cJSON **ret,
                  struct tern_err *err);
    int (*update)(void *ctx, const char *gvr, const char *ns, const cJSON *obj, cJSON **ret,
                  struct tern_err *err);
    int (*update_status)(void *ctx, const char *gvr, const char *ns, const cJSON *obj,
                         cJSON **ret, struct tern_err *err);
    int (*remove)(void *ctx, const char *gvr, const char *ns, const char *name,
                  const struct objstore_delete_opts *opts, cJSON **ret_obj,
                  struct tern_err *err);
    int (*wait)(void *ctx, const char *after_rv, int timeout_ms, struct tern_err *err);
    int (*bind)(void *ctx, const char *ns, const char *name, const char *node,
                struct tern_err *err);
};

struct objstore {
    const struct objstore_ops *ops;
    void *ctx;
};

/* Thin wrappers calling s->ops (ret may be NULL where the result is not
 * needed). */
int objstore_get(const struct objstore *s, const char *gvr, const char *ns, const char *name,
                 cJSON **ret, struct tern_err *err);
int objstore_list(const struct objstore *s, const char *gvr, const char *ns, cJSON **ret,
                  struct tern_err *err);
int objstore_create(const struct objstore *s, const char *gvr, const char *ns, const cJSON *obj,
                    cJSON **ret, struct tern_err *err);
int objstore_update(const struct objstore *s, const char *gvr, const char *ns, const cJSON *obj,
                    cJSON **ret, struct tern_err *err);
int objstore_update_status(const struct objstore *s, const char *gvr, const char *ns,
                           const cJSON *obj, cJSON **ret, struct tern_err *err);
/* opts NULL = defaults (no preconditions, background, default grace). */
int objstore_remove(const struct objstore *s, const char *gvr, const char *ns, const char *name,
                    const struct objstore_delete_opts *opts, cJSON **ret_obj,
                    struct tern_err *err);
int objstore_wait(const struct objstore *s, const char *after_rv, int timeout_ms,
                  struct tern_err *err);
int objstore_bind(const struct objstore *s, const char *ns, const char *name, const char *node,
                  struct tern_err *err);

/* The gvr string of an object ("<apiVersion>/<plural>") from its apiVersion
 * and kind, for the kinds tern-dev serves; NULL for unknown kinds. The result
 * is static or written into out (at least 256 bytes). */
const char *objstore_gvr_of(const cJSON *obj, char out[256]);

/* In-memory store. now_fn (may be NULL = time()) gives the clock in Unix
 * seconds, so tests can move time. Thread-safe. */
struct memstore;
struct memstore *memstore_new(int64_t (*now_fn)(void *), void *now_ctx);
void memstore_free(struct memstore *m);
/* The objstore view of m (valid while m lives). */
struct objstore memstore_objstore(struct memstore *m);
/* The current revision. */
int64_t memstore_revision(struct memstore *m);
/* Number of stored objects of gvr (all namespaces). */
int memstore_count(struct memstore *m, const char *gvr);

#endif
