/* restore.c - tar stream into staging, then swap. See restore.h. */
#include "restore.h"

#include "base/mem.h"
#include "sandbox/tarball.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct dirmode {
    char *path;
    mode_t mode;
};

struct restore {
    int wsfd, tmpfd, stagefd;
    char stage_name[64];
    const struct wspath_rules *rules;
    uid_t uid;
    gid_t gid;
    struct tarr *tar;
    int fd; /* file being written, or -1 */
    mode_t fmode;
    int64_t fmtime;
    struct dirmode *dirs;
    size_t ndirs, capdirs;
    struct restore_stats st;
};

static int e_entry(void *ctx, const struct tar_entry *e);
static int e_data(void *ctx, const void *p, size_t n);
static int e_end(void *ctx);
static const struct tarr_ops ops = {e_entry, e_data, e_end};

int restore_begin(int wsfd, int tmpfd, const struct wspath_rules *rules, uid_t uid, gid_t gid,
                  struct restore **ret, struct tern_err *err)
{
    static atomic_uint seq;
    struct restore *r = xcalloc(1, sizeof *r);
    r->wsfd = wsfd;
    r->tmpfd = tmpfd;
    r->rules = rules;
    r->uid = uid;
    r->gid = gid;
    r->fd = -1;
    snprintf(r->stage_name, sizeof r->stage_name, "restore.%d.%u", (int)getpid(),
             atomic_fetch_add(&seq, 1));
    if (mkdirat(tmpfd, r->stage_name, 0700) != 0) {
        int e = -errno;
        free(r);
        return err_set(err, e, "restore: staging dir: %s", err_str(e));
    }
    r->stagefd = openat(tmpfd, r->stage_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (r->stagefd < 0) {
        int e = -errno;
        unlinkat(tmpfd, r->stage_name, AT_REMOVEDIR);
        free(r);
        return err_set(err, e, "restore: staging dir: %s", err_str(e));
    }
    r->tar = tarr_new(&ops, r);
    *ret = r;
    return 0;
}

void restore_free(struct restore *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    close(r->stagefd);
    wspath_remove_tree(r->tmpfd, r->stage_name);
    for (size_t i = 0; i < r->ndirs; i++)
        free(r->dirs[i].path);
    free(r->dirs);
    tarr_free(r->tar);
    free(r);
}

static bool is_root(const struct restore *r, const char *path)
{
    for (size_t i = 0; i < r->rules->nroots; i++)
        if (strcmp(r->rules->roots[i], path) == 0)
            return true;
    return false;
}

static int own(struct restore *r, int dfd, const char *name)
{
    if (r->uid == (uid_t)-1)
        return 0;
    return fchownat(dfd, name, r->uid, r->gid, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

/* Removes whatever is at name unless it is a directory we can reuse. */
static int clear_slot(int dfd, const char *name, bool keep_dir)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (keep_dir && S_ISDIR(st.st_mode))
        return 0;
    return wspath_remove_tree(dfd, name);
}

static int e_entry(void *ctx, const struct tar_entry *e)
{
    struct restore *r = ctx;
    r->st.entries++;
    if (!e->path[0])
        return 0;
    bool root = is_root(r, e->path);
    if (!root && wspath_check_write(r->rules, e->path) != 0) {
        r->st.skipped++;
        return 0;
    }
    if (root && e->type != TAR_DIR)
        return -EXDEV; /* a writable root must stay a directory */
    if (root)
        return 0; /* roots keep their live mode/owner; created at commit */
    int dfd = -1;
    const char *name;
    int rc = wspath_open_parent(r->stagefd, e->path, true, r->uid, r->gid, &dfd, &name);
    if (rc != 0)
        return rc;
    mode_t mode = e->mode & 01777;
    switch (e->type) {
    case TAR_DIR:
        rc = clear_slot(dfd, name, true);
        if (rc == 0 && mkdirat(dfd, name, 0700) != 0 && errno != EEXIST)
            rc = -errno;
        if (rc == 0)
            rc = own(r, dfd, name);
        if (rc == 0) {
            if (r->ndirs == r->capdirs) {
                r->capdirs = r->capdirs ? 2 * r->capdirs : 64;
                r->dirs = xreallocarray(r->dirs, r->capdirs, sizeof *r->dirs);
            }
            r->dirs[r->ndirs++] = (struct dirmode){xstrdup(e->path), mode};
        }
        break;
    case TAR_FILE:
        rc = clear_slot(dfd, name, false);
        if (rc == 0) {
            r->fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            rc = r->fd < 0 ? -errno : 0;
        }
        if (rc == 0 && r->uid != (uid_t)-1 && fchown(r->fd, r->uid, r->gid) != 0)
            rc = -errno;
        r->fmode = mode;
        r->fmtime = e->mtime;
        break;
    case TAR_SYMLINK:
        rc = clear_slot(dfd, name, false);
        if (rc == 0 && symlinkat(e->link, dfd, name) != 0)
            rc = -errno;
        if (rc == 0)
            rc = own(r, dfd, name);
        break;
    case TAR_HARDLINK: {
        /* only to an earlier entry of this stream, i.e. inside staging */
        int tfd = -1;
        const char *tname;
        rc = wspath_check_write(r->rules, e->link) == 0 ? 0 : -EXDEV;
        if (rc == 0)
            rc = wspath_open_parent(r->stagefd, e->link, false, -1, -1, &tfd, &tname);
        if (rc == -ENOENT || rc == -ELOOP)
            rc = -EXDEV;
        if (rc == 0) {
            struct stat st;
            if (fstatat(tfd, tname, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode))
                rc = -EXDEV;
        }
        if (rc == 0)
            rc = clear_slot(dfd, name, false);
        if (rc == 0 && linkat(tfd, tname, dfd, name, 0) != 0)
            rc = -errno;
        if (tfd >= 0)
            close(tfd);
        break;
    }
    }
    close(dfd);
    if (rc == 0)
        r->st.files++;
    return rc;
}

static int e_data(void *ctx, const void *p, size_t n)
{
    struct restore *r = ctx;
    if (r->fd < 0)
        return 0; /* a skipped entry's data */
    const char *c = p;
    while (n) {
        ssize_t k = write(r->fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        c += k;
        n -= (size_t)k;
        r->st.bytes += (uint64_t)k;
    }
    return 0;
}

static int e_end(void *ctx)
{
    struct restore *r = ctx;
    if (r->fd < 0)
        return 0;
    int rc = 0;
    if (fchmod(r->fd, r->fmode) != 0)
        rc = -errno;
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = r->fmtime}};
    if (rc == 0 && futimens(r->fd, ts) != 0)
        rc = -errno;
    close(r->fd);
    r->fd = -1;
    return rc;
}

int restore_feed(struct restore *r, const void *p, size_t n, struct tern_err *err)
{
    return tarr_feed(r->tar, p, n, err);
}

int restore_commit(struct restore *r, struct restore_stats *ret_stats, struct tern_err *err)
{
    int rc = tarr_finish(r->tar, err);
    if (rc != 0)
        return rc;
    /* directory modes last, deepest first, so read-only dirs did not block extraction */
    for (size_t i = r->ndirs; i-- > 0;) {
        int fd = -1;
        rc = wspath_open(r->stagefd, r->dirs[i].path, O_RDONLY | O_DIRECTORY, 0, WSPATH_NOFOLLOW,
                         &fd);
        if (rc == 0) {
            rc = fchmod(fd, r->dirs[i].mode) == 0 ? 0 : -errno;
            close(fd);
        }
        if (rc != 0)
            return err_set(err, rc, "restore: mode of %s: %s", r->dirs[i].path, err_str(rc));
    }
    for (size_t i = 0; i < r->rules->nroots; i++) {
        const char *root = r->rules->roots[i];
        struct stat live;
        bool have_live = fstatat(r->wsfd, root, &live, AT_SYMLINK_NOFOLLOW) == 0;
        if (mkdirat(r->stagefd, root, 0755) != 0 && errno != EEXIST)
            return err_set(err, -errno, "restore: %s: %s", root, strerror(errno));
        mode_t mode = have_live && S_ISDIR(live.st_mode) ? live.st_mode & 07777 : 0755;
        uid_t u = have_live ? live.st_uid : r->uid;
        gid_t g = have_live ? live.st_gid : r->gid;
        if (fchmodat(r->stagefd, root, mode, 0) != 0)
            return err_set(err, -errno, "restore: chmod %s: %s", root, strerror(errno));
        if (u != (uid_t)-1 && geteuid() == 0 && fchownat(r->stagefd, root, u, g, AT_SYMLINK_NOFOLLOW) != 0)
            return err_set(err, -errno, "restore: chown %s: %s", root, strerror(errno));
        if (have_live) {
            if (renameat2(r->stagefd, root, r->wsfd, root, RENAME_EXCHANGE) != 0)
                return err_set(err, -errno, "restore: swap %s: %s", root, strerror(errno));
            rc = wspath_remove_tree(r->stagefd, root); /* the old tree */
            if (rc != 0)
                return err_set(err, rc, "restore: removing old %s: %s", root, err_str(rc));
        } else if (renameat2(r->stagefd, root, r->wsfd, root, RENAME_NOREPLACE) != 0) {
            return err_set(err, -errno, "restore: %s: %s", root, strerror(errno));
        }
    }
    *ret_stats = r->st;
    return 0;
}
