/* apirest_crud.c - create, get and update of objects: POST (with the
 * namespace check), GET, PUT (resourceVersion preconditions, retries on
 * conflicts, status and finalize subresources) and PATCH (JSON patch,
 * merge patch, strategic merge patch, server-side apply as a merge that
 * may create), and the CRD reload after a CRD write. See
 * apirest_internal.h. */
#include "apirest_internal.h"

#include "apievent.h"
#include "apipatch.h"
#include "apistatus.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- create and get ------------------------------------------------------ */

/* After a CRD write: reload the CRDs into a new resource table. */
void apirest__reload_crds(struct apirest *s)
{
    struct apires_table *t = apires_get(&s->reg);
    const struct apires *crdres = apires_find(t, "apiextensions.k8s.io", "v1",
                                              "customresourcedefinitions");
    char *prefix = apires_key(crdres, NULL, NULL);
    apires_put(&s->reg, t);
    struct apistore_list l = {0};
    if (apistore_list(&s->store, prefix, NULL, 0, 0, &l, NULL) == 0) {
        cJSON *arr = cJSON_CreateArray();
        for (size_t i = 0; i < l.n; i++) {
            cJSON_AddItemToArray(arr, l.objs[i]);
            l.objs[i] = NULL;
        }
        apires_registry_set_crds(&s->reg, arr);
        l.n = 0;
    }
    apistore_list_done(&l);
    free(prefix);
}

/* Checks that the namespace exists and is not terminating. */
static cJSON *check_namespace(struct rq *q)
{
    if (!q->res->namespaced)
        return NULL;
    char *key = xasprintf("/registry/namespaces/%s", q->ns);
    cJSON *nsobj = NULL;
    int rc = apistore_get(&q->s->store, key, &nsobj, NULL, NULL);
    free(key);
    if (rc == TERN_ENOTFOUND)
        return apistatus_not_found("", "namespaces", q->ns);
    if (rc)
        return apirest__status_from_store(rc, q->res, q->ns, NULL);
    cJSON *st = NULL;
    if (apirest__jstr(json_get(nsobj, "metadata"), "deletionTimestamp")) {
        char *m = xasprintf("unable to create new content in namespace %s because it is being "
                            "terminated",
                            q->ns);
        st = apistatus_forbidden(q->res->group, q->res->plural,
                                 apirest__jstr(json_get(nsobj, "metadata"), "name"), m);
        apistatus_add_cause(st, "NamespaceTerminating", m, NULL);
        free(m);
    }
    cJSON_Delete(nsobj);
    return st;
}

void apirest__after_write(struct rq *q, int64_t rev)
{
    if (apirest__is_crd(q->res)) {
        pthread_mutex_lock(&q->s->crd_mu);
        apirest__reload_crds(q->s);
        pthread_mutex_unlock(&q->s->crd_mu);
    }
    /* no need to wait for the hub: a watch started after this reply starts
     * after a revision >= rev and the hub delivers in revision order */
    (void)rev;
}

void apirest__handle_create(struct rq *q)
{
    cJSON *obj = NULL;
    char dup[256];
    cJSON *st = apirest__decode_body(q, &obj, dup, false);
    if (st)
        goto fail;
    st = apirest__prepare_create(q, obj, dup);
    if (st)
        goto fail;
    q->name = apirest__jstr(json_get(obj, "metadata"), "name");
    st = check_namespace(q);
    if (st)
        goto fail;
    if (q->dry_run) {
        apirest__respond_object(q, 201, obj);
        return;
    }
    char *key = apirest__obj_key(q);
    int64_t rev = 0;
    struct tern_err e = {0};
    apirest__to_storage_version(q->res, obj);
    int rc = apistore_create(&q->s->store, key, obj, &rev, &e);
    free(key);
    if (rc == TERN_ECONFLICT) {
        st = apistatus_already_exists(q->res->group, q->res->plural, q->name);
        goto fail;
    }
    if (rc) {
        st = apirest__status_from_store(rc, q->res, q->name, &e);
        goto fail;
    }
    char b[21];
    apirest__set_str(apirest__ensure_obj(obj, "metadata"), "resourceVersion", num_fmt_i64(rev, b));
    apirest__after_write(q, rev);
    apirest__respond_object(q, 201, obj);
    return;
fail:
    cJSON_Delete(obj);
    apirest__respond_status(q->resp, st);
}

void apirest__handle_get(struct rq *q)
{
    char *key = apirest__obj_key(q);
    cJSON *obj = NULL;
    struct tern_err e = {0};
    int rc = apistore_get(&q->s->store, key, &obj, NULL, &e);
    free(key);
    if (rc) {
        apirest__respond_status(q->resp, apirest__status_from_store(rc, q->res, q->name, &e));
        return;
    }
    apirest__respond_object(q, 200, obj);
}

/* ---- update and patch ---------------------------------------------------- */

enum mut_kind { MUT_PUT, MUT_JSONPATCH, MUT_MERGE, MUT_SMP, MUT_APPLY };

/* Computes the desired object from cur. Returns NULL and *ret, or a Status. */
static cJSON *mutate(struct rq *q, enum mut_kind k, const cJSON *body, const cJSON *cur,
                     cJSON **ret)
{
    struct tern_err e = {0};
    int rc = 0;
    switch (k) {
    case MUT_PUT: *ret = json_dup(body); return NULL;
    case MUT_MERGE:
    case MUT_APPLY: *ret = apipatch_merge(cur, body); break;
    case MUT_JSONPATCH: rc = apipatch_json(cur, body, ret, &e); break;
    case MUT_SMP: rc = apipatch_strategic(cur, body, ret, &e); break;
    }
    if (rc == TERN_EPARSE)
        return apistatus_bad_request(e.msg);
    if (rc) {
        cJSON *st = apistatus_new(422, "Invalid", e.msg, NULL, NULL, NULL);
        return st;
    }
    if (!cJSON_IsObject(*ret)) {
        cJSON_Delete(*ret);
        *ret = NULL;
        return apistatus_bad_request("the patched object is not a JSON object");
    }
    (void)q;
    return NULL;
}

static void handle_update(struct rq *q, enum mut_kind k, const cJSON *body, const char *dup)
{
    char *key = apirest__obj_key(q);
    cJSON *st = NULL;
    for (int attempt = 0; attempt < MAX_RETRIES; attempt++) {
        cJSON *cur = NULL, *obj = NULL;
        int64_t rev = 0;
        struct tern_err e = {0};
        int rc = apistore_get(&q->s->store, key, &cur, &rev, &e);
        if (rc == TERN_ENOTFOUND && k == MUT_APPLY && !q->sub) {
            obj = json_dup(body);
            st = apirest__prepare_create(q, obj, dup);
            if (!st)
                st = check_namespace(q);
            if (!st) {
                int64_t nrev = 0;
                apirest__to_storage_version(q->res, obj);
                rc = apistore_create(&q->s->store, key, obj, &nrev, &e);
                if (rc == TERN_ECONFLICT) {
                    cJSON_Delete(obj);
                    continue;
                }
                if (rc) {
                    st = apirest__status_from_store(rc, q->res, q->name, &e);
                } else {
                    char b[21];
                    apirest__set_str(apirest__ensure_obj(obj, "metadata"), "resourceVersion",
                                     num_fmt_i64(nrev, b));
                    apirest__after_write(q, nrev);
                    apirest__respond_object(q, 201, obj);
                    free(key);
                    return;
                }
            }
            cJSON_Delete(obj);
            goto out;
        }
        if (rc) {
            st = apirest__status_from_store(rc, q->res, q->name, &e);
            goto out;
        }
        if (q->res->core_event)
            apievent_to_v1(cur); /* patches apply to the served shape */
        st = mutate(q, k, body, cur, &obj);
        if (st) {
            cJSON_Delete(cur);
            goto out;
        }
        /* the resourceVersion precondition */
        bool pinned = false;
        int64_t want = apirest__rv_of(obj);
        if (k == MUT_PUT) {
            if (want <= 0) {
                if (q->res->crd) {
                    struct apistatus_fields f = {0};
                    apistatus_fields_addv(&f, APISTATUS_F_INVALID, "metadata.resourceVersion",
                                          "0x0", "must be specified for an update");
                    /* kube-apiserver names the resource here, not the kind */
                    st = apistatus_invalid(q->res->group, q->res->plural, q->name, &f);
                    apistatus_fields_done(&f);
                    cJSON_Delete(cur);
                    cJSON_Delete(obj);
                    goto out;
                }
            } else {
                pinned = true;
            }
        } else if (want > 0 && want != rev) {
            pinned = true;
        }
        if (pinned && want != rev) {
            st = apistatus_conflict(q->res->group, q->res->plural, q->name, NULL);
            cJSON_Delete(cur);
            cJSON_Delete(obj);
            goto out;
        }
        st = apirest__prepare_update(q, cur, &obj, dup, k == MUT_PUT);
        if (st) {
            cJSON_Delete(cur);
            cJSON_Delete(obj);
            goto out;
        }
        char b[21];
        apirest__set_str(apirest__ensure_obj(obj, "metadata"), "resourceVersion",
                         num_fmt_i64(rev, b));
        if (cJSON_Compare(cur, obj, 1) || q->dry_run) {
            cJSON_Delete(cur);
            apirest__respond_object(q, 200, obj);
            free(key);
            return;
        }
        cJSON_Delete(cur);
        if (apirest__jstr(json_get(obj, "metadata"), "deletionTimestamp") &&
            apirest__removable(q->res, obj)) {
            apirest__delete_and_reply(q, key, obj, rev, true);
            free(key);
            return;
        }
        int64_t nrev = 0;
        apirest__to_storage_version(q->res, obj);
        rc = apistore_update(&q->s->store, key, obj, rev, &nrev, &e);
        if (rc == TERN_ECONFLICT && !pinned) {
            cJSON_Delete(obj);
            continue;
        }
        if (rc == TERN_ECONFLICT) {
            st = apistatus_conflict(q->res->group, q->res->plural, q->name, NULL);
            cJSON_Delete(obj);
            goto out;
        }
        if (rc) {
            st = apirest__status_from_store(rc, q->res, q->name, &e);
            cJSON_Delete(obj);
            goto out;
        }
        apirest__set_str(apirest__ensure_obj(obj, "metadata"), "resourceVersion",
                         num_fmt_i64(nrev, b));
        apirest__after_write(q, nrev);
        apirest__respond_object(q, 200, obj);
        free(key);
        return;
    }
    st = apistatus_conflict(q->res->group, q->res->plural, q->name, NULL);
out:
    free(key);
    apirest__respond_status(q->resp, st);
}

void apirest__handle_put(struct rq *q)
{
    cJSON *body = NULL;
    char dup[256];
    cJSON *st = apirest__decode_body(q, &body, dup, false);
    if (st) {
        apirest__respond_status(q->resp, st);
        return;
    }
    handle_update(q, MUT_PUT, body, dup);
    cJSON_Delete(body);
}

void apirest__handle_patch(struct rq *q)
{
    const char *ct = q->req->content_type ? q->req->content_type : "";
    enum mut_kind k;
    if (strncmp(ct, "application/json-patch+json", 27) == 0) {
        k = MUT_JSONPATCH;
    } else if (strncmp(ct, "application/merge-patch+json", 28) == 0) {
        k = MUT_MERGE;
    } else if (strncmp(ct, "application/strategic-merge-patch+json", 38) == 0 && !q->res->crd) {
        k = MUT_SMP;
    } else if (strncmp(ct, "application/apply-patch+yaml", 28) == 0) {
        k = MUT_APPLY;
    } else {
        apirest__respond_status(q->resp,
                                apistatus_unsupported_media(
                                    "the body of the request was in an unknown format - accepted "
                                    "media types include: application/json-patch+json, "
                                    "application/merge-patch+json, application/apply-patch+yaml"));
        return;
    }
    if (k == MUT_APPLY) {
        const char *fm = apirest__arg(q->req, "fieldManager");
        if (!fm || !*fm) {
            struct apistatus_fields f = {0};
            apistatus_fields_addv(&f, APISTATUS_F_REQUIRED, "fieldManager", NULL,
                                  "is required for apply patch");
            cJSON *st = apistatus_invalid("meta.k8s.io", "PatchOptions", "", &f);
            apistatus_fields_done(&f);
            apirest__respond_status(q->resp, st);
            return;
        }
    } else if (apirest__arg_true(q->req, "force")) {
        struct apistatus_fields f = {0};
        apistatus_fields_addv(&f, APISTATUS_F_FORBIDDEN, "force", NULL,
                              "may not be specified for non-apply patch");
        cJSON *st = apistatus_invalid("meta.k8s.io", "PatchOptions", "", &f);
        apistatus_fields_done(&f);
        apirest__respond_status(q->resp, st);
        return;
    }
    cJSON *body = NULL;
    char dup[256];
    const char *saved = q->req->content_type;
    (void)saved;
    cJSON *st = apirest__decode_body(q, &body, dup, k == MUT_JSONPATCH);
    if (st) {
        apirest__respond_status(q->resp, st);
        return;
    }
    if (k == MUT_APPLY) {
        /* the applied configuration must be a full object of this kind */
        const char *n = apirest__jstr(json_get(body, "metadata"), "name");
        st = apirest__check_gvk(q, body);
        if (!st && (!n || strcmp(n, q->name) != 0)) {
            char *m = xasprintf("the name of the object (%s) does not match the name on the URL (%s)",
                                n ? n : "", q->name);
            st = apistatus_bad_request(m);
            free(m);
        }
        if (st) {
            cJSON_Delete(body);
            apirest__respond_status(q->resp, st);
            return;
        }
    }
    handle_update(q, k, body, dup);
    cJSON_Delete(body);
}
