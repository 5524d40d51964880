/* Integration tests: tern-runner copy (fork copy) between two tern-sandboxd:
 * the source's snapshot streamed into the target's restore. */
#include "harness.h"

#include "../support/proc_fixture.h"

#include "base/mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOKEN_A "token-a-0123456789"
#define TOKEN_B "token-b-9876543210"

static void put(const char *dir, const char *rel, const char *text)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "w");
    if (!f)
        th_fail(__FILE__, __LINE__, "open %s: %s", p, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static char *get(const char *dir, const char *rel)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "r");
    if (!f)
        return NULL;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return xstrdup(buf);
}

static void start_sandbox(struct proc *p, const char *ws, const char *token_file)
{
    char bin[300];
    snprintf(bin, sizeof bin, "%s/bin/tern-sandboxd", proc_build_dir());
    char *argv[] = {bin, "--listen", "127.0.0.1:0", "--token-file", (char *)token_file,
                    "--workspace", (char *)ws, "--log-level", "warn", NULL};
    struct tern_err err = {0};
    if (proc_start_server(p, argv, "ready addr=", NULL, 10000, &err))
        th_fail(__FILE__, __LINE__, "sandboxd: %s", err.msg);
}

static int run_copy(const char *from, const char *to, const char *ftok, const char *ttok)
{
    char bin[300];
    snprintf(bin, sizeof bin, "%s/bin/tern-runner", proc_build_dir());
    char *argv[] = {bin, "copy", "--from", (char *)from, "--to", (char *)to,
                    "--from-token-file", (char *)ftok, "--to-token-file", (char *)ttok, NULL};
    char *env[] = {"PATH=/usr/bin:/bin", NULL};
    struct proc p;
    struct tern_err err = {0};
    if (proc_spawn(&p, argv, env, NULL, &err))
        th_fail(__FILE__, __LINE__, "spawn: %s", err.msg);
    return proc_wait(&p, 60000);
}

struct two {
    char a[300], b[300], ta[300], tb[300];
    struct proc sa, sb;
};

static void two_start(struct two *t)
{
    const char *d = th_tmpdir();
    snprintf(t->a, sizeof t->a, "%s/a", d);
    snprintf(t->b, sizeof t->b, "%s/b", d);
    snprintf(t->ta, sizeof t->ta, "%s/token-a", d);
    snprintf(t->tb, sizeof t->tb, "%s/token-b", d);
    mkdir(t->a, 0755);
    mkdir(t->b, 0755);
    put(d, "token-a", TOKEN_A "\n");
    put(d, "token-b", TOKEN_B "\n");
    start_sandbox(&t->sa, t->a, t->ta);
    start_sandbox(&t->sb, t->b, t->tb);
    /* sandboxd created working/ and output/ */
    put(t->a, "working/notes.txt", "parent notes\n");
    put(t->a, "output/review.md", "# Review\n");
    put(t->b, "working/stale.txt", "child's old file\n");
}

TEST_T(copy_moves_the_writable_workspace, 60)
{
    struct two t;
    two_start(&t);
    /* 8 MiB: far more than a pipe holds, so the stream must flow */
    char big[600];
    snprintf(big, sizeof big, "%s/working/big.bin", t.a);
    FILE *f = fopen(big, "w");
    ASSERT_NOT_NULL(f);
    for (int i = 0; i < 8 * 1024; i++) {
        char block[1024];
        memset(block, 'a' + i % 26, sizeof block);
        fwrite(block, 1, sizeof block, f);
    }
    fclose(f);
    ASSERT_EQ_INT(run_copy(t.sa.addr, t.sb.addr, t.ta, t.tb), 0);
    snprintf(big, sizeof big, "%s/working/big.bin", t.b);
    struct stat st;
    ASSERT_OK(stat(big, &st));
    ASSERT_EQ_INT(st.st_size, 8 * 1024 * 1024);
    char *s = get(t.b, "working/notes.txt");
    ASSERT_EQ_STR(s, "parent notes\n");
    free(s);
    s = get(t.b, "output/review.md");
    ASSERT_EQ_STR(s, "# Review\n");
    free(s);
    ASSERT_NULL(get(t.b, "working/stale.txt")); /* restore replaces the writable part */
    proc_stop(&t.sa);
    proc_stop(&t.sb);
}

TEST_T(copy_failures_leave_the_target_untouched, 60)
{
    struct two t;
    two_start(&t);
    /* wrong token for the source: 401, a configuration error */
    ASSERT_EQ_INT(run_copy(t.sa.addr, t.sb.addr, t.tb, t.tb), 78);
    char *s = get(t.b, "working/stale.txt");
    ASSERT_EQ_STR(s, "child's old file\n");
    free(s);
    /* the source is gone: retryable */
    char dead[300];
    snprintf(dead, sizeof dead, "%s", t.sa.addr);
    proc_stop(&t.sa);
    ASSERT_EQ_INT(run_copy(dead, t.sb.addr, t.ta, t.tb), 75);
    s = get(t.b, "working/stale.txt");
    ASSERT_EQ_STR(s, "child's old file\n");
    free(s);
    proc_stop(&t.sb);
}
