/* test_apistore.c - the in-process storage and watch API of tern-dev
 * (apistore + apiwatch) against a real etcd: what part 2's controllers use. */
#include "harness.h"

#include "../support/etcd_fixture.h"
#include "apiserver/apiauth.h"
#include "apiserver/apipki.h"
#include "apiserver/apirest.h"
#include "apiserver/apiserver.h"
#include "http/httpc.h"
#include "apiserver/apistore.h"
#include "apiserver/apiwatch.h"
#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "devctl/satoken.h"
#include "etcd/etcd.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct etcd_fixture fx;

static struct etcd *start(void)
{
    struct tern_err e = {0};
    if (etcd_fixture_start(&fx, th_tmpdir(), NULL, &e))
        th_fail(__FILE__, __LINE__, "etcd fixture: %s", e.msg);
    const char *eps[] = {fx.url};
    struct etcd *c = NULL;
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1}, &c, &e));
    return c;
}

/* The REST layer over c with the default namespaces (no watch hub). */
static void rest_up(struct etcd *c, struct apirest *rest)
{
    struct tern_err e = {0};
    ASSERT_OK(apirest_init(rest, c, NULL, "127.0.0.1:0", &e));
    ASSERT_OK(apirest_bootstrap(rest, &e));
}

static void rest_down(struct etcd *c, struct apirest *rest)
{
    apirest_done(rest);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

static cJSON *cm(const char *name, const char *v)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "ConfigMap");
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(md, "name", name);
    cJSON_AddStringToObject(md, "resourceVersion", "999"); /* never stored */
    cJSON *d = cJSON_AddObjectToObject(o, "data");
    cJSON_AddStringToObject(d, "v", v);
    return o;
}

static const char *rv(const cJSON *o)
{
    return json_get(json_get(o, "metadata"), "resourceVersion")->valuestring;
}

TEST_T(store_crud_with_revisions, 60)
{
    struct etcd *c = start();
    struct apistore st;
    apistore_init(&st, c);
    struct tern_err e = {0};
    cJSON *o = cm("a", "1");
    int64_t r1 = 0, r2 = 0, r3 = 0;
    ASSERT_OK(apistore_create(&st, "/registry/configmaps/ns/a", o, &r1, &e));
    ASSERT_EQ_INT(apistore_create(&st, "/registry/configmaps/ns/a", o, &r2, &e), TERN_ECONFLICT);
    cJSON *got = NULL;
    int64_t grev = 0;
    ASSERT_OK(apistore_get(&st, "/registry/configmaps/ns/a", &got, &grev, &e));
    ASSERT_EQ_INT(grev, r1);
    char b[21];
    ASSERT_EQ_STR(rv(got), num_fmt_i64(r1, b));
    cJSON_Delete(got);
    ASSERT_OK(apistore_update(&st, "/registry/configmaps/ns/a", o, r1, &r2, &e));
    ASSERT_CMP_INT(r2, >, r1);
    ASSERT_EQ_INT(apistore_update(&st, "/registry/configmaps/ns/a", o, r1, &r3, &e), TERN_ECONFLICT);
    ASSERT_EQ_INT(apistore_update(&st, "/registry/configmaps/ns/b", o, 5, &r3, &e), TERN_ENOTFOUND);
    ASSERT_EQ_INT(apistore_delete(&st, "/registry/configmaps/ns/a", r1, &r3, &e), TERN_ECONFLICT);
    ASSERT_OK(apistore_delete(&st, "/registry/configmaps/ns/a", r2, &r3, &e));
    ASSERT_EQ_INT(apistore_get(&st, "/registry/configmaps/ns/a", &got, NULL, &e), TERN_ENOTFOUND);
    ASSERT_EQ_INT(apistore_delete(&st, "/registry/configmaps/ns/a", 0, &r3, &e), TERN_ENOTFOUND);
    cJSON_Delete(o);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST_T(store_list_pages_at_one_revision, 60)
{
    struct etcd *c = start();
    struct apistore st;
    apistore_init(&st, c);
    struct tern_err e = {0};
    char name[64];
    int64_t rev;
    for (int i = 0; i < 25; i++) {
        snprintf(name, sizeof(name), "/registry/configmaps/ns/c%02d", i);
        cJSON *o = cm(name, "x");
        ASSERT_OK(apistore_create(&st, name, o, &rev, &e));
        cJSON_Delete(o);
    }
    /* a sibling prefix must not leak into the list */
    cJSON *o = cm("other", "x");
    ASSERT_OK(apistore_create(&st, "/registry/configmaps/ns2/c00", o, &rev, &e));
    ASSERT_OK(apistore_create(&st, "/registry/configmaps/nsx", o, &rev, &e));
    cJSON_Delete(o);
    struct apistore_list l = {0};
    ASSERT_OK(apistore_list(&st, "/registry/configmaps/ns/", NULL, 0, 10, &l, &e));
    ASSERT_EQ_INT(l.n, 10);
    ASSERT_EQ_STR(l.next_key, "/registry/configmaps/ns/c10");
    int64_t at = l.revision;
    char *next = xstrdup(l.next_key);
    apistore_list_done(&l);
    /* a write after the first page is not seen by the next pages */
    o = cm("late", "x");
    ASSERT_OK(apistore_create(&st, "/registry/configmaps/ns/c99", o, &rev, &e));
    cJSON_Delete(o);
    ASSERT_OK(apistore_list(&st, "/registry/configmaps/ns/", next, at, 0, &l, &e));
    ASSERT_EQ_INT(l.n, 15);
    ASSERT_NULL(l.next_key);
    ASSERT_EQ_INT(l.revision, at);
    apistore_list_done(&l);
    free(next);
    ASSERT_OK(apistore_list(&st, "/registry/configmaps/ns/", NULL, 0, 0, &l, &e));
    ASSERT_EQ_INT(l.n, 26);
    apistore_list_done(&l);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST_T(hub_fans_out_with_previous_values_and_expires, 60)
{
    struct etcd *c = start();
    struct apistore st;
    apistore_init(&st, c);
    struct tern_err e = {0};
    int64_t start_rev = 0, rev;
    ASSERT_OK(apistore_revision(&st, &start_rev, &e));
    struct apiwatch_hub *h = NULL;
    ASSERT_OK(apiwatch_hub_start(c, "/registry/", start_rev, 8, &h, &e));
    struct apiwatch_sub *s1 = NULL, *s2 = NULL, *slow = NULL;
    ASSERT_OK(apiwatch_subscribe(h, "/registry/configmaps/ns/", start_rev, &s1));
    ASSERT_OK(apiwatch_subscribe(h, "/registry/secrets/", start_rev, &s2));
    ASSERT_OK(apiwatch_subscribe(h, "/registry/", start_rev, &slow));
    ASSERT_EQ_INT(apiwatch_subscribe(h, "/registry/", start_rev - 1, &s2), TERN_ECOMPACTED);
    cJSON *o = cm("w", "1");
    int64_t r1, r2, r3;
    ASSERT_OK(apistore_create(&st, "/registry/configmaps/ns/w", o, &r1, &e));
    ASSERT_OK(apistore_update(&st, "/registry/configmaps/ns/w", o, r1, &r2, &e));
    ASSERT_OK(apistore_delete(&st, "/registry/configmaps/ns/w", r2, &r3, &e));
    cJSON_Delete(o);
    struct apiwatch_event *ev = NULL;
    ASSERT_OK(apiwatch_next(s1, 5000, &ev));
    ASSERT_FALSE(ev->deleted);
    ASSERT_NULL(ev->prev_value);
    ASSERT_EQ_INT(ev->revision, r1);
    apiwatch_event_free(ev);
    ASSERT_OK(apiwatch_next(s1, 5000, &ev));
    ASSERT_EQ_INT(ev->revision, r2);
    ASSERT_NOT_NULL(ev->prev_value);
    apiwatch_event_free(ev);
    ASSERT_OK(apiwatch_next(s1, 5000, &ev));
    ASSERT_TRUE(ev->deleted);
    ASSERT_EQ_INT(ev->revision, r3);
    cJSON *prev = NULL;
    ASSERT_OK(apistore_decode(ev->prev_value, ev->prev_len, ev->revision, &prev, &e));
    ASSERT_EQ_STR(json_get(json_get(prev, "metadata"), "name")->valuestring, "w");
    cJSON_Delete(prev);
    apiwatch_event_free(ev);
    /* other prefixes see nothing */
    ASSERT_EQ_INT(apiwatch_next(s2, 200, &ev), -ETIMEDOUT);
    ASSERT_CMP_INT(apiwatch_sub_progress(s2), >=, r3);
    /* a subscriber that does not read falls out of the 8-event ring */
    for (int i = 0; i < 12; i++) {
        char k[64];
        snprintf(k, sizeof(k), "/registry/configmaps/ns/f%d", i);
        o = cm(k, "x");
        ASSERT_OK(apistore_create(&st, k, o, &rev, &e));
        cJSON_Delete(o);
    }
    ASSERT_TRUE(apiwatch_hub_wait(h, rev, 5000));
    ASSERT_EQ_INT(apiwatch_next(slow, 1000, &ev), TERN_ECOMPACTED);
    ASSERT_EQ_INT(apiwatch_subscribe(h, "/registry/", r1, &s2), TERN_ECOMPACTED);
    ASSERT_CMP_INT(apiwatch_hub_oldest(h), >, r1);
    apiwatch_unsubscribe(s1);
    apiwatch_unsubscribe(slow);
    apiwatch_unsubscribe(s2);
    apiwatch_unsubscribe(NULL);
    apiwatch_hub_stop(h);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST_T(in_process_requests_follow_the_api, 60)
{
    struct etcd *c = start();
    struct apirest rest;
    rest_up(c, &rest);
    cJSON *r = NULL;
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/api/v1/namespaces/default/pods", NULL,
                             "{\"metadata\":{\"name\":\"p\",\"labels\":{\"app\":\"web\"}},"
                             "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}",
                             &r),
                  201);
    ASSERT_EQ_STR(json_get(json_get(r, "status"), "phase")->valuestring, "Pending");
    ASSERT_EQ_STR(json_get(json_get(r, "spec"), "restartPolicy")->valuestring, "Always");
    char *stale = json_print(r);
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "PATCH", "/api/v1/namespaces/default/pods/p/status",
                             "application/merge-patch+json",
                             "{\"status\":{\"phase\":\"Running\"},\"spec\":{\"nodeName\":\"x\"}}",
                             &r),
                  200);
    ASSERT_EQ_STR(json_get(json_get(r, "status"), "phase")->valuestring, "Running");
    ASSERT_NULL(json_get(json_get(r, "spec"), "nodeName"));
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "PUT", "/api/v1/namespaces/default/pods/p", NULL, stale, &r),
                  409);
    ASSERT_EQ_STR(json_get(r, "reason")->valuestring, "Conflict");
    cJSON_Delete(r);
    free(stale);
    ASSERT_EQ_INT(apirest_do(&rest, "GET",
                             "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb&limit=5",
                             NULL, NULL, &r),
                  200);
    ASSERT_EQ_INT(cJSON_GetArraySize(json_get(r, "items")), 1);
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/default/pods?watch=true", NULL,
                             NULL, &r),
                  400);
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "DELETE", "/api/v1/namespaces/default/pods/p", NULL, NULL,
                             NULL),
                  200);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/default/pods/p", NULL, NULL, &r),
                  404);
    ASSERT_EQ_STR(json_get(r, "message")->valuestring, "pods \"p\" not found");
    cJSON_Delete(r);
    rest_down(c, &rest);
}

static const char *js(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : "(none)";
}

/* Job defaults and the podReplacementPolicy rule as kube-apiserver 1.37
 * has them (pkg/apis/batch/v1/defaults.go, validation.go): with a
 * podFailurePolicy the default is Failed and nothing else is accepted;
 * without one, TerminatingOrFailed; manualSelector defaults to false. */
TEST_T(job_defaults_as_kube_apiserver, 60)
{
    struct etcd *c = start();
    struct apirest rest;
    rest_up(c, &rest);
    static const char *tmpl =
        "\"template\":{\"spec\":{\"restartPolicy\":\"Never\","
        "\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}";
    static const char *pfp = "\"podFailurePolicy\":{\"rules\":[{\"action\":\"FailJob\","
                             "\"onExitCodes\":{\"operator\":\"In\",\"values\":[78]}}]}";
    char *with = xasprintf("{\"metadata\":{\"name\":\"a\"},\"spec\":{%s,%s}}", pfp, tmpl);
    char *without = xasprintf("{\"metadata\":{\"name\":\"b\"},\"spec\":{%s}}", tmpl);
    char *bad = xasprintf("{\"metadata\":{\"name\":\"c\"},\"spec\":{\"podReplacementPolicy\":"
                          "\"TerminatingOrFailed\",%s,%s}}", pfp, tmpl);
    cJSON *r = NULL;
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/apis/batch/v1/namespaces/default/jobs", NULL, with, &r),
                  201);
    ASSERT_EQ_STR(js(json_get(r, "spec"), "podReplacementPolicy"), "Failed");
    ASSERT_FALSE(cJSON_IsTrue(json_get(json_get(r, "spec"), "manualSelector")));
    ASSERT_TRUE(cJSON_IsFalse(json_get(json_get(r, "spec"), "manualSelector")));
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/apis/batch/v1/namespaces/default/jobs", NULL, without,
                             &r),
                  201);
    ASSERT_EQ_STR(js(json_get(r, "spec"), "podReplacementPolicy"), "TerminatingOrFailed");
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/apis/batch/v1/namespaces/default/jobs", NULL, bad, &r),
                  422);
    const cJSON *cause = cJSON_GetArrayItem(json_get(json_get(r, "details"), "causes"), 0);
    ASSERT_EQ_STR(js(cause, "field"), "spec.podReplacementPolicy");
    ASSERT_EQ_STR(js(cause, "reason"), "FieldValueNotSupported");
    ASSERT_CONTAINS(js(r, "message"),
                    "spec.podReplacementPolicy: Unsupported value: \"TerminatingOrFailed\": "
                    "supported values: \"Failed\"");
    cJSON_Delete(r);
    free(with);
    free(without);
    free(bad);
    rest_down(c, &rest);
}


/* One store for both Event APIs: written through events.k8s.io/v1, read
 * through core/v1 (and the other way round), with field selectors of both. */
TEST_T(events_one_store_two_apis, 60)
{
    struct etcd *c = start();
    struct apirest rest;
    rest_up(c, &rest);
    cJSON *r = NULL;
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/apis/events.k8s.io/v1/namespaces/default/events",
                             NULL,
                             "{\"metadata\":{\"name\":\"e1\"},\"eventTime\":"
                             "\"2026-11-30T03:00:00.000001Z\",\"reportingController\":\"op\","
                             "\"reportingInstance\":\"op-0\",\"action\":\"A\",\"reason\":\"R\","
                             "\"type\":\"Normal\",\"note\":\"hello\",\"regarding\":{\"kind\":"
                             "\"AgentSession\",\"name\":\"s1\",\"namespace\":\"default\"}}",
                             &r),
                  201);
    ASSERT_EQ_STR(js(r, "apiVersion"), "events.k8s.io/v1");
    ASSERT_EQ_STR(js(r, "note"), "hello");
    ASSERT_NULL(json_get(r, "message"));
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/default/events/e1", NULL, NULL, &r),
                  200);
    ASSERT_EQ_STR(js(r, "apiVersion"), "v1");
    ASSERT_EQ_STR(js(r, "message"), "hello");
    ASSERT_EQ_STR(js(r, "reportingComponent"), "op");
    ASSERT_EQ_STR(js(json_get(r, "involvedObject"), "kind"), "AgentSession");
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "GET",
                             "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Ds1"
                             "%2CinvolvedObject.kind%3DAgentSession%2Creason%3DR",
                             NULL, NULL, &r),
                  200);
    ASSERT_EQ_INT(cJSON_GetArraySize(json_get(r, "items")), 1);
    cJSON_Delete(r);
    /* a merge patch through events.k8s.io applies to the v1 shape */
    ASSERT_EQ_INT(apirest_do(&rest, "PATCH", "/apis/events.k8s.io/v1/namespaces/default/events/e1",
                             "application/merge-patch+json",
                             "{\"series\":{\"count\":2,\"lastObservedTime\":"
                             "\"2026-11-30T03:00:01.000001Z\"},\"note\":\"again\"}",
                             &r),
                  200);
    ASSERT_EQ_STR(js(r, "note"), "again");
    cJSON_Delete(r);
    /* a legacy event written through core/v1 */
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/api/v1/namespaces/default/events", NULL,
                             "{\"metadata\":{\"name\":\"e2\"},\"involvedObject\":{\"kind\":"
                             "\"Pod\",\"name\":\"p\"},\"reason\":\"Pulled\",\"message\":\"m\","
                             "\"source\":{\"component\":\"kubelet\"},\"count\":3,"
                             "\"firstTimestamp\":\"2026-11-30T01:00:00Z\"}",
                             &r),
                  201);
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/apis/events.k8s.io/v1/namespaces/default/events",
                             NULL, NULL, &r),
                  200);
    const cJSON *items = json_get(r, "items");
    ASSERT_EQ_INT(cJSON_GetArraySize(items), 2);
    const cJSON *e1 = cJSON_GetArrayItem(items, 0), *e2 = cJSON_GetArrayItem(items, 1);
    ASSERT_EQ_STR(js(e1, "note"), "again");
    ASSERT_EQ_INT((int)json_get(json_get(e1, "series"), "count")->valuedouble, 2);
    /* items of a typed list carry no kind/apiVersion, as kube-apiserver's */
    ASSERT_NULL(json_get(e2, "apiVersion"));
    ASSERT_EQ_STR(js(r, "apiVersion"), "events.k8s.io/v1");
    ASSERT_EQ_STR(js(e2, "note"), "m");
    ASSERT_EQ_STR(js(json_get(e2, "deprecatedSource"), "component"), "kubelet");
    ASSERT_EQ_STR(js(e2, "deprecatedFirstTimestamp"), "2026-11-30T01:00:00Z");
    ASSERT_EQ_INT((int)json_get(e2, "deprecatedCount")->valuedouble, 3);
    /* a zero eventTime is null, as kube-apiserver marshals it */
    ASSERT_TRUE(cJSON_IsNull(json_get(e2, "eventTime")));
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "GET",
                             "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector="
                             "regarding.kind%3DPod%2CreportingController!%3Dop",
                             NULL, NULL, &r),
                  200);
    ASSERT_EQ_INT(cJSON_GetArraySize(json_get(r, "items")), 1);
    ASSERT_EQ_STR(js(json_get(cJSON_GetArrayItem(json_get(r, "items"), 0), "metadata"), "name"),
                  "e2");
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "GET",
                             "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector="
                             "involvedObject.kind%3DPod",
                             NULL, NULL, &r),
                  400);
    ASSERT_CONTAINS(js(r, "message"), "field label not supported: involvedObject.kind");
    cJSON_Delete(r);
    /* PUT through events.k8s.io of what it served, then delete */
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/apis/events.k8s.io/v1/namespaces/default/events/e2",
                             NULL, NULL, &r),
                  200);
    cJSON_ReplaceItemInObjectCaseSensitive(r, "note", cJSON_CreateString("edited"));
    char *body = json_print(r);
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "PUT", "/apis/events.k8s.io/v1/namespaces/default/events/e2",
                             NULL, body, &r),
                  200);
    free(body);
    ASSERT_EQ_STR(js(r, "note"), "edited");
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/default/events/e2", NULL, NULL, &r),
                  200);
    ASSERT_EQ_STR(js(r, "message"), "edited");
    ASSERT_EQ_STR(js(json_get(r, "source"), "component"), "kubelet");
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "DELETE", "/apis/events.k8s.io/v1/namespaces/default/events/e2",
                             NULL, NULL, &r),
                  200);
    /* events are not among the kinds whose deletion answers the object:
     * a Status, as kube-apiserver's */
    ASSERT_EQ_STR(js(r, "kind"), "Status");
    ASSERT_EQ_STR(js(r, "status"), "Success");
    ASSERT_EQ_STR(js(json_get(r, "details"), "name"), "e2");
    ASSERT_EQ_STR(js(json_get(r, "details"), "kind"), "events");
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/default/events/e2", NULL, NULL, &r),
                  404);
    cJSON_Delete(r);
    rest_down(c, &rest);
}

/* A watch through events.k8s.io/v1 selects stored core events with its own
 * labels and sends them in its shape. */
TEST_T(events_watch_in_the_served_shape, 60)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    struct apistore st;
    apistore_init(&st, c);
    int64_t rev0 = 0;
    ASSERT_OK(apistore_revision(&st, &rev0, &e));
    struct apiwatch_hub *h = NULL;
    ASSERT_OK(apiwatch_hub_start(c, "/registry/", rev0, 0, &h, &e));
    struct apirest rest;
    ASSERT_OK(apirest_init(&rest, c, h, "127.0.0.1:0", &e));
    ASSERT_OK(apirest_bootstrap(&rest, &e));
    const struct apirest_arg args[] = {{"watch", "true"}, {"fieldSelector", "regarding.name=s1"}};
    struct apirest_req req = {.method = "GET",
                              .path = "/apis/events.k8s.io/v1/namespaces/default/events",
                              .args = args,
                              .nargs = 2};
    struct apirest_resp resp = {0};
    apirest_handle(&rest, &req, &resp);
    ASSERT_EQ_INT(resp.status, 200);
    ASSERT_NOT_NULL(resp.watch);
    /* through core/v1: first an event about another object, then one about s1 */
    const char *names[] = {"other", "s1"};
    for (int i = 0; i < 2; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"metadata\":{\"name\":\"e-%s\"},\"involvedObject\":{\"kind\":"
                 "\"AgentSession\",\"name\":\"%s\"},\"reason\":\"R\",\"message\":\"about %s\","
                 "\"reportingComponent\":\"op\"}",
                 names[i], names[i], names[i]);
        ASSERT_EQ_INT(apirest_do(&rest, "POST", "/api/v1/namespaces/default/events", NULL, body,
                                 NULL),
                      201);
    }
    struct buf out;
    buf_init(&out, 1u << 22);
    for (int i = 0; i < 50 && !strchr(buf_str(&out), '\n'); i++)
        ASSERT_EQ_INT(apirest_watch_next(resp.watch, &out, 100), 0);
    const char *nl = strchr(buf_str(&out), '\n');
    ASSERT_NOT_NULL(nl);
    cJSON *ev = NULL;
    ASSERT_OK(json_parse(buf_str(&out), (size_t)(nl - buf_str(&out)), &ev, &e));
    ASSERT_EQ_STR(js(ev, "type"), "ADDED");
    const cJSON *o = json_get(ev, "object");
    ASSERT_EQ_STR(js(o, "apiVersion"), "events.k8s.io/v1");
    ASSERT_EQ_STR(js(o, "note"), "about s1");
    ASSERT_EQ_STR(js(o, "reportingController"), "op");
    ASSERT_EQ_STR(js(json_get(o, "regarding"), "name"), "s1");
    ASSERT_NULL(json_get(o, "involvedObject"));
    cJSON_Delete(ev);
    buf_done(&out);
    apirest_resp_done(&resp);
    apirest_done(&rest);
    apiwatch_hub_stop(h);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

static const char *mdstr(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(json_get(o, "metadata"), k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

TEST_T(lifecycle_with_controllers, 60)
{
    struct etcd *c = start();
    struct apirest rest;
    rest_up(c, &rest);
    rest.lifecycle_controllers = true;
    cJSON *r = NULL;
    /* graceful deletion of a bound pod */
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/api/v1/namespaces/default/pods", NULL,
                             "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":"
                             "[{\"name\":\"c\",\"image\":\"i\"}]}}",
                             NULL),
                  201);
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/api/v1/namespaces/default/pods/p/binding", NULL,
                             "{\"metadata\":{\"name\":\"p\"},\"target\":{\"kind\":\"Node\","
                             "\"name\":\"n1\"}}",
                             NULL),
                  201);
    ASSERT_EQ_INT(apirest_do(&rest, "DELETE", "/api/v1/namespaces/default/pods/p", NULL, NULL, &r),
                  200);
    ASSERT_NOT_NULL(mdstr(r, "deletionTimestamp"));
    ASSERT_EQ_INT(json_get(json_get(r, "metadata"), "deletionGracePeriodSeconds")->valuedouble, 30);
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/default/pods/p", NULL, NULL, NULL),
                  200);
    ASSERT_EQ_INT(apirest_do(&rest, "DELETE", "/api/v1/namespaces/default/pods/p", NULL,
                             "{\"gracePeriodSeconds\":0}", NULL),
                  200);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/default/pods/p", NULL, NULL, NULL),
                  404);
    /* jobs default to Orphan; Foreground adds foregroundDeletion */
#define JOB_BODY                                                                                   \
    "{\"metadata\":{\"name\":\"%s\"},\"spec\":{\"template\":{\"spec\":{\"restartPolicy\":"             \
    "\"Never\",\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}}}"
    char body[512];
    snprintf(body, sizeof(body), JOB_BODY, "j1");
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/apis/batch/v1/namespaces/default/jobs", NULL, body,
                             NULL),
                  201);
    snprintf(body, sizeof(body), JOB_BODY, "j2");
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/apis/batch/v1/namespaces/default/jobs", NULL, body,
                             NULL),
                  201);
    ASSERT_EQ_INT(apirest_do(&rest, "DELETE", "/apis/batch/v1/namespaces/default/jobs/j1", NULL,
                             NULL, &r),
                  200);
    ASSERT_EQ_STR(json_get(json_get(r, "metadata"), "finalizers")->child->valuestring, "orphan");
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "DELETE", "/apis/batch/v1/namespaces/default/jobs/j2", NULL,
                             "{\"propagationPolicy\":\"Foreground\"}", &r),
                  200);
    ASSERT_EQ_STR(json_get(json_get(r, "metadata"), "finalizers")->child->valuestring,
                  "foregroundDeletion");
    cJSON_Delete(r);
    /* the GC removes the finalizer: the job goes */
    ASSERT_EQ_INT(apirest_do(&rest, "PATCH", "/apis/batch/v1/namespaces/default/jobs/j2",
                             "application/merge-patch+json", "{\"metadata\":{\"finalizers\":null}}",
                             NULL),
                  200);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/apis/batch/v1/namespaces/default/jobs/j2", NULL, NULL,
                             NULL),
                  404);
    /* namespaces: Terminating until finalized */
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/api/v1/namespaces", NULL,
                             "{\"metadata\":{\"name\":\"gone\"}}", NULL),
                  201);
    ASSERT_EQ_INT(apirest_do(&rest, "DELETE", "/api/v1/namespaces/gone", NULL, NULL, &r), 200);
    ASSERT_EQ_STR(json_get(json_get(r, "status"), "phase")->valuestring, "Terminating");
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/api/v1/namespaces/gone/configmaps", NULL,
                             "{\"metadata\":{\"name\":\"late\"}}", &r),
                  403);
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/gone", NULL, NULL, &r), 200);
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "spec"),
                                            "finalizers");
    char *ns = json_print(r);
    cJSON_Delete(r);
    ASSERT_EQ_INT(apirest_do(&rest, "PUT", "/api/v1/namespaces/gone/finalize", NULL, ns, NULL),
                  200);
    free(ns);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/gone", NULL, NULL, NULL), 404);
    rest_down(c, &rest);
}

struct logfix {
    char path[600];
    bool running;
};

static int fake_log_path(void *ctx, const cJSON *pod, const char *container, bool previous,
                         char **ret, struct tern_err *err)
{
    struct logfix *l = ctx;
    (void)pod;
    if (previous || strcmp(container, "c") != 0)
        return err_set(err, TERN_ENOTFOUND, "no such run");
    *ret = xstrdup(l->path);
    return 0;
}

static bool fake_log_running(void *ctx, const cJSON *pod, const char *container, int64_t rc)
{
    (void)pod;
    (void)container;
    (void)rc;
    return ((struct logfix *)ctx)->running;
}

static void append_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "a");
    ASSERT_NOT_NULL(f);
    fputs(text, f);
    fclose(f);
}

TEST_T(pod_logs_through_the_kubelet_hook, 60)
{
    struct etcd *c = start();
    struct apirest rest;
    rest_up(c, &rest);
    struct logfix lf = {.running = true};
    snprintf(lf.path, sizeof(lf.path), "%s/c.log", th_tmpdir());
    append_file(lf.path, "one\ntwo\nthree\n");
    cJSON *r = NULL;
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/default/pods/p/log", NULL, NULL, &r),
                  404); /* no hook: not served */
    cJSON_Delete(r);
    rest.log_path = fake_log_path;
    rest.log_running = fake_log_running;
    rest.log_ctx = &lf;
    ASSERT_EQ_INT(apirest_do(&rest, "POST", "/api/v1/namespaces/default/pods", NULL,
                             "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":"
                             "[{\"name\":\"c\",\"image\":\"i\"},{\"name\":\"d\",\"image\":\"i\"}]}}",
                             NULL),
                  201);
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/default/pods/p/log", NULL, NULL, &r),
                  400);
    ASSERT_CONTAINS(json_get(r, "message")->valuestring,
                    "a container name must be specified for pod p, choose one of: [c d]");
    cJSON_Delete(r);
    struct apirest_arg args[] = {{"container", "c"}, {"tailLines", "2"}};
    struct apirest_req req = {.method = "GET", .path = "/api/v1/namespaces/default/pods/p/log",
                              .args = args, .nargs = 2};
    struct apirest_resp resp = {0};
    apirest_handle(&rest, &req, &resp);
    ASSERT_EQ_INT(resp.status, 200);
    ASSERT_EQ_STR(resp.content_type, "text/plain");
    ASSERT_EQ_STR(buf_str(&resp.body), "two\nthree\n");
    apirest_resp_done(&resp);
    /* follow: the current content, then what is appended, until the run ends */
    struct apirest_arg fargs[] = {{"container", "c"}, {"follow", "true"}};
    req.args = fargs;
    memset(&resp, 0, sizeof(resp));
    apirest_handle(&rest, &req, &resp);
    ASSERT_EQ_INT(resp.status, 200);
    ASSERT_NOT_NULL(resp.watch);
    struct buf out;
    buf_init(&out, 1u << 20);
    ASSERT_EQ_INT(apirest_watch_next(resp.watch, &out, 100), 0);
    ASSERT_EQ_STR(buf_str(&out), "one\ntwo\nthree\n");
    buf_reset(&out);
    append_file(lf.path, "four\n");
    ASSERT_EQ_INT(apirest_watch_next(resp.watch, &out, 2000), 0);
    ASSERT_EQ_STR(buf_str(&out), "four\n");
    buf_reset(&out);
    append_file(lf.path, "five\n");
    lf.running = false;
    int rc = 0;
    for (int i = 0; i < 20 && rc == 0; i++)
        rc = apirest_watch_next(resp.watch, &out, 500);
    ASSERT_EQ_INT(rc, 1);
    ASSERT_EQ_STR(buf_str(&out), "five\n");
    buf_done(&out);
    apirest_resp_done(&resp);
    rest_down(c, &rest);
}

static long https_req_as(const struct apipki *pki, uint16_t port, const char *token,
                         const char *as, const char *method, const char *path, const char *body,
                         char **ret_body)
{
    struct httpc *h = httpc_new();
    char *url = xasprintf("https://127.0.0.1:%u%s", (unsigned)port, path);
    char *auth = xasprintf("Authorization: bearer %s", token);
    char *imp = as ? xasprintf("Impersonate-User: %s", as) : NULL;
    const char *hdrs[] = {auth, "Content-Type: application/json", imp, NULL};
    struct httpc_tls tls = {.ca_pem = pki->ca_pem, .ca_pem_len = strlen(pki->ca_pem)};
    struct httpc_request rq = {.method = method, .url = url, .headers = hdrs,
                               .body = body, .body_len = body ? strlen(body) : 0,
                               .timeout_ms = 10000, .tls = &tls};
    struct httpc_response rs = {0};
    long st = httpc_do(h, &rq, &rs, NULL) == 0 ? rs.status : -1;
    if (ret_body)
        *ret_body = xasprintf("%.*s", (int)rs.body.len, rs.body.data ? rs.body.data : "");
    httpc_response_done(&rs);
    free(imp);
    free(auth);
    free(url);
    httpc_free(h);
    return st;
}

static long https_req(const struct apipki *pki, uint16_t port, const char *token,
                      const char *method, const char *path, const char *body, char **ret_body)
{
    return https_req_as(pki, port, token, NULL, method, path, body, ret_body);
}

static void create(struct apirest *rest, const char *path, const char *body)
{
    cJSON *r = NULL;
    int st = apirest_do(rest, "POST", path, NULL, body, &r);
    if (st != 201)
        th_fail(__FILE__, __LINE__, "create %s: %d", path, st);
    cJSON_Delete(r);
}

/* The HTTPS front with apiauth: the admin token, minted service-account
 * tokens (valid only while their account exists with the same uid), RBAC
 * through bindings written a moment before, the ownerReference check, and
 * the decision log. */
TEST_T(https_front_tokens_and_rbac, 60)
{
    struct etcd *c = start();
    struct apirest rest;
    struct tern_err e = {0};
    rest_up(c, &rest);
    struct apipki pki = {0};
    ASSERT_OK(apipki_ensure(th_tmpdir(), &pki, &e));
    unsigned char key[SATOKEN_KEY_LEN];
    char *keypath = xasprintf("%s/sa.key", th_tmpdir());
    char *logpath = xasprintf("%s/authz.log", th_tmpdir());
    ASSERT_OK(satoken_key_load(keypath, key, &e));
    struct apiauth_config ac = {.rest = &rest, .admin_token = pki.token, .sa_key = key,
                                .log_path = logpath};
    struct apiauth *auth = NULL;
    ASSERT_OK(apiauth_new(&ac, &auth, &e));
    struct apiserver_config sc = {.rest = &rest, .cert_pem = pki.cert_pem, .key_pem = pki.key_pem,
                                  .auth = auth};
    struct apiserver *srv = NULL;
    ASSERT_OK(apiserver_start(&sc, &srv, &e));
    uint16_t port = apiserver_port(srv);
    ASSERT_CMP_INT(port, >, 0);

    create(&rest, "/api/v1/namespaces/default/serviceaccounts",
           "{\"metadata\":{\"name\":\"bot\"}}");
    cJSON *sa = NULL;
    ASSERT_EQ_INT(apirest_do(&rest, "GET", "/api/v1/namespaces/default/serviceaccounts/bot", NULL,
                             NULL, &sa),
                  200);
    char *tok = NULL;
    ASSERT_OK(satoken_mint(key, "default", "bot",
                           json_get(json_get(sa, "metadata"), "uid")->valuestring, &tok, &e));
    cJSON_Delete(sa);

    ASSERT_EQ_INT(https_req(&pki, port, pki.token, "GET", "/version", NULL, NULL), 200);
    ASSERT_EQ_INT(https_req(&pki, port, pki.token, "GET", "/api/v1/pods", NULL, NULL), 200);
    ASSERT_EQ_INT(https_req(&pki, port, "wrong", "GET", "/api", NULL, NULL), 401);
    ASSERT_EQ_INT(https_req(&pki, port, "ternsa1_default_bot_x.00", "GET", "/api", NULL, NULL),
                  401);
    /* discovery is open to every authenticated user; objects are not */
    ASSERT_EQ_INT(https_req(&pki, port, tok, "GET", "/apis", NULL, NULL), 200);
    char *body = NULL;
    ASSERT_EQ_INT(https_req(&pki, port, tok, "GET", "/api/v1/namespaces/default/configmaps", NULL,
                            &body),
                  403);
    ASSERT_CONTAINS(body, "\"reason\":\"Forbidden\"");
    ASSERT_CONTAINS(body, "configmaps is forbidden: User \\\"system:serviceaccount:default:bot\\\" "
                          "cannot list resource \\\"configmaps\\\" in API group \\\"\\\" in "
                          "the namespace \\\"default\\\"");
    free(body);

    /* a Role bound a moment ago counts for the very next request */
    create(&rest, "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
           "{\"metadata\":{\"name\":\"cm\"},\"rules\":[{\"apiGroups\":[\"\"],"
           "\"resources\":[\"configmaps\"],\"verbs\":[\"list\",\"create\"]}]}");
    create(&rest, "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
           "{\"metadata\":{\"name\":\"cm\"},\"roleRef\":{\"apiGroup\":"
           "\"rbac.authorization.k8s.io\",\"kind\":\"Role\",\"name\":\"cm\"},"
           "\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"bot\"}]}");
    ASSERT_EQ_INT(https_req(&pki, port, tok, "GET", "/api/v1/namespaces/default/configmaps", NULL,
                            NULL),
                  200);
    /* only in the binding's namespace, only the verbs granted */
    ASSERT_EQ_INT(https_req(&pki, port, tok, "GET", "/api/v1/namespaces/kube-system/configmaps",
                            NULL, NULL),
                  403);
    ASSERT_EQ_INT(https_req(&pki, port, tok, "DELETE",
                            "/api/v1/namespaces/default/configmaps/x", NULL, NULL),
                  403);
    ASSERT_EQ_INT(https_req(&pki, port, tok, "POST", "/api/v1/namespaces/default/configmaps",
                            "{\"metadata\":{\"name\":\"a\"}}", NULL),
                  201);
    /* an owner with blockOwnerDeletion needs update on its finalizers */
    const char *owned = "{\"metadata\":{\"name\":\"b\",\"ownerReferences\":[{\"apiVersion\":"
                        "\"v1\",\"kind\":\"ConfigMap\",\"name\":\"a\",\"uid\":\"u1\","
                        "\"blockOwnerDeletion\":true}]}}";
    ASSERT_EQ_INT(https_req(&pki, port, tok, "POST", "/api/v1/namespaces/default/configmaps", owned,
                            &body),
                  403);
    ASSERT_CONTAINS(body, "cannot set blockOwnerDeletion");
    ASSERT_CONTAINS(body, "configmaps/finalizers");
    free(body);
    cJSON *r = NULL;
    ASSERT_EQ_INT(apirest_do(&rest, "PUT",
                             "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/cm", NULL,
                             "{\"metadata\":{\"name\":\"cm\",\"namespace\":\"default\"},"
                             "\"rules\":[{\"apiGroups\":[\"\"],\"resources\":[\"configmaps\","
                             "\"configmaps/finalizers\"],\"verbs\":[\"list\",\"create\","
                             "\"update\"]}]}",
                             &r),
                  200);
    cJSON_Delete(r);
    ASSERT_EQ_INT(https_req(&pki, port, tok, "POST", "/api/v1/namespaces/default/configmaps", owned,
                            NULL),
                  201);

    /* impersonation needs the impersonate verb; then RBAC judges the other
     * user; a review answers for the user asking */
    ASSERT_EQ_INT(https_req_as(&pki, port, tok, "alice", "GET",
                               "/api/v1/namespaces/default/configmaps", NULL, &body),
                  403);
    ASSERT_CONTAINS(body, "users \\\"alice\\\" is forbidden: User "
                          "\\\"system:serviceaccount:default:bot\\\" cannot impersonate "
                          "resource \\\"users\\\" in API group \\\"\\\" at the cluster scope");
    free(body);
    create(&rest, "/apis/rbac.authorization.k8s.io/v1/clusterroles",
           "{\"metadata\":{\"name\":\"as-alice\"},\"rules\":[{\"apiGroups\":[\"\"],"
           "\"resources\":[\"users\"],\"resourceNames\":[\"alice\"],"
           "\"verbs\":[\"impersonate\"]}]}");
    create(&rest, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
           "{\"metadata\":{\"name\":\"as-alice\"},\"roleRef\":{\"apiGroup\":"
           "\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":\"as-alice\"},"
           "\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"bot\","
           "\"namespace\":\"default\"}]}");
    ASSERT_EQ_INT(https_req_as(&pki, port, tok, "alice", "GET",
                               "/api/v1/namespaces/default/configmaps", NULL, &body),
                  403);
    ASSERT_CONTAINS(body, "User \\\"alice\\\" cannot list resource \\\"configmaps\\\"");
    free(body);
    ASSERT_EQ_INT(https_req_as(&pki, port, tok, "bob", "GET", "/api", NULL, NULL), 403);
    const char *review = "{\"apiVersion\":\"authorization.k8s.io/v1\",\"kind\":"
                         "\"SelfSubjectAccessReview\",\"spec\":{\"resourceAttributes\":"
                         "{\"namespace\":\"default\",\"verb\":\"list\",\"resource\":"
                         "\"configmaps\"}}}";
    const char *ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    ASSERT_EQ_INT(https_req(&pki, port, tok, "POST", ssar, review, &body), 201);
    ASSERT_CONTAINS(body, "\"status\":{\"allowed\":true,\"reason\":\"RBAC: allowed by "
                          "RoleBinding");
    free(body);
    ASSERT_EQ_INT(https_req_as(&pki, port, tok, "alice", "POST", ssar, review, &body), 201);
    ASSERT_CONTAINS(body, "\"status\":{\"allowed\":false}");
    free(body);
    ASSERT_EQ_INT(https_req(&pki, port, tok, "GET", ssar, NULL, NULL), 403);
    ASSERT_EQ_INT(https_req(&pki, port, pki.token, "GET", ssar, NULL, NULL), 405);

    /* a deleted (or re-created) account invalidates its tokens */
    ASSERT_EQ_INT(apirest_do(&rest, "DELETE", "/api/v1/namespaces/default/serviceaccounts/bot", NULL,
                             NULL, &r),
                  200);
    cJSON_Delete(r);
    create(&rest, "/api/v1/namespaces/default/serviceaccounts",
           "{\"metadata\":{\"name\":\"bot\"}}");
    ASSERT_EQ_INT(https_req(&pki, port, tok, "GET", "/api/v1/namespaces/default/configmaps", NULL,
                            NULL),
                  401);

    /* every decision for the account is in the log, the admin's are not */
    char log[16384] = "";
    FILE *lf = fopen(logpath, "re");
    ASSERT_TRUE(lf != NULL);
    size_t loglen = fread(log, 1, sizeof log - 1, lf);
    fclose(lf);
    log[loglen] = 0;
    ASSERT_CONTAINS(log, "{\"user\":\"system:serviceaccount:default:bot\",\"verb\":\"list\","
                         "\"apiGroup\":\"\",\"resource\":\"configmaps\",\"subresource\":\"\","
                         "\"namespace\":\"default\",\"name\":\"\",\"path\":"
                         "\"/api/v1/namespaces/default/configmaps\",\"reason\":\"RBAC: allowed by "
                         "RoleBinding \\\"cm/default\\\" of Role \\\"cm\\\" to ServiceAccount "
                         "\\\"bot/default\\\"\",\"allowed\":true}");
    ASSERT_CONTAINS(log, "\"resource\":\"configmaps\",\"subresource\":\"finalizers\"");
    ASSERT_TRUE(strstr(log, APIAUTH_ADMIN_USER) == NULL);

    free(tok);
    apiserver_stop(srv);
    apiauth_free(auth);
    apipki_done(&pki);
    apirest_done(&rest);
    etcd_free(c);
    etcd_fixture_stop(&fx);
    free(keypath);
    free(logpath);
}

struct seen {
    int n, deleted;
    char last[64];
    char kind[32], av[32];
    size_t which;
};

static int on_change(void *ctx, size_t which, bool deleted, int64_t rev, cJSON *obj)
{
    (void)rev;
    struct seen *s = ctx;
    s->n++;
    s->deleted += deleted;
    s->which = which;
    snprintf(s->last, sizeof(s->last), "%s", mdstr(obj, "name"));
    snprintf(s->kind, sizeof(s->kind), "%s", js(obj, "kind") ? js(obj, "kind") : "");
    snprintf(s->av, sizeof(s->av), "%s", js(obj, "apiVersion") ? js(obj, "apiVersion") : "");
    cJSON_Delete(obj);
    return 0;
}

/* apirest_changes: what the controllers' caches follow. A write is among
 * the changes of a call made right after it (the call waits for the hub),
 * in the served shape; a deletion; a start older than the ring. */
TEST_T(changes_follow_the_hub_and_include_the_callers_writes, 60)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    struct apistore st;
    apistore_init(&st, c);
    int64_t rev0 = 0;
    ASSERT_OK(apistore_revision(&st, &rev0, &e));
    struct apiwatch_hub *h = NULL;
    ASSERT_OK(apiwatch_hub_start(c, "/registry/", rev0, 16, &h, &e));
    struct apirest rest;
    ASSERT_OK(apirest_init(&rest, c, h, "127.0.0.1:0", &e));
    ASSERT_OK(apirest_bootstrap(&rest, &e));
    const char *gvrs[] = {"v1/secrets", "v1/configmaps"};
    int64_t at = 0;
    ASSERT_OK(apistore_revision(&st, &at, &e));
    for (int i = 0; i < 5; i++) {
        char body[128], name[16];
        snprintf(name, sizeof(name), "c%d", i);
        snprintf(body, sizeof(body), "{\"metadata\":{\"name\":\"%s\"}}", name);
        ASSERT_EQ_INT(apirest_do(&rest, "POST", "/api/v1/namespaces/default/configmaps", NULL,
                                 body, NULL),
                      201);
        struct seen s = {0};
        int64_t upto = 0;
        ASSERT_OK(apirest_changes(&rest, gvrs, 2, at, 5000, on_change, &s, &upto, &e));
        ASSERT_EQ_INT(s.n, 1);
        ASSERT_EQ_STR(s.last, name);
        ASSERT_EQ_INT(s.which, 1);
        ASSERT_EQ_STR(s.kind, "ConfigMap");
        ASSERT_EQ_STR(s.av, "v1");
        ASSERT_CMP_INT(upto, >, at);
        at = upto;
    }
    ASSERT_EQ_INT(apirest_do(&rest, "DELETE", "/api/v1/namespaces/default/configmaps/c0", NULL,
                             NULL, NULL),
                  200);
    struct seen s = {0};
    int64_t upto = 0;
    ASSERT_OK(apirest_changes(&rest, gvrs, 2, at, 5000, on_change, &s, &upto, &e));
    ASSERT_EQ_INT(s.n, 1);
    ASSERT_EQ_INT(s.deleted, 1);
    ASSERT_EQ_STR(s.last, "c0");
    /* nothing new: nothing, and still complete up to the store's revision */
    memset(&s, 0, sizeof(s));
    int64_t now = 0;
    ASSERT_OK(apistore_revision(&st, &now, &e));
    ASSERT_OK(apirest_changes(&rest, gvrs, 2, upto, 5000, on_change, &s, &at, &e));
    ASSERT_EQ_INT(s.n, 0);
    ASSERT_CMP_INT(at, >=, now);
    /* more writes than the ring holds: the start is gone */
    for (int i = 0; i < 20; i++)
        ASSERT_EQ_INT(apirest_do(&rest, "PUT", "/api/v1/namespaces/default/configmaps/c1", NULL,
                                 i % 2 ? "{\"metadata\":{\"name\":\"c1\"},\"data\":{\"a\":\"1\"}}"
                                       : "{\"metadata\":{\"name\":\"c1\"},\"data\":{\"a\":\"2\"}}",
                                 NULL),
                      200);
    ASSERT_EQ_INT(apirest_changes(&rest, gvrs, 2, rev0, 5000, on_change, &s, &at, &e),
                  TERN_ECOMPACTED);
    apirest_done(&rest);
    apiwatch_hub_stop(h);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}
