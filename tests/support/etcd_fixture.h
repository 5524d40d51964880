/* etcd_fixture.h - a throwaway etcd for integration tests and benchmarks.
 *
 * Starts Debian's /usr/bin/etcd (override with $TERN_ETCD_BIN) as a child
 * process on free loopback ports (found by binding port 0) with its data
 * under a directory the caller owns (typically th_tmpdir()), and waits until
 * GET /health answers {"health":"true"}, polling with a bounded deadline.
 * The child gets PR_SET_PDEATHSIG=SIGKILL, so it never outlives the test
 * process; still, call etcd_fixture_stop when done.
 *
 * kill (SIGKILL) and restart (same ports, same data dir) support crash tests.
 * Does not depend on the test harness, so benchmarks can use it too; every
 * function returns 0 or a negative code with a reason in err (the last lines
 * of etcd's log are appended to startup failures).
 *
 * Linking: every tests/support/<name>.c is compiled and linked into every
 * tests/integration/test_*.c binary and every bench/<name> binary; include
 * this header as "../support/etcd_fixture.h" (from tests/integration) or
 * "../../tests/support/etcd_fixture.h" (from bench/<name>).
 */
#ifndef TERN_ETCD_FIXTURE_H
#define TERN_ETCD_FIXTURE_H

#include "base/err.h"

#include <sys/types.h>

struct etcd_fixture_opts {
    const char *const *extra_args; /* more etcd flags, NULL-terminated, or NULL */
    long ready_timeout_ms;         /* 0 = 20000 */
    /* TLS: with cert_file and key_file set, etcd also serves https on a
     * second free port (tls_url); trusted_ca_file additionally requires
     * client certificates signed by that CA there. Plain http stays on url
     * (used for the readiness check). */
    const char *cert_file;
    const char *key_file;
    const char *trusted_ca_file;
};

struct etcd_fixture {
    pid_t pid; /* 0 when not running */
    int client_port;
    int peer_port;
    char url[64];     /* "http://127.0.0.1:<client_port>" */
    int tls_port;     /* 0 without TLS */
    char tls_url[64]; /* "https://127.0.0.1:<tls_port>" or "" */
    char dir[512];    /* the fixture's directory (data in dir/data) */
    char log[600];    /* etcd's stdout+stderr (appended across restarts) */
    struct etcd_fixture_opts opts;
};

/* Starts etcd with its files under dir (created if missing) and waits for
 * readiness. opts may be NULL (its arrays are copied by reference: they must
 * outlive the fixture). Returns 0, or -errno / TERN_ETIMEOUT with err set. */
int etcd_fixture_start(struct etcd_fixture *f, const char *dir,
                       const struct etcd_fixture_opts *opts, struct tern_err *err);
/* SIGKILLs etcd and reaps it (no-op if not running). */
int etcd_fixture_kill(struct etcd_fixture *f);
/* Starts etcd again on the same ports and data dir and waits for readiness. */
int etcd_fixture_restart(struct etcd_fixture *f, struct tern_err *err);
/* SIGTERM, wait up to 5 s, then SIGKILL; reaps. Safe to call twice. */
void etcd_fixture_stop(struct etcd_fixture *f);

/* A free TCP port on 127.0.0.1 (bind to port 0, read it, close). Returns the
 * port or a negative errno. */
int etcd_fixture_free_port(void);

#endif
