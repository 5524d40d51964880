/* Unit tests of sbexec's shim helpers (the file is included to reach its
 * static functions): the /proc stat parent parser, and both ways of
 * killing every child of a process (the children file and the /proc scan
 * used where the kernel has no children file). */
#include "harness.h"

#include "sandbox/sbexec.c"

#include <sys/wait.h>

TEST(stat_ppid_reads_the_field_after_the_command_name)
{
    const char *plain = "123 (sleep) S 45 123 123 0 -1";
    ASSERT_EQ_INT(stat_ppid(plain, strlen(plain)), 45);
    /* a command name may hold ") " and digits: the last ')' counts */
    const char *tricky = "77 (a) S 9 (b)) R 3120 77 77 0";
    ASSERT_EQ_INT(stat_ppid(tricky, strlen(tricky)), 3120);
    ASSERT_EQ_INT(stat_ppid("12 (x", 5), -1);
    ASSERT_EQ_INT(stat_ppid("12 (x) S", 8), -1);
    char num[24];
    ASSERT_EQ_INT(fmt_uint(num, 0), 1);
    ASSERT_EQ_INT(fmt_uint(num, 4194304), 7);
    ASSERT_TRUE(memcmp(num, "4194304", 7) == 0);
}

static pid_t sleeper(void)
{
    pid_t p = fork();
    ASSERT_TRUE(p >= 0);
    if (p == 0) {
        pause();
        _exit(0);
    }
    return p;
}

/* Runs kill_fn on this process's children and checks both are SIGKILLed. */
static void check_kills(int (*kill_fn)(pid_t))
{
    pid_t a = sleeper(), b = sleeper();
    ASSERT_EQ_INT(kill_fn(getpid()), 2);
    int st = 0;
    ASSERT_EQ_INT(waitpid(a, &st, 0), a);
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    ASSERT_EQ_INT(waitpid(b, &st, 0), b);
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    ASSERT_EQ_INT(kill_fn(getpid()), 0);
}

TEST(children_file_kills_every_child)
{
    check_kills(kill_children);
}

TEST(proc_scan_kills_every_child)
{
    check_kills(kill_children_scan);
}

TEST(listed_pids_are_parsed_across_separators)
{
    int p[2];
    ASSERT_OK(pipe(p));
    pid_t a = sleeper();
    char text[64];
    int n = snprintf(text, sizeof text, "  %d \n", (int)a);
    ASSERT_EQ_INT(write(p[1], text, (size_t)n), n);
    close(p[1]);
    ASSERT_EQ_INT(kill_listed(p[0]), 1);
    close(p[0]);
    int st = 0;
    ASSERT_EQ_INT(waitpid(a, &st, 0), a);
    ASSERT_TRUE(WIFSIGNALED(st));
}
