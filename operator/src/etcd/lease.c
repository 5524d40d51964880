/* lease.c - leases: grant, revoke, keepalive, time-to-live, and the keeper
 * thread that refreshes a lease every ttl/3 and reports its loss.
 */
#include "etcd_internal.h"

#include "base/mem.h"
#include "json/json.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static int lease_call(struct etcd *c, const char *path, cJSON *q, enum call_kind kind,
                      atomic_bool *cancel, cJSON **ret, struct tern_err *err)
{
    int r = etcd__call_obj(c, path, q, kind, cancel, ret, err);
    cJSON_Delete(q);
    return r;
}

int etcd_lease_grant(struct etcd *c, int64_t ttl_s, int64_t id, int64_t *ret_id, int64_t *ret_ttl,
                     struct tern_err *err)
{
    if (ttl_s <= 0)
        return err_set(err, TERN_EINVALID, "etcd lease grant: ttl must be > 0");
    cJSON *q = cJSON_CreateObject(), *j = NULL;
    etcd__add_i64s(q, "TTL", ttl_s);
    if (id)
        etcd__add_i64s(q, "ID", id);
    int r = lease_call(c, "/v3/lease/grant", q, CALL_WRITE, NULL, &j, err);
    int64_t gid = 0, gttl = 0;
    if (!r && (etcd__dec_i64(j, "", "ID", &gid, err) || etcd__dec_i64(j, "", "TTL", &gttl, err)))
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
    etcd__add_i64s(q, "ID", id);
    /* revoking twice is harmless (the second says "not found") */
    int r = lease_call(c, "/v3/lease/revoke", q, CALL_READ, NULL, &j, err);
    cJSON_Delete(j);
    return r;
}

static int keepalive(struct etcd *c, int64_t id, atomic_bool *cancel, int64_t *ret_ttl,
                     struct tern_err *err)
{
    cJSON *q = cJSON_CreateObject(), *j = NULL;
    etcd__add_i64s(q, "ID", id);
    /* the gateway answers a one-message stream with {"result": {...}} */
    int r = lease_call(c, "/v3/lease/keepalive", q, CALL_READ, cancel, &j, err);
    if (r)
        goto out;
    const cJSON *res = json_get(j, "result");
    if (!cJSON_IsObject(res)) {
        const cJSON *e = json_get(j, "error");
        if (e) {
            bool un;
            r = etcd__map_error(500, e, &un, err);
        } else {
            r = err_set(err, TERN_EPARSE, "etcd lease keepalive: no result");
        }
        goto out;
    }
    int64_t ttl = 0;
    if (etcd__dec_i64(res, "result", "TTL", &ttl, err)) {
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
    etcd__add_i64s(q, "ID", id);
    int r = lease_call(c, "/v3/lease/timetolive", q, CALL_READ, NULL, &j, err);
    int64_t ttl = 0, granted = 0;
    if (!r && (etcd__dec_i64(j, "", "TTL", &ttl, err) ||
               etcd__dec_i64(j, "", "grantedTTL", &granted, err)))
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
    long give_up_ms;
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
        } else if (r == TERN_ENOTFOUND || now_ms() - last_ok >= k->give_up_ms) {
            atomic_store(&k->lost, true);
            break;
        }
        /* after a failure retry sooner */
        if (etcd__sleep_cancellable(r ? period / 4 : period, &k->stop))
            break;
    }
    return NULL;
}

int etcd_keeper_start(struct etcd *c, int64_t lease_id, int64_t ttl_s, struct etcd_keeper **ret,
                      struct tern_err *err)
{
    return etcd_keeper_start_budget(c, lease_id, ttl_s, 0, ret, err);
}

int etcd_keeper_start_budget(struct etcd *c, int64_t lease_id, int64_t ttl_s, long give_up_ms,
                             struct etcd_keeper **ret, struct tern_err *err)
{
    if (ttl_s <= 0)
        return err_set(err, TERN_EINVALID, "etcd keeper: ttl must be > 0");
    struct etcd_keeper *k = xcalloc(1, sizeof *k);
    k->c = c;
    k->id = lease_id;
    k->ttl_s = ttl_s;
    k->give_up_ms = give_up_ms > ttl_s * 1000 ? give_up_ms : (long)ttl_s * 1000;
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
