/* session_sim.h - a long session's journal, written the way tern-runner and
 * tern-operator write it, for measuring what the journal costs etcd over
 * thousands of turns (tests/integration/test_journal_size.c and
 * bench/journal_size).
 *
 * Each turn appends what a real turn appends: the operator's user_message,
 * then turn_started, model_request, model_response (one exec_command call),
 * tool_call, tool_result (output_bytes of output), model_request,
 * model_response (the answer) and turn_finished; every event is folded into
 * a struct replay_state with the runner's own replay_apply, and at the start
 * of each turn the runner's compaction is applied exactly as turn.c does it
 * (snapshot_due -> journal_compact with snapshot_encode's state ->
 * journal_drop_before the previous snapshot). Spawning 10,000 runner
 * processes against a scripted model would measure process start-up and
 * the fake model's O(n^2) conversation handling instead; the journal writes
 * are the same calls.
 *
 * Does not depend on the test harness. Returns 0 or a negative code with
 * err set.
 */
#ifndef TERN_SESSION_SIM_H
#define TERN_SESSION_SIM_H

#include "base/err.h"

#include <stddef.h>
#include <stdint.h>

/* What one measurement found. */
struct sim_point {
    int turn;                 /* turns done */
    uint64_t last_seq;        /* the session's last event */
    uint64_t snapshot_seq;    /* its latest snapshot, 0 if none */
    uint64_t snapshots;       /* snapshots written so far */
    size_t keys;              /* keys under the session's prefix now */
    size_t bytes;             /* their key + value bytes */
    size_t max_value;         /* the largest value stored */
    int64_t db_size;          /* etcd's backend size (maintenance status) */
    int64_t db_in_use;        /* of which in use (etcd 3.4+; 0 if not given) */
    int64_t db_in_use_compacted; /* in use after etcd's revision compaction
                                  * (opts.keep_revisions, as the chart's
                                  * auto-compaction does every 5 minutes) */
    double ms_per_turn;       /* wall time per turn since the last point */
    size_t replay_events;     /* events a runner starting now would fold */
    double replay_ms;         /* and how long its open + replay takes */
    size_t state_bytes;       /* the snapshot state's JSON size now */
};

struct sim_opts {
    const char *etcd_url;  /* "http://127.0.0.1:PORT" */
    const char *uid;       /* the session */
    int turns;
    uint64_t snapshot_every; /* TERN_SNAPSHOT_EVENTS; 0 = no compaction */
    size_t output_bytes;   /* tool output per turn (the runner journals at most 32 KiB) */
    int report_every;      /* turns between measurements (0 = only at the end) */
    int64_t keep_revisions; /* > 0: compact etcd to revision - keep_revisions at each
                             * measurement, as --auto-compaction-mode=revision does */
    void (*report)(void *ctx, const struct sim_point *p);
    void *ctx;
};

/* Runs the session; *ret_final (may be NULL) is the measurement after the
 * last turn. Also checks, at each measurement, that a runner replaying the
 * journal from its latest snapshot gets exactly the state the writer holds
 * (TERN_EINVALID otherwise). */
int sim_run(const struct sim_opts *o, struct sim_point *ret_final, struct tern_err *err);

#endif
