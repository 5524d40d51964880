/* egrate.h - at most one refusal Event per session per interval (thread-safe,
 * no I/O).
 *
 * A sandbox that retries a refused connection in a loop must not flood the
 * API server with Events: the first refusal of a key (a session) is reported
 * at once, later ones within interval_ms are counted, and the next report
 * after the interval carries that count ("and 41 more refusals"). At most
 * TERN_EGRESS_MAX_RATE_KEYS keys are tracked; the least recently reported
 * one is forgotten first.
 */
#ifndef TERN_EGRATE_H
#define TERN_EGRATE_H

#include <stdbool.h>
#include <stdint.h>

struct egrate;

struct egrate *egrate_new(int64_t interval_ms);
/* Accepts NULL. */
void egrate_free(struct egrate *r);

/* Whether to report a refusal for key at now_ms (monotonic milliseconds).
 * When true, *ret_suppressed is the number of refusals of key held back
 * since its previous report (and the count restarts). */
bool egrate_allow(struct egrate *r, const char *key, int64_t now_ms, uint64_t *ret_suppressed);

/* Refusals held back so far in total (for a metric). */
uint64_t egrate_suppressed_total(struct egrate *r);

#endif
