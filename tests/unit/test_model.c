/* Unit tests: model/chat (request building, response parsing), model/client
 * retry decisions, model/price. */
#include "harness.h"

#include "json/json.h"
#include "model/chat.h"
#include "model/client.h"
#include "model/price.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *SCHEMA = "{\"type\":\"object\",\"properties\":{\"cmd\":{\"type\":\"string\"}},"
                            "\"required\":[\"cmd\"],\"additionalProperties\":false}";

static char *build_sample(void)
{
    struct chat_conv c;
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_SYSTEM, "You are careful.");
    chat_conv_add(&c, CHAT_USER, "list files");
    struct chat_tool_call tc = {"call_1", "exec_command", "{\"cmd\":\"ls\"}"};
    chat_conv_add_assistant(&c, NULL, &tc, 1);
    chat_conv_add_tool(&c, "call_1", "a\nb\n");
    chat_conv_add_assistant(&c, "done", NULL, 0);
    struct chat_tool_def t = {"exec_command", "run a shell command", SCHEMA, true};
    struct chat_options o = {.model = "gpt-test", .max_completion_tokens = 4096,
                             .tool_choice = "auto"};
    char *body = NULL;
    struct tern_err e = {0};
    int rc = chat_build_request(&c, &t, 1, &o, &body, &e);
    chat_conv_done(&c);
    if (rc)
        th_fail(__FILE__, __LINE__, "build: %s", e.msg);
    return body;
}

TEST(build_request_golden)
{
    char *body = build_sample();
    ASSERT_EQ_STR(
        body,
        "{\"model\":\"gpt-test\",\"messages\":["
        "{\"role\":\"system\",\"content\":\"You are careful.\"},"
        "{\"role\":\"user\",\"content\":\"list files\"},"
        "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
        "\"function\":{\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\"}}]},"
        "{\"role\":\"tool\",\"content\":\"a\\nb\\n\",\"tool_call_id\":\"call_1\"},"
        "{\"role\":\"assistant\",\"content\":\"done\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"exec_command\","
        "\"description\":\"run a shell command\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"cmd\":{\"type\":\"string\"}},\"required\":[\"cmd\"],"
        "\"additionalProperties\":false},\"strict\":true}}],"
        "\"tool_choice\":\"auto\",\"parallel_tool_calls\":false,\"max_completion_tokens\":4096}");
    /* deterministic */
    char *again = build_sample();
    ASSERT_EQ_STR(body, again);
    free(again);
    free(body);
}

TEST(build_request_rejects_bad_input)
{
    struct chat_conv c;
    chat_conv_init(&c);
    struct chat_options o = {.model = "m"};
    char *body = NULL;
    struct tern_err e = {0};
    ASSERT_EQ_INT(chat_build_request(&c, NULL, 0, &o, &body, &e), TERN_EINVALID);
    chat_conv_add(&c, CHAT_USER, "hi");
    struct chat_options nomodel = {0};
    ASSERT_EQ_INT(chat_build_request(&c, NULL, 0, &nomodel, &body, &e), TERN_EINVALID);
    struct chat_tool_def bad = {"t", NULL, "[1]", false};
    ASSERT_EQ_INT(chat_build_request(&c, &bad, 1, &o, &body, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "tools[0].parameters");
    struct chat_options badchoice = {.model = "m", .tool_choice = "sometimes"};
    ASSERT_EQ_INT(chat_build_request(&c, NULL, 0, &badchoice, &body, &e), TERN_EINVALID);
    chat_conv_add_tool(&c, NULL, "x");
    ASSERT_EQ_INT(chat_build_request(&c, NULL, 0, &o, &body, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "messages[1]");
    ASSERT_NULL(body);
    chat_conv_done(&c);

    /* no tools: neither tool_choice nor parallel_tool_calls is sent */
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_USER, "hi");
    struct chat_options o2 = {.model = "m", .tool_choice = "auto"};
    ASSERT_OK(chat_build_request(&c, NULL, 0, &o2, &body, &e));
    ASSERT_EQ_STR(body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    free(body);
    chat_conv_done(&c);
}

static const char *KNOWN[] = {"exec_command", "read_file"};

static void parse(const char *body, struct chat_response *r)
{
    ASSERT_OK(chat_parse_response(body, strlen(body), KNOWN, 2, r));
}

TEST(parse_tool_calls_and_usage)
{
    struct chat_response r;
    parse("{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"m\","
          "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":null,"
          "\"refusal\":null,\"tool_calls\":["
          "{\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"exec_command\","
          "\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\"}\"}},"
          "{\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"rm_rf\","
          "\"arguments\":\"{}\"}},"
          "{\"id\":\"call_c\",\"type\":\"function\",\"function\":{\"name\":\"read_file\","
          "\"arguments\":\"{\\\"path\\\": \"}},"
          "{\"id\":\"call_d\",\"type\":\"function\",\"function\":{\"name\":\"read_file\","
          "\"arguments\":\"[1]\"}},"
          "{\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"{}\"}},"
          "{\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"read_file\","
          "\"arguments\":\"{}\"}}"
          "]},\"finish_reason\":\"tool_calls\"}],"
          "\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20,\"total_tokens\":120,"
          "\"prompt_tokens_details\":{\"cached_tokens\":64},"
          "\"completion_tokens_details\":{\"reasoning_tokens\":7}}}",
          &r);
    ASSERT_EQ_INT(r.kind, CHAT_RESP_OK);
    ASSERT_EQ_STR(r.id, "chatcmpl-1");
    ASSERT_NULL(r.content);
    ASSERT_EQ_INT(r.finish, CHAT_FINISH_TOOL_CALLS);
    ASSERT_EQ_INT(r.ncalls, 6);
    ASSERT_EQ_INT(r.nbad, 5);
    ASSERT_EQ_INT(r.calls[0].status, CHAT_CALL_OK);
    ASSERT_EQ_STR(r.calls[0].arguments, "{\"cmd\":\"ls\"}");
    ASSERT_EQ_INT(r.calls[1].status, CHAT_CALL_UNKNOWN_TOOL);
    ASSERT_CONTAINS(r.calls[1].problem, "rm_rf");
    ASSERT_EQ_INT(r.calls[2].status, CHAT_CALL_BAD_JSON);
    ASSERT_EQ_INT(r.calls[3].status, CHAT_CALL_NOT_OBJECT);
    ASSERT_EQ_INT(r.calls[4].status, CHAT_CALL_MISSING_FIELD);
    ASSERT_EQ_STR(r.calls[4].id, "call_missing_4");
    ASSERT_EQ_INT(r.calls[5].status, CHAT_CALL_MISSING_FIELD);
    ASSERT_CONTAINS(r.calls[5].problem, "duplicate");
    ASSERT_TRUE(r.has_usage);
    ASSERT_EQ_INT(r.usage.prompt_tokens, 100);
    ASSERT_EQ_INT(r.usage.completion_tokens, 20);
    ASSERT_EQ_INT(r.usage.total_tokens, 120);
    ASSERT_EQ_INT(r.usage.cached_tokens, 64);
    ASSERT_EQ_INT(r.usage.reasoning_tokens, 7);
    chat_response_done(&r);
}

TEST(parse_text_refusal_empty_malformed)
{
    struct chat_response r;
    parse("{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"hello\"},"
          "\"finish_reason\":\"stop\"}]}",
          &r);
    ASSERT_EQ_INT(r.kind, CHAT_RESP_OK);
    ASSERT_EQ_STR(r.content, "hello");
    ASSERT_EQ_INT(r.finish, CHAT_FINISH_STOP);
    ASSERT_FALSE(r.has_usage);
    chat_response_done(&r);

    parse("{\"choices\":[{\"message\":{\"content\":null,\"refusal\":\"I can't\"},"
          "\"finish_reason\":\"stop\"}]}",
          &r);
    ASSERT_EQ_INT(r.kind, CHAT_RESP_REFUSAL);
    ASSERT_EQ_STR(r.refusal, "I can't");
    chat_response_done(&r);

    parse("{\"choices\":[{\"message\":{\"content\":null},\"finish_reason\":\"length\"}]}", &r);
    ASSERT_EQ_INT(r.kind, CHAT_RESP_EMPTY);
    ASSERT_EQ_INT(r.finish, CHAT_FINISH_LENGTH);
    chat_response_done(&r);

    const char *bad[] = {"", "nonsense", "[]", "{}", "{\"choices\":[]}",
                         "{\"choices\":[{\"finish_reason\":\"stop\"}]}",
                         "{\"choices\":[{\"message\":{\"content\":5}}]}",
                         "{\"choices\":[{\"message\":{\"tool_calls\":{}}}]}",
                         "{\"choices\":[{\"message\":{\"content\":\"x\"}}],\"id\":1,\"id\":2}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        parse(bad[i], &r);
        if (r.kind != CHAT_RESP_MALFORMED)
            th_fail(__FILE__, __LINE__, "case %zu: kind %s", i, chat_kind_str(r.kind));
        ASSERT_NOT_NULL(r.problem);
        chat_response_done(&r);
    }
    ASSERT_EQ_INT(chat_parse_response("{}", (size_t)64 << 20, KNOWN, 2, &r), TERN_ETOOLARGE);
}

TEST(parse_error_bodies)
{
    struct chat_api_error e;
    const char *b = "{\"error\":{\"message\":\"This model's maximum context length is 8192 "
                    "tokens\",\"type\":\"invalid_request_error\",\"param\":\"messages\","
                    "\"code\":\"context_length_exceeded\"}}";
    ASSERT_OK(chat_parse_error(b, strlen(b), &e));
    ASSERT_CONTAINS(e.message, "context length");
    ASSERT_EQ_STR(e.type, "invalid_request_error");
    ASSERT_EQ_STR(e.param, "messages");
    ASSERT_TRUE(chat_error_is_context_length(&e));
    chat_api_error_done(&e);

    b = "{\"error\":{\"message\":\"Rate limit\",\"type\":\"requests\",\"param\":null,"
        "\"code\":null}}";
    ASSERT_OK(chat_parse_error(b, strlen(b), &e));
    ASSERT_NULL(e.code);
    ASSERT_NULL(e.param);
    ASSERT_FALSE(chat_error_is_context_length(&e));
    chat_api_error_done(&e);

    b = "{\"error\":{\"code\":429}}";
    ASSERT_OK(chat_parse_error(b, strlen(b), &e));
    ASSERT_EQ_STR(e.code, "429");
    ASSERT_EQ_STR(e.message, "");
    chat_api_error_done(&e);

    ASSERT_EQ_INT(chat_parse_error("<html>", 6, &e), TERN_EPARSE);
    ASSERT_EQ_INT(chat_parse_error("{\"error\":\"x\"}", 13, &e), TERN_EPARSE);
}

TEST(retry_wanted_table)
{
    static const struct {
        long status;
        const char *should;
        bool want;
    } cases[] = {
        {0, NULL, true},      {200, NULL, false},    {400, NULL, false}, {401, NULL, false},
        {404, NULL, false},   {408, NULL, true},     {409, NULL, true},  {429, NULL, true},
        {500, NULL, true},    {503, NULL, true},     {429, "false", false},
        {400, "true", true},  {500, "maybe", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (model_retry_wanted(cases[i].status, cases[i].should) != cases[i].want)
            th_fail(__FILE__, __LINE__, "case %zu (status %ld)", i, cases[i].status);
}

TEST(retry_delay_table)
{
    struct model_retry_policy p = {0};
    model_retry_defaults(&p);
    ASSERT_EQ_INT(p.max_retries, 2);
    int64_t now;
    ASSERT_OK(model_parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT", &now));
    ASSERT_EQ_INT(now, 784111777000LL);
    ASSERT_EQ_INT(model_parse_http_date("Sun, 06 Nov 1994 08:49:37 UTC", &now), -EINVAL);
    ASSERT_EQ_INT(model_parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", &now), -EINVAL);
    ASSERT_EQ_INT(model_parse_http_date("Sun, 06 Foo 1994 08:49:37 GMT", &now), -EINVAL);

    const int64_t T = 784111777000LL; /* "now" for the HTTP-date cases */
    static const struct {
        int retries;
        const char *ms, *after;
        double jitter;
        long want;
    } cases[] = {
        {0, "1500", NULL, 0.5, 1500},      /* retry-after-ms wins */
        {0, "1500", "9", 0.5, 1500},
        {0, "12.5", NULL, 0, 13},          /* fractional ms rounds up */
        {0, NULL, "2", 0.5, 2000},         /* seconds */
        {0, NULL, "0.25", 0.5, 250},
        {0, NULL, "Sun, 06 Nov 1994 08:49:40 GMT", 0.5, 3000}, /* HTTP date */
        {0, NULL, "Sun, 06 Nov 1994 08:49:30 GMT", 0, 500},    /* past date: backoff */
        {0, NULL, "120", 0, 500},          /* beyond 60 s: ignored, backoff */
        {0, "0", NULL, 0, 500},            /* zero: backoff */
        {0, "-5", NULL, 0, 500},           /* garbage: backoff */
        {0, "abc", "x", 0, 500},
        {0, NULL, NULL, 0, 500},           /* backoff: 500 * 2^n */
        {1, NULL, NULL, 0, 1000},
        {2, NULL, NULL, 0, 2000},
        {3, NULL, NULL, 0, 4000},
        {4, NULL, NULL, 0, 8000},
        {9, NULL, NULL, 0, 8000},          /* capped */
        {9, NULL, NULL, 0.999, 6002},      /* jitter takes up to 25 % off */
        {1, NULL, NULL, 0.5, 875},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        long d = model_retry_delay_ms(&p, cases[i].retries, cases[i].ms, cases[i].after, T,
                                      cases[i].jitter);
        if (d != cases[i].want)
            th_fail(__FILE__, __LINE__, "case %zu: got %ld, expected %ld", i, d, cases[i].want);
    }
}

TEST(price_table_and_cost)
{
    const char *j = "{\"prices\":{"
                    "\"gpt-4o-mini\":{\"input\":150000,\"cachedInput\":75000,\"output\":600000},"
                    "\"gpt-4o*\":{\"input\":2500000,\"cachedInput\":1250000,\"output\":10000000},"
                    "\"gpt-*\":{\"input\":1,\"output\":2},"
                    "\"*\":{\"input\":0,\"output\":0}}}";
    struct price_table t;
    struct tern_err e = {0};
    ASSERT_OK(price_table_parse(j, strlen(j), &t, &e));
    ASSERT_EQ_INT(t.n, 4);
    ASSERT_EQ_STR(price_lookup(&t, "gpt-4o-mini")->model, "gpt-4o-mini");
    ASSERT_EQ_STR(price_lookup(&t, "gpt-4o-2024-08-06")->model, "gpt-4o*");
    ASSERT_EQ_STR(price_lookup(&t, "gpt-5")->model, "gpt-*");
    ASSERT_EQ_STR(price_lookup(&t, "llama")->model, "*");
    ASSERT_EQ_INT(price_lookup(&t, "gpt-5")->cached_input, 1);

    struct chat_usage u = {.prompt_tokens = 1000000, .completion_tokens = 1000000,
                           .cached_tokens = 400000};
    int64_t cost;
    ASSERT_OK(price_cost(price_lookup(&t, "gpt-4o-mini"), &u, &cost));
    /* 600k * 0.15 + 400k * 0.075 + 1M * 0.60 USD-per-M = 90000 + 30000 + 600000 */
    ASSERT_EQ_INT(cost, 720000);
    struct chat_usage one = {.prompt_tokens = 1};
    ASSERT_OK(price_cost(price_lookup(&t, "gpt-4o-mini"), &one, &cost));
    ASSERT_EQ_INT(cost, 1); /* rounded up */
    struct chat_usage huge = {.completion_tokens = INT64_MAX};
    ASSERT_EQ_INT(price_cost(price_lookup(&t, "gpt-4o"), &huge, &cost), -ERANGE);
    price_table_done(&t);

    struct price_table none = {0};
    ASSERT_NULL(price_lookup(&none, "x"));
    const char *bad[] = {"[]", "{}", "{\"prices\":{\"m\":{\"input\":1}}}",
                         "{\"prices\":{\"m\":{\"input\":-1,\"output\":1}}}",
                         "{\"prices\":{\"m\":{\"input\":\"1\",\"output\":1.5}}}",
                         "{\"prices\":{\"\":{\"input\":1,\"output\":1}}}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (price_table_parse(bad[i], strlen(bad[i]), &t, &e) == 0)
            th_fail(__FILE__, __LINE__, "case %zu parsed", i);
}

TEST(example_price_file_parses)
{
    FILE *f = fopen("examples/model-prices.json", "r");
    if (!f)
        TH_SKIP("examples/model-prices.json not found (run from the repo root)");
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    struct price_table t;
    struct tern_err e = {0};
    if (price_table_parse(buf, n, &t, &e))
        th_fail(__FILE__, __LINE__, "%s", e.msg);
    ASSERT_NOT_NULL(price_lookup(&t, "some-unknown-model"));
    price_table_done(&t);
}

/* The price table the chart and the kustomize base install
 * (deploy/base/prices.yaml): the JSON under "prices.json: |". */
TEST(shipped_price_table_parses_and_prices_only_known_models)
{
    FILE *f = fopen("deploy/base/prices.yaml", "r");
    if (!f)
        TH_SKIP("deploy/base/prices.yaml not found (run from the repo root)");
    static char yaml[65536], json[65536];
    size_t n = fread(yaml, 1, sizeof yaml - 1, f);
    fclose(f);
    yaml[n] = 0;
    const char *p = strstr(yaml, "prices.json: |\n");
    ASSERT_NOT_NULL(p);
    p += strlen("prices.json: |\n");
    size_t j = 0;
    while (*p && j < sizeof json - 1) /* block scalar: strip the 4-space indent */
        json[j++] = *p == ' ' && p[1] == ' ' && p[2] == ' ' && p[3] == ' ' &&
                            (p == yaml || p[-1] == '\n')
                        ? (p += 4, *p++)
                        : *p++;
    json[j] = 0;
    struct price_table t;
    struct tern_err e = {0};
    if (price_table_parse(json, j, &t, &e))
        th_fail(__FILE__, __LINE__, "%s", e.msg);
    const struct price_entry *m = price_lookup(&t, "gpt-5.4-mini");
    ASSERT_NOT_NULL(m);
    ASSERT_EQ_INT(m->input, 750000);
    ASSERT_EQ_INT(m->cached_input, 75000);
    ASSERT_EQ_INT(m->output, 4500000);
    /* no fallback: a model without a list price stays unpriced (a session
     * with a cost limit is refused, not run unlimited) */
    ASSERT_NULL(price_lookup(&t, "gpt-5.6-mini"));
    ASSERT_NULL(price_lookup(&t, "fake-e2e"));
    ASSERT_TRUE(t.n >= 10);
    price_table_done(&t);
}
