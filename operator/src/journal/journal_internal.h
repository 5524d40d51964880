/* journal_internal.h - what the journal's own files share; not part of the
 * journal's interface (that is journal.h), and included only from journal/.
 *
 * The module is split along its seams:
 *   event.c    the event codec (types, decode v1/v0, encode, truncation)
 *   summary.c  the pure summary fold and its JSON
 *   keys.c     the key schema under /tern/v1/s/<uid>/
 *   store.c    the handle: open, exactly-once append, resolve, compaction,
 *              delete
 *   read.c     reading events: chunk reassembly, the paged scan, replay, tail
 *   fork.c     the fork copy (journal_copy_until)
 *   lock.c     the turn lock on a lease
 * Symbols named journal__* are shared between these files only (libuv's uv__
 * convention); everything else a file does not share is static.
 */
#ifndef TERN_JOURNAL_INTERNAL_H
#define TERN_JOURNAL_INTERNAL_H

#include "journal.h"

#include <errno.h>
#include <time.h>

/* One writer's view of one session (journal.h, "the etcd shell"). */
struct journal {
    struct etcd *c;
    char *uid;
    char *prefix; /* /tern/v1/s/<uid>/ */
    char *sum_key;
    struct journal_summary sum;
    int64_t seen; /* mod_revision of sum as last read/written; 0 = absent */
    long retry_ms;
    size_t page;
    /* an append whose outcome is unknown */
    bool unresolved;
    uint64_t pend_seq;
    char *pend_value;
    struct journal_summary pend_sum;
    struct journal_stats stats;
};

/* ---- event.c ----------------------------------------------------------- */

/* True for a valid event type name: 1..64 of [a-z0-9_]. */
bool journal__valid_type_name(const char *s);
/* The current time, RFC 3339 UTC with nanoseconds (newly allocated). */
char *journal__now_time(void);
/* The v1 envelope of ev as a new tree, with data or without it (the head of
 * a chunked event). */
cJSON *journal__event_json(const struct journal_event *ev, bool with_data);
/* Lowercase hex SHA-256 of p[0..n) into out[65] (a chunked event's head
 * carries the hash of its data's JSON text). */
void journal__sha256_hex(const void *p, size_t n, char out[65]);

/* ---- read.c (chunks) ---------------------------------------------------- */

/* Calls fn for each chunk kv of event seq's chunk set id, in key order,
 * reading a few chunks per request (a whole set could exceed what one
 * reply may hold). Stops at fn's first non-zero return (returned). */
int journal__each_chunk(struct etcd *c, const char *prefix, uint64_t seq, const char *id,
                        int (*fn)(void *ctx, const struct etcd_kv *kv), void *ctx,
                        struct tern_err *err);

/* ---- keys.c ------------------------------------------------------------ */

/* True for a session uid: 1..TERN_JOURNAL_MAX_UID of [A-Za-z0-9._-], not "."
 * or "..". */
bool journal__valid_uid(const char *uid);
/* "<prefix>ev/<seq %016x>" (newly allocated). */
char *journal__ev_key(const char *prefix, uint64_t seq);
/* "<prefix>ch/<seq %016x>/<id>/<i %04x>" (newly allocated). */
char *journal__chunk_key(const char *prefix, uint64_t seq, const char *id, unsigned i);
/* The seq of an ev/ key under prefix, or 0 if it is not one. */
uint64_t journal__key_seq(const char *prefix, const char *key);

/* ---- read.c ------------------------------------------------------------ */

/* Reads sum (value + revision) into *s, *rev and *present; an absent sum
 * gives an empty summary, revision 0 and !*present. Returns 0, TERN_EPARSE
 * or etcd errors. */
int journal__read_sum(struct etcd *c, const char *sum_key, struct journal_summary *s, int64_t *rev,
                      bool *present, struct tern_err *err);

/* Per-event visitor used by replay, tail and copy: gets the raw kv too.
 * Both are borrowed for the call; non-zero stops the scan (returned). */
typedef int (*journal__visit_fn)(void *ctx, const struct journal_event *ev,
                                 const struct etcd_kv *kv);

/* Reads the events under prefix from seq `from` (inclusive) up to `upto`
 * (0 = the end) in pages of `page`, decoded and with chunks reassembled,
 * calling visit (may be NULL) for each in seq order. *ret_rev (may be NULL):
 * the header revision of the last page read; *ret_next (may be NULL): the
 * seq after the last visited event. Returns 0, visit's non-zero value,
 * TERN_ECOMPACTED (from is no longer stored), TERN_EINVALID (a gap),
 * TERN_EPARSE or etcd errors. */
int journal__scan(struct etcd *c, const char *prefix, size_t page, uint64_t from, uint64_t upto,
                  journal__visit_fn visit, void *ctx, int64_t *ret_rev, uint64_t *ret_next,
                  struct tern_err *err);

/* ---- small helpers (static inline: each file gets its own) ------------- */

static inline long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Retry policy for calls that may be repeated safely. */
static inline bool transient(int r)
{
    return r == TERN_EUNREACHABLE || r == TERN_ETIMEOUT || r == -EIO;
}

#endif
