/* apischema.c - pruning, defaulting and validation by structural schemas.
 * See apischema.h. */
#include "apischema.h"

#include "base/buf.h"
#include "base/mem.h"
#include "json/json.h"

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void apischema_paths_done(struct apischema_paths *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->v[i]);
    free(p->v);
    p->v = NULL;
    p->n = 0;
}

static void paths_add(struct apischema_paths *p, char *s)
{
    p->v = xreallocarray(p->v, p->n + 1, sizeof(char *));
    p->v[p->n++] = s;
}

static bool flag(const cJSON *schema, const char *key)
{
    return cJSON_IsTrue(json_get(schema, key));
}

static const char *stype(const cJSON *schema)
{
    const cJSON *t = json_get(schema, "type");
    return cJSON_IsString(t) ? t->valuestring : "";
}

static char *join(const char *path, const char *key)
{
    return *path ? xasprintf("%s.%s", path, key) : xstrdup(key);
}

static char *join_idx(const char *path, int i)
{
    return xasprintf("%s[%d]", path, i);
}

/* ---- pruning ----------------------------------------------------------- */

static void prune(const cJSON *schema, cJSON *obj, const char *path, bool root,
                  struct apischema_paths *pruned);

static void prune_one_of_many(const cJSON *schema, cJSON *obj, const char *path,
                              struct apischema_paths *pruned)
{
    prune(schema, obj, path, false, pruned);
}

static void prune(const cJSON *schema, cJSON *obj, const char *path, bool root,
                  struct apischema_paths *pruned)
{
    if (!schema)
        return;
    if (flag(schema, "x-kubernetes-preserve-unknown-fields") && !json_get(schema, "properties") &&
        !json_get(schema, "additionalProperties") && !json_get(schema, "items"))
        return;
    if (cJSON_IsObject(obj)) {
        const cJSON *props = json_get(schema, "properties");
        const cJSON *addl = json_get(schema, "additionalProperties");
        bool preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
        bool embedded = flag(schema, "x-kubernetes-embedded-resource");
        cJSON *c = obj->child;
        while (c) {
            cJSON *next = c->next;
            const char *k = c->string;
            char *sub = join(path, k);
            const cJSON *ps = json_get(props, k);
            if ((root || embedded) &&
                (strcmp(k, "apiVersion") == 0 || strcmp(k, "kind") == 0 ||
                 strcmp(k, "metadata") == 0)) {
                if (ps && strcmp(k, "metadata") != 0)
                    prune(ps, c, sub, false, pruned);
            } else if (ps) {
                prune(ps, c, sub, false, pruned);
            } else if (cJSON_IsObject(addl)) {
                prune(addl, c, sub, false, pruned);
            } else if (cJSON_IsTrue(addl) || preserve) {
                /* kept as is */
            } else {
                if (pruned)
                    paths_add(pruned, xstrdup(sub));
                cJSON_Delete(cJSON_DetachItemViaPointer(obj, c));
            }
            free(sub);
            c = next;
        }
    } else if (cJSON_IsArray(obj)) {
        const cJSON *items = json_get(schema, "items");
        int i = 0;
        for (cJSON *c = obj->child; items && c; c = c->next, i++) {
            char *sub = join_idx(path, i);
            prune_one_of_many(items, c, sub, pruned);
            free(sub);
        }
    }
}

void apischema_prune(const cJSON *schema, cJSON *obj, struct apischema_paths *pruned)
{
    prune(schema, obj, "", true, pruned);
}

/* ---- defaulting -------------------------------------------------------- */

static void apply_default(const cJSON *schema, cJSON *obj)
{
    if (!schema)
        return;
    if (cJSON_IsObject(obj)) {
        const cJSON *props = json_get(schema, "properties");
        for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
            cJSON *cur = cJSON_GetObjectItemCaseSensitive(obj, p->string);
            const cJSON *d = json_get(p, "default");
            if (!cur && d) {
                cJSON_AddItemToObject(obj, p->string, json_dup(d));
                cur = cJSON_GetObjectItemCaseSensitive(obj, p->string);
            }
            if (cur)
                apply_default(p, cur);
        }
        const cJSON *addl = json_get(schema, "additionalProperties");
        if (cJSON_IsObject(addl))
            for (cJSON *c = obj->child; c; c = c->next)
                if (!json_get(props, c->string))
                    apply_default(addl, c);
    } else if (cJSON_IsArray(obj)) {
        const cJSON *items = json_get(schema, "items");
        for (cJSON *c = obj->child; items && c; c = c->next)
            apply_default(items, c);
    }
}

void apischema_default(const cJSON *schema, cJSON *obj)
{
    apply_default(schema, obj);
}

/* ---- validation -------------------------------------------------------- */

static const char *json_type_name(const cJSON *v)
{
    if (cJSON_IsString(v))
        return "string";
    if (cJSON_IsBool(v))
        return "boolean";
    if (cJSON_IsNumber(v)) {
        if (v->valuestring && (strchr(v->valuestring, '.') || strchr(v->valuestring, 'e') ||
                               strchr(v->valuestring, 'E')))
            return "number";
        return floor(v->valuedouble) == v->valuedouble ? "integer" : "number";
    }
    if (cJSON_IsArray(v))
        return "array";
    if (cJSON_IsObject(v))
        return "object";
    return "null";
}

static bool is_integer(const cJSON *v)
{
    return cJSON_IsNumber(v) && strcmp(json_type_name(v), "integer") == 0;
}

/* Translates the common ECMA-262 constructs to POSIX ERE: \d \w \s (and
 * negations outside brackets), escapes inside brackets, (?: groups. */
static char *ecma_to_posix(const char *re)
{
    struct buf b;
    buf_init(&b, SIZE_MAX / 2);
    bool in_br = false;
    for (const char *p = re; *p; p++) {
        if (!in_br && *p == '[') {
            in_br = true;
            buf_putc(&b, '[');
            if (p[1] == '^')
                buf_putc(&b, *++p);
            if (p[1] == ']')
                buf_putc(&b, *++p);
            continue;
        }
        if (in_br && *p == ']') {
            in_br = false;
            buf_putc(&b, ']');
            continue;
        }
        if (!in_br && p[0] == '(' && p[1] == '?' && p[2] == ':') {
            buf_putc(&b, '(');
            p += 2;
            continue;
        }
        if (*p == '\\' && p[1]) {
            p++;
            if (in_br) {
                switch (*p) {
                case 'd': buf_puts(&b, "0-9"); break;
                case 'w': buf_puts(&b, "A-Za-z0-9_"); break;
                case 's': buf_puts(&b, "[:space:]"); break;
                case 'n': buf_putc(&b, '\n'); break;
                case 't': buf_putc(&b, '\t'); break;
                default: buf_putc(&b, *p); break;
                }
                continue;
            }
            switch (*p) {
            case 'd': buf_puts(&b, "[0-9]"); break;
            case 'D': buf_puts(&b, "[^0-9]"); break;
            case 'w': buf_puts(&b, "[A-Za-z0-9_]"); break;
            case 'W': buf_puts(&b, "[^A-Za-z0-9_]"); break;
            case 's': buf_puts(&b, "[[:space:]]"); break;
            case 'S': buf_puts(&b, "[^[:space:]]"); break;
            case 'n': buf_putc(&b, '\n'); break;
            case 't': buf_putc(&b, '\t'); break;
            default:
                buf_putc(&b, '\\');
                buf_putc(&b, *p);
            }
        } else {
            buf_putc(&b, *p);
        }
    }
    return buf_steal(&b);
}

/* 1 match, 0 no match, -1 the pattern does not compile */
static int pattern_match(const char *pattern, const char *s)
{
    char *px = ecma_to_posix(pattern);
    regex_t re;
    int rc = regcomp(&re, px, REG_EXTENDED | REG_NOSUB);
    free(px);
    if (rc)
        return -1;
    int m = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return m;
}

static void fmt_num(char *out, size_t n, const cJSON *v)
{
    if (v->valuestring)
        snprintf(out, n, "%s", v->valuestring);
    else if (floor(v->valuedouble) == v->valuedouble && fabs(v->valuedouble) < 1e15)
        snprintf(out, n, "%lld", (long long)v->valuedouble);
    else
        snprintf(out, n, "%g", v->valuedouble);
}

static void validate(const cJSON *schema, const cJSON *v, const char *path, bool root,
                     struct apistatus_fields *f);

static size_t count_errors_of(const cJSON *schema, const cJSON *v, const char *path)
{
    struct apistatus_fields tmp = {0};
    validate(schema, v, path, false, &tmp);
    size_t n = tmp.n;
    apistatus_fields_done(&tmp);
    return n;
}

static void validate_type(const cJSON *schema, const cJSON *v, const char *path, bool *ok,
                          struct apistatus_fields *f)
{
    const char *t = stype(schema);
    *ok = true;
    if (cJSON_IsNull(v)) {
        if (flag(schema, "nullable") || !*t)
            return;
        char *d = xasprintf("%s in body must be of type %s: \"null\"", path, t);
        apistatus_fields_addv(f, APISTATUS_F_TYPE, path, "\"null\"", d);
        free(d);
        *ok = false;
        return;
    }
    if (flag(schema, "x-kubernetes-int-or-string")) {
        if (!cJSON_IsString(v) && !is_integer(v)) {
            char *d = xasprintf("%s in body must be of type integer,string: \"%s\"", path,
                                json_type_name(v));
            char *val = xasprintf("\"%s\"", json_type_name(v));
            apistatus_fields_addv(f, APISTATUS_F_TYPE, path, val, d);
            free(val);
            free(d);
            *ok = false;
        }
        return;
    }
    if (!*t)
        return;
    const char *actual = json_type_name(v);
    bool match = strcmp(t, actual) == 0 || (strcmp(t, "number") == 0 && cJSON_IsNumber(v));
    if (!match) {
        char *d = xasprintf("%s in body must be of type %s: \"%s\"", path, t, actual);
        char *val = xasprintf("\"%s\"", actual);
        apistatus_fields_addv(f, APISTATUS_F_TYPE, path, val, d);
        free(val);
        free(d);
        *ok = false;
    }
}

static void validate_string(const cJSON *schema, const cJSON *v, const char *path,
                            struct apistatus_fields *f)
{
    const char *s = v->valuestring;
    size_t chars = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xc0) != 0x80)
            chars++;
    int64_t lim;
    const cJSON *ml = json_get(schema, "maxLength");
    if (ml && json_item_int64(ml, &lim) == 0 && (int64_t)chars > lim) {
        char *d = xasprintf("may not be more than %lld bytes", (long long)lim);
        apistatus_fields_add(f, APISTATUS_F_TOOLONG, path, v, d);
        free(d);
    }
    const cJSON *mn = json_get(schema, "minLength");
    if (mn && json_item_int64(mn, &lim) == 0 && (int64_t)chars < lim) {
        char *d = xasprintf("%s in body should be at least %lld chars long", path, (long long)lim);
        apistatus_fields_add(f, APISTATUS_F_INVALID, path, v, d);
        free(d);
    }
    const cJSON *pat = json_get(schema, "pattern");
    if (cJSON_IsString(pat) && pattern_match(pat->valuestring, s) == 0) {
        char *d = xasprintf("%s in body should match '%s'", path, pat->valuestring);
        apistatus_fields_add(f, APISTATUS_F_INVALID, path, v, d);
        free(d);
    }
    const cJSON *fmt = json_get(schema, "format");
    if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, "date-time") == 0) {
        /* RFC 3339: YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm) */
        bool ok = strlen(s) >= 20 && s[4] == '-' && s[7] == '-' && (s[10] == 'T' || s[10] == 't') &&
                  s[13] == ':' && s[16] == ':';
        if (!ok) {
            char *d = xasprintf("%s in body must be of type date-time: \"%s\"", path, s);
            apistatus_fields_add(f, APISTATUS_F_INVALID, path, v, d);
            free(d);
        }
    }
}

static void validate_number(const cJSON *schema, const cJSON *v, const char *path,
                            struct apistatus_fields *f)
{
    double x = v->valuedouble;
    char lim[64];
    const cJSON *mx = json_get(schema, "maximum");
    if (cJSON_IsNumber(mx)) {
        bool excl = flag(schema, "exclusiveMaximum");
        if (excl ? x >= mx->valuedouble : x > mx->valuedouble) {
            fmt_num(lim, sizeof(lim), mx);
            char *d = xasprintf("%s in body should be less than %s%s", path,
                                excl ? "" : "or equal to ", lim);
            apistatus_fields_add(f, APISTATUS_F_INVALID, path, v, d);
            free(d);
        }
    }
    const cJSON *mn = json_get(schema, "minimum");
    if (cJSON_IsNumber(mn)) {
        bool excl = flag(schema, "exclusiveMinimum");
        if (excl ? x <= mn->valuedouble : x < mn->valuedouble) {
            fmt_num(lim, sizeof(lim), mn);
            char *d = xasprintf("%s in body should be greater than %s%s", path,
                                excl ? "" : "or equal to ", lim);
            apistatus_fields_add(f, APISTATUS_F_INVALID, path, v, d);
            free(d);
        }
    }
    const cJSON *mo = json_get(schema, "multipleOf");
    if (cJSON_IsNumber(mo) && mo->valuedouble > 0) {
        double q = x / mo->valuedouble;
        if (fabs(q - round(q)) > 1e-9) {
            fmt_num(lim, sizeof(lim), mo);
            char *d = xasprintf("%s in body should be a multiple of %s", path, lim);
            apistatus_fields_add(f, APISTATUS_F_INVALID, path, v, d);
            free(d);
        }
    }
    const cJSON *fmt = json_get(schema, "format");
    if (cJSON_IsString(fmt) && strcmp(fmt->valuestring, "int32") == 0 &&
        (x > 2147483647.0 || x < -2147483648.0)) {
        char *d = xasprintf("%s in body must be of type int32: \"%s\"", path,
                            v->valuestring ? v->valuestring : "");
        apistatus_fields_add(f, APISTATUS_F_INVALID, path, v, d);
        free(d);
    }
}

static void validate_enum(const cJSON *schema, const cJSON *v, const char *path,
                          struct apistatus_fields *f)
{
    const cJSON *e = json_get(schema, "enum");
    if (!cJSON_IsArray(e))
        return;
    for (const cJSON *c = e->child; c; c = c->next)
        if (cJSON_Compare(c, v, 1))
            return;
    struct buf b;
    buf_init(&b, SIZE_MAX / 2);
    buf_puts(&b, "supported values: ");
    for (const cJSON *c = e->child; c; c = c->next) {
        char *s = json_print(c);
        buf_printf(&b, "%s%s", c == e->child ? "" : ", ", s);
        free(s);
    }
    apistatus_fields_add(f, APISTATUS_F_UNSUPPORTED, path, v, buf_str(&b));
    buf_done(&b);
}

static void validate(const cJSON *schema, const cJSON *v, const char *path, bool root,
                     struct apistatus_fields *f)
{
    if (!schema || !cJSON_IsObject(schema))
        return;
    bool ok;
    validate_type(schema, v, path, &ok, f);
    if (!ok || cJSON_IsNull(v))
        return;
    validate_enum(schema, v, path, f);
    if (cJSON_IsString(v))
        validate_string(schema, v, path, f);
    else if (cJSON_IsNumber(v))
        validate_number(schema, v, path, f);
    int64_t lim;
    if (cJSON_IsObject(v)) {
        const cJSON *props = json_get(schema, "properties");
        const cJSON *req = json_get(schema, "required");
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
            if (!cJSON_IsString(r))
                continue;
            if (!json_get(v, r->valuestring)) {
                char *sub = join(path, r->valuestring);
                apistatus_fields_addv(f, APISTATUS_F_REQUIRED, sub, NULL, NULL);
                free(sub);
            }
        }
        int nprops = cJSON_GetArraySize(v);
        const cJSON *mp = json_get(schema, "maxProperties");
        if (mp && json_item_int64(mp, &lim) == 0 && nprops > lim) {
            char *d = xasprintf("must have at most %lld items", (long long)lim);
            char *val = xasprintf("%d", nprops);
            apistatus_fields_addv(f, APISTATUS_F_TOOMANY, path, val, d);
            free(val);
            free(d);
        }
        const cJSON *np = json_get(schema, "minProperties");
        if (np && json_item_int64(np, &lim) == 0 && nprops < lim) {
            char *d = xasprintf("%s in body should have at least %lld properties", path,
                                (long long)lim);
            apistatus_fields_addv(f, APISTATUS_F_INVALID, path, "{}", d);
            free(d);
        }
        const cJSON *addl = json_get(schema, "additionalProperties");
        for (const cJSON *c = v->child; c; c = c->next) {
            if (root && strcmp(c->string, "metadata") == 0) {
                /* only name and generateName may be constrained */
                const cJSON *mdp = json_get(json_get(props, "metadata"), "properties");
                static const char *keys[] = {"name", "generateName"};
                for (size_t k = 0; k < 2; k++) {
                    const cJSON *ks = json_get(mdp, keys[k]), *kv = json_get(c, keys[k]);
                    if (ks && kv) {
                        char *sub = xasprintf("metadata.%s", keys[k]);
                        validate(ks, kv, sub, false, f);
                        free(sub);
                    }
                }
                continue;
            }
            char *sub = join(path, c->string);
            const cJSON *ps = json_get(props, c->string);
            if (ps)
                validate(ps, c, sub, false, f);
            else if (cJSON_IsObject(addl))
                validate(addl, c, sub, false, f);
            free(sub);
        }
    } else if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        const cJSON *mi = json_get(schema, "maxItems");
        if (mi && json_item_int64(mi, &lim) == 0 && n > lim) {
            char *d = xasprintf("must have at most %lld items", (long long)lim);
            char *val = xasprintf("%d", n);
            apistatus_fields_addv(f, APISTATUS_F_TOOMANY, path, val, d);
            free(val);
            free(d);
        }
        const cJSON *ni = json_get(schema, "minItems");
        if (ni && json_item_int64(ni, &lim) == 0 && n < lim) {
            char *d = xasprintf("%s in body should have at least %lld items", path,
                                (long long)lim);
            char *val = json_print(v);
            apistatus_fields_addv(f, APISTATUS_F_INVALID, path, val, d);
            free(val);
            free(d);
        }
        const cJSON *items = json_get(schema, "items");
        int i = 0;
        for (const cJSON *c = v->child; c; c = c->next, i++) {
            char *sub = join_idx(path, i);
            validate(items, c, sub, false, f);
            free(sub);
        }
        const cJSON *lt = json_get(schema, "x-kubernetes-list-type");
        const cJSON *keys = json_get(schema, "x-kubernetes-list-map-keys");
        if (cJSON_IsString(lt) &&
            (strcmp(lt->valuestring, "set") == 0 || strcmp(lt->valuestring, "map") == 0)) {
            bool is_map = lt->valuestring[0] == 'm';
            i = 0;
            for (const cJSON *c = v->child; c; c = c->next, i++) {
                int j = 0;
                for (const cJSON *d = v->child; d != c; d = d->next, j++) {
                    bool same;
                    if (is_map && cJSON_IsArray(keys)) {
                        same = true;
                        for (const cJSON *k = keys->child; k && same; k = k->next) {
                            const cJSON *a = json_get(c, k->valuestring);
                            const cJSON *b = json_get(d, k->valuestring);
                            same = (!a && !b) || (a && b && cJSON_Compare(a, b, 1));
                        }
                    } else {
                        same = cJSON_Compare(c, d, 1);
                    }
                    if (same) {
                        char *sub = join_idx(path, i);
                        apistatus_fields_add(f, APISTATUS_F_DUPLICATE, sub, c, NULL);
                        free(sub);
                        break;
                    }
                }
            }
        }
    }
    const cJSON *all = json_get(schema, "allOf");
    for (const cJSON *s = all ? all->child : NULL; s; s = s->next)
        validate(s, v, path, false, f);
    const cJSON *any = json_get(schema, "anyOf");
    if (cJSON_IsArray(any) && any->child) {
        bool one = false;
        for (const cJSON *s = any->child; s && !one; s = s->next)
            one = count_errors_of(s, v, path) == 0;
        if (!one) {
            char *d = xasprintf("%s in body must be of type %s", path, "anyOf");
            apistatus_fields_add(f, APISTATUS_F_INVALID, path, NULL, d);
            free(d);
        }
    }
    const cJSON *oneof = json_get(schema, "oneOf");
    if (cJSON_IsArray(oneof) && oneof->child) {
        int good = 0;
        for (const cJSON *s = oneof->child; s; s = s->next)
            good += count_errors_of(s, v, path) == 0;
        if (good != 1) {
            char *d = xasprintf("%s in body must validate one and only one schema (oneOf)",
                                path);
            apistatus_fields_add(f, APISTATUS_F_INVALID, path, NULL, d);
            free(d);
        }
    }
    const cJSON *no = json_get(schema, "not");
    if (cJSON_IsObject(no) && count_errors_of(no, v, path) == 0) {
        char *d = xasprintf("%s in body should not validate the schema (not)", path);
        apistatus_fields_add(f, APISTATUS_F_INVALID, path, NULL, d);
        free(d);
    }
}

void apischema_validate(const cJSON *schema, const cJSON *obj, struct apistatus_fields *f)
{
    validate(schema, obj, "", true, f);
}

/* ---- structural checks -------------------------------------------------- */

static void structural(const cJSON *s, const char *path, bool root, bool in_metadata,
                       struct apistatus_fields *f);

static void structural_children(const cJSON *s, const char *path, struct apistatus_fields *f)
{
    const cJSON *props = json_get(s, "properties");
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        char *sub = xasprintf("%s.properties[%s]", path, p->string);
        structural(p, sub, false, false, f);
        free(sub);
    }
    const cJSON *items = json_get(s, "items");
    if (cJSON_IsObject(items)) {
        char *sub = xasprintf("%s.items", path);
        structural(items, sub, false, false, f);
        free(sub);
    } else if (items) {
        char *sub = xasprintf("%s.items", path);
        apistatus_fields_addv(f, APISTATUS_F_FORBIDDEN, sub, NULL,
                              "items must be a schema object and not an array");
        free(sub);
    }
    const cJSON *addl = json_get(s, "additionalProperties");
    if (cJSON_IsObject(addl)) {
        char *sub = xasprintf("%s.additionalProperties", path);
        structural(addl, sub, false, false, f);
        free(sub);
        if (props) {
            char *sub2 = xasprintf("%s.additionalProperties", path);
            apistatus_fields_addv(f, APISTATUS_F_FORBIDDEN, sub2, NULL,
                                  "additionalProperties and properties are mutual exclusive");
            free(sub2);
        }
    }
}

static void structural(const cJSON *s, const char *path, bool root, bool in_metadata,
                       struct apistatus_fields *f)
{
    (void)in_metadata;
    if (!cJSON_IsObject(s)) {
        apistatus_fields_addv(f, APISTATUS_F_INVALID, path, NULL, "must be a schema object");
        return;
    }
    static const char *forbidden[] = {"$ref", "definitions", "dependencies", "patternProperties",
                                      "additionalItems", "id", "$schema"};
    for (size_t i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
        if (json_get(s, forbidden[i])) {
            char *sub = xasprintf("%s.%s", path, forbidden[i]);
            apistatus_fields_addv(f, APISTATUS_F_FORBIDDEN, sub, NULL,
                                  strcmp(forbidden[i], "$ref") == 0 ? "$ref is not supported"
                                                                    : NULL);
            free(sub);
        }
    const cJSON *t = json_get(s, "type");
    if (t && !cJSON_IsString(t)) {
        char *sub = xasprintf("%s.type", path);
        apistatus_fields_add(f, APISTATUS_F_INVALID, sub, t, "must be a string");
        free(sub);
    }
    const char *ty = stype(s);
    if (*ty) {
        static const char *types[] = {"object", "array", "string", "integer", "number",
                                      "boolean"};
        bool known = false;
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
            known |= strcmp(ty, types[i]) == 0;
        if (!known) {
            char *sub = xasprintf("%s.type", path);
            char *val = xasprintf("\"%s\"", ty);
            apistatus_fields_addv(f, APISTATUS_F_UNSUPPORTED, sub, val,
                                  "supported values: \"array\", \"boolean\", \"integer\", "
                                  "\"number\", \"object\", \"string\"");
            free(val);
            free(sub);
        }
    }
    bool preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    bool intstr = flag(s, "x-kubernetes-int-or-string");
    const cJSON *pu = json_get(s, "x-kubernetes-preserve-unknown-fields");
    if (pu && !cJSON_IsTrue(pu)) {
        char *sub = xasprintf("%s.x-kubernetes-preserve-unknown-fields", path);
        apistatus_fields_add(f, APISTATUS_F_INVALID, sub, pu, "must be true or undefined");
        free(sub);
    }
    if (cJSON_IsTrue(json_get(s, "uniqueItems"))) {
        char *sub = xasprintf("%s.uniqueItems", path);
        apistatus_fields_addv(f, APISTATUS_F_FORBIDDEN, sub, NULL,
                              "uniqueItems cannot be set to true since the runtime complexity "
                              "becomes quadratic");
        free(sub);
    }
    if (!*ty && !intstr && !preserve) {
        char *sub = xasprintf("%s.type", path);
        apistatus_fields_addv(f, APISTATUS_F_REQUIRED, sub, NULL,
                              "must not be empty for specified object fields");
        free(sub);
    }
    if (root) {
        if (strcmp(ty, "object") != 0) {
            char *sub = xasprintf("%s.type", path);
            char *val = xasprintf("\"%s\"", ty);
            apistatus_fields_addv(f, APISTATUS_F_INVALID, sub, val, "must be object at the root");
            free(val);
            free(sub);
        }
        const cJSON *props = json_get(s, "properties");
        const cJSON *md = json_get(props, "metadata");
        if (md) {
            const cJSON *mp = json_get(md, "properties");
            for (const cJSON *p = mp ? mp->child : NULL; p; p = p->next)
                if (strcmp(p->string, "name") != 0 && strcmp(p->string, "generateName") != 0) {
                    char *sub = xasprintf("%s.properties[metadata]", path);
                    apistatus_fields_addv(f, APISTATUS_F_FORBIDDEN, sub, NULL,
                                          "must not specify anything other than name and "
                                          "generateName, but metadata is implicitly "
                                          "specified");
                    free(sub);
                    break;
                }
        }
    }
    structural_children(s, path, f);
    const char *combs[] = {"allOf", "anyOf", "oneOf"};
    for (size_t i = 0; i < 3; i++) {
        const cJSON *c = json_get(s, combs[i]);
        int j = 0;
        for (const cJSON *x = c ? c->child : NULL; x; x = x->next, j++) {
            if (json_get(x, "type") || json_get(x, "default") || json_get(x, "nullable") ||
                json_get(x, "additionalProperties")) {
                char *sub = xasprintf("%s.%s[%d].type", path, combs[i], j);
                apistatus_fields_addv(f, APISTATUS_F_FORBIDDEN, sub, NULL,
                                      "must be empty to be structural");
                free(sub);
            }
        }
    }
    const cJSON *vals = json_get(s, "x-kubernetes-validations");
    int j = 0;
    for (const cJSON *r = vals ? vals->child : NULL; r; r = r->next, j++) {
        const cJSON *rule = json_get(r, "rule");
        if (!cJSON_IsString(rule) || !*rule->valuestring) {
            char *sub = xasprintf("%s.x-kubernetes-validations[%d].rule", path, j);
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, sub, NULL, NULL);
            free(sub);
        }
        const cJSON *msg = json_get(r, "message");
        if (cJSON_IsString(msg) && strchr(msg->valuestring, '\n')) {
            char *sub = xasprintf("%s.x-kubernetes-validations[%d].message", path, j);
            apistatus_fields_add(f, APISTATUS_F_INVALID, sub, msg,
                                 "message must not contain line breaks");
            free(sub);
        }
    }
}

void apischema_check_structural(const cJSON *schema, const char *path,
                                struct apistatus_fields *f)
{
    structural(schema, path, true, false, f);
}
