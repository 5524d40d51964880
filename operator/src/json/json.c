/* json.c - strict JSON parser producing cJSON trees, and typed getters.
 * See json.h. */
#include "json.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "base/strset.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

struct parser {
    const char *start, *p, *end;
    int depth;
    int max_depth;
    struct json_parse_opts *o;
    struct tern_err *err;
    /* keys of the objects being parsed, outermost first: a path is built
     * from them only when a duplicate is reported */
    const char *keys[TERN_JSON_MAX_DEPTH + 2];
    int nkeys;
};

/* "a.b.c" of the keys being parsed plus key, into out. */
static void key_path(const struct parser *ps, const char *key, char *out, size_t n)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i <= ps->nkeys && len < n; i++) {
        const char *k = i < ps->nkeys ? ps->keys[i] : key;
        int w = snprintf(out + len, n - len, "%s%s", len ? "." : "", k);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

static int perr(struct parser *ps, int code, const char *why)
{
    return err_set(ps->err, code, "invalid JSON at offset %zu: %s", (size_t)(ps->p - ps->start),
                   why);
}

static void skip_ws(struct parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int parse_value(struct parser *ps, cJSON **ret);

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int read_u16(struct parser *ps, unsigned *ret)
{
    if (ps->end - ps->p < 4)
        return perr(ps, TERN_EPARSE, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(ps->p[i]);
        if (h < 0)
            return perr(ps, TERN_EPARSE, "bad \\u escape");
        v = v << 4 | (unsigned)h;
    }
    ps->p += 4;
    *ret = v;
    return 0;
}

static void put_utf8(struct buf *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12);
        u[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18);
        u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    buf_append(b, u, n);
}

/* Length of a valid UTF-8 sequence at p (< end), or 0 if invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* Parses a string at ps->p (which points at the opening quote) into a newly
 * allocated C string. */
static int parse_string(struct parser *ps, char **ret)
{
    struct buf b;
    buf_init(&b, ps->o->max_bytes);
    int r = 0;
    ps->p++; /* opening quote */
    for (;;) {
        if (ps->p >= ps->end) {
            r = perr(ps, TERN_EPARSE, "unterminated string");
            goto out;
        }
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') {
            ps->p++;
            break;
        }
        if (c < 0x20) {
            r = perr(ps, TERN_EPARSE, "control character in string");
            goto out;
        }
        if (c != '\\') {
            /* copy a run of plain bytes */
            const char *run = ps->p;
            while (ps->p < ps->end) {
                unsigned char d = (unsigned char)*ps->p;
                if (d == '"' || d == '\\' || d < 0x20)
                    break;
                size_t n = utf8_len((const unsigned char *)ps->p, (const unsigned char *)ps->end);
                if (!n) {
                    r = perr(ps, TERN_EPARSE, "invalid UTF-8 in string");
                    goto out;
                }
                ps->p += n;
            }
            buf_append(&b, run, (size_t)(ps->p - run));
            continue;
        }
        ps->p++;
        if (ps->p >= ps->end) {
            r = perr(ps, TERN_EPARSE, "unterminated escape");
            goto out;
        }
        char e = *ps->p++;
        switch (e) {
        case '"': buf_putc(&b, '"'); break;
        case '\\': buf_putc(&b, '\\'); break;
        case '/': buf_putc(&b, '/'); break;
        case 'b': buf_putc(&b, '\b'); break;
        case 'f': buf_putc(&b, '\f'); break;
        case 'n': buf_putc(&b, '\n'); break;
        case 'r': buf_putc(&b, '\r'); break;
        case 't': buf_putc(&b, '\t'); break;
        case 'u': {
            unsigned cp;
            if ((r = read_u16(ps, &cp)))
                goto out;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned lo;
                if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                    r = perr(ps, TERN_EPARSE, "unpaired surrogate");
                    goto out;
                }
                ps->p += 2;
                if ((r = read_u16(ps, &lo)))
                    goto out;
                if (lo < 0xdc00 || lo > 0xdfff) {
                    r = perr(ps, TERN_EPARSE, "unpaired surrogate");
                    goto out;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                r = perr(ps, TERN_EPARSE, "unpaired surrogate");
                goto out;
            } else if (cp == 0) {
                r = perr(ps, TERN_EPARSE, "\\u0000 is not supported in strings");
                goto out;
            }
            put_utf8(&b, cp);
            break;
        }
        default:
            r = perr(ps, TERN_EPARSE, "bad escape");
            goto out;
        }
    }
    *ret = buf_steal(&b);
out:
    buf_done(&b);
    return r;
}

static int parse_number(struct parser *ps, cJSON **ret)
{
    const char *s = ps->p;
    const char *q = s;
    if (q < ps->end && *q == '-')
        q++;
    if (q >= ps->end)
        return perr(ps, TERN_EPARSE, "truncated number");
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
    } else {
        return perr(ps, TERN_EPARSE, "bad number");
    }
    if (q < ps->end && *q == '.') {
        q++;
        if (q >= ps->end || *q < '0' || *q > '9')
            return perr(ps, TERN_EPARSE, "bad fraction");
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < ps->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= ps->end || *q < '0' || *q > '9')
            return perr(ps, TERN_EPARSE, "bad exponent");
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q - s > 400)
        return perr(ps, TERN_ETOOLARGE, "number too long");
    char *text = xstrndup(s, (size_t)(q - s));
    double d = strtod(text, NULL);
    cJSON *item = cJSON_CreateNumber(d);
    if (!item)
        abort();
    item->valuestring = text;
    ps->p = q;
    *ret = item;
    return 0;
}

static int expect_word(struct parser *ps, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n) != 0)
        return perr(ps, TERN_EPARSE, "unexpected character");
    ps->p += n;
    return 0;
}

static int parse_object(struct parser *ps, cJSON **ret)
{
    cJSON *obj = cJSON_CreateObject();
    struct strset ks = {0};
    int r = 0;
    ps->p++; /* { */
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        goto done;
    }
    for (;;) {
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != '"') {
            r = perr(ps, TERN_EPARSE, "expected a string key");
            goto fail;
        }
        char *key = NULL;
        if ((r = parse_string(ps, &key)))
            goto fail;
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') {
            free(key);
            r = perr(ps, TERN_EPARSE, "expected ':'");
            goto fail;
        }
        ps->p++;
        cJSON *val = NULL;
        if (ps->nkeys < (int)(sizeof ps->keys / sizeof ps->keys[0]))
            ps->keys[ps->nkeys] = key;
        ps->nkeys++;
        r = parse_value(ps, &val);
        ps->nkeys--;
        if (r) {
            free(key);
            goto fail;
        }
        bool dup = strset_add(&ks, key);
        if (dup) {
            char path[256];
            key_path(ps, key, path, sizeof path);
            if (ps->o->dups == JSON_DUPS_REJECT) {
                r = err_set(ps->err, TERN_EPARSE, "duplicate field \"%s\"", path);
                free(key);
                cJSON_Delete(val);
                goto fail;
            }
            if (!ps->o->dup_path[0])
                snprintf(ps->o->dup_path, sizeof ps->o->dup_path, "%s", path);
            /* last wins: the new value takes the old item's place and key
             * string (which the set points at) */
            cJSON *old = cJSON_GetObjectItemCaseSensitive(obj, key);
            val->string = old->string;
            old->string = NULL;
            cJSON_ReplaceItemViaPointer(obj, old, val);
            free(key);
        } else {
            /* the item takes ownership of key; the set borrows it */
            val->string = key;
            cJSON_AddItemToArray(obj, val);
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            break;
        }
        r = perr(ps, TERN_EPARSE, "expected ',' or '}'");
        goto fail;
    }
done:
    strset_done(&ks);
    *ret = obj;
    return 0;
fail:
    strset_done(&ks);
    cJSON_Delete(obj);
    return r;
}

static int parse_array(struct parser *ps, cJSON **ret)
{
    cJSON *arr = cJSON_CreateArray();
    int r = 0;
    ps->p++; /* [ */
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        *ret = arr;
        return 0;
    }
    for (;;) {
        cJSON *val = NULL;
        if ((r = parse_value(ps, &val)))
            goto fail;
        cJSON_AddItemToArray(arr, val);
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            break;
        }
        r = perr(ps, TERN_EPARSE, "expected ',' or ']'");
        goto fail;
    }
    *ret = arr;
    return 0;
fail:
    cJSON_Delete(arr);
    return r;
}

static int parse_value(struct parser *ps, cJSON **ret)
{
    skip_ws(ps);
    if (ps->p >= ps->end)
        return perr(ps, TERN_EPARSE, "unexpected end of input");
    int r;
    switch (*ps->p) {
    case '{':
    case '[':
        if (++ps->depth > ps->max_depth)
            return perr(ps, TERN_ETOOLARGE, "nesting too deep");
        r = *ps->p == '{' ? parse_object(ps, ret) : parse_array(ps, ret);
        ps->depth--;
        return r;
    case '"': {
        char *s = NULL;
        if ((r = parse_string(ps, &s)))
            return r;
        cJSON *item = cJSON_CreateStringReference("");
        item->type = cJSON_String; /* owned */
        item->valuestring = s;
        *ret = item;
        return 0;
    }
    case 't':
        if ((r = expect_word(ps, "true")))
            return r;
        *ret = cJSON_CreateTrue();
        return 0;
    case 'f':
        if ((r = expect_word(ps, "false")))
            return r;
        *ret = cJSON_CreateFalse();
        return 0;
    case 'n':
        if ((r = expect_word(ps, "null")))
            return r;
        *ret = cJSON_CreateNull();
        return 0;
    default:
        return parse_number(ps, ret);
    }
}

int json_parse_opts(const char *s, size_t n, struct json_parse_opts *o, cJSON **ret,
                    struct tern_err *err)
{
    struct json_parse_opts defaults = {0};
    if (!o)
        o = &defaults;
    if (!o->max_bytes)
        o->max_bytes = TERN_JSON_MAX_BYTES;
    o->dup_path[0] = '\0';
    if (n > o->max_bytes)
        return err_set(err, TERN_ETOOLARGE, "JSON document of %zu bytes exceeds the limit of %zu",
                       n, o->max_bytes);
    struct parser ps = {
        .start = s,
        .p = s,
        .end = s + n,
        .max_depth = o->max_depth ? o->max_depth : TERN_JSON_MAX_DEPTH,
        .o = o,
        .err = err,
    };
    cJSON *v = NULL;
    int r = parse_value(&ps, &v);
    if (r)
        return r;
    skip_ws(&ps);
    if (ps.p != ps.end) {
        cJSON_Delete(v);
        return perr(&ps, TERN_EPARSE, "trailing data after the value");
    }
    *ret = v;
    return 0;
}

int json_parse(const char *s, size_t n, cJSON **ret, struct tern_err *err)
{
    return json_parse_opts(s, n, NULL, ret, err);
}

const cJSON *json_get(const cJSON *obj, const char *key)
{
    if (!cJSON_IsObject(obj))
        return NULL;
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static const char *sep(const char *path)
{
    return path && *path ? "." : "";
}

/* Looks up key; returns 1 if present and not null, 0 if absent/null and
 * optional, or an error. */
static int lookup(const cJSON *obj, const char *path, const char *key, enum json_need need,
                  const cJSON **item, struct tern_err *err)
{
    const cJSON *it = json_get(obj, key);
    if (!it || cJSON_IsNull(it)) {
        if (need == JSON_REQUIRED)
            return err_set(err, TERN_EINVALID, "%s%s%s: Required value", path ? path : "",
                           sep(path), key);
        return 0;
    }
    *item = it;
    return 1;
}

#define TYPE_ERR(what)                                                                             \
    err_set(err, TERN_EINVALID, "%s%s%s: must be %s", path ? path : "", sep(path), key, what)

int json_get_string(const cJSON *obj, const char *path, const char *key, enum json_need need,
                    const char **ret, struct tern_err *err)
{
    const cJSON *it = NULL;
    int r = lookup(obj, path, key, need, &it, err);
    if (r <= 0)
        return r;
    if (!cJSON_IsString(it))
        return TYPE_ERR("a string");
    *ret = it->valuestring;
    return 0;
}

int json_get_bool(const cJSON *obj, const char *path, const char *key, enum json_need need,
                  bool *ret, struct tern_err *err)
{
    const cJSON *it = NULL;
    int r = lookup(obj, path, key, need, &it, err);
    if (r <= 0)
        return r;
    if (!cJSON_IsBool(it))
        return TYPE_ERR("a boolean");
    *ret = cJSON_IsTrue(it);
    return 0;
}

int json_item_int64(const cJSON *it, int64_t *ret)
{
    if (cJSON_IsString(it))
        return num_parse_i64(it->valuestring, ret) ? TERN_EINVALID : 0;
    if (!cJSON_IsNumber(it) && !cJSON_IsRaw(it))
        return TERN_EINVALID;
    int64_t v;
    if (it->valuestring && num_parse_i64(it->valuestring, &v) == 0) {
        /* guard against a stale text after cJSON_SetNumberValue */
        if (cJSON_IsRaw(it) || (double)v == it->valuedouble) {
            *ret = v;
            return 0;
        }
    }
    if (cJSON_IsRaw(it))
        return TERN_EINVALID;
    double d = it->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0)
        return TERN_EINVALID;
    *ret = (int64_t)d;
    return 0;
}

int json_get_int64(const cJSON *obj, const char *path, const char *key, enum json_need need,
                   int64_t *ret, struct tern_err *err)
{
    const cJSON *it = NULL;
    int r = lookup(obj, path, key, need, &it, err);
    if (r <= 0)
        return r;
    int64_t v;
    if (json_item_int64(it, &v))
        return TYPE_ERR("an integer");
    *ret = v;
    return 0;
}

int json_get_int_range(const cJSON *obj, const char *path, const char *key, enum json_need need,
                       int64_t min, int64_t max, int64_t *ret, struct tern_err *err)
{
    int64_t v = 0;
    const cJSON *it = NULL;
    int r = lookup(obj, path, key, need, &it, err);
    if (r <= 0)
        return r;
    if (json_item_int64(it, &v))
        return TYPE_ERR("an integer");
    if (v < min)
        return err_set(err, TERN_EINVALID, "%s%s%s: must be >= %lld", path ? path : "", sep(path),
                       key, (long long)min);
    if (v > max)
        return err_set(err, TERN_EINVALID, "%s%s%s: must be <= %lld", path ? path : "", sep(path),
                       key, (long long)max);
    *ret = v;
    return 0;
}

int json_get_object(const cJSON *obj, const char *path, const char *key, enum json_need need,
                    const cJSON **ret, struct tern_err *err)
{
    const cJSON *it = NULL;
    int r = lookup(obj, path, key, need, &it, err);
    if (r <= 0)
        return r;
    if (!cJSON_IsObject(it))
        return TYPE_ERR("an object");
    *ret = it;
    return 0;
}

int json_get_array(const cJSON *obj, const char *path, const char *key, enum json_need need,
                   const cJSON **ret, struct tern_err *err)
{
    const cJSON *it = NULL;
    int r = lookup(obj, path, key, need, &it, err);
    if (r <= 0)
        return r;
    if (!cJSON_IsArray(it))
        return TYPE_ERR("an array");
    *ret = it;
    return 0;
}

cJSON *json_new_int64(int64_t v)
{
    char digits[21];
    cJSON *it = cJSON_CreateRaw(num_fmt_i64(v, digits));
    if (!it)
        abort();
    return it;
}

void json_add_int64(cJSON *obj, const char *key, int64_t v)
{
    cJSON_AddItemToObject(obj, key, json_new_int64(v));
}

void json_add_string(cJSON *obj, const char *key, const char *v)
{
    if (!cJSON_AddStringToObject(obj, key, v))
        abort();
}

static bool is_num(const cJSON *x)
{
    return cJSON_IsNumber(x) || cJSON_IsRaw(x);
}

bool json_equal(const cJSON *a, const cJSON *b)
{
    if (!a || !b)
        return a == b;
    if (is_num(a) && is_num(b)) {
        int64_t x, y;
        bool xi = json_item_int64(a, &x) == 0, yi = json_item_int64(b, &y) == 0;
        if (xi && yi)
            return x == y;
        if (xi != yi)
            return false;
        return a->valuedouble == b->valuedouble;
    }
    if ((a->type & 0xff) != (b->type & 0xff))
        return false;
    switch (a->type & 0xff) {
    case cJSON_False:
    case cJSON_True:
    case cJSON_NULL: return true;
    case cJSON_String: return strcmp(a->valuestring, b->valuestring) == 0;
    case cJSON_Array: {
        const cJSON *x = a->child, *y = b->child;
        for (; x && y; x = x->next, y = y->next)
            if (!json_equal(x, y))
                return false;
        return !x && !y;
    }
    case cJSON_Object: {
        size_t na = 0, nb = 0;
        for (const cJSON *x = a->child; x; x = x->next) {
            na++;
            if (!json_equal(x, json_get(b, x->string)))
                return false;
        }
        for (const cJSON *y = b->child; y; y = y->next)
            nb++;
        return na == nb;
    }
    default: return false;
    }
}

/* Writes item compactly, numbers from their exact text when known. */
static void print_item(struct buf *b, const cJSON *it);

static void print_item(struct buf *b, const cJSON *it)
{
    int64_t v;
    switch (it->type & 0xff) {
    case cJSON_False: buf_puts(b, "false"); break;
    case cJSON_True: buf_puts(b, "true"); break;
    case cJSON_NULL: buf_puts(b, "null"); break;
    case cJSON_Raw: buf_puts(b, it->valuestring ? it->valuestring : "null"); break;
    case cJSON_String: buf_put_json_string(b, it->valuestring ? it->valuestring : ""); break;
    case cJSON_Number:
        if (it->valuestring && (double)strtod(it->valuestring, NULL) == it->valuedouble) {
            buf_puts(b, it->valuestring);
        } else if (json_item_int64(it, &v) == 0) {
            buf_printf(b, "%lld", (long long)v);
        } else if (!isfinite(it->valuedouble)) {
            buf_puts(b, "null");
        } else {
            buf_printf(b, "%.17g", it->valuedouble);
        }
        break;
    case cJSON_Array:
        buf_putc(b, '[');
        for (const cJSON *c = it->child; c; c = c->next) {
            print_item(b, c);
            if (c->next)
                buf_putc(b, ',');
        }
        buf_putc(b, ']');
        break;
    case cJSON_Object:
        buf_putc(b, '{');
        for (const cJSON *c = it->child; c; c = c->next) {
            buf_put_json_string(b, c->string ? c->string : "");
            buf_putc(b, ':');
            print_item(b, c);
            if (c->next)
                buf_putc(b, ',');
        }
        buf_putc(b, '}');
        break;
    default: buf_puts(b, "null"); break;
    }
}

char *json_print(const cJSON *item)
{
    struct buf b;
    buf_init(&b, SIZE_MAX / 2);
    print_item(&b, item);
    return buf_steal(&b);
}

cJSON *json_dup(const cJSON *item)
{
    /* cJSON_Duplicate copies valuestring for every item type, so the exact
     * number text survives. */
    cJSON *c = cJSON_Duplicate(item, 1);
    if (!c)
        abort();
    return c;
}
