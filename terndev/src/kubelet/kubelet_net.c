/* kubelet_net.c - the network namespace of a pod whose NetworkPolicies
 * restrict egress (netpol.h, NETPOL_NETNS), and its packet filter.
 *
 * For pod IP index i (the x.y of 127.1.x.y; the pod network is a /16,
 * 10.213.0.0/16 by default, and its first address G is the node's side):
 *
 *   host                                     namespace tern-p<i %04x>
 *   lo: G/32                                 lo (up)
 *   tern-v<i>  <-- veth pair -->             eth0: P/32 (P = network + i)
 *     route P/32 dev tern-v<i> src G           route G/32 dev eth0; default via G
 *     neighbour P (eth0's MAC) permanent       neighbour G (tern-v<i>'s MAC) permanent
 *     rp_filter 1 (a packet from tern-v<i>     table local: 127.1.0.0/16 via G, so
 *       must come from P), forwarding 1,         the node's other pods (127.1.x.y) stay
 *       route_localnet 1, no IPv6                reachable; route_localnet 1, no IPv6
 *   nat POSTROUTING: -s NET ! -d NET MASQUERADE  filter OUTPUT: netpol_rules
 *
 * Both sides' MAC addresses are fixed (02:74:64:00:x:y on the node's,
 * 02:74:70:00:x:y in the pod) and their neighbour entries permanent, so no
 * ARP setting of the machine matters. The namespace's name is also the
 * lock on the index across the kubelets of one machine: `ip netns add`
 * fails for a name another instance holds, and the allocator moves on.
 * Each namespace is recorded in /run/tern-netns/<name> with the pod
 * directory it belongs to: a kubelet removes its previous instance's, and
 * those of instances whose directory is gone, when it starts.
 *
 * Commands are run without a shell: `ip -batch -` on the node and in the
 * namespace, iptables-restore inside it (after setns), and the namespace's
 * sysctls written by a child that joined it. See kubelet_internal.h. */
#include "kubelet/kubelet_internal.h"

#include "base/buf.h"
#include "base/mem.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "kubelet/netpol.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define REGISTRY "/run/tern-netns"
#define RULES_EVERY_MS 2000

/* ---- running commands ---- */

/* Runs argv (absolute path) with input on stdin, inside the network
 * namespace netns_path when non-NULL. Returns 0, or -1 with the command's
 * stderr (or the reason) in err. */
static int run(char *const *argv, const char *input, const char *netns_path, struct tern_err *err)
{
    int in[2], errp[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        return err_set(err, -errno, "pipe: %s", strerror(errno));
    if (pipe2(errp, O_CLOEXEC) != 0) {
        int e = errno;
        close(in[0]);
        close(in[1]);
        return err_set(err, -e, "pipe: %s", strerror(e));
    }
    int nsfd = netns_path ? open(netns_path, O_RDONLY | O_CLOEXEC) : -1;
    if (netns_path && nsfd < 0) {
        int e = errno;
        close(in[0]);
        close(in[1]);
        close(errp[0]);
        close(errp[1]);
        return err_set(err, -e, "%s: %s", netns_path, strerror(e));
    }
    pid_t pid = fork();
    if (pid == 0) {
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) != 0)
            _exit(126);
        dup2(in[0], 0);
        dup2(errp[1], 1);
        dup2(errp[1], 2);
        char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
        execve(argv[0], argv, envp);
        _exit(127);
    }
    int e = errno;
    close(in[0]);
    close(errp[1]);
    if (nsfd >= 0)
        close(nsfd);
    if (pid < 0) {
        close(in[1]);
        close(errp[0]);
        return err_set(err, -e, "fork: %s", strerror(e));
    }
    if (input) {
        size_t n = strlen(input), off = 0;
        signal(SIGPIPE, SIG_IGN);
        while (off < n) {
            ssize_t k = write(in[1], input + off, n - off);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                break;
            off += (size_t)k;
        }
    }
    close(in[1]);
    char out[512];
    size_t got = 0;
    for (;;) {
        ssize_t k = read(errp[0], out + got, sizeof out - 1 - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
        if (got == sizeof out - 1) {
            char sink[256];
            while (read(errp[0], sink, sizeof sink) > 0)
                ;
            break;
        }
    }
    out[got] = '\0';
    close(errp[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    while (got && (out[got - 1] == '\n' || out[got - 1] == ' '))
        out[--got] = '\0';
    int code = strstr(out, "File exists") ? -EEXIST : -EIO;
    for (char *c = out; *c; c++)
        if (*c == '\n')
            *c = ' ';
    return err_set(err, code, "%s failed (%s %d): %s", argv[0],
                   WIFEXITED(st) ? "exit" : "signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), got ? out : "no output");
}

/* Writes value to a sysctl file, inside netns_path when non-NULL (a child
 * joins it: /proc/sys/net shows the namespace of whoever opens it). */
static int sysctl_set(const char *path, const char *value, const char *netns_path,
                      struct tern_err *err)
{
    int nsfd = netns_path ? open(netns_path, O_RDONLY | O_CLOEXEC) : -1;
    if (netns_path && nsfd < 0)
        return err_set(err, -errno, "%s: %s", netns_path, strerror(errno));
    pid_t pid = netns_path ? fork() : 0;
    if (pid == 0) {
        int ok = -1;
        if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) == 0) {
            int fd = open(path, O_WRONLY | O_CLOEXEC);
            if (fd >= 0) {
                ok = write(fd, value, strlen(value)) == (ssize_t)strlen(value) ? 0 : -1;
                close(fd);
            }
        }
        if (netns_path)
            _exit(ok == 0 ? 0 : 1);
        if (ok != 0)
            return err_set(err, -EIO, "write %s: %s", path, strerror(errno));
        return 0;
    }
    close(nsfd);
    if (pid < 0)
        return err_set(err, -errno, "fork: %s", strerror(errno));
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return err_set(err, -EIO, "write %s in %s failed", path, netns_path);
    return 0;
}

/* ---- names and addresses ---- */

static void names(int idx, char ns[32], char veth[32])
{
    snprintf(ns, 32, "tern-p%04x", (unsigned)idx);
    snprintf(veth, 32, "tern-v%04x", (unsigned)idx);
}

static void addr_of(const struct kubelet *k, int idx, char out[16])
{
    uint32_t a = k->podnet + (uint32_t)idx;
    snprintf(out, 16, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
}

bool kubelet__net_busy(int idx)
{
    char ns[32], veth[32], p[64];
    names(idx, ns, veth);
    struct stat st;
    snprintf(p, sizeof p, "/run/netns/%s", ns);
    if (stat(p, &st) == 0)
        return true;
    snprintf(p, sizeof p, "/sys/class/net/%s", veth);
    return stat(p, &st) == 0;
}

void kubelet__net_ip(const struct kubelet *k, int idx, char out[16])
{
    addr_of(k, idx, out);
}

/* ---- setup and teardown ---- */

static void registry_write(const char *ns, const char *owner)
{
    fsutil_mkdirs(REGISTRY, 0700, NULL);
    char *path = xasprintf("%s/%s", REGISTRY, ns);
    fsutil_write(path, owner, strlen(owner), 0600, NULL);
    free(path);
}

static void netns_delete(struct kubelet *k, const char *ns)
{
    char *argv[] = {k->ip_bin, "netns", "delete", (char *)ns, NULL};
    run(argv, NULL, NULL, NULL);
    char *path = xasprintf("%s/%s", REGISTRY, ns);
    unlink(path);
    free(path);
}

void kubelet__net_teardown(struct kubelet *k, struct kpod *p)
{
    if (!p->netns[0])
        return;
    netns_delete(k, p->netns);
    p->netns[0] = '\0';
    p->net_up = false;
    free(p->net_rules);
    p->net_rules = NULL;
}

static int net_index(const char *ip, const struct kubelet *k)
{
    unsigned char b[4];
    if (inet_pton(AF_INET, ip, b) != 1)
        return -1;
    uint32_t a = ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
    if ((a & 0xffff0000u) != k->podnet)
        return -1;
    return (int)(a & 0xffff);
}

int kubelet__net_setup(struct kubelet *k, struct kpod *p, struct tern_err *err)
{
    if (p->net_up)
        return 0;
    if (!k->net_ok)
        return err_set(err, -EPERM, "%s", k->net_why);
    int idx = net_index(p->ip, k);
    if (idx < 2)
        return err_set(err, -EINVAL, "pod address %s is not on the pod network", p->ip);
    char ns[32], veth[32], gw[16], mac_h[24], mac_p[24], path[96];
    names(idx, ns, veth);
    addr_of(k, 1, gw);
    snprintf(mac_h, sizeof mac_h, "02:74:64:00:%02x:%02x", idx >> 8, idx & 255);
    snprintf(mac_p, sizeof mac_p, "02:74:70:00:%02x:%02x", idx >> 8, idx & 255);
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    struct buf b;
    buf_init(&b, 8192);
    int rc;
    /* the node's side */
    buf_printf(&b, "netns add %s\n", ns);
    buf_printf(&b, "link add %s address %s type veth peer name eth0 address %s netns %s\n", veth,
               mac_h, mac_p, ns);
    {
        char *argv[] = {k->ip_bin, "-batch", "-", NULL};
        rc = run(argv, buf_str(&b), NULL, err);
    }
    if (rc)
        goto fail;
    snprintf(p->netns, sizeof p->netns, "%s", ns);
    snprintf(p->netns_path, sizeof p->netns_path, "/run/netns/%s", ns);
    registry_write(ns, p->dir);
    static const char *const host_sysctls[][3] = {
        {"ipv4", "rp_filter", "1"},  /* a packet from the pod must come from its address */
        {"ipv4", "route_localnet", "1"}, /* 127.1.x.y destinations of the pod */
        {"ipv4", "forwarding", "1"},  /* CIDR entries beyond this machine */
        {"ipv4", "accept_local", "0"},
        {"ipv6", "disable_ipv6", "1"},
    };
    for (size_t i = 0; i < sizeof host_sysctls / sizeof host_sysctls[0]; i++) {
        char f[160];
        snprintf(f, sizeof f, "/proc/sys/net/%s/conf/%s/%s", host_sysctls[i][0], veth,
                 host_sysctls[i][1]);
        if ((rc = sysctl_set(f, host_sysctls[i][2], NULL, err)))
            goto fail;
    }
    buf_reset(&b);
    buf_printf(&b, "link set %s up\n", veth);
    buf_printf(&b, "neigh replace %s lladdr %s dev %s nud permanent\n", p->ip, mac_p, veth);
    buf_printf(&b, "route replace %s/32 dev %s src %s\n", p->ip, veth, gw);
    {
        char *argv[] = {k->ip_bin, "-batch", "-", NULL};
        if ((rc = run(argv, buf_str(&b), NULL, err)))
            goto fail;
    }
    /* the pod's side */
    static const char *const pod_sysctls[][2] = {
        {"/proc/sys/net/ipv4/conf/eth0/route_localnet", "1"},
        {"/proc/sys/net/ipv6/conf/eth0/disable_ipv6", "1"},
        {"/proc/sys/net/ipv4/conf/eth0/rp_filter", "0"},
    };
    for (size_t i = 0; i < sizeof pod_sysctls / sizeof pod_sysctls[0]; i++)
        if ((rc = sysctl_set(pod_sysctls[i][0], pod_sysctls[i][1], path, err)))
            goto fail;
    buf_reset(&b);
    buf_puts(&b, "link set lo up\n");
    buf_printf(&b, "addr add %s/32 dev eth0\n", p->ip);
    buf_puts(&b, "link set eth0 up\n");
    buf_printf(&b, "neigh replace %s lladdr %s dev eth0 nud permanent\n", gw, mac_h);
    buf_printf(&b, "route add %s/32 dev eth0 scope link\n", gw);
    buf_printf(&b, "route add default via %s dev eth0 onlink\n", gw);
    buf_printf(&b, "route add 127.1.0.0/16 via %s dev eth0 onlink table local\n", gw);
    {
        char *argv[] = {k->ip_bin, "-n", ns, "-batch", "-", NULL};
        if ((rc = run(argv, buf_str(&b), NULL, err)))
            goto fail;
    }
    /* nothing leaves before the filter is in place: deny all first */
    {
        char *deny = xasprintf("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n"
                               ":OUTPUT DROP [0:0]\n-A OUTPUT -o lo -j ACCEPT\nCOMMIT\n");
        char *argv[] = {k->iptables_restore_bin, "-w", NULL};
        rc = run(argv, deny, path, err);
        free(deny);
        if (rc)
            goto fail;
    }
    p->net_up = true;
    buf_done(&b);
    return 0;
fail:
    buf_done(&b);
    err_wrap(err, rc, "pod network namespace %s", ns);
    if (p->netns[0])
        kubelet__net_teardown(k, p);
    else {
        /* a half-made namespace of this index (ours: the add succeeded) */
        struct stat st;
        if (stat(path, &st) == 0 && rc != -EEXIST)
            netns_delete(k, ns);
    }
    return rc;
}

int kubelet__net_sync(struct kubelet *k, struct kpod *p, const cJSON *pod, int64_t now_ms,
                      struct tern_err *err)
{
    if (!p->net_up || (p->net_rules && now_ms < p->net_next_ms))
        return 0;
    p->net_next_ms = now_ms + RULES_EVERY_MS;
    kubelet__cache_pod(k, pod);
    cJSON *pods = NULL, *nss = NULL;
    if (netpol_needs_pods(pod, k->netpols)) {
        cJSON *l = NULL;
        if (objstore_list(k->s, "v1/pods", NULL, &l, NULL) == 0)
            pods = cJSON_DetachItemFromObjectCaseSensitive(l, "items");
        cJSON_Delete(l);
        l = NULL;
        if (objstore_list(k->s, "v1/namespaces", NULL, &l, NULL) == 0)
            nss = cJSON_DetachItemFromObjectCaseSensitive(l, "items");
        cJSON_Delete(l);
    }
    struct netpol_in in = {
        .pod = pod, .policies = k->netpols, .pods = pods, .namespaces = nss, .pod_ip = p->ip};
    struct buf b;
    buf_init(&b, 8u << 20);
    netpol_rules(&in, &b);
    cJSON_Delete(pods);
    cJSON_Delete(nss);
    int rc = 0;
    if (!p->net_rules || strcmp(p->net_rules, buf_str(&b)) != 0) {
        char path[96];
        snprintf(path, sizeof path, "/run/netns/%s", p->netns);
        char *argv[] = {k->iptables_restore_bin, "-w", NULL};
        rc = run(argv, buf_str(&b), path, err);
        if (rc == 0) {
            free(p->net_rules);
            p->net_rules = buf_steal(&b);
        } else {
            err_wrap(err, rc, "packet filter of pod %s/%s", p->ns, p->name);
        }
    }
    buf_done(&b);
    return rc;
}

/* ---- the node ---- */

void kubelet__net_init(struct kubelet *k)
{
    k->net_ok = false;
    if (k->netpol_off) {
        snprintf(k->net_why, sizeof k->net_why, "NetworkPolicy egress is not enforced here");
        return;
    }
    if (geteuid() != 0) {
        snprintf(k->net_why, sizeof k->net_why,
                 "this pod's NetworkPolicy restricts its egress, which this node enforces in a "
                 "network namespace of the pod's own; creating one needs root "
                 "(CAP_NET_ADMIN, CAP_SYS_ADMIN) and the kubelet runs as uid %u (run it as "
                 "root, or with TERN_DEV_NETWORK_POLICY=unenforced / tern-node "
                 "--network-policy unenforced to run such pods with their egress unrestricted)",
                 (unsigned)geteuid());
        return;
    }
    const char *tools[] = {k->ip_bin, k->iptables_restore_bin, k->iptables_bin};
    for (int i = 0; i < 3; i++)
        if (access(tools[i], X_OK) != 0) {
            snprintf(k->net_why, sizeof k->net_why,
                     "this pod's NetworkPolicy restricts its egress, which this node enforces "
                     "with %s (not found: install iproute2 and iptables)",
                     tools[i]);
            return;
        }
    /* the node's address on the pod network, and NAT for what leaves the
     * machine (CIDR entries outside it) */
    char gw[16], net[32];
    addr_of(k, 1, gw);
    addr_of(k, 0, net);
    char *cidr = xasprintf("%s/32", gw);
    struct tern_err e = {0};
    char *addr[] = {k->ip_bin, "addr", "replace", cidr, "dev", "lo", NULL};
    if (run(addr, NULL, NULL, &e) != 0) {
        snprintf(k->net_why, sizeof k->net_why,
                 "this pod's NetworkPolicy restricts its egress, and the node's pod-network "
                 "address cannot be set: %.200s",
                 e.msg);
        free(cidr);
        return;
    }
    free(cidr);
    char *src = xasprintf("%s/16", net);
    char *iptables = k->iptables_bin;
    char *check[] = {iptables, "-w", "-t", "nat", "-C", "POSTROUTING", "-s", src, "!", "-d", src,
                     "-j", "MASQUERADE", NULL};
    if (run(check, NULL, NULL, NULL) != 0) {
        char *add[] = {iptables, "-w", "-t", "nat", "-A", "POSTROUTING", "-s", src, "!", "-d",
                       src, "-j", "MASQUERADE", NULL};
        run(add, NULL, NULL, NULL); /* best effort: only traffic leaving the machine needs it */
    }
    free(src);
    k->net_ok = true;
    /* what earlier instances left: ours, and those whose directory is gone */
    DIR *d = opendir(REGISTRY);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, "tern-p", 6) != 0)
            continue;
        char *path = xasprintf("%s/%s", REGISTRY, de->d_name);
        char *owner = NULL;
        size_t len = 0;
        bool stale = false;
        if (fsutil_read(path, 4096, &owner, &len, NULL) == 0) {
            size_t pl = strlen(k->podsdir);
            char *slash = strrchr(owner, '/');
            if (slash)
                *slash = '\0'; /* the pods directory of its owner */
            struct stat st;
            stale = (strncmp(owner, k->podsdir, pl) == 0 && owner[pl] == '\0') ||
                    stat(owner, &st) != 0;
        }
        if (stale)
            netns_delete(k, de->d_name);
        free(owner);
        free(path);
    }
    if (d)
        closedir(d);
}
