/* apipatch.h - the patch types of the Kubernetes API.
 *
 *   merge patch      RFC 7386 (application/merge-patch+json)
 *   JSON patch       RFC 6902 (application/json-patch+json)
 *   strategic merge  (application/strategic-merge-patch+json) for built-in
 *                    kinds, as kubectl and client libraries send it: keyed
 *                    merge of the lists kubectl uses (containers, env,
 *                    volumes, volumeMounts, ports, conditions, ...),
 *                    primitive merge lists (finalizers), and the directives
 *                    $patch (replace|delete|merge), $setElementOrder/<list>,
 *                    $deleteFromPrimitiveList/<list> and $retainKeys.
 *
 * Inputs are borrowed; results are new trees owned by the caller. Errors:
 * TERN_EINVALID with a message in err; *ret untouched.
 */
#ifndef TERN_APIPATCH_H
#define TERN_APIPATCH_H

#include "base/err.h"

#include <cJSON.h>

/* RFC 7386: never fails (a non-object patch replaces the document). */
cJSON *apipatch_merge(const cJSON *doc, const cJSON *patch);

/* RFC 6902. TERN_EPARSE for a malformed operation list (400), TERN_EINVALID
 * when an operation cannot be applied (a missing path, a failed test: 422). */
int apipatch_json(const cJSON *doc, const cJSON *ops, cJSON **ret, struct tern_err *err);

/* Strategic merge patch. TERN_EPARSE for a malformed directive. */
int apipatch_strategic(const cJSON *doc, const cJSON *patch, cJSON **ret, struct tern_err *err);

#endif
