/* kubelet.c - the local kubelet (kubelet.h): its lifecycle (new, free,
 * shutdown), the sync pass over the store's pods (binding unbound pods, one
 * pod's sync ending in its status write and, once a deleted pod's
 * containers are gone, the final delete; forgetting pods gone from the
 * store), the run loop, and the per-pass cache of namespace objects. The
 * Node, the pod records, containers and processes are in the other
 * kubelet_*.c files (kubelet_internal.h). */
#include "kubelet/kubelet_internal.h"

#include "base/mem.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t kubelet__now_real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- lifecycle ---- */

int kubelet_new(const struct objstore *store, const struct kubelet_cfg *cfg, struct kubelet **ret,
                struct tern_err *err)
{
    struct kubelet *k = xcalloc(1, sizeof *k);
    k->s = store;
    if (objstore_has_changes(store)) {
        const char *np[] = {"networking.k8s.io/v1/networkpolicies"};
        k->npcache = objcache_new(store, np, 1, OBJCACHE_RESYNC_S);
    }
    k->dir = xstrdup(cfg->dir);
    k->node = xstrdup(cfg->node_name ? cfg->node_name : "tern-dev");
    k->version = xstrdup(cfg->version ? cfg->version : TERN_KUBELET_VERSION);
    k->scheduled_only = cfg->scheduled_only;
    k->token_fn = cfg->token_fn;
    k->token_ctx = cfg->token_ctx;
    k->kubelet_port = cfg->kubelet_port;
    k->on_error = cfg->on_error;
    k->on_error_ctx = cfg->on_error_ctx;
    k->api_host = cfg->api_host ? xstrdup(cfg->api_host) : NULL;
    k->api_port = cfg->api_port;
    k->ca_pem = cfg->ca_pem ? xstrdup(cfg->ca_pem) : NULL;
    k->bin_dir = cfg->bin_dir ? xstrdup(cfg->bin_dir) : NULL;
    k->bwrap = xstrdup(cfg->bwrap ? cfg->bwrap : "/usr/bin/bwrap");
    k->backoff = cfg->restart_backoff_ms > 0 ? cfg->restart_backoff_ms : 10000;
    k->backoff_max = cfg->restart_backoff_max_ms > 0 ? cfg->restart_backoff_max_ms : 300000;
    if (cfg->sa_key) {
        memcpy(k->sa_key, cfg->sa_key, SATOKEN_KEY_LEN);
        k->have_key = true;
    }
    uint32_t h = 2166136261u;
    for (const char *c = k->dir; *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    k->ip_start = h % 65536u;
    k->podsdir = xasprintf("%s/pods", k->dir);
    k->voldir = xasprintf("%s/volumes", k->dir);
    int rc = fsutil_mkdirs(k->podsdir, 0755, err);
    if (rc == 0)
        rc = fsutil_mkdirs(k->voldir, 0755, err);
    if (rc) {
        kubelet_free(k);
        return rc;
    }
    if (!cfg->no_cgroups) {
        k->cgroups = kubelet__cg_usable();
    }
    k->ip_bin = xstrdup(cfg->ip_bin ? cfg->ip_bin : "/usr/sbin/ip");
    k->iptables_bin = xstrdup(cfg->iptables_bin ? cfg->iptables_bin : "/usr/sbin/iptables");
    k->iptables_restore_bin = xasprintf("%s-restore", k->iptables_bin);
    k->netpol_off = cfg->netpol_unenforced;
    const char *net = cfg->pod_network ? cfg->pod_network : "10.213.0.0/16";
    unsigned char nb[4];
    char nbuf[20];
    const char *slash = strchr(net, '/');
    if (!slash || strcmp(slash, "/16") != 0 || (size_t)(slash - net) >= sizeof nbuf) {
        err_set(err, TERN_EINVALID, "pod network %s: must be an IPv4 /16", net);
        kubelet_free(k);
        return TERN_EINVALID;
    }
    memcpy(nbuf, net, (size_t)(slash - net));
    nbuf[slash - net] = '\0';
    if (inet_pton(AF_INET, nbuf, nb) != 1 || nb[2] || nb[3] || nb[0] == 127) {
        err_set(err, TERN_EINVALID, "pod network %s: must be an IPv4 /16 outside 127/8", net);
        kubelet_free(k);
        return TERN_EINVALID;
    }
    k->podnet = ((uint32_t)nb[0] << 24) | ((uint32_t)nb[1] << 16);
    kubelet__kill_leftovers(k);
    kubelet__net_init(k);
    *ret = k;
    return 0;
}

static void cache_clear(struct kubelet *k)
{
    free(k->cache_uid);
    free(k->cache_ns);
    cJSON_Delete(k->cms);
    cJSON_Delete(k->secrets);
    cJSON_Delete(k->pvcs);
    cJSON_Delete(k->pvs);
    cJSON_Delete(k->netpols);
    k->cache_uid = k->cache_ns = NULL;
    k->cms = k->secrets = k->pvcs = k->pvs = k->netpols = NULL;
}

void kubelet_free(struct kubelet *k)
{
    if (!k)
        return;
    for (size_t i = 0; i < k->npods; i++)
        kubelet__free_pod(k, k->pods[i]);
    free(k->pods);
    cache_clear(k);
    objcache_free(k->npcache);
    free(k->dir);
    free(k->node);
    free(k->node_uid);
    free(k->version);
    free(k->api_host);
    free(k->ca_pem);
    free(k->bin_dir);
    free(k->bwrap);
    free(k->podsdir);
    free(k->voldir);
    free(k->ip_bin);
    free(k->iptables_bin);
    free(k->iptables_restore_bin);
    free(k);
}

/* ---- what a pod uses ---- */

static cJSON *list_items(struct kubelet *k, const char *gvr, const char *ns)
{
    cJSON *l = NULL;
    if (objstore_list(k->s, gvr, ns, &l, NULL) != 0)
        return cJSON_CreateArray();
    cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(l, "items");
    cJSON_Delete(l);
    return it ? it : cJSON_CreateArray();
}

/* The NetworkPolicies of ns: from the cache (references to its objects,
 * valid until its next sync) or, without one, a list of ns. */
static cJSON *netpols_of(struct kubelet *k, const char *ns)
{
    if (!k->npcache)
        return list_items(k, "networking.k8s.io/v1/networkpolicies", ns);
    cJSON *arr = cJSON_CreateArray();
    cJSON *it;
    cJSON_ArrayForEach(it, (cJSON *)kobj_at(objcache_list(k->npcache, 0), "items"))
    {
        const char *ins = kobj_str(it, "metadata.namespace");
        if (ins && strcmp(ins, ns) == 0)
            cJSON_AddItemReferenceToArray(arr, it);
    }
    return arr;
}

/* Adds the object gvr ns/name to arr unless it is there already or cannot
 * be read (a missing object is the pod's problem, reported by podplan). */
static void fetch_into(struct kubelet *k, cJSON *arr, const char *gvr, const char *ns,
                       const char *name)
{
    if (!name || !*name)
        return;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        const char *n = kobj_str(it, "metadata.name");
        if (n && strcmp(n, name) == 0)
            return;
    }
    cJSON *o = NULL;
    if (objstore_get(k->s, gvr, ns, name, &o, NULL) == 0)
        cJSON_AddItemToArray(arr, o);
}

static void fetch_env_refs(struct kubelet *k, const cJSON *pod, const char *ns)
{
    static const char *const lists[] = {"spec.initContainers", "spec.containers"};
    for (int l = 0; l < 2; l++) {
        const cJSON *c;
        cJSON_ArrayForEach(c, kobj_at(pod, lists[l]))
        {
            const cJSON *e;
            cJSON_ArrayForEach(e, kobj_at(c, "env"))
            {
                fetch_into(k, k->cms, "v1/configmaps", ns,
                           kobj_str(e, "valueFrom.configMapKeyRef.name"));
                fetch_into(k, k->secrets, "v1/secrets", ns,
                           kobj_str(e, "valueFrom.secretKeyRef.name"));
            }
            cJSON_ArrayForEach(e, kobj_at(c, "envFrom"))
            {
                fetch_into(k, k->cms, "v1/configmaps", ns, kobj_str(e, "configMapRef.name"));
                fetch_into(k, k->secrets, "v1/secrets", ns, kobj_str(e, "secretRef.name"));
            }
        }
    }
}

void kubelet__cache_pod(struct kubelet *k, const cJSON *pod)
{
    const char *uid = kobj_str(pod, "metadata.uid");
    const char *ns = kobj_str(pod, "metadata.namespace");
    ns = ns ? ns : "default";
    if (uid && k->cache_uid && strcmp(k->cache_uid, uid) == 0)
        return;
    bool same_ns = k->cache_ns && strcmp(k->cache_ns, ns) == 0;
    cJSON *netpols = same_ns ? k->netpols : NULL;
    k->netpols = NULL;
    cache_clear(k);
    k->cache_uid = uid ? xstrdup(uid) : NULL;
    k->cache_ns = xstrdup(ns);
    k->netpols = netpols ? netpols : netpols_of(k, ns);
    k->cms = cJSON_CreateArray();
    k->secrets = cJSON_CreateArray();
    k->pvcs = cJSON_CreateArray();
    k->pvs = cJSON_CreateArray();
    const cJSON *v;
    cJSON_ArrayForEach(v, kobj_at(pod, "spec.volumes"))
    {
        fetch_into(k, k->cms, "v1/configmaps", ns, kobj_str(v, "configMap.name"));
        fetch_into(k, k->secrets, "v1/secrets", ns, kobj_str(v, "secret.secretName"));
        fetch_into(k, k->pvcs, "v1/persistentvolumeclaims", ns,
                   kobj_str(v, "persistentVolumeClaim.claimName"));
        const cJSON *src;
        cJSON_ArrayForEach(src, kobj_at(v, "projected.sources"))
        {
            fetch_into(k, k->cms, "v1/configmaps", ns, kobj_str(src, "configMap.name"));
            fetch_into(k, k->secrets, "v1/secrets", ns, kobj_str(src, "secret.name"));
        }
    }
    fetch_env_refs(k, pod, ns);
    const cJSON *pvc;
    cJSON_ArrayForEach(pvc, k->pvcs)
        fetch_into(k, k->pvs, "v1/persistentvolumes", "", kobj_str(pvc, "spec.volumeName"));
}

/* ---- sync ---- */

static void first_start(struct kubelet *k, struct kpod *p, const cJSON *pod, struct kcont *c,
                        int64_t now_ms, struct tern_err *err, int *rc)
{
    int r = kubelet__start_container(k, p, pod, c, now_ms, err);
    if (r && !*rc)
        *rc = r;
}

static int sync_pod(struct kubelet *k, struct kpod *p, const cJSON *pod, int64_t now_ms,
                    struct tern_err *err)
{
    int rc = 0;
    kubelet__reap(k, p, pod, now_ms);
    bool deleting = kobj_deleting(pod);
    bool any_running = false;
    for (size_t i = 0; i < p->nc; i++)
        any_running |= p->c[i].pid > 0;

    if (deleting) {
        int64_t grace = kobj_int(pod, "metadata.deletionGracePeriodSeconds", 30);
        for (size_t i = 0; i < p->nc; i++) {
            struct kcont *c = &p->c[i];
            if (c->pid > 0)
                kubelet__stop_container(c, grace * 1000, now_ms);
            else
                c->ps.done = true;
        }
        if (any_running)
            goto status;
    } else if (!p->terminal) {
        struct tern_err perr = {0};
        int pr = kubelet__prepare(k, p, pod, &perr);
        if (pr) {
            for (size_t i = 0; i < p->nc; i++) {
                struct kcont *c = &p->c[i];
                c->ps.waiting_reason = "ContainerCreating";
                snprintf(c->wmsg, sizeof c->wmsg, "%s", perr.msg);
                c->ps.waiting_message = c->wmsg;
            }
        } else {
            /* the pod's network policy before its containers run and are
             * probed: the namespace starts denying everything, and a probe
             * whose answer that filter dropped waited its whole timeout */
            struct tern_err nerr = {0};
            int nr = kubelet__net_sync(k, p, pod, now_ms, &nerr);
            if (nr && !rc)
                rc = err_set(err, nr, "%s", nerr.msg);
            /* init containers in order, then the rest */
            bool inits_done = true;
            for (size_t i = 0; i < p->nc && inits_done; i++) {
                struct kcont *c = &p->c[i];
                if (!c->init)
                    continue;
                if (c->ps.state == PODSTATUS_TERMINATED && c->ps.term.exit_code == 0)
                    continue;
                inits_done = false;
                if (c->pid <= 0 && !c->ps.done && now_ms >= c->next_start_ms)
                    first_start(k, p, pod, c, now_ms, err, &rc);
            }
            for (size_t i = 0; i < p->nc && inits_done; i++) {
                struct kcont *c = &p->c[i];
                if (c->init || c->pid > 0 || c->ps.done || now_ms < c->next_start_ms)
                    continue;
                first_start(k, p, pod, c, now_ms, err, &rc);
            }
            kubelet__probes(k, p, pod, now_ms);
        }
    }
status:;
    struct podstatus_container *cs = xcalloc(p->nc ? p->nc : 1, sizeof *cs);
    for (size_t i = 0; i < p->nc; i++)
        cs[i] = p->c[i].ps;
    /* a pod of its own namespace has its address once that exists */
    bool ip_shown = p->ip[0] && (p->mode != NETPOL_NETNS || p->net_up);
    cJSON *st = podstatus_build(pod, cs, p->nc, ip_shown ? p->ip : NULL, "127.0.0.1",
                                p->prepared, now_ms / 1000);
    const char *phase = podstatus_phase(cs, p->nc);
    free(cs);
    bool terminal = !strcmp(phase, "Succeeded") || !strcmp(phase, "Failed");
    if (!kobj_equal(st, kobj_at(pod, "status"))) {
        cJSON *c = json_dup(pod);
        kobj_set_item(c, "status", st);
        st = NULL;
        int r = objstore_update_status(k->s, "v1/pods", p->ns, c, NULL, err);
        cJSON_Delete(c);
        if (r && r != TERN_ECONFLICT && r != TERN_ENOTFOUND && !rc)
            rc = r;
        if (r)
            goto out;
    }
    if (terminal && !p->terminal) {
        p->terminal = true;
        kubelet__net_teardown(k, p);
        kubelet__ip_free(k, p->ip);
    }
    if (deleting && !any_running && !p->final_delete) {
        struct objstore_delete_opts o = {.grace_seconds = 0, .uid = p->uid};
        int r = objstore_remove(k->s, "v1/pods", p->ns, p->name, &o, NULL, err);
        if (r == 0 || r == TERN_ENOTFOUND)
            p->final_delete = true;
        else if (r != TERN_ECONFLICT && !rc)
            rc = r;
    }
out:
    cJSON_Delete(st);
    return rc;
}

/* Whether pod's requests fit this node's allocatable (podplan_fits); if
 * not, its status says Unschedulable (written when it changes). Only for
 * the kubelet that is its own scheduler (tern-dev). */
static bool fits_node(struct kubelet *k, const cJSON *pod, int64_t now_ms)
{
    struct sysinfo si;
    sysinfo(&si);
    int64_t cpu = (int64_t)sysconf(_SC_NPROCESSORS_ONLN) * 1000;
    int64_t mem = (int64_t)((unsigned long long)si.totalram * si.mem_unit);
    char why[256];
    if (podplan_fits(pod, cpu, mem, why, sizeof why))
        return true;
    cJSON *st = podstatus_unschedulable(pod, why, now_ms / 1000);
    if (!kobj_equal(st, kobj_at(pod, "status"))) {
        cJSON *c = json_dup(pod);
        kobj_set_item(c, "status", st);
        st = NULL;
        struct tern_err e = {0};
        objstore_update_status(k->s, "v1/pods", kobj_str(pod, "metadata.namespace"), c, NULL, &e);
        cJSON_Delete(c);
    }
    cJSON_Delete(st);
    return false;
}

static struct kpod *find_pod(struct kubelet *k, const char *uid)
{
    for (size_t i = 0; i < k->npods; i++)
        if (strcmp(k->pods[i]->uid, uid) == 0)
            return k->pods[i];
    return NULL;
}

int kubelet_sync(struct kubelet *k, int64_t now_ms, struct tern_err *err)
{
    int rc = kubelet__sync_node(k, now_ms, err);
    cJSON *l = NULL, *pods = NULL;
    cache_clear(k); /* holds references into npcache */
    if (k->npcache)
        objcache_sync(k->npcache, now_ms / 1000, NULL);
    k->last_rv[0] = 0;
    struct tern_err lerr = {0};
    int lr = objstore_list(k->s, "v1/pods", NULL, &l, &lerr);
    if (lr && !rc)
        rc = err_set(err, lr, "list pods: %s", lerr.msg);
    if (lr == 0) {
        const char *rv = kobj_str(l, "metadata.resourceVersion");
        if (rv && strlen(rv) < sizeof k->last_rv)
            memcpy(k->last_rv, rv, strlen(rv) + 1);
        pods = cJSON_DetachItemFromObjectCaseSensitive(l, "items");
    }
    cJSON_Delete(l);
    if (!pods)
        pods = cJSON_CreateArray();
    for (size_t i = 0; i < k->npods; i++)
        k->pods[i]->seen = false;
    const cJSON *pod;
    cJSON_ArrayForEach(pod, pods)
    {
        const char *node = kobj_str(pod, "spec.nodeName");
        const char *uid = kobj_str(pod, "metadata.uid");
        if (!uid || !kobj_str(pod, "metadata.name"))
            continue;
        struct kpod *p = find_pod(k, uid);
        cJSON *adopted = NULL;
        const char *scheduler = kobj_str(pod, "spec.schedulerName");
        if ((!node || !*node) && k->scheduled_only) {
            continue; /* the scheduler places it */
        } else if ((!node || !*node) && scheduler &&
                   strcmp(scheduler, "default-scheduler") != 0) {
            continue; /* another scheduler's pod, as kube-scheduler leaves it */
        } else if (!node || !*node) {
            if (!p || !p->adopted) {
                if (kobj_deleting(pod))
                    continue;
                /* scheduling (this is the only node): a pod that can never
                 * fit stays Pending, told as kube-scheduler tells it */
                if (!fits_node(k, pod, now_ms))
                    continue;
                struct tern_err berr = {0};
                int r = objstore_bind(k->s, kobj_str(pod, "metadata.namespace"),
                                      kobj_str(pod, "metadata.name"), k->node, &berr);
                if (r == 0 || r == TERN_ECONFLICT || r == TERN_ENOTFOUND)
                    continue; /* picked up at the next pass with the new version */
                if (r != TERN_EINVALID && r != TERN_EHTTP) {
                    if (!rc)
                        rc = err_set(err, r, "bind: %s", berr.msg);
                    continue;
                }
                /* a server that can bind no pod: this is the only node, run
                 * it anyway (seen as bound here, spec.nodeName stays empty) */
            }
            adopted = json_dup(pod);
            kobj_set_str(adopted, "spec.nodeName", k->node);
        } else if (strcmp(node, k->node) != 0) {
            continue;
        }
        const cJSON *view = adopted ? adopted : pod;
        if (!p)
            p = kubelet__new_kpod(k, view, now_ms);
        p->seen = true;
        p->adopted = adopted != NULL;
        int r = sync_pod(k, p, view, now_ms, err);
        cJSON_Delete(adopted);
        if (r && !rc)
            rc = r;
    }
    cJSON_Delete(pods);
    /* pods gone from the store: stop and forget */
    for (size_t i = 0; i < k->npods;) {
        struct kpod *p = k->pods[i];
        if (p->seen) {
            i++;
            continue;
        }
        char *dir = xstrdup(p->dir);
        kubelet__free_pod(k, p);
        fsutil_rmtree(dir, NULL);
        free(dir);
        k->pods[i] = k->pods[--k->npods];
    }
    cache_clear(k);
    return rc;
}

/* The earliest time-driven work: a probe, a restart after backoff, the end
 * of a grace period, a pod waiting for what it needs (checked again soon:
 * a claim binding or a ConfigMap appearing is not a change of the pod), the
 * node's heartbeat and lease. INT64_MAX when none. */
static int64_t next_wake(const struct kubelet *k, int64_t now_ms)
{
    int64_t next = INT64_MAX;
#define SOONER(t) (next = (t) < next ? (t) : next)
    for (size_t i = 0; i < k->npods; i++) {
        const struct kpod *p = k->pods[i];
        if (!p->terminal && !p->prepared)
            SOONER(now_ms + 200);
        for (size_t j = 0; j < p->nc; j++) {
            const struct kcont *c = &p->c[j];
            if (c->pid > 0) {
                if (c->killing)
                    SOONER(c->kill_deadline_ms);
                if (c->has_ready_probe)
                    SOONER(c->next_ready_ms);
                if (c->has_live_probe)
                    SOONER(c->next_live_ms);
                if (c->ps.startup_pending)
                    SOONER(c->next_startup_ms);
            } else if (!c->ps.done && !p->terminal) {
                SOONER(c->next_start_ms);
            }
        }
    }
    if (k->last_node_ms)
        SOONER(k->last_node_ms + 30000);
    if (k->scheduled_only && k->last_lease_ms)
        SOONER(k->last_lease_ms + 10000);
#undef SOONER
    return next;
}

int kubelet_run(struct kubelet *k, volatile int *stop, int period_ms)
{
    /* Also remove pod directories left by pods that no longer exist. */
    bool swept = false;
    while (!*stop) {
        struct tern_err err = {0};
        if (kubelet_sync(k, kubelet__now_real_ms(), &err) && k->on_error)
            k->on_error(k->on_error_ctx, err.msg);
        if (!swept) {
            swept = true;
            DIR *d = opendir(k->podsdir);
            struct dirent *e;
            while (d && (e = readdir(d))) {
                if (e->d_name[0] == '.' || find_pod(k, e->d_name))
                    continue;
                char *path = xasprintf("%s/%s", k->podsdir, e->d_name);
                fsutil_rmtree(path, NULL);
                free(path);
            }
            if (d)
                closedir(d);
        }
        /* until something changes after the pods list of that pass, or the
         * earliest time-driven work (at most the period); without a list,
         * the whole period */
        int64_t now = kubelet__now_real_ms(), wake = next_wake(k, now);
        int wait_ms = wake - now < 10 ? 10 : wake - now < period_ms ? (int)(wake - now) : period_ms;
        if (k->last_rv[0]) {
            objstore_wait(k->s, k->last_rv, wait_ms, NULL);
        } else {
            struct timespec ts = {period_ms / 1000, (period_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}

void kubelet_shutdown(struct kubelet *k, int grace_ms)
{
    int64_t now = kubelet__now_real_ms(), deadline = now + grace_ms;
    for (size_t i = 0; i < k->npods; i++)
        for (size_t j = 0; j < k->pods[i]->nc; j++)
            kubelet__stop_container(&k->pods[i]->c[j], grace_ms, now);
    for (;;) {
        bool any = false;
        for (size_t i = 0; i < k->npods; i++) {
            for (size_t j = 0; j < k->pods[i]->nc; j++) {
                struct kcont *c = &k->pods[i]->c[j];
                if (c->pid <= 0)
                    continue;
                if (waitpid(c->pid, NULL, WNOHANG) == c->pid) {
                    c->pid = 0;
                    kubelet__cg_remove(c);
                    continue;
                }
                any = true;
                if (kubelet__now_real_ms() >= deadline)
                    kubelet__kill_sandbox(c->pid);
            }
        }
        if (!any)
            break;
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
}
