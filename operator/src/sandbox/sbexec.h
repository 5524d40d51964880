/* sbexec.h - runs one command for tern-sandboxd.
 *
 * The command runs in its own process group (it calls setpgid(0, 0)),
 * with a scrubbed environment (PATH, HOME, LANG, TERM, TMPDIR, then the
 * caller's additions), resource limits (RLIMIT_NPROC, RLIMIT_FSIZE,
 * RLIMIT_NOFILE, RLIMIT_CPU, no core files), PR_SET_NO_NEW_PRIVS, and, when
 * uid is not -1, as uid:gid with no supplementary groups. When landlock_dirs
 * is set and the kernel supports Landlock, the command may create, change or
 * remove files only beneath those directories (reads are not restricted).
 *
 * stdout and stderr are read through pipes: the first max_output bytes of
 * each are kept, the totals are counted, and "truncated" says whether
 * anything was dropped. stdin receives stdin_data, then EOF.
 *
 * Termination: no process the command started outlives it. The command is
 * the child of a shim process (a fork of sandboxd) that is a child
 * subreaper (PR_SET_CHILD_SUBREAPER, unprivileged): whatever the command
 * starts, however it detaches (setsid, setpgid, a double fork), is
 * re-parented to the shim when its own parent dies. When the command's
 * main process exits, the shim SIGKILLs its group and then every child it
 * has left (listed from /proc/<pid>/task/<pid>/children, or by scanning
 * /proc where the kernel has no children file), generation by generation,
 * until it has none; only then does the command count as finished. When
 * the timeout expires the command's group gets SIGTERM, and kill_grace_ms
 * later the shim kills everything the same way (so a command ignoring
 * SIGTERM still dies). If sandboxd itself dies, the shim and the command's
 * main process die with it (PR_SET_PDEATHSIG); what they had started is
 * then up to the pod (docs/sandbox.md). A command that cannot be executed
 * completes with exit code 127 and the reason on stderr, as a shell would.
 */
#ifndef TERN_SBEXEC_H
#define TERN_SBEXEC_H

#include "base/buf.h"
#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sbexec_limits {
    long nproc;       /* RLIMIT_NPROC (processes of the command's uid); 0 = unchanged */
    long fsize;       /* RLIMIT_FSIZE bytes; 0 = unchanged */
    long nofile;      /* RLIMIT_NOFILE; 0 = unchanged */
    long cpu_seconds; /* RLIMIT_CPU per process; 0 = unchanged */
};

struct sbexec_opts {
    char *const *argv;          /* NULL-terminated; argv[0] is looked up in PATH */
    char *const *base_env;      /* "NAME=value" over the defaults (sandboxd's passed-on
                                 * variables), or NULL */
    char *const *env_add;       /* "NAME=value" additions (override both), or NULL */
    int cwd_fd;                 /* directory the command starts in (borrowed) */
    const char *home;           /* HOME value ("/tmp" when NULL) */
    const void *stdin_data;     /* may be NULL */
    size_t stdin_len;
    int64_t timeout_ms;         /* > 0 */
    int64_t kill_grace_ms;      /* SIGTERM -> SIGKILL; 0 = 2000 */
    size_t max_output;          /* kept bytes per stream */
    uid_t uid;                  /* (uid_t)-1: keep sandboxd's */
    gid_t gid;
    struct sbexec_limits lim;
    const char *const *landlock_dirs; /* NULL-terminated absolute dirs, or NULL = no Landlock */
    /* every chunk read from stdout (stream 0) or stderr (1), as it is read
     * and before the max_output cut (sblive.h); NULL = none */
    void (*on_output)(void *ctx, int stream, const char *p, size_t n);
    void *output_ctx;
};

enum sbexec_status { SBEXEC_COMPLETED = 0, SBEXEC_TIMEOUT };

struct sbexec_result {
    enum sbexec_status status;
    bool exited;        /* true: exit_code valid; false: killed by term_signal */
    int exit_code;
    int term_signal;
    struct buf out, err; /* kept output (owned) */
    uint64_t out_total, err_total;
    bool truncated;
    int64_t duration_ms;
    bool landlocked;    /* Landlock was applied */
};

/* Runs the command and waits for it. Returns 0 and fills *ret (release with
 * sbexec_result_done), or a negative errno when it could not be started
 * (pipe/fork failures; -EINVAL for an empty argv). */
int sbexec_run(const struct sbexec_opts *o, struct sbexec_result *ret, struct tern_err *err);
void sbexec_result_done(struct sbexec_result *r);

/* The Landlock ABI version of this kernel, or 0 when unavailable. */
int sbexec_landlock_abi(void);

#endif
