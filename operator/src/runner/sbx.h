/* sbx.h - the runner's client of tern-sandboxd (docs/design.md, "Contracts
 * between the parts"), and the rendering of its answers as tool messages for
 * the model.
 *
 * One function per tool. Side-effecting requests (exec, PUT) carry
 * `Idempotency-Key: <session uid>/<call id>`, so a runner that re-sends a
 * call after a crash gets sandboxd's recorded answer ("replayed": true)
 * instead of running the command twice.
 *
 * The calls return 0 whenever sandboxd answered (any HTTP status: look at
 * ret->http_status), or a transport error (TERN_EUNREACHABLE, TERN_ETIMEOUT,
 * -EIO, ...) when it did not: the runner then exits 75 and a later attempt
 * re-reads the sandbox address and retries under the same key.
 *
 * sbx_render is pure: result -> the tool message (valid UTF-8, at most
 * TERN_RUNNER_MAX_OUTPUT bytes plus a truncation marker) and a status word.
 */
#ifndef TERN_RUNNER_SBX_H
#define TERN_RUNNER_SBX_H

#include "base/err.h"
#include "base/buf.h"
#include "policy/policy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbx_config {
    const char *address;     /* "HOST:PORT" (status.sandbox.address) */
    const char *token;       /* bearer token */
    long connect_timeout_ms; /* 0 = 5000 */
    long extra_timeout_ms;   /* added to a call's tool timeout for the HTTP timeout; 0 = 15000 */
};

struct sbx;

/* A client; config strings are copied. Free with sbx_free (accepts NULL). */
struct sbx *sbx_new(const struct sbx_config *cfg);
void sbx_free(struct sbx *s);

struct sbx_result {
    enum policy_tool tool;
    long http_status;
    char *body;              /* raw body (NUL-terminated), owned */
    size_t body_len;
    bool replayed;           /* exec / write answered from sandboxd's record */
};

void sbx_result_done(struct sbx_result *r);

/* Waits until tern-sandboxd answers GET /readyz with 200 (polling every
 * 20 ms: the runner starts beside its sandbox and may be first), at most
 * timeout_ms. 0, or TERN_ETIMEOUT with the last error in err. */
int sbx_wait_ready(struct sbx *s, int64_t timeout_ms, struct tern_err *err);

/* Runs the validated call a (any tool) with timeout_ms (from policy_decide).
 * key is "<uid>/<callId>" (used for exec and write_file). Returns 0 and *ret,
 * or a transport error. */
int sbx_call(struct sbx *s, const char *key, const struct policy_args *a, int64_t timeout_ms,
             struct sbx_result *ret, struct tern_err *err);

/* Streams the workspace file path into fd (GET /v1/files in ranges, for
 * the trusted tools: a repository bundle), at most max bytes. Returns 0
 * with *ret_size, TERN_ENOTFOUND when sandboxd has no such file,
 * TERN_ETOOLARGE past max, TERN_EHTTP for another answer (*ret_status),
 * or a transport error. */
int sbx_fetch_file(struct sbx *s, const char *path, int fd, uint64_t max, int64_t timeout_ms,
                   uint64_t *ret_size, long *ret_status, struct tern_err *err);

/* DELETE /v1/files/<path> without an idempotency key (a temporary file of
 * the runner's). Returns 0 when sandboxd answered (any status in
 * *ret_status) or a transport error. */
int sbx_delete_file(struct sbx *s, const char *path, long *ret_status, struct tern_err *err);

/* Renders r as the tool message for the model. *ret_status is "completed",
 * "failed" (non-zero exit), "timeout", "interrupted" (an exec or a write cut
 * off by a sandbox restart: its record says so, and it is never re-run) or
 * "error" (HTTP error, e.g. forbidden_path, not_found; or an answer that
 * does not say what happened). Returns the text (owned). Pure. */
char *sbx_render(const struct sbx_result *r, const char **ret_status);

/* Appends p[0..n) to out as valid UTF-8 (each invalid byte -> U+FFFD).
 * Returns 0 or TERN_ETOOLARGE (out's bound reached; what fit is kept). */
int sbx_utf8_append(struct buf *out, const char *p, size_t n);

#endif
