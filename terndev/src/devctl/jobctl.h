/* jobctl.h - the batch/v1 Job controller's decision (pure).
 *
 * jobctl_reconcile looks at one Job and the pods it controls (ownerReference
 * controller=true with the Job's uid) at time now and returns the actions to
 * take and the Job's new status. No I/O; the shell (devctl.h) applies the
 * status first (status.uncountedTerminatedPods makes counting crash-safe:
 * a terminal pod is first recorded there, then its tracking finalizer is
 * removed, then it is moved into succeeded/failed), then the actions.
 *
 * Semantics (batch/v1, NonIndexed completion mode):
 *  - pods are created from spec.template with labels
 *    batch.kubernetes.io/job-name, batch.kubernetes.io/controller-uid,
 *    job-name, controller-uid, an ownerReference (controller,
 *    blockOwnerDeletion) and the finalizer batch.kubernetes.io/job-tracking;
 *  - desired active pods: min(parallelism (default 1), completions -
 *    succeeded) when completions is set; with completions unset, parallelism
 *    until the first success, then none (work-queue jobs); none when
 *    spec.suspend;
 *  - after failures, new pods wait backoff_base * 2^(failed-1) (capped at
 *    backoff_max) from the last failure's finish time;
 *  - FailureTarget(BackoffLimitExceeded) when failed > backoffLimit (default
 *    6); FailureTarget(DeadlineExceeded) when now - status.startTime >=
 *    activeDeadlineSeconds; FailureTarget(PodFailurePolicy) when a failed pod
 *    matches a FailJob rule (rules: onExitCodes In/NotIn with optional
 *    containerName, exit code 0 never matches; onPodConditions type/status;
 *    first match wins; Ignore = not counted, Count = counted);
 *  - SuccessCriteriaMet when succeeded >= completions (or, completions unset,
 *    a pod succeeded and none is active);
 *  - once a *Target condition is set, active pods are deleted; when no pod is
 *    left running and nothing is uncounted, Failed (same reason) or Complete
 *    (with completionTime) is added;
 *  - counters active (running, not deleting), terminating (deleting, not yet
 *    terminal), ready (active with Ready=True), succeeded, failed;
 *    startTime set at the first reconcile while not suspended;
 *  - ttlSecondsAfterFinished: the Job is deleted (background) that long after
 *    it finished.
 */
#ifndef TERN_JOBCTL_H
#define TERN_JOBCTL_H

#include "base/err.h"

#include <cJSON.h>
#include <stddef.h>
#include <stdint.h>

#define JOBCTL_TRACKING_FINALIZER "batch.kubernetes.io/job-tracking"

struct jobctl_cfg {
    int64_t backoff_base_s; /* 10 in Kubernetes */
    int64_t backoff_max_s;  /* 600 */
};

enum jobctl_act {
    JOBCTL_CREATE_POD,      /* obj: the pod to create (generateName set) */
    JOBCTL_DELETE_POD,      /* name: the pod (background, default grace) */
    JOBCTL_UPDATE_POD,      /* obj: the pod with the tracking finalizer removed */
    JOBCTL_DELETE_JOB,      /* TTL expired: delete the Job (background) */
};

struct jobctl_action {
    enum jobctl_act kind;
    cJSON *obj;       /* owned by the action (CREATE_POD, UPDATE_POD) */
    const char *name; /* borrowed from the input (DELETE_POD) */
};

struct jobctl_out {
    struct jobctl_action *acts;
    size_t nacts;
    cJSON *status;        /* the Job's full new status; owned */
    int64_t requeue_after; /* seconds until a time-driven change, -1 = none */
};

/* Decides for one Job. pods are the Job's pods (any order). Returns 0 and
 * fills *ret (release with jobctl_out_done), or TERN_EINVALID when the Job
 * has no uid, name or template. */
int jobctl_reconcile(const struct jobctl_cfg *cfg, const cJSON *job, const cJSON *const *pods,
                     size_t npods, int64_t now, struct jobctl_out *ret, struct tern_err *err);
void jobctl_out_done(struct jobctl_out *o);

/* A new pod for job from its template (caller owns it). */
cJSON *jobctl_pod_from_template(const cJSON *job);

/* The podFailurePolicy decision for one failed pod: "FailJob", "Ignore",
 * "Count" (a rule matched or no rule matched = "Count"), with the index of
 * the matching rule in *ret_rule (-1 when none) and a message naming the
 * container and exit code in msg (at least 256 bytes). */
const char *jobctl_failure_policy(const cJSON *job, const cJSON *pod, int *ret_rule,
                                  char msg[256]);

#endif
