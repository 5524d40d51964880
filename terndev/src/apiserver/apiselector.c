/* apiselector.c - label and field selectors. See apiselector.h. */
#include "apiselector.h"

#include "base/mem.h"
#include "json/json.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void apisel_free(struct apisel *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->r[i].key);
        for (size_t j = 0; j < s->r[i].nvalues; j++)
            free(s->r[i].values[j]);
        free(s->r[i].values);
    }
    free(s->r);
    free(s);
}

static bool is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* qualified name part: [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, <= 63 */
static const char *check_name_part(const char *s, size_t n)
{
    if (n == 0)
        return "name part must be non-empty";
    if (n > 63)
        return "name part must be no more than 63 characters";
    if (!is_alnum(s[0]) || !is_alnum(s[n - 1]))
        return "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
               "start and end with an alphanumeric character";
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return "name part must consist of alphanumeric characters, '-', '_' or '.', and "
                   "must start and end with an alphanumeric character";
    return NULL;
}

static const char *check_dns_subdomain(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return "prefix part must be no more than 253 characters";
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
            return "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                   "alphanumeric characters, '-' or '.', and must start and end with an "
                   "alphanumeric character";
    }
    if (!is_alnum(s[0]) || !is_alnum(s[n - 1]))
        return "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
               "alphanumeric characters, '-' or '.', and must start and end with an "
               "alphanumeric character";
    return NULL;
}

const char *apisel_check_label_key(const char *k)
{
    const char *slash = strchr(k, '/');
    if (slash) {
        const char *e = check_dns_subdomain(k, (size_t)(slash - k));
        if (e)
            return e;
        return check_name_part(slash + 1, strlen(slash + 1));
    }
    return check_name_part(k, strlen(k));
}

const char *apisel_check_label_value(const char *v)
{
    size_t n = strlen(v);
    if (n == 0)
        return NULL;
    if (n > 63)
        return "must be no more than 63 characters";
    if (check_name_part(v, n))
        return "a valid label must be an empty string or consist of alphanumeric characters, "
               "'-', '_' or '.', and must start and end with an alphanumeric character";
    return NULL;
}

struct lexer {
    const char *p;
};

static void skip_sp(struct lexer *lx)
{
    while (*lx->p == ' ' || *lx->p == '\t')
        lx->p++;
}

static bool ident_char(char c)
{
    return c && !strchr(" \t,()=!", c);
}

static char *read_ident(struct lexer *lx)
{
    skip_sp(lx);
    const char *s = lx->p;
    while (ident_char(*lx->p))
        lx->p++;
    return xstrndup(s, (size_t)(lx->p - s));
}

static void add_value(struct apisel_req *r, char *v)
{
    r->values = xreallocarray(r->values, r->nvalues + 1, sizeof(char *));
    r->values[r->nvalues++] = v;
}

static struct apisel_req *new_req(struct apisel *s)
{
    s->r = xreallocarray(s->r, s->n + 1, sizeof(*s->r));
    struct apisel_req *r = &s->r[s->n++];
    memset(r, 0, sizeof(*r));
    return r;
}

int apisel_parse_labels(const char *str, struct apisel **ret, struct tern_err *err)
{
    struct apisel *s = xcalloc(1, sizeof(*s));
    struct lexer lx = {str ? str : ""};
    int rc = 0;
    skip_sp(&lx);
    if (!*lx.p)
        goto out;
    for (;;) {
        skip_sp(&lx);
        struct apisel_req *r = new_req(s);
        bool neg = false;
        if (*lx.p == '!') {
            neg = true;
            lx.p++;
        }
        r->key = read_ident(&lx);
        if (!*r->key) {
            rc = err_set(err, TERN_EINVALID,
                         "unable to parse requirement: found '%c', expected: identifier",
                         *lx.p ? *lx.p : ' ');
            goto out;
        }
        const char *ke = apisel_check_label_key(r->key);
        if (ke) {
            rc = err_set(err, TERN_EINVALID,
                         "unable to parse requirement: <nil>: Invalid value: \"%s\": %s", r->key,
                         ke);
            goto out;
        }
        skip_sp(&lx);
        if (neg) {
            r->op = APISEL_NOTEXISTS;
        } else if (*lx.p == ',' || !*lx.p) {
            r->op = APISEL_EXISTS;
        } else if (lx.p[0] == '=' || lx.p[0] == '!') {
            if (lx.p[0] == '!' && lx.p[1] != '=') {
                rc = err_set(err, TERN_EINVALID, "unable to parse requirement: found '!', "
                                                 "expected: '=', '!=', '==', 'in', notin'");
                goto out;
            }
            r->op = lx.p[0] == '!' ? APISEL_NE : APISEL_EQ;
            lx.p += (lx.p[0] == '!' || lx.p[1] == '=') ? 2 : 1;
            char *v = read_ident(&lx);
            const char *ve = apisel_check_label_value(v);
            add_value(r, v);
            if (ve) {
                rc = err_set(err, TERN_EINVALID,
                             "unable to parse requirement: values[0][%s]: Invalid value: "
                             "\"%s\": %s",
                             r->key, v, ve);
                goto out;
            }
        } else {
            char *w = read_ident(&lx);
            if (strcmp(w, "in") == 0 || strcmp(w, "notin") == 0) {
                r->op = w[0] == 'i' ? APISEL_IN : APISEL_NOTIN;
                free(w);
                skip_sp(&lx);
                if (*lx.p != '(') {
                    rc = err_set(err, TERN_EINVALID,
                                 "unable to parse requirement: found '%c', expected: '('",
                                 *lx.p ? *lx.p : ' ');
                    goto out;
                }
                lx.p++;
                for (;;) {
                    char *v = read_ident(&lx);
                    const char *ve = apisel_check_label_value(v);
                    add_value(r, v);
                    if (ve) {
                        rc = err_set(err, TERN_EINVALID,
                                     "unable to parse requirement: Invalid value: \"%s\": %s", v,
                                     ve);
                        goto out;
                    }
                    skip_sp(&lx);
                    if (*lx.p == ',') {
                        lx.p++;
                        continue;
                    }
                    if (*lx.p == ')') {
                        lx.p++;
                        break;
                    }
                    rc = err_set(err, TERN_EINVALID,
                                 "unable to parse requirement: found '%c', expected: ',' or ')'",
                                 *lx.p ? *lx.p : ' ');
                    goto out;
                }
            } else {
                rc = err_set(err, TERN_EINVALID,
                             "unable to parse requirement: found '%s', expected: in, notin, =, "
                             "==, !=, gt, lt",
                             w);
                free(w);
                goto out;
            }
        }
        skip_sp(&lx);
        if (!*lx.p)
            break;
        if (*lx.p != ',') {
            rc = err_set(err, TERN_EINVALID, "found '%c', expected: ',' or 'end of string'",
                         *lx.p);
            goto out;
        }
        lx.p++;
    }
out:
    if (rc) {
        apisel_free(s);
        return rc;
    }
    *ret = s;
    return 0;
}

int apisel_parse_fields(const char *str, struct apisel **ret, struct tern_err *err)
{
    struct apisel *s = xcalloc(1, sizeof(*s));
    int rc = 0;
    const char *p = str ? str : "";
    if (!*p)
        goto out;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char *term = xstrndup(p, n);
        char *op = strstr(term, "!=");
        enum apisel_op o = APISEL_NE;
        size_t oplen = 2;
        if (!op) {
            op = strstr(term, "==");
            o = APISEL_EQ;
        }
        if (!op) {
            op = strchr(term, '=');
            oplen = 1;
        }
        if (!op || op == term) {
            rc = err_set(err, TERN_EINVALID, "invalid selector: '%s'; can't understand '%s'",
                         str, term);
            free(term);
            goto out;
        }
        struct apisel_req *r = new_req(s);
        r->key = xstrndup(term, (size_t)(op - term));
        r->op = o;
        add_value(r, xstrdup(op + oplen));
        free(term);
        if (!end)
            break;
        p = end + 1;
    }
out:
    if (rc) {
        apisel_free(s);
        return rc;
    }
    *ret = s;
    return 0;
}

static bool req_match(const struct apisel_req *r, bool has, const char *v)
{
    switch (r->op) {
    case APISEL_EXISTS: return has;
    case APISEL_NOTEXISTS: return !has;
    case APISEL_EQ: return has && strcmp(v, r->values[0]) == 0;
    case APISEL_NE: return !has || strcmp(v, r->values[0]) != 0;
    case APISEL_IN:
    case APISEL_NOTIN: {
        bool in = false;
        for (size_t i = 0; has && i < r->nvalues; i++)
            if (strcmp(v, r->values[i]) == 0)
                in = true;
        return r->op == APISEL_IN ? in : !in;
    }
    }
    return false;
}

bool apisel_match_labels(const struct apisel *s, const cJSON *labels)
{
    if (!s)
        return true;
    for (size_t i = 0; i < s->n; i++) {
        const cJSON *v = json_get(labels, s->r[i].key);
        bool has = v && cJSON_IsString(v);
        if (!req_match(&s->r[i], has, has ? v->valuestring : ""))
            return false;
    }
    return true;
}

const char *apisel_field_value(const cJSON *obj, const char *path, char *buf, size_t n)
{
    const cJSON *cur = obj;
    const char *p = path;
    while (cur && *p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        const cJSON *next = NULL;
        for (const cJSON *c = cJSON_IsObject(cur) ? cur->child : NULL; c; c = c->next)
            if (c->string && strlen(c->string) == len && memcmp(c->string, p, len) == 0) {
                next = c;
                break;
            }
        cur = next;
        p = dot ? dot + 1 : p + len;
    }
    if (!cur)
        return "";
    if (cJSON_IsString(cur))
        return cur->valuestring;
    if (cJSON_IsBool(cur))
        return cJSON_IsTrue(cur) ? "true" : "false";
    if (cJSON_IsNumber(cur)) {
        if (cur->valuestring)
            return cur->valuestring;
        snprintf(buf, n, "%lld", (long long)cur->valuedouble);
        return buf;
    }
    return "";
}

bool apisel_match_fields(const struct apisel *s, const cJSON *obj)
{
    if (!s)
        return true;
    char tmp[32];
    for (size_t i = 0; i < s->n; i++) {
        const char *v = apisel_field_value(obj, s->r[i].key, tmp, sizeof(tmp));
        if (!req_match(&s->r[i], true, v))
            return false;
    }
    return true;
}
