/* jschema.c - the JSON Schema subset of spec.result.schema. See jschema.h. */
#include "json/jschema.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"

#include <math.h>
#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUBSET                                                                                 \
    "type, properties, required, items, enum, const, minimum, maximum, exclusiveMinimum, "    \
    "exclusiveMaximum, minLength, maxLength, minItems, maxItems, pattern, "                    \
    "additionalProperties, title, description, $comment, $schema"

static const char *const type_names[] = {"null",  "boolean", "object", "array",
                                         "number", "string", "integer", NULL};

/* ---- JSON pointers ------------------------------------------------------ */

#define PTR_MAX 512

struct ptr {
    char s[PTR_MAX];
    size_t len;
    bool cut; /* a segment did not fit: the pointer ends in "..." */
};

/* Appends "/" + seg (escaped: ~ -> ~0, / -> ~1); returns the old length
 * for ptr_pop. */
static size_t ptr_push(struct ptr *p, const char *seg)
{
    size_t old = p->len;
    char tmp[PTR_MAX];
    size_t n = 0;
    tmp[n++] = '/';
    for (const char *c = seg; *c && n + 2 < sizeof tmp; c++) {
        if (*c == '~' || *c == '/') {
            tmp[n++] = '~';
            tmp[n++] = *c == '~' ? '0' : '1';
        } else {
            tmp[n++] = *c;
        }
    }
    if (p->len + n + 4 >= PTR_MAX) {
        if (!p->cut && p->len + 4 < PTR_MAX) {
            memcpy(p->s + p->len, "/...", 4);
            p->len += 4;
            p->s[p->len] = 0;
        }
        p->cut = true;
        return old;
    }
    memcpy(p->s + p->len, tmp, n);
    p->len += n;
    p->s[p->len] = 0;
    return old;
}

static size_t ptr_push_index(struct ptr *p, size_t i)
{
    char num[24];
    snprintf(num, sizeof num, "%zu", i);
    return ptr_push(p, num);
}

static void ptr_pop(struct ptr *p, size_t old)
{
    p->len = old;
    p->s[old] = 0;
    if (old + 4 < PTR_MAX)
        p->cut = false;
}

/* ---- checking a schema --------------------------------------------------- */

struct check {
    struct ptr p;
    size_t nodes;
    struct tern_err *err;
};

/* TERN_EINVALID with `at "<pointer of kw>": msg`. */
static int bad(struct check *c, const char *kw, const char *msg)
{
    size_t old = kw ? ptr_push(&c->p, kw) : c->p.len;
    int r = err_set(c->err, TERN_EINVALID, "at \"%s\": %s", c->p.s, msg);
    ptr_pop(&c->p, old);
    return r;
}

static bool known_type(const char *t)
{
    for (int i = 0; type_names[i]; i++)
        if (strcmp(t, type_names[i]) == 0)
            return true;
    return false;
}

static int check_type(struct check *c, const cJSON *v)
{
    char msg[160];
    if (cJSON_IsString(v)) {
        if (!known_type(v->valuestring)) {
            snprintf(msg, sizeof msg, "type: unknown type \"%.40s\" (one of null, boolean, "
                     "object, array, number, string, integer)", v->valuestring);
            return bad(c, "type", msg);
        }
        return 0;
    }
    if (!cJSON_IsArray(v) || !v->child)
        return bad(c, "type", "type: must be a type name or a non-empty array of them");
    for (const cJSON *a = v->child; a; a = a->next) {
        if (!cJSON_IsString(a) || !known_type(a->valuestring))
            return bad(c, "type", "type: must hold type names (null, boolean, object, array, "
                       "number, string, integer)");
        for (const cJSON *b = v->child; b != a; b = b->next)
            if (strcmp(a->valuestring, b->valuestring) == 0) {
                snprintf(msg, sizeof msg, "type: type \"%s\" is repeated", a->valuestring);
                return bad(c, "type", msg);
            }
    }
    return 0;
}

static bool nonneg_int(const cJSON *v)
{
    int64_t n;
    return json_item_int64(v, &n) == 0 && n >= 0 && cJSON_IsNumber(v);
}

static int check_node(struct check *c, const cJSON *s, int depth);

static int check_sub(struct check *c, const char *kw, const char *key, const cJSON *s, int depth)
{
    size_t o1 = ptr_push(&c->p, kw);
    size_t o2 = key ? ptr_push(&c->p, key) : c->p.len;
    int r = check_node(c, s, depth + 1);
    ptr_pop(&c->p, o2);
    ptr_pop(&c->p, o1);
    return r;
}

static int check_pattern(struct check *c, const cJSON *v)
{
    if (!cJSON_IsString(v))
        return bad(c, "pattern", "pattern: must be a string");
    if (strlen(v->valuestring) > TERN_JSCHEMA_MAX_PATTERN) {
        size_t old = ptr_push(&c->p, "pattern");
        int r = err_set(c->err, TERN_ETOOLARGE, "at \"%s\": pattern: longer than %u bytes",
                        c->p.s, TERN_JSCHEMA_MAX_PATTERN);
        ptr_pop(&c->p, old);
        return r;
    }
    regex_t re;
    int rc = regcomp(&re, v->valuestring, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char why[128], msg[200];
        regerror(rc, &re, why, sizeof why);
        regfree(&re);
        snprintf(msg, sizeof msg, "pattern: not a POSIX extended regular expression: %s", why);
        return bad(c, "pattern", msg);
    }
    regfree(&re);
    return 0;
}

static int check_node(struct check *c, const cJSON *s, int depth)
{
    char msg[TERN_ERRMSG_MAX];
    if (depth > TERN_JSCHEMA_MAX_DEPTH)
        return err_set(c->err, TERN_ETOOLARGE, "at \"%s\": schemas nested deeper than %d",
                       c->p.s, TERN_JSCHEMA_MAX_DEPTH);
    if (++c->nodes > TERN_JSCHEMA_MAX_NODES)
        return err_set(c->err, TERN_ETOOLARGE, "at \"%s\": more than %d schemas in all", c->p.s,
                       TERN_JSCHEMA_MAX_NODES);
    if (cJSON_IsBool(s))
        return 0;
    if (!cJSON_IsObject(s))
        return bad(c, NULL, "a schema must be an object or a boolean");
    int r = 0;
    for (const cJSON *m = s->child; m && r == 0; m = m->next) {
        const char *k = m->string;
        if (strcmp(k, "type") == 0) {
            r = check_type(c, m);
        } else if (strcmp(k, "properties") == 0) {
            if (!cJSON_IsObject(m))
                return bad(c, k, "properties: must be an object of schemas");
            for (const cJSON *p = m->child; p && r == 0; p = p->next)
                r = check_sub(c, k, p->string, p, depth);
        } else if (strcmp(k, "additionalProperties") == 0 || strcmp(k, "items") == 0) {
            if (cJSON_IsArray(m)) {
                snprintf(msg, sizeof msg,
                         "%s: must be one schema (the array form is not supported)", k);
                return bad(c, k, msg);
            }
            r = check_sub(c, k, NULL, m, depth);
        } else if (strcmp(k, "required") == 0 || strcmp(k, "enum") == 0) {
            bool req = k[0] == 'r';
            if (!cJSON_IsArray(m) || (!req && !m->child))
                return bad(c, k, req ? "required: must be an array of property names"
                                     : "enum: must be a non-empty array");
            if (cJSON_GetArraySize(m) > TERN_JSCHEMA_MAX_ENUM) {
                size_t old = ptr_push(&c->p, k);
                r = err_set(c->err, TERN_ETOOLARGE, "at \"%s\": %s: more than %d members",
                            c->p.s, k, TERN_JSCHEMA_MAX_ENUM);
                ptr_pop(&c->p, old);
                return r;
            }
            for (const cJSON *a = m->child; req && a; a = a->next) {
                if (!cJSON_IsString(a))
                    return bad(c, k, "required: must be an array of property names");
                for (const cJSON *b = m->child; b != a; b = b->next)
                    if (strcmp(a->valuestring, b->valuestring) == 0) {
                        snprintf(msg, sizeof msg, "required: \"%.200s\" is repeated",
                                 a->valuestring);
                        return bad(c, k, msg);
                    }
            }
        } else if (strcmp(k, "const") == 0) {
            /* any value */
        } else if (strcmp(k, "minimum") == 0 || strcmp(k, "maximum") == 0 ||
                   strcmp(k, "exclusiveMinimum") == 0 || strcmp(k, "exclusiveMaximum") == 0) {
            if (!cJSON_IsNumber(m) || !isfinite(m->valuedouble)) {
                snprintf(msg, sizeof msg, "%s: must be a number", k);
                return bad(c, k, msg);
            }
        } else if (strcmp(k, "minLength") == 0 || strcmp(k, "maxLength") == 0 ||
                   strcmp(k, "minItems") == 0 || strcmp(k, "maxItems") == 0) {
            if (!nonneg_int(m)) {
                snprintf(msg, sizeof msg, "%s: must be a non-negative integer", k);
                return bad(c, k, msg);
            }
        } else if (strcmp(k, "pattern") == 0) {
            r = check_pattern(c, m);
        } else if (strcmp(k, "title") == 0 || strcmp(k, "description") == 0 ||
                   strcmp(k, "$comment") == 0) {
            if (!cJSON_IsString(m)) {
                snprintf(msg, sizeof msg, "%s: must be a string", k);
                return bad(c, k, msg);
            }
        } else if (strcmp(k, "$schema") == 0) {
            if (!cJSON_IsString(m) || depth > 0)
                return bad(c, k, "$schema: must be a string, at the top only");
        } else {
            snprintf(msg, sizeof msg, "keyword \"%.64s\" is not supported (supported: " SUBSET ")",
                     k);
            return bad(c, k, msg);
        }
    }
    return r;
}

int jschema_check(const cJSON *schema, struct tern_err *err)
{
    if (!schema)
        return err_set(err, TERN_EINVALID, "no schema");
    char *txt = json_print(schema);
    size_t n = strlen(txt);
    free(txt);
    if (n > TERN_JSCHEMA_MAX_BYTES)
        return err_set(err, TERN_ETOOLARGE, "a schema of %zu bytes exceeds the limit of %u", n,
                       TERN_JSCHEMA_MAX_BYTES);
    struct check c = {.err = err};
    return check_node(&c, schema, 0);
}

/* ---- validating ----------------------------------------------------------- */

struct val {
    struct ptr p;
    struct buf out;
    size_t nerrors;
    int depth;
};

/* A short rendering of v for an error line: JSON text cut to max bytes. */
static char *show(const cJSON *v, size_t max)
{
    char *t = json_print(v);
    if (strlen(t) <= max)
        return t;
    size_t n = max;
    while (n > 0 && ((unsigned char)t[n] & 0xC0) == 0x80)
        n--;
    char *r = xasprintf("%.*s...", (int)n, t);
    free(t);
    return r;
}

static const char *type_of(const cJSON *v)
{
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsBool(v))
        return "boolean";
    if (cJSON_IsObject(v))
        return "object";
    if (cJSON_IsArray(v))
        return "array";
    if (cJSON_IsNumber(v) || cJSON_IsRaw(v))
        return "number";
    if (cJSON_IsString(v))
        return "string";
    return "unknown";
}

static void report(struct val *v, const char *kw, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void report(struct val *v, const char *kw, const char *fmt, ...)
{
    v->nerrors++;
    if (v->nerrors > TERN_JSCHEMA_MAX_ERRORS)
        return;
    char line[TERN_JSCHEMA_MAX_ERROR_LEN + 1];
    int n = snprintf(line, sizeof line, "at \"%s\": %s: ", v->p.s, kw);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* a cut line ends on a UTF-8 boundary */
    size_t len = strlen(line);
    if (len == TERN_JSCHEMA_MAX_ERROR_LEN)
        while (len > 0 && ((unsigned char)line[len] & 0xC0) == 0x80)
            line[len--] = 0;
    if (v->out.len)
        buf_putc(&v->out, '\n');
    buf_puts(&v->out, line);
}

static bool is_integer(const cJSON *v)
{
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && floor(v->valuedouble) == v->valuedouble;
}

static bool type_matches(const char *t, const cJSON *v)
{
    if (strcmp(t, "integer") == 0)
        return is_integer(v);
    return strcmp(t, type_of(v)) == 0;
}

/* The number's text as written (json_parse keeps it), else %.17g. */
static void num_text(const cJSON *n, char out[48])
{
    if (n->valuestring && strlen(n->valuestring) < 40)
        snprintf(out, 48, "%s", n->valuestring);
    else
        snprintf(out, 48, "%.17g", n->valuedouble);
}

static size_t code_points(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}

static int64_t kw_int(const cJSON *s, const char *k, int64_t dflt)
{
    int64_t n;
    const cJSON *m = json_get(s, k);
    return m && json_item_int64(m, &n) == 0 ? n : dflt;
}

static void validate(struct val *v, const cJSON *s, const cJSON *inst);

static void check_numbers(struct val *v, const cJSON *s, const cJSON *inst)
{
    static const char *const kws[] = {"minimum", "maximum", "exclusiveMinimum",
                                      "exclusiveMaximum"};
    static const char *const rel[] = {">=", "<=", ">", "<"};
    double x = inst->valuedouble;
    for (int i = 0; i < 4; i++) {
        const cJSON *b = json_get(s, kws[i]);
        if (!cJSON_IsNumber(b))
            continue;
        double lim = b->valuedouble;
        bool ok = i == 0 ? x >= lim : i == 1 ? x <= lim : i == 2 ? x > lim : x < lim;
        if (!ok) {
            char a[48], l[48];
            num_text(inst, a);
            num_text(b, l);
            report(v, kws[i], "expected a number %s %s, got %s", rel[i], l, a);
        }
    }
}

static void check_string(struct val *v, const cJSON *s, const cJSON *inst)
{
    size_t n = code_points(inst->valuestring);
    int64_t mn = kw_int(s, "minLength", -1), mx = kw_int(s, "maxLength", -1);
    if (mn >= 0 && (int64_t)n < mn)
        report(v, "minLength", "expected at least %lld characters, got %zu", (long long)mn, n);
    if (mx >= 0 && (int64_t)n > mx)
        report(v, "maxLength", "expected at most %lld characters, got %zu", (long long)mx, n);
    const cJSON *pat = json_get(s, "pattern");
    if (cJSON_IsString(pat)) {
        regex_t re;
        if (regcomp(&re, pat->valuestring, REG_EXTENDED | REG_NOSUB) == 0) {
            if (regexec(&re, inst->valuestring, 0, NULL, 0) != 0) {
                char *got = show(inst, 60), *want = show(pat, 80);
                report(v, "pattern", "expected a string matching %s, got %s", want, got);
                free(got);
                free(want);
            }
            regfree(&re);
        }
    }
}

static void check_array(struct val *v, const cJSON *s, const cJSON *inst)
{
    size_t n = (size_t)cJSON_GetArraySize(inst);
    int64_t mn = kw_int(s, "minItems", -1), mx = kw_int(s, "maxItems", -1);
    if (mn >= 0 && (int64_t)n < mn)
        report(v, "minItems", "expected at least %lld items, got %zu", (long long)mn, n);
    if (mx >= 0 && (int64_t)n > mx)
        report(v, "maxItems", "expected at most %lld items, got %zu", (long long)mx, n);
    const cJSON *items = json_get(s, "items");
    if (!items)
        return;
    size_t i = 0;
    for (const cJSON *it = inst->child; it; it = it->next, i++) {
        size_t old = ptr_push_index(&v->p, i);
        validate(v, items, it);
        ptr_pop(&v->p, old);
    }
}

static void check_object(struct val *v, const cJSON *s, const cJSON *inst)
{
    const cJSON *req = json_get(s, "required");
    for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next)
        if (cJSON_IsString(r) && !json_get(inst, r->valuestring)) {
            char *name = show(r, 80);
            report(v, "required", "missing property %s", name);
            free(name);
        }
    const cJSON *props = json_get(s, "properties");
    const cJSON *addl = json_get(s, "additionalProperties");
    for (const cJSON *m = inst->child; m; m = m->next) {
        const cJSON *ps = json_get(props, m->string);
        size_t old = ptr_push(&v->p, m->string);
        if (ps) {
            validate(v, ps, m);
        } else if (cJSON_IsFalse(addl)) {
            ptr_pop(&v->p, old);
            cJSON *k = cJSON_CreateString(m->string);
            char *kn = show(k, 80);
            cJSON_Delete(k);
            report(v, "additionalProperties", "unexpected property %s (not in properties)", kn);
            free(kn);
            continue;
        } else if (addl) {
            validate(v, addl, m);
        }
        ptr_pop(&v->p, old);
    }
}

static void validate(struct val *v, const cJSON *s, const cJSON *inst)
{
    if (cJSON_IsTrue(s))
        return;
    if (cJSON_IsFalse(s)) {
        report(v, "false", "no value is allowed here, got %s", type_of(inst));
        return;
    }
    if (++v->depth > TERN_JSCHEMA_MAX_DEPTH + 1) { /* a checked schema never gets here */
        v->depth--;
        return;
    }
    const cJSON *t = json_get(s, "type");
    if (t) {
        bool ok = false;
        if (cJSON_IsString(t))
            ok = type_matches(t->valuestring, inst);
        for (const cJSON *a = cJSON_IsArray(t) ? t->child : NULL; a && !ok; a = a->next)
            ok = cJSON_IsString(a) && type_matches(a->valuestring, inst);
        if (!ok) {
            char *want = show(t, 120);
            const char *got = type_of(inst);
            if (strcmp(got, "number") == 0 && !is_integer(inst))
                got = "number (not an integer)";
            report(v, "type", "expected %s, got %s", want, got);
            free(want);
            goto out; /* the other keywords would only repeat it */
        }
    }
    const cJSON *en = json_get(s, "enum");
    if (cJSON_IsArray(en)) {
        bool found = false;
        for (const cJSON *e = en->child; e && !found; e = e->next)
            found = json_equal(e, inst);
        if (!found) {
            char *want = show(en, 120), *got = show(inst, 60);
            report(v, "enum", "expected one of %s, got %s", want, got);
            free(want);
            free(got);
        }
    }
    const cJSON *cn = json_get(s, "const");
    if (cn && !json_equal(cn, inst)) {
        char *want = show(cn, 120), *got = show(inst, 60);
        report(v, "const", "expected %s, got %s", want, got);
        free(want);
        free(got);
    }
    if (cJSON_IsNumber(inst))
        check_numbers(v, s, inst);
    else if (cJSON_IsString(inst))
        check_string(v, s, inst);
    else if (cJSON_IsArray(inst))
        check_array(v, s, inst);
    else if (cJSON_IsObject(inst))
        check_object(v, s, inst);
out:
    v->depth--;
}

int jschema_validate(const cJSON *schema, const cJSON *instance, struct jschema_report *ret)
{
    struct tern_err e = {0};
    if (jschema_check(schema, &e) != 0 || !instance)
        return TERN_EINVALID;
    struct val v = {0};
    buf_init(&v.out, (size_t)TERN_JSCHEMA_MAX_ERRORS * (TERN_JSCHEMA_MAX_ERROR_LEN + 1) + 64);
    validate(&v, schema, instance);
    if (v.nerrors > TERN_JSCHEMA_MAX_ERRORS)
        buf_printf(&v.out, "\n(%zu more errors)", v.nerrors - TERN_JSCHEMA_MAX_ERRORS);
    ret->nerrors = v.nerrors;
    ret->text = buf_steal(&v.out);
    return 0;
}

void jschema_report_done(struct jschema_report *r)
{
    if (!r)
        return;
    free(r->text);
    r->text = NULL;
    r->nerrors = 0;
}

/* ---- the model's answer ---------------------------------------------------- */

int jschema_parse_answer(const char *text, size_t len, cJSON **ret, struct tern_err *err)
{
    if (len > TERN_RESULT_MAX_ANSWER)
        return err_set(err, TERN_ETOOLARGE, "the answer has %zu bytes, more than the %u allowed",
                       len, TERN_RESULT_MAX_ANSWER);
    const char *b = text, *e = text + len;
    while (b < e && (*b == ' ' || *b == '\t' || *b == '\r' || *b == '\n'))
        b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
        e--;
    size_t skipped = (size_t)(b - text);
    if (e - b >= 6 && strncmp(b, "```", 3) == 0 && strncmp(e - 3, "```", 3) == 0) {
        /* one enclosing fence: ```[json]\n ... ``` */
        const char *nl = memchr(b, '\n', (size_t)(e - b));
        if (nl && nl < e - 3) {
            skipped += (size_t)(nl + 1 - b);
            b = nl + 1;
            e -= 3;
        }
    }
    struct json_parse_opts o = {.max_bytes = TERN_RESULT_MAX_ANSWER,
                                .max_depth = TERN_JSCHEMA_MAX_INSTANCE_DEPTH};
    struct tern_err pe = {0};
    cJSON *j = NULL;
    int r = json_parse_opts(b, (size_t)(e - b), &o, &j, &pe);
    if (r) {
        if (skipped)
            return err_set(err, r, "%s (offsets count from byte %zu of the answer)", pe.msg,
                           skipped);
        return err_set(err, r, "%s", pe.msg);
    }
    *ret = j;
    return 0;
}
