/* apievent.c - Event shape conversion. See apievent.h. */
#include "apievent.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* {events.k8s.io/v1 name, core/v1 name} */
static const char *const names[][2] = {
    {"apiVersion", "apiVersion"},
    {"kind", "kind"},
    {"metadata", "metadata"},
    {"eventTime", "eventTime"},
    {"series", "series"},
    {"reportingController", "reportingComponent"},
    {"reportingInstance", "reportingInstance"},
    {"action", "action"},
    {"reason", "reason"},
    {"regarding", "involvedObject"},
    {"related", "related"},
    {"note", "message"},
    {"type", "type"},
    {"deprecatedSource", "source"},
    {"deprecatedFirstTimestamp", "firstTimestamp"},
    {"deprecatedLastTimestamp", "lastTimestamp"},
    {"deprecatedCount", "count"},
};

/* {events.k8s.io/v1 label, core/v1 label} */
static const char *const labels[][2] = {
    {"metadata.name", "metadata.name"},
    {"metadata.namespace", "metadata.namespace"},
    {"regarding.kind", "involvedObject.kind"},
    {"regarding.namespace", "involvedObject.namespace"},
    {"regarding.name", "involvedObject.name"},
    {"regarding.uid", "involvedObject.uid"},
    {"regarding.apiVersion", "involvedObject.apiVersion"},
    {"regarding.resourceVersion", "involvedObject.resourceVersion"},
    {"regarding.fieldPath", "involvedObject.fieldPath"},
    {"reportingController", "reportingComponent"},
    {"reason", "reason"},
    {"type", "type"},
};

#define NNAMES (sizeof names / sizeof names[0])
#define NLABELS (sizeof labels / sizeof labels[0])

static const char *rename_to(const char *name, int from, int to)
{
    for (size_t i = 0; name && i < NNAMES; i++)
        if (strcmp(names[i][from], name) == 0)
            return names[i][to];
    return NULL;
}

static void set_string(cJSON *obj, const char *k, const char *v)
{
    if (cJSON_GetObjectItemCaseSensitive(obj, k))
        cJSON_ReplaceItemInObjectCaseSensitive(obj, k, cJSON_CreateString(v));
    else
        cJSON_AddStringToObject(obj, k, v);
}

/* Renames obj's top-level fields from shape `from` (0 v1, 1 core) to shape
 * `to`, dropping those outside the source shape. Keeps the order. */
static int convert(cJSON *obj, int from, int to, const char *api_version)
{
    if (!cJSON_IsObject(obj))
        return -EINVAL;
    cJSON *tmp = cJSON_CreateObject();
    while (obj->child) {
        cJSON *c = cJSON_DetachItemViaPointer(obj, obj->child);
        const char *name = rename_to(c->string, from, to);
        /* the parser refuses duplicate keys; a tree built otherwise keeps
         * the first of each name */
        if (name && !cJSON_GetObjectItemCaseSensitive(tmp, name))
            cJSON_AddItemToObject(tmp, name, c);
        else
            cJSON_Delete(c);
    }
    obj->child = tmp->child;
    tmp->child = NULL;
    cJSON_Delete(tmp);
    set_string(obj, "apiVersion", api_version);
    set_string(obj, "kind", "Event");
    return 0;
}

int apievent_to_v1(cJSON *obj)
{
    if (!cJSON_IsObject(obj))
        return -EINVAL;
    /* already served (the write paths reply with the object they were
     * given): only fields outside the v1 shape go */
    const cJSON *av = cJSON_GetObjectItemCaseSensitive(obj, "apiVersion");
    bool served = cJSON_IsString(av) && strcmp(av->valuestring, "events.k8s.io/v1") == 0;
    return convert(obj, served ? 0 : 1, 0, "events.k8s.io/v1");
}

int apievent_to_core(cJSON *obj)
{
    return convert(obj, 0, 1, "v1");
}

void apievent_fill_zero(cJSON *obj, int core)
{
    if (!cJSON_IsObject(obj))
        return;
    const char *nulls_v1[] = {"eventTime", "deprecatedFirstTimestamp", "deprecatedLastTimestamp"};
    const char *nulls_core[] = {"eventTime", "firstTimestamp", "lastTimestamp"};
    const char *const *nulls = core ? nulls_core : nulls_v1;
    for (size_t i = 0; i < 3; i++)
        if (!cJSON_GetObjectItemCaseSensitive(obj, nulls[i]))
            cJSON_AddNullToObject(obj, nulls[i]);
    const char *objs_v1[] = {"regarding", "deprecatedSource"};
    const char *objs_core[] = {"involvedObject", "source"};
    const char *const *objs = core ? objs_core : objs_v1;
    for (size_t i = 0; i < 2; i++)
        if (!cJSON_GetObjectItemCaseSensitive(obj, objs[i]))
            cJSON_AddObjectToObject(obj, objs[i]);
}

const char *apievent_field_to_core(const char *v1_field)
{
    for (size_t i = 0; v1_field && i < NLABELS; i++)
        if (strcmp(labels[i][0], v1_field) == 0)
            return labels[i][1];
    return NULL;
}
