/* Unit tests of runner/snapshot: a state rebuilt from a snapshot at any
 * clean boundary of a session, with the rest of the events folded on top,
 * is exactly the state of the uncompacted fold (and so is every request
 * the runner builds from it); malformed snapshots are refused. */
#include "harness.h"

#include "base/mem.h"
#include "json/json.h"
#include "runner/snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct evdef {
    const char *type;
    int64_t turn;
    const char *data;
};

/* Three turns: tools, an approval granted, a denied one, a malformed
 * response, a follow-up message while a call waited, a limit. */
static const struct evdef SESSION[] = {
    {"user_message", 0, "{\"source\":\"objective\",\"text\":\"fix the bug\"}"},
    {"turn_started", 1, "{\"turn\":1}"},
    {"model_request", 1, "{\"step\":0}"},
    {"model_response", 1,
     "{\"step\":0,\"kind\":\"ok\",\"content\":null,\"toolCalls\":[{\"id\":\"c1\",\"name\":"
     "\"list_files\",\"arguments\":\"{\\\"path\\\":\\\".\\\"}\",\"status\":\"ok\"}],\"usage\":"
     "{\"prompt_tokens\":100,\"completion_tokens\":10,\"cost_micro_usd\":7}}"},
    {"tool_call", 1, "{\"callId\":\"c1\",\"tool\":\"list_files\"}"},
    {"tool_result", 1, "{\"callId\":\"c1\",\"status\":\"completed\",\"output\":\"a\\nb\\n\"}"},
    {"model_request", 1, "{\"step\":1}"},
    {"model_response", 1, "{\"step\":1,\"kind\":\"malformed\",\"problem\":\"not json\"}"},
    {"model_request", 1, "{\"step\":2}"},
    {"model_response", 1,
     "{\"step\":2,\"kind\":\"ok\",\"content\":\"pushing\",\"toolCalls\":[{\"id\":\"c2\","
     "\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"git push\\\"}\",\"status\":"
     "\"ok\"}]}"},
    {"approval_requested", 1, "{\"id\":\"ap-1\",\"callId\":\"c2\",\"tool\":\"exec_command\"}"},
    {"turn_finished", 1, "{\"outcome\":\"approval_requested\"}"},
    {"user_message", 0, "{\"source\":\"spec.messages\",\"index\":0,\"text\":\"also docs\"}"},
    {"approval_decided", 0, "{\"id\":\"ap-1\",\"decision\":\"approved\",\"reason\":\"fine by me\"}"},
    {"turn_started", 2, "{\"turn\":2}"},
    {"tool_call", 2, "{\"callId\":\"c2\",\"tool\":\"exec_command\",\"approvalId\":\"ap-1\"}"},
    {"tool_result", 2, "{\"callId\":\"c2\",\"status\":\"completed\",\"output\":\"pushed \xc3\xa9\"}"},
    {"model_request", 2, "{\"step\":3}"},
    {"model_response", 2, "{\"step\":3,\"kind\":\"ok\",\"content\":\"done \\u00e9\"}"},
    {"turn_finished", 2, "{\"outcome\":\"completed\",\"summary\":\"done\"}"},
    {"user_message", 0, "{\"source\":\"spec.messages\",\"index\":1,\"text\":\"once more\"}"},
    {"turn_started", 3, "{\"turn\":3}"},
    {"model_request", 3, "{\"step\":4}"},
    {"model_response", 3, "{\"step\":4,\"kind\":\"refusal\",\"refusal\":\"no\"}"},
    {"turn_finished", 3, "{\"outcome\":\"refused\"}"},
    {"user_message", 0, "{\"source\":\"spec.messages\",\"index\":2,\"text\":\"please\"}"},
    {"turn_started", 4, "{\"turn\":4}"},
    {"limit_reached", 4, "{\"limit\":\"maxModelTurns\",\"used\":5,\"max\":5}"},
    {"turn_finished", 4, "{\"outcome\":\"limit_reached\"}"},
    /* spec.result.schema: an invalid answer counts across turns */
    {"user_message", 0, "{\"source\":\"spec.messages\",\"index\":3,\"text\":\"as JSON\"}"},
    {"turn_started", 5, "{\"turn\":5}"},
    {"model_request", 5, "{\"step\":5}"},
    {"model_response", 5, "{\"step\":5,\"kind\":\"ok\",\"content\":\"nope\"}"},
    {"result_invalid", 5,
     "{\"attempt\":1,\"problem\":\"is not valid JSON\",\"message\":\"answer in JSON\"}"},
    {"limit_reached", 5, "{\"limit\":\"maxResultAttempts\",\"used\":1,\"max\":1}"},
    {"turn_finished", 5, "{\"outcome\":\"limit_reached\"}"},
};
#define NSESSION (sizeof SESSION / sizeof *SESSION)

static void fold(struct replay_state *s, size_t i)
{
    cJSON *d = NULL;
    if (json_parse(SESSION[i].data, strlen(SESSION[i].data), &d, NULL) != 0)
        th_fail(__FILE__, __LINE__, "bad test data %zu", i);
    struct replay_event e = {i + 1, SESSION[i].type, SESSION[i].turn, NULL, d,
                             "2026-11-30T00:00:01Z"};
    struct tern_err err = {0};
    if (replay_apply(s, &e, &err) != 0)
        th_fail(__FILE__, __LINE__, "apply %zu %s: %s", i, SESSION[i].type, err.msg);
    cJSON_Delete(d);
}

static char *text_of(const struct replay_state *s)
{
    cJSON *j = snapshot_encode(s);
    char *t = json_print(j);
    cJSON_Delete(j);
    return t;
}

TEST(a_snapshot_at_every_boundary_resumes_exactly)
{
    /* the reference: the whole session folded from seq 1 */
    struct replay_state ref;
    replay_state_init(&ref);
    for (size_t i = 0; i < NSESSION; i++)
        fold(&ref, i);
    char *want = text_of(&ref);
    int boundaries = 0;
    for (size_t k = 1; k <= NSESSION; k++) {
        struct replay_state s;
        replay_state_init(&s);
        for (size_t i = 0; i < k; i++)
            fold(&s, i);
        if (!snapshot_due(&s, 0, 1)) {
            replay_state_done(&s);
            continue;
        }
        boundaries++;
        /* through the journal's JSON text, as etcd would carry it */
        char *snap = text_of(&s);
        cJSON *j = NULL;
        ASSERT_OK(json_parse(snap, strlen(snap), &j, NULL));
        struct replay_state r;
        struct tern_err err = {0};
        if (snapshot_decode(j, k, &r, &err) != 0)
            th_fail(__FILE__, __LINE__, "decode at %zu: %s", k, err.msg);
        char *again = text_of(&r);
        ASSERT_EQ_STR(again, snap);
        ASSERT_EQ_INT(r.last_seq, k);
        for (size_t i = k; i < NSESSION; i++)
            fold(&r, i);
        char *got = text_of(&r);
        if (strcmp(got, want) != 0)
            th_fail(__FILE__, __LINE__, "resumed at %zu:\n%s\nreference:\n%s", k, got, want);
        ASSERT_EQ_INT(r.conv.n, ref.conv.n);
        ASSERT_EQ_INT(r.ndecided, ref.ndecided);
        for (size_t i = 0; i < r.ndecided; i++)
            ASSERT_EQ_STR(r.decided_reasons[i], ref.decided_reasons[i]);
        ASSERT_EQ_STR(r.limit_name, ref.limit_name);
        ASSERT_EQ_INT(r.result_failures, ref.result_failures);
        free(got);
        free(again);
        free(snap);
        cJSON_Delete(j);
        replay_state_done(&r);
        replay_state_done(&s);
    }
    /* after the objective, after each finished turn (not while the
     * approval waited with a deferred message), and more */
    ASSERT_CMP_INT(boundaries, >=, 4);
    free(want);
    replay_state_done(&ref);
}

TEST(no_snapshot_in_the_middle_of_a_step)
{
    struct replay_state s;
    replay_state_init(&s);
    for (size_t i = 0; i < 3; i++) /* up to model_request: a request is open */
        fold(&s, i);
    ASSERT_FALSE(snapshot_due(&s, 0, 1));
    fold(&s, 3); /* a response with an unanswered call */
    ASSERT_FALSE(snapshot_due(&s, 0, 1));
    fold(&s, 4);
    fold(&s, 5); /* answered, but the turn is half done */
    ASSERT_FALSE(snapshot_due(&s, 0, 1));
    replay_state_done(&s);
    replay_state_init(&s);
    fold(&s, 0);
    ASSERT_TRUE(snapshot_due(&s, 0, 1));
    ASSERT_FALSE(snapshot_due(&s, 0, 2)); /* not enough events since */
    ASSERT_FALSE(snapshot_due(&s, 0, 0)); /* never */
    ASSERT_FALSE(snapshot_due(&s, 1, 1));
    replay_state_done(&s);
}

TEST(malformed_snapshots_are_refused)
{
    const char *bad[] = {
        "[]",
        "{\"v\":2}",
        "{\"v\":1}",
        "{\"v\":1,\"conv\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
        "{\"v\":1,\"conv\":[{\"role\":\"user\",\"content\":null}]}",
        "{\"v\":1,\"conv\":[{\"role\":\"assistant\",\"content\":null}]}",
        "{\"v\":1,\"conv\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *j = cJSON_Parse(bad[i]);
        struct replay_state r;
        struct tern_err err = {0};
        if (snapshot_decode(j, 5, &r, &err) != TERN_EPARSE)
            th_fail(__FILE__, __LINE__, "accepted %s", bad[i]);
        cJSON_Delete(j);
    }
    /* a whole valid one with a wrong type somewhere */
    struct replay_state s;
    replay_state_init(&s);
    fold(&s, 0);
    cJSON *j = snapshot_encode(&s);
    cJSON_ReplaceItemInObjectCaseSensitive(j, "modelTurns", cJSON_CreateTrue());
    struct replay_state r;
    struct tern_err err = {0};
    ASSERT_EQ_INT(snapshot_decode(j, 1, &r, &err), TERN_EPARSE);
    ASSERT_CONTAINS(err.msg, "modelTurns");
    cJSON_Delete(j);
    replay_state_done(&s);
}

TEST(a_large_conversation_is_snapshotted_less_often)
{
    struct replay_state s;
    replay_state_init(&s);
    char *big = xmalloc(200001);
    memset(big, 'x', 200000);
    big[200000] = 0;
    chat_conv_add(&s.conv, CHAT_USER, big);
    free(big);
    size_t est = snapshot_size_estimate(&s);
    cJSON *j = snapshot_encode(&s);
    char *t = json_print(j);
    /* the estimate is close to what the encoding weighs */
    ASSERT_CMP_INT(est, >=, strlen(t) * 9 / 10);
    ASSERT_CMP_INT(est, <=, strlen(t) * 11 / 10 + 1024);
    free(t);
    cJSON_Delete(j);
    /* 200 KB of state: one snapshot per ~195 events at least, even when
     * every says 1 */
    s.last_seq = 100;
    ASSERT_FALSE(snapshot_due(&s, 0, 1));
    s.last_seq = est / SNAPSHOT_BYTES_PER_EVENT + 1;
    ASSERT_TRUE(snapshot_due(&s, 0, 1));
    ASSERT_FALSE(snapshot_due(&s, 10, 1));
    replay_state_done(&s);
}
