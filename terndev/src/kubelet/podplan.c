/* podplan.c - the sandbox plan of a pod. See podplan.h. */
#include "podplan.h"

#include "base/base64.h"
#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "base/num.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct strv {
    char **v;
    size_t n, cap;
};

static void sv_push(struct strv *s, char *owned)
{
    if (s->n + 2 > s->cap) {
        s->cap = s->cap ? s->cap * 2 : 32;
        s->v = xreallocarray(s->v, s->cap, sizeof *s->v);
    }
    s->v[s->n++] = owned;
    s->v[s->n] = NULL;
}

static void sv_add(struct strv *s, const char *a)
{
    sv_push(s, xstrdup(a));
}

static void sv_free(char **v)
{
    for (char **p = v; p && *p; p++)
        free(*p);
    free(v);
}

static const cJSON *by_name(const cJSON *arr, const char *name)
{
    const cJSON *o;
    cJSON_ArrayForEach(o, arr)
    {
        const char *n = kobj_str(o, "metadata.name");
        if (n && name && strcmp(n, name) == 0)
            return o;
    }
    return NULL;
}

static const cJSON *find_volume(const cJSON *pod, const char *name)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, kobj_at(pod, "spec.volumes"))
    {
        const char *n = kobj_str(v, "name");
        if (n && strcmp(n, name) == 0)
            return v;
    }
    return NULL;
}

/* A path element must not escape its directory. */
static bool safe_rel(const char *p)
{
    if (!p || !*p || p[0] == '/')
        return false;
    for (const char *s = p; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if ((n == 2 && s[0] == '.' && s[1] == '.') || n == 0)
            return false;
        s += n + (e ? 1 : 0);
        if (!e)
            break;
    }
    return true;
}

int podplan_volume_source(const struct podplan_in *in, const char *name, char **ret,
                          struct tern_err *err)
{
    const cJSON *v = find_volume(in->pod, name);
    if (!v)
        return err_set(err, TERN_ENOTFOUND, "volume \"%s\" not found in spec.volumes", name);
    if (kobj_has(v, "persistentVolumeClaim")) {
        const char *claim = kobj_str(v, "persistentVolumeClaim.claimName");
        const cJSON *pvc = by_name(in->pvcs, claim);
        const char *phase = kobj_str(pvc, "status.phase");
        if (!pvc || kobj_deleting(pvc) || !phase || strcmp(phase, "Bound") != 0)
            return err_set(err, TERN_ENOTFOUND,
                           "persistentvolumeclaim \"%s\" not found or not bound", claim ? claim : "");
        const cJSON *pv = by_name(in->pvs, kobj_str(pvc, "spec.volumeName"));
        const char *path = kobj_str(pv, "spec.hostPath.path");
        path = path ? path : kobj_str(pv, "spec.local.path");
        if (pv && (!path || path[0] != '/'))
            return err_set(err, TERN_EINVALID,
                           "persistentvolume \"%s\": only hostPath and local volumes are supported",
                           kobj_str(pv, "metadata.name"));
        if (path) {
            *ret = xstrdup(path);
            return 0;
        }
        const char *ns = kobj_str(in->pod, "metadata.namespace");
        *ret = xasprintf("%s/%s/%s", in->volume_root, ns ? ns : "default",
                         kobj_str(pvc, "metadata.uid"));
        return 0;
    }
    if (kobj_has(v, "emptyDir") || kobj_has(v, "configMap") || kobj_has(v, "secret") ||
        kobj_has(v, "projected") || kobj_has(v, "downwardAPI")) {
        *ret = xasprintf("%s/volumes/%s", in->pod_dir, name);
        return 0;
    }
    return err_set(err, TERN_EINVALID, "volume \"%s\": unsupported volume type", name);
}

static void add_file(struct podplan_volumes *r, char *path, const void *data, size_t len,
                     mode_t mode)
{
    r->files = xreallocarray(r->files, r->nfiles + 1, sizeof *r->files);
    char *d = xmalloc(len + 1);
    memcpy(d, data, len);
    d[len] = 0;
    r->files[r->nfiles++] = (struct podplan_file){path, d, len, mode};
}

static void add_dir(struct podplan_volumes *r, char *path)
{
    r->dirs = xreallocarray(r->dirs, r->ndirs + 1, sizeof *r->dirs);
    r->dirs[r->ndirs++] = path;
}

void podplan_volumes_done(struct podplan_volumes *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->ndirs; i++)
        free(v->dirs[i]);
    for (size_t i = 0; i < v->nfiles; i++) {
        free(v->files[i].path);
        free(v->files[i].data);
    }
    free(v->dirs);
    free(v->files);
    memset(v, 0, sizeof *v);
}

/* Parent directories of rel inside base (for "a/b/c" adds base/a, base/a/b). */
static void add_parents(struct podplan_volumes *r, const char *base, const char *rel)
{
    for (const char *s = strchr(rel, '/'); s; s = strchr(s + 1, '/'))
        add_dir(r, xasprintf("%s/%.*s", base, (int)(s - rel), rel));
}

/* Files of a configMap/secret source into dir (items or all keys). */
static int key_files(struct podplan_volumes *r, const char *dir, const cJSON *src,
                     const cJSON *obj, bool secret, int64_t def_mode, const char *what,
                     struct tern_err *err)
{
    const cJSON *items = kobj_at(src, "items");
    const char *fields[2] = {"data", secret ? NULL : "binaryData"};
    if (cJSON_GetArraySize(items) > 0) {
        const cJSON *it;
        cJSON_ArrayForEach(it, items)
        {
            const char *key = kobj_str(it, "key"), *path = kobj_str(it, "path");
            if (!key || !safe_rel(path))
                return err_set(err, TERN_EINVALID, "%s: bad item key/path", what);
            const cJSON *val = NULL;
            bool b64 = secret;
            for (int f = 0; f < 2 && !val; f++) {
                if (!fields[f])
                    continue;
                val = json_get(kobj_at(obj, fields[f]), key);
                if (f == 1)
                    b64 = true;
            }
            if (!cJSON_IsString(val)) {
                if (kobj_bool(src, "optional", false))
                    continue;
                return err_set(err, TERN_ENOTFOUND, "%s: key \"%s\" not found", what, key);
            }
            int64_t mode = kobj_int(it, "mode", def_mode);
            add_parents(r, dir, path);
            if (b64) {
                unsigned char *raw;
                size_t n;
                if (base64_decode(val->valuestring, strlen(val->valuestring), &raw, &n) != 0)
                    return err_set(err, TERN_EINVALID, "%s: key \"%s\": bad base64", what, key);
                add_file(r, xasprintf("%s/%s", dir, path), raw, n, (mode_t)mode);
                free(raw);
            } else {
                add_file(r, xasprintf("%s/%s", dir, path), val->valuestring,
                         strlen(val->valuestring), (mode_t)mode);
            }
        }
        return 0;
    }
    for (int f = 0; f < 2; f++) {
        if (!fields[f])
            continue;
        const cJSON *kv;
        cJSON_ArrayForEach(kv, kobj_at(obj, fields[f]))
        {
            if (!cJSON_IsString(kv) || !safe_rel(kv->string) || strchr(kv->string, '/'))
                continue;
            if (secret || f == 1) {
                unsigned char *raw;
                size_t n;
                if (base64_decode(kv->valuestring, strlen(kv->valuestring), &raw, &n) != 0)
                    return err_set(err, TERN_EINVALID, "%s: key \"%s\": bad base64", what,
                                   kv->string);
                add_file(r, xasprintf("%s/%s", dir, kv->string), raw, n, (mode_t)def_mode);
                free(raw);
            } else {
                add_file(r, xasprintf("%s/%s", dir, kv->string), kv->valuestring,
                         strlen(kv->valuestring), (mode_t)def_mode);
            }
        }
    }
    return 0;
}

/* Value of a fieldRef path for pod (new string) or NULL when unsupported. */
static char *field_value(const struct podplan_in *in, const char *path)
{
    const cJSON *pod = in->pod;
    static const char *const direct[] = {"metadata.name", "metadata.namespace", "metadata.uid",
                                         "spec.nodeName", "spec.serviceAccountName"};
    for (size_t i = 0; i < sizeof direct / sizeof direct[0]; i++) {
        if (strcmp(path, direct[i]) == 0) {
            const char *v = kobj_str(pod, path);
            if (!v && strcmp(path, "spec.serviceAccountName") == 0)
                v = "default";
            if (!v && strcmp(path, "metadata.namespace") == 0)
                v = "default";
            return xstrdup(v ? v : "");
        }
    }
    if (strcmp(path, "status.podIP") == 0 || strcmp(path, "status.podIPs") == 0)
        return xstrdup(in->pod_ip ? in->pod_ip : "");
    if (strcmp(path, "status.hostIP") == 0 || strcmp(path, "status.hostIPs") == 0)
        return xstrdup(in->host_ip ? in->host_ip : "");
    const char *maps[] = {"metadata.labels", "metadata.annotations"};
    for (int m = 0; m < 2; m++) {
        size_t ml = strlen(maps[m]);
        if (strncmp(path, maps[m], ml) != 0)
            continue;
        const cJSON *obj = kobj_at(pod, maps[m]);
        if (path[ml] == 0) { /* all, as k="v" lines sorted as given */
            struct buf b;
            buf_init(&b, TERN_KUBELET_MAX_VALUE);
            const cJSON *kv;
            cJSON_ArrayForEach(kv, obj)
            {
                if (cJSON_IsString(kv))
                    buf_printf(&b, "%s=\"%s\"\n", kv->string, kv->valuestring);
            }
            char *s = buf_steal(&b);
            return s ? s : xstrdup("");
        }
        if (strncmp(path + ml, "['", 2) == 0) {
            const char *k = path + ml + 2;
            const char *e = strstr(k, "']");
            if (!e || e[2])
                return NULL;
            char *key = xstrndup(k, (size_t)(e - k));
            const cJSON *v = json_get(obj, key);
            free(key);
            return xstrdup(cJSON_IsString(v) ? v->valuestring : "");
        }
    }
    return NULL;
}

static const cJSON *container_by_name(const cJSON *pod, const char *name)
{
    const char *lists[] = {"spec.containers", "spec.initContainers"};
    for (int l = 0; l < 2; l++) {
        const cJSON *c;
        cJSON_ArrayForEach(c, kobj_at(pod, lists[l]))
        {
            const char *n = kobj_str(c, "name");
            if (n && name && strcmp(n, name) == 0)
                return c;
        }
    }
    return NULL;
}

/* resourceFieldRef value as text. */
static char *resource_value(const cJSON *pod, const cJSON *container, const cJSON *ref)
{
    const char *res = kobj_str(ref, "resource");
    const char *cname = kobj_str(ref, "containerName");
    if (cname)
        container = container_by_name(pod, cname);
    if (!res || !container)
        return NULL;
    bool cpu = strstr(res, "cpu") != NULL;
    char path[128];
    snprintf(path, sizeof path, "resources.%s", res);
    const char *q = kobj_str(container, path);
    int64_t v;
    if (!q || podplan_quantity(q, cpu ? 1000 : 1, &v) != 0)
        return xstrdup(cpu ? "1" : "0");
    const char *div = kobj_str(ref, "divisor");
    int64_t d = 1;
    if (div && podplan_quantity(div, cpu ? 1000 : 1, &d) != 0)
        d = 1;
    if (cpu && !div)
        d = 1000;
    if (d <= 0)
        d = 1;
    char out[32];
    return xstrdup(num_fmt_i64((v + d - 1) / d, out));
}

static int downward_files(const struct podplan_in *in, struct podplan_volumes *r,
                          const char *dir, const cJSON *src, int64_t def_mode, struct tern_err *err)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, kobj_at(src, "items"))
    {
        const char *path = kobj_str(it, "path");
        if (!safe_rel(path))
            return err_set(err, TERN_EINVALID, "downwardAPI: bad path");
        char *v = NULL;
        if (kobj_has(it, "fieldRef"))
            v = field_value(in, kobj_str(it, "fieldRef.fieldPath"));
        else if (kobj_has(it, "resourceFieldRef"))
            v = resource_value(in->pod, NULL, kobj_at(it, "resourceFieldRef"));
        if (!v)
            return err_set(err, TERN_EINVALID, "downwardAPI: unsupported field for \"%s\"", path);
        add_parents(r, dir, path);
        add_file(r, xasprintf("%s/%s", dir, path), v, strlen(v),
                 (mode_t)kobj_int(it, "mode", def_mode));
        free(v);
    }
    return 0;
}

int podplan_volumes(const struct podplan_in *in, struct podplan_volumes *ret,
                    struct tern_err *err)
{
    struct podplan_volumes r = {0};
    int rc = 0;
    add_dir(&r, xasprintf("%s/volumes", in->pod_dir));
    const cJSON *v;
    cJSON_ArrayForEach(v, kobj_at(in->pod, "spec.volumes"))
    {
        const char *name = kobj_str(v, "name");
        if (!name || strchr(name, '/') || !safe_rel(name)) {
            rc = err_set(err, TERN_EINVALID, "spec.volumes: bad name");
            goto out;
        }
        if (kobj_has(v, "persistentVolumeClaim"))
            continue;
        char *dir = xasprintf("%s/volumes/%s", in->pod_dir, name);
        add_dir(&r, xstrdup(dir));
        if (kobj_has(v, "configMap") || kobj_has(v, "secret")) {
            bool secret = kobj_has(v, "secret");
            const cJSON *src = kobj_at(v, secret ? "secret" : "configMap");
            const char *oname = kobj_str(src, secret ? "secretName" : "name");
            const cJSON *obj = by_name(secret ? in->secrets : in->configmaps, oname);
            char what[300];
            snprintf(what, sizeof what, "%s \"%s\"", secret ? "secret" : "configmap",
                     oname ? oname : "");
            int64_t mode = kobj_int(src, "defaultMode", 0644);
            if (!obj) {
                if (!kobj_bool(src, "optional", false)) {
                    rc = err_set(err, TERN_ENOTFOUND, "%s not found", what);
                    free(dir);
                    goto out;
                }
            } else if ((rc = key_files(&r, dir, src, obj, secret, mode, what, err))) {
                free(dir);
                goto out;
            }
        } else if (kobj_has(v, "downwardAPI")) {
            const cJSON *src = kobj_at(v, "downwardAPI");
            if ((rc = downward_files(in, &r, dir, src, kobj_int(src, "defaultMode", 0644), err))) {
                free(dir);
                goto out;
            }
        } else if (kobj_has(v, "projected")) {
            int64_t mode = kobj_int(v, "projected.defaultMode", 0644);
            const cJSON *s;
            cJSON_ArrayForEach(s, kobj_at(v, "projected.sources"))
            {
                if (kobj_has(s, "configMap") || kobj_has(s, "secret")) {
                    bool secret = kobj_has(s, "secret");
                    const cJSON *src = kobj_at(s, secret ? "secret" : "configMap");
                    const char *oname = kobj_str(src, "name");
                    const cJSON *obj = by_name(secret ? in->secrets : in->configmaps, oname);
                    char what[300];
                    snprintf(what, sizeof what, "%s \"%s\"", secret ? "secret" : "configmap",
                             oname ? oname : "");
                    if (!obj) {
                        if (kobj_bool(src, "optional", false))
                            continue;
                        rc = err_set(err, TERN_ENOTFOUND, "%s not found", what);
                    } else {
                        rc = key_files(&r, dir, src, obj, secret, mode, what, err);
                    }
                } else if (kobj_has(s, "downwardAPI")) {
                    rc = downward_files(in, &r, dir, kobj_at(s, "downwardAPI"), mode, err);
                } else if (kobj_has(s, "serviceAccountToken")) {
                    const char *path = kobj_str(s, "serviceAccountToken.path");
                    if (!safe_rel(path)) {
                        rc = err_set(err, TERN_EINVALID, "serviceAccountToken: bad path");
                    } else if (in->sa_token) {
                        add_parents(&r, dir, path);
                        add_file(&r, xasprintf("%s/%s", dir, path), in->sa_token,
                                 strlen(in->sa_token), (mode_t)mode);
                    }
                }
                if (rc) {
                    free(dir);
                    goto out;
                }
            }
        } else if (!kobj_has(v, "emptyDir")) {
            rc = err_set(err, TERN_EINVALID, "volume \"%s\": unsupported volume type", name);
            free(dir);
            goto out;
        }
        free(dir);
    }
    /* each container's /tmp */
    const char *clists[] = {"spec.initContainers", "spec.containers"};
    for (int l = 0; l < 2; l++) {
        const cJSON *c;
        cJSON_ArrayForEach(c, kobj_at(in->pod, clists[l]))
        {
            const char *cn = kobj_str(c, "name");
            if (!cn || !*cn || strchr(cn, '/') || cn[0] == '.') {
                rc = err_set(err, TERN_EINVALID, "bad container name");
                goto out;
            }
            add_dir(&r, xasprintf("%s/tmp/%s", in->pod_dir, cn));
        }
    }
    /* the service-account directory */
    if (in->sa_token) {
        char *sa = xasprintf("%s/sa", in->pod_dir);
        add_dir(&r, xstrdup(sa));
        add_file(&r, xasprintf("%s/token", sa), in->sa_token, strlen(in->sa_token), 0644);
        const char *ns = kobj_str(in->pod, "metadata.namespace");
        ns = ns ? ns : "default";
        add_file(&r, xasprintf("%s/namespace", sa), ns, strlen(ns), 0644);
        const char *ca = in->ca_pem ? in->ca_pem : "";
        add_file(&r, xasprintf("%s/ca.crt", sa), ca, strlen(ca), 0644);
        free(sa);
    }
out:
    if (rc)
        podplan_volumes_done(&r);
    else
        *ret = r;
    return rc;
}

int podplan_quantity(const char *s, int64_t mult, int64_t *ret)
{
    if (!s || !*s || strlen(s) > 40)
        return TERN_EINVALID;
    const char *p = s;
    int64_t ip = 0, frac = 0, fdiv = 1;
    if (*p < '0' || *p > '9')
        return TERN_EINVALID;
    while (*p >= '0' && *p <= '9') {
        if (ip > INT64_MAX / 100)
            return TERN_EINVALID;
        ip = ip * 10 + (*p++ - '0');
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            if (fdiv < 1000000000) {
                frac = frac * 10 + (*p - '0');
                fdiv *= 10;
            }
            p++;
        }
    }
    static const struct {
        const char *suf;
        int64_t num, den;
    } sufs[] = {{"", 1, 1},
                {"m", 1, 1000},
                {"k", 1000, 1},
                {"K", 1000, 1},
                {"M", 1000000, 1},
                {"G", 1000000000, 1},
                {"T", 1000000000000LL, 1},
                {"Ki", 1024, 1},
                {"Mi", 1024 * 1024, 1},
                {"Gi", 1024LL * 1024 * 1024, 1},
                {"Ti", 1024LL * 1024 * 1024 * 1024, 1}};
    for (size_t i = 0; i < sizeof sufs / sizeof sufs[0]; i++) {
        if (strcmp(p, sufs[i].suf) != 0)
            continue;
        /* value = (ip + frac/fdiv) * num / den * mult, in 128-bit */
        __int128 v = ((__int128)ip * fdiv + frac) * sufs[i].num * mult;
        __int128 d = (__int128)fdiv * sufs[i].den;
        v = (v + d - 1) / d;
        if (v > INT64_MAX)
            return TERN_EINVALID;
        *ret = (int64_t)v;
        return 0;
    }
    return TERN_EINVALID;
}

char *podplan_expand(const char *s, char *const *envp, size_t n)
{
    struct buf b;
    buf_init(&b, TERN_KUBELET_MAX_VALUE);
    for (const char *p = s; *p;) {
        if (p[0] == '$' && p[1] == '$') {
            buf_putc(&b, '$');
            p += 2;
            continue;
        }
        if (p[0] == '$' && p[1] == '(') {
            const char *e = strchr(p + 2, ')');
            if (e) {
                size_t kl = (size_t)(e - p - 2);
                const char *val = NULL;
                for (size_t i = 0; i < n; i++) {
                    if (strncmp(envp[i], p + 2, kl) == 0 && envp[i][kl] == '=')
                        val = envp[i] + kl + 1;
                }
                if (val) {
                    buf_puts(&b, val);
                    p = e + 1;
                    continue;
                }
            }
        }
        buf_putc(&b, *p++);
    }
    char *r = buf_steal(&b);
    return r ? r : xstrdup("");
}

/* Sets K=V in env (replacing an earlier K). */
static void env_set(struct strv *env, const char *k, const char *v)
{
    size_t kl = strlen(k);
    for (size_t i = 0; i < env->n; i++) {
        if (strncmp(env->v[i], k, kl) == 0 && env->v[i][kl] == '=') {
            free(env->v[i]);
            env->v[i] = xasprintf("%s=%s", k, v);
            return;
        }
    }
    sv_push(env, xasprintf("%s=%s", k, v));
}

static char *decoded(const char *b64)
{
    unsigned char *raw;
    size_t n;
    if (base64_decode(b64, strlen(b64), &raw, &n) != 0)
        return NULL;
    char *s = xmalloc(n + 1);
    memcpy(s, raw, n);
    s[n] = 0;
    free(raw);
    return s;
}

static int build_env(const struct podplan_in *in, const cJSON *c, struct strv *env,
                     struct tern_err *err)
{
    char port[16];
    snprintf(port, sizeof port, "%d", in->api_port);
    env_set(env, "PATH", PODPLAN_BIN_PATH ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    const char *pn = kobj_str(in->pod, "metadata.name");
    env_set(env, "HOSTNAME", pn ? pn : "pod");
    if (in->api_host) {
        char *url = xasprintf("tcp://%s:%s", in->api_host, port);
        env_set(env, "KUBERNETES_SERVICE_HOST", in->api_host);
        env_set(env, "KUBERNETES_SERVICE_PORT", port);
        env_set(env, "KUBERNETES_SERVICE_PORT_HTTPS", port);
        env_set(env, "KUBERNETES_PORT", url);
        free(url);
    }
    const cJSON *ef;
    cJSON_ArrayForEach(ef, kobj_at(c, "envFrom"))
    {
        const char *prefix = kobj_str(ef, "prefix");
        bool secret = kobj_has(ef, "secretRef");
        const cJSON *ref = kobj_at(ef, secret ? "secretRef" : "configMapRef");
        const char *name = kobj_str(ref, "name");
        const cJSON *obj = by_name(secret ? in->secrets : in->configmaps, name);
        if (!obj) {
            if (kobj_bool(ref, "optional", false))
                continue;
            return err_set(err, TERN_ENOTFOUND, "%s \"%s\" not found",
                           secret ? "secret" : "configmap", name ? name : "");
        }
        const cJSON *kv;
        cJSON_ArrayForEach(kv, kobj_at(obj, "data"))
        {
            if (!cJSON_IsString(kv))
                continue;
            char *k = xasprintf("%s%s", prefix ? prefix : "", kv->string);
            char *v = secret ? decoded(kv->valuestring) : xstrdup(kv->valuestring);
            if (v)
                env_set(env, k, v);
            free(k);
            free(v);
        }
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, kobj_at(c, "env"))
    {
        const char *name = kobj_str(e, "name");
        if (!name || !*name || strchr(name, '='))
            return err_set(err, TERN_EINVALID, "env: bad name");
        const char *value = kobj_str(e, "value");
        if (!kobj_has(e, "valueFrom")) {
            char *x = podplan_expand(value ? value : "", env->v, env->n);
            env_set(env, name, x);
            free(x);
            continue;
        }
        const cJSON *vf = kobj_at(e, "valueFrom");
        char *v = NULL;
        if (kobj_has(vf, "secretKeyRef") || kobj_has(vf, "configMapKeyRef")) {
            bool secret = kobj_has(vf, "secretKeyRef");
            const cJSON *ref = kobj_at(vf, secret ? "secretKeyRef" : "configMapKeyRef");
            const char *oname = kobj_str(ref, "name"), *key = kobj_str(ref, "key");
            const cJSON *obj = by_name(secret ? in->secrets : in->configmaps, oname);
            const cJSON *val = json_get(kobj_at(obj, "data"), key ? key : "");
            if (!cJSON_IsString(val)) {
                if (kobj_bool(ref, "optional", false))
                    continue;
                return err_set(err, TERN_ENOTFOUND, "%s \"%s\"%s%s%s",
                               secret ? "secret" : "configmap", oname ? oname : "",
                               obj ? ": key \"" : " not found", obj && key ? key : "",
                               obj ? "\" not found" : "");
            }
            v = secret ? decoded(val->valuestring) : xstrdup(val->valuestring);
            if (!v)
                return err_set(err, TERN_EINVALID, "secret \"%s\": bad base64", oname);
        } else if (kobj_has(vf, "fieldRef")) {
            const char *path = kobj_str(vf, "fieldRef.fieldPath");
            v = path ? field_value(in, path) : NULL;
            if (!v)
                return err_set(err, TERN_EINVALID, "env %s: unsupported fieldPath \"%s\"", name,
                               path ? path : "");
        } else if (kobj_has(vf, "resourceFieldRef")) {
            v = resource_value(in->pod, c, kobj_at(vf, "resourceFieldRef"));
            if (!v)
                return err_set(err, TERN_EINVALID, "env %s: unsupported resourceFieldRef", name);
        } else {
            return err_set(err, TERN_EINVALID, "env %s: unsupported valueFrom", name);
        }
        env_set(env, name, v);
        free(v);
    }
    return 0;
}

static void bind(struct strv *a, bool ro, const char *src, const char *dst)
{
    sv_add(a, ro ? "--ro-bind" : "--bind");
    sv_add(a, src);
    sv_add(a, dst);
}

static int64_t sec_int(const cJSON *pod, const cJSON *c, const char *key, int64_t def)
{
    char p[128];
    snprintf(p, sizeof p, "securityContext.%s", key);
    int64_t v = kobj_int(c, p, -1);
    if (v >= 0)
        return v;
    snprintf(p, sizeof p, "spec.securityContext.%s", key);
    return kobj_int(pod, p, def);
}

static bool sec_bool(const cJSON *pod, const cJSON *c, const char *key)
{
    char p[128];
    snprintf(p, sizeof p, "securityContext.%s", key);
    const cJSON *v = kobj_at(c, p);
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v);
    snprintf(p, sizeof p, "spec.securityContext.%s", key);
    return kobj_bool(pod, p, false);
}

void podplan_exec_done(struct podplan_exec *e)
{
    if (!e)
        return;
    sv_free(e->argv);
    sv_free(e->envp);
    free(e->termination_file);
    free(e->netns);
    memset(e, 0, sizeof *e);
}

int podplan_exec(const struct podplan_in *in, const cJSON *c, const cJSON *cmd_override,
                 struct podplan_exec *ret, struct tern_err *err)
{
    struct strv a = {0}, env = {0}, cmd = {0};
    int rc = build_env(in, c, &env, err);
    if (rc)
        goto out;
    if (cmd_override) {
        const cJSON *s;
        cJSON_ArrayForEach(s, cmd_override)
        {
            if (cJSON_IsString(s))
                sv_add(&cmd, s->valuestring);
        }
    } else {
        const char *keys[] = {"command", "args"};
        for (int k = 0; k < 2; k++) {
            const cJSON *s;
            cJSON_ArrayForEach(s, kobj_at(c, keys[k]))
            {
                if (cJSON_IsString(s))
                    sv_push(&cmd, podplan_expand(s->valuestring, env.v, env.n));
            }
        }
    }
    if (cmd.n == 0) {
        rc = err_set(err, TERN_EINVALID,
                     "container \"%s\" has no command: images are not run by tern-dev, "
                     "set command",
                     kobj_str(c, "name") ? kobj_str(c, "name") : "");
        goto out;
    }
    const cJSON *pod = in->pod;
    sv_add(&a, in->bwrap ? in->bwrap : "bwrap");
    const char *base[] = {"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
                          "--new-session", "--cap-drop", "ALL"};
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
        sv_add(&a, base[i]);
    sv_add(&a, "--hostname");
    sv_add(&a, kobj_str(pod, "metadata.name") ? kobj_str(pod, "metadata.name") : "pod");
    int64_t uid = sec_int(pod, c, "runAsUser", -1), gid = sec_int(pod, c, "runAsGroup", -1);
    if (uid < 0 && sec_bool(pod, c, "runAsNonRoot"))
        uid = PODPLAN_NONROOT_UID;
    if (gid < 0 && uid >= 0)
        gid = uid;
    if (uid >= 0) {
        char b[24];
        sv_add(&a, "--unshare-user");
        sv_add(&a, "--uid");
        sv_add(&a, num_fmt_i64(uid, b));
        sv_add(&a, "--gid");
        sv_add(&a, num_fmt_i64(gid, b));
    }
    if (in->isolate_net)
        sv_add(&a, "--unshare-net");
    bind(&a, true, "/usr", "/usr");
    const char *links[][2] = {{"usr/bin", "/bin"}, {"usr/sbin", "/sbin"}, {"usr/lib", "/lib"},
                              {"usr/lib64", "/lib64"}};
    for (size_t i = 0; i < 4; i++) {
        sv_add(&a, "--symlink");
        sv_add(&a, links[i][0]);
        sv_add(&a, links[i][1]);
    }
    const char *etc[] = {"/etc/ld.so.cache", "/etc/ssl",      "/etc/ca-certificates",
                         "/etc/alternatives", "/etc/passwd",  "/etc/group",
                         "/etc/nsswitch.conf", "/etc/hosts",  "/etc/resolv.conf",
                         "/etc/localtime",    "/etc/gai.conf", "/etc/host.conf"};
    for (size_t i = 0; i < sizeof etc / sizeof etc[0]; i++) {
        sv_add(&a, "--ro-bind-try");
        sv_add(&a, etc[i]);
        sv_add(&a, etc[i]);
    }
    sv_add(&a, "--proc");
    sv_add(&a, "/proc");
    sv_add(&a, "--dev");
    sv_add(&a, "/dev");
    /* /tmp is the container's own directory (like its writable layer); it
     * also puts POD_DIR in every sandbox's command line, which is how a new
     * kubelet finds processes a previous one left */
    const char *cname = kobj_str(c, "name");
    char *tmp = xasprintf("%s/tmp/%s", in->pod_dir, cname ? cname : "");
    bind(&a, false, tmp, "/tmp");
    free(tmp);
    if (in->bin_dir)
        bind(&a, true, in->bin_dir, PODPLAN_BIN_PATH);
    bool sa_mounted = false;
    const cJSON *m;
    cJSON_ArrayForEach(m, kobj_at(c, "volumeMounts"))
    {
        const char *name = kobj_str(m, "name"), *path = kobj_str(m, "mountPath");
        if (!name || !path || path[0] != '/') {
            rc = err_set(err, TERN_EINVALID, "volumeMounts: name and absolute mountPath required");
            goto out;
        }
        char *src;
        if ((rc = podplan_volume_source(in, name, &src, err)))
            goto out;
        const char *sub = kobj_str(m, "subPath");
        if (sub && *sub) {
            if (!safe_rel(sub)) {
                free(src);
                rc = err_set(err, TERN_EINVALID, "volumeMounts: bad subPath");
                goto out;
            }
            char *s2 = xasprintf("%s/%s", src, sub);
            free(src);
            src = s2;
        }
        const cJSON *vol = find_volume(pod, name);
        bool ro = kobj_bool(m, "readOnly", false) || kobj_has(vol, "configMap") ||
                  kobj_has(vol, "secret") || kobj_has(vol, "projected") ||
                  kobj_has(vol, "downwardAPI");
        bind(&a, ro, src, path);
        free(src);
        if (strcmp(path, PODPLAN_SA_PATH) == 0)
            sa_mounted = true;
    }
    if (in->sa_token && !sa_mounted) {
        char *sa = xasprintf("%s/sa", in->pod_dir);
        bind(&a, true, sa, PODPLAN_SA_PATH);
        free(sa);
    }
    /* the termination message file, as a kubelet gives every container */
    char *term_file = NULL;
    if (!cmd_override) {
        const char *tp = kobj_str(c, "terminationMessagePath");
        if (!tp || tp[0] != '/')
            tp = "/dev/termination-log";
        term_file = xasprintf("%s/termination/%s", in->pod_dir, cname ? cname : "");
        bind(&a, false, term_file, tp);
    }
    const char *wd = kobj_str(c, "workingDir");
    if (wd && *wd) {
        sv_add(&a, "--dir");
        sv_add(&a, wd);
        sv_add(&a, "--chdir");
        sv_add(&a, wd);
    }
    if (sec_bool(pod, c, "readOnlyRootFilesystem")) {
        sv_add(&a, "--remount-ro");
        sv_add(&a, "/");
    }
    sv_add(&a, "--");
    for (size_t i = 0; i < cmd.n; i++)
        sv_add(&a, cmd.v[i]);
    int64_t mem = -1, cpu = -1;
    const char *q = kobj_str(c, "resources.limits.memory");
    if (q && podplan_quantity(q, 1, &mem) != 0)
        mem = -1;
    q = kobj_str(c, "resources.limits.cpu");
    if (q && podplan_quantity(q, 1000, &cpu) != 0)
        cpu = -1;
    *ret = (struct podplan_exec){a.v, env.v, term_file, mem, cpu, (uid_t)(uid < 0 ? 0 : uid),
                                 in->netns && !in->isolate_net ? xstrdup(in->netns) : NULL};
    a.v = NULL;
    env.v = NULL;
out:
    sv_free(a.v);
    sv_free(env.v);
    sv_free(cmd.v);
    return rc;
}

/* A container's request of res (cpu in millicores, memory in bytes). */
static int64_t request_of(const cJSON *c, const char *res, int64_t mult)
{
    char path[64];
    snprintf(path, sizeof path, "resources.requests.%s", res);
    const char *q = kobj_str(c, path);
    if (!q) {
        snprintf(path, sizeof path, "resources.limits.%s", res);
        q = kobj_str(c, path);
    }
    int64_t v = 0;
    if (!q || podplan_quantity(q, mult, &v) != 0 || v < 0)
        return 0;
    return v;
}

bool podplan_fits(const cJSON *pod, int64_t cpu_milli, int64_t mem_bytes, char *why, size_t n)
{
    static const struct {
        const char *res;
        int64_t mult;
    } rs[] = {{"cpu", 1000}, {"memory", 1}};
    int64_t have[2] = {cpu_milli, mem_bytes};
    bool short_of[2] = {false, false};
    for (int r = 0; r < 2; r++) {
        int64_t sum = 0, init_max = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, kobj_at(pod, "spec.containers"))
        {
            int64_t v = request_of(c, rs[r].res, rs[r].mult);
            sum = v > INT64_MAX - sum ? INT64_MAX : sum + v;
        }
        cJSON_ArrayForEach(c, kobj_at(pod, "spec.initContainers"))
        {
            int64_t v = request_of(c, rs[r].res, rs[r].mult);
            if (v > init_max)
                init_max = v;
        }
        int64_t need = sum > init_max ? sum : init_max;
        short_of[r] = need > have[r];
    }
    if (!short_of[0] && !short_of[1])
        return true;
    snprintf(why, n,
             "0/1 nodes are available: %s%s%s. preemption: 0/1 nodes are available: 1 No "
             "preemption victims found for incoming pod.",
             short_of[0] ? "1 Insufficient cpu" : "", short_of[0] && short_of[1] ? ", " : "",
             short_of[1] ? "1 Insufficient memory" : "");
    return false;
}

static bool lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool any_alnum(char c)
{
    return lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/* path-component: [a-z0-9]+ ((\.|_|__|-+)[a-z0-9]+)* */
static bool path_component(const char *p, size_t n)
{
    if (n == 0 || !lower_alnum(p[0]) || !lower_alnum(p[n - 1]))
        return false;
    for (size_t i = 0; i < n;) {
        if (lower_alnum(p[i])) {
            i++;
            continue;
        }
        size_t j = i;
        if (p[i] == '.')
            j = i + 1;
        else if (p[i] == '_')
            j = i + 1 < n && p[i + 1] == '_' ? i + 2 : i + 1;
        else if (p[i] == '-')
            while (j < n && p[j] == '-')
                j++;
        else
            return false;
        if (j >= n || !lower_alnum(p[j]))
            return false;
        i = j;
    }
    return true;
}

/* domain: components of [A-Za-z0-9-] (not starting/ending with '-') joined
 * by '.', optionally :port */
static bool domain_part(const char *p, size_t n)
{
    const char *colon = memchr(p, ':', n);
    size_t hn = colon ? (size_t)(colon - p) : n;
    if (colon) {
        size_t pn = n - hn - 1;
        if (pn == 0)
            return false;
        for (size_t i = 0; i < pn; i++)
            if (colon[1 + i] < '0' || colon[1 + i] > '9')
                return false;
    }
    if (hn == 0)
        return false;
    size_t start = 0;
    for (size_t i = 0; i <= hn; i++) {
        if (i < hn && p[i] != '.')
            continue;
        size_t len = i - start;
        if (len == 0 || !any_alnum(p[start]) || !any_alnum(p[i - 1]))
            return false;
        for (size_t k = start; k < i; k++)
            if (!any_alnum(p[k]) && p[k] != '-')
                return false;
        start = i + 1;
    }
    return true;
}

bool podplan_image_valid(const char *image, char *why, size_t n)
{
    const char *detail = "invalid reference format";
    size_t len = image ? strlen(image) : 0;
    const char *at = image ? strchr(image, '@') : NULL;
    size_t name_end = at ? (size_t)(at - image) : len;
    /* the tag: after the last ':' that follows the last '/' */
    size_t slash = 0;
    for (size_t i = 0; i < name_end; i++)
        if (image[i] == '/')
            slash = i + 1;
    const char *tag = NULL;
    for (size_t i = slash; i < name_end; i++)
        if (image[i] == ':') {
            tag = image + i + 1;
            break;
        }
    size_t repo_end = tag ? (size_t)(tag - 1 - image) : name_end;
    bool ok = len > 0 && repo_end > 0 && repo_end <= 255;
    if (ok && tag) {
        size_t tn = (size_t)(image + name_end - tag);
        ok = tn >= 1 && tn <= 128 &&
             (any_alnum(tag[0]) || tag[0] == '_');
        for (size_t i = 1; ok && i < tn; i++)
            ok = any_alnum(tag[i]) || tag[i] == '_' || tag[i] == '.' || tag[i] == '-';
    }
    if (ok && at) {
        const char *d = at + 1, *colon = strchr(d, ':');
        ok = colon && colon > d && strlen(colon + 1) >= 32;
        for (const char *h = colon ? colon + 1 : d; ok && *h; h++)
            ok = (*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f') || (*h >= 'A' && *h <= 'F');
    }
    /* components of the repository; the first is a domain if it looks like one */
    size_t start = 0, comp = 0;
    for (size_t i = 0; ok && i <= repo_end; i++) {
        if (i < repo_end && image[i] != '/')
            continue;
        const char *c = image + start;
        size_t cn = i - start;
        bool is_domain = comp == 0 && i < repo_end &&
                         (memchr(c, '.', cn) || memchr(c, ':', cn) ||
                          (cn == 9 && strncmp(c, "localhost", 9) == 0));
        if (!is_domain && comp == 0 && i < repo_end)
            for (size_t k = 0; k < cn; k++)
                if (c[k] >= 'A' && c[k] <= 'Z')
                    is_domain = true;
        if (is_domain) {
            ok = domain_part(c, cn);
        } else {
            ok = path_component(c, cn);
            if (!ok) {
                bool upper = false;
                for (size_t k = 0; k < cn; k++)
                    upper = upper || (c[k] >= 'A' && c[k] <= 'Z');
                if (upper)
                    detail = "invalid reference format: repository name must be lowercase";
            }
        }
        start = i + 1;
        comp++;
    }
    if (ok)
        return true;
    snprintf(why, n,
             "Failed to apply default image tag \"%s\": couldn't parse image name \"%s\": %s",
             image ? image : "", image ? image : "", detail);
    return false;
}
