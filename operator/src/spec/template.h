/* template.h - AgentSessionTemplate: the reusable part of a session spec,
 * and the merge that turns a session naming one into its effective spec.
 *
 * A session with spec.templateRef.name is resolved once by the operator:
 * it copies the template's spec into the session's status.template (with
 * the template's uid and resourceVersion), so later edits of the template do
 * not change a session that already started. Every reader (operator,
 * runner, egress proxy) then sees the effective spec, template_merge(
 * status.template.spec, spec): session_spec_parse does this itself.
 *
 * The merge (pure): objects merge key by key, recursively; any other value
 * the session sets (string, number, bool, list) replaces the template's,
 * except a value equal to the CRD's default at that path, which the API
 * server may have filled in and so does not count as set (a session cannot
 * reset a field the template sets to its default value: docs/triggers.md).
 * Lists replace whole lists.
 *
 * Ownership: every cJSON returned is new and owned by the caller.
 */
#ifndef TERN_SPEC_TEMPLATE_H
#define TERN_SPEC_TEMPLATE_H

#include "base/err.h"

#include <cJSON.h>

/* The spec fields a template may set (NULL-terminated). */
extern const char *const template_spec_fields[];

/* The CRD's defaults of an AgentSession's spec, as one JSON object (a unit
 * test checks it against crds/agentsessions.tern.dev.yaml). Static. */
const char *template_defaults_json(void);

/* Validates a template's spec (the object under AgentSessionTemplate.spec):
 * only template_spec_fields, each validated by session_spec_parse as part of
 * a session with a placeholder objective. Returns 0 or TERN_EINVALID with
 * the field path in err. */
int template_check_spec(const cJSON *spec, struct tern_err *err);

/* merge(template spec, session spec) as described above; session's
 * templateRef is dropped. Both may be NULL (= {}). Never fails. */
cJSON *template_merge(const cJSON *tmpl_spec, const cJSON *session_spec);

/* The effective AgentSession of obj: if obj's spec has no templateRef,
 * returns 0 with *ret NULL (use obj as is). Otherwise a copy of obj whose
 * spec is the merge of status.template.spec and obj's spec. Returns
 * TERN_ENOTFOUND when status.template is not recorded yet (the operator
 * has not resolved the template), TERN_EINVALID when templateRef or the
 * record is malformed or names another template. */
int template_effective(const cJSON *obj, cJSON **ret, struct tern_err *err);

/* spec.templateRef.name of an AgentSession, or NULL (borrowed). */
const char *template_ref_name(const cJSON *obj);

#endif
