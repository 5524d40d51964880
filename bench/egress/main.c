/* bench/egress - figures for the egress proxy's server in process, on
 * loopback: CONNECT tunnels opened per second (connect, decision, upstream
 * connect, 200, close) with their latency percentiles, refusals answered per
 * second, and the throughput of one tunnel. The client is this process
 * (127.0.0.1, mapped to a session as its sandbox pod would be). Prints
 * figures; asserts nothing.
 *
 *   build/bench/egress [N]     (connections per measurement, default 2000)
 */
#include "base/mem.h"
#include "base/num.h"
#include "egress/egmap.h"
#include "egress/egproxy.h"
#include "egress/egresolve.h"
#include "json/json.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* upstream: accepts and reads until EOF (a sink) */
static int up_fd;
static void *sink_conn(void *arg)
{
    int c = (int)(intptr_t)arg;
    char *buf = xmalloc(1 << 16);
    while (recv(c, buf, 1 << 16, 0) > 0)
        ;
    free(buf);
    close(c);
    return NULL;
}
static void *upstream(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept(up_fd, NULL, NULL);
        if (c < 0)
            return NULL;
        pthread_t t;
        pthread_create(&t, NULL, sink_conn, (void *)(intptr_t)c);
        pthread_detach(t);
    }
}

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&a, sizeof a);
    listen(fd, 1024);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(a.sin_port);
    return fd;
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* n requests of head; the status line's code must be want. Returns the
 * elapsed microseconds and fills lat[]. */
static int64_t run(int pport, const char *head, int want, int64_t n, int64_t *lat, int64_t *bad)
{
    int64_t t0 = now_us();
    *bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = now_us();
        int fd = dial(pport);
        char buf[512];
        ssize_t k = -1;
        if (fd >= 0 && send(fd, head, strlen(head), MSG_NOSIGNAL) > 0)
            k = recv(fd, buf, sizeof buf - 1, 0);
        if (k < 12 || (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0') != want)
            (*bad)++;
        if (fd >= 0)
            close(fd);
        lat[i] = now_us() - s;
    }
    return now_us() - t0;
}

static void report(const char *what, int64_t n, int64_t el, int64_t *lat, int64_t bad)
{
    qsort(lat, (size_t)n, sizeof *lat, cmp64);
    printf("%s: %lld in %lld ms = %.0f/s; latency p50 %lld us, p99 %lld us, max %lld us%s\n",
           what, (long long)n, (long long)(el / 1000), el ? 1e6 * (double)n / (double)el : 0.0,
           (long long)lat[n / 2], (long long)lat[n * 99 / 100], (long long)lat[n - 1],
           bad ? " (some answers were not as expected)" : "");
}

int main(int argc, char **argv)
{
    int64_t n = 2000;
    if (argc > 1 && num_parse_range(argv[1], 10, 1000000, &n) != 0) {
        fprintf(stderr, "usage: %s [N 10..1000000]\n", argv[0]);
        return 2;
    }
    int uport;
    up_fd = listen_any(&uport);
    pthread_t ut;
    pthread_create(&ut, NULL, upstream, NULL);

    struct egmap *map = egmap_new();
    char *sj = xasprintf("{\"metadata\":{\"name\":\"s1\",\"namespace\":\"bench\",\"uid\":\"u1\"},"
                         "\"spec\":{\"objective\":\"x\",\"permissions\":{\"networkAllowlist\":"
                         "[\"pypi.org\",\"*.example.org\",\"up.example:%d\"]}}}",
                         uport);
    const char *pj =
        "{\"metadata\":{\"name\":\"s1-sandbox\",\"namespace\":\"bench\",\"labels\":{"
        "\"tern.dev/role\":\"sandbox\",\"tern.dev/session\":\"s1\",\"tern.dev/session-uid\":"
        "\"u1\"},\"ownerReferences\":[{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":"
        "\"AgentSession\",\"name\":\"s1\",\"uid\":\"u1\",\"controller\":true}]},"
        "\"status\":{\"phase\":\"Running\",\"podIP\":\"127.0.0.1\"}}";
    cJSON *s = NULL, *p = NULL;
    json_parse(sj, strlen(sj), &s, NULL);
    json_parse(pj, strlen(pj), &p, NULL);
    egmap_put_session(map, s);
    egmap_put_pod(map, p);
    cJSON_Delete(s);
    cJSON_Delete(p);
    free(sj);
    struct egresolve *res = NULL;
    const char *hosts = "127.0.0.1 up.example\n";
    egresolve_new_text(hosts, strlen(hosts), &res, NULL);
    struct session_cidr pub;
    session_cidr_parse("127.0.0.1/32", &pub);
    struct egproxy_config c = {.listen = "127.0.0.1:0", .map = map, .resolver = res,
                               .assume_public = &pub, .nassume = 1,
                               .max_connections = 4096};
    struct egproxy *px = NULL;
    struct tern_err e = {0};
    if (egproxy_start(&c, &px, &e)) {
        fprintf(stderr, "proxy: %s\n", e.msg);
        return 1;
    }
    int pport = egproxy_port(px);
    int64_t *lat = xcalloc((size_t)n, sizeof *lat), bad;

    char *ok = xasprintf("CONNECT up.example:%d HTTP/1.1\r\n\r\n", uport);
    int64_t el = run(pport, ok, 200, n, lat, &bad);
    report("CONNECT tunnels opened (allowed name, one upstream connect each)", n, el, lat, bad);
    el = run(pport, "CONNECT forbidden.example.com:443 HTTP/1.1\r\n\r\n", 403, n, lat, &bad);
    report("refusals (name not in the allowlist, 403 with its explanation)", n, el, lat, bad);

    /* throughput through one tunnel */
    int fd = dial(pport);
    send(fd, ok, strlen(ok), MSG_NOSIGNAL);
    char hb[128];
    recv(fd, hb, sizeof hb, 0);
    size_t total = 512u << 20, chunk = 1u << 16, sent = 0;
    char *data = xcalloc(1, chunk);
    int64_t t0 = now_us();
    while (sent < total) {
        ssize_t k = send(fd, data, chunk, MSG_NOSIGNAL);
        if (k <= 0)
            break;
        sent += (size_t)k;
    }
    shutdown(fd, SHUT_WR);
    char sink[256];
    while (recv(fd, sink, sizeof sink, 0) > 0)
        ;
    el = now_us() - t0;
    close(fd);
    printf("one tunnel: %zu MiB in %lld ms = %.0f MiB/s\n", sent >> 20, (long long)(el / 1000),
           el ? (double)(sent >> 20) * 1e6 / (double)el : 0.0);
    free(data);
    free(ok);
    free(lat);
    egproxy_stop(px);
    egresolve_free(res);
    egmap_free(map);
    free(pub.text);
    return 0;
}
