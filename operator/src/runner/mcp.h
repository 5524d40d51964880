/* mcp.h - the runner's MCP tools: the servers of spec.tools.mcpServers,
 * their allowed tools as a catalog for the policy, and calls.
 *
 * The catalog: every server's tools/list (mcp/mcpclient), kept only for
 * the names in its allowedTools that the server lists with a usable name
 * and schema (mcp/mcpwire), offered as <server>__<tool>, at most
 * TERN_MCP_MAX_OFFERED in all. Descriptions and schemas are the server's
 * (untrusted, bounded). A call goes to its own server only, with the
 * headers of that server's Secret and the call's idempotency key.
 */
#ifndef TERN_RUNNER_MCP_H
#define TERN_RUNNER_MCP_H

#include "base/err.h"
#include "policy/policy.h"
#include "runner/config.h"

#include <stdatomic.h>
#include <stddef.h>

struct mcp_tools;

/* The servers of spec (borrowed; outlives it). Nothing is sent yet. */
struct mcp_tools *mcp_tools_new(const struct runner_spec *spec, atomic_bool *stop);
void mcp_tools_free(struct mcp_tools *m);

/* Lists every server's tools and builds the catalog. Returns 0, or the
 * first server's error (mcpclient's codes: TERN_EAUTH for a refused
 * credential, TERN_EUNREACHABLE, ...), err naming it. notes gets a line
 * per allowed tool that is not offered, and why. */
int mcp_tools_load(struct mcp_tools *m, char *notes, size_t notes_len, struct tern_err *err);

/* The catalog (valid until mcp_tools_free). */
const struct policy_mcp_tool *mcp_tools_catalog(const struct mcp_tools *m, size_t *ret_n);

struct mcp_outcome {
    const char *status; /* completed | failed | error | timeout */
    char *text;         /* unsanitized (the caller sanitizes), owned */
    long http_status;
};

void mcp_outcome_done(struct mcp_outcome *o);

/* Calls the tool of a (POLICY_MCP) with idem_key. Returns 0 with *ret for
 * every answer worth telling the model (a result, a tool error, a JSON-RPC
 * error, a refused credential, an HTTP error after retries, a timeout), or
 * a retryable error when the server could not be reached or the
 * connection broke. */
int mcp_tools_call(struct mcp_tools *m, const struct policy_args *a, const char *idem_key,
                   int64_t timeout_ms, struct mcp_outcome *ret, struct tern_err *err);

#endif
