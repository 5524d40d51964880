/* Unit tests for devctl/objrest: the REST mapping of the objstore
 * interface, through a fake transport that routes requests to the
 * in-memory store like a tiny API server (and records the last request). */
#include "harness.h"

#include "base/mem.h"
#include "base/num.h"
#include "devctl/devctl.h"
#include "devctl/kobj.h"
#include "devctl/objrest.h"
#include "devctl/objstore.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fake {
    struct objstore mem;
    char last[512];
    char last_body[4096];
    char all[65536];
    bool no_binding;
};

static int status_body(int code, const char *reason, const char *msg, int *st, char **body,
                       size_t *len)
{
    *st = code;
    *body = xasprintf("{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                      "\"reason\":\"%s\",\"message\":\"%s\",\"code\":%d}",
                      reason, msg, code);
    *len = strlen(*body);
    return 0;
}

static int reply(cJSON *o, int code, int *st, char **body, size_t *len)
{
    *st = code;
    *body = o ? json_print(o) : xstrdup("{\"kind\":\"Status\",\"status\":\"Success\"}");
    *len = strlen(*body);
    cJSON_Delete(o);
    return 0;
}

static int fake_request(void *ctx, const char *method, const char *path, const char *body,
                        size_t body_len, int *st, char **rbody, size_t *rlen, struct tern_err *err)
{
    (void)err;
    struct fake *f = ctx;
    snprintf(f->last, sizeof f->last, "%s %s", method, path);
    size_t al = strlen(f->all);
    if (al + strlen(f->last) + 2 < sizeof f->all)
        snprintf(f->all + al, sizeof f->all - al, "%s\n", f->last);
    snprintf(f->last_body, sizeof f->last_body, "%.*s", (int)body_len, body ? body : "");
    char *p = xstrdup(path), *q = strchr(p, '?');
    if (q)
        *q = 0;
    /* split into segments */
    char *seg[12];
    int n = 0;
    for (char *s = strtok_r(p + 1, "/", &q); s && n < 12; s = strtok_r(NULL, "/", &q))
        seg[n++] = s;
    int i = 0;
    char gv[128];
    if (n >= 2 && strcmp(seg[0], "api") == 0) {
        snprintf(gv, sizeof gv, "%s", seg[1]);
        i = 2;
    } else if (n >= 3) {
        snprintf(gv, sizeof gv, "%s/%s", seg[1], seg[2]);
        i = 3;
    }
    const char *ns = NULL, *res = NULL, *name = NULL, *sub = NULL;
    bool ns_sub = n - i == 3 && (!strcmp(seg[n - 1], "finalize") || !strcmp(seg[n - 1], "status"));
    if (i + 1 < n && strcmp(seg[i], "namespaces") == 0 && i + 2 < n && !ns_sub) {
        ns = seg[i + 1];
        i += 2;
    }
    res = i < n ? seg[i++] : NULL;
    name = i < n ? seg[i++] : NULL;
    sub = i < n ? seg[i++] : NULL;
    char gvr[256];
    snprintf(gvr, sizeof gvr, "%s/%s", gv, res ? res : "");
    cJSON *in = NULL;
    if (body_len)
        json_parse(body, body_len, &in, NULL);
    cJSON *out = NULL;
    struct tern_err e = {0};
    int rc;
    if (!strcmp(method, "GET") && !name)
        rc = objstore_list(&f->mem, gvr, ns, &out, &e);
    else if (!strcmp(method, "GET"))
        rc = objstore_get(&f->mem, gvr, ns, name, &out, &e);
    else if (!strcmp(method, "POST") && sub && !strcmp(sub, "binding") && f->no_binding)
        rc = TERN_ENOTFOUND;
    else if (!strcmp(method, "POST") && sub && !strcmp(sub, "binding"))
        rc = objstore_bind(&f->mem, ns, name, kobj_str(in, "target.name"), &e);
    else if (!strcmp(method, "POST"))
        rc = objstore_create(&f->mem, gvr, ns, in, &out, &e);
    else if (!strcmp(method, "PUT") && sub && !strcmp(sub, "status"))
        rc = objstore_update_status(&f->mem, gvr, ns, in, &out, &e);
    else if (!strcmp(method, "PUT"))
        rc = objstore_update(&f->mem, gvr, ns, in, &out, &e);
    else {
        struct objstore_delete_opts o = {.propagation = kobj_str(in, "propagationPolicy"),
                                         .grace_seconds = kobj_int(in, "gracePeriodSeconds", -1),
                                         .uid = kobj_str(in, "preconditions.uid")};
        rc = objstore_remove(&f->mem, gvr, ns, name, &o, &out, &e);
    }
    if (out && cJSON_IsArray(kobj_at(out, "items"))) {
        /* like the API: list items carry no kind; the list does */
        cJSON *it;
        cJSON_ArrayForEach(it, (cJSON *)kobj_at(out, "items"))
        {
            kobj_del(it, "kind");
            kobj_del(it, "apiVersion");
        }
        kobj_set_str(out, "apiVersion", gv);
        if (!strcmp(res, "pods"))
            kobj_set_str(out, "kind", "PodList");
    }
    cJSON_Delete(in);
    free(p);
    if (rc == TERN_ENOTFOUND)
        return status_body(404, "NotFound", "not found", st, rbody, rlen);
    if (rc == -EEXIST)
        return status_body(409, "AlreadyExists", "exists", st, rbody, rlen);
    if (rc == TERN_ECONFLICT)
        return status_body(409, "Conflict", "modified", st, rbody, rlen);
    if (rc)
        return status_body(422, "Invalid", "invalid", st, rbody, rlen);
    return reply(out, !strcmp(method, "POST") ? 201 : 200, st, rbody, rlen);
}

struct renv {
    struct memstore *m;
    struct fake f;
    struct objrest *r;
    struct objstore s;
};

static void renv_init(struct renv *e)
{
    memset(e, 0, sizeof *e);
    e->m = memstore_new(NULL, NULL);
    e->f.mem = memstore_objstore(e->m);
    struct objrest_transport t = {fake_request, &e->f};
    e->r = objrest_new(&t);
    e->s = objrest_objstore(e->r);
    const char *nsj = "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"default\"}}";
    cJSON *ns = NULL;
    ASSERT_OK(json_parse(nsj, strlen(nsj), &ns, NULL));
    ASSERT_OK(objstore_create(&e->f.mem, "v1/namespaces", "", ns, NULL, NULL));
    cJSON_Delete(ns);
}

static void renv_done(struct renv *e)
{
    objrest_free(e->r);
    memstore_free(e->m);
}

static cJSON *parse(const char *s)
{
    cJSON *j = NULL;
    ASSERT_OK(json_parse(s, strlen(s), &j, NULL));
    return j;
}

TEST(paths_methods_and_errors)
{
    struct renv e;
    renv_init(&e);
    cJSON *job = parse("{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"j\"},"
                       "\"spec\":{\"template\":{\"spec\":{\"containers\":[]}}}}");
    cJSON *got = NULL;
    ASSERT_OK(objstore_create(&e.s, "batch/v1/jobs", "default", job, &got, NULL));
    ASSERT_EQ_STR(e.f.last, "POST /apis/batch/v1/namespaces/default/jobs");
    struct tern_err err;
    ASSERT_EQ_INT(objstore_create(&e.s, "batch/v1/jobs", "default", job, NULL, &err), -EEXIST);
    ASSERT_CONTAINS(err.msg, "HTTP 409");
    ASSERT_OK(objstore_update_status(&e.s, "batch/v1/jobs", "default", got, NULL, NULL));
    ASSERT_EQ_STR(e.f.last, "PUT /apis/batch/v1/namespaces/default/jobs/j/status");
    ASSERT_EQ_INT(objstore_update(&e.s, "batch/v1/jobs", "default", got, NULL, NULL), 0);
    ASSERT_EQ_INT(objstore_update(&e.s, "batch/v1/jobs", "default", got, NULL, NULL), 0);
    kobj_set_str(got, "metadata.resourceVersion", "1");
    ASSERT_EQ_INT(objstore_update(&e.s, "batch/v1/jobs", "default", got, NULL, NULL), TERN_ECONFLICT);
    ASSERT_EQ_INT(objstore_get(&e.s, "v1/pods", "default", "nope", NULL, NULL), TERN_ENOTFOUND);
    ASSERT_EQ_STR(e.f.last, "GET /api/v1/namespaces/default/pods/nope");
    ASSERT_OK(objstore_get(&e.s, "v1/namespaces", "", "default", NULL, NULL));
    ASSERT_EQ_STR(e.f.last, "GET /api/v1/namespaces/default");
    struct objstore_delete_opts o = {.propagation = "Foreground", .grace_seconds = 0, .uid = "u"};
    ASSERT_EQ_INT(objstore_remove(&e.s, "batch/v1/jobs", "default", "j", &o, NULL, NULL),
                  TERN_ECONFLICT);
    ASSERT_EQ_STR(e.f.last, "DELETE /apis/batch/v1/namespaces/default/jobs/j");
    ASSERT_CONTAINS(e.f.last_body, "\"propagationPolicy\":\"Foreground\"");
    ASSERT_CONTAINS(e.f.last_body, "\"gracePeriodSeconds\":0");
    ASSERT_CONTAINS(e.f.last_body, "\"preconditions\":{\"uid\":\"u\"}");
    cJSON *pod = parse("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"},"
                       "\"spec\":{}}");
    ASSERT_OK(objstore_create(&e.s, "v1/pods", "default", pod, NULL, NULL));
    ASSERT_OK(objstore_bind(&e.s, "default", "p", "tern-dev", NULL));
    ASSERT_EQ_STR(e.f.last, "POST /api/v1/namespaces/default/pods/p/binding");
    cJSON *l = NULL;
    ASSERT_OK(objstore_list(&e.s, "v1/pods", NULL, &l, NULL));
    ASSERT_EQ_STR(e.f.last, "GET /api/v1/pods?limit=500");
    const cJSON *p0 = cJSON_GetArrayItem(kobj_at(l, "items"), 0);
    ASSERT_EQ_STR(kobj_str(p0, "kind"), "Pod");
    ASSERT_EQ_STR(kobj_str(p0, "apiVersion"), "v1");
    ASSERT_EQ_STR(kobj_str(p0, "spec.nodeName"), "tern-dev");
    cJSON_Delete(l);
    /* a server without pods/binding: the pod is bound by an update */
    e.f.no_binding = true;
    kobj_set_str(pod, "metadata.name", "q");
    ASSERT_OK(objstore_create(&e.s, "v1/pods", "default", pod, NULL, NULL));
    ASSERT_OK(objstore_bind(&e.s, "default", "q", "tern-dev", NULL));
    ASSERT_EQ_STR(e.f.last, "PUT /api/v1/namespaces/default/pods/q");
    cJSON *q = NULL;
    ASSERT_OK(objstore_get(&e.s, "v1/pods", "default", "q", &q, NULL));
    ASSERT_EQ_STR(kobj_str(q, "spec.nodeName"), "tern-dev");
    cJSON_Delete(q);
    cJSON_Delete(pod);
    cJSON_Delete(got);
    cJSON_Delete(job);
    renv_done(&e);
}

/* A server that serves 1,234 ConfigMaps in pages of the asked limit
 * (continue = the next index), or, with garbage set, a 200 that is not
 * JSON. */
struct pager {
    int requests;
    bool garbage;
    char last[512];
};

static int pager_request(void *ctx, const char *method, const char *path, const char *body,
                         size_t body_len, int *st, char **rbody, size_t *rlen,
                         struct tern_err *err)
{
    (void)method, (void)body, (void)body_len, (void)err;
    struct pager *pg = ctx;
    pg->requests++;
    snprintf(pg->last, sizeof pg->last, "%s", path);
    *st = 200;
    if (pg->garbage) {
        *rbody = xstrdup("{\"kind\":\"ConfigMapList\",\"items\":[{\"metadata\":");
        *rlen = strlen(*rbody);
        return 0;
    }
    const char *lim = strstr(path, "limit="), *con = strstr(path, "continue=");
    int64_t limit = 1000000, from = 0;
    if (lim)
        ASSERT_OK(num_parse_i64n(lim + 6, strspn(lim + 6, "0123456789"), &limit));
    if (con)
        ASSERT_OK(num_parse_i64n(con + 9, strspn(con + 9, "0123456789"), &from));
    cJSON *out = cJSON_CreateObject();
    json_add_string(out, "kind", "ConfigMapList");
    json_add_string(out, "apiVersion", "v1");
    cJSON *md = cJSON_AddObjectToObject(out, "metadata");
    json_add_string(md, "resourceVersion", from == 0 ? "77" : "78"); /* the first page's counts */
    cJSON *items = cJSON_AddArrayToObject(out, "items");
    int64_t i = from;
    for (; i < 1234 && i < from + limit; i++) {
        cJSON *it = cJSON_CreateObject();
        char name[32];
        snprintf(name, sizeof name, "cm-%04d", (int)i);
        kobj_set_str(it, "metadata.name", name);
        cJSON_AddItemToArray(items, it);
    }
    if (i < 1234) {
        char next[16];
        snprintf(next, sizeof next, "%d", (int)i);
        json_add_string(md, "continue", next);
    }
    *rbody = json_print(out);
    *rlen = strlen(*rbody);
    cJSON_Delete(out);
    return 0;
}

TEST(a_list_is_read_in_pages_and_an_unreadable_one_is_an_error)
{
    struct pager pg = {0};
    struct objrest_transport t = {pager_request, &pg};
    struct objrest *r = objrest_new(&t);
    struct objstore s = objrest_objstore(r);
    cJSON *l = NULL;
    ASSERT_OK(objstore_list(&s, "v1/configmaps", "x", &l, NULL));
    ASSERT_EQ_INT(pg.requests, 3); /* 500 + 500 + 234 */
    ASSERT_EQ_STR(pg.last, "/api/v1/namespaces/x/configmaps?limit=500&continue=1000");
    ASSERT_EQ_INT(cJSON_GetArraySize(kobj_at(l, "items")), 1234);
    ASSERT_EQ_STR(kobj_str(cJSON_GetArrayItem(kobj_at(l, "items"), 1233), "metadata.name"),
                  "cm-1233");
    ASSERT_EQ_STR(kobj_str(cJSON_GetArrayItem(kobj_at(l, "items"), 0), "kind"), "ConfigMap");
    ASSERT_EQ_STR(kobj_str(l, "metadata.resourceVersion"), "77");
    ASSERT_TRUE(kobj_at(l, "metadata.continue") == NULL);
    cJSON_Delete(l);
    /* a 200 whose body does not parse is not an empty list */
    pg.garbage = true;
    l = NULL;
    struct tern_err err = {0};
    ASSERT_EQ_INT(objstore_list(&s, "v1/configmaps", "x", &l, &err), TERN_EPARSE);
    ASSERT_TRUE(l == NULL);
    ASSERT_CONTAINS(err.msg, "/api/v1/namespaces/x/configmaps?limit=500");
    ASSERT_EQ_INT(objstore_get(&s, "v1/configmaps", "x", "cm-0001", NULL, &err), TERN_EPARSE);
    objrest_free(r);
}

TEST(controllers_run_through_the_rest_mapping)
{
    struct renv e;
    renv_init(&e);
    char *vol = xasprintf("%s/v", th_tmpdir());
    struct devctl_cfg cfg = {.volume_dir = vol, .job = {0, 600}};
    struct devctl *d = devctl_new(&e.s, &cfg);
    cJSON *ns = parse("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"x\"}}");
    ASSERT_OK(objstore_create(&e.s, "v1/namespaces", "", ns, NULL, NULL));
    cJSON *cm = parse("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"}}");
    ASSERT_OK(objstore_create(&e.s, "v1/configmaps", "x", cm, NULL, NULL));
    ASSERT_OK(devctl_sync(d, 0, NULL, NULL));
    ASSERT_OK(objstore_remove(&e.s, "v1/namespaces", "", "x", NULL, NULL, NULL));
    ASSERT_OK(devctl_sync(d, 0, NULL, NULL));
    ASSERT_OK(devctl_sync(d, 0, NULL, NULL));
    ASSERT_CONTAINS(e.f.all, "DELETE /api/v1/namespaces/x/configmaps/c\n");
    ASSERT_CONTAINS(e.f.all, "PUT /api/v1/namespaces/x/finalize\n");
    ASSERT_CONTAINS(e.f.all, "POST /api/v1/namespaces/default/serviceaccounts\n");
    ASSERT_EQ_INT(objstore_get(&e.s, "v1/namespaces", "", "x", NULL, NULL), TERN_ENOTFOUND);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/serviceaccounts"), 1); /* default's */
    ASSERT_EQ_INT(objstore_wait(&e.s, "999999", 50, NULL), TERN_ETIMEOUT);
    ASSERT_OK(objstore_wait(&e.s, "1", 50, NULL));
    cJSON_Delete(ns);
    cJSON_Delete(cm);
    devctl_free(d);
    free(vol);
    renv_done(&e);
}
