/* podplan.h - how the local kubelet runs a pod (pure): the files its
 * volumes hold and, per container, the bubblewrap command line and
 * environment. No I/O: the shell (kubelet.h) writes the files and execs.
 *
 * The sandbox of a container (bwrap 0.8):
 *   --unshare-pid --unshare-ipc --unshare-uts --hostname <pod name>
 *   --die-with-parent --new-session --cap-drop ALL
 *   --unshare-user --uid U --gid G  when runAsUser/runAsGroup is set (pod or
 *       container securityContext) or runAsNonRoot is true (default uid/gid
 *       65532); otherwise the process runs as root without capabilities
 *   --unshare-net  when isolate_net (a NetworkPolicy denies all egress):
 *       only a loopback device inside, so not even the pod IP of others;
 *       with netns instead, bwrap is started inside that network namespace
 *       (the pod's own, netpol.h) and shares it
 *   --ro-bind /usr, symlinks /bin /sbin /lib /lib64 -> usr/..., --ro-bind-try
 *       of the /etc entries programs need (ld.so.cache, ssl, ca-certificates,
 *       alternatives, passwd, group, nsswitch.conf, hosts, resolv.conf,
 *       localtime, gai.conf), --proc /proc, --dev /dev, and
 *       POD_DIR/tmp/<container> bound at /tmp (the container's own, on disk)
 *   --ro-bind BIN_DIR /opt/tern/bin (the project's build output)
 *   volumes at their mountPaths (--bind, or --ro-bind when readOnly or the
 *       volume is configMap/secret/projected/downwardAPI), subPath honoured
 *   the service-account directory --ro-bind at
 *       /var/run/secrets/kubernetes.io/serviceaccount unless
 *       automountServiceAccountToken is false (pod or ServiceAccount) or a
 *       volumeMount already uses that path
 *   POD_DIR/termination/<container> bound at terminationMessagePath (default
 *       /dev/termination-log), writable even with a read-only root
 *   --chdir workingDir (created), --remount-ro / when
 *       readOnlyRootFilesystem
 * Images are not pulled: the image is recorded and ignored. argv is
 * command + args (with $(VAR) expanded from the container's environment);
 * when command is empty, args alone; when both are empty the container
 * cannot start (CreateContainerConfigError). argv[0] without a '/' is
 * looked up on PATH inside the sandbox; the environment PATH is
 * /opt/tern/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
 * unless the container sets PATH.
 *
 * Environment: PATH, HOSTNAME, KUBERNETES_SERVICE_HOST/PORT (and
 * KUBERNETES_PORT...), then envFrom, then env (later wins), with valueFrom
 * secretKeyRef, configMapKeyRef (optional honoured), fieldRef
 * (metadata.name, metadata.namespace, metadata.uid, metadata.labels['k'],
 * metadata.annotations['k'], spec.nodeName, spec.serviceAccountName,
 * status.podIP, status.podIPs, status.hostIP) and resourceFieldRef
 * (limits/requests of cpu and memory).
 */
#ifndef TERN_PODPLAN_H
#define TERN_PODPLAN_H

#include "base/err.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PODPLAN_SA_PATH "/var/run/secrets/kubernetes.io/serviceaccount"
#define PODPLAN_BIN_PATH "/opt/tern/bin"
#define PODPLAN_NONROOT_UID 65532

struct podplan_in {
    const cJSON *pod;
    const cJSON *configmaps; /* array: the ConfigMaps of the pod's namespace */
    const cJSON *secrets;    /* array: the Secrets of the pod's namespace */
    const cJSON *pvcs;       /* array: the PVCs of the pod's namespace */
    const cJSON *pvs;        /* array: their PersistentVolumes, or NULL */
    const char *pod_dir;     /* per-pod directory on the host */
    const char *volume_root; /* PVC dirs: the bound PersistentVolume's
                              * hostPath/local path, else (tern-dev, which
                              * makes no PV objects) VOLUME_ROOT/<ns>/<pvc-uid> */
    const char *pod_ip;
    const char *host_ip;
    const char *sa_token;    /* NULL: no token */
    const char *ca_pem;      /* tern-dev's CA certificate (ca.crt), may be NULL */
    const char *api_host;    /* KUBERNETES_SERVICE_HOST */
    int api_port;
    const char *bin_dir;     /* bound at /opt/tern/bin when non-NULL */
    const char *bwrap;       /* bwrap binary, e.g. "/usr/bin/bwrap" */
    bool isolate_net;
    const char *netns;       /* a network namespace to run in (/run/netns/NAME), or NULL */
};

struct podplan_file {
    char *path; /* absolute host path */
    char *data;
    size_t len;
    mode_t mode;
};

struct podplan_volumes {
    char **dirs; /* directories to create (mode 0777), in order */
    size_t ndirs;
    struct podplan_file *files;
    size_t nfiles;
};

/* The host directory of volume name: PVC dir or POD_DIR/volumes/<name>.
 * Returns 0 and a new string, or TERN_ENOTFOUND (unknown volume, or a claim
 * not Bound) / TERN_EINVALID (unsupported volume type, e.g. hostPath). */
int podplan_volume_source(const struct podplan_in *in, const char *name, char **ret,
                          struct tern_err *err);

/* The directories and files of all the pod's volumes (emptyDir,
 * configMap, secret, projected, downwardAPI; serviceAccount token files under
 * POD_DIR/sa). TERN_ENOTFOUND when a non-optional source is missing (the
 * message says which), TERN_EINVALID for unsupported volumes. */
int podplan_volumes(const struct podplan_in *in, struct podplan_volumes *ret,
                    struct tern_err *err);
void podplan_volumes_done(struct podplan_volumes *v);

struct podplan_exec {
    char **argv; /* NULL-terminated; argv[0] is the bwrap binary */
    char **envp; /* NULL-terminated */
    /* the host file bound at the container's terminationMessagePath
     * (default /dev/termination-log): POD_DIR/termination/<container>; the
     * shell creates it empty (mode 0666) before the start and reads it
     * (at most 4096 bytes) when the container ends. NULL for probes. */
    char *termination_file;
    int64_t mem_limit;   /* bytes from resources.limits.memory, -1 none */
    int64_t cpu_millis;  /* from resources.limits.cpu, -1 none */
    uid_t uid;           /* the uid the process runs as (in the sandbox) */
    char *netns;         /* the network namespace to join before bwrap, or NULL */
};

/* The sandbox command for container (an element of spec.containers or
 * spec.initContainers). cmd_override (a JSON array of strings, may be NULL)
 * replaces command+args (exec probes). TERN_ENOTFOUND when an env source is
 * missing and not optional (CreateContainerConfigError), TERN_EINVALID for
 * a container without a command. */
int podplan_exec(const struct podplan_in *in, const cJSON *container, const cJSON *cmd_override,
                 struct podplan_exec *ret, struct tern_err *err);
void podplan_exec_done(struct podplan_exec *e);

/* Kubernetes quantity ("512Mi", "1G", "250m", "1.5") scaled by mult: bytes
 * for memory (mult 1), millicores for cpu (mult 1000). 0 or TERN_EINVALID. */
int podplan_quantity(const char *s, int64_t mult, int64_t *ret);

/* Whether the pod's requests fit a node with cpu_milli millicores and
 * mem_bytes of memory, as kube-scheduler's NodeResourcesFit judges a pod
 * alone on an empty node: the larger of the init containers' largest
 * request and the sum of the containers' requests, per resource (a
 * container with limits and no requests requests its limits, as the API
 * server defaults it). When it does not fit, why[] gets the scheduler's
 * message ("0/1 nodes are available: 1 Insufficient cpu. preemption: ...")
 * and false is returned. Pods already running on the node are not counted
 * (tern-dev runs every pod it can). */
bool podplan_fits(const cJSON *pod, int64_t cpu_milli, int64_t mem_bytes, char *why, size_t n);

/* Whether image is a valid reference (the distribution grammar a kubelet
 * parses before pulling: [domain[:port]/]path[:tag][@digest], lowercase
 * path components). When not, why[] gets the kubelet's message for the
 * InvalidImageName waiting reason ("Failed to apply default image tag
 * \"X\": couldn't parse image name \"X\": invalid reference format").
 * tern-dev pulls nothing, but a name no registry could serve is refused
 * as a cluster would. */
bool podplan_image_valid(const char *image, char *why, size_t n);

/* Expands $(VAR) references in s from envp ("K=V" strings, later entries
 * win); $$ gives $; unknown references stay as written. New string. */
char *podplan_expand(const char *s, char *const *envp, size_t n);

#endif
