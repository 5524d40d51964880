/* kubelet_node.c - the kubelet's Node object: created when missing
 * (hostname, os and arch labels) and its status (capacity, allocatable,
 * the Ready condition as a heartbeat, addresses, nodeInfo) written every
 * 30 s. See kubelet_internal.h. */
#include "kubelet/kubelet_internal.h"

#include "base/num.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <unistd.h>

int kubelet__sync_node(struct kubelet *k, int64_t now_ms, struct tern_err *err)
{
    if (k->last_node_ms && now_ms - k->last_node_ms < 30000)
        return 0;
    cJSON *node = NULL;
    int rc = objstore_get(k->s, "v1/nodes", "", k->node, &node, err);
    if (rc == TERN_ENOTFOUND) {
        cJSON *n = cJSON_CreateObject();
        json_add_string(n, "apiVersion", "v1");
        json_add_string(n, "kind", "Node");
        kobj_set_str(n, "metadata.name", k->node);
        cJSON *labels = kobj_obj(n, "metadata.labels");
        json_add_string(labels, "kubernetes.io/hostname", k->node);
        json_add_string(labels, "kubernetes.io/os", "linux");
        struct utsname u;
        uname(&u);
        json_add_string(labels, "kubernetes.io/arch",
                        strcmp(u.machine, "x86_64") == 0 ? "amd64"
                        : strcmp(u.machine, "aarch64") == 0 ? "arm64" : u.machine);
        rc = objstore_create(k->s, "v1/nodes", "", n, &node, err);
        cJSON_Delete(n);
        if (rc == -EEXIST)
            return 0;
    }
    if (rc)
        return rc;
    char b[32], ts[32];
    struct sysinfo si;
    sysinfo(&si);
    cJSON *c = json_dup(node);
    cJSON *cap = cJSON_CreateObject();
    json_add_string(cap, "cpu", num_fmt_i64(sysconf(_SC_NPROCESSORS_ONLN), b));
    char mem[40];
    snprintf(mem, sizeof mem, "%lluKi",
             (unsigned long long)si.totalram * si.mem_unit / 1024ULL);
    json_add_string(cap, "memory", mem);
    json_add_string(cap, "pods", "110");
    json_add_string(cap, "ephemeral-storage", "0");
    kobj_set_item(c, "status.capacity", cap);
    kobj_set_item(c, "status.allocatable", json_dup(cap));
    int64_t now = now_ms / 1000;
    kobj_set_cond(c, "Ready", "True", "KubeletReady", "kubelet is posting ready status", now);
    cJSON *cond = (cJSON *)kobj_cond(c, "Ready");
    kobj_set_str(cond, "lastHeartbeatTime", kobj_fmt_time(now, ts));
    cJSON *addrs = cJSON_CreateArray();
    cJSON *a1 = cJSON_CreateObject(), *a2 = cJSON_CreateObject();
    json_add_string(a1, "type", "InternalIP");
    json_add_string(a1, "address", "127.0.0.1");
    json_add_string(a2, "type", "Hostname");
    json_add_string(a2, "address", k->node);
    cJSON_AddItemToArray(addrs, a1);
    cJSON_AddItemToArray(addrs, a2);
    kobj_set_item(c, "status.addresses", addrs);
    struct utsname u;
    uname(&u);
    kobj_set_str(c, "status.nodeInfo.kubeletVersion", "v1.32.0-tern");
    kobj_set_str(c, "status.nodeInfo.kubeProxyVersion", "");
    kobj_set_str(c, "status.nodeInfo.operatingSystem", "linux");
    kobj_set_str(c, "status.nodeInfo.architecture", u.machine);
    kobj_set_str(c, "status.nodeInfo.kernelVersion", u.release);
    kobj_set_str(c, "status.nodeInfo.osImage", "tern-dev (bubblewrap)");
    kobj_set_str(c, "status.nodeInfo.containerRuntimeVersion", "bwrap://0.8");
    rc = objstore_update_status(k->s, "v1/nodes", "", c, NULL, err);
    cJSON_Delete(c);
    cJSON_Delete(node);
    if (rc == 0)
        k->last_node_ms = now_ms;
    return rc == TERN_ECONFLICT ? 0 : rc;
}
