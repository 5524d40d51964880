/* fork.c - the fork copy (journal_copy_until): events 1..upto of one
 * session copied byte for byte (chunks included) into another, with the
 * destination's summary, in fenced batches that a repeated call resumes.
 */
#include "journal_internal.h"

#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

struct copy_batch {
    struct etcd *c;
    const char *src_prefix;
    const char *dst_prefix;
    const char *dst_sum_key;
    int64_t seen;               /* dst sum revision */
    struct journal_summary sum; /* dst summary after the batch */
    /* pending head puts */
    char **keys;
    char **vals;
    size_t *lens;
    size_t n;
    size_t bytes;
    uint64_t first_seq;
    uint64_t copied;
    struct tern_err *err;
};

#define COPY_BATCH_EVENTS 100
#define COPY_BATCH_BYTES  (768u << 10)

static void batch_clear(struct copy_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free(b->keys[i]);
        free(b->vals[i]);
    }
    b->n = 0;
    b->bytes = 0;
}

/* Commits the pending heads and the summary in one fenced txn. */
static int batch_flush(struct copy_batch *b)
{
    if (b->n == 0)
        return 0;
    struct etcd_op *ops = xcalloc(b->n + 1, sizeof *ops);
    for (size_t i = 0; i < b->n; i++) {
        ops[i].type = ETCD_OP_PUT;
        ops[i].put =
            (struct etcd_put_req){.key = b->keys[i], .value = b->vals[i], .value_len = b->lens[i]};
    }
    cJSON *sj = journal_summary_to_json(&b->sum);
    char *st = json_print(sj);
    cJSON_Delete(sj);
    ops[b->n].type = ETCD_OP_PUT;
    ops[b->n].put =
        (struct etcd_put_req){.key = b->dst_sum_key, .value = st, .value_len = strlen(st)};
    struct etcd_compare cmps[] = {
        {.keys = {.key = b->keys[0]}, .target = ETCD_CMP_CREATE, .number = 0},
        {.keys = {.key = b->dst_sum_key}, .target = ETCD_CMP_MOD, .number = b->seen},
    };
    struct etcd_txn_resp tr;
    int r = etcd_txn(b->c, &(struct etcd_txn_req){cmps, 2, ops, b->n + 1, NULL, 0}, &tr, b->err);
    if (r == 0 && !tr.succeeded)
        r = err_set(b->err, TERN_ECONFLICT, "journal copy: destination changed concurrently");
    if (r == 0) {
        b->seen = tr.header.revision;
        b->copied += b->n;
    }
    etcd_txn_resp_done(&tr);
    free(ops);
    free(st);
    batch_clear(b);
    return r;
}

struct chunk_copy {
    struct copy_batch *b;
    uint64_t seq;
};

/* One chunk put into dst, fenced like an append (dst's head absent, dst's
 * summary unchanged). */
static int copy_chunk(void *ctx, const struct etcd_kv *kv)
{
    struct chunk_copy *cc = ctx;
    struct copy_batch *b = cc->b;
    char *dk = xasprintf("%s%s", b->dst_prefix, kv->key + strlen(b->src_prefix));
    char *evk = journal__ev_key(b->dst_prefix, cc->seq);
    struct etcd_compare cmps[] = {
        {.keys = {.key = evk}, .target = ETCD_CMP_CREATE, .number = 0},
        {.keys = {.key = b->dst_sum_key}, .target = ETCD_CMP_MOD, .number = b->seen},
    };
    struct etcd_op put = {.type = ETCD_OP_PUT,
                          .put = {.key = dk, .value = kv->value, .value_len = kv->value_len}};
    struct etcd_txn_resp tr;
    int r = etcd_txn(b->c, &(struct etcd_txn_req){cmps, 2, &put, 1, NULL, 0}, &tr, b->err);
    if (r == 0 && !tr.succeeded)
        r = err_set(b->err, TERN_ECONFLICT, "journal copy: destination changed");
    etcd_txn_resp_done(&tr);
    free(dk);
    free(evk);
    return r;
}

static int copy_visit(void *ctx, const struct journal_event *ev, const struct etcd_kv *kv)
{
    struct copy_batch *b = ctx;
    int r;
    if (b->n >= COPY_BATCH_EVENTS || b->bytes + kv->value_len > COPY_BATCH_BYTES) {
        r = batch_flush(b);
        if (r)
            return r;
    }
    cJSON *chunks = NULL;
    struct journal_event tmp;
    /* chunks of this event: copied (fenced) before its head */
    if (journal_event_decode(kv->value, kv->value_len, &tmp, &chunks, NULL) == 0) {
        journal_event_done(&tmp);
        if (chunks) {
            r = batch_flush(b);
            if (r) {
                cJSON_Delete(chunks);
                return r;
            }
            const char *id = json_get(chunks, "id")->valuestring;
            struct chunk_copy cc = {.b = b, .seq = ev->seq};
            r = journal__each_chunk(b->c, b->src_prefix, ev->seq, id, copy_chunk, &cc, b->err);
            cJSON_Delete(chunks);
            if (r)
                return r;
        }
    }
    if (journal_summary_apply(&b->sum, ev))
        return err_set(b->err, TERN_EINVALID, "journal copy: seq %llu does not follow %llu",
                       (unsigned long long)ev->seq, (unsigned long long)b->sum.last_seq);
    b->keys = xreallocarray(b->keys, b->n + 1, sizeof *b->keys);
    b->vals = xreallocarray(b->vals, b->n + 1, sizeof *b->vals);
    b->lens = xreallocarray(b->lens, b->n + 1, sizeof *b->lens);
    b->keys[b->n] = journal__ev_key(b->dst_prefix, ev->seq);
    b->vals[b->n] = xmemdup(kv->value, kv->value_len + 1);
    b->lens[b->n] = kv->value_len;
    b->n++;
    b->bytes += kv->value_len;
    return 0;
}

/* The raw value of one event of a journal (NULL if absent). */
static int get_raw(struct etcd *c, const char *prefix, uint64_t seq, struct etcd_kv **ret,
                   struct tern_err *err)
{
    char *k = journal__ev_key(prefix, seq);
    int r = etcd_get(c, k, ret, NULL, err);
    free(k);
    if (r == TERN_ENOTFOUND) {
        *ret = NULL;
        r = 0;
    }
    return r;
}

int journal_copy_until(struct etcd *c, const char *src_uid, const char *dst_uid, uint64_t upto_seq,
                       uint64_t *ret_copied, struct tern_err *err)
{
    if (!journal__valid_uid(src_uid) || !journal__valid_uid(dst_uid) ||
        strcmp(src_uid, dst_uid) == 0 || upto_seq == 0)
        return err_set(err, TERN_EINVALID, "journal copy: bad uids or seq");
    struct copy_batch b = {.c = c, .err = err};
    char *sp = journal_prefix(src_uid), *dp = journal_prefix(dst_uid);
    char *dsum = xasprintf("%ssum", dp);
    b.src_prefix = sp;
    b.dst_prefix = dp;
    b.dst_sum_key = dsum;
    struct etcd_kv *a = NULL, *s = NULL;
    bool present = false;
    uint64_t from = 0;
    int r = journal__read_sum(c, dsum, &b.sum, &b.seen, &present, err);
    if (r)
        goto out;
    uint64_t have = b.sum.last_seq;
    if (have > upto_seq) {
        r = err_set(err, TERN_ECONFLICT, "journal copy: destination already has seq %llu > %llu",
                    (unsigned long long)have, (unsigned long long)upto_seq);
        goto out;
    }
    if (have > 0) {
        /* resuming: the last copied event must be the source's */
        r = get_raw(c, dp, have, &a, err);
        if (!r)
            r = get_raw(c, sp, have, &s, err);
        if (r)
            goto out;
        if (!a || !s || a->value_len != s->value_len || memcmp(a->value, s->value, a->value_len)) {
            r = err_set(err, TERN_ECONFLICT,
                        "journal copy: destination seq %llu differs from the source",
                        (unsigned long long)have);
            goto out;
        }
        from = have + 1;
    } else {
        /* fresh: from seq 1, or from the source's oldest kept snapshot */
        struct etcd_range_resp rr;
        char *start = journal__ev_key(sp, 1), *end = xasprintf("%sev0", sp);
        r = etcd_range(
            c, &(struct etcd_range_req){.keys = {.key = start, .range_end = end}, .limit = 1}, &rr,
            err);
        free(start);
        free(end);
        if (r)
            goto out;
        uint64_t oldest = rr.nkvs ? journal__key_seq(sp, rr.kvs[0].key) : 1;
        bool snap = false;
        if (rr.nkvs) {
            struct journal_event ev;
            cJSON *ch = NULL;
            if (journal_event_decode(rr.kvs[0].value, rr.kvs[0].value_len, &ev, &ch, NULL) == 0) {
                snap = ev.type == JOURNAL_EV_SNAPSHOT;
                journal_event_done(&ev);
                cJSON_Delete(ch);
            }
        }
        etcd_range_resp_done(&rr);
        if (oldest > 1 && (!snap || oldest > upto_seq)) {
            r = err_set(err, TERN_ECOMPACTED,
                        "journal copy: source events before seq %llu were compacted",
                        (unsigned long long)oldest);
            goto out;
        }
        from = oldest;
    }
    if (from <= upto_seq) {
        r = journal__scan(c, sp, 1000, from, upto_seq, copy_visit, &b, NULL, NULL, err);
        if (!r)
            r = batch_flush(&b);
        if (!r && b.sum.last_seq != upto_seq)
            r = err_set(err, TERN_ENOTFOUND, "journal copy: source ends at seq %llu < %llu",
                        (unsigned long long)b.sum.last_seq, (unsigned long long)upto_seq);
    }
    if (!r && ret_copied)
        *ret_copied = b.copied;
out:
    batch_clear(&b);
    free(b.keys);
    free(b.vals);
    free(b.lens);
    journal_summary_done(&b.sum);
    etcd_kv_free(a);
    etcd_kv_free(s);
    free(sp);
    free(dp);
    free(dsum);
    return r;
}
