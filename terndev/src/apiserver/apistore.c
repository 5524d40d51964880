/* apistore.c - Kubernetes objects in etcd. See apistore.h. */
#include "apistore.h"

#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

void apistore_init(struct apistore *s, struct etcd *etcd)
{
    s->etcd = etcd;
}

int apistore_decode(const char *value, size_t len, int64_t rev, cJSON **ret,
                    struct tern_err *err)
{
    cJSON *o = NULL;
    struct json_parse_opts opts = {.max_bytes = TERN_ETCD_MAX_VALUE * 4,
                                   .dups = JSON_DUPS_LAST_WINS};
    int rc = json_parse_opts(value, len, &opts, &o, err);
    if (rc)
        return err_wrap(err, TERN_EPARSE, "stored object");
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return err_set(err, TERN_EPARSE, "stored object is not a JSON object");
    }
    cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
    if (!cJSON_IsObject(md)) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "metadata");
        md = cJSON_AddObjectToObject(o, "metadata");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(md, "resourceVersion");
    char b[21];
    cJSON_AddStringToObject(md, "resourceVersion", num_fmt_i64(rev, b));
    *ret = o;
    return 0;
}

/* The stored form: the object without metadata.resourceVersion. */
static char *encode(const cJSON *obj)
{
    cJSON *c = json_dup(obj);
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "metadata"),
                                            "resourceVersion");
    char *s = json_print(c);
    cJSON_Delete(c);
    return s;
}

int apistore_get(struct apistore *s, const char *key, cJSON **ret, int64_t *ret_rev,
                 struct tern_err *err)
{
    struct etcd_kv *kv = NULL;
    int rc = etcd_get(s->etcd, key, &kv, NULL, err);
    if (rc)
        return rc;
    cJSON *o = NULL;
    rc = apistore_decode(kv->value, kv->value_len, kv->mod_revision, &o, err);
    if (!rc) {
        if (ret_rev)
            *ret_rev = kv->mod_revision;
        *ret = o;
    }
    etcd_kv_free(kv);
    return rc;
}

void apistore_list_done(struct apistore_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        cJSON_Delete(l->objs[i]);
    free(l->objs);
    free(l->next_key);
    memset(l, 0, sizeof(*l));
}

static char *prefix_end(const char *prefix)
{
    char *e = xstrdup(prefix);
    size_t n = strlen(e);
    e[n - 1]++; /* prefix ends in '/': the next byte is '0' */
    return e;
}

int apistore_list(struct apistore *s, const char *prefix, const char *start_key,
                  int64_t revision, int64_t limit, struct apistore_list *ret,
                  struct tern_err *err)
{
    struct apistore_list l = {0};
    char *end = prefix_end(prefix);
    const char *from = start_key && *start_key ? start_key : prefix;
    char *cur = xstrdup(from);
    int rc = 0;
    int64_t rev = revision;
    /* read in pages of at most 1000 keys so no etcd reply grows unbounded */
    for (;;) {
        int64_t want = 1000;
        if (limit > 0 && limit - (int64_t)l.n + 1 < want)
            want = limit - (int64_t)l.n + 1; /* one extra to know the next key */
        struct etcd_range_req rq = {.keys = {.key = cur, .range_end = end},
                                    .limit = want,
                                    .revision = rev};
        struct etcd_range_resp rr = {0};
        rc = etcd_range(s->etcd, &rq, &rr, err);
        if (rc) {
            etcd_range_resp_done(&rr);
            goto out;
        }
        if (!rev)
            rev = rr.header.revision;
        bool stop = false;
        for (size_t i = 0; i < rr.nkvs; i++) {
            if (limit > 0 && (int64_t)l.n == limit) {
                l.next_key = xstrdup(rr.kvs[i].key);
                stop = true;
                break;
            }
            cJSON *o = NULL;
            if (apistore_decode(rr.kvs[i].value, rr.kvs[i].value_len, rr.kvs[i].mod_revision, &o,
                                NULL))
                continue; /* an undecodable value is skipped, as a corrupt object */
            l.objs = xreallocarray(l.objs, l.n + 1, sizeof(cJSON *));
            l.objs[l.n++] = o;
        }
        bool more = rr.more && rr.nkvs > 0;
        if (!stop && more) {
            free(cur);
            /* the next key after the last one read */
            const char *last = rr.kvs[rr.nkvs - 1].key;
            size_t n = strlen(last);
            cur = xmalloc(n + 2);
            memcpy(cur, last, n);
            cur[n] = '\0';
            cur[n + 1] = '\0';
            /* key + "\0" is the smallest key greater than last; the gateway
             * takes bytes, so append a zero byte via a 1-byte longer key */
            cur[n] = '\x01';
        }
        etcd_range_resp_done(&rr);
        if (stop || !more)
            break;
    }
    l.revision = rev;
out:
    free(end);
    free(cur);
    if (rc) {
        apistore_list_done(&l);
        return rc;
    }
    *ret = l;
    return 0;
}

static int put_txn(struct apistore *s, const char *key, const cJSON *obj,
                   enum etcd_cmp_target target, int64_t expect, int64_t *ret_rev,
                   bool *ret_absent, struct tern_err *err)
{
    char *val = encode(obj);
    size_t len = strlen(val);
    int rc = 0;
    if (len > TERN_ETCD_MAX_VALUE) {
        rc = err_set(err, TERN_ETOOLARGE, "object of %zu bytes exceeds %u", len,
                     TERN_ETCD_MAX_VALUE);
        goto out;
    }
    struct etcd_compare cmp = {.keys = {.key = key}, .target = target,
                               .result = ETCD_CMP_EQUAL, .number = expect};
    struct etcd_op op = {.type = ETCD_OP_PUT, .put = {.key = key, .value = val, .value_len = len}};
    struct etcd_op fop = {.type = ETCD_OP_RANGE, .range = {.keys = {.key = key}, .keys_only = true}};
    struct etcd_txn_req tx = {.cmps = &cmp, .ncmps = 1, .success = &op, .nsuccess = 1,
                              .failure = &fop, .nfailure = 1};
    struct etcd_txn_resp tr = {0};
    rc = etcd_txn(s->etcd, &tx, &tr, err);
    if (!rc) {
        if (tr.succeeded) {
            *ret_rev = tr.header.revision;
        } else {
            bool absent = tr.nresponses < 1 || tr.responses[0].range.nkvs == 0;
            if (ret_absent)
                *ret_absent = absent;
            rc = err_set(err, TERN_ECONFLICT, "%s: revision mismatch", key);
        }
    }
    etcd_txn_resp_done(&tr);
out:
    free(val);
    return rc;
}

int apistore_create(struct apistore *s, const char *key, const cJSON *obj, int64_t *ret_rev,
                    struct tern_err *err)
{
    return put_txn(s, key, obj, ETCD_CMP_CREATE, 0, ret_rev, NULL, err);
}

int apistore_update(struct apistore *s, const char *key, const cJSON *obj, int64_t expect_rev,
                    int64_t *ret_rev, struct tern_err *err)
{
    bool absent = false;
    int rc = put_txn(s, key, obj, ETCD_CMP_MOD, expect_rev, ret_rev, &absent, err);
    if (rc == TERN_ECONFLICT && absent)
        return err_set(err, TERN_ENOTFOUND, "%s: not found", key);
    return rc;
}

int apistore_delete(struct apistore *s, const char *key, int64_t expect_rev, int64_t *ret_rev,
                    struct tern_err *err)
{
    struct etcd_compare cmp = {.keys = {.key = key},
                               .target = expect_rev ? ETCD_CMP_MOD : ETCD_CMP_CREATE,
                               .result = expect_rev ? ETCD_CMP_EQUAL : ETCD_CMP_GREATER,
                               .number = expect_rev};
    struct etcd_op op = {.type = ETCD_OP_DELETE, .del = {.keys = {.key = key}}};
    struct etcd_op fop = {.type = ETCD_OP_RANGE, .range = {.keys = {.key = key}, .keys_only = true}};
    struct etcd_txn_req tx = {.cmps = &cmp, .ncmps = 1, .success = &op, .nsuccess = 1,
                              .failure = &fop, .nfailure = 1};
    struct etcd_txn_resp tr = {0};
    int rc = etcd_txn(s->etcd, &tx, &tr, err);
    if (!rc) {
        if (tr.succeeded) {
            *ret_rev = tr.header.revision;
        } else if (tr.nresponses < 1 || tr.responses[0].range.nkvs == 0) {
            rc = err_set(err, TERN_ENOTFOUND, "%s: not found", key);
        } else {
            rc = err_set(err, TERN_ECONFLICT, "%s: revision mismatch", key);
        }
    }
    etcd_txn_resp_done(&tr);
    return rc;
}

int apistore_delete_prefix(struct apistore *s, const char *prefix, struct tern_err *err)
{
    struct etcd_delete_req rq = {.keys = {.key = prefix, .prefix = true}};
    struct etcd_delete_resp rr = {0};
    int rc = etcd_delete(s->etcd, &rq, &rr, err);
    etcd_delete_resp_done(&rr);
    return rc;
}

int apistore_revision(struct apistore *s, int64_t *ret, struct tern_err *err)
{
    return etcd_revision(s->etcd, ret, err);
}
