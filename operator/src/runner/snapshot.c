/* snapshot.c - the runner's agent state as a journal snapshot. See
 * snapshot.h. */
#include "runner/snapshot.h"

#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

size_t snapshot_size_estimate(const struct replay_state *s)
{
    size_t n = 512;
    for (size_t i = 0; i < s->conv.n; i++) {
        const struct chat_msg *m = &s->conv.msgs[i];
        n += 48 + (m->content ? strlen(m->content) : 0);
        for (size_t k = 0; k < m->ncalls; k++)
            n += 64 + strlen(m->calls[k].id) + strlen(m->calls[k].name) +
                 strlen(m->calls[k].arguments);
    }
    return n;
}

bool snapshot_due(const struct replay_state *s, uint64_t snapshot_seq, uint64_t every)
{
    if (every == 0 || s->last_seq < snapshot_seq + every)
        return false;
    uint64_t by_size = snapshot_size_estimate(s) / SNAPSHOT_BYTES_PER_EVENT;
    if (s->last_seq < snapshot_seq + by_size)
        return false;
    if (s->request_open || s->ndeferred || (s->turn_started && !s->turn_finished))
        return false;
    for (size_t i = 0; i < s->ncalls; i++)
        if (!s->calls[i].answered)
            return false;
    return true;
}

static const char *const ROLES[] = {"system", "user", "assistant", "tool"};

static void add_opt_string(cJSON *o, const char *k, const char *v)
{
    if (v)
        json_add_string(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

static const char *decision_name(enum replay_decision d)
{
    return d == REPLAY_APPROVED ? "approved" : d == REPLAY_DENIED ? "denied" : "undecided";
}

cJSON *snapshot_encode(const struct replay_state *s)
{
    cJSON *o = cJSON_CreateObject();
    json_add_int64(o, "v", SNAPSHOT_STATE_VERSION);
    cJSON *conv = cJSON_AddArrayToObject(o, "conv");
    for (size_t i = 0; i < s->conv.n; i++) {
        const struct chat_msg *m = &s->conv.msgs[i];
        cJSON *e = cJSON_CreateObject();
        json_add_string(e, "role", ROLES[m->role]);
        add_opt_string(e, "content", m->content);
        if (m->ncalls) {
            cJSON *arr = cJSON_AddArrayToObject(e, "toolCalls");
            for (size_t k = 0; k < m->ncalls; k++) {
                cJSON *c = cJSON_CreateObject();
                json_add_string(c, "id", m->calls[k].id);
                json_add_string(c, "name", m->calls[k].name);
                json_add_string(c, "arguments", m->calls[k].arguments);
                cJSON_AddItemToArray(arr, c);
            }
        }
        if (m->tool_call_id)
            json_add_string(e, "toolCallId", m->tool_call_id);
        cJSON_AddItemToArray(conv, e);
    }
    json_add_int64(o, "userMessages", s->user_messages);
    json_add_int64(o, "maxMessageIndex", s->max_message_index);
    cJSON_AddBoolToObject(o, "objectiveJournaled", s->objective_journaled);
    json_add_int64(o, "modelTurns", s->model_turns);
    json_add_int64(o, "toolCalls", s->tool_calls);
    json_add_int64(o, "promptTokens", s->prompt_tokens);
    json_add_int64(o, "completionTokens", s->completion_tokens);
    json_add_int64(o, "costMicroUSD", s->cost_micro_usd);
    json_add_int64(o, "turn", s->turn);
    cJSON_AddBoolToObject(o, "turnStarted", s->turn_started);
    cJSON_AddBoolToObject(o, "turnFinished", s->turn_finished);
    add_opt_string(o, "outcome", s->outcome);
    json_add_int64(o, "modelSteps", s->model_steps);
    json_add_int64(o, "consecutiveBad", s->consecutive_bad);
    json_add_int64(o, "resultFailures", s->result_failures);
    add_opt_string(o, "resultProblem", s->result_problem);
    cJSON *calls = cJSON_AddArrayToObject(o, "calls");
    for (size_t i = 0; i < s->ncalls; i++) {
        const struct replay_call *c = &s->calls[i];
        cJSON *e = cJSON_CreateObject();
        json_add_string(e, "id", c->id);
        json_add_string(e, "name", c->name);
        json_add_string(e, "arguments", c->arguments);
        json_add_string(e, "status", c->status);
        add_opt_string(e, "problem", c->problem);
        cJSON_AddBoolToObject(e, "started", c->started);
        cJSON_AddBoolToObject(e, "answered", c->answered);
        add_opt_string(e, "approvalId", c->approval_id);
        json_add_string(e, "decision", decision_name(c->decision));
        add_opt_string(e, "decisionReason", c->decision_reason);
        cJSON_AddItemToArray(calls, e);
    }
    cJSON_AddBoolToObject(o, "lastFinal", s->last_final);
    cJSON_AddBoolToObject(o, "lastRefusal", s->last_refusal);
    cJSON_AddBoolToObject(o, "limitReported", s->limit_reported);
    add_opt_string(o, "limitName", s->limit_name);
    json_add_int64(o, "limitUsed", s->limit_used);
    json_add_int64(o, "limitMax", s->limit_max);
    add_opt_string(o, "lastProblem", s->last_problem);
    json_add_int64(o, "firstTimeMs", s->first_time_ms);
    add_opt_string(o, "finalText", s->final_text);
    cJSON *dec = cJSON_AddArrayToObject(o, "decided");
    for (size_t i = 0; i < s->ndecided; i++) {
        cJSON *e = cJSON_CreateObject();
        json_add_string(e, "id", s->decided_ids[i]);
        json_add_string(e, "decision", decision_name(s->decided[i]));
        add_opt_string(e, "reason", s->decided_reasons[i]);
        cJSON_AddItemToArray(dec, e);
    }
    return o;
}

/* ---- decoding: every member is checked, nothing is assumed ------------- */

struct dec {
    struct tern_err *err;
    int rc;
};

static const cJSON *member(struct dec *d, const cJSON *o, const char *k)
{
    const cJSON *it = json_get(o, k);
    if (!it && d->rc == 0)
        d->rc = err_set(d->err, TERN_EPARSE, "snapshot state: %s missing", k);
    return it;
}

static int64_t get_i64(struct dec *d, const cJSON *o, const char *k)
{
    int64_t v = 0;
    const cJSON *it = member(d, o, k);
    if (it && json_item_int64(it, &v) != 0 && d->rc == 0)
        d->rc = err_set(d->err, TERN_EPARSE, "snapshot state: %s is not an integer", k);
    return v;
}

static bool get_bool(struct dec *d, const cJSON *o, const char *k)
{
    const cJSON *it = member(d, o, k);
    if (it && !cJSON_IsBool(it) && d->rc == 0)
        d->rc = err_set(d->err, TERN_EPARSE, "snapshot state: %s is not a boolean", k);
    return cJSON_IsTrue(it);
}

/* A string member (copied), or NULL for null when nullable. */
static char *get_str(struct dec *d, const cJSON *o, const char *k, bool nullable)
{
    const cJSON *it = member(d, o, k);
    if (cJSON_IsString(it))
        return xstrdup(it->valuestring);
    if (!(nullable && cJSON_IsNull(it)) && it && d->rc == 0)
        d->rc = err_set(d->err, TERN_EPARSE, "snapshot state: %s is not a string", k);
    return NULL;
}

static const cJSON *get_array(struct dec *d, const cJSON *o, const char *k)
{
    const cJSON *it = member(d, o, k);
    if (it && !cJSON_IsArray(it) && d->rc == 0)
        d->rc = err_set(d->err, TERN_EPARSE, "snapshot state: %s is not an array", k);
    return cJSON_IsArray(it) ? it : NULL;
}

static enum replay_decision get_decision(struct dec *d, const cJSON *o)
{
    char *v = get_str(d, o, "decision", false);
    enum replay_decision r = REPLAY_UNDECIDED;
    if (v && strcmp(v, "approved") == 0)
        r = REPLAY_APPROVED;
    else if (v && strcmp(v, "denied") == 0)
        r = REPLAY_DENIED;
    else if ((!v || strcmp(v, "undecided") != 0) && d->rc == 0)
        d->rc = err_set(d->err, TERN_EPARSE, "snapshot state: bad decision");
    free(v);
    return r;
}

static void decode_conv(struct dec *d, const cJSON *conv, struct replay_state *s)
{
    for (const cJSON *e = conv ? conv->child : NULL; e && d->rc == 0; e = e->next) {
        char *role = get_str(d, e, "role", false);
        char *content = get_str(d, e, "content", true);
        int r = -1;
        for (int i = 0; role && i < 4; i++)
            if (strcmp(role, ROLES[i]) == 0)
                r = i;
        if (r < 0 && d->rc == 0)
            d->rc = err_set(d->err, TERN_EPARSE, "snapshot state: bad role");
        if (d->rc == 0 && r == CHAT_ASSISTANT) {
            const cJSON *tc = json_get(e, "toolCalls");
            size_t n = cJSON_IsArray(tc) ? (size_t)cJSON_GetArraySize(tc) : 0;
            struct chat_tool_call *calls = n ? xcalloc(n, sizeof *calls) : NULL;
            size_t k = 0;
            for (const cJSON *c = n ? tc->child : NULL; c && d->rc == 0; c = c->next, k++) {
                calls[k].id = get_str(d, c, "id", false);
                calls[k].name = get_str(d, c, "name", false);
                calls[k].arguments = get_str(d, c, "arguments", false);
            }
            if (d->rc == 0 && !content && k == 0)
                d->rc = err_set(d->err, TERN_EPARSE, "snapshot state: empty assistant message");
            if (d->rc == 0)
                chat_conv_add_assistant(&s->conv, content, calls, k);
            for (size_t i = 0; i < k; i++) {
                free(calls[i].id);
                free(calls[i].name);
                free(calls[i].arguments);
            }
            free(calls);
        } else if (d->rc == 0 && r == CHAT_TOOL) {
            char *id = get_str(d, e, "toolCallId", false);
            if (d->rc == 0)
                chat_conv_add_tool(&s->conv, id, content ? content : "");
            free(id);
        } else if (d->rc == 0) {
            if (!content)
                d->rc = err_set(d->err, TERN_EPARSE, "snapshot state: message without content");
            else
                chat_conv_add(&s->conv, (enum chat_role)r, content);
        }
        free(role);
        free(content);
    }
}

int snapshot_decode(const cJSON *state, uint64_t seq, struct replay_state *ret,
                    struct tern_err *err)
{
    struct dec d = {.err = err};
    struct replay_state s;
    replay_state_init(&s);
    if (!cJSON_IsObject(state) || get_i64(&d, state, "v") != SNAPSHOT_STATE_VERSION) {
        if (d.rc == 0)
            d.rc = err_set(err, TERN_EPARSE, "snapshot state: not version %d",
                           SNAPSHOT_STATE_VERSION);
        goto out;
    }
    decode_conv(&d, get_array(&d, state, "conv"), &s);
    s.last_seq = seq;
    s.user_messages = get_i64(&d, state, "userMessages");
    s.max_message_index = get_i64(&d, state, "maxMessageIndex");
    s.objective_journaled = get_bool(&d, state, "objectiveJournaled");
    s.model_turns = get_i64(&d, state, "modelTurns");
    s.tool_calls = get_i64(&d, state, "toolCalls");
    s.prompt_tokens = get_i64(&d, state, "promptTokens");
    s.completion_tokens = get_i64(&d, state, "completionTokens");
    s.cost_micro_usd = get_i64(&d, state, "costMicroUSD");
    s.turn = get_i64(&d, state, "turn");
    s.turn_started = get_bool(&d, state, "turnStarted");
    s.turn_finished = get_bool(&d, state, "turnFinished");
    s.outcome = get_str(&d, state, "outcome", true);
    s.model_steps = get_i64(&d, state, "modelSteps");
    s.consecutive_bad = get_i64(&d, state, "consecutiveBad");
    /* spec.result.schema's counter: absent in snapshots written before it
     * (0 then, as it was) */
    if (json_get(state, "resultFailures"))
        s.result_failures = get_i64(&d, state, "resultFailures");
    if (json_get(state, "resultProblem"))
        s.result_problem = get_str(&d, state, "resultProblem", true);
    const cJSON *calls = get_array(&d, state, "calls");
    size_t n = calls ? (size_t)cJSON_GetArraySize(calls) : 0;
    s.calls = n ? xcalloc(n, sizeof *s.calls) : NULL;
    for (const cJSON *c = n ? calls->child : NULL; c && d.rc == 0; c = c->next) {
        struct replay_call *rc = &s.calls[s.ncalls++];
        rc->id = get_str(&d, c, "id", false);
        rc->name = get_str(&d, c, "name", false);
        rc->arguments = get_str(&d, c, "arguments", false);
        rc->status = get_str(&d, c, "status", false);
        rc->problem = get_str(&d, c, "problem", true);
        rc->started = get_bool(&d, c, "started");
        rc->answered = get_bool(&d, c, "answered");
        rc->approval_id = get_str(&d, c, "approvalId", true);
        rc->decision = get_decision(&d, c);
        rc->decision_reason = get_str(&d, c, "decisionReason", true);
    }
    s.last_final = get_bool(&d, state, "lastFinal");
    s.last_refusal = get_bool(&d, state, "lastRefusal");
    s.limit_reported = get_bool(&d, state, "limitReported");
    s.limit_name = get_str(&d, state, "limitName", true);
    s.limit_used = get_i64(&d, state, "limitUsed");
    s.limit_max = get_i64(&d, state, "limitMax");
    s.last_problem = get_str(&d, state, "lastProblem", true);
    s.first_time_ms = get_i64(&d, state, "firstTimeMs");
    s.final_text = get_str(&d, state, "finalText", true);
    const cJSON *dec = get_array(&d, state, "decided");
    for (const cJSON *e = dec ? dec->child : NULL; e && d.rc == 0; e = e->next) {
        char *id = get_str(&d, e, "id", false);
        enum replay_decision v = get_decision(&d, e);
        char *why = get_str(&d, e, "reason", true);
        if (d.rc) {
            free(id);
            free(why);
            break;
        }
        s.decided_ids = xreallocarray(s.decided_ids, s.ndecided + 1, sizeof(char *));
        s.decided = xreallocarray(s.decided, s.ndecided + 1, sizeof *s.decided);
        s.decided_reasons = xreallocarray(s.decided_reasons, s.ndecided + 1, sizeof(char *));
        s.decided_ids[s.ndecided] = id;
        s.decided_reasons[s.ndecided] = why;
        s.decided[s.ndecided++] = v;
    }
out:
    if (d.rc) {
        replay_state_done(&s);
        return d.rc;
    }
    *ret = s;
    return 0;
}
