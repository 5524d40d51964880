/* Unit tests: trusted/sanitize (credential redaction, pure). */
#include "harness.h"

#include "base/base64.h"
#include "base/limits.h"
#include "base/mem.h"
#include "trusted/sanitize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN "ghp_S3cr3tT0kenValue42"

/* An independent check: base64-decode every run of base64 characters in
 * out at each of the four offsets and look for any 6-byte piece of the
 * token in the bytes (what an observer could recover). */
static bool token_recoverable(const char *out)
{
    static const char std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    static const char url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const char *tok = TOKEN;
    size_t tl = strlen(tok);
    for (int alpha = 0; alpha < 2; alpha++) {
        const char *abc = alpha ? url : std;
        const char *p = out;
        while (*p) {
            size_t run = 0;
            while (p[run] && strchr(abc, p[run]))
                run++;
            for (size_t off = 0; off < 4 && run >= off + 4; off++) {
                unsigned char dec[512];
                size_t dn = 0;
                for (size_t i = off; i + 4 <= run && dn + 3 <= sizeof dec; i += 4) {
                    unsigned v = 0;
                    for (int k = 0; k < 4; k++)
                        v = v << 6 | (unsigned)(strchr(abc, p[i + k]) - abc);
                    dec[dn++] = (unsigned char)(v >> 16);
                    dec[dn++] = (unsigned char)(v >> 8);
                    dec[dn++] = (unsigned char)v;
                }
                for (size_t t = 0; t + 6 <= tl; t++)
                    if (memmem(dec, dn, tok + t, 6))
                        return true;
            }
            p += run ? run : 1;
        }
    }
    return false;
}

static char *clean(const struct sanitize *s, const char *in)
{
    return sanitize_text(s, in, strlen(in), 0, NULL);
}

static void no_token(const struct sanitize *s, const char *in)
{
    char *out = clean(s, in);
    if (strstr(out, "S3cr3t") || sanitize_contains(s, out, strlen(out)))
        th_fail(__FILE__, __LINE__, "left in: \"%s\" -> \"%s\"", in, out);
    ASSERT_CONTAINS(out, SANITIZE_MARK);
    free(out);
}

TEST(sanitize_raw_value_everywhere)
{
    struct sanitize s;
    sanitize_init(&s);
    ASSERT_OK(sanitize_add(&s, TOKEN, strlen(TOKEN), NULL));
    struct sanitize_stats st;
    const char *in = "Authorization: Bearer " TOKEN "\nagain " TOKEN TOKEN " end";
    char *out = sanitize_text(&s, in, strlen(in), 0, &st);
    ASSERT_EQ_STR(out, "Authorization: Bearer [redacted]\nagain [redacted][redacted] end");
    ASSERT_EQ_INT(st.replaced, 3);
    ASSERT_FALSE(st.truncated);
    free(out);
    /* text without it is unchanged */
    out = clean(&s, "nothing to see: ghp_ S3cr");
    ASSERT_EQ_STR(out, "nothing to see: ghp_ S3cr");
    free(out);
    sanitize_done(&s);
}

TEST(sanitize_base64_at_every_alignment)
{
    struct sanitize s;
    sanitize_init(&s);
    ASSERT_OK(sanitize_add(&s, TOKEN, strlen(TOKEN), NULL));
    /* base64 of the value alone, and inside longer encoded texts (a Basic
     * header "user:token" with user names of every length mod 3, text
     * after it) */
    const char *prefixes[] = {"", "x", "xy", "x-access-token:", "oauth2:", "ab:", "user:"};
    const char *suffixes[] = {"", "\n", "!!", "and more text after the token"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        for (size_t j = 0; j < sizeof suffixes / sizeof *suffixes; j++) {
            char *plain = xasprintf("%s%s%s", prefixes[i], TOKEN, suffixes[j]);
            char *enc = base64_encode(plain, strlen(plain));
            char *text = xasprintf("Authorization: Basic %s\r\n", enc);
            char *out = clean(&s, text);
            /* nothing of the token can be decoded from what is left */
            if (!token_recoverable(text))
                th_fail(__FILE__, __LINE__, "%s: the check cannot see the token in %s", plain,
                        text);
            if (token_recoverable(out))
                th_fail(__FILE__, __LINE__, "%s: token recoverable from %s", plain, out);
            ASSERT_CONTAINS(out, SANITIZE_MARK);
            /* URL-safe alphabet too */
            for (char *p = enc; *p; p++)
                *p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
            char *text2 = xasprintf("token=%s", enc);
            char *out2 = clean(&s, text2);
            if (token_recoverable(out2))
                th_fail(__FILE__, __LINE__, "%s: token recoverable from %s", plain, out2);
            free(out2);
            free(text2);
            free(out);
            free(text);
            free(enc);
            free(plain);
        }
    sanitize_done(&s);
}

TEST(sanitize_percent_and_json_forms)
{
    struct sanitize s;
    sanitize_init(&s);
    const char *v = "p@ss/w:rd\"+secret";
    ASSERT_OK(sanitize_add(&s, v, strlen(v), NULL));
    no_token(&s, "https://x:p%40ss%2Fw%3Ard%22%2Bsecret@example.com/");
    no_token(&s, "https://x:p%40ss%2fw%3ard%22%2bsecret@example.com/");
    no_token(&s, "{\"password\":\"p@ss/w:rd\\\"+secret\"}");
    no_token(&s, "raw p@ss/w:rd\"+secret");
    sanitize_done(&s);
}

TEST(sanitize_cut_keeps_no_half_value)
{
    struct sanitize s;
    sanitize_init(&s);
    ASSERT_OK(sanitize_add(&s, TOKEN, strlen(TOKEN), NULL));
    /* a value right at the cut is replaced before cutting */
    char in[200];
    memset(in, 'a', 30);
    snprintf(in + 30, sizeof in - 30, "%s tail", TOKEN);
    struct sanitize_stats st;
    char *out = sanitize_text(&s, in, strlen(in), 40, &st);
    ASSERT_TRUE(st.truncated);
    ASSERT_TRUE(strlen(out) <= 40);
    ASSERT_TRUE(strstr(out, "ghp_S3") == NULL);
    free(out);
    /* a value already cut off by an earlier bound, at the end */
    const char *cut = "output ends in ghp_S3cr3tT0k";
    out = sanitize_text(&s, cut, strlen(cut), 0, &st);
    ASSERT_EQ_STR(out, "output ends in [redacted]");
    ASSERT_EQ_INT(st.replaced, 1);
    free(out);
    /* but not a short, ordinary tail */
    out = clean(&s, "it ends with ghp_S");
    ASSERT_EQ_STR(out, "it ends with ghp_S");
    free(out);
    /* UTF-8 is never split by the cut */
    const char *u = "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                    "\xc3\xa9\xc3\xa9\xc3\xa9";
    out = sanitize_text(&s, u, strlen(u), 20, &st);
    ASSERT_TRUE(st.truncated);
    size_t body = strlen(out) - strlen("\n[truncated]");
    ASSERT_EQ_INT(body % 2, 0);
    free(out);
    sanitize_done(&s);
}

TEST(sanitize_refuses_what_would_match_anywhere)
{
    struct sanitize s;
    sanitize_init(&s);
    struct tern_err e = {0};
    ASSERT_EQ_INT(sanitize_add(&s, "abc", 3, &e), TERN_EINVALID);
    ASSERT_EQ_INT(sanitize_add(&s, "a\0bcdef", 7, &e), TERN_EINVALID);
    char *big = xmalloc(TERN_SANITIZE_MAX_SECRET + 1);
    memset(big, 'x', TERN_SANITIZE_MAX_SECRET + 1);
    ASSERT_EQ_INT(sanitize_add(&s, big, TERN_SANITIZE_MAX_SECRET + 1, &e), TERN_EINVALID);
    free(big);
    for (int i = 0; i < TERN_SANITIZE_MAX_SECRETS; i++) {
        char v[32];
        snprintf(v, sizeof v, "value-%04d", i);
        ASSERT_OK(sanitize_add(&s, v, strlen(v), &e));
    }
    ASSERT_EQ_INT(sanitize_add(&s, "one-too-many", 12, &e), TERN_ETOOLARGE);
    /* a short value is replaced raw, but its short derived forms are not
     * searched (base64 of "abcd" is 6 characters: too common to remove) */
    sanitize_done(&s);
    sanitize_init(&s);
    ASSERT_OK(sanitize_add(&s, "abcd", 4, &e));
    char *out = clean(&s, "xabcdx YWJj Y2Q");
    ASSERT_EQ_STR(out, "x[redacted]x YWJj Y2Q");
    free(out);
    sanitize_done(&s);
}

TEST(sanitize_no_secrets_only_bounds)
{
    struct sanitize s;
    sanitize_init(&s);
    char *out = sanitize_text(&s, "hello", 5, 0, NULL);
    ASSERT_EQ_STR(out, "hello");
    free(out);
    ASSERT_NULL(sanitize_str(&s, NULL));
    /* many short values next to each other: the output may grow past the
     * input (a mark is longer than a 4-byte value) without losing text */
    ASSERT_OK(sanitize_add(&s, "zzzz", 4, NULL));
    size_t n = 1u << 16;
    char *in = xmalloc(n + 1);
    for (size_t i = 0; i < n; i++)
        in[i] = "zzzz"[i % 4];
    in[n] = 0;
    struct sanitize_stats st;
    out = sanitize_text(&s, in, n, 0, &st);
    ASSERT_EQ_INT(st.replaced, n / 4);
    ASSERT_EQ_INT(strlen(out), n / 4 * strlen(SANITIZE_MARK));
    free(out);
    free(in);
    sanitize_done(&s);
}
