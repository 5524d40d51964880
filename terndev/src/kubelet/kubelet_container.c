/* kubelet_container.c - running a pod's containers: preparing the pod
 * (service-account token, volume files, PVC directories, network
 * namespace when its NetworkPolicies restrict egress), starting a container from its
 * podplan, stopping it (SIGTERM, SIGKILL after the grace period), reaping
 * exits (OOMKilled from the cgroup), and driving readiness and liveness
 * probes. See kubelet_internal.h. */
#include "kubelet/kubelet_internal.h"

#include "base/mem.h"
#include "base/num.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "json/json.h"
#include "kubelet/podlog.h"
#include "kubelet/probe.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const cJSON *cspec(const cJSON *pod, const struct kcont *c)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, kobj_at(pod, c->init ? "spec.initContainers" : "spec.containers"))
    {
        const char *n = kobj_str(x, "name");
        if (n && strcmp(n, c->name) == 0)
            return x;
    }
    return NULL;
}

static void fill_in(struct kubelet *k, struct kpod *p, const cJSON *pod, struct podplan_in *in)
{
    kubelet__cache_pod(k, pod);
    *in = (struct podplan_in){
        .pod = pod,
        .configmaps = k->cms,
        .secrets = k->secrets,
        .pvcs = k->pvcs,
        .pvs = k->pvs,
        .pod_dir = p->dir,
        .volume_root = k->voldir,
        .pod_ip = p->ip,
        .host_ip = "127.0.0.1",
        .sa_token = p->sa_token,
        .ca_pem = k->ca_pem,
        .api_host = k->api_host,
        .api_port = k->api_port,
        .bin_dir = k->bin_dir,
        .bwrap = k->bwrap,
        .isolate_net = p->mode == NETPOL_ISOLATED,
        .netns = p->net_up ? p->netns_path : NULL,
    };
}

static bool automount(struct kubelet *k, const cJSON *pod, const char *sa_name)
{
    const cJSON *v = kobj_at(pod, "spec.automountServiceAccountToken");
    if (cJSON_IsBool(v))
        return cJSON_IsTrue(v);
    cJSON *sa = NULL;
    bool r = true;
    if (objstore_get(k->s, "v1/serviceaccounts", kobj_str(pod, "metadata.namespace"), sa_name, &sa,
                     NULL) == 0)
        r = kobj_bool(sa, "automountServiceAccountToken", true);
    cJSON_Delete(sa);
    return r;
}

/* ---- preparing a pod ---- */

/* True when a projected volume of pod has a serviceAccountToken source. */
static bool wants_token(const cJSON *pod)
{
    const cJSON *v, *src;
    cJSON_ArrayForEach(v, kobj_at(pod, "spec.volumes"))
        cJSON_ArrayForEach(src, kobj_at(v, "projected.sources"))
            if (kobj_has(src, "serviceAccountToken"))
                return true;
    return false;
}

int kubelet__prepare(struct kubelet *k, struct kpod *p, const cJSON *pod, struct tern_err *err)
{
    if (p->prepared)
        return 0;
    const char *sa_name = kobj_str(pod, "spec.serviceAccountName");
    sa_name = sa_name ? sa_name : "default";
    if (k->token_fn && !p->sa_token && wants_token(pod)) {
        /* a cluster's admission put the token volume in the spec; the
         * token itself comes from the TokenRequest API, bound to the pod */
        int r = k->token_fn(k->token_ctx, pod, sa_name, &p->sa_token, err);
        if (r)
            return err_wrap(err, r, "serviceaccount \"%s\" token", sa_name);
    } else if (k->have_key && !p->sa_token && automount(k, pod, sa_name)) {
        cJSON *sa = NULL;
        int r = objstore_get(k->s, "v1/serviceaccounts", p->ns, sa_name, &sa, err);
        if (r == 0)
            r = satoken_mint(k->sa_key, p->ns, sa_name, kobj_str(sa, "metadata.uid"),
                             &p->sa_token, err);
        cJSON_Delete(sa);
        if (r)
            return err_wrap(err, r, "serviceaccount \"%s\"", sa_name);
    }
    if (p->mode == NETPOL_NETNS) {
        /* before anything of the pod runs: its namespace, denying all */
        int nr = kubelet__net_setup(k, p, err);
        if (nr == -EEXIST)
            kubelet__ip_renew(k, p); /* another kubelet took the index meanwhile */
        if (nr)
            return nr;
    }
    struct podplan_in in;
    fill_in(k, p, pod, &in);
    struct podplan_volumes v;
    int rc = podplan_volumes(&in, &v, err);
    if (rc)
        return rc;
    rc = fsutil_mkdirs(p->dir, 0755, err);
    for (size_t i = 0; rc == 0 && i < v.ndirs; i++) {
        rc = fsutil_mkdirs(v.dirs[i], 0777, err);
        if (rc == 0)
            (void)!chmod(v.dirs[i], 0777);
    }
    for (size_t i = 0; rc == 0 && i < v.nfiles; i++)
        rc = fsutil_write(v.files[i].path, v.files[i].data, v.files[i].len, v.files[i].mode, err);
    podplan_volumes_done(&v);
    if (rc == 0) {
        /* a pod's PVC directories must exist (and be writable by any uid) */
        const cJSON *vol;
        cJSON_ArrayForEach(vol, kobj_at(pod, "spec.volumes"))
        {
            if (!kobj_has(vol, "persistentVolumeClaim"))
                continue;
            char *src;
            rc = podplan_volume_source(&in, kobj_str(vol, "name"), &src, err);
            if (rc)
                break;
            rc = fsutil_mkdirs(src, 0777, err);
            free(src);
            if (rc)
                break;
        }
    }
    if (rc == 0)
        p->prepared = true;
    return rc;
}

/* ---- containers ---- */

/* An empty termination message file for the container's next run, which
 * any uid in the sandbox may write. */
static void termination_file_reset(const struct kpod *p, const char *path)
{
    if (!path)
        return;
    char *dir = xasprintf("%s/termination", p->dir);
    struct tern_err e = {0};
    fsutil_mkdirs(dir, 0755, &e);
    free(dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd >= 0) {
        int r = fchmod(fd, 0666); /* past the umask */
        (void)r;
        close(fd);
    }
}

/* What the container left as its termination message (podlog.h). */
static const char *termination_message(const struct kpod *p, const cJSON *pod,
                                       const struct kcont *c, int code, char *buf, size_t n)
{
    char *tf = xasprintf("%s/termination/%s", p->dir, c->name);
    char *lf = xasprintf("%s/logs/%s/%d.log", p->dir, c->name, c->ps.restart_count);
    const char *pol = kobj_str(cspec(pod, c), "terminationMessagePolicy");
    size_t len = podlog_termination_message(tf, lf, pol && !strcmp(pol, "FallbackToLogsOnError"),
                                            code, buf, n);
    free(tf);
    free(lf);
    return len ? buf : NULL;
}

int kubelet__start_container(struct kubelet *k, struct kpod *p, const cJSON *pod, struct kcont *c,
                             int64_t now_ms, struct tern_err *err)
{
    const cJSON *spec = cspec(pod, c);
    if (!spec)
        return err_set(err, TERN_EINVALID, "container %s vanished from the spec", c->name);
    /* the image name is parsed before anything is pulled (or, here, run);
     * that there is one is the API server's check */
    const char *image = kobj_str(spec, "image");
    if (image && !podplan_image_valid(image, c->wmsg, sizeof c->wmsg)) {
        c->ps.state = PODSTATUS_WAITING;
        c->ps.waiting_reason = "InvalidImageName";
        c->ps.waiting_message = c->wmsg;
        return 0; /* reported in status, retried next pass */
    }
    struct podplan_in in;
    fill_in(k, p, pod, &in);
    struct podplan_exec x;
    struct tern_err perr = {0};
    int rc = podplan_exec(&in, spec, NULL, &x, &perr);
    if (rc) {
        c->ps.state = PODSTATUS_WAITING;
        c->ps.waiting_reason = "CreateContainerConfigError";
        snprintf(c->wmsg, sizeof c->wmsg, "%s", perr.msg);
        c->ps.waiting_message = c->wmsg;
        return 0; /* reported in status, retried next pass */
    }
    char *ldir = xasprintf("%s/logs/%s", p->dir, c->name);
    char *log = xasprintf("%s/%d.log", ldir, c->ps.restart_count);
    rc = fsutil_mkdirs(ldir, 0755, err);
    if (rc == 0) {
        kubelet__cg_setup(k, p, c, &x);
        c->oom_before = kubelet__oom_kills(c);
        termination_file_reset(p, x.termination_file);
        pid_t pid = kubelet__spawn(&x, log, c);
        if (pid < 0) {
            rc = err_set(err, pid, "spawn %s: %s", c->name, strerror(-pid));
        } else {
            c->pid = pid;
            c->ps.pid = pid;
            c->ps.state = PODSTATUS_RUNNING;
            c->ps.started_at = now_ms / 1000;
            c->ps.waiting_reason = NULL;
            c->ps.waiting_message = NULL;
            c->ps.ready = false;
            c->killing = false;
            const cJSON *rp = kobj_at(spec, "readinessProbe");
            const cJSON *lp = kobj_at(spec, "livenessProbe");
            const cJSON *sp = c->init ? NULL : kobj_at(spec, "startupProbe");
            c->next_ready_ms = now_ms + kobj_int(rp, "initialDelaySeconds", 0) * 1000;
            c->next_live_ms = now_ms + kobj_int(lp, "initialDelaySeconds", 0) * 1000;
            c->has_ready_probe = rp != NULL;
            c->has_live_probe = lp != NULL;
            c->next_startup_ms = now_ms + kobj_int(sp, "initialDelaySeconds", 0) * 1000;
            c->ps.startup_pending = sp != NULL;
            c->ready_succ = c->ready_fail = c->live_fail = c->startup_fail = 0;
            kubelet__write_pids(k, p);
        }
    }
    free(ldir);
    free(log);
    podplan_exec_done(&x);
    return rc;
}

void kubelet__stop_container(struct kcont *c, int64_t grace_ms, int64_t now_ms)
{
    if (c->pid <= 0)
        return;
    if (!c->killing) {
        c->killing = true;
        c->kill_deadline_ms = now_ms + grace_ms;
        if (grace_ms <= 0 || kubelet__signal_sandbox(c->pid, SIGTERM) == 0)
            kubelet__kill_sandbox(c->pid);
    } else if (now_ms >= c->kill_deadline_ms) {
        kubelet__kill_sandbox(c->pid);
    }
}

void kubelet__reap(struct kubelet *k, struct kpod *p, const cJSON *pod, int64_t now_ms)
{
    for (size_t i = 0; i < p->nc; i++) {
        struct kcont *c = &p->c[i];
        if (c->pid <= 0)
            continue;
        int st;
        pid_t r = waitpid(c->pid, &st, WNOHANG);
        if (r != c->pid)
            continue;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        const char *reason = code == 0 ? "Completed" : "Error";
        if (kubelet__oom_kills(c) > c->oom_before)
            reason = "OOMKilled";
        kubelet__cg_remove(c);
        char msg[4097];
        kubelet__container_ended(k, pod, c, code, reason,
                                 termination_message(p, pod, c, code, msg, sizeof msg),
                                 c->ps.started_at, now_ms);
        kubelet__write_pids(k, p);
    }
}

/* ---- probes ---- */

static int port_of(const cJSON *spec, const cJSON *port)
{
    int64_t v;
    if (cJSON_IsNumber(port) || cJSON_IsRaw(port)) {
        if (json_item_int64(port, &v) == 0)
            return (int)v;
        return -1;
    }
    if (cJSON_IsString(port)) {
        if (num_parse_i64(port->valuestring, &v) == 0)
            return (int)v;
        const cJSON *cp;
        cJSON_ArrayForEach(cp, kobj_at(spec, "ports"))
        {
            const char *n = kobj_str(cp, "name");
            if (n && strcmp(n, port->valuestring) == 0)
                return (int)kobj_int(cp, "containerPort", -1);
        }
    }
    return -1;
}

/* Runs one probe: 0 success, else failure. */
static int run_probe(struct kubelet *k, struct kpod *p, const cJSON *pod, const cJSON *spec,
                     const cJSON *probe)
{
    int timeout_ms = (int)kobj_int(probe, "timeoutSeconds", 1) * 1000;
    if (kobj_has(probe, "httpGet")) {
        int port = port_of(spec, kobj_at(probe, "httpGet.port"));
        const char *path = kobj_str(probe, "httpGet.path");
        return probe_http(p->ip, port, path ? path : "/", timeout_ms);
    }
    if (kobj_has(probe, "tcpSocket"))
        return probe_tcp(p->ip, port_of(spec, kobj_at(probe, "tcpSocket.port")), timeout_ms);
    if (kobj_has(probe, "exec")) {
        struct podplan_in in;
        fill_in(k, p, pod, &in);
        struct podplan_exec x;
        if (podplan_exec(&in, spec, kobj_at(probe, "exec.command"), &x, NULL) != 0)
            return -EINVAL;
        struct kcont none = {0};
        x.mem_limit = -1;
        pid_t pid = kubelet__spawn(&x, NULL, &none);
        podplan_exec_done(&x);
        if (pid < 0)
            return pid;
        int64_t deadline = kubelet__now_real_ms() + timeout_ms;
        int st = 0;
        for (;;) {
            pid_t r = waitpid(pid, &st, WNOHANG);
            if (r == pid)
                break;
            if (kubelet__now_real_ms() > deadline) {
                kubelet__kill_sandbox(pid);
                waitpid(pid, &st, 0);
                return TERN_ETIMEOUT;
            }
            struct timespec ts = {0, 10 * 1000000};
            nanosleep(&ts, NULL);
        }
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
    }
    return 0; /* no handler: success, like a probe without action */
}

void kubelet__probes(struct kubelet *k, struct kpod *p, const cJSON *pod, int64_t now_ms)
{
    for (size_t i = 0; i < p->nc; i++) {
        struct kcont *c = &p->c[i];
        if (c->init || c->pid <= 0 || c->killing)
            continue;
        const cJSON *spec = cspec(pod, c);
        /* a startupProbe holds the other probes, readiness and the started
         * status until it passes; failureThreshold failures kill the
         * container (restarted by its restartPolicy), as the kubelet does */
        const cJSON *sp = kobj_at(spec, "startupProbe");
        if (sp && c->ps.startup_pending) {
            c->ps.ready = false;
            if (now_ms < c->next_startup_ms)
                continue;
            c->next_startup_ms = now_ms + kobj_int(sp, "periodSeconds", 10) * 1000;
            if (run_probe(k, p, pod, spec, sp) == 0) {
                c->ps.startup_pending = false;
                c->startup_fail = 0;
            } else if (++c->startup_fail >= kobj_int(sp, "failureThreshold", 3)) {
                int64_t grace = kobj_int(pod, "spec.terminationGracePeriodSeconds", 30);
                kubelet__stop_container(c, grace * 1000, now_ms);
                continue;
            } else {
                continue;
            }
        }
        const cJSON *rp = kobj_at(spec, "readinessProbe");
        if (!rp) {
            c->ps.ready = true;
        } else if (now_ms >= c->next_ready_ms) {
            c->next_ready_ms = now_ms + kobj_int(rp, "periodSeconds", 10) * 1000;
            if (run_probe(k, p, pod, spec, rp) == 0) {
                c->ready_fail = 0;
                if (++c->ready_succ >= kobj_int(rp, "successThreshold", 1))
                    c->ps.ready = true;
            } else {
                c->ready_succ = 0;
                if (++c->ready_fail >= kobj_int(rp, "failureThreshold", 3) || !c->ps.ready)
                    c->ps.ready = false;
            }
        }
        const cJSON *lp = kobj_at(spec, "livenessProbe");
        if (lp && now_ms >= c->next_live_ms) {
            c->next_live_ms = now_ms + kobj_int(lp, "periodSeconds", 10) * 1000;
            if (run_probe(k, p, pod, spec, lp) == 0) {
                c->live_fail = 0;
            } else if (++c->live_fail >= kobj_int(lp, "failureThreshold", 3)) {
                int64_t grace = kobj_int(pod, "spec.terminationGracePeriodSeconds", 30);
                c->ps.ready = false;
                kubelet__stop_container(c, grace * 1000, now_ms);
            }
        }
    }
}
