/* sapi_kube.c - the aggregated API's Kubernetes side. See sapi_kube.h. */
#include "sapi_kube.h"

#include "base/base64.h"
#include "base/mem.h"
#include "controller/artstore.h"
#include "json/json.h"
#include "kube/kclient.h"
#include "kube/kmap.h"
#include "sandbox/sandbox_contract.h"
#include "spec/session_spec.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL 8

struct sar_answer {
    bool allowed;
    char reason[256];
    time_t at;
};

struct sapi_kube {
    struct sapi_kube_config cfg;
    char *ca_file, *apiservice;
    struct children_config children;
    pthread_mutex_t mu; /* guards the pool, the cache, creating */
    struct kclient *pool[POOL];
    size_t npool;
    struct kmap *sar; /* key -> struct sar_answer */
    struct kmap *creating; /* session uid -> when a viewer Job was created */
    struct sapi *server;
    pthread_t th;
    bool th_started;
    atomic_bool stop;
};

static struct kclient *client_get(struct sapi_kube *k)
{
    struct kclient *c = NULL;
    pthread_mutex_lock(&k->mu);
    if (k->npool)
        c = k->pool[--k->npool];
    pthread_mutex_unlock(&k->mu);
    return c ? c : kclient_new(k->cfg.kube, NULL);
}

static void client_put(struct sapi_kube *k, struct kclient *c)
{
    pthread_mutex_lock(&k->mu);
    if (k->npool < POOL) {
        k->pool[k->npool++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&k->mu);
    kclient_free(c);
}

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = json_get(o, a);
    if (b)
        v = json_get(v, b);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- authorization ------------------------------------------------------- */

static int free_answer(void *ctx, const char *key, void *v)
{
    (void)ctx;
    (void)key;
    free(v);
    return 0;
}

static int k_authorize(void *ctx, const struct sapi_user *u, const char *verb, const char *ns,
                       const char *name, const char *sub, char *reason, size_t rsz,
                       struct tern_err *err)
{
    struct sapi_kube *k = ctx;
    struct buf key;
    buf_init(&key, 16384);
    buf_printf(&key, "%s\n%s\n%s\n%s\n%s", u->name, verb, ns, name, sub);
    for (size_t i = 0; i < u->ngroups; i++)
        buf_printf(&key, "\ng=%s", u->groups[i]);
    for (size_t i = 0; i < u->nextra; i++)
        buf_printf(&key, "\nx=%s=%s", u->extra[i].key, u->extra[i].value);
    time_t now = time(NULL);
    pthread_mutex_lock(&k->mu);
    struct sar_answer *a = kmap_get(k->sar, buf_str(&key));
    bool hit = a && now - a->at < 10;
    struct sar_answer copy = hit ? *a : (struct sar_answer){0};
    pthread_mutex_unlock(&k->mu);
    if (hit) {
        buf_done(&key);
        snprintf(reason, rsz, "%s", copy.reason);
        return copy.allowed ? 0 : TERN_EAUTH;
    }
    cJSON *body = cJSON_CreateObject();
    json_add_string(body, "apiVersion", "authorization.k8s.io/v1");
    json_add_string(body, "kind", "SubjectAccessReview");
    cJSON *spec = cJSON_AddObjectToObject(body, "spec");
    json_add_string(spec, "user", u->name);
    cJSON *g = cJSON_AddArrayToObject(spec, "groups");
    for (size_t i = 0; i < u->ngroups; i++)
        cJSON_AddItemToArray(g, cJSON_CreateString(u->groups[i]));
    if (u->nextra) {
        cJSON *x = cJSON_AddObjectToObject(spec, "extra");
        for (size_t i = 0; i < u->nextra; i++) {
            cJSON *l = (cJSON *)json_get(x, u->extra[i].key);
            if (!l)
                l = cJSON_AddArrayToObject(x, u->extra[i].key);
            cJSON_AddItemToArray(l, cJSON_CreateString(u->extra[i].value));
        }
    }
    cJSON *ra = cJSON_AddObjectToObject(spec, "resourceAttributes");
    if (*ns)
        json_add_string(ra, "namespace", ns);
    json_add_string(ra, "verb", verb);
    json_add_string(ra, "group", "tern.dev");
    json_add_string(ra, "version", "v1alpha1");
    json_add_string(ra, "resource", "agentsessions");
    if (*sub)
        json_add_string(ra, "subresource", sub);
    if (*name)
        json_add_string(ra, "name", name);
    char *text = json_print(body);
    cJSON_Delete(body);
    struct kclient *kc = client_get(k);
    cJSON *out = NULL;
    struct kclient_err ke = {0};
    int rc = kclient_request(kc, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                             "application/json", text, strlen(text), 0, &out, &ke);
    client_put(k, kc);
    free(text);
    if (rc) {
        buf_done(&key);
        return err_set(err, rc, "SubjectAccessReview: %s", ke.message[0] ? ke.message : ke.e.msg);
    }
    const cJSON *st = json_get(out, "status");
    bool allowed = cJSON_IsTrue(json_get(st, "allowed")) && !cJSON_IsTrue(json_get(st, "denied"));
    const char *why = str_at(st, "reason", NULL);
    const char *eval = str_at(st, "evaluationError", NULL);
    snprintf(reason, rsz, "%s%s%s", why ? why : "", why && eval ? "; " : "", eval ? eval : "");
    struct sar_answer *n = xcalloc(1, sizeof *n);
    n->allowed = allowed;
    n->at = now;
    snprintf(n->reason, sizeof n->reason, "%s", reason);
    pthread_mutex_lock(&k->mu);
    if (kmap_len(k->sar) >= TERN_SAPI_SAR_CACHE) {
        kmap_each(k->sar, free_answer, NULL);
        kmap_free(k->sar);
        k->sar = kmap_new();
    }
    free(kmap_put(k->sar, buf_str(&key), n));
    pthread_mutex_unlock(&k->mu);
    buf_done(&key);
    cJSON_Delete(out);
    return allowed ? 0 : TERN_EAUTH;
}

/* ---- sessions --------------------------------------------------------------- */

static cJSON *k_session(void *ctx, const char *ns, const char *name)
{
    struct sapi_kube *k = ctx;
    return controller_cached(k->cfg.ctl, CONTROLLER_SESSIONS, ns, name);
}

struct each_ctx {
    const char *ns;
    int (*fn)(void *, const cJSON *);
    void *fctx;
};

static int each_one(void *ctx, const cJSON *s)
{
    struct each_ctx *e = ctx;
    const char *ns = str_at(json_get(s, "metadata"), "namespace", NULL);
    if (*e->ns && (!ns || strcmp(ns, e->ns) != 0))
        return 0;
    return e->fn(e->fctx, s);
}

static void k_each_session(void *ctx, const char *ns, int (*fn)(void *, const cJSON *), void *fctx)
{
    struct sapi_kube *k = ctx;
    struct each_ctx e = {ns, fn, fctx};
    controller_each_cached(k->cfg.ctl, CONTROLLER_SESSIONS, each_one, &e);
}

/* ---- the sandbox, or a viewer ------------------------------------------------- */

static char *secret_token(struct sapi_kube *k, const char *ns, const char *session)
{
    char *name = children_name(session, "sandbox-token");
    cJSON *sec = controller_cached(k->cfg.ctl, CONTROLLER_SECRETS, ns, name);
    if (sec && !json_get(sec, "data")) {
        /* the operator's cache keeps no Secret's data: read it (a user's
         * request for files, not every reconcile) */
        static const struct kgvr secrets = {"", "v1", "secrets"};
        cJSON_Delete(sec);
        sec = NULL;
        struct kclient *kc = client_get(k);
        struct kclient_err ke = {0};
        if (kclient_get(kc, &secrets, ns, name, &sec, &ke) != 0)
            sec = NULL;
        client_put(k, kc);
    }
    free(name);
    const char *b = str_at(json_get(sec, "data"), "token", NULL);
    char *tok = NULL;
    unsigned char *raw = NULL;
    size_t n = 0;
    if (b && base64_decode(b, strlen(b), &raw, &n) == 0) {
        while (n && (raw[n - 1] == '\n' || raw[n - 1] == ' '))
            n--;
        tok = xmalloc(n + 1);
        memcpy(tok, raw, n);
        tok[n] = 0;
        explicit_bzero(raw, n);
        if (strlen(tok) != n || n == 0) {
            free(tok);
            tok = NULL;
        }
    }
    free(raw);
    cJSON_Delete(sec);
    return tok;
}

static bool ready(const cJSON *pod)
{
    const cJSON *c;
    if (json_get(json_get(pod, "metadata"), "deletionTimestamp"))
        return false;
    const char *ph = str_at(json_get(pod, "status"), "phase", NULL);
    if (!ph || strcmp(ph, "Running") != 0)
        return false;
    cJSON_ArrayForEach(c, json_get(json_get(pod, "status"), "conditions"))
    {
        if (str_at(c, "type", NULL) && strcmp(str_at(c, "type", NULL), "Ready") == 0)
            return str_at(c, "status", NULL) && strcmp(str_at(c, "status", NULL), "True") == 0;
    }
    return false;
}

struct viewer_scan {
    const char *uid;
    char *addr;    /* a ready viewer pod's address */
    bool pending;  /* a viewer pod that is not ready yet (starting) */
};

static int scan_viewer(void *ctx, const cJSON *pod)
{
    struct viewer_scan *v = ctx;
    const cJSON *l = json_get(json_get(pod, "metadata"), "labels");
    const char *uid = str_at(l, CHILDREN_LABEL_SESSION_UID, NULL);
    const char *role = str_at(l, CHILDREN_LABEL_ROLE, NULL);
    if (!uid || !role || strcmp(uid, v->uid) != 0 || strcmp(role, "viewer") != 0)
        return 0;
    const char *ph = str_at(json_get(pod, "status"), "phase", NULL);
    const char *ip = str_at(json_get(pod, "status"), "podIP", NULL);
    if (ready(pod) && ip && *ip) {
        free(v->addr);
        v->addr = xasprintf("%s:%d", ip, SANDBOX_PORT);
        return 1;
    }
    if (!json_get(json_get(pod, "metadata"), "deletionTimestamp") &&
        (!ph || strcmp(ph, "Pending") == 0 || strcmp(ph, "Running") == 0))
        v->pending = true;
    return 0;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int k_sandbox(void *ctx, const cJSON *session0, bool viewer, char **ret_addr,
                     char **ret_token, struct tern_err *err)
{
    struct sapi_kube *k = ctx;
    const cJSON *m0 = json_get(session0, "metadata");
    const char *ns = str_at(m0, "namespace", NULL), *name = str_at(m0, "name", NULL);
    if (!ns || !name)
        return err_set(err, TERN_EINVALID, "a session without name or namespace");
    long deadline = now_ms() + TERN_SAPI_VIEWER_WAIT_MS;
    int rc = 0;
    cJSON *s = NULL;
    for (bool created = false;; nap_ms(200)) {
        cJSON_Delete(s);
        s = controller_cached(k->cfg.ctl, CONTROLLER_SESSIONS, ns, name);
        const char *uid = str_at(json_get(s, "metadata"), "uid", NULL);
        if (!s || !uid) {
            rc = err_set(err, TERN_ENOTFOUND, "the session is gone");
            break;
        }
        const cJSON *sb = json_get(json_get(s, "status"), "sandbox");
        const char *addr = str_at(sb, "address", NULL);
        if (cJSON_IsTrue(json_get(sb, "ready")) && addr && *addr) {
            *ret_addr = xstrdup(addr);
            break;
        }
        if (!viewer) {
            rc = err_set(err, TERN_ENOTFOUND, "the session has no running sandbox");
            break;
        }
        struct viewer_scan v = {.uid = uid};
        controller_each_cached(k->cfg.ctl, CONTROLLER_PODS, scan_viewer, &v);
        if (v.addr) {
            *ret_addr = v.addr;
            break;
        }
        pthread_mutex_lock(&k->mu);
        /* one viewer at a time per session: another request may be making it */
        long *since = kmap_get(k->creating, uid);
        bool fresh = since && now_ms() - *since < TERN_SAPI_VIEWER_WAIT_MS;
        bool make = !v.pending && !fresh && !created;
        if (make) {
            long *t = since ? since : xmalloc(sizeof *t);
            *t = now_ms();
            if (!since)
                kmap_put(k->creating, uid, t);
        }
        pthread_mutex_unlock(&k->mu);
        if (make) {
            struct session_spec *spec = NULL;
            struct tern_err se = {0};
            if (session_spec_parse(s, &spec, &se) != 0) {
                rc = err_set(err, TERN_EINVALID, "the session's spec: %s", se.msg);
                break;
            }
            cJSON *job = children_viewer_job(spec, k->cfg.children);
            session_spec_free(spec);
            static const struct kgvr jobs = {"batch", "v1", "jobs"};
            struct kclient *kc = client_get(k);
            struct kclient_err ke = {0};
            rc = kclient_create(kc, &jobs, ns, job, NULL, &ke);
            client_put(k, kc);
            cJSON_Delete(job);
            if (rc) {
                err_set(err, rc, "creating the file viewer: %s", ke.e.msg);
                break;
            }
            created = true;
        }
        if (now_ms() > deadline) {
            rc = err_set(err, TERN_ETIMEOUT,
                         "the session's sandbox is parked and its file viewer was not ready "
                         "within %d s",
                         TERN_SAPI_VIEWER_WAIT_MS / 1000);
            break;
        }
    }
    if (rc == 0) {
        *ret_token = secret_token(k, ns, name);
        if (!*ret_token) {
            free(*ret_addr);
            *ret_addr = NULL;
            rc = err_set(err, TERN_ENOTFOUND, "the session's sandbox token is not there");
        }
    }
    cJSON_Delete(s);
    return rc;
}

/* ---- trust and the APIService ------------------------------------------------ */

/* A ConfigMap value that is a JSON list of strings, as a NULL-terminated
 * array (owned), or NULL. */
static char **string_list(const char *text)
{
    cJSON *j = NULL;
    if (!text || json_parse(text, strlen(text), &j, NULL) != 0 || !cJSON_IsArray(j)) {
        cJSON_Delete(j);
        return NULL;
    }
    size_t n = (size_t)cJSON_GetArraySize(j), i = 0;
    char **v = xcalloc(n + 1, sizeof *v);
    const cJSON *it;
    cJSON_ArrayForEach(it, j)
    {
        if (cJSON_IsString(it) && i < 64)
            v[i++] = xstrdup(it->valuestring);
    }
    cJSON_Delete(j);
    return v;
}

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static int refresh_trust(struct sapi_kube *k, struct tern_err *err)
{
    static const struct kgvr cms = {"", "v1", "configmaps"};
    struct kclient *kc = client_get(k);
    cJSON *cm = NULL;
    struct kclient_err ke = {0};
    int rc = kclient_get(kc, &cms, "kube-system", "extension-apiserver-authentication", &cm, &ke);
    client_put(k, kc);
    if (rc)
        return err_set(err, rc, "kube-system/extension-apiserver-authentication: %s", ke.e.msg);
    const cJSON *d = json_get(cm, "data");
    const char *ca = str_at(d, "requestheader-client-ca-file", NULL);
    if (!ca) {
        cJSON_Delete(cm);
        return err_set(err, TERN_EINVALID, "extension-apiserver-authentication has no "
                                           "requestheader-client-ca-file (the API server runs "
                                           "without --requestheader-client-ca-file)");
    }
    char **allowed = string_list(str_at(d, "requestheader-allowed-names", NULL));
    char **uh = string_list(str_at(d, "requestheader-username-headers", NULL));
    char **gh = string_list(str_at(d, "requestheader-group-headers", NULL));
    char **ep = string_list(str_at(d, "requestheader-extra-headers-prefix", NULL));
    struct sapi_trust t = {.ca_pem = ca,
                           .allowed_names = (const char *const *)allowed,
                           .user_header = uh && uh[0] ? uh[0] : NULL,
                           .group_header = gh && gh[0] ? gh[0] : NULL,
                           .extra_prefix = ep && ep[0] ? ep[0] : NULL};
    rc = sapi_set_trust(k->server, &t, err);
    strv_free(allowed);
    strv_free(uh);
    strv_free(gh);
    strv_free(ep);
    cJSON_Delete(cm);
    return rc;
}

static int sync_apiservice(struct sapi_kube *k, struct tern_err *err)
{
    if (!k->ca_file)
        return 0;
    FILE *f = fopen(k->ca_file, "re");
    if (!f)
        return err_set(err, TERN_EINVALID, "%s: %s", k->ca_file, strerror(errno));
    char *pem = xmalloc(65537);
    size_t n = fread(pem, 1, 65536, f);
    fclose(f);
    pem[n] = 0;
    char *b64 = base64_encode(pem, n);
    free(pem);
    static const struct kgvr as = {"apiregistration.k8s.io", "v1", "apiservices"};
    struct kclient *kc = client_get(k);
    cJSON *obj = NULL;
    struct kclient_err ke = {0};
    int rc = kclient_get(kc, &as, NULL, k->apiservice, &obj, &ke);
    if (rc == 0 && !(str_at(json_get(obj, "spec"), "caBundle", NULL) &&
                     strcmp(str_at(json_get(obj, "spec"), "caBundle", NULL), b64) == 0)) {
        char *patch = xasprintf("{\"spec\":{\"caBundle\":\"%s\"}}", b64);
        rc = kclient_patch(kc, &as, NULL, k->apiservice, KCLIENT_PATCH_MERGE, patch,
                           strlen(patch), NULL, NULL, &ke);
        free(patch);
    }
    client_put(k, kc);
    cJSON_Delete(obj);
    free(b64);
    if (rc)
        return err_set(err, rc, "APIService %s: %s", k->apiservice, ke.e.msg);
    return 0;
}

static void *refresh_main(void *arg)
{
    struct sapi_kube *k = arg;
    int tick = 0;
    while (!atomic_load(&k->stop)) {
        nap_ms(250);
        if (++tick < 120) /* 30 s */
            continue;
        tick = 0;
        struct tern_err e = {0};
        if (refresh_trust(k, &e) && k->cfg.on_error)
            k->cfg.on_error(k->cfg.ctx, "front-proxy trust", &e);
        if (sync_apiservice(k, &e) && k->cfg.on_error)
            k->cfg.on_error(k->cfg.ctx, "APIService caBundle", &e);
    }
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------ */

int sapi_kube_new(const struct sapi_kube_config *cfg, struct sapi_kube **ret,
                  struct tern_err *err)
{
    if (!cfg->kube || !cfg->ctl || !cfg->children)
        return err_set(err, TERN_EINVALID, "stream API: kubeconfig, controller, children needed");
    struct sapi_kube *k = xcalloc(1, sizeof *k);
    k->cfg = *cfg;
    k->children = *cfg->children;
    k->cfg.children = &k->children;
    k->ca_file = cfg->ca_file && *cfg->ca_file ? xstrdup(cfg->ca_file) : NULL;
    k->apiservice = xstrdup(cfg->apiservice && *cfg->apiservice ? cfg->apiservice
                                                                : SAPI_VERSION "." SAPI_GROUP);
    pthread_mutex_init(&k->mu, NULL);
    k->sar = kmap_new();
    k->creating = kmap_new();
    *ret = k;
    return 0;
}

static int k_artifact_sets(void *ctx, const char *ns, const char *name, const char *configmap,
                           cJSON **ret, struct tern_err *err)
{
    struct sapi_kube *k = ctx;
    static const struct kgvr cms = {"", "v1", "configmaps"};
    if (configmap) {
        struct kclient *kc = client_get(k);
        struct kclient_err ke = {0};
        cJSON *cm = NULL;
        int rc = kclient_get(kc, &cms, ns, configmap, &cm, &ke);
        client_put(k, kc);
        if (rc && rc != TERN_ENOTFOUND)
            return err_set(err, rc, "reading the artifact store: %s", ke.e.msg);
        *ret = cJSON_CreateArray();
        const char *role = str_at(json_get(json_get(cm, "metadata"), "labels"),
                                  CHILDREN_LABEL_ROLE, NULL);
        if (cm && role && strcmp(role, ARTSTORE_ROLE) == 0)
            cJSON_AddItemToArray(*ret, cm);
        else
            cJSON_Delete(cm);
        return 0;
    }
    char *sel = xasprintf("%s=%s,%s=%s", CHILDREN_LABEL_ROLE, ARTSTORE_ROLE,
                          CHILDREN_LABEL_SESSION, name);
    struct kclient_list_opts o = {.label_selector = sel, .limit = TERN_ARTIFACTS_MAX_SETS};
    struct kclient *kc = client_get(k);
    struct kclient_err ke = {0};
    cJSON *list = NULL;
    int rc = kclient_list(kc, &cms, ns, &o, &list, &ke);
    client_put(k, kc);
    free(sel);
    if (rc) {
        cJSON_Delete(list);
        return err_set(err, rc, "listing the artifact store: %s", ke.e.msg);
    }
    cJSON *items = cJSON_DetachItemFromObjectCaseSensitive(list, "items");
    cJSON_Delete(list);
    *ret = cJSON_IsArray(items) ? items : (cJSON_Delete(items), cJSON_CreateArray());
    return 0;
}

void sapi_kube_backend(struct sapi_kube *k, struct etcd *etcd, struct sapi_backend *ret)
{
    *ret = (struct sapi_backend){.etcd = etcd,
                                 .authorize = k_authorize,
                                 .session = k_session,
                                 .each_session = k_each_session,
                                 .sandbox = k_sandbox,
                                 .artifact_sets = k_artifact_sets,
                                 .ctx = k};
}

int sapi_kube_start(struct sapi_kube *k, struct sapi *s, struct tern_err *err)
{
    k->server = s;
    struct tern_err e2 = {0};
    int rc = refresh_trust(k, err);
    if (sync_apiservice(k, &e2) && k->cfg.on_error)
        k->cfg.on_error(k->cfg.ctx, "APIService caBundle", &e2);
    k->th_started = pthread_create(&k->th, NULL, refresh_main, k) == 0;
    return rc;
}

void sapi_kube_free(struct sapi_kube *k)
{
    if (!k)
        return;
    atomic_store(&k->stop, true);
    if (k->th_started)
        pthread_join(k->th, NULL);
    for (size_t i = 0; i < k->npool; i++)
        kclient_free(k->pool[i]);
    kmap_each(k->sar, free_answer, NULL);
    kmap_free(k->sar);
    kmap_each(k->creating, free_answer, NULL);
    kmap_free(k->creating);
    pthread_mutex_destroy(&k->mu);
    free(k->ca_file);
    free(k->apiservice);
    free(k);
}
