/* Unit tests: the trusted tools' pure parts: the policy of publish_branch
 * and MCP tools (parsing, approval patterns, decisions, definitions), the
 * plan of such calls, the credentials' loading (runner/config), the runner
 * pod's mounts (controller/children) and publish's helpers. */
#include "harness.h"

#include "base/mem.h"
#include "controller/children.h"
#include "json/json.h"
#include "policy/policy.h"
#include "runner/config.h"
#include "runner/plan.h"
#include "runner/publish.h"
#include "runner/replay.h"
#include "runner/trusted.h"
#include "spec/session_spec.h"
#include "yaml/yamljson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *REMOTES[] = {"origin", "mirror"};
static const struct policy_mcp_tool MCP[] = {
    {"tracker__create_issue", "tracker", "create_issue", "Create an issue",
     "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\"},\"project\":{\"type\":"
     "\"string\"}},\"required\":[\"title\"],\"additionalProperties\":false}",
     30000},
    {"tracker__search", "tracker", "search", "Search", "{\"type\":\"object\"}", 30000},
};

static struct policy_config config(const char *const *approval, size_t napproval)
{
    static const char *writable[] = {"working/**", "output/**"};
    struct policy_config pc = {
        .tools = 0xfu | (1u << POLICY_PUBLISH) | (1u << POLICY_MCP),
        .approval = approval,
        .napproval = napproval,
        .writable = writable,
        .nwritable = 2,
        .remotes = REMOTES,
        .nremotes = 2,
        .mcp = MCP,
        .nmcp = 2,
    };
    return pc;
}

TEST(publish_arguments_are_validated)
{
    struct policy_config pc = config(NULL, 0);
    static const struct {
        const char *args, *err; /* err NULL = accepted */
    } t[] = {
        {"{\"repo\":\"working/"
         "repo\",\"branch\":\"fix\",\"remote\":\"origin\",\"remoteBranch\":null}",
         NULL},
        {"{\"repo\":\"/workspace/working/repo/\",\"branch\":\"fix/typo\",\"remote\":\"mirror\","
         "\"remoteBranch\":\"review/fix-typo\"}",
         NULL},
        {"{\"repo\":\"working/repo\",\"branch\":\"fix\",\"remote\":\"elsewhere\"}",
         "remote: \"elsewhere\" is not configured (remotes: origin, mirror)"},
        {"{\"repo\":\"../x\",\"branch\":\"fix\",\"remote\":\"origin\"}", "\"..\" is not allowed"},
        {"{\"repo\":\"working/repo\",\"branch\":\"-f\",\"remote\":\"origin\"}",
         "branch: \"-f\" is not a valid branch name"},
        {"{\"repo\":\"working/repo\",\"branch\":\"fix\",\"remote\":\"origin\",\"remoteBranch\":"
         "\"a..b\"}",
         "remoteBranch: \"a..b\" is not a valid branch name"},
        {"{\"repo\":\"working/repo\",\"branch\":\"fix\",\"remote\":\"origin\",\"force\":true}",
         "unknown member \"force\""},
        {"{\"branch\":\"fix\",\"remote\":\"origin\"}", "repo: Required value"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        struct policy_args a = {0};
        struct tern_err e = {0};
        int rc = policy_parse_call(&pc, "publish_branch", t[i].args, &a, &e);
        if (t[i].err ? rc != TERN_EINVALID || !strstr(e.msg, t[i].err) : rc != 0)
            th_fail(__FILE__, __LINE__, "case %zu: rc %d \"%s\"", i, rc, e.msg);
        if (rc == 0 && i == 1) {
            ASSERT_EQ_STR(a.path, "working/repo");
            ASSERT_EQ_STR(a.branch, "fix/typo");
            ASSERT_EQ_STR(a.remote_branch, "review/fix-typo");
            ASSERT_EQ_STR(policy_main_arg(&a), "mirror/review/fix-typo");
            char *sum = policy_summary(&a);
            ASSERT_EQ_STR(sum, "push branch fix/typo of working/repo to mirror as review/fix-typo");
            free(sum);
        }
        if (rc == 0 && i == 0)
            ASSERT_EQ_STR(a.remote_branch, "fix");
        policy_args_done(&a);
    }
    static const char *bad[] = {"",     "a b",  "a:b", "x.lock", "a/.b", "a//b",
                                "@",    "a@{b", "a~1", "a^",     "a?",   "a[",
                                "a\\b", "/a",   "a/",  "a.",     ".a",   "a/b.lock/c"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (policy_branch_ok(bad[i]))
            th_fail(__FILE__, __LINE__, "branch \"%s\" accepted", bad[i]);
    ASSERT_TRUE(policy_branch_ok("feature/x-1_2.3"));
    ASSERT_TRUE(policy_branch_ok("fix"));
}

TEST(mcp_calls_resolve_only_offered_tools)
{
    struct policy_config pc = config(NULL, 0);
    struct policy_args a = {0};
    struct tern_err e = {0};
    ASSERT_OK(policy_parse_call(&pc, "tracker__create_issue",
                                "{ \"title\" : \"bug\", \"project\":\"prod\" }", &a, &e));
    ASSERT_EQ_INT(a.tool, POLICY_MCP);
    ASSERT_EQ_STR(a.mcp->tool, "create_issue");
    ASSERT_EQ_STR(a.json, "{\"title\":\"bug\",\"project\":\"prod\"}");
    char *sum = policy_summary(&a);
    ASSERT_EQ_STR(sum, "tracker/create_issue {\"title\":\"bug\",\"project\":\"prod\"}");
    free(sum);
    struct policy_decision d;
    policy_decide(&pc, &a, &d);
    ASSERT_EQ_INT(d.verdict, POLICY_ALLOW);
    ASSERT_EQ_INT(d.timeout_ms, 30000);
    policy_args_done(&a);
    /* its schema is applied */
    ASSERT_EQ_INT(policy_parse_call(&pc, "tracker__create_issue", "{}", &a, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "title: Required value");
    /* a tool the catalog does not have (not allowed, or not listed) */
    ASSERT_EQ_INT(policy_parse_call(&pc, "tracker__delete_all", "{}", &a, &e), TERN_ENOTFOUND);
    ASSERT_EQ_INT(policy_parse_call(&pc, "mcp", "{}", &a, &e), TERN_ENOTFOUND);
    /* without the catalog's bit, MCP calls are denied */
    pc.tools &= ~(1u << POLICY_MCP);
    ASSERT_OK(policy_parse_call(&pc, "tracker__search", "{\"q\":1}", &a, &e));
    policy_decide(&pc, &a, &d);
    ASSERT_EQ_INT(d.verdict, POLICY_DENY);
    ASSERT_CONTAINS(d.reason, "tracker__search is not permitted");
    policy_args_done(&a);
}

TEST(approval_patterns_for_trusted_tools)
{
    static const char *rules[] = {"publish_branch:origin/release/*",
                                  "mcp:tracker/create_*:*\"project\":\"prod\"*",
                                  "mcp:tracker/search:*secret*"};
    struct policy_config pc = config(rules, 3);
    ASSERT_OK(policy_config_validate(&pc, NULL));
    static const struct {
        const char *name, *args;
        bool needs;
        const char *pattern;
    } t[] = {
        {"publish_branch",
         "{\"repo\":\"working/r\",\"branch\":\"x\",\"remote\":\"origin\",\"remoteBranch\":"
         "\"release/1.2\"}",
         true, "publish_branch:origin/release/*"},
        {"publish_branch", "{\"repo\":\"working/r\",\"branch\":\"x\",\"remote\":\"origin\"}", false,
         NULL},
        {"publish_branch",
         "{\"repo\":\"working/r\",\"branch\":\"x\",\"remote\":\"mirror\",\"remoteBranch\":"
         "\"release/1\"}",
         false, NULL},
        {"tracker__create_issue", "{\"title\":\"t\",\"project\":\"prod\"}", true,
         "mcp:tracker/create_*:*\"project\":\"prod\"*"},
        {"tracker__create_issue", "{\"title\":\"t\",\"project\":\"dev\"}", false, NULL},
        {"tracker__search", "{\"q\":\"the secret\"}", true, "mcp:tracker/search:*secret*"},
        {"tracker__search", "{\"q\":\"x\"}", false, NULL},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        struct policy_args a = {0};
        struct tern_err e = {0};
        if (policy_parse_call(&pc, t[i].name, t[i].args, &a, &e))
            th_fail(__FILE__, __LINE__, "case %zu: %s", i, e.msg);
        struct policy_decision d;
        policy_decide(&pc, &a, &d);
        if ((d.verdict == POLICY_NEEDS_APPROVAL) != t[i].needs ||
            (t[i].pattern && strcmp(d.pattern, t[i].pattern) != 0))
            th_fail(__FILE__, __LINE__, "case %zu: verdict %d pattern %s", i, d.verdict,
                    d.pattern ? d.pattern : "-");
        policy_args_done(&a);
    }
    /* a server of another name never matches */
    static const struct policy_mcp_tool other = {
        "docs__create_x", "docs", "create_x", "", "{}", 1000};
    struct policy_args a = {
        .tool = POLICY_MCP, .mcp = &other, .json = xstrdup("{\"project\":\"prod\"}")};
    ASSERT_FALSE(policy_pattern_matches(rules[1], &a));
    policy_args_done(&a);
    /* malformed MCP rules are refused */
    static const char *bad1[] = {"mcp:tracker"}, *bad2[] = {"mcp:/x:y"}, *bad3[] = {"mcp:t/[x:y"};
    struct policy_config b = config(bad1, 1);
    ASSERT_EQ_INT(policy_config_validate(&b, NULL), TERN_EINVALID);
    b = config(bad2, 1);
    ASSERT_EQ_INT(policy_config_validate(&b, NULL), TERN_EINVALID);
    b = config(bad3, 1);
    ASSERT_EQ_INT(policy_config_validate(&b, NULL), TERN_EINVALID);
}

TEST(definitions_offered)
{
    struct policy_config pc = config(NULL, 0);
    char *schema = policy_publish_schema(REMOTES, 2);
    pc.publish_schema = schema;
    struct chat_tool_def d[POLICY_MAX_DEFS];
    size_t n = policy_tool_defs(&pc, d);
    ASSERT_EQ_INT(n, 5);
    ASSERT_EQ_STR(d[4].name, "publish_branch");
    ASSERT_TRUE(d[4].strict);
    cJSON *s = NULL;
    ASSERT_OK(json_parse(d[4].parameters, strlen(d[4].parameters), &s, NULL));
    const cJSON *en = json_get(json_get(json_get(s, "properties"), "remote"), "enum");
    ASSERT_EQ_INT(cJSON_GetArraySize(en), 2);
    ASSERT_EQ_STR(cJSON_GetArrayItem(en, 1)->valuestring, "mirror");
    /* strict mode: every property required */
    ASSERT_EQ_INT(cJSON_GetArraySize(json_get(s, "properties")),
                  cJSON_GetArraySize(json_get(s, "required")));
    cJSON_Delete(s);
    size_t m = policy_mcp_defs(&pc, d + n, POLICY_MAX_DEFS - n);
    ASSERT_EQ_INT(m, 2);
    ASSERT_EQ_STR(d[n].name, "tracker__create_issue");
    ASSERT_FALSE(d[n].strict);
    /* no remotes, no MCP bit: only the sandbox tools */
    pc.tools = 0xf;
    ASSERT_EQ_INT(policy_tool_defs(&pc, d), 4);
    ASSERT_EQ_INT(policy_mcp_defs(&pc, d, POLICY_MAX_DEFS), 0);
    free(schema);
}

/* ---- the plan ------------------------------------------------------------ */

static void ev(struct replay_state *s, const char *type, const char *data)
{
    cJSON *d = NULL;
    if (json_parse(data, strlen(data), &d, NULL) != 0)
        th_fail(__FILE__, __LINE__, "bad test data %s", data);
    struct replay_event e = {s->last_seq + 1, type, 1, NULL, d, "2026-11-30T00:00:00Z"};
    struct tern_err err = {0};
    if (replay_apply(s, &e, &err) != 0)
        th_fail(__FILE__, __LINE__, "apply %s: %s", type, err.msg);
    cJSON_Delete(d);
}

TEST(plan_asks_before_an_mcp_call_and_runs_it_after)
{
    static const char *rules[] = {"mcp:tracker/create_*:*"};
    struct policy_config pc = config(rules, 1);
    struct plan_input in = {.uid = "uid-1", .turn = 1, .policy = &pc, .now_ms = 1000};
    struct replay_state s;
    replay_state_init(&s);
    ev(&s, "turn_started", "{\"turn\":1}");
    ev(&s, "model_request", "{\"step\":0}");
    ev(&s, "model_response",
       "{\"step\":0,\"kind\":\"ok\",\"toolCalls\":[{\"id\":\"c1\",\"name\":\"tracker__create_"
       "issue\",\"arguments\":\"{\\\"title\\\":\\\"bug\\\"}\",\"status\":\"ok\"}]}");
    struct plan p;
    plan_next(&s, &in, &p);
    ASSERT_EQ_INT(p.action, PLAN_REQUEST_APPROVAL);
    ASSERT_EQ_STR(p.summary, "tracker/create_issue {\"title\":\"bug\"}");
    ASSERT_EQ_STR(p.decision.pattern, "mcp:tracker/create_*:*");
    char id[20];
    snprintf(id, sizeof id, "%s", p.approval_id);
    plan_done(&p);
    char *req =
        xasprintf("{\"id\":\"%s\",\"callId\":\"c1\",\"tool\":\"tracker__create_issue\"}", id);
    ev(&s, "approval_requested", req);
    free(req);
    char *dec = xasprintf("{\"id\":\"%s\",\"decision\":\"approved\"}", id);
    ev(&s, "approval_decided", dec);
    free(dec);
    plan_next(&s, &in, &p);
    ASSERT_EQ_INT(p.action, PLAN_TOOL_START);
    ASSERT_EQ_INT(p.tool, POLICY_MCP);
    ASSERT_EQ_INT(p.decision.timeout_ms, 30000);
    plan_done(&p);
    ev(&s, "tool_call", "{\"callId\":\"c1\",\"tool\":\"tracker__create_issue\"}");
    plan_next(&s, &in, &p);
    ASSERT_EQ_INT(p.action, PLAN_TOOL_EXECUTE);
    plan_done(&p);
    /* after a restart without the catalog (a server that stopped listing the
     * tool), a started call is answered, not run blindly */
    pc.nmcp = 0;
    plan_next(&s, &in, &p);
    ASSERT_EQ_INT(p.action, PLAN_TOOL_REFUSE);
    ASSERT_CONTAINS(p.output, "no longer offered");
    plan_done(&p);
    replay_state_done(&s);
}

/* ---- credentials --------------------------------------------------------- */

static void put(const char *dir, const char *rel, const char *text)
{
    char *p = xasprintf("%s/%s", dir, rel);
    for (char *s = strchr(p + strlen(dir) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        mkdir(p, 0755);
        *s = '/';
    }
    FILE *f = fopen(p, "w");
    ASSERT_NOT_NULL(f);
    fputs(text, f);
    fclose(f);
    free(p);
}

static int parse_spec(const char *json, struct runner_spec *ret)
{
    cJSON *j = NULL;
    if (json_parse(json, strlen(json), &j, NULL))
        th_fail(__FILE__, __LINE__, "bad JSON");
    struct tern_err e = {0};
    int rc = runner_spec_parse(j, ret, &e);
    cJSON_Delete(j);
    return rc;
}

#define SPEC_TOOLS                                                                                 \
    "{\"objective\":\"x\",\"tools\":{\"mcpServers\":[{\"name\":\"tracker\",\"url\":"               \
    "\"http://127.0.0.1:1/mcp\",\"headersSecretRef\":{\"name\":\"t\"},\"allowedTools\":[\"a\"]}]," \
    "\"publish\":{\"remotes\":[{\"name\":\"origin\",\"url\":\"http://127.0.0.1:1/r.git\","         \
    "\"tokenSecretRef\":{\"name\":\"g\",\"key\":\"token\"}}]}}}"

TEST(credentials_load_and_are_redacted)
{
    const char *dir = th_tmpdir();
    put(dir, "mcp/tracker/Authorization", "Bearer mcp-T0ken-abcdef\n");
    put(dir, "mcp/tracker/X-Team", "platform");
    put(dir, "mcp/tracker/..data", "kubelet's own"); /* skipped */
    put(dir, "publish/origin/token", "git-T0ken-123456\r\n");
    struct runner_spec sp = {0};
    ASSERT_OK(parse_spec(SPEC_TOOLS, &sp));
    ASSERT_EQ_INT(sp.nmcp, 1);
    ASSERT_EQ_INT(sp.nremotes, 1);
    ASSERT_EQ_STR(sp.remotes[0].username, "x-access-token");
    struct sanitize san;
    sanitize_init(&san);
    struct tern_err e = {0};
    ASSERT_OK(runner_trusted_load(&sp, dir, &san, &e));
    ASSERT_EQ_INT(sp.mcp[0].nheaders, 2);
    ASSERT_EQ_STR(sp.mcp[0].headers[0], "Authorization: Bearer mcp-T0ken-abcdef");
    ASSERT_EQ_STR(sp.mcp[0].headers[1], "X-Team: platform");
    ASSERT_EQ_STR(sp.remotes[0].token, "git-T0ken-123456");
    const char *text = "auth=Bearer mcp-T0ken-abcdef token mcp-T0ken-abcdef git git-T0ken-123456 "
                       "basic eC1hY2Nlc3MtdG9rZW46Z2l0LVQwa2VuLTEyMzQ1Ng== team platform";
    char *out = sanitize_text(&san, text, strlen(text), 0, NULL);
    ASSERT_EQ_STR(out, "auth=[redacted] token [redacted] git [redacted] basic [redacted] team "
                       "[redacted]");
    free(out);
    /* the scheme of an Authorization header is not a secret */
    out = sanitize_text(&san, "WWW-Authenticate: Bearer realm=x", 32, 0, NULL);
    ASSERT_EQ_STR(out, "WWW-Authenticate: Bearer realm=x");
    free(out);
    sanitize_done(&san);
    /* a header that cannot be sent, a missing Secret, a short token */
    sanitize_init(&san);
    put(dir, "mcp/tracker/Content-Type", "text/plain");
    ASSERT_EQ_INT(runner_trusted_load(&sp, dir, &san, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "Content-Type cannot be sent");
    sanitize_done(&san);
    runner_spec_done(&sp);
    ASSERT_OK(parse_spec(SPEC_TOOLS, &sp));
    sanitize_init(&san);
    ASSERT_EQ_INT(runner_trusted_load(&sp, "/nonexistent", &san, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "are not mounted");
    sanitize_done(&san);
    runner_spec_done(&sp);
    const char *dir2 = xasprintf("%s/two", dir);
    mkdir(dir2, 0755);
    put(dir2, "mcp/tracker/Authorization", "Bearer abcdefgh");
    put(dir2, "publish/origin/token", "abc\n");
    ASSERT_OK(parse_spec(SPEC_TOOLS, &sp));
    sanitize_init(&san);
    ASSERT_EQ_INT(runner_trusted_load(&sp, dir2, &san, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "at least 4 bytes");
    sanitize_done(&san);
    runner_spec_done(&sp);
    free((char *)dir2);
    /* the policy view offers publish_branch */
    ASSERT_OK(parse_spec(SPEC_TOOLS, &sp));
    struct policy_config pc;
    runner_spec_policy(&sp, &pc);
    ASSERT_TRUE(pc.tools & (1u << POLICY_PUBLISH));
    ASSERT_FALSE(pc.tools & (1u << POLICY_MCP)); /* until the catalog is listed */
    ASSERT_EQ_INT(pc.nremotes, 1);
    ASSERT_EQ_STR(pc.remotes[0], "origin");
    runner_spec_done(&sp);
}

/* ---- the runner pod ------------------------------------------------------ */

TEST(turn_job_mounts_the_trusted_secrets_and_the_sandbox_does_not)
{
    ASSERT_EQ_STR(CHILDREN_TRUSTED_DIR, RUNNER_TRUSTED_DIR);
    char *text = NULL;
    FILE *f = fopen("examples/trusted-tools.yaml", "r");
    ASSERT_NOT_NULL(f);
    text = xmalloc(1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = 0;
    fclose(f);
    cJSON *doc = NULL;
    ASSERT_OK(yamljson_parse_one(text, n, NULL, &doc, NULL));
    free(text);
    cJSON *md = (cJSON *)json_get(doc, "metadata");
    json_add_string(md, "uid", "u-1");
    struct session_spec *s = NULL;
    ASSERT_OK(session_spec_parse(doc, &s, NULL));
    cJSON_Delete(doc);
    struct children_config c = {.runner_image = "r",
                                .sandbox_image = "s",
                                .etcd_endpoints = "http://e",
                                .runner_service_account = "tern-runner",
                                .turn_backoff_limit = 4,
                                .job_ttl_seconds = 3600};
    cJSON *job = children_turn_job(s, &c, 1, NULL);
    char *j = json_print(job);
    ASSERT_CONTAINS(j, "\"name\":\"mcp-tracker\",\"secret\":{\"secretName\":\"tracker-mcp\"}");
    ASSERT_CONTAINS(j, "\"secretName\":\"github-push\",\"items\":[{\"key\":\"token\",\"path\":"
                       "\"token\"}]");
    ASSERT_CONTAINS(j, "\"mountPath\":\"/var/run/tern/trusted/mcp/tracker\",\"readOnly\":true");
    ASSERT_CONTAINS(j, "\"mountPath\":\"/var/run/tern/trusted/publish/origin\"");
    ASSERT_CONTAINS(j, "\"name\":\"tmp\",\"emptyDir\":{}");
    free(j);
    cJSON_Delete(job);
    cJSON *pod = children_sandbox_pod(s, &c);
    j = json_print(pod);
    if (strstr(j, "tracker-mcp") || strstr(j, "github-push") || strstr(j, "/var/run/tern/trusted"))
        th_fail(__FILE__, __LINE__, "the sandbox pod references a trusted Secret: %s", j);
    free(j);
    cJSON_Delete(pod);
    session_spec_free(s);
}

/* ---- publish's helpers --------------------------------------------------- */

TEST(publish_helpers)
{
    const char *w1[] = {"working/**", "output/**"};
    char *d = publish_bundle_dir(w1, 2);
    ASSERT_EQ_STR(d, "working");
    free(d);
    const char *w2[] = {"output/reports/*.md"};
    d = publish_bundle_dir(w2, 1);
    ASSERT_EQ_STR(d, "output/reports");
    free(d);
    const char *w3[] = {"working/a*"};
    d = publish_bundle_dir(w3, 1);
    ASSERT_EQ_STR(d, "working");
    free(d);
    d = publish_bundle_dir(NULL, 0);
    ASSERT_EQ_STR(d, "working");
    free(d);
    char *q = publish_shell_quote("it's $HOME");
    ASSERT_EQ_STR(q, "'it'\\''s $HOME'");
    free(q);
    char k1[40], k2[40], k3[40];
    trusted_idempotency_key("uid-1", "call_1", k1);
    trusted_idempotency_key("uid-1", "call_1", k2);
    trusted_idempotency_key("uid-1", "call_2", k3);
    ASSERT_EQ_STR(k1, k2);
    ASSERT_TRUE(strcmp(k1, k3) != 0);
    ASSERT_EQ_INT(strlen(k1), 37);
    ASSERT_TRUE(strncmp(k1, "tern-", 5) == 0);
    ASSERT_TRUE(strstr(k1, "uid-1") == NULL);
}
