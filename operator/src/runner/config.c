/* config.c - tern-runner environment and session spec reading. */
#include "runner/config.h"

#include "kube/kclient.h"
#include "kube/kubeconfig.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"
#include "spec/session_spec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
    cJSON_Delete(s->labels);
    memset(s, 0, sizeof *s);
}

static char **strv_dup(char *const *v, size_t n)
{
    char **out = n ? xcalloc(n, sizeof *out) : NULL;
    for (size_t i = 0; i < n; i++)
        out[i] = xstrdup(v[i]);
    return out;
}

int runner_spec_parse(const cJSON *obj, struct runner_spec *ret, struct tern_err *err)
{
    struct session_spec *ss = NULL;
    cJSON *wrapped = NULL;
    const cJSON *labels = json_get(json_get(obj, "metadata"), "labels");
    int rc;

    /* a bare spec object is accepted too: wrap it as an AgentSession */
    if (cJSON_IsObject(obj) && !json_get(obj, "spec") && json_get(obj, "objective")) {
        wrapped = cJSON_CreateObject();
        cJSON_AddItemToObject(wrapped, "spec", json_dup(obj));
        obj = wrapped;
    }
    rc = session_spec_parse(obj, &ss, err);
    cJSON_Delete(wrapped);
    if (rc)
        return rc;

    struct runner_spec s = {0};
    s.objective = xstrdup(ss->objective);
    s.context_text = ss->context.text ? xstrdup(ss->context.text) : NULL;
    s.references = strv_dup(ss->context.references, ss->context.nreferences);
    s.nreferences = ss->context.nreferences;
    s.messages = strv_dup(ss->messages, ss->nmessages);
    s.nmessages = ss->nmessages;
    /* session_spec's tool bits are in enum policy_tool order */
    for (int t = 0; t < POLICY_NTOOLS; t++)
        if (ss->permissions.tools & session_tool_from_name(policy_tool_name((enum policy_tool)t)))
            s.tools |= 1u << t;
    s.approval = ss->permissions.napprovals
                     ? xcalloc(ss->permissions.napprovals, sizeof *s.approval)
                     : NULL;
    for (size_t i = 0; i < ss->permissions.napprovals; i++) {
        const struct session_approval_rule *r = &ss->permissions.approvals[i];
        const char *name = session_tool_name(r->tool);
        s.approval[s.napproval++] = xasprintf("%s:%s", name ? name : "?", r->glob);
    }
    s.writable = strv_dup(ss->permissions.writable, ss->permissions.nwritable);
    s.nwritable = ss->permissions.nwritable;
    s.limits = (struct policy_limits){
        .max_model_turns = ss->limits.max_model_turns,
        .max_tool_calls = ss->limits.max_tool_calls,
        .max_tokens = ss->limits.max_tokens,
        .max_cost_micro_usd = ss->limits.max_cost_micro_usd,
        .timeout_ms = ss->limits.timeout_seconds * 1000,
    };
    s.model = xstrdup(ss->model.name ? ss->model.name : "gpt-5.6-mini");
    s.base_url = ss->model.base_url ? xstrdup(ss->model.base_url) : NULL;
    s.uid = ss->uid ? xstrdup(ss->uid) : NULL;
    session_spec_free(ss);
    if (cJSON_IsObject(labels))
        s.labels = json_dup(labels);

    struct policy_config pc;
    runner_spec_policy(&s, &pc);
    if ((rc = policy_config_validate(&pc, err))) {
        err_wrap(err, rc, "spec.permissions");
        runner_spec_done(&s);
        return rc;
    }
    *ret = s;
    return 0;
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

/* Reads the AgentSession TERN_NAMESPACE/TERN_SESSION through the Kubernetes
 * API (kubeconfig_load_auto: $KUBECONFIG, in-cluster, ~/.kube/config), checks its uid,
 * parses its spec and waits (polling, up to wait_ms) until its status names
 * a ready sandbox address. TERN_EINVALID for a session that is gone or was
 * re-created (this Job is stale: fail fast); other errors are retryable. */
static int load_from_api(struct runner_config *c, int64_t wait_ms, struct tern_err *err)
{
    static const struct kgvr sessions = {"tern.dev", "v1alpha1", "agentsessions"};
    struct kubeconfig *kc = NULL;
    struct kclient *cl = NULL;
    cJSON *obj = NULL;
    int rc;
    rc = kubeconfig_load_auto(NULL, NULL, NULL, &kc, err);
    if (rc) {
        rc = err_wrap(err, TERN_EINVALID, "no Kubernetes configuration");
        goto out;
    }
    cl = kclient_new(kc, NULL);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct kclient_err ke = {0};
        cJSON_Delete(obj);
        obj = NULL;
        rc = kclient_get(cl, &sessions, c->ns, c->session, &obj, &ke);
        if (rc == TERN_ENOTFOUND) {
            rc = err_set(err, TERN_EINVALID, "AgentSession %s/%s not found", c->ns, c->session);
            goto out;
        }
        if (rc == TERN_EAUTH) {
            /* this pod's identity may not read its session: RBAC, a
             * configuration error that retrying does not fix */
            rc = err_set(err, TERN_EINVALID,
                         "reading AgentSession %s/%s: %s (the runner's ServiceAccount needs "
                         "get on agentsessions: deploy/runner-rbac.yaml)",
                         c->ns, c->session, ke.message[0] ? ke.message : ke.e.msg);
            goto out;
        }
        if (rc) {
            rc = err_set(err, rc, "reading AgentSession %s/%s: %s", c->ns, c->session, ke.e.msg);
            goto out;
        }
        const cJSON *uid = json_get(json_get(obj, "metadata"), "uid");
        if (!cJSON_IsString(uid) || strcmp(uid->valuestring, c->uid) != 0) {
            rc = err_set(err, TERN_EINVALID, "AgentSession %s/%s has uid %s, not %s (re-created)",
                         c->ns, c->session, cJSON_IsString(uid) ? uid->valuestring : "?", c->uid);
            goto out;
        }
        const cJSON *sb = json_get(json_get(obj, "status"), "sandbox");
        const cJSON *addr = json_get(sb, "address");
        if (cJSON_IsString(addr) && *addr->valuestring && cJSON_IsTrue(json_get(sb, "ready"))) {
            c->sandbox_addr = xstrdup(addr->valuestring);
            break;
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (ms >= wait_ms) {
            rc = err_set(err, TERN_ETIMEOUT, "AgentSession %s/%s: no ready sandbox after %lld ms",
                         c->ns, c->session, (long long)ms);
            goto out;
        }
        struct timespec pause = {0, 250 * 1000000L}; /* polling a condition, bounded above */
        nanosleep(&pause, NULL);
    }
    rc = runner_spec_parse(obj, &c->spec, err);
    if (rc)
        rc = err_wrap(err, TERN_EINVALID, "AgentSession %s/%s", c->ns, c->session);
out:
    cJSON_Delete(obj);
    kclient_free(cl);
    kubeconfig_free(kc);
    return rc;
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
                      &c.crash_after_appends, err)) ||
        (rc = env_int(get, ctx, "TERN_TEST_CRASH_AFTER_RESERVE", 0, 1, 0, &c.crash_after_reserve,
                      err)) ||
        (rc = env_int(get, ctx, "TERN_TEST_CLOCK_OFFSET_SECONDS", -3153600000LL, 3153600000LL, 0,
                      &c.clock_offset_s, err)))
        goto out;

    if ((rc = runner_read_file(get(ctx, "TERN_SANDBOX_TOKEN_FILE"), 4096, &c.sandbox_token, err)))
        goto out;
    size_t tl = strlen(c.sandbox_token);
    while (tl > 0 && (c.sandbox_token[tl - 1] == '\n' || c.sandbox_token[tl - 1] == '\r' ||
                      c.sandbox_token[tl - 1] == ' '))
        c.sandbox_token[--tl] = 0;

    if (!c.spec_file) {
        /* the normal case in a cluster: read the AgentSession */
        int64_t wait_ms;
        if ((rc = env_int(get, ctx, "TERN_SANDBOX_WAIT_MS", 0, 3600000, 60000, &wait_ms, err)) ||
            (rc = load_from_api(&c, wait_ms, err)))
            goto out;
        /* the session as it is now: a spec.model.baseURL fixed while the
         * Job retries applies from its next attempt */
        if (c.spec.base_url) {
            free(c.base_url);
            c.base_url = xstrdup(c.spec.base_url);
        }
        if (!c.base_url)
            c.base_url = xstrdup("https://api.openai.com/v1");
        *ret = c;
        c = (struct runner_config){0};
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
