/* podstatus.h - a pod's status as a kubelet reports it, from the local
 * kubelet's view of its containers (pure).
 *
 * Phase: Failed when an init container failed and will not restart;
 * Pending until every init container succeeded and a regular container
 * started; Succeeded/Failed once every regular container is done (terminated
 * and not restarting: exit 0 everywhere = Succeeded); Running otherwise.
 * Conditions PodScheduled, PodReadyToStartContainers, Initialized,
 * ContainersReady, Ready (False with reason PodCompleted once terminal) keep
 * their lastTransitionTime while their status holds.
 */
#ifndef TERN_PODSTATUS_H
#define TERN_PODSTATUS_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum podstatus_state { PODSTATUS_WAITING, PODSTATUS_RUNNING, PODSTATUS_TERMINATED };

struct podstatus_term {
    int exit_code;
    const char *reason; /* Completed, Error, OOMKilled, ContainerCannotRun */
    const char *message;
    int64_t started_at, finished_at;
};

struct podstatus_container {
    const char *name;
    bool init;
    enum podstatus_state state;
    const char *waiting_reason; /* ContainerCreating, PodInitializing, CrashLoopBackOff, ... */
    const char *waiting_message;
    int64_t started_at;          /* RUNNING */
    struct podstatus_term term;  /* TERMINATED */
    bool has_last;
    struct podstatus_term last;
    int restart_count;
    bool ready;
    bool startup_pending; /* running, its startupProbe not passed yet: started false */
    bool done; /* terminated and not going to restart */
    long pid;  /* reported as containerID bwrap://<pid> when > 0 */
};

/* Computes the phase. */
const char *podstatus_phase(const struct podstatus_container *cs, size_t n);

/* Builds the new status object from the old one (pod.status, may be NULL):
 * phase, conditions, hostIP(s), podIP(s) (omitted when pod_ip is NULL),
 * startTime (kept, else now), qosClass, initContainerStatuses,
 * containerStatuses (image copied from the spec). Caller owns the result. */
cJSON *podstatus_build(const cJSON *pod, const struct podstatus_container *cs, size_t n,
                       const char *pod_ip, const char *host_ip, bool sandbox_ready, int64_t now);

/* The status the scheduler gives a pod it cannot place: phase Pending and
 * PodScheduled=False, reason Unschedulable, with message (the old
 * condition's lastTransitionTime kept while it holds). Caller owns it. */
cJSON *podstatus_unschedulable(const cJSON *pod, const char *message, int64_t now);

#endif
