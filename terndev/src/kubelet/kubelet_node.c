/* kubelet_node.c - the kubelet's Node object: created when missing
 * (hostname, os and arch labels) and its status (capacity, allocatable,
 * the Ready condition as a heartbeat and the pressure conditions, addresses,
 * nodeInfo, the kubelet endpoint) written every 30 s; for a node of a
 * cluster (scheduled_only) also its Lease in kube-node-lease, renewed every
 * 10 s, which is what the node lifecycle controller watches. See
 * kubelet_internal.h. */
#include "kubelet/kubelet_internal.h"

#include "base/mem.h"
#include "base/num.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "json/json.h"
#include "kube/kclient.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define LEASE_SECONDS 40
#define LEASE_RENEW_MS 10000
#define STATUS_MS 30000

/* Kubernetes' GOARCH names for uname's machine. */
static const char *goarch(const char *machine)
{
    return strcmp(machine, "x86_64") == 0    ? "amd64"
           : strcmp(machine, "aarch64") == 0 ? "arm64"
           : strncmp(machine, "armv", 4) == 0 ? "arm"
                                              : machine;
}

/* The first line of a small system file (boot id, machine id), or "". */
static void read_id(const char *path, char *out, size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    out[0] = 0;
    if (fsutil_read(path, 4096, &buf, &len, NULL) != 0)
        return;
    size_t i = 0;
    while (i < len && i + 1 < n && buf[i] != '\n' && buf[i] != '\r')
        i++;
    memcpy(out, buf, i);
    out[i] = 0;
    free(buf);
}

static void add_cond(cJSON *conds, const char *type, const char *status, const char *reason,
                     const char *msg, const char *ts)
{
    cJSON *c = cJSON_CreateObject();
    json_add_string(c, "type", type);
    json_add_string(c, "status", status);
    json_add_string(c, "reason", reason);
    json_add_string(c, "message", msg);
    json_add_string(c, "lastHeartbeatTime", ts);
    json_add_string(c, "lastTransitionTime", ts);
    cJSON_AddItemToArray(conds, c);
}

/* Replaces the conditions of status (keeping each one's lastTransitionTime
 * while its status holds). */
static void set_conditions(cJSON *node, int64_t now)
{
    char ts[32];
    kobj_fmt_time(now, ts);
    cJSON *conds = cJSON_CreateArray();
    add_cond(conds, "MemoryPressure", "False", "KubeletHasSufficientMemory",
             "kubelet has sufficient memory available", ts);
    add_cond(conds, "DiskPressure", "False", "KubeletHasNoDiskPressure",
             "kubelet has no disk pressure", ts);
    add_cond(conds, "PIDPressure", "False", "KubeletHasSufficientPID",
             "kubelet has sufficient PID available", ts);
    add_cond(conds, "Ready", "True", "KubeletReady", "kubelet is posting ready status", ts);
    cJSON *c;
    cJSON_ArrayForEach(c, conds)
    {
        const cJSON *old = kobj_cond(node, kobj_str(c, "type"));
        const char *os = kobj_str(old, "status"), *ot = kobj_str(old, "lastTransitionTime");
        if (os && ot && strcmp(os, kobj_str(c, "status")) == 0)
            kobj_set_str(c, "lastTransitionTime", ot);
    }
    kobj_set_item(node, "status.conditions", conds);
}

static void set_status(struct kubelet *k, cJSON *c, int64_t now)
{
    char b[32];
    struct sysinfo si;
    sysinfo(&si);
    cJSON *cap = cJSON_CreateObject();
    json_add_string(cap, "cpu", num_fmt_i64(sysconf(_SC_NPROCESSORS_ONLN), b));
    char mem[40];
    snprintf(mem, sizeof mem, "%lluKi", (unsigned long long)si.totalram * si.mem_unit / 1024ULL);
    json_add_string(cap, "memory", mem);
    json_add_string(cap, "pods", "110");
    json_add_string(cap, "ephemeral-storage", "0");
    kobj_set_item(c, "status.capacity", cap);
    kobj_set_item(c, "status.allocatable", json_dup(cap));
    set_conditions(c, now);
    cJSON *addrs = cJSON_CreateArray();
    cJSON *a1 = cJSON_CreateObject(), *a2 = cJSON_CreateObject();
    json_add_string(a1, "type", "InternalIP");
    json_add_string(a1, "address", "127.0.0.1");
    json_add_string(a2, "type", "Hostname");
    json_add_string(a2, "address", k->node);
    cJSON_AddItemToArray(addrs, a1);
    cJSON_AddItemToArray(addrs, a2);
    kobj_set_item(c, "status.addresses", addrs);
    if (k->kubelet_port > 0)
        kobj_set_int(c, "status.daemonEndpoints.kubeletEndpoint.Port",
                       k->kubelet_port);
    struct utsname u;
    uname(&u);
    char boot[64], machine[64], product[64];
    read_id("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    read_id("/etc/machine-id", machine, sizeof machine);
    read_id("/sys/class/dmi/id/product_uuid", product, sizeof product);
    kobj_set_str(c, "status.nodeInfo.machineID", machine);
    kobj_set_str(c, "status.nodeInfo.systemUUID", product[0] ? product : machine);
    kobj_set_str(c, "status.nodeInfo.bootID", boot);
    kobj_set_str(c, "status.nodeInfo.kubeletVersion", k->version);
    kobj_set_str(c, "status.nodeInfo.kubeProxyVersion", "");
    kobj_set_str(c, "status.nodeInfo.operatingSystem", "linux");
    kobj_set_str(c, "status.nodeInfo.architecture", goarch(u.machine));
    kobj_set_str(c, "status.nodeInfo.kernelVersion", u.release);
    kobj_set_str(c, "status.nodeInfo.osImage", "tern (bubblewrap)");
    kobj_set_str(c, "status.nodeInfo.containerRuntimeVersion", "bwrap://0.8");
}

static int create_node(struct kubelet *k, cJSON **ret, struct tern_err *err)
{
    cJSON *n = cJSON_CreateObject();
    json_add_string(n, "apiVersion", "v1");
    json_add_string(n, "kind", "Node");
    kobj_set_str(n, "metadata.name", k->node);
    cJSON *labels = kobj_obj(n, "metadata.labels");
    struct utsname u;
    uname(&u);
    json_add_string(labels, "kubernetes.io/hostname", k->node);
    json_add_string(labels, "kubernetes.io/os", "linux");
    json_add_string(labels, "kubernetes.io/arch", goarch(u.machine));
    json_add_string(labels, "beta.kubernetes.io/os", "linux");
    json_add_string(labels, "beta.kubernetes.io/arch", goarch(u.machine));
    json_add_string(labels, "node.kubernetes.io/instance-type", "tern-node");
    int rc = objstore_create(k->s, "v1/nodes", "", n, ret, err);
    cJSON_Delete(n);
    return rc;
}

/* The Lease kube-node-lease/<node>, owned by the Node (so it goes with it),
 * with renewTime now. */
static int renew_lease(struct kubelet *k, struct tern_err *err)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char ts[32];
    kclient_microtime(&now, ts);
    cJSON *l = NULL;
    int rc = objstore_get(k->s, "coordination.k8s.io/v1/leases", "kube-node-lease", k->node, &l,
                          err);
    if (rc == TERN_ENOTFOUND) {
        l = cJSON_CreateObject();
        json_add_string(l, "apiVersion", "coordination.k8s.io/v1");
        json_add_string(l, "kind", "Lease");
        kobj_set_str(l, "metadata.name", k->node);
        kobj_set_str(l, "metadata.namespace", "kube-node-lease");
        if (k->node_uid) {
            cJSON *refs = cJSON_CreateArray(), *ref = cJSON_CreateObject();
            json_add_string(ref, "apiVersion", "v1");
            json_add_string(ref, "kind", "Node");
            json_add_string(ref, "name", k->node);
            json_add_string(ref, "uid", k->node_uid);
            cJSON_AddItemToArray(refs, ref);
            kobj_set_item(l, "metadata.ownerReferences", refs);
        }
        kobj_set_str(l, "spec.holderIdentity", k->node);
        kobj_set_int(l, "spec.leaseDurationSeconds", LEASE_SECONDS);
        kobj_set_str(l, "spec.renewTime", ts);
        rc = objstore_create(k->s, "coordination.k8s.io/v1/leases", "kube-node-lease", l, NULL,
                             err);
    } else if (rc == 0) {
        kobj_set_str(l, "spec.holderIdentity", k->node);
        kobj_set_int(l, "spec.leaseDurationSeconds", LEASE_SECONDS);
        kobj_set_str(l, "spec.renewTime", ts);
        rc = objstore_update(k->s, "coordination.k8s.io/v1/leases", "kube-node-lease", l, NULL,
                             err);
    }
    cJSON_Delete(l);
    return rc == -EEXIST || rc == TERN_ECONFLICT ? 0 : rc;
}

int kubelet__sync_node(struct kubelet *k, int64_t now_ms, struct tern_err *err)
{
    int rc = 0;
    if (!k->last_node_ms || now_ms - k->last_node_ms >= STATUS_MS) {
        cJSON *node = NULL;
        rc = objstore_get(k->s, "v1/nodes", "", k->node, &node, err);
        if (rc == TERN_ENOTFOUND)
            rc = create_node(k, &node, err);
        if (rc == 0) {
            const char *uid = kobj_str(node, "metadata.uid");
            if (uid && (!k->node_uid || strcmp(uid, k->node_uid) != 0)) {
                free(k->node_uid);
                k->node_uid = xstrdup(uid);
            }
            cJSON *c = json_dup(node);
            set_status(k, c, now_ms / 1000);
            rc = objstore_update_status(k->s, "v1/nodes", "", c, NULL, err);
            cJSON_Delete(c);
            if (rc == 0)
                k->last_node_ms = now_ms;
        }
        cJSON_Delete(node);
        if (rc == -EEXIST || rc == TERN_ECONFLICT)
            rc = 0; /* a concurrent writer: again at the next pass */
    }
    if (k->scheduled_only && (!k->last_lease_ms || now_ms - k->last_lease_ms >= LEASE_RENEW_MS)) {
        int r = renew_lease(k, err);
        if (r == 0)
            k->last_lease_ms = now_ms;
        else if (!rc)
            rc = r;
    }
    return rc;
}
