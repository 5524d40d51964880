/* mcpwire.c - MCP JSON-RPC messages: building and validated parsing (pure). */
#include "mcp/mcpwire.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MESSAGE_MAX 1024 /* a JSON-RPC error message kept */

bool mcpwire_version_ok(const char *v)
{
    static const char *const ok[] = {"2025-11-25", "2025-06-18", "2025-03-26"};
    for (size_t i = 0; v && i < sizeof ok / sizeof *ok; i++)
        if (strcmp(v, ok[i]) == 0)
            return true;
    return false;
}

bool mcpwire_tool_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > TERN_MCP_MAX_TOOL_NAME)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* ---- requests ---------------------------------------------------------- */

static void add_stateless_meta(cJSON *params)
{
    cJSON *meta = (cJSON *)json_get(params, "_meta");
    if (!meta)
        meta = cJSON_AddObjectToObject(params, "_meta");
    json_add_string(meta, "io.modelcontextprotocol/protocolVersion", MCPWIRE_VERSION_STATELESS);
    cJSON_AddObjectToObject(meta, "io.modelcontextprotocol/clientCapabilities");
    cJSON *ci = cJSON_AddObjectToObject(meta, "io.modelcontextprotocol/clientInfo");
    json_add_string(ci, "name", MCPWIRE_CLIENT_NAME);
    json_add_string(ci, "version", MCPWIRE_CLIENT_VERSION);
}

/* {"jsonrpc":"2.0","id":id,"method":method,"params":params}; params consumed. */
static char *request(int64_t id, const char *method, cJSON *params)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "jsonrpc", "2.0");
    if (id > 0)
        json_add_int64(o, "id", id);
    json_add_string(o, "method", method);
    if (params)
        cJSON_AddItemToObject(o, "params", params);
    char *s = json_print(o);
    cJSON_Delete(o);
    return s;
}

char *mcpwire_initialize(int64_t id)
{
    cJSON *p = cJSON_CreateObject();
    json_add_string(p, "protocolVersion", MCPWIRE_VERSION);
    cJSON_AddObjectToObject(p, "capabilities");
    cJSON *ci = cJSON_AddObjectToObject(p, "clientInfo");
    json_add_string(ci, "name", MCPWIRE_CLIENT_NAME);
    json_add_string(ci, "version", MCPWIRE_CLIENT_VERSION);
    return request(id, "initialize", p);
}

char *mcpwire_initialized(void)
{
    return request(0, "notifications/initialized", NULL);
}

char *mcpwire_tools_list(int64_t id, const char *cursor, bool stateless)
{
    cJSON *p = cJSON_CreateObject();
    if (cursor)
        json_add_string(p, "cursor", cursor);
    if (stateless)
        add_stateless_meta(p);
    return request(id, "tools/list", p);
}

char *mcpwire_tools_call(int64_t id, const char *tool, const char *args_json, const char *idem_key,
                         bool stateless)
{
    cJSON *p = cJSON_CreateObject();
    json_add_string(p, "name", tool);
    cJSON *args = NULL;
    if (args_json && *args_json && json_parse(args_json, strlen(args_json), &args, NULL) != 0)
        args = NULL;
    cJSON_AddItemToObject(p, "arguments", cJSON_IsObject(args) ? args : cJSON_CreateObject());
    if (args && !cJSON_IsObject(args))
        cJSON_Delete(args);
    if (idem_key) {
        cJSON *meta = cJSON_AddObjectToObject(p, "_meta");
        json_add_string(meta, MCPWIRE_META_IDEMPOTENCY, idem_key);
    }
    if (stateless)
        add_stateless_meta(p);
    return request(id, "tools/call", p);
}

/* ---- answers ----------------------------------------------------------- */

void mcpwire_reply_done(struct mcpwire_reply *r)
{
    if (!r)
        return;
    cJSON_Delete(r->result);
    free(r->message);
    memset(r, 0, sizeof *r);
}

/* A copy of s bounded to max bytes on a UTF-8 boundary, with control
 * characters other than newline and tab replaced by spaces. */
static char *clean_text(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n > max) {
        n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    char *out = xstrndup(s, n);
    for (char *p = out; *p; p++)
        if (((unsigned char)*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
            *p = ' ';
    return out;
}

/* One message: 1 when it is the response to want_id (r filled), 0 when it
 * is something else, TERN_EPARSE when it is not a JSON-RPC message. */
static int match_one(const cJSON *m, int64_t want_id, struct mcpwire_reply *r, struct tern_err *err)
{
    if (!cJSON_IsObject(m))
        return err_set(err, TERN_EPARSE, "a JSON-RPC message must be an object");
    const cJSON *v = json_get(m, "jsonrpc");
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "2.0") != 0)
        return err_set(err, TERN_EPARSE, "not a JSON-RPC 2.0 message (jsonrpc is not \"2.0\")");
    if (json_get(m, "method"))
        return 0; /* a notification or a request of the server's */
    const cJSON *id = json_get(m, "id");
    int64_t got;
    if (!id || json_item_int64(id, &got) != 0 || !cJSON_IsNumber(id) || got != want_id)
        return 0; /* another id (or a string id we never send) */
    const cJSON *res = json_get(m, "result"), *e = json_get(m, "error");
    if (e) {
        if (!cJSON_IsObject(e))
            return err_set(err, TERN_EPARSE, "error is not an object");
        const cJSON *code = json_get(e, "code"), *msg = json_get(e, "message");
        int64_t c = 0;
        if (!code || json_item_int64(code, &c) != 0)
            return err_set(err, TERN_EPARSE, "error.code is not an integer");
        r->kind = MCPWIRE_ERROR;
        r->code = c;
        r->message = clean_text(cJSON_IsString(msg) ? msg->valuestring : "", MESSAGE_MAX);
        return 1;
    }
    if (!cJSON_IsObject(res))
        return err_set(err, TERN_EPARSE, "a response without a result object or an error");
    r->kind = MCPWIRE_RESULT;
    r->result = json_dup(res);
    return 1;
}

int mcpwire_find_reply(const char *text, size_t n, int64_t want_id, struct mcpwire_reply *ret,
                       struct tern_err *err)
{
    struct mcpwire_reply r = {0};
    cJSON *j = NULL;
    int rc;
    if (n > TERN_MCP_MAX_MESSAGE)
        return err_set(err, TERN_ETOOLARGE, "a JSON-RPC message of more than %u bytes",
                       TERN_MCP_MAX_MESSAGE);
    struct json_parse_opts o = {.max_bytes = TERN_MCP_MAX_MESSAGE};
    if ((rc = json_parse_opts(text, n, &o, &j, err))) {
        rc = rc == TERN_ETOOLARGE ? rc : TERN_EPARSE;
        err_wrap(err, rc, "JSON-RPC message");
        if (err)
            err->code = rc;
        return rc;
    }
    if (cJSON_IsArray(j)) {
        /* a batch (2025-03-26): the response is one of its elements */
        rc = 0;
        for (const cJSON *m = j->child; m && rc == 0; m = m->next)
            rc = match_one(m, want_id, &r, err);
    } else {
        rc = match_one(j, want_id, &r, err);
    }
    cJSON_Delete(j);
    if (rc < 0) {
        mcpwire_reply_done(&r);
        return rc;
    }
    *ret = r;
    return 0;
}

int mcpwire_parse_initialize(const cJSON *result, char **ret_version, struct tern_err *err)
{
    const cJSON *v = json_get(result, "protocolVersion");
    if (!cJSON_IsString(v))
        return err_set(err, TERN_EINVALID, "initialize: no protocolVersion in the result");
    if (!mcpwire_version_ok(v->valuestring))
        return err_set(err, TERN_EINVALID,
                       "initialize: the server speaks protocol revision \"%.40s\", this client "
                       "2025-03-26, 2025-06-18, 2025-11-25 (or 2026-07-28 without initialize)",
                       v->valuestring);
    *ret_version = xstrdup(v->valuestring);
    return 0;
}

/* ---- tools ------------------------------------------------------------- */

void mcpwire_tools_done(struct mcpwire_tools *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->tools[i].name);
        free(t->tools[i].description);
        free(t->tools[i].schema);
        free(t->tools[i].problem);
    }
    free(t->tools);
    free(t->next_cursor);
    memset(t, 0, sizeof *t);
}

static int depth_of(const cJSON *it)
{
    int d = 0;
    if (cJSON_IsObject(it) || cJSON_IsArray(it))
        for (const cJSON *c = it->child; c; c = c->next) {
            int cd = depth_of(c);
            if (cd > d)
                d = cd;
        }
    return (cJSON_IsObject(it) || cJSON_IsArray(it)) ? d + 1 : 0;
}

static char *schema_problem(const cJSON *schema, char **ret_text)
{
    if (!cJSON_IsObject(schema))
        return xstrdup("no inputSchema object");
    const cJSON *t = json_get(schema, "type");
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "object") != 0)
        return xstrdup("inputSchema is not of type \"object\"");
    if (depth_of(schema) > TERN_MCP_MAX_SCHEMA_DEPTH)
        return xasprintf("inputSchema nested deeper than %d levels", TERN_MCP_MAX_SCHEMA_DEPTH);
    char *text = json_print(schema);
    if (strlen(text) > TERN_MCP_MAX_SCHEMA) {
        free(text);
        return xasprintf("inputSchema larger than %u bytes", TERN_MCP_MAX_SCHEMA);
    }
    *ret_text = text;
    return NULL;
}

int mcpwire_parse_tools(const cJSON *result, struct mcpwire_tools *acc, struct tern_err *err)
{
    const cJSON *tools = json_get(result, "tools");
    if (!cJSON_IsArray(tools))
        return err_set(err, TERN_EINVALID, "tools/list: the result has no tools array");
    const cJSON *next = json_get(result, "nextCursor");
    free(acc->next_cursor);
    acc->next_cursor = NULL;
    if (cJSON_IsString(next) && *next->valuestring) {
        if (strlen(next->valuestring) > 4096)
            return err_set(err, TERN_ETOOLARGE, "tools/list: nextCursor longer than 4096 bytes");
        acc->next_cursor = xstrdup(next->valuestring);
    }
    for (const cJSON *t = tools->child; t; t = t->next) {
        if (acc->n >= TERN_MCP_MAX_LISTED)
            return err_set(err, TERN_ETOOLARGE, "tools/list: more than %d tools",
                           TERN_MCP_MAX_LISTED);
        const cJSON *name = json_get(t, "name"), *desc = json_get(t, "description");
        struct mcpwire_tool tool = {0};
        if (!cJSON_IsString(name)) {
            tool.name = xstrdup("");
            tool.problem = xstrdup("a tool without a name");
        } else {
            tool.name = clean_text(name->valuestring, 256);
            if (!mcpwire_tool_name_ok(name->valuestring))
                tool.problem =
                    xasprintf("name is not 1..%d of [A-Za-z0-9_-]", TERN_MCP_MAX_TOOL_NAME);
        }
        tool.description =
            clean_text(cJSON_IsString(desc) ? desc->valuestring : "", TERN_MCP_MAX_DESCRIPTION);
        if (!tool.problem)
            tool.problem = schema_problem(json_get(t, "inputSchema"), &tool.schema);
        acc->tools = xreallocarray(acc->tools, acc->n + 1, sizeof *acc->tools);
        acc->tools[acc->n++] = tool;
    }
    return 0;
}

/* ---- call results ------------------------------------------------------ */

void mcpwire_call_result_done(struct mcpwire_call_result *r)
{
    if (!r)
        return;
    free(r->text);
    memset(r, 0, sizeof *r);
}

static const char *sget(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int mcpwire_parse_call_result(const cJSON *result, struct mcpwire_call_result *ret,
                              struct tern_err *err)
{
    if (!cJSON_IsObject(result))
        return err_set(err, TERN_EINVALID, "tools/call: the result is not an object");
    struct buf b;
    buf_init(&b, TERN_MCP_MAX_MESSAGE);
    bool is_error = cJSON_IsTrue(json_get(result, "isError"));
    const char *rt = sget(result, "resultType");
    if (rt && strcmp(rt, "input_required") == 0) {
        buf_puts(&b, "error: the tool asked for input from the user, which this client cannot "
                     "give; call it with complete arguments instead");
        *ret = (struct mcpwire_call_result){buf_steal(&b), true};
        return 0;
    }
    const cJSON *content = json_get(result, "content");
    size_t texts = 0;
    for (const cJSON *c = cJSON_IsArray(content) ? content->child : NULL; c; c = c->next) {
        const char *type = sget(c, "type");
        const char *sep = b.len ? "\n" : "";
        if (!type) {
            buf_printf(&b, "%s[content without a type]", sep);
        } else if (strcmp(type, "text") == 0) {
            const char *text = sget(c, "text");
            buf_printf(&b, "%s", sep);
            buf_puts(&b, text ? text : "");
            texts++;
        } else if (strcmp(type, "resource_link") == 0) {
            const char *uri = sget(c, "uri");
            buf_printf(&b, "%s[resource: %.1024s]", sep, uri ? uri : "?");
        } else if (strcmp(type, "resource") == 0) {
            const cJSON *res = json_get(c, "resource");
            const char *uri = sget(res, "uri"), *text = sget(res, "text");
            buf_printf(&b, "%s[resource: %.1024s]", sep, uri ? uri : "?");
            if (text) {
                buf_putc(&b, '\n');
                buf_puts(&b, text);
                texts++;
            }
        } else {
            /* image, audio, ...: described, not shown */
            const char *mime = sget(c, "mimeType"), *data = sget(c, "data");
            char *t = clean_text(type, 40);
            buf_printf(&b, "%s[%s: %.100s, %zu bytes of base64 not shown]", sep, t,
                       mime ? mime : "?", data ? strlen(data) : (size_t)0);
            free(t);
        }
    }
    const cJSON *sc = json_get(result, "structuredContent");
    if (sc && texts == 0) {
        char *s = json_print(sc);
        buf_printf(&b, "%s", b.len ? "\n" : "");
        buf_puts(&b, s);
        free(s);
    }
    if (b.len == 0)
        buf_puts(&b, is_error ? "(the tool reported an error without details)" : "(no content)");
    *ret = (struct mcpwire_call_result){buf_steal(&b), is_error};
    return 0;
}

/* ---- arguments --------------------------------------------------------- */

static bool type_is(const cJSON *v, const char *t)
{
    if (strcmp(t, "string") == 0)
        return cJSON_IsString(v);
    if (strcmp(t, "boolean") == 0)
        return cJSON_IsBool(v);
    if (strcmp(t, "object") == 0)
        return cJSON_IsObject(v);
    if (strcmp(t, "array") == 0)
        return cJSON_IsArray(v);
    if (strcmp(t, "null") == 0)
        return cJSON_IsNull(v);
    if (strcmp(t, "number") == 0)
        return cJSON_IsNumber(v);
    if (strcmp(t, "integer") == 0) {
        int64_t i;
        return cJSON_IsNumber(v) && json_item_int64(v, &i) == 0;
    }
    return true; /* a type we do not check */
}

/* The member's type against a property schema's "type" (a string or an
 * array of strings); NULL when it fits, else the expected type text. */
static const char *type_mismatch(const cJSON *prop, const cJSON *v, char buf[128])
{
    const cJSON *t = json_get(prop, "type");
    if (cJSON_IsString(t))
        return type_is(v, t->valuestring) ? NULL : t->valuestring;
    if (cJSON_IsArray(t)) {
        buf[0] = 0;
        for (const cJSON *x = t->child; x; x = x->next) {
            if (!cJSON_IsString(x))
                return NULL;
            if (type_is(v, x->valuestring))
                return NULL;
            size_t l = strlen(buf);
            snprintf(buf + l, 128 - l, "%s%s", l ? " or " : "", x->valuestring);
        }
        return buf[0] ? buf : NULL;
    }
    return NULL;
}

int mcpwire_check_args(const char *schema_text, const char *args_json, char **ret_canonical,
                       struct tern_err *err)
{
    cJSON *schema = NULL, *args = NULL;
    int rc = 0;
    const char *text = args_json && *args_json ? args_json : "{}";
    size_t n = strlen(text);
    if (n > TERN_MCP_MAX_ARGS)
        return err_set(err, TERN_EINVALID, "arguments: larger than %u bytes", TERN_MCP_MAX_ARGS);
    struct json_parse_opts o = {.max_bytes = TERN_MCP_MAX_ARGS,
                                .max_depth = TERN_MCP_MAX_ARGS_DEPTH};
    if (json_parse_opts(text, n, &o, &args, err) != 0) {
        err_wrap(err, TERN_EINVALID, "arguments are not valid JSON (at most %d levels)",
                 TERN_MCP_MAX_ARGS_DEPTH);
        if (err)
            err->code = TERN_EINVALID;
        rc = TERN_EINVALID;
        goto out;
    }
    if (!cJSON_IsObject(args)) {
        rc = err_set(err, TERN_EINVALID, "arguments: must be a JSON object");
        goto out;
    }
    if (schema_text && json_parse(schema_text, strlen(schema_text), &schema, NULL) == 0) {
        const cJSON *props = json_get(schema, "properties");
        const cJSON *req = json_get(schema, "required");
        for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && !json_get(args, r->valuestring)) {
                rc = err_set(err, TERN_EINVALID, "%.100s: Required value", r->valuestring);
                goto out;
            }
        bool closed = cJSON_IsFalse(json_get(schema, "additionalProperties"));
        for (const cJSON *m = args->child; m; m = m->next) {
            const cJSON *prop = json_get(props, m->string);
            if (!prop) {
                if (closed) {
                    rc = err_set(err, TERN_EINVALID,
                                 "unknown member \"%.100s\" (the tool's schema allows no others)",
                                 m->string);
                    goto out;
                }
                continue;
            }
            char tb[128];
            const char *want = type_mismatch(prop, m, tb);
            if (want) {
                rc = err_set(err, TERN_EINVALID, "%.100s: must be of type %s", m->string, want);
                goto out;
            }
        }
    }
    if (ret_canonical)
        *ret_canonical = json_print(args);
out:
    cJSON_Delete(schema);
    cJSON_Delete(args);
    return rc;
}
