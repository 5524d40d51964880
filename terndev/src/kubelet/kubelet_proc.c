/* kubelet_proc.c - the kubelet's processes: finding and signalling a
 * sandbox's processes in /proc, killing what a previous instance on the
 * same DIR left running, the pids file, cgroup v1 limits and OOM counts,
 * and the fork+exec of a sandbox. See kubelet_internal.h. */
#include "kubelet/kubelet_internal.h"

#include "base/limits.h"
#include "base/mem.h"
#include "base/num.h"
#include "devctl/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define CG_MEM "/sys/fs/cgroup/memory/tern-dev"
#define CG_CPU "/sys/fs/cgroup/cpu/tern-dev"

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

int kubelet__signal_sandbox(pid_t outer, int sig)
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
void kubelet__kill_sandbox(pid_t outer)
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

/* ---- leftovers of a previous instance ---- */

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

void kubelet__kill_leftovers(struct kubelet *k)
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

/* ---- cgroups ---- */

static bool write_str(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = write(fd, s, strlen(s));
    close(fd);
    return n == (ssize_t)strlen(s);
}

bool kubelet__cg_usable(void)
{
    return (mkdir(CG_MEM, 0755) == 0 || errno == EEXIST) &&
           (mkdir(CG_CPU, 0755) == 0 || errno == EEXIST) && access(CG_MEM, W_OK) == 0 &&
           access(CG_CPU, W_OK) == 0;
}

void kubelet__cg_remove(struct kcont *c)
{
    if (c->cg_mem[0])
        rmdir(c->cg_mem);
    if (c->cg_cpu[0])
        rmdir(c->cg_cpu);
    c->cg_mem[0] = c->cg_cpu[0] = 0;
}

void kubelet__cg_setup(struct kubelet *k, struct kpod *p, struct kcont *c,
                       const struct podplan_exec *x)
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

int64_t kubelet__oom_kills(const struct kcont *c)
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

/* ---- pids file, spawning ---- */

void kubelet__write_pids(struct kubelet *k, struct kpod *p)
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

pid_t kubelet__spawn(const struct podplan_exec *x, const char *log_path, const struct kcont *c)
{
    int nsfd = x->netns ? open(x->netns, O_RDONLY | O_CLOEXEC) : -1;
    if (x->netns && nsfd < 0)
        return -errno;
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
        if (nsfd >= 0)
            close(nsfd);
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
        /* the pod's own network namespace (its NetworkPolicy's filter) */
        if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) != 0)
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
    if (nsfd >= 0)
        close(nsfd);
    for (int i = 0; i < 2; i++)
        if (cgfd[i] >= 0)
            close(cgfd[i]);
    if (pid < 0)
        return -e;
    setpgid(pid, pid);
    return pid;
}
