/* Unit tests for json/jschema: the schema subset, validation errors, answers. */
#include "harness.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "json/jschema.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

static cJSON *J(const char *s)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    if (json_parse(s, strlen(s), &j, &e))
        th_fail(__FILE__, __LINE__, "parse of %s failed: %s", s, e.msg);
    return j;
}

/* The schema's check message ("" when accepted). */
static char *check_msg(const char *schema)
{
    cJSON *s = J(schema);
    struct tern_err e = {0};
    int r = jschema_check(s, &e);
    cJSON_Delete(s);
    return xstrdup(r ? e.msg : "");
}

/* The validation report of instance ("" when valid). */
static char *errors(const char *schema, const char *instance)
{
    cJSON *s = J(schema), *i = J(instance);
    struct tern_err e = {0};
    if (jschema_check(s, &e))
        th_fail(__FILE__, __LINE__, "schema %s refused: %s", schema, e.msg);
    struct jschema_report rep = {0};
    if (jschema_validate(s, i, &rep))
        th_fail(__FILE__, __LINE__, "validate failed");
    char *t = xstrdup(rep.text);
    if ((rep.nerrors == 0) != (t[0] == 0))
        th_fail(__FILE__, __LINE__, "nerrors %zu but text <%s>", rep.nerrors, t);
    jschema_report_done(&rep);
    cJSON_Delete(s);
    cJSON_Delete(i);
    return t;
}

#define EXPECT_VALID(schema, inst)                                                                 \
    do {                                                                                           \
        char *t_ = errors(schema, inst);                                                           \
        ASSERT_EQ_STR(t_, "");                                                                     \
        free(t_);                                                                                  \
    } while (0)

#define EXPECT_ERROR(schema, inst, text)                                                           \
    do {                                                                                           \
        char *t_ = errors(schema, inst);                                                           \
        ASSERT_EQ_STR(t_, text);                                                                   \
        free(t_);                                                                                  \
    } while (0)

#define EXPECT_REFUSED(schema, text)                                                               \
    do {                                                                                           \
        char *t_ = check_msg(schema);                                                              \
        ASSERT_CONTAINS(t_, text);                                                                 \
        free(t_);                                                                                  \
    } while (0)

TEST(jschema_types)
{
    EXPECT_VALID("{\"type\":\"integer\"}", "3");
    EXPECT_VALID("{\"type\":\"integer\"}", "3.0");
    EXPECT_ERROR("{\"type\":\"integer\"}", "3.5",
                 "at \"\": type: expected \"integer\", got number (not an integer)");
    EXPECT_VALID("{\"type\":\"number\"}", "3.5");
    EXPECT_ERROR("{\"type\":\"string\"}", "1", "at \"\": type: expected \"string\", got number");
    EXPECT_VALID("{\"type\":[\"string\",\"null\"]}", "null");
    EXPECT_ERROR("{\"type\":[\"string\",\"null\"]}", "true",
                 "at \"\": type: expected [\"string\",\"null\"], got boolean");
    EXPECT_VALID("{\"type\":\"object\"}", "{}");
    EXPECT_ERROR("{\"type\":\"array\"}", "{}", "at \"\": type: expected \"array\", got object");
    EXPECT_VALID("true", "[1]");
    EXPECT_ERROR("false", "1", "at \"\": false: no value is allowed here, got number");
}

TEST(jschema_objects)
{
    const char *s = "{\"type\":\"object\",\"required\":[\"name\",\"age\"],"
                    "\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1},"
                    "\"age\":{\"type\":\"integer\",\"minimum\":0}},"
                    "\"additionalProperties\":false}";
    EXPECT_VALID(s, "{\"name\":\"a\",\"age\":3}");
    EXPECT_ERROR(s, "{\"name\":\"a\"}", "at \"\": required: missing property \"age\"");
    EXPECT_ERROR(s, "{\"name\":\"\",\"age\":-1,\"x\":1}",
                 "at \"/name\": minLength: expected at least 1 characters, got 0\n"
                 "at \"/age\": minimum: expected a number >= 0, got -1\n"
                 "at \"\": additionalProperties: unexpected property \"x\" (not in properties)");
    EXPECT_ERROR("{\"additionalProperties\":{\"type\":\"integer\"}}", "{\"a/b~\":\"x\"}",
                 "at \"/a~1b~0\": type: expected \"integer\", got string");
    /* properties apply only to objects; a missing one is only required's business */
    EXPECT_VALID("{\"properties\":{\"a\":{\"type\":\"string\"}}}", "[1]");
}

TEST(jschema_arrays_strings_numbers)
{
    const char *s = "{\"type\":\"array\",\"minItems\":1,\"maxItems\":2,"
                    "\"items\":{\"type\":\"string\",\"maxLength\":2,\"pattern\":\"^[a-z\xc3\xa9]+$\"}}";
    EXPECT_VALID(s, "[\"ab\"]");
    EXPECT_VALID(s, "[\"\xc3\xa9\xc3\xa9\"]"); /* two code points, four bytes */
    EXPECT_ERROR(s, "[]", "at \"\": minItems: expected at least 1 items, got 0");
    EXPECT_ERROR(s, "[\"a\",\"b\",\"c\"]", "at \"\": maxItems: expected at most 2 items, got 3");
    EXPECT_ERROR(s, "[\"abc\", \"A\"]",
                 "at \"/0\": maxLength: expected at most 2 characters, got 3\n"
                 "at \"/1\": pattern: expected a string matching \"^[a-z\xc3\xa9]+$\", got \"A\"");
    EXPECT_VALID("{\"pattern\":\"b+\"}", "\"abbc\""); /* anywhere, as JSON Schema */
    EXPECT_VALID("{\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", "0.5");
    EXPECT_ERROR("{\"exclusiveMinimum\":0,\"maximum\":1e1}", "[0]", "");
    EXPECT_ERROR("{\"exclusiveMinimum\":0,\"maximum\":1e1}", "0",
                 "at \"\": exclusiveMinimum: expected a number > 0, got 0");
    EXPECT_ERROR("{\"exclusiveMinimum\":0,\"maximum\":1e1}", "12.5",
                 "at \"\": maximum: expected a number <= 1e1, got 12.5");
}

TEST(jschema_enum_const)
{
    EXPECT_VALID("{\"enum\":[\"a\",1,{\"k\":[true]}]}", "{\"k\":[true]}");
    EXPECT_ERROR("{\"enum\":[\"a\",1]}", "\"b\"", "at \"\": enum: expected one of [\"a\",1], got \"b\"");
    EXPECT_VALID("{\"const\":{\"a\":1,\"b\":2}}", "{\"b\":2,\"a\":1}");
    EXPECT_ERROR("{\"const\":5}", "4", "at \"\": const: expected 5, got 4");
}

TEST(jschema_errors_bounded)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    buf_puts(&b, "[");
    for (int i = 0; i < 40; i++)
        buf_printf(&b, "%s1", i ? "," : "");
    buf_puts(&b, "]");
    char *t = errors("{\"items\":{\"type\":\"string\"}}", buf_str(&b));
    ASSERT_CONTAINS(t, "at \"/15\": type:");
    ASSERT_TRUE(strstr(t, "at \"/16\"") == NULL);
    ASSERT_CONTAINS(t, "(24 more errors)");
    free(t);
    buf_done(&b);
    /* a long value is cut in the line, the line is bounded */
    char big[2000];
    memset(big, 'x', sizeof big);
    big[0] = '"';
    big[sizeof big - 2] = '"';
    big[sizeof big - 1] = 0;
    t = errors("{\"enum\":[\"a\"]}", big);
    ASSERT_CMP_INT(strlen(t), <=, TERN_JSCHEMA_MAX_ERROR_LEN);
    ASSERT_CONTAINS(t, "...");
    free(t);
}

TEST(jschema_check_refuses_outside_the_subset)
{
    EXPECT_REFUSED("{\"properties\":{\"a\":{\"oneOf\":[]}}}",
                   "at \"/properties/a/oneOf\": keyword \"oneOf\" is not supported (supported: type,");
    EXPECT_REFUSED("{\"$ref\":\"#/x\"}", "at \"/$ref\": keyword \"$ref\" is not supported");
    EXPECT_REFUSED("{\"items\":[{}]}", "at \"/items\": items: must be one schema (the array form");
    EXPECT_REFUSED("{\"type\":\"int\"}", "at \"/type\": type: unknown type \"int\"");
    EXPECT_REFUSED("{\"type\":[]}", "type: must be a type name or a non-empty array");
    EXPECT_REFUSED("{\"type\":[\"string\",\"string\"]}", "type \"string\" is repeated");
    EXPECT_REFUSED("{\"required\":[\"a\",\"a\"]}", "required: \"a\" is repeated");
    EXPECT_REFUSED("{\"required\":[1]}", "required: must be an array of property names");
    EXPECT_REFUSED("{\"enum\":[]}", "enum: must be a non-empty array");
    EXPECT_REFUSED("{\"minLength\":-1}", "minLength: must be a non-negative integer");
    EXPECT_REFUSED("{\"maxItems\":1.5}", "maxItems: must be a non-negative integer");
    EXPECT_REFUSED("{\"minimum\":\"1\"}", "minimum: must be a number");
    EXPECT_REFUSED("{\"pattern\":\"(\"}", "at \"/pattern\": pattern: not a POSIX extended");
    EXPECT_REFUSED("{\"additionalProperties\":1}", "at \"/additionalProperties\": a schema must be");
    EXPECT_REFUSED("{\"items\":{\"$schema\":\"x\"}}", "$schema: must be a string, at the top only");
    EXPECT_REFUSED("[]", "at \"\": a schema must be an object or a boolean");
    char *ok = check_msg("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\","
                         "\"title\":\"t\",\"description\":\"d\",\"$comment\":\"c\","
                         "\"type\":\"object\",\"properties\":{\"a\":true}}");
    ASSERT_EQ_STR(ok, "");
    free(ok);
}

TEST(jschema_check_bounds)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    /* depth */
    for (int i = 0; i <= TERN_JSCHEMA_MAX_DEPTH + 1; i++)
        buf_puts(&b, "{\"items\":");
    buf_puts(&b, "true");
    for (int i = 0; i <= TERN_JSCHEMA_MAX_DEPTH + 1; i++)
        buf_puts(&b, "}");
    char *t = check_msg(buf_str(&b));
    ASSERT_CONTAINS(t, "schemas nested deeper than");
    free(t);
    /* nodes */
    buf_reset(&b);
    buf_puts(&b, "{\"properties\":{");
    for (int i = 0; i < TERN_JSCHEMA_MAX_NODES + 1; i++)
        buf_printf(&b, "%s\"p%d\":true", i ? "," : "", i);
    buf_puts(&b, "}}");
    t = check_msg(buf_str(&b));
    ASSERT_CONTAINS(t, "schemas in all");
    free(t);
    /* pattern length */
    buf_reset(&b);
    buf_puts(&b, "{\"pattern\":\"");
    for (int i = 0; i <= TERN_JSCHEMA_MAX_PATTERN; i++)
        buf_putc(&b, 'a');
    buf_puts(&b, "\"}");
    t = check_msg(buf_str(&b));
    ASSERT_CONTAINS(t, "pattern: longer than");
    free(t);
    /* size */
    buf_reset(&b);
    buf_puts(&b, "{\"description\":\"");
    for (unsigned i = 0; i <= TERN_JSCHEMA_MAX_BYTES; i++)
        buf_putc(&b, 'a');
    buf_puts(&b, "\"}");
    t = check_msg(buf_str(&b));
    ASSERT_CONTAINS(t, "exceeds the limit");
    free(t);
    buf_done(&b);
    /* an unchecked schema is not validated */
    cJSON *s = J("{\"oneOf\":[]}"), *i = J("1");
    struct jschema_report rep = {0};
    ASSERT_EQ_INT(jschema_validate(s, i, &rep), TERN_EINVALID);
    cJSON_Delete(s);
    cJSON_Delete(i);
}

TEST(jschema_answers)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    const char *a = "  {\"a\": 1}\n";
    ASSERT_OK(jschema_parse_answer(a, strlen(a), &j, &e));
    ASSERT_TRUE(cJSON_IsObject(j));
    cJSON_Delete(j);
    a = "```json\n[1, 2]\n```";
    ASSERT_OK(jschema_parse_answer(a, strlen(a), &j, &e));
    ASSERT_TRUE(cJSON_IsArray(j));
    cJSON_Delete(j);
    a = "Here it is: {\"a\": 1}";
    ASSERT_EQ_INT(jschema_parse_answer(a, strlen(a), &j, &e), TERN_EPARSE);
    ASSERT_CONTAINS(e.msg, "invalid JSON at offset 0");
    a = "{\"a\": 1} and more";
    ASSERT_EQ_INT(jschema_parse_answer(a, strlen(a), &j, &e), TERN_EPARSE);
    ASSERT_CONTAINS(e.msg, "offset 9");
    a = "```\n{\"a\": }\n```";
    ASSERT_EQ_INT(jschema_parse_answer(a, strlen(a), &j, &e), TERN_EPARSE);
    ASSERT_CONTAINS(e.msg, "(offsets count from byte 4 of the answer)");
    struct buf b;
    buf_init(&b, 1 << 20);
    for (int i = 0; i <= TERN_JSCHEMA_MAX_INSTANCE_DEPTH; i++)
        buf_putc(&b, '[');
    for (int i = 0; i <= TERN_JSCHEMA_MAX_INSTANCE_DEPTH; i++)
        buf_putc(&b, ']');
    ASSERT_EQ_INT(jschema_parse_answer(buf_str(&b), b.len, &j, &e), TERN_ETOOLARGE);
    buf_done(&b);
}
