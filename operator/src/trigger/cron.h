/* cron.h - cron schedules in a time zone (AgentTrigger spec.schedule; the
 * syntax and semantics of a CronJob's schedule and timeZone). Pure.
 *
 * Syntax: five fields "minute hour day-of-month month day-of-week", each a
 * comma list of `*`, `N`, `N-M`, with an optional `/step`; month and weekday
 * names (JAN..DEC, SUN..SAT, any case); weekday 7 = Sunday; `?` = `*` in the
 * day fields; the macros @yearly (@annually), @monthly, @weekly, @daily
 * (@midnight), @hourly. Day of month and day of week both restricted: a day
 * matches either (Vixie cron, CronJob). "TZ=" / "CRON_TZ=" prefixes are
 * refused: the zone is spec.schedule.timeZone.
 *
 * Slots: a schedule matches local wall-clock minutes (labels) of its zone.
 * Each matching label fires once, at its first instant: a label that a
 * fall-back repeats fires in its first occurrence only; labels that a
 * spring-forward skips fire at the first instant after the gap (all of them
 * as one slot), so a daily 02:30 job still runs once on that day.
 *
 * Errors: TERN_EINVALID with the field and reason in err.
 */
#ifndef TERN_TRIGGER_CRON_H
#define TERN_TRIGGER_CRON_H

#include "base/err.h"
#include "budget/tzwin.h"

#include <stdbool.h>
#include <stdint.h>

struct cron {
    uint64_t minute; /* bit n = minute n (0..59) */
    uint32_t hour;   /* 0..23 */
    uint32_t dom;    /* 1..31 */
    uint16_t month;  /* 1..12 */
    uint8_t dow;     /* 0..6, Sunday 0 */
    bool dom_star, dow_star; /* the field was `*` (or `?`) */
};

/* Parses a schedule of at most TERN_CRON_MAX_TEXT bytes. Returns 0 and *ret,
 * or TERN_EINVALID. */
int cron_parse(const char *text, struct cron *ret, struct tern_err *err);

/* The first slot strictly after t (Unix seconds) in zone z. Returns 0 and
 * *ret, or -ENOENT when none falls in the next TERN_CRON_MAX_YEARS years
 * (e.g. "0 0 30 2 *"). */
int cron_next(const struct cron *c, const struct tzwin_zone *z, int64_t t, int64_t *ret);

/* The last slot in (after, now] and how many slots that interval holds
 * (counted up to max_count, then *ret_count = max_count). Returns 0 and
 * both, or -ENOENT when the interval holds none. */
int cron_last_in(const struct cron *c, const struct tzwin_zone *z, int64_t after, int64_t now,
                 int max_count, int64_t *ret_slot, int *ret_count);

#endif
