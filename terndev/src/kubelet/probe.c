/* probe.c - TCP and HTTP probes. See probe.h. */
#include "probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int wait_fd(int fd, short ev, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            return TERN_ETIMEOUT;
        struct pollfd p = {fd, ev, 0};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return TERN_ETIMEOUT;
        return 0;
    }
}

static int connect_to(const char *ip, int port, int64_t deadline, int *ret_fd)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (port <= 0 || port > 65535 || inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
        return -EINVAL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (errno != EINPROGRESS) {
            rc = -errno;
            goto out;
        }
        if ((rc = wait_fd(fd, POLLOUT, deadline)))
            goto out;
        int soerr = 0;
        socklen_t l = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &l);
        if (soerr) {
            rc = -soerr;
            goto out;
        }
    }
    *ret_fd = fd;
    return 0;
out:
    close(fd);
    return rc;
}

int probe_tcp(const char *ip, int port, int timeout_ms)
{
    int fd;
    int rc = connect_to(ip, port, mono_ms() + timeout_ms, &fd);
    if (rc == 0)
        close(fd);
    return rc;
}

int probe_http(const char *ip, int port, const char *path, int timeout_ms)
{
    int64_t deadline = mono_ms() + timeout_ms;
    int fd;
    int rc = connect_to(ip, port, deadline, &fd);
    if (rc)
        return rc;
    char req[2048];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: kube-probe/1.32\r\n"
                     "Accept: */*\r\nConnection: close\r\n\r\n",
                     path && path[0] == '/' ? path : "/", ip, port);
    if (n <= 0 || (size_t)n >= sizeof req) {
        rc = -EINVAL;
        goto out;
    }
    size_t off = 0;
    while (off < (size_t)n) {
        if ((rc = wait_fd(fd, POLLOUT, deadline)))
            goto out;
        ssize_t w = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (w < 0) {
            rc = -errno;
            goto out;
        }
        off += (size_t)w;
    }
    char resp[64];
    size_t got = 0;
    while (got < 12) {
        if ((rc = wait_fd(fd, POLLIN, deadline)))
            goto out;
        ssize_t r = recv(fd, resp + got, sizeof resp - 1 - got, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : TERN_EHTTP;
            goto out;
        }
        got += (size_t)r;
    }
    resp[got] = 0;
    if (strncmp(resp, "HTTP/1.", 7) != 0 || resp[8] != ' ') {
        rc = TERN_EHTTP;
        goto out;
    }
    int code = (resp[9] - '0') * 100 + (resp[10] - '0') * 10 + (resp[11] - '0');
    rc = code >= 200 && code < 400 ? 0 : TERN_EHTTP;
out:
    close(fd);
    return rc;
}
