/* nodewire.c - tern-node's kubelet, provisioner and kubelet endpoint over
 * a real API server (see nodewire.h). */
#include "nodeagent/nodewire.h"

#include "base/limits.h"
#include "base/mem.h"
#include "base/num.h"
#include "devctl/kobj.h"
#include "devctl/objrest.h"
#include "http/httpc.h"
#include "json/json.h"
#include "kube/kclient.h"
#include "kube/ktime.h"
#include "kube/kubeconfig.h"
#include "kubelet/devrun.h"
#include "nodeagent/kubeletapi.h"
#include "nodeagent/localpv.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One connection to the API server. */
struct link {
    struct objrest_https *https;
    struct objrest *rest;
    struct objstore store;
};

struct nodewire {
    char *node, *voldir, *version, *api_host;
    struct kubeconfig *kc;   /* kept for the kubelet's watch */
    struct kclient *watch;   /* the kubelet's wait: a watch of its pods */
    pthread_t pods_thread;
    bool pods_started;
    pthread_mutex_t pods_mu;
    pthread_cond_t pods_cv;  /* CLOCK_MONOTONIC */
    int64_t pods_rv;         /* the last change to this node's pods seen */
    bool pods_inited;
    atomic_bool cancel;
    struct link kubelet, pv, api;
    struct devrun *run;
    struct kubeletapi *kapi;
    struct localpv *pv_prov;
    void (*on_error)(void *ctx, const char *what, const char *msg);
    void *on_error_ctx;
};

static void kubelet_error(void *ctx, const char *msg)
{
    struct nodewire *w = ctx;
    if (w->on_error)
        w->on_error(w->on_error_ctx, "kubelet", msg);
}

static int link_open(struct link *l, const struct kubeconfig *kc, struct tern_err *err)
{
    int rc = objrest_https_from_kubeconfig(kc, &l->https, err);
    if (rc)
        return rc;
    struct objrest_transport t = objrest_https_transport(l->https);
    l->rest = objrest_new(&t);
    l->store = objrest_objstore(l->rest);
    return 0;
}

static void link_close(struct link *l)
{
    objrest_free(l->rest);
    objrest_https_free(l->https);
    *l = (struct link){0};
}

/* ---- the API calls the kubelet and its endpoint need ---- */

/* TokenRequest for the pod's service account, bound to the pod, with the
 * audience and lifetime of its projected token source (the API server's
 * defaults when unset). */
static int request_token(void *ctx, const cJSON *pod, const char *sa_name, char **ret_token,
                         struct tern_err *err)
{
    struct nodewire *w = ctx;
    const char *ns = kobj_str(pod, "metadata.namespace");
    const cJSON *v, *src, *proj = NULL;
    cJSON_ArrayForEach(v, kobj_at(pod, "spec.volumes"))
        cJSON_ArrayForEach(src, kobj_at(v, "projected.sources"))
            if (!proj && kobj_has(src, "serviceAccountToken"))
                proj = kobj_at(src, "serviceAccountToken");
    cJSON *tr = cJSON_CreateObject();
    json_add_string(tr, "apiVersion", "authentication.k8s.io/v1");
    json_add_string(tr, "kind", "TokenRequest");
    cJSON *aud = cJSON_CreateArray();
    const char *a = kobj_str(proj, "audience");
    if (a && *a)
        cJSON_AddItemToArray(aud, cJSON_CreateString(a));
    kobj_set_item(tr, "spec.audiences", aud);
    kobj_set_int(tr, "spec.expirationSeconds", kobj_int(proj, "expirationSeconds", 3607));
    cJSON *ref = kobj_obj(tr, "spec.boundObjectRef");
    json_add_string(ref, "apiVersion", "v1");
    json_add_string(ref, "kind", "Pod");
    json_add_string(ref, "name", kobj_str(pod, "metadata.name"));
    json_add_string(ref, "uid", kobj_str(pod, "metadata.uid"));
    char *ens = httpc_escape(ns ? ns : "default"), *esa = httpc_escape(sa_name);
    char *path = xasprintf("/api/v1/namespaces/%s/serviceaccounts/%s/token", ens, esa);
    free(ens);
    free(esa);
    cJSON *resp = NULL;
    int rc = objrest_call(w->kubelet.rest, "POST", path, tr, &resp, err);
    free(path);
    cJSON_Delete(tr);
    const char *tok = kobj_str(resp, "status.token");
    if (rc == 0 && (!tok || !*tok || strlen(tok) > TERN_NODE_MAX_TOKEN))
        rc = err_set(err, TERN_EPARSE, "TokenRequest: no usable status.token in the answer");
    if (rc == 0)
        *ret_token = xstrdup(tok);
    cJSON_Delete(resp);
    return rc;
}

static int authorize(void *ctx, const char *user, const char *const *groups, size_t ngroups,
                     const char *verb, const char *subresource, struct tern_err *err)
{
    struct nodewire *w = ctx;
    cJSON *sar = cJSON_CreateObject();
    json_add_string(sar, "apiVersion", "authorization.k8s.io/v1");
    json_add_string(sar, "kind", "SubjectAccessReview");
    kobj_set_str(sar, "spec.user", user);
    cJSON *g = cJSON_CreateArray();
    for (size_t i = 0; i < ngroups; i++)
        cJSON_AddItemToArray(g, cJSON_CreateString(groups[i]));
    kobj_set_item(sar, "spec.groups", g);
    cJSON *ra = kobj_obj(sar, "spec.resourceAttributes");
    json_add_string(ra, "verb", verb);
    json_add_string(ra, "resource", "nodes");
    json_add_string(ra, "subresource", subresource);
    json_add_string(ra, "name", w->node);
    cJSON *resp = NULL;
    int rc = objrest_call(w->api.rest, "POST",
                          "/apis/authorization.k8s.io/v1/subjectaccessreviews", sar, &resp, err);
    cJSON_Delete(sar);
    if (rc == 0 && !kobj_bool(resp, "status.allowed", false))
        rc = err_set(err, TERN_EAUTH, "%s", kobj_str(resp, "status.reason")
                                                ? kobj_str(resp, "status.reason")
                                                : "not allowed");
    cJSON_Delete(resp);
    return rc;
}

static int get_pod(void *ctx, const char *ns, const char *name, cJSON **ret, struct tern_err *err)
{
    struct nodewire *w = ctx;
    cJSON *pod = NULL;
    int rc = objstore_get(&w->api.store, "v1/pods", ns, name, &pod, err);
    if (rc == 0 && strcmp(kobj_str(pod, "spec.nodeName") ? kobj_str(pod, "spec.nodeName") : "",
                          w->node) != 0)
        rc = err_set(err, TERN_ENOTFOUND, "pod %s/%s does not run on this node", ns, name);
    if (rc == 0)
        *ret = pod;
    else
        cJSON_Delete(pod);
    return rc;
}

/* ---- the kubelet's wait: a watch of this node's pods ---- */

/* A thread keeps a watch of this node's pods open and publishes the
 * resourceVersion of the last change it saw; the kubelet's wait ends as
 * soon as that passes the kubelet's last list, or at its deadline (the
 * earliest time-driven work, a probe say), whichever is first. (A watch
 * opened per wait could not end before its whole second, so a wait of less
 * than that slept through the pods that came meanwhile.) */
static int64_t event_rv(const cJSON *obj)
{
    const char *v = kobj_str(obj, "metadata.resourceVersion");
    int64_t rv = 0;
    return v && num_parse_i64(v, &rv) == 0 ? rv : 0;
}

static void saw(struct nodewire *w, int64_t rv)
{
    pthread_mutex_lock(&w->pods_mu);
    if (rv > w->pods_rv)
        w->pods_rv = rv;
    pthread_cond_broadcast(&w->pods_cv);
    pthread_mutex_unlock(&w->pods_mu);
}

static int pod_event(void *ctx, enum kwatch_type type, cJSON *obj)
{
    if (type != KWATCH_BOOKMARK && type != KWATCH_ERROR)
        saw(ctx, event_rv(obj));
    cJSON_Delete(obj);
    return 0;
}

static void *pods_main(void *arg)
{
    struct nodewire *w = arg;
    static const struct kgvr pods = {"", "v1", "pods"};
    char *sel = xasprintf("spec.nodeName=%s", w->node);
    while (!atomic_load(&w->cancel)) {
        /* from the list's version: everything after it is an event */
        cJSON *l = NULL;
        struct kclient_list_opts lo = {.field_selector = sel, .limit = 1};
        int rc = kclient_list(w->watch, &pods, NULL, &lo, &l, NULL);
        int64_t rv = rc == 0 ? event_rv(l) : 0;
        cJSON_Delete(l);
        if (rv > 0) {
            saw(w, rv); /* what happened while no watch ran wakes the kubelet too */
            char rvs[32];
            snprintf(rvs, sizeof rvs, "%lld", (long long)rv);
            struct kclient_list_opts o = {
                .field_selector = sel, .resource_version = rvs, .timeout_seconds = 300};
            rc = kclient_watch(w->watch, &pods, NULL, &o, pod_event, w, NULL);
        }
        if (rc && !atomic_load(&w->cancel)) { /* not a busy loop on a failing server */
            struct timespec pause = {0, 200 * 1000000L};
            nanosleep(&pause, NULL);
        }
    }
    free(sel);
    return NULL;
}

static int watch_wait(void *ctx, int64_t after, int timeout_ms)
{
    struct nodewire *w = ctx;
    struct timespec dl;
    ktime_deadline(timeout_ms, &dl);
    pthread_mutex_lock(&w->pods_mu);
    while (w->pods_rv <= after)
        if (pthread_cond_timedwait(&w->pods_cv, &w->pods_mu, &dl) == ETIMEDOUT)
            break;
    bool changed = w->pods_rv > after;
    pthread_mutex_unlock(&w->pods_mu);
    return changed ? 0 : TERN_ETIMEOUT;
}

/* ---- the provisioner ---- */

static void provisioner_error(void *ctx, const char *msg)
{
    struct nodewire *w = ctx;
    if (w->on_error)
        w->on_error(w->on_error_ctx, "provisioner", msg);
}

/* ---- start / stop ---- */

/* host and port of "https://host:port[/...]". */
static int server_host_port(const char *server, char **ret_host, int *ret_port,
                            struct tern_err *err)
{
    const char *p = strstr(server, "://");
    p = p ? p + 3 : server;
    const char *end = p + strcspn(p, "/");
    const char *colon = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == ':')
            colon = q;
    int64_t port = 443;
    if (colon && num_parse_i64n(colon + 1, (size_t)(end - colon - 1), &port) != 0)
        return err_set(err, TERN_EINVALID, "kubeconfig server %s: bad port", server);
    const char *he = colon ? colon : end;
    if (*p == '[' && he > p + 1 && he[-1] == ']') { /* IPv6 */
        p++;
        he--;
    }
    *ret_host = xstrndup(p, (size_t)(he - p));
    *ret_port = (int)port;
    return 0;
}

int nodewire_start(const struct nodewire_cfg *cfg, struct nodewire **ret, struct tern_err *err)
{
    struct kubeconfig *kc = NULL;
    int rc = kubeconfig_load_file(cfg->kubeconfig, NULL, &kc, err);
    if (rc)
        return err_wrap(err, rc, "--kubeconfig %s", cfg->kubeconfig);
    struct nodewire *w = xcalloc(1, sizeof *w);
    w->node = xstrdup(cfg->node);
    w->on_error = cfg->on_error;
    w->on_error_ctx = cfg->on_error_ctx;
    w->voldir = xasprintf("%s/volumes", cfg->dir);
    int api_port = 0;
    rc = server_host_port(kc->server, &w->api_host, &api_port, err);
    if (rc == 0)
        rc = link_open(&w->kubelet, kc, err);
    if (rc == 0)
        rc = link_open(&w->pv, kc, err);
    if (rc == 0)
        rc = link_open(&w->api, kc, err);
    char *ca = kc->ca_pem ? xstrndup(kc->ca_pem, kc->ca_pem_len) : NULL;
    w->kc = kc;
    w->watch = kclient_new(kc, NULL);
    kclient_set_cancel(w->watch, &w->cancel);
    pthread_mutex_init(&w->pods_mu, NULL);
    ktime_cond_init(&w->pods_cv);
    w->pods_inited = true;
    if (rc)
        goto fail;
    /* the version the API server reports: the kubelet claims that minor */
    cJSON *ver = NULL;
    rc = objrest_call(w->api.rest, "GET", "/version", NULL, &ver, err);
    if (rc) {
        cJSON_Delete(ver);
        err_wrap(err, rc, "GET /version");
        goto fail;
    }
    const char *gv = kobj_str(ver, "gitVersion");
    w->version = xasprintf("%s-tern", gv && strlen(gv) < 64 ? gv : "v0.0.0");
    cJSON_Delete(ver);
    /* a node may not list namespaces: its wait watches its own pods */
    if (pthread_create(&w->pods_thread, NULL, pods_main, w) != 0) {
        rc = err_set(err, -EAGAIN, "cannot start the pods' watch thread");
        goto fail;
    }
    w->pods_started = true;
    objrest_set_wait_fn(w->kubelet.rest, watch_wait, w);
    char *sel = xasprintf("spec.nodeName=%s", cfg->node);
    objrest_set_list_selector(w->kubelet.rest, "v1/pods", sel); /* nor other nodes' pods */
    free(sel);

    struct kubeletapi_cfg acfg = {.listen = cfg->listen,
                                  .cert_file = cfg->cert_file,
                                  .key_file = cfg->key_file,
                                  .client_ca_file = cfg->client_ca_file,
                                  .dir = cfg->dir,
                                  .node = cfg->node,
                                  .authorize = authorize,
                                  .get_pod = get_pod,
                                  .ctx = w};
    rc = kubeletapi_start(&acfg, &w->kapi, err);
    if (rc)
        goto fail;
    struct devrun_cfg dc = {
        .store = w->kubelet.store,
        .kubelet_only = true,
        .kubelet = {.dir = cfg->dir,
                    .node_name = cfg->node,
                    .scheduled_only = true,
                    .token_fn = request_token,
                    .token_ctx = w,
                    .kubelet_port = kubeletapi_port(w->kapi),
                    .version = w->version,
                    .api_host = w->api_host,
                    .api_port = api_port,
                    .ca_pem = ca,
                    .bin_dir = cfg->bin_dir,
                    .pod_network = cfg->pod_network,
                    .netpol_unenforced = cfg->netpol_unenforced,
                    .on_error = kubelet_error,
                    .on_error_ctx = w},
        .period_ms = 1000,
    };
    rc = devrun_start(&dc, &w->run, err);
    if (rc)
        goto fail;
    struct localpv_cfg pcfg = {.root = w->voldir};
    rc = localpv_start(kc, &w->pv.store, &pcfg, provisioner_error, w, &w->pv_prov, err);
    if (rc)
        goto fail;
    /* registered once the Node exists */
    int timeout = cfg->register_timeout_ms > 0 ? cfg->register_timeout_ms : 30000;
    for (int waited = 0;; waited += 100) {
        cJSON *n = NULL;
        struct tern_err ge = {0};
        int g = objstore_get(&w->api.store, "v1/nodes", "", cfg->node, &n, &ge);
        cJSON_Delete(n);
        if (g == 0)
            break;
        if (waited >= timeout) {
            rc = err_set(err, g, "node %s not registered within %d ms: %s", cfg->node, timeout,
                         ge.msg);
            goto fail;
        }
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    free(ca);
    *ret = w;
    return 0;
fail:
    free(ca);
    nodewire_stop(w, 0);
    return rc;
}

int nodewire_port(const struct nodewire *w)
{
    return kubeletapi_port(w->kapi);
}

void nodewire_stop(struct nodewire *w, int grace_ms)
{
    if (!w)
        return;
    kubeletapi_stop(w->kapi);
    atomic_store(&w->cancel, true); /* ends the pods' watch at once */
    if (w->pods_started)
        pthread_join(w->pods_thread, NULL);
    localpv_stop(w->pv_prov);
    devrun_stop(w->run, grace_ms);
    link_close(&w->kubelet);
    link_close(&w->pv);
    link_close(&w->api);
    kclient_free(w->watch);
    if (w->pods_inited) {
        pthread_cond_destroy(&w->pods_cv);
        pthread_mutex_destroy(&w->pods_mu);
    }
    kubeconfig_free(w->kc);
    free(w->node);
    free(w->voldir);
    free(w->version);
    free(w->api_host);
    free(w);
}
