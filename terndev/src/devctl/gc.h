/* gc.h - the garbage collector's decision over an object graph (pure).
 *
 * Input: every object of the resources the collector watches, each with its
 * gvr. Owners are found by uid (metadata.ownerReferences[].uid). An owner
 * reference whose apiVersion/kind is not among the watched resources is
 * treated as present (never collected on its account).
 *
 * Decisions, as kube-controller-manager's garbage collector makes them:
 *  - background: a dependent all of whose owners are absent is deleted
 *    (GC_DELETE, background; the shell re-reads the owners by name first and
 *    skips the delete if one exists with the referenced uid: the graph is a
 *    list snapshot and may be stale); a dependent with some owners absent
 *    loses the dangling references (GC_REMOVE_REFS);
 *  - foreground: an owner deleting with finalizer foregroundDeletion gets its
 *    dependents deleted with propagation Foreground; once no dependent with
 *    blockOwnerDeletion=true remains, the finalizer is removed
 *    (GC_REMOVE_FINALIZER); dependents whose remaining owners are all
 *    foreground-deleting are deleted too;
 *  - orphan: an owner deleting with finalizer "orphan" has its reference
 *    removed from every dependent (GC_REMOVE_REFS), then the finalizer is
 *    removed.
 */
#ifndef TERN_GC_H
#define TERN_GC_H

#include <cJSON.h>
#include <stddef.h>

struct gc_obj {
    const char *gvr;
    const cJSON *obj;
};

enum gc_act {
    GC_DELETE,           /* delete objs[idx] with propagation */
    GC_REMOVE_REFS,      /* drop ownerReferences of objs[idx] whose uid is in uids */
    GC_REMOVE_FINALIZER, /* drop finalizer from objs[idx] */
};

struct gc_action {
    enum gc_act kind;
    size_t idx;
    const char *propagation; /* GC_DELETE: "Background" or "Foreground" */
    const char *finalizer;   /* GC_REMOVE_FINALIZER: static string */
    const char **uids;       /* GC_REMOVE_REFS: borrowed from the input, owned array */
    size_t nuids;
};

struct gc_plan {
    struct gc_action *acts;
    size_t n;
};

/* Decides over objs[0..n). kinds[0..nkinds) are the watched kinds as
 * "<apiVersion>/<Kind>" ("batch/v1/Job", "v1/Pod"): a reference to another
 * kind never makes its dependent collectable. Always succeeds; release with
 * gc_plan_done. */
void gc_decide(const struct gc_obj *objs, size_t n, const char *const *kinds, size_t nkinds,
               struct gc_plan *ret);
void gc_plan_done(struct gc_plan *p);

/* Applies a GC_REMOVE_REFS action to a copy of the object (caller owns). */
cJSON *gc_without_refs(const cJSON *obj, const char *const *uids, size_t nuids);

#endif
