/* libFuzzer target: journal event decoding (schema v1 and v0), encoding
 * round trip, the summary fold and summary decoding. */
#include "journal/journal.h"
#include "json/json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct journal_summary sum;
    if (journal_summary_decode(s, size, &sum, NULL) == 0) {
        cJSON *j = journal_summary_to_json(&sum);
        char *t = json_print(j);
        struct journal_summary again;
        if (journal_summary_decode(t, strlen(t), &again, NULL) != 0)
            abort();
        journal_summary_done(&again);
        free(t);
        cJSON_Delete(j);
        journal_summary_done(&sum);
    }
    struct journal_event ev;
    cJSON *chunks = NULL;
    if (journal_event_decode(s, size, &ev, &chunks, NULL) != 0)
        return 0;
    /* whatever decodes re-encodes as v1 and decodes to the same encoding */
    char *enc = journal_event_encode(&ev);
    struct journal_event ev2;
    cJSON *ch2 = NULL;
    if (journal_event_decode(enc, strlen(enc), &ev2, &ch2, NULL) != 0)
        abort();
    char *enc2 = journal_event_encode(&ev2);
    if (strcmp(enc, enc2) != 0)
        abort();
    /* and folds (as the first event, or after its predecessor) */
    journal_summary_init(&sum);
    sum.last_seq = ev.seq - 1;
    if (journal_summary_apply(&sum, &ev) != 0 || sum.last_seq != ev.seq)
        abort();
    journal_summary_done(&sum);
    free(enc);
    free(enc2);
    cJSON_Delete(ch2);
    journal_event_done(&ev2);
    cJSON_Delete(chunks);
    journal_event_done(&ev);
    return 0;
}
