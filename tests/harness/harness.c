/* harness.c - runs registered tests, each in its own process. See harness.h. */
#include "harness.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TH_MAX_TESTS 512
#define TH_SKIP_EXIT 77

struct th_test {
    const char *name;
    th_fn fn;
    unsigned timeout_s;
    const char *file;
};

static struct th_test th_tests[TH_MAX_TESTS];
static size_t th_ntests;
static char th_dir[256];

void th_register(const char *name, th_fn fn, unsigned timeout_s, const char *file)
{
    if (th_ntests == TH_MAX_TESTS) {
        fprintf(stderr, "harness: more than %d tests in one binary\n", TH_MAX_TESTS);
        abort();
    }
    th_tests[th_ntests++] = (struct th_test){name, fn, timeout_s, file};
}

void th_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    exit(1);
}

void th_skip(const char *reason)
{
    fprintf(stderr, "    skipped: %s\n", reason);
    fflush(stderr);
    exit(TH_SKIP_EXIT);
}

const char *th_tmpdir(void)
{
    if (!th_dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(th_dir, sizeof th_dir, "%s/tern-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(th_dir)) {
            perror("harness: mkdtemp");
            exit(1);
        }
    }
    return th_dir;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* 0 passed, 1 failed, 2 skipped */
static int run_one(const struct th_test *t)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("harness: fork");
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        alarm(t->timeout_s);
        t->fn();
        if (th_dir[0])
            nftw(th_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        fflush(stdout);
        exit(0);
    }
    setpgid(pid, pid);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    kill(-pid, SIGKILL); /* anything the test left behind */
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == TH_SKIP_EXIT)
        return 2;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        fprintf(stderr, "    timed out after %u s\n", t->timeout_s);
    else if (WIFSIGNALED(status))
        fprintf(stderr, "    killed by signal %d\n", WTERMSIG(status));
    return 1;
}

static bool selected(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return true;
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i]))
            return true;
    return false;
}

int main(int argc, char **argv)
{
    unsigned passed = 0, failed = 0, skipped = 0;
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < th_ntests; i++) {
        const struct th_test *t = &th_tests[i];
        if (!selected(t->name, argc, argv))
            continue;
        double t0 = now_ms();
        int r = run_one(t);
        double ms = now_ms() - t0;
        const char *word = r == 0 ? "ok  " : r == 2 ? "skip" : "FAIL";
        printf("%s %s (%.0f ms)\n", word, t->name, ms);
        fflush(stdout);
        if (r == 0)
            passed++;
        else if (r == 2)
            skipped++;
        else
            failed++;
    }
    if (skipped)
        printf("%u passed, %u failed, %u skipped\n", passed, failed, skipped);
    else
        printf("%u passed, %u failed\n", passed, failed);
    return failed ? 1 : 0;
}
