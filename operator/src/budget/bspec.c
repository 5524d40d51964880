/* bspec.c - AgentBudget spec, mirror and selector. See bspec.h. */
#include "budget/bspec.h"

#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dim_names[BSPEC_NDIMS] = {"concurrentSessions", "sessionsStarted",
                                                   "tokens", "costMicroUSD"};
static const char *const dim_reasons[BSPEC_NDIMS] = {"ConcurrentSessions", "SessionsStarted",
                                                     "Tokens", "CostMicroUSD"};
static const int64_t dim_max[BSPEC_NDIMS] = {TERN_BUDGET_MAX_CONCURRENT, TERN_BUDGET_MAX_STARTED,
                                             TERN_BUDGET_MAX_LIMIT, TERN_BUDGET_MAX_LIMIT};
static const char *const op_names[] = {"In", "NotIn", "Exists", "DoesNotExist"};

const char *bspec_dim_name(enum bspec_dim d)
{
    return d < BSPEC_NDIMS ? dim_names[d] : "?";
}

const char *bspec_dim_reason(enum bspec_dim d)
{
    return d < BSPEC_NDIMS ? dim_reasons[d] : "Budget";
}

int bspec_dim_parse(const char *s, enum bspec_dim *ret)
{
    for (int d = 0; s && d < BSPEC_NDIMS; d++)
        if (strcmp(s, dim_names[d]) == 0) {
            *ret = (enum bspec_dim)d;
            return 0;
        }
    return -EINVAL;
}

bool bspec_limited(const struct bspec *b, enum bspec_dim d)
{
    return d < BSPEC_NDIMS && b->limit[d] >= 0;
}

static void free_strv(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void bspec_done(struct bspec *b)
{
    if (!b)
        return;
    free(b->ns);
    free(b->name);
    free(b->uid);
    free(b->time_zone);
    free_strv(b->selector.keys, b->selector.nlabels);
    free_strv(b->selector.values, b->selector.nlabels);
    for (size_t i = 0; i < b->selector.nreqs; i++) {
        free(b->selector.reqs[i].key);
        free_strv(b->selector.reqs[i].values, b->selector.reqs[i].nvalues);
    }
    free(b->selector.reqs);
    memset(b, 0, sizeof *b);
}

bool bspec_dns_label(const char *s, size_t max)
{
    size_t n = s ? strlen(s) : 0;
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

/* A label name part: 1..63 of [A-Za-z0-9._-], alphanumeric at both ends. */
static bool label_name(const char *s, size_t n)
{
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && ((i == 0 || i + 1 == n) || (c != '-' && c != '_' && c != '.')))
            return false;
    }
    return true;
}

/* [prefix/]name with a DNS-subdomain prefix of at most 253 characters. */
static bool label_key(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash)
        return label_name(s, strlen(s));
    size_t pn = (size_t)(slash - s);
    if (pn == 0 || pn > 253)
        return false;
    for (size_t i = 0; i < pn; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
            return false;
    }
    return label_name(slash + 1, strlen(slash + 1));
}

static bool label_value(const char *s)
{
    return *s == 0 || label_name(s, strlen(s));
}

static int parse_selector(const cJSON *sel, struct bspec_selector *out, struct tern_err *err)
{
    const cJSON *ml = NULL, *me = NULL;
    int rc;
    if ((rc = json_get_object(sel, "spec.selector", "matchLabels", JSON_OPTIONAL, &ml, err)) ||
        (rc = json_get_array(sel, "spec.selector", "matchExpressions", JSON_OPTIONAL, &me, err)))
        return rc;
    for (const cJSON *it = sel->child; it; it = it->next)
        if (strcmp(it->string, "matchLabels") != 0 && strcmp(it->string, "matchExpressions") != 0)
            return err_set(err, TERN_EINVALID, "spec.selector.%.64s: unknown field", it->string);
    size_t nl = (size_t)cJSON_GetArraySize(ml), ne = (size_t)cJSON_GetArraySize(me);
    if (nl + ne > TERN_BUDGET_MAX_SELECTOR)
        return err_set(err, TERN_EINVALID, "spec.selector: more than %d labels and expressions",
                       TERN_BUDGET_MAX_SELECTOR);
    out->set = true;
    out->keys = xcalloc(nl + 1, sizeof *out->keys);
    out->values = xcalloc(nl + 1, sizeof *out->values);
    for (const cJSON *it = ml ? ml->child : NULL; it; it = it->next) {
        if (!cJSON_IsString(it) || !label_key(it->string) || !label_value(it->valuestring))
            return err_set(err, TERN_EINVALID,
                           "spec.selector.matchLabels.%.64s: a label key with a label value",
                           it->string);
        out->keys[out->nlabels] = xstrdup(it->string);
        out->values[out->nlabels++] = xstrdup(it->valuestring);
    }
    out->reqs = xcalloc(ne + 1, sizeof *out->reqs);
    size_t i = 0;
    for (const cJSON *it = me ? me->child : NULL; it; it = it->next, i++) {
        char path[64];
        snprintf(path, sizeof path, "spec.selector.matchExpressions[%zu]", i);
        const char *key = NULL, *op = NULL;
        const cJSON *vals = NULL;
        if (!cJSON_IsObject(it))
            return err_set(err, TERN_EINVALID, "%s: must be an object", path);
        if ((rc = json_get_string(it, path, "key", JSON_REQUIRED, &key, err)) ||
            (rc = json_get_string(it, path, "operator", JSON_REQUIRED, &op, err)) ||
            (rc = json_get_array(it, path, "values", JSON_OPTIONAL, &vals, err)))
            return rc;
        if (!label_key(key))
            return err_set(err, TERN_EINVALID, "%s.key: not a label key", path);
        struct bspec_req *r = &out->reqs[out->nreqs++];
        r->key = xstrdup(key);
        int o = -1;
        for (int k = 0; k < 4; k++)
            if (strcmp(op, op_names[k]) == 0)
                o = k;
        if (o < 0)
            return err_set(err, TERN_EINVALID,
                           "%s.operator: must be In, NotIn, Exists or DoesNotExist", path);
        r->op = (enum bspec_op)o;
        size_t nv = (size_t)cJSON_GetArraySize(vals);
        bool want_values = r->op == BSPEC_IN || r->op == BSPEC_NOT_IN;
        if (want_values && nv == 0)
            return err_set(err, TERN_EINVALID, "%s.values: required for %s", path, op);
        if (!want_values && nv > 0)
            return err_set(err, TERN_EINVALID, "%s.values: must be empty for %s", path, op);
        if (nv > TERN_BUDGET_MAX_VALUES)
            return err_set(err, TERN_EINVALID, "%s.values: more than %d", path,
                           TERN_BUDGET_MAX_VALUES);
        r->values = xcalloc(nv + 1, sizeof *r->values);
        for (const cJSON *v = vals ? vals->child : NULL; v; v = v->next) {
            if (!cJSON_IsString(v) || !label_value(v->valuestring))
                return err_set(err, TERN_EINVALID, "%s.values: label values only", path);
            r->values[r->nvalues++] = xstrdup(v->valuestring);
        }
    }
    return 0;
}

int bspec_parse(const cJSON *obj, struct bspec *ret, struct tern_err *err)
{
    struct bspec b = {0};
    const cJSON *meta = json_get(obj, "metadata"), *spec = NULL, *win = NULL, *lim = NULL,
                *sel = NULL;
    const char *ns = NULL, *name = NULL, *uid = NULL, *period = "Day", *tz = "UTC";
    int rc;
    for (int d = 0; d < BSPEC_NDIMS; d++)
        b.limit[d] = -1;
    if (!cJSON_IsObject(obj) || !cJSON_IsObject(meta)) {
        rc = err_set(err, TERN_EINVALID, "metadata: required");
        goto out;
    }
    if ((rc = json_get_string(meta, "metadata", "namespace", JSON_REQUIRED, &ns, err)) ||
        (rc = json_get_string(meta, "metadata", "name", JSON_REQUIRED, &name, err)) ||
        (rc = json_get_string(meta, "metadata", "uid", JSON_OPTIONAL, &uid, err)) ||
        (rc = json_get_int_range(meta, "metadata", "generation", JSON_OPTIONAL, 0, INT64_MAX,
                                 &b.generation, err)))
        goto out;
    if (!bspec_dns_label(name, TERN_BUDGET_MAX_NAME)) {
        rc = err_set(err, TERN_EINVALID, "metadata.name: an AgentBudget's name is a DNS label of "
                     "at most %d characters", TERN_BUDGET_MAX_NAME);
        goto out;
    }
    if (!bspec_dns_label(ns, 63)) {
        rc = err_set(err, TERN_EINVALID, "metadata.namespace: not a namespace name");
        goto out;
    }
    if ((rc = json_get_object(obj, "", "spec", JSON_REQUIRED, &spec, err)) ||
        (rc = json_get_object(spec, "spec", "window", JSON_OPTIONAL, &win, err)) ||
        (rc = json_get_object(spec, "spec", "limits", JSON_REQUIRED, &lim, err)) ||
        (rc = json_get_object(spec, "spec", "selector", JSON_OPTIONAL, &sel, err)) ||
        (rc = json_get_string(win, "spec.window", "period", JSON_OPTIONAL, &period, err)) ||
        (rc = json_get_string(win, "spec.window", "timeZone", JSON_OPTIONAL, &tz, err)))
        goto out;
    if (tzwin_period_parse(period, &b.period) != 0) {
        rc = err_set(err, TERN_EINVALID, "spec.window.period: must be Hour, Day or Month");
        goto out;
    }
    if (!tzwin_name_valid(tz)) {
        rc = err_set(err, TERN_EINVALID, "spec.window.timeZone: \"%.64s\" is not a time zone "
                     "name (e.g. Europe/Berlin, UTC)", tz);
        goto out;
    }
    bool any = false;
    for (int d = 0; d < BSPEC_NDIMS; d++) {
        if ((rc = json_get_int_range(lim, "spec.limits", dim_names[d], JSON_OPTIONAL, 0,
                                     dim_max[d], &b.limit[d], err)))
            goto out;
        any = any || b.limit[d] >= 0;
    }
    for (const cJSON *it = lim->child; it; it = it->next) {
        enum bspec_dim d;
        if (bspec_dim_parse(it->string, &d) != 0) {
            rc = err_set(err, TERN_EINVALID, "spec.limits.%.64s: unknown limit (concurrentSessions, "
                         "sessionsStarted, tokens, costMicroUSD)", it->string);
            goto out;
        }
    }
    if (!any) {
        rc = err_set(err, TERN_EINVALID, "spec.limits: set at least one of concurrentSessions, "
                     "sessionsStarted, tokens, costMicroUSD");
        goto out;
    }
    if (sel && (rc = parse_selector(sel, &b.selector, err)))
        goto out;
    b.ns = xstrdup(ns);
    b.name = xstrdup(name);
    b.uid = uid ? xstrdup(uid) : NULL;
    b.time_zone = xstrdup(tz);
    *ret = b;
    return 0;
out:
    bspec_done(&b);
    return rc;
}

cJSON *bspec_mirror(const struct bspec *b)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *m = cJSON_AddObjectToObject(o, "metadata");
    json_add_string(m, "namespace", b->ns);
    json_add_string(m, "name", b->name);
    if (b->uid)
        json_add_string(m, "uid", b->uid);
    json_add_int64(m, "generation", b->generation);
    cJSON *s = cJSON_AddObjectToObject(o, "spec");
    cJSON *w = cJSON_AddObjectToObject(s, "window");
    json_add_string(w, "period", tzwin_period_name(b->period));
    json_add_string(w, "timeZone", b->time_zone);
    cJSON *l = cJSON_AddObjectToObject(s, "limits");
    for (int d = 0; d < BSPEC_NDIMS; d++)
        if (b->limit[d] >= 0)
            json_add_int64(l, dim_names[d], b->limit[d]);
    if (b->selector.set) {
        const struct bspec_selector *sel = &b->selector;
        cJSON *so = cJSON_AddObjectToObject(s, "selector");
        if (sel->nlabels) {
            cJSON *ml = cJSON_AddObjectToObject(so, "matchLabels");
            for (size_t i = 0; i < sel->nlabels; i++)
                json_add_string(ml, sel->keys[i], sel->values[i]);
        }
        if (sel->nreqs) {
            cJSON *me = cJSON_AddArrayToObject(so, "matchExpressions");
            for (size_t i = 0; i < sel->nreqs; i++) {
                cJSON *r = cJSON_CreateObject();
                json_add_string(r, "key", sel->reqs[i].key);
                json_add_string(r, "operator", op_names[sel->reqs[i].op]);
                if (sel->reqs[i].nvalues) {
                    cJSON *v = cJSON_AddArrayToObject(r, "values");
                    for (size_t k = 0; k < sel->reqs[i].nvalues; k++)
                        cJSON_AddItemToArray(v, cJSON_CreateString(sel->reqs[i].values[k]));
                }
                cJSON_AddItemToArray(me, r);
            }
        }
    }
    return o;
}

static const char *label_of(const cJSON *labels, const char *key)
{
    const cJSON *v = json_get(labels, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

bool bspec_matches(const struct bspec *b, const cJSON *labels)
{
    const struct bspec_selector *s = &b->selector;
    if (!s->set)
        return true;
    for (size_t i = 0; i < s->nlabels; i++) {
        const char *v = label_of(labels, s->keys[i]);
        if (!v || strcmp(v, s->values[i]) != 0)
            return false;
    }
    for (size_t i = 0; i < s->nreqs; i++) {
        const struct bspec_req *r = &s->reqs[i];
        const char *v = label_of(labels, r->key);
        bool in = false;
        for (size_t k = 0; v && k < r->nvalues; k++)
            in = in || strcmp(v, r->values[k]) == 0;
        bool ok = r->op == BSPEC_IN       ? in
                  : r->op == BSPEC_NOT_IN ? !in
                  : r->op == BSPEC_EXISTS ? v != NULL
                                          : v == NULL;
        if (!ok)
            return false;
    }
    return true;
}

char *bspec_format(enum bspec_dim d, int64_t v, char out[40])
{
    if (v < 0) {
        snprintf(out, 40, "-");
    } else if (d != BSPEC_COST) {
        snprintf(out, 40, "%lld", (long long)v);
    } else {
        int64_t dollars = v / 1000000, micro = v % 1000000;
        if (micro % 10000 == 0) {
            snprintf(out, 40, "$%lld.%02lld", (long long)dollars, (long long)(micro / 10000));
        } else {
            char frac[8];
            snprintf(frac, sizeof frac, "%06lld", (long long)micro);
            size_t n = strlen(frac);
            while (n > 2 && frac[n - 1] == '0')
                frac[--n] = 0;
            snprintf(out, 40, "$%lld.%s", (long long)dollars, frac);
        }
    }
    return out;
}
