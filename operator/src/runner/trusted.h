/* trusted.h - the tools the runner executes itself (docs/tools.md).
 *
 * Sandbox tools run in the sandbox through sandboxd. The trusted tools run
 * here, in the runner pod, with credentials the sandbox never sees:
 *   - MCP tools (runner/mcp): <server>__<tool>, called on the server over
 *     Streamable HTTP with the headers of its Secret;
 *   - publish_branch (runner/publish): a branch of a repository in the
 *     workspace, taken from the sandbox as a git bundle and pushed from
 *     here with the remote's token;
 *   - propose_memory_update: a change of one section of simple.md,
 *     checked against the file read through sandboxd and recorded in the
 *     tool_result event (data.memoryProposal) for a human to approve.
 * Both go through the same steps as any tool (journaled tool_call, the
 * approval rules, the limits), and each result goes through the session's
 * sanitizer (trusted/sanitize: every credential value and its encodings
 * replaced, the text bounded) before it reaches the journal or the model.
 *
 * Exactly once: the shell journals tool_call before trusted_execute and
 * tool_result after it. A runner that dies in between calls again under
 * the same idempotency key: an MCP server that honours Idempotency-Key
 * answers from its record; a push finds the remote branch already at the
 * commit and pushes nothing.
 */
#ifndef TERN_RUNNER_TRUSTED_H
#define TERN_RUNNER_TRUSTED_H

#include "base/err.h"
#include "policy/policy.h"
#include "runner/config.h"
#include "runner/sbx.h"

#include <cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>

struct trusted;

/* The trusted tools of one turn. cfg and sbx are borrowed and outlive it. */
struct trusted *trusted_new(const struct runner_config *cfg, struct sbx *sbx, atomic_bool *stop);
void trusted_free(struct trusted *t);

/* True when the spec configures MCP servers (their tools must be listed
 * before a model call or an MCP call can be planned). */
bool trusted_has_mcp(const struct trusted *t);

/* Lists the MCP servers' tools once (later calls return 0 at once) and
 * points pc at the catalog and the publish schema (pc->mcp, pc->nmcp, the
 * POLICY_MCP bit, pc->publish_schema; all owned by t). Returns 0,
 * TERN_EAUTH (a server refused its credential: a configuration problem
 * the turn reports and ends on), or another error (retryable). err says
 * which server. notes (may be NULL) receives why allowed tools are not
 * offered ("tracker/create_issue: not listed by the server"), for the log. */
int trusted_catalog(struct trusted *t, struct policy_config *pc, char *notes, size_t notes_len,
                    struct tern_err *err);

/* A line for the system prompt about the trusted tools (static or owned by
 * t), or NULL when there are none. */
const char *trusted_prompt(const struct trusted *t);

struct trusted_result {
    const char *status; /* "completed", "failed" (the tool reported an error),
                         * "error" (it could not run), "timeout" */
    char *output;       /* for the model: sanitized and bounded (owned) */
    cJSON *extra;       /* members for the tool_result event (owned), or NULL */
    bool redacted;      /* the sanitizer replaced something */
};

void trusted_result_done(struct trusted_result *r);

/* Executes a validated trusted call (POLICY_MCP, POLICY_PUBLISH or
 * POLICY_MEMORY) of the
 * call call_id. Returns 0 with *ret whenever there is a result to journal
 * (also a failed one), or a retryable error (the server unreachable, the
 * sandbox unreachable, cancelled): the turn exits 75 and the next attempt
 * calls again under the same key. *ret_class names such a failure
 * (ToolServerUnreachable, SandboxUnreachable). */
int trusted_execute(struct trusted *t, const char *call_id, const struct policy_args *a,
                    int64_t timeout_ms, struct trusted_result *ret, const char **ret_class,
                    struct tern_err *err);

/* Replaces the credentials in a text for the journal (any tool's output):
 * a new string, bounded to max bytes (0: the sanitizer's bound). */
char *trusted_sanitize(const struct trusted *t, const char *text, size_t max, bool *ret_redacted);

/* The key sent to MCP servers for a call: "tern-" and the first 32 hex
 * digits of SHA-256("<uid>/<callId>") (stable, and not the session's uid).
 * out must hold 40 bytes. */
void trusted_idempotency_key(const char *uid, const char *call_id, char out[40]);

/* The test hook TERN_TEST_CRASH_AT: SIGKILL now when point is the one the
 * configuration names. */
void trusted_crash_point(const struct runner_config *cfg, const char *point);

#endif
