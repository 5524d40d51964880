/* kubeletapi.c - tern-node's kubelet endpoint (see kubeletapi.h): the
 * request parser (pure), and the OpenSSL server: accept thread, one thread
 * per connection, client-certificate identity, authorization, log
 * streaming. */
#include "nodeagent/kubeletapi.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "base/num.h"
#include "kubelet/podlog.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the request (pure) ---- */

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes [s, s+n) into out (size outsz). Returns 0, or -1 when
 * malformed, too long, or decoding to a NUL. */
static int decode(const char *s, size_t n, char *out, size_t outsz)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
            if (h < 0 || l < 0)
                return -1;
            c = (char)(h * 16 + l);
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (c == 0 || o + 1 >= outsz)
            return -1;
        out[o++] = c;
    }
    out[o] = 0;
    return 0;
}

/* A DNS-1123 subdomain (pod and namespace names; container names are
 * labels, a subset). */
static bool dns_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && c != '-' && c != '.')
            return false;
        if ((i == 0 || i == n - 1) && !alnum)
            return false;
    }
    return true;
}

static bool truthy(const char *v)
{
    return strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "True") == 0;
}

static int parse_query(const char *q, size_t n, struct kubeletapi_req *r, struct tern_err *err)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && q[j] != '&')
            j++;
        const char *eq = memchr(q + i, '=', j - i);
        size_t kl = eq ? (size_t)(eq - (q + i)) : j - i;
        char key[64], val[64];
        if (decode(q + i, kl, key, sizeof key) != 0 ||
            decode(eq ? eq + 1 : q + j, eq ? (size_t)(q + j - eq - 1) : 0, val, sizeof val) != 0)
            return err_set(err, TERN_EINVALID, "malformed query");
        if (strcmp(key, "follow") == 0) {
            r->follow = truthy(val);
        } else if (strcmp(key, "previous") == 0) {
            r->previous = truthy(val);
        } else if (strcmp(key, "tailLines") == 0 || strcmp(key, "limitBytes") == 0) {
            int64_t v;
            bool tail = key[0] == 't';
            if (num_parse_i64(val, &v) != 0 || v < (tail ? 0 : 1))
                return err_set(err, TERN_EINVALID, "%s: must be %s", key,
                               tail ? "a number >= 0" : "a number >= 1");
            if (tail)
                r->tail_lines = v;
            else
                r->limit_bytes = v;
        } /* timestamps, sinceSeconds, sinceTime: not kept by the log files */
        i = j + 1;
    }
    return 0;
}

int kubeletapi_parse(const char *head, size_t len, struct kubeletapi_req *ret,
                     struct tern_err *err)
{
    struct kubeletapi_req r = {.tail_lines = -1, .limit_bytes = -1};
    const char *eol = memchr(head, '\n', len);
    if (!eol)
        return err_set(err, TERN_EINVALID, "no request line");
    size_t ll = (size_t)(eol - head);
    if (ll > 0 && head[ll - 1] == '\r')
        ll--;
    const char *sp1 = memchr(head, ' ', ll);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', ll - (size_t)(sp1 + 1 - head)) : NULL;
    if (!sp1 || !sp2 || (size_t)(sp1 - head) >= sizeof r.method || sp1 == head)
        return err_set(err, TERN_EINVALID, "malformed request line");
    memcpy(r.method, head, (size_t)(sp1 - head));
    r.method[sp1 - head] = 0;
    size_t vl = ll - (size_t)(sp2 + 1 - head);
    if (vl != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0)
        return err_set(err, TERN_EINVALID, "not HTTP/1.x");
    const char *target = sp1 + 1;
    size_t tl = (size_t)(sp2 - target);
    const char *qm = memchr(target, '?', tl);
    size_t pl = qm ? (size_t)(qm - target) : tl;
    if (pl == 8 && memcmp(target, "/healthz", 8) == 0) {
        r.route = KUBELETAPI_HEALTHZ;
    } else if (pl > 15 && memcmp(target, "/containerLogs/", 15) == 0) {
        char *fields[3] = {r.ns, r.pod, r.container};
        const char *p = target + 15, *end = target + pl;
        for (int f = 0; f < 3; f++) {
            const char *slash = memchr(p, '/', (size_t)(end - p));
            const char *e = f < 2 ? slash : end;
            if (!e || (f == 2 && slash))
                return err_set(err, TERN_ENOTFOUND, "not found");
            if (decode(p, (size_t)(e - p), fields[f], sizeof r.ns) != 0 || !dns_name(fields[f]))
                return err_set(err, TERN_EINVALID, "bad name in path");
            p = e + 1;
        }
        r.route = KUBELETAPI_LOGS;
    } else {
        return err_set(err, TERN_ENOTFOUND, "not found");
    }
    if (qm) {
        int rc = parse_query(qm + 1, tl - pl - 1, &r, err);
        if (rc)
            return rc;
    }
    *ret = r;
    return 0;
}

/* ---- the server ---- */

struct kubeletapi {
    struct kubeletapi_cfg cfg;
    char *dir, *node;
    SSL_CTX *ctx;
    int fd, port;
    pthread_t accept_thread;
    atomic_bool stop;
    atomic_int conns;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int live[TERN_KUBELETAPI_MAX_CONNS]; /* fds being served (-1 free), under mu */
};

struct conn {
    struct kubeletapi *a;
    int fd;
};

static int ssl_err(struct tern_err *err, const char *what, const char *file)
{
    char msg[256];
    ERR_error_string_n(ERR_get_error(), msg, sizeof msg);
    return err_set(err, TERN_EINVALID, "%s %s: %s", what, file ? file : "", msg);
}

static bool write_all(SSL *ssl, const char *p, size_t n)
{
    while (n > 0) {
        int w = SSL_write(ssl, p, n > 1u << 30 ? 1 << 30 : (int)n);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void reply(SSL *ssl, int status, const char *reason, const char *body)
{
    char head[256];
    size_t bl = strlen(body);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, reason, bl);
    if (write_all(ssl, head, (size_t)n))
        write_all(ssl, body, bl);
}

static bool chunk(SSL *ssl, const char *p, size_t n)
{
    char h[24];
    int hl = snprintf(h, sizeof h, "%zx\r\n", n);
    return write_all(ssl, h, (size_t)hl) && write_all(ssl, p, n) && write_all(ssl, "\r\n", 2);
}

/* CN as the user, every O as a group (what an API server does with a
 * client certificate). */
static bool identity(SSL *ssl, char *user, size_t usz, char groups[8][128], size_t *ng)
{
    X509 *cert = SSL_get1_peer_certificate(ssl);
    if (!cert)
        return false;
    X509_NAME *name = X509_get_subject_name(cert);
    bool ok = X509_NAME_get_text_by_NID(name, NID_commonName, user, (int)usz) > 0;
    *ng = 0;
    for (int i = -1; (i = X509_NAME_get_index_by_NID(name, NID_organizationName, i)) >= 0 && *ng < 8;) {
        ASN1_STRING *d = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
        int l = ASN1_STRING_length(d);
        if (l > 0 && l < 128) {
            memcpy(groups[*ng], ASN1_STRING_get0_data(d), (size_t)l);
            groups[*ng][l] = 0;
            (*ng)++;
        }
    }
    X509_free(cert);
    return ok;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void serve_logs(struct kubeletapi *a, SSL *ssl, const struct kubeletapi_req *r)
{
    struct tern_err e = {0};
    cJSON *pod = NULL;
    int rc = a->cfg.get_pod(a->cfg.ctx, r->ns, r->pod, &pod, &e);
    if (rc) {
        reply(ssl, rc == TERN_ENOTFOUND ? 404 : 500, rc == TERN_ENOTFOUND ? "Not Found" : "Error",
              rc == TERN_ENOTFOUND ? "pod not found\n" : e.msg);
        return;
    }
    struct podlog_opts o = {.container = r->container,
                            .previous = r->previous,
                            .tail_lines = r->tail_lines,
                            .limit_bytes = r->limit_bytes};
    struct podlog_follow *f = NULL;
    rc = podlog_follow_open(a->dir, pod, &o, &f, &e);
    if (rc) {
        cJSON_Delete(pod);
        reply(ssl, rc == TERN_ENOTFOUND ? 404 : 400, rc == TERN_ENOTFOUND ? "Not Found" : "Bad Request",
              e.msg);
        return;
    }
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                               "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    bool ok = write_all(ssl, head, sizeof head - 1);
    struct buf out;
    buf_init(&out, TERN_KUBELETAPI_CHUNK);
    time_t reread = 0;
    while (ok && !atomic_load(&a->stop)) {
        bool done = false;
        buf_reset(&out);
        rc = podlog_follow_chunk(f, r->follow && !r->previous ? pod : NULL, TERN_KUBELETAPI_CHUNK,
                                 &out, &done, &e);
        if (rc)
            break;
        if (out.len)
            ok = chunk(ssl, out.data, out.len);
        if (done)
            break;
        if (out.len == TERN_KUBELETAPI_CHUNK)
            continue; /* more is there already */
        nap_ms(200);
        if (time(NULL) != reread) { /* is the container still running? */
            reread = time(NULL);
            cJSON *now = NULL;
            int g = a->cfg.get_pod(a->cfg.ctx, r->ns, r->pod, &now, NULL);
            if (g == 0) {
                cJSON_Delete(pod);
                pod = now;
            } else if (g == TERN_ENOTFOUND) {
                cJSON_Delete(pod);
                pod = NULL;
            }
        }
    }
    if (ok)
        write_all(ssl, "0\r\n\r\n", 5);
    buf_done(&out);
    podlog_follow_free(f);
    cJSON_Delete(pod);
}

/* Reads the request head (up to the blank line) within the I/O timeout. */
static ssize_t read_head(SSL *ssl, char *buf, size_t sz)
{
    size_t n = 0;
    while (n + 1 < sz) {
        int r = SSL_read(ssl, buf + n, (int)(sz - 1 - n));
        if (r <= 0)
            return -1;
        n += (size_t)r;
        buf[n] = 0;
        if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
            return (ssize_t)n;
    }
    return -1; /* too large */
}

static void serve(struct kubeletapi *a, int fd)
{
    struct timeval tv = {TERN_KUBELETAPI_IO_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    SSL *ssl = SSL_new(a->ctx);
    if (!ssl)
        return;
    SSL_set_fd(ssl, fd);
    char *head = xmalloc(TERN_KUBELETAPI_MAX_HEAD);
    if (SSL_accept(ssl) != 1)
        goto out;
    ssize_t n = read_head(ssl, head, TERN_KUBELETAPI_MAX_HEAD);
    if (n < 0) {
        reply(ssl, 400, "Bad Request", "malformed or oversize request\n");
        goto out;
    }
    struct kubeletapi_req r;
    struct tern_err e = {0};
    int rc = kubeletapi_parse(head, (size_t)n, &r, &e);
    if (rc == 0 && strcmp(r.method, "GET") != 0)
        rc = err_set(&e, -EOPNOTSUPP, "method not allowed");
    if (rc) {
        reply(ssl, rc == TERN_ENOTFOUND ? 404 : rc == -EOPNOTSUPP ? 405 : 400,
              rc == TERN_ENOTFOUND ? "Not Found" : rc == -EOPNOTSUPP ? "Method Not Allowed"
                                                                      : "Bad Request",
              e.msg);
        goto out;
    }
    char user[256], groups[8][128];
    const char *gp[8];
    size_t ng = 0;
    if (!identity(ssl, user, sizeof user, groups, &ng)) {
        reply(ssl, 401, "Unauthorized", "Unauthorized\n");
        goto out;
    }
    for (size_t i = 0; i < ng; i++)
        gp[i] = groups[i];
    const char *sub = r.route == KUBELETAPI_HEALTHZ ? "healthz" : "proxy";
    rc = a->cfg.authorize(a->cfg.ctx, user, gp, ng, "get", sub, &e);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "Forbidden (user=%s, verb=get, resource=nodes, subresource=%s)\n",
                 user, sub);
        reply(ssl, 403, "Forbidden", msg);
        goto out;
    }
    if (r.route == KUBELETAPI_HEALTHZ)
        reply(ssl, 200, "OK", "ok");
    else
        serve_logs(a, ssl, &r);
out:
    free(head);
    SSL_shutdown(ssl);
    SSL_free(ssl);
}

/* Frees fd's slot in live[]. */
static void forget_fd(struct kubeletapi *a, int fd)
{
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < TERN_KUBELETAPI_MAX_CONNS; i++)
        if (a->live[i] == fd)
            a->live[i] = -1;
    pthread_mutex_unlock(&a->mu);
}

static void *conn_main(void *arg)
{
    struct conn *c = arg;
    serve(c->a, c->fd);
    struct kubeletapi *a = c->a;
    forget_fd(a, c->fd);
    close(c->fd);
    free(c);
    pthread_mutex_lock(&a->mu);
    atomic_fetch_sub(&a->conns, 1);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void *accept_main(void *arg)
{
    struct kubeletapi *a = arg;
    while (!atomic_load(&a->stop)) {
        struct pollfd p = {a->fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int fd = accept4(a->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        if (atomic_load(&a->conns) >= TERN_KUBELETAPI_MAX_CONNS) {
            close(fd);
            continue;
        }
        struct conn *c = xcalloc(1, sizeof *c);
        c->a = a;
        c->fd = fd;
        pthread_mutex_lock(&a->mu);
        for (int i = 0; i < TERN_KUBELETAPI_MAX_CONNS; i++)
            if (a->live[i] < 0) {
                a->live[i] = fd;
                break;
            }
        pthread_mutex_unlock(&a->mu);
        atomic_fetch_add(&a->conns, 1);
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, conn_main, c) != 0) {
            forget_fd(a, fd);
            atomic_fetch_sub(&a->conns, 1);
            close(fd);
            free(c);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

static int listen_on(const char *addr, int *ret_fd, int *ret_port, struct tern_err *err)
{
    const char *colon = strrchr(addr, ':');
    int64_t port;
    if (!colon || num_parse_i64(colon + 1, &port) != 0 || port < 0 || port > 65535)
        return err_set(err, TERN_EINVALID, "--listen %s: want host:port", addr);
    char host[64];
    size_t hl = (size_t)(colon - addr);
    if (hl == 0 || hl >= sizeof host)
        return err_set(err, TERN_EINVALID, "--listen %s: want host:port", addr);
    memcpy(host, addr, hl);
    host[hl] = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return err_set(err, TERN_EINVALID, "--listen %s: not an IPv4 address", addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return err_set(err, -e, "listen %s: %s", addr, strerror(e));
    }
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    *ret_fd = fd;
    *ret_port = ntohs(sa.sin_port);
    return 0;
}

int kubeletapi_start(const struct kubeletapi_cfg *cfg, struct kubeletapi **ret,
                     struct tern_err *err)
{
    struct kubeletapi *a = xcalloc(1, sizeof *a);
    a->cfg = *cfg;
    a->dir = xstrdup(cfg->dir);
    a->node = xstrdup(cfg->node);
    a->cfg.dir = a->dir;
    a->cfg.node = a->node;
    a->fd = -1;
    for (int i = 0; i < TERN_KUBELETAPI_MAX_CONNS; i++)
        a->live[i] = -1;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    int rc = 0;
    a->ctx = SSL_CTX_new(TLS_server_method());
    if (!a->ctx) {
        rc = ssl_err(err, "TLS context", NULL);
        goto fail;
    }
    SSL_CTX_set_min_proto_version(a->ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_chain_file(a->ctx, cfg->cert_file) != 1) {
        rc = ssl_err(err, "certificate", cfg->cert_file);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(a->ctx, cfg->key_file, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(a->ctx) != 1) {
        rc = ssl_err(err, "key", cfg->key_file);
        goto fail;
    }
    if (SSL_CTX_load_verify_locations(a->ctx, cfg->client_ca_file, NULL) != 1) {
        rc = ssl_err(err, "client CA", cfg->client_ca_file);
        goto fail;
    }
    SSL_CTX_set_verify(a->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    rc = listen_on(cfg->listen, &a->fd, &a->port, err);
    if (rc)
        goto fail;
    if (pthread_create(&a->accept_thread, NULL, accept_main, a) != 0) {
        rc = err_set(err, -EAGAIN, "cannot start the accept thread");
        goto fail;
    }
    *ret = a;
    return 0;
fail:
    if (a->fd >= 0)
        close(a->fd);
    SSL_CTX_free(a->ctx);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a->dir);
    free(a->node);
    free(a);
    return rc;
}

int kubeletapi_port(const struct kubeletapi *a)
{
    return a->port;
}

void kubeletapi_stop(struct kubeletapi *a)
{
    if (!a)
        return;
    atomic_store(&a->stop, true);
    pthread_join(a->accept_thread, NULL);
    close(a->fd);
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < TERN_KUBELETAPI_MAX_CONNS; i++)
        if (a->live[i] >= 0)
            shutdown(a->live[i], SHUT_RDWR); /* ends a blocked read or write */
    while (atomic_load(&a->conns) > 0)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    SSL_CTX_free(a->ctx);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    free(a->dir);
    free(a->node);
    free(a);
}
