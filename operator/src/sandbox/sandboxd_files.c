/* sandboxd_files.c - tern-sandboxd's file endpoints: GET /v1/files/<path>
 * (a byte range of a regular file), PUT (staged in the state directory,
 * then renamed over the target or appended to it; idempotent), DELETE (a
 * file or a tree; idempotent), and GET /v1/list/<path> (entries to a
 * depth, bounded). Paths are resolved beneath the workspace (wspath.h).
 */
#include "sandboxd_internal.h"

#include "base/mem.h"
#include "json/json.h"
#include "sandbox/sandbox_contract.h"
#include "sandbox/sbapi.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum MHD_Result sandboxd__do_get_file(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                      const char *rel, const char *method, const char *url)
{
    char norm[WSPATH_BUF];
    struct tern_err err = {0};
    int64_t offset = 0, limit = -1;
    int rc = wspath_normalize(rel, norm);
    if (rc != 0)
        return sandboxd__send_rc(d, c, rc, sandboxd__path_msg(rc), r, method, url);
    if ((rc = sandboxd__query_i64(c, "offset", 0, INT64_MAX, &offset, &err)) ||
        (rc = sandboxd__query_i64(c, "limit", 0, (int64_t)TERN_SANDBOX_MAX_READ, &limit, &err)))
        return sandboxd__send_rc(d, c, rc, err.msg, r, method, url);
    int fd = -1;
    rc = wspath_open(d->wsfd, norm, O_RDONLY, 0, WSPATH_FOLLOW, &fd);
    if (rc != 0)
        return sandboxd__send_rc(d, c, rc, sandboxd__path_msg(rc), r, method, url);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sandboxd__send_rc(d, c, -EISDIR, "not a regular file (use /v1/list for directories)",
                                 r, method, url);
    }
    uint64_t size = (uint64_t)st.st_size;
    uint64_t off = (uint64_t)offset > size ? size : (uint64_t)offset;
    uint64_t len = size - off;
    if (limit >= 0 && (uint64_t)limit < len)
        len = (uint64_t)limit;
    if (len > TERN_SANDBOX_MAX_READ) {
        close(fd);
        return sandboxd__send_rc(d, c, TERN_ETOOLARGE,
                                 "file larger than one read; use offset and limit", r, method, url);
    }
    struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(len, fd, off);
    if (!resp) {
        close(fd);
        return sandboxd__send_rc(d, c, -ENOMEM, NULL, r, method, url);
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
void sandboxd__put_begin(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
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
        rc = sandboxd__query_bool(c, "append", &r->append, &err);
    if (rc == 0) {
        const char *q = query(c, "mode"), *a = query(c, "append");
        char *material = xasprintf("%s\nmode=%s&append=%s", r->norm, q ? q : "", a ? a : "");
        rc = sandboxd__idem_start(d, r, "put", material, strlen(material), &err);
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
            err_set(&err, rc, "%.300s: %s", r->norm[0] ? r->norm : url, sandboxd__path_msg(rc));
        sandboxd__defer_rc(r, rc, err.msg); /* recorded too, at the end, if ticketed */
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
            rc = k < 0 ? -errno : sandboxd__write_all(fd, chunk, (size_t)k);
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

enum MHD_Result sandboxd__do_put_end(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                     const char *method, const char *url)
{
    if (r->replaying)
        return sandboxd__send_replay(d, c, r, method, url);
    if (r->err_status) {
        if (r->ticketed)
            return sandboxd__finish_error(d, c, r, "put", r->err_rc, r->err_msg, method, url);
        return sandboxd__send_error(d, c, r->err_status, r->err_code, r->err_msg, r, method, url);
    }
    struct tern_err err = {0};
    uint64_t size = 0;
    int rc = put_apply(d, r, &size, &err);
    if (rc != 0)
        return sandboxd__finish_error(d, c, r, "put", rc, err.msg, method, url);
    cJSON *body = cJSON_CreateObject();
    json_add_string(body, "status", "completed");
    json_add_string(body, "path", r->norm);
    json_add_int64(body, "size", (int64_t)size);
    return sandboxd__finish_json(d, c, r, "put", 200, body, method, url);
}

enum MHD_Result sandboxd__do_delete(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                    const char *rel, const char *method, const char *url)
{
    char norm[WSPATH_BUF];
    struct tern_err err = {0};
    int rc = wspath_normalize(rel, norm);
    if (rc == 0)
        rc = wspath_check_write(&d->rules, norm);
    if (rc != 0)
        return sandboxd__send_rc(d, c, rc, sandboxd__path_msg(rc), r, method, url);
    char *material = xasprintf("%s\n", norm);
    rc = sandboxd__idem_start(d, r, "delete", material, strlen(material), &err);
    free(material);
    if (rc == 1)
        return sandboxd__send_replay(d, c, r, method, url);
    if (rc < 0)
        return sandboxd__send_rc(d, c, rc, err.msg, r, method, url);
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
        err_set(&err, rc, "%.300s: %s", norm, sandboxd__path_msg(rc));
        return sandboxd__finish_error(d, c, r, "delete", rc, err.msg, method, url);
    }
    cJSON *body = cJSON_CreateObject();
    json_add_string(body, "status", "completed");
    json_add_string(body, "path", norm);
    cJSON_AddTrueToObject(body, "deleted");
    return sandboxd__finish_json(d, c, r, "delete", 200, body, method, url);
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

enum MHD_Result sandboxd__do_list(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                  const char *rel, const char *method, const char *url)
{
    char norm[WSPATH_BUF];
    struct tern_err err = {0};
    int64_t depth = 1;
    int rc = wspath_normalize(rel, norm);
    if (rc != 0)
        return sandboxd__send_rc(d, c, rc, sandboxd__path_msg(rc), r, method, url);
    if ((rc = sandboxd__query_i64(c, "depth", 0, TERN_SANDBOX_MAX_LIST_DEPTH, &depth, &err)))
        return sandboxd__send_rc(d, c, rc, err.msg, r, method, url);
    int fd = -1;
    rc = wspath_open(d->wsfd, norm, O_PATH, 0, WSPATH_FOLLOW, &fd);
    if (rc != 0)
        return sandboxd__send_rc(d, c, rc, sandboxd__path_msg(rc), r, method, url);
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
    enum MHD_Result ok = sandboxd__send_json(d, c, 200, body, r, method, url);
    cJSON_Delete(body);
    return ok;
}
