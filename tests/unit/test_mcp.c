/* Unit tests: mcp/sse and mcp/mcpwire (pure). */
#include "harness.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"
#include "mcp/mcpwire.h"
#include "mcp/sse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- SSE --------------------------------------------------------------- */

struct got {
    struct buf log; /* "type|id|data\n" per event */
    int stop_after; /* 0 = never */
    int n;
};

static int on_ev(void *ctx, const struct sse_event *ev)
{
    struct got *g = ctx;
    buf_printf(&g->log, "%s|%s|%s\n", ev->type, ev->id, ev->data);
    g->n++;
    return g->stop_after && g->n >= g->stop_after ? 42 : 0;
}

/* Feeds text in chunks of size k (every split point is tried by the
 * callers) and returns the log. */
static char *parse_chunks(const char *text, size_t k, int *ret_rc)
{
    struct sse_parser p;
    struct got g = {0};
    buf_init(&g.log, 1 << 20);
    sse_init(&p, 1024, 4096, 100);
    size_t n = strlen(text);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i += k)
        rc = sse_feed(&p, text + i, n - i < k ? n - i : k, on_ev, &g);
    sse_done(&p);
    if (ret_rc)
        *ret_rc = rc;
    return buf_steal(&g.log);
}

TEST(sse_events_any_chunking)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"data: {\"a\":1}\n\n", "message||{\"a\":1}\n"},
        {"event: message\ndata: x\n\n", "message||x\n"},
        {"data:no-space\r\n\r\n", "message||no-space\n"},
        {"data:  two spaces\n\n", "message|| two spaces\n"},
        {"data: a\ndata: b\n\n", "message||a\nb\n"},
        {"data: a\rdata: b\r\r", "message||a\nb\n"},
        {"data: a\r\ndata: b\r\n\r\n", "message||a\nb\n"},
        {": keep-alive\n\ndata: x\n\n", "message||x\n"},
        {"id: 7\nevent: note\ndata: x\n\ndata: y\n\n", "note|7|x\nmessage|7|y\n"},
        {"retry: 100\nfoo: bar\ndata\n\n", "message||\n"}, /* a bare "data": empty line */
        {"event: ping\n\ndata: x\n\n", "message||x\n"},    /* type reset without data */
        {"\xef\xbb\xbf"
         "data: bom\n\n",
         "message||bom\n"},         /* BOM dropped */
        {"data: unterminated", ""}, /* discarded at the end */
        {"data: x\n", ""},          /* no blank line: not dispatched */
        {"id: a\0b\n", ""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        for (size_t k = 1; k <= strlen(cases[c].in) + 1; k++) {
            int rc;
            char *out = parse_chunks(cases[c].in, k, &rc);
            if (rc != 0 || strcmp(out, cases[c].want) != 0)
                th_fail(__FILE__, __LINE__, "case %zu chunk %zu: rc %d got \"%s\" want \"%s\"", c,
                        k, rc, out, cases[c].want);
            free(out);
        }
    }
}

TEST(sse_bounds_and_stop)
{
    struct sse_parser p;
    struct got g = {0};
    buf_init(&g.log, 1 << 20);
    /* a line over the bound */
    sse_init(&p, 16, 4096, 100);
    ASSERT_EQ_INT(sse_feed(&p, "data: 0123456789abcdef\n", 23, on_ev, &g), TERN_ETOOLARGE);
    ASSERT_EQ_INT(sse_feed(&p, "\n", 1, on_ev, &g), TERN_ETOOLARGE); /* sticky */
    sse_done(&p);
    /* data over the bound, across lines */
    sse_init(&p, 64, 8, 100);
    ASSERT_EQ_INT(sse_feed(&p, "data: 1234\ndata: 5678\n", 22, on_ev, &g), TERN_ETOOLARGE);
    sse_done(&p);
    /* too many events */
    sse_init(&p, 64, 64, 2);
    ASSERT_EQ_INT(sse_feed(&p, "data: 1\n\ndata: 2\n\ndata: 3\n\n", 27, on_ev, &g), TERN_ETOOLARGE);
    ASSERT_EQ_INT(g.n, 2);
    sse_done(&p);
    /* the callback stops the stream */
    g.n = 0;
    g.stop_after = 1;
    sse_init(&p, 64, 64, 100);
    ASSERT_EQ_INT(sse_feed(&p, "data: 1\n\ndata: 2\n\n", 18, on_ev, &g), 42);
    ASSERT_EQ_INT(g.n, 1);
    sse_done(&p);
    buf_done(&g.log);
}

/* ---- requests ---------------------------------------------------------- */

static cJSON *parse(const char *s)
{
    cJSON *j = NULL;
    if (json_parse(s, strlen(s), &j, NULL) != 0)
        th_fail(__FILE__, __LINE__, "not JSON: %s", s);
    return j;
}

TEST(mcpwire_requests)
{
    char *s = mcpwire_initialize(1);
    cJSON *j = parse(s);
    ASSERT_EQ_STR(json_get(j, "jsonrpc")->valuestring, "2.0");
    ASSERT_EQ_STR(json_get(j, "method")->valuestring, "initialize");
    const cJSON *p = json_get(j, "params");
    ASSERT_EQ_STR(json_get(p, "protocolVersion")->valuestring, MCPWIRE_VERSION);
    ASSERT_EQ_STR(json_get(json_get(p, "clientInfo"), "name")->valuestring, "tern-runner");
    ASSERT_TRUE(cJSON_IsObject(json_get(p, "capabilities")));
    cJSON_Delete(j);
    free(s);

    s = mcpwire_initialized();
    j = parse(s);
    ASSERT_NULL(json_get(j, "id")); /* a notification */
    ASSERT_EQ_STR(json_get(j, "method")->valuestring, "notifications/initialized");
    cJSON_Delete(j);
    free(s);

    s = mcpwire_tools_call(3, "create_issue", "{\"title\":\"x\"}", "tern-abc", false);
    j = parse(s);
    p = json_get(j, "params");
    ASSERT_EQ_STR(json_get(p, "name")->valuestring, "create_issue");
    ASSERT_EQ_STR(json_get(json_get(p, "arguments"), "title")->valuestring, "x");
    ASSERT_EQ_STR(json_get(json_get(p, "_meta"), MCPWIRE_META_IDEMPOTENCY)->valuestring,
                  "tern-abc");
    ASSERT_NULL(json_get(json_get(p, "_meta"), "io.modelcontextprotocol/protocolVersion"));
    cJSON_Delete(j);
    free(s);

    /* the stateless revision: _meta on every request */
    s = mcpwire_tools_list(2, "c1", true);
    j = parse(s);
    p = json_get(j, "params");
    ASSERT_EQ_STR(json_get(p, "cursor")->valuestring, "c1");
    const cJSON *meta = json_get(p, "_meta");
    ASSERT_EQ_STR(json_get(meta, "io.modelcontextprotocol/protocolVersion")->valuestring,
                  MCPWIRE_VERSION_STATELESS);
    ASSERT_TRUE(cJSON_IsObject(json_get(meta, "io.modelcontextprotocol/clientCapabilities")));
    cJSON_Delete(j);
    free(s);
}

/* ---- replies ----------------------------------------------------------- */

TEST(mcpwire_find_reply_table)
{
    static const struct {
        const char *text;
        int rc;
        enum mcpwire_match kind;
    } t[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"ok\":true}}", 0, MCPWIRE_RESULT},
        {"{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32602,\"message\":\"bad\"}}", 0,
         MCPWIRE_ERROR},
        {"{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{}}", 0, MCPWIRE_NOT_OURS},
        {"{\"jsonrpc\":\"2.0\",\"id\":\"5\",\"result\":{}}", 0, MCPWIRE_NOT_OURS},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}", 0,
         MCPWIRE_NOT_OURS},
        {"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"sampling/createMessage\"}", 0,
         MCPWIRE_NOT_OURS},
        {"[{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}},{\"jsonrpc\":\"2.0\",\"id\":5,"
         "\"result\":{\"x\":1}}]",
         0, MCPWIRE_RESULT},
        {"{\"jsonrpc\":\"1.0\",\"id\":5,\"result\":{}}", TERN_EPARSE, 0},
        {"{\"jsonrpc\":\"2.0\",\"id\":5}", TERN_EPARSE, 0},
        {"{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":[]}", TERN_EPARSE, 0},
        {"{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"message\":\"no code\"}}", TERN_EPARSE, 0},
        {"not json", TERN_EPARSE, 0},
        {"[1]", TERN_EPARSE, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        struct mcpwire_reply r = {0};
        struct tern_err e = {0};
        int rc = mcpwire_find_reply(t[i].text, strlen(t[i].text), 5, &r, &e);
        if (rc != t[i].rc || (rc == 0 && r.kind != t[i].kind))
            th_fail(__FILE__, __LINE__, "case %zu: rc %d kind %d (%s)", i, rc, r.kind, e.msg);
        if (r.kind == MCPWIRE_ERROR) {
            ASSERT_EQ_INT(r.code, -32602);
            ASSERT_EQ_STR(r.message, "bad");
        }
        mcpwire_reply_done(&r);
    }
    /* an oversize message */
    size_t n = TERN_MCP_MAX_MESSAGE + 10;
    char *big = xmalloc(n + 1);
    memset(big, ' ', n);
    big[n] = 0;
    struct mcpwire_reply r = {0};
    ASSERT_EQ_INT(mcpwire_find_reply(big, n, 1, &r, NULL), TERN_ETOOLARGE);
    free(big);
}

TEST(mcpwire_initialize_versions)
{
    char *v = NULL;
    cJSON *j = parse("{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}");
    ASSERT_OK(mcpwire_parse_initialize(j, &v, NULL));
    ASSERT_EQ_STR(v, "2025-06-18");
    free(v);
    cJSON_Delete(j);
    j = parse("{\"protocolVersion\":\"2024-11-05\"}");
    struct tern_err e = {0};
    ASSERT_EQ_INT(mcpwire_parse_initialize(j, &v, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "2024-11-05");
    cJSON_Delete(j);
    j = parse("{}");
    ASSERT_EQ_INT(mcpwire_parse_initialize(j, &v, &e), TERN_EINVALID);
    cJSON_Delete(j);
}

TEST(mcpwire_tools_validated)
{
    struct buf deep;
    buf_init(&deep, 1 << 20);
    buf_puts(&deep, "{\"type\":\"object\",\"properties\":{\"a\":");
    for (int i = 0; i < TERN_MCP_MAX_SCHEMA_DEPTH; i++)
        buf_puts(&deep, "{\"x\":");
    buf_puts(&deep, "1");
    for (int i = 0; i < TERN_MCP_MAX_SCHEMA_DEPTH; i++)
        buf_puts(&deep, "}");
    buf_puts(&deep, "}}");
    char *text = xasprintf(
        "{\"tools\":["
        "{\"name\":\"search\",\"description\":\"Find\\u0007 things\\nfast\","
        "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}},"
        "{\"name\":\"bad.name\",\"inputSchema\":{\"type\":\"object\"}},"
        "{\"name\":\"noschema\"},"
        "{\"name\":\"arrayschema\",\"inputSchema\":{\"type\":\"array\"}},"
        "{\"name\":\"deep\",\"inputSchema\":%s},"
        "{\"description\":\"nameless\"}"
        "],\"nextCursor\":\"page2\"}",
        buf_str(&deep));
    buf_done(&deep);
    cJSON *j = parse(text);
    free(text);
    struct mcpwire_tools t = {0};
    ASSERT_OK(mcpwire_parse_tools(j, &t, NULL));
    cJSON_Delete(j);
    ASSERT_EQ_INT(t.n, 6);
    ASSERT_EQ_STR(t.next_cursor, "page2");
    ASSERT_EQ_STR(t.tools[0].name, "search");
    ASSERT_NULL(t.tools[0].problem);
    ASSERT_EQ_STR(t.tools[0].description, "Find  things\nfast");
    ASSERT_EQ_STR(t.tools[0].schema,
                  "{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}");
    ASSERT_CONTAINS(t.tools[1].problem, "name");
    ASSERT_CONTAINS(t.tools[2].problem, "no inputSchema");
    ASSERT_CONTAINS(t.tools[3].problem, "not of type");
    ASSERT_CONTAINS(t.tools[4].problem, "deeper");
    ASSERT_CONTAINS(t.tools[5].problem, "without a name");
    /* a second page appends and clears the cursor */
    j = parse("{\"tools\":[{\"name\":\"two\",\"inputSchema\":{\"type\":\"object\"}}]}");
    ASSERT_OK(mcpwire_parse_tools(j, &t, NULL));
    cJSON_Delete(j);
    ASSERT_EQ_INT(t.n, 7);
    ASSERT_NULL(t.next_cursor);
    mcpwire_tools_done(&t);
    j = parse("{\"nope\":[]}");
    ASSERT_EQ_INT(mcpwire_parse_tools(j, &t, NULL), TERN_EINVALID);
    cJSON_Delete(j);
    ASSERT_TRUE(mcpwire_tool_name_ok("a-b_C9"));
    ASSERT_FALSE(mcpwire_tool_name_ok(""));
    ASSERT_FALSE(mcpwire_tool_name_ok("a b"));
    ASSERT_FALSE(mcpwire_tool_name_ok("0123456789012345678901234567890123456789012345678"));
}

TEST(mcpwire_call_results)
{
    static const struct {
        const char *in, *text;
        bool is_error;
    } t[] = {
        {"{\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}",
         "a\nb", false},
        {"{\"content\":[{\"type\":\"text\",\"text\":\"boom\"}],\"isError\":true}", "boom", true},
        {"{\"content\":[{\"type\":\"image\",\"mimeType\":\"image/png\",\"data\":\"QUJD\"}]}",
         "[image: image/png, 4 bytes of base64 not shown]", false},
        {"{\"content\":[{\"type\":\"resource_link\",\"uri\":\"file:///x\"}]}",
         "[resource: file:///x]", false},
        {"{\"content\":[{\"type\":\"resource\",\"resource\":{\"uri\":\"u\",\"text\":\"t\"}}]}",
         "[resource: u]\nt", false},
        {"{\"content\":[],\"structuredContent\":{\"n\":1}}", "{\"n\":1}", false},
        {"{\"content\":[{\"type\":\"text\",\"text\":\"x\"}],\"structuredContent\":{\"n\":1}}", "x",
         false},
        {"{}", "(no content)", false},
        {"{\"isError\":true}", "(the tool reported an error without details)", true},
        {"{\"resultType\":\"input_required\",\"inputRequests\":{}}",
         "error: the tool asked for input from the user, which this client cannot give; call it "
         "with complete arguments instead",
         true},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        cJSON *j = parse(t[i].in);
        struct mcpwire_call_result r = {0};
        ASSERT_OK(mcpwire_parse_call_result(j, &r, NULL));
        if (strcmp(r.text, t[i].text) != 0 || r.is_error != t[i].is_error)
            th_fail(__FILE__, __LINE__, "case %zu: \"%s\" %d", i, r.text, r.is_error);
        mcpwire_call_result_done(&r);
        cJSON_Delete(j);
    }
}

TEST(mcpwire_args_checked_against_schema)
{
    const char *schema = "{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\"},"
                         "\"n\":{\"type\":\"integer\"},\"tags\":{\"type\":[\"array\",\"null\"]}},"
                         "\"required\":[\"title\"],\"additionalProperties\":false}";
    static const struct {
        const char *args, *err; /* err NULL = accepted */
    } t[] = {
        {"{\"title\":\"x\"}", NULL},
        {"{\"title\":\"x\",\"n\":3,\"tags\":null}", NULL},
        {"{\"title\":\"x\",\"tags\":[1]}", NULL},
        {"{}", "title: Required value"},
        {"", "title: Required value"},
        {"{\"title\":1}", "title: must be of type string"},
        {"{\"title\":\"x\",\"n\":1.5}", "n: must be of type integer"},
        {"{\"title\":\"x\",\"tags\":\"a\"}", "tags: must be of type array or null"},
        {"{\"title\":\"x\",\"sudo\":true}", "unknown member \"sudo\""},
        {"[1]", "must be a JSON object"},
        {"{\"title\":", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        char *canon = NULL;
        struct tern_err e = {0};
        int rc = mcpwire_check_args(schema, t[i].args, &canon, &e);
        if (t[i].err ? (rc != TERN_EINVALID || !strstr(e.msg, t[i].err)) : rc != 0)
            th_fail(__FILE__, __LINE__, "case %zu: rc %d \"%s\"", i, rc, e.msg);
        free(canon);
    }
    /* compact canonical text; an open schema takes unknown members */
    char *canon = NULL;
    ASSERT_OK(mcpwire_check_args("{\"type\":\"object\"}", "{ \"a\" : [ 1, 2 ] ,\"b\":\"c\" }",
                                 &canon, NULL));
    ASSERT_EQ_STR(canon, "{\"a\":[1,2],\"b\":\"c\"}");
    free(canon);
    /* depth and size bounds */
    struct buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i <= TERN_MCP_MAX_ARGS_DEPTH; i++)
        buf_puts(&b, "{\"a\":");
    buf_puts(&b, "1");
    for (int i = 0; i <= TERN_MCP_MAX_ARGS_DEPTH; i++)
        buf_puts(&b, "}");
    ASSERT_EQ_INT(mcpwire_check_args(NULL, buf_str(&b), NULL, NULL), TERN_EINVALID);
    buf_done(&b);
    char *big = xmalloc(TERN_MCP_MAX_ARGS + 16);
    memset(big, ' ', TERN_MCP_MAX_ARGS + 15);
    big[0] = '{';
    big[TERN_MCP_MAX_ARGS + 14] = '}';
    big[TERN_MCP_MAX_ARGS + 15] = 0;
    ASSERT_EQ_INT(mcpwire_check_args(NULL, big, NULL, NULL), TERN_EINVALID);
    free(big);
}
