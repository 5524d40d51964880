/* The Kubernetes client library (operator/src/kube/) against tern-dev
 * itself: an informer that survives a tern-dev restart (410 and relist), the
 * exec credential plugin path, and leader election between two candidates.
 * (tests/unit/test_kube_*.c cover the same against a scripted fake server.) */
#include "harness.h"

#include "base/mem.h"
#include "json/json.h"
#include "kube/informer.h"
#include "kube/kclient.h"
#include "kube/kubeconfig.h"
#include "kube/leader.h"
#include "../support/proc_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const struct kgvr cms = {"", "v1", "configmaps"};

struct dev {
    struct proc p;
    char dir[512];
    char kubeconfig[600];
};

static void dev_start(struct dev *d)
{
    if (!d->dir[0])
        snprintf(d->dir, sizeof d->dir, "%s/dev", th_tmpdir());
    char bin[600];
    snprintf(bin, sizeof bin, "%s/bin/tern-dev", proc_build_dir());
    char *const argv[] = {bin, "up", "--dir", d->dir, "--port", "0", NULL};
    setenv("TERN_DEV_KUBELET", "0", 1); /* the API alone is what is tested */
    char log[600];
    snprintf(log, sizeof log, "%s/tern-dev.log", th_tmpdir());
    struct tern_err err = {0};
    if (proc_start_server(&d->p, argv, "tern-dev ready kubeconfig=", log, 60000, &err))
        th_fail(__FILE__, __LINE__, "tern-dev: %s", err.msg);
    snprintf(d->kubeconfig, sizeof d->kubeconfig, "%s", d->p.addr);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Polls cond(ctx) until true or timeout_s (polling a condition, bounded). */
static bool wait_until(bool (*cond)(void *), void *ctx, double timeout_s)
{
    double end = now_s() + timeout_s;
    while (now_s() < end) {
        if (cond(ctx))
            return true;
        struct timespec pause = {0, 50 * 1000000L};
        nanosleep(&pause, NULL);
    }
    return cond(ctx);
}

static void create_cm(struct kclient *c, const char *name, double timeout_s)
{
    char *body = xasprintf("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":"
                           "{\"name\":\"%s\",\"namespace\":\"default\"},\"data\":{\"k\":\"v\"}}",
                           name);
    cJSON *obj = NULL;
    ASSERT_OK(json_parse(body, strlen(body), &obj, NULL));
    free(body);
    double end = now_s() + timeout_s;
    int r;
    struct kclient_err ke = {0};
    do { /* the API may still be coming back after a restart */
        r = kclient_create(c, &cms, "default", obj, NULL, &ke);
        if (r == 0 || now_s() > end)
            break;
        struct timespec pause = {0, 100 * 1000000L};
        nanosleep(&pause, NULL);
    } while (1);
    cJSON_Delete(obj);
    if (r)
        th_fail(__FILE__, __LINE__, "create %s: %s", name, ke.e.msg);
}

struct seen {
    struct informer *inf;
    const char *name;
};

static bool cached(void *ctx)
{
    struct seen *s = ctx;
    cJSON *o = informer_get(s->inf, "default", s->name);
    cJSON_Delete(o);
    return o != NULL;
}

TEST_T(informer_survives_a_terndev_restart, 180)
{
    struct dev d = {0};
    dev_start(&d);
    struct kubeconfig *kc = NULL;
    struct tern_err err = {0};
    if (kubeconfig_load_file(d.kubeconfig, NULL, &kc, &err))
        th_fail(__FILE__, __LINE__, "%s", err.msg);
    struct kclient *c = kclient_new(kc, NULL);
    struct informer_opts o = {.gvr = cms, .namespace = "default", .backoff_ms = 100,
                              .max_backoff_ms = 500};
    struct informer_handlers h = {0};
    struct informer *inf = informer_new(kc, &o, &h);
    ASSERT_OK(informer_start(inf));
    ASSERT_OK(informer_wait_synced(inf, 30000));
    create_cm(c, "before", 10);
    struct seen s1 = {inf, "before"};
    ASSERT_TRUE(wait_until(cached, &s1, 20));

    proc_stop(&d.p); /* SIGTERM: tern-dev and its etcd stop; the watch breaks */
    dev_start(&d);    /* same DIR: same data, same port if free */
    create_cm(c, "after", 60);
    struct seen s2 = {inf, "after"};
    ASSERT_TRUE(wait_until(cached, &s2, 60));
    ASSERT_TRUE(cached(&s1)); /* the relist kept what still exists */
    informer_free(inf);
    kclient_free(c);
    kubeconfig_free(kc);
    proc_stop(&d.p);
}

/* The bearer token tern-dev wrote into its kubeconfig. */
static char *token_of(const char *kubeconfig)
{
    FILE *f = fopen(kubeconfig, "r");
    ASSERT_NOT_NULL(f);
    char line[1024];
    char *tok = NULL;
    while (fgets(line, sizeof line, f)) {
        char *t = strstr(line, "token: ");
        if (t) {
            t += 7;
            t[strcspn(t, "\r\n")] = '\0';
            tok = xstrdup(t);
        }
    }
    fclose(f);
    ASSERT_NOT_NULL(tok);
    return tok;
}

/* A kubeconfig whose user is an exec plugin printing token. */
static char *exec_kubeconfig(const struct dev *d, const char *name, const char *token)
{
    char *script = xasprintf("%s/%s.sh", th_tmpdir(), name);
    FILE *f = fopen(script, "w");
    ASSERT_NOT_NULL(f);
    fprintf(f, "#!/bin/sh\n[ -n \"$KUBERNETES_EXEC_INFO\" ] || exit 3\n"
               "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
               "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}'\n", token);
    fclose(f);
    chmod(script, 0755);
    /* same cluster as tern-dev's kubeconfig, another user */
    FILE *in = fopen(d->kubeconfig, "r");
    ASSERT_NOT_NULL(in);
    char *path = xasprintf("%s/%s.kubeconfig", th_tmpdir(), name);
    FILE *out = fopen(path, "w");
    ASSERT_NOT_NULL(out);
    char line[8192];
    bool in_users = false;
    while (fgets(line, sizeof line, in)) {
        if (strncmp(line, "users:", 6) == 0) {
            in_users = true;
            fprintf(out, "users:\n- name: tern-dev\n  user:\n    exec:\n"
                         "      apiVersion: client.authentication.k8s.io/v1\n"
                         "      command: %s\n      interactiveMode: Never\n", script);
            continue;
        }
        if (in_users && (line[0] == ' ' || line[0] == '-'))
            continue;
        in_users = false;
        fputs(line, out);
    }
    fclose(in);
    fclose(out);
    free(script);
    return path;
}

TEST_T(exec_plugin_credentials_against_terndev, 120)
{
    struct dev d = {0};
    dev_start(&d);
    char *token = token_of(d.kubeconfig);
    char *good = exec_kubeconfig(&d, "good", token);
    char *bad = exec_kubeconfig(&d, "bad", "not-the-token");
    struct kubeconfig *kc = NULL;
    struct tern_err err = {0};
    if (kubeconfig_load_file(good, NULL, &kc, &err))
        th_fail(__FILE__, __LINE__, "%s", err.msg);
    struct kclient *c = kclient_new(kc, NULL);
    cJSON *list = NULL;
    struct kclient_err ke = {0};
    ASSERT_OK(kclient_list(c, &cms, "default", NULL, &list, &ke));
    cJSON_Delete(list);
    kclient_free(c);
    kubeconfig_free(kc);
    if (kubeconfig_load_file(bad, NULL, &kc, &err))
        th_fail(__FILE__, __LINE__, "%s", err.msg);
    c = kclient_new(kc, NULL);
    ASSERT_EQ_INT(kclient_list(c, &cms, "default", NULL, &list, &ke), TERN_EAUTH);
    ASSERT_EQ_INT(ke.http_status, 401);
    kclient_free(c);
    kubeconfig_free(kc);
    free(good);
    free(bad);
    free(token);
    proc_stop(&d.p);
}

struct pair {
    struct leader *a, *b;
};

static bool one_leads(void *ctx)
{
    struct pair *p = ctx;
    return leader_is_leader(p->a) != leader_is_leader(p->b);
}

static bool b_leads(void *ctx)
{
    struct pair *p = ctx;
    return leader_is_leader(p->b);
}

TEST_T(two_candidates_one_lease_on_terndev, 120)
{
    struct dev d = {0};
    dev_start(&d);
    struct kubeconfig *kc = NULL;
    struct tern_err err = {0};
    if (kubeconfig_load_file(d.kubeconfig, NULL, &kc, &err))
        th_fail(__FILE__, __LINE__, "%s", err.msg);
    struct leader_opts oa = {.namespace = "default", .name = "test-lease", .identity = "a",
                             .lease_ms = 3000, .renew_deadline_ms = 2000, .retry_ms = 300};
    struct leader_opts ob = oa;
    ob.identity = "b";
    int e = 0;
    struct pair p = {leader_new(kc, &oa, &e), NULL};
    ASSERT_NOT_NULL(p.a);
    ASSERT_OK(leader_start(p.a));
    p.b = leader_new(kc, &ob, &e);
    ASSERT_NOT_NULL(p.b);
    ASSERT_OK(leader_start(p.b));
    ASSERT_TRUE(wait_until(one_leads, &p, 20));
    if (leader_is_leader(p.b)) { /* make a the leader's name for the rest */
        struct leader *t = p.a;
        p.a = p.b;
        p.b = t;
    }
    /* the leader stays the only one for a while */
    for (int i = 0; i < 10; i++) {
        ASSERT_TRUE(one_leads(&p));
        struct timespec pause = {0, 200 * 1000000L};
        nanosleep(&pause, NULL);
    }
    leader_stop(p.a); /* releases the Lease */
    ASSERT_TRUE(wait_until(b_leads, &p, 20));
    leader_free(p.a);
    leader_stop(p.b);
    leader_free(p.b);
    kubeconfig_free(kc);
    proc_stop(&d.p);
}
