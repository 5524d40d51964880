/* Unit tests for controller/observe: children's status as the decision
 * sees it (pure). */
#include "harness.h"

#include "controller/observe.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

static cJSON *parse(const char *s)
{
    cJSON *o = NULL;
    if (json_parse(s, strlen(s), &o, NULL))
        th_fail(__FILE__, __LINE__, "bad test JSON: %s", s);
    return o;
}

TEST(pod_ready_ip_hash_and_stuck_reasons)
{
    cJSON *p = parse("{\"metadata\":{\"annotations\":{\"tern.dev/sandbox-hash\":\"abc\"}},"
                     "\"status\":{\"phase\":\"Running\",\"podIP\":\"127.1.0.2\",\"conditions\":"
                     "[{\"type\":\"Ready\",\"status\":\"True\"}]}}");
    struct observed_pod o;
    observe_pod(p, &o);
    ASSERT_TRUE(o.exists && o.ready);
    ASSERT_EQ_STR(o.ip, "127.1.0.2");
    ASSERT_EQ_STR(o.sandbox_hash, "abc");
    ASSERT_NULL(o.waiting_reason);
    ASSERT_NULL(o.unschedulable);
    cJSON_Delete(p);

    /* a worse reason wins over ContainerCreating; CrashLoopBackOff takes
     * the last termination's message */
    p = parse("{\"status\":{\"phase\":\"Pending\",\"containerStatuses\":["
              "{\"name\":\"a\",\"state\":{\"waiting\":{\"reason\":\"ContainerCreating\"}}},"
              "{\"name\":\"b\",\"state\":{\"waiting\":{\"reason\":\"CrashLoopBackOff\"}},"
              "\"lastState\":{\"terminated\":{\"exitCode\":2,\"message\":\"boom\"}}}]}}");
    observe_pod(p, &o);
    ASSERT_EQ_STR(o.waiting_reason, "CrashLoopBackOff");
    ASSERT_EQ_STR(o.waiting_message, "boom");
    cJSON_Delete(p);

    p = parse("{\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":\"PodScheduled\","
              "\"status\":\"False\",\"reason\":\"Unschedulable\",\"message\":\"0/1 nodes are "
              "available: 1 Insufficient cpu.\"}]}}");
    observe_pod(p, &o);
    ASSERT_EQ_STR(o.unschedulable, "0/1 nodes are available: 1 Insufficient cpu.");
    cJSON_Delete(p);
    observe_pod(NULL, &o);
    ASSERT_FALSE(o.exists);
}

TEST(job_and_its_attempts)
{
    cJSON *j = parse("{\"metadata\":{\"labels\":{\"tern.dev/turn\":\"3\"}},\"status\":{"
                     "\"failed\":2,\"conditions\":[{\"type\":\"Failed\",\"status\":\"True\","
                     "\"reason\":\"BackoffLimitExceeded\",\"message\":\"Job has reached the "
                     "specified backoff limit\"}]}}");
    struct observed_job o;
    observe_job(j, &o);
    ASSERT_TRUE(o.exists && o.failed && !o.complete);
    ASSERT_EQ_INT(o.turn, 3);
    ASSERT_EQ_INT(o.failed_pods, 2);
    ASSERT_EQ_STR(o.failed_reason, "BackoffLimitExceeded");
    ASSERT_EQ_INT(o.last_exit_code, -1);
    /* the latest failed attempt wins, whatever the order */
    cJSON *p2 = parse("{\"status\":{\"phase\":\"Failed\",\"containerStatuses\":[{\"state\":{"
                      "\"terminated\":{\"exitCode\":75,\"message\":\"ModelUnreachable: second\","
                      "\"finishedAt\":\"2026-11-30T00:00:20Z\"}}}]}}");
    cJSON *p1 = parse("{\"status\":{\"phase\":\"Failed\",\"containerStatuses\":[{\"state\":{"
                      "\"terminated\":{\"exitCode\":75,\"message\":\"ModelUnreachable: first\","
                      "\"finishedAt\":\"2026-11-30T00:00:10Z\"}}}]}}");
    cJSON *run = parse("{\"status\":{\"phase\":\"Pending\",\"containerStatuses\":[{\"state\":{"
                       "\"waiting\":{\"reason\":\"CreateContainerConfigError\",\"message\":"
                       "\"secret \\\"openai\\\" not found\"}}}]}}");
    observe_job_pod(p2, &o);
    observe_job_pod(p1, &o);
    observe_job_pod(run, &o);
    ASSERT_EQ_INT(o.last_exit_code, 75);
    ASSERT_EQ_STR(o.last_message, "ModelUnreachable: second");
    ASSERT_EQ_INT(o.last_failed_at, (int64_t)observe_time("2026-11-30T00:00:20Z"));
    ASSERT_EQ_STR(o.pod_waiting_reason, "CreateContainerConfigError");
    ASSERT_CONTAINS(o.pod_waiting_message, "openai");
    ASSERT_TRUE(observe_time("2026-11-30T00:00:00.5Z") - observe_time("2026-11-30T00:00:00Z") >
                0.49);
    cJSON_Delete(p1);
    cJSON_Delete(p2);
    cJSON_Delete(run);
    cJSON_Delete(j);
}
