/* tmap.h - field paths over a JSON payload, and the small templates that
 * map a webhook delivery to a session's objective and context (pure; no
 * code is ever executed: a template is text with {{ path }} placeholders).
 *
 * A field path is dot-separated keys, each optionally followed by [N] array
 * indexes: `action`, `pull_request.title`, `commits[0].message`,
 * `labels[0][1]`. Keys are 1..N bytes of [A-Za-z0-9_-] (at most
 * TERN_TMAP_MAX_SEGMENTS keys and indexes, TERN_TMAP_MAX_PATH bytes).
 *
 * A template is text in which each `{{ path }}` (spaces inside the braces
 * optional) is replaced by the value at that path: a string as is, a number
 * or boolean as its JSON text. `{{` always opens a placeholder and must be
 * closed by `}}`; at most TERN_TMAP_MAX_PLACEHOLDERS of them, and
 * TERN_TMAP_MAX_TEMPLATE bytes of template.
 *
 * Errors: TERN_EINVALID (a bad path or template; the value is an object,
 * an array or null), TERN_ENOTFOUND (the payload has no such field),
 * TERN_ETOOLARGE (the result is over max). Messages name the path, never
 * the payload's values.
 */
#ifndef TERN_TRIGGER_TMAP_H
#define TERN_TRIGGER_TMAP_H

#include "base/buf.h"
#include "base/err.h"

#include <cJSON.h>
#include <stddef.h>

/* Checks a field path. 0 or TERN_EINVALID. */
int tmap_path_check(const char *path, struct tern_err *err);

/* The value at path in root (borrowed), or NULL when absent or the path is
 * malformed. */
const cJSON *tmap_lookup(const cJSON *root, const char *path);

/* Appends the text of a scalar (string, number, boolean) to out. 0, or
 * TERN_EINVALID for an object, array or null. */
int tmap_scalar(const cJSON *v, struct buf *out);

/* Checks a template (syntax and every path). 0 or TERN_EINVALID. */
int tmap_template_check(const char *tmpl, struct tern_err *err);

/* Renders tmpl over root into a new string *ret of at most max bytes.
 * Returns 0 and *ret (owned by the caller) or an error above; what names
 * the template in messages ("objective"). */
int tmap_render(const char *tmpl, const cJSON *root, size_t max, const char *what, char **ret,
                struct tern_err *err);

#endif
