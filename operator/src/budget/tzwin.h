/* tzwin.h - time zones from the system tz database, and the hour, day and
 * month windows of team budgets in one zone (pure core, one file reader).
 *
 * A zone is parsed from its TZif file (RFC 8536, versions 1 to 4, as in
 * /usr/share/zoneinfo): the transitions between local time types, and the
 * footer's POSIX TZ string ("CET-1CEST,M3.5.0,M10.5.0/3") for instants
 * after the last transition, so the far future is right for the "slim" files
 * that stop listing transitions early. Leap-second zones ("right/...") are
 * refused: budget windows are in POSIX time.
 *
 * A window is the longest stretch of instants around t whose local label is
 * the same: the local date for Day, the local year and month for Month, the
 * local date and hour together with the UTC offset for Hour (so the hour
 * that a fall-back repeats is two windows, and a skipped hour is none). A
 * day is therefore 23 or 25 hours long on DST days and starts at the first
 * instant of its date (01:00 where midnight is skipped). Where a fall-back
 * crosses midnight (Sao Paulo until 2019) a date returns after its window
 * ended; both stretches carry the same key, so their counters add up.
 *
 * Ownership: struct tzwin_zone owns its arrays (tzwin_zone_done). Errors:
 * TERN_EPARSE for a malformed file or TZ string, TERN_ETOOLARGE over a
 * bound of limits.h, TERN_EINVALID for a bad zone name or a leap-second
 * zone, -ENOENT for a zone the database does not have.
 */
#ifndef TERN_BUDGET_TZWIN_H
#define TERN_BUDGET_TZWIN_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A date of a POSIX TZ rule: Jn (1..365, February 29 never counted), n
 * (0..365, counted) or Mm.w.d (weekday d of week w of month m; w 5 = the
 * last), and the local time of day of the change in seconds (may be
 * negative or past 24 h, RFC 8536). */
struct tzwin_date {
    char kind;      /* 'J', 'N' or 'M' */
    int n;          /* J/N: the day */
    int m, w, d;    /* M */
    int32_t time;   /* seconds after local midnight, default 7200 */
};

/* A POSIX TZ string: standard time, and optionally daylight time with the
 * rule that switches between them. Offsets are seconds east of UTC (the TZ
 * string writes them west, with the opposite sign). */
struct tzwin_rule {
    int32_t std_off;
    bool has_dst;
    int32_t dst_off;
    struct tzwin_date start, end; /* to daylight time (at local standard
                                   * time), back to standard (at daylight) */
};

struct tzwin_zone {
    int64_t *trans;    /* transition instants, ascending */
    uint8_t *idx;      /* the type each transition switches to */
    size_t ntrans;
    int32_t *utoff;    /* UTC offset of each local time type */
    size_t ntypes;
    bool has_rule;     /* the footer's TZ string, for t >= the last transition */
    struct tzwin_rule rule;
};

/* Parses a TZif file. Returns 0 and *ret, or TERN_EPARSE / TERN_ETOOLARGE
 * (more than TERN_TZ_MAX_TRANSITIONS transitions or TERN_TZ_MAX_TYPES types)
 * / TERN_EINVALID (leap seconds) with the reason. Pure. */
int tzwin_zone_parse(const unsigned char *data, size_t len, struct tzwin_zone *ret,
                     struct tern_err *err);
/* Parses a POSIX TZ string of len bytes. Returns 0 and *ret or TERN_EPARSE.
 * Pure. */
int tzwin_rule_parse(const char *s, size_t len, struct tzwin_rule *ret);
/* UTC: no transitions, offset 0 (needs no file). */
void tzwin_zone_utc(struct tzwin_zone *ret);
void tzwin_zone_done(struct tzwin_zone *z);

/* The UTC offset at instant t (Unix seconds), in seconds east of UTC. */
int32_t tzwin_offset(const struct tzwin_zone *z, int64_t t);

/* A zone name the database may have: 1..TERN_TZ_MAX_NAME bytes of
 * [A-Za-z0-9_+-] in '/'-separated parts, no empty, "." or ".." part, not
 * starting with '-'. */
bool tzwin_name_valid(const char *name);

/* Reads dir/name (dir NULL = /usr/share/zoneinfo) and parses it. "UTC",
 * "Etc/UTC" and "Z" work without a file. Returns 0 and *ret, TERN_EINVALID
 * (a bad name), -ENOENT (no such zone), or the parse errors (with the file
 * name). */
int tzwin_load(const char *dir, const char *name, struct tzwin_zone *ret, struct tern_err *err);

enum tzwin_period { TZWIN_HOUR = 0, TZWIN_DAY, TZWIN_MONTH };

/* "Hour", "Day", "Month" and back (-EINVAL for anything else). */
const char *tzwin_period_name(enum tzwin_period p);
int tzwin_period_parse(const char *s, enum tzwin_period *ret);

#define TZWIN_KEY_MAX 48
#define TZWIN_TIME_MAX 64

struct tzwin_window {
    int64_t start, end;     /* [start, end) in Unix seconds */
    char key[TZWIN_KEY_MAX]; /* "2026-03-29" (Day), "2026-03" (Month),
                              * "2026-03-29T01+0100" (Hour): a valid etcd
                              * key part, the same for every instant of the
                              * window and different between neighbours */
};

/* The window of period p in zone z that contains t. Returns 0 and *ret, or
 * -ERANGE for an instant outside years 1..9999. Pure. */
int tzwin_window(const struct tzwin_zone *z, enum tzwin_period p, int64_t t,
                 struct tzwin_window *ret);

/* t as local time with its offset, "2026-03-29T03:00:00+02:00" (RFC 3339),
 * into out. Returns out. */
char *tzwin_format(const struct tzwin_zone *z, int64_t t, char out[TZWIN_TIME_MAX]);

/* Civil calendar helpers (proleptic Gregorian, pure). */
int64_t tzwin_days_from_civil(int64_t y, int m, int d);
void tzwin_civil_from_days(int64_t days, int64_t *y, int *m, int *d);

#endif
