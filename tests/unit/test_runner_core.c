/* Unit tests: runner/replay (journal fold), runner/plan (next action) and
 * runner/prompt. All pure: events are given as JSON text. */
#include "harness.h"

#include "base/mem.h"
#include "json/json.h"
#include "runner/config.h"
#include "runner/plan.h"
#include "runner/prompt.h"
#include "runner/replay.h"
#include "runner/sbx.h"
#include "runner/testhook.h"
#include "base/limits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fx {
    struct replay_state s;
    struct policy_config pc;
    struct plan_input in;
};

static const char *APPROVAL[] = {"exec_command:git push*"};
static const char *WRITABLE[] = {"working/**", "output/**"};

static void fx_init(struct fx *f, int64_t turn)
{
    replay_state_init(&f->s);
    memset(&f->pc, 0, sizeof f->pc);
    f->pc.tools = 0xf;
    f->pc.approval = APPROVAL;
    f->pc.napproval = 1;
    f->pc.writable = WRITABLE;
    f->pc.nwritable = 2;
    f->in = (struct plan_input){.uid = "uid-1", .turn = turn, .policy = &f->pc,
                                .now_ms = 1000000};
}

static void ev(struct fx *f, const char *type, int64_t turn, const char *data)
{
    cJSON *d = NULL;
    if (json_parse(data, strlen(data), &d, NULL) != 0)
        th_fail(__FILE__, __LINE__, "bad test data %s", data);
    struct replay_event e = {f->s.last_seq + 1, type, turn, NULL, d, "2026-11-30T00:00:00Z"};
    struct tern_err err = {0};
    if (replay_apply(&f->s, &e, &err) != 0)
        th_fail(__FILE__, __LINE__, "apply %s: %s", type, err.msg);
    cJSON_Delete(d);
}

static enum plan_action next(struct fx *f, struct plan *p)
{
    plan_next(&f->s, &f->in, p);
    return p->action;
}

static void expect(struct fx *f, enum plan_action want, int line)
{
    struct plan p;
    enum plan_action got = next(f, &p);
    plan_done(&p);
    if (got != want)
        th_fail(__FILE__, line, "plan: got %s, expected %s", plan_action_str(got),
                plan_action_str(want));
}
#define EXPECT(f, a) expect((f), (a), __LINE__)

static const char *CALL_LIST =
    "{\"step\":0,\"kind\":\"ok\",\"content\":null,\"toolCalls\":[{\"id\":\"call_1\","
    "\"name\":\"list_files\",\"arguments\":\"{\\\"path\\\":\\\".\\\"}\",\"status\":\"ok\"}],"
    "\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":10,\"cost_micro_usd\":7}}";
static const char *FINAL = "{\"step\":1,\"kind\":\"ok\",\"content\":\"all done\","
                           "\"usage\":{\"prompt_tokens\":200,\"completion_tokens\":20}}";

TEST(full_turn_sequence)
{
    struct fx f;
    fx_init(&f, 1);
    EXPECT(&f, PLAN_START_TURN);
    ev(&f, "turn_started", 1, "{}");
    EXPECT(&f, PLAN_MODEL_REQUEST);
    ev(&f, "model_request", 1, "{\"step\":0}");
    EXPECT(&f, PLAN_MODEL_CALL);
    ev(&f, "model_response", 1, CALL_LIST);
    struct plan p;
    ASSERT_EQ_INT(next(&f, &p), PLAN_TOOL_START);
    ASSERT_EQ_STR(p.call->id, "call_1");
    ASSERT_EQ_INT(p.tool, POLICY_LIST);
    ASSERT_EQ_INT(p.decision.timeout_ms, 30000);
    plan_done(&p);
    ev(&f, "tool_call", 1, "{\"callId\":\"call_1\",\"tool\":\"list_files\"}");
    EXPECT(&f, PLAN_TOOL_EXECUTE);
    ev(&f, "tool_result", 1, "{\"callId\":\"call_1\",\"status\":\"completed\",\"output\":\"a\\nb\"}");
    EXPECT(&f, PLAN_MODEL_REQUEST);
    ev(&f, "model_request", 1, "{\"step\":1}");
    ev(&f, "model_response", 1, FINAL);
    ASSERT_EQ_INT(next(&f, &p), PLAN_FINISH);
    ASSERT_EQ_STR(p.outcome, "completed");
    plan_done(&p);
    ASSERT_EQ_STR(f.s.final_text, "all done");
    ev(&f, "turn_finished", 1, "{\"outcome\":\"completed\"}");
    EXPECT(&f, PLAN_DONE);

    ASSERT_EQ_INT(f.s.model_turns, 2);
    ASSERT_EQ_INT(f.s.tool_calls, 1);
    ASSERT_EQ_INT(f.s.prompt_tokens, 300);
    ASSERT_EQ_INT(f.s.completion_tokens, 30);
    ASSERT_EQ_INT(f.s.cost_micro_usd, 7);
    ASSERT_EQ_INT(f.s.conv.n, 3);
    ASSERT_EQ_INT(f.s.conv.msgs[0].role, CHAT_ASSISTANT);
    ASSERT_EQ_INT(f.s.conv.msgs[0].ncalls, 1);
    ASSERT_EQ_INT(f.s.conv.msgs[1].role, CHAT_TOOL);
    ASSERT_EQ_STR(f.s.conv.msgs[1].tool_call_id, "call_1");
    ASSERT_EQ_STR(f.s.conv.msgs[2].content, "all done");

    /* the next turn needs a new user message to call the model again */
    f.in.turn = 2;
    EXPECT(&f, PLAN_START_TURN);
    ev(&f, "user_message", 2, "{\"text\":\"also check tests\",\"index\":0}");
    ev(&f, "turn_started", 2, "{}");
    EXPECT(&f, PLAN_MODEL_REQUEST);
    ASSERT_EQ_INT(f.s.max_message_index, 0);
    ASSERT_FALSE(f.s.objective_journaled);
    ev(&f, "user_message", 2, "{\"source\":\"objective\",\"text\":\"Review\"}");
    ASSERT_TRUE(f.s.objective_journaled);
    /* a runner of an older turn does nothing */
    f.in.turn = 1;
    EXPECT(&f, PLAN_DONE);
    replay_state_done(&f.s);
}

static const char *CALL_PUSH =
    "{\"step\":0,\"kind\":\"ok\",\"toolCalls\":[{\"id\":\"call_p\",\"name\":\"exec_command\","
    "\"arguments\":\"{\\\"cmd\\\":\\\"git push origin fix\\\"}\",\"status\":\"ok\"}]}";

static void to_approval(struct fx *f, char id[20])
{
    ev(f, "turn_started", 1, "{}");
    ev(f, "model_request", 1, "{}");
    ev(f, "model_response", 1, CALL_PUSH);
    struct plan p;
    ASSERT_EQ_INT(next(f, &p), PLAN_REQUEST_APPROVAL);
    ASSERT_EQ_STR(p.summary, "git push origin fix");
    char want[20];
    replay_approval_id("uid-1", "call_p", want);
    ASSERT_EQ_STR(p.approval_id, want);
    memcpy(id, want, 20);
    plan_done(&p);
    char *d = xasprintf("{\"id\":\"%s\",\"callId\":\"call_p\",\"tool\":\"exec_command\"}", id);
    ev(f, "approval_requested", 1, d);
    free(d);
    EXPECT(f, PLAN_WAIT_APPROVAL);
    ev(f, "turn_finished", 1, "{\"outcome\":\"approval_requested\"}");
    EXPECT(f, PLAN_DONE);
    f->in.turn = 2;
    EXPECT(f, PLAN_START_TURN);
}

TEST(approval_granted_runs_the_call)
{
    struct fx f;
    fx_init(&f, 1);
    char id[20];
    to_approval(&f, id);
    ASSERT_EQ_INT(strlen(id), 19);
    ASSERT_TRUE(strncmp(id, "ap-", 3) == 0);
    char *d = xasprintf("{\"id\":\"%s\",\"decision\":\"approve\",\"by\":\"alice\"}", id);
    ev(&f, "approval_decided", 0, d);
    free(d);
    ev(&f, "turn_started", 2, "{}");
    struct plan p;
    ASSERT_EQ_INT(next(&f, &p), PLAN_TOOL_START);
    ASSERT_EQ_STR(p.args.cmd, "git push origin fix");
    ASSERT_EQ_INT(p.decision.verdict, POLICY_NEEDS_APPROVAL);
    plan_done(&p);
    ev(&f, "tool_call", 2, "{\"callId\":\"call_p\"}");
    EXPECT(&f, PLAN_TOOL_EXECUTE);
    replay_state_done(&f.s);
}

TEST(approval_undecided_waits_and_denied_is_told)
{
    struct fx f;
    fx_init(&f, 1);
    char id[20];
    to_approval(&f, id);
    ev(&f, "turn_started", 2, "{}");
    EXPECT(&f, PLAN_WAIT_APPROVAL);
    /* a decision for another id changes nothing */
    ev(&f, "approval_decided", 2, "{\"id\":\"ap-other\",\"decision\":\"approve\"}");
    EXPECT(&f, PLAN_WAIT_APPROVAL);
    char *d = xasprintf("{\"id\":\"%s\",\"approved\":false}", id);
    ev(&f, "approval_decided", 2, d);
    free(d);
    struct plan p;
    ASSERT_EQ_INT(next(&f, &p), PLAN_TOOL_REFUSE);
    ASSERT_EQ_STR(p.status, "denied");
    ASSERT_CONTAINS(p.output, "did not approve");
    plan_done(&p);
    ev(&f, "tool_result", 2, "{\"callId\":\"call_p\",\"status\":\"denied\",\"output\":\"denied\"}");
    EXPECT(&f, PLAN_MODEL_REQUEST);
    ASSERT_EQ_INT(f.s.tool_calls, 0);
    replay_state_done(&f.s);
}

TEST(invalid_calls_are_refused_with_a_message)
{
    struct fx f;
    fx_init(&f, 1);
    f.pc.tools = 0xf & ~(1u << POLICY_READ);
    ev(&f, "turn_started", 1, "{}");
    ev(&f, "model_response", 1,
       "{\"kind\":\"ok\",\"toolCalls\":["
       "{\"id\":\"c1\",\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\": \",\"status\":"
       "\"bad_json\",\"problem\":\"arguments are not valid JSON\"},"
       "{\"id\":\"c2\",\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\","
       "\\\"sudo\\\":1}\",\"status\":\"ok\"},"
       "{\"id\":\"c3\",\"name\":\"write_file\",\"arguments\":\"{\\\"path\\\":\\\"input/x\\\","
       "\\\"content\\\":\\\"\\\"}\",\"status\":\"ok\"},"
       "{\"id\":\"c4\",\"name\":\"read_file\",\"arguments\":\"{\\\"path\\\":\\\"a\\\"}\","
       "\"status\":\"ok\"}]}");
    static const struct {
        const char *id, *status, *text;
    } want[] = {{"c1", "invalid", "not valid JSON"},
                {"c2", "invalid", "unknown member \"sudo\""},
                {"c3", "denied", "not writable"},
                {"c4", "denied", "not permitted"}};
    for (size_t i = 0; i < 4; i++) {
        struct plan p;
        ASSERT_EQ_INT(next(&f, &p), PLAN_TOOL_REFUSE);
        ASSERT_EQ_STR(p.call->id, want[i].id);
        ASSERT_EQ_STR(p.status, want[i].status);
        ASSERT_CONTAINS(p.output, want[i].text);
        char *d = xasprintf("{\"callId\":\"%s\",\"output\":\"x\"}", want[i].id);
        plan_done(&p);
        ev(&f, "tool_result", 1, d);
        free(d);
    }
    EXPECT(&f, PLAN_MODEL_REQUEST);
    ASSERT_EQ_INT(f.s.tool_calls, 0);
    ASSERT_EQ_INT(f.s.conv.n, 5); /* assistant + 4 tool messages */
    replay_state_done(&f.s);
}

TEST(limits_end_the_turn_once)
{
    struct fx f;
    fx_init(&f, 1);
    f.pc.limits.max_model_turns = 1;
    f.pc.limits.max_tool_calls = 5;
    ev(&f, "turn_started", 1, "{}");
    ev(&f, "model_response", 1, CALL_LIST);
    EXPECT(&f, PLAN_TOOL_START); /* a tool call of an answered model turn still runs */
    ev(&f, "tool_call", 1, "{\"callId\":\"call_1\"}");
    ev(&f, "tool_result", 1, "{\"callId\":\"call_1\",\"output\":\"x\"}");
    struct plan p;
    ASSERT_EQ_INT(next(&f, &p), PLAN_LIMIT);
    ASSERT_EQ_INT(p.limit, POLICY_LIMIT_MODEL_TURNS);
    ASSERT_EQ_INT(p.limit_used, 1);
    ASSERT_EQ_INT(p.limit_max, 1);
    plan_done(&p);
    ev(&f, "limit_reached", 1, "{\"limit\":\"maxModelTurns\"}");
    ASSERT_EQ_INT(next(&f, &p), PLAN_FINISH);
    ASSERT_EQ_STR(p.outcome, "limit_reached");
    plan_done(&p);
    replay_state_done(&f.s);

    /* tool call limit before a tool; wall time from the first event */
    fx_init(&f, 1);
    f.pc.limits.max_tool_calls = 1;
    ev(&f, "turn_started", 1, "{}");
    ev(&f, "model_response", 1, CALL_LIST);
    ev(&f, "tool_call", 1, "{\"callId\":\"call_1\"}");
    EXPECT(&f, PLAN_TOOL_EXECUTE); /* started before the limit: finished */
    ev(&f, "tool_result", 1, "{\"callId\":\"call_1\",\"output\":\"x\"}");
    ev(&f, "model_response", 1,
       "{\"kind\":\"ok\",\"toolCalls\":[{\"id\":\"call_2\",\"name\":\"list_files\","
       "\"arguments\":\"{\\\"path\\\":\\\".\\\"}\",\"status\":\"ok\"}]}");
    ASSERT_EQ_INT(next(&f, &p), PLAN_LIMIT);
    ASSERT_EQ_INT(p.limit, POLICY_LIMIT_TOOL_CALLS);
    plan_done(&p);
    replay_state_done(&f.s);

    fx_init(&f, 1);
    f.pc.limits.timeout_ms = 60000;
    ev(&f, "turn_started", 1, "{}");
    int64_t t0 = f.s.first_time_ms;
    ASSERT_TRUE(t0 > 0);
    f.in.now_ms = t0 + 59999;
    EXPECT(&f, PLAN_MODEL_REQUEST);
    f.in.now_ms = t0 + 60000;
    ASSERT_EQ_INT(next(&f, &p), PLAN_LIMIT);
    ASSERT_EQ_INT(p.limit, POLICY_LIMIT_TIME);
    plan_done(&p);
    replay_state_done(&f.s);
}

TEST(malformed_responses_give_up_after_three)
{
    struct fx f;
    fx_init(&f, 1);
    ev(&f, "turn_started", 1, "{}");
    for (int i = 0; i < 3; i++) {
        EXPECT(&f, PLAN_MODEL_REQUEST);
        ev(&f, "model_request", 1, "{}");
        ev(&f, "model_response", 1, "{\"kind\":\"malformed\",\"problem\":\"choices: missing\"}");
    }
    struct plan p;
    ASSERT_EQ_INT(next(&f, &p), PLAN_FINISH);
    ASSERT_EQ_STR(p.outcome, "error");
    ASSERT_EQ_STR(p.reason, "malformed_output");
    ASSERT_CONTAINS(p.message, "malformed 3 times in a row (last: choices: missing)");
    plan_done(&p);
    ASSERT_EQ_INT(f.s.conv.n, 0);
    ASSERT_EQ_INT(f.s.model_turns, 3);
    replay_state_done(&f.s);
    fx_init(&f, 1);
    ev(&f, "turn_started", 1, "{}");
    ev(&f, "model_response", 1, "{\"kind\":\"refusal\",\"refusal\":\"I can't\"}");
    ASSERT_EQ_INT(next(&f, &p), PLAN_FINISH);
    ASSERT_EQ_STR(p.outcome, "refused");
    ASSERT_EQ_STR(p.reason, "refusal");
    ASSERT_EQ_STR(p.message, "the model refused: I can't");
    plan_done(&p);
    replay_state_done(&f.s);
}

TEST(malformed_count_starts_afresh_in_a_new_turn)
{
    struct fx f;
    fx_init(&f, 1);
    ev(&f, "turn_started", 1, "{}");
    for (int i = 0; i < 3; i++)
        ev(&f, "model_response", 1, "{\"kind\":\"malformed\",\"problem\":\"x\"}");
    ev(&f, "turn_finished", 1, "{\"outcome\":\"error\",\"reason\":\"malformed_output\"}");
    /* a retry: the next turn asks the model again instead of giving up */
    f.in.turn = 2;
    EXPECT(&f, PLAN_START_TURN);
    ev(&f, "retry", 1, "{\"reason\":\"Retry\"}");
    ev(&f, "turn_started", 2, "{}");
    EXPECT(&f, PLAN_MODEL_REQUEST);
    replay_state_done(&f.s);
}

TEST(limit_end_names_the_limit_and_the_numbers)
{
    struct fx f;
    fx_init(&f, 1);
    f.pc.limits.max_tokens = 1500;
    ev(&f, "turn_started", 1, "{}");
    ev(&f, "model_response", 1,
       "{\"kind\":\"ok\",\"content\":\"thinking\",\"toolCalls\":[{\"id\":\"c\",\"name\":"
       "\"list_files\",\"arguments\":\"{\\\"path\\\":\\\".\\\"}\",\"status\":\"ok\"}],"
       "\"usage\":{\"prompt_tokens\":1600,\"completion_tokens\":86}}");
    struct plan p;
    ASSERT_EQ_INT(next(&f, &p), PLAN_LIMIT);
    ASSERT_EQ_INT(p.limit, POLICY_LIMIT_TOKENS);
    ASSERT_EQ_INT(p.limit_used, 1686);
    ASSERT_EQ_INT(p.limit_max, 1500);
    plan_done(&p);
    ev(&f, "limit_reached", 1, "{\"limit\":\"maxTokens\",\"used\":1686,\"max\":1500}");
    ASSERT_EQ_INT(next(&f, &p), PLAN_FINISH);
    ASSERT_EQ_STR(p.outcome, "limit_reached");
    ASSERT_EQ_STR(p.reason, "maxTokens");
    ASSERT_EQ_STR(p.message, "maxTokens: used 1686 of 1500");
    ASSERT_EQ_INT(p.limit_used, 1686);
    ASSERT_EQ_INT(p.limit_max, 1500);
    plan_done(&p);
    /* the session's wall time is told in seconds */
    char *m = plan_limit_message("timeoutSeconds", 3602500, 3600000);
    ASSERT_EQ_STR(m, "timeoutSeconds: 3602 s elapsed of 3600 s");
    free(m);
    /* a later turn (the limit raised) starts without the old report */
    f.in.turn = 2;
    ev(&f, "turn_finished", 1, "{\"outcome\":\"limit_reached\"}");
    ev(&f, "retry", 1, "{}");
    ev(&f, "turn_started", 2, "{}");
    ASSERT_FALSE(f.s.limit_reported);
    ASSERT_NULL(f.s.limit_name);
    f.pc.limits.max_tokens = 3000;
    EXPECT(&f, PLAN_TOOL_START);
    replay_state_done(&f.s);
}

TEST(tool_calls_get_at_most_the_session_time_left)
{
    struct fx f;
    fx_init(&f, 1);
    f.pc.limits.timeout_ms = 20000;
    f.pc.exec_max_timeout_ms = 3600000;
    ev(&f, "turn_started", 1, "{}");
    int64_t t0 = f.s.first_time_ms;
    ev(&f, "model_response", 1,
       "{\"kind\":\"ok\",\"toolCalls\":[{\"id\":\"c\",\"name\":\"exec_command\","
       "\"arguments\":\"{\\\"cmd\\\":\\\"sleep 600\\\",\\\"timeoutMs\\\":600000}\","
       "\"status\":\"ok\"}]}");
    f.in.now_ms = t0 + 5000;
    struct plan p;
    ASSERT_EQ_INT(next(&f, &p), PLAN_TOOL_START);
    ASSERT_EQ_INT(p.decision.timeout_ms, 15000);
    plan_done(&p);
    /* resumed after a crash with 400 ms left: at least a second */
    ev(&f, "tool_call", 1, "{\"callId\":\"c\"}");
    f.in.now_ms = t0 + 19600;
    ASSERT_EQ_INT(next(&f, &p), PLAN_TOOL_EXECUTE);
    ASSERT_EQ_INT(p.decision.timeout_ms, 1000);
    plan_done(&p);
    /* it timed out: the next step reports the session limit */
    ev(&f, "tool_result", 1, "{\"callId\":\"c\",\"status\":\"timeout\",\"output\":\"x\"}");
    f.in.now_ms = t0 + 20001;
    ASSERT_EQ_INT(next(&f, &p), PLAN_LIMIT);
    ASSERT_EQ_INT(p.limit, POLICY_LIMIT_TIME);
    plan_done(&p);
    replay_state_done(&f.s);
}

TEST(denial_tells_the_model_the_approvers_reason)
{
    struct fx f;
    fx_init(&f, 1);
    char id[20];
    to_approval(&f, id);
    char *d = xasprintf("{\"id\":\"%s\",\"decision\":\"denied\",\"reason\":\"not on "
                        "Fridays\"}", id);
    ev(&f, "approval_decided", 1, d);
    free(d);
    ev(&f, "turn_started", 2, "{}");
    struct plan p;
    ASSERT_EQ_INT(next(&f, &p), PLAN_TOOL_REFUSE);
    ASSERT_EQ_STR(p.status, "denied");
    ASSERT_CONTAINS(p.output, "did not approve");
    ASSERT_CONTAINS(p.output, "Their reason: not on Fridays");
    plan_done(&p);
    replay_state_done(&f.s);

    /* bounded: a huge reason is cut */
    fx_init(&f, 1);
    to_approval(&f, id);
    char *big = xmalloc(5000);
    memset(big, 'r', 4999);
    big[4999] = 0;
    d = xasprintf("{\"id\":\"%s\",\"decision\":\"denied\",\"reason\":\"%s\"}", id, big);
    ev(&f, "approval_decided", 1, d);
    free(d);
    free(big);
    ev(&f, "turn_started", 2, "{}");
    ASSERT_EQ_INT(next(&f, &p), PLAN_TOOL_REFUSE);
    ASSERT_TRUE(strlen(p.output) < TERN_APPROVAL_MAX_REASON + 200);
    plan_done(&p);
    replay_state_done(&f.s);
}

TEST(a_fork_waits_with_the_approval_id_it_inherited)
{
    /* the journal was copied from the parent: its approval id was derived
     * from the parent's uid, and that is the id decisions name */
    struct fx f;
    fx_init(&f, 1);
    f.in.uid = "uid-child";
    ev(&f, "turn_started", 1, "{}");
    ev(&f, "model_response", 1, CALL_PUSH);
    ev(&f, "approval_requested", 1,
       "{\"id\":\"ap-parentid0000000\",\"callId\":\"call_p\",\"tool\":\"exec_command\"}");
    struct plan p;
    ASSERT_EQ_INT(next(&f, &p), PLAN_WAIT_APPROVAL);
    ASSERT_EQ_STR(p.approval_id, "ap-parentid0000000");
    plan_done(&p);
    replay_state_done(&f.s);
}

TEST(user_message_waits_for_tool_results)
{
    struct fx f;
    fx_init(&f, 1);
    ev(&f, "turn_started", 1, "{}");
    ev(&f, "model_response", 1, CALL_LIST);
    ev(&f, "user_message", 1, "{\"text\":\"hurry\"}");
    ASSERT_EQ_INT(f.s.conv.n, 1);
    ev(&f, "tool_call", 1, "{\"callId\":\"call_1\"}");
    ev(&f, "tool_result", 1, "{\"callId\":\"call_1\",\"output\":\"x\"}");
    ASSERT_EQ_INT(f.s.conv.n, 3);
    ASSERT_EQ_INT(f.s.conv.msgs[1].role, CHAT_TOOL);
    ASSERT_EQ_INT(f.s.conv.msgs[2].role, CHAT_USER);
    ASSERT_EQ_STR(f.s.conv.msgs[2].content, "hurry");
    replay_state_done(&f.s);
}

TEST(replay_rejects_gaps_and_unknown_calls)
{
    struct replay_state s;
    replay_state_init(&s);
    cJSON *d = cJSON_CreateObject();
    struct replay_event e = {1, "turn_started", 1, NULL, d, NULL};
    ASSERT_OK(replay_apply(&s, &e, NULL));
    e.seq = 3;
    struct tern_err err = {0};
    ASSERT_EQ_INT(replay_apply(&s, &e, &err), TERN_EINVALID);
    ASSERT_CONTAINS(err.msg, "seq 3");
    e.seq = 2;
    e.type = "tool_result";
    json_add_string(d, "callId", "nope");
    ASSERT_EQ_INT(replay_apply(&s, &e, &err), TERN_EINVALID);
    e.type = "some_future_type";
    e.seq = 3; /* the failed apply above still advanced last_seq to 2 */
    ASSERT_OK(replay_apply(&s, &e, NULL));
    cJSON_Delete(d);
    replay_state_done(&s);

    int64_t ms;
    ASSERT_OK(replay_parse_time("2026-11-30T00:00:01.123456789Z", &ms));
    ASSERT_EQ_INT(ms % 100000, 1123);
    ASSERT_OK(replay_parse_time("1970-01-01T00:00:00Z", &ms));
    ASSERT_EQ_INT(ms, 0);
    ASSERT_NE_INT(replay_parse_time("2026-11-30 00:00:00Z", &ms), 0);
    ASSERT_NE_INT(replay_parse_time("2026-11-30T00:00:00+01:00", &ms), 0);
}

TEST(prompt_contents)
{
    const char *skills[] = {"review/SKILL.md", "git/SKILL.md"};
    const char *tools[] = {"exec_command", "read_file"};
    struct prompt_input in = {.objective = "Review PR 42", .context_text = "diff in input/",
                              .memory = "Use tabs.", .skills = skills, .nskills = 2,
                              .writable = WRITABLE, .nwritable = 2, .tools = tools, .ntools = 2};
    char *sys = prompt_system(&in);
    ASSERT_CONTAINS(sys, "output/");
    ASSERT_CONTAINS(sys, "Writable paths: working/**, output/**");
    ASSERT_CONTAINS(sys, "Tools: exec_command, read_file");
    ASSERT_CONTAINS(sys, "## Memory (simple.md)\nUse tabs.\n");
    ASSERT_CONTAINS(sys, "- skills/git/SKILL.md");
    ASSERT_CONTAINS(sys, "## Context\ndiff in input/\n");
    /* what it says of task.md is what the operator writes there
     * (children_task_configmap: objective, context, references; the
     * follow-up messages reach the model as user messages only) */
    ASSERT_CONTAINS(sys, "task.md     read-only: the objective, context and references");
    ASSERT_CONTAINS(sys, "follow-up messages come in this conversation, not in task.md");
    free(sys);
    char *u = prompt_first_user(&in);
    ASSERT_EQ_STR(u, "Review PR 42");
    free(u);
    /* a huge memory is cut with a marker */
    char *big = xmalloc(200000);
    memset(big, 'm', 199999);
    big[199999] = 0;
    in.memory = big;
    sys = prompt_system(&in);
    ASSERT_CONTAINS(sys, "(truncated:");
    ASSERT_TRUE(strlen(sys) < 80000);
    free(sys);
    free(big);
}

static char *render(enum policy_tool t, long status, const char *body, const char **st)
{
    struct sbx_result r = {.tool = t, .http_status = status, .body = (char *)body,
                           .body_len = strlen(body)};
    return sbx_render(&r, st);
}

TEST(sandbox_results_render_as_tool_messages)
{
    const char *st;
    char *o = render(POLICY_EXEC, 200,
                     "{\"status\":\"completed\",\"exitCode\":0,\"signal\":null,\"stdout\":\"a\\n\","
                     "\"stderr\":\"\",\"truncated\":false,\"durationMs\":3,\"replayed\":false}",
                     &st);
    ASSERT_EQ_STR(o, "exit code: 0\nstdout:\na\n");
    ASSERT_EQ_STR(st, "completed");
    free(o);
    o = render(POLICY_EXEC, 200,
               "{\"status\":\"completed\",\"exitCode\":2,\"stdout\":\"\",\"stderr\":\"boom\"}", &st);
    ASSERT_EQ_STR(o, "exit code: 2\nstderr:\nboom\n");
    ASSERT_EQ_STR(st, "failed");
    free(o);
    o = render(POLICY_EXEC, 200, "{\"status\":\"timeout\",\"exitCode\":null,\"signal\":9,"
                                 "\"durationMs\":1000,\"truncated\":true}", &st);
    ASSERT_CONTAINS(o, "timed out after 1000 ms");
    ASSERT_CONTAINS(o, "[output truncated]");
    ASSERT_EQ_STR(st, "timeout");
    free(o);
    o = render(POLICY_EXEC, 200, "{\"status\":\"interrupted\"}", &st);
    ASSERT_CONTAINS(o, "not re-run");
    ASSERT_EQ_STR(st, "interrupted");
    free(o);
    /* a write cut off by a sandbox restart is not reported as written */
    struct sbx_result wr = {.tool = POLICY_WRITE, .http_status = 200,
                            .body = "{\"status\":\"interrupted\",\"replayed\":true}",
                            .replayed = true};
    wr.body_len = strlen(wr.body);
    o = sbx_render(&wr, &st);
    ASSERT_EQ_STR(st, "interrupted");
    ASSERT_CONTAINS(o, "interrupted");
    ASSERT_TRUE(strstr(o, "ok: written") == NULL);
    free(o);
    wr.body = "{\"status\":\"completed\",\"path\":\"output/a\",\"size\":3,\"replayed\":true}";
    wr.body_len = strlen(wr.body);
    o = sbx_render(&wr, &st);
    ASSERT_EQ_STR(o, "ok: written (recorded earlier)");
    ASSERT_EQ_STR(st, "completed");
    free(o);
    o = render(POLICY_WRITE, 200, "{\"status\":\"completed\",\"path\":\"a\",\"size\":1}", &st);
    ASSERT_EQ_STR(o, "ok: written");
    ASSERT_EQ_STR(st, "completed");
    free(o);
    o = render(POLICY_WRITE, 200, "{\"status\":\"what\"}", &st);
    ASSERT_EQ_STR(st, "error");
    free(o);
    o = render(POLICY_WRITE, 403,
               "{\"error\":{\"code\":\"read_only\",\"message\":\"input/ is read-only\"}}", &st);
    ASSERT_EQ_STR(o, "error: read_only (HTTP 403): input/ is read-only");
    ASSERT_EQ_STR(st, "error");
    free(o);
    o = render(POLICY_LIST, 200,
               "{\"entries\":[{\"path\":\"input\",\"type\":\"dir\",\"size\":0},"
               "{\"path\":\"input/a.txt\",\"type\":\"file\",\"size\":12}]}", &st);
    ASSERT_EQ_STR(o, "input/\ninput/a.txt  (12 bytes)\n");
    free(o);
    o = render(POLICY_READ, 200, "hello \xff\xfe world", &st);
    ASSERT_EQ_STR(o, "hello \xef\xbf\xbd\xef\xbf\xbd world");
    free(o);
    o = render(POLICY_EXEC, 200, "not json", &st);
    ASSERT_EQ_STR(st, "error");
    free(o);

    /* a huge stdout is cut at the bound with a marker, as valid UTF-8 */
    size_t n = TERN_RUNNER_MAX_OUTPUT * 2;
    char *big = xmalloc(n + 200);
    int k = snprintf(big, 200, "{\"status\":\"completed\",\"exitCode\":0,\"stdout\":\"");
    for (size_t i = 0; i < n; i += 2)
        memcpy(big + k + i, "\xc3\xa9", 2);
    memcpy(big + k + n, "\"}", 3);
    struct sbx_result r = {.tool = POLICY_EXEC, .http_status = 200, .body = big,
                           .body_len = strlen(big)};
    o = sbx_render(&r, &st);
    ASSERT_CONTAINS(o, "[output truncated]");
    ASSERT_CMP_INT(strlen(o), <=, TERN_RUNNER_MAX_OUTPUT + 64);
    cJSON *chk = cJSON_CreateString(o);
    char *printed = json_print(chk);
    cJSON *back = NULL;
    ASSERT_OK(json_parse(printed, strlen(printed), &back, NULL)); /* strict parser: valid UTF-8 */
    cJSON_Delete(back);
    free(printed);
    cJSON_Delete(chk);
    free(o);
    free(big);
}

struct fenv {
    const char *const *kv; /* name, value, ... NULL */
};

static const char *fake_getenv(void *ctx, const char *name)
{
    const struct fenv *e = ctx;
    for (size_t i = 0; e->kv[i]; i += 2)
        if (strcmp(e->kv[i], name) == 0)
            return e->kv[i + 1];
    return NULL;
}

TEST(spec_and_config)
{
    const char *j = "{\"metadata\":{\"uid\":\"u1\"},\"spec\":{\"objective\":\"Do it\","
                    "\"messages\":[\"one\",\"two\"],\"permissions\":{\"tools\":[\"read_file\","
                    "\"write_file\"],\"requiresApproval\":[\"write_file:output/**\"]},"
                    "\"limits\":{\"timeoutSeconds\":60,\"maxToolCalls\":3}}}";
    cJSON *o = NULL;
    ASSERT_OK(json_parse(j, strlen(j), &o, NULL));
    struct runner_spec s;
    struct tern_err e = {0};
    ASSERT_OK(runner_spec_parse(o, &s, &e));
    cJSON_Delete(o);
    ASSERT_EQ_STR(s.uid, "u1");
    ASSERT_EQ_INT(s.nmessages, 2);
    ASSERT_EQ_INT(s.tools, (1u << POLICY_READ) | (1u << POLICY_WRITE));
    ASSERT_EQ_INT(s.nwritable, 2); /* CRD default */
    ASSERT_EQ_INT(s.limits.max_tool_calls, 3);
    ASSERT_EQ_INT(s.limits.max_model_turns, 50);
    ASSERT_EQ_STR(s.model, "gpt-5.6-mini");
    struct policy_config pc;
    runner_spec_policy(&s, &pc);
    ASSERT_EQ_INT(pc.exec_max_timeout_ms, 60000);
    ASSERT_EQ_INT(pc.limits.timeout_ms, 60000);
    runner_spec_done(&s);

    const char *bad[] = {"{\"spec\":{}}", "{\"spec\":{\"objective\":\"x\",\"permissions\":"
                                          "{\"tools\":[\"rm\"]}}}",
                         "{\"spec\":{\"objective\":\"x\",\"permissions\":"
                         "{\"requiresApproval\":[\"no-colon\"]}}}",
                         "{\"spec\":{\"objective\":\"x\",\"limits\":{\"maxToolCalls\":0}}}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ASSERT_OK(json_parse(bad[i], strlen(bad[i]), &o, NULL));
        if (runner_spec_parse(o, &s, &e) == 0)
            th_fail(__FILE__, __LINE__, "case %zu accepted", i);
        cJSON_Delete(o);
    }

    char tok[400], spec[400];
    snprintf(tok, sizeof tok, "%s/token", th_tmpdir());
    snprintf(spec, sizeof spec, "%s/spec.json", th_tmpdir());
    FILE *f = fopen(tok, "w");
    fputs("secret\n", f);
    fclose(f);
    f = fopen(spec, "w");
    fputs(j, f);
    fclose(f);
    const char *kv[] = {"TERN_NAMESPACE", "ns", "TERN_SESSION", "s", "TERN_SESSION_UID", "u1",
                        "TERN_TURN", "3", "TERN_ETCD_ENDPOINTS", "http://127.0.0.1:1",
                        "TERN_SANDBOX_TOKEN_FILE", tok, "TERN_SESSION_SPEC_FILE", spec,
                        "TERN_SANDBOX_ADDR", "127.0.0.1:2", NULL};
    struct fenv fe = {kv};
    struct runner_config c;
    ASSERT_OK(runner_config_load(fake_getenv, &fe, &c, &e));
    ASSERT_EQ_INT(c.turn, 3);
    ASSERT_EQ_STR(c.sandbox_token, "secret");
    ASSERT_EQ_STR(c.base_url, "https://api.openai.com/v1");
    ASSERT_EQ_INT(c.lock_ttl_s, 10);
    ASSERT_EQ_STR(c.spec.objective, "Do it");
    runner_config_done(&c);

    /* missing / malformed variables are configuration errors */
    const char *kv2[] = {"TERN_NAMESPACE", "ns", NULL};
    fe.kv = kv2;
    ASSERT_EQ_INT(runner_config_load(fake_getenv, &fe, &c, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "TERN_SESSION: required");
    const char *kv3[] = {"TERN_NAMESPACE", "ns", "TERN_SESSION", "s", "TERN_SESSION_UID", "u2",
                         "TERN_TURN", "3", "TERN_ETCD_ENDPOINTS", "http://127.0.0.1:1",
                         "TERN_SANDBOX_TOKEN_FILE", tok, "TERN_SESSION_SPEC_FILE", spec,
                         "TERN_SANDBOX_ADDR", "127.0.0.1:2", NULL};
    fe.kv = kv3;
    ASSERT_EQ_INT(runner_config_load(fake_getenv, &fe, &c, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "differs");
    const char *kv4[] = {"TERN_NAMESPACE", "ns", "TERN_SESSION", "s", "TERN_SESSION_UID", "u1",
                         "TERN_TURN", "zero", "TERN_ETCD_ENDPOINTS", "x",
                         "TERN_SANDBOX_TOKEN_FILE", tok, NULL};
    fe.kv = kv4;
    ASSERT_EQ_INT(runner_config_load(fake_getenv, &fe, &c, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "TERN_TURN");
}

TEST(test_hooks_are_inert_unless_named)
{
    ASSERT_EQ_INT(testhook_match(NULL, "upload"), TESTHOOK_NONE);
    ASSERT_EQ_INT(testhook_match("", "upload"), TESTHOOK_NONE);
    ASSERT_EQ_INT(testhook_match("upload", "upload"), TESTHOOK_KILL);
    ASSERT_EQ_INT(testhook_match("upload:kill", "upload"), TESTHOOK_KILL);
    ASSERT_EQ_INT(testhook_match("tool_call,upload:stop", "upload"), TESTHOOK_STOP);
    ASSERT_EQ_INT(testhook_match("uploads:stop", "upload"), TESTHOOK_NONE);
    ASSERT_EQ_INT(testhook_match("upload:nap", "upload"), TESTHOOK_NONE);
    ASSERT_EQ_INT(testhook_match("tool_call", "tool_result"), TESTHOOK_NONE);
    ASSERT_EQ_INT(testhook_match("model_response:stop,tool_call", "tool_call"), TESTHOOK_KILL);
}

/* ---- spec.result.schema ------------------------------------------------- */

static const char *SCHEMA = "{\"type\":\"object\",\"required\":[\"n\"],"
                            "\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":1}}}";

static char *answer(const char *content)
{
    cJSON *d = cJSON_CreateObject();
    json_add_int64(d, "step", 0);
    json_add_string(d, "kind", "ok");
    json_add_string(d, "content", content);
    char *t = json_print(d);
    cJSON_Delete(d);
    return t;
}

/* Folds a final answer, plans; returns the plan (caller releases it). */
static void answer_and_plan(struct fx *f, const char *content, struct plan *p)
{
    EXPECT(f, PLAN_MODEL_REQUEST);
    ev(f, "model_request", 1, "{\"step\":0}");
    char *a = answer(content);
    ev(f, "model_response", 1, a);
    free(a);
    next(f, p);
}

/* Journals what the plan says for an invalid answer, as turn.c does. */
static void journal_invalid(struct fx *f, const struct plan *p)
{
    cJSON *d = cJSON_CreateObject();
    json_add_int64(d, "attempt", p->attempt);
    json_add_string(d, "problem", p->reason);
    json_add_string(d, "message", p->output);
    char *t = json_print(d);
    cJSON_Delete(d);
    ev(f, "result_invalid", 1, t);
    free(t);
}

TEST(result_schema_wrong_twice_then_right)
{
    struct fx f;
    fx_init(&f, 1);
    cJSON *schema = NULL;
    ASSERT_OK(json_parse(SCHEMA, strlen(SCHEMA), &schema, NULL));
    f.in.result_schema = schema;
    f.in.max_result_attempts = 3;
    ev(&f, "turn_started", 1, "{}");
    struct plan p;
    answer_and_plan(&f, "The answer is 3.", &p);
    ASSERT_EQ_INT(p.action, PLAN_RESULT_INVALID);
    ASSERT_EQ_INT(p.attempt, 1);
    ASSERT_CONTAINS(p.output, "Your final answer (attempt 1 of 3) is not valid JSON: invalid JSON "
                              "at offset 0");
    ASSERT_CONTAINS(p.reason, "is not valid JSON");
    journal_invalid(&f, &p);
    plan_done(&p);
    /* the model is told: the conversation ends with the message */
    ASSERT_EQ_INT(f.s.conv.msgs[f.s.conv.n - 1].role, CHAT_USER);
    ASSERT_CONTAINS(f.s.conv.msgs[f.s.conv.n - 1].content, "attempt 1 of 3");
    answer_and_plan(&f, "{\"n\": 0}", &p);
    ASSERT_EQ_INT(p.action, PLAN_RESULT_INVALID);
    ASSERT_EQ_INT(p.attempt, 2);
    ASSERT_CONTAINS(p.output, "does not match the result schema (1 error):\n"
                              "at \"/n\": minimum: expected a number >= 1, got 0\n");
    journal_invalid(&f, &p);
    plan_done(&p);
    answer_and_plan(&f, "```json\n{\"n\": 4}\n```", &p);
    ASSERT_EQ_INT(p.action, PLAN_FINISH);
    ASSERT_EQ_STR(p.outcome, PLAN_OUTCOME_COMPLETED);
    char *v = json_print(p.result);
    ASSERT_EQ_STR(v, "{\"n\":4}");
    free(v);
    plan_done(&p);
    ev(&f, "turn_finished", 1, "{\"outcome\":\"completed\"}");
    ASSERT_EQ_INT(f.s.result_failures, 0);
    EXPECT(&f, PLAN_DONE);
    replay_state_done(&f.s);
    cJSON_Delete(schema);
}

TEST(result_schema_never_satisfied_reaches_the_limit)
{
    struct fx f;
    fx_init(&f, 1);
    cJSON *schema = NULL;
    ASSERT_OK(json_parse(SCHEMA, strlen(SCHEMA), &schema, NULL));
    f.in.result_schema = schema;
    f.in.max_result_attempts = 2;
    ev(&f, "turn_started", 1, "{}");
    struct plan p;
    for (int i = 1; i <= 2; i++) {
        answer_and_plan(&f, "[]", &p);
        ASSERT_EQ_INT(p.action, PLAN_RESULT_INVALID);
        ASSERT_EQ_INT(p.attempt, i);
        journal_invalid(&f, &p);
        plan_done(&p);
    }
    next(&f, &p);
    ASSERT_EQ_INT(p.action, PLAN_LIMIT);
    ASSERT_EQ_STR(p.limit_name, "maxResultAttempts");
    ASSERT_EQ_INT(p.limit_used, 2);
    ASSERT_EQ_INT(p.limit_max, 2);
    plan_done(&p);
    ev(&f, "limit_reached", 1, "{\"limit\":\"maxResultAttempts\",\"used\":2,\"max\":2}");
    next(&f, &p);
    ASSERT_EQ_INT(p.action, PLAN_FINISH);
    ASSERT_EQ_STR(p.outcome, PLAN_OUTCOME_LIMIT);
    ASSERT_EQ_STR(p.message, "maxResultAttempts: used 2 of 2; the last answer does not match "
                             "the schema: at \"\": type: expected \"object\", got array");
    plan_done(&p);
    ev(&f, "turn_finished", 1, "{\"outcome\":\"limit_reached\"}");
    /* a new turn (a retry after the limit was raised) goes on counting */
    f.in.turn = 2;
    f.in.max_result_attempts = 3;
    ev(&f, "turn_started", 2, "{}");
    ASSERT_EQ_INT(f.s.result_failures, 2);
    EXPECT(&f, PLAN_MODEL_REQUEST);
    replay_state_done(&f.s);
    cJSON_Delete(schema);
}

TEST(result_schema_refusal_and_free_text)
{
    struct fx f;
    fx_init(&f, 1);
    ev(&f, "turn_started", 1, "{}");
    struct plan p;
    /* without a schema, a final answer is free text as before */
    answer_and_plan(&f, "not json", &p);
    ASSERT_EQ_INT(p.action, PLAN_FINISH);
    ASSERT_NULL(p.result);
    plan_done(&p);
    replay_state_done(&f.s);
}

TEST(result_prompt_asks_for_json)
{
    struct prompt_input in = {.objective = "x", .result_schema = "{\"type\":\"integer\"}"};
    char *s = prompt_system(&in);
    ASSERT_CONTAINS(s, "exactly one JSON value that matches this JSON Schema");
    ASSERT_CONTAINS(s, "Result schema: {\"type\":\"integer\"}\n");
    free(s);
    in.result_schema = NULL;
    s = prompt_system(&in);
    ASSERT_CONTAINS(s, "short summary");
    ASSERT_TRUE(strstr(s, "Result schema") == NULL);
    free(s);
}
