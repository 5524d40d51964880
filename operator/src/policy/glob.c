/* glob.c - glob matching as a DP over tokens (see glob.h). */
#include "policy/glob.h"

#include "base/limits.h"
#include "base/mem.h"

#include <stdlib.h>
#include <string.h>

enum tok_kind {
    T_LIT,        /* one literal character */
    T_ONE,        /* ? */
    T_STAR,       /* * */
    T_DSTAR,      /* ** (anything) */
    T_DSTAR_DIR,  /* "**" + "/" in path mode: empty, or anything ending in '/' */
    T_SLASH_DSTAR,/* "/" + "**" at the end in path mode: empty, or '/' + anything */
    T_CLASS,      /* [...] */
};

struct tok {
    enum tok_kind kind;
    char c;              /* T_LIT */
    bool neg;            /* T_CLASS */
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

/* Tokenises pattern; returns the count, or -1 when malformed. */
static int tokenize(const char *p, enum glob_mode mode, struct tok *out)
{
    size_t plen = strlen(p);
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
            } else if (mode == GLOB_PATH && j < plen && p[j] == '/' &&
                       (i == 0 || p[i - 1] == '/')) {
                t->kind = T_DSTAR_DIR;
                j++;
            } else {
                t->kind = T_DSTAR;
            }
            i = j;
        } else if (c == '/' && mode == GLOB_PATH && i + 3 == plen && p[i + 1] == '*' &&
                   p[i + 2] == '*') {
            t->kind = T_SLASH_DSTAR;
            i = plen;
        } else if (c == '[') {
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
                        return -1;
                    lo = (unsigned char)p[++j];
                }
                if (j + 2 < plen && p[j + 1] == '-' && p[j + 2] != ']') {
                    unsigned char hi = (unsigned char)p[j + 2];
                    if (hi < lo)
                        return -1;
                    for (unsigned v = lo; v <= hi; v++)
                        set_bit(t->set, (unsigned char)v);
                    j += 3;
                } else {
                    set_bit(t->set, lo);
                    j++;
                }
                first = false;
            }
            if (j >= plen)
                return -1; /* unterminated */
            i = j + 1;
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
    if (!pattern || strlen(pattern) > TERN_POLICY_MAX_PATTERN)
        return false;
    struct tok toks[TERN_POLICY_MAX_PATTERN];
    return tokenize(pattern, GLOB_PATH, toks) >= 0;
}

static bool one_ok(const struct tok *t, char ch, enum glob_mode mode)
{
    bool slash_ok = mode == GLOB_TEXT;
    switch (t->kind) {
    case T_LIT: return t->c == ch;
    case T_ONE: return ch != '/' || slash_ok;
    case T_CLASS:
        if (ch == '/' && !slash_ok)
            return false;
        return has_bit(t->set, (unsigned char)ch) != t->neg;
    default: return false;
    }
}

bool glob_match(const char *pattern, const char *s, enum glob_mode mode)
{
    if (!pattern || !s || strlen(pattern) > TERN_POLICY_MAX_PATTERN)
        return false;
    struct tok toks[TERN_POLICY_MAX_PATTERN];
    int nt = tokenize(pattern, mode, toks);
    if (nt < 0)
        return false;
    size_t n = strlen(s);
    /* prev[j]: tokens [0, i) match s[0, j) */
    bool *prev = xcalloc(n + 1, sizeof *prev);
    bool *cur = xcalloc(n + 1, sizeof *cur);
    prev[0] = true;
    for (int i = 0; i < nt; i++) {
        const struct tok *t = &toks[i];
        bool any = false; /* T_DSTAR_DIR: some prev[k] with k < j */
        bool seen = false; /* T_SLASH_DSTAR: some prev[k] with s[k] == '/' and k < j */
        for (size_t j = 0; j <= n; j++) {
            bool v;
            switch (t->kind) {
            case T_STAR:
                v = prev[j] || (j > 0 && cur[j - 1] && (mode == GLOB_TEXT || s[j - 1] != '/'));
                break;
            case T_DSTAR: v = prev[j] || (j > 0 && cur[j - 1]); break;
            case T_DSTAR_DIR:
                v = prev[j] || (j > 0 && s[j - 1] == '/' && any);
                break;
            case T_SLASH_DSTAR:
                v = prev[j] || seen;
                break;
            default: v = j > 0 && prev[j - 1] && one_ok(t, s[j - 1], mode); break;
            }
            cur[j] = v;
            if (j < n) {
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
    return m;
}
