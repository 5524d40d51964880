/* bench/journal - journal costs against etcd's own, on one throwaway etcd.
 *
 *   (a) median latency: journal append vs a bare etcd txn of the same shape
 *       (create-if-absent compare + summary compare, event put + summary
 *       put) built and sent by this program with httpc only, plus a raw
 *       single-key put for reference;
 *   (b) replay of 1,000 and 10,000 events vs a bare paged range read of the
 *       same keys (same page size); resume of a 10,000-event session from
 *       its snapshot plus a 20-event tail (open + replay);
 *   (c) fork copy of 10,000 events (journal_copy_until).
 * Prints figures only; asserts nothing. Usage: build/bench/journal [N]
 * (N = appends per kind in (a), default 300).
 */
#include "../../tests/support/etcd_fixture.h"
#include "base/base64.h"
#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "etcd/etcd.h"
#include "http/httpc.h"
#include "journal/journal.h"
#include "json/json.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double pct(double *v, size_t n, double p) /* v sorted */
{
    size_t i = (size_t)(p * (double)(n - 1));
    return v[i];
}

static void die(const char *what, int r, const struct tern_err *e)
{
    fprintf(stderr, "bench/journal: %s: %d %s\n", what, r, e ? e->msg : "");
    exit(1);
}

/* A tool-call-like payload of about 300 bytes. */
static cJSON *payload(int i)
{
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "name", "exec_command");
    json_add_string(d, "callId", "call_7f3c9a2b1e");
    cJSON *a = cJSON_AddObjectToObject(d, "arguments");
    json_add_string(a, "cmd", "cd working && make -j2 test 2>&1 | tail -n 50; echo exit=$?");
    json_add_int64(a, "timeoutMs", 120000);
    json_add_int64(d, "i", i);
    json_add_string(d, "note", "benchmark payload of a typical size for a tool call event......");
    return d;
}

/* ---- bare etcd operations, built by hand and sent with httpc ---- */

struct bare {
    struct httpc *h;
    char url_txn[128], url_put[128], url_range[128];
};

static int bare_post(struct bare *b, const char *url, const char *body, cJSON **ret)
{
    const char *hdrs[] = {"Content-Type: application/json", NULL};
    struct httpc_request req = {.method = "POST",
                                .url = url,
                                .headers = hdrs,
                                .body = body,
                                .body_len = strlen(body),
                                .timeout_ms = 10000,
                                .max_body = 256u << 20};
    struct httpc_response resp;
    int r = httpc_do(b->h, &req, &resp, NULL);
    if (!r && resp.status != 200)
        r = -1;
    if (!r && ret)
        r = json_parse(resp.body.data, resp.body.len, ret, NULL);
    httpc_response_done(&resp);
    return r;
}

static int64_t header_rev(const cJSON *j)
{
    int64_t rev = 0;
    json_get_int64(json_get(j, "header"), "header", "revision", JSON_OPTIONAL, &rev, NULL);
    return rev;
}

/* One txn shaped like an append: returns the new revision, or -1. */
static int64_t bare_txn(struct bare *b, const char *evk, const char *ev, const char *sumk,
                        const char *sum, int64_t seen)
{
    char *k1 = base64_encode(evk, strlen(evk)), *v1 = base64_encode(ev, strlen(ev));
    char *k2 = base64_encode(sumk, strlen(sumk)), *v2 = base64_encode(sum, strlen(sum));
    struct buf body;
    buf_init(&body, 1u << 20);
    buf_printf(
        &body,
        "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_"
        "revision\":\"0\"},"
        "{\"key\":\"%s\",\"target\":\"MOD\",\"result\":\"EQUAL\",\"mod_revision\":\"%lld\"}],"
        "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}},"
        "{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}]}",
        k1, k2, (long long)seen, k1, v1, k2, v2);
    cJSON *j = NULL;
    int64_t rev = -1;
    if (bare_post(b, b->url_txn, buf_str(&body), &j) == 0 && cJSON_IsTrue(json_get(j, "succeeded")))
        rev = header_rev(j);
    cJSON_Delete(j);
    buf_done(&body);
    free(k1);
    free(v1);
    free(k2);
    free(v2);
    return rev;
}

static int bare_put(struct bare *b, const char *key, const char *val)
{
    char *k = base64_encode(key, strlen(key)), *v = base64_encode(val, strlen(val));
    char *body = xasprintf("{\"key\":\"%s\",\"value\":\"%s\"}", k, v);
    int r = bare_post(b, b->url_put, body, NULL);
    free(body);
    free(k);
    free(v);
    return r;
}

/* A paged range read of a journal's event keys with the same requests the
 * journal sends (key-bounded pages of `page` seqs), decoding only what any
 * reader must (the gateway JSON and base64 of keys and values). Returns
 * kvs read. */
static long bare_range(struct bare *b, const char *prefix, int page)
{
    long total = 0;
    for (unsigned long long next = 1;; next += (unsigned long long)page) {
        char start[160], end[160];
        snprintf(start, sizeof start, "%sev/%016llx", prefix, next);
        snprintf(end, sizeof end, "%sev/%016llx", prefix, next + (unsigned long long)page);
        char *k = base64_encode(start, strlen(start)), *e = base64_encode(end, strlen(end));
        char *body =
            xasprintf("{\"key\":\"%s\",\"range_end\":\"%s\",\"limit\":\"%d\"}", k, e, page);
        cJSON *j = NULL;
        int r = bare_post(b, b->url_range, body, &j);
        free(k);
        free(e);
        free(body);
        if (r)
            die("bare range", r, NULL);
        const cJSON *kvs = json_get(j, "kvs"), *it;
        long n = 0;
        cJSON_ArrayForEach(it, kvs)
        {
            const cJSON *ki = json_get(it, "key"), *vi = json_get(it, "value");
            unsigned char *kd = NULL, *vd = NULL;
            size_t kn, vn;
            if (base64_decode(ki->valuestring, strlen(ki->valuestring), &kd, &kn) ||
                base64_decode(vi->valuestring, strlen(vi->valuestring), &vd, &vn))
                die("bare range base64", -1, NULL);
            free(kd);
            free(vd);
            n++;
        }
        cJSON_Delete(j);
        total += n;
        if (n < page)
            break;
    }
    return total;
}

/* Fills a journal with n events quickly (100 puts per txn) and its sum. */
static void fill(struct etcd *c, const char *uid, int n)
{
    char *p = journal_prefix(uid);
    struct journal_summary s;
    journal_summary_init(&s);
    struct tern_err e = {0};
    for (int base = 0; base < n; base += 100) {
        struct etcd_op ops[101];
        char *keys[101], *vals[101];
        int m = 0;
        for (int i = base; i < n && i < base + 100; i++, m++) {
            cJSON *d = payload(i);
            struct journal_event ev = {.seq = (uint64_t)i + 1,
                                       .type = i % 10 ? JOURNAL_EV_TOOL_CALL
                                                      : JOURNAL_EV_MODEL_RESPONSE,
                                       .time = (char *)"2026-11-30T00:00:00.000000000Z",
                                       .turn = 1 + i / 10,
                                       .data = d};
            ev.type_name = (char *)journal_type_name(ev.type);
            journal_summary_apply(&s, &ev);
            keys[m] = xasprintf("%sev/%016llx", p, (unsigned long long)ev.seq);
            vals[m] = journal_event_encode(&ev);
            ops[m] = (struct etcd_op){
                .type = ETCD_OP_PUT,
                .put = {.key = keys[m], .value = vals[m], .value_len = strlen(vals[m])}};
            cJSON_Delete(d);
        }
        cJSON *sj = journal_summary_to_json(&s);
        keys[m] = xasprintf("%ssum", p);
        vals[m] = json_print(sj);
        cJSON_Delete(sj);
        ops[m] = (struct etcd_op){
            .type = ETCD_OP_PUT,
            .put = {.key = keys[m], .value = vals[m], .value_len = strlen(vals[m])}};
        struct etcd_txn_resp tr;
        int r = etcd_txn(c, &(struct etcd_txn_req){NULL, 0, ops, (size_t)m + 1, NULL, 0}, &tr, &e);
        if (r)
            die("fill", r, &e);
        etcd_txn_resp_done(&tr);
        for (int i = 0; i <= m; i++) {
            free(keys[i]);
            free(vals[i]);
        }
    }
    journal_summary_done(&s);
    free(p);
}

static int count_ev(void *ctx, const struct journal_event *ev)
{
    (void)ev;
    (*(long *)ctx)++;
    return 0;
}

static void bench_replay(struct etcd *c, struct bare *b, const char *uid, int n)
{
    enum { REPS = 11 };
    double tj[REPS], tb[REPS], cj[REPS], cb[REPS];
    struct tern_err e = {0};
    struct journal *j = NULL;
    int r = journal_open(c, uid, NULL, &j, &e);
    if (r)
        die("open", r, &e);
    char *p = journal_prefix(uid);
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = now_ms(), c0 = cpu_ms();
        long cnt = 0;
        struct journal_summary s;
        r = journal_replay(j, 1, count_ev, &cnt, &s, &e);
        if (r || cnt != n)
            die("replay", r, &e);
        journal_summary_done(&s);
        double t1 = now_ms(), c1 = cpu_ms();
        long bc = bare_range(b, p, 1000);
        double t2 = now_ms(), c2 = cpu_ms();
        cj[rep] = c1 - c0;
        cb[rep] = c2 - c1;
        if (bc != n)
            die("bare range count", (int)bc, NULL);
        tj[rep] = t1 - t0;
        tb[rep] = t2 - t1;
    }
    double mj = median(tj, REPS), mb = median(tb, REPS);
    double mcj = median(cj, REPS), mcb = median(cb, REPS);
    printf("replay %5d events:  journal %8.2f ms   bare range %8.2f ms   ratio %.2fx   (median of "
           "%d)\n"
           "                     client CPU: journal %.2f us/event, bare %.2f us/event\n",
           n, mj, mb, mj / mb, REPS, mcj * 1000 / n, mcb * 1000 / n);
    free(p);
    journal_free(j);
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(int argc, char **argv)
{
    int n = 300;
    int64_t v;
    if (argc > 1 && num_parse_range(argv[1], 10, 100000, &v) == 0)
        n = (int)v;
    char dir[] = "/tmp/tern-bench-journal-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp", -1, NULL);
    struct etcd_fixture fx;
    struct tern_err e = {0};
    int r = etcd_fixture_start(&fx, dir, NULL, &e);
    if (r)
        die("etcd", r, &e);
    const char *eps[] = {fx.url};
    struct etcd *c = NULL;
    etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1}, &c, &e);
    struct bare b = {.h = httpc_new()};
    snprintf(b.url_txn, sizeof b.url_txn, "%s/v3/kv/txn", fx.url);
    snprintf(b.url_put, sizeof b.url_put, "%s/v3/kv/put", fx.url);
    snprintf(b.url_range, sizeof b.url_range, "%s/v3/kv/range", fx.url);
    printf("bench/journal: etcd %s (data in %s), %d samples per kind\n", fx.url, dir, n);

    /* (a) append latency, interleaved so drift hits all three alike */
    struct journal *j = NULL;
    if ((r = journal_open(c, "bench-a", NULL, &j, &e)))
        die("open", r, &e);
    double *ta = xcalloc((size_t)n, sizeof *ta), *tt = xcalloc((size_t)n, sizeof *tt),
           *tp = xcalloc((size_t)n, sizeof *tp);
    int64_t seen = 0;
    for (int i = 0; i < n + 20; i++) {
        int k = i - 20; /* 20 warm-up rounds */
        cJSON *d = payload(i);
        double t0 = now_ms();
        r = journal_append(
            j, &(struct journal_append_req){.type = JOURNAL_EV_TOOL_CALL, .turn = 1, .data = d},
            NULL, &e);
        double t1 = now_ms();
        if (r)
            die("append", r, &e);
        /* the bare txn: an event and a summary of the same sizes */
        struct journal_event ev = {.seq = (uint64_t)i + 1,
                                   .type = JOURNAL_EV_TOOL_CALL,
                                   .type_name = (char *)"tool_call",
                                   .time = (char *)"2026-11-30T00:00:00.000000000Z",
                                   .turn = 1,
                                   .data = d};
        char *evv = journal_event_encode(&ev);
        cJSON *sj = journal_summary_to_json(journal_summary(j));
        char *sumv = json_print(sj);
        cJSON_Delete(sj);
        char evk[80];
        snprintf(evk, sizeof evk, "/tern/v1/s/bench-b/ev/%016llx", (unsigned long long)i + 1);
        double t2 = now_ms();
        seen = bare_txn(&b, evk, evv, "/tern/v1/s/bench-b/sum", sumv, seen);
        double t3 = now_ms();
        if (seen < 0)
            die("bare txn", -1, NULL);
        double t4 = now_ms();
        if (bare_put(&b, "/bench/raw", evv))
            die("raw put", -1, NULL);
        double t5 = now_ms();
        free(evv);
        free(sumv);
        cJSON_Delete(d);
        if (k >= 0) {
            ta[k] = t1 - t0;
            tt[k] = t3 - t2;
            tp[k] = t5 - t4;
        }
    }
    double ma = median(ta, (size_t)n), mt = median(tt, (size_t)n), mp = median(tp, (size_t)n);
    printf("(a) append latency, median (p90) over %d:\n", n);
    printf("    journal append   %7.3f ms (%7.3f)\n", ma, pct(ta, (size_t)n, 0.9));
    printf("    bare etcd txn    %7.3f ms (%7.3f)   journal/bare = %.2fx\n", mt,
           pct(tt, (size_t)n, 0.9), ma / mt);
    printf("    raw single put   %7.3f ms (%7.3f)   bare txn/raw put = %.2fx\n", mp,
           pct(tp, (size_t)n, 0.9), mt / mp);
    journal_free(j);
    free(ta);
    free(tt);
    free(tp);

    /* (b) replay vs bare range; resume from snapshot */
    printf("(b) replay (page 1000 events):\n");
    fill(c, "bench-r1k", 1000);
    fill(c, "bench-r10k", 10000);
    bench_replay(c, &b, "bench-r1k", 1000);
    bench_replay(c, &b, "bench-r10k", 10000);

    fill(c, "bench-snap", 10000);
    if ((r = journal_open(c, "bench-snap", NULL, &j, &e)))
        die("open", r, &e);
    cJSON *state = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(state, "messages");
    for (int i = 0; i < 40; i++)
        cJSON_AddItemToArray(msgs, payload(i));
    if ((r = journal_compact(j, state, true, NULL, &e)))
        die("compact", r, &e);
    cJSON_Delete(state);
    for (int i = 0; i < 20; i++) {
        cJSON *d = payload(i);
        if ((r = journal_append(j,
                                &(struct journal_append_req){
                                    .type = JOURNAL_EV_TOOL_RESULT, .turn = 1001, .data = d},
                                NULL, &e)))
            die("append", r, &e);
        cJSON_Delete(d);
    }
    journal_free(j);
    double tr[7];
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now_ms();
        struct journal *k = NULL;
        long cnt = 0;
        struct journal_summary s;
        if ((r = journal_open(c, "bench-snap", NULL, &k, &e)) ||
            (r = journal_replay(k, JOURNAL_FROM_SNAPSHOT, count_ev, &cnt, &s, &e)))
            die("resume", r, &e);
        tr[rep] = now_ms() - t0;
        if (cnt != 21 || s.last_seq != 10021)
            die("resume count", (int)cnt, NULL);
        journal_summary_done(&s);
        journal_free(k);
    }
    printf("    resume 10,000-event session from snapshot + 20-event tail (open + replay): %.2f ms "
           "(median of 7)\n",
           median(tr, 7));

    /* (c) fork copy */
    double t0 = now_ms();
    uint64_t copied = 0;
    if ((r = journal_copy_until(c, "bench-r10k", "bench-fork", 10000, &copied, &e)))
        die("copy", r, &e);
    double t1 = now_ms();
    printf("(c) fork copy of %llu events: %.1f ms (%.1f us/event)\n", (unsigned long long)copied,
           t1 - t0, (t1 - t0) * 1000 / (double)copied);

    httpc_free(b.h);
    etcd_free(c);
    etcd_fixture_stop(&fx);
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
