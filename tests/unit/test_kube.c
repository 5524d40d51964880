/* Unit tests for kube/ pure parts: kubeconfig documents, ExecCredential,
 * times, watch-event lines, Status errors, paths, the work queue, the event
 * note truncation. Server-backed tests are in test_kube_client.c. */
#include "harness.h"

#include "base/mem.h"
#include "json/json.h"
#include "kube/kclient.h"
#include "kube/kmap.h"
#include "kube/kubeconfig.h"
#include "kube/recorder.h"
#include "kube/workqueue.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ASSERT_NOT_NULL(f);
    fputs(text, f);
    fclose(f);
}

static const char *KC =
    "{\"apiVersion\":\"v1\",\"kind\":\"Config\",\"current-context\":\"dev\","
    "\"clusters\":[{\"name\":\"c1\",\"cluster\":{\"server\":\"https://10.0.0.1:6443/\","
    "\"certificate-authority-data\":\"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\"}},"
    "{\"name\":\"c2\",\"cluster\":{\"server\":\"http://127.0.0.1:8080\",\"insecure-skip-tls-verify\":true}}],"
    "\"users\":[{\"name\":\"u1\",\"user\":{\"token\":\"tok-1\"}},"
    "{\"name\":\"u2\",\"user\":{\"tokenFile\":\"tok.txt\"}},"
    "{\"name\":\"u3\",\"user\":{\"exec\":{\"command\":\"./plugin.sh\",\"args\":[\"a\",\"b c\"],"
    "\"env\":[{\"name\":\"X\",\"value\":\"1\"}],\"apiVersion\":\"client.authentication.k8s.io/v1beta1\"}}}],"
    "\"contexts\":[{\"name\":\"dev\",\"context\":{\"cluster\":\"c1\",\"user\":\"u1\",\"namespace\":\"team-a\"}},"
    "{\"name\":\"other\",\"context\":{\"cluster\":\"c2\",\"user\":\"u2\"}},"
    "{\"name\":\"ex\",\"context\":{\"cluster\":\"c2\",\"user\":\"u3\"}}]}";

TEST(kubeconfig_current_context)
{
    struct kubeconfig *c = NULL;
    struct tern_err e = {0};
    ASSERT_OK(kubeconfig_parse(KC, strlen(KC), NULL, "/base", &c, &e));
    ASSERT_EQ_STR(c->server, "https://10.0.0.1:6443");
    ASSERT_EQ_STR(c->namespace, "team-a");
    ASSERT_EQ_STR(c->context, "dev");
    ASSERT_EQ_STR(c->token, "tok-1");
    ASSERT_EQ_INT(c->ca_pem_len, 28);
    ASSERT_CONTAINS(c->ca_pem, "BEGIN CERTIFICATE");
    ASSERT_FALSE(c->insecure);
    struct kubeconfig_creds cr;
    ASSERT_OK(kubeconfig_creds(c, 0, &cr, &e));
    ASSERT_EQ_STR(cr.token, "tok-1");
    ASSERT_EQ_INT(cr.gen, 0);
    kubeconfig_creds_done(&cr);
    kubeconfig_free(c);
}

TEST(kubeconfig_overrides_and_token_file)
{
    const char *dir = th_tmpdir();
    char *tf = xasprintf("%s/tok.txt", dir);
    write_file(tf, "rotating-1\n");
    struct kubeconfig_overrides ov = {.context = "other", .namespace = "ns-x"};
    struct kubeconfig *c = NULL;
    struct tern_err e = {0};
    ASSERT_OK(kubeconfig_parse(KC, strlen(KC), &ov, dir, &c, &e));
    ASSERT_EQ_STR(c->server, "http://127.0.0.1:8080");
    ASSERT_TRUE(c->insecure);
    ASSERT_EQ_STR(c->namespace, "ns-x");
    ASSERT_EQ_STR(c->token_file, tf);
    struct kubeconfig_creds cr;
    ASSERT_OK(kubeconfig_creds(c, 0, &cr, &e));
    ASSERT_EQ_STR(cr.token, "rotating-1");
    kubeconfig_creds_done(&cr);
    write_file(tf, "rotating-2");
    ASSERT_OK(kubeconfig_creds(c, 0, &cr, &e));
    ASSERT_EQ_STR(cr.token, "rotating-2");
    kubeconfig_creds_done(&cr);
    kubeconfig_free(c);
    /* user and server overrides */
    struct kubeconfig_overrides ov2 = {.user = "u1", .server = "https://other:1"};
    ASSERT_OK(kubeconfig_parse(KC, strlen(KC), &ov2, dir, &c, &e));
    ASSERT_EQ_STR(c->server, "https://other:1");
    ASSERT_EQ_STR(c->token, "tok-1");
    kubeconfig_free(c);
    free(tf);
}

TEST(kubeconfig_exec_fields)
{
    struct kubeconfig_overrides ov = {.context = "ex"};
    struct kubeconfig *c = NULL;
    struct tern_err e = {0};
    ASSERT_OK(kubeconfig_parse(KC, strlen(KC), &ov, "/etc/kube", &c, &e));
    ASSERT_NOT_NULL(c->exec);
    ASSERT_EQ_STR(c->exec->command, "/etc/kube/./plugin.sh");
    ASSERT_EQ_STR(c->exec->argv[1], "a");
    ASSERT_EQ_STR(c->exec->argv[2], "b c");
    ASSERT_NULL(c->exec->argv[3]);
    ASSERT_EQ_STR(c->exec->env[0], "X=1");
    ASSERT_EQ_STR(c->exec->api_version, "client.authentication.k8s.io/v1beta1");
    ASSERT_TRUE(kubeconfig_can_refresh(c));
    kubeconfig_free(c);
}

static void expect_bad(const char *doc, const struct kubeconfig_overrides *ov, const char *msg)
{
    struct kubeconfig *c = NULL;
    struct tern_err e = {0};
    int r = kubeconfig_parse(doc, strlen(doc), ov, NULL, &c, &e);
    if (r == 0)
        th_fail(__FILE__, __LINE__, "accepted: %s", doc);
    ASSERT_NULL(c);
    ASSERT_CONTAINS(e.msg, msg);
}

TEST(kubeconfig_rejects_bad_documents)
{
    expect_bad("[]", NULL, "mapping");
    expect_bad("{\"current-context\":\"nope\",\"contexts\":[]}", NULL, "no entry named \"nope\"");
    expect_bad("{\"current-context\":\"a\",\"contexts\":[{\"name\":\"a\",\"context\":{\"cluster\":\"x\"}}],"
               "\"clusters\":[{\"name\":\"x\",\"cluster\":{\"server\":\"ftp://x\"}}]}",
               NULL, "http(s) URL");
    expect_bad("{\"current-context\":\"a\",\"contexts\":[{\"name\":\"a\",\"context\":{\"cluster\":\"x\",\"user\":\"u\"}}],"
               "\"clusters\":[{\"name\":\"x\",\"cluster\":{\"server\":\"https://x\"}}],"
               "\"users\":[{\"name\":\"u\",\"user\":{\"client-certificate-data\":\"QQ==\"}}]}",
               NULL, "given together");
    expect_bad("{\"current-context\":\"a\",\"contexts\":[{\"name\":\"a\",\"context\":{\"cluster\":\"x\",\"user\":\"u\"}}],"
               "\"clusters\":[{\"name\":\"x\",\"cluster\":{\"server\":\"https://x\"}}],"
               "\"users\":[{\"name\":\"u\",\"user\":{\"client-key-data\":\"!!\",\"client-certificate-data\":\"QQ==\"}}]}",
               NULL, "base64");
    expect_bad("{\"current-context\":\"a\",\"contexts\":[{\"name\":\"a\",\"context\":{\"cluster\":\"x\",\"user\":\"u\"}}],"
               "\"clusters\":[{\"name\":\"x\",\"cluster\":{\"server\":\"https://x\"}}],"
               "\"users\":[{\"name\":\"u\",\"user\":{\"auth-provider\":{\"name\":\"gcp\"}}}]}",
               NULL, "auth-provider");
    expect_bad("{\"clusters\":[]}", NULL, "no current context");
    expect_bad("{\"current-context\":1}", NULL, "current-context");
}

TEST(kubeconfig_cert_files_read_into_memory)
{
    const char *dir = th_tmpdir();
    char *cf = xasprintf("%s/c.pem", dir), *kf = xasprintf("%s/k.pem", dir);
    write_file(cf, "CERT");
    write_file(kf, "KEY");
    const char *doc =
        "{\"current-context\":\"a\",\"contexts\":[{\"name\":\"a\",\"context\":{\"cluster\":\"x\",\"user\":\"u\"}}],"
        "\"clusters\":[{\"name\":\"x\",\"cluster\":{\"server\":\"https://x\",\"certificate-authority\":\"ca.pem\"}}],"
        "\"users\":[{\"name\":\"u\",\"user\":{\"client-certificate\":\"c.pem\",\"client-key\":\"k.pem\"}}]}";
    struct kubeconfig *c = NULL;
    struct tern_err e = {0};
    ASSERT_OK(kubeconfig_parse(doc, strlen(doc), NULL, dir, &c, &e));
    ASSERT_EQ_STR(c->cert_pem, "CERT");
    ASSERT_EQ_STR(c->key_pem, "KEY");
    char *ca = xasprintf("%s/ca.pem", dir);
    ASSERT_EQ_STR(c->ca_file, ca);
    struct kubeconfig_creds cr;
    ASSERT_OK(kubeconfig_creds(c, 0, &cr, &e));
    ASSERT_EQ_STR(cr.cert_pem, "CERT");
    ASSERT_NULL(cr.token);
    kubeconfig_creds_done(&cr);
    kubeconfig_free(c);
    /* a missing key file names the field */
    unlink(kf);
    ASSERT_EQ_INT(kubeconfig_parse(doc, strlen(doc), NULL, dir, &c, &e), -ENOENT);
    ASSERT_CONTAINS(e.msg, "client-key");
    free(ca);
    free(cf);
    free(kf);
}

TEST(in_cluster_config)
{
    const char *dir = th_tmpdir();
    char *tf = xasprintf("%s/token", dir), *nf = xasprintf("%s/namespace", dir);
    struct kubeconfig *c = NULL;
    struct tern_err e = {0};
    unsetenv("KUBERNETES_SERVICE_HOST");
    ASSERT_EQ_INT(kubeconfig_in_cluster(dir, &c, &e), -ENOENT);
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    ASSERT_EQ_INT(kubeconfig_in_cluster(dir, &c, &e), -ENOENT); /* no token file */
    write_file(tf, "sa-token-1\n");
    write_file(nf, "tern-system\n");
    ASSERT_OK(kubeconfig_in_cluster(dir, &c, &e));
    ASSERT_EQ_STR(c->server, "https://[fd00::1]:443");
    ASSERT_EQ_STR(c->namespace, "tern-system");
    ASSERT_CONTAINS(c->ca_file, "/ca.crt");
    struct kubeconfig_creds cr;
    ASSERT_OK(kubeconfig_creds(c, 0, &cr, &e));
    ASSERT_EQ_STR(cr.token, "sa-token-1");
    kubeconfig_creds_done(&cr);
    write_file(tf, "sa-token-2\n"); /* rotation */
    ASSERT_OK(kubeconfig_creds(c, 0, &cr, &e));
    ASSERT_EQ_STR(cr.token, "sa-token-2");
    kubeconfig_creds_done(&cr);
    kubeconfig_free(c);
    setenv("KUBERNETES_SERVICE_PORT", "http", 1);
    ASSERT_EQ_INT(kubeconfig_in_cluster(dir, &c, &e), TERN_EINVALID);
    free(tf);
    free(nf);
}

TEST(exec_credential_parsing)
{
    struct kubeconfig_creds cr;
    time_t exp = 1;
    struct tern_err e = {0};
    const char *ok = "{\"kind\":\"ExecCredential\",\"apiVersion\":\"client.authentication.k8s.io/v1\","
                     "\"status\":{\"token\":\"T\",\"expirationTimestamp\":\"2030-01-02T03:04:05Z\"}}";
    ASSERT_OK(kubeconfig_parse_exec_credential(ok, strlen(ok), &cr, &exp, &e));
    ASSERT_EQ_STR(cr.token, "T");
    ASSERT_EQ_INT(exp, 1893553445);
    kubeconfig_creds_done(&cr);
    const char *bad[] = {
        "{\"kind\":\"Other\",\"status\":{\"token\":\"T\"}}",
        "{\"kind\":\"ExecCredential\"}",
        "{\"kind\":\"ExecCredential\",\"status\":{}}",
        "{\"kind\":\"ExecCredential\",\"status\":{\"clientCertificateData\":\"x\"}}",
        "{\"kind\":\"ExecCredential\",\"status\":{\"token\":\"T\",\"expirationTimestamp\":\"soon\"}}",
        "not json",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ASSERT_NE_INT(kubeconfig_parse_exec_credential(bad[i], strlen(bad[i]), &cr, &exp, &e), 0);
}

TEST(rfc3339_times)
{
    time_t t;
    ASSERT_OK(kubeconfig_parse_time("1970-01-01T00:00:00Z", &t));
    ASSERT_EQ_INT(t, 0);
    ASSERT_OK(kubeconfig_parse_time("2030-01-02T03:04:05.123456+01:00", &t));
    ASSERT_EQ_INT(t, 1893553445 - 3600);
    ASSERT_NE_INT(kubeconfig_parse_time("2030-01-02 03:04:05Z", &t), 0);
    ASSERT_NE_INT(kubeconfig_parse_time("2030-13-02T03:04:05Z", &t), 0);
    ASSERT_NE_INT(kubeconfig_parse_time("2030-01-02T03:04:05", &t), 0);
    ASSERT_NE_INT(kubeconfig_parse_time("2030-01-02T03:04:05Zjunk", &t), 0);
    char out[32];
    struct timespec ts = {1893553445, 123456789};
    ASSERT_EQ_STR(kclient_microtime(&ts, out), "2030-01-02T03:04:05.123456Z");
}

TEST(watch_event_lines)
{
    enum kwatch_type t;
    cJSON *o = NULL;
    struct tern_err e = {0};
    const char *l = "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"7\"}}}";
    ASSERT_OK(kclient_parse_event(l, strlen(l), &t, &o, &e));
    ASSERT_EQ_INT(t, KWATCH_MODIFIED);
    ASSERT_EQ_STR(json_get(json_get(o, "metadata"), "resourceVersion")->valuestring, "7");
    cJSON_Delete(o);
    const char *bad[] = {"{\"type\":\"ADDED\"}", "{\"type\":\"NOPE\",\"object\":{}}",
                         "{\"type\":\"ADDED\",\"object\":[]}", "{\"type\":\"ADDED\",\"obj",
                         "{\"object\":{}}", "[]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        o = NULL;
        ASSERT_NE_INT(kclient_parse_event(bad[i], strlen(bad[i]), &t, &o, &e), 0);
        ASSERT_NULL(o);
    }
}

TEST(status_errors_are_typed)
{
    struct kclient_err e;
    const char *conflict = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
                           "\"message\":\"the object has been modified\",\"reason\":\"Conflict\",\"code\":409}";
    ASSERT_EQ_INT(kclient_status_error(409, conflict, strlen(conflict), "PUT x", &e), TERN_ECONFLICT);
    ASSERT_EQ_STR(e.reason, "Conflict");
    ASSERT_EQ_INT(e.http_status, 409);
    ASSERT_CONTAINS(e.message, "modified");
    ASSERT_CONTAINS(e.e.msg, "PUT x: HTTP 409 Conflict");
    const char *exists = "{\"kind\":\"Status\",\"reason\":\"AlreadyExists\",\"code\":409}";
    ASSERT_EQ_INT(kclient_status_error(409, exists, strlen(exists), "POST", &e), -EEXIST);
    const char *expired = "{\"kind\":\"Status\",\"reason\":\"Expired\",\"code\":410}";
    /* an ERROR watch event arrives with HTTP 200: the Status code counts */
    ASSERT_EQ_INT(kclient_status_error(200, expired, strlen(expired), "watch", &e), TERN_ECOMPACTED);
    ASSERT_EQ_INT(e.http_status, 410);
    ASSERT_EQ_INT(kclient_status_error(404, "<html>", 6, "GET", &e), TERN_ENOTFOUND);
    ASSERT_EQ_STR(e.reason, "");
    ASSERT_EQ_INT(kclient_status_error(422, NULL, 0, "GET", &e), TERN_EINVALID);
    ASSERT_EQ_INT(kclient_status_error(403, NULL, 0, "GET", &e), TERN_EAUTH);
    ASSERT_EQ_INT(kclient_status_error(415, NULL, 0, "GET", &e), -EOPNOTSUPP);
    ASSERT_EQ_INT(kclient_status_error(503, NULL, 0, "GET", &e), TERN_EHTTP);
}

TEST(api_paths)
{
    struct kgvr core = {"", "v1", "pods"}, ags = {"tern.dev", "v1alpha1", "agentsessions"};
    char *p = kclient_path(&core, "default", "p1", "status");
    ASSERT_EQ_STR(p, "/api/v1/namespaces/default/pods/p1/status");
    free(p);
    p = kclient_path(&ags, NULL, NULL, NULL);
    ASSERT_EQ_STR(p, "/apis/tern.dev/v1alpha1/agentsessions");
    free(p);
    p = kclient_path(&ags, "a b", "x/y", NULL);
    ASSERT_EQ_STR(p, "/apis/tern.dev/v1alpha1/namespaces/a%20b/agentsessions/x%2Fy");
    free(p);
}

TEST(kmap_basics)
{
    struct kmap *m = kmap_new();
    char k[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(k, sizeof k, "k%d", i);
        ASSERT_NULL(kmap_put(m, k, (void *)(intptr_t)(i + 1)));
    }
    ASSERT_EQ_INT(kmap_len(m), 1000);
    ASSERT_EQ_INT((intptr_t)kmap_get(m, "k500"), 501);
    ASSERT_EQ_INT((intptr_t)kmap_del(m, "k500"), 501);
    ASSERT_FALSE(kmap_has(m, "k500"));
    ASSERT_EQ_INT(kmap_len(m), 999);
    kmap_free(m);
}

/* ---- work queue ---- */

static long long ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

TEST(workqueue_dedups_and_fifo)
{
    struct workqueue *q = workqueue_new(NULL);
    ASSERT_OK(workqueue_add(q, "a"));
    ASSERT_OK(workqueue_add(q, "b"));
    ASSERT_OK(workqueue_add(q, "a"));
    ASSERT_EQ_INT(workqueue_len(q), 2);
    char *k;
    ASSERT_OK(workqueue_get(q, &k));
    ASSERT_EQ_STR(k, "a");
    workqueue_done(q, k);
    free(k);
    ASSERT_OK(workqueue_get(q, &k));
    ASSERT_EQ_STR(k, "b");
    workqueue_done(q, k);
    free(k);
    ASSERT_EQ_INT(workqueue_len(q), 0);
    workqueue_shutdown(q);
    ASSERT_EQ_INT(workqueue_get(q, &k), -ECANCELED);
    workqueue_free(q);
}

TEST(workqueue_peek_shows_the_next_keys_in_order)
{
    struct workqueue *q = workqueue_new(NULL);
    char *seen[4] = {0}, *k;
    ASSERT_EQ_INT(workqueue_peek(q, seen, 4), 0);
    /* (40 in, 38 out, two more: the ring has moved on) */
    for (int i = 0; i < 40; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%02d", i);
        ASSERT_OK(workqueue_add(q, key));
    }
    for (int i = 0; i < 38; i++) {
        ASSERT_OK(workqueue_get(q, &k));
        workqueue_done(q, k);
        free(k);
    }
    ASSERT_OK(workqueue_add(q, "z1"));
    ASSERT_OK(workqueue_add(q, "z2"));
    ASSERT_EQ_INT(workqueue_peek(q, seen, 3), 3);
    ASSERT_EQ_STR(seen[0], "k38");
    ASSERT_EQ_STR(seen[1], "k39");
    ASSERT_EQ_STR(seen[2], "z1");
    ASSERT_EQ_INT(workqueue_len(q), 4); /* they stay queued */
    for (int i = 0; i < 3; i++)
        free(seen[i]);
    ASSERT_EQ_INT(workqueue_peek(q, seen, 4), 4);
    ASSERT_EQ_STR(seen[3], "z2");
    ASSERT_OK(workqueue_get(q, &k));
    ASSERT_EQ_STR(k, seen[0]);
    free(k);
    for (int i = 0; i < 4; i++)
        free(seen[i]);
    workqueue_shutdown(q);
    workqueue_free(q);
}

TEST(workqueue_add_while_processing_runs_again_after)
{
    struct workqueue *q = workqueue_new(NULL);
    char *k, *k2;
    workqueue_add(q, "x");
    ASSERT_OK(workqueue_get(q, &k));
    workqueue_add(q, "x"); /* while processing: not handed out twice */
    workqueue_add(q, "x");
    ASSERT_EQ_INT(workqueue_len(q), 0);
    workqueue_done(q, k);
    ASSERT_EQ_INT(workqueue_len(q), 1);
    ASSERT_OK(workqueue_get(q, &k2));
    ASSERT_EQ_STR(k2, "x");
    workqueue_done(q, k2);
    ASSERT_EQ_INT(workqueue_len(q), 0);
    free(k);
    free(k2);
    workqueue_shutdown(q);
    workqueue_free(q);
}

TEST(workqueue_backoff_grows_and_caps)
{
    struct workqueue_opts o = {.base_delay_ms = 5, .max_delay_ms = 80, .qps = 1000, .burst = 1000};
    struct workqueue *q = workqueue_new(&o);
    long d;
    long expect[] = {5, 10, 20, 40, 80, 80};
    for (int i = 0; i < 6; i++) {
        ASSERT_OK(workqueue_add_rate_limited(q, "k", &d));
        ASSERT_EQ_INT(d, expect[i]);
    }
    ASSERT_EQ_INT(workqueue_requeues(q, "k"), 6);
    workqueue_forget(q, "k");
    ASSERT_EQ_INT(workqueue_requeues(q, "k"), 0);
    ASSERT_OK(workqueue_add_rate_limited(q, "k", &d));
    ASSERT_EQ_INT(d, 5);
    workqueue_shutdown(q);
    workqueue_free(q);
}

TEST(workqueue_token_bucket_limits_overall_rate)
{
    struct workqueue_opts o = {.base_delay_ms = 1, .qps = 1, .burst = 3};
    struct workqueue *q = workqueue_new(&o);
    long d[5];
    char key[16];
    for (int i = 0; i < 5; i++) {
        snprintf(key, sizeof key, "k%d", i);
        ASSERT_OK(workqueue_add_rate_limited(q, key, &d[i]));
    }
    ASSERT_EQ_INT(d[0], 1); /* within the burst: only the item backoff */
    ASSERT_EQ_INT(d[2], 1);
    ASSERT_CMP_INT(d[3], >=, 900); /* bucket empty: ~1 s per token */
    ASSERT_CMP_INT(d[4], >=, 1900);
    workqueue_shutdown(q);
    workqueue_free(q);
}

TEST(workqueue_delayed_adds)
{
    struct workqueue *q = workqueue_new(NULL);
    long long t0 = ms_now();
    ASSERT_OK(workqueue_add_after(q, "late", 300));
    ASSERT_OK(workqueue_add_after(q, "soon", 100));
    ASSERT_OK(workqueue_add_after(q, "soon", 250)); /* the earlier time wins */
    ASSERT_EQ_INT(workqueue_len(q), 0);
    char *k;
    ASSERT_OK(workqueue_get(q, &k));
    long long t1 = ms_now();
    ASSERT_EQ_STR(k, "soon");
    ASSERT_CMP_INT(t1 - t0, >=, 95);
    ASSERT_CMP_INT(t1 - t0, <, 250);
    workqueue_done(q, k);
    free(k);
    ASSERT_OK(workqueue_get(q, &k));
    ASSERT_EQ_STR(k, "late");
    ASSERT_CMP_INT(ms_now() - t0, >=, 295);
    workqueue_done(q, k);
    free(k);
    /* an immediate add of a delayed key is not lost or doubled */
    ASSERT_OK(workqueue_add_after(q, "d", 50));
    ASSERT_OK(workqueue_add(q, "d"));
    ASSERT_OK(workqueue_get(q, &k));
    workqueue_done(q, k);
    free(k);
    ASSERT_OK(workqueue_get(q, &k)); /* the delayed one, later */
    ASSERT_EQ_STR(k, "d");
    workqueue_done(q, k);
    free(k);
    workqueue_shutdown(q);
    workqueue_free(q);
}

struct wq_worker {
    struct workqueue *q;
    int handled;
    pthread_t th;
};

static void *wq_work(void *arg)
{
    struct wq_worker *w = arg;
    char *k;
    while (workqueue_get(w->q, &k) == 0) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        w->handled++;
        workqueue_done(w->q, k);
        free(k);
    }
    return NULL;
}

TEST(workqueue_shutdown_wakes_workers_and_drains)
{
    struct workqueue *q = workqueue_new(NULL);
    struct wq_worker w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (struct wq_worker){.q = q};
        pthread_create(&w[i].th, NULL, wq_work, &w[i]);
    }
    char key[16];
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof key, "k%d", i);
        workqueue_add(q, key);
    }
    workqueue_add_after(q, "never", 60000); /* dropped by shutdown */
    while (workqueue_len(q) > 0) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    workqueue_shutdown(q);
    ASSERT_EQ_INT(workqueue_add(q, "late"), -ECANCELED);
    workqueue_drain(q);
    int total = 0;
    for (int i = 0; i < 3; i++) {
        pthread_join(w[i].th, NULL);
        total += w[i].handled;
    }
    ASSERT_EQ_INT(total, 50);
    workqueue_free(q);
}

TEST(event_note_truncation)
{
    char s[16] = "abc\xc3\xa9" "def";
    ASSERT_EQ_INT(recorder_truncate_utf8(s, 4), 3); /* never half of é */
    ASSERT_EQ_STR(s, "abc");
    char t[8] = "abcdef";
    ASSERT_EQ_INT(recorder_truncate_utf8(t, 10), 6);
}

TEST(kubeconfig_yaml_as_kubectl_writes_it)
{
    const char *y =
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        "- cluster:\n"
        "    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\n"
        "    server: https://127.0.0.1:6443\n"
        "  name: dev\n"
        "contexts:\n"
        "- context:\n"
        "    cluster: dev\n"
        "    namespace: team-b\n"
        "    user: admin\n"
        "  name: dev\n"
        "current-context: dev\n"
        "preferences: {}\n"
        "users:\n"
        "- name: admin\n"
        "  user:\n"
        "    exec:\n"
        "      apiVersion: client.authentication.k8s.io/v1\n"
        "      command: kubectl-tern-auth\n"
        "      args: [\"get-token\", '--cluster=dev']\n"
        "      env: null\n"
        "      provideClusterInfo: true\n"
        "      interactiveMode: Never\n";
    struct kubeconfig *c = NULL;
    struct tern_err e = {0};
    ASSERT_OK(kubeconfig_parse(y, strlen(y), NULL, NULL, &c, &e));
    ASSERT_EQ_STR(c->server, "https://127.0.0.1:6443");
    ASSERT_EQ_STR(c->namespace, "team-b");
    ASSERT_EQ_STR(c->exec->command, "kubectl-tern-auth");
    ASSERT_EQ_STR(c->exec->argv[2], "--cluster=dev");
    ASSERT_TRUE(c->exec->provide_cluster_info);
    kubeconfig_free(c);
    /* a duplicate key is an error naming its path */
    const char *dup = "current-context: a\ncurrent-context: b\n";
    ASSERT_NE_INT(kubeconfig_parse(dup, strlen(dup), NULL, NULL, &c, &e), 0);
    ASSERT_CONTAINS(e.msg, "current-context");
    /* loading a file resolves relative paths against its directory */
    const char *dir = th_tmpdir();
    char *kc = xasprintf("%s/config", dir), *cert = xasprintf("%s/c.pem", dir),
         *key = xasprintf("%s/k.pem", dir);
    write_file(cert, "C");
    write_file(key, "K");
    write_file(kc, "current-context: x\ncontexts: [{name: x, context: {cluster: x, user: x}}]\n"
                   "clusters: [{name: x, cluster: {server: 'http://h:1'}}]\n"
                   "users: [{name: x, user: {client-certificate: c.pem, client-key: k.pem}}]\n");
    ASSERT_OK(kubeconfig_load_file(kc, NULL, &c, &e));
    ASSERT_EQ_STR(c->cert_pem, "C");
    kubeconfig_free(c);
    setenv("KUBECONFIG", "/nonexistent/a:", 1);
    ASSERT_EQ_INT(kubeconfig_load_default(NULL, &c, &e), -ENOENT);
    char *env = xasprintf("/nonexistent/a:%s", kc);
    setenv("KUBECONFIG", env, 1);
    ASSERT_OK(kubeconfig_load_default(NULL, &c, &e));
    ASSERT_EQ_STR(c->server, "http://h:1");
    kubeconfig_free(c);
    /* load_auto: an explicit path, then $KUBECONFIG, then in-cluster */
    setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    ASSERT_OK(kubeconfig_load_auto(NULL, NULL, dir, &c, &e)); /* KUBECONFIG wins */
    ASSERT_EQ_STR(c->server, "http://h:1");
    kubeconfig_free(c);
    unsetenv("KUBECONFIG");
    char *tok = xasprintf("%s/token", dir);
    write_file(tok, "t");
    struct kubeconfig_overrides ns = {.namespace = "other"};
    ASSERT_OK(kubeconfig_load_auto("", &ns, dir, &c, &e));
    ASSERT_EQ_STR(c->server, "https://10.0.0.1:443");
    ASSERT_EQ_STR(c->namespace, "other");
    kubeconfig_free(c);
    ASSERT_OK(kubeconfig_load_auto(kc, NULL, dir, &c, &e));
    ASSERT_EQ_STR(c->server, "http://h:1");
    kubeconfig_free(c);
    free(tok);
    free(env);
    free(kc);
    free(cert);
    free(key);
}
