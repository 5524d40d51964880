/* apirest_delete.c - deletion: DeleteOptions (propagationPolicy,
 * preconditions, gracePeriodSeconds, dryRun), graceful deletion of bound
 * pods, finalizers (foregroundDeletion, orphan), namespaces going
 * Terminating and taking their content, CRDs taking their custom
 * resources, and deletecollection. See apirest_internal.h. */
#include "apirest_internal.h"

#include "apistatus.h"
#include "apitable.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool finalizers_empty(const cJSON *obj)
{
    const cJSON *f = json_get(json_get(obj, "metadata"), "finalizers");
    return !cJSON_IsArray(f) || !f->child;
}

/* A deleting object goes when nothing holds it: no finalizers, for pods a
 * grace period run down to 0, for namespaces empty spec.finalizers. */
bool apirest__removable(const struct apires *res, const cJSON *obj)
{
    if (!finalizers_empty(obj))
        return false;
    if (apirest__is_kind(res, "Pod")) {
        int64_t g = 0;
        const cJSON *gv = json_get(json_get(obj, "metadata"), "deletionGracePeriodSeconds");
        if (gv && json_item_int64(gv, &g) == 0 && g > 0)
            return false;
    }
    if (apirest__is_kind(res, "Namespace")) {
        const cJSON *sf = json_get(json_get(obj, "spec"), "finalizers");
        if (cJSON_IsArray(sf) && sf->child)
            return false;
    }
    return true;
}

/* Deletes every namespaced object of namespace ns (all resources). */
static void delete_namespace_content(struct rq *q, const char *ns)
{
    for (size_t i = 0; i < q->tab->n; i++) {
        const struct apires *r = &q->tab->v[i];
        if (!r->namespaced)
            continue;
        bool first = true; /* CRD versions share a prefix */
        for (size_t j = 0; j < i; j++)
            if (strcmp(q->tab->v[j].prefix, r->prefix) == 0)
                first = false;
        if (!first)
            continue;
        char *p = apires_key(r, ns, NULL);
        apistore_delete_prefix(&q->s->store, p, NULL);
        free(p);
    }
}

/* Whether kube-apiserver answers a DELETE that removed the object at once
 * with the object (its storage sets ReturnDeletedObject) or with a Status
 * {status: Success, details: {name, group, kind: <resource>, uid}}
 * (genericregistry.Store.finalizeDelete). A deletion that only marks the
 * object (graceful, finalizers) answers the object in every case. CRDs are
 * answered with the object too: kube-apiserver holds them on a finalizer
 * (customresourcecleanup) while tern-dev removes them at once. */
static bool returns_deleted_object(const struct apires *res)
{
    static const char *const kinds[] = {
        "Pod",          "Namespace",  "PersistentVolume", "PersistentVolumeClaim",
        "ServiceAccount", "Service",  "ResourceQuota",    "PodTemplate",
        "StorageClass", "CSIDriver",  "CSINode",          "VolumeAttachment",
        "VolumeAttributesClass", "CustomResourceDefinition"};
    if (res->crd)
        return false;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(res->kind, kinds[i]) == 0)
            return true;
    return false;
}

void apirest__delete_and_reply(struct rq *q, const char *key, cJSON *obj, int64_t rev,
                               bool as_object)
{
    int64_t drev = 0;
    struct tern_err e = {0};
    int rc = 0;
    if (!q->dry_run) {
        if (apirest__is_crd(q->res)) {
            const cJSON *spec = json_get(obj, "spec");
            char *p = xasprintf("/registry/%s/%s/",
                                apirest__jstr(spec, "group") ? apirest__jstr(spec, "group") : "",
                                apirest__jstr(json_get(spec, "names"), "plural")
                                    ? apirest__jstr(json_get(spec, "names"), "plural")
                                    : "");
            apistore_delete_prefix(&q->s->store, p, NULL);
            free(p);
        }
        if (!q->res->crd && strcmp(q->res->kind, "Namespace") == 0)
            delete_namespace_content(q, q->name);
        rc = apistore_delete(&q->s->store, key, rev, &drev, &e);
    }
    if (rc) {
        cJSON_Delete(obj);
        apirest__respond_status(q->resp, apirest__status_from_store(rc, q->res, q->name, &e));
        return;
    }
    if (!q->dry_run)
        apirest__after_write(q, drev);
    if (!as_object && !returns_deleted_object(q->res)) {
        cJSON *s = apistatus_success(q->res->group, q->res->plural, q->name,
                                     apirest__jstr(json_get(obj, "metadata"), "uid"));
        cJSON_Delete(obj);
        apirest__respond_json(q->resp, 200, s);
        return;
    }
    apirest__respond_object(q, 200, obj);
}

void apirest__handle_delete(struct rq *q)
{
    cJSON *opts = NULL;
    if (q->req->body_len) {
        char dup[256];
        cJSON *st = apirest__decode_body(q, &opts, dup, false);
        if (st) {
            apirest__respond_status(q->resp, st);
            return;
        }
    }
    const char *pp = apirest__jstr(opts, "propagationPolicy");
    if (!pp)
        pp = apirest__arg(q->req, "propagationPolicy");
    if (pp && strcmp(pp, "Foreground") && strcmp(pp, "Background") && strcmp(pp, "Orphan")) {
        struct apistatus_fields f = {0};
        cJSON *v = cJSON_CreateString(pp);
        apistatus_fields_add(&f, APISTATUS_F_UNSUPPORTED, "propagationPolicy", v,
                             "supported values: \"Foreground\", \"Background\", \"Orphan\"");
        cJSON_Delete(v);
        apirest__respond_status(q->resp, apistatus_invalid("meta.k8s.io", "DeleteOptions", "", &f));
        apistatus_fields_done(&f);
        cJSON_Delete(opts);
        return;
    }
    const cJSON *pre = json_get(opts, "preconditions");
    const char *pre_uid = apirest__jstr(pre, "uid"),
               *pre_rv = apirest__jstr(pre, "resourceVersion");
    const cJSON *dr = json_get(opts, "dryRun");
    if (cJSON_IsArray(dr) && dr->child)
        q->dry_run = true;
    char *key = apirest__obj_key(q);
    cJSON *st = NULL;
    for (int attempt = 0; attempt < MAX_RETRIES; attempt++) {
        cJSON *cur = NULL;
        int64_t rev = 0;
        struct tern_err e = {0};
        int rc = apistore_get(&q->s->store, key, &cur, &rev, &e);
        if (rc) {
            st = apirest__status_from_store(rc, q->res, q->name, &e);
            goto out;
        }
        const cJSON *md = json_get(cur, "metadata");
        const char *uid = apirest__jstr(md, "uid"), *rv = apirest__jstr(md, "resourceVersion");
        if (pre_uid && uid && strcmp(pre_uid, uid) != 0) {
            char *m = xasprintf("Precondition failed: UID in precondition: %s, UID in object "
                                "meta: %s",
                                pre_uid, uid);
            st = apistatus_conflict(q->res->group, q->res->plural, q->name, m);
            free(m);
            cJSON_Delete(cur);
            goto out;
        }
        if (pre_rv && rv && strcmp(pre_rv, rv) != 0) {
            char *m = xasprintf("Precondition failed: ResourceVersion in precondition: %s, "
                                "ResourceVersion in meta: %s",
                                pre_rv, rv);
            st = apistatus_conflict(q->res->group, q->res->plural, q->name, m);
            free(m);
            cJSON_Delete(cur);
            goto out;
        }
        /* graceful deletion of a pod bound to a node and not finished */
        int64_t grace = 0;
        bool is_pod = apirest__is_kind(q->res, "Pod");
        if (is_pod) {
            const cJSON *gp = json_get(opts, "gracePeriodSeconds");
            const char *gq = apirest__arg(q->req, "gracePeriodSeconds");
            int64_t v;
            const char *phase = apirest__jstr(json_get(cur, "status"), "phase");
            if (gp && json_item_int64(gp, &v) == 0)
                grace = v;
            else if (gq && num_parse_i64(gq, &v) == 0)
                grace = v;
            else if (json_get(json_get(cur, "spec"), "terminationGracePeriodSeconds") &&
                     json_item_int64(json_get(json_get(cur, "spec"),
                                              "terminationGracePeriodSeconds"),
                                     &v) == 0)
                grace = v;
            else
                grace = 30;
            if (grace < 0)
                grace = 0;
            const char *node = apirest__jstr(json_get(cur, "spec"), "nodeName");
            if (!node || !*node ||
                (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)))
                grace = 0;
        }
        const char *policy = pp;
        if (!policy && q->s->lifecycle_controllers && apirest__is_kind(q->res, "Job"))
            policy = "Orphan"; /* batch/v1 jobs' default GC policy */
        if (cJSON_IsTrue(json_get(opts, "orphanDependents")))
            policy = "Orphan";
        const char *add_fin = NULL;
        if (q->s->lifecycle_controllers && policy && strcmp(policy, "Foreground") == 0)
            add_fin = "foregroundDeletion";
        else if (q->s->lifecycle_controllers && policy && strcmp(policy, "Orphan") == 0)
            add_fin = "orphan";
        bool ns_terminating = q->s->lifecycle_controllers && apirest__is_kind(q->res, "Namespace");
        bool deleting = apirest__jstr(md, "deletionTimestamp") != NULL;
        if (deleting && is_pod) {
            /* a shorter grace period shortens the deletion; 0 finishes it */
            int64_t curg = 0;
            const cJSON *cg = json_get(md, "deletionGracePeriodSeconds");
            if (cg)
                json_item_int64(cg, &curg);
            if (grace < curg) {
                cJSON *m3 = apirest__ensure_obj(cur, "metadata");
                time_t when = time(NULL) + grace;
                char ts[32];
                apitable_format_time(when, ts, sizeof(ts));
                apirest__set_str(m3, "deletionTimestamp", ts);
                cJSON_DeleteItemFromObjectCaseSensitive(m3, "deletionGracePeriodSeconds");
                json_add_int64(m3, "deletionGracePeriodSeconds", grace);
                if (apirest__removable(q->res, cur)) {
                    if (q->dry_run) {
                        apirest__respond_object(q, 200, cur);
                        goto done;
                    }
                    int64_t drev = 0;
                    rc = apistore_delete(&q->s->store, key, rev, &drev, &e);
                    if (rc == TERN_ECONFLICT) {
                        cJSON_Delete(cur);
                        continue;
                    }
                    if (rc) {
                        st = apirest__status_from_store(rc, q->res, q->name, &e);
                        cJSON_Delete(cur);
                        goto out;
                    }
                    apirest__respond_object(q, 200, cur);
                    goto done;
                }
                goto mark;
            }
        }
        if (!finalizers_empty(cur) || grace > 0 || add_fin || ns_terminating) {
            if (deleting) {
                apirest__respond_object(q, 200, cur); /* already being deleted */
                goto done;
            }
        mark:;
            cJSON *m2 = apirest__ensure_obj(cur, "metadata");
            if (!deleting) {
                char now[32];
                apitable_format_time(time(NULL) + grace, now, sizeof(now));
                apirest__set_str(m2, "deletionTimestamp", now);
                cJSON_DeleteItemFromObjectCaseSensitive(m2, "deletionGracePeriodSeconds");
                /* a namespace without metadata.finalizers is only marked
                 * (kube-apiserver's namespace storage sets the timestamp
                 * alone); everything else as markAsDeleting does */
                if (!(ns_terminating && finalizers_empty(cur)))
                    json_add_int64(m2, "deletionGracePeriodSeconds", grace);
                int64_t g = 0;
                const cJSON *gv = json_get(m2, "generation");
                if (gv && json_item_int64(gv, &g) == 0) {
                    cJSON_DeleteItemFromObjectCaseSensitive(m2, "generation");
                    json_add_int64(m2, "generation", g + 1);
                }
                if (add_fin) {
                    cJSON *fz = cJSON_GetObjectItemCaseSensitive(m2, "finalizers");
                    if (!cJSON_IsArray(fz)) {
                        cJSON_DeleteItemFromObjectCaseSensitive(m2, "finalizers");
                        fz = cJSON_AddArrayToObject(m2, "finalizers");
                    }
                    cJSON_AddItemToArray(fz, cJSON_CreateString(add_fin));
                }
                if (ns_terminating)
                    apirest__set_str(apirest__ensure_obj(cur, "status"), "phase", "Terminating");
            }
            if (q->dry_run) {
                apirest__respond_object(q, 200, cur);
                goto done;
            }
            int64_t nrev = 0;
            rc = apistore_update(&q->s->store, key, cur, rev, &nrev, &e);
            if (rc == TERN_ECONFLICT) {
                cJSON_Delete(cur);
                continue;
            }
            if (rc) {
                st = apirest__status_from_store(rc, q->res, q->name, &e);
                cJSON_Delete(cur);
                goto out;
            }
            char b[21];
            apirest__set_str(m2, "resourceVersion", num_fmt_i64(nrev, b));
            apirest__after_write(q, nrev);
            apirest__respond_object(q, 200, cur);
            goto done;
        }
        if (is_pod && !deleting) {
            /* a pod deleted at once is still deleted "gracefully" with a
             * period of 0 (rest.BeforeDelete): the object returned carries
             * the deletion timestamp, grace 0 and the generation bump */
            cJSON *m4 = apirest__ensure_obj(cur, "metadata");
            char now4[32];
            apirest__now_str(now4);
            apirest__set_str(m4, "deletionTimestamp", now4);
            cJSON_DeleteItemFromObjectCaseSensitive(m4, "deletionGracePeriodSeconds");
            json_add_int64(m4, "deletionGracePeriodSeconds", 0);
            int64_t g4 = 0;
            const cJSON *gv4 = json_get(m4, "generation");
            if (gv4 && json_item_int64(gv4, &g4) == 0 && g4 > 0) {
                cJSON_DeleteItemFromObjectCaseSensitive(m4, "generation");
                json_add_int64(m4, "generation", g4 + 1);
            }
        }
        if (!q->dry_run) {
            /* a delete must hit the version we read (to return it) */
            int64_t drev = 0;
            rc = 0;
            if (!apirest__is_crd(q->res) &&
                !(apirest__is_kind(q->res, "Namespace") && !q->s->lifecycle_controllers)) {
                rc = apistore_delete(&q->s->store, key, rev, &drev, &e);
                if (rc == TERN_ECONFLICT) {
                    cJSON_Delete(cur);
                    continue;
                }
                if (rc) {
                    st = apirest__status_from_store(rc, q->res, q->name, &e);
                    cJSON_Delete(cur);
                    goto out;
                }
                apirest__after_write(q, drev);
                q->dry_run = true; /* already deleted: just reply */
                apirest__delete_and_reply(q, key, cur, rev, false);
                goto done;
            }
        }
        apirest__delete_and_reply(q, key, cur, rev, false);
        goto done;
    }
    st = apistatus_conflict(q->res->group, q->res->plural, q->name, NULL);
out:
    apirest__respond_status(q->resp, st);
done:
    free(key);
    cJSON_Delete(opts);
}

void apirest__handle_delete_collection(struct rq *q)
{
    struct selectors sel;
    cJSON *st = apirest__parse_selectors(q, &sel);
    if (st) {
        apirest__respond_status(q->resp, st);
        return;
    }
    struct apistore_list l = {0};
    char *cont = NULL;
    st = apirest__do_list(q, &sel, 0, NULL, &l, &cont);
    apirest__selectors_done(&sel);
    free(cont);
    if (st) {
        apirest__respond_status(q->resp, st);
        return;
    }
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "kind", q->res->list_kind);
    char *av = apires_api_version(q->res);
    cJSON_AddStringToObject(out, "apiVersion", av);
    free(av);
    cJSON *md = cJSON_AddObjectToObject(out, "metadata");
    cJSON *items = cJSON_AddArrayToObject(out, "items");
    int64_t last = 0;
    for (size_t i = 0; i < l.n; i++) {
        const cJSON *m = json_get(l.objs[i], "metadata");
        char *key = apires_key(q->res, apirest__jstr(m, "namespace"), apirest__jstr(m, "name"));
        int64_t rev = 0;
        if (finalizers_empty(l.objs[i]) && !q->dry_run &&
            apistore_delete(&q->s->store, key, apirest__rv_of(l.objs[i]), &rev, NULL) == 0) {
            last = rev;
            apirest__to_served_version(q->res, l.objs[i]);
            apirest__list_item(q->res, l.objs[i]);
            cJSON_AddItemToArray(items, l.objs[i]);
            l.objs[i] = NULL;
        } else if (!finalizers_empty(l.objs[i]) && !q->dry_run &&
                   !apirest__jstr(json_get(l.objs[i], "metadata"), "deletionTimestamp")) {
            /* held by finalizers: marked for deletion, as a single delete does */
            cJSON *md2 = apirest__ensure_obj(l.objs[i], "metadata");
            char now[32];
            apirest__now_str(now);
            apirest__set_str(md2, "deletionTimestamp", now);
            cJSON_DeleteItemFromObjectCaseSensitive(md2, "deletionGracePeriodSeconds");
            json_add_int64(md2, "deletionGracePeriodSeconds", 0);
            int64_t g = 0;
            const cJSON *gv = json_get(md2, "generation");
            if (gv && json_item_int64(gv, &g) == 0) {
                cJSON_DeleteItemFromObjectCaseSensitive(md2, "generation");
                json_add_int64(md2, "generation", g + 1);
            }
            if (apistore_update(&q->s->store, key, l.objs[i], apirest__rv_of(l.objs[i]), &rev,
                                NULL) == 0) {
                char b[21];
                apirest__set_str(md2, "resourceVersion", num_fmt_i64(rev, b));
                last = rev;
                apirest__to_served_version(q->res, l.objs[i]);
                apirest__list_item(q->res, l.objs[i]);
                cJSON_AddItemToArray(items, l.objs[i]);
                l.objs[i] = NULL;
            }
        }
        free(key);
    }
    char b[21];
    cJSON_AddStringToObject(md, "resourceVersion", num_fmt_i64(last ? last : l.revision, b));
    if (last)
        apirest__after_write(q, last);
    apistore_list_done(&l);
    apirest__respond_json(q->resp, 200, out);
}
