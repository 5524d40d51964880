/* Unit tests: budget/tzwin (TZif zones, POSIX TZ rules, budget windows).
 *
 * The offsets are checked against glibc's localtime_r over the whole
 * system tz database (every zone, 1800..2200, every transition and both of
 * its sides), and the windows against glibc's local labels; the DST edges
 * (23 and 25 hour days, the repeated and the skipped hour, a skipped
 * midnight, 30-minute shifts) have exact expectations. */
#include "harness.h"

#include "base/mem.h"
#include "budget/tzwin.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ZONEINFO "/usr/share/zoneinfo"

static void load(const char *name, struct tzwin_zone *z)
{
    struct tern_err err = {0};
    int rc = tzwin_load(NULL, name, z, &err);
    if (rc)
        th_fail(__FILE__, __LINE__, "load %s: %d %s", name, rc, err.msg);
}

static int64_t utc(int64_t y, int m, int d, int hh, int mm, int ss)
{
    return tzwin_days_from_civil(y, m, d) * 86400 + hh * 3600 + mm * 60 + ss;
}

TEST(civil_round_trip)
{
    for (int64_t days = -800000; days < 800000; days += 17) {
        int64_t y;
        int m, d;
        tzwin_civil_from_days(days, &y, &m, &d);
        ASSERT_EQ_INT(tzwin_days_from_civil(y, m, d), days);
    }
    ASSERT_EQ_INT(tzwin_days_from_civil(1970, 1, 1), 0);
    ASSERT_EQ_INT(tzwin_days_from_civil(2000, 3, 1), 11017);
    /* against timegm */
    struct tm tm = {.tm_year = 2096 - 1900, .tm_mon = 1, .tm_mday = 29};
    ASSERT_EQ_INT(tzwin_days_from_civil(2096, 2, 29) * 86400, (int64_t)timegm(&tm));
}

TEST(rule_parse)
{
    struct tzwin_rule r;
    ASSERT_EQ_INT(tzwin_rule_parse("CET-1CEST,M3.5.0,M10.5.0/3", 26, &r), 0);
    ASSERT_EQ_INT(r.std_off, 3600);
    ASSERT_TRUE(r.has_dst);
    ASSERT_EQ_INT(r.dst_off, 7200);
    ASSERT_EQ_INT(r.start.kind, 'M');
    ASSERT_EQ_INT(r.start.m, 3);
    ASSERT_EQ_INT(r.start.w, 5);
    ASSERT_EQ_INT(r.start.time, 7200);
    ASSERT_EQ_INT(r.end.time, 3 * 3600);
    const char *s = "<+0545>-5:45";
    ASSERT_EQ_INT(tzwin_rule_parse(s, strlen(s), &r), 0);
    ASSERT_EQ_INT(r.std_off, 5 * 3600 + 45 * 60);
    ASSERT_FALSE(r.has_dst);
    s = "<-03>3<-02>,M3.5.0/-2,M10.5.0/-1"; /* Nuuk: negative times */
    ASSERT_EQ_INT(tzwin_rule_parse(s, strlen(s), &r), 0);
    ASSERT_EQ_INT(r.start.time, -7200);
    s = "EST5EDT,0/0,J365/25"; /* daylight time all year (RFC 8536) */
    ASSERT_EQ_INT(tzwin_rule_parse(s, strlen(s), &r), 0);
    ASSERT_EQ_INT(r.end.time, 25 * 3600);
    ASSERT_EQ_INT(r.start.kind, 'N');
    s = "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0"; /* Lord Howe: half an hour */
    ASSERT_EQ_INT(tzwin_rule_parse(s, strlen(s), &r), 0);
    ASSERT_EQ_INT(r.dst_off - r.std_off, 1800);
    /* malformed */
    const char *bad[] = {"", "C-1", "CET", "CET-1CEST,M3.5.0", "CET-1CEST,M13.5.0,M10.5.0",
                         "CET-1CEST,M3.6.0,M10.5.0", "CET-1CEST,M3.5.7,M10.5.0", "CET-1x",
                         "<+05", "CET-1CEST,J0,J365", "CET-1CEST,M3.5.0/200,M10.5.0", "CET-99"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (tzwin_rule_parse(bad[i], strlen(bad[i]), &r) == 0)
            th_fail(__FILE__, __LINE__, "accepted %s", bad[i]);
}

TEST(names)
{
    ASSERT_TRUE(tzwin_name_valid("Europe/Berlin"));
    ASSERT_TRUE(tzwin_name_valid("America/Argentina/ComodRivadavia"));
    ASSERT_TRUE(tzwin_name_valid("Etc/GMT+5"));
    ASSERT_TRUE(tzwin_name_valid("UTC"));
    const char *bad[] = {"", "/etc/passwd", "../etc/passwd", "Europe/../../etc", "Europe//Berlin",
                         "Europe/Berlin/", "-x", "Europe/Ber lin", "a\\b", "./UTC",
                         "Europe/.."};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (tzwin_name_valid(bad[i]))
            th_fail(__FILE__, __LINE__, "accepted %s", bad[i]);
    char longname[80];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    ASSERT_FALSE(tzwin_name_valid(longname));
    struct tzwin_zone z;
    struct tern_err err = {0};
    ASSERT_EQ_INT(tzwin_load(NULL, "../../etc/passwd", &z, &err), TERN_EINVALID);
    ASSERT_EQ_INT(tzwin_load(NULL, "Mars/Olympus_Mons", &z, &err), -ENOENT);
    ASSERT_CONTAINS(err.msg, "Mars/Olympus_Mons");
    /* UTC needs no file */
    ASSERT_EQ_INT(tzwin_load("/nonexistent", "UTC", &z, &err), 0);
    ASSERT_EQ_INT(tzwin_offset(&z, 1700000000), 0);
    tzwin_zone_done(&z);
}

TEST(parse_errors)
{
    struct tzwin_zone z;
    struct tern_err err = {0};
    unsigned char junk[60] = "TZif";
    ASSERT_EQ_INT(tzwin_zone_parse((const unsigned char *)"nope", 4, &z, &err), TERN_EPARSE);
    ASSERT_EQ_INT(tzwin_zone_parse(junk, sizeof junk, &z, &err), TERN_EPARSE); /* no types */
    /* a truncated real file fails, never reads past the end */
    FILE *f = fopen(ZONEINFO "/Europe/Berlin", "rb");
    if (!f)
        TH_SKIP("no " ZONEINFO);
    unsigned char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ASSERT_EQ_INT(tzwin_zone_parse(buf, n, &z, &err), 0);
    tzwin_zone_done(&z);
    for (size_t cut = 0; cut < n - 1; cut += 7) {
        int rc = tzwin_zone_parse(buf, cut, &z, &err);
        ASSERT_NE_INT(rc, 0);
    }
    /* a leap-second zone is refused */
    if (tzwin_load(NULL, "right/UTC", &z, &err) != -ENOENT) {
        ASSERT_EQ_INT(tzwin_load(NULL, "right/UTC", &z, &err), TERN_EINVALID);
        ASSERT_CONTAINS(err.msg, "leap");
    }
}

/* ---- against glibc --------------------------------------------------------- */

static void set_tz(const char *name)
{
    char v[300];
    snprintf(v, sizeof v, ":" ZONEINFO "/%s", name);
    setenv("TZ", v, 1);
    tzset();
}

static long glibc_off(int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    localtime_r(&tt, &tm);
    return tm.tm_gmtoff;
}

static char *zones[2048];
static size_t nzones;

static int collect_zone(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type != FTW_F || nzones >= sizeof zones / sizeof *zones)
        return 0;
    const char *rel = path + strlen(ZONEINFO) + 1;
    if (!strncmp(rel, "right/", 6) || !strncmp(rel, "posix/", 6) || strchr(rel, '.') ||
        !strcmp(rel, "posixrules") || !strcmp(rel, "Factory") || !strcmp(rel, "localtime"))
        return 0;
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    if (f) {
        size_t got = fread(magic, 1, 4, f);
        fclose(f);
        if (got == 4 && memcmp(magic, "TZif", 4) == 0)
            zones[nzones++] = xstrdup(rel);
    }
    return 0;
}

static void all_zones(void)
{
    if (nzones == 0)
        nftw(ZONEINFO, collect_zone, 16, FTW_PHYS);
    if (nzones < 50)
        TH_SKIP("no system tz database at " ZONEINFO);
}

TEST_T(offsets_match_glibc_everywhere, 240)
{
    all_zones();
    size_t checked = 0;
    for (size_t i = 0; i < nzones; i++) {
        struct tzwin_zone z;
        load(zones[i], &z);
        set_tz(zones[i]);
        /* every transition and its neighbours */
        for (size_t k = 0; k < z.ntrans; k++)
            for (int64_t dt = -1; dt <= 1; dt++) {
                int64_t t = z.trans[k] + dt;
                if (t < utc(1800, 1, 1, 0, 0, 0))
                    continue;
                if (tzwin_offset(&z, t) != glibc_off(t))
                    th_fail(__FILE__, __LINE__, "%s at %lld: %d, glibc %ld", zones[i],
                            (long long)t, tzwin_offset(&z, t), glibc_off(t));
                checked++;
            }
        /* and a grid from 1800 to 2200 (the TZ string's years) */
        for (int64_t t = utc(1800, 1, 1, 0, 0, 0); t < utc(2200, 1, 1, 0, 0, 0);
             t += 9 * 86400 + 3 * 3600 + 17 * 60) {
            if (tzwin_offset(&z, t) != glibc_off(t))
                th_fail(__FILE__, __LINE__, "%s at %lld: %d, glibc %ld", zones[i], (long long)t,
                        tzwin_offset(&z, t), glibc_off(t));
            checked++;
        }
        tzwin_zone_done(&z);
    }
    ASSERT_CMP_INT(checked, >, 1000000);
}

/* glibc's label of t for a period (the local date, month or hour+offset) */
static void glibc_label(enum tzwin_period p, int64_t t, char out[64])
{
    time_t tt = (time_t)t;
    struct tm tm;
    localtime_r(&tt, &tm);
    if (p == TZWIN_MONTH)
        snprintf(out, 64, "%04d-%02d", tm.tm_year + 1900, tm.tm_mon + 1);
    else if (p == TZWIN_DAY)
        snprintf(out, 64, "%04d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
    else
        snprintf(out, 64, "%04d-%02d-%02dT%02d%c%02ld%02ld", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_gmtoff < 0 ? '-' : '+',
                 labs(tm.tm_gmtoff) / 3600, labs(tm.tm_gmtoff) / 60 % 60);
}

static void check_window(const struct tzwin_zone *z, const char *zone, enum tzwin_period p,
                         int64_t t)
{
    struct tzwin_window w;
    char at[64], l[64];
    ASSERT_EQ_INT(tzwin_window(z, p, t, &w), 0);
    glibc_label(p, t, at);
    if (strcmp(at, w.key) != 0)
        th_fail(__FILE__, __LINE__, "%s %s at %lld: key %s, glibc %s", zone,
                tzwin_period_name(p), (long long)t, w.key, at);
    if (!(w.start <= t && t < w.end))
        th_fail(__FILE__, __LINE__, "%s at %lld: window [%lld, %lld)", zone, (long long)t,
                (long long)w.start, (long long)w.end);
    /* the label holds from start to end - 1 and differs just outside */
    int64_t probes[] = {w.start, w.end - 1, w.start + (w.end - w.start) / 2,
                        w.start + (w.end - w.start) / 3};
    for (size_t i = 0; i < sizeof probes / sizeof *probes; i++) {
        glibc_label(p, probes[i], l);
        if (strcmp(l, at) != 0)
            th_fail(__FILE__, __LINE__, "%s at %lld: %lld inside [%lld, %lld) is %s, not %s",
                    zone, (long long)t, (long long)probes[i], (long long)w.start,
                    (long long)w.end, l, at);
    }
    glibc_label(p, w.start - 1, l);
    if (strcmp(l, at) == 0)
        th_fail(__FILE__, __LINE__, "%s at %lld: the window starts later than %lld", zone,
                (long long)t, (long long)w.start);
    glibc_label(p, w.end, l);
    if (strcmp(l, at) == 0)
        th_fail(__FILE__, __LINE__, "%s at %lld: the window ends after %lld", zone,
                (long long)t, (long long)w.end);
    /* length, in the years of today's rules (history has 2 h and 47 h
     * days: Casey 2010, Ust-Nera 1981) */
    int64_t len = w.end - w.start;
    bool ok = t < utc(2030, 1, 1, 0, 0, 0) ||
              (p == TZWIN_DAY     ? len >= 22 * 3600 && len <= 26 * 3600
               : p == TZWIN_MONTH ? len >= 27 * 86400 && len <= 32 * 86400
                                  : len > 0 && len <= 2 * 3600);
    if (!ok)
        th_fail(__FILE__, __LINE__, "%s %s at %lld: [%lld, %lld) is %lld s long", zone,
                tzwin_period_name(p), (long long)t, (long long)w.start, (long long)w.end,
                (long long)len);
}

TEST_T(windows_match_glibc_labels, 240)
{
    all_zones();
    /* every zone around every change of offset from 2000 to 2060 (the
     * file's and the rule's), the zones with odd histories from 1900 to
     * 2100, for the three periods */
    static const char *const odd[] = {"America/Sao_Paulo", "America/Santiago", "Pacific/Apia",
                                      "Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Chatham",
                                      "America/Havana", "Asia/Beirut", "Africa/Casablanca",
                                      "Antarctica/Casey", "Asia/Ust-Nera", "America/St_Johns",
                                      "Europe/Dublin", "Pacific/Kiritimati", "America/Nuuk",
                                      "Antarctica/Troll", "Europe/Moscow", "Asia/Tehran"};
    for (size_t i = 0; i < nzones; i++) {
        struct tzwin_zone z;
        load(zones[i], &z);
        set_tz(zones[i]);
        bool full = false;
        for (size_t k = 0; k < sizeof odd / sizeof *odd; k++)
            full = full || strcmp(odd[k], zones[i]) == 0;
        int64_t from = utc(full ? 1900 : 2000, 1, 3, 0, 0, 0);
        int64_t to = utc(full ? 2100 : 2060, 1, 1, 0, 0, 0);
        int64_t t = from;
        for (int guard = 0; guard < 4000 && t < to; guard++) {
            /* the next change of offset, found by glibc's view */
            int64_t next = t + 86400 * 61 + 3 * 3600 + 7 * 60;
            for (size_t k = 0; k < z.ntrans; k++)
                if (z.trans[k] > t && z.trans[k] < next)
                    next = z.trans[k];
            static const int64_t around[] = {-3601, -1, 0, 1799};
            for (size_t di = 0; di < sizeof around / sizeof *around; di++)
                for (int p = TZWIN_HOUR; p <= TZWIN_MONTH; p++)
                    check_window(&z, zones[i], (enum tzwin_period)p, next + around[di]);
            t = next + 1;
            if (t > utc(2040, 1, 1, 0, 0, 0))
                t += 86400 * 150; /* sparser in the rule's years */
        }
        tzwin_zone_done(&z);
    }
}

TEST_T(windows_at_rule_changes, 120)
{
    /* past the files' transitions the footer's rule makes the changes:
     * find them with glibc (hourly) and check the windows around each */
    static const char *const zs[] = {"Europe/Berlin", "America/New_York", "Australia/Sydney",
                                     "Australia/Lord_Howe", "America/Santiago", "Pacific/Chatham",
                                     "America/Havana", "America/Nuuk", "Asia/Tehran",
                                     "America/St_Johns", "Europe/Dublin", "Antarctica/Troll"};
    size_t changes = 0;
    for (size_t i = 0; i < sizeof zs / sizeof *zs; i++) {
        struct tzwin_zone z;
        if (tzwin_load(NULL, zs[i], &z, NULL) != 0)
            continue;
        set_tz(zs[i]);
        long prev = glibc_off(utc(2045, 1, 1, 0, 0, 0));
        for (int64_t t = utc(2045, 1, 1, 0, 0, 0); t < utc(2049, 1, 1, 0, 0, 0); t += 1800) {
            long o = glibc_off(t);
            if (o == prev)
                continue;
            prev = o;
            changes++;
            static const int64_t around[] = {-3601, -1801, -1, 0, 1, 1799, 3600, 86399};
            for (size_t k = 0; k < sizeof around / sizeof *around; k++)
                for (int p = TZWIN_HOUR; p <= TZWIN_MONTH; p++)
                    check_window(&z, zs[i], (enum tzwin_period)p, t + around[k]);
        }
        tzwin_zone_done(&z);
    }
    ASSERT_CMP_INT(changes, >=, 60);
}

/* ---- exact DST edges ------------------------------------------------------- */

static void window_at(const char *zone, enum tzwin_period p, int64_t t, struct tzwin_window *w)
{
    struct tzwin_zone z;
    load(zone, &z);
    ASSERT_EQ_INT(tzwin_window(&z, p, t, w), 0);
    tzwin_zone_done(&z);
}

TEST(berlin_days_and_hours)
{
    struct tzwin_window w;
    /* spring forward 2026-03-29 02:00 -> 03:00: a 23 hour day */
    window_at("Europe/Berlin", TZWIN_DAY, utc(2026, 3, 29, 12, 0, 0), &w);
    ASSERT_EQ_STR(w.key, "2026-03-29");
    ASSERT_EQ_INT(w.start, utc(2026, 3, 28, 23, 0, 0));
    ASSERT_EQ_INT(w.end - w.start, 23 * 3600);
    /* fall back 2026-10-25 03:00 -> 02:00: a 25 hour day */
    window_at("Europe/Berlin", TZWIN_DAY, utc(2026, 10, 25, 12, 0, 0), &w);
    ASSERT_EQ_STR(w.key, "2026-10-25");
    ASSERT_EQ_INT(w.end - w.start, 25 * 3600);
    /* the repeated hour 02:00-03:00 is two windows */
    window_at("Europe/Berlin", TZWIN_HOUR, utc(2026, 10, 25, 0, 30, 0), &w);
    ASSERT_EQ_STR(w.key, "2026-10-25T02+0200");
    ASSERT_EQ_INT(w.start, utc(2026, 10, 25, 0, 0, 0));
    ASSERT_EQ_INT(w.end, utc(2026, 10, 25, 1, 0, 0));
    window_at("Europe/Berlin", TZWIN_HOUR, utc(2026, 10, 25, 1, 30, 0), &w);
    ASSERT_EQ_STR(w.key, "2026-10-25T02+0100");
    ASSERT_EQ_INT(w.start, utc(2026, 10, 25, 1, 0, 0));
    /* the skipped hour is none: 01:00 is followed by 03:00 */
    window_at("Europe/Berlin", TZWIN_HOUR, utc(2026, 3, 29, 0, 59, 59), &w);
    ASSERT_EQ_STR(w.key, "2026-03-29T01+0100");
    ASSERT_EQ_INT(w.end, utc(2026, 3, 29, 1, 0, 0));
    window_at("Europe/Berlin", TZWIN_HOUR, utc(2026, 3, 29, 1, 0, 0), &w);
    ASSERT_EQ_STR(w.key, "2026-03-29T03+0200");
    /* a month across the change */
    window_at("Europe/Berlin", TZWIN_MONTH, utc(2026, 3, 15, 0, 0, 0), &w);
    ASSERT_EQ_STR(w.key, "2026-03");
    ASSERT_EQ_INT(w.start, utc(2026, 2, 28, 23, 0, 0));
    ASSERT_EQ_INT(w.end, utc(2026, 3, 31, 22, 0, 0));
    /* far beyond the file's transitions: the footer's rule */
    window_at("Europe/Berlin", TZWIN_DAY, utc(2093, 3, 29, 12, 0, 0), &w);
    ASSERT_EQ_STR(w.key, "2093-03-29");
    ASSERT_EQ_INT(w.end - w.start, 23 * 3600);
}

TEST(skipped_midnight_and_half_hours)
{
    struct tzwin_window w;
    /* Chile: 2025-09-06 24:00 (-04) -> 2025-09-07 01:00 (-03): Sunday
     * starts at 01:00 */
    window_at("America/Santiago", TZWIN_DAY, utc(2025, 9, 7, 15, 0, 0), &w);
    ASSERT_EQ_STR(w.key, "2025-09-07");
    ASSERT_EQ_INT(w.start, utc(2025, 9, 7, 4, 0, 0));
    ASSERT_EQ_INT(w.end - w.start, 23 * 3600);
    /* Lord Howe: 02:00 -> 02:30 on 2025-10-05; hours at local :00 */
    window_at("Australia/Lord_Howe", TZWIN_HOUR, utc(2025, 10, 4, 15, 40, 0), &w);
    ASSERT_EQ_STR(w.key, "2025-10-05T02+1100");
    ASSERT_EQ_INT(w.end - w.start, 1800);
    window_at("Australia/Lord_Howe", TZWIN_DAY, utc(2025, 10, 5, 6, 0, 0), &w);
    ASSERT_EQ_INT(w.end - w.start, 23 * 3600 + 1800);
    /* Kathmandu +05:45: a day starts at 18:15 UTC */
    window_at("Asia/Kathmandu", TZWIN_DAY, utc(2026, 1, 10, 12, 0, 0), &w);
    ASSERT_EQ_INT(w.start, utc(2026, 1, 9, 18, 15, 0));
    ASSERT_EQ_STR(w.key, "2026-01-10");
    /* UTC and a period name round trip */
    struct tzwin_zone z;
    tzwin_zone_utc(&z);
    ASSERT_EQ_INT(tzwin_window(&z, TZWIN_MONTH, utc(2024, 2, 10, 0, 0, 0), &w), 0);
    ASSERT_EQ_INT(w.end - w.start, 29 * 86400);
    ASSERT_EQ_INT(tzwin_window(&z, TZWIN_DAY, -62135596800LL, &w), -ERANGE);
    char buf[TZWIN_TIME_MAX];
    ASSERT_EQ_STR(tzwin_format(&z, 0, buf), "1970-01-01T00:00:00Z");
    tzwin_zone_done(&z);
    load("Europe/Berlin", &z);
    ASSERT_EQ_STR(tzwin_format(&z, utc(2026, 7, 1, 10, 0, 0), buf), "2026-07-01T12:00:00+02:00");
    tzwin_zone_done(&z);
    enum tzwin_period p;
    ASSERT_EQ_INT(tzwin_period_parse("Month", &p), 0);
    ASSERT_EQ_INT(p, TZWIN_MONTH);
    ASSERT_EQ_STR(tzwin_period_name(TZWIN_HOUR), "Hour");
    ASSERT_EQ_INT(tzwin_period_parse("day", &p), -EINVAL);
}
