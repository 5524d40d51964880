/* lock.c - the turn lock: /tern/v1/s/<uid>/lock, created if absent and
 * bound to a lease that a keeper thread refreshes until release.
 */
#include "journal_internal.h"

#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

struct journal_lock {
    struct etcd *c;
    int64_t lease;
    struct etcd_keeper *keeper;
};

int journal_lock_acquire(struct etcd *c, const char *uid, const char *owner, int64_t ttl_s,
                         struct journal_lock **ret, struct tern_err *err)
{
    char *p = journal_prefix(uid);
    if (!p || !owner || !*owner || strlen(owner) > 253 || ttl_s <= 0) {
        free(p);
        return err_set(err, TERN_EINVALID, "journal lock: bad uid, owner or ttl");
    }
    char *key = xasprintf("%slock", p);
    free(p);
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "owner", owner);
    char *t = journal__now_time();
    json_add_string(o, "acquiredAt", t);
    free(t);
    char *val = json_print(o);
    cJSON_Delete(o);
    int64_t lease = 0;
    struct journal_lock *l = NULL;
    struct etcd_txn_resp tr = {0};
    long deadline = now_ms() + JOURNAL_RETRY_MS;
    int r;
    /* a grant whose answer was lost leaves a lease nobody uses: it expires */
    while ((r = etcd_lease_grant(c, ttl_s, 0, &lease, NULL, err)) &&
           (transient(r) || r == TERN_EUNKNOWN) && now_ms() < deadline)
        sleep_ms(200);
    if (r)
        goto out;
    struct etcd_compare cmp = {.keys = {.key = key}, .target = ETCD_CMP_CREATE, .number = 0};
    struct etcd_op put = {
        .type = ETCD_OP_PUT,
        .put = {.key = key, .value = val, .value_len = strlen(val), .lease = lease}};
    struct etcd_op get = {.type = ETCD_OP_RANGE, .range = {.keys = {.key = key}}};
    /* transient: the txn was not sent, so sending it again is safe */
    while ((r = etcd_txn(c, &(struct etcd_txn_req){&cmp, 1, &put, 1, &get, 1}, &tr, err)) &&
           transient(r) && now_ms() < deadline) {
        etcd_txn_resp_done(&tr);
        sleep_ms(200);
    }
    if (r == TERN_EUNKNOWN) {
        /* did our put land? the lock then carries our lease */
        struct etcd_kv *kv = NULL;
        while ((r = etcd_get(c, key, &kv, NULL, err)) && transient(r) && now_ms() < deadline)
            sleep_ms(200);
        if (r == 0 && kv->lease != lease)
            r = err_set(err, TERN_ECONFLICT, "journal lock: held by %s", kv->value);
        etcd_kv_free(kv);
        if (r == TERN_ENOTFOUND)
            r = err_set(err, TERN_EUNKNOWN, "journal lock: outcome unknown");
    } else if (r == 0 && !tr.succeeded) {
        const char *holder = "another owner";
        cJSON *h = NULL;
        if (tr.nresponses == 1 && tr.responses[0].range.nkvs == 1 &&
            json_parse(tr.responses[0].range.kvs[0].value, tr.responses[0].range.kvs[0].value_len,
                       &h, NULL) == 0 &&
            cJSON_IsString(json_get(h, "owner")))
            holder = json_get(h, "owner")->valuestring;
        r = err_set(err, TERN_ECONFLICT, "journal lock: held by %s", holder);
        cJSON_Delete(h);
    }
    if (r)
        goto out;
    l = xcalloc(1, sizeof *l);
    l->c = c;
    l->lease = lease;
    r = etcd_keeper_start_budget(c, lease, ttl_s, JOURNAL_RETRY_MS, &l->keeper, err);
    if (r)
        goto out;
    *ret = l;
    l = NULL;
    lease = 0;
out:
    if (lease)
        etcd_lease_revoke(c, lease, NULL);
    free(l);
    etcd_txn_resp_done(&tr);
    free(key);
    free(val);
    return r;
}

bool journal_lock_lost(const struct journal_lock *l)
{
    return etcd_keeper_lost(l->keeper);
}

int64_t journal_lock_lease(const struct journal_lock *l)
{
    return l->lease;
}

int journal_lock_release(struct journal_lock *l, struct tern_err *err)
{
    if (!l)
        return 0;
    etcd_keeper_stop(l->keeper);
    int r = etcd_lease_revoke(l->c, l->lease, err);
    if (r == TERN_ENOTFOUND)
        r = 0;
    free(l);
    return r;
}
