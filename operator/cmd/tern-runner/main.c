/* tern-runner - one model turn of one AgentSession (DESIGN.md §5, §10).
 *
 *   tern-runner turn     configuration from the environment (runner/config.h)
 *   tern-runner copy --from ADDR --to ADDR [--from-token-file F] [--to-token-file F]
 *                        fork copy: the source sandbox's snapshot streamed into
 *                        the target's restore (token files default to
 *                        TERN_SANDBOX_TOKEN_FILE)
 *
 * Exit codes: 0 the turn ended and the journal says why; 75 retryable
 * failure (the Job's backoff retries, and the next attempt resumes from the
 * journal); 78 configuration error. SIGTERM / SIGINT: stop after the current
 * step (a model call in flight is aborted), release the lock, exit 75.
 * Logs are JSON lines on stderr; the last line summarises the turn.
 */
#include "base/tlog.h"
#include "runner/config.h"
#include "runner/copy.h"
#include "runner/turn.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_RETRY 75
#define EXIT_CONFIG 78

static atomic_bool stop_flag; /* set by the signal handler only */

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_flag, true);
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
    if (runner_config_load(real_getenv, NULL, &cfg, &err) != 0) {
        tlog_error("configuration error", "error", err.msg);
        return EXIT_CONFIG;
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
    if (rc == 0)
        tlog_info("turn ended", "outcome", st.outcome, "steps", steps, "appends", appends,
                  "replayed", replayed, "totalMs", total, "modelMs", model, "toolMs", tool,
                  "journalMs", journal, "firstAppendMs", first, "lockWaitMs", lockw);
    else
        tlog_error("turn stopped", "error", err.msg, "code", err_str(rc), "steps", steps,
                   "appends", appends, "totalMs", total, "exit", code == EXIT_CONFIG ? "78" : "75");
    runner_config_done(&cfg);
    return code;
}

static char *read_token(const char *path, struct tern_err *err)
{
    char *t = NULL;
    if (!path || !*path) {
        err_set(err, TERN_EINVALID, "a token file is required (--from-token-file / "
                                    "--to-token-file or TERN_SANDBOX_TOKEN_FILE)");
        return NULL;
    }
    if (runner_read_file(path, 4096, &t, err) != 0)
        return NULL;
    size_t n = strlen(t);
    while (n > 0 && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' '))
        t[--n] = 0;
    return t;
}

static int cmd_copy(int argc, char **argv)
{
    const char *from = NULL, *to = NULL;
    const char *from_tf = getenv("TERN_SANDBOX_TOKEN_FILE"), *to_tf = from_tf;
    for (int i = 0; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--from") == 0)
            from = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--to") == 0)
            to = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--from-token-file") == 0)
            from_tf = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--to-token-file") == 0)
            to_tf = argv[++i];
        else {
            tlog_error("copy: unknown argument", "arg", argv[i]);
            return EXIT_CONFIG;
        }
    }
    struct tern_err err = {0};
    if (!from || !to) {
        tlog_error("copy: --from and --to are required", NULL);
        return EXIT_CONFIG;
    }
    char *ft = read_token(from_tf, &err), *tt = ft ? read_token(to_tf, &err) : NULL;
    if (!ft || !tt) {
        tlog_error("copy: configuration error", "error", err.msg);
        free(ft);
        free(tt);
        return EXIT_CONFIG;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct copy_config cc = {.from_addr = from, .from_token = ft, .to_addr = to, .to_token = tt};
    struct copy_result res;
    int rc = copy_workspace(&cc, &stop_flag, &res, &err);
    free(ft);
    free(tt);
    char bytes[24], ss[24], rs[24];
    snprintf(bytes, sizeof bytes, "%lld", (long long)res.bytes);
    snprintf(ss, sizeof ss, "%ld", res.snapshot_status);
    snprintf(rs, sizeof rs, "%ld", res.restore_status);
    if (rc == 0) {
        tlog_info("copy done", "from", from, "to", to, "bytes", bytes, "restore",
                  res.restore_body);
        return 0;
    }
    /* 4xx other than busy: wrong token or address, retrying cannot help */
    long st = res.snapshot_status != 200 && res.snapshot_status ? res.snapshot_status
                                                                : res.restore_status;
    bool config = rc == TERN_EHTTP && st >= 400 && st < 500 && st != 408 && st != 409 &&
                  st != 429;
    tlog_error("copy failed", "error", err.msg, "bytes", bytes, "snapshotStatus", ss,
               "restoreStatus", rs);
    return config ? EXIT_CONFIG : EXIT_RETRY;
}

int main(int argc, char **argv)
{
    enum tlog_level lvl = TLOG_INFO;
    const char *l = getenv("TERN_LOG_LEVEL");
    if (l && tlog_parse_level(l, &lvl) != 0)
        lvl = TLOG_INFO;
    tlog_init("tern-runner", lvl);
    if (argc >= 2 && strcmp(argv[1], "turn") == 0)
        return cmd_turn();
    if (argc >= 2 && strcmp(argv[1], "copy") == 0)
        return cmd_copy(argc - 2, argv + 2);
    fprintf(stderr, "usage: tern-runner turn | copy --from ADDR --to ADDR "
                    "[--from-token-file F] [--to-token-file F]\n");
    return EXIT_CONFIG;
}
