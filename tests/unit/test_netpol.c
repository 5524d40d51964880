/* Unit tests for kubelet/netpol: which network a pod gets from its
 * NetworkPolicies, and the packet filter of its namespace (the exact
 * iptables-restore text, since the kubelet applies it as it is). */
#include "harness.h"

#include "base/buf.h"
#include "json/json.h"
#include "kubelet/netpol.h"

#include <stdlib.h>
#include <string.h>

static cJSON *j(const char *s)
{
    cJSON *o = NULL;
    if (json_parse(s, strlen(s), &o, NULL) != 0)
        th_fail(__FILE__, __LINE__, "bad json: %s", s);
    return o;
}

#define POD_JSON                                                                                   \
    "{\"metadata\":{\"name\":\"s1-sandbox\",\"namespace\":\"team\",\"labels\":{\"tern.dev/role\":" \
    "\"sandbox\"}},\"status\":{\"podIP\":\"10.213.0.9\"}}"

TEST(netpol_modes)
{
    cJSON *pod = j(POD_JSON);
    static const struct {
        const char *policies;
        enum netpol_mode want;
    } t[] = {
        {"[]", NETPOL_HOST},
        /* another pod's policy, another namespace's */
        {"[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{\"podSelector\":{"
         "\"matchLabels\":{\"app\":\"x\"}},\"policyTypes\":[\"Egress\"]}}]",
         NETPOL_HOST},
        {"[{\"metadata\":{\"name\":\"a\",\"namespace\":\"other\"},\"spec\":{\"podSelector\":{},"
         "\"policyTypes\":[\"Egress\"]}}]",
         NETPOL_HOST},
        /* ingress only (no policyTypes, no egress: Ingress) */
        {"[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{\"podSelector\":{},"
         "\"ingress\":[{}]}}]",
         NETPOL_HOST},
        /* nothing in or out */
        {"[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{\"podSelector\":{},"
         "\"policyTypes\":[\"Ingress\",\"Egress\"]}}]",
         NETPOL_ISOLATED},
        /* egress denied, some ingress allowed (a sandbox without any egress) */
        {"[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{\"podSelector\":{},"
         "\"policyTypes\":[\"Ingress\",\"Egress\"],\"ingress\":[{}]}}]",
         NETPOL_NETNS},
        /* egress only denied: ingress stays open, so a namespace of its own */
        {"[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{\"podSelector\":{},"
         "\"policyTypes\":[\"Egress\"]}}]",
         NETPOL_NETNS},
        /* egress rules without policyTypes count as Egress */
        {"[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{\"podSelector\":{"
         "\"matchLabels\":{\"tern.dev/role\":\"sandbox\"}},\"egress\":[{}]}}]",
         NETPOL_NETNS},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        cJSON *p = j(t[i].policies);
        const char *name = NULL;
        enum netpol_mode m = netpol_mode(pod, p, &name);
        if (m != t[i].want)
            th_fail(__FILE__, __LINE__, "case %zu: mode %d, expected %d", i, m, t[i].want);
        if (m != NETPOL_HOST)
            ASSERT_EQ_STR(name, "a");
        cJSON_Delete(p);
    }
    cJSON_Delete(pod);
}

static char *rules(const char *pod, const char *policies, const char *pods, const char *nss)
{
    cJSON *po = j(pod), *pl = j(policies), *ps = pods ? j(pods) : NULL, *ns = nss ? j(nss) : NULL;
    struct netpol_in in = {po, pl, ps, ns, "10.213.0.9"};
    struct buf b;
    buf_init(&b, 1 << 20);
    netpol_rules(&in, &b);
    cJSON_Delete(po);
    cJSON_Delete(pl);
    cJSON_Delete(ps);
    cJSON_Delete(ns);
    return buf_steal(&b);
}

/* The sandbox policy the operator writes: the proxy by address, CIDRs. */
TEST(netpol_rules_of_a_sandbox)
{
    char *r = rules(
        POD_JSON,
        "[{\"metadata\":{\"name\":\"s1-sandbox\",\"namespace\":\"team\"},\"spec\":{"
        "\"podSelector\":{\"matchLabels\":{\"tern.dev/role\":\"sandbox\"}},\"policyTypes\":["
        "\"Ingress\",\"Egress\"],\"ingress\":[{\"from\":[{\"podSelector\":{}}]}],\"egress\":["
        "{\"to\":[{\"ipBlock\":{\"cidr\":\"10.213.0.1/32\"}}],\"ports\":[{\"protocol\":\"TCP\","
        "\"port\":3128}]},{\"to\":[{\"ipBlock\":{\"cidr\":\"140.82.112.0/20\"}},{\"ipBlock\":{"
        "\"cidr\":\"fd00::/8\"}},{\"ipBlock\":{\"cidr\":\"10.0.0.0/8\",\"except\":["
        "\"10.96.0.0/12\",\"10.0.0.5/32\"]}}]}]}}]",
        NULL, NULL);
    ASSERT_EQ_STR(r, "*filter\n"
                     ":INPUT ACCEPT [0:0]\n"
                     ":FORWARD DROP [0:0]\n"
                     ":OUTPUT DROP [0:0]\n"
                     ":TERN-BLOCK-0 - [0:0]\n"
                     "-A TERN-BLOCK-0 -d 10.96.0.0/12 -j RETURN\n"
                     "-A TERN-BLOCK-0 -d 10.0.0.5/32 -j RETURN\n"
                     "-A TERN-BLOCK-0 -j ACCEPT\n"
                     "-A OUTPUT -o lo -j ACCEPT\n"
                     "-A OUTPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n"
                     "-A OUTPUT ! -s 10.213.0.9/32 -j DROP\n"
                     "-A OUTPUT -d 10.213.0.1/32 -p tcp -m tcp --dport 3128 -j ACCEPT\n"
                     "-A OUTPUT -d 140.82.112.0/20 -j ACCEPT\n"
                     "-A OUTPUT -d 10.0.0.0/8 -j TERN-BLOCK-0\n"
                     "-A OUTPUT -j REJECT --reject-with icmp-admin-prohibited\n"
                     "COMMIT\n");
    free(r);
}

TEST(netpol_rules_deny_all_and_allow_all)
{
    char *r = rules(POD_JSON,
                    "[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{"
                    "\"podSelector\":{},\"policyTypes\":[\"Egress\"]}}]",
                    NULL, NULL);
    ASSERT_CONTAINS(r, ":OUTPUT DROP [0:0]\n");
    ASSERT_CONTAINS(r, "-A OUTPUT ! -s 10.213.0.9/32 -j DROP\n"
                       "-A OUTPUT -j REJECT --reject-with icmp-admin-prohibited\nCOMMIT\n");
    free(r);
    /* a rule with no `to` and ports only: every destination on those ports */
    r = rules(POD_JSON,
              "[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{"
              "\"podSelector\":{},\"policyTypes\":[\"Egress\"],\"egress\":[{\"ports\":[{"
              "\"protocol\":\"UDP\",\"port\":53},{\"port\":8000,\"endPort\":8100},{\"protocol\":"
              "\"SCTP\"}]}]}}]",
              NULL, NULL);
    ASSERT_CONTAINS(r, "-A OUTPUT -p udp -m udp --dport 53 -j ACCEPT\n"
                       "-A OUTPUT -p tcp -m tcp --dport 8000:8100 -j ACCEPT\n"
                       "-A OUTPUT -p sctp -j ACCEPT\n");
    free(r);
    /* no policy restricts egress any more: everything is allowed */
    r = rules(POD_JSON, "[]", NULL, NULL);
    ASSERT_CONTAINS(r, ":OUTPUT ACCEPT [0:0]\n");
    ASSERT_FALSE(strstr(r, "REJECT"));
    free(r);
}

TEST(netpol_rules_of_selector_peers_and_named_ports)
{
    const char *pods =
        "[{\"metadata\":{\"name\":\"proxy-1\",\"namespace\":\"tern-system\",\"labels\":{"
        "\"app\":\"proxy\"}},\"spec\":{\"containers\":[{\"ports\":[{\"name\":\"proxy\","
        "\"containerPort\":3128}]}]},\"status\":{\"phase\":\"Running\",\"podIP\":\"127.1.4.5\"}},"
        "{\"metadata\":{\"name\":\"proxy-old\",\"namespace\":\"tern-system\",\"labels\":{"
        "\"app\":\"proxy\"}},\"status\":{\"phase\":\"Failed\",\"podIP\":\"127.1.4.6\"}},"
        "{\"metadata\":{\"name\":\"proxy-x\",\"namespace\":\"elsewhere\",\"labels\":{"
        "\"app\":\"proxy\"}},\"status\":{\"phase\":\"Running\",\"podIP\":\"127.1.4.7\"}},"
        "{\"metadata\":{\"name\":\"db\",\"namespace\":\"team\",\"labels\":{\"app\":\"db\"}},"
        "\"spec\":{\"containers\":[{\"ports\":[{\"name\":\"pg\",\"containerPort\":5432}]}]},"
        "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.213.0.20\"}}]";
    const char *nss = "[{\"metadata\":{\"name\":\"tern-system\",\"labels\":{"
                      "\"kubernetes.io/metadata.name\":\"tern-system\"}}},"
                      "{\"metadata\":{\"name\":\"elsewhere\"}}]";
    char *r = rules(
        POD_JSON,
        "[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{\"podSelector\":{},"
        "\"policyTypes\":[\"Egress\"],\"egress\":[{\"to\":[{\"namespaceSelector\":{"
        "\"matchLabels\":{\"kubernetes.io/metadata.name\":\"tern-system\"}},\"podSelector\":{"
        "\"matchLabels\":{\"app\":\"proxy\"}}}],\"ports\":[{\"port\":\"proxy\"}]},"
        "{\"to\":[{\"podSelector\":{\"matchLabels\":{\"app\":\"db\"}}},{\"ipBlock\":{\"cidr\":"
        "\"192.168.0.0/16\"}}],\"ports\":[{\"port\":\"pg\"}]}]}}]",
        pods, nss);
    /* the running proxy pod of tern-system on its named port; the finished
     * one and the one of another namespace are not allowed; the db on pg;
     * a named port allows nothing on an ipBlock */
    ASSERT_CONTAINS(r, "-A OUTPUT -d 127.1.4.5/32 -p tcp -m tcp --dport 3128 -j ACCEPT\n"
                       "-A OUTPUT -d 10.213.0.20/32 -p tcp -m tcp --dport 5432 -j ACCEPT\n"
                       "-A OUTPUT -j REJECT");
    ASSERT_FALSE(strstr(r, "127.1.4.6"));
    ASSERT_FALSE(strstr(r, "127.1.4.7"));
    ASSERT_FALSE(strstr(r, "192.168"));
    free(r);
    /* namespaceSelector matches the implicit name label too */
    r = rules(POD_JSON,
              "[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{\"podSelector\":{},"
              "\"policyTypes\":[\"Egress\"],\"egress\":[{\"to\":[{\"namespaceSelector\":{"
              "\"matchLabels\":{\"kubernetes.io/metadata.name\":\"elsewhere\"}}}]}]}}]",
              pods, nss);
    ASSERT_CONTAINS(r, "-A OUTPUT -d 127.1.4.7/32 -j ACCEPT\n");
    free(r);
    cJSON *pod = j(POD_JSON), *pl = j("[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},"
                                     "\"spec\":{\"podSelector\":{},\"egress\":[{\"to\":[{"
                                     "\"ipBlock\":{\"cidr\":\"1.2.3.4/32\"}}]}]}}]");
    ASSERT_FALSE(netpol_needs_pods(pod, pl));
    cJSON_Delete(pl);
    pl = j("[{\"metadata\":{\"name\":\"a\",\"namespace\":\"team\"},\"spec\":{\"podSelector\":{},"
           "\"egress\":[{\"to\":[{\"podSelector\":{}}]}]}}]");
    ASSERT_TRUE(netpol_needs_pods(pod, pl));
    cJSON_Delete(pl);
    cJSON_Delete(pod);
}
