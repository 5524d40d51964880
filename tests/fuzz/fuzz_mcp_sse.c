/* libFuzzer target: an MCP server's answer, as the runner reads it.
 * Input: one byte (the chunk size the stream is fed in, 1..256), then an
 * event stream. Every event's data goes through mcpwire_find_reply for id
 * 1; a result found is read as an initialize, a tools/list and a tools/call
 * result, and every usable tool's schema checks a fixed argument object.
 * Invariants (abort otherwise): an event's data never exceeds the bound
 * given to the parser, tools never exceed TERN_MCP_MAX_LISTED, every
 * usable tool has a valid name and a schema within TERN_MCP_MAX_SCHEMA. */
#include "base/limits.h"
#include "json/json.h"
#include "mcp/mcpwire.h"
#include "mcp/sse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DATA 65536

static int on_event(void *ctx, const struct sse_event *ev)
{
    (void)ctx;
    if (ev->data_len > MAX_DATA || strlen(ev->data) > ev->data_len)
        abort();
    struct mcpwire_reply r = {0};
    if (mcpwire_find_reply(ev->data, ev->data_len, 1, &r, NULL) == 0 && r.kind == MCPWIRE_RESULT) {
        char *v = NULL;
        if (mcpwire_parse_initialize(r.result, &v, NULL) == 0 && !mcpwire_version_ok(v))
            abort();
        free(v);
        struct mcpwire_tools t = {0};
        if (mcpwire_parse_tools(r.result, &t, NULL) == 0) {
            if (t.n > TERN_MCP_MAX_LISTED)
                abort();
            for (size_t i = 0; i < t.n; i++) {
                if (t.tools[i].problem)
                    continue;
                if (!mcpwire_tool_name_ok(t.tools[i].name) ||
                    strlen(t.tools[i].schema) > TERN_MCP_MAX_SCHEMA ||
                    strlen(t.tools[i].description) > TERN_MCP_MAX_DESCRIPTION)
                    abort();
                char *canon = NULL;
                if (mcpwire_check_args(t.tools[i].schema, "{\"q\":\"x\",\"n\":1}", &canon, NULL) ==
                        0 &&
                    !canon)
                    abort();
                free(canon);
            }
        }
        mcpwire_tools_done(&t);
        struct mcpwire_call_result cr = {0};
        if (mcpwire_parse_call_result(r.result, &cr, NULL) == 0 && !cr.text)
            abort();
        mcpwire_call_result_done(&cr);
    }
    mcpwire_reply_done(&r);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    size_t chunk = (size_t)data[0] + 1;
    struct sse_parser p;
    sse_init(&p, 1u << 16, MAX_DATA, 1000);
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    for (size_t i = 0; i < n; i += chunk)
        if (sse_feed(&p, s + i, n - i < chunk ? n - i : chunk, on_event, NULL))
            break;
    sse_done(&p);
    return 0;
}
