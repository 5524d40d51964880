/* etcd_fixture.c - see etcd_fixture.h. */
#include "etcd_fixture.h"

#include "base/buf.h"
#include "http/httpc.h"

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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int etcd_fixture_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int r;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len))
        r = -errno;
    else
        r = ntohs(a.sin_port);
    close(fd);
    return r;
}

/* Appends the last ~1500 bytes of etcd's log to err. */
static void log_tail(const struct etcd_fixture *f, struct tern_err *err)
{
    if (!err)
        return;
    int fd = open(f->log, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char tail[1500];
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)sizeof tail - 1 ? end - (off_t)sizeof tail + 1 : 0;
    ssize_t n = pread(fd, tail, sizeof tail - 1, from);
    close(fd);
    if (n <= 0)
        return;
    tail[n] = 0;
    size_t used = strlen(err->msg);
    if (used + 16 >= sizeof err->msg)
        return;
    size_t room = sizeof err->msg - used - 8;
    const char *t = tail;
    if ((size_t)n > room)
        t = tail + (size_t)n - room;
    int len = (int)strlen(t);
    snprintf(err->msg + used, sizeof err->msg - used, "; log: %.*s", len, t);
}

static int spawn(struct etcd_fixture *f, struct tern_err *err)
{
    char data[600], curl_[160], purl[80], cluster[120];
    snprintf(data, sizeof data, "%s/data", f->dir);
    if (f->tls_port)
        snprintf(curl_, sizeof curl_, "http://127.0.0.1:%d,%s", f->client_port, f->tls_url);
    else
        snprintf(curl_, sizeof curl_, "http://127.0.0.1:%d", f->client_port);
    snprintf(purl, sizeof purl, "http://127.0.0.1:%d", f->peer_port);
    snprintf(cluster, sizeof cluster, "default=%s", purl);
    const char *bin = getenv("TERN_ETCD_BIN");
    if (!bin || !*bin)
        bin = "/usr/bin/etcd";
    const char *argv[64];
    size_t n = 0;
    argv[n++] = bin;
    argv[n++] = "--name=default";
    argv[n++] = "--data-dir";
    argv[n++] = data;
    argv[n++] = "--listen-client-urls";
    argv[n++] = curl_;
    argv[n++] = "--advertise-client-urls";
    argv[n++] = curl_;
    argv[n++] = "--listen-peer-urls";
    argv[n++] = purl;
    argv[n++] = "--initial-advertise-peer-urls";
    argv[n++] = purl;
    argv[n++] = "--initial-cluster";
    argv[n++] = cluster;
    argv[n++] = "--log-level=warn";
    argv[n++] = "--logger=zap";
    char certf[600], keyf[600], caf[600];
    if (f->tls_port) {
        snprintf(certf, sizeof certf, "--cert-file=%s", f->opts.cert_file);
        snprintf(keyf, sizeof keyf, "--key-file=%s", f->opts.key_file);
        argv[n++] = certf;
        argv[n++] = keyf;
        if (f->opts.trusted_ca_file) {
            snprintf(caf, sizeof caf, "--trusted-ca-file=%s", f->opts.trusted_ca_file);
            argv[n++] = caf;
            argv[n++] = "--client-cert-auth";
        }
    }
    for (const char *const *p = f->opts.extra_args; p && *p && n < 62; p++)
        argv[n++] = *p;
    argv[n] = NULL;

    int logfd = open(f->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0)
        return err_set(err, -errno, "etcd fixture: open %s: %s", f->log, strerror(errno));
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(logfd);
        return err_set(err, -e, "etcd fixture: fork: %s", strerror(e));
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(logfd, 1);
        dup2(logfd, 2);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0)
            dup2(nul, 0);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(logfd);
    f->pid = pid;
    return 0;
}

/* Polls /health until it says true, etcd exits, or the deadline passes. */
static int wait_ready(struct etcd_fixture *f, struct tern_err *err)
{
    long timeout = f->opts.ready_timeout_ms > 0 ? f->opts.ready_timeout_ms : 20000;
    long deadline = now_ms() + timeout;
    char url[96];
    snprintf(url, sizeof url, "%s/health", f->url);
    struct httpc *h = httpc_new();
    int r = 0;
    for (;;) {
        int st;
        pid_t w = waitpid(f->pid, &st, WNOHANG);
        if (w == f->pid) {
            f->pid = 0;
            r = err_set(err, -ECHILD, "etcd fixture: etcd exited during startup (status %d)", st);
            log_tail(f, err);
            break;
        }
        struct httpc_request req = {
            .url = url, .timeout_ms = 1000, .connect_timeout_ms = 500, .max_body = 4096};
        struct httpc_response resp;
        int hr = httpc_do(h, &req, &resp, NULL);
        bool ok = hr == 0 && resp.status == 200 && strstr(buf_str(&resp.body), "\"true\"");
        httpc_response_done(&resp);
        if (ok)
            break;
        if (now_ms() >= deadline) {
            r = err_set(err, TERN_ETIMEOUT, "etcd fixture: not healthy within %ld ms at %s",
                        timeout, f->url);
            log_tail(f, err);
            break;
        }
        sleep_ms(20);
    }
    httpc_free(h);
    return r;
}

int etcd_fixture_start(struct etcd_fixture *f, const char *dir,
                       const struct etcd_fixture_opts *opts, struct tern_err *err)
{
    memset(f, 0, sizeof *f);
    if (opts)
        f->opts = *opts;
    if (strlen(dir) > 400)
        return err_set(err, -ENAMETOOLONG, "etcd fixture: dir too long");
    if (mkdir(dir, 0700) && errno != EEXIST)
        return err_set(err, -errno, "etcd fixture: mkdir %s: %s", dir, strerror(errno));
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    snprintf(f->log, sizeof f->log, "%s/etcd.log", dir);
    int r = 0;
    /* a port found free may be taken before etcd binds it: retry */
    for (int attempt = 0; attempt < 3; attempt++) {
        f->client_port = etcd_fixture_free_port();
        f->peer_port = etcd_fixture_free_port();
        if (f->client_port < 0 || f->peer_port < 0)
            return err_set(err, f->client_port < 0 ? f->client_port : f->peer_port,
                           "etcd fixture: no free port");
        f->tls_port = 0;
        f->tls_url[0] = 0;
        if (f->opts.cert_file && f->opts.key_file) {
            f->tls_port = etcd_fixture_free_port();
            if (f->tls_port < 0)
                return err_set(err, f->tls_port, "etcd fixture: no free port");
            snprintf(f->tls_url, sizeof f->tls_url, "https://127.0.0.1:%d", f->tls_port);
        }
        if (f->client_port == f->peer_port || f->tls_port == f->client_port ||
            f->tls_port == f->peer_port)
            continue;
        snprintf(f->url, sizeof f->url, "http://127.0.0.1:%d", f->client_port);
        r = spawn(f, err);
        if (r)
            return r;
        r = wait_ready(f, err);
        if (r == 0)
            return 0;
        etcd_fixture_kill(f);
        if (r != -ECHILD)
            return r;
    }
    return r;
}

int etcd_fixture_kill(struct etcd_fixture *f)
{
    if (f->pid <= 0)
        return 0;
    kill(f->pid, SIGKILL);
    while (waitpid(f->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    f->pid = 0;
    return 0;
}

int etcd_fixture_restart(struct etcd_fixture *f, struct tern_err *err)
{
    etcd_fixture_kill(f);
    int r = 0;
    /* the old process's ports are released on exit; retry if etcd still
     * finds one busy (TIME_WAIT does not block a listening socket) */
    for (int attempt = 0; attempt < 3; attempt++) {
        r = spawn(f, err);
        if (r)
            return r;
        r = wait_ready(f, err);
        if (r != -ECHILD)
            return r;
        sleep_ms(100);
    }
    return r;
}

void etcd_fixture_stop(struct etcd_fixture *f)
{
    if (f->pid <= 0)
        return;
    kill(f->pid, SIGTERM);
    long deadline = now_ms() + 5000;
    for (;;) {
        pid_t w = waitpid(f->pid, NULL, WNOHANG);
        if (w == f->pid || (w < 0 && errno != EINTR))
            break;
        if (now_ms() >= deadline) {
            kill(f->pid, SIGKILL);
            waitpid(f->pid, NULL, 0);
            break;
        }
        sleep_ms(10);
    }
    f->pid = 0;
}
