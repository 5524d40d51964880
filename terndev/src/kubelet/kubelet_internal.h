/* kubelet_internal.h - what the files of the local kubelet share; not an
 * interface (everything outside the kubelet uses kubelet.h).
 *
 *   kubelet.c            lifecycle (new/free), the sync pass over the
 *                        store's pods (binding, one pod's sync ending in its
 *                        status write and final delete), the run loop,
 *                        shutdown, the per-pass cache of what a pod uses
 *   kubelet_node.c       the Node object: registration and heartbeat, and
 *                        the node's Lease
 *   kubelet_pod.c        the kubelet's record of a pod: built from the store
 *                        (restoring what a previous instance reported), pod
 *                        IPs, a container's end and restart backoff, log paths
 *   kubelet_container.c  preparing a pod (volume files, token, isolation),
 *                        starting, stopping and reaping containers, probes
 *   kubelet_proc.c       processes: sandboxes in /proc, leftovers of a
 *                        previous instance, the pids file, cgroups, fork+exec
 *   kubelet_net.c        the network namespace of a pod whose NetworkPolicies
 *                        restrict its egress, and its packet filter
 *
 * Internal symbols are prefixed kubelet__ (libuv's uv__). Like kubelet.h:
 * one thread; struct kpod and struct kcont belong to the struct kubelet that
 * holds them in pods[].
 */
#ifndef TERN_KUBELET_INTERNAL_H
#define TERN_KUBELET_INTERNAL_H

#include "base/err.h"
#include "devctl/objcache.h"
#include "devctl/objstore.h"
#include "devctl/satoken.h"
#include "kubelet/kubelet.h"
#include "kubelet/netpol.h"
#include "kubelet/podplan.h"
#include "kubelet/podstatus.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One container (or init container) of a pod as the kubelet runs it. */
struct kcont {
    char *name;
    bool init;
    struct podstatus_container ps;
    char wmsg[512], tmsg[4097], lmsg[4097]; /* termination messages: <= 4096 bytes */
    pid_t pid;
    int64_t next_start_ms;
    int64_t next_ready_ms, next_live_ms, next_startup_ms;
    bool has_ready_probe, has_live_probe; /* of the running instance */
    int ready_succ, ready_fail, live_fail, startup_fail;
    bool killing;
    int64_t kill_deadline_ms;
    char cg_mem[256], cg_cpu[256];
    int64_t oom_before;
};

/* One pod bound to this node. */
struct kpod {
    char *uid, *ns, *name;
    char ip[16];
    char *dir;
    bool prepared, terminal, final_delete, seen, adopted;
    char *sa_token;
    enum netpol_mode mode; /* decided when the record is made */
    char netns[32];        /* its namespace (NETPOL_NETNS) once created, else "" */
    char netns_path[64];   /* /run/netns/<netns> */
    bool net_up;           /* the namespace is set up and filtered */
    char *net_rules;       /* the ruleset applied last */
    int64_t net_next_ms;   /* when the ruleset is computed again */
    struct kcont *c;
    size_t nc;
};

struct kubelet {
    const struct objstore *s;
    char *dir, *node, *api_host, *ca_pem, *bin_dir, *bwrap, *podsdir, *voldir, *version;
    int api_port, kubelet_port;
    bool scheduled_only;
    kubelet_token_fn token_fn;
    void *token_ctx;
    void (*on_error)(void *ctx, const char *msg);
    void *on_error_ctx;
    unsigned char sa_key[SATOKEN_KEY_LEN];
    bool have_key, cgroups;
    /* pod networks (kubelet_net.c) */
    bool netpol_off, net_ok;
    char net_why[512];    /* why namespaces cannot be made (pods needing one wait) */
    uint32_t podnet;      /* the pod network, a /16, host order */
    char *ip_bin, *iptables_bin, *iptables_restore_bin;
    int64_t backoff, backoff_max;
    struct kpod **pods;
    size_t npods;
    unsigned char ipused[65536 / 8];
    uint32_t ip_start;
    int64_t last_node_ms, last_lease_ms;
    char last_rv[32];      /* resourceVersion of the last pods list */
    char *node_uid;
    /* per-sync cache: the objects one pod uses (fetched by name, as a node
     * may read only what its pods reference) and its namespace's policies */
    char *cache_uid, *cache_ns;
    cJSON *cms, *secrets, *pvcs, *pvs, *netpols;
    /* every NetworkPolicy, kept current from the store's changes (synced
     * once per pass; netpols then holds references into it); NULL when
     * the store keeps no changes (tern-node: a list of the pod's
     * namespace) */
    struct objcache *npcache;
};

/* ---- kubelet.c ---- */

/* CLOCK_REALTIME in milliseconds. */
int64_t kubelet__now_real_ms(void);
/* Fills k's cache with what pod references (its ConfigMaps, Secrets, PVCs
 * and their PersistentVolumes, each read by name; a missing one is left
 * out) and the NetworkPolicies of its namespace, unless the cache already
 * holds them. */
void kubelet__cache_pod(struct kubelet *k, const cJSON *pod);

/* ---- kubelet_node.c ---- */

/* Creates the Node when missing and writes its status (capacity, Ready,
 * addresses, nodeInfo), at most every 30 s; with scheduled_only also renews
 * the node's Lease in kube-node-lease every 10 s. Returns 0 (also on a
 * conflict or a concurrent create) or the store's error. */
int kubelet__sync_node(struct kubelet *k, int64_t now_ms, struct tern_err *err);

/* ---- kubelet_pod.c ---- */

/* Adds a new record of pod to k->pods and returns it (owned by k). Restores
 * restart counts and states from the pod's status; a container a previous
 * instance reported running is recorded as ended (137, "tern-dev
 * restarted") and restarted per restartPolicy. Allocates the pod IP unless
 * the pod is terminal. */
struct kpod *kubelet__new_kpod(struct kubelet *k, const cJSON *pod, int64_t now_ms);
/* SIGKILLs and reaps p's containers, removes their cgroups, releases the
 * IP, frees p (not removed from k->pods). */
void kubelet__free_pod(struct kubelet *k, struct kpod *p);
/* A new address for p (its mode's kind) in place of the one it has. */
void kubelet__ip_renew(struct kubelet *k, struct kpod *p);
/* Releases ip (a 127.1.x.y or pod-network string) and empties it; "" is left alone. */
void kubelet__ip_free(struct kubelet *k, char ip[16]);
/* Records that c ended with code (reason, msg may be NULL; started in
 * seconds) at now_ms: waiting in CrashLoopBackOff with backoff when the
 * restart policy restarts it, else terminated and done. */
void kubelet__container_ended(struct kubelet *k, const cJSON *pod, struct kcont *c, int code,
                              const char *reason, const char *msg, int64_t started, int64_t now_ms);

/* ---- kubelet_container.c ---- */

/* Writes the pod's volume files once (and mints its token). Returns 0, or
 * an error that keeps the containers waiting (message in err). */
int kubelet__prepare(struct kubelet *k, struct kpod *p, const cJSON *pod, struct tern_err *err);
/* Starts c. A container whose exec plan fails waits with
 * CreateContainerConfigError (returns 0, retried next pass). Returns 0 or
 * the error of creating its log directory or of spawning. */
int kubelet__start_container(struct kubelet *k, struct kpod *p, const cJSON *pod, struct kcont *c,
                             int64_t now_ms, struct tern_err *err);
/* SIGTERM to c's sandbox (SIGKILL when grace_ms <= 0 or nothing to
 * signal); called again, SIGKILL once grace_ms has passed. */
void kubelet__stop_container(struct kcont *c, int64_t grace_ms, int64_t now_ms);
/* Collects p's exited containers (exit code, OOMKilled) without blocking. */
void kubelet__reap(struct kubelet *k, struct kpod *p, const cJSON *pod, int64_t now_ms);
/* Runs the readiness and liveness probes that are due; a failed liveness
 * probe stops the container. */
void kubelet__probes(struct kubelet *k, struct kpod *p, const cJSON *pod, int64_t now_ms);

/* ---- kubelet_proc.c ---- */

/* Sends sig to every process in the pid namespace of the sandbox whose
 * outer bwrap is pid, except its init. Returns how many were signalled. */
int kubelet__signal_sandbox(pid_t outer, int sig);
/* SIGKILLs a sandbox: its pid-namespace init and the outer bwrap's group. */
void kubelet__kill_sandbox(pid_t outer);
/* SIGKILLs what a previous instance on k's DIR left running: its bwrap
 * sandboxes and every process group in DIR/pods/ * /pids that still runs. */
void kubelet__kill_leftovers(struct kubelet *k);
/* True when the cgroup v1 directories of tern-dev exist (created if
 * needed) and are writable. */
bool kubelet__cg_usable(void);
/* Creates c's memory and cpu cgroups for x's limits when k uses cgroups
 * (c->cg_mem, c->cg_cpu stay "" otherwise or on failure). */
void kubelet__cg_setup(struct kubelet *k, struct kpod *p, struct kcont *c,
                       const struct podplan_exec *x);
/* Removes c's cgroups (best effort) and empties their paths. */
void kubelet__cg_remove(struct kcont *c);
/* The oom_kill count of c's memory cgroup, 0 without one. */
int64_t kubelet__oom_kills(const struct kcont *c);
/* Rewrites DIR/pods/<uid>/pids: "pid starttime" of each running container. */
void kubelet__write_pids(struct kubelet *k, struct kpod *p);
/* fork+exec of a sandbox in c's cgroups (and x->netns when set); the child
 * writes its logs to log_path (NULL: /dev/null). Returns the pid or -errno. */
pid_t kubelet__spawn(const struct podplan_exec *x, const char *log_path, const struct kcont *c);

/* ---- kubelet_net.c ---- */

/* At kubelet_new: whether this node can make pod namespaces (root, ip,
 * iptables; k->net_ok, else the reason in k->net_why), the node's
 * pod-network address and NAT, and the removal of namespaces a previous
 * instance (or one whose directory is gone) left. */
void kubelet__net_init(struct kubelet *k);
/* True when pod-network index idx is held on this machine (its namespace
 * or veth exists). */
bool kubelet__net_busy(int idx);
/* The pod-network address of index idx into out. */
void kubelet__net_ip(const struct kubelet *k, int idx, char out[16]);
/* Creates p's namespace for its address p->ip, with everything denied but
 * loopback. Returns 0, or an error (the reason in err) that keeps the pod
 * waiting; -EPERM when this node cannot make namespaces at all. */
int kubelet__net_setup(struct kubelet *k, struct kpod *p, struct tern_err *err);
/* Computes p's ruleset from its namespace's policies (at most every 2 s)
 * and applies it when it changed. 0 or the error of applying it. */
int kubelet__net_sync(struct kubelet *k, struct kpod *p, const cJSON *pod, int64_t now_ms,
                      struct tern_err *err);
/* Deletes p's namespace (its veth and route go with it). */
void kubelet__net_teardown(struct kubelet *k, struct kpod *p);

#endif
