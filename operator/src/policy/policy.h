/* policy.h - the runner's tools and the rules around them (pure).
 *
 * - Tool definitions with strict JSON schemas for exec_command, read_file,
 *   write_file and list_files (run in the sandbox) and publish_branch (run
 *   by the runner); only the tools the spec permits are offered. MCP tools
 *   (run by the runner) come from the servers' lists, offered under the
 *   name <server>__<tool> with the server's inputSchema (docs/tools.md).
 * - Argument validation against those schemas (types, required members, no
 *   extra members, bounds), giving a typed struct policy_args.
 * - The per-call decision: allowed, needs approval (a `tool:glob` pattern of
 *   spec.permissions.requiresApproval matched against the call's main
 *   argument; "mcp:<server>/<tool glob>:<arguments glob>" for MCP tools), or
 *   denied (tool not permitted, path outside the workspace,
 *   write outside writablePaths), plus the call's timeout.
 * - Limits accounting (maxModelTurns, maxToolCalls, maxTokens,
 *   maxCostMicroUSD, wall time) giving limit_reached decisions.
 *
 * Nothing here does I/O. Strings in struct policy_config are borrowed; a
 * struct policy_args owns its strings (policy_args_done).
 */
#ifndef TERN_POLICY_POLICY_H
#define TERN_POLICY_POLICY_H

#include "base/err.h"
#include "base/limits.h"
#include "model/chat.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum policy_tool {
    POLICY_EXEC = 0, /* exec_command {cmd, cwd?, timeoutMs?} */
    POLICY_READ,     /* read_file {path, offset?, limit?} */
    POLICY_WRITE,    /* write_file {path, content, append?} */
    POLICY_LIST,     /* list_files {path, depth?} */
    POLICY_PUBLISH,  /* publish_branch {repo, branch, remote, remoteBranch?}: the runner pushes */
    POLICY_MEMORY,   /* propose_memory_update {reason, replace_section}: the runner records
                      * a proposal (memory/memprop; offered when spec.memory is set) */
    POLICY_MCP,      /* <server>__<tool> {...}: the runner calls an MCP server */
    POLICY_NTOOLS
};

#define POLICY_NSANDBOX 4 /* the first four run in the sandbox */
/* definitions offered at most: the fixed tools and the MCP ones */
#define POLICY_MAX_DEFS (POLICY_NTOOLS + TERN_MCP_MAX_OFFERED)

#define POLICY_FILE_TIMEOUT_MS 30000    /* file tools */
#define POLICY_EXEC_TIMEOUT_MS 120000   /* exec_command without timeoutMs */
#define POLICY_PUBLISH_TIMEOUT_MS 300000 /* publish_branch: bundle, fetch, push */
#define POLICY_MEMORY_TIMEOUT_MS 30000  /* propose_memory_update: reads simple.md */

/* "exec_command", ..., "publish_branch"; NULL for POLICY_MCP (its tools
 * have names of their own) and out-of-range values. */
const char *policy_tool_name(enum policy_tool t);
/* Returns 0 and *ret for the name of a fixed tool, or -ENOENT. */
int policy_tool_from_name(const char *name, enum policy_tool *ret);

/* An MCP tool as offered (strings borrowed from the runner's catalog). */
struct policy_mcp_tool {
    const char *name;        /* offered to the model: <server>__<tool> */
    const char *server;      /* spec.tools.mcpServers[].name */
    const char *tool;        /* the server's tool name */
    const char *description; /* the server's (bounded, untrusted) */
    const char *schema;      /* inputSchema, compact JSON (bounded) */
    int64_t timeout_ms;      /* the server's timeoutSeconds */
};

struct policy_limits { /* 0 = unlimited */
    int64_t max_model_turns;
    int64_t max_tool_calls;
    int64_t max_tokens;          /* prompt + completion over the session */
    int64_t max_cost_micro_usd;
    int64_t timeout_ms;          /* wall time of the session */
};

struct policy_config {
    unsigned tools;                   /* bit (1u << enum policy_tool) per permitted tool */
    const char *const *approval;      /* requiresApproval: "tool:glob" */
    size_t napproval;
    const char *const *writable;      /* writablePaths globs, relative to the workspace */
    size_t nwritable;
    int64_t exec_max_timeout_ms;      /* longest exec the model may ask for; 0 = default 120 s */
    struct policy_limits limits;
    /* trusted tools: publish_branch remotes (bit POLICY_PUBLISH when any),
     * the MCP tools the servers listed and the spec allows (bit POLICY_MCP) */
    const char *const *remotes;
    size_t nremotes;
    const char *publish_schema;       /* publish_branch parameters (policy_publish_schema), or NULL */
    const struct policy_mcp_tool *mcp;
    size_t nmcp;
};

/* Checks the config's patterns (each approval entry is "<tool>:<glob>" with
 * a known tool name and a valid glob, or "mcp:<server>/<tool glob>:<arguments
 * glob>"; writable globs valid; counts within TERN_POLICY_MAX_PATTERNS).
 * Returns 0 or TERN_EINVALID with the entry in err. */
int policy_config_validate(const struct policy_config *cfg, struct tern_err *err);

/* Fills out[] with the definitions of the permitted fixed tools, in enum
 * order (publish_branch with cfg->publish_schema when set); returns how
 * many. The strings are static or borrowed from cfg. */
size_t policy_tool_defs(const struct policy_config *cfg, struct chat_tool_def out[POLICY_NTOOLS]);

/* Appends the definitions of cfg's MCP tools (not strict: the servers'
 * schemas follow no strict-mode rules) to out[0..max); returns how many. */
size_t policy_mcp_defs(const struct policy_config *cfg, struct chat_tool_def *out, size_t max);

/* publish_branch's parameters with the remote names as an enum (a new
 * string). */
char *policy_publish_schema(const char *const *remotes, size_t n);

/* Whether name is a usable branch name (git check-ref-format's rules for
 * one refs/heads/ name, at most TERN_PUBLISH_MAX_REF bytes, printable
 * ASCII). */
bool policy_branch_ok(const char *name);

struct policy_args {
    enum policy_tool tool;
    char *cmd;          /* exec */
    char *cwd;          /* exec, normalised relative path, or NULL */
    int64_t timeout_ms; /* exec, requested, or -1 */
    char *path;         /* file tools: normalised relative path ("." = workspace root) */
    int64_t offset;     /* read, or -1 */
    int64_t limit;      /* read, or -1 */
    char *content;      /* write */
    bool append;        /* write */
    int64_t depth;      /* list, or -1 */
    /* publish_branch: path is the repository (normalised) */
    char *branch;        /* the local branch */
    char *remote;        /* a name of spec.tools.publish.remotes */
    char *remote_branch; /* the branch at the remote (default: branch) */
    char *target;        /* "<remote>/<remote_branch>": what patterns match */
    /* propose_memory_update: content is the section's new body */
    char *reason;        /* why (memprop bounds) */
    char *heading;       /* the section's heading line: what patterns match */
    /* MCP */
    const struct policy_mcp_tool *mcp; /* borrowed from the config */
    char *json;          /* the arguments, compact JSON: what patterns match */
};

/* Validates arguments (JSON text) of a call to tool against its schema and
 * normalises paths. Returns 0 and *ret, or TERN_EINVALID with a message fit
 * to send back to the model in err (e.g. "path: must be a string", "unknown
 * member \"foo\"", "path: escapes the workspace"). */
int policy_parse_args(enum policy_tool tool, const char *arguments, struct policy_args *ret,
                      struct tern_err *err);
void policy_args_done(struct policy_args *a);

/* A call by its offered name: a fixed tool (publish_branch's remote must
 * be one of cfg's) or one of cfg's MCP tools (arguments checked against
 * its inputSchema, mcpwire_check_args). Returns 0 and *ret, TERN_ENOTFOUND
 * for a name that is not offered, or TERN_EINVALID with a message fit for
 * the model. */
int policy_parse_call(const struct policy_config *cfg, const char *name, const char *arguments,
                      struct policy_args *ret, struct tern_err *err);

/* What a human is asked to approve (a new string): the command, the path,
 * "push branch B of REPO to REMOTE as RB", "<server>/<tool> <arguments>". */
char *policy_summary(const struct policy_args *a);

/* Normalises a workspace path: "/workspace/x", "./x", "x//y/./z" ->
 * "x/y/z"; "" and "/workspace" -> "."; rejects ".." components, other
 * absolute paths, NUL-free control characters and paths longer than
 * TERN_POLICY_MAX_PATH. Returns 0 and *ret (owned), or TERN_EINVALID. */
int policy_normalize_path(const char *in, char **ret, struct tern_err *err);

/* The argument approval patterns are matched against: cmd for exec, the
 * normalised path for file tools, "<remote>/<remoteBranch>" for
 * publish_branch, the heading for propose_memory_update, the compact JSON arguments for MCP tools. Borrowed from a. */
const char *policy_main_arg(const struct policy_args *a);

enum policy_verdict {
    POLICY_ALLOW = 0,
    POLICY_NEEDS_APPROVAL,
    POLICY_DENY,
};

struct policy_decision {
    enum policy_verdict verdict;
    const char *pattern;  /* NEEDS_APPROVAL: the matching entry (borrowed from cfg) */
    char reason[TERN_ERRMSG_MAX]; /* DENY: why, fit for the model */
    int64_t timeout_ms;   /* the call's timeout */
    bool timeout_clamped; /* the requested exec timeout was above the bound */
};

/* Decides one validated call. Denial comes first (tool not permitted, write
 * outside writablePaths), then approval patterns, in config order. Pure. */
void policy_decide(const struct policy_config *cfg, const struct policy_args *a,
                   struct policy_decision *ret);

/* True when "tool:glob" pattern matches the call (exported for tests and
 * the approval summary). An MCP call is matched by
 * "mcp:<server>/<tool glob>:<arguments glob>": the server by name, the tool
 * glob against the server's tool name, the arguments glob against the
 * compact JSON arguments (both text globs: * matches anything). */
bool policy_pattern_matches(const char *pattern, const struct policy_args *a);

struct policy_usage {
    int64_t model_turns;      /* model responses recorded */
    int64_t tool_calls;       /* tool calls executed or started */
    int64_t tokens;           /* prompt + completion */
    int64_t cost_micro_usd;
    int64_t elapsed_ms;       /* since the session started */
};

enum policy_limit {
    POLICY_LIMIT_NONE = 0,
    POLICY_LIMIT_MODEL_TURNS,
    POLICY_LIMIT_TOOL_CALLS,
    POLICY_LIMIT_TOKENS,
    POLICY_LIMIT_COST,
    POLICY_LIMIT_TIME,
};

enum policy_stage {
    POLICY_BEFORE_MODEL, /* about to call the model */
    POLICY_BEFORE_TOOL,  /* about to run a tool call */
};

/* The first limit the usage has reached for this stage, or
 * POLICY_LIMIT_NONE. A limit is reached when usage >= limit (so
 * maxModelTurns = 3 allows three model calls). Model turns count only
 * before a model call, tool calls only before a tool call; tokens, cost and
 * time at both. Pure. */
enum policy_limit policy_check_limits(const struct policy_limits *l, const struct policy_usage *u,
                                      enum policy_stage stage);
/* "maxModelTurns", "maxToolCalls", "maxTokens", "maxCostMicroUSD",
 * "timeoutSeconds", or "none". */
const char *policy_limit_name(enum policy_limit l);

#endif
