/* config.h - tern-runner's configuration: environment and session spec.
 *
 * Environment (docs/design.md, "Contracts between the parts": tern-runner):
 * TERN_NAMESPACE, TERN_SESSION, TERN_SESSION_UID, TERN_TURN,
 * TERN_ETCD_ENDPOINTS, TERN_SANDBOX_TOKEN_FILE, OPENAI_BASE_URL (else
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
 * TERN_TEST_CRASH_AFTER_RESERVE=1 right after a budget reservation (before
 * the model call); TERN_TEST_CLOCK_OFFSET_SECONDS=N moves the clock budget
 * windows are computed with (the operator passes its own).
 *
 * The environment is read through a lookup function so tests need no
 * setenv. Everything parsed is owned by the struct (runner_config_done).
 */
#ifndef TERN_RUNNER_CONFIG_H
#define TERN_RUNNER_CONFIG_H

#include "base/err.h"
#include "policy/policy.h"

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

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
    char *model;              /* default gpt-5.6-mini */
    char *base_url;           /* or NULL */
    char *uid;                /* metadata.uid, or NULL */
    cJSON *labels;            /* metadata.labels (for AgentBudget selectors), or NULL */
};

struct runner_config {
    char *ns, *session, *uid, *owner;
    int64_t turn;
    char *etcd_endpoints;
    char *sandbox_addr;       /* or NULL (then read from the AgentSession) */
    char *sandbox_token;      /* contents of TERN_SANDBOX_TOKEN_FILE, trimmed */
    char *base_url, *api_key, *org, *project;
    char *spec_file;          /* or NULL */
    char *prices_file;        /* or NULL */
    int64_t lock_ttl_s;
    int64_t lock_wait_ms;
    int64_t model_timeout_ms;
    int64_t model_max_retries;
    int64_t max_completion_tokens;
    int64_t crash_after_appends; /* test hook; 0 = off */
    int64_t clock_offset_s;      /* test hook: TERN_TEST_CLOCK_OFFSET_SECONDS, seconds added
                                  * to the clock of budget windows */
    int64_t crash_after_reserve; /* test hook: TERN_TEST_CRASH_AFTER_RESERVE=1 */
    struct runner_spec spec;
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

/* Reads a whole file of at most max bytes (NUL-terminated, owned). Returns
 * 0, or TERN_EINVALID naming the file and the reason. */
int runner_read_file(const char *path, size_t max, char **ret, struct tern_err *err);

/* The policy view of a spec (strings borrowed from spec). The exec timeout
 * bound is the session's timeoutSeconds, capped at one hour. */
void runner_spec_policy(const struct runner_spec *s, struct policy_config *ret);

#endif
