/* bench/runner - tern-runner's overhead per step and its resume latency.
 *
 * Starts etcd, tern-sandboxd and tern-fakellm on loopback, then:
 *  1. runs turns of STEPS model steps, each with one exec_command ("true"),
 *     and reports the runner's own time split (from its final log line):
 *     overhead per model step = (total - model time - tool time) / steps,
 *     and journal time per appended event;
 *  2. kills a runner with SIGKILL right after its 10th append and measures
 *     the replacement: spawn -> its first journaled event (lease TTL 1 s:
 *     the replacement first waits for the dead owner's lease to expire);
 *  3. the same after a graceful SIGTERM (the lock is released at once).
 * Prints figures only; asserts nothing.
 *
 *   make && build/bench/runner [STEPS]
 */
#include "../../tests/support/etcd_fixture.h"
#include "../../tests/support/proc_fixture.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "etcd/etcd.h"
#include "journal/journal.h"
#include "json/json.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct bench {
    struct etcd_fixture etcd;
    struct proc sbx, llm;
    char dir[256], ws[300], token[300];
    struct etcd *client;
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what, const struct tern_err *err)
{
    fprintf(stderr, "bench/runner: %s: %s\n", what, err ? err->msg : strerror(errno));
    exit(1);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        die(path, NULL);
    fputs(text, f);
    fclose(f);
}

static void setup(struct bench *b, int steps)
{
    struct tern_err err = {0};
    char tmpl[] = "/tmp/tern-bench-runner-XXXXXX";
    if (!mkdtemp(tmpl))
        die("mkdtemp", NULL);
    snprintf(b->dir, sizeof b->dir, "%s", tmpl);
    snprintf(b->ws, sizeof b->ws, "%s/ws", b->dir);
    snprintf(b->token, sizeof b->token, "%s/token", b->dir);
    mkdir(b->ws, 0755);
    write_file(b->token, "bench-token\n");
    char p[400];
    snprintf(p, sizeof p, "%s/etcd", b->dir);
    if (etcd_fixture_start(&b->etcd, p, NULL, &err))
        die("etcd", &err);
    const char *eps[] = {b->etcd.url};
    struct etcd_config ec = {.endpoints = eps, .nendpoints = 1};
    if (etcd_new(&ec, &b->client, &err))
        die("etcd client", &err);

    char bin[300];
    snprintf(bin, sizeof bin, "%s/bin/tern-sandboxd", proc_build_dir());
    snprintf(p, sizeof p, "%s/sandboxd.log", b->dir);
    char *sargv[] = {bin, "--listen", "127.0.0.1:0", "--token-file", b->token, "--workspace",
                     b->ws, "--log-level", "warn", NULL};
    if (proc_start_server(&b->sbx, sargv, "ready addr=", p, 10000, &err))
        die("sandboxd", &err);

    struct buf s;
    buf_init(&s, 1u << 20);
    buf_puts(&s, "{\"steps\":[");
    for (int i = 0; i < steps; i++)
        buf_printf(&s, "{\"reply\":{\"toolCalls\":[{\"name\":\"exec_command\",\"arguments\":"
                       "{\"cmd\":\"true\",\"cwd\":null,\"timeoutMs\":null}}]}},");
    buf_puts(&s, "{\"reply\":{\"content\":\"done\"}}]}");
    char script[300];
    snprintf(script, sizeof script, "%s/script.json", b->dir);
    write_file(script, buf_str(&s));
    buf_done(&s);
    snprintf(bin, sizeof bin, "%s/bin/tern-fakellm", proc_build_dir());
    snprintf(p, sizeof p, "%s/fakellm.log", b->dir);
    char *fargv[] = {bin, "--script", script, "--listen", "127.0.0.1:0", NULL};
    if (proc_start_server(&b->llm, fargv, "tern-fakellm listening ", p, 10000, &err))
        die("fakellm", &err);
}

static void spawn(struct bench *b, struct proc *p, const char *uid, const char *hook,
                  const char *log)
{
    char spec[400];
    snprintf(spec, sizeof spec, "%s/spec-%s.json", b->dir, uid);
    char *text = xasprintf("{\"spec\":{\"objective\":\"bench\",\"model\":{\"name\":\"fake\"},"
                           "\"limits\":{\"maxModelTurns\":10000,\"maxToolCalls\":10000}}}");
    write_file(spec, text);
    free(text);
    char bin[300];
    snprintf(bin, sizeof bin, "%s/bin/tern-runner", proc_build_dir());
    char *envv[20];
    size_t n = 0;
    envv[n++] = xstrdup("PATH=/usr/bin:/bin");
    envv[n++] = xstrdup("TERN_NAMESPACE=bench");
    envv[n++] = xasprintf("TERN_SESSION=s-%s", uid);
    envv[n++] = xasprintf("TERN_SESSION_UID=%s", uid);
    envv[n++] = xstrdup("TERN_TURN=1");
    envv[n++] = xasprintf("TERN_ETCD_ENDPOINTS=%s", b->etcd.url);
    envv[n++] = xasprintf("TERN_SANDBOX_TOKEN_FILE=%s", b->token);
    envv[n++] = xasprintf("TERN_SESSION_SPEC_FILE=%s", spec);
    envv[n++] = xasprintf("TERN_SANDBOX_ADDR=%s", b->sbx.addr);
    envv[n++] = xasprintf("OPENAI_BASE_URL=http://%s/v1", b->llm.addr);
    envv[n++] = xstrdup("TERN_LOCK_TTL_SECONDS=1");
    if (hook)
        envv[n++] = xstrdup(hook);
    envv[n] = NULL;
    char *argv[] = {bin, "turn", NULL};
    struct tern_err err = {0};
    if (proc_spawn(p, argv, envv, log, &err))
        die("spawn", &err);
    for (size_t i = 0; i < n; i++)
        free(envv[i]);
}

/* A field of the runner's last log line ("turn ended" / "turn stopped"). */
static double stat_of(const char *log, const char *key)
{
    FILE *f = fopen(log, "r");
    if (!f)
        return -1;
    char line[4096], lastl[4096] = "";
    while (fgets(line, sizeof line, f))
        if (strstr(line, "\"msg\":\"turn "))
            memcpy(lastl, line, sizeof line);
    fclose(f);
    cJSON *j = NULL;
    double v = -1;
    if (json_parse(lastl, strlen(lastl), &j, NULL) == 0) {
        const cJSON *it = json_get(j, key);
        int64_t x;
        if (json_item_int64(it, &x) == 0) /* a number (older runners: a string) */
            v = (double)x;
    }
    cJSON_Delete(j);
    return v;
}

static uint64_t last_seq(struct bench *b, const char *uid)
{
    struct journal *j = NULL;
    uint64_t s = 0;
    if (journal_open(b->client, uid, NULL, &j, NULL) == 0)
        s = journal_summary(j)->last_seq;
    journal_free(j);
    return s;
}

/* Spawns a replacement for uid and measures spawn -> its first new event. */
static void replacement(struct bench *b, const char *uid, const char *what)
{
    char log[400];
    snprintf(log, sizeof log, "%s/%s-replacement.log", b->dir, uid);
    uint64_t before = last_seq(b, uid);
    struct proc p;
    double t0 = now_ms();
    spawn(b, &p, uid, NULL, log);
    double first = -1;
    while (now_ms() - t0 < 30000) {
        if (last_seq(b, uid) > before) {
            first = now_ms() - t0;
            break;
        }
        struct timespec ts = {0, 2 * 1000000L};
        nanosleep(&ts, NULL);
    }
    int rc = proc_wait(&p, 60000);
    printf("resume after %-8s spawn->next journaled step %7.1f ms  (lock wait %4.0f ms, "
           "replay %4.0f events, runner's own start->first append %4.0f ms), exit %d\n",
           what, first, stat_of(log, "lockWaitMs"), stat_of(log, "replayed"),
           stat_of(log, "firstAppendMs"), rc);
}

int main(int argc, char **argv)
{
    int64_t steps = 20;
    if (argc > 1 && num_parse_range(argv[1], 1, 1000, &steps) != 0) {
        fprintf(stderr, "usage: bench/runner [STEPS 1..1000]\n");
        return 2;
    }
    struct bench b = {0};
    setup(&b, (int)steps);
    printf("tern-runner: %lld model steps, each with one exec_command, against tern-fakellm "
           "(instant replies), tern-sandboxd and etcd on loopback\n",
           (long long)steps);

    for (int run = 0; run < 3; run++) {
        char uid[32], log[400];
        snprintf(uid, sizeof uid, "bench-%d", run);
        snprintf(log, sizeof log, "%s/%s.log", b.dir, uid);
        struct proc p;
        double t0 = now_ms();
        spawn(&b, &p, uid, NULL, log);
        int rc = proc_wait(&p, 120000);
        double wall = now_ms() - t0;
        double total = stat_of(log, "totalMs"), model = stat_of(log, "modelMs"),
               tool = stat_of(log, "toolMs"), journal = stat_of(log, "journalMs"),
               appends = stat_of(log, "appends");
        double ms = (double)steps + 1; /* model calls */
        printf("run %d: exit %d, wall %.0f ms, runner %.0f ms = model %.0f + tools %.0f + "
               "runner %.0f (journal %.0f ms for %.0f events, %.2f ms each); overhead per "
               "model step %.2f ms\n",
               run, rc, wall, total, model, tool, total - model - tool, journal, appends,
               appends > 0 ? journal / appends : 0, (total - model - tool) / ms);
    }

    /* kill -9 right after the 10th append, then a replacement */
    {
        char log[400];
        snprintf(log, sizeof log, "%s/crash.log", b.dir);
        struct proc p;
        spawn(&b, &p, "crash", "TERN_TEST_CRASH_AFTER_APPENDS=10", log);
        proc_wait(&p, 60000);
        replacement(&b, "crash", "kill -9");
    }
    /* SIGTERM once 10 events are in, then a replacement */
    {
        char log[400];
        snprintf(log, sizeof log, "%s/term.log", b.dir);
        struct proc p;
        spawn(&b, &p, "term", NULL, log);
        double t0 = now_ms();
        while (last_seq(&b, "term") < 10 && now_ms() - t0 < 30000) {
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
        kill(p.pid, SIGTERM);
        proc_wait(&p, 60000);
        replacement(&b, "term", "SIGTERM");
    }
    printf("(reference: the workflow engine we learn from reports ~1.8 s to resume and 15-40 ms "
           "of scheduling per step)\n");
    etcd_free(b.client);
    proc_stop(&b.llm);
    proc_stop(&b.sbx);
    etcd_fixture_stop(&b.etcd);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", b.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench/runner: could not remove %s\n", b.dir);
    return 0;
}
