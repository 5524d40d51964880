/* apischema.h - structural OpenAPI v3 schemas of CustomResourceDefinitions:
 * pruning, defaulting and validation of custom objects, as the
 * apiextensions-apiserver does them, in that order.
 *
 * Supported keywords: type, nullable, properties, additionalProperties
 * (boolean or schema), items, required, enum, minimum/maximum (with
 * exclusive*), multipleOf, minLength/maxLength, pattern (ECMA-262 subset
 * translated to POSIX ERE), minItems/maxItems, minProperties/maxProperties,
 * format (int32, int64, date-time, byte), allOf/anyOf/oneOf/not,
 * default, x-kubernetes-preserve-unknown-fields,
 * x-kubernetes-int-or-string, x-kubernetes-embedded-resource,
 * x-kubernetes-list-type (set, map with x-kubernetes-list-map-keys).
 * x-kubernetes-validations (CEL) rules are NOT evaluated.
 *
 * Field errors are appended to a struct apistatus_fields with the real
 * paths and texts ("spec.x in body must be of type integer: \"string\"").
 */
#ifndef TERN_APISCHEMA_H
#define TERN_APISCHEMA_H

#include "apistatus.h"

#include <cJSON.h>
#include <stdbool.h>

/* A list of strings (pruned field paths). */
struct apischema_paths {
    char **v;
    size_t n;
};
void apischema_paths_done(struct apischema_paths *p);

/* Removes from obj (in place) every field the schema does not declare
 * (metadata, apiVersion and kind at the root are kept); each removed path
 * (".spec.foo" style without the dot: "spec.foo") is appended to pruned when
 * non-NULL. */
void apischema_prune(const cJSON *schema, cJSON *obj, struct apischema_paths *pruned);

/* Sets defaults (in place) for absent properties, recursively. */
void apischema_default(const cJSON *schema, cJSON *obj);

/* Validates the whole custom object (the root's metadata is skipped: the
 * caller validates ObjectMeta). Errors are appended to f. */
void apischema_validate(const cJSON *schema, const cJSON *obj, struct apistatus_fields *f);

/* Checks that schema is structural and uses only allowed constructs (as the
 * CRD validation does); errors appended to f under path (e.g.
 * "spec.versions[0].schema.openAPIV3Schema"). */
void apischema_check_structural(const cJSON *schema, const char *path,
                                struct apistatus_fields *f);

#endif
