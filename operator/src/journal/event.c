/* event.c - the journal's event codec (pure): the event types and their
 * names, decoding one stored event (schema v1, and the pre-release v0
 * converted to v1 fields), encoding an event as v1, deep copies, and
 * journal_truncate_data (the marker that replaces oversize data). See
 * journal.h; journal_internal.h for what is shared with the other files.
 */
#include "journal_internal.h"

#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <openssl/evp.h>
#include <string.h>
#include <time.h>

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
    [JOURNAL_EV_MEMORY_DECIDED] = "memory_decided",
    [JOURNAL_EV_MEMORY_APPLIED] = "memory_applied",
    [JOURNAL_EV_ARTIFACTS_PERSISTED] = "artifacts_persisted",
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
bool journal__valid_type_name(const char *s)
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

void journal__sha256_hex(const void *p, size_t n, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL);
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hx[md[i] >> 4];
        out[2 * i + 1] = hx[md[i] & 15];
    }
    out[64] = '\0';
}

char *journal__now_time(void)
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
    if (!journal__valid_type_name(kind))
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
    if (!journal__valid_type_name(type)) {
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
        const char *h = NULL;
        if (json_get_string(chunks, "event.chunks", "sha256", JSON_OPTIONAL, &h, err) ||
            (h && strspn(h, "0123456789abcdef") != 64) || (h && strlen(h) != 64)) {
            r = err_set(err, TERN_EPARSE, "event.chunks.sha256: want 64 lowercase hex digits");
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
cJSON *journal__event_json(const struct journal_event *ev, bool with_data)
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
    cJSON *o = journal__event_json(ev, true);
    char *s = json_print(o);
    cJSON_Delete(o);
    return s;
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
