/* err.c - error codes and context. See err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(struct tern_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    return code;
}

int err_wrap(struct tern_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    char prefix[TERN_ERRMSG_MAX], old[TERN_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    old[sizeof old - 1] = '\0';
    size_t n = strlen(prefix);
    memcpy(err->msg, prefix, n + 1);
    if (old[0] && n + 2 < sizeof err->msg) {
        memcpy(err->msg + n, ": ", 3);
        size_t room = sizeof err->msg - n - 3;
        size_t m = strnlen(old, room);
        memcpy(err->msg + n + 2, old, m);
        err->msg[n + 2 + m] = '\0';
    }
    if (!err->code)
        err->code = code;
    return err->code;
}

const char *err_str(int code)
{
    switch (code) {
    case 0: return "ok";
    case TERN_EUNREACHABLE: return "unreachable";
    case TERN_ETIMEOUT: return "timed out";
    case TERN_ECOMPACTED: return "revision compacted";
    case TERN_ETXNFAILED: return "transaction compare failed";
    case TERN_ETOOLARGE: return "too large";
    case TERN_EAUTH: return "authentication failed";
    case TERN_EUNKNOWN: return "outcome unknown";
    case TERN_EFENCED: return "fenced out by another writer";
    case TERN_EPARSE: return "malformed input";
    case TERN_EHTTP: return "unexpected HTTP status";
    case TERN_ENOTFOUND: return "not found";
    case TERN_ECONFLICT: return "conflict";
    case TERN_EINVALID: return "invalid";
    default:
        if (code < 0 && code > -4096)
            return strerror(-code);
        return "unknown error";
    }
}
