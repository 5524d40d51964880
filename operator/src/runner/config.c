/* config.c - tern-runner environment and session spec reading. */
#include "runner/config.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPEC_MAX_BYTES (1u << 20)

static void strv_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void runner_spec_done(struct runner_spec *s)
{
    if (!s)
        return;
    free(s->objective);
    free(s->context_text);
    strv_free(s->references, s->nreferences);
    strv_free(s->messages, s->nmessages);
    strv_free(s->approval, s->napproval);
    strv_free(s->writable, s->nwritable);
    free(s->model);
    free(s->base_url);
    free(s->uid);
    memset(s, 0, sizeof *s);
}

/* An optional array of strings at obj.key. */
static int str_array(const cJSON *obj, const char *path, const char *key, size_t max,
                     char ***ret, size_t *ret_n, struct tern_err *err)
{
    const cJSON *a = NULL;
    int rc = json_get_array(obj, path, key, JSON_OPTIONAL, &a, err);
    if (rc || !a)
        return rc;
    size_t n = (size_t)cJSON_GetArraySize(a);
    if (n > max)
        return err_set(err, TERN_EINVALID, "%s.%s: at most %zu items", path, key, max);
    char **v = n ? xcalloc(n, sizeof *v) : NULL;
    size_t i = 0;
    for (const cJSON *it = a->child; it; it = it->next, i++) {
        if (!cJSON_IsString(it)) {
            strv_free(v, i);
            return err_set(err, TERN_EINVALID, "%s.%s[%zu]: must be a string", path, key, i);
        }
        v[i] = xstrdup(it->valuestring);
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

static int opt_string(const cJSON *obj, const char *path, const char *key, char **ret,
                      struct tern_err *err)
{
    const char *s = NULL;
    int rc = json_get_string(obj, path, key, JSON_OPTIONAL, &s, err);
    if (rc == 0 && s)
        *ret = xstrdup(s);
    return rc;
}

int runner_spec_parse(const cJSON *obj, struct runner_spec *ret, struct tern_err *err)
{
    struct runner_spec s = {0};
    const cJSON *spec = json_get(obj, "spec");
    const char *path = "spec";
    const cJSON *meta = json_get(obj, "metadata"), *o = NULL;
    int rc;
    char **tools = NULL;
    size_t ntools = 0;

    if (!spec)
        spec = obj;
    if (!cJSON_IsObject(spec))
        return err_set(err, TERN_EINVALID, "spec: must be an object");
    if ((rc = opt_string(meta, "metadata", "uid", &s.uid, err)))
        goto out;
    const char *objective = NULL;
    if ((rc = json_get_string(spec, path, "objective", JSON_REQUIRED, &objective, err)))
        goto out;
    s.objective = xstrdup(objective);

    if ((rc = json_get_object(spec, path, "context", JSON_OPTIONAL, &o, err)))
        goto out;
    if (o && ((rc = opt_string(o, "spec.context", "text", &s.context_text, err)) ||
              (rc = str_array(o, "spec.context", "references", 64, &s.references,
                              &s.nreferences, err))))
        goto out;
    if ((rc = str_array(spec, path, "messages", 1024, &s.messages, &s.nmessages, err)))
        goto out;

    /* permissions (CRD defaults: all tools, default writable paths) */
    s.tools = (1u << POLICY_NTOOLS) - 1;
    o = NULL;
    if ((rc = json_get_object(spec, path, "permissions", JSON_OPTIONAL, &o, err)))
        goto out;
    if (o) {
        if ((rc = str_array(o, "spec.permissions", "tools", 16, &tools, &ntools, err)))
            goto out;
        if (tools) {
            s.tools = 0;
            for (size_t i = 0; i < ntools; i++) {
                enum policy_tool t;
                if (policy_tool_from_name(tools[i], &t) != 0) {
                    rc = err_set(err, TERN_EINVALID, "spec.permissions.tools[%zu]: unknown tool",
                                 i);
                    goto out;
                }
                s.tools |= 1u << t;
            }
        }
        if ((rc = str_array(o, "spec.permissions", "requiresApproval", TERN_POLICY_MAX_PATTERNS,
                            &s.approval, &s.napproval, err)) ||
            (rc = str_array(o, "spec.permissions", "writablePaths", TERN_POLICY_MAX_PATTERNS,
                            &s.writable, &s.nwritable, err)))
            goto out;
    }
    if (!s.writable) {
        s.writable = xcalloc(2, sizeof *s.writable);
        s.writable[0] = xstrdup("working/**");
        s.writable[1] = xstrdup("output/**");
        s.nwritable = 2;
    }

    int64_t timeout_s = 3600;
    s.limits = (struct policy_limits){.max_model_turns = 50, .max_tool_calls = 200,
                                      .max_tokens = 2000000, .max_cost_micro_usd = 0};
    o = NULL;
    if ((rc = json_get_object(spec, path, "limits", JSON_OPTIONAL, &o, err)))
        goto out;
    if (o && ((rc = json_get_int_range(o, "spec.limits", "timeoutSeconds", JSON_OPTIONAL, 1,
                                       2592000, &timeout_s, err)) ||
              (rc = json_get_int_range(o, "spec.limits", "maxModelTurns", JSON_OPTIONAL, 1,
                                       100000, &s.limits.max_model_turns, err)) ||
              (rc = json_get_int_range(o, "spec.limits", "maxToolCalls", JSON_OPTIONAL, 1,
                                       1000000, &s.limits.max_tool_calls, err)) ||
              (rc = json_get_int_range(o, "spec.limits", "maxTokens", JSON_OPTIONAL, 1,
                                       1000000000000LL, &s.limits.max_tokens, err)) ||
              (rc = json_get_int_range(o, "spec.limits", "maxCostMicroUSD", JSON_OPTIONAL, 0,
                                       1000000000000LL, &s.limits.max_cost_micro_usd, err))))
        goto out;
    s.limits.timeout_ms = timeout_s * 1000;

    o = NULL;
    if ((rc = json_get_object(spec, path, "model", JSON_OPTIONAL, &o, err)))
        goto out;
    if (o && ((rc = opt_string(o, "spec.model", "name", &s.model, err)) ||
              (rc = opt_string(o, "spec.model", "baseURL", &s.base_url, err))))
        goto out;
    if (!s.model)
        s.model = xstrdup("gpt-5.6-mini");

    struct policy_config pc;
    runner_spec_policy(&s, &pc);
    if ((rc = policy_config_validate(&pc, err))) {
        err_wrap(err, rc, "spec.permissions");
        goto out;
    }
    *ret = s;
    s = (struct runner_spec){0};
out:
    strv_free(tools, ntools);
    runner_spec_done(&s);
    return rc;
}

void runner_spec_policy(const struct runner_spec *s, struct policy_config *ret)
{
    int64_t bound = s->limits.timeout_ms;
    if (bound <= 0 || bound > 3600000)
        bound = 3600000;
    *ret = (struct policy_config){
        .tools = s->tools,
        .approval = (const char *const *)s->approval,
        .napproval = s->napproval,
        .writable = (const char *const *)s->writable,
        .nwritable = s->nwritable,
        .exec_max_timeout_ms = bound,
        .limits = s->limits,
    };
}

int runner_read_file(const char *path, size_t max, char **ret, struct tern_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, TERN_EINVALID, "%s: %s", path, strerror(errno));
    struct buf b;
    buf_init(&b, max);
    char chunk[8192];
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = err_set(err, TERN_EINVALID, "%s: %s", path, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        if (buf_append(&b, chunk, (size_t)n)) {
            rc = err_set(err, TERN_EINVALID, "%s: larger than %zu bytes", path, max);
            break;
        }
    }
    close(fd);
    if (rc) {
        buf_done(&b);
        return rc;
    }
    *ret = buf_steal(&b);
    return 0;
}

void runner_config_done(struct runner_config *c)
{
    if (!c)
        return;
    free(c->ns);
    free(c->session);
    free(c->uid);
    free(c->owner);
    free(c->etcd_endpoints);
    free(c->sandbox_addr);
    free(c->sandbox_token);
    free(c->base_url);
    free(c->api_key);
    free(c->org);
    free(c->project);
    free(c->spec_file);
    free(c->prices_file);
    runner_spec_done(&c->spec);
    memset(c, 0, sizeof *c);
}

static char *env_dup(const char *(*get)(void *, const char *), void *ctx, const char *name)
{
    const char *v = get(ctx, name);
    return v && *v ? xstrdup(v) : NULL;
}

static int env_int(const char *(*get)(void *, const char *), void *ctx, const char *name,
                   int64_t min, int64_t max, int64_t dflt, int64_t *ret, struct tern_err *err)
{
    const char *v = get(ctx, name);
    *ret = dflt;
    if (!v || !*v)
        return 0;
    if (num_parse_range(v, min, max, ret) != 0)
        return err_set(err, TERN_EINVALID, "%s: want an integer in [%lld, %lld]", name,
                       (long long)min, (long long)max);
    return 0;
}

int runner_config_load(const char *(*get)(void *ctx, const char *name), void *ctx,
                       struct runner_config *ret, struct tern_err *err)
{
    struct runner_config c = {0};
    int rc = 0;
    char *text = NULL;
    cJSON *j = NULL;

    c.ns = env_dup(get, ctx, "TERN_NAMESPACE");
    c.session = env_dup(get, ctx, "TERN_SESSION");
    c.uid = env_dup(get, ctx, "TERN_SESSION_UID");
    c.etcd_endpoints = env_dup(get, ctx, "TERN_ETCD_ENDPOINTS");
    c.sandbox_addr = env_dup(get, ctx, "TERN_SANDBOX_ADDR");
    c.base_url = env_dup(get, ctx, "OPENAI_BASE_URL");
    c.api_key = env_dup(get, ctx, "OPENAI_API_KEY");
    c.org = env_dup(get, ctx, "OPENAI_ORG_ID");
    c.project = env_dup(get, ctx, "OPENAI_PROJECT_ID");
    c.spec_file = env_dup(get, ctx, "TERN_SESSION_SPEC_FILE");
    c.prices_file = env_dup(get, ctx, "TERN_PRICES_FILE");
    c.owner = env_dup(get, ctx, "TERN_RUNNER_OWNER");
    if (!c.owner)
        c.owner = env_dup(get, ctx, "HOSTNAME");
    if (!c.owner)
        c.owner = xasprintf("tern-runner-%ld", (long)getpid());

    static const char *const required[] = {"TERN_NAMESPACE", "TERN_SESSION", "TERN_SESSION_UID",
                                           "TERN_TURN", "TERN_ETCD_ENDPOINTS",
                                           "TERN_SANDBOX_TOKEN_FILE"};
    for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
        const char *v = get(ctx, required[i]);
        if (!v || !*v) {
            rc = err_set(err, TERN_EINVALID, "%s: required", required[i]);
            goto out;
        }
    }
    if ((rc = env_int(get, ctx, "TERN_TURN", 1, INT32_MAX, 1, &c.turn, err)) ||
        (rc = env_int(get, ctx, "TERN_LOCK_TTL_SECONDS", 1, 3600, 10, &c.lock_ttl_s, err)) ||
        (rc = env_int(get, ctx, "TERN_LOCK_WAIT_MS", 0, 3600000, c.lock_ttl_s * 1000 + 5000,
                      &c.lock_wait_ms, err)) ||
        (rc = env_int(get, ctx, "TERN_MODEL_TIMEOUT_MS", 1, 3600000, 600000,
                      &c.model_timeout_ms, err)) ||
        (rc = env_int(get, ctx, "TERN_MODEL_MAX_RETRIES", 0, TERN_MODEL_MAX_RETRIES, 2,
                      &c.model_max_retries, err)) ||
        (rc = env_int(get, ctx, "TERN_MAX_COMPLETION_TOKENS", 0, 1000000, 0,
                      &c.max_completion_tokens, err)) ||
        (rc = env_int(get, ctx, "TERN_TEST_CRASH_AFTER_APPENDS", 0, 1000000, 0,
                      &c.crash_after_appends, err)))
        goto out;

    if ((rc = runner_read_file(get(ctx, "TERN_SANDBOX_TOKEN_FILE"), 4096, &c.sandbox_token, err)))
        goto out;
    size_t tl = strlen(c.sandbox_token);
    while (tl > 0 && (c.sandbox_token[tl - 1] == '\n' || c.sandbox_token[tl - 1] == '\r' ||
                      c.sandbox_token[tl - 1] == ' '))
        c.sandbox_token[--tl] = 0;

    if (!c.spec_file) {
        /* reading the AgentSession from the Kubernetes API is not built yet */
        rc = err_set(err, TERN_EINVALID,
                     "TERN_SESSION_SPEC_FILE: required (the Kubernetes API reader is not built "
                     "yet; see docs/runner.md)");
        goto out;
    }
    if (!c.sandbox_addr) {
        rc = err_set(err, TERN_EINVALID, "TERN_SANDBOX_ADDR: required with TERN_SESSION_SPEC_FILE");
        goto out;
    }
    if ((rc = runner_read_file(c.spec_file, SPEC_MAX_BYTES, &text, err)))
        goto out;
    if ((rc = json_parse(text, strlen(text), &j, err))) {
        rc = err_wrap(err, TERN_EINVALID, "%s", c.spec_file);
        goto out;
    }
    if ((rc = runner_spec_parse(j, &c.spec, err))) {
        err_wrap(err, rc, "%s", c.spec_file);
        goto out;
    }
    if (c.spec.uid && strcmp(c.spec.uid, c.uid) != 0) {
        rc = err_set(err, TERN_EINVALID, "TERN_SESSION_UID %s differs from metadata.uid %s",
                     c.uid, c.spec.uid);
        goto out;
    }
    if (!c.base_url)
        c.base_url = xstrdup(c.spec.base_url ? c.spec.base_url : "https://api.openai.com/v1");
    *ret = c;
    c = (struct runner_config){0};
out:
    free(text);
    cJSON_Delete(j);
    runner_config_done(&c);
    return rc;
}
