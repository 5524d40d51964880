/* restore.h - replaces the writable part of the workspace from a tar stream.
 *
 * The stream is extracted into a fresh staging directory under .tern/tmp/
 * (never into the live workspace): entries whose path is writable under the
 * rules are created there, entries in read-only parts (input/, task.md, ...)
 * or outside every glob are skipped and counted. Any invalid entry (a name
 * escaping the workspace, a hardlink whose target is not an earlier entry of
 * the same stream, a path through a symlink, a malformed header) fails the
 * whole restore and leaves the workspace untouched.
 *
 * restore_commit then, for each writable root R (the literal first
 * component of each glob), atomically exchanges <workspace>/R with the staged
 * R (renameat2 RENAME_EXCHANGE; R keeps its previous mode and owner) and
 * removes the old tree. A root absent from the stream becomes empty.
 * Modes (07777 minus setuid/setgid), symlinks, empty directories and file
 * mtimes are restored; owners become uid:gid when uid is not -1 (sandboxd
 * as root) and stay sandboxd's otherwise.
 */
#ifndef TERN_RESTORE_H
#define TERN_RESTORE_H

#include "base/err.h"
#include "sandbox/wspath.h"

#include <stdint.h>
#include <sys/types.h>

struct restore_stats {
    uint64_t entries; /* tar entries read */
    uint64_t files;   /* files, dirs and links created */
    uint64_t bytes;   /* file data bytes written */
    uint64_t skipped; /* entries outside the writable part */
};

struct restore;

/* Creates the staging directory in tmpfd. rules is borrowed. Returns 0 and
 * *ret, or a negative errno. */
int restore_begin(int wsfd, int tmpfd, const struct wspath_rules *rules, uid_t uid, gid_t gid,
                  struct restore **ret, struct tern_err *err);
/* Feeds tar bytes. Returns 0 or the (sticky) error, see tarball.h. */
int restore_feed(struct restore *r, const void *p, size_t n, struct tern_err *err);
/* Ends the stream and swaps the staged roots in. Returns 0 and *ret_stats, or
 * an error (the workspace is unchanged unless a swap itself failed midway). */
int restore_commit(struct restore *r, struct restore_stats *ret_stats, struct tern_err *err);
/* Removes the staging directory (whatever state) and frees r; accepts NULL. */
void restore_free(struct restore *r);

#endif
