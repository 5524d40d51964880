/* yamljson.c - YAML -> cJSON over libyaml events. See yamljson.h and
 * docs/yaml.md for the typing rules and why. */
#include "yamljson.h"

#include "base/mem.h"
#include "base/strset.h"
#include "json/json.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define TAG_PREFIX "tag:yaml.org,2002:"

struct anchor {
    char *name;
    cJSON *node;  /* a private copy; NULL while the anchored node is being built */
    char *text;   /* the scalar's original text (for aliases used as keys) or NULL */
    size_t nodes; /* nodes in the subtree */
    size_t bytes; /* scalar/key bytes in the subtree */
    int height;   /* collection nesting inside the subtree (0 for a scalar) */
};

struct yp {
    yaml_parser_t parser;
    yaml_event_t ev;
    bool have_ev;
    struct yamljson_opts lim;
    size_t nodes, bytes;
    unsigned aliases;
    struct anchor *anchors;
    size_t nanchors, capanchors;
    size_t *ahash; /* name -> index + 1 of the latest definition */
    size_t ahcap, ahn;
    char path[512];
    struct tern_err *err;
};

/* ---- errors and events ---- */

static int yerr_at(struct yp *y, int code, const yaml_mark_t *m, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int yerr_at(struct yp *y, int code, const yaml_mark_t *m, const char *fmt, ...)
{
    char msg[TERN_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(y->err, code, "yaml line %zu:%zu: %s", m->line + 1, m->column + 1, msg);
}

#define YERR(y, code, ...) yerr_at((y), (code), &(y)->ev.start_mark, __VA_ARGS__)

static int next_event(struct yp *y)
{
    if (y->have_ev) {
        yaml_event_delete(&y->ev);
        y->have_ev = false;
    }
    if (!yaml_parser_parse(&y->parser, &y->ev)) {
        const yaml_mark_t *m = &y->parser.problem_mark;
        const char *what = y->parser.problem ? y->parser.problem : "syntax error";
        if (y->parser.context)
            return err_set(y->err, TERN_EPARSE, "yaml line %zu:%zu: %s %s", m->line + 1,
                           m->column + 1, y->parser.context, what);
        return err_set(y->err, TERN_EPARSE, "yaml line %zu:%zu: %s", m->line + 1, m->column + 1,
                       what);
    }
    y->have_ev = true;
    return 0;
}

/* ---- path of the node being built (for duplicate-key errors) ---- */

static size_t path_push_key(struct yp *y, const char *key)
{
    size_t len = strlen(y->path);
    snprintf(y->path + len, sizeof y->path - len, "%s%s", len ? "." : "", key);
    return len;
}

static size_t path_push_index(struct yp *y, int i)
{
    size_t len = strlen(y->path);
    snprintf(y->path + len, sizeof y->path - len, "[%d]", i);
    return len;
}

/* ---- accounting ---- */

static int account(struct yp *y, size_t nodes, size_t bytes)
{
    if (nodes > y->lim.max_nodes - y->nodes)
        return YERR(y, TERN_ETOOLARGE, "more than %zu nodes (after alias expansion)",
                    y->lim.max_nodes);
    if (bytes > y->lim.max_expanded_bytes - y->bytes)
        return YERR(y, TERN_ETOOLARGE, "more than %zu bytes of scalars (after alias expansion)",
                    y->lim.max_expanded_bytes);
    y->nodes += nodes;
    y->bytes += bytes;
    return 0;
}

/* ---- anchors ---- */


/* Anchors live in an array (definition order); an open-addressing table maps
 * a name to the index of its latest definition, so lookups stay O(1) however
 * many anchors a document defines. */
static void anchors_clear(struct yp *y)
{
    for (size_t i = 0; i < y->nanchors; i++) {
        free(y->anchors[i].name);
        free(y->anchors[i].text);
        cJSON_Delete(y->anchors[i].node);
    }
    y->nanchors = 0;
    if (y->ahash)
        memset(y->ahash, 0, y->ahcap * sizeof *y->ahash);
    y->ahn = 0;
}

/* The slot for name in the table (holding index + 1, or 0 if absent). */
static size_t *anchor_slot(struct yp *y, const char *name)
{
    size_t j = strset_hash(name) & (y->ahcap - 1);
    while (y->ahash[j] && strcmp(y->anchors[y->ahash[j] - 1].name, name) != 0)
        j = (j + 1) & (y->ahcap - 1);
    return &y->ahash[j];
}

/* The latest definition of name (YAML lets an anchor be redefined), or NULL. */
static struct anchor *anchor_find(struct yp *y, const char *name)
{
    if (!y->ahcap)
        return NULL;
    size_t v = *anchor_slot(y, name);
    return v ? &y->anchors[v - 1] : NULL;
}

/* Starts an anchor definition; returns its index. */
static size_t anchor_begin(struct yp *y, const char *name)
{
    if (y->nanchors == y->capanchors) {
        y->capanchors = y->capanchors ? y->capanchors * 2 : 16;
        y->anchors = xreallocarray(y->anchors, y->capanchors, sizeof *y->anchors);
    }
    size_t idx = y->nanchors++;
    y->anchors[idx] = (struct anchor){.name = xstrdup(name)};
    if ((y->ahn + 1) * 2 > y->ahcap) {
        size_t *old = y->ahash, oldcap = y->ahcap;
        y->ahcap = oldcap ? oldcap * 2 : 32;
        y->ahash = xcalloc(y->ahcap, sizeof *y->ahash);
        y->ahn = 0;
        for (size_t i = 0; i < oldcap; i++) {
            if (!old[i])
                continue;
            *anchor_slot(y, y->anchors[old[i] - 1].name) = old[i];
            y->ahn++;
        }
        free(old);
    }
    size_t *slot = anchor_slot(y, name);
    if (!*slot)
        y->ahn++;
    *slot = idx + 1;
    return idx;
}

/* Completes anchor idx with a copy of node. The copy counts as expansion. */
static int anchor_end(struct yp *y, size_t idx, const cJSON *node, const char *text, size_t nodes,
                      size_t bytes, int height)
{
    int r = account(y, nodes, bytes);
    if (r)
        return r;
    struct anchor *a = &y->anchors[idx];
    a->node = json_dup(node);
    a->text = text ? xstrdup(text) : NULL;
    a->nodes = nodes;
    a->bytes = bytes;
    a->height = height;
    return 0;
}

/* ---- scalar resolution (go-yaml v2 rules; see docs/yaml.md) ---- */

static cJSON *number_item(double d, char *text)
{
    cJSON *it = cJSON_CreateNumber(d);
    if (!it)
        abort();
    it->valuestring = text; /* owned, freed by cJSON_Delete */
    return it;
}

/* Go's strconv.ParseInt/ParseUint with base 0 over s (underscores already
 * removed): optional sign, 0x/0o/0b prefixes, leading 0 = octal. Returns 1
 * and sets *ret_mag, *ret_neg when s is an integer whose magnitude fits
 * uint64, else 0. */
static int go_parse_int(const char *s, uint64_t *ret_mag, bool *ret_neg, bool *ret_signed)
{
    bool neg = false, sign = false;
    if (*s == '+' || *s == '-') {
        neg = *s == '-';
        sign = true;
        s++;
    }
    unsigned base = 10;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    } else if (s[0] == '0' && (s[1] == 'o' || s[1] == 'O')) {
        base = 8;
        s += 2;
    } else if (s[0] == '0' && (s[1] == 'b' || s[1] == 'B')) {
        base = 2;
        s += 2;
    } else if (s[0] == '0' && s[1]) {
        base = 8;
        s += 1;
    }
    if (!*s)
        return 0;
    uint64_t v = 0;
    for (; *s; s++) {
        unsigned d;
        if (*s >= '0' && *s <= '9')
            d = (unsigned)(*s - '0');
        else if (*s >= 'a' && *s <= 'f')
            d = (unsigned)(*s - 'a' + 10);
        else if (*s >= 'A' && *s <= 'F')
            d = (unsigned)(*s - 'A' + 10);
        else
            return 0;
        if (d >= base)
            return 0;
        if (v > (UINT64_MAX - d) / base)
            return 0;
        v = v * base + d;
    }
    *ret_mag = v;
    *ret_neg = neg;
    *ret_signed = sign;
    return 1;
}

/* go-yaml v2's yamlStyleFloat: ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$ */
static bool yaml_style_float(const char *s)
{
    if (*s == '+' || *s == '-')
        s++;
    if (*s == '.') {
        s++;
        if (*s < '0' || *s > '9')
            return false;
        while (*s >= '0' && *s <= '9')
            s++;
    } else {
        if (*s < '0' || *s > '9')
            return false;
        while (*s >= '0' && *s <= '9')
            s++;
        if (*s == '.') {
            s++;
            while (*s >= '0' && *s <= '9')
                s++;
        }
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (*s < '0' || *s > '9')
            return false;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    return *s == '\0';
}

/* Text for a finite double that is valid JSON and reads back to d. */
static char *format_double(double d)
{
    char tmp[64];
    if (d == floor(d) && fabs(d) < 1e21) {
        snprintf(tmp, sizeof tmp, "%.0f", d);
        if (d == 0 && signbit(d))
            snprintf(tmp, sizeof tmp, "-0");
        return xstrdup(tmp);
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    return xstrdup(tmp);
}

static cJSON *int_item(uint64_t mag, bool neg)
{
    char digits[32];
    double d;
    if (neg) {
        snprintf(digits, sizeof digits, "-%llu", (unsigned long long)mag);
        d = -(double)mag;
    } else {
        snprintf(digits, sizeof digits, "%llu", (unsigned long long)mag);
        d = (double)mag;
    }
    if (neg && mag == 0)
        snprintf(digits, sizeof digits, "0");
    return number_item(d, xstrdup(digits));
}

enum resolved { R_STRING, R_NULL, R_BOOL, R_INT, R_FLOAT, R_NONFINITE };

/* Resolves a plain scalar. For R_INT/R_FLOAT/R_BOOL *ret_item is set. */
static enum resolved resolve_plain(const char *s, cJSON **ret_item)
{
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    static const char *const trues[] = {"y",    "Y",    "yes", "Yes", "YES", "true",
                                        "True", "TRUE", "on",  "On",  "ON"};
    static const char *const falses[] = {"n",     "N",     "no",  "No",  "NO", "false",
                                         "False", "FALSE", "off", "Off", "OFF"};
    static const char *const nonfinite[] = {".nan",  ".NaN",  ".NAN",  ".inf",  ".Inf",  ".INF",
                                            "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF"};
    for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++)
        if (strcmp(s, nulls[i]) == 0)
            return R_NULL;
    for (size_t i = 0; i < sizeof trues / sizeof *trues; i++)
        if (strcmp(s, trues[i]) == 0) {
            *ret_item = cJSON_CreateTrue();
            return R_BOOL;
        }
    for (size_t i = 0; i < sizeof falses / sizeof *falses; i++)
        if (strcmp(s, falses[i]) == 0) {
            *ret_item = cJSON_CreateFalse();
            return R_BOOL;
        }
    for (size_t i = 0; i < sizeof nonfinite / sizeof *nonfinite; i++)
        if (strcmp(s, nonfinite[i]) == 0)
            return R_NONFINITE;
    char c = s[0];
    if (c == '.') {
        if (yaml_style_float(s)) {
            double d = strtod(s, NULL);
            if (isfinite(d)) {
                *ret_item = number_item(d, format_double(d));
                return R_FLOAT;
            }
        }
        return R_STRING;
    }
    if (!((c >= '0' && c <= '9') || c == '+' || c == '-'))
        return R_STRING;
    /* go-yaml removes every '_' before trying numbers */
    size_t n = strlen(s);
    char *plain = xmalloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] != '_')
            plain[k++] = s[i];
    plain[k] = '\0';
    uint64_t mag;
    bool neg, sign;
    enum resolved rs = R_STRING;
    if (go_parse_int(plain, &mag, &neg, &sign) &&
        /* ParseInt: the value fits int64; else ParseUint: unsigned, fits uint64 */
        ((neg && mag <= (uint64_t)INT64_MAX + 1) || (!neg && mag <= (uint64_t)INT64_MAX) ||
         !sign)) {
        *ret_item = int_item(mag, neg);
        rs = R_INT;
    } else if (yaml_style_float(plain)) {
        double d = strtod(plain, NULL);
        if (isfinite(d)) { /* out of range: go-yaml leaves it a string */
            *ret_item = number_item(d, format_double(d));
            rs = R_FLOAT;
        }
    }
    free(plain);
    return rs;
}

static bool tag_is(const char *tag, const char *name)
{
    size_t pl = sizeof TAG_PREFIX - 1;
    return tag && strncmp(tag, TAG_PREFIX, pl) == 0 && strcmp(tag + pl, name) == 0;
}

static cJSON *string_item(const char *s)
{
    cJSON *it = cJSON_CreateString(s);
    if (!it)
        abort();
    return it;
}

/* Builds the item for the current scalar event. */
static int scalar_item(struct yp *y, cJSON **ret)
{
    const yaml_event_t *e = &y->ev;
    const char *text = (const char *)e->data.scalar.value;
    size_t len = e->data.scalar.length;
    const char *tag = (const char *)e->data.scalar.tag;
    bool plain = e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (strlen(text) != len)
        return YERR(y, TERN_EPARSE, "NUL character in a scalar at %s", y->path[0] ? y->path : ".");
    cJSON *it = NULL;
    enum resolved rs;

    if (tag && strcmp(tag, "!") != 0 && !tag_is(tag, "str") && !tag_is(tag, "binary") &&
        !tag_is(tag, "timestamp") && !tag_is(tag, "int") && !tag_is(tag, "float") &&
        !tag_is(tag, "bool") && !tag_is(tag, "null")) {
        if (tag_is(tag, "map") || tag_is(tag, "seq"))
            return YERR(y, TERN_EPARSE, "tag %s on a scalar", tag);
        /* go-yaml: a scalar with a tag it cannot resolve keeps its text */
        *ret = string_item(text);
        return 0;
    }
    if (!tag || strcmp(tag, "!") == 0) {
        if (!plain || (tag && strcmp(tag, "!") == 0)) {
            *ret = string_item(text);
            return 0;
        }
        rs = resolve_plain(text, &it);
        switch (rs) {
        case R_NULL:
            *ret = cJSON_CreateNull();
            return 0;
        case R_NONFINITE:
            return YERR(y, TERN_EPARSE, "%s is not representable in JSON", text);
        case R_STRING:
            *ret = string_item(text);
            return 0;
        default:
            *ret = it;
            return 0;
        }
    }
    if (tag_is(tag, "str") || tag_is(tag, "binary") || tag_is(tag, "timestamp")) {
        *ret = string_item(text);
        return 0;
    }
    rs = resolve_plain(text, &it);
    if (rs == R_NONFINITE) {
        return YERR(y, TERN_EPARSE, "%s is not representable in JSON", text);
    }
    bool ok = (tag_is(tag, "null") && rs == R_NULL) || (tag_is(tag, "bool") && rs == R_BOOL) ||
              (tag_is(tag, "int") && rs == R_INT) ||
              (tag_is(tag, "float") && (rs == R_INT || rs == R_FLOAT));
    if (!ok) {
        cJSON_Delete(it);
        return YERR(y, TERN_EPARSE, "cannot decode \"%.64s\" as %s", text, tag);
    }
    *ret = rs == R_NULL ? cJSON_CreateNull() : it;
    return 0;
}

/* ---- nodes ---- */

static int parse_node(struct yp *y, int depth, cJSON **ret, int *ret_height);

/* Size of a tree in nodes and bytes (keys and strings). */
static void tree_size(const cJSON *it, size_t *nodes, size_t *bytes)
{
    for (; it; it = it->next) {
        (*nodes)++;
        if (it->string)
            *bytes += strlen(it->string);
        if (cJSON_IsString(it))
            *bytes += strlen(it->valuestring);
        tree_size(it->child, nodes, bytes);
    }
}

/* The key text of the current event (a scalar, or an alias of a scalar),
 * newly allocated. */
static int key_text(struct yp *y, char **ret, bool *ret_merge)
{
    const yaml_event_t *e = &y->ev;
    if (e->type == YAML_SCALAR_EVENT) {
        const char *text = (const char *)e->data.scalar.value;
        if (strlen(text) != e->data.scalar.length)
            return YERR(y, TERN_EPARSE, "NUL character in a key");
        const char *tag = (const char *)e->data.scalar.tag;
        *ret_merge = e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && strcmp(text, "<<") == 0 &&
                     (!tag || tag_is(tag, "merge"));
        int r = account(y, 0, e->data.scalar.length);
        if (r)
            return r;
        if (e->data.scalar.anchor) {
            size_t idx = anchor_begin(y, (const char *)e->data.scalar.anchor);
            cJSON *s = string_item(text);
            r = anchor_end(y, idx, s, text, 1, strlen(text), 0);
            cJSON_Delete(s);
            if (r)
                return r;
        }
        *ret = xstrdup(text);
        return 0;
    }
    if (e->type == YAML_ALIAS_EVENT) {
        const char *name = (const char *)e->data.alias.anchor;
        struct anchor *a = anchor_find(y, name);
        if (!a || !a->node)
            return YERR(y, TERN_EPARSE, "unknown anchor \"%s\"", name);
        if (!a->text)
            return YERR(y, TERN_EPARSE, "alias \"%s\" used as a key does not name a scalar", name);
        if (++y->aliases > y->lim.max_aliases)
            return YERR(y, TERN_ETOOLARGE, "more than %u aliases", y->lim.max_aliases);
        int r = account(y, 0, strlen(a->text));
        if (r)
            return r;
        *ret_merge = false;
        *ret = xstrdup(a->text);
        return 0;
    }
    return YERR(y, TERN_EPARSE, "mapping keys must be scalars%s%s", y->path[0] ? " at " : "",
                y->path);
}

/* Merges the `<<` sources (an object or an array of objects) into obj:
 * only keys obj lacks are added, earlier sources winning. */
static int apply_merges(struct yp *y, cJSON *obj, struct strset *ks, cJSON *merges,
                        const yaml_mark_t *mark)
{
    for (cJSON *src = merges->child; src; src = src->next) {
        cJSON *list = src;
        bool is_list = cJSON_IsArray(src);
        if (!is_list && !cJSON_IsObject(src))
            return yerr_at(y, TERN_EPARSE, mark,
                           "the value of << must be a mapping or a sequence of mappings");
        for (cJSON *m = is_list ? list->child : list; m; m = is_list ? m->next : NULL) {
            if (!cJSON_IsObject(m))
                return yerr_at(y, TERN_EPARSE, mark,
                               "the value of << must be a mapping or a sequence of mappings");
            for (cJSON *kv = m->child; kv; kv = kv->next) {
                if (strset_has(ks, kv->string))
                    continue;
                size_t nodes = 0, bytes = 0;
                cJSON *saved = kv->next;
                kv->next = NULL;
                tree_size(kv, &nodes, &bytes);
                kv->next = saved;
                int r = account(y, nodes, bytes);
                if (r)
                    return r;
                cJSON *copy = json_dup(kv);
                cJSON_AddItemToObject(obj, kv->string, copy);
                strset_add(ks, copy->string);
            }
            if (!is_list)
                break;
        }
    }
    return 0;
}

static int parse_mapping(struct yp *y, int depth, cJSON **ret, int *ret_height)
{
    cJSON *obj = cJSON_CreateObject();
    cJSON *merges = NULL;
    struct strset ks = {0};
    char *key = NULL;
    cJSON *val = NULL;
    int height = 1;
    int r;
    yaml_mark_t start = y->ev.start_mark;
    for (;;) {
        if ((r = next_event(y)))
            goto out;
        if (y->ev.type == YAML_MAPPING_END_EVENT)
            break;
        bool merge = false;
        if ((r = key_text(y, &key, &merge)))
            goto out;
        size_t saved = path_push_key(y, key);
        if ((r = next_event(y)))
            goto out;
        yaml_mark_t vmark = y->ev.start_mark;
        int h = 0;
        if ((r = parse_node(y, depth, &val, &h)))
            goto out;
        if (h + 1 > height)
            height = h + 1;
        if (merge) {
            if (!merges)
                merges = cJSON_CreateArray();
            cJSON_AddItemToArray(merges, val);
            val = NULL;
            free(key);
            key = NULL;
        } else {
            /* the item owns the key; the set borrows it */
            val->string = key;
            key = NULL;
            cJSON_AddItemToArray(obj, val);
            cJSON *added = val;
            val = NULL;
            if (strset_add(&ks, added->string)) {
                r = yerr_at(y, TERN_EPARSE, &vmark, "duplicate key \"%s\"", y->path);
                goto out;
            }
        }
        y->path[saved] = '\0';
    }
    if (merges && (r = apply_merges(y, obj, &ks, merges, &start)))
        goto out;
    *ret = obj;
    obj = NULL;
    *ret_height = height;
out:
    free(key);
    cJSON_Delete(val);
    cJSON_Delete(merges);
    cJSON_Delete(obj);
    strset_done(&ks);
    return r;
}

static int parse_sequence(struct yp *y, int depth, cJSON **ret, int *ret_height)
{
    cJSON *arr = cJSON_CreateArray();
    int height = 1;
    int r;
    for (int i = 0;; i++) {
        if ((r = next_event(y)))
            goto out;
        if (y->ev.type == YAML_SEQUENCE_END_EVENT)
            break;
        size_t saved = path_push_index(y, i);
        cJSON *val = NULL;
        int h = 0;
        if ((r = parse_node(y, depth, &val, &h)))
            goto out;
        if (h + 1 > height)
            height = h + 1;
        cJSON_AddItemToArray(arr, val);
        y->path[saved] = '\0';
    }
    *ret = arr;
    arr = NULL;
    *ret_height = height;
out:
    cJSON_Delete(arr);
    return r;
}

/* Builds the node whose first event is current; leaves its last event current.
 * depth = number of collections enclosing the node. */
static int parse_node(struct yp *y, int depth, cJSON **ret, int *ret_height)
{
    yaml_event_t *e = &y->ev;
    const char *anchor = NULL;
    const char *tag = NULL;
    int r;
    switch (e->type) {
    case YAML_ALIAS_EVENT: {
        const char *name = (const char *)e->data.alias.anchor;
        struct anchor *a = anchor_find(y, name);
        if (!a)
            return YERR(y, TERN_EPARSE, "unknown anchor \"%s\"", name);
        if (!a->node)
            return YERR(y, TERN_EPARSE, "alias \"%s\" refers to a node that contains it", name);
        if (++y->aliases > y->lim.max_aliases)
            return YERR(y, TERN_ETOOLARGE, "more than %u aliases", y->lim.max_aliases);
        if (depth + a->height > y->lim.max_depth)
            return YERR(y, TERN_ETOOLARGE, "nesting deeper than %d (after alias expansion)",
                        y->lim.max_depth);
        if ((r = account(y, a->nodes, a->bytes)))
            return r;
        *ret = json_dup(a->node);
        *ret_height = a->height;
        return 0;
    }
    case YAML_SCALAR_EVENT:
        anchor = (const char *)e->data.scalar.anchor;
        break;
    case YAML_SEQUENCE_START_EVENT:
        anchor = (const char *)e->data.sequence_start.anchor;
        tag = (const char *)e->data.sequence_start.tag;
        if (tag && (tag_is(tag, "map") ||
                    (strncmp(tag, TAG_PREFIX, sizeof TAG_PREFIX - 1) == 0 && !tag_is(tag, "seq"))))
            return YERR(y, TERN_EPARSE, "tag %s on a sequence", tag);
        break;
    case YAML_MAPPING_START_EVENT:
        anchor = (const char *)e->data.mapping_start.anchor;
        tag = (const char *)e->data.mapping_start.tag;
        if (tag && (tag_is(tag, "seq") ||
                    (strncmp(tag, TAG_PREFIX, sizeof TAG_PREFIX - 1) == 0 && !tag_is(tag, "map"))))
            return YERR(y, TERN_EPARSE, "tag %s on a mapping", tag);
        break;
    default:
        return YERR(y, TERN_EPARSE, "unexpected event");
    }

    size_t nodes0 = y->nodes, bytes0 = y->bytes;
    size_t aidx = 0;
    if (anchor)
        aidx = anchor_begin(y, anchor);
    cJSON *node = NULL;
    int height = 0;
    char *text = NULL;
    if (e->type == YAML_SCALAR_EVENT) {
        if ((r = account(y, 1, e->data.scalar.length)))
            return r;
        if ((r = scalar_item(y, &node)))
            return r;
        if (anchor)
            text = xstrdup((const char *)e->data.scalar.value);
    } else {
        if (depth + 1 > y->lim.max_depth)
            return YERR(y, TERN_ETOOLARGE, "nesting deeper than %d", y->lim.max_depth);
        if ((r = account(y, 1, 0)))
            return r;
        if (e->type == YAML_MAPPING_START_EVENT)
            r = parse_mapping(y, depth + 1, &node, &height);
        else
            r = parse_sequence(y, depth + 1, &node, &height);
        if (r)
            return r;
    }
    if (anchor) {
        /* the anchor entry may have moved (realloc) but its index is stable */
        r = anchor_end(y, aidx, node, text, y->nodes - nodes0, y->bytes - bytes0, height);
        free(text);
        if (r) {
            cJSON_Delete(node);
            return r;
        }
    }
    *ret = node;
    *ret_height = height;
    return 0;
}

/* ---- streams ---- */

static void opts_defaults(const struct yamljson_opts *o, struct yamljson_opts *lim)
{
    *lim = o ? *o : (struct yamljson_opts){0};
    if (!lim->max_bytes)
        lim->max_bytes = TERN_YAML_MAX_BYTES;
    if (lim->max_depth <= 0)
        lim->max_depth = TERN_YAML_MAX_DEPTH;
    if (!lim->max_aliases)
        lim->max_aliases = TERN_YAML_MAX_ALIASES;
    if (!lim->max_nodes)
        lim->max_nodes = TERN_YAML_MAX_NODES;
    if (!lim->max_expanded_bytes)
        lim->max_expanded_bytes = TERN_YAML_MAX_EXPANDED_BYTES;
    if (!lim->max_docs)
        lim->max_docs = TERN_YAML_MAX_DOCS;
}

/* Parses every document; stops with TERN_EPARSE at a second one when
 * single. Empty/null documents are not added. */
static int parse_docs(const char *s, size_t n, const struct yamljson_opts *o, bool single,
                      cJSON **ret, struct tern_err *err)
{
    struct yp y = {.err = err};
    opts_defaults(o, &y.lim);
    if (n > y.lim.max_bytes)
        return err_set(err, TERN_ETOOLARGE, "YAML stream of %zu bytes exceeds the limit of %zu", n,
                       y.lim.max_bytes);
    if (!yaml_parser_initialize(&y.parser))
        abort();
    yaml_parser_set_input_string(&y.parser, (const unsigned char *)s, n);
    cJSON *docs = cJSON_CreateArray();
    unsigned ndocs = 0;
    int r;
    for (;;) {
        if ((r = next_event(&y)))
            goto out;
        if (y.ev.type == YAML_STREAM_END_EVENT)
            break;
        if (y.ev.type == YAML_STREAM_START_EVENT)
            continue;
        if (y.ev.type != YAML_DOCUMENT_START_EVENT) {
            r = YERR(&y, TERN_EPARSE, "unexpected event");
            goto out;
        }
        if (++ndocs > y.lim.max_docs) {
            r = YERR(&y, TERN_ETOOLARGE, "more than %u documents", y.lim.max_docs);
            goto out;
        }
        if (single && ndocs > 1) {
            r = YERR(&y, TERN_EPARSE, "expected a single YAML document");
            goto out;
        }
        anchors_clear(&y);
        y.path[0] = '\0';
        if ((r = next_event(&y)))
            goto out;
        cJSON *root = NULL;
        int h = 0;
        if ((r = parse_node(&y, 0, &root, &h)))
            goto out;
        if (cJSON_IsNull(root))
            cJSON_Delete(root);
        else
            cJSON_AddItemToArray(docs, root);
        if ((r = next_event(&y)))
            goto out;
        if (y.ev.type != YAML_DOCUMENT_END_EVENT) {
            r = YERR(&y, TERN_EPARSE, "expected the end of the document");
            goto out;
        }
    }
    *ret = docs;
    docs = NULL;
out:
    cJSON_Delete(docs);
    anchors_clear(&y);
    free(y.anchors);
    free(y.ahash);
    if (y.have_ev)
        yaml_event_delete(&y.ev);
    yaml_parser_delete(&y.parser);
    return r;
}

int yamljson_parse_stream(const char *s, size_t n, const struct yamljson_opts *o, cJSON **ret,
                          struct tern_err *err)
{
    return parse_docs(s, n, o, false, ret, err);
}

int yamljson_parse_one(const char *s, size_t n, const struct yamljson_opts *o, cJSON **ret,
                       struct tern_err *err)
{
    cJSON *docs = NULL;
    int r = parse_docs(s, n, o, true, &docs, err);
    if (r)
        return r;
    cJSON *doc = cJSON_DetachItemFromArray(docs, 0);
    cJSON_Delete(docs);
    *ret = doc ? doc : cJSON_CreateNull();
    return 0;
}
