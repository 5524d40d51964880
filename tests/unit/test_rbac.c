/* Unit tests for apiserver/rbac: the RBAC decision as kube-apiserver makes it. */
#include "harness.h"

#include "apiserver/rbac.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

/* One policy in a compact text form, parsed once per test. */
static const char POLICY[] =
    "{\"roles\":["
    " {\"metadata\":{\"name\":\"leases\",\"namespace\":\"tern-system\"},"
    "  \"rules\":[{\"apiGroups\":[\"coordination.k8s.io\"],\"resources\":[\"leases\"],"
    "             \"verbs\":[\"get\",\"update\"]}]},"
    " {\"metadata\":{\"name\":\"one-cm\",\"namespace\":\"app\"},"
    "  \"rules\":[{\"apiGroups\":[\"\"],\"resources\":[\"configmaps\"],\"resourceNames\":[\"cfg\"],"
    "             \"verbs\":[\"get\",\"list\"]}]},"
    " {\"metadata\":{\"name\":\"broken\",\"namespace\":\"app\"},"
    "  \"rules\":[{\"apiGroups\":\"*\",\"resources\":[\"*\"],\"verbs\":[\"*\"]},"
    "            {\"apiGroups\":[\"*\"],\"resources\":[\"*\",7],\"verbs\":[\"*\"]}]}],"
    "\"rolebindings\":["
    " {\"metadata\":{\"name\":\"leases\",\"namespace\":\"tern-system\"},"
    "  \"roleRef\":{\"kind\":\"Role\",\"name\":\"leases\"},"
    "  \"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"op\"}]},"
    " {\"metadata\":{\"name\":\"cm\",\"namespace\":\"app\"},"
    "  \"roleRef\":{\"kind\":\"Role\",\"name\":\"one-cm\"},"
    "  \"subjects\":[{\"kind\":\"User\",\"name\":\"alice\"}]},"
    " {\"metadata\":{\"name\":\"broken\",\"namespace\":\"app\"},"
    "  \"roleRef\":{\"kind\":\"Role\",\"name\":\"broken\"},"
    "  \"subjects\":[{\"kind\":\"Group\",\"name\":\"system:authenticated\"}]},"
    " {\"metadata\":{\"name\":\"view\",\"namespace\":\"app\"},"
    "  \"roleRef\":{\"kind\":\"ClusterRole\",\"name\":\"sessions\"},"
    "  \"subjects\":[{\"kind\":\"Group\",\"name\":\"system:serviceaccounts:app\"}]},"
    " {\"metadata\":{\"name\":\"dangling\",\"namespace\":\"app\"},"
    "  \"roleRef\":{\"kind\":\"Role\",\"name\":\"missing\"},"
    "  \"subjects\":[{\"kind\":\"User\",\"name\":\"bob\"}]}],"
    "\"clusterroles\":["
    " {\"metadata\":{\"name\":\"operator\"},"
    "  \"rules\":[{\"apiGroups\":[\"\"],\"resources\":[\"pods\"],\"verbs\":[\"list\",\"watch\"]},"
    "            {\"apiGroups\":[\"tern.dev\"],\"resources\":[\"agentsessions/status\","
    "             \"*/finalizers\"],\"verbs\":[\"update\"]},"
    "            {\"nonResourceURLs\":[\"/metrics\",\"/logs/*\"],\"verbs\":[\"get\"]}]},"
    " {\"metadata\":{\"name\":\"sessions\"},"
    "  \"rules\":[{\"apiGroups\":[\"tern.dev\"],\"resources\":[\"agentsessions\"],"
    "             \"verbs\":[\"get\"]},"
    "            {\"nonResourceURLs\":[\"/secret\"],\"verbs\":[\"get\"]}]},"
    " {\"metadata\":{\"name\":\"all\"},"
    "  \"rules\":[{\"apiGroups\":[\"*\"],\"resources\":[\"*\"],\"verbs\":[\"*\"]}]}],"
    "\"clusterrolebindings\":["
    " {\"metadata\":{\"name\":\"operator\"},"
    "  \"roleRef\":{\"kind\":\"ClusterRole\",\"name\":\"operator\"},"
    "  \"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"op\",\"namespace\":\"tern-system\"}]},"
    " {\"metadata\":{\"name\":\"not-a-clusterrole\"},"
    "  \"roleRef\":{\"kind\":\"Role\",\"name\":\"leases\"},"
    "  \"subjects\":[{\"kind\":\"User\",\"name\":\"carol\"}]},"
    " {\"metadata\":{\"name\":\"root\"},"
    "  \"roleRef\":{\"kind\":\"ClusterRole\",\"name\":\"all\"},"
    "  \"subjects\":[{\"kind\":\"User\",\"name\":\"root\"}]}]}";

static cJSON *doc;
static struct rbac_policy pol;

static void load(void)
{
    ASSERT_OK(json_parse(POLICY, strlen(POLICY), &doc, NULL));
    pol = (struct rbac_policy){json_get(doc, "roles"), json_get(doc, "rolebindings"),
                               json_get(doc, "clusterroles"), json_get(doc, "clusterrolebindings")};
}

static const struct rbac_user OP = {"system:serviceaccount:tern-system:op",
                                    {"system:serviceaccounts", "system:serviceaccounts:tern-system",
                                     "system:authenticated"},
                                    3};
static const struct rbac_user RUNNER = {"system:serviceaccount:app:runner",
                                        {"system:serviceaccounts", "system:serviceaccounts:app",
                                         "system:authenticated"},
                                        3};
static const struct rbac_user ALICE = {"alice", {"system:authenticated"}, 1};
static const struct rbac_user BOB = {"bob", {"system:authenticated"}, 1};
static const struct rbac_user CAROL = {"carol", {"system:authenticated"}, 1};
static const struct rbac_user ROOT = {"root", {"system:authenticated"}, 1};
static const struct rbac_user ADMIN = {"admin", {"system:masters"}, 1};
static const struct rbac_user ANON = {"nobody", {0}, 0};

static bool res(const struct rbac_user *u, const char *verb, const char *group, const char *r,
                const char *sub, const char *ns, const char *name)
{
    struct rbac_request q = {.verb = verb, .resource_request = true, .group = group,
                             .resource = r, .subresource = sub, .ns = ns, .name = name};
    char why[512];
    return rbac_allows(&pol, u, &q, why, sizeof why);
}

static bool path(const struct rbac_user *u, const char *verb, const char *p)
{
    struct rbac_request q = {.verb = verb, .path = p};
    char why[512];
    return rbac_allows(&pol, u, &q, why, sizeof why);
}

TEST(cluster_role_binding_grants_everywhere_only_its_verbs)
{
    load();
    ASSERT_TRUE(res(&OP, "list", "", "pods", NULL, NULL, NULL));
    ASSERT_TRUE(res(&OP, "watch", "", "pods", NULL, "app", NULL));
    ASSERT_FALSE(res(&OP, "get", "", "pods", NULL, "app", "p"));
    ASSERT_FALSE(res(&OP, "create", "", "pods", NULL, "app", NULL));
    ASSERT_FALSE(res(&OP, "list", "batch", "pods", NULL, NULL, NULL)); /* another group */
    ASSERT_FALSE(res(&OP, "list", "", "pods", "log", "app", "p"));     /* a subresource */
    cJSON_Delete(doc);
}

TEST(subresources_exact_and_wildcard)
{
    load();
    ASSERT_TRUE(res(&OP, "update", "tern.dev", "agentsessions", "status", "app", "s"));
    ASSERT_FALSE(res(&OP, "update", "tern.dev", "agentsessions", NULL, "app", "s"));
    ASSERT_FALSE(res(&OP, "patch", "tern.dev", "agentsessions", "status", "app", "s"));
    ASSERT_TRUE(res(&OP, "update", "tern.dev", "anything", "finalizers", "app", "s"));
    ASSERT_FALSE(res(&OP, "update", "tern.dev", "finalizers", NULL, "app", "s"));
    cJSON_Delete(doc);
}

TEST(role_binding_only_in_its_namespace_and_sa_namespace_defaults_to_it)
{
    load();
    ASSERT_TRUE(res(&OP, "get", "coordination.k8s.io", "leases", NULL, "tern-system", "l"));
    ASSERT_FALSE(res(&OP, "get", "coordination.k8s.io", "leases", NULL, "app", "l"));
    ASSERT_FALSE(res(&OP, "get", "coordination.k8s.io", "leases", NULL, NULL, "l"));
    ASSERT_FALSE(res(&OP, "create", "coordination.k8s.io", "leases", NULL, "tern-system", NULL));
    /* a ClusterRole through a RoleBinding, to a Group */
    ASSERT_TRUE(res(&RUNNER, "get", "tern.dev", "agentsessions", NULL, "app", "s"));
    ASSERT_FALSE(res(&RUNNER, "get", "tern.dev", "agentsessions", NULL, "other", "s"));
    cJSON_Delete(doc);
}

TEST(resource_names_need_a_named_request)
{
    load();
    ASSERT_TRUE(res(&ALICE, "get", "", "configmaps", NULL, "app", "cfg"));
    ASSERT_FALSE(res(&ALICE, "get", "", "configmaps", NULL, "app", "other"));
    ASSERT_FALSE(res(&ALICE, "list", "", "configmaps", NULL, "app", NULL));
    ASSERT_TRUE(res(&ALICE, "list", "", "configmaps", NULL, "app", "cfg")); /* fieldSelector */
    cJSON_Delete(doc);
}

TEST(malformed_rules_dangling_refs_and_wrong_ref_kinds_grant_nothing)
{
    load();
    /* "broken" is bound to every authenticated user but neither rule is a
     * list of strings throughout */
    ASSERT_FALSE(res(&ALICE, "delete", "", "secrets", NULL, "app", "x"));
    ASSERT_FALSE(res(&BOB, "get", "", "configmaps", NULL, "app", "cfg"));
    ASSERT_FALSE(res(&CAROL, "get", "coordination.k8s.io", "leases", NULL, "tern-system", "l"));
    ASSERT_TRUE(res(&ROOT, "delete", "apps", "deployments", NULL, "x", "d"));
    ASSERT_TRUE(res(&ROOT, "list", "", "nodes", NULL, NULL, NULL));
    ASSERT_TRUE(res(&ADMIN, "escalate", "x", "y", NULL, NULL, NULL));
    ASSERT_FALSE(res(&ANON, "get", "", "pods", NULL, "app", "p"));
    struct rbac_request noverb = {.resource_request = true, .resource = "pods"};
    char why[64];
    ASSERT_FALSE(rbac_allows(&pol, &ROOT, &noverb, why, sizeof why));
    cJSON_Delete(doc);
}

TEST(non_resource_urls_from_cluster_role_bindings_and_discovery)
{
    load();
    ASSERT_TRUE(path(&OP, "get", "/metrics"));
    ASSERT_TRUE(path(&OP, "get", "/logs/kubelet"));
    ASSERT_FALSE(path(&OP, "get", "/metricsx"));
    ASSERT_FALSE(path(&OP, "post", "/metrics"));
    /* nonResourceURLs through a RoleBinding count for nothing */
    ASSERT_FALSE(path(&RUNNER, "get", "/secret"));
    /* discovery: any authenticated user, GET only, whole segments */
    ASSERT_TRUE(path(&ALICE, "get", "/apis/tern.dev/v1alpha1"));
    ASSERT_TRUE(path(&ALICE, "get", "/version"));
    ASSERT_TRUE(path(&ALICE, "get", "/openapi/v3"));
    ASSERT_FALSE(path(&ALICE, "get", "/apisx"));
    ASSERT_FALSE(path(&ALICE, "post", "/api"));
    ASSERT_FALSE(path(&ANON, "get", "/api"));
    cJSON_Delete(doc);
}

TEST(reasons_and_denial_messages_are_kube_apiservers)
{
    load();
    struct rbac_request q = {.verb = "get", .resource_request = true, .group = "coordination.k8s.io",
                             .resource = "leases", .ns = "tern-system", .name = "l"};
    char why[512];
    ASSERT_TRUE(rbac_allows(&pol, &OP, &q, why, sizeof why));
    ASSERT_EQ_STR(why, "RBAC: allowed by RoleBinding \"leases/tern-system\" of Role \"leases\" to "
                       "ServiceAccount \"op/tern-system\"");
    q.verb = "list";
    q.resource = "pods";
    q.group = "";
    q.ns = NULL;
    ASSERT_TRUE(rbac_allows(&pol, &OP, &q, why, sizeof why));
    ASSERT_EQ_STR(why, "RBAC: allowed by ClusterRoleBinding \"operator\" of ClusterRole "
                       "\"operator\" to ServiceAccount \"op/tern-system\"");
    q.verb = "create";
    ASSERT_FALSE(rbac_allows(&pol, &OP, &q, why, sizeof why));
    ASSERT_EQ_STR(why, "");
    char *m = rbac_denial(&OP, &q);
    ASSERT_EQ_STR(m, "User \"system:serviceaccount:tern-system:op\" cannot create resource "
                     "\"pods\" in API group \"\" at the cluster scope");
    free(m);
    q.group = "tern.dev";
    q.resource = "agentsessions";
    q.subresource = "status";
    q.ns = "app";
    q.verb = "patch";
    m = rbac_denial(&OP, &q);
    ASSERT_EQ_STR(m, "User \"system:serviceaccount:tern-system:op\" cannot patch resource "
                     "\"agentsessions/status\" in API group \"tern.dev\" in the namespace \"app\"");
    free(m);
    struct rbac_request p = {.verb = "post", .path = "/x"};
    m = rbac_denial(&ALICE, &p);
    ASSERT_EQ_STR(m, "User \"alice\" cannot post path \"/x\"");
    free(m);
    cJSON_Delete(doc);
}

TEST(verbs_of_http_requests)
{
    ASSERT_EQ_STR(rbac_verb("GET", true, false), "get");
    ASSERT_EQ_STR(rbac_verb("GET", false, false), "list");
    ASSERT_EQ_STR(rbac_verb("GET", false, true), "watch");
    ASSERT_EQ_STR(rbac_verb("GET", true, true), "get"); /* as kube-apiserver: named = get */
    ASSERT_EQ_STR(rbac_verb("POST", false, false), "create");
    ASSERT_EQ_STR(rbac_verb("PUT", true, false), "update");
    ASSERT_EQ_STR(rbac_verb("PATCH", true, false), "patch");
    ASSERT_EQ_STR(rbac_verb("DELETE", true, false), "delete");
    ASSERT_EQ_STR(rbac_verb("DELETE", false, false), "deletecollection");
    ASSERT_TRUE(rbac_verb("OPTIONS", false, false) == NULL);
}

TEST(every_authenticated_user_may_review_its_own_access)
{
    load();
    ASSERT_TRUE(res(&ALICE, "create", "authorization.k8s.io", "selfsubjectaccessreviews", NULL,
                    NULL, NULL));
    ASSERT_FALSE(res(&ALICE, "list", "authorization.k8s.io", "selfsubjectaccessreviews", NULL,
                     NULL, NULL));
    ASSERT_FALSE(res(&ALICE, "create", "authorization.k8s.io", "subjectaccessreviews", NULL, NULL,
                     NULL));
    ASSERT_FALSE(res(&ANON, "create", "authorization.k8s.io", "selfsubjectaccessreviews", NULL,
                     NULL, NULL));
    cJSON_Delete(doc);
}
