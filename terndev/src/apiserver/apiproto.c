/* apiproto.c - protobuf request bodies. See apiproto.h. */
#include "apiproto.h"

#include "base/base64.h"
#include "base/mem.h"
#include "json/json.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct pb {
    const uint8_t *p, *end;
};

struct field {
    uint32_t num;
    int wt;
    uint64_t v;            /* varint / fixed */
    const uint8_t *data;   /* length-delimited */
    size_t len;
};

static int varint(struct pb *b, uint64_t *ret)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end)
            return TERN_EPARSE;
        uint8_t c = *b->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *ret = v;
            return 0;
        }
    }
    return TERN_EPARSE;
}

/* Reads the next field; 1 at the end, 0 with *f, or TERN_EPARSE. */
static int next(struct pb *b, struct field *f)
{
    if (b->p >= b->end)
        return 1;
    uint64_t key;
    if (varint(b, &key))
        return TERN_EPARSE;
    f->num = (uint32_t)(key >> 3);
    f->wt = (int)(key & 7);
    switch (f->wt) {
    case 0: return varint(b, &f->v);
    case 1:
        if (b->end - b->p < 8)
            return TERN_EPARSE;
        b->p += 8;
        return 0;
    case 5:
        if (b->end - b->p < 4)
            return TERN_EPARSE;
        b->p += 4;
        return 0;
    case 2: {
        uint64_t len;
        if (varint(b, &len) || len > (uint64_t)(b->end - b->p))
            return TERN_EPARSE;
        f->data = b->p;
        f->len = (size_t)len;
        b->p += len;
        return 0;
    }
    default: return TERN_EPARSE;
    }
}

static char *str(const struct field *f)
{
    return xstrndup((const char *)f->data, f->len);
}

static void add_str(cJSON *o, const char *k, const struct field *f)
{
    if (f->wt != 2 || !f->len || memchr(f->data, 0, f->len))
        return;
    char *s = str(f);
    cJSON_DeleteItemFromObjectCaseSensitive(o, k);
    cJSON_AddStringToObject(o, k, s);
    free(s);
}

/* A map entry {1: key, 2: value} added to obj[k]; bytes values base64. */
static int add_entry(cJSON *o, const char *k, const struct field *f, bool bytes)
{
    if (f->wt != 2)
        return TERN_EPARSE;
    struct pb b = {f->data, f->data + f->len};
    struct field e;
    char *key = NULL, *val = NULL;
    int rc;
    while ((rc = next(&b, &e)) == 0) {
        if (e.wt != 2)
            continue;
        if (e.num == 1) {
            free(key);
            key = str(&e);
        } else if (e.num == 2) {
            free(val);
            val = bytes ? base64_encode(e.data, e.len) : str(&e);
        }
    }
    if (rc < 0 || !key) {
        free(key);
        free(val);
        return TERN_EPARSE;
    }
    cJSON *m = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!m)
        m = cJSON_AddObjectToObject(o, k);
    cJSON_DeleteItemFromObjectCaseSensitive(m, key);
    cJSON_AddStringToObject(m, key, val ? val : "");
    free(key);
    free(val);
    return 0;
}

static int owner_ref(cJSON *md, const struct field *f)
{
    struct pb b = {f->data, f->data + f->len};
    struct field e;
    cJSON *o = cJSON_CreateObject();
    int rc;
    while ((rc = next(&b, &e)) == 0) {
        switch (e.num) {
        case 1: add_str(o, "kind", &e); break;
        case 3: add_str(o, "name", &e); break;
        case 4: add_str(o, "uid", &e); break;
        case 5: add_str(o, "apiVersion", &e); break;
        case 6:
            if (e.wt == 0)
                cJSON_AddBoolToObject(o, "controller", e.v != 0);
            break;
        case 7:
            if (e.wt == 0)
                cJSON_AddBoolToObject(o, "blockOwnerDeletion", e.v != 0);
            break;
        default: break;
        }
    }
    if (rc < 0) {
        cJSON_Delete(o);
        return rc;
    }
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(md, "ownerReferences");
    if (!arr)
        arr = cJSON_AddArrayToObject(md, "ownerReferences");
    cJSON_AddItemToArray(arr, o);
    return 0;
}

static int object_meta(cJSON *obj, const struct field *f)
{
    if (f->wt != 2)
        return TERN_EPARSE;
    cJSON *md = cJSON_CreateObject();
    struct pb b = {f->data, f->data + f->len};
    struct field e;
    int rc;
    while ((rc = next(&b, &e)) == 0) {
        int r = 0;
        switch (e.num) {
        case 1: add_str(md, "name", &e); break;
        case 2: add_str(md, "generateName", &e); break;
        case 3: add_str(md, "namespace", &e); break;
        case 5: add_str(md, "uid", &e); break;
        case 11: r = add_entry(md, "labels", &e, false); break;
        case 12: r = add_entry(md, "annotations", &e, false); break;
        case 13: r = e.wt == 2 ? owner_ref(md, &e) : TERN_EPARSE; break;
        case 14:
            if (e.wt == 2 && e.len && !memchr(e.data, 0, e.len)) {
                cJSON *fz = cJSON_GetObjectItemCaseSensitive(md, "finalizers");
                if (!fz)
                    fz = cJSON_AddArrayToObject(md, "finalizers");
                char *s = str(&e);
                cJSON_AddItemToArray(fz, cJSON_CreateString(s));
                free(s);
            }
            break;
        default: break;
        }
        if (r) {
            rc = r;
            break;
        }
    }
    if (rc < 0) {
        cJSON_Delete(md);
        return rc;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "metadata");
    cJSON_AddItemToObject(obj, "metadata", md);
    return 0;
}

/* A message whose fields 1..n are strings named names[0..n-1] (NULL:
 * skipped). list: each field repeats and becomes a JSON array (empty
 * strings kept, as JSON would carry them); else empty strings are omitted
 * as JSON omits them. Returns 0 and *ret, or TERN_EPARSE. */
static int strings_message(const struct field *f, const char *const *names, size_t n, bool list,
                           cJSON **ret)
{
    if (f->wt != 2)
        return TERN_EPARSE;
    cJSON *o = cJSON_CreateObject();
    struct pb b = {f->data, f->data + f->len};
    struct field e;
    int rc;
    while ((rc = next(&b, &e)) == 0) {
        if (e.num < 1 || e.num > n || !names[e.num - 1] || e.wt != 2)
            continue;
        if (memchr(e.data, 0, e.len)) {
            rc = TERN_EPARSE;
            break;
        }
        if (!list) {
            add_str(o, names[e.num - 1], &e);
            continue;
        }
        cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, names[e.num - 1]);
        if (!arr)
            arr = cJSON_AddArrayToObject(o, names[e.num - 1]);
        char *s = str(&e);
        cJSON_AddItemToArray(arr, cJSON_CreateString(s));
        free(s);
    }
    if (rc < 0) {
        cJSON_Delete(o);
        return rc;
    }
    *ret = o;
    return 0;
}

static int add_message(cJSON *obj, const char *key, bool append, const struct field *f,
                       const char *const *names, size_t n, bool list)
{
    cJSON *m = NULL;
    int rc = strings_message(f, names, n, list, &m);
    if (rc)
        return rc;
    if (!append) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
        cJSON_AddItemToObject(obj, key, m);
        return 0;
    }
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!arr)
        arr = cJSON_AddArrayToObject(obj, key);
    cJSON_AddItemToArray(arr, m);
    return 0;
}

static const char *const POLICY_RULE[] = {"verbs", "apiGroups", "resources", "resourceNames",
                                          "nonResourceURLs"};
static const char *const SUBJECT[] = {"kind", "apiGroup", "name", "namespace"};
static const char *const ROLE_REF[] = {"apiGroup", "kind", "name"};
static const char *const RESOURCE_ATTRS[] = {"namespace", "verb",        "group", "version",
                                             "resource",  "subresource", "name"};
static const char *const NONRESOURCE_ATTRS[] = {"path", "verb"};
#define N(a) (sizeof(a) / sizeof((a)[0]))

/* SelfSubjectAccessReviewSpec: 1 resourceAttributes, 2 nonResourceAttributes. */
static int access_review_spec(cJSON *obj, const struct field *f)
{
    if (f->wt != 2)
        return TERN_EPARSE;
    cJSON *spec = cJSON_CreateObject();
    struct pb b = {f->data, f->data + f->len};
    struct field e;
    int rc;
    while ((rc = next(&b, &e)) == 0) {
        int r = 0;
        if (e.num == 1)
            r = add_message(spec, "resourceAttributes", false, &e, RESOURCE_ATTRS,
                            N(RESOURCE_ATTRS), false);
        else if (e.num == 2)
            r = add_message(spec, "nonResourceAttributes", false, &e, NONRESOURCE_ATTRS,
                            N(NONRESOURCE_ATTRS), false);
        if (r) {
            rc = r;
            break;
        }
    }
    if (rc < 0) {
        cJSON_Delete(spec);
        return rc;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "spec");
    cJSON_AddItemToObject(obj, "spec", spec);
    return 0;
}

static int decode_kind(const char *kind, const uint8_t *p, size_t n, cJSON *obj)
{
    bool role = strcmp(kind, "Role") == 0 || strcmp(kind, "ClusterRole") == 0;
    bool binding = strcmp(kind, "RoleBinding") == 0 || strcmp(kind, "ClusterRoleBinding") == 0;
    struct pb b = {p, p + n};
    struct field f;
    int rc;
    while ((rc = next(&b, &f)) == 0) {
        int r = 0;
        if (f.num == 1) {
            r = object_meta(obj, &f);
        } else if (strcmp(kind, "ConfigMap") == 0) {
            if (f.num == 2)
                r = add_entry(obj, "data", &f, false);
            else if (f.num == 3)
                r = add_entry(obj, "binaryData", &f, true);
            else if (f.num == 4 && f.wt == 0)
                cJSON_AddBoolToObject(obj, "immutable", f.v != 0);
        } else if (strcmp(kind, "Secret") == 0) {
            if (f.num == 2)
                r = add_entry(obj, "data", &f, true);
            else if (f.num == 3)
                add_str(obj, "type", &f);
            else if (f.num == 4)
                r = add_entry(obj, "stringData", &f, false);
            else if (f.num == 5 && f.wt == 0)
                cJSON_AddBoolToObject(obj, "immutable", f.v != 0);
        } else if (strcmp(kind, "ServiceAccount") == 0) {
            if (f.num == 4 && f.wt == 0)
                cJSON_AddBoolToObject(obj, "automountServiceAccountToken", f.v != 0);
        } else if (role) { /* 2 rules (ClusterRole's 3 aggregationRule is not decoded) */
            if (f.num == 2)
                r = add_message(obj, "rules", true, &f, POLICY_RULE, N(POLICY_RULE), true);
        } else if (binding) { /* 2 subjects, 3 roleRef */
            if (f.num == 2)
                r = add_message(obj, "subjects", true, &f, SUBJECT, N(SUBJECT), false);
            else if (f.num == 3)
                r = add_message(obj, "roleRef", false, &f, ROLE_REF, N(ROLE_REF), false);
        } else if (strcmp(kind, "SelfSubjectAccessReview") == 0) { /* 2 spec; 3 status ignored */
            if (f.num == 2)
                r = access_review_spec(obj, &f);
        }
        /* Namespace: spec and status carry nothing a create may set */
        if (r)
            return r;
    }
    return rc < 0 ? rc : 0;
}

int apiproto_decode(const void *data, size_t n, cJSON **ret, struct tern_err *err)
{
    const uint8_t *p = data;
    if (n < 4 || memcmp(p, "k8s\0", 4) != 0)
        return err_set(err, TERN_EPARSE, "protobuf body without the k8s envelope");
    struct pb b = {p + 4, p + n};
    struct field f;
    char *av = NULL, *kind = NULL;
    const uint8_t *raw = NULL;
    size_t rawlen = 0;
    int rc;
    while ((rc = next(&b, &f)) == 0) {
        if (f.num == 1 && f.wt == 2) {
            struct pb t = {f.data, f.data + f.len};
            struct field g;
            int r2;
            while ((r2 = next(&t, &g)) == 0) {
                if (g.wt != 2)
                    continue;
                if (g.num == 1) {
                    free(av);
                    av = str(&g);
                } else if (g.num == 2) {
                    free(kind);
                    kind = str(&g);
                }
            }
            if (r2 < 0)
                rc = r2;
        } else if (f.num == 2 && f.wt == 2) {
            raw = f.data;
            rawlen = f.len;
        }
        if (rc < 0)
            break;
    }
    cJSON *obj = NULL;
    if (rc < 0 || !av || !kind) {
        rc = err_set(err, TERN_EPARSE, "malformed protobuf envelope");
        goto out;
    }
    static const char *const kinds[][2] = {
        {"v1", "Namespace"},
        {"v1", "ConfigMap"},
        {"v1", "Secret"},
        {"v1", "ServiceAccount"},
        {"rbac.authorization.k8s.io/v1", "Role"},
        {"rbac.authorization.k8s.io/v1", "ClusterRole"},
        {"rbac.authorization.k8s.io/v1", "RoleBinding"},
        {"rbac.authorization.k8s.io/v1", "ClusterRoleBinding"},
        {"authorization.k8s.io/v1", "SelfSubjectAccessReview"},
        {"authentication.k8s.io/v1", "SelfSubjectReview"},
    };
    bool known = false;
    for (size_t i = 0; i < N(kinds); i++)
        known |= strcmp(av, kinds[i][0]) == 0 && strcmp(kind, kinds[i][1]) == 0;
    if (!known) {
        rc = err_set(err, TERN_EINVALID, "protobuf bodies of %s %s are not supported", av, kind);
        goto out;
    }
    obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, "apiVersion", av);
    cJSON_AddStringToObject(obj, "kind", kind);
    rc = decode_kind(kind, raw ? raw : (const uint8_t *)"", rawlen, obj);
    if (rc) {
        rc = err_set(err, TERN_EPARSE, "malformed protobuf %s", kind);
        cJSON_Delete(obj);
        obj = NULL;
    }
out:
    free(av);
    free(kind);
    if (rc)
        return rc;
    *ret = obj;
    return 0;
}
