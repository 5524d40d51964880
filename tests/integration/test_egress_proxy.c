/* Integration tests of the egress proxy's server (egress/egproxy) in
 * process, without a cluster: the egmap is fed the objects an informer
 * would deliver (a session and its sandbox pod whose address is 127.0.0.1,
 * this test's own source address), names resolve through a static map, and
 * servers on loopback stand in for the hosts: an allowed name through
 * CONNECT (bytes both ways) and plain HTTP (the head as the origin gets it),
 * then every refusal: a name not in the allowlist, a raw IP, the metadata
 * address, a name that resolves to a private address (rebinding), a source
 * that is no sandbox even with headers claiming to be one, a port that does
 * not listen, a head that never completes. Each decision is seen once by
 * the on_decision hook. */
#include "harness.h"

#include "base/buf.h"
#include "base/mem.h"
#include "egress/egmap.h"
#include "egress/egproxy.h"
#include "egress/egresolve.h"
#include "json/json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- a loopback upstream: echoes what it reads, after a greeting ---- */

struct upstream {
    int lfd, port;
    pthread_t t;
    char got[4096]; /* the first bytes one connection sent */
    size_t ngot;
    const char *reply;
};

static void *upstream_main(void *arg)
{
    struct upstream *u = arg;
    int c = accept(u->lfd, NULL, NULL);
    if (c < 0)
        return NULL;
    struct pollfd p = {c, POLLIN, 0};
    while (u->ngot < sizeof u->got && poll(&p, 1, 2000) > 0) {
        ssize_t k = recv(c, u->got + u->ngot, sizeof u->got - u->ngot, 0);
        if (k <= 0)
            break;
        u->ngot += (size_t)k;
        if (memmem(u->got, u->ngot, "\r\n\r\n", 4) || memmem(u->got, u->ngot, "ping", 4))
            break;
    }
    if (send(c, u->reply, strlen(u->reply), MSG_NOSIGNAL) < 0) {
        close(c);
        return NULL;
    }
    shutdown(c, SHUT_WR);
    char sink[256];
    while (recv(c, sink, sizeof sink, 0) > 0)
        ;
    close(c);
    return NULL;
}

static void upstream_start(struct upstream *u, const char *reply)
{
    memset(u, 0, sizeof *u);
    u->reply = reply;
    u->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(u->lfd, (struct sockaddr *)&a, sizeof a) || listen(u->lfd, 4))
        th_fail(__FILE__, __LINE__, "upstream: %s", strerror(errno));
    socklen_t l = sizeof a;
    getsockname(u->lfd, (struct sockaddr *)&a, &l);
    u->port = ntohs(a.sin_port);
    pthread_create(&u->t, NULL, upstream_main, u);
}

static void upstream_stop(struct upstream *u)
{
    shutdown(u->lfd, SHUT_RDWR);
    pthread_join(u->t, NULL);
    close(u->lfd);
}

/* ---- the proxy under test ---- */

struct seen {
    pthread_mutex_t mu;
    int n;
    enum egpolicy_reason last;
    char session[64], target[300], message[1024];
};

static void on_decision(void *ctx, const struct egproxy_decision *d)
{
    struct seen *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->n++;
    s->last = d->reason;
    snprintf(s->session, sizeof s->session, "%s", d->client ? d->client->session : "");
    snprintf(s->target, sizeof s->target, "%s", d->target);
    snprintf(s->message, sizeof s->message, "%s", d->message);
    pthread_mutex_unlock(&s->mu);
}

struct fix {
    struct egmap *map;
    struct egresolve *res;
    struct egproxy *p;
    struct session_cidr pub;
    struct seen seen;
    int port;
};

static void start(struct fix *f, const char *allow)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->seen.mu, NULL);
    f->map = egmap_new();
    char *sj = xasprintf("{\"metadata\":{\"name\":\"s1\",\"namespace\":\"team\",\"uid\":\"u1\"},"
                         "\"spec\":{\"objective\":\"x\",\"permissions\":{\"networkAllowlist\":%s}}}",
                         allow);
    cJSON *s = NULL, *p = NULL;
    ASSERT_OK(json_parse(sj, strlen(sj), &s, NULL));
    const char *pj =
        "{\"metadata\":{\"name\":\"s1-sandbox\",\"namespace\":\"team\",\"labels\":{"
        "\"tern.dev/role\":\"sandbox\",\"tern.dev/session\":\"s1\",\"tern.dev/session-uid\":"
        "\"u1\"},\"ownerReferences\":[{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":"
        "\"AgentSession\",\"name\":\"s1\",\"uid\":\"u1\",\"controller\":true}]},"
        "\"status\":{\"phase\":\"Running\",\"podIP\":\"127.0.0.1\"}}";
    ASSERT_OK(json_parse(pj, strlen(pj), &p, NULL));
    egmap_put_session(f->map, s);
    egmap_put_pod(f->map, p);
    cJSON_Delete(s);
    cJSON_Delete(p);
    free(sj);
    const char *hosts = "127.0.0.1 allowed.example www.other.example\n"
                        "127.0.0.2 rebind.example\n"
                        "169.254.169.254 metadata.example\n";
    ASSERT_OK(egresolve_new_text(hosts, strlen(hosts), &f->res, NULL));
    ASSERT_OK(session_cidr_parse("127.0.0.1/32", &f->pub));
    struct egproxy_config c = {
        .listen = "127.0.0.1:0",
        .map = f->map,
        .resolver = f->res,
        .assume_public = &f->pub,
        .nassume = 1,
        .head_timeout_ms = 500,
        .connect_timeout_ms = 2000,
        .idle_timeout_s = 5,
        .on_decision = on_decision,
        .ctx = &f->seen,
    };
    struct tern_err e = {0};
    if (egproxy_start(&c, &f->p, &e))
        th_fail(__FILE__, __LINE__, "start: %s", e.msg);
    f->port = egproxy_port(f->p);
}

static void stop(struct fix *f)
{
    egproxy_stop(f->p);
    egresolve_free(f->res);
    egmap_free(f->map);
}

/* A connection to the proxy from src (NULL: 127.0.0.1). */
static int dial(struct fix *f, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (src) {
        struct sockaddr_in b = {.sin_family = AF_INET};
        inet_pton(AF_INET, src, &b.sin_addr);
        if (bind(fd, (struct sockaddr *)&b, sizeof b))
            th_fail(__FILE__, __LINE__, "bind %s: %s", src, strerror(errno));
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a))
        th_fail(__FILE__, __LINE__, "connect: %s", strerror(errno));
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void say(int fd, const char *s)
{
    if (send(fd, s, strlen(s), MSG_NOSIGNAL) != (ssize_t)strlen(s))
        th_fail(__FILE__, __LINE__, "send: %s", strerror(errno));
}

/* Everything until the proxy closes (or n bytes). */
static char *slurp(int fd, size_t stop_at)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    char chunk[4096];
    ssize_t k;
    while ((stop_at == 0 || b.len < stop_at) && (k = recv(fd, chunk, sizeof chunk, 0)) > 0)
        buf_append(&b, chunk, (size_t)k);
    return buf_steal(&b);
}

/* One request, the whole answer. */
static char *ask(struct fix *f, const char *src, const char *head)
{
    int fd = dial(f, src);
    say(fd, head);
    char *r = slurp(fd, 0);
    close(fd);
    return r;
}

/* tmpl with each "%d" replaced by port (the tables hold templates). */
static char *subst(const char *tmpl, int port)
{
    struct buf b;
    buf_init(&b, 1 << 16);
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '%' && p[1] == 'd') {
            buf_printf(&b, "%d", port);
            p++;
        } else {
            buf_putc(&b, *p);
        }
    }
    return buf_steal(&b);
}

static void expect_seen(struct fix *f, int n, enum egpolicy_reason r)
{
    pthread_mutex_lock(&f->seen.mu);
    int got = f->seen.n;
    enum egpolicy_reason last = f->seen.last;
    pthread_mutex_unlock(&f->seen.mu);
    if (got != n || last != r)
        th_fail(__FILE__, __LINE__, "decisions: %d, last %s; expected %d, last %s", got,
                egpolicy_reason_name(last), n, egpolicy_reason_name(r));
}

TEST(egress_connect_tunnel_to_an_allowed_name)
{
    struct upstream u;
    upstream_start(&u, "pong");
    struct fix f;
    char *allow = xasprintf("[\"allowed.example:%d\"]", u.port);
    start(&f, allow);
    int fd = dial(&f, NULL);
    char *head = xasprintf("CONNECT allowed.example:%d HTTP/1.1\r\nHost: x\r\n\r\n", u.port);
    say(fd, head);
    char *answer = slurp(fd, 39);
    ASSERT_EQ_STR(answer, "HTTP/1.1 200 Connection established\r\n\r\n");
    say(fd, "ping");
    char *rest = slurp(fd, 0);
    ASSERT_EQ_STR(rest, "pong");
    close(fd);
    upstream_stop(&u);
    ASSERT_TRUE(u.ngot == 4 && memcmp(u.got, "ping", 4) == 0); /* the tunnel adds nothing */
    expect_seen(&f, 1, EGP_ALLOWED_HOST);
    ASSERT_EQ_STR(f.seen.session, "s1");
    free(answer);
    free(rest);
    free(head);
    free(allow);
    stop(&f);
}

TEST(egress_plain_http_forwarded_as_origin_form)
{
    struct upstream u;
    upstream_start(&u, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
    struct fix f;
    char *allow = xasprintf("[\"*.other.example:%d\"]", u.port);
    start(&f, allow);
    char *head = xasprintf("GET http://www.other.example:%d/simple/?a=1 HTTP/1.1\r\nHost: evil\r\n"
                           "Proxy-Authorization: Basic eA==\r\nAccept: */*\r\n\r\n",
                           u.port);
    char *r = ask(&f, NULL, head);
    ASSERT_EQ_STR(r, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
    upstream_stop(&u);
    u.got[u.ngot < sizeof u.got ? u.ngot : sizeof u.got - 1] = '\0';
    char *want = xasprintf("GET /simple/?a=1 HTTP/1.1\r\nHost: www.other.example:%d\r\n"
                           "Accept: */*\r\nConnection: close\r\n\r\n",
                           u.port);
    ASSERT_EQ_STR(u.got, want);
    expect_seen(&f, 1, EGP_ALLOWED_HOST);
    free(want);
    free(r);
    free(head);
    free(allow);
    stop(&f);
}

TEST(egress_refusals)
{
    struct upstream u;
    upstream_start(&u, "must not be reached");
    struct fix f;
    char *allow = xasprintf("[\"allowed.example:%d\",\"rebind.example\",\"metadata.example\"]",
                            u.port);
    start(&f, allow);
    static const struct {
        const char *head; /* %d: the upstream port */
        const char *status, *body;
        enum egpolicy_reason reason;
    } t[] = {
        {"CONNECT forbidden.example:%d HTTP/1.1\r\n\r\n", "HTTP/1.1 403 ",
         "forbidden.example:%d is not in spec.permissions.networkAllowlist of AgentSession "
         "team/s1 (it allows: allowed.example:",
         EGP_NOT_ALLOWLISTED},
        {"GET http://allowed.example/ HTTP/1.1\r\n\r\n#%d", "HTTP/1.1 403 ",
         "is not in spec.permissions.networkAllowlist", EGP_NOT_ALLOWLISTED},
        {"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", "HTTP/1.1 403 ",
         "127.0.0.1 is an IP address, which only a CIDR entry", EGP_ADDRESS_NOT_ALLOWLISTED},
        {"GET http://169.254.169.254:%d/latest/meta-data/ HTTP/1.1\r\n\r\n", "HTTP/1.1 403 ",
         "169.254.169.254 is an IP address", EGP_ADDRESS_NOT_ALLOWLISTED},
        {"CONNECT rebind.example:443 HTTP/1.1\r\n\r\n#%d", "HTTP/1.1 403 ",
         "rebind.example resolves to 127.0.0.2 (loopback)", EGP_PRIVATE_ADDRESS},
        {"GET http://metadata.example/ HTTP/1.1\r\n\r\n#%d", "HTTP/1.1 403 ",
         "metadata.example resolves to 169.254.169.254 (cloud metadata)", EGP_PRIVATE_ADDRESS},
        {"GET / HTTP/1.1\r\nHost: allowed.example:%d\r\n\r\n", "HTTP/1.1 400 ",
         "not a proxy request", EGP_BAD_REQUEST},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        char *head = subst(t[i].head, u.port);
        char *hash = strchr(head, '#');
        if (hash)
            *hash = '\0';
        char *r = ask(&f, NULL, head);
        char *body = subst(t[i].body, u.port);
        if (strncmp(r, t[i].status, strlen(t[i].status)) != 0 || !strstr(r, body) ||
            !strstr(r, egpolicy_reason_name(t[i].reason)))
            th_fail(__FILE__, __LINE__, "%s -> %s (expected %s... %s)", head, r, t[i].status,
                    body);
        expect_seen(&f, (int)i + 1, t[i].reason);
        free(body);
        free(r);
        free(head);
    }
    upstream_stop(&u);
    ASSERT_EQ_INT(u.ngot, 0); /* nothing got through */
    free(allow);
    stop(&f);
}

TEST(egress_a_source_that_is_no_sandbox_is_refused_whatever_it_says)
{
    struct upstream u;
    upstream_start(&u, "must not be reached");
    struct fix f;
    char *allow = xasprintf("[\"allowed.example:%d\"]", u.port);
    start(&f, allow);
    /* 127.0.0.3 is nobody's pod address; the headers name the sandbox's */
    char *head = xasprintf("CONNECT allowed.example:%d HTTP/1.1\r\nX-Forwarded-For: 127.0.0.1\r\n"
                           "Forwarded: for=127.0.0.1\r\nProxy-Authorization: Basic dGVhbTpzMQ==\r\n"
                           "X-Real-IP: 127.0.0.1\r\n\r\n",
                           u.port);
    char *r = ask(&f, "127.0.0.3", head);
    ASSERT_CONTAINS(r, "HTTP/1.1 403 Forbidden by Tern egress proxy: the client is not the "
                       "sandbox of an AgentSession");
    ASSERT_CONTAINS(r, "127.0.0.3 is not the address of a running sandbox pod");
    expect_seen(&f, 1, EGP_NO_SESSION);
    ASSERT_EQ_STR(f.seen.session, "");
    upstream_stop(&u);
    ASSERT_EQ_INT(u.ngot, 0);
    free(r);
    free(head);
    free(allow);
    stop(&f);
}

TEST(egress_connect_failure_and_slow_head)
{
    /* a port nothing listens on */
    struct upstream u;
    upstream_start(&u, "x");
    int dead = u.port;
    upstream_stop(&u);
    struct fix f;
    char *allow = xasprintf("[\"allowed.example:%d\"]", dead);
    start(&f, allow);
    char *head = xasprintf("CONNECT allowed.example:%d HTTP/1.1\r\n\r\n", dead);
    char *r = ask(&f, NULL, head);
    ASSERT_CONTAINS(r, "HTTP/1.1 502 ");
    ASSERT_CONTAINS(r, "cannot connect to 127.0.0.1");
    expect_seen(&f, 1, EGP_CONNECT_FAILED);
    free(r);
    /* a head that never ends: 400 after head_timeout_ms */
    int fd = dial(&f, NULL);
    say(fd, "CONNECT allowed.example:1 HTTP/1.1\r\n");
    r = slurp(fd, 0);
    close(fd);
    ASSERT_CONTAINS(r, "HTTP/1.1 400 ");
    ASSERT_CONTAINS(r, "no complete request head in time");
    expect_seen(&f, 2, EGP_BAD_REQUEST);
    free(r);
    free(head);
    free(allow);
    stop(&f);
}
