/* journal.c - the session journal. See journal.h and docs/journal.md.
 *
 * First the pure core (event types, decode/encode for schema v1 and v0, the
 * summary fold and its JSON), then the etcd shell (append with fencing and
 * read-back resolution, chunks, replay, tail, compaction, fork copy, delete,
 * turn lock).
 */
#include "journal.h"

#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ==== pure core ========================================================== */

static const char *const type_names[] = {
    [JOURNAL_EV_UNKNOWN] = NULL,
    [JOURNAL_EV_USER_MESSAGE] = "user_message",
    [JOURNAL_EV_TURN_STARTED] = "turn_started",
    [JOURNAL_EV_MODEL_REQUEST] = "model_request",
    [JOURNAL_EV_MODEL_RESPONSE] = "model_response",
    [JOURNAL_EV_TOOL_CALL] = "tool_call",
    [JOURNAL_EV_TOOL_RESULT] = "tool_result",
    [JOURNAL_EV_APPROVAL_REQUESTED] = "approval_requested",
    [JOURNAL_EV_APPROVAL_DECIDED] = "approval_decided",
    [JOURNAL_EV_TURN_FINISHED] = "turn_finished",
    [JOURNAL_EV_FORK_CREATED] = "fork_created",
    [JOURNAL_EV_FORKED_FROM] = "forked_from",
    [JOURNAL_EV_LIMIT_REACHED] = "limit_reached",
    [JOURNAL_EV_ERROR] = "error",
    [JOURNAL_EV_SNAPSHOT] = "snapshot",
    [JOURNAL_EV_RETRY] = "retry",
};
#define NTYPES (sizeof type_names / sizeof type_names[0])

const char *journal_type_name(enum journal_type t)
{
    return (unsigned)t < NTYPES ? type_names[t] : NULL;
}

enum journal_type journal_type_parse(const char *name)
{
    for (size_t i = 1; name && i < NTYPES; i++)
        if (strcmp(type_names[i], name) == 0)
            return (enum journal_type)i;
    return JOURNAL_EV_UNKNOWN;
}

/* A type name: 1..64 of [a-z0-9_]. */
static bool valid_type_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

void journal_event_done(struct journal_event *ev)
{
    if (!ev)
        return;
    free(ev->type_name);
    free(ev->time);
    free(ev->key);
    cJSON_Delete(ev->data);
    memset(ev, 0, sizeof *ev);
}

void journal_event_copy(struct journal_event *dst, const struct journal_event *src)
{
    *dst = *src;
    dst->type_name = src->type_name ? xstrdup(src->type_name) : NULL;
    dst->time = src->time ? xstrdup(src->time) : NULL;
    dst->key = src->key ? xstrdup(src->key) : NULL;
    dst->data = src->data ? json_dup(src->data) : cJSON_CreateObject();
}

/* RFC 3339 UTC with nanoseconds from a timespec. */
static char *fmt_time(const struct timespec *ts)
{
    struct tm tm;
    time_t t = ts->tv_sec;
    gmtime_r(&t, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    return xasprintf("%s.%09ldZ", base, (long)ts->tv_nsec);
}

static char *now_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return fmt_time(&ts);
}

/* Loose RFC 3339 check: digits and separators, bounded length. */
static bool valid_time(const char *s)
{
    size_t n = strlen(s);
    if (n < 20 || n > 40 || s[4] != '-' || s[7] != '-' || s[10] != 'T')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789-:.TZ+", s[i]))
            return false;
    return true;
}

/* Schema v0 (pre-release): {"seq","kind","ts" (unix ms),"turn","idem",
 * "payload"}; "tool_output" became "tool_result"; model_response usage was
 * payload.tokens {"in","out"}. Converted to v1 fields. */
static int decode_v0(const cJSON *o, struct journal_event *ev, struct tern_err *err)
{
    int64_t seq = 0, ts = 0, turn = 0;
    const char *kind = NULL, *idem = NULL;
    const cJSON *payload = NULL;
    if (json_get_int_range(o, "event", "seq", JSON_REQUIRED, 1, INT64_MAX, &seq, err) ||
        json_get_string(o, "event", "kind", JSON_REQUIRED, &kind, err) ||
        json_get_int_range(o, "event", "ts", JSON_REQUIRED, 0, INT64_MAX / 1000000, &ts, err) ||
        json_get_int_range(o, "event", "turn", JSON_OPTIONAL, 0, INT64_MAX, &turn, err) ||
        json_get_string(o, "event", "idem", JSON_OPTIONAL, &idem, err) ||
        json_get_object(o, "event", "payload", JSON_OPTIONAL, &payload, err))
        return TERN_EPARSE;
    if (strcmp(kind, "tool_output") == 0)
        kind = "tool_result";
    if (!valid_type_name(kind))
        return err_set(err, TERN_EPARSE, "event.kind: bad type name");
    if (idem && strlen(idem) > 1024)
        return err_set(err, TERN_EPARSE, "event.idem: longer than 1024");
    struct timespec t = {.tv_sec = ts / 1000, .tv_nsec = (ts % 1000) * 1000000L};
    ev->v = 0;
    ev->seq = (uint64_t)seq;
    ev->type_name = xstrdup(kind);
    ev->type = journal_type_parse(kind);
    ev->time = fmt_time(&t);
    ev->turn = turn;
    ev->key = idem ? xstrdup(idem) : NULL;
    ev->data = payload ? json_dup(payload) : cJSON_CreateObject();
    const cJSON *tok = json_get(ev->data, "tokens");
    if (ev->type == JOURNAL_EV_MODEL_RESPONSE && cJSON_IsObject(tok) &&
        !json_get(ev->data, "usage")) {
        int64_t in = 0, out = 0;
        if (json_get_int_range(tok, "event.payload.tokens", "in", JSON_OPTIONAL, 0, INT64_MAX, &in,
                               err) ||
            json_get_int_range(tok, "event.payload.tokens", "out", JSON_OPTIONAL, 0, INT64_MAX,
                               &out, err)) {
            journal_event_done(ev);
            return TERN_EPARSE;
        }
        cJSON *u = cJSON_AddObjectToObject(ev->data, "usage");
        json_add_int64(u, "prompt_tokens", in);
        json_add_int64(u, "completion_tokens", out);
        cJSON_DeleteItemFromObjectCaseSensitive(ev->data, "tokens");
    }
    return 0;
}

int journal_event_decode(const char *value, size_t len, struct journal_event *ret,
                         cJSON **ret_chunks, struct tern_err *err)
{
    struct journal_event ev = {0};
    cJSON *o = NULL;
    int r = 0;
    if (ret_chunks)
        *ret_chunks = NULL;
    if (len > TERN_JOURNAL_MAX_EVENT + 4096)
        return err_set(err, TERN_ETOOLARGE, "event: %zu bytes exceeds the bound", len);
    r = json_parse(value, len, &o, err);
    if (r) {
        r = err_wrap(err, TERN_EPARSE, "event");
        goto out;
    }
    if (!cJSON_IsObject(o)) {
        r = err_set(err, TERN_EPARSE, "event: not an object");
        goto out;
    }
    if (!json_get(o, "v")) {
        r = decode_v0(o, &ev, err);
        goto out;
    }
    int64_t v = 0, seq = 0, turn = 0;
    const char *type = NULL, *tm = NULL, *key = NULL;
    const cJSON *data = NULL, *chunks = NULL;
    if (json_get_int_range(o, "event", "v", JSON_REQUIRED, 0, INT64_MAX, &v, err)) {
        r = TERN_EPARSE;
        goto out;
    }
    if (v != 1) {
        r = err_set(err, TERN_EPARSE, "event.v: unsupported schema version %lld", (long long)v);
        goto out;
    }
    if (json_get_int_range(o, "event", "seq", JSON_REQUIRED, 1, INT64_MAX, &seq, err) ||
        json_get_string(o, "event", "type", JSON_REQUIRED, &type, err) ||
        json_get_string(o, "event", "time", JSON_REQUIRED, &tm, err) ||
        json_get_int_range(o, "event", "turn", JSON_OPTIONAL, 0, INT64_MAX, &turn, err) ||
        json_get_string(o, "event", "key", JSON_OPTIONAL, &key, err) ||
        json_get_object(o, "event", "data", JSON_OPTIONAL, &data, err) ||
        json_get_object(o, "event", "chunks", JSON_OPTIONAL, &chunks, err)) {
        r = TERN_EPARSE;
        goto out;
    }
    if (!valid_type_name(type)) {
        r = err_set(err, TERN_EPARSE, "event.type: bad type name");
        goto out;
    }
    if (!valid_time(tm)) {
        r = err_set(err, TERN_EPARSE, "event.time: not an RFC 3339 time");
        goto out;
    }
    if (key && strlen(key) > 1024) {
        r = err_set(err, TERN_EPARSE, "event.key: longer than 1024");
        goto out;
    }
    if (chunks) {
        const char *id = NULL;
        int64_t n = 0, bytes = 0;
        if (data || json_get_string(chunks, "event.chunks", "id", JSON_REQUIRED, &id, err) ||
            json_get_int_range(chunks, "event.chunks", "n", JSON_REQUIRED, 1,
                               TERN_JOURNAL_MAX_DATA / TERN_JOURNAL_CHUNK + 1, &n, err) ||
            json_get_int_range(chunks, "event.chunks", "bytes", JSON_REQUIRED, 1,
                               TERN_JOURNAL_MAX_DATA, &bytes, err) ||
            strlen(id) == 0 || strlen(id) > 32 || strchr(id, '/')) {
            r = err_set(err, TERN_EPARSE, "event.chunks: malformed");
            goto out;
        }
        if (!ret_chunks) {
            r = err_set(err, TERN_EPARSE, "event: chunked, but chunks not expected here");
            goto out;
        }
    }
    ev.v = (int)v;
    ev.seq = (uint64_t)seq;
    ev.type_name = xstrdup(type);
    ev.type = journal_type_parse(type);
    ev.time = xstrdup(tm);
    ev.turn = turn;
    ev.key = key ? xstrdup(key) : NULL;
    /* take the subtrees over instead of copying them */
    ev.data = data ? cJSON_DetachItemFromObjectCaseSensitive(o, "data") : cJSON_CreateObject();
    if (chunks && ret_chunks)
        *ret_chunks = cJSON_DetachItemFromObjectCaseSensitive(o, "chunks");
    else if (ret_chunks)
        *ret_chunks = NULL;
out:
    cJSON_Delete(o);
    if (r) {
        journal_event_done(&ev);
        return r;
    }
    *ret = ev;
    return 0;
}

/* The v1 envelope without data (for chunked heads) or with it. */
static cJSON *event_json(const struct journal_event *ev, bool with_data)
{
    cJSON *o = cJSON_CreateObject();
    json_add_int64(o, "v", JOURNAL_SCHEMA_VERSION);
    json_add_int64(o, "seq", (int64_t)ev->seq);
    json_add_string(o, "type", ev->type_name ? ev->type_name : journal_type_name(ev->type));
    json_add_string(o, "time", ev->time ? ev->time : "1970-01-01T00:00:00.000000000Z");
    json_add_int64(o, "turn", ev->turn);
    if (ev->key)
        json_add_string(o, "key", ev->key);
    if (with_data)
        cJSON_AddItemToObject(o, "data", ev->data ? json_dup(ev->data) : cJSON_CreateObject());
    return o;
}

char *journal_event_encode(const struct journal_event *ev)
{
    cJSON *o = event_json(ev, true);
    char *s = json_print(o);
    cJSON_Delete(o);
    return s;
}

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
    free(s->reason);
    free(s->message);
    free(s->limit);
    free(s->first_request);
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
    dst->reason = sdup(src->reason);
    dst->message = sdup(src->message);
    dst->limit = sdup(src->limit);
    dst->first_request = sdup(src->first_request);
}

static void set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = v ? xstrdup(v) : NULL;
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
            set_str(&s->result, data_str(d, "summary"));
            cJSON_Delete(s->artifacts);
            const cJSON *a = json_get(d, "artifacts");
            s->artifacts = cJSON_IsArray(a) ? json_dup(a) : NULL;
        }
        break;
    }
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
    const cJSON *artifacts = NULL;
    if (!cJSON_IsObject(o) ||
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
out:
    cJSON_Delete(o);
    if (r) {
        journal_summary_done(&s);
        return r;
    }
    *ret = s;
    return 0;
}

cJSON *journal_truncate_data(const cJSON *data, size_t max_bytes)
{
    if (max_bytes == 0)
        max_bytes = TERN_JOURNAL_MAX_EVENT;
    char *txt = json_print(data);
    size_t n = strlen(txt);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddTrueToObject(o, "truncated");
    json_add_int64(o, "originalBytes", (int64_t)n);
    /* the preview is escaped when printed (up to 6x for control bytes):
     * keep it well inside the bound, and cut on a UTF-8 boundary */
    size_t keep = max_bytes > 256 ? (max_bytes - 256) / 6 : 0;
    if (keep > n)
        keep = n;
    while (keep > 0 && ((unsigned char)txt[keep] & 0xC0) == 0x80)
        keep--;
    txt[keep] = 0;
    json_add_string(o, "preview", txt);
    free(txt);
    return o;
}

/* ==== etcd shell ========================================================= */

struct journal {
    struct etcd *c;
    char *uid;
    char *prefix; /* /tern/v1/s/<uid>/ */
    char *sum_key;
    struct journal_summary sum;
    int64_t seen; /* mod_revision of sum as last read/written; 0 = absent */
    long retry_ms;
    size_t page;
    /* an append whose outcome is unknown */
    bool unresolved;
    uint64_t pend_seq;
    char *pend_value;
    struct journal_summary pend_sum;
    struct journal_stats stats;
};

void journal_get_stats(const struct journal *j, struct journal_stats *ret)
{
    *ret = j->stats;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool valid_uid(const char *uid)
{
    size_t n = uid ? strlen(uid) : 0;
    if (n == 0 || n > TERN_JOURNAL_MAX_UID)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = uid[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return false;
    }
    return strcmp(uid, ".") != 0 && strcmp(uid, "..") != 0;
}

char *journal_prefix(const char *uid)
{
    return valid_uid(uid) ? xasprintf("/tern/v1/s/%s/", uid) : NULL;
}

static char *ev_key(const char *prefix, uint64_t seq)
{
    return xasprintf("%sev/%016llx", prefix, (unsigned long long)seq);
}

static char *chunk_key(const char *prefix, uint64_t seq, const char *id, unsigned i)
{
    return xasprintf("%sch/%016llx/%s/%04x", prefix, (unsigned long long)seq, id, i);
}

/* The seq of an ev/ key, or 0 if it is not one. */
static uint64_t key_seq(const char *prefix, const char *key)
{
    size_t pl = strlen(prefix);
    if (strncmp(key, prefix, pl) != 0 || strncmp(key + pl, "ev/", 3) != 0 ||
        strlen(key + pl + 3) != 16)
        return 0;
    uint64_t seq = 0;
    if (num_parse_hex64(key + pl + 3, 16, &seq))
        return 0;
    return seq;
}

enum journal_key_kind journal_key_parse(const char *key, char *uid, uint64_t *ret_seq)
{
    size_t pl = strlen(JOURNAL_ALL_PREFIX);
    if (!key || strncmp(key, JOURNAL_ALL_PREFIX, pl) != 0)
        return JOURNAL_KEY_OTHER;
    const char *u = key + pl, *slash = strchr(u, '/');
    if (!slash || slash == u || (size_t)(slash - u) > TERN_JOURNAL_MAX_UID)
        return JOURNAL_KEY_OTHER;
    char tmp[TERN_JOURNAL_MAX_UID + 1];
    memcpy(tmp, u, (size_t)(slash - u));
    tmp[slash - u] = 0;
    if (!valid_uid(tmp))
        return JOURNAL_KEY_OTHER;
    const char *rest = slash + 1;
    enum journal_key_kind k = JOURNAL_KEY_OTHER;
    uint64_t seq = 0;
    if (strcmp(rest, "sum") == 0)
        k = JOURNAL_KEY_SUM;
    else if (strcmp(rest, "meta") == 0)
        k = JOURNAL_KEY_META;
    else if (strcmp(rest, "lock") == 0)
        k = JOURNAL_KEY_LOCK;
    else if (strncmp(rest, "ch/", 3) == 0)
        k = JOURNAL_KEY_CHUNK;
    else if (strncmp(rest, "ev/", 3) == 0 && strlen(rest + 3) == 16 &&
             num_parse_hex64(rest + 3, 16, &seq) == 0 && seq > 0)
        k = JOURNAL_KEY_EVENT;
    if (k == JOURNAL_KEY_OTHER)
        return k;
    memcpy(uid, tmp, (size_t)(slash - u) + 1);
    if (k == JOURNAL_KEY_EVENT && ret_seq)
        *ret_seq = seq;
    return k;
}

/* Retry policy for calls that may be repeated safely. */
static bool transient(int r)
{
    return r == TERN_EUNREACHABLE || r == TERN_ETIMEOUT || r == -EIO;
}

/* Reads sum (value + revision) into s / *rev; an absent sum gives an empty
 * summary and revision 0. */
static int read_sum(struct etcd *c, const char *sum_key, struct journal_summary *s, int64_t *rev,
                    bool *present, struct tern_err *err)
{
    struct etcd_kv *kv = NULL;
    int r = etcd_get(c, sum_key, &kv, NULL, err);
    if (r == TERN_ENOTFOUND) {
        journal_summary_init(s);
        *rev = 0;
        *present = false;
        return 0;
    }
    if (r)
        return r;
    r = journal_summary_decode(kv->value, kv->value_len, s, err);
    if (!r) {
        *rev = kv->mod_revision;
        *present = true;
    }
    etcd_kv_free(kv);
    return r;
}

static int load_state(struct journal *j, struct tern_err *err)
{
    struct journal_summary s;
    int64_t rev = 0;
    bool present = false;
    int r;
    long deadline = now_ms() + j->retry_ms;
    while ((r = read_sum(j->c, j->sum_key, &s, &rev, &present, err)) && transient(r) &&
           now_ms() < deadline)
        sleep_ms(100);
    if (r)
        return r;
    if (!present) {
        /* new, or written by schema v0 (no summary): fold the events */
        journal_summary_done(&s);
        r = journal_replay(j, 1, NULL, NULL, &s, err);
        if (r == TERN_ECOMPACTED)
            r = journal_replay(j, JOURNAL_FROM_SNAPSHOT, NULL, NULL, &s, err);
        if (r)
            return r;
    }
    journal_summary_done(&j->sum);
    j->sum = s;
    j->seen = rev;
    return 0;
}

int journal_open(struct etcd *c, const char *uid, const struct journal_opts *opts,
                 struct journal **ret, struct tern_err *err)
{
    if (!valid_uid(uid))
        return err_set(err, TERN_EINVALID, "journal: bad session uid");
    struct journal *j = xcalloc(1, sizeof *j);
    j->c = c;
    j->uid = xstrdup(uid);
    j->prefix = journal_prefix(uid);
    j->sum_key = xasprintf("%ssum", j->prefix);
    j->retry_ms = opts && opts->retry_ms > 0 ? opts->retry_ms : 30000;
    j->page = opts && opts->page_size > 0 ? opts->page_size : 1000;
    if (j->page > TERN_JOURNAL_MAX_PAGE)
        j->page = TERN_JOURNAL_MAX_PAGE;
    journal_summary_init(&j->sum);
    int r = load_state(j, err);
    if (r) {
        journal_free(j);
        return r;
    }
    *ret = j;
    return 0;
}

static void clear_pending(struct journal *j)
{
    j->unresolved = false;
    free(j->pend_value);
    j->pend_value = NULL;
    journal_summary_done(&j->pend_sum);
}

void journal_free(struct journal *j)
{
    if (!j)
        return;
    clear_pending(j);
    journal_summary_done(&j->sum);
    free(j->uid);
    free(j->prefix);
    free(j->sum_key);
    free(j);
}

const struct journal_summary *journal_summary(const struct journal *j)
{
    return &j->sum;
}

int64_t journal_seen_revision(const struct journal *j)
{
    return j->seen;
}

int journal_refresh(struct journal *j, struct tern_err *err)
{
    if (j->unresolved)
        return err_set(err, TERN_EUNKNOWN, "journal: resolve the pending append first");
    return load_state(j, err);
}

int journal_create_meta(struct journal *j, const char *ns, const char *name, struct tern_err *err)
{
    cJSON *m = cJSON_CreateObject();
    json_add_string(m, "namespace", ns ? ns : "");
    json_add_string(m, "name", name ? name : "");
    char *t = now_time();
    json_add_string(m, "createdAt", t);
    free(t);
    char *val = json_print(m);
    cJSON_Delete(m);
    char *key = xasprintf("%smeta", j->prefix);
    struct etcd_compare cmp = {.keys = {.key = key}, .target = ETCD_CMP_CREATE, .number = 0};
    struct etcd_op put = {.type = ETCD_OP_PUT,
                          .put = {.key = key, .value = val, .value_len = strlen(val)}};
    struct etcd_txn_resp tr;
    int r;
    long deadline = now_ms() + j->retry_ms;
    /* create-if-absent is idempotent: an unknown outcome is simply retried */
    while ((r = etcd_txn(j->c, &(struct etcd_txn_req){&cmp, 1, &put, 1, NULL, 0}, &tr, err)) &&
           (transient(r) || r == TERN_EUNKNOWN) && now_ms() < deadline)
        sleep_ms(100);
    etcd_txn_resp_done(&tr);
    free(key);
    free(val);
    return r;
}

/* The final append txn. The failure branch reads ev/<seq> and sum so that a
 * failed compare can tell "our own earlier attempt committed" from "fenced". */
struct commit {
    const char *ev_key;
    const char *ev_value;
    size_t ev_len;
    const char *sum_value;
    size_t sum_len;
    uint64_t seq;
};

enum outcome { OUT_COMMITTED, OUT_ABSENT_UNCHANGED, OUT_FENCED };

/* Classifies what is stored at ev/<seq> and sum. */
static enum outcome classify(const struct journal *j, const struct commit *cm,
                             const struct etcd_range_resp *ev, const struct etcd_range_resp *sum,
                             int64_t *ret_rev)
{
    if (ev->nkvs == 1) {
        const struct etcd_kv *kv = &ev->kvs[0];
        if (kv->value_len == cm->ev_len && memcmp(kv->value, cm->ev_value, cm->ev_len) == 0) {
            *ret_rev = kv->mod_revision;
            return OUT_COMMITTED;
        }
        return OUT_FENCED;
    }
    int64_t sum_rev = sum->nkvs ? sum->kvs[0].mod_revision : 0;
    return sum_rev == j->seen ? OUT_ABSENT_UNCHANGED : OUT_FENCED;
}

/* Reads ev/<seq> and sum back in one read-only txn. */
static int read_back(struct journal *j, const struct commit *cm, enum outcome *ret,
                     int64_t *ret_rev, struct tern_err *err)
{
    struct etcd_op ops[] = {
        {.type = ETCD_OP_RANGE, .range = {.keys = {.key = cm->ev_key}}},
        {.type = ETCD_OP_RANGE, .range = {.keys = {.key = j->sum_key}}},
    };
    struct etcd_txn_resp tr;
    int r = etcd_txn(j->c, &(struct etcd_txn_req){NULL, 0, ops, 2, NULL, 0}, &tr, err);
    if (r)
        return r;
    if (tr.nresponses != 2) {
        etcd_txn_resp_done(&tr);
        return err_set(err, TERN_EPARSE, "journal read-back: %zu responses", tr.nresponses);
    }
    *ret = classify(j, cm, &tr.responses[0].range, &tr.responses[1].range, ret_rev);
    etcd_txn_resp_done(&tr);
    return 0;
}

/* Sends the commit txn until it is decided or the budget runs out.
 * Returns 0 (committed, *ret_rev = the revision), TERN_EFENCED,
 * TERN_EUNKNOWN (undecided), or a hard error. */
static int commit_txn(struct journal *j, const struct commit *cm, int64_t *ret_rev,
                      struct tern_err *err)
{
    struct etcd_compare cmps[] = {
        {.keys = {.key = cm->ev_key}, .target = ETCD_CMP_CREATE, .number = 0},
        {.keys = {.key = j->sum_key}, .target = ETCD_CMP_MOD, .number = j->seen},
    };
    struct etcd_op succ[] = {
        {.type = ETCD_OP_PUT,
         .put = {.key = cm->ev_key, .value = cm->ev_value, .value_len = cm->ev_len}},
        {.type = ETCD_OP_PUT,
         .put = {.key = j->sum_key, .value = cm->sum_value, .value_len = cm->sum_len}},
    };
    struct etcd_op fail[] = {
        {.type = ETCD_OP_RANGE, .range = {.keys = {.key = cm->ev_key}}},
        {.type = ETCD_OP_RANGE, .range = {.keys = {.key = j->sum_key}}},
    };
    struct etcd_txn_req req = {cmps, 2, succ, 2, fail, 2};
    long deadline = now_ms() + j->retry_ms;
    long backoff = 50;
    bool must_read_back = false;
    bool had_unknown = false; /* some attempt may still land later */
    int r = 0;
    for (;;) {
        if (must_read_back) {
            enum outcome oc;
            int64_t rev = 0;
            r = read_back(j, cm, &oc, &rev, err);
            if (r == 0) {
                if (oc == OUT_COMMITTED) {
                    *ret_rev = rev;
                    return 0;
                }
                if (oc == OUT_FENCED)
                    return err_set(err, TERN_EFENCED,
                                   "journal %s: seq %llu: another writer appended first", j->uid,
                                   (unsigned long long)cm->seq);
                must_read_back = false; /* not applied: send it again */
                j->stats.resends++;
                continue;
            }
            if (!transient(r) && r != TERN_EUNKNOWN)
                return r;
        } else {
            struct etcd_txn_resp tr;
            r = etcd_txn(j->c, &req, &tr, err);
            if (r == 0) {
                if (tr.succeeded) {
                    *ret_rev = tr.header.revision;
                    etcd_txn_resp_done(&tr);
                    return 0;
                }
                enum outcome oc = OUT_FENCED;
                int64_t rev = 0;
                if (tr.nresponses == 2)
                    oc = classify(j, cm, &tr.responses[0].range, &tr.responses[1].range, &rev);
                etcd_txn_resp_done(&tr);
                if (oc == OUT_COMMITTED) { /* an earlier attempt of ours landed */
                    *ret_rev = rev;
                    return 0;
                }
                return err_set(err, TERN_EFENCED,
                               "journal %s: seq %llu: another writer appended first", j->uid,
                               (unsigned long long)cm->seq);
            }
            etcd_txn_resp_done(&tr);
            if (r == TERN_EUNKNOWN) {
                must_read_back = true;
                had_unknown = true;
                j->stats.unknown_outcomes++;
            } else if (!transient(r)) {
                return r;
            } else {
                j->stats.retries++;
            }
        }
        if (now_ms() + backoff > deadline)
            break;
        sleep_ms(backoff);
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
    }
    /* a read-back that found nothing is not final (a delayed attempt can
     * still commit): undecided unless resolved by journal_resolve */
    if (had_unknown || r == TERN_EUNKNOWN)
        return err_set(err, TERN_EUNKNOWN, "journal %s: seq %llu: outcome unknown after %ld ms",
                       j->uid, (unsigned long long)cm->seq, j->retry_ms);
    return r;
}

/* Writes the chunks of an oversize event, each fenced like the append. */
static int put_chunks(struct journal *j, uint64_t seq, const char *ev_k, const char *id,
                      const char *data, size_t n, struct tern_err *err)
{
    unsigned nchunks = (unsigned)((n + TERN_JOURNAL_CHUNK - 1) / TERN_JOURNAL_CHUNK);
    for (unsigned i = 0; i < nchunks; i++) {
        size_t off = (size_t)i * TERN_JOURNAL_CHUNK;
        size_t len = n - off < TERN_JOURNAL_CHUNK ? n - off : TERN_JOURNAL_CHUNK;
        char *ck = chunk_key(j->prefix, seq, id, i);
        struct etcd_compare cmps[] = {
            {.keys = {.key = ev_k}, .target = ETCD_CMP_CREATE, .number = 0},
            {.keys = {.key = j->sum_key}, .target = ETCD_CMP_MOD, .number = j->seen},
        };
        struct etcd_op put = {.type = ETCD_OP_PUT,
                              .put = {.key = ck, .value = data + off, .value_len = len}};
        long deadline = now_ms() + j->retry_ms;
        int r;
        struct etcd_txn_resp tr;
        /* re-putting the same chunk bytes is harmless: retry until decided */
        while ((r = etcd_txn(j->c, &(struct etcd_txn_req){cmps, 2, &put, 1, NULL, 0}, &tr, err)) &&
               (transient(r) || r == TERN_EUNKNOWN) && now_ms() < deadline) {
            etcd_txn_resp_done(&tr);
            sleep_ms(100);
        }
        bool ok = r == 0 && tr.succeeded;
        etcd_txn_resp_done(&tr);
        free(ck);
        if (r)
            return r;
        if (!ok)
            return err_set(err, TERN_EFENCED, "journal %s: seq %llu: fenced while writing chunks",
                           j->uid, (unsigned long long)seq);
    }
    return 0;
}

static void random_id(char out[17])
{
    unsigned char b[8];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
        memcpy(b, &x, sizeof b);
    }
    for (int i = 0; i < 8; i++) {
        static const char hex[] = "0123456789abcdef";
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[16] = 0;
}

int journal_append(struct journal *j, const struct journal_append_req *req, uint64_t *ret_seq,
                   struct tern_err *err)
{
    if (j->unresolved)
        return err_set(err, TERN_EUNKNOWN, "journal %s: seq %llu unresolved; call journal_resolve",
                       j->uid, (unsigned long long)j->pend_seq);
    const char *tname = req->type_name ? req->type_name : journal_type_name(req->type);
    if (!tname || !valid_type_name(tname))
        return err_set(err, TERN_EINVALID, "journal append: bad event type");
    if (req->key && strlen(req->key) > 1024)
        return err_set(err, TERN_EINVALID, "journal append: key longer than 1024");
    if (req->turn < 0)
        return err_set(err, TERN_EINVALID, "journal append: negative turn");
    if (req->data && !cJSON_IsObject(req->data))
        return err_set(err, TERN_EINVALID, "journal append: data must be an object");

    struct journal_event ev = {
        .v = JOURNAL_SCHEMA_VERSION,
        .seq = j->sum.last_seq + 1,
        .type = journal_type_parse(tname),
        .type_name = (char *)tname,
        .time = now_time(),
        .turn = req->turn,
        .key = (char *)req->key,
        .data = (cJSON *)req->data,
    };
    cJSON *empty = NULL;
    if (!ev.data)
        ev.data = empty = cJSON_CreateObject();
    char *data_txt = NULL, *value = NULL, *sum_txt = NULL, *k = ev_key(j->prefix, ev.seq);
    struct journal_summary ns;
    journal_summary_copy(&ns, &j->sum);
    int r = 0;

    value = journal_event_encode(&ev);
    size_t vlen = strlen(value);
    if (vlen > TERN_JOURNAL_MAX_EVENT) {
        data_txt = json_print(ev.data);
        size_t dlen = strlen(data_txt);
        if (dlen > TERN_JOURNAL_MAX_DATA) {
            r = err_set(err, TERN_ETOOLARGE,
                        "journal append: data of %zu bytes exceeds %u (truncate it first)", dlen,
                        TERN_JOURNAL_MAX_DATA);
            goto out;
        }
        char id[17];
        random_id(id);
        cJSON *head = event_json(&ev, false);
        cJSON *ch = cJSON_AddObjectToObject(head, "chunks");
        json_add_string(ch, "id", id);
        json_add_int64(ch, "n", (int64_t)((dlen + TERN_JOURNAL_CHUNK - 1) / TERN_JOURNAL_CHUNK));
        json_add_int64(ch, "bytes", (int64_t)dlen);
        free(value);
        value = json_print(head);
        cJSON_Delete(head);
        vlen = strlen(value);
        r = put_chunks(j, ev.seq, k, id, data_txt, dlen, err);
        if (r)
            goto out;
        j->stats.chunked++;
    }
    if (journal_summary_apply(&ns, &ev)) {
        r = err_set(err, TERN_EINVALID, "journal append: summary fold failed");
        goto out;
    }
    cJSON *sj = journal_summary_to_json(&ns);
    sum_txt = json_print(sj);
    cJSON_Delete(sj);

    struct commit cm = {.ev_key = k,
                        .ev_value = value,
                        .ev_len = vlen,
                        .sum_value = sum_txt,
                        .sum_len = strlen(sum_txt),
                        .seq = ev.seq};
    int64_t rev = 0;
    r = commit_txn(j, &cm, &rev, err);
    if (r == 0) {
        journal_summary_done(&j->sum);
        j->sum = ns;
        journal_summary_init(&ns);
        j->seen = rev;
        j->stats.appends++;
        if (ret_seq)
            *ret_seq = ev.seq;
    } else if (r == TERN_EUNKNOWN) {
        j->unresolved = true;
        j->pend_seq = ev.seq;
        j->pend_value = value;
        value = NULL;
        j->pend_sum = ns;
        journal_summary_init(&ns);
    }
out:
    journal_summary_done(&ns);
    cJSON_Delete(empty);
    free((char *)ev.time);
    free(data_txt);
    free(value);
    free(sum_txt);
    free(k);
    return r;
}

int journal_resolve(struct journal *j, bool *ret_committed, uint64_t *ret_seq, struct tern_err *err)
{
    if (!j->unresolved) {
        *ret_committed = false;
        return 0;
    }
    char *k = ev_key(j->prefix, j->pend_seq);
    struct commit cm = {.ev_key = k,
                        .ev_value = j->pend_value,
                        .ev_len = strlen(j->pend_value),
                        .seq = j->pend_seq};
    enum outcome oc;
    int64_t rev = 0;
    int r = read_back(j, &cm, &oc, &rev, err);
    if (r)
        goto out;
    if (oc == OUT_COMMITTED) {
        journal_summary_done(&j->sum);
        j->sum = j->pend_sum;
        journal_summary_init(&j->pend_sum);
        j->seen = rev;
        *ret_committed = true;
        if (ret_seq)
            *ret_seq = j->pend_seq;
        clear_pending(j);
        goto out;
    }
    if (oc == OUT_ABSENT_UNCHANGED) {
        /* make "not committed" definitive: rewrite sum unchanged under the
         * same compares, so a late copy of the lost txn can never apply */
        cJSON *sj = journal_summary_to_json(&j->sum);
        char *txt = json_print(sj);
        cJSON_Delete(sj);
        struct etcd_compare cmps[] = {
            {.keys = {.key = k}, .target = ETCD_CMP_CREATE, .number = 0},
            {.keys = {.key = j->sum_key}, .target = ETCD_CMP_MOD, .number = j->seen},
        };
        struct etcd_op put = {.type = ETCD_OP_PUT,
                              .put = {.key = j->sum_key, .value = txt, .value_len = strlen(txt)}};
        struct etcd_txn_resp tr;
        r = etcd_txn(j->c, &(struct etcd_txn_req){cmps, 2, &put, 1, NULL, 0}, &tr, err);
        bool ok = r == 0 && tr.succeeded;
        int64_t hrev = tr.header.revision;
        etcd_txn_resp_done(&tr);
        free(txt);
        if (r)
            goto out; /* still unresolved */
        if (!ok) {
            r = -EAGAIN; /* something moved: read back again */
            err_set(err, r, "journal resolve: state changed, retry");
            goto out;
        }
        j->seen = hrev;
        *ret_committed = false;
        clear_pending(j);
        goto out;
    }
    /* fenced: not ours, and another writer moved on */
    *ret_committed = false;
    clear_pending(j);
    r = load_state(j, err);
out:
    free(k);
    return r;
}

/* ---- reading events ----------------------------------------------------- */

/* Reassembles a chunked event's data. */
static int load_chunks(struct etcd *c, const char *prefix, struct journal_event *ev,
                       const cJSON *chunks, struct tern_err *err)
{
    const char *id = json_get(chunks, "id")->valuestring;
    int64_t n = 0, bytes = 0;
    json_item_int64(json_get(chunks, "n"), &n);
    json_item_int64(json_get(chunks, "bytes"), &bytes);
    char *pfx = xasprintf("%sch/%016llx/%s/", prefix, (unsigned long long)ev->seq, id);
    struct etcd_range_resp rr = {0};
    int r = etcd_range(c, &(struct etcd_range_req){.keys = {.key = pfx, .prefix = true}}, &rr, err);
    char *buf = NULL;
    if (r)
        goto out;
    if ((int64_t)rr.nkvs != n) {
        r = err_set(err, TERN_EPARSE, "journal seq %llu: %zu of %lld chunks present",
                    (unsigned long long)ev->seq, rr.nkvs, (long long)n);
        goto out;
    }
    buf = xmalloc((size_t)bytes + 1);
    size_t off = 0;
    for (size_t i = 0; i < rr.nkvs; i++) {
        if (off + rr.kvs[i].value_len > (size_t)bytes) {
            r = err_set(err, TERN_EPARSE, "journal seq %llu: chunks exceed %lld bytes",
                        (unsigned long long)ev->seq, (long long)bytes);
            goto out;
        }
        memcpy(buf + off, rr.kvs[i].value, rr.kvs[i].value_len);
        off += rr.kvs[i].value_len;
    }
    if (off != (size_t)bytes) {
        r = err_set(err, TERN_EPARSE, "journal seq %llu: chunks hold %zu of %lld bytes",
                    (unsigned long long)ev->seq, off, (long long)bytes);
        goto out;
    }
    cJSON *d = NULL;
    struct json_parse_opts po = {.max_bytes = TERN_JOURNAL_MAX_DATA};
    if (json_parse_opts(buf, off, &po, &d, err) || !cJSON_IsObject(d)) {
        cJSON_Delete(d);
        r = err_set(err, TERN_EPARSE, "journal seq %llu: chunked data is not a JSON object",
                    (unsigned long long)ev->seq);
        goto out;
    }
    cJSON_Delete(ev->data);
    ev->data = d;
out:
    free(buf);
    free(pfx);
    etcd_range_resp_done(&rr);
    return r;
}

/* Decodes a stored head kv (key must be ev/<seq>), fetching chunks. */
static int decode_kv(struct etcd *c, const char *prefix, const struct etcd_kv *kv,
                     struct journal_event *ret, struct tern_err *err)
{
    uint64_t kseq = key_seq(prefix, kv->key);
    if (kseq == 0)
        return err_set(err, TERN_EPARSE, "journal: unexpected key %s", kv->key);
    cJSON *chunks = NULL;
    struct journal_event ev;
    int r = journal_event_decode(kv->value, kv->value_len, &ev, &chunks, err);
    if (r)
        return err_wrap(err, r, "journal key %s", kv->key);
    if (ev.seq != kseq) {
        journal_event_done(&ev);
        cJSON_Delete(chunks);
        return err_set(err, TERN_EPARSE, "journal key %s holds seq %llu", kv->key,
                       (unsigned long long)ev.seq);
    }
    if (chunks)
        r = load_chunks(c, prefix, &ev, chunks, err);
    cJSON_Delete(chunks);
    if (r) {
        journal_event_done(&ev);
        return r;
    }
    *ret = ev;
    return 0;
}

/* Per-event visitor used by replay, tail and copy: gets the raw kv too. */
typedef int (*visit_fn)(void *ctx, const struct journal_event *ev, const struct etcd_kv *kv);

/* One page fetch [from, stop), run inline or on a prefetch thread. */
struct page_fetch {
    struct etcd *c;
    const char *prefix;
    uint64_t from, stop;
    size_t page;
    struct etcd_range_resp rr;
    int r;
    struct tern_err err;
    pthread_t th;
    bool running;
};

static void *page_fetch_main(void *arg)
{
    struct page_fetch *f = arg;
    char *start = ev_key(f->prefix, f->from), *end = ev_key(f->prefix, f->stop);
    f->r = etcd_range(f->c,
                      &(struct etcd_range_req){.keys = {.key = start, .range_end = end},
                                               .limit = (int64_t)f->page},
                      &f->rr, &f->err);
    free(start);
    free(end);
    return NULL;
}

static void page_fetch_start(struct page_fetch *f, struct etcd *c, const char *prefix,
                             uint64_t from, uint64_t upto, size_t page, bool async)
{
    memset(f, 0, sizeof *f);
    f->c = c;
    f->prefix = prefix;
    f->from = from;
    f->stop = from + page;
    if (upto && f->stop > upto + 1)
        f->stop = upto + 1;
    f->page = page;
    f->running = async && pthread_create(&f->th, NULL, page_fetch_main, f) == 0;
    if (!f->running)
        page_fetch_main(f);
}

static void page_fetch_wait(struct page_fetch *f)
{
    if (f->running)
        pthread_join(f->th, NULL);
    f->running = false;
}

/* Reads events from seq `from` (inclusive) up to `upto` (0 = end) in pages,
 * calling visit for each. *ret_rev: header revision of the last page read.
 * *ret_next: the seq after the last visited event.
 *
 * Pages are key ranges [ev/n, ev/n+page): seq keys are fixed width, so a
 * page holds at most `page` events, and etcd never walks (and counts) the
 * rest of the journal for each page, as it does for a limit-only range. A
 * short page is the end. While one page is decoded, the next one (if the
 * current page was full) is already being fetched on a helper thread, so
 * etcd's work and ours overlap. */
static int scan(struct etcd *c, const char *prefix, size_t page, uint64_t from, uint64_t upto,
                visit_fn visit, void *ctx, int64_t *ret_rev, uint64_t *ret_next,
                struct tern_err *err)
{
    uint64_t next = from;
    int r = 0;
    struct page_fetch *cur = xcalloc(1, sizeof *cur), *ahead = xcalloc(1, sizeof *ahead);
    page_fetch_start(cur, c, prefix, next, upto, page, false);
    for (;;) {
        page_fetch_wait(cur);
        if (cur->r) {
            r = cur->r;
            if (err)
                *err = cur->err;
            break;
        }
        struct etcd_range_resp *rr = &cur->rr;
        bool full =
            rr->nkvs == page && cur->stop == cur->from + page && !(upto && cur->stop > upto);
        if (full)
            page_fetch_start(ahead, c, prefix, cur->stop, upto, page, true);
        if (ret_rev)
            *ret_rev = rr->header.revision;
        for (size_t i = 0; i < rr->nkvs && !r; i++) {
            struct journal_event ev;
            r = decode_kv(c, prefix, &rr->kvs[i], &ev, err);
            if (r)
                break;
            if (ev.seq != next) {
                r = ev.seq > next && next == from
                        ? err_set(err, TERN_ECOMPACTED,
                                  "journal: seq %llu no longer stored (oldest is %llu)",
                                  (unsigned long long)next, (unsigned long long)ev.seq)
                        : err_set(err, TERN_EINVALID, "journal: gap: seq %llu after %llu",
                                  (unsigned long long)ev.seq, (unsigned long long)next - 1);
                journal_event_done(&ev);
                break;
            }
            r = visit ? visit(ctx, &ev, &rr->kvs[i]) : 0;
            next = ev.seq + 1;
            journal_event_done(&ev);
        }
        etcd_range_resp_done(rr);
        if (r || !full || next != cur->stop) {
            if (full) {
                page_fetch_wait(ahead);
                etcd_range_resp_done(&ahead->rr);
            }
            break;
        }
        struct page_fetch *t = cur;
        cur = ahead;
        ahead = t;
    }
    free(cur);
    free(ahead);
    if (!r && ret_next)
        *ret_next = next;
    return r;
}

struct replay_ctx {
    journal_event_fn fn;
    void *ctx;
    struct journal_summary sum;
    bool first;
};

static int replay_visit(void *ctx, const struct journal_event *ev, const struct etcd_kv *kv)
{
    (void)kv;
    struct replay_ctx *rc = ctx;
    /* a replay that starts mid-journal at something other than a snapshot
     * folds from that event on (counters then cover only the tail) */
    if (rc->first && ev->type != JOURNAL_EV_SNAPSHOT)
        rc->sum.last_seq = ev->seq - 1;
    rc->first = false;
    if (journal_summary_apply(&rc->sum, ev))
        return TERN_EINVALID;
    return rc->fn ? rc->fn(rc->ctx, ev) : 0;
}

/* The first seq to read for JOURNAL_FROM_SNAPSHOT. */
static int snapshot_start(struct journal *j, uint64_t *ret, struct tern_err *err)
{
    struct journal_summary s;
    int64_t rev;
    bool present;
    int r = read_sum(j->c, j->sum_key, &s, &rev, &present, err);
    if (r)
        return r;
    *ret = s.snapshot_seq ? s.snapshot_seq : 1;
    journal_summary_done(&s);
    return 0;
}

int journal_replay(struct journal *j, uint64_t from_seq, journal_event_fn fn, void *ctx,
                   struct journal_summary *ret_sum, struct tern_err *err)
{
    uint64_t from = from_seq;
    int r = 0;
    if (from == JOURNAL_FROM_SNAPSHOT) {
        r = snapshot_start(j, &from, err);
        if (r)
            return r;
    }
    struct replay_ctx rc = {.fn = fn, .ctx = ctx, .first = true};
    journal_summary_init(&rc.sum);
    r = scan(j->c, j->prefix, j->page, from, 0, replay_visit, &rc, NULL, NULL, err);
    if (r == 0 && ret_sum) {
        *ret_sum = rc.sum;
        journal_summary_init(&rc.sum);
    }
    journal_summary_done(&rc.sum);
    return r;
}

/* ---- tail --------------------------------------------------------------- */

struct tail_ctx {
    struct journal *j;
    journal_event_fn fn;
    void *ctx;
    uint64_t next; /* the next seq to deliver */
    int user_rc;   /* fn's non-zero return */
};

#define TAIL_RELIST 0x7e11157 /* internal: a gap in the watch, relist */

static int tail_visit(void *ctx, const struct journal_event *ev, const struct etcd_kv *kv)
{
    (void)kv;
    struct tail_ctx *t = ctx;
    int r = t->fn(t->ctx, ev);
    t->next = ev->seq + 1;
    if (r)
        t->user_rc = r;
    return r;
}

static int tail_batch(void *ctx, const struct etcd_watch_batch *b)
{
    struct tail_ctx *t = ctx;
    for (size_t i = 0; i < b->nevents; i++) {
        const struct etcd_event *we = &b->events[i];
        if (we->type != ETCD_EVENT_PUT)
            continue; /* deletions come from compaction or journal_delete */
        uint64_t seq = key_seq(t->j->prefix, we->kv.key);
        if (seq == 0 || seq < t->next)
            continue; /* chunk keys, already delivered */
        if (seq > t->next)
            return TAIL_RELIST;
        struct journal_event ev;
        struct tern_err e = {0};
        int r = decode_kv(t->j->c, t->j->prefix, &we->kv, &ev, &e);
        if (r)
            return r;
        r = tail_visit(t, &ev, &we->kv);
        journal_event_done(&ev);
        if (r)
            return r;
    }
    return 0;
}

int journal_tail(struct journal *j, uint64_t from_seq, journal_event_fn fn, void *ctx,
                 atomic_bool *cancel, struct tern_err *err)
{
    struct tail_ctx t = {.j = j, .fn = fn, .ctx = ctx, .next = from_seq};
    int r = 0;
    if (t.next == JOURNAL_FROM_SNAPSHOT) {
        r = snapshot_start(j, &t.next, err);
        if (r)
            return r;
    }
    char *evp = xasprintf("%sev/", j->prefix);
    long fail_since = 0;
    for (;;) {
        if (cancel && atomic_load(cancel)) {
            r = err_set(err, -ECANCELED, "journal tail: cancelled");
            break;
        }
        /* list what is stored from next on, then watch from after the list */
        int64_t rev = 0;
        uint64_t nx = t.next;
        r = scan(j->c, j->prefix, j->page, t.next, 0, tail_visit, &t, &rev, &nx, err);
        if (t.user_rc) {
            r = t.user_rc;
            break;
        }
        if (r) {
            /* etcd unreachable while listing: retry within the budget */
            if (transient(r) && (fail_since == 0 || now_ms() - fail_since < j->retry_ms)) {
                if (fail_since == 0)
                    fail_since = now_ms();
                sleep_ms(100);
                continue;
            }
            break;
        }
        fail_since = 0;
        int64_t crev = 0;
        r = etcd_watch(j->c,
                       &(struct etcd_watch_req){.keys = {.key = evp, .prefix = true},
                                                .start_revision = rev + 1,
                                                .give_up_ms = j->retry_ms},
                       tail_batch, &t, cancel, &crev, err);
        if (t.user_rc) {
            r = t.user_rc;
            break;
        }
        if (r == TERN_ECOMPACTED || r == TAIL_RELIST)
            continue; /* relist from t.next */
        break;
    }
    free(evp);
    return r;
}

/* ---- compaction --------------------------------------------------------- */

int journal_compact(struct journal *j, const cJSON *state, bool drop_old, uint64_t *ret_seq,
                    struct tern_err *err)
{
    cJSON *d = cJSON_CreateObject();
    json_add_int64(d, "upto", (int64_t)j->sum.last_seq);
    cJSON_AddItemToObject(d, "summary", journal_summary_to_json(&j->sum));
    cJSON_AddItemToObject(d, "state", state ? json_dup(state) : cJSON_CreateObject());
    uint64_t seq = 0;
    int r = journal_append(
        j,
        &(struct journal_append_req){.type = JOURNAL_EV_SNAPSHOT, .turn = j->sum.turn, .data = d},
        &seq, err);
    cJSON_Delete(d);
    if (r)
        return r;
    if (drop_old) {
        /* events and chunks before the snapshot; idempotent, so retried */
        const char *kinds[] = {"ev/", "ch/"};
        for (int i = 0; i < 2 && !r; i++) {
            char *from = xasprintf("%s%s", j->prefix, kinds[i]);
            char *to = xasprintf("%s%s%016llx", j->prefix, kinds[i], (unsigned long long)seq);
            struct etcd_delete_resp dr;
            long deadline = now_ms() + j->retry_ms;
            while ((r = etcd_delete(
                        j->c, &(struct etcd_delete_req){.keys = {.key = from, .range_end = to}},
                        &dr, err)) &&
                   (transient(r) || r == TERN_EUNKNOWN) && now_ms() < deadline)
                sleep_ms(100);
            etcd_delete_resp_done(&dr);
            free(from);
            free(to);
        }
    }
    if (!r && ret_seq)
        *ret_seq = seq;
    return r;
}

/* ---- fork copy ---------------------------------------------------------- */

struct copy_batch {
    struct etcd *c;
    const char *src_prefix;
    const char *dst_prefix;
    const char *dst_sum_key;
    int64_t seen;               /* dst sum revision */
    struct journal_summary sum; /* dst summary after the batch */
    /* pending head puts */
    char **keys;
    char **vals;
    size_t *lens;
    size_t n;
    size_t bytes;
    uint64_t first_seq;
    uint64_t copied;
    struct tern_err *err;
};

#define COPY_BATCH_EVENTS 100
#define COPY_BATCH_BYTES  (768u << 10)

static void batch_clear(struct copy_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->keys[i]);
        free(b->vals[i]);
    }
    b->n = 0;
    b->bytes = 0;
}

/* Commits the pending heads and the summary in one fenced txn. */
static int batch_flush(struct copy_batch *b)
{
    if (b->n == 0)
        return 0;
    struct etcd_op *ops = xcalloc(b->n + 1, sizeof *ops);
    for (size_t i = 0; i < b->n; i++) {
        ops[i].type = ETCD_OP_PUT;
        ops[i].put =
            (struct etcd_put_req){.key = b->keys[i], .value = b->vals[i], .value_len = b->lens[i]};
    }
    cJSON *sj = journal_summary_to_json(&b->sum);
    char *st = json_print(sj);
    cJSON_Delete(sj);
    ops[b->n].type = ETCD_OP_PUT;
    ops[b->n].put =
        (struct etcd_put_req){.key = b->dst_sum_key, .value = st, .value_len = strlen(st)};
    struct etcd_compare cmps[] = {
        {.keys = {.key = b->keys[0]}, .target = ETCD_CMP_CREATE, .number = 0},
        {.keys = {.key = b->dst_sum_key}, .target = ETCD_CMP_MOD, .number = b->seen},
    };
    struct etcd_txn_resp tr;
    int r = etcd_txn(b->c, &(struct etcd_txn_req){cmps, 2, ops, b->n + 1, NULL, 0}, &tr, b->err);
    if (r == 0 && !tr.succeeded)
        r = err_set(b->err, TERN_ECONFLICT, "journal copy: destination changed concurrently");
    if (r == 0) {
        b->seen = tr.header.revision;
        b->copied += b->n;
    }
    etcd_txn_resp_done(&tr);
    free(ops);
    free(st);
    batch_clear(b);
    return r;
}

static int copy_visit(void *ctx, const struct journal_event *ev, const struct etcd_kv *kv)
{
    struct copy_batch *b = ctx;
    int r;
    if (b->n >= COPY_BATCH_EVENTS || b->bytes + kv->value_len > COPY_BATCH_BYTES) {
        r = batch_flush(b);
        if (r)
            return r;
    }
    cJSON *chunks = NULL;
    struct journal_event tmp;
    /* chunks of this event: copied (fenced) before its head */
    if (journal_event_decode(kv->value, kv->value_len, &tmp, &chunks, NULL) == 0) {
        journal_event_done(&tmp);
        if (chunks) {
            r = batch_flush(b);
            if (r) {
                cJSON_Delete(chunks);
                return r;
            }
            const char *id = json_get(chunks, "id")->valuestring;
            char *pfx =
                xasprintf("%sch/%016llx/%s/", b->src_prefix, (unsigned long long)ev->seq, id);
            struct etcd_range_resp rr;
            r = etcd_range(b->c, &(struct etcd_range_req){.keys = {.key = pfx, .prefix = true}},
                           &rr, b->err);
            for (size_t i = 0; !r && i < rr.nkvs; i++) {
                char *dk = xasprintf("%s%s", b->dst_prefix, rr.kvs[i].key + strlen(b->src_prefix));
                char *evk = ev_key(b->dst_prefix, ev->seq);
                struct etcd_compare cmps[] = {
                    {.keys = {.key = evk}, .target = ETCD_CMP_CREATE, .number = 0},
                    {.keys = {.key = b->dst_sum_key}, .target = ETCD_CMP_MOD, .number = b->seen},
                };
                struct etcd_op put = {
                    .type = ETCD_OP_PUT,
                    .put = {.key = dk, .value = rr.kvs[i].value, .value_len = rr.kvs[i].value_len}};
                struct etcd_txn_resp tr;
                r = etcd_txn(b->c, &(struct etcd_txn_req){cmps, 2, &put, 1, NULL, 0}, &tr, b->err);
                if (r == 0 && !tr.succeeded)
                    r = err_set(b->err, TERN_ECONFLICT, "journal copy: destination changed");
                etcd_txn_resp_done(&tr);
                free(dk);
                free(evk);
            }
            etcd_range_resp_done(&rr);
            free(pfx);
            cJSON_Delete(chunks);
            if (r)
                return r;
        }
    }
    if (journal_summary_apply(&b->sum, ev))
        return err_set(b->err, TERN_EINVALID, "journal copy: seq %llu does not follow %llu",
                       (unsigned long long)ev->seq, (unsigned long long)b->sum.last_seq);
    b->keys = xreallocarray(b->keys, b->n + 1, sizeof *b->keys);
    b->vals = xreallocarray(b->vals, b->n + 1, sizeof *b->vals);
    b->lens = xreallocarray(b->lens, b->n + 1, sizeof *b->lens);
    b->keys[b->n] = ev_key(b->dst_prefix, ev->seq);
    b->vals[b->n] = xmemdup(kv->value, kv->value_len + 1);
    b->lens[b->n] = kv->value_len;
    b->n++;
    b->bytes += kv->value_len;
    return 0;
}

/* The raw value of one event of a journal (NULL if absent). */
static int get_raw(struct etcd *c, const char *prefix, uint64_t seq, struct etcd_kv **ret,
                   struct tern_err *err)
{
    char *k = ev_key(prefix, seq);
    int r = etcd_get(c, k, ret, NULL, err);
    free(k);
    if (r == TERN_ENOTFOUND) {
        *ret = NULL;
        r = 0;
    }
    return r;
}

int journal_copy_until(struct etcd *c, const char *src_uid, const char *dst_uid, uint64_t upto_seq,
                       uint64_t *ret_copied, struct tern_err *err)
{
    if (!valid_uid(src_uid) || !valid_uid(dst_uid) || strcmp(src_uid, dst_uid) == 0 ||
        upto_seq == 0)
        return err_set(err, TERN_EINVALID, "journal copy: bad uids or seq");
    struct copy_batch b = {.c = c, .err = err};
    char *sp = journal_prefix(src_uid), *dp = journal_prefix(dst_uid);
    char *dsum = xasprintf("%ssum", dp);
    b.src_prefix = sp;
    b.dst_prefix = dp;
    b.dst_sum_key = dsum;
    struct etcd_kv *a = NULL, *s = NULL;
    bool present = false;
    uint64_t from = 0;
    int r = read_sum(c, dsum, &b.sum, &b.seen, &present, err);
    if (r)
        goto out;
    uint64_t have = b.sum.last_seq;
    if (have > upto_seq) {
        r = err_set(err, TERN_ECONFLICT, "journal copy: destination already has seq %llu > %llu",
                    (unsigned long long)have, (unsigned long long)upto_seq);
        goto out;
    }
    if (have > 0) {
        /* resuming: the last copied event must be the source's */
        r = get_raw(c, dp, have, &a, err);
        if (!r)
            r = get_raw(c, sp, have, &s, err);
        if (r)
            goto out;
        if (!a || !s || a->value_len != s->value_len || memcmp(a->value, s->value, a->value_len)) {
            r = err_set(err, TERN_ECONFLICT,
                        "journal copy: destination seq %llu differs from the source",
                        (unsigned long long)have);
            goto out;
        }
        from = have + 1;
    } else {
        /* fresh: from seq 1, or from the source's oldest kept snapshot */
        struct etcd_range_resp rr;
        char *start = ev_key(sp, 1), *end = xasprintf("%sev0", sp);
        r = etcd_range(
            c, &(struct etcd_range_req){.keys = {.key = start, .range_end = end}, .limit = 1}, &rr,
            err);
        free(start);
        free(end);
        if (r)
            goto out;
        uint64_t oldest = rr.nkvs ? key_seq(sp, rr.kvs[0].key) : 1;
        bool snap = false;
        if (rr.nkvs) {
            struct journal_event ev;
            cJSON *ch = NULL;
            if (journal_event_decode(rr.kvs[0].value, rr.kvs[0].value_len, &ev, &ch, NULL) == 0) {
                snap = ev.type == JOURNAL_EV_SNAPSHOT;
                journal_event_done(&ev);
                cJSON_Delete(ch);
            }
        }
        etcd_range_resp_done(&rr);
        if (oldest > 1 && (!snap || oldest > upto_seq)) {
            r = err_set(err, TERN_ECOMPACTED,
                        "journal copy: source events before seq %llu were compacted",
                        (unsigned long long)oldest);
            goto out;
        }
        from = oldest;
    }
    if (from <= upto_seq) {
        r = scan(c, sp, 1000, from, upto_seq, copy_visit, &b, NULL, NULL, err);
        if (!r)
            r = batch_flush(&b);
        if (!r && b.sum.last_seq != upto_seq)
            r = err_set(err, TERN_ENOTFOUND, "journal copy: source ends at seq %llu < %llu",
                        (unsigned long long)b.sum.last_seq, (unsigned long long)upto_seq);
    }
    if (!r && ret_copied)
        *ret_copied = b.copied;
out:
    batch_clear(&b);
    free(b.keys);
    free(b.vals);
    free(b.lens);
    journal_summary_done(&b.sum);
    etcd_kv_free(a);
    etcd_kv_free(s);
    free(sp);
    free(dp);
    free(dsum);
    return r;
}

int journal_delete(struct etcd *c, const char *uid, struct tern_err *err)
{
    char *p = journal_prefix(uid);
    if (!p)
        return err_set(err, TERN_EINVALID, "journal delete: bad uid");
    struct etcd_delete_resp dr;
    int r = etcd_delete(c, &(struct etcd_delete_req){.keys = {.key = p, .prefix = true}}, &dr, err);
    etcd_delete_resp_done(&dr);
    free(p);
    return r;
}

/* ---- the turn lock ------------------------------------------------------ */

struct journal_lock {
    struct etcd *c;
    int64_t lease;
    struct etcd_keeper *keeper;
};

int journal_lock_acquire(struct etcd *c, const char *uid, const char *owner, int64_t ttl_s,
                         struct journal_lock **ret, struct tern_err *err)
{
    char *p = journal_prefix(uid);
    if (!p || !owner || !*owner || strlen(owner) > 253 || ttl_s <= 0) {
        free(p);
        return err_set(err, TERN_EINVALID, "journal lock: bad uid, owner or ttl");
    }
    char *key = xasprintf("%slock", p);
    free(p);
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "owner", owner);
    char *t = now_time();
    json_add_string(o, "acquiredAt", t);
    free(t);
    char *val = json_print(o);
    cJSON_Delete(o);
    int64_t lease = 0;
    struct journal_lock *l = NULL;
    struct etcd_txn_resp tr = {0};
    int r = etcd_lease_grant(c, ttl_s, 0, &lease, NULL, err);
    if (r)
        goto out;
    struct etcd_compare cmp = {.keys = {.key = key}, .target = ETCD_CMP_CREATE, .number = 0};
    struct etcd_op put = {
        .type = ETCD_OP_PUT,
        .put = {.key = key, .value = val, .value_len = strlen(val), .lease = lease}};
    struct etcd_op get = {.type = ETCD_OP_RANGE, .range = {.keys = {.key = key}}};
    r = etcd_txn(c, &(struct etcd_txn_req){&cmp, 1, &put, 1, &get, 1}, &tr, err);
    if (r == TERN_EUNKNOWN) {
        /* did our put land? the lock then carries our lease */
        struct etcd_kv *kv = NULL;
        r = etcd_get(c, key, &kv, NULL, err);
        if (r == 0 && kv->lease != lease)
            r = err_set(err, TERN_ECONFLICT, "journal lock: held by %s", kv->value);
        etcd_kv_free(kv);
        if (r == TERN_ENOTFOUND)
            r = err_set(err, TERN_EUNKNOWN, "journal lock: outcome unknown");
    } else if (r == 0 && !tr.succeeded) {
        const char *holder = "another owner";
        cJSON *h = NULL;
        if (tr.nresponses == 1 && tr.responses[0].range.nkvs == 1 &&
            json_parse(tr.responses[0].range.kvs[0].value, tr.responses[0].range.kvs[0].value_len,
                       &h, NULL) == 0 &&
            cJSON_IsString(json_get(h, "owner")))
            holder = json_get(h, "owner")->valuestring;
        r = err_set(err, TERN_ECONFLICT, "journal lock: held by %s", holder);
        cJSON_Delete(h);
    }
    if (r)
        goto out;
    l = xcalloc(1, sizeof *l);
    l->c = c;
    l->lease = lease;
    r = etcd_keeper_start(c, lease, ttl_s, &l->keeper, err);
    if (r)
        goto out;
    *ret = l;
    l = NULL;
    lease = 0;
out:
    if (lease)
        etcd_lease_revoke(c, lease, NULL);
    free(l);
    etcd_txn_resp_done(&tr);
    free(key);
    free(val);
    return r;
}

bool journal_lock_lost(const struct journal_lock *l)
{
    return etcd_keeper_lost(l->keeper);
}

int64_t journal_lock_lease(const struct journal_lock *l)
{
    return l->lease;
}

int journal_lock_release(struct journal_lock *l, struct tern_err *err)
{
    if (!l)
        return 0;
    etcd_keeper_stop(l->keeper);
    int r = etcd_lease_revoke(l->c, l->lease, err);
    if (r == TERN_ENOTFOUND)
        r = 0;
    free(l);
    return r;
}
