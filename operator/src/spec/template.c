/* template.c - AgentSessionTemplate merge and effective spec (template.h). */
#include "spec/template.h"

#include "base/mem.h"
#include "json/json.h"
#include "spec/session_spec.h"

#include <stdlib.h>
#include <string.h>

const char *const template_spec_fields[] = {"identity", "context",  "skills",
                                            "memory",   "permissions", "tools",
                                            "limits",   "model",    "sandbox",
                                            "approval", "ttlSecondsAfterFinished", NULL};

/* clang-format off */
static const char defaults_json[] =
    "{\"permissions\":{\"tools\":[\"exec_command\",\"read_file\",\"write_file\",\"list_files\"],"
    "\"writablePaths\":[\"working/**\",\"output/**\"],\"networkAllowlist\":[]},"
    "\"limits\":{\"timeoutSeconds\":3600,\"maxModelTurns\":50,\"maxToolCalls\":200,"
    "\"maxTokens\":2000000,\"maxCostMicroUSD\":0,\"maxResultAttempts\":3,\"cpu\":\"1\",\"memory\":\"1Gi\"},"
    "\"model\":{\"name\":\"gpt-5.6-mini\",\"baseURL\":\"https://api.openai.com/v1\"},"
    "\"sandbox\":{\"workspace\":{\"size\":\"5Gi\"},\"idleSuspendSeconds\":600},"
    "\"approval\":{\"timeoutSeconds\":86400,\"onTimeout\":\"Deny\"},"
    "\"suspend\":false}";
/* clang-format on */

const char *template_defaults_json(void)
{
    return defaults_json;
}

/* The defaults tree, parsed once per call site (cheap: a few hundred bytes). */
static cJSON *defaults_tree(void)
{
    cJSON *d = cJSON_ParseWithLength(defaults_json, sizeof defaults_json - 1);
    if (!d)
        abort(); /* a constant */
    return d;
}

static void merge_into(cJSON *dst, const cJSON *src, const cJSON *defs)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, src)
    {
        if (!s->string)
            continue;
        cJSON *t = cJSON_GetObjectItemCaseSensitive(dst, s->string);
        const cJSON *d = cJSON_IsObject(defs) ? json_get(defs, s->string) : NULL;
        if (t && cJSON_IsObject(t) && cJSON_IsObject(s)) {
            merge_into(t, s, d);
            continue;
        }
        if (t && d && !cJSON_IsObject(d) && json_equal(s, d))
            continue; /* the CRD's default, not the session's choice */
        if (t)
            cJSON_ReplaceItemInObjectCaseSensitive(dst, s->string, json_dup(s));
        else
            cJSON_AddItemToObject(dst, s->string, json_dup(s));
    }
}

cJSON *template_merge(const cJSON *tmpl_spec, const cJSON *session_spec)
{
    cJSON *out = cJSON_IsObject(tmpl_spec) ? json_dup(tmpl_spec) : cJSON_CreateObject();
    cJSON *defs = defaults_tree();
    cJSON *sess = cJSON_IsObject(session_spec) ? json_dup(session_spec) : cJSON_CreateObject();
    cJSON_DeleteItemFromObjectCaseSensitive(sess, "templateRef");
    merge_into(out, sess, defs);
    cJSON_Delete(sess);
    cJSON_Delete(defs);
    return out;
}

const char *template_ref_name(const cJSON *obj)
{
    const cJSON *n = json_get(json_get(json_get(obj, "spec"), "templateRef"), "name");
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

int template_check_spec(const cJSON *spec, struct tern_err *err)
{
    if (!cJSON_IsObject(spec))
        return err_set(err, TERN_EINVALID, "spec: must be an object");
    const cJSON *f;
    cJSON_ArrayForEach(f, spec)
    {
        bool known = false;
        for (size_t i = 0; template_spec_fields[i]; i++)
            known |= f->string && strcmp(f->string, template_spec_fields[i]) == 0;
        if (!known)
            return err_set(err, TERN_EINVALID,
                           "spec.%s: not a template field (a template holds identity, context, "
                           "skills, memory, permissions, tools, limits, model, sandbox, "
                           "approval, ttlSecondsAfterFinished)",
                           f->string ? f->string : "?");
    }
    cJSON *obj = cJSON_CreateObject();
    cJSON *s = json_dup(spec);
    json_add_string(s, "objective", "template check");
    cJSON_AddItemToObject(obj, "spec", s);
    struct session_spec *ss = NULL;
    int r = session_spec_parse(obj, &ss, err);
    session_spec_free(ss);
    cJSON_Delete(obj);
    return r;
}

int template_effective(const cJSON *obj, cJSON **ret, struct tern_err *err)
{
    const cJSON *spec = json_get(obj, "spec");
    const cJSON *ref = json_get(spec, "templateRef");
    if (!ref) {
        *ret = NULL;
        return 0;
    }
    const cJSON *name = json_get(ref, "name");
    if (!cJSON_IsObject(ref) || !cJSON_IsString(name) || !name->valuestring[0] ||
        cJSON_GetArraySize(ref) != 1)
        return err_set(err, TERN_EINVALID,
                       "spec.templateRef: must be {name: <AgentSessionTemplate>}");
    if (strlen(name->valuestring) > 253)
        return err_set(err, TERN_EINVALID, "spec.templateRef.name: at most 253 characters");
    const cJSON *rec = json_get(json_get(obj, "status"), "template");
    if (!rec)
        return err_set(err, TERN_ENOTFOUND,
                       "spec.templateRef: agentsessiontemplate %s not resolved yet",
                       name->valuestring);
    const cJSON *rname = json_get(rec, "name");
    const cJSON *rspec = json_get(rec, "spec");
    if (!cJSON_IsString(rname) || !cJSON_IsObject(rspec))
        return err_set(err, TERN_EINVALID, "status.template: malformed record");
    if (strcmp(rname->valuestring, name->valuestring) != 0)
        return err_set(err, TERN_EINVALID,
                       "spec.templateRef.name: cannot change once the session started "
                       "(it resolved %s)",
                       rname->valuestring);
    cJSON *out = json_dup(obj);
    cJSON_ReplaceItemInObjectCaseSensitive(out, "spec", template_merge(rspec, spec));
    *ret = out;
    return 0;
}
