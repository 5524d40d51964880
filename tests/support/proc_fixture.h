/* proc_fixture.h - child processes for integration tests and benchmarks:
 * servers that announce their address on stdout (tern-fakellm, tern-sandboxd)
 * and one-shot commands with an environment (tern-runner).
 *
 * Every child gets PR_SET_PDEATHSIG=SIGKILL, so none outlives the test
 * process; still stop what you start (proc_stop / proc_kill, by pid).
 * Does not depend on the test harness. Functions return 0 or a negative
 * code with err set.
 */
#ifndef TERN_PROC_FIXTURE_H
#define TERN_PROC_FIXTURE_H

#include "base/err.h"

#include <sys/types.h>

struct proc {
    pid_t pid;       /* 0 when not running */
    char addr[256];  /* the announced address (servers) */
};

/* The build directory holding bin/ ($TERN_BUILD, else "build"). */
const char *proc_build_dir(void);

/* Starts argv (argv[0] is a path) with stdout on a pipe and stderr appended
 * to log_path (or inherited when NULL); waits up to timeout_ms for a stdout
 * line containing marker and copies the text after the marker (to the next
 * space or end of line) into p->addr. */
int proc_start_server(struct proc *p, char *const argv[], const char *marker,
                      const char *log_path, long timeout_ms, struct tern_err *err);

/* Starts argv with env (NULL-terminated "K=V" list; the child's whole
 * environment) and stdout+stderr appended to log_path (or inherited). */
int proc_spawn(struct proc *p, char *const argv[], char *const env[], const char *log_path,
               struct tern_err *err);

/* Waits for the child to exit, up to timeout_ms (then SIGKILL). Returns the
 * exit status (0..255), 128+signal when killed, or a negative code. */
int proc_wait(struct proc *p, long timeout_ms);

/* Waits until the child has stopped itself (SIGSTOP, e.g. a runner test
 * hook), up to timeout_ms. Returns 0, -ESRCH when it exited instead (then
 * reaped), -ETIMEDOUT. Continue it with kill(p->pid, SIGCONT). */
int proc_wait_stopped(struct proc *p, long timeout_ms);

/* SIGTERM, wait up to 5 s, then SIGKILL; reaps. Safe to call twice. */
void proc_stop(struct proc *p);
/* SIGKILL and reap. */
void proc_kill(struct proc *p);

#endif
