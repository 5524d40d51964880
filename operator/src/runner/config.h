/* config.h - tern-runner's configuration: environment and session spec.
 *
 * Environment (docs/design.md, "Contracts between the parts": tern-runner):
 * TERN_NAMESPACE, TERN_SESSION, TERN_SESSION_UID, TERN_TURN,
 * TERN_ETCD_ENDPOINTS (with TERN_ETCD_CA_FILE, TERN_ETCD_CERT_FILE,
 * TERN_ETCD_KEY_FILE, TERN_ETCD_USERNAME, TERN_ETCD_PASSWORD_FILE for a
 * locked journal), TERN_SANDBOX_TOKEN_FILE, OPENAI_BASE_URL (else
 * spec.model.baseURL, else https://api.openai.com/v1), OPENAI_API_KEY, plus
 * optional OPENAI_ORG_ID, OPENAI_PROJECT_ID. Normally the AgentSession is
 * read through the Kubernetes API (waiting up to TERN_SANDBOX_WAIT_MS for a
 * ready sandbox); standalone mode (tests, benchmarks; docs/runner.md):
 * TERN_SESSION_SPEC_FILE (an AgentSession as JSON, or just its spec) and
 * TERN_SANDBOX_ADDR (HOST:PORT) replace reading the AgentSession. Tuning:
 * TERN_PRICES_FILE, TERN_RUNNER_OWNER (default HOSTNAME),
 * TERN_LOCK_TTL_SECONDS (default 10), TERN_LOCK_WAIT_MS (default TTL + 5 s),
 * TERN_MODEL_TIMEOUT_MS, TERN_MODEL_MAX_RETRIES, TERN_MAX_COMPLETION_TOKENS.
 * Test hooks: TERN_TEST_CRASH_AFTER_APPENDS=N makes the runner SIGKILL itself
 * right after its Nth committed append (a crash exactly at a step boundary);
 * TERN_TEST_CRASH_AT=<point> at a named point inside a trusted tool call
 * (docs/runner.md); TERN_TEST_CRASH_AFTER_RESERVE=1 right after a budget
 * reservation (before the model call); TERN_TEST_CLOCK_OFFSET_SECONDS=N
 * moves the clock budget windows are computed with (the operator passes its
 * own). TERN_TRUSTED_DIR (default RUNNER_TRUSTED_DIR): where the credentials
 * of spec.tools are mounted.
 *
 * The environment is read through a lookup function so tests need no
 * setenv. Everything parsed is owned by the struct (runner_config_done).
 */
#ifndef TERN_RUNNER_CONFIG_H
#define TERN_RUNNER_CONFIG_H

#include "base/err.h"
#include "policy/policy.h"
#include "trusted/sanitize.h"

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* spec.tools.mcpServers[i] as the runner uses it. */
struct runner_mcp_server {
    char *name, *url;
    char *headers_secret;     /* the Secret's name (its files are the headers), or NULL */
    char **headers;           /* "Name: value", loaded by runner_trusted_load */
    size_t nheaders;
    char **allowed;           /* allowedTools */
    size_t nallowed;
    int64_t timeout_ms;
};

/* spec.tools.publish.remotes[i]. */
struct runner_remote {
    char *name, *url, *username;
    bool bearer;
    char *token;              /* loaded by runner_trusted_load */
};

#define RUNNER_TRUSTED_DIR "/var/run/tern/trusted" /* TERN_TRUSTED_DIR's default */

/* The parts of an AgentSession spec the runner uses. */
struct runner_spec {
    char *objective;
    char *context_text;       /* or NULL */
    char **references;
    size_t nreferences;
    char **messages;          /* spec.messages */
    size_t nmessages;
    unsigned tools;           /* bit (1u << enum policy_tool) */
    char **approval;          /* "tool:glob" */
    size_t napproval;
    char **writable;          /* default: everything under working/ and output/ */
    size_t nwritable;
    struct policy_limits limits; /* defaults as the CRD's */
    cJSON *result_schema;     /* spec.result.schema (json/jschema, checked), or NULL */
    int64_t max_result_attempts; /* spec.limits.maxResultAttempts */
    char *model;              /* default gpt-5.6-mini */
    char *base_url;           /* or NULL */
    char *uid;                /* metadata.uid, or NULL */
    cJSON *labels;            /* metadata.labels (for AgentBudget selectors), or NULL */
    struct runner_mcp_server *mcp; /* spec.tools.mcpServers */
    size_t nmcp;
    struct runner_remote *remotes; /* spec.tools.publish.remotes */
    size_t nremotes;
    char **remote_names;      /* the remotes' names (policy_config.remotes) */
    bool memory;              /* spec.memory is set: propose_memory_update is offered */
};

struct runner_config {
    char *ns, *session, *uid, *owner;
    int64_t turn;
    char *etcd_endpoints;
    /* TERN_ETCD_CA_FILE, _CERT_FILE, _KEY_FILE, _USERNAME, _PASSWORD_FILE
     * (each NULL when unset): the session's etcd user on a locked journal */
    char *etcd_ca_file, *etcd_cert_file, *etcd_key_file, *etcd_username, *etcd_password_file;
    char *sandbox_addr;       /* or NULL (then read from the AgentSession) */
    char *sandbox_token;      /* contents of TERN_SANDBOX_TOKEN_FILE, trimmed */
    char *base_url, *api_key, *org, *project;
    char *spec_file;          /* or NULL */
    char *prices_file;        /* or NULL */
    int64_t lock_ttl_s;
    int64_t lock_wait_ms;
    int64_t sandbox_wait_ms;  /* TERN_SANDBOX_WAIT_MS: for its address, then its readiness */
    int64_t model_timeout_ms;
    int64_t model_max_retries;
    int64_t max_completion_tokens;
    int64_t crash_after_appends; /* test hook; 0 = off */
    int64_t clock_offset_s;      /* test hook: TERN_TEST_CLOCK_OFFSET_SECONDS, seconds added
                                  * to the clock of budget windows */
    int64_t crash_after_reserve; /* test hook: TERN_TEST_CRASH_AFTER_RESERVE=1 */
    int64_t snapshot_events;  /* TERN_SNAPSHOT_EVENTS: compact after this many events; 0 = never */
    char *crash_at;           /* test hook TERN_TEST_CRASH_AT: a named point of a trusted tool */
    char *trusted_dir;        /* TERN_TRUSTED_DIR */
    struct runner_spec spec;
    struct sanitize sanitize; /* every credential of spec.tools (runner_trusted_load) */
};

/* Reads the configuration. getenv_fn(ctx, name) returns a value or NULL.
 * Files named by the environment are read (token, spec). Returns 0 and
 * fills *ret, or TERN_EINVALID with the variable / field in err (the runner
 * exits 78). */
int runner_config_load(const char *(*getenv_fn)(void *ctx, const char *name), void *ctx,
                       struct runner_config *ret, struct tern_err *err);
void runner_config_done(struct runner_config *c);

/* Parses an AgentSession (or a bare spec object) into *ret with
 * spec/session_spec (the CRD's validation and defaults), then checks the
 * patterns with policy_config_validate. Pure. Returns 0, or TERN_EINVALID
 * with the field path. */
int runner_spec_parse(const cJSON *obj, struct runner_spec *ret, struct tern_err *err);
void runner_spec_done(struct runner_spec *s);

/* Loads the credentials of spec.tools from dir (the Secrets the operator
 * mounts into the runner pod): dir/mcp/<server>/<header name> for a server
 * with headersSecretRef (each file is one header; names starting with '.'
 * are the kubelet's and skipped) and dir/publish/<remote>/token. Each value
 * (and, for a header, each of its words) of at least
 * TERN_SANITIZE_MIN_SECRET bytes goes into *san; a remote's token also as
 * "<username>:<token>". Returns 0, or TERN_EINVALID naming the file: a
 * missing one, a header name or value that cannot be sent (reserved
 * names, CR/LF), a token shorter than TERN_SANITIZE_MIN_SECRET. */
int runner_trusted_load(struct runner_spec *s, const char *dir, struct sanitize *san,
                        struct tern_err *err);

/* Reads a whole file of at most max bytes (NUL-terminated, owned). Returns
 * 0, or TERN_EINVALID naming the file and the reason. */
int runner_read_file(const char *path, size_t max, char **ret, struct tern_err *err);

/* The policy view of a spec (strings borrowed from spec). The exec timeout
 * bound is the session's timeoutSeconds, capped at one hour. */
void runner_spec_policy(const struct runner_spec *s, struct policy_config *ret);

#endif
