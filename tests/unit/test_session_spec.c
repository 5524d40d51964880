/* Unit tests for spec/: session_spec_parse over the examples and the
 * invalid-session set (the same files the CRD schema test uses), the CRD's
 * defaults against ours, update rules, glob validation, CIDRs and quantities. Run from
 * the repo root (the suite runner does). */
#include "harness.h"

#include "base/buf.h"
#include "base/mem.h"
#include "json/json.h"
#include "spec/quantity.h"
#include "spec/session_spec.h"
#include "yaml/yamljson.h"

#include <dirent.h>
#include <sys/socket.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        th_fail(__FILE__, __LINE__, "cannot open %s (run from the repo root)", path);
    struct buf b;
    buf_init(&b, 1u << 24);
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_append(&b, chunk, n);
    fclose(f);
    return buf_steal(&b);
}

static cJSON *yaml_stream(const char *path)
{
    char *text = read_file(path);
    cJSON *docs = NULL;
    struct tern_err e = {0};
    if (yamljson_parse_stream(text, strlen(text), NULL, &docs, &e))
        th_fail(__FILE__, __LINE__, "%s: %s", path, e.msg);
    free(text);
    return docs;
}

/* The single AgentSession of a YAML file (detached; caller frees). */
static cJSON *session_doc(const char *path)
{
    cJSON *docs = yaml_stream(path);
    cJSON *found = NULL;
    int i = 0;
    for (cJSON *d = docs->child; d; d = d->next, i++) {
        const cJSON *k = json_get(d, "kind");
        if (cJSON_IsString(k) && strcmp(k->valuestring, "AgentSession") == 0) {
            if (found)
                th_fail(__FILE__, __LINE__, "%s: more than one AgentSession", path);
            found = d;
        }
    }
    if (!found)
        th_fail(__FILE__, __LINE__, "%s: no AgentSession", path);
    cJSON *out = json_dup(found);
    cJSON_Delete(docs);
    return out;
}

static struct session_spec *parse_ok(const cJSON *obj)
{
    struct session_spec *s = NULL;
    struct tern_err e = {0};
    int r = session_spec_parse(obj, &s, &e);
    if (r)
        th_fail(__FILE__, __LINE__, "session_spec_parse: %d %s", r, e.msg);
    return s;
}

static struct session_spec *parse_file(const char *path)
{
    cJSON *d = session_doc(path);
    struct session_spec *s = parse_ok(d);
    cJSON_Delete(d);
    return s;
}

/* A text dump of every field, to compare two specs. */
static char *dump(const struct session_spec *s)
{
    struct buf b;
    buf_init(&b, 1u << 24);
#define S(x) buf_printf(&b, #x "=%s\n", s->x ? s->x : "(null)")
#define I(x) buf_printf(&b, #x "=%lld\n", (long long)s->x)
#define L(x, n)                                                                                    \
    for (size_t i = 0; i < s->n; i++)                                                              \
    buf_printf(&b, #x "[%zu]=%s\n", i, s->x[i])
    S(name);
    S(namespace);
    S(uid);
    I(generation);
    S(objective);
    S(service_account);
    S(context.text);
    L(context.files, context.nfiles);
    L(context.references, context.nreferences);
    L(skills, nskills);
    S(memory);
    L(messages, nmessages);
    I(permissions.tools);
    for (size_t i = 0; i < s->permissions.napprovals; i++)
        buf_printf(&b, "approval[%zu]=%u:%s\n", i, s->permissions.approvals[i].tool,
                   s->permissions.approvals[i].glob);
    L(permissions.writable, permissions.nwritable);
    for (size_t i = 0; i < s->permissions.nnetwork; i++)
        buf_printf(&b, "network[%zu]=%s/%d\n", i, s->permissions.network[i].text,
                   s->permissions.network[i].prefix);
    for (size_t i = 0; i < s->tools.nmcp; i++) {
        const struct session_mcp_server *m = &s->tools.mcp[i];
        buf_printf(&b, "mcp[%zu]=%s %s %s %lld", i, m->name, m->url,
                   m->headers_secret ? m->headers_secret : "-", (long long)m->timeout_seconds);
        for (size_t k = 0; k < m->nallowed; k++)
            buf_printf(&b, " %s", m->allowed[k]);
        buf_putc(&b, '\n');
    }
    for (size_t i = 0; i < s->tools.nremotes; i++) {
        const struct session_publish_remote *r = &s->tools.remotes[i];
        buf_printf(&b, "remote[%zu]=%s %s %s/%s %s %d\n", i, r->name, r->url, r->token_secret,
                   r->token_key, r->username, r->bearer);
    }
    I(limits.timeout_seconds);
    I(limits.max_model_turns);
    I(limits.max_tool_calls);
    I(limits.max_tokens);
    I(limits.max_cost_micro_usd);
    I(limits.max_result_attempts);
    if (s->result_schema) {
        char *rs = json_print(s->result_schema);
        buf_printf(&b, "result.schema=%s\n", rs);
        free(rs);
    }
    I(limits.cpu.milli);
    I(limits.memory.milli);
    S(model.name);
    S(model.base_url);
    S(model.api_key_secret);
    S(model.api_key_key);
    S(sandbox.image);
    S(sandbox.runtime_class);
    I(sandbox.workspace_size.milli);
    S(sandbox.storage_class);
    I(sandbox.idle_suspend_seconds);
    I(approval.timeout_seconds);
    I(approval.on_timeout);
    I(suspend);
    I(fork_from.set);
    S(fork_from.session);
    S(fork_from.uid);
    I(fork_from.at_seq);
#undef S
#undef I
#undef L
    return buf_steal(&b);
}

TEST(spec_minimal_example_gets_defaults)
{
    struct session_spec *s = parse_file("examples/minimal.yaml");
    ASSERT_EQ_STR(s->name, "hello");
    ASSERT_CONTAINS(s->objective, "output/hello.py");
    ASSERT_EQ_INT(s->permissions.tools, SESSION_TOOLS_ALL);
    ASSERT_EQ_INT(s->permissions.nwritable, 2);
    ASSERT_EQ_STR(s->permissions.writable[0], "working/**");
    ASSERT_EQ_INT(s->permissions.nnetwork, 0);
    ASSERT_EQ_INT(s->limits.max_model_turns, 50);
    ASSERT_EQ_INT(s->limits.max_tool_calls, 200);
    ASSERT_EQ_INT(s->limits.timeout_seconds, 3600);
    ASSERT_EQ_INT(s->limits.cpu.milli, 1000);
    ASSERT_TRUE(s->limits.memory.milli == 1073741824LL * 1000);
    ASSERT_EQ_STR(s->model.name, "gpt-5.6-mini");
    ASSERT_EQ_STR(s->model.base_url, "https://api.openai.com/v1");
    ASSERT_NULL(s->model.api_key_secret);
    ASSERT_NULL(s->sandbox.image);
    ASSERT_EQ_INT(quantity_units(&s->sandbox.workspace_size), 5368709120LL);
    ASSERT_EQ_INT(s->sandbox.idle_suspend_seconds, 600);
    ASSERT_EQ_INT(s->approval.timeout_seconds, 86400);
    ASSERT_EQ_INT(s->approval.on_timeout, SESSION_ON_TIMEOUT_DENY);
    ASSERT_FALSE(s->suspend);
    ASSERT_FALSE(s->fork_from.set);
    session_spec_free(s);
}

TEST(spec_approvals_and_limits_example)
{
    struct session_spec *s = parse_file("examples/approvals-and-limits.yaml");
    ASSERT_EQ_STR(s->namespace, "default");
    ASSERT_EQ_STR(s->service_account, "tern-runner");
    ASSERT_EQ_INT(s->permissions.napprovals, 2);
    ASSERT_EQ_INT(s->permissions.approvals[0].tool, SESSION_TOOL_PUBLISH_BRANCH);
    ASSERT_EQ_STR(s->permissions.approvals[0].glob, "origin/*");
    ASSERT_EQ_INT(s->permissions.approvals[1].tool, SESSION_TOOL_WRITE_FILE);
    ASSERT_TRUE(session_spec_requires_approval(s, SESSION_TOOL_PUBLISH_BRANCH,
                                               "origin/fix/flaky-clock"));
    ASSERT_FALSE(session_spec_requires_approval(s, SESSION_TOOL_EXEC_COMMAND, "git status"));
    ASSERT_FALSE(session_spec_requires_approval(s, SESSION_TOOL_READ_FILE, "origin/x"));
    ASSERT_TRUE(session_spec_requires_approval(s, SESSION_TOOL_WRITE_FILE, "output/a/b.md"));
    ASSERT_FALSE(session_spec_requires_approval(s, SESSION_TOOL_WRITE_FILE, "working/a.md"));
    ASSERT_EQ_INT(s->permissions.nnetwork, 1);
    ASSERT_EQ_INT(s->permissions.network[0].prefix, 16);
    ASSERT_EQ_INT(s->tools.nremotes, 1);
    ASSERT_EQ_STR(s->tools.remotes[0].token_secret, "github-push");
    ASSERT_EQ_INT(s->limits.timeout_seconds, 1800);
    ASSERT_EQ_INT(s->limits.max_model_turns, 30);
    ASSERT_EQ_INT(s->limits.max_tool_calls, 120);
    ASSERT_EQ_INT(s->limits.max_tokens, 500000);
    ASSERT_EQ_INT(s->limits.max_cost_micro_usd, 2000000);
    ASSERT_EQ_INT(s->limits.cpu.milli, 500);
    ASSERT_EQ_INT(quantity_units(&s->limits.memory), 536870912);
    ASSERT_EQ_STR(s->model.api_key_secret, "openai");
    ASSERT_EQ_STR(s->model.api_key_key, "api-key");
    ASSERT_EQ_STR(s->sandbox.runtime_class, "gvisor");
    ASSERT_EQ_STR(s->sandbox.storage_class, "standard");
    ASSERT_EQ_INT(s->sandbox.idle_suspend_seconds, 300);
    ASSERT_EQ_INT(s->approval.timeout_seconds, 3600);
    ASSERT_TRUE(session_spec_path_writable(s, "working/repo/x.c"));
    ASSERT_TRUE(session_spec_path_writable(s, "output"));
    ASSERT_FALSE(session_spec_path_writable(s, "input/x"));
    ASSERT_FALSE(session_spec_path_writable(s, "task.md"));
    session_spec_free(s);
}

TEST(spec_context_skills_memory_example)
{
    cJSON *docs = yaml_stream("examples/context-skills-memory.yaml");
    ASSERT_EQ_INT(cJSON_GetArraySize(docs), 4);
    cJSON_Delete(docs);
    struct session_spec *s = parse_file("examples/context-skills-memory.yaml");
    ASSERT_EQ_STR(s->namespace, "team-a");
    ASSERT_EQ_INT(s->context.nfiles, 1);
    ASSERT_EQ_STR(s->context.files[0], "pr-42-diff");
    ASSERT_EQ_INT(s->context.nreferences, 1);
    ASSERT_EQ_INT(s->nskills, 1);
    ASSERT_EQ_STR(s->skills[0], "review-skill");
    ASSERT_EQ_STR(s->memory, "team-a-memory");
    ASSERT_EQ_INT(s->nmessages, 1);
    ASSERT_EQ_STR(s->messages[0], "also check the tests");
    ASSERT_EQ_INT(s->permissions.tools,
                  SESSION_TOOL_READ_FILE | SESSION_TOOL_LIST_FILES | SESSION_TOOL_WRITE_FILE);
    ASSERT_EQ_INT(s->permissions.nwritable, 1);
    ASSERT_EQ_INT(s->approval.on_timeout, SESSION_ON_TIMEOUT_FAIL);
    session_spec_free(s);
}

/* "# key: value" header lines of an invalid-session file. */
static void header_value(const char *text, const char *key, char *out, size_t n)
{
    char pat[64];
    snprintf(pat, sizeof pat, "# %s: ", key);
    const char *p = strstr(text, pat);
    out[0] = '\0';
    if (!p)
        return;
    p += strlen(pat);
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len >= n)
        len = n - 1;
    memcpy(out, p, len);
    out[len] = '\0';
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

TEST(spec_invalid_sessions_fail_at_their_field)
{
    const char *dir = "tests/data/invalid-sessions";
    DIR *d = opendir(dir);
    ASSERT_NOT_NULL(d);
    char *names[256];
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 256)
        if (strstr(de->d_name, ".yaml"))
            names[n++] = xstrdup(de->d_name);
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    ASSERT_CMP_INT(n, >=, 20);
    for (size_t i = 0; i < n; i++) {
        char path[512], want_path[256], want_err[256], prefix[300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        char *text = read_file(path);
        header_value(text, "path", want_path, sizeof want_path);
        header_value(text, "error", want_err, sizeof want_err);
        free(text);
        if (!want_path[0] || !want_err[0])
            th_fail(__FILE__, __LINE__, "%s: header lacks path/error", path);
        cJSON *doc = session_doc(path);
        struct session_spec *s = NULL;
        struct tern_err e = {0};
        int r = session_spec_parse(doc, &s, &e);
        cJSON_Delete(doc);
        if (r != TERN_EINVALID || s)
            th_fail(__FILE__, __LINE__, "%s: got %d, expected TERN_EINVALID (%s)", path, r, e.msg);
        snprintf(prefix, sizeof prefix, "%s: ", want_path);
        if (strncmp(e.msg, prefix, strlen(prefix)) != 0 || !strstr(e.msg, want_err))
            th_fail(__FILE__, __LINE__, "%s: message \"%s\", expected \"%s%s...\"", path, e.msg,
                    prefix, want_err);
        free(names[i]);
    }
}

/* More invalid inputs, inline: JSON text -> expected message start. */
TEST(spec_invalid_table)
{
    static const struct {
        const char *json;
        const char *msg;
    } t[] = {
        {"[]", "AgentSession must be a JSON object"},
        {"{}", "spec: Required value"},
        {"{\"apiVersion\":\"v1\",\"spec\":{\"objective\":\"x\"}}", "apiVersion: must be tern.dev"},
        {"{\"kind\":\"Pod\",\"spec\":{\"objective\":\"x\"}}", "kind: must be AgentSession"},
        {"{\"metadata\":{\"name\":\"Upper\"},\"spec\":{\"objective\":\"x\"}}",
         "metadata.name: must be a DNS label"},
        {"{\"spec\":{\"objective\":5}}", "spec.objective: must be a string"},
        {"{\"spec\":{\"objective\":\"x\",\"identity\":{\"serviceAccountName\":\"-x\"}}}",
         "spec.identity.serviceAccountName: must be a DNS subdomain"},
        {"{\"spec\":{\"objective\":\"x\",\"identity\":{\"user\":\"x\"}}}",
         "spec.identity.user: unknown field"},
        {"{\"spec\":{\"objective\":\"x\",\"limits\":{\"maxToolCalls\":\"5\"}}}",
         "spec.limits.maxToolCalls: must be an integer"},
        {"{\"spec\":{\"objective\":\"x\",\"limits\":{\"maxTokens\":1000000000001}}}",
         "spec.limits.maxTokens: must be <= 1000000000000"},
        {"{\"spec\":{\"objective\":\"x\",\"limits\":{\"cpu\":0}}}",
         "spec.limits.cpu: must be greater than zero"},
        {"{\"spec\":{\"objective\":\"x\",\"limits\":{\"cpu\":\"-1\"}}}",
         "spec.limits.cpu: must be greater than zero"},
        {"{\"spec\":{\"objective\":\"x\",\"limits\":{\"memory\":true}}}",
         "spec.limits.memory: must be a Kubernetes quantity"},
        {"{\"spec\":{\"objective\":\"x\",\"limits\":[]}}", "spec.limits: must be an object"},
        {"{\"spec\":{\"objective\":\"x\",\"permissions\":{\"tools\":\"exec_command\"}}}",
         "spec.permissions.tools: must be an array"},
        {"{\"spec\":{\"objective\":\"x\",\"permissions\":{\"requiresApproval\":[\"exec_command:\"]}"
         "}}",
         "spec.permissions.requiresApproval[0]: must be \"tool:glob\""},
        {"{\"spec\":{\"objective\":\"x\",\"permissions\":{\"requiresApproval\":[\"exec:ls\"]}}}",
         "spec.permissions.requiresApproval[0]: must be \"tool:glob\""},
        {"{\"spec\":{\"objective\":\"x\",\"permissions\":{\"requiresApproval\":[\"exec_command:"
         "rm [x\"]}}}",
         "spec.permissions.requiresApproval[0]: invalid glob"},
        {"{\"spec\":{\"objective\":\"x\",\"permissions\":{\"writablePaths\":[\"output/[z-a]\"]}}}",
         "spec.permissions.writablePaths[0]: invalid glob"},
        {"{\"spec\":{\"objective\":\"x\",\"permissions\":{\"writablePaths\":[\"workingx/a\"]}}}",
         "spec.permissions.writablePaths[0]: must be under working/ or output/"},
        {"{\"spec\":{\"objective\":\"x\",\"permissions\":{\"writablePaths\":[\"output/./a\"]}}}",
         "spec.permissions.writablePaths[0]: must not contain . or .."},
        {"{\"spec\":{\"objective\":\"x\",\"permissions\":{\"networkAllowlist\":[\"10.0.0.1\"]}}}",
         "spec.permissions.networkAllowlist[0]: must be a CIDR"},
        {"{\"spec\":{\"objective\":\"x\",\"permissions\":{\"networkAllowlist\":[\"fd00::/129\"]}}}",
         "spec.permissions.networkAllowlist[0]: must be a CIDR"},
        {"{\"spec\":{\"objective\":\"x\",\"model\":{\"name\":\"\"}}}",
         "spec.model.name: must not be empty"},
        {"{\"spec\":{\"objective\":\"x\",\"model\":{\"baseURL\":\"https://\"}}}",
         "spec.model.baseURL: must be an http or https URL"},
        {"{\"spec\":{\"objective\":\"x\",\"model\":{\"apiKeySecretRef\":{\"name\":\"s\",\"key\":"
         "\"a/b\"}}}}",
         "spec.model.apiKeySecretRef.key: must consist of"},
        {"{\"spec\":{\"objective\":\"x\",\"sandbox\":{\"workspace\":{\"size\":\"1Gi\",\"x\":1}}}}",
         "spec.sandbox.workspace.x: unknown field"},
        {"{\"spec\":{\"objective\":\"x\",\"approval\":{\"timeoutSeconds\":0}}}",
         "spec.approval.timeoutSeconds: must be >= 1"},
        {"{\"spec\":{\"objective\":\"x\",\"forkFrom\":{\"session\":\"p\",\"uid\":\"u\",\"atSeq\":-"
         "1}}}",
         "spec.forkFrom.atSeq: must be >= 0"},
        {"{\"spec\":{\"objective\":\"x\",\"messages\":[1]}}", "spec.messages[0]: must be a string"},
        {"{\"spec\":{\"objective\":\"x\",\"memory\":{\"configMapRef\":{\"name\":\"a_b\"}}}}",
         "spec.memory.configMapRef.name: must be a DNS subdomain"},
        {"{\"spec\":{\"objective\":\"x\",\"skills\":[\"s\"]}}",
         "spec.skills[0]: must be an object"},
        {"{\"spec\":{\"objective\":\"x\",\"context\":{\"files\":[{\"configMapRef\":{\"name\":\"a\"}"
         ","
         "\"key\":\"k\"}]}}}",
         "spec.context.files[0].key: unknown field"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        cJSON *j = NULL;
        struct tern_err e = {0};
        if (json_parse(t[i].json, strlen(t[i].json), &j, &e))
            th_fail(__FILE__, __LINE__, "bad test JSON %s: %s", t[i].json, e.msg);
        struct session_spec *s = NULL;
        int r = session_spec_parse(j, &s, &e);
        cJSON_Delete(j);
        if (r != TERN_EINVALID || s)
            th_fail(__FILE__, __LINE__, "%s: got %d, expected TERN_EINVALID", t[i].json, r);
        if (strncmp(e.msg, t[i].msg, strlen(t[i].msg)) != 0)
            th_fail(__FILE__, __LINE__, "%s: message \"%s\", expected \"%s...\"", t[i].json, e.msg,
                    t[i].msg);
    }
}

TEST(spec_bounds_on_lists_and_strings)
{
    /* 257 messages, one over the bound */
    struct buf b;
    buf_init(&b, 1u << 20);
    buf_puts(&b, "{\"spec\":{\"objective\":\"x\",\"messages\":[");
    for (int i = 0; i < 257; i++)
        buf_printf(&b, "%s\"m%d\"", i ? "," : "", i);
    buf_puts(&b, "]}}");
    cJSON *j = NULL;
    ASSERT_OK(json_parse(buf_str(&b), b.len, &j, NULL));
    struct session_spec *s = NULL;
    struct tern_err e = {0};
    ASSERT_EQ_INT(session_spec_parse(j, &s, &e), TERN_EINVALID);
    ASSERT_EQ_STR(e.msg, "spec.messages: must have at most 256 items");
    cJSON_Delete(j);
    /* an objective of 32769 characters (multi-byte ones count once) */
    buf_reset(&b);
    buf_puts(&b, "{\"spec\":{\"objective\":\"");
    for (int i = 0; i < 32768; i++)
        buf_puts(&b, "\xc3\xa9");
    buf_puts(&b, "\"}}");
    ASSERT_OK(json_parse(buf_str(&b), b.len, &j, NULL));
    s = parse_ok(j); /* exactly 32768 characters: fine */
    session_spec_free(s);
    cJSON_Delete(j);
    buf_reset(&b);
    buf_puts(&b, "{\"spec\":{\"objective\":\"x");
    for (int i = 0; i < 32768; i++)
        buf_puts(&b, "\xc3\xa9");
    buf_puts(&b, "\"}}");
    ASSERT_OK(json_parse(buf_str(&b), b.len, &j, NULL));
    ASSERT_EQ_INT(session_spec_parse(j, &s, &e), TERN_EINVALID);
    ASSERT_EQ_STR(e.msg, "spec.objective: must be no more than 32768 characters");
    cJSON_Delete(j);
    buf_done(&b);
}

/* Applies the CRD's `default:` values to obj the way the API server does:
 * a property with a default that is absent gets it; then recurse. */
static void apply_defaults(const cJSON *schema, cJSON *obj)
{
    const cJSON *props = json_get(schema, "properties");
    if (cJSON_IsObject(obj) && props) {
        for (const cJSON *p = props->child; p; p = p->next) {
            const cJSON *def = json_get(p, "default");
            if (def && !json_get(obj, p->string))
                cJSON_AddItemToObject(obj, p->string, json_dup(def));
            cJSON *child = cJSON_GetObjectItemCaseSensitive(obj, p->string);
            if (child)
                apply_defaults(p, child);
        }
    }
    const cJSON *items = json_get(schema, "items");
    if (cJSON_IsArray(obj) && items)
        for (cJSON *c = obj->child; c; c = c->next)
            apply_defaults(items, c);
}

static const cJSON *crd_schema(cJSON *crd)
{
    const cJSON *v = cJSON_GetArrayItem(json_get(json_get(crd, "spec"), "versions"), 0);
    return json_get(json_get(v, "schema"), "openAPIV3Schema");
}

TEST(spec_defaults_agree_with_the_crd)
{
    char *text = read_file("crds/agentsessions.tern.dev.yaml");
    cJSON *crd = NULL;
    struct tern_err e = {0};
    if (yamljson_parse_one(text, strlen(text), NULL, &crd, &e))
        th_fail(__FILE__, __LINE__, "CRD: %s", e.msg);
    free(text);
    const cJSON *schema = crd_schema(crd);
    ASSERT_NOT_NULL(schema);
    const char *files[] = {"examples/minimal.yaml", "examples/approvals-and-limits.yaml",
                           "examples/context-skills-memory.yaml", "examples/trusted-tools.yaml",
                           "examples/demo.yaml", "examples/result-schema.yaml"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        cJSON *doc = session_doc(files[i]);
        struct session_spec *plain = parse_ok(doc);
        apply_defaults(schema, doc);
        struct session_spec *defaulted = parse_ok(doc);
        char *a = dump(plain), *b = dump(defaulted);
        if (strcmp(a, b) != 0)
            th_fail(__FILE__, __LINE__, "%s: our defaults differ from the CRD's:\n%s\nvs\n%s",
                    files[i], a, b);
        free(a);
        free(b);
        session_spec_free(plain);
        session_spec_free(defaulted);
        cJSON_Delete(doc);
    }
    /* and the defaulting did do something on the minimal example */
    cJSON *doc = session_doc("examples/minimal.yaml");
    apply_defaults(schema, doc);
    const cJSON *lim = json_get(json_get(doc, "spec"), "limits");
    int64_t v = 0;
    ASSERT_OK(json_get_int64(lim, "", "maxToolCalls", JSON_REQUIRED, &v, NULL));
    ASSERT_EQ_INT(v, SESSION_DEFAULT_MAX_TOOL_CALLS);
    cJSON_Delete(doc);
    cJSON_Delete(crd);
}

static struct session_spec *spec_of(const char *json)
{
    cJSON *j = NULL;
    if (json_parse(json, strlen(json), &j, NULL))
        th_fail(__FILE__, __LINE__, "bad JSON %s", json);
    struct session_spec *s = parse_ok(j);
    cJSON_Delete(j);
    return s;
}

TEST(spec_trusted_tools)
{
    struct session_spec *s = spec_of(
        "{\"spec\":{\"objective\":\"x\",\"permissions\":{\"requiresApproval\":["
        "\"publish_branch:origin/*\",\"mcp:tracker/create_*:*\\\"prod\\\"*\","
        "\"exec_command:git push*\"]},"
        "\"tools\":{\"mcpServers\":[{\"name\":\"tracker\",\"url\":\"https://mcp.example.com/mcp\","
        "\"headersSecretRef\":{\"name\":\"tracker-mcp\"},\"allowedTools\":[\"search\","
        "\"create_issue\"],\"timeoutSeconds\":30},{\"name\":\"docs\",\"url\":"
        "\"http://127.0.0.1:9/mcp\",\"allowedTools\":[\"lookup\"]}],"
        "\"publish\":{\"remotes\":[{\"name\":\"origin\",\"url\":\"https://git.example.com/a.git\","
        "\"tokenSecretRef\":{\"name\":\"gh\",\"key\":\"token\"}},{\"name\":\"mirror\","
        "\"url\":\"https://m.example.com/a.git\",\"auth\":\"Bearer\",\"username\":\"bot\","
        "\"tokenSecretRef\":{\"name\":\"m\",\"key\":\"t\"}}]}}}}");
    ASSERT_EQ_INT(s->tools.nmcp, 2);
    ASSERT_EQ_STR(s->tools.mcp[0].name, "tracker");
    ASSERT_EQ_STR(s->tools.mcp[0].headers_secret, "tracker-mcp");
    ASSERT_EQ_INT(s->tools.mcp[0].nallowed, 2);
    ASSERT_EQ_STR(s->tools.mcp[0].allowed[1], "create_issue");
    ASSERT_EQ_INT(s->tools.mcp[0].timeout_seconds, 30);
    ASSERT_NULL(s->tools.mcp[1].headers_secret);
    ASSERT_EQ_INT(s->tools.mcp[1].timeout_seconds, SESSION_DEFAULT_MCP_TIMEOUT);
    ASSERT_EQ_INT(s->tools.nremotes, 2);
    ASSERT_EQ_STR(s->tools.remotes[0].username, SESSION_DEFAULT_PUBLISH_USERNAME);
    ASSERT_FALSE(s->tools.remotes[0].bearer);
    ASSERT_EQ_STR(s->tools.remotes[1].username, "bot");
    ASSERT_TRUE(s->tools.remotes[1].bearer);
    ASSERT_EQ_INT(s->permissions.napprovals, 3);
    ASSERT_EQ_INT(s->permissions.approvals[0].tool, SESSION_TOOL_PUBLISH_BRANCH);
    ASSERT_EQ_STR(s->permissions.approvals[0].glob, "origin/*");
    ASSERT_EQ_INT(s->permissions.approvals[1].tool, SESSION_TOOL_MCP);
    ASSERT_EQ_STR(s->permissions.approvals[1].glob, "tracker/create_*:*\"prod\"*");
    ASSERT_EQ_STR(session_tool_name(SESSION_TOOL_MCP), "mcp");
    ASSERT_EQ_STR(session_tool_name(SESSION_TOOL_PUBLISH_BRANCH), "publish_branch");
    /* neither is a name of permissions.tools */
    ASSERT_EQ_INT(session_tool_from_name("publish_branch"), 0);
    session_spec_free(s);
}

TEST(spec_update_rules)
{
    struct session_spec *a = spec_of("{\"spec\":{\"objective\":\"x\",\"messages\":[\"m1\"]}}");
    struct session_spec *b =
        spec_of("{\"spec\":{\"objective\":\"x\",\"messages\":[\"m1\",\"m2\"]}}");
    struct session_spec *c = spec_of("{\"spec\":{\"objective\":\"x\",\"messages\":[\"m0\"]}}");
    struct session_spec *none = spec_of("{\"spec\":{\"objective\":\"x\"}}");
    struct session_spec *f1 = spec_of("{\"spec\":{\"objective\":\"x\",\"forkFrom\":{\"session\":"
                                      "\"p\",\"uid\":\"u\",\"atSeq\":5}}}");
    struct session_spec *f2 = spec_of("{\"spec\":{\"objective\":\"x\",\"forkFrom\":{\"session\":"
                                      "\"p\",\"uid\":\"u\",\"atSeq\":6}}}");
    struct tern_err e = {0};
    ASSERT_OK(session_spec_check_update(a, b, &e));
    ASSERT_OK(session_spec_check_update(none, a, &e));
    ASSERT_OK(session_spec_check_update(f1, f1, &e));
    ASSERT_EQ_INT(session_spec_check_update(b, a, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "spec.messages: messages is append-only");
    ASSERT_EQ_INT(session_spec_check_update(a, c, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "spec.messages[0]: messages is append-only");
    ASSERT_EQ_INT(session_spec_check_update(a, none, &e), TERN_EINVALID);
    ASSERT_EQ_INT(session_spec_check_update(f1, f2, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "forkFrom is immutable");
    ASSERT_EQ_INT(session_spec_check_update(none, f1, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "can only be set when the session is created");
    ASSERT_EQ_INT(session_spec_check_update(f1, none, &e), TERN_EINVALID);
    session_spec_free(a);
    session_spec_free(b);
    session_spec_free(c);
    session_spec_free(none);
    session_spec_free(f1);
    session_spec_free(f2);
}

TEST(spec_cidrs)
{
    struct session_cidr c;
    ASSERT_OK(session_cidr_parse("10.0.0.0/8", &c));
    ASSERT_EQ_INT(c.prefix, 8);
    ASSERT_EQ_INT(c.addr[0], 10);
    ASSERT_OK(session_cidr_parse("0.0.0.0/0", &c));
    ASSERT_OK(session_cidr_parse("fd00::/8", &c));
    ASSERT_EQ_INT(c.addr[0], 0xfd);
    ASSERT_OK(session_cidr_parse("::1/128", &c));
    const char *bad[] = {"10.0.0.0",   "10.0.0.0/",   "10.0.0.0/33", "10.0.0/8",
                         "/8",         "10.0.0.0/-1", "10.0.0.0/08", "x/8",
                         "fd00::/129", "10.0.0.0/8 ", "010.0.0.0/8"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (session_cidr_parse(bad[i], &c) != -EINVAL)
            th_fail(__FILE__, __LINE__, "CIDR \"%s\" accepted", bad[i]);
}

TEST(spec_hosts)
{
    static const struct {
        const char *text, *name;
        bool wildcard;
        int port;
    } ok[] = {
        {"pypi.org", "pypi.org", false, 0},
        {"*.githubusercontent.com", "githubusercontent.com", true, 0},
        {"example.com:8443", "example.com", false, 8443},
        {"*.a-b.example.io:1", "a-b.example.io", true, 1},
        {"x1.y2.z3.co:65535", "x1.y2.z3.co", false, 65535},
        {"xn--bcher-kva.example", "xn--bcher-kva.example", false, 0},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        struct session_host h;
        const char *why = NULL;
        if (session_host_parse(ok[i].text, &h, &why) != 0)
            th_fail(__FILE__, __LINE__, "\"%s\" refused: %s", ok[i].text, why);
        ASSERT_EQ_STR(h.name, ok[i].name);
        ASSERT_EQ_INT(h.wildcard, ok[i].wildcard);
        ASSERT_EQ_INT(h.port, ok[i].port);
        free(h.name);
    }
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"localhost", "at least two labels"},
        {"Pypi.org", "lower case"},
        {"a.*.org", "wildcard"},
        {"*", "wildcard"},
        {"*.", "empty"},
        {"**.org", "wildcard"},
        {"pypi.org:", "port"},
        {"pypi.org:0", "port"},
        {"pypi.org:08", "port"},
        {"pypi.org:65536", "port"},
        {"pypi.org:+80", "port"},
        {"pypi.org:80:80", "port"},
        {"-a.org", "label"},
        {"a-.org", "label"},
        {"a..org", "label"},
        {"a.org.", "label"},
        {".a.org", "label"},
        {"a_b.org", "label"},
        {"example.1com", "last label"},
        {":80", "empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct session_host h;
        const char *why = NULL;
        if (session_host_parse(bad[i].text, &h, &why) == 0)
            th_fail(__FILE__, __LINE__, "\"%s\" accepted", bad[i].text);
        ASSERT_NOT_NULL(why);
        ASSERT_CONTAINS(why, bad[i].why);
    }
    struct session_host e = {.name = "pypi.org"}, w = {.name = "example.com", .wildcard = true},
                        p = {.name = "example.com", .port = 8443};
    ASSERT_TRUE(session_host_match(&e, "pypi.org", 443));
    ASSERT_TRUE(session_host_match(&e, "pypi.org", 80));
    ASSERT_FALSE(session_host_match(&e, "pypi.org", 8080));
    ASSERT_FALSE(session_host_match(&e, "files.pypi.org", 443));
    ASSERT_FALSE(session_host_match(&e, "pypi.org.evil.com", 443));
    ASSERT_FALSE(session_host_match(&e, "xpypi.org", 443));
    ASSERT_TRUE(session_host_match(&w, "a.example.com", 443));
    ASSERT_TRUE(session_host_match(&w, "a.b.example.com", 80));
    ASSERT_FALSE(session_host_match(&w, "example.com", 443));
    ASSERT_FALSE(session_host_match(&w, "badexample.com", 443));
    ASSERT_FALSE(session_host_match(&w, ".example.com", 443));
    ASSERT_TRUE(session_host_match(&p, "example.com", 8443));
    ASSERT_FALSE(session_host_match(&p, "example.com", 443));
}

TEST(spec_allowlist_mixes_cidrs_and_hosts)
{
    const char *text =
        "{\"spec\":{\"objective\":\"x\",\"permissions\":{\"networkAllowlist\":"
        "[\"10.0.0.0/8\",\"pypi.org\",\"fd00::/8\",\"*.githubusercontent.com:443\"]}}}";
    cJSON *doc = NULL;
    ASSERT_OK(json_parse(text, strlen(text), &doc, NULL));
    struct session_spec *s = NULL;
    struct tern_err e = {0};
    ASSERT_OK(session_spec_parse(doc, &s, &e));
    cJSON_Delete(doc);
    ASSERT_EQ_INT(s->permissions.nnetwork, 2);
    ASSERT_EQ_STR(s->permissions.network[0].text, "10.0.0.0/8");
    ASSERT_EQ_STR(s->permissions.network[1].text, "fd00::/8");
    ASSERT_EQ_INT(s->permissions.nhosts, 2);
    ASSERT_EQ_STR(s->permissions.hosts[0].text, "pypi.org");
    ASSERT_EQ_STR(s->permissions.hosts[1].name, "githubusercontent.com");
    ASSERT_EQ_INT(s->permissions.hosts[1].port, 443);
    uint8_t in[4] = {10, 200, 1, 2}, out[4] = {11, 0, 0, 1};
    ASSERT_TRUE(session_cidr_contains(&s->permissions.network[0], AF_INET, in));
    ASSERT_FALSE(session_cidr_contains(&s->permissions.network[0], AF_INET, out));
    ASSERT_FALSE(session_cidr_contains(&s->permissions.network[1], AF_INET, in));
    session_spec_free(s);
}

TEST(spec_cidr_contains_prefix_bits)
{
    struct session_cidr c;
    ASSERT_OK(session_cidr_parse("172.16.0.0/12", &c));
    uint8_t a[4] = {172, 31, 255, 255}, b[4] = {172, 32, 0, 0};
    ASSERT_TRUE(session_cidr_contains(&c, AF_INET, a));
    ASSERT_FALSE(session_cidr_contains(&c, AF_INET, b));
    ASSERT_OK(session_cidr_parse("0.0.0.0/0", &c));
    ASSERT_TRUE(session_cidr_contains(&c, AF_INET, b));
    ASSERT_OK(session_cidr_parse("fe80::/10", &c));
    uint8_t v6[16] = {0xfe, 0xbf}, v6o[16] = {0xfe, 0xc0};
    ASSERT_TRUE(session_cidr_contains(&c, AF_INET6, v6));
    ASSERT_FALSE(session_cidr_contains(&c, AF_INET6, v6o));
}

TEST(spec_quantities)
{
    static const struct {
        const char *s;
        long long milli;
    } ok[] = {
        {"1", 1000},
        {"500m", 500},
        {"0.5", 500},
        {"1.5", 1500},
        {"2k", 2000000},
        {"1Ki", 1024000},
        {"1Gi", 1073741824000LL},
        {"1e3", 1000000},
        {"1E3", 1000000},
        {"1E", 0},
        {"100n", 1},
        {"1u", 1},
        {"0", 0},
        {".5", 500},
        {"5.", 5000},
        {"+3", 3000},
        {"-1", -1000},
        {"0.1m", 1},
        {"1e-3", 1},
        {"1.25Ki", 1280000},
        {"8Ei", -1},
        {"9223372036854775", 9223372036854775000LL},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        struct quantity q;
        int r = quantity_parse(ok[i].s, &q);
        if (ok[i].milli == -1) { /* out of range */
            if (r != -ERANGE)
                th_fail(__FILE__, __LINE__, "%s: got %d, expected -ERANGE", ok[i].s, r);
            continue;
        }
        if (strcmp(ok[i].s, "1E") == 0) { /* exa: 10^18 * 1000 overflows */
            ASSERT_EQ_INT(r, -ERANGE);
            continue;
        }
        if (r || q.milli != ok[i].milli)
            th_fail(__FILE__, __LINE__, "%s: got %d / %lld, expected %lld", ok[i].s, r,
                    (long long)q.milli, ok[i].milli);
        ASSERT_EQ_STR(q.text, ok[i].s);
    }
    const char *bad[] = {"",      "m",   "1 Gi", "1GB",  "1gi",   "1Kii", "1e", "1e+",
                         "1.2.3", "--1", "1mm",  "0x10", "1e1.5", " 1",   "1K"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct quantity q;
        if (quantity_parse(bad[i], &q) != -EINVAL)
            th_fail(__FILE__, __LINE__, "quantity \"%s\" accepted", bad[i]);
    }
    struct quantity q;
    ASSERT_OK(quantity_parse("1500m", &q));
    ASSERT_EQ_INT(quantity_units(&q), 2);
}

TEST(spec_tool_names)
{
    ASSERT_EQ_INT(session_tool_from_name("list_files"), SESSION_TOOL_LIST_FILES);
    ASSERT_EQ_INT(session_tool_from_name("List_files"), 0);
    ASSERT_EQ_STR(session_tool_name(SESSION_TOOL_EXEC_COMMAND), "exec_command");
    ASSERT_NULL(session_tool_name(3));
}

static void expect_invalid(const char *json, const char *msg)
{
    cJSON *j = NULL;
    if (json_parse(json, strlen(json), &j, NULL))
        th_fail(__FILE__, __LINE__, "bad JSON %s", json);
    struct session_spec *s = NULL;
    struct tern_err e = {0};
    int r = session_spec_parse(j, &s, &e);
    cJSON_Delete(j);
    if (r != TERN_EINVALID || s)
        th_fail(__FILE__, __LINE__, "%s: got %d, expected TERN_EINVALID", json, r);
    ASSERT_CONTAINS(e.msg, msg);
}

TEST(spec_result_schema)
{
    struct session_spec *s = spec_of("{\"spec\":{\"objective\":\"x\"}}");
    ASSERT_NULL(s->result_schema);
    ASSERT_EQ_INT(s->limits.max_result_attempts, SESSION_DEFAULT_MAX_RESULT_ATTEMPTS);
    session_spec_free(s);
    s = spec_of("{\"spec\":{\"objective\":\"x\",\"limits\":{\"maxResultAttempts\":5},"
                "\"result\":{\"schema\":{\"type\":\"object\",\"required\":[\"n\"],"
                "\"properties\":{\"n\":{\"type\":\"integer\"}}}}}}");
    ASSERT_NOT_NULL(s->result_schema);
    ASSERT_EQ_INT(s->limits.max_result_attempts, 5);
    char *t = json_print(s->result_schema);
    ASSERT_EQ_STR(t, "{\"type\":\"object\",\"required\":[\"n\"],\"properties\":{\"n\":{\"type\":"
                     "\"integer\"}}}");
    free(t);
    session_spec_free(s);
    /* the validator's message, under the field's path */
    expect_invalid("{\"spec\":{\"objective\":\"x\",\"result\":{\"schema\":{\"properties\":"
                   "{\"a\":{\"anyOf\":[]}}}}}}",
                   "spec.result.schema: at \"/properties/a/anyOf\": keyword \"anyOf\" is not "
                   "supported");
    expect_invalid("{\"spec\":{\"objective\":\"x\",\"result\":{\"schema\":true}}}",
                   "spec.result.schema: must be");
    expect_invalid("{\"spec\":{\"objective\":\"x\",\"result\":{\"shape\":{}}}}",
                   "spec.result.shape");
    expect_invalid("{\"spec\":{\"objective\":\"x\",\"limits\":{\"maxResultAttempts\":0}}}",
                   "spec.limits.maxResultAttempts: must be >= 1");
    expect_invalid("{\"spec\":{\"objective\":\"x\",\"limits\":{\"maxResultAttempts\":21}}}",
                   "spec.limits.maxResultAttempts: must be <= 20");
}
