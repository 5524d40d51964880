/* apipatch.c - merge, JSON and strategic merge patches. See apipatch.h. */
#include "apipatch.h"

#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ---- RFC 7386 ---------------------------------------------------------- */

static cJSON *merge_into(cJSON *target, const cJSON *patch)
{
    if (!cJSON_IsObject(patch)) {
        cJSON_Delete(target);
        return json_dup(patch);
    }
    if (!cJSON_IsObject(target)) {
        cJSON_Delete(target);
        target = cJSON_CreateObject();
    }
    for (const cJSON *p = patch->child; p; p = p->next) {
        if (cJSON_IsNull(p)) {
            cJSON_DeleteItemFromObjectCaseSensitive(target, p->string);
            continue;
        }
        cJSON *cur = cJSON_DetachItemFromObjectCaseSensitive(target, p->string);
        cJSON *n = merge_into(cur, p);
        cJSON_AddItemToObject(target, p->string, n);
    }
    return target;
}

cJSON *apipatch_merge(const cJSON *doc, const cJSON *patch)
{
    return merge_into(doc ? json_dup(doc) : NULL, patch);
}

/* ---- RFC 6902 ---------------------------------------------------------- */

/* Splits a JSON pointer into unescaped tokens. Returns the count or -1. */
static int pointer_tokens(const char *ptr, char ***ret)
{
    char **toks = NULL;
    int n = 0;
    if (*ptr == 0) {
        *ret = NULL;
        return 0;
    }
    if (*ptr != '/')
        return -1;
    const char *p = ptr + 1;
    for (;;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char *t = xmalloc(len + 1);
        size_t j = 0;
        for (size_t i = 0; i < len; i++) {
            if (p[i] == '~' && i + 1 < len && (p[i + 1] == '0' || p[i + 1] == '1')) {
                t[j++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                t[j++] = p[i];
            }
        }
        t[j] = 0;
        toks = xreallocarray(toks, (size_t)n + 1, sizeof(char *));
        toks[n++] = t;
        if (!e)
            break;
        p = e + 1;
    }
    *ret = toks;
    return n;
}

static void free_tokens(char **t, int n)
{
    for (int i = 0; i < n; i++)
        free(t[i]);
    free(t);
}

static int array_index(const char *tok, int size, bool allow_end, int *ret)
{
    int64_t v;
    if (allow_end && strcmp(tok, "-") == 0) {
        *ret = size;
        return 0;
    }
    if ((tok[0] == '0' && tok[1]) || num_parse_i64(tok, &v) || v < 0 ||
        v > (allow_end ? size : size - 1))
        return -1;
    *ret = (int)v;
    return 0;
}

static cJSON *child_of(cJSON *c, const char *tok)
{
    if (cJSON_IsObject(c))
        return cJSON_GetObjectItemCaseSensitive(c, tok);
    if (cJSON_IsArray(c)) {
        int i;
        if (array_index(tok, cJSON_GetArraySize(c), false, &i))
            return NULL;
        return cJSON_GetArrayItem(c, i);
    }
    return NULL;
}

/* Resolves all but the last token; returns the parent or NULL. */
static cJSON *resolve_parent(cJSON *root, char **t, int n)
{
    cJSON *c = root;
    for (int i = 0; c && i < n - 1; i++)
        c = child_of(c, t[i]);
    return c;
}

static int op_remove(cJSON **root, const char *path, cJSON **ret_removed, struct tern_err *err)
{
    char **t;
    int n = pointer_tokens(path, &t);
    int rc = 0;
    if (n <= 0) {
        rc = err_set(err, TERN_EINVALID, "unable to remove nonexistent key: %s: missing value",
                     path);
        goto out;
    }
    cJSON *parent = resolve_parent(*root, t, n);
    cJSON *it = NULL;
    if (cJSON_IsObject(parent)) {
        it = cJSON_DetachItemFromObjectCaseSensitive(parent, t[n - 1]);
    } else if (cJSON_IsArray(parent)) {
        int i;
        if (array_index(t[n - 1], cJSON_GetArraySize(parent), false, &i) == 0)
            it = cJSON_DetachItemFromArray(parent, i);
    }
    if (!it) {
        rc = err_set(err, TERN_EINVALID,
                     "unable to remove nonexistent key: %s: missing value", t[n - 1]);
        goto out;
    }
    if (ret_removed)
        *ret_removed = it;
    else
        cJSON_Delete(it);
out:
    if (n > 0)
        free_tokens(t, n);
    return rc;
}

/* cJSON 1.7.15's cJSON_InsertItemInArray drops the item: move the tail
 * out, append, move the tail back. */
static void insert_at(cJSON *arr, int i, cJSON *val)
{
    cJSON *tail = cJSON_CreateArray();
    while (cJSON_GetArraySize(arr) > i)
        cJSON_AddItemToArray(tail, cJSON_DetachItemFromArray(arr, i));
    cJSON_AddItemToArray(arr, val);
    while (tail->child)
        cJSON_AddItemToArray(arr, cJSON_DetachItemFromArray(tail, 0));
    cJSON_Delete(tail);
}

static int op_add(cJSON **root, const char *path, cJSON *val, bool replace, struct tern_err *err)
{
    char **t;
    int n = pointer_tokens(path, &t);
    int rc = 0;
    if (n < 0) {
        rc = err_set(err, TERN_EINVALID, "invalid JSON pointer: %s", path);
        goto out;
    }
    if (n == 0) {
        cJSON_Delete(*root);
        *root = val;
        val = NULL;
        goto out;
    }
    cJSON *parent = resolve_parent(*root, t, n);
    if (cJSON_IsObject(parent)) {
        bool has = cJSON_GetObjectItemCaseSensitive(parent, t[n - 1]) != NULL;
        if (replace && !has) {
            rc = err_set(err, TERN_EINVALID,
                         "replace operation does not apply: doc is missing key: %s: missing "
                         "value",
                         path);
            goto out;
        }
        if (has)
            cJSON_ReplaceItemInObjectCaseSensitive(parent, t[n - 1], val);
        else
            cJSON_AddItemToObject(parent, t[n - 1], val);
        val = NULL;
    } else if (cJSON_IsArray(parent)) {
        int size = cJSON_GetArraySize(parent), i;
        if (array_index(t[n - 1], size, !replace, &i)) {
            rc = err_set(err, TERN_EINVALID,
                         "%s operation does not apply: doc is missing path: %s: missing value",
                         replace ? "replace" : "add", path);
            goto out;
        }
        if (replace)
            cJSON_ReplaceItemInArray(parent, i, val);
        else if (i == size)
            cJSON_AddItemToArray(parent, val);
        else
            insert_at(parent, i, val);
        val = NULL;
    } else {
        rc = err_set(err, TERN_EINVALID,
                     "%s operation does not apply: doc is missing path: \"%s\": missing value",
                     replace ? "replace" : "add", path);
    }
out:
    cJSON_Delete(val);
    if (n > 0)
        free_tokens(t, n);
    return rc;
}

static cJSON *op_get(cJSON *root, const char *path)
{
    char **t;
    int n = pointer_tokens(path, &t);
    if (n < 0)
        return NULL;
    cJSON *c = root;
    for (int i = 0; c && i < n; i++)
        c = child_of(c, t[i]);
    if (n > 0)
        free_tokens(t, n);
    return c;
}

int apipatch_json(const cJSON *doc, const cJSON *ops, cJSON **ret, struct tern_err *err)
{
    if (!cJSON_IsArray(ops))
        return err_set(err, TERN_EPARSE,
                       "json: cannot unmarshal object into Go value of type jsonpatch.Patch");
    cJSON *root = json_dup(doc);
    int rc = 0;
    for (const cJSON *op = ops->child; op; op = op->next) {
        const cJSON *o = json_get(op, "op"), *path = json_get(op, "path");
        if (!cJSON_IsString(o) || !cJSON_IsString(path)) {
            rc = err_set(err, TERN_EPARSE, "invalid JSON patch operation: missing op or path");
            goto out;
        }
        const char *name = o->valuestring;
        const cJSON *value = json_get(op, "value");
        const cJSON *from = json_get(op, "from");
        if (strcmp(name, "add") == 0 || strcmp(name, "replace") == 0) {
            if (!value) {
                rc = err_set(err, TERN_EPARSE, "missing value for %s operation", name);
                goto out;
            }
            rc = op_add(&root, path->valuestring, json_dup(value), name[0] == 'r', err);
        } else if (strcmp(name, "remove") == 0) {
            rc = op_remove(&root, path->valuestring, NULL, err);
        } else if (strcmp(name, "move") == 0 || strcmp(name, "copy") == 0) {
            if (!cJSON_IsString(from)) {
                rc = err_set(err, TERN_EPARSE, "missing from for %s operation", name);
                goto out;
            }
            cJSON *v = NULL;
            if (name[0] == 'm') {
                rc = op_remove(&root, from->valuestring, &v, err);
            } else {
                cJSON *src = op_get(root, from->valuestring);
                if (!src)
                    rc = err_set(err, TERN_EINVALID, "copy from nonexistent path: %s",
                                 from->valuestring);
                else
                    v = json_dup(src);
            }
            if (!rc)
                rc = op_add(&root, path->valuestring, v, false, err);
        } else if (strcmp(name, "test") == 0) {
            cJSON *cur = op_get(root, path->valuestring);
            if (!cur || !value || !cJSON_Compare(cur, value, 1))
                rc = err_set(err, TERN_EINVALID, "testing value %s failed: test failed",
                             path->valuestring);
        } else {
            rc = err_set(err, TERN_EPARSE, "Unexpected kind: %s", name);
        }
        if (rc)
            goto out;
    }
out:
    if (rc) {
        cJSON_Delete(root);
        return rc;
    }
    *ret = root;
    return 0;
}

/* ---- strategic merge --------------------------------------------------- */

/* Lists merged by a key (patchMergeKey) in the built-in types we serve. */
static const char *merge_key_for(const char *field, const cJSON *sample)
{
    static const struct {
        const char *field, *key;
    } keyed[] = {
        {"containers", "name"},        {"initContainers", "name"},
        {"ephemeralContainers", "name"}, {"env", "name"},
        {"volumes", "name"},           {"volumeMounts", "mountPath"},
        {"volumeDevices", "devicePath"}, {"imagePullSecrets", "name"},
        {"conditions", "type"},        {"ownerReferences", "uid"},
        {"hostAliases", "ip"},         {"topologySpreadConstraints", "topologyKey"},
        {"resourceClaims", "name"},    {"readinessGates", "conditionType"},
        {"containerStatuses", "name"}, {"initContainerStatuses", "name"},
        {"podIPs", "ip"},              {"ephemeralContainerStatuses", "name"},
    };
    if (strcmp(field, "ports") == 0) {
        if (sample && json_get(sample, "containerPort"))
            return "containerPort";
        return "port";
    }
    for (size_t i = 0; i < sizeof(keyed) / sizeof(keyed[0]); i++)
        if (strcmp(field, keyed[i].field) == 0)
            return keyed[i].key;
    return NULL;
}

static bool primitive_merge_list(const char *field)
{
    return strcmp(field, "finalizers") == 0;
}

static cJSON *find_keyed(cJSON *arr, const char *key, const cJSON *kv, int *ret_idx)
{
    int i = 0;
    for (cJSON *c = arr ? arr->child : NULL; c; c = c->next, i++) {
        const cJSON *v = json_get(c, key);
        if (v && cJSON_Compare(v, kv, 1)) {
            if (ret_idx)
                *ret_idx = i;
            return c;
        }
    }
    return NULL;
}

static int smp_object(cJSON *target, const cJSON *patch, struct tern_err *err);

static int smp_list(cJSON *target, const char *field, const cJSON *plist, struct tern_err *err)
{
    cJSON *cur = cJSON_GetObjectItemCaseSensitive(target, field);
    const char *key = merge_key_for(field, plist->child);
    if (primitive_merge_list(field)) {
        cJSON *res = cJSON_IsArray(cur) ? json_dup(cur) : cJSON_CreateArray();
        for (const cJSON *p = plist->child; p; p = p->next) {
            bool dup = false;
            for (cJSON *c = res->child; c; c = c->next)
                if (cJSON_Compare(c, p, 1))
                    dup = true;
            if (!dup)
                cJSON_AddItemToArray(res, json_dup(p));
        }
        if (cur)
            cJSON_ReplaceItemInObjectCaseSensitive(target, field, res);
        else
            cJSON_AddItemToObject(target, field, res);
        return 0;
    }
    /* a $patch: replace element replaces the whole list */
    bool replace = !key;
    for (const cJSON *p = plist->child; p; p = p->next) {
        const cJSON *d = json_get(p, "$patch");
        if (d && cJSON_IsString(d) && strcmp(d->valuestring, "replace") == 0)
            replace = true;
    }
    if (replace) {
        cJSON *res = cJSON_CreateArray();
        for (const cJSON *p = plist->child; p; p = p->next) {
            if (json_get(p, "$patch"))
                continue;
            cJSON_AddItemToArray(res, json_dup(p));
        }
        if (cur)
            cJSON_ReplaceItemInObjectCaseSensitive(target, field, res);
        else
            cJSON_AddItemToObject(target, field, res);
        return 0;
    }
    cJSON *res = cJSON_IsArray(cur) ? json_dup(cur) : cJSON_CreateArray();
    for (const cJSON *p = plist->child; p; p = p->next) {
        if (!cJSON_IsObject(p)) {
            cJSON_Delete(res);
            return err_set(err, TERN_EPARSE,
                           "unable to find api field in struct for the list %s: element is not "
                           "an object",
                           field);
        }
        const cJSON *kv = json_get(p, key);
        if (!kv) {
            cJSON_Delete(res);
            return err_set(err, TERN_EPARSE, "map: %s does not contain declared merge key: %s",
                           "element", key);
        }
        const cJSON *d = json_get(p, "$patch");
        int idx = -1;
        cJSON *ex = find_keyed(res, key, kv, &idx);
        if (d && cJSON_IsString(d) && strcmp(d->valuestring, "delete") == 0) {
            if (ex)
                cJSON_DeleteItemFromArray(res, idx);
            continue;
        }
        if (ex) {
            int rc = smp_object(ex, p, err);
            if (rc) {
                cJSON_Delete(res);
                return rc;
            }
        } else {
            cJSON *n = cJSON_CreateObject();
            int rc = smp_object(n, p, err);
            if (rc) {
                cJSON_Delete(n);
                cJSON_Delete(res);
                return rc;
            }
            cJSON_AddItemToArray(res, n);
        }
    }
    if (cur)
        cJSON_ReplaceItemInObjectCaseSensitive(target, field, res);
    else
        cJSON_AddItemToObject(target, field, res);
    return 0;
}

/* Applies $setElementOrder/<field>: items named in the order list come in
 * that order; the others keep their relative position after them. */
static void set_element_order(cJSON *target, const char *field, const cJSON *order)
{
    cJSON *cur = cJSON_GetObjectItemCaseSensitive(target, field);
    if (!cJSON_IsArray(cur) || !cJSON_IsArray(order))
        return;
    const char *key = merge_key_for(field, order->child);
    cJSON *res = cJSON_CreateArray();
    for (const cJSON *o = order->child; o; o = o->next) {
        int idx = -1;
        if (key && cJSON_IsObject(o)) {
            const cJSON *kv = json_get(o, key);
            if (kv && find_keyed(cur, key, kv, &idx))
                cJSON_AddItemToArray(res, cJSON_DetachItemFromArray(cur, idx));
        } else {
            int i = 0;
            for (cJSON *c = cur->child; c; c = c->next, i++)
                if (cJSON_Compare(c, o, 1)) {
                    cJSON_AddItemToArray(res, cJSON_DetachItemFromArray(cur, i));
                    break;
                }
        }
    }
    while (cur->child)
        cJSON_AddItemToArray(res, cJSON_DetachItemFromArray(cur, 0));
    cJSON_ReplaceItemInObjectCaseSensitive(target, field, res);
}

static int smp_object(cJSON *target, const cJSON *patch, struct tern_err *err)
{
    if (!cJSON_IsObject(patch))
        return err_set(err, TERN_EPARSE, "strategic merge patch must be an object");
    const cJSON *d = json_get(patch, "$patch");
    if (d) {
        const char *dv = cJSON_IsString(d) ? d->valuestring : "";
        if (strcmp(dv, "replace") == 0) {
            while (target->child)
                cJSON_DeleteItemFromObjectCaseSensitive(target, target->child->string);
            for (const cJSON *p = patch->child; p; p = p->next)
                if (p->string[0] != '$')
                    cJSON_AddItemToObject(target, p->string, json_dup(p));
            return 0;
        }
        if (strcmp(dv, "delete") == 0) {
            while (target->child)
                cJSON_DeleteItemFromObjectCaseSensitive(target, target->child->string);
            return 0;
        }
        if (strcmp(dv, "merge") != 0)
            return err_set(err, TERN_EPARSE, "Unknown patch type: %s in map: %s", dv, "patch");
    }
    const cJSON *retain = json_get(patch, "$retainKeys");
    for (const cJSON *p = patch->child; p; p = p->next) {
        const char *k = p->string;
        if (k[0] == '$') {
            static const char del_prefix[] = "$deleteFromPrimitiveList/";
            if (strncmp(k, del_prefix, sizeof(del_prefix) - 1) == 0 && cJSON_IsArray(p)) {
                cJSON *cur = cJSON_GetObjectItemCaseSensitive(target, k + sizeof(del_prefix) - 1);
                for (const cJSON *v = p->child; cJSON_IsArray(cur) && v; v = v->next) {
                    int i = 0;
                    for (cJSON *c = cur->child; c; c = c->next, i++)
                        if (cJSON_Compare(c, v, 1)) {
                            cJSON_DeleteItemFromArray(cur, i);
                            break;
                        }
                }
            }
            continue;
        }
        if (cJSON_IsNull(p)) {
            cJSON_DeleteItemFromObjectCaseSensitive(target, k);
            continue;
        }
        cJSON *cur = cJSON_GetObjectItemCaseSensitive(target, k);
        int rc = 0;
        if (cJSON_IsObject(p)) {
            if (!cJSON_IsObject(cur)) {
                cJSON *n = cJSON_CreateObject();
                if (cur)
                    cJSON_ReplaceItemInObjectCaseSensitive(target, k, n);
                else
                    cJSON_AddItemToObject(target, k, n);
                cur = n;
            }
            rc = smp_object(cur, p, err);
        } else if (cJSON_IsArray(p)) {
            rc = smp_list(target, k, p, err);
        } else if (cur) {
            cJSON_ReplaceItemInObjectCaseSensitive(target, k, json_dup(p));
        } else {
            cJSON_AddItemToObject(target, k, json_dup(p));
        }
        if (rc)
            return rc;
    }
    static const char order_prefix[] = "$setElementOrder/";
    for (const cJSON *p = patch->child; p; p = p->next)
        if (strncmp(p->string, order_prefix, sizeof(order_prefix) - 1) == 0)
            set_element_order(target, p->string + sizeof(order_prefix) - 1, p);
    if (cJSON_IsArray(retain)) {
        cJSON *c = target->child;
        while (c) {
            cJSON *next = c->next;
            bool keep = false;
            for (const cJSON *r = retain->child; r; r = r->next)
                if (cJSON_IsString(r) && strcmp(r->valuestring, c->string) == 0)
                    keep = true;
            if (!keep)
                cJSON_Delete(cJSON_DetachItemViaPointer(target, c));
            c = next;
        }
    }
    return 0;
}

int apipatch_strategic(const cJSON *doc, const cJSON *patch, cJSON **ret, struct tern_err *err)
{
    if (!cJSON_IsObject(patch))
        return err_set(err, TERN_EPARSE, "strategic merge patch must be a JSON object");
    cJSON *t = cJSON_IsObject(doc) ? json_dup(doc) : cJSON_CreateObject();
    int rc = smp_object(t, patch, err);
    if (rc) {
        cJSON_Delete(t);
        return rc;
    }
    *ret = t;
    return 0;
}
