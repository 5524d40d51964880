/* wspath.c - paths beneath the workspace. See wspath.h. */
#include "wspath.h"

#include "base/glob.h"
#include "base/mem.h"
#include "sandbox/sandbox_contract.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *const readonly_parts[] = {SANDBOX_READONLY_PARTS};

int wspath_normalize(const char *in, char *out)
{
    char tmp[WSPATH_BUF];
    size_t o = 0;
    if (in[0] == '/')
        return -EXDEV;
    const char *p = in;
    bool first = true;
    while (*p) {
        const char *s = p;
        while (*p && *p != '/')
            p++;
        size_t n = (size_t)(p - s);
        if (*p == '/')
            p++;
        if (n == 0 || (n == 1 && s[0] == '.'))
            continue;
        if (n == 2 && s[0] == '.' && s[1] == '.')
            return -EXDEV;
        if (n > TERN_SANDBOX_MAX_NAME)
            return -ENAMETOOLONG;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
                return -EINVAL;
        if (first && n == strlen(SANDBOX_STATE_DIR) && memcmp(s, SANDBOX_STATE_DIR, n) == 0)
            return -EACCES;
        if (o + n + (o ? 1 : 0) > TERN_SANDBOX_MAX_PATH)
            return -ENAMETOOLONG;
        if (o)
            tmp[o++] = '/';
        memcpy(tmp + o, s, n);
        o += n;
        first = false;
    }
    tmp[o] = '\0';
    memcpy(out, tmp, o + 1);
    return 0;
}

/* true when norm equals part (a "dir/" part also matches everything beneath) */
static bool under_part(const char *norm, const char *part)
{
    size_t n = strlen(part);
    if (n && part[n - 1] == '/') {
        n--;
        return strncmp(norm, part, n) == 0 && (norm[n] == '\0' || norm[n] == '/');
    }
    return strcmp(norm, part) == 0;
}

bool wspath_readonly(const char *norm)
{
    if (!norm[0] || under_part(norm, SANDBOX_STATE_DIR "/"))
        return true;
    for (size_t i = 0; i < sizeof readonly_parts / sizeof *readonly_parts; i++)
        if (under_part(norm, readonly_parts[i]))
            return true;
    return false;
}

void wspath_rules_done(struct wspath_rules *r)
{
    for (size_t i = 0; i < r->nglobs; i++)
        free(r->globs[i]);
    for (size_t i = 0; i < r->nroots; i++)
        free(r->roots[i]);
    r->nglobs = r->nroots = 0;
}

int wspath_rules_parse(const char *csv, struct wspath_rules *ret, struct tern_err *err)
{
    struct wspath_rules r = {0};
    int rc = 0;
    const char *p = csv;
    while (*p) {
        const char *s = p;
        while (*p && *p != ',')
            p++;
        size_t n = (size_t)(p - s);
        if (*p == ',')
            p++;
        while (n && s[0] == ' ')
            s++, n--;
        while (n && s[n - 1] == ' ')
            n--;
        if (n == 0)
            continue;
        char *g = xstrndup(s, n);
        char norm[WSPATH_BUF];
        if (r.nglobs == TERN_SANDBOX_MAX_GLOBS) {
            free(g);
            rc = err_set(err, -EINVAL, "more than %d writable globs", TERN_SANDBOX_MAX_GLOBS);
            goto out;
        }
        if (wspath_normalize(g, norm) != 0 || strcmp(norm, g) != 0) {
            rc = err_set(err, -EINVAL, "writable glob \"%s\": not a normalised relative path", g);
            free(g);
            goto out;
        }
        if (!glob_valid(g)) {
            rc = err_set(err, -EINVAL, "writable glob \"%s\": malformed (see base/glob.h)", g);
            free(g);
            goto out;
        }
        size_t rl = strcspn(g, "/");
        char *root = xstrndup(g, rl);
        if (strpbrk(root, "*?[\\") || wspath_readonly(root)) {
            rc = err_set(err, -EINVAL,
                         "writable glob \"%s\": must start with a literal directory that is not "
                         "read-only",
                         g);
            free(root);
            free(g);
            goto out;
        }
        r.globs[r.nglobs++] = g;
        bool seen = false;
        for (size_t i = 0; i < r.nroots; i++)
            seen = seen || strcmp(r.roots[i], root) == 0;
        if (seen)
            free(root);
        else
            r.roots[r.nroots++] = root;
    }
    *ret = r;
    return 0;
out:
    wspath_rules_done(&r);
    return rc;
}

int wspath_check_write(const struct wspath_rules *r, const char *norm)
{
    if (wspath_readonly(norm))
        return -EROFS;
    for (size_t i = 0; i < r->nglobs; i++)
        if (glob_match(r->globs[i], norm, WSPATH_GLOB_MODE))
            return 0;
    return -EROFS;
}

/* -ELOOP when name in dfd is a symlink (what openat2 with
 * RESOLVE_NO_SYMLINKS reports), else err. */
static int symlink_or(int dfd, const char *name, int err)
{
    struct stat st;
    if ((err == -ENOTDIR || err == -ELOOP) && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode))
        return -ELOOP;
    return err;
}

/* The openat2-less equivalent: one component at a time, never following. */
static int walk_open(int wsfd, const char *norm, int flags, mode_t mode)
{
    char buf[WSPATH_BUF];
    size_t n = strlen(norm);
    memcpy(buf, norm, n + 1);
    int dfd = -1;
    char *s = buf;
    for (;;) {
        char *slash = strchr(s, '/');
        if (!slash)
            break;
        *slash = '\0';
        int nfd = openat(dfd < 0 ? wsfd : dfd, s, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = nfd < 0 ? symlink_or(dfd < 0 ? wsfd : dfd, s, -errno) : 0;
        if (dfd >= 0)
            close(dfd);
        if (nfd < 0)
            return e;
        dfd = nfd;
        s = slash + 1;
    }
    int fd = openat(dfd < 0 ? wsfd : dfd, s, flags | O_NOFOLLOW | O_CLOEXEC, mode);
    int e = fd < 0 ? symlink_or(dfd < 0 ? wsfd : dfd, s, -errno) : 0;
    if (dfd >= 0)
        close(dfd);
    return fd < 0 ? e : fd;
}

/* 0 when fd is not inside the workspace's state dir; -ELOOP when unknowable. */
static int check_not_state(int wsfd, int fd)
{
    char lk[64], ws[PATH_MAX + 1], obj[PATH_MAX + 1];
    snprintf(lk, sizeof lk, "/proc/self/fd/%d", wsfd);
    ssize_t a = readlink(lk, ws, PATH_MAX);
    snprintf(lk, sizeof lk, "/proc/self/fd/%d", fd);
    ssize_t b = readlink(lk, obj, PATH_MAX);
    if (a <= 0 || b <= 0)
        return -ELOOP;
    ws[a] = obj[b] = '\0';
    size_t wl = (size_t)a;
    if (wl == 1) /* workspace is "/" */
        wl = 0;
    if (strncmp(obj, ws, wl) != 0 || (obj[wl] != '/' && obj[wl] != '\0'))
        return -EXDEV;
    const char *rel = obj + wl + (obj[wl] == '/');
    size_t sl = strlen(SANDBOX_STATE_DIR);
    if (strncmp(rel, SANDBOX_STATE_DIR, sl) == 0 && (rel[sl] == '/' || rel[sl] == '\0'))
        return -EACCES;
    return 0;
}

int wspath_open(int wsfd, const char *norm, int flags, mode_t mode, enum wspath_follow follow,
                int *ret_fd)
{
    const char *p = norm[0] ? norm : ".";
    struct open_how how = {
        .flags = (unsigned long long)(flags | O_CLOEXEC),
        .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
                   (follow == WSPATH_NOFOLLOW ? RESOLVE_NO_SYMLINKS : 0),
    };
    int fd = (int)syscall(SYS_openat2, wsfd, p, &how, sizeof how);
    if (fd < 0 && errno == ENOSYS)
        fd = walk_open(wsfd, p, flags, mode);
    else if (fd < 0)
        fd = -errno;
    if (fd < 0)
        return fd;
    if (follow == WSPATH_FOLLOW) {
        int r = check_not_state(wsfd, fd);
        if (r != 0) {
            close(fd);
            return r;
        }
    }
    *ret_fd = fd;
    return 0;
}

int wspath_open_parent(int wsfd, const char *norm, bool mkdirs, uid_t uid, gid_t gid,
                       int *ret_dirfd, const char **ret_name)
{
    const char *last = strrchr(norm, '/');
    if (!norm[0])
        return -EINVAL;
    if (!last) {
        int fd = dup(wsfd);
        if (fd < 0)
            return -errno;
        *ret_dirfd = fd;
        *ret_name = norm;
        return 0;
    }
    char dir[WSPATH_BUF];
    size_t dl = (size_t)(last - norm);
    memcpy(dir, norm, dl);
    dir[dl] = '\0';
    int fd = -1;
    int r = wspath_open(wsfd, dir, O_PATH | O_DIRECTORY, 0, WSPATH_NOFOLLOW, &fd);
    if (r == -ENOENT && mkdirs) {
        /* create missing components one by one, each beneath the previous */
        int dfd = dup(wsfd);
        if (dfd < 0)
            return -errno;
        char *s = dir;
        for (;;) {
            char *slash = strchr(s, '/');
            if (slash)
                *slash = '\0';
            if (mkdirat(dfd, s, 0755) == 0) {
                if (uid != (uid_t)-1 && fchownat(dfd, s, uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
                    r = -errno;
                    close(dfd);
                    return r;
                }
            } else if (errno != EEXIST) {
                r = -errno;
                close(dfd);
                return r;
            }
            int nfd = openat(dfd, s, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            r = nfd < 0 ? symlink_or(dfd, s, -errno) : 0;
            close(dfd);
            if (r != 0)
                return r;
            dfd = nfd;
            if (!slash)
                break;
            s = slash + 1;
        }
        fd = dfd;
        r = 0;
    }
    if (r != 0)
        return r;
    *ret_dirfd = fd;
    *ret_name = last + 1;
    return 0;
}

static int wspath_remove_at(int dirfd, const char *name, int depth);

static int remove_children(int pfd, const char *name, int depth)
{
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return -e;
    }
    int r = 0;
    struct dirent *e;
    while (r == 0 && (errno = 0, e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        r = wspath_remove_at(dirfd(d), e->d_name, depth + 1);
    }
    if (r == 0 && errno)
        r = -errno;
    closedir(d);
    return r;
}

static int wspath_remove_at(int dirfd, const char *name, int depth)
{
    if (unlinkat(dirfd, name, 0) == 0)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -errno;
    if (depth >= TERN_SANDBOX_MAX_TREE_DEPTH)
        return -ENAMETOOLONG;
    /* entries removed while reading a directory may hide others: retry */
    for (int tries = 0; tries < 4; tries++) {
        int r = remove_children(dirfd, name, depth);
        if (r != 0)
            return r;
        if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0)
            return 0;
        if (errno != ENOTEMPTY)
            return -errno;
    }
    return -ENOTEMPTY;
}

int wspath_remove_tree(int dirfd, const char *name)
{
    return wspath_remove_at(dirfd, name, 0);
}
