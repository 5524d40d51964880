/* libFuzzer target: the RBAC decision over arbitrary stored objects (tern-dev
 * does not validate RBAC objects beyond their JSON shape, so rules, refs and
 * subjects of any type reach rbac_allows). The input is a JSON object with
 * roles, rolebindings, clusterroles, clusterrolebindings arrays; a set of
 * requests is decided for a few users. Nothing may crash or leak, and a
 * decision must not depend on the reason buffer's size. */
#include "apiserver/rbac.h"
#include "json/json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const struct rbac_user USERS[] = {
    {"system:serviceaccount:ns:sa", {"system:serviceaccounts", "system:serviceaccounts:ns",
                                     "system:authenticated"}, 3},
    {"alice", {"system:authenticated", "devs"}, 2},
    {"", {0}, 0},
};

static const struct rbac_request REQS[] = {
    {"get", true, "", "pods", NULL, "ns", "p", "/api/v1/namespaces/ns/pods/p"},
    {"list", true, "tern.dev", "agentsessions", NULL, NULL, NULL, "/apis/tern.dev/v1alpha1/x"},
    {"update", true, "tern.dev", "agentsessions", "finalizers", "ns", "s", "/x"},
    {"watch", true, "", "", "", "", "", ""},
    {"get", false, NULL, NULL, NULL, NULL, NULL, "/metrics"},
    {"get", false, NULL, NULL, NULL, NULL, NULL, "/api"},
    {"post", false, NULL, NULL, NULL, NULL, NULL, ""},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    cJSON *doc = NULL;
    if (json_parse((const char *)data, size, &doc, NULL))
        return 0;
    struct rbac_policy p = {json_get(doc, "roles"), json_get(doc, "rolebindings"),
                            json_get(doc, "clusterroles"), json_get(doc, "clusterrolebindings")};
    for (size_t u = 0; u < sizeof USERS / sizeof USERS[0]; u++) {
        for (size_t r = 0; r < sizeof REQS / sizeof REQS[0]; r++) {
            char big[1024], small[8];
            bool a = rbac_allows(&p, &USERS[u], &REQS[r], big, sizeof big);
            bool b = rbac_allows(&p, &USERS[u], &REQS[r], small, sizeof small);
            if (a != b || strlen(small) >= sizeof small)
                abort();
            free(rbac_denial(&USERS[u], &REQS[r]));
        }
    }
    cJSON_Delete(doc);
    return 0;
}
