/* sbapi.c - exec request parsing and response building. See sbapi.h. */
#include "sbapi.h"

#include "base/mem.h"
#include "json/json.h"
#include "sandbox/wspath.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

void sbapi_exec_done(struct sbapi_exec *r)
{
    free_strv(r->argv);
    free_strv(r->env);
    free(r->cwd);
    free(r->stdin_data);
    memset(r, 0, sizeof *r);
}

static bool env_name_ok(const char *s)
{
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
        return false;
    for (s++; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return false;
    return true;
}

int sbapi_parse_exec(const char *body, size_t n, int64_t default_timeout_ms,
                     struct sbapi_exec *ret, struct tern_err *err)
{
    struct sbapi_exec r = {0};
    cJSON *j = NULL;
    int rc;
    if (n > TERN_SANDBOX_MAX_EXEC_BODY)
        return err_set(err, TERN_ETOOLARGE, "exec body over %u bytes", TERN_SANDBOX_MAX_EXEC_BODY);
    rc = json_parse(body, n, &j, err);
    if (rc != 0)
        goto out;
    if (!cJSON_IsObject(j)) {
        rc = err_set(err, TERN_EINVALID, "exec body: must be a JSON object");
        goto out;
    }
    static const char *const known[] = {"cmd", "argv", "cwd", "env", "timeoutMs", "stdin"};
    for (const cJSON *it = j->child; it; it = it->next) {
        bool ok = false;
        for (size_t i = 0; i < sizeof known / sizeof *known; i++)
            ok = ok || strcmp(it->string, known[i]) == 0;
        if (!ok) {
            rc = err_set(err, TERN_EINVALID, "%.100s: unknown field", it->string);
            goto out;
        }
    }
    const char *cmd = NULL, *cwd = NULL, *in = NULL;
    const cJSON *argv = NULL, *env = NULL;
    int64_t tmo = default_timeout_ms;
    if ((rc = json_get_string(j, "", "cmd", JSON_OPTIONAL, &cmd, err)) ||
        (rc = json_get_array(j, "", "argv", JSON_OPTIONAL, &argv, err)) ||
        (rc = json_get_string(j, "", "cwd", JSON_OPTIONAL, &cwd, err)) ||
        (rc = json_get_object(j, "", "env", JSON_OPTIONAL, &env, err)) ||
        (rc = json_get_int_range(j, "", "timeoutMs", JSON_OPTIONAL, 1, TERN_SANDBOX_MAX_TIMEOUT_MS,
                                 &tmo, err)) ||
        (rc = json_get_string(j, "", "stdin", JSON_OPTIONAL, &in, err)))
        goto out;
    if (!!cmd == !!argv) {
        rc = err_set(err, TERN_EINVALID, "exactly one of cmd and argv is required");
        goto out;
    }
    if (cmd) {
        if (!cmd[0]) {
            rc = err_set(err, TERN_EINVALID, "cmd: must not be empty");
            goto out;
        }
        r.argv = xcalloc(4, sizeof *r.argv);
        r.argv[0] = xstrdup("/bin/sh");
        r.argv[1] = xstrdup("-c");
        r.argv[2] = xstrdup(cmd);
    } else {
        int na = cJSON_GetArraySize(argv);
        if (na < 1 || na > TERN_SANDBOX_MAX_ARGV) {
            rc = err_set(err, na < 1 ? TERN_EINVALID : TERN_ETOOLARGE,
                         "argv: must have 1 to %d entries", TERN_SANDBOX_MAX_ARGV);
            goto out;
        }
        r.argv = xcalloc((size_t)na + 1, sizeof *r.argv);
        int i = 0;
        for (const cJSON *it = argv->child; it; it = it->next, i++) {
            if (!cJSON_IsString(it) || (i == 0 && !it->valuestring[0])) {
                rc = err_set(err, TERN_EINVALID, "argv[%d]: must be a%s string", i,
                             i == 0 ? " non-empty" : "");
                goto out;
            }
            r.argv[i] = xstrdup(it->valuestring);
        }
    }
    if (env) {
        int ne = cJSON_GetArraySize(env);
        if (ne > TERN_SANDBOX_MAX_ENV) {
            rc = err_set(err, TERN_ETOOLARGE, "env: more than %d entries", TERN_SANDBOX_MAX_ENV);
            goto out;
        }
        r.env = xcalloc((size_t)ne + 1, sizeof *r.env);
        int i = 0;
        for (const cJSON *it = env->child; it; it = it->next, i++) {
            if (!env_name_ok(it->string) || strlen(it->string) > 256) {
                rc = err_set(err, TERN_EINVALID, "env: bad variable name \"%.64s\"", it->string);
                goto out;
            }
            if (!cJSON_IsString(it)) {
                rc = err_set(err, TERN_EINVALID, "env.%.64s: must be a string", it->string);
                goto out;
            }
            r.env[i] = xasprintf("%s=%s", it->string, it->valuestring);
        }
    }
    char norm[WSPATH_BUF];
    rc = wspath_normalize(cwd ? cwd : "", norm);
    if (rc != 0) {
        err_set(err, rc, "cwd: %s", rc == -EXDEV ? "escapes the workspace" : err_str(rc));
        goto out;
    }
    r.cwd = xstrdup(norm);
    if (in) {
        size_t il = strlen(in);
        if (il > TERN_SANDBOX_MAX_STDIN) {
            rc = err_set(err, TERN_ETOOLARGE, "stdin: over %u bytes", TERN_SANDBOX_MAX_STDIN);
            goto out;
        }
        r.stdin_data = xmemdup(in, il + 1);
        r.stdin_len = il;
    }
    r.timeout_ms = tmo;
    *ret = r;
    r = (struct sbapi_exec){0};
out:
    sbapi_exec_done(&r);
    cJSON_Delete(j);
    return rc;
}

static int put_field(struct buf *b, const char *tag, const char *p, size_t n)
{
    int rc = buf_printf(b, "%s%zu:", tag, n);
    return rc ? rc : buf_append(b, p, n);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int sbapi_exec_canonical(const struct sbapi_exec *r, struct buf *out)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && r->argv && r->argv[i]; i++)
        rc = put_field(out, "a", r->argv[i], strlen(r->argv[i]));
    if (rc == 0)
        rc = put_field(out, "c", r->cwd ? r->cwd : "", r->cwd ? strlen(r->cwd) : 0);
    size_t ne = 0;
    while (r->env && r->env[ne])
        ne++;
    if (ne && rc == 0) {
        char **sorted = xmemdup(r->env, ne * sizeof *sorted);
        qsort(sorted, ne, sizeof *sorted, cmp_str);
        for (size_t i = 0; rc == 0 && i < ne; i++)
            rc = put_field(out, "e", sorted[i], strlen(sorted[i]));
        free(sorted);
    }
    if (rc == 0)
        rc = buf_printf(out, "t%lld;", (long long)r->timeout_ms);
    if (rc == 0 && r->stdin_data)
        rc = put_field(out, "i", r->stdin_data, r->stdin_len);
    return rc;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid/cut. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, min = 0x10000;
    else
        return 0;
    if (n < len)
        return 0;
    unsigned cp = c & (0xff >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

int sbapi_utf8_sanitize(const char *p, size_t n, struct buf *out)
{
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0, start = 0;
    int rc = 0;
    while (i < n && rc == 0) {
        size_t k = utf8_seq(u + i, n - i);
        if (k && u[i] != 0) { /* NUL would end the C string */
            i += k;
            continue;
        }
        rc = buf_append(out, p + start, i - start);
        if (rc == 0)
            rc = buf_append(out, "\xef\xbf\xbd", 3);
        i++;
        start = i;
    }
    if (rc == 0)
        rc = buf_append(out, p + start, i - start);
    return rc;
}

static void add_text(cJSON *o, const char *key, const struct buf *b)
{
    struct buf s;
    /* worst case every byte becomes 3 */
    buf_init(&s, 3 * b->len + 1);
    sbapi_utf8_sanitize(b->data ? b->data : "", b->len, &s);
    cJSON_AddItemToObject(o, key, cJSON_CreateString(buf_str(&s)));
    buf_done(&s);
}

cJSON *sbapi_exec_response(const struct sbexec_result *r)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "status", r->status == SBEXEC_TIMEOUT ? "timeout" : "completed");
    if (r->exited) {
        json_add_int64(o, "exitCode", r->exit_code);
        cJSON_AddNullToObject(o, "signal");
    } else {
        cJSON_AddNullToObject(o, "exitCode");
        json_add_int64(o, "signal", r->term_signal);
    }
    add_text(o, "stdout", &r->out);
    add_text(o, "stderr", &r->err);
    json_add_int64(o, "stdoutBytes", (int64_t)r->out_total);
    json_add_int64(o, "stderrBytes", (int64_t)r->err_total);
    cJSON_AddBoolToObject(o, "truncated", r->truncated);
    json_add_int64(o, "durationMs", r->duration_ms);
    return o;
}

char *sbapi_error_body(const char *code, const char *message)
{
    cJSON *o = cJSON_CreateObject(), *e = cJSON_CreateObject();
    json_add_string(e, "code", code);
    struct buf s;
    size_t ml = strlen(message);
    buf_init(&s, 3 * ml + 1);
    sbapi_utf8_sanitize(message, ml, &s);
    json_add_string(e, "message", buf_str(&s));
    buf_done(&s);
    cJSON_AddItemToObject(o, "error", e);
    char *t = json_print(o);
    cJSON_Delete(o);
    return t;
}
