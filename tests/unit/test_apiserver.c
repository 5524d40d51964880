/* Unit tests for apiserver/: Status errors, selectors, patches, structural
 * schemas, CRD validation, tables, path parsing, discovery. No etcd. */
#include "harness.h"

#include "apiserver/apicrd.h"
#include "apiserver/apipatch.h"
#include "apiserver/apires.h"
#include "apiserver/apirest.h"
#include "apiserver/apischema.h"
#include "apiserver/apiselector.h"
#include "apiserver/apistatus.h"
#include "apiserver/apitable.h"
#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <stdlib.h>

static cJSON *J(const char *s)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    if (json_parse(s, strlen(s), &j, &e))
        th_fail(__FILE__, __LINE__, "bad test JSON %s: %s", s, e.msg);
    return j;
}

/* Compares a tree with expected JSON text (both normalised by printing). */
static void expect_json(const cJSON *got, const char *want)
{
    cJSON *w = J(want);
    char *a = json_print(got), *b = json_print(w);
    if (strcmp(a, b) != 0)
        th_fail(__FILE__, __LINE__, "got %s, expected %s", a, b);
    free(a);
    free(b);
    cJSON_Delete(w);
}

/* ---- Status ---- */

TEST(status_not_found_and_conflict)
{
    cJSON *s = apistatus_not_found("tern.dev", "agentsessions", "x");
    expect_json(s, "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                   "\"Failure\",\"message\":\"agentsessions.tern.dev \\\"x\\\" not found\","
                   "\"reason\":\"NotFound\",\"details\":{\"name\":\"x\",\"group\":\"tern.dev\","
                   "\"kind\":\"agentsessions\"},\"code\":404}");
    cJSON_Delete(s);
    s = apistatus_conflict("", "configmaps", "c", NULL);
    ASSERT_EQ_INT(apistatus_code(s), 409);
    ASSERT_EQ_STR(cJSON_GetObjectItem(s, "message")->valuestring,
                  "Operation cannot be fulfilled on configmaps \"c\": the object has been "
                  "modified; please apply your changes to the latest version and try again");
    cJSON_Delete(s);
}

TEST(status_invalid_lists_every_field)
{
    struct apistatus_fields f = {0};
    cJSON *v = cJSON_CreateString("Bad");
    apistatus_fields_add(&f, APISTATUS_F_INVALID, "metadata.name", v, "must be lower case");
    apistatus_fields_addv(&f, APISTATUS_F_REQUIRED, "spec.objective", NULL, NULL);
    cJSON_Delete(v);
    cJSON *s = apistatus_invalid("tern.dev", "AgentSession", "Bad", &f);
    ASSERT_EQ_STR(cJSON_GetObjectItem(s, "message")->valuestring,
                  "AgentSession.tern.dev \"Bad\" is invalid: [metadata.name: Invalid value: "
                  "\"Bad\": must be lower case, spec.objective: Required value]");
    const cJSON *causes = json_get(json_get(s, "details"), "causes");
    ASSERT_EQ_INT(cJSON_GetArraySize(causes), 2);
    ASSERT_EQ_STR(json_get(causes->child, "reason")->valuestring, "FieldValueInvalid");
    ASSERT_EQ_STR(json_get(causes->child->next, "field")->valuestring, "spec.objective");
    ASSERT_EQ_INT(apistatus_code(s), 422);
    cJSON_Delete(s);
    apistatus_fields_done(&f);
}

/* ---- selectors ---- */

TEST(label_selectors)
{
    struct apisel *s = NULL;
    struct tern_err e = {0};
    ASSERT_OK(apisel_parse_labels("app=web, tier in (a,b),!legacy,env!=prod,x", &s, &e));
    ASSERT_EQ_INT(s->n, 5);
    cJSON *l = J("{\"app\":\"web\",\"tier\":\"b\",\"x\":\"\"}");
    ASSERT_TRUE(apisel_match_labels(s, l));
    cJSON_Delete(l);
    l = J("{\"app\":\"web\",\"tier\":\"c\",\"x\":\"1\"}");
    ASSERT_FALSE(apisel_match_labels(s, l));
    cJSON_Delete(l);
    l = J("{\"app\":\"web\",\"tier\":\"a\",\"x\":\"1\",\"legacy\":\"y\"}");
    ASSERT_FALSE(apisel_match_labels(s, l));
    cJSON_Delete(l);
    apisel_free(s);
    ASSERT_OK(apisel_parse_labels("tier notin (a)", &s, &e));
    ASSERT_TRUE(apisel_match_labels(s, NULL));
    apisel_free(s);
    ASSERT_OK(apisel_parse_labels("", &s, &e));
    ASSERT_TRUE(apisel_match_labels(s, NULL));
    apisel_free(s);
    ASSERT_EQ_INT(apisel_parse_labels("a in (b", &s, &e), TERN_EINVALID);
    ASSERT_EQ_INT(apisel_parse_labels("a=b c", &s, &e), TERN_EINVALID);
    ASSERT_EQ_INT(apisel_parse_labels("-a=b", &s, &e), TERN_EINVALID);
    ASSERT_EQ_INT(apisel_parse_labels("a in (b", &s, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "unable to parse requirement");
    ASSERT_EQ_INT(apisel_parse_labels("a=b!", &s, &e), TERN_EINVALID);
}

TEST(field_selectors)
{
    struct apisel *s = NULL;
    struct tern_err e = {0};
    ASSERT_OK(apisel_parse_fields("metadata.name=x,status.phase!=Running", &s, &e));
    cJSON *o = J("{\"metadata\":{\"name\":\"x\"},\"status\":{\"phase\":\"Pending\"}}");
    ASSERT_TRUE(apisel_match_fields(s, o));
    cJSON_Delete(o);
    o = J("{\"metadata\":{\"name\":\"x\"},\"status\":{\"phase\":\"Running\"}}");
    ASSERT_FALSE(apisel_match_fields(s, o));
    cJSON_Delete(o);
    apisel_free(s);
    ASSERT_EQ_INT(apisel_parse_fields("nofield", &s, &e), TERN_EINVALID);
}

/* ---- patches ---- */

TEST(merge_patch_rfc7386)
{
    cJSON *d = J("{\"a\":\"b\",\"c\":{\"d\":\"e\",\"f\":\"g\"},\"l\":[1,2]}");
    cJSON *p = J("{\"a\":\"z\",\"c\":{\"f\":null},\"l\":[3],\"n\":{\"x\":null}}");
    cJSON *r = apipatch_merge(d, p);
    expect_json(r, "{\"a\":\"z\",\"c\":{\"d\":\"e\"},\"l\":[3],\"n\":{}}");
    cJSON_Delete(d);
    cJSON_Delete(p);
    cJSON_Delete(r);
}

TEST(json_patch_rfc6902)
{
    cJSON *d = J("{\"a\":{\"b\":[1,2,3]},\"x~y\":1,\"s/t\":2}");
    cJSON *ops = J("[{\"op\":\"add\",\"path\":\"/a/b/1\",\"value\":9},"
                   "{\"op\":\"add\",\"path\":\"/a/b/-\",\"value\":4},"
                   "{\"op\":\"remove\",\"path\":\"/x~0y\"},"
                   "{\"op\":\"replace\",\"path\":\"/s~1t\",\"value\":3},"
                   "{\"op\":\"copy\",\"from\":\"/a/b/0\",\"path\":\"/c\"},"
                   "{\"op\":\"move\",\"from\":\"/c\",\"path\":\"/m\"},"
                   "{\"op\":\"test\",\"path\":\"/m\",\"value\":1}]");
    cJSON *r = NULL;
    struct tern_err e = {0};
    ASSERT_OK(apipatch_json(d, ops, &r, &e));
    expect_json(r, "{\"a\":{\"b\":[1,9,2,3,4]},\"s/t\":3,\"m\":1}");
    cJSON_Delete(r);
    cJSON_Delete(ops);
    ops = J("[{\"op\":\"test\",\"path\":\"/a/b/0\",\"value\":2}]");
    ASSERT_EQ_INT(apipatch_json(d, ops, &r, &e), TERN_EINVALID);
    cJSON_Delete(ops);
    ops = J("[{\"op\":\"remove\",\"path\":\"/nope\"}]");
    ASSERT_EQ_INT(apipatch_json(d, ops, &r, &e), TERN_EINVALID);
    cJSON_Delete(ops);
    ops = J("[{\"op\":\"replace\",\"path\":\"/a/b/7\",\"value\":1}]");
    ASSERT_EQ_INT(apipatch_json(d, ops, &r, &e), TERN_EINVALID);
    cJSON_Delete(ops);
    ops = J("{\"op\":\"add\"}");
    ASSERT_EQ_INT(apipatch_json(d, ops, &r, &e), TERN_EPARSE);
    cJSON_Delete(ops);
    ops = J("[{\"op\":\"frobnicate\",\"path\":\"/a\"}]");
    ASSERT_EQ_INT(apipatch_json(d, ops, &r, &e), TERN_EPARSE);
    cJSON_Delete(ops);
    cJSON_Delete(d);
}

TEST(strategic_merge_keyed_lists_and_directives)
{
    cJSON *d = J("{\"metadata\":{\"finalizers\":[\"a\"]},\"spec\":{\"containers\":["
                 "{\"name\":\"main\",\"image\":\"x:1\",\"env\":[{\"name\":\"A\",\"value\":\"1\"},"
                 "{\"name\":\"B\",\"value\":\"2\"}],\"ports\":[{\"containerPort\":80}]},"
                 "{\"name\":\"side\",\"image\":\"s:1\"}],\"volumes\":[{\"name\":\"v\"}],"
                 "\"tolerations\":[{\"key\":\"k\"}]}}");
    cJSON *p = J("{\"metadata\":{\"finalizers\":[\"b\",\"a\"]},\"spec\":{"
                 "\"$setElementOrder/containers\":[{\"name\":\"side\"},{\"name\":\"main\"}],"
                 "\"containers\":[{\"name\":\"main\",\"image\":\"x:2\",\"env\":["
                 "{\"name\":\"B\",\"$patch\":\"delete\"},{\"name\":\"C\",\"value\":\"3\"}]}],"
                 "\"volumes\":[{\"$patch\":\"replace\"},{\"name\":\"w\"}],"
                 "\"tolerations\":[{\"key\":\"z\"}]}}");
    cJSON *r = NULL;
    struct tern_err e = {0};
    ASSERT_OK(apipatch_strategic(d, p, &r, &e));
    expect_json(r, "{\"metadata\":{\"finalizers\":[\"a\",\"b\"]},\"spec\":{\"containers\":["
                   "{\"name\":\"side\",\"image\":\"s:1\"},"
                   "{\"name\":\"main\",\"image\":\"x:2\",\"env\":[{\"name\":\"A\",\"value\":\"1\"},"
                   "{\"name\":\"C\",\"value\":\"3\"}],\"ports\":[{\"containerPort\":80}]}],"
                   "\"volumes\":[{\"name\":\"w\"}],\"tolerations\":[{\"key\":\"z\"}]}}");
    cJSON_Delete(r);
    cJSON_Delete(p);
    p = J("{\"metadata\":{\"$deleteFromPrimitiveList/finalizers\":[\"a\"]},"
          "\"spec\":{\"$retainKeys\":[\"volumes\"],\"volumes\":null}}");
    ASSERT_OK(apipatch_strategic(d, p, &r, &e));
    expect_json(r, "{\"metadata\":{\"finalizers\":[]},\"spec\":{}}");
    cJSON_Delete(r);
    cJSON_Delete(p);
    p = J("{\"spec\":{\"containers\":[{\"image\":\"nokey\"}]}}");
    ASSERT_EQ_INT(apipatch_strategic(d, p, &r, &e), TERN_EPARSE);
    cJSON_Delete(p);
    cJSON_Delete(d);
}

/* ---- schemas ---- */

static const char *schema_text =
    "{\"type\":\"object\",\"properties\":{"
    "\"metadata\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5}}},"
    "\"spec\":{\"type\":\"object\",\"required\":[\"objective\"],\"properties\":{"
    "\"objective\":{\"type\":\"string\",\"minLength\":1},"
    "\"mode\":{\"type\":\"string\",\"enum\":[\"a\",\"b\"],\"default\":\"a\"},"
    "\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10},"
    "\"url\":{\"type\":\"string\",\"pattern\":\"^https?://[^\\\\s]+$\"},"
    "\"q\":{\"x-kubernetes-int-or-string\":true},"
    "\"free\":{\"type\":\"object\",\"x-kubernetes-preserve-unknown-fields\":true},"
    "\"tags\":{\"type\":\"array\",\"maxItems\":2,\"x-kubernetes-list-type\":\"set\","
    "\"items\":{\"type\":\"string\"}},"
    "\"m\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}},"
    "\"lim\":{\"type\":\"object\",\"default\":{},\"properties\":{\"t\":{\"type\":\"integer\","
    "\"default\":7}}}}},"
    "\"status\":{\"type\":\"object\",\"x-kubernetes-preserve-unknown-fields\":true}}}";

TEST(schema_prune_default_validate)
{
    cJSON *schema = J(schema_text);
    cJSON *o = J("{\"apiVersion\":\"x/v1\",\"kind\":\"K\",\"metadata\":{\"name\":\"ok\"},"
                 "\"spec\":{\"objective\":\"go\",\"bogus\":1,\"free\":{\"any\":[1]},"
                 "\"m\":{\"a\":1},\"q\":\"50%\"},\"extra\":true}");
    struct apischema_paths pruned = {0};
    apischema_prune(schema, o, &pruned);
    ASSERT_EQ_INT(pruned.n, 2);
    ASSERT_EQ_STR(pruned.v[0], "spec.bogus");
    ASSERT_EQ_STR(pruned.v[1], "extra");
    apischema_paths_done(&pruned);
    apischema_default(schema, o);
    expect_json(o, "{\"apiVersion\":\"x/v1\",\"kind\":\"K\",\"metadata\":{\"name\":\"ok\"},"
                   "\"spec\":{\"objective\":\"go\",\"free\":{\"any\":[1]},\"m\":{\"a\":1},"
                   "\"q\":\"50%\",\"mode\":\"a\",\"lim\":{\"t\":7}}}");
    struct apistatus_fields f = {0};
    apischema_validate(schema, o, &f);
    ASSERT_EQ_INT(f.n, 0);
    cJSON_Delete(o);
    o = J("{\"metadata\":{\"name\":\"toolong\"},\"spec\":{\"objective\":\"\",\"mode\":\"c\","
          "\"n\":11,\"url\":\"ftp://x\",\"q\":1.5,\"tags\":[\"a\",\"a\",\"b\"],\"m\":{\"a\":\"s\"}}}");
    apischema_validate(schema, o, &f);
    char *all = NULL;
    for (size_t i = 0; i < f.n; i++) {
        char *e = apistatus_field_string(&f.v[i]);
        char *n = xasprintf("%s%s|", all ? all : "", e);
        free(all);
        free(e);
        all = n;
    }
    ASSERT_CONTAINS(all, "metadata.name: Too long: may not be more than 5 bytes");
    ASSERT_CONTAINS(all, "spec.objective: Invalid value: \"\": spec.objective in body should be "
                         "at least 1 chars long");
    ASSERT_CONTAINS(all, "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"");
    ASSERT_CONTAINS(all, "spec.n: Invalid value: 11: spec.n in body should be less than or equal to 10");
    ASSERT_CONTAINS(all, "spec.url: Invalid value: \"ftp://x\": spec.url in body should match");
    ASSERT_CONTAINS(all, "spec.q: Invalid value: \"number\": spec.q in body must be of type "
                         "integer,string: \"number\"");
    ASSERT_CONTAINS(all, "spec.tags: Too many: 3: must have at most 2 items");
    ASSERT_CONTAINS(all, "spec.tags[1]: Duplicate value: \"a\"");
    ASSERT_CONTAINS(all, "spec.m.a: Invalid value: \"string\": spec.m.a in body must be of type "
                         "integer: \"string\"");
    free(all);
    apistatus_fields_done(&f);
    cJSON_Delete(o);
    o = J("{\"spec\":{}}");
    apischema_validate(schema, o, &f);
    ASSERT_EQ_INT(f.n, 1);
    ASSERT_EQ_STR(f.v[0].field, "spec.objective");
    ASSERT_EQ_INT(f.v[0].type, APISTATUS_F_REQUIRED);
    apistatus_fields_done(&f);
    cJSON_Delete(o);
    cJSON_Delete(schema);
}

TEST(schema_structural_checks)
{
    struct apistatus_fields f = {0};
    cJSON *s = J("{\"type\":\"object\",\"properties\":{\"a\":{\"properties\":{}},"
                 "\"b\":{\"type\":\"string\",\"$ref\":\"#/x\"},\"c\":{\"type\":\"array\","
                 "\"uniqueItems\":true,\"items\":{\"type\":\"string\"}},"
                 "\"metadata\":{\"type\":\"object\",\"properties\":{\"labels\":{\"type\":\"object\"}}}}}");
    apischema_check_structural(s, "spec.versions[0].schema.openAPIV3Schema", &f);
    ASSERT_EQ_INT(f.n, 4);
    ASSERT_EQ_STR(f.v[0].field, "spec.versions[0].schema.openAPIV3Schema.properties[metadata]");
    apistatus_fields_done(&f);
    cJSON_Delete(s);
    s = J("{\"type\":\"string\"}");
    apischema_check_structural(s, "root", &f);
    ASSERT_EQ_INT(f.n, 1);
    ASSERT_EQ_STR(f.v[0].detail, "must be object at the root");
    apistatus_fields_done(&f);
    cJSON_Delete(s);
}

/* ---- CRDs ---- */

TEST(crd_prepare_valid_and_invalid)
{
    cJSON *crd = J("{\"apiVersion\":\"apiextensions.k8s.io/v1\",\"kind\":\"CustomResourceDefinition\","
                   "\"metadata\":{\"name\":\"widgets.example.com\"},\"spec\":{\"group\":\"example.com\","
                   "\"scope\":\"Namespaced\",\"names\":{\"plural\":\"widgets\",\"kind\":\"Widget\"},"
                   "\"versions\":[{\"name\":\"v1\",\"served\":true,\"storage\":true,\"schema\":"
                   "{\"openAPIV3Schema\":{\"type\":\"object\"}}}]}}");
    struct apistatus_fields f = {0};
    apicrd_prepare(crd, NULL, "2026-01-01T00:00:00Z", &f);
    ASSERT_EQ_INT(f.n, 0);
    const cJSON *names = json_get(json_get(crd, "spec"), "names");
    ASSERT_EQ_STR(json_get(names, "singular")->valuestring, "widget");
    ASSERT_EQ_STR(json_get(names, "listKind")->valuestring, "WidgetList");
    const cJSON *conds = json_get(json_get(crd, "status"), "conditions");
    ASSERT_EQ_STR(json_get(conds->child->next, "type")->valuestring, "Established");
    cJSON_Delete(crd);
    crd = J("{\"metadata\":{\"name\":\"wrong\"},\"spec\":{\"group\":\"nodot\",\"scope\":\"Global\","
            "\"names\":{\"plural\":\"Widgets\",\"kind\":\"Widget\",\"listKind\":\"Widget\"},"
            "\"versions\":[{\"name\":\"v1\",\"served\":true,\"storage\":false}]}}");
    apicrd_prepare(crd, NULL, "2026-01-01T00:00:00Z", &f);
    char *all = NULL;
    for (size_t i = 0; i < f.n; i++) {
        char *e = apistatus_field_string(&f.v[i]);
        char *n = xasprintf("%s%s|", all ? all : "", e);
        free(all);
        free(e);
        all = n;
    }
    ASSERT_CONTAINS(all, "spec.group: Invalid value: \"nodot\": should be a domain with at least one dot");
    ASSERT_CONTAINS(all, "spec.names.plural: Invalid value: \"Widgets\"");
    ASSERT_CONTAINS(all, "spec.names.listKind: Invalid value: \"Widget\": kind and listKind may not be the same");
    ASSERT_CONTAINS(all, "spec.scope: Unsupported value: \"Global\"");
    ASSERT_CONTAINS(all, "spec.versions[0].schema.openAPIV3Schema: Required value");
    ASSERT_CONTAINS(all, "must have exactly one version marked as storage version");
    ASSERT_TRUE(json_get(crd, "status") == NULL);
    free(all);
    apistatus_fields_done(&f);
    cJSON_Delete(crd);
}

/* ---- tables ---- */

TEST(table_durations_and_jsonpath)
{
    char b[32];
    static const struct {
        long s;
        const char *want;
    } cases[] = {{0, "0s"},     {59, "59s"},   {119, "119s"}, {125, "2m5s"}, {600, "10m"},
                 {3 * 3600, "3h"}, {7 * 3600 + 60, "7h1m"}, {30 * 3600, "30h"},
                 {3 * 86400, "3d"}, {3 * 86400 + 3600, "3d1h"}, {400 * 86400, "400d"},
                 {800 * 86400, "2y70d"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        apitable_human_duration(cases[i].s, b, sizeof(b));
        ASSERT_EQ_STR(b, cases[i].want);
    }
    time_t t;
    ASSERT_OK(apitable_parse_time("2026-01-02T03:04:05Z", &t));
    ASSERT_EQ_INT(t, 1767323045);
    ASSERT_OK(apitable_parse_time("2026-01-02T04:04:05.123+01:00", &t));
    ASSERT_EQ_INT(t, 1767323045);
    ASSERT_EQ_INT(apitable_parse_time("yesterday", &t), -EINVAL);
    cJSON *o = J("{\"status\":{\"conditions\":[{\"type\":\"A\",\"status\":\"False\"},"
                 "{\"type\":\"Ready\",\"status\":\"True\"}],\"list\":[1,2,3]},"
                 "\"metadata\":{\"annotations\":{\"a.b/c\":\"v\"}}}");
    ASSERT_EQ_STR(apitable_jsonpath(o, ".status.conditions[?(@.type==\"Ready\")].status")->valuestring,
                  "True");
    ASSERT_EQ_INT(apitable_jsonpath(o, ".status.list[-1]")->valuedouble, 3);
    ASSERT_EQ_STR(apitable_jsonpath(o, ".metadata.annotations['a.b/c']")->valuestring, "v");
    ASSERT_NULL(apitable_jsonpath(o, ".status.nope.x"));
    ASSERT_NULL(apitable_jsonpath(o, ".status.list[9]"));
    cJSON_Delete(o);
}

TEST(table_of_custom_resources)
{
    cJSON *cols = J("[{\"name\":\"Phase\",\"type\":\"string\",\"jsonPath\":\".status.phase\"},"
                    "{\"name\":\"Turn\",\"type\":\"integer\",\"jsonPath\":\".status.turn.number\"},"
                    "{\"name\":\"Age\",\"type\":\"date\",\"jsonPath\":\".metadata.creationTimestamp\"}]");
    struct apires res = {.group = "tern.dev", .version = "v1", .plural = "ags", .kind = "AgentSession",
                         .crd = true, .columns = cols};
    cJSON *o = J("{\"metadata\":{\"name\":\"a\",\"creationTimestamp\":\"2026-01-01T00:00:00Z\"},"
                 "\"status\":{\"phase\":\"Running\",\"turn\":{\"number\":4}}}");
    cJSON *t = apitable_build(&res, &o, 1, APITABLE_METADATA, "12", 1767225600 + 125);
    const cJSON *defs = json_get(t, "columnDefinitions");
    ASSERT_EQ_INT(cJSON_GetArraySize(defs), 4);
    ASSERT_EQ_STR(json_get(defs->child, "name")->valuestring, "Name");
    expect_json(json_get(json_get(t, "rows")->child, "cells"), "[\"a\",\"Running\",4,\"2m5s\"]");
    ASSERT_EQ_STR(json_get(json_get(json_get(t, "rows")->child, "object"), "kind")->valuestring,
                  "PartialObjectMetadata");
    cJSON_Delete(t);
    cJSON_Delete(o);
    cJSON_Delete(cols);
}

/* ---- paths and discovery ---- */

TEST(path_parsing)
{
    struct apirest_path p;
    ASSERT_OK(apirest_parse_path("/api/v1/namespaces/ns1/pods/p%2Dx/status", &p));
    ASSERT_EQ_INT(p.kind, APIREST_P_RESOURCE);
    ASSERT_EQ_STR(p.group, "");
    ASSERT_EQ_STR(p.ns, "ns1");
    ASSERT_EQ_STR(p.resource, "pods");
    ASSERT_EQ_STR(p.name, "p-x");
    ASSERT_EQ_STR(p.sub, "status");
    apirest_path_done(&p);
    ASSERT_OK(apirest_parse_path("/api/v1/namespaces/ns1", &p));
    ASSERT_EQ_STR(p.resource, "namespaces");
    ASSERT_EQ_STR(p.name, "ns1");
    ASSERT_NULL(p.ns);
    apirest_path_done(&p);
    ASSERT_OK(apirest_parse_path("/api/v1/namespaces/ns1/status", &p));
    ASSERT_EQ_STR(p.sub, "status");
    apirest_path_done(&p);
    ASSERT_OK(apirest_parse_path("/apis/tern.dev/v1alpha1/agentsessions", &p));
    ASSERT_EQ_STR(p.group, "tern.dev");
    ASSERT_EQ_STR(p.resource, "agentsessions");
    apirest_path_done(&p);
    ASSERT_OK(apirest_parse_path("/apis/tern.dev", &p));
    ASSERT_EQ_INT(p.kind, APIREST_P_GROUP);
    apirest_path_done(&p);
    ASSERT_EQ_INT(apirest_parse_path("/api/v1/a/b/c/d", &p), -EINVAL);
    ASSERT_EQ_INT(apirest_parse_path("relative", &p), -EINVAL);
    ASSERT_EQ_INT(apirest_parse_path("/api/v1/x%00y", &p), -EINVAL);
    ASSERT_EQ_INT(apirest_parse_path("/a/b/c/d/e/f/g/h/i/j/k/l", &p), -EINVAL);
}

TEST(discovery_documents)
{
    struct apires_registry reg;
    apires_registry_init(&reg);
    cJSON *crds = J("[{\"metadata\":{\"name\":\"widgets.example.com\"},\"spec\":{\"group\":"
                    "\"example.com\",\"scope\":\"Cluster\",\"names\":{\"plural\":\"widgets\","
                    "\"singular\":\"widget\",\"kind\":\"Widget\",\"shortNames\":[\"wd\"],"
                    "\"categories\":[\"all\"]},\"versions\":[{\"name\":\"v1\",\"served\":true,"
                    "\"storage\":true,\"subresources\":{\"status\":{}},"
                    "\"selectableFields\":[{\"jsonPath\":\".spec.color\"}]}]},\"status\":{\"conditions\":"
                    "[{\"type\":\"Established\",\"status\":\"True\"}]}}]");
    apires_registry_set_crds(&reg, crds);
    struct apires_table *t = apires_get(&reg);
    const struct apires *w = apires_find(t, "example.com", "v1", "widgets");
    ASSERT_NOT_NULL(w);
    ASSERT_FALSE(w->namespaced);
    ASSERT_EQ_STR(w->fields[0], "spec.color");
    ASSERT_NULL(w->fields[1]);
    char *k = apires_key(w, "ignored", "w1");
    ASSERT_EQ_STR(k, "/registry/example.com/widgets/w1");
    free(k);
    const struct apires *pods = apires_find(t, "", "v1", "pods");
    k = apires_key(pods, "ns", NULL);
    ASSERT_EQ_STR(k, "/registry/pods/ns/");
    free(k);
    cJSON *rl = apires_resource_list(t, "example.com", "v1");
    char *s = json_print(rl);
    ASSERT_CONTAINS(s, "\"name\":\"widgets\",\"singularName\":\"widget\",\"namespaced\":false");
    ASSERT_CONTAINS(s, "\"shortNames\":[\"wd\"]");
    ASSERT_CONTAINS(s, "\"name\":\"widgets/status\"");
    free(s);
    cJSON_Delete(rl);
    cJSON *gl = apires_group_list(t);
    s = json_print(gl);
    ASSERT_CONTAINS(s, "{\"name\":\"example.com\",\"versions\":[{\"groupVersion\":\"example.com/v1\"");
    ASSERT_CONTAINS(s, "\"name\":\"batch\"");
    free(s);
    cJSON_Delete(gl);
    cJSON *core = apires_resource_list(t, "", "v1");
    s = json_print(core);
    ASSERT_CONTAINS(s, "\"name\":\"configmaps\",\"singularName\":\"configmap\",\"namespaced\":true,"
                       "\"kind\":\"ConfigMap\"");
    ASSERT_CONTAINS(s, "\"shortNames\":[\"cm\"]");
    free(s);
    cJSON_Delete(core);
    apires_put(&reg, t);
    apires_registry_done(&reg);
}

/* ---- protobuf bodies (bytes captured from kubectl 1.32 create secret) ---- */

#include "apiserver/apiproto.h"

TEST(protobuf_secret_from_kubectl)
{
    static const unsigned char secret[] = {
        0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0c, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x06, 0x53, 0x65, 0x63,
        0x72, 0x65, 0x74, 0x12, 0x23, 0x0a, 0x11, 0x0a, 0x01, 0x73, 0x12, 0x00, 0x1a, 0x00, 0x22,
        0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00, 0x12, 0x06, 0x0a, 0x01, 0x61, 0x12,
        0x01, 0x62, 0x1a, 0x06, 0x4f, 0x70, 0x61, 0x71, 0x75, 0x65, 0x1a, 0x00, 0x22, 0x00};
    cJSON *o = NULL;
    struct tern_err e = {0};
    ASSERT_OK(apiproto_decode(secret, sizeof(secret), &o, &e));
    expect_json(o, "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"s\"},"
                   "\"data\":{\"a\":\"Yg==\"},\"type\":\"Opaque\"}");
    cJSON_Delete(o);
    /* truncated, wrong magic, unsupported kind */
    ASSERT_EQ_INT(apiproto_decode(secret, sizeof(secret) - 3, &o, &e), TERN_EPARSE);
    ASSERT_EQ_INT(apiproto_decode("{\"a\":1}", 7, &o, &e), TERN_EPARSE);
    static const unsigned char job[] = {0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0f, 0x0a, 0x08, 0x62,
                                        0x61, 0x74, 0x63, 0x68, 0x2f, 0x76, 0x31, 0x12, 0x03,
                                        0x4a, 0x6f, 0x62};
    ASSERT_EQ_INT(apiproto_decode(job, sizeof(job), &o, &e), TERN_EINVALID);
}
