/* Unit tests for json/: the strict parser, exact integers, typed getters. */
#include "harness.h"

#include "base/buf.h"
#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>

static cJSON *parse_ok(const char *s)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    int r = json_parse(s, strlen(s), &j, &e);
    if (r)
        th_fail(__FILE__, __LINE__, "parse of %s failed: %s", s, e.msg);
    return j;
}

static void expect_error(const char *s, int code, const char *msg_part)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    int r = json_parse(s, strlen(s), &j, &e);
    if (r != code)
        th_fail(__FILE__, __LINE__, "parse of <%s>: got %d, expected %d (%s)", s, r, code, e.msg);
    ASSERT_NULL(j);
    ASSERT_CONTAINS(e.msg, msg_part);
}

TEST(json_parses_all_value_kinds)
{
    cJSON *j = parse_ok(" {\"a\": [1, -2.5e3, true, false, null, \"x\\u00e9\\ud83d\\ude00\"],"
                        " \"b\": {}} ");
    const cJSON *a = json_get(j, "a");
    ASSERT_EQ_INT(cJSON_GetArraySize(a), 6);
    ASSERT_TRUE(cJSON_GetArrayItem(a, 1)->valuedouble == -2500.0);
    ASSERT_EQ_STR(cJSON_GetArrayItem(a, 5)->valuestring, "x\xc3\xa9\xf0\x9f\x98\x80");
    char *out = json_print(j);
    ASSERT_EQ_STR(out, "{\"a\":[1,-2.5e3,true,false,null,\"x\xc3\xa9\xf0\x9f\x98\x80\"],\"b\":{}}");
    free(out);
    cJSON_Delete(j);
}

TEST(json_int64_exact)
{
    cJSON *j = parse_ok("{\"rev\": 9223372036854775807, \"s\": \"9007199254740993\", \"f\": 1.5}");
    int64_t v = 0;
    ASSERT_OK(json_get_int64(j, "", "rev", JSON_REQUIRED, &v, NULL));
    ASSERT_TRUE(v == INT64_MAX);
    ASSERT_OK(json_get_int64(j, "", "s", JSON_REQUIRED, &v, NULL));
    ASSERT_TRUE(v == 9007199254740993LL);
    struct tern_err e = {0};
    ASSERT_EQ_INT(json_get_int64(j, "spec", "f", JSON_REQUIRED, &v, &e), TERN_EINVALID);
    ASSERT_EQ_STR(e.msg, "spec.f: must be an integer");
    char *out = json_print(j);
    ASSERT_CONTAINS(out, "9223372036854775807");
    free(out);
    cJSON *o = cJSON_CreateObject();
    json_add_int64(o, "n", 9007199254740993LL);
    out = json_print(o);
    ASSERT_EQ_STR(out, "{\"n\":9007199254740993}");
    free(out);
    cJSON_Delete(o);
    cJSON_Delete(j);
}

TEST(json_rejects_malformed)
{
    expect_error("", TERN_EPARSE, "unexpected end");
    expect_error("{", TERN_EPARSE, "offset 1");
    expect_error("{\"a\":1,}", TERN_EPARSE, "expected a string key");
    expect_error("[1 2]", TERN_EPARSE, "expected ','");
    expect_error("01", TERN_EPARSE, "trailing data");
    expect_error("1.", TERN_EPARSE, "bad fraction");
    expect_error("\"\x01\"", TERN_EPARSE, "control character");
    expect_error("\"\xff\"", TERN_EPARSE, "invalid UTF-8");
    expect_error("\"\\ud800\"", TERN_EPARSE, "unpaired surrogate");
    expect_error("\"\\q\"", TERN_EPARSE, "bad escape");
    expect_error("tru", TERN_EPARSE, "unexpected character");
    expect_error("{} {}", TERN_EPARSE, "trailing data");
}

TEST(json_duplicates_rejected_or_last_wins)
{
    expect_error("{\"spec\":{\"a\":1,\"a\":2}}", TERN_EPARSE, "duplicate field \"spec.a\"");
    struct json_parse_opts o = {.dups = JSON_DUPS_LAST_WINS};
    cJSON *j = NULL;
    const char *s = "{\"spec\":{\"a\":1,\"b\":0,\"a\":2}}";
    ASSERT_OK(json_parse_opts(s, strlen(s), &o, &j, NULL));
    ASSERT_EQ_STR(o.dup_path, "spec.a");
    int64_t v = 0;
    ASSERT_OK(json_get_int64(json_get(j, "spec"), "spec", "a", JSON_REQUIRED, &v, NULL));
    ASSERT_EQ_INT(v, 2);
    ASSERT_EQ_INT(cJSON_GetArraySize(json_get(j, "spec")), 2);
    cJSON_Delete(j);
}

TEST(json_many_keys_duplicate_detection_is_fast)
{
    /* 100k members: a quadratic scan would take minutes; the hash takes ms */
    struct buf b;
    buf_init(&b, 8 << 20);
    buf_putc(&b, '{');
    for (int i = 0; i < 100000; i++)
        buf_printf(&b, "%s\"k%d\":%d", i ? "," : "", i, i);
    buf_puts(&b, ",\"k777\":0}");
    cJSON *j = NULL;
    struct tern_err e = {0};
    ASSERT_EQ_INT(json_parse(b.data, b.len, &j, &e), TERN_EPARSE);
    ASSERT_CONTAINS(e.msg, "duplicate field \"k777\"");
    buf_done(&b);
}

TEST(json_limits)
{
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    cJSON *j = NULL;
    struct tern_err e = {0};
    ASSERT_EQ_INT(json_parse(deep, 200, &j, &e), TERN_ETOOLARGE);
    ASSERT_CONTAINS(e.msg, "nesting too deep");
    struct json_parse_opts o = {.max_bytes = 4};
    ASSERT_EQ_INT(json_parse_opts("[1,2]", 5, &o, &j, &e), TERN_ETOOLARGE);
}

TEST(json_getters_name_the_path)
{
    cJSON *j = parse_ok("{\"name\":\"x\",\"n\":0,\"on\":true,\"o\":{},\"l\":[],\"z\":null}");
    struct tern_err e = {0};
    const char *s = "default";
    ASSERT_OK(json_get_string(j, "spec", "missing", JSON_OPTIONAL, &s, &e));
    ASSERT_EQ_STR(s, "default");
    ASSERT_OK(json_get_string(j, "spec", "z", JSON_OPTIONAL, &s, &e)); /* null = absent */
    ASSERT_EQ_INT(json_get_string(j, "spec", "missing", JSON_REQUIRED, &s, &e), TERN_EINVALID);
    ASSERT_EQ_STR(e.msg, "spec.missing: Required value");
    ASSERT_EQ_INT(json_get_string(j, "spec", "n", JSON_REQUIRED, &s, &e), TERN_EINVALID);
    ASSERT_EQ_STR(e.msg, "spec.n: must be a string");
    int64_t v = 5;
    ASSERT_EQ_INT(json_get_int_range(j, "spec.limits", "n", JSON_REQUIRED, 1, 10, &v, &e),
                  TERN_EINVALID);
    ASSERT_EQ_STR(e.msg, "spec.limits.n: must be >= 1");
    ASSERT_EQ_INT(v, 5);
    bool on = false;
    ASSERT_OK(json_get_bool(j, "", "on", JSON_REQUIRED, &on, &e));
    ASSERT_TRUE(on);
    const cJSON *o = NULL, *l = NULL;
    ASSERT_OK(json_get_object(j, "", "o", JSON_REQUIRED, &o, &e));
    ASSERT_OK(json_get_array(j, "", "l", JSON_REQUIRED, &l, &e));
    ASSERT_EQ_INT(json_get_array(j, "", "o", JSON_REQUIRED, &l, &e), TERN_EINVALID);
    ASSERT_EQ_STR(e.msg, "o: must be an array");
    ASSERT_NULL(json_get(j, "NAME")); /* case-sensitive */
    cJSON_Delete(j);
}

TEST(json_dup_keeps_number_text)
{
    cJSON *j = parse_ok("{\"a\":[12345678901234567]}");
    cJSON *c = json_dup(j);
    char *s = json_print(c);
    ASSERT_EQ_STR(s, "{\"a\":[12345678901234567]}");
    free(s);
    cJSON_Delete(c);
    cJSON_Delete(j);
}

TEST(json_equal_ignores_member_order_and_number_form)
{
    cJSON *a = parse_ok("{\"a\":1,\"b\":[1,{\"x\":null}],\"c\":\"s\"}");
    cJSON *b = parse_ok("{\"c\":\"s\",\"b\":[1,{\"x\":null}],\"a\":1.0}");
    ASSERT_TRUE(json_equal(a, b));
    cJSON *c = cJSON_CreateObject();
    json_add_int64(c, "a", 1);
    cJSON *d = parse_ok("{\"a\":1}");
    ASSERT_TRUE(json_equal(c, d));
    cJSON *e = parse_ok("{\"a\":2}");
    ASSERT_FALSE(json_equal(d, e));
    cJSON *f = parse_ok("{\"b\":[{\"x\":null},1],\"a\":1,\"c\":\"s\"}");
    ASSERT_FALSE(json_equal(a, f)); /* array order matters */
    cJSON *g = parse_ok("{\"a\":1,\"b\":[1,{\"x\":null}]}");
    ASSERT_FALSE(json_equal(a, g));
    ASSERT_FALSE(json_equal(g, a));
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
    cJSON_Delete(d);
    cJSON_Delete(e);
    cJSON_Delete(f);
    cJSON_Delete(g);
}
