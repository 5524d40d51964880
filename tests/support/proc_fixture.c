/* proc_fixture.c - child processes for tests (see proc_fixture.h). */
#include "proc_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *proc_build_dir(void)
{
    const char *b = getenv("TERN_BUILD");
    return b && *b ? b : "build";
}

static void child_io(const char *log_path, int out_fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setpgid(0, 0);
    if (log_path) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            if (out_fd < 0)
                dup2(fd, 1);
        }
    }
    if (out_fd >= 0)
        dup2(out_fd, 1);
}

int proc_start_server(struct proc *p, char *const argv[], const char *marker,
                      const char *log_path, long timeout_ms, struct tern_err *err)
{
    int pfd[2];
    memset(p, 0, sizeof *p);
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return err_set(err, -errno, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return err_set(err, -errno, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        child_io(log_path, pfd[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(pfd[1]);
    p->pid = pid;
    char buf[1024];
    size_t len = 0;
    long long deadline = now_ms() + timeout_ms;
    int rc = TERN_ETIMEOUT;
    for (;;) {
        buf[len] = 0;
        const char *m = strstr(buf, marker);
        if (m && strchr(m, '\n')) {
            m += strlen(marker);
            size_t n = strcspn(m, " \r\n");
            if (n >= sizeof p->addr)
                n = sizeof p->addr - 1;
            memcpy(p->addr, m, n);
            p->addr[n] = 0;
            rc = 0;
            break;
        }
        long long left = deadline - now_ms();
        struct pollfd pf = {pfd[0], POLLIN, 0};
        if (left <= 0 || len >= sizeof buf - 1 || poll(&pf, 1, (int)left) <= 0)
            break;
        ssize_t n = read(pfd[0], buf + len, sizeof buf - 1 - len);
        if (n <= 0) {
            rc = -EPIPE;
            break;
        }
        len += (size_t)n;
    }
    close(pfd[0]);
    if (rc) {
        proc_kill(p);
        return err_set(err, rc, "%s did not announce \"%s\" within %ld ms", argv[0], marker,
                       timeout_ms);
    }
    return 0;
}

int proc_spawn(struct proc *p, char *const argv[], char *const env[], const char *log_path,
               struct tern_err *err)
{
    memset(p, 0, sizeof *p);
    pid_t pid = fork();
    if (pid < 0)
        return err_set(err, -errno, "fork: %s", strerror(errno));
    if (pid == 0) {
        child_io(log_path, -1);
        execve(argv[0], argv, env);
        _exit(127);
    }
    p->pid = pid;
    return 0;
}

int proc_wait(struct proc *p, long timeout_ms)
{
    if (p->pid <= 0)
        return -ECHILD;
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) {
            p->pid = 0;
            if (WIFEXITED(st))
                return WEXITSTATUS(st);
            return 128 + WTERMSIG(st);
        }
        if (r < 0)
            return -errno;
        if (now_ms() >= deadline) {
            proc_kill(p);
            return -ETIMEDOUT;
        }
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int proc_wait_stopped(struct proc *p, long timeout_ms)
{
    if (p->pid <= 0)
        return -ECHILD;
    long long deadline = now_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t r = waitpid(p->pid, &st, WNOHANG | WUNTRACED);
        if (r == p->pid) {
            if (WIFSTOPPED(st))
                return 0;
            p->pid = 0; /* it ended instead */
            return -ESRCH;
        }
        if (r < 0)
            return -errno;
        if (now_ms() >= deadline)
            return -ETIMEDOUT;
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void proc_kill(struct proc *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}

void proc_stop(struct proc *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGTERM);
    if (proc_wait(p, 5000) < 0)
        proc_kill(p);
    p->pid = 0;
}
