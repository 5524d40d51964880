/* apiagg.c - APIService proxying. See apiagg.h. */
#include "apiagg.h"

#include "base/base64.h"
#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX 16384

struct apiagg {
    struct apirest *rest;
    char *cert_pem, *key_pem;
    pthread_mutex_t mu; /* guards the cache */
    cJSON *services;    /* the APIService list, or NULL */
    long read_ms;
};

static long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int apiagg_new(const struct apiagg_config *cfg, struct apiagg **ret, struct tern_err *err)
{
    if (!cfg->rest || !cfg->client_cert_pem || !cfg->client_key_pem)
        return err_set(err, TERN_EINVALID, "aggregation: the store and a client certificate");
    struct apiagg *a = xcalloc(1, sizeof *a);
    a->rest = cfg->rest;
    a->cert_pem = xstrdup(cfg->client_cert_pem);
    a->key_pem = xstrdup(cfg->client_key_pem);
    pthread_mutex_init(&a->mu, NULL);
    *ret = a;
    return 0;
}

void apiagg_free(struct apiagg *a)
{
    if (!a)
        return;
    cJSON_Delete(a->services);
    explicit_bzero(a->key_pem, strlen(a->key_pem));
    free(a->key_pem);
    free(a->cert_pem);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = json_get(o, a);
    if (b)
        v = json_get(v, b);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The APIService list (a copy), refreshed at most once a second. */
static cJSON *services(struct apiagg *a)
{
    pthread_mutex_lock(&a->mu);
    long now = mono_ms();
    if (!a->services || now - a->read_ms >= 1000) {
        cJSON *l = NULL;
        int st = apirest_do(a->rest, "GET", "/apis/apiregistration.k8s.io/v1/apiservices", NULL,
                            NULL, &l);
        if (st == 200) {
            cJSON_Delete(a->services);
            a->services = l;
            a->read_ms = now;
        } else {
            cJSON_Delete(l);
        }
    }
    cJSON *copy = a->services ? cJSON_Duplicate(a->services, 1) : NULL;
    pthread_mutex_unlock(&a->mu);
    return copy;
}

/* /apis/G[/V[/...]] into g and v ("" when absent). */
static bool split(const char *path, char *g, size_t gs, char *v, size_t vs)
{
    if (strncmp(path, "/apis/", 6) != 0)
        return false;
    const char *p = path + 6, *s = strchr(p, '/');
    size_t gl = s ? (size_t)(s - p) : strlen(p);
    if (gl == 0 || gl >= gs)
        return false;
    memcpy(g, p, gl);
    g[gl] = 0;
    v[0] = 0;
    if (s && s[1]) {
        const char *q = s + 1, *e = strchr(q, '/');
        size_t vl = e ? (size_t)(e - q) : strlen(q);
        if (vl >= vs)
            return false;
        memcpy(v, q, vl);
        v[vl] = 0;
    }
    return true;
}

static bool is_remote(const cJSON *as)
{
    return cJSON_IsObject(json_get(json_get(as, "spec"), "service"));
}

cJSON *apiagg_match(struct apiagg *a, const char *path)
{
    char g[256], v[64];
    if (!split(path, g, sizeof g, v, sizeof v))
        return NULL;
    cJSON *l = services(a);
    cJSON *found = NULL;
    const cJSON *as;
    cJSON_ArrayForEach(as, json_get(l, "items"))
    {
        const cJSON *sp = json_get(as, "spec");
        const char *ag = str_at(sp, "group", NULL), *av = str_at(sp, "version", NULL);
        if (!is_remote(as) || !ag || !av || strcmp(ag, g) != 0)
            continue;
        if (!v[0] || strcmp(av, v) == 0) {
            found = cJSON_Duplicate(as, 1);
            break;
        }
    }
    cJSON_Delete(l);
    return found;
}

static int64_t priority(const cJSON *as)
{
    int64_t p = 0;
    json_get_int64(json_get(as, "spec"), "", "versionPriority", JSON_OPTIONAL, &p, NULL);
    return p;
}

/* The APIGroup of group from the APIServices of l (owned), or NULL. */
static cJSON *group_of(const cJSON *l, const char *group)
{
    const cJSON *best = NULL, *as;
    cJSON *versions = cJSON_CreateArray();
    cJSON_ArrayForEach(as, json_get(l, "items"))
    {
        const char *ag = str_at(json_get(as, "spec"), "group", NULL);
        const char *av = str_at(json_get(as, "spec"), "version", NULL);
        if (!ag || !av || strcmp(ag, group) != 0 || !is_remote(as))
            continue;
        cJSON *v = cJSON_CreateObject();
        char *gv = xasprintf("%s/%s", ag, av);
        json_add_string(v, "groupVersion", gv);
        free(gv);
        json_add_string(v, "version", av);
        cJSON_AddItemToArray(versions, v);
        if (!best || priority(as) > priority(best))
            best = as;
    }
    if (!best) {
        cJSON_Delete(versions);
        return NULL;
    }
    cJSON *g = cJSON_CreateObject();
    json_add_string(g, "kind", "APIGroup");
    json_add_string(g, "apiVersion", "v1");
    json_add_string(g, "name", group);
    cJSON_AddItemToObject(g, "versions", versions);
    cJSON *pv = cJSON_CreateObject();
    char *gv = xasprintf("%s/%s", group, str_at(json_get(best, "spec"), "version", NULL));
    json_add_string(pv, "groupVersion", gv);
    free(gv);
    json_add_string(pv, "version", str_at(json_get(best, "spec"), "version", NULL));
    cJSON_AddItemToObject(g, "preferredVersion", pv);
    return g;
}

cJSON *apiagg_group_doc(struct apiagg *a, const char *group)
{
    cJSON *l = services(a);
    cJSON *g = group_of(l, group);
    cJSON_Delete(l);
    return g;
}

void apiagg_add_groups(struct apiagg *a, cJSON *groups)
{
    cJSON *l = services(a);
    const cJSON *as;
    cJSON_ArrayForEach(as, json_get(l, "items"))
    {
        const char *ag = str_at(json_get(as, "spec"), "group", NULL);
        if (!ag || !is_remote(as))
            continue;
        bool have = false;
        const cJSON *g;
        cJSON_ArrayForEach(g, groups)
        {
            have = have || (str_at(g, "name", NULL) && strcmp(str_at(g, "name", NULL), ag) == 0);
        }
        cJSON *doc = have ? NULL : group_of(l, ag);
        if (doc) {
            cJSON_DeleteItemFromObjectCaseSensitive(doc, "kind");
            cJSON_DeleteItemFromObjectCaseSensitive(doc, "apiVersion");
            cJSON_AddItemToArray(groups, doc);
        }
    }
    cJSON_Delete(l);
}

/* ---- the backend -------------------------------------------------------------- */

static char *escape(const char *s)
{
    struct buf b;
    buf_init(&b, 3 * strlen(s) + 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_')
            buf_putc(&b, (char)*p);
        else
            buf_printf(&b, "%%%02X", *p);
    }
    return buf_steal(&b);
}

static unsigned pick(size_t n)
{
    unsigned r = 0;
    RAND_bytes((unsigned char *)&r, sizeof r);
    return n ? r % (unsigned)n : 0;
}

/* A ready endpoint of the Service's slices on the port named pname. */
static int from_slices(struct apiagg *a, const char *ns, const char *svc, const char *pname,
                       char *ip, size_t ipsz, int *port)
{
    char *sel = escape("kubernetes.io/service-name=");
    char *sv = escape(svc);
    char *path = xasprintf("/apis/discovery.k8s.io/v1/namespaces/%s/endpointslices?labelSelector=%s%s",
                           ns, sel, sv);
    free(sel);
    free(sv);
    cJSON *l = NULL;
    int st = apirest_do(a->rest, "GET", path, NULL, NULL, &l);
    free(path);
    const char *cand[64];
    int ports[64];
    size_t n = 0;
    const cJSON *sl;
    const cJSON *slices = st == 200 ? json_get(l, "items") : NULL;
    cJSON_ArrayForEach(sl, slices)
    {
        int pnum = -1;
        const cJSON *p;
        cJSON_ArrayForEach(p, json_get(sl, "ports"))
        {
            const char *nm = str_at(p, "name", NULL);
            int64_t v = 0;
            if (strcmp(nm ? nm : "", pname) == 0 && json_item_int64(json_get(p, "port"), &v) == 0)
                pnum = (int)v;
        }
        if (pnum <= 0)
            continue;
        const cJSON *ep;
        cJSON_ArrayForEach(ep, json_get(sl, "endpoints"))
        {
            const cJSON *ready = json_get(json_get(ep, "conditions"), "ready");
            const cJSON *ad = json_get(ep, "addresses");
            if ((ready && !cJSON_IsTrue(ready)) || !cJSON_IsString(cJSON_GetArrayItem(ad, 0)))
                continue;
            if (n < 64) {
                cand[n] = cJSON_GetArrayItem(ad, 0)->valuestring;
                ports[n++] = pnum;
            }
        }
    }
    int rc = TERN_ENOTFOUND;
    if (n) {
        unsigned i = pick(n);
        snprintf(ip, ipsz, "%s", cand[i]);
        *port = ports[i];
        rc = 0;
    }
    cJSON_Delete(l);
    return rc;
}

static bool pod_ready(const cJSON *pod)
{
    const cJSON *c;
    if (json_get(json_get(pod, "metadata"), "deletionTimestamp"))
        return false;
    cJSON_ArrayForEach(c, json_get(json_get(pod, "status"), "conditions"))
    {
        if (str_at(c, "type", NULL) && strcmp(str_at(c, "type", NULL), "Ready") == 0)
            return str_at(c, "status", NULL) && strcmp(str_at(c, "status", NULL), "True") == 0;
    }
    return false;
}

/* A ready pod the Service selects, on targetPort (a number or a name). */
static int from_selector(struct apiagg *a, const char *ns, const cJSON *selector,
                         const cJSON *target, char *ip, size_t ipsz, int *port)
{
    struct buf sel;
    buf_init(&sel, 8192);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, selector)
    {
        if (!cJSON_IsString(kv))
            continue;
        buf_printf(&sel, "%s%s=%s", sel.len ? "," : "", kv->string, kv->valuestring);
    }
    char *es = escape(buf_str(&sel));
    buf_done(&sel);
    char *path = xasprintf("/api/v1/namespaces/%s/pods?labelSelector=%s", ns, es);
    free(es);
    cJSON *l = NULL;
    int st = apirest_do(a->rest, "GET", path, NULL, NULL, &l);
    free(path);
    const cJSON *cand[64];
    size_t n = 0;
    const cJSON *pod;
    const cJSON *pods = st == 200 ? json_get(l, "items") : NULL;
    cJSON_ArrayForEach(pod, pods)
    {
        if (pod_ready(pod) && str_at(json_get(pod, "status"), "podIP", NULL) && n < 64)
            cand[n++] = pod;
    }
    int rc = TERN_ENOTFOUND;
    if (n) {
        const cJSON *p = cand[pick(n)];
        int64_t num = 0;
        if (json_item_int64(target, &num) == 0) {
            *port = (int)num;
            rc = 0;
        } else if (cJSON_IsString(target)) {
            const cJSON *c, *cp;
            cJSON_ArrayForEach(c, json_get(json_get(p, "spec"), "containers"))
            {
                cJSON_ArrayForEach(cp, json_get(c, "ports"))
                {
                    int64_t v = 0;
                    if (str_at(cp, "name", NULL) &&
                        strcmp(str_at(cp, "name", NULL), target->valuestring) == 0 &&
                        json_item_int64(json_get(cp, "containerPort"), &v) == 0) {
                        *port = (int)v;
                        rc = 0;
                    }
                }
            }
        }
        if (rc == 0)
            snprintf(ip, ipsz, "%s", str_at(json_get(p, "status"), "podIP", NULL));
    }
    cJSON_Delete(l);
    return rc;
}

/* Where the APIService's Service is served. */
static int resolve(struct apiagg *a, const cJSON *as, char *ip, size_t ipsz, int *port,
                   char *host, size_t hsz, struct tern_err *err)
{
    const cJSON *svc = json_get(json_get(as, "spec"), "service");
    const char *ns = str_at(svc, "namespace", NULL), *name = str_at(svc, "name", NULL);
    int64_t sport = 443;
    json_get_int64(svc, "", "port", JSON_OPTIONAL, &sport, NULL);
    if (!ns || !name)
        return err_set(err, TERN_EUNREACHABLE, "APIService without a service namespace and name");
    snprintf(host, hsz, "%s.%s.svc", name, ns);
    char *path = xasprintf("/api/v1/namespaces/%s/services/%s", ns, name);
    cJSON *s = NULL;
    int st = apirest_do(a->rest, "GET", path, NULL, NULL, &s);
    free(path);
    int rc = 0;
    if (st != 200) {
        rc = err_set(err, TERN_EUNREACHABLE, "service \"%s\" not found", name);
        goto out;
    }
    const cJSON *p, *sp = NULL;
    cJSON_ArrayForEach(p, json_get(json_get(s, "spec"), "ports"))
    {
        int64_t v = 0;
        if (json_item_int64(json_get(p, "port"), &v) == 0 && v == sport)
            sp = p;
    }
    if (!sp) {
        rc = err_set(err, TERN_EUNREACHABLE, "no service port %lld found for service \"%s\"",
                     (long long)sport, name);
        goto out;
    }
    const char *pname = str_at(sp, "name", NULL);
    if (from_slices(a, ns, name, pname ? pname : "", ip, ipsz, port) == 0)
        goto out;
    const cJSON *sel = json_get(json_get(s, "spec"), "selector");
    const cJSON *target = json_get(sp, "targetPort");
    if (cJSON_IsObject(sel) && sel->child &&
        from_selector(a, ns, sel, target ? target : json_get(sp, "port"), ip, ipsz, port) == 0)
        goto out;
    rc = err_set(err, TERN_EUNREACHABLE, "no endpoints available for service \"%s\"", name);
out:
    cJSON_Delete(s);
    return rc;
}

/* ---- the connection --------------------------------------------------------- */

struct apiagg_conn {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    int status;
    char content_type[128];
    bool chunked, has_length, done;
    uint64_t remaining; /* of a chunk, or of a Content-Length body */
    int state;          /* chunked: 0 size line, 1 data, 2 CRLF after data, 3 trailers */
    struct buf in;      /* received, not consumed (from off) */
    size_t off;
};

static int connect_to(const char *ip, int port, struct tern_err *err)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
        return err_set(err, TERN_EUNREACHABLE, "endpoint %s is not an IPv4 address", ip);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return err_set(err, TERN_EUNREACHABLE, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return err_set(err, TERN_EUNREACHABLE, "dial %s:%d: %s", ip, port, strerror(e));
    }
    struct pollfd p = {fd, POLLOUT, 0};
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (poll(&p, 1, 5000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 ||
        soerr) {
        close(fd);
        return err_set(err, TERN_EUNREACHABLE, "dial %s:%d: %s", ip, port,
                       soerr ? strerror(soerr) : "timed out");
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

static bool load_pem(SSL_CTX *ctx, const char *cert, const char *key, const char *ca)
{
    BIO *b = BIO_new_mem_buf(cert, -1);
    X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    b = BIO_new_mem_buf(key, -1);
    EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    bool ok = x && k && SSL_CTX_use_certificate(ctx, x) == 1 && SSL_CTX_use_PrivateKey(ctx, k) == 1;
    X509_free(x);
    EVP_PKEY_free(k);
    if (ok && ca) {
        b = BIO_new_mem_buf(ca, -1);
        X509_STORE *st = SSL_CTX_get_cert_store(ctx);
        int n = 0;
        while (b && (x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL) {
            X509_STORE_add_cert(st, x);
            X509_free(x);
            n++;
        }
        BIO_free(b);
        ok = n > 0;
    }
    ERR_clear_error();
    return ok;
}

/* Reads more bytes into c->in, waiting up to timeout_ms. 1 read, 0 end of
 * stream, -EAGAIN nothing in time, -EIO failure. */
static int fill(struct apiagg_conn *c, int timeout_ms)
{
    if (SSL_pending(c->ssl) == 0) {
        struct pollfd p = {c->fd, POLLIN, 0};
        int pr = poll(&p, 1, timeout_ms);
        if (pr == 0)
            return -EAGAIN;
        if (pr < 0)
            return errno == EINTR ? -EAGAIN : -EIO;
    }
    if (c->off && c->off == c->in.len) {
        buf_reset(&c->in);
        c->off = 0;
    }
    char tmp[16384];
    int n = SSL_read(c->ssl, tmp, sizeof tmp);
    if (n <= 0) {
        int e = SSL_get_error(c->ssl, n);
        ERR_clear_error();
        if (e == SSL_ERROR_WANT_READ)
            return -EAGAIN;
        return e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL ? 0 : -EIO;
    }
    if (buf_append(&c->in, tmp, (size_t)n))
        return -EIO;
    return 1;
}

void apiagg_close(struct apiagg_conn *c)
{
    if (!c)
        return;
    if (c->ssl) {
        SSL_shutdown(c->ssl);
        SSL_free(c->ssl);
    }
    SSL_CTX_free(c->ctx);
    if (c->fd >= 0)
        close(c->fd);
    buf_done(&c->in);
    free(c);
}

static bool header_is(const char *line, size_t n, const char *name, const char **val)
{
    size_t nl = strlen(name);
    if (n <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
        return false;
    const char *v = line + nl + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    *val = v;
    return true;
}

int apiagg_open(struct apiagg *a, const cJSON *as, const char *method, const char *path_query,
                const char *accept, const char *content_type, const char *body, size_t n,
                const struct rbac_user *user, struct apiagg_conn **ret, struct tern_err *err)
{
    char ip[64], host[512];
    int port = 0;
    int rc = resolve(a, as, ip, sizeof ip, &port, host, sizeof host, err);
    if (rc)
        return rc;
    struct apiagg_conn *c = xcalloc(1, sizeof *c);
    c->fd = -1;
    buf_init(&c->in, 1u << 20);
    const cJSON *spec = json_get(as, "spec");
    bool insecure = cJSON_IsTrue(json_get(spec, "insecureSkipTLSVerify"));
    char *ca = NULL;
    const char *cab = str_at(spec, "caBundle", NULL);
    if (!insecure) {
        unsigned char *raw = NULL;
        size_t rl = 0;
        if (!cab || base64_decode(cab, strlen(cab), &raw, &rl) != 0) {
            rc = err_set(err, TERN_EUNREACHABLE, "APIService %s has no caBundle",
                         str_at(json_get(as, "metadata"), "name", NULL));
            goto fail;
        }
        ca = xmalloc(rl + 1);
        memcpy(ca, raw, rl);
        ca[rl] = 0;
        free(raw);
    }
    c->ctx = SSL_CTX_new(TLS_client_method());
    if (!c->ctx || !load_pem(c->ctx, a->cert_pem, a->key_pem, ca)) {
        rc = err_set(err, TERN_EUNREACHABLE, "TLS setup for %s: bad caBundle or client key", host);
        goto fail;
    }
    SSL_CTX_set_verify(c->ctx, insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    if ((c->fd = connect_to(ip, port, err)) < 0) {
        rc = TERN_EUNREACHABLE;
        goto fail;
    }
    c->ssl = SSL_new(c->ctx);
    SSL_set_fd(c->ssl, c->fd);
    SSL_set_tlsext_host_name(c->ssl, host);
    if (!insecure)
        SSL_set1_host(c->ssl, host); /* as kube-apiserver: the Service's DNS name */
    struct timeval tv = {10, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (SSL_connect(c->ssl) != 1) {
        char msg[200];
        ERR_error_string_n(ERR_get_error(), msg, sizeof msg);
        ERR_clear_error();
        rc = err_set(err, TERN_EUNREACHABLE, "TLS with %s (%s:%d): %s", host, ip, port, msg);
        goto fail;
    }
    tv.tv_sec = 0;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv); /* reads poll themselves */
    struct buf req;
    buf_init(&req, 64u << 10);
    buf_printf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: tern-dev\r\nConnection: close\r\n",
               method, path_query, host);
    if (accept)
        buf_printf(&req, "Accept: %s\r\n", accept);
    if (content_type && n)
        buf_printf(&req, "Content-Type: %s\r\n", content_type);
    buf_printf(&req, "Content-Length: %zu\r\n", n);
    buf_printf(&req, "X-Remote-User: %s\r\n", user->name);
    for (size_t i = 0; i < user->ngroups; i++)
        buf_printf(&req, "X-Remote-Group: %s\r\n", user->groups[i]);
    buf_puts(&req, "\r\n");
    bool sent = SSL_write(c->ssl, req.data, (int)req.len) == (int)req.len &&
                (n == 0 || SSL_write(c->ssl, body, (int)n) == (int)n);
    buf_done(&req);
    if (!sent) {
        ERR_clear_error();
        rc = err_set(err, TERN_EUNREACHABLE, "sending to %s failed", host);
        goto fail;
    }
    /* the head */
    long until = mono_ms() + 30000;
    char *end = NULL;
    while (!(end = memmem(c->in.data ? c->in.data : "", c->in.len, "\r\n\r\n", 4))) {
        if (c->in.len > HEAD_MAX || mono_ms() > until) {
            rc = err_set(err, TERN_EUNREACHABLE, "%s sent no answer", host);
            goto fail;
        }
        int f = fill(c, 1000);
        if (f == 0 || f == -EIO) {
            rc = err_set(err, TERN_EUNREACHABLE, "%s closed the connection", host);
            goto fail;
        }
    }
    const char *p = c->in.data, *hend = end + 2;
    const char *eol = memchr(p, '\n', (size_t)(hend - p));
    int64_t code = 0;
    if (!eol || eol - p < 12 || strncmp(p, "HTTP/1.", 7) != 0) {
        rc = err_set(err, TERN_EUNREACHABLE, "%s answered something that is not HTTP", host);
        goto fail;
    }
    char cs[4] = {p[9], p[10], p[11], 0};
    if (num_parse_range(cs, 100, 599, &code) != 0) {
        rc = err_set(err, TERN_EUNREACHABLE, "%s answered a bad status line", host);
        goto fail;
    }
    c->status = (int)code;
    snprintf(c->content_type, sizeof c->content_type, "application/json");
    for (const char *l = eol + 1; l < hend;) {
        const char *le = memchr(l, '\n', (size_t)(hend - l));
        if (!le)
            break;
        size_t ll = (size_t)(le - l);
        if (ll && l[ll - 1] == '\r')
            ll--;
        const char *v;
        if (header_is(l, ll, "Content-Type", &v))
            snprintf(c->content_type, sizeof c->content_type, "%.*s", (int)(ll - (size_t)(v - l)),
                     v);
        else if (header_is(l, ll, "Transfer-Encoding", &v))
            c->chunked = strncasecmp(v, "chunked", 7) == 0;
        else if (header_is(l, ll, "Content-Length", &v)) {
            char num[24];
            snprintf(num, sizeof num, "%.*s", (int)(ll - (size_t)(v - l)), v);
            int64_t cl = 0;
            if (num_parse_range(num, 0, INT64_MAX, &cl) == 0) {
                c->has_length = true;
                c->remaining = (uint64_t)cl;
            }
        }
        l = le + 1;
    }
    c->off = (size_t)(end + 4 - c->in.data);
    if (c->has_length && !c->chunked && c->remaining == 0)
        c->done = true;
    free(ca);
    *ret = c;
    return 0;
fail:
    free(ca);
    apiagg_close(c);
    return rc;
}

int apiagg_status(const struct apiagg_conn *c)
{
    return c->status;
}

const char *apiagg_content_type(const struct apiagg_conn *c)
{
    return c->content_type;
}

/* Bytes available in the buffer. */
static size_t avail(const struct apiagg_conn *c)
{
    return c->in.len - c->off;
}

ssize_t apiagg_read(struct apiagg_conn *c, char *out, size_t max, int timeout_ms)
{
    for (;;) {
        if (c->done)
            return 0;
        if (!c->chunked) {
            if (avail(c)) {
                size_t n = avail(c);
                if (c->has_length && n > c->remaining)
                    n = (size_t)c->remaining;
                if (n > max)
                    n = max;
                memcpy(out, c->in.data + c->off, n);
                c->off += n;
                if (c->has_length && (c->remaining -= n) == 0)
                    c->done = true;
                return (ssize_t)n;
            }
        } else if (c->state == 1 && avail(c)) {
            size_t n = avail(c);
            if (n > c->remaining)
                n = (size_t)c->remaining;
            if (n > max)
                n = max;
            memcpy(out, c->in.data + c->off, n);
            c->off += n;
            if ((c->remaining -= n) == 0)
                c->state = 2;
            return (ssize_t)n;
        } else if (c->state != 1) {
            /* a line: the chunk size, the CRLF after data, or a trailer */
            const char *s = c->in.data ? c->in.data + c->off : "";
            const char *nl = memchr(s, '\n', avail(c));
            if (nl) {
                size_t ll = (size_t)(nl - s);
                size_t take = ll + 1;
                if (ll && s[ll - 1] == '\r')
                    ll--;
                if (c->state == 2) {
                    if (ll != 0)
                        return -EIO;
                    c->state = 0;
                } else if (c->state == 3) {
                    if (ll == 0)
                        c->done = true;
                } else {
                    uint64_t size = 0;
                    size_t hl = 0;
                    while (hl < ll && hl < 16 &&
                           ((s[hl] >= '0' && s[hl] <= '9') || (s[hl] >= 'a' && s[hl] <= 'f') ||
                            (s[hl] >= 'A' && s[hl] <= 'F')))
                        hl++;
                    if (hl == 0 || num_parse_hex64(s, hl, &size) != 0)
                        return -EIO;
                    c->remaining = size;
                    c->state = size ? 1 : 3;
                }
                c->off += take;
                continue;
            }
            if (avail(c) > 4096)
                return -EIO; /* a line that never ends */
        }
        int f = fill(c, timeout_ms);
        if (f == 0) {
            if (!c->chunked && !c->has_length) {
                c->done = true; /* the body ended with the connection */
                return 0;
            }
            return -EIO;
        }
        if (f < 0)
            return f;
    }
}
