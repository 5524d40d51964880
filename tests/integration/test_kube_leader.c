/* Leader election on a coordination.k8s.io/v1 Lease, against the fake API
 * server: one leader among candidates, release on stop, takeover after a
 * crashed leader's lease runs out, observed time rather than clocks, and
 * stepping down when renewals fail. Short durations (lease 2 s). */
#include "harness.h"

#include "../support/kube/fake_kube.c"
#include "../support/kube/kube_test.h"

#include "base/mem.h"
#include "json/json.h"
#include "kube/kclient.h"
#include "kube/kubeconfig.h"
#include "kube/leader.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LEASE_PATH "/apis/coordination.k8s.io/v1/namespaces/tern-system/leases/tern-operator"
#define LEASE_COLL "/apis/coordination.k8s.io/v1/namespaces/tern-system/leases"

struct cand {
    atomic_int started, stopped, new_leader;
    char seen[64]; /* last holder reported by on_new_leader */
};

static void on_new_leader(void *ctx, const char *id)
{
    struct cand *c = ctx;
    snprintf(c->seen, sizeof c->seen, "%s", id);
    atomic_fetch_add(&c->new_leader, 1);
}

static void on_started(void *ctx)
{
    atomic_fetch_add(&((struct cand *)ctx)->started, 1);
}

static void on_stopped(void *ctx)
{
    atomic_fetch_add(&((struct cand *)ctx)->stopped, 1);
}

static struct leader *candidate(struct kubeconfig *cfg, const char *id, struct cand *c)
{
    struct leader_opts o = {.namespace = "tern-system", .name = "tern-operator", .identity = id,
                            .lease_ms = 2000, .renew_deadline_ms = 1500, .retry_ms = 200,
                            .on_started = on_started, .on_stopped = on_stopped,
                            .on_new_leader = on_new_leader, .ctx = c,
                            .client = {.max_retries = -1, .timeout_ms = 1000}};
    int err = 0;
    struct leader *l = leader_new(cfg, &o, &err);
    ASSERT_NOT_NULL(l);
    ASSERT_OK(leader_start(l));
    return l;
}

static char *lease_field(struct fake_kube *fk, const char *field)
{
    cJSON *l = fake_kube_object(fk, LEASE_PATH);
    if (!l)
        return xstrdup("");
    const cJSON *v = json_get(json_get(l, "spec"), field);
    char *s = cJSON_IsString(v) ? xstrdup(v->valuestring) : v ? json_print(v) : xstrdup("");
    cJSON_Delete(l);
    return s;
}

static bool holder_is(struct fake_kube *fk, const char *id)
{
    char *h = lease_field(fk, "holderIdentity");
    bool ok = strcmp(h, id) == 0;
    free(h);
    return ok;
}

TEST_T(two_candidates_exactly_one_leads_then_release_hands_over, 30)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct cand ca = {0}, cb = {0};
    struct leader *a = candidate(cfg, "op-a", &ca), *b = candidate(cfg, "op-b", &cb);
    WAIT_FOR(leader_is_leader(a) || leader_is_leader(b), 5000);
    /* for well over a lease duration, never two leaders and no flapping */
    long long end = now_ms() + 2500;
    while (now_ms() < end) {
        ASSERT_TRUE(leader_is_leader(a) != leader_is_leader(b));
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_EQ_INT(atomic_load(&ca.started) + atomic_load(&cb.started), 1);
    struct leader *lead = leader_is_leader(a) ? a : b, *other = lead == a ? b : a;
    const char *other_id = lead == a ? "op-b" : "op-a";
    struct cand *lc = lead == a ? &ca : &cb, *oc = lead == a ? &cb : &ca;
    WAIT_FOR(atomic_load(&oc->new_leader) >= 1, 3000);
    ASSERT_EQ_STR(oc->seen, lead == a ? "op-a" : "op-b");
    char *rt = lease_field(fk, "renewTime");
    /* MicroTime: 2006-01-02T15:04:05.000000Z */
    ASSERT_EQ_INT(strlen(rt), 27);
    ASSERT_EQ_INT(rt[19], '.');
    ASSERT_EQ_INT(rt[26], 'Z');
    free(rt);
    char *dur = lease_field(fk, "leaseDurationSeconds");
    ASSERT_EQ_STR(dur, "2");
    free(dur);
    /* stop releases: the other takes over well before the lease would expire */
    long long t0 = now_ms();
    leader_stop(lead);
    ASSERT_EQ_INT(atomic_load(&lc->stopped), 1);
    ASSERT_FALSE(leader_is_leader(lead));
    WAIT_FOR(leader_is_leader(other), 3000);
    ASSERT_CMP_INT(now_ms() - t0, <, 1500);
    ASSERT_TRUE(holder_is(fk, other_id));
    char *tr = lease_field(fk, "leaseTransitions");
    ASSERT_EQ_STR(tr, "1");
    free(tr);
    leader_free(a);
    leader_free(b);
    ASSERT_TRUE(holder_is(fk, "")); /* the second one released too */
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST_T(takeover_after_a_crashed_leader_waits_out_the_lease, 30)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct cand ca = {0}, cb = {0};
    struct leader *a = candidate(cfg, "op-a", &ca);
    WAIT_FOR(leader_is_leader(a), 5000);
    struct leader *b = candidate(cfg, "op-b", &cb);
    WAIT_FOR(fake_kube_count(fk, "GET", LEASE_PATH) >= 5, 5000); /* b is polling */
    long long t0 = now_ms();
    leader_abandon(a); /* no release: as if the process died */
    WAIT_FOR(leader_is_leader(b), 6000);
    long long took = now_ms() - t0;
    /* b observed the last renewal at most one retry period before the crash */
    ASSERT_CMP_INT(took, >=, 2000 - 300);
    ASSERT_TRUE(holder_is(fk, "op-b"));
    leader_free(a);
    leader_free(b);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST_T(lease_validity_uses_observed_time_not_clocks, 30)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    /* a holder whose renewTime is decades old by our clock: a clock-comparing
     * elector would grab it at once; we must wait a full lease after seeing it */
    cJSON *lease = NULL;
    const char *doc = "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\","
                      "\"metadata\":{\"name\":\"tern-operator\"},\"spec\":{\"holderIdentity\":\"ghost\","
                      "\"leaseDurationSeconds\":2,\"acquireTime\":\"1970-01-01T00:00:00.000000Z\","
                      "\"renewTime\":\"1970-01-01T00:00:00.000000Z\",\"leaseTransitions\":4}}";
    ASSERT_OK(json_parse(doc, strlen(doc), &lease, NULL));
    fake_kube_upsert(fk, LEASE_COLL, lease);
    struct cand ca = {0};
    long long t0 = now_ms();
    struct leader *a = candidate(cfg, "op-a", &ca);
    WAIT_FOR(leader_is_leader(a), 6000);
    ASSERT_CMP_INT(now_ms() - t0, >=, 1900);
    char *tr = lease_field(fk, "leaseTransitions");
    ASSERT_EQ_STR(tr, "5");
    free(tr);
    leader_free(a);
    cJSON_Delete(lease);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST_T(leader_steps_down_when_it_cannot_renew, 30)
{
    struct fake_kube *fk = fake_kube_start();
    struct kubeconfig *cfg = kt_config(fake_kube_url(fk), NULL);
    struct cand ca = {0};
    struct leader *a = candidate(cfg, "op-a", &ca);
    WAIT_FOR(leader_is_leader(a), 5000);
    long long t0 = now_ms();
    fake_kube_inject(fk, "GET", LEASE_PATH, 503, NULL, -1, 1000000);
    WAIT_FOR(atomic_load(&ca.stopped) == 1, 5000);
    long long took = now_ms() - t0;
    ASSERT_CMP_INT(took, >=, 1200); /* renew deadline 1.5 s after the last success */
    ASSERT_CMP_INT(took, <, 3000);
    ASSERT_FALSE(leader_is_leader(a));
    leader_free(a);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
}

TEST(leader_rejects_bad_durations)
{
    struct leader_opts o = {.namespace = "n", .name = "l", .identity = "i", .lease_ms = 1000,
                            .renew_deadline_ms = 2000, .retry_ms = 100};
    int err = 0;
    ASSERT_NULL(leader_new(NULL, &o, &err));
    ASSERT_EQ_INT(err, -EINVAL);
    o.lease_ms = 15000;
    o.identity = "";
    ASSERT_NULL(leader_new(NULL, &o, &err));
}
