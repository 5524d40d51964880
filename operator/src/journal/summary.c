/* summary.c - the journal's summary (pure): the fold of one event into the
 * summary (journal_summary_apply, the rules are in journal.h), its JSON
 * (the value of the sum key) and back, init/done/copy.
 */
#include "journal_internal.h"

#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

void journal_summary_init(struct journal_summary *s)
{
    memset(s, 0, sizeof *s);
}

static void pending_done(struct journal_pending *p)
{
    free(p->id);
    free(p->tool);
    free(p->summary);
    free(p->requested_at);
    memset(p, 0, sizeof *p);
}

void journal_summary_done(struct journal_summary *s)
{
    if (!s)
        return;
    pending_done(&s->pending);
    free(s->outcome);
    free(s->updated);
    free(s->last_decided);
    free(s->result);
    cJSON_Delete(s->artifacts);
    cJSON_Delete(s->result_value);
    cJSON_Delete(s->result_ref);
    cJSON_Delete(s->persisted);
    free(s->persist_request);
    free(s->reason);
    free(s->message);
    free(s->limit);
    free(s->first_request);
    cJSON_Delete(s->memory);
    memset(s, 0, sizeof *s);
}

static char *sdup(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

void journal_summary_copy(struct journal_summary *dst, const struct journal_summary *src)
{
    *dst = *src;
    dst->pending.id = sdup(src->pending.id);
    dst->pending.tool = sdup(src->pending.tool);
    dst->pending.summary = sdup(src->pending.summary);
    dst->pending.requested_at = sdup(src->pending.requested_at);
    dst->outcome = sdup(src->outcome);
    dst->updated = sdup(src->updated);
    dst->last_decided = sdup(src->last_decided);
    dst->result = sdup(src->result);
    dst->artifacts = src->artifacts ? json_dup(src->artifacts) : NULL;
    dst->result_value = src->result_value ? json_dup(src->result_value) : NULL;
    dst->result_ref = src->result_ref ? json_dup(src->result_ref) : NULL;
    dst->persisted = src->persisted ? json_dup(src->persisted) : NULL;
    dst->persist_request = sdup(src->persist_request);
    dst->reason = sdup(src->reason);
    dst->message = sdup(src->message);
    dst->limit = sdup(src->limit);
    dst->first_request = sdup(src->first_request);
    dst->memory = src->memory ? json_dup(src->memory) : NULL;
}

static void set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = v ? xstrdup(v) : NULL;
}

/* Like set_str, but keeps at most TERN_JOURNAL_MAX_RESULT bytes: the
 * summary is rewritten with every append (so it must stay far below etcd's
 * request limit) and its result becomes status.result.summary (the CRD's
 * maxLength). A longer answer is cut at a UTF-8 boundary with a marker;
 * the whole text stays in its turn_finished event. */
static void set_bounded(char **dst, const char *v)
{
    size_t n = v ? strlen(v) : 0;
    if (n <= TERN_JOURNAL_MAX_RESULT) {
        set_str(dst, v);
        return;
    }
    char marker[128];
    int ml = snprintf(marker, sizeof marker,
                      "\n[truncated: %zu bytes in all; the whole answer is in the journal]", n);
    size_t keep = TERN_JOURNAL_MAX_RESULT - (size_t)ml;
    while (keep > 0 && ((unsigned char)v[keep] & 0xc0) == 0x80)
        keep--;
    free(*dst);
    *dst = xmalloc(keep + (size_t)ml + 1);
    memcpy(*dst, v, keep);
    memcpy(*dst + keep, marker, (size_t)ml + 1);
}

/* A string member of data, or NULL. */
static const char *data_str(const cJSON *data, const char *key)
{
    const cJSON *it = json_get(data, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

static int64_t data_nonneg(const cJSON *obj, const char *key)
{
    int64_t v = 0;
    const cJSON *it = json_get(obj, key);
    if (it && json_item_int64(it, &v) == 0 && v > 0)
        return v;
    return 0;
}

/* A copy of v cut to at most max bytes on a UTF-8 boundary, or NULL. */
static char *bounded_dup(const char *v, size_t max)
{
    if (!v)
        return NULL;
    size_t n = strlen(v);
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)v[n] & 0xC0) == 0x80)
            n--;
    }
    return xstrndup(v, n);
}

/* A copy of data.result when it is within TERN_RESULT_MAX_VALUE bytes as
 * compact JSON, else NULL (the runner never writes a larger one). */
static cJSON *result_value(const cJSON *v)
{
    if (!v)
        return NULL;
    char *t = json_print(v);
    size_t n = strlen(t);
    free(t);
    return n <= TERN_RESULT_MAX_VALUE ? json_dup(v) : NULL;
}

/* A copy of a well-formed data.resultRef {path, size, sha256}, else NULL. */
static cJSON *result_ref(const cJSON *r)
{
    const cJSON *path = json_get(r, "path"), *sha = json_get(r, "sha256");
    int64_t size = -1;
    if (!cJSON_IsString(path) || !*path->valuestring || strlen(path->valuestring) > 512 ||
        !cJSON_IsString(sha) || strlen(sha->valuestring) != 64 ||
        strspn(sha->valuestring, "0123456789abcdef") != 64 ||
        json_item_int64(json_get(r, "size"), &size) != 0 || size < 0)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "path", path->valuestring);
    json_add_int64(o, "size", size);
    json_add_string(o, "sha256", sha->valuestring);
    return o;
}

static bool failure_outcome(const char *oc)
{
    return oc && (strcmp(oc, JOURNAL_OUTCOME_LIMIT) == 0 || strcmp(oc, JOURNAL_OUTCOME_ERROR) == 0 ||
                  strcmp(oc, JOURNAL_OUTCOME_REFUSED) == 0);
}

/* Saturating add (counters from untrusted data must not overflow). */
static int64_t sat_add(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* ---- memory proposals ---------------------------------------------------- */

static const char *mp_state(const cJSON *p)
{
    const char *st = data_str(p, "state");
    return st ? st : "";
}

static bool mp_open(const cJSON *p)
{
    return strcmp(mp_state(p), "Pending") == 0 || strcmp(mp_state(p), "Approved") == 0;
}

int journal_memory_pending(const struct journal_summary *s)
{
    int n = 0;
    const cJSON *p;
    if (!s)
        return 0;
    cJSON_ArrayForEach(p, s->memory) n += mp_open(p);
    return n;
}

const cJSON *journal_memory_find(const struct journal_summary *s, const char *id)
{
    const cJSON *p;
    if (!s)
        return NULL;
    cJSON_ArrayForEach(p, s->memory)
    {
        const char *pid = data_str(p, "id");
        if (id && pid && strcmp(pid, id) == 0)
            return p;
    }
    return NULL;
}

static bool hex64(const char *h)
{
    if (!h || strlen(h) != 64)
        return false;
    for (int i = 0; i < 64; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
            return false;
    return true;
}

static void mp_set(cJSON *p, const char *key, const char *v, size_t max)
{
    char *b = bounded_dup(v ? v : "", max);
    cJSON_DeleteItemFromObjectCaseSensitive(p, key);
    cJSON_AddItemToObject(p, key, cJSON_CreateString(b));
    free(b);
}

/* tool_result data.memoryProposal -> a Pending proposal (bounded). */
static void mp_propose(struct journal_summary *s, const struct journal_event *ev)
{
    const cJSON *m = json_get(ev->data, "memoryProposal");
    const char *id = data_str(m, "id"), *base = data_str(m, "baseSha256");
    const char *heading = data_str(m, "heading"), *content = data_str(m, "content");
    const char *reason = data_str(m, "reason");
    if (!cJSON_IsObject(m) || !id || strlen(id) > 64 || !*id || !hex64(base) || !heading ||
        !content || !reason || journal_memory_find(s, id))
        return;
    if (!s->memory)
        s->memory = cJSON_CreateArray();
    if (cJSON_GetArraySize(s->memory) >= TERN_MEMORY_MAX_PROPOSALS) {
        int i = 0, drop = -1;
        const cJSON *p;
        cJSON_ArrayForEach(p, s->memory)
        {
            if (drop < 0 && !mp_open(p))
                drop = i;
            i++;
        }
        if (drop < 0)
            return; /* (the runner refuses a proposal beyond the bound) */
        cJSON_DeleteItemFromArray(s->memory, drop);
    }
    cJSON *p = cJSON_CreateObject();
    mp_set(p, "id", id, 64);
    json_add_int64(p, "turn", ev->turn);
    mp_set(p, "toolCallId", data_str(ev->data, "callId"), 128);
    mp_set(p, "reason", reason, TERN_MEMORY_MAX_REASON);
    mp_set(p, "baseSha256", base, 64);
    mp_set(p, "heading", heading, TERN_MEMORY_MAX_HEADING);
    mp_set(p, "content", content, TERN_MEMORY_MAX_SECTION);
    if (hex64(data_str(m, "sha256")))
        mp_set(p, "sha256", data_str(m, "sha256"), 64);
    mp_set(p, "state", "Pending", 16);
    mp_set(p, "proposedAt", ev->time, 64);
    cJSON_AddItemToArray(s->memory, p);
}

/* memory_decided / memory_applied: the proposal's next state. */
static void mp_decide(struct journal_summary *s, const struct journal_event *ev)
{
    const cJSON *d = ev->data;
    cJSON *p = (cJSON *)journal_memory_find(s, data_str(d, "id"));
    if (!p)
        return;
    const char *next = NULL;
    if (ev->type == JOURNAL_EV_MEMORY_DECIDED && strcmp(mp_state(p), "Pending") == 0) {
        const char *dec = data_str(d, "decision");
        next = dec && strcmp(dec, "approved") == 0   ? "Approved"
               : dec && strcmp(dec, "rejected") == 0 ? "Rejected"
                                                     : NULL;
        if (next) {
            mp_set(p, "decidedBy", data_str(d, "decidedBy"), 256);
            mp_set(p, "decidedAt", ev->time, 64);
        }
    } else if (ev->type == JOURNAL_EV_MEMORY_APPLIED && strcmp(mp_state(p), "Approved") == 0) {
        const char *res = data_str(d, "result");
        next = res && strcmp(res, "applied") == 0    ? "Applied"
               : res && strcmp(res, "conflict") == 0 ? "Conflict"
                                                     : NULL;
    }
    if (!next)
        return;
    mp_set(p, "state", next, 16);
    if (data_str(d, "message") || data_str(d, "reason"))
        mp_set(p, "message", data_str(d, "message") ? data_str(d, "message")
                                                    : data_str(d, "reason"),
               TERN_JOURNAL_MAX_REASON);
}

int journal_summary_apply(struct journal_summary *s, const struct journal_event *ev)
{
    bool snapshot_start = ev->type == JOURNAL_EV_SNAPSHOT && s->last_seq == 0;
    if (!snapshot_start && ev->seq != s->last_seq + 1)
        return TERN_EINVALID;
    const cJSON *d = ev->data;
    bool tail = false; /* part of a failure's tail (not a good point) */
    bool was_failed = failure_outcome(s->outcome); /* nothing after a failure is good */
    switch (ev->type) {
    case JOURNAL_EV_USER_MESSAGE:
        s->messages = sat_add(s->messages, 1);
        s->intent = true;
        break;
    case JOURNAL_EV_RETRY:
        s->intent = true;
        break;
    case JOURNAL_EV_FORKED_FROM:
        /* forked at the last good point of a turn that did not finish:
         * the fork continues it */
        if (!s->outcome && s->turn > 0)
            s->intent = true;
        break;
    case JOURNAL_EV_TURN_STARTED:
        set_str(&s->outcome, NULL);
        set_str(&s->reason, NULL);
        set_str(&s->message, NULL);
        set_str(&s->limit, NULL);
        s->limit_used = s->limit_max = 0;
        s->intent = false;
        break;
    case JOURNAL_EV_MODEL_REQUEST:
        if (!s->first_request)
            s->first_request = sdup(ev->time);
        break;
    case JOURNAL_EV_LIMIT_REACHED:
    case JOURNAL_EV_ERROR:
        tail = true;
        break;
    case JOURNAL_EV_MODEL_RESPONSE: {
        s->usage.model_turns = sat_add(s->usage.model_turns, 1);
        const cJSON *u = json_get(d, "usage");
        s->usage.prompt_tokens = sat_add(s->usage.prompt_tokens, data_nonneg(u, "prompt_tokens"));
        s->usage.completion_tokens =
            sat_add(s->usage.completion_tokens, data_nonneg(u, "completion_tokens"));
        s->usage.cost_micro_usd =
            sat_add(s->usage.cost_micro_usd, data_nonneg(u, "cost_micro_usd"));
        break;
    }
    case JOURNAL_EV_TOOL_CALL:
        s->usage.tool_calls = sat_add(s->usage.tool_calls, 1);
        break;
    case JOURNAL_EV_TOOL_RESULT:
        mp_propose(s, ev);
        break;
    case JOURNAL_EV_MEMORY_DECIDED:
    case JOURNAL_EV_MEMORY_APPLIED:
        mp_decide(s, ev);
        break;
    case JOURNAL_EV_APPROVAL_REQUESTED:
        pending_done(&s->pending);
        s->pending.id = sdup(data_str(d, "id"));
        s->pending.tool = sdup(data_str(d, "tool"));
        s->pending.summary = sdup(data_str(d, "summary"));
        s->pending.requested_at = sdup(ev->time);
        if (!s->pending.id)
            s->pending.id = xstrdup("");
        break;
    case JOURNAL_EV_APPROVAL_DECIDED: {
        const char *id = data_str(d, "id");
        if (s->pending.id && id && strcmp(id, s->pending.id) == 0)
            pending_done(&s->pending);
        set_str(&s->last_decided, id);
        s->intent = true;
        break;
    }
    case JOURNAL_EV_TURN_FINISHED: {
        const char *oc = data_str(d, "outcome");
        set_str(&s->outcome, oc ? oc : "");
        /* the intents before it were this turn's (also when the operator
         * ends a turn that never started, or fails one on an approval
         * timeout): going on needs a new one */
        s->intent = false;
        free(s->reason);
        s->reason = bounded_dup(data_str(d, "reason"), 128);
        free(s->message);
        s->message = bounded_dup(data_str(d, "message"), TERN_JOURNAL_MAX_REASON);
        free(s->limit);
        s->limit = bounded_dup(data_str(d, "limit"), 64);
        s->limit_used = s->limit ? data_nonneg(d, "used") : 0;
        s->limit_max = s->limit ? data_nonneg(d, "max") : 0;
        tail = failure_outcome(oc);
        if (oc && strcmp(oc, JOURNAL_OUTCOME_COMPLETED) == 0) {
            set_bounded(&s->result, data_str(d, "summary"));
            cJSON_Delete(s->artifacts);
            const cJSON *a = json_get(d, "artifacts");
            s->artifacts = cJSON_IsArray(a) ? json_dup(a) : NULL;
            cJSON_Delete(s->result_value);
            s->result_value = result_value(json_get(d, "result"));
            cJSON_Delete(s->result_ref);
            s->result_ref = result_ref(json_get(d, "resultRef"));
            s->result_turn = ev->turn;
        }
        break;
    }
    case JOURNAL_EV_ARTIFACTS_PERSISTED:
        cJSON_Delete(s->persisted);
        s->persisted = json_dup(d);
        if (data_str(d, "request"))
            set_bounded(&s->persist_request, data_str(d, "request"));
        break;
    case JOURNAL_EV_SNAPSHOT: {
        const cJSON *sj = json_get(d, "summary");
        if (cJSON_IsObject(sj)) {
            char *txt = json_print(sj);
            struct journal_summary ns;
            if (journal_summary_decode(txt, strlen(txt), &ns, NULL) == 0) {
                journal_summary_done(s);
                *s = ns;
            }
            free(txt);
        }
        s->snapshot_seq = ev->seq;
        break;
    }
    default:
        break;
    }
    if (!tail && !was_failed && ev->type != JOURNAL_EV_SNAPSHOT)
        s->good_seq = ev->seq;
    s->last_seq = ev->seq;
    if (ev->turn > s->turn)
        s->turn = ev->turn;
    set_str(&s->updated, ev->time);
    return 0;
}

cJSON *journal_summary_to_json(const struct journal_summary *s)
{
    cJSON *o = cJSON_CreateObject();
    json_add_int64(o, "v", JOURNAL_SCHEMA_VERSION);
    json_add_int64(o, "lastSeq", (int64_t)s->last_seq);
    json_add_int64(o, "turn", s->turn);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    json_add_int64(u, "modelTurns", s->usage.model_turns);
    json_add_int64(u, "toolCalls", s->usage.tool_calls);
    json_add_int64(u, "promptTokens", s->usage.prompt_tokens);
    json_add_int64(u, "completionTokens", s->usage.completion_tokens);
    json_add_int64(u, "costMicroUSD", s->usage.cost_micro_usd);
    json_add_int64(o, "messages", s->messages);
    if (s->pending.id) {
        cJSON *p = cJSON_AddObjectToObject(o, "pendingApproval");
        json_add_string(p, "id", s->pending.id);
        if (s->pending.tool)
            json_add_string(p, "tool", s->pending.tool);
        if (s->pending.summary)
            json_add_string(p, "summary", s->pending.summary);
        if (s->pending.requested_at)
            json_add_string(p, "requestedAt", s->pending.requested_at);
    }
    if (s->outcome)
        json_add_string(o, "outcome", s->outcome);
    json_add_int64(o, "snapshotSeq", (int64_t)s->snapshot_seq);
    if (s->updated)
        json_add_string(o, "updated", s->updated);
    if (s->intent)
        cJSON_AddItemToObject(o, "intent", cJSON_CreateTrue());
    if (s->last_decided)
        json_add_string(o, "lastDecided", s->last_decided);
    if (s->result)
        json_add_string(o, "result", s->result);
    if (s->artifacts)
        cJSON_AddItemToObject(o, "artifacts", json_dup(s->artifacts));
    if (s->result_value)
        cJSON_AddItemToObject(o, "resultValue", json_dup(s->result_value));
    if (s->result_ref)
        cJSON_AddItemToObject(o, "resultRef", json_dup(s->result_ref));
    if (s->result_turn)
        json_add_int64(o, "resultTurn", s->result_turn);
    if (s->persisted)
        cJSON_AddItemToObject(o, "persisted", json_dup(s->persisted));
    if (s->persist_request)
        json_add_string(o, "persistRequest", s->persist_request);
    if (s->reason)
        json_add_string(o, "reason", s->reason);
    if (s->message)
        json_add_string(o, "message", s->message);
    if (s->limit) {
        cJSON *l = cJSON_AddObjectToObject(o, "limit");
        json_add_string(l, "name", s->limit);
        json_add_int64(l, "used", s->limit_used);
        json_add_int64(l, "max", s->limit_max);
    }
    json_add_int64(o, "goodSeq", (int64_t)s->good_seq);
    if (s->first_request)
        json_add_string(o, "firstRequest", s->first_request);
    if (s->memory && cJSON_GetArraySize(s->memory) > 0)
        cJSON_AddItemToObject(o, "memoryProposals", json_dup(s->memory));
    return o;
}

int journal_summary_decode(const char *value, size_t len, struct journal_summary *ret,
                           struct tern_err *err)
{
    cJSON *o = NULL;
    struct journal_summary s;
    journal_summary_init(&s);
    int r = json_parse(value, len, &o, err);
    if (r) {
        r = err_wrap(err, TERN_EPARSE, "summary");
        goto out;
    }
    int64_t v = 0, last = 0, snap = 0, good = -1;
    const cJSON *u = NULL, *p = NULL, *lim = NULL;
    const char *outcome = NULL, *updated = NULL, *last_decided = NULL, *result = NULL;
    const char *reason = NULL, *message = NULL, *first_request = NULL, *lname = NULL;
    const cJSON *artifacts = NULL, *memory = NULL, *persisted = NULL;
    const char *persist_request = NULL;
    if (!cJSON_IsObject(o) ||
        json_get_array(o, "summary", "memoryProposals", JSON_OPTIONAL, &memory, err) ||
        json_get_int_range(o, "summary", "resultTurn", JSON_OPTIONAL, 0, INT64_MAX,
                           &s.result_turn, err) ||
        json_get_object(o, "summary", "persisted", JSON_OPTIONAL, &persisted, err) ||
        json_get_string(o, "summary", "persistRequest", JSON_OPTIONAL, &persist_request, err) ||
        json_get_string(o, "summary", "reason", JSON_OPTIONAL, &reason, err) ||
        json_get_string(o, "summary", "message", JSON_OPTIONAL, &message, err) ||
        json_get_string(o, "summary", "firstRequest", JSON_OPTIONAL, &first_request, err) ||
        json_get_object(o, "summary", "limit", JSON_OPTIONAL, &lim, err) ||
        json_get_int_range(o, "summary", "goodSeq", JSON_OPTIONAL, 0, INT64_MAX, &good, err) ||
        json_get_bool(o, "summary", "intent", JSON_OPTIONAL, &s.intent, err) ||
        json_get_string(o, "summary", "lastDecided", JSON_OPTIONAL, &last_decided, err) ||
        json_get_string(o, "summary", "result", JSON_OPTIONAL, &result, err) ||
        json_get_array(o, "summary", "artifacts", JSON_OPTIONAL, &artifacts, err) ||
        json_get_int_range(o, "summary", "v", JSON_REQUIRED, 1, 1, &v, err) ||
        json_get_int_range(o, "summary", "lastSeq", JSON_REQUIRED, 0, INT64_MAX, &last, err) ||
        json_get_int_range(o, "summary", "turn", JSON_OPTIONAL, 0, INT64_MAX, &s.turn, err) ||
        json_get_int_range(o, "summary", "messages", JSON_OPTIONAL, 0, INT64_MAX, &s.messages,
                           err) ||
        json_get_int_range(o, "summary", "snapshotSeq", JSON_OPTIONAL, 0, INT64_MAX, &snap, err) ||
        json_get_object(o, "summary", "usage", JSON_OPTIONAL, &u, err) ||
        json_get_object(o, "summary", "pendingApproval", JSON_OPTIONAL, &p, err) ||
        json_get_string(o, "summary", "outcome", JSON_OPTIONAL, &outcome, err) ||
        json_get_string(o, "summary", "updated", JSON_OPTIONAL, &updated, err)) {
        /* the getter named the field; report it as a parse error */
        r = cJSON_IsObject(o) ? TERN_EPARSE : err_set(err, TERN_EPARSE, "summary: not an object");
        if (err)
            err->code = r;
        goto out;
    }
    if (u && (json_get_int_range(u, "summary.usage", "modelTurns", JSON_OPTIONAL, 0, INT64_MAX,
                                 &s.usage.model_turns, err) ||
              json_get_int_range(u, "summary.usage", "toolCalls", JSON_OPTIONAL, 0, INT64_MAX,
                                 &s.usage.tool_calls, err) ||
              json_get_int_range(u, "summary.usage", "promptTokens", JSON_OPTIONAL, 0, INT64_MAX,
                                 &s.usage.prompt_tokens, err) ||
              json_get_int_range(u, "summary.usage", "completionTokens", JSON_OPTIONAL, 0,
                                 INT64_MAX, &s.usage.completion_tokens, err) ||
              json_get_int_range(u, "summary.usage", "costMicroUSD", JSON_OPTIONAL, 0, INT64_MAX,
                                 &s.usage.cost_micro_usd, err))) {
        r = TERN_EPARSE;
        goto out;
    }
    if (p) {
        const char *id = NULL, *tool = NULL, *sm = NULL, *at = NULL;
        if (json_get_string(p, "summary.pendingApproval", "id", JSON_REQUIRED, &id, err) ||
            json_get_string(p, "summary.pendingApproval", "tool", JSON_OPTIONAL, &tool, err) ||
            json_get_string(p, "summary.pendingApproval", "summary", JSON_OPTIONAL, &sm, err) ||
            json_get_string(p, "summary.pendingApproval", "requestedAt", JSON_OPTIONAL, &at, err)) {
            r = TERN_EPARSE;
            goto out;
        }
        s.pending.id = sdup(id);
        s.pending.tool = sdup(tool);
        s.pending.summary = sdup(sm);
        s.pending.requested_at = sdup(at);
    }
    if (lim && (json_get_string(lim, "summary.limit", "name", JSON_REQUIRED, &lname, err) ||
                json_get_int_range(lim, "summary.limit", "used", JSON_OPTIONAL, 0, INT64_MAX,
                                   &s.limit_used, err) ||
                json_get_int_range(lim, "summary.limit", "max", JSON_OPTIONAL, 0, INT64_MAX,
                                   &s.limit_max, err))) {
        r = TERN_EPARSE;
        goto out;
    }
    s.limit = sdup(lname);
    s.reason = sdup(reason);
    s.message = sdup(message);
    s.first_request = sdup(first_request);
    /* summaries written before goodSeq existed: the last event */
    s.good_seq = good >= 0 ? (uint64_t)good : (uint64_t)last;
    s.last_seq = (uint64_t)last;
    s.snapshot_seq = (uint64_t)snap;
    s.outcome = sdup(outcome);
    s.updated = sdup(updated);
    s.last_decided = sdup(last_decided);
    s.result = sdup(result);
    s.artifacts = artifacts ? json_dup(artifacts) : NULL;
    if (memory && cJSON_GetArraySize(memory) > TERN_MEMORY_MAX_PROPOSALS) {
        r = err_set(err, TERN_EPARSE, "summary: more than %u memoryProposals",
                    TERN_MEMORY_MAX_PROPOSALS);
        goto out;
    }
    s.memory = memory && cJSON_GetArraySize(memory) > 0 ? json_dup(memory) : NULL;
    s.result_value = result_value(json_get(o, "resultValue"));
    s.result_ref = result_ref(json_get(o, "resultRef"));
    s.persisted = persisted ? json_dup(persisted) : NULL;
    s.persist_request = sdup(persist_request);
out:
    cJSON_Delete(o);
    if (r) {
        journal_summary_done(&s);
        return r;
    }
    *ret = s;
    return 0;
}
