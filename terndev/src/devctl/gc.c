/* gc.c - garbage collector decision. See gc.h. */
#include "gc.h"

#include "base/mem.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void push(struct gc_plan *p, struct gc_action a)
{
    p->acts = xreallocarray(p->acts, p->n + 1, sizeof *p->acts);
    p->acts[p->n++] = a;
}

void gc_plan_done(struct gc_plan *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->acts[i].uids);
    free(p->acts);
    p->acts = NULL;
    p->n = 0;
}

/* Owners are looked up by uid in a sorted index (one lookup per owner
 * reference: a linear scan made a pass quadratic in the number of objects,
 * which dominated tern-dev's CPU with a few thousand sessions). */
struct uid_ix {
    const char *uid;
    size_t idx;
};

static int uid_cmp(const void *a, const void *b)
{
    const struct uid_ix *x = a, *y = b;
    int c = strcmp(x->uid, y->uid);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* The index of objs' uids, sorted; *ret_n entries. Caller frees. */
static struct uid_ix *uid_index(const struct gc_obj *objs, size_t n, size_t *ret_n)
{
    struct uid_ix *ix = xcalloc(n ? n : 1, sizeof *ix);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const char *u = kobj_str(objs[i].obj, "metadata.uid");
        if (u)
            ix[m++] = (struct uid_ix){u, i};
    }
    qsort(ix, m, sizeof *ix, uid_cmp);
    *ret_n = m;
    return ix;
}

/* The first object (lowest index) with uid, or -1. */
static long find_uid(const struct uid_ix *ix, size_t m, const char *uid)
{
    if (!uid)
        return -1;
    size_t lo = 0, hi = m;
    while (lo < hi) { /* first entry >= uid */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ix[mid].uid, uid) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m && strcmp(ix[lo].uid, uid) == 0 ? (long)ix[lo].idx : -1;
}

/* True when "<av>/<kind>" is among the watched kinds. */
static bool kind_watched(const char *const *kinds, size_t nkinds, const char *av, const char *kind)
{
    if (!av || !kind)
        return false;
    size_t la = strlen(av);
    for (size_t i = 0; i < nkinds; i++) {
        if (strncmp(kinds[i], av, la) == 0 && kinds[i][la] == '/' &&
            strcmp(kinds[i] + la + 1, kind) == 0)
            return true;
    }
    return false;
}

static bool has_dependents(const struct gc_obj *objs, size_t n, const char *uid, bool blocking_only)
{
    for (size_t i = 0; i < n; i++) {
        const cJSON *r;
        cJSON_ArrayForEach(r, kobj_at(objs[i].obj, "metadata.ownerReferences"))
        {
            const char *u = kobj_str(r, "uid");
            if (u && uid && strcmp(u, uid) == 0 &&
                (!blocking_only || kobj_bool(r, "blockOwnerDeletion", false)))
                return true;
        }
    }
    return false;
}

void gc_decide(const struct gc_obj *objs, size_t n, const char *const *kinds, size_t nkinds,
               struct gc_plan *ret)
{
    struct gc_plan p = {0};
    size_t m = 0;
    struct uid_ix *ix = uid_index(objs, n, &m);
    for (size_t i = 0; i < n; i++) {
        const cJSON *o = objs[i].obj;
        const char *uid = kobj_str(o, "metadata.uid");
        /* owner side: orphan and foreground finalizers */
        if (kobj_deleting(o) && kobj_has_finalizer(o, "orphan")) {
            bool any = false;
            for (size_t k = 0; k < n; k++) {
                if (k != i && kobj_has_owner_uid(objs[k].obj, uid)) {
                    const char **u = xmalloc(sizeof *u);
                    u[0] = uid;
                    push(&p, (struct gc_action){.kind = GC_REMOVE_REFS, .idx = k, .uids = u,
                                                .nuids = 1});
                    any = true;
                }
            }
            if (!any)
                push(&p, (struct gc_action){.kind = GC_REMOVE_FINALIZER, .idx = i,
                                            .finalizer = "orphan"});
        }
        if (kobj_deleting(o) && kobj_has_finalizer(o, "foregroundDeletion") &&
            !kobj_has_finalizer(o, "orphan")) {
            if (!has_dependents(objs, n, uid, true))
                push(&p, (struct gc_action){.kind = GC_REMOVE_FINALIZER, .idx = i,
                                            .finalizer = "foregroundDeletion"});
        }

        /* dependent side */
        const cJSON *refs = kobj_at(o, "metadata.ownerReferences");
        int nrefs = cJSON_GetArraySize(refs);
        if (nrefs == 0)
            continue;
        int absent = 0, foreground = 0, present = 0;
        const char **dangling = xcalloc((size_t)nrefs, sizeof *dangling);
        const cJSON *r;
        cJSON_ArrayForEach(r, refs)
        {
            const char *ruid = kobj_str(r, "uid");
            long oi = find_uid(ix, m, ruid);
            if (oi < 0) {
                if (kind_watched(kinds, nkinds, kobj_str(r, "apiVersion"), kobj_str(r, "kind"))) {
                    dangling[absent++] = ruid;
                } else {
                    present++; /* unknown kind: assume it exists */
                }
                continue;
            }
            const cJSON *owner = objs[oi].obj;
            if (kobj_deleting(owner) && kobj_has_finalizer(owner, "foregroundDeletion") &&
                !kobj_has_finalizer(owner, "orphan"))
                foreground++;
            else if (kobj_deleting(owner) && kobj_has_finalizer(owner, "orphan"))
                present++; /* about to lose this reference: not a reason to delete */
            else
                present++;
        }
        if (present == 0 && foreground > 0) {
            if (!kobj_deleting(o))
                push(&p, (struct gc_action){.kind = GC_DELETE, .idx = i,
                                            .propagation = "Foreground"});
            free(dangling);
        } else if (present == 0 && absent > 0) {
            if (!kobj_deleting(o))
                push(&p, (struct gc_action){.kind = GC_DELETE, .idx = i,
                                            .propagation = "Background"});
            free(dangling);
        } else if (absent > 0) {
            push(&p, (struct gc_action){.kind = GC_REMOVE_REFS, .idx = i, .uids = dangling,
                                        .nuids = (size_t)absent});
        } else {
            free(dangling);
        }
    }
    free(ix);
    *ret = p;
}

cJSON *gc_without_refs(const cJSON *obj, const char *const *uids, size_t nuids)
{
    cJSON *c = json_dup(obj);
    cJSON *md = (cJSON *)kobj_at(c, "metadata");
    cJSON *refs = cJSON_GetObjectItemCaseSensitive(md, "ownerReferences");
    int i = 0;
    cJSON *r = refs ? refs->child : NULL;
    while (r) {
        cJSON *next = r->next;
        const char *u = kobj_str(r, "uid");
        bool drop = false;
        for (size_t k = 0; k < nuids && u; k++)
            drop |= strcmp(u, uids[k]) == 0;
        if (drop)
            cJSON_DeleteItemFromArray(refs, i);
        else
            i++;
        r = next;
    }
    if (refs && cJSON_GetArraySize(refs) == 0)
        cJSON_DeleteItemFromObjectCaseSensitive(md, "ownerReferences");
    return c;
}
