/* Unit tests of the summary fields the operator decides on: intent,
 * lastDecided, result (journal_summary_apply / to_json / decode). */
#include "harness.h"

#include "journal/journal.h"
#include "json/json.h"

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
