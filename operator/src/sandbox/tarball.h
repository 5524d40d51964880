/* tarball.h - a small ustar/pax tar writer (snapshot) and a push-style tar
 * reader (restore), both streaming with bounded memory.
 *
 * Writer: walks a directory tree without following symlinks and produces
 * POSIX ustar entries for directories, regular files and symlinks (other
 * file types are left out); a pax extended header ('x') carries paths or
 * link targets longer than 99 bytes and sizes of 8 GiB and more. Names are
 * relative ("dir/", "dir/file"); mode bits and mtime are kept, owners are
 * written as 0. A file that shrinks while it is read is padded with zeros;
 * one that grows is cut at the size in its header.
 *
 * Reader: fed arbitrary chunks of a tar stream; calls back once per entry
 * with a validated, normalised workspace-relative path (wspath_normalize:
 * absolute names, "..", control bytes and the state dir are rejected),
 * then with the entry's data, then at its end. Understands ustar (with
 * prefix), pax 'x' (path, linkpath, size, mtime) and 'g' (ignored), GNU 'L'
 * and 'K' long names, base-256 sizes. Types: '0'/'\0'/'7' file, '5' dir,
 * '2' symlink, '1' hardlink; any other type is rejected. Checksums are
 * verified. The stream ends with a zero block.
 *
 * Errors: -EXDEV / -EACCES (a name escaping the workspace or naming the
 * state dir), TERN_EPARSE (malformed header, bad checksum, bad pax record,
 * unsupported type, truncated stream), TERN_ETOOLARGE (pax header, entry
 * count), or whatever a callback returned.
 */
#ifndef TERN_TARBALL_H
#define TERN_TARBALL_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- writer ---- */
struct tarw;

/* A writer for the tree below the directory fd rootfd (borrowed; must stay
 * open). Top-level names listed in skip_top (NULL-terminated, or NULL) are
 * left out. Returns 0 and *ret, or a negative errno. */
int tarw_new(int rootfd, const char *const *skip_top, struct tarw **ret);
/* Produces up to max bytes of the stream into out; *ret_n == 0 marks the
 * end. Returns 0 or a negative errno (-ENAMETOOLONG beyond
 * TERN_SANDBOX_MAX_TREE_DEPTH, I/O errors); after an error the stream is
 * unusable. */
int tarw_read(struct tarw *w, char *out, size_t max, size_t *ret_n);
void tarw_free(struct tarw *w);

/* ---- reader ---- */
enum tar_type { TAR_FILE = '0', TAR_DIR = '5', TAR_SYMLINK = '2', TAR_HARDLINK = '1' };

struct tar_entry {
    enum tar_type type;
    const char *path; /* normalised; "" for the root itself */
    const char *link; /* symlink target (verbatim) or normalised hardlink target; else "" */
    uint64_t size;    /* data bytes that follow (files) */
    mode_t mode;      /* permission bits (07777) */
    int64_t mtime;
};

struct tarr_ops {
    int (*entry)(void *ctx, const struct tar_entry *e);
    int (*data)(void *ctx, const void *p, size_t n);
    int (*entry_end)(void *ctx);
};

struct tarr;

struct tarr *tarr_new(const struct tarr_ops *ops, void *ctx);
void tarr_free(struct tarr *r);
/* Feeds n bytes. Returns 0, or the first error (sticky: later calls return it). */
int tarr_feed(struct tarr *r, const void *p, size_t n, struct tern_err *err);
/* Declares the end of input: 0 when the archive ended properly, else TERN_EPARSE. */
int tarr_finish(struct tarr *r, struct tern_err *err);
/* Entries seen so far. */
uint64_t tarr_entries(const struct tarr *r);

#endif
