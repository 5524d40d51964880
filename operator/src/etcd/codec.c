/* codec.c - the gateway's JSON, pure (no I/O): request encoding (keys and
 * ranges, range/put/delete/txn bodies; cJSON trees), reply decoding (exact
 * int64/uint64, base64 keys and values, omitted defaults; range/put/delete/
 * txn replies and watch stream lines), the mapping of gateway error bodies
 * to Tern codes, the response *_done functions, and etcd_check_reply (the
 * decoders' entry point for tests and fuzzing).
 */
#include "etcd_internal.h"

#include "base/base64.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

/* ---- request encoding --------------------------------------------------- */

static void add_b64(cJSON *o, const char *name, const void *p, size_t n)
{
    char *s = base64_encode(p, n);
    json_add_string(o, name, s);
    free(s);
}

void etcd__add_i64s(cJSON *o, const char *name, int64_t v)
{
    char tmp[21];
    json_add_string(o, name, num_fmt_i64(v, tmp));
}

/* The range end of a prefix: the prefix with its last byte incremented after
 * dropping trailing 0xff bytes; n = 0 means "to the end of the keyspace". */
size_t etcd__prefix_end(const char *key, char *out)
{
    size_t n = strlen(key);
    memcpy(out, key, n);
    while (n > 0) {
        unsigned char b = (unsigned char)out[n - 1];
        if (b < 0xff) {
            out[n - 1] = (char)(b + 1);
            return n;
        }
        n--;
    }
    return 0;
}

int etcd__add_keys(cJSON *o, const struct etcd_keys *k, struct tern_err *err)
{
    const char *key = k->key ? k->key : "";
    size_t klen = strlen(key);
    if (klen > TERN_ETCD_MAX_KEY)
        return err_set(err, TERN_ETOOLARGE, "etcd: key longer than %d bytes", TERN_ETCD_MAX_KEY);
    static const char zero = 0;
    if (k->prefix) {
        char *end = xmalloc(klen + 1);
        size_t elen = etcd__prefix_end(key, end);
        if (klen == 0)
            add_b64(o, "key", &zero, 1);
        else
            add_b64(o, "key", key, klen);
        if (elen == 0)
            add_b64(o, "range_end", &zero, 1);
        else
            add_b64(o, "range_end", end, elen);
        free(end);
        return 0;
    }
    if (klen == 0 && (k->from_key || k->range_end))
        add_b64(o, "key", &zero, 1);
    else
        add_b64(o, "key", key, klen);
    if (k->from_key) {
        add_b64(o, "range_end", &zero, 1);
    } else if (k->range_end) {
        size_t elen = strlen(k->range_end);
        if (elen > TERN_ETCD_MAX_KEY)
            return err_set(err, TERN_ETOOLARGE, "etcd: range end longer than %d bytes",
                           TERN_ETCD_MAX_KEY);
        if (elen == 0)
            add_b64(o, "range_end", &zero, 1);
        else
            add_b64(o, "range_end", k->range_end, elen);
    }
    return 0;
}

int etcd__enc_range(const struct etcd_range_req *q, cJSON **ret, struct tern_err *err)
{
    static const char *const orders[] = {"NONE", "ASCEND", "DESCEND"};
    static const char *const targets[] = {"KEY", "VERSION", "CREATE", "MOD", "VALUE"};
    cJSON *o = cJSON_CreateObject();
    int r = etcd__add_keys(o, &q->keys, err);
    if (r) {
        cJSON_Delete(o);
        return r;
    }
    if (q->limit < 0 || q->revision < 0 || (unsigned)q->sort_order > ETCD_SORT_DESCEND ||
        (unsigned)q->sort_target > ETCD_SORT_VALUE) {
        cJSON_Delete(o);
        return err_set(err, TERN_EINVALID, "etcd range: bad limit, revision or sort");
    }
    if (q->limit)
        etcd__add_i64s(o, "limit", q->limit);
    if (q->revision)
        etcd__add_i64s(o, "revision", q->revision);
    if (q->sort_order)
        json_add_string(o, "sort_order", orders[q->sort_order]);
    if (q->sort_target)
        json_add_string(o, "sort_target", targets[q->sort_target]);
    if (q->serializable)
        cJSON_AddTrueToObject(o, "serializable");
    if (q->keys_only)
        cJSON_AddTrueToObject(o, "keys_only");
    if (q->count_only)
        cJSON_AddTrueToObject(o, "count_only");
    if (q->min_mod_revision)
        etcd__add_i64s(o, "min_mod_revision", q->min_mod_revision);
    if (q->max_mod_revision)
        etcd__add_i64s(o, "max_mod_revision", q->max_mod_revision);
    *ret = o;
    return 0;
}

int etcd__enc_put(const struct etcd_put_req *q, cJSON **ret, struct tern_err *err)
{
    if (!q->key || !*q->key)
        return err_set(err, TERN_EINVALID, "etcd put: empty key");
    size_t klen = strlen(q->key);
    if (klen > TERN_ETCD_MAX_KEY)
        return err_set(err, TERN_ETOOLARGE, "etcd: key longer than %d bytes", TERN_ETCD_MAX_KEY);
    if (q->value_len > TERN_ETCD_MAX_REQUEST)
        return err_set(err, TERN_ETOOLARGE, "etcd put %s: value of %zu bytes exceeds %u", q->key,
                       q->value_len, TERN_ETCD_MAX_REQUEST);
    cJSON *o = cJSON_CreateObject();
    add_b64(o, "key", q->key, klen);
    if (!q->ignore_value)
        add_b64(o, "value", q->value ? q->value : "", q->value ? q->value_len : 0);
    if (q->lease)
        etcd__add_i64s(o, "lease", q->lease);
    if (q->prev_kv)
        cJSON_AddTrueToObject(o, "prev_kv");
    if (q->ignore_value)
        cJSON_AddTrueToObject(o, "ignore_value");
    if (q->ignore_lease)
        cJSON_AddTrueToObject(o, "ignore_lease");
    *ret = o;
    return 0;
}

int etcd__enc_delete(const struct etcd_delete_req *q, cJSON **ret, struct tern_err *err)
{
    cJSON *o = cJSON_CreateObject();
    int r = etcd__add_keys(o, &q->keys, err);
    if (r) {
        cJSON_Delete(o);
        return r;
    }
    if (q->prev_kv)
        cJSON_AddTrueToObject(o, "prev_kv");
    *ret = o;
    return 0;
}

static int enc_ops(cJSON *parent, const char *name, const struct etcd_op *ops, size_t n,
                   struct tern_err *err)
{
    if (n == 0)
        return 0;
    cJSON *arr = cJSON_AddArrayToObject(parent, name);
    for (size_t i = 0; i < n; i++) {
        cJSON *inner = NULL;
        const char *kind;
        int r;
        switch (ops[i].type) {
        case ETCD_OP_RANGE:
            kind = "request_range";
            r = etcd__enc_range(&ops[i].range, &inner, err);
            break;
        case ETCD_OP_PUT:
            kind = "request_put";
            r = etcd__enc_put(&ops[i].put, &inner, err);
            break;
        case ETCD_OP_DELETE:
            kind = "request_delete_range";
            r = etcd__enc_delete(&ops[i].del, &inner, err);
            break;
        default:
            return err_set(err, TERN_EINVALID, "etcd txn: bad op type %d", (int)ops[i].type);
        }
        if (r)
            return err_wrap(err, r, "%s[%zu]", name, i);
        cJSON *w = cJSON_CreateObject();
        cJSON_AddItemToObject(w, kind, inner);
        cJSON_AddItemToArray(arr, w);
    }
    return 0;
}

int etcd__enc_txn(const struct etcd_txn_req *q, cJSON **ret, struct tern_err *err)
{
    static const char *const targets[] = {"VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
    static const char *const fields[] = {"version", "create_revision", "mod_revision", "value",
                                         "lease"};
    static const char *const results[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
    cJSON *o = cJSON_CreateObject();
    int r = 0;
    if (q->ncmps) {
        cJSON *arr = cJSON_AddArrayToObject(o, "compare");
        for (size_t i = 0; i < q->ncmps; i++) {
            const struct etcd_compare *cm = &q->cmps[i];
            if ((unsigned)cm->target > ETCD_CMP_LEASE ||
                (unsigned)cm->result > ETCD_CMP_NOT_EQUAL) {
                r = err_set(err, TERN_EINVALID, "etcd txn: compare[%zu]: bad target/result", i);
                goto out;
            }
            cJSON *co = cJSON_CreateObject();
            cJSON_AddItemToArray(arr, co);
            r = etcd__add_keys(co, &cm->keys, err);
            if (r)
                goto out;
            json_add_string(co, "target", targets[cm->target]);
            json_add_string(co, "result", results[cm->result]);
            if (cm->target == ETCD_CMP_VALUE)
                add_b64(co, "value", cm->value ? cm->value : "", cm->value ? cm->value_len : 0);
            else
                etcd__add_i64s(co, fields[cm->target], cm->number);
        }
    }
    r = enc_ops(o, "success", q->success, q->nsuccess, err);
    if (!r)
        r = enc_ops(o, "failure", q->failure, q->nfailure, err);
out:
    if (r) {
        cJSON_Delete(o);
        return r;
    }
    *ret = o;
    return 0;
}

/* ---- response decoding (pure) ------------------------------------------- */

static int dec_u64(const cJSON *o, const char *path, const char *key, uint64_t *ret,
                   struct tern_err *err)
{
    const cJSON *it = json_get(o, key);
    if (!it || cJSON_IsNull(it))
        return 0;
    if (cJSON_IsString(it) && num_parse_u64(it->valuestring, ret) == 0)
        return 0;
    int64_t v;
    if (json_item_int64(it, &v) == 0 && v >= 0) {
        *ret = (uint64_t)v;
        return 0;
    }
    return err_set(err, TERN_EPARSE, "%s.%s: not an unsigned integer", path, key);
}

int etcd__dec_i64(const cJSON *o, const char *path, const char *key, int64_t *ret,
                  struct tern_err *err)
{
    int r = json_get_int64(o, path, key, JSON_OPTIONAL, ret, err);
    return r ? TERN_EPARSE : 0;
}

static int dec_bool(const cJSON *o, const char *path, const char *key, bool *ret,
                    struct tern_err *err)
{
    int r = json_get_bool(o, path, key, JSON_OPTIONAL, ret, err);
    return r ? TERN_EPARSE : 0;
}

static int dec_header(const cJSON *o, struct etcd_header *h, struct tern_err *err)
{
    const cJSON *ho = NULL;
    if (json_get_object(o, "", "header", JSON_OPTIONAL, &ho, err))
        return TERN_EPARSE;
    memset(h, 0, sizeof *h);
    if (!ho)
        return 0;
    int r = etcd__dec_i64(ho, "header", "revision", &h->revision, err);
    if (!r)
        r = dec_u64(ho, "header", "cluster_id", &h->cluster_id, err);
    if (!r)
        r = dec_u64(ho, "header", "member_id", &h->member_id, err);
    if (!r)
        r = etcd__dec_i64(ho, "header", "raft_term", &h->raft_term, err);
    return r;
}

/* Decodes a base64 string member into a NUL-terminated copy ("" if absent). */
static int dec_bytes(const cJSON *o, const char *path, const char *key, char **ret, size_t *ret_len,
                     struct tern_err *err)
{
    const char *s = NULL;
    if (json_get_string(o, path, key, JSON_OPTIONAL, &s, err))
        return TERN_EPARSE;
    if (!s) {
        *ret = xstrdup("");
        *ret_len = 0;
        return 0;
    }
    unsigned char *b = NULL;
    size_t n = 0;
    if (base64_decode(s, strlen(s), &b, &n))
        return err_set(err, TERN_EPARSE, "%s.%s: bad base64", path, key);
    *ret = (char *)b;
    *ret_len = n;
    return 0;
}

static void kv_done(struct etcd_kv *kv)
{
    if (!kv)
        return;
    free(kv->key);
    free(kv->value);
    memset(kv, 0, sizeof *kv);
}

void etcd_kv_free(struct etcd_kv *kv)
{
    kv_done(kv);
    free(kv);
}

static int dec_kv(const cJSON *o, const char *path, struct etcd_kv *kv, struct tern_err *err)
{
    memset(kv, 0, sizeof *kv);
    if (!cJSON_IsObject(o))
        return err_set(err, TERN_EPARSE, "%s: not an object", path);
    int r = dec_bytes(o, path, "key", &kv->key, &kv->key_len, err);
    if (!r)
        r = dec_bytes(o, path, "value", &kv->value, &kv->value_len, err);
    if (!r)
        r = etcd__dec_i64(o, path, "create_revision", &kv->create_revision, err);
    if (!r)
        r = etcd__dec_i64(o, path, "mod_revision", &kv->mod_revision, err);
    if (!r)
        r = etcd__dec_i64(o, path, "version", &kv->version, err);
    if (!r)
        r = etcd__dec_i64(o, path, "lease", &kv->lease, err);
    if (r)
        kv_done(kv);
    return r;
}

static int dec_kv_array(const cJSON *o, const char *path, const char *key, struct etcd_kv **ret,
                        size_t *ret_n, struct tern_err *err)
{
    const cJSON *arr = NULL;
    if (json_get_array(o, path, key, JSON_OPTIONAL, &arr, err))
        return TERN_EPARSE;
    if (!arr)
        return 0;
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (n == 0)
        return 0;
    struct etcd_kv *kvs = xcalloc(n, sizeof *kvs);
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        int r = dec_kv(it, key, &kvs[i], err);
        if (r) {
            for (size_t j = 0; j < i; j++)
                kv_done(&kvs[j]);
            free(kvs);
            return r;
        }
        i++;
    }
    *ret = kvs;
    *ret_n = i;
    return 0;
}

static void kvs_free(struct etcd_kv *kvs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        kv_done(&kvs[i]);
    free(kvs);
}

void etcd_range_resp_done(struct etcd_range_resp *r)
{
    if (!r)
        return;
    kvs_free(r->kvs, r->nkvs);
    memset(r, 0, sizeof *r);
}

void etcd_put_resp_done(struct etcd_put_resp *r)
{
    if (!r)
        return;
    etcd_kv_free(r->prev_kv);
    memset(r, 0, sizeof *r);
}

void etcd_delete_resp_done(struct etcd_delete_resp *r)
{
    if (!r)
        return;
    kvs_free(r->prev_kvs, r->nprev_kvs);
    memset(r, 0, sizeof *r);
}

static void op_resp_done(struct etcd_op_resp *o)
{
    etcd_range_resp_done(&o->range);
    etcd_put_resp_done(&o->put);
    etcd_delete_resp_done(&o->del);
}

void etcd_txn_resp_done(struct etcd_txn_resp *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nresponses; i++)
        op_resp_done(&r->responses[i]);
    free(r->responses);
    memset(r, 0, sizeof *r);
}

int etcd__dec_range(const cJSON *o, struct etcd_range_resp *ret, struct tern_err *err)
{
    struct etcd_range_resp r = {0};
    int rc = dec_header(o, &r.header, err);
    if (!rc)
        rc = dec_kv_array(o, "", "kvs", &r.kvs, &r.nkvs, err);
    if (!rc)
        rc = dec_bool(o, "", "more", &r.more, err);
    if (!rc)
        rc = etcd__dec_i64(o, "", "count", &r.count, err);
    if (rc) {
        etcd_range_resp_done(&r);
        return rc;
    }
    *ret = r;
    return 0;
}

int etcd__dec_put(const cJSON *o, struct etcd_put_resp *ret, struct tern_err *err)
{
    struct etcd_put_resp r = {0};
    int rc = dec_header(o, &r.header, err);
    const cJSON *pk = json_get(o, "prev_kv");
    if (!rc && pk && !cJSON_IsNull(pk)) {
        r.prev_kv = xcalloc(1, sizeof *r.prev_kv);
        rc = dec_kv(pk, "prev_kv", r.prev_kv, err);
    }
    if (rc) {
        etcd_put_resp_done(&r);
        return rc;
    }
    *ret = r;
    return 0;
}

int etcd__dec_delete(const cJSON *o, struct etcd_delete_resp *ret, struct tern_err *err)
{
    struct etcd_delete_resp r = {0};
    int rc = dec_header(o, &r.header, err);
    if (!rc)
        rc = etcd__dec_i64(o, "", "deleted", &r.deleted, err);
    if (!rc)
        rc = dec_kv_array(o, "", "prev_kvs", &r.prev_kvs, &r.nprev_kvs, err);
    if (rc) {
        etcd_delete_resp_done(&r);
        return rc;
    }
    *ret = r;
    return 0;
}

int etcd__dec_txn(const cJSON *o, struct etcd_txn_resp *ret, struct tern_err *err)
{
    struct etcd_txn_resp r = {0};
    const cJSON *arr = NULL;
    int rc = dec_header(o, &r.header, err);
    if (!rc)
        rc = dec_bool(o, "", "succeeded", &r.succeeded, err);
    if (!rc && json_get_array(o, "", "responses", JSON_OPTIONAL, &arr, err))
        rc = TERN_EPARSE;
    if (!rc && arr && cJSON_GetArraySize(arr) > 0) {
        size_t n = (size_t)cJSON_GetArraySize(arr);
        r.responses = xcalloc(n, sizeof *r.responses);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr)
        {
            struct etcd_op_resp *op = &r.responses[r.nresponses];
            const cJSON *v;
            if ((v = json_get(it, "response_range")) && cJSON_IsObject(v)) {
                op->type = ETCD_OP_RANGE;
                rc = etcd__dec_range(v, &op->range, err);
            } else if ((v = json_get(it, "response_put")) && cJSON_IsObject(v)) {
                op->type = ETCD_OP_PUT;
                rc = etcd__dec_put(v, &op->put, err);
            } else if ((v = json_get(it, "response_delete_range")) && cJSON_IsObject(v)) {
                op->type = ETCD_OP_DELETE;
                rc = etcd__dec_delete(v, &op->del, err);
            } else {
                rc = err_set(err, TERN_EPARSE, "responses[%zu]: unknown response kind",
                             r.nresponses);
            }
            if (rc)
                break;
            r.nresponses++;
        }
    }
    if (rc) {
        etcd_txn_resp_done(&r);
        return rc;
    }
    *ret = r;
    return 0;
}

/* Maps a gateway error body {"error","code","message"} (or a bare HTTP
 * status) to a code. *retryable: the request was certainly not applied and
 * another endpoint may serve it. */
int etcd__map_error(long status, const cJSON *body, bool *unavailable, struct tern_err *err)
{
    int64_t code = -1;
    const char *msg = NULL;
    *unavailable = false;
    if (body) {
        const cJSON *m = json_get(body, "message");
        if (!cJSON_IsString(m))
            m = json_get(body, "error");
        if (cJSON_IsString(m))
            msg = m->valuestring;
        /* unary errors say "code"; errors inside a stream "grpc_code" */
        const cJSON *ci = json_get(body, "code");
        if (!ci)
            ci = json_get(body, "grpc_code");
        if (ci)
            json_item_int64(ci, &code);
        int64_t hc = 0;
        const cJSON *hi = json_get(body, "http_code");
        if (status == 500 && hi && json_item_int64(hi, &hc) == 0 && hc > 0 && hc < 600)
            status = (long)hc;
    }
    const char *text = msg ? msg : "";
    if (strstr(text, "required revision has been compacted"))
        return err_set(err, TERN_ECOMPACTED, "etcd: %s", text);
    if (strstr(text, "request is too large") || code == 8 /* ResourceExhausted */)
        return err_set(err, TERN_ETOOLARGE, "etcd: %s", msg ? msg : "request too large");
    if (strstr(text, "lease not found"))
        return err_set(err, TERN_ENOTFOUND, "etcd: %s", text);
    /* etcd 3.4 reports some auth failures as InvalidArgument (code 3) */
    if (code == 16 || code == 7 || status == 401 || status == 403 ||
        strstr(text, "user name is empty") || strstr(text, "authentication failed") ||
        strstr(text, "permission denied") || strstr(text, "auth token") ||
        /* a request raced a change of users or roles: authenticate again */
        strstr(text, "revision of auth store is old"))
        return err_set(err, TERN_EAUTH, "etcd: %s", msg ? msg : "unauthorized");
    if (code == 3 || code == 11 || code == 9 || code == 6 || code == 5)
        return err_set(err, TERN_EINVALID, "etcd: %s", text);
    if (code == 14 || code == 4 || status == 503 || status == 504) {
        *unavailable = true;
        return err_set(err, code == 4 || status == 504 ? TERN_ETIMEOUT : TERN_EUNREACHABLE,
                       "etcd: %s", msg ? msg : "unavailable");
    }
    return err_set(err, TERN_EHTTP, "etcd: HTTP %ld%s%s", status, msg ? ": " : "", text);
}

/* ---- watch stream lines (pure) ----------------------------------------- */

static void events_free(struct etcd_event *evs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        kv_done(&evs[i].kv);
        kv_done(&evs[i].prev_kv);
    }
    free(evs);
}

void etcd__watch_msg_done(struct watch_msg *m)
{
    events_free(m->events, m->nevents);
    memset(m, 0, sizeof *m);
}

/* Decodes one watch stream line (pure; fuzzed through the unit tests). The
 * tree j must outlive m (cancel_reason is borrowed). */
int etcd__dec_watch_line(const cJSON *j, struct watch_msg *m, struct tern_err *err)
{
    memset(m, 0, sizeof *m);
    const cJSON *res = json_get(j, "result");
    if (!cJSON_IsObject(res)) {
        const cJSON *e = json_get(j, "error");
        if (!e)
            return err_set(err, TERN_EPARSE, "watch: line has neither result nor error");
        bool un;
        m->is_error = true;
        m->error_code = etcd__map_error(500, cJSON_IsObject(e) ? e : j, &un, err);
        return 0;
    }
    int r = dec_header(res, &m->header, err);
    if (!r)
        r = dec_bool(res, "result", "created", &m->created, err);
    if (!r)
        r = dec_bool(res, "result", "canceled", &m->canceled, err);
    if (!r)
        r = etcd__dec_i64(res, "result", "compact_revision", &m->compact_revision, err);
    if (!r &&
        json_get_string(res, "result", "cancel_reason", JSON_OPTIONAL, &m->cancel_reason, err))
        r = TERN_EPARSE;
    const cJSON *arr = NULL;
    if (!r && json_get_array(res, "result", "events", JSON_OPTIONAL, &arr, err))
        r = TERN_EPARSE;
    if (!r && arr && cJSON_GetArraySize(arr) > 0) {
        size_t n = (size_t)cJSON_GetArraySize(arr);
        m->events = xcalloc(n, sizeof *m->events);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr)
        {
            struct etcd_event *ev = &m->events[m->nevents];
            const char *type = NULL;
            if (json_get_string(it, "events[]", "type", JSON_OPTIONAL, &type, err)) {
                r = TERN_EPARSE;
                break;
            }
            if (!type || strcmp(type, "PUT") == 0) {
                ev->type = ETCD_EVENT_PUT;
            } else if (strcmp(type, "DELETE") == 0) {
                ev->type = ETCD_EVENT_DELETE;
            } else {
                r = err_set(err, TERN_EPARSE, "watch: unknown event type \"%s\"", type);
                break;
            }
            const cJSON *kv = json_get(it, "kv");
            if (!kv) {
                r = err_set(err, TERN_EPARSE, "watch: event without kv");
                break;
            }
            r = dec_kv(kv, "events[].kv", &ev->kv, err);
            if (r)
                break;
            m->nevents++;
            const cJSON *pk = json_get(it, "prev_kv");
            if (pk && !cJSON_IsNull(pk)) {
                r = dec_kv(pk, "events[].prev_kv", &ev->prev_kv, err);
                if (r)
                    break;
                ev->has_prev_kv = true;
            }
        }
    }
    if (r)
        etcd__watch_msg_done(m);
    return r;
}

int etcd_check_reply(enum etcd_reply_kind kind, const char *body, size_t len, struct tern_err *err)
{
    cJSON *j = NULL;
    int r = json_parse(body, len, &j, err);
    if (r)
        return r == TERN_ETOOLARGE ? r : TERN_EPARSE;
    switch (kind) {
    case ETCD_REPLY_RANGE: {
        struct etcd_range_resp x;
        r = etcd__dec_range(j, &x, err);
        if (!r)
            etcd_range_resp_done(&x);
        break;
    }
    case ETCD_REPLY_PUT: {
        struct etcd_put_resp x;
        r = etcd__dec_put(j, &x, err);
        if (!r)
            etcd_put_resp_done(&x);
        break;
    }
    case ETCD_REPLY_DELETE: {
        struct etcd_delete_resp x;
        r = etcd__dec_delete(j, &x, err);
        if (!r)
            etcd_delete_resp_done(&x);
        break;
    }
    case ETCD_REPLY_TXN: {
        struct etcd_txn_resp x;
        r = etcd__dec_txn(j, &x, err);
        if (!r)
            etcd_txn_resp_done(&x);
        break;
    }
    case ETCD_REPLY_WATCH_LINE: {
        struct watch_msg m;
        r = etcd__dec_watch_line(j, &m, err);
        if (!r) {
            if (m.is_error)
                r = m.error_code;
            etcd__watch_msg_done(&m);
        }
        break;
    }
    case ETCD_REPLY_ERROR: {
        bool un;
        etcd__map_error(400, j, &un, err);
        r = 0;
        break;
    }
    default:
        r = err_set(err, TERN_EINVALID, "etcd_check_reply: bad kind");
        break;
    }
    cJSON_Delete(j);
    return r;
}
