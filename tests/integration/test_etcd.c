/* test_etcd.c - the etcd client against a real etcd (Debian's etcd-server). */
#include "harness.h"

#include "../support/etcd_fixture.h"
#include "base/mem.h"
#include "etcd/etcd.h"
#include "http/httpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static void put(struct etcd *c, const char *k, const char *v)
{
    struct etcd_put_resp pr;
    struct tern_err e = {0};
    int r =
        etcd_put(c, &(struct etcd_put_req){.key = k, .value = v, .value_len = strlen(v)}, &pr, &e);
    if (r)
        th_fail(__FILE__, __LINE__, "put %s: %s", k, e.msg);
    etcd_put_resp_done(&pr);
}

TEST(range_prefix_limit_count_keys_only_revision)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    put(c, "/p/a", "1");
    put(c, "/p/b", "2");
    put(c, "/p/c", "3");
    put(c, "/q", "x");
    int64_t rev;
    ASSERT_OK(etcd_revision(c, &rev, &e));
    put(c, "/p/a", "1b");

    struct etcd_range_resp rr;
    ASSERT_OK(etcd_range(
        c, &(struct etcd_range_req){.keys = {.key = "/p/", .prefix = true}, .limit = 2}, &rr, &e));
    ASSERT_EQ_INT(rr.nkvs, 2);
    ASSERT_EQ_INT(rr.count, 3);
    ASSERT_TRUE(rr.more);
    ASSERT_EQ_STR(rr.kvs[0].key, "/p/a");
    ASSERT_EQ_STR(rr.kvs[0].value, "1b");
    ASSERT_EQ_INT(rr.kvs[0].version, 2);
    ASSERT_EQ_INT(rr.kvs[0].mod_revision, rr.header.revision);
    etcd_range_resp_done(&rr);

    ASSERT_OK(etcd_range(
        c, &(struct etcd_range_req){.keys = {.key = "/p/", .prefix = true}, .revision = rev}, &rr,
        &e));
    ASSERT_EQ_INT(rr.nkvs, 3);
    ASSERT_EQ_STR(rr.kvs[0].value, "1");
    etcd_range_resp_done(&rr);

    ASSERT_OK(etcd_range(
        c, &(struct etcd_range_req){.keys = {.key = "/p/", .prefix = true}, .keys_only = true}, &rr,
        &e));
    ASSERT_EQ_INT(rr.nkvs, 3);
    ASSERT_EQ_STR(rr.kvs[2].key, "/p/c");
    ASSERT_EQ_INT(rr.kvs[2].value_len, 0);
    etcd_range_resp_done(&rr);

    ASSERT_OK(etcd_range(
        c, &(struct etcd_range_req){.keys = {.key = "", .prefix = true}, .count_only = true}, &rr,
        &e));
    ASSERT_EQ_INT(rr.nkvs, 0);
    ASSERT_EQ_INT(rr.count, 4);
    etcd_range_resp_done(&rr);

    ASSERT_OK(etcd_range(c, &(struct etcd_range_req){.keys = {.key = "/p/b", .from_key = true}},
                         &rr, &e));
    ASSERT_EQ_INT(rr.nkvs, 3); /* /p/b /p/c /q */
    etcd_range_resp_done(&rr);

    /* future revision */
    ASSERT_EQ_INT(etcd_range(c,
                             &(struct etcd_range_req){.keys = {.key = "/q"}, .revision = rev + 100},
                             &rr, &e),
                  TERN_EINVALID);

    struct etcd_kv *kv = NULL;
    ASSERT_EQ_INT(etcd_get(c, "/nope", &kv, NULL, &e), TERN_ENOTFOUND);
    ASSERT_OK(etcd_get(c, "/q", &kv, NULL, &e));
    ASSERT_EQ_STR(kv->value, "x");
    etcd_kv_free(kv);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST(txn_compares_and_branches)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    put(c, "/t/a", "v1");
    struct etcd_kv *kv = NULL;
    ASSERT_OK(etcd_get(c, "/t/a", &kv, NULL, &e));
    int64_t mod = kv->mod_revision, create = kv->create_revision;
    etcd_kv_free(kv);

    struct etcd_compare ok_cmps[] = {
        {.keys = {.key = "/t/a"}, .target = ETCD_CMP_MOD, .number = mod},
        {.keys = {.key = "/t/a"}, .target = ETCD_CMP_CREATE, .number = create},
        {.keys = {.key = "/t/a"}, .target = ETCD_CMP_VERSION, .number = 1},
        {.keys = {.key = "/t/a"}, .target = ETCD_CMP_VALUE, .value = "v1", .value_len = 2},
        {.keys = {.key = "/t/b"}, .target = ETCD_CMP_CREATE, .number = 0},
    };
    struct etcd_op succ[] = {
        {.type = ETCD_OP_PUT,
         .put = {.key = "/t/a", .value = "v2", .value_len = 2, .prev_kv = true}},
        {.type = ETCD_OP_PUT, .put = {.key = "/t/b", .value = "b", .value_len = 1}},
        {.type = ETCD_OP_RANGE, .range = {.keys = {.key = "/t/", .prefix = true}}},
    };
    struct etcd_op fail[] = {{.type = ETCD_OP_RANGE, .range = {.keys = {.key = "/t/a"}}}};
    struct etcd_txn_resp tr;
    ASSERT_OK(etcd_txn(c, &(struct etcd_txn_req){ok_cmps, 5, succ, 3, fail, 1}, &tr, &e));
    ASSERT_TRUE(tr.succeeded);
    ASSERT_EQ_INT(tr.nresponses, 3);
    ASSERT_EQ_INT(tr.responses[0].type, ETCD_OP_PUT);
    ASSERT_NOT_NULL(tr.responses[0].put.prev_kv);
    ASSERT_EQ_STR(tr.responses[0].put.prev_kv->value, "v1");
    ASSERT_EQ_INT(tr.responses[2].type, ETCD_OP_RANGE);
    ASSERT_EQ_INT(tr.responses[2].range.nkvs, 2);
    ASSERT_EQ_INT(tr.responses[2].range.kvs[0].mod_revision, tr.header.revision);
    etcd_txn_resp_done(&tr);

    /* the same compares now fail: the failure branch runs, succeeded absent */
    ASSERT_OK(etcd_txn(c, &(struct etcd_txn_req){ok_cmps, 5, succ, 3, fail, 1}, &tr, &e));
    ASSERT_FALSE(tr.succeeded);
    ASSERT_EQ_INT(tr.nresponses, 1);
    ASSERT_EQ_STR(tr.responses[0].range.kvs[0].value, "v2");
    etcd_txn_resp_done(&tr);
    ASSERT_EQ_INT(etcd_txn_must(c, &(struct etcd_txn_req){ok_cmps, 1, succ, 1, NULL, 0}, &tr, &e),
                  TERN_ETXNFAILED);
    etcd_txn_resp_done(&tr);

    /* delete in a txn, with prev kv */
    struct etcd_op del[] = {
        {.type = ETCD_OP_DELETE, .del = {.keys = {.key = "/t/", .prefix = true}, .prev_kv = true}}};
    ASSERT_OK(etcd_txn(c, &(struct etcd_txn_req){NULL, 0, del, 1, NULL, 0}, &tr, &e));
    ASSERT_TRUE(tr.succeeded);
    ASSERT_EQ_INT(tr.responses[0].del.deleted, 2);
    ASSERT_EQ_INT(tr.responses[0].del.nprev_kvs, 2);
    etcd_txn_resp_done(&tr);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST(too_large_and_compaction)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    size_t n = 2u << 20;
    char *big = xmalloc(n);
    memset(big, 'x', n);
    struct etcd_put_resp pr;
    ASSERT_EQ_INT(
        etcd_put(c, &(struct etcd_put_req){.key = "/big", .value = big, .value_len = n}, &pr, &e),
        TERN_ETOOLARGE);
    free(big);

    put(c, "/k", "1");
    put(c, "/k", "2");
    int64_t rev;
    ASSERT_OK(etcd_revision(c, &rev, &e));
    ASSERT_OK(etcd_compact(c, rev, true, &e));
    struct etcd_range_resp rr;
    ASSERT_EQ_INT(etcd_range(c,
                             &(struct etcd_range_req){.keys = {.key = "/k"}, .revision = rev - 1},
                             &rr, &e),
                  TERN_ECOMPACTED);
    ASSERT_EQ_INT(etcd_compact(c, rev, false, &e), TERN_ECOMPACTED);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST(leases_and_keeper)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    int64_t id = 0, ttl = 0;
    ASSERT_OK(etcd_lease_grant(c, 2, 0, &id, &ttl, &e));
    ASSERT_EQ_INT(ttl, 2);
    struct etcd_put_resp pr;
    ASSERT_OK(
        etcd_put(c, &(struct etcd_put_req){.key = "/l", .value = "x", .value_len = 1, .lease = id},
                 &pr, &e));
    etcd_put_resp_done(&pr);
    ASSERT_OK(etcd_lease_keepalive(c, id, &ttl, &e));
    ASSERT_EQ_INT(ttl, 2);
    int64_t left = 0, granted = 0;
    ASSERT_OK(etcd_lease_ttl(c, id, &left, &granted, &e));
    ASSERT_EQ_INT(granted, 2);

    /* a keeper keeps the 2 s lease alive well beyond its TTL */
    struct etcd_keeper *k = NULL;
    ASSERT_OK(etcd_keeper_start(c, id, 2, &k, &e));
    struct timespec ts = {3, 500000000};
    nanosleep(&ts, NULL); /* the property under test is time itself */
    ASSERT_FALSE(etcd_keeper_lost(k));
    struct etcd_kv *kv = NULL;
    ASSERT_OK(etcd_get(c, "/l", &kv, NULL, &e));
    ASSERT_EQ_INT(kv->lease, id);
    etcd_kv_free(kv);
    etcd_keeper_stop(k);

    ASSERT_OK(etcd_lease_revoke(c, id, &e));
    ASSERT_EQ_INT(etcd_get(c, "/l", &kv, NULL, &e), TERN_ENOTFOUND);
    ASSERT_EQ_INT(etcd_lease_keepalive(c, id, &ttl, &e), TERN_ENOTFOUND);
    ASSERT_EQ_INT(etcd_lease_ttl(c, id, &left, NULL, &e), TERN_ENOTFOUND);
    ASSERT_EQ_INT(etcd_lease_revoke(c, id, &e), TERN_ENOTFOUND);

    /* a keeper of a revoked lease reports it lost */
    ASSERT_OK(etcd_lease_grant(c, 5, 0, &id, NULL, &e));
    ASSERT_OK(etcd_keeper_start(c, id, 1, &k, &e));
    ASSERT_OK(etcd_lease_revoke(c, id, &e));
    for (int i = 0; i < 300 && !etcd_keeper_lost(k); i++) {
        struct timespec t = {0, 10000000};
        nanosleep(&t, NULL);
    }
    ASSERT_TRUE(etcd_keeper_lost(k));
    etcd_keeper_stop(k);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST_T(keeper_budget_outlasts_an_outage_longer_than_the_ttl, 60)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    int64_t id = 0;
    ASSERT_OK(etcd_lease_grant(c, 1, 0, &id, NULL, &e));
    struct etcd_keeper *k = NULL, *plain = NULL;
    ASSERT_OK(etcd_keeper_start_budget(c, id, 1, 20000, &k, &e));
    int64_t id2 = 0;
    ASSERT_OK(etcd_lease_grant(c, 1, 0, &id2, NULL, &e));
    ASSERT_OK(etcd_keeper_start(c, id2, 1, &plain, &e));
    /* etcd away for 2.5 TTLs: the plain keeper gives up after one TTL, the
     * budgeted one keeps trying, and etcd renews the lease on its return */
    ASSERT_OK(etcd_fixture_kill(&fx));
    for (int i = 0; i < 1000 && !etcd_keeper_lost(plain); i++) {
        struct timespec t = {0, 10000000};
        nanosleep(&t, NULL);
    }
    ASSERT_TRUE(etcd_keeper_lost(plain));
    struct timespec outage = {1, 500000000};
    nanosleep(&outage, NULL);
    ASSERT_FALSE(etcd_keeper_lost(k));
    if (etcd_fixture_restart(&fx, &e))
        th_fail(__FILE__, __LINE__, "etcd restart: %s", e.msg);
    int64_t left = 0;
    int r = -1;
    for (int i = 0; i < 500 && (r = etcd_lease_ttl(c, id, &left, NULL, &e)) != 0; i++) {
        struct timespec t = {0, 10000000};
        nanosleep(&t, NULL);
    }
    ASSERT_OK(r);
    struct timespec two = {2, 0};
    nanosleep(&two, NULL); /* two TTLs with etcd back: still refreshed */
    ASSERT_FALSE(etcd_keeper_lost(k));
    ASSERT_OK(etcd_lease_ttl(c, id, &left, NULL, &e));
    /* a lease that is gone is lost at once, budget or not */
    ASSERT_OK(etcd_lease_revoke(c, id, &e));
    for (int i = 0; i < 500 && !etcd_keeper_lost(k); i++) {
        struct timespec t = {0, 10000000};
        nanosleep(&t, NULL);
    }
    ASSERT_TRUE(etcd_keeper_lost(k));
    etcd_keeper_stop(k);
    etcd_keeper_stop(plain);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

/* ---- watch ---- */

struct wctx {
    pthread_mutex_t mu;
    int nput, ndel, nprogress;
    int64_t last_rev;
    int64_t prev_seen;
    int stop_after;
    char keys[64][32];
};

static int on_batch(void *ctx, const struct etcd_watch_batch *b)
{
    struct wctx *w = ctx;
    pthread_mutex_lock(&w->mu);
    if (b->progress)
        w->nprogress++;
    for (size_t i = 0; i < b->nevents; i++) {
        const struct etcd_event *ev = &b->events[i];
        if (ev->kv.mod_revision <= w->last_rev)
            th_fail(__FILE__, __LINE__, "revision went backwards or repeated: %lld <= %lld",
                    (long long)ev->kv.mod_revision, (long long)w->last_rev);
        w->last_rev = ev->kv.mod_revision;
        if (ev->type == ETCD_EVENT_PUT) {
            if (w->nput < 64)
                snprintf(w->keys[w->nput], sizeof w->keys[0], "%s", ev->kv.key);
            w->nput++;
        } else {
            w->ndel++;
        }
        if (ev->has_prev_kv)
            w->prev_seen++;
    }
    int stop = w->stop_after && w->nput + w->ndel >= w->stop_after;
    pthread_mutex_unlock(&w->mu);
    return stop ? 42 : 0;
}

TEST(watch_prefix_from_revision_prev_kv_and_stop)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    put(c, "/w/a", "1");
    int64_t rev;
    ASSERT_OK(etcd_revision(c, &rev, &e));
    put(c, "/w/a", "2");
    put(c, "/x", "ignored");
    put(c, "/w/b", "3");
    struct etcd_delete_resp dr;
    ASSERT_OK(etcd_delete(c, &(struct etcd_delete_req){.keys = {.key = "/w/a"}}, &dr, &e));
    ASSERT_EQ_INT(dr.deleted, 1);
    etcd_delete_resp_done(&dr);
    struct wctx w = {.mu = PTHREAD_MUTEX_INITIALIZER, .stop_after = 4};
    int r = etcd_watch(c,
                       &(struct etcd_watch_req){.keys = {.key = "/w/", .prefix = true},
                                                .start_revision = rev,
                                                .prev_kv = true},
                       on_batch, &w, NULL, NULL, &e);
    ASSERT_EQ_INT(r, 42);
    ASSERT_EQ_INT(w.nput, 3);
    ASSERT_EQ_INT(w.ndel, 1);
    ASSERT_EQ_STR(w.keys[0], "/w/a");
    ASSERT_EQ_STR(w.keys[2], "/w/b");
    ASSERT_EQ_INT(w.prev_seen, 2); /* the second put of /w/a and its delete */
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST(watch_compacted_start)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    put(c, "/w/a", "1");
    put(c, "/w/a", "2");
    int64_t rev;
    ASSERT_OK(etcd_revision(c, &rev, &e));
    ASSERT_OK(etcd_compact(c, rev, true, &e));
    struct wctx w = {.mu = PTHREAD_MUTEX_INITIALIZER};
    int64_t crev = 0;
    ASSERT_EQ_INT(etcd_watch(c,
                             &(struct etcd_watch_req){.keys = {.key = "/w/", .prefix = true},
                                                      .start_revision = 1},
                             on_batch, &w, NULL, &crev, &e),
                  TERN_ECOMPACTED);
    ASSERT_EQ_INT(crev, rev);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

struct wthread {
    struct etcd *c;
    struct wctx w;
    atomic_bool cancel;
    int64_t start;
    int rc;
    struct tern_err e;
};

static void *watch_main(void *arg)
{
    struct wthread *t = arg;
    t->rc = etcd_watch(t->c,
                       &(struct etcd_watch_req){.keys = {.key = "/w/", .prefix = true},
                                                .start_revision = t->start,
                                                .give_up_ms = 20000},
                       on_batch, &t->w, &t->cancel, NULL, &t->e);
    return NULL;
}

static int nput(struct wthread *t)
{
    pthread_mutex_lock(&t->w.mu);
    int n = t->w.nput;
    pthread_mutex_unlock(&t->w.mu);
    return n;
}

static void wait_nput(struct wthread *t, int n)
{
    for (int i = 0; i < 1000 && nput(t) < n; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_EQ_INT(nput(t), n);
}

TEST_T(watch_many_threads_cancel_and_reconnect_after_restart, 60)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    int64_t rev;
    ASSERT_OK(etcd_revision(c, &rev, &e));
    enum { N = 8 };
    struct wthread t[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].c = c;
        pthread_mutex_init(&t[i].w.mu, NULL);
        atomic_init(&t[i].cancel, false);
        t[i].start = rev + 1;
        ASSERT_OK(pthread_create(&th[i], NULL, watch_main, &t[i]));
    }
    put(c, "/w/1", "a");
    put(c, "/w/2", "b");
    for (int i = 0; i < N; i++)
        wait_nput(&t[i], 2);
    /* etcd dies and comes back: the watches resume without loss or repeat */
    etcd_fixture_kill(&fx);
    if (etcd_fixture_restart(&fx, &e))
        th_fail(__FILE__, __LINE__, "restart: %s", e.msg);
    put(c, "/w/3", "c");
    for (int i = 0; i < N; i++)
        wait_nput(&t[i], 3);
    for (int i = 0; i < N; i++)
        atomic_store(&t[i].cancel, true);
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        ASSERT_EQ_INT(t[i].rc, -ECANCELED);
        ASSERT_EQ_STR(t[i].w.keys[2], "/w/3");
    }
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST(failover_to_second_endpoint_and_unreachable)
{
    struct tern_err e = {0};
    if (etcd_fixture_start(&fx, th_tmpdir(), NULL, &e))
        th_fail(__FILE__, __LINE__, "etcd fixture: %s", e.msg);
    char dead[64];
    snprintf(dead, sizeof dead, "http://127.0.0.1:%d", etcd_fixture_free_port());
    const char *eps[] = {dead, fx.url};
    struct etcd *c = NULL;
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 2}, &c, &e));
    put(c, "/f", "1"); /* write never sent to the dead one: safe to fail over */
    struct etcd_kv *kv = NULL;
    ASSERT_OK(etcd_get(c, "/f", &kv, NULL, &e));
    etcd_kv_free(kv);
    etcd_fixture_kill(&fx);
    ASSERT_EQ_INT(etcd_get(c, "/f", &kv, NULL, &e), TERN_EUNREACHABLE);
    etcd_free(c);

    char **list = NULL;
    size_t n = 0;
    ASSERT_OK(etcd_endpoints_parse(" http://a:1, https://b:2 ,", &list, &n, &e));
    ASSERT_EQ_INT(n, 2);
    ASSERT_EQ_STR(list[1], "https://b:2");
    etcd_endpoints_free(list);
    ASSERT_EQ_INT(etcd_endpoints_parse("ftp://x", &list, &n, &e), TERN_EINVALID);
    ASSERT_EQ_INT(etcd_endpoints_parse("", &list, &n, &e), TERN_EINVALID);
}

static void raw_post(const char *path, const char *body, const char *auth_hdr)
{
    char url[160];
    snprintf(url, sizeof url, "%s%s", fx.url, path);
    const char *hdrs[] = {"Content-Type: application/json", auth_hdr, NULL};
    struct httpc *h = httpc_new();
    struct httpc_request req = {.method = "POST",
                                .url = url,
                                .headers = hdrs,
                                .body = body,
                                .body_len = strlen(body),
                                .timeout_ms = 5000};
    struct httpc_response resp;
    struct tern_err e = {0};
    ASSERT_OK(httpc_do(h, &req, &resp, &e));
    if (resp.status != 200)
        th_fail(__FILE__, __LINE__, "%s: HTTP %ld %s", path, resp.status, buf_str(&resp.body));
    httpc_response_done(&resp);
    httpc_free(h);
}

TEST(auth_username_password_token)
{
    struct etcd *c = start();
    etcd_free(c);
    raw_post("/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"pw\"}", NULL);
    raw_post("/v3/auth/role/add", "{\"name\":\"root\"}", NULL);
    raw_post("/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}", NULL);
    raw_post("/v3/auth/enable", "{}", NULL);
    const char *eps[] = {fx.url};
    struct tern_err e = {0};
    /* no credentials: refused */
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1}, &c, &e));
    struct etcd_kv *kv = NULL;
    ASSERT_EQ_INT(etcd_get(c, "/a", &kv, NULL, &e), TERN_EAUTH);
    etcd_free(c);
    /* wrong password */
    ASSERT_OK(etcd_new(
        &(struct etcd_config){
            .endpoints = eps, .nendpoints = 1, .username = "root", .password = "no"},
        &c, &e));
    ASSERT_EQ_INT(etcd_get(c, "/a", &kv, NULL, &e), TERN_EAUTH);
    etcd_free(c);
    /* right password: token header on every request, watches included */
    ASSERT_OK(etcd_new(
        &(struct etcd_config){
            .endpoints = eps, .nendpoints = 1, .username = "root", .password = "pw"},
        &c, &e));
    put(c, "/w/a", "1");
    ASSERT_OK(etcd_get(c, "/w/a", &kv, NULL, &e));
    ASSERT_EQ_STR(kv->value, "1");
    int64_t rev = kv->mod_revision;
    etcd_kv_free(kv);
    struct wctx w = {.mu = PTHREAD_MUTEX_INITIALIZER, .stop_after = 1};
    ASSERT_EQ_INT(etcd_watch(c,
                             &(struct etcd_watch_req){.keys = {.key = "/w/", .prefix = true},
                                                      .start_revision = rev},
                             on_batch, &w, NULL, NULL, &e),
                  42);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

struct churn {
    struct etcd *admin;
    atomic_bool stop;
    int changes;
};

static void *churn_main(void *arg)
{
    struct churn *ch = arg;
    char name[32];
    while (!atomic_load(&ch->stop)) {
        snprintf(name, sizeof name, "churn-%d", ch->changes % 8);
        struct tern_err e = {0};
        /* a burst as one new session makes (user, role, grant), then a pause */
        if (etcd_role_add(ch->admin, name, &e) == 0) {
            (void)etcd_role_grant(ch->admin, name, ETCD_PERM_READWRITE,
                                  &(struct etcd_keys){.key = "/x/", .prefix = true}, &e);
            (void)etcd_role_delete(ch->admin, name, &e);
        }
        ch->changes += 3;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Users and roles change while a user writes (the operator adds a user, a
 * role and a grant per new session): etcd refuses a request checked
 * against the older auth store ("revision of auth store is old", not
 * applied); the client tries it again instead of failing the caller. */
TEST_T(writes_while_the_auth_store_changes, 60)
{
    static const char *const bcrypt[] = {"--bcrypt-cost=4", NULL};
    struct tern_err e = {0};
    if (etcd_fixture_start(&fx, th_tmpdir(), &(struct etcd_fixture_opts){.extra_args = bcrypt},
                           &e))
        th_fail(__FILE__, __LINE__, "etcd fixture: %s", e.msg);
    raw_post("/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"pw\"}", NULL);
    raw_post("/v3/auth/role/add", "{\"name\":\"root\"}", NULL);
    raw_post("/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}", NULL);
    raw_post("/v3/auth/enable", "{}", NULL);
    const char *eps[] = {fx.url};
    struct etcd *c = NULL;
    struct churn ch = {0};
    ASSERT_OK(etcd_new(
        &(struct etcd_config){
            .endpoints = eps, .nendpoints = 1, .username = "root", .password = "pw"},
        &ch.admin, &e));
    ASSERT_OK(etcd_new(
        &(struct etcd_config){
            .endpoints = eps, .nendpoints = 1, .username = "root", .password = "pw"},
        &c, &e));
    pthread_t th;
    ASSERT_EQ_INT(pthread_create(&th, NULL, churn_main, &ch), 0);
    int failed = 0;
    char first[sizeof e.msg] = "";
    int i = 0;
    for (; i < 3000 && (i < 200 || ch.changes < 90); i++) {
        char k[32];
        snprintf(k, sizeof k, "/race/%d", i);
        struct etcd_put_resp pr;
        e.msg[0] = 0;
        if (etcd_put(c, &(struct etcd_put_req){.key = k, .value = "v", .value_len = 1}, &pr,
                     &e) == 0)
            etcd_put_resp_done(&pr);
        else if (failed++ == 0)
            snprintf(first, sizeof first, "%s", e.msg);
    }
    atomic_store(&ch.stop, true);
    pthread_join(th, NULL);
    printf("    %d writes during %d auth store changes, %d failed%s%s\n", i, ch.changes,
           failed, failed ? ": " : "", first);
    ASSERT_EQ_INT(ch.changes >= 90, 1);
    ASSERT_EQ_INT(failed, 0);
    etcd_free(ch.admin);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        th_fail(__FILE__, __LINE__, "open %s", path);
    char *b = xmalloc(65536);
    *len = fread(b, 1, 65535, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

/* https with client certificates (a throwaway CA made with openssl). */
TEST(tls_client_certificates)
{
    const char *d = th_tmpdir();
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "set -e; exec >/dev/null 2>&1; cd '%s'; K='-newkey ec -pkeyopt "
             "ec_paramgen_curve:prime256v1 -nodes';"
             "openssl req -x509 $K -keyout ca.key -out ca.crt -days 1 -subj /CN=test-ca;"
             "openssl req $K -keyout server.key -out server.csr -subj /CN=etcd;"
             "printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext;"
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out "
             "server.crt -days 1 -extfile san.ext;"
             "openssl req $K -keyout client.key -out client.csr -subj /CN=client;"
             "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out "
             "client.crt -days 1",
             d);
    if (system(cmd) != 0)
        th_fail(__FILE__, __LINE__, "openssl failed");
    char cert[600], key[600], ca[600], sub[600];
    snprintf(cert, sizeof cert, "%s/server.crt", d);
    snprintf(key, sizeof key, "%s/server.key", d);
    snprintf(ca, sizeof ca, "%s/ca.crt", d);
    snprintf(sub, sizeof sub, "%s/etcd", d);
    struct tern_err e = {0};
    struct etcd_fixture_opts o = {.cert_file = cert, .key_file = key, .trusted_ca_file = ca};
    if (etcd_fixture_start(&fx, sub, &o, &e))
        th_fail(__FILE__, __LINE__, "etcd fixture: %s", e.msg);
    char path[600];
    size_t clen, klen;
    snprintf(path, sizeof path, "%s/client.crt", d);
    char *ccert = slurp(path, &clen);
    snprintf(path, sizeof path, "%s/client.key", d);
    char *ckey = slurp(path, &klen);
    const char *eps[] = {fx.tls_url};
    struct etcd *c = NULL;
    /* without a client certificate: the handshake fails (unreachable) */
    struct httpc_tls t0 = {.ca_file = ca};
    ASSERT_OK(
        etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1, .tls = &t0}, &c, &e));
    struct etcd_kv *kv = NULL;
    int r = etcd_get(c, "/a", &kv, NULL, &e);
    ASSERT_TRUE(r == TERN_EUNREACHABLE || r == -EIO || r == TERN_EAUTH);
    etcd_free(c);
    struct httpc_tls t = {.ca_file = ca,
                          .cert_pem = ccert,
                          .cert_pem_len = clen,
                          .key_pem = ckey,
                          .key_pem_len = klen};
    ASSERT_OK(
        etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1, .tls = &t}, &c, &e));
    free(ccert);
    free(ckey); /* the client keeps its own copies */
    put(c, "/tls", "yes");
    ASSERT_OK(etcd_get(c, "/tls", &kv, NULL, &e));
    ASSERT_EQ_STR(kv->value, "yes");
    etcd_kv_free(kv);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

static int want_progress(void *ctx, const struct etcd_watch_batch *b)
{
    int *seen = ctx;
    if (b->progress && b->header.revision > 0)
        return ++*seen >= 2 ? 9 : 0;
    return 0;
}

/* Periodic progress notifications (kube's bookmarks) and event filters. */
TEST(watch_progress_notify_and_filters)
{
    struct tern_err e = {0};
    const char *args[] = {"--experimental-watch-progress-notify-interval=200ms", NULL};
    struct etcd_fixture_opts o = {.extra_args = args};
    if (etcd_fixture_start(&fx, th_tmpdir(), &o, &e))
        th_fail(__FILE__, __LINE__, "etcd fixture: %s", e.msg);
    const char *eps[] = {fx.url};
    struct etcd *c = NULL;
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1}, &c, &e));
    put(c, "/w/a", "1");
    int seen = 0;
    ASSERT_EQ_INT(etcd_watch(c,
                             &(struct etcd_watch_req){.keys = {.key = "/w/", .prefix = true},
                                                      .progress_notify = true},
                             want_progress, &seen, NULL, NULL, &e),
                  9);
    /* NOPUT: only the delete arrives */
    int64_t rev;
    ASSERT_OK(etcd_revision(c, &rev, &e));
    put(c, "/w/b", "2");
    struct etcd_delete_resp dr;
    ASSERT_OK(etcd_delete(c, &(struct etcd_delete_req){.keys = {.key = "/w/a"}}, &dr, &e));
    etcd_delete_resp_done(&dr);
    struct wctx w = {.mu = PTHREAD_MUTEX_INITIALIZER, .stop_after = 1};
    ASSERT_EQ_INT(etcd_watch(c,
                             &(struct etcd_watch_req){.keys = {.key = "/w/", .prefix = true},
                                                      .start_revision = rev + 1,
                                                      .no_put = true},
                             on_batch, &w, NULL, NULL, &e),
                  42);
    ASSERT_EQ_INT(w.nput, 0);
    ASSERT_EQ_INT(w.ndel, 1);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}
