/* apistatus.c - Kubernetes Status objects and field errors. See apistatus.h. */
#include "apistatus.h"

#include "base/buf.h"
#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

static const char *ftype_text(enum apistatus_ftype t)
{
    switch (t) {
    case APISTATUS_F_REQUIRED: return "Required value";
    case APISTATUS_F_INVALID: return "Invalid value";
    case APISTATUS_F_UNSUPPORTED: return "Unsupported value";
    case APISTATUS_F_DUPLICATE: return "Duplicate value";
    case APISTATUS_F_FORBIDDEN: return "Forbidden";
    case APISTATUS_F_TOOLONG: return "Too long";
    case APISTATUS_F_TOOMANY: return "Too many";
    case APISTATUS_F_TYPE: return "Invalid value";
    }
    return "Invalid value";
}

static const char *ftype_reason(enum apistatus_ftype t)
{
    switch (t) {
    case APISTATUS_F_REQUIRED: return "FieldValueRequired";
    case APISTATUS_F_INVALID: return "FieldValueInvalid";
    case APISTATUS_F_UNSUPPORTED: return "FieldValueNotSupported";
    case APISTATUS_F_DUPLICATE: return "FieldValueDuplicate";
    case APISTATUS_F_FORBIDDEN: return "FieldValueForbidden";
    case APISTATUS_F_TOOLONG: return "FieldValueTooLong";
    case APISTATUS_F_TOOMANY: return "FieldValueTooMany";
    case APISTATUS_F_TYPE: return "FieldValueTypeInvalid";
    }
    return "FieldValueInvalid";
}

void apistatus_fields_addv(struct apistatus_fields *f, enum apistatus_ftype t, const char *field,
                           const char *value, const char *detail)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 4;
        f->v = xreallocarray(f->v, f->cap, sizeof(*f->v));
    }
    struct apistatus_field *e = &f->v[f->n++];
    e->type = t;
    e->field = xstrdup(field ? field : "");
    e->value = value ? xstrdup(value) : NULL;
    e->detail = detail && *detail ? xstrdup(detail) : NULL;
}

void apistatus_fields_add(struct apistatus_fields *f, enum apistatus_ftype t, const char *field,
                          const cJSON *value_json, const char *detail)
{
    char *v = NULL;
    if (value_json) {
        if (cJSON_IsString(value_json)) {
            cJSON *s = cJSON_CreateString(value_json->valuestring);
            v = json_print(s);
            cJSON_Delete(s);
        } else {
            v = json_print(value_json);
        }
    }
    apistatus_fields_addv(f, t, field, v, detail);
    free(v);
}

void apistatus_fields_done(struct apistatus_fields *f)
{
    for (size_t i = 0; i < f->n; i++) {
        free(f->v[i].field);
        free(f->v[i].value);
        free(f->v[i].detail);
    }
    free(f->v);
    memset(f, 0, sizeof(*f));
}

static char *field_body(const struct apistatus_field *e)
{
    struct buf b;
    buf_init(&b, SIZE_MAX / 2);
    buf_puts(&b, ftype_text(e->type));
    if (e->type != APISTATUS_F_REQUIRED && e->type != APISTATUS_F_FORBIDDEN &&
        e->type != APISTATUS_F_TOOLONG)
        buf_printf(&b, ": %s", e->value ? e->value : "\"null\"");
    if (e->detail)
        buf_printf(&b, ": %s", e->detail);
    return buf_steal(&b);
}

char *apistatus_field_string(const struct apistatus_field *e)
{
    char *body = field_body(e);
    char *s = xasprintf("%s: %s", e->field, body);
    free(body);
    return s;
}

cJSON *apistatus_new(int code, const char *reason, const char *message, const char *group,
                     const char *kind, const char *name)
{
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "kind", "Status");
    cJSON_AddStringToObject(s, "apiVersion", "v1");
    cJSON_AddItemToObject(s, "metadata", cJSON_CreateObject());
    cJSON_AddStringToObject(s, "status", code >= 200 && code < 300 ? "Success" : "Failure");
    if (message)
        cJSON_AddStringToObject(s, "message", message);
    if (reason && *reason)
        cJSON_AddStringToObject(s, "reason", reason);
    if ((name && *name) || (group && *group) || (kind && *kind)) {
        cJSON *d = cJSON_AddObjectToObject(s, "details");
        if (name && *name)
            cJSON_AddStringToObject(d, "name", name);
        if (group && *group)
            cJSON_AddStringToObject(d, "group", group);
        if (kind && *kind)
            cJSON_AddStringToObject(d, "kind", kind);
    }
    json_add_int64(s, "code", code);
    return s;
}

void apistatus_add_cause(cJSON *status, const char *reason, const char *message,
                         const char *field)
{
    cJSON *d = cJSON_GetObjectItemCaseSensitive(status, "details");
    if (!d) {
        /* details precede code in the real output; order is not significant */
        d = cJSON_AddObjectToObject(status, "details");
    }
    cJSON *c = cJSON_GetObjectItemCaseSensitive(d, "causes");
    if (!c)
        c = cJSON_AddArrayToObject(d, "causes");
    cJSON *o = cJSON_CreateObject();
    if (reason)
        cJSON_AddStringToObject(o, "reason", reason);
    if (message)
        cJSON_AddStringToObject(o, "message", message);
    if (field)
        cJSON_AddStringToObject(o, "field", field);
    cJSON_AddItemToArray(c, o);
}

static char *qualified(const char *group, const char *resource)
{
    if (group && *group)
        return xasprintf("%s.%s", resource, group);
    return xstrdup(resource);
}

cJSON *apistatus_not_found(const char *group, const char *resource, const char *name)
{
    char *q = qualified(group, resource);
    char *m = xasprintf("%s \"%s\" not found", q, name ? name : "");
    cJSON *s = apistatus_new(404, "NotFound", m, group, resource, name);
    free(q);
    free(m);
    return s;
}

cJSON *apistatus_already_exists(const char *group, const char *resource, const char *name)
{
    char *q = qualified(group, resource);
    char *m = xasprintf("%s \"%s\" already exists", q, name ? name : "");
    cJSON *s = apistatus_new(409, "AlreadyExists", m, group, resource, name);
    free(q);
    free(m);
    return s;
}

cJSON *apistatus_conflict(const char *group, const char *resource, const char *name,
                          const char *why)
{
    char *q = qualified(group, resource);
    char *m = xasprintf("Operation cannot be fulfilled on %s \"%s\": %s", q, name ? name : "",
                        why ? why
                            : "the object has been modified; please apply your changes to the "
                              "latest version and try again");
    cJSON *s = apistatus_new(409, "Conflict", m, group, resource, name);
    free(q);
    free(m);
    return s;
}

cJSON *apistatus_invalid(const char *group, const char *kind, const char *name,
                         const struct apistatus_fields *f)
{
    char *q = qualified(group, kind);
    struct buf b;
    buf_init(&b, SIZE_MAX / 2);
    buf_printf(&b, "%s \"%s\" is invalid: ", q, name ? name : "");
    if (f->n > 1)
        buf_putc(&b, '[');
    for (size_t i = 0; i < f->n; i++) {
        char *e = apistatus_field_string(&f->v[i]);
        buf_printf(&b, "%s%s", i ? ", " : "", e);
        free(e);
    }
    if (f->n > 1)
        buf_putc(&b, ']');
    cJSON *s = apistatus_new(422, "Invalid", buf_str(&b), group, kind, name);
    for (size_t i = 0; i < f->n; i++) {
        char *body = field_body(&f->v[i]);
        apistatus_add_cause(s, ftype_reason(f->v[i].type), body, f->v[i].field);
        free(body);
    }
    buf_done(&b);
    free(q);
    return s;
}

cJSON *apistatus_bad_request(const char *message)
{
    return apistatus_new(400, "BadRequest", message, NULL, NULL, NULL);
}

cJSON *apistatus_method_not_allowed(const char *message)
{
    return apistatus_new(405, "MethodNotAllowed", message, NULL, NULL, NULL);
}

cJSON *apistatus_unsupported_media(const char *message)
{
    return apistatus_new(415, "UnsupportedMediaType", message, NULL, NULL, NULL);
}

cJSON *apistatus_not_acceptable(const char *message)
{
    return apistatus_new(406, "NotAcceptable", message, NULL, NULL, NULL);
}

cJSON *apistatus_too_large(const char *message)
{
    return apistatus_new(413, "RequestEntityTooLarge", message, NULL, NULL, NULL);
}

cJSON *apistatus_expired(const char *message)
{
    return apistatus_new(410, "Expired", message, NULL, NULL, NULL);
}

cJSON *apistatus_internal(const char *message)
{
    char *m = xasprintf("Internal error occurred: %s", message ? message : "");
    cJSON *s = apistatus_new(500, "InternalError", m, NULL, NULL, NULL);
    apistatus_add_cause(s, NULL, message, NULL);
    free(m);
    return s;
}

cJSON *apistatus_unauthorized(void)
{
    return apistatus_new(401, "Unauthorized", "Unauthorized", NULL, NULL, NULL);
}

cJSON *apistatus_forbidden(const char *group, const char *resource, const char *name,
                           const char *why)
{
    /* errors.NewForbidden: `res "name" is forbidden: why`, `res is
     * forbidden: why` without a name, `forbidden: why` without a resource */
    char *q = resource && *resource ? qualified(group, resource) : NULL;
    char *m = !q                 ? xasprintf("forbidden: %s", why ? why : "")
              : name && *name    ? xasprintf("%s \"%s\" is forbidden: %s", q, name, why ? why : "")
                                 : xasprintf("%s is forbidden: %s", q, why ? why : "");
    cJSON *s = apistatus_new(403, "Forbidden", m, group, resource, name);
    free(q);
    free(m);
    return s;
}

cJSON *apistatus_success(const char *group, const char *kind, const char *name, const char *uid)
{
    cJSON *s = apistatus_new(200, NULL, NULL, group, kind, name);
    /* kube-apiserver's finalizeDelete sets no code (0, omitted) */
    cJSON_DeleteItemFromObjectCaseSensitive(s, "code");
    cJSON *d = cJSON_GetObjectItemCaseSensitive(s, "details");
    if (d && uid)
        cJSON_AddStringToObject(d, "uid", uid);
    return s;
}

int apistatus_code(const cJSON *status)
{
    int64_t c = 500;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(status, "code");
    if (!it || json_item_int64(it, &c) != 0 || c < 100 || c > 599)
        return 500;
    return (int)c;
}
