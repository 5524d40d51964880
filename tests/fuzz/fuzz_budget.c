/* libFuzzer target: what team budgets read from outside: an AgentBudget
 * (from the API, or its mirror from etcd) -> bspec_parse, whose mirror
 * must parse back to the same; a window's counters, a concurrency ledger
 * and a budget_reserved event's data (from etcd and the journal) -> their
 * parsers and the reservation fold. */
#include "budget/bspec.h"
#include "budget/ledger.h"
#include "json/json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tern_err e = {0};
    struct ledger_counters c;
    struct ledger_slots s;
    if (ledger_counters_parse((const char *)data, size, &c, &e) == 0 &&
        (c.tokens < 0 || c.res_tokens < 0 || c.started < 0))
        abort();
    if (ledger_slots_parse((const char *)data, size, &s, &e) == 0)
        ledger_slots_done(&s);
    cJSON *j = NULL;
    if (json_parse((const char *)data, size, &j, NULL) != 0)
        return 0;
    struct bspec b;
    int r = bspec_parse(j, &b, &e);
    if (r == 0) {
        cJSON *m = bspec_mirror(&b);
        struct bspec b2;
        if (bspec_parse(m, &b2, &e) != 0)
            abort();
        cJSON *m2 = bspec_mirror(&b2);
        if (!json_equal(m, m2))
            abort();
        (void)bspec_matches(&b, json_get(json_get(j, "metadata"), "labels"));
        cJSON_Delete(m);
        cJSON_Delete(m2);
        bspec_done(&b2);
        bspec_done(&b);
    } else if (r != TERN_EINVALID || !e.msg[0]) {
        abort();
    }
    struct ledger_track t;
    ledger_track_init(&t, "u");
    ledger_track_apply(&t, "budget_reserved", 3, j);
    ledger_track_apply(&t, "model_response", 4, j);
    ledger_track_done(&t);
    cJSON_Delete(j);
    return 0;
}
