/* etcd.c - the etcd client itself: struct etcd's lifecycle (config copy,
 * endpoint list parsing), the connection pool, and the call path every
 * request takes (authentication and token refresh, endpoint failover, the
 * read/write rule for re-sending, error mapping). The operations are in
 * kv.c, lease.c and watch.c; the JSON they send and receive in codec.c.
 * See etcd.h; etcd_internal.h for what the files share.
 */
#include "etcd_internal.h"

#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- small helpers ------------------------------------------------------ */

/* Sleeps ms, waking early (returning true) when *cancel is raised. */
bool etcd__sleep_cancellable(long ms, atomic_bool *cancel)
{
    long end = now_ms() + ms;
    for (;;) {
        if (cancelled(cancel))
            return true;
        long left = end - now_ms();
        if (left <= 0)
            return false;
        long step = left < 20 ? left : 20;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = step * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

static char *memdup_or_null(const char *s, size_t n)
{
    return s ? xmemdup(s, n) : NULL;
}

/* ---- lifecycle ---------------------------------------------------------- */

int etcd_new(const struct etcd_config *cfg, struct etcd **ret, struct tern_err *err)
{
    if (!cfg || !cfg->endpoints || cfg->nendpoints == 0 ||
        cfg->nendpoints > TERN_ETCD_MAX_ENDPOINTS)
        return err_set(err, TERN_EINVALID, "etcd: need 1..%d endpoints", TERN_ETCD_MAX_ENDPOINTS);
    for (size_t i = 0; i < cfg->nendpoints; i++) {
        const char *e = cfg->endpoints[i];
        if (!e || (strncmp(e, "http://", 7) != 0 && strncmp(e, "https://", 8) != 0) ||
            strlen(e) > 1024)
            return err_set(err, TERN_EINVALID, "etcd: bad endpoint \"%s\"", e ? e : "(null)");
    }
    if (cfg->username && !cfg->password && !cfg->password_file)
        return err_set(err, TERN_EINVALID, "etcd: username without password");
    if (cfg->username && (strlen(cfg->username) > TERN_ETCD_MAX_USER || !*cfg->username))
        return err_set(err, TERN_EINVALID, "etcd: username must be 1..%d bytes",
                       TERN_ETCD_MAX_USER);
    struct etcd *c = xcalloc(1, sizeof *c);
    c->neps = cfg->nendpoints;
    c->eps = xcalloc(c->neps, sizeof *c->eps);
    for (size_t i = 0; i < c->neps; i++) {
        size_t n = strlen(cfg->endpoints[i]);
        while (n > 0 && cfg->endpoints[i][n - 1] == '/')
            n--;
        c->eps[i] = xstrndup(cfg->endpoints[i], n);
    }
    atomic_init(&c->cur, 0);
    if (cfg->tls) {
        c->has_tls = true;
        c->tls.ca_file = dup_or_null(cfg->tls->ca_file);
        c->tls.ca_pem = memdup_or_null(cfg->tls->ca_pem, cfg->tls->ca_pem_len);
        c->tls.ca_pem_len = cfg->tls->ca_pem_len;
        c->tls.cert_pem = memdup_or_null(cfg->tls->cert_pem, cfg->tls->cert_pem_len);
        c->tls.cert_pem_len = cfg->tls->cert_pem_len;
        c->tls.key_pem = memdup_or_null(cfg->tls->key_pem, cfg->tls->key_pem_len);
        c->tls.key_pem_len = cfg->tls->key_pem_len;
        c->tls.cert_file = dup_or_null(cfg->tls->cert_file);
        c->tls.key_file = dup_or_null(cfg->tls->key_file);
        c->tls.insecure = cfg->tls->insecure;
    }
    c->user = dup_or_null(cfg->username);
    c->pass = dup_or_null(cfg->password);
    c->pass_file = dup_or_null(cfg->password_file);
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 5000;
    c->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 2000;
    pthread_mutex_init(&c->mu, NULL);
    *ret = c;
    return 0;
}

void etcd_free(struct etcd *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->neps; i++)
        free(c->eps[i]);
    free(c->eps);
    free((char *)c->tls.ca_file);
    free((char *)c->tls.ca_pem);
    free((char *)c->tls.cert_pem);
    free((char *)c->tls.key_pem);
    free((char *)c->tls.cert_file);
    free((char *)c->tls.key_file);
    free(c->pass_file);
    free(c->user);
    free(c->pass);
    for (size_t i = 0; i < c->npool; i++)
        httpc_free(c->pool[i]);
    free(c->token);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int etcd_endpoints_parse(const char *list, char ***ret, size_t *ret_n, struct tern_err *err)
{
    char **eps = xcalloc(TERN_ETCD_MAX_ENDPOINTS + 1, sizeof *eps);
    size_t n = 0;
    int r = 0;
    const char *p = list ? list : "";
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len) {
            if (n == TERN_ETCD_MAX_ENDPOINTS) {
                r = err_set(err, TERN_EINVALID, "etcd endpoints: more than %d",
                            TERN_ETCD_MAX_ENDPOINTS);
                goto out;
            }
            if (len > 1024 || !((len > 7 && strncmp(p, "http://", 7) == 0) ||
                                (len > 8 && strncmp(p, "https://", 8) == 0))) {
                r = err_set(err, TERN_EINVALID, "etcd endpoints: \"%.*s\" is not an http(s) URL",
                            (int)(len > 200 ? 200 : len), p);
                goto out;
            }
            eps[n++] = xstrndup(p, len);
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    if (n == 0) {
        r = err_set(err, TERN_EINVALID, "etcd endpoints: empty list");
        goto out;
    }
    *ret = eps;
    *ret_n = n;
    eps = NULL;
out:
    etcd_endpoints_free(eps);
    return r;
}

void etcd_endpoints_free(char **eps)
{
    if (!eps)
        return;
    for (char **p = eps; *p; p++)
        free(*p);
    free(eps);
}

/* ---- connection pool ---------------------------------------------------- */

struct httpc *etcd__conn_get(struct etcd *c)
{
    struct httpc *h = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->npool)
        h = c->pool[--c->npool];
    pthread_mutex_unlock(&c->mu);
    return h ? h : httpc_new();
}

/* Returns a connection to the pool; broken = drop it (its state is unknown). */
void etcd__conn_put(struct etcd *c, struct httpc *h, bool broken)
{
    if (!h)
        return;
    if (!broken) {
        pthread_mutex_lock(&c->mu);
        if (c->npool < TERN_ETCD_POOL_IDLE) {
            c->pool[c->npool++] = h;
            h = NULL;
        }
        pthread_mutex_unlock(&c->mu);
    }
    httpc_free(h);
}

/* ---- the call path ------------------------------------------------------ */

/* Turns the transport error in err into "outcome unknown", keeping its text
 * (err_wrap keeps the original code, so set it here). */
static int outcome_unknown(struct tern_err *err, const char *path)
{
    err_wrap(err, TERN_EUNKNOWN, "etcd %s: outcome unknown", path);
    if (err)
        err->code = TERN_EUNKNOWN;
    return TERN_EUNKNOWN;
}

int etcd__authenticate(struct etcd *c, struct httpc *h, const char *ep, atomic_bool *cancel,
                       struct tern_err *err)
{
    char *pass = NULL;
    if (c->pass_file) {
        /* read at every authentication, so a rotated password is used */
        int pr = etcd_read_secret_file(c->pass_file, &pass, err);
        if (pr)
            return pr;
    }
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "name", c->user);
    json_add_string(o, "password", pass ? pass : c->pass);
    char *body = json_print(o);
    cJSON_Delete(o);
    if (pass)
        explicit_bzero(pass, strlen(pass));
    free(pass);
    char *url = xasprintf("%s/v3/auth/authenticate", ep);
    const char *hdrs[] = {"Content-Type: application/json", NULL};
    struct httpc_request req = {
        .method = "POST",
        .url = url,
        .headers = hdrs,
        .body = body,
        .body_len = strlen(body),
        .timeout_ms = c->timeout_ms,
        .connect_timeout_ms = c->connect_timeout_ms,
        .max_body = 1u << 16,
        .tls = c->has_tls ? &c->tls : NULL,
        .cancel = cancel,
    };
    struct httpc_response resp;
    cJSON *j = NULL;
    int r = httpc_do(h, &req, &resp, err);
    if (r)
        goto out;
    if (json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &j, err)) {
        r = err_set(err, TERN_EPARSE, "etcd authenticate: bad reply");
        goto out;
    }
    if (resp.status != 200) {
        bool un;
        r = etcd__map_error(resp.status, j, &un, err);
        if (err && strstr(err->msg, "authentication is not enabled")) {
            r = err->code = -ENOTSUP;
        } else if (r == TERN_EINVALID || r == TERN_EHTTP) {
            err_wrap(err, TERN_EAUTH, "etcd authenticate");
            r = TERN_EAUTH;
            if (err)
                err->code = r;
        }
        goto out;
    }
    const char *tok = NULL;
    if (json_get_string(j, "", "token", JSON_REQUIRED, &tok, err) || !*tok) {
        r = err_set(err, TERN_EAUTH, "etcd authenticate: no token in reply");
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    free(c->token);
    c->token = xstrdup(tok);
    pthread_mutex_unlock(&c->mu);
out:
    cJSON_Delete(j);
    httpc_response_done(&resp);
    free(url);
    explicit_bzero(body, strlen(body));
    free(body);
    return r;
}

int etcd_read_secret_file(const char *path, char **ret, struct tern_err *err)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return err_set(err, TERN_EINVALID, "etcd: cannot read %s: %s", path, strerror(errno));
    char *buf = xmalloc(TERN_ETCD_MAX_PASSWORD + 2);
    size_t n = fread(buf, 1, TERN_ETCD_MAX_PASSWORD + 1, f);
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    buf[n] = 0;
    if (n == 0 || n > TERN_ETCD_MAX_PASSWORD || memchr(buf, 0, n)) {
        explicit_bzero(buf, TERN_ETCD_MAX_PASSWORD + 2);
        free(buf);
        return err_set(err, TERN_EINVALID, "etcd: %s must hold 1..%d bytes of text", path,
                       TERN_ETCD_MAX_PASSWORD);
    }
    *ret = buf;
    return 0;
}

/* The Authorization header line for the current token, or NULL. */
char *etcd__auth_header(struct etcd *c)
{
    char *h = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->token)
        h = xasprintf("Authorization: %s", c->token);
    pthread_mutex_unlock(&c->mu);
    return h;
}

bool etcd__need_token(struct etcd *c)
{
    if (!c->user)
        return false;
    pthread_mutex_lock(&c->mu);
    bool need = c->token == NULL;
    pthread_mutex_unlock(&c->mu);
    return need;
}

/* Whether an error reply says the request raced a change of users or roles
 * (etcd checked it against an older auth store and did not apply it). */
static bool auth_store_moved(const cJSON *j)
{
    const cJSON *m = j ? json_get(j, "message") : NULL;
    if (!cJSON_IsString(m))
        m = j ? json_get(j, "error") : NULL;
    return cJSON_IsString(m) && strstr(m->valuestring, "revision of auth store is old");
}

/* Tries a request that raced a change of users or roles this often (the
 * operator creates a user, a role and a grant per session: a burst of new
 * sessions moves the auth store several times in a row). */
#define AUTH_RACE_RETRIES 4

/* Sends body to path, failing over between endpoints. Returns 0 and the
 * parsed 200 reply in *ret, or an error (see etcd.h). */
static int call(struct etcd *c, const char *path, const char *body, size_t body_len,
                enum call_kind kind, atomic_bool *cancel, cJSON **ret, struct tern_err *err)
{
    if (body_len > TERN_ETCD_MAX_REQUEST)
        return err_set(err, TERN_ETOOLARGE, "etcd %s: request of %zu bytes exceeds %u", path,
                       body_len, TERN_ETCD_MAX_REQUEST);
    int r = TERN_EUNREACHABLE;
    size_t start = atomic_load(&c->cur);
    bool reauthed = false;
    int raced = 0;
    for (size_t attempt = 0; attempt < c->neps; attempt++) {
        size_t idx = (start + attempt) % c->neps;
        const char *ep = c->eps[idx];
        struct httpc *h = etcd__conn_get(c);
        struct httpc_response resp = {0};
        cJSON *j = NULL;
        char *url = NULL, *auth = NULL;
        bool broken = false, next = false, retry_same = false;

        if (etcd__need_token(c)) {
            r = etcd__authenticate(c, h, ep, cancel, err);
            if (r) {
                broken = r != TERN_EAUTH;
                next = r == TERN_EUNREACHABLE || r == TERN_ETIMEOUT || r == -EIO;
                goto done;
            }
        }
        url = xasprintf("%s%s", ep, path);
        auth = etcd__auth_header(c);
        const char *hdrs[] = {"Content-Type: application/json", auth, NULL};
        struct httpc_request req = {
            .method = "POST",
            .url = url,
            .headers = hdrs,
            .body = body,
            .body_len = body_len,
            .timeout_ms = c->timeout_ms,
            .connect_timeout_ms = c->connect_timeout_ms,
            .max_body = TERN_ETCD_MAX_RESPONSE,
            .tls = c->has_tls ? &c->tls : NULL,
            .cancel = cancel,
        };
        r = httpc_do(h, &req, &resp, err);
        if (r) {
            broken = true;
            if (r == -ECANCELED) {
                if (kind == CALL_WRITE)
                    r = err_set(err, TERN_EUNKNOWN, "etcd %s: cancelled after sending", path);
                goto done;
            }
            if (r == TERN_ETOOLARGE)
                goto done;
            /* only a refused/failed connect proves the request was not
             * sent (libcurl's upload counter does not cover a body sent
             * along with the headers, so resp.sent alone is not enough) */
            if (kind == CALL_WRITE && (resp.sent || r != TERN_EUNREACHABLE)) {
                r = outcome_unknown(err, path);
                goto done;
            }
            next = true;
            goto done;
        }
        if (json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &j, err)) {
            if (resp.status == 200) {
                r = err_wrap(err, TERN_EPARSE, "etcd %s: reply", path);
                goto done;
            }
            j = NULL;
        }
        if (resp.status == 200) {
            atomic_store(&c->cur, idx);
            *ret = j;
            j = NULL;
            r = 0;
            goto done;
        }
        bool unavailable;
        r = etcd__map_error(resp.status, j, &unavailable, err);
        if (r == TERN_EAUTH && c->user && reauthed && auth_store_moved(j) &&
            raced < AUTH_RACE_RETRIES) {
            /* not applied: raced another change of users or roles; again,
             * after a few ms (the rest of a burst of changes) */
            raced++;
            retry_same = true;
            struct timespec ts = {0, raced * 5 * 1000000L};
            nanosleep(&ts, NULL);
        } else if (r == TERN_EAUTH && c->user && !reauthed) {
            /* an expired token: get a new one and retry on this endpoint */
            pthread_mutex_lock(&c->mu);
            free(c->token);
            c->token = NULL;
            pthread_mutex_unlock(&c->mu);
            reauthed = true;
            retry_same = true;
        } else if (unavailable) {
            if (kind == CALL_WRITE)
                r = outcome_unknown(err, path);
            else
                next = true;
        }
    done:
        cJSON_Delete(j);
        httpc_response_done(&resp);
        free(url);
        free(auth);
        etcd__conn_put(c, h, broken);
        if (retry_same) {
            attempt--;
            continue;
        }
        if (!next || cancelled(cancel))
            return r;
    }
    return r;
}

int etcd__call_obj(struct etcd *c, const char *path, cJSON *req, enum call_kind kind,
                   atomic_bool *cancel, cJSON **ret, struct tern_err *err)
{
    char *body = json_print(req);
    int r = call(c, path, body, strlen(body), kind, cancel, ret, err);
    free(body);
    return r;
}

int etcd_from_settings(const struct etcd_settings *s, struct etcd **ret, struct tern_err *err)
{
    char **eps = NULL;
    size_t n = 0;
    if (!s->endpoints || !*s->endpoints)
        return err_set(err, TERN_EINVALID, "TERN_ETCD_ENDPOINTS: required");
    int r = etcd_endpoints_parse(s->endpoints, &eps, &n, err);
    if (r)
        return err_wrap(err, r, "TERN_ETCD_ENDPOINTS");
    if (!s->cert_file != !s->key_file) {
        r = err_set(err, TERN_EINVALID, "TERN_ETCD_CERT_FILE and TERN_ETCD_KEY_FILE go together");
        goto out;
    }
    if (s->username && !s->password_file) {
        r = err_set(err, TERN_EINVALID, "TERN_ETCD_USERNAME needs TERN_ETCD_PASSWORD_FILE");
        goto out;
    }
    struct httpc_tls t = {.ca_file = s->ca_file, .cert_file = s->cert_file,
                          .key_file = s->key_file};
    struct etcd_config c = {
        .endpoints = (const char *const *)eps,
        .nendpoints = n,
        .tls = s->ca_file || s->cert_file ? &t : NULL,
        .username = s->username,
        .password_file = s->username ? s->password_file : NULL,
    };
    r = etcd_new(&c, ret, err);
out:
    etcd_endpoints_free(eps);
    return r;
}
