/* tzwin.c - TZif zones, POSIX TZ rules and budget windows. See tzwin.h. */
#include "budget/tzwin.h"

#include "base/limits.h"
#include "base/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TZ_MAX_OFF 93599               /* RFC 8536: |utoff| below 26 h */
#define TZ_MIN_T   (-62135596800LL)    /* 0001-01-01T00:00:00Z */
#define TZ_MAX_T   (253402300799LL)    /* 9999-12-31T23:59:59Z */

/* ---- civil calendar ------------------------------------------------------ */

int64_t tzwin_days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

void tzwin_civil_from_days(int64_t z, int64_t *ry, int *rm, int *rd)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = yoe + era * 400;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int d = (int)(doy - (153 * mp + 2) / 5 + 1);
    int m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *ry = y + (m <= 2);
    *rm = m;
    *rd = d;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static bool leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int month_days(int64_t y, int m)
{
    static const int md[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && leap(y) ? 29 : md[m - 1];
}

/* ---- POSIX TZ strings ------------------------------------------------------ */

struct scan {
    const char *s;
    size_t len, i;
};

static int peek(const struct scan *sc)
{
    return sc->i < sc->len ? (unsigned char)sc->s[sc->i] : -1;
}

static bool is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static bool is_alpha(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* digits into *ret, at most max (and at most 3 digits) */
static int scan_num(struct scan *sc, int max, int *ret)
{
    int v = 0, n = 0;
    while (is_digit(peek(sc)) && n < 4) {
        v = v * 10 + (peek(sc) - '0');
        sc->i++;
        n++;
    }
    if (n == 0 || v > max)
        return -1;
    *ret = v;
    return 0;
}

static int scan_name(struct scan *sc)
{
    size_t n = 0;
    if (peek(sc) == '<') {
        sc->i++;
        while (peek(sc) != '>') {
            int c = peek(sc);
            if (!(is_alpha(c) || is_digit(c) || c == '+' || c == '-'))
                return -1;
            sc->i++;
            n++;
        }
        sc->i++;
    } else {
        while (is_alpha(peek(sc))) {
            sc->i++;
            n++;
        }
    }
    return n >= 3 ? 0 : -1;
}

/* [+-]hh[:mm[:ss]] in seconds, hh up to max_h */
static int scan_hms(struct scan *sc, int max_h, int32_t *ret)
{
    int sign = 1, h, m = 0, s = 0;
    if (peek(sc) == '+' || peek(sc) == '-') {
        sign = peek(sc) == '-' ? -1 : 1;
        sc->i++;
    }
    if (scan_num(sc, max_h, &h))
        return -1;
    if (peek(sc) == ':') {
        sc->i++;
        if (scan_num(sc, 59, &m))
            return -1;
        if (peek(sc) == ':') {
            sc->i++;
            if (scan_num(sc, 59, &s))
                return -1;
        }
    }
    *ret = sign * (h * 3600 + m * 60 + s);
    return 0;
}

static int scan_date(struct scan *sc, struct tzwin_date *d)
{
    memset(d, 0, sizeof *d);
    if (peek(sc) == 'J') {
        sc->i++;
        d->kind = 'J';
        if (scan_num(sc, 365, &d->n) || d->n < 1)
            return -1;
    } else if (peek(sc) == 'M') {
        sc->i++;
        d->kind = 'M';
        if (scan_num(sc, 12, &d->m) || d->m < 1 || peek(sc) != '.')
            return -1;
        sc->i++;
        if (scan_num(sc, 5, &d->w) || d->w < 1 || peek(sc) != '.')
            return -1;
        sc->i++;
        if (scan_num(sc, 6, &d->d))
            return -1;
    } else {
        d->kind = 'N';
        if (scan_num(sc, 365, &d->n))
            return -1;
    }
    d->time = 7200;
    if (peek(sc) == '/') {
        sc->i++;
        if (scan_hms(sc, 167, &d->time))
            return -1;
    }
    return 0;
}

int tzwin_rule_parse(const char *s, size_t len, struct tzwin_rule *ret)
{
    struct scan sc = {s, len, 0};
    struct tzwin_rule r = {0};
    int32_t off;
    if (scan_name(&sc) || scan_hms(&sc, 167, &off))
        return TERN_EPARSE;
    r.std_off = -off;
    if (sc.i < sc.len) {
        r.has_dst = true;
        if (scan_name(&sc))
            return TERN_EPARSE;
        r.dst_off = r.std_off + 3600;
        int c = peek(&sc);
        if (c == '+' || c == '-' || is_digit(c)) {
            if (scan_hms(&sc, 167, &off))
                return TERN_EPARSE;
            r.dst_off = -off;
        }
        if (peek(&sc) == ',') {
            sc.i++;
            if (scan_date(&sc, &r.start) || peek(&sc) != ',')
                return TERN_EPARSE;
            sc.i++;
            if (scan_date(&sc, &r.end))
                return TERN_EPARSE;
        } else {
            /* POSIX leaves the default to the implementation: the US rule */
            r.start = (struct tzwin_date){.kind = 'M', .m = 3, .w = 2, .d = 0, .time = 7200};
            r.end = (struct tzwin_date){.kind = 'M', .m = 11, .w = 1, .d = 0, .time = 7200};
        }
    }
    if (sc.i != sc.len || r.std_off < -TZ_MAX_OFF || r.std_off > TZ_MAX_OFF ||
        r.dst_off < -TZ_MAX_OFF || r.dst_off > TZ_MAX_OFF)
        return TERN_EPARSE;
    *ret = r;
    return 0;
}

/* The day (days since the epoch) a rule date falls on in year y. */
static int64_t rule_day(const struct tzwin_date *d, int64_t y)
{
    int64_t jan1 = tzwin_days_from_civil(y, 1, 1);
    if (d->kind == 'J')
        return jan1 + d->n - 1 + (leap(y) && d->n >= 60);
    if (d->kind == 'N')
        return jan1 + d->n;
    int64_t first = tzwin_days_from_civil(y, d->m, 1);
    int wd = (int)((first % 7 + 7 + 4) % 7); /* 1970-01-01 was a Thursday */
    int64_t day = first + (d->d - wd + 7) % 7 + (int64_t)(d->w - 1) * 7;
    while (day >= first + month_days(y, d->m))
        day -= 7;
    return day;
}

static int64_t rule_start(const struct tzwin_rule *r, int64_t y)
{
    return rule_day(&r->start, y) * 86400 + r->start.time - r->std_off;
}

static int64_t rule_end(const struct tzwin_rule *r, int64_t y)
{
    return rule_day(&r->end, y) * 86400 + r->end.time - r->dst_off;
}

static int64_t utc_year(int64_t t)
{
    int64_t y;
    int m, d;
    tzwin_civil_from_days(floor_div(t, 86400), &y, &m, &d);
    return y;
}

/* Daylight time runs from each year's start to that year's end, or to the
 * next year's end when the end comes first in the year (south). */
static int32_t rule_offset(const struct tzwin_rule *r, int64_t t)
{
    if (!r->has_dst)
        return r->std_off;
    int64_t y0 = utc_year(t);
    for (int64_t y = y0 - 1; y <= y0 + 1; y++) {
        int64_t s = rule_start(r, y), e = rule_end(r, y);
        if (e <= s)
            e = rule_end(r, y + 1);
        if (s <= t && t < e)
            return r->dst_off;
    }
    return r->std_off;
}

/* ---- TZif -------------------------------------------------------------------- */

void tzwin_zone_done(struct tzwin_zone *z)
{
    if (!z)
        return;
    free(z->trans);
    free(z->idx);
    free(z->utoff);
    memset(z, 0, sizeof *z);
}

void tzwin_zone_utc(struct tzwin_zone *ret)
{
    memset(ret, 0, sizeof *ret);
    ret->utoff = xcalloc(1, sizeof *ret->utoff);
    ret->ntypes = 1;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

struct tzhead {
    int version; /* 0, 2, 3, 4 */
    uint32_t isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt;
};

static int read_head(const unsigned char *p, size_t len, struct tzhead *h, struct tern_err *err)
{
    if (len < 44 || memcmp(p, "TZif", 4) != 0)
        return err_set(err, TERN_EPARSE, "not a TZif file");
    h->version = p[4] == 0 ? 0 : p[4] >= '2' && p[4] <= '9' ? p[4] - '0' : -1;
    if (h->version < 0)
        return err_set(err, TERN_EPARSE, "TZif: unknown version byte 0x%02x", p[4]);
    h->isutcnt = be32(p + 20);
    h->isstdcnt = be32(p + 24);
    h->leapcnt = be32(p + 28);
    h->timecnt = be32(p + 32);
    h->typecnt = be32(p + 36);
    h->charcnt = be32(p + 40);
    if (h->timecnt > TERN_TZ_MAX_TRANSITIONS || h->typecnt > TERN_TZ_MAX_TYPES ||
        h->charcnt > 65536 || h->leapcnt > 65536)
        return err_set(err, TERN_ETOOLARGE, "TZif: %u transitions, %u types (at most %d, %d)",
                       h->timecnt, h->typecnt, TERN_TZ_MAX_TRANSITIONS, TERN_TZ_MAX_TYPES);
    if (h->typecnt == 0 || (h->isutcnt != 0 && h->isutcnt != h->typecnt) ||
        (h->isstdcnt != 0 && h->isstdcnt != h->typecnt))
        return err_set(err, TERN_EPARSE, "TZif: inconsistent counts");
    return 0;
}

static size_t block_size(const struct tzhead *h, size_t tsize)
{
    return (size_t)h->timecnt * tsize + h->timecnt + (size_t)h->typecnt * 6 + h->charcnt +
           (size_t)h->leapcnt * (tsize + 4) + h->isstdcnt + h->isutcnt;
}

int tzwin_zone_parse(const unsigned char *data, size_t len, struct tzwin_zone *ret,
                     struct tern_err *err)
{
    struct tzhead h;
    struct tzwin_zone z = {0};
    int rc = read_head(data, len, &h, err);
    if (rc)
        return rc;
    size_t off = 44, tsize = 4;
    if (h.version >= 2) {
        size_t skip = block_size(&h, 4);
        if (len - off < skip)
            return err_set(err, TERN_EPARSE, "TZif: truncated version 1 data");
        off += skip;
        if ((rc = read_head(data + off, len - off, &h, err)))
            return rc;
        off += 44;
        tsize = 8;
    }
    if (len - off < block_size(&h, tsize))
        return err_set(err, TERN_EPARSE, "TZif: truncated data");
    if (h.leapcnt > 0)
        return err_set(err, TERN_EINVALID,
                       "TZif: a zone with leap seconds (use the zone without \"right/\")");
    const unsigned char *p = data + off;
    z.ntrans = h.timecnt;
    z.ntypes = h.typecnt;
    z.trans = xcalloc(z.ntrans ? z.ntrans : 1, sizeof *z.trans);
    z.idx = xcalloc(z.ntrans ? z.ntrans : 1, 1);
    z.utoff = xcalloc(z.ntypes, sizeof *z.utoff);
    for (size_t i = 0; i < z.ntrans; i++, p += tsize) {
        z.trans[i] = tsize == 8 ? be64(p) : (int64_t)(int32_t)be32(p);
        if (i > 0 && z.trans[i] <= z.trans[i - 1]) {
            rc = err_set(err, TERN_EPARSE, "TZif: transitions out of order at %zu", i);
            goto out;
        }
    }
    for (size_t i = 0; i < z.ntrans; i++, p++) {
        z.idx[i] = *p;
        if (*p >= z.ntypes) {
            rc = err_set(err, TERN_EPARSE, "TZif: transition %zu names type %u of %zu", i, *p,
                         z.ntypes);
            goto out;
        }
    }
    for (size_t i = 0; i < z.ntypes; i++, p += 6) {
        int32_t u = (int32_t)be32(p);
        if (u < -TZ_MAX_OFF || u > TZ_MAX_OFF || p[4] > 1 || p[5] >= h.charcnt) {
            rc = err_set(err, TERN_EPARSE, "TZif: local time type %zu is malformed", i);
            goto out;
        }
        z.utoff[i] = u;
    }
    p += h.charcnt + h.isstdcnt + h.isutcnt;
    off = (size_t)(p - data);
    if (h.version >= 2) {
        /* the footer: "\n<TZ string>\n" */
        if (off >= len || data[off] != '\n') {
            rc = err_set(err, TERN_EPARSE, "TZif: no footer");
            goto out;
        }
        const unsigned char *nl = memchr(data + off + 1, '\n', len - off - 1);
        if (!nl) {
            rc = err_set(err, TERN_EPARSE, "TZif: unterminated footer");
            goto out;
        }
        size_t n = (size_t)(nl - (data + off + 1));
        if (n > 0) {
            if (tzwin_rule_parse((const char *)data + off + 1, n, &z.rule)) {
                rc = err_set(err, TERN_EPARSE, "TZif: bad TZ string \"%.*s\"", (int)(n > 64 ? 64 : n),
                             (const char *)data + off + 1);
                goto out;
            }
            z.has_rule = true;
        }
    }
    *ret = z;
    return 0;
out:
    tzwin_zone_done(&z);
    return rc;
}

/* ---- offsets and changes -------------------------------------------------- */

/* Index of the last transition <= t, or -1. */
static ptrdiff_t trans_at(const struct tzwin_zone *z, int64_t t)
{
    size_t lo = 0, hi = z->ntrans;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->trans[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (ptrdiff_t)lo - 1;
}

int32_t tzwin_offset(const struct tzwin_zone *z, int64_t t)
{
    if (z->ntrans == 0)
        return z->has_rule ? rule_offset(&z->rule, t) : z->utoff[0];
    ptrdiff_t i = trans_at(z, t);
    if (i < 0)
        return z->utoff[0];
    if ((size_t)i == z->ntrans - 1 && z->has_rule)
        return rule_offset(&z->rule, t);
    return z->utoff[z->idx[i]];
}

static bool changes_at(const struct tzwin_zone *z, int64_t t)
{
    return tzwin_offset(z, t) != tzwin_offset(z, t - 1);
}

/* Where the rule governs: from the last transition on (everywhere without
 * transitions). */
static int64_t rule_from(const struct tzwin_zone *z)
{
    return z->ntrans ? z->trans[z->ntrans - 1] : INT64_MIN;
}

/* The first instant > t where the offset changes, or INT64_MAX. */
static int64_t change_after(const struct tzwin_zone *z, int64_t t)
{
    for (size_t i = (size_t)(trans_at(z, t) + 1); i < z->ntrans; i++)
        if (changes_at(z, z->trans[i]))
            return z->trans[i];
    if (!z->has_rule || !z->rule.has_dst || z->rule.std_off == z->rule.dst_off)
        return INT64_MAX;
    int64_t best = INT64_MAX, y0 = utc_year(t);
    for (int64_t y = y0 - 1; y <= y0 + 2; y++) {
        int64_t c[2] = {rule_start(&z->rule, y), rule_end(&z->rule, y)};
        for (int k = 0; k < 2; k++)
            if (c[k] > t && c[k] > rule_from(z) && c[k] < best && changes_at(z, c[k]))
                best = c[k];
    }
    return best;
}

/* The last instant <= t where the offset changed, or INT64_MIN. */
static int64_t change_at_or_before(const struct tzwin_zone *z, int64_t t)
{
    if (z->has_rule && z->rule.has_dst && z->rule.std_off != z->rule.dst_off &&
        t > rule_from(z)) {
        int64_t best = INT64_MIN, y0 = utc_year(t);
        for (int64_t y = y0 - 2; y <= y0 + 1; y++) {
            int64_t c[2] = {rule_start(&z->rule, y), rule_end(&z->rule, y)};
            for (int k = 0; k < 2; k++)
                if (c[k] <= t && c[k] > rule_from(z) && c[k] > best && changes_at(z, c[k]))
                    best = c[k];
        }
        if (best != INT64_MIN)
            return best;
    }
    for (ptrdiff_t i = trans_at(z, t); i >= 0; i--)
        if (changes_at(z, z->trans[i]))
            return z->trans[i];
    return INT64_MIN;
}

/* ---- windows ----------------------------------------------------------------- */

const char *tzwin_period_name(enum tzwin_period p)
{
    return p == TZWIN_HOUR ? "Hour" : p == TZWIN_MONTH ? "Month" : "Day";
}

int tzwin_period_parse(const char *s, enum tzwin_period *ret)
{
    if (s && strcmp(s, "Hour") == 0)
        *ret = TZWIN_HOUR;
    else if (s && strcmp(s, "Day") == 0)
        *ret = TZWIN_DAY;
    else if (s && strcmp(s, "Month") == 0)
        *ret = TZWIN_MONTH;
    else
        return -EINVAL;
    return 0;
}

struct label {
    int64_t y;
    int m, d, h;
    int32_t off;
};

static void label_of(const struct tzwin_zone *z, int64_t t, struct label *l)
{
    l->off = tzwin_offset(z, t);
    int64_t local = t + l->off;
    tzwin_civil_from_days(floor_div(local, 86400), &l->y, &l->m, &l->d);
    l->h = (int)(floor_div(local, 3600) - floor_div(local, 86400) * 24);
}

static bool label_eq(enum tzwin_period p, const struct label *a, const struct label *b)
{
    if (a->y != b->y || a->m != b->m)
        return false;
    if (p == TZWIN_MONTH)
        return true;
    if (a->d != b->d)
        return false;
    return p == TZWIN_DAY || (a->h == b->h && a->off == b->off);
}

/* The local wall-clock second where the period containing `local` starts,
 * and where the next one starts. */
static void local_bounds(enum tzwin_period p, int64_t local, int64_t *ret_lo, int64_t *ret_hi)
{
    if (p == TZWIN_HOUR) {
        *ret_lo = floor_div(local, 3600) * 3600;
        *ret_hi = *ret_lo + 3600;
    } else if (p == TZWIN_DAY) {
        *ret_lo = floor_div(local, 86400) * 86400;
        *ret_hi = *ret_lo + 86400;
    } else {
        int64_t y;
        int m, d;
        tzwin_civil_from_days(floor_div(local, 86400), &y, &m, &d);
        *ret_lo = tzwin_days_from_civil(y, m, 1) * 86400;
        *ret_hi = tzwin_days_from_civil(m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1, 1) * 86400;
    }
}

int tzwin_window(const struct tzwin_zone *z, enum tzwin_period p, int64_t t,
                 struct tzwin_window *ret)
{
    if (t < TZ_MIN_T + 2 * 86400 || t > TZ_MAX_T - 40 * 86400)
        return -ERANGE;
    struct label lab, other;
    label_of(z, t, &lab);
    int64_t lo, hi, start = t, end = t;
    /* back to the first instant of the label: within a stretch of constant
     * offset the label changes only at a local boundary; where the offset
     * changed, the label may go on before it (a fall-back) */
    int64_t cur = t;
    for (int guard = 0; guard < 64; guard++) {
        int32_t off = tzwin_offset(z, cur);
        local_bounds(p, cur + off, &lo, &hi);
        int64_t s = lo - off, a = change_at_or_before(z, cur);
        if (s > a) {
            start = s;
            break;
        }
        label_of(z, a - 1, &other);
        if (!label_eq(p, &other, &lab)) {
            start = a;
            break;
        }
        cur = a - 1;
        start = a - 1;
    }
    cur = t;
    for (int guard = 0; guard < 64; guard++) {
        int32_t off = tzwin_offset(z, cur);
        local_bounds(p, cur + off, &lo, &hi);
        int64_t e = hi - off, b = change_after(z, cur);
        if (e < b) {
            end = e;
            break;
        }
        label_of(z, b, &other);
        if (!label_eq(p, &other, &lab)) {
            end = b;
            break;
        }
        cur = b;
        end = b + 1;
    }
    ret->start = start;
    ret->end = end;
    int32_t o = lab.off < 0 ? -lab.off : lab.off;
    if (p == TZWIN_MONTH)
        snprintf(ret->key, sizeof ret->key, "%04lld-%02d", (long long)lab.y, lab.m);
    else if (p == TZWIN_DAY)
        snprintf(ret->key, sizeof ret->key, "%04lld-%02d-%02d", (long long)lab.y, lab.m, lab.d);
    else
        snprintf(ret->key, sizeof ret->key, "%04lld-%02d-%02dT%02d%c%02d%02d", (long long)lab.y,
                 lab.m, lab.d, lab.h, lab.off < 0 ? '-' : '+', (int)(o / 3600),
                 (int)(o / 60 % 60));
    return 0;
}

char *tzwin_format(const struct tzwin_zone *z, int64_t t, char out[TZWIN_TIME_MAX])
{
    int32_t off = tzwin_offset(z, t);
    int64_t local = t + off, y;
    int m, d;
    tzwin_civil_from_days(floor_div(local, 86400), &y, &m, &d);
    int64_t sod = local - floor_div(local, 86400) * 86400;
    int32_t o = off < 0 ? -off : off;
    if (off == 0)
        snprintf(out, TZWIN_TIME_MAX, "%04lld-%02d-%02dT%02d:%02d:%02dZ", (long long)y % 10000, m, d,
                 (int)(sod / 3600), (int)(sod / 60 % 60), (int)(sod % 60));
    else
        snprintf(out, TZWIN_TIME_MAX, "%04lld-%02d-%02dT%02d:%02d:%02d%c%02d:%02d", (long long)y % 10000, m,
                 d, (int)(sod / 3600), (int)(sod / 60 % 60), (int)(sod % 60),
                 off < 0 ? '-' : '+', (int)(o / 3600), (int)(o / 60 % 60));
    return out;
}

/* ---- the database ---------------------------------------------------------- */

bool tzwin_name_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > TERN_TZ_MAX_NAME || name[0] == '-' || name[0] == '/')
        return false;
    size_t part = 0;
    bool dots_only = true;
    for (size_t i = 0; i <= n; i++) {
        char c = name[i];
        if (c == '/' || c == 0) {
            if (part == 0 || (dots_only && part <= 2))
                return false;
            part = 0;
            dots_only = true;
            continue;
        }
        bool ok = is_alpha((unsigned char)c) || is_digit((unsigned char)c) || c == '_' ||
                  c == '+' || c == '-' || c == '.';
        if (!ok)
            return false;
        dots_only = dots_only && c == '.';
        part++;
    }
    return true;
}

int tzwin_load(const char *dir, const char *name, struct tzwin_zone *ret, struct tern_err *err)
{
    if (!tzwin_name_valid(name))
        return err_set(err, TERN_EINVALID, "time zone \"%.64s\": not a zone name", name ? name : "");
    if (strcmp(name, "UTC") == 0 || strcmp(name, "Etc/UTC") == 0 || strcmp(name, "Z") == 0) {
        tzwin_zone_utc(ret);
        return 0;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "/usr/share/zoneinfo", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return err_set(err, e == ENOENT || e == ENOTDIR ? -ENOENT : -e,
                       "time zone \"%s\": %s", name, strerror(e));
    }
    struct stat st;
    unsigned char *data = NULL;
    int rc = 0;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = err_set(err, -ENOENT, "time zone \"%s\": not a zone file", name);
        goto out;
    }
    if (st.st_size > TERN_TZ_MAX_FILE) {
        rc = err_set(err, TERN_ETOOLARGE, "time zone \"%s\": file larger than %d bytes", name,
                     TERN_TZ_MAX_FILE);
        goto out;
    }
    size_t len = (size_t)st.st_size, got = 0;
    data = xmalloc(len ? len : 1);
    while (got < len) {
        ssize_t n = read(fd, data + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = err_set(err, -EIO, "time zone \"%s\": short read", name);
            goto out;
        }
        got += (size_t)n;
    }
    if ((rc = tzwin_zone_parse(data, len, ret, err)))
        err_wrap(err, rc, "time zone \"%s\"", name);
out:
    free(data);
    close(fd);
    return rc;
}
