/* Unit tests: budget/bspec (AgentBudget spec, mirror, selector) and
 * budget/ledger (reservation arithmetic, the concurrency ledger, admission
 * order, the reservation fold). */
#include "harness.h"

#include "base/mem.h"
#include "budget/bspec.h"
#include "budget/ledger.h"
#include "json/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *parse(const char *s)
{
    cJSON *j = NULL;
    struct tern_err err = {0};
    if (json_parse(s, strlen(s), &j, &err))
        th_fail(__FILE__, __LINE__, "json: %s: %s", err.msg, s);
    return j;
}

static int spec_from(const char *spec_json, struct bspec *b, struct tern_err *err)
{
    char *s = xasprintf("{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentBudget\","
                        "\"metadata\":{\"namespace\":\"team-a\",\"name\":\"daily\",\"uid\":\"u1\","
                        "\"generation\":3},\"spec\":%s}",
                        spec_json);
    cJSON *j = parse(s);
    free(s);
    int rc = bspec_parse(j, b, err);
    cJSON_Delete(j);
    return rc;
}

TEST(spec_defaults_and_mirror)
{
    struct bspec b;
    struct tern_err err = {0};
    ASSERT_EQ_INT(spec_from("{\"limits\":{\"tokens\":1000}}", &b, &err), 0);
    ASSERT_EQ_STR(b.name, "daily");
    ASSERT_EQ_STR(b.ns, "team-a");
    ASSERT_EQ_INT(b.generation, 3);
    ASSERT_EQ_INT(b.period, TZWIN_DAY);
    ASSERT_EQ_STR(b.time_zone, "UTC");
    ASSERT_EQ_INT(b.limit[BSPEC_TOKENS], 1000);
    ASSERT_EQ_INT(b.limit[BSPEC_COST], -1);
    ASSERT_FALSE(bspec_limited(&b, BSPEC_CONCURRENT));
    ASSERT_FALSE(b.selector.set);
    /* the mirror parses back to the same */
    cJSON *m = bspec_mirror(&b);
    char *text = json_print(m);
    ASSERT_CONTAINS(text, "\"period\":\"Day\"");
    ASSERT_CONTAINS(text, "\"timeZone\":\"UTC\"");
    struct bspec b2;
    ASSERT_EQ_INT(bspec_parse(m, &b2, &err), 0);
    cJSON *m2 = bspec_mirror(&b2);
    ASSERT_TRUE(json_equal(m, m2));
    free(text);
    cJSON_Delete(m);
    cJSON_Delete(m2);
    bspec_done(&b2);
    bspec_done(&b);

    ASSERT_EQ_INT(spec_from("{\"window\":{\"period\":\"Month\",\"timeZone\":\"Europe/Berlin\"},"
                            "\"limits\":{\"concurrentSessions\":0,\"sessionsStarted\":20,"
                            "\"costMicroUSD\":20000000},\"selector\":{\"matchLabels\":"
                            "{\"team\":\"a\"},\"matchExpressions\":[{\"key\":\"tier\","
                            "\"operator\":\"In\",\"values\":[\"gold\",\"silver\"]}]}}",
                            &b, &err),
                  0);
    ASSERT_EQ_INT(b.period, TZWIN_MONTH);
    ASSERT_EQ_INT(b.limit[BSPEC_CONCURRENT], 0);
    ASSERT_TRUE(bspec_limited(&b, BSPEC_CONCURRENT));
    ASSERT_EQ_INT(b.selector.nlabels, 1);
    ASSERT_EQ_INT(b.selector.nreqs, 1);
    m = bspec_mirror(&b);
    ASSERT_EQ_INT(bspec_parse(m, &b2, &err), 0);
    m2 = bspec_mirror(&b2);
    ASSERT_TRUE(json_equal(m, m2));
    cJSON_Delete(m);
    cJSON_Delete(m2);
    bspec_done(&b2);
    bspec_done(&b);
}

TEST(spec_errors_name_the_field)
{
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"{}", "spec.limits"},
        {"{\"limits\":{}}", "set at least one"},
        {"{\"limits\":{\"tokens\":-1}}", "spec.limits.tokens"},
        {"{\"limits\":{\"tokens\":\"x\"}}", "spec.limits.tokens"},
        {"{\"limits\":{\"maxTokens\":5}}", "spec.limits.maxTokens: unknown"},
        {"{\"limits\":{\"concurrentSessions\":1000000}}", "spec.limits.concurrentSessions"},
        {"{\"limits\":{\"tokens\":1},\"window\":{\"period\":\"Week\"}}", "spec.window.period"},
        {"{\"limits\":{\"tokens\":1},\"window\":{\"timeZone\":\"../etc/passwd\"}}",
         "spec.window.timeZone"},
        {"{\"limits\":{\"tokens\":1},\"selector\":{\"matchExpressions\":[{\"key\":\"a\","
         "\"operator\":\"Near\"}]}}",
         "operator"},
        {"{\"limits\":{\"tokens\":1},\"selector\":{\"matchExpressions\":[{\"key\":\"a\","
         "\"operator\":\"In\"}]}}",
         "values: required"},
        {"{\"limits\":{\"tokens\":1},\"selector\":{\"matchExpressions\":[{\"key\":\"a\","
         "\"operator\":\"Exists\",\"values\":[\"x\"]}]}}",
         "must be empty"},
        {"{\"limits\":{\"tokens\":1},\"selector\":{\"matchLabels\":{\"bad key!\":\"x\"}}}",
         "matchLabels"},
        {"{\"limits\":{\"tokens\":1},\"selector\":{\"matchLabels\":{\"a\":\"-bad\"}}}",
         "matchLabels"},
        {"{\"limits\":{\"tokens\":1},\"selector\":{\"other\":1}}", "spec.selector.other"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct bspec b;
        struct tern_err err = {0};
        if (spec_from(cases[i].spec, &b, &err) != TERN_EINVALID)
            th_fail(__FILE__, __LINE__, "accepted %s", cases[i].spec);
        if (!strstr(err.msg, cases[i].want))
            th_fail(__FILE__, __LINE__, "%s: \"%s\" does not say %s", cases[i].spec, err.msg,
                    cases[i].want);
    }
    /* a name that is not a DNS label */
    cJSON *j = parse("{\"metadata\":{\"namespace\":\"a\",\"name\":\"Big.Name\"},"
                     "\"spec\":{\"limits\":{\"tokens\":1}}}");
    struct bspec b;
    struct tern_err err = {0};
    ASSERT_EQ_INT(bspec_parse(j, &b, &err), TERN_EINVALID);
    ASSERT_CONTAINS(err.msg, "metadata.name");
    cJSON_Delete(j);
}

TEST(selector_matching)
{
    struct bspec b;
    struct tern_err err = {0};
    ASSERT_EQ_INT(spec_from("{\"limits\":{\"tokens\":1},\"selector\":{\"matchLabels\":"
                            "{\"team\":\"a\"},\"matchExpressions\":["
                            "{\"key\":\"tier\",\"operator\":\"In\",\"values\":[\"gold\"]},"
                            "{\"key\":\"tern.dev/batch\",\"operator\":\"DoesNotExist\"},"
                            "{\"key\":\"env\",\"operator\":\"NotIn\",\"values\":[\"prod\"]},"
                            "{\"key\":\"owner\",\"operator\":\"Exists\"}]}}",
                            &b, &err),
                  0);
    static const struct {
        const char *labels;
        bool match;
    } cases[] = {
        {"{\"team\":\"a\",\"tier\":\"gold\",\"owner\":\"x\"}", true},
        {"{\"team\":\"a\",\"tier\":\"gold\",\"owner\":\"x\",\"env\":\"dev\"}", true},
        {"{\"team\":\"a\",\"tier\":\"gold\",\"owner\":\"x\",\"env\":\"prod\"}", false},
        {"{\"team\":\"b\",\"tier\":\"gold\",\"owner\":\"x\"}", false},
        {"{\"team\":\"a\",\"tier\":\"silver\",\"owner\":\"x\"}", false},
        {"{\"team\":\"a\",\"owner\":\"x\"}", false},
        {"{\"team\":\"a\",\"tier\":\"gold\"}", false},
        {"{\"team\":\"a\",\"tier\":\"gold\",\"owner\":\"x\",\"tern.dev/batch\":\"\"}", false},
        {"{}", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON *l = parse(cases[i].labels);
        if (bspec_matches(&b, l) != cases[i].match)
            th_fail(__FILE__, __LINE__, "%s: expected %d", cases[i].labels, cases[i].match);
        cJSON_Delete(l);
    }
    ASSERT_FALSE(bspec_matches(&b, NULL));
    bspec_done(&b);
    /* no selector: every session; an empty one too */
    ASSERT_EQ_INT(spec_from("{\"limits\":{\"tokens\":1}}", &b, &err), 0);
    ASSERT_TRUE(bspec_matches(&b, NULL));
    bspec_done(&b);
    ASSERT_EQ_INT(spec_from("{\"limits\":{\"tokens\":1},\"selector\":{}}", &b, &err), 0);
    ASSERT_TRUE(b.selector.set);
    ASSERT_TRUE(bspec_matches(&b, NULL));
    bspec_done(&b);
}

TEST(formatting)
{
    char out[40];
    ASSERT_EQ_STR(bspec_format(BSPEC_COST, 20000000, out), "$20.00");
    ASSERT_EQ_STR(bspec_format(BSPEC_COST, 1230000, out), "$1.23");
    ASSERT_EQ_STR(bspec_format(BSPEC_COST, 1234, out), "$0.001234");
    ASSERT_EQ_STR(bspec_format(BSPEC_COST, 1500, out), "$0.0015");
    ASSERT_EQ_STR(bspec_format(BSPEC_COST, 0, out), "$0.00");
    ASSERT_EQ_STR(bspec_format(BSPEC_TOKENS, 98765, out), "98765");
    ASSERT_EQ_STR(bspec_format(BSPEC_TOKENS, -1, out), "-");
    enum bspec_dim d;
    ASSERT_EQ_INT(bspec_dim_parse("sessionsStarted", &d), 0);
    ASSERT_EQ_INT(d, BSPEC_STARTED);
    ASSERT_EQ_STR(bspec_dim_reason(BSPEC_COST), "CostMicroUSD");
    ASSERT_NE_INT(bspec_dim_parse("maxTokens", &d), 0);
}

/* ---- reservation arithmetic ----------------------------------------------- */

static struct bspec limits(int64_t tokens, int64_t cost)
{
    struct bspec b = {0};
    for (int d = 0; d < BSPEC_NDIMS; d++)
        b.limit[d] = -1;
    b.limit[BSPEC_TOKENS] = tokens;
    b.limit[BSPEC_COST] = cost;
    return b;
}

TEST(worst_case)
{
    struct price_entry p = {.model = "m", .input = 1000000, .cached_input = 500000,
                            .output = 4000000}; /* $1, $0.5, $4 per 1M */
    struct ledger_amount a;
    ledger_worst_case(10000, 500, &p, &a);
    ASSERT_EQ_INT(a.tokens, 10500);
    ASSERT_EQ_INT(a.cost, 10000 + 2000); /* micro-USD */
    /* cached input dearer than input (odd table): the dearer one */
    p.cached_input = 3000000;
    ledger_worst_case(1000, 0, &p, &a);
    ASSERT_EQ_INT(a.cost, 3000);
    ledger_worst_case(1000, 100, NULL, &a);
    ASSERT_EQ_INT(a.tokens, 1100);
    ASSERT_EQ_INT(a.cost, -1);
}

TEST(fits_reserve_settle)
{
    struct bspec b = limits(10000, -1);
    struct ledger_counters c = {0};
    struct ledger_amount want = {4000, 0}, used = {1500, 0};
    struct ledger_refusal why;
    ASSERT_TRUE(ledger_fits(&b, &c, &want, &why));
    ledger_reserve(&c, &want);
    ASSERT_TRUE(ledger_fits(&b, &c, &want, &why)); /* 8000 <= 10000 */
    ledger_reserve(&c, &want);
    ASSERT_FALSE(ledger_fits(&b, &c, &want, &why)); /* 12000 > 10000 */
    ASSERT_EQ_INT(why.dim, BSPEC_TOKENS);
    ASSERT_EQ_INT(why.reserved, 8000);
    ASSERT_EQ_INT(why.want, 4000);
    ASSERT_EQ_INT(why.limit, 10000);
    char *t = ledger_refusal_text(&why);
    ASSERT_EQ_STR(t, "tokens: 0 used + 8000 reserved + 4000 needed > 10000");
    free(t);
    ledger_settle(&c, &want, &used);
    ASSERT_EQ_INT(c.tokens, 1500);
    ASSERT_EQ_INT(c.res_tokens, 4000);
    ASSERT_EQ_INT(c.calls, 1);
    ledger_settle(&c, &want, NULL); /* released */
    ASSERT_EQ_INT(c.res_tokens, 0);
    ASSERT_EQ_INT(c.calls, 1);
    /* exactly at the limit fits; one over does not */
    c = (struct ledger_counters){.tokens = 6000};
    ASSERT_TRUE(ledger_fits(&b, &c, &want, NULL));
    want.tokens = 4001;
    ASSERT_FALSE(ledger_fits(&b, &c, &want, NULL));
    /* a limit of 0 allows nothing, no limit allows anything */
    b = limits(0, -1);
    want.tokens = 1;
    ASSERT_FALSE(ledger_fits(&b, &(struct ledger_counters){0}, &want, NULL));
    b = limits(-1, -1);
    want.tokens = INT64_MAX / 2;
    ASSERT_TRUE(ledger_fits(&b, &(struct ledger_counters){.tokens = INT64_MAX / 2}, &want, NULL));
    /* cost: an unknown price never fits a cost limit */
    b = limits(-1, 5000);
    struct ledger_amount unknown = {10, -1};
    ASSERT_FALSE(ledger_fits(&b, &(struct ledger_counters){0}, &unknown, &why));
    ASSERT_EQ_INT(why.dim, BSPEC_COST);
    t = ledger_refusal_text(&why);
    ASSERT_CONTAINS(t, "no price");
    free(t);
    struct ledger_amount ok = {10, 5000};
    ASSERT_TRUE(ledger_fits(&b, &(struct ledger_counters){0}, &ok, NULL));
    ASSERT_FALSE(ledger_fits(&b, &(struct ledger_counters){.res_cost = 1}, &ok, &why));
    t = ledger_refusal_text(&why);
    ASSERT_EQ_STR(t, "costMicroUSD: $0.00 used + $0.000001 reserved + $0.005 needed > $0.005");
    free(t);
    /* settle never goes below zero, sums saturate */
    struct ledger_counters z = {.res_tokens = 5};
    ledger_settle(&z, &(struct ledger_amount){100, 100}, &(struct ledger_amount){INT64_MAX, 1});
    ASSERT_EQ_INT(z.res_tokens, 0);
    ASSERT_CMP_INT(z.tokens, >, 0);
    ledger_settle(&z, &(struct ledger_amount){0, 0}, &(struct ledger_amount){INT64_MAX, 1});
    ASSERT_CMP_INT(z.tokens, >, 0);
}

/* The invariant under every interleaving of reserve and settle: used never
 * exceeds the limit when no call uses more than its reservation. */
TEST(no_overshoot_random)
{
    unsigned seed = 7;
    for (int run = 0; run < 200; run++) {
        struct bspec b = limits(1000 + rand_r(&seed) % 20000, 500 + rand_r(&seed) % 9000);
        struct ledger_counters c = {0};
        struct ledger_amount open[16];
        size_t nopen = 0;
        for (int step = 0; step < 400; step++) {
            if (nopen < 16 && rand_r(&seed) % 2) {
                struct ledger_amount w = {1 + rand_r(&seed) % 3000, rand_r(&seed) % 2000};
                if (ledger_fits(&b, &c, &w, NULL)) {
                    ledger_reserve(&c, &w);
                    open[nopen++] = w;
                }
            } else if (nopen) {
                size_t i = rand_r(&seed) % nopen;
                struct ledger_amount u = {(int64_t)(rand_r(&seed) % (unsigned)(open[i].tokens + 1)),
                                          (int64_t)(rand_r(&seed) % (unsigned)(open[i].cost + 1))};
                ledger_settle(&c, &open[i], rand_r(&seed) % 5 ? &u : NULL);
                open[i] = open[--nopen];
            }
            ASSERT_CMP_INT(c.tokens + c.res_tokens, <=, b.limit[BSPEC_TOKENS]);
            ASSERT_CMP_INT(c.cost + c.res_cost, <=, b.limit[BSPEC_COST]);
        }
    }
}

TEST(counters_codec)
{
    struct ledger_counters c = {.tokens = 5, .cost = 6, .res_tokens = 7, .res_cost = 8,
                                .calls = 2, .refused = 1, .started = 3, .start = 100, .end = 200};
    cJSON *j = ledger_counters_json(&c);
    char *s = json_print(j);
    struct ledger_counters d;
    struct tern_err err = {0};
    ASSERT_EQ_INT(ledger_counters_parse(s, strlen(s), &d, &err), 0);
    ASSERT_TRUE(memcmp(&c, &d, sizeof c) == 0);
    free(s);
    cJSON_Delete(j);
    ASSERT_EQ_INT(ledger_counters_parse("{\"tokens\":-1}", 13, &d, &err), TERN_EINVALID);
    ASSERT_EQ_INT(ledger_counters_parse("[1]", 3, &d, &err), TERN_EINVALID);
    ASSERT_EQ_INT(ledger_counters_parse("{\"calls\":1}", 11, &d, &err), 0);
    ASSERT_EQ_INT(d.calls, 1);
    ASSERT_EQ_INT(d.tokens, 0);
}

/* ---- concurrency and admission order ------------------------------------------- */

TEST(slots)
{
    struct ledger_slots s = {0};
    struct tern_err err = {0};
    ASSERT_EQ_INT(ledger_slots_add(&s, "u1", "s1"), 0);
    ASSERT_EQ_INT(ledger_slots_add(&s, "u2", "s2"), 0);
    ASSERT_EQ_INT(ledger_slots_add(&s, "u1", "s1"), 0);
    ASSERT_EQ_INT(s.n, 2);
    cJSON *j = ledger_slots_json(&s);
    char *text = json_print(j);
    struct ledger_slots t = {0};
    ASSERT_EQ_INT(ledger_slots_parse(text, strlen(text), &t, &err), 0);
    ASSERT_TRUE(ledger_slots_has(&t, "u2"));
    ASSERT_TRUE(ledger_slots_remove(&t, "u2"));
    ASSERT_FALSE(ledger_slots_remove(&t, "u2"));
    ASSERT_FALSE(ledger_slots_has(&t, "u2"));
    ASSERT_EQ_INT(t.n, 1);
    free(text);
    cJSON_Delete(j);
    ledger_slots_done(&s);
    ledger_slots_done(&t);
    ASSERT_NE_INT(ledger_slots_parse("{\"u\":1}", 7, &t, &err), 0);
}

TEST(admission_order)
{
    /* created at 10, 10, 11, 12 (two in the same second: by name) */
    struct ledger_waiter w[] = {{"u-d", "d", 12}, {"u-b", "b", 10}, {"u-c", "c", 11},
                                {"u-a", "a", 10}};
    struct ledger_slots holders = {0};
    size_t waiting = 0;
    ASSERT_EQ_INT(ledger_queue_position(w, 4, &holders, "u-a", &waiting), 1);
    ASSERT_EQ_INT(waiting, 4);
    ASSERT_EQ_INT(ledger_queue_position(w, 4, &holders, "u-b", NULL), 2);
    ASSERT_EQ_INT(ledger_queue_position(w, 4, &holders, "u-c", NULL), 3);
    ASSERT_EQ_INT(ledger_queue_position(w, 4, &holders, "u-d", NULL), 4);
    ASSERT_EQ_INT(ledger_queue_position(w, 4, &holders, "u-x", NULL), 0);
    /* holders do not wait */
    ledger_slots_add(&holders, "u-a", "a");
    ledger_slots_add(&holders, "u-c", "c");
    ASSERT_EQ_INT(ledger_queue_position(w, 4, &holders, "u-d", &waiting), 2);
    ASSERT_EQ_INT(waiting, 2);
    ASSERT_EQ_INT(ledger_queue_position(w, 4, &holders, "u-a", NULL), 0);
    ledger_slots_done(&holders);
    /* the order is the same from any starting order (restarts list in any order) */
    struct ledger_waiter a[] = {{"3", "x", 5}, {"1", "x", 5}, {"2", "y", 4}};
    struct ledger_waiter b[] = {{"2", "y", 4}, {"1", "x", 5}, {"3", "x", 5}};
    ASSERT_EQ_INT(ledger_queue_position(a, 3, NULL, "1", NULL), 2);
    ASSERT_EQ_INT(ledger_queue_position(b, 3, NULL, "1", NULL), 2);
    ASSERT_EQ_INT(ledger_queue_position(a, 3, NULL, "3", NULL), 3);
}

TEST(slot_wanted_only_by_who_holds_none)
{
    /* cap 2, held by h1 and h2; the cache still shows w1 Queued */
    struct ledger_waiter w[] = {{"u-w1", "w1", 10}};
    struct ledger_slots holders = {0};
    ledger_slots_add(&holders, "u-h1", "h1");
    ledger_slots_add(&holders, "u-h2", "h2");
    ASSERT_TRUE(ledger_slot_wanted(w, 1, &holders, 2, 0));
    ASSERT_FALSE(ledger_slot_wanted(w, 1, &holders, 3, 0)); /* a slot is free */
    ASSERT_FALSE(ledger_slot_wanted(w, 0, &holders, 2, 0)); /* nobody waits */
    /* one waiter, and h2 gives its slot up already: h1 keeps its own */
    ASSERT_FALSE(ledger_slot_wanted(w, 1, &holders, 2, 1));
    struct ledger_waiter two[] = {{"u-w1", "w1", 10}, {"u-w2", "w2", 11}};
    ASSERT_TRUE(ledger_slot_wanted(two, 2, &holders, 2, 1)); /* two wait */
    /* w1 was admitted meanwhile (h2's slot was given up): the ledger says
     * so, and h1 keeps its slot although the cache shows w1 waiting */
    ledger_slots_remove(&holders, "u-h2");
    ledger_slots_add(&holders, "u-w1", "w1");
    ASSERT_FALSE(ledger_slot_wanted(w, 1, &holders, 2, 0));
    ledger_slots_done(&holders);
}

/* ---- the reservation fold ---------------------------------------------------------- */

static void fold(struct ledger_track *t, const char *type, uint64_t seq, const char *data)
{
    cJSON *d = parse(data);
    ledger_track_apply(t, type, seq, d);
    cJSON_Delete(d);
}

TEST(track)
{
    struct ledger_track t;
    ledger_track_init(&t, "uid-1");
    ASSERT_EQ_INT(t.state, LEDGER_NONE);
    const char *res = "{\"uid\":\"uid-1\",\"step\":2,\"tokens\":5000,\"costMicroUSD\":900,"
                      "\"budgets\":[{\"name\":\"daily\",\"window\":\"2026-01-02\"}]}";
    fold(&t, "budget_reserved", 7, res);
    ASSERT_EQ_INT(t.state, LEDGER_OPEN);
    ASSERT_EQ_INT(t.res.id, 7);
    ASSERT_EQ_INT(t.res.step, 2);
    ASSERT_EQ_INT(t.res.amount.tokens, 5000);
    ASSERT_EQ_INT(t.res.nrefs, 1);
    ASSERT_EQ_STR(t.res.refs[0].window, "2026-01-02");
    fold(&t, "model_response", 8,
         "{\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":80,\"cost_micro_usd\":33}}");
    ASSERT_EQ_INT(t.state, LEDGER_USED);
    ASSERT_EQ_INT(t.used.tokens, 1280);
    ASSERT_EQ_INT(t.used.cost, 33);
    /* later events do not change a closed one */
    fold(&t, "turn_finished", 9, "{\"outcome\":\"completed\"}");
    ASSERT_EQ_INT(t.state, LEDGER_USED);
    /* a new reservation, then an error: unused */
    fold(&t, "budget_reserved", 10, res);
    ASSERT_EQ_INT(t.state, LEDGER_OPEN);
    fold(&t, "error", 11, "{\"phase\":\"model\"}");
    ASSERT_EQ_INT(t.state, LEDGER_UNUSED);
    /* refused: only for its own id */
    fold(&t, "budget_reserved", 12, res);
    fold(&t, "budget_refused", 13, "{\"id\":11}");
    ASSERT_EQ_INT(t.state, LEDGER_OPEN);
    fold(&t, "budget_refused", 13, "{\"id\":12}");
    ASSERT_EQ_INT(t.state, LEDGER_REFUSED);
    /* the turn ended while a call was open (the Job died): unused */
    fold(&t, "budget_reserved", 14, res);
    fold(&t, "turn_finished", 15, "{\"outcome\":\"error\",\"reason\":\"JobFailed\"}");
    ASSERT_EQ_INT(t.state, LEDGER_UNUSED);
    /* a parent's reservation copied into a fork does not count */
    fold(&t, "budget_reserved", 16,
         "{\"uid\":\"parent\",\"tokens\":1,\"costMicroUSD\":0,\"budgets\":[]}");
    ASSERT_EQ_INT(t.res.id, 14);
    /* malformed data is ignored */
    fold(&t, "budget_reserved", 17, "{\"uid\":\"uid-1\",\"tokens\":\"x\"}");
    ASSERT_EQ_INT(t.res.id, 14);
    fold(&t, "budget_reserved", 18,
         "{\"uid\":\"uid-1\",\"tokens\":1,\"costMicroUSD\":0,\"budgets\":[{\"name\":\"../x\","
         "\"window\":\"w\"}]}");
    ASSERT_EQ_INT(t.res.id, 14);
    ledger_track_done(&t);

    /* the event's data round-trips */
    struct ledger_reservation r = {.id = 3, .step = 4, .amount = {100, 7}};
    struct ledger_ref refs[2] = {{"a", "2026-01"}, {"b", "2026-01-02T03+0100"}};
    r.refs = refs;
    r.nrefs = 2;
    cJSON *j = ledger_reservation_json(&r, "u");
    struct ledger_reservation back;
    struct tern_err err = {0};
    ASSERT_EQ_INT(ledger_reservation_parse(j, 3, &back, &err), 0);
    ASSERT_EQ_INT(back.nrefs, 2);
    ASSERT_EQ_STR(back.refs[1].window, "2026-01-02T03+0100");
    ASSERT_EQ_INT(back.amount.cost, 7);
    ledger_reservation_done(&back);
    cJSON_Delete(j);
}
