/* kv.c - the key-value operations: range, get, revision, put, delete, txn
 * (a txn of ranges only is sent as a read) and compaction.
 */
#include "etcd_internal.h"

#include "base/mem.h"
#include "json/json.h"

#include <string.h>

int etcd_range(struct etcd *c, const struct etcd_range_req *req, struct etcd_range_resp *ret,
               struct tern_err *err)
{
    cJSON *q = NULL, *j = NULL;
    memset(ret, 0, sizeof *ret);
    int r = etcd__enc_range(req, &q, err);
    if (!r)
        r = etcd__call_obj(c, "/v3/kv/range", q, CALL_READ, NULL, &j, err);
    if (!r)
        r = etcd__dec_range(j, ret, err);
    cJSON_Delete(q);
    cJSON_Delete(j);
    return r;
}

int etcd_get(struct etcd *c, const char *key, struct etcd_kv **ret_kv, int64_t *ret_rev,
             struct tern_err *err)
{
    struct etcd_range_req q = {.keys = {.key = key}};
    struct etcd_range_resp rr;
    int r = etcd_range(c, &q, &rr, err);
    if (r)
        return r;
    if (ret_rev)
        *ret_rev = rr.header.revision;
    if (rr.nkvs == 0) {
        r = err_set(err, TERN_ENOTFOUND, "etcd: %s not found", key);
    } else {
        struct etcd_kv *kv = xmalloc(sizeof *kv);
        *kv = rr.kvs[0];
        memset(&rr.kvs[0], 0, sizeof rr.kvs[0]);
        *ret_kv = kv;
    }
    etcd_range_resp_done(&rr);
    return r;
}

int etcd_revision(struct etcd *c, int64_t *ret, struct tern_err *err)
{
    struct etcd_range_req q = {.keys = {.key = "\x01", .range_end = "\x02"}, .count_only = true};
    struct etcd_range_resp rr;
    int r = etcd_range(c, &q, &rr, err);
    if (r)
        return r;
    *ret = rr.header.revision;
    etcd_range_resp_done(&rr);
    return 0;
}

int etcd_revision_in(struct etcd *c, const struct etcd_keys *keys, int64_t *ret,
                     struct tern_err *err)
{
    struct etcd_range_req q = {.keys = *keys, .limit = 1, .keys_only = true};
    struct etcd_range_resp rr;
    int r = etcd_range(c, &q, &rr, err);
    if (r)
        return r;
    *ret = rr.header.revision;
    etcd_range_resp_done(&rr);
    return 0;
}

int etcd_put(struct etcd *c, const struct etcd_put_req *req, struct etcd_put_resp *ret,
             struct tern_err *err)
{
    cJSON *q = NULL, *j = NULL;
    memset(ret, 0, sizeof *ret);
    int r = etcd__enc_put(req, &q, err);
    if (!r)
        r = etcd__call_obj(c, "/v3/kv/put", q, CALL_WRITE, NULL, &j, err);
    if (!r)
        r = etcd__dec_put(j, ret, err);
    cJSON_Delete(q);
    cJSON_Delete(j);
    return r;
}

int etcd_delete(struct etcd *c, const struct etcd_delete_req *req, struct etcd_delete_resp *ret,
                struct tern_err *err)
{
    cJSON *q = NULL, *j = NULL;
    memset(ret, 0, sizeof *ret);
    int r = etcd__enc_delete(req, &q, err);
    if (!r)
        r = etcd__call_obj(c, "/v3/kv/deleterange", q, CALL_WRITE, NULL, &j, err);
    if (!r)
        r = etcd__dec_delete(j, ret, err);
    cJSON_Delete(q);
    cJSON_Delete(j);
    return r;
}

static bool txn_read_only(const struct etcd_txn_req *q)
{
    for (size_t i = 0; i < q->nsuccess; i++)
        if (q->success[i].type != ETCD_OP_RANGE)
            return false;
    for (size_t i = 0; i < q->nfailure; i++)
        if (q->failure[i].type != ETCD_OP_RANGE)
            return false;
    return true;
}

int etcd_txn(struct etcd *c, const struct etcd_txn_req *req, struct etcd_txn_resp *ret,
             struct tern_err *err)
{
    cJSON *q = NULL, *j = NULL;
    memset(ret, 0, sizeof *ret);
    int r = etcd__enc_txn(req, &q, err);
    if (!r)
        r = etcd__call_obj(c, "/v3/kv/txn", q, txn_read_only(req) ? CALL_READ : CALL_WRITE, NULL,
                           &j, err);
    if (!r)
        r = etcd__dec_txn(j, ret, err);
    cJSON_Delete(q);
    cJSON_Delete(j);
    return r;
}

int etcd_txn_must(struct etcd *c, const struct etcd_txn_req *req, struct etcd_txn_resp *ret,
                  struct tern_err *err)
{
    int r = etcd_txn(c, req, ret, err);
    if (!r && !ret->succeeded)
        r = err_set(err, TERN_ETXNFAILED, "etcd txn: compare failed at revision %lld",
                    (long long)ret->header.revision);
    return r;
}

int etcd_compact(struct etcd *c, int64_t revision, bool physical, struct tern_err *err)
{
    cJSON *q = cJSON_CreateObject(), *j = NULL;
    etcd__add_i64s(q, "revision", revision);
    if (physical)
        cJSON_AddTrueToObject(q, "physical");
    /* compaction is idempotent: a re-send after a lost reply reports
     * "compacted", which is what the caller wanted anyway */
    int r = etcd__call_obj(c, "/v3/kv/compaction", q, CALL_READ, NULL, &j, err);
    cJSON_Delete(q);
    cJSON_Delete(j);
    return r;
}
