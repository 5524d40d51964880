/* prices.c - the operator's price table. See prices.h. */
#include "controller/prices.h"

#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct prices {
    pthread_mutex_t mu;
    char *ns, *name, *where;
    int64_t ttl_s;
    int64_t read_at;     /* monotonic seconds of the last read, 0 = never */
    bool have;           /* table below is valid */
    struct price_table table;
    char *error;         /* why the last read failed, or NULL */
};

static int64_t mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec;
}

struct prices *prices_new(const char *ref, int64_t ttl_s)
{
    struct prices *p = xcalloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->ttl_s = ttl_s > 0 ? ttl_s : 30;
    const char *slash = ref ? strchr(ref, '/') : NULL;
    if (slash && slash > ref && slash[1]) {
        p->ns = xstrndup(ref, (size_t)(slash - ref));
        p->name = xstrdup(slash + 1);
        p->where = xasprintf("ConfigMap %s/%s", p->ns, p->name);
    }
    return p;
}

void prices_free(struct prices *p)
{
    if (!p)
        return;
    price_table_done(&p->table);
    free(p->ns);
    free(p->name);
    free(p->where);
    free(p->error);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

char *prices_entry_json(const struct price_table *t, const char *model)
{
    const struct price_entry *e = price_lookup(t, model);
    if (!e || !model)
        return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(cJSON_AddObjectToObject(o, "prices"), model);
    json_add_int64(m, "input", e->input);
    json_add_int64(m, "cachedInput", e->cached_input);
    json_add_int64(m, "output", e->output);
    char *s = json_print(o);
    cJSON_Delete(o);
    return s;
}

/* Reads the ConfigMap (the lock held). */
static void refresh(struct prices *p, struct kclient *kc)
{
    static const struct kgvr configmaps = {"", "v1", "configmaps"};
    cJSON *cm = NULL;
    struct kclient_err ke = {0};
    char *error = NULL;
    struct price_table t = {0};
    int r = kclient_get(kc, &configmaps, p->ns, p->name, &cm, &ke);
    if (r) {
        error = xasprintf("%s", r == TERN_ENOTFOUND ? "not found" : ke.e.msg);
    } else {
        const cJSON *v = json_get(json_get(cm, "data"), PRICES_KEY);
        struct tern_err e = {0};
        if (!cJSON_IsString(v))
            error = xasprintf("it has no key %s", PRICES_KEY);
        else if (strlen(v->valuestring) > TERN_JSON_MAX_BYTES ||
                 price_table_parse(v->valuestring, strlen(v->valuestring), &t, &e))
            error = xasprintf("%s: %s", PRICES_KEY, e.msg[0] ? e.msg : "too large");
    }
    cJSON_Delete(cm);
    p->read_at = mono_s();
    free(p->error);
    p->error = error;
    if (!error) {
        price_table_done(&p->table);
        p->table = t;
        p->have = true;
    } else {
        /* a table read before stays in use when the API is only down */
        price_table_done(&t);
        if (r == TERN_ENOTFOUND || r == 0) {
            price_table_done(&p->table);
            p->have = false;
        }
    }
}

void prices_lookup(struct prices *p, struct kclient *kc, const char *model, char **ret_json,
                   const char **ret_where, char **ret_error)
{
    *ret_json = NULL;
    *ret_error = NULL;
    *ret_where = p ? p->where : NULL;
    if (!p || !p->ns)
        return;
    pthread_mutex_lock(&p->mu);
    if (!p->read_at || mono_s() - p->read_at >= p->ttl_s)
        refresh(p, kc);
    if (p->have)
        *ret_json = prices_entry_json(&p->table, model);
    else if (p->error)
        *ret_error = xstrdup(p->error);
    pthread_mutex_unlock(&p->mu);
}
