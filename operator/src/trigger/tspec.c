/* tspec.c - AgentTrigger spec parsing and the sessions triggers create.
 * See tspec.h. */
#include "trigger/tspec.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"
#include "spec/session_spec.h"
#include "trigger/tmap.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tspec_policy_name(enum tspec_policy p)
{
    return p == TSPEC_FORBID ? "Forbid" : p == TSPEC_REPLACE ? "Replace" : "Allow";
}

static int check_fields(const cJSON *o, const char *path, const char *const *known,
                        struct tern_err *err)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, o)
    {
        bool ok = false;
        for (size_t i = 0; known[i]; i++)
            ok |= f->string && strcmp(f->string, known[i]) == 0;
        if (!ok)
            return err_set(err, TERN_EINVALID, "%s.%s: unknown field", path,
                           f->string ? f->string : "?");
    }
    return 0;
}

static bool dns_label(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  (c == '-' && i > 0 && i + 1 < n);
        if (!ok)
            return false;
    }
    return true;
}

static bool header_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

static int get_str(const cJSON *o, const char *path, const char *key, enum json_need need,
                   size_t max, char **ret, struct tern_err *err)
{
    const char *v = NULL;
    int r = json_get_string(o, path, key, need, &v, err);
    if (r || !v)
        return r;
    if (strlen(v) > max)
        return err_set(err, TERN_EINVALID, "%s.%s: must be no more than %zu characters", path,
                       key, max);
    *ret = xstrdup(v);
    return 0;
}

static int parse_filters(const cJSON *wh, struct tspec *t, struct tern_err *err)
{
    static const char *const ffields[] = {"header", "field", "values", NULL};
    const cJSON *arr = NULL;
    int r = json_get_array(wh, "spec.webhook", "filter", JSON_OPTIONAL, &arr, err);
    if (r || !arr)
        return r;
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n > TERN_TMAP_MAX_FILTERS)
        return err_set(err, TERN_EINVALID, "spec.webhook.filter: at most %d entries",
                       TERN_TMAP_MAX_FILTERS);
    t->webhook.filters = xcalloc(n ? n : 1, sizeof *t->webhook.filters);
    size_t i = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, arr)
    {
        char path[64];
        snprintf(path, sizeof path, "spec.webhook.filter[%zu]", i);
        struct tspec_filter *tf = &t->webhook.filters[i];
        t->webhook.nfilters = ++i;
        if (!cJSON_IsObject(f))
            return err_set(err, TERN_EINVALID, "%s: must be an object", path);
        if ((r = check_fields(f, path, ffields, err)))
            return r;
        const cJSON *h = json_get(f, "header"), *fl = json_get(f, "field");
        if ((h != NULL) == (fl != NULL))
            return err_set(err, TERN_EINVALID, "%s: set exactly one of header and field", path);
        tf->header = h != NULL;
        if ((r = get_str(f, path, h ? "header" : "field", JSON_REQUIRED, TERN_TMAP_MAX_PATH,
                         &tf->name, err)))
            return r;
        if (tf->header && !header_name_ok(tf->name))
            return err_set(err, TERN_EINVALID, "%s.header: not an HTTP header name", path);
        struct tern_err pe = {0};
        if (!tf->header && tmap_path_check(tf->name, &pe))
            return err_set(err, TERN_EINVALID, "%s.field: %s", path, pe.msg);
        const cJSON *vals = NULL;
        if ((r = json_get_array(f, path, "values", JSON_REQUIRED, &vals, err)))
            return r;
        size_t nv = (size_t)cJSON_GetArraySize(vals);
        if (nv == 0 || nv > TERN_TMAP_MAX_VALUES)
            return err_set(err, TERN_EINVALID, "%s.values: 1..%d entries", path,
                           TERN_TMAP_MAX_VALUES);
        tf->values = xcalloc(nv, sizeof *tf->values);
        const cJSON *v;
        cJSON_ArrayForEach(v, vals)
        {
            if (!cJSON_IsString(v) || strlen(v->valuestring) > TERN_TMAP_MAX_VALUE)
                return err_set(err, TERN_EINVALID,
                               "%s.values[%zu]: must be a string of at most %d characters", path,
                               tf->nvalues, TERN_TMAP_MAX_VALUE);
            tf->values[tf->nvalues++] = xstrdup(v->valuestring);
        }
    }
    return 0;
}

static int parse_webhook(const cJSON *spec, struct tspec *t, struct tern_err *err)
{
    static const char *const wfields[] = {"secretRef", "deliveryHeader", "filter", NULL};
    static const char *const sfields[] = {"name", "key", NULL};
    const cJSON *wh = NULL, *sr = NULL;
    int r = json_get_object(spec, "spec", "webhook", JSON_OPTIONAL, &wh, err);
    if (r || !wh)
        return r;
    t->webhook.set = true;
    if ((r = check_fields(wh, "spec.webhook", wfields, err)) ||
        (r = json_get_object(wh, "spec.webhook", "secretRef", JSON_REQUIRED, &sr, err)) ||
        (r = check_fields(sr, "spec.webhook.secretRef", sfields, err)) ||
        (r = get_str(sr, "spec.webhook.secretRef", "name", JSON_REQUIRED, 253,
                     &t->webhook.secret_name, err)) ||
        (r = get_str(sr, "spec.webhook.secretRef", "key", JSON_REQUIRED, 253,
                     &t->webhook.secret_key, err)) ||
        (r = get_str(wh, "spec.webhook", "deliveryHeader", JSON_OPTIONAL, 64,
                     &t->webhook.delivery_header, err)))
        return r;
    if (!*t->webhook.secret_name || !*t->webhook.secret_key)
        return err_set(err, TERN_EINVALID, "spec.webhook.secretRef: name and key must be set");
    if (!t->webhook.delivery_header)
        t->webhook.delivery_header = xstrdup(TSPEC_DEFAULT_DELIVERY_HEADER);
    if (!header_name_ok(t->webhook.delivery_header))
        return err_set(err, TERN_EINVALID, "spec.webhook.deliveryHeader: not an HTTP header name");
    return parse_filters(wh, t, err);
}

static int parse_schedule(const cJSON *spec, struct tspec *t, struct tern_err *err)
{
    static const char *const fields[] = {"cron", "timeZone", "concurrencyPolicy",
                                         "startingDeadlineSeconds", NULL};
    const cJSON *sc = NULL;
    const char *pol = NULL;
    int r = json_get_object(spec, "spec", "schedule", JSON_OPTIONAL, &sc, err);
    if (r || !sc)
        return r;
    t->schedule.set = true;
    t->schedule.starting_deadline = -1;
    if ((r = check_fields(sc, "spec.schedule", fields, err)) ||
        (r = get_str(sc, "spec.schedule", "cron", JSON_REQUIRED, TERN_CRON_MAX_TEXT,
                     &t->schedule.cron_text, err)) ||
        (r = cron_parse(t->schedule.cron_text, &t->schedule.cron, err)) ||
        (r = get_str(sc, "spec.schedule", "timeZone", JSON_OPTIONAL, TERN_TZ_MAX_NAME,
                     &t->schedule.time_zone, err)) ||
        (r = json_get_string(sc, "spec.schedule", "concurrencyPolicy", JSON_OPTIONAL, &pol,
                             err)) ||
        (r = json_get_int_range(sc, "spec.schedule", "startingDeadlineSeconds", JSON_OPTIONAL, 0,
                                SESSION_MAX_SECONDS, &t->schedule.starting_deadline, err)))
        return r;
    if (!t->schedule.time_zone)
        t->schedule.time_zone = xstrdup("UTC");
    if (!tzwin_name_valid(t->schedule.time_zone))
        return err_set(err, TERN_EINVALID, "spec.schedule.timeZone: not a time zone name");
    if (!pol || strcmp(pol, "Allow") == 0)
        t->schedule.policy = TSPEC_ALLOW;
    else if (strcmp(pol, "Forbid") == 0)
        t->schedule.policy = TSPEC_FORBID;
    else if (strcmp(pol, "Replace") == 0)
        t->schedule.policy = TSPEC_REPLACE;
    else
        return err_set(err, TERN_EINVALID,
                       "spec.schedule.concurrencyPolicy: must be Allow, Forbid or Replace");
    return 0;
}

int tspec_parse(const cJSON *obj, struct tspec **ret, struct tern_err *err)
{
    static const char *const fields[] = {"templateRef",
                                         "objective",
                                         "context",
                                         "suspend",
                                         "successfulSessionsHistoryLimit",
                                         "failedSessionsHistoryLimit",
                                         "schedule",
                                         "webhook",
                                         NULL};
    struct tspec *t = xcalloc(1, sizeof *t);
    const cJSON *spec = NULL, *tr = NULL, *meta = json_get(obj, "metadata");
    struct tern_err pe = {0};
    const char *v;
    int r;
    t->success_history = TSPEC_DEFAULT_SUCCESS_HISTORY;
    t->failed_history = TSPEC_DEFAULT_FAILED_HISTORY;
    if (!cJSON_IsObject(obj)) {
        r = err_set(err, TERN_EINVALID, "AgentTrigger must be a JSON object");
        goto out;
    }
    v = NULL;
    if ((r = json_get_string(obj, "", "kind", JSON_OPTIONAL, &v, err)))
        goto out;
    if (v && strcmp(v, "AgentTrigger") != 0) {
        r = err_set(err, TERN_EINVALID, "kind: must be AgentTrigger");
        goto out;
    }
    if (meta) {
        if ((r = get_str(meta, "metadata", "name", JSON_OPTIONAL, 253, &t->name, err)) ||
            (r = get_str(meta, "metadata", "namespace", JSON_OPTIONAL, 253, &t->namespace, err)) ||
            (r = get_str(meta, "metadata", "uid", JSON_OPTIONAL, 128, &t->uid, err)))
            goto out;
        if (t->name && !dns_label(t->name, TERN_TRIGGER_MAX_NAME)) {
            r = err_set(err, TERN_EINVALID,
                        "metadata.name: must be a DNS label of at most %d characters",
                        TERN_TRIGGER_MAX_NAME);
            goto out;
        }
    }
    if ((r = json_get_object(obj, "", "spec", JSON_REQUIRED, &spec, err)) ||
        (r = check_fields(spec, "spec", fields, err)) ||
        (r = json_get_object(spec, "spec", "templateRef", JSON_REQUIRED, &tr, err)) ||
        (r = get_str(tr, "spec.templateRef", "name", JSON_REQUIRED, 253, &t->template_name,
                     err)) ||
        (r = get_str(spec, "spec", "objective", JSON_REQUIRED, TERN_TMAP_MAX_TEMPLATE,
                     &t->objective, err)) ||
        (r = get_str(spec, "spec", "context", JSON_OPTIONAL, TERN_TMAP_MAX_TEMPLATE, &t->context,
                     err)) ||
        (r = json_get_bool(spec, "spec", "suspend", JSON_OPTIONAL, &t->suspend, err)) ||
        (r = json_get_int_range(spec, "spec", "successfulSessionsHistoryLimit", JSON_OPTIONAL, 0,
                                100, &t->success_history, err)) ||
        (r = json_get_int_range(spec, "spec", "failedSessionsHistoryLimit", JSON_OPTIONAL, 0, 100,
                                &t->failed_history, err)))
        goto out;
    if (!*t->objective) {
        r = err_set(err, TERN_EINVALID, "spec.objective: must not be empty");
        goto out;
    }
    if (tmap_template_check(t->objective, &pe)) {
        r = err_set(err, TERN_EINVALID, "spec.objective: %s", pe.msg);
        goto out;
    }
    if (t->context && tmap_template_check(t->context, &pe)) {
        r = err_set(err, TERN_EINVALID, "spec.context: %s", pe.msg);
        goto out;
    }
    if ((r = parse_schedule(spec, t, err)) || (r = parse_webhook(spec, t, err)))
        goto out;
    if (!t->schedule.set && !t->webhook.set) {
        r = err_set(err, TERN_EINVALID, "spec: set schedule, webhook or both");
        goto out;
    }
    *ret = t;
    t = NULL;
out:
    tspec_free(t);
    return r;
}

void tspec_free(struct tspec *t)
{
    if (!t)
        return;
    free(t->name);
    free(t->namespace);
    free(t->uid);
    free(t->template_name);
    free(t->objective);
    free(t->context);
    free(t->schedule.cron_text);
    free(t->schedule.time_zone);
    free(t->webhook.secret_name);
    free(t->webhook.secret_key);
    free(t->webhook.delivery_header);
    for (size_t i = 0; i < t->webhook.nfilters; i++) {
        free(t->webhook.filters[i].name);
        for (size_t j = 0; j < t->webhook.filters[i].nvalues; j++)
            free(t->webhook.filters[i].values[j]);
        free(t->webhook.filters[i].values);
    }
    free(t->webhook.filters);
    free(t);
}

char *tspec_webhook_session_name(const char *trigger, const char *delivery_id)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char *in = xasprintf("webhook:%s", delivery_id);
    EVP_Digest(in, strlen(in), md, &mdlen, EVP_sha256(), NULL);
    free(in);
    char hex[17];
    for (int i = 0; i < 8; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return xasprintf("%s-%s", trigger, hex);
}

char *tspec_schedule_session_name(const char *trigger, int64_t slot)
{
    return xasprintf("%s-%lld", trigger, (long long)(slot / 60));
}

cJSON *tspec_session(const struct tspec *t, const char *name, const char *objective,
                     const char *context, const char *source, const char *ann_key,
                     const char *ann_value)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "apiVersion", "tern.dev/v1alpha1");
    json_add_string(o, "kind", "AgentSession");
    cJSON *meta = cJSON_AddObjectToObject(o, "metadata");
    json_add_string(meta, "name", name);
    if (t->namespace)
        json_add_string(meta, "namespace", t->namespace);
    cJSON *labels = cJSON_AddObjectToObject(meta, "labels");
    json_add_string(labels, TSPEC_LABEL_TRIGGER, t->name ? t->name : "");
    json_add_string(labels, TSPEC_LABEL_SOURCE, source);
    if (ann_key) {
        cJSON *ann = cJSON_AddObjectToObject(meta, "annotations");
        json_add_string(ann, ann_key, ann_value);
    }
    if (t->uid) {
        cJSON *refs = cJSON_AddArrayToObject(meta, "ownerReferences");
        cJSON *ref = cJSON_CreateObject();
        json_add_string(ref, "apiVersion", "tern.dev/v1alpha1");
        json_add_string(ref, "kind", "AgentTrigger");
        json_add_string(ref, "name", t->name ? t->name : "");
        json_add_string(ref, "uid", t->uid);
        cJSON_AddItemToArray(refs, ref);
    }
    cJSON *spec = cJSON_AddObjectToObject(o, "spec");
    json_add_string(spec, "objective", objective);
    cJSON *tr = cJSON_AddObjectToObject(spec, "templateRef");
    json_add_string(tr, "name", t->template_name);
    if (context && *context) {
        cJSON *ctx = cJSON_AddObjectToObject(spec, "context");
        json_add_string(ctx, "text", context);
    }
    return o;
}

bool tspec_filter_match(const struct tspec *t, const cJSON *payload,
                        const char *(*header)(void *ctx, const char *name), void *hctx,
                        const char **ret_failed)
{
    for (size_t i = 0; i < t->webhook.nfilters; i++) {
        const struct tspec_filter *f = &t->webhook.filters[i];
        struct buf b;
        buf_init(&b, TERN_TMAP_MAX_VALUE + 1);
        bool have = false;
        if (f->header) {
            const char *h = header ? header(hctx, f->name) : NULL;
            have = h && buf_puts(&b, h) == 0;
        } else {
            const cJSON *v = tmap_lookup(payload, f->name);
            have = v && tmap_scalar(v, &b) == 0;
        }
        bool ok = false;
        for (size_t j = 0; have && j < f->nvalues && !ok; j++)
            ok = strcmp(buf_str(&b), f->values[j]) == 0;
        buf_done(&b);
        if (!ok) {
            if (ret_failed)
                *ret_failed = f->name;
            return false;
        }
    }
    return true;
}
