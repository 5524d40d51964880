/* kobj.c - helpers over Kubernetes objects as cJSON trees. See kobj.h. */
#include "kobj.h"

#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Walks path; with create, makes missing objects. Returns the parent object
 * and the last key (pointing into path). */
static cJSON *walk(cJSON *o, const char *path, bool create, const char **ret_last)
{
    const char *p = path;
    for (;;) {
        const char *dot = strchr(p, '.');
        if (!dot) {
            *ret_last = p;
            return o;
        }
        if (!cJSON_IsObject(o))
            return NULL;
        char key[128];
        size_t n = (size_t)(dot - p);
        if (n >= sizeof key)
            return NULL;
        memcpy(key, p, n);
        key[n] = 0;
        cJSON *next = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!cJSON_IsObject(next)) {
            if (!create)
                return NULL;
            if (next)
                cJSON_DeleteItemFromObjectCaseSensitive(o, key);
            next = cJSON_AddObjectToObject(o, key);
            if (!next)
                abort();
        }
        o = next;
        p = dot + 1;
    }
}

const cJSON *kobj_at(const cJSON *o, const char *path)
{
    const char *last;
    cJSON *parent = walk((cJSON *)o, path, false, &last);
    if (!cJSON_IsObject(parent))
        return NULL;
    return cJSON_GetObjectItemCaseSensitive(parent, last);
}

const char *kobj_str(const cJSON *o, const char *path)
{
    const cJSON *it = kobj_at(o, path);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

int64_t kobj_int(const cJSON *o, const char *path, int64_t def)
{
    const cJSON *it = kobj_at(o, path);
    int64_t v;
    if (!it || cJSON_IsString(it) || json_item_int64(it, &v) != 0)
        return def;
    return v;
}

bool kobj_bool(const cJSON *o, const char *path, bool def)
{
    const cJSON *it = kobj_at(o, path);
    if (!cJSON_IsBool(it))
        return def;
    return cJSON_IsTrue(it);
}

bool kobj_has(const cJSON *o, const char *path)
{
    const cJSON *it = kobj_at(o, path);
    return it && !cJSON_IsNull(it);
}

cJSON *kobj_obj(cJSON *o, const char *path)
{
    const char *last;
    cJSON *parent = walk(o, path, true, &last);
    cJSON *it = cJSON_GetObjectItemCaseSensitive(parent, last);
    if (cJSON_IsObject(it))
        return it;
    if (it)
        cJSON_DeleteItemFromObjectCaseSensitive(parent, last);
    it = cJSON_AddObjectToObject(parent, last);
    if (!it)
        abort();
    return it;
}

void kobj_set_item(cJSON *o, const char *path, cJSON *item)
{
    const char *last;
    cJSON *parent = walk(o, path, true, &last);
    if (cJSON_GetObjectItemCaseSensitive(parent, last))
        cJSON_ReplaceItemInObjectCaseSensitive(parent, last, item);
    else
        cJSON_AddItemToObject(parent, last, item);
}

void kobj_set_str(cJSON *o, const char *path, const char *v)
{
    cJSON *it = cJSON_CreateString(v);
    if (!it)
        abort();
    kobj_set_item(o, path, it);
}

void kobj_set_int(cJSON *o, const char *path, int64_t v)
{
    char d[21];
    cJSON *it = cJSON_CreateRaw(num_fmt_i64(v, d));
    if (!it)
        abort();
    kobj_set_item(o, path, it);
}

void kobj_set_bool(cJSON *o, const char *path, bool v)
{
    cJSON *it = cJSON_CreateBool(v);
    if (!it)
        abort();
    kobj_set_item(o, path, it);
}

void kobj_del(cJSON *o, const char *path)
{
    const char *last;
    cJSON *parent = walk(o, path, false, &last);
    if (cJSON_IsObject(parent))
        cJSON_DeleteItemFromObjectCaseSensitive(parent, last);
}

const char *kobj_label(const cJSON *o, const char *key)
{
    const cJSON *labels = kobj_at(o, "metadata.labels");
    const cJSON *it = json_get(labels, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

bool kobj_has_finalizer(const cJSON *o, const char *f)
{
    const cJSON *fs = kobj_at(o, "metadata.finalizers");
    const cJSON *it;
    cJSON_ArrayForEach(it, fs)
    {
        if (cJSON_IsString(it) && strcmp(it->valuestring, f) == 0)
            return true;
    }
    return false;
}

void kobj_add_finalizer(cJSON *o, const char *f)
{
    if (kobj_has_finalizer(o, f))
        return;
    cJSON *md = kobj_obj(o, "metadata");
    cJSON *fs = cJSON_GetObjectItemCaseSensitive(md, "finalizers");
    if (!cJSON_IsArray(fs)) {
        cJSON_DeleteItemFromObjectCaseSensitive(md, "finalizers");
        fs = cJSON_AddArrayToObject(md, "finalizers");
    }
    cJSON_AddItemToArray(fs, cJSON_CreateString(f));
}

bool kobj_remove_finalizer(cJSON *o, const char *f)
{
    cJSON *md = (cJSON *)kobj_at(o, "metadata");
    cJSON *fs = cJSON_GetObjectItemCaseSensitive(md, "finalizers");
    bool removed = false;
    int i = 0;
    cJSON *it = fs ? fs->child : NULL;
    while (it) {
        cJSON *next = it->next;
        if (cJSON_IsString(it) && strcmp(it->valuestring, f) == 0) {
            cJSON_DeleteItemFromArray(fs, i);
            removed = true;
        } else {
            i++;
        }
        it = next;
    }
    if (fs && cJSON_GetArraySize(fs) == 0)
        cJSON_DeleteItemFromObjectCaseSensitive(md, "finalizers");
    return removed;
}

bool kobj_deleting(const cJSON *o)
{
    return kobj_str(o, "metadata.deletionTimestamp") != NULL;
}

const cJSON *kobj_controller_ref(const cJSON *o)
{
    const cJSON *refs = kobj_at(o, "metadata.ownerReferences");
    const cJSON *r;
    cJSON_ArrayForEach(r, refs)
    {
        if (kobj_bool(r, "controller", false))
            return r;
    }
    return NULL;
}

bool kobj_has_owner_uid(const cJSON *o, const char *uid)
{
    const cJSON *refs = kobj_at(o, "metadata.ownerReferences");
    const cJSON *r;
    cJSON_ArrayForEach(r, refs)
    {
        const char *u = kobj_str(r, "uid");
        if (u && uid && strcmp(u, uid) == 0)
            return true;
    }
    return false;
}

cJSON *kobj_owner_ref(const cJSON *owner, bool controller, bool block)
{
    cJSON *r = cJSON_CreateObject();
    const char *av = kobj_str(owner, "apiVersion"), *kind = kobj_str(owner, "kind");
    json_add_string(r, "apiVersion", av ? av : "");
    json_add_string(r, "kind", kind ? kind : "");
    const char *name = kobj_str(owner, "metadata.name"), *uid = kobj_str(owner, "metadata.uid");
    json_add_string(r, "name", name ? name : "");
    json_add_string(r, "uid", uid ? uid : "");
    if (controller)
        cJSON_AddBoolToObject(r, "controller", 1);
    if (block)
        cJSON_AddBoolToObject(r, "blockOwnerDeletion", 1);
    return r;
}

char *kobj_fmt_time(int64_t t, char out[32])
{
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return out;
}

static int digits(const char *s, int n, int *ret)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        v = v * 10 + (s[i] - '0');
    }
    *ret = v;
    return 0;
}

int kobj_parse_time(const char *s, int64_t *ret)
{
    if (!s || strlen(s) < 20)
        return -EINVAL;
    int Y, M, D, h, m, sec;
    if (digits(s, 4, &Y) || s[4] != '-' || digits(s + 5, 2, &M) || s[7] != '-' ||
        digits(s + 8, 2, &D) || (s[10] != 'T' && s[10] != 't') || digits(s + 11, 2, &h) ||
        s[13] != ':' || digits(s + 14, 2, &m) || s[16] != ':' || digits(s + 17, 2, &sec))
        return -EINVAL;
    if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
        return -EINVAL;
    const char *p = s + 19;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return -EINVAL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    int off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (strlen(p) != 6 || digits(p + 1, 2, &oh) || p[3] != ':' || digits(p + 4, 2, &om))
            return -EINVAL;
        off = (oh * 60 + om) * 60 * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return -EINVAL;
    }
    if (*p)
        return -EINVAL;
    struct tm tm = {.tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D,
                    .tm_hour = h, .tm_min = m, .tm_sec = sec};
    *ret = (int64_t)timegm(&tm) - off;
    return 0;
}

int64_t kobj_time(const cJSON *o, const char *path, int64_t def)
{
    int64_t t;
    if (kobj_parse_time(kobj_str(o, path), &t) != 0)
        return def;
    return t;
}

const cJSON *kobj_cond(const cJSON *o, const char *type)
{
    const cJSON *cs = kobj_at(o, "status.conditions");
    const cJSON *c;
    cJSON_ArrayForEach(c, cs)
    {
        const char *t = kobj_str(c, "type");
        if (t && strcmp(t, type) == 0)
            return c;
    }
    return NULL;
}

bool kobj_cond_true(const cJSON *o, const char *type)
{
    const char *s = kobj_str(kobj_cond(o, type), "status");
    return s && strcmp(s, "True") == 0;
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

bool kobj_set_cond(cJSON *o, const char *type, const char *status, const char *reason,
                   const char *message, int64_t now)
{
    cJSON *st = kobj_obj(o, "status");
    cJSON *cs = cJSON_GetObjectItemCaseSensitive(st, "conditions");
    if (!cJSON_IsArray(cs)) {
        cJSON_DeleteItemFromObjectCaseSensitive(st, "conditions");
        cs = cJSON_AddArrayToObject(st, "conditions");
    }
    cJSON *c = (cJSON *)kobj_cond(o, type);
    char ts[32];
    kobj_fmt_time(now, ts);
    if (!c) {
        c = cJSON_CreateObject();
        json_add_string(c, "type", type);
        json_add_string(c, "status", status);
        if (reason)
            json_add_string(c, "reason", reason);
        if (message)
            json_add_string(c, "message", message);
        json_add_string(c, "lastTransitionTime", ts);
        cJSON_AddItemToArray(cs, c);
        return true;
    }
    bool changed = false;
    if (!str_eq(kobj_str(c, "status"), status)) {
        kobj_set_str(c, "status", status);
        kobj_set_str(c, "lastTransitionTime", ts);
        changed = true;
    }
    if (!str_eq(kobj_str(c, "reason"), reason)) {
        if (reason)
            kobj_set_str(c, "reason", reason);
        else
            kobj_del(c, "reason");
        changed = true;
    }
    if (!str_eq(kobj_str(c, "message"), message)) {
        if (message)
            kobj_set_str(c, "message", message);
        else
            kobj_del(c, "message");
        changed = true;
    }
    return changed;
}

static bool in_values(const cJSON *values, const char *v)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, values)
    {
        if (cJSON_IsString(it) && v && strcmp(it->valuestring, v) == 0)
            return true;
    }
    return false;
}

bool kobj_selector_matches(const cJSON *sel, const cJSON *labels)
{
    if (!cJSON_IsObject(sel))
        return false;
    const cJSON *ml = json_get(sel, "matchLabels");
    const cJSON *it;
    cJSON_ArrayForEach(it, ml)
    {
        const cJSON *l = json_get(labels, it->string);
        if (!cJSON_IsString(l) || !cJSON_IsString(it) || strcmp(l->valuestring, it->valuestring))
            return false;
    }
    const cJSON *exprs = json_get(sel, "matchExpressions");
    cJSON_ArrayForEach(it, exprs)
    {
        const char *key = kobj_str(it, "key"), *op = kobj_str(it, "operator");
        if (!key || !op)
            return false;
        const cJSON *l = json_get(labels, key);
        const char *lv = cJSON_IsString(l) ? l->valuestring : NULL;
        const cJSON *vals = json_get(it, "values");
        if (strcmp(op, "In") == 0) {
            if (!in_values(vals, lv))
                return false;
        } else if (strcmp(op, "NotIn") == 0) {
            if (lv && in_values(vals, lv))
                return false;
        } else if (strcmp(op, "Exists") == 0) {
            if (!lv)
                return false;
        } else if (strcmp(op, "DoesNotExist") == 0) {
            if (lv)
                return false;
        } else {
            return false;
        }
    }
    return true;
}

bool kobj_equal(const cJSON *a, const cJSON *b)
{
    if (!a || !b)
        return a == b;
    char *sa = json_print(a), *sb = json_print(b);
    bool eq = strcmp(sa, sb) == 0;
    free(sa);
    free(sb);
    return eq;
}
