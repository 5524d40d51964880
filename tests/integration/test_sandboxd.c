/* Integration tests of tern-sandboxd as a client sees it (through httpc):
 * the security suite, the idempotency rules (including a kill -9 mid-exec),
 * snapshot/restore round trips, and the daemon running under bubblewrap as
 * a non-root user the way a pod runs it. Each test starts its own daemon on
 * a free loopback port with a temporary workspace and stops it by pid. */
#include "harness.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "http/httpc.h"
#include "json/json.h"
#include "sandbox/sandbox_contract.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Under ASan (TERN_BUILD=build-asan) the daemon runs with leak detection
 * and must exit 0 on SIGTERM (sbd_kill checks); the test process's own
 * small bookkeeping allocations are not the subject. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "detect_leaks=0";
}

#define TOKEN "s3cret-token-for-tests"
#define TEST_UID 64123 /* a uid nothing else on this machine uses (fork bomb bound) */

struct sbd {
    pid_t pid;
    bool wrapped; /* under bwrap: the pid is bwrap's, which dies of the signal */
    unsigned port;
    char base[64];
    char *ws;
    char *token_file;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *binary(void)
{
    const char *b = getenv("TERN_BUILD");
    char *p = xasprintf("%s/bin/tern-sandboxd", b && *b ? b : "build");
    if (access(p, X_OK) != 0)
        th_fail(__FILE__, __LINE__, "%s not built", p);
    char *abs = realpath(p, NULL);
    free(p);
    return abs;
}

static void run(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0)
        th_fail(__FILE__, __LINE__, "command failed (%d): %s", rc, cmd);
}

/* A fresh workspace with the standard layout, readable by TEST_UID. */
static char *make_workspace(void)
{
    const char *tmp = th_tmpdir();
    chmod(tmp, 0755);
    char *ws = xasprintf("%s/ws", tmp);
    char *cmd = xasprintf("mkdir -p %s/input %s/skills/s && echo 'the task' > %s/task.md && "
                          "echo 'memory' > %s/simple.md && echo 'ctx' > %s/input/ctx.txt && "
                          "echo skill > %s/skills/s/SKILL.md",
                          ws, ws, ws, ws, ws, ws);
    run(cmd);
    free(cmd);
    return ws;
}

/* Starts argv (a tern-sandboxd command line, maybe wrapped) and waits for
 * its ready line. */
static void start_argv(struct sbd *s, char **argv)
{
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    s->pid = pid;
    char line[256];
    size_t n = 0;
    int64_t deadline = mono_ms() + 10000;
    while (mono_ms() < deadline) {
        struct pollfd pf = {p[0], POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t k = read(p[0], line + n, sizeof line - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
        line[n] = '\0';
        if (strchr(line, '\n'))
            break;
    }
    close(p[0]);
    line[n] = '\0';
    const char *a = strstr(line, "ready addr=");
    if (!a)
        th_fail(__FILE__, __LINE__, "tern-sandboxd did not get ready: \"%s\"", line);
    const char *colon = strrchr(a, ':');
    int64_t port;
    char digits[16];
    size_t dl = strcspn(colon + 1, "\n");
    ASSERT_TRUE(dl < sizeof digits);
    memcpy(digits, colon + 1, dl);
    digits[dl] = '\0';
    ASSERT_OK(num_parse_range(digits, 1, 65535, &port));
    s->port = (unsigned)port;
    snprintf(s->base, sizeof s->base, "http://127.0.0.1:%u", s->port);
}

static void write_token(struct sbd *s)
{
    s->token_file = xasprintf("%s/token", th_tmpdir());
    FILE *f = fopen(s->token_file, "w");
    fputs(TOKEN "\n", f);
    fclose(f);
}

/* Starts tern-sandboxd on ws with extra flags (NULL-terminated). */
static void sbd_start(struct sbd *s, const char *ws, const char *const *extra)
{
    if (s->ws != ws) {
        free(s->ws);
        s->ws = xstrdup(ws);
    }
    write_token(s);
    char *argv[40];
    int n = 0;
    argv[n++] = binary();
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--token-file";
    argv[n++] = s->token_file;
    argv[n++] = "--workspace";
    argv[n++] = (char *)ws;
    argv[n++] = "--log-level";
    argv[n++] = "warn";
    for (size_t i = 0; extra && extra[i] && n < 38; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    start_argv(s, argv);
    free(argv[0]);
}

/* Stops the daemon (by pid) and checks it exited cleanly on SIGTERM. */
static void sbd_kill(struct sbd *s, int sig)
{
    if (s->pid > 0) {
        kill(s->pid, sig);
        int st = 0;
        waitpid(s->pid, &st, 0);
        s->pid = 0;
        if (sig == SIGTERM && !s->wrapped && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
            th_fail(__FILE__, __LINE__, "tern-sandboxd did not exit cleanly (status %d)", st);
    }
    free(s->token_file);
    s->token_file = NULL;
}

struct reply {
    long status;
    char *body;
    size_t len;
    cJSON *json;
};

static void reply_done(struct reply *r)
{
    free(r->body);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof *r);
}

/* One request; token NULL = none; key NULL = no Idempotency-Key. */
static int req_full(struct sbd *s, const char *method, const char *path, const void *body,
                    size_t len, const char *token, const char *key, struct reply *out)
{
    struct httpc *c = httpc_new();
    char *url = xasprintf("%s%s", s->base, path);
    char *auth = token ? xasprintf("Authorization: Bearer %s", token) : NULL;
    char *kh = key ? xasprintf("Idempotency-Key: %s", key) : NULL;
    const char *hdrs[3] = {0};
    int nh = 0;
    if (auth)
        hdrs[nh++] = auth;
    if (kh)
        hdrs[nh++] = kh;
    struct httpc_request rq = {.method = method,
                               .url = url,
                               .headers = hdrs,
                               .body = body,
                               .body_len = len,
                               .timeout_ms = 60000,
                               .max_body = 512u << 20};
    struct httpc_response resp = {0};
    struct tern_err err = {0};
    int rc = httpc_do(c, &rq, &resp, &err);
    memset(out, 0, sizeof *out);
    out->status = resp.status;
    out->len = resp.body.len;
    out->body = xmemdup(resp.body.data ? resp.body.data : "", resp.body.len + 1);
    out->body[out->len] = '\0';
    if (out->len && out->body[0] == '{')
        json_parse(out->body, out->len, &out->json, NULL);
    httpc_response_done(&resp);
    free(url);
    free(auth);
    free(kh);
    httpc_free(c);
    return rc;
}

static long req(struct sbd *s, const char *method, const char *path, const char *body,
                struct reply *out)
{
    int rc = req_full(s, method, path, body, body ? strlen(body) : 0, TOKEN, NULL, out);
    if (rc != 0)
        th_fail(__FILE__, __LINE__, "%s %s: transport error %d", method, path, rc);
    return out->status;
}

static const char *jstr(const struct reply *r, const char *k)
{
    const cJSON *it = json_get(r->json, k);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

static int64_t jint(const struct reply *r, const char *k)
{
    int64_t v = -999;
    json_item_int64(json_get(r->json, k), &v);
    return v;
}

static bool jtrue(const struct reply *r, const char *k)
{
    return cJSON_IsTrue(json_get(r->json, k));
}

static const char *ecode(const struct reply *r)
{
    const cJSON *e = json_get(r->json, "error");
    const cJSON *c = json_get(e, "code");
    return cJSON_IsString(c) ? c->valuestring : "(none)";
}

/* exec with a shell command; returns the reply (asserting 200). */
static void sh_exec(struct sbd *s, const char *cmd, struct reply *r)
{
    cJSON *b = cJSON_CreateObject();
    json_add_string(b, "cmd", cmd);
    char *body = json_print(b);
    cJSON_Delete(b);
    long st = req(s, "POST", "/v1/exec", body, r);
    free(body);
    if (st != 200)
        th_fail(__FILE__, __LINE__, "exec %s: %ld %s", cmd, st, r->body);
}

static bool is_root(void)
{
    return geteuid() == 0;
}

/* ================================================================ auth */

TEST(auth_missing_or_wrong_token)
{
    struct sbd s = {0};
    sbd_start(&s, make_workspace(), NULL);
    struct reply r;
    ASSERT_OK(req_full(&s, "GET", "/healthz", NULL, 0, NULL, NULL, &r));
    ASSERT_EQ_INT(r.status, 401);
    ASSERT_EQ_STR(ecode(&r), "unauthorized");
    reply_done(&r);
    const char *pwn = "{\"cmd\":\"touch working/pwned\"}";
    ASSERT_OK(req_full(&s, "POST", "/v1/exec", pwn, strlen(pwn), "wrong", NULL, &r));
    ASSERT_EQ_INT(r.status, 401);
    reply_done(&r);
    ASSERT_OK(req_full(&s, "GET", "/healthz", NULL, 0, TOKEN "x", NULL, &r));
    ASSERT_EQ_INT(r.status, 401);
    reply_done(&r);
    ASSERT_OK(req_full(&s, "GET", "/healthz", NULL, 0, "s3cret-token-for-test", NULL, &r));
    ASSERT_EQ_INT(r.status, 401);
    reply_done(&r);
    char *p = xasprintf("%s/working/pwned", s.ws);
    ASSERT_TRUE(access(p, F_OK) != 0);
    free(p);
    ASSERT_EQ_INT(req(&s, "GET", "/healthz", NULL, &r), 200);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/readyz", NULL, &r), 200);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/version", NULL, &r), 200);
    ASSERT_EQ_STR(jstr(&r, "api"), "v1");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/nope", NULL, &r), 404);
    ASSERT_EQ_STR(ecode(&r), "not_found");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "DELETE", "/v1/exec", NULL, &r), 405);
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

/* ================================================================ paths */

TEST(traversal_and_symlink_tricks_are_refused)
{
    struct sbd s = {0};
    char *ws = make_workspace();
    sbd_start(&s, ws, NULL);
    struct reply r;
    static const char *const escapes[] = {
        "/v1/files/working%2f..%2f..%2fetc%2fpasswd", "/v1/files/%2fetc%2fpasswd",
        "/v1/files/..%2f..%2fetc%2fpasswd",           "/v1/files/.tern%2fidem",
        "/v1/list/..%2f",                              "/v1/files/working%2f..%2f.tern%2fidem",
    };
    for (size_t i = 0; i < sizeof escapes / sizeof *escapes; i++) {
        ASSERT_EQ_INT(req(&s, "GET", escapes[i], NULL, &r), 403);
        ASSERT_EQ_STR(ecode(&r), "forbidden_path");
        reply_done(&r);
    }
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/input%00.txt", NULL, &r), 400);
    reply_done(&r);
    /* symlinks made by a command */
    sh_exec(&s,
            "ln -s /etc working/etc && ln -s ../input working/in && ln -s ../.tern working/st && "
            "ln -s /workspace/../etc/passwd working/abs",
            &r);
    ASSERT_EQ_INT(jint(&r, "exitCode"), 0);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/working/etc/passwd", NULL, &r), 403);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/working/abs", NULL, &r), 403);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/working/st/idem", NULL, &r), 403);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/list/working/st", NULL, &r), 403);
    reply_done(&r);
    /* reading through an inside symlink is fine; writing through it is not */
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/working/in/ctx.txt", NULL, &r), 200);
    ASSERT_EQ_STR(r.body, "ctx\n");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/working/in/ctx.txt", "evil", &r), 403);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/working/etc/evil", "evil", &r), 403);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "DELETE", "/v1/files/working/in/ctx.txt", NULL, &r), 403);
    reply_done(&r);
    /* exec cwd cannot escape either */
    ASSERT_EQ_INT(req(&s, "POST", "/v1/exec", "{\"cmd\":\"pwd\",\"cwd\":\"working/etc\"}", &r), 403);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "POST", "/v1/exec", "{\"cmd\":\"pwd\",\"cwd\":\"../\"}", &r), 403);
    reply_done(&r);
    /* the list of the root hides the state directory */
    ASSERT_EQ_INT(req(&s, "GET", "/v1/list/?depth=2", NULL, &r), 200);
    ASSERT_TRUE(strstr(r.body, "\"path\":\".tern") == NULL);
    ASSERT_CONTAINS(r.body, "\"path\":\"working/in\",\"type\":\"symlink\"");
    reply_done(&r);
    char *p = xasprintf("%s/input/ctx.txt", ws);
    FILE *f = fopen(p, "r");
    char line[16] = {0};
    fgets(line, sizeof line, f);
    fclose(f);
    free(p);
    ASSERT_EQ_STR(line, "ctx\n");
    sbd_kill(&s, SIGTERM);
}

TEST(hardlink_tricks_do_not_write_through)
{
    struct sbd s = {0};
    char *ws = make_workspace();
    sbd_start(&s, ws, NULL);
    /* a hardlink from the writable part to a read-only file (made here: as
     * a command it is refused by protected_hardlinks or Landlock) */
    char *cmd = xasprintf("mkdir -p %s/working && ln %s/input/ctx.txt %s/working/h", ws, ws, ws);
    run(cmd);
    free(cmd);
    struct reply r;
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/working/h?append=true", "evil", &r), 403);
    ASSERT_EQ_STR(ecode(&r), "forbidden_path");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/working/h", "replaced", &r), 200);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/input/ctx.txt", NULL, &r), 200);
    ASSERT_EQ_STR(r.body, "ctx\n");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/working/h", NULL, &r), 200);
    ASSERT_EQ_STR(r.body, "replaced");
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

TEST(read_only_parts_stay_read_only)
{
    struct sbd s = {0};
    char *ws = make_workspace();
    const char *extra[] = {"--run-as", "64123:64123", NULL};
    sbd_start(&s, ws, is_root() ? extra : NULL);
    struct reply r;
    static const char *const ro[] = {"/v1/files/input/ctx.txt", "/v1/files/input/new",
                                     "/v1/files/task.md",       "/v1/files/simple.md",
                                     "/v1/files/skills/s/x.md", "/v1/files/new-top-level",
                                     "/v1/files/working"};
    for (size_t i = 0; i < sizeof ro / sizeof *ro; i++) {
        ASSERT_EQ_INT(req(&s, "PUT", ro[i], "x", &r), 403);
        ASSERT_EQ_STR(ecode(&r), "read_only");
        reply_done(&r);
        ASSERT_EQ_INT(req(&s, "DELETE", ro[i], NULL, &r), 403);
        reply_done(&r);
    }
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/.tern/idem/x", "x", &r), 403);
    ASSERT_EQ_STR(ecode(&r), "forbidden_path");
    reply_done(&r);
    /* commands cannot write there either (uid / Landlock) */
    sh_exec(&s,
            "for f in input/x task.md skills/s/SKILL.md .tern/idem/forged; do "
            "(echo x > $f) 2>/dev/null && echo WROTE $f; done; rm -f task.md 2>/dev/null; "
            "echo ok > working/ok && echo fine",
            &r);
    ASSERT_TRUE(strstr(jstr(&r, "stdout"), "WROTE") == NULL);
    ASSERT_CONTAINS(jstr(&r, "stdout"), "fine");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/task.md", NULL, &r), 200);
    ASSERT_EQ_STR(r.body, "the task\n");
    reply_done(&r);
    /* the writable part works, with mode and append */
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/output/a/b.txt?mode=0640", "one\n", &r), 200);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/output/a/b.txt?append=true", "two\n", &r), 200);
    ASSERT_EQ_INT(jint(&r, "size"), 8);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/output/a/b.txt?offset=4&limit=3", NULL, &r), 200);
    ASSERT_EQ_STR(r.body, "two");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/list/output/a/b.txt?depth=0", NULL, &r), 200);
    ASSERT_CONTAINS(r.body, "\"mode\":416"); /* 0640 */
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/output/x?mode=9", "x", &r), 400);
    reply_done(&r);
    if (is_root()) { /* files made through the API belong to the command uid */
        struct stat st;
        char *p = xasprintf("%s/output/a/b.txt", ws);
        ASSERT_OK(stat(p, &st));
        free(p);
        ASSERT_EQ_INT(st.st_uid, TEST_UID);
        sh_exec(&s, "echo more >> output/a/b.txt && id -u", &r);
        ASSERT_EQ_STR(jstr(&r, "stdout"), "64123\n");
        reply_done(&r);
    }
    ASSERT_EQ_INT(req(&s, "DELETE", "/v1/files/output/a", NULL, &r), 200);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/output/a/b.txt", NULL, &r), 404);
    ASSERT_EQ_STR(ecode(&r), "not_found");
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

/* ================================================================ exec */

TEST(huge_output_is_capped_with_totals)
{
    struct sbd s = {0};
    sbd_start(&s, make_workspace(), NULL);
    struct reply r;
    sh_exec(&s, "head -c 5000000 /dev/zero | tr '\\0' a; printf '\\377bad' >&2", &r);
    ASSERT_EQ_INT(jint(&r, "stdoutBytes"), 5000000);
    ASSERT_EQ_INT(strlen(jstr(&r, "stdout")), TERN_SANDBOX_MAX_OUTPUT);
    ASSERT_TRUE(jtrue(&r, "truncated"));
    ASSERT_EQ_INT(jint(&r, "stderrBytes"), 4);
    ASSERT_EQ_STR(jstr(&r, "stderr"), "\xef\xbf\xbd" "bad");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "POST", "/v1/exec",
                      "{\"argv\":[\"cat\"],\"stdin\":\"piped\",\"env\":{\"Q\":\"1\"}}", &r),
                  200);
    ASSERT_EQ_STR(jstr(&r, "stdout"), "piped");
    ASSERT_FALSE(jtrue(&r, "truncated"));
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

TEST_T(command_ignoring_sigterm_still_dies, 30)
{
    struct sbd s = {0};
    const char *extra[] = {"--kill-grace-ms", "300", NULL};
    sbd_start(&s, make_workspace(), extra);
    struct reply r;
    int64_t t0 = mono_ms();
    ASSERT_EQ_INT(req(&s, "POST", "/v1/exec",
                      "{\"cmd\":\"trap '' TERM; echo started; exec sleep 60\",\"timeoutMs\":300}",
                      &r),
                  200);
    ASSERT_CMP_INT(mono_ms() - t0, <, 10000);
    ASSERT_EQ_STR(jstr(&r, "status"), "timeout");
    /* "exec sleep" resets the ignored TERM? No: ignored dispositions survive
     * exec, so the grace period's SIGKILL is what ends it */
    ASSERT_EQ_INT(jint(&r, "signal"), SIGKILL);
    ASSERT_TRUE(cJSON_IsNull(json_get(r.json, "exitCode")));
    ASSERT_EQ_STR(jstr(&r, "stdout"), "started\n");
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

static int count_uid_procs(uid_t uid)
{
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char p[300];
        snprintf(p, sizeof p, "/proc/%s", e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && st.st_uid == uid)
            n++;
    }
    closedir(d);
    return n;
}

TEST_T(fork_bomb_is_held_by_the_process_limit, 60)
{
    if (!is_root())
        TH_SKIP("needs root to run commands as a dedicated uid");
    struct sbd s = {0};
    const char *extra[] = {"--run-as", "64123:64123", "--max-procs", "40", "--kill-grace-ms",
                           "200", NULL};
    sbd_start(&s, make_workspace(), extra);
    struct reply r;
    int64_t t0 = mono_ms();
    ASSERT_EQ_INT(req(&s, "POST", "/v1/exec",
                      "{\"cmd\":\"f(){ f|f& }; f; sleep 1\",\"timeoutMs\":3000}", &r),
                  200);
    ASSERT_CMP_INT(mono_ms() - t0, <, 20000);
    reply_done(&r);
    /* nothing of the bomb is left (killed and reaped), and the daemon
     * still answers */
    int64_t deadline = mono_ms() + 10000;
    while (count_uid_procs(TEST_UID) > 0 && mono_ms() < deadline)
        poll(NULL, 0, 50);
    ASSERT_EQ_INT(count_uid_procs(TEST_UID), 0);
    sh_exec(&s, "grep 'Max processes' /proc/self/limits", &r);
    ASSERT_CONTAINS(jstr(&r, "stdout"), " 40 ");
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

TEST(oversize_and_malformed_requests)
{
    struct sbd s = {0};
    sbd_start(&s, make_workspace(), NULL);
    struct reply r;
    static const char *const bad[] = {"", "{", "[1]", "{\"cmd\":1}", "{\"cmd\":\"a\",\"x\":1}",
                                      "{\"cmd\":\"a\",\"argv\":[\"b\"]}", "{\"argv\":[]}",
                                      "{\"cmd\":\"a\",\"timeoutMs\":-5}", "\xff\xfe"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ASSERT_EQ_INT(req(&s, "POST", "/v1/exec", bad[i], &r), 400);
        ASSERT_EQ_STR(ecode(&r), "bad_request");
        reply_done(&r);
    }
    size_t big = TERN_SANDBOX_MAX_EXEC_BODY + 10;
    char *body = xmalloc(big);
    memset(body, ' ', big);
    ASSERT_OK(req_full(&s, "POST", "/v1/exec", body, big, TOKEN, NULL, &r));
    ASSERT_EQ_INT(r.status, 413);
    ASSERT_EQ_STR(ecode(&r), "too_large");
    reply_done(&r);
    free(body);
    /* a header over the server's memory limit */
    char *key = xmalloc(100000);
    memset(key, 'k', 99999);
    key[99999] = '\0';
    int rc = req_full(&s, "GET", "/healthz", NULL, 0, TOKEN, key, &r);
    ASSERT_TRUE(rc != 0 || r.status >= 400);
    reply_done(&r);
    free(key);
    ASSERT_OK(req_full(&s, "POST", "/v1/exec", "{\"cmd\":\"true\"}", 15, TOKEN, "bad key", &r));
    ASSERT_EQ_INT(r.status, 400);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/list/?depth=99", NULL, &r), 400);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/task.md?offset=x", NULL, &r), 400);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/healthz", NULL, &r), 200);
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

/* ================================================================ idempotency */

static long keyed(struct sbd *s, const char *method, const char *path, const char *body,
                  const char *key, struct reply *r)
{
    int rc = req_full(s, method, path, body, body ? strlen(body) : 0, TOKEN, key, r);
    if (rc != 0)
        th_fail(__FILE__, __LINE__, "%s %s: transport error %d", method, path, rc);
    return r->status;
}

TEST(repeat_returns_the_record)
{
    struct sbd s = {0};
    sbd_start(&s, make_workspace(), NULL);
    struct reply r, r2;
    const char *body = "{\"cmd\":\"echo run >> working/count; wc -l < working/count\"}";
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec", body, "uid-1/call-1", &r), 200);
    ASSERT_FALSE(jtrue(&r, "replayed"));
    ASSERT_EQ_STR(jstr(&r, "stdout"), "1\n");
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec", body, "uid-1/call-1", &r2), 200);
    ASSERT_TRUE(jtrue(&r2, "replayed"));
    ASSERT_EQ_STR(jstr(&r2, "stdout"), "1\n");
    ASSERT_EQ_INT(jint(&r2, "durationMs"), jint(&r, "durationMs"));
    reply_done(&r);
    reply_done(&r2);
    /* member order and whitespace do not make it another request */
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec",
                        "{ \"timeoutMs\": 120000,\n \"cmd\" : \"echo run >> working/count; wc -l < working/count\"}",
                        "uid-1/call-1", &r),
                  200);
    ASSERT_TRUE(jtrue(&r, "replayed"));
    reply_done(&r);
    /* the same key for another request is refused */
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec", "{\"cmd\":\"true\"}", "uid-1/call-1", &r), 422);
    ASSERT_EQ_STR(ecode(&r), "bad_request");
    reply_done(&r);
    /* a new key runs again */
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec", body, "uid-1/call-2", &r), 200);
    ASSERT_EQ_STR(jstr(&r, "stdout"), "2\n");
    reply_done(&r);
    /* PUT and DELETE */
    ASSERT_EQ_INT(keyed(&s, "PUT", "/v1/files/working/f?append=1", "x", "uid-1/put", &r), 200);
    ASSERT_FALSE(jtrue(&r, "replayed"));
    reply_done(&r);
    ASSERT_EQ_INT(keyed(&s, "PUT", "/v1/files/working/f?append=1", "x", "uid-1/put", &r), 200);
    ASSERT_TRUE(jtrue(&r, "replayed"));
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/working/f", NULL, &r), 200);
    ASSERT_EQ_STR(r.body, "x"); /* appended once */
    reply_done(&r);
    ASSERT_EQ_INT(keyed(&s, "DELETE", "/v1/files/working/f", NULL, "uid-1/del", &r), 200);
    reply_done(&r);
    ASSERT_EQ_INT(keyed(&s, "DELETE", "/v1/files/working/f", NULL, "uid-1/del", &r), 200);
    ASSERT_TRUE(jtrue(&r, "replayed"));
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/executions", NULL, &r), 200);
    const cJSON *ex = json_get(r.json, "executions");
    ASSERT_EQ_INT(cJSON_GetArraySize(ex), 4);
    ASSERT_CONTAINS(r.body, "\"key\":\"uid-1/call-1\"");
    ASSERT_CONTAINS(r.body, "\"runs\":1");
    reply_done(&r);
    /* records are durable before the answer: they survive a kill -9 */
    sbd_kill(&s, SIGKILL);
    char *ws = s.ws;
    sbd_start(&s, ws, NULL);
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec", body, "uid-1/call-1", &r), 200);
    ASSERT_TRUE(jtrue(&r, "replayed"));
    ASSERT_EQ_STR(jstr(&r, "stdout"), "1\n");
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

struct bg {
    struct sbd *s;
    const char *body;
    const char *key;
    struct reply r;
    int rc;
};

static void *bg_exec(void *arg)
{
    struct bg *b = arg;
    b->rc = req_full(b->s, "POST", "/v1/exec", b->body, strlen(b->body), TOKEN, b->key, &b->r);
    return NULL;
}

/* Waits until /v1/executions lists key of op with status. */
static void wait_op_status(struct sbd *s, const char *key, const char *op, const char *status)
{
    char *want = xasprintf("\"key\":\"%s\",\"op\":\"%s\",\"status\":\"%s\"", key, op,
                           status);
    int64_t deadline = mono_ms() + 10000;
    for (;;) {
        struct reply r;
        req(s, "GET", "/v1/executions", NULL, &r);
        bool ok = strstr(r.body, want) != NULL;
        reply_done(&r);
        if (ok)
            break;
        if (mono_ms() > deadline)
            th_fail(__FILE__, __LINE__, "no record %s", want);
        poll(NULL, 0, 20);
    }
    free(want);
}

static void wait_status(struct sbd *s, const char *key, const char *status)
{
    wait_op_status(s, key, "exec", status);
}

TEST_T(killed_mid_exec_answers_interrupted_and_never_reruns, 60)
{
    struct sbd s = {0};
    char *ws = make_workspace();
    sbd_start(&s, ws, NULL);
    struct bg b = {.s = &s, .body = "{\"cmd\":\"echo start >> working/starts; exec sleep 30\"}", .key = "uid-9/c1"};
    pthread_t th;
    pthread_create(&th, NULL, bg_exec, &b);
    wait_status(&s, "uid-9/c1", "started");
    /* while it runs, the same key is busy, not run twice */
    struct reply r;
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec", b.body, "uid-9/c1", &r), 409);
    ASSERT_EQ_STR(ecode(&r), "busy");
    reply_done(&r);
    /* wait for the command to have started, then kill -9 the daemon */
    char *starts = xasprintf("%s/working/starts", ws);
    int64_t deadline = mono_ms() + 10000;
    while (access(starts, F_OK) != 0 && mono_ms() < deadline)
        poll(NULL, 0, 20);
    sbd_kill(&s, SIGKILL);
    pthread_join(th, NULL);
    ASSERT_TRUE(b.rc != 0); /* the client lost its answer */
    reply_done(&b.r);
    sbd_start(&s, ws, NULL);
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec", b.body, "uid-9/c1", &r), 200);
    ASSERT_EQ_STR(jstr(&r, "status"), "interrupted");
    ASSERT_TRUE(jtrue(&r, "replayed"));
    ASSERT_TRUE(cJSON_IsNull(json_get(r.json, "exitCode")));
    reply_done(&r);
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec", b.body, "uid-9/c1", &r), 200);
    ASSERT_EQ_STR(jstr(&r, "status"), "interrupted");
    reply_done(&r);
    sh_exec(&s, "wc -l < working/starts", &r);
    ASSERT_EQ_STR(jstr(&r, "stdout"), "1\n"); /* started once, never re-run */
    reply_done(&r);
    wait_status(&s, "uid-9/c1", "interrupted");
    free(starts);
    sbd_kill(&s, SIGTERM);
}

/* A raw connection that sends a PUT's headers (Content-Length: total) and
 * only the first `sent` bytes of its body. Returns the socket. */
static int put_partial(struct sbd *s, const char *path, const char *key, size_t total,
                       size_t sent)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_TRUE(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_OK(connect(fd, (struct sockaddr *)&a, sizeof a));
    char *head = xasprintf("PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " TOKEN
                           "\r\nIdempotency-Key: %s\r\nContent-Length: %zu\r\n\r\n",
                           path, key, total);
    ASSERT_EQ_INT(write(fd, head, strlen(head)), (long long)strlen(head));
    free(head);
    char *body = xmalloc(sent + 1);
    memset(body, 'p', sent);
    ASSERT_EQ_INT(write(fd, body, sent), (long long)sent);
    free(body);
    return fd;
}

TEST_T(upload_cut_off_mid_body_does_not_block_its_key, 60)
{
    struct sbd s = {0};
    char *ws = make_workspace();
    sbd_start(&s, ws, NULL);
    /* the client disappears after half the body: the write never happened */
    int fd = put_partial(&s, "/v1/files/working/up.txt", "uid-7/w1", 100000, 50000);
    wait_op_status(&s, "uid-7/w1", "put", "started");
    struct reply r;
    ASSERT_EQ_INT(keyed(&s, "PUT", "/v1/files/working/up.txt", "whole", "uid-7/w1", &r), 409);
    reply_done(&r);
    close(fd);
    /* the retry under the same key runs it (bounded wait: the daemon notices
     * the closed connection at once; before, the key stayed busy until a
     * restart) */
    int64_t deadline = mono_ms() + 10000;
    long st;
    while ((st = keyed(&s, "PUT", "/v1/files/working/up.txt", "whole", "uid-7/w1", &r)) == 409 &&
           mono_ms() < deadline) {
        reply_done(&r);
        poll(NULL, 0, 50);
    }
    ASSERT_EQ_INT(st, 200);
    ASSERT_EQ_STR(jstr(&r, "status"), "completed");
    ASSERT_FALSE(jtrue(&r, "replayed"));
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/working/up.txt", NULL, &r), 200);
    ASSERT_EQ_STR(r.body, "whole");
    reply_done(&r);
    /* once done it is an ordinary record: repeats are answered from it */
    ASSERT_EQ_INT(keyed(&s, "PUT", "/v1/files/working/up.txt", "whole", "uid-7/w1", &r), 200);
    ASSERT_TRUE(jtrue(&r, "replayed"));
    reply_done(&r);
    wait_op_status(&s, "uid-7/w1", "put", "completed");
    ASSERT_EQ_INT(req(&s, "GET", "/v1/executions", NULL, &r), 200);
    ASSERT_EQ_INT(cJSON_GetArraySize(json_get(r.json, "executions")), 1);
    ASSERT_CONTAINS(r.body, "\"runs\":1");
    reply_done(&r);
    /* a daemon killed mid-upload says interrupted instead (it cannot know) */
    fd = put_partial(&s, "/v1/files/working/up2.txt", "uid-7/w2", 1000, 10);
    wait_op_status(&s, "uid-7/w2", "put", "started");
    sbd_kill(&s, SIGKILL);
    close(fd);
    sbd_start(&s, ws, NULL);
    ASSERT_EQ_INT(keyed(&s, "PUT", "/v1/files/working/up2.txt", "x", "uid-7/w2", &r), 200);
    ASSERT_EQ_STR(jstr(&r, "status"), "interrupted");
    ASSERT_TRUE(jtrue(&r, "replayed"));
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

/* True while pid exists (a zombie counts: it is not reaped yet). */
static bool pid_alive(pid_t pid)
{
    return kill(pid, 0) == 0 || errno != ESRCH;
}

static pid_t read_pid(const char *ws, const char *name)
{
    char *p = xasprintf("%s/working/%s", ws, name);
    FILE *f = fopen(p, "r");
    free(p);
    if (!f)
        return 0;
    char line[32] = "";
    if (!fgets(line, sizeof line, f))
        line[0] = '\0';
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    int64_t v = 0;
    if (num_parse_range(line, 1, INT32_MAX, &v) != 0)
        return 0;
    return (pid_t)v;
}

TEST_T(no_process_outlives_its_command, 60)
{
    struct sbd s = {0};
    char *ws = make_workspace();
    sbd_start(&s, ws, NULL);
    struct reply r;
    /* a new session, a double fork out of it, and a plain background job */
    sh_exec(&s,
            "setsid sleep 300 & echo $! > working/p1; "
            "(setsid sh -c 'sleep 301 & echo $! > working/p2; sleep 302' &) ; "
            "sleep 303 & echo $! > working/p3; "
            "while [ ! -s working/p2 ]; do sleep 0.01; done; echo launched",
            &r);
    ASSERT_EQ_STR(jstr(&r, "status"), "completed");
    ASSERT_EQ_STR(jstr(&r, "stdout"), "launched\n");
    reply_done(&r);
    const char *names[] = {"p1", "p2", "p3"};
    for (int i = 0; i < 3; i++) {
        pid_t pid = read_pid(ws, names[i]);
        if (pid <= 0)
            th_fail(__FILE__, __LINE__, "no pid in working/%s", names[i]);
        /* gone by the time the answer came: killed and reaped */
        if (pid_alive(pid))
            th_fail(__FILE__, __LINE__, "%s (pid %d) outlived its command", names[i], (int)pid);
    }
    /* the same on a timeout: the escaped process goes with the command */
    ASSERT_EQ_INT(req(&s, "POST", "/v1/exec",
                      "{\"cmd\":\"setsid sleep 310 & echo $! > working/p4; sleep 60\","
                      "\"timeoutMs\":500}",
                      &r),
                  200);
    ASSERT_EQ_STR(jstr(&r, "status"), "timeout");
    reply_done(&r);
    pid_t p4 = read_pid(ws, "p4");
    ASSERT_TRUE(p4 > 0);
    ASSERT_FALSE(pid_alive(p4));
    /* exit codes, signals and exec failures still come through */
    sh_exec(&s, "exit 3", &r);
    ASSERT_EQ_INT(jint(&r, "exitCode"), 3);
    reply_done(&r);
    sh_exec(&s, "kill -TERM $$", &r);
    ASSERT_EQ_INT(jint(&r, "signal"), SIGTERM);
    ASSERT_TRUE(cJSON_IsNull(json_get(r.json, "exitCode")));
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "POST", "/v1/exec", "{\"argv\":[\"/no/such/program\"]}", &r), 200);
    ASSERT_EQ_INT(jint(&r, "exitCode"), 127);
    ASSERT_CONTAINS(jstr(&r, "stderr"), "cannot execute");
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

TEST_T(concurrent_exec_cap_answers_busy, 30)
{
    struct sbd s = {0};
    char *ws = make_workspace();
    const char *extra[] = {"--max-execs", "1", NULL};
    sbd_start(&s, ws, extra);
    struct bg b = {.s = &s, .body = "{\"cmd\":\"touch working/in-flight; exec sleep 2\"}", .key = "slow"};
    pthread_t th;
    pthread_create(&th, NULL, bg_exec, &b);
    wait_status(&s, "slow", "started");
    struct reply r;
    ASSERT_EQ_INT(req(&s, "POST", "/v1/exec", "{\"cmd\":\"true\"}", &r), 429);
    ASSERT_EQ_STR(ecode(&r), "busy");
    reply_done(&r);
    pthread_join(th, NULL);
    ASSERT_OK(b.rc);
    ASSERT_EQ_INT(b.r.status, 200);
    reply_done(&b.r);
    ASSERT_EQ_INT(req(&s, "POST", "/v1/exec", "{\"cmd\":\"true\"}", &r), 200);
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

/* ================================================================ snapshot */

TEST(snapshot_restore_round_trip)
{
    struct sbd s = {0};
    char *ws = make_workspace();
    sbd_start(&s, ws, NULL);
    struct reply r, snap;
    sh_exec(&s,
            "mkdir -p working/empty working/src output/deep/er && printf '#!/bin/sh\\n' > "
            "working/src/run.sh && chmod 750 working/src/run.sh && ln -s src/run.sh working/l "
            "&& head -c 200000 /dev/urandom > output/deep/er/blob && chmod 711 working/empty",
            &r);
    ASSERT_EQ_INT(jint(&r, "exitCode"), 0);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/list/?depth=8", NULL, &r), 200);
    char *before = xstrdup(r.body);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "POST", "/v1/snapshot", NULL, &snap), 200);
    ASSERT_EQ_INT(snap.len % 512, 0);
    sh_exec(&s, "rm -rf working/* output/* && echo junk > working/junk", &r);
    reply_done(&r);
    ASSERT_OK(req_full(&s, "POST", "/v1/restore", snap.body, snap.len, TOKEN, NULL, &r));
    ASSERT_EQ_INT(r.status, 200);
    ASSERT_CMP_INT(jint(&r, "skipped"), >=, 4); /* input/, task.md, ... */
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/list/?depth=8", NULL, &r), 200);
    /* same entries, sizes and modes (listing order is the directory's) */
    cJSON *a = NULL, *b = NULL;
    ASSERT_OK(json_parse(before, strlen(before), &a, NULL));
    ASSERT_OK(json_parse(r.body, r.len, &b, NULL));
    const cJSON *ea = json_get(a, "entries"), *eb = json_get(b, "entries");
    ASSERT_EQ_INT(cJSON_GetArraySize(ea), cJSON_GetArraySize(eb));
    for (const cJSON *x = ea->child; x; x = x->next) {
        char *want = json_print(x);
        const char *type = json_get(x, "type")->valuestring;
        if (strcmp(type, "dir") == 0) { /* directory sizes are the filesystem's */
            free(want);
            cJSON *y = json_dup(x);
            cJSON_DeleteItemFromObjectCaseSensitive(y, "size");
            want = json_print(y);
            cJSON_Delete(y);
            want[strlen(want) - 1] = '\0';
            char *p = strstr(want, ",\"mode\"");
            *p = '\0';
        }
        ASSERT_CONTAINS(r.body, want);
        free(want);
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/working/junk", NULL, &r), 404);
    reply_done(&r);
    sh_exec(&s, "./working/l && readlink working/l && cmp output/deep/er/blob output/deep/er/blob",
            &r);
    ASSERT_EQ_INT(jint(&r, "exitCode"), 0);
    ASSERT_EQ_STR(jstr(&r, "stdout"), "src/run.sh\n");
    reply_done(&r);
    /* an escaping stream is rejected and changes nothing */
    char bad[2048] = {0};
    FILE *f = popen("mkdir -p /tmp/tern-tar-$$ && cd /tmp/tern-tar-$$ && echo x > f && "
                    "tar --format=ustar -cf - --transform 's,^,../../,' f 2>/dev/null; "
                    "rm -rf /tmp/tern-tar-$$",
                    "r");
    size_t bn = fread(bad, 1, sizeof bad, f);
    pclose(f);
    ASSERT_CMP_INT(bn, >=, 1024);
    ASSERT_OK(req_full(&s, "POST", "/v1/restore", bad, bn, TOKEN, NULL, &r));
    ASSERT_EQ_INT(r.status, 403);
    ASSERT_EQ_STR(ecode(&r), "forbidden_path");
    reply_done(&r);
    ASSERT_OK(req_full(&s, "POST", "/v1/restore", "garbage", 7, TOKEN, NULL, &r));
    ASSERT_EQ_INT(r.status, 400);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/working/src/run.sh", NULL, &r), 200);
    reply_done(&r);
    reply_done(&snap);
    free(before);
    sbd_kill(&s, SIGTERM);
}

/* ================================================================ bubblewrap */

TEST_T(runs_under_bubblewrap_as_a_pod_would, 60)
{
    if (access("/usr/bin/bwrap", X_OK) != 0)
        TH_SKIP("bubblewrap not installed");
    struct sbd s = {0};
    char *ws = make_workspace();
    s.ws = ws;
    write_token(&s);
    char *tokdir = xasprintf("%s/tok", th_tmpdir());
    char *cmd = xasprintf("mkdir -p %s && cp %s %s/token", tokdir, s.token_file, tokdir);
    run(cmd);
    free(cmd);
    char *bin = binary();
    char uid[16], gid[16];
    snprintf(uid, sizeof uid, "%d", SANDBOX_UID);
    snprintf(gid, sizeof gid, "%d", SANDBOX_GID);
    char *argv[] = {"/usr/bin/bwrap",
                    "--unshare-user", "--uid", uid, "--gid", gid,
                    "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts",
                    "--die-with-parent",
                    "--ro-bind", "/usr", "/usr",
                    "--ro-bind", "/etc", "/etc",
                    "--symlink", "usr/lib", "/lib",
                    "--symlink", "usr/lib64", "/lib64",
                    "--symlink", "usr/bin", "/bin",
                    "--symlink", "usr/sbin", "/sbin",
                    "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                    "--bind", ws, SANDBOX_WORKSPACE,
                    "--ro-bind", tokdir, SANDBOX_TOKEN_DIR,
                    "--ro-bind", bin, "/opt/tern/tern-sandboxd",
                    "--chdir", "/",
                    "--",
                    "/opt/tern/tern-sandboxd", "--listen", "127.0.0.1:0",
                    "--token-file", SANDBOX_TOKEN_FILE, "--log-level", "warn",
                    NULL};
    s.wrapped = true;
    start_argv(&s, argv);
    struct reply r;
    /* PID 1 of its namespace, as the only process of a pod is */
    sh_exec(&s, "id -u; pwd; cat /proc/$PPID/stat | cut -d' ' -f4", &r);
    char *want = xasprintf("%d\n%s\n1\n", SANDBOX_UID, SANDBOX_WORKSPACE);
    ASSERT_EQ_STR(jstr(&r, "stdout"), want);
    free(want);
    reply_done(&r);
    /* and a detached process still goes with its command */
    sh_exec(&s, "setsid sleep 300 & echo $! > working/bg", &r);
    reply_done(&r);
    sh_exec(&s, "kill -0 $(cat working/bg) 2>/dev/null && echo alive || echo gone", &r);
    ASSERT_EQ_STR(jstr(&r, "stdout"), "gone\n");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/working/hello.txt", "hi", &r), 200);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/working/hello.txt", NULL, &r), 200);
    ASSERT_EQ_STR(r.body, "hi");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/input/x", "hi", &r), 403);
    reply_done(&r);
    /* same uid as sandboxd: Landlock is what keeps the command out of the
     * read-only parts and the records */
    sh_exec(&s,
            "for f in input/x task.md .tern/idem/forged /etc/x; do (echo x > $f) 2>/dev/null "
            "&& echo WROTE $f; done; echo y > working/y && echo y > /tmp/y && echo fine",
            &r);
    ASSERT_EQ_STR(jstr(&r, "stdout"), "fine\n");
    reply_done(&r);
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec", "{\"cmd\":\"echo once\"}", "k", &r), 200);
    reply_done(&r);
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec", "{\"cmd\":\"echo once\"}", "k", &r), 200);
    ASSERT_TRUE(jtrue(&r, "replayed"));
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "POST", "/v1/snapshot", NULL, &r), 200);
    ASSERT_CMP_INT(r.len, >=, 1024);
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
    free(tokdir);
    free(bin);
}

/* ================================================================ live output */

struct follow {
    struct sbd *s;
    const char *key;
    struct buf lines;
    int64_t first_line_ms; /* when the first output line arrived */
    int rc;
};

static int on_follow_line(void *ctx, const char *line, size_t len)
{
    struct follow *f = ctx;
    if (len && !strstr(line, "heartbeat")) {
        if (!f->first_line_ms && strstr(line, "\"data\""))
            f->first_line_ms = mono_ms();
        buf_append(&f->lines, line, len);
        buf_putc(&f->lines, '\n');
    }
    return 0;
}

/* Follows GET /v1/executions/live?key=...&follow=true until the stream ends. */
static void *follow_main(void *arg)
{
    struct follow *f = arg;
    struct httpc *c = httpc_new();
    char *url = xasprintf("%s/v1/executions/live?key=%s&follow=true", f->s->base, f->key);
    const char *hdrs[] = {"Authorization: Bearer " TOKEN, NULL};
    struct httpc_request rq = {.url = url, .headers = hdrs, .on_line = on_follow_line, .ctx = f};
    struct httpc_response resp = {0};
    for (int64_t until = mono_ms() + 10000; mono_ms() < until;) {
        httpc_response_done(&resp);
        memset(&resp, 0, sizeof resp);
        f->rc = httpc_do(c, &rq, &resp, NULL);
        if (f->rc || resp.status != 404)
            break;
        poll(NULL, 0, 20); /* the exec has not registered yet */
    }
    if (!f->rc && resp.status != 200)
        f->rc = -(int)resp.status;
    httpc_response_done(&resp);
    free(url);
    httpc_free(c);
    return NULL;
}

/* A command's output can be followed while it runs: the first line arrives
 * long before the command ends, and the stream ends with its exit code. */
TEST_T(live_output_while_the_command_runs, 30)
{
    struct sbd s = {0};
    sbd_start(&s, make_workspace(), NULL);
    struct follow f = {.s = &s, .key = "uid-1/call-live"};
    buf_init(&f.lines, 1u << 20);
    pthread_t ft;
    pthread_create(&ft, NULL, follow_main, &f);
    struct bg b = {.s = &s,
                   .body = "{\"cmd\":\"echo first; sleep 1.5; echo second >&2; sleep 0.5; "
                           "echo third; exit 3\"}",
                   .key = "uid-1/call-live"};
    int64_t t0 = mono_ms();
    pthread_t th;
    pthread_create(&th, NULL, bg_exec, &b);
    pthread_join(th, NULL);
    int64_t exec_ms = mono_ms() - t0;
    pthread_join(ft, NULL);
    ASSERT_OK(b.rc);
    ASSERT_EQ_INT(b.r.status, 200);
    ASSERT_OK(f.rc);
    ASSERT_TRUE(exec_ms >= 1900);
    ASSERT_TRUE(f.first_line_ms > 0);
    /* "first" was seen while the command still had well over a second to go */
    ASSERT_CMP_INT(f.first_line_ms - t0, <, exec_ms - 1000);
    const char *t = buf_str(&f.lines);
    ASSERT_CONTAINS(t, "{\"stream\":\"stdout\",\"offset\":0,\"data\":\"first\\n\"}");
    ASSERT_CONTAINS(t, "{\"stream\":\"stderr\",\"offset\":0,\"data\":\"second\\n\"}");
    ASSERT_CONTAINS(t, "\"data\":\"third\\n\"");
    ASSERT_CONTAINS(t, "\"done\":true");
    ASSERT_CONTAINS(t, "\"exitCode\":3");
    ASSERT_CONTAINS(t, "\"stdoutBytes\":12");
    /* after the end: the whole output again without follow, while it is kept */
    struct reply r;
    ASSERT_EQ_INT(req(&s, "GET", "/v1/executions/live?key=uid-1/call-live", NULL, &r), 200);
    ASSERT_CONTAINS(r.body, "\"done\":true");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/executions/live?key=uid-1/other", NULL, &r), 404);
    ASSERT_EQ_STR(ecode(&r), "not_found");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/executions/live", NULL, &r), 400);
    reply_done(&r);
    reply_done(&b.r);
    buf_done(&f.lines);
    sbd_kill(&s, SIGTERM);
}

/* More output than the ring keeps: the reader is told how much it missed,
 * and resuming from an offset continues exactly there. */
TEST_T(live_output_skips_are_explicit_and_offsets_resume, 30)
{
    struct sbd s = {0};
    sbd_start(&s, make_workspace(), NULL);
    struct reply r;
    /* 600000 bytes of 'x' lines; the ring keeps the last 256 KiB */
    ASSERT_EQ_INT(keyed(&s, "POST", "/v1/exec",
                        "{\"cmd\":\"head -c 600000 /dev/zero | tr '\\\\0' x\"}", "uid-2/big", &r),
                  200);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/executions/live?key=uid-2/big", NULL, &r), 200);
    char want[64];
    snprintf(want, sizeof want, "{\"stream\":\"stdout\",\"skipped\":%u}", 600000u - (256u << 10));
    ASSERT_CONTAINS(r.body, want);
    ASSERT_CONTAINS(r.body, "\"stdoutBytes\":600000");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/executions/live?key=uid-2/big&stdoutOffset=599990", NULL, &r),
                  200);
    ASSERT_CONTAINS(r.body, "{\"stream\":\"stdout\",\"offset\":599990,\"data\":\"xxxxxxxxxx\"}");
    ASSERT_FALSE(strstr(r.body, "skipped"));
    reply_done(&r);
    sbd_kill(&s, SIGTERM);
}

/* A multibyte character cut between two reads is not mangled. */
TEST_T(live_output_keeps_utf8_whole, 30)
{
    struct sbd s = {0};
    sbd_start(&s, make_workspace(), NULL);
    struct follow f = {.s = &s, .key = "uid-3/u"};
    buf_init(&f.lines, 1u << 20);
    pthread_t ft;
    pthread_create(&ft, NULL, follow_main, &f);
    /* the two bytes of "é" in two writes, half a second apart */
    struct bg b = {.s = &s, .body = "{\"cmd\":\"printf '\\\\303'; sleep 0.5; printf '\\\\251!'\"}",
                   .key = "uid-3/u"};
    pthread_t th;
    pthread_create(&th, NULL, bg_exec, &b);
    pthread_join(th, NULL);
    pthread_join(ft, NULL);
    ASSERT_OK(b.rc);
    ASSERT_CONTAINS(buf_str(&f.lines), "\"data\":\"\xc3\xa9!\"");
    ASSERT_FALSE(strstr(buf_str(&f.lines), "\xef\xbf\xbd"));
    reply_done(&b.r);
    buf_done(&f.lines);
    sbd_kill(&s, SIGTERM);
}

/* --read-only (the file viewer of a parked session): reads work, nothing
 * changes; --idle-exit ends it once nobody asks. */
TEST_T(read_only_viewer_serves_reads_and_exits_when_idle, 30)
{
    struct sbd s = {0};
    char *ws = make_workspace();
    char *mk = xasprintf("mkdir -p %s/output && echo report > %s/output/report.md", ws, ws);
    run(mk);
    free(mk);
    const char *extra[] = {"--read-only", "--idle-exit", "2", NULL};
    sbd_start(&s, ws, extra);
    struct reply r;
    ASSERT_EQ_INT(req(&s, "GET", "/v1/files/output/report.md", NULL, &r), 200);
    ASSERT_EQ_STR(r.body, "report\n");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "GET", "/v1/list/output?depth=1", NULL, &r), 200);
    ASSERT_CONTAINS(r.body, "output/report.md");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "POST", "/v1/exec", "{\"cmd\":\"touch working/x\"}", &r), 403);
    ASSERT_EQ_STR(ecode(&r), "read_only");
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "PUT", "/v1/files/working/x", "data", &r), 403);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "DELETE", "/v1/files/output/report.md", NULL, &r), 403);
    reply_done(&r);
    ASSERT_EQ_INT(req(&s, "POST", "/v1/restore", "", &r), 403);
    reply_done(&r);
    /* idle for 2 s: it exits 0 by itself */
    int st = 0;
    int64_t deadline = mono_ms() + 10000;
    pid_t w = 0;
    while ((w = waitpid(s.pid, &st, WNOHANG)) == 0 && mono_ms() < deadline)
        poll(NULL, 0, 50);
    ASSERT_EQ_INT(w, s.pid);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    s.pid = 0;
    char *f = xasprintf("%s/output/report.md", ws);
    ASSERT_EQ_INT(access(f, F_OK), 0);
    free(f);
    /* it wrote nothing at all: no state directory, no writable roots */
    f = xasprintf("%s/.tern", ws);
    ASSERT_TRUE(access(f, F_OK) != 0);
    free(f);
    f = xasprintf("%s/working", ws);
    ASSERT_TRUE(access(f, F_OK) != 0);
    free(f);
    sbd_kill(&s, SIGTERM);
}
