/* fsutil.c - filesystem helpers. See fsutil.h. */
#define _XOPEN_SOURCE 700
#include "fsutil.h"

#include "base/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fsutil_mkdirs(const char *path, mode_t mode, struct tern_err *err)
{
    char *p = xstrdup(path);
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == 0) {
            char c = *s;
            *s = 0;
            if (mkdir(p, mode) != 0 && errno != EEXIST) {
                rc = err_set(err, -errno, "mkdir %s: %s", p, strerror(errno));
                goto out;
            }
            *s = c;
            if (!c)
                break;
        }
    }
out:
    free(p);
    return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    int r = (flag == FTW_DP) ? rmdir(path) : unlink(path);
    return r != 0 && errno != ENOENT ? -1 : 0;
}

int fsutil_rmtree(const char *path, struct tern_err *err)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : err_set(err, -errno, "stat %s: %s", path, strerror(errno));
    if (nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS) != 0)
        return err_set(err, -errno, "remove %s: %s", path, strerror(errno));
    return 0;
}

int fsutil_write(const char *path, const void *data, size_t n, mode_t mode, struct tern_err *err)
{
    char *tmp = xasprintf("%s.tmp%ld", path, (long)getpid());
    int rc = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        rc = err_set(err, -errno, "create %s: %s", tmp, strerror(errno));
        goto out;
    }
    const char *p = data;
    size_t left = n;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = err_set(err, -errno, "write %s: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            goto out;
        }
        p += w;
        left -= (size_t)w;
    }
    fchmod(fd, mode);
    close(fd);
    if (rename(tmp, path) != 0) {
        rc = err_set(err, -errno, "rename %s: %s", path, strerror(errno));
        unlink(tmp);
    }
out:
    free(tmp);
    return rc;
}

int fsutil_read(const char *path, size_t max, char **ret, size_t *ret_len, struct tern_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, -errno, "open %s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *b = xmalloc(cap + 1);
    int rc = 0;
    for (;;) {
        if (len == cap) {
            if (cap >= max) {
                rc = err_set(err, TERN_ETOOLARGE, "%s: larger than %zu bytes", path, max);
                goto out;
            }
            cap = cap * 2 > max ? max : cap * 2;
            b = xrealloc(b, cap + 1);
        }
        ssize_t r = read(fd, b + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = err_set(err, -errno, "read %s: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    b[len] = 0;
    *ret = b;
    *ret_len = len;
    b = NULL;
out:
    free(b);
    close(fd);
    return rc;
}

char *fsutil_exe_dir(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash || slash == exe)
        return NULL;
    *slash = 0;
    return xstrdup(exe);
}
