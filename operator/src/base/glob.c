/* glob.c - glob matching as a DP over tokens (see glob.h). */
#include "base/glob.h"

#include "base/limits.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

enum tok_kind {
    T_LIT,         /* one literal character */
    T_ONE,         /* ? */
    T_STAR,        /* * (path mode: not '/') */
    T_DSTAR,       /* ** : anything */
    T_DSTAR_DIR,   /* "**" + "/" in path mode: empty, or anything ending in '/' */
    T_SLASH_DSTAR, /* "/" + "**" at the end in path mode: '/' + anything (or empty) */
    T_CLASS,       /* [...] */
};

struct tok {
    enum tok_kind kind;
    char c;                /* T_LIT */
    bool neg;              /* T_CLASS */
    unsigned char set[32]; /* T_CLASS: bitmap */
};

static void set_bit(unsigned char *set, unsigned char c)
{
    set[c >> 3] |= (unsigned char)(1u << (c & 7));
}

static bool has_bit(const unsigned char *set, unsigned char c)
{
    return set[c >> 3] & (1u << (c & 7));
}

/* Parses the class whose '[' is at p[i] into t; returns the index after its
 * ']', or 0 when malformed. */
static size_t parse_class(const char *p, size_t plen, size_t i, struct tok *t)
{
    size_t j = i + 1;
    t->kind = T_CLASS;
    if (j < plen && (p[j] == '!' || p[j] == '^')) {
        t->neg = true;
        j++;
    }
    bool first = true;
    while (j < plen && (p[j] != ']' || first)) {
        unsigned char lo = (unsigned char)p[j];
        if (lo == '\\') {
            if (j + 1 >= plen)
                return 0;
            lo = (unsigned char)p[++j];
        }
        if (j + 2 < plen && p[j + 1] == '-' && p[j + 2] != ']') {
            unsigned char hi = (unsigned char)p[j + 2];
            if (hi < lo)
                return 0;
            for (unsigned v = lo; v <= hi; v++)
                set_bit(t->set, (unsigned char)v);
            j += 3;
        } else {
            set_bit(t->set, lo);
            j++;
        }
        first = false;
    }
    return j < plen ? j + 1 : 0;
}

/* Tokenises p (plen bytes) into out[plen]; returns the count, or -1 when
 * malformed. The text flag turns the path-only "**" forms off. */
static int tokenize(const char *p, size_t plen, bool text, struct tok *out)
{
    int n = 0;
    for (size_t i = 0; i < plen;) {
        struct tok *t = &out[n++];
        memset(t, 0, sizeof *t);
        char c = p[i];
        if (c == '\\') {
            if (i + 1 >= plen)
                return -1;
            t->kind = T_LIT;
            t->c = p[i + 1];
            i += 2;
        } else if (c == '?') {
            t->kind = T_ONE;
            i++;
        } else if (c == '*') {
            size_t j = i;
            while (j < plen && p[j] == '*')
                j++;
            if (j - i == 1) {
                t->kind = T_STAR;
            } else if (!text && j < plen && p[j] == '/' && (i == 0 || p[i - 1] == '/')) {
                t->kind = T_DSTAR_DIR;
                j++;
            } else {
                t->kind = T_DSTAR;
            }
            i = j;
        } else if (c == '/' && !text && i + 3 == plen && p[i + 1] == '*' && p[i + 2] == '*') {
            t->kind = T_SLASH_DSTAR;
            i = plen;
        } else if (c == '[') {
            size_t j = parse_class(p, plen, i, t);
            if (!j)
                return -1;
            i = j;
        } else {
            t->kind = T_LIT;
            t->c = c;
            i++;
        }
    }
    return n;
}

bool glob_valid(const char *pattern)
{
    if (!pattern)
        return false;
    size_t plen = strlen(pattern);
    if (plen > TERN_GLOB_MAX_PATTERN)
        return false;
    struct tok *toks = xcalloc(plen + 1, sizeof *toks);
    bool ok = tokenize(pattern, plen, false, toks) >= 0;
    free(toks);
    return ok;
}

/* Whether the single-character token t may consume s[j]. */
static bool one_ok(const struct tok *t, const char *s, size_t j, unsigned mode)
{
    bool text = mode & GLOB_TEXT;
    char ch = s[j];
    if (t->kind == T_LIT)
        return t->c == ch;
    if (!text && ch == '/')
        return false;
    if (!text && (mode & GLOB_PERIOD) && ch == '.' && (j == 0 || s[j - 1] == '/'))
        return false;
    if (t->kind != T_CLASS)
        return true;                                     /* T_ONE, T_STAR */
    return has_bit(t->set, (unsigned char)ch) != t->neg; /* T_CLASS */
}

bool glob_match(const char *pattern, const char *s, unsigned mode)
{
    if (!pattern || !s)
        return false;
    size_t plen = strlen(pattern);
    if (plen > TERN_GLOB_MAX_PATTERN)
        return false;
    bool text = mode & GLOB_TEXT;
    bool self = text || !(mode & GLOB_NO_DIR_SELF);
    struct tok *toks = xcalloc(plen + 1, sizeof *toks);
    int nt = tokenize(pattern, plen, text, toks);
    if (nt < 0) {
        free(toks);
        return false;
    }
    size_t n = strlen(s);
    /* prev[j]: tokens [0, i) match s[0, j); cur: tokens [0, i] */
    bool *prev = xcalloc(n + 1, sizeof *prev);
    bool *cur = xcalloc(n + 1, sizeof *cur);
    prev[0] = true;
    for (int i = 0; i < nt; i++) {
        const struct tok *t = &toks[i];
        bool any = false;   /* T_DSTAR_DIR: some prev[k], k < j */
        bool seen = false;  /* T_SLASH_DSTAR: some prev[k] with s[k] == '/', k < j */
        bool seen1 = false; /* the same with k < j - 1 (at least one char after '/') */
        for (size_t j = 0; j <= n; j++) {
            bool v;
            switch (t->kind) {
            case T_STAR:
                v = prev[j] || (j > 0 && cur[j - 1] && one_ok(t, s, j - 1, mode));
                break;
            case T_DSTAR:
                v = prev[j] || (j > 0 && cur[j - 1]);
                break;
            case T_DSTAR_DIR:
                v = prev[j] || (j > 0 && s[j - 1] == '/' && any);
                break;
            case T_SLASH_DSTAR:
                v = self ? prev[j] || seen : seen1;
                break;
            default:
                v = j > 0 && prev[j - 1] && one_ok(t, s, j - 1, mode);
                break;
            }
            cur[j] = v;
            if (j < n) {
                seen1 = seen;
                any = any || prev[j];
                seen = seen || (prev[j] && s[j] == '/');
            }
        }
        bool *tmp = prev;
        prev = cur;
        cur = tmp;
    }
    bool m = prev[n];
    free(prev);
    free(cur);
    free(toks);
    return m;
}
