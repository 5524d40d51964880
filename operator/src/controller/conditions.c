/* conditions.c - metav1.Condition lists. See conditions.h. */
#include "conditions.h"

#include "json/json.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COND_MESSAGE_MAX (32u << 10)

static const char *const status_names[] = {"False", "True", "Unknown"};

const cJSON *conditions_find(const cJSON *list, const char *type)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, list)
    {
        const cJSON *t = json_get(c, "type");
        if (cJSON_IsString(t) && strcmp(t->valuestring, type) == 0)
            return c;
    }
    return NULL;
}

bool conditions_is_true(const cJSON *list, const char *type)
{
    const cJSON *s = json_get(conditions_find(list, type), "status");
    return cJSON_IsString(s) && strcmp(s->valuestring, "True") == 0;
}

bool conditions_reason_valid(const char *r)
{
    size_t n = strlen(r);
    if (n == 0 || n > 1024)
        return false;
    if (!((r[0] >= 'A' && r[0] <= 'Z') || (r[0] >= 'a' && r[0] <= 'z')))
        return false;
    for (size_t i = 1; i < n; i++) {
        char c = r[i];
        bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!(alnum || c == '_' || ((c == ',' || c == ':') && i + 1 < n)))
            return false;
    }
    return true;
}

static void put(cJSON *obj, const char *key, cJSON *item)
{
    if (json_get(obj, key))
        cJSON_ReplaceItemInObjectCaseSensitive(obj, key, item);
    else
        cJSON_AddItemToObject(obj, key, item);
}

void conditions_set(cJSON *list, const char *type, enum cond_status status, const char *reason,
                    const char *message, int64_t observed_generation, const char *now)
{
    cJSON *c = (cJSON *)conditions_find(list, type);
    const char *st = status_names[status];
    bool changed = true;
    if (c) {
        const cJSON *old = json_get(c, "status");
        changed = !cJSON_IsString(old) || strcmp(old->valuestring, st) != 0;
    } else {
        c = cJSON_CreateObject();
        json_add_string(c, "type", type);
        cJSON_AddItemToArray(list, c);
    }
    put(c, "status", cJSON_CreateString(st));
    put(c, "observedGeneration", json_new_int64(observed_generation));
    if (changed || !json_get(c, "lastTransitionTime"))
        put(c, "lastTransitionTime", cJSON_CreateString(now));
    put(c, "reason", cJSON_CreateString(reason));
    char *m = NULL;
    if (strlen(message) > COND_MESSAGE_MAX) {
        m = malloc(COND_MESSAGE_MAX + 1);
        if (!m)
            abort();
        memcpy(m, message, COND_MESSAGE_MAX);
        m[COND_MESSAGE_MAX] = '\0';
    }
    put(c, "message", cJSON_CreateString(m ? m : message));
    free(m);
}

const char *conditions_time(int64_t t, char out[32])
{
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return out;
}
