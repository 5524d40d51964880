/* mcpclient.h - an MCP client over the Streamable HTTP transport (libcurl
 * through http/httpc; messages from mcp/mcpwire).
 *
 * One endpoint URL; every JSON-RPC request is its own POST with
 * `Content-Type: application/json` and `Accept: application/json,
 * text/event-stream`, plus the server's headers from its Secret. The answer
 * is a JSON body or an SSE stream (parsed as it arrives with mcp/sse; the
 * transfer stops at the response to the request's id; notifications and
 * server requests on the stream are skipped). Bounds: the whole answer
 * TERN_MCP_MAX_RESPONSE, one message TERN_MCP_MAX_MESSAGE.
 *
 * Connecting: initialize (MCPWIRE_VERSION) -> the server's revision, which
 * must be one we speak -> notifications/initialized; an Mcp-Session-Id the
 * server returns is sent on every later request, with
 * MCP-Protocol-Version. When the server refuses initialize (a JSON-RPC
 * error, or HTTP 400/404/405), the stateless revision is tried instead: no
 * session, _meta on every request (mcpwire). A request answered 404 while
 * a session is open means the session is gone: the client initializes
 * again and re-sends it once (tools/call under the same idempotency key).
 * Redirects are not followed (the headers go to the configured URL only).
 *
 * Errors (negative codes; err says which server, which step and why):
 *   TERN_EUNREACHABLE  the server could not be reached (nothing was sent)
 *   TERN_ETIMEOUT      no answer within the timeout (the request may have
 *                      been received)
 *   TERN_EAUTH         HTTP 401/403: the server refused the credential
 *   TERN_EHTTP         any other unexpected status (*ret_status has it)
 *   TERN_EPARSE        an answer that is not MCP (or the stream ended
 *                      without the response)
 *   TERN_ETOOLARGE     an answer over a bound
 *   TERN_EINVALID      a protocol revision we do not speak
 *   -ECANCELED         the cancel flag was raised
 *   -EIO               the connection broke after the request was sent
 */
#ifndef TERN_MCP_MCPCLIENT_H
#define TERN_MCP_MCPCLIENT_H

#include "base/err.h"
#include "mcp/mcpwire.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mcpclient_config {
    const char *name;           /* the server's name in the spec, for messages */
    const char *url;            /* http(s) endpoint */
    const char *const *headers; /* "Name: value" from the Secret (copied), or NULL */
    size_t nheaders;
    long connect_timeout_ms; /* 0 = 5000 */
    atomic_bool *cancel;     /* may be NULL */
};

struct mcpclient;

/* A client (strings copied); nothing is sent until the first call. Free
 * with mcpclient_free (accepts NULL), which ends an open session with a
 * DELETE (best effort, 2 s). */
struct mcpclient *mcpclient_new(const struct mcpclient_config *cfg);
void mcpclient_free(struct mcpclient *c);

/* Opens the session (see above). Idempotent once connected. */
int mcpclient_connect(struct mcpclient *c, long timeout_ms, struct tern_err *err);

/* The revision in use ("2025-11-25", ..., "2026-07-28"), or NULL before
 * mcpclient_connect succeeded. */
const char *mcpclient_version(const struct mcpclient *c);

/* tools/list, every page (at most TERN_MCP_MAX_PAGES). Connects first when
 * needed. *ret (release with mcpwire_tools_done). */
int mcpclient_list_tools(struct mcpclient *c, long timeout_ms, struct mcpwire_tools *ret,
                         struct tern_err *err);

struct mcpclient_call {
    long http_status;                  /* of the answer */
    bool rpc_error;                    /* a JSON-RPC error answered the call */
    int64_t rpc_code;                  /* ... its code */
    struct mcpwire_call_result result; /* text and isError (for rpc_error: the message) */
};

void mcpclient_call_done(struct mcpclient_call *r);

/* tools/call with Idempotency-Key: idem_key (a header, and in _meta) so a
 * server that honours it answers a repeated call from its record. Returns
 * 0 when the server answered the call (a result or a JSON-RPC error: see
 * *ret), else an error above (*ret_status the HTTP status, 0 if none). */
int mcpclient_call_tool(struct mcpclient *c, const char *tool, const char *args_json,
                        const char *idem_key, long timeout_ms, struct mcpclient_call *ret,
                        long *ret_status, struct tern_err *err);

#endif
