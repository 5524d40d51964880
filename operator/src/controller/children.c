/* children.c - the objects a session owns. See children.h. */
#include "children.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "journal/journal.h"
#include "json/json.h"
#include "sandbox/sandbox_contract.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *children_name(const char *session, const char *suffix)
{
    return xasprintf("%s-%s", session, suffix);
}

char *children_job_name(const char *session, int64_t turn)
{
    return xasprintf("%s-t%lld", session, (long long)turn);
}

static cJSON *obj(void)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        abort();
    return o;
}

static cJSON *arr(cJSON *parent, const char *key)
{
    cJSON *a = cJSON_AddArrayToObject(parent, key);
    if (!a)
        abort();
    return a;
}

static cJSON *sub(cJSON *parent, const char *key)
{
    cJSON *o = cJSON_AddObjectToObject(parent, key);
    if (!o)
        abort();
    return o;
}

static void str(cJSON *o, const char *key, const char *v)
{
    json_add_string(o, key, v);
}

static void boolean(cJSON *o, const char *key, int v)
{
    cJSON_AddItemToObject(o, key, cJSON_CreateBool(v));
}

static void push_str(cJSON *a, const char *v)
{
    cJSON_AddItemToArray(a, cJSON_CreateString(v));
}

static cJSON *push_obj(cJSON *a)
{
    cJSON *o = obj();
    cJSON_AddItemToArray(a, o);
    return o;
}

static void labels(cJSON *meta, const struct session_spec *s, const char *role)
{
    cJSON *l = sub(meta, "labels");
    str(l, CHILDREN_LABEL_SESSION, s->name);
    str(l, CHILDREN_LABEL_SESSION_UID, s->uid);
    str(l, CHILDREN_LABEL_ROLE, role);
    str(l, "app.kubernetes.io/managed-by", "tern");
}

/* A new object with apiVersion, kind and metadata owned by the session. */
static cJSON *child(const struct session_spec *s, const char *api_version, const char *kind,
                    const char *name, const char *role)
{
    cJSON *o = obj();
    str(o, "apiVersion", api_version);
    str(o, "kind", kind);
    cJSON *meta = sub(o, "metadata");
    str(meta, "name", name);
    str(meta, "namespace", s->namespace);
    labels(meta, s, role);
    cJSON *owner = push_obj(arr(meta, "ownerReferences"));
    str(owner, "apiVersion", "tern.dev/v1alpha1");
    str(owner, "kind", "AgentSession");
    str(owner, "name", s->name);
    str(owner, "uid", s->uid);
    boolean(owner, "controller", 1);
    boolean(owner, "blockOwnerDeletion", 1);
    return o;
}

static cJSON *selector_labels(cJSON *parent, const char *key, const struct session_spec *s,
                              const char *role)
{
    cJSON *l = sub(parent, key);
    str(l, CHILDREN_LABEL_SESSION_UID, s->uid);
    str(l, CHILDREN_LABEL_ROLE, role);
    return l;
}

cJSON *children_pvc(const struct session_spec *s, const struct children_config *c)
{
    char *name = children_name(s->name, "workspace");
    cJSON *o = child(s, "v1", "PersistentVolumeClaim", name, "workspace");
    free(name);
    cJSON *spec = sub(o, "spec");
    push_str(arr(spec, "accessModes"), "ReadWriteOnce");
    const char *sc = s->sandbox.storage_class ? s->sandbox.storage_class : c->storage_class;
    if (sc)
        str(spec, "storageClassName", sc);
    cJSON *req = sub(sub(spec, "resources"), "requests");
    str(req, "storage", s->sandbox.workspace_size.text);
    return o;
}

cJSON *children_token_secret(const struct session_spec *s, const char *token)
{
    char *name = children_name(s->name, "sandbox-token");
    cJSON *o = child(s, "v1", "Secret", name, "token");
    free(name);
    str(o, "type", "Opaque");
    str(sub(o, "stringData"), "token", token);
    return o;
}

cJSON *children_task_configmap(const struct session_spec *s)
{
    char *name = children_name(s->name, "task");
    cJSON *o = child(s, "v1", "ConfigMap", name, "task");
    free(name);
    struct buf b;
    buf_init(&b, 1u << 20);
    buf_printf(&b, "# Task\n\n%s\n", s->objective);
    if (s->context.text)
        buf_printf(&b, "\n## Context\n\n%s\n", s->context.text);
    if (s->context.nreferences) {
        buf_puts(&b, "\n## References\n\n");
        for (size_t i = 0; i < s->context.nreferences; i++)
            buf_printf(&b, "- %s\n", s->context.references[i]);
    }
    str(sub(o, "data"), "task.md", buf_str(&b));
    buf_done(&b);
    return o;
}

/* "k=v,k2=v2" into a matchLabels object; false when malformed. */
static bool match_labels(cJSON *sel, const char *text)
{
    cJSON *ml = sub(sel, "matchLabels");
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, ",");
        const char *eq = memchr(p, '=', n);
        if (!eq || eq == p)
            return false;
        char *k = xstrndup(p, (size_t)(eq - p));
        char *v = xstrndup(eq + 1, n - (size_t)(eq - p) - 1);
        str(ml, k, v);
        free(k);
        free(v);
        p += n;
        if (*p == ',')
            p++;
    }
    return true;
}

/* HOST and PORT of "HOST:PORT" / "[v6]:PORT": host into out, port or -1. */
static int proxy_hostport(const char *proxy, char *out, size_t n)
{
    const char *colon = strrchr(proxy, ':');
    if (!colon || !colon[1])
        return -1;
    const char *h = proxy;
    size_t hn = (size_t)(colon - proxy);
    if (hn >= 2 && h[0] == '[' && h[hn - 1] == ']') {
        h++;
        hn -= 2;
    }
    if (hn == 0 || hn >= n)
        return -1;
    memcpy(out, h, hn);
    out[hn] = '\0';
    int64_t port;
    if (num_parse_range(colon + 1, 1, 65535, &port))
        return -1;
    return (int)port;
}

cJSON *children_network_policy(const struct session_spec *s, const struct children_config *c)
{
    char *name = children_name(s->name, "sandbox");
    cJSON *o = child(s, "networking.k8s.io/v1", "NetworkPolicy", name, "sandbox");
    free(name);
    cJSON *spec = sub(o, "spec");
    /* the sandbox pod, and the file viewer of a parked session (the same
     * workspace, the same walls) */
    cJSON *psel = sub(spec, "podSelector");
    str(sub(psel, "matchLabels"), CHILDREN_LABEL_SESSION_UID, s->uid);
    cJSON *expr = push_obj(arr(psel, "matchExpressions"));
    str(expr, "key", CHILDREN_LABEL_ROLE);
    str(expr, "operator", "In");
    cJSON *vals = arr(expr, "values");
    push_str(vals, "sandbox");
    push_str(vals, "viewer");
    cJSON *types = arr(spec, "policyTypes");
    push_str(types, "Ingress");
    push_str(types, "Egress");
    /* ingress: only this session's runner pods, only sandboxd's port */
    cJSON *rule = push_obj(arr(spec, "ingress"));
    cJSON *peers = arr(rule, "from");
    selector_labels(sub(push_obj(peers), "podSelector"), "matchLabels", s, "runner");
    /* ... and the copy Jobs of this session's forks (label set on them) */
    cJSON *copier = push_obj(peers);
    str(sub(sub(copier, "podSelector"), "matchLabels"), CHILDREN_LABEL_COPY_FROM, s->uid);
    /* ... and the operator, whose aggregated API reads the workspace and a
     * running command's output (docs/stream-api.md) */
    cJSON *op = push_obj(peers);
    sub(op, "namespaceSelector");
    cJSON *opl = sub(sub(op, "podSelector"), "matchLabels");
    str(opl, "app.kubernetes.io/name", "tern");
    str(opl, "app.kubernetes.io/component", "operator");
    cJSON *port = push_obj(arr(rule, "ports"));
    str(port, "protocol", "TCP");
    cJSON_AddNumberToObject(port, "port", SANDBOX_PORT);
    /* egress: the proxy's port, and the CIDR entries; nothing else (an
     * empty list allows nothing) */
    cJSON *egress = arr(spec, "egress");
    char host[64];
    int pport = c && c->egress_proxy ? proxy_hostport(c->egress_proxy, host, sizeof host) : -1;
    if (pport > 0) {
        cJSON *prule = push_obj(egress);
        cJSON *to = push_obj(arr(prule, "to"));
        if (c->egress_proxy_labels && c->egress_proxy_namespace) {
            str(sub(sub(to, "namespaceSelector"), "matchLabels"), "kubernetes.io/metadata.name",
                c->egress_proxy_namespace);
            match_labels(sub(to, "podSelector"), c->egress_proxy_labels);
        } else {
            char *cidr = xasprintf("%s/%d", host, strchr(host, ':') ? 128 : 32);
            str(sub(to, "ipBlock"), "cidr", cidr);
            free(cidr);
        }
        cJSON *pp = push_obj(arr(prule, "ports"));
        str(pp, "protocol", "TCP");
        cJSON_AddNumberToObject(pp, "port", pport);
    }
    if (s->permissions.nnetwork) {
        cJSON *to = arr(push_obj(egress), "to");
        for (size_t i = 0; i < s->permissions.nnetwork; i++)
            str(sub(push_obj(to), "ipBlock"), "cidr", s->permissions.network[i].text);
    }
    return o;
}

char *children_no_proxy(const struct session_spec *s)
{
    struct buf b;
    buf_init(&b, 64u << 10);
    buf_puts(&b, "localhost,127.0.0.1,::1");
    for (size_t i = 0; i < s->permissions.nnetwork; i++)
        buf_printf(&b, ",%s", s->permissions.network[i].text);
    return buf_steal(&b);
}

/* FNV-1a over the fields that shape the sandbox pod. */
const char *children_sandbox_hash(const struct session_spec *s, const struct children_config *c,
                                  char out[17])
{
    const char *parts[] = {
        s->sandbox.image ? s->sandbox.image : c->sandbox_image,
        s->sandbox.runtime_class ? s->sandbox.runtime_class : (c->runtime_class ? c->runtime_class : ""),
        s->limits.cpu.text,
        s->limits.memory.text,
    };
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        for (const char *p = parts[i] ? parts[i] : ""; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull; /* separator */
    }
    if (c->egress_proxy) {
        /* the proxy environment (only then, so hashes without a proxy stay
         * as they were) */
        char *np = children_no_proxy(s);
        const char *more[] = {c->egress_proxy, np};
        for (size_t i = 0; i < 2; i++) {
            for (const char *p = more[i]; *p; p++)
                h = (h ^ (unsigned char)*p) * 1099511628211ull;
            h = (h ^ 0xff) * 1099511628211ull;
        }
        free(np);
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    return out;
}

static cJSON *mount(cJSON *mounts, const char *name, const char *path, const char *sub_path,
                    int read_only)
{
    cJSON *m = push_obj(mounts);
    str(m, "name", name);
    str(m, "mountPath", path);
    if (sub_path)
        str(m, "subPath", sub_path);
    if (read_only)
        boolean(m, "readOnly", 1);
    return m;
}

static void restricted_container_security(cJSON *container)
{
    cJSON *sc = sub(container, "securityContext");
    boolean(sc, "allowPrivilegeEscalation", 0);
    boolean(sc, "readOnlyRootFilesystem", 1);
    boolean(sc, "runAsNonRoot", 1);
    push_str(arr(sub(sc, "capabilities"), "drop"), "ALL");
}

static void restricted_pod_security(cJSON *podspec, int uid, int gid)
{
    cJSON *psc = sub(podspec, "securityContext");
    boolean(psc, "runAsNonRoot", 1);
    cJSON_AddNumberToObject(psc, "runAsUser", uid);
    cJSON_AddNumberToObject(psc, "runAsGroup", gid);
    cJSON_AddNumberToObject(psc, "fsGroup", gid);
    str(sub(psc, "seccompProfile"), "type", "RuntimeDefault");
}

cJSON *children_sandbox_pod(const struct session_spec *s, const struct children_config *c)
{
    char *name = children_name(s->name, "sandbox");
    cJSON *o = child(s, "v1", "Pod", name, "sandbox");
    free(name);
    char hash[17];
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    str(sub(meta, "annotations"), CHILDREN_ANN_SANDBOX_HASH, children_sandbox_hash(s, c, hash));
    cJSON *spec = sub(o, "spec");
    boolean(spec, "automountServiceAccountToken", 0);
    boolean(spec, "enableServiceLinks", 0);
    str(spec, "restartPolicy", "Always");
    cJSON_AddNumberToObject(spec, "terminationGracePeriodSeconds", 10);
    const char *rc = s->sandbox.runtime_class ? s->sandbox.runtime_class : c->runtime_class;
    if (rc)
        str(spec, "runtimeClassName", rc);
    restricted_pod_security(spec, SANDBOX_UID, SANDBOX_GID);

    cJSON *ctr = push_obj(arr(spec, "containers"));
    str(ctr, "name", "sandboxd");
    str(ctr, "image", s->sandbox.image ? s->sandbox.image : c->sandbox_image);
    if (c->image_pull_policy)
        str(ctr, "imagePullPolicy", c->image_pull_policy);
    cJSON *cmd = arr(ctr, "command");
    push_str(cmd, "tern-sandboxd");
    /* listen on the pod's own address: on a cluster that is the pod's
     * network namespace; on tern-dev pods share the host's loopback, each
     * with its own 127.x.y.z */
    cJSON *envs = arr(ctr, "env");
    cJSON *penv = push_obj(envs);
    str(penv, "name", "TERN_POD_IP");
    str(sub(sub(penv, "valueFrom"), "fieldRef"), "fieldPath", "status.podIP");
    if (c->egress_proxy) {
        /* every tool that honours the proxy variables goes through the
         * egress proxy; direct connections fail (NetworkPolicy) except to
         * the CIDR entries, which NO_PROXY lists */
        char *url = xasprintf("http://%s", c->egress_proxy);
        char *np = children_no_proxy(s);
        const char *names[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"};
        for (size_t i = 0; i < 4; i++) {
            cJSON *e = push_obj(envs);
            str(e, "name", names[i]);
            str(e, "value", url);
        }
        const char *nnames[] = {"NO_PROXY", "no_proxy"};
        for (size_t i = 0; i < 2; i++) {
            cJSON *e = push_obj(envs);
            str(e, "name", nnames[i]);
            str(e, "value", np);
        }
        free(url);
        free(np);
    }
    cJSON *args = arr(ctr, "args");
    char *listen = xasprintf("$(TERN_POD_IP):%d", SANDBOX_PORT);
    push_str(args, "--listen");
    push_str(args, listen);
    free(listen);
    push_str(args, "--token-file");
    push_str(args, SANDBOX_TOKEN_FILE);
    push_str(args, "--workspace");
    push_str(args, SANDBOX_WORKSPACE);
    struct buf w;
    buf_init(&w, 64u << 10);
    for (size_t i = 0; i < s->permissions.nwritable; i++)
        buf_printf(&w, "%s%s", i ? "," : "", s->permissions.writable[i]);
    push_str(args, "--writable");
    push_str(args, buf_str(&w));
    buf_done(&w);
    cJSON *port = push_obj(arr(ctr, "ports"));
    str(port, "name", "sandboxd");
    cJSON_AddNumberToObject(port, "containerPort", SANDBOX_PORT);
    /* every sandboxd endpoint needs the token, probes included: probe the
     * port (a kubelet's httpGet cannot carry the Secret's token) */
    cJSON *probe = sub(ctr, "readinessProbe");
    cJSON_AddNumberToObject(sub(probe, "tcpSocket"), "port", SANDBOX_PORT);
    cJSON_AddNumberToObject(probe, "periodSeconds", 1);
    cJSON *res = sub(ctr, "resources");
    cJSON *lim = sub(res, "limits");
    str(lim, "cpu", s->limits.cpu.text);
    str(lim, "memory", s->limits.memory.text);
    /* An agent's sandbox idles most of its life (between turns, while the
     * model thinks) and bursts to its limit during a command: it requests a
     * tenth of its CPU limit (at least 10m) so that a node schedules more
     * sessions than it has cores, and all of its memory (not compressible). */
    cJSON *req = sub(res, "requests");
    char cpu_req[32];
    int64_t millis = s->limits.cpu.milli / 10;
    snprintf(cpu_req, sizeof cpu_req, "%lldm", (long long)(millis < 10 ? 10 : millis));
    str(req, "cpu", s->limits.cpu.milli > 0 && s->limits.cpu.milli < 10 ? s->limits.cpu.text
                                                                          : cpu_req);
    str(req, "memory", s->limits.memory.text);
    restricted_container_security(ctr);

    /* the workspace layout: the PVC holds working/ and output/ (and
     * sandboxd's records); everything read-only is mounted over it */
    cJSON *mounts = arr(ctr, "volumeMounts");
    cJSON *vols = arr(spec, "volumes");
    mount(mounts, "workspace", SANDBOX_WORKSPACE, NULL, 0);
    char *pvc = children_name(s->name, "workspace");
    cJSON *v = push_obj(vols);
    str(v, "name", "workspace");
    str(sub(v, "persistentVolumeClaim"), "claimName", pvc);
    free(pvc);

    mount(mounts, "sandbox-token", SANDBOX_TOKEN_DIR, NULL, 1);
    char *secret = children_name(s->name, "sandbox-token");
    v = push_obj(vols);
    str(v, "name", "sandbox-token");
    cJSON *sv = sub(v, "secret");
    str(sv, "secretName", secret);
    cJSON_AddNumberToObject(sv, "defaultMode", 0440);
    free(secret);

    mount(mounts, "tmp", "/tmp", NULL, 0);
    v = push_obj(vols);
    str(v, "name", "tmp");
    str(sub(v, "emptyDir"), "sizeLimit", "1Gi");

    mount(mounts, "task", SANDBOX_WORKSPACE "/task.md", "task.md", 1);
    char *task = children_name(s->name, "task");
    v = push_obj(vols);
    str(v, "name", "task");
    str(sub(v, "configMap"), "name", task);
    free(task);

    if (s->context.nfiles) {
        mount(mounts, "input", SANDBOX_WORKSPACE "/input", NULL, 1);
        v = push_obj(vols);
        str(v, "name", "input");
        cJSON *sources = arr(sub(v, "projected"), "sources");
        for (size_t i = 0; i < s->context.nfiles; i++)
            str(sub(push_obj(sources), "configMap"), "name", s->context.files[i]);
    }
    if (s->memory) {
        mount(mounts, "memory", SANDBOX_WORKSPACE "/simple.md", "simple.md", 1);
        v = push_obj(vols);
        str(v, "name", "memory");
        str(sub(v, "configMap"), "name", s->memory);
    }
    for (size_t i = 0; i < s->nskills; i++) {
        char *vname = xasprintf("skill-%zu", i);
        char *path = xasprintf(SANDBOX_WORKSPACE "/skills/%s", s->skills[i]);
        mount(mounts, vname, path, NULL, 1);
        v = push_obj(vols);
        str(v, "name", vname);
        str(sub(v, "configMap"), "name", s->skills[i]);
        free(vname);
        free(path);
    }
    return o;
}

static void env(cJSON *list, const char *name, const char *value)
{
    cJSON *e = push_obj(list);
    str(e, "name", name);
    str(e, "value", value);
}

/* The runner pod template shared by turn and copy Jobs. */
static cJSON *runner_job(const struct session_spec *s, const struct children_config *c,
                         const char *job_name, int64_t deadline_s, cJSON **ret_container)
{
    cJSON *o = child(s, "batch/v1", "Job", job_name, "runner");
    cJSON *spec = sub(o, "spec");
    cJSON_AddNumberToObject(spec, "backoffLimit", (double)c->turn_backoff_limit);
    cJSON_AddNumberToObject(spec, "activeDeadlineSeconds", (double)deadline_s);
    cJSON_AddNumberToObject(spec, "ttlSecondsAfterFinished", (double)c->job_ttl_seconds);
    /* a configuration error (exit 78) fails the Job at once; any other
     * failure is retried and resumes from the journal */
    cJSON *rule = push_obj(arr(sub(spec, "podFailurePolicy"), "rules"));
    str(rule, "action", "FailJob");
    cJSON *codes = sub(rule, "onExitCodes");
    str(codes, "containerName", "runner");
    str(codes, "operator", "In");
    cJSON_AddItemToArray(arr(codes, "values"), cJSON_CreateNumber(CHILDREN_RUNNER_EXIT_CONFIG));
    cJSON *tmpl = sub(spec, "template");
    cJSON *tmeta = sub(tmpl, "metadata");
    labels(tmeta, s, "runner");
    cJSON *pod = sub(tmpl, "spec");
    str(pod, "restartPolicy", "Never");
    str(pod, "serviceAccountName",
        s->service_account ? s->service_account : c->runner_service_account);
    boolean(pod, "enableServiceLinks", 0);
    restricted_pod_security(pod, 65532, 65532);
    cJSON *ctr = push_obj(arr(pod, "containers"));
    str(ctr, "name", "runner");
    str(ctr, "image", c->runner_image);
    if (c->image_pull_policy)
        str(ctr, "imagePullPolicy", c->image_pull_policy);
    /* the runner writes why it failed to /dev/termination-log; a runner
     * killed before it could (OOM, SIGKILL) leaves its last log lines */
    str(ctr, "terminationMessagePolicy", "FallbackToLogsOnError");
    restricted_container_security(ctr);
    cJSON *res = sub(ctr, "resources");
    str(sub(res, "requests"), "cpu", "50m");
    str(sub(res, "limits"), "memory", "256Mi");
    cJSON *mounts = arr(ctr, "volumeMounts");
    mount(mounts, "sandbox-token", SANDBOX_TOKEN_DIR, NULL, 1);
    cJSON *v = push_obj(arr(pod, "volumes"));
    str(v, "name", "sandbox-token");
    char *secret = children_name(s->name, "sandbox-token");
    str(sub(v, "secret"), "secretName", secret);
    free(secret);
    *ret_container = ctr;
    return o;
}

/* The credentials of spec.tools, for the runner pod only (docs/tools.md):
 * each MCP server's header Secret at CHILDREN_TRUSTED_DIR/mcp/<server>/
 * (every key a header), each remote's token key at
 * CHILDREN_TRUSTED_DIR/publish/<remote>/token; with remotes, an emptyDir
 * at /tmp for git (the root filesystem is read-only). */
static void trusted_mounts(const struct session_spec *s, cJSON *job, cJSON *ctr)
{
    if (!s->tools.nmcp && !s->tools.nremotes)
        return;
    cJSON *pod = (cJSON *)json_get(json_get(json_get(job, "spec"), "template"), "spec");
    cJSON *vols = (cJSON *)json_get(pod, "volumes");
    cJSON *mounts = (cJSON *)json_get(ctr, "volumeMounts");
    for (size_t i = 0; i < s->tools.nmcp; i++) {
        const struct session_mcp_server *m = &s->tools.mcp[i];
        if (!m->headers_secret)
            continue;
        char *vname = xasprintf("mcp-%s", m->name);
        char *path = xasprintf("%s/mcp/%s", CHILDREN_TRUSTED_DIR, m->name);
        cJSON *v = push_obj(vols);
        str(v, "name", vname);
        str(sub(v, "secret"), "secretName", m->headers_secret);
        mount(mounts, vname, path, NULL, 1);
        free(vname);
        free(path);
    }
    for (size_t i = 0; i < s->tools.nremotes; i++) {
        const struct session_publish_remote *r = &s->tools.remotes[i];
        char *vname = xasprintf("publish-%s", r->name);
        char *path = xasprintf("%s/publish/%s", CHILDREN_TRUSTED_DIR, r->name);
        cJSON *v = push_obj(vols);
        str(v, "name", vname);
        cJSON *sec = sub(v, "secret");
        str(sec, "secretName", r->token_secret);
        cJSON *item = push_obj(arr(sec, "items"));
        str(item, "key", r->token_key);
        str(item, "path", "token");
        mount(mounts, vname, path, NULL, 1);
        free(vname);
        free(path);
    }
    if (s->tools.nremotes) {
        cJSON *v = push_obj(vols);
        str(v, "name", "tmp");
        sub(v, "emptyDir");
        mount(mounts, "tmp", "/tmp", NULL, 0);
        env((cJSON *)json_get(ctr, "env"), "TMPDIR", "/tmp");
    }
}

cJSON *children_turn_job(const struct session_spec *s, const struct children_config *c,
                         int64_t turn, const char *prices_json)
{
    char *name = children_job_name(s->name, turn);
    cJSON *ctr = NULL;
    /* the runner stops at timeoutSeconds itself (a tool call gets at most
     * the time left); the Job's deadline is the backstop for a runner that
     * cannot (a model call that hangs), reported as timeoutSeconds too */
    cJSON *o = runner_job(s, c, name, s->limits.timeout_seconds + CHILDREN_DEADLINE_GRACE, &ctr);
    free(name);
    char turn_s[21];
    snprintf(turn_s, sizeof turn_s, "%lld", (long long)turn);
    str((cJSON *)json_get(json_get(o, "metadata"), "labels"), CHILDREN_LABEL_TURN, turn_s);
    cJSON *cmd = arr(ctr, "command");
    push_str(cmd, "tern-runner");
    push_str(cmd, "turn");
    cJSON *e = arr(ctr, "env");
    env(e, "TERN_NAMESPACE", s->namespace);
    env(e, "TERN_SESSION", s->name);
    env(e, "TERN_SESSION_UID", s->uid);
    env(e, "TERN_TURN", turn_s);
    env(e, "TERN_ETCD_ENDPOINTS", c->etcd_endpoints);
    if (c->journal_locked) {
        /* the session's own etcd user and the runners' client certificate */
        env(e, "TERN_ETCD_CA_FILE", CHILDREN_JOURNAL_DIR "/ca.crt");
        env(e, "TERN_ETCD_CERT_FILE", CHILDREN_JOURNAL_DIR "/tls.crt");
        env(e, "TERN_ETCD_KEY_FILE", CHILDREN_JOURNAL_DIR "/tls.key");
        char *user = journal_session_user(s->uid);
        env(e, "TERN_ETCD_USERNAME", user ? user : "");
        free(user);
        env(e, "TERN_ETCD_PASSWORD_FILE", CHILDREN_JOURNAL_DIR "/password");
        mount((cJSON *)json_get(ctr, "volumeMounts"), "journal", CHILDREN_JOURNAL_DIR, NULL, 1);
        cJSON *vols = (cJSON *)json_get(json_get(json_get(json_get(o, "spec"), "template"),
                                                 "spec"),
                                        "volumes");
        cJSON *v = push_obj(vols);
        str(v, "name", "journal");
        char *js = children_name(s->name, "journal");
        cJSON *sv = sub(v, "secret");
        str(sv, "secretName", js);
        cJSON_AddNumberToObject(sv, "defaultMode", 0440);
        free(js);
    }
    env(e, "TERN_SANDBOX_TOKEN_FILE", SANDBOX_TOKEN_FILE);
    env(e, "OPENAI_BASE_URL", s->model.base_url);
    const char *secret = s->model.api_key_secret ? s->model.api_key_secret : c->model_secret;
    const char *key = s->model.api_key_secret ? s->model.api_key_key : c->model_secret_key;
    if (secret) {
        /* the model key reaches the runner pod only, by reference */
        cJSON *k = push_obj(e);
        str(k, "name", "OPENAI_API_KEY");
        cJSON *ref = sub(sub(k, "valueFrom"), "secretKeyRef");
        str(ref, "name", secret);
        str(ref, "key", key ? key : "api-key");
    }
    if (prices_json) {
        cJSON *tmpl = (cJSON *)json_get(json_get(o, "spec"), "template");
        cJSON *tmeta = (cJSON *)json_get(tmpl, "metadata");
        str(sub(tmeta, "annotations"), CHILDREN_ANN_PRICES, prices_json);
        env(e, "TERN_PRICES_FILE", CHILDREN_PRICES_FILE);
        mount((cJSON *)json_get(ctr, "volumeMounts"), "prices", CHILDREN_PRICES_DIR, NULL, 1);
        cJSON *v = push_obj((cJSON *)json_get(json_get(tmpl, "spec"), "volumes"));
        str(v, "name", "prices");
        cJSON *item = push_obj(arr(sub(v, "downwardAPI"), "items"));
        str(item, "path", "prices.json");
        str(sub(item, "fieldRef"), "fieldPath",
            "metadata.annotations['" CHILDREN_ANN_PRICES "']");
    }
    trusted_mounts(s, o, ctr);
    return o;
}

cJSON *children_copy_job(const struct session_spec *child_s, const struct children_config *c,
                         const char *from_addr, const char *to_addr,
                         const char *from_token_secret)
{
    char *name = children_name(child_s->name, "copy");
    cJSON *ctr = NULL;
    cJSON *o = runner_job(child_s, c, name, 3600, &ctr);
    free(name);
    cJSON *tmeta = (cJSON *)json_get(json_get(json_get(o, "spec"), "template"), "metadata");
    str((cJSON *)json_get(tmeta, "labels"), CHILDREN_LABEL_COPY_FROM, child_s->fork_from.uid);
    cJSON *cmd = arr(ctr, "command");
    push_str(cmd, "tern-runner");
    push_str(cmd, "copy");
    cJSON *args = arr(ctr, "args");
    char *f = xasprintf("--from=%s", from_addr);
    char *t = xasprintf("--to=%s", to_addr);
    push_str(args, f);
    push_str(args, t);
    free(f);
    free(t);
    cJSON *e = arr(ctr, "env");
    env(e, "TERN_SANDBOX_TOKEN_FILE", SANDBOX_TOKEN_FILE);
    env(e, "TERN_FROM_TOKEN_FILE", CHILDREN_FROM_TOKEN_DIR "/token");
    mount((cJSON *)json_get(ctr, "volumeMounts"), "from-token", CHILDREN_FROM_TOKEN_DIR, NULL, 1);
    cJSON *vols = (cJSON *)json_get(json_get(json_get(json_get(o, "spec"), "template"), "spec"),
                                    "volumes");
    cJSON *v = push_obj(vols);
    str(v, "name", "from-token");
    str(sub(v, "secret"), "secretName", from_token_secret);
    return o;
}

cJSON *children_viewer_job(const struct session_spec *s, const struct children_config *c)
{
    char *prefix = children_name(s->name, "files-");
    cJSON *o = child(s, "batch/v1", "Job", prefix, "viewer");
    free(prefix);
    /* a new one per need (generateName): an ended viewer's Job stays until
     * its TTL, and a name of its own would block the next */
    cJSON *meta = (cJSON *)json_get(o, "metadata");
    cJSON_DeleteItemFromObjectCaseSensitive(meta, "name");
    char *gen = children_name(s->name, "files-");
    str(meta, "generateName", gen);
    free(gen);
    cJSON *spec = sub(o, "spec");
    /* made suspended: the operator resumes it once the token Secret and the
     * NetworkPolicy it needs exist (a parked session has neither) */
    boolean(spec, "suspend", 1);
    cJSON_AddNumberToObject(spec, "backoffLimit", 0);
    cJSON_AddNumberToObject(spec, "activeDeadlineSeconds", 1800);
    cJSON_AddNumberToObject(spec, "ttlSecondsAfterFinished", 60);
    cJSON *tmpl = sub(spec, "template");
    labels(sub(tmpl, "metadata"), s, "viewer");
    cJSON *pod = sub(tmpl, "spec");
    str(pod, "restartPolicy", "Never");
    boolean(pod, "automountServiceAccountToken", 0);
    boolean(pod, "enableServiceLinks", 0);
    cJSON_AddNumberToObject(pod, "terminationGracePeriodSeconds", 5);
    const char *rc = s->sandbox.runtime_class ? s->sandbox.runtime_class : c->runtime_class;
    if (rc)
        str(pod, "runtimeClassName", rc);
    restricted_pod_security(pod, SANDBOX_UID, SANDBOX_GID);
    cJSON *ctr = push_obj(arr(pod, "containers"));
    str(ctr, "name", "viewer");
    str(ctr, "image", s->sandbox.image ? s->sandbox.image : c->sandbox_image);
    if (c->image_pull_policy)
        str(ctr, "imagePullPolicy", c->image_pull_policy);
    push_str(arr(ctr, "command"), "tern-sandboxd");
    cJSON *penv = push_obj(arr(ctr, "env"));
    str(penv, "name", "TERN_POD_IP");
    str(sub(sub(penv, "valueFrom"), "fieldRef"), "fieldPath", "status.podIP");
    cJSON *args = arr(ctr, "args");
    char *listen = xasprintf("$(TERN_POD_IP):%d", SANDBOX_PORT);
    static const char *const fixed[] = {"--read-only", "--idle-exit", "120", "--token-file",
                                        SANDBOX_TOKEN_FILE, "--workspace", SANDBOX_WORKSPACE,
                                        "--listen"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        push_str(args, fixed[i]);
    push_str(args, listen);
    free(listen);
    cJSON *port = push_obj(arr(ctr, "ports"));
    str(port, "name", "sandboxd");
    cJSON_AddNumberToObject(port, "containerPort", SANDBOX_PORT);
    cJSON *probe = sub(ctr, "readinessProbe");
    cJSON_AddNumberToObject(sub(probe, "tcpSocket"), "port", SANDBOX_PORT);
    cJSON_AddNumberToObject(probe, "periodSeconds", 1);
    cJSON *res = sub(ctr, "resources");
    str(sub(res, "requests"), "cpu", "10m");
    str(sub(res, "limits"), "memory", "64Mi");
    restricted_container_security(ctr);
    cJSON *mounts = arr(ctr, "volumeMounts");
    cJSON *vols = arr(pod, "volumes");
    /* the workspace read-only: the viewer cannot change what it shows */
    mount(mounts, "workspace", SANDBOX_WORKSPACE, NULL, 1);
    char *pvc = children_name(s->name, "workspace");
    cJSON *v = push_obj(vols);
    str(v, "name", "workspace");
    cJSON *pv = sub(v, "persistentVolumeClaim");
    str(pv, "claimName", pvc);
    boolean(pv, "readOnly", 1);
    free(pvc);
    mount(mounts, "sandbox-token", SANDBOX_TOKEN_DIR, NULL, 1);
    char *secret = children_name(s->name, "sandbox-token");
    v = push_obj(vols);
    str(v, "name", "sandbox-token");
    cJSON *sv = sub(v, "secret");
    str(sv, "secretName", secret);
    cJSON_AddNumberToObject(sv, "defaultMode", 0440);
    free(secret);
    return o;
}

/* ---- finished sessions' time to live ---------------------------------- */

static bool dns_label(const char *s, size_t n)
{
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

void children_ns_ttls_free(struct children_ns_ttl *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].ns);
    free(v);
}

int children_parse_ns_ttls(const char *text, struct children_ns_ttl **ret, size_t *ret_n,
                           struct tern_err *err)
{
    *ret = NULL;
    *ret_n = 0;
    struct children_ns_ttl *v = NULL;
    size_t n = 0;
    const char *p = text ? text : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        int64_t secs = 0;
        char num[24];
        size_t nlen = eq ? len - (size_t)(eq + 1 - p) : 0;
        bool ok = eq && dns_label(p, (size_t)(eq - p)) && nlen > 0 && nlen < sizeof num;
        if (ok) {
            memcpy(num, eq + 1, nlen);
            num[nlen] = '\0';
            ok = num_parse_range(num, 0, SESSION_MAX_TTL_SECONDS, &secs) == 0;
        }
        if (!ok) {
            children_ns_ttls_free(v, n);
            return err_set(err, TERN_EINVALID,
                           "\"%.*s\": want NAMESPACE=SECONDS (a DNS label, 0..%d seconds)",
                           (int)(len > 80 ? 80 : len), p, SESSION_MAX_TTL_SECONDS);
        }
        if (n == CHILDREN_MAX_NS_TTLS) {
            children_ns_ttls_free(v, n);
            return err_set(err, TERN_EINVALID, "more than %d namespaces", CHILDREN_MAX_NS_TTLS);
        }
        for (size_t i = 0; i < n; i++) {
            if (strlen(v[i].ns) == (size_t)(eq - p) && memcmp(v[i].ns, p, (size_t)(eq - p)) == 0) {
                children_ns_ttls_free(v, n);
                return err_set(err, TERN_EINVALID, "namespace %.*s given twice", (int)(eq - p), p);
            }
        }
        v = xreallocarray(v, n + 1, sizeof *v);
        v[n].ns = xstrndup(p, (size_t)(eq - p));
        v[n].seconds = secs;
        n++;
        p = end ? end + 1 : p + len;
        if (end && !*p) {
            children_ns_ttls_free(v, n);
            return err_set(err, TERN_EINVALID, "a trailing comma");
        }
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

int64_t children_session_ttl(const struct session_spec *s, const struct children_config *c)
{
    if (s->ttl_seconds_after_finished >= 0)
        return s->ttl_seconds_after_finished;
    for (size_t i = 0; i < c->nns_ttls; i++)
        if (s->namespace && strcmp(c->ns_ttls[i].ns, s->namespace) == 0)
            return c->ns_ttls[i].seconds > 0 ? c->ns_ttls[i].seconds : -1;
    return c->session_ttl_seconds > 0 ? c->session_ttl_seconds : -1;
}
