/* tern-runner - one model turn of one AgentSession (docs/design.md, "A turn,
 * step by step" and "Contracts between the parts").
 *
 *   tern-runner turn     configuration from the environment (runner/config.h)
 *   tern-runner copy --from ADDR --to ADDR   a fork's workspace copy
 *                        (runner/forkcopy.h)
 *
 * Exit codes: 0 the turn ended and the journal says why (copy: done); 75
 * retryable failure (the Job's backoff retries, and the next attempt resumes
 * from the journal; copy: the transfer failed); 78 configuration error.
 * SIGTERM / SIGINT: stop after the current step (a model call in flight is
 * aborted), release the lock, exit 75.
 * Logs are JSON lines on stderr; the last line summarises the turn.
 */
#include "base/limits.h"
#include "base/tlog.h"
#include "kube/kclient.h"
#include "runner/config.h"
#include "runner/forkcopy.h"
#include "runner/turn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_RETRY 75
#define EXIT_CONFIG 78

static atomic_bool stop_flag; /* set by the signal handler only */

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_flag, true);
}

/* The container's termination message ("<Class>: <what happened>"), which
 * the kubelet puts into the pod status (state.terminated.message) where the
 * operator reads why an attempt failed after the pod is gone. Written only
 * when the file exists (the kubelet creates it; TERN_TERMINATION_LOG
 * overrides the path), at most TERN_TERMINATION_MAX bytes cut on a UTF-8
 * boundary. */
static void termination_message(const char *cls, const char *msg)
{
    const char *path = getenv("TERN_TERMINATION_LOG");
    if (!path || !*path)
        path = "/dev/termination-log";
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[TERN_TERMINATION_MAX + 1];
    int n = snprintf(buf, sizeof buf, "%s: %s", cls && *cls ? cls : "Error", msg ? msg : "");
    size_t len = n < 0 ? 0 : (size_t)n >= sizeof buf ? sizeof buf - 1 : (size_t)n;
    while (len > 0 && (size_t)n >= sizeof buf && ((unsigned char)buf[len] & 0xC0) == 0x80)
        len--;
    ssize_t w = write(fd, buf, len);
    (void)w;
    close(fd);
}

static const char *real_getenv(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

static int cmd_turn(void)
{
    struct runner_config cfg;
    struct tern_err err = {0};
    int lrc = runner_config_load(real_getenv, NULL, &cfg, &err);
    if (lrc != 0) {
        /* a bad configuration fails the Job at once; an API server or
         * sandbox that is not reachable yet is worth a retry */
        tlog_error("configuration error", "error", err.msg, "retryable",
                   lrc == TERN_EINVALID ? "false" : "true");
        termination_message(lrc == TERN_EINVALID   ? "ConfigError"
                            : lrc == TERN_ETIMEOUT ? "SandboxNotReady"
                                                   : "APIUnavailable",
                            err.msg);
        return lrc == TERN_EINVALID ? EXIT_CONFIG : EXIT_RETRY;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    tlog_info("turn starting", "session", cfg.session, "uid", cfg.uid, "owner", cfg.owner);
    struct turn_stats st;
    int rc = turn_run(&cfg, &stop_flag, &st, &err);
    char steps[24], appends[24], total[24], model[24], tool[24], journal[24], first[24],
        lockw[24], replayed[24];
    snprintf(steps, sizeof steps, "%lld", (long long)st.steps);
    snprintf(appends, sizeof appends, "%lld", (long long)st.appends);
    snprintf(total, sizeof total, "%lld", (long long)st.total_ms);
    snprintf(model, sizeof model, "%lld", (long long)st.model_ms);
    snprintf(tool, sizeof tool, "%lld", (long long)st.tool_ms);
    snprintf(journal, sizeof journal, "%lld", (long long)st.journal_ms);
    snprintf(first, sizeof first, "%lld", (long long)st.first_append_ms);
    snprintf(lockw, sizeof lockw, "%lld", (long long)st.lock_wait_ms);
    snprintf(replayed, sizeof replayed, "%lld", (long long)st.replayed);
    int code = rc == 0 ? 0 : rc == TERN_EINVALID ? EXIT_CONFIG : EXIT_RETRY;
    if (st.tool_notes[0])
        tlog_warn("allowed MCP tools not offered", "why", st.tool_notes);
    if (rc == 0)
        tlog_info("turn ended", "outcome", st.outcome, "#steps", steps, "#appends", appends,
                  "#replayed", replayed, "#totalMs", total, "#modelMs", model, "#toolMs", tool,
                  "#journalMs", journal, "#firstAppendMs", first, "#lockWaitMs", lockw);
    else
        tlog_error("turn stopped", "error", err.msg, "code", err_str(rc), "class",
                   st.failure_class, "#steps", steps, "#appends", appends, "#totalMs", total,
                   "#exit", code == EXIT_CONFIG ? "78" : "75");
    if (rc)
        termination_message(st.failure_class, err.msg);
    runner_config_done(&cfg);
    return code;
}

/* tern-runner copy --from ADDR --to ADDR: the fork's workspace copy.
 * Tokens: TERN_FROM_TOKEN_FILE (parent sandbox), TERN_SANDBOX_TOKEN_FILE
 * (child sandbox). */
static char *read_token(const char *var, struct tern_err *err)
{
    const char *path = getenv(var);
    if (!path || !*path) {
        err_set(err, TERN_EINVALID, "%s: required", var);
        return NULL;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        err_set(err, TERN_EINVALID, "%s: %s: %s", var, path, strerror(errno));
        return NULL;
    }
    char buf[4097];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return strdup(buf);
}

static int cmd_copy(int argc, char **argv)
{
    const char *from = NULL, *to = NULL;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--from=", 7) == 0)
            from = argv[i] + 7;
        else if (strncmp(argv[i], "--to=", 5) == 0)
            to = argv[i] + 5;
        else if (strcmp(argv[i], "--from") == 0 && i + 1 < argc)
            from = argv[++i];
        else if (strcmp(argv[i], "--to") == 0 && i + 1 < argc)
            to = argv[++i];
    }
    if (!from || !to) {
        tlog_error("usage: tern-runner copy --from ADDR --to ADDR");
        return EXIT_CONFIG;
    }
    struct tern_err err = {0};
    char *ft = read_token("TERN_FROM_TOKEN_FILE", &err);
    char *tt = ft ? read_token("TERN_SANDBOX_TOKEN_FILE", &err) : NULL;
    if (!ft || !tt) {
        tlog_error("configuration error", "error", err.msg);
        free(ft);
        free(tt);
        return EXIT_CONFIG;
    }
    struct forkcopy_opts o = {.from_addr = from, .from_token = ft, .to_addr = to, .to_token = tt};
    uint64_t bytes = 0;
    int rc = forkcopy_run(&o, &bytes, &err);
    free(ft);
    free(tt);
    if (rc) {
        tlog_error("copy failed", "from", from, "to", to, "error", err.msg);
        termination_message("CopyFailed", err.msg);
        return EXIT_RETRY;
    }
    char b[24];
    snprintf(b, sizeof b, "%llu", (unsigned long long)bytes);
    tlog_info("copy done", "from", from, "to", to, "#bytes", b);
    return 0;
}

int main(int argc, char **argv)
{
    enum tlog_level lvl = TLOG_INFO;
    const char *l = getenv("TERN_LOG_LEVEL");
    if (l && tlog_parse_level(l, &lvl) != 0)
        lvl = TLOG_INFO;
    tlog_init("tern-runner", lvl);
    kclient_set_default_user_agent("tern-runner/0.1.0");
    if (argc >= 2 && strcmp(argv[1], "turn") == 0)
        return cmd_turn();
    if (argc >= 2 && strcmp(argv[1], "copy") == 0)
        return cmd_copy(argc - 2, argv + 2);
    fprintf(stderr, "usage: tern-runner turn | copy --from ADDR --to ADDR\n");
    return EXIT_CONFIG;
}
