/* kubelet.h - tern-dev's local kubelet (the I/O shell around podplan.h and
 * podstatus.h): one Node, every pod bound to it, each container a process
 * tree under bubblewrap, status written like a kubelet's.
 *
 * It acts through an objstore (devctl/objstore.h) and is driven by
 * kubelet_sync (one pass) or kubelet_run (a loop). Everything it starts is a
 * child of the calling thread: run it on a thread that lives as long as the
 * pods (bwrap --die-with-parent kills a sandbox when that thread exits).
 * Not thread-safe: one thread calls sync/run/shutdown/free.
 *
 * Pods:
 *  - a pod without spec.nodeName is bound to the node (objstore_bind, the
 *    pods/binding subresource); when the store refuses every way to bind
 *    (TERN_EINVALID / TERN_EHTTP: a server with neither pods/binding nor a
 *    mutable spec.nodeName) the pod is run anyway, as this is the only
 *    node, and spec.nodeName stays empty in the store;
 *  - each live pod gets an IP 127.1.x.y (x.y from 0.2 to 255.254), unique
 *    among the pods this kubelet runs and not used by any socket on the
 *    machine when allocated (/proc/net/tcp, udp: other tern-devs' pods); the
 *    search starts at a hash of DIR; the pod's processes share the host's
 *    network namespace and can listen on it (unless isolated, below);
 *  - files: DIR/pods/<uid>/ {volumes/<name>/, sa/{token,ca.crt,namespace},
 *    logs/<container>/<restartCount>.log, pids}; PVCs at
 *    DIR/volumes/<ns>/<pvc-uid> (bound by devctl);
 *  - containers per podplan.h; init containers one at a time in order, then
 *    all containers; restartPolicy Always/OnFailure/Never with restart
 *    backoff base*2^restarts capped (CrashLoopBackOff while waiting);
 *  - memory and cpu limits through cgroup v1 (/sys/fs/cgroup/{memory,cpu}/
 *    tern-dev/<pod-uid>_<container>) when writable, else memory through
 *    RLIMIT_DATA and cpu not enforced; OOMKilled reported from the memory
 *    cgroup's oom_kill counter;
 *  - readiness and liveness probes (httpGet, tcpSocket to the pod IP; exec
 *    in a fresh sandbox of the same container: same files and env, not the
 *    same process namespace) with initialDelaySeconds, periodSeconds,
 *    timeoutSeconds, successThreshold, failureThreshold; a failed liveness
 *    probe restarts the container per restartPolicy;
 *  - NetworkPolicy egress (netpol.h): a pod no policy restricts shares the
 *    host's network namespace; one whose policies allow neither egress nor
 *    ingress gets a namespace with only loopback; one whose egress is
 *    restricted with something allowed gets a namespace of its own on the
 *    pod network (pod_network, address 10.213.x.y), reachable from the
 *    host, whose packet filter allows exactly the union of its egress rules
 *    (kept in step with the policies and peers every 2 s); ingress rules
 *    are not enforced;
 *  - deletion: SIGTERM to every process of the container's pid namespace,
 *    metadata.deletionGracePeriodSeconds later SIGKILL of the tree, then a
 *    final status (Succeeded if every container exited 0, else Failed) and
 *    delete with grace 0;
 *  - restart of tern-dev: pod processes never outlive it (each bwrap gets
 *    PR_SET_PDEATHSIG SIGKILL for the kubelet thread, and --die-with-parent
 *    ties the sandbox to bwrap);
 *    kubelet_new also SIGKILLs any process group recorded in DIR/pods/ * /pids
 *    that still runs (matched by pid and start time). Pods whose status says
 *    a container was running are restarted per restartPolicy: the container
 *    gets lastState terminated {exitCode 137, reason Error, message
 *    "tern-dev restarted"}; with restartPolicy Never it stays terminated and
 *    the pod fails (a Job then retries it).
 */
#ifndef TERN_KUBELET_H
#define TERN_KUBELET_H

#include "base/err.h"
#include "devctl/objstore.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

/* Obtains a service-account token for pod (its spec.serviceAccountName,
 * bound to the pod) through the TokenRequest API; 0 and a new *ret_token, or
 * an error (message in err) that keeps the pod's containers waiting. */
typedef int (*kubelet_token_fn)(void *ctx, const cJSON *pod, const char *sa_name,
                                char **ret_token, struct tern_err *err);

/* nodeInfo.kubeletVersion unless kubelet_cfg.version says otherwise */
#define TERN_KUBELET_VERSION "v1.32.0-tern"

struct kubelet_cfg {
    const char *dir;        /* tern-dev's DIR */
    const char *node_name;  /* "tern-dev" when NULL */
    /* A node agent of a cluster with a scheduler (tern-node): only pods whose
     * spec.nodeName is this node run here, none is bound by the kubelet; the
     * Node gets a Lease in kube-node-lease renewed every 10 s. false
     * (tern-dev): the kubelet is the only node and binds every pod. */
    bool scheduled_only;
    /* Tokens through the TokenRequest API (tern-node), used for projected
     * serviceAccountToken volumes; NULL: minted with sa_key (tern-dev). */
    kubelet_token_fn token_fn;
    void *token_ctx;
    int kubelet_port;       /* status.daemonEndpoints.kubeletEndpoint.Port; 0: none */
    const char *version;    /* nodeInfo.kubeletVersion; NULL: TERN_KUBELET_VERSION */
    /* kubelet_run reports the error of a pass here (may be NULL): the
     * caller's log, since library code does not log */
    void (*on_error)(void *ctx, const char *msg);
    void *on_error_ctx;
    const char *api_host;   /* KUBERNETES_SERVICE_HOST; NULL: not set */
    int api_port;
    const char *ca_pem;     /* ca.crt contents, may be NULL */
    const unsigned char *sa_key; /* SATOKEN_KEY_LEN bytes; NULL: no tokens */
    const char *bin_dir;    /* bound at /opt/tern/bin; NULL: none */
    const char *bwrap;      /* "/usr/bin/bwrap" when NULL */
    int64_t restart_backoff_ms;     /* 10000 when 0 */
    int64_t restart_backoff_max_ms; /* 300000 when 0 */
    bool no_cgroups;        /* force the rlimit fallback */
    /* Pods whose NetworkPolicies restrict egress get a network namespace on
     * this /16 (NULL: "10.213.0.0/16"; its first address is the node's).
     * Making one needs root, ip and iptables; without them such a pod
     * waits in ContainerCreating with the reason. */
    const char *pod_network;
    /* true: no namespaces are made and egress policies are not enforced
     * (the pod runs in the host's network namespace, as before). */
    bool netpol_unenforced;
    const char *ip_bin;       /* "/usr/sbin/ip" when NULL */
    const char *iptables_bin; /* "/usr/sbin/iptables"; iptables-restore beside it */
};

struct kubelet;

/* Copies cfg, kills processes left by a previous instance. Returns 0 and
 * *ret, or -errno when DIR/pods cannot be created. */
int kubelet_new(const struct objstore *store, const struct kubelet_cfg *cfg, struct kubelet **ret,
                struct tern_err *err);
/* Stops every container at once (SIGKILL) and frees. Accepts NULL. */
void kubelet_free(struct kubelet *k);

/* One pass at now_ms (CLOCK_REALTIME milliseconds). Returns 0 or the first
 * error met (the pass continues past errors). */
int kubelet_sync(struct kubelet *k, int64_t now_ms, struct tern_err *err);

/* Loops sync every period_ms (or sooner on a store change) until *stop. */
int kubelet_run(struct kubelet *k, volatile int *stop, int period_ms);

/* SIGTERM to every running container, SIGKILL after grace_ms; returns when
 * all are gone. Pod objects are left as they are (see restart above). */
void kubelet_shutdown(struct kubelet *k, int grace_ms);

/* The log file of a container of pod (container NULL: the annotation
 * kubectl.kubernetes.io/default-container, else the first container):
 * the current run, or with previous the one before it (by the restartCount
 * in the pod's status). Returns 0 and a new path, TERN_ENOTFOUND (no such
 * container or no previous run) or TERN_EINVALID. For `logs -f` the API
 * server reads the file as it grows while kubelet_log_running says true. */
int kubelet_log_path(const char *dir, const cJSON *pod, const char *container, bool previous,
                     char **ret, struct tern_err *err);
/* True while the pod's status shows container running with the same
 * restartCount as when path was chosen (restart_count). */
bool kubelet_log_running(const cJSON *pod, const char *container, int64_t restart_count);

#endif
