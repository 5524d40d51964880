/* Unit tests for controller/children: the objects a session owns. */
#include "harness.h"

#include "base/mem.h"
#include "controller/children.h"
#include "json/json.h"
#include "sandbox/sandbox_contract.h"
#include "yaml/yamljson.h"

#include <stdio.h>
#include <stdlib.h>

static const struct children_config cfg = {
    .runner_image = "tern:test",
    .sandbox_image = "sandbox:default",
    .etcd_endpoints = "http://127.0.0.1:2379",
    .runner_service_account = "tern-runner",
    .turn_backoff_limit = 4,
    .job_ttl_seconds = 3600,
};

/* Loads an example manifest, adds the uid the API server would set, parses it. */
static struct session_spec *load(const char *path)
{
    FILE *f = fopen(path, "rb");
    ASSERT_NOT_NULL(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    cJSON *docs = NULL;
    struct tern_err e = {0};
    if (yamljson_parse_stream(text, n, NULL, &docs, &e))
        th_fail(__FILE__, __LINE__, "%s: %s", path, e.msg);
    cJSON *obj = NULL;
    cJSON *d;
    cJSON_ArrayForEach(d, docs)
    {
        const cJSON *k = json_get(d, "kind");
        if (cJSON_IsString(k) && strcmp(k->valuestring, "AgentSession") == 0)
            obj = d;
    }
    ASSERT_NOT_NULL(obj);
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    json_add_string(meta, "uid", "0d8f-uid");
    if (!json_get(meta, "namespace")) /* as the API server would default it */
        json_add_string(meta, "namespace", "default");
    struct session_spec *s = NULL;
    if (session_spec_parse(obj, &s, &e))
        th_fail(__FILE__, __LINE__, "%s: %s", path, e.msg);
    cJSON_Delete(docs);
    return s;
}

static const cJSON *at(const cJSON *o, const char *path)
{
    /* dotted path with [i] indexes */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *cur = o;
    for (char *p = buf, *next; p && *p; p = next) {
        next = strchr(p, '.');
        if (next)
            *next++ = '\0';
        char *br = strchr(p, '[');
        int idx = -1;
        if (br) {
            *br = '\0';
            idx = (int)(br[1] - '0');
        }
        cur = json_get(cur, p);
        if (idx >= 0)
            cur = cJSON_GetArrayItem(cur, idx);
        if (!cur)
            return NULL;
    }
    return cur;
}

static const char *s_at(const cJSON *o, const char *path)
{
    const cJSON *v = at(o, path);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t i_at(const cJSON *o, const char *path)
{
    int64_t v = -999;
    const cJSON *it = at(o, path);
    if (!it || json_item_int64(it, &v))
        th_fail(__FILE__, __LINE__, "%s: not an integer", path);
    return v;
}

static bool b_at(const cJSON *o, const char *path)
{
    return cJSON_IsTrue(at(o, path));
}

TEST(sandbox_pod_is_hardened_and_owned)
{
    struct session_spec *s = load("examples/approvals-and-limits.yaml");
    cJSON *pod = children_sandbox_pod(s, &cfg);
    ASSERT_EQ_STR(s_at(pod, "metadata.name"), "fix-flaky-test-sandbox");
    ASSERT_EQ_STR(s_at(pod, "metadata.namespace"), "default");
    ASSERT_EQ_STR(s_at(pod, "metadata.ownerReferences[0].uid"), "0d8f-uid");
    ASSERT_TRUE(b_at(pod, "metadata.ownerReferences[0].controller"));
    ASSERT_EQ_STR(json_get(json_get(at(pod, "metadata"), "labels"), "tern.dev/role")->valuestring,
                  "sandbox");
    ASSERT_FALSE(b_at(pod, "spec.automountServiceAccountToken"));
    ASSERT_NOT_NULL(at(pod, "spec.automountServiceAccountToken"));
    ASSERT_EQ_STR(s_at(pod, "spec.runtimeClassName"), "gvisor");
    ASSERT_TRUE(b_at(pod, "spec.securityContext.runAsNonRoot"));
    ASSERT_EQ_INT(i_at(pod, "spec.securityContext.runAsUser"), SANDBOX_UID);
    ASSERT_EQ_STR(s_at(pod, "spec.securityContext.seccompProfile.type"), "RuntimeDefault");
    const cJSON *c = at(pod, "spec.containers[0]");
    ASSERT_EQ_STR(s_at(c, "image"), "ghcr.io/tern-dev/tern-sandbox-python:0.1.0");
    ASSERT_TRUE(b_at(c, "securityContext.readOnlyRootFilesystem"));
    ASSERT_FALSE(b_at(c, "securityContext.allowPrivilegeEscalation"));
    ASSERT_EQ_STR(s_at(c, "securityContext.capabilities.drop[0]"), "ALL");
    ASSERT_EQ_STR(s_at(c, "resources.limits.cpu"), "500m");
    ASSERT_EQ_STR(s_at(c, "resources.limits.memory"), "512Mi");
    /* a tenth of the CPU limit is requested (a real scheduler fits more
     * idle sandboxes than cores), all of the memory */
    ASSERT_EQ_STR(s_at(c, "resources.requests.cpu"), "50m");
    ASSERT_EQ_STR(s_at(c, "resources.requests.memory"), "512Mi");
    ASSERT_EQ_INT(i_at(c, "ports[0].containerPort"), SANDBOX_PORT);
    char *args = json_print(at(c, "args"));
    ASSERT_CONTAINS(args, "\"--token-file\",\"" SANDBOX_TOKEN_FILE "\"");
    ASSERT_CONTAINS(args, "\"--writable\",\"working/**,output/**\"");
    ASSERT_CONTAINS(args, "\"--listen\",\"$(TERN_POD_IP):8080\"");
    free(args);
    /* no credentials in the sandbox: only its own address in the env, no
     * secret but its token */
    ASSERT_EQ_INT(cJSON_GetArraySize(at(c, "env")), 1);
    ASSERT_EQ_STR(s_at(c, "env[0].valueFrom.fieldRef.fieldPath"), "status.podIP");
    char *all = json_print(pod);
    ASSERT_FALSE(strstr(all, "openai") != NULL);
    ASSERT_FALSE(strstr(all, "OPENAI") != NULL);
    free(all);
    /* task.md read-only over the workspace */
    const cJSON *m;
    bool task_ro = false;
    cJSON_ArrayForEach(m, at(c, "volumeMounts"))
    {
        if (strcmp(s_at(m, "mountPath"), SANDBOX_WORKSPACE "/task.md") == 0)
            task_ro = b_at(m, "readOnly");
    }
    ASSERT_TRUE(task_ro);
    cJSON_Delete(pod);
    session_spec_free(s);
}

TEST(sandbox_hash_follows_the_sandbox_fields_only)
{
    struct session_spec *s = load("examples/approvals-and-limits.yaml");
    char a[17], b[17];
    children_sandbox_hash(s, &cfg, a);
    free(s->objective);
    s->objective = xstrdup("something else");
    children_sandbox_hash(s, &cfg, b);
    ASSERT_EQ_STR(a, b);
    free(s->sandbox.image);
    s->sandbox.image = xstrdup("other:image");
    children_sandbox_hash(s, &cfg, b);
    ASSERT_TRUE(strcmp(a, b) != 0);
    session_spec_free(s);
}

TEST(turn_job_carries_the_key_by_reference_and_fails_fast_on_78)
{
    struct session_spec *s = load("examples/approvals-and-limits.yaml");
    cJSON *job = children_turn_job(s, &cfg, 7, NULL);
    ASSERT_EQ_STR(s_at(job, "metadata.name"), "fix-flaky-test-t7");
    ASSERT_EQ_INT(i_at(job, "spec.backoffLimit"), 4);
    ASSERT_EQ_INT(i_at(job, "spec.activeDeadlineSeconds"), 1800 + CHILDREN_DEADLINE_GRACE);
    ASSERT_EQ_STR(s_at(job, "spec.podFailurePolicy.rules[0].action"), "FailJob");
    ASSERT_EQ_INT(i_at(job, "spec.podFailurePolicy.rules[0].onExitCodes.values[0]"), 78);
    const cJSON *pod = at(job, "spec.template.spec");
    ASSERT_EQ_STR(s_at(pod, "restartPolicy"), "Never");
    ASSERT_EQ_STR(s_at(pod, "serviceAccountName"), "tern-runner");
    const cJSON *e, *env = at(pod, "containers[0].env");
    bool key = false, turn = false;
    cJSON_ArrayForEach(e, env)
    {
        const char *n = s_at(e, "name");
        if (strcmp(n, "OPENAI_API_KEY") == 0) {
            ASSERT_NULL(json_get(e, "value"));
            ASSERT_EQ_STR(s_at(e, "valueFrom.secretKeyRef.name"), "openai");
            ASSERT_EQ_STR(s_at(e, "valueFrom.secretKeyRef.key"), "api-key");
            key = true;
        }
        if (strcmp(n, "TERN_TURN") == 0) {
            ASSERT_EQ_STR(s_at(e, "value"), "7");
            turn = true;
        }
    }
    ASSERT_TRUE(key);
    ASSERT_TRUE(turn);
    cJSON_Delete(job);
    session_spec_free(s);
}

TEST(network_policy_allows_runner_in_and_allowlist_out)
{
    struct session_spec *s = load("examples/approvals-and-limits.yaml");
    cJSON *np = children_network_policy(s, &cfg);
    const cJSON *from = at(np, "spec.ingress[0].from[0].podSelector.matchLabels");
    ASSERT_EQ_STR(json_get(from, "tern.dev/role")->valuestring, "runner");
    ASSERT_EQ_STR(json_get(from, "tern.dev/session-uid")->valuestring, "0d8f-uid");
    ASSERT_EQ_INT(i_at(np, "spec.ingress[0].ports[0].port"), SANDBOX_PORT);
    /* the operator's pods, for the aggregated API */
    ASSERT_EQ_STR(json_get(at(np, "spec.ingress[0].from[2].podSelector.matchLabels"),
                           "app.kubernetes.io/component")
                      ->valuestring,
                  "operator");
    /* the sandbox and the read-only viewer are behind it */
    ASSERT_EQ_STR(json_get(at(np, "spec.podSelector.matchLabels"), "tern.dev/session-uid")
                      ->valuestring,
                  "0d8f-uid");
    ASSERT_EQ_STR(s_at(np, "spec.podSelector.matchExpressions[0].values[1]"), "viewer");
    ASSERT_EQ_STR(s_at(np, "spec.egress[0].to[0].ipBlock.cidr"), "10.20.0.0/16");
    cJSON_Delete(np);
    session_spec_free(s);
    s = load("examples/minimal.yaml");
    np = children_network_policy(s, &cfg);
    ASSERT_EQ_INT(cJSON_GetArraySize(at(np, "spec.egress")), 0); /* no egress at all */
    ASSERT_EQ_STR(s_at(np, "spec.policyTypes[1]"), "Egress");
    cJSON_Delete(np);
    session_spec_free(s);
}

TEST(locked_journal_turn_job_mounts_the_session_secret)
{
    struct session_spec *s = load("examples/approvals-and-limits.yaml");
    struct children_config locked = cfg;
    locked.journal_locked = true;
    cJSON *job = children_turn_job(s, &locked, 2, NULL);
    const cJSON *pod = at(job, "spec.template.spec");
    const cJSON *e, *v;
    bool user = false, pw = false, vol = false;
    cJSON_ArrayForEach(e, at(pod, "containers[0].env"))
    {
        if (strcmp(s_at(e, "name"), "TERN_ETCD_USERNAME") == 0) {
            ASSERT_EQ_STR(s_at(e, "value"), "tern-s-0d8f-uid");
            user = true;
        }
        if (strcmp(s_at(e, "name"), "TERN_ETCD_PASSWORD_FILE") == 0) {
            ASSERT_EQ_STR(s_at(e, "value"), CHILDREN_JOURNAL_DIR "/password");
            pw = true;
        }
    }
    cJSON_ArrayForEach(v, json_get(pod, "volumes"))
    {
        if (strcmp(s_at(v, "name"), "journal") == 0) {
            ASSERT_EQ_STR(s_at(v, "secret.secretName"), "fix-flaky-test-journal");
            vol = true;
        }
    }
    ASSERT_TRUE(user && pw && vol);
    cJSON_Delete(job);
    /* unlocked: no journal Secret at all */
    job = children_turn_job(s, &cfg, 2, NULL);
    cJSON_ArrayForEach(v, at(job, "spec.template.spec.volumes"))
    {
        ASSERT_TRUE(strcmp(s_at(v, "name"), "journal") != 0);
    }
    cJSON_Delete(job);
    session_spec_free(s);
}

TEST(viewer_job_reads_the_workspace_read_only)
{
    struct session_spec *s = load("examples/approvals-and-limits.yaml");
    cJSON *job = children_viewer_job(s, &cfg);
    ASSERT_EQ_STR(s_at(job, "metadata.generateName"), "fix-flaky-test-files-");
    ASSERT_NULL(json_get(json_get(job, "metadata"), "name"));
    ASSERT_EQ_STR(json_get(at(job, "spec.template.metadata.labels"), "tern.dev/role")->valuestring,
                  "viewer");
    const cJSON *pod = at(job, "spec.template.spec");
    ASSERT_TRUE(cJSON_IsFalse(json_get(pod, "automountServiceAccountToken")));
    ASSERT_EQ_STR(s_at(pod, "containers[0].args[0]"), "--read-only");
    const cJSON *v;
    bool ws = false;
    cJSON_ArrayForEach(v, json_get(pod, "volumes"))
    {
        if (strcmp(s_at(v, "name"), "workspace") == 0) {
            ASSERT_TRUE(cJSON_IsTrue(at(v, "persistentVolumeClaim.readOnly")));
            ws = true;
        }
    }
    ASSERT_TRUE(ws);
    ASSERT_TRUE(cJSON_IsTrue(at(pod, "containers[0].volumeMounts[0].readOnly")));
    cJSON_Delete(job);
    session_spec_free(s);
}

static const char *env_of(const cJSON *pod, const char *name)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, at(pod, "spec.containers[0].env"))
    {
        if (strcmp(s_at(e, "name"), name) == 0)
            return s_at(e, "value");
    }
    return NULL;
}

TEST(egress_proxy_in_policy_and_pod)
{
    struct children_config pc = cfg;
    pc.egress_proxy = "10.96.0.42:3128";
    struct session_spec *s = load("examples/approvals-and-limits.yaml");
    /* by address: an ipBlock of the proxy, on its port only; the CIDRs after */
    cJSON *np = children_network_policy(s, &pc);
    ASSERT_EQ_INT(cJSON_GetArraySize(at(np, "spec.egress")), 2);
    ASSERT_EQ_STR(s_at(np, "spec.egress[0].to[0].ipBlock.cidr"), "10.96.0.42/32");
    ASSERT_EQ_STR(s_at(np, "spec.egress[0].ports[0].protocol"), "TCP");
    ASSERT_EQ_INT(i_at(np, "spec.egress[0].ports[0].port"), 3128);
    ASSERT_EQ_STR(s_at(np, "spec.egress[1].to[0].ipBlock.cidr"), "10.20.0.0/16");
    ASSERT_NULL(at(np, "spec.egress[1].ports"));
    cJSON_Delete(np);
    /* by selector: the proxy pods of their namespace */
    pc.egress_proxy_namespace = "tern-system";
    pc.egress_proxy_labels = "app.kubernetes.io/name=tern,app.kubernetes.io/component=egress-proxy";
    np = children_network_policy(s, &pc);
    ASSERT_NULL(at(np, "spec.egress[0].to[0].ipBlock"));
    const cJSON *nsl = at(np, "spec.egress[0].to[0].namespaceSelector.matchLabels");
    ASSERT_EQ_STR(json_get(nsl, "kubernetes.io/metadata.name")->valuestring, "tern-system");
    const cJSON *psl = at(np, "spec.egress[0].to[0].podSelector.matchLabels");
    ASSERT_EQ_STR(json_get(psl, "app.kubernetes.io/component")->valuestring, "egress-proxy");
    ASSERT_EQ_INT(i_at(np, "spec.egress[0].ports[0].port"), 3128);
    cJSON_Delete(np);
    /* the pod: proxy variables in both spellings, NO_PROXY with the CIDRs */
    cJSON *pod = children_sandbox_pod(s, &pc);
    ASSERT_EQ_STR(env_of(pod, "HTTPS_PROXY"), "http://10.96.0.42:3128");
    ASSERT_EQ_STR(env_of(pod, "https_proxy"), "http://10.96.0.42:3128");
    ASSERT_EQ_STR(env_of(pod, "HTTP_PROXY"), "http://10.96.0.42:3128");
    ASSERT_EQ_STR(env_of(pod, "http_proxy"), "http://10.96.0.42:3128");
    ASSERT_EQ_STR(env_of(pod, "NO_PROXY"), "localhost,127.0.0.1,::1,10.20.0.0/16");
    ASSERT_EQ_STR(env_of(pod, "no_proxy"), "localhost,127.0.0.1,::1,10.20.0.0/16");
    cJSON_Delete(pod);
    /* the proxy is part of the sandbox hash; without one the hash is unchanged */
    char h1[17], h2[17], h3[17];
    children_sandbox_hash(s, &cfg, h1);
    children_sandbox_hash(s, &pc, h2);
    pc.egress_proxy = "10.96.0.43:3128";
    children_sandbox_hash(s, &pc, h3);
    ASSERT_TRUE(strcmp(h1, h2) != 0 && strcmp(h2, h3) != 0);
    pod = children_sandbox_pod(s, &cfg);
    ASSERT_NULL(env_of(pod, "HTTPS_PROXY"));
    cJSON_Delete(pod);
    session_spec_free(s);
    /* no proxy, no CIDR: no egress at all */
    s = load("examples/minimal.yaml");
    np = children_network_policy(s, &cfg);
    ASSERT_EQ_INT(cJSON_GetArraySize(at(np, "spec.egress")), 0);
    cJSON_Delete(np);
    pc.egress_proxy = "[fd00::5]:3128";
    pc.egress_proxy_labels = NULL;
    np = children_network_policy(s, &pc);
    ASSERT_EQ_INT(cJSON_GetArraySize(at(np, "spec.egress")), 1);
    ASSERT_EQ_STR(s_at(np, "spec.egress[0].to[0].ipBlock.cidr"), "fd00::5/128");
    cJSON_Delete(np);
    session_spec_free(s);
}

TEST(workspace_and_read_only_context)
{
    struct session_spec *s = load("examples/context-skills-memory.yaml");
    cJSON *pvc = children_pvc(s, &cfg);
    ASSERT_EQ_STR(s_at(pvc, "spec.accessModes[0]"), "ReadWriteOnce");
    ASSERT_NOT_NULL(s_at(pvc, "spec.resources.requests.storage"));
    cJSON_Delete(pvc);
    cJSON *pod = children_sandbox_pod(s, &cfg);
    const cJSON *m;
    int ro = 0;
    cJSON_ArrayForEach(m, at(pod, "spec.containers[0].volumeMounts"))
    {
        const char *p = s_at(m, "mountPath");
        if (strncmp(p, SANDBOX_WORKSPACE "/input", strlen(SANDBOX_WORKSPACE "/input")) == 0 ||
            strncmp(p, SANDBOX_WORKSPACE "/skills/", strlen(SANDBOX_WORKSPACE "/skills/")) == 0 ||
            strcmp(p, SANDBOX_WORKSPACE "/simple.md") == 0) {
            ASSERT_TRUE(b_at(m, "readOnly"));
            ro++;
        }
    }
    ASSERT_CMP_INT(ro, >=, 3);
    cJSON_Delete(pod);
    cJSON *cm = children_task_configmap(s);
    ASSERT_CONTAINS(json_get(json_get(cm, "data"), "task.md")->valuestring, "# Task");
    cJSON_Delete(cm);
    session_spec_free(s);
}

TEST(turn_job_gets_its_price_by_the_downward_api)
{
    struct session_spec *s = load("examples/approvals-and-limits.yaml");
    const char *price = "{\"prices\":{\"gpt-5.4-mini\":{\"input\":750000,\"cachedInput\":75000,"
                        "\"output\":4500000}}}";
    cJSON *job = children_turn_job(s, &cfg, 1, price);
    ASSERT_EQ_STR(json_get(at(job, "spec.template.metadata.annotations"), "tern.dev/prices")
                      ->valuestring,
                  price);
    const cJSON *pod = at(job, "spec.template.spec");
    ASSERT_EQ_STR(s_at(pod, "containers[0].terminationMessagePolicy"), "FallbackToLogsOnError");
    bool env_ok = false, vol_ok = false, mount_ok = false;
    const cJSON *e;
    cJSON_ArrayForEach(e, at(pod, "containers[0].env"))
        env_ok = env_ok || (strcmp(s_at(e, "name"), "TERN_PRICES_FILE") == 0 &&
                            strcmp(s_at(e, "value"), CHILDREN_PRICES_FILE) == 0);
    cJSON_ArrayForEach(e, at(pod, "volumes"))
        vol_ok = vol_ok || (json_get(e, "downwardAPI") &&
                            strcmp(s_at(e, "downwardAPI.items[0].fieldRef.fieldPath"),
                                   "metadata.annotations['tern.dev/prices']") == 0);
    cJSON_ArrayForEach(e, at(pod, "containers[0].volumeMounts"))
        mount_ok = mount_ok || strcmp(s_at(e, "mountPath"), CHILDREN_PRICES_DIR) == 0;
    ASSERT_TRUE(env_ok);
    ASSERT_TRUE(vol_ok);
    ASSERT_TRUE(mount_ok);
    cJSON_Delete(job);
    /* no price: nothing about prices */
    job = children_turn_job(s, &cfg, 1, NULL);
    ASSERT_NULL(at(job, "spec.template.metadata.annotations"));
    cJSON_Delete(job);
    session_spec_free(s);
}

TEST(task_md_holds_what_the_system_prompt_says)
{
    /* objective, context, references; the follow-up messages are not
     * there (runner/prompt.c says they come in the conversation) */
    struct session_spec *s = load("examples/approvals-and-limits.yaml");
    for (size_t i = 0; i < s->nmessages; i++)
        free(s->messages[i]);
    free(s->messages);
    char **m = xcalloc(1, sizeof *m);
    m[0] = xstrdup("a follow-up only the conversation carries");
    s->messages = m;
    s->nmessages = 1;
    cJSON *cm = children_task_configmap(s);
    const char *md = json_get(at(cm, "data"), "task.md")->valuestring;
    ASSERT_CONTAINS(md, s->objective);
    ASSERT_TRUE(strstr(md, "a follow-up only") == NULL);
    cJSON_Delete(cm);
    session_spec_free(s);
}

TEST(namespace_ttls_parse_bounded_and_take_precedence)
{
    struct children_ns_ttl *v = NULL;
    size_t n = 0;
    struct tern_err e = {0};
    ASSERT_EQ_INT(children_parse_ns_ttls("team-a=3600,ci=0", &v, &n, &e), 0);
    ASSERT_EQ_INT((long long)n, 2);
    ASSERT_EQ_STR(v[0].ns, "team-a");
    ASSERT_EQ_INT(v[0].seconds, 3600);
    ASSERT_EQ_INT(v[1].seconds, 0);
    /* precedence: spec, then the namespace, then the operator (0: keep) */
    struct session_spec *s = load("examples/approvals-and-limits.yaml");
    struct children_config c = cfg;
    c.ns_ttls = v;
    c.nns_ttls = n;
    c.session_ttl_seconds = 60;
    free(s->namespace);
    s->namespace = xstrdup("team-a");
    s->ttl_seconds_after_finished = -1;
    ASSERT_EQ_INT(children_session_ttl(s, &c), 3600);
    free(s->namespace);
    s->namespace = xstrdup("ci");
    ASSERT_EQ_INT(children_session_ttl(s, &c), -1);
    free(s->namespace);
    s->namespace = xstrdup("other");
    ASSERT_EQ_INT(children_session_ttl(s, &c), 60);
    s->ttl_seconds_after_finished = 5;
    ASSERT_EQ_INT(children_session_ttl(s, &c), 5);
    session_spec_free(s);
    children_ns_ttls_free(v, n);
    /* refused, with the entry named */
    static const char *const bad[] = {"team-a",         "=5",           "Team=5", "a=-1",
                                      "a=31536001",     "a=5,a=6",      "a=5,",   "a=",
                                      "-a=5",           "a=5x",         ",a=5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e = (struct tern_err){0};
        ASSERT_EQ_INT(children_parse_ns_ttls(bad[i], &v, &n, &e), TERN_EINVALID);
        ASSERT_NULL(v);
        ASSERT_TRUE(e.msg[0] != '\0');
    }
    ASSERT_EQ_INT(children_parse_ns_ttls("", &v, &n, &e), 0);
    ASSERT_EQ_INT((long long)n, 0);
}
