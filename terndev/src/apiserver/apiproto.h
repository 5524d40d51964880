/* apiproto.h - the Kubernetes protobuf request bodies kubectl's generator
 * commands send (kubectl create namespace|configmap|secret|serviceaccount|
 * role|clusterrole|rolebinding|clusterrolebinding, and kubectl auth can-i's
 * SelfSubjectAccessReview).
 *
 * Decodes the "k8s\0" envelope (runtime.Unknown: typeMeta, raw) and the
 * object's protobuf for the kinds listed into the JSON object the same
 * request would have carried as JSON. Only the fields a client can
 * meaningfully send on create are decoded (ObjectMeta name, generateName,
 * namespace, uid, labels, annotations, ownerReferences, finalizers; the
 * kinds' data fields: rules, subjects, roleRef, an access review's spec;
 * ClusterRole aggregationRule is not decoded); empty proto2 values are
 * omitted as JSON omits them, except inside lists of strings.
 * Other kinds answer TERN_EINVALID (the caller replies 415).
 */
#ifndef TERN_APIPROTO_H
#define TERN_APIPROTO_H

#include "base/err.h"

#include <cJSON.h>
#include <stddef.h>

/* Returns 0 and *ret (owned by the caller), TERN_EPARSE for a malformed
 * message, or TERN_EINVALID for a kind not supported. */
int apiproto_decode(const void *p, size_t n, cJSON **ret, struct tern_err *err);

#endif
