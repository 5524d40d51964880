/* chat.c - Chat Completions request building and response parsing (pure). */
#include "model/chat.h"

#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

void chat_conv_init(struct chat_conv *c)
{
    memset(c, 0, sizeof *c);
}

static void msg_done(struct chat_msg *m)
{
    free(m->content);
    for (size_t i = 0; i < m->ncalls; i++) {
        free(m->calls[i].id);
        free(m->calls[i].name);
        free(m->calls[i].arguments);
    }
    free(m->calls);
    free(m->tool_call_id);
}

void chat_conv_done(struct chat_conv *c)
{
    for (size_t i = 0; i < c->n; i++)
        msg_done(&c->msgs[i]);
    free(c->msgs);
    memset(c, 0, sizeof *c);
}

static struct chat_msg *conv_push(struct chat_conv *c, enum chat_role role)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 16;
        c->msgs = xreallocarray(c->msgs, c->cap, sizeof *c->msgs);
    }
    struct chat_msg *m = &c->msgs[c->n++];
    memset(m, 0, sizeof *m);
    m->role = role;
    return m;
}

void chat_conv_add(struct chat_conv *c, enum chat_role role, const char *content)
{
    conv_push(c, role)->content = dup_or_null(content);
}

void chat_conv_add_assistant(struct chat_conv *c, const char *content,
                             const struct chat_tool_call *calls, size_t ncalls)
{
    struct chat_msg *m = conv_push(c, CHAT_ASSISTANT);
    m->content = dup_or_null(content);
    if (ncalls) {
        m->calls = xcalloc(ncalls, sizeof *m->calls);
        for (size_t i = 0; i < ncalls; i++) {
            m->calls[i].id = xstrdup(calls[i].id ? calls[i].id : "");
            m->calls[i].name = xstrdup(calls[i].name ? calls[i].name : "");
            m->calls[i].arguments = xstrdup(calls[i].arguments ? calls[i].arguments : "");
        }
        m->ncalls = ncalls;
    }
}

void chat_conv_add_tool(struct chat_conv *c, const char *tool_call_id, const char *content)
{
    struct chat_msg *m = conv_push(c, CHAT_TOOL);
    m->tool_call_id = dup_or_null(tool_call_id);
    m->content = dup_or_null(content);
}

static const char *role_str(enum chat_role r)
{
    switch (r) {
    case CHAT_SYSTEM: return "system";
    case CHAT_USER: return "user";
    case CHAT_ASSISTANT: return "assistant";
    case CHAT_TOOL: return "tool";
    }
    return "user";
}

static int build_msg(const struct chat_msg *m, size_t idx, cJSON **ret, struct tern_err *err)
{
    cJSON *o = cJSON_CreateObject();
    int rc = 0;
    json_add_string(o, "role", role_str(m->role));
    switch (m->role) {
    case CHAT_SYSTEM:
    case CHAT_USER:
        if (!m->content) {
            rc = err_set(err, TERN_EINVALID, "messages[%zu]: content is required", idx);
            goto out;
        }
        json_add_string(o, "content", m->content);
        break;
    case CHAT_TOOL:
        if (!m->content || !m->tool_call_id || !*m->tool_call_id) {
            rc = err_set(err, TERN_EINVALID,
                         "messages[%zu]: a tool message needs content and tool_call_id", idx);
            goto out;
        }
        json_add_string(o, "content", m->content);
        json_add_string(o, "tool_call_id", m->tool_call_id);
        break;
    case CHAT_ASSISTANT:
        if (!m->content && m->ncalls == 0) {
            rc = err_set(err, TERN_EINVALID,
                         "messages[%zu]: an assistant message needs content or tool calls", idx);
            goto out;
        }
        /* content is optional when tool_calls are present: omitted rather
         * than null, which every compatible server accepts */
        if (m->content)
            json_add_string(o, "content", m->content);
        if (m->ncalls) {
            cJSON *arr = cJSON_AddArrayToObject(o, "tool_calls");
            for (size_t i = 0; i < m->ncalls; i++) {
                const struct chat_tool_call *tc = &m->calls[i];
                if (!*tc->id || !*tc->name) {
                    rc = err_set(err, TERN_EINVALID,
                                 "messages[%zu].tool_calls[%zu]: id and name are required", idx, i);
                    goto out;
                }
                cJSON *c = cJSON_CreateObject();
                json_add_string(c, "id", tc->id);
                json_add_string(c, "type", "function");
                cJSON *f = cJSON_AddObjectToObject(c, "function");
                json_add_string(f, "name", tc->name);
                json_add_string(f, "arguments", tc->arguments);
                cJSON_AddItemToArray(arr, c);
            }
        }
        break;
    }
out:
    if (rc) {
        cJSON_Delete(o);
        return rc;
    }
    *ret = o;
    return 0;
}

int chat_build_request(const struct chat_conv *conv, const struct chat_tool_def *tools,
                       size_t ntools, const struct chat_options *opts, char **ret_body,
                       struct tern_err *err)
{
    int rc = 0;
    cJSON *root = NULL;
    char *body = NULL;

    if (!opts || !opts->model || !*opts->model)
        return err_set(err, TERN_EINVALID, "model: Required value");
    if (!conv || conv->n == 0)
        return err_set(err, TERN_EINVALID, "messages: at least one message is required");
    if (opts->tool_choice && strcmp(opts->tool_choice, "auto") != 0 &&
        strcmp(opts->tool_choice, "none") != 0 && strcmp(opts->tool_choice, "required") != 0)
        return err_set(err, TERN_EINVALID, "tool_choice: must be auto, none or required");
    if (opts->max_completion_tokens < 0)
        return err_set(err, TERN_EINVALID, "max_completion_tokens: must be >= 0");

    root = cJSON_CreateObject();
    json_add_string(root, "model", opts->model);
    cJSON *msgs = cJSON_AddArrayToObject(root, "messages");
    for (size_t i = 0; i < conv->n; i++) {
        cJSON *m = NULL;
        rc = build_msg(&conv->msgs[i], i, &m, err);
        if (rc)
            goto out;
        cJSON_AddItemToArray(msgs, m);
    }
    if (ntools) {
        cJSON *arr = cJSON_AddArrayToObject(root, "tools");
        for (size_t i = 0; i < ntools; i++) {
            const struct chat_tool_def *t = &tools[i];
            cJSON *params = NULL;
            if (!t->name || !*t->name) {
                rc = err_set(err, TERN_EINVALID, "tools[%zu].name: Required value", i);
                goto out;
            }
            if (!t->parameters ||
                json_parse(t->parameters, strlen(t->parameters), &params, NULL) != 0 ||
                !cJSON_IsObject(params)) {
                cJSON_Delete(params);
                rc = err_set(err, TERN_EINVALID, "tools[%zu].parameters: must be a JSON object",
                             i);
                goto out;
            }
            cJSON *tool = cJSON_CreateObject();
            json_add_string(tool, "type", "function");
            cJSON *f = cJSON_AddObjectToObject(tool, "function");
            json_add_string(f, "name", t->name);
            if (t->description)
                json_add_string(f, "description", t->description);
            cJSON_AddItemToObject(f, "parameters", params);
            cJSON_AddBoolToObject(f, "strict", t->strict);
            cJSON_AddItemToArray(arr, tool);
        }
        if (opts->tool_choice)
            json_add_string(root, "tool_choice", opts->tool_choice);
        cJSON_AddBoolToObject(root, "parallel_tool_calls", opts->parallel_tool_calls);
    }
    if (opts->max_completion_tokens > 0)
        json_add_int64(root, "max_completion_tokens", opts->max_completion_tokens);

    body = json_print(root);
    if (strlen(body) > TERN_MODEL_MAX_REQUEST) {
        rc = err_set(err, TERN_ETOOLARGE, "request body of %zu bytes exceeds %u", strlen(body),
                     TERN_MODEL_MAX_REQUEST);
        goto out;
    }
    *ret_body = body;
    body = NULL;
out:
    free(body);
    cJSON_Delete(root);
    return rc;
}

/* ---- response ---------------------------------------------------------- */

static void resp_problem(struct chat_response *r, enum chat_kind kind, const char *why)
{
    r->kind = kind;
    free(r->problem);
    r->problem = xstrdup(why);
}

static const char *str_member(const cJSON *o, const char *key)
{
    const cJSON *it = json_get(o, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

static void parse_usage(const cJSON *u, struct chat_response *r)
{
    if (!cJSON_IsObject(u))
        return;
    int64_t v;
    r->has_usage = true;
    if (json_item_int64(json_get(u, "prompt_tokens"), &v) == 0 && v >= 0)
        r->usage.prompt_tokens = v;
    if (json_item_int64(json_get(u, "completion_tokens"), &v) == 0 && v >= 0)
        r->usage.completion_tokens = v;
    if (json_item_int64(json_get(u, "total_tokens"), &v) == 0 && v >= 0)
        r->usage.total_tokens = v;
    else
        r->usage.total_tokens = r->usage.prompt_tokens + r->usage.completion_tokens;
    const cJSON *pd = json_get(u, "prompt_tokens_details");
    if (json_item_int64(json_get(pd, "cached_tokens"), &v) == 0 && v >= 0 &&
        v <= r->usage.prompt_tokens)
        r->usage.cached_tokens = v;
    const cJSON *cd = json_get(u, "completion_tokens_details");
    if (json_item_int64(json_get(cd, "reasoning_tokens"), &v) == 0 && v >= 0)
        r->usage.reasoning_tokens = v;
}

static enum chat_finish finish_of(const char *s)
{
    if (!s)
        return CHAT_FINISH_OTHER;
    if (strcmp(s, "stop") == 0)
        return CHAT_FINISH_STOP;
    if (strcmp(s, "length") == 0)
        return CHAT_FINISH_LENGTH;
    if (strcmp(s, "tool_calls") == 0)
        return CHAT_FINISH_TOOL_CALLS;
    if (strcmp(s, "content_filter") == 0)
        return CHAT_FINISH_CONTENT_FILTER;
    if (strcmp(s, "function_call") == 0)
        return CHAT_FINISH_FUNCTION_CALL;
    return CHAT_FINISH_OTHER;
}

static void call_bad(struct chat_resp_call *c, enum chat_call_status st, const char *why)
{
    c->status = st;
    c->problem = xstrdup(why);
}

static void parse_call(const cJSON *tc, size_t idx, const char *const *known, size_t nknown,
                       struct chat_resp_call *c)
{
    const char *id = str_member(tc, "id");
    const cJSON *f = json_get(tc, "function");
    const char *name = str_member(f, "name");
    const char *args = str_member(f, "arguments");
    const char *type = str_member(tc, "type");

    if (id && *id)
        c->id = xstrdup(id);
    else
        c->id = xasprintf("call_missing_%zu", idx);
    c->name = xstrdup(name ? name : "");
    c->arguments = xstrdup(args ? args : "");
    c->status = CHAT_CALL_OK;

    if (!cJSON_IsObject(tc) || !cJSON_IsObject(f)) {
        call_bad(c, CHAT_CALL_MISSING_FIELD, "tool call has no function object");
        return;
    }
    if (!id || !*id) {
        call_bad(c, CHAT_CALL_MISSING_FIELD, "tool call has no id");
        return;
    }
    if (type && strcmp(type, "function") != 0) {
        call_bad(c, CHAT_CALL_MISSING_FIELD, "tool call type is not \"function\"");
        return;
    }
    if (!name || !*name) {
        call_bad(c, CHAT_CALL_MISSING_FIELD, "tool call has no function name");
        return;
    }
    if (!args) {
        call_bad(c, CHAT_CALL_MISSING_FIELD, "tool call has no arguments string");
        return;
    }
    bool found = false;
    for (size_t i = 0; i < nknown && !found; i++)
        found = strcmp(known[i], name) == 0;
    if (!found) {
        char why[TERN_ERRMSG_MAX];
        snprintf(why, sizeof why, "unknown tool \"%.200s\"", name);
        call_bad(c, CHAT_CALL_UNKNOWN_TOOL, why);
        return;
    }
    cJSON *a = NULL;
    struct tern_err e = {0};
    if (json_parse(args, strlen(args), &a, &e) != 0) {
        char why[TERN_ERRMSG_MAX];
        snprintf(why, sizeof why, "arguments are not valid JSON: %.300s", e.msg);
        call_bad(c, CHAT_CALL_BAD_JSON, why);
        return;
    }
    bool obj = cJSON_IsObject(a);
    cJSON_Delete(a);
    if (!obj)
        call_bad(c, CHAT_CALL_NOT_OBJECT, "arguments are not a JSON object");
}

int chat_parse_response(const char *body, size_t len, const char *const *known, size_t nknown,
                        struct chat_response *ret)
{
    if (len > TERN_MODEL_MAX_RESPONSE)
        return TERN_ETOOLARGE;

    struct chat_response r = {0};
    cJSON *root = NULL;
    struct tern_err e = {0};

    r.finish = CHAT_FINISH_OTHER;
    if (json_parse(body ? body : "", body ? len : 0, &root, &e) != 0) {
        char why[TERN_ERRMSG_MAX];
        snprintf(why, sizeof why, "body is not JSON: %.400s", e.msg);
        resp_problem(&r, CHAT_RESP_MALFORMED, why);
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        resp_problem(&r, CHAT_RESP_MALFORMED, "body is not a JSON object");
        goto out;
    }
    r.id = dup_or_null(str_member(root, "id"));
    r.model = dup_or_null(str_member(root, "model"));
    parse_usage(json_get(root, "usage"), &r);

    const cJSON *choices = json_get(root, "choices");
    if (!cJSON_IsArray(choices) || cJSON_GetArraySize(choices) < 1) {
        resp_problem(&r, CHAT_RESP_MALFORMED, "choices: missing or empty");
        goto out;
    }
    const cJSON *ch = cJSON_GetArrayItem(choices, 0);
    const cJSON *msg = json_get(ch, "message");
    if (!cJSON_IsObject(msg)) {
        resp_problem(&r, CHAT_RESP_MALFORMED, "choices[0].message: missing");
        goto out;
    }
    const char *fr = str_member(ch, "finish_reason");
    r.finish_raw = dup_or_null(fr);
    r.finish = finish_of(fr);

    const cJSON *content = json_get(msg, "content");
    if (cJSON_IsString(content))
        r.content = xstrdup(content->valuestring);
    else if (content && !cJSON_IsNull(content)) {
        /* content parts are not something we ever ask for */
        resp_problem(&r, CHAT_RESP_MALFORMED, "choices[0].message.content: must be a string");
        goto out;
    }
    r.refusal = dup_or_null(str_member(msg, "refusal"));

    const cJSON *tcs = json_get(msg, "tool_calls");
    if (tcs && !cJSON_IsNull(tcs)) {
        if (!cJSON_IsArray(tcs)) {
            resp_problem(&r, CHAT_RESP_MALFORMED,
                         "choices[0].message.tool_calls: must be an array");
            goto out;
        }
        int n = cJSON_GetArraySize(tcs);
        if (n > TERN_MODEL_MAX_TOOL_CALLS) {
            resp_problem(&r, CHAT_RESP_MALFORMED, "choices[0].message.tool_calls: too many");
            goto out;
        }
        r.calls = n ? xcalloc((size_t)n, sizeof *r.calls) : NULL;
        size_t i = 0;
        for (const cJSON *tc = tcs->child; tc; tc = tc->next, i++) {
            parse_call(tc, i, known, nknown, &r.calls[i]);
            r.ncalls = i + 1;
            if (r.calls[i].status != CHAT_CALL_OK)
                r.nbad++;
        }
        /* two calls with one id could not be answered separately */
        for (size_t a = 0; a < r.ncalls; a++)
            for (size_t b = a + 1; b < r.ncalls; b++)
                if (strcmp(r.calls[a].id, r.calls[b].id) == 0 &&
                    r.calls[b].status == CHAT_CALL_OK) {
                    free(r.calls[b].id);
                    r.calls[b].id = xasprintf("call_dup_%zu", b);
                    call_bad(&r.calls[b], CHAT_CALL_MISSING_FIELD, "duplicate tool call id");
                    r.nbad++;
                }
    }
    if (r.refusal)
        r.kind = CHAT_RESP_REFUSAL;
    else if (!r.content && r.ncalls == 0)
        resp_problem(&r, CHAT_RESP_EMPTY, "the message has neither content nor tool calls");
    else
        r.kind = CHAT_RESP_OK;
out:
    cJSON_Delete(root);
    *ret = r;
    return 0;
}

void chat_response_done(struct chat_response *r)
{
    if (!r)
        return;
    free(r->problem);
    free(r->id);
    free(r->model);
    free(r->content);
    free(r->refusal);
    free(r->finish_raw);
    for (size_t i = 0; i < r->ncalls; i++) {
        free(r->calls[i].id);
        free(r->calls[i].name);
        free(r->calls[i].arguments);
        free(r->calls[i].problem);
    }
    free(r->calls);
    memset(r, 0, sizeof *r);
}

int chat_parse_error(const char *body, size_t len, struct chat_api_error *ret)
{
    cJSON *root = NULL;
    if (!body || len > TERN_MODEL_MAX_RESPONSE || json_parse(body, len, &root, NULL) != 0)
        return TERN_EPARSE;
    const cJSON *e = json_get(root, "error");
    if (!cJSON_IsObject(e)) {
        cJSON_Delete(root);
        return TERN_EPARSE;
    }
    struct chat_api_error r = {0};
    const char *m = str_member(e, "message");
    r.message = xstrdup(m ? m : "");
    r.type = dup_or_null(str_member(e, "type"));
    r.param = dup_or_null(str_member(e, "param"));
    const cJSON *code = json_get(e, "code");
    if (cJSON_IsString(code))
        r.code = xstrdup(code->valuestring);
    else if (cJSON_IsNumber(code))
        r.code = json_print(code);
    cJSON_Delete(root);
    *ret = r;
    return 0;
}

void chat_api_error_done(struct chat_api_error *e)
{
    if (!e)
        return;
    free(e->message);
    free(e->type);
    free(e->param);
    free(e->code);
    memset(e, 0, sizeof *e);
}

bool chat_error_is_context_length(const struct chat_api_error *e)
{
    return e && ((e->code && strcmp(e->code, "context_length_exceeded") == 0) ||
                 (e->type && strcmp(e->type, "context_length_exceeded") == 0));
}

const char *chat_finish_str(enum chat_finish f)
{
    switch (f) {
    case CHAT_FINISH_STOP: return "stop";
    case CHAT_FINISH_LENGTH: return "length";
    case CHAT_FINISH_TOOL_CALLS: return "tool_calls";
    case CHAT_FINISH_CONTENT_FILTER: return "content_filter";
    case CHAT_FINISH_FUNCTION_CALL: return "function_call";
    case CHAT_FINISH_OTHER: return "other";
    }
    return "other";
}

const char *chat_call_status_str(enum chat_call_status s)
{
    switch (s) {
    case CHAT_CALL_OK: return "ok";
    case CHAT_CALL_BAD_JSON: return "bad_json";
    case CHAT_CALL_NOT_OBJECT: return "not_object";
    case CHAT_CALL_UNKNOWN_TOOL: return "unknown_tool";
    case CHAT_CALL_MISSING_FIELD: return "missing_field";
    }
    return "unknown";
}

const char *chat_kind_str(enum chat_kind k)
{
    switch (k) {
    case CHAT_RESP_OK: return "ok";
    case CHAT_RESP_REFUSAL: return "refusal";
    case CHAT_RESP_EMPTY: return "empty";
    case CHAT_RESP_MALFORMED: return "malformed";
    }
    return "unknown";
}
