/* idem.h - the idempotency record store: what is recorded where.
 *
 * WHERE. Records live on the workspace volume, so they survive a restart of
 * tern-sandboxd and of its pod (the PVC outlives both):
 *
 *   <workspace>/.tern/                     mode 0700, owned by sandboxd's uid
 *   <workspace>/.tern/idem/<H>.json        one record per key, H = lowercase
 *                                          hex SHA-256 of the key bytes
 *   <workspace>/.tern/tmp/                 scratch: record drafts, PUT bodies,
 *                                          restore staging; emptied at startup
 *
 * WHAT. A record is one JSON object:
 *   {"v": 1, "key": "<the Idempotency-Key>", "op": "exec" | "put" | "delete",
 *    "req": "<hex SHA-256 of the request, see below>",
 *    "status": "started" | "completed" | "interrupted",
 *    "startedAt": "RFC 3339 UTC, ms", "finishedAt": "..." (absent while started),
 *    "runs": 1,
 *    "httpStatus": the HTTP status first sent (200 unless a put/delete failed
 *                  after it started),
 *    "response": {the response body as first sent, without "replayed"}}
 * "runs" counts how often the operation was started under this key; a key is
 * never started twice, so it is always 1 (kept so a reader can check that).
 * The request hash is SHA-256 of "exec\n" + the canonical form of the parsed
 * exec request (sbapi_exec_canonical: argv, cwd, env sorted, timeoutMs with
 * the default applied, stdin; so member order and whitespace do not matter),
 * and of "<op>\n" + path + "\n" + query for put and delete (a PUT body is
 * streamed to disk after the decision, so it is not part of the hash).
 *
 * WHEN. idem_begin writes the "started" record before the operation has any
 * effect: the draft is written and fsynced in tmp/, link()ed into idem/ (so
 * the record appears complete or not at all, and exactly one of two racing
 * requests wins), and the directory is fsynced. idem_finish writes the
 * "completed" record the same way with rename() and fsync before the caller
 * sends the HTTP response. idem_recover, run at startup before serving,
 * rewrites every record still "started" as "interrupted": its operation was
 * cut off by a restart and is never run again under that key.
 * idem_withdraw removes a "started" record whose operation is known not to
 * have had any effect: a PUT whose client went away before the whole body
 * arrived (nothing was written; only the staging file existed). A retry
 * under the same key then runs it, instead of finding the key busy until
 * the next restart.
 *
 * KEY RULES. A key is 1..TERN_SANDBOX_MAX_KEY bytes of printable ASCII
 * (0x21..0x7e; the runner sends "<session uid>/<call id>"). A request with a
 * key that has a record is answered from the record ("replayed": true) when
 * its op and request hash match; a mismatch is a client error; a record that
 * is still "started" means the first request is running now (busy).
 *
 * WHO CAN TOUCH IT. The API refuses every path whose first component is
 * ".tern" and, for reads that follow symlinks, anything that resolves into
 * it (wspath.h). Commands: see docs/sandbox.md "What protects what": with
 * sandboxd as root and --run-as, .tern is root-owned 0700 and the workspace
 * root is not writable by the command uid; with sandboxd non-root, Landlock
 * (when the kernel has it) keeps commands from writing outside the writable
 * roots; without either, a command of the same uid could alter records
 * (which only lets it lie to its own runner, as it could by printing).
 *
 * Errors: negative errno values (-EIO, -ENOSPC, ...) from the filesystem,
 * TERN_EPARSE for a corrupt record.
 */
#ifndef TERN_IDEM_H
#define TERN_IDEM_H

#include "base/err.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct idem_store {
    int dirfd; /* .tern/idem */
    int tmpfd; /* .tern/tmp */
    int statefd; /* .tern */
};

/* A started operation: what idem_finish needs. */
struct idem_ticket {
    char hash[65]; /* SHA-256 of the key, hex: the record's file name */
    char started_at[32];
};

/* Lowercase hex SHA-256 of p[0..n) into out[65]. */
void idem_sha256_hex(const void *p, size_t n, char out[65]);

/* Returns 0 when key follows the key rules, else -EINVAL. */
int idem_key_valid(const char *key);

/* Opens (creating, mode 0700) .tern, .tern/idem and .tern/tmp beneath the
 * workspace fd and empties tmp. Returns 0 and fills *s, or a negative errno
 * (-ENOTDIR/-ELOOP when .tern is not a plain directory). */
int idem_open(int wsfd, struct idem_store *s, struct tern_err *err);
void idem_close(struct idem_store *s);

/* Turns every "started" record into "interrupted" (with an interrupted
 * response for its op). Sets *ret_count to how many. Returns 0 or an error. */
int idem_recover(struct idem_store *s, size_t *ret_count, struct tern_err *err);

/* Starts key for op with request hash req. Returns:
 *   0         the key is new: a "started" record is durable; *ret_ticket set
 *   1         a finished record exists and matches: *ret_response is a copy of
 *             its response (caller owns; add "replayed": true and send it)
 *             and *ret_http its HTTP status
 *   -EBUSY    the key's first request is still running
 *   -EEXIST   the key was used with another op or request
 *   other negative errors (I/O, TERN_EPARSE corrupt record). */
int idem_begin(struct idem_store *s, const char *key, const char *op, const char *req,
               struct idem_ticket *ret_ticket, cJSON **ret_response, int *ret_http,
               struct tern_err *err);

/* Makes the record of ticket "completed" with http_status and response (not
 * modified). The record is durable when this returns 0. */
int idem_finish(struct idem_store *s, const struct idem_ticket *t, const char *key,
                const char *op, const char *req, int http_status, const cJSON *response,
                struct tern_err *err);

/* Withdraws the "started" record of ticket t, for an operation that had no
 * effect (docs above). Only a record that is still this ticket's "started"
 * record is removed; the directory is fsynced. Returns 0 (also when the
 * record is gone already) or a negative errno. */
int idem_withdraw(struct idem_store *s, const struct idem_ticket *t, struct tern_err *err);

/* The /v1/executions answer: a new array of {"key","op","status","runs",
 * "startedAt"} sorted by startedAt, at most TERN_SANDBOX_MAX_RECORDS. */
int idem_list(struct idem_store *s, cJSON **ret, struct tern_err *err);

/* Current UTC time as RFC 3339 with milliseconds into out[32]. */
void idem_now_rfc3339(char out[32]);

#endif
