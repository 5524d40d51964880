/* budgetgate.c - reserve before a model call, settle after. See budgetgate.h. */
#include "runner/budgetgate.h"

#include "base/limits.h"
#include "base/mem.h"
#include "budget/bstore.h"
#include "journal/journal.h"
#include "json/json.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct gate {
    struct gate_config cfg;
    struct ledger_track track;
    uint64_t resolved;            /* the reservation id this process settled or released */
    struct bstore_zones *zones;
    struct bstore_budget *b;      /* the budgets of the next call: those that limit */
    size_t nb;                    /* tokens or cost */
    struct gate_stats st;
};

struct gate *gate_new(const struct gate_config *cfg)
{
    struct gate *g = xcalloc(1, sizeof *g);
    g->cfg = *cfg;
    ledger_track_init(&g->track, cfg->uid);
    g->zones = bstore_zones_new();
    return g;
}

void gate_free(struct gate *g)
{
    if (!g)
        return;
    ledger_track_done(&g->track);
    bstore_zones_free(g->zones);
    bstore_budgets_free(g->b, g->nb);
    free(g);
}

void gate_observe(struct gate *g, const char *type, uint64_t seq, const cJSON *data)
{
    if (g)
        ledger_track_apply(&g->track, type, seq, data);
}

void gate_get_stats(const struct gate *g, struct gate_stats *ret)
{
    *ret = g ? g->st : (struct gate_stats){0};
}

static int close_reservation(struct gate *g, bool use, struct tern_err *err)
{
    bool settled = false;
    int rc = bstore_settle(g->cfg.etcd, g->cfg.ns, g->cfg.uid, g->track.res.id,
                           use ? &g->track.used : NULL, &settled, err);
    if (rc)
        return err_wrap(err, rc, "settling budget reservation %llu",
                        (unsigned long long)g->track.res.id);
    g->resolved = g->track.res.id;
    if (settled) {
        if (use)
            g->st.settled++;
        else
            g->st.released++;
    }
    return 0;
}

int gate_settle(struct gate *g, struct tern_err *err)
{
    if (!g || g->track.state == LEDGER_NONE || g->track.res.id == g->resolved)
        return 0;
    if (g->track.state == LEDGER_USED)
        return close_reservation(g, true, err);
    if (g->track.state == LEDGER_UNUSED)
        return close_reservation(g, false, err);
    return 0; /* OPEN: its call is still to come; REFUSED: nothing reserved */
}

static int64_t now_s(const struct gate *g)
{
    return (int64_t)time(NULL) + g->cfg.clock_offset_s;
}

int gate_prepare(struct gate *g, int64_t max_completion, int64_t *ret_send, struct tern_err *err)
{
    *ret_send = max_completion;
    if (!g)
        return 0;
    bstore_budgets_free(g->b, g->nb);
    g->b = NULL;
    g->nb = 0;
    struct bstore_budget *all = NULL;
    size_t n = 0;
    int rc = bstore_load(g->cfg.etcd, g->zones, g->cfg.ns, g->cfg.labels, false, now_s(g), &all,
                         &n, err);
    if (rc)
        return err_wrap(err, rc, "reading the AgentBudgets of %s", g->cfg.ns);
    /* keep those that limit what a call uses (the operator handles the
     * session counts) */
    g->b = xcalloc(n + 1, sizeof *g->b);
    for (size_t i = 0; i < n; i++) {
        if (bspec_limited(&all[i].spec, BSPEC_TOKENS) || bspec_limited(&all[i].spec, BSPEC_COST)) {
            g->b[g->nb++] = all[i];
            memset(&all[i], 0, sizeof all[i]);
        }
    }
    bstore_budgets_free(all, n);
    if (g->nb > 0 && max_completion <= 0)
        *ret_send = TERN_BUDGET_DEFAULT_COMPLETION;
    return 0;
}

/* The people's text and the journal's data of a refusal. */
static void refuse(struct gate *g, uint64_t id, const struct bstore_budget *b,
                   const struct ledger_refusal *why, cJSON **ret_refused, cJSON **ret_finished)
{
    const struct tzwin_zone *z = NULL;
    char start[TZWIN_TIME_MAX] = "", end[TZWIN_TIME_MAX] = "", lim[40], want[40];
    if (bstore_zone(g->zones, b->spec.time_zone, &z, NULL) == 0) {
        tzwin_format(z, b->win.start, start);
        tzwin_format(z, b->win.end, end);
    }
    char *numbers = ledger_refusal_text(why);
    char *how;
    if (why->want < 0)
        how = xasprintf("add a price for the session's model to the price table, or remove "
                        "spec.limits.%s from the AgentBudget",
                        bspec_dim_name(why->dim));
    else if (why->want > why->limit)
        how = xasprintf("one call needs up to %s, more than the whole limit of %s: raise "
                        "spec.limits.%s of AgentBudget %s (or lower the completion size)",
                        bspec_format(why->dim, why->want, want),
                        bspec_format(why->dim, why->limit, lim), bspec_dim_name(why->dim),
                        b->spec.name);
    else
        how = xasprintf("the session continues by itself when the window ends (%s) or when "
                        "spec.limits.%s is raised",
                        end, bspec_dim_name(why->dim));
    char *msg = xasprintf("AgentBudget %s: %s per %s in window %s (%s): %s; %s", b->spec.name,
                          bspec_dim_name(why->dim), tzwin_period_name(b->spec.period),
                          b->win.key, b->spec.time_zone, numbers, how);
    cJSON *d = cJSON_CreateObject();
    json_add_int64(d, "id", (int64_t)id);
    json_add_string(d, "budget", b->spec.name);
    json_add_string(d, "dimension", bspec_dim_name(why->dim));
    json_add_string(d, "window", b->win.key);
    json_add_string(d, "windowStart", start);
    json_add_string(d, "windowEnd", end);
    json_add_int64(d, "used", why->used);
    json_add_int64(d, "reserved", why->reserved);
    json_add_int64(d, "want", why->want);
    json_add_int64(d, "limit", why->limit);
    json_add_string(d, "message", msg);
    /* the summary keeps limit/used/max of a turn's end: for a budget they
     * are the dimension, what the refused call needed and the limit */
    cJSON *f = cJSON_CreateObject();
    json_add_string(f, "outcome", JOURNAL_OUTCOME_BUDGET);
    json_add_string(f, "reason", b->spec.name);
    json_add_string(f, "limit", bspec_dim_name(why->dim));
    json_add_int64(f, "used", why->want < 0 ? INT64_MAX / 4 : why->want);
    json_add_int64(f, "max", why->limit);
    json_add_string(f, "message", msg);
    free(numbers);
    free(how);
    free(msg);
    *ret_refused = d;
    *ret_finished = f;
}

int gate_reserve(struct gate *g, int64_t step, size_t body_len, int64_t max_completion,
                 bool *ret_refused, struct tern_err *err)
{
    *ret_refused = false;
    if (!g)
        return 0;
    int rc;
    /* a reservation whose call was cut off (a crash, exit 75): release it
     * before this call reserves anew */
    if (g->track.state == LEDGER_OPEN && g->track.res.id != g->resolved &&
        (rc = close_reservation(g, false, err)))
        return rc;
    if (g->nb == 0)
        return 0;
    struct ledger_reservation r = {.step = step};
    ledger_worst_case(body_len, max_completion, g->cfg.price, &r.amount);
    r.refs = xcalloc(g->nb, sizeof *r.refs);
    r.nrefs = g->nb;
    for (size_t i = 0; i < g->nb; i++) {
        snprintf(r.refs[i].name, sizeof r.refs[i].name, "%s", g->b[i].spec.name);
        snprintf(r.refs[i].window, sizeof r.refs[i].window, "%s", g->b[i].win.key);
    }
    uint64_t id = 0;
    rc = g->cfg.append(g->cfg.ctx, "budget_reserved", ledger_reservation_json(&r, g->cfg.uid), &id,
                       err);
    if (rc)
        goto out;
    r.id = id;
    bool refused = false;
    struct ledger_refusal why = {0};
    size_t which = 0;
    rc = bstore_reserve(g->cfg.etcd, g->cfg.ns, g->cfg.uid, &r, g->b, &refused, &why, &which, err);
    if (rc) {
        err_wrap(err, rc, "reserving the worst case of a model call");
        goto out;
    }
    if (g->cfg.crash_after_reserve)
        raise(SIGKILL); /* test hook: reserved, the call not made, nothing settled */
    if (!refused) {
        g->st.reserved++;
        goto out;
    }
    g->st.refused++;
    cJSON *d = NULL, *f = NULL;
    refuse(g, id, &g->b[which], &why, &d, &f);
    if ((rc = g->cfg.append(g->cfg.ctx, "budget_refused", d, NULL, err))) {
        cJSON_Delete(f);
        goto out;
    }
    if ((rc = g->cfg.append(g->cfg.ctx, "turn_finished", f, NULL, err)))
        goto out;
    *ret_refused = true;
out:
    ledger_reservation_done(&r);
    return rc;
}
