/* Unit tests for the journal's pure core: event decoding (v1 and v0),
 * encoding, the summary fold and its JSON, truncation. No etcd. */
#include "harness.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "journal/journal.h"
#include "json/json.h"

#include <stdlib.h>

static struct journal_event dec(const char *s)
{
    struct journal_event ev;
    struct tern_err e = {0};
    cJSON *ch = NULL;
    int r = journal_event_decode(s, strlen(s), &ev, &ch, &e);
    if (r)
        th_fail(__FILE__, __LINE__, "decode %s: %d %s", s, r, e.msg);
    cJSON_Delete(ch);
    return ev;
}

static void dec_err(const char *s, const char *msg_part)
{
    struct journal_event ev;
    struct tern_err e = {0};
    cJSON *ch = NULL;
    int r = journal_event_decode(s, strlen(s), &ev, &ch, &e);
    if (r != TERN_EPARSE)
        th_fail(__FILE__, __LINE__, "decode %s: got %d, expected TERN_EPARSE", s, r);
    ASSERT_CONTAINS(e.msg, msg_part);
}

TEST(decode_v1)
{
    struct journal_event ev = dec(
        "{\"v\":1,\"seq\":42,\"type\":\"tool_call\",\"time\":\"2026-11-30T00:00:00.123456789Z\","
        "\"turn\":3,\"key\":\"uid/"
        "call-1\",\"data\":{\"name\":\"exec_command\",\"n\":9007199254740993}}");
    ASSERT_EQ_INT(ev.v, 1);
    ASSERT_EQ_INT(ev.seq, 42);
    ASSERT_EQ_INT(ev.type, JOURNAL_EV_TOOL_CALL);
    ASSERT_EQ_STR(ev.type_name, "tool_call");
    ASSERT_EQ_STR(ev.time, "2026-11-30T00:00:00.123456789Z");
    ASSERT_EQ_INT(ev.turn, 3);
    ASSERT_EQ_STR(ev.key, "uid/call-1");
    int64_t n = 0;
    ASSERT_OK(json_get_int64(ev.data, "data", "n", JSON_REQUIRED, &n, NULL));
    ASSERT_EQ_INT(n, 9007199254740993ll);
    /* encode -> decode is the identity */
    char *s = journal_event_encode(&ev);
    struct journal_event ev2 = dec(s);
    char *s2 = journal_event_encode(&ev2);
    ASSERT_EQ_STR(s, s2);
    free(s);
    free(s2);
    journal_event_done(&ev2);
    journal_event_done(&ev);

    /* future types are kept as UNKNOWN; absent data is {} */
    ev = dec(
        "{\"v\":1,\"seq\":1,\"type\":\"brand_new\",\"time\":\"2026-11-30T00:00:00Z\",\"extra\":1}");
    ASSERT_EQ_INT(ev.type, JOURNAL_EV_UNKNOWN);
    ASSERT_EQ_STR(ev.type_name, "brand_new");
    ASSERT_TRUE(cJSON_IsObject(ev.data));
    ASSERT_NULL(ev.key);
    journal_event_done(&ev);
}

TEST(decode_v0_converts)
{
    struct journal_event ev = dec("{\"seq\":5,\"kind\":\"tool_output\",\"ts\":1700000004005,"
                                  "\"turn\":1,\"idem\":\"k\",\"payload\":{\"stdout\":\"ok\"}}");
    ASSERT_EQ_INT(ev.v, 0);
    ASSERT_EQ_INT(ev.type, JOURNAL_EV_TOOL_RESULT);
    ASSERT_EQ_STR(ev.time, "2023-11-14T22:13:24.005000000Z");
    ASSERT_EQ_STR(ev.key, "k");
    journal_event_done(&ev);
    ev = dec("{\"seq\":3,\"kind\":\"model_response\",\"ts\":0,\"payload\":{\"tokens\":{\"in\":50,"
             "\"out\":5}}}");
    const cJSON *u = json_get(ev.data, "usage");
    ASSERT_NOT_NULL(u);
    ASSERT_NULL(json_get(ev.data, "tokens"));
    int64_t p = 0;
    ASSERT_OK(json_get_int64(u, "usage", "prompt_tokens", JSON_REQUIRED, &p, NULL));
    ASSERT_EQ_INT(p, 50);
    journal_event_done(&ev);
}

TEST(decode_rejects)
{
    dec_err("[]", "not an object");
    dec_err("{\"v\":2,\"seq\":1,\"type\":\"x\",\"time\":\"2026-11-30T00:00:00Z\"}",
            "unsupported schema version 2");
    dec_err("{\"v\":1,\"seq\":0,\"type\":\"x\",\"time\":\"2026-11-30T00:00:00Z\"}", "event.seq");
    dec_err("{\"v\":1,\"seq\":1,\"type\":\"Bad Type\",\"time\":\"2026-11-30T00:00:00Z\"}",
            "event.type");
    dec_err("{\"v\":1,\"seq\":1,\"type\":\"x\",\"time\":\"yesterday\"}", "event.time");
    dec_err("{\"v\":1,\"seq\":1,\"type\":\"x\",\"time\":\"2026-11-30T00:00:00Z\",\"data\":[1]}",
            "event.data");
    dec_err("{\"v\":1,\"seq\":1,\"type\":\"x\",\"time\":\"2026-11-30T00:00:00Z\",\"turn\":-1}",
            "event.turn");
    dec_err("{\"v\":1,\"seq\":1,\"type\":\"x\",\"time\":\"2026-11-30T00:00:00Z\",\"chunks\":{"
            "\"id\":\"a/b\",\"n\":1,\"bytes\":5}}",
            "chunks");
    dec_err("{\"seq\":1,\"kind\":\"x\"}", "event.ts");
    dec_err("{\"v\":1,\"v\":1}", "duplicate");
    /* a chunk head is refused where chunks are not expected */
    struct journal_event ev;
    struct tern_err e = {0};
    const char *head = "{\"v\":1,\"seq\":1,\"type\":\"x\",\"time\":\"2026-11-30T00:00:00Z\","
                       "\"chunks\":{\"id\":\"ab\",\"n\":2,\"bytes\":600000}}";
    ASSERT_EQ_INT(journal_event_decode(head, strlen(head), &ev, NULL, &e), TERN_EPARSE);
    cJSON *ch = NULL;
    ASSERT_OK(journal_event_decode(head, strlen(head), &ev, &ch, &e));
    ASSERT_NOT_NULL(ch);
    cJSON_Delete(ch);
    journal_event_done(&ev);
}

static void apply(struct journal_summary *s, uint64_t seq, const char *type, int64_t turn,
                  const char *data)
{
    struct journal_event ev = {.seq = seq,
                               .type = journal_type_parse(type),
                               .type_name = (char *)type,
                               .time = (char *)"2026-11-30T00:00:00.000000001Z",
                               .turn = turn,
                               .data = cJSON_Parse(data ? data : "{}")};
    int r = journal_summary_apply(s, &ev);
    cJSON_Delete(ev.data);
    if (r)
        th_fail(__FILE__, __LINE__, "apply seq %llu %s: %d", (unsigned long long)seq, type, r);
}

TEST(summary_fold)
{
    struct journal_summary s;
    journal_summary_init(&s);
    apply(&s, 1, "user_message", 0, "{\"text\":\"hi\"}");
    apply(&s, 2, "turn_started", 1, NULL);
    apply(&s, 3, "model_response", 1,
          "{\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20,\"cost_micro_usd\":7}}");
    apply(&s, 4, "tool_call", 1, NULL);
    apply(&s, 5, "approval_requested", 1,
          "{\"id\":\"ap-1\",\"tool\":\"exec_command\",\"summary\":\"git push\"}");
    apply(&s, 6, "turn_finished", 1, "{\"outcome\":\"approval_requested\"}");
    ASSERT_EQ_STR(s.pending.id, "ap-1");
    ASSERT_EQ_STR(s.outcome, "approval_requested");
    apply(&s, 7, "approval_decided", 1, "{\"id\":\"ap-other\"}");
    ASSERT_EQ_STR(s.pending.id, "ap-1"); /* not the pending one */
    apply(&s, 8, "approval_decided", 1, "{\"id\":\"ap-1\",\"decision\":\"approve\"}");
    ASSERT_NULL(s.pending.id);
    apply(&s, 9, "turn_started", 2, NULL);
    ASSERT_NULL(s.outcome);
    apply(&s, 10, "model_response", 2,
          "{\"usage\":{\"prompt_tokens\":-5,\"completion_tokens\":\"x\"}}");
    apply(&s, 11, "mystery", 2, NULL);
    ASSERT_EQ_INT(s.last_seq, 11);
    ASSERT_EQ_INT(s.turn, 2);
    ASSERT_EQ_INT(s.messages, 1);
    ASSERT_EQ_INT(s.usage.model_turns, 2);
    ASSERT_EQ_INT(s.usage.prompt_tokens, 100); /* negative / bad counts ignored */
    ASSERT_EQ_INT(s.usage.completion_tokens, 20);
    ASSERT_EQ_INT(s.usage.cost_micro_usd, 7);
    ASSERT_EQ_INT(s.usage.tool_calls, 1);

    /* gaps and repeats are refused */
    struct journal_event ev = {.seq = 13, .type = JOURNAL_EV_TOOL_CALL, .data = NULL};
    ASSERT_EQ_INT(journal_summary_apply(&s, &ev), TERN_EINVALID);
    ev.seq = 11;
    ASSERT_EQ_INT(journal_summary_apply(&s, &ev), TERN_EINVALID);

    /* JSON round trip */
    cJSON *j = journal_summary_to_json(&s);
    char *txt = json_print(j);
    ASSERT_CONTAINS(txt, "\"usage\":{\"modelTurns\":2,\"toolCalls\":1,\"promptTokens\":100,"
                         "\"completionTokens\":20,\"costMicroUSD\":7}");
    struct journal_summary t;
    struct tern_err e = {0};
    ASSERT_OK(journal_summary_decode(txt, strlen(txt), &t, &e));
    cJSON *j2 = journal_summary_to_json(&t);
    char *txt2 = json_print(j2);
    ASSERT_EQ_STR(txt, txt2);

    /* a snapshot replaces the fold (and may start a replay) */
    struct journal_summary r;
    journal_summary_init(&r);
    char *snap = xasprintf("{\"upto\":11,\"summary\":%s,\"state\":{}}", txt);
    apply(&r, 12, "snapshot", 2, snap);
    ASSERT_EQ_INT(r.last_seq, 12);
    ASSERT_EQ_INT(r.snapshot_seq, 12);
    ASSERT_EQ_INT(r.usage.prompt_tokens, 100);
    apply(&r, 13, "tool_call", 2, NULL);
    ASSERT_EQ_INT(r.usage.tool_calls, 2);
    free(snap);
    free(txt);
    free(txt2);
    cJSON_Delete(j);
    cJSON_Delete(j2);
    journal_summary_done(&s);
    journal_summary_done(&t);
    journal_summary_done(&r);

    ASSERT_EQ_INT(journal_summary_decode("{\"v\":1}", 7, &t, &e), TERN_EPARSE);
    ASSERT_EQ_INT(journal_summary_decode("{\"v\":1,\"lastSeq\":-1}", 20, &t, &e), TERN_EPARSE);
}

TEST(types_and_truncation)
{
    ASSERT_EQ_STR(journal_type_name(JOURNAL_EV_FORKED_FROM), "forked_from");
    ASSERT_EQ_INT(journal_type_parse("limit_reached"), JOURNAL_EV_LIMIT_REACHED);
    ASSERT_EQ_INT(journal_type_parse("nope"), JOURNAL_EV_UNKNOWN);
    ASSERT_NULL(journal_type_name(JOURNAL_EV_UNKNOWN));
    for (int t = JOURNAL_EV_USER_MESSAGE; t <= JOURNAL_EV_SNAPSHOT; t++)
        ASSERT_EQ_INT(journal_type_parse(journal_type_name((enum journal_type)t)), t);

    size_t n = 100000;
    char *big = xmalloc(n + 1);
    for (size_t i = 0; i < n; i++)
        big[i] = i % 100 == 0 ? '\n' : 'y';
    big[n] = 0;
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "stdout", big);
    cJSON *t = journal_truncate_data(d, 4096);
    char *s = json_print(t);
    ASSERT_CMP_INT(strlen(s), <=, 4096);
    ASSERT_CONTAINS(s, "\"truncated\":true");
    ASSERT_CONTAINS(s, "\"originalBytes\":");
    free(s);
    cJSON_Delete(t);
    cJSON_Delete(d);
    free(big);
    char *p = journal_prefix("abc-1");
    ASSERT_EQ_STR(p, "/tern/v1/s/abc-1/");
    free(p);
    ASSERT_NULL(journal_prefix("a/b"));
    ASSERT_NULL(journal_prefix(".."));
    ASSERT_NULL(journal_prefix(""));
}

TEST(key_parse)
{
    char uid[TERN_JOURNAL_MAX_UID + 1];
    uint64_t seq = 0;
    ASSERT_EQ_INT(journal_key_parse("/tern/v1/s/abc-1/sum", uid, NULL), JOURNAL_KEY_SUM);
    ASSERT_EQ_STR(uid, "abc-1");
    ASSERT_EQ_INT(journal_key_parse("/tern/v1/s/u/ev/000000000000002a", uid, &seq),
                  JOURNAL_KEY_EVENT);
    ASSERT_EQ_INT(seq, 42);
    ASSERT_EQ_STR(uid, "u");
    ASSERT_EQ_INT(journal_key_parse("/tern/v1/s/u/ch/000000000000002a/ab/0000", uid, NULL),
                  JOURNAL_KEY_CHUNK);
    ASSERT_EQ_INT(journal_key_parse("/tern/v1/s/u/lock", uid, NULL), JOURNAL_KEY_LOCK);
    ASSERT_EQ_INT(journal_key_parse("/tern/v1/s/u/meta", uid, NULL), JOURNAL_KEY_META);
    ASSERT_EQ_INT(journal_key_parse("/tern/v1/s/u/ev/2a", uid, NULL), JOURNAL_KEY_OTHER);
    ASSERT_EQ_INT(journal_key_parse("/tern/v1/s/u/ev/0000000000000000", uid, NULL),
                  JOURNAL_KEY_OTHER);
    ASSERT_EQ_INT(journal_key_parse("/tern/v1/s//sum", uid, NULL), JOURNAL_KEY_OTHER);
    ASSERT_EQ_INT(journal_key_parse("/tern/v1/s/../sum", uid, NULL), JOURNAL_KEY_OTHER);
    ASSERT_EQ_INT(journal_key_parse("/registry/pods/x", uid, NULL), JOURNAL_KEY_OTHER);
    ASSERT_EQ_INT(journal_key_parse("/tern/v1/s/u/summary", uid, NULL), JOURNAL_KEY_OTHER);
}

TEST(summary_result_is_bounded)
{
    /* a final answer of 100 KiB (é = 2 bytes): the summary keeps a valid
     * UTF-8 prefix and says it was cut; a short one is kept whole */
    size_t n = 100u << 10;
    char *big = xmalloc(n + 1);
    for (size_t i = 0; i < n; i += 2)
        memcpy(big + i, "\xc3\xa9", 2);
    big[n] = 0;
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "outcome", "completed");
    json_add_string(d, "summary", big);
    char *txt = json_print(d);
    struct journal_summary s;
    journal_summary_init(&s);
    apply(&s, 1, "turn_finished", 1, txt);
    ASSERT_CMP_INT(strlen(s.result), <=, TERN_JOURNAL_MAX_RESULT);
    ASSERT_CMP_INT(strlen(s.result), >, TERN_JOURNAL_MAX_RESULT - 200);
    ASSERT_CONTAINS(s.result, "[truncated: 102400 bytes in all");
    const char *cut = strstr(s.result, "\n[truncated");
    ASSERT_TRUE((cut - s.result) % 2 == 0); /* never half a character */
    apply(&s, 2, "turn_finished", 1, "{\"outcome\":\"completed\",\"summary\":\"short\"}");
    ASSERT_EQ_STR(s.result, "short");
    journal_summary_done(&s);
    free(txt);
    cJSON_Delete(d);
    free(big);
}

TEST(summary_keeps_a_validated_result)
{
    struct journal_summary s;
    journal_summary_init(&s);
    apply(&s, 1, "turn_finished", 1,
          "{\"outcome\":\"completed\",\"summary\":\"{\\\"n\\\":4}\",\"result\":{\"n\":4}}");
    char *v = json_print(s.result_value);
    ASSERT_EQ_STR(v, "{\"n\":4}");
    free(v);
    ASSERT_NULL(s.result_ref);
    /* through the summary's JSON and back */
    cJSON *j = journal_summary_to_json(&s);
    char *txt = json_print(j);
    struct journal_summary d;
    ASSERT_OK(journal_summary_decode(txt, strlen(txt), &d, NULL));
    v = json_print(d.result_value);
    ASSERT_EQ_STR(v, "{\"n\":4}");
    free(v);
    journal_summary_done(&d);
    free(txt);
    cJSON_Delete(j);
    /* a later answer with a reference replaces it; a malformed reference is dropped */
    const char *sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    char *ev = xasprintf("{\"outcome\":\"completed\",\"resultRef\":{\"path\":\"output/result.json\","
                         "\"size\":20000,\"sha256\":\"%s\"}}", sha);
    apply(&s, 2, "turn_finished", 2, ev);
    free(ev);
    ASSERT_NULL(s.result_value);
    ASSERT_EQ_STR(json_get(s.result_ref, "path")->valuestring, "output/result.json");
    ASSERT_EQ_STR(json_get(s.result_ref, "sha256")->valuestring, sha);
    apply(&s, 3, "turn_finished", 3,
          "{\"outcome\":\"completed\",\"resultRef\":{\"path\":\"x\",\"size\":-1,\"sha256\":\"ab\"}}");
    ASSERT_NULL(s.result_ref);
    /* a value over TERN_RESULT_MAX_VALUE is not kept (the runner never sends one) */
    struct buf b;
    buf_init(&b, 1u << 20);
    buf_puts(&b, "{\"outcome\":\"completed\",\"result\":\"");
    for (unsigned i = 0; i <= TERN_RESULT_MAX_VALUE; i++)
        buf_putc(&b, 'a');
    buf_puts(&b, "\"}");
    apply(&s, 4, "turn_finished", 4, buf_str(&b));
    ASSERT_NULL(s.result_value);
    buf_done(&b);
    journal_summary_done(&s);
}
