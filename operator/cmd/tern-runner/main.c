/* tern-runner - one model turn of one AgentSession (DESIGN.md §5, §10).
 *
 *   tern-runner turn     configuration from the environment (runner/config.h)
 *   tern-runner copy     fork copy (not built yet: exits 78)
 *
 * Exit codes: 0 the turn ended and the journal says why; 75 retryable
 * failure (the Job's backoff retries, and the next attempt resumes from the
 * journal); 78 configuration error. SIGTERM / SIGINT: stop after the current
 * step (a model call in flight is aborted), release the lock, exit 75.
 * Logs are JSON lines on stderr; the last line summarises the turn.
 */
#include "base/tlog.h"
#include "runner/config.h"
#include "runner/turn.h"

#include <signal.h>
#include <stdatomic.h>
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

int main(int argc, char **argv)
{
    enum tlog_level lvl = TLOG_INFO;
    const char *l = getenv("TERN_LOG_LEVEL");
    if (l && tlog_parse_level(l, &lvl) != 0)
        lvl = TLOG_INFO;
    tlog_init("tern-runner", lvl);
    if (argc >= 2 && strcmp(argv[1], "turn") == 0)
        return cmd_turn();
    if (argc >= 2 && strcmp(argv[1], "copy") == 0) {
        tlog_error("tern-runner copy is not built yet", NULL);
        return EXIT_CONFIG;
    }
    fprintf(stderr, "usage: tern-runner turn | copy --from ADDR --to ADDR\n");
    return EXIT_CONFIG;
}
