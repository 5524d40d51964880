/* Integration tests: the model client (real request builder, retries,
 * response parsing) against tern-fakellm, and the recorded request bodies
 * validated against the official OpenAPI schema
 * (#/components/schemas/CreateChatCompletionRequest) by
 * tests/integration/openai_schema.py. */
#include "harness.h"

#include "../support/proc_fixture.h"

#include "base/mem.h"
#include "model/chat.h"
#include "model/client.h"
#include "policy/policy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

struct fake {
    struct proc p;
    char base[300];  /* http://ADDR/v1 */
    char record[512];
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Starts tern-fakellm with script text (tests/support/proc_fixture). */
static void fake_start(struct fake *f, const char *script)
{
    char path[512], bin[512];
    snprintf(path, sizeof path, "%s/script.json", th_tmpdir());
    FILE *s = fopen(path, "w");
    ASSERT_NOT_NULL(s);
    fputs(script, s);
    fclose(s);
    snprintf(f->record, sizeof f->record, "%s/record.jsonl", th_tmpdir());
    snprintf(bin, sizeof bin, "%s/bin/tern-fakellm", proc_build_dir());
    char *argv[] = {bin, "--script", path, "--listen", "127.0.0.1:0", "--record", f->record,
                    NULL};
    struct tern_err err = {0};
    if (proc_start_server(&f->p, argv, "tern-fakellm listening ", NULL, 10000, &err))
        th_fail(__FILE__, __LINE__, "%s", err.msg);
    snprintf(f->base, sizeof f->base, "http://%s/v1", f->p.addr);
}

static void fake_stop(struct fake *f)
{
    proc_stop(&f->p);
}

/* Injected sleep: records the delays instead of sleeping. */
struct sleeps {
    long d[32];
    int n;
};

static void fake_sleep(void *ctx, long ms)
{
    struct sleeps *s = ctx;
    if (s->n < 32)
        s->d[s->n++] = ms;
}

static double zero_rand(void *ctx)
{
    (void)ctx;
    return 0.0;
}

static const char *KNOWN[] = {"exec_command", "read_file", "write_file", "list_files"};

/* One call of a one-user-message conversation through the real builder. */
static int call_once(const struct fake *f, struct sleeps *sl, long timeout_ms, int max_retries,
                     long max_total_ms, struct model_call_result *res, struct tern_err *err)
{
    struct chat_conv c;
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_USER, "hello");
    struct chat_options o = {.model = "fake-model"};
    char *body = NULL;
    ASSERT_OK(chat_build_request(&c, NULL, 0, &o, &body, NULL));
    struct model_client_config cfg = {
        .base_url = f->base,
        .api_key = "sk-test",
        .organization = "org-test",
        .project = "proj-test",
        .timeout_ms = timeout_ms,
        .retry = {.max_retries = max_retries, .max_total_ms = max_total_ms},
        .sleep_ms = fake_sleep,
        .rand01 = zero_rand,
        .ctx = sl,
    };
    struct model_client *mc = model_client_new(&cfg);
    int rc = model_client_call(mc, body, strlen(body), res, err);
    model_client_free(mc);
    free(body);
    chat_conv_done(&c);
    return rc;
}

static const char *REPLY_OK = "\"reply\":{\"content\":\"hi there\"}";

TEST(retry_429_with_retry_after_seconds)
{
    struct fake f = {0};
    char *s = xasprintf("{\"steps\":[{\"faults\":[{\"type\":\"429\",\"retryAfter\":\"1\"}],%s}]}",
                        REPLY_OK);
    fake_start(&f, s);
    struct sleeps sl = {0};
    struct model_call_result r;
    ASSERT_OK(call_once(&f, &sl, 5000, 2, 0, &r, NULL));
    ASSERT_EQ_INT(r.status, 200);
    ASSERT_EQ_INT(r.attempts, 2);
    ASSERT_EQ_INT(sl.n, 1);
    ASSERT_EQ_INT(sl.d[0], 1000);
    ASSERT_EQ_STR(r.request_id, "req_fake_2");
    struct chat_response cr;
    ASSERT_OK(chat_parse_response(r.body, r.body_len, KNOWN, 4, &cr));
    ASSERT_EQ_INT(cr.kind, CHAT_RESP_OK);
    ASSERT_EQ_STR(cr.content, "hi there");
    chat_response_done(&cr);
    model_call_result_done(&r);
    fake_stop(&f);
    free(s);
}

TEST(retry_429_with_retry_after_ms_and_http_date)
{
    struct fake f = {0};
    char *s = xasprintf("{\"steps\":[{\"faults\":[{\"type\":\"429\",\"retryAfterMs\":\"250\"},"
                        "{\"type\":\"429\",\"retryAfter\":\"Thu, 01 Jan 1970 00:00:00 GMT\"}],"
                        "%s}]}",
                        REPLY_OK);
    fake_start(&f, s);
    struct sleeps sl = {0};
    struct model_call_result r;
    ASSERT_OK(call_once(&f, &sl, 5000, 2, 0, &r, NULL));
    ASSERT_EQ_INT(r.status, 200);
    ASSERT_EQ_INT(r.attempts, 3);
    ASSERT_EQ_INT(sl.n, 2);
    ASSERT_EQ_INT(sl.d[0], 250);
    ASSERT_EQ_INT(sl.d[1], 1000); /* a date in the past: backoff 500 * 2^1 */
    model_call_result_done(&r);
    fake_stop(&f);
    free(s);
}

TEST(retry_500_backoff_then_give_up)
{
    struct fake f = {0};
    char *s = xasprintf("{\"steps\":[{\"faults\":[\"500\",\"500\",\"500\"],%s}]}", REPLY_OK);
    fake_start(&f, s);
    struct sleeps sl = {0};
    struct model_call_result r;
    /* two retries: the third answer is still a 500 and is returned as final */
    ASSERT_OK(call_once(&f, &sl, 5000, 2, 0, &r, NULL));
    ASSERT_EQ_INT(r.status, 500);
    ASSERT_EQ_INT(r.attempts, 3);
    ASSERT_EQ_INT(sl.n, 2);
    ASSERT_EQ_INT(sl.d[0], 500);
    ASSERT_EQ_INT(sl.d[1], 1000);
    struct chat_api_error e;
    ASSERT_OK(chat_parse_error(r.body, r.body_len, &e));
    ASSERT_EQ_STR(e.type, "server_error");
    chat_api_error_done(&e);
    model_call_result_done(&r);
    /* the fourth request of this step gets the reply */
    struct sleeps sl2 = {0};
    ASSERT_OK(call_once(&f, &sl2, 5000, 2, 0, &r, NULL));
    ASSERT_EQ_INT(r.status, 200);
    ASSERT_EQ_INT(r.attempts, 1);
    model_call_result_done(&r);
    fake_stop(&f);
    free(s);
}

TEST(no_retry_when_server_says_so)
{
    struct fake f = {0};
    char *s = xasprintf(
        "{\"steps\":[{\"faults\":[{\"type\":\"500\",\"shouldRetry\":\"false\"}],%s}]}", REPLY_OK);
    fake_start(&f, s);
    struct sleeps sl = {0};
    struct model_call_result r;
    ASSERT_OK(call_once(&f, &sl, 5000, 2, 0, &r, NULL));
    ASSERT_EQ_INT(r.status, 500);
    ASSERT_EQ_INT(r.attempts, 1);
    ASSERT_EQ_INT(sl.n, 0);
    model_call_result_done(&r);
    fake_stop(&f);
    free(s);
}

TEST(retry_dropped_connection)
{
    struct fake f = {0};
    char *s = xasprintf("{\"steps\":[{\"faults\":[\"drop\"],%s}]}", REPLY_OK);
    fake_start(&f, s);
    struct sleeps sl = {0};
    struct model_call_result r;
    ASSERT_OK(call_once(&f, &sl, 5000, 2, 0, &r, NULL));
    ASSERT_EQ_INT(r.status, 200);
    ASSERT_EQ_INT(r.attempts, 2);
    model_call_result_done(&r);

    /* with no retries left the transport error is returned */
    fake_stop(&f);
    char *s2 = xasprintf("{\"steps\":[{\"faults\":[\"drop\",\"drop\"],%s}]}", REPLY_OK);
    fake_start(&f, s2);
    struct tern_err e = {0};
    int rc = call_once(&f, &sl, 5000, 1, 0, &r, &e);
    ASSERT_TRUE(rc < 0);
    ASSERT_CONTAINS(e.msg, "attempt 2");
    fake_stop(&f);
    free(s);
    free(s2);
}

TEST(slow_response_times_out_then_retry_succeeds)
{
    struct fake f = {0};
    char *s = xasprintf("{\"steps\":[{\"faults\":[{\"type\":\"slow\",\"ms\":1500}],%s}]}",
                        REPLY_OK);
    fake_start(&f, s);
    struct sleeps sl = {0};
    struct model_call_result r;
    int64_t t0 = now_ms();
    ASSERT_OK(call_once(&f, &sl, 300, 2, 0, &r, NULL));
    ASSERT_EQ_INT(r.status, 200);
    ASSERT_EQ_INT(r.attempts, 2);
    ASSERT_CMP_INT(now_ms() - t0, <, 1200);
    model_call_result_done(&r);
    fake_stop(&f);
    free(s);
}

TEST(total_retry_time_bound)
{
    struct fake f = {0};
    char *s = xasprintf("{\"steps\":[{\"faults\":[{\"type\":\"429\",\"retryAfter\":\"30\"}],%s}]}",
                        REPLY_OK);
    fake_start(&f, s);
    struct sleeps sl = {0};
    struct model_call_result r;
    /* a 30 s wait would end past the 5 s bound: the 429 is final */
    ASSERT_OK(call_once(&f, &sl, 5000, 5, 5000, &r, NULL));
    ASSERT_EQ_INT(r.status, 429);
    ASSERT_EQ_INT(r.attempts, 1);
    ASSERT_EQ_INT(sl.n, 0);
    model_call_result_done(&r);
    fake_stop(&f);
    free(s);
}

TEST(context_length_exceeded_is_final)
{
    struct fake f = {0};
    char *s = xasprintf("{\"steps\":[{\"faults\":[{\"type\":\"error\",\"status\":400,"
                        "\"code\":\"context_length_exceeded\",\"message\":\"too long\"}],%s}]}",
                        REPLY_OK);
    fake_start(&f, s);
    struct sleeps sl = {0};
    struct model_call_result r;
    ASSERT_OK(call_once(&f, &sl, 5000, 2, 0, &r, NULL));
    ASSERT_EQ_INT(r.status, 400);
    ASSERT_EQ_INT(r.attempts, 1);
    struct chat_api_error e;
    ASSERT_OK(chat_parse_error(r.body, r.body_len, &e));
    ASSERT_TRUE(chat_error_is_context_length(&e));
    chat_api_error_done(&e);
    model_call_result_done(&r);
    fake_stop(&f);
    free(s);
}

TEST(unreachable_server)
{
    /* a port nobody listens on: bind then close */
    struct fake f = {0};
    fake_start(&f, "{\"steps\":[]}");
    fake_stop(&f);
    struct sleeps sl = {0};
    struct model_call_result r;
    struct tern_err e = {0};
    ASSERT_EQ_INT(call_once(&f, &sl, 2000, 2, 0, &r, &e), TERN_EUNREACHABLE);
    ASSERT_EQ_INT(sl.n, 2); /* retried twice */
}

/* A scripted multi-step exchange through the real builder, the real client
 * and the real parser, including a bad_tool_json fault answered with a tool
 * error message; then the recorded bodies go to the schema validator. */
static const char *EXCHANGE =
    "{\"steps\":["
    "{\"reply\":{\"toolCalls\":[{\"name\":\"list_files\",\"arguments\":{\"path\":\".\","
    "\"depth\":2}}]}},"
    "{\"faults\":[\"bad_tool_json\"],\"reply\":{\"content\":\"Writing the review.\","
    "\"toolCalls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":\"output/review.md\","
    "\"content\":\"# Review\\n\",\"append\":null}}]}},"
    "{\"match\":{\"contains\":\"not valid JSON\"},\"reply\":{\"toolCalls\":[{\"name\":"
    "\"write_file\",\"arguments\":{\"path\":\"output/review.md\",\"content\":\"# Review\\n\","
    "\"append\":null}}]}},"
    "{\"reply\":{\"content\":\"Done: output/review.md\",\"usage\":{\"prompt_tokens\":50,"
    "\"completion_tokens\":5,\"total_tokens\":55}}}"
    "]}";

TEST(scripted_exchange_and_official_schema)
{
    struct fake f = {0};
    fake_start(&f, EXCHANGE);
    struct policy_config pc = {.tools = 0xf};
    struct chat_tool_def defs[POLICY_NTOOLS];
    size_t nd = policy_tool_defs(&pc, defs);
    struct chat_options o = {.model = "fake-model", .max_completion_tokens = 2048,
                             .tool_choice = "auto", .parallel_tool_calls = false};
    struct model_client_config cfg = {.base_url = f.base, .api_key = "sk-test",
                                      .timeout_ms = 5000};
    struct model_client *mc = model_client_new(&cfg);
    struct chat_conv c;
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_SYSTEM, "You are a reviewer. Workspace: /workspace.");
    chat_conv_add(&c, CHAT_USER, "Review the change and write output/review.md");

    const char *final = NULL;
    char *final_copy = NULL;
    int bad_seen = 0;
    for (int turn = 0; turn < 6 && !final; turn++) {
        char *body = NULL;
        struct tern_err e = {0};
        if (chat_build_request(&c, defs, nd, &o, &body, &e))
            th_fail(__FILE__, __LINE__, "build: %s", e.msg);
        struct model_call_result r;
        ASSERT_OK(model_client_call(mc, body, strlen(body), &r, &e));
        free(body);
        if (r.status != 200)
            th_fail(__FILE__, __LINE__, "status %ld: %s", r.status, r.body);
        struct chat_response cr;
        ASSERT_OK(chat_parse_response(r.body, r.body_len, KNOWN, 4, &cr));
        ASSERT_TRUE(cr.kind == CHAT_RESP_OK);
        struct chat_tool_call calls[8];
        for (size_t i = 0; i < cr.ncalls && i < 8; i++)
            calls[i] = (struct chat_tool_call){cr.calls[i].id, cr.calls[i].name,
                                               cr.calls[i].arguments};
        chat_conv_add_assistant(&c, cr.content, calls, cr.ncalls < 8 ? cr.ncalls : 8);
        for (size_t i = 0; i < cr.ncalls; i++) {
            if (cr.calls[i].status != CHAT_CALL_OK) {
                bad_seen++;
                char *msg = xasprintf("error: %s", cr.calls[i].problem);
                chat_conv_add_tool(&c, cr.calls[i].id, msg);
                free(msg);
            } else {
                chat_conv_add_tool(&c, cr.calls[i].id, "ok: 2 entries");
            }
        }
        if (cr.ncalls == 0)
            final = final_copy = xstrdup(cr.content);
        chat_response_done(&cr);
        model_call_result_done(&r);
    }
    ASSERT_EQ_STR(final, "Done: output/review.md");
    ASSERT_EQ_INT(bad_seen, 1);
    free(final_copy);
    chat_conv_done(&c);
    model_client_free(mc);
    fake_stop(&f);

    /* every recorded request body against the official schema */
    char *cmd = xasprintf("/usr/bin/python3 tests/integration/openai_schema.py %s", f.record);
    int st = system(cmd);
    free(cmd);
    ASSERT_TRUE(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77)
        TH_SKIP("OpenAI spec not found (set TERN_SHARED_DIR or put shared/ beside the repo)");
    ASSERT_EQ_INT(WEXITSTATUS(st), 0);
}
