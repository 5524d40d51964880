/* Unit tests for spec/template: the CRD's defaults against ours, the merge
 * (session over template, defaults filled by the API server do not count as
 * set), the effective spec from status.template, and template checks. Run
 * from the repo root (the suite runner does). */
#include "harness.h"

#include "base/buf.h"
#include "base/mem.h"
#include "json/json.h"
#include "spec/session_spec.h"
#include "spec/template.h"
#include "yaml/yamljson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        th_fail(__FILE__, __LINE__, "cannot open %s (run from the repo root)", path);
    struct buf b;
    buf_init(&b, 1u << 24);
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_append(&b, chunk, n);
    fclose(f);
    return buf_steal(&b);
}

/* The CRD's `default:` values applied the way the API server does. */
static void apply_defaults(const cJSON *schema, cJSON *obj)
{
    const cJSON *props = json_get(schema, "properties");
    if (cJSON_IsObject(obj) && props) {
        for (const cJSON *p = props->child; p; p = p->next) {
            const cJSON *def = json_get(p, "default");
            if (def && !json_get(obj, p->string))
                cJSON_AddItemToObject(obj, p->string, json_dup(def));
            cJSON *child = cJSON_GetObjectItemCaseSensitive(obj, p->string);
            if (child)
                apply_defaults(p, child);
        }
    }
}

static const cJSON *spec_schema(cJSON *crd)
{
    const cJSON *v = cJSON_GetArrayItem(json_get(json_get(crd, "spec"), "versions"), 0);
    return json_get(json_get(json_get(json_get(v, "schema"), "openAPIV3Schema"), "properties"),
                    "spec");
}

static cJSON *parse(const char *s)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    if (json_parse(s, strlen(s), &j, &e))
        th_fail(__FILE__, __LINE__, "bad test JSON: %s", e.msg);
    return j;
}

static cJSON *session_crd(void)
{
    char *text = read_all("crds/agentsessions.tern.dev.yaml");
    cJSON *crd = NULL;
    struct tern_err e = {0};
    if (yamljson_parse_one(text, strlen(text), NULL, &crd, &e))
        th_fail(__FILE__, __LINE__, "CRD: %s", e.msg);
    free(text);
    return crd;
}

TEST(template_defaults_agree_with_the_crd)
{
    cJSON *crd = session_crd();
    cJSON *spec = parse("{\"objective\":\"x\"}");
    apply_defaults(spec_schema(crd), spec);
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "objective");
    cJSON *ours = parse(template_defaults_json());
    if (!json_equal(spec, ours)) {
        char *a = json_print(spec), *b = json_print(ours);
        th_fail(__FILE__, __LINE__, "CRD defaults %s\n differ from template.c's %s", a, b);
    }
    cJSON_Delete(ours);
    cJSON_Delete(spec);
    cJSON_Delete(crd);
}

/* An AgentSession as the API server stores it: the CRD's defaults filled. */
static cJSON *stored_session(cJSON *crd, const char *spec_json, const char *template_json)
{
    cJSON *spec = parse(spec_json);
    apply_defaults(spec_schema(crd), spec);
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "apiVersion", "tern.dev/v1alpha1");
    json_add_string(o, "kind", "AgentSession");
    cJSON *meta = cJSON_AddObjectToObject(o, "metadata");
    json_add_string(meta, "name", "s1");
    json_add_string(meta, "namespace", "ns");
    cJSON_AddItemToObject(o, "spec", spec);
    if (template_json) {
        cJSON *st = cJSON_AddObjectToObject(o, "status");
        cJSON_AddItemToObject(st, "template", parse(template_json));
    }
    return o;
}

TEST(template_session_fields_override_and_defaults_do_not)
{
    cJSON *crd = session_crd();
    cJSON *o = stored_session(
        crd,
        "{\"objective\":\"review\",\"templateRef\":{\"name\":\"t\"},"
        "\"model\":{\"name\":\"m-session\"},\"limits\":{\"maxModelTurns\":9},"
        "\"messages\":[\"more\"]}",
        "{\"name\":\"t\",\"uid\":\"u\",\"resourceVersion\":\"5\",\"spec\":{"
        "\"model\":{\"name\":\"m-template\",\"baseURL\":\"http://llm.local/v1\"},"
        "\"limits\":{\"maxToolCalls\":7,\"maxModelTurns\":3,\"timeoutSeconds\":60},"
        "\"skills\":[{\"configMapRef\":{\"name\":\"sk\"}}],"
        "\"permissions\":{\"tools\":[\"read_file\",\"list_files\"]},"
        "\"sandbox\":{\"idleSuspendSeconds\":0}}}");
    struct session_spec *s = NULL;
    struct tern_err e = {0};
    ASSERT_OK(session_spec_parse(o, &s, &e));
    ASSERT_EQ_STR(s->objective, "review");
    ASSERT_EQ_STR(s->model.name, "m-session");              /* the session's own */
    ASSERT_EQ_STR(s->model.base_url, "http://llm.local/v1"); /* defaulted in the session */
    ASSERT_EQ_INT(s->limits.max_model_turns, 9);
    ASSERT_EQ_INT(s->limits.max_tool_calls, 7);   /* session has the default 200 */
    ASSERT_EQ_INT(s->limits.timeout_seconds, 60); /* session has the default 3600 */
    ASSERT_EQ_INT(s->permissions.tools, SESSION_TOOL_READ_FILE | SESSION_TOOL_LIST_FILES);
    ASSERT_EQ_INT(s->sandbox.idle_suspend_seconds, 0);
    ASSERT_EQ_INT(s->nskills, 1);
    ASSERT_EQ_STR(s->skills[0], "sk");
    ASSERT_EQ_INT(s->nmessages, 1); /* session edits still apply */
    session_spec_free(s);
    cJSON_Delete(o);
    cJSON_Delete(crd);
}

TEST(template_lists_replace_whole_lists)
{
    cJSON *t = parse("{\"permissions\":{\"tools\":[\"read_file\"],\"writablePaths\":[\"a/**\"]}}");
    cJSON *s = parse("{\"objective\":\"x\",\"templateRef\":{\"name\":\"t\"},"
                     "\"permissions\":{\"writablePaths\":[\"b/**\"]}}");
    cJSON *m = template_merge(t, s);
    cJSON *want = parse("{\"permissions\":{\"tools\":[\"read_file\"],\"writablePaths\":[\"b/**\"]},"
                        "\"objective\":\"x\"}");
    ASSERT_TRUE(json_equal(m, want));
    cJSON_Delete(want);
    cJSON_Delete(m);
    cJSON_Delete(s);
    cJSON_Delete(t);
}

TEST(template_effective_needs_the_record)
{
    cJSON *crd = session_crd();
    struct tern_err e = {0};
    cJSON *eff = NULL;
    cJSON *plain = stored_session(crd, "{\"objective\":\"x\"}", NULL);
    ASSERT_OK(template_effective(plain, &eff, &e));
    ASSERT_NULL(eff);
    cJSON *un = stored_session(crd, "{\"objective\":\"x\",\"templateRef\":{\"name\":\"t\"}}", NULL);
    ASSERT_EQ_INT(template_effective(un, &eff, &e), TERN_ENOTFOUND);
    ASSERT_CONTAINS(e.msg, "not resolved yet");
    struct session_spec *s = NULL;
    ASSERT_EQ_INT(session_spec_parse(un, &s, &e), TERN_ENOTFOUND);
    cJSON *other = stored_session(crd, "{\"objective\":\"x\",\"templateRef\":{\"name\":\"t\"}}",
                                  "{\"name\":\"u\",\"spec\":{}}");
    ASSERT_EQ_INT(template_effective(other, &eff, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "cannot change");
    cJSON *bad = stored_session(crd, "{\"objective\":\"x\",\"templateRef\":{\"name\":\"t\",\"x\":1}}",
                                "{\"name\":\"t\",\"spec\":{}}");
    ASSERT_EQ_INT(template_effective(bad, &eff, &e), TERN_EINVALID);
    cJSON_Delete(bad);
    cJSON_Delete(other);
    cJSON_Delete(un);
    cJSON_Delete(plain);
    cJSON_Delete(crd);
}

/* The merged spec is validated like a hand-written one: a template value out
 * of the CRD's bounds fails the session with the field path. */
TEST(template_merged_spec_is_validated)
{
    cJSON *crd = session_crd();
    cJSON *o = stored_session(crd, "{\"objective\":\"x\",\"templateRef\":{\"name\":\"t\"}}",
                              "{\"name\":\"t\",\"spec\":{\"limits\":{\"maxToolCalls\":0}}}");
    struct session_spec *s = NULL;
    struct tern_err e = {0};
    ASSERT_EQ_INT(session_spec_parse(o, &s, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "spec.limits.maxToolCalls");
    ASSERT_CONTAINS(e.msg, "agentsessiontemplate t");
    cJSON_Delete(o);
    o = stored_session(crd, "{\"objective\":\"x\",\"templateRef\":{\"name\":\"t\"}}",
                       "{\"name\":\"t\",\"spec\":{\"limits\":{\"bogus\":1}}}");
    ASSERT_EQ_INT(session_spec_parse(o, &s, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "spec.limits");
    cJSON_Delete(o);
    cJSON_Delete(crd);
}

TEST(template_check_spec_fields)
{
    struct tern_err e = {0};
    cJSON *ok = parse("{\"model\":{\"name\":\"m\"},\"limits\":{\"maxToolCalls\":5},"
                      "\"ttlSecondsAfterFinished\":3600}");
    ASSERT_OK(template_check_spec(ok, &e));
    cJSON *obj = parse("{\"objective\":\"not here\"}");
    ASSERT_EQ_INT(template_check_spec(obj, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "spec.objective: not a template field");
    cJSON *badv = parse("{\"limits\":{\"maxToolCalls\":-1}}");
    ASSERT_EQ_INT(template_check_spec(badv, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "spec.limits.maxToolCalls");
    cJSON_Delete(badv);
    cJSON_Delete(obj);
    cJSON_Delete(ok);
}
