/* kubeconfig.c - kubeconfig documents, in-cluster config, credentials.
 * See kubeconfig.h. */
#include "kubeconfig.h"

#include "base/base64.h"
#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"
#include "yaml/yamljson.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

struct kubeconfig_cache {
    pthread_mutex_t mu;
    struct kubeconfig_creds creds; /* last exec credential (gen > 0 when set) */
    time_t expiry;                 /* 0 = no expiry */
    unsigned gen;
};

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* ---- small helpers ---- */

int kubeconfig_read_file(const char *path, size_t max, char **ret, size_t *ret_len,
                         struct tern_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, -errno, "%s: %s", path, strerror(errno));
    struct buf b;
    buf_init(&b, max);
    int r = 0;
    char chunk[8192];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            r = err_set(err, -errno, "%s: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        if (buf_append(&b, chunk, (size_t)n)) {
            r = err_set(err, TERN_ETOOLARGE, "%s: larger than %zu bytes", path, max);
            goto out;
        }
    }
    *ret_len = b.len;
    *ret = buf_steal(&b);
out:
    buf_done(&b);
    close(fd);
    return r;
}

static char *resolve_path(const char *base_dir, const char *p)
{
    if (p[0] == '/' || !base_dir || !base_dir[0])
        return xstrdup(p);
    return xasprintf("%s/%s", base_dir, p);
}

/* Trims trailing whitespace (token files end in '\n'). */
static void rtrim(char *s, size_t *len)
{
    size_t n = *len;
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    s[n] = '\0';
    *len = n;
}

int kubeconfig_parse_time(const char *s, time_t *ret)
{
    /* YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm|-hh:mm) */
    int64_t f[6];
    static const int at[6] = {0, 5, 8, 11, 14, 17}, w[6] = {4, 2, 2, 2, 2, 2};
    size_t n = strlen(s);
    if (n < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') || s[13] != ':' ||
        s[16] != ':')
        return -EINVAL;
    for (int i = 0; i < 6; i++) {
        for (int k = 0; k < w[i]; k++)
            if (s[at[i] + k] < '0' || s[at[i] + k] > '9')
                return -EINVAL;
        if (num_parse_i64n(s + at[i], (size_t)w[i], &f[i]))
            return -EINVAL;
    }
    const char *p = s + 19;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return -EINVAL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    long off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int64_t hh, mm;
        for (int k = 1; k < 6; k++)
            if (k != 3 && (p[k] < '0' || p[k] > '9'))
                return -EINVAL;
        if (num_parse_i64n(p + 1, 2, &hh) || num_parse_i64n(p + 4, 2, &mm))
            return -EINVAL;
        off = (long)(hh * 3600 + mm * 60) * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return -EINVAL;
    }
    if (*p)
        return -EINVAL;
    if (f[1] < 1 || f[1] > 12 || f[2] < 1 || f[2] > 31 || f[3] > 23 || f[4] > 59 || f[5] > 60)
        return -EINVAL;
    struct tm tm = {.tm_year = (int)f[0] - 1900, .tm_mon = (int)f[1] - 1, .tm_mday = (int)f[2],
                    .tm_hour = (int)f[3], .tm_min = (int)f[4], .tm_sec = (int)f[5]};
    *ret = timegm(&tm) - off;
    return 0;
}

/* ---- document ---- */

/* The entry named name in a kubeconfig list ("clusters", "users",
 * "contexts"): returns its inner object (the member called inner). */
static int find_named(const cJSON *doc, const char *list, const char *inner, const char *name,
                      const cJSON **ret, struct tern_err *err)
{
    const cJSON *arr = NULL;
    int r = json_get_array(doc, "", list, JSON_OPTIONAL, &arr, err);
    if (r)
        return r;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        const char *n = NULL;
        if (json_get_string(it, list, "name", JSON_REQUIRED, &n, err))
            return TERN_EINVALID;
        if (strcmp(n, name) != 0)
            continue;
        const cJSON *o = NULL;
        char path[300];
        snprintf(path, sizeof path, "%s[%s]", list, name);
        r = json_get_object(it, path, inner, JSON_OPTIONAL, &o, err);
        if (r)
            return r;
        if (!o)
            o = it; /* an entry without a body: all defaults */
        *ret = o;
        return 0;
    }
    return err_set(err, TERN_EINVALID, "%s: no entry named \"%s\"", list, name);
}

static int get_str(const cJSON *o, const char *path, const char *key, char **ret,
                   struct tern_err *err)
{
    const char *s = NULL;
    int r = json_get_string(o, path, key, JSON_OPTIONAL, &s, err);
    if (r)
        return r;
    if (s && s[0]) {
        free(*ret);
        *ret = xstrdup(s);
    }
    return 0;
}

/* PEM from "<key>-data" (base64) or the file named by "<key>". */
static int get_pem(const cJSON *o, const char *path, const char *key, const char *base_dir,
                   bool keep_file_path, char **ret_pem, size_t *ret_len, char **ret_file,
                   struct tern_err *err)
{
    char dkey[64];
    snprintf(dkey, sizeof dkey, "%s-data", key);
    const char *data = NULL, *file = NULL;
    int r = json_get_string(o, path, dkey, JSON_OPTIONAL, &data, err);
    if (!r)
        r = json_get_string(o, path, key, JSON_OPTIONAL, &file, err);
    if (r)
        return r;
    if (data && data[0]) {
        unsigned char *pem = NULL;
        size_t n = 0;
        if (strlen(data) > 4 * (TERN_KUBE_MAX_CERT_FILE / 3) + 4 ||
            base64_decode(data, strlen(data), &pem, &n))
            return err_set(err, TERN_EINVALID, "%s.%s: not valid base64 (or too large)", path,
                           dkey);
        free(*ret_pem);
        *ret_pem = (char *)pem;
        *ret_len = n;
        return 0;
    }
    if (file && file[0]) {
        char *p = resolve_path(base_dir, file);
        if (keep_file_path) {
            *ret_file = p;
            return 0;
        }
        char *pem = NULL;
        size_t n = 0;
        r = kubeconfig_read_file(p, TERN_KUBE_MAX_CERT_FILE, &pem, &n, err);
        free(p);
        if (r)
            return err_wrap(err, r, "%s.%s", path, key);
        free(*ret_pem);
        *ret_pem = pem;
        *ret_len = n;
    }
    return 0;
}

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static void exec_free(struct kubeconfig_exec *e)
{
    if (!e)
        return;
    free(e->command);
    free_strv(e->argv);
    free_strv(e->env);
    free(e->api_version);
    free(e);
}

static int parse_exec(const cJSON *o, const char *path, const char *base_dir,
                      struct kubeconfig_exec **ret, struct tern_err *err)
{
    struct kubeconfig_exec *e = xcalloc(1, sizeof *e);
    const char *cmd = NULL, *api = NULL;
    const cJSON *args = NULL, *env = NULL, *it;
    int r = json_get_string(o, path, "command", JSON_REQUIRED, &cmd, err);
    if (!r)
        r = json_get_string(o, path, "apiVersion", JSON_OPTIONAL, &api, err);
    if (!r)
        r = json_get_array(o, path, "args", JSON_OPTIONAL, &args, err);
    if (!r)
        r = json_get_array(o, path, "env", JSON_OPTIONAL, &env, err);
    if (!r)
        r = json_get_bool(o, path, "provideClusterInfo", JSON_OPTIONAL, &e->provide_cluster_info,
                          err);
    if (r)
        goto out;
    if (!cmd[0]) {
        r = err_set(err, TERN_EINVALID, "%s.command: must not be empty", path);
        goto out;
    }
    /* kubectl resolves a command containing '/' relative to the kubeconfig */
    e->command = strchr(cmd, '/') ? resolve_path(base_dir, cmd) : xstrdup(cmd);
    e->api_version = xstrdup(api ? api : "client.authentication.k8s.io/v1");
    if (strcmp(e->api_version, "client.authentication.k8s.io/v1") != 0 &&
        strcmp(e->api_version, "client.authentication.k8s.io/v1beta1") != 0) {
        r = err_set(err, TERN_EINVALID, "%s.apiVersion: unsupported \"%s\"", path,
                    e->api_version);
        goto out;
    }
    e->timeout_ms = TERN_KUBE_EXEC_TIMEOUT_MS;
    int na = args ? cJSON_GetArraySize(args) : 0;
    e->argv = xcalloc((size_t)na + 2, sizeof *e->argv);
    e->argv[0] = xstrdup(e->command);
    int i = 1;
    cJSON_ArrayForEach(it, args)
    {
        if (!cJSON_IsString(it)) {
            r = err_set(err, TERN_EINVALID, "%s.args[%d]: must be a string", path, i - 1);
            goto out;
        }
        e->argv[i++] = xstrdup(it->valuestring);
    }
    int ne = env ? cJSON_GetArraySize(env) : 0;
    e->env = xcalloc((size_t)ne + 1, sizeof *e->env);
    i = 0;
    cJSON_ArrayForEach(it, env)
    {
        const char *n = NULL, *v = NULL;
        char p2[300];
        snprintf(p2, sizeof p2, "%s.env[%d]", path, i);
        r = json_get_string(it, p2, "name", JSON_REQUIRED, &n, err);
        if (!r)
            r = json_get_string(it, p2, "value", JSON_REQUIRED, &v, err);
        if (r)
            goto out;
        if (!n[0] || strchr(n, '=')) {
            r = err_set(err, TERN_EINVALID, "%s.name: invalid variable name", p2);
            goto out;
        }
        e->env[i++] = xasprintf("%s=%s", n, v);
    }
    *ret = e;
    e = NULL;
out:
    exec_free(e);
    return r;
}

static struct kubeconfig *cfg_new(void)
{
    struct kubeconfig *c = xcalloc(1, sizeof *c);
    c->cache = xcalloc(1, sizeof *c->cache);
    pthread_mutex_init(&c->cache->mu, NULL);
    return c;
}

static int check_server(struct kubeconfig *c, struct tern_err *err)
{
    if (!c->server)
        return err_set(err, TERN_EINVALID, "cluster.server: required");
    if (strncmp(c->server, "https://", 8) != 0 && strncmp(c->server, "http://", 7) != 0)
        return err_set(err, TERN_EINVALID, "cluster.server: must be an http(s) URL, got \"%s\"",
                       c->server);
    size_t n = strlen(c->server);
    while (n > 8 && c->server[n - 1] == '/')
        c->server[--n] = '\0';
    return 0;
}

int kubeconfig_from_json(const cJSON *doc, const struct kubeconfig_overrides *ov,
                         const char *base_dir, struct kubeconfig **ret, struct tern_err *err)
{
    static const struct kubeconfig_overrides none = {0};
    if (!ov)
        ov = &none;
    struct kubeconfig *c = cfg_new();
    const cJSON *ctx = NULL, *cluster = NULL, *user = NULL;
    const char *cur = NULL, *cluster_name = NULL, *user_name = NULL, *ns = NULL;
    int r;

    if (!cJSON_IsObject(doc)) {
        r = err_set(err, TERN_EINVALID, "kubeconfig: must be a mapping");
        goto out;
    }
    r = json_get_string(doc, "", "current-context", JSON_OPTIONAL, &cur, err);
    if (r)
        goto out;
    if (ov->context && ov->context[0])
        cur = ov->context;
    if (cur && cur[0]) {
        r = find_named(doc, "contexts", "context", cur, &ctx, err);
        if (r)
            goto out;
        c->context = xstrdup(cur);
        r = json_get_string(ctx, "context", "cluster", JSON_OPTIONAL, &cluster_name, err);
        if (!r)
            r = json_get_string(ctx, "context", "user", JSON_OPTIONAL, &user_name, err);
        if (!r)
            r = json_get_string(ctx, "context", "namespace", JSON_OPTIONAL, &ns, err);
        if (r)
            goto out;
    }
    if (ov->cluster && ov->cluster[0])
        cluster_name = ov->cluster;
    if (ov->user && ov->user[0])
        user_name = ov->user;
    if (ov->namespace && ov->namespace[0])
        ns = ov->namespace;
    if (!cluster_name || !cluster_name[0]) {
        if (!ov->server) {
            r = err_set(err, TERN_EINVALID, "kubeconfig: no current context and no cluster selected");
            goto out;
        }
    } else {
        r = find_named(doc, "clusters", "cluster", cluster_name, &cluster, err);
        if (r)
            goto out;
    }
    if (user_name && user_name[0]) {
        r = find_named(doc, "users", "user", user_name, &user, err);
        if (r)
            goto out;
    }
    c->namespace = xstrdup(ns && ns[0] ? ns : "default");

    if (cluster) {
        r = get_str(cluster, "cluster", "server", &c->server, err);
        if (!r)
            r = get_str(cluster, "cluster", "tls-server-name", &c->tls_server_name, err);
        if (!r)
            r = json_get_bool(cluster, "cluster", "insecure-skip-tls-verify", JSON_OPTIONAL,
                              &c->insecure, err);
        if (!r)
            r = get_pem(cluster, "cluster", "certificate-authority", base_dir, true, &c->ca_pem,
                        &c->ca_pem_len, &c->ca_file, err);
        if (r)
            goto out;
    }
    if (ov->server && ov->server[0]) {
        free(c->server);
        c->server = xstrdup(ov->server);
    }
    if (ov->as && ov->as[0])
        c->impersonate_user = xstrdup(ov->as);
    for (size_t i = 0; ov->as_groups && ov->as_groups[i] && i + 1 < TERN_KUBE_MAX_IMPERSONATE;
         i++)
        c->impersonate_groups[i] = xstrdup(ov->as_groups[i]);
    r = check_server(c, err);
    if (r)
        goto out;
    if (user) {
        char *unused = NULL;
        const cJSON *exec = NULL, *ap = NULL;
        r = get_pem(user, "user", "client-certificate", base_dir, false, &c->cert_pem,
                    &c->cert_pem_len, &unused, err);
        if (!r)
            r = get_pem(user, "user", "client-key", base_dir, false, &c->key_pem, &c->key_pem_len,
                        &unused, err);
        if (!r)
            r = get_str(user, "user", "token", &c->token, err);
        if (!r) {
            char *tf = NULL;
            r = get_str(user, "user", "tokenFile", &tf, err);
            if (!r && tf) {
                c->token_file = resolve_path(base_dir, tf);
                free(tf);
            }
        }
        if (!r)
            r = json_get_object(user, "user", "exec", JSON_OPTIONAL, &exec, err);
        if (!r)
            r = json_get_object(user, "user", "auth-provider", JSON_OPTIONAL, &ap, err);
        if (r)
            goto out;
        if (ap) {
            r = err_set(err, TERN_EINVALID,
                        "user.auth-provider: not supported (use an exec plugin)");
            goto out;
        }
        if (exec) {
            r = parse_exec(exec, "user.exec", base_dir, &c->exec, err);
            if (r)
                goto out;
        }
        if (!c->cert_pem != !c->key_pem) {
            r = err_set(err, TERN_EINVALID,
                        "user: client-certificate and client-key must be given together");
            goto out;
        }
    }
    *ret = c;
    c = NULL;
out:
    kubeconfig_free(c);
    return r;
}

int kubeconfig_parse(const char *text, size_t len, const struct kubeconfig_overrides *ov,
                     const char *base_dir, struct kubeconfig **ret, struct tern_err *err)
{
    if (len > TERN_KUBE_MAX_KUBECONFIG)
        return err_set(err, TERN_ETOOLARGE, "kubeconfig: larger than %u bytes",
                       TERN_KUBE_MAX_KUBECONFIG);
    cJSON *doc = NULL;
    struct yamljson_opts yo = {.max_bytes = TERN_KUBE_MAX_KUBECONFIG};
    int r = yamljson_parse_one(text, len, &yo, &doc, err);
    if (r)
        return err_wrap(err, r, "kubeconfig");
    r = kubeconfig_from_json(doc, ov, base_dir, ret, err);
    cJSON_Delete(doc);
    return r;
}

int kubeconfig_load_file(const char *path, const struct kubeconfig_overrides *ov,
                         struct kubeconfig **ret, struct tern_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int r = kubeconfig_read_file(path, TERN_KUBE_MAX_KUBECONFIG, &text, &len, err);
    if (r)
        return r;
    char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    r = kubeconfig_parse(text, len, ov, slash ? (dir[0] ? dir : "/") : NULL, ret, err);
    if (r)
        err_wrap(err, r, "%s", path);
    free(dir);
    free(text);
    return r;
}

int kubeconfig_load_default(const struct kubeconfig_overrides *ov, struct kubeconfig **ret,
                            struct tern_err *err)
{
    const char *env = getenv("KUBECONFIG");
    if (env && env[0]) {
        char *copy = xstrdup(env), *save = NULL;
        int r = -ENOENT;
        for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
            if (p[0] && access(p, F_OK) == 0) {
                r = kubeconfig_load_file(p, ov, ret, err);
                break;
            }
        }
        free(copy);
        if (r == -ENOENT)
            err_set(err, r, "KUBECONFIG: none of the files exists");
        return r;
    }
    const char *home = getenv("HOME");
    if (!home || !home[0])
        return err_set(err, -ENOENT, "no KUBECONFIG and no HOME");
    char *p = xasprintf("%s/.kube/config", home);
    int r = access(p, F_OK) == 0 ? kubeconfig_load_file(p, ov, ret, err)
                                 : err_set(err, -ENOENT, "%s: no such file", p);
    free(p);
    return r;
}

int kubeconfig_in_cluster(const char *dir, struct kubeconfig **ret, struct tern_err *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!dir)
        dir = SA_DIR;
    if (!host || !host[0] || !port || !port[0])
        return err_set(err, -ENOENT,
                       "not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set");
    int64_t pn;
    if (num_parse_range(port, 1, 65535, &pn))
        return err_set(err, TERN_EINVALID, "KUBERNETES_SERVICE_PORT: invalid \"%s\"", port);
    struct kubeconfig *c = cfg_new();
    char *ns = NULL;
    size_t nslen = 0;
    int r;
    bool v6 = strchr(host, ':') != NULL;
    c->server = xasprintf("https://%s%s%s:%lld", v6 ? "[" : "", host, v6 ? "]" : "",
                          (long long)pn);
    c->token_file = xasprintf("%s/token", dir);
    if (access(c->token_file, R_OK) != 0) {
        r = err_set(err, -ENOENT, "%s: %s", c->token_file, strerror(errno));
        goto out;
    }
    c->ca_file = xasprintf("%s/ca.crt", dir);
    char *nsfile = xasprintf("%s/namespace", dir);
    r = kubeconfig_read_file(nsfile, 4096, &ns, &nslen, NULL);
    free(nsfile);
    if (r == 0) {
        rtrim(ns, &nslen);
        c->namespace = ns;
        ns = NULL;
    } else {
        c->namespace = xstrdup("default");
        r = 0;
    }
    *ret = c;
    c = NULL;
out:
    kubeconfig_free(c);
    return r;
}

int kubeconfig_load_auto(const char *path, const struct kubeconfig_overrides *ov,
                         const char *sa_dir, struct kubeconfig **ret, struct tern_err *err)
{
    if (path && path[0])
        return kubeconfig_load_file(path, ov, ret, err);
    const char *env = getenv("KUBECONFIG");
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    if ((!env || !env[0]) && host && host[0]) {
        struct kubeconfig *c = NULL;
        int r = kubeconfig_in_cluster(sa_dir, &c, err);
        if (r)
            return r;
        if (ov && ov->namespace && ov->namespace[0]) {
            free(c->namespace);
            c->namespace = xstrdup(ov->namespace);
        }
        *ret = c;
        return 0;
    }
    return kubeconfig_load_default(ov, ret, err);
}

void kubeconfig_creds_done(struct kubeconfig_creds *cr)
{
    if (!cr)
        return;
    free(cr->token);
    free(cr->cert_pem);
    if (cr->key_pem) {
        explicit_bzero(cr->key_pem, cr->key_pem_len);
        free(cr->key_pem);
    }
    memset(cr, 0, sizeof *cr);
}

void kubeconfig_free(struct kubeconfig *c)
{
    if (!c)
        return;
    free(c->server);
    free(c->namespace);
    free(c->context);
    free(c->ca_file);
    free(c->ca_pem);
    free(c->tls_server_name);
    free(c->cert_pem);
    if (c->key_pem) {
        explicit_bzero(c->key_pem, c->key_pem_len);
        free(c->key_pem);
    }
    free(c->token);
    free(c->token_file);
    free(c->impersonate_user);
    for (size_t i = 0; i < TERN_KUBE_MAX_IMPERSONATE && c->impersonate_groups[i]; i++)
        free(c->impersonate_groups[i]);
    exec_free(c->exec);
    if (c->cache) {
        kubeconfig_creds_done(&c->cache->creds);
        pthread_mutex_destroy(&c->cache->mu);
        free(c->cache);
    }
    free(c);
}

bool kubeconfig_can_refresh(const struct kubeconfig *c)
{
    return c->exec != NULL;
}

/* ---- exec plugins ---- */

int kubeconfig_parse_exec_credential(const char *text, size_t len, struct kubeconfig_creds *ret,
                                     time_t *ret_expiry, struct tern_err *err)
{
    cJSON *doc = NULL;
    struct kubeconfig_creds cr = {0};
    const cJSON *st = NULL;
    const char *kind = NULL, *tok = NULL, *cert = NULL, *key = NULL, *exp = NULL;
    time_t expiry = 0;
    int r = json_parse(text, len, &doc, err);
    if (r)
        return err_wrap(err, r, "ExecCredential");
    r = json_get_string(doc, "", "kind", JSON_REQUIRED, &kind, err);
    if (!r && strcmp(kind, "ExecCredential") != 0)
        r = err_set(err, TERN_EINVALID, "kind: expected ExecCredential, got \"%s\"", kind);
    if (!r)
        r = json_get_object(doc, "", "status", JSON_REQUIRED, &st, err);
    if (!r)
        r = json_get_string(st, "status", "token", JSON_OPTIONAL, &tok, err);
    if (!r)
        r = json_get_string(st, "status", "clientCertificateData", JSON_OPTIONAL, &cert, err);
    if (!r)
        r = json_get_string(st, "status", "clientKeyData", JSON_OPTIONAL, &key, err);
    if (!r)
        r = json_get_string(st, "status", "expirationTimestamp", JSON_OPTIONAL, &exp, err);
    if (r)
        goto out;
    if (!!cert != !!key) {
        r = err_set(err, TERN_EINVALID,
                    "status: clientCertificateData and clientKeyData must be given together");
        goto out;
    }
    if (!(tok && tok[0]) && !cert) {
        r = err_set(err, TERN_EINVALID, "status: neither token nor client certificate");
        goto out;
    }
    if (exp && kubeconfig_parse_time(exp, &expiry)) {
        r = err_set(err, TERN_EINVALID, "status.expirationTimestamp: not RFC 3339: \"%s\"", exp);
        goto out;
    }
    if (tok && tok[0])
        cr.token = xstrdup(tok);
    if (cert) {
        cr.cert_pem = xstrdup(cert);
        cr.cert_pem_len = strlen(cert);
        cr.key_pem = xstrdup(key);
        cr.key_pem_len = strlen(key);
    }
    *ret = cr;
    *ret_expiry = expiry;
out:
    cJSON_Delete(doc);
    return r;
}

static char *exec_info(const struct kubeconfig *c)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "kind", "ExecCredential");
    json_add_string(o, "apiVersion", c->exec->api_version);
    cJSON *spec = cJSON_AddObjectToObject(o, "spec");
    cJSON_AddBoolToObject(spec, "interactive", false);
    if (c->exec->provide_cluster_info) {
        cJSON *cl = cJSON_AddObjectToObject(spec, "cluster");
        json_add_string(cl, "server", c->server);
        if (c->tls_server_name)
            json_add_string(cl, "tls-server-name", c->tls_server_name);
        if (c->insecure)
            cJSON_AddBoolToObject(cl, "insecure-skip-tls-verify", true);
        if (c->ca_pem) {
            char *b = base64_encode(c->ca_pem, c->ca_pem_len);
            json_add_string(cl, "certificate-authority-data", b);
            free(b);
        }
    }
    char *s = json_print(o);
    cJSON_Delete(o);
    return s;
}

static long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Runs the plugin; returns its stdout (bounded) on exit status 0. */
static int run_exec(const struct kubeconfig *c, char **ret_out, size_t *ret_len,
                    struct tern_err *err)
{
    const struct kubeconfig_exec *e = c->exec;
    int pfd[2] = {-1, -1};
    pid_t pid = -1;
    posix_spawn_file_actions_t fa;
    bool fa_init = false;
    struct buf out;
    char **envp = NULL;
    char *info = NULL;
    int r = 0;
    buf_init(&out, TERN_KUBE_MAX_EXEC_OUTPUT);

    if (pipe2(pfd, O_CLOEXEC)) {
        r = err_set(err, -errno, "exec plugin: pipe: %s", strerror(errno));
        goto out;
    }
    size_t n = 0, ne = 0;
    while (environ[n])
        n++;
    while (e->env[ne])
        ne++;
    envp = xcalloc(n + ne + 2, sizeof *envp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "KUBERNETES_EXEC_INFO=", 21) != 0)
            envp[k++] = environ[i];
    for (size_t i = 0; i < ne; i++)
        envp[k++] = e->env[i];
    char *inf = exec_info(c);
    info = xasprintf("KUBERNETES_EXEC_INFO=%s", inf);
    free(inf);
    envp[k++] = info;

    posix_spawn_file_actions_init(&fa);
    fa_init = true;
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    int sr = posix_spawnp(&pid, e->command, &fa, NULL, e->argv, envp);
    if (sr) {
        pid = -1;
        r = err_set(err, -sr, "exec plugin %s: %s", e->command, strerror(sr));
        goto out;
    }
    close(pfd[1]);
    pfd[1] = -1;
    long deadline = mono_ms() + (e->timeout_ms > 0 ? e->timeout_ms : TERN_KUBE_EXEC_TIMEOUT_MS);
    for (;;) {
        long left = deadline - mono_ms();
        if (left <= 0) {
            r = err_set(err, TERN_ETIMEOUT, "exec plugin %s: no result within %ld ms",
                        e->command, e->timeout_ms);
            goto out;
        }
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        int pr = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
        if (pr < 0 && errno != EINTR) {
            r = err_set(err, -errno, "exec plugin: poll: %s", strerror(errno));
            goto out;
        }
        if (pr <= 0)
            continue;
        char chunk[4096];
        ssize_t got = read(pfd[0], chunk, sizeof chunk);
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            r = err_set(err, -errno, "exec plugin: read: %s", strerror(errno));
            goto out;
        }
        if (got == 0)
            break;
        if (buf_append(&out, chunk, (size_t)got)) {
            r = err_set(err, TERN_ETOOLARGE, "exec plugin %s: output over %u bytes", e->command,
                        TERN_KUBE_MAX_EXEC_OUTPUT);
            goto out;
        }
    }
    /* stdout closed: wait for the exit status, still bounded by the deadline */
    for (;;) {
        int status;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            pid = -1;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                r = err_set(err, TERN_EAUTH, "exec plugin %s: exited with status %d",
                            e->command, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
                goto out;
            }
            break;
        }
        if (w < 0 && errno != EINTR) {
            pid = -1;
            r = err_set(err, -errno, "exec plugin: waitpid: %s", strerror(errno));
            goto out;
        }
        if (mono_ms() > deadline) {
            r = err_set(err, TERN_ETIMEOUT, "exec plugin %s: did not exit", e->command);
            goto out;
        }
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    *ret_len = out.len;
    *ret_out = buf_steal(&out);
out:
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    free(info);
    free(envp);
    buf_done(&out);
    return r;
}

static void copy_creds(struct kubeconfig_creds *dst, const struct kubeconfig_creds *src)
{
    dst->gen = src->gen;
    if (src->token)
        dst->token = xstrdup(src->token);
    if (src->cert_pem) {
        dst->cert_pem = xmemdup(src->cert_pem, src->cert_pem_len + 1);
        dst->cert_pem_len = src->cert_pem_len;
        dst->key_pem = xmemdup(src->key_pem, src->key_pem_len + 1);
        dst->key_pem_len = src->key_pem_len;
    }
}

int kubeconfig_creds(struct kubeconfig *c, unsigned rejected_gen, struct kubeconfig_creds *ret,
                     struct tern_err *err)
{
    struct kubeconfig_creds cr = {0};
    int r = 0;
    if (c->cert_pem) {
        cr.cert_pem = xmemdup(c->cert_pem, c->cert_pem_len + 1);
        cr.cert_pem_len = c->cert_pem_len;
        cr.key_pem = xmemdup(c->key_pem, c->key_pem_len + 1);
        cr.key_pem_len = c->key_pem_len;
    }
    if (c->token) {
        cr.token = xstrdup(c->token);
    } else if (c->token_file) {
        char *t = NULL;
        size_t n = 0;
        r = kubeconfig_read_file(c->token_file, TERN_KUBE_MAX_TOKEN_FILE, &t, &n, err);
        if (r)
            goto out;
        rtrim(t, &n);
        cr.token = t;
    } else if (c->exec) {
        struct kubeconfig_cache *k = c->cache;
        pthread_mutex_lock(&k->mu);
        bool stale = k->gen == 0 || (k->expiry && time(NULL) >= k->expiry - 10) ||
                     (rejected_gen && rejected_gen == k->gen);
        if (stale) {
            char *outp = NULL;
            size_t n = 0;
            struct kubeconfig_creds fresh = {0};
            time_t exp = 0;
            r = run_exec(c, &outp, &n, err);
            if (!r)
                r = kubeconfig_parse_exec_credential(outp, n, &fresh, &exp, err);
            free(outp);
            if (r) {
                pthread_mutex_unlock(&k->mu);
                goto out;
            }
            kubeconfig_creds_done(&k->creds);
            k->creds = fresh;
            k->expiry = exp;
            k->gen++;
            k->creds.gen = k->gen;
        }
        /* plugin certificates take the place of static ones */
        if (k->creds.cert_pem)
            kubeconfig_creds_done(&cr);
        struct kubeconfig_creds tmp = {0};
        copy_creds(&tmp, &k->creds);
        pthread_mutex_unlock(&k->mu);
        cr.gen = tmp.gen;
        if (tmp.token)
            cr.token = tmp.token;
        if (tmp.cert_pem) {
            cr.cert_pem = tmp.cert_pem;
            cr.cert_pem_len = tmp.cert_pem_len;
            cr.key_pem = tmp.key_pem;
            cr.key_pem_len = tmp.key_pem_len;
        }
    }
    *ret = cr;
    memset(&cr, 0, sizeof cr);
out:
    kubeconfig_creds_done(&cr);
    return r;
}
