/* fsutil.h - small filesystem helpers for the controllers and the kubelet. */
#ifndef TERN_FSUTIL_H
#define TERN_FSUTIL_H

#include "base/err.h"

#include <stddef.h>
#include <sys/types.h>

/* mkdir -p with mode for created directories. 0 or -errno. */
int fsutil_mkdirs(const char *path, mode_t mode, struct tern_err *err);
/* rm -rf without following symlinks; a missing path is success. 0 or -errno. */
int fsutil_rmtree(const char *path, struct tern_err *err);
/* Writes data atomically (temp file + rename) with mode. 0 or -errno. */
int fsutil_write(const char *path, const void *data, size_t n, mode_t mode, struct tern_err *err);
/* Reads a whole file of at most max bytes into *ret (NUL-terminated, caller
 * frees) and its length. 0, -errno, or TERN_ETOOLARGE. */
int fsutil_read(const char *path, size_t max, char **ret, size_t *ret_len, struct tern_err *err);
/* The directory of the running binary (/proc/self/exe), a new string, or
 * NULL when it cannot be read. tern-dev and tern-node bind it into pods at
 * /opt/tern/bin by default. */
char *fsutil_exe_dir(void);

#endif
