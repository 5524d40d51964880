/* libFuzzer target: a journal snapshot's data.state (runner/snapshot.h),
 * which the runner rebuilds its agent state from: whatever decodes encodes
 * to a text that decodes to the same encoding, and the state folds events
 * on top without crashing. */
#include "json/json.h"
#include "runner/snapshot.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *j = NULL;
    if (json_parse((const char *)data, size, &j, NULL) != 0)
        return 0;
    struct replay_state s;
    if (snapshot_decode(j, 7, &s, NULL) == 0) {
        cJSON *e = snapshot_encode(&s);
        char *t = json_print(e);
        cJSON *back = NULL;
        struct replay_state s2;
        if (json_parse(t, strlen(t), &back, NULL) != 0 || snapshot_decode(back, 7, &s2, NULL) != 0)
            abort();
        cJSON *e2 = snapshot_encode(&s2);
        char *t2 = json_print(e2);
        if (strcmp(t, t2) != 0)
            abort();
        (void)snapshot_due(&s2, 0, 1);
        /* a tool result and a message folded on top */
        cJSON *d = cJSON_Parse("{\"callId\":\"call_0_0\",\"output\":\"x\"}");
        struct replay_event ev = {8, "tool_result", s2.turn, NULL, d, NULL};
        replay_apply(&s2, &ev, NULL);
        cJSON_Delete(d);
        free(t2);
        cJSON_Delete(e2);
        replay_state_done(&s2);
        cJSON_Delete(back);
        free(t);
        cJSON_Delete(e);
        replay_state_done(&s);
    }
    cJSON_Delete(j);
    return 0;
}
