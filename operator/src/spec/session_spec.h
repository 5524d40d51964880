/* session_spec.h - the AgentSession spec as a validated C struct.
 *
 * session_spec_parse turns an AgentSession object (cJSON, e.g. from
 * json_parse or yamljson_parse_one) into a struct session_spec: every field
 * of spec validated with the same bounds as crds/agentsessions.tern.dev.yaml
 * (including what the CRD checks with CEL and list types), unknown fields
 * rejected, and the CRD's defaults applied to absent fields, so the struct is
 * the same whether or not the API server defaulted the object first. Errors
 * name the field path: "spec.limits.maxToolCalls: must be >= 1".
 *
 * Ownership: the struct owns every string and array in it (copies; the cJSON
 * may be freed right after parsing). Free with session_spec_free.
 */
#ifndef TERN_SESSION_SPEC_H
#define TERN_SESSION_SPEC_H

#include "base/err.h"
#include "spec/quantity.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Defaults (the CRD's `default:` values; a unit test checks they agree). */
#define SESSION_DEFAULT_TIMEOUT_SECONDS      3600
#define SESSION_DEFAULT_MAX_MODEL_TURNS      50
#define SESSION_DEFAULT_MAX_TOOL_CALLS       200
#define SESSION_DEFAULT_MAX_TOKENS           2000000
#define SESSION_DEFAULT_MAX_COST_MICRO_USD   0 /* 0 = no cost limit */
#define SESSION_DEFAULT_MAX_RESULT_ATTEMPTS  3 /* answers checked against spec.result.schema */
#define SESSION_DEFAULT_CPU                  "1"
#define SESSION_DEFAULT_MEMORY               "1Gi"
#define SESSION_DEFAULT_MODEL                "gpt-5.6-mini"
#define SESSION_DEFAULT_BASE_URL             "https://api.openai.com/v1"
#define SESSION_DEFAULT_WORKSPACE_SIZE       "5Gi"
#define SESSION_DEFAULT_IDLE_SUSPEND_SECONDS 600
#define SESSION_MAX_TTL_SECONDS 31536000 /* spec.ttlSecondsAfterFinished: a year */
#define SESSION_DEFAULT_APPROVAL_TIMEOUT     86400
#define SESSION_DEFAULT_MCP_TIMEOUT          60
#define SESSION_DEFAULT_PUBLISH_USERNAME     "x-access-token"
/* clang-format off */
#define SESSION_DEFAULT_WRITABLE {"working/**", "output/**"}
/* clang-format on */

/* Bounds (the CRD's maxLength/maxItems/maximum). */
#define SESSION_MAX_NAME           48 /* metadata.name */
#define SESSION_MAX_OBJECTIVE      32768
#define SESSION_MAX_CONTEXT_TEXT   65536
#define SESSION_MAX_CONTEXT_FILES  32
#define SESSION_MAX_REFERENCES     32
#define SESSION_MAX_REFERENCE_LEN  2048
#define SESSION_MAX_SKILLS         16
#define SESSION_MAX_MESSAGES       256
#define SESSION_MAX_MESSAGE_LEN    8192
#define SESSION_MAX_APPROVAL_RULES 64
#define SESSION_MAX_PATTERN_LEN    512
#define SESSION_MAX_WRITABLE       32
#define SESSION_MAX_NETWORK        32
#define SESSION_MAX_SECONDS        2592000 /* 30 days */
#define SESSION_MAX_MODEL_TURNS    100000
#define SESSION_MAX_TOOL_CALLS     1000000
#define SESSION_MAX_TOKENS         1000000000000LL
#define SESSION_MAX_COST_MICRO_USD 1000000000000LL
#define SESSION_MAX_MODEL_NAME     256
#define SESSION_MAX_URL            2048
#define SESSION_MAX_IMAGE          512
#define SESSION_MAX_FORK_UID       128
#define SESSION_MAX_MCP_SERVERS    8   /* spec.tools.mcpServers */
#define SESSION_MAX_MCP_NAME       16  /* a server name (<server>__<tool> fits 64) */
#define SESSION_MAX_MCP_ALLOWED    64  /* allowedTools of one server */
#define SESSION_MAX_MCP_TOOL       46  /* an allowed tool name */
#define SESSION_MAX_MCP_TIMEOUT    600 /* mcpServers[].timeoutSeconds */
#define SESSION_MAX_REMOTES        8   /* spec.tools.publish.remotes */
#define SESSION_MAX_REMOTE_NAME    32
#define SESSION_MAX_USERNAME       256

/* Tools, as bits of session_spec.permissions.tools. */
enum session_tool {
    SESSION_TOOL_EXEC_COMMAND = 1u << 0,
    SESSION_TOOL_READ_FILE = 1u << 1,
    SESSION_TOOL_WRITE_FILE = 1u << 2,
    SESSION_TOOL_LIST_FILES = 1u << 3,
};
#define SESSION_TOOLS_ALL 0xfu
/* The trusted tools, as kinds of approval rules only (never in
 * permissions.tools: they are offered when spec.tools configures them).
 * An MCP rule's glob is everything after "mcp:":
 * "<server>/<tool glob>:<arguments glob>". */
#define SESSION_TOOL_PUBLISH_BRANCH (1u << 4)
#define SESSION_TOOL_MCP            (1u << 5)

/* The tool bit for a sandbox tool's name ("exec_command"), or 0 if unknown
 * (publish_branch and mcp are not names of permissions.tools). */
unsigned session_tool_from_name(const char *name);
/* The name of one tool bit ("publish_branch", "mcp" for the trusted
 * kinds); NULL for anything else. */
const char *session_tool_name(unsigned tool);

enum session_on_timeout { SESSION_ON_TIMEOUT_DENY = 0, SESSION_ON_TIMEOUT_FAIL };

struct session_approval_rule {
    unsigned tool; /* one SESSION_TOOL_* bit */
    char *glob;    /* matched against the command (exec_command) or path */
};

/* spec.tools.mcpServers[i]: an MCP server the runner calls (docs/tools.md). */
struct session_mcp_server {
    char *name;             /* DNS label, at most SESSION_MAX_MCP_NAME */
    char *url;              /* http(s), no user information */
    char *headers_secret;   /* headersSecretRef.name: every key is a header; NULL = none */
    char **allowed;         /* allowedTools: the tools offered to the model */
    size_t nallowed;
    int64_t timeout_seconds;
};

/* spec.tools.publish.remotes[i]: where publish_branch may push. */
struct session_publish_remote {
    char *name;
    char *url;              /* http(s), no user information */
    char *token_secret;     /* tokenSecretRef.name */
    char *token_key;        /* tokenSecretRef.key */
    char *username;         /* Basic auth user name (default x-access-token) */
    bool bearer;            /* auth: Bearer (else Basic username:token) */
};

struct session_cidr {
    int family;       /* AF_INET or AF_INET6 */
    uint8_t addr[16]; /* network byte order; 4 bytes used for AF_INET */
    int prefix;       /* 0..32 or 0..128 */
    char *text;       /* as written */
};

/* A host entry of networkAllowlist: "pypi.org", "*.githubusercontent.com",
 * "example.com:8443". Names are lower case, at least two labels, the last
 * starting with a letter (so no IP address is ever taken for a name). */
struct session_host {
    char *name;    /* without "*." and port, e.g. "githubusercontent.com" */
    bool wildcard; /* "*.name": any name ending in ".name" (any depth), not name itself */
    int port;      /* 1..65535, or 0: ports 80 and 443 */
    char *text;    /* as written */
};
#define SESSION_MAX_HOST_NAME  253 /* a host name without "*." and port */
#define SESSION_MAX_ALLOW_ITEM 261 /* "*." + 253 + ":65535" */

struct session_spec {
    /* metadata (NULL when absent) */
    char *name;
    char *namespace;
    char *uid;
    int64_t generation; /* 0 when absent */

    char *objective;
    char *service_account; /* identity.serviceAccountName; NULL = default */

    struct {
        char *text;   /* NULL when absent */
        char **files; /* ConfigMap names */
        size_t nfiles;
        char **references;
        size_t nreferences;
    } context;
    char **skills; /* ConfigMap names */
    size_t nskills;
    char *memory; /* ConfigMap name or NULL */
    char **messages;
    size_t nmessages;

    struct {
        unsigned tools; /* SESSION_TOOL_* bits */
        struct session_approval_rule *approvals;
        size_t napprovals;
        char **writable; /* workspace-relative globs */
        size_t nwritable;
        struct session_cidr *network; /* the CIDR entries of networkAllowlist */
        size_t nnetwork;
        struct session_host *hosts;   /* its host entries, in order */
        size_t nhosts;
    } permissions;

    struct {
        struct session_mcp_server *mcp;
        size_t nmcp;
        struct session_publish_remote *remotes;
        size_t nremotes;
    } tools; /* spec.tools: run by the runner, never in the sandbox */

    struct {
        int64_t timeout_seconds;
        int64_t max_model_turns;
        int64_t max_tool_calls;
        int64_t max_tokens;
        int64_t max_cost_micro_usd; /* 0 = no limit */
        int64_t max_result_attempts; /* 1..TERN_RESULT_MAX_ATTEMPTS */
        struct quantity cpu;
        struct quantity memory;
    } limits;

    struct {
        char *name;
        char *base_url;
        char *api_key_secret; /* NULL = no key */
        char *api_key_key;
    } model;

    struct {
        char *image;         /* NULL = the operator's --sandbox-image */
        char *runtime_class; /* NULL = cluster default */
        struct quantity workspace_size;
        char *storage_class;          /* NULL = cluster default */
        int64_t idle_suspend_seconds; /* 0 = never */
    } sandbox;

    struct {
        int64_t timeout_seconds;
        enum session_on_timeout on_timeout;
    } approval;

    /* spec.result.schema: the final answer's JSON Schema (json/jschema's
     * subset, checked), a copy owned by the struct; NULL = a free-text answer */
    cJSON *result_schema;

    bool suspend;
    /* spec.ttlSecondsAfterFinished: a finished session (Succeeded or Failed,
     * nothing new since) is deleted this long after its last event; -1 =
     * unset (the operator's default applies), 0 = delete at once */
    int64_t ttl_seconds_after_finished;

    /* spec.retainArtifacts: persisted artifacts outlive the session until
     * ttl_seconds after they were stored (docs/operator.md, "Artifacts");
     * unset: they are owned by the session and go with it */
    struct {
        bool set;
        int64_t ttl_seconds;
    } retain_artifacts;

    struct {
        bool set;
        char *session;
        char *uid;
        int64_t at_seq;
    } fork_from;
};

/* Parses and validates an AgentSession object (apiVersion/kind checked when
 * present; metadata optional; status ignored). Returns 0 and *ret (owned by
 * the caller), or TERN_EINVALID with "field.path: reason" in err. */
int session_spec_parse(const cJSON *obj, struct session_spec **ret, struct tern_err *err);

/* Frees a spec; accepts NULL. */
void session_spec_free(struct session_spec *s);

/* The update rules the CRD enforces with CEL transition rules: forkFrom can
 * be neither added, removed nor changed; messages is append-only. Returns 0 or
 * TERN_EINVALID with the field path in err. */
int session_spec_check_update(const struct session_spec *old, const struct session_spec *cur,
                              struct tern_err *err);

/* Whether a call of tool on subject (the command for exec_command,
 * "<remote>/<branch>" for publish_branch, the workspace-relative path
 * otherwise) needs approval under spec. Globs as in base/glob.h: GLOB_TEXT
 * for exec_command and publish_branch, GLOB_PATH otherwise. MCP rules are
 * matched by policy/ (policy_pattern_matches), which splits them. */
bool session_spec_requires_approval(const struct session_spec *s, unsigned tool,
                                    const char *subject);

/* Whether the workspace-relative path may be written under spec (some
 * writablePaths glob matches it in GLOB_PATH mode). */
bool session_spec_path_writable(const struct session_spec *s, const char *path);

/* Parses "a.b.c.d/n" or an IPv6 "x::y/n". Returns 0 and *ret (ret->text is
 * left NULL) or -EINVAL. */
int session_cidr_parse(const char *text, struct session_cidr *ret);

/* Parses a host entry ("pypi.org", "*.example.com", "example.com:8443").
 * Returns 0 and *ret (ret->name newly allocated, ret->text left NULL), or
 * -EINVAL with *why (static) saying what is wrong. */
int session_host_parse(const char *text, struct session_host *ret, const char **why);

/* Whether host entry h admits a connection to name:port (name lower case,
 * without a trailing dot). Pure. */
bool session_host_match(const struct session_host *h, const char *name, int port);

/* Whether address addr (4 or 16 bytes, family AF_INET/AF_INET6) lies in c. */
bool session_cidr_contains(const struct session_cidr *c, int family, const uint8_t *addr);

#endif
