/* wspath.h - paths beneath the workspace: validation, write rules, opening.
 *
 * Every path that arrives in a request is workspace-relative. It is first
 * normalised lexically (wspath_normalize): no absolute paths, no "..", no
 * control bytes, bounded length; "." and empty components are dropped. Then
 * it is opened relative to the workspace directory fd with openat2(2) and
 * RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, so a symlink cannot lead outside
 * the workspace. Writes additionally use RESOLVE_NO_SYMLINKS: the lexical
 * path that the write rules were checked against is then the real path.
 * Where openat2 is missing (ENOSYS: old kernels, some gVisor versions) an
 * equivalent walk opens one component at a time with O_NOFOLLOW, i.e. never
 * follows a symlink at all.
 *
 * Read-only parts (input/, task.md, simple.md, skills/, the workspace root
 * itself) and the state directory (.tern/, see idem.h) can never be written;
 * other paths are writable only if a --writable glob matches them. Globs are
 * workspace-relative and match as base/glob.h describes, in WSPATH_GLOB_MODE:
 * "*" and "?" match within one component and not a leading '.', "**" crosses
 * components; "working/\*\*" matches everything beneath working/ but not
 * working itself. Each glob must begin with a literal top-level directory
 * (its "root"): restore replaces exactly those roots.
 *
 * Errors (negative errno values, mapped to API codes by sandboxd_reply.c):
 *   -EXDEV   absolute path, "..", or resolution escaping   -> forbidden_path
 *   -EACCES  the state directory                            -> forbidden_path
 *   -ELOOP   a symlink where none may be followed           -> forbidden_path
 *   -EROFS   read-only part or no writable glob matches     -> read_only
 *   -EINVAL  control bytes, bad glob                        -> bad_request
 *   -ENAMETOOLONG                                           -> too_large
 *   other -errno from the filesystem (-ENOENT, -ENOTDIR, -EISDIR, ...).
 */
#ifndef TERN_WSPATH_H
#define TERN_WSPATH_H

#include "base/err.h"
#include "base/glob.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Size of a buffer that holds any normalised path (with NUL). */
#define WSPATH_BUF (TERN_SANDBOX_MAX_PATH + 1)

/* Normalises in (a NUL-terminated string) into out[WSPATH_BUF]: components
 * joined by single '/', no leading or trailing '/'; "" is the workspace root.
 * Returns 0, -EXDEV, -EACCES (first component is the state dir), -EINVAL or
 * -ENAMETOOLONG; out is written only on success. */
int wspath_normalize(const char *in, char *out);

/* True when norm is the workspace root, the state dir, or inside a read-only part. */
bool wspath_readonly(const char *norm);

/* How --writable globs match normalised paths (base/glob.h): path mode,
 * wildcards do not match a leading '.' of a component, and "dir/" "**" does not
 * match dir itself. */
#define WSPATH_GLOB_MODE (GLOB_PATH | GLOB_PERIOD | GLOB_NO_DIR_SELF)

/* The parsed --writable globs. */
struct wspath_rules {
    char *globs[TERN_SANDBOX_MAX_GLOBS];
    char *roots[TERN_SANDBOX_MAX_GLOBS]; /* distinct literal first components */
    size_t nglobs, nroots;
};

/* Parses a comma-separated glob list into r (empty globs are skipped).
 * Returns 0, or -EINVAL with err set: a glob that is absolute, contains "..",
 * is malformed (glob_valid), starts with a wildcard component, or names a
 * read-only part or the state dir; too many globs. r is set only on success; release with wspath_rules_done. */
int wspath_rules_parse(const char *csv, struct wspath_rules *r, struct tern_err *err);
void wspath_rules_done(struct wspath_rules *r);

/* 0 when norm may be written (created, replaced, deleted), else -EROFS. */
int wspath_check_write(const struct wspath_rules *r, const char *norm);

enum wspath_follow {
    WSPATH_NOFOLLOW = 0, /* no symlink anywhere in the path (writes) */
    WSPATH_FOLLOW,       /* symlinks that stay beneath the workspace (reads) */
};

/* Opens norm beneath the workspace directory wsfd with open flags and mode
 * (O_CLOEXEC is added). With WSPATH_FOLLOW the opened object is then checked
 * not to lie in the state dir (via /proc/self/fd; fails closed with -ELOOP
 * when that cannot be checked). Returns 0 and *ret_fd, or a negative errno. */
int wspath_open(int wsfd, const char *norm, int flags, mode_t mode, enum wspath_follow follow,
                int *ret_fd);

/* Opens the parent directory of norm (which must not be "") without following
 * symlinks; with mkdirs, missing parents are created with mode 0755 and, if
 * uid != -1, chowned to uid:gid. Sets *ret_dirfd and *ret_name (a pointer
 * into norm: the last component). Returns 0 or a negative errno. */
int wspath_open_parent(int wsfd, const char *norm, bool mkdirs, uid_t uid, gid_t gid,
                       int *ret_dirfd, const char **ret_name);

/* Removes name in dirfd: a file or symlink, or a directory tree (symlinks are
 * removed, never followed; nesting bounded by TERN_SANDBOX_MAX_TREE_DEPTH,
 * beyond it -ENAMETOOLONG). Returns 0 or a negative errno. */
int wspath_remove_tree(int dirfd, const char *name);

#endif
