/* etcd.c - etcd v3 JSON-gateway client. See etcd.h.
 *
 * Layout: request encoding (cJSON trees -> text), response decoding (pure
 * functions over parsed JSON, unit-tested with canned replies), the call
 * path (connection pool, endpoint failover, auth, error mapping), then the
 * public operations, the lease keeper and the watch loop.
 */
#include "etcd.h"

#include "base/base64.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct etcd {
    char **eps;
    size_t neps;
    atomic_size_t cur; /* index of the endpoint that last answered */
    struct httpc_tls tls;
    bool has_tls;
    char *user;
    char *pass;
    long timeout_ms;
    long connect_timeout_ms;

    pthread_mutex_t mu; /* guards pool and token */
    struct httpc *pool[TERN_ETCD_POOL_IDLE];
    size_t npool;
    char *token; /* auth token, or NULL */
};

/* ---- small helpers ------------------------------------------------------ */

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool cancelled(atomic_bool *cancel)
{
    return cancel && atomic_load(cancel);
}

/* Sleeps ms, waking early (returning true) when *cancel is raised. */
static bool sleep_cancellable(long ms, atomic_bool *cancel)
{
    long end = now_ms() + ms;
    for (;;) {
        if (cancelled(cancel))
            return true;
        long left = end - now_ms();
        if (left <= 0)
            return false;
        long step = left < 20 ? left : 20;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = step * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

static char *memdup_or_null(const char *s, size_t n)
{
    return s ? xmemdup(s, n) : NULL;
}

/* ---- lifecycle ---------------------------------------------------------- */

int etcd_new(const struct etcd_config *cfg, struct etcd **ret, struct tern_err *err)
{
    if (!cfg || !cfg->endpoints || cfg->nendpoints == 0 ||
        cfg->nendpoints > TERN_ETCD_MAX_ENDPOINTS)
        return err_set(err, TERN_EINVALID, "etcd: need 1..%d endpoints", TERN_ETCD_MAX_ENDPOINTS);
    for (size_t i = 0; i < cfg->nendpoints; i++) {
        const char *e = cfg->endpoints[i];
        if (!e || (strncmp(e, "http://", 7) != 0 && strncmp(e, "https://", 8) != 0) ||
            strlen(e) > 1024)
            return err_set(err, TERN_EINVALID, "etcd: bad endpoint \"%s\"", e ? e : "(null)");
    }
    if (cfg->username && !cfg->password)
        return err_set(err, TERN_EINVALID, "etcd: username without password");
    struct etcd *c = xcalloc(1, sizeof *c);
    c->neps = cfg->nendpoints;
    c->eps = xcalloc(c->neps, sizeof *c->eps);
    for (size_t i = 0; i < c->neps; i++) {
        size_t n = strlen(cfg->endpoints[i]);
        while (n > 0 && cfg->endpoints[i][n - 1] == '/')
            n--;
        c->eps[i] = xstrndup(cfg->endpoints[i], n);
    }
    atomic_init(&c->cur, 0);
    if (cfg->tls) {
        c->has_tls = true;
        c->tls.ca_file = dup_or_null(cfg->tls->ca_file);
        c->tls.ca_pem = memdup_or_null(cfg->tls->ca_pem, cfg->tls->ca_pem_len);
        c->tls.ca_pem_len = cfg->tls->ca_pem_len;
        c->tls.cert_pem = memdup_or_null(cfg->tls->cert_pem, cfg->tls->cert_pem_len);
        c->tls.cert_pem_len = cfg->tls->cert_pem_len;
        c->tls.key_pem = memdup_or_null(cfg->tls->key_pem, cfg->tls->key_pem_len);
        c->tls.key_pem_len = cfg->tls->key_pem_len;
        c->tls.insecure = cfg->tls->insecure;
    }
    c->user = dup_or_null(cfg->username);
    c->pass = dup_or_null(cfg->password);
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 5000;
    c->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 2000;
    pthread_mutex_init(&c->mu, NULL);
    *ret = c;
    return 0;
}

void etcd_free(struct etcd *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->neps; i++)
        free(c->eps[i]);
    free(c->eps);
    free((char *)c->tls.ca_file);
    free((char *)c->tls.ca_pem);
    free((char *)c->tls.cert_pem);
    free((char *)c->tls.key_pem);
    free(c->user);
    free(c->pass);
    for (size_t i = 0; i < c->npool; i++)
        httpc_free(c->pool[i]);
    free(c->token);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int etcd_endpoints_parse(const char *list, char ***ret, size_t *ret_n, struct tern_err *err)
{
    char **eps = xcalloc(TERN_ETCD_MAX_ENDPOINTS + 1, sizeof *eps);
    size_t n = 0;
    int r = 0;
    const char *p = list ? list : "";
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len) {
            if (n == TERN_ETCD_MAX_ENDPOINTS) {
                r = err_set(err, TERN_EINVALID, "etcd endpoints: more than %d",
                            TERN_ETCD_MAX_ENDPOINTS);
                goto out;
            }
            if (len > 1024 || !((len > 7 && strncmp(p, "http://", 7) == 0) ||
                                (len > 8 && strncmp(p, "https://", 8) == 0))) {
                r = err_set(err, TERN_EINVALID, "etcd endpoints: \"%.*s\" is not an http(s) URL",
                            (int)(len > 200 ? 200 : len), p);
                goto out;
            }
            eps[n++] = xstrndup(p, len);
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    if (n == 0) {
        r = err_set(err, TERN_EINVALID, "etcd endpoints: empty list");
        goto out;
    }
    *ret = eps;
    *ret_n = n;
    eps = NULL;
out:
    etcd_endpoints_free(eps);
    return r;
}

void etcd_endpoints_free(char **eps)
{
    if (!eps)
        return;
    for (char **p = eps; *p; p++)
        free(*p);
    free(eps);
}

/* ---- connection pool ---------------------------------------------------- */

static struct httpc *conn_get(struct etcd *c)
{
    struct httpc *h = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->npool)
        h = c->pool[--c->npool];
    pthread_mutex_unlock(&c->mu);
    return h ? h : httpc_new();
}

/* Returns a connection to the pool; broken = drop it (its state is unknown). */
static void conn_put(struct etcd *c, struct httpc *h, bool broken)
{
    if (!h)
        return;
    if (!broken) {
        pthread_mutex_lock(&c->mu);
        if (c->npool < TERN_ETCD_POOL_IDLE) {
            c->pool[c->npool++] = h;
            h = NULL;
        }
        pthread_mutex_unlock(&c->mu);
    }
    httpc_free(h);
}

/* ---- request encoding --------------------------------------------------- */

static void add_b64(cJSON *o, const char *name, const void *p, size_t n)
{
    char *s = base64_encode(p, n);
    json_add_string(o, name, s);
    free(s);
}

static void add_i64s(cJSON *o, const char *name, int64_t v)
{
    char tmp[21];
    json_add_string(o, name, num_fmt_i64(v, tmp));
}

/* The range end of a prefix: the prefix with its last byte incremented after
 * dropping trailing 0xff bytes; n = 0 means "to the end of the keyspace". */
static size_t prefix_end(const char *key, char *out)
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

static int add_keys(cJSON *o, const struct etcd_keys *k, struct tern_err *err)
{
    const char *key = k->key ? k->key : "";
    size_t klen = strlen(key);
    if (klen > TERN_ETCD_MAX_KEY)
        return err_set(err, TERN_ETOOLARGE, "etcd: key longer than %d bytes", TERN_ETCD_MAX_KEY);
    static const char zero = 0;
    if (k->prefix) {
        char *end = xmalloc(klen + 1);
        size_t elen = prefix_end(key, end);
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

static int enc_range(const struct etcd_range_req *q, cJSON **ret, struct tern_err *err)
{
    static const char *const orders[] = {"NONE", "ASCEND", "DESCEND"};
    static const char *const targets[] = {"KEY", "VERSION", "CREATE", "MOD", "VALUE"};
    cJSON *o = cJSON_CreateObject();
    int r = add_keys(o, &q->keys, err);
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
        add_i64s(o, "limit", q->limit);
    if (q->revision)
        add_i64s(o, "revision", q->revision);
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
        add_i64s(o, "min_mod_revision", q->min_mod_revision);
    if (q->max_mod_revision)
        add_i64s(o, "max_mod_revision", q->max_mod_revision);
    *ret = o;
    return 0;
}

static int enc_put(const struct etcd_put_req *q, cJSON **ret, struct tern_err *err)
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
        add_i64s(o, "lease", q->lease);
    if (q->prev_kv)
        cJSON_AddTrueToObject(o, "prev_kv");
    if (q->ignore_value)
        cJSON_AddTrueToObject(o, "ignore_value");
    if (q->ignore_lease)
        cJSON_AddTrueToObject(o, "ignore_lease");
    *ret = o;
    return 0;
}

static int enc_delete(const struct etcd_delete_req *q, cJSON **ret, struct tern_err *err)
{
    cJSON *o = cJSON_CreateObject();
    int r = add_keys(o, &q->keys, err);
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
            r = enc_range(&ops[i].range, &inner, err);
            break;
        case ETCD_OP_PUT:
            kind = "request_put";
            r = enc_put(&ops[i].put, &inner, err);
            break;
        case ETCD_OP_DELETE:
            kind = "request_delete_range";
            r = enc_delete(&ops[i].del, &inner, err);
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

static int enc_txn(const struct etcd_txn_req *q, cJSON **ret, struct tern_err *err)
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
            r = add_keys(co, &cm->keys, err);
            if (r)
                goto out;
            json_add_string(co, "target", targets[cm->target]);
            json_add_string(co, "result", results[cm->result]);
            if (cm->target == ETCD_CMP_VALUE)
                add_b64(co, "value", cm->value ? cm->value : "", cm->value ? cm->value_len : 0);
            else
                add_i64s(co, fields[cm->target], cm->number);
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

static int dec_i64(const cJSON *o, const char *path, const char *key, int64_t *ret,
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
    int r = dec_i64(ho, "header", "revision", &h->revision, err);
    if (!r)
        r = dec_u64(ho, "header", "cluster_id", &h->cluster_id, err);
    if (!r)
        r = dec_u64(ho, "header", "member_id", &h->member_id, err);
    if (!r)
        r = dec_i64(ho, "header", "raft_term", &h->raft_term, err);
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
        r = dec_i64(o, path, "create_revision", &kv->create_revision, err);
    if (!r)
        r = dec_i64(o, path, "mod_revision", &kv->mod_revision, err);
    if (!r)
        r = dec_i64(o, path, "version", &kv->version, err);
    if (!r)
        r = dec_i64(o, path, "lease", &kv->lease, err);
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

static int dec_range(const cJSON *o, struct etcd_range_resp *ret, struct tern_err *err)
{
    struct etcd_range_resp r = {0};
    int rc = dec_header(o, &r.header, err);
    if (!rc)
        rc = dec_kv_array(o, "", "kvs", &r.kvs, &r.nkvs, err);
    if (!rc)
        rc = dec_bool(o, "", "more", &r.more, err);
    if (!rc)
        rc = dec_i64(o, "", "count", &r.count, err);
    if (rc) {
        etcd_range_resp_done(&r);
        return rc;
    }
    *ret = r;
    return 0;
}

static int dec_put(const cJSON *o, struct etcd_put_resp *ret, struct tern_err *err)
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

static int dec_delete(const cJSON *o, struct etcd_delete_resp *ret, struct tern_err *err)
{
    struct etcd_delete_resp r = {0};
    int rc = dec_header(o, &r.header, err);
    if (!rc)
        rc = dec_i64(o, "", "deleted", &r.deleted, err);
    if (!rc)
        rc = dec_kv_array(o, "", "prev_kvs", &r.prev_kvs, &r.nprev_kvs, err);
    if (rc) {
        etcd_delete_resp_done(&r);
        return rc;
    }
    *ret = r;
    return 0;
}

static int dec_txn(const cJSON *o, struct etcd_txn_resp *ret, struct tern_err *err)
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
                rc = dec_range(v, &op->range, err);
            } else if ((v = json_get(it, "response_put")) && cJSON_IsObject(v)) {
                op->type = ETCD_OP_PUT;
                rc = dec_put(v, &op->put, err);
            } else if ((v = json_get(it, "response_delete_range")) && cJSON_IsObject(v)) {
                op->type = ETCD_OP_DELETE;
                rc = dec_delete(v, &op->del, err);
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
static int map_error(long status, const cJSON *body, bool *unavailable, struct tern_err *err)
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
        strstr(text, "permission denied") || strstr(text, "auth token"))
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

/* ---- the call path ------------------------------------------------------ */

enum call_kind { CALL_READ, CALL_WRITE };

/* Turns the transport error in err into "outcome unknown", keeping its text
 * (err_wrap keeps the original code, so set it here). */
static int outcome_unknown(struct tern_err *err, const char *path)
{
    err_wrap(err, TERN_EUNKNOWN, "etcd %s: outcome unknown", path);
    if (err)
        err->code = TERN_EUNKNOWN;
    return TERN_EUNKNOWN;
}

static int authenticate(struct etcd *c, struct httpc *h, const char *ep, atomic_bool *cancel,
                        struct tern_err *err)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "name", c->user);
    json_add_string(o, "password", c->pass);
    char *body = json_print(o);
    cJSON_Delete(o);
    char *url = xasprintf("%s/v3/auth/authenticate", ep);
    const char *hdrs[] = {"Content-Type: application/json", NULL};
    struct httpc_request req = {
        .method = "POST",
        .url = url,
        .headers = hdrs,
        .body = body,
        .body_len = strlen(body),
        .timeout_ms = c->timeout_ms,
        .connect_timeout_ms = c->connect_timeout_ms,
        .max_body = 1u << 16,
        .tls = c->has_tls ? &c->tls : NULL,
        .cancel = cancel,
    };
    struct httpc_response resp;
    cJSON *j = NULL;
    int r = httpc_do(h, &req, &resp, err);
    if (r)
        goto out;
    if (json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &j, err)) {
        r = err_set(err, TERN_EPARSE, "etcd authenticate: bad reply");
        goto out;
    }
    if (resp.status != 200) {
        bool un;
        r = map_error(resp.status, j, &un, err);
        if (r == TERN_EINVALID || r == TERN_EHTTP) {
            err_wrap(err, TERN_EAUTH, "etcd authenticate");
            r = TERN_EAUTH;
            if (err)
                err->code = r;
        }
        goto out;
    }
    const char *tok = NULL;
    if (json_get_string(j, "", "token", JSON_REQUIRED, &tok, err) || !*tok) {
        r = err_set(err, TERN_EAUTH, "etcd authenticate: no token in reply");
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    free(c->token);
    c->token = xstrdup(tok);
    pthread_mutex_unlock(&c->mu);
out:
    cJSON_Delete(j);
    httpc_response_done(&resp);
    free(url);
    free(body);
    return r;
}

/* The Authorization header line for the current token, or NULL. */
static char *auth_header(struct etcd *c)
{
    char *h = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->token)
        h = xasprintf("Authorization: %s", c->token);
    pthread_mutex_unlock(&c->mu);
    return h;
}

static bool need_token(struct etcd *c)
{
    if (!c->user)
        return false;
    pthread_mutex_lock(&c->mu);
    bool need = c->token == NULL;
    pthread_mutex_unlock(&c->mu);
    return need;
}

/* Sends body to path, failing over between endpoints. Returns 0 and the
 * parsed 200 reply in *ret, or an error (see etcd.h). */
static int call(struct etcd *c, const char *path, const char *body, size_t body_len,
                enum call_kind kind, atomic_bool *cancel, cJSON **ret, struct tern_err *err)
{
    if (body_len > TERN_ETCD_MAX_REQUEST)
        return err_set(err, TERN_ETOOLARGE, "etcd %s: request of %zu bytes exceeds %u", path,
                       body_len, TERN_ETCD_MAX_REQUEST);
    int r = TERN_EUNREACHABLE;
    size_t start = atomic_load(&c->cur);
    bool reauthed = false;
    for (size_t attempt = 0; attempt < c->neps; attempt++) {
        size_t idx = (start + attempt) % c->neps;
        const char *ep = c->eps[idx];
        struct httpc *h = conn_get(c);
        struct httpc_response resp = {0};
        cJSON *j = NULL;
        char *url = NULL, *auth = NULL;
        bool broken = false, next = false, retry_same = false;

        if (need_token(c)) {
            r = authenticate(c, h, ep, cancel, err);
            if (r) {
                broken = r != TERN_EAUTH;
                next = r == TERN_EUNREACHABLE || r == TERN_ETIMEOUT || r == -EIO;
                goto done;
            }
        }
        url = xasprintf("%s%s", ep, path);
        auth = auth_header(c);
        const char *hdrs[] = {"Content-Type: application/json", auth, NULL};
        struct httpc_request req = {
            .method = "POST",
            .url = url,
            .headers = hdrs,
            .body = body,
            .body_len = body_len,
            .timeout_ms = c->timeout_ms,
            .connect_timeout_ms = c->connect_timeout_ms,
            .max_body = TERN_ETCD_MAX_RESPONSE,
            .tls = c->has_tls ? &c->tls : NULL,
            .cancel = cancel,
        };
        r = httpc_do(h, &req, &resp, err);
        if (r) {
            broken = true;
            if (r == -ECANCELED) {
                if (kind == CALL_WRITE)
                    r = err_set(err, TERN_EUNKNOWN, "etcd %s: cancelled after sending", path);
                goto done;
            }
            if (r == TERN_ETOOLARGE)
                goto done;
            /* only a refused/failed connect proves the request was not
             * sent (libcurl's upload counter does not cover a body sent
             * along with the headers, so resp.sent alone is not enough) */
            if (kind == CALL_WRITE && (resp.sent || r != TERN_EUNREACHABLE)) {
                r = outcome_unknown(err, path);
                goto done;
            }
            next = true;
            goto done;
        }
        if (json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &j, err)) {
            if (resp.status == 200) {
                r = err_wrap(err, TERN_EPARSE, "etcd %s: reply", path);
                goto done;
            }
            j = NULL;
        }
        if (resp.status == 200) {
            atomic_store(&c->cur, idx);
            *ret = j;
            j = NULL;
            r = 0;
            goto done;
        }
        bool unavailable;
        r = map_error(resp.status, j, &unavailable, err);
        if (r == TERN_EAUTH && c->user && !reauthed) {
            /* an expired token: get a new one and retry on this endpoint */
            pthread_mutex_lock(&c->mu);
            free(c->token);
            c->token = NULL;
            pthread_mutex_unlock(&c->mu);
            reauthed = true;
            retry_same = true;
        } else if (unavailable) {
            if (kind == CALL_WRITE)
                r = outcome_unknown(err, path);
            else
                next = true;
        }
    done:
        cJSON_Delete(j);
        httpc_response_done(&resp);
        free(url);
        free(auth);
        conn_put(c, h, broken);
        if (retry_same) {
            attempt--;
            continue;
        }
        if (!next || cancelled(cancel))
            return r;
    }
    return r;
}

static int call_obj(struct etcd *c, const char *path, cJSON *req, enum call_kind kind,
                    atomic_bool *cancel, cJSON **ret, struct tern_err *err)
{
    char *body = json_print(req);
    int r = call(c, path, body, strlen(body), kind, cancel, ret, err);
    free(body);
    return r;
}

/* ---- kv ---------------------------------------------------------------- */

int etcd_range(struct etcd *c, const struct etcd_range_req *req, struct etcd_range_resp *ret,
               struct tern_err *err)
{
    cJSON *q = NULL, *j = NULL;
    memset(ret, 0, sizeof *ret);
    int r = enc_range(req, &q, err);
    if (!r)
        r = call_obj(c, "/v3/kv/range", q, CALL_READ, NULL, &j, err);
    if (!r)
        r = dec_range(j, ret, err);
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

int etcd_put(struct etcd *c, const struct etcd_put_req *req, struct etcd_put_resp *ret,
             struct tern_err *err)
{
    cJSON *q = NULL, *j = NULL;
    memset(ret, 0, sizeof *ret);
    int r = enc_put(req, &q, err);
    if (!r)
        r = call_obj(c, "/v3/kv/put", q, CALL_WRITE, NULL, &j, err);
    if (!r)
        r = dec_put(j, ret, err);
    cJSON_Delete(q);
    cJSON_Delete(j);
    return r;
}

int etcd_delete(struct etcd *c, const struct etcd_delete_req *req, struct etcd_delete_resp *ret,
                struct tern_err *err)
{
    cJSON *q = NULL, *j = NULL;
    memset(ret, 0, sizeof *ret);
    int r = enc_delete(req, &q, err);
    if (!r)
        r = call_obj(c, "/v3/kv/deleterange", q, CALL_WRITE, NULL, &j, err);
    if (!r)
        r = dec_delete(j, ret, err);
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
    int r = enc_txn(req, &q, err);
    if (!r)
        r = call_obj(c, "/v3/kv/txn", q, txn_read_only(req) ? CALL_READ : CALL_WRITE, NULL, &j,
                     err);
    if (!r)
        r = dec_txn(j, ret, err);
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
    add_i64s(q, "revision", revision);
    if (physical)
        cJSON_AddTrueToObject(q, "physical");
    /* compaction is idempotent: a re-send after a lost reply reports
     * "compacted", which is what the caller wanted anyway */
    int r = call_obj(c, "/v3/kv/compaction", q, CALL_READ, NULL, &j, err);
    cJSON_Delete(q);
    cJSON_Delete(j);
    return r;
}

/* ---- leases ------------------------------------------------------------- */

static int lease_call(struct etcd *c, const char *path, cJSON *q, enum call_kind kind,
                      atomic_bool *cancel, cJSON **ret, struct tern_err *err)
{
    int r = call_obj(c, path, q, kind, cancel, ret, err);
    cJSON_Delete(q);
    return r;
}

int etcd_lease_grant(struct etcd *c, int64_t ttl_s, int64_t id, int64_t *ret_id, int64_t *ret_ttl,
                     struct tern_err *err)
{
    if (ttl_s <= 0)
        return err_set(err, TERN_EINVALID, "etcd lease grant: ttl must be > 0");
    cJSON *q = cJSON_CreateObject(), *j = NULL;
    add_i64s(q, "TTL", ttl_s);
    if (id)
        add_i64s(q, "ID", id);
    int r = lease_call(c, "/v3/lease/grant", q, CALL_WRITE, NULL, &j, err);
    int64_t gid = 0, gttl = 0;
    if (!r && (dec_i64(j, "", "ID", &gid, err) || dec_i64(j, "", "TTL", &gttl, err)))
        r = TERN_EPARSE;
    if (!r) {
        const char *e = NULL;
        json_get_string(j, "", "error", JSON_OPTIONAL, &e, NULL);
        if (e && *e)
            r = err_set(err, TERN_EINVALID, "etcd lease grant: %s", e);
        else if (gid == 0)
            r = err_set(err, TERN_EPARSE, "etcd lease grant: no ID in reply");
    }
    if (!r) {
        *ret_id = gid;
        if (ret_ttl)
            *ret_ttl = gttl;
    }
    cJSON_Delete(j);
    return r;
}

int etcd_lease_revoke(struct etcd *c, int64_t id, struct tern_err *err)
{
    cJSON *q = cJSON_CreateObject(), *j = NULL;
    add_i64s(q, "ID", id);
    /* revoking twice is harmless (the second says "not found") */
    int r = lease_call(c, "/v3/lease/revoke", q, CALL_READ, NULL, &j, err);
    cJSON_Delete(j);
    return r;
}

static int keepalive(struct etcd *c, int64_t id, atomic_bool *cancel, int64_t *ret_ttl,
                     struct tern_err *err)
{
    cJSON *q = cJSON_CreateObject(), *j = NULL;
    add_i64s(q, "ID", id);
    /* the gateway answers a one-message stream with {"result": {...}} */
    int r = lease_call(c, "/v3/lease/keepalive", q, CALL_READ, cancel, &j, err);
    if (r)
        goto out;
    const cJSON *res = json_get(j, "result");
    if (!cJSON_IsObject(res)) {
        const cJSON *e = json_get(j, "error");
        if (e) {
            bool un;
            r = map_error(500, e, &un, err);
        } else {
            r = err_set(err, TERN_EPARSE, "etcd lease keepalive: no result");
        }
        goto out;
    }
    int64_t ttl = 0;
    if (dec_i64(res, "result", "TTL", &ttl, err)) {
        r = TERN_EPARSE;
        goto out;
    }
    if (ttl <= 0) {
        r = err_set(err, TERN_ENOTFOUND, "etcd lease %llx: expired", (unsigned long long)id);
        goto out;
    }
    if (ret_ttl)
        *ret_ttl = ttl;
out:
    cJSON_Delete(j);
    return r;
}

int etcd_lease_keepalive(struct etcd *c, int64_t id, int64_t *ret_ttl, struct tern_err *err)
{
    return keepalive(c, id, NULL, ret_ttl, err);
}

int etcd_lease_ttl(struct etcd *c, int64_t id, int64_t *ret_ttl, int64_t *ret_granted,
                   struct tern_err *err)
{
    cJSON *q = cJSON_CreateObject(), *j = NULL;
    add_i64s(q, "ID", id);
    int r = lease_call(c, "/v3/lease/timetolive", q, CALL_READ, NULL, &j, err);
    int64_t ttl = 0, granted = 0;
    if (!r && (dec_i64(j, "", "TTL", &ttl, err) || dec_i64(j, "", "grantedTTL", &granted, err)))
        r = TERN_EPARSE;
    if (!r && ttl < 0)
        r = err_set(err, TERN_ENOTFOUND, "etcd lease %llx: not found", (unsigned long long)id);
    if (!r) {
        if (ret_ttl)
            *ret_ttl = ttl;
        if (ret_granted)
            *ret_granted = granted;
    }
    cJSON_Delete(j);
    return r;
}

struct etcd_keeper {
    struct etcd *c;
    int64_t id;
    int64_t ttl_s;
    atomic_bool stop;
    atomic_bool lost;
    pthread_t th;
};

static void *keeper_main(void *arg)
{
    struct etcd_keeper *k = arg;
    long period = k->ttl_s * 1000 / 3;
    if (period < 200)
        period = 200;
    long last_ok = now_ms();
    while (!atomic_load(&k->stop)) {
        struct tern_err e = {0};
        int r = keepalive(k->c, k->id, &k->stop, NULL, &e);
        if (r == 0) {
            last_ok = now_ms();
        } else if (r == TERN_ENOTFOUND || now_ms() - last_ok >= k->ttl_s * 1000) {
            atomic_store(&k->lost, true);
            break;
        }
        /* after a failure retry sooner */
        if (sleep_cancellable(r ? period / 4 : period, &k->stop))
            break;
    }
    return NULL;
}

int etcd_keeper_start(struct etcd *c, int64_t lease_id, int64_t ttl_s, struct etcd_keeper **ret,
                      struct tern_err *err)
{
    if (ttl_s <= 0)
        return err_set(err, TERN_EINVALID, "etcd keeper: ttl must be > 0");
    struct etcd_keeper *k = xcalloc(1, sizeof *k);
    k->c = c;
    k->id = lease_id;
    k->ttl_s = ttl_s;
    atomic_init(&k->stop, false);
    atomic_init(&k->lost, false);
    int r = pthread_create(&k->th, NULL, keeper_main, k);
    if (r) {
        free(k);
        return err_set(err, -r, "etcd keeper: pthread_create: %s", strerror(r));
    }
    *ret = k;
    return 0;
}

bool etcd_keeper_lost(const struct etcd_keeper *k)
{
    return atomic_load(&((struct etcd_keeper *)k)->lost);
}

void etcd_keeper_stop(struct etcd_keeper *k)
{
    if (!k)
        return;
    atomic_store(&k->stop, true);
    pthread_join(k->th, NULL);
    free(k);
}

/* ---- watch -------------------------------------------------------------- */

static void events_free(struct etcd_event *evs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        kv_done(&evs[i].kv);
        kv_done(&evs[i].prev_kv);
    }
    free(evs);
}

/* What one watch line said. */
struct watch_msg {
    struct etcd_header header;
    bool created;
    bool canceled;
    int64_t compact_revision;
    const char *cancel_reason; /* borrowed from the tree */
    struct etcd_event *events; /* owned */
    size_t nevents;
    bool is_error;  /* {"error": {...}} line */
    int error_code; /* mapped code for is_error */
};

static void watch_msg_done(struct watch_msg *m)
{
    events_free(m->events, m->nevents);
    memset(m, 0, sizeof *m);
}

/* Decodes one watch stream line (pure; fuzzed through the unit tests). The
 * tree j must outlive m (cancel_reason is borrowed). */
static int dec_watch_line(const cJSON *j, struct watch_msg *m, struct tern_err *err)
{
    memset(m, 0, sizeof *m);
    const cJSON *res = json_get(j, "result");
    if (!cJSON_IsObject(res)) {
        const cJSON *e = json_get(j, "error");
        if (!e)
            return err_set(err, TERN_EPARSE, "watch: line has neither result nor error");
        bool un;
        m->is_error = true;
        m->error_code = map_error(500, cJSON_IsObject(e) ? e : j, &un, err);
        return 0;
    }
    int r = dec_header(res, &m->header, err);
    if (!r)
        r = dec_bool(res, "result", "created", &m->created, err);
    if (!r)
        r = dec_bool(res, "result", "canceled", &m->canceled, err);
    if (!r)
        r = dec_i64(res, "result", "compact_revision", &m->compact_revision, err);
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
        watch_msg_done(m);
    return r;
}

struct watch_state {
    etcd_watch_fn fn;
    void *ctx;
    int64_t next_rev; /* first revision not yet delivered */
    int64_t compact_rev;
    bool created; /* this stream was created */
    int stop;     /* why on_line stopped the stream */
    struct tern_err *err;
};

#define WATCH_STOP_CALLER 1 /* fn returned non-zero (value in user_rc) */

static int watch_on_line(void *ctx, const char *line, size_t len)
{
    struct watch_state *st = ctx;
    cJSON *j = NULL;
    struct watch_msg m = {0};
    int r = 0;
    while (len && (line[len - 1] == ' ' || line[len - 1] == '\r'))
        len--;
    if (len == 0)
        return 0;
    if (json_parse(line, len, &j, st->err)) {
        r = err_wrap(st->err, TERN_EPARSE, "watch line");
        goto out;
    }
    r = dec_watch_line(j, &m, st->err);
    if (r)
        goto out;
    if (m.is_error) {
        r = m.error_code;
        goto out;
    }
    if (m.canceled) {
        if (m.compact_revision > 0) {
            st->compact_rev = m.compact_revision;
            r = err_set(st->err, TERN_ECOMPACTED,
                        "watch: revision %lld compacted (oldest available %lld)",
                        (long long)st->next_rev, (long long)m.compact_revision);
        } else {
            r = err_set(st->err, TERN_EINVALID, "watch canceled by etcd: %s",
                        m.cancel_reason ? m.cancel_reason : "no reason given");
        }
        goto out;
    }
    if (m.created) {
        st->created = true;
        goto out;
    }
    /* drop what a previous stream already delivered */
    size_t first = 0;
    while (first < m.nevents && m.events[first].kv.mod_revision < st->next_rev)
        first++;
    struct etcd_watch_batch b = {.header = m.header};
    if (m.nevents == 0) {
        b.progress = true;
    } else if (first == m.nevents) {
        goto out;
    } else {
        b.events = m.events + first;
        b.nevents = m.nevents - first;
    }
    int ur = st->fn(st->ctx, &b);
    if (b.nevents)
        st->next_rev = m.events[m.nevents - 1].kv.mod_revision + 1;
    if (b.progress && m.header.revision + 1 > st->next_rev)
        st->next_rev = m.header.revision + 1;
    if (ur) {
        st->stop = WATCH_STOP_CALLER;
        r = ur;
    }
out:
    watch_msg_done(&m);
    cJSON_Delete(j);
    return r;
}

int etcd_watch(struct etcd *c, const struct etcd_watch_req *req, etcd_watch_fn fn, void *ctx,
               atomic_bool *cancel, int64_t *ret_compact_revision, struct tern_err *err)
{
    struct watch_state st = {.fn = fn, .ctx = ctx, .err = err};
    long give_up = req->give_up_ms ? req->give_up_ms : 30000;
    long backoff = 100;
    long last_good = now_ms();
    int r = 0;
    if (req->start_revision < 0)
        return err_set(err, TERN_EINVALID, "watch: negative start revision");
    if (req->start_revision == 0) {
        /* pin "now" so that a reconnect resumes without a gap */
        int64_t rev;
        r = etcd_revision(c, &rev, err);
        if (r)
            return r;
        st.next_rev = rev + 1;
    } else {
        st.next_rev = req->start_revision;
    }
    for (;;) {
        if (cancelled(cancel))
            return err_set(err, -ECANCELED, "watch: cancelled");
        cJSON *cr = cJSON_CreateObject();
        cJSON *q = cJSON_AddObjectToObject(cr, "create_request");
        r = add_keys(q, &req->keys, err);
        if (r) {
            cJSON_Delete(cr);
            return r;
        }
        add_i64s(q, "start_revision", st.next_rev);
        if (req->progress_notify)
            cJSON_AddTrueToObject(q, "progress_notify");
        if (req->prev_kv)
            cJSON_AddTrueToObject(q, "prev_kv");
        if (req->no_put || req->no_delete) {
            cJSON *f = cJSON_AddArrayToObject(q, "filters");
            if (req->no_put)
                cJSON_AddItemToArray(f, cJSON_CreateString("NOPUT"));
            if (req->no_delete)
                cJSON_AddItemToArray(f, cJSON_CreateString("NODELETE"));
        }
        char *body = json_print(cr);
        cJSON_Delete(cr);

        size_t idx = atomic_load(&c->cur) % c->neps;
        struct httpc *h = conn_get(c);
        char *url = NULL, *auth = NULL;
        struct httpc_response resp = {0};
        if (need_token(c)) {
            r = authenticate(c, h, c->eps[idx], cancel, err);
            if (r)
                goto stream_done;
        }
        url = xasprintf("%s/v3/watch", c->eps[idx]);
        auth = auth_header(c);
        const char *hdrs[] = {"Content-Type: application/json", auth, NULL};
        struct httpc_request hr = {
            .method = "POST",
            .url = url,
            .headers = hdrs,
            .body = body,
            .body_len = strlen(body),
            .connect_timeout_ms = c->connect_timeout_ms,
            .idle_timeout_ms = req->idle_timeout_ms,
            .tls = c->has_tls ? &c->tls : NULL,
            .on_line = watch_on_line,
            .ctx = &st,
            .max_line = TERN_HTTP_MAX_LINE,
            .cancel = cancel,
        };
        st.created = false;
        st.stop = 0;
        r = httpc_do(h, &hr, &resp, err);
        if (r == 0 && resp.status != 200) {
            cJSON *ej = NULL;
            bool un;
            json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &ej, NULL);
            r = map_error(resp.status, ej, &un, err);
            cJSON_Delete(ej);
        } else if (r == 0) {
            r = err_set(err, TERN_EUNREACHABLE, "watch: stream ended");
        }
    stream_done:
        free(body);
        free(url);
        free(auth);
        httpc_response_done(&resp);
        conn_put(c, h, true);
        if (st.stop == WATCH_STOP_CALLER)
            return r;
        if (r == -ECANCELED || cancelled(cancel))
            return err_set(err, -ECANCELED, "watch: cancelled");
        if (r == TERN_ECOMPACTED) {
            if (ret_compact_revision)
                *ret_compact_revision = st.compact_rev;
            return r;
        }
        if (r == TERN_EAUTH && c->user) {
            pthread_mutex_lock(&c->mu);
            free(c->token);
            c->token = NULL;
            pthread_mutex_unlock(&c->mu);
        } else if (r == TERN_EINVALID || r == TERN_EPARSE || r == TERN_ETOOLARGE) {
            return r;
        }
        if (st.created) {
            last_good = now_ms();
            backoff = 100;
        } else {
            /* this endpoint did not give us a stream: try the next one */
            size_t exp = idx;
            atomic_compare_exchange_strong(&c->cur, &exp, (idx + 1) % c->neps);
        }
        if (give_up >= 0 && now_ms() - last_good >= give_up)
            return r;
        if (sleep_cancellable(backoff, cancel))
            return err_set(err, -ECANCELED, "watch: cancelled");
        backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
    }
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
        r = dec_range(j, &x, err);
        if (!r)
            etcd_range_resp_done(&x);
        break;
    }
    case ETCD_REPLY_PUT: {
        struct etcd_put_resp x;
        r = dec_put(j, &x, err);
        if (!r)
            etcd_put_resp_done(&x);
        break;
    }
    case ETCD_REPLY_DELETE: {
        struct etcd_delete_resp x;
        r = dec_delete(j, &x, err);
        if (!r)
            etcd_delete_resp_done(&x);
        break;
    }
    case ETCD_REPLY_TXN: {
        struct etcd_txn_resp x;
        r = dec_txn(j, &x, err);
        if (!r)
            etcd_txn_resp_done(&x);
        break;
    }
    case ETCD_REPLY_WATCH_LINE: {
        struct watch_msg m;
        r = dec_watch_line(j, &m, err);
        if (!r) {
            if (m.is_error)
                r = m.error_code;
            watch_msg_done(&m);
        }
        break;
    }
    case ETCD_REPLY_ERROR: {
        bool un;
        map_error(400, j, &un, err);
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
