/* turn.c - the runner's turn loop over the journal, the model and sandboxd. */
#include "runner/turn.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "etcd/etcd.h"
#include "journal/journal.h"
#include "json/json.h"
#include "model/chat.h"
#include "model/client.h"
#include "model/price.h"
#include "runner/budgetgate.h"
#include "runner/plan.h"
#include "runner/prompt.h"
#include "runner/replay.h"
#include "runner/sbx.h"
#include "runner/snapshot.h"
#include "runner/testhook.h"
#include "runner/trusted.h"

#include <errno.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RESULT_FILE "output/result.json" /* a valid result too large for the status */

struct turn {
    const struct runner_config *cfg;
    atomic_bool *stop;
    struct turn_stats st;
    int64_t t0;
    struct etcd *etcd;
    struct journal *j;
    struct journal_lock *lock;
    struct replay_state s;
    struct policy_config pc;
    struct chat_tool_def defs[POLICY_MAX_DEFS];
    size_t ndefs;
    const char *known[POLICY_MAX_DEFS];
    struct trusted *tr;    /* the tools the runner executes itself (runner/trusted) */
    bool catalog_done;     /* MCP servers' tools listed (or none to list) */
    struct model_client *model;
    struct sbx *sbx;
    struct price_table prices;
    struct tern_err fold_err; /* why the replay fold stopped, if it did */
    struct gate *gate;     /* team budgets (runner/budgetgate.h) */
    char *system_prompt;   /* built on the first model call */
    char *first_user;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static bool stopped(const struct turn *t)
{
    return t->stop && atomic_load(t->stop);
}

/* Records why the turn is about to fail (the first reason wins). */
static void set_class(struct turn *t, const char *cls)
{
    if (!t->st.failure_class[0])
        snprintf(t->st.failure_class, sizeof t->st.failure_class, "%s", cls);
}

/* ---- journal ----------------------------------------------------------- */

static int fold(struct turn *t, uint64_t seq, const char *type, int64_t turn, const char *key,
                const cJSON *data, const char *time, struct tern_err *err)
{
    struct replay_event ev = {seq, type, turn, key, data, time};
    gate_observe(t->gate, type, seq, data);
    int rc = replay_apply(&t->s, &ev, err);
    if (rc)
        err_wrap(err, rc, "replaying the journal");
    return rc;
}

static int on_event(void *ctx, const struct journal_event *ev)
{
    struct turn *t = ctx;
    t->st.replayed++;
    if (t->st.replayed > TERN_RUNNER_MAX_EVENTS)
        return err_set(&t->fold_err, TERN_ETOOLARGE, "more than %u events to replay",
                       TERN_RUNNER_MAX_EVENTS);
    if (ev->type == JOURNAL_EV_SNAPSHOT && t->s.last_seq == 0) {
        /* a replay from the latest snapshot starts with it: the state it
         * holds is the fold of everything before (runner/snapshot.h) */
        struct replay_state ns;
        int rc = snapshot_decode(json_get(ev->data, "state"), ev->seq, &ns, &t->fold_err);
        if (rc)
            return err_wrap(&t->fold_err, rc, "journal snapshot at seq %llu",
                            (unsigned long long)ev->seq);
        replay_state_done(&t->s);
        t->s = ns;
        return 0;
    }
    return fold(t, ev->seq, ev->type_name, ev->turn, ev->key, ev->data, ev->time, &t->fold_err);
}

/* Replays until the fold has caught up with the handle's summary (another
 * writer may append between journal_open and the replay). */
static int replay_all(struct turn *t, struct tern_err *err)
{
    int64_t t0 = mono_ms();
    for (int round = 0; round < 5; round++) {
        uint64_t from = t->s.last_seq ? t->s.last_seq + 1 : JOURNAL_FROM_SNAPSHOT;
        int rc = journal_replay(t->j, from, on_event, t, NULL, err);
        if (rc && t->fold_err.code) {
            if (err)
                *err = t->fold_err;
            return t->fold_err.code;
        }
        if (rc)
            return err_wrap(err, rc, "journal replay");
        const struct journal_summary *sum = journal_summary(t->j);
        if (t->s.last_seq == sum->last_seq) {
            t->st.replay_ms += mono_ms() - t0;
            return 0;
        }
        if ((rc = journal_refresh(t->j, err)))
            return rc;
    }
    return err_set(err, TERN_EFENCED, "journal keeps moving under the replay");
}

/* Appends one event (data is consumed) and folds it into the state. */
static int append(struct turn *t, const char *type, const char *key, cJSON *data,
                  struct tern_err *err)
{
    int rc;
    uint64_t seq = 0;
    if (t->lock && journal_lock_lost(t->lock)) {
        cJSON_Delete(data);
        return err_set(err, TERN_EFENCED, "turn lock lost (lease expired)");
    }
    struct journal_append_req req = {
        .type = journal_type_parse(type),
        .type_name = type,
        .turn = t->cfg->turn,
        .key = key,
        .data = data,
    };
    int64_t a0 = mono_ms();
    for (int attempt = 0;; attempt++) {
        rc = journal_append(t->j, &req, &seq, err);
        if (rc != TERN_EUNKNOWN || attempt >= 3)
            break;
        bool committed = false;
        int r2 = journal_resolve(t->j, &committed, &seq, err);
        if (r2) {
            rc = r2;
            break;
        }
        if (committed) {
            rc = 0;
            break;
        }
    }
    t->st.journal_ms += mono_ms() - a0;
    if (rc == 0) {
        t->st.appends++;
        if (t->cfg->crash_after_appends && t->st.appends == t->cfg->crash_after_appends)
            raise(SIGKILL); /* test hook: a crash exactly at this step boundary */
        if (!t->st.first_append_ms)
            t->st.first_append_ms = mono_ms() - t->t0;
        /* the fold only needs a time for the session's first event */
        char now[40] = "";
        if (!t->s.first_time_ms) {
            time_t secs = (time_t)(wall_ms() / 1000);
            struct tm tm;
            gmtime_r(&secs, &tm);
            strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
        }
        rc = fold(t, seq, type, t->cfg->turn, key, data, now[0] ? now : NULL, err);
    } else {
        err_wrap(err, rc, "journal append %s", type);
    }
    cJSON_Delete(data);
    return rc;
}

static cJSON *obj(void)
{
    return cJSON_CreateObject();
}

static int gate_append(void *ctx, const char *type, cJSON *data, uint64_t *ret_seq,
                       struct tern_err *err)
{
    struct turn *t = ctx;
    int rc = append(t, type, NULL, data, err);
    if (rc == 0 && ret_seq)
        *ret_seq = t->s.last_seq;
    return rc;
}

/* Compaction (runner/snapshot.h) at the start of a turn that has not
 * started: a snapshot of the state once enough events came since the last
 * one, then the events before it are dropped (a failed drop leaves old
 * events behind until the next snapshot's drop, which costs space, not
 * correctness). A state too large for an event is left uncompacted. */
static int maybe_compact(struct turn *t, struct tern_err *err)
{
    uint64_t prev = journal_summary(t->j)->snapshot_seq;
    bool started = t->s.turn > t->cfg->turn || (t->s.turn == t->cfg->turn && t->s.turn_started);
    if (started || !snapshot_due(&t->s, prev, (uint64_t)t->cfg->snapshot_events))
        return 0;
    if (t->lock && journal_lock_lost(t->lock))
        return err_set(err, TERN_EFENCED, "turn lock lost (lease expired)");
    cJSON *st = snapshot_encode(&t->s);
    uint64_t seq = 0;
    int64_t a0 = mono_ms();
    int rc = journal_compact(t->j, st, false, &seq, err);
    cJSON_Delete(st);
    t->st.journal_ms += mono_ms() - a0;
    if (rc == TERN_ETOOLARGE)
        return 0;
    if (rc)
        return err_wrap(err, rc, "journal snapshot");
    t->st.appends++;
    cJSON *empty = obj();
    rc = fold(t, seq, "snapshot", journal_summary(t->j)->turn, NULL, empty, NULL, err);
    cJSON_Delete(empty);
    if (rc == 0) {
        struct tern_err e2 = {0};
        journal_drop_before(t->j, seq, &e2);
    }
    return rc;
}

/* ---- model ------------------------------------------------------------- */

/* What a prompt part's read means: 200 is its content, 404 says it does
 * not exist (the prompt says so); anything else, a transport error
 * included, is retryable (exit 75): a prompt is never sent without a part
 * that exists but could not be read, because the model's answer to it is
 * journaled for good. */
static int prompt_part(int rc, const struct sbx_result *r, const char *what, bool *ret_missing,
                       struct tern_err *err)
{
    *ret_missing = false;
    if (rc)
        return err_wrap(err, rc, "sandboxd: reading %s for the prompt", what);
    if (r->http_status == 404) {
        *ret_missing = true;
        return 0;
    }
    if (r->http_status != 200)
        return err_set(err, TERN_EHTTP, "sandboxd: reading %s for the prompt: HTTP %ld: %.200s",
                       what, r->http_status, r->body ? r->body : "");
    return 0;
}

static int read_prompt_parts(struct turn *t, struct prompt_input *in, struct tern_err *err)
{
    struct policy_args a = {.tool = POLICY_READ, .path = "simple.md", .offset = 0, .limit = -1,
                            .timeout_ms = -1, .depth = -1};
    struct sbx_result r = {0};
    char **skills = NULL;
    size_t n = 0;
    int rc = sbx_call(t->sbx, NULL, &a, 10000, &r, err);
    rc = prompt_part(rc, &r, "simple.md", &in->memory_missing, err);
    if (rc == 0 && r.http_status == 200 && r.body_len)
        in->memory = xstrdup(r.body);
    sbx_result_done(&r);
    if (rc)
        return rc;
    struct policy_args l = {.tool = POLICY_LIST, .path = "skills", .depth = 3, .offset = -1,
                            .limit = -1, .timeout_ms = -1};
    rc = sbx_call(t->sbx, NULL, &l, 10000, &r, err);
    rc = prompt_part(rc, &r, "skills/", &in->skills_missing, err);
    if (rc == 0 && r.http_status == 200) {
        cJSON *j = NULL;
        const cJSON *entries;
        if (json_parse(r.body, r.body_len, &j, NULL) != 0 ||
            !cJSON_IsArray(entries = json_get(j, "entries"))) {
            rc = err_set(err, TERN_EHTTP, "sandboxd: listing skills/: unreadable answer");
        } else {
            for (const cJSON *it = entries->child; it; it = it->next) {
                const cJSON *p = json_get(it, "path"), *ty = json_get(it, "type");
                if (!cJSON_IsString(p) || !cJSON_IsString(ty) ||
                    strcmp(ty->valuestring, "file") != 0 || n >= TERN_RUNNER_MAX_SKILLS + 1)
                    continue;
                const char *name = p->valuestring;
                if (strncmp(name, "skills/", 7) == 0)
                    name += 7;
                skills = xreallocarray(skills, n + 1, sizeof(char *));
                skills[n++] = xstrdup(name);
            }
        }
        cJSON_Delete(j);
    }
    sbx_result_done(&r);
    in->skills = (const char *const *)skills;
    in->nskills = n;
    return rc;
}

static int build_prompt(struct turn *t, struct tern_err *err)
{
    if (t->system_prompt)
        return 0;
    const struct runner_spec *sp = &t->cfg->spec;
    struct prompt_input in = {
        .objective = sp->objective,
        .context_text = sp->context_text,
        .references = (const char *const *)sp->references,
        .nreferences = sp->nreferences,
        .writable = (const char *const *)sp->writable,
        .nwritable = sp->nwritable,
        .tools = t->known,
        .ntools = t->ndefs,
        .trusted = trusted_prompt(t->tr),
    };
    char *schema = sp->result_schema ? json_print(sp->result_schema) : NULL;
    in.result_schema = schema;
    int rc = read_prompt_parts(t, &in, err);
    if (rc == 0) {
        t->system_prompt = prompt_system(&in);
        t->first_user = prompt_first_user(&in);
    }
    free((char *)in.memory);
    free(schema);
    for (size_t i = 0; i < in.nskills; i++)
        free((char *)in.skills[i]);
    free((char **)in.skills);
    return rc;
}

static cJSON *response_data(struct turn *t, const struct chat_response *r,
                            const struct model_call_result *res)
{
    cJSON *d = obj();
    json_add_int64(d, "step", t->s.model_steps);
    json_add_string(d, "kind", chat_kind_str(r->kind));
    if (r->problem)
        json_add_string(d, "problem", r->problem);
    if (r->content)
        json_add_string(d, "content", r->content);
    if (r->refusal)
        json_add_string(d, "refusal", r->refusal);
    json_add_string(d, "finishReason", r->finish_raw ? r->finish_raw : chat_finish_str(r->finish));
    if (r->id)
        json_add_string(d, "id", r->id);
    if (res->request_id)
        json_add_string(d, "requestId", res->request_id);
    json_add_int64(d, "attempts", res->attempts);
    if (r->ncalls) {
        cJSON *arr = cJSON_AddArrayToObject(d, "toolCalls");
        for (size_t i = 0; i < r->ncalls; i++) {
            cJSON *c = obj();
            json_add_string(c, "id", r->calls[i].id);
            json_add_string(c, "name", r->calls[i].name);
            json_add_string(c, "arguments", r->calls[i].arguments);
            json_add_string(c, "status", chat_call_status_str(r->calls[i].status));
            if (r->calls[i].problem)
                json_add_string(c, "problem", r->calls[i].problem);
            cJSON_AddItemToArray(arr, c);
        }
    }
    int64_t cost = 0;
    const struct price_entry *p = price_lookup(&t->prices, t->cfg->spec.model);
    if (p && price_cost(p, &r->usage, &cost) != 0)
        cost = 0;
    cJSON *u = cJSON_AddObjectToObject(d, "usage");
    json_add_int64(u, "prompt_tokens", r->usage.prompt_tokens);
    json_add_int64(u, "completion_tokens", r->usage.completion_tokens);
    json_add_int64(u, "total_tokens", r->usage.total_tokens);
    json_add_int64(u, "cached_tokens", r->usage.cached_tokens);
    json_add_int64(u, "reasoning_tokens", r->usage.reasoning_tokens);
    json_add_int64(u, "cost_micro_usd", cost);
    return d;
}

/* The model call: returns 0 when an event was journaled (response, or error
 * + turn end), a negative code for a retryable failure. */
static int do_model_call(struct turn *t, struct tern_err *err)
{
    int rc = build_prompt(t, err);
    if (rc) {
        /* retryable: no model call without the whole prompt */
        set_class(t, "SandboxUnreachable");
        return rc;
    }
    struct chat_conv c;
    chat_conv_init(&c);
    chat_conv_add(&c, CHAT_SYSTEM, t->system_prompt);
    if (!t->s.objective_journaled)
        chat_conv_add(&c, CHAT_USER, t->first_user);
    for (size_t i = 0; i < t->s.conv.n; i++) {
        const struct chat_msg *m = &t->s.conv.msgs[i];
        if (m->role == CHAT_ASSISTANT)
            chat_conv_add_assistant(&c, m->content, m->calls, m->ncalls);
        else if (m->role == CHAT_TOOL)
            chat_conv_add_tool(&c, m->tool_call_id, m->content);
        else
            chat_conv_add(&c, m->role, m->content);
    }
    int64_t completion = 0; /* a team budget needs a bound on the completion */
    rc = gate_prepare(t->gate, t->cfg->max_completion_tokens, &completion, err);
    if (rc) {
        chat_conv_done(&c);
        return rc;
    }
    struct chat_options o = {.model = t->cfg->spec.model,
                             .max_completion_tokens = completion,
                             .tool_choice = t->ndefs ? "auto" : NULL,
                             .parallel_tool_calls = false};
    char *body = NULL;
    struct tern_err berr = {0};
    rc = chat_build_request(&c, t->defs, t->ndefs, &o, &body, &berr);
    chat_conv_done(&c);
    if (rc) {
        /* cannot happen for a journal we wrote; say so and end the turn */
        cJSON *d = obj();
        json_add_string(d, "phase", "model_request");
        json_add_string(d, "message", berr.msg);
        if ((rc = append(t, "error", NULL, d, err)))
            return rc;
        cJSON *f = obj();
        json_add_string(f, "outcome", PLAN_OUTCOME_ERROR);
        json_add_string(f, "reason", "request_build_failed");
        return append(t, "turn_finished", NULL, f, err);
    }
    /* reserve the call's worst case against the team budgets; a refusal
     * journaled the turn's end instead */
    bool refused = false;
    if ((rc = gate_reserve(t->gate, t->s.model_steps, strlen(body), completion, &refused, err)) ||
        refused) {
        free(body);
        return rc;
    }
    struct model_call_result res;
    int64_t m0 = mono_ms();
    rc = model_client_call(t->model, body, strlen(body), &res, err);
    t->st.model_ms += mono_ms() - m0;
    t->st.model_calls++;
    free(body);
    if (rc) {
        /* transport: retryable (the request stays open in the journal) */
        set_class(t, "ModelUnreachable");
        return err_wrap(err, rc, "model %s", t->cfg->base_url ? t->cfg->base_url : "");
    }
    testhook_at("model_response");

    if (res.status >= 200 && res.status <= 299) {
        struct chat_response r;
        rc = chat_parse_response(res.body, res.body_len, t->known, t->ndefs, &r);
        if (rc) {
            r = (struct chat_response){.kind = CHAT_RESP_MALFORMED,
                                       .problem = xstrdup("response body too large")};
        }
        cJSON *d = response_data(t, &r, &res);
        chat_response_done(&r);
        model_call_result_done(&res);
        return append(t, "model_response", NULL, d, err);
    }
    struct chat_api_error ae = {0};
    bool parsed = chat_parse_error(res.body, res.body_len, &ae) == 0;
    bool retryable = res.status == 408 || res.status == 409 || res.status == 429 ||
                     res.status >= 500;
    if (retryable && !(parsed && chat_error_is_context_length(&ae))) {
        set_class(t, res.status == 429 ? "ModelRateLimited" : "ModelServerError");
        rc = err_set(err, TERN_EHTTP, "model: HTTP %ld after %d attempts: %s", res.status,
                     res.attempts, parsed && ae.message ? ae.message : "");
        chat_api_error_done(&ae);
        model_call_result_done(&res);
        return rc;
    }
    cJSON *d = obj();
    json_add_string(d, "phase", "model");
    json_add_int64(d, "status", res.status);
    if (parsed && ae.code)
        json_add_string(d, "code", ae.code);
    if (parsed && ae.type)
        json_add_string(d, "type", ae.type);
    json_add_string(d, "message", parsed ? ae.message : "unreadable error body");
    if (res.request_id)
        json_add_string(d, "requestId", res.request_id);
    const char *reason = parsed && chat_error_is_context_length(&ae)
                             ? "context_length_exceeded"
                             : "model_error";
    /* the model's own words, for the status and the Events */
    char *said = plan_bounded(parsed && ae.message ? ae.message : "unreadable error body",
                              TERN_RUNNER_MAX_DETAIL);
    char *msg = xasprintf("the model answered HTTP %ld%s%s: %s", res.status,
                          parsed && ae.code ? " " : "", parsed && ae.code ? ae.code : "", said);
    free(said);
    chat_api_error_done(&ae);
    model_call_result_done(&res);
    if ((rc = append(t, "error", NULL, d, err))) {
        free(msg);
        return rc;
    }
    cJSON *f = obj();
    json_add_string(f, "outcome", PLAN_OUTCOME_ERROR);
    json_add_string(f, "reason", reason);
    json_add_string(f, "message", msg);
    free(msg);
    return append(t, "turn_finished", NULL, f, err);
}

/* ---- tools ------------------------------------------------------------- */

/* The definitions offered to the model: the permitted fixed tools, then
 * the MCP tools of the catalog. */
static void offer_tools(struct turn *t)
{
    t->ndefs = policy_tool_defs(&t->pc, t->defs);
    t->ndefs += policy_mcp_defs(&t->pc, t->defs + t->ndefs, POLICY_MAX_DEFS - t->ndefs);
    for (size_t i = 0; i < t->ndefs; i++)
        t->known[i] = t->defs[i].name;
}

/* Lists the MCP servers' tools (runner/trusted), once. A server that
 * refuses its credential ends the turn with the reason in the journal; an
 * unreachable one is retryable. */
static int load_catalog(struct turn *t, struct tern_err *err)
{
    struct tern_err e = {0};
    int rc = trusted_catalog(t->tr, &t->pc, t->st.tool_notes, sizeof t->st.tool_notes, &e);
    if (rc == TERN_EAUTH || rc == TERN_EINVALID) {
        cJSON *d = obj();
        json_add_string(d, "phase", "tools");
        json_add_string(d, "message", e.msg);
        if ((rc = append(t, "error", NULL, d, err)))
            return rc;
        cJSON *f = obj();
        json_add_string(f, "outcome", PLAN_OUTCOME_ERROR);
        json_add_string(f, "reason", "tool_server_refused");
        json_add_string(f, "message", e.msg);
        t->catalog_done = true;
        return append(t, "turn_finished", NULL, f, err);
    }
    if (rc) {
        set_class(t, "ToolServerUnreachable");
        if (err)
            *err = e;
        return rc;
    }
    offer_tools(t);
    t->catalog_done = true;
    return 0;
}

/* A trusted tool (MCP, publish_branch): executed here, its result
 * sanitized, journaled under the call's key. */
static int do_trusted_execute(struct turn *t, const struct plan *p, struct tern_err *err)
{
    char *key = xasprintf("%s/%s", t->cfg->uid, p->call->id);
    struct trusted_result r = {0};
    const char *cls = NULL;
    int64_t s0 = mono_ms();
    int rc = trusted_execute(t->tr, p->call->id, &p->args, p->decision.timeout_ms, &r, &cls, err);
    t->st.tool_ms += mono_ms() - s0;
    t->st.tool_calls++;
    if (rc) {
        free(key);
        set_class(t, cls ? cls : "ToolServerUnreachable");
        return err_wrap(err, rc, "%s", p->call->name); /* retryable: the same key next time */
    }
    cJSON *d = r.extra ? r.extra : obj();
    r.extra = NULL;
    json_add_string(d, "callId", p->call->id);
    json_add_string(d, "tool", p->call->name);
    json_add_string(d, "status", r.status);
    json_add_string(d, "output", r.output);
    if (r.redacted)
        cJSON_AddTrueToObject(d, "redacted");
    trusted_result_done(&r);
    rc = append(t, "tool_result", key, d, err);
    free(key);
    return rc;
}

static int do_tool_execute(struct turn *t, const struct plan *p, struct tern_err *err)
{
    if (p->tool == POLICY_MEMORY && journal_memory_pending(journal_summary(t->j)) >=
                                        TERN_MEMORY_MAX_PROPOSALS) {
        cJSON *d = obj();
        json_add_string(d, "callId", p->call->id);
        json_add_string(d, "tool", p->call->name);
        json_add_string(d, "status", "failed");
        char *o = xasprintf("error: %u memory proposals already wait for a human's decision; "
                            "nothing was recorded (mention the change in your answer instead)",
                            TERN_MEMORY_MAX_PROPOSALS);
        json_add_string(d, "output", o);
        free(o);
        char *key = xasprintf("%s/%s", t->cfg->uid, p->call->id);
        int rc = append(t, "tool_result", key, d, err);
        free(key);
        return rc;
    }
    if (p->tool == POLICY_MCP || p->tool == POLICY_PUBLISH || p->tool == POLICY_MEMORY)
        return do_trusted_execute(t, p, err);
    char *key = xasprintf("%s/%s", t->cfg->uid, p->call->id);
    struct sbx_result r;
    int64_t s0 = mono_ms();
    testhook_at("tool_call");
    int rc = sbx_call(t->sbx, key, &p->args, p->decision.timeout_ms, &r, err);
    t->st.tool_ms += mono_ms() - s0;
    t->st.tool_calls++;
    if (rc) {
        free(key);
        set_class(t, "SandboxUnreachable");
        return err_wrap(err, rc, "sandboxd"); /* retryable: same key next time */
    }
    if (r.http_status == 409 || r.http_status == 429 || r.http_status >= 500) {
        set_class(t, r.http_status == 409 ? "SandboxBusy" : "SandboxUnreachable");
        /* busy (the first request under this key still runs) or a server
         * failure: retry later under the same key */
        rc = err_set(err, TERN_EHTTP, "sandboxd: HTTP %ld: %.200s", r.http_status,
                     r.body ? r.body : "");
        sbx_result_done(&r);
        free(key);
        return rc;
    }
    testhook_at("tool_result");
    const char *status = NULL;
    char *raw = sbx_render(&r, &status);
    char *out = trusted_sanitize(t->tr, raw, 0, NULL); /* no credential is there; if one were */
    free(raw);
    cJSON *d = obj();
    json_add_string(d, "callId", p->call->id);
    json_add_string(d, "tool", p->call->name);
    json_add_string(d, "status", status);
    json_add_string(d, "output", out);
    json_add_int64(d, "httpStatus", r.http_status);
    if (r.replayed)
        cJSON_AddTrueToObject(d, "replayed");
    free(out);
    sbx_result_done(&r);
    rc = append(t, "tool_result", key, d, err);
    free(key);
    return rc;
}

/* data.artifacts: the files under output/ now (status.result.artifacts).
 * Best effort: without an answer from sandboxd the member is left out. */
static void add_artifacts(struct turn *t, cJSON *d)
{
    struct policy_args l = {.tool = POLICY_LIST, .path = "output", .depth = TERN_POLICY_MAX_DEPTH,
                            .offset = -1, .limit = -1, .timeout_ms = -1};
    struct sbx_result r = {0};
    struct tern_err e = {0};
    if (sbx_call(t->sbx, NULL, &l, POLICY_FILE_TIMEOUT_MS, &r, &e) == 0 && r.http_status == 200) {
        cJSON *j = NULL;
        const cJSON *entries;
        if (json_parse(r.body, r.body_len, &j, NULL) == 0 &&
            cJSON_IsArray(entries = json_get(j, "entries"))) {
            cJSON *arr = cJSON_AddArrayToObject(d, "artifacts");
            int n = 0;
            for (const cJSON *it = entries->child; it && n < TERN_RUNNER_MAX_ARTIFACTS;
                 it = it->next) {
                const cJSON *p = json_get(it, "path"), *ty = json_get(it, "type");
                if (cJSON_IsString(p) && cJSON_IsString(ty) &&
                    strcmp(ty->valuestring, "dir") != 0) {
                    cJSON_AddItemToArray(arr, cJSON_CreateString(p->valuestring));
                    n++;
                }
            }
        }
        cJSON_Delete(j);
    }
    sbx_result_done(&r);
}

/* The valid answer of a session with spec.result.schema: data.result when
 * its compact JSON is at most TERN_RESULT_MAX_VALUE bytes, else written to
 * output/result.json through sandboxd (under the key <uid>/result/<turn>:
 * a runner restarted before turn_finished writes the same bytes again) and
 * data.resultRef {path, size, sha256}. A sandboxd that cannot be reached
 * or is busy is retryable; one that refuses the write turns d into an
 * error end (outcome error, reason result_not_written, message why). */
static int add_result(struct turn *t, const cJSON *value, cJSON *d, struct tern_err *err)
{
    char *text = json_print(value);
    size_t n = strlen(text);
    if (n <= TERN_RESULT_MAX_VALUE) {
        free(text);
        cJSON_AddItemToObject(d, "result", json_dup(value));
        return 0;
    }
    struct policy_args a = {.tool = POLICY_WRITE, .path = (char *)RESULT_FILE, .content = text,
                            .offset = -1, .limit = -1, .timeout_ms = -1, .depth = -1};
    char *key = xasprintf("%s/result/%lld", t->cfg->uid, (long long)t->cfg->turn);
    struct sbx_result r = {0};
    int64_t s0 = mono_ms();
    int rc = sbx_call(t->sbx, key, &a, POLICY_FILE_TIMEOUT_MS, &r, err);
    t->st.tool_ms += mono_ms() - s0;
    free(key);
    if (rc) {
        set_class(t, "SandboxUnreachable");
        rc = err_wrap(err, rc, "sandboxd: writing %s", RESULT_FILE);
    } else if (r.http_status == 409 || r.http_status == 429 || r.http_status >= 500) {
        set_class(t, r.http_status == 409 ? "SandboxBusy" : "SandboxUnreachable");
        rc = err_set(err, TERN_EHTTP, "sandboxd: writing %s: HTTP %ld", RESULT_FILE,
                     r.http_status);
    } else if (r.http_status < 200 || r.http_status > 299) {
        /* the answer was valid but cannot be kept: the turn ends in an
         * error that says so (status, Event), the answer stays journaled */
        char *said = plan_bounded(r.body ? r.body : "", TERN_RUNNER_MAX_DETAIL);
        char *msg = xasprintf("the valid result (%zu bytes) could not be written to %s: "
                              "sandboxd answered HTTP %ld: %s",
                              n, RESULT_FILE, r.http_status, said);
        free(said);
        cJSON_DeleteItemFromObject(d, "outcome");
        cJSON_DeleteItemFromObject(d, "message");
        json_add_string(d, "outcome", PLAN_OUTCOME_ERROR);
        json_add_string(d, "reason", "result_not_written");
        json_add_string(d, "message", msg);
        free(msg);
    } else {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int mdlen = 0;
        char hex[2 * EVP_MAX_MD_SIZE + 1];
        EVP_Digest(text, n, md, &mdlen, EVP_sha256(), NULL);
        for (unsigned i = 0; i < mdlen; i++)
            snprintf(hex + 2 * i, 3, "%02x", md[i]);
        cJSON *ref = cJSON_AddObjectToObject(d, "resultRef");
        json_add_string(ref, "path", RESULT_FILE);
        json_add_int64(ref, "size", (int64_t)n);
        json_add_string(ref, "sha256", hex);
    }
    sbx_result_done(&r);
    free(text);
    return rc;
}

static int perform(struct turn *t, struct plan *p, struct tern_err *err)
{
    cJSON *d;
    char *key = NULL;
    int rc = 0;
    switch (p->action) {
    case PLAN_DONE: return 0;
    case PLAN_START_TURN:
        d = obj();
        json_add_int64(d, "turn", t->cfg->turn);
        json_add_string(d, "owner", t->cfg->owner);
        return append(t, "turn_started", NULL, d, err);
    case PLAN_MODEL_REQUEST:
        d = obj();
        json_add_int64(d, "step", t->s.model_steps);
        json_add_int64(d, "messages", (int64_t)t->s.conv.n + 2);
        return append(t, "model_request", NULL, d, err);
    case PLAN_MODEL_CALL: return do_model_call(t, err);
    case PLAN_TOOL_REFUSE:
        d = obj();
        json_add_string(d, "callId", p->call->id);
        json_add_string(d, "tool", p->call->name);
        json_add_string(d, "status", p->status);
        json_add_string(d, "output", p->output);
        return append(t, "tool_result", NULL, d, err);
    case PLAN_REQUEST_APPROVAL:
        d = obj();
        json_add_string(d, "id", p->approval_id);
        json_add_string(d, "callId", p->call->id);
        json_add_string(d, "tool", p->call->name);
        json_add_string(d, "summary", p->summary);
        if (p->decision.pattern)
            json_add_string(d, "pattern", p->decision.pattern);
        return append(t, "approval_requested", NULL, d, err);
    case PLAN_WAIT_APPROVAL:
        d = obj();
        json_add_string(d, "outcome", PLAN_OUTCOME_APPROVAL);
        json_add_string(d, "approvalId", p->approval_id);
        return append(t, "turn_finished", NULL, d, err);
    case PLAN_TOOL_START:
        key = xasprintf("%s/%s", t->cfg->uid, p->call->id);
        d = obj();
        json_add_string(d, "callId", p->call->id);
        json_add_string(d, "tool", p->call->name);
        json_add_string(d, "arguments", p->call->arguments);
        json_add_int64(d, "timeoutMs", p->decision.timeout_ms);
        if (p->decision.verdict == POLICY_NEEDS_APPROVAL && p->call->approval_id)
            json_add_string(d, "approvalId", p->call->approval_id);
        rc = append(t, "tool_call", key, d, err);
        free(key);
        return rc;
    case PLAN_TOOL_EXECUTE: return do_tool_execute(t, p, err);
    case PLAN_RESULT_INVALID:
        d = obj();
        json_add_int64(d, "attempt", p->attempt);
        json_add_string(d, "problem", p->reason);
        json_add_string(d, "message", p->output);
        rc = append(t, "result_invalid", NULL, d, err);
        if (rc == 0)
            testhook_at("result_invalid");
        return rc;
    case PLAN_LIMIT:
        d = obj();
        json_add_string(d, "limit", p->limit_name ? p->limit_name : policy_limit_name(p->limit));
        json_add_int64(d, "used", p->limit_used);
        json_add_int64(d, "max", p->limit_max);
        return append(t, "limit_reached", NULL, d, err);
    case PLAN_FINISH:
        d = obj();
        json_add_string(d, "outcome", p->outcome);
        if (p->reason)
            json_add_string(d, "reason", p->reason);
        if (p->message)
            json_add_string(d, "message", p->message);
        if (strcmp(p->outcome, PLAN_OUTCOME_LIMIT) == 0 && p->reason) {
            json_add_string(d, "limit", p->reason);
            json_add_int64(d, "used", p->limit_used);
            json_add_int64(d, "max", p->limit_max);
        }
        if (t->s.final_text && strcmp(p->outcome, PLAN_OUTCOME_ERROR) != 0)
            json_add_string(d, "summary", t->s.final_text);
        if (p->result && (rc = add_result(t, p->result, d, err))) {
            cJSON_Delete(d);
            return rc;
        }
        if (strcmp(cJSON_GetStringValue(json_get(d, "outcome")), PLAN_OUTCOME_COMPLETED) == 0)
            add_artifacts(t, d);
        return append(t, "turn_finished", NULL, d, err);
    }
    return 0;
}

/* ---- the turn ---------------------------------------------------------- */

static int load_prices(struct turn *t, struct tern_err *err)
{
    char *text = NULL;
    if (!t->cfg->prices_file)
        return 0;
    int rc = runner_read_file(t->cfg->prices_file, 1u << 20, &text, err);
    if (rc == 0 && (rc = price_table_parse(text, strlen(text), &t->prices, err)))
        rc = err_wrap(err, TERN_EINVALID, "%s", t->cfg->prices_file);
    free(text);
    return rc;
}

static int take_lock(struct turn *t, struct tern_err *err)
{
    int64_t deadline = mono_ms() + t->cfg->lock_wait_ms;
    int64_t w0 = mono_ms();
    for (;;) {
        int rc = journal_lock_acquire(t->etcd, t->cfg->uid, t->cfg->owner, t->cfg->lock_ttl_s,
                                      &t->lock, err);
        if (rc != TERN_ECONFLICT || mono_ms() >= deadline || stopped(t)) {
            t->st.lock_wait_ms = mono_ms() - w0;
            return rc;
        }
        sleep_ms(100); /* the holder's lease ends on release or expiry */
    }
}

int turn_run(const struct runner_config *cfg, atomic_bool *stop, struct turn_stats *stats,
             struct tern_err *err)
{
    struct turn t = {.cfg = cfg, .stop = stop, .t0 = mono_ms()};
    int rc;

    replay_state_init(&t.s);
    runner_spec_policy(&cfg->spec, &t.pc);
    if ((rc = load_prices(&t, err)))
        goto out;
    struct etcd_settings es = {.endpoints = cfg->etcd_endpoints,
                               .ca_file = cfg->etcd_ca_file,
                               .cert_file = cfg->etcd_cert_file,
                               .key_file = cfg->etcd_key_file,
                               .username = cfg->etcd_username,
                               .password_file = cfg->etcd_password_file};
    if ((rc = etcd_from_settings(&es, &t.etcd, err))) {
        rc = err_wrap(err, TERN_EINVALID, "journal");
        goto out;
    }
    if ((rc = take_lock(&t, err)))
        goto out;
    struct gate_config gc = {.etcd = t.etcd, .ns = cfg->ns, .uid = cfg->uid,
                             .labels = cfg->spec.labels,
                             .price = price_lookup(&t.prices, cfg->spec.model),
                             .clock_offset_s = cfg->clock_offset_s,
                             .crash_after_reserve = cfg->crash_after_reserve != 0,
                             .append = gate_append, .ctx = &t};
    t.gate = gate_new(&gc);
    if ((rc = journal_open(t.etcd, cfg->uid, NULL, &t.j, err)) ||
        (rc = journal_create_meta(t.j, cfg->ns, cfg->session, err)) ||
        (rc = replay_all(&t, err)))
        goto out;

    /* standalone mode: spec.messages not yet journaled become user_message
     * events (the operator does this between turns when it runs) */
    for (int64_t i = t.s.max_message_index + 1; i < (int64_t)cfg->spec.nmessages; i++) {
        cJSON *d = obj();
        json_add_string(d, "source", "spec.messages");
        json_add_int64(d, "index", i);
        json_add_string(d, "text", cfg->spec.messages[i]);
        char key[48];
        snprintf(key, sizeof key, "message/%lld", (long long)i); /* as the operator keys it */
        if ((rc = append(&t, "user_message", key, d, err)))
            goto out;
    }

    if ((rc = maybe_compact(&t, err)))
        goto out;

    struct model_client_config mc = {
        .base_url = cfg->base_url,
        .api_key = cfg->api_key,
        .organization = cfg->org,
        .project = cfg->project,
        .timeout_ms = cfg->model_timeout_ms,
        .retry = {.max_retries = cfg->model_max_retries ? (int)cfg->model_max_retries : -1},
        .cancel = stop,
    };
    t.model = model_client_new(&mc);
    struct sbx_config sc = {.address = cfg->sandbox_addr, .token = cfg->sandbox_token};
    t.sbx = sbx_new(&sc);
    /* the runner may start before tern-sandboxd listens (they start
     * together); not ready in time is retryable */
    rc = sbx_wait_ready(t.sbx, cfg->sandbox_wait_ms > 0 ? cfg->sandbox_wait_ms : 60000, err);
    if (rc)
        goto out;
    t.tr = trusted_new(cfg, t.sbx, stop);
    if (!trusted_has_mcp(t.tr)) {
        struct tern_err e0 = {0};
        trusted_catalog(t.tr, &t.pc, NULL, 0, &e0); /* the publish schema; nothing to list */
        t.catalog_done = true;
    }
    offer_tools(&t);

    for (;;) {
        if (stopped(&t)) {
            rc = err_set(err, -ECANCELED, "stopped");
            goto out;
        }
        /* a model call that ended settles its budget reservation */
        if ((rc = gate_settle(t.gate, err)))
            goto out;
        struct plan p;
        struct plan_input in = {.uid = cfg->uid, .turn = cfg->turn, .policy = &t.pc,
                                .now_ms = wall_ms(),
                                .result_schema = cfg->spec.result_schema,
                                .max_result_attempts = cfg->spec.max_result_attempts};
        plan_next(&t.s, &in, &p);
        if (p.action == PLAN_DONE) {
            plan_done(&p);
            break;
        }
        bool needs_tools = p.action == PLAN_MODEL_REQUEST || p.action == PLAN_MODEL_CALL ||
                           replay_next_pending(&t.s) != NULL;
        if (!t.catalog_done && needs_tools) {
            /* calls and model requests need the MCP tools: list them, plan
             * again (a turn that only has to finish does not wait for a
             * server) */
            plan_done(&p);
            if ((rc = load_catalog(&t, err)))
                goto out;
            continue;
        }
        rc = perform(&t, &p, err);
        plan_done(&p);
        if (rc)
            goto out;
        t.st.steps++;
    }
    rc = 0;
out:
    if (rc && !t.st.failure_class[0])
        set_class(&t, rc == TERN_EINVALID    ? "ConfigError"
                      : rc == -ECANCELED     ? "Stopped"
                      : rc == TERN_EFENCED   ? "Fenced"
                      : rc == TERN_ECONFLICT ? "LockBusy"
                                             : "JournalUnavailable");
    if (t.s.outcome)
        snprintf(t.st.outcome, sizeof t.st.outcome, "%s", t.s.outcome);
    if (t.lock) {
        struct tern_err e2 = {0};
        journal_lock_release(t.lock, &e2);
    }
    journal_free(t.j);
    gate_free(t.gate);
    etcd_free(t.etcd);
    model_client_free(t.model);
    trusted_free(t.tr);
    sbx_free(t.sbx);
    price_table_done(&t.prices);
    free(t.system_prompt);
    free(t.first_user);
    replay_state_done(&t.s);
    t.st.total_ms = mono_ms() - t.t0;
    if (stats)
        *stats = t.st;
    return rc;
}
