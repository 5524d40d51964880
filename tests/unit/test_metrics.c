/* Unit tests for metrics/ (Prometheus text) and controller/conditions. */
#include "harness.h"

#include "controller/conditions.h"
#include "json/json.h"
#include "metrics/metrics.h"

#include <errno.h>
#include <stdlib.h>

TEST(metrics_render_text_format)
{
    struct metrics *m = metrics_new();
    ASSERT_OK(metrics_declare(m, "tern_reconciles_total", METRICS_COUNTER, "Reconciles.", NULL, 0));
    ASSERT_EQ_INT(metrics_declare(m, "tern_reconciles_total", METRICS_COUNTER, "x", NULL, 0),
                  -EEXIST);
    ASSERT_OK(metrics_declare(m, "tern_sessions", METRICS_GAUGE, "Sessions by phase.", NULL, 0));
    double b[] = {0.1, 1};
    ASSERT_OK(metrics_declare(m, "tern_reconcile_seconds", METRICS_HISTOGRAM, "Latency.", b, 2));
    metrics_add(m, "tern_reconciles_total", "", 1);
    metrics_add(m, "tern_reconciles_total", "", 2);
    char *l = metrics_labels("phase", "Run\"ning", NULL);
    ASSERT_EQ_STR(l, "phase=\"Run\\\"ning\"");
    metrics_set(m, "tern_sessions", l, 7);
    free(l);
    metrics_observe(m, "tern_reconcile_seconds", "", 0.05);
    metrics_observe(m, "tern_reconcile_seconds", "", 0.5);
    metrics_observe(m, "tern_reconcile_seconds", "", 5);
    char *t = metrics_render(m);
    ASSERT_CONTAINS(t, "# TYPE tern_reconciles_total counter\ntern_reconciles_total 3\n");
    ASSERT_CONTAINS(t, "tern_sessions{phase=\"Run\\\"ning\"} 7\n");
    ASSERT_CONTAINS(t, "tern_reconcile_seconds_bucket{le=\"0.1\"} 1\n");
    ASSERT_CONTAINS(t, "tern_reconcile_seconds_bucket{le=\"1\"} 2\n");
    ASSERT_CONTAINS(t, "tern_reconcile_seconds_bucket{le=\"+Inf\"} 3\n");
    ASSERT_CONTAINS(t, "tern_reconcile_seconds_sum 5.55\n");
    ASSERT_CONTAINS(t, "tern_reconcile_seconds_count 3\n");
    free(t);
    metrics_zero(m, "tern_sessions");
    t = metrics_render(m);
    ASSERT_CONTAINS(t, "tern_sessions{phase=\"Run\\\"ning\"} 0\n");
    free(t);
    metrics_free(m);
}

TEST(conditions_transition_time_moves_only_on_status_change)
{
    cJSON *list = cJSON_CreateArray();
    conditions_set(list, "Ready", COND_FALSE, "Provisioning", "waiting", 1, "2026-01-01T00:00:00Z");
    conditions_set(list, "Ready", COND_FALSE, "Provisioning", "still", 2, "2026-01-01T00:01:00Z");
    const cJSON *c = conditions_find(list, "Ready");
    ASSERT_EQ_STR(json_get(c, "lastTransitionTime")->valuestring, "2026-01-01T00:00:00Z");
    ASSERT_EQ_STR(json_get(c, "message")->valuestring, "still");
    int64_t g = 0;
    ASSERT_OK(json_get_int64(c, "", "observedGeneration", JSON_REQUIRED, &g, NULL));
    ASSERT_EQ_INT(g, 2);
    ASSERT_FALSE(conditions_is_true(list, "Ready"));
    conditions_set(list, "Ready", COND_TRUE, "Running", "", 2, "2026-01-01T00:02:00Z");
    ASSERT_EQ_STR(json_get(c, "lastTransitionTime")->valuestring, "2026-01-01T00:02:00Z");
    ASSERT_TRUE(conditions_is_true(list, "Ready"));
    ASSERT_EQ_INT(cJSON_GetArraySize(list), 1);
    conditions_set(list, "Completed", COND_FALSE, "NotDone", "", 2, "2026-01-01T00:02:00Z");
    ASSERT_EQ_INT(cJSON_GetArraySize(list), 2);
    cJSON_Delete(list);
}

TEST(conditions_reason_pattern)
{
    ASSERT_TRUE(conditions_reason_valid("InvalidSpec"));
    ASSERT_TRUE(conditions_reason_valid("a_b:c,d9"));
    ASSERT_FALSE(conditions_reason_valid(""));
    ASSERT_FALSE(conditions_reason_valid("9x"));
    ASSERT_FALSE(conditions_reason_valid("bad reason"));
    ASSERT_FALSE(conditions_reason_valid("trailing:"));
    char t[32];
    ASSERT_EQ_STR(conditions_time(0, t), "1970-01-01T00:00:00Z");
}
