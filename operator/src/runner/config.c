/* config.c - tern-runner environment and session spec reading. */
#include "runner/config.h"

#include "kube/kclient.h"
#include "kube/kubeconfig.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"
#include "spec/session_spec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/stat.h>
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
    cJSON_Delete(s->result_schema);
    strv_free(s->references, s->nreferences);
    strv_free(s->messages, s->nmessages);
    strv_free(s->approval, s->napproval);
    strv_free(s->writable, s->nwritable);
    free(s->model);
    free(s->base_url);
    free(s->uid);
    cJSON_Delete(s->labels);
    for (size_t i = 0; i < s->nmcp; i++) {
        struct runner_mcp_server *m = &s->mcp[i];
        free(m->name);
        free(m->url);
        free(m->headers_secret);
        strv_free(m->headers, m->nheaders);
        strv_free(m->allowed, m->nallowed);
    }
    free(s->mcp);
    for (size_t i = 0; i < s->nremotes; i++) {
        free(s->remotes[i].name);
        free(s->remotes[i].url);
        free(s->remotes[i].username);
        if (s->remotes[i].token)
            memset(s->remotes[i].token, 0, strlen(s->remotes[i].token));
        free(s->remotes[i].token);
    }
    free(s->remotes);
    free(s->remote_names); /* borrowed strings */
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
    for (int t = 0; t < POLICY_NSANDBOX; t++)
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
    s.result_schema = ss->result_schema; /* checked by session_spec */
    ss->result_schema = NULL;
    s.max_result_attempts = ss->limits.max_result_attempts;
    s.model = xstrdup(ss->model.name ? ss->model.name : "gpt-5.6-mini");
    s.base_url = ss->model.base_url ? xstrdup(ss->model.base_url) : NULL;
    s.uid = ss->uid ? xstrdup(ss->uid) : NULL;
    s.nmcp = ss->tools.nmcp;
    s.mcp = s.nmcp ? xcalloc(s.nmcp, sizeof *s.mcp) : NULL;
    for (size_t i = 0; i < s.nmcp; i++) {
        const struct session_mcp_server *m = &ss->tools.mcp[i];
        s.mcp[i] = (struct runner_mcp_server){
            .name = xstrdup(m->name),
            .url = xstrdup(m->url),
            .headers_secret = m->headers_secret ? xstrdup(m->headers_secret) : NULL,
            .allowed = strv_dup(m->allowed, m->nallowed),
            .nallowed = m->nallowed,
            .timeout_ms = m->timeout_seconds * 1000,
        };
    }
    s.nremotes = ss->tools.nremotes;
    s.remotes = s.nremotes ? xcalloc(s.nremotes, sizeof *s.remotes) : NULL;
    s.remote_names = s.nremotes ? xcalloc(s.nremotes, sizeof *s.remote_names) : NULL;
    for (size_t i = 0; i < s.nremotes; i++) {
        const struct session_publish_remote *r = &ss->tools.remotes[i];
        s.remotes[i] = (struct runner_remote){.name = xstrdup(r->name),
                                              .url = xstrdup(r->url),
                                              .username = xstrdup(r->username),
                                              .bearer = r->bearer};
        s.remote_names[i] = s.remotes[i].name;
    }
    s.memory = ss->memory != NULL;
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
        .remotes = (const char *const *)s->remote_names,
        .nremotes = s->nremotes,
    };
    if (s->nremotes)
        ret->tools |= 1u << POLICY_PUBLISH;
    if (s->memory)
        ret->tools |= 1u << POLICY_MEMORY;
}

/* ---- credentials of the trusted tools ----------------------------------- */

static void trim_end(char *v)
{
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == '\n' || v[n - 1] == '\r' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        v[--n] = 0;
}

static bool header_name_ok(const char *n)
{
    static const char *const reserved[] = {
        "content-type", "accept", "content-length", "host", "transfer-encoding", "connection",
        "mcp-session-id", "mcp-protocol-version", "idempotency-key", "expect", "te", "upgrade"};
    if (!*n || strlen(n) > 128)
        return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return false;
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
        if (strcasecmp(n, reserved[i]) == 0)
            return false;
    return true;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds value and each of its space-separated words (e.g. the token of
 * "Bearer <token>") that is long enough to be told apart from text; the
 * first word of several, when it is only letters, is an authentication
 * scheme ("Bearer", "Basic", "Token"), not a secret. */
static int add_secret_words(struct sanitize *san, const char *v, struct tern_err *err)
{
    int rc = 0;
    if (strlen(v) >= TERN_SANITIZE_MIN_SECRET &&
        (rc = sanitize_add(san, v, strlen(v), err)))
        return rc;
    for (const char *p = v; *p;) {
        size_t n = strcspn(p, " \t");
        bool scheme = p == v && n < strlen(v);
        for (size_t i = 0; scheme && i < n; i++)
            scheme = (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z');
        if (!scheme && n >= TERN_SANITIZE_MIN_SECRET && n < strlen(v) &&
            (rc = sanitize_add(san, p, n, err)))
            return rc;
        p += n;
        p += strspn(p, " \t");
    }
    return 0;
}

static int load_headers(struct runner_mcp_server *m, const char *dir, struct sanitize *san,
                        struct tern_err *err)
{
    char *d = xasprintf("%s/mcp/%s", dir, m->name);
    DIR *dh = opendir(d);
    int rc = 0;
    char **names = NULL;
    size_t n = 0;
    if (!dh) {
        rc = err_set(err, TERN_EINVALID,
                     "%s: %s (the headers of MCP server %s, Secret %s, are not mounted)", d,
                     strerror(errno), m->name, m->headers_secret);
        goto out;
    }
    struct dirent *de;
    while ((de = readdir(dh))) {
        if (de->d_name[0] == '.')
            continue; /* ., .., and the kubelet's ..data links */
        if (n >= TERN_MCP_MAX_HEADERS) {
            rc = err_set(err, TERN_EINVALID, "%s: more than %d headers", d, TERN_MCP_MAX_HEADERS);
            goto out;
        }
        names = xreallocarray(names, n + 1, sizeof *names);
        names[n++] = xstrdup(de->d_name);
    }
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        char *path = xasprintf("%s/%s", d, names[i]);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        char *v = NULL;
        rc = runner_read_file(path, TERN_MCP_MAX_HEADER_VALUE, &v, err);
        if (rc) {
            free(path);
            goto out;
        }
        trim_end(v);
        bool bad_value = strpbrk(v, "\r\n") != NULL || strlen(v) == 0;
        if (!header_name_ok(names[i]) || bad_value) {
            rc = err_set(err, TERN_EINVALID,
                         "%s: %s cannot be sent as a header of MCP server %s (a reserved or "
                         "invalid name, or an empty or multi-line value)",
                         path, names[i], m->name);
            memset(v, 0, strlen(v));
            free(v);
            free(path);
            goto out;
        }
        rc = add_secret_words(san, v, err);
        m->headers = xreallocarray(m->headers, m->nheaders + 1, sizeof *m->headers);
        m->headers[m->nheaders++] = xasprintf("%s: %s", names[i], v);
        memset(v, 0, strlen(v));
        free(v);
        free(path);
        if (rc) {
            err_wrap(err, rc, "MCP server %s", m->name);
            goto out;
        }
    }
out:
    if (dh)
        closedir(dh);
    strv_free(names, n);
    free(d);
    return rc;
}

int runner_trusted_load(struct runner_spec *s, const char *dir, struct sanitize *san,
                        struct tern_err *err)
{
    int rc = 0;
    for (size_t i = 0; i < s->nmcp; i++)
        if (s->mcp[i].headers_secret && (rc = load_headers(&s->mcp[i], dir, san, err)))
            return rc;
    for (size_t i = 0; i < s->nremotes; i++) {
        struct runner_remote *r = &s->remotes[i];
        char *path = xasprintf("%s/publish/%s/token", dir, r->name);
        rc = runner_read_file(path, TERN_PUBLISH_MAX_TOKEN + 2, &r->token, err);
        if (rc) {
            err_wrap(err, rc, "the token of remote %s", r->name);
            free(path);
            return rc;
        }
        trim_end(r->token);
        if (strlen(r->token) < TERN_SANITIZE_MIN_SECRET || strpbrk(r->token, "\r\n")) {
            rc = err_set(err, TERN_EINVALID,
                         "%s: the token of remote %s must be one line of at least %d bytes", path,
                         r->name, TERN_SANITIZE_MIN_SECRET);
            free(path);
            return rc;
        }
        free(path);
        char *basic = xasprintf("%s:%s", r->username, r->token);
        if ((rc = sanitize_add(san, r->token, strlen(r->token), err)) ||
            (rc = sanitize_add(san, basic, strlen(basic), err))) {
            memset(basic, 0, strlen(basic));
            free(basic);
            return err_wrap(err, rc, "remote %s", r->name);
        }
        memset(basic, 0, strlen(basic));
        free(basic);
    }
    return 0;
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
    free(c->etcd_ca_file);
    free(c->etcd_cert_file);
    free(c->etcd_key_file);
    free(c->etcd_username);
    free(c->etcd_password_file);
    free(c->sandbox_addr);
    free(c->sandbox_token);
    free(c->base_url);
    free(c->api_key);
    free(c->org);
    free(c->project);
    free(c->spec_file);
    free(c->prices_file);
    free(c->crash_at);
    free(c->trusted_dir);
    runner_spec_done(&c->spec);
    sanitize_done(&c->sanitize);
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

/* The sandbox address in a session's status (the pod has an IP; it may
 * not answer yet: the turn's Job starts beside its sandbox), or NULL. */
static const char *sandbox_address(const cJSON *obj)
{
    const cJSON *addr = json_get(json_get(json_get(obj, "status"), "sandbox"), "address");
    return cJSON_IsString(addr) && *addr->valuestring ? addr->valuestring : NULL;
}

struct address_watch {
    const char *uid;
    cJSON *found; /* the session once it names an address (owned) */
};

static int on_session_event(void *ctx, enum kwatch_type type, cJSON *obj)
{
    struct address_watch *w = ctx;
    const cJSON *uid = json_get(json_get(obj, "metadata"), "uid");
    bool ours = cJSON_IsString(uid) && strcmp(uid->valuestring, w->uid) == 0;
    if (type == KWATCH_DELETED || !ours || !sandbox_address(obj)) {
        cJSON_Delete(obj);
        return type == KWATCH_DELETED || (!ours && type != KWATCH_BOOKMARK) ? 1 : 0;
    }
    w->found = obj;
    return 1;
}

/* Reads the AgentSession TERN_NAMESPACE/TERN_SESSION through the Kubernetes
 * API (kubeconfig_load_auto: $KUBECONFIG, in-cluster, ~/.kube/config), checks its uid,
 * parses its spec and waits (watching the session, up to wait_ms) until its
 * status names the sandbox's address. TERN_EINVALID for a session that is
 * gone or was re-created (this Job is stale: fail fast); other errors are
 * retryable. */
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
        if (sandbox_address(obj)) {
            c->sandbox_addr = xstrdup(sandbox_address(obj));
            break;
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (ms >= wait_ms) {
            rc = err_set(err, TERN_ETIMEOUT, "AgentSession %s/%s: no sandbox address after %lld ms",
                         c->ns, c->session, (long long)ms);
            goto out;
        }
        /* until the operator writes the address: a watch from what we read
         * (a stream that ends or fails: read again) */
        const cJSON *rv = json_get(json_get(obj, "metadata"), "resourceVersion");
        char *sel = xasprintf("metadata.name=%s", c->session);
        long left_s = (long)((wait_ms - ms + 999) / 1000);
        struct kclient_list_opts lo = {.field_selector = sel,
                                       .resource_version = cJSON_IsString(rv) ? rv->valuestring
                                                                              : NULL,
                                       .timeout_seconds = left_s > 0 ? left_s : 1,
                                       .allow_bookmarks = true};
        struct address_watch aw = {.uid = c->uid};
        struct kclient_err we = {0};
        int w = kclient_watch(cl, &sessions, c->ns, &lo, on_session_event, &aw, &we);
        free(sel);
        if (aw.found) {
            cJSON_Delete(obj);
            obj = aw.found;
            c->sandbox_addr = xstrdup(sandbox_address(obj));
            break;
        }
        if (w < 0) { /* an error: do not spin on a server that refuses watches */
            struct timespec pause = {0, 250 * 1000000L};
            nanosleep(&pause, NULL);
        }
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
    c.etcd_ca_file = env_dup(get, ctx, "TERN_ETCD_CA_FILE");
    c.etcd_cert_file = env_dup(get, ctx, "TERN_ETCD_CERT_FILE");
    c.etcd_key_file = env_dup(get, ctx, "TERN_ETCD_KEY_FILE");
    c.etcd_username = env_dup(get, ctx, "TERN_ETCD_USERNAME");
    c.etcd_password_file = env_dup(get, ctx, "TERN_ETCD_PASSWORD_FILE");
    c.sandbox_addr = env_dup(get, ctx, "TERN_SANDBOX_ADDR");
    c.base_url = env_dup(get, ctx, "OPENAI_BASE_URL");
    c.api_key = env_dup(get, ctx, "OPENAI_API_KEY");
    c.org = env_dup(get, ctx, "OPENAI_ORG_ID");
    c.project = env_dup(get, ctx, "OPENAI_PROJECT_ID");
    c.spec_file = env_dup(get, ctx, "TERN_SESSION_SPEC_FILE");
    c.prices_file = env_dup(get, ctx, "TERN_PRICES_FILE");
    c.crash_at = env_dup(get, ctx, "TERN_TEST_CRASH_AT");
    c.trusted_dir = env_dup(get, ctx, "TERN_TRUSTED_DIR");
    if (!c.trusted_dir)
        c.trusted_dir = xstrdup(RUNNER_TRUSTED_DIR);
    sanitize_init(&c.sanitize);
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
    /* compaction (runner/snapshot.h): a snapshot once this many events were
     * appended since the last one; 0 = never */
    if ((rc = env_int(get, ctx, "TERN_SNAPSHOT_EVENTS", 0, 100000000, 1000, &c.snapshot_events,
                      err)))
        goto out;

    if ((rc = runner_read_file(get(ctx, "TERN_SANDBOX_TOKEN_FILE"), 4096, &c.sandbox_token, err)))
        goto out;
    size_t tl = strlen(c.sandbox_token);
    while (tl > 0 && (c.sandbox_token[tl - 1] == '\n' || c.sandbox_token[tl - 1] == '\r' ||
                      c.sandbox_token[tl - 1] == ' '))
        c.sandbox_token[--tl] = 0;

    if ((rc = env_int(get, ctx, "TERN_SANDBOX_WAIT_MS", 0, 3600000, 60000, &c.sandbox_wait_ms,
                      err)))
        goto out;
    if (!c.spec_file) {
        /* the normal case in a cluster: read the AgentSession */
        if ((rc = load_from_api(&c, c.sandbox_wait_ms, err)))
            goto out;
        /* the session as it is now: a spec.model.baseURL fixed while the
         * Job retries applies from its next attempt */
        if (c.spec.base_url) {
            free(c.base_url);
            c.base_url = xstrdup(c.spec.base_url);
        }
        if (!c.base_url)
            c.base_url = xstrdup("https://api.openai.com/v1");
        if ((rc = runner_trusted_load(&c.spec, c.trusted_dir, &c.sanitize, err)))
            goto out;
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
    if ((rc = runner_trusted_load(&c.spec, c.trusted_dir, &c.sanitize, err)))
        goto out;
    *ret = c;
    c = (struct runner_config){0};
out:
    free(text);
    cJSON_Delete(j);
    runner_config_done(&c);
    return rc;
}
