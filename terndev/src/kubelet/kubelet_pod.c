/* kubelet_pod.c - the kubelet's record of a pod (struct kpod, struct kcont):
 * built from the pod object, restoring restart counts and states a previous
 * instance reported (a container it left running counts as ended with 137
 * and restarts per restartPolicy); pod IPs; what happens when a container
 * ends (restart with backoff or terminated); and the log file paths the API
 * server's pods/log reads (kubelet_log_path, kubelet_log_running). See
 * kubelet_internal.h. */
#include "kubelet/kubelet_internal.h"

#include "base/mem.h"
#include "base/num.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* ---- container states ---- */

static const char *restart_policy(const cJSON *pod)
{
    const char *p = kobj_str(pod, "spec.restartPolicy");
    return p ? p : "Always";
}

static const cJSON *cstatus(const cJSON *pod, const char *name, bool init)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, kobj_at(pod, init ? "status.initContainerStatuses" : "status.containerStatuses"))
    {
        const char *n = kobj_str(s, "name");
        if (n && strcmp(n, name) == 0)
            return s;
    }
    return NULL;
}

static bool will_restart(const cJSON *pod, const struct kcont *c, int code)
{
    const char *rp = restart_policy(pod);
    if (kobj_deleting(pod))
        return false;
    if (c->init)
        return code != 0 && strcmp(rp, "Never") != 0;
    if (strcmp(rp, "Always") == 0)
        return true;
    if (strcmp(rp, "OnFailure") == 0)
        return code != 0;
    return false;
}

static void set_term(struct podstatus_term *t, char *msgbuf, size_t msgsz, int code,
                     const char *reason, const char *msg, int64_t started, int64_t finished)
{
    t->exit_code = code;
    t->reason = reason;
    if (msg) {
        snprintf(msgbuf, msgsz, "%s", msg);
        t->message = msgbuf;
    } else {
        t->message = NULL;
    }
    t->started_at = started;
    t->finished_at = finished;
}

/* A container finished (or was found dead after a restart): record and
 * decide about restarting. */
void kubelet__container_ended(struct kubelet *k, const cJSON *pod, struct kcont *c, int code,
                              const char *reason, const char *msg, int64_t started, int64_t now_ms)
{
    c->pid = 0;
    c->killing = false;
    c->ps.pid = 0;
    c->ps.ready = false;
    c->ps.startup_pending = false;
    c->ready_succ = c->ready_fail = c->live_fail = c->startup_fail = 0;
    if (will_restart(pod, c, code)) {
        c->ps.has_last = true;
        set_term(&c->ps.last, c->lmsg, sizeof c->lmsg, code, reason, msg, started, now_ms / 1000);
        int64_t d = k->backoff;
        for (int i = 0; i < c->ps.restart_count && d < k->backoff_max; i++)
            d *= 2;
        if (d > k->backoff_max)
            d = k->backoff_max;
        c->next_start_ms = now_ms + d;
        c->ps.state = PODSTATUS_WAITING;
        c->ps.waiting_reason = "CrashLoopBackOff";
        snprintf(c->wmsg, sizeof c->wmsg, "back-off %llds restarting failed container=%s pod=%s",
                 (long long)(d / 1000), c->name, kobj_str(pod, "metadata.name"));
        c->ps.waiting_message = c->wmsg;
        c->ps.restart_count++;
        c->ps.done = false;
    } else {
        c->ps.state = PODSTATUS_TERMINATED;
        set_term(&c->ps.term, c->tmsg, sizeof c->tmsg, code, reason, msg, started, now_ms / 1000);
        c->ps.done = true;
    }
}

/* ---- IPs ---- */

/* True when some TCP or UDP socket on the machine has ip (host order
 * 127.1.x.y) as its local address: another tern-dev's pod may hold it. */
static bool ip_busy(uint32_t ip)
{
    static const char *const files[] = {"/proc/net/tcp", "/proc/net/udp"};
    char want[9];
    /* /proc/net shows the address as the hex of its in-memory (network
     * order) bytes read as a little-endian word */
    uint32_t le = ((ip & 0xff) << 24) | ((ip & 0xff00) << 8) | ((ip >> 8) & 0xff00) | (ip >> 24);
    snprintf(want, sizeof want, "%08X", le);
    for (int f = 0; f < 2; f++) {
        char *buf = NULL;
        size_t len;
        if (fsutil_read(files[f], 16u << 20, &buf, &len, NULL) != 0)
            continue;
        bool hit = false;
        for (char *line = strchr(buf, '\n'); line && !hit; line = strchr(line + 1, '\n')) {
            char *colon = strchr(line, ':'); /* "  sl: local_address:port ..." */
            if (colon && strlen(colon) > 10 && strncmp(colon + 2, want, 8) == 0)
                hit = true;
        }
        free(buf);
        if (hit)
            return true;
    }
    return false;
}

/* The x.y of an address "A.B.x.y" as x * 256 + y, or -1. */
static int ip_index(const char *ip)
{
    const char *d1 = ip ? strchr(ip, '.') : NULL, *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
    const char *p = d2 ? d2 + 1 : NULL, *dot = p ? strchr(p, '.') : NULL;
    int64_t x, y;
    if (!dot || num_parse_i64n(p, (size_t)(dot - p), &x) != 0 || num_parse_i64(dot + 1, &y) != 0 ||
        x < 0 || x > 255 || y < 0 || y > 255)
        return -1;
    return (int)(x * 256 + y);
}

/* An address for pod: 127.1.x.y in the host's namespace, or the pod
 * network's address of the same index for a pod of its own namespace
 * (netns); want (status.podIP) is kept when it is free. */
static bool ip_alloc(struct kubelet *k, const char *want, bool netns, char out[16])
{
    int idx = -1;
    int a, b;
    if (netns && want) {
        char same[16] = "";
        int i = ip_index(want);
        if (i >= 2 && i < 65535 && (i & 255) != 255 && (i & 255) != 0)
            kubelet__net_ip(k, i, same);
        if (i >= 2 && strcmp(same, want) == 0 && !(k->ipused[i / 8] & (1 << (i % 8))) &&
            !kubelet__net_busy(i))
            idx = i;
    } else if (want && strncmp(want, "127.1.", 6) == 0) {
        const char *p = want + 6, *dot = strchr(p, '.');
        int64_t x, y;
        if (dot && num_parse_i64n(p, (size_t)(dot - p), &x) == 0 && num_parse_i64(dot + 1, &y) == 0 &&
            x >= 0 && x <= 255 && y >= 0 && y <= 255) {
            int i = (int)(x * 256 + y);
            if (i >= 2 && i < 65535 && (i & 255) != 255 && !(k->ipused[i / 8] & (1 << (i % 8))))
                idx = i;
        }
    }
    /* start where this instance's DIR hashes to: several tern-devs on one
     * machine share 127/8 */
    for (int n = 0; idx < 0 && n < 65536; n++) {
        int i = (int)((k->ip_start + (uint32_t)n) % 65536u);
        if (i < 2 || (i & 255) == 255 || (i & 255) == 0)
            continue;
        if (!(k->ipused[i / 8] & (1 << (i % 8))) &&
            !(netns ? kubelet__net_busy(i) : ip_busy(0x7f010000u | (uint32_t)i)))
            idx = i;
    }
    if (idx < 0)
        return false;
    k->ipused[idx / 8] |= (unsigned char)(1 << (idx % 8));
    a = idx / 256;
    b = idx % 256;
    if (netns)
        kubelet__net_ip(k, idx, out);
    else
        snprintf(out, 16, "127.1.%d.%d", a & 255, b & 255);
    return true;
}

void kubelet__ip_free(struct kubelet *k, char ip[16])
{
    if (!ip[0])
        return;
    int i = ip_index(ip);
    if (i >= 0 && i < 65536)
        k->ipused[i / 8] &= (unsigned char)~(1 << (i % 8));
    ip[0] = 0;
}

void kubelet__ip_renew(struct kubelet *k, struct kpod *p)
{
    kubelet__ip_free(k, p->ip);
    ip_alloc(k, NULL, p->mode == NETPOL_NETNS, p->ip);
}

/* ---- the record ---- */

struct kpod *kubelet__new_kpod(struct kubelet *k, const cJSON *pod, int64_t now_ms)
{
    struct kpod *p = xcalloc(1, sizeof *p);
    p->uid = xstrdup(kobj_str(pod, "metadata.uid"));
    p->ns = xstrdup(kobj_str(pod, "metadata.namespace") ? kobj_str(pod, "metadata.namespace") : "default");
    p->name = xstrdup(kobj_str(pod, "metadata.name"));
    p->dir = xasprintf("%s/%s", k->podsdir, p->uid);
    const char *phase = kobj_str(pod, "status.phase");
    p->terminal = phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"));
    const char *lists[] = {"spec.initContainers", "spec.containers"};
    size_t n = (size_t)cJSON_GetArraySize(kobj_at(pod, lists[0])) +
               (size_t)cJSON_GetArraySize(kobj_at(pod, lists[1]));
    p->c = xcalloc(n ? n : 1, sizeof *p->c);
    for (int l = 0; l < 2; l++) {
        const cJSON *x;
        cJSON_ArrayForEach(x, kobj_at(pod, lists[l]))
        {
            struct kcont *c = &p->c[p->nc++];
            const char *name = kobj_str(x, "name");
            c->name = xstrdup(name ? name : "");
            c->init = l == 0;
            c->ps.name = c->name;
            c->ps.init = c->init;
            c->ps.state = PODSTATUS_WAITING;
            c->ps.waiting_reason = c->init || cJSON_GetArraySize(kobj_at(pod, lists[0])) == 0
                                       ? "ContainerCreating"
                                       : "PodInitializing";
            /* restore what a previous instance reported */
            const cJSON *st = cstatus(pod, c->name, c->init);
            if (!st)
                continue;
            c->ps.restart_count = (int)kobj_int(st, "restartCount", 0);
            const cJSON *lt = kobj_at(st, "lastState.terminated");
            if (lt) {
                c->ps.has_last = true;
                const char *lr = kobj_str(lt, "reason");
                set_term(&c->ps.last, c->lmsg, sizeof c->lmsg, (int)kobj_int(lt, "exitCode", 0),
                         lr && !strcmp(lr, "Completed")   ? "Completed"
                         : lr && !strcmp(lr, "OOMKilled") ? "OOMKilled"
                                                          : "Error",
                         kobj_str(lt, "message"), kobj_time(lt, "startedAt", 0),
                         kobj_time(lt, "finishedAt", 0));
            }
            const cJSON *t = kobj_at(st, "state.terminated");
            if (t) {
                int code = (int)kobj_int(t, "exitCode", 0);
                const char *r = kobj_str(t, "reason");
                c->ps.state = PODSTATUS_TERMINATED;
                set_term(&c->ps.term, c->tmsg, sizeof c->tmsg, code,
                         r && !strcmp(r, "OOMKilled") ? "OOMKilled" : code ? "Error" : "Completed",
                         kobj_str(t, "message"), kobj_time(t, "startedAt", 0),
                         kobj_time(t, "finishedAt", 0));
                c->ps.done = p->terminal || !will_restart(pod, c, code);
                if (!c->ps.done) /* restart it now */
                    kubelet__container_ended(k, pod, c, code, c->ps.term.reason, NULL,
                                             c->ps.term.started_at, now_ms - k->backoff);
            } else if (kobj_at(st, "state.running") && !p->terminal) {
                kubelet__container_ended(k, pod, c, 137, "Error", "tern-dev restarted",
                                         kobj_time(st, "state.running.startedAt", now_ms / 1000),
                                         now_ms - k->backoff);
            }
        }
    }
    if (p->terminal) {
        for (size_t i = 0; i < p->nc; i++)
            p->c[i].ps.done = true;
    }
    const char *want = kobj_str(pod, "status.podIP");
    if (!p->terminal) {
        /* the network is decided once, from the policies the pod has when
         * it is first seen (the operator creates a sandbox's before it) */
        kubelet__cache_pod(k, pod);
        p->mode = netpol_mode(pod, k->netpols, NULL);
        if (p->mode == NETPOL_NETNS && k->netpol_off)
            p->mode = NETPOL_HOST;
        ip_alloc(k, want, p->mode == NETPOL_NETNS, p->ip); /* a terminal pod keeps its old podIP in status */
    }
    k->pods = xreallocarray(k->pods, k->npods + 1, sizeof *k->pods);
    k->pods[k->npods++] = p;
    return p;
}

void kubelet__free_pod(struct kubelet *k, struct kpod *p)
{
    for (size_t i = 0; i < p->nc; i++) {
        struct kcont *c = &p->c[i];
        if (c->pid > 0) {
            kubelet__kill_sandbox(c->pid);
            waitpid(c->pid, NULL, 0);
        }
        kubelet__cg_remove(c);
        free(c->name);
    }
    kubelet__net_teardown(k, p);
    kubelet__ip_free(k, p->ip);
    free(p->net_rules);
    free(p->c);
    free(p->uid);
    free(p->ns);
    free(p->name);
    free(p->dir);
    free(p->sa_token);
    free(p);
}

/* ---- log paths ---- */

static const char *default_container(const cJSON *pod)
{
    const char *a = json_get(kobj_at(pod, "metadata.annotations"), "kubectl.kubernetes.io/default-container")
                        ? json_get(kobj_at(pod, "metadata.annotations"),
                                   "kubectl.kubernetes.io/default-container")->valuestring
                        : NULL;
    if (a)
        return a;
    return kobj_str(cJSON_GetArrayItem(kobj_at(pod, "spec.containers"), 0), "name");
}

static const cJSON *any_cstatus(const cJSON *pod, const char *name)
{
    const cJSON *s = cstatus(pod, name, false);
    return s ? s : cstatus(pod, name, true);
}

int kubelet_log_path(const char *dir, const cJSON *pod, const char *container, bool previous,
                     char **ret, struct tern_err *err)
{
    const char *uid = kobj_str(pod, "metadata.uid");
    if (!container)
        container = default_container(pod);
    if (!uid || !container || !*container || strchr(container, '/') || container[0] == '.')
        return err_set(err, TERN_EINVALID, "no container to read logs from");
    const cJSON *st = any_cstatus(pod, container);
    if (!st)
        return err_set(err, TERN_ENOTFOUND, "container \"%s\" is not valid for pod \"%s\"",
                       container, kobj_str(pod, "metadata.name"));
    int64_t n = kobj_int(st, "restartCount", 0);
    if (previous) {
        if (n == 0)
            return err_set(err, TERN_ENOTFOUND,
                           "previous terminated container \"%s\" in pod \"%s\" not found", container,
                           kobj_str(pod, "metadata.name"));
        n--;
    } else if (kobj_has(st, "state.waiting") && n > 0) {
        n--; /* waiting to restart: the last run's log is the current one */
    }
    *ret = xasprintf("%s/pods/%s/logs/%s/%lld.log", dir, uid, container, (long long)n);
    return 0;
}

bool kubelet_log_running(const cJSON *pod, const char *container, int64_t restart_count)
{
    if (!container)
        container = default_container(pod);
    const cJSON *st = container ? any_cstatus(pod, container) : NULL;
    return st && kobj_has(st, "state.running") && kobj_int(st, "restartCount", 0) == restart_count;
}
