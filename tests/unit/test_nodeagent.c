/* Unit tests: tern-node's pure parts, the kubelet endpoint's request parser
 * (nodeagent/kubeletapi.h) and the local-path provisioner's decision
 * (nodeagent/localpv.h). */
#include "harness.h"

#include "base/mem.h"
#include "devctl/kobj.h"
#include "json/json.h"
#include "nodeagent/kubeletapi.h"
#include "nodeagent/localpv.h"

#include <stdlib.h>
#include <string.h>

static int parse(const char *head, struct kubeletapi_req *r)
{
    struct tern_err e = {0};
    return kubeletapi_parse(head, strlen(head), r, &e);
}

TEST(parses_what_kube_apiserver_sends_for_logs)
{
    struct kubeletapi_req r;
    ASSERT_OK(parse("GET /containerLogs/team-a/demo-t1-x2k9p/runner?follow=true&tailLines=10"
                    "&limitBytes=500&timestamps=true HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                    &r));
    ASSERT_EQ_STR(r.method, "GET");
    ASSERT_EQ_INT(r.route, KUBELETAPI_LOGS);
    ASSERT_EQ_STR(r.ns, "team-a");
    ASSERT_EQ_STR(r.pod, "demo-t1-x2k9p");
    ASSERT_EQ_STR(r.container, "runner");
    ASSERT_TRUE(r.follow);
    ASSERT_FALSE(r.previous);
    ASSERT_EQ_INT(r.tail_lines, 10);
    ASSERT_EQ_INT(r.limit_bytes, 500);
    ASSERT_OK(parse("GET /containerLogs/ns/p/c?previous=true HTTP/1.1\r\n\r\n", &r));
    ASSERT_TRUE(r.previous);
    ASSERT_FALSE(r.follow);
    ASSERT_EQ_INT(r.tail_lines, -1);
    ASSERT_EQ_INT(r.limit_bytes, -1);
    ASSERT_OK(parse("GET /containerLogs/n%2Ds/p/c HTTP/1.0\n\n", &r)); /* percent-encoded */
    ASSERT_EQ_STR(r.ns, "n-s");
    ASSERT_OK(parse("GET /healthz HTTP/1.1\r\n\r\n", &r));
    ASSERT_EQ_INT(r.route, KUBELETAPI_HEALTHZ);
}

TEST(refuses_what_it_does_not_serve_or_cannot_trust)
{
    struct kubeletapi_req r;
    ASSERT_EQ_INT(parse("GET /exec/ns/p/c HTTP/1.1\r\n\r\n", &r), TERN_ENOTFOUND);
    ASSERT_EQ_INT(parse("GET /containerLogs/ns/p HTTP/1.1\r\n\r\n", &r), TERN_ENOTFOUND);
    ASSERT_EQ_INT(parse("GET /containerLogs/ns/p/c/x HTTP/1.1\r\n\r\n", &r), TERN_ENOTFOUND);
    /* names are DNS names: no traversal, no upper case, no NUL */
    ASSERT_EQ_INT(parse("GET /containerLogs/../p/c HTTP/1.1\r\n\r\n", &r), TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /containerLogs/ns/%2e%2e/c HTTP/1.1\r\n\r\n", &r), TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /containerLogs/ns/p%00x/c HTTP/1.1\r\n\r\n", &r), TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /containerLogs/NS/p/c HTTP/1.1\r\n\r\n", &r), TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /containerLogs/ns/p/c%2 HTTP/1.1\r\n\r\n", &r), TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /containerLogs//p/c HTTP/1.1\r\n\r\n", &r), TERN_EINVALID);
    /* numbers are numbers */
    ASSERT_EQ_INT(parse("GET /containerLogs/ns/p/c?tailLines=-1 HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /containerLogs/ns/p/c?limitBytes=0 HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /containerLogs/ns/p/c?tailLines=9x HTTP/1.1\r\n\r\n", &r),
                  TERN_EINVALID);
    /* the request line */
    ASSERT_EQ_INT(parse("GET /healthz\r\n\r\n", &r), TERN_EINVALID);
    ASSERT_EQ_INT(parse("GET /healthz HTTP/2.0\r\n\r\n", &r), TERN_EINVALID);
    ASSERT_EQ_INT(parse("WAYTOOLONGMETHOD /healthz HTTP/1.1\r\n\r\n", &r), TERN_EINVALID);
    ASSERT_EQ_INT(parse("no newline at all", &r), TERN_EINVALID);
}

static cJSON *obj(const char *text)
{
    cJSON *o = NULL;
    struct tern_err e = {0};
    if (json_parse(text, strlen(text), &o, &e) != 0)
        th_fail(__FILE__, __LINE__, "bad JSON in test: %s", e.msg);
    return o;
}

TEST(provisions_claims_of_its_class_only)
{
    cJSON *classes = obj("[{\"metadata\":{\"name\":\"tern-local\"},\"provisioner\":"
                         "\"tern.dev/local-path\",\"reclaimPolicy\":\"Retain\"},"
                         "{\"metadata\":{\"name\":\"other\"},\"provisioner\":\"ebs\"}]");
    cJSON *claims = obj(
        "[{\"metadata\":{\"name\":\"ws\",\"namespace\":\"a\",\"uid\":\"u1\"},"
        "\"spec\":{\"storageClassName\":\"tern-local\",\"accessModes\":[\"ReadWriteOnce\"],"
        "\"resources\":{\"requests\":{\"storage\":\"5Gi\"}}},\"status\":{\"phase\":\"Pending\"}},"
        /* another provisioner's class */
        "{\"metadata\":{\"name\":\"x\",\"namespace\":\"a\",\"uid\":\"u2\"},"
        "\"spec\":{\"storageClassName\":\"other\"},\"status\":{\"phase\":\"Pending\"}},"
        /* already bound */
        "{\"metadata\":{\"name\":\"y\",\"namespace\":\"a\",\"uid\":\"u3\"},"
        "\"spec\":{\"storageClassName\":\"tern-local\",\"volumeName\":\"pvc-u3\"},"
        "\"status\":{\"phase\":\"Bound\"}},"
        /* being deleted */
        "{\"metadata\":{\"name\":\"z\",\"namespace\":\"a\",\"uid\":\"u4\","
        "\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
        "\"spec\":{\"storageClassName\":\"tern-local\"},\"status\":{\"phase\":\"Pending\"}},"
        /* no class, but the PV controller named us */
        "{\"metadata\":{\"name\":\"w\",\"namespace\":\"b\",\"uid\":\"u5\",\"annotations\":"
        "{\"volume.kubernetes.io/storage-provisioner\":\"tern.dev/local-path\"}},"
        "\"spec\":{},\"status\":{\"phase\":\"Pending\"}},"
        /* its PV exists already (a previous pass) */
        "{\"metadata\":{\"name\":\"v\",\"namespace\":\"b\",\"uid\":\"u6\"},"
        "\"spec\":{\"storageClassName\":\"tern-local\"},\"status\":{\"phase\":\"Pending\"}}]");
    cJSON *pvs = obj("[{\"metadata\":{\"name\":\"pvc-u6\"}}]");
    struct localpv_cfg cfg = {.root = "/var/tern/volumes"};
    struct localpv_actions a;
    localpv_decide(&cfg, classes, claims, pvs, &a);
    ASSERT_EQ_INT(cJSON_GetArraySize(a.create), 2);
    ASSERT_EQ_INT(cJSON_GetArraySize(a.remove), 0);
    const cJSON *pv = cJSON_GetArrayItem(a.create, 0);
    ASSERT_EQ_STR(kobj_str(pv, "metadata.name"), "pvc-u1");
    ASSERT_EQ_STR(kobj_str(pv, "spec.hostPath.path"), "/var/tern/volumes/pvc-u1");
    ASSERT_EQ_STR(kobj_str(pv, "spec.capacity.storage"), "5Gi");
    ASSERT_EQ_STR(kobj_str(pv, "spec.claimRef.uid"), "u1");
    ASSERT_EQ_STR(kobj_str(pv, "spec.claimRef.namespace"), "a");
    ASSERT_EQ_STR(kobj_str(pv, "spec.persistentVolumeReclaimPolicy"), "Retain");
    ASSERT_EQ_STR(kobj_str(pv, "spec.storageClassName"), "tern-local");
    pv = cJSON_GetArrayItem(a.create, 1);
    ASSERT_EQ_STR(kobj_str(pv, "metadata.name"), "pvc-u5");
    ASSERT_EQ_STR(kobj_str(pv, "spec.persistentVolumeReclaimPolicy"), "Delete");
    ASSERT_EQ_STR(cJSON_GetArrayItem(kobj_at(pv, "spec.accessModes"), 0)->valuestring,
                  "ReadWriteOnce");
    localpv_actions_done(&a);
    cJSON_Delete(classes);
    cJSON_Delete(claims);
    cJSON_Delete(pvs);
}

TEST(reclaims_only_its_own_released_volumes_under_its_root)
{
    cJSON *pvs = obj(
        "[{\"metadata\":{\"name\":\"pvc-a\",\"annotations\":{\"pv.kubernetes.io/provisioned-by\":"
        "\"tern.dev/local-path\"}},\"spec\":{\"persistentVolumeReclaimPolicy\":\"Delete\","
        "\"hostPath\":{\"path\":\"/v/pvc-a\"}},\"status\":{\"phase\":\"Released\"}},"
        /* Retain: kept */
        "{\"metadata\":{\"name\":\"pvc-b\",\"annotations\":{\"pv.kubernetes.io/provisioned-by\":"
        "\"tern.dev/local-path\"}},\"spec\":{\"persistentVolumeReclaimPolicy\":\"Retain\","
        "\"hostPath\":{\"path\":\"/v/pvc-b\"}},\"status\":{\"phase\":\"Released\"}},"
        /* someone else's */
        "{\"metadata\":{\"name\":\"pvc-c\"},\"spec\":{\"persistentVolumeReclaimPolicy\":"
        "\"Delete\",\"hostPath\":{\"path\":\"/v/pvc-c\"}},\"status\":{\"phase\":\"Released\"}},"
        /* still bound */
        "{\"metadata\":{\"name\":\"pvc-d\",\"annotations\":{\"pv.kubernetes.io/provisioned-by\":"
        "\"tern.dev/local-path\"}},\"spec\":{\"persistentVolumeReclaimPolicy\":\"Delete\","
        "\"hostPath\":{\"path\":\"/v/pvc-d\"}},\"status\":{\"phase\":\"Bound\"}},"
        /* ours by annotation, but its path is outside the root: the PV goes,
         * the directory is not touched */
        "{\"metadata\":{\"name\":\"pvc-e\",\"annotations\":{\"pv.kubernetes.io/provisioned-by\":"
        "\"tern.dev/local-path\"}},\"spec\":{\"hostPath\":{\"path\":\"/etc\"}},"
        "\"status\":{\"phase\":\"Failed\"}},"
        "{\"metadata\":{\"name\":\"pvc-f\",\"annotations\":{\"pv.kubernetes.io/provisioned-by\":"
        "\"tern.dev/local-path\"}},\"spec\":{\"hostPath\":{\"path\":\"/v/../etc\"}},"
        "\"status\":{\"phase\":\"Released\"}}]");
    struct localpv_cfg cfg = {.root = "/v"};
    struct localpv_actions a;
    localpv_decide(&cfg, NULL, NULL, pvs, &a);
    ASSERT_EQ_INT(cJSON_GetArraySize(a.create), 0);
    ASSERT_EQ_INT(cJSON_GetArraySize(a.remove), 3);
    ASSERT_EQ_INT(a.ndirs, 3);
    ASSERT_EQ_STR(cJSON_GetArrayItem(a.remove, 0)->valuestring, "pvc-a");
    ASSERT_EQ_STR(a.dirs[0], "/v/pvc-a");
    ASSERT_EQ_STR(cJSON_GetArrayItem(a.remove, 1)->valuestring, "pvc-e");
    ASSERT_NULL(a.dirs[1]);
    ASSERT_EQ_STR(cJSON_GetArrayItem(a.remove, 2)->valuestring, "pvc-f");
    ASSERT_NULL(a.dirs[2]);
    localpv_actions_done(&a);
    cJSON_Delete(pvs);
}

/* The caches keep only what localpv_trim_* leave: deciding over them must
 * give what deciding over the whole objects gives, and the handlers'
 * filters must let through every object the decision acts on. */
TEST(decides_the_same_over_what_the_caches_keep)
{
    const char *claims_text =
        "[{\"metadata\":{\"name\":\"ws\",\"namespace\":\"a\",\"uid\":\"u1\","
        "\"resourceVersion\":\"7\",\"labels\":{\"tern.dev/session\":\"s\"},"
        "\"annotations\":{\"volume.kubernetes.io/storage-provisioner\":\"tern.dev/local-path\","
        "\"other\":\"x\"},\"ownerReferences\":[{\"uid\":\"o\",\"name\":\"s\"}],"
        "\"managedFields\":[{\"manager\":\"tern-operator\"}]},"
        "\"spec\":{\"accessModes\":[\"ReadWriteMany\"],\"volumeMode\":\"Block\","
        "\"resources\":{\"requests\":{\"storage\":\"3Gi\"},\"limits\":{\"storage\":\"4Gi\"}}},"
        "\"status\":{\"phase\":\"Pending\"}},"
        "{\"metadata\":{\"name\":\"cls\",\"namespace\":\"a\",\"uid\":\"u2\"},"
        "\"spec\":{\"storageClassName\":\"tern-local\"},\"status\":{\"phase\":\"Pending\"}},"
        "{\"metadata\":{\"name\":\"bound\",\"namespace\":\"a\",\"uid\":\"u3\"},"
        "\"spec\":{\"storageClassName\":\"tern-local\",\"volumeName\":\"pvc-u3\"},"
        "\"status\":{\"phase\":\"Bound\"}}]";
    const char *pvs_text =
        "[{\"metadata\":{\"name\":\"pvc-r\",\"resourceVersion\":\"9\",\"annotations\":"
        "{\"pv.kubernetes.io/provisioned-by\":\"tern.dev/local-path\",\"y\":\"z\"},"
        "\"managedFields\":[{\"manager\":\"tern-node\"}]},"
        "\"spec\":{\"persistentVolumeReclaimPolicy\":\"Delete\",\"capacity\":{\"storage\":\"1Gi\"},"
        "\"hostPath\":{\"path\":\"/v/pvc-r\",\"type\":\"DirectoryOrCreate\"},"
        "\"claimRef\":{\"namespace\":\"a\",\"name\":\"gone\",\"uid\":\"u9\"}},"
        "\"status\":{\"phase\":\"Released\"}},"
        "{\"metadata\":{\"name\":\"pvc-u3\",\"annotations\":"
        "{\"pv.kubernetes.io/provisioned-by\":\"tern.dev/local-path\"}},"
        "\"spec\":{\"hostPath\":{\"path\":\"/v/pvc-u3\"}},\"status\":{\"phase\":\"Bound\"}}]";
    cJSON *classes = obj("[{\"metadata\":{\"name\":\"tern-local\"},\"provisioner\":"
                         "\"tern.dev/local-path\"}]");
    cJSON *claims = obj(claims_text), *pvs = obj(pvs_text);
    cJSON *tclaims = obj(claims_text), *tpvs = obj(pvs_text);
    cJSON *it;
    cJSON_ArrayForEach(it, tclaims) localpv_trim_claim(it);
    cJSON_ArrayForEach(it, tpvs) localpv_trim_volume(it);
    ASSERT_NULL(kobj_at(cJSON_GetArrayItem(tclaims, 0), "metadata.managedFields"));
    ASSERT_NULL(kobj_at(cJSON_GetArrayItem(tclaims, 0), "metadata.labels"));
    ASSERT_NULL(json_get(kobj_at(cJSON_GetArrayItem(tclaims, 0), "metadata.annotations"),
                         "other"));
    ASSERT_NULL(kobj_at(cJSON_GetArrayItem(tpvs, 0), "spec.capacity"));

    struct localpv_cfg cfg = {.root = "/v"};
    struct localpv_actions whole, kept;
    localpv_decide(&cfg, classes, claims, pvs, &whole);
    localpv_decide(&cfg, classes, tclaims, tpvs, &kept);
    ASSERT_EQ_INT(cJSON_GetArraySize(whole.create), 2);
    ASSERT_EQ_INT(cJSON_GetArraySize(whole.remove), 1);
    ASSERT_TRUE(json_equal(whole.create, kept.create));
    ASSERT_TRUE(json_equal(whole.remove, kept.remove));
    ASSERT_EQ_INT(kept.ndirs, 1);
    ASSERT_EQ_STR(kept.dirs[0], "/v/pvc-r");
    ASSERT_EQ_STR(kobj_str(cJSON_GetArrayItem(kept.create, 0), "spec.volumeMode"), "Block");

    /* the filters: the two claims it provisions pass, the bound one not;
     * the released PV passes, the bound one not */
    ASSERT_TRUE(localpv_claim_wants_volume(cJSON_GetArrayItem(tclaims, 0)));
    ASSERT_TRUE(localpv_claim_wants_volume(cJSON_GetArrayItem(tclaims, 1)));
    ASSERT_FALSE(localpv_claim_wants_volume(cJSON_GetArrayItem(tclaims, 2)));
    ASSERT_TRUE(localpv_volume_wants_reclaim(cJSON_GetArrayItem(tpvs, 0)));
    ASSERT_FALSE(localpv_volume_wants_reclaim(cJSON_GetArrayItem(tpvs, 1)));
    localpv_actions_done(&whole);
    localpv_actions_done(&kept);
    cJSON_Delete(classes);
    cJSON_Delete(claims);
    cJSON_Delete(pvs);
    cJSON_Delete(tclaims);
    cJSON_Delete(tpvs);
}
