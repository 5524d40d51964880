/* cron.c - cron schedules in a time zone. See cron.h. */
#include "trigger/cron.h"

#include "base/limits.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                          "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const dow_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

struct field_def {
    const char *name;
    int min, max;
    const char *const *names; /* names[i] = min + i */
    int nnames;
};

static const struct field_def defs[5] = {
    {"minute", 0, 59, NULL, 0},
    {"hour", 0, 23, NULL, 0},
    {"day of month", 1, 31, NULL, 0},
    {"month", 1, 12, month_names, 12},
    {"day of week", 0, 7, dow_names, 7},
};

/* One number or name of [s, e). -1 if it is neither. */
static int atom(const struct field_def *d, const char *s, const char *e)
{
    size_t n = (size_t)(e - s);
    if (n == 0 || n > 3)
        return -1;
    if (isdigit((unsigned char)s[0])) {
        int v = 0;
        for (const char *p = s; p < e; p++) {
            if (!isdigit((unsigned char)*p))
                return -1;
            v = v * 10 + (*p - '0');
        }
        return v;
    }
    for (int i = 0; i < d->nnames; i++)
        if (n == 3 && strncasecmp(s, d->names[i], 3) == 0)
            return d->min + i;
    return -1;
}

/* One field of [s, e) into *bits; *star when it is `*` or `?` (step 1). */
static int parse_field(const struct field_def *d, const char *s, const char *e, uint64_t *bits,
                       bool *star, struct tern_err *err)
{
    *bits = 0;
    *star = false;
    while (s < e) {
        const char *comma = memchr(s, ',', (size_t)(e - s));
        const char *ie = comma ? comma : e;
        const char *slash = memchr(s, '/', (size_t)(ie - s));
        const char *re = slash ? slash : ie;
        int lo, hi, step = 1;
        bool item_star = false;
        if (re - s == 1 && (*s == '*' || *s == '?')) {
            lo = d->min;
            hi = d->max == 7 ? 6 : d->max;
            item_star = true;
        } else {
            const char *dash = memchr(s, '-', (size_t)(re - s));
            lo = atom(d, s, dash ? dash : re);
            hi = dash ? atom(d, dash + 1, re) : lo;
            if (lo < 0 || hi < 0)
                return err_set(err, TERN_EINVALID, "spec.schedule.cron: %s: bad value \"%.*s\"",
                               d->name, (int)(ie - s), s);
            if (slash && !dash)
                hi = d->max == 7 ? 6 : d->max; /* "N/step" = N-max/step */
        }
        if (slash) {
            step = atom(&defs[0], slash + 1, ie);
            if (step < 1 || step > d->max)
                return err_set(err, TERN_EINVALID, "spec.schedule.cron: %s: bad step \"%.*s\"",
                               d->name, (int)(ie - slash - 1), slash + 1);
        }
        if (lo < d->min || hi > d->max || lo > hi)
            return err_set(err, TERN_EINVALID,
                           "spec.schedule.cron: %s: %d-%d is out of range %d-%d", d->name, lo, hi,
                           d->min, d->max);
        for (int v = lo; v <= hi; v += step)
            *bits |= 1ull << (d->max == 7 && v == 7 ? 0 : v);
        if (item_star && step == 1)
            *star = true;
        if (!comma)
            break;
        s = comma + 1;
        if (s == e)
            return err_set(err, TERN_EINVALID, "spec.schedule.cron: %s: empty list item",
                           d->name);
    }
    if (!*bits)
        return err_set(err, TERN_EINVALID, "spec.schedule.cron: %s: empty", d->name);
    return 0;
}

int cron_parse(const char *text, struct cron *ret, struct tern_err *err)
{
    static const struct {
        const char *name, *expr;
    } macros[] = {{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
                  {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
                  {"@hourly", "0 * * * *"}};
    size_t n = strlen(text);
    if (n == 0 || n > TERN_CRON_MAX_TEXT)
        return err_set(err, TERN_EINVALID, "spec.schedule.cron: must be 1..%d characters",
                       TERN_CRON_MAX_TEXT);
    while (*text == ' ' || *text == '\t')
        text++;
    if (strncmp(text, "TZ=", 3) == 0 || strncmp(text, "CRON_TZ=", 8) == 0)
        return err_set(err, TERN_EINVALID,
                       "spec.schedule.cron: a TZ= prefix is not supported; set "
                       "spec.schedule.timeZone");
    if (*text == '@') {
        for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
            if (strcasecmp(text, macros[i].name) == 0)
                return cron_parse(macros[i].expr, ret, err);
        return err_set(err, TERN_EINVALID, "spec.schedule.cron: unknown macro %s", text);
    }
    struct cron c = {0};
    const char *p = text;
    for (int f = 0; f < 5; f++) {
        while (*p == ' ' || *p == '\t')
            p++;
        const char *s = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        if (p == s)
            return err_set(err, TERN_EINVALID,
                           "spec.schedule.cron: want 5 fields (minute hour day-of-month month "
                           "day-of-week), got %d",
                           f);
        uint64_t bits;
        bool star;
        int r = parse_field(&defs[f], s, p, &bits, &star, err);
        if (r)
            return r;
        switch (f) {
        case 0: c.minute = bits; break;
        case 1: c.hour = (uint32_t)bits; break;
        case 2: c.dom = (uint32_t)bits; c.dom_star = star; break;
        case 3: c.month = (uint16_t)bits; break;
        default: c.dow = (uint8_t)bits; c.dow_star = star; break;
        }
    }
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p)
        return err_set(err, TERN_EINVALID, "spec.schedule.cron: want 5 fields, got more");
    *ret = c;
    return 0;
}

static int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static bool day_match(const struct cron *c, int64_t days, int d)
{
    int dow = (int)(((days + 4) % 7 + 7) % 7); /* 1970-01-01 was a Thursday */
    bool dm = (c->dom >> d) & 1u, wm = (c->dow >> dow) & 1u;
    if (c->dom_star || c->dow_star)
        return dm && wm;
    return dm || wm;
}

/* The smallest matching label (local seconds, minute-aligned) >= L and <=
 * limit. */
static int next_label(const struct cron *c, int64_t L, int64_t limit, int64_t *ret)
{
    L = floordiv(L + 59, 60) * 60;
    while (L <= limit) {
        int64_t days = floordiv(L, 86400), sod = L - days * 86400, y;
        int m, d;
        tzwin_civil_from_days(days, &y, &m, &d);
        if (!((c->month >> m) & 1u)) {
            if (++m > 12) {
                m = 1;
                y++;
            }
            L = tzwin_days_from_civil(y, m, 1) * 86400;
            continue;
        }
        if (!day_match(c, days, d)) {
            L = (days + 1) * 86400;
            continue;
        }
        int h = (int)(sod / 3600);
        if (!((c->hour >> h) & 1u)) {
            L = days * 86400 + (int64_t)(h + 1) * 3600;
            continue;
        }
        int mi = (int)((sod % 3600) / 60);
        if (!((c->minute >> mi) & 1u)) {
            L += 60;
            continue;
        }
        *ret = L;
        return 0;
    }
    return -ENOENT;
}

/* The first instant whose local time is label L, or, for a label a
 * spring-forward skips, the first instant after the gap. */
static int64_t first_instant(const struct tzwin_zone *z, int64_t L)
{
    int32_t ob = tzwin_offset(z, L - 86400), oa = tzwin_offset(z, L + 86400);
    int64_t ub = L - ob, ua = L - oa;
    bool vb = tzwin_offset(z, ub) == ob, va = tzwin_offset(z, ua) == oa;
    if (vb && va)
        return ub < ua ? ub : ua;
    if (vb)
        return ub;
    if (va)
        return ua;
    /* a gap: ua < ub; the offset is ob at ua and oa at ub */
    int64_t lo = ua < ub ? ua : ub, hi = ua < ub ? ub : ua;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (tzwin_offset(z, mid) == ob)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

int cron_next(const struct cron *c, const struct tzwin_zone *z, int64_t t, int64_t *ret)
{
    int64_t off = tzwin_offset(z, t);
    int64_t L = t + off - 3 * 3600; /* any DST shift is smaller */
    int64_t limit = t + off + (int64_t)TERN_CRON_MAX_YEARS * 366 * 86400;
    for (;;) {
        int64_t lab;
        if (next_label(c, L, limit, &lab))
            return -ENOENT;
        int64_t u = first_instant(z, lab);
        if (u > t) {
            *ret = u;
            return 0;
        }
        L = lab + 60;
    }
}

int cron_last_in(const struct cron *c, const struct tzwin_zone *z, int64_t after, int64_t now,
                 int max_count, int64_t *ret_slot, int *ret_count)
{
    int64_t u, last = 0;
    int count = 0;
    if (now <= after || cron_next(c, z, after, &u) || u > now)
        return -ENOENT;
    while (u <= now && count < max_count) {
        last = u;
        count++;
        if (cron_next(c, z, u, &u))
            break;
    }
    if (count >= max_count && u <= now) {
        /* too many to walk: the last one from a window before now */
        static const int64_t windows[] = {3600, 86400, 31 * 86400, 366 * 86400,
                                          (int64_t)TERN_CRON_MAX_YEARS * 366 * 86400};
        for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
            int64_t from = now - windows[i] > last ? now - windows[i] : last;
            if (cron_next(c, z, from, &u) || u > now)
                continue;
            while (u <= now) {
                last = u;
                if (cron_next(c, z, u, &u))
                    break;
            }
            break;
        }
    }
    *ret_slot = last;
    *ret_count = count;
    return 0;
}
