/* sbexec.c - runs one command. See sbexec.h. */
#include "sbexec.h"

#include "base/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/landlock.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE /* ABI 3; Debian 12's headers stop at 2 */
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define DRAIN_MS 1000 /* after the main process exits, how long to wait for EOF */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sbexec_landlock_abi(void)
{
    long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    return v < 0 ? 0 : (int)v;
}

/* A ruleset fd allowing writes beneath dirs only; -1 when Landlock is off. */
static int landlock_ruleset(const char *const *dirs)
{
    int abi = sbexec_landlock_abi();
    if (abi <= 0)
        return -1;
    __u64 w = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
              LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
              LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
              LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
              LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
    if (abi >= 2)
        w |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3)
        w |= LANDLOCK_ACCESS_FS_TRUNCATE;
    struct landlock_ruleset_attr attr = {.handled_access_fs = w};
    int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (rs < 0)
        return -1;
    for (size_t i = 0; dirs[i]; i++) {
        int fd = open(dirs[i], O_PATH | O_CLOEXEC | O_DIRECTORY);
        if (fd < 0)
            continue; /* a missing dir simply grants nothing */
        struct landlock_path_beneath_attr pb = {.allowed_access = w, .parent_fd = fd};
        syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
        close(fd);
    }
    return rs;
}

static const char *env_value(char *const *env, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; env && env[i]; i++)
        if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}

/* Builds the child's environment: defaults, then base_env, then the
 * request's additions; a later NAME replaces an earlier one. */
static char **build_env(const struct sbexec_opts *o)
{
    const char *defaults[] = {"PATH=" DEFAULT_PATH, "LANG=C.UTF-8", "TERM=dumb", "TMPDIR=/tmp",
                              NULL};
    size_t nbase = 0, nadd = 0;
    while (o->base_env && o->base_env[nbase])
        nbase++;
    while (o->env_add && o->env_add[nadd])
        nadd++;
    char **env = xcalloc(nbase + nadd + 6, sizeof *env);
    size_t n = 0;
    char *home = xasprintf("HOME=%s", o->home ? o->home : "/tmp");
    /* every candidate in order of precedence, lowest first */
    size_t ncand = 5 + nbase + nadd;
    const char **cand = xcalloc(ncand, sizeof *cand);
    size_t k = 0;
    for (size_t i = 0; defaults[i]; i++)
        cand[k++] = defaults[i];
    cand[k++] = home;
    for (size_t i = 0; i < nbase; i++)
        cand[k++] = o->base_env[i];
    for (size_t i = 0; i < nadd; i++)
        cand[k++] = o->env_add[i];
    for (size_t i = 0; i < k; i++) {
        size_t kl = strcspn(cand[i], "=");
        bool overridden = false;
        for (size_t j = i + 1; j < k && !overridden; j++)
            overridden = strncmp(cand[j], cand[i], kl + 1) == 0;
        if (!overridden)
            env[n++] = xstrdup(cand[i]);
    }
    env[n] = NULL;
    free(cand);
    free(home);
    return env;
}

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* The program path: argv0 itself if it has a '/', else the first executable
 * match in PATH; NULL when nothing matches (the child reports ENOENT). */
static char *find_program(const char *argv0, char *const *env)
{
    if (strchr(argv0, '/'))
        return xstrdup(argv0);
    const char *path = env_value(env, "PATH");
    if (!path)
        path = DEFAULT_PATH;
    const char *p = path;
    while (*p) {
        size_t n = strcspn(p, ":");
        char *cand = xasprintf("%.*s/%s", (int)n, p, argv0);
        struct stat st;
        if (n && stat(cand, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
            return cand;
        free(cand);
        p += n;
        if (*p == ':')
            p++;
    }
    return NULL;
}

/* The status pipe carries these records (each one write, atomic below
 * PIPE_BUF): the command's child reports an exec failure, the shim the
 * command's wait status once every process of the command is gone. */
enum { MSG_EXEC_ERRNO = 1, MSG_WAIT_STATUS = 2 };
struct shim_msg {
    int kind;
    int value;
};

/* Fixed descriptors in the shim and the command's child. */
enum { FD_STATUS = 3, FD_RULESET = 4 };

static void send_msg(int fd, int kind, int value)
{
    struct shim_msg m = {kind, value};
    while (write(fd, &m, sizeof m) < 0 && errno == EINTR)
        ;
}

/* The command's own process: only async-signal-safe calls until execve. */
static _Noreturn void command(const struct sbexec_opts *o, const char *prog, char **env,
                              bool ruleset)
{
    int e = 0;
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &dfl, NULL);
    struct rlimit rl;
    struct {
        int res;
        long v;
    } lims[] = {{RLIMIT_NPROC, o->lim.nproc},
                {RLIMIT_FSIZE, o->lim.fsize},
                {RLIMIT_NOFILE, o->lim.nofile},
                {RLIMIT_CPU, o->lim.cpu_seconds},
                {RLIMIT_CORE, -1}};
    for (size_t i = 0; i < sizeof lims / sizeof *lims; i++) {
        if (lims[i].v == 0)
            continue;
        rl.rlim_cur = rl.rlim_max = lims[i].v < 0 ? 0 : (rlim_t)lims[i].v;
        if (setrlimit(lims[i].res, &rl) != 0)
            goto fail;
    }
    if (o->uid != (uid_t)-1) {
        if (setgroups(0, NULL) != 0 || setresgid(o->gid, o->gid, o->gid) != 0 ||
            setresuid(o->uid, o->uid, o->uid) != 0)
            goto fail;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        goto fail;
    /* if the shim dies, the command's main process goes with it */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (ruleset && syscall(SYS_landlock_restrict_self, FD_RULESET, 0) != 0)
        goto fail;
    /* nothing but stdin/stdout/stderr reaches the program */
    syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
    if (prog)
        execve(prog, o->argv, env);
    else
        errno = ENOENT;
fail:
    e = errno;
    send_msg(FD_STATUS, MSG_EXEC_ERRNO, e);
    _exit(127);
}

/* Decimal digits of v into p (no terminator); returns the length. */
static size_t fmt_uint(char *p, unsigned long v)
{
    char t[24];
    size_t n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = t[n - 1 - i];
    return n;
}

/* SIGKILLs every pid listed in a stream of decimal numbers separated by
 * anything else (the /proc children file). Returns how many. */
static int kill_listed(int fd)
{
    char b[4096];
    long cur = -1;
    int n = 0;
    for (;;) {
        ssize_t k = read(fd, b, sizeof b);
        if (k < 0 && errno == EINTR)
            continue;
        for (ssize_t i = 0; i <= k; i++) {
            bool digit = i < k && b[i] >= '0' && b[i] <= '9';
            if (digit) {
                cur = (cur < 0 ? 0 : cur) * 10 + (b[i] - '0');
                if (cur > 0x7fffffff)
                    cur = 0x7fffffff;
            } else if (i < k && cur > 0) {
                kill((pid_t)cur, SIGKILL);
                n++;
                cur = -1;
            } else if (i < k) {
                cur = -1;
            }
        }
        if (k <= 0)
            break;
    }
    if (cur > 0) {
        kill((pid_t)cur, SIGKILL);
        n++;
    }
    return n;
}

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* The parent pid in a /proc/<pid>/stat text: the second field after the
 * last ')' (the command name may hold anything). -1 when unreadable. */
static long stat_ppid(const char *b, size_t n)
{
    size_t close = n;
    for (size_t i = n; i-- > 0;)
        if (b[i] == ')') {
            close = i;
            break;
        }
    if (close == n || close + 4 >= n)
        return -1;
    size_t i = close + 2; /* state */
    while (i < n && b[i] != ' ')
        i++;
    long v = 0;
    bool any = false;
    for (i++; i < n && b[i] >= '0' && b[i] <= '9'; i++) {
        v = v * 10 + (b[i] - '0');
        any = true;
        if (v > 0x7fffffff)
            return -1;
    }
    return any ? v : -1;
}

/* Without /proc/<pid>/task/<pid>/children (CONFIG_PROC_CHILDREN): scans
 * /proc for processes whose parent is self and SIGKILLs them. */
static int kill_children_scan(pid_t self)
{
    int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    char d[8192];
    int n = 0;
    for (;;) {
        long k = syscall(SYS_getdents64, dfd, d, sizeof d);
        if (k <= 0)
            break;
        for (long off = 0; off < k;) {
            struct linux_dirent64 *e = (struct linux_dirent64 *)(d + off);
            off += e->d_reclen;
            long pid = 0;
            bool num = e->d_name[0] != '\0';
            for (const char *c = e->d_name; *c && num; c++) {
                num = *c >= '0' && *c <= '9';
                pid = pid * 10 + (*c - '0');
                if (pid > 0x7fffffff)
                    num = false;
            }
            if (!num || pid == self)
                continue;
            char path[64] = "/proc/";
            size_t pl = 6 + fmt_uint(path + 6, (unsigned long)pid);
            memcpy(path + pl, "/stat", 6);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                continue;
            char st[1024];
            ssize_t r = read(fd, st, sizeof st);
            close(fd);
            if (r > 0 && stat_ppid(st, (size_t)r) == (long)self) {
                kill((pid_t)pid, SIGKILL);
                n++;
            }
        }
    }
    close(dfd);
    return n;
}

/* SIGKILLs every child of self (the processes the subreaper adopted, and
 * its own). Returns how many were signalled, or -1 when /proc is not
 * readable at all. */
static int kill_children(pid_t self)
{
    char path[80] = "/proc/self/task/";
    size_t pl = 16 + fmt_uint(path + 16, (unsigned long)self);
    memcpy(path + pl, "/children", 10);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kill_children_scan(self);
    int n = kill_listed(fd);
    close(fd);
    return n;
}

/* The shim: the process between sandboxd and the command. It is a child
 * subreaper, so every process the command starts, however it detaches
 * (setsid, double fork), is re-parented to it when its own parent dies.
 * When the command's main process ends, or sandboxd says so (SIGUSR1), it
 * SIGKILLs the command's group and then, generation by generation, every
 * child it has left, until it has none; then it reports the command's wait
 * status on the status pipe and exits. SIGTERM (the timeout) is passed on to
 * the command's group. Only async-signal-safe calls: it is a fork of a
 * threaded process. */
static _Noreturn void shim(const struct sbexec_opts *o, const char *prog, char **env, int in_r,
                           int out_w, int err_w, int status_w, int ruleset, pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGUSR1);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGPIPE);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    /* the descriptors the command needs at fixed places, nothing else kept
     * (a shim outlives a fork-to-exec window: it must not hold another
     * exec's pipes open) */
    int keep[5] = {in_r, out_w, err_w, status_w, ruleset};
    for (int i = 0; i < 5; i++)
        if (keep[i] >= 0 && (keep[i] = fcntl(keep[i], F_DUPFD, 64)) < 0)
            _exit(126);
    if (fchdir(o->cwd_fd) != 0 || dup2(keep[0], 0) < 0 || dup2(keep[1], 1) < 0 ||
        dup2(keep[2], 2) < 0 || dup2(keep[3], FD_STATUS) < 0 ||
        (keep[4] >= 0 && dup2(keep[4], FD_RULESET) < 0)) {
        send_msg(status_w, MSG_EXEC_ERRNO, errno);
        _exit(127);
    }
    syscall(SYS_close_range, keep[4] >= 0 ? FD_RULESET + 1 : FD_RULESET, ~0U, 0);
    fcntl(FD_STATUS, F_SETFD, FD_CLOEXEC);
    if (getppid() != parent)
        _exit(126); /* sandboxd died before PDEATHSIG was armed (it may be PID 1) */
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC);
    pid_t self = getpid();
    pid_t cmd = fork();
    if (cmd < 0) {
        send_msg(FD_STATUS, MSG_EXEC_ERRNO, errno);
        _exit(127);
    }
    if (cmd == 0)
        command(o, prog, env, keep[4] >= 0);
    setpgid(cmd, cmd); /* also done by the command; whichever runs first wins */
    /* the pipes stay with the command; ours would only delay its EOF */
    close(0);
    close(1);
    close(2);
    if (keep[4] >= 0)
        close(FD_RULESET);
    int wstatus = 0;
    bool done = false, kill_all = false;
    while (!done && !kill_all) {
        struct signalfd_siginfo si;
        ssize_t k = sfd >= 0 ? read(sfd, &si, sizeof si) : -1;
        if (k < 0 && errno == EINTR)
            continue;
        int sig = k == (ssize_t)sizeof si ? (int)si.ssi_signo : SIGCHLD;
        if (sfd < 0) {
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL); /* no signalfd: poll for the exit */
        }
        if (sig == SIGTERM)
            kill(-cmd, SIGTERM);
        else if (sig == SIGUSR1)
            kill_all = true;
        int st;
        pid_t w;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0)
            if (w == cmd) {
                wstatus = st;
                done = true;
            }
    }
    /* everything the command left behind goes with it */
    kill(-cmd, SIGKILL);
    for (;;) {
        if (kill_children(self) < 0)
            kill(-cmd, SIGKILL); /* no /proc: the group is all we can reach */
        int st;
        pid_t w = waitpid(-1, &st, 0);
        if (w < 0 && errno == ECHILD)
            break;
        if (w == cmd && !done) {
            wstatus = st;
            done = true;
        }
        while ((w = waitpid(-1, &st, WNOHANG)) > 0)
            if (w == cmd && !done) {
                wstatus = st;
                done = true;
            }
    }
    send_msg(FD_STATUS, MSG_WAIT_STATUS, wstatus);
    _exit(0);
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void closep(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Reads what is available from *fd into b (up to max kept), counting total.
 * Returns after at most 16 chunks so a command that writes without end
 * cannot keep the caller from its deadline checks. */
static void pump(const struct sbexec_opts *o, int stream, int *fd, struct buf *b, size_t max,
                 uint64_t *total, bool *truncated)
{
    char chunk[65536];
    for (int i = 0; i < 16; i++) {
        ssize_t k = read(*fd, chunk, sizeof chunk);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == EAGAIN)
            return;
        if (k <= 0) {
            closep(fd);
            return;
        }
        *total += (uint64_t)k;
        if (o->on_output)
            o->on_output(o->output_ctx, stream, chunk, (size_t)k);
        size_t room = b->len < max ? max - b->len : 0;
        size_t take = (size_t)k < room ? (size_t)k : room;
        if (take)
            buf_append(b, chunk, take);
        if (take < (size_t)k)
            *truncated = true;
    }
}

void sbexec_result_done(struct sbexec_result *r)
{
    buf_done(&r->out);
    buf_done(&r->err);
}

int sbexec_run(const struct sbexec_opts *o, struct sbexec_result *ret, struct tern_err *err)
{
    if (!o->argv || !o->argv[0])
        return err_set(err, -EINVAL, "empty argv");
    struct sbexec_result res = {0};
    buf_init(&res.out, o->max_output + 1);
    buf_init(&res.err, o->max_output + 1);
    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1}, st[2] = {-1, -1};
    int pidfd = -1, ruleset = -1, rc = 0;
    char **env = build_env(o);
    char *prog = find_program(o->argv[0], env);
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(er, O_CLOEXEC) ||
        pipe2(st, O_CLOEXEC)) {
        rc = err_set(err, -errno, "pipe: %s", strerror(errno));
        goto out;
    }
    if (o->landlock_dirs) {
        ruleset = landlock_ruleset(o->landlock_dirs);
        res.landlocked = ruleset >= 0;
    }
    int64_t t0 = now_ms();
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        rc = err_set(err, -errno, "fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0)
        shim(o, prog, env, in[0], out[1], er[1], st[1], ruleset, parent);
    setpgid(pid, pid); /* also done by the shim; whichever runs first wins */
    closep(&in[0]);
    closep(&out[1]);
    closep(&er[1]);
    closep(&st[1]);
    closep(&ruleset);
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    set_nonblock(in[1]);
    set_nonblock(out[0]);
    set_nonblock(er[0]);
    set_nonblock(st[0]);
    size_t in_off = 0;
    if (!o->stdin_data || o->stdin_len == 0)
        closep(&in[1]);

    int64_t deadline = t0 + o->timeout_ms;
    int64_t grace = o->kill_grace_ms > 0 ? o->kill_grace_ms : 2000;
    int64_t kill_at = -1, drain_until = -1, hard_at = -1;
    bool exited = false, termed = false, killed = false, hard = false;
    int wstatus = 0;
    while (!exited || ((out[0] >= 0 || er[0] >= 0) && now_ms() < drain_until)) {
        int64_t now = now_ms();
        if (!exited && !termed && now >= deadline) {
            kill(pid, SIGTERM); /* the shim passes it on to the command's group */
            termed = true;
            res.status = SBEXEC_TIMEOUT;
            kill_at = now + grace;
        }
        if (!exited && termed && !killed && now >= kill_at) {
            kill(pid, SIGUSR1); /* the shim kills every process of the command */
            killed = true;
            hard_at = now + grace + 5000;
        }
        if (!exited && killed && !hard && now >= hard_at) {
            kill(pid, SIGKILL); /* a shim that does not finish (cannot happen) */
            hard = true;
        }
        int64_t wake = exited    ? drain_until
                       : !termed ? deadline
                       : !killed ? kill_at
                       : !hard   ? hard_at
                                 : now + 100;
        struct pollfd p[4];
        int np = 0, iout = -1, ierr = -1, iin = -1, ipid = -1;
        if (out[0] >= 0)
            p[iout = np++] = (struct pollfd){.fd = out[0], .events = POLLIN};
        if (er[0] >= 0)
            p[ierr = np++] = (struct pollfd){.fd = er[0], .events = POLLIN};
        if (in[1] >= 0)
            p[iin = np++] = (struct pollfd){.fd = in[1], .events = POLLOUT};
        if (!exited && pidfd >= 0)
            p[ipid = np++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
        int64_t wait = wake - now;
        if (wait < 0)
            wait = 0;
        if (!exited && pidfd < 0 && wait > 20)
            wait = 20; /* no pidfd: poll for the exit */
        int pr = poll(p, (nfds_t)np, (int)wait);
        if (pr < 0 && errno != EINTR) {
            rc = err_set(err, -errno, "poll: %s", strerror(errno));
            kill(pid, SIGUSR1);
            waitpid(pid, &wstatus, 0);
            goto out;
        }
        if (iout >= 0 && p[iout].revents)
            pump(o, 0, &out[0], &res.out, o->max_output, &res.out_total, &res.truncated);
        if (ierr >= 0 && p[ierr].revents)
            pump(o, 1, &er[0], &res.err, o->max_output, &res.err_total, &res.truncated);
        if (iin >= 0 && p[iin].revents) {
            if (p[iin].revents & (POLLERR | POLLHUP)) {
                closep(&in[1]);
            } else {
                ssize_t k = write(in[1], (const char *)o->stdin_data + in_off,
                                  o->stdin_len - in_off);
                if (k > 0)
                    in_off += (size_t)k;
                if ((k < 0 && errno != EAGAIN && errno != EINTR) || in_off == o->stdin_len)
                    closep(&in[1]);
            }
        }
        if (!exited && (ipid < 0 || p[ipid].revents)) {
            pid_t w = waitpid(pid, &wstatus, WNOHANG);
            if (w == pid) {
                exited = true;
                res.duration_ms = now_ms() - t0;
                closep(&in[1]);
                drain_until = now_ms() + DRAIN_MS;
            }
        }
    }
    /* the shim's wait status of the command (its own only if it died) */
    struct shim_msg m;
    while (read(st[0], &m, sizeof m) == (ssize_t)sizeof m) {
        if (m.kind == MSG_WAIT_STATUS) {
            wstatus = m.value;
        } else if (m.kind == MSG_EXEC_ERRNO) {
            const char *what = prog ? prog : o->argv[0];
            buf_printf(&res.err, "tern-sandboxd: cannot execute %.200s: %s\n", what,
                       strerror(m.value));
            res.err_total = res.err.len;
        }
    }
    if (WIFEXITED(wstatus)) {
        res.exited = true;
        res.exit_code = WEXITSTATUS(wstatus);
    } else if (WIFSIGNALED(wstatus)) {
        res.term_signal = WTERMSIG(wstatus);
    }
    *ret = res;
    res = (struct sbexec_result){0};
out:
    sbexec_result_done(&res);
    closep(&in[0]), closep(&in[1]), closep(&out[0]), closep(&out[1]);
    closep(&er[0]), closep(&er[1]), closep(&st[0]), closep(&st[1]);
    closep(&pidfd);
    closep(&ruleset);
    free(prog);
    free_strv(env);
    return rc;
}
