/* bench/informer - informer memory per cached AgentSession-sized object and
 * time to list and cache 10,000 objects, against the in-process fake API
 * server (tests/support/fake_kube.c). Prints figures; asserts nothing.
 *
 *   build/bench/informer [N]      (default N = 10000)
 */
#include "../../tests/support/kube/fake_kube.c"

#include "base/mem.h"
#include "json/json.h"
#include "kube/informer.h"
#include "kube/kubeconfig.h"

#include <malloc.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define COLL "/apis/tern.dev/v1alpha1/namespaces/team-a/agentsessions"

/* A session as the operator sees it mid-run: full spec, status with
 * conditions, usage, a pending approval; about 2.5 kB of JSON. */
static cJSON *session(int i)
{
    char *s = xasprintf(
        "{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\","
        "\"metadata\":{\"name\":\"review-%05d\",\"namespace\":\"team-a\","
        "\"labels\":{\"app.kubernetes.io/managed-by\":\"tern\",\"team\":\"team-a\"},"
        "\"annotations\":{\"tern.dev/decided-by\":\"alice\"},\"finalizers\":[\"tern.dev/journal\"],"
        "\"managedFields\":[{\"manager\":\"kubectl\",\"operation\":\"Apply\",\"fieldsType\":\"FieldsV1\","
        "\"fieldsV1\":{\"f:spec\":{\"f:objective\":{},\"f:limits\":{}}}}]},"
        "\"spec\":{\"objective\":\"Review PR %d and propose fixes for the failing tests in the payment module\","
        "\"identity\":{\"serviceAccountName\":\"review-bot\"},"
        "\"context\":{\"text\":\"The CI run failed on test_refund_rounding; see the attached diff.\","
        "\"files\":[{\"configMapRef\":{\"name\":\"pr-%d-diff\"}}],\"references\":[\"https://example.com/pr/%d\"]},"
        "\"skills\":[{\"configMapRef\":{\"name\":\"review-skill\"}}],"
        "\"memory\":{\"configMapRef\":{\"name\":\"team-a-memory\"}},"
        "\"messages\":[\"also check the tests\",\"keep the public API unchanged\"],"
        "\"permissions\":{\"tools\":[\"exec_command\",\"read_file\",\"write_file\",\"list_files\"],"
        "\"requiresApproval\":[\"exec_command:git push*\",\"write_file:output/**\"],"
        "\"writablePaths\":[\"working/**\",\"output/**\"],\"networkAllowlist\":[]},"
        "\"limits\":{\"timeoutSeconds\":3600,\"maxModelTurns\":50,\"maxToolCalls\":200,"
        "\"maxTokens\":2000000,\"maxCostMicroUSD\":0,\"cpu\":\"1\",\"memory\":\"1Gi\"},"
        "\"model\":{\"name\":\"gpt-5.6-mini\",\"baseURL\":\"https://api.openai.com/v1\","
        "\"apiKeySecretRef\":{\"name\":\"openai\",\"key\":\"api-key\"}},"
        "\"sandbox\":{\"image\":\"ghcr.io/tern/tern-sandbox-python:0.1\",\"runtimeClassName\":\"gvisor\","
        "\"workspace\":{\"size\":\"5Gi\",\"storageClassName\":\"standard\"},\"idleSuspendSeconds\":600},"
        "\"approval\":{\"timeoutSeconds\":86400,\"onTimeout\":\"Deny\"},\"suspend\":false},"
        "\"status\":{\"phase\":\"WaitingForApproval\",\"observedGeneration\":3,"
        "\"conditions\":["
        "{\"type\":\"Ready\",\"status\":\"True\",\"observedGeneration\":3,\"lastTransitionTime\":\"2026-11-30T00:00:00Z\",\"reason\":\"Reconciled\",\"message\":\"\"},"
        "{\"type\":\"SandboxReady\",\"status\":\"True\",\"observedGeneration\":3,\"lastTransitionTime\":\"2026-11-30T00:00:00Z\",\"reason\":\"PodReady\",\"message\":\"\"},"
        "{\"type\":\"TurnRunning\",\"status\":\"False\",\"observedGeneration\":3,\"lastTransitionTime\":\"2026-11-30T00:01:00Z\",\"reason\":\"AwaitingApproval\",\"message\":\"\"},"
        "{\"type\":\"ApprovalPending\",\"status\":\"True\",\"observedGeneration\":3,\"lastTransitionTime\":\"2026-11-30T00:01:00Z\",\"reason\":\"ToolCall\",\"message\":\"exec_command: git push origin fix\"}],"
        "\"sandbox\":{\"pod\":\"review-%05d-sandbox\",\"address\":\"10.1.2.3:8080\",\"ready\":true},"
        "\"turn\":{\"number\":4,\"job\":\"review-%05d-t4\",\"attempt\":2},"
        "\"usage\":{\"modelTurns\":12,\"toolCalls\":31,\"promptTokens\":182734,\"completionTokens\":20311,\"costMicroUSD\":51234},"
        "\"pendingApproval\":{\"id\":\"ap-7f3c\",\"tool\":\"exec_command\",\"summary\":\"git push origin fix\",\"requestedAt\":\"2026-11-30T00:01:00Z\"},"
        "\"journal\":{\"lastSeq\":117},\"messagesProcessed\":1}}",
        i, i, i, i, i, i);
    cJSON *o = NULL;
    if (json_parse(s, strlen(s), &o, NULL))
        abort();
    free(s);
    return o;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    int n = 10000;
    if (argc > 1) {
        int64_t v;
        if (num_parse_range(argv[1], 1, 1000000, &v)) {
            fprintf(stderr, "usage: %s [N]\n", argv[0]);
            return 2;
        }
        n = (int)v;
    }
    struct fake_kube *fk = fake_kube_start();
    if (!fk)
        return 1;
    size_t json_bytes = 0;
    for (int i = 0; i < n; i++) {
        cJSON *o = session(i);
        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItem(o, "metadata"), "managedFields");
        char *s = json_print(o);
        json_bytes += strlen(s);
        free(s);
        cJSON_Delete(o);
        o = session(i);
        fake_kube_upsert(fk, COLL, o);
        cJSON_Delete(o);
    }
    char *doc = xasprintf("{\"current-context\":\"t\",\"contexts\":[{\"name\":\"t\",\"context\":"
                          "{\"cluster\":\"c\"}}],\"clusters\":[{\"name\":\"c\",\"cluster\":"
                          "{\"server\":\"%s\"}}]}",
                          fake_kube_url(fk));
    struct kubeconfig *cfg = NULL;
    if (kubeconfig_parse(doc, strlen(doc), NULL, NULL, &cfg, NULL))
        return 1;
    free(doc);
    malloc_trim(0);
    struct mallinfo2 m0 = mallinfo2();
    struct informer_opts o = {.gvr = {"tern.dev", "v1alpha1", "agentsessions"},
                              .namespace = "team-a", .page_size = 500, .watch_timeout_s = 300};
    struct informer *inf = informer_new(cfg, &o, NULL);
    double t0 = now_s(), c0 = cpu_s();
    informer_start(inf);
    if (informer_wait_synced(inf, 120000)) {
        fprintf(stderr, "not synced\n");
        return 1;
    }
    double t1 = now_s(), c1 = cpu_s();
    /* the informer is idle on its watch now; transient list buffers are freed */
    while (fake_kube_watchers(fk) < 1) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    struct mallinfo2 m1 = mallinfo2();
    size_t cached = informer_len(inf);
    double per = (double)(m1.uordblks - m0.uordblks) / (double)cached;
    printf("informer bench: %d AgentSession objects, %.0f bytes of JSON each "
           "(managedFields stripped as cached)\n",
           n, (double)json_bytes / n);
    printf("list+cache time:       %.3f s wall (%.0f objects/s, pages of 500)\n", t1 - t0,
           (double)cached / (t1 - t0));
    printf("cpu during list:       %.3f s (client and the in-process fake server together)\n",
           c1 - c0);
    printf("heap per cached object: %.0f bytes (%.1fx the JSON text)\n", per,
           per / ((double)json_bytes / n));
    printf("heap total for cache:   %.1f MiB\n", (double)(m1.uordblks - m0.uordblks) / 1048576.0);
    informer_free(inf);
    kubeconfig_free(cfg);
    fake_kube_free(fk);
    return 0;
}
