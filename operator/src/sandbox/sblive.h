/* sblive.h - the output of executions while they run, for
 * GET /v1/executions/live (docs/sandbox.md): a long command's output can be
 * followed as it is produced instead of only in the final answer.
 *
 * An execution with an Idempotency-Key registers itself here; the command
 * runner writes every byte of stdout and stderr as it reads it (no cap on
 * what is written: each stream keeps its last TERN_SANDBOX_LIVE_RING bytes,
 * addressed by absolute offsets from the start of the stream), and ends it
 * with the final status. A reader asks for everything after its offsets and
 * gets NDJSON lines:
 *   {"stream":"stdout","offset":N,"data":"..."}   (valid UTF-8; a sequence
 *                                                  cut by a read waits for
 *                                                  its rest)
 *   {"stream":"stderr","skipped":N}               bytes the ring no longer
 *                                                  holds (never dropped silently)
 *   {"done":true,"status":"completed","exitCode":0,"signal":null,
 *    "stdoutBytes":N,"stderrBytes":M}            once, at the end
 * Ended executions stay readable for TERN_SANDBOX_LIVE_KEEP_S seconds (at
 * most TERN_SANDBOX_LIVE_MAX of them).
 *
 * Thread-safe. A struct sblive_exec is reference-counted: begin and find
 * return a reference, sblive_put drops it.
 */
#ifndef TERN_SBLIVE_H
#define TERN_SBLIVE_H

#include "base/buf.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sblive;
struct sblive_exec;

struct sblive *sblive_new(void);
/* Frees the registry and every execution; no reference may be held any
 * more (sandboxd stops serving first). */
void sblive_free(struct sblive *l);

/* Registers a running execution under key (copied); a running one under
 * the same key is replaced (it stays readable through existing references).
 * Returns a reference (never NULL). */
struct sblive_exec *sblive_begin(struct sblive *l, const char *key);
/* Appends n bytes to stream 0 (stdout) or 1 (stderr), waking readers. */
void sblive_write(struct sblive_exec *e, int stream, const char *p, size_t n);
/* Ends the execution with final (borrowed; its status, exitCode and
 * signal members are copied into the done line). */
void sblive_end(struct sblive_exec *e, const cJSON *final);
/* The execution registered under key (a new reference), or NULL when none
 * is running or recently ended. */
struct sblive_exec *sblive_find(struct sblive *l, const char *key);
void sblive_put(struct sblive_exec *e);

/* Appends to out the lines for everything after off[0] (stdout) and off[1]
 * (stderr), at most about max_bytes of data, advancing off; with nothing
 * new, waits up to wait_ms for output or the end. *ret_done: the done line
 * was written (everything has been read). Returns the number of lines
 * written (0 when nothing arrived in time). */
size_t sblive_read(struct sblive_exec *e, uint64_t off[2], size_t max_bytes, long wait_ms,
                   struct buf *out, bool *ret_done);

#endif
