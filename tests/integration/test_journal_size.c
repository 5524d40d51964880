/* Integration test: what a long session costs etcd (issue 25, "size
 * limits of the journal"). A session of TERN_SIZE_TURNS turns (default
 * 1,000; `make chaos` runs 10,000) is written the way the runner writes it
 * (tests/support/session_sim.h) against an etcd started with the chart's
 * flags (revision auto-compaction keeping 10,000 revisions, a 4 GiB quota,
 * the default 1.5 MiB request limit), once with the runner's compaction
 * and once without. Checks that the compacted keyspace stays bounded
 * whatever the length (its latest snapshot and the events since),
 * that nothing stored comes near a request etcd would refuse, and that a
 * runner replaying from the latest snapshot gets exactly the writer's
 * state. Prints the figures. The etcd data lives in /dev/shm when it
 * exists: sizes do not depend on fsync, and the run is many times faster. */
#include "harness.h"

#include "../support/etcd_fixture.h"
#include "../support/session_sim.h"

#include "base/limits.h"
#include "base/mem.h"
#include "base/num.h"
#include "runner/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const CHART_FLAGS[] = {"--auto-compaction-mode=revision",
                                          "--auto-compaction-retention=10000",
                                          "--quota-backend-bytes=4294967296", NULL};

static char shm_dir[256];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

/* Removes /dev/shm/tern-size-<pid> directories of runs that are gone (a
 * failed assertion ends the test before its own cleanup). */
static void remove_stale(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int64_t pid;
        if (strncmp(e->d_name, "tern-size-", 10) != 0 ||
            num_parse_range(e->d_name + 10, 1, INT32_MAX, &pid) != 0 ||
            (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
            continue;
        char *p = xasprintf("/dev/shm/%s", e->d_name);
        nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        free(p);
    }
    if (d)
        closedir(d);
}

static void start_etcd(struct etcd_fixture *fx)
{
    const char *dir = th_tmpdir();
    struct stat st;
    remove_stale();
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(shm_dir, sizeof shm_dir, "/dev/shm/tern-size-%d", (int)getpid());
        dir = shm_dir;
    }
    struct etcd_fixture_opts o = {.extra_args = CHART_FLAGS};
    struct tern_err err = {0};
    if (etcd_fixture_start(fx, dir, &o, &err))
        th_fail(__FILE__, __LINE__, "etcd: %s", err.msg);
}

static void stop_etcd(struct etcd_fixture *fx)
{
    etcd_fixture_stop(fx);
    if (shm_dir[0])
        nftw(shm_dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int turns(void)
{
    const char *v = getenv("TERN_SIZE_TURNS");
    int64_t n = 1000;
    if (v && num_parse_range(v, 10, 1000000, &n) != 0)
        th_fail(__FILE__, __LINE__, "TERN_SIZE_TURNS: want 10..1000000");
    return (int)n;
}

static void report(void *ctx, const struct sim_point *p)
{
    printf("    %-5s turn %6d: seq %7llu, %5zu keys, %6.2f MiB stored (largest value %6zu B), "
           "etcd db in use %6.1f MiB, %6.1f after compaction; state %6.1f KiB, replay %5zu "
           "events %6.1f ms, %.2f ms/turn\n",
           (const char *)ctx, p->turn, (unsigned long long)p->last_seq, p->keys,
           p->bytes / 1048576.0, p->max_value, p->db_in_use / 1048576.0,
           p->db_in_use_compacted / 1048576.0, p->state_bytes / 1024.0, p->replay_events,
           p->replay_ms, p->ms_per_turn);
    fflush(stdout);
}

#define EVERY 1000 /* TERN_SNAPSHOT_EVENTS' default */

TEST_T(a_long_session_stays_within_etcd_quotas, 1800)
{
    int n = turns();
    struct etcd_fixture fx;
    start_etcd(&fx);
    struct tern_err err = {0};
    struct sim_point snap = {0}, flat = {0};
    struct sim_opts o = {.etcd_url = fx.url, .uid = "long-compacted", .turns = n,
                         .snapshot_every = EVERY, .output_bytes = 200,
                         .report_every = n >= 5000 ? n / 10 : n / 4, .report = report,
                         .keep_revisions = 10000,
                         .ctx = "snap"};
    if (sim_run(&o, &snap, &err))
        th_fail(__FILE__, __LINE__, "compacted session: %s", err.msg);
    /* the same without compaction, for comparison (a tenth of the turns
     * when the run is long: it grows linearly, the figures say by how much) */
    struct sim_opts f = o;
    f.uid = "long-flat";
    f.snapshot_every = 0;
    f.turns = n > 2000 ? n / 10 : n;
    f.report_every = 0;
    f.ctx = "flat";
    if (sim_run(&f, &flat, &err))
        th_fail(__FILE__, __LINE__, "uncompacted session: %s", err.msg);
    /* 9 events a turn: the latest snapshot and at most one interval since
     * (EVERY events, or one per SNAPSHOT_BYTES_PER_EVENT of state once the
     * conversation is large), whatever n; the uncompacted journal keeps
     * every event */
    size_t chunk_keys = snap.state_bytes / TERN_JOURNAL_CHUNK + 2;
    size_t interval = EVERY > snap.state_bytes / SNAPSHOT_BYTES_PER_EVENT
                          ? EVERY
                          : snap.state_bytes / SNAPSHOT_BYTES_PER_EVENT;
    ASSERT_CMP_INT(snap.snapshots, >=, 1);
    ASSERT_CMP_INT(snap.keys, <=, interval * 11 / 10 + 10 + chunk_keys + 3);
    ASSERT_CMP_INT(snap.replay_events, <=, interval * 11 / 10 + 10);
    ASSERT_CMP_INT(flat.keys, >=, (size_t)f.turns * 9);
    /* nothing near the 1.5 MiB request limit: events up to 512 KiB are one
     * value, larger ones 384 KiB chunks */
    ASSERT_CMP_INT(snap.max_value, <=, TERN_JOURNAL_MAX_EVENT);
    ASSERT_CMP_INT(flat.max_value, <=, TERN_JOURNAL_MAX_EVENT);
    /* the snapshot holds the conversation: it grows with the turns, and
     * what a model request may carry bounds it (8 MiB < 16 MiB of data) */
    ASSERT_CMP_INT(snap.state_bytes, <, TERN_JOURNAL_MAX_DATA);
    ASSERT_CMP_INT(snap.db_in_use, <, 4LL << 30);
    /* with etcd's revision compaction, what etcd holds follows the live
     * keyspace (a small multiple: the history of the last 10,000 revisions,
     * snapshots rewriting the conversation), not the session's length */
    ASSERT_CMP_INT(snap.db_in_use_compacted, <, 48LL << 20);
    printf("    %d turns: compacted %zu keys / %.2f MiB, uncompacted after %d turns %zu keys / "
           "%.2f MiB (%.1f KiB a turn); etcd db in use %.1f MiB after revision compaction\n",
           n, snap.keys, snap.bytes / 1048576.0, f.turns, flat.keys, flat.bytes / 1048576.0,
           flat.bytes / 1024.0 / f.turns, snap.db_in_use_compacted / 1048576.0);
    stop_etcd(&fx);
}
