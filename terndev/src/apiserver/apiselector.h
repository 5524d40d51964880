/* apiselector.h - label and field selectors (k8s.io/apimachinery labels and
 * fields packages).
 *
 * Label selectors: comma-separated requirements `k=v`, `k==v`, `k!=v`,
 * `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not exist); keys are
 * qualified names with an optional DNS prefix, values are label values.
 * Field selectors: `path=v`, `path==v`, `path!=v`, comma-separated; the path
 * is a dotted JSON path into the object (metadata.name, status.phase).
 * An empty selector matches everything.
 */
#ifndef TERN_APISELECTOR_H
#define TERN_APISELECTOR_H

#include "base/err.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

enum apisel_op { APISEL_EQ, APISEL_NE, APISEL_IN, APISEL_NOTIN, APISEL_EXISTS, APISEL_NOTEXISTS };

struct apisel_req {
    char *key;
    enum apisel_op op;
    char **values;
    size_t nvalues;
};

/* A parsed selector; owns its requirements. */
struct apisel {
    struct apisel_req *r;
    size_t n;
};

/* Parse s (may be NULL or "" = everything). Return 0 and *ret (free with
 * apisel_free), or TERN_EINVALID with the real server's message in err
 * (e.g. "unable to parse requirement: ..."). */
int apisel_parse_labels(const char *s, struct apisel **ret, struct tern_err *err);
int apisel_parse_fields(const char *s, struct apisel **ret, struct tern_err *err);
void apisel_free(struct apisel *s);

/* Matches a labels object (metadata.labels, may be NULL). */
bool apisel_match_labels(const struct apisel *s, const cJSON *labels);
/* Matches an object's fields; a missing field compares as "". */
bool apisel_match_fields(const struct apisel *s, const cJSON *obj);
/* The value of a dotted path in obj as a string ("" if absent; numbers and
 * booleans printed). Returns a pointer into buf (size n) or into obj. */
const char *apisel_field_value(const cJSON *obj, const char *path, char *buf, size_t n);

/* Validates a label key / value as the API does; returns NULL when valid or
 * a static message. */
const char *apisel_check_label_key(const char *k);
const char *apisel_check_label_value(const char *v);

#endif
