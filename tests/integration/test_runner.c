/* Integration tests: tern-runner with etcd, tern-sandboxd and tern-fakellm
 * (no Kubernetes: the session spec comes from TERN_SESSION_SPEC_FILE).
 *
 * Every test starts its own etcd, sandboxd and scripted model on free
 * loopback ports, runs tern-runner as a child process and checks the
 * journal (read with the journal API) and sandboxd's execution records. */
#include "harness.h"

#include "../support/etcd_fixture.h"
#include "../support/proc_fixture.h"

#include "base/mem.h"
#include "etcd/etcd.h"
#include "http/httpc.h"
#include "journal/journal.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TOKEN "test-token-0123456789"

struct env {
    struct etcd_fixture etcd;
    struct proc sbx, llm;
    char dir[256], ws[300], token[300], record[300];
};

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        th_fail(__FILE__, __LINE__, "open %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    struct buf b;
    buf_init(&b, 1u << 24);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_append(&b, chunk, n);
    fclose(f);
    return buf_steal(&b);
}

static int count_lines(const char *path)
{
    char *t = read_text(path);
    int n = 0;
    for (const char *p = t; p && *p; p++)
        n += *p == '\n';
    free(t);
    return n;
}

static void env_start(struct env *e, const char *script)
{
    struct tern_err err = {0};
    memset(e, 0, sizeof *e);
    snprintf(e->dir, sizeof e->dir, "%s", th_tmpdir());
    snprintf(e->ws, sizeof e->ws, "%s/ws", e->dir);
    snprintf(e->token, sizeof e->token, "%s/token", e->dir);
    snprintf(e->record, sizeof e->record, "%s/record.jsonl", e->dir);
    char p[400];
    mkdir(e->ws, 0755);
    snprintf(p, sizeof p, "%s/input", e->ws);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/input/change.diff", e->ws);
    write_file(p, "--- a\n+++ b\n");
    snprintf(p, sizeof p, "%s/simple.md", e->ws);
    write_file(p, "Prefer small commits.\n");
    write_file(e->token, TOKEN "\n");
    char etcd_dir[300];
    snprintf(etcd_dir, sizeof etcd_dir, "%s/etcd", e->dir);
    if (etcd_fixture_start(&e->etcd, etcd_dir, NULL, &err))
        th_fail(__FILE__, __LINE__, "etcd: %s", err.msg);

    char bin[300], log[300], script_path[300];
    snprintf(bin, sizeof bin, "%s/bin/tern-sandboxd", proc_build_dir());
    snprintf(log, sizeof log, "%s/sandboxd.log", e->dir);
    char *sargv[] = {bin, "--listen", "127.0.0.1:0", "--token-file", e->token, "--workspace",
                     e->ws, "--log-level", "warn", NULL};
    if (proc_start_server(&e->sbx, sargv, "ready addr=", log, 10000, &err))
        th_fail(__FILE__, __LINE__, "sandboxd: %s", err.msg);

    snprintf(script_path, sizeof script_path, "%s/script.json", e->dir);
    write_file(script_path, script);
    snprintf(bin, sizeof bin, "%s/bin/tern-fakellm", proc_build_dir());
    snprintf(log, sizeof log, "%s/fakellm.log", e->dir);
    char *fargv[] = {bin, "--script", script_path, "--listen", "127.0.0.1:0", "--record",
                     e->record, NULL};
    if (proc_start_server(&e->llm, fargv, "tern-fakellm listening ", log, 10000, &err))
        th_fail(__FILE__, __LINE__, "fakellm: %s", err.msg);
}

static void env_stop(struct env *e)
{
    proc_stop(&e->llm);
    proc_stop(&e->sbx);
    etcd_fixture_stop(&e->etcd);
}

/* A spec file for uid with the given permissions/limits JSON members. */
static const char *SPEC_PLAIN = "\"permissions\":{\"tools\":[\"exec_command\",\"read_file\","
                                "\"write_file\",\"list_files\"]}";

static void write_spec(struct env *e, const char *uid, const char *members)
{
    char path[400];
    snprintf(path, sizeof path, "%s/spec-%s.json", e->dir, uid);
    char *s = xasprintf("{\"metadata\":{\"uid\":\"%s\"},\"spec\":{\"objective\":\"Review the "
                        "change in input/ and write output/review.md\",\"model\":{\"name\":"
                        "\"fake-model\"},%s}}",
                        uid, members);
    write_file(path, s);
    free(s);
}

/* Starts tern-runner turn for uid; extra is a NULL-terminated "K=V" list. */
static void start_runner(struct env *e, struct proc *p, const char *uid, int turn,
                         const char *const *extra, const char *log_name)
{
    char bin[300], log[400];
    snprintf(bin, sizeof bin, "%s/bin/tern-runner", proc_build_dir());
    snprintf(log, sizeof log, "%s/%s", e->dir, log_name ? log_name : "runner.log");
    char *envv[40];
    size_t n = 0;
    envv[n++] = xasprintf("PATH=%s", getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    envv[n++] = xstrdup("TERN_NAMESPACE=team-a");
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
    bool ttl_set = false;
    for (size_t i = 0; extra && extra[i] && n < 38; i++) {
        envv[n++] = xstrdup(extra[i]);
        ttl_set = ttl_set || strncmp(extra[i], "TERN_LOCK_TTL_SECONDS=", 22) == 0;
    }
    if (!ttl_set)
        envv[n++] = xstrdup("TERN_LOCK_TTL_SECONDS=1");
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
    start_runner(e, &p, uid, turn, extra, NULL);
    return proc_wait(&p, 60000);
}

/* ---- reading the journal ----------------------------------------------- */

#define MAXEV 512
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

static void read_journal_from(struct env *e, const char *uid, uint64_t from, struct evs *v);

static void read_journal(struct env *e, const char *uid, struct evs *v)
{
    read_journal_from(e, uid, 1, v);
}

/* From seq from (JOURNAL_FROM_SNAPSHOT: the latest snapshot). */
static void read_journal_from(struct env *e, const char *uid, uint64_t from, struct evs *v)
{
    struct tern_err err = {0};
    const char *eps[] = {e->etcd.url};
    struct etcd_config ec = {.endpoints = eps, .nendpoints = 1};
    struct etcd *c = NULL;
    struct journal *j = NULL;
    memset(v, 0, sizeof *v);
    if (etcd_new(&ec, &c, &err) || journal_open(c, uid, NULL, &j, &err) ||
        journal_replay(j, from, collect, v, NULL, &err))
        th_fail(__FILE__, __LINE__, "journal %s: %s", uid, err.msg);
    journal_free(j);
    etcd_free(c);
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

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *it = json_get(o, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* The final outcome and answer of the journal. */
static const char *outcome(const struct evs *v)
{
    return str(last(v, "turn_finished"), "outcome");
}

static const char *answer(const struct evs *v)
{
    return str(last(v, "turn_finished"), "summary");
}

/* Each model step recorded once: model_response steps are 0, 1, 2, ... */
static void assert_steps_once(const struct evs *v, int64_t want)
{
    int64_t next = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (strcmp(v->type[i], "model_response") != 0)
            continue;
        int64_t step = -1;
        json_item_int64(json_get(v->data[i], "step"), &step);
        if (step != next)
            th_fail(__FILE__, __LINE__, "model_response step %lld, expected %lld",
                    (long long)step, (long long)next);
        next++;
    }
    ASSERT_EQ_INT(next, want);
}

static void append_event(struct env *e, const char *uid, enum journal_type type, cJSON *d)
{
    struct tern_err err = {0};
    const char *eps[] = {e->etcd.url};
    struct etcd_config ec = {.endpoints = eps, .nendpoints = 1};
    struct etcd *c = NULL;
    struct journal *j = NULL;
    struct journal_append_req req = {.type = type, .turn = 0, .data = d};
    if (etcd_new(&ec, &c, &err) || journal_open(c, uid, NULL, &j, &err) ||
        journal_append(j, &req, NULL, &err))
        th_fail(__FILE__, __LINE__, "append: %s", err.msg);
    cJSON_Delete(d);
    journal_free(j);
    etcd_free(c);
}

static void append_decision(struct env *e, const char *uid, const char *id, const char *decision)
{
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "id", id);
    json_add_string(d, "decision", decision);
    json_add_string(d, "decidedBy", "alice");
    append_event(e, uid, JOURNAL_EV_APPROVAL_DECIDED, d);
}

/* sandboxd's execution records with keys "<uid>/...": how many, total runs. */
static void executions(struct env *e, const char *uid, int *ret_n, int *ret_runs)
{
    struct httpc *h = httpc_new();
    char url[400];
    snprintf(url, sizeof url, "http://%s/v1/executions", e->sbx.addr);
    const char *hdrs[] = {"Authorization: Bearer " TOKEN, NULL};
    struct httpc_request req = {.url = url, .headers = hdrs, .timeout_ms = 10000};
    struct httpc_response resp = {0};
    struct tern_err err = {0};
    if (httpc_do(h, &req, &resp, &err) || resp.status != 200)
        th_fail(__FILE__, __LINE__, "executions: %s %ld", err.msg, resp.status);
    cJSON *j = NULL;
    ASSERT_OK(json_parse(buf_str(&resp.body), resp.body.len, &j, NULL));
    int n = 0, runs = 0;
    size_t ul = strlen(uid);
    const cJSON *arr = json_get(j, "executions");
    for (const cJSON *it = arr ? arr->child : NULL; it; it = it->next) {
        const char *k = str(it, "key");
        if (!k || strncmp(k, uid, ul) != 0 || k[ul] != '/')
            continue;
        int64_t r = 0;
        json_item_int64(json_get(it, "runs"), &r);
        n++;
        runs += (int)r;
    }
    cJSON_Delete(j);
    httpc_response_done(&resp);
    httpc_free(h);
    *ret_n = n;
    *ret_runs = runs;
}

/* ---- scripts ----------------------------------------------------------- */

/* list, write, exec, final: 16 appends when uninterrupted */
static const char *S_FULL =
    "{\"steps\":["
    "{\"reply\":{\"content\":\"Looking around.\",\"toolCalls\":[{\"name\":\"list_files\","
    "\"arguments\":{\"path\":\".\",\"depth\":2}}]}},"
    "{\"reply\":{\"toolCalls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":"
    "\"output/review.md\",\"content\":\"# Review\\nLooks good.\\n\",\"append\":null}}]}},"
    "{\"reply\":{\"toolCalls\":[{\"name\":\"exec_command\",\"arguments\":{\"cmd\":"
    "\"echo run >> working/count; wc -l < output/review.md\",\"cwd\":null,\"timeoutMs\":null}}]}},"
    "{\"reply\":{\"content\":\"Review written to output/review.md.\"}}"
    "]}";
#define FULL_APPENDS 16

TEST_T(full_turn_with_several_tool_calls, 60)
{
    struct env e;
    env_start(&e, S_FULL);
    write_spec(&e, "full", SPEC_PLAIN);
    ASSERT_EQ_INT(run_runner(&e, "full", 1, NULL), 0);
    struct evs v;
    read_journal(&e, "full", &v);
    ASSERT_EQ_STR(outcome(&v), "completed");
    ASSERT_EQ_STR(answer(&v), "Review written to output/review.md.");
    ASSERT_EQ_INT(v.n, FULL_APPENDS);
    assert_steps_once(&v, 4);
    ASSERT_EQ_INT(count(&v, "tool_call"), 3);
    ASSERT_EQ_INT(count(&v, "tool_result"), 3);
    /* the exec's output went back to the model */
    ASSERT_CONTAINS(str(last(&v, "tool_result"), "output"), "exit code: 0\nstdout:\n2\n");
    char p[400];
    snprintf(p, sizeof p, "%s/output/review.md", e.ws);
    char *review = read_text(p);
    ASSERT_EQ_STR(review, "# Review\nLooks good.\n");
    free(review);
    /* the deliverables are listed for status.result.artifacts */
    const cJSON *arts = json_get(last(&v, "turn_finished"), "artifacts");
    ASSERT_EQ_INT(cJSON_GetArraySize(arts), 1);
    ASSERT_EQ_STR(cJSON_GetArrayItem(arts, 0)->valuestring, "output/review.md");
    /* usage and cost were recorded (fake-* prices in examples/model-prices.json) */
    int64_t cost = 0;
    json_item_int64(json_get(json_get(last(&v, "model_response"), "usage"), "cost_micro_usd"),
                    &cost);
    ASSERT_CMP_INT(cost, >, 0);
    int n, runs;
    executions(&e, "full", &n, &runs);
    ASSERT_EQ_INT(n, 2); /* the PUT and the exec */
    ASSERT_EQ_INT(runs, 2);
    /* the system prompt carried simple.md; the request bodies are official-schema valid */
    char *rec = read_text(e.record);
    ASSERT_CONTAINS(rec, "Prefer small commits.");
    free(rec);
    char *cmd = xasprintf("/usr/bin/python3 tests/integration/openai_schema.py %s >/dev/null",
                          e.record);
    int st = system(cmd);
    free(cmd);
    ASSERT_TRUE(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 77));
    /* a second run of the same turn changes nothing */
    ASSERT_EQ_INT(run_runner(&e, "full", 1, NULL), 0);
    evs_done(&v);
    read_journal(&e, "full", &v);
    ASSERT_EQ_INT(v.n, FULL_APPENDS);
    evs_done(&v);
    env_stop(&e);
}

static const char *S_APPROVE =
    "{\"steps\":["
    "{\"reply\":{\"toolCalls\":[{\"name\":\"exec_command\",\"arguments\":{\"cmd\":"
    "\"echo pushed-ok >> working/pushes\",\"cwd\":null,\"timeoutMs\":null}}]}},"
    "{\"alternatives\":["
    "{\"match\":{\"regex\":\"denied|did not approve\"},\"reply\":{\"content\":\"Not pushed.\"}},"
    "{\"reply\":{\"content\":\"Pushed.\"}}]}"
    "]}";
static const char *SPEC_APPROVE =
    "\"permissions\":{\"tools\":[\"exec_command\",\"read_file\"],"
    "\"requiresApproval\":[\"exec_command:echo pushed*\"]}";

static void approval_flow(const char *uid, const char *decision, const char *want_answer,
                          int want_execs)
{
    struct env e;
    env_start(&e, S_APPROVE);
    write_spec(&e, uid, SPEC_APPROVE);
    ASSERT_EQ_INT(run_runner(&e, uid, 1, NULL), 0);
    struct evs v;
    read_journal(&e, uid, &v);
    ASSERT_EQ_STR(outcome(&v), "approval_requested");
    const cJSON *ar = last(&v, "approval_requested");
    ASSERT_NOT_NULL(ar);
    ASSERT_EQ_STR(str(ar, "summary"), "echo pushed-ok >> working/pushes");
    char id[64];
    snprintf(id, sizeof id, "%s", str(ar, "id"));
    ASSERT_TRUE(strncmp(id, "ap-", 3) == 0);
    ASSERT_EQ_INT(count(&v, "tool_call"), 0);
    evs_done(&v);
    /* turn 2 before any decision: still waiting, nothing runs */
    ASSERT_EQ_INT(run_runner(&e, uid, 2, NULL), 0);
    read_journal(&e, uid, &v);
    ASSERT_EQ_STR(outcome(&v), "approval_requested");
    ASSERT_EQ_INT(count(&v, "approval_requested"), 1); /* the same request, not a new one */
    evs_done(&v);

    append_decision(&e, uid, id, decision);
    ASSERT_EQ_INT(run_runner(&e, uid, 3, NULL), 0);
    read_journal(&e, uid, &v);
    ASSERT_EQ_STR(outcome(&v), "completed");
    ASSERT_EQ_STR(answer(&v), want_answer);
    int n, runs;
    executions(&e, uid, &n, &runs);
    ASSERT_EQ_INT(n, want_execs);
    char p[400];
    snprintf(p, sizeof p, "%s/working/pushes", e.ws);
    ASSERT_EQ_INT(count_lines(p), want_execs);
    evs_done(&v);
    env_stop(&e);
}

TEST_T(objective_journaled_by_the_operator_is_sent_once, 60)
{
    struct env e;
    env_start(&e, S_FULL);
    char *members = xasprintf("%s,\"messages\":[\"also check the tests\"]", SPEC_PLAIN);
    write_spec(&e, "objective", members);
    free(members);
    /* what the operator writes into a fresh journal */
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "source", "objective");
    json_add_string(d, "text", "Review the change in input/ and write output/review.md");
    append_event(&e, "objective", JOURNAL_EV_USER_MESSAGE, d);
    ASSERT_EQ_INT(run_runner(&e, "objective", 1, NULL), 0);
    char *rec = read_text(e.record);
    ASSERT_NOT_NULL(rec);
    *strchr(rec, '\n') = 0; /* the first request */
    const char *needle = "Review the change in input/ and write output/review.md";
    int n = 0;
    for (const char *p = rec; (p = strstr(p, needle)); p++)
        n++;
    ASSERT_EQ_INT(n, 1);
    /* spec.messages not journaled yet follow the objective */
    const char *obj_at = strstr(rec, needle), *msg_at = strstr(rec, "also check the tests");
    ASSERT_TRUE(obj_at && msg_at && obj_at < msg_at);
    free(rec);
    struct evs v;
    read_journal(&e, "objective", &v);
    ASSERT_EQ_STR(outcome(&v), "completed");
    ASSERT_EQ_INT(count(&v, "user_message"), 2);
    /* a rerun of the next turn does not journal the message again */
    evs_done(&v);
    ASSERT_EQ_INT(run_runner(&e, "objective", 2, NULL), 0);
    read_journal(&e, "objective", &v);
    ASSERT_EQ_INT(count(&v, "user_message"), 2);
    evs_done(&v);
    env_stop(&e);
}

TEST_T(approval_granted_runs_the_call, 60)
{
    approval_flow("appr-yes", "approve", "Pushed.", 1);
}

TEST_T(approval_denied_skips_and_tells_the_model, 60)
{
    approval_flow("appr-no", "deny", "Not pushed.", 0);
}

TEST_T(kill_at_every_step_boundary_then_rerun, 90)
{
    struct env e;
    env_start(&e, S_FULL);
    /* the uninterrupted run is the reference */
    write_spec(&e, "ref", SPEC_PLAIN);
    ASSERT_EQ_INT(run_runner(&e, "ref", 1, NULL), 0);
    struct evs ref;
    read_journal(&e, "ref", &ref);
    ASSERT_EQ_INT(ref.n, FULL_APPENDS);

    /* crash each session right after its k-th append (SIGKILL) ... */
    char uid[32];
    for (int k = 1; k < FULL_APPENDS; k++) {
        snprintf(uid, sizeof uid, "crash-%d", k);
        write_spec(&e, uid, SPEC_PLAIN);
        char hook[64];
        snprintf(hook, sizeof hook, "TERN_TEST_CRASH_AFTER_APPENDS=%d", k);
        const char *extra[] = {hook, NULL};
        ASSERT_EQ_INT(run_runner(&e, uid, 1, extra), 128 + 9);
    }
    /* ... then run each again (each waits for its dead owner's lease) */
    for (int k = 1; k < FULL_APPENDS; k++) {
        snprintf(uid, sizeof uid, "crash-%d", k);
        int rc = run_runner(&e, uid, 1, NULL);
        if (rc != 0)
            th_fail(__FILE__, __LINE__, "k=%d: rerun exit %d", k, rc);
        struct evs v;
        read_journal(&e, uid, &v);
        if (v.n != ref.n)
            th_fail(__FILE__, __LINE__, "k=%d: %zu events, reference %zu", k, v.n, ref.n);
        for (size_t i = 0; i < v.n; i++)
            if (strcmp(v.type[i], ref.type[i]) != 0)
                th_fail(__FILE__, __LINE__, "k=%d: event %zu is %s, reference %s", k, i,
                        v.type[i], ref.type[i]);
        assert_steps_once(&v, 4);
        ASSERT_EQ_STR(answer(&v), answer(&ref));
        int n, runs;
        executions(&e, uid, &n, &runs);
        if (n != 2 || runs != 2)
            th_fail(__FILE__, __LINE__, "k=%d: %d executions, %d runs", k, n, runs);
        evs_done(&v);
    }
    /* the exec ran once per session: reference + 15 */
    char p[400];
    snprintf(p, sizeof p, "%s/working/count", e.ws);
    ASSERT_EQ_INT(count_lines(p), FULL_APPENDS);
    evs_done(&ref);
    env_stop(&e);
}

static const char *S_SLOW_TOOL =
    "{\"steps\":["
    "{\"reply\":{\"toolCalls\":[{\"name\":\"exec_command\",\"arguments\":{\"cmd\":"
    "\"sleep 1; echo run >> working/slow; echo finished\",\"cwd\":null,\"timeoutMs\":null}}]}},"
    "{\"reply\":{\"content\":\"done\"}}]}";

/* Polls the journal until it holds an event of type (bounded). */
static void wait_event(struct env *e, const char *uid, const char *type, long timeout_ms)
{
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        struct evs v;
        read_journal(e, uid, &v);
        size_t n = count(&v, type);
        evs_done(&v);
        if (n)
            return;
        if (now_ms() > deadline)
            th_fail(__FILE__, __LINE__, "no %s event within %ld ms", type, timeout_ms);
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Polls until tern-fakellm has recorded n requests (bounded). */
static void wait_model_request(struct env *e, int n)
{
    long long deadline = now_ms() + 15000;
    while (count_lines(e->record) < n) {
        if (now_ms() > deadline)
            th_fail(__FILE__, __LINE__, "the model call never arrived");
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Reruns until exit 0 (75 = retryable, e.g. sandboxd busy with the first
 * request under the key), bounded. */
static void rerun_until_done(struct env *e, const char *uid, int turn, int max_runs)
{
    for (int i = 0; i < max_runs; i++) {
        int rc = run_runner(e, uid, turn, NULL);
        if (rc == 0)
            return;
        if (rc != 75)
            th_fail(__FILE__, __LINE__, "rerun exit %d", rc);
    }
    th_fail(__FILE__, __LINE__, "no clean exit after %d runs", max_runs);
}

TEST_T(kill_in_the_middle_of_a_tool_call, 60)
{
    struct env e;
    env_start(&e, S_SLOW_TOOL);
    write_spec(&e, "midtool", SPEC_PLAIN);
    struct proc p;
    start_runner(&e, &p, "midtool", 1, NULL, NULL);
    wait_event(&e, "midtool", "tool_call", 15000);
    proc_kill(&p); /* sandboxd is running the command now */
    rerun_until_done(&e, "midtool", 1, 10);
    struct evs v;
    read_journal(&e, "midtool", &v);
    ASSERT_EQ_STR(outcome(&v), "completed");
    ASSERT_EQ_STR(answer(&v), "done");
    ASSERT_EQ_INT(count(&v, "tool_call"), 1);
    ASSERT_EQ_INT(count(&v, "tool_result"), 1);
    ASSERT_CONTAINS(str(last(&v, "tool_result"), "output"), "finished");
    assert_steps_once(&v, 2);
    int n, runs;
    executions(&e, "midtool", &n, &runs);
    ASSERT_EQ_INT(n, 1);
    ASSERT_EQ_INT(runs, 1);
    char path[400];
    snprintf(path, sizeof path, "%s/working/slow", e.ws);
    ASSERT_EQ_INT(count_lines(path), 1);
    evs_done(&v);
    env_stop(&e);
}

static const char *S_SLOW_MODEL =
    "{\"steps\":[{\"faults\":[{\"type\":\"slow\",\"ms\":1500}],"
    "\"reply\":{\"content\":\"the answer\"}}]}";

TEST_T(kill_in_the_middle_of_a_model_call, 60)
{
    struct env e;
    env_start(&e, S_SLOW_MODEL);
    write_spec(&e, "midmodel", SPEC_PLAIN);
    struct proc p;
    start_runner(&e, &p, "midmodel", 1, NULL, NULL);
    wait_model_request(&e, 1);
    proc_kill(&p);
    rerun_until_done(&e, "midmodel", 1, 5);
    struct evs v;
    read_journal(&e, "midmodel", &v);
    ASSERT_EQ_STR(outcome(&v), "completed");
    ASSERT_EQ_STR(answer(&v), "the answer");
    ASSERT_EQ_INT(count(&v, "model_request"), 1);
    assert_steps_once(&v, 1);
    /* the cut-off call was paid again, once */
    ASSERT_EQ_INT(count_lines(e.record), 2);
    evs_done(&v);
    env_stop(&e);
}

TEST_T(two_runners_on_one_turn, 60)
{
    struct env e;
    env_start(&e, S_FULL);
    write_spec(&e, "two", SPEC_PLAIN);
    struct proc a, b;
    start_runner(&e, &a, "two", 1, NULL, "runner-a.log");
    start_runner(&e, &b, "two", 1, NULL, "runner-b.log");
    ASSERT_EQ_INT(proc_wait(&a, 60000), 0);
    ASSERT_EQ_INT(proc_wait(&b, 60000), 0);
    struct evs v;
    read_journal(&e, "two", &v);
    ASSERT_EQ_INT(v.n, FULL_APPENDS);
    ASSERT_EQ_INT(count(&v, "turn_started"), 1);
    ASSERT_EQ_INT(count(&v, "turn_finished"), 1);
    assert_steps_once(&v, 4);
    /* exactly one of them did the work; the other found the turn done */
    char pa[400], pb[400];
    snprintf(pa, sizeof pa, "%s/runner-a.log", e.dir);
    snprintf(pb, sizeof pb, "%s/runner-b.log", e.dir);
    char *la = read_text(pa), *lb = read_text(pb);
    bool a_idle = strstr(la, "\"steps\":0,") != NULL;
    bool b_idle = strstr(lb, "\"steps\":0,") != NULL;
    ASSERT_TRUE(a_idle != b_idle);
    ASSERT_EQ_INT(count_lines(e.record), 4);
    free(la);
    free(lb);
    evs_done(&v);
    env_stop(&e);
}

TEST_T(limits_end_the_turn, 60)
{
    struct env e;
    env_start(&e, S_FULL);
    write_spec(&e, "lim", "\"permissions\":{\"tools\":[\"exec_command\",\"write_file\","
                          "\"list_files\"]},\"limits\":{\"maxToolCalls\":1}");
    ASSERT_EQ_INT(run_runner(&e, "lim", 1, NULL), 0);
    struct evs v;
    read_journal(&e, "lim", &v);
    ASSERT_EQ_STR(outcome(&v), "limit_reached");
    ASSERT_EQ_STR(str(last(&v, "limit_reached"), "limit"), "maxToolCalls");
    ASSERT_EQ_INT(count(&v, "tool_call"), 1);
    evs_done(&v);
    /* the next turn stops at once: still over the limit */
    ASSERT_EQ_INT(run_runner(&e, "lim", 2, NULL), 0);
    read_journal(&e, "lim", &v);
    ASSERT_EQ_STR(outcome(&v), "limit_reached");
    ASSERT_EQ_INT(count(&v, "tool_call"), 1);
    evs_done(&v);
    env_stop(&e);
}

static const char *S_MALFORMED =
    "{\"steps\":[{\"reply\":{\"raw\":\"this is not json\"}}]}";
static const char *S_BAD_JSON =
    "{\"steps\":["
    "{\"faults\":[\"bad_tool_json\"],\"reply\":{\"toolCalls\":[{\"name\":\"list_files\","
    "\"arguments\":{\"path\":\".\",\"depth\":null}}]}},"
    "{\"match\":{\"contains\":\"not valid JSON\"},\"reply\":{\"content\":\"recovered\"}}]}";
static const char *S_CONTEXT =
    "{\"steps\":[{\"faults\":[{\"type\":\"error\",\"status\":400,\"code\":"
    "\"context_length_exceeded\",\"message\":\"too long\"}],\"reply\":{\"content\":\"x\"}}]}";

TEST_T(malformed_model_output_and_model_errors, 60)
{
    struct env e;
    env_start(&e, S_MALFORMED);
    write_spec(&e, "bad", SPEC_PLAIN);
    ASSERT_EQ_INT(run_runner(&e, "bad", 1, NULL), 0);
    struct evs v;
    read_journal(&e, "bad", &v);
    ASSERT_EQ_STR(outcome(&v), "error");
    ASSERT_EQ_INT(count(&v, "model_response"), 3);
    ASSERT_EQ_STR(str(last(&v, "model_response"), "kind"), "malformed");
    evs_done(&v);
    env_stop(&e);

    env_start(&e, S_BAD_JSON);
    write_spec(&e, "badjson", SPEC_PLAIN);
    ASSERT_EQ_INT(run_runner(&e, "badjson", 1, NULL), 0);
    read_journal(&e, "badjson", &v);
    ASSERT_EQ_STR(outcome(&v), "completed");
    ASSERT_EQ_STR(answer(&v), "recovered");
    ASSERT_EQ_STR(str(last(&v, "tool_result"), "status"), "invalid");
    ASSERT_EQ_INT(count(&v, "tool_call"), 0);
    evs_done(&v);
    env_stop(&e);

    env_start(&e, S_CONTEXT);
    write_spec(&e, "ctx", SPEC_PLAIN);
    ASSERT_EQ_INT(run_runner(&e, "ctx", 1, NULL), 0);
    read_journal(&e, "ctx", &v);
    ASSERT_EQ_STR(outcome(&v), "error");
    ASSERT_EQ_STR(str(last(&v, "turn_finished"), "reason"), "context_length_exceeded");
    ASSERT_EQ_STR(str(last(&v, "error"), "code"), "context_length_exceeded");
    evs_done(&v);
    env_stop(&e);
}

static const char *S_OVERLOADED =
    "{\"steps\":[{\"faults\":[\"500\",\"500\",\"500\"],\"reply\":{\"content\":\"finally\"}}]}";

TEST_T(model_overloaded_is_retryable, 60)
{
    struct env e;
    env_start(&e, S_OVERLOADED);
    write_spec(&e, "busy", SPEC_PLAIN);
    const char *extra[] = {"TERN_MODEL_MAX_RETRIES=1", NULL};
    /* two 500s: the retry budget is spent, exit 75, the request stays open */
    ASSERT_EQ_INT(run_runner(&e, "busy", 1, extra), 75);
    struct evs v;
    read_journal(&e, "busy", &v);
    ASSERT_EQ_INT(count(&v, "model_request"), 1);
    ASSERT_EQ_INT(count(&v, "model_response"), 0);
    evs_done(&v);
    /* the Job's next attempt: one more 500, then the answer */
    ASSERT_EQ_INT(run_runner(&e, "busy", 1, extra), 0);
    read_journal(&e, "busy", &v);
    ASSERT_EQ_STR(answer(&v), "finally");
    ASSERT_EQ_INT(count(&v, "model_request"), 1);
    ASSERT_EQ_INT(count_lines(e.record), 4);
    evs_done(&v);
    env_stop(&e);
}

static const char *S_OUTAGE =
    "{\"steps\":["
    "{\"faults\":[{\"type\":\"slow\",\"ms\":1500}],\"reply\":{\"toolCalls\":[{\"name\":"
    "\"list_files\",\"arguments\":{\"path\":\".\",\"depth\":null}}]}},"
    "{\"reply\":{\"content\":\"survived\"}}]}";

TEST_T(etcd_briefly_unavailable, 90)
{
    struct env e;
    env_start(&e, S_OUTAGE);
    write_spec(&e, "outage", SPEC_PLAIN);
    const char *extra[] = {"TERN_LOCK_TTL_SECONDS=15", NULL};
    struct proc p;
    start_runner(&e, &p, "outage", 1, extra, NULL);
    wait_model_request(&e, 1);
    /* etcd goes away while the model answers; the outage (3 s) outlasts the
     * model call, so the runner's next append meets it */
    ASSERT_OK(etcd_fixture_kill(&e.etcd));
    struct timespec outage = {3, 0};
    nanosleep(&outage, NULL);
    struct tern_err err = {0};
    if (etcd_fixture_restart(&e.etcd, &err))
        th_fail(__FILE__, __LINE__, "etcd restart: %s", err.msg);
    ASSERT_EQ_INT(proc_wait(&p, 60000), 0);
    struct evs v;
    read_journal(&e, "outage", &v);
    ASSERT_EQ_STR(outcome(&v), "completed");
    ASSERT_EQ_STR(answer(&v), "survived");
    assert_steps_once(&v, 2);
    evs_done(&v);
    env_stop(&e);
}

/* ---- crashes at the narrow moments (issue 25) -------------------------- */

/* Starts tern-sandboxd again on the same address and workspace. */
static void sandboxd_restart(struct env *e)
{
    char bin[300], log[300], addr[256];
    struct tern_err err = {0};
    snprintf(addr, sizeof addr, "%s", e->sbx.addr);
    snprintf(bin, sizeof bin, "%s/bin/tern-sandboxd", proc_build_dir());
    snprintf(log, sizeof log, "%s/sandboxd.log", e->dir);
    char *sargv[] = {bin, "--listen", addr, "--token-file", e->token, "--workspace", e->ws,
                     "--log-level", "warn", NULL};
    long long deadline = now_ms() + 10000;
    /* the old socket may linger for a moment */
    while (proc_start_server(&e->sbx, sargv, "ready addr=", log, 10000, &err) != 0) {
        if (now_ms() > deadline)
            th_fail(__FILE__, __LINE__, "sandboxd restart: %s", err.msg);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* sandboxd's record status of the first key of uid with op, or "". */
static void record_status(struct env *e, const char *uid, const char *op, char *out, size_t n)
{
    struct httpc *h = httpc_new();
    char url[400];
    snprintf(url, sizeof url, "http://%s/v1/executions", e->sbx.addr);
    const char *hdrs[] = {"Authorization: Bearer " TOKEN, NULL};
    struct httpc_request req = {.url = url, .headers = hdrs, .timeout_ms = 10000};
    struct httpc_response resp = {0};
    struct tern_err err = {0};
    snprintf(out, n, "%s", "");
    if (httpc_do(h, &req, &resp, &err) == 0 && resp.status == 200) {
        cJSON *j = NULL;
        if (json_parse(buf_str(&resp.body), resp.body.len, &j, NULL) == 0) {
            const cJSON *arr = json_get(j, "executions");
            size_t ul = strlen(uid);
            for (const cJSON *it = arr ? arr->child : NULL; it; it = it->next) {
                const char *k = str(it, "key"), *o = str(it, "op");
                if (k && o && strncmp(k, uid, ul) == 0 && k[ul] == '/' && strcmp(o, op) == 0) {
                    snprintf(out, n, "%s", str(it, "status") ? str(it, "status") : "");
                    break;
                }
            }
        }
        cJSON_Delete(j);
    }
    httpc_response_done(&resp);
    httpc_free(h);
}

static const char *S_WRITE =
    "{\"steps\":["
    "{\"reply\":{\"toolCalls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":"
    "\"working/notes.md\",\"content\":\"0123456789abcdefghijklmnopqrstuvwxyz0123456789\","
    "\"append\":null}}]}},"
    "{\"alternatives\":["
    "{\"match\":{\"contains\":\"interrupted\"},\"reply\":{\"content\":\"the write was cut off\"}},"
    "{\"reply\":{\"content\":\"notes written\"}}]}"
    "]}";

TEST_T(runner_killed_mid_upload_then_the_retry_writes, 60)
{
    struct env e;
    env_start(&e, S_WRITE);
    write_spec(&e, "midup", SPEC_PLAIN);
    const char *hook[] = {"TERN_TEST_HOOK=upload:stop", NULL};
    struct proc p;
    start_runner(&e, &p, "midup", 1, hook, NULL);
    ASSERT_OK(proc_wait_stopped(&p, 20000));
    /* half the body is out: sandboxd holds the write's started record */
    char st[32];
    long long deadline = now_ms() + 10000;
    do {
        record_status(&e, "midup", "put", st, sizeof st);
    } while (strcmp(st, "started") != 0 && now_ms() < deadline);
    ASSERT_EQ_STR(st, "started");
    proc_kill(&p); /* the runner dies mid-body; its connection closes */
    /* the next attempt writes the file (before: 409 busy on every attempt,
     * until sandboxd restarted) */
    ASSERT_EQ_INT(run_runner(&e, "midup", 1, NULL), 0);
    struct evs v;
    read_journal(&e, "midup", &v);
    ASSERT_EQ_STR(outcome(&v), "completed");
    ASSERT_EQ_STR(answer(&v), "notes written");
    ASSERT_EQ_STR(str(last(&v, "tool_result"), "status"), "completed");
    ASSERT_EQ_INT(count(&v, "tool_call"), 1);
    char path[400];
    snprintf(path, sizeof path, "%s/working/notes.md", e.ws);
    char *text = read_text(path);
    ASSERT_EQ_STR(text, "0123456789abcdefghijklmnopqrstuvwxyz0123456789");
    free(text);
    int n, runs;
    executions(&e, "midup", &n, &runs);
    ASSERT_EQ_INT(n, 1);
    ASSERT_EQ_INT(runs, 1);
    evs_done(&v);
    env_stop(&e);
}

TEST_T(sandboxd_killed_mid_upload_is_journaled_as_interrupted, 60)
{
    struct env e;
    env_start(&e, S_WRITE);
    write_spec(&e, "sbxup", SPEC_PLAIN);
    const char *hook[] = {"TERN_TEST_HOOK=upload:stop", NULL};
    struct proc p;
    start_runner(&e, &p, "sbxup", 1, hook, NULL);
    ASSERT_OK(proc_wait_stopped(&p, 20000));
    char st[32];
    long long deadline = now_ms() + 10000;
    do {
        record_status(&e, "sbxup", "put", st, sizeof st);
    } while (strcmp(st, "started") != 0 && now_ms() < deadline);
    ASSERT_EQ_STR(st, "started");
    /* sandboxd dies while the body is in flight; it comes back on the
     * same workspace with the record turned "interrupted" */
    proc_kill(&e.sbx);
    sandboxd_restart(&e);
    proc_kill(&p);
    ASSERT_EQ_INT(run_runner(&e, "sbxup", 1, NULL), 0);
    struct evs v;
    read_journal(&e, "sbxup", &v);
    /* reported and journaled as interrupted, never as written */
    const cJSON *res = last(&v, "tool_result");
    ASSERT_EQ_STR(str(res, "status"), "interrupted");
    ASSERT_CONTAINS(str(res, "output"), "interrupted");
    ASSERT_TRUE(strstr(str(res, "output"), "ok: written") == NULL);
    ASSERT_EQ_STR(answer(&v), "the write was cut off");
    evs_done(&v);
    env_stop(&e);
}

TEST_T(prompt_parts_unreadable_is_retryable, 60)
{
    struct env e;
    env_start(&e, S_FULL);
    write_spec(&e, "noprompt", SPEC_PLAIN);
    /* sandboxd answers, but simple.md cannot be read (a directory in its
     * place: not a 404): no prompt without it, so no model call */
    char md[400], aside[420];
    snprintf(md, sizeof md, "%s/simple.md", e.ws);
    snprintf(aside, sizeof aside, "%s.aside", md);
    ASSERT_EQ_INT(rename(md, aside), 0);
    ASSERT_EQ_INT(mkdir(md, 0755), 0);
    ASSERT_EQ_INT(run_runner(&e, "noprompt", 1, NULL), 75);
    ASSERT_EQ_INT(rmdir(md), 0);
    ASSERT_EQ_INT(rename(aside, md), 0);
    /* a runner (re)started while sandboxd is down: it waits for /readyz
     * (TERN_SANDBOX_WAIT_MS), then exits retryable */
    proc_kill(&e.sbx);
    const char *short_wait[] = {"TERN_SANDBOX_WAIT_MS=1500", NULL};
    ASSERT_EQ_INT(run_runner(&e, "noprompt", 1, short_wait), 75);
    struct evs v;
    read_journal(&e, "noprompt", &v);
    ASSERT_EQ_INT(count(&v, "model_response"), 0);
    ASSERT_EQ_INT(count_lines(e.record), 0);
    evs_done(&v);
    sandboxd_restart(&e);
    ASSERT_EQ_INT(run_runner(&e, "noprompt", 1, NULL), 0);
    read_journal(&e, "noprompt", &v);
    ASSERT_EQ_STR(outcome(&v), "completed");
    ASSERT_EQ_INT(count(&v, "model_request"), 4);
    char *rec = read_text(e.record);
    ASSERT_CONTAINS(rec, "Prefer small commits.");
    free(rec);
    evs_done(&v);
    env_stop(&e);
    /* a workspace that truly has no simple.md: the prompt says so */
    env_start(&e, S_FULL);
    char p[400];
    snprintf(p, sizeof p, "%s/simple.md", e.ws);
    unlink(p);
    write_spec(&e, "nomemory", SPEC_PLAIN);
    ASSERT_EQ_INT(run_runner(&e, "nomemory", 1, NULL), 0);
    rec = read_text(e.record);
    ASSERT_CONTAINS(rec, "This session has no simple.md.");
    ASSERT_CONTAINS(rec, "This session has no skills/.");
    free(rec);
    env_stop(&e);
}

static const char *S_ONE =
    "{\"steps\":[{\"reply\":{\"content\":\"lease kept\"}}]}";

TEST_T(etcd_down_when_the_runner_asks_for_its_lease, 90)
{
    struct env e;
    env_start(&e, S_ONE);
    write_spec(&e, "nolease", SPEC_PLAIN);
    /* etcd is gone when the runner starts; it is back within the journal's
     * 30 s budget, which the lease grant now shares */
    ASSERT_OK(etcd_fixture_kill(&e.etcd));
    struct proc p;
    start_runner(&e, &p, "nolease", 1, NULL, NULL);
    struct timespec outage = {3, 0};
    nanosleep(&outage, NULL);
    struct tern_err err = {0};
    if (etcd_fixture_restart(&e.etcd, &err))
        th_fail(__FILE__, __LINE__, "etcd restart: %s", err.msg);
    ASSERT_EQ_INT(proc_wait(&p, 60000), 0);
    struct evs v;
    read_journal(&e, "nolease", &v);
    ASSERT_EQ_STR(answer(&v), "lease kept");
    evs_done(&v);
    env_stop(&e);
}

/* ---- compaction: snapshots written by the runner ----------------------- */

static char *turns_script(int n)
{
    struct buf b;
    buf_init(&b, 1u << 20);
    buf_puts(&b, "{\"steps\":[");
    for (int i = 0; i < n; i++)
        buf_printf(&b,
                   "%s{\"reply\":{\"toolCalls\":[{\"name\":\"exec_command\",\"arguments\":"
                   "{\"cmd\":\"echo turn %d\",\"cwd\":null,\"timeoutMs\":null}}]}},"
                   "{\"reply\":{\"content\":\"turn %d done\"}}",
                   i ? "," : "", i + 1, i + 1);
    buf_puts(&b, "]}");
    return buf_steal(&b);
}

/* The idx-th line of a file (owned), or NULL. */
static char *nth_line(const char *text, int idx)
{
    const char *p = text;
    for (int i = 0; p && i < idx; i++) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!p || !*p)
        return NULL;
    return xstrndup(p, strcspn(p, "\n"));
}

static size_t count_keys(struct env *e, const char *prefix)
{
    const char *eps[] = {e->etcd.url};
    struct etcd *c = NULL;
    struct tern_err err = {0};
    struct etcd_range_resp rr = {0};
    if (etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1}, &c, &err) ||
        etcd_range(c, &(struct etcd_range_req){.keys = {.key = prefix, .prefix = true},
                                                .count_only = true},
                   &rr, &err))
        th_fail(__FILE__, __LINE__, "count %s: %s", prefix, err.msg);
    size_t n = (size_t)rr.count;
    etcd_range_resp_done(&rr);
    etcd_free(c);
    return n;
}

TEST_T(snapshots_compact_and_resume_exactly, 180)
{
    enum { TURNS = 12 };
    char *script = turns_script(TURNS);
    struct env e;
    env_start(&e, script);
    free(script);
    const char *uids[] = {"snap", "flat"};
    const char *every[] = {"TERN_SNAPSHOT_EVENTS=10", "TERN_SNAPSHOT_EVENTS=0"};
    for (int u = 0; u < 2; u++) {
        write_spec(&e, uids[u], SPEC_PLAIN);
        const char *extra[] = {every[u], NULL};
        for (int turn = 1; turn <= TURNS; turn++) {
            if (turn > 1) { /* the operator's follow-up message */
                cJSON *d = cJSON_CreateObject();
                json_add_string(d, "source", "spec.messages");
                json_add_int64(d, "index", turn - 2);
                char text[32];
                snprintf(text, sizeof text, "now turn %d", turn);
                json_add_string(d, "text", text);
                append_event(&e, uids[u], JOURNAL_EV_USER_MESSAGE, d);
            }
            int rc = run_runner(&e, uids[u], turn, extra);
            if (rc != 0)
                th_fail(__FILE__, __LINE__, "%s turn %d: exit %d", uids[u], turn, rc);
        }
    }
    /* every request the model saw is the same with and without compaction */
    char *rec = read_text(e.record);
    for (int i = 0; i < 2 * TURNS; i++) {
        char *a = nth_line(rec, i), *b = nth_line(rec, 2 * TURNS + i);
        if (!a || !b || strcmp(a, b) != 0)
            th_fail(__FILE__, __LINE__, "request %d differs with compaction", i);
        free(a);
        free(b);
    }
    ASSERT_EQ_INT(count_lines(e.record), 4 * TURNS);
    free(rec);
    /* the compacted journal: snapshots, older events gone, the same usage */
    const char *eps[] = {e.etcd.url};
    struct etcd *c = NULL;
    struct journal *js = NULL, *jf = NULL;
    struct tern_err err = {0};
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1}, &c, &err));
    ASSERT_OK(journal_open(c, "snap", NULL, &js, &err));
    ASSERT_OK(journal_open(c, "flat", NULL, &jf, &err));
    const struct journal_summary *ss = journal_summary(js), *sf = journal_summary(jf);
    ASSERT_CMP_INT(ss->snapshot_seq, >, 0);
    ASSERT_EQ_INT(sf->snapshot_seq, 0);
    ASSERT_EQ_INT(ss->usage.model_turns, sf->usage.model_turns);
    ASSERT_EQ_INT(ss->usage.tool_calls, sf->usage.tool_calls);
    ASSERT_EQ_INT(ss->messages, sf->messages);
    ASSERT_EQ_STR(ss->result, sf->result);
    ASSERT_EQ_INT(journal_replay(js, 1, NULL, NULL, NULL, &err), TERN_ECOMPACTED);
    struct evs tail;
    read_journal_from(&e, "snap", JOURNAL_FROM_SNAPSHOT, &tail);
    ASSERT_EQ_STR(tail.type[0], "snapshot");
    ASSERT_EQ_STR(answer(&tail), "turn 12 done");
    evs_done(&tail);
    size_t kept = count_keys(&e, "/tern/v1/s/snap/ev/");
    size_t all = count_keys(&e, "/tern/v1/s/flat/ev/");
    ASSERT_EQ_INT(all, sf->last_seq);
    /* kept: the latest snapshot and the events since: under `every`
     * events plus one turn (9 events) plus the snapshot */
    ASSERT_CMP_INT(kept, <=, 10 + 9 + 1);
    ASSERT_CMP_INT(kept, <, all / 2);
    journal_free(js);
    journal_free(jf);
    etcd_free(c);
    /* each command ran once per session */
    int n, runs;
    executions(&e, "snap", &n, &runs);
    ASSERT_EQ_INT(runs, TURNS);
    executions(&e, "flat", &n, &runs);
    ASSERT_EQ_INT(runs, TURNS);
    env_stop(&e);
}

/* ---- size limits: what etcd would refuse is never sent ----------------- */

/* A text of n bytes cycling through the alphabet (JSON-safe), starting
 * with a marker found nowhere else ("#<first>-begin"). */
static char *alphabet(size_t n, char first)
{
    char *t = xmalloc(n + 1);
    for (size_t i = 0; i < n; i++)
        t[i] = (char)('a' + (first - 'a' + i) % 26);
    memcpy(t, "#?-begin", 8);
    t[1] = first;
    t[n] = 0;
    return t;
}

/* True when hay holds text (found through its marker: strstr of a long
 * periodic needle is far too slow). */
static bool holds(const char *hay, const char *text)
{
    char mark[9];
    memcpy(mark, text, 8);
    mark[8] = 0;
    const char *at = strstr(hay, mark);
    return at && strncmp(at, text, strlen(text)) == 0;
}

struct sizes {
    size_t max_value, nkeys, bytes;
};

/* Every key of a session: the largest value, the count, key+value bytes. */
static void session_sizes(struct env *e, const char *uid, struct sizes *ret)
{
    const char *eps[] = {e->etcd.url};
    struct etcd *c = NULL;
    struct tern_err err = {0};
    struct etcd_range_resp rr = {0};
    char *p = xasprintf("/tern/v1/s/%s/", uid);
    char *end = xasprintf("/tern/v1/s/%s0", uid), *from = xstrdup(p);
    if (etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1}, &c, &err))
        th_fail(__FILE__, __LINE__, "etcd: %s", err.msg);
    memset(ret, 0, sizeof *ret);
    for (bool more = true; more;) { /* pages small enough for one reply */
        if (etcd_range(c, &(struct etcd_range_req){.keys = {.key = from, .range_end = end},
                                                    .limit = 8},
                       &rr, &err))
            th_fail(__FILE__, __LINE__, "range %s: %s", p, err.msg);
        for (size_t i = 0; i < rr.nkvs; i++) {
            if (rr.kvs[i].value_len > ret->max_value)
                ret->max_value = rr.kvs[i].value_len;
            ret->bytes += strlen(rr.kvs[i].key) + rr.kvs[i].value_len;
        }
        ret->nkeys += rr.nkvs;
        more = rr.more && rr.nkvs;
        if (more) {
            free(from);
            from = xasprintf("%s\x01", rr.kvs[rr.nkvs - 1].key);
        }
        etcd_range_resp_done(&rr);
    }
    etcd_free(c);
    free(p);
    free(end);
    free(from);
}

/* The last line of a file (owned), read whole whatever its size. */
static char *last_line(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *line = NULL, *keep = NULL;
    size_t cap = 0;
    ssize_t k;
    while ((k = getline(&line, &cap, f)) > 0) {
        free(keep);
        keep = xstrndup(line, (size_t)k);
    }
    free(line);
    fclose(f);
    return keep;
}

TEST_T(large_bodies_stay_under_the_etcd_request_limit, 180)
{
    /* a 50 MiB command output, a 3 MiB file write and an answer near the
     * model client's 4 MiB response bound, against an etcd that refuses
     * requests over 1.5 MiB (its default) */
    size_t wlen = 3u << 20, alen = (size_t)(3.8 * (1 << 20));
    char *wtext = alphabet(wlen, 'a'), *atext = alphabet(alen, 'q');
    struct buf sc;
    buf_init(&sc, 16u << 20);
    buf_printf(&sc,
               "{\"steps\":["
               "{\"reply\":{\"toolCalls\":[{\"name\":\"exec_command\",\"arguments\":{\"cmd\":"
               "\"head -c 52428800 /dev/zero | tr '\\\\\\\\0' x; echo; echo tail-of-output\","
               "\"cwd\":null,\"timeoutMs\":null}}]}},"
               "{\"reply\":{\"toolCalls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":"
               "\"working/big.txt\",\"content\":\"%s\",\"append\":null}}]}},"
               "{\"reply\":{\"content\":\"%s\"}},"
               "{\"reply\":{\"content\":\"second turn\"}}]}",
               wtext, atext);
    struct env e;
    env_start(&e, buf_str(&sc));
    buf_done(&sc);
    /* (the fake model counts ~1M tokens for these bodies: a limit to lift) */
    write_spec(&e, "big", "\"permissions\":{\"tools\":[\"exec_command\",\"write_file\"]},"
                          "\"limits\":{\"maxTokens\":100000000}");
    ASSERT_EQ_INT(run_runner(&e, "big", 1, NULL), 0);
    struct evs v;
    read_journal(&e, "big", &v);
    ASSERT_EQ_STR(outcome(&v), "completed");
    /* the answer is replayed exactly, from chunks */
    ASSERT_EQ_INT(strlen(answer(&v)), alen);
    ASSERT_TRUE(strcmp(answer(&v), atext) == 0); /* (not ASSERT_EQ_STR: 3.8 MiB) */
    /* the 50 MiB output: sandboxd kept 1 MiB, the journal 32 KiB */
    const cJSON *exec_res = NULL;
    for (size_t i = 0; i < v.n; i++)
        if (strcmp(v.type[i], "tool_result") == 0 && !exec_res)
            exec_res = v.data[i];
    ASSERT_NOT_NULL(exec_res);
    ASSERT_CMP_INT(strlen(str(exec_res, "output")), <=, TERN_RUNNER_MAX_OUTPUT + 64);
    ASSERT_CONTAINS(str(exec_res, "output"), "[output truncated]");
    /* the 3 MiB write reached the workspace whole */
    char path[400];
    snprintf(path, sizeof path, "%s/working/big.txt", e.ws);
    char *got = read_text(path);
    ASSERT_NOT_NULL(got);
    ASSERT_EQ_INT(strlen(got), wlen);
    ASSERT_TRUE(strcmp(got, wtext) == 0);
    free(got);
    /* nothing stored is over a value etcd takes; the big ones are chunks */
    struct sizes sz;
    session_sizes(&e, "big", &sz);
    ASSERT_CMP_INT(sz.max_value, <=, TERN_JOURNAL_CHUNK);
    ASSERT_CMP_INT(sz.nkeys, >, v.n + 10);
    printf("    large bodies: %zu events in %zu keys, %.1f MiB, largest value %zu bytes\n", v.n,
           sz.nkeys, sz.bytes / 1048576.0, sz.max_value);
    evs_done(&v);
    /* the next turn replays it all (chunks reassembled, hashes checked) and
     * sends the model exactly what it said: through a snapshot, too */
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "source", "spec.messages");
    json_add_int64(d, "index", 0);
    json_add_string(d, "text", "and now?");
    append_event(&e, "big", JOURNAL_EV_USER_MESSAGE, d);
    const char *extra[] = {"TERN_SNAPSHOT_EVENTS=5", NULL};
    ASSERT_EQ_INT(run_runner(&e, "big", 2, extra), 0);
    read_journal(&e, "big", &v);
    ASSERT_TRUE(strcmp(answer(&v), "second turn") == 0);
    ASSERT_EQ_INT(count(&v, "snapshot"), 0); /* 13 events < 7 MB / 1 KiB */
    ASSERT_EQ_INT(v.n, 17);
    evs_done(&v);
    char *req = last_line(e.record);
    ASSERT_NOT_NULL(req);
    ASSERT_TRUE(holds(req, atext));
    ASSERT_TRUE(holds(req, wtext)); /* the write's arguments, as the model sent them */
    ASSERT_CONTAINS(req, "and now?");
    free(req);
    session_sizes(&e, "big", &sz);
    ASSERT_CMP_INT(sz.max_value, <=, TERN_JOURNAL_CHUNK);
    free(wtext);
    free(atext);
    env_stop(&e);
}
