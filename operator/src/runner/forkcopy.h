/* forkcopy.h - `tern-runner copy`: a fork's workspace copy.
 *
 * Streams the parent sandbox's POST /v1/snapshot (a tar) straight into the
 * child sandbox's POST /v1/restore, through a pipe between two transfers on
 * two threads: nothing is held in memory beyond the pipe and curl's buffers,
 * nothing touches the disk, and the operator never carries the data. The
 * child's restore either applies the whole stream or nothing (sandboxd
 * restores into a staging directory and swaps), so a failed copy is retried
 * by the Job from scratch.
 */
#ifndef TERN_FORKCOPY_H
#define TERN_FORKCOPY_H

#include "base/err.h"

#include <stdint.h>

struct forkcopy_opts {
    const char *from_addr, *from_token; /* parent sandboxd HOST:PORT and bearer token */
    const char *to_addr, *to_token;     /* child sandboxd */
    long timeout_ms;                    /* whole copy; 0 = one hour */
};

/* Copies. Returns 0 and the bytes streamed in *ret_bytes (may be NULL), or
 * TERN_EUNREACHABLE / TERN_ETIMEOUT / TERN_EHTTP (a sandboxd refused, with
 * its status and error body in err) / -EIO. */
int forkcopy_run(const struct forkcopy_opts *o, uint64_t *ret_bytes, struct tern_err *err);

#endif
