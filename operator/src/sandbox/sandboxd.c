/* sandboxd.c - tern-sandboxd's HTTP server shell. See sandboxd.h.
 *
 * Owns the server's life (sandboxd_start/stop: the workspace, its writable
 * roots, the idempotency store, the listening socket, libmicrohttpd), the
 * bearer-token check, and the request callback: on the first call it
 * authorizes, bounds Content-Length, takes an exec slot or the restore
 * flag and picks how the body is consumed; body chunks go to the exec
 * buffer, the PUT staging file or the restore stream; the last call routes
 * to the handlers (sandboxd_exec.c, sandboxd_files.c, sandboxd_snapshot.c)
 * and answers /healthz, /readyz and /version itself. sandboxd_internal.h
 * says what the files share.
 */
#include "sandboxd_internal.h"

#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"
#include "sandbox/sandbox_contract.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define SANDBOXD_VERSION "0.1.0"

/* ------------------------------------------------------------ auth */

static void sha256(const void *p, size_t n, unsigned char out[32])
{
    unsigned int len = 0;
    EVP_Digest(p, n, out, &len, EVP_sha256(), NULL);
}

static bool authorized(struct sandboxd *d, struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    const char *tok = h + 7;
    while (*tok == ' ')
        tok++;
    unsigned char got[32];
    sha256(tok, strlen(tok), got);
    return CRYPTO_memcmp(got, d->token_sha, 32) == 0;
}

/* ------------------------------------------------------------ routing */

static void req_free(struct sandboxd *d, struct req *r)
{
    if (!r)
        return;
    if (r->ticketed) {
        /* the request ends with its ticket still held: its handler never
         * ran (a PUT whose client went away before the whole body came),
         * so nothing happened and the key is free again (idem.h). If the
         * withdrawal fails the record stays "started", and the next start
         * turns it into "interrupted": never a second run. */
        struct tern_err err = {0};
        idem_withdraw(&d->idem, &r->ticket, &err);
    }
    buf_done(&r->body);
    if (r->exec_slot)
        atomic_fetch_sub(&d->active_execs, 1);
    if (r->tmpfd >= 0)
        close(r->tmpfd);
    if (r->tmpname[0])
        unlinkat(d->idem.tmpfd, r->tmpname, 0);
    if (r->rs) {
        restore_free(r->rs);
        atomic_flag_clear(&d->restoring);
    }
    cJSON_Delete(r->replay);
    free(r->key);
    free(r->err_msg);
    free(r);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    struct sandboxd *d = cls;
    if (*con_cls) {
        atomic_store(&d->last_done_ms, now_ms());
        atomic_fetch_sub(&d->in_flight, 1);
    }
    req_free(cls, *con_cls);
    *con_cls = NULL;
}

static bool prefixed(const char *url, const char *p, const char **rest)
{
    size_t n = strlen(p);
    if (strncmp(url, p, n) != 0)
        return false;
    if (url[n] == '\0') {
        *rest = "";
        return true;
    }
    if (url[n] != '/')
        return false;
    *rest = url + n + 1;
    return true;
}

/* The first call: headers are known, no body yet. Returns MHD_YES after
 * queueing an early answer, or sets r->kind for the body phase. */
static enum MHD_Result first_call(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                  const char *url, const char *method, bool *answered)
{
    *answered = false;
    if (!authorized(d, c)) {
        *answered = true;
        return sandboxd__send_error(d, c, 401, "unauthorized", "missing or wrong bearer token", r,
                                    method, url);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    uint64_t clen = 0;
    if (cl && num_parse_u64(cl, &clen) != 0) {
        *answered = true;
        return sandboxd__send_error(d, c, 400, "bad_request", "bad Content-Length", r, method, url);
    }
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key");
    if (key) {
        if (idem_key_valid(key) != 0) {
            *answered = true;
            return sandboxd__send_error(d, c, 400, "bad_request",
                                        "Idempotency-Key: 1 to 256 printable ASCII characters", r,
                                        method, url);
        }
        r->key = xstrdup(key);
    }
    const char *rest;
    if (d->cfg.read_only && strcmp(method, "GET") != 0 && strcmp(url, "/v1/snapshot") != 0) {
        *answered = true;
        return sandboxd__send_error(d, c, 403, "read_only", "this tern-sandboxd serves reads only",
                                    r, method, url);
    }
    if (strcmp(url, "/v1/exec") == 0 && strcmp(method, "POST") == 0) {
        if (clen > TERN_SANDBOX_MAX_EXEC_BODY) {
            *answered = true;
            return sandboxd__send_error(d, c, 413, "too_large", "exec body too large", r, method,
                                        url);
        }
        unsigned cur = atomic_load(&d->active_execs);
        do {
            if (cur >= d->cfg.max_execs) {
                *answered = true;
                return sandboxd__send_error(d, c, 429, "busy", "too many concurrent execs", r,
                                            method, url);
            }
        } while (!atomic_compare_exchange_weak(&d->active_execs, &cur, cur + 1));
        r->exec_slot = true;
        r->kind = K_EXEC;
        buf_init(&r->body, TERN_SANDBOX_MAX_EXEC_BODY);
        return MHD_YES;
    }
    if (prefixed(url, "/v1/files", &rest) && strcmp(method, "PUT") == 0) {
        if (clen > TERN_SANDBOX_MAX_PUT) {
            *answered = true;
            return sandboxd__send_error(d, c, 413, "too_large", "file too large", r, method, url);
        }
        r->kind = K_PUT;
        sandboxd__put_begin(d, c, r, rest, url);
        return MHD_YES;
    }
    if (strcmp(url, "/v1/restore") == 0 && strcmp(method, "POST") == 0) {
        if (clen > TERN_SANDBOX_MAX_RESTORE) {
            *answered = true;
            return sandboxd__send_error(d, c, 413, "too_large", "restore stream too large", r,
                                        method, url);
        }
        if (atomic_flag_test_and_set(&d->restoring)) {
            *answered = true;
            return sandboxd__send_error(d, c, 409, "busy", "a restore is already running", r,
                                        method, url);
        }
        struct tern_err err = {0};
        uid_t uid = uid_set(d) ? d->cfg.run_uid : (uid_t)-1;
        gid_t gid = uid_set(d) ? d->cfg.run_gid : (gid_t)-1;
        int rc = restore_begin(d->wsfd, d->idem.tmpfd, &d->rules, uid, gid, &r->rs, &err);
        if (rc != 0) {
            atomic_flag_clear(&d->restoring);
            *answered = true;
            return sandboxd__send_rc(d, c, rc, err.msg, r, method, url);
        }
        r->kind = K_RESTORE;
        return MHD_YES;
    }
    r->kind = K_DISCARD; /* everything else: a body, if any, is ignored */
    return MHD_YES;
}

static enum MHD_Result body_chunk(struct req *r, const char *p, size_t n)
{
    int rc;
    r->body_bytes += n;
    switch (r->kind) {
    case K_EXEC:
        if (!r->err_status && buf_append(&r->body, p, n) != 0)
            sandboxd__defer_rc(r, TERN_ETOOLARGE, "exec body too large");
        if (r->body_bytes > 2ULL * TERN_SANDBOX_MAX_EXEC_BODY)
            return MHD_NO;
        break;
    case K_PUT:
        if (r->replaying || r->err_status)
            break;
        if (r->body_bytes > TERN_SANDBOX_MAX_PUT) {
            sandboxd__defer_rc(r, TERN_ETOOLARGE, "file too large");
            break;
        }
        rc = sandboxd__write_all(r->tmpfd, p, n);
        if (rc != 0)
            sandboxd__defer_rc(r, rc, "writing the file");
        break;
    case K_RESTORE:
        if (r->body_bytes > TERN_SANDBOX_MAX_RESTORE)
            return MHD_NO;
        if (!r->err_status) {
            struct tern_err err = {0};
            rc = restore_feed(r->rs, p, n, &err);
            if (rc != 0)
                sandboxd__defer_rc(r, rc, err.msg);
        }
        break;
    default:
        if (r->body_bytes > TERN_SANDBOX_MAX_EXEC_BODY)
            return MHD_NO;
        break;
    }
    return MHD_YES;
}

static enum MHD_Result last_call(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                 const char *url, const char *method)
{
    const char *rest;
    if (r->kind == K_PUT)
        return sandboxd__do_put_end(d, c, r, method, url);
    if (r->kind == K_RESTORE && r->err_status) { /* release before answering */
        restore_free(r->rs);
        r->rs = NULL;
        atomic_flag_clear(&d->restoring);
    }
    if (r->err_status)
        return sandboxd__send_error(d, c, r->err_status, r->err_code, r->err_msg, r, method, url);
    if (r->kind == K_EXEC) {
        enum MHD_Result ok = sandboxd__do_exec(d, c, r, method, url);
        /* free the slot before the queued answer reaches the client, so its
         * next exec is not refused as busy */
        if (r->exec_slot) {
            atomic_fetch_sub(&d->active_execs, 1);
            r->exec_slot = false;
        }
        return ok;
    }
    if (r->kind == K_RESTORE)
        return sandboxd__do_restore_end(d, c, r, method, url);
    bool get = strcmp(method, "GET") == 0;
    if (prefixed(url, "/v1/files", &rest)) {
        if (get)
            return sandboxd__do_get_file(d, c, r, rest, method, url);
        if (strcmp(method, "DELETE") == 0)
            return sandboxd__do_delete(d, c, r, rest, method, url);
    } else if (prefixed(url, "/v1/list", &rest)) {
        if (get)
            return sandboxd__do_list(d, c, r, rest, method, url);
    } else if (strcmp(url, "/v1/snapshot") == 0) {
        if (strcmp(method, "POST") == 0)
            return sandboxd__do_snapshot(d, c, r, method, url);
    } else if (strcmp(url, "/v1/executions") == 0 && !d->cfg.read_only) {
        if (get)
            return sandboxd__do_executions(d, c, r, method, url);
    } else if (strcmp(url, "/v1/executions/live") == 0) {
        if (get)
            return sandboxd__do_live(d, c, r, method, url);
    } else if (strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0 ||
               strcmp(url, "/version") == 0) {
        if (get) {
            cJSON *body = cJSON_CreateObject();
            if (strcmp(url, "/version") == 0) {
                json_add_string(body, "version", SANDBOXD_VERSION);
                json_add_string(body, "api", "v1");
            } else {
                json_add_string(body, "status", url[1] == 'h' ? "ok" : "ready");
            }
            enum MHD_Result ok = sandboxd__send_json(d, c, 200, body, r, method, url);
            cJSON_Delete(body);
            return ok;
        }
    } else if (strcmp(url, "/v1/exec") != 0 && strcmp(url, "/v1/restore") != 0) {
        return sandboxd__send_error(d, c, 404, "not_found", "no such endpoint", r, method, url);
    }
    return sandboxd__send_error(d, c, 405, "bad_request", "method not allowed", r, method, url);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    (void)version;
    struct sandboxd *d = cls;
    struct req *r = *con_cls;
    if (!r) {
        r = xcalloc(1, sizeof *r);
        atomic_fetch_add(&d->in_flight, 1);
        r->t0 = now_ms();
        r->tmpfd = -1;
        *con_cls = r;
        bool answered;
        enum MHD_Result ok = first_call(d, c, r, url, method, &answered);
        if (answered)
            r->kind = K_NONE;
        return ok;
    }
    if (r->kind == K_NONE) { /* answered early; drop any body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        enum MHD_Result ok = body_chunk(r, upload, *upload_size);
        *upload_size = 0;
        return ok;
    }
    enum MHD_Result ok = last_call(d, c, r, url, method);
    r->kind = K_NONE;
    return ok;
}

/* URL unescaping that never yields a NUL (which would silently cut a path):
 * %00 becomes 0x01, which path validation rejects. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    char *w = s;
    for (const char *p = s; *p; p++) {
        if (p[0] == '%' && p[1] && p[2]) {
            int hi = p[1], lo = p[2], v = 0;
            bool ok = true;
            for (int i = 0; i < 2; i++) {
                int ch = i ? lo : hi, x;
                if (ch >= '0' && ch <= '9')
                    x = ch - '0';
                else if (ch >= 'a' && ch <= 'f')
                    x = ch - 'a' + 10;
                else if (ch >= 'A' && ch <= 'F')
                    x = ch - 'A' + 10;
                else {
                    ok = false;
                    break;
                }
                v = v * 16 + x;
            }
            if (ok) {
                *w++ = v ? (char)v : '\x01';
                p += 2;
                continue;
            }
        }
        *w++ = *p;
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* ------------------------------------------------------------ lifecycle */

int sandboxd_parse_run_as(const char *s, uid_t *ret_uid, gid_t *ret_gid)
{
    const char *colon = strchr(s, ':');
    int64_t u, g;
    if (!colon || num_parse_i64n(s, (size_t)(colon - s), &u) != 0 ||
        num_parse_range(colon + 1, 0, 0x7fffffff, &g) != 0 || u < 0 || u > 0x7fffffff)
        return -EINVAL;
    *ret_uid = (uid_t)u;
    *ret_gid = (gid_t)g;
    return 0;
}

static int listen_socket(const char *spec, int *ret_fd, unsigned *ret_port, struct tern_err *err)
{
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    const char *colon = strrchr(spec, ':');
    int64_t port;
    if (!colon || num_parse_range(colon + 1, 0, 65535, &port) != 0)
        return err_set(err, -EINVAL, "--listen %s: want HOST:PORT", spec);
    char host[64];
    size_t hl = (size_t)(colon - spec);
    if (hl >= sizeof host)
        return err_set(err, -EINVAL, "--listen %s: host too long", spec);
    memcpy(host, spec, hl);
    host[hl] = '\0';
    int family;
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) != 1)
            return err_set(err, -EINVAL, "--listen %s: bad IPv6 address", spec);
        family = AF_INET6;
        sl = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        if (!host[0])
            a->sin_addr.s_addr = htonl(INADDR_ANY);
        else if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
            return err_set(err, -EINVAL, "--listen %s: bad IPv4 address", spec);
        family = AF_INET;
        sl = sizeof *a;
    }
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return err_set(err, -errno, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, -e, "--listen %s: %s", spec, strerror(e));
    }
    struct sockaddr_storage got;
    socklen_t gl = sizeof got;
    getsockname(fd, (struct sockaddr *)&got, &gl);
    *ret_port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&got)->sin_port
                                        : ((struct sockaddr_in6 *)&got)->sin6_port);
    *ret_fd = fd;
    return 0;
}

/* Creates the writable roots (owned by the command uid when root) and
 * computes the Landlock write set. */
static int prepare_workspace(struct sandboxd *d, struct tern_err *err)
{
    bool chown_roots = uid_set(d);
    d->landlock_dirs = xcalloc(d->rules.nroots + 3, sizeof *d->landlock_dirs);
    size_t n = 0;
    for (size_t i = 0; i < d->rules.nroots; i++) {
        const char *root = d->rules.roots[i];
        if (mkdirat(d->wsfd, root, 0755) != 0 && errno != EEXIST)
            return err_set(err, -errno, "creating %s: %s", root, strerror(errno));
        struct stat st;
        if (fstatat(d->wsfd, root, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            return err_set(err, -ENOTDIR, "writable root %s is not a directory", root);
        if (chown_roots && fchownat(d->wsfd, root, d->cfg.run_uid, d->cfg.run_gid,
                                    AT_SYMLINK_NOFOLLOW) != 0)
            return err_set(err, -errno, "chown %s: %s", root, strerror(errno));
        d->landlock_dirs[n++] = xasprintf("%s/%s", d->ws_abs, root);
    }
    d->landlock_dirs[n++] = xstrdup("/tmp");
    d->landlock_dirs[n++] = xstrdup("/dev");
    return 0;
}

int sandboxd_start(const struct sandboxd_config *cfg, struct sandboxd **ret, struct tern_err *err)
{
    struct sandboxd *d = xcalloc(1, sizeof *d);
    int rc = 0;
    d->cfg = *cfg;
    d->wsfd = d->listen_fd = -1;
    d->idem = (struct idem_store){-1, -1, -1};
    atomic_flag_clear(&d->restoring);
    if (!cfg->token || cfg->token_len == 0) {
        rc = err_set(err, -EINVAL, "empty token");
        goto fail;
    }
    if (d->cfg.max_execs == 0)
        d->cfg.max_execs = 4;
    if (d->cfg.default_timeout_ms <= 0)
        d->cfg.default_timeout_ms = 120000;
    if (d->cfg.max_output == 0 || d->cfg.max_output > TERN_SANDBOX_MAX_OUTPUT)
        d->cfg.max_output = TERN_SANDBOX_MAX_OUTPUT;
    if (d->cfg.max_connections == 0)
        d->cfg.max_connections = 64;
    sha256(cfg->token, cfg->token_len, d->token_sha);
    d->ws_abs = realpath(cfg->workspace, NULL);
    if (!d->ws_abs) {
        rc = err_set(err, -errno, "workspace %s: %s", cfg->workspace, strerror(errno));
        goto fail;
    }
    d->wsfd = open(d->ws_abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->wsfd < 0) {
        rc = err_set(err, -errno, "workspace %s: %s", d->ws_abs, strerror(errno));
        goto fail;
    }
    rc = wspath_rules_parse(cfg->writable ? cfg->writable : SANDBOX_WRITABLE_DEFAULT, &d->rules,
                            err);
    if (rc != 0)
        goto fail;
    /* a read-only viewer writes nothing, not even at startup (its volume
     * may be mounted read-only): no writable roots, no records */
    if (!cfg->read_only &&
        ((rc = prepare_workspace(d, err)) != 0 || (rc = idem_open(d->wsfd, &d->idem, err)) != 0 ||
         (rc = idem_recover(&d->idem, &d->interrupted, err)) != 0))
        goto fail;
    if (cfg->landlock != SANDBOXD_LANDLOCK_OFF)
        d->landlock = sbexec_landlock_abi() > 0;
    if (cfg->landlock == SANDBOXD_LANDLOCK_ON && !d->landlock) {
        rc = err_set(err, -ENOSYS, "--landlock on: the kernel has no Landlock");
        goto fail;
    }
    if (uid_set(d) && !d->landlock) {
        /* without Landlock, only ownership keeps commands away from the
         * records and the read-only parts: the root must not be theirs */
        struct stat st;
        if (fstat(d->wsfd, &st) != 0 || st.st_uid == d->cfg.run_uid || (st.st_mode & 0002) ||
            (st.st_gid == d->cfg.run_gid && (st.st_mode & 0020))) {
            rc = err_set(err, -EPERM,
                         "workspace %s is writable by the command uid %u and Landlock is off: "
                         "its records and read-only parts would be unprotected",
                         d->ws_abs, (unsigned)d->cfg.run_uid);
            goto fail;
        }
    }
    d->live = sblive_new();
    atomic_store(&d->last_done_ms, now_ms());
    rc = listen_socket(cfg->listen ? cfg->listen : ":8080", &d->listen_fd, &d->port, err);
    if (rc != 0)
        goto fail;
    d->mhd = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL,
        NULL, handler, d, MHD_OPTION_LISTEN_SOCKET, d->listen_fd, MHD_OPTION_NOTIFY_COMPLETED,
        completed, d, MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
        MHD_OPTION_CONNECTION_LIMIT, d->cfg.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)600, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64u << 10), MHD_OPTION_END);
    if (!d->mhd) {
        rc = err_set(err, -EIO, "cannot start the HTTP server");
        goto fail;
    }
    *ret = d;
    return 0;
fail:
    sandboxd_stop(d);
    return rc;
}

unsigned sandboxd_port(const struct sandboxd *d)
{
    return d->port;
}

size_t sandboxd_interrupted(const struct sandboxd *d)
{
    return d->interrupted;
}

int sandboxd_landlock_active(const struct sandboxd *d)
{
    return d->landlock;
}

int64_t sandboxd_idle_ms(struct sandboxd *d)
{
    if (atomic_load(&d->in_flight) > 0)
        return 0;
    return now_ms() - atomic_load(&d->last_done_ms);
}

void sandboxd_stop(struct sandboxd *d)
{
    if (!d)
        return;
    atomic_store(&d->stopping, true);
    if (d->mhd)
        MHD_stop_daemon(d->mhd);
    sblive_free(d->live);
    if (d->listen_fd >= 0)
        close(d->listen_fd);
    idem_close(&d->idem);
    wspath_rules_done(&d->rules);
    if (d->wsfd >= 0)
        close(d->wsfd);
    for (size_t i = 0; d->landlock_dirs && d->landlock_dirs[i]; i++)
        free(d->landlock_dirs[i]);
    free(d->landlock_dirs);
    free(d->ws_abs);
    free(d);
}
