/* glob_ref.h - a deliberately naive reference for base/glob (tests only).
 *
 * Walks the raw pattern recursively, trying every split: exponential in the
 * number of stars, so callers keep inputs short. It restates the rules of
 * base/glob.h independently of glob.c's tokens and DP; fuzz_glob.c and
 * tests/unit/test_glob.c compare the two. */
#ifndef TERN_TESTS_GLOB_REF_H
#define TERN_TESTS_GLOB_REF_H

#include "base/glob.h"
#include "base/limits.h"

#include <stdbool.h>
#include <string.h>

/* The class starting at p[i] == '['. Returns the index after its ']' (0 when
 * malformed) and sets *in when ch is a member. */
static size_t ref_class(const char *p, size_t plen, size_t i, unsigned char ch, bool *in)
{
    size_t j = i + 1;
    bool neg = false, hit = false;
    if (j < plen && (p[j] == '!' || p[j] == '^'))
        neg = true, j++;
    for (bool first = true; j < plen && (first || p[j] != ']'); first = false) {
        unsigned char lo = (unsigned char)p[j];
        if (lo == '\\') {
            if (++j >= plen)
                return 0;
            lo = (unsigned char)p[j];
        }
        if (j + 2 < plen && p[j + 1] == '-' && p[j + 2] != ']') {
            unsigned char hi = (unsigned char)p[j + 2];
            if (hi < lo)
                return 0;
            hit = hit || (ch >= lo && ch <= hi);
            j += 3;
        } else {
            hit = hit || ch == lo;
            j++;
        }
    }
    if (j >= plen)
        return 0;
    *in = hit != neg;
    return j + 1;
}

static bool ref_valid(const char *p)
{
    size_t plen = strlen(p);
    if (plen > TERN_GLOB_MAX_PATTERN)
        return false;
    for (size_t i = 0; i < plen;) {
        bool in;
        if (p[i] == '\\') {
            if (i + 1 >= plen)
                return false;
            i += 2;
        } else if (p[i] == '[') {
            if (!(i = ref_class(p, plen, i, 0, &in)))
                return false;
        } else {
            i++;
        }
    }
    return true;
}

/* May a single-character wildcard (?, *, [..]) consume s[k]? */
static bool ref_wild_ok(const char *s, size_t k, unsigned mode)
{
    if (mode & GLOB_TEXT)
        return true;
    if (s[k] == '/')
        return false;
    return !((mode & GLOB_PERIOD) && s[k] == '.' && (k == 0 || s[k - 1] == '/'));
}

static bool ref_at(const char *p, size_t plen, size_t i, const char *s, size_t n, size_t k,
                   unsigned mode)
{
    bool path = !(mode & GLOB_TEXT);
    if (i == plen)
        return k == n;
    char c = p[i];
    if (c == '\\')
        return k < n && s[k] == p[i + 1] && ref_at(p, plen, i + 2, s, n, k + 1, mode);
    if (c == '?')
        return k < n && ref_wild_ok(s, k, mode) && ref_at(p, plen, i + 1, s, n, k + 1, mode);
    if (c == '[') {
        bool in = false;
        size_t e = ref_class(p, plen, i, k < n ? (unsigned char)s[k] : 0, &in);
        return k < n && in && ref_wild_ok(s, k, mode) && ref_at(p, plen, e, s, n, k + 1, mode);
    }
    if (c == '*') {
        size_t r = 0;
        while (i + r < plen && p[i + r] == '*')
            r++;
        if (r >= 2 && path && i + r < plen && p[i + r] == '/' && (i == 0 || p[i - 1] == '/')) {
            /* zero or more whole directories */
            for (size_t e = k; e <= n; e++)
                if ((e == k || s[e - 1] == '/') && ref_at(p, plen, i + r + 1, s, n, e, mode))
                    return true;
            return false;
        }
        bool any = r >= 2 || !path;
        for (size_t e = k;; e++) {
            if (ref_at(p, plen, i + r, s, n, e, mode))
                return true;
            if (e == n || (!any && !ref_wild_ok(s, e, mode)))
                return false;
        }
    }
    if (c == '/' && path && i + 3 == plen && p[i + 1] == '*' && p[i + 2] == '*') {
        if (k == n)
            return !(mode & GLOB_NO_DIR_SELF);
        return s[k] == '/' && (k + 1 < n || !(mode & GLOB_NO_DIR_SELF));
    }
    return k < n && s[k] == c && ref_at(p, plen, i + 1, s, n, k + 1, mode);
}

static bool ref_match(const char *p, const char *s, unsigned mode)
{
    if (!ref_valid(p))
        return false;
    return ref_at(p, strlen(p), 0, s, strlen(s), 0, mode);
}

#endif
