/* Unit tests: policy/policy (all pure, table-driven; globs: test_glob.c). */
#include "harness.h"

#include "json/json.h"
#include "policy/policy.h"

#include <stdlib.h>
#include <string.h>

TEST(normalize_path_table)
{
    static const struct {
        const char *in, *want; /* want NULL = rejected */
    } cases[] = {
        {"output/a.md", "output/a.md"}, {"./output//a.md", "output/a.md"},
        {"/workspace/output/a", "output/a"}, {"/workspace", "."}, {"/workspace/", "."},
        {"", "."}, {".", "."}, {"a/./b/", "a/b"},
        {"../etc/passwd", NULL}, {"a/../../b", NULL}, {"/etc/passwd", NULL},
        {"/workspacex/a", NULL}, {"a\nb", NULL}, {"..", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out = NULL;
        struct tern_err e = {0};
        int rc = policy_normalize_path(cases[i].in, &out, &e);
        if (cases[i].want) {
            if (rc != 0 || strcmp(out, cases[i].want) != 0)
                th_fail(__FILE__, __LINE__, "case %zu: rc %d out %s", i, rc, out ? out : "-");
        } else if (rc == 0) {
            th_fail(__FILE__, __LINE__, "case %zu: accepted as %s", i, out);
        }
        free(out);
    }
}

TEST(tool_defs_follow_permissions)
{
    struct policy_config cfg = {.tools = (1u << POLICY_EXEC) | (1u << POLICY_LIST)};
    struct chat_tool_def d[POLICY_NTOOLS];
    size_t n = policy_tool_defs(&cfg, d);
    ASSERT_EQ_INT(n, 2);
    ASSERT_EQ_STR(d[0].name, "exec_command");
    ASSERT_EQ_STR(d[1].name, "list_files");
    cfg.tools = 0xf;
    n = policy_tool_defs(&cfg, d);
    ASSERT_EQ_INT(n, 4);
    /* every schema is a strict-mode schema: an object, all properties
     * required, additionalProperties false */
    for (size_t i = 0; i < n; i++) {
        ASSERT_TRUE(d[i].strict);
        cJSON *s = NULL;
        ASSERT_OK(json_parse(d[i].parameters, strlen(d[i].parameters), &s, NULL));
        const cJSON *props = json_get(s, "properties"), *req = json_get(s, "required");
        ASSERT_EQ_INT(cJSON_GetArraySize(props), cJSON_GetArraySize(req));
        ASSERT_TRUE(cJSON_IsFalse(json_get(s, "additionalProperties")));
        cJSON_Delete(s);
    }
    enum policy_tool t;
    ASSERT_OK(policy_tool_from_name("write_file", &t));
    ASSERT_EQ_INT(t, POLICY_WRITE);
    ASSERT_NE_INT(policy_tool_from_name("rm", &t), 0);
}

TEST(parse_args_table)
{
    static const struct {
        enum policy_tool tool;
        const char *args;
        const char *err; /* NULL = accepted; else a substring of the message */
    } cases[] = {
        {POLICY_EXEC, "{\"cmd\":\"ls\"}", NULL},
        {POLICY_EXEC, "{\"cmd\":\"ls\",\"cwd\":null,\"timeoutMs\":null}", NULL},
        {POLICY_EXEC, "{\"cmd\":\"ls\",\"cwd\":\"working\",\"timeoutMs\":5000}", NULL},
        {POLICY_EXEC, "{\"cmd\":\"\"}", "cmd"},
        {POLICY_EXEC, "{\"cmd\":5}", "cmd: must be a string"},
        {POLICY_EXEC, "{}", "cmd: Required value"},
        {POLICY_EXEC, "{\"cmd\":\"ls\",\"sudo\":true}", "unknown member \"sudo\""},
        {POLICY_EXEC, "{\"cmd\":\"ls\",\"timeoutMs\":0}", "timeoutMs"},
        {POLICY_EXEC, "{\"cmd\":\"ls\",\"timeoutMs\":1.5}", "timeoutMs"},
        {POLICY_EXEC, "{\"cmd\":\"ls\",\"cwd\":\"../x\"}", ".."},
        {POLICY_EXEC, "{\"cmd\":\"ls\"", "not valid JSON"},
        {POLICY_EXEC, "[\"ls\"]", "must be a JSON object"},
        {POLICY_READ, "{\"path\":\"input/a\",\"offset\":10,\"limit\":100}", NULL},
        {POLICY_READ, "{\"path\":\"input/a\",\"offset\":-1}", "offset"},
        {POLICY_READ, "{\"path\":\"/etc/shadow\"}", "relative"},
        {POLICY_WRITE, "{\"path\":\"output/r.md\",\"content\":\"x\",\"append\":true}", NULL},
        {POLICY_WRITE, "{\"path\":\"output/r.md\",\"content\":\"x\",\"append\":null}", NULL},
        {POLICY_WRITE, "{\"path\":\"output/r.md\"}", "content: Required value"},
        {POLICY_WRITE, "{\"path\":\".\",\"content\":\"\"}", "must name a file"},
        {POLICY_WRITE, "{\"path\":\"a\",\"content\":\"\",\"append\":\"yes\"}", "append"},
        {POLICY_LIST, "{\"path\":\".\",\"depth\":2}", NULL},
        {POLICY_LIST, "{\"path\":\".\",\"depth\":0}", "depth"},
        {POLICY_LIST, "{\"path\":\".\",\"depth\":1000}", "depth"},
        {POLICY_LIST, "{\"path\":\".\",\"content\":\"x\"}", "unknown member"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct policy_args a;
        struct tern_err e = {0};
        int rc = policy_parse_args(cases[i].tool, cases[i].args, &a, &e);
        if (!cases[i].err) {
            if (rc)
                th_fail(__FILE__, __LINE__, "case %zu rejected: %s", i, e.msg);
            policy_args_done(&a);
        } else if (rc == 0) {
            th_fail(__FILE__, __LINE__, "case %zu accepted", i);
        } else if (!strstr(e.msg, cases[i].err)) {
            th_fail(__FILE__, __LINE__, "case %zu: message \"%s\" lacks \"%s\"", i, e.msg,
                    cases[i].err);
        }
    }
    struct policy_args a;
    ASSERT_OK(policy_parse_args(POLICY_EXEC, "{\"cmd\":\"ls\",\"cwd\":\"./working/\"}", &a, NULL));
    ASSERT_EQ_STR(a.cwd, "working");
    ASSERT_EQ_INT(a.timeout_ms, -1);
    ASSERT_EQ_STR(policy_main_arg(&a), "ls");
    policy_args_done(&a);
    ASSERT_OK(policy_parse_args(POLICY_WRITE,
                                "{\"path\":\"/workspace/output/r.md\",\"content\":\"x\"}", &a,
                                NULL));
    ASSERT_EQ_STR(policy_main_arg(&a), "output/r.md");
    ASSERT_FALSE(a.append);
    policy_args_done(&a);
}

static const char *APPROVAL[] = {"exec_command:git push*", "write_file:output/**"};
static const char *WRITABLE[] = {"working/**", "output/**"};

static void decide(const struct policy_config *cfg, enum policy_tool t, const char *args,
                   struct policy_decision *d)
{
    struct policy_args a;
    struct tern_err e = {0};
    if (policy_parse_args(t, args, &a, &e))
        th_fail(__FILE__, __LINE__, "parse %s: %s", args, e.msg);
    policy_decide(cfg, &a, d);
    policy_args_done(&a);
}

TEST(decide_table)
{
    struct policy_config cfg = {.tools = (1u << POLICY_EXEC) | (1u << POLICY_READ) |
                                         (1u << POLICY_WRITE),
                                .approval = APPROVAL, .napproval = 2,
                                .writable = WRITABLE, .nwritable = 2,
                                .exec_max_timeout_ms = 600000};
    ASSERT_OK(policy_config_validate(&cfg, NULL));
    static const struct {
        enum policy_tool tool;
        const char *args;
        enum policy_verdict want;
        int64_t timeout;
    } cases[] = {
        {POLICY_EXEC, "{\"cmd\":\"git status\"}", POLICY_ALLOW, 120000},
        {POLICY_EXEC, "{\"cmd\":\"git push origin fix\"}", POLICY_NEEDS_APPROVAL, 120000},
        {POLICY_EXEC, "{\"cmd\":\"make\",\"timeoutMs\":300000}", POLICY_ALLOW, 300000},
        {POLICY_EXEC, "{\"cmd\":\"make\",\"timeoutMs\":9000000}", POLICY_ALLOW, 600000},
        {POLICY_EXEC, "{\"cmd\":\"make\",\"timeoutMs\":1000}", POLICY_ALLOW, 1000},
        {POLICY_READ, "{\"path\":\"input/x\"}", POLICY_ALLOW, 30000},
        {POLICY_WRITE, "{\"path\":\"working/x\",\"content\":\"\"}", POLICY_ALLOW, 30000},
        {POLICY_WRITE, "{\"path\":\"output/r.md\",\"content\":\"\"}", POLICY_NEEDS_APPROVAL,
         30000},
        {POLICY_WRITE, "{\"path\":\"input/x\",\"content\":\"\"}", POLICY_DENY, 30000},
        {POLICY_WRITE, "{\"path\":\"task.md\",\"content\":\"\"}", POLICY_DENY, 30000},
        {POLICY_LIST, "{\"path\":\".\"}", POLICY_DENY, 30000}, /* not permitted */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct policy_decision d;
        decide(&cfg, cases[i].tool, cases[i].args, &d);
        if (d.verdict != cases[i].want || d.timeout_ms != cases[i].timeout)
            th_fail(__FILE__, __LINE__, "case %zu: verdict %d timeout %lld", i, d.verdict,
                    (long long)d.timeout_ms);
    }
    struct policy_decision d;
    decide(&cfg, POLICY_EXEC, "{\"cmd\":\"git push origin fix\"}", &d);
    ASSERT_EQ_STR(d.pattern, "exec_command:git push*");
    decide(&cfg, POLICY_EXEC, "{\"cmd\":\"make\",\"timeoutMs\":9000000}", &d);
    ASSERT_TRUE(d.timeout_clamped);
    decide(&cfg, POLICY_WRITE, "{\"path\":\"input/x\",\"content\":\"\"}", &d);
    ASSERT_CONTAINS(d.reason, "not writable");
    decide(&cfg, POLICY_LIST, "{\"path\":\".\"}", &d);
    ASSERT_CONTAINS(d.reason, "not permitted");

    /* without a spec bound a requested exec timeout is capped at the default */
    cfg.exec_max_timeout_ms = 0;
    decide(&cfg, POLICY_EXEC, "{\"cmd\":\"make\",\"timeoutMs\":300000}", &d);
    ASSERT_EQ_INT(d.timeout_ms, 120000);
}

TEST(config_validation)
{
    const char *bad1[] = {"git push*"};
    const char *bad2[] = {"rm_rf:*"};
    const char *bad3[] = {"exec_command:[x"};
    struct policy_config cfg = {.approval = bad1, .napproval = 1};
    struct tern_err e = {0};
    ASSERT_EQ_INT(policy_config_validate(&cfg, &e), TERN_EINVALID);
    cfg.approval = bad2;
    ASSERT_EQ_INT(policy_config_validate(&cfg, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "rm_rf");
    cfg.approval = bad3;
    ASSERT_EQ_INT(policy_config_validate(&cfg, &e), TERN_EINVALID);
    cfg.napproval = 0;
    cfg.writable = bad3;
    cfg.nwritable = 1;
    ASSERT_EQ_INT(policy_config_validate(&cfg, &e), TERN_EINVALID);
}

TEST(limits_table)
{
    struct policy_limits l = {.max_model_turns = 3, .max_tool_calls = 5, .max_tokens = 1000,
                              .max_cost_micro_usd = 500, .timeout_ms = 60000};
    static const struct {
        struct policy_usage u;
        enum policy_stage stage;
        enum policy_limit want;
    } cases[] = {
        {{0, 0, 0, 0, 0}, POLICY_BEFORE_MODEL, POLICY_LIMIT_NONE},
        {{2, 4, 999, 499, 59999}, POLICY_BEFORE_MODEL, POLICY_LIMIT_NONE},
        {{3, 0, 0, 0, 0}, POLICY_BEFORE_MODEL, POLICY_LIMIT_MODEL_TURNS},
        {{3, 0, 0, 0, 0}, POLICY_BEFORE_TOOL, POLICY_LIMIT_NONE},
        {{0, 5, 0, 0, 0}, POLICY_BEFORE_TOOL, POLICY_LIMIT_TOOL_CALLS},
        {{0, 5, 0, 0, 0}, POLICY_BEFORE_MODEL, POLICY_LIMIT_NONE},
        {{0, 0, 1000, 0, 0}, POLICY_BEFORE_TOOL, POLICY_LIMIT_TOKENS},
        {{0, 0, 0, 500, 0}, POLICY_BEFORE_MODEL, POLICY_LIMIT_COST},
        {{0, 0, 0, 0, 60000}, POLICY_BEFORE_TOOL, POLICY_LIMIT_TIME},
        {{9, 9, 9999, 9999, 99999}, POLICY_BEFORE_MODEL, POLICY_LIMIT_MODEL_TURNS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        enum policy_limit got = policy_check_limits(&l, &cases[i].u, cases[i].stage);
        if (got != cases[i].want)
            th_fail(__FILE__, __LINE__, "case %zu: got %s expected %s", i, policy_limit_name(got),
                    policy_limit_name(cases[i].want));
    }
    struct policy_limits none = {0};
    struct policy_usage big = {1000000, 1000000, 1000000000, 1000000000, 1000000000};
    ASSERT_EQ_INT(policy_check_limits(&none, &big, POLICY_BEFORE_MODEL), POLICY_LIMIT_NONE);
    ASSERT_EQ_STR(policy_limit_name(POLICY_LIMIT_COST), "maxCostMicroUSD");
}
