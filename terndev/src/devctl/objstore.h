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
 *          are level-triggered and look again after each change.
 *  changes (optional) every change of the resources gvrs[0..n) after
 *          after_rv, oldest first, each with the object after it (for a
 *          deletion: its last state, or only its namespace and name), and
 *          ret->rv: every change up to it was returned. ret->rv is at
 *          least the store's revision when the call began, so a caller
 *          sees its own earlier writes (a watch-driven cache reads its
 *          writes). TERN_ECOMPACTED: after_rv is older than the window of
 *          changes the store keeps (list again). -ENOTSUP: the store keeps
 *          none (list every time); with n == 0 the call only says which
 *          (0 or -ENOTSUP, see objstore_has_changes).
 */
#ifndef TERN_OBJSTORE_H
#define TERN_OBJSTORE_H

#include "base/err.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct objstore_delete_opts {
    const char *propagation;      /* NULL, "Background", "Foreground", "Orphan" */
    int64_t grace_seconds;        /* -1: the object's default */
    const char *uid;              /* precondition, or NULL */
    const char *resource_version; /* precondition, or NULL */
};

/* One change of objstore_changes. */
struct objstore_change {
    size_t which;  /* index into the gvrs asked for */
    bool deleted;  /* else created or modified */
    int64_t rev;   /* the change's revision (the object's resourceVersion) */
    cJSON *obj;    /* owned by the struct objstore_changes */
};

struct objstore_changes {
    struct objstore_change *v;
    size_t n, cap;
    char rv[24];   /* complete up to this revision */
};

/* Appends a change (takes obj). */
void objstore_changes_add(struct objstore_changes *c, size_t which, bool deleted, int64_t rev,
                          cJSON *obj);
/* Frees the changes and zeroes c. Accepts a zeroed c. */
void objstore_changes_done(struct objstore_changes *c);

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
    /* NULL: the store keeps no changes (objstore_changes answers -ENOTSUP) */
    int (*changes)(void *ctx, const char *const *gvrs, size_t n, const char *after_rv,
                   struct objstore_changes *ret, struct tern_err *err);
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
/* ret must be zeroed; release it with objstore_changes_done (also on
 * errors). */
int objstore_changes(const struct objstore *s, const char *const *gvrs, size_t n,
                     const char *after_rv, struct objstore_changes *ret, struct tern_err *err);
/* Whether s provides changes (else a cache of it lists every time). */
bool objstore_has_changes(const struct objstore *s);

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
/* The changes it keeps for objstore_changes: the last max (default 4096;
 * at least 1); older ones are forgotten (TERN_ECOMPACTED). */
void memstore_set_window(struct memstore *m, size_t max);
/* Number of list operations served so far (tests: a watch-driven cache
 * lists once). */
uint64_t memstore_lists(struct memstore *m);

#endif
