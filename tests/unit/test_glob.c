/* Unit tests: base/glob, the one glob matcher (policy approval/writable
 * globs, spec helpers, tern-sandboxd --writable rules). Tables from the three
 * former matchers, then a differential run against the naive reference in
 * tests/fuzz/glob_ref.h. */
#include "harness.h"

#include "../fuzz/glob_ref.h"
#include "base/glob.h"
#include "base/limits.h"
#include "base/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WSMODE (GLOB_PATH | GLOB_PERIOD | GLOB_NO_DIR_SELF)

static const struct {
    const char *pat, *s;
    unsigned mode;
    bool want;
} cases[] = {
    /* from the policy matcher */
    {"git push*", "git push origin fix", GLOB_TEXT, true},
    {"git push*", "git push origin feature/x", GLOB_TEXT, true},
    {"git push*", "git pull", GLOB_TEXT, false},
    {"git push*", " git push", GLOB_TEXT, false},
    {"*rm -rf*", "cd x && rm -rf /", GLOB_TEXT, true},
    {"curl ?ttp*", "curl http://x", GLOB_TEXT, true},
    {"output/**", "output/a/b.md", GLOB_PATH, true},
    {"output/**", "output", GLOB_PATH, true},
    {"output/**", "outputs/x", GLOB_PATH, false},
    {"output/**", "working/output/x", GLOB_PATH, false},
    {"output/*", "output/a", GLOB_PATH, true},
    {"output/*", "output/a/b", GLOB_PATH, false},
    {"output/*.md", "output/r.md", GLOB_PATH, true},
    {"**/*.md", "a/b/c.md", GLOB_PATH, true},
    {"**/*.md", "c.md", GLOB_PATH, true},
    {"**/*.md", "c.txt", GLOB_PATH, false},
    {"a/**/b", "a/b", GLOB_PATH, true},
    {"a/**/b", "a/x/y/b", GLOB_PATH, true},
    {"a/**/b", "a/xb", GLOB_PATH, false},
    {"**", "anything/at/all", GLOB_PATH, true},
    {"*", "a/b", GLOB_PATH, false},
    {"*", "a/b", GLOB_TEXT, true},
    {"?", "/", GLOB_PATH, false},
    {"[a-c]x", "bx", GLOB_PATH, true},
    {"[a-c]x", "dx", GLOB_PATH, false},
    {"[!a-c]x", "dx", GLOB_PATH, true},
    {"[^a-c]x", "ax", GLOB_PATH, false},
    {"[]]", "]", GLOB_PATH, true},
    {"\\*", "*", GLOB_PATH, true},
    {"\\*", "a", GLOB_PATH, false},
    {"[abc", "a", GLOB_PATH, false}, /* malformed: matches nothing */
    {"abc\\", "abc", GLOB_PATH, false},
    {"[z-a]", "m", GLOB_PATH, false},
    {"", "", GLOB_PATH, true},
    {"", "a", GLOB_PATH, false},
    {"*a*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", GLOB_TEXT, false},
    /* from the spec matcher (path=false is GLOB_TEXT) */
    {"git push*", "git push origin main", GLOB_TEXT, true},
    {"*rm -rf*", "cd /; rm -rf /", GLOB_TEXT, true},
    {"output/**", "output/a/b/c.md", GLOB_PATH, true},
    {"working/*.py", "working/x.py", GLOB_PATH, true},
    {"working/*.py", "working/d/x.py", GLOB_PATH, false},
    {"working/**/*.py", "working/d/e/x.py", GLOB_PATH, true},
    {"working/**/*.py", "working/x.py", GLOB_PATH, true}, /* the spec matcher said no */
    {"a?c", "abc", GLOB_PATH, true},
    {"a?c", "a/c", GLOB_PATH, false},
    {"a?c", "a/c", GLOB_TEXT, true},
    {"***", "a/b", GLOB_PATH, true},
    {"git push **", "git push a/b", GLOB_TEXT, true},
    /* from tern-sandboxd's matcher */
    {"a/**/z", "a/z", WSMODE, true},
    {"a/**/z", "a/b/c/z", WSMODE, true},
    {"a/**/z", "a/b/c/y", WSMODE, false},
    {"a/*", "a/.hidden", WSMODE, false},
    {"a/?hidden", "a/.hidden", WSMODE, false},
    {"a/[.]hidden", "a/.hidden", WSMODE, false},
    {"a/.*", "a/.hidden", WSMODE, true},
    {"a/*.md", "a/x.y.md", WSMODE, true},
    {"working/**", "working", WSMODE, false},
    {"working/**", "working/a", WSMODE, true},
    {"working/**", "working/.git/config", WSMODE, true},
    {"working/**/*", "working/.env", WSMODE, false},
    {"notes/*.md", "notes/sub/x.md", WSMODE, false},
    /* the flags alone */
    {"a/*", "a/.hidden", GLOB_PATH, true},
    {"*", ".x", GLOB_PATH | GLOB_PERIOD, false},
    {"*", ".x", GLOB_TEXT | GLOB_PERIOD, true},
    {"out/**", "out", GLOB_PATH | GLOB_NO_DIR_SELF, false},
    {"out/**", "out/", GLOB_PATH | GLOB_NO_DIR_SELF, false},
    {"out/**", "out/", GLOB_PATH, true},
    {"out/**", "out", GLOB_TEXT | GLOB_NO_DIR_SELF, false},
    {"out/**", "out/x/y", GLOB_TEXT | GLOB_NO_DIR_SELF, true},
    {"[/]", "/", GLOB_PATH, false},
    {"[/]", "/", GLOB_TEXT, true},
    {"[!a]", "/", GLOB_TEXT, true},
    {"a**b", "a/x/b", GLOB_PATH, true},
};

TEST(glob_table)
{
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (glob_match(cases[i].pat, cases[i].s, cases[i].mode) != cases[i].want)
            th_fail(__FILE__, __LINE__, "case %zu: \"%s\" vs \"%s\" mode %u: expected %d", i,
                    cases[i].pat, cases[i].s, cases[i].mode, cases[i].want);
        if (strlen(cases[i].s) <= 20 && /* the reference is exponential */
            ref_match(cases[i].pat, cases[i].s, cases[i].mode) != cases[i].want)
            th_fail(__FILE__, __LINE__, "reference, case %zu: \"%s\" vs \"%s\": expected %d", i,
                    cases[i].pat, cases[i].s, cases[i].want);
    }
}

TEST(glob_valid_and_bounds)
{
    ASSERT_TRUE(glob_valid("output/**"));
    ASSERT_TRUE(glob_valid("[]]"));
    ASSERT_TRUE(glob_valid("a\\[b"));
    ASSERT_FALSE(glob_valid("[x"));
    ASSERT_FALSE(glob_valid("[\\"));
    ASSERT_FALSE(glob_valid("x\\"));
    ASSERT_FALSE(glob_valid("[b-a]"));
    ASSERT_FALSE(glob_valid(NULL));
    ASSERT_FALSE(glob_match(NULL, "", GLOB_PATH));
    ASSERT_FALSE(glob_match("", NULL, GLOB_PATH));
    char *p = xcalloc(TERN_GLOB_MAX_PATTERN + 2, 1);
    memset(p, 'a', TERN_GLOB_MAX_PATTERN);
    ASSERT_TRUE(glob_valid(p));
    ASSERT_TRUE(glob_match(p, p, GLOB_PATH));
    p[TERN_GLOB_MAX_PATTERN] = 'a';
    ASSERT_FALSE(glob_valid(p));
    ASSERT_FALSE(glob_match(p, p, GLOB_PATH));
    free(p);
}

TEST_T(glob_long_input_is_polynomial, 20)
{
    size_t n = 60000;
    char *s = xcalloc(n + 1, 1);
    memset(s, 'a', n);
    ASSERT_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", s, GLOB_TEXT));
    ASSERT_TRUE(glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*", s, GLOB_TEXT));
    ASSERT_FALSE(glob_match("**a**a**a**a**a**a**a**a**a**a**b", s, GLOB_PATH));
    free(s);
    /* 100 stars against 4000 characters (the spec matcher's test) */
    char g[202], t[4001];
    for (int i = 0; i < 100; i++) {
        g[2 * i] = '*';
        g[2 * i + 1] = 'a';
    }
    g[200] = 'b';
    g[201] = '\0';
    memset(t, 'a', 4000);
    t[4000] = '\0';
    ASSERT_FALSE(glob_match(g, t, GLOB_TEXT));
    ASSERT_FALSE(glob_match(g, t, GLOB_PATH | GLOB_PERIOD));
}

/* Random short patterns and subjects over small alphabets rich in the
 * special characters: the DP must agree with the naive reference. */
TEST_T(glob_agrees_with_reference, 60)
{
    static const char pa[] = "ab/.*?[]!^-\\";
    static const char sa[] = "ab/.-]";
    static const unsigned modes[] = {GLOB_PATH, GLOB_TEXT, GLOB_PATH | GLOB_PERIOD,
                                     GLOB_PATH | GLOB_NO_DIR_SELF,
                                     GLOB_PATH | GLOB_PERIOD | GLOB_NO_DIR_SELF};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    size_t matches = 0, valid = 0;
    for (int it = 0; it < 200000; it++) {
        char p[12], s[12];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t pl = (x >> 33) % 10, sl = (x >> 45) % 10;
        for (size_t i = 0; i < pl; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            p[i] = pa[(x >> 33) % (sizeof pa - 1)];
        }
        for (size_t i = 0; i < sl; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            s[i] = sa[(x >> 33) % (sizeof sa - 1)];
        }
        p[pl] = s[sl] = '\0';
        unsigned mode = modes[it % (sizeof modes / sizeof *modes)];
        bool want = ref_match(p, s, mode), got = glob_match(p, s, mode);
        if (want != got)
            th_fail(__FILE__, __LINE__, "\"%s\" vs \"%s\" mode %u: reference %d, glob %d", p, s,
                    mode, want, got);
        if (glob_valid(p) != ref_valid(p))
            th_fail(__FILE__, __LINE__, "glob_valid(\"%s\") disagrees", p);
        matches += got;
        valid += ref_valid(p);
    }
    /* the generator must exercise both outcomes */
    ASSERT_CMP_INT(matches, >, 1000);
    ASSERT_CMP_INT(valid, >, 50000);
}
