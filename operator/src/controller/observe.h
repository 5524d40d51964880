/* observe.h - what the operator reads from its children's status (pure).
 *
 * The shell (controller.c) hands the informers' copies of the sandbox pod,
 * the latest turn Job and that Job's pods to these functions, which fill
 * the plain structs reconcile_decide takes. Strings in the results are
 * borrowed from the objects passed in: keep those alive while the result
 * is used.
 *
 * What counts, as a kubelet and the Job controller report it:
 *   pod: status.phase, the Ready condition, status.podIP, the
 *     tern.dev/sandbox-hash annotation; a container's state.waiting
 *     {reason, message} (for CrashLoopBackOff the last termination's
 *     message when the waiting one is empty); PodScheduled=False with
 *     reason Unschedulable (the scheduler's message).
 *   job: the Complete / Failed conditions (reason, message), status.failed.
 *   the job's pods: the latest one that failed (a container terminated with
 *     a non-zero exit code: code, termination message, finishedAt), and a
 *     pod of the running attempt that is waiting or unschedulable.
 */
#ifndef TERN_OBSERVE_H
#define TERN_OBSERVE_H

#include "controller/reconcile.h"

#include <cJSON.h>

/* Fills o from a pod (o->exists and the rest; o is cleared first). */
void observe_pod(const cJSON *pod, struct observed_pod *o);

/* Fills o from a Job (exists, turn from the tern.dev/turn label, complete,
 * failed, failed_reason/message, failed_pods; last_exit_code = -1). */
void observe_job(const cJSON *job, struct observed_job *o);

/* Folds one pod of the Job into o: a failed attempt newer than the one
 * seen (last_exit_code, last_message, last_failed_at), or a pod that has
 * not started and is stuck (pod_waiting_*, pod_unschedulable). */
void observe_job_pod(const cJSON *pod, struct observed_job *o);

/* RFC 3339 UTC ("2026-11-30T00:00:00Z", fraction allowed) as unix seconds
 * with the fraction; 0 when unparsable. */
double observe_time(const char *s);

#endif
