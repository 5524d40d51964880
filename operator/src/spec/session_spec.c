/* session_spec.c - AgentSession JSON -> validated struct session_spec.
 * See session_spec.h; the rules mirror crds/agentsessions.tern.dev.yaml. */
#include "session_spec.h"

#include "base/glob.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/jschema.h"
#include "json/json.h"
#include "spec/template.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define PATH_MAX_LEN 256

static const char *const tool_names[] = {"exec_command", "read_file", "write_file", "list_files"};

unsigned session_tool_from_name(const char *name)
{
    for (unsigned i = 0; i < 4; i++)
        if (strcmp(name, tool_names[i]) == 0)
            return 1u << i;
    return 0;
}

const char *session_tool_name(unsigned tool)
{
    for (unsigned i = 0; i < 4; i++)
        if (tool == 1u << i)
            return tool_names[i];
    if (tool == SESSION_TOOL_PUBLISH_BRANCH)
        return "publish_branch";
    if (tool == SESSION_TOOL_MCP)
        return "mcp";
    return NULL;
}

/* ---- small validators ---- */

static size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            n++;
    return n;
}

static bool is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [a-z0-9]([-a-z0-9]*[a-z0-9])? over s[0..n) */
static bool dns_label_n(const char *s, size_t n)
{
    if (n == 0 || n > 63 || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_lower_alnum(s[i]) && s[i] != '-')
            return false;
    return true;
}

static bool dns_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    const char *start = s;
    for (const char *p = s;; p++) {
        if (*p == '.' || *p == '\0') {
            if (!dns_label_n(start, (size_t)(p - start)))
                return false;
            if (*p == '\0')
                return true;
            start = p + 1;
        }
    }
}

static bool secret_key_ok(const char *s)
{
    if (!*s || strlen(s) > 253)
        return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_'))
            return false;
    }
    return true;
}

/* ^https?://[^\s]+$ */
static bool http_url_ok(const char *s)
{
    const char *rest;
    if (strncmp(s, "http://", 7) == 0)
        rest = s + 7;
    else if (strncmp(s, "https://", 8) == 0)
        rest = s + 8;
    else
        return false;
    if (!*rest)
        return false;
    for (; *rest; rest++)
        if (*rest == ' ' || *rest == '\t' || *rest == '\n' || *rest == '\r' || *rest == '\f' ||
            *rest == '\v')
            return false;
    return true;
}

/* http_url_ok, and no user information before the host: credentials come
 * from Secrets, never from the spec. */
static bool trusted_url_ok(const char *s)
{
    if (!http_url_ok(s))
        return false;
    const char *host = strstr(s, "://") + 3;
    size_t n = strcspn(host, "/?#");
    return n > 0 && !memchr(host, '@', n);
}

/* ---- getters over json.h with our messages ---- */

static const char *sep(const char *path)
{
    return *path ? "." : "";
}

static void join(char *out, const char *path, const char *key)
{
    snprintf(out, PATH_MAX_LEN, "%s%s%s", path, sep(path), key);
}

/* Rejects members of obj not in allowed (NULL-terminated). */
static int check_fields(const cJSON *obj, const char *path, const char *const *allowed,
                        struct tern_err *err)
{
    for (const cJSON *c = obj->child; c; c = c->next) {
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            if (c->string && strcmp(c->string, *a) == 0) {
                ok = true;
                break;
            }
        if (!ok)
            return err_set(err, TERN_EINVALID, "%s%s%s: unknown field", path, sep(path),
                           c->string ? c->string : "");
    }
    return 0;
}

/* A string member, copied into *ret (which must be NULL or a default that is
 * freed on replacement). Absent/null and optional: 0, *ret unchanged. */
static int get_str(const cJSON *obj, const char *path, const char *key, enum json_need need,
                   size_t maxlen, char **ret, struct tern_err *err)
{
    const char *v = NULL;
    int r = json_get_string(obj, path, key, need, &v, err);
    if (r || !v)
        return r;
    if (utf8_chars(v) > maxlen)
        return err_set(err, TERN_EINVALID, "%s%s%s: must be no more than %zu characters", path,
                       sep(path), key, maxlen);
    free(*ret);
    *ret = xstrdup(v);
    return 0;
}

/* The same, non-empty. */
static int get_str_ne(const cJSON *obj, const char *path, const char *key, enum json_need need,
                      size_t maxlen, char **ret, struct tern_err *err)
{
    const char *v = NULL;
    int r = json_get_string(obj, path, key, need, &v, err);
    if (r || !v)
        return r;
    if (!*v)
        return err_set(err, TERN_EINVALID, "%s%s%s: must not be empty", path, sep(path), key);
    return get_str(obj, path, key, need, maxlen, ret, err);
}

static int get_name(const cJSON *obj, const char *path, const char *key, enum json_need need,
                    char **ret, struct tern_err *err)
{
    char *v = NULL;
    int r = get_str(obj, path, key, need, 253, &v, err);
    if (r || !v)
        return r;
    if (!dns_subdomain(v)) {
        free(v);
        return err_set(err, TERN_EINVALID,
                       "%s%s%s: must be a DNS subdomain (lowercase letters, digits, '-' and '.')",
                       path, sep(path), key);
    }
    free(*ret);
    *ret = v;
    return 0;
}

/* A JSON integer (not a digit string, not a fraction) within [min, max]. */
static int get_int(const cJSON *obj, const char *path, const char *key, enum json_need need,
                   int64_t min, int64_t max, int64_t *ret, struct tern_err *err)
{
    const cJSON *it = json_get(obj, key);
    if (it && !cJSON_IsNull(it) && !cJSON_IsNumber(it))
        return err_set(err, TERN_EINVALID, "%s%s%s: must be an integer", path, sep(path), key);
    return json_get_int_range(obj, path, key, need, min, max, ret, err);
}

static int get_object(const cJSON *obj, const char *path, const char *key, enum json_need need,
                      const char *const *allowed, const cJSON **ret, char *ret_path,
                      struct tern_err *err)
{
    const cJSON *o = NULL;
    int r = json_get_object(obj, path, key, need, &o, err);
    if (r || !o)
        return r;
    join(ret_path, path, key);
    if ((r = check_fields(o, ret_path, allowed, err)))
        return r;
    *ret = o;
    return 0;
}

static int get_array(const cJSON *obj, const char *path, const char *key, int maxitems,
                     const cJSON **ret, struct tern_err *err)
{
    const cJSON *a = NULL;
    int r = json_get_array(obj, path, key, JSON_OPTIONAL, &a, err);
    if (r || !a)
        return r;
    if (cJSON_GetArraySize(a) > maxitems)
        return err_set(err, TERN_EINVALID, "%s%s%s: must have at most %d items", path, sep(path),
                       key, maxitems);
    *ret = a;
    return 0;
}

/* Each item of an array of strings: non-empty, at most maxlen characters. */
static int get_string_list(const cJSON *obj, const char *path, const char *key, int maxitems,
                           size_t maxlen, char ***ret, size_t *ret_n, struct tern_err *err)
{
    const cJSON *a = NULL;
    int r = get_array(obj, path, key, maxitems, &a, err);
    if (r || !a)
        return r;
    size_t n = (size_t)cJSON_GetArraySize(a), i = 0;
    char **v = xcalloc(n ? n : 1, sizeof *v);
    for (const cJSON *it = a->child; it; it = it->next, i++) {
        if (!cJSON_IsString(it)) {
            r = err_set(err, TERN_EINVALID, "%s%s%s[%zu]: must be a string", path, sep(path), key,
                        i);
            goto fail;
        }
        if (!*it->valuestring) {
            r = err_set(err, TERN_EINVALID, "%s%s%s[%zu]: must not be empty", path, sep(path), key,
                        i);
            goto fail;
        }
        if (utf8_chars(it->valuestring) > maxlen) {
            r = err_set(err, TERN_EINVALID, "%s%s%s[%zu]: must be no more than %zu characters",
                        path, sep(path), key, i, maxlen);
            goto fail;
        }
        v[i] = xstrdup(it->valuestring);
    }
    for (size_t k = 0; k < *ret_n; k++)
        free((*ret)[k]);
    free(*ret);
    *ret = v;
    *ret_n = n;
    return 0;
fail:
    for (size_t k = 0; k < i; k++)
        free(v[k]);
    free(v);
    return r;
}

/* Quantity member (int-or-string), > 0. */
static int get_quantity(const cJSON *obj, const char *path, const char *key, struct quantity *ret,
                        struct tern_err *err)
{
    const cJSON *it = json_get(obj, key);
    if (!it || cJSON_IsNull(it))
        return 0;
    char digits[24];
    const char *text = NULL;
    int64_t v;
    if (cJSON_IsString(it)) {
        text = it->valuestring;
    } else if (cJSON_IsNumber(it) && json_item_int64(it, &v) == 0) {
        text = num_fmt_i64(v, digits);
    }
    struct quantity q;
    if (!text || quantity_parse(text, &q) != 0)
        return err_set(err, TERN_EINVALID,
                       "%s%s%s: must be a Kubernetes quantity (e.g. 500m, 2, 1Gi)", path, sep(path),
                       key);
    if (q.milli <= 0)
        return err_set(err, TERN_EINVALID, "%s%s%s: must be greater than zero", path, sep(path),
                       key);
    *ret = q;
    return 0;
}

/* {configMapRef: {name}} -> the name. */
static int get_cm_ref(const cJSON *holder, const char *path, char **ret, struct tern_err *err)
{
    static const char *const ref_fields[] = {"configMapRef", NULL};
    static const char *const name_fields[] = {"name", NULL};
    int r = check_fields(holder, path, ref_fields, err);
    if (r)
        return r;
    const cJSON *ref = NULL;
    char rpath[PATH_MAX_LEN];
    if ((r = get_object(holder, path, "configMapRef", JSON_REQUIRED, name_fields, &ref, rpath,
                        err)))
        return r;
    return get_name(ref, rpath, "name", JSON_REQUIRED, ret, err);
}

static int get_cm_ref_list(const cJSON *obj, const char *path, const char *key, int maxitems,
                           char ***ret, size_t *ret_n, struct tern_err *err)
{
    const cJSON *a = NULL;
    int r = get_array(obj, path, key, maxitems, &a, err);
    if (r || !a)
        return r;
    size_t n = (size_t)cJSON_GetArraySize(a), i = 0;
    char **v = xcalloc(n ? n : 1, sizeof *v);
    for (const cJSON *it = a->child; it; it = it->next, i++) {
        char ipath[PATH_MAX_LEN];
        snprintf(ipath, sizeof ipath, "%s%s%s[%zu]", path, sep(path), key, i);
        if (!cJSON_IsObject(it)) {
            r = err_set(err, TERN_EINVALID, "%s: must be an object", ipath);
            goto fail;
        }
        if ((r = get_cm_ref(it, ipath, &v[i], err)))
            goto fail;
    }
    *ret = v;
    *ret_n = n;
    return 0;
fail:
    for (size_t k = 0; k < n; k++)
        free(v[k]);
    free(v);
    return r;
}

/* ---- CIDRs ---- */

int session_cidr_parse(const char *text, struct session_cidr *ret)
{
    const char *slash = strchr(text, '/');
    if (!slash || slash == text || (size_t)(slash - text) >= INET6_ADDRSTRLEN)
        return -EINVAL;
    char addr[INET6_ADDRSTRLEN];
    memcpy(addr, text, (size_t)(slash - text));
    addr[slash - text] = '\0';
    struct session_cidr c = {0};
    if (inet_pton(AF_INET, addr, c.addr) == 1)
        c.family = AF_INET;
    else if (inet_pton(AF_INET6, addr, c.addr) == 1)
        c.family = AF_INET6;
    else
        return -EINVAL;
    const char *p = slash + 1;
    if (!*p || strlen(p) > 3 || (p[0] == '0' && p[1]))
        return -EINVAL;
    int64_t prefix;
    if (num_parse_range(p, 0, c.family == AF_INET ? 32 : 128, &prefix) != 0 || p[0] == '-')
        return -EINVAL;
    c.prefix = (int)prefix;
    *ret = c;
    return 0;
}

bool session_cidr_contains(const struct session_cidr *c, int family, const uint8_t *addr)
{
    if (c->family != family)
        return false;
    int full = c->prefix / 8, rest = c->prefix % 8;
    if (memcmp(c->addr, addr, (size_t)full) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (c->addr[full] & mask) == (addr[full] & mask);
}

/* Text that is an address rather than a name: any ':' before the last one
 * (IPv6), or only digits and dots before an optional port. Such text is
 * judged as a CIDR, so "10.0.0.1" gets the CIDR message. */
static bool looks_like_address(const char *v)
{
    const char *colon = strchr(v, ':');
    if (colon && strchr(colon + 1, ':'))
        return true;
    size_t n = colon ? (size_t)(colon - v) : strlen(v);
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(v[i] >= '0' && v[i] <= '9') && v[i] != '.')
            return false;
    return true;
}

int session_host_parse(const char *text, struct session_host *ret, const char **why)
{
    const char *w = "invalid host name";
    const char *name = text;
    bool wildcard = false;
    if (strncmp(name, "*.", 2) == 0) {
        wildcard = true;
        name += 2;
    }
    const char *colon = strchr(name, ':');
    size_t n = colon ? (size_t)(colon - name) : strlen(name);
    int64_t port = 0;
    if (colon) {
        const char *p = colon + 1;
        if (!*p || strlen(p) > 5 || p[0] == '0' || num_parse_range(p, 1, 65535, &port) != 0 ||
            strspn(p, "0123456789") != strlen(p)) {
            w = "the port must be a number from 1 to 65535";
            goto bad;
        }
    }
    if (n == 0) {
        w = "the host name is empty";
        goto bad;
    }
    if (n > SESSION_MAX_HOST_NAME) {
        w = "a host name has at most 253 characters";
        goto bad;
    }
    if (memchr(name, '*', n)) {
        w = "a wildcard is only allowed as the whole first label, as in *.example.com";
        goto bad;
    }
    for (size_t i = 0; i < n; i++)
        if (name[i] >= 'A' && name[i] <= 'Z') {
            w = "host names are written in lower case";
            goto bad;
        }
    size_t labels = 0;
    const char *last = name;
    for (const char *p = name; p < name + n;) {
        const char *dot = memchr(p, '.', (size_t)(name + n - p));
        size_t len = dot ? (size_t)(dot - p) : (size_t)(name + n - p);
        if (!dns_label_n(p, len)) {
            w = "each label must be 1 to 63 characters of a-z, 0-9 and '-', not starting or "
                "ending with '-'";
            goto bad;
        }
        labels++;
        last = p;
        if (!dot)
            break;
        p = dot + 1;
        if (p == name + n) { /* trailing dot */
            w = "each label must be 1 to 63 characters of a-z, 0-9 and '-', not starting or "
                "ending with '-'";
            goto bad;
        }
    }
    if (labels < 2) {
        w = "a host name needs at least two labels, as in pypi.org";
        goto bad;
    }
    if (!(last[0] >= 'a' && last[0] <= 'z')) {
        w = "the last label must start with a letter";
        goto bad;
    }
    *ret = (struct session_host){
        .name = xstrndup(name, n),
        .wildcard = wildcard,
        .port = (int)port,
    };
    return 0;
bad:
    if (why)
        *why = w;
    return -EINVAL;
}

bool session_host_match(const struct session_host *h, const char *name, int port)
{
    if (h->port ? port != h->port : (port != 80 && port != 443))
        return false;
    size_t n = strlen(name), hn = strlen(h->name);
    if (!h->wildcard)
        return n == hn && memcmp(name, h->name, n) == 0;
    return n > hn + 1 && name[n - hn - 1] == '.' && memcmp(name + n - hn, h->name, hn) == 0;
}

bool session_spec_requires_approval(const struct session_spec *s, unsigned tool,
                                    const char *subject)
{
    for (size_t i = 0; i < s->permissions.napprovals; i++) {
        const struct session_approval_rule *a = &s->permissions.approvals[i];
        bool text = tool == SESSION_TOOL_EXEC_COMMAND || tool == SESSION_TOOL_PUBLISH_BRANCH;
        if (a->tool == tool && glob_match(a->glob, subject, text ? GLOB_TEXT : GLOB_PATH))
            return true;
    }
    return false;
}

bool session_spec_path_writable(const struct session_spec *s, const char *path)
{
    for (size_t i = 0; i < s->permissions.nwritable; i++)
        if (glob_match(s->permissions.writable[i], path, GLOB_PATH))
            return true;
    return false;
}

/* ^(working|output)(/.*)?$ with no "." or ".." segment */
static const char *writable_problem(const char *g)
{
    size_t skip;
    if (strncmp(g, "working", 7) == 0)
        skip = 7;
    else if (strncmp(g, "output", 6) == 0)
        skip = 6;
    else
        return "must be under working/ or output/";
    if (g[skip] != '\0' && g[skip] != '/')
        return "must be under working/ or output/";
    for (const char *p = g; *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
            return "must not contain . or .. path segments";
        if (!e)
            break;
        p = e + 1;
    }
    return NULL;
}

/* ---- the sections of spec ---- */

/* A requiresApproval entry for a trusted tool (spec.tools is parsed
 * before permissions): "publish_branch:<glob>" needs spec.tools.publish;
 * "mcp:<server>/<tool glob>:<arguments glob>" a server of that name. */
static int trusted_rule(struct session_spec *s, const char *path, size_t i, const char *tname,
                        const char *rest, struct tern_err *err)
{
    unsigned kind = strcmp(tname, "mcp") == 0 ? SESSION_TOOL_MCP : SESSION_TOOL_PUBLISH_BRANCH;
    if (kind == SESSION_TOOL_PUBLISH_BRANCH) {
        if (!*rest || !glob_valid(rest))
            return err_set(err, TERN_EINVALID,
                           "%s.requiresApproval[%zu]: invalid glob (unterminated [class], "
                           "reversed range or trailing backslash)",
                           path, i);
        if (s->tools.nremotes == 0)
            return err_set(err, TERN_EINVALID,
                           "%s.requiresApproval[%zu]: publish_branch is not offered without "
                           "spec.tools.publish",
                           path, i);
    } else {
        const char *slash = strchr(rest, '/');
        const char *colon = slash ? strchr(slash + 1, ':') : NULL;
        if (!slash || !colon || colon == slash + 1 || !colon[1])
            return err_set(err, TERN_EINVALID,
                           "%s.requiresApproval[%zu]: must be \"mcp:<server>/<tool "
                           "glob>:<arguments glob>\"",
                           path, i);
        char *tool = xstrndup(slash + 1, (size_t)(colon - slash - 1));
        bool ok = glob_valid(tool) && glob_valid(colon + 1);
        free(tool);
        if (!ok)
            return err_set(err, TERN_EINVALID,
                           "%s.requiresApproval[%zu]: invalid glob (unterminated [class], "
                           "reversed range or trailing backslash)",
                           path, i);
        bool known = false;
        for (size_t k = 0; k < s->tools.nmcp && !known; k++)
            known = strlen(s->tools.mcp[k].name) == (size_t)(slash - rest) &&
                    strncmp(s->tools.mcp[k].name, rest, (size_t)(slash - rest)) == 0;
        if (!known)
            return err_set(err, TERN_EINVALID,
                           "%s.requiresApproval[%zu]: MCP server \"%.*s\" is not in "
                           "spec.tools.mcpServers",
                           path, i, (int)(slash - rest > 64 ? 64 : slash - rest), rest);
    }
    s->permissions.approvals[i].tool = kind;
    s->permissions.approvals[i].glob = xstrdup(rest);
    s->permissions.napprovals = i + 1;
    return 0;
}

static int get_url(const cJSON *o, const char *path, const char *key, char **ret,
                   struct tern_err *err)
{
    int r = get_str(o, path, key, JSON_REQUIRED, SESSION_MAX_URL, ret, err);
    if (r)
        return r;
    if (!trusted_url_ok(*ret))
        return err_set(err, TERN_EINVALID,
                       "%s.%s: must be an http or https URL without user information "
                       "(credentials come from a Secret)",
                       path, key);
    return 0;
}

/* A DNS label of at most max characters. */
static int get_label(const cJSON *o, const char *path, const char *key, size_t max, char **ret,
                     struct tern_err *err)
{
    int r = get_str_ne(o, path, key, JSON_REQUIRED, max, ret, err);
    if (r)
        return r;
    if (!dns_label_n(*ret, strlen(*ret)))
        return err_set(err, TERN_EINVALID,
                       "%s.%s: must be a DNS label (lowercase letters, digits, '-')", path, key);
    return 0;
}

static int parse_mcp_server(const cJSON *it, const char *ipath, struct session_mcp_server *m,
                            struct tern_err *err)
{
    static const char *const fields[] = {"name", "url", "headersSecretRef", "allowedTools",
                                         "timeoutSeconds", NULL};
    static const char *const ref_fields[] = {"name", NULL};
    const cJSON *ref = NULL;
    char rpath[PATH_MAX_LEN];
    int r;
    m->timeout_seconds = SESSION_DEFAULT_MCP_TIMEOUT;
    if ((r = check_fields(it, ipath, fields, err)) ||
        (r = get_label(it, ipath, "name", SESSION_MAX_MCP_NAME, &m->name, err)) ||
        (r = get_url(it, ipath, "url", &m->url, err)) ||
        (r = get_object(it, ipath, "headersSecretRef", JSON_OPTIONAL, ref_fields, &ref, rpath,
                        err)) ||
        (ref && (r = get_name(ref, rpath, "name", JSON_REQUIRED, &m->headers_secret, err))) ||
        (r = get_int(it, ipath, "timeoutSeconds", JSON_OPTIONAL, 1, SESSION_MAX_MCP_TIMEOUT,
                     &m->timeout_seconds, err)))
        return r;
    if (!json_get(it, "allowedTools"))
        return err_set(err, TERN_EINVALID, "%s.allowedTools: Required value", ipath);
    if ((r = get_string_list(it, ipath, "allowedTools", SESSION_MAX_MCP_ALLOWED,
                             SESSION_MAX_MCP_TOOL, &m->allowed, &m->nallowed, err)))
        return r;
    if (m->nallowed == 0)
        return err_set(err, TERN_EINVALID, "%s.allowedTools: must have at least 1 item", ipath);
    for (size_t k = 0; k < m->nallowed; k++) {
        const char *t = m->allowed[k];
        for (const char *c = t; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '_' || *c == '-'))
                return err_set(err, TERN_EINVALID,
                               "%s.allowedTools[%zu]: must consist of letters, digits, '_' or "
                               "'-'",
                               ipath, k);
        for (size_t j = 0; j < k; j++)
            if (strcmp(m->allowed[j], t) == 0)
                return err_set(err, TERN_EINVALID, "%s.allowedTools[%zu]: duplicate value \"%s\"",
                               ipath, k, t);
    }
    return 0;
}

static int parse_remote(const cJSON *it, const char *ipath, struct session_publish_remote *m,
                        struct tern_err *err)
{
    static const char *const fields[] = {"name", "url", "tokenSecretRef", "username", "auth",
                                         NULL};
    static const char *const ref_fields[] = {"name", "key", NULL};
    const cJSON *ref = NULL;
    char rpath[PATH_MAX_LEN];
    const char *auth = NULL;
    int r;
    if ((r = check_fields(it, ipath, fields, err)) ||
        (r = get_label(it, ipath, "name", SESSION_MAX_REMOTE_NAME, &m->name, err)) ||
        (r = get_url(it, ipath, "url", &m->url, err)) ||
        (r = get_object(it, ipath, "tokenSecretRef", JSON_REQUIRED, ref_fields, &ref, rpath,
                        err)) ||
        (r = get_name(ref, rpath, "name", JSON_REQUIRED, &m->token_secret, err)) ||
        (r = get_str(ref, rpath, "key", JSON_REQUIRED, 253, &m->token_key, err)))
        return r;
    if (!secret_key_ok(m->token_key))
        return err_set(err, TERN_EINVALID,
                       "%s.key: must consist of letters, digits, '-', '_' or '.'", rpath);
    m->username = xstrdup(SESSION_DEFAULT_PUBLISH_USERNAME);
    if ((r = get_str_ne(it, ipath, "username", JSON_OPTIONAL, SESSION_MAX_USERNAME, &m->username,
                        err)))
        return r;
    for (const char *c = m->username; *c; c++)
        if (*c == ':' || (unsigned char)*c <= 0x20 || *c == 0x7f)
            return err_set(err, TERN_EINVALID,
                           "%s.username: must not contain ':', spaces or control characters",
                           ipath);
    if ((r = json_get_string(it, ipath, "auth", JSON_OPTIONAL, &auth, err)))
        return r;
    if (auth && strcmp(auth, "Basic") != 0 && strcmp(auth, "Bearer") != 0)
        return err_set(err, TERN_EINVALID, "%s.auth: must be one of: Basic, Bearer", ipath);
    m->bearer = auth && strcmp(auth, "Bearer") == 0;
    return 0;
}

static int parse_tools(const cJSON *spec, struct session_spec *s, struct tern_err *err)
{
    static const char *const fields[] = {"mcpServers", "publish", NULL};
    static const char *const pub_fields[] = {"remotes", NULL};
    const cJSON *t = NULL, *a = NULL, *pub = NULL;
    char path[PATH_MAX_LEN], ppath[PATH_MAX_LEN];
    int r = get_object(spec, "spec", "tools", JSON_OPTIONAL, fields, &t, path, err);
    if (r || !t)
        return r;
    if ((r = get_array(t, path, "mcpServers", SESSION_MAX_MCP_SERVERS, &a, err)))
        return r;
    size_t n = a ? (size_t)cJSON_GetArraySize(a) : 0, i = 0;
    s->tools.mcp = n ? xcalloc(n, sizeof *s->tools.mcp) : NULL;
    for (const cJSON *it = a ? a->child : NULL; it; it = it->next, i++) {
        char ipath[PATH_MAX_LEN + 32];
        snprintf(ipath, sizeof ipath, "%s.mcpServers[%zu]", path, i);
        if (!cJSON_IsObject(it))
            return err_set(err, TERN_EINVALID, "%s: must be an object", ipath);
        s->tools.nmcp = i + 1;
        if ((r = parse_mcp_server(it, ipath, &s->tools.mcp[i], err)))
            return r;
        for (size_t j = 0; j < i; j++)
            if (strcmp(s->tools.mcp[j].name, s->tools.mcp[i].name) == 0)
                return err_set(err, TERN_EINVALID, "%s: duplicate name \"%s\"", ipath,
                               s->tools.mcp[i].name);
    }
    if ((r = get_object(t, path, "publish", JSON_OPTIONAL, pub_fields, &pub, ppath, err)) || !pub)
        return r;
    a = NULL;
    if ((r = get_array(pub, ppath, "remotes", SESSION_MAX_REMOTES, &a, err)))
        return r;
    if (!a || cJSON_GetArraySize(a) == 0)
        return err_set(err, TERN_EINVALID, "%s.remotes: must have at least 1 item", ppath);
    n = (size_t)cJSON_GetArraySize(a);
    i = 0;
    s->tools.remotes = xcalloc(n, sizeof *s->tools.remotes);
    for (const cJSON *it = a->child; it; it = it->next, i++) {
        char ipath[PATH_MAX_LEN + 32];
        snprintf(ipath, sizeof ipath, "%s.remotes[%zu]", ppath, i);
        if (!cJSON_IsObject(it))
            return err_set(err, TERN_EINVALID, "%s: must be an object", ipath);
        s->tools.nremotes = i + 1;
        if ((r = parse_remote(it, ipath, &s->tools.remotes[i], err)))
            return r;
        for (size_t j = 0; j < i; j++)
            if (strcmp(s->tools.remotes[j].name, s->tools.remotes[i].name) == 0)
                return err_set(err, TERN_EINVALID, "%s: duplicate name \"%s\"", ipath,
                               s->tools.remotes[i].name);
    }
    return 0;
}

static int parse_permissions(const cJSON *spec, struct session_spec *s, struct tern_err *err)
{
    static const char *const fields[] = {"tools", "requiresApproval", "writablePaths",
                                         "networkAllowlist", NULL};
    const cJSON *p = NULL, *a = NULL;
    char path[PATH_MAX_LEN];
    int r = get_object(spec, "spec", "permissions", JSON_OPTIONAL, fields, &p, path, err);
    if (r || !p)
        return r;

    /* tools: a set of known names */
    if ((r = get_array(p, path, "tools", 8, &a, err)))
        return r;
    if (a) {
        unsigned tools = 0;
        size_t i = 0;
        for (const cJSON *it = a->child; it; it = it->next, i++) {
            unsigned t = cJSON_IsString(it) ? session_tool_from_name(it->valuestring) : 0;
            if (!t)
                return err_set(err, TERN_EINVALID,
                               "%s.tools[%zu]: must be one of: exec_command, read_file, "
                               "write_file, list_files",
                               path, i);
            if (tools & t)
                return err_set(err, TERN_EINVALID, "%s.tools[%zu]: duplicate value \"%s\"", path, i,
                               it->valuestring);
            tools |= t;
        }
        s->permissions.tools = tools;
    }

    /* requiresApproval: "tool:glob", tool offered */
    a = NULL;
    if ((r = get_array(p, path, "requiresApproval", SESSION_MAX_APPROVAL_RULES, &a, err)))
        return r;
    if (a) {
        size_t n = (size_t)cJSON_GetArraySize(a), i = 0;
        s->permissions.approvals = xcalloc(n ? n : 1, sizeof *s->permissions.approvals);
        for (const cJSON *it = a->child; it; it = it->next, i++) {
            if (!cJSON_IsString(it))
                return err_set(err, TERN_EINVALID, "%s.requiresApproval[%zu]: must be a string",
                               path, i);
            const char *v = it->valuestring;
            if (utf8_chars(v) > SESSION_MAX_PATTERN_LEN)
                return err_set(err, TERN_EINVALID,
                               "%s.requiresApproval[%zu]: must be no more than %d characters", path,
                               i, SESSION_MAX_PATTERN_LEN);
            const char *colon = strchr(v, ':');
            char tname[16] = "";
            if (colon && (size_t)(colon - v) < sizeof tname) {
                memcpy(tname, v, (size_t)(colon - v));
                tname[colon - v] = '\0';
            }
            if (strcmp(tname, "mcp") == 0 || strcmp(tname, "publish_branch") == 0) {
                if ((r = trusted_rule(s, path, i, tname, colon + 1, err)))
                    return r;
                continue;
            }
            unsigned t = colon ? session_tool_from_name(tname) : 0;
            if (!t || !colon[1])
                return err_set(err, TERN_EINVALID,
                               "%s.requiresApproval[%zu]: must be \"tool:glob\" with tool one of "
                               "exec_command, read_file, write_file, list_files, publish_branch, "
                               "or \"mcp:<server>/<tool glob>:<arguments glob>\"",
                               path, i);
            if (!glob_valid(colon + 1))
                return err_set(err, TERN_EINVALID,
                               "%s.requiresApproval[%zu]: invalid glob (unterminated [class], "
                               "reversed range or trailing backslash)",
                               path, i);
            if (!(s->permissions.tools & t))
                return err_set(err, TERN_EINVALID,
                               "%s.requiresApproval[%zu]: tool %s is not in %s.tools", path, i,
                               tname, path);
            s->permissions.approvals[i].tool = t;
            s->permissions.approvals[i].glob = xstrdup(colon + 1);
            s->permissions.napprovals = i + 1;
        }
    }

    /* writablePaths */
    if ((r = get_string_list(p, path, "writablePaths", SESSION_MAX_WRITABLE,
                             SESSION_MAX_PATTERN_LEN, &s->permissions.writable,
                             &s->permissions.nwritable, err)))
        return r;
    for (size_t i = 0; i < s->permissions.nwritable; i++) {
        const char *why = writable_problem(s->permissions.writable[i]);
        if (!why && !glob_valid(s->permissions.writable[i]))
            why = "invalid glob (unterminated [class], reversed range or trailing backslash)";
        if (why)
            return err_set(err, TERN_EINVALID, "%s.writablePaths[%zu]: %s", path, i, why);
    }

    /* networkAllowlist: CIDRs and host names */
    a = NULL;
    if ((r = get_array(p, path, "networkAllowlist", SESSION_MAX_NETWORK, &a, err)))
        return r;
    if (a) {
        size_t n = (size_t)cJSON_GetArraySize(a), i = 0;
        s->permissions.network = xcalloc(n ? n : 1, sizeof *s->permissions.network);
        s->permissions.hosts = xcalloc(n ? n : 1, sizeof *s->permissions.hosts);
        for (const cJSON *it = a->child; it; it = it->next, i++) {
            const char *v = cJSON_IsString(it) ? it->valuestring : NULL;
            if (!v || strlen(v) > SESSION_MAX_ALLOW_ITEM)
                return err_set(err, TERN_EINVALID,
                               "%s.networkAllowlist[%zu]: must be a CIDR such as 10.0.0.0/8 or "
                               "fd00::/8, or a host name such as pypi.org, "
                               "*.githubusercontent.com or example.com:8443 (at most %d "
                               "characters)",
                               path, i, SESSION_MAX_ALLOW_ITEM);
            struct session_cidr c;
            struct session_host h;
            const char *why = NULL;
            if (strchr(v, '/') || looks_like_address(v)) {
                if (strlen(v) > 43 || session_cidr_parse(v, &c) != 0)
                    return err_set(err, TERN_EINVALID,
                                   "%s.networkAllowlist[%zu]: must be a CIDR such as 10.0.0.0/8 "
                                   "or fd00::/8%s",
                                   path, i,
                                   strchr(v, '/') ? ""
                                                  : " (an address needs its prefix length: "
                                                    "/32 or /128 for one address)");
                c.text = xstrdup(v);
                s->permissions.network[s->permissions.nnetwork++] = c;
            } else if (session_host_parse(v, &h, &why) == 0) {
                h.text = xstrdup(v);
                s->permissions.hosts[s->permissions.nhosts++] = h;
            } else {
                return err_set(err, TERN_EINVALID,
                               "%s.networkAllowlist[%zu]: must be a CIDR such as 10.0.0.0/8 or a "
                               "host name such as pypi.org, *.githubusercontent.com or "
                               "example.com:8443: %s",
                               path, i, why);
            }
        }
    }
    return 0;
}

static int parse_limits(const cJSON *spec, struct session_spec *s, struct tern_err *err)
{
    static const char *const fields[] = {
        "timeoutSeconds",  "maxModelTurns", "maxToolCalls", "maxTokens",
        "maxCostMicroUSD", "cpu",           "memory",       "maxResultAttempts", NULL};
    const cJSON *l = NULL;
    char path[PATH_MAX_LEN];
    int r = get_object(spec, "spec", "limits", JSON_OPTIONAL, fields, &l, path, err);
    if (r || !l)
        return r;
    if ((r = get_int(l, path, "timeoutSeconds", JSON_OPTIONAL, 1, SESSION_MAX_SECONDS,
                     &s->limits.timeout_seconds, err)) ||
        (r = get_int(l, path, "maxModelTurns", JSON_OPTIONAL, 1, SESSION_MAX_MODEL_TURNS,
                     &s->limits.max_model_turns, err)) ||
        (r = get_int(l, path, "maxToolCalls", JSON_OPTIONAL, 1, SESSION_MAX_TOOL_CALLS,
                     &s->limits.max_tool_calls, err)) ||
        (r = get_int(l, path, "maxTokens", JSON_OPTIONAL, 1, SESSION_MAX_TOKENS,
                     &s->limits.max_tokens, err)) ||
        (r = get_int(l, path, "maxCostMicroUSD", JSON_OPTIONAL, 0, SESSION_MAX_COST_MICRO_USD,
                     &s->limits.max_cost_micro_usd, err)) ||
        (r = get_int(l, path, "maxResultAttempts", JSON_OPTIONAL, 1, TERN_RESULT_MAX_ATTEMPTS,
                     &s->limits.max_result_attempts, err)) ||
        (r = get_quantity(l, path, "cpu", &s->limits.cpu, err)) ||
        (r = get_quantity(l, path, "memory", &s->limits.memory, err)))
        return r;
    return 0;
}

static int parse_model(const cJSON *spec, struct session_spec *s, struct tern_err *err)
{
    static const char *const fields[] = {"name", "baseURL", "apiKeySecretRef", NULL};
    static const char *const ref_fields[] = {"name", "key", NULL};
    const cJSON *m = NULL, *ref = NULL;
    char path[PATH_MAX_LEN], rpath[PATH_MAX_LEN];
    int r = get_object(spec, "spec", "model", JSON_OPTIONAL, fields, &m, path, err);
    if (r || !m)
        return r;
    if ((r = get_str_ne(m, path, "name", JSON_OPTIONAL, SESSION_MAX_MODEL_NAME, &s->model.name,
                        err)))
        return r;
    char *url = NULL;
    if ((r = get_str(m, path, "baseURL", JSON_OPTIONAL, SESSION_MAX_URL, &url, err)))
        return r;
    if (url) {
        if (!http_url_ok(url)) {
            free(url);
            return err_set(err, TERN_EINVALID, "%s.baseURL: must be an http or https URL", path);
        }
        free(s->model.base_url);
        s->model.base_url = url;
    }
    if ((r = get_object(m, path, "apiKeySecretRef", JSON_OPTIONAL, ref_fields, &ref, rpath, err)))
        return r;
    if (ref) {
        if ((r = get_name(ref, rpath, "name", JSON_REQUIRED, &s->model.api_key_secret, err)) ||
            (r = get_str(ref, rpath, "key", JSON_REQUIRED, 253, &s->model.api_key_key, err)))
            return r;
        if (!secret_key_ok(s->model.api_key_key))
            return err_set(err, TERN_EINVALID,
                           "%s.key: must consist of letters, digits, '-', '_' or '.'", rpath);
    }
    return 0;
}

static int parse_sandbox(const cJSON *spec, struct session_spec *s, struct tern_err *err)
{
    static const char *const fields[] = {"image", "runtimeClassName", "workspace",
                                         "idleSuspendSeconds", NULL};
    static const char *const ws_fields[] = {"size", "storageClassName", NULL};
    const cJSON *sb = NULL, *ws = NULL;
    char path[PATH_MAX_LEN], wpath[PATH_MAX_LEN];
    int r = get_object(spec, "spec", "sandbox", JSON_OPTIONAL, fields, &sb, path, err);
    if (r || !sb)
        return r;
    if ((r = get_str(sb, path, "image", JSON_OPTIONAL, SESSION_MAX_IMAGE, &s->sandbox.image,
                     err)) ||
        (r = get_name(sb, path, "runtimeClassName", JSON_OPTIONAL, &s->sandbox.runtime_class,
                      err)) ||
        (r = get_int(sb, path, "idleSuspendSeconds", JSON_OPTIONAL, 0, SESSION_MAX_SECONDS,
                     &s->sandbox.idle_suspend_seconds, err)) ||
        (r = get_object(sb, path, "workspace", JSON_OPTIONAL, ws_fields, &ws, wpath, err)))
        return r;
    if (s->sandbox.image && !*s->sandbox.image) {
        free(s->sandbox.image);
        s->sandbox.image = NULL;
    }
    if (ws && ((r = get_quantity(ws, wpath, "size", &s->sandbox.workspace_size, err)) ||
               (r = get_name(ws, wpath, "storageClassName", JSON_OPTIONAL,
                             &s->sandbox.storage_class, err))))
        return r;
    return 0;
}

static int parse_approval(const cJSON *spec, struct session_spec *s, struct tern_err *err)
{
    static const char *const fields[] = {"timeoutSeconds", "onTimeout", NULL};
    const cJSON *a = NULL;
    char path[PATH_MAX_LEN];
    int r = get_object(spec, "spec", "approval", JSON_OPTIONAL, fields, &a, path, err);
    if (r || !a)
        return r;
    if ((r = get_int(a, path, "timeoutSeconds", JSON_OPTIONAL, 1, SESSION_MAX_SECONDS,
                     &s->approval.timeout_seconds, err)))
        return r;
    const char *ot = NULL;
    if ((r = json_get_string(a, path, "onTimeout", JSON_OPTIONAL, &ot, err)))
        return r;
    if (ot) {
        if (strcmp(ot, "Deny") == 0)
            s->approval.on_timeout = SESSION_ON_TIMEOUT_DENY;
        else if (strcmp(ot, "Fail") == 0)
            s->approval.on_timeout = SESSION_ON_TIMEOUT_FAIL;
        else
            return err_set(err, TERN_EINVALID, "%s.onTimeout: must be one of: Deny, Fail", path);
    }
    return 0;
}

static int parse_context(const cJSON *spec, struct session_spec *s, struct tern_err *err)
{
    static const char *const fields[] = {"text", "files", "references", NULL};
    const cJSON *c = NULL;
    char path[PATH_MAX_LEN];
    int r = get_object(spec, "spec", "context", JSON_OPTIONAL, fields, &c, path, err);
    if (r || !c)
        return r;
    if ((r = get_str(c, path, "text", JSON_OPTIONAL, SESSION_MAX_CONTEXT_TEXT, &s->context.text,
                     err)) ||
        (r = get_cm_ref_list(c, path, "files", SESSION_MAX_CONTEXT_FILES, &s->context.files,
                             &s->context.nfiles, err)) ||
        (r = get_string_list(c, path, "references", SESSION_MAX_REFERENCES,
                             SESSION_MAX_REFERENCE_LEN, &s->context.references,
                             &s->context.nreferences, err)))
        return r;
    return 0;
}

static int parse_fork(const cJSON *spec, struct session_spec *s, struct tern_err *err)
{
    static const char *const fields[] = {"session", "uid", "atSeq", NULL};
    const cJSON *f = NULL;
    char path[PATH_MAX_LEN];
    int r = get_object(spec, "spec", "forkFrom", JSON_OPTIONAL, fields, &f, path, err);
    if (r || !f)
        return r;
    if ((r = get_name(f, path, "session", JSON_REQUIRED, &s->fork_from.session, err)) ||
        (r = get_str_ne(f, path, "uid", JSON_REQUIRED, SESSION_MAX_FORK_UID, &s->fork_from.uid,
                        err)) ||
        (r = get_int(f, path, "atSeq", JSON_REQUIRED, 0, INT64_MAX, &s->fork_from.at_seq, err)))
        return r;
    s->fork_from.set = true;
    return 0;
}

static int parse_metadata(const cJSON *obj, struct session_spec *s, struct tern_err *err)
{
    const cJSON *md = NULL;
    int r = json_get_object(obj, "", "metadata", JSON_OPTIONAL, &md, err);
    if (r || !md)
        return r;
    if ((r = get_str(md, "metadata", "name", JSON_OPTIONAL, 253, &s->name, err)))
        return r;
    if (s->name) {
        size_t n = strlen(s->name);
        if (n > SESSION_MAX_NAME)
            return err_set(err, TERN_EINVALID, "metadata.name: must be no more than %d characters",
                           SESSION_MAX_NAME);
        if (!dns_label_n(s->name, n))
            return err_set(err, TERN_EINVALID,
                           "metadata.name: must be a DNS label (lowercase letters, digits, '-')");
    }
    if ((r = get_str(md, "metadata", "namespace", JSON_OPTIONAL, 253, &s->namespace, err)) ||
        (r = get_str(md, "metadata", "uid", JSON_OPTIONAL, 253, &s->uid, err)) ||
        (r = json_get_int_range(md, "metadata", "generation", JSON_OPTIONAL, 0, INT64_MAX,
                                &s->generation, err)))
        return r;
    return 0;
}

/* spec.result: {schema}, the schema checked by json/jschema (the runner's
 * own check, so the operator refuses what the runner would). */
static int parse_result(const cJSON *spec, struct session_spec *s, struct tern_err *err)
{
    static const char *const fields[] = {"schema", NULL};
    const cJSON *o = NULL, *sch = NULL;
    char path[PATH_MAX_LEN];
    int r = get_object(spec, "spec", "result", JSON_OPTIONAL, fields, &o, path, err);
    if (r || !o)
        return r;
    if ((r = json_get_object(o, path, "schema", JSON_OPTIONAL, &sch, err)) || !sch)
        return r;
    struct tern_err e = {0};
    if ((r = jschema_check(sch, &e)))
        return err_set(err, TERN_EINVALID, "%s.schema: %s", path, e.msg);
    s->result_schema = json_dup(sch);
    return 0;
}

static void set_defaults(struct session_spec *s)
{
    static const char *const writable[] = SESSION_DEFAULT_WRITABLE;
    s->permissions.tools = SESSION_TOOLS_ALL;
    s->permissions.nwritable = sizeof writable / sizeof *writable;
    s->permissions.writable = xcalloc(s->permissions.nwritable, sizeof *s->permissions.writable);
    for (size_t i = 0; i < s->permissions.nwritable; i++)
        s->permissions.writable[i] = xstrdup(writable[i]);
    s->limits.timeout_seconds = SESSION_DEFAULT_TIMEOUT_SECONDS;
    s->limits.max_model_turns = SESSION_DEFAULT_MAX_MODEL_TURNS;
    s->limits.max_tool_calls = SESSION_DEFAULT_MAX_TOOL_CALLS;
    s->limits.max_tokens = SESSION_DEFAULT_MAX_TOKENS;
    s->limits.max_cost_micro_usd = SESSION_DEFAULT_MAX_COST_MICRO_USD;
    s->limits.max_result_attempts = SESSION_DEFAULT_MAX_RESULT_ATTEMPTS;
    if (quantity_parse(SESSION_DEFAULT_CPU, &s->limits.cpu) ||
        quantity_parse(SESSION_DEFAULT_MEMORY, &s->limits.memory) ||
        quantity_parse(SESSION_DEFAULT_WORKSPACE_SIZE, &s->sandbox.workspace_size))
        abort(); /* constants */
    s->model.name = xstrdup(SESSION_DEFAULT_MODEL);
    s->model.base_url = xstrdup(SESSION_DEFAULT_BASE_URL);
    s->sandbox.idle_suspend_seconds = SESSION_DEFAULT_IDLE_SUSPEND_SECONDS;
    s->approval.timeout_seconds = SESSION_DEFAULT_APPROVAL_TIMEOUT;
    s->approval.on_timeout = SESSION_ON_TIMEOUT_DENY;
    s->ttl_seconds_after_finished = -1;
}

static int parse_one(const cJSON *obj, struct session_spec **ret, struct tern_err *err)
{
    static const char *const spec_fields[] = {
        "objective", "identity", "context", "skills",   "memory",  "messages", "permissions",
        "tools",     "limits",   "model",   "sandbox",  "approval", "suspend", "forkFrom",
        "ttlSecondsAfterFinished", "result", "retainArtifacts", NULL};
    static const char *const identity_fields[] = {"serviceAccountName", NULL};
    static const char *const memory_fields[] = {"configMapRef", NULL};
    struct session_spec *s = xcalloc(1, sizeof *s);
    const cJSON *spec = NULL, *o = NULL;
    const char *v = NULL;
    char path[PATH_MAX_LEN];
    int r;
    set_defaults(s);

    if (!cJSON_IsObject(obj)) {
        r = err_set(err, TERN_EINVALID, "AgentSession must be a JSON object");
        goto out;
    }
    if ((r = json_get_string(obj, "", "apiVersion", JSON_OPTIONAL, &v, err)))
        goto out;
    if (v && strcmp(v, "tern.dev/v1alpha1") != 0) {
        r = err_set(err, TERN_EINVALID, "apiVersion: must be tern.dev/v1alpha1");
        goto out;
    }
    v = NULL;
    if ((r = json_get_string(obj, "", "kind", JSON_OPTIONAL, &v, err)))
        goto out;
    if (v && strcmp(v, "AgentSession") != 0) {
        r = err_set(err, TERN_EINVALID, "kind: must be AgentSession");
        goto out;
    }
    if ((r = parse_metadata(obj, s, err)))
        goto out;
    if ((r = json_get_object(obj, "", "spec", JSON_REQUIRED, &spec, err)))
        goto out;
    if ((r = check_fields(spec, "spec", spec_fields, err)))
        goto out;

    if ((r = get_str_ne(spec, "spec", "objective", JSON_REQUIRED, SESSION_MAX_OBJECTIVE,
                        &s->objective, err)))
        goto out;
    if ((r = get_object(spec, "spec", "identity", JSON_OPTIONAL, identity_fields, &o, path, err)))
        goto out;
    if (o && (r = get_name(o, path, "serviceAccountName", JSON_OPTIONAL, &s->service_account, err)))
        goto out;
    if ((r = parse_context(spec, s, err)))
        goto out;
    if ((r = get_cm_ref_list(spec, "spec", "skills", SESSION_MAX_SKILLS, &s->skills, &s->nskills,
                             err)))
        goto out;
    o = NULL;
    if ((r = get_object(spec, "spec", "memory", JSON_OPTIONAL, memory_fields, &o, path, err)))
        goto out;
    if (o && (r = get_cm_ref(o, path, &s->memory, err)))
        goto out;
    if ((r = get_string_list(spec, "spec", "messages", SESSION_MAX_MESSAGES,
                             SESSION_MAX_MESSAGE_LEN, &s->messages, &s->nmessages, err)))
        goto out;
    /* tools before permissions: approval rules may name MCP servers */
    if ((r = parse_tools(spec, s, err)) || (r = parse_permissions(spec, s, err)) ||
        (r = parse_limits(spec, s, err)) ||
        (r = parse_model(spec, s, err)) || (r = parse_sandbox(spec, s, err)) ||
        (r = parse_approval(spec, s, err)))
        goto out;
    if ((r = parse_result(spec, s, err)))
        goto out;
    if ((r = json_get_bool(spec, "spec", "suspend", JSON_OPTIONAL, &s->suspend, err)))
        goto out;
    if ((r = json_get_int_range(spec, "spec", "ttlSecondsAfterFinished", JSON_OPTIONAL, 0,
                                SESSION_MAX_TTL_SECONDS, &s->ttl_seconds_after_finished, err)))
        goto out;
    o = NULL;
    if ((r = json_get_object(spec, "spec", "retainArtifacts", JSON_OPTIONAL, &o, err)))
        goto out;
    if (o) {
        static const char *const ra_fields[] = {"ttlSeconds", NULL};
        if ((r = check_fields(o, "spec.retainArtifacts", ra_fields, err)) ||
            (r = json_get_int_range(o, "spec.retainArtifacts", "ttlSeconds", JSON_REQUIRED, 1,
                                    SESSION_MAX_TTL_SECONDS, &s->retain_artifacts.ttl_seconds,
                                    err)))
            goto out;
        s->retain_artifacts.set = true;
    }
    if ((r = parse_fork(spec, s, err)))
        goto out;
    *ret = s;
    s = NULL;
out:
    session_spec_free(s);
    return r;
}

/* A session naming a template is parsed as its effective spec (the
 * template's recorded spec merged with its own, spec/template.h). */
int session_spec_parse(const cJSON *obj, struct session_spec **ret, struct tern_err *err)
{
    cJSON *eff = NULL;
    int r = template_effective(obj, &eff, err);
    if (r || !eff)
        return r ? r : parse_one(obj, ret, err);
    struct tern_err e = {0};
    r = parse_one(eff, ret, &e);
    if (r)
        err_set(err, r, "%s (spec merged with agentsessiontemplate %s)", e.msg,
                template_ref_name(obj));
    cJSON_Delete(eff);
    return r;
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void session_spec_free(struct session_spec *s)
{
    if (!s)
        return;
    free(s->name);
    free(s->namespace);
    free(s->uid);
    free(s->objective);
    cJSON_Delete(s->result_schema);
    free(s->service_account);
    free(s->context.text);
    free_list(s->context.files, s->context.nfiles);
    free_list(s->context.references, s->context.nreferences);
    free_list(s->skills, s->nskills);
    free(s->memory);
    free_list(s->messages, s->nmessages);
    for (size_t i = 0; i < s->permissions.napprovals; i++)
        free(s->permissions.approvals[i].glob);
    free(s->permissions.approvals);
    free_list(s->permissions.writable, s->permissions.nwritable);
    for (size_t i = 0; i < s->permissions.nnetwork; i++)
        free(s->permissions.network[i].text);
    free(s->permissions.network);
    for (size_t i = 0; i < s->permissions.nhosts; i++) {
        free(s->permissions.hosts[i].name);
        free(s->permissions.hosts[i].text);
    }
    free(s->permissions.hosts);
    for (size_t i = 0; i < s->tools.nmcp; i++) {
        free(s->tools.mcp[i].name);
        free(s->tools.mcp[i].url);
        free(s->tools.mcp[i].headers_secret);
        free_list(s->tools.mcp[i].allowed, s->tools.mcp[i].nallowed);
    }
    free(s->tools.mcp);
    for (size_t i = 0; i < s->tools.nremotes; i++) {
        free(s->tools.remotes[i].name);
        free(s->tools.remotes[i].url);
        free(s->tools.remotes[i].token_secret);
        free(s->tools.remotes[i].token_key);
        free(s->tools.remotes[i].username);
    }
    free(s->tools.remotes);
    free(s->model.name);
    free(s->model.base_url);
    free(s->model.api_key_secret);
    free(s->model.api_key_key);
    free(s->sandbox.image);
    free(s->sandbox.runtime_class);
    free(s->sandbox.storage_class);
    free(s->fork_from.session);
    free(s->fork_from.uid);
    free(s);
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int session_spec_check_update(const struct session_spec *old, const struct session_spec *cur,
                              struct tern_err *err)
{
    if (old->fork_from.set != cur->fork_from.set)
        return err_set(err, TERN_EINVALID,
                       "spec.forkFrom: can only be set when the session is created");
    if (old->fork_from.set && (!str_eq(old->fork_from.session, cur->fork_from.session) ||
                               !str_eq(old->fork_from.uid, cur->fork_from.uid) ||
                               old->fork_from.at_seq != cur->fork_from.at_seq))
        return err_set(err, TERN_EINVALID, "spec.forkFrom: forkFrom is immutable");
    if (cur->nmessages < old->nmessages)
        return err_set(err, TERN_EINVALID,
                       "spec.messages: messages is append-only; %zu entries cannot become %zu",
                       old->nmessages, cur->nmessages);
    for (size_t i = 0; i < old->nmessages; i++)
        if (strcmp(old->messages[i], cur->messages[i]) != 0)
            return err_set(err, TERN_EINVALID,
                           "spec.messages[%zu]: messages is append-only; existing entries cannot "
                           "be changed",
                           i);
    return 0;
}
