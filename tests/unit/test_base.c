/* Unit tests for base/: buf, num, base64, err. */
#include "harness.h"

#include "base/base64.h"
#include "base/buf.h"
#include "base/err.h"
#include "base/num.h"
#include "http/httpc.h"

#include <errno.h>
#include <stdlib.h>

TEST(buf_appends_and_bounds)
{
    struct buf b;
    buf_init(&b, 8);
    ASSERT_EQ_STR(buf_str(&b), "");
    ASSERT_OK(buf_puts(&b, "abc"));
    ASSERT_OK(buf_printf(&b, "%d%s", 12, "x"));
    ASSERT_EQ_STR(buf_str(&b), "abc12x");
    ASSERT_EQ_INT(buf_puts(&b, "xyz"), TERN_ETOOLARGE);
    ASSERT_EQ_STR(buf_str(&b), "abc12x"); /* unchanged on failure */
    ASSERT_EQ_INT(buf_printf(&b, "%s", "123"), TERN_ETOOLARGE);
    ASSERT_OK(buf_puts(&b, "yz"));
    ASSERT_EQ_INT(b.len, 8);
    buf_consume(&b, 3);
    ASSERT_EQ_STR(buf_str(&b), "12xyz");
    char *s = buf_steal(&b);
    ASSERT_EQ_STR(s, "12xyz");
    free(s);
    ASSERT_EQ_INT(b.len, 0);
    buf_done(&b);
}

TEST(buf_grows_past_initial_capacity)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i < 10000; i++)
        ASSERT_OK(buf_putc(&b, (char)('a' + i % 26)));
    ASSERT_EQ_INT(b.len, 10000);
    ASSERT_EQ_INT(b.data[9999], 'a' + 9999 % 26);
    ASSERT_EQ_INT(b.data[10000], 0);
    buf_done(&b);
}

TEST(num_parse_i64_strict)
{
    int64_t v = 7;
    ASSERT_OK(num_parse_i64("0", &v));
    ASSERT_EQ_INT(v, 0);
    ASSERT_OK(num_parse_i64("-42", &v));
    ASSERT_EQ_INT(v, -42);
    ASSERT_OK(num_parse_i64("9223372036854775807", &v));
    ASSERT_TRUE(v == INT64_MAX);
    ASSERT_OK(num_parse_i64("-9223372036854775808", &v));
    ASSERT_TRUE(v == INT64_MIN);
    v = 5;
    ASSERT_EQ_INT(num_parse_i64("9223372036854775808", &v), -ERANGE);
    ASSERT_EQ_INT(num_parse_i64("-9223372036854775809", &v), -ERANGE);
    ASSERT_EQ_INT(num_parse_i64("", &v), -EINVAL);
    ASSERT_EQ_INT(num_parse_i64("-", &v), -EINVAL);
    ASSERT_EQ_INT(num_parse_i64(" 1", &v), -EINVAL);
    ASSERT_EQ_INT(num_parse_i64("1 ", &v), -EINVAL);
    ASSERT_EQ_INT(num_parse_i64("12a", &v), -EINVAL);
    ASSERT_EQ_INT(num_parse_i64("+1", &v), -EINVAL);
    ASSERT_EQ_INT(v, 5); /* untouched on error */
}

TEST(num_parse_unsigned_range_hex)
{
    uint64_t u;
    ASSERT_OK(num_parse_u64("18446744073709551615", &u));
    ASSERT_TRUE(u == UINT64_MAX);
    ASSERT_EQ_INT(num_parse_u64("18446744073709551616", &u), -ERANGE);
    ASSERT_EQ_INT(num_parse_u64("-1", &u), -EINVAL);
    int64_t v;
    ASSERT_OK(num_parse_range("10", 1, 10, &v));
    ASSERT_EQ_INT(num_parse_range("11", 1, 10, &v), -ERANGE);
    ASSERT_OK(num_parse_hex64("00000000000000ff", 16, &u));
    ASSERT_EQ_INT(u, 255);
    ASSERT_EQ_INT(num_parse_hex64("0g", 2, &u), -EINVAL);
    ASSERT_EQ_INT(num_parse_hex64("11112222333344445", 17, &u), -ERANGE);
    char out[21];
    ASSERT_EQ_STR(num_fmt_i64(INT64_MIN, out), "-9223372036854775808");
}

TEST(base64_round_trip_and_padding)
{
    const char *cases[][2] = {
        {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foobar", "Zm9vYmFy"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *e = base64_encode(cases[i][0], strlen(cases[i][0]));
        ASSERT_EQ_STR(e, cases[i][1]);
        free(e);
        unsigned char *d = NULL;
        size_t n = 99;
        ASSERT_OK(base64_decode(cases[i][1], strlen(cases[i][1]), &d, &n));
        ASSERT_EQ_INT(n, strlen(cases[i][0])); /* padding not counted */
        ASSERT_MEM_EQ(d, cases[i][0], n);
        free(d);
    }
    unsigned char bin[256];
    for (int i = 0; i < 256; i++)
        bin[i] = (unsigned char)i;
    char *e = base64_encode(bin, sizeof bin);
    unsigned char *d;
    size_t n;
    ASSERT_OK(base64_decode(e, strlen(e), &d, &n));
    ASSERT_EQ_INT(n, 256);
    ASSERT_MEM_EQ(d, bin, 256);
    free(d);
    free(e);
}

TEST(base64_rejects_garbage)
{
    unsigned char *d;
    size_t n;
    ASSERT_EQ_INT(base64_decode("Zg=", 3, &d, &n), -EINVAL);
    ASSERT_EQ_INT(base64_decode("Z!==", 4, &d, &n), -EINVAL);
    ASSERT_EQ_INT(base64_decode("Z=g=", 4, &d, &n), -EINVAL);
    ASSERT_EQ_INT(base64_decode("====", 4, &d, &n), -EINVAL);
}

TEST(err_set_and_wrap)
{
    struct tern_err e = {0};
    ASSERT_EQ_INT(err_set(&e, TERN_EINVALID, "field %s", "x"), TERN_EINVALID);
    ASSERT_EQ_STR(e.msg, "field x");
    ASSERT_EQ_INT(err_wrap(&e, -EIO, "loading %s", "f.yaml"), TERN_EINVALID);
    ASSERT_EQ_STR(e.msg, "loading f.yaml: field x");
    ASSERT_EQ_INT(err_set(NULL, -EIO, "ignored"), -EIO);
    ASSERT_EQ_STR(err_str(TERN_EFENCED), "fenced out by another writer");
    ASSERT_EQ_STR(err_str(-ENOENT), "No such file or directory");
}

TEST(buf_json_string_escapes)
{
    struct buf b;
    buf_init(&b, 256);
    ASSERT_OK(buf_put_json_string(&b, "a\"b\\c\n\t\x01\xc3\xa9"));
    ASSERT_EQ_STR(buf_str(&b), "\"a\\\"b\\\\c\\n\\t\\u0001\xc3\xa9\"");
    buf_done(&b);
    buf_init(&b, 4);
    ASSERT_EQ_INT(buf_put_json_string(&b, "long string"), TERN_ETOOLARGE);
    buf_done(&b);
}

TEST(httpc_escapes_segments_and_paths)
{
    char *a = httpc_escape("a b/c%");
    ASSERT_EQ_STR(a, "a%20b%2Fc%25");
    char *b = httpc_escape_path("output/a b/../c%");
    ASSERT_EQ_STR(b, "output/a%20b/../c%25");
    free(a);
    free(b);
}
