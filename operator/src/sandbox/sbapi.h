/* sbapi.h - the pure part of tern-sandboxd's API: parsing the exec request
 * body and building response bodies (docs/design.md, "Contracts between the
 * parts": tern-sandboxd).
 *
 * POST /v1/exec body, a JSON object with exactly these optional members
 * (an unknown member is an error, so a misspelt "timeout" is not ignored):
 *   "cmd":       a non-empty string, run as /bin/sh -c <cmd>     } exactly
 *   "argv":      a non-empty array of strings, run directly       } one
 *   "cwd":       workspace-relative directory (default: the workspace)
 *   "env":       {"NAME": "value", ...}; NAME matches [A-Za-z_][A-Za-z0-9_]*
 *   "timeoutMs": integer 1..TERN_SANDBOX_MAX_TIMEOUT_MS (default from config)
 *   "stdin":     a string written to the command's stdin
 * Bounds: body TERN_SANDBOX_MAX_EXEC_BODY, argv TERN_SANDBOX_MAX_ARGV,
 * env TERN_SANDBOX_MAX_ENV, stdin TERN_SANDBOX_MAX_STDIN bytes.
 */
#ifndef TERN_SBAPI_H
#define TERN_SBAPI_H

#include "base/buf.h"
#include "base/err.h"
#include "sandbox/sbexec.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbapi_exec {
    char **argv;     /* NULL-terminated, owned */
    char **env;      /* "NAME=value", NULL-terminated, owned */
    char *cwd;       /* normalised ("" = the workspace root), owned */
    int64_t timeout_ms;
    char *stdin_data; /* owned, may be NULL */
    size_t stdin_len;
};

/* Parses and validates an exec body. Returns 0 and *ret (release with
 * sbapi_exec_done), TERN_ETOOLARGE (a bound), or TERN_EINVALID / TERN_EPARSE
 * with the field path in err; a cwd that escapes gives -EXDEV / -EACCES. */
int sbapi_parse_exec(const char *body, size_t n, int64_t default_timeout_ms,
                     struct sbapi_exec *ret, struct tern_err *err);
void sbapi_exec_done(struct sbapi_exec *r);

/* Appends a canonical encoding of the parsed request to out (argv, cwd, env
 * sorted by name, timeoutMs, stdin; each field length-prefixed), so two
 * bodies that differ only in member order or whitespace are the same request
 * for idempotency. A request parsed from a body within its bound encodes
 * in less than 2 * TERN_SANDBOX_MAX_EXEC_BODY + 4096 bytes: give out that
 * bound. Returns 0, or TERN_ETOOLARGE when out's bound was hit (out is then
 * incomplete and must not be used). */
int sbapi_exec_canonical(const struct sbapi_exec *r, struct buf *out);

/* Appends p[0..n) to out with every invalid UTF-8 sequence (including a
 * sequence cut at the end) replaced by U+FFFD, so output is valid JSON text.
 * Returns 0 or TERN_ETOOLARGE (out's bound). */
int sbapi_utf8_sanitize(const char *p, size_t n, struct buf *out);

/* The exec response object for a finished run (without "replayed"). */
cJSON *sbapi_exec_response(const struct sbexec_result *r);

/* {"error": {"code": code, "message": message}} as a new string. */
char *sbapi_error_body(const char *code, const char *message);

#endif
