/* mcpwire.h - Model Context Protocol messages (JSON-RPC 2.0), pure.
 *
 * What the runner's MCP client sends and how it reads the answers, with
 * every part of an answer validated and bounded (a server is untrusted
 * input: its tool names, descriptions and schemas go to the model, its
 * results into the journal):
 *
 *   - requests: initialize (protocolVersion MCPWIRE_VERSION, no client
 *     capabilities), notifications/initialized, tools/list (cursor),
 *     tools/call (name, arguments, _meta with the idempotency key); in the
 *     stateless revision (MCPWIRE_VERSION_STATELESS, no initialize) every
 *     request carries _meta io.modelcontextprotocol/{protocolVersion,
 *     clientCapabilities, clientInfo};
 *   - answers: the response to a given id within a JSON body (an object or
 *     a batch array) or one SSE event's data; notifications, server
 *     requests and responses to other ids are told apart and skipped;
 *   - initialize results (the negotiated revision must be one we speak),
 *     tools/list results (tools with a usable name, a bounded description
 *     and an object inputSchema bounded in size and depth; the others are
 *     reported with the reason), tools/call results (text content joined,
 *     other content described, structuredContent when there is no text,
 *     isError);
 *   - call arguments: a JSON object bounded in size and depth, checked
 *     against the top level of the tool's inputSchema (required members,
 *     additionalProperties: false, member types), printed compactly (the
 *     text approval patterns are matched against).
 *
 * Ownership: results are owned by the caller and released with the
 * matching _done function (all accept zeroed structs).
 */
#ifndef TERN_MCP_MCPWIRE_H
#define TERN_MCP_MCPWIRE_H

#include "base/err.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MCPWIRE_VERSION           "2025-11-25" /* sent in initialize */
#define MCPWIRE_VERSION_STATELESS "2026-07-28" /* no initialize; _meta on every request */
#define MCPWIRE_CLIENT_NAME       "tern-runner"
#define MCPWIRE_CLIENT_VERSION    "0.1.0"
#define MCPWIRE_META_IDEMPOTENCY  "dev.tern/idempotencyKey" /* _meta of tools/call */

/* True for a protocol revision this client speaks after initialize
 * (2025-03-26, 2025-06-18, 2025-11-25). */
bool mcpwire_version_ok(const char *v);

/* Request bodies (new strings). id > 0. stateless adds the per-request
 * _meta of MCPWIRE_VERSION_STATELESS. */
char *mcpwire_initialize(int64_t id);
char *mcpwire_initialized(void);
char *mcpwire_tools_list(int64_t id, const char *cursor, bool stateless);
/* args_json: a JSON object text (checked by the caller, mcpwire_check_args);
 * idem_key (may be NULL) goes to params._meta[MCPWIRE_META_IDEMPOTENCY]. */
char *mcpwire_tools_call(int64_t id, const char *tool, const char *args_json, const char *idem_key,
                         bool stateless);

enum mcpwire_match {
    MCPWIRE_NOT_OURS = 0, /* a notification, a server request, another id */
    MCPWIRE_RESULT,       /* the response to want_id with a result */
    MCPWIRE_ERROR,        /* the response to want_id with an error */
};

struct mcpwire_reply {
    enum mcpwire_match kind;
    cJSON *result; /* RESULT: the result object (owned) */
    int64_t code;  /* ERROR: the JSON-RPC error code */
    char *message; /* ERROR: its message (bounded), owned */
};

void mcpwire_reply_done(struct mcpwire_reply *r);

/* Looks for the response to want_id in one JSON text (a message, or a
 * batch array of them). Returns 0 with *ret (kind NOT_OURS when the text
 * holds no response to want_id), or TERN_EPARSE / TERN_ETOOLARGE for text
 * that is not a JSON-RPC message (err says why). */
int mcpwire_find_reply(const char *text, size_t n, int64_t want_id, struct mcpwire_reply *ret,
                       struct tern_err *err);

/* The revision an initialize result names. Returns 0 and *ret_version
 * (owned), or TERN_EINVALID when it is missing or one we do not speak. */
int mcpwire_parse_initialize(const cJSON *result, char **ret_version, struct tern_err *err);

struct mcpwire_tool {
    char *name;
    char *description; /* bounded, control characters replaced; "" if none */
    char *schema;      /* compact JSON of inputSchema */
    char *problem;     /* why it cannot be offered, or NULL (then usable) */
};

struct mcpwire_tools {
    struct mcpwire_tool *tools;
    size_t n;
    char *next_cursor; /* or NULL */
};

void mcpwire_tools_done(struct mcpwire_tools *t);

/* Appends the tools of one tools/list result to *acc (at most
 * TERN_MCP_MAX_LISTED in total) and sets acc->next_cursor. A tool whose
 * name is unusable (not 1..TERN_MCP_MAX_TOOL_NAME of [A-Za-z0-9_-]) or
 * whose inputSchema is missing, not an object of type "object", larger
 * than TERN_MCP_MAX_SCHEMA or deeper than TERN_MCP_MAX_SCHEMA_DEPTH is
 * kept with a problem. Returns 0, or TERN_EINVALID for a result that is not
 * a tools list, TERN_ETOOLARGE past the bound. */
int mcpwire_parse_tools(const cJSON *result, struct mcpwire_tools *acc, struct tern_err *err);

struct mcpwire_call_result {
    char *text;    /* what the model is told (unbounded here; the caller sanitizes and bounds) */
    bool is_error; /* isError: true (a tool error, not a protocol error) */
};

void mcpwire_call_result_done(struct mcpwire_call_result *r);

/* Renders a tools/call result: text content items joined by newlines;
 * images, audio and other content as "[image: image/png, N bytes of
 * base64 not shown]"; resource links as "[resource: URI]", embedded
 * resources with their text; structuredContent printed when there is no
 * text content; resultType "input_required" (stateless revision) as an
 * error (the runner cannot answer a server's question). Returns 0, or
 * TERN_EINVALID for a result that is not an object. */
int mcpwire_parse_call_result(const cJSON *result, struct mcpwire_call_result *ret,
                              struct tern_err *err);

/* Checks a model's arguments for a tool: a JSON object of at most
 * TERN_MCP_MAX_ARGS bytes and TERN_MCP_MAX_ARGS_DEPTH levels that satisfies
 * the top level of schema (required members present; no member outside
 * properties when additionalProperties is false; each member's JSON type
 * as its property's "type" says, when it says). An empty text counts as
 * {}. Returns 0 and *ret_canonical (compact JSON, owned; may be NULL), or
 * TERN_EINVALID with a message fit for the model in err. */
int mcpwire_check_args(const char *schema, const char *args_json, char **ret_canonical,
                       struct tern_err *err);

/* True for a usable tool name: 1..TERN_MCP_MAX_TOOL_NAME of [A-Za-z0-9_-]. */
bool mcpwire_tool_name_ok(const char *name);

#endif
