/* err.h - error codes and error context.
 *
 * Functions return 0 or a negative code: a negated errno value (-ENOMEM,
 * -EINVAL, ...) or one of the TERN_E* codes below for conditions errno has no
 * name for. A `struct tern_err *` argument (may be NULL) receives a
 * human-readable message with context (a field path, a URL, a reason); the
 * caller owns it, typically on the stack.
 */
#ifndef TERN_ERR_H
#define TERN_ERR_H

#include "limits.h"

enum tern_errcode {
    TERN_EUNREACHABLE    = -1000, /* no endpoint answered */
    TERN_ETIMEOUT        = -1001, /* request timed out */
    TERN_ECOMPACTED      = -1002, /* etcd revision compacted / watch too old */
    TERN_ETXNFAILED      = -1003, /* a compare in a transaction failed */
    TERN_ETOOLARGE       = -1004, /* request or response over a bound */
    TERN_EAUTH           = -1005, /* authentication/authorization refused */
    TERN_EUNKNOWN        = -1006, /* a write whose outcome is unknown */
    TERN_EFENCED         = -1007, /* another writer owns this (journal fence) */
    TERN_EPARSE          = -1008, /* malformed input */
    TERN_EHTTP           = -1009, /* unexpected HTTP status */
    TERN_ENOTFOUND       = -1010, /* key/object absent */
    TERN_ECONFLICT       = -1011, /* optimistic concurrency conflict */
    TERN_EINVALID        = -1012, /* input failed validation */
};

struct tern_err {
    int code;
    char msg[TERN_ERRMSG_MAX];
};

/* Records code and a printf-style message in err (if non-NULL); returns code,
 * so callers can write `return err_set(err, -EINVAL, "...")`. */
int err_set(struct tern_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes err->msg with "prefix: " (for adding context on the way up);
 * returns err->code, or code if err is NULL. */
int err_wrap(struct tern_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A static description of a code (errno or TERN_E*). Never NULL. */
const char *err_str(int code);

#endif
