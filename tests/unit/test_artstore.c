/* Unit tests for the artifact store (controller/artstore): names, the
 * ConfigMap of a set, bounds, the manifest parser, the stored bytes and
 * their check; the journal's record of a set (summary fold); and the
 * reconcile's part: a completed turn's files are persisted before the
 * sandbox is parked, once. */
#include "harness.h"

#include "base/limits.h"
#include "base/mem.h"
#include "controller/artstore.h"
#include "controller/conditions.h"
#include "controller/reconcile.h"
#include "journal/journal.h"
#include "json/json.h"
#include "base/buf.h"
#include "yaml/yamljson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct artstore_file files3[] = {
    {.path = "output/report.md", .data = (const unsigned char *)"# hi\n", .len = 5},
    {.path = "output/big.bin", .data = (const unsigned char *)"0123456789", .len = 10},
    {.path = "output/sub/z.bin", .data = (const unsigned char *)"\0\1\2", .len = 3},
};

static struct artstore_in in3(void)
{
    return (struct artstore_in){.session = "s1", .ns = "ns", .uid = "u-1", .turn = 2,
                                .now = 1000, .max_file = 8, .max_total = 100, .files = files3,
                                .nfiles = 3};
}

static const cJSON *by_path(const cJSON *list, const char *path)
{
    const cJSON *a;
    cJSON_ArrayForEach(a, list)
    {
        if (strcmp(json_get(a, "path")->valuestring, path) == 0)
            return a;
    }
    return NULL;
}

TEST(names_are_deterministic)
{
    char *a = artstore_name("s1", 3, NULL), *b = artstore_name("s1", 3, "req-1"),
         *c = artstore_name("s1", 3, "req-1"), *d = artstore_name("s1", 3, "req-2");
    ASSERT_EQ_STR(a, "s1-artifacts-t3");
    ASSERT_EQ_STR(b, c);
    ASSERT_TRUE(strncmp(b, "s1-artifacts-t3-", 16) == 0 && strlen(b) == 24);
    ASSERT_TRUE(strcmp(b, d) != 0);
    free(a);
    free(b);
    free(c);
    free(d);
}

TEST(a_set_lists_every_file_and_stores_what_fits)
{
    struct artstore_in in = in3();
    cJSON *cm = NULL, *list = NULL;
    size_t stored = 0;
    artstore_build(&in, &cm, &list, &stored);
    ASSERT_EQ_INT(stored, 2);
    ASSERT_EQ_INT(cJSON_GetArraySize(list), 3);
    const cJSON *big = by_path(list, "output/big.bin");
    ASSERT_FALSE(cJSON_IsTrue(json_get(big, "stored")));
    ASSERT_EQ_STR(json_get(big, "reason")->valuestring, "TooLarge");
    ASSERT_CONTAINS(json_get(big, "message")->valuestring, "over the bound of 8 bytes");
    const cJSON *r = by_path(list, "output/report.md");
    char sha[65];
    artstore_sha256("# hi\n", 5, sha);
    ASSERT_EQ_STR(json_get(r, "sha256")->valuestring, sha);
    ASSERT_EQ_STR(json_get(r, "configMap")->valuestring, "s1-artifacts-t2");
    /* owned by the session, labelled for the API and the informer */
    const cJSON *md = json_get(cm, "metadata");
    ASSERT_EQ_STR(json_get(md, "name")->valuestring, "s1-artifacts-t2");
    ASSERT_EQ_STR(json_get(cJSON_GetArrayItem(json_get(md, "ownerReferences"), 0), "uid")
                      ->valuestring,
                  "u-1");
    ASSERT_EQ_STR(json_get(json_get(md, "labels"), "tern.dev/role")->valuestring, "artifacts");
    ASSERT_EQ_STR(json_get(json_get(md, "labels"), "tern.dev/session")->valuestring, "s1");
    ASSERT_EQ_STR(json_get(json_get(md, "labels"), "tern.dev/turn")->valuestring, "2");
    ASSERT_NULL(json_get(md, "annotations"));
    /* the same input builds the same object: a retry finds it equal */
    cJSON *cm2 = NULL, *list2 = NULL;
    artstore_build(&in, &cm2, &list2, NULL);
    ASSERT_TRUE(artstore_same(cm, cm2));
    struct artstore_file other[3];
    memcpy(other, files3, sizeof other);
    other[0].data = (const unsigned char *)"# ho\n";
    in.files = other;
    cJSON *cm3 = NULL, *list3 = NULL;
    artstore_build(&in, &cm3, &list3, NULL);
    ASSERT_FALSE(artstore_same(cm, cm3));
    cJSON_Delete(cm);
    cJSON_Delete(list);
    cJSON_Delete(cm2);
    cJSON_Delete(list2);
    cJSON_Delete(cm3);
    cJSON_Delete(list3);
}

TEST(the_set_bound_and_given_reasons)
{
    struct artstore_in in = in3();
    in.max_file = 100;
    in.max_total = 12; /* 5 + 10 > 12: big.bin does not fit, z.bin does */
    struct artstore_file f[4];
    memcpy(f, files3, sizeof files3);
    f[3] = (struct artstore_file){.path = "output/gone.txt", .reason = "Gone",
                                  .message = "removed"};
    in.files = f;
    in.nfiles = 4;
    cJSON *cm = NULL, *list = NULL;
    size_t stored = 0;
    artstore_build(&in, &cm, &list, &stored);
    ASSERT_EQ_INT(stored, 2);
    ASSERT_EQ_STR(json_get(by_path(list, "output/big.bin"), "reason")->valuestring,
                  "SetTooLarge");
    ASSERT_TRUE(cJSON_IsTrue(json_get(by_path(list, "output/sub/z.bin"), "stored")));
    ASSERT_EQ_STR(json_get(by_path(list, "output/gone.txt"), "reason")->valuestring, "Gone");
    cJSON_Delete(cm);
    cJSON_Delete(list);
}

TEST(a_retained_set_has_an_expiry_and_no_owner)
{
    struct artstore_in in = in3();
    in.retain = true;
    in.ttl_seconds = 60;
    cJSON *cm = NULL, *list = NULL;
    artstore_build(&in, &cm, &list, NULL);
    const cJSON *md = json_get(cm, "metadata");
    ASSERT_NULL(json_get(md, "ownerReferences"));
    char t[32];
    ASSERT_EQ_STR(json_get(json_get(md, "annotations"), ARTSTORE_ANN_EXPIRES)->valuestring,
                  conditions_time(1060, t));
    cJSON_Delete(cm);
    cJSON_Delete(list);
}

TEST(stored_bytes_come_back_checked)
{
    struct artstore_in in = in3();
    cJSON *cm = NULL, *list = NULL;
    artstore_build(&in, &cm, &list, NULL);
    unsigned char *raw = NULL;
    size_t n = 0;
    char sha[65];
    ASSERT_OK(artstore_file(cm, "output/sub/z.bin", &raw, &n, sha, NULL));
    ASSERT_EQ_INT(n, 3);
    ASSERT_MEM_EQ(raw, "\0\1\2", 3);
    free(raw);
    ASSERT_EQ_INT(artstore_file(cm, "output/big.bin", &raw, &n, sha, NULL), TERN_ENOTFOUND);
    ASSERT_EQ_INT(artstore_file(cm, "output/nope", &raw, &n, sha, NULL), TERN_ENOTFOUND);
    /* someone changed the bytes: refused, never served */
    const char *key = json_get(by_path(list, "output/report.md"), "key")->valuestring;
    cJSON *bin = cJSON_GetObjectItemCaseSensitive(cm, "binaryData");
    cJSON_ReplaceItemInObjectCaseSensitive(bin, key, cJSON_CreateString("dGFtcGVyZWQK"));
    struct tern_err e = {0};
    ASSERT_EQ_INT(artstore_file(cm, "output/report.md", &raw, &n, sha, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "do not match");
    cJSON_Delete(cm);
    cJSON_Delete(list);
}

static int parse(const char *text)
{
    cJSON *m = NULL;
    int rc = artstore_parse_manifest(text, strlen(text), &m, NULL);
    cJSON_Delete(m);
    return rc;
}

#define SHA "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

TEST(the_manifest_parser_refuses_what_does_not_check_out)
{
    ASSERT_OK(parse("{\"turn\":1,\"artifacts\":[{\"path\":\"output/a\",\"size\":1,\"stored\":"
                    "true,\"sha256\":\"" SHA "\",\"key\":\"f0\"},{\"path\":\"output/b\","
                    "\"size\":9,\"stored\":false,\"reason\":\"TooLarge\"}]}"));
    ASSERT_EQ_INT(parse("[]"), TERN_EINVALID);
    ASSERT_EQ_INT(parse("{\"artifacts\":[]}"), TERN_EINVALID); /* no turn */
    static const char *const bad_paths[] = {"output/../etc/passwd", "output/./a", "output/",
                                            "output//a", "work/a", "/output/a", "output/a/",
                                            "output/.."};
    for (size_t i = 0; i < sizeof bad_paths / sizeof *bad_paths; i++) {
        char t[512];
        snprintf(t, sizeof t, "{\"turn\":1,\"artifacts\":[{\"path\":\"%s\",\"size\":1,"
                 "\"stored\":false}]}", bad_paths[i]);
        ASSERT_EQ_INT(parse(t), TERN_EINVALID);
    }
    ASSERT_EQ_INT(parse("{\"turn\":1,\"artifacts\":[{\"path\":\"output/a\",\"size\":1,"
                        "\"stored\":true,\"sha256\":\"ABC\",\"key\":\"f0\"}]}"),
                  TERN_EINVALID);
    ASSERT_EQ_INT(parse("{\"turn\":1,\"artifacts\":[{\"path\":\"output/a\",\"size\":1,"
                        "\"stored\":true,\"sha256\":\"" SHA "\",\"key\":\"../x\"}]}"),
                  TERN_EINVALID);
    ASSERT_EQ_INT(parse("{\"turn\":1,\"artifacts\":[{\"path\":\"output/a\",\"size\":-1,"
                        "\"stored\":false}]}"),
                  TERN_EINVALID);
    /* too many entries, too many bytes */
    struct buf b;
    buf_init(&b, 1u << 20);
    buf_puts(&b, "{\"turn\":1,\"artifacts\":[");
    for (int i = 0; i <= TERN_ARTIFACTS_MAX_FILES; i++)
        buf_printf(&b, "%s{\"path\":\"output/f%d\",\"size\":0,\"stored\":false}", i ? "," : "",
                   i);
    buf_puts(&b, "]}");
    ASSERT_EQ_INT(parse(b.data), TERN_EINVALID);
    buf_done(&b);
    char *huge = xmalloc(TERN_ARTIFACTS_MAX_MANIFEST + 2);
    memset(huge, ' ', TERN_ARTIFACTS_MAX_MANIFEST + 1);
    huge[TERN_ARTIFACTS_MAX_MANIFEST + 1] = 0;
    ASSERT_EQ_INT(parse(huge), TERN_ETOOLARGE);
    free(huge);
}

TEST(status_lists_the_recorded_set_once_it_covers_the_answer)
{
    cJSON *paths = NULL, *rec = NULL;
    ASSERT_OK(json_parse("[\"output/a\"]", 12, &paths, NULL));
    const char *r = "{\"turn\":2,\"configMap\":\"s1-artifacts-t2\",\"artifacts\":[{\"path\":"
                    "\"output/a\",\"stored\":true,\"size\":1}]}";
    ASSERT_OK(json_parse(r, strlen(r), &rec, NULL));
    cJSON *l = artstore_status_list(paths, 2, rec);
    ASSERT_TRUE(cJSON_IsTrue(json_get(cJSON_GetArrayItem(l, 0), "stored")));
    cJSON_Delete(l);
    /* a newer answer: pending until its set is recorded */
    l = artstore_status_list(paths, 3, rec);
    ASSERT_EQ_STR(json_get(cJSON_GetArrayItem(l, 0), "reason")->valuestring, "Pending");
    cJSON_Delete(l);
    ASSERT_NULL(artstore_status_list(NULL, 0, NULL));
    l = artstore_status_list(paths, 0, NULL); /* an answer from before the store */
    ASSERT_EQ_STR(json_get(cJSON_GetArrayItem(l, 0), "reason")->valuestring, "NotPersisted");
    cJSON_Delete(l);

    const char *req = NULL;
    ASSERT_TRUE(artstore_wanted(paths, 3, rec, NULL, NULL, &req));
    ASSERT_NULL(req);
    ASSERT_FALSE(artstore_wanted(paths, 2, rec, NULL, NULL, &req));
    ASSERT_TRUE(artstore_wanted(paths, 2, rec, "r1", "r2", &req));
    ASSERT_EQ_STR(req, "r2");
    ASSERT_FALSE(artstore_wanted(paths, 2, rec, "r2", "r2", &req)); /* served */
    ASSERT_FALSE(artstore_wanted(NULL, 0, NULL, NULL, NULL, &req)); /* no files */
    char longreq[TERN_ARTIFACTS_MAX_REQUEST + 2];
    memset(longreq, 'x', sizeof longreq - 1);
    longreq[sizeof longreq - 1] = 0;
    ASSERT_FALSE(artstore_wanted(paths, 2, rec, NULL, longreq, &req));
    cJSON_Delete(paths);
    cJSON_Delete(rec);
}

/* ---- the journal's record ---------------------------------------------- */

static void fold(struct journal_summary *s, uint64_t seq, enum journal_type t, int64_t turn,
                 const char *data)
{
    struct journal_event ev = {.v = 1, .seq = seq, .type = t, .turn = turn,
                               .time = (char *)"2026-12-01T00:00:00.000000000Z"};
    ASSERT_OK(json_parse(data, strlen(data), &ev.data, NULL));
    ASSERT_OK(journal_summary_apply(s, &ev));
    cJSON_Delete(ev.data);
}

TEST(the_summary_keeps_the_recorded_set)
{
    ASSERT_EQ_INT(journal_type_parse("artifacts_persisted"), JOURNAL_EV_ARTIFACTS_PERSISTED);
    struct journal_summary s;
    journal_summary_init(&s);
    fold(&s, 1, JOURNAL_EV_USER_MESSAGE, 0, "{\"text\":\"go\"}");
    fold(&s, 2, JOURNAL_EV_TURN_STARTED, 1, "{}");
    fold(&s, 3, JOURNAL_EV_TURN_FINISHED, 1,
         "{\"outcome\":\"completed\",\"summary\":\"done\",\"artifacts\":[\"output/a\"]}");
    ASSERT_EQ_INT(s.result_turn, 1);
    ASSERT_NULL(s.persisted);
    fold(&s, 4, JOURNAL_EV_ARTIFACTS_PERSISTED, 1,
         "{\"turn\":1,\"configMap\":\"s1-artifacts-t1\",\"artifacts\":[]}");
    fold(&s, 5, JOURNAL_EV_ARTIFACTS_PERSISTED, 1,
         "{\"turn\":1,\"request\":\"r1\",\"configMap\":\"s1-artifacts-t1-x\",\"artifacts\":[]}");
    ASSERT_EQ_STR(json_get(s.persisted, "configMap")->valuestring, "s1-artifacts-t1-x");
    ASSERT_EQ_STR(s.persist_request, "r1");
    /* a later completion's record keeps the last request served */
    fold(&s, 6, JOURNAL_EV_ARTIFACTS_PERSISTED, 1, "{\"turn\":1,\"artifacts\":[]}");
    ASSERT_EQ_STR(s.persist_request, "r1");
    ASSERT_FALSE(s.intent); /* no turn to run for it */
    cJSON *j = journal_summary_to_json(&s);
    char *txt = json_print(j);
    struct journal_summary d;
    ASSERT_OK(journal_summary_decode(txt, strlen(txt), &d, NULL));
    ASSERT_EQ_INT(d.result_turn, 1);
    ASSERT_EQ_STR(d.persist_request, "r1");
    ASSERT_TRUE(json_equal(d.persisted, s.persisted));
    struct journal_summary c;
    journal_summary_copy(&c, &d);
    ASSERT_TRUE(json_equal(c.persisted, s.persisted));
    journal_summary_done(&c);
    journal_summary_done(&d);
    free(txt);
    cJSON_Delete(j);
    journal_summary_done(&s);
}

/* ---- the reconcile -------------------------------------------------------- */

static const struct children_config cfg = {
    .runner_image = "tern:test",
    .sandbox_image = "sandbox:default",
    .etcd_endpoints = "http://127.0.0.1:2379",
    .runner_service_account = "tern-runner",
    .turn_backoff_limit = 4,
    .job_ttl_seconds = 3600,
};

static struct session_spec *spec_from(const char *yaml)
{
    cJSON *obj = NULL;
    struct tern_err e = {0};
    if (yamljson_parse_one(yaml, strlen(yaml), NULL, &obj, &e))
        th_fail(__FILE__, __LINE__, "yaml: %s", e.msg);
    struct session_spec *s = NULL;
    if (session_spec_parse(obj, &s, &e))
        th_fail(__FILE__, __LINE__, "spec: %s", e.msg);
    cJSON_Delete(obj);
    return s;
}

static int count(const struct reconcile_output *o, enum reconcile_action_kind k, const char *res)
{
    int n = 0;
    for (size_t i = 0; i < o->nactions; i++)
        if (o->actions[i].kind == k &&
            (!res || (o->actions[i].resource && strcmp(o->actions[i].resource, res) == 0)))
            n++;
    return n;
}

static const struct reconcile_action *persist_action(const struct reconcile_output *o)
{
    for (size_t i = 0; i < o->nactions; i++)
        if (o->actions[i].kind == RA_PERSIST_ARTIFACTS)
            return &o->actions[i];
    return NULL;
}

static const char *cond_reason(const struct reconcile_output *o)
{
    const cJSON *r =
        json_get(conditions_find(json_get(o->status, "conditions"), "ArtifactsPersisted"),
                 "reason");
    return cJSON_IsString(r) ? r->valuestring : "(absent)";
}

TEST(a_completed_turn_is_persisted_before_the_sandbox_is_parked)
{
    struct session_spec *s = spec_from(
        "apiVersion: tern.dev/v1alpha1\nkind: AgentSession\n"
        "metadata: {name: s1, namespace: ns, uid: u-1, generation: 2}\n"
        "spec:\n  objective: do it\n  sandbox: {idleSuspendSeconds: 5}\n"
        "  retainArtifacts: {ttlSeconds: 60}\n");
    ASSERT_TRUE(s->retain_artifacts.set);
    ASSERT_EQ_INT(s->retain_artifacts.ttl_seconds, 60);
    cJSON *paths = NULL;
    ASSERT_OK(json_parse("[\"output/a\"]", 12, &paths, NULL));
    char hash[17];
    struct reconcile_input in = {
        .name = "s1", .ns = "ns", .uid = "u-1", .generation = 2, .has_finalizer = true,
        .spec = s, .pvc_exists = true, .token_exists = true, .task_exists = true,
        .netpol_exists = true, .now = 1000000, .cfg = &cfg,
        .pod = {.exists = true, .phase = "Running", .ready = true, .ip = "127.1.0.5",
                .sandbox_hash = children_sandbox_hash(s, &cfg, hash)},
        .job = {.exists = true, .turn = 1, .complete = true},
        .journal = {.last_seq = 5, .turn = 1, .messages = 1, .outcome = "completed",
                    .updated_at = 1000000 - 60, .result_summary = "done",
                    .result_artifacts = paths, .result_turn = 1},
    };
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    /* idle for a minute, yet the pod stays: its files are copied first */
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 0);
    const struct reconcile_action *a = persist_action(&o);
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_INT(a->turn, 1);
    ASSERT_NULL(a->key);
    ASSERT_EQ_STR(a->name, "127.1.0.5:8080");
    ASSERT_TRUE(cJSON_IsTrue(json_get(a->data, "retain")));
    ASSERT_EQ_STR(cond_reason(&o), "Pending");
    ASSERT_EQ_STR(o.phase, "Succeeded");
    reconcile_output_done(&o);

    /* without a sandbox: it comes back for them */
    in.pod = (struct observed_pod){0};
    reconcile_decide(&in, &o);
    ASSERT_NULL(persist_action(&o));
    ASSERT_EQ_INT(count(&o, RA_CREATE, "v1/pods"), 1);
    reconcile_output_done(&o);

    /* recorded: nothing more to do, and the idle pod is parked */
    in.pod = (struct observed_pod){.exists = true, .phase = "Running", .ready = true,
                                   .ip = "127.1.0.5",
                                   .sandbox_hash = children_sandbox_hash(s, &cfg, hash)};
    cJSON *rec = NULL;
    const char *r = "{\"turn\":1,\"configMap\":\"s1-artifacts-t1\",\"artifacts\":[{\"path\":"
                    "\"output/a\",\"stored\":true,\"size\":1,\"sha256\":\"" SHA "\"}]}";
    ASSERT_OK(json_parse(r, strlen(r), &rec, NULL));
    in.journal.persisted = rec;
    reconcile_decide(&in, &o);
    ASSERT_NULL(persist_action(&o));
    ASSERT_EQ_INT(count(&o, RA_DELETE, "v1/pods"), 1);
    ASSERT_EQ_STR(cond_reason(&o), "Persisted");
    const cJSON *arts = json_get(json_get(o.status, "result"), "artifacts");
    ASSERT_EQ_STR(json_get(cJSON_GetArrayItem(arts, 0), "sha256")->valuestring, SHA);
    reconcile_output_done(&o);

    /* asked for again: one more set, named by the request */
    in.ann_persist = "req-7";
    reconcile_decide(&in, &o);
    a = persist_action(&o);
    ASSERT_NOT_NULL(a);
    ASSERT_EQ_STR(a->key, "req-7");
    reconcile_output_done(&o);
    in.journal.persist_request = "req-7";
    reconcile_decide(&in, &o);
    ASSERT_NULL(persist_action(&o));
    reconcile_output_done(&o);

    /* a recorded failure is told and not retried */
    cJSON_Delete(rec);
    r = "{\"turn\":1,\"error\":{\"reason\":\"SandboxUnavailable\",\"message\":\"gone\"},"
        "\"artifacts\":[]}";
    ASSERT_OK(json_parse(r, strlen(r), &rec, NULL));
    in.journal.persisted = rec;
    reconcile_decide(&in, &o);
    ASSERT_NULL(persist_action(&o));
    ASSERT_EQ_STR(cond_reason(&o), "SandboxUnavailable");
    reconcile_output_done(&o);
    cJSON_Delete(rec);
    cJSON_Delete(paths);
    session_spec_free(s);
}

TEST(a_finished_session_waits_for_its_artifacts_before_its_ttl)
{
    struct session_spec *s = spec_from(
        "apiVersion: tern.dev/v1alpha1\nkind: AgentSession\n"
        "metadata: {name: s1, namespace: ns, uid: u-1, generation: 2}\n"
        "spec:\n  objective: do it\n  ttlSecondsAfterFinished: 0\n");
    cJSON *paths = NULL;
    ASSERT_OK(json_parse("[\"output/a\"]", 12, &paths, NULL));
    struct reconcile_input in = {
        .name = "s1", .ns = "ns", .uid = "u-1", .generation = 2, .has_finalizer = true,
        .spec = s, .pvc_exists = true, .token_exists = true, .task_exists = true,
        .netpol_exists = true, .now = 1000000, .cfg = &cfg,
        .job = {.exists = true, .turn = 1, .complete = true},
        .journal = {.last_seq = 5, .turn = 1, .messages = 1, .outcome = "completed",
                    .updated_at = 1000000 - 60, .result_summary = "done",
                    .result_artifacts = paths, .result_turn = 1},
    };
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "tern.dev/v1alpha1/agentsessions"), 0);
    reconcile_output_done(&o);
    cJSON_Delete(paths);
    in.journal.result_artifacts = NULL; /* nothing under output/: deleted at once */
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_DELETE, "tern.dev/v1alpha1/agentsessions"), 1);
    reconcile_output_done(&o);
    session_spec_free(s);
}
