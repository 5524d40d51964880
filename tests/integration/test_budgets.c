/* Integration tests: team budgets against a real etcd (budget/bstore) and
 * through tern-runner processes (standalone mode, with tern-sandboxd and
 * tern-fakellm): twenty runners racing one budget that allows a few calls
 * (what was spent never passes the limit, and the counters equal the sum
 * of the journals), a runner killed between reserving and settling, and
 * window rollover with the test clock. */
#include "harness.h"

#include "../support/etcd_fixture.h"
#include "../support/proc_fixture.h"

#include "base/buf.h"
#include "base/mem.h"
#include "budget/bstore.h"
#include "etcd/etcd.h"
#include "journal/journal.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TOKEN "test-token-0123456789"
#define NS "team-a"

struct env {
    struct etcd_fixture etcd;
    struct proc sbx, llm;
    struct etcd *c;
    char dir[256], ws[300], token[300];
};

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        th_fail(__FILE__, __LINE__, "open %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static void etcd_only(struct env *e)
{
    struct tern_err err = {0};
    memset(e, 0, sizeof *e);
    snprintf(e->dir, sizeof e->dir, "%s", th_tmpdir());
    char etcd_dir[300];
    snprintf(etcd_dir, sizeof etcd_dir, "%s/etcd", e->dir);
    if (etcd_fixture_start(&e->etcd, etcd_dir, NULL, &err))
        th_fail(__FILE__, __LINE__, "etcd: %s", err.msg);
    const char *eps[] = {e->etcd.url};
    struct etcd_config ec = {.endpoints = eps, .nendpoints = 1};
    if (etcd_new(&ec, &e->c, &err))
        th_fail(__FILE__, __LINE__, "etcd client: %s", err.msg);
}

/* etcd, one sandboxd and one scripted model for every runner */
static void env_start(struct env *e, const char *script)
{
    struct tern_err err = {0};
    etcd_only(e);
    snprintf(e->ws, sizeof e->ws, "%s/ws", e->dir);
    snprintf(e->token, sizeof e->token, "%s/token", e->dir);
    mkdir(e->ws, 0755);
    write_file(e->token, TOKEN "\n");
    char bin[300], log[300], script_path[300];
    snprintf(bin, sizeof bin, "%s/bin/tern-sandboxd", proc_build_dir());
    snprintf(log, sizeof log, "%s/sandboxd.log", e->dir);
    char *sargv[] = {bin, "--listen", "127.0.0.1:0", "--token-file", e->token, "--workspace",
                     e->ws, "--log-level", "warn", "--max-execs", "32", NULL};
    if (proc_start_server(&e->sbx, sargv, "ready addr=", log, 10000, &err))
        th_fail(__FILE__, __LINE__, "sandboxd: %s", err.msg);
    snprintf(script_path, sizeof script_path, "%s/script.json", e->dir);
    write_file(script_path, script);
    snprintf(bin, sizeof bin, "%s/bin/tern-fakellm", proc_build_dir());
    snprintf(log, sizeof log, "%s/fakellm.log", e->dir);
    char *fargv[] = {bin, "--script", script_path, "--listen", "127.0.0.1:0", NULL};
    if (proc_start_server(&e->llm, fargv, "tern-fakellm listening ", log, 10000, &err))
        th_fail(__FILE__, __LINE__, "fakellm: %s", err.msg);
}

static void env_stop(struct env *e)
{
    proc_stop(&e->llm);
    proc_stop(&e->sbx);
    etcd_free(e->c);
    etcd_fixture_stop(&e->etcd);
}

/* Mirrors an AgentBudget into etcd as the operator does. */
static void put_budget(struct env *e, const char *name, const char *spec)
{
    char *s = xasprintf("{\"metadata\":{\"namespace\":\"" NS "\",\"name\":\"%s\",\"uid\":\"b-%s\","
                        "\"generation\":1},\"spec\":%s}",
                        name, name, spec);
    cJSON *j = NULL;
    struct bspec b;
    struct tern_err err = {0};
    if (json_parse(s, strlen(s), &j, &err) || bspec_parse(j, &b, &err) ||
        bstore_put_mirror(e->c, &b, NULL, &err))
        th_fail(__FILE__, __LINE__, "budget %s: %s", name, err.msg);
    bspec_done(&b);
    cJSON_Delete(j);
    free(s);
}

static struct ledger_counters counters(struct env *e, const char *name, const char *window)
{
    char *key = bstore_key_window(NS, name, window);
    struct etcd_kv *kv = NULL;
    struct ledger_counters c = {0};
    struct tern_err err = {0};
    int rc = etcd_get(e->c, key, &kv, NULL, &err);
    if (rc == 0 && ledger_counters_parse(kv->value, kv->value_len, &c, &err))
        th_fail(__FILE__, __LINE__, "counters %s: %s", key, err.msg);
    if (rc && rc != TERN_ENOTFOUND)
        th_fail(__FILE__, __LINE__, "counters %s: %s", key, err.msg);
    etcd_kv_free(kv);
    free(key);
    return c;
}

static struct tzwin_window window_now(const char *zone, enum tzwin_period p, int64_t offset)
{
    struct tzwin_zone z;
    struct tzwin_window w;
    if (tzwin_load(NULL, zone, &z, NULL) || tzwin_window(&z, p, time(NULL) + offset, &w))
        th_fail(__FILE__, __LINE__, "window of %s", zone);
    tzwin_zone_done(&z);
    return w;
}

static size_t open_records(struct env *e, const char *uid)
{
    uint64_t *ids = NULL;
    size_t n = 0;
    struct tern_err err = {0};
    if (bstore_open_reservations(e->c, NS, uid, &ids, &n, &err))
        th_fail(__FILE__, __LINE__, "records: %s", err.msg);
    free(ids);
    return n;
}

/* ---- runners ---------------------------------------------------------------- */

static void write_spec(struct env *e, const char *uid, const char *labels)
{
    char path[400];
    snprintf(path, sizeof path, "%s/spec-%s.json", e->dir, uid);
    char *s = xasprintf("{\"metadata\":{\"uid\":\"%s\",\"labels\":%s},\"spec\":{\"objective\":"
                        "\"Say done.\",\"model\":{\"name\":\"fake-model\"},\"permissions\":"
                        "{\"tools\":[\"list_files\"]}}}",
                        uid, labels ? labels : "{}");
    write_file(path, s);
    free(s);
}

static void start_runner(struct env *e, struct proc *p, const char *uid, int turn,
                         const char *const *extra)
{
    char bin[300], log[400];
    snprintf(bin, sizeof bin, "%s/bin/tern-runner", proc_build_dir());
    snprintf(log, sizeof log, "%s/runner-%s.log", e->dir, uid);
    char *envv[40];
    size_t n = 0;
    envv[n++] = xasprintf("PATH=%s", getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    envv[n++] = xstrdup("TERN_NAMESPACE=" NS);
    envv[n++] = xasprintf("TERN_SESSION=s-%s", uid);
    envv[n++] = xasprintf("TERN_SESSION_UID=%s", uid);
    envv[n++] = xasprintf("TERN_TURN=%d", turn);
    envv[n++] = xasprintf("TERN_ETCD_ENDPOINTS=%s", e->etcd.url);
    envv[n++] = xasprintf("TERN_SANDBOX_TOKEN_FILE=%s", e->token);
    envv[n++] = xasprintf("TERN_SESSION_SPEC_FILE=%s/spec-%s.json", e->dir, uid);
    envv[n++] = xasprintf("TERN_SANDBOX_ADDR=%s", e->sbx.addr);
    envv[n++] = xasprintf("OPENAI_BASE_URL=http://%s/v1", e->llm.addr);
    envv[n++] = xstrdup("OPENAI_API_KEY=sk-test");
    envv[n++] = xstrdup("TERN_PRICES_FILE=examples/model-prices.json");
    envv[n++] = xstrdup("TERN_MAX_COMPLETION_TOKENS=500");
    envv[n++] = xstrdup("TERN_LOCK_TTL_SECONDS=2");
    for (size_t i = 0; extra && extra[i] && n < 38; i++)
        envv[n++] = xstrdup(extra[i]);
    envv[n] = NULL;
    char *argv[] = {bin, "turn", NULL};
    struct tern_err err = {0};
    if (proc_spawn(p, argv, envv, log, &err))
        th_fail(__FILE__, __LINE__, "spawn runner: %s", err.msg);
    for (size_t i = 0; i < n; i++)
        free(envv[i]);
}

static int run_runner(struct env *e, const char *uid, int turn, const char *const *extra)
{
    struct proc p;
    start_runner(e, &p, uid, turn, extra);
    return proc_wait(&p, 120000);
}

#define MAXEV 256
struct evs {
    size_t n;
    char *type[MAXEV];
    cJSON *data[MAXEV];
};

static int collect(void *ctx, const struct journal_event *ev)
{
    struct evs *v = ctx;
    if (v->n >= MAXEV)
        return -E2BIG;
    v->type[v->n] = xstrdup(ev->type_name);
    v->data[v->n++] = json_dup(ev->data);
    return 0;
}

static void read_journal(struct env *e, const char *uid, struct evs *v)
{
    struct tern_err err = {0};
    struct journal *j = NULL;
    memset(v, 0, sizeof *v);
    if (journal_open(e->c, uid, NULL, &j, &err) || journal_replay(j, 1, collect, v, NULL, &err))
        th_fail(__FILE__, __LINE__, "journal %s: %s", uid, err.msg);
    journal_free(j);
}

static void evs_done(struct evs *v)
{
    for (size_t i = 0; i < v->n; i++) {
        free(v->type[i]);
        cJSON_Delete(v->data[i]);
    }
    v->n = 0;
}

static size_t count(const struct evs *v, const char *type)
{
    size_t n = 0;
    for (size_t i = 0; i < v->n; i++)
        n += strcmp(v->type[i], type) == 0;
    return n;
}

static const cJSON *last(const struct evs *v, const char *type)
{
    for (size_t i = v->n; i-- > 0;)
        if (strcmp(v->type[i], type) == 0)
            return v->data[i];
    return NULL;
}

static int64_t num(const cJSON *o, const char *k)
{
    int64_t v = -1;
    json_item_int64(json_get(o, k), &v);
    return v;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* what the journal says the session spent: tokens and cost of every
 * model_response */
static void spent(const struct evs *v, int64_t *tokens, int64_t *cost)
{
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->type[i], "model_response") == 0) {
            const cJSON *u = json_get(v->data[i], "usage");
            *tokens += num(u, "prompt_tokens") + num(u, "completion_tokens");
            *cost += num(u, "cost_micro_usd");
        }
}

/* one model step: a final answer with a fixed usage */
static const char *S_ONE = "{\"steps\":[{\"reply\":{\"content\":\"done\",\"usage\":"
                           "{\"prompt_tokens\":1000,\"completion_tokens\":100,"
                           "\"total_tokens\":1100}}}]}";
#define USED_TOKENS 1100

/* The worst case a runner reserves for S_ONE's call (measured once). */
static int64_t measure_worst(struct env *e)
{
    put_budget(e, "probe", "{\"limits\":{\"tokens\":100000000}}");
    write_spec(e, "probe", NULL);
    ASSERT_EQ_INT(run_runner(e, "probe", 1, NULL), 0);
    struct evs v;
    read_journal(e, "probe", &v);
    int64_t w = num(last(&v, "budget_reserved"), "tokens");
    evs_done(&v);
    struct tern_err err = {0};
    if (bstore_delete_budget(e->c, NS, "probe", &err))
        th_fail(__FILE__, __LINE__, "delete: %s", err.msg);
    ASSERT_CMP_INT(w, >, USED_TOKENS);
    return w;
}

/* ---- bstore directly ------------------------------------------------------------ */

TEST_T(reserve_settle_once_and_refuse, 60)
{
    struct env e;
    etcd_only(&e);
    put_budget(&e, "daily", "{\"limits\":{\"tokens\":10000,\"costMicroUSD\":5000}}");
    put_budget(&e, "gold", "{\"limits\":{\"tokens\":1},\"selector\":{\"matchLabels\":"
                           "{\"tier\":\"gold\"}}}");
    struct bstore_zones *z = bstore_zones_new();
    struct bstore_budget *b = NULL;
    size_t n = 0;
    struct tern_err err = {0};
    /* a session without the label gets the first budget only */
    ASSERT_EQ_INT(bstore_load(e.c, z, NS, NULL, false, time(NULL), &b, &n, &err), 0);
    ASSERT_EQ_INT(n, 1);
    ASSERT_EQ_STR(b[0].spec.name, "daily");
    struct ledger_reservation r = {.id = 5, .step = 0, .amount = {6000, 3000}};
    struct ledger_ref ref;
    snprintf(ref.name, sizeof ref.name, "daily");
    snprintf(ref.window, sizeof ref.window, "%s", b[0].win.key);
    r.refs = &ref;
    r.nrefs = 1;
    bool refused = true;
    struct ledger_refusal why;
    size_t which = 9;
    ASSERT_EQ_INT(bstore_reserve(e.c, NS, "s1", &r, b, &refused, &why, &which, &err), 0);
    ASSERT_FALSE(refused);
    /* the same reservation again (a lost reply): nothing more reserved */
    ASSERT_EQ_INT(bstore_reserve(e.c, NS, "s1", &r, b, &refused, &why, &which, &err), 0);
    ASSERT_FALSE(refused);
    struct ledger_counters c = counters(&e, "daily", b[0].win.key);
    ASSERT_EQ_INT(c.res_tokens, 6000);
    ASSERT_EQ_INT(c.res_cost, 3000);
    ASSERT_EQ_INT(c.start, b[0].win.start);
    /* a second session's 6000 does not fit beside it */
    r.id = 9;
    ASSERT_EQ_INT(bstore_reserve(e.c, NS, "s2", &r, b, &refused, &why, &which, &err), 0);
    ASSERT_TRUE(refused);
    ASSERT_EQ_INT(which, 0);
    ASSERT_EQ_INT(why.dim, BSPEC_TOKENS);
    ASSERT_EQ_INT(why.reserved, 6000);
    ASSERT_EQ_INT(open_records(&e, "s2"), 0);
    c = counters(&e, "daily", b[0].win.key);
    ASSERT_EQ_INT(c.refused, 1);
    /* settling twice counts once */
    struct ledger_amount used = {1234, 77};
    bool settled = false;
    ASSERT_EQ_INT(bstore_settle(e.c, NS, "s1", 5, &used, &settled, &err), 0);
    ASSERT_TRUE(settled);
    ASSERT_EQ_INT(bstore_settle(e.c, NS, "s1", 5, &used, &settled, &err), 0);
    ASSERT_FALSE(settled);
    c = counters(&e, "daily", b[0].win.key);
    ASSERT_EQ_INT(c.tokens, 1234);
    ASSERT_EQ_INT(c.cost, 77);
    ASSERT_EQ_INT(c.res_tokens, 0);
    ASSERT_EQ_INT(c.res_cost, 0);
    ASSERT_EQ_INT(c.calls, 1);
    ASSERT_EQ_INT(open_records(&e, "s1"), 0);
    /* a raised limit applies at once: the mirror is read in the txn */
    put_budget(&e, "daily", "{\"limits\":{\"tokens\":10000,\"costMicroUSD\":2900}}");
    r.id = 11;
    r.amount = (struct ledger_amount){100, 2900};
    ASSERT_EQ_INT(bstore_reserve(e.c, NS, "s2", &r, b, &refused, &why, &which, &err), 0);
    ASSERT_TRUE(refused);
    ASSERT_EQ_INT(why.dim, BSPEC_COST);
    put_budget(&e, "daily", "{\"limits\":{\"tokens\":10000,\"costMicroUSD\":3000}}");
    ASSERT_EQ_INT(bstore_reserve(e.c, NS, "s2", &r, b, &refused, &why, &which, &err), 0);
    ASSERT_FALSE(refused);
    /* a deleted budget no longer applies (its reservation settles into nothing) */
    ASSERT_EQ_INT(bstore_delete_budget(e.c, NS, "daily", &err), 0);
    ASSERT_EQ_INT(bstore_settle(e.c, NS, "s2", 11, NULL, &settled, &err), 0);
    ASSERT_EQ_INT(counters(&e, "daily", b[0].win.key).calls, 0);
    r.id = 12;
    ASSERT_EQ_INT(bstore_reserve(e.c, NS, "s2", &r, b, &refused, &why, &which, &err), 0);
    ASSERT_FALSE(refused);
    bstore_budgets_free(b, n);
    /* with the label: the gold budget applies too */
    cJSON *labels = cJSON_CreateObject();
    json_add_string(labels, "tier", "gold");
    ASSERT_EQ_INT(bstore_load(e.c, z, NS, labels, false, time(NULL), &b, &n, &err), 0);
    ASSERT_EQ_INT(n, 1); /* daily is gone */
    ASSERT_EQ_STR(b[0].spec.name, "gold");
    bstore_budgets_free(b, n);
    cJSON_Delete(labels);
    bstore_zones_free(z);
    env_stop(&e);
}

TEST_T(every_applicable_budget_must_allow, 60)
{
    struct env e;
    etcd_only(&e);
    /* both apply to a gold session: a roomy one and a tight one */
    put_budget(&e, "team", "{\"limits\":{\"tokens\":100000}}");
    put_budget(&e, "gold", "{\"limits\":{\"tokens\":5000},\"selector\":{\"matchLabels\":"
                           "{\"tier\":\"gold\"}}}");
    struct bstore_zones *z = bstore_zones_new();
    struct bstore_budget *b = NULL;
    size_t n = 0;
    struct tern_err err = {0};
    cJSON *labels = cJSON_CreateObject();
    json_add_string(labels, "tier", "gold");
    ASSERT_EQ_INT(bstore_load(e.c, z, NS, labels, false, time(NULL), &b, &n, &err), 0);
    ASSERT_EQ_INT(n, 2);
    struct ledger_ref refs[2];
    for (size_t i = 0; i < 2; i++) {
        snprintf(refs[i].name, sizeof refs[i].name, "%s", b[i].spec.name);
        snprintf(refs[i].window, sizeof refs[i].window, "%s", b[i].win.key);
    }
    size_t gold = strcmp(b[0].spec.name, "gold") == 0 ? 0 : 1, team = 1 - gold;
    struct ledger_reservation r = {.id = 3, .amount = {4000, 0}, .refs = refs, .nrefs = 2};
    bool refused = true;
    struct ledger_refusal why;
    size_t which = 9;
    /* the first call fits both: reserved in both, in one txn */
    ASSERT_EQ_INT(bstore_reserve(e.c, NS, "s1", &r, b, &refused, &why, &which, &err), 0);
    ASSERT_FALSE(refused);
    ASSERT_EQ_INT(counters(&e, "team", b[team].win.key).res_tokens, 4000);
    ASSERT_EQ_INT(counters(&e, "gold", b[gold].win.key).res_tokens, 4000);
    /* the second fits the team budget but not gold: refused, and the team
     * budget is not touched either */
    r.id = 4;
    ASSERT_EQ_INT(bstore_reserve(e.c, NS, "s2", &r, b, &refused, &why, &which, &err), 0);
    ASSERT_TRUE(refused);
    ASSERT_EQ_INT(which, gold);
    ASSERT_EQ_INT(why.dim, BSPEC_TOKENS);
    ASSERT_EQ_INT(counters(&e, "team", b[team].win.key).res_tokens, 4000);
    ASSERT_EQ_INT(counters(&e, "team", b[team].win.key).refused, 0);
    ASSERT_EQ_INT(counters(&e, "gold", b[gold].win.key).res_tokens, 4000);
    ASSERT_EQ_INT(counters(&e, "gold", b[gold].win.key).refused, 1);
    ASSERT_EQ_INT(open_records(&e, "s2"), 0);
    /* settled: the use lands in both */
    struct ledger_amount used = {1200, 0};
    bool settled = false;
    ASSERT_EQ_INT(bstore_settle(e.c, NS, "s1", 3, &used, &settled, &err), 0);
    ASSERT_TRUE(settled);
    for (size_t i = 0; i < 2; i++) {
        struct ledger_counters c = counters(&e, b[i].spec.name, b[i].win.key);
        ASSERT_EQ_INT(c.tokens, 1200);
        ASSERT_EQ_INT(c.res_tokens, 0);
        ASSERT_EQ_INT(c.calls, 1);
    }
    bstore_budgets_free(b, n);
    cJSON_Delete(labels);
    bstore_zones_free(z);
    env_stop(&e);
}

struct racer {
    struct env *e;
    const struct bstore_budget *b;
    char uid[16];
    int64_t want, use;
    int reserved, refused;
};

static void *race(void *arg)
{
    struct racer *x = arg;
    struct tern_err err = {0};
    const char *eps[] = {x->e->etcd.url};
    struct etcd_config ec = {.endpoints = eps, .nendpoints = 1};
    struct etcd *c = NULL;
    if (etcd_new(&ec, &c, &err))
        return NULL;
    struct ledger_ref ref;
    snprintf(ref.name, sizeof ref.name, "%s", x->b->spec.name);
    snprintf(ref.window, sizeof ref.window, "%s", x->b->win.key);
    for (uint64_t id = 1; id <= 20; id++) {
        struct ledger_reservation r = {.id = id, .amount = {x->want, 0}, .refs = &ref, .nrefs = 1};
        bool refused = false;
        if (bstore_reserve(c, NS, x->uid, &r, x->b, &refused, NULL, NULL, &err))
            break;
        if (refused) {
            x->refused++;
            continue;
        }
        x->reserved++;
        struct ledger_amount used = {x->use, 0};
        if (bstore_settle(c, NS, x->uid, id, &used, NULL, &err))
            break;
    }
    etcd_free(c);
    return NULL;
}

TEST_T(twenty_writers_race_the_counters, 120)
{
    /* 20 threads, each trying 20 calls of worst case 500 using 400, against
     * 10000 tokens: the compare-and-swap keeps used + reserved <= 10000 at
     * every commit, so used ends <= 10000 and equals 400 per call made */
    struct env e;
    etcd_only(&e);
    put_budget(&e, "race", "{\"limits\":{\"tokens\":10000}}");
    struct bstore_zones *z = bstore_zones_new();
    struct bstore_budget *b = NULL;
    size_t n = 0;
    struct tern_err err = {0};
    ASSERT_EQ_INT(bstore_load(e.c, z, NS, NULL, true, time(NULL), &b, &n, &err), 0);
    struct racer x[20];
    pthread_t th[20];
    for (int i = 0; i < 20; i++) {
        x[i] = (struct racer){.e = &e, .b = &b[0], .want = 500, .use = 400};
        snprintf(x[i].uid, sizeof x[i].uid, "r%02d", i);
        pthread_create(&th[i], NULL, race, &x[i]);
    }
    int made = 0, refused = 0;
    for (int i = 0; i < 20; i++) {
        pthread_join(th[i], NULL);
        made += x[i].reserved;
        refused += x[i].refused;
    }
    ASSERT_EQ_INT(made + refused, 400);
    struct ledger_counters c = counters(&e, "race", b[0].win.key);
    ASSERT_EQ_INT(c.tokens, (int64_t)made * 400);
    ASSERT_CMP_INT(c.tokens, <=, 10000);
    ASSERT_EQ_INT(c.res_tokens, 0);
    ASSERT_EQ_INT(c.calls, made);
    ASSERT_EQ_INT(c.refused, refused);
    /* the budget is used up: one more worst case does not fit */
    ASSERT_CMP_INT(c.tokens + 500, >, 10000);
    bstore_budgets_free(b, n);
    bstore_zones_free(z);
    env_stop(&e);
}

static int64_t created_at;
static struct ledger_waiter waiter(const char *uid)
{
    return (struct ledger_waiter){uid, uid, (double)created_at++};
}

static bool keep_u2(void *ctx, const char *uid)
{
    (void)ctx;
    return strcmp(uid, "u2") == 0;
}

TEST_T(admission_queue_and_ledger, 60)
{
    struct env e;
    etcd_only(&e);
    put_budget(&e, "cap", "{\"limits\":{\"concurrentSessions\":2,\"sessionsStarted\":3}}");
    struct bstore_zones *z = bstore_zones_new();
    struct bstore_budget *b = NULL;
    size_t n = 0;
    struct tern_err err = {0};
    ASSERT_EQ_INT(bstore_load(e.c, z, NS, NULL, true, time(NULL), &b, &n, &err), 0);
    struct ledger_waiter w[5] = {waiter("u0"), waiter("u1"), waiter("u2"), waiter("u3"),
                                 waiter("u4")};
    struct bstore_waiters q = {w, 5};
    struct bstore_admission a;
    /* u2 asks first but is third in line with two slots: it waits */
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u2", "u2", b, n, &q, false, &a, &err), 0);
    ASSERT_FALSE(a.admitted);
    ASSERT_EQ_INT(a.dim, BSPEC_CONCURRENT);
    ASSERT_EQ_INT(a.position, 3);
    ASSERT_EQ_INT(a.waiting, 5);
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u1", "u1", b, n, &q, false, &a, &err), 0);
    ASSERT_TRUE(a.admitted);
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u0", "u0", b, n, &q, false, &a, &err), 0);
    ASSERT_TRUE(a.admitted);
    /* admitting again changes nothing (a retried reconcile) */
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u0", "u0", b, n, &q, false, &a, &err), 0);
    ASSERT_TRUE(a.admitted);
    ASSERT_EQ_INT(counters(&e, "cap", b[0].win.key).started, 2);
    /* full: u2 is first in line now, but no slot is free */
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u2", "u2", b, n, &q, false, &a, &err), 0);
    ASSERT_FALSE(a.admitted);
    ASSERT_EQ_INT(a.position, 1);
    ASSERT_EQ_INT(a.used, 2);
    bool holds = false;
    ASSERT_EQ_INT(bstore_holds(e.c, NS, "cap", "u0", &holds, &err), 0);
    ASSERT_TRUE(holds);
    /* u0 leaves (and no longer waits); u3 may not jump the queue; u2 goes */
    const char *names[] = {"cap"};
    ASSERT_EQ_INT(bstore_release(e.c, NS, "u0", names, 1, NULL, &err), 0);
    q = (struct bstore_waiters){w + 1, 4};
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u3", "u3", b, n, &q, false, &a, &err), 0);
    ASSERT_FALSE(a.admitted);
    ASSERT_EQ_INT(a.position, 2);
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u2", "u2", b, n, &q, false, &a, &err), 0);
    ASSERT_TRUE(a.admitted);
    ASSERT_EQ_INT(counters(&e, "cap", b[0].win.key).started, 3);
    /* u0 comes back: it started before, so sessionsStarted does not hold it
     * back, only the slots do */
    ASSERT_EQ_INT(bstore_release(e.c, NS, "u1", names, 1, NULL, &err), 0);
    struct ledger_waiter w2[] = {w[0], w[3], w[4]};
    struct bstore_waiters q2 = {w2, 3};
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u0", "u0", b, n, &q2, false, &a, &err), 0);
    ASSERT_TRUE(a.admitted);
    ASSERT_EQ_INT(counters(&e, "cap", b[0].win.key).started, 3);
    /* a new session finds sessionsStarted used up */
    ASSERT_EQ_INT(bstore_release(e.c, NS, "u0", names, 1, NULL, &err), 0);
    struct ledger_waiter w3[] = {w[3], w[4]};
    struct bstore_waiters q3 = {w3, 2};
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u3", "u3", b, n, &q3, false, &a, &err), 0);
    ASSERT_FALSE(a.admitted);
    ASSERT_EQ_INT(a.dim, BSPEC_STARTED);
    ASSERT_EQ_INT(a.used, 3);
    ASSERT_EQ_INT(a.limit, 3);
    /* force: a session found holding a sandbox takes its slot over the limit */
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u9", "u9", b, n, NULL, true, &a, &err), 0);
    ASSERT_EQ_INT(bstore_admit(e.c, NS, "u8", "u8", b, n, NULL, true, &a, &err), 0);
    struct bstore_usage u;
    ASSERT_EQ_INT(bstore_usage(e.c, &b[0], &u, &err), 0);
    ASSERT_EQ_INT(u.slots.n, 3); /* u2, u9, u8 */
    ASSERT_EQ_INT(u.win.started, 3);
    bstore_usage_done(&u);
    /* holders that are gone are pruned; a forgotten session leaves */
    size_t pruned = 0;
    ASSERT_EQ_INT(bstore_prune_slots(e.c, NS, "cap", keep_u2, NULL, &pruned, &err), 0);
    ASSERT_EQ_INT(pruned, 2);
    ASSERT_EQ_INT(bstore_forget(e.c, NS, "u2", names, 1, &err), 0);
    ASSERT_EQ_INT(bstore_usage(e.c, &b[0], &u, &err), 0);
    ASSERT_EQ_INT(u.slots.n, 0);
    bstore_usage_done(&u);
    struct etcd_kv *kv = NULL;
    char *memo = bstore_key_memo(NS, "u2");
    ASSERT_EQ_INT(etcd_get(e.c, memo, &kv, NULL, &err), TERN_ENOTFOUND);
    free(memo);
    /* windows other than the two kept are collected */
    char *old = bstore_key_window(NS, "cap", "1999-01-01");
    struct etcd_put_req put = {.key = old, .value = "{}", .value_len = 2};
    struct etcd_put_resp pr = {0};
    ASSERT_EQ_INT(etcd_put(e.c, &put, &pr, &err), 0);
    etcd_put_resp_done(&pr);
    ASSERT_EQ_INT(bstore_gc_windows(e.c, NS, "cap", b[0].win.key, NULL, &err), 0);
    ASSERT_EQ_INT(etcd_get(e.c, old, &kv, NULL, &err), TERN_ENOTFOUND);
    ASSERT_EQ_INT(counters(&e, "cap", b[0].win.key).started, 3);
    free(old);
    char **mirrors = NULL;
    size_t nm = 0;
    ASSERT_EQ_INT(bstore_list_mirrors(e.c, &mirrors, &nm, &err), 0);
    ASSERT_EQ_INT(nm, 1);
    ASSERT_EQ_STR(mirrors[0], NS "/cap");
    free(mirrors[0]);
    free(mirrors);
    bstore_budgets_free(b, n);
    bstore_zones_free(z);
    env_stop(&e);
}

/* ---- through tern-runner ---------------------------------------------------------- */

TEST_T(twenty_sessions_race_a_budget_of_a_few_calls, 600)
{
    struct env e;
    env_start(&e, S_ONE);
    int64_t worst = measure_worst(&e);
    /* room for about three worst cases at once, for about six calls in all;
     * a budget for another team's label must not count */
    int64_t limit = 3 * worst + worst / 2;
    char *spec = xasprintf("{\"limits\":{\"tokens\":%lld}}", (long long)limit);
    put_budget(&e, "team", spec);
    free(spec);
    put_budget(&e, "other", "{\"limits\":{\"tokens\":1},\"selector\":{\"matchLabels\":"
                            "{\"team\":\"b\"}}}");
    char uids[20][16];
    for (int i = 0; i < 20; i++) {
        snprintf(uids[i], sizeof uids[i], "s%02d", i);
        write_spec(&e, uids[i], "{\"team\":\"a\"}");
    }
    /* round 1: all twenty at once; then, as the operator would, every
     * session that was turned away tries again in a new turn, until a round
     * changes nothing */
    int turn[20], done_n = 0;
    bool done[20] = {false};
    for (int i = 0; i < 20; i++)
        turn[i] = 1;
    for (int round = 0; round < 12; round++) {
        struct proc p[20];
        bool ran[20] = {false};
        for (int i = 0; i < 20; i++)
            if (!done[i]) {
                start_runner(&e, &p[i], uids[i], turn[i], NULL);
                ran[i] = true;
            }
        int progressed = 0;
        for (int i = 0; i < 20; i++) {
            if (!ran[i])
                continue;
            ASSERT_EQ_INT(proc_wait(&p[i], 120000), 0);
            struct evs v;
            read_journal(&e, uids[i], &v);
            const char *oc = str(last(&v, "turn_finished"), "outcome");
            if (oc && strcmp(oc, "completed") == 0) {
                done[i] = true;
                done_n++;
                progressed++;
            } else {
                ASSERT_EQ_STR(oc, "budget_exhausted");
                turn[i]++;
            }
            evs_done(&v);
        }
        if (!progressed && round > 0)
            break;
    }
    /* the counters equal the journals, and what was spent fits */
    struct tzwin_window w = window_now("UTC", TZWIN_DAY, 0);
    struct ledger_counters c = counters(&e, "team", w.key);
    int64_t tokens = 0, cost = 0, responses = 0, refusals = 0, reservations = 0;
    for (int i = 0; i < 20; i++) {
        struct evs v;
        read_journal(&e, uids[i], &v);
        spent(&v, &tokens, &cost);
        responses += (int64_t)count(&v, "model_response");
        reservations += (int64_t)count(&v, "budget_reserved");
        /* every refusal was right: the call did not fit when refused */
        for (size_t k = 0; k < v.n; k++)
            if (strcmp(v.type[k], "budget_refused") == 0) {
                refusals++;
                const cJSON *d = v.data[k];
                ASSERT_EQ_STR(str(d, "budget"), "team");
                ASSERT_CMP_INT(num(d, "used") + num(d, "reserved") + num(d, "want"), >,
                               num(d, "limit"));
            }
        /* each model call made once, each reservation closed */
        ASSERT_CMP_INT(count(&v, "model_response"), <=, 1);
        ASSERT_EQ_INT(open_records(&e, uids[i]), 0);
        evs_done(&v);
    }
    ASSERT_EQ_INT(c.tokens, tokens);
    ASSERT_EQ_INT(c.tokens, responses * USED_TOKENS);
    ASSERT_EQ_INT(c.cost, cost);
    ASSERT_EQ_INT(c.calls, responses);
    ASSERT_EQ_INT(c.refused, refusals);
    ASSERT_EQ_INT(c.res_tokens, 0);
    ASSERT_EQ_INT(c.res_cost, 0);
    ASSERT_EQ_INT(reservations, responses + refusals);
    ASSERT_EQ_INT(responses, done_n);
    ASSERT_CMP_INT(c.tokens, <=, limit);
    /* a few calls were made, most sessions were turned away, and the last
     * call that would have crossed the limit was not made */
    ASSERT_CMP_INT(done_n, >=, 2);
    ASSERT_CMP_INT(done_n, <, 20);
    ASSERT_CMP_INT(c.tokens + worst, >, limit);
    ASSERT_EQ_INT(counters(&e, "other", w.key).calls, 0);
    fprintf(stderr, "    limit %lld tokens, worst case %lld: %d calls made (%lld tokens), "
                    "%lld refusals\n",
            (long long)limit, (long long)worst, done_n, (long long)c.tokens,
            (long long)refusals);
    env_stop(&e);
}

TEST_T(runner_killed_between_reserve_and_settle, 300)
{
    struct env e;
    env_start(&e, S_ONE);
    int64_t worst = measure_worst(&e);
    put_budget(&e, "team", "{\"limits\":{\"tokens\":100000000,\"costMicroUSD\":100000000}}");
    struct tzwin_window w = window_now("UTC", TZWIN_DAY, 0);
    /* (a) killed right after the reservation, before the call: the rerun
     * releases it and reserves anew; one call, counted once */
    write_spec(&e, "ka", NULL);
    const char *crash_reserve[] = {"TERN_TEST_CRASH_AFTER_RESERVE=1", NULL};
    ASSERT_EQ_INT(run_runner(&e, "ka", 1, crash_reserve), 128 + 9);
    struct ledger_counters c = counters(&e, "team", w.key);
    ASSERT_EQ_INT(c.res_tokens, worst);
    ASSERT_EQ_INT(c.calls, 0);
    ASSERT_EQ_INT(open_records(&e, "ka"), 1);
    ASSERT_EQ_INT(run_runner(&e, "ka", 1, NULL), 0);
    struct evs v;
    read_journal(&e, "ka", &v);
    ASSERT_EQ_STR(str(last(&v, "turn_finished"), "outcome"), "completed");
    ASSERT_EQ_INT(count(&v, "model_response"), 1);
    ASSERT_EQ_INT(count(&v, "budget_reserved"), 2);
    int64_t tokens = 0, cost = 0;
    spent(&v, &tokens, &cost);
    evs_done(&v);
    c = counters(&e, "team", w.key);
    ASSERT_EQ_INT(c.res_tokens, 0);
    ASSERT_EQ_INT(c.res_cost, 0);
    ASSERT_EQ_INT(c.tokens, tokens);
    ASSERT_EQ_INT(c.cost, cost);
    ASSERT_EQ_INT(c.calls, 1);
    ASSERT_EQ_INT(open_records(&e, "ka"), 0);

    /* (b) killed after the response was journaled, before settling (append
     * 4: turn_started, model_request, budget_reserved, model_response): the
     * rerun settles it at the journaled usage, once */
    write_spec(&e, "kb", NULL);
    const char *crash_response[] = {"TERN_TEST_CRASH_AFTER_APPENDS=4", NULL};
    ASSERT_EQ_INT(run_runner(&e, "kb", 1, crash_response), 128 + 9);
    read_journal(&e, "kb", &v);
    ASSERT_EQ_STR(v.type[v.n - 1], "model_response");
    evs_done(&v);
    c = counters(&e, "team", w.key);
    ASSERT_EQ_INT(c.res_tokens, worst);
    ASSERT_EQ_INT(c.calls, 1);
    ASSERT_EQ_INT(run_runner(&e, "kb", 1, NULL), 0);
    ASSERT_EQ_INT(run_runner(&e, "kb", 1, NULL), 0); /* and again: nothing changes */
    read_journal(&e, "kb", &v);
    ASSERT_EQ_INT(count(&v, "model_response"), 1);
    ASSERT_EQ_INT(count(&v, "budget_reserved"), 1);
    ASSERT_EQ_STR(str(last(&v, "turn_finished"), "outcome"), "completed");
    spent(&v, &tokens, &cost);
    evs_done(&v);
    c = counters(&e, "team", w.key);
    ASSERT_EQ_INT(c.res_tokens, 0);
    ASSERT_EQ_INT(c.tokens, tokens);
    ASSERT_EQ_INT(c.cost, cost);
    ASSERT_EQ_INT(c.calls, 2);

    /* (c) killed after reserving, and the turn never resumes (its Job
     * failed: the operator journals the turn's end): the operator's
     * resolver, under the turn lock, releases it */
    write_spec(&e, "kc", NULL);
    ASSERT_EQ_INT(run_runner(&e, "kc", 1, crash_reserve), 128 + 9);
    struct tern_err err = {0};
    struct journal *j = NULL;
    struct journal_lock *lock = NULL;
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "outcome", "error");
    json_add_string(d, "reason", "JobFailed");
    struct journal_append_req req = {.type = JOURNAL_EV_TURN_FINISHED, .turn = 1, .data = d};
    int64_t deadline = time(NULL) + 30;
    int rc;
    while ((rc = journal_lock_acquire(e.c, "kc", "test", 5, &lock, &err)) == TERN_ECONFLICT &&
           time(NULL) < deadline)
        usleep(100000); /* the killed runner's lease runs out */
    ASSERT_EQ_INT(rc, 0);
    ASSERT_EQ_INT(journal_open(e.c, "kc", NULL, &j, &err), 0);
    ASSERT_EQ_INT(journal_append(j, &req, NULL, &err), 0);
    cJSON_Delete(d);
    size_t resolved = 0;
    ASSERT_EQ_INT(bstore_resolve(e.c, j, NS, "kc", &resolved, &err), 0);
    ASSERT_EQ_INT(resolved, 1);
    ASSERT_EQ_INT(bstore_resolve(e.c, j, NS, "kc", &resolved, &err), 0);
    ASSERT_EQ_INT(resolved, 0);
    journal_free(j);
    journal_lock_release(lock, NULL);
    c = counters(&e, "team", w.key);
    ASSERT_EQ_INT(c.res_tokens, 0);
    ASSERT_EQ_INT(c.calls, 2);
    ASSERT_EQ_INT(open_records(&e, "kc"), 0);
    env_stop(&e);
}

TEST_T(window_rollover_with_the_test_clock, 300)
{
    /* an hourly budget with room for one call: the second session is turned
     * away in this hour and goes through in the next (the runner's clock
     * moved an hour on with TERN_TEST_CLOCK_OFFSET_SECONDS) */
    struct env e;
    env_start(&e, S_ONE);
    int64_t worst = measure_worst(&e);
    char *spec = xasprintf("{\"window\":{\"period\":\"Hour\",\"timeZone\":\"Europe/Berlin\"},"
                           "\"limits\":{\"tokens\":%lld}}",
                           (long long)(worst + USED_TOKENS / 2));
    put_budget(&e, "hourly", spec);
    free(spec);
    /* every run sees half past the hour (so the real clock cannot roll the
     * window over during the test), the last one the next hour */
    struct tzwin_window cur = window_now("Europe/Berlin", TZWIN_HOUR, 0);
    int64_t base = cur.start + 1800 - time(NULL);
    struct tzwin_window now = window_now("Europe/Berlin", TZWIN_HOUR, base);
    int64_t jump = base + 3600;
    struct tzwin_window next = window_now("Europe/Berlin", TZWIN_HOUR, jump);
    ASSERT_TRUE(strcmp(now.key, next.key) != 0);
    ASSERT_EQ_INT(next.start, now.end);
    char off0[64];
    snprintf(off0, sizeof off0, "TERN_TEST_CLOCK_OFFSET_SECONDS=%lld", (long long)base);
    const char *at_half[] = {off0, NULL};
    write_spec(&e, "h1", NULL);
    write_spec(&e, "h2", NULL);
    ASSERT_EQ_INT(run_runner(&e, "h1", 1, at_half), 0);
    ASSERT_EQ_INT(run_runner(&e, "h2", 1, at_half), 0);
    struct evs v;
    read_journal(&e, "h2", &v);
    ASSERT_EQ_STR(str(last(&v, "turn_finished"), "outcome"), "budget_exhausted");
    const cJSON *ref = last(&v, "budget_refused");
    ASSERT_EQ_STR(str(ref, "window"), now.key);
    ASSERT_EQ_STR(str(ref, "dimension"), "tokens");
    ASSERT_CONTAINS(str(ref, "message"), "AgentBudget hourly: tokens per Hour in window ");
    ASSERT_CONTAINS(str(ref, "message"), "continues by itself when the window ends");
    evs_done(&v);
    char off[64];
    snprintf(off, sizeof off, "TERN_TEST_CLOCK_OFFSET_SECONDS=%lld", (long long)jump);
    const char *later[] = {off, NULL};
    ASSERT_EQ_INT(run_runner(&e, "h2", 2, later), 0);
    read_journal(&e, "h2", &v);
    ASSERT_EQ_STR(str(last(&v, "turn_finished"), "outcome"), "completed");
    ASSERT_EQ_STR(str(json_get(last(&v, "budget_reserved"), "budgets")->child, "window"),
                  next.key);
    evs_done(&v);
    struct ledger_counters a = counters(&e, "hourly", now.key);
    struct ledger_counters b = counters(&e, "hourly", next.key);
    ASSERT_EQ_INT(a.calls, 1);
    ASSERT_EQ_INT(a.refused, 1);
    ASSERT_EQ_INT(b.calls, 1);
    ASSERT_EQ_INT(b.tokens, USED_TOKENS);
    ASSERT_EQ_INT(b.start, next.start);
    env_stop(&e);
}
