/* netpol.c - a pod's network and packet filter from its NetworkPolicies.
 * See netpol.h. */
#include "kubelet/netpol.h"

#include "base/mem.h"
#include "base/num.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static bool selects(const cJSON *np, const cJSON *pod)
{
    const char *ns = kobj_str(np, "metadata.namespace"), *pns = kobj_str(pod, "metadata.namespace");
    if (ns && pns && strcmp(ns, pns) != 0)
        return false;
    const cJSON *sel = kobj_at(np, "spec.podSelector");
    return !sel || kobj_selector_matches(sel, kobj_at(pod, "metadata.labels"));
}

static bool has_type(const cJSON *np, const char *type)
{
    const cJSON *types = kobj_at(np, "spec.policyTypes"), *t;
    if (!types || cJSON_GetArraySize(types) == 0) /* the API server's default */
        return strcmp(type, "Ingress") == 0 || kobj_has(np, "spec.egress");
    cJSON_ArrayForEach(t, types)
    {
        if (cJSON_IsString(t) && strcmp(t->valuestring, type) == 0)
            return true;
    }
    return false;
}

enum netpol_mode netpol_mode(const cJSON *pod, const cJSON *policies, const char **ret_policy)
{
    bool eg = false, in = false, eg_rules = false, in_rules = false;
    const char *first = NULL;
    const cJSON *np;
    cJSON_ArrayForEach(np, policies)
    {
        if (!selects(np, pod))
            continue;
        if (has_type(np, "Egress")) {
            eg = true;
            eg_rules |= cJSON_GetArraySize(kobj_at(np, "spec.egress")) > 0;
            if (!first)
                first = kobj_str(np, "metadata.name");
        }
        if (has_type(np, "Ingress")) {
            in = true;
            in_rules |= cJSON_GetArraySize(kobj_at(np, "spec.ingress")) > 0;
        }
    }
    if (ret_policy)
        *ret_policy = first;
    if (!eg)
        return NETPOL_HOST;
    if (!eg_rules && in && !in_rules)
        return NETPOL_ISOLATED;
    return NETPOL_NETNS;
}

bool netpol_needs_pods(const cJSON *pod, const cJSON *policies)
{
    const cJSON *np, *rule, *peer;
    cJSON_ArrayForEach(np, policies)
    {
        if (!selects(np, pod) || !has_type(np, "Egress"))
            continue;
        cJSON_ArrayForEach(rule, kobj_at(np, "spec.egress"))
            cJSON_ArrayForEach(peer, kobj_at(rule, "to"))
                if (kobj_has(peer, "podSelector") || kobj_has(peer, "namespaceSelector"))
                    return true;
    }
    return false;
}

/* ---- the ruleset ---- */

struct ctx {
    const struct netpol_in *in;
    struct buf *out;
    int chains;
    struct buf chain_decls, chain_rules, accepts;
};

/* An IPv4 CIDR as iptables takes it ("a.b.c.d/n"), or false. */
static bool v4_cidr(const char *cidr, char *out, size_t n)
{
    const char *slash = cidr ? strchr(cidr, '/') : NULL;
    char a[INET_ADDRSTRLEN];
    if (!slash || (size_t)(slash - cidr) >= sizeof a)
        return false;
    memcpy(a, cidr, (size_t)(slash - cidr));
    a[slash - cidr] = '\0';
    unsigned char b[4];
    int64_t pfx;
    if (inet_pton(AF_INET, a, b) != 1 || num_parse_range(slash + 1, 0, 32, &pfx) != 0)
        return false;
    snprintf(out, n, "%u.%u.%u.%u/%d", b[0], b[1], b[2], b[3], (int)pfx);
    return true;
}

static bool v4_addr(const char *s)
{
    unsigned char b[4];
    return s && inet_pton(AF_INET, s, b) == 1;
}

static const char *proto_of(const cJSON *port)
{
    const char *p = kobj_str(port, "protocol");
    if (!p || strcmp(p, "TCP") == 0)
        return "tcp";
    if (strcmp(p, "UDP") == 0)
        return "udp";
    if (strcmp(p, "SCTP") == 0)
        return "sctp";
    return NULL;
}

/* The number of a named port in a pod's containers (protocol proto), or -1. */
static int named_port(const cJSON *pod, const char *name, const char *proto)
{
    static const char *const lists[] = {"spec.containers", "spec.initContainers"};
    for (int l = 0; l < 2; l++) {
        const cJSON *c, *p;
        cJSON_ArrayForEach(c, kobj_at(pod, lists[l]))
            cJSON_ArrayForEach(p, kobj_at(c, "ports"))
            {
                const char *n = kobj_str(p, "name"), *pr = proto_of(p);
                if (n && strcmp(n, name) == 0 && pr && strcmp(pr, proto) == 0)
                    return (int)kobj_int(p, "containerPort", -1);
            }
    }
    return -1;
}

/* The " -p P --dport N[:M]" part for one port entry toward dst_pod (NULL
 * for an ipBlock); false when it can allow nothing (unknown protocol, a
 * name that does not resolve). */
static bool port_match(const cJSON *port, const cJSON *dst_pod, char *out, size_t n)
{
    const char *proto = proto_of(port);
    if (!proto)
        return false;
    const cJSON *pv = kobj_at(port, "port");
    if (!pv) {
        snprintf(out, n, " -p %s", proto);
        return true;
    }
    int64_t num = -1;
    if (cJSON_IsString(pv)) {
        if (num_parse_i64(pv->valuestring, &num) != 0) {
            if (!dst_pod)
                return false;
            num = named_port(dst_pod, pv->valuestring, proto);
        }
    } else if (json_item_int64(pv, &num) != 0) {
        return false;
    }
    if (num < 1 || num > 65535)
        return false;
    int64_t end = kobj_int(port, "endPort", 0);
    if (end > num && end <= 65535)
        snprintf(out, n, " -p %s -m %s --dport %lld:%lld", proto, proto, (long long)num,
                 (long long)end);
    else
        snprintf(out, n, " -p %s -m %s --dport %lld", proto, proto, (long long)num);
    return true;
}

/* ACCEPTs for destination dst ("" = any) toward dst_pod under rule's ports;
 * target is "ACCEPT" or a chain name. */
static void accepts(struct ctx *c, const cJSON *rule, const char *dst, const cJSON *dst_pod,
                    const char *target)
{
    const cJSON *ports = kobj_at(rule, "ports");
    char d[64] = "";
    if (dst[0])
        snprintf(d, sizeof d, " -d %s", dst);
    if (cJSON_GetArraySize(ports) == 0) {
        buf_printf(&c->accepts, "-A OUTPUT%s -j %s\n", d, target);
        return;
    }
    const cJSON *p;
    cJSON_ArrayForEach(p, ports)
    {
        char m[96];
        if (port_match(p, dst_pod, m, sizeof m))
            buf_printf(&c->accepts, "-A OUTPUT%s%s -j %s\n", d, m, target);
    }
}

static const cJSON *ns_obj(const struct netpol_in *in, const char *name)
{
    const cJSON *n;
    cJSON_ArrayForEach(n, in->namespaces)
    {
        const char *nn = kobj_str(n, "metadata.name");
        if (nn && strcmp(nn, name) == 0)
            return n;
    }
    return NULL;
}

/* The labels of a namespace, with kubernetes.io/metadata.name as the API
 * server sets it. New object. */
static cJSON *ns_labels(const struct netpol_in *in, const char *name)
{
    const cJSON *l = kobj_at(ns_obj(in, name), "metadata.labels");
    cJSON *out = l ? json_dup(l) : cJSON_CreateObject();
    if (!json_get(out, "kubernetes.io/metadata.name"))
        cJSON_AddStringToObject(out, "kubernetes.io/metadata.name", name);
    return out;
}

static void selector_peer(struct ctx *c, const cJSON *rule, const cJSON *peer)
{
    const struct netpol_in *in = c->in;
    const char *own_ns = kobj_str(in->pod, "metadata.namespace");
    const cJSON *nsel = kobj_at(peer, "namespaceSelector");
    const cJSON *psel = kobj_at(peer, "podSelector");
    const cJSON *p;
    cJSON_ArrayForEach(p, in->pods)
    {
        const char *pns = kobj_str(p, "metadata.namespace"), *ip = kobj_str(p, "status.podIP");
        const char *phase = kobj_str(p, "status.phase");
        if (!pns || !v4_addr(ip) || (phase && (!strcmp(phase, "Succeeded") ||
                                               !strcmp(phase, "Failed"))))
            continue;
        if (nsel) {
            cJSON *labels = ns_labels(in, pns);
            bool ok = kobj_selector_matches(nsel, labels);
            cJSON_Delete(labels);
            if (!ok)
                continue;
        } else if (!own_ns || strcmp(pns, own_ns) != 0) {
            continue;
        }
        if (psel && !kobj_selector_matches(psel, kobj_at(p, "metadata.labels")))
            continue;
        char dst[32];
        snprintf(dst, sizeof dst, "%s/32", ip);
        accepts(c, rule, dst, p, "ACCEPT");
    }
}

static void ipblock_peer(struct ctx *c, const cJSON *rule, const cJSON *blk)
{
    char cidr[32];
    if (!v4_cidr(kobj_str(blk, "cidr"), cidr, sizeof cidr))
        return; /* IPv6: the namespace has no IPv6 address */
    const cJSON *except = kobj_at(blk, "except");
    if (cJSON_GetArraySize(except) == 0) {
        accepts(c, rule, cidr, NULL, "ACCEPT");
        return;
    }
    char chain[32];
    snprintf(chain, sizeof chain, "TERN-BLOCK-%d", c->chains++);
    buf_printf(&c->chain_decls, ":%s - [0:0]\n", chain);
    const cJSON *e;
    cJSON_ArrayForEach(e, except)
    {
        char x[32];
        if (cJSON_IsString(e) && v4_cidr(e->valuestring, x, sizeof x))
            buf_printf(&c->chain_rules, "-A %s -d %s -j RETURN\n", chain, x);
    }
    buf_printf(&c->chain_rules, "-A %s -j ACCEPT\n", chain);
    accepts(c, rule, cidr, NULL, chain);
}

void netpol_rules(const struct netpol_in *in, struct buf *out)
{
    struct ctx c = {.in = in, .out = out};
    buf_init(&c.chain_decls, 1u << 20);
    buf_init(&c.chain_rules, 1u << 20);
    buf_init(&c.accepts, 4u << 20);
    bool restricted = false;
    const cJSON *np, *rule, *peer;
    cJSON_ArrayForEach(np, in->policies)
    {
        if (!selects(np, in->pod) || !has_type(np, "Egress"))
            continue;
        restricted = true;
        cJSON_ArrayForEach(rule, kobj_at(np, "spec.egress"))
        {
            const cJSON *to = kobj_at(rule, "to");
            if (cJSON_GetArraySize(to) == 0) {
                accepts(&c, rule, "", NULL, "ACCEPT");
                continue;
            }
            cJSON_ArrayForEach(peer, to)
            {
                if (kobj_has(peer, "ipBlock"))
                    ipblock_peer(&c, rule, kobj_at(peer, "ipBlock"));
                else if (kobj_has(peer, "podSelector") || kobj_has(peer, "namespaceSelector"))
                    selector_peer(&c, rule, peer);
            }
        }
    }
    buf_puts(out, "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n");
    buf_puts(out, restricted ? ":OUTPUT DROP [0:0]\n" : ":OUTPUT ACCEPT [0:0]\n");
    buf_append(out, c.chain_decls.data, c.chain_decls.len);
    buf_append(out, c.chain_rules.data, c.chain_rules.len);
    buf_puts(out, "-A OUTPUT -o lo -j ACCEPT\n");
    buf_puts(out, "-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n");
    buf_printf(out, "-A OUTPUT ! -s %s/32 -j DROP\n", in->pod_ip);
    if (restricted) {
        buf_append(out, c.accepts.data, c.accepts.len);
        buf_puts(out, "-A OUTPUT -j REJECT --reject-with icmp-admin-prohibited\n");
    }
    buf_puts(out, "COMMIT\n");
    buf_done(&c.chain_decls);
    buf_done(&c.chain_rules);
    buf_done(&c.accepts);
}
