/* Unit tests for trigger/cron: the CronJob schedule syntax, slots in a time
 * zone across DST changes (Europe/Berlin 2026: spring forward March 29 at
 * 01:00 UTC, fall back October 25 at 01:00 UTC), never-matching schedules
 * and missed slots after downtime. Times are written as UTC text. */
#include "harness.h"

#include "base/err.h"
#include "trigger/cron.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* digits of s[i..i+n) as a number (test input, fixed positions) */
static int digits(const char *s, int i, int n)
{
    int v = 0;
    for (int k = 0; k < n; k++) {
        if (s[i + k] < '0' || s[i + k] > '9')
            th_fail(__FILE__, __LINE__, "bad time %s", s);
        v = v * 10 + (s[i + k] - '0');
    }
    return v;
}

/* "2026-03-29T01:00" (UTC) -> Unix seconds */
static int64_t utc(const char *s)
{
    if (strlen(s) != 16)
        th_fail(__FILE__, __LINE__, "bad time %s", s);
    return tzwin_days_from_civil(digits(s, 0, 4), digits(s, 5, 2), digits(s, 8, 2)) * 86400 +
           digits(s, 11, 2) * 3600 + digits(s, 14, 2) * 60;
}

static void zone(const char *name, struct tzwin_zone *z)
{
    struct tern_err e = {0};
    if (tzwin_load(NULL, name, z, &e))
        th_fail(__FILE__, __LINE__, "zone %s: %s", name, e.msg);
}

static struct cron parse(const char *s)
{
    struct cron c;
    struct tern_err e = {0};
    if (cron_parse(s, &c, &e))
        th_fail(__FILE__, __LINE__, "cron %s: %s", s, e.msg);
    return c;
}

static int64_t next(const char *expr, const struct tzwin_zone *z, const char *from)
{
    struct cron c = parse(expr);
    int64_t u = 0;
    if (cron_next(&c, z, utc(from), &u))
        th_fail(__FILE__, __LINE__, "%s after %s: no slot", expr, from);
    return u;
}

TEST(cron_syntax_errors)
{
    struct cron c;
    struct tern_err e = {0};
    const char *bad[] = {"* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *",
                         "* * * 13 *", "* * * * 8", "*/0 * * * *", "5-1 * * * *", "a * * * *",
                         "1,,2 * * * *", "1, * * * *", "@every 5m", "", "* * * JANX *"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (cron_parse(bad[i], &c, &e) != TERN_EINVALID)
            th_fail(__FILE__, __LINE__, "accepted \"%s\"", bad[i]);
        ASSERT_CONTAINS(e.msg, "spec.schedule.cron");
    }
    ASSERT_EQ_INT(cron_parse("TZ=Europe/Berlin 0 9 * * *", &c, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "timeZone");
    ASSERT_EQ_INT(cron_parse("CRON_TZ=UTC 0 9 * * *", &c, &e), TERN_EINVALID);
    ASSERT_OK(cron_parse("0 9 * jan-mar,DEC MON-fri", &c, &e));
    ASSERT_EQ_INT(c.month, (1u << 1) | (1u << 2) | (1u << 3) | (1u << 12));
    ASSERT_EQ_INT(c.dow, 0x3e);
    ASSERT_OK(cron_parse("0 0 * * 7", &c, &e)); /* 7 = Sunday */
    ASSERT_EQ_INT(c.dow, 1);
    ASSERT_OK(cron_parse("5/20 * ? * *", &c, &e));
    ASSERT_EQ_INT(c.minute, (1ull << 5) | (1ull << 25) | (1ull << 45));
    ASSERT_TRUE(c.dom_star);
    ASSERT_OK(cron_parse("@Daily", &c, &e));
}

TEST(cron_next_in_utc)
{
    struct tzwin_zone z;
    tzwin_zone_utc(&z);
    ASSERT_EQ_INT(next("*/15 * * * *", &z, "2026-05-01T00:07"), utc("2026-05-01T00:15"));
    ASSERT_EQ_INT(next("*/15 * * * *", &z, "2026-05-01T00:15"), utc("2026-05-01T00:30"));
    ASSERT_EQ_INT(next("0 0 1 * *", &z, "2026-12-31T12:00"), utc("2027-01-01T00:00"));
    ASSERT_EQ_INT(next("0 12 29 2 *", &z, "2026-03-01T00:00"), utc("2028-02-29T12:00"));
    /* day of month and day of week both restricted: either (2026-11-13 is a
     * Friday; the Friday before is the 6th) */
    ASSERT_EQ_INT(next("0 0 13 * 5", &z, "2026-11-01T00:00"), utc("2026-11-06T00:00"));
    ASSERT_EQ_INT(next("0 0 13 * 5", &z, "2026-11-06T00:00"), utc("2026-11-13T00:00"));
    /* a stepped day of month is a restriction too (CronJob's parser): odd
     * days (1-31 step 2) or Mondays; Nov 2 is a Monday, Nov 3 odd */
    ASSERT_EQ_INT(next("0 0 */2 * 1", &z, "2026-11-01T00:00"), utc("2026-11-02T00:00"));
    ASSERT_EQ_INT(next("0 0 */2 * 1", &z, "2026-11-02T00:00"), utc("2026-11-03T00:00"));
    /* one of them a star: the other decides */
    ASSERT_EQ_INT(next("0 0 * * 1", &z, "2026-11-02T00:00"), utc("2026-11-09T00:00"));
    struct cron c = parse("0 0 30 2 *");
    int64_t u;
    ASSERT_EQ_INT(cron_next(&c, &z, utc("2026-01-01T00:00"), &u), -ENOENT);
    tzwin_zone_done(&z);
}

TEST(cron_zone_offsets)
{
    struct tzwin_zone z;
    zone("America/New_York", &z);
    /* 09:00 EST = 14:00 UTC in January, 09:00 EDT = 13:00 UTC in July */
    ASSERT_EQ_INT(next("0 9 * * *", &z, "2026-01-10T00:00"), utc("2026-01-10T14:00"));
    ASSERT_EQ_INT(next("0 9 * * *", &z, "2026-07-10T00:00"), utc("2026-07-10T13:00"));
    tzwin_zone_done(&z);
}

TEST(cron_spring_forward_runs_skipped_labels_once_after_the_gap)
{
    struct tzwin_zone z;
    zone("Europe/Berlin", &z);
    /* 02:30 does not exist on March 29: the job runs at 03:00 CEST = 01:00 UTC */
    ASSERT_EQ_INT(next("30 2 * * *", &z, "2026-03-28T12:00"), utc("2026-03-29T01:00"));
    ASSERT_EQ_INT(next("30 2 * * *", &z, "2026-03-29T01:00"), utc("2026-03-30T00:30"));
    /* every 15 minutes: 02:00..02:45 and 03:00 are one slot at the gap's end */
    ASSERT_EQ_INT(next("*/15 * * * *", &z, "2026-03-29T00:45"), utc("2026-03-29T01:00"));
    ASSERT_EQ_INT(next("*/15 * * * *", &z, "2026-03-29T01:00"), utc("2026-03-29T01:15"));
    /* the day before and after keep their local time */
    ASSERT_EQ_INT(next("0 9 * * *", &z, "2026-03-28T00:00"), utc("2026-03-28T08:00"));
    ASSERT_EQ_INT(next("0 9 * * *", &z, "2026-03-29T00:00"), utc("2026-03-29T07:00"));
    tzwin_zone_done(&z);
}

TEST(cron_fall_back_runs_a_repeated_label_once)
{
    struct tzwin_zone z;
    zone("Europe/Berlin", &z);
    /* 02:30 occurs at 00:30 UTC (CEST) and 01:30 UTC (CET): only the first */
    ASSERT_EQ_INT(next("30 2 * * *", &z, "2026-10-24T12:00"), utc("2026-10-25T00:30"));
    ASSERT_EQ_INT(next("30 2 * * *", &z, "2026-10-25T00:30"), utc("2026-10-26T01:30"));
    /* hourly: 02:00 CEST (00:00 UTC) fires, 02:00 CET (01:00 UTC) does not */
    ASSERT_EQ_INT(next("0 * * * *", &z, "2026-10-24T23:30"), utc("2026-10-25T00:00"));
    ASSERT_EQ_INT(next("0 * * * *", &z, "2026-10-25T00:00"), utc("2026-10-25T02:00"));
    tzwin_zone_done(&z);
}

TEST(cron_missed_slots_after_downtime)
{
    struct tzwin_zone z;
    tzwin_zone_utc(&z);
    struct cron c = parse("0 6 * * *");
    int64_t slot = 0;
    int n = 0;
    /* down from Monday 05:00 until Thursday 07:00: Mon, Tue, Wed, Thu 06:00 */
    ASSERT_OK(cron_last_in(&c, &z, utc("2026-06-01T05:00"), utc("2026-06-04T07:00"), 100, &slot,
                           &n));
    ASSERT_EQ_INT(n, 4);
    ASSERT_EQ_INT(slot, utc("2026-06-04T06:00"));
    /* nothing due yet */
    ASSERT_EQ_INT(cron_last_in(&c, &z, utc("2026-06-04T06:00"), utc("2026-06-04T07:00"), 100,
                               &slot, &n),
                  -ENOENT);
    /* a year of every-minute slots: counting stops at the bound, the last
     * slot is still exact */
    struct cron m = parse("* * * * *");
    ASSERT_OK(cron_last_in(&m, &z, utc("2025-06-04T07:00"), utc("2026-06-04T07:00") + 30, 100,
                           &slot, &n));
    ASSERT_EQ_INT(n, 100);
    ASSERT_EQ_INT(slot, utc("2026-06-04T07:00"));
    tzwin_zone_done(&z);
}
