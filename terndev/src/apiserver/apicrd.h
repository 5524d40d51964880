/* apicrd.h - CustomResourceDefinition validation and status, as the
 * apiextensions-apiserver does them (validation.go, strategy.go, the
 * naming and establishing controllers folded into the write).
 */
#ifndef TERN_APICRD_H
#define TERN_APICRD_H

#include "apistatus.h"

#include <cJSON.h>

/* Defaults a CRD in place (names.singular/listKind, conversion strategy,
 * version fields), validates it, and on success sets its status
 * (acceptedNames, conditions NamesAccepted and Established, storedVersions).
 * old is the stored CRD on update (or NULL): group, names.plural and scope
 * are immutable. now is the RFC 3339 time for lastTransitionTime. Errors
 * are appended to f (422 when f->n > 0). */
void apicrd_prepare(cJSON *crd, const cJSON *old, const char *now, struct apistatus_fields *f);

/* Validates a DNS-1123 subdomain (maxlen 253) / label (63); returns NULL or
 * the real message. */
const char *apicrd_check_subdomain(const char *s);
const char *apicrd_check_label(const char *s);

#endif
