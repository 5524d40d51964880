/* sanitize.c - credential redaction in trusted tools' results (pure). */
#include "trusted/sanitize.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sanitize_init(struct sanitize *s)
{
    memset(s, 0, sizeof *s);
}

void sanitize_done(struct sanitize *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nforms; i++)
        free(s->forms[i]);
    free(s->forms);
    free(s->lens);
    memset(s, 0, sizeof *s);
}

/* Adds one form (copied), keeping the list sorted longest first and free of
 * duplicates. */
static void add_form(struct sanitize *s, const char *p, size_t n)
{
    if (n == 0)
        return;
    size_t at = 0;
    for (; at < s->nforms; at++) {
        if (s->lens[at] == n && memcmp(s->forms[at], p, n) == 0)
            return;
        if (s->lens[at] < n)
            break;
    }
    s->forms = xreallocarray(s->forms, s->nforms + 1, sizeof *s->forms);
    s->lens = xreallocarray(s->lens, s->nforms + 1, sizeof *s->lens);
    memmove(s->forms + at + 1, s->forms + at, (s->nforms - at) * sizeof *s->forms);
    memmove(s->lens + at + 1, s->lens + at, (s->nforms - at) * sizeof *s->lens);
    s->forms[at] = xstrndup(p, n);
    s->lens[at] = n;
    s->nforms++;
}

static const char b64_std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64_url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Unpadded base64 of p[0..n) with alphabet abc into out (4n/3 + 4 bytes). */
static size_t b64(const unsigned char *p, size_t n, const char *abc, char *out)
{
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        out[o++] = abc[v >> 18];
        out[o++] = abc[(v >> 12) & 63];
        out[o++] = abc[(v >> 6) & 63];
        out[o++] = abc[v & 63];
    }
    if (n - i == 1) {
        unsigned v = (unsigned)p[i] << 16;
        out[o++] = abc[v >> 18];
        out[o++] = abc[(v >> 12) & 63];
    } else if (n - i == 2) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8;
        out[o++] = abc[v >> 18];
        out[o++] = abc[(v >> 12) & 63];
        out[o++] = abc[(v >> 6) & 63];
    }
    return o;
}

/* The base64 forms of v: for each alignment a (v preceded by a bytes of
 * something else) the characters that depend on v's bytes only: skip the
 * first 0, 2 or 3 characters, and the last one when the final group is
 * partial (it mixes v's last bits with what follows). At alignment 0 the
 * whole padded and unpadded encoding is added too. */
static void add_base64_forms(struct sanitize *s, const char *v, size_t n)
{
    static const size_t skip[3] = {0, 2, 3};
    unsigned char *tmp = xmalloc(n + 2);
    char *enc = xmalloc((n + 2) / 3 * 4 + 8);
    for (int alpha = 0; alpha < 2; alpha++) {
        const char *abc = alpha ? b64_url : b64_std;
        for (size_t a = 0; a < 3; a++) {
            memset(tmp, 0, a);
            memcpy(tmp + a, v, n);
            size_t len = b64(tmp, a + n, abc, enc);
            size_t drop = (a + n) % 3 ? 1 : 0;
            if (a == 0) {
                /* the exact encoding, padded (base64 of v alone) */
                size_t pad = (3 - n % 3) % 3;
                memcpy(enc + len, "==", pad);
                if (len + pad >= TERN_SANITIZE_MIN_SECRET)
                    add_form(s, enc, len + pad);
            }
            if (len > skip[a] + drop && len - skip[a] - drop >= TERN_SANITIZE_MIN_FORM)
                add_form(s, enc + skip[a], len - skip[a] - drop);
        }
    }
    free(enc);
    free(tmp);
}

static bool unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

static void add_percent_forms(struct sanitize *s, const char *v, size_t n)
{
    static const char *const hex[2] = {"0123456789ABCDEF", "0123456789abcdef"};
    bool differs = false;
    for (size_t i = 0; i < n; i++)
        differs |= !unreserved((unsigned char)v[i]);
    if (!differs)
        return;
    char *out = xmalloc(3 * n + 1);
    for (int h = 0; h < 2; h++) {
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)v[i];
            if (unreserved(c)) {
                out[o++] = (char)c;
            } else {
                out[o++] = '%';
                out[o++] = hex[h][c >> 4];
                out[o++] = hex[h][c & 15];
            }
        }
        add_form(s, out, o);
    }
    free(out);
}

static void add_json_form(struct sanitize *s, const char *v, size_t n)
{
    struct buf b;
    buf_init(&b, 6 * n + 3);
    char *z = xstrndup(v, n);
    buf_put_json_string(&b, z);
    free(z);
    /* without the quotes */
    if (b.len >= 2 && b.len - 2 != n)
        add_form(s, b.data + 1, b.len - 2);
    buf_done(&b);
}

int sanitize_add(struct sanitize *s, const char *value, size_t n, struct tern_err *err)
{
    if (!value || n < TERN_SANITIZE_MIN_SECRET)
        return err_set(err, TERN_EINVALID, "a credential shorter than %d bytes",
                       TERN_SANITIZE_MIN_SECRET);
    if (n > TERN_SANITIZE_MAX_SECRET)
        return err_set(err, TERN_EINVALID, "a credential longer than %d bytes",
                       TERN_SANITIZE_MAX_SECRET);
    if (memchr(value, 0, n))
        return err_set(err, TERN_EINVALID, "a credential with a NUL byte");
    if (s->nvalues >= TERN_SANITIZE_MAX_SECRETS)
        return err_set(err, TERN_ETOOLARGE, "more than %d credentials", TERN_SANITIZE_MAX_SECRETS);
    s->nvalues++;
    add_form(s, value, n);
    add_base64_forms(s, value, n);
    add_percent_forms(s, value, n);
    add_json_form(s, value, n);
    return 0;
}

/* The first occurrence of any form in p[0..n): returns its offset and form
 * index, or n when there is none. Forms are sorted longest first and a
 * later (shorter) form only wins by starting earlier, so at one position
 * the longest form is the one replaced. */
static size_t find_any(const struct sanitize *s, const char *p, size_t n, size_t *ret_form)
{
    size_t best = n;
    for (size_t f = 0; f < s->nforms; f++) {
        if (s->lens[f] > n)
            continue;
        /* only a match that starts before the best one so far matters */
        size_t region = best < n && best + s->lens[f] < n ? best + s->lens[f] : n;
        const char *hit = memmem(p, region, s->forms[f], s->lens[f]);
        if (hit && (size_t)(hit - p) < best) {
            best = (size_t)(hit - p);
            *ret_form = f;
        }
    }
    return best;
}

/* Bytes at the end of p[0..n) that are a prefix (>= TERN_SANITIZE_MIN_PARTIAL
 * and shorter than the whole) of some form; 0 if none. */
static size_t partial_tail(const struct sanitize *s, const char *p, size_t n)
{
    size_t best = 0;
    for (size_t f = 0; f < s->nforms; f++) {
        size_t k = s->lens[f] - 1 < n ? s->lens[f] - 1 : n;
        for (; k >= TERN_SANITIZE_MIN_PARTIAL && k > best; k--)
            if (memcmp(p + n - k, s->forms[f], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

bool sanitize_contains(const struct sanitize *s, const char *in, size_t n)
{
    size_t f = 0;
    return s && in && find_any(s, in, n, &f) < n;
}

char *sanitize_text(const struct sanitize *s, const char *in, size_t n, size_t max,
                    struct sanitize_stats *st)
{
    struct sanitize_stats stats = {0};
    struct buf b;
    if (!in)
        in = "";
    if (max == 0 || max > TERN_SANITIZE_MAX_INPUT)
        max = TERN_SANITIZE_MAX_INPUT;
    if (n > TERN_SANITIZE_MAX_INPUT) {
        n = TERN_SANITIZE_MAX_INPUT;
        stats.truncated = true;
    }
    /* everything replaced first, then cut: a cut never leaves half a value */
    buf_init(&b, 3 * (size_t)TERN_SANITIZE_MAX_INPUT);
    size_t pos = 0;
    while (s && s->nforms && pos < n) {
        size_t f = 0;
        size_t at = find_any(s, in + pos, n - pos, &f);
        if (at >= n - pos)
            break;
        buf_append(&b, in + pos, at);
        buf_puts(&b, SANITIZE_MARK);
        stats.replaced++;
        pos += at + s->lens[f];
    }
    /* b's bound holds for any input within TERN_SANITIZE_MAX_INPUT: a mark
     * (10 bytes) replaces at least TERN_SANITIZE_MIN_SECRET (4) bytes */
    buf_append(&b, in + pos, n - pos);
    /* a value cut off by an earlier bound, at the very end */
    size_t tail = s && s->nforms ? partial_tail(s, b.data ? b.data : "", b.len) : 0;
    if (tail) {
        b.len -= tail;
        b.data[b.len] = 0;
        buf_puts(&b, SANITIZE_MARK);
        stats.replaced++;
    }
    if (b.len > max) {
        static const char cut[] = "\n[truncated]";
        size_t keep = max > sizeof cut ? max - (sizeof cut - 1) : 0;
        while (keep > 0 && ((unsigned char)b.data[keep] & 0xC0) == 0x80)
            keep--;
        b.len = keep;
        b.data[keep] = 0;
        buf_puts(&b, cut);
        stats.truncated = true;
    }
    if (st)
        *st = stats;
    return buf_steal(&b);
}

char *sanitize_str(const struct sanitize *s, const char *in)
{
    return in ? sanitize_text(s, in, strlen(in), 0, NULL) : NULL;
}
