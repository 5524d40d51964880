/* Unit tests for the controllers' shell (devctl) over the in-memory store,
 * the garbage collector's decision, the Deployment decision and service
 * account tokens. Pods are moved through their phases by the test (no
 * kubelet here; see tests/integration/test_kubelet.c). */
#include "harness.h"

#include "base/mem.h"
#include "devctl/deployctl.h"
#include "devctl/devctl.h"
#include "devctl/gc.h"
#include "devctl/kobj.h"
#include "devctl/objstore.h"
#include "devctl/satoken.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int64_t fake_now = 1000;
static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return fake_now;
}

static cJSON *parse(const char *s)
{
    cJSON *j;
    struct tern_err e;
    if (json_parse(s, strlen(s), &j, &e) != 0)
        th_fail(__FILE__, __LINE__, "bad json: %s: %s", e.msg, s);
    return j;
}

struct env {
    struct memstore *m;
    struct objstore s;
    struct devctl *d;
    char voldir[512];
};

static int env_backoff; /* the Job backoff base of env_init's controllers */

static void env_init(struct env *e)
{
    e->m = memstore_new(clock_fn, NULL);
    e->s = memstore_objstore(e->m);
    snprintf(e->voldir, sizeof e->voldir, "%s/volumes", th_tmpdir());
    const char *extra[] = {"tern.dev/v1alpha1/agentsessions=AgentSession"};
    struct devctl_cfg cfg = {.volume_dir = e->voldir, .job = {env_backoff, 600}, .extra = extra,
                           .nextra = 1};
    e->d = devctl_new(&e->s, &cfg);
    struct tern_err err;
    ASSERT_OK(devctl_sync(e->d, fake_now, NULL, &err)); /* creates "default" */
    ASSERT_OK(devctl_sync(e->d, fake_now, NULL, &err)); /* and its ServiceAccount */
}

static void env_done(struct env *e)
{
    devctl_free(e->d);
    memstore_free(e->m);
}

static void sync_n(struct env *e, int n)
{
    struct tern_err err;
    for (int i = 0; i < n; i++) {
        int r = devctl_sync(e->d, fake_now, NULL, &err);
        if (r)
            th_fail(__FILE__, __LINE__, "sync: %d %s", r, err.msg);
    }
}

static cJSON *create(struct env *e, const char *gvr, const char *json)
{
    cJSON *o = parse(json), *ret = NULL;
    struct tern_err err;
    int r = objstore_create(&e->s, gvr, kobj_str(o, "metadata.namespace"), o, &ret, &err);
    if (r)
        th_fail(__FILE__, __LINE__, "create: %d %s", r, err.msg);
    cJSON_Delete(o);
    return ret;
}

static cJSON *get(struct env *e, const char *gvr, const char *ns, const char *name)
{
    cJSON *o = NULL;
    if (objstore_get(&e->s, gvr, ns, name, &o, NULL) != 0)
        return NULL;
    return o;
}

static cJSON *list_items(struct env *e, const char *gvr, const char *ns)
{
    cJSON *l;
    ASSERT_OK(objstore_list(&e->s, gvr, ns, &l, NULL));
    cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(l, "items");
    cJSON_Delete(l);
    return it;
}

static void set_pod_phase(struct env *e, const cJSON *pod, const char *phase, int code)
{
    cJSON *c = json_dup(pod);
    kobj_set_str(c, "status.phase", phase);
    if (code >= 0) {
        cJSON *cs = cJSON_CreateArray();
        cJSON *st = cJSON_CreateObject();
        json_add_string(st, "name", "main");
        cJSON *t = kobj_obj(st, "state.terminated");
        json_add_int64(t, "exitCode", code);
        char ts[32];
        json_add_string(t, "finishedAt", kobj_fmt_time(fake_now, ts));
        cJSON_AddItemToArray(cs, st);
        kobj_set_item(c, "status.containerStatuses", cs);
    }
    ASSERT_OK(objstore_update_status(&e->s, "v1/pods", kobj_str(pod, "metadata.namespace"), c,
                                     NULL, NULL));
    cJSON_Delete(c);
}

TEST(default_namespace_and_service_account_exist)
{
    struct env e;
    env_init(&e);
    cJSON *ns = get(&e, "v1/namespaces", "", "default");
    ASSERT_NOT_NULL(ns);
    cJSON *sa = get(&e, "v1/serviceaccounts", "default", "default");
    ASSERT_NOT_NULL(sa);
    cJSON_Delete(ns);
    cJSON_Delete(sa);
    env_done(&e);
}

#define JOB_JSON(extra)                                                                            \
    "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"j\",\"namespace\":"  \
    "\"default\"},\"spec\":{" extra "\"template\":{\"spec\":{\"restartPolicy\":\"Never\","        \
    "\"containers\":[{\"name\":\"main\",\"command\":[\"x\"]}]}}}}"

TEST(job_fails_twice_then_completes_through_the_store)
{
    struct env e;
    env_init(&e);
    cJSON_Delete(create(&e, "batch/v1/jobs", JOB_JSON("")));
    for (int round = 0; round < 3; round++) {
        sync_n(&e, 1);
        cJSON *pods = list_items(&e, "v1/pods", "default");
        ASSERT_EQ_INT(cJSON_GetArraySize(pods), round + 1);
        const cJSON *p = cJSON_GetArrayItem(pods, round);
        ASSERT_TRUE(kobj_has_finalizer(p, "batch.kubernetes.io/job-tracking"));
        fake_now++;
        set_pod_phase(&e, p, round < 2 ? "Failed" : "Succeeded", round < 2 ? 1 : 0);
        cJSON_Delete(pods);
        sync_n(&e, 2);
    }
    sync_n(&e, 2);
    cJSON *job = get(&e, "batch/v1/jobs", "default", "j");
    ASSERT_TRUE(kobj_cond_true(job, "Complete"));
    ASSERT_TRUE(kobj_cond_true(job, "SuccessCriteriaMet"));
    ASSERT_EQ_INT(kobj_int(job, "status.failed", 0), 2);
    ASSERT_EQ_INT(kobj_int(job, "status.succeeded", 0), 1);
    cJSON *pods = list_items(&e, "v1/pods", "default");
    const cJSON *p;
    cJSON_ArrayForEach(p, pods) ASSERT_FALSE(kobj_has_finalizer(p, "batch.kubernetes.io/job-tracking"));
    cJSON_Delete(pods);
    cJSON_Delete(job);
    env_done(&e);
}

TEST(job_backoff_limit_and_background_gc_of_pods)
{
    struct env e;
    env_init(&e);
    cJSON_Delete(create(&e, "batch/v1/jobs", JOB_JSON("\"backoffLimit\":0,")));
    sync_n(&e, 1);
    cJSON *pods = list_items(&e, "v1/pods", "default");
    set_pod_phase(&e, cJSON_GetArrayItem(pods, 0), "Failed", 2);
    cJSON_Delete(pods);
    sync_n(&e, 3);
    cJSON *job = get(&e, "batch/v1/jobs", "default", "j");
    ASSERT_EQ_STR(kobj_str(kobj_cond(job, "Failed"), "reason"), "BackoffLimitExceeded");
    ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 1);
    cJSON_Delete(job);
    struct objstore_delete_opts o = {.propagation = "Background", .grace_seconds = -1};
    ASSERT_OK(objstore_remove(&e.s, "batch/v1/jobs", "default", "j", &o, NULL, NULL));
    sync_n(&e, 2);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 0);
    env_done(&e);
}

static cJSON *owner_and_dependent(struct env *e, bool block)
{
    cJSON *owner = create(e, "v1/configmaps",
                          "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":"
                          "\"owner\",\"namespace\":\"default\"}}");
    cJSON *dep = parse("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":"
                       "\"dep\",\"namespace\":\"default\"}}");
    cJSON *refs = cJSON_CreateArray();
    cJSON_AddItemToArray(refs, kobj_owner_ref(owner, false, block));
    kobj_set_item(dep, "metadata.ownerReferences", refs);
    ASSERT_OK(objstore_create(&e->s, "v1/configmaps", "default", dep, NULL, NULL));
    cJSON_Delete(dep);
    return owner;
}

TEST(gc_background_foreground_orphan)
{
    struct env e;
    env_init(&e);
    /* background */
    cJSON_Delete(owner_and_dependent(&e, true));
    ASSERT_OK(objstore_remove(&e.s, "v1/configmaps", "default", "owner", NULL, NULL, NULL));
    ASSERT_EQ_INT(memstore_count(e.m, "v1/configmaps"), 1);
    sync_n(&e, 1);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/configmaps"), 0);

    /* foreground: the owner stays until the blocking dependent is gone */
    cJSON_Delete(owner_and_dependent(&e, true));
    struct objstore_delete_opts fg = {.propagation = "Foreground", .grace_seconds = -1};
    ASSERT_OK(objstore_remove(&e.s, "v1/configmaps", "default", "owner", &fg, NULL, NULL));
    cJSON *o = get(&e, "v1/configmaps", "default", "owner");
    ASSERT_TRUE(kobj_has_finalizer(o, "foregroundDeletion"));
    cJSON_Delete(o);
    sync_n(&e, 1);
    cJSON *dp = get(&e, "v1/configmaps", "default", "dep");
    ASSERT_TRUE(kobj_deleting(dp)); /* deleted in the foreground too */
    cJSON_Delete(dp);
    o = get(&e, "v1/configmaps", "default", "owner");
    ASSERT_NOT_NULL(o); /* still blocked by its dependent */
    cJSON_Delete(o);
    sync_n(&e, 1); /* the dependent's own foreground finalizer goes */
    ASSERT_NULL(get(&e, "v1/configmaps", "default", "dep"));
    sync_n(&e, 1);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/configmaps"), 0);

    /* orphan: the dependent survives without the reference */
    cJSON_Delete(owner_and_dependent(&e, true));
    struct objstore_delete_opts orph = {.propagation = "Orphan", .grace_seconds = -1};
    ASSERT_OK(objstore_remove(&e.s, "v1/configmaps", "default", "owner", &orph, NULL, NULL));
    sync_n(&e, 2);
    ASSERT_NULL(get(&e, "v1/configmaps", "default", "owner"));
    cJSON *dep = get(&e, "v1/configmaps", "default", "dep");
    ASSERT_NOT_NULL(dep);
    ASSERT_NULL(kobj_at(dep, "metadata.ownerReferences"));
    cJSON_Delete(dep);
    env_done(&e);
}

/* A dependent whose owner is already gone, made with no deletion to set
 * the collector off: not collected in the second its collector last ran,
 * but in the first pass of the next one, which the pass asks to be woken
 * for. */
TEST(gc_collects_an_orphan_made_after_its_owner_within_a_second)
{
    struct env e;
    env_init(&e);
    cJSON_Delete(owner_and_dependent(&e, false));
    ASSERT_OK(objstore_remove(&e.s, "v1/configmaps", "default", "dep", NULL, NULL, NULL));
    ASSERT_OK(objstore_remove(&e.s, "v1/configmaps", "default", "owner", NULL, NULL, NULL));
    sync_n(&e, 2); /* the deletions: the collector ran and found nothing */
    cJSON *dep = parse("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":"
                       "\"late\",\"namespace\":\"default\",\"ownerReferences\":[{\"apiVersion\":"
                       "\"v1\",\"kind\":\"ConfigMap\",\"name\":\"owner\",\"uid\":\"gone\"}]}}");
    ASSERT_OK(objstore_create(&e.s, "v1/configmaps", "default", dep, NULL, NULL));
    cJSON_Delete(dep);
    int64_t next = -1;
    ASSERT_OK(devctl_sync(e.d, fake_now, &next, NULL));
    ASSERT_EQ_INT(memstore_count(e.m, "v1/configmaps"), 1); /* not in this second */
    ASSERT_EQ_INT(next, 1);
    fake_now++;
    sync_n(&e, 1);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/configmaps"), 0);
    env_done(&e);
}

TEST(gc_keeps_dependents_of_unwatched_kinds_and_live_owners)
{
    cJSON *a = parse("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\","
                     "\"uid\":\"1\",\"ownerReferences\":[{\"apiVersion\":\"x.io/v1\",\"kind\":"
                     "\"Thing\",\"name\":\"t\",\"uid\":\"99\"}]}}");
    cJSON *b = parse("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"b\","
                     "\"uid\":\"2\",\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":"
                     "\"ConfigMap\",\"name\":\"a\",\"uid\":\"1\"},{\"apiVersion\":\"v1\",\"kind\":"
                     "\"ConfigMap\",\"name\":\"gone\",\"uid\":\"3\"}]}}");
    struct gc_obj objs[] = {{"v1/configmaps", a}, {"v1/configmaps", b}};
    const char *kinds[] = {"v1/ConfigMap"};
    struct gc_plan p;
    gc_decide(objs, 2, kinds, 1, &p);
    ASSERT_EQ_INT(p.n, 1); /* only: drop b's dangling reference */
    ASSERT_EQ_INT(p.acts[0].kind, GC_REMOVE_REFS);
    ASSERT_EQ_INT(p.acts[0].idx, 1);
    ASSERT_EQ_STR(p.acts[0].uids[0], "3");
    cJSON *c = gc_without_refs(b, p.acts[0].uids, p.acts[0].nuids);
    ASSERT_EQ_INT(cJSON_GetArraySize(kobj_at(c, "metadata.ownerReferences")), 1);
    cJSON_Delete(c);
    gc_plan_done(&p);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* Owner lookup through the uid index over many objects: 2,000 owners
 * (every other one gone) with 4 dependents each; exactly the dependents of
 * the absent owners are collected. (The speed of the lookup is a figure of
 * bench/operator, not asserted here; the quadratic scan it replaced took
 * over 20 s at 10,000 owners, the index 0.3 s.) */
TEST_T(gc_decides_by_owner_uid_over_many_objects, 60)
{
    enum { OWNERS = 2000, DEPS = 4 };
    size_t n = 0;
    struct gc_obj *objs = calloc(OWNERS * (DEPS + 1), sizeof *objs);
    ASSERT_NOT_NULL(objs);
    for (int i = 0; i < OWNERS; i++) {
        char uid[32];
        snprintf(uid, sizeof uid, "owner-%05d", i);
        if (i % 2 == 0) { /* present */
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "apiVersion", "v1");
            cJSON_AddStringToObject(o, "kind", "ConfigMap");
            cJSON *md = cJSON_AddObjectToObject(o, "metadata");
            cJSON_AddStringToObject(md, "name", uid);
            cJSON_AddStringToObject(md, "uid", uid);
            objs[n++] = (struct gc_obj){"v1/configmaps", o};
        }
        for (int d = 0; d < DEPS; d++) {
            char name[48];
            snprintf(name, sizeof name, "dep-%05d-%d", i, d);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "apiVersion", "v1");
            cJSON_AddStringToObject(o, "kind", "Secret");
            cJSON *md = cJSON_AddObjectToObject(o, "metadata");
            cJSON_AddStringToObject(md, "name", name);
            cJSON_AddStringToObject(md, "uid", name);
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "apiVersion", "v1");
            cJSON_AddStringToObject(r, "kind", "ConfigMap");
            cJSON_AddStringToObject(r, "name", uid);
            cJSON_AddStringToObject(r, "uid", uid);
            cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"), r);
            objs[n++] = (struct gc_obj){"v1/secrets", o};
        }
    }
    const char *kinds[] = {"v1/ConfigMap", "v1/Secret"};
    struct gc_plan p;
    gc_decide(objs, n, kinds, 2, &p);
    /* exactly the dependents of the absent owners are deleted */
    ASSERT_EQ_INT(p.n, OWNERS / 2 * DEPS);
    for (size_t i = 0; i < p.n; i++) {
        ASSERT_EQ_INT(p.acts[i].kind, GC_DELETE);
        const char *owner = kobj_str(kobj_at(objs[p.acts[i].idx].obj,
                                             "metadata.ownerReferences")->child, "uid");
        ASSERT_EQ_INT((owner[strlen(owner) - 1] - '0') % 2, 1);
    }
    gc_plan_done(&p);
    for (size_t i = 0; i < n; i++)
        cJSON_Delete((cJSON *)objs[i].obj);
    free(objs);
}

#define DEP_JSON(replicas, cmd)                                                                    \
    "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"op\","          \
    "\"namespace\":\"default\"},\"spec\":{\"replicas\":" replicas ",\"selector\":{"               \
    "\"matchLabels\":{\"app\":\"op\"}},\"template\":{\"metadata\":{\"labels\":{\"app\":\"op\"}},"  \
    "\"spec\":{\"containers\":[{\"name\":\"main\",\"command\":[\"" cmd "\"]}]}}}}"

static void make_ready(struct env *e)
{
    cJSON *pods = list_items(e, "v1/pods", "default");
    const cJSON *p;
    cJSON_ArrayForEach(p, pods)
    {
        if (kobj_deleting(p))
            continue;
        cJSON *c = json_dup(p);
        kobj_set_str(c, "status.phase", "Running");
        kobj_set_cond(c, "Ready", "True", NULL, NULL, fake_now);
        ASSERT_OK(objstore_update_status(&e->s, "v1/pods", "default", c, NULL, NULL));
        cJSON_Delete(c);
    }
    cJSON_Delete(pods);
}

TEST(deployment_replicas_replacement_and_recreate)
{
    struct env e;
    env_init(&e);
    cJSON_Delete(create(&e, "apps/v1/deployments", DEP_JSON("2", "a")));
    sync_n(&e, 1);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 2);
    make_ready(&e);
    sync_n(&e, 1);
    cJSON *d = get(&e, "apps/v1/deployments", "default", "op");
    ASSERT_EQ_INT(kobj_int(d, "status.readyReplicas", 0), 2);
    ASSERT_EQ_INT(kobj_int(d, "status.availableReplicas", 0), 2);
    ASSERT_EQ_INT(kobj_int(d, "status.observedGeneration", 0), 1);
    ASSERT_TRUE(kobj_cond_true(d, "Available"));
    ASSERT_EQ_STR(kobj_str(kobj_cond(d, "Progressing"), "reason"), "NewReplicaSetAvailable");
    cJSON_Delete(d);

    /* a pod that dies is replaced */
    cJSON *pods = list_items(&e, "v1/pods", "default");
    set_pod_phase(&e, cJSON_GetArrayItem(pods, 0), "Failed", 137);
    cJSON_Delete(pods);
    sync_n(&e, 2);
    pods = list_items(&e, "v1/pods", "default");
    int live = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, pods) live += !kobj_deleting(p) && !kobj_str(p, "status.phase") ? 1 : 0;
    ASSERT_EQ_INT(live, 1); /* one new pod, not yet started */
    ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 2);
    cJSON_Delete(pods);

    /* template change: old pods go first, then the new ones come */
    make_ready(&e);
    d = get(&e, "apps/v1/deployments", "default", "op");
    kobj_set_item(d, "spec", parse("{\"replicas\":2,\"selector\":{\"matchLabels\":{\"app\":\"op\"}},"
                                  "\"template\":{\"metadata\":{\"labels\":{\"app\":\"op\"}},\"spec\":"
                                  "{\"containers\":[{\"name\":\"main\",\"command\":[\"b\"]}]}}}"));
    ASSERT_OK(objstore_update(&e.s, "apps/v1/deployments", "default", d, NULL, NULL));
    cJSON_Delete(d);
    sync_n(&e, 1);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 0); /* not on a node: removed at once */
    sync_n(&e, 1);
    pods = list_items(&e, "v1/pods", "default");
    ASSERT_EQ_INT(cJSON_GetArraySize(pods), 2);
    char hash[11];
    cJSON *dn = get(&e, "apps/v1/deployments", "default", "op");
    deployctl_template_hash(kobj_at(dn, "spec.template"), hash);
    cJSON_ArrayForEach(p, pods) ASSERT_EQ_STR(kobj_label(p, "pod-template-hash"), hash);
    const cJSON *c0 = cJSON_GetArrayItem(kobj_at(cJSON_GetArrayItem(pods, 0), "spec.containers"), 0);
    ASSERT_EQ_STR(cJSON_GetArrayItem(kobj_at(c0, "command"), 0)->valuestring, "b");
    cJSON_Delete(pods);
    sync_n(&e, 1);
    cJSON_Delete(dn);
    dn = get(&e, "apps/v1/deployments", "default", "op");
    ASSERT_EQ_INT(kobj_int(dn, "status.observedGeneration", 0), 2);
    ASSERT_EQ_INT(kobj_int(dn, "status.updatedReplicas", 0), 2);
    ASSERT_FALSE(kobj_cond_true(dn, "Available"));
    cJSON_Delete(dn);
    env_done(&e);
}

TEST(pvc_binds_to_a_directory_removed_with_the_claim)
{
    struct env e;
    env_init(&e);
    cJSON *pvc = create(&e, "v1/persistentvolumeclaims",
                        "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{"
                        "\"name\":\"ws\",\"namespace\":\"default\"},\"spec\":{\"accessModes\":["
                        "\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":\"1Gi\"}}}}");
    sync_n(&e, 1);
    cJSON *b = get(&e, "v1/persistentvolumeclaims", "default", "ws");
    ASSERT_EQ_STR(kobj_str(b, "status.phase"), "Bound");
    ASSERT_EQ_STR(kobj_str(b, "status.capacity.storage"), "1Gi");
    char *vn = xasprintf("pvc-%s", kobj_str(pvc, "metadata.uid"));
    ASSERT_EQ_STR(kobj_str(b, "spec.volumeName"), vn);
    char *dir = xasprintf("%s/default/%s", e.voldir, kobj_str(pvc, "metadata.uid"));
    struct stat st;
    ASSERT_OK(stat(dir, &st));
    ASSERT_TRUE(S_ISDIR(st.st_mode));
    char *f = xasprintf("%s/file", dir);
    FILE *fp = fopen(f, "w");
    ASSERT_NOT_NULL(fp);
    fclose(fp);
    ASSERT_OK(objstore_remove(&e.s, "v1/persistentvolumeclaims", "default", "ws", NULL, NULL, NULL));
    ASSERT_OK(stat(dir, &st)); /* the finalizer holds it until the controller runs */
    sync_n(&e, 1);
    ASSERT_EQ_INT(stat(dir, &st), -1);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/persistentvolumeclaims"), 0);
    free(f);
    free(dir);
    free(vn);
    cJSON_Delete(b);
    cJSON_Delete(pvc);
    env_done(&e);
}

TEST(namespace_deletion_removes_contents_then_namespace)
{
    struct env e;
    env_init(&e);
    cJSON_Delete(create(&e, "v1/namespaces",
                        "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"x\"}}"));
    sync_n(&e, 1);
    cJSON_Delete(create(&e, "v1/configmaps",
                        "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\","
                        "\"namespace\":\"x\"}}"));
    cJSON_Delete(create(&e, "tern.dev/v1alpha1/agentsessions",
                        "{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\",\"metadata\":"
                        "{\"name\":\"s\",\"namespace\":\"x\"}}"));
    ASSERT_EQ_INT(memstore_count(e.m, "v1/serviceaccounts"), 2);
    ASSERT_OK(objstore_remove(&e.s, "v1/namespaces", "", "x", NULL, NULL, NULL));
    cJSON *ns = get(&e, "v1/namespaces", "", "x");
    ASSERT_EQ_STR(kobj_str(ns, "status.phase"), "Terminating");
    cJSON_Delete(ns);
    sync_n(&e, 2);
    ASSERT_NULL(get(&e, "v1/namespaces", "", "x"));
    ASSERT_EQ_INT(memstore_count(e.m, "v1/configmaps"), 0);
    ASSERT_EQ_INT(memstore_count(e.m, "tern.dev/v1alpha1/agentsessions"), 0);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/serviceaccounts"), 1);
    env_done(&e);
}

TEST(memstore_conflict_and_graceful_pod_delete)
{
    struct env e;
    env_init(&e);
    cJSON *p = create(&e, "v1/pods",
                      "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\","
                      "\"namespace\":\"default\"},\"spec\":{\"nodeName\":\"tern-dev\"}}");
    cJSON *c = json_dup(p);
    kobj_set_str(c, "metadata.labels.a", "b");
    ASSERT_OK(objstore_update(&e.s, "v1/pods", "default", c, NULL, NULL));
    ASSERT_EQ_INT(objstore_update(&e.s, "v1/pods", "default", c, NULL, NULL), TERN_ECONFLICT);
    ASSERT_EQ_INT(objstore_create(&e.s, "v1/pods", "default", p, NULL, NULL), -EEXIST);
    cJSON *got = NULL;
    ASSERT_OK(objstore_remove(&e.s, "v1/pods", "default", "p", NULL, &got, NULL));
    ASSERT_NOT_NULL(got); /* bound to a node: graceful */
    ASSERT_EQ_INT(kobj_int(got, "metadata.deletionGracePeriodSeconds", -1), 30);
    cJSON_Delete(got);
    struct objstore_delete_opts now0 = {.grace_seconds = 0};
    ASSERT_OK(objstore_remove(&e.s, "v1/pods", "default", "p", &now0, &got, NULL));
    ASSERT_NULL(got);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 0);
    cJSON_Delete(c);
    cJSON_Delete(p);
    env_done(&e);
}

TEST(service_account_tokens)
{
    unsigned char key[SATOKEN_KEY_LEN], other[SATOKEN_KEY_LEN];
    char *path = xasprintf("%s/sa.key", th_tmpdir());
    ASSERT_OK(satoken_key_load(path, key, NULL));
    ASSERT_OK(satoken_key_load(path, other, NULL));
    ASSERT_MEM_EQ(key, other, SATOKEN_KEY_LEN); /* stable across loads */
    struct stat st;
    ASSERT_OK(stat(path, &st));
    ASSERT_EQ_INT(st.st_mode & 0777, 0600);
    char *tok;
    ASSERT_OK(satoken_mint(key, "team-a", "review.bot", "0b1c-22", &tok, NULL));
    ASSERT_EQ_STR(strchr(tok, '.') ? "ok" : "", "ok");
    struct satoken_claims c;
    ASSERT_OK(satoken_verify(key, tok, &c, NULL));
    ASSERT_EQ_STR(c.ns, "team-a");
    ASSERT_EQ_STR(c.name, "review.bot");
    ASSERT_EQ_STR(c.uid, "0b1c-22");
    memset(other, 1, sizeof other);
    ASSERT_EQ_INT(satoken_verify(other, tok, &c, NULL), TERN_EAUTH);
    tok[9] = tok[9] == 'a' ? 'b' : 'a';
    ASSERT_EQ_INT(satoken_verify(key, tok, &c, NULL), TERN_EAUTH);
    ASSERT_EQ_INT(satoken_verify(key, "ternsa1_x", &c, NULL), TERN_EAUTH);
    ASSERT_EQ_INT(satoken_mint(key, "a_b", "n", "u", &tok, NULL) == 0 ? 0 : TERN_EINVALID,
                  TERN_EINVALID);
    free(tok);
    free(path);
}

TEST(time_round_trip_and_selectors)
{
    int64_t t;
    ASSERT_OK(kobj_parse_time("2026-11-30T00:22:04Z", &t));
    char ts[32];
    ASSERT_EQ_STR(kobj_fmt_time(t, ts), "2026-11-30T00:22:04Z");
    ASSERT_OK(kobj_parse_time("2026-11-30T01:22:04.123+01:00", &t));
    ASSERT_EQ_STR(kobj_fmt_time(t, ts), "2026-11-30T00:22:04Z");
    ASSERT_EQ_INT(kobj_parse_time("2026-11-30 00:22:04Z", &t), -EINVAL);
    cJSON *sel = parse("{\"matchLabels\":{\"a\":\"1\"},\"matchExpressions\":[{\"key\":\"b\","
                       "\"operator\":\"In\",\"values\":[\"x\",\"y\"]},{\"key\":\"c\",\"operator\":"
                       "\"DoesNotExist\"}]}");
    cJSON *l1 = parse("{\"a\":\"1\",\"b\":\"y\"}"), *l2 = parse("{\"a\":\"1\",\"b\":\"z\"}");
    ASSERT_TRUE(kobj_selector_matches(sel, l1));
    ASSERT_FALSE(kobj_selector_matches(sel, l2));
    cJSON_Delete(sel);
    cJSON_Delete(l1);
    cJSON_Delete(l2);
}

/* The controllers list each resource once and then follow the store's
 * changes; each pass sees the writes of the pass before (a Job's pod is
 * created once, however many passes follow). */
TEST(controllers_list_once_then_follow_changes_and_read_their_writes)
{
    struct env e;
    env_init(&e);
    uint64_t lists = memstore_lists(e.m);
    cJSON_Delete(create(&e, "batch/v1/jobs", JOB_JSON("\"parallelism\":1,")));
    for (int i = 0; i < 5; i++) {
        sync_n(&e, 1);
        ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 1);
    }
    cJSON *pods = list_items(&e, "v1/pods", "default");
    fake_now++;
    set_pod_phase(&e, cJSON_GetArrayItem(pods, 0), "Succeeded", 0);
    cJSON_Delete(pods);
    sync_n(&e, 2);
    cJSON *job = get(&e, "batch/v1/jobs", "default", "j");
    ASSERT_TRUE(kobj_cond_true(job, "Complete"));
    cJSON_Delete(job);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 1);
    /* a namespace made and deleted between passes is seen and emptied */
    cJSON_Delete(create(&e, "v1/namespaces", "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\","
                                              "\"metadata\":{\"name\":\"t\"}}"));
    sync_n(&e, 1);
    cJSON *sa = get(&e, "v1/serviceaccounts", "t", "default");
    ASSERT_NOT_NULL(sa);
    cJSON_Delete(sa);
    ASSERT_OK(objstore_remove(&e.s, "v1/namespaces", "", "t", NULL, NULL, NULL));
    sync_n(&e, 3);
    ASSERT_NULL(get(&e, "v1/namespaces", "", "t"));
    /* the test's own lists only: the controllers listed nothing more */
    ASSERT_EQ_INT(memstore_lists(e.m), lists + 1);
    env_done(&e);
}

/* Passes over an unchanged store decide nothing new, but time-driven work
 * still happens when it is due: a failed pod's replacement after the
 * backoff, with nothing written in between. */
TEST(an_unchanged_store_still_gets_its_time_driven_work)
{
    env_backoff = 5; /* due before the 10 s a skipped pass may last */
    struct env e;
    env_init(&e);
    cJSON_Delete(create(&e, "batch/v1/jobs", JOB_JSON("")));
    sync_n(&e, 1);
    cJSON *pods = list_items(&e, "v1/pods", "default");
    ASSERT_EQ_INT(cJSON_GetArraySize(pods), 1);
    set_pod_phase(&e, cJSON_GetArrayItem(pods, 0), "Failed", 1);
    cJSON_Delete(pods);
    int64_t rev = 0;
    for (int i = 0; i < 4; i++) {
        int64_t next = -1;
        struct tern_err err;
        ASSERT_OK(devctl_sync(e.d, fake_now, &next, &err));
        if (i >= 2) { /* settled: nothing more is written before the backoff */
            ASSERT_EQ_INT(memstore_revision(e.m), rev);
            ASSERT_CMP_INT(next, >, 0);
            ASSERT_CMP_INT(next, <=, 5);
        }
        rev = memstore_revision(e.m);
    }
    ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 1);
    fake_now += 6;
    sync_n(&e, 2);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 2);
    env_done(&e);
}
