/* Unit tests for apiserver/apievent: the core/v1 <-> events.k8s.io/v1 Event
 * conversion (both directions, round trips, legacy core events) and the
 * Table rows both Event APIs print from it. */
#include "harness.h"

#include "apiserver/apievent.h"
#include "apiserver/apires.h"
#include "apiserver/apitable.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct apires *find(struct apires_table *t, const char *group);

static cJSON *J(const char *s)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    if (json_parse(s, strlen(s), &j, &e))
        th_fail(__FILE__, __LINE__, "bad test JSON %s: %s", s, e.msg);
    return j;
}

/* Compares trees as printed, keys sorted (conversion keeps the order of
 * the input; apiVersion/kind may be appended). */
static void sort_keys(cJSON *o)
{
    if (!o)
        return;
    for (cJSON *c = o->child; c; c = c->next)
        sort_keys(c);
    if (!cJSON_IsObject(o))
        return;
    /* insertion sort of the child list */
    cJSON *sorted = NULL;
    while (o->child) {
        cJSON *c = cJSON_DetachItemViaPointer(o, o->child);
        cJSON **pp = &sorted;
        while (*pp && strcmp((*pp)->string, c->string) < 0)
            pp = &(*pp)->next;
        c->next = *pp;
        *pp = c;
    }
    cJSON *prev = NULL;
    for (cJSON *c = sorted; c; c = c->next) {
        c->prev = prev;
        prev = c;
    }
    if (sorted)
        sorted->prev = prev;
    o->child = sorted;
}

#define EXPECT_JSON(got, want) expect_json(__LINE__, got, want)
static void expect_json(int line, cJSON *got, const char *want)
{
    cJSON *w = J(want), *g = json_dup(got);
    sort_keys(w);
    sort_keys(g);
    char *a = json_print(g), *b = json_print(w);
    if (strcmp(a, b) != 0)
        th_fail(__FILE__, line, "got %s, expected %s", a, b);
    free(a);
    free(b);
    cJSON_Delete(w);
    cJSON_Delete(g);
}

/* What tern-operator's recorder writes, with a series and a related object. */
static const char V1[] =
    "{\"apiVersion\":\"events.k8s.io/v1\",\"kind\":\"Event\","
    "\"metadata\":{\"name\":\"s1.17a\",\"namespace\":\"team-a\",\"uid\":\"u-1\"},"
    "\"eventTime\":\"2026-11-30T03:00:00.123456Z\",\"reportingController\":\"tern.dev/operator\","
    "\"reportingInstance\":\"tern-operator-0\",\"action\":\"Reconcile\",\"reason\":\"TurnFailed\","
    "\"type\":\"Warning\",\"note\":\"model 500\",\"regarding\":{\"apiVersion\":\"tern.dev/v1alpha1\","
    "\"kind\":\"AgentSession\",\"namespace\":\"team-a\",\"name\":\"s1\",\"uid\":\"su\"},"
    "\"related\":{\"kind\":\"Job\",\"name\":\"s1-turn-3\"},"
    "\"series\":{\"count\":4,\"lastObservedTime\":\"2026-11-30T03:05:00.000001Z\"}}";

static const char CORE[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"Event\","
    "\"metadata\":{\"name\":\"s1.17a\",\"namespace\":\"team-a\",\"uid\":\"u-1\"},"
    "\"eventTime\":\"2026-11-30T03:00:00.123456Z\",\"reportingComponent\":\"tern.dev/operator\","
    "\"reportingInstance\":\"tern-operator-0\",\"action\":\"Reconcile\",\"reason\":\"TurnFailed\","
    "\"type\":\"Warning\",\"message\":\"model 500\",\"involvedObject\":{\"apiVersion\":"
    "\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\",\"namespace\":\"team-a\",\"name\":\"s1\","
    "\"uid\":\"su\"},\"related\":{\"kind\":\"Job\",\"name\":\"s1-turn-3\"},"
    "\"series\":{\"count\":4,\"lastObservedTime\":\"2026-11-30T03:05:00.000001Z\"}}";

TEST(v1_to_core_renames_every_field)
{
    cJSON *o = J(V1);
    ASSERT_OK(apievent_to_core(o));
    EXPECT_JSON(o, CORE);
    cJSON_Delete(o);
}

TEST(core_to_v1_renames_every_field)
{
    cJSON *o = J(CORE);
    ASSERT_OK(apievent_to_v1(o));
    EXPECT_JSON(o, V1);
    /* already served: a second conversion changes nothing */
    ASSERT_OK(apievent_to_v1(o));
    EXPECT_JSON(o, V1);
    cJSON_Delete(o);
}

TEST(round_trips_both_ways)
{
    cJSON *o = J(V1);
    ASSERT_OK(apievent_to_core(o));
    ASSERT_OK(apievent_to_v1(o));
    EXPECT_JSON(o, V1);
    cJSON_Delete(o);
    o = J(CORE);
    ASSERT_OK(apievent_to_v1(o));
    ASSERT_OK(apievent_to_core(o));
    EXPECT_JSON(o, CORE);
    cJSON_Delete(o);
}

TEST(legacy_core_event_without_event_time)
{
    /* what client-go's old recorder (kubelet) writes through core/v1 */
    cJSON *o = J("{\"apiVersion\":\"v1\",\"kind\":\"Event\",\"metadata\":{\"name\":\"p.1\","
                 "\"namespace\":\"default\"},\"involvedObject\":{\"kind\":\"Pod\",\"name\":\"p\","
                 "\"namespace\":\"default\",\"fieldPath\":\"spec.containers{c}\"},"
                 "\"reason\":\"Pulled\",\"message\":\"pulled\",\"source\":{\"component\":"
                 "\"kubelet\",\"host\":\"node-1\"},\"firstTimestamp\":\"2026-11-30T01:00:00Z\","
                 "\"lastTimestamp\":\"2026-11-30T02:00:00Z\",\"count\":7,\"type\":\"Normal\"}");
    ASSERT_OK(apievent_to_v1(o));
    EXPECT_JSON(o, "{\"apiVersion\":\"events.k8s.io/v1\",\"kind\":\"Event\",\"metadata\":{"
                   "\"name\":\"p.1\",\"namespace\":\"default\"},\"regarding\":{\"kind\":\"Pod\","
                   "\"name\":\"p\",\"namespace\":\"default\",\"fieldPath\":"
                   "\"spec.containers{c}\"},\"reason\":\"Pulled\",\"note\":\"pulled\","
                   "\"deprecatedSource\":{\"component\":\"kubelet\",\"host\":\"node-1\"},"
                   "\"deprecatedFirstTimestamp\":\"2026-11-30T01:00:00Z\","
                   "\"deprecatedLastTimestamp\":\"2026-11-30T02:00:00Z\","
                   "\"deprecatedCount\":7,\"type\":\"Normal\"}");
    ASSERT_NULL(json_get(o, "eventTime"));
    ASSERT_OK(apievent_to_core(o));
    ASSERT_EQ_STR(json_get(json_get(o, "source"), "host")->valuestring, "node-1");
    ASSERT_EQ_STR(json_get(o, "apiVersion")->valuestring, "v1");
    cJSON_Delete(o);
}

TEST(legacy_event_table_row)
{
    struct apires_registry reg;
    apires_registry_init(&reg);
    struct apires_table *t = apires_get(&reg);
    time_t now = 0;
    ASSERT_OK(apitable_parse_time("2026-11-30T03:00:00Z", &now));
    cJSON *o = J("{\"apiVersion\":\"v1\",\"kind\":\"Event\",\"metadata\":{\"name\":\"p.1\"},"
                 "\"involvedObject\":{\"kind\":\"Pod\",\"name\":\"p\",\"fieldPath\":"
                 "\"spec.containers{c}\"},\"reason\":\"Pulled\",\"message\":\"pulled\","
                 "\"source\":{\"component\":\"kubelet\",\"host\":\"node-1\"},"
                 "\"firstTimestamp\":\"2026-11-30T01:00:00Z\",\"lastTimestamp\":"
                 "\"2026-11-30T02:00:00Z\",\"count\":7,\"type\":\"Normal\"}");
    cJSON *tab = apitable_build(find(t, ""), &o, 1, APITABLE_NONE, NULL, now);
    char *cells = json_print(json_get(cJSON_GetArrayItem(json_get(tab, "rows"), 0), "cells"));
    ASSERT_EQ_STR(cells, "[\"60m\",\"Normal\",\"Pulled\",\"pod/p\",\"spec.containers{c}\","
                         "\"kubelet, node-1\",\"pulled\",\"120m\",7,\"p.1\"]");
    free(cells);
    cJSON_Delete(tab);
    cJSON_Delete(o);
    apires_put(&reg, t);
    apires_registry_done(&reg);
}

TEST(fields_of_the_other_shape_are_dropped_and_non_objects_refused)
{
    cJSON *o = J("{\"apiVersion\":\"events.k8s.io/v1\",\"note\":\"n\",\"message\":\"m\","
                 "\"involvedObject\":{},\"spec\":1}");
    ASSERT_OK(apievent_to_core(o));
    EXPECT_JSON(o, "{\"apiVersion\":\"v1\",\"kind\":\"Event\",\"message\":\"n\"}");
    cJSON_Delete(o);
    o = J("{\"note\":\"n\",\"message\":\"m\",\"count\":\"x\"}");
    ASSERT_OK(apievent_to_v1(o));
    EXPECT_JSON(o, "{\"apiVersion\":\"events.k8s.io/v1\",\"kind\":\"Event\",\"note\":\"m\","
                   "\"deprecatedCount\":\"x\"}");
    cJSON_Delete(o);
    o = J("[1]");
    ASSERT_EQ_INT(apievent_to_v1(o), -EINVAL);
    ASSERT_EQ_INT(apievent_to_core(o), -EINVAL);
    ASSERT_EQ_INT(apievent_to_core(NULL), -EINVAL);
    cJSON_Delete(o);
}

TEST(field_selector_labels)
{
    ASSERT_EQ_STR(apievent_field_to_core("regarding.name"), "involvedObject.name");
    ASSERT_EQ_STR(apievent_field_to_core("regarding.uid"), "involvedObject.uid");
    ASSERT_EQ_STR(apievent_field_to_core("reportingController"), "reportingComponent");
    ASSERT_EQ_STR(apievent_field_to_core("reason"), "reason");
    ASSERT_EQ_STR(apievent_field_to_core("metadata.namespace"), "metadata.namespace");
    ASSERT_NULL(apievent_field_to_core("involvedObject.name"));
    ASSERT_NULL(apievent_field_to_core("note"));
    ASSERT_NULL(apievent_field_to_core(NULL));
}

static const struct apires *find(struct apires_table *t, const char *group)
{
    const struct apires *r = apires_find(t, group, "v1", "events");
    if (!r)
        th_fail(__FILE__, __LINE__, "no events in group %s", group);
    return r;
}

TEST(both_apis_share_the_core_store_and_table_columns)
{
    struct apires_registry reg;
    apires_registry_init(&reg);
    struct apires_table *t = apires_get(&reg);
    const struct apires *core = find(t, ""), *v1 = find(t, "events.k8s.io");
    ASSERT_EQ_STR(v1->prefix, core->prefix);
    ASSERT_TRUE(v1->core_event);
    ASSERT_TRUE(!core->core_event);
    time_t now = 0;
    ASSERT_OK(apitable_parse_time("2026-11-30T03:06:00Z", &now));
    cJSON *o = J(V1), *c = J(CORE);
    cJSON *tv = apitable_build(v1, &o, 1, APITABLE_OBJECT, "5", now);
    cJSON *tc = apitable_build(core, &c, 1, APITABLE_NONE, "5", now);
    char *want = NULL;
    for (int i = 0; i < 2; i++) {
        cJSON *tab = i ? tc : tv;
        const cJSON *cols = json_get(tab, "columnDefinitions");
        ASSERT_EQ_INT(cJSON_GetArraySize(cols), 10);
        char names[256] = "";
        for (const cJSON *col = cols->child; col; col = col->next) {
            size_t l = strlen(names);
            int64_t prio = -1;
            ASSERT_OK(json_item_int64(json_get(col, "priority"), &prio));
            snprintf(names + l, sizeof(names) - l, "%s%s/%lld", l ? "," : "",
                     json_get(col, "name")->valuestring, (long long)prio);
        }
        ASSERT_EQ_STR(names, "Last Seen/0,Type/0,Reason/0,Object/0,Subobject/1,Source/1,"
                             "Message/0,First Seen/1,Count/1,Name/1");
        const cJSON *cells = json_get(cJSON_GetArrayItem(json_get(tab, "rows"), 0), "cells");
        char *s = json_print(cells);
        if (!want)
            want = s;
        else {
            ASSERT_EQ_STR(s, want);
            free(s);
        }
    }
    /* last seen from series.lastObservedTime (03:05:00 -> 60s), first seen
     * from eventTime, count from the series */
    ASSERT_EQ_STR(want, "[\"60s\",\"Warning\",\"TurnFailed\",\"agentsession/s1\",\"\","
                        "\"tern.dev/operator, tern-operator-0\",\"model 500\",\"6m\",4,"
                        "\"s1.17a\"]");
    free(want);
    /* the row's object stays in the served shape */
    const cJSON *obj = json_get(cJSON_GetArrayItem(json_get(tv, "rows"), 0), "object");
    ASSERT_EQ_STR(json_get(obj, "note")->valuestring, "model 500");
    cJSON_Delete(tv);
    cJSON_Delete(tc);
    cJSON_Delete(o);
    cJSON_Delete(c);
    apires_put(&reg, t);
    apires_registry_done(&reg);
}
