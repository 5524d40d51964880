/* podlog.h - the pods/log subresource's data, for the API server: reads the
 * kubelet's per-container log files (kubelet.h) with the options kubectl
 * sends (container, previous, tailLines, limitBytes, follow).
 *
 * Non-follow: podlog_read appends the selected bytes to out. Follow:
 * podlog_follow_open, then podlog_follow_next in a loop (the caller sleeps
 * between calls and passes the pod as it is now, re-read from the store):
 * each call appends what was written since; *ret_done becomes true once the
 * container no longer runs (or restarted) and everything was sent. timestamps
 * and sinceSeconds are not supported (the files keep no times).
 */
#ifndef TERN_PODLOG_H
#define TERN_PODLOG_H

#include "base/buf.h"
#include "base/err.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

struct podlog_opts {
    const char *container; /* NULL: the default container */
    bool previous;
    int64_t tail_lines;    /* -1: all */
    int64_t limit_bytes;   /* -1: no limit */
};

/* Appends the log to out. TERN_ENOTFOUND (no such container / previous
 * run), TERN_EINVALID, TERN_ETOOLARGE (out's bound), or 0. A container that
 * has not started yet gives an empty log. */
int podlog_read(const char *dir, const cJSON *pod, const struct podlog_opts *o, struct buf *out,
                struct tern_err *err);

struct podlog_follow;

/* Starts following (applies tail_lines to what exists; limit_bytes bounds
 * the total). */
int podlog_follow_open(const char *dir, const cJSON *pod, const struct podlog_opts *o,
                       struct podlog_follow **ret, struct tern_err *err);
/* Appends new bytes; sets *ret_done when the stream is over. */
int podlog_follow_next(struct podlog_follow *f, const cJSON *pod_now, struct buf *out,
                       bool *ret_done, struct tern_err *err);
/* As podlog_follow_next, appending at most chunk bytes (0: no bound), so a
 * large log can be streamed in pieces; *ret_done only once the end was
 * reached. With pod_now NULL (not following) it ends at the end of the
 * file. */
int podlog_follow_chunk(struct podlog_follow *f, const cJSON *pod_now, size_t chunk,
                        struct buf *out, bool *ret_done, struct tern_err *err);
void podlog_follow_free(struct podlog_follow *f);

/* A container's termination message, as a kubelet makes it: the first
 * 4096 bytes of term_file; when that is empty, the container failed
 * (exit_code != 0) and policy is FallbackToLogsOnError, the last 80 lines
 * or 2048 bytes (whichever is less) of log_file. Written into out
 * (NUL-terminated, cut on a UTF-8 boundary); returns its length (0: none). */
size_t podlog_termination_message(const char *term_file, const char *log_file,
                                  bool fallback_to_logs, int exit_code, char *out, size_t outsz);

#endif
