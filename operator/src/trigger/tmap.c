/* tmap.c - field paths and payload templates. See tmap.h. */
#include "trigger/tmap.h"

#include "base/limits.h"
#include "base/mem.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

/* Walks path over root (root NULL: syntax only). Returns 0 and *ret (may be
 * NULL: absent), or TERN_EINVALID. */
static int walk(const cJSON *root, const char *path, size_t len, const cJSON **ret,
                struct tern_err *err)
{
    if (len == 0 || len > TERN_TMAP_MAX_PATH)
        return err_set(err, TERN_EINVALID, "field path must be 1..%d characters",
                       TERN_TMAP_MAX_PATH);
    const cJSON *cur = root;
    size_t i = 0, nseg = 0;
    char key[TERN_TMAP_MAX_PATH + 1];
    while (i < len) {
        size_t k = 0;
        while (i < len && key_char(path[i]))
            key[k++] = path[i++];
        key[k] = '\0';
        if (k == 0)
            return err_set(err, TERN_EINVALID, "field path \"%.*s\": empty key at %zu",
                           (int)len, path, i);
        if (++nseg > TERN_TMAP_MAX_SEGMENTS)
            goto deep;
        if (cur) {
            const cJSON *n = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, key)
                                                 : NULL;
            cur = n;
            if (!cur)
                root = NULL; /* absent: keep checking the syntax */
        }
        while (i < len && path[i] == '[') {
            size_t j = i + 1;
            long idx = 0;
            while (j < len && path[j] >= '0' && path[j] <= '9' && j - i <= 6)
                idx = idx * 10 + (path[j++] - '0');
            if (j == i + 1 || j >= len || path[j] != ']')
                return err_set(err, TERN_EINVALID, "field path \"%.*s\": bad index at %zu",
                               (int)len, path, i);
            if (++nseg > TERN_TMAP_MAX_SEGMENTS)
                goto deep;
            if (cur)
                cur = cJSON_IsArray(cur) && idx < cJSON_GetArraySize(cur)
                          ? cJSON_GetArrayItem(cur, (int)idx)
                          : NULL;
            i = j + 1;
        }
        if (i < len) {
            if (path[i] != '.' || i + 1 == len)
                return err_set(err, TERN_EINVALID,
                               "field path \"%.*s\": unexpected character at %zu", (int)len,
                               path, i);
            i++;
        }
    }
    *ret = root ? cur : NULL;
    return 0;
deep:
    return err_set(err, TERN_EINVALID, "field path \"%.*s\": more than %d parts", (int)len, path,
                   TERN_TMAP_MAX_SEGMENTS);
}

int tmap_path_check(const char *path, struct tern_err *err)
{
    const cJSON *v;
    return walk(NULL, path, strlen(path), &v, err);
}

const cJSON *tmap_lookup(const cJSON *root, const char *path)
{
    const cJSON *v = NULL;
    if (!root || walk(root, path, strlen(path), &v, NULL))
        return NULL;
    return v;
}

int tmap_scalar(const cJSON *v, struct buf *out)
{
    if (cJSON_IsString(v)) {
        return buf_puts(out, v->valuestring);
    } else if (cJSON_IsBool(v)) {
        return buf_puts(out, cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNumber(v)) {
        char t[64];
        double d = v->valuedouble;
        if (isfinite(d) && d == floor(d) && fabs(d) < 9007199254740992.0)
            snprintf(t, sizeof t, "%.0f", d);
        else
            snprintf(t, sizeof t, "%.17g", d);
        return buf_puts(out, t);
    } else {
        return TERN_EINVALID;
    }
    return 0;
}

/* One pass over tmpl: with root NULL only checks; else renders into out. */
static int run(const char *tmpl, const cJSON *root, struct buf *out, const char *what,
               struct tern_err *err)
{
    size_t n = strlen(tmpl), nph = 0;
    if (n > TERN_TMAP_MAX_TEMPLATE)
        return err_set(err, TERN_EINVALID, "%s: template over %d bytes", what,
                       TERN_TMAP_MAX_TEMPLATE);
    const char *p = tmpl;
    while (*p) {
        const char *open = strstr(p, "{{");
        if (!open) {
            if (out && buf_puts(out, p))
                goto big;
            break;
        }
        if (out && buf_append(out, p, (size_t)(open - p)))
            goto big;
        const char *close = strstr(open + 2, "}}");
        if (!close)
            return err_set(err, TERN_EINVALID, "%s: \"{{\" at %zu is not closed by \"}}\"", what,
                           (size_t)(open - tmpl));
        if (++nph > TERN_TMAP_MAX_PLACEHOLDERS)
            return err_set(err, TERN_EINVALID, "%s: more than %d placeholders", what,
                           TERN_TMAP_MAX_PLACEHOLDERS);
        const char *s = open + 2, *e = close;
        while (s < e && *s == ' ')
            s++;
        while (e > s && e[-1] == ' ')
            e--;
        const cJSON *v = NULL;
        struct tern_err pe = {0};
        int r = walk(root, s, (size_t)(e - s), &v, &pe);
        if (r)
            return err_set(err, r, "%s: %s", what, pe.msg);
        if (out) {
            if (!v)
                return err_set(err, TERN_ENOTFOUND, "%s: the payload has no field %.*s", what,
                               (int)(e - s), s);
            r = tmap_scalar(v, out);
            if (r == TERN_ETOOLARGE)
                goto big;
            if (r)
                return err_set(err, TERN_EINVALID,
                               "%s: field %.*s is not a string, number or boolean", what,
                               (int)(e - s), s);
        }
        p = close + 2;
    }
    return 0;
big:
    return err_set(err, TERN_ETOOLARGE, "%s: the rendered text is over %zu bytes", what,
                   out->max);
}

int tmap_template_check(const char *tmpl, struct tern_err *err)
{
    return run(tmpl, NULL, NULL, "template", err);
}

int tmap_render(const char *tmpl, const cJSON *root, size_t max, const char *what, char **ret,
                struct tern_err *err)
{
    struct buf b;
    buf_init(&b, max);
    int r = run(tmpl, root, &b, what, err);
    if (!r) {
        *ret = buf_steal(&b);
        return 0;
    }
    buf_done(&b);
    return r;
}
