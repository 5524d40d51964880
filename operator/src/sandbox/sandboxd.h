/* sandboxd.h - tern-sandboxd's HTTP server (libmicrohttpd, one thread per
 * connection). The API is the tern-sandboxd contract of docs/design.md
 * ("Contracts between the parts"); docs/sandbox.md describes every endpoint,
 * field and error.
 *
 * Every request must carry "Authorization: Bearer <token>"; the token is
 * compared in constant time (SHA-256 of both sides, CRYPTO_memcmp). Errors
 * are the HTTP status plus {"error": {"code", "message"}} with code one of
 * unauthorized, forbidden_path, read_only, not_found, too_large,
 * bad_request, busy (and internal for server-side failures such as I/O).
 *
 * sandboxd_start opens the workspace, creates the state directory and the
 * writable roots, turns records of executions cut off by a previous run into
 * "interrupted" (idem.h), and only then starts serving.
 */
#ifndef TERN_SANDBOXD_H
#define TERN_SANDBOXD_H

#include "base/err.h"
#include "sandbox/sbexec.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum sandboxd_landlock { SANDBOXD_LANDLOCK_AUTO = 0, SANDBOXD_LANDLOCK_ON, SANDBOXD_LANDLOCK_OFF };

struct sandboxd_config {
    const char *listen;          /* "HOST:PORT", ":PORT" or "[v6]:PORT"; port 0 = any */
    const unsigned char *token;  /* the bearer token bytes (borrowed) */
    size_t token_len;            /* > 0 */
    const char *workspace;       /* existing directory */
    const char *writable;        /* comma-separated globs (wspath.h) */
    uid_t run_uid;               /* commands' uid, (uid_t)-1 = sandboxd's own */
    gid_t run_gid;
    unsigned max_execs;          /* concurrent execs; more are answered busy */
    int64_t default_timeout_ms;  /* exec without timeoutMs */
    int64_t kill_grace_ms;       /* SIGTERM -> SIGKILL */
    size_t max_output;           /* kept stdout/stderr bytes each */
    struct sbexec_limits lim;
    enum sandboxd_landlock landlock;
    unsigned max_connections;
    bool read_only;              /* serve reads only (the file viewer of a parked
                                  * session): exec, PUT, DELETE, restore -> read_only */
    /* "NAME=value" entries every command gets over the defaults (the
     * SANDBOX_PASS_ENV variables of sandboxd's environment), or NULL;
     * borrowed */
    char *const *pass_env;
    /* optional access log hook, called after each response is queued */
    void (*on_request)(void *ctx, const char *method, const char *url, unsigned status,
                       int64_t ms);
    void *log_ctx;
};

struct sandboxd;

/* Starts serving. Returns 0 and *ret, or a negative code with err set
 * (-EINVAL bad config, -errno for the workspace or the socket). */
int sandboxd_start(const struct sandboxd_config *cfg, struct sandboxd **ret, struct tern_err *err);
/* The bound TCP port. */
unsigned sandboxd_port(const struct sandboxd *d);
/* How many records were turned into "interrupted" at startup. */
size_t sandboxd_interrupted(const struct sandboxd *d);
/* True when commands are confined with Landlock. */
int sandboxd_landlock_active(const struct sandboxd *d);
/* Milliseconds since the last request ended, 0 while one is being served
 * (for --idle-exit). */
int64_t sandboxd_idle_ms(struct sandboxd *d);
/* Stops the server (running execs are waited for) and frees d; accepts NULL. */
void sandboxd_stop(struct sandboxd *d);

/* Parses "uid:gid" (decimal) for --run-as. Returns 0 or -EINVAL. */
int sandboxd_parse_run_as(const char *s, uid_t *ret_uid, gid_t *ret_gid);

#endif
