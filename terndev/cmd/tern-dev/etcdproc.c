/* etcdproc.c - see etcdproc.h. */
#include "etcdproc.h"

#include "base/mem.h"
#include "etcd/etcd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int r;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || getsockname(fd, (struct sockaddr *)&a, &len))
        r = -errno;
    else
        r = ntohs(a.sin_port);
    close(fd);
    return r;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int etcdproc_start(struct etcdproc *p, const char *data_dir, struct tern_err *err)
{
    int cport = free_port(), pport = free_port();
    if (cport < 0 || pport < 0)
        return err_set(err, cport < 0 ? cport : pport, "no free port");
    snprintf(p->url, sizeof(p->url), "http://127.0.0.1:%d", cport);
    char *purl = xasprintf("http://127.0.0.1:%d", pport);
    char *cluster = xasprintf("default=%s", purl);
    char *log = xasprintf("%s.log", data_dir);
    const char *bin = getenv("TERN_ETCD_BIN") ? getenv("TERN_ETCD_BIN") : "/usr/bin/etcd";
    const char *argv[] = {bin, "--name", "default", "--data-dir", data_dir,
                          "--listen-client-urls", p->url, "--advertise-client-urls", p->url,
                          "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                          "--initial-cluster", cluster, "--logger", "zap", "--log-level", "warn",
                          NULL};
    int rc = 0;
    int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (lfd < 0) {
        rc = err_set(err, -errno, "cannot open %s", log);
        goto out;
    }
    pid_t pid = fork();
    if (pid < 0) {
        rc = err_set(err, -errno, "fork failed");
        close(lfd);
        goto out;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        dup2(lfd, 1);
        dup2(lfd, 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(lfd);
    p->pid = pid;
    const char *eps[] = {p->url};
    struct etcd_config ec = {.endpoints = eps, .nendpoints = 1, .timeout_ms = 1000,
                             .connect_timeout_ms = 500};
    struct etcd *c = NULL;
    rc = etcd_new(&ec, &c, err);
    if (rc)
        goto out;
    long deadline = now_ms() + 30000;
    for (;;) {
        int64_t rev;
        if (etcd_revision(c, &rev, NULL) == 0)
            break;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            p->pid = 0;
            rc = err_set(err, -ECHILD, "etcd exited during startup; see %s", log);
            break;
        }
        if (now_ms() > deadline) {
            rc = err_set(err, TERN_ETIMEOUT, "etcd did not become ready; see %s", log);
            break;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    etcd_free(c);
out:
    if (rc)
        etcdproc_stop(p);
    free(purl);
    free(cluster);
    free(log);
    return rc;
}

void etcdproc_stop(struct etcdproc *p)
{
    if (!p->pid)
        return;
    kill(p->pid, SIGTERM);
    long deadline = now_ms() + 10000;
    for (;;) {
        int st;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid || (r < 0 && errno != EINTR))
            break;
        if (now_ms() > deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            break;
        }
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    p->pid = 0;
}
