/* refs.h - what a session's children reference, checked before they are
 * created (the operator's shell; GETs through the API).
 *
 * A pod that mounts a ConfigMap that does not exist waits in
 * ContainerCreating (FailedMount) on a cluster, one whose env names a
 * missing Secret in CreateContainerConfigError, and a Job whose pods name a
 * missing ServiceAccount gets no pod at all (FailedCreate Events on the
 * Job, which the operator does not read). So before creating the sandbox
 * pod or a turn Job, the operator looks the references up itself and
 * reports the first one missing:
 *   sandbox: spec.context.files[i], spec.skills[i], spec.memory ConfigMaps
 *   runner:  the model API key Secret (spec.model.apiKeySecretRef, else the
 *            operator's --model-secret-name) and its key; the runner
 *            ServiceAccount (spec.identity.serviceAccountName, else
 *            --runner-service-account); the Secrets of spec.tools (MCP
 *            headers, publish tokens and their keys)
 * An answer other than NotFound (no RBAC to read it, the API down) is not
 * reported: the kubelet will tell, as before.
 */
#ifndef TERN_REFS_H
#define TERN_REFS_H

#include "controller/children.h"
#include "controller/reconcile.h"
#include "kube/kclient.h"
#include "spec/session_spec.h"

struct refs_result {
    struct observed_blocker sandbox; /* reason static, message owned */
    struct observed_blocker runner;
};

/* Checks the references of s (namespace s->namespace). r is overwritten;
 * release with refs_result_done. */
void refs_check(struct kclient *kc, const struct session_spec *s,
                const struct children_config *cfg, struct refs_result *r);
void refs_result_done(struct refs_result *r);

#endif
