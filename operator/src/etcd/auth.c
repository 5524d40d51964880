/* auth.c - etcd's user and role administration over the gateway
 * (/v3/auth/...): enable, users, roles and their key-range permissions.
 * See etcd.h ("auth administration"). Every call but the reads needs a
 * client authenticated as a user with etcd's root role, or auth still
 * disabled (the bootstrap).
 */
#include "etcd_internal.h"

#include "base/base64.h"
#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* etcd answers these with FailedPrecondition (9) and a message; they are
 * states a caller acts on, so they get codes of their own. */
static int remap(int r, struct tern_err *err)
{
    if (r == 0 || !err)
        return r;
    const char *m = err->msg;
    if (strstr(m, "already exists"))
        r = -EEXIST;
    else if (strstr(m, "user name not found") || strstr(m, "role name not found") ||
             strstr(m, "permission not granted to the role") ||
             strstr(m, "role is not granted to the user"))
        r = TERN_ENOTFOUND;
    else if (strstr(m, "authentication is not enabled"))
        r = -ENOTSUP;
    else if (strstr(m, "root user does not exist") || strstr(m, "root user does not have"))
        r = TERN_EINVALID;
    err->code = r;
    return r;
}

static bool valid_name(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > TERN_ETCD_MAX_USER)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= ' ' || ch >= 0x7f)
            return false;
    }
    return true;
}

static int call(struct etcd *c, const char *path, cJSON *req, enum call_kind kind, cJSON **ret,
                struct tern_err *err)
{
    cJSON *out = NULL;
    int r = etcd__call_obj(c, path, req, kind, NULL, &out, err);
    cJSON_Delete(req);
    r = remap(r, err);
    if (r == 0 && ret)
        *ret = out;
    else
        cJSON_Delete(out);
    return r;
}

static cJSON *named(const char *key, const char *name)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, key, name);
    return o;
}

int etcd_auth_enable(struct etcd *c, struct tern_err *err)
{
    return call(c, "/v3/auth/enable", cJSON_CreateObject(), CALL_WRITE, NULL, err);
}

int etcd_auth_disable(struct etcd *c, struct tern_err *err)
{
    return call(c, "/v3/auth/disable", cJSON_CreateObject(), CALL_WRITE, NULL, err);
}

int etcd_user_add(struct etcd *c, const char *name, const char *password, struct tern_err *err)
{
    if (!valid_name(name) || !password || !*password ||
        strlen(password) > TERN_ETCD_MAX_PASSWORD)
        return err_set(err, TERN_EINVALID, "etcd user add: bad name or password");
    cJSON *o = named("name", name);
    json_add_string(o, "password", password);
    return call(c, "/v3/auth/user/add", o, CALL_WRITE, NULL, err);
}

int etcd_user_password(struct etcd *c, const char *name, const char *password,
                       struct tern_err *err)
{
    if (!valid_name(name) || !password || !*password ||
        strlen(password) > TERN_ETCD_MAX_PASSWORD)
        return err_set(err, TERN_EINVALID, "etcd user password: bad name or password");
    cJSON *o = named("name", name);
    json_add_string(o, "password", password);
    return call(c, "/v3/auth/user/changepw", o, CALL_WRITE, NULL, err);
}

int etcd_user_delete(struct etcd *c, const char *name, struct tern_err *err)
{
    if (!valid_name(name))
        return err_set(err, TERN_EINVALID, "etcd user delete: bad name");
    return call(c, "/v3/auth/user/delete", named("name", name), CALL_WRITE, NULL, err);
}

int etcd_user_grant(struct etcd *c, const char *user, const char *role, struct tern_err *err)
{
    if (!valid_name(user) || !valid_name(role))
        return err_set(err, TERN_EINVALID, "etcd user grant: bad user or role");
    cJSON *o = named("user", user);
    json_add_string(o, "role", role);
    return call(c, "/v3/auth/user/grant", o, CALL_WRITE, NULL, err);
}

/* A reply member that is a list of strings, into a NULL-terminated array. */
static int strings(const cJSON *o, const char *key, char ***ret, size_t *ret_n,
                   struct tern_err *err)
{
    const cJSON *a = json_get(o, key), *it;
    if (a && !cJSON_IsArray(a))
        return err_set(err, TERN_EPARSE, "etcd: %s is not a list", key);
    size_t n = (size_t)cJSON_GetArraySize(a);
    if (n > TERN_ETCD_MAX_USERS)
        return err_set(err, TERN_ETOOLARGE, "etcd: more than %d %s", TERN_ETCD_MAX_USERS, key);
    char **v = xcalloc(n + 1, sizeof *v);
    size_t i = 0;
    cJSON_ArrayForEach(it, a)
    {
        if (!cJSON_IsString(it)) {
            etcd_strings_free(v);
            return err_set(err, TERN_EPARSE, "etcd: %s holds a non-string", key);
        }
        v[i++] = xstrdup(it->valuestring);
    }
    *ret = v;
    if (ret_n)
        *ret_n = i;
    return 0;
}

void etcd_strings_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

int etcd_user_roles(struct etcd *c, const char *name, char ***ret, size_t *ret_n,
                    struct tern_err *err)
{
    if (!valid_name(name))
        return err_set(err, TERN_EINVALID, "etcd user get: bad name");
    cJSON *out = NULL;
    int r = call(c, "/v3/auth/user/get", named("name", name), CALL_READ, &out, err);
    if (r == 0)
        r = strings(out, "roles", ret, ret_n, err);
    cJSON_Delete(out);
    return r;
}

int etcd_user_list(struct etcd *c, char ***ret, size_t *ret_n, struct tern_err *err)
{
    cJSON *out = NULL;
    int r = call(c, "/v3/auth/user/list", cJSON_CreateObject(), CALL_READ, &out, err);
    if (r == 0)
        r = strings(out, "users", ret, ret_n, err);
    cJSON_Delete(out);
    return r;
}

int etcd_role_add(struct etcd *c, const char *name, struct tern_err *err)
{
    if (!valid_name(name))
        return err_set(err, TERN_EINVALID, "etcd role add: bad name");
    return call(c, "/v3/auth/role/add", named("name", name), CALL_WRITE, NULL, err);
}

int etcd_role_delete(struct etcd *c, const char *name, struct tern_err *err)
{
    if (!valid_name(name))
        return err_set(err, TERN_EINVALID, "etcd role delete: bad name");
    return call(c, "/v3/auth/role/delete", named("role", name), CALL_WRITE, NULL, err);
}

static const char *const perm_names[] = {"READ", "WRITE", "READWRITE"};

int etcd_role_grant(struct etcd *c, const char *role, enum etcd_perm perm,
                    const struct etcd_keys *keys, struct tern_err *err)
{
    if (!valid_name(role) || (unsigned)perm > ETCD_PERM_READWRITE || !keys || !keys->key)
        return err_set(err, TERN_EINVALID, "etcd role grant: bad role, permission or keys");
    cJSON *p = cJSON_CreateObject();
    json_add_string(p, "permType", perm_names[perm]);
    int r = etcd__add_keys(p, keys, err);
    if (r) {
        cJSON_Delete(p);
        return r;
    }
    cJSON *o = named("name", role);
    cJSON_AddItemToObject(o, "perm", p);
    return call(c, "/v3/auth/role/grant", o, CALL_WRITE, NULL, err);
}

static char *b64_member(const cJSON *o, const char *key)
{
    const cJSON *v = json_get(o, key);
    if (!cJSON_IsString(v))
        return xstrdup("");
    size_t n = 0;
    unsigned char *raw = NULL;
    if (base64_decode(v->valuestring, strlen(v->valuestring), &raw, &n) != 0)
        return NULL;
    /* a range end of "\0" means "to the end of the keyspace": kept as "" */
    char *out = xmalloc(n + 1);
    memcpy(out, raw, n);
    out[n] = 0;
    free(raw);
    if (strlen(out) != n && !(n == 1 && out[0] == 0)) {
        free(out);
        return NULL;
    }
    return out;
}

int etcd_role_perms(struct etcd *c, const char *role, struct etcd_perm_entry **ret,
                    size_t *ret_n, struct tern_err *err)
{
    if (!valid_name(role))
        return err_set(err, TERN_EINVALID, "etcd role get: bad name");
    cJSON *out = NULL;
    int r = call(c, "/v3/auth/role/get", named("role", role), CALL_READ, &out, err);
    if (r)
        return r;
    const cJSON *a = json_get(out, "perm"), *it;
    size_t n = (size_t)cJSON_GetArraySize(a), i = 0;
    if (n > TERN_ETCD_MAX_USERS) {
        cJSON_Delete(out);
        return err_set(err, TERN_ETOOLARGE, "etcd role %s: too many permissions", role);
    }
    struct etcd_perm_entry *v = xcalloc(n + 1, sizeof *v);
    cJSON_ArrayForEach(it, a)
    {
        const cJSON *t = json_get(it, "permType");
        /* the gateway omits the default value READ (0) */
        enum etcd_perm p = ETCD_PERM_READ;
        if (cJSON_IsString(t))
            for (int k = 0; k < 3; k++)
                if (strcmp(t->valuestring, perm_names[k]) == 0)
                    p = (enum etcd_perm)k;
        v[i].perm = p;
        v[i].key = b64_member(it, "key");
        v[i].range_end = b64_member(it, "range_end");
        if (!v[i].key || !v[i].range_end) {
            etcd_perms_free(v, i + 1);
            cJSON_Delete(out);
            return err_set(err, TERN_EPARSE, "etcd role %s: bad key in a permission", role);
        }
        i++;
    }
    cJSON_Delete(out);
    *ret = v;
    *ret_n = i;
    return 0;
}

void etcd_perms_free(struct etcd_perm_entry *v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++) {
        free(v[i].key);
        free(v[i].range_end);
    }
    free(v);
}

int etcd_role_list(struct etcd *c, char ***ret, size_t *ret_n, struct tern_err *err)
{
    cJSON *out = NULL;
    int r = call(c, "/v3/auth/role/list", cJSON_CreateObject(), CALL_READ, &out, err);
    if (r == 0)
        r = strings(out, "roles", ret, ret_n, err);
    cJSON_Delete(out);
    return r;
}

int etcd_authenticate_check(struct etcd *c, struct tern_err *err)
{
    if (!c->user)
        return err_set(err, TERN_EINVALID, "etcd: no username configured");
    struct httpc *h = etcd__conn_get(c);
    int r = TERN_EUNREACHABLE;
    for (size_t i = 0; i < c->neps; i++) {
        size_t idx = (atomic_load(&c->cur) + i) % c->neps;
        r = etcd__authenticate(c, h, c->eps[idx], NULL, err);
        if (r != TERN_EUNREACHABLE && r != TERN_ETIMEOUT)
            break;
    }
    etcd__conn_put(c, h, r != 0 && r != TERN_EAUTH && r != -ENOTSUP);
    return r;
}
