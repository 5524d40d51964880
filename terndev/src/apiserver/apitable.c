/* apitable.c - server-side tables. See apitable.h. */
#include "apitable.h"

#include "apievent.h"
#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void apitable_human_duration(long s, char *out, size_t n)
{
    if (s < -1) {
        snprintf(out, n, "<invalid>");
        return;
    }
    if (s < 0)
        s = 0;
    if (s < 120) {
        snprintf(out, n, "%lds", s);
        return;
    }
    long m = s / 60;
    if (m < 10) {
        if (s % 60 == 0)
            snprintf(out, n, "%ldm", m);
        else
            snprintf(out, n, "%ldm%lds", m, s % 60);
        return;
    }
    if (m < 180) {
        snprintf(out, n, "%ldm", m);
        return;
    }
    long h = s / 3600;
    if (h < 8) {
        if (m % 60 == 0)
            snprintf(out, n, "%ldh", h);
        else
            snprintf(out, n, "%ldh%ldm", h, m % 60);
    } else if (h < 48) {
        snprintf(out, n, "%ldh", h);
    } else if (h < 24 * 8) {
        if (h % 24 == 0)
            snprintf(out, n, "%ldd", h / 24);
        else
            snprintf(out, n, "%ldd%ldh", h / 24, h % 24);
    } else if (h < 24 * 365 * 2) {
        snprintf(out, n, "%ldd", h / 24);
    } else if (h < 24 * 365 * 8) {
        long dy = (h / 24) % 365;
        if (dy == 0)
            snprintf(out, n, "%ldy", h / 24 / 365);
        else
            snprintf(out, n, "%ldy%ldd", h / 24 / 365, dy);
    } else {
        snprintf(out, n, "%ldy", h / 24 / 365);
    }
}

static int two(const char *s, int *ret)
{
    if (s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9')
        return -EINVAL;
    *ret = (s[0] - '0') * 10 + (s[1] - '0');
    return 0;
}

int apitable_parse_time(const char *s, time_t *ret)
{
    int64_t y;
    int mo, d, h, mi, se;
    if (strlen(s) < 20 || num_parse_i64n(s, 4, &y) || s[4] != '-' || two(s + 5, &mo) ||
        s[7] != '-' || two(s + 8, &d) || (s[10] != 'T' && s[10] != 't') || two(s + 11, &h) ||
        s[13] != ':' || two(s + 14, &mi) || s[16] != ':' || two(s + 17, &se))
        return -EINVAL;
    struct tm tm = {.tm_year = (int)y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
                    .tm_min = mi, .tm_sec = se};
    time_t t = timegm(&tm);
    const char *p = s + 19;
    if (*p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            ;
    if (*p == '+' || *p == '-') {
        int oh, om;
        if (two(p + 1, &oh) || p[3] != ':' || two(p + 4, &om))
            return -EINVAL;
        long off = oh * 3600L + om * 60L;
        t += *p == '+' ? -off : off;
    } else if (*p != 'Z' && *p != 'z') {
        return -EINVAL;
    }
    *ret = t;
    return 0;
}

void apitable_format_time(time_t t, char *out, size_t n)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- JSONPath subset --------------------------------------------------- */

static const cJSON *jp_eval(const cJSON *cur, const char *p);

static const cJSON *jp_filter(const cJSON *arr, const char *expr, size_t len, const char *rest)
{
    /* @.a.b=="v" or @.a.b==v or @.a (exists) */
    char *e = xstrndup(expr, len);
    const cJSON *res = NULL;
    char *eq = strstr(e, "==");
    char *ne = strstr(e, "!=");
    char *op = eq ? eq : ne;
    char *lhs = e, *rhs = NULL;
    if (op) {
        *op = 0;
        rhs = op + 2;
    }
    while (*lhs == ' ')
        lhs++;
    size_t ll = strlen(lhs);
    while (ll && lhs[ll - 1] == ' ')
        lhs[--ll] = 0;
    if (strncmp(lhs, "@", 1) != 0)
        goto out;
    char *val = NULL;
    if (rhs) {
        while (*rhs == ' ')
            rhs++;
        size_t rl = strlen(rhs);
        while (rl && rhs[rl - 1] == ' ')
            rhs[--rl] = 0;
        if (rl >= 2 && (rhs[0] == '"' || rhs[0] == '\'') && rhs[rl - 1] == rhs[0]) {
            rhs[rl - 1] = 0;
            rhs++;
        }
        val = rhs;
    }
    for (const cJSON *c = cJSON_IsArray(arr) ? arr->child : NULL; c; c = c->next) {
        const cJSON *v = *(lhs + 1) ? jp_eval(c, lhs + 1) : c;
        bool ok;
        if (!val) {
            ok = v != NULL;
        } else {
            char tmp[64];
            const char *sv = NULL;
            if (cJSON_IsString(v))
                sv = v->valuestring;
            else if (cJSON_IsNumber(v))
                sv = v->valuestring ? v->valuestring
                                    : (snprintf(tmp, sizeof(tmp), "%g", v->valuedouble), tmp);
            else if (cJSON_IsBool(v))
                sv = cJSON_IsTrue(v) ? "true" : "false";
            ok = sv && strcmp(sv, val) == 0;
            if (ne)
                ok = !ok;
        }
        if (ok) {
            res = jp_eval(c, rest);
            if (res)
                break;
        }
    }
out:
    free(e);
    return res;
}

static const cJSON *jp_eval(const cJSON *cur, const char *p)
{
    while (cur && *p) {
        if (*p == '.') {
            p++;
            if (*p == '.' || !*p)
                return cur;
            const char *s = p;
            while (*p && *p != '.' && *p != '[')
                p++;
            char *k = xstrndup(s, (size_t)(p - s));
            cur = json_get(cur, k);
            free(k);
        } else if (*p == '[') {
            const char *close = NULL;
            if (p[1] == '?') {
                /* find the matching ")]" */
                close = strstr(p, ")]");
                if (!close || p[2] != '(')
                    return NULL;
                return jp_filter(cur, p + 3, (size_t)(close - (p + 3)), close + 2);
            }
            close = strchr(p, ']');
            if (!close)
                return NULL;
            const char *in = p + 1;
            size_t len = (size_t)(close - in);
            if (len >= 2 && (in[0] == '\'' || in[0] == '"') && in[len - 1] == in[0]) {
                char *k = xstrndup(in + 1, len - 2);
                cur = json_get(cur, k);
                free(k);
            } else if (len == 1 && in[0] == '*') {
                /* first element that yields a result */
                for (const cJSON *c = cur ? cur->child : NULL; c; c = c->next) {
                    const cJSON *r = jp_eval(c, close + 1);
                    if (r)
                        return r;
                }
                return NULL;
            } else {
                int64_t i;
                if (num_parse_i64n(in, len, &i) || !cJSON_IsArray(cur))
                    return NULL;
                if (i < 0)
                    i += cJSON_GetArraySize(cur);
                cur = i >= 0 ? cJSON_GetArrayItem(cur, (int)i) : NULL;
            }
            p = close + 1;
        } else {
            return NULL;
        }
    }
    return cur;
}

const cJSON *apitable_jsonpath(const cJSON *obj, const char *path)
{
    const char *p = path;
    char *tmp = NULL;
    size_t n = strlen(p);
    if (n >= 2 && p[0] == '{' && p[n - 1] == '}') {
        tmp = xstrndup(p + 1, n - 2);
        p = tmp;
    }
    const cJSON *r = *p == '.' || *p == '[' ? jp_eval(obj, p) : NULL;
    free(tmp);
    return r;
}

/* ---- columns ------------------------------------------------------------ */

static void add_col(cJSON *cols, const char *name, const char *type, const char *format,
                    const char *desc, int priority)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "name", name);
    cJSON_AddStringToObject(c, "type", type);
    cJSON_AddStringToObject(c, "format", format ? format : "");
    cJSON_AddStringToObject(c, "description", desc ? desc : "");
    json_add_int64(c, "priority", priority);
    cJSON_AddItemToArray(cols, c);
}

static const char *sget(const cJSON *o, const char *path)
{
    const cJSON *v = apitable_jsonpath(o, path);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int64_t iget(const cJSON *o, const char *path)
{
    const cJSON *v = apitable_jsonpath(o, path);
    int64_t x = 0;
    if (v && json_item_int64(v, &x) == 0)
        return x;
    if (cJSON_IsNumber(v))
        return (int64_t)v->valuedouble;
    return 0;
}

static cJSON *age_cell(const char *ts, time_t now)
{
    time_t t;
    if (!ts || apitable_parse_time(ts, &t))
        return cJSON_CreateString("<unknown>");
    char b[32];
    apitable_human_duration((long)(now - t), b, sizeof(b));
    return cJSON_CreateString(b);
}

static const char *name_desc = "Name must be unique within a namespace. Is required when "
                               "creating resources, although some resources may allow a client "
                               "to request the generation of an appropriate name automatically. "
                               "Name is primarily intended for creation idempotence and "
                               "configuration definition. Cannot be updated. More info: "
                               "https://kubernetes.io/docs/concepts/overview/working-with-objects/"
                               "names#names";

static bool has_condition(const cJSON *o, const char *type)
{
    const cJSON *conds = apitable_jsonpath(o, ".status.conditions");
    for (const cJSON *c = conds ? conds->child : NULL; c; c = c->next) {
        const char *t = sget(c, ".type"), *s = sget(c, ".status");
        if (t && s && strcmp(t, type) == 0 && strcmp(s, "True") == 0)
            return true;
    }
    return false;
}

static int count_members(const cJSON *o, const char *path)
{
    const cJSON *v = apitable_jsonpath(o, path);
    return v ? cJSON_GetArraySize(v) : 0;
}

/* The built-in printers (subset of k8s.io/kubernetes/pkg/printers/internalversion). */
static void builtin_columns(const struct apires *res, cJSON *cols)
{
    const char *k = res->kind;
    add_col(cols, "Name", "string", "name", name_desc, 0);
    if (strcmp(k, "Pod") == 0) {
        add_col(cols, "Ready", "string", "", "The aggregate readiness state of this pod for "
                "accepting traffic.", 0);
        add_col(cols, "Status", "string", "", "The aggregate status of the containers in this pod.", 0);
        add_col(cols, "Restarts", "string", "", "The number of times the containers in this pod "
                "have been restarted and when the last container in this pod has restarted.", 0);
        add_col(cols, "Age", "string", "", "", 0);
        add_col(cols, "IP", "string", "", "IP address allocated to the pod.", 1);
        add_col(cols, "Node", "string", "", "Name of the node this pod is assigned to.", 1);
        add_col(cols, "Nominated Node", "string", "", "Name of the node where the pod is "
                "nominated to run after preemption.", 1);
        add_col(cols, "Readiness Gates", "string", "", "The readiness gates of the pod.", 1);
    } else if (strcmp(k, "ConfigMap") == 0) {
        add_col(cols, "Data", "string", "", "Data contains the configuration data.", 0);
        add_col(cols, "Age", "string", "", "", 0);
    } else if (strcmp(k, "Secret") == 0) {
        add_col(cols, "Type", "string", "", "Used to facilitate programmatic handling of secret data.", 0);
        add_col(cols, "Data", "string", "", "Data contains the secret data.", 0);
        add_col(cols, "Age", "string", "", "", 0);
    } else if (strcmp(k, "Namespace") == 0) {
        add_col(cols, "Status", "string", "", "The status of the namespace", 0);
        add_col(cols, "Age", "string", "", "", 0);
    } else if (strcmp(k, "Job") == 0) {
        add_col(cols, "Status", "string", "", "Status of the job.", 0);
        add_col(cols, "Completions", "string", "", "The completion status of the job.", 0);
        add_col(cols, "Duration", "string", "", "Time required to complete the job.", 0);
        add_col(cols, "Age", "string", "", "", 0);
        add_col(cols, "Containers", "string", "", "Names of each container in the template.", 1);
        add_col(cols, "Images", "string", "", "Images referenced by each container in the "
                "template.", 1);
        add_col(cols, "Selector", "string", "", "Query over pods that should match the pod "
                "count.", 1);
    } else if (strcmp(k, "Deployment") == 0) {
        add_col(cols, "Ready", "string", "", "Number of the pod with ready state", 0);
        add_col(cols, "Up-to-date", "string", "", "Total number of non-terminated pods targeted "
                "by this deployment that have the desired template spec.", 0);
        add_col(cols, "Available", "string", "", "Total number of available pods (ready for at "
                "least minReadySeconds) targeted by this deployment.", 0);
        add_col(cols, "Age", "string", "", "", 0);
        add_col(cols, "Containers", "string", "", "Names of each container in the template.", 1);
        add_col(cols, "Images", "string", "", "Images referenced by each container in the "
                "template.", 1);
        add_col(cols, "Selector", "string", "", "Label selector for pods. Existing "
                "ReplicaSets whose pods are selected by this will be the ones affected by "
                "this deployment.", 1);
    } else if (strcmp(k, "Service") == 0) {
        add_col(cols, "Type", "string", "", "", 0);
        add_col(cols, "Cluster-IP", "string", "", "", 0);
        add_col(cols, "External-IP", "string", "", "", 0);
        add_col(cols, "Port(s)", "string", "", "", 0);
        add_col(cols, "Age", "string", "", "", 0);
        add_col(cols, "Selector", "string", "", "", 1);
    } else if (strcmp(k, "ServiceAccount") == 0) {
        add_col(cols, "Age", "string", "", "", 0); /* no Secrets column since 1.24+ */
    } else if (strcmp(k, "Node") == 0) {
        add_col(cols, "Status", "string", "", "", 0);
        add_col(cols, "Roles", "string", "", "", 0);
        add_col(cols, "Age", "string", "", "", 0);
        add_col(cols, "Version", "string", "", "", 0);
        add_col(cols, "Internal-IP", "string", "", "", 1);
        add_col(cols, "External-IP", "string", "", "", 1);
        add_col(cols, "OS-Image", "string", "", "", 1);
        add_col(cols, "Kernel-Version", "string", "", "", 1);
        add_col(cols, "Container-Runtime", "string", "", "", 1);
    } else if (strcmp(k, "PersistentVolumeClaim") == 0) {
        add_col(cols, "Status", "string", "", "", 0);
        add_col(cols, "Volume", "string", "", "", 0);
        add_col(cols, "Capacity", "string", "", "", 0);
        add_col(cols, "Access Modes", "string", "", "", 0);
        add_col(cols, "StorageClass", "string", "", "", 0);
        add_col(cols, "VolumeAttributesClass", "string", "", "", 0);
        add_col(cols, "Age", "string", "", "", 0);
        add_col(cols, "VolumeMode", "string", "", "", 1);
    } else if (strcmp(k, "Event") == 0) {
        cJSON_DeleteItemFromArray(cols, 0);
        add_col(cols, "Last Seen", "string", "", "", 0);
        add_col(cols, "Type", "string", "", "", 0);
        add_col(cols, "Reason", "string", "", "", 0);
        add_col(cols, "Object", "string", "", "", 0);
        add_col(cols, "Subobject", "string", "", "", 1);
        add_col(cols, "Source", "string", "", "", 1);
        add_col(cols, "Message", "string", "", "", 0);
        add_col(cols, "First Seen", "string", "", "", 1);
        add_col(cols, "Count", "string", "", "", 1);
        add_col(cols, "Name", "string", "name", "", 1);
    } else if (strcmp(k, "Lease") == 0) {
        add_col(cols, "Holder", "string", "", "", 0);
        add_col(cols, "Age", "string", "", "", 0);
    } else if (strcmp(k, "CustomResourceDefinition") == 0 || strcmp(k, "Role") == 0 ||
               strcmp(k, "ClusterRole") == 0) {
        add_col(cols, "Created At", "date", "", "", 0);
    } else if (strcmp(k, "RoleBinding") == 0 || strcmp(k, "ClusterRoleBinding") == 0) {
        add_col(cols, "Role", "string", "", "", 0);
        add_col(cols, "Age", "string", "", "", 0);
        add_col(cols, "Users", "string", "", "", 1);
        add_col(cols, "Groups", "string", "", "", 1);
        add_col(cols, "ServiceAccounts", "string", "", "", 1);
    } else {
        add_col(cols, "Age", "string", "", "", 0);
    }
}

/* s1,s2 of the string at field of each item of a list ("" when none) */
static cJSON *joined(const cJSON *o, const char *list, const char *field)
{
    struct buf b;
    buf_init(&b, 1u << 16);
    const cJSON *l = apitable_jsonpath(o, list);
    for (const cJSON *c = cJSON_IsArray(l) ? l->child : NULL; c; c = c->next) {
        const cJSON *v = json_get(c, field);
        buf_printf(&b, "%s%s", b.len ? "," : "", cJSON_IsString(v) ? v->valuestring : "");
    }
    cJSON *r = cJSON_CreateString(buf_str(&b));
    buf_done(&b);
    return r;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* k=v,... of a map sorted by key, as labels.SelectorFromSet(m).String();
 * none: "<none>" */
static cJSON *map_selector(const cJSON *m, bool with_expressions, const cJSON *exprs)
{
    const char *keys[256];
    size_t n = 0;
    for (const cJSON *c = cJSON_IsObject(m) ? m->child : NULL; c && n < 256; c = c->next)
        if (cJSON_IsString(c))
            keys[n++] = c->string;
    qsort(keys, n, sizeof keys[0], cmp_str);
    struct buf b;
    buf_init(&b, 1u << 16);
    for (size_t i = 0; i < n; i++)
        buf_printf(&b, "%s%s=%s", b.len ? "," : "", keys[i], json_get(m, keys[i])->valuestring);
    for (const cJSON *e = with_expressions && cJSON_IsArray(exprs) ? exprs->child : NULL; e;
         e = e->next) {
        const cJSON *kv = json_get(e, "key");
        const char *k = cJSON_IsString(kv) ? kv->valuestring : "";
        const cJSON *opv = json_get(e, "operator");
        const char *op = cJSON_IsString(opv) ? opv->valuestring : "";
        if (strcmp(op, "Exists") == 0) {
            buf_printf(&b, "%s%s", b.len ? "," : "", k);
        } else if (strcmp(op, "DoesNotExist") == 0) {
            buf_printf(&b, "%s!%s", b.len ? "," : "", k);
        } else {
            buf_printf(&b, "%s%s %s (", b.len ? "," : "", k,
                       strcmp(op, "NotIn") == 0 ? "notin" : "in");
            const cJSON *vs = json_get(e, "values");
            bool first = true;
            for (const cJSON *v = cJSON_IsArray(vs) ? vs->child : NULL; v; v = v->next) {
                buf_printf(&b, "%s%s", first ? "" : ",", cJSON_IsString(v) ? v->valuestring : "");
                first = false;
            }
            buf_puts(&b, ")");
        }
    }
    cJSON *r = cJSON_CreateString(b.len ? buf_str(&b) : "<none>");
    buf_done(&b);
    return r;
}

/* The template's containers, images and selector (deployments, jobs: -o wide) */
static void template_cells(const cJSON *o, cJSON *cells)
{
    cJSON_AddItemToArray(cells, joined(o, ".spec.template.spec.containers", "name"));
    cJSON_AddItemToArray(cells, joined(o, ".spec.template.spec.containers", "image"));
    const cJSON *sel = apitable_jsonpath(o, ".spec.selector");
    cJSON_AddItemToArray(cells, map_selector(json_get(sel, "matchLabels"), true,
                                             json_get(sel, "matchExpressions")));
}

/* subjects of a kind, comma-separated (ServiceAccounts as namespace/name) */
static cJSON *subjects(const cJSON *o, const char *kind)
{
    struct buf b;
    buf_init(&b, 1u << 16);
    const cJSON *l = json_get(o, "subjects");
    for (const cJSON *s = cJSON_IsArray(l) ? l->child : NULL; s; s = s->next) {
        const cJSON *k = json_get(s, "kind"), *n = json_get(s, "name"), *ns = json_get(s, "namespace");
        if (!cJSON_IsString(k) || strcmp(k->valuestring, kind) != 0 || !cJSON_IsString(n))
            continue;
        if (strcmp(kind, "ServiceAccount") == 0)
            buf_printf(&b, "%s%s/%s", b.len ? ", " : "", cJSON_IsString(ns) ? ns->valuestring : "",
                       n->valuestring);
        else
            buf_printf(&b, "%s%s", b.len ? ", " : "", n->valuestring);
    }
    cJSON *r = cJSON_CreateString(buf_str(&b));
    buf_done(&b);
    return r;
}

static cJSON *pod_status(const cJSON *o)
{
    const char *reason = sget(o, ".status.reason");
    const char *phase = sget(o, ".status.phase");
    const char *st = reason ? reason : phase ? phase : "Pending";
    const cJSON *cs = apitable_jsonpath(o, ".status.containerStatuses");
    for (const cJSON *c = cs ? cs->child : NULL; c; c = c->next) {
        const char *w = sget(c, ".state.waiting.reason");
        const char *t = sget(c, ".state.terminated.reason");
        if (w && *w)
            st = w;
        else if (t && *t && !(phase && strcmp(phase, "Succeeded") == 0))
            st = t;
    }
    if (sget(o, ".metadata.deletionTimestamp"))
        st = "Terminating";
    return cJSON_CreateString(st);
}

/* kube-apiserver prints both Event APIs from the core shape: LAST SEEN
 * (series.lastObservedTime, lastTimestamp, firstTimestamp, eventTime),
 * TYPE, REASON, OBJECT (kind/name, kind lower-cased), MESSAGE; wide:
 * SUBOBJECT (involvedObject.fieldPath), SOURCE (source.component or
 * reportingComponent, then ", " and source.host or reportingInstance),
 * FIRST SEEN (firstTimestamp, eventTime), COUNT (series.count, count, 1),
 * NAME. */
static void event_cells(const struct apires *res, const cJSON *obj, cJSON *cells, time_t now)
{
    cJSON *core = NULL;
    const cJSON *o = obj;
    if (res->core_event) {
        core = json_dup(obj);
        apievent_to_core(core);
        o = core;
    }
    cJSON_Delete(cJSON_DetachItemFromArray(cells, 0));
    const char *first = sget(o, ".firstTimestamp");
    if (!first)
        first = sget(o, ".eventTime");
    if (!first)
        first = sget(o, ".metadata.creationTimestamp");
    const char *last = sget(o, ".series.lastObservedTime");
    if (!last)
        last = sget(o, ".lastTimestamp");
    if (!last)
        last = first;
    cJSON_AddItemToArray(cells, age_cell(last, now));
    const char *t = sget(o, ".type"), *r = sget(o, ".reason"), *m = sget(o, ".message");
    cJSON_AddItemToArray(cells, cJSON_CreateString(t ? t : ""));
    cJSON_AddItemToArray(cells, cJSON_CreateString(r ? r : ""));
    const char *ik = sget(o, ".involvedObject.kind"), *in = sget(o, ".involvedObject.name");
    char b[512];
    snprintf(b, sizeof(b), "%s/%s", ik ? ik : "", in ? in : "");
    for (char *c = b; *c && c < b + strlen(ik ? ik : ""); c++)
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
    cJSON_AddItemToArray(cells, cJSON_CreateString(b));
    const char *fp = sget(o, ".involvedObject.fieldPath");
    cJSON_AddItemToArray(cells, cJSON_CreateString(fp ? fp : ""));
    const char *comp = sget(o, ".source.component"), *host = sget(o, ".source.host");
    if (!comp || !*comp)
        comp = sget(o, ".reportingComponent");
    if (!host || !*host)
        host = sget(o, ".reportingInstance");
    snprintf(b, sizeof(b), "%s%s%s", comp ? comp : "", host && *host ? ", " : "",
             host ? host : "");
    cJSON_AddItemToArray(cells, cJSON_CreateString(b));
    cJSON_AddItemToArray(cells, cJSON_CreateString(m ? m : ""));
    cJSON_AddItemToArray(cells, age_cell(first, now));
    int64_t count = iget(o, ".count");
    if (apitable_jsonpath(o, ".series"))
        count = iget(o, ".series.count");
    else if (count == 0)
        count = 1;
    cJSON_AddItemToArray(cells, cJSON_CreateNumber((double)count));
    const char *name = sget(o, ".metadata.name");
    cJSON_AddItemToArray(cells, cJSON_CreateString(name ? name : ""));
    cJSON_Delete(core);
}

static void builtin_cells(const struct apires *res, const cJSON *o, cJSON *cells, time_t now)
{
    const char *k = res->kind;
    char b[128];
    const char *ts = sget(o, ".metadata.creationTimestamp");
    const char *name = sget(o, ".metadata.name");
    cJSON_AddItemToArray(cells, cJSON_CreateString(name ? name : ""));
    if (strcmp(k, "Pod") == 0) {
        int total = count_members(o, ".spec.containers"), ready = 0;
        int64_t restarts = 0;
        const cJSON *cs = apitable_jsonpath(o, ".status.containerStatuses");
        for (const cJSON *c = cs ? cs->child : NULL; c; c = c->next) {
            if (cJSON_IsTrue(json_get(c, "ready")))
                ready++;
            restarts += iget(c, ".restartCount");
        }
        snprintf(b, sizeof(b), "%d/%d", ready, total);
        cJSON_AddItemToArray(cells, cJSON_CreateString(b));
        cJSON_AddItemToArray(cells, pod_status(o));
        snprintf(b, sizeof(b), "%lld", (long long)restarts);
        cJSON_AddItemToArray(cells, cJSON_CreateString(b));
        cJSON_AddItemToArray(cells, age_cell(ts, now));
        const char *ip = sget(o, ".status.podIP"), *node = sget(o, ".spec.nodeName");
        cJSON_AddItemToArray(cells, cJSON_CreateString(ip ? ip : "<none>"));
        cJSON_AddItemToArray(cells, cJSON_CreateString(node ? node : "<none>"));
        const char *nom = sget(o, ".status.nominatedNodeName");
        cJSON_AddItemToArray(cells, cJSON_CreateString(nom && *nom ? nom : "<none>"));
        const cJSON *gates = apitable_jsonpath(o, ".spec.readinessGates");
        if (cJSON_IsArray(gates) && gates->child) {
            int n = 0, t = 0;
            for (const cJSON *g = gates->child; g; g = g->next) {
                n++;
                const cJSON *gt = json_get(g, "conditionType");
                const cJSON *conds = apitable_jsonpath(o, ".status.conditions");
                for (const cJSON *c = conds ? conds->child : NULL; c; c = c->next) {
                    const cJSON *ct = json_get(c, "type"), *st = json_get(c, "status");
                    if (cJSON_IsString(gt) && cJSON_IsString(ct) && cJSON_IsString(st) &&
                        strcmp(ct->valuestring, gt->valuestring) == 0 &&
                        strcmp(st->valuestring, "True") == 0)
                        t++;
                }
            }
            snprintf(b, sizeof(b), "%d/%d", t, n);
            cJSON_AddItemToArray(cells, cJSON_CreateString(b));
        } else {
            cJSON_AddItemToArray(cells, cJSON_CreateString("<none>"));
        }
    } else if (strcmp(k, "ConfigMap") == 0) {
        cJSON_AddItemToArray(cells, cJSON_CreateNumber(count_members(o, ".data") +
                                                       count_members(o, ".binaryData")));
        cJSON_AddItemToArray(cells, age_cell(ts, now));
    } else if (strcmp(k, "Secret") == 0) {
        const char *t = sget(o, ".type");
        cJSON_AddItemToArray(cells, cJSON_CreateString(t ? t : "Opaque"));
        cJSON_AddItemToArray(cells, cJSON_CreateNumber(count_members(o, ".data")));
        cJSON_AddItemToArray(cells, age_cell(ts, now));
    } else if (strcmp(k, "Namespace") == 0) {
        const char *p = sget(o, ".status.phase");
        cJSON_AddItemToArray(cells, cJSON_CreateString(p ? p : "Active"));
        cJSON_AddItemToArray(cells, age_cell(ts, now));
    } else if (strcmp(k, "Job") == 0) {
        const char *st = "Running";
        if (has_condition(o, "Complete"))
            st = "Complete";
        else if (has_condition(o, "Failed"))
            st = "Failed";
        else if (has_condition(o, "FailureTarget"))
            st = "FailureTarget";
        else if (has_condition(o, "SuccessCriteriaMet"))
            st = "SuccessCriteriaMet";
        else if (cJSON_IsTrue(apitable_jsonpath(o, ".spec.suspend")))
            st = "Suspended";
        cJSON_AddItemToArray(cells, cJSON_CreateString(st));
        const cJSON *comp = apitable_jsonpath(o, ".spec.completions");
        int64_t succ = iget(o, ".status.succeeded");
        if (comp)
            snprintf(b, sizeof(b), "%lld/%lld", (long long)succ, (long long)iget(o, ".spec.completions"));
        else
            snprintf(b, sizeof(b), "%lld/1", (long long)succ);
        cJSON_AddItemToArray(cells, cJSON_CreateString(b));
        time_t st_t, done_t;
        const char *start = sget(o, ".status.startTime"), *done = sget(o, ".status.completionTime");
        if (start && apitable_parse_time(start, &st_t) == 0) {
            if (!done || apitable_parse_time(done, &done_t))
                done_t = now;
            apitable_human_duration((long)(done_t - st_t), b, sizeof(b));
            cJSON_AddItemToArray(cells, cJSON_CreateString(b));
        } else {
            cJSON_AddItemToArray(cells, cJSON_CreateString(""));
        }
        cJSON_AddItemToArray(cells, age_cell(ts, now));
        template_cells(o, cells);
    } else if (strcmp(k, "Deployment") == 0) {
        snprintf(b, sizeof(b), "%lld/%lld", (long long)iget(o, ".status.readyReplicas"),
                 (long long)(apitable_jsonpath(o, ".spec.replicas") ? iget(o, ".spec.replicas") : 1));
        cJSON_AddItemToArray(cells, cJSON_CreateString(b));
        cJSON_AddItemToArray(cells, cJSON_CreateNumber((double)iget(o, ".status.updatedReplicas")));
        cJSON_AddItemToArray(cells, cJSON_CreateNumber((double)iget(o, ".status.availableReplicas")));
        cJSON_AddItemToArray(cells, age_cell(ts, now));
        template_cells(o, cells);
    } else if (strcmp(k, "Service") == 0) {
        const char *t = sget(o, ".spec.type"), *ip = sget(o, ".spec.clusterIP");
        cJSON_AddItemToArray(cells, cJSON_CreateString(t ? t : "ClusterIP"));
        cJSON_AddItemToArray(cells, cJSON_CreateString(ip ? ip : "<none>"));
        cJSON_AddItemToArray(cells, cJSON_CreateString("<none>"));
        struct buf pb;
        buf_init(&pb, 4096);
        const cJSON *ports = apitable_jsonpath(o, ".spec.ports");
        for (const cJSON *p = ports ? ports->child : NULL; p; p = p->next) {
            const char *proto = sget(p, ".protocol");
            buf_printf(&pb, "%s%lld/%s", p == ports->child ? "" : ",",
                       (long long)iget(p, ".port"), proto ? proto : "TCP");
        }
        cJSON_AddItemToArray(cells, cJSON_CreateString(pb.len ? buf_str(&pb) : "<none>"));
        buf_done(&pb);
        cJSON_AddItemToArray(cells, age_cell(ts, now));
        cJSON_AddItemToArray(cells, map_selector(apitable_jsonpath(o, ".spec.selector"), false,
                                                 NULL));
    } else if (strcmp(k, "ServiceAccount") == 0) {
        cJSON_AddItemToArray(cells, age_cell(ts, now));
    } else if (strcmp(k, "Node") == 0) {
        cJSON_AddItemToArray(cells, cJSON_CreateString(has_condition(o, "Ready") ? "Ready" : "NotReady"));
        cJSON_AddItemToArray(cells, cJSON_CreateString("<none>"));
        cJSON_AddItemToArray(cells, age_cell(ts, now));
        const char *v = sget(o, ".status.nodeInfo.kubeletVersion");
        cJSON_AddItemToArray(cells, cJSON_CreateString(v ? v : ""));
        const char *ips[2] = {NULL, NULL};
        const cJSON *as = apitable_jsonpath(o, ".status.addresses");
        for (const cJSON *a = cJSON_IsArray(as) ? as->child : NULL; a; a = a->next) {
            const cJSON *t = json_get(a, "type"), *ad = json_get(a, "address");
            if (!cJSON_IsString(t) || !cJSON_IsString(ad))
                continue;
            if (strcmp(t->valuestring, "InternalIP") == 0 && !ips[0])
                ips[0] = ad->valuestring;
            if (strcmp(t->valuestring, "ExternalIP") == 0 && !ips[1])
                ips[1] = ad->valuestring;
        }
        cJSON_AddItemToArray(cells, cJSON_CreateString(ips[0] ? ips[0] : "<none>"));
        cJSON_AddItemToArray(cells, cJSON_CreateString(ips[1] ? ips[1] : "<none>"));
        const char *info[] = {".status.nodeInfo.osImage", ".status.nodeInfo.kernelVersion",
                              ".status.nodeInfo.containerRuntimeVersion"};
        for (size_t i = 0; i < 3; i++) {
            const char *x = sget(o, info[i]);
            cJSON_AddItemToArray(cells, cJSON_CreateString(x && *x ? x : "<unknown>"));
        }
    } else if (strcmp(k, "PersistentVolumeClaim") == 0) {
        const char *p = sget(o, ".status.phase"), *v = sget(o, ".spec.volumeName");
        const char *cap = sget(o, ".status.capacity.storage"), *sc = sget(o, ".spec.storageClassName");
        cJSON_AddItemToArray(cells, cJSON_CreateString(p ? p : "Pending"));
        cJSON_AddItemToArray(cells, cJSON_CreateString(v ? v : ""));
        cJSON_AddItemToArray(cells, cJSON_CreateString(cap ? cap : ""));
        const cJSON *am = apitable_jsonpath(o, ".spec.accessModes");
        const char *m = am && cJSON_IsString(am->child) ? am->child->valuestring : "";
        cJSON_AddItemToArray(cells, cJSON_CreateString(strcmp(m, "ReadWriteOnce") == 0 ? "RWO" : m));
        cJSON_AddItemToArray(cells, cJSON_CreateString(sc ? sc : "<unset>"));
        const char *vac = sget(o, ".spec.volumeAttributesClassName");
        cJSON_AddItemToArray(cells, cJSON_CreateString(vac && *vac ? vac : "<unset>"));
        cJSON_AddItemToArray(cells, age_cell(ts, now));
        const char *vm = sget(o, ".spec.volumeMode");
        cJSON_AddItemToArray(cells, cJSON_CreateString(vm && *vm ? vm : "<unset>"));
    } else if (strcmp(k, "Event") == 0) {
        event_cells(res, o, cells, now);
    } else if (strcmp(k, "Lease") == 0) {
        const char *h = sget(o, ".spec.holderIdentity");
        cJSON_AddItemToArray(cells, cJSON_CreateString(h ? h : ""));
        cJSON_AddItemToArray(cells, age_cell(ts, now));
    } else if (strcmp(k, "CustomResourceDefinition") == 0 || strcmp(k, "Role") == 0 ||
               strcmp(k, "ClusterRole") == 0) {
        cJSON_AddItemToArray(cells, cJSON_CreateString(ts ? ts : ""));
    } else if (strcmp(k, "RoleBinding") == 0 || strcmp(k, "ClusterRoleBinding") == 0) {
        const char *rk = sget(o, ".roleRef.kind"), *rn = sget(o, ".roleRef.name");
        snprintf(b, sizeof(b), "%s/%s", rk ? rk : "", rn ? rn : "");
        cJSON_AddItemToArray(cells, cJSON_CreateString(b));
        cJSON_AddItemToArray(cells, age_cell(ts, now));
        cJSON_AddItemToArray(cells, subjects(o, "User"));
        cJSON_AddItemToArray(cells, subjects(o, "Group"));
        cJSON_AddItemToArray(cells, subjects(o, "ServiceAccount"));
    } else {
        cJSON_AddItemToArray(cells, age_cell(ts, now));
    }
}

static void crd_columns(const struct apires *res, cJSON *cols)
{
    add_col(cols, "Name", "string", "name", name_desc, 0);
    if (!cJSON_IsArray(res->columns) || !res->columns->child) {
        add_col(cols, "Age", "date", "", "CreationTimestamp is a timestamp representing the "
                "server time when this object was created.", 0);
        return;
    }
    for (const cJSON *c = res->columns->child; c; c = c->next) {
        const cJSON *pr = json_get(c, "priority");
        const cJSON *n = json_get(c, "name"), *t = json_get(c, "type"), *f = json_get(c, "format"),
                    *d = json_get(c, "description");
        add_col(cols, cJSON_IsString(n) ? n->valuestring : "",
                cJSON_IsString(t) ? t->valuestring : "string",
                cJSON_IsString(f) ? f->valuestring : "", cJSON_IsString(d) ? d->valuestring : "",
                cJSON_IsNumber(pr) ? (int)pr->valuedouble : 0);
    }
}

static cJSON *crd_cell(const cJSON *col, const cJSON *o, time_t now)
{
    const cJSON *jp = json_get(col, "jsonPath");
    const cJSON *t = json_get(col, "type");
    const cJSON *v = cJSON_IsString(jp) ? apitable_jsonpath(o, jp->valuestring) : NULL;
    if (!v)
        return cJSON_CreateNull();
    if (cJSON_IsString(t) && strcmp(t->valuestring, "date") == 0 && cJSON_IsString(v))
        return age_cell(v->valuestring, now);
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        char *s = json_print(v);
        cJSON *r = cJSON_CreateString(s);
        free(s);
        return r;
    }
    return json_dup(v);
}

static cJSON *row_object(const cJSON *o, enum apitable_include inc)
{
    if (inc == APITABLE_OBJECT)
        return json_dup(o);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "kind", "PartialObjectMetadata");
    cJSON_AddStringToObject(p, "apiVersion", "meta.k8s.io/v1");
    const cJSON *md = json_get(o, "metadata");
    cJSON_AddItemToObject(p, "metadata", md ? json_dup(md) : cJSON_CreateObject());
    return p;
}

cJSON *apitable_build(const struct apires *res, cJSON *const *objs, size_t n,
                      enum apitable_include inc, const char *list_rv, time_t now)
{
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "kind", "Table");
    cJSON_AddStringToObject(t, "apiVersion", "meta.k8s.io/v1");
    cJSON *md = cJSON_AddObjectToObject(t, "metadata");
    if (list_rv)
        cJSON_AddStringToObject(md, "resourceVersion", list_rv);
    cJSON *cols = cJSON_AddArrayToObject(t, "columnDefinitions");
    if (res->crd)
        crd_columns(res, cols);
    else
        builtin_columns(res, cols);
    cJSON *rows = cJSON_AddArrayToObject(t, "rows");
    for (size_t i = 0; i < n; i++) {
        cJSON *row = cJSON_CreateObject();
        cJSON *cells = cJSON_AddArrayToObject(row, "cells");
        if (res->crd) {
            const cJSON *name = apitable_jsonpath(objs[i], ".metadata.name");
            cJSON_AddItemToArray(cells, cJSON_CreateString(cJSON_IsString(name) ? name->valuestring : ""));
            if (!cJSON_IsArray(res->columns) || !res->columns->child) {
                const char *ts = sget(objs[i], ".metadata.creationTimestamp");
                cJSON_AddItemToArray(cells, age_cell(ts, now));
            } else {
                for (const cJSON *c = res->columns->child; c; c = c->next)
                    cJSON_AddItemToArray(cells, crd_cell(c, objs[i], now));
            }
        } else {
            builtin_cells(res, objs[i], cells, now);
        }
        if (inc != APITABLE_NONE)
            cJSON_AddItemToObject(row, "object", row_object(objs[i], inc));
        cJSON_AddItemToArray(rows, row);
    }
    return t;
}
