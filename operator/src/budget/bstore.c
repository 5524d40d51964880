/* bstore.c - team budgets in etcd. See bstore.h and docs/budgets.md. */
#include "budget/bstore.h"

#include "base/limits.h"
#include "base/mem.h"
#include "base/num.h"
#include "journal/journal.h"
#include "json/json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RETRY_MS 30000 /* unreachable etcd, as the journal's budget */

/* ---- keys ------------------------------------------------------------------ */

char *bstore_key_spec(const char *ns, const char *name)
{
    return xasprintf("/tern/v1/bs/%s/%s", ns, name);
}

char *bstore_key_window(const char *ns, const char *name, const char *window)
{
    return xasprintf("/tern/v1/b/%s/%s/w/%s", ns, name, window);
}

char *bstore_key_slots(const char *ns, const char *name)
{
    return xasprintf("/tern/v1/b/%s/%s/slots", ns, name);
}

char *bstore_key_memo(const char *ns, const char *uid)
{
    return xasprintf("/tern/v1/bm/%s/%s", ns, uid);
}

char *bstore_key_res(const char *ns, const char *uid, uint64_t id)
{
    return xasprintf("/tern/v1/br/%s/%s/%016" PRIx64, ns, uid, id);
}

/* ---- small helpers ------------------------------------------------------------ */

static long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)(ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static bool transient(int r)
{
    return r == TERN_EUNREACHABLE || r == TERN_ETIMEOUT;
}

/* A short random pause between compare-and-swap rounds, growing with the
 * round, so racing writers spread out. */
static void backoff(unsigned *seed, int round)
{
    long cap = round < 6 ? 1L << round : 50;
    sleep_ms(1 + (long)(rand_r(seed) % (unsigned)cap));
}

static unsigned seed_of(const void *p)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec ^ (unsigned)(uintptr_t)p;
}

struct kv {
    char *v;
    size_t len;
    int64_t mod;
    bool exists;
};

static void kvs_done(struct kv *k, size_t n)
{
    for (size_t i = 0; k && i < n; i++)
        free(k[i].v);
    memset(k, 0, n * sizeof *k);
}

/* Reads keys at one revision (a txn of ranges), retrying unreachable etcd. */
static int read_keys(struct etcd *c, char *const *keys, size_t n, struct kv *out,
                     struct tern_err *err)
{
    struct etcd_op *ops = xcalloc(n, sizeof *ops);
    for (size_t i = 0; i < n; i++) {
        ops[i].type = ETCD_OP_RANGE;
        ops[i].range.keys.key = keys[i];
    }
    struct etcd_txn_req req = {.success = ops, .nsuccess = n};
    long deadline = mono_ms() + RETRY_MS;
    int r;
    for (;;) {
        struct etcd_txn_resp tr = {0};
        r = etcd_txn(c, &req, &tr, err);
        if (r == 0) {
            for (size_t i = 0; i < n && i < tr.nresponses; i++) {
                const struct etcd_range_resp *rr = &tr.responses[i].range;
                out[i] = (struct kv){0};
                if (rr->nkvs > 0) {
                    out[i].exists = true;
                    out[i].mod = rr->kvs[0].mod_revision;
                    out[i].len = rr->kvs[0].value_len;
                    out[i].v = xmemdup(rr->kvs[0].value, rr->kvs[0].value_len + 1);
                }
            }
            etcd_txn_resp_done(&tr);
            break;
        }
        etcd_txn_resp_done(&tr);
        if (!transient(r) || mono_ms() > deadline)
            break;
        sleep_ms(200);
    }
    free(ops);
    return r;
}

/* Runs a write txn; transient failures before sending are retried.
 * Returns 0 with *ret_ok, TERN_EUNKNOWN (the caller reads back), or an
 * error. */
static int write_txn(struct etcd *c, const struct etcd_txn_req *req, bool *ret_ok,
                     struct tern_err *err)
{
    long deadline = mono_ms() + RETRY_MS;
    for (;;) {
        struct etcd_txn_resp tr = {0};
        int r = etcd_txn(c, req, &tr, err);
        bool ok = tr.succeeded;
        etcd_txn_resp_done(&tr);
        if (r == 0) {
            *ret_ok = ok;
            return 0;
        }
        if (!transient(r) || mono_ms() > deadline)
            return r;
        sleep_ms(200);
    }
}

static struct etcd_compare cmp_mod(const char *key, int64_t mod)
{
    return (struct etcd_compare){.keys = {.key = key}, .target = ETCD_CMP_MOD, .number = mod};
}

static struct etcd_op op_put(const char *key, const char *v)
{
    return (struct etcd_op){.type = ETCD_OP_PUT, .put = {.key = key, .value = v,
                                                         .value_len = strlen(v)}};
}

static struct etcd_op op_del(const char *key)
{
    return (struct etcd_op){.type = ETCD_OP_DELETE, .del = {.keys = {.key = key}}};
}

static int counters_of(const struct kv *k, struct ledger_counters *ret, struct tern_err *err)
{
    memset(ret, 0, sizeof *ret);
    if (!k->exists)
        return 0;
    return ledger_counters_parse(k->v, k->len, ret, err);
}

static int spec_of(const struct kv *k, struct bspec *ret, struct tern_err *err)
{
    cJSON *j = NULL;
    int rc = json_parse(k->v, k->len, &j, err);
    if (rc == 0)
        rc = bspec_parse(j, ret, err);
    cJSON_Delete(j);
    return rc;
}

static char *print_counters(const struct ledger_counters *c)
{
    cJSON *o = ledger_counters_json(c);
    char *s = json_print(o);
    cJSON_Delete(o);
    return s;
}

/* ---- zones ----------------------------------------------------------------------- */

struct bstore_zones {
    char *names[16];
    struct tzwin_zone zones[16];
    size_t n;
};

struct bstore_zones *bstore_zones_new(void)
{
    return xcalloc(1, sizeof(struct bstore_zones));
}

void bstore_zones_free(struct bstore_zones *z)
{
    if (!z)
        return;
    for (size_t i = 0; i < z->n; i++) {
        free(z->names[i]);
        tzwin_zone_done(&z->zones[i]);
    }
    free(z);
}

int bstore_zone(struct bstore_zones *z, const char *name, const struct tzwin_zone **ret,
                struct tern_err *err)
{
    for (size_t i = 0; i < z->n; i++)
        if (strcmp(z->names[i], name) == 0) {
            *ret = &z->zones[i];
            return 0;
        }
    struct tzwin_zone zone;
    int rc = tzwin_load(NULL, name, &zone, err);
    if (rc)
        return rc;
    if (z->n == sizeof z->names / sizeof *z->names) { /* full: drop the oldest */
        free(z->names[0]);
        tzwin_zone_done(&z->zones[0]);
        memmove(z->names, z->names + 1, (z->n - 1) * sizeof *z->names);
        memmove(z->zones, z->zones + 1, (z->n - 1) * sizeof *z->zones);
        z->n--;
    }
    z->names[z->n] = xstrdup(name);
    z->zones[z->n] = zone;
    *ret = &z->zones[z->n++];
    return 0;
}

void bstore_budgets_free(struct bstore_budget *b, size_t n)
{
    for (size_t i = 0; b && i < n; i++)
        bspec_done(&b[i].spec);
    free(b);
}

int bstore_load(struct etcd *c, struct bstore_zones *zones, const char *ns, const cJSON *labels,
                bool all, int64_t now, struct bstore_budget **ret, size_t *ret_n,
                struct tern_err *err)
{
    char *prefix = xasprintf("/tern/v1/bs/%s/", ns);
    struct etcd_range_req req = {.keys = {.key = prefix, .prefix = true},
                                 .limit = TERN_BUDGET_MAX_PER_NS + 1};
    struct etcd_range_resp rr = {0};
    struct bstore_budget *out = NULL;
    size_t n = 0;
    long deadline = mono_ms() + RETRY_MS;
    int rc;
    while ((rc = etcd_range(c, &req, &rr, err)) && transient(rc) && mono_ms() < deadline) {
        etcd_range_resp_done(&rr);
        sleep_ms(200);
    }
    if (rc)
        goto out;
    if (rr.nkvs > TERN_BUDGET_MAX_PER_NS) {
        rc = err_set(err, TERN_ETOOLARGE, "namespace %s has more than %d AgentBudgets", ns,
                     TERN_BUDGET_MAX_PER_NS);
        goto out;
    }
    out = xcalloc(rr.nkvs + 1, sizeof *out);
    for (size_t i = 0; i < rr.nkvs; i++) {
        struct kv k = {.v = rr.kvs[i].value, .len = rr.kvs[i].value_len, .exists = true};
        struct bstore_budget *b = &out[n];
        if ((rc = spec_of(&k, &b->spec, err))) {
            err_wrap(err, rc, "budget mirror %s", rr.kvs[i].key);
            goto out;
        }
        n++;
        if (!all && !bspec_matches(&b->spec, labels)) {
            bspec_done(&b->spec);
            n--;
            continue;
        }
        b->rev = rr.kvs[i].mod_revision;
        const struct tzwin_zone *z = NULL;
        if ((rc = bstore_zone(zones, b->spec.time_zone, &z, err)) ||
            (rc = tzwin_window(z, b->spec.period, now, &b->win))) {
            if (rc == -ERANGE)
                err_set(err, TERN_EINVALID, "AgentBudget %s/%s: the time is out of range", ns,
                        b->spec.name);
            else
                err_wrap(err, rc, "AgentBudget %s/%s", ns, b->spec.name);
            rc = TERN_EINVALID;
            goto out;
        }
    }
    *ret = out;
    *ret_n = n;
    out = NULL;
    n = 0;
out:
    bstore_budgets_free(out, n);
    etcd_range_resp_done(&rr);
    free(prefix);
    return rc;
}

/* ---- mirrors ---------------------------------------------------------------------- */

int bstore_put_mirror(struct etcd *c, const struct bspec *b, bool *ret_changed,
                      struct tern_err *err)
{
    char *key = bstore_key_spec(b->ns, b->name);
    cJSON *m = bspec_mirror(b);
    char *v = json_print(m);
    cJSON_Delete(m);
    struct kv cur = {0};
    int rc = read_keys(c, &key, 1, &cur, err);
    bool same = rc == 0 && cur.exists && cur.len == strlen(v) && memcmp(cur.v, v, cur.len) == 0;
    if (rc == 0 && !same) {
        struct etcd_put_req put = {.key = key, .value = v, .value_len = strlen(v)};
        struct etcd_put_resp pr = {0};
        rc = etcd_put(c, &put, &pr, err);
        etcd_put_resp_done(&pr);
    }
    if (rc == 0 && ret_changed)
        *ret_changed = !same;
    kvs_done(&cur, 1);
    free(v);
    free(key);
    return rc;
}

static int delete_range(struct etcd *c, const char *key, bool prefix, struct tern_err *err)
{
    struct etcd_delete_req d = {.keys = {.key = key, .prefix = prefix}};
    struct etcd_delete_resp dr = {0};
    int rc = etcd_delete(c, &d, &dr, err);
    etcd_delete_resp_done(&dr);
    return rc;
}

int bstore_delete_budget(struct etcd *c, const char *ns, const char *name, struct tern_err *err)
{
    char *spec = bstore_key_spec(ns, name);
    char *prefix = xasprintf("/tern/v1/b/%s/%s/", ns, name);
    int rc = delete_range(c, spec, false, err);
    if (rc == 0)
        rc = delete_range(c, prefix, true, err);
    free(spec);
    free(prefix);
    return rc;
}

int bstore_list_mirrors(struct etcd *c, char ***ret, size_t *ret_n, struct tern_err *err)
{
    static const char prefix[] = "/tern/v1/bs/";
    struct etcd_range_req req = {.keys = {.key = prefix, .prefix = true}, .keys_only = true};
    struct etcd_range_resp rr = {0};
    int rc = etcd_range(c, &req, &rr, err);
    if (rc) {
        etcd_range_resp_done(&rr);
        return rc;
    }
    char **out = xcalloc(rr.nkvs + 1, sizeof *out);
    size_t n = 0;
    for (size_t i = 0; i < rr.nkvs; i++)
        if (rr.kvs[i].key_len > sizeof prefix - 1)
            out[n++] = xstrdup(rr.kvs[i].key + sizeof prefix - 1);
    etcd_range_resp_done(&rr);
    *ret = out;
    *ret_n = n;
    return 0;
}

int bstore_gc_windows(struct etcd *c, const char *ns, const char *name, const char *keep_a,
                      const char *keep_b, struct tern_err *err)
{
    char *prefix = xasprintf("/tern/v1/b/%s/%s/w/", ns, name);
    struct etcd_range_req req = {.keys = {.key = prefix, .prefix = true}, .keys_only = true,
                                 .limit = 1000};
    struct etcd_range_resp rr = {0};
    int rc = etcd_range(c, &req, &rr, err);
    size_t plen = strlen(prefix);
    for (size_t i = 0; rc == 0 && i < rr.nkvs; i++) {
        const char *w = rr.kvs[i].key + plen;
        if ((keep_a && strcmp(w, keep_a) == 0) || (keep_b && strcmp(w, keep_b) == 0))
            continue;
        rc = delete_range(c, rr.kvs[i].key, false, err);
    }
    etcd_range_resp_done(&rr);
    free(prefix);
    return rc;
}

void bstore_usage_done(struct bstore_usage *u)
{
    if (u)
        ledger_slots_done(&u->slots);
}

int bstore_usage(struct etcd *c, const struct bstore_budget *b, struct bstore_usage *ret,
                 struct tern_err *err)
{
    char *keys[2] = {bstore_key_window(b->spec.ns, b->spec.name, b->win.key),
                     bstore_key_slots(b->spec.ns, b->spec.name)};
    struct kv k[2] = {{0}};
    struct bstore_usage u = {0};
    int rc = read_keys(c, keys, 2, k, err);
    if (rc == 0)
        rc = counters_of(&k[0], &u.win, err);
    if (rc == 0 && k[1].exists)
        rc = ledger_slots_parse(k[1].v, k[1].len, &u.slots, err);
    if (rc == 0)
        *ret = u;
    else
        bstore_usage_done(&u);
    kvs_done(k, 2);
    free(keys[0]);
    free(keys[1]);
    return rc;
}

int bstore_prune_slots(struct etcd *c, const char *ns, const char *name,
                       bool (*keep)(void *ctx, const char *uid), void *ctx, size_t *ret_n,
                       struct tern_err *err)
{
    char *key = bstore_key_slots(ns, name);
    unsigned seed = seed_of(key);
    int rc = 0;
    size_t removed = 0;
    for (int round = 0; round < TERN_BUDGET_TXN_ATTEMPTS; round++) {
        struct kv k = {0};
        struct ledger_slots s = {0};
        removed = 0;
        if ((rc = read_keys(c, &key, 1, &k, err)) ||
            (k.exists && (rc = ledger_slots_parse(k.v, k.len, &s, err)))) {
            kvs_done(&k, 1);
            break;
        }
        for (size_t i = s.n; i-- > 0;)
            if (!keep(ctx, s.uids[i])) {
                ledger_slots_remove(&s, s.uids[i]);
                removed++;
            }
        bool ok = true;
        if (removed) {
            cJSON *j = ledger_slots_json(&s);
            char *v = json_print(j);
            cJSON_Delete(j);
            struct etcd_compare cmp = cmp_mod(key, k.mod);
            struct etcd_op put = op_put(key, v);
            rc = write_txn(c, &(struct etcd_txn_req){&cmp, 1, &put, 1, NULL, 0}, &ok, err);
            free(v);
            if (rc == TERN_EUNKNOWN)
                ok = false, rc = 0; /* read again: it either landed or not */
        }
        ledger_slots_done(&s);
        kvs_done(&k, 1);
        if (rc || ok)
            break;
        backoff(&seed, round);
        rc = err_set(err, TERN_ECONFLICT, "budget ledger %s: still contended", key);
    }
    free(key);
    if (rc == 0 && ret_n)
        *ret_n = removed;
    return rc;
}

/* ---- reservations ------------------------------------------------------------------- */

int bstore_reserve(struct etcd *c, const char *ns, const char *uid,
                   const struct ledger_reservation *r, const struct bstore_budget *b,
                   bool *ret_refused, struct ledger_refusal *ret_refusal, size_t *ret_which,
                   struct tern_err *err)
{
    size_t n = r->nrefs, nk = 1 + 2 * n;
    char **keys = xcalloc(nk, sizeof *keys);
    struct kv *k = xcalloc(nk, sizeof *k);
    char **vals = xcalloc(n + 1, sizeof *vals);
    struct etcd_compare *cmps = xcalloc(nk, sizeof *cmps);
    struct etcd_op *ops = xcalloc(n + 1, sizeof *ops);
    keys[0] = bstore_key_res(ns, uid, r->id);
    for (size_t i = 0; i < n; i++) {
        keys[1 + 2 * i] = bstore_key_spec(ns, r->refs[i].name);
        keys[2 + 2 * i] = bstore_key_window(ns, r->refs[i].name, r->refs[i].window);
    }
    cJSON *rj = ledger_reservation_json(r, uid);
    char *record = json_print(rj);
    cJSON_Delete(rj);
    unsigned seed = seed_of(record);
    int rc = 0;
    for (int round = 0;; round++) {
        if (round >= TERN_BUDGET_TXN_ATTEMPTS) {
            rc = err_set(err, TERN_ECONFLICT, "budget counters of %s still contended after %d "
                         "rounds", r->nrefs ? r->refs[0].name : "?", round);
            break;
        }
        if (round > 0)
            backoff(&seed, round);
        kvs_done(k, nk);
        for (size_t i = 0; i < n; i++) {
            free(vals[i]);
            vals[i] = NULL;
        }
        if ((rc = read_keys(c, keys, nk, k, err)))
            break;
        if (k[0].exists) { /* an earlier attempt of ours landed */
            *ret_refused = false;
            break;
        }
        size_t nc = 0, no = 0;
        bool refused = false, retry = false;
        cmps[nc++] = (struct etcd_compare){.keys = {.key = keys[0]}, .target = ETCD_CMP_CREATE};
        for (size_t i = 0; i < n && !refused; i++) {
            struct kv *sk = &k[1 + 2 * i], *ck = &k[2 + 2 * i];
            cmps[nc++] = cmp_mod(keys[1 + 2 * i], sk->mod);
            if (!sk->exists)
                continue; /* deleted: no longer applies */
            struct bspec spec;
            struct ledger_counters cnt;
            if ((rc = spec_of(sk, &spec, err)))
                goto out;
            if ((rc = counters_of(ck, &cnt, err))) {
                bspec_done(&spec);
                goto out;
            }
            if (cnt.start == 0 && strcmp(b[i].win.key, r->refs[i].window) == 0) {
                cnt.start = b[i].win.start;
                cnt.end = b[i].win.end;
            }
            struct ledger_refusal why;
            if (!ledger_fits(&spec, &cnt, &r->amount, &why)) {
                /* turned away: count it, unless the counters moved meanwhile
                 * (then look again: it may fit now) */
                cnt.refused++;
                char *v = print_counters(&cnt);
                struct etcd_compare cc = cmp_mod(keys[2 + 2 * i], ck->mod);
                struct etcd_op put = op_put(keys[2 + 2 * i], v);
                bool ok = false;
                rc = write_txn(c, &(struct etcd_txn_req){&cc, 1, &put, 1, NULL, 0}, &ok, err);
                free(v);
                bspec_done(&spec);
                if (rc == TERN_EUNKNOWN)
                    rc = 0, ok = true; /* the count may be one short: the refusal stands */
                if (rc)
                    goto out;
                if (!ok) {
                    retry = true;
                    break;
                }
                refused = true;
                *ret_refused = true;
                if (ret_refusal)
                    *ret_refusal = why;
                if (ret_which)
                    *ret_which = i;
                break;
            }
            bspec_done(&spec);
            ledger_reserve(&cnt, &r->amount);
            cmps[nc++] = cmp_mod(keys[2 + 2 * i], ck->mod);
            vals[i] = print_counters(&cnt);
            ops[no++] = op_put(keys[2 + 2 * i], vals[i]);
        }
        if (refused)
            break;
        if (retry)
            continue;
        ops[no++] = op_put(keys[0], record);
        bool ok = false;
        rc = write_txn(c, &(struct etcd_txn_req){cmps, nc, ops, no, NULL, 0}, &ok, err);
        if (rc == TERN_EUNKNOWN)
            continue; /* read back: the record says whether it landed */
        if (rc)
            break;
        if (ok) {
            *ret_refused = false;
            break;
        }
    }
out:
    kvs_done(k, nk);
    for (size_t i = 0; i < nk; i++)
        free(keys[i]);
    for (size_t i = 0; i < n; i++)
        free(vals[i]);
    free(keys);
    free(k);
    free(vals);
    free(cmps);
    free(ops);
    free(record);
    return rc;
}

static int parse_record(const struct kv *k, uint64_t id, struct ledger_reservation *ret,
                        struct tern_err *err)
{
    cJSON *j = NULL;
    int rc = json_parse(k->v, k->len, &j, err);
    if (rc == 0)
        rc = ledger_reservation_parse(j, id, ret, err);
    cJSON_Delete(j);
    return rc;
}

int bstore_settle(struct etcd *c, const char *ns, const char *uid, uint64_t id,
                  const struct ledger_amount *used, bool *ret_settled, struct tern_err *err)
{
    char *rkey = bstore_key_res(ns, uid, id);
    unsigned seed = seed_of(rkey);
    int rc = 0;
    bool settled = false;
    for (int round = 0;; round++) {
        if (round >= TERN_BUDGET_TXN_ATTEMPTS) {
            rc = err_set(err, TERN_ECONFLICT, "settling budget reservation %s: still contended",
                         rkey);
            break;
        }
        if (round > 0)
            backoff(&seed, round);
        struct kv rk = {0};
        struct ledger_reservation res = {0};
        if ((rc = read_keys(c, &rkey, 1, &rk, err)))
            break;
        if (!rk.exists) { /* settled before (by us, with a lost reply, or a resolver) */
            kvs_done(&rk, 1);
            settled = round > 0;
            break;
        }
        if ((rc = parse_record(&rk, id, &res, err))) {
            kvs_done(&rk, 1);
            break;
        }
        kvs_done(&rk, 1);
        size_t n = res.nrefs, nk = n + 1;
        char **keys = xcalloc(nk, sizeof *keys);
        struct kv *k = xcalloc(nk, sizeof *k);
        char **vals = xcalloc(n + 1, sizeof *vals);
        struct etcd_compare *cmps = xcalloc(nk, sizeof *cmps);
        struct etcd_op *ops = xcalloc(nk, sizeof *ops);
        size_t nc = 0, no = 0;
        keys[0] = xstrdup(rkey);
        for (size_t i = 0; i < n; i++)
            keys[1 + i] = bstore_key_window(ns, res.refs[i].name, res.refs[i].window);
        bool ok = false;
        if ((rc = read_keys(c, keys, nk, k, err)) == 0 && k[0].exists) {
            cmps[nc++] = cmp_mod(keys[0], k[0].mod);
            for (size_t i = 0; i < n && rc == 0; i++) {
                struct ledger_counters cnt;
                cmps[nc++] = cmp_mod(keys[1 + i], k[1 + i].mod);
                if (!k[1 + i].exists)
                    continue; /* the budget or its window is gone */
                if ((rc = counters_of(&k[1 + i], &cnt, err)))
                    break;
                ledger_settle(&cnt, &res.amount, used);
                vals[i] = print_counters(&cnt);
                ops[no++] = op_put(keys[1 + i], vals[i]);
            }
            ops[no++] = op_del(keys[0]);
            if (rc == 0)
                rc = write_txn(c, &(struct etcd_txn_req){cmps, nc, ops, no, NULL, 0}, &ok, err);
            if (rc == TERN_EUNKNOWN)
                rc = 0; /* read the record again */
        }
        for (size_t i = 0; i < nk; i++)
            free(keys[i]);
        for (size_t i = 0; i < n; i++)
            free(vals[i]);
        kvs_done(k, nk);
        free(keys);
        free(k);
        free(vals);
        free(cmps);
        free(ops);
        ledger_reservation_done(&res);
        if (rc)
            break;
        if (ok) {
            settled = true;
            break;
        }
    }
    if (rc == 0 && ret_settled)
        *ret_settled = settled;
    free(rkey);
    return rc;
}

int bstore_open_reservations(struct etcd *c, const char *ns, const char *uid, uint64_t **ret,
                             size_t *ret_n, struct tern_err *err)
{
    char *prefix = xasprintf("/tern/v1/br/%s/%s/", ns, uid);
    struct etcd_range_req req = {.keys = {.key = prefix, .prefix = true}, .keys_only = true,
                                 .limit = 1000};
    struct etcd_range_resp rr = {0};
    int rc = etcd_range(c, &req, &rr, err);
    if (rc == 0) {
        uint64_t *ids = xcalloc(rr.nkvs + 1, sizeof *ids);
        size_t n = 0, plen = strlen(prefix);
        for (size_t i = 0; i < rr.nkvs; i++) {
            uint64_t id;
            if (rr.kvs[i].key_len == plen + 16 &&
                num_parse_hex64(rr.kvs[i].key + plen, 16, &id) == 0)
                ids[n++] = id;
        }
        *ret = ids;
        *ret_n = n;
    }
    etcd_range_resp_done(&rr);
    free(prefix);
    return rc;
}

struct resolve_ctx {
    struct ledger_track t;
    uint64_t first;
    bool ours; /* the event at `first` is this reservation's budget_reserved */
};

static int resolve_event(void *ctx, const struct journal_event *ev)
{
    struct resolve_ctx *rc = ctx;
    ledger_track_apply(&rc->t, ev->type_name, ev->seq, ev->data);
    if (ev->seq == rc->first)
        rc->ours = rc->t.state == LEDGER_OPEN && rc->t.res.id == rc->first;
    if (!rc->ours || rc->t.state != LEDGER_OPEN)
        return 1; /* decided */
    return 0;
}

int bstore_resolve(struct etcd *c, struct journal *j, const char *ns, const char *uid,
                   size_t *ret_n, struct tern_err *err)
{
    uint64_t *ids = NULL;
    size_t n = 0, done = 0;
    int rc = bstore_open_reservations(c, ns, uid, &ids, &n, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct resolve_ctx x = {.first = ids[i]};
        ledger_track_init(&x.t, uid);
        int r = journal_replay(j, ids[i], resolve_event, &x, NULL, err);
        if (r < 0 && r != TERN_ECOMPACTED && r != TERN_EINVALID) {
            ledger_track_done(&x.t);
            rc = r;
            break;
        }
        bool use = x.ours && x.t.state == LEDGER_USED;
        bool settled = false;
        rc = bstore_settle(c, ns, uid, ids[i], use ? &x.t.used : NULL, &settled, err);
        done += settled;
        ledger_track_done(&x.t);
    }
    free(ids);
    if (rc == 0 && ret_n)
        *ret_n = done;
    return rc;
}

/* ---- admission ------------------------------------------------------------------------ */

/* The memo {"started": [names]} */
static int memo_parse(const struct kv *k, char ***ret, size_t *ret_n, struct tern_err *err)
{
    *ret = NULL;
    *ret_n = 0;
    if (!k->exists)
        return 0;
    cJSON *j = NULL;
    const cJSON *arr = NULL;
    int rc = json_parse(k->v, k->len, &j, err);
    if (rc == 0)
        rc = json_get_array(j, "memo", "started", JSON_OPTIONAL, &arr, err);
    size_t n = (size_t)cJSON_GetArraySize(arr);
    if (rc == 0 && n > 4 * TERN_BUDGET_MAX_PER_NS)
        rc = err_set(err, TERN_ETOOLARGE, "budget memo: too many entries");
    if (rc == 0) {
        char **v = xcalloc(n + 1, sizeof *v);
        size_t m = 0;
        for (const cJSON *it = arr ? arr->child : NULL; it; it = it->next)
            if (cJSON_IsString(it))
                v[m++] = xstrdup(it->valuestring);
        *ret = v;
        *ret_n = m;
    }
    cJSON_Delete(j);
    return rc;
}

static bool in_list(char *const *v, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], s) == 0)
            return true;
    return false;
}

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

int bstore_admit(struct etcd *c, const char *ns, const char *uid, const char *name,
                 const struct bstore_budget *b, size_t n, struct bstore_waiters *waiters,
                 bool force, struct bstore_admission *ret, struct tern_err *err)
{
    /* keys: memo, then per budget: mirror, ledger, window counters */
    size_t nk = 1 + 3 * n;
    char **keys = xcalloc(nk, sizeof *keys);
    struct kv *k = xcalloc(nk, sizeof *k);
    char **vals = xcalloc(nk, sizeof *vals);
    struct etcd_compare *cmps = xcalloc(nk, sizeof *cmps);
    struct etcd_op *ops = xcalloc(nk, sizeof *ops);
    keys[0] = bstore_key_memo(ns, uid);
    for (size_t i = 0; i < n; i++) {
        keys[1 + 3 * i] = bstore_key_spec(ns, b[i].spec.name);
        keys[2 + 3 * i] = bstore_key_slots(ns, b[i].spec.name);
        keys[3 + 3 * i] = bstore_key_window(ns, b[i].spec.name, b[i].win.key);
    }
    unsigned seed = seed_of(keys);
    int rc = 0;
    struct bstore_admission adm = {.admitted = true};
    for (int round = 0;; round++) {
        if (round >= TERN_BUDGET_TXN_ATTEMPTS) {
            rc = err_set(err, TERN_ECONFLICT, "budget ledgers of %s/%s still contended", ns, name);
            break;
        }
        if (round > 0)
            backoff(&seed, round);
        kvs_done(k, nk);
        for (size_t i = 0; i < nk; i++) {
            free(vals[i]);
            vals[i] = NULL;
        }
        if ((rc = read_keys(c, keys, nk, k, err)))
            break;
        char **started = NULL;
        size_t nstarted = 0;
        if ((rc = memo_parse(&k[0], &started, &nstarted, err)))
            break;
        size_t nc = 0, no = 0;
        bool memo_changed = false;
        adm = (struct bstore_admission){.admitted = true};
        cmps[nc++] = cmp_mod(keys[0], k[0].mod);
        for (size_t i = 0; i < n && rc == 0 && adm.admitted; i++) {
            struct kv *sk = &k[1 + 3 * i], *lk = &k[2 + 3 * i], *wk = &k[3 + 3 * i];
            cmps[nc++] = cmp_mod(keys[1 + 3 * i], sk->mod);
            if (!sk->exists)
                continue;
            struct bspec spec;
            struct ledger_slots slots = {0};
            struct ledger_counters cnt;
            if ((rc = spec_of(sk, &spec, err)))
                break;
            if ((lk->exists && (rc = ledger_slots_parse(lk->v, lk->len, &slots, err))) ||
                (rc = counters_of(wk, &cnt, err))) {
                bspec_done(&spec);
                ledger_slots_done(&slots);
                break;
            }
            size_t waiting = 0, pos = 0;
            if (!force && waiters)
                pos = ledger_queue_position(waiters[i].w, waiters[i].n, &slots, uid, &waiting);
            if (pos == 0)
                pos = ++waiting; /* not listed yet: at the end */
            if (bspec_limited(&spec, BSPEC_CONCURRENT) && !ledger_slots_has(&slots, uid)) {
                int64_t lim = spec.limit[BSPEC_CONCURRENT], holders = (int64_t)slots.n;
                if (!force && (int64_t)pos > lim - holders) {
                    adm = (struct bstore_admission){false, i, BSPEC_CONCURRENT, holders, lim, pos,
                                                    waiting};
                } else if ((rc = ledger_slots_add(&slots, uid, name)) == 0) {
                    cJSON *sj = ledger_slots_json(&slots);
                    vals[2 + 3 * i] = json_print(sj);
                    cJSON_Delete(sj);
                    cmps[nc++] = cmp_mod(keys[2 + 3 * i], lk->mod);
                    ops[no++] = op_put(keys[2 + 3 * i], vals[2 + 3 * i]);
                } else {
                    err_set(err, rc, "AgentBudget %s/%s: more than %d sessions hold slots", ns,
                            spec.name, TERN_BUDGET_MAX_HOLDERS);
                }
            }
            if (rc == 0 && adm.admitted && !force && bspec_limited(&spec, BSPEC_STARTED) &&
                !in_list(started, nstarted, spec.name)) {
                int64_t lim = spec.limit[BSPEC_STARTED];
                if ((int64_t)pos > lim - cnt.started) {
                    adm = (struct bstore_admission){false, i, BSPEC_STARTED, cnt.started, lim,
                                                    pos, waiting};
                } else {
                    cnt.started++;
                    if (cnt.start == 0) {
                        cnt.start = b[i].win.start;
                        cnt.end = b[i].win.end;
                    }
                    vals[3 + 3 * i] = print_counters(&cnt);
                    cmps[nc++] = cmp_mod(keys[3 + 3 * i], wk->mod);
                    ops[no++] = op_put(keys[3 + 3 * i], vals[3 + 3 * i]);
                    started = xreallocarray(started, nstarted + 1, sizeof *started);
                    started[nstarted++] = xstrdup(spec.name);
                    memo_changed = true;
                }
            }
            bspec_done(&spec);
            ledger_slots_done(&slots);
        }
        if (rc == 0 && adm.admitted && memo_changed) {
            cJSON *m = cJSON_CreateObject();
            cJSON *arr = cJSON_AddArrayToObject(m, "started");
            for (size_t i = 0; i < nstarted; i++)
                cJSON_AddItemToArray(arr, cJSON_CreateString(started[i]));
            vals[0] = json_print(m);
            cJSON_Delete(m);
            ops[no++] = op_put(keys[0], vals[0]);
        }
        free_list(started, nstarted);
        if (rc || !adm.admitted || no == 0)
            break; /* refused, failed, or nothing to write */
        bool ok = false;
        rc = write_txn(c, &(struct etcd_txn_req){cmps, nc, ops, no, NULL, 0}, &ok, err);
        if (rc == TERN_EUNKNOWN) {
            rc = 0; /* read again: a landed admission finds nothing left to do */
            continue;
        }
        if (rc || ok)
            break;
    }
    if (rc == 0)
        *ret = adm;
    kvs_done(k, nk);
    for (size_t i = 0; i < nk; i++) {
        free(keys[i]);
        free(vals[i]);
    }
    free(keys);
    free(k);
    free(vals);
    free(cmps);
    free(ops);
    return rc;
}

int bstore_holds(struct etcd *c, const char *ns, const char *name, const char *uid, bool *ret,
                 struct tern_err *err)
{
    char *key = bstore_key_slots(ns, name);
    struct kv k = {0};
    struct ledger_slots s = {0};
    int rc = read_keys(c, &key, 1, &k, err);
    if (rc == 0 && k.exists)
        rc = ledger_slots_parse(k.v, k.len, &s, err);
    if (rc == 0)
        *ret = ledger_slots_has(&s, uid);
    ledger_slots_done(&s);
    kvs_done(&k, 1);
    free(key);
    return rc;
}

static int leave(struct etcd *c, const char *ns, const char *uid, const char *const *names,
                 size_t n, bool drop_memo, size_t *ret_removed, struct tern_err *err)
{
    size_t removed = 0;
    size_t nk = n + 1;
    char **keys = xcalloc(nk, sizeof *keys);
    struct kv *k = xcalloc(nk, sizeof *k);
    char **vals = xcalloc(nk, sizeof *vals);
    struct etcd_compare *cmps = xcalloc(nk, sizeof *cmps);
    struct etcd_op *ops = xcalloc(nk, sizeof *ops);
    keys[0] = bstore_key_memo(ns, uid);
    for (size_t i = 0; i < n; i++)
        keys[1 + i] = bstore_key_slots(ns, names[i]);
    unsigned seed = seed_of(keys);
    int rc = 0;
    for (int round = 0;; round++) {
        if (round >= TERN_BUDGET_TXN_ATTEMPTS) {
            rc = err_set(err, TERN_ECONFLICT, "budget ledgers of %s: still contended", ns);
            break;
        }
        if (round > 0)
            backoff(&seed, round);
        kvs_done(k, nk);
        for (size_t i = 0; i < nk; i++) {
            free(vals[i]);
            vals[i] = NULL;
        }
        if ((rc = read_keys(c, keys, nk, k, err)))
            break;
        size_t nc = 0, no = 0;
        removed = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
            struct ledger_slots s = {0};
            if (!k[1 + i].exists)
                continue;
            if ((rc = ledger_slots_parse(k[1 + i].v, k[1 + i].len, &s, err)))
                break;
            if (ledger_slots_remove(&s, uid)) {
                removed++;
                cJSON *j = ledger_slots_json(&s);
                vals[1 + i] = json_print(j);
                cJSON_Delete(j);
                cmps[nc++] = cmp_mod(keys[1 + i], k[1 + i].mod);
                ops[no++] = op_put(keys[1 + i], vals[1 + i]);
            }
            ledger_slots_done(&s);
        }
        if (rc == 0 && drop_memo && k[0].exists) {
            cmps[nc++] = cmp_mod(keys[0], k[0].mod);
            ops[no++] = op_del(keys[0]);
        }
        if (rc || no == 0)
            break;
        bool ok = false;
        rc = write_txn(c, &(struct etcd_txn_req){cmps, nc, ops, no, NULL, 0}, &ok, err);
        if (rc == TERN_EUNKNOWN) {
            rc = 0;
            continue;
        }
        if (rc || ok)
            break;
    }
    if (rc == 0 && ret_removed)
        *ret_removed = removed;
    kvs_done(k, nk);
    for (size_t i = 0; i < nk; i++) {
        free(keys[i]);
        free(vals[i]);
    }
    free(keys);
    free(k);
    free(vals);
    free(cmps);
    free(ops);
    return rc;
}

int bstore_release(struct etcd *c, const char *ns, const char *uid, const char *const *names,
                   size_t n, size_t *ret_removed, struct tern_err *err)
{
    return leave(c, ns, uid, names, n, false, ret_removed, err);
}

int bstore_forget(struct etcd *c, const char *ns, const char *uid, const char *const *names,
                  size_t n, struct tern_err *err)
{
    return leave(c, ns, uid, names, n, true, NULL, err);
}
