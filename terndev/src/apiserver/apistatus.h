/* apistatus.h - Kubernetes Status objects and field errors.
 *
 * Every error body the API server returns is a meta/v1 Status built here,
 * with the reasons, codes, messages and causes of k8s.io/apimachinery's
 * api/errors and util/validation/field packages. Field errors are collected
 * in a struct apistatus_fields by validation code and turned into one 422
 * Invalid Status (or a 400 BadRequest for strict decoding).
 *
 * All returned cJSON trees are owned by the caller.
 */
#ifndef TERN_APISTATUS_H
#define TERN_APISTATUS_H

#include <cJSON.h>
#include <stddef.h>

/* Field error types (field.ErrorType): the cause reason and the text. */
enum apistatus_ftype {
    APISTATUS_F_REQUIRED,    /* FieldValueRequired    "Required value" */
    APISTATUS_F_INVALID,     /* FieldValueInvalid     "Invalid value" */
    APISTATUS_F_UNSUPPORTED, /* FieldValueNotSupported "Unsupported value" */
    APISTATUS_F_DUPLICATE,   /* FieldValueDuplicate   "Duplicate value" */
    APISTATUS_F_FORBIDDEN,   /* FieldValueForbidden   "Forbidden" */
    APISTATUS_F_TOOLONG,     /* FieldValueTooLong     "Too long" */
    APISTATUS_F_TOOMANY,     /* FieldValueTooMany     "Too many" */
    APISTATUS_F_TYPE,        /* FieldValueTypeInvalid "Invalid value" */
};

struct apistatus_field {
    enum apistatus_ftype type;
    char *field;  /* path, e.g. spec.limits.cpu */
    char *value;  /* rendered bad value (Go %#v-like), or NULL */
    char *detail; /* or NULL */
};

/* A list of field errors; owns its entries. Zero-initialise, then
 * apistatus_fields_done. */
struct apistatus_fields {
    struct apistatus_field *v;
    size_t n, cap;
};

/* Appends one error. value_json (may be NULL) is rendered as the bad value:
 * strings quoted, other JSON as printed. */
void apistatus_fields_add(struct apistatus_fields *f, enum apistatus_ftype t, const char *field,
                          const cJSON *value_json, const char *detail);
/* The same with an already-rendered bad value (may be NULL). */
void apistatus_fields_addv(struct apistatus_fields *f, enum apistatus_ftype t, const char *field,
                           const char *value, const char *detail);
void apistatus_fields_done(struct apistatus_fields *f);
/* "field: Invalid value: \"x\": detail" (field.Error.Error()); caller frees. */
char *apistatus_field_string(const struct apistatus_field *e);

/* A Status with code, reason and message; details (name, group, kind) are
 * added when non-NULL/non-empty. */
cJSON *apistatus_new(int code, const char *reason, const char *message, const char *group,
                     const char *kind, const char *name);
/* Appends {reason, message, field} to details.causes (any may be NULL). */
void apistatus_add_cause(cJSON *status, const char *reason, const char *message,
                         const char *field);

/* The common errors, with the real messages. `resource` is the plural
 * resource name (group may be ""). */
cJSON *apistatus_not_found(const char *group, const char *resource, const char *name);
cJSON *apistatus_already_exists(const char *group, const char *resource, const char *name);
cJSON *apistatus_conflict(const char *group, const char *resource, const char *name,
                          const char *why);
/* 422 Invalid for kind (with group) name; message lists every field error. */
cJSON *apistatus_invalid(const char *group, const char *kind, const char *name,
                         const struct apistatus_fields *f);
cJSON *apistatus_bad_request(const char *message);
cJSON *apistatus_method_not_allowed(const char *message);
cJSON *apistatus_unsupported_media(const char *message);
cJSON *apistatus_not_acceptable(const char *message);
cJSON *apistatus_too_large(const char *message);
cJSON *apistatus_expired(const char *message);
cJSON *apistatus_internal(const char *message);
cJSON *apistatus_unauthorized(void);
cJSON *apistatus_forbidden(const char *group, const char *resource, const char *name,
                           const char *why);
/* Status{status:Success} for deletes (details name, group, kind, uid). */
cJSON *apistatus_success(const char *group, const char *kind, const char *name, const char *uid);

/* The HTTP code of a Status object (500 if missing). */
int apistatus_code(const cJSON *status);

#endif
