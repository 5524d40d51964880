/* Unit tests of the summary fields the operator decides on: intent,
 * lastDecided, result (journal_summary_apply / to_json / decode). */
#include "harness.h"

#include "journal/journal.h"
#include "json/json.h"

#include <stdio.h>
#include <stdlib.h>

static void fold(struct journal_summary *s, uint64_t seq, enum journal_type t, int64_t turn,
                 const char *data)
{
    struct journal_event ev = {.v = 1, .seq = seq, .type = t, .turn = turn,
                               .time = (char *)"2026-11-30T00:00:00.000000000Z"};
    ASSERT_OK(json_parse(data, strlen(data), &ev.data, NULL));
    ASSERT_OK(journal_summary_apply(s, &ev));
    cJSON_Delete(ev.data);
}

TEST(intent_follows_messages_decisions_and_turn_starts)
{
    struct journal_summary s;
    journal_summary_init(&s);
    ASSERT_FALSE(s.intent);
    fold(&s, 1, JOURNAL_EV_USER_MESSAGE, 0, "{\"text\":\"objective\"}");
    ASSERT_TRUE(s.intent);
    fold(&s, 2, JOURNAL_EV_TURN_STARTED, 1, "{}");
    ASSERT_FALSE(s.intent);
    fold(&s, 3, JOURNAL_EV_APPROVAL_REQUESTED, 1, "{\"id\":\"ap-1\",\"tool\":\"exec_command\"}");
    fold(&s, 4, JOURNAL_EV_TURN_FINISHED, 1, "{\"outcome\":\"approval_requested\"}");
    ASSERT_FALSE(s.intent);
    ASSERT_EQ_STR(s.pending.id, "ap-1");
    fold(&s, 5, JOURNAL_EV_APPROVAL_DECIDED, 1, "{\"id\":\"ap-1\",\"decision\":\"approved\"}");
    ASSERT_TRUE(s.intent);
    ASSERT_NULL(s.pending.id);
    ASSERT_EQ_STR(s.last_decided, "ap-1");
    fold(&s, 6, JOURNAL_EV_TURN_STARTED, 2, "{}");
    fold(&s, 7, JOURNAL_EV_TURN_FINISHED, 2,
         "{\"outcome\":\"completed\",\"summary\":\"done\",\"artifacts\":[\"output/a.md\"]}");
    ASSERT_EQ_STR(s.result, "done");
    ASSERT_EQ_INT(cJSON_GetArraySize(s.artifacts), 1);

    /* survives the summary's JSON round trip */
    cJSON *j = journal_summary_to_json(&s);
    char *txt = json_print(j);
    struct journal_summary d;
    ASSERT_OK(journal_summary_decode(txt, strlen(txt), &d, NULL));
    ASSERT_EQ_STR(d.last_decided, "ap-1");
    ASSERT_EQ_STR(d.result, "done");
    ASSERT_EQ_STR(cJSON_GetArrayItem(d.artifacts, 0)->valuestring, "output/a.md");
    ASSERT_FALSE(d.intent);
    struct journal_summary c;
    journal_summary_copy(&c, &d);
    ASSERT_EQ_STR(c.result, "done");
    journal_summary_done(&c);
    journal_summary_done(&d);
    free(txt);
    cJSON_Delete(j);
    journal_summary_done(&s);
}

TEST(failure_reason_limit_and_good_point_are_folded)
{
    struct journal_summary s;
    journal_summary_init(&s);
    fold(&s, 1, JOURNAL_EV_USER_MESSAGE, 0, "{\"text\":\"objective\"}");
    fold(&s, 2, JOURNAL_EV_TURN_STARTED, 1, "{}");
    fold(&s, 3, JOURNAL_EV_MODEL_REQUEST, 1, "{\"step\":0}");
    ASSERT_EQ_STR(s.first_request, "2026-11-30T00:00:00.000000000Z");
    fold(&s, 4, JOURNAL_EV_MODEL_RESPONSE, 1, "{\"kind\":\"ok\"}");
    ASSERT_EQ_INT(s.good_seq, 4);
    fold(&s, 5, JOURNAL_EV_LIMIT_REACHED, 1, "{\"limit\":\"maxTokens\",\"used\":1686,\"max\":1500}");
    fold(&s, 6, JOURNAL_EV_TURN_FINISHED, 1,
         "{\"outcome\":\"limit_reached\",\"reason\":\"maxTokens\",\"message\":\"maxTokens: used "
         "1686 of 1500\",\"limit\":\"maxTokens\",\"used\":1686,\"max\":1500}");
    ASSERT_EQ_STR(s.outcome, "limit_reached");
    ASSERT_EQ_STR(s.reason, "maxTokens");
    ASSERT_EQ_STR(s.message, "maxTokens: used 1686 of 1500");
    ASSERT_EQ_STR(s.limit, "maxTokens");
    ASSERT_EQ_INT(s.limit_used, 1686);
    ASSERT_EQ_INT(s.limit_max, 1500);
    ASSERT_EQ_INT(s.good_seq, 4); /* the failure's tail is not a good point */
    /* events after the failure (a sandbox switch, a fork) are not either */
    fold(&s, 7, JOURNAL_EV_FORK_CREATED, 1, "{\"child\":\"c\"}");
    ASSERT_EQ_INT(s.good_seq, 4);

    /* round trip */
    cJSON *j = journal_summary_to_json(&s);
    char *txt = json_print(j);
    struct journal_summary d;
    ASSERT_OK(journal_summary_decode(txt, strlen(txt), &d, NULL));
    ASSERT_EQ_STR(d.reason, "maxTokens");
    ASSERT_EQ_STR(d.message, "maxTokens: used 1686 of 1500");
    ASSERT_EQ_STR(d.limit, "maxTokens");
    ASSERT_EQ_INT(d.limit_used, 1686);
    ASSERT_EQ_INT(d.limit_max, 1500);
    ASSERT_EQ_INT(d.good_seq, 4);
    ASSERT_EQ_STR(d.first_request, "2026-11-30T00:00:00.000000000Z");
    journal_summary_done(&d);
    free(txt);
    cJSON_Delete(j);

    /* a retry is an intent; the next turn clears the reason */
    ASSERT_FALSE(s.intent);
    fold(&s, 8, JOURNAL_EV_RETRY, 1, "{\"reason\":\"LimitRaised\"}");
    ASSERT_TRUE(s.intent);
    ASSERT_EQ_STR(s.outcome, "limit_reached"); /* until the next turn starts */
    fold(&s, 9, JOURNAL_EV_TURN_STARTED, 2, "{}");
    ASSERT_NULL(s.outcome);
    ASSERT_NULL(s.reason);
    ASSERT_NULL(s.message);
    ASSERT_NULL(s.limit);
    ASSERT_EQ_INT(s.limit_used, 0);
    fold(&s, 10, JOURNAL_EV_MODEL_REQUEST, 2, "{\"step\":1}");
    ASSERT_EQ_INT(s.good_seq, 10);
    journal_summary_done(&s);
}

TEST(failure_message_is_bounded_on_a_utf8_boundary)
{
    struct journal_summary s;
    journal_summary_init(&s);
    char *data = malloc(8192);
    int n = snprintf(data, 8192, "{\"outcome\":\"error\",\"reason\":\"model_error\",\"message\":\"");
    for (int i = 0; i < 1500; i++) /* 3000 bytes of two-byte characters */
        n += snprintf(data + n, 8192 - (size_t)n, "\xc3\xa9");
    snprintf(data + n, 8192 - (size_t)n, "\"}");
    fold(&s, 1, JOURNAL_EV_TURN_FINISHED, 1, data);
    free(data);
    ASSERT_TRUE(strlen(s.message) <= TERN_JOURNAL_MAX_REASON);
    ASSERT_TRUE(strlen(s.message) >= TERN_JOURNAL_MAX_REASON - 1);
    ASSERT_EQ_INT(strlen(s.message) % 2, 0); /* no half character */
    journal_summary_done(&s);
}

TEST(a_turn_ended_by_the_operator_consumes_the_intent)
{
    /* a Job that failed before its turn started, and an approval that
     * timed out with onTimeout: Fail, end with the intent used up: going
     * on takes a new message or a retry (else a failing Job would be
     * retried forever) */
    struct journal_summary s;
    journal_summary_init(&s);
    fold(&s, 1, JOURNAL_EV_USER_MESSAGE, 0, "{\"text\":\"objective\"}");
    ASSERT_TRUE(s.intent);
    fold(&s, 2, JOURNAL_EV_TURN_FINISHED, 1, "{\"outcome\":\"error\",\"reason\":\"RunnerConfigError\"}");
    ASSERT_FALSE(s.intent);
    fold(&s, 3, JOURNAL_EV_RETRY, 1, "{\"reason\":\"Retry\"}");
    ASSERT_TRUE(s.intent);
    fold(&s, 4, JOURNAL_EV_TURN_STARTED, 2, "{}");
    fold(&s, 5, JOURNAL_EV_APPROVAL_REQUESTED, 2, "{\"id\":\"ap-1\"}");
    fold(&s, 6, JOURNAL_EV_TURN_FINISHED, 2, "{\"outcome\":\"approval_requested\"}");
    fold(&s, 7, JOURNAL_EV_APPROVAL_DECIDED, 2, "{\"id\":\"ap-1\",\"decision\":\"denied\"}");
    ASSERT_TRUE(s.intent);
    fold(&s, 8, JOURNAL_EV_TURN_FINISHED, 2, "{\"outcome\":\"error\",\"reason\":\"ApprovalTimeout\"}");
    ASSERT_FALSE(s.intent);
    journal_summary_done(&s);
}

TEST(fork_of_an_unfinished_turn_continues_it)
{
    struct journal_summary s;
    journal_summary_init(&s);
    fold(&s, 1, JOURNAL_EV_USER_MESSAGE, 0, "{\"text\":\"objective\"}");
    fold(&s, 2, JOURNAL_EV_TURN_STARTED, 1, "{}");
    fold(&s, 3, JOURNAL_EV_MODEL_REQUEST, 1, "{\"step\":0}");
    ASSERT_FALSE(s.intent);
    fold(&s, 4, JOURNAL_EV_FORKED_FROM, 1, "{\"session\":\"p\",\"atSeq\":3}");
    ASSERT_TRUE(s.intent);

    /* a fork at a turn boundary waits like its parent did */
    struct journal_summary b;
    journal_summary_init(&b);
    fold(&b, 1, JOURNAL_EV_USER_MESSAGE, 0, "{\"text\":\"objective\"}");
    fold(&b, 2, JOURNAL_EV_TURN_STARTED, 1, "{}");
    fold(&b, 3, JOURNAL_EV_TURN_FINISHED, 1, "{\"outcome\":\"completed\",\"summary\":\"x\"}");
    fold(&b, 4, JOURNAL_EV_FORKED_FROM, 1, "{\"session\":\"p\",\"atSeq\":3}");
    ASSERT_FALSE(b.intent);
    journal_summary_done(&b);
    journal_summary_done(&s);
}
