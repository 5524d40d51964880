/* Server-backed tests of kube/: the dynamic client, auth paths, watches and
 * informers against the in-process fake API server (tests/support). */
#include "harness.h"

#include "../support/kube/fake_kube.c"
#include "../support/kube/kube_test.h"

#include "base/base64.h"
#include "base/mem.h"
#include "json/json.h"
#include "kube/informer.h"
#include "kube/kclient.h"
#include "kube/kubeconfig.h"
#include "kube/recorder.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const struct kgvr AGS = {"tern.dev", "v1alpha1", "agentsessions"};
static const struct kgvr CMS = {"", "v1", "configmaps"};
#define AGS_COLL "/apis/tern.dev/v1alpha1/namespaces/team-a/agentsessions"

/* now_ms() comes from fake_kube.c */

static struct kclient *client_for(struct kubeconfig *cfg)
{
    struct kclient_opts o = {.backoff_ms = 10, .max_backoff_ms = 200, .timeout_ms = 10000};
    return kclient_new(cfg, &o);
}

static cJSON *session(const char *name, const char *label)
{
    cJSON *o = NULL;
    char *s = xasprintf("{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\","
                        "\"metadata\":{\"name\":\"%s\",\"labels\":{\"team\":\"%s\"}},"
                        "\"spec\":{\"objective\":\"review\"}}",
                        name, label);
    if (json_parse(s, strlen(s), &o, NULL))
        abort();
    free(s);
    return o;
}

static const char *md_str(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(json_get(o, "metadata"), k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

TEST(client_create_get_update_conflict)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct kclient *c = client_for(cfg);
    struct kclient_err e;
    cJSON *obj = session("s1", "a"), *created = NULL, *got = NULL, *upd = NULL;
    ASSERT_OK(kclient_create(c, &AGS, "team-a", obj, &created, &e));
    ASSERT_NOT_NULL(md_str(created, "uid"));
    ASSERT_EQ_INT(kclient_create(c, &AGS, "team-a", obj, NULL, &e), -EEXIST);
    ASSERT_EQ_STR(e.reason, "AlreadyExists");
    ASSERT_EQ_INT(e.http_status, 409);
    ASSERT_OK(kclient_get(c, &AGS, "team-a", "s1", &got, &e));
    ASSERT_EQ_STR(md_str(got, "resourceVersion"), md_str(created, "resourceVersion"));
    ASSERT_EQ_INT(kclient_get(c, &AGS, "team-a", "nope", NULL, &e), TERN_ENOTFOUND);
    ASSERT_EQ_STR(e.reason, "NotFound");
    /* update with the current version, then with the stale one */
    cJSON_ReplaceItemInObjectCaseSensitive(json_get(got, "spec") ? got : got, "spec",
                                           cJSON_Parse("{\"objective\":\"v2\"}"));
    ASSERT_OK(kclient_update(c, &AGS, "team-a", got, &upd, &e));
    ASSERT_NE_INT(strcmp(md_str(upd, "resourceVersion"), md_str(got, "resourceVersion")), 0);
    ASSERT_EQ_INT(kclient_update(c, &AGS, "team-a", got, NULL, &e), TERN_ECONFLICT);
    ASSERT_EQ_STR(e.reason, "Conflict");
    ASSERT_CONTAINS(e.message, "the object has been modified");
    /* update without resourceVersion: 422 Invalid */
    ASSERT_EQ_INT(kclient_update(c, &AGS, "team-a", obj, NULL, &e), TERN_EINVALID);
    ASSERT_EQ_INT(e.http_status, 422);
    cJSON_Delete(obj);
    cJSON_Delete(created);
    cJSON_Delete(got);
    cJSON_Delete(upd);
    kclient_free(c);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST(client_status_subresource_patch_delete)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct kclient *c = client_for(cfg);
    struct kclient_err e;
    cJSON *obj = session("s1", "a"), *cur = NULL, *out = NULL;
    ASSERT_OK(kclient_create(c, &AGS, "team-a", obj, &cur, &e));
    /* /status changes only status */
    cJSON_AddItemToObject(cur, "status", cJSON_Parse("{\"phase\":\"Running\"}"));
    cJSON_ReplaceItemInObjectCaseSensitive(cur, "spec", cJSON_Parse("{\"objective\":\"ignored\"}"));
    ASSERT_OK(kclient_update_status(c, &AGS, "team-a", cur, &out, &e));
    ASSERT_EQ_STR(json_get(json_get(out, "status"), "phase")->valuestring, "Running");
    ASSERT_EQ_STR(json_get(json_get(out, "spec"), "objective")->valuestring, "review");
    cJSON_Delete(out);
    out = NULL;
    /* merge patch */
    const char *mp = "{\"metadata\":{\"labels\":{\"x\":\"1\"}}}";
    ASSERT_OK(kclient_patch(c, &AGS, "team-a", "s1", KCLIENT_PATCH_MERGE, mp, strlen(mp), NULL,
                            &out, &e));
    ASSERT_EQ_STR(json_get(json_get(json_get(out, "metadata"), "labels"), "x")->valuestring, "1");
    cJSON_Delete(out);
    out = NULL;
    char *q = NULL, *ct = NULL;
    fake_kube_last(fk, "PATCH", AGS_COLL, &q, &ct);
    ASSERT_EQ_STR(ct, "application/merge-patch+json");
    /* JSON patch with a failing test op */
    const char *jp = "[{\"op\":\"test\",\"path\":\"/spec/objective\",\"value\":\"nope\"},"
                     "{\"op\":\"replace\",\"path\":\"/spec/objective\",\"value\":\"x\"}]";
    ASSERT_EQ_INT(kclient_patch(c, &AGS, "team-a", "s1", KCLIENT_PATCH_JSON, jp, strlen(jp), NULL,
                                NULL, &e),
                  TERN_EINVALID);
    const char *jp2 = "[{\"op\":\"replace\",\"path\":\"/spec/objective\",\"value\":\"x\"}]";
    ASSERT_OK(kclient_patch(c, &AGS, "team-a", "s1", KCLIENT_PATCH_JSON, jp2, strlen(jp2), NULL,
                            &out, &e));
    ASSERT_EQ_STR(json_get(json_get(out, "spec"), "objective")->valuestring, "x");
    cJSON_Delete(out);
    out = NULL;
    /* apply needs a field manager (checked before sending) */
    const char *ap = "{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\","
                     "\"metadata\":{\"name\":\"s2\"},\"spec\":{\"objective\":\"applied\"}}";
    int before = fake_kube_count(fk, "PATCH", "/");
    ASSERT_EQ_INT(kclient_patch(c, &AGS, "team-a", "s2", KCLIENT_PATCH_APPLY, ap, strlen(ap), NULL,
                                NULL, &e),
                  -EINVAL);
    ASSERT_EQ_INT(fake_kube_count(fk, "PATCH", "/"), before);
    struct kclient_patch_opts po = {.field_manager = "tern-operator", .force = true};
    ASSERT_OK(kclient_patch(c, &AGS, "team-a", "s2", KCLIENT_PATCH_APPLY, ap, strlen(ap), &po,
                            &out, &e));
    fake_kube_last(fk, "PATCH", AGS_COLL "/s2", &q, &ct);
    ASSERT_EQ_STR(ct, "application/apply-patch+yaml");
    ASSERT_CONTAINS(q, "fieldManager=tern-operator");
    ASSERT_CONTAINS(q, "force=true");
    cJSON_Delete(out);
    out = NULL;
    /* strategic merge on a custom resource: 415 */
    ASSERT_EQ_INT(kclient_patch(c, &AGS, "team-a", "s1", KCLIENT_PATCH_STRATEGIC, mp, strlen(mp),
                                NULL, NULL, &e),
                  -EOPNOTSUPP);
    /* delete: precondition mismatch, then with uid and propagation */
    struct kclient_delete_opts d1 = {.precondition_uid = "wrong"};
    ASSERT_EQ_INT(kclient_delete(c, &AGS, "team-a", "s1", &d1, NULL, &e), TERN_ECONFLICT);
    ASSERT_EQ_INT(strstr(fake_kube_last(fk, "DELETE", AGS_COLL, NULL, NULL), "gracePeriod") == NULL, 1);
    struct kclient_delete_opts d2 = {.precondition_uid = md_str(cur, "uid"),
                                     .propagation = "Foreground", .grace_period_set = true};
    ASSERT_OK(kclient_delete(c, &AGS, "team-a", "s1", &d2, NULL, &e));
    char *body = fake_kube_last(fk, "DELETE", AGS_COLL "/s1", NULL, NULL);
    ASSERT_CONTAINS(body, "\"propagationPolicy\":\"Foreground\"");
    ASSERT_CONTAINS(body, "\"gracePeriodSeconds\":0");
    ASSERT_EQ_INT(kclient_get(c, &AGS, "team-a", "s1", NULL, &e), TERN_ENOTFOUND);
    /* an object with a finalizer stays, with a deletionTimestamp */
    cJSON *f = session("fin", "a");
    cJSON_AddItemToObject(json_get(f, "metadata") ? cJSON_GetObjectItem(f, "metadata") : f,
                          "finalizers", cJSON_Parse("[\"tern.dev/journal\"]"));
    ASSERT_OK(kclient_create(c, &AGS, "team-a", f, NULL, &e));
    ASSERT_OK(kclient_delete(c, &AGS, "team-a", "fin", NULL, &out, &e));
    ASSERT_NOT_NULL(md_str(out, "deletionTimestamp"));
    cJSON_Delete(out);
    cJSON_Delete(f);
    cJSON_Delete(obj);
    cJSON_Delete(cur);
    kclient_free(c);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST(client_list_paging_and_selectors)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct kclient *c = client_for(cfg);
    struct kclient_err e;
    char name[32];
    for (int i = 0; i < 25; i++) {
        snprintf(name, sizeof name, "s%02d", i);
        cJSON *o = session(name, i % 5 == 0 ? "b" : "a");
        fake_kube_upsert(fk, AGS_COLL, o);
        cJSON_Delete(o);
    }
    cJSON *list = NULL;
    struct kclient_list_opts lo = {.limit = 10};
    ASSERT_OK(kclient_list_all(c, &AGS, "team-a", &lo, &list, &e));
    ASSERT_EQ_INT(cJSON_GetArraySize(json_get(list, "items")), 25);
    ASSERT_EQ_INT(fake_kube_count(fk, "GET", AGS_COLL), 3);
    cJSON_Delete(list);
    struct kclient_list_opts ls = {.label_selector = "team=b"};
    ASSERT_OK(kclient_list_all(c, &AGS, "team-a", &ls, &list, &e));
    ASSERT_EQ_INT(cJSON_GetArraySize(json_get(list, "items")), 5);
    cJSON_Delete(list);
    struct kclient_list_opts fs = {.field_selector = "metadata.name=s07"};
    ASSERT_OK(kclient_list(c, &AGS, "team-a", &fs, &list, &e));
    ASSERT_EQ_INT(cJSON_GetArraySize(json_get(list, "items")), 1);
    cJSON_Delete(list);
    /* all namespaces */
    ASSERT_OK(kclient_list_all(c, &AGS, NULL, NULL, &list, &e));
    ASSERT_EQ_INT(cJSON_GetArraySize(json_get(list, "items")), 25);
    cJSON_Delete(list);
    /* an expired continue token is reported as 410 (caller relists) */
    struct kclient_list_opts lo2 = {.limit = 10};
    ASSERT_OK(kclient_list(c, &AGS, "team-a", &lo2, &list, &e));
    const char *cont = json_get(json_get(list, "metadata"), "continue")->valuestring;
    fake_kube_compact(fk);
    lo2.continue_token = cont;
    cJSON *page2 = NULL;
    ASSERT_EQ_INT(kclient_list(c, &AGS, "team-a", &lo2, &page2, &e), TERN_ECOMPACTED);
    cJSON_Delete(list);
    kclient_free(c);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST(client_retries_429_and_5xx)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct kclient_opts o = {.backoff_ms = 10, .max_backoff_ms = 1500, .max_retries = 4};
    struct kclient *c = kclient_new(cfg, &o);
    struct kclient_err e;
    cJSON *obj = session("s1", "a");
    fake_kube_upsert(fk, AGS_COLL, obj);
    /* 429 with Retry-After: 1 is honoured (one second) and retried */
    fake_kube_inject(fk, "GET", AGS_COLL "/s1", 429, NULL, 1, 1);
    long long t0 = now_ms();
    ASSERT_OK(kclient_get(c, &AGS, "team-a", "s1", NULL, &e));
    ASSERT_CMP_INT(now_ms() - t0, >=, 950);
    ASSERT_EQ_INT(fake_kube_count(fk, "GET", AGS_COLL "/s1"), 2);
    /* a huge Retry-After is capped by max_backoff_ms */
    fake_kube_inject(fk, "GET", AGS_COLL "/s1", 429, NULL, 3600, 1);
    t0 = now_ms();
    ASSERT_OK(kclient_get(c, &AGS, "team-a", "s1", NULL, &e));
    ASSERT_CMP_INT(now_ms() - t0, <, 5000);
    /* 500 without Retry-After: GET retried, POST not */
    fake_kube_inject(fk, "GET", AGS_COLL "/s1", 500, NULL, -1, 2);
    ASSERT_OK(kclient_get(c, &AGS, "team-a", "s1", NULL, &e));
    fake_kube_inject(fk, "POST", AGS_COLL, 500, NULL, -1, 1);
    cJSON *o2 = session("s2", "a");
    int posts = fake_kube_count(fk, "POST", AGS_COLL);
    ASSERT_EQ_INT(kclient_create(c, &AGS, "team-a", o2, NULL, &e), TERN_EHTTP);
    ASSERT_EQ_INT(e.http_status, 500);
    ASSERT_EQ_INT(fake_kube_count(fk, "POST", AGS_COLL), posts + 1);
    /* 503 with Retry-After: any verb is retried */
    fake_kube_inject(fk, "POST", AGS_COLL, 503, NULL, 0, 1);
    ASSERT_OK(kclient_create(c, &AGS, "team-a", o2, NULL, &e));
    /* retries are bounded */
    fake_kube_inject(fk, "GET", AGS_COLL "/s1", 429, NULL, 0, 100);
    ASSERT_EQ_INT(kclient_get(c, &AGS, "team-a", "s1", NULL, &e), TERN_EHTTP);
    ASSERT_EQ_INT(e.http_status, 429);
    cJSON_Delete(o2);
    cJSON_Delete(obj);
    kclient_free(c);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

struct mut_ctx {
    struct fake_kube *fk;
    int calls;
};

static int mutate_with_race(void *ctx, cJSON *obj)
{
    struct mut_ctx *m = ctx;
    if (++m->calls == 1) {
        /* someone else writes between our get and our update */
        cJSON *other = session("s1", "other");
        fake_kube_upsert(m->fk, AGS_COLL, other);
        cJSON_Delete(other);
    }
    cJSON *labels = json_get(json_get(obj, "metadata"), "labels") ?
        cJSON_GetObjectItem(cJSON_GetObjectItem(obj, "metadata"), "labels") : NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(labels, "mine");
    json_add_string(labels, "mine", "yes");
    return 0;
}

static int mutate_noop(void *ctx, cJSON *obj)
{
    (void)ctx;
    (void)obj;
    return 1;
}

TEST(client_update_retry_on_conflict)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct kclient *c = client_for(cfg);
    struct kclient_err e;
    cJSON *obj = session("s1", "a"), *out = NULL;
    fake_kube_upsert(fk, AGS_COLL, obj);
    struct mut_ctx m = {fk, 0};
    ASSERT_OK(kclient_update_retry(c, &AGS, "team-a", "s1", NULL, mutate_with_race, &m, 5, &out,
                                   &e));
    ASSERT_EQ_INT(m.calls, 2);
    const cJSON *labels = json_get(json_get(out, "metadata"), "labels");
    ASSERT_EQ_STR(json_get(labels, "mine")->valuestring, "yes");
    ASSERT_EQ_STR(json_get(labels, "team")->valuestring, "other"); /* the other write survived */
    cJSON_Delete(out);
    int puts = fake_kube_count(fk, "PUT", "/");
    ASSERT_OK(kclient_update_retry(c, &AGS, "team-a", "s1", NULL, mutate_noop, NULL, 5, NULL, &e));
    ASSERT_EQ_INT(fake_kube_count(fk, "PUT", "/"), puts); /* no write when nothing changed */
    cJSON_Delete(obj);
    kclient_free(c);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST(auth_bearer_token_and_token_file)
{
    struct fake_kube *fk = fake_kube_start();
    fake_kube_require_token(fk, "good");
    struct kubeconfig *bad = kt_config(fake_kube_url(fk), "{\"token\":\"bad\"}");
    struct kubeconfig *good = kt_config(fake_kube_url(fk), "{\"token\":\"good\"}");
    struct kclient *cb = client_for(bad), *cg = client_for(good);
    struct kclient_err e;
    ASSERT_EQ_INT(kclient_list(cb, &CMS, "default", NULL, NULL, &e), TERN_EAUTH);
    ASSERT_EQ_INT(e.http_status, 401);
    ASSERT_OK(kclient_list(cg, &CMS, "default", NULL, NULL, &e));
    /* tokenFile: re-read per request, so rotation needs no restart */
    char *tf = xasprintf("%s/token", th_tmpdir());
    FILE *f = fopen(tf, "w");
    fputs("good\n", f);
    fclose(f);
    char *user = xasprintf("{\"tokenFile\":\"%s\"}", tf);
    struct kubeconfig *filecfg = kt_config(fake_kube_url(fk), user);
    struct kclient *cf = client_for(filecfg);
    ASSERT_OK(kclient_list(cf, &CMS, "default", NULL, NULL, &e));
    fake_kube_require_token(fk, "rotated");
    ASSERT_EQ_INT(kclient_list(cf, &CMS, "default", NULL, NULL, &e), TERN_EAUTH);
    f = fopen(tf, "w");
    fputs("rotated", f);
    fclose(f);
    ASSERT_OK(kclient_list(cf, &CMS, "default", NULL, NULL, &e));
    kclient_free(cb);
    kclient_free(cg);
    kclient_free(cf);
    kubeconfig_free(bad);
    kubeconfig_free(good);
    kubeconfig_free(filecfg);
    free(tf);
    free(user);
    fake_kube_free(fk);
}

static char *write_script(const char *name, const char *body)
{
    char *p = xasprintf("%s/%s", th_tmpdir(), name);
    FILE *f = fopen(p, "w");
    fputs(body, f);
    fclose(f);
    chmod(p, 0755);
    return p;
}

/* ---- watches ---- */

struct wctx {
    int n;
    char names[16][32];
    enum kwatch_type types[16];
    int stop_after;
};

static int collect(void *ctx, enum kwatch_type type, cJSON *obj)
{
    struct wctx *w = ctx;
    if (w->n < 16) {
        const char *nm = md_str(obj, "name");
        snprintf(w->names[w->n], sizeof w->names[0], "%s", nm ? nm : "");
        w->types[w->n] = type;
    }
    w->n++;
    cJSON_Delete(obj);
    return w->n >= w->stop_after ? 99 : 0;
}

TEST(auth_exec_plugin_rerun_after_401)
{
    struct fake_kube *fk = fake_kube_start();
    fake_kube_require_token(fk, "tok-2");
    const char *dir = th_tmpdir();
    /* prints tok-N on its Nth run; records its argv and exec info */
    char *script = xasprintf(
        "#!/bin/sh\n"
        "n=$(cat \"$STATE\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$STATE\"\n"
        "printf '%%s|%%s' \"$1\" \"$2\" > \"$STATE.args\"\n"
        "printf '%%s' \"$KUBERNETES_EXEC_INFO\" > \"$STATE.info\"\n"
        "printf '{\"kind\":\"ExecCredential\",\"apiVersion\":\"client.authentication.k8s.io/v1\","
        "\"status\":{\"token\":\"tok-%%s\"}}' $n\n");
    char *plugin = write_script("plugin.sh", script);
    char *user = xasprintf("{\"exec\":{\"command\":\"%s\",\"args\":[\"one arg\",\"$(not a shell)\"],"
                           "\"env\":[{\"name\":\"STATE\",\"value\":\"%s/state\"}],"
                           "\"provideClusterInfo\":true}}",
                           plugin, dir);
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), user);
    struct kclient *c = client_for(cfg);
    struct kclient_err e;
    ASSERT_OK(kclient_list(c, &CMS, "default", NULL, NULL, &e)); /* tok-1 -> 401 -> tok-2 */
    ASSERT_EQ_INT(fake_kube_count(fk, "GET", "/api/v1"), 2);
    ASSERT_OK(kclient_list(c, &CMS, "default", NULL, NULL, &e)); /* cached tok-2 */
    ASSERT_EQ_INT(fake_kube_count(fk, "GET", "/api/v1"), 3);
    char *st = NULL, *args = NULL, *info = NULL;
    size_t n;
    char *sp = xasprintf("%s/state", dir), *ap = xasprintf("%s/state.args", dir),
         *ip = xasprintf("%s/state.info", dir);
    ASSERT_OK(kubeconfig_read_file(sp, 100, &st, &n, NULL));
    ASSERT_EQ_STR(st, "2\n");
    ASSERT_OK(kubeconfig_read_file(ap, 100, &args, &n, NULL));
    ASSERT_EQ_STR(args, "one arg|$(not a shell)");
    ASSERT_OK(kubeconfig_read_file(ip, 10000, &info, &n, NULL));
    ASSERT_CONTAINS(info, "\"kind\":\"ExecCredential\"");
    ASSERT_CONTAINS(info, "\"interactive\":false");
    ASSERT_CONTAINS(info, fake_kube_url(fk));
    /* a watch rejected with 401 re-runs the plugin too, and then streams */
    fake_kube_require_token(fk, "tok-3");
    cJSON *cm = NULL;
    ASSERT_OK(json_parse("{\"metadata\":{\"name\":\"cm1\"}}", 27, &cm, NULL));
    fake_kube_upsert(fk, "/api/v1/namespaces/default/configmaps", cm);
    cJSON_Delete(cm);
    struct wctx w = {.stop_after = 1};
    struct kclient_list_opts wo = {.resource_version = "0", .timeout_seconds = 5};
    ASSERT_EQ_INT(kclient_watch(c, &CMS, "default", &wo, collect, &w, &e), 99);
    ASSERT_EQ_STR(w.names[0], "cm1");
    /* a plugin whose credential stays wrong: one re-run, then the 401 */
    fake_kube_require_token(fk, "never");
    ASSERT_EQ_INT(kclient_list(c, &CMS, "default", NULL, NULL, &e), TERN_EAUTH);
    free(st);
    free(args);
    free(info);
    free(sp);
    free(ap);
    free(ip);
    kclient_free(c);
    kubeconfig_free(cfg);
    free(user);
    free(plugin);
    free(script);
    fake_kube_free(fk);
}

TEST(auth_exec_plugin_bounds)
{
    struct fake_kube *fk = fake_kube_start();
    char *big = write_script("big.sh", "#!/bin/sh\nhead -c 3000000 /dev/zero 2>/dev/null | tr '\\0' x 2>/dev/null\n");
    char *slow = write_script("slow.sh", "#!/bin/sh\nexec sleep 30\n");
    char *fail = write_script("fail.sh", "#!/bin/sh\nexit 3\n");
    const char *paths[] = {big, slow, fail};
    int expect[] = {TERN_ETOOLARGE, TERN_ETIMEOUT, TERN_EAUTH};
    for (int i = 0; i < 3; i++) {
        char *user = xasprintf("{\"exec\":{\"command\":\"%s\"}}", paths[i]);
        struct kubeconfig *cfg = kt_config(fake_kube_url(fk), user);
        cfg->exec->timeout_ms = 300;
        struct kubeconfig_creds cr;
        struct tern_err e = {0};
        long long t0 = now_ms();
        ASSERT_EQ_INT(kubeconfig_creds(cfg, 0, &cr, &e), expect[i]);
        ASSERT_CMP_INT(now_ms() - t0, <, 5000);
        kubeconfig_free(cfg);
        free(user);
    }
    /* a missing command */
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), "{\"exec\":{\"command\":\"/nonexistent/x\"}}");
    struct kubeconfig_creds cr;
    ASSERT_NE_INT(kubeconfig_creds(cfg, 0, &cr, NULL), 0);
    kubeconfig_free(cfg);
    free(big);
    free(slow);
    free(fail);
    fake_kube_free(fk);
}

/* Test CA, server cert for 127.0.0.1, client cert; made with openssl. */
static void make_certs(const char *d)
{
    char *cmd = xasprintf(
        "cd '%s' && set -e && exec >/dev/null 2>&1 && "
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
        "-subj /CN=test-ca -keyout ca.key -out ca.crt && "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 "
        "-keyout server.key -out server.csr && "
        "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile san.ext -out server.crt && "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=tern-operator "
        "-keyout client.key -out client.csr && "
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
        "-out client.crt",
        d);
    if (system(cmd) != 0)
        th_fail(__FILE__, __LINE__, "openssl failed");
    free(cmd);
}

static char *b64_file(const char *dir, const char *name)
{
    char *p = xasprintf("%s/%s", dir, name), *data = NULL;
    size_t n;
    if (kubeconfig_read_file(p, 100000, &data, &n, NULL))
        th_fail(__FILE__, __LINE__, "read %s", p);
    char *b = base64_encode(data, n);
    free(data);
    free(p);
    return b;
}

TEST(auth_client_certificate_over_tls)
{
    const char *d = th_tmpdir();
    make_certs(d);
    struct fake_kube *fk = fake_kube_start();
    char *crt = xasprintf("%s/server.crt", d), *key = xasprintf("%s/server.key", d),
         *ca = xasprintf("%s/ca.crt", d);
    struct fake_tls *t = fake_tls_start(fake_kube_port(fk), crt, key, ca);
    ASSERT_NOT_NULL(t);
    char *server = xasprintf("https://127.0.0.1:%d", fake_tls_port(t));
    char *cad = b64_file(d, "ca.crt"), *cd = b64_file(d, "client.crt"), *kd = b64_file(d, "client.key");
    char *doc = xasprintf(
        "{\"current-context\":\"t\",\"contexts\":[{\"name\":\"t\",\"context\":{\"cluster\":\"c\","
        "\"user\":\"u\"}}],\"clusters\":[{\"name\":\"c\",\"cluster\":{\"server\":\"%s\","
        "\"certificate-authority-data\":\"%s\"}}],\"users\":[{\"name\":\"u\",\"user\":"
        "{\"client-certificate-data\":\"%s\",\"client-key-data\":\"%s\"}}]}",
        server, cad, cd, kd);
    struct kubeconfig *cfg = NULL;
    struct tern_err te = {0};
    ASSERT_OK(kubeconfig_parse(doc, strlen(doc), NULL, d, &cfg, &te));
    struct kclient *c = client_for(cfg);
    struct kclient_err e;
    ASSERT_OK(kclient_list(c, &CMS, "default", NULL, NULL, &e));
    ASSERT_EQ_INT(fake_kube_count(fk, "GET", "/api/v1"), 1);
    kclient_free(c);
    /* without the client certificate the handshake is refused */
    char *nocert = xasprintf(
        "{\"current-context\":\"t\",\"contexts\":[{\"name\":\"t\",\"context\":{\"cluster\":\"c\"}}],"
        "\"clusters\":[{\"name\":\"c\",\"cluster\":{\"server\":\"%s\",\"certificate-authority-data\":\"%s\"}}]}",
        server, cad);
    struct kubeconfig *cfg2 = NULL;
    ASSERT_OK(kubeconfig_parse(nocert, strlen(nocert), NULL, d, &cfg2, &te));
    struct kclient_opts o = {.max_retries = -1};
    c = kclient_new(cfg2, &o);
    ASSERT_NE_INT(kclient_list(c, &CMS, "default", NULL, NULL, &e), 0);
    ASSERT_EQ_INT(fake_kube_count(fk, "GET", "/api/v1"), 1);
    kclient_free(c);
    /* with no CA the server certificate is not trusted ... */
    struct kubeconfig *cfg3 = kt_config(server, NULL);
    free(cfg3->cert_pem);
    free(cfg3->key_pem);
    cfg3->cert_pem = xstrdup(cfg->cert_pem);
    cfg3->cert_pem_len = cfg->cert_pem_len;
    cfg3->key_pem = xstrdup(cfg->key_pem);
    cfg3->key_pem_len = cfg->key_pem_len;
    c = kclient_new(cfg3, &o);
    ASSERT_NE_INT(kclient_list(c, &CMS, "default", NULL, NULL, &e), 0);
    /* ... unless insecure-skip-tls-verify */
    cfg3->insecure = true;
    ASSERT_OK(kclient_list(c, &CMS, "default", NULL, NULL, &e));
    kclient_free(c);
    kubeconfig_free(cfg);
    kubeconfig_free(cfg2);
    kubeconfig_free(cfg3);
    fake_tls_free(t);
    fake_kube_free(fk);
    free(nocert);
    free(doc);
    free(cad);
    free(cd);
    free(kd);
    free(server);
    free(crt);
    free(key);
    free(ca);
}

TEST(auth_in_cluster_files)
{
    const char *d = th_tmpdir();
    make_certs(d);
    struct fake_kube *fk = fake_kube_start();
    fake_kube_require_token(fk, "sa-1");
    char *crt = xasprintf("%s/server.crt", d), *key = xasprintf("%s/server.key", d);
    struct fake_tls *t = fake_tls_start(fake_kube_port(fk), crt, key, NULL);
    char port[16];
    snprintf(port, sizeof port, "%d", fake_tls_port(t));
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", port, 1);
    char *tok = xasprintf("%s/token", d), *ns = xasprintf("%s/namespace", d);
    FILE *f = fopen(tok, "w");
    fputs("sa-1\n", f);
    fclose(f);
    f = fopen(ns, "w");
    fputs("team-a", f);
    fclose(f);
    struct kubeconfig *cfg = NULL;
    struct tern_err te = {0};
    ASSERT_OK(kubeconfig_in_cluster(d, &cfg, &te)); /* ca.crt is the test CA */
    ASSERT_EQ_STR(cfg->namespace, "team-a");
    struct kclient *c = client_for(cfg);
    struct kclient_err e;
    ASSERT_OK(kclient_list(c, &CMS, cfg->namespace, NULL, NULL, &e));
    fake_kube_require_token(fk, "sa-2");
    f = fopen(tok, "w");
    fputs("sa-2\n", f);
    fclose(f);
    ASSERT_OK(kclient_list(c, &CMS, cfg->namespace, NULL, NULL, &e));
    kclient_free(c);
    kubeconfig_free(cfg);
    fake_tls_free(t);
    fake_kube_free(fk);
    free(tok);
    free(ns);
    free(crt);
    free(key);
}

TEST(watch_lines_cut_mid_event_are_reassembled)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct kclient *c = client_for(cfg);
    struct kclient_err e;
    fake_kube_split_watch(fk, true);
    const char *names[] = {"w1", "w2", "w3"};
    for (int i = 0; i < 3; i++) {
        cJSON *o = session(names[i], "a");
        fake_kube_upsert(fk, AGS_COLL, o);
        cJSON_Delete(o);
    }
    fake_kube_remove(fk, AGS_COLL, "w2");
    struct wctx w = {.stop_after = 2};
    struct kclient_list_opts wo = {.resource_version = "0", .timeout_seconds = 5};
    fake_kube_inject(fk, "GET", AGS_COLL, 429, NULL, 0, 1); /* a throttled watch is retried */
    ASSERT_EQ_INT(kclient_watch(c, &AGS, "team-a", &wo, collect, &w, &e), 99);
    ASSERT_EQ_STR(w.names[0], "w1"); /* synthetic ADDED for what exists */
    ASSERT_EQ_STR(w.names[1], "w3");
    /* from version 1: the full history, each line cut in two */
    struct wctx w2 = {.stop_after = 3};
    wo.resource_version = "1";
    ASSERT_EQ_INT(kclient_watch(c, &AGS, "team-a", &wo, collect, &w2, &e), 99);
    ASSERT_EQ_STR(w2.names[0], "w2");
    ASSERT_EQ_INT(w2.types[0], KWATCH_ADDED);
    ASSERT_EQ_STR(w2.names[2], "w2");
    ASSERT_EQ_INT(w2.types[2], KWATCH_DELETED);
    kclient_free(c);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST(watch_expired_and_oversized_lines)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct kclient *c = client_for(cfg);
    struct kclient_err e;
    cJSON *o = session("a", "a");
    fake_kube_upsert(fk, AGS_COLL, o);
    fake_kube_compact(fk);
    struct wctx w = {.stop_after = 100};
    struct kclient_list_opts wo = {.resource_version = "1", .timeout_seconds = 5};
    ASSERT_EQ_INT(kclient_watch(c, &AGS, "team-a", &wo, collect, &w, &e), TERN_ECOMPACTED);
    ASSERT_EQ_STR(e.reason, "Expired");
    ASSERT_EQ_INT(e.http_status, 410);
    ASSERT_EQ_INT(w.n, 0);
    /* a line over TERN_KUBE_MAX_WATCH_LINE is refused, not buffered */
    size_t n = TERN_KUBE_MAX_WATCH_LINE + 100;
    char *big = xmalloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\0';
    char rv[32];
    snprintf(rv, sizeof rv, "%lld", fake_kube_rv(fk) + 1);
    fake_kube_upsert(fk, AGS_COLL, o); /* floor: watches may start at this version */
    cJSON_AddItemToObject(o, "data", cJSON_CreateString(big));
    fake_kube_upsert(fk, AGS_COLL, o);
    wo.resource_version = rv;
    ASSERT_EQ_INT(kclient_watch(c, &AGS, "team-a", &wo, collect, &w, &e), TERN_ETOOLARGE);
    free(big);
    cJSON_Delete(o);
    kclient_free(c);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}
