/* Informer and event recorder tests against the fake API server: list then
 * watch, handlers, indexes, 410 relist without spurious work, a server
 * restart under a running informer, bookmarks, event series. */
#include "harness.h"

#include "../support/kube/fake_kube.c"
#include "../support/kube/kube_test.h"

#include "base/mem.h"
#include "json/json.h"
#include "kube/informer.h"
#include "kube/kclient.h"
#include "kube/kubeconfig.h"
#include "kube/recorder.h"
#include "http/httpc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const struct kgvr AGS = {"tern.dev", "v1alpha1", "agentsessions"};
#define AGS_COLL "/apis/tern.dev/v1alpha1/namespaces/team-a/agentsessions"
#define PODS_COLL "/api/v1/namespaces/team-a/pods"

#define obj_of(fmt, name, extra) parse_obj(xasprintf(fmt, name, extra))
static cJSON *parse_obj(char *s)
{
    cJSON *o = NULL;
    if (json_parse(s, strlen(s), &o, NULL))
        th_fail(__FILE__, __LINE__, "bad JSON %s", s);
    free(s);
    return o;
}

static void put_session(struct fake_kube *fk, const char *name, const char *objective)
{
    cJSON *o = obj_of("{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\","
                      "\"metadata\":{\"name\":\"%s\",\"managedFields\":[{\"manager\":\"x\"}]},"
                      "\"spec\":{\"objective\":\"%s\"}}",
                      name, objective);
    fake_kube_upsert(fk, AGS_COLL, o);
    cJSON_Delete(o);
}

struct counts {
    atomic_int adds, updates, deletes, resyncs;
    char last_deleted[64];
};

static void on_add(void *ctx, const cJSON *o)
{
    (void)o;
    atomic_fetch_add(&((struct counts *)ctx)->adds, 1);
}

static void on_update(void *ctx, const cJSON *a, const cJSON *b)
{
    struct counts *c = ctx;
    if (a == b)
        atomic_fetch_add(&c->resyncs, 1);
    else
        atomic_fetch_add(&c->updates, 1);
}

static void on_delete(void *ctx, const cJSON *o)
{
    struct counts *c = ctx;
    const cJSON *n = json_get(json_get(o, "metadata"), "name");
    snprintf(c->last_deleted, sizeof c->last_deleted, "%s", n ? n->valuestring : "");
    atomic_fetch_add(&c->deletes, 1);
}

static struct informer *start_informer(struct kubeconfig *cfg, struct counts *c)
{
    struct informer_opts o = {.gvr = AGS, .namespace = "team-a", .page_size = 2,
                              .backoff_ms = 20, .max_backoff_ms = 200, .watch_timeout_s = 30,
                              .client = {.backoff_ms = 10, .max_backoff_ms = 100}};
    struct informer_handlers h = {on_add, on_update, on_delete, c};
    struct informer *inf = informer_new(cfg, &o, &h);
    ASSERT_OK(informer_start(inf));
    ASSERT_OK(informer_wait_synced(inf, 5000));
    return inf;
}

static bool rv_is(struct informer *inf, long long want)
{
    char *rv = informer_resource_version(inf);
    char w[32];
    snprintf(w, sizeof w, "%lld", want);
    bool ok = strcmp(rv, w) == 0;
    free(rv);
    return ok;
}

static const char *objective_of(const cJSON *o)
{
    const cJSON *v = json_get(json_get(o, "spec"), "objective");
    return cJSON_IsString(v) ? v->valuestring : "";
}

TEST(informer_lists_watches_and_indexes)
{
    struct fake_kube *fk = fake_kube_start();
    for (int i = 0; i < 5; i++) {
        char n[16];
        snprintf(n, sizeof n, "s%d", i);
        put_session(fk, n, "one");
    }
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct counts c = {0};
    struct informer *inf = start_informer(cfg, &c);
    ASSERT_EQ_INT(informer_len(inf), 5);
    ASSERT_EQ_INT(atomic_load(&c.adds), 5);
    /* paged: 5 objects, pages of 2 -> 3 list requests, then the watch */
    struct informer_stats st;
    informer_get_stats(inf, &st);
    ASSERT_EQ_INT(st.lists, 1);
    char *q = NULL;
    WAIT_FOR(fake_kube_watchers(fk) == 1, 5000);
    ASSERT_EQ_INT(fake_kube_count(fk, "GET", AGS_COLL), 4);
    fake_kube_last(fk, "GET", AGS_COLL, &q, NULL);
    ASSERT_CONTAINS(q, "watch=true");
    ASSERT_CONTAINS(q, "allowWatchBookmarks=true");
    /* managedFields are not cached */
    cJSON *got = informer_get(inf, "team-a", "s1");
    ASSERT_NOT_NULL(got);
    ASSERT_NULL(json_get(json_get(got, "metadata"), "managedFields"));
    cJSON_Delete(got);
    /* changes arrive through the watch */
    put_session(fk, "s1", "two");
    put_session(fk, "s9", "new");
    fake_kube_remove(fk, AGS_COLL, "s0");
    WAIT_FOR(rv_is(inf, fake_kube_rv(fk)), 5000);
    ASSERT_EQ_INT(atomic_load(&c.adds), 6);
    ASSERT_EQ_INT(atomic_load(&c.updates), 1);
    ASSERT_EQ_INT(atomic_load(&c.deletes), 1);
    ASSERT_EQ_STR(c.last_deleted, "s0");
    got = informer_get(inf, "team-a", "s1");
    ASSERT_EQ_STR(objective_of(got), "two");
    cJSON_Delete(got);
    ASSERT_NULL(informer_get(inf, "team-a", "s0"));
    /* bookmarks advance the tracked version without handler calls */
    fake_kube_bookmark(fk);
    WAIT_FOR(rv_is(inf, fake_kube_rv(fk)), 5000);
    informer_get_stats(inf, &st);
    ASSERT_EQ_INT(st.bookmarks, 1);
    /* resync: on_update(obj, obj) for each object, no request */
    int reqs = fake_kube_count(fk, NULL, "/");
    informer_resync(inf);
    ASSERT_EQ_INT(atomic_load(&c.resyncs), 5);
    ASSERT_EQ_INT(fake_kube_count(fk, NULL, "/"), reqs);
    informer_free(inf);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

static void drop_spec(void *ctx, cJSON *obj)
{
    atomic_fetch_add((atomic_int *)ctx, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "spec");
}

static bool added_had_spec;
static void on_add_look(void *ctx, const cJSON *o)
{
    (void)ctx;
    added_had_spec = json_get(o, "spec") != NULL;
}

/* A transform decides what the cache keeps, and the handlers see the same. */
TEST(informer_transform_trims_what_is_cached)
{
    struct fake_kube *fk = fake_kube_start();
    put_session(fk, "s1", "one");
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    atomic_int calls = 0;
    struct informer_opts o = {.gvr = AGS, .namespace = "team-a", .transform = drop_spec,
                              .transform_ctx = &calls, .watch_timeout_s = 30};
    struct informer_handlers h = {on_add_look, NULL, NULL, NULL};
    struct informer *inf = informer_new(cfg, &o, &h);
    ASSERT_OK(informer_start(inf));
    ASSERT_OK(informer_wait_synced(inf, 5000));
    ASSERT_EQ_INT(atomic_load(&calls), 1);
    ASSERT_FALSE(added_had_spec);
    cJSON *got = informer_get(inf, "team-a", "s1");
    ASSERT_NULL(json_get(got, "spec"));
    ASSERT_EQ_STR(json_get(json_get(got, "metadata"), "name")->valuestring, "s1");
    cJSON_Delete(got);
    put_session(fk, "s2", "two"); /* through the watch too */
    WAIT_FOR(informer_len(inf) == 2, 5000);
    got = informer_get(inf, "team-a", "s2");
    ASSERT_NULL(json_get(got, "spec"));
    cJSON_Delete(got);
    ASSERT_EQ_INT(atomic_load(&calls), 2);
    informer_free(inf);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

static int count_cb(void *ctx, const cJSON *o)
{
    (void)o;
    (*(int *)ctx)++;
    return 0;
}

TEST(informer_owner_index)
{
    struct fake_kube *fk = fake_kube_start();
#define pod "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\"," \
            "\"ownerReferences\":[%s]}}"
    cJSON *p1 = obj_of(pod, "p1", "{\"uid\":\"owner-a\",\"kind\":\"AgentSession\",\"name\":\"a\",\"apiVersion\":\"tern.dev/v1alpha1\"}");
    cJSON *p2 = obj_of(pod, "p2", "{\"uid\":\"owner-a\",\"kind\":\"AgentSession\",\"name\":\"a\",\"apiVersion\":\"tern.dev/v1alpha1\"}");
    cJSON *p3 = obj_of(pod, "p3", "{\"uid\":\"owner-b\",\"kind\":\"AgentSession\",\"name\":\"b\",\"apiVersion\":\"tern.dev/v1alpha1\"}");
    fake_kube_upsert(fk, PODS_COLL, p1);
    fake_kube_upsert(fk, PODS_COLL, p2);
    fake_kube_upsert(fk, PODS_COLL, p3);
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct informer_opts o = {.gvr = {"", "v1", "pods"}, .backoff_ms = 20};
    struct informer *inf = informer_new(cfg, &o, NULL);
    ASSERT_OK(informer_start(inf));
    ASSERT_OK(informer_wait_synced(inf, 5000));
    int n = 0;
    informer_each_owned(inf, "owner-a", count_cb, &n);
    ASSERT_EQ_INT(n, 2);
    /* re-owning p2 moves it between index entries */
    cJSON *p2b = obj_of(pod, "p2", "{\"uid\":\"owner-b\",\"kind\":\"AgentSession\",\"name\":\"b\",\"apiVersion\":\"tern.dev/v1alpha1\"}");
    fake_kube_upsert(fk, PODS_COLL, p2b);
    fake_kube_remove(fk, PODS_COLL, "p3");
    WAIT_FOR(rv_is(inf, fake_kube_rv(fk)), 5000);
    n = 0;
    informer_each_owned(inf, "owner-a", count_cb, &n);
    ASSERT_EQ_INT(n, 1);
    n = 0;
    informer_each_owned(inf, "owner-b", count_cb, &n);
    ASSERT_EQ_INT(n, 1);
    n = 0;
    informer_each(inf, count_cb, &n);
    ASSERT_EQ_INT(n, 2);
    informer_free(inf);
    cJSON_Delete(p1);
    cJSON_Delete(p2);
    cJSON_Delete(p2b);
    cJSON_Delete(p3);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST(informer_relists_on_410_without_spurious_events)
{
    struct fake_kube *fk = fake_kube_start();
    for (int i = 0; i < 6; i++) {
        char n[16];
        snprintf(n, sizeof n, "s%d", i);
        put_session(fk, n, "one");
    }
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct counts c = {0};
    struct informer *inf = start_informer(cfg, &c);
    WAIT_FOR(fake_kube_watchers(fk) == 1, 5000);
    /* while the watch holds events back: one change, one delete, one add;
     * then compaction ends the stream and the informer's version is gone, so
     * resuming the watch gets 410 Expired and the informer relists */
    fake_kube_pause_watches(fk);
    put_session(fk, "s2", "changed");
    fake_kube_remove(fk, AGS_COLL, "s3");
    put_session(fk, "s7", "new");
    int gets = fake_kube_count(fk, "GET", AGS_COLL);
    fake_kube_compact(fk);
    struct informer_stats st;
    WAIT_FOR(rv_is(inf, fake_kube_rv(fk)) && atomic_load(&c.adds) == 7, 10000);
    informer_get_stats(inf, &st);
    ASSERT_EQ_INT(st.relists, 1);
    /* rewatch (410) + a 3-page relist + the new watch */
    WAIT_FOR(fake_kube_count(fk, "GET", AGS_COLL) == gets + 5, 5000);
    ASSERT_EQ_INT(atomic_load(&c.adds), 7);    /* 6 + s7 */
    ASSERT_EQ_INT(atomic_load(&c.updates), 1); /* s2 only: unchanged objects cost nothing */
    ASSERT_EQ_INT(atomic_load(&c.deletes), 1); /* s3, with its last state */
    ASSERT_EQ_STR(c.last_deleted, "s3");
    ASSERT_EQ_INT(informer_len(inf), 6);
    /* and the new watch works */
    put_session(fk, "s4", "after");
    WAIT_FOR(atomic_load(&c.updates) == 2, 5000);
    informer_free(inf);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST(informer_survives_server_restart)
{
    struct fake_kube *fk = fake_kube_start();
    put_session(fk, "a", "one");
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct counts c = {0};
    struct informer *inf = start_informer(cfg, &c);
    WAIT_FOR(fake_kube_watchers(fk) == 1, 5000);
    /* the server goes away for a while (list/watch attempts fail) */
    fake_kube_stop(fk);
    put_session(fk, "a", "two");
    put_session(fk, "b", "new");
    struct informer_stats st;
    informer_get_stats(inf, &st);
    unsigned long errs = st.errors;
    WAIT_FOR((informer_get_stats(inf, &st), st.errors >= errs + 2), 5000);
    ASSERT_OK(fake_kube_restart(fk));
    WAIT_FOR(rv_is(inf, fake_kube_rv(fk)), 10000);
    cJSON *a = informer_get(inf, "team-a", "a");
    ASSERT_EQ_STR(objective_of(a), "two");
    cJSON_Delete(a);
    ASSERT_EQ_INT(atomic_load(&c.adds), 2);
    ASSERT_EQ_INT(atomic_load(&c.updates), 1);
    /* stopping while the watch is open returns promptly */
    WAIT_FOR(fake_kube_watchers(fk) == 1, 5000);
    long long t0 = now_ms();
    informer_stop(inf);
    ASSERT_CMP_INT(now_ms() - t0, <, 3000);
    informer_free(inf);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST(informer_watch_cut_mid_line)
{
    struct fake_kube *fk = fake_kube_start();
    fake_kube_split_watch(fk, true);
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct counts c = {0};
    struct informer *inf = start_informer(cfg, &c);
    WAIT_FOR(fake_kube_watchers(fk) == 1, 5000);
    for (int i = 0; i < 5; i++) {
        char n[16];
        snprintf(n, sizeof n, "x%d", i);
        put_session(fk, n, "cut");
    }
    WAIT_FOR(atomic_load(&c.adds) == 5, 5000);
    struct informer_stats st;
    informer_get_stats(inf, &st);
    ASSERT_EQ_INT(st.errors, 0);
    ASSERT_EQ_INT(st.relists, 0);
    informer_free(inf);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

/* ---- events ---- */

TEST(recorder_aggregates_repeats_into_a_series)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct recorder_opts o = {.controller = "tern.dev/operator", .instance = "op-0",
                              .series_flush_ms = 60000};
    struct recorder *r = recorder_new(cfg, &o);
    ASSERT_NOT_NULL(r);
    struct recorder_ref ref = {"tern.dev/v1alpha1", "AgentSession", "team-a", "s1", "uid-1"};
    for (int i = 0; i < 5; i++)
        ASSERT_OK(recorder_event(r, &ref, "Warning", "SandboxNotReady", "Reconcile",
                                 "pod %s not ready", "s1-sandbox"));
    ASSERT_OK(recorder_event(r, &ref, "Normal", "TurnStarted", "StartTurn", "turn %d", 1));
    ASSERT_EQ_INT(recorder_event(r, &ref, "Bogus", "X", "Y", "z"), -EINVAL);
    ASSERT_EQ_INT(recorder_event(r, &ref, "Normal", "has space", "Y", "z"), -EINVAL);
    recorder_flush(r);
    struct recorder_stats st;
    recorder_get_stats(r, &st);
    ASSERT_EQ_INT(st.created, 2);
    ASSERT_EQ_INT(st.patched, 1);
    ASSERT_EQ_INT(fake_kube_count(fk, "POST", "/apis/events.k8s.io/v1/namespaces/team-a/events"), 2);
    char *ct = NULL;
    char *body = fake_kube_last(fk, "PATCH", "/apis/events.k8s.io/v1/namespaces/team-a/events/", NULL, &ct);
    ASSERT_CONTAINS(body, "\"count\":5");
    ASSERT_CONTAINS(body, "lastObservedTime");
    ASSERT_EQ_STR(ct, "application/merge-patch+json");
    char *post = fake_kube_last(fk, "POST", "/apis/events.k8s.io/", NULL, NULL);
    ASSERT_CONTAINS(post, "\"reportingController\":\"tern.dev/operator\"");
    ASSERT_CONTAINS(post, "\"reportingInstance\":\"op-0\"");
    ASSERT_CONTAINS(post, "\"action\":\"StartTurn\"");
    ASSERT_CONTAINS(post, "\"regarding\":{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\"");
    ASSERT_CONTAINS(post, "\"eventTime\":\"");
    /* a long note is cut to 1 kB */
    char big[3000];
    memset(big, 'n', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ASSERT_OK(recorder_event(r, &ref, "Normal", "Long", "Note", "%s", big));
    recorder_flush(r);
    post = fake_kube_last(fk, "POST", "/apis/events.k8s.io/", NULL, NULL);
    cJSON *ev = NULL;
    ASSERT_OK(json_parse(post, strlen(post), &ev, NULL));
    ASSERT_EQ_INT(strlen(json_get(ev, "note")->valuestring), 1024);
    cJSON_Delete(ev);
    recorder_free(r);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST(recorder_flushes_series_on_its_timer_and_recreates_expired_events)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct recorder_opts o = {.controller = "tern.dev/operator", .instance = "op-0",
                              .series_flush_ms = 200};
    struct recorder *r = recorder_new(cfg, &o);
    struct recorder_ref ref = {"v1", "Pod", "team-a", "p1", "uid-p1"};
    struct recorder_stats st;
    ASSERT_OK(recorder_event(r, &ref, "Normal", "Pulled", "Pull", "image pulled"));
    WAIT_FOR((recorder_get_stats(r, &st), st.created == 1), 5000);
    ASSERT_OK(recorder_event(r, &ref, "Normal", "Pulled", "Pull", "image pulled"));
    ASSERT_OK(recorder_event(r, &ref, "Normal", "Pulled", "Pull", "image pulled"));
    /* no flush call: the recorder's own timer writes the series */
    WAIT_FOR((recorder_get_stats(r, &st), st.patched == 1), 5000);
    char *body = fake_kube_last(fk, "PATCH", "/apis/events.k8s.io/", NULL, NULL);
    ASSERT_CONTAINS(body, "\"count\":3");
    /* the Event was garbage-collected (TTL): the next repeat creates it again */
    cJSON *list = NULL;
    struct kclient *kc = kclient_new(cfg, NULL);
    ASSERT_OK(kclient_list(kc, &(struct kgvr){"events.k8s.io", "v1", "events"}, "team-a", NULL,
                           &list, NULL));
    const char *name = json_get(json_get(cJSON_GetArrayItem(json_get(list, "items"), 0),
                                         "metadata"), "name")->valuestring;
    fake_kube_remove(fk, "/apis/events.k8s.io/v1/namespaces/team-a/events", name);
    cJSON_Delete(list);
    struct timespec wait = {0, 250000000}; /* past the flush interval, so it writes at once */
    nanosleep(&wait, NULL);
    ASSERT_OK(recorder_event(r, &ref, "Normal", "Pulled", "Pull", "image pulled"));
    WAIT_FOR(fake_kube_count(fk, "POST", "/apis/events.k8s.io/") == 2, 5000);
    char *post = fake_kube_last(fk, "POST", "/apis/events.k8s.io/", NULL, NULL);
    ASSERT_CONTAINS(post, "\"count\":4");
    kclient_free(kc);
    recorder_free(r);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

/* ---- the process model: informers + queue workers + an HTTP endpoint ---- */

#include "kube/workqueue.h"

#include <sys/resource.h>

static void enqueue_key(void *ctx, const cJSON *o)
{
    char *k = informer_key(o);
    workqueue_add(ctx, k);
    free(k);
}

static void enqueue_update(void *ctx, const cJSON *a, const cJSON *b)
{
    (void)a;
    enqueue_key(ctx, b);
}

struct worker {
    struct workqueue *q;
    atomic_int *handled;
    pthread_t th;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    char *k;
    while (workqueue_get(w->q, &k) == 0) {
        atomic_fetch_add(w->handled, 1);
        workqueue_done(w->q, k);
        free(k);
    }
    return NULL;
}

static enum MHD_Result health(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)url;
    (void)method;
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    struct MHD_Response *r = MHD_create_response_from_buffer(2, (void *)"ok", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static long cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L;
}

TEST(one_process_runs_informers_workers_and_http_without_busy_waiting)
{
    struct fake_kube *fk = fake_kube_start();
    put_session(fk, "s1", "x");
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct workqueue *q = workqueue_new(NULL);
    struct informer_handlers h = {enqueue_key, enqueue_update, enqueue_key, q};
    struct informer_opts o1 = {.gvr = AGS, .watch_timeout_s = 60};
    struct informer_opts o2 = {.gvr = {"", "v1", "pods"}, .watch_timeout_s = 60};
    struct informer *i1 = informer_new(cfg, &o1, &h), *i2 = informer_new(cfg, &o2, &h);
    ASSERT_OK(informer_start(i1));
    ASSERT_OK(informer_start(i2));
    atomic_int handled = 0;
    struct worker w[2] = {{q, &handled, 0}, {q, &handled, 0}};
    for (int i = 0; i < 2; i++)
        pthread_create(&w[i].th, NULL, work, &w[i]);
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0,
                                            NULL, NULL, health, NULL, MHD_OPTION_END);
    ASSERT_NOT_NULL(d);
    int port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
    ASSERT_OK(informer_wait_synced(i1, 5000));
    ASSERT_OK(informer_wait_synced(i2, 5000));
    WAIT_FOR(fake_kube_watchers(fk) == 2 && atomic_load(&handled) == 1, 5000);
    put_session(fk, "s2", "y");
    cJSON *p = obj_of("{\"metadata\":{\"name\":\"%s\",\"labels\":{\"x\":\"%s\"}}}", "p1", "1");
    fake_kube_upsert(fk, PODS_COLL, p);
    cJSON_Delete(p);
    WAIT_FOR(atomic_load(&handled) == 3, 5000);
    struct httpc *hc = httpc_new();
    char *url = xasprintf("http://127.0.0.1:%d/healthz", port);
    struct httpc_request rq = {.url = url, .timeout_ms = 5000};
    struct httpc_response rs;
    ASSERT_OK(httpc_do(hc, &rq, &rs, NULL));
    ASSERT_EQ_INT(rs.status, 200);
    httpc_response_done(&rs);
    /* idle: two open watches, two blocked workers, a listening endpoint (and
     * the fake server's own threads) must cost next to no CPU */
    long c0 = cpu_ms();
    struct timespec one = {1, 0};
    nanosleep(&one, NULL);
    long used = cpu_ms() - c0;
    ASSERT_CMP_INT(used, <, 100);
    /* clean shutdown */
    informer_free(i1);
    informer_free(i2);
    workqueue_shutdown(q);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i].th, NULL);
    workqueue_drain(q);
    workqueue_free(q);
    MHD_stop_daemon(d);
    httpc_free(hc);
    free(url);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}
