/* apicrd.c - CRD validation and status. See apicrd.h. */
#include "apicrd.h"

#include "apischema.h"
#include "base/mem.h"
#include "json/json.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char subdomain_msg[] =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
static const char label_msg[] =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

static bool lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

const char *apicrd_check_label(const char *s)
{
    size_t n = strlen(s);
    if (n > 63)
        return "must be no more than 63 characters";
    if (n == 0 || !lower_alnum(s[0]) || !lower_alnum(s[n - 1]))
        return label_msg;
    for (size_t i = 0; i < n; i++)
        if (!lower_alnum(s[i]) && s[i] != '-')
            return label_msg;
    return NULL;
}

const char *apicrd_check_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n > 253)
        return "must be no more than 253 characters";
    if (n == 0)
        return subdomain_msg;
    const char *p = s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0 || !lower_alnum(p[0]) || !lower_alnum(p[len - 1]))
            return subdomain_msg;
        for (size_t i = 0; i < len; i++)
            if (!lower_alnum(p[i]) && p[i] != '-')
                return subdomain_msg;
        if (!dot)
            break;
        p = dot + 1;
    }
    return NULL;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = json_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static cJSON *ensure_obj(cJSON *o, const char *k)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsObject(v)) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, k);
        v = cJSON_AddObjectToObject(o, k);
    }
    return v;
}

static char *lower(const char *s)
{
    char *r = xstrdup(s);
    for (char *p = r; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return r;
}

static void check_name_field(const cJSON *names, const char *key, const char *path, bool required,
                             struct apistatus_fields *f)
{
    const char *v = jstr(names, key);
    char *fp = xasprintf("%s.%s", path, key);
    if (!v || !*v) {
        if (required)
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, fp, NULL, NULL);
    } else if (strcmp(key, "kind") == 0 || strcmp(key, "listKind") == 0) {
        /* a DNS-1035-ish C identifier: starts with a letter */
        bool ok = isalpha((unsigned char)v[0]);
        for (const char *p = v; *p; p++)
            ok &= isalnum((unsigned char)*p) != 0;
        if (!ok)
            apistatus_fields_add(f, APISTATUS_F_INVALID, fp, json_get(names, key),
                                 "may have mixed case, but should otherwise match: "
                                 "^[a-zA-Z][a-zA-Z0-9]*$ (e.g. 'MyKind')");
    } else {
        const char *e = apicrd_check_label(v);
        if (e)
            apistatus_fields_add(f, APISTATUS_F_INVALID, fp, json_get(names, key), e);
    }
    free(fp);
}

static void add_condition(cJSON *conds, const char *type, const char *reason, const char *msg,
                          const char *now)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "type", type);
    cJSON_AddStringToObject(c, "status", "True");
    cJSON_AddStringToObject(c, "lastTransitionTime", now);
    cJSON_AddStringToObject(c, "reason", reason);
    cJSON_AddStringToObject(c, "message", msg);
    cJSON_AddItemToArray(conds, c);
}

void apicrd_prepare(cJSON *crd, const cJSON *old, const char *now, struct apistatus_fields *f)
{
    cJSON *spec = ensure_obj(crd, "spec");
    cJSON *names = ensure_obj(spec, "names");
    const char *kind = jstr(names, "kind");
    if (kind && !jstr(names, "singular")) {
        char *s = lower(kind);
        cJSON_AddStringToObject(names, "singular", s);
        free(s);
    }
    if (kind && !jstr(names, "listKind")) {
        char *s = xasprintf("%sList", kind);
        cJSON_AddStringToObject(names, "listKind", s);
        free(s);
    }
    if (!json_get(spec, "conversion")) {
        cJSON *c = cJSON_AddObjectToObject(spec, "conversion");
        cJSON_AddStringToObject(c, "strategy", "None");
    }
    const char *group = jstr(spec, "group");
    const char *plural = jstr(names, "plural");
    const char *name = jstr(json_get(crd, "metadata"), "name");
    if (!group || !*group) {
        apistatus_fields_addv(f, APISTATUS_F_REQUIRED, "spec.group", NULL, NULL);
    } else {
        const char *e = apicrd_check_subdomain(group);
        if (e)
            apistatus_fields_add(f, APISTATUS_F_INVALID, "spec.group", json_get(spec, "group"), e);
        else if (!strchr(group, '.'))
            apistatus_fields_add(f, APISTATUS_F_INVALID, "spec.group", json_get(spec, "group"),
                                 "should be a domain with at least one dot");
    }
    check_name_field(names, "plural", "spec.names", true, f);
    check_name_field(names, "singular", "spec.names", true, f);
    check_name_field(names, "kind", "spec.names", true, f);
    check_name_field(names, "listKind", "spec.names", true, f);
    const char *lk = jstr(names, "listKind");
    if (kind && lk && strcmp(kind, lk) == 0)
        apistatus_fields_add(f, APISTATUS_F_INVALID, "spec.names.listKind",
                             json_get(names, "listKind"), "kind and listKind may not be the same");
    const cJSON *shorts = json_get(names, "shortNames");
    int i = 0;
    for (const cJSON *s = shorts ? shorts->child : NULL; s; s = s->next, i++) {
        const char *e = cJSON_IsString(s) ? apicrd_check_label(s->valuestring) : label_msg;
        if (e) {
            char *fp = xasprintf("spec.names.shortNames[%d]", i);
            apistatus_fields_add(f, APISTATUS_F_INVALID, fp, s, e);
            free(fp);
        }
    }
    if (group && plural && name) {
        char *expect = xasprintf("%s.%s", plural, group);
        if (strcmp(expect, name) != 0) {
            char *d = xasprintf("must be spec.names.plural+\".\"+spec.group");
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.name",
                                 json_get(json_get(crd, "metadata"), "name"), d);
            free(d);
        }
        free(expect);
    }
    const char *scope = jstr(spec, "scope");
    if (!scope || !*scope)
        apistatus_fields_addv(f, APISTATUS_F_REQUIRED, "spec.scope", NULL, NULL);
    else if (strcmp(scope, "Namespaced") != 0 && strcmp(scope, "Cluster") != 0)
        apistatus_fields_add(f, APISTATUS_F_UNSUPPORTED, "spec.scope", json_get(spec, "scope"),
                             "supported values: \"Cluster\", \"Namespaced\"");
    const cJSON *versions = json_get(spec, "versions");
    int nstorage = 0;
    const char *storage = NULL;
    if (!cJSON_IsArray(versions) || !versions->child) {
        apistatus_fields_addv(f, APISTATUS_F_INVALID, "spec.versions", "null",
                              "must have exactly one version marked as storage version");
    }
    i = 0;
    for (const cJSON *v = versions ? versions->child : NULL; v; v = v->next, i++) {
        const char *vn = jstr(v, "name");
        char *vp = xasprintf("spec.versions[%d]", i);
        if (!vn || !*vn) {
            char *fp = xasprintf("%s.name", vp);
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, fp, NULL, NULL);
            free(fp);
        } else {
            const char *e = apicrd_check_label(vn);
            if (e) {
                char *fp = xasprintf("%s.name", vp);
                apistatus_fields_add(f, APISTATUS_F_INVALID, fp, json_get(v, "name"), e);
                free(fp);
            }
            for (const cJSON *w = versions->child; w != v; w = w->next) {
                const char *wn = jstr(w, "name");
                if (wn && strcmp(wn, vn) == 0) {
                    apistatus_fields_add(f, APISTATUS_F_INVALID, "spec.versions",
                                         json_get(v, "name"), "must contain unique version names");
                    break;
                }
            }
        }
        if (cJSON_IsTrue(json_get(v, "storage"))) {
            nstorage++;
            storage = vn;
        }
        const cJSON *schema = json_get(json_get(v, "schema"), "openAPIV3Schema");
        if (!schema) {
            char *fp = xasprintf("%s.schema.openAPIV3Schema", vp);
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, fp, NULL,
                                  "schemas are required");
            free(fp);
        } else {
            char *fp = xasprintf("%s.schema.openAPIV3Schema", vp);
            apischema_check_structural(schema, fp, f);
            free(fp);
        }
        const cJSON *cols = json_get(v, "additionalPrinterColumns");
        int j = 0;
        for (const cJSON *c = cols ? cols->child : NULL; c; c = c->next, j++) {
            static const char *req[] = {"name", "type", "jsonPath"};
            for (size_t k = 0; k < 3; k++)
                if (!jstr(c, req[k])) {
                    char *fp = xasprintf("%s.additionalPrinterColumns[%d].%s", vp, j, req[k]);
                    apistatus_fields_addv(f, APISTATUS_F_REQUIRED, fp, NULL, NULL);
                    free(fp);
                }
            const char *t = jstr(c, "type");
            if (t && strcmp(t, "integer") && strcmp(t, "number") && strcmp(t, "string") &&
                strcmp(t, "boolean") && strcmp(t, "date")) {
                char *fp = xasprintf("%s.additionalPrinterColumns[%d].type", vp, j);
                apistatus_fields_add(f, APISTATUS_F_UNSUPPORTED, fp, json_get(c, "type"),
                                     "supported values: \"boolean\", \"date\", \"integer\", "
                                     "\"number\", \"string\"");
                free(fp);
            }
        }
        free(vp);
    }
    if (cJSON_IsArray(versions) && versions->child && nstorage != 1)
        apistatus_fields_addv(f, APISTATUS_F_INVALID, "spec.versions", "[]",
                              "must have exactly one version marked as storage version");
    if (old) {
        const cJSON *os = json_get(old, "spec");
        const char *og = jstr(os, "group"), *op = jstr(json_get(os, "names"), "plural"),
                   *osc = jstr(os, "scope");
        if (og && group && strcmp(og, group) != 0)
            apistatus_fields_add(f, APISTATUS_F_INVALID, "spec.group", json_get(spec, "group"),
                                 "field is immutable");
        if (op && plural && strcmp(op, plural) != 0)
            apistatus_fields_add(f, APISTATUS_F_INVALID, "spec.names.plural",
                                 json_get(names, "plural"), "field is immutable");
        if (osc && scope && strcmp(osc, scope) != 0)
            apistatus_fields_add(f, APISTATUS_F_INVALID, "spec.scope", json_get(spec, "scope"),
                                 "field is immutable");
    }
    if (f->n)
        return;
    /* status: what the naming and establishing controllers would write */
    cJSON_DeleteItemFromObjectCaseSensitive(crd, "status");
    cJSON *st = cJSON_AddObjectToObject(crd, "status");
    cJSON_AddItemToObject(st, "acceptedNames", json_dup(names));
    cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
    const char *ts = now;
    /* keep the transition times of an already established CRD */
    const cJSON *oconds = json_get(json_get(old, "status"), "conditions");
    if (oconds && oconds->child && jstr(oconds->child, "lastTransitionTime"))
        ts = jstr(oconds->child, "lastTransitionTime");
    add_condition(conds, "NamesAccepted", "NoConflicts", "no conflicts found", ts);
    add_condition(conds, "Established", "InitialNamesAccepted",
                  "the initial names have been accepted", ts);
    cJSON *sv = cJSON_AddArrayToObject(st, "storedVersions");
    const cJSON *osv = json_get(json_get(old, "status"), "storedVersions");
    for (const cJSON *v = osv ? osv->child : NULL; v; v = v->next)
        if (cJSON_IsString(v) && (!storage || strcmp(v->valuestring, storage) != 0))
            cJSON_AddItemToArray(sv, cJSON_CreateString(v->valuestring));
    if (storage)
        cJSON_AddItemToArray(sv, cJSON_CreateString(storage));
}
