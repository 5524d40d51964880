/* kubelet.c - the local kubelet. See kubelet.h. */
#include "kubelet.h"

#include "base/limits.h"
#include "base/mem.h"
#include "base/num.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "devctl/satoken.h"
#include "json/json.h"
#include "kubelet/podlog.h"
#include "kubelet/podplan.h"
#include "kubelet/podstatus.h"
#include "kubelet/probe.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CG_MEM "/sys/fs/cgroup/memory/tern-dev"
#define CG_CPU "/sys/fs/cgroup/cpu/tern-dev"

struct kcont {
    char *name;
    bool init;
    struct podstatus_container ps;
    char wmsg[512], tmsg[4097], lmsg[4097]; /* termination messages: <= 4096 bytes */
    pid_t pid;
    int64_t next_start_ms;
    int64_t next_ready_ms, next_live_ms;
    int ready_succ, ready_fail, live_fail;
    bool killing;
    int64_t kill_deadline_ms;
    char cg_mem[256], cg_cpu[256];
    int64_t oom_before;
};

struct kpod {
    char *uid, *ns, *name;
    char ip[16];
    char *dir;
    bool prepared, terminal, final_delete, seen, adopted;
    char *sa_token;
    struct kcont *c;
    size_t nc;
};

struct kubelet {
    const struct objstore *s;
    char *dir, *node, *api_host, *ca_pem, *bin_dir, *bwrap, *podsdir, *voldir;
    int api_port;
    unsigned char sa_key[SATOKEN_KEY_LEN];
    bool have_key, cgroups;
    int64_t backoff, backoff_max;
    struct kpod **pods;
    size_t npods;
    unsigned char ipused[65536 / 8];
    uint32_t ip_start;
    int64_t last_node_ms;
    /* per-sync cache of namespace objects */
    char *cache_ns;
    cJSON *cms, *secrets, *pvcs, *netpols;
};

static int64_t now_real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool write_str(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = write(fd, s, strlen(s));
    close(fd);
    return n == (ssize_t)strlen(s);
}

/* ---- process helpers ---- */

/* Start time (clock ticks since boot) of pid, or -1. */
static int64_t proc_starttime(pid_t pid)
{
    char path[64], *buf = NULL;
    size_t len;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (fsutil_read(path, TERN_KUBELET_MAX_PROC_FILE, &buf, &len, NULL) != 0)
        return -1;
    char *p = strrchr(buf, ')');
    int64_t v = -1;
    /* after ") ": state(3) ppid(4) ... starttime is field 22 */
    for (int field = 2; p && *p; p++) {
        if (*p == ' ') {
            field++;
            if (field == 22) {
                char *e = strchr(p + 1, ' ');
                if (e && num_parse_i64n(p + 1, (size_t)(e - p - 1), &v) != 0)
                    v = -1;
                break;
            }
        }
    }
    free(buf);
    return v;
}

static pid_t proc_ppid(pid_t pid)
{
    char path[64], *buf = NULL;
    size_t len;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (fsutil_read(path, TERN_KUBELET_MAX_PROC_FILE, &buf, &len, NULL) != 0)
        return -1;
    char *p = strrchr(buf, ')');
    int64_t v = -1;
    if (p && p[1] == ' ' && p[2] && p[3] == ' ') {
        char *e = strchr(p + 4, ' ');
        if (!e || num_parse_i64n(p + 4, (size_t)(e - p - 4), &v) != 0)
            v = -1;
    }
    free(buf);
    return (pid_t)v;
}

static bool ns_link(pid_t pid, char out[64])
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
    ssize_t n = readlink(path, out, 63);
    if (n <= 0)
        return false;
    out[n] = 0;
    return true;
}

/* Sends sig to every process in the pid namespace of the sandbox whose
 * outer bwrap is pid, except its init. Returns how many were signalled. */
static int signal_sandbox(pid_t outer, int sig)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    pid_t init = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t p;
        if (num_parse_i64(e->d_name, &p) != 0)
            continue;
        if (proc_ppid((pid_t)p) == outer) {
            init = (pid_t)p;
            break;
        }
    }
    char ns[64];
    int n = 0;
    if (init > 0 && ns_link(init, ns)) {
        rewinddir(d);
        while ((e = readdir(d))) {
            int64_t p;
            char other[64];
            if (num_parse_i64(e->d_name, &p) != 0 || (pid_t)p == init)
                continue;
            if (ns_link((pid_t)p, other) && strcmp(other, ns) == 0 && kill((pid_t)p, sig) == 0)
                n++;
        }
    }
    closedir(d);
    return n;
}

/* SIGKILLs a sandbox: its pid-namespace init (the outer bwrap's child,
 * which takes the whole namespace with it) and the outer bwrap's group. Not
 * relying on bwrap's --die-with-parent alone: an outer bwrap killed just
 * after start can leave its init behind. */
static void kill_sandbox(pid_t outer)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int64_t p;
        if (num_parse_i64(e->d_name, &p) == 0 && proc_ppid((pid_t)p) == outer)
            kill((pid_t)p, SIGKILL);
    }
    if (d)
        closedir(d);
    kill(-outer, SIGKILL);
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

static bool ip_alloc(struct kubelet *k, const char *want, char out[16])
{
    int idx = -1;
    int a, b;
    if (want && strncmp(want, "127.1.", 6) == 0) {
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
        if (!(k->ipused[i / 8] & (1 << (i % 8))) && !ip_busy(0x7f010000u | (uint32_t)i))
            idx = i;
    }
    if (idx < 0)
        return false;
    k->ipused[idx / 8] |= (unsigned char)(1 << (idx % 8));
    a = idx / 256;
    b = idx % 256;
    snprintf(out, 16, "127.1.%d.%d", a, b);
    return true;
}

static void ip_free(struct kubelet *k, char ip[16])
{
    if (!ip[0])
        return;
    const char *p = ip + 6, *dot = strchr(p, '.');
    int64_t x, y;
    if (dot && num_parse_i64n(p, (size_t)(dot - p), &x) == 0 && num_parse_i64(dot + 1, &y) == 0) {
        int i = (int)(x * 256 + y);
        if (i >= 0 && i < 65536)
            k->ipused[i / 8] &= (unsigned char)~(1 << (i % 8));
    }
    ip[0] = 0;
}

/* ---- lifecycle ---- */

/* SIGKILLs every bwrap process whose command line names a directory under
 * DIR/pods/ (each sandbox binds DIR/pods/<uid>/tmp/<container>): sandboxes
 * of a previous instance on this DIR, including any that escaped its
 * process group or lost their parent while being set up. */
static void kill_sandboxes_of(struct kubelet *k)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    char *prefix = xasprintf("%s/", k->podsdir);
    size_t pl = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t pid;
        if (num_parse_i64(e->d_name, &pid) != 0 || pid <= 1 || pid == getpid())
            continue;
        char path[64], *buf = NULL;
        size_t len;
        snprintf(path, sizeof path, "/proc/%lld/cmdline", (long long)pid);
        if (fsutil_read(path, TERN_KUBELET_MAX_PIDS_FILE, &buf, &len, NULL) != 0)
            continue;
        bool ours = len > 0 && strcmp(buf, k->bwrap) == 0;
        for (size_t i = strlen(buf) + 1; ours && i < len; i += strlen(buf + i) + 1) {
            if (strncmp(buf + i, prefix, pl) == 0) {
                kill((pid_t)pid, SIGKILL);
                break;
            }
        }
        free(buf);
    }
    closedir(d);
    free(prefix);
}

static void kill_leftovers(struct kubelet *k)
{
    kill_sandboxes_of(k);
    DIR *d = opendir(k->podsdir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *path = xasprintf("%s/%s/pids", k->podsdir, e->d_name), *buf = NULL;
        size_t len;
        if (fsutil_read(path, TERN_KUBELET_MAX_PIDS_FILE, &buf, &len, NULL) == 0) {
            for (char *line = buf; line && *line;) {
                char *nl = strchr(line, '\n');
                if (nl)
                    *nl = 0;
                char *sp = strchr(line, ' ');
                int64_t pid, st;
                if (sp && num_parse_i64n(line, (size_t)(sp - line), &pid) == 0 &&
                    num_parse_i64(sp + 1, &st) == 0 && pid > 1 && proc_starttime((pid_t)pid) == st)
                    kill(-(pid_t)pid, SIGKILL);
                line = nl ? nl + 1 : NULL;
            }
            free(buf);
        }
        free(path);
    }
    closedir(d);
}

int kubelet_new(const struct objstore *store, const struct kubelet_cfg *cfg, struct kubelet **ret,
                struct tern_err *err)
{
    struct kubelet *k = xcalloc(1, sizeof *k);
    k->s = store;
    k->dir = xstrdup(cfg->dir);
    k->node = xstrdup(cfg->node_name ? cfg->node_name : "tern-dev");
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
        k->cgroups = (mkdir(CG_MEM, 0755) == 0 || errno == EEXIST) &&
                     (mkdir(CG_CPU, 0755) == 0 || errno == EEXIST) && access(CG_MEM, W_OK) == 0 &&
                     access(CG_CPU, W_OK) == 0;
    }
    kill_leftovers(k);
    *ret = k;
    return 0;
}

static void cg_remove(struct kcont *c)
{
    if (c->cg_mem[0])
        rmdir(c->cg_mem);
    if (c->cg_cpu[0])
        rmdir(c->cg_cpu);
    c->cg_mem[0] = c->cg_cpu[0] = 0;
}

static void free_pod(struct kubelet *k, struct kpod *p)
{
    for (size_t i = 0; i < p->nc; i++) {
        struct kcont *c = &p->c[i];
        if (c->pid > 0) {
            kill_sandbox(c->pid);
            waitpid(c->pid, NULL, 0);
        }
        cg_remove(c);
        free(c->name);
    }
    ip_free(k, p->ip);
    free(p->c);
    free(p->uid);
    free(p->ns);
    free(p->name);
    free(p->dir);
    free(p->sa_token);
    free(p);
}

static void cache_clear(struct kubelet *k)
{
    free(k->cache_ns);
    cJSON_Delete(k->cms);
    cJSON_Delete(k->secrets);
    cJSON_Delete(k->pvcs);
    cJSON_Delete(k->netpols);
    k->cache_ns = NULL;
    k->cms = k->secrets = k->pvcs = k->netpols = NULL;
}

void kubelet_free(struct kubelet *k)
{
    if (!k)
        return;
    for (size_t i = 0; i < k->npods; i++)
        free_pod(k, k->pods[i]);
    free(k->pods);
    cache_clear(k);
    free(k->dir);
    free(k->node);
    free(k->api_host);
    free(k->ca_pem);
    free(k->bin_dir);
    free(k->bwrap);
    free(k->podsdir);
    free(k->voldir);
    free(k);
}

static cJSON *list_items(struct kubelet *k, const char *gvr, const char *ns)
{
    cJSON *l = NULL;
    if (objstore_list(k->s, gvr, ns, &l, NULL) != 0)
        return cJSON_CreateArray();
    cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(l, "items");
    cJSON_Delete(l);
    return it ? it : cJSON_CreateArray();
}

static void cache_ns(struct kubelet *k, const char *ns)
{
    if (k->cache_ns && strcmp(k->cache_ns, ns) == 0)
        return;
    cache_clear(k);
    k->cache_ns = xstrdup(ns);
    k->cms = list_items(k, "v1/configmaps", ns);
    k->secrets = list_items(k, "v1/secrets", ns);
    k->pvcs = list_items(k, "v1/persistentvolumeclaims", ns);
    k->netpols = list_items(k, "networking.k8s.io/v1/networkpolicies", ns);
}

/* ---- node ---- */

static int sync_node(struct kubelet *k, int64_t now_ms, struct tern_err *err)
{
    if (k->last_node_ms && now_ms - k->last_node_ms < 30000)
        return 0;
    cJSON *node = NULL;
    int rc = objstore_get(k->s, "v1/nodes", "", k->node, &node, err);
    if (rc == TERN_ENOTFOUND) {
        cJSON *n = cJSON_CreateObject();
        json_add_string(n, "apiVersion", "v1");
        json_add_string(n, "kind", "Node");
        kobj_set_str(n, "metadata.name", k->node);
        cJSON *labels = kobj_obj(n, "metadata.labels");
        json_add_string(labels, "kubernetes.io/hostname", k->node);
        json_add_string(labels, "kubernetes.io/os", "linux");
        struct utsname u;
        uname(&u);
        json_add_string(labels, "kubernetes.io/arch",
                        strcmp(u.machine, "x86_64") == 0 ? "amd64"
                        : strcmp(u.machine, "aarch64") == 0 ? "arm64" : u.machine);
        rc = objstore_create(k->s, "v1/nodes", "", n, &node, err);
        cJSON_Delete(n);
        if (rc == -EEXIST)
            return 0;
    }
    if (rc)
        return rc;
    char b[32], ts[32];
    struct sysinfo si;
    sysinfo(&si);
    cJSON *c = json_dup(node);
    cJSON *cap = cJSON_CreateObject();
    json_add_string(cap, "cpu", num_fmt_i64(sysconf(_SC_NPROCESSORS_ONLN), b));
    char mem[40];
    snprintf(mem, sizeof mem, "%lluKi",
             (unsigned long long)si.totalram * si.mem_unit / 1024ULL);
    json_add_string(cap, "memory", mem);
    json_add_string(cap, "pods", "110");
    json_add_string(cap, "ephemeral-storage", "0");
    kobj_set_item(c, "status.capacity", cap);
    kobj_set_item(c, "status.allocatable", json_dup(cap));
    int64_t now = now_ms / 1000;
    kobj_set_cond(c, "Ready", "True", "KubeletReady", "kubelet is posting ready status", now);
    cJSON *cond = (cJSON *)kobj_cond(c, "Ready");
    kobj_set_str(cond, "lastHeartbeatTime", kobj_fmt_time(now, ts));
    cJSON *addrs = cJSON_CreateArray();
    cJSON *a1 = cJSON_CreateObject(), *a2 = cJSON_CreateObject();
    json_add_string(a1, "type", "InternalIP");
    json_add_string(a1, "address", "127.0.0.1");
    json_add_string(a2, "type", "Hostname");
    json_add_string(a2, "address", k->node);
    cJSON_AddItemToArray(addrs, a1);
    cJSON_AddItemToArray(addrs, a2);
    kobj_set_item(c, "status.addresses", addrs);
    struct utsname u;
    uname(&u);
    kobj_set_str(c, "status.nodeInfo.kubeletVersion", "v1.32.0-tern");
    kobj_set_str(c, "status.nodeInfo.kubeProxyVersion", "");
    kobj_set_str(c, "status.nodeInfo.operatingSystem", "linux");
    kobj_set_str(c, "status.nodeInfo.architecture", u.machine);
    kobj_set_str(c, "status.nodeInfo.kernelVersion", u.release);
    kobj_set_str(c, "status.nodeInfo.osImage", "tern-dev (bubblewrap)");
    kobj_set_str(c, "status.nodeInfo.containerRuntimeVersion", "bwrap://0.8");
    rc = objstore_update_status(k->s, "v1/nodes", "", c, NULL, err);
    cJSON_Delete(c);
    cJSON_Delete(node);
    if (rc == 0)
        k->last_node_ms = now_ms;
    return rc == TERN_ECONFLICT ? 0 : rc;
}

/* ---- pods ---- */

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
static void container_ended(struct kubelet *k, const cJSON *pod, struct kcont *c, int code,
                            const char *reason, const char *msg, int64_t started, int64_t now_ms)
{
    c->pid = 0;
    c->killing = false;
    c->ps.pid = 0;
    c->ps.ready = false;
    c->ready_succ = c->ready_fail = c->live_fail = 0;
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

static struct kpod *new_kpod(struct kubelet *k, const cJSON *pod, int64_t now_ms)
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
                    container_ended(k, pod, c, code, c->ps.term.reason, NULL,
                                    c->ps.term.started_at, now_ms - k->backoff);
            } else if (kobj_at(st, "state.running") && !p->terminal) {
                container_ended(k, pod, c, 137, "Error", "tern-dev restarted",
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
    if (!p->terminal)
        ip_alloc(k, want, p->ip); /* a terminal pod keeps its old podIP in status */
    k->pods = xreallocarray(k->pods, k->npods + 1, sizeof *k->pods);
    k->pods[k->npods++] = p;
    return p;
}

static bool isolated(struct kubelet *k, const cJSON *pod)
{
    const cJSON *np;
    cJSON_ArrayForEach(np, k->netpols)
    {
        const cJSON *sel = kobj_at(np, "spec.podSelector");
        if (sel && !kobj_selector_matches(sel, kobj_at(pod, "metadata.labels")))
            continue;
        bool egress = false, ingress = false;
        const cJSON *t;
        cJSON_ArrayForEach(t, kobj_at(np, "spec.policyTypes"))
        {
            egress |= cJSON_IsString(t) && strcmp(t->valuestring, "Egress") == 0;
            ingress |= cJSON_IsString(t) && strcmp(t->valuestring, "Ingress") == 0;
        }
        /* A network namespace of its own cuts the pod off in both directions
         * (pods share the host's loopback otherwise), so it is only used when
         * the policy allows neither egress nor ingress. A pod that denies
         * egress but admits some ingress (tern's sandbox: only its runners
         * may connect) stays reachable; its egress is not enforced here
         * (docs/tern-dev-kubelet.md). */
        if (egress && cJSON_GetArraySize(kobj_at(np, "spec.egress")) == 0 && ingress &&
            cJSON_GetArraySize(kobj_at(np, "spec.ingress")) == 0)
            return true;
    }
    return false;
}

static void fill_in(struct kubelet *k, struct kpod *p, const cJSON *pod, struct podplan_in *in)
{
    cache_ns(k, p->ns);
    *in = (struct podplan_in){
        .pod = pod,
        .configmaps = k->cms,
        .secrets = k->secrets,
        .pvcs = k->pvcs,
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
        .isolate_net = isolated(k, pod),
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

/* Writes the pod's volume files once. Returns 0, or an error that keeps the
 * containers waiting (message in err). */
static int prepare(struct kubelet *k, struct kpod *p, const cJSON *pod, struct tern_err *err)
{
    if (p->prepared)
        return 0;
    const char *sa_name = kobj_str(pod, "spec.serviceAccountName");
    sa_name = sa_name ? sa_name : "default";
    if (k->have_key && !p->sa_token && automount(k, pod, sa_name)) {
        cJSON *sa = NULL;
        int r = objstore_get(k->s, "v1/serviceaccounts", p->ns, sa_name, &sa, err);
        if (r == 0)
            r = satoken_mint(k->sa_key, p->ns, sa_name, kobj_str(sa, "metadata.uid"),
                             &p->sa_token, err);
        cJSON_Delete(sa);
        if (r)
            return err_wrap(err, r, "serviceaccount \"%s\"", sa_name);
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

static void write_pids(struct kubelet *k, struct kpod *p)
{
    (void)k;
    char buf[4096];
    size_t off = 0;
    for (size_t i = 0; i < p->nc && off < sizeof buf - 64; i++) {
        if (p->c[i].pid > 0) {
            int n = snprintf(buf + off, sizeof buf - off, "%d %lld\n", (int)p->c[i].pid,
                             (long long)proc_starttime(p->c[i].pid));
            if (n > 0)
                off += (size_t)n;
        }
    }
    char *path = xasprintf("%s/pids", p->dir);
    fsutil_write(path, buf, off, 0644, NULL);
    free(path);
}

static void cg_setup(struct kubelet *k, struct kpod *p, struct kcont *c, const struct podplan_exec *x)
{
    c->cg_mem[0] = c->cg_cpu[0] = 0;
    if (!k->cgroups)
        return;
    if (x->mem_limit > 0) {
        snprintf(c->cg_mem, sizeof c->cg_mem, CG_MEM "/%s_%s", p->uid, c->name);
        if (mkdir(c->cg_mem, 0755) != 0 && errno != EEXIST) {
            c->cg_mem[0] = 0;
        } else {
            char path[320], v[32];
            snprintf(path, sizeof path, "%s/memory.limit_in_bytes", c->cg_mem);
            write_str(path, num_fmt_i64(x->mem_limit, v));
            c->oom_before = 0;
        }
    }
    if (x->cpu_millis > 0) {
        snprintf(c->cg_cpu, sizeof c->cg_cpu, CG_CPU "/%s_%s", p->uid, c->name);
        if (mkdir(c->cg_cpu, 0755) != 0 && errno != EEXIST) {
            c->cg_cpu[0] = 0;
        } else {
            char path[320], v[32];
            snprintf(path, sizeof path, "%s/cpu.cfs_period_us", c->cg_cpu);
            write_str(path, "100000");
            snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", c->cg_cpu);
            write_str(path, num_fmt_i64(x->cpu_millis * 100, v));
        }
    }
}

static int64_t oom_kills(const struct kcont *c)
{
    if (!c->cg_mem[0])
        return 0;
    char path[320], *buf = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/memory.oom_control", c->cg_mem);
    if (fsutil_read(path, TERN_KUBELET_MAX_PROC_FILE, &buf, &len, NULL) != 0)
        return 0;
    int64_t v = 0;
    char *s = strstr(buf, "oom_kill ");
    if (s) {
        char *e = strchr(s + 9, '\n');
        if (num_parse_i64n(s + 9, e ? (size_t)(e - s - 9) : strlen(s + 9), &v) != 0)
            v = 0;
    }
    free(buf);
    return v;
}

/* fork+exec of a sandbox; the child writes its logs to log_path (NULL:
 * /dev/null). Returns the pid or -errno. */
static pid_t spawn(const struct podplan_exec *x, const char *log_path, const struct kcont *c)
{
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    int logfd = log_path ? open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)
                         : dup(devnull);
    int cgfd[2] = {-1, -1};
    for (int i = 0; i < 2; i++) {
        const char *dir = i == 0 ? c->cg_mem : c->cg_cpu;
        if (dir && dir[0]) {
            char path[320];
            snprintf(path, sizeof path, "%s/cgroup.procs", dir);
            cgfd[i] = open(path, O_WRONLY | O_CLOEXEC);
        }
    }
    if (devnull < 0 || logfd < 0) {
        int e = errno;
        if (devnull >= 0)
            close(devnull);
        if (logfd >= 0)
            close(logfd);
        for (int i = 0; i < 2; i++)
            if (cgfd[i] >= 0)
                close(cgfd[i]);
        return -e;
    }
    bool use_rlimit = x->mem_limit > 0 && !(c->cg_mem[0] && cgfd[0] >= 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        /* bwrap's --die-with-parent only ties the sandbox to bwrap itself:
         * tie bwrap to this thread, so no pod outlives the kubelet */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(125);
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        for (int s = 1; s < 32; s++)
            if (s != SIGKILL && s != SIGSTOP)
                signal(s, SIG_DFL);
        for (int i = 0; i < 2; i++)
            if (cgfd[i] >= 0 && write(cgfd[i], "0\n", 2) < 0)
                _exit(126);
        if (use_rlimit) {
            struct rlimit rl = {(rlim_t)x->mem_limit, (rlim_t)x->mem_limit};
            setrlimit(RLIMIT_DATA, &rl);
        }
        dup2(devnull, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        execve(x->argv[0], x->argv, x->envp);
        _exit(127);
    }
    int e = errno;
    close(devnull);
    close(logfd);
    for (int i = 0; i < 2; i++)
        if (cgfd[i] >= 0)
            close(cgfd[i]);
    if (pid < 0)
        return -e;
    setpgid(pid, pid);
    return pid;
}

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

static int start_container(struct kubelet *k, struct kpod *p, const cJSON *pod, struct kcont *c,
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
        cg_setup(k, p, c, &x);
        c->oom_before = oom_kills(c);
        termination_file_reset(p, x.termination_file);
        pid_t pid = spawn(&x, log, c);
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
            c->next_ready_ms = now_ms + kobj_int(rp, "initialDelaySeconds", 0) * 1000;
            c->next_live_ms = now_ms + kobj_int(lp, "initialDelaySeconds", 0) * 1000;
            c->ready_succ = c->ready_fail = c->live_fail = 0;
            write_pids(k, p);
        }
    }
    free(ldir);
    free(log);
    podplan_exec_done(&x);
    return rc;
}

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
        pid_t pid = spawn(&x, NULL, &none);
        podplan_exec_done(&x);
        if (pid < 0)
            return pid;
        int64_t deadline = now_real_ms() + timeout_ms;
        int st = 0;
        for (;;) {
            pid_t r = waitpid(pid, &st, WNOHANG);
            if (r == pid)
                break;
            if (now_real_ms() > deadline) {
                kill_sandbox(pid);
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

static void stop_container(struct kcont *c, int64_t grace_ms, int64_t now_ms)
{
    if (c->pid <= 0)
        return;
    if (!c->killing) {
        c->killing = true;
        c->kill_deadline_ms = now_ms + grace_ms;
        if (grace_ms <= 0 || signal_sandbox(c->pid, SIGTERM) == 0)
            kill_sandbox(c->pid);
    } else if (now_ms >= c->kill_deadline_ms) {
        kill_sandbox(c->pid);
    }
}

static void reap(struct kubelet *k, struct kpod *p, const cJSON *pod, int64_t now_ms)
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
        if (oom_kills(c) > c->oom_before)
            reason = "OOMKilled";
        cg_remove(c);
        char msg[4097];
        container_ended(k, pod, c, code, reason,
                        termination_message(p, pod, c, code, msg, sizeof msg), c->ps.started_at,
                        now_ms);
        write_pids(k, p);
    }
}

static void probes(struct kubelet *k, struct kpod *p, const cJSON *pod, int64_t now_ms)
{
    for (size_t i = 0; i < p->nc; i++) {
        struct kcont *c = &p->c[i];
        if (c->init || c->pid <= 0 || c->killing)
            continue;
        const cJSON *spec = cspec(pod, c);
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
                stop_container(c, grace * 1000, now_ms);
            }
        }
    }
}

static void first_start(struct kubelet *k, struct kpod *p, const cJSON *pod, struct kcont *c,
                        int64_t now_ms, struct tern_err *err, int *rc)
{
    int r = start_container(k, p, pod, c, now_ms, err);
    if (r && !*rc)
        *rc = r;
}

static int sync_pod(struct kubelet *k, struct kpod *p, const cJSON *pod, int64_t now_ms,
                    struct tern_err *err)
{
    int rc = 0;
    reap(k, p, pod, now_ms);
    bool deleting = kobj_deleting(pod);
    bool any_running = false;
    for (size_t i = 0; i < p->nc; i++)
        any_running |= p->c[i].pid > 0;

    if (deleting) {
        int64_t grace = kobj_int(pod, "metadata.deletionGracePeriodSeconds", 30);
        for (size_t i = 0; i < p->nc; i++) {
            struct kcont *c = &p->c[i];
            if (c->pid > 0)
                stop_container(c, grace * 1000, now_ms);
            else
                c->ps.done = true;
        }
        if (any_running)
            goto status;
    } else if (!p->terminal) {
        struct tern_err perr = {0};
        int pr = prepare(k, p, pod, &perr);
        if (pr) {
            for (size_t i = 0; i < p->nc; i++) {
                struct kcont *c = &p->c[i];
                c->ps.waiting_reason = "ContainerCreating";
                snprintf(c->wmsg, sizeof c->wmsg, "%s", perr.msg);
                c->ps.waiting_message = c->wmsg;
            }
        } else {
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
            probes(k, p, pod, now_ms);
        }
    }
status:;
    struct podstatus_container *cs = xcalloc(p->nc ? p->nc : 1, sizeof *cs);
    for (size_t i = 0; i < p->nc; i++)
        cs[i] = p->c[i].ps;
    cJSON *st = podstatus_build(pod, cs, p->nc, p->ip[0] ? p->ip : NULL, "127.0.0.1",
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
        ip_free(k, p->ip);
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

static struct kpod *find_pod(struct kubelet *k, const char *uid)
{
    for (size_t i = 0; i < k->npods; i++)
        if (strcmp(k->pods[i]->uid, uid) == 0)
            return k->pods[i];
    return NULL;
}

/* Whether pod's requests fit this node's allocatable (podplan_fits); if
 * not, its status says Unschedulable (written when it changes). */
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

int kubelet_sync(struct kubelet *k, int64_t now_ms, struct tern_err *err)
{
    int rc = sync_node(k, now_ms, err);
    cJSON *pods = list_items(k, "v1/pods", NULL);
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
        if (!node || !*node) {
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
            p = new_kpod(k, view, now_ms);
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
        free_pod(k, p);
        fsutil_rmtree(dir, NULL);
        free(dir);
        k->pods[i] = k->pods[--k->npods];
    }
    cache_clear(k);
    return rc;
}

int kubelet_run(struct kubelet *k, volatile int *stop, int period_ms)
{
    /* Also remove pod directories left by pods that no longer exist. */
    bool swept = false;
    while (!*stop) {
        kubelet_sync(k, now_real_ms(), NULL);
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
        cJSON *l = NULL;
        char rv[32] = "0";
        if (objstore_list(k->s, "v1/namespaces", NULL, &l, NULL) == 0) {
            const char *s = kobj_str(l, "metadata.resourceVersion");
            if (s && strlen(s) < sizeof rv)
                memcpy(rv, s, strlen(s) + 1);
        }
        cJSON_Delete(l);
        objstore_wait(k->s, rv, period_ms, NULL);
    }
    return 0;
}

void kubelet_shutdown(struct kubelet *k, int grace_ms)
{
    int64_t now = now_real_ms(), deadline = now + grace_ms;
    for (size_t i = 0; i < k->npods; i++)
        for (size_t j = 0; j < k->pods[i]->nc; j++)
            stop_container(&k->pods[i]->c[j], grace_ms, now);
    for (;;) {
        bool any = false;
        for (size_t i = 0; i < k->npods; i++) {
            for (size_t j = 0; j < k->pods[i]->nc; j++) {
                struct kcont *c = &k->pods[i]->c[j];
                if (c->pid <= 0)
                    continue;
                if (waitpid(c->pid, NULL, WNOHANG) == c->pid) {
                    c->pid = 0;
                    cg_remove(c);
                    continue;
                }
                any = true;
                if (now_real_ms() >= deadline)
                    kill_sandbox(c->pid);
            }
        }
        if (!any)
            break;
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
}

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
