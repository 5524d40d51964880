/* egproxy.c - the egress proxy's server. See egproxy.h. */
#include "egress/egproxy.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "egress/proxyreq.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RELAY_BUF (16u << 10)

struct egproxy {
    struct egproxy_config cfg;
    int lfd, port;
    pthread_t accept_thread;
    atomic_bool stopping;
    pthread_mutex_t mu;
    pthread_cond_t idle;
    int *fds; /* client sockets being served (for stop) */
    unsigned nfds;
};

/* ---- answers ---- */

static const char *short_reason(enum egpolicy_reason r)
{
    switch (r) {
    case EGP_NO_SESSION:
        return "the client is not the sandbox of an AgentSession";
    case EGP_NOT_ALLOWLISTED:
        return "host not in the session's networkAllowlist";
    case EGP_ADDRESS_NOT_ALLOWLISTED:
        return "IP address not in the session's networkAllowlist";
    case EGP_PRIVATE_ADDRESS:
        return "host resolves to a private or metadata address";
    case EGP_RESOLVE_FAILED:
        return "host name does not resolve";
    case EGP_CONNECT_FAILED:
        return "cannot connect to the host";
    default:
        return "bad proxy request";
    }
}

void egproxy_refusal(int status, enum egpolicy_reason reason, const char *message,
                     struct buf *out)
{
    const char *what = status == 403   ? "Forbidden by Tern egress proxy"
                       : status == 502 ? "Bad Gateway (Tern egress proxy)"
                       : status == 503 ? "Service Unavailable (Tern egress proxy)"
                                       : "Bad Request (Tern egress proxy)";
    struct buf body;
    buf_init(&body, 4096);
    buf_printf(&body, "tern-egress-proxy: %s: %s\n", status == 403 ? "refused" : "failed",
               message);
    buf_printf(out, "HTTP/1.1 %d %s: %s\r\n", status, what, short_reason(reason));
    buf_printf(out, "Content-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n",
               body.len);
    buf_printf(out, "X-Tern-Egress-Refused: %s\r\nConnection: close\r\n\r\n",
               egpolicy_reason_name(reason));
    buf_append(out, body.data, body.len);
    buf_done(&body);
}

/* ---- socket helpers ---- */

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static void set_timeout(int fd, int opt, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Connects to a within timeout_ms: the fd, or -errno. */
static int connect_to(const struct egpolicy_addr *a, int port, int timeout_ms)
{
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    if (a->family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        memcpy(&s4->sin_addr, a->addr, 4);
        sl = sizeof *s4;
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        memcpy(&s6->sin6_addr, a->addr, 16);
        sl = sizeof *s6;
    }
    int fd = socket(a->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int r = connect(fd, (struct sockaddr *)&ss, sl);
    if (r < 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (r < 0) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        int pr;
        do
            pr = poll(&pfd, 1, timeout_ms);
        while (pr < 0 && errno == EINTR);
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (pr == 0) {
            close(fd);
            return -ETIMEDOUT;
        }
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        if (pr < 0 || soerr) {
            close(fd);
            return -(soerr ? soerr : EIO);
        }
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Bytes both ways until both directions are closed, an error, or idle. */
static void relay(int a, int b, int idle_s)
{
    char *buf = xmalloc(RELAY_BUF);
    bool open_ab = true, open_ba = true; /* a->b, b->a */
    while (open_ab || open_ba) {
        struct pollfd p[2] = {{a, open_ab ? POLLIN : 0, 0}, {b, open_ba ? POLLIN : 0, 0}};
        int r = poll(p, 2, idle_s * 1000);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        for (int i = 0; i < 2; i++) {
            int from = i == 0 ? a : b, to = i == 0 ? b : a;
            bool *open = i == 0 ? &open_ab : &open_ba;
            if (!*open || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t k = recv(from, buf, RELAY_BUF, 0);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                *open = false;
                shutdown(to, SHUT_WR);
                if (k < 0) {
                    open_ab = open_ba = false;
                }
                continue;
            }
            if (write_all(to, buf, (size_t)k) != 0)
                open_ab = open_ba = false;
        }
    }
    free(buf);
}

/* ---- one connection ---- */

struct conn {
    struct egproxy *p;
    int fd;
    struct egpolicy_addr src;
};

static void allowed_list(const struct egmap_client *c, struct buf *out)
{
    size_t n = 0;
    for (size_t i = 0; i < c->nhosts; i++, n++)
        buf_printf(out, "%s%s", n ? ", " : "", c->hosts[i].text);
    for (size_t i = 0; i < c->ncidrs; i++, n++)
        buf_printf(out, "%s%s", n ? ", " : "", c->cidrs[i].text);
    if (n == 0)
        buf_puts(out, "nothing");
}

struct outcome {
    int status; /* 0: allowed */
    enum egpolicy_reason reason;
    struct buf msg;
    char address[INET6_ADDRSTRLEN];
};

static void report(struct conn *c, const struct egmap_client *cl, const char *src,
                   const struct proxyreq *req, bool parsed, struct outcome *o)
{
    if (!c->p->cfg.on_decision)
        return;
    char target[PROXYREQ_MAX_HOST + 16] = "";
    if (parsed)
        proxyreq_target_str(&req->target, target, sizeof target);
    struct egproxy_decision d = {
        .client = cl,
        .source = src,
        .method = parsed ? req->method : "",
        .target = target,
        .address = o->address,
        .reason = o->reason,
        .message = buf_str(&o->msg),
    };
    c->p->cfg.on_decision(c->p->cfg.ctx, &d);
}

static void refuse(int fd, struct outcome *o)
{
    struct buf out;
    buf_init(&out, 16384);
    egproxy_refusal(o->status, o->reason, buf_str(&o->msg), &out);
    write_all(fd, out.data, out.len);
    buf_done(&out);
}

/* Reads the head: returns its length (the leftover follows it in b), or -1. */
static ssize_t read_head(int fd, struct buf *b, int timeout_ms)
{
    int64_t deadline = mono_ms() + timeout_ms;
    char chunk[4096];
    size_t scanned = 0;
    for (;;) {
        for (size_t i = scanned; i < b->len; i++) {
            if (b->data[i] != '\n')
                continue;
            if (i >= 1 && b->data[i - 1] == '\n')
                return (ssize_t)(i + 1);
            if (i >= 2 && b->data[i - 1] == '\r' && b->data[i - 2] == '\n')
                return (ssize_t)(i + 1);
        }
        scanned = b->len;
        int64_t left = deadline - mono_ms();
        if (left <= 0 || b->len >= TERN_EGRESS_MAX_HEAD)
            return -1;
        struct pollfd pfd = {fd, POLLIN, 0};
        int pr = poll(&pfd, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return -1;
        size_t room = TERN_EGRESS_MAX_HEAD - b->len;
        ssize_t k = recv(fd, chunk, room < sizeof chunk ? room : sizeof chunk, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        if (buf_append(b, chunk, (size_t)k) != 0)
            return -1;
    }
}

static void serve(struct conn *c)
{
    struct egproxy *p = c->p;
    struct buf in;
    buf_init(&in, TERN_EGRESS_MAX_HEAD + 1);
    struct proxyreq req = {0};
    bool parsed = false;
    struct egmap_client *cl = NULL;
    struct outcome o = {.status = 0};
    buf_init(&o.msg, 4096);
    char src[INET6_ADDRSTRLEN];
    egpolicy_addr_str(&c->src, src, sizeof src);
    int up = -1;

    ssize_t hl = read_head(c->fd, &in, p->cfg.head_timeout_ms);
    if (hl < 0) {
        o.status = 400;
        o.reason = EGP_BAD_REQUEST;
        buf_puts(&o.msg, in.len >= TERN_EGRESS_MAX_HEAD
                             ? "the request head is larger than the proxy accepts"
                             : "no complete request head in time");
        goto refused;
    }
    struct tern_err err = {0};
    if (proxyreq_parse(in.data, (size_t)hl, &req, &err) != 0) {
        o.status = 400;
        o.reason = EGP_BAD_REQUEST;
        buf_puts(&o.msg, err.msg);
        goto refused;
    }
    parsed = true;
    char target[PROXYREQ_MAX_HOST + 16];
    proxyreq_target_str(&req.target, target, sizeof target);

    /* who: the source address, through the API's view of pods and sessions */
    struct tern_err why = {0};
    if (egmap_lookup(p->cfg.map, &c->src, &cl, &why) != 0) {
        o.status = 403;
        o.reason = EGP_NO_SESSION;
        buf_printf(&o.msg, "%s %s: %s", req.method, target, why.msg);
        goto refused;
    }
    struct egpolicy_allow allow = egmap_client_allow(cl);
    struct egpolicy_addr literal = {.family = req.target.family};
    memcpy(literal.addr, req.target.addr, 16);
    struct buf list;
    buf_init(&list, 4096);
    allowed_list(cl, &list);
    o.reason = egpolicy_check_target(&allow, req.target.host, req.target.family ? &literal : NULL,
                                     req.target.port);
    if (o.reason == EGP_NOT_ALLOWLISTED) {
        buf_printf(&o.msg,
                   "%s %s: %s is not in spec.permissions.networkAllowlist of AgentSession %s/%s "
                   "(it allows: %s)",
                   req.method, target, target, cl->ns, cl->session, buf_str(&list));
    } else if (o.reason == EGP_ADDRESS_NOT_ALLOWLISTED) {
        buf_printf(&o.msg,
                   "%s %s: %s is an IP address, which only a CIDR entry of "
                   "spec.permissions.networkAllowlist allows; AgentSession %s/%s allows: %s",
                   req.method, target, req.target.host, cl->ns, cl->session, buf_str(&list));
    }
    if (!egpolicy_allowed(o.reason)) {
        buf_done(&list);
        o.status = 403;
        goto refused;
    }

    /* where: resolve once, connect to an accepted address and only that */
    struct egpolicy_addr addrs[TERN_EGRESS_MAX_ADDRS];
    size_t naddrs = 0;
    if (req.target.family) {
        addrs[0] = literal;
        naddrs = 1;
    } else if (egresolve_lookup(p->cfg.resolver, req.target.host, addrs, TERN_EGRESS_MAX_ADDRS,
                                &naddrs, &err) != 0) {
        buf_done(&list);
        o.status = 502;
        o.reason = EGP_RESOLVE_FAILED;
        buf_printf(&o.msg, "%s %s: cannot resolve %s (%s)", req.method, target, req.target.host,
                   err.msg);
        goto refused;
    }
    size_t start = 0, idx = 0;
    int last_err = 0;
    enum egpolicy_reason first = EGP_RESOLVE_FAILED;
    while (start < naddrs) {
        enum egpolicy_reason r =
            egpolicy_pick_address(&allow, addrs + start, naddrs - start, p->cfg.assume_public,
                                  p->cfg.nassume, &idx);
        if (start == 0)
            first = r;
        if (!egpolicy_allowed(r))
            break;
        o.reason = r;
        egpolicy_addr_str(&addrs[start + idx], o.address, sizeof o.address);
        up = connect_to(&addrs[start + idx], req.target.port, p->cfg.connect_timeout_ms);
        if (up >= 0)
            break;
        last_err = -up;
        start += idx + 1;
    }
    if (up < 0 && !egpolicy_allowed(first)) {
        char a[INET6_ADDRSTRLEN];
        egpolicy_addr_str(&addrs[idx], a, sizeof a);
        o.status = 403;
        o.reason = EGP_PRIVATE_ADDRESS;
        o.address[0] = '\0';
        buf_printf(&o.msg,
                   "%s %s: %s resolves to %s (%s), and a name in the allowlist never reaches "
                   "such an address unless a CIDR entry of spec.permissions.networkAllowlist of "
                   "AgentSession %s/%s covers it",
                   req.method, target, req.target.host, a, egpolicy_special(&addrs[idx]), cl->ns,
                   cl->session);
        buf_done(&list);
        goto refused;
    }
    buf_done(&list);
    if (up < 0) {
        o.status = 502;
        o.reason = EGP_CONNECT_FAILED;
        buf_printf(&o.msg, "%s %s: cannot connect to %s: %s", req.method, target, o.address,
                   strerror(last_err ? last_err : EHOSTUNREACH));
        goto refused;
    }
    buf_printf(&o.msg, "%s %s via %s", req.method, target, o.address);
    report(c, cl, src, &req, parsed, &o);

    /* the tunnel or the forwarded request */
    set_timeout(c->fd, SO_SNDTIMEO, p->cfg.idle_timeout_s * 1000);
    set_timeout(up, SO_SNDTIMEO, p->cfg.idle_timeout_s * 1000);
    const char *rest = in.data + hl;
    size_t nrest = in.len - (size_t)hl;
    if (req.kind == PROXYREQ_CONNECT) {
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        if (write_all(c->fd, ok, sizeof ok - 1) != 0 ||
            (nrest && write_all(up, rest, nrest) != 0))
            goto out;
    } else {
        struct buf head;
        buf_init(&head, 2 * TERN_EGRESS_MAX_HEAD);
        proxyreq_upstream_head(&req, &head);
        int w = write_all(up, head.data, head.len);
        buf_done(&head);
        if (w != 0 || (nrest && write_all(up, rest, nrest) != 0))
            goto out;
    }
    relay(c->fd, up, p->cfg.idle_timeout_s);
    goto out;

refused:
    report(c, cl, src, &req, parsed, &o);
    refuse(c->fd, &o);
out:
    if (up >= 0)
        close(up);
    egmap_client_free(cl);
    proxyreq_done(&req);
    buf_done(&o.msg);
    buf_done(&in);
}

/* Removes fd from the served set and closes it, under the lock: stop never
 * shuts down a number that was closed and reused meanwhile. */
static void forget_fd(struct egproxy *p, int fd)
{
    pthread_mutex_lock(&p->mu);
    for (unsigned i = 0; i < p->nfds; i++)
        if (p->fds[i] == fd) {
            p->fds[i] = p->fds[--p->nfds];
            break;
        }
    close(fd);
    if (p->nfds == 0)
        pthread_cond_broadcast(&p->idle);
    pthread_mutex_unlock(&p->mu);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    serve(c);
    shutdown(c->fd, SHUT_RDWR);
    forget_fd(c->p, c->fd);
    free(c);
    return NULL;
}

static void src_of(const struct sockaddr_storage *ss, struct egpolicy_addr *a)
{
    memset(a, 0, sizeof *a);
    if (ss->ss_family == AF_INET) {
        a->family = AF_INET;
        memcpy(a->addr, &((const struct sockaddr_in *)ss)->sin_addr, 4);
        return;
    }
    const struct in6_addr *v6 = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(v6)) {
        a->family = AF_INET;
        memcpy(a->addr, v6->s6_addr + 12, 4);
    } else {
        a->family = AF_INET6;
        memcpy(a->addr, v6->s6_addr, 16);
    }
}

static void *accept_main(void *arg)
{
    struct egproxy *p = arg;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256u << 10);
    while (!atomic_load(&p->stopping)) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(p->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
                if (errno == EMFILE || errno == ENFILE)
                    poll(NULL, 0, 50);
                continue;
            }
            break;
        }
        if (atomic_load(&p->stopping)) {
            close(fd);
            break;
        }
        pthread_mutex_lock(&p->mu);
        bool full = p->nfds >= p->cfg.max_connections;
        if (!full)
            p->fds[p->nfds++] = fd;
        pthread_mutex_unlock(&p->mu);
        if (full) {
            struct buf out;
            buf_init(&out, 4096);
            egproxy_refusal(503, EGP_BAD_REQUEST, "too many connections at once; retry later",
                            &out);
            set_timeout(fd, SO_SNDTIMEO, 1000);
            write_all(fd, out.data, out.len);
            buf_done(&out);
            close(fd);
            continue;
        }
        set_timeout(fd, SO_SNDTIMEO, p->cfg.head_timeout_ms);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = xcalloc(1, sizeof *c);
        c->p = p;
        c->fd = fd;
        src_of(&ss, &c->src);
        pthread_t t;
        if (pthread_create(&t, &attr, conn_main, c) != 0) {
            free(c);
            forget_fd(p, fd);
        }
    }
    pthread_attr_destroy(&attr);
    return NULL;
}

/* "HOST:PORT", ":PORT", "[v6]:PORT" -> sockaddr. */
static int parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sl)
{
    memset(ss, 0, sizeof *ss);
    const char *colon = strrchr(s, ':');
    if (!colon)
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || port < 0 || port > 65535)
        return -EINVAL;
    char host[INET6_ADDRSTRLEN] = "";
    size_t hn = (size_t)(colon - s);
    const char *h = s;
    if (hn >= 2 && s[0] == '[' && s[hn - 1] == ']') {
        h++;
        hn -= 2;
    }
    if (hn >= sizeof host)
        return -EINVAL;
    memcpy(host, h, hn);
    host[hn] = '\0';
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    if (hn == 0) {
        s6->sin6_family = AF_INET6;
        s6->sin6_addr = in6addr_any;
        s6->sin6_port = htons((uint16_t)port);
        *sl = sizeof *s6;
    } else if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        *sl = sizeof *s4;
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        *sl = sizeof *s6;
    } else {
        return -EINVAL;
    }
    return 0;
}

int egproxy_start(const struct egproxy_config *cfg, struct egproxy **ret, struct tern_err *err)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    if (!cfg->map || !cfg->resolver || !cfg->listen || parse_listen(cfg->listen, &ss, &sl))
        return err_set(err, -EINVAL, "egress proxy: bad listen address \"%s\"",
                       cfg->listen ? cfg->listen : "");
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_set(err, -errno, "socket: %s", strerror(errno));
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 512) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, -e, "listen on %s: %s", cfg->listen, strerror(e));
    }
    struct egproxy *p = xcalloc(1, sizeof *p);
    p->cfg = *cfg;
    if (p->cfg.head_timeout_ms <= 0)
        p->cfg.head_timeout_ms = 10000;
    if (p->cfg.connect_timeout_ms <= 0)
        p->cfg.connect_timeout_ms = 10000;
    if (p->cfg.idle_timeout_s <= 0)
        p->cfg.idle_timeout_s = 600;
    if (p->cfg.max_connections == 0)
        p->cfg.max_connections = 1024;
    if (p->cfg.max_connections > TERN_EGRESS_MAX_CONNECTIONS)
        p->cfg.max_connections = TERN_EGRESS_MAX_CONNECTIONS;
    p->fds = xcalloc(p->cfg.max_connections, sizeof *p->fds);
    p->lfd = fd;
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    getsockname(fd, (struct sockaddr *)&bound, &bl);
    p->port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                               : ((struct sockaddr_in6 *)&bound)->sin6_port);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->idle, NULL);
    if (pthread_create(&p->accept_thread, NULL, accept_main, p) != 0) {
        close(fd);
        free(p->fds);
        free(p);
        return err_set(err, -EAGAIN, "egress proxy: cannot start a thread");
    }
    *ret = p;
    return 0;
}

int egproxy_port(const struct egproxy *p)
{
    return p->port;
}

unsigned egproxy_active(struct egproxy *p)
{
    pthread_mutex_lock(&p->mu);
    unsigned n = p->nfds;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void egproxy_stop(struct egproxy *p)
{
    if (!p)
        return;
    atomic_store(&p->stopping, true);
    shutdown(p->lfd, SHUT_RDWR);
    pthread_join(p->accept_thread, NULL);
    close(p->lfd);
    pthread_mutex_lock(&p->mu);
    for (unsigned i = 0; i < p->nfds; i++)
        shutdown(p->fds[i], SHUT_RDWR);
    while (p->nfds > 0)
        pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_cond_destroy(&p->idle);
    pthread_mutex_destroy(&p->mu);
    free(p->fds);
    free(p);
}
