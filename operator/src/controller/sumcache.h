/* sumcache.h - journal summaries read ahead for the reconciles queued next.
 *
 * After a start (or a resync) every session is queued at once, and each
 * reconcile would read its journal summary from etcd with a request of its
 * own: 10,000 parked sessions, 10,000 round trips. Instead a worker that has
 * no summary for its session claims those of the sessions queued behind it,
 * reads them with its own in one request (journal_read_sums) and leaves them
 * here; each is taken once, by that session's reconcile (controller.c,
 * open_journal). A reconcile whose summary is claimed waits for that read
 * rather than making its own, so eight workers do not read the same batch
 * eight times.
 *
 * A summary read ahead is only as good as the summary watch that would tell
 * of a later change: an entry is kept only if every change after its read
 * is still to reach sumcache_changed, which drops it. So a read made at
 * store revision R is refused while the watch is not running, or once the
 * watch has delivered a change later than R (it may have been that
 * session's); the reconcile then reads its own, as without read-ahead.
 * Either way a handle opened from a stale read is fenced at its first
 * append, like any stale journal handle.
 *
 * Bounded: at most max entries read; a put into a full cache first drops
 * them (reads left untaken that long are of sessions deleted or requeued
 * later). Thread-safe; entries are owned here until taken.
 */
#ifndef TERN_SUMCACHE_H
#define TERN_SUMCACHE_H

#include "journal/journal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sumcache;

struct sumcache *sumcache_new(size_t max);
void sumcache_free(struct sumcache *sc);

/* The summary watch delivers every change after revision rev from now on;
 * entries kept before are dropped. */
void sumcache_watch_started(struct sumcache *sc, int64_t rev);
/* The watch ended: entries are dropped and puts refused until it starts. */
void sumcache_watch_stopped(struct sumcache *sc);
/* The watch delivered a change of uid's summary at revision rev. */
void sumcache_changed(struct sumcache *sc, const char *uid, int64_t rev);

/* Claims uid's read: true if this caller is now to read it and must follow
 * with sumcache_put or sumcache_release; false if it is kept or claimed
 * already. */
bool sumcache_claim(struct sumcache *sc, const char *uid);
/* Ends a claim with *r (read at store revision read_rev): kept for uid's
 * next reconcile (true; *r is moved and zeroed) or refused (false; *r is
 * still the caller's). Waiters on the claim wake either way. */
bool sumcache_put(struct sumcache *sc, const char *uid, struct journal_sum_read *r,
                  int64_t read_rev);
/* Ends a claim without a read (it failed). */
void sumcache_release(struct sumcache *sc, const char *uid);
/* Moves uid's entry into *ret and returns true; a claimed one is waited
 * for, at most wait_ms. False: none (the caller reads its own). */
bool sumcache_take(struct sumcache *sc, const char *uid, struct journal_sum_read *ret,
                   long wait_ms);
/* Entries kept (claims not counted). */
size_t sumcache_len(struct sumcache *sc);

#endif
