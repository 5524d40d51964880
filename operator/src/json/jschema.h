/* jschema.h - a bounded subset of JSON Schema: checking a schema, and
 * validating a value against it (spec.result.schema, docs/crd.md).
 *
 * The subset: type (a name or an array of names; "integer" is a number
 * with no fractional part), properties, required, items (one schema; the
 * array form is refused), enum, const, minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum (numbers, as in draft 2020-12), minLength, maxLength (in
 * code points), minItems, maxItems, pattern (a POSIX extended regular
 * expression, regcomp(REG_EXTENDED), matched anywhere in the string unless
 * anchored), additionalProperties (a boolean or a schema) and the
 * annotations title, description, $comment and $schema. A schema is an
 * object or a boolean. Any other keyword is refused by jschema_check,
 * naming it and its JSON pointer: never silently ignored.
 *
 * Bounds (base/limits.h): TERN_JSCHEMA_MAX_BYTES, _DEPTH, _NODES, _PATTERN,
 * _ENUM for a schema; TERN_JSCHEMA_MAX_INSTANCE_DEPTH for a value;
 * TERN_JSCHEMA_MAX_ERRORS lines of at most TERN_JSCHEMA_MAX_ERROR_LEN bytes
 * in a report.
 *
 * Everything here is pure (no I/O); schema and instance are borrowed.
 */
#ifndef TERN_JSON_JSCHEMA_H
#define TERN_JSON_JSCHEMA_H

#include "base/err.h"

#include <cJSON.h>
#include <stddef.h>

/* Checks that schema is within the subset and the bounds. Returns 0, or
 * TERN_EINVALID / TERN_ETOOLARGE with a message naming the JSON pointer
 * and the keyword: `at "/properties/a/oneOf": keyword "oneOf" is not
 * supported (supported: ...)`. */
int jschema_check(const cJSON *schema, struct tern_err *err);

/* What jschema_validate found. */
struct jschema_report {
    size_t nerrors; /* all errors found (also those past the bound) */
    char *text;     /* one line per error, each `at "<pointer>": <keyword>:
                     * expected ..., got ...`, at most TERN_JSCHEMA_MAX_ERRORS
                     * lines then "(N more errors)"; "" when valid; owned */
};

/* Validates instance against a schema that passed jschema_check. Returns
 * 0 with *ret filled (ret->nerrors == 0: valid), or TERN_EINVALID when the
 * schema is not one jschema_check accepts (nothing is filled then).
 * Release ret with jschema_report_done. */
int jschema_validate(const cJSON *schema, const cJSON *instance, struct jschema_report *ret);
void jschema_report_done(struct jschema_report *r);

/* Parses a model's final answer as one JSON value: surrounding whitespace
 * and one enclosing Markdown code fence (``` or ```json) are allowed,
 * nothing else. At most TERN_RESULT_MAX_ANSWER bytes, nesting at most
 * TERN_JSCHEMA_MAX_INSTANCE_DEPTH. Returns 0 and *ret (owned), or
 * TERN_EPARSE / TERN_ETOOLARGE with the position and reason in err (the
 * text the model is told). */
int jschema_parse_answer(const char *text, size_t len, cJSON **ret, struct tern_err *err);

#endif
