/* replay.c - fold journal events into the runner's agent state (pure). */
#include "runner/replay.h"

#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void replay_state_init(struct replay_state *s)
{
    memset(s, 0, sizeof *s);
    chat_conv_init(&s->conv);
    s->max_message_index = -1;
}

static void calls_clear(struct replay_state *s)
{
    for (size_t i = 0; i < s->ncalls; i++) {
        struct replay_call *c = &s->calls[i];
        free(c->id);
        free(c->name);
        free(c->arguments);
        free(c->status);
        free(c->problem);
        free(c->approval_id);
        free(c->decision_reason);
    }
    free(s->calls);
    s->calls = NULL;
    s->ncalls = 0;
}

static void deferred_clear(struct replay_state *s)
{
    for (size_t i = 0; i < s->ndeferred; i++)
        free(s->deferred[i]);
    free(s->deferred);
    s->deferred = NULL;
    s->ndeferred = 0;
}

void replay_state_done(struct replay_state *s)
{
    if (!s)
        return;
    chat_conv_done(&s->conv);
    calls_clear(s);
    deferred_clear(s);
    free(s->outcome);
    free(s->final_text);
    free(s->limit_name);
    free(s->last_problem);
    free(s->result_problem);
    for (size_t i = 0; i < s->ndecided; i++) {
        free(s->decided_ids[i]);
        free(s->decided_reasons[i]);
    }
    free(s->decided_ids);
    free(s->decided);
    free(s->decided_reasons);
    memset(s, 0, sizeof *s);
}

void replay_approval_id(const char *uid, const char *call_id, char out[20])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char *in = xasprintf("%s/%s", uid ? uid : "", call_id ? call_id : "");
    EVP_Digest(in, strlen(in), md, &mdlen, EVP_sha256(), NULL);
    free(in);
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "ap-", 3);
    for (int i = 0; i < 8; i++) {
        out[3 + 2 * i] = hex[md[i] >> 4];
        out[4 + 2 * i] = hex[md[i] & 15];
    }
    out[19] = 0;
}

static const char *dstr(const cJSON *data, const char *key)
{
    const cJSON *it = json_get(data, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

static int64_t dint(const cJSON *data, const char *key, int64_t dflt)
{
    int64_t v;
    return json_item_int64(json_get(data, key), &v) == 0 ? v : dflt;
}

static bool all_answered(const struct replay_state *s)
{
    for (size_t i = 0; i < s->ncalls; i++)
        if (!s->calls[i].answered)
            return false;
    return true;
}

static void flush_deferred(struct replay_state *s)
{
    for (size_t i = 0; i < s->ndeferred; i++)
        chat_conv_add(&s->conv, CHAT_USER, s->deferred[i]);
    deferred_clear(s);
}

static struct replay_call *find_call(struct replay_state *s, const char *id)
{
    for (size_t i = 0; id && i < s->ncalls; i++)
        if (strcmp(s->calls[i].id, id) == 0)
            return &s->calls[i];
    return NULL;
}

static enum replay_decision parse_decision(const cJSON *data)
{
    const cJSON *ap = json_get(data, "approved");
    if (cJSON_IsBool(ap))
        return cJSON_IsTrue(ap) ? REPLAY_APPROVED : REPLAY_DENIED;
    const char *d = dstr(data, "decision");
    if (!d)
        return REPLAY_UNDECIDED;
    if (!strcmp(d, "approve") || !strcmp(d, "approved") || !strcmp(d, "allow") ||
        !strcmp(d, "granted"))
        return REPLAY_APPROVED;
    if (!strcmp(d, "deny") || !strcmp(d, "denied") || !strcmp(d, "reject") ||
        !strcmp(d, "rejected") || !strcmp(d, "timeout"))
        return REPLAY_DENIED;
    return REPLAY_UNDECIDED;
}

static enum replay_decision decision_for(const struct replay_state *s, const char *id,
                                         const char **ret_reason)
{
    /* the first decision for an id counts; later ones are ignored */
    for (size_t i = 0; id && i < s->ndecided; i++)
        if (strcmp(s->decided_ids[i], id) == 0) {
            if (ret_reason)
                *ret_reason = s->decided_reasons[i];
            return s->decided[i];
        }
    return REPLAY_UNDECIDED;
}

/* A copy of v bounded to max bytes on a UTF-8 boundary, or NULL. */
static char *bounded(const char *v, size_t max)
{
    if (!v || !*v)
        return NULL;
    size_t n = strlen(v);
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)v[n] & 0xC0) == 0x80)
            n--;
    }
    return xstrndup(v, n);
}

static void apply_model_response(struct replay_state *s, const cJSON *d)
{
    const char *kind = dstr(d, "kind");
    const char *content = dstr(d, "content");
    const char *refusal = dstr(d, "refusal");
    const cJSON *usage = json_get(d, "usage");
    const cJSON *calls = json_get(d, "toolCalls");

    s->model_turns++;
    s->model_steps++;
    s->request_open = false;
    s->prompt_tokens += dint(usage, "prompt_tokens", 0);
    s->completion_tokens += dint(usage, "completion_tokens", 0);
    s->cost_micro_usd += dint(usage, "cost_micro_usd", 0);

    if (!kind || (strcmp(kind, "ok") != 0 && strcmp(kind, "refusal") != 0)) {
        /* malformed / empty: nothing enters the conversation */
        s->consecutive_bad++;
        free(s->last_problem);
        s->last_problem = bounded(dstr(d, "problem") ? dstr(d, "problem") : kind,
                                  TERN_RUNNER_MAX_DETAIL);
        return;
    }
    s->consecutive_bad = 0;
    calls_clear(s);
    free(s->final_text);
    s->final_text = NULL;
    size_t n = cJSON_IsArray(calls) ? (size_t)cJSON_GetArraySize(calls) : 0;
    if (strcmp(kind, "refusal") == 0) {
        n = 0;
        content = refusal ? refusal : content;
    }
    struct chat_tool_call *tc = n ? xcalloc(n, sizeof *tc) : NULL;
    s->calls = n ? xcalloc(n, sizeof *s->calls) : NULL;
    size_t i = 0;
    for (const cJSON *c = n ? calls->child : NULL; c && i < n; c = c->next, i++) {
        struct replay_call *rc = &s->calls[i];
        const char *id = dstr(c, "id"), *name = dstr(c, "name"), *args = dstr(c, "arguments");
        const char *st = dstr(c, "status"), *pb = dstr(c, "problem");
        rc->id = xstrdup(id ? id : "");
        rc->name = xstrdup(name ? name : "");
        rc->arguments = xstrdup(args ? args : "");
        rc->status = xstrdup(st ? st : "ok");
        rc->problem = pb ? xstrdup(pb) : NULL;
        tc[i] = (struct chat_tool_call){rc->id, rc->name, rc->arguments};
    }
    s->ncalls = i;
    if (i == 0 && !content)
        content = "";
    chat_conv_add_assistant(&s->conv, content, tc, i);
    free(tc);
    s->last_final = i == 0;
    s->last_refusal = strcmp(kind, "refusal") == 0;
    if (s->last_final)
        s->final_text = xstrdup(content);
}

int replay_apply(struct replay_state *s, const struct replay_event *ev, struct tern_err *err)
{
    const cJSON *d = ev->data;
    if (ev->seq != s->last_seq + 1 && s->last_seq != 0)
        return err_set(err, TERN_EINVALID, "event seq %llu after %llu",
                       (unsigned long long)ev->seq, (unsigned long long)s->last_seq);
    s->last_seq = ev->seq;
    if (ev->turn > s->turn) {
        s->turn = ev->turn;
        s->turn_started = false;
        s->turn_finished = false;
        s->limit_reported = false;
        free(s->limit_name);
        s->limit_name = NULL;
        s->limit_used = s->limit_max = 0;
        free(s->outcome);
        s->outcome = NULL;
    }
    const char *t = ev->type ? ev->type : "";
    int64_t when;
    if (!s->first_time_ms && ev->time && replay_parse_time(ev->time, &when) == 0)
        s->first_time_ms = when;

    if (strcmp(t, "user_message") == 0) {
        const char *text = dstr(d, "text");
        if (!text)
            text = dstr(d, "content");
        if (!text)
            text = dstr(d, "message");
        s->user_messages++;
        const char *src = dstr(d, "source");
        if (src && strcmp(src, "objective") == 0)
            s->objective_journaled = true;
        int64_t idx = dint(d, "index", -1);
        if (idx > s->max_message_index)
            s->max_message_index = idx;
        if (text) {
            if (all_answered(s)) {
                chat_conv_add(&s->conv, CHAT_USER, text);
            } else {
                s->deferred = xreallocarray(s->deferred, s->ndeferred + 1, sizeof *s->deferred);
                s->deferred[s->ndeferred++] = xstrdup(text);
            }
            s->last_final = false;
            s->last_refusal = false;
        }
    } else if (strcmp(t, "turn_started") == 0) {
        if (ev->turn == s->turn) {
            s->turn_started = true;
            /* "malformed three times in a row" counts within a turn: a new
             * turn (a message, a retry) asks the model afresh */
            s->consecutive_bad = 0;
        }
    } else if (strcmp(t, "result_invalid") == 0) {
        s->result_failures++;
        free(s->result_problem);
        s->result_problem = bounded(dstr(d, "problem"), TERN_JOURNAL_MAX_REASON);
        /* what the model was told is a user message of the conversation */
        const char *text = dstr(d, "message");
        if (text) {
            if (all_answered(s)) {
                chat_conv_add(&s->conv, CHAT_USER, text);
            } else {
                s->deferred = xreallocarray(s->deferred, s->ndeferred + 1, sizeof *s->deferred);
                s->deferred[s->ndeferred++] = xstrdup(text);
            }
        }
        s->last_final = false;
        s->last_refusal = false;
    } else if (strcmp(t, "model_request") == 0) {
        s->request_open = true;
    } else if (strcmp(t, "model_response") == 0) {
        apply_model_response(s, d);
    } else if (strcmp(t, "tool_call") == 0) {
        struct replay_call *c = find_call(s, dstr(d, "callId"));
        if (!c)
            return err_set(err, TERN_EINVALID, "seq %llu: tool_call for unknown call %s",
                           (unsigned long long)ev->seq, dstr(d, "callId") ? dstr(d, "callId") : "?");
        if (!c->started)
            s->tool_calls++;
        c->started = true;
    } else if (strcmp(t, "tool_result") == 0) {
        const char *id = dstr(d, "callId");
        struct replay_call *c = find_call(s, id);
        if (!c)
            return err_set(err, TERN_EINVALID, "seq %llu: tool_result for unknown call %s",
                           (unsigned long long)ev->seq, id ? id : "?");
        if (!c->answered) {
            const char *out = dstr(d, "output");
            chat_conv_add_tool(&s->conv, c->id, out ? out : "");
            c->answered = true;
            if (all_answered(s))
                flush_deferred(s);
        }
    } else if (strcmp(t, "approval_requested") == 0) {
        struct replay_call *c = find_call(s, dstr(d, "callId"));
        const char *id = dstr(d, "id");
        if (c && id) {
            free(c->approval_id);
            c->approval_id = xstrdup(id);
            const char *why = NULL;
            c->decision = decision_for(s, id, &why);
            free(c->decision_reason);
            c->decision_reason = why ? xstrdup(why) : NULL;
        }
    } else if (strcmp(t, "approval_decided") == 0) {
        const char *id = dstr(d, "id");
        enum replay_decision dec = parse_decision(d);
        if (id && dec != REPLAY_UNDECIDED && decision_for(s, id, NULL) == REPLAY_UNDECIDED) {
            char *why = bounded(dstr(d, "reason"), TERN_APPROVAL_MAX_REASON);
            s->decided_ids = xreallocarray(s->decided_ids, s->ndecided + 1, sizeof(char *));
            s->decided = xreallocarray(s->decided, s->ndecided + 1, sizeof *s->decided);
            s->decided_reasons =
                xreallocarray(s->decided_reasons, s->ndecided + 1, sizeof(char *));
            s->decided_ids[s->ndecided] = xstrdup(id);
            s->decided_reasons[s->ndecided] = why;
            s->decided[s->ndecided++] = dec;
            for (size_t i = 0; i < s->ncalls; i++)
                if (s->calls[i].approval_id && strcmp(s->calls[i].approval_id, id) == 0 &&
                    s->calls[i].decision == REPLAY_UNDECIDED) {
                    s->calls[i].decision = dec;
                    free(s->calls[i].decision_reason);
                    s->calls[i].decision_reason = why ? xstrdup(why) : NULL;
                }
        }
    } else if (strcmp(t, "limit_reached") == 0) {
        if (ev->turn == s->turn) {
            s->limit_reported = true;
            free(s->limit_name);
            s->limit_name = bounded(dstr(d, "limit"), 64);
            s->limit_used = dint(d, "used", 0);
            s->limit_max = dint(d, "max", 0);
        }
    } else if (strcmp(t, "turn_finished") == 0) {
        if (ev->turn == s->turn) {
            s->turn_finished = true;
            free(s->outcome);
            const char *o = dstr(d, "outcome");
            s->outcome = xstrdup(o ? o : "");
            /* maxResultAttempts counts the invalid answers since the
             * last accepted one (like the other limits, over turns) */
            if (o && strcmp(o, "completed") == 0) {
                s->result_failures = 0;
                free(s->result_problem);
                s->result_problem = NULL;
            }
        }
    }
    return 0;
}

const struct replay_call *replay_next_pending(const struct replay_state *s)
{
    for (size_t i = 0; i < s->ncalls; i++)
        if (!s->calls[i].answered)
            return &s->calls[i];
    return NULL;
}

static int digits(const char *p, int n, int *ret)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    *ret = v;
    return 0;
}

int replay_parse_time(const char *s, int64_t *ret_ms)
{
    struct tm tm = {0};
    int y, mo, d, h, mi, se, ms = 0;
    if (!s || strlen(s) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
        s[16] != ':' || digits(s, 4, &y) || digits(s + 5, 2, &mo) || digits(s + 8, 2, &d) ||
        digits(s + 11, 2, &h) || digits(s + 14, 2, &mi) || digits(s + 17, 2, &se))
        return -EINVAL;
    const char *p = s + 19;
    if (*p == '.') {
        p++;
        int n = 0;
        while (p[n] >= '0' && p[n] <= '9')
            n++;
        if (n == 0 || n > 9)
            return -EINVAL;
        int scale = 100;
        for (int i = 0; i < n && i < 3; i++, scale /= 10)
            ms += (p[i] - '0') * scale;
        p += n;
    }
    if (strcmp(p, "Z") != 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
        se > 60)
        return -EINVAL;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = se;
    time_t t = timegm(&tm);
    *ret_ms = (int64_t)t * 1000 + ms;
    return 0;
}
