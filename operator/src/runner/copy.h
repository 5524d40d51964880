/* copy.h - the fork copy: stream one sandbox's workspace snapshot into
 * another sandbox's restore (DESIGN.md §6, `tern-runner copy`).
 *
 * POST <from>/v1/snapshot (application/x-tar out) is piped, as it arrives,
 * into POST <to>/v1/restore (chunked upload), so the runner never holds the
 * workspace in memory or on disk. If the snapshot fails (transport error or a
 * non-200 status) the upload is aborted, so the target sees a truncated
 * stream and keeps its workspace untouched (sandboxd validates the whole
 * archive before swapping anything in). The snapshot is not point-in-time:
 * copy at a turn boundary, when no command runs.
 */
#ifndef TERN_RUNNER_COPY_H
#define TERN_RUNNER_COPY_H

#include "base/err.h"

#include <stdatomic.h>
#include <stdint.h>

struct copy_config {
    const char *from_addr;   /* HOST:PORT of the source sandboxd */
    const char *from_token;
    const char *to_addr;     /* HOST:PORT of the target sandboxd */
    const char *to_token;
    long connect_timeout_ms; /* 0 = 5000 */
    long idle_timeout_ms;    /* abort when no byte moves for this long; 0 = 60000 */
};

struct copy_result {
    int64_t bytes;           /* tar bytes moved */
    long snapshot_status;    /* HTTP status of the snapshot (0 = none) */
    long restore_status;     /* HTTP status of the restore (0 = none) */
    char restore_body[512];  /* start of the restore answer */
};

/* Copies. Returns 0 when the restore answered 200 (*ret filled), else
 * TERN_EHTTP (a non-200 answer; *ret says which side and the body),
 * TERN_EUNREACHABLE / TERN_ETIMEOUT / -EIO (transport), -ECANCELED. *ret is
 * filled in every case (for the log). */
int copy_workspace(const struct copy_config *cfg, atomic_bool *cancel, struct copy_result *ret,
                   struct tern_err *err);

#endif
