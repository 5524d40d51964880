/* tern-sandboxd - the authenticated HTTP API inside each sandbox pod.
 *
 *   tern-sandboxd [--listen ADDR] --token-file F [--workspace DIR]
 *                 [--writable GLOBS] [--run-as UID:GID] [--max-execs N]
 *                 [--timeout-ms N] [--kill-grace-ms N] [--max-procs N]
 *                 [--max-file-size BYTES] [--max-open-files N]
 *                 [--max-cpu-seconds N] [--landlock auto|on|off]
 *                 [--read-only] [--idle-exit SECONDS] [--log-level L]
 *
 * Prints "tern-sandboxd ready addr=HOST:PORT" on stdout once it serves;
 * SIGTERM or SIGINT stop it. Exit 0 after a signal, 2 on bad flags or
 * configuration. See docs/sandbox.md.
 */
#include "base/err.h"
#include "base/mem.h"
#include "base/num.h"
#include "base/tlog.h"
#include "sandbox/sandbox_contract.h"
#include "sandbox/sandboxd.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOKEN_MAX 4096

static void usage(void)
{
    fprintf(stderr,
            "usage: tern-sandboxd [--listen ADDR] --token-file F [--workspace DIR]\n"
            "         [--writable GLOBS] [--run-as UID:GID] [--max-execs N] [--timeout-ms N]\n"
            "         [--kill-grace-ms N] [--max-procs N] [--max-file-size BYTES]\n"
            "         [--max-open-files N] [--max-cpu-seconds N] [--landlock auto|on|off]\n"
            "         [--read-only] [--idle-exit SECONDS] [--log-level debug|info|warn|error]\n");
    exit(2);
}

static int read_token(const char *path, unsigned char *out, size_t *ret_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t n = 0;
    for (;;) {
        ssize_t k = read(fd, out + n, TOKEN_MAX - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        if (k == 0)
            break;
        n += (size_t)k;
        if (n == TOKEN_MAX) {
            close(fd);
            return TERN_ETOOLARGE;
        }
    }
    close(fd);
    while (n && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' ' ||
                 out[n - 1] == '\t'))
        n--;
    if (n == 0)
        return -EINVAL;
    *ret_len = n;
    return 0;
}

static void access_log(void *ctx, const char *method, const char *url, unsigned status, int64_t ms)
{
    (void)ctx;
    char st[21], dur[21];
    num_fmt_i64(status, st);
    num_fmt_i64(ms, dur);
    tlog_info("request", "method", method, "path", url, "#status", st, "#ms", dur);
}

static int64_t int_flag(const char *name, const char *v, int64_t min, int64_t max)
{
    int64_t x;
    if (num_parse_range(v, min, max, &x) != 0) {
        fprintf(stderr, "tern-sandboxd: %s: want an integer in [%lld, %lld]\n", name,
                (long long)min, (long long)max);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    struct sandboxd_config cfg = {
        .listen = ":8080",
        .workspace = SANDBOX_WORKSPACE,
        .writable = SANDBOX_WRITABLE_DEFAULT,
        .run_uid = (uid_t)-1,
        .run_gid = (gid_t)-1,
        .max_execs = 4,
        .default_timeout_ms = 120000,
        .kill_grace_ms = 2000,
        .lim = {.nproc = 512, .fsize = 4LL << 30, .nofile = 1024, .cpu_seconds = 3600},
        .on_request = access_log,
    };
    const char *token_file = NULL;
    int64_t idle_exit_s = 0;
    enum tlog_level level = TLOG_INFO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            usage();
        if (strcmp(a, "--read-only") == 0) {
            cfg.read_only = true;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (strcmp(a, "--listen") == 0) {
            cfg.listen = v;
        } else if (strcmp(a, "--token-file") == 0) {
            token_file = v;
        } else if (strcmp(a, "--workspace") == 0) {
            cfg.workspace = v;
        } else if (strcmp(a, "--writable") == 0) {
            cfg.writable = v;
        } else if (strcmp(a, "--run-as") == 0) {
            if (sandboxd_parse_run_as(v, &cfg.run_uid, &cfg.run_gid) != 0) {
                fprintf(stderr, "tern-sandboxd: --run-as: want UID:GID\n");
                return 2;
            }
        } else if (strcmp(a, "--max-execs") == 0) {
            cfg.max_execs = (unsigned)int_flag(a, v, 1, 1024);
        } else if (strcmp(a, "--timeout-ms") == 0) {
            cfg.default_timeout_ms = int_flag(a, v, 1, TERN_SANDBOX_MAX_TIMEOUT_MS);
        } else if (strcmp(a, "--kill-grace-ms") == 0) {
            cfg.kill_grace_ms = int_flag(a, v, 1, 600000);
        } else if (strcmp(a, "--max-procs") == 0) {
            cfg.lim.nproc = (long)int_flag(a, v, 1, 1 << 22);
        } else if (strcmp(a, "--max-file-size") == 0) {
            cfg.lim.fsize = (long)int_flag(a, v, 1, INT64_MAX);
        } else if (strcmp(a, "--max-open-files") == 0) {
            cfg.lim.nofile = (long)int_flag(a, v, 16, 1 << 20);
        } else if (strcmp(a, "--max-cpu-seconds") == 0) {
            cfg.lim.cpu_seconds = (long)int_flag(a, v, 1, 1 << 30);
        } else if (strcmp(a, "--landlock") == 0) {
            if (strcmp(v, "auto") == 0)
                cfg.landlock = SANDBOXD_LANDLOCK_AUTO;
            else if (strcmp(v, "on") == 0)
                cfg.landlock = SANDBOXD_LANDLOCK_ON;
            else if (strcmp(v, "off") == 0)
                cfg.landlock = SANDBOXD_LANDLOCK_OFF;
            else
                usage();
        } else if (strcmp(a, "--idle-exit") == 0) {
            idle_exit_s = int_flag(a, v, 1, 86400);
        } else if (strcmp(a, "--log-level") == 0) {
            if (tlog_parse_level(v, &level) != 0)
                usage();
        } else {
            fprintf(stderr, "tern-sandboxd: unknown flag %s\n", a);
            usage();
        }
    }
    tlog_init("tern-sandboxd", level);
    if (!token_file) {
        fprintf(stderr, "tern-sandboxd: --token-file is required (e.g. %s)\n", SANDBOX_TOKEN_FILE);
        return 2;
    }
    static unsigned char token[TOKEN_MAX];
    size_t token_len = 0;
    int rc = read_token(token_file, token, &token_len);
    if (rc != 0) {
        tlog_error("cannot read the token file", "path", token_file, "error", err_str(rc));
        return 2;
    }
    cfg.token = token;
    cfg.token_len = token_len;
    /* the proxy settings of the pod reach every command (docs/egress.md) */
    static const char *const pass[] = {SANDBOX_PASS_ENV};
    char *pass_env[sizeof pass / sizeof pass[0] + 1] = {0};
    size_t npass = 0;
    for (size_t i = 0; i < sizeof pass / sizeof pass[0]; i++) {
        const char *v = getenv(pass[i]);
        if (v && strlen(v) < TERN_SANDBOX_MAX_ENV_VALUE)
            pass_env[npass++] = xasprintf("%s=%s", pass[i], v);
    }
    cfg.pass_env = pass_env;

    /* block the stop signals and SIGCHLD in every thread; main waits for them */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Orphans of commands (a daemonised grandchild, the rest of a killed
     * fork bomb) are reparented to us - as PID 1 of a container they would
     * be anyway - and reaped below, so zombies never pile up against the
     * process limit. They become children of this (the main) thread, which
     * reaps with __WNOTHREAD and so never takes an exec thread's child. */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

    struct tern_err err = {0};
    struct sandboxd *d = NULL;
    rc = sandboxd_start(&cfg, &d, &err);
    if (rc != 0) {
        tlog_error("cannot start", "error", err.msg);
        for (size_t i = 0; i < npass; i++)
            free(pass_env[i]);
        return 2;
    }
    char port[21], n[21];
    num_fmt_i64(sandboxd_port(d), port);
    num_fmt_i64((int64_t)sandboxd_interrupted(d), n);
    tlog_info("serving", "#port", port, "workspace", cfg.workspace, "#interrupted", n, "landlock",
              sandboxd_landlock_active(d) ? "on" : "off");
    const char *colon = strrchr(cfg.listen, ':');
    printf("tern-sandboxd ready addr=%.*s:%s\n", (int)(colon ? colon - cfg.listen : 0), cfg.listen,
           port);
    fflush(stdout);
    int sig = 0;
    for (;;) {
        /* --idle-exit: a file viewer ends once nobody asked for a while */
        struct timespec tick = {.tv_sec = 1};
        sig = sigtimedwait(&stop, NULL, &tick);
        if (sig < 0) {
            if (idle_exit_s > 0 && sandboxd_idle_ms(d) >= idle_exit_s * 1000)
                break;
            continue;
        }
        if (sig != SIGCHLD)
            break;
        while (waitpid(-1, NULL, WNOHANG | __WNOTHREAD) > 0)
            ;
    }
    tlog_info("stopping", "signal", sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "idle");
    sandboxd_stop(d);
    for (size_t i = 0; i < npass; i++)
        free(pass_env[i]);
    return 0;
}
