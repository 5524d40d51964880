/* netpol.h - how the local kubelet enforces a pod's NetworkPolicies (pure):
 * which network a pod gets, and the packet filter of its own network
 * namespace (docs/tern-dev-kubelet.md, "NetworkPolicy, exactly").
 *
 * Of the policies of the pod's namespace, those whose podSelector selects
 * the pod count; a policy restricts egress when policyTypes contains
 * Egress (or, without policyTypes, when it has egress rules), ingress when
 * it contains Ingress (or has no policyTypes). Then:
 *   NETPOL_HOST      no policy restricts egress: the host's network
 *                    namespace, as every pod had before (127.1.x.y);
 *   NETPOL_ISOLATED  egress and ingress are restricted and no rule allows
 *                    any of either: a namespace with only loopback
 *                    (bwrap --unshare-net; needs no privilege);
 *   NETPOL_NETNS     egress is restricted and something is allowed: a
 *                    namespace of its own on the node's pod network,
 *                    reachable from the host, whose egress is exactly the
 *                    union of the egress rules (netpol_rules).
 *
 * netpol_rules writes an iptables-restore ruleset for the filter table of
 * that namespace:
 *   - OUTPUT: loopback, then established/related replies, then anything
 *     whose source is not the pod's own address is dropped (no forged
 *     sources), then one ACCEPT per allowed (destination, protocol, port)
 *     of each rule, then REJECT (icmp-admin-prohibited: the connecting
 *     program fails at once with "No route to host");
 *   - peers: ipBlock (cidr, with except as RETURNs of a chain of its own),
 *     podSelector (this namespace) and namespaceSelector (+ podSelector):
 *     the status.podIP of every matching pod that has one and has not
 *     finished; a rule without `to` allows every destination, without
 *     `ports` every protocol and port; ports by number, endPort ranges, or
 *     by name (looked up in the peer pod's containerPorts; a named port
 *     cannot apply to an ipBlock and allows nothing there);
 *   - IPv6 peers are left out: the namespace has no IPv6 address;
 *   - INPUT and ingress rules are not enforced (everything on the node
 *     reaches the pod by its address, as before).
 * The text is deterministic, so a caller re-applies it only when it
 * changed.
 */
#ifndef TERN_NETPOL_H
#define TERN_NETPOL_H

#include "base/buf.h"

#include <cJSON.h>
#include <stdbool.h>

enum netpol_mode { NETPOL_HOST = 0, NETPOL_ISOLATED, NETPOL_NETNS };

/* The mode of pod under policies (an array of NetworkPolicy objects; those
 * of other namespaces are ignored). *ret_policy (may be NULL) is the name of
 * a policy that restricts egress (borrowed from policies), or NULL. */
enum netpol_mode netpol_mode(const cJSON *pod, const cJSON *policies, const char **ret_policy);

struct netpol_in {
    const cJSON *pod;
    const cJSON *policies;   /* NetworkPolicies (the pod's namespace's) */
    const cJSON *pods;       /* pods the selectors may pick (any namespaces), or NULL */
    const cJSON *namespaces; /* Namespace objects (for namespaceSelector), or NULL */
    const char *pod_ip;      /* the pod's own IPv4 address */
};

/* Whether a selecting egress rule has a pod or namespace selector peer (so
 * netpol_rules needs the pods and namespaces lists). */
bool netpol_needs_pods(const cJSON *pod, const cJSON *policies);

/* Appends the iptables-restore text for in to out. */
void netpol_rules(const struct netpol_in *in, struct buf *out);

#endif
