/* json.h - strict JSON parsing into cJSON trees, and typed getters.
 *
 * json_parse is our own RFC 8259 parser (not cJSON_Parse): it bounds size and
 * depth before recursing, reports duplicate object keys, rejects invalid
 * UTF-8 and trailing data, and keeps the exact text of every number in the
 * item's valuestring so int64 values (revisions, token counts) never pass
 * through a double. The result is an ordinary cJSON tree owned by the caller
 * (free with cJSON_Delete).
 *
 * Getters look keys up case-sensitively only. They take the JSON path of the
 * containing object (e.g. "spec.limits") so errors name the full field path:
 * "spec.limits.maxToolCalls: must be an integer". A getter returns 0 and sets
 * *ret when the field is present and well-typed; returns 0 and leaves *ret
 * untouched when it is absent (or null) and optional; returns TERN_EINVALID
 * otherwise. Returned strings and items are borrowed from the tree.
 */
#ifndef TERN_JSON_H
#define TERN_JSON_H

#include "base/err.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum json_dups {
    JSON_DUPS_REJECT = 0, /* a repeated key is a parse error */
    JSON_DUPS_LAST_WINS,  /* keep the last value, report the first duplicate */
};

struct json_parse_opts {
    size_t max_bytes;     /* 0 = TERN_JSON_MAX_BYTES */
    int max_depth;        /* 0 = TERN_JSON_MAX_DEPTH */
    enum json_dups dups;
    /* out (LAST_WINS only): the path of the first duplicate, "" if none */
    char dup_path[256];
};

/* Parses exactly one JSON value from s[0..n) (surrounding whitespace allowed).
 * Returns 0 and *ret, or TERN_ETOOLARGE (size/depth) / TERN_EPARSE with the
 * byte offset and reason in err. Duplicate keys are rejected. */
int json_parse(const char *s, size_t n, cJSON **ret, struct tern_err *err);
/* The same with options (o may be NULL for the defaults). */
int json_parse_opts(const char *s, size_t n, struct json_parse_opts *o, cJSON **ret,
                    struct tern_err *err);

enum json_need { JSON_OPTIONAL = 0, JSON_REQUIRED = 1 };

/* Case-sensitive member lookup; NULL if obj is not an object or key absent. */
const cJSON *json_get(const cJSON *obj, const char *key);

int json_get_string(const cJSON *obj, const char *path, const char *key, enum json_need need,
                    const char **ret, struct tern_err *err);
int json_get_bool(const cJSON *obj, const char *path, const char *key, enum json_need need,
                  bool *ret, struct tern_err *err);
/* Integers: a JSON integer, exact in int64 (from the kept digits), or a
 * decimal string of digits (as the etcd gateway sends int64). */
int json_get_int64(const cJSON *obj, const char *path, const char *key, enum json_need need,
                   int64_t *ret, struct tern_err *err);
/* Integer within [min, max]; the error says "must be >= min" / "<= max". */
int json_get_int_range(const cJSON *obj, const char *path, const char *key, enum json_need need,
                       int64_t min, int64_t max, int64_t *ret, struct tern_err *err);
int json_get_object(const cJSON *obj, const char *path, const char *key, enum json_need need,
                    const cJSON **ret, struct tern_err *err);
int json_get_array(const cJSON *obj, const char *path, const char *key, enum json_need need,
                   const cJSON **ret, struct tern_err *err);

/* The exact int64 value of a number item (or digit string): 0 or TERN_EINVALID. */
int json_item_int64(const cJSON *item, int64_t *ret);

/* A new number item printed exactly (a raw item), owned by the caller. */
cJSON *json_new_int64(int64_t v);
/* Adds an int64 member printed exactly (a raw number item). */
void json_add_int64(cJSON *obj, const char *key, int64_t v);
/* Adds a string member (copied). */
void json_add_string(cJSON *obj, const char *key, const char *v);

/* Semantic equality: objects as maps (member order ignored), arrays in
 * order, numbers by exact value (int64 text when integral), Raw numbers equal
 * to parsed ones. Used to skip API writes when nothing changed. */
bool json_equal(const cJSON *a, const cJSON *b);

/* Serialises compactly; the result is owned by the caller. Never NULL. */
char *json_print(const cJSON *item);
/* A deep copy that keeps exact number text. */
cJSON *json_dup(const cJSON *item);

#endif
