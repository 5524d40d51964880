/* sandboxd.c - tern-sandboxd's HTTP layer. See sandboxd.h. */
#include "sandboxd.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"
#include "sandbox/idem.h"
#include "sandbox/restore.h"
#include "sandbox/sandbox_contract.h"
#include "sandbox/sbapi.h"
#include "sandbox/tarball.h"
#include "sandbox/wspath.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SANDBOXD_VERSION "0.1.0"
#define SNAPSHOT_BLOCK (256u << 10)

struct sandboxd {
    struct sandboxd_config cfg;
    unsigned char token_sha[32];
    int wsfd;
    char *ws_abs;
    struct wspath_rules rules;
    struct idem_store idem;
    struct MHD_Daemon *mhd;
    int listen_fd;
    unsigned port;
    size_t interrupted;
    atomic_uint active_execs;
    atomic_flag restoring;
    bool landlock;
    char **landlock_dirs;
};

enum kind { K_NONE, K_EXEC, K_PUT, K_RESTORE, K_DISCARD };

struct req {
    enum kind kind;
    int64_t t0;
    /* a response decided before the body was read, sent at the end */
    unsigned err_status;
    int err_rc;
    const char *err_code;
    char *err_msg;
    uint64_t body_bytes;
    /* exec */
    struct buf body;
    bool exec_slot;
    /* put */
    char norm[WSPATH_BUF];
    int tmpfd;
    char tmpname[80];
    bool append;
    bool replaying;
    mode_t mode;
    bool mode_set;
    /* idempotency */
    char *key;
    char req_hash[65];
    bool ticketed;
    struct idem_ticket ticket;
    cJSON *replay;
    int replay_http;
    /* restore */
    struct restore *rs;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ responses */

static enum MHD_Result send_body(struct sandboxd *d, struct MHD_Connection *c, unsigned status,
                                 char *body, const char *ctype, struct req *r, const char *method,
                                 const char *url)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", ctype);
    enum MHD_Result ok = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    if (d->cfg.on_request)
        d->cfg.on_request(d->cfg.log_ctx, method, url, status, r ? now_ms() - r->t0 : 0);
    return ok;
}

static enum MHD_Result send_json(struct sandboxd *d, struct MHD_Connection *c, unsigned status,
                                 const cJSON *j, struct req *r, const char *method,
                                 const char *url)
{
    return send_body(d, c, status, json_print(j), "application/json", r, method, url);
}

static enum MHD_Result send_error(struct sandboxd *d, struct MHD_Connection *c, unsigned status,
                                  const char *code, const char *msg, struct req *r,
                                  const char *method, const char *url)
{
    return send_body(d, c, status, sbapi_error_body(code, msg), "application/json", r, method,
                     url);
}

/* Maps a negative code to an HTTP status and API error code. */
static unsigned api_error(int rc, const char **code)
{
    switch (rc) {
    case -EXDEV:
    case -EACCES:
    case -ELOOP:
    case -EPERM:
        *code = "forbidden_path";
        return 403;
    case -EROFS:
        *code = "read_only";
        return 403;
    case -ENOENT:
    case -ENOTDIR:
    case TERN_ENOTFOUND:
        *code = "not_found";
        return 404;
    case TERN_ETOOLARGE:
    case -ENAMETOOLONG:
    case -EFBIG:
        *code = "too_large";
        return 413;
    case -ENOSPC:
    case -EDQUOT:
        *code = "too_large";
        return 507;
    case -EBUSY:
        *code = "busy";
        return 409;
    case -EEXIST:
        *code = "bad_request";
        return 422;
    case -EINVAL:
    case -EISDIR:
    case -ENOTEMPTY:
    case TERN_EINVALID:
    case TERN_EPARSE:
        *code = "bad_request";
        return 400;
    default:
        *code = "internal";
        return 500;
    }
}

static enum MHD_Result send_rc(struct sandboxd *d, struct MHD_Connection *c, int rc,
                               const char *msg, struct req *r, const char *method, const char *url)
{
    const char *code;
    unsigned st = api_error(rc, &code);
    return send_error(d, c, st, code, msg && msg[0] ? msg : err_str(rc), r, method, url);
}

/* The message for a path that failed validation or resolution. */
static const char *path_msg(int rc)
{
    switch (rc) {
    case -EXDEV:
        return "path escapes the workspace";
    case -EACCES:
        return "path is in the sandbox's state directory";
    case -ELOOP:
        return "path goes through a symlink where none may be followed";
    case -EROFS:
        return "path is not writable";
    case -EINVAL:
        return "path contains control bytes";
    case -ENAMETOOLONG:
        return "path too long";
    case -ENOENT:
        return "no such file or directory";
    case -ENOTDIR:
        return "a path component is not a directory";
    default:
        return err_str(rc);
    }
}

/* Remembers an error to send once the body has been read. */
static void defer_rc(struct req *r, int rc, const char *msg)
{
    if (r->err_status)
        return;
    r->err_status = api_error(rc, &r->err_code);
    r->err_rc = rc;
    r->err_msg = xstrdup(msg && msg[0] ? msg : err_str(rc));
}

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

/* ------------------------------------------------------------ helpers */

static const char *query(struct MHD_Connection *c, const char *k)
{
    return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
}

static int query_i64(struct MHD_Connection *c, const char *k, int64_t min, int64_t max,
                     int64_t *v, struct tern_err *err)
{
    const char *s = query(c, k);
    if (!s)
        return 0;
    if (num_parse_range(s, min, max, v) != 0)
        return err_set(err, TERN_EINVALID, "%s: must be an integer in [%lld, %lld]", k,
                       (long long)min, (long long)max);
    return 0;
}

static int query_bool(struct MHD_Connection *c, const char *k, bool *v, struct tern_err *err)
{
    const char *s = query(c, k);
    if (!s)
        return 0;
    if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0)
        *v = true;
    else if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0 || !s[0])
        *v = false;
    else
        return err_set(err, TERN_EINVALID, "%s: must be true or false", k);
    return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static bool uid_set(const struct sandboxd *d)
{
    return d->cfg.run_uid != (uid_t)-1 && geteuid() == 0;
}

/* Starts the idempotent part of a request. Returns 0 (go ahead, ticket held
 * if a key was given), 1 (r->replay set), or a negative code. */
static int idem_start(struct sandboxd *d, struct req *r, const char *op, const char *material,
                      size_t mlen, struct tern_err *err)
{
    if (!r->key)
        return 0;
    struct buf m;
    buf_init(&m, mlen + 16);
    buf_printf(&m, "%s\n", op);
    buf_append(&m, material, mlen);
    idem_sha256_hex(m.data, m.len, r->req_hash);
    buf_done(&m);
    int rc = idem_begin(&d->idem, r->key, op, r->req_hash, &r->ticket, &r->replay,
                        &r->replay_http, err);
    if (rc == 0)
        r->ticketed = true;
    return rc;
}

/* Records (if ticketed) and sends a JSON response. */
static enum MHD_Result finish_json(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                   const char *op, unsigned status, cJSON *body,
                                   const char *method, const char *url)
{
    if (r->ticketed) {
        struct tern_err err = {0};
        int rc = idem_finish(&d->idem, &r->ticket, r->key, op, r->req_hash, (int)status, body,
                             &err);
        r->ticketed = false;
        if (rc != 0) {
            cJSON_Delete(body);
            return send_rc(d, c, rc, err.msg, r, method, url);
        }
    }
    cJSON_AddFalseToObject(body, "replayed");
    enum MHD_Result ok = send_json(d, c, status, body, r, method, url);
    cJSON_Delete(body);
    return ok;
}

static enum MHD_Result send_replay(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                   const char *method, const char *url)
{
    cJSON_DeleteItemFromObjectCaseSensitive(r->replay, "replayed");
    cJSON_AddTrueToObject(r->replay, "replayed");
    enum MHD_Result ok = send_json(d, c, (unsigned)r->replay_http, r->replay, r, method, url);
    return ok;
}

/* An error that happened after the ticket was taken: record it too, so a
 * retry sees the same outcome instead of running again. */
static enum MHD_Result finish_error(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                    const char *op, int rc, const char *msg, const char *method,
                                    const char *url)
{
    if (!r->ticketed)
        return send_rc(d, c, rc, msg, r, method, url);
    const char *code;
    unsigned st = api_error(rc, &code);
    char *t = sbapi_error_body(code, msg && msg[0] ? msg : err_str(rc));
    cJSON *body = NULL;
    json_parse(t, strlen(t), &body, NULL);
    free(t);
    struct tern_err err = {0};
    int frc = idem_finish(&d->idem, &r->ticket, r->key, op, r->req_hash, (int)st, body, &err);
    r->ticketed = false;
    cJSON_Delete(body);
    if (frc != 0)
        return send_rc(d, c, frc, err.msg, r, method, url);
    return send_error(d, c, st, code, msg && msg[0] ? msg : err_str(rc), r, method, url);
}

/* ------------------------------------------------------------ exec */

static enum MHD_Result do_exec(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                               const char *method, const char *url)
{
    struct tern_err err = {0};
    struct sbapi_exec ex = {0};
    int cwdfd = -1;
    enum MHD_Result ok;
    int rc = sbapi_parse_exec(r->body.data ? r->body.data : "", r->body.len,
                              d->cfg.default_timeout_ms, &ex, &err);
    if (rc != 0) {
        ok = send_rc(d, c, rc, err.msg, r, method, url);
        goto out;
    }
    rc = wspath_open(d->wsfd, ex.cwd, O_RDONLY | O_DIRECTORY, 0, WSPATH_FOLLOW, &cwdfd);
    if (rc != 0) {
        char msg[WSPATH_BUF + 64];
        snprintf(msg, sizeof msg, "cwd \"%s\": %s", ex.cwd, err_str(rc));
        ok = send_rc(d, c, rc, msg, r, method, url);
        goto out;
    }
    struct buf canon;
    buf_init(&canon, 2 * TERN_SANDBOX_MAX_EXEC_BODY + 4096);
    rc = sbapi_exec_canonical(&ex, &canon);
    if (rc == 0)
        rc = idem_start(d, r, "exec", canon.data ? canon.data : "", canon.len, &err);
    buf_done(&canon);
    if (rc == 1) {
        ok = send_replay(d, c, r, method, url);
        goto out;
    }
    if (rc < 0) {
        ok = send_rc(d, c, rc, err.msg, r, method, url);
        goto out;
    }
    struct sbexec_opts o = {
        .argv = ex.argv,
        .env_add = ex.env,
        .cwd_fd = cwdfd,
        .home = "/tmp",
        .stdin_data = ex.stdin_data,
        .stdin_len = ex.stdin_len,
        .timeout_ms = ex.timeout_ms,
        .kill_grace_ms = d->cfg.kill_grace_ms,
        .max_output = d->cfg.max_output,
        .uid = uid_set(d) ? d->cfg.run_uid : (uid_t)-1,
        .gid = uid_set(d) ? d->cfg.run_gid : (gid_t)-1,
        .lim = d->cfg.lim,
        .landlock_dirs = d->landlock ? (const char *const *)d->landlock_dirs : NULL,
    };
    struct sbexec_result res;
    rc = sbexec_run(&o, &res, &err);
    if (rc != 0) {
        ok = finish_error(d, c, r, "exec", rc, err.msg, method, url);
        goto out;
    }
    cJSON *body = sbapi_exec_response(&res);
    sbexec_result_done(&res);
    ok = finish_json(d, c, r, "exec", 200, body, method, url);
out:
    if (cwdfd >= 0)
        close(cwdfd);
    sbapi_exec_done(&ex);
    return ok;
}

/* ------------------------------------------------------------ files */

static enum MHD_Result do_get_file(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                   const char *rel, const char *method, const char *url)
{
    char norm[WSPATH_BUF];
    struct tern_err err = {0};
    int64_t offset = 0, limit = -1;
    int rc = wspath_normalize(rel, norm);
    if (rc != 0)
        return send_rc(d, c, rc, path_msg(rc), r, method, url);
    if ((rc = query_i64(c, "offset", 0, INT64_MAX, &offset, &err)) ||
        (rc = query_i64(c, "limit", 0, (int64_t)TERN_SANDBOX_MAX_READ, &limit, &err)))
        return send_rc(d, c, rc, err.msg, r, method, url);
    int fd = -1;
    rc = wspath_open(d->wsfd, norm, O_RDONLY, 0, WSPATH_FOLLOW, &fd);
    if (rc != 0)
        return send_rc(d, c, rc, path_msg(rc), r, method, url);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return send_rc(d, c, -EISDIR, "not a regular file (use /v1/list for directories)", r,
                       method, url);
    }
    uint64_t size = (uint64_t)st.st_size;
    uint64_t off = (uint64_t)offset > size ? size : (uint64_t)offset;
    uint64_t len = size - off;
    if (limit >= 0 && (uint64_t)limit < len)
        len = (uint64_t)limit;
    if (len > TERN_SANDBOX_MAX_READ) {
        close(fd);
        return send_rc(d, c, TERN_ETOOLARGE, "file larger than one read; use offset and limit",
                       r, method, url);
    }
    struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(len, fd, off);
    if (!resp) {
        close(fd);
        return send_rc(d, c, -ENOMEM, NULL, r, method, url);
    }
    char num[24];
    snprintf(num, sizeof num, "%llu", (unsigned long long)size);
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    MHD_add_response_header(resp, "X-Tern-File-Size", num);
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    if (d->cfg.on_request)
        d->cfg.on_request(d->cfg.log_ctx, method, url, 200, now_ms() - r->t0);
    return ok;
}

/* PUT, first call: validate, take the ticket, open the staging file. */
static void put_begin(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                      const char *rel, const char *url)
{
    struct tern_err err = {0};
    int rc = wspath_normalize(rel, r->norm);
    int64_t mode = -1;
    if (rc == 0 && !r->norm[0])
        rc = -EISDIR;
    if (rc == 0)
        rc = wspath_check_write(&d->rules, r->norm);
    if (rc == 0 && query(c, "mode")) {
        const char *m = query(c, "mode");
        mode = 0;
        rc = (m[0] && strlen(m) <= 4) ? 0 : -EINVAL;
        for (const char *p = m; rc == 0 && *p; p++) {
            if (*p < '0' || *p > '7')
                rc = -EINVAL;
            else
                mode = mode * 8 + (*p - '0');
        }
        if (rc == 0 && mode > 0777)
            rc = -EINVAL;
        if (rc != 0)
            err_set(&err, TERN_EINVALID, "mode: must be octal permission bits (e.g. 0644)");
        r->mode = (mode_t)mode;
        r->mode_set = rc == 0;
    }
    if (rc == 0)
        rc = query_bool(c, "append", &r->append, &err);
    if (rc == 0) {
        const char *q = query(c, "mode"), *a = query(c, "append");
        char *material = xasprintf("%s\nmode=%s&append=%s", r->norm, q ? q : "", a ? a : "");
        rc = idem_start(d, r, "put", material, strlen(material), &err);
        free(material);
        if (rc == 1) {
            r->replaying = true;
            return;
        }
    }
    if (rc == 0) {
        static atomic_uint seq;
        snprintf(r->tmpname, sizeof r->tmpname, "put.%d.%u", (int)getpid(),
                 atomic_fetch_add(&seq, 1));
        r->tmpfd = openat(d->idem.tmpfd, r->tmpname,
                          O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (r->tmpfd < 0) {
            rc = -errno;
            r->tmpname[0] = '\0';
        }
    }
    if (rc != 0) {
        if (!err.msg[0])
            err_set(&err, rc, "%.300s: %s", r->norm[0] ? r->norm : url, path_msg(rc));
        defer_rc(r, rc, err.msg); /* recorded too, at the end, if ticketed */
    }
}

static int put_apply(struct sandboxd *d, struct req *r, uint64_t *ret_size, struct tern_err *err)
{
    int pfd = -1, rc;
    const char *name;
    uid_t uid = uid_set(d) ? d->cfg.run_uid : (uid_t)-1;
    gid_t gid = uid_set(d) ? d->cfg.run_gid : (gid_t)-1;
    rc = wspath_open_parent(d->wsfd, r->norm, true, uid, gid, &pfd, &name);
    if (rc != 0)
        return err_set(err, rc, "%s: %s", r->norm, err_str(rc));
    struct stat old;
    bool have_old = fstatat(pfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0;
    if (have_old && S_ISDIR(old.st_mode)) {
        rc = err_set(err, -EISDIR, "%s: is a directory", r->norm);
        goto out;
    }
    if (!r->append) {
        mode_t mode = r->mode_set ? r->mode : (have_old && S_ISREG(old.st_mode) ? old.st_mode & 0777 : 0644);
        if (fchmod(r->tmpfd, mode) != 0 || (uid != (uid_t)-1 && fchown(r->tmpfd, uid, gid) != 0) ||
            (r->key && fsync(r->tmpfd) != 0)) {
            rc = err_set(err, -errno, "%s: %s", r->norm, strerror(errno));
            goto out;
        }
        struct stat st;
        fstat(r->tmpfd, &st);
        /* rename replaces the name only: a hardlinked or symlinked target is
         * not written through */
        if (renameat(d->idem.tmpfd, r->tmpname, pfd, name) != 0) {
            rc = err_set(err, -errno, "%s: %s", r->norm, strerror(errno));
            goto out;
        }
        r->tmpname[0] = '\0';
        *ret_size = (uint64_t)st.st_size;
    } else {
        int fd = openat(pfd, name, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
                        r->mode_set ? r->mode : 0644);
        if (fd < 0) {
            rc = err_set(err, -errno, "%s: %s", r->norm, strerror(errno));
            goto out;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
            close(fd);
            rc = err_set(err, -EXDEV, "%s: not a plain file with one link", r->norm);
            goto out;
        }
        if (!have_old && uid != (uid_t)-1 && fchown(fd, uid, gid) != 0) {
            rc = -errno;
            close(fd);
            goto out;
        }
        char chunk[65536];
        lseek(r->tmpfd, 0, SEEK_SET);
        ssize_t k;
        while (rc == 0 && (k = read(r->tmpfd, chunk, sizeof chunk)) != 0) {
            if (k < 0 && errno == EINTR)
                continue;
            rc = k < 0 ? -errno : write_all(fd, chunk, (size_t)k);
        }
        if (rc == 0 && r->key && fsync(fd) != 0)
            rc = -errno;
        if (rc == 0 && fstat(fd, &st) == 0)
            *ret_size = (uint64_t)st.st_size;
        close(fd);
        if (rc != 0)
            err_set(err, rc, "%s: %s", r->norm, err_str(rc));
    }
out:
    close(pfd);
    return rc;
}

static enum MHD_Result do_put_end(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                  const char *method, const char *url)
{
    if (r->replaying)
        return send_replay(d, c, r, method, url);
    if (r->err_status) {
        if (r->ticketed)
            return finish_error(d, c, r, "put", r->err_rc, r->err_msg, method, url);
        return send_error(d, c, r->err_status, r->err_code, r->err_msg, r, method, url);
    }
    struct tern_err err = {0};
    uint64_t size = 0;
    int rc = put_apply(d, r, &size, &err);
    if (rc != 0)
        return finish_error(d, c, r, "put", rc, err.msg, method, url);
    cJSON *body = cJSON_CreateObject();
    json_add_string(body, "status", "completed");
    json_add_string(body, "path", r->norm);
    json_add_int64(body, "size", (int64_t)size);
    return finish_json(d, c, r, "put", 200, body, method, url);
}

static enum MHD_Result do_delete(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                 const char *rel, const char *method, const char *url)
{
    char norm[WSPATH_BUF];
    struct tern_err err = {0};
    int rc = wspath_normalize(rel, norm);
    if (rc == 0)
        rc = wspath_check_write(&d->rules, norm);
    if (rc != 0)
        return send_rc(d, c, rc, path_msg(rc), r, method, url);
    char *material = xasprintf("%s\n", norm);
    rc = idem_start(d, r, "delete", material, strlen(material), &err);
    free(material);
    if (rc == 1)
        return send_replay(d, c, r, method, url);
    if (rc < 0)
        return send_rc(d, c, rc, err.msg, r, method, url);
    int pfd = -1;
    const char *name;
    struct stat st;
    rc = wspath_open_parent(d->wsfd, norm, false, -1, -1, &pfd, &name);
    if (rc == 0 && fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        rc = -errno;
    if (rc == 0)
        rc = wspath_remove_tree(pfd, name);
    if (pfd >= 0)
        close(pfd);
    if (rc != 0) {
        err_set(&err, rc, "%.300s: %s", norm, path_msg(rc));
        return finish_error(d, c, r, "delete", rc, err.msg, method, url);
    }
    cJSON *body = cJSON_CreateObject();
    json_add_string(body, "status", "completed");
    json_add_string(body, "path", norm);
    cJSON_AddTrueToObject(body, "deleted");
    return finish_json(d, c, r, "delete", 200, body, method, url);
}

/* ------------------------------------------------------------ list */

static const char *type_name(mode_t m)
{
    return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

static void list_add(cJSON *arr, const char *path, const struct stat *st, int dfd,
                     const char *name)
{
    cJSON *e = cJSON_CreateObject();
    json_add_string(e, "path", path);
    json_add_string(e, "type", type_name(st->st_mode));
    json_add_int64(e, "size", (int64_t)st->st_size);
    json_add_int64(e, "mode", (int64_t)(st->st_mode & 07777));
    if (S_ISLNK(st->st_mode) && dfd >= 0) {
        char t[PATH_MAX + 1];
        ssize_t n = readlinkat(dfd, name, t, PATH_MAX);
        if (n >= 0) {
            t[n] = '\0';
            struct buf s;
            buf_init(&s, 3 * (size_t)n + 1);
            sbapi_utf8_sanitize(t, (size_t)n, &s);
            json_add_string(e, "target", buf_str(&s));
            buf_done(&s);
        }
    }
    cJSON_AddItemToArray(arr, e);
}

/* Lists dfd's children into arr up to depth; returns false when the count bound hit. */
static bool list_dir(int dfd, const char *prefix, int depth, bool at_root, cJSON *arr,
                     size_t *count)
{
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0)
            close(fd);
        return true;
    }
    bool ok = true;
    struct dirent *e;
    while (ok && (e = readdir(dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (at_root && strcmp(e->d_name, SANDBOX_STATE_DIR) == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (*count >= TERN_SANDBOX_MAX_LIST) {
            ok = false;
            break;
        }
        char *path = prefix[0] ? xasprintf("%s/%s", prefix, e->d_name) : xstrdup(e->d_name);
        list_add(arr, path, &st, dirfd(dir), e->d_name);
        (*count)++;
        if (S_ISDIR(st.st_mode) && depth > 1 && strlen(path) < TERN_SANDBOX_MAX_PATH) {
            int sub = openat(dirfd(dir), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                ok = list_dir(sub, path, depth - 1, false, arr, count);
                close(sub);
            }
        }
        free(path);
    }
    closedir(dir);
    return ok;
}

static enum MHD_Result do_list(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                               const char *rel, const char *method, const char *url)
{
    char norm[WSPATH_BUF];
    struct tern_err err = {0};
    int64_t depth = 1;
    int rc = wspath_normalize(rel, norm);
    if (rc != 0)
        return send_rc(d, c, rc, path_msg(rc), r, method, url);
    if ((rc = query_i64(c, "depth", 0, TERN_SANDBOX_MAX_LIST_DEPTH, &depth, &err)))
        return send_rc(d, c, rc, err.msg, r, method, url);
    int fd = -1;
    rc = wspath_open(d->wsfd, norm, O_PATH, 0, WSPATH_FOLLOW, &fd);
    if (rc != 0)
        return send_rc(d, c, rc, path_msg(rc), r, method, url);
    struct stat st;
    fstat(fd, &st);
    cJSON *body = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddItemToObject(body, "entries", arr);
    bool complete = true;
    size_t count = 0;
    if (depth == 0 || !S_ISDIR(st.st_mode)) {
        list_add(arr, norm, &st, -1, NULL);
    } else {
        int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            complete = list_dir(dfd, norm, (int)depth, norm[0] == '\0', arr, &count);
            close(dfd);
        }
    }
    close(fd);
    cJSON_AddBoolToObject(body, "truncated", !complete);
    enum MHD_Result ok = send_json(d, c, 200, body, r, method, url);
    cJSON_Delete(body);
    return ok;
}

/* ------------------------------------------------------------ snapshot */

static ssize_t snap_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct tarw *w = cls;
    size_t n = 0;
    if (tarw_read(w, buf, max, &n) != 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

static void snap_free(void *cls)
{
    tarw_free(cls);
}

static enum MHD_Result do_snapshot(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                   const char *method, const char *url)
{
    static const char *const skip[] = {SANDBOX_STATE_DIR, NULL};
    struct tarw *w = NULL;
    int rc = tarw_new(d->wsfd, skip, &w);
    if (rc != 0)
        return send_rc(d, c, rc, "snapshot", r, method, url);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SNAPSHOT_BLOCK, snap_read, w, snap_free);
    MHD_add_response_header(resp, "Content-Type", "application/x-tar");
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    if (d->cfg.on_request)
        d->cfg.on_request(d->cfg.log_ctx, method, url, 200, now_ms() - r->t0);
    return ok;
}

/* ------------------------------------------------------------ routing */

static void req_free(struct sandboxd *d, struct req *r)
{
    if (!r)
        return;
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
        return send_error(d, c, 401, "unauthorized", "missing or wrong bearer token", r, method,
                          url);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    uint64_t clen = 0;
    if (cl && num_parse_u64(cl, &clen) != 0) {
        *answered = true;
        return send_error(d, c, 400, "bad_request", "bad Content-Length", r, method, url);
    }
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key");
    if (key) {
        if (idem_key_valid(key) != 0) {
            *answered = true;
            return send_error(d, c, 400, "bad_request",
                              "Idempotency-Key: 1 to 256 printable ASCII characters", r, method,
                              url);
        }
        r->key = xstrdup(key);
    }
    const char *rest;
    if (strcmp(url, "/v1/exec") == 0 && strcmp(method, "POST") == 0) {
        if (clen > TERN_SANDBOX_MAX_EXEC_BODY) {
            *answered = true;
            return send_error(d, c, 413, "too_large", "exec body too large", r, method, url);
        }
        unsigned cur = atomic_load(&d->active_execs);
        do {
            if (cur >= d->cfg.max_execs) {
                *answered = true;
                return send_error(d, c, 429, "busy", "too many concurrent execs", r, method, url);
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
            return send_error(d, c, 413, "too_large", "file too large", r, method, url);
        }
        r->kind = K_PUT;
        put_begin(d, c, r, rest, url);
        return MHD_YES;
    }
    if (strcmp(url, "/v1/restore") == 0 && strcmp(method, "POST") == 0) {
        if (clen > TERN_SANDBOX_MAX_RESTORE) {
            *answered = true;
            return send_error(d, c, 413, "too_large", "restore stream too large", r, method, url);
        }
        if (atomic_flag_test_and_set(&d->restoring)) {
            *answered = true;
            return send_error(d, c, 409, "busy", "a restore is already running", r, method, url);
        }
        struct tern_err err = {0};
        uid_t uid = uid_set(d) ? d->cfg.run_uid : (uid_t)-1;
        gid_t gid = uid_set(d) ? d->cfg.run_gid : (gid_t)-1;
        int rc = restore_begin(d->wsfd, d->idem.tmpfd, &d->rules, uid, gid, &r->rs, &err);
        if (rc != 0) {
            atomic_flag_clear(&d->restoring);
            *answered = true;
            return send_rc(d, c, rc, err.msg, r, method, url);
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
            defer_rc(r, TERN_ETOOLARGE, "exec body too large");
        if (r->body_bytes > 2ULL * TERN_SANDBOX_MAX_EXEC_BODY)
            return MHD_NO;
        break;
    case K_PUT:
        if (r->replaying || r->err_status)
            break;
        if (r->body_bytes > TERN_SANDBOX_MAX_PUT) {
            defer_rc(r, TERN_ETOOLARGE, "file too large");
            break;
        }
        rc = write_all(r->tmpfd, p, n);
        if (rc != 0)
            defer_rc(r, rc, "writing the file");
        break;
    case K_RESTORE:
        if (r->body_bytes > TERN_SANDBOX_MAX_RESTORE)
            return MHD_NO;
        if (!r->err_status) {
            struct tern_err err = {0};
            rc = restore_feed(r->rs, p, n, &err);
            if (rc != 0)
                defer_rc(r, rc, err.msg);
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
        return do_put_end(d, c, r, method, url);
    if (r->kind == K_RESTORE && r->err_status) { /* release before answering */
        restore_free(r->rs);
        r->rs = NULL;
        atomic_flag_clear(&d->restoring);
    }
    if (r->err_status)
        return send_error(d, c, r->err_status, r->err_code, r->err_msg, r, method, url);
    if (r->kind == K_EXEC) {
        enum MHD_Result ok = do_exec(d, c, r, method, url);
        /* free the slot before the queued answer reaches the client, so its
         * next exec is not refused as busy */
        if (r->exec_slot) {
            atomic_fetch_sub(&d->active_execs, 1);
            r->exec_slot = false;
        }
        return ok;
    }
    if (r->kind == K_RESTORE) {
        struct tern_err err = {0};
        struct restore_stats st;
        int rc = restore_commit(r->rs, &st, &err);
        restore_free(r->rs);
        r->rs = NULL;
        atomic_flag_clear(&d->restoring);
        if (rc != 0)
            return send_rc(d, c, rc, err.msg, r, method, url);
        cJSON *body = cJSON_CreateObject();
        json_add_string(body, "status", "completed");
        json_add_int64(body, "entries", (int64_t)st.entries);
        json_add_int64(body, "files", (int64_t)st.files);
        json_add_int64(body, "bytes", (int64_t)st.bytes);
        json_add_int64(body, "skipped", (int64_t)st.skipped);
        enum MHD_Result ok = send_json(d, c, 200, body, r, method, url);
        cJSON_Delete(body);
        return ok;
    }
    bool get = strcmp(method, "GET") == 0;
    if (prefixed(url, "/v1/files", &rest)) {
        if (get)
            return do_get_file(d, c, r, rest, method, url);
        if (strcmp(method, "DELETE") == 0)
            return do_delete(d, c, r, rest, method, url);
    } else if (prefixed(url, "/v1/list", &rest)) {
        if (get)
            return do_list(d, c, r, rest, method, url);
    } else if (strcmp(url, "/v1/snapshot") == 0) {
        if (strcmp(method, "POST") == 0)
            return do_snapshot(d, c, r, method, url);
    } else if (strcmp(url, "/v1/executions") == 0) {
        if (get) {
            cJSON *arr = NULL;
            struct tern_err err = {0};
            int rc = idem_list(&d->idem, &arr, &err);
            if (rc != 0)
                return send_rc(d, c, rc, err.msg, r, method, url);
            cJSON *body = cJSON_CreateObject();
            cJSON_AddItemToObject(body, "executions", arr);
            enum MHD_Result ok = send_json(d, c, 200, body, r, method, url);
            cJSON_Delete(body);
            return ok;
        }
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
            enum MHD_Result ok = send_json(d, c, 200, body, r, method, url);
            cJSON_Delete(body);
            return ok;
        }
    } else if (strcmp(url, "/v1/exec") != 0 && strcmp(url, "/v1/restore") != 0) {
        return send_error(d, c, 404, "not_found", "no such endpoint", r, method, url);
    }
    return send_error(d, c, 405, "bad_request", "method not allowed", r, method, url);
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
    if ((rc = prepare_workspace(d, err)) != 0 || (rc = idem_open(d->wsfd, &d->idem, err)) != 0 ||
        (rc = idem_recover(&d->idem, &d->interrupted, err)) != 0)
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

void sandboxd_stop(struct sandboxd *d)
{
    if (!d)
        return;
    if (d->mhd)
        MHD_stop_daemon(d->mhd);
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
