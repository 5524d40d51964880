/* bench/sandbox - figures for tern-sandboxd (prints, asserts nothing):
 *   1. exec round trip of a trivial command through the API (keep-alive
 *      client, with and without an Idempotency-Key) versus fork+exec+wait
 *      of the same command directly;
 *   2. snapshot and restore throughput of a ~100 MB workspace.
 * Run: make && build/bench/sandbox   (TERN_BUILD selects the build dir) */
#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "http/httpc.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOKEN "bench-token"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    printf("  %-38s n=%d mean=%.0f us p50=%.0f us p99=%.0f us\n", what, n, sum / n, v[n / 2],
           v[(n * 99) / 100]);
}

static pid_t start(const char *ws, const char *tokfile, unsigned *port)
{
    const char *b = getenv("TERN_BUILD");
    char *bin = xasprintf("%s/bin/tern-sandboxd", b && *b ? b : "build");
    int p[2];
    if (pipe(p) != 0)
        exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execl(bin, bin, "--listen", "127.0.0.1:0", "--token-file", tokfile, "--workspace", ws,
              "--log-level", "warn", "--max-execs", "8", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char line[256] = {0};
    size_t n = 0;
    while (n < sizeof line - 1 && !strchr(line, '\n')) {
        ssize_t k = read(p[0], line + n, sizeof line - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    close(p[0]);
    const char *c = strrchr(line, ':');
    int64_t v;
    char digits[16] = {0};
    if (!c || strcspn(c + 1, "\n") >= sizeof digits) {
        fprintf(stderr, "bench: tern-sandboxd did not start (%s)\n", bin);
        exit(1);
    }
    memcpy(digits, c + 1, strcspn(c + 1, "\n"));
    if (num_parse_range(digits, 1, 65535, &v) != 0)
        exit(1);
    *port = (unsigned)v;
    free(bin);
    return pid;
}

static long call(struct httpc *c, unsigned port, const char *method, const char *path,
                 const void *body, size_t len, const char *key, struct buf *out)
{
    char url[128], kh[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
    const char *hdrs[3] = {"Authorization: Bearer " TOKEN, NULL, NULL};
    if (key) {
        snprintf(kh, sizeof kh, "Idempotency-Key: %s", key);
        hdrs[1] = kh;
    }
    struct httpc_request rq = {.method = method, .url = url, .headers = hdrs, .body = body,
                               .body_len = len, .timeout_ms = 600000, .max_body = 512u << 20};
    struct httpc_response resp = {0};
    int rc = httpc_do(c, &rq, &resp, NULL);
    long st = rc == 0 ? resp.status : -1;
    if (out) {
        buf_reset(out);
        buf_append(out, resp.body.data ? resp.body.data : "", resp.body.len);
    }
    httpc_response_done(&resp);
    return st;
}

static void run(const char *cmd)
{
    if (system(cmd) != 0) {
        fprintf(stderr, "bench: failed: %s\n", cmd);
        exit(1);
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/tern-bench-sandbox-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char *ws = xasprintf("%s/ws", dir), *tok = xasprintf("%s/token", dir);
    char *cmd = xasprintf("mkdir -p %s/input && printf %s > %s", ws, TOKEN, tok);
    run(cmd);
    free(cmd);
    unsigned port;
    pid_t pid = start(ws, tok, &port);
    struct httpc *c = httpc_new();
    enum { N = 300 };
    static double t[N];

    printf("tern-sandboxd exec round trip (/bin/true)\n");
    const char *body = "{\"argv\":[\"/bin/true\"]}";
    for (int i = 0; i < 20; i++) /* warm up */
        call(c, port, "POST", "/v1/exec", body, strlen(body), NULL, NULL);
    for (int i = 0; i < N; i++) {
        double t0 = now_us();
        if (call(c, port, "POST", "/v1/exec", body, strlen(body), NULL, NULL) != 200)
            return 1;
        t[i] = now_us() - t0;
    }
    report("via API, no key", t, N);
    for (int i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof key, "bench/%d", i);
        double t0 = now_us();
        if (call(c, port, "POST", "/v1/exec", body, strlen(body), key, NULL) != 200)
            return 1;
        t[i] = now_us() - t0;
    }
    report("via API, Idempotency-Key (4 fsyncs)", t, N);
    for (int i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof key, "bench/%d", i);
        double t0 = now_us();
        call(c, port, "POST", "/v1/exec", body, strlen(body), key, NULL);
        t[i] = now_us() - t0;
    }
    report("via API, replayed record", t, N);
    for (int i = 0; i < N; i++) {
        double t0 = now_us();
        pid_t p = fork();
        if (p == 0) {
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        waitpid(p, NULL, 0);
        t[i] = now_us() - t0;
    }
    report("direct fork+exec+wait", t, N);

    printf("snapshot / restore of a ~100 MB workspace\n");
    cmd = xasprintf("mkdir -p %s/working/big %s/working/small && cd %s/working && "
                    "for i in $(seq 1 96); do head -c 1048576 /dev/urandom > big/f$i; done && "
                    "for i in $(seq 1 1000); do head -c 4096 /dev/urandom > small/s$i; done",
                    ws, ws, ws);
    run(cmd);
    free(cmd);
    struct buf tar;
    buf_init(&tar, 512u << 20);
    double t0 = now_us();
    long st = call(c, port, "POST", "/v1/snapshot", NULL, 0, NULL, &tar);
    double ts = (now_us() - t0) / 1e6;
    double mb = tar.len / 1048576.0;
    printf("  snapshot: status %ld, %.1f MB tar in %.2f s = %.0f MB/s\n", st, mb, ts, mb / ts);
    struct buf out;
    buf_init(&out, 1 << 20);
    t0 = now_us();
    st = call(c, port, "POST", "/v1/restore", tar.data, tar.len, NULL, &out);
    double tr = (now_us() - t0) / 1e6;
    printf("  restore:  status %ld, %.1f MB tar in %.2f s = %.0f MB/s  %s\n", st, mb, tr, mb / tr,
           buf_str(&out));
    buf_done(&out);
    buf_done(&tar);
    httpc_free(c);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    cmd = xasprintf("rm -rf %s", dir);
    run(cmd);
    free(cmd);
    free(ws);
    free(tok);
    return 0;
}
