/* snapshot.h - the runner's agent state as a journal snapshot (pure).
 *
 * A session's journal grows by a few events per model step; over thousands
 * of turns both the replay at every turn start and etcd's keyspace would
 * grow without end. So the runner compacts: at the start of a turn, when
 * at least `every` events were appended since the last snapshot and the
 * state is at a clean boundary (no model request open, every tool call of
 * the last response answered, no deferred user message, no turn half
 * done), it appends a `snapshot` event (journal_compact) whose data.state
 * is snapshot_encode(state), and drops the events before it
 * (journal_drop_before): the journal keeps the latest snapshot and the
 * events since. A runner replays from
 * the latest snapshot (JOURNAL_FROM_SNAPSHOT): snapshot_decode rebuilds
 * the state, then the events after it are folded as usual, so the state
 * (and every request sent to the model) is exactly the one an uncompacted
 * replay from seq 1 would give.
 *
 * data.state (version 1):
 *   {"v": 1, "conv": [{"role": "user|assistant|tool", "content": "..."|null,
 *                      "toolCalls": [{"id","name","arguments"}], "toolCallId"}],
 *    "userMessages", "maxMessageIndex", "objectiveJournaled",
 *    "modelTurns", "toolCalls", "promptTokens", "completionTokens",
 *    "costMicroUSD", "turn", "turnStarted", "turnFinished", "outcome",
 *    "modelSteps", "consecutiveBad", "calls": [{"id","name","arguments",
 *    "status","problem","started","answered","approvalId","decision",
 *    "decisionReason"}], "lastFinal", "lastRefusal", "limitReported",
 *    "limitName", "limitUsed", "limitMax", "lastProblem", "firstTimeMs",
 *    "finalText", "decided": [{"id","decision","reason"}]}
 * Every member of struct replay_state is in it: a field added there must be
 * added here (test_runner_snapshot folds a session with all of them).
 * The conversation is bounded by what one model request may carry
 * (TERN_MODEL_MAX_REQUEST, 8 MiB), so a snapshot always fits an event's
 * data (TERN_JOURNAL_MAX_DATA, 16 MiB; stored in chunks).
 */
#ifndef TERN_RUNNER_SNAPSHOT_H
#define TERN_RUNNER_SNAPSHOT_H

#include "base/err.h"
#include "runner/replay.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#define SNAPSHOT_STATE_VERSION 1

/* A snapshot rewrites the whole conversation, so a long one is snapshotted
 * less often: the interval is at least one event per this many bytes of
 * state. That keeps what snapshots write at about one kilobyte per event
 * appended, and what etcd's revision history holds (the chart keeps 10,000
 * revisions) at a couple of snapshots, however long the conversation. */
#define SNAPSHOT_BYTES_PER_EVENT 1024

/* A cheap estimate of snapshot_encode(s)'s size in bytes (the texts of the
 * conversation plus a fixed overhead per message), without encoding it. */
size_t snapshot_size_estimate(const struct replay_state *s);

/* True when s is at a clean boundary and at least max(every, estimated
 * state size / SNAPSHOT_BYTES_PER_EVENT) events were folded since the
 * snapshot at snapshot_seq (0 = none). every == 0: never. */
bool snapshot_due(const struct replay_state *s, uint64_t snapshot_seq, uint64_t every);

/* The state as data.state (a new tree). Pure. */
cJSON *snapshot_encode(const struct replay_state *s);

/* Rebuilds *ret (initialised here; release with replay_state_done) from a
 * snapshot event's data.state, the snapshot being event seq. Returns 0, or
 * TERN_EPARSE naming what is malformed (ret is then released). Pure. */
int snapshot_decode(const cJSON *state, uint64_t seq, struct replay_state *ret,
                    struct tern_err *err);

#endif
