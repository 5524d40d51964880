/* sapi_server.c - the aggregated API's server: TLS with the serving
 * certificate (re-read when its files change), the front-proxy client
 * certificate and the identity headers, one thread per connection, replies.
 * See sapi.h. */
#include "sapi_internal.h"

#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- TLS context ---------------------------------------------------------- */

static int ssl_err(struct tern_err *err, const char *what, const char *file)
{
    char msg[256];
    ERR_error_string_n(ERR_get_error(), msg, sizeof msg);
    ERR_clear_error();
    return err_set(err, TERN_EINVALID, "%s %s: %s", what, file ? file : "", msg);
}

/* A new context from the files and the trust (mu held). */
static int build_ctx(struct sapi *s, SSL_CTX **ret, struct tern_err *err)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx)
        return ssl_err(err, "TLS context", NULL);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    int rc = 0;
    if (SSL_CTX_use_certificate_chain_file(ctx, s->cert_file) != 1) {
        rc = ssl_err(err, "serving certificate", s->cert_file);
        goto fail;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, s->key_file, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        rc = ssl_err(err, "serving key", s->key_file);
        goto fail;
    }
    if (s->ca_pem) {
        BIO *b = BIO_new_mem_buf(s->ca_pem, -1);
        X509_STORE *st = SSL_CTX_get_cert_store(ctx);
        X509 *x;
        int n = 0;
        while (b && (x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL) {
            X509_STORE_add_cert(st, x);
            X509_free(x);
            n++;
        }
        BIO_free(b);
        ERR_clear_error();
        if (n == 0) {
            rc = err_set(err, TERN_EINVALID, "the front-proxy CA holds no certificate");
            goto fail;
        }
        /* only the API server's front-proxy certificate is accepted */
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    } else {
        /* no trust yet: ask for a certificate, refuse every request */
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    *ret = ctx;
    return 0;
fail:
    SSL_CTX_free(ctx);
    return rc;
}

static bool same_time(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/* The current context (a new reference), rebuilt when the files changed
 * (looked at once a second). */
static SSL_CTX *current_ctx(struct sapi *s)
{
    pthread_mutex_lock(&s->mu);
    time_t now = time(NULL);
    if (now != s->checked) {
        s->checked = now;
        struct stat a, b;
        if (stat(s->cert_file, &a) == 0 && stat(s->key_file, &b) == 0 &&
            (!same_time(&a.st_mtim, &s->cert_mtime) || !same_time(&b.st_mtim, &s->key_mtime))) {
            SSL_CTX *n = NULL;
            if (build_ctx(s, &n, NULL) == 0) {
                SSL_CTX_free(s->ctx);
                s->ctx = n;
                s->cert_mtime = a.st_mtim;
                s->key_mtime = b.st_mtim;
            } /* a half-written pair: keep serving the old one, look again */
        }
    }
    SSL_CTX *ctx = s->ctx;
    SSL_CTX_up_ref(ctx);
    pthread_mutex_unlock(&s->mu);
    return ctx;
}

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static char *lower_dup(const char *s, const char *dflt)
{
    char *d = xstrdup(s && *s ? s : dflt);
    for (char *p = d; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    return d;
}

int sapi_set_trust(struct sapi *s, const struct sapi_trust *t, struct tern_err *err)
{
    pthread_mutex_lock(&s->mu);
    char *old_ca = s->ca_pem;
    s->ca_pem = t->ca_pem ? xstrdup(t->ca_pem) : NULL;
    SSL_CTX *n = NULL;
    int rc = build_ctx(s, &n, err);
    if (rc) {
        free(s->ca_pem);
        s->ca_pem = old_ca;
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    free(old_ca);
    SSL_CTX_free(s->ctx);
    s->ctx = n;
    free_strv(s->allowed);
    size_t k = 0;
    while (t->allowed_names && t->allowed_names[k])
        k++;
    s->allowed = xcalloc(k + 1, sizeof *s->allowed);
    for (size_t i = 0; i < k; i++)
        s->allowed[i] = xstrdup(t->allowed_names[i]);
    free(s->user_header);
    free(s->group_header);
    free(s->extra_prefix);
    s->user_header = lower_dup(t->user_header, "x-remote-user");
    s->group_header = lower_dup(t->group_header, "x-remote-group");
    s->extra_prefix = lower_dup(t->extra_prefix, "x-remote-extra-");
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* ---- replies -------------------------------------------------------------- */

static bool write_all(struct sapi_conn *c, const char *p, size_t n)
{
    if (atomic_load(&c->broken))
        return false;
    while (n > 0) {
        int w = SSL_write(c->ssl, p, n > (1u << 30) ? 1 << 30 : (int)n);
        if (w <= 0) {
            atomic_store(&c->broken, true);
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 410: return "Gone";
    case 413: return "Request Entity Too Large";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return status >= 500 ? "Internal Server Error" : "Error";
    }
}

void sapi__reply(struct sapi_conn *c, int status, const char *content_type, const char *body,
                 size_t n)
{
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
                      status, reason_phrase(status), content_type, n);
    if (write_all(c, head, (size_t)hl))
        write_all(c, body, n);
}

void sapi__reply_json(struct sapi_conn *c, int status, const cJSON *j)
{
    char *t = json_print(j);
    sapi__reply(c, status, "application/json", t, strlen(t));
    free(t);
}

void sapi__status(struct sapi_conn *c, int code, const char *reason, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *st = cJSON_CreateObject();
    json_add_string(st, "kind", "Status");
    json_add_string(st, "apiVersion", "v1");
    cJSON_AddObjectToObject(st, "metadata");
    json_add_string(st, "status", "Failure");
    json_add_string(st, "message", msg);
    json_add_string(st, "reason", reason);
    cJSON_AddNumberToObject(st, "code", code);
    if (c->streaming) {
        /* the head is out already: the error is the stream's last line */
        cJSON *line = cJSON_CreateObject();
        json_add_string(line, "type", "ERROR");
        cJSON_AddItemToObject(line, "object", st);
        char *t = json_print(line);
        sapi__stream_line(c, t);
        free(t);
        cJSON_Delete(line);
        return;
    }
    sapi__reply_json(c, code, st);
    cJSON_Delete(st);
}

void sapi__status_rc(struct sapi_conn *c, int rc, const char *what, const char *msg)
{
    switch (rc) {
    case TERN_ENOTFOUND: sapi__status(c, 404, "NotFound", "%s: %s", what, msg); break;
    case TERN_EINVALID: sapi__status(c, 400, "BadRequest", "%s: %s", what, msg); break;
    case TERN_ECOMPACTED: sapi__status(c, 410, "Expired", "%s: %s", what, msg); break;
    case TERN_EAUTH: sapi__status(c, 403, "Forbidden", "%s: %s", what, msg); break;
    case TERN_ETOOLARGE: sapi__status(c, 413, "RequestEntityTooLarge", "%s: %s", what, msg); break;
    case TERN_ETIMEOUT: sapi__status(c, 504, "Timeout", "%s: %s", what, msg); break;
    case TERN_EUNREACHABLE:
        sapi__status(c, 503, "ServiceUnavailable", "%s: %s", what, msg);
        break;
    default: sapi__status(c, 500, "InternalError", "%s: %s", what, msg); break;
    }
}

bool sapi__stream_begin(struct sapi_conn *c, const char *content_type)
{
    char head[256];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n"
                      "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
                      content_type);
    c->streaming = true;
    return write_all(c, head, (size_t)hl);
}

bool sapi__stream_write(struct sapi_conn *c, const char *p, size_t n)
{
    if (n == 0)
        return !atomic_load(&c->broken);
    char h[24];
    int hl = snprintf(h, sizeof h, "%zx\r\n", n);
    pthread_mutex_lock(&c->wmu);
    bool ok = write_all(c, h, (size_t)hl) && write_all(c, p, n) && write_all(c, "\r\n", 2);
    pthread_mutex_unlock(&c->wmu);
    return ok;
}

bool sapi__stream_line(struct sapi_conn *c, const char *line)
{
    size_t n = strlen(line);
    char *t = xmalloc(n + 2);
    memcpy(t, line, n);
    t[n] = '\n';
    t[n + 1] = 0;
    bool ok = sapi__stream_write(c, t, n + 1);
    free(t);
    return ok;
}

void sapi__stream_end(struct sapi_conn *c)
{
    pthread_mutex_lock(&c->wmu);
    write_all(c, "0\r\n\r\n", 5);
    pthread_mutex_unlock(&c->wmu);
}

bool sapi__client_gone(struct sapi_conn *c)
{
    if (atomic_load(&c->broken))
        return true;
    struct pollfd p = {c->fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

bool sapi__allowed(struct sapi_conn *c, const char *verb, const char *name, const char *sub)
{
    char reason[512] = "";
    struct tern_err e = {0};
    const struct sapi_backend *b = &c->s->cfg.backend;
    int rc = b->authorize(b->ctx, &c->user, verb, c->req.ns, name ? name : "", sub ? sub : "",
                          reason, sizeof reason, &e);
    if (rc == 0)
        return true;
    char res[96];
    snprintf(res, sizeof res, "agentsessions%s%s", sub && *sub ? "/" : "", sub ? sub : "");
    if (rc == TERN_EAUTH) {
        /* kube-apiserver's wording */
        char where[128] = "cluster-wide";
        if (c->req.ns[0])
            snprintf(where, sizeof where, "in the namespace \"%s\"", c->req.ns);
        sapi__status(c, 403, "Forbidden",
                     "agentsessions.tern.dev \"%s\" is forbidden: User \"%s\" cannot %s resource "
                     "\"%s\" in API group \"tern.dev\" %s%s%s",
                     name ? name : "", c->user.name, verb, res, where, reason[0] ? ": " : "",
                     reason);
    } else {
        sapi__status(c, 500, "InternalError", "authorizing %s %s: %s", verb, res, e.msg);
    }
    return false;
}

/* ---- identity ------------------------------------------------------------- */

/* The front-proxy certificate's CN is allowed (mu not held: copies). */
static bool allowed_cn(struct sapi *s, SSL *ssl)
{
    X509 *cert = SSL_get1_peer_certificate(ssl);
    if (!cert || SSL_get_verify_result(ssl) != X509_V_OK) {
        X509_free(cert);
        return false;
    }
    char cn[256] = "";
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
    X509_free(cert);
    pthread_mutex_lock(&s->mu);
    bool ok = s->ca_pem != NULL && (!s->allowed || !s->allowed[0]);
    for (size_t i = 0; s->ca_pem && s->allowed && s->allowed[i] && !ok; i++)
        ok = strcmp(s->allowed[i], cn) == 0;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* A percent-decoded extra key (lower-cased) into out. */
static bool extra_key(const char *s, char *out, size_t outsz)
{
    size_t o = 0;
    for (const char *p = s; *p; p++) {
        char ch = *p;
        if (ch == '%' && p[1] && p[2]) {
            char hex[3] = {p[1], p[2], 0};
            int64_t v;
            if (num_parse_hex64(hex, 2, (uint64_t *)&v) != 0)
                return false;
            ch = (char)v;
            p += 2;
        }
        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        if ((unsigned char)ch < 0x20 || o + 1 >= outsz)
            return false;
        out[o++] = ch;
    }
    out[o] = 0;
    return o > 0;
}

/* The user from the identity headers. */
static bool identity(struct sapi *s, const struct sapi_req *r, struct sapi_user *u)
{
    memset(u, 0, sizeof *u);
    pthread_mutex_lock(&s->mu);
    char uh[64], gh[64], ep[64];
    snprintf(uh, sizeof uh, "%s", s->user_header ? s->user_header : "x-remote-user");
    snprintf(gh, sizeof gh, "%s", s->group_header ? s->group_header : "x-remote-group");
    snprintf(ep, sizeof ep, "%s", s->extra_prefix ? s->extra_prefix : "x-remote-extra-");
    pthread_mutex_unlock(&s->mu);
    const char *name = sapi_header(r, uh, 0);
    if (!name || !*name || strlen(name) >= sizeof u->name)
        return false;
    memcpy(u->name, name, strlen(name) + 1);
    const char *g;
    for (size_t i = 0; (g = sapi_header(r, gh, i)) != NULL; i++) {
        if (u->ngroups == TERN_SAPI_MAX_GROUPS || strlen(g) >= sizeof u->groups[0])
            return false;
        memcpy(u->groups[u->ngroups++], g, strlen(g) + 1);
    }
    size_t epl = strlen(ep);
    for (size_t i = 0; i < r->nheaders; i++) {
        if (strncmp(r->headers[i].name, ep, epl) != 0)
            continue;
        if (u->nextra == TERN_SAPI_MAX_EXTRA || strlen(r->headers[i].value) >= 256 ||
            !extra_key(r->headers[i].name + epl, u->extra[u->nextra].key, 64))
            return false;
        memcpy(u->extra[u->nextra].value, r->headers[i].value, strlen(r->headers[i].value) + 1);
        u->nextra++;
    }
    return true;
}

/* ---- connections ---------------------------------------------------------- */

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
    return -2; /* too large */
}

static void serve(struct sapi *s, int fd)
{
    struct timeval tv = {TERN_SAPI_IO_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    SSL_CTX *ctx = current_ctx(s);
    struct sapi_conn *c = xcalloc(1, sizeof *c);
    c->s = s;
    c->fd = fd;
    pthread_mutex_init(&c->wmu, NULL);
    c->ssl = SSL_new(ctx);
    SSL_CTX_free(ctx); /* the SSL holds its own reference */
    char *head = xmalloc(TERN_SAPI_MAX_HEAD);
    if (!c->ssl)
        goto out;
    SSL_set_fd(c->ssl, fd);
    if (SSL_accept(c->ssl) != 1) {
        ERR_clear_error();
        goto out;
    }
    ssize_t n = read_head(c->ssl, head, TERN_SAPI_MAX_HEAD);
    if (n < 0) {
        if (n == -2)
            sapi__status(c, 400, "BadRequest", "request head over %d bytes", TERN_SAPI_MAX_HEAD);
        goto out;
    }
    struct tern_err e = {0};
    int rc = sapi_parse(head, (size_t)n, &c->req, &e);
    /* who asks comes first: nothing, not even a 404, for anyone else */
    if (!allowed_cn(s, c->ssl) || (rc == 0 && !identity(s, &c->req, &c->user))) {
        sapi__status(c, 401, "Unauthorized", "Unauthorized");
        goto out;
    }
    if (rc) {
        sapi__status_rc(c, rc, "request", e.msg);
        goto out;
    }
    if (strcmp(c->req.method, "GET") != 0) {
        sapi__status(c, 405, "MethodNotAllowed", "the server does not allow this method on the "
                                                 "requested resource");
        goto out;
    }
    const char *cl = sapi_header(&c->req, "content-length", 0);
    if ((cl && strcmp(cl, "0") != 0) || sapi_header(&c->req, "transfer-encoding", 0)) {
        sapi__status(c, 400, "BadRequest", "GET with a body");
        goto out;
    }
    sapi__handle(c);
out:
    free(head);
    if (c->ssl) {
        SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
    }
    pthread_mutex_destroy(&c->wmu);
    free(c);
}

struct conn_arg {
    struct sapi *s;
    int fd;
};

static void *conn_main(void *arg)
{
    struct conn_arg *a = arg;
    struct sapi *s = a->s;
    serve(s, a->fd);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < TERN_SAPI_MAX_CONNS; i++)
        if (s->live[i] == a->fd)
            s->live[i] = -1;
    close(a->fd);
    free(a);
    atomic_fetch_sub(&s->conns, 1);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void *accept_main(void *arg)
{
    struct sapi *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {s->fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        if (atomic_load(&s->conns) >= TERN_SAPI_MAX_CONNS) {
            close(fd);
            continue;
        }
        struct conn_arg *a = xcalloc(1, sizeof *a);
        a->s = s;
        a->fd = fd;
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < TERN_SAPI_MAX_CONNS; i++)
            if (s->live[i] < 0) {
                s->live[i] = fd;
                break;
            }
        pthread_mutex_unlock(&s->mu);
        atomic_fetch_add(&s->conns, 1);
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, conn_main, a) != 0) {
            pthread_mutex_lock(&s->mu);
            for (int i = 0; i < TERN_SAPI_MAX_CONNS; i++)
                if (s->live[i] == fd)
                    s->live[i] = -1;
            pthread_mutex_unlock(&s->mu);
            atomic_fetch_sub(&s->conns, 1);
            close(fd);
            free(a);
        }
        pthread_attr_destroy(&at);
    }
    return NULL;
}

static int listen_on(const char *addr, int *ret_fd, int *ret_port, struct tern_err *err)
{
    const char *colon = strrchr(addr, ':');
    int64_t port;
    if (!colon || num_parse_range(colon + 1, 0, 65535, &port) != 0)
        return err_set(err, TERN_EINVALID, "--api-addr %s: want host:port", addr);
    char host[64] = "0.0.0.0";
    size_t hl = (size_t)(colon - addr);
    if (hl >= sizeof host)
        return err_set(err, TERN_EINVALID, "--api-addr %s: want host:port", addr);
    if (hl) {
        memcpy(host, addr, hl);
        host[hl] = 0;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return err_set(err, TERN_EINVALID, "--api-addr %s: not an IPv4 address", addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
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

int sapi_start(const struct sapi_config *cfg, struct sapi **ret, struct tern_err *err)
{
    if (!cfg->listen || !cfg->cert_file || !cfg->key_file || !cfg->backend.authorize ||
        !cfg->backend.session || !cfg->backend.each_session || !cfg->backend.sandbox ||
        !cfg->backend.etcd)
        return err_set(err, TERN_EINVALID, "stream API: address, certificate and backend needed");
    struct sapi *s = xcalloc(1, sizeof *s);
    s->cfg = *cfg;
    s->listen = xstrdup(cfg->listen);
    s->cert_file = xstrdup(cfg->cert_file);
    s->key_file = xstrdup(cfg->key_file);
    s->fd = -1;
    for (int i = 0; i < TERN_SAPI_MAX_CONNS; i++)
        s->live[i] = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    struct stat a, b;
    int rc = build_ctx(s, &s->ctx, err);
    if (rc)
        goto fail;
    if (stat(s->cert_file, &a) == 0 && stat(s->key_file, &b) == 0) {
        s->cert_mtime = a.st_mtim;
        s->key_mtime = b.st_mtim;
    }
    rc = listen_on(s->listen, &s->fd, &s->port, err);
    if (rc)
        goto fail;
    if (pthread_create(&s->accept_thread, NULL, accept_main, s) != 0) {
        rc = err_set(err, -EAGAIN, "stream API: cannot start the accept thread");
        goto fail;
    }
    *ret = s;
    return 0;
fail:
    if (s->fd >= 0)
        close(s->fd);
    SSL_CTX_free(s->ctx);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->listen);
    free(s->cert_file);
    free(s->key_file);
    free(s);
    return rc;
}

int sapi_port(const struct sapi *s)
{
    return s->port;
}

void sapi_stop(struct sapi *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, true);
    pthread_join(s->accept_thread, NULL);
    close(s->fd);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < TERN_SAPI_MAX_CONNS; i++)
        if (s->live[i] >= 0)
            shutdown(s->live[i], SHUT_RDWR); /* ends a blocked read or write */
    while (atomic_load(&s->conns) > 0)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    SSL_CTX_free(s->ctx);
    free(s->ca_pem);
    free_strv(s->allowed);
    free(s->user_header);
    free(s->group_header);
    free(s->extra_prefix);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->listen);
    free(s->cert_file);
    free(s->key_file);
    free(s);
}
