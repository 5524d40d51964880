/* artstore.c - the artifact store's pure parts. See artstore.h. */
#include "artstore.h"

#include "base/base64.h"
#include "base/limits.h"
#include "base/mem.h"
#include "controller/children.h"
#include "controller/conditions.h"
#include "json/json.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void artstore_sha256(const void *p, size_t n, char out[65])
{
    unsigned char d[32];
    unsigned int len = 0;
    EVP_Digest(p, n, d, &len, EVP_sha256(), NULL);
    for (size_t i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
    out[64] = 0;
}

char *artstore_name(const char *session, int64_t turn, const char *request)
{
    if (!request)
        return xasprintf("%s-artifacts-t%lld", session, (long long)turn);
    char h[65];
    artstore_sha256(request, strlen(request), h);
    return xasprintf("%s-artifacts-t%lld-%.8s", session, (long long)turn, h);
}

static void add_not_stored(cJSON *list, const char *path, size_t size, const char *reason,
                           const char *message)
{
    cJSON *a = cJSON_CreateObject();
    json_add_string(a, "path", path);
    json_add_int64(a, "size", (int64_t)size);
    cJSON_AddFalseToObject(a, "stored");
    json_add_string(a, "reason", reason);
    json_add_string(a, "message", message);
    cJSON_AddItemToArray(list, a);
}

void artstore_build(const struct artstore_in *in, cJSON **ret_configmap, cJSON **ret_artifacts,
                    size_t *ret_stored)
{
    char *name = artstore_name(in->session, in->turn, in->request);
    cJSON *cm = cJSON_CreateObject();
    json_add_string(cm, "apiVersion", "v1");
    json_add_string(cm, "kind", "ConfigMap");
    cJSON *md = cJSON_AddObjectToObject(cm, "metadata");
    json_add_string(md, "name", name);
    json_add_string(md, "namespace", in->ns);
    cJSON *lb = cJSON_AddObjectToObject(md, "labels");
    json_add_string(lb, "app.kubernetes.io/managed-by", "tern");
    json_add_string(lb, CHILDREN_LABEL_ROLE, ARTSTORE_ROLE);
    json_add_string(lb, CHILDREN_LABEL_SESSION, in->session);
    json_add_string(lb, CHILDREN_LABEL_SESSION_UID, in->uid);
    char turn[24];
    snprintf(turn, sizeof turn, "%lld", (long long)in->turn);
    json_add_string(lb, CHILDREN_LABEL_TURN, turn);
    if (in->retain) {
        char t[32];
        json_add_string(cJSON_AddObjectToObject(md, "annotations"), ARTSTORE_ANN_EXPIRES,
                        conditions_time(in->now + in->ttl_seconds, t));
    } else {
        cJSON *o = cJSON_CreateObject();
        json_add_string(o, "apiVersion", "tern.dev/v1alpha1");
        json_add_string(o, "kind", "AgentSession");
        json_add_string(o, "name", in->session);
        json_add_string(o, "uid", in->uid);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(md, "ownerReferences"), o);
    }
    cJSON *bin = cJSON_AddObjectToObject(cm, "binaryData");
    cJSON *list = cJSON_CreateArray();
    size_t total = 0, stored = 0;
    for (size_t i = 0; i < in->nfiles && i < TERN_ARTIFACTS_MAX_FILES; i++) {
        const struct artstore_file *f = &in->files[i];
        char msg[256];
        if (f->reason) {
            add_not_stored(list, f->path, f->len, f->reason, f->message ? f->message : "");
            continue;
        }
        if (f->len > in->max_file) {
            snprintf(msg, sizeof msg, "%zu bytes, over the bound of %zu bytes per file", f->len,
                     in->max_file);
            add_not_stored(list, f->path, f->len, "TooLarge", msg);
            continue;
        }
        if (total + f->len > in->max_total) {
            snprintf(msg, sizeof msg,
                     "%zu bytes would take the set over its bound of %zu bytes (%zu stored)",
                     f->len, in->max_total, total);
            add_not_stored(list, f->path, f->len, "SetTooLarge", msg);
            continue;
        }
        char key[16], sha[65];
        snprintf(key, sizeof key, "f%zu", stored);
        artstore_sha256(f->data ? (const void *)f->data : "", f->len, sha);
        char *b64 = base64_encode(f->data ? (const void *)f->data : "", f->len);
        json_add_string(bin, key, b64);
        free(b64);
        cJSON *a = cJSON_CreateObject();
        json_add_string(a, "path", f->path);
        json_add_int64(a, "size", (int64_t)f->len);
        json_add_string(a, "sha256", sha);
        cJSON_AddTrueToObject(a, "stored");
        json_add_string(a, "configMap", name);
        json_add_string(a, "key", key);
        cJSON_AddItemToArray(list, a);
        total += f->len;
        stored++;
    }
    cJSON *man = cJSON_CreateObject();
    json_add_string(man, "session", in->session);
    json_add_string(man, "uid", in->uid);
    json_add_int64(man, "turn", in->turn);
    if (in->request)
        json_add_string(man, "request", in->request);
    cJSON_AddItemToObject(man, "artifacts", json_dup(list));
    char *mtext = json_print(man);
    cJSON_Delete(man);
    json_add_string(cJSON_AddObjectToObject(cm, "data"), ARTSTORE_MANIFEST, mtext);
    free(mtext);
    free(name);
    *ret_configmap = cm;
    *ret_artifacts = list;
    if (ret_stored)
        *ret_stored = stored;
}

bool artstore_same(const cJSON *a, const cJSON *b)
{
    const cJSON *ba = json_get(a, "binaryData"), *bb = json_get(b, "binaryData");
    if (!json_equal(json_get(a, "data"), json_get(b, "data")))
        return false;
    /* an empty binaryData may come back absent */
    if (!ba || !bb)
        return cJSON_GetArraySize(ba) == 0 && cJSON_GetArraySize(bb) == 0;
    return json_equal(ba, bb);
}

static bool hex64(const char *s)
{
    if (strlen(s) != 64)
        return false;
    for (size_t i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool good_key(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 16)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

/* A workspace path under output/: no empty, "." or ".." segment. */
static bool good_path(const char *p)
{
    size_t n = strlen(p);
    if (n <= 7 || n > TERN_SANDBOX_MAX_PATH || strncmp(p, "output/", 7) != 0)
        return false;
    const char *s = p;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t k = e ? (size_t)(e - s) : strlen(s);
        if (k == 0 || (k == 1 && s[0] == '.') || (k == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        s += k;
        if (*s == '/')
            s++;
        else
            break;
    }
    return p[n - 1] != '/';
}

int artstore_parse_manifest(const char *text, size_t len, cJSON **ret, struct tern_err *err)
{
    if (len > TERN_ARTIFACTS_MAX_MANIFEST)
        return err_set(err, TERN_ETOOLARGE, "manifest: %zu bytes, over %u", len,
                       TERN_ARTIFACTS_MAX_MANIFEST);
    cJSON *m = NULL;
    int rc = json_parse(text, len, &m, err);
    if (rc)
        return rc;
    const cJSON *arts = NULL;
    int64_t turn = 0;
    if (!cJSON_IsObject(m)) {
        rc = err_set(err, TERN_EINVALID, "manifest: not an object");
        goto out;
    }
    if ((rc = json_get_array(m, "manifest", "artifacts", JSON_REQUIRED, &arts, err)) ||
        (rc = json_get_int_range(m, "manifest", "turn", JSON_REQUIRED, 0, INT64_MAX, &turn, err)))
        goto out;
    if (cJSON_GetArraySize(arts) > TERN_ARTIFACTS_MAX_FILES) {
        rc = err_set(err, TERN_EINVALID, "manifest.artifacts: more than %d entries",
                     TERN_ARTIFACTS_MAX_FILES);
        goto out;
    }
    int i = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, arts)
    {
        const char *path = NULL, *sha = NULL, *key = NULL;
        bool stored = false;
        int64_t size = 0;
        char where[48];
        snprintf(where, sizeof where, "manifest.artifacts[%d]", i++);
        if (!cJSON_IsObject(a)) {
            rc = err_set(err, TERN_EINVALID, "%s: not an object", where);
            goto out;
        }
        if ((rc = json_get_string(a, where, "path", JSON_REQUIRED, &path, err)) ||
            (rc = json_get_bool(a, where, "stored", JSON_REQUIRED, &stored, err)) ||
            (rc = json_get_int_range(a, where, "size", JSON_REQUIRED, 0,
                                     (int64_t)1 << 50, &size, err)))
            goto out;
        if (!good_path(path)) {
            rc = err_set(err, TERN_EINVALID, "%s.path: not a file under output/", where);
            goto out;
        }
        if (!stored)
            continue;
        if (size > (int64_t)TERN_ARTIFACTS_TOTAL_CAP) {
            rc = err_set(err, TERN_EINVALID, "%s.size: over %u", where, TERN_ARTIFACTS_TOTAL_CAP);
            goto out;
        }
        if ((rc = json_get_string(a, where, "sha256", JSON_REQUIRED, &sha, err)) ||
            (rc = json_get_string(a, where, "key", JSON_REQUIRED, &key, err)))
            goto out;
        if (!hex64(sha)) {
            rc = err_set(err, TERN_EINVALID, "%s.sha256: not 64 lower-case hex digits", where);
            goto out;
        }
        if (!good_key(key)) {
            rc = err_set(err, TERN_EINVALID, "%s.key: not [a-z0-9]{1,16}", where);
            goto out;
        }
    }
    *ret = m;
    m = NULL;
out:
    cJSON_Delete(m);
    return rc;
}

int artstore_file(const cJSON *cm, const char *path, unsigned char **ret, size_t *ret_len,
                  char ret_sha[65], struct tern_err *err)
{
    const cJSON *mt = json_get(json_get(cm, "data"), ARTSTORE_MANIFEST);
    if (!cJSON_IsString(mt))
        return err_set(err, TERN_EINVALID, "no %s", ARTSTORE_MANIFEST);
    cJSON *m = NULL;
    int rc = artstore_parse_manifest(mt->valuestring, strlen(mt->valuestring), &m, err);
    if (rc)
        return rc;
    const cJSON *a, *hit = NULL;
    cJSON_ArrayForEach(a, json_get(m, "artifacts"))
    {
        if (cJSON_IsTrue(json_get(a, "stored")) &&
            strcmp(json_get(a, "path")->valuestring, path) == 0)
            hit = a;
    }
    unsigned char *raw = NULL;
    size_t n = 0;
    if (!hit) {
        rc = err_set(err, TERN_ENOTFOUND, "%s is not stored in this set", path);
        goto out;
    }
    const char *key = json_get(hit, "key")->valuestring;
    const cJSON *b = json_get(json_get(cm, "binaryData"), key);
    if (!cJSON_IsString(b) || strlen(b->valuestring) > 2 * (size_t)TERN_ARTIFACTS_TOTAL_CAP) {
        rc = err_set(err, TERN_EINVALID, "binaryData.%s: missing", key);
        goto out;
    }
    if (base64_decode(b->valuestring, strlen(b->valuestring), &raw, &n) != 0) {
        rc = err_set(err, TERN_EINVALID, "binaryData.%s: not base64", key);
        goto out;
    }
    int64_t size = 0;
    json_item_int64(json_get(hit, "size"), &size);
    char sha[65];
    artstore_sha256(raw ? (const void *)raw : "", n, sha);
    if ((int64_t)n != size || strcmp(sha, json_get(hit, "sha256")->valuestring) != 0) {
        rc = err_set(err, TERN_EINVALID,
                     "%s: the stored bytes (%zu, sha256 %s) do not match the manifest", path, n,
                     sha);
        goto out;
    }
    *ret = raw;
    *ret_len = n;
    memcpy(ret_sha, sha, 65);
    raw = NULL;
out:
    free(raw);
    cJSON_Delete(m);
    return rc;
}

static int64_t persisted_turn(const cJSON *persisted)
{
    int64_t t = -1;
    if (persisted && json_item_int64(json_get(persisted, "turn"), &t) != 0)
        t = -1;
    return t;
}

cJSON *artstore_status_list(const cJSON *result_paths, int64_t result_turn,
                            const cJSON *persisted)
{
    if (persisted && persisted_turn(persisted) >= result_turn &&
        cJSON_IsArray(json_get(persisted, "artifacts")))
        return json_dup(json_get(persisted, "artifacts"));
    if (cJSON_GetArraySize(result_paths) == 0)
        return NULL;
    cJSON *l = cJSON_CreateArray();
    const cJSON *p;
    cJSON_ArrayForEach(p, result_paths)
    {
        if (!cJSON_IsString(p))
            continue;
        cJSON *a = cJSON_CreateObject();
        json_add_string(a, "path", p->valuestring);
        cJSON_AddFalseToObject(a, "stored");
        json_add_string(a, "reason", result_turn > 0 ? "Pending" : "NotPersisted");
        cJSON_AddItemToArray(l, a);
    }
    return l;
}

bool artstore_wanted(const cJSON *result_paths, int64_t result_turn, const cJSON *persisted,
                     const char *last_request, const char *ann, const char **ret_request)
{
    *ret_request = NULL;
    if (ann && *ann && strlen(ann) <= TERN_ARTIFACTS_MAX_REQUEST &&
        !(last_request && strcmp(last_request, ann) == 0)) {
        *ret_request = ann;
        return true;
    }
    return cJSON_GetArraySize(result_paths) > 0 && result_turn > 0 &&
           persisted_turn(persisted) < result_turn;
}
