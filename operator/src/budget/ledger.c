/* ledger.c - budget arithmetic, codecs and the reservation fold. See ledger.h. */
#include "budget/ledger.h"

#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAT_MAX (INT64_MAX / 4)

static int64_t sat_add(int64_t a, int64_t b)
{
    if (a < 0)
        a = 0;
    if (b < 0)
        b = 0;
    return a > SAT_MAX - b ? SAT_MAX : a + b;
}

static int64_t sub0(int64_t a, int64_t b)
{
    return a - b < 0 ? 0 : a - b;
}

/* ---- counters --------------------------------------------------------------- */

static const char *const ckeys[] = {"tokens",  "costMicroUSD", "reservedTokens",
                                    "reservedCostMicroUSD", "calls", "refused",
                                    "sessionsStarted", "start", "end"};

static int64_t *cfield(struct ledger_counters *c, size_t i)
{
    int64_t *f[] = {&c->tokens, &c->cost,    &c->res_tokens, &c->res_cost, &c->calls,
                    &c->refused, &c->started, &c->start,      &c->end};
    return f[i];
}

int ledger_counters_parse(const char *v, size_t len, struct ledger_counters *ret,
                          struct tern_err *err)
{
    cJSON *j = NULL;
    struct ledger_counters c = {0};
    int rc = json_parse(v, len, &j, err);
    if (rc)
        return rc;
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return err_set(err, TERN_EINVALID, "budget counters: not an object");
    }
    for (size_t i = 0; i < sizeof ckeys / sizeof *ckeys && !rc; i++)
        rc = json_get_int_range(j, "counters", ckeys[i], JSON_OPTIONAL, i >= 7 ? INT64_MIN : 0,
                                INT64_MAX, cfield(&c, i), err);
    cJSON_Delete(j);
    if (!rc)
        *ret = c;
    return rc;
}

cJSON *ledger_counters_json(const struct ledger_counters *c)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof ckeys / sizeof *ckeys; i++)
        json_add_int64(o, ckeys[i], *cfield((struct ledger_counters *)c, i));
    return o;
}

void ledger_worst_case(size_t body_bytes, int64_t max_completion, const struct price_entry *price,
                       struct ledger_amount *ret)
{
    int64_t prompt = (int64_t)body_bytes, completion = max_completion > 0 ? max_completion : 0;
    ret->tokens = sat_add(prompt, completion);
    ret->cost = -1;
    if (price) {
        /* every prompt token at the dearer of the two input prices */
        struct price_entry p = *price;
        if (p.cached_input > p.input)
            p.input = p.cached_input;
        struct chat_usage u = {.prompt_tokens = prompt, .completion_tokens = completion,
                               .total_tokens = prompt + completion};
        int64_t cost;
        if (price_cost(&p, &u, &cost) == 0)
            ret->cost = cost;
    }
}

static bool dim_fits(const struct bspec *b, enum bspec_dim d, int64_t used, int64_t reserved,
                     int64_t want, struct ledger_refusal *ret)
{
    if (!bspec_limited(b, d))
        return true;
    int64_t lim = b->limit[d];
    if (want >= 0 && sat_add(sat_add(used, reserved), want) <= lim)
        return true;
    if (ret)
        *ret = (struct ledger_refusal){d, used, reserved, want, lim};
    return false;
}

bool ledger_fits(const struct bspec *b, const struct ledger_counters *c,
                 const struct ledger_amount *want, struct ledger_refusal *ret)
{
    return dim_fits(b, BSPEC_TOKENS, c->tokens, c->res_tokens, want->tokens, ret) &&
           dim_fits(b, BSPEC_COST, c->cost, c->res_cost, want->cost, ret);
}

void ledger_reserve(struct ledger_counters *c, const struct ledger_amount *a)
{
    c->res_tokens = sat_add(c->res_tokens, a->tokens);
    c->res_cost = sat_add(c->res_cost, a->cost);
}

void ledger_settle(struct ledger_counters *c, const struct ledger_amount *r,
                   const struct ledger_amount *actual)
{
    c->res_tokens = sub0(c->res_tokens, r->tokens > 0 ? r->tokens : 0);
    c->res_cost = sub0(c->res_cost, r->cost > 0 ? r->cost : 0);
    if (actual) {
        c->tokens = sat_add(c->tokens, actual->tokens);
        c->cost = sat_add(c->cost, actual->cost);
        c->calls = sat_add(c->calls, 1);
    }
}

char *ledger_refusal_text(const struct ledger_refusal *r)
{
    char u[40], res[40], w[40], l[40];
    if (r->want < 0)
        return xasprintf("%s: the model has no price in the price table, so the cost of a call "
                         "cannot be bounded",
                         bspec_dim_name(r->dim));
    if (r->dim == BSPEC_CONCURRENT || r->dim == BSPEC_STARTED)
        return xasprintf("%s: %lld of %lld", bspec_dim_name(r->dim), (long long)r->used,
                         (long long)r->limit);
    return xasprintf("%s: %s used + %s reserved + %s needed > %s", bspec_dim_name(r->dim),
                     bspec_format(r->dim, r->used, u), bspec_format(r->dim, r->reserved, res),
                     bspec_format(r->dim, r->want, w), bspec_format(r->dim, r->limit, l));
}

/* ---- concurrency ledger ------------------------------------------------------ */

void ledger_slots_done(struct ledger_slots *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->uids[i]);
        free(s->names[i]);
    }
    free(s->uids);
    free(s->names);
    memset(s, 0, sizeof *s);
}

int ledger_slots_parse(const char *v, size_t len, struct ledger_slots *ret, struct tern_err *err)
{
    cJSON *j = NULL;
    struct ledger_slots s = {0};
    int rc = json_parse(v, len, &j, err);
    if (rc)
        return rc;
    if (!cJSON_IsObject(j)) {
        rc = err_set(err, TERN_EINVALID, "budget slots: not an object");
        goto out;
    }
    for (const cJSON *it = j->child; it; it = it->next) {
        if (!cJSON_IsString(it) || strlen(it->string) > TERN_JOURNAL_MAX_UID) {
            rc = err_set(err, TERN_EINVALID, "budget slots: %.64s: a session name", it->string);
            goto out;
        }
        if ((rc = ledger_slots_add(&s, it->string, it->valuestring))) {
            err_set(err, rc, "budget slots: more than %d holders", TERN_BUDGET_MAX_HOLDERS);
            goto out;
        }
    }
    *ret = s;
    s = (struct ledger_slots){0};
out:
    ledger_slots_done(&s);
    cJSON_Delete(j);
    return rc;
}

cJSON *ledger_slots_json(const struct ledger_slots *s)
{
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < s->n; i++)
        json_add_string(o, s->uids[i], s->names[i]);
    return o;
}

bool ledger_slots_has(const struct ledger_slots *s, const char *uid)
{
    for (size_t i = 0; s && uid && i < s->n; i++)
        if (strcmp(s->uids[i], uid) == 0)
            return true;
    return false;
}

int ledger_slots_add(struct ledger_slots *s, const char *uid, const char *name)
{
    if (ledger_slots_has(s, uid))
        return 0;
    if (s->n >= TERN_BUDGET_MAX_HOLDERS)
        return TERN_ETOOLARGE;
    s->uids = xreallocarray(s->uids, s->n + 1, sizeof *s->uids);
    s->names = xreallocarray(s->names, s->n + 1, sizeof *s->names);
    s->uids[s->n] = xstrdup(uid);
    s->names[s->n++] = xstrdup(name ? name : "");
    return 0;
}

bool ledger_slots_remove(struct ledger_slots *s, const char *uid)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->uids[i], uid) == 0) {
            free(s->uids[i]);
            free(s->names[i]);
            s->uids[i] = s->uids[s->n - 1];
            s->names[i] = s->names[s->n - 1];
            s->n--;
            return true;
        }
    return false;
}

/* ---- admission order --------------------------------------------------------- */

int ledger_waiter_cmp(const struct ledger_waiter *a, const struct ledger_waiter *b)
{
    if (a->created != b->created)
        return a->created < b->created ? -1 : 1;
    int c = strcmp(a->name ? a->name : "", b->name ? b->name : "");
    if (c)
        return c;
    return strcmp(a->uid ? a->uid : "", b->uid ? b->uid : "");
}

static int waiter_qsort(const void *a, const void *b)
{
    return ledger_waiter_cmp(a, b);
}

size_t ledger_queue_position(struct ledger_waiter *w, size_t n, const struct ledger_slots *holders,
                             const char *uid, size_t *ret_waiting)
{
    qsort(w, n, sizeof *w, waiter_qsort);
    size_t place = 0, waiting = 0;
    for (size_t i = 0; i < n; i++) {
        if (ledger_slots_has(holders, w[i].uid))
            continue;
        if (i > 0 && w[i - 1].uid && w[i].uid && strcmp(w[i - 1].uid, w[i].uid) == 0)
            continue; /* listed twice */
        waiting++;
        if (!place && w[i].uid && uid && strcmp(w[i].uid, uid) == 0)
            place = waiting;
    }
    if (ret_waiting)
        *ret_waiting = waiting;
    return place;
}

bool ledger_slot_wanted(struct ledger_waiter *w, size_t n, const struct ledger_slots *holders,
                        int64_t limit, size_t yielding)
{
    size_t waiting = 0;
    ledger_queue_position(w, n, holders, NULL, &waiting);
    return waiting > yielding && holders && (int64_t)holders->n >= limit;
}

/* ---- reservations ---------------------------------------------------------- */

void ledger_reservation_done(struct ledger_reservation *r)
{
    if (!r)
        return;
    free(r->refs);
    memset(r, 0, sizeof *r);
}

cJSON *ledger_reservation_json(const struct ledger_reservation *r, const char *uid)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "uid", uid);
    json_add_int64(o, "step", r->step);
    json_add_int64(o, "tokens", r->amount.tokens);
    json_add_int64(o, "costMicroUSD", r->amount.cost);
    cJSON *b = cJSON_AddArrayToObject(o, "budgets");
    for (size_t i = 0; i < r->nrefs; i++) {
        cJSON *e = cJSON_CreateObject();
        json_add_string(e, "name", r->refs[i].name);
        json_add_string(e, "window", r->refs[i].window);
        cJSON_AddItemToArray(b, e);
    }
    return o;
}

int ledger_reservation_parse(const cJSON *data, uint64_t id, struct ledger_reservation *ret,
                             struct tern_err *err)
{
    struct ledger_reservation r = {.id = id};
    const cJSON *b = NULL;
    int rc;
    if ((rc = json_get_int_range(data, "budget_reserved", "step", JSON_OPTIONAL, 0, INT64_MAX,
                                 &r.step, err)) ||
        (rc = json_get_int_range(data, "budget_reserved", "tokens", JSON_REQUIRED, 0, INT64_MAX,
                                 &r.amount.tokens, err)) ||
        (rc = json_get_int_range(data, "budget_reserved", "costMicroUSD", JSON_REQUIRED, -1,
                                 INT64_MAX, &r.amount.cost, err)) ||
        (rc = json_get_array(data, "budget_reserved", "budgets", JSON_REQUIRED, &b, err)))
        return rc;
    size_t n = (size_t)cJSON_GetArraySize(b);
    if (n > TERN_BUDGET_MAX_PER_NS)
        return err_set(err, TERN_EINVALID, "budget_reserved.budgets: more than %d",
                       TERN_BUDGET_MAX_PER_NS);
    r.refs = xcalloc(n + 1, sizeof *r.refs);
    for (const cJSON *e = b->child; e; e = e->next) {
        const char *name = NULL, *win = NULL;
        if ((rc = json_get_string(e, "budget_reserved.budgets", "name", JSON_REQUIRED, &name,
                                  err)) ||
            (rc = json_get_string(e, "budget_reserved.budgets", "window", JSON_REQUIRED, &win,
                                  err)))
            break;
        if (!bspec_dns_label(name, TERN_BUDGET_MAX_NAME) || strlen(win) >= TZWIN_KEY_MAX ||
            !*win || strchr(win, '/')) {
            rc = err_set(err, TERN_EINVALID, "budget_reserved.budgets: a bad budget or window");
            break;
        }
        struct ledger_ref *ref = &r.refs[r.nrefs++];
        snprintf(ref->name, sizeof ref->name, "%s", name);
        snprintf(ref->window, sizeof ref->window, "%s", win);
    }
    if (rc) {
        ledger_reservation_done(&r);
        return rc;
    }
    *ret = r;
    return 0;
}

void ledger_track_init(struct ledger_track *t, const char *uid)
{
    memset(t, 0, sizeof *t);
    snprintf(t->uid, sizeof t->uid, "%s", uid ? uid : "");
}

void ledger_track_done(struct ledger_track *t)
{
    if (!t)
        return;
    ledger_reservation_done(&t->res);
    memset(t, 0, sizeof *t);
}

static int64_t data_int(const cJSON *d, const char *k)
{
    int64_t v = 0;
    if (json_item_int64(json_get(d, k), &v) != 0 || v < 0)
        return 0;
    return v;
}

void ledger_track_apply(struct ledger_track *t, const char *type, uint64_t seq, const cJSON *data)
{
    if (!type)
        return;
    if (strcmp(type, "budget_reserved") == 0) {
        const cJSON *u = json_get(data, "uid");
        if (!cJSON_IsString(u) || strcmp(u->valuestring, t->uid) != 0)
            return; /* a parent's, copied into a fork */
        struct ledger_reservation r;
        if (ledger_reservation_parse(data, seq, &r, NULL) != 0)
            return;
        ledger_reservation_done(&t->res);
        t->res = r;
        t->state = LEDGER_OPEN;
        t->used = (struct ledger_amount){0, 0};
        return;
    }
    if (t->state != LEDGER_OPEN)
        return;
    if (strcmp(type, "model_response") == 0) {
        const cJSON *u = json_get(data, "usage");
        t->used.tokens = sat_add(data_int(u, "prompt_tokens"), data_int(u, "completion_tokens"));
        t->used.cost = data_int(u, "cost_micro_usd");
        t->state = LEDGER_USED;
    } else if (strcmp(type, "budget_refused") == 0) {
        int64_t id = -1;
        json_item_int64(json_get(data, "id"), &id);
        if (id >= 0 && (uint64_t)id == t->res.id)
            t->state = LEDGER_REFUSED;
    } else if (strcmp(type, "error") == 0 || strcmp(type, "turn_finished") == 0) {
        t->state = LEDGER_UNUSED;
    }
}
