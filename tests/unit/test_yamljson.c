/* Unit tests for yaml/yamljson: golden YAML -> JSON conversions, typing
 * rules, anchors/merge keys, errors with positions, and the bounds. */
#include "harness.h"

#include "base/mem.h"
#include "json/json.h"
#include "yaml/yamljson.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

struct golden {
    const char *yaml;
    const char *json; /* json_print of the single document */
};

static void check_one(const char *yaml, const char *json, int line)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    int r = yamljson_parse_one(yaml, strlen(yaml), NULL, &j, &e);
    if (r)
        th_fail(__FILE__, line, "parse of <%s> failed: %d %s", yaml, r, e.msg);
    char *out = json_print(j);
    if (strcmp(out, json) != 0)
        th_fail(__FILE__, line, "<%s>: got %s, expected %s", yaml, out, json);
    free(out);
    cJSON_Delete(j);
}

static void check_err(const char *yaml, int code, const char *part, int line)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    int r = yamljson_parse_stream(yaml, strlen(yaml), NULL, &j, &e);
    if (r != code)
        th_fail(__FILE__, line, "<%s>: got %d, expected %d (%s)", yaml, r, code, e.msg);
    if (j)
        th_fail(__FILE__, line, "<%s>: result set on error", yaml);
    if (!strstr(e.msg, part))
        th_fail(__FILE__, line, "<%s>: message \"%s\" lacks \"%s\"", yaml, e.msg, part);
}

#define GOLD(y, js)        check_one((y), (js), __LINE__)
#define BAD(y, code, part) check_err((y), (code), (part), __LINE__)

TEST(yaml_scalar_typing_follows_kubectl)
{
    static const struct golden g[] = {
        /* nulls */
        {"a: ~\nb: null\nc: Null\nd: NULL\ne:\nf: nULL", "{\"a\":null,\"b\":null,\"c\":null,"
                                                         "\"d\":null,\"e\":null,\"f\":\"nULL\"}"},
        /* YAML 1.1 booleans, as go-yaml v2 (kubectl) resolves them */
        {"[true, True, TRUE, yes, Yes, YES, on, On, ON, y, Y]",
         "[true,true,true,true,true,true,true,true,true,true,true]"},
        {"[false, False, FALSE, no, No, NO, off, Off, OFF, n, N]",
         "[false,false,false,false,false,false,false,false,false,false,false]"},
        {"[tRUE, yES, oN, 'yes', \"on\", !!str no]",
         "[\"tRUE\",\"yES\",\"oN\",\"yes\",\"on\",\"no\"]"},
        /* integers: exact, Go base-0 syntax, underscores dropped */
        {"[0, -0, 42, +42, -17, 1_000, 0x1F, 0o17, 017, 0b101, -0x10]",
         "[0,0,42,42,-17,1000,31,15,15,5,-16]"},
        {"[9223372036854775807, -9223372036854775808, 18446744073709551615]",
         "[9223372036854775807,-9223372036854775808,18446744073709551615]"},
        /* floats */
        {"[1.5, -2.25, .5, 1., 1e3, 1.5e-3, 08, 6.02e23, +.5]",
         "[1.5,-2.25,0.5,1,1000,0.0015,8,6.02e+23,0.5]"},
        /* too large for any number type: a float, then out of range: a string */
        {"[18446744073709551616, 1e999]", "[18446744073709551616,\"1e999\"]"},
        /* strings that look almost like numbers */
        {"[0x, 1_2_3abc, 1.2.3, 12:30, 2024-01-02, -, .x, 1e, 0xG]",
         "[\"0x\",\"1_2_3abc\",\"1.2.3\",\"12:30\",\"2024-01-02\",\"-\",\".x\",\"1e\",\"0xG\"]"},
        /* quoted and block scalars are strings */
        {"a: \"12\"\nb: '0x1F'\nc: |\n  line1\n  line2\nd: >-\n  folded\n  text\n",
         "{\"a\":\"12\",\"b\":\"0x1F\",\"c\":\"line1\\nline2\\n\",\"d\":\"folded text\"}"},
        /* explicit tags */
        {"[!!str 12, !!int \"12\", !!float 3, !!bool \"yes\", !!null '', ! 12, !custom 7,"
         " !!binary aGk=, !!timestamp 2001-12-14]",
         "[\"12\",12,3,true,null,\"12\",\"7\",\"aGk=\",\"2001-12-14\"]"},
        /* unicode and escapes */
        {"s: \"caf\\u00e9 \\U0001F600 \\t\"", "{\"s\":\"caf\xc3\xa9 \xf0\x9f\x98\x80 \\t\"}"},
        /* keys stay verbatim strings */
        {"1: a\ntrue: b\nyes: c\nnull: d\n? [x]\n", NULL},
        {"{1: a, true: b, yes: c, on: d, ~: e}",
         "{\"1\":\"a\",\"true\":\"b\",\"yes\":\"c\",\"on\":\"d\",\"~\":\"e\"}"},
    };
    for (size_t i = 0; i < sizeof g / sizeof *g; i++)
        if (g[i].json)
            check_one(g[i].yaml, g[i].json, __LINE__);
    BAD(g[12].yaml, TERN_EPARSE, "mapping keys must be scalars");
}

TEST(yaml_integers_are_exact_for_json_getters)
{
    cJSON *j = NULL;
    const char *y = "big: 9007199254740993\nneg: -9223372036854775808\nf: 2.0\n";
    ASSERT_OK(yamljson_parse_one(y, strlen(y), NULL, &j, NULL));
    int64_t v = 0;
    ASSERT_OK(json_get_int64(j, "", "big", JSON_REQUIRED, &v, NULL));
    ASSERT_TRUE(v == 9007199254740993LL);
    ASSERT_OK(json_get_int64(j, "", "neg", JSON_REQUIRED, &v, NULL));
    ASSERT_TRUE(v == INT64_MIN);
    ASSERT_OK(json_get_int64(j, "", "f", JSON_REQUIRED, &v, NULL));
    ASSERT_EQ_INT(v, 2);
    cJSON_Delete(j);
}

TEST(yaml_structures_and_manifest)
{
    GOLD("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {app: tern}\n"
         "data:\n  a.md: |\n    # hi\n",
         "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"x\","
         "\"labels\":{\"app\":\"tern\"}},\"data\":{\"a.md\":\"# hi\\n\"}}");
    GOLD("- a\n- - b\n  - c\n- {d: [1, {e: f}]}\n- []\n- {}\n",
         "[\"a\",[\"b\",\"c\"],{\"d\":[1,{\"e\":\"f\"}]},[],{}]");
    GOLD("", "null");
    GOLD("# only a comment\n", "null");
    GOLD("--- 5\n...\n", "5");
}

TEST(yaml_anchors_aliases_and_merge)
{
    GOLD("a: &x {p: 1, q: [2]}\nb: *x\nc: *x\n",
         "{\"a\":{\"p\":1,\"q\":[2]},\"b\":{\"p\":1,\"q\":[2]},\"c\":{\"p\":1,\"q\":[2]}}");
    /* anchors may be redefined; aliases use the latest */
    GOLD("- &a 1\n- *a\n- &a two\n- *a\n", "[1,1,\"two\",\"two\"]");
    /* an anchored key, used again as a key */
    GOLD("&k name: 1\nother: *k\n", "{\"name\":1,\"other\":\"name\"}");
    GOLD("v: &v keyname\nm: {*v : 1}\n", "{\"v\":\"keyname\",\"m\":{\"keyname\":1}}");
    BAD("base: &b {x: 1}\nm:\n  y: 1\nz: {? *b : 1}\n", TERN_EPARSE, "does not name a scalar");
    /* merge keys: explicit keys win whatever their position; earlier sources win */
    GOLD("d: &d {a: 1, b: 2}\ne: &e {b: 3, c: 4}\nm:\n  a: 0\n  <<: [*d, *e]\n",
         "{\"d\":{\"a\":1,\"b\":2},\"e\":{\"b\":3,\"c\":4},\"m\":{\"a\":0,\"b\":2,\"c\":4}}");
    /* merged keys follow the explicit ones */
    GOLD("m:\n  <<: {a: 1}\n  b: 2\n", "{\"m\":{\"b\":2,\"a\":1}}");
    /* a quoted << is an ordinary key */
    GOLD("'<<': {a: 1}\n", "{\"<<\":{\"a\":1}}");
    BAD("m:\n  <<: 5\n", TERN_EPARSE, "mapping or a sequence of mappings");
    BAD("m:\n  <<: [{a: 1}, 2]\n", TERN_EPARSE, "mapping or a sequence of mappings");
    BAD("a: *nope\n", TERN_EPARSE, "unknown anchor \"nope\"");
    BAD("a: &r [1, *r]\n", TERN_EPARSE, "refers to a node that contains it");
    /* anchors do not cross documents */
    BAD("a: &x 1\n---\nb: *x\n", TERN_EPARSE, "line 3:4: unknown anchor");
}

TEST(yaml_errors_name_position_and_path)
{
    BAD("spec:\n  limits:\n    cpu: 1\n    cpu: 2\n", TERN_EPARSE,
        "line 4:10: duplicate key \"spec.limits.cpu\"");
    BAD("items:\n- {a: 1}\n- {a: 1, a: 2}\n", TERN_EPARSE, "duplicate key \"items[1].a\"");
    BAD("a: [1, 2\n", TERN_EPARSE, "yaml line ");
    BAD("a: b: c\n", TERN_EPARSE, "line 1:5");
    BAD("a: .inf\n", TERN_EPARSE, "not representable in JSON");
    BAD("a: !!int abc\n", TERN_EPARSE, "cannot decode \"abc\"");
    BAD("a: !!bool 1\n", TERN_EPARSE, "cannot decode");
    BAD("a: !!map x\n", TERN_EPARSE, "on a scalar");
    BAD("a: !!seq {x: 1}\n", TERN_EPARSE, "on a mapping");
    BAD("a: \"x\\0y\"\n", TERN_EPARSE, "NUL character");
    BAD("\t- a\n", TERN_EPARSE, "yaml line 1:");
}

TEST(yaml_multi_document_streams)
{
    const char *y = "---\na: 1\n---\n# empty\n---\n- x\n---\nnull\n--- plain\n";
    cJSON *docs = NULL;
    struct tern_err e = {0};
    ASSERT_OK(yamljson_parse_stream(y, strlen(y), NULL, &docs, &e));
    char *out = json_print(docs);
    ASSERT_EQ_STR(out, "[{\"a\":1},[\"x\"],\"plain\"]");
    free(out);
    cJSON_Delete(docs);

    cJSON *one = NULL;
    ASSERT_EQ_INT(yamljson_parse_one(y, strlen(y), NULL, &one, &e), TERN_EPARSE);
    ASSERT_CONTAINS(e.msg, "single YAML document");
    ASSERT_NULL(one);

    struct yamljson_opts o = {.max_docs = 2};
    ASSERT_EQ_INT(yamljson_parse_stream(y, strlen(y), &o, &docs, &e), TERN_ETOOLARGE);
    ASSERT_CONTAINS(e.msg, "more than 2 documents");
}

TEST(yaml_billion_laughs_is_bounded)
{
    /* each level references the previous one ten times: 10^9 nodes if expanded */
    struct buf_like {
        char s[4096];
        size_t n;
    } b = {.n = 0};
    b.n += (size_t)snprintf(b.s + b.n, sizeof b.s - b.n, "a0: &a0 [lol]\n");
    for (int i = 1; i <= 9; i++) {
        b.n += (size_t)snprintf(b.s + b.n, sizeof b.s - b.n, "a%d: &a%d [", i, i);
        for (int k = 0; k < 10; k++)
            b.n += (size_t)snprintf(b.s + b.n, sizeof b.s - b.n, "%s*a%d", k ? ", " : "", i - 1);
        b.n += (size_t)snprintf(b.s + b.n, sizeof b.s - b.n, "]\n");
    }
    cJSON *j = NULL;
    struct tern_err e = {0};
    ASSERT_EQ_INT(yamljson_parse_one(b.s, b.n, NULL, &j, &e), TERN_ETOOLARGE);
    ASSERT_CONTAINS(e.msg, "nodes (after alias expansion)");
    ASSERT_NULL(j);

    /* the alias count bound on its own */
    struct yamljson_opts o = {.max_aliases = 5};
    const char *y = "a: &a 1\nb: [*a, *a, *a, *a, *a, *a]\n";
    ASSERT_EQ_INT(yamljson_parse_one(y, strlen(y), &o, &j, &e), TERN_ETOOLARGE);
    ASSERT_CONTAINS(e.msg, "more than 5 aliases");

    /* expanded bytes: a long string referenced many times */
    struct yamljson_opts ob = {.max_expanded_bytes = 10000};
    char big[3000];
    int n = snprintf(big, sizeof big,
                     "a: &a \"%0500d\"\nb: [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a,"
                     " *a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n",
                     0);
    ASSERT_EQ_INT(yamljson_parse_one(big, (size_t)n, &ob, &j, &e), TERN_ETOOLARGE);
    ASSERT_CONTAINS(e.msg, "bytes of scalars");
}

TEST(yaml_depth_is_bounded_including_aliases)
{
    struct yamljson_opts o = {.max_depth = 4};
    const char *ok = "a: {b: {c: [1]}}\n";
    cJSON *j = NULL;
    struct tern_err e = {0};
    ASSERT_OK(yamljson_parse_one(ok, strlen(ok), &o, &j, &e));
    cJSON_Delete(j);
    j = NULL;
    const char *deep = "a: {b: {c: [[1]]}}\n";
    ASSERT_EQ_INT(yamljson_parse_one(deep, strlen(deep), &o, &j, &e), TERN_ETOOLARGE);
    ASSERT_CONTAINS(e.msg, "nesting deeper than 4");
    /* each part is shallow, the expansion is not */
    const char *alias = "x: &x {b: {c: [1]}}\ny: {z: *x}\n";
    ASSERT_EQ_INT(yamljson_parse_one(alias, strlen(alias), &o, &j, &e), TERN_ETOOLARGE);
    ASSERT_CONTAINS(e.msg, "after alias expansion");

    /* the default bound: 100000 nested flow sequences fail fast, no stack overflow */
    size_t n = 100000;
    char *s = xmalloc(n + 1);
    memset(s, '[', n);
    s[n] = '\0';
    ASSERT_EQ_INT(yamljson_parse_one(s, n, NULL, &j, &e), TERN_ETOOLARGE);
    free(s);
}

TEST(yaml_size_bound)
{
    struct yamljson_opts o = {.max_bytes = 8};
    cJSON *j = NULL;
    struct tern_err e = {0};
    ASSERT_EQ_INT(yamljson_parse_one("a: 123456789", 12, &o, &j, &e), TERN_ETOOLARGE);
    ASSERT_CONTAINS(e.msg, "exceeds the limit of 8");
}

TEST(yaml_kubeconfig_shape)
{
    const char *y = "apiVersion: v1\nkind: Config\nclusters:\n- name: dev\n  cluster:\n"
                    "    server: https://127.0.0.1:6443\n"
                    "    certificate-authority-data: LS0tLS1CRUdJTg==\n"
                    "    insecure-skip-tls-verify: false\n"
                    "users:\n- name: u\n  user: {token: abc.def}\ncontexts:\n- name: c\n"
                    "  context: {cluster: dev, user: u, namespace: default}\n"
                    "current-context: c\npreferences: {}\n";
    cJSON *j = NULL;
    struct tern_err e = {0};
    ASSERT_OK(yamljson_parse_one(y, strlen(y), NULL, &j, &e));
    const cJSON *clusters = json_get(j, "clusters");
    ASSERT_EQ_INT(cJSON_GetArraySize(clusters), 1);
    const cJSON *c = json_get(cJSON_GetArrayItem(clusters, 0), "cluster");
    ASSERT_EQ_STR(json_get(c, "server")->valuestring, "https://127.0.0.1:6443");
    ASSERT_TRUE(cJSON_IsFalse(json_get(c, "insecure-skip-tls-verify")));
    ASSERT_EQ_STR(json_get(j, "current-context")->valuestring, "c");
    cJSON_Delete(j);
}

TEST_T(yaml_many_anchors_stay_fast, 20)
{
    /* 100000 anchors, then 1000 aliases to the first and the last: lookups
     * must not scan the anchor list */
    struct buf_like {
        char *s;
        size_t n, cap;
    } b = {.cap = 4u << 20};
    b.s = xmalloc(b.cap);
    for (int i = 0; i < 100000; i++)
        b.n += (size_t)snprintf(b.s + b.n, b.cap - b.n, "- &a%d %d\n", i, i);
    for (int i = 0; i < 500; i++)
        b.n += (size_t)snprintf(b.s + b.n, b.cap - b.n, "- *a0\n- *a99999\n");
    cJSON *j = NULL;
    struct tern_err e = {0};
    ASSERT_OK(yamljson_parse_one(b.s, b.n, NULL, &j, &e));
    ASSERT_EQ_INT(cJSON_GetArraySize(j), 101000);
    char *last = json_print(cJSON_GetArrayItem(j, 100999));
    ASSERT_EQ_STR(last, "99999");
    free(last);
    cJSON_Delete(j);
    free(b.s);
}
