/* read.c - reading a journal's events from etcd: the summary read, chunk
 * reassembly, the paged scan with a prefetch thread (also used by fork.c),
 * journal_replay (scan + fold) and journal_tail (scan, then watch, relisting
 * after a compacted watch).
 */
#include "journal_internal.h"

#include "base/mem.h"
#include "json/json.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Reads sum (value + revision) into s / *rev; an absent sum gives an empty
 * summary and revision 0. */
int journal__read_sum(struct etcd *c, const char *sum_key, struct journal_summary *s, int64_t *rev,
                      bool *present, struct tern_err *err)
{
    struct etcd_kv *kv = NULL;
    int r = etcd_get(c, sum_key, &kv, NULL, err);
    if (r == TERN_ENOTFOUND) {
        journal_summary_init(s);
        *rev = 0;
        *present = false;
        return 0;
    }
    if (r)
        return r;
    r = journal_summary_decode(kv->value, kv->value_len, s, err);
    if (!r) {
        *rev = kv->mod_revision;
        *present = true;
    }
    etcd_kv_free(kv);
    return r;
}

void journal_sum_read_done(struct journal_sum_read *r)
{
    free(r->value);
    memset(r, 0, sizeof *r);
}

int journal_read_sums(struct etcd *c, const char *const *uids, size_t n,
                      struct journal_sum_read *ret, int64_t *ret_rev, struct tern_err *err)
{
    if (n == 0 || n > JOURNAL_SUM_BATCH)
        return err_set(err, TERN_EINVALID, "journal: %zu summaries in one read (1..%d)", n,
                       JOURNAL_SUM_BATCH);
    for (size_t i = 0; i < n; i++)
        if (!journal__valid_uid(uids[i]))
            return err_set(err, TERN_EINVALID, "journal: bad session uid");
    struct etcd_op ops[JOURNAL_SUM_BATCH];
    char *keys[JOURNAL_SUM_BATCH];
    for (size_t i = 0; i < n; i++) {
        keys[i] = xasprintf("%s%s/sum", JOURNAL_ALL_PREFIX, uids[i]);
        ops[i] = (struct etcd_op){.type = ETCD_OP_RANGE, .range = {.keys = {.key = keys[i]}}};
    }
    struct etcd_txn_resp tr = {0};
    int r = etcd_txn(c, &(struct etcd_txn_req){NULL, 0, ops, n, NULL, 0}, &tr, err);
    if (!r && (!tr.succeeded || tr.nresponses != n))
        r = err_set(err, TERN_EPARSE, "journal: a read of %zu summaries got %zu answers", n,
                    tr.nresponses);
    for (size_t i = 0; !r && i < n; i++) {
        const struct etcd_range_resp *rr = &tr.responses[i].range;
        if (tr.responses[i].type != ETCD_OP_RANGE || rr->nkvs > 1)
            r = err_set(err, TERN_EPARSE, "journal: summary read %zu is not one key", i);
    }
    for (size_t i = 0; !r && i < n; i++) {
        struct etcd_range_resp *rr = &tr.responses[i].range;
        ret[i] = (struct journal_sum_read){0};
        if (rr->nkvs == 1) {
            ret[i].present = true;
            ret[i].value = rr->kvs[0].value; /* moved */
            ret[i].value_len = rr->kvs[0].value_len;
            ret[i].mod_revision = rr->kvs[0].mod_revision;
            rr->kvs[0].value = NULL;
            rr->kvs[0].value_len = 0;
        }
    }
    if (!r && ret_rev)
        *ret_rev = tr.header.revision;
    etcd_txn_resp_done(&tr);
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    return r;
}

/* Chunks fetched per range request: 8 x 384 KiB is 4 MiB of base64 in the
 * answer, well below what one JSON reply may hold (16 MiB), so even an
 * event at TERN_JOURNAL_MAX_DATA is read back in a few requests. */
#define CHUNKS_PER_READ 8

int journal__each_chunk(struct etcd *c, const char *prefix, uint64_t seq, const char *id,
                        int (*fn)(void *ctx, const struct etcd_kv *kv), void *ctx,
                        struct tern_err *err)
{
    /* '0' follows '/': [<id>/, <id>0) is exactly this chunk set */
    char *from = xasprintf("%sch/%016llx/%s/", prefix, (unsigned long long)seq, id);
    char *end = xasprintf("%sch/%016llx/%s0", prefix, (unsigned long long)seq, id);
    struct etcd_range_resp rr = {0};
    int r = 0;
    for (bool more = true; more && r == 0;) {
        r = etcd_range(c,
                       &(struct etcd_range_req){.keys = {.key = from, .range_end = end},
                                                .limit = CHUNKS_PER_READ},
                       &rr, err);
        for (size_t i = 0; r == 0 && i < rr.nkvs; i++)
            r = fn(ctx, &rr.kvs[i]);
        more = r == 0 && rr.more && rr.nkvs > 0;
        if (more) {
            /* just after the last key: chunk keys are fixed-width, so none
             * has another as its prefix */
            free(from);
            from = xasprintf("%s\x01", rr.kvs[rr.nkvs - 1].key);
        }
        etcd_range_resp_done(&rr);
    }
    free(from);
    free(end);
    return r;
}

struct gather {
    char *buf;
    size_t off, bytes;
    int64_t seen, n;
    uint64_t seq;
    struct tern_err *err;
};

static int gather_chunk(void *ctx, const struct etcd_kv *kv)
{
    struct gather *g = ctx;
    if (g->off + kv->value_len > g->bytes || ++g->seen > g->n)
        return err_set(g->err, TERN_EPARSE, "journal seq %llu: chunks exceed %zu bytes",
                       (unsigned long long)g->seq, g->bytes);
    memcpy(g->buf + g->off, kv->value, kv->value_len);
    g->off += kv->value_len;
    return 0;
}

/* Reassembles a chunked event's data. */
static int load_chunks(struct etcd *c, const char *prefix, struct journal_event *ev,
                       const cJSON *chunks, struct tern_err *err)
{
    const char *id = json_get(chunks, "id")->valuestring;
    int64_t n = 0, bytes = 0;
    json_item_int64(json_get(chunks, "n"), &n);
    json_item_int64(json_get(chunks, "bytes"), &bytes);
    struct gather g = {.buf = xmalloc((size_t)bytes + 1), .bytes = (size_t)bytes, .n = n,
                       .seq = ev->seq, .err = err};
    char *buf = g.buf;
    size_t off = 0;
    int r = journal__each_chunk(c, prefix, ev->seq, id, gather_chunk, &g, err);
    if (r)
        goto out;
    off = g.off;
    if (g.seen != n) {
        r = err_set(err, TERN_EPARSE, "journal seq %llu: %lld of %lld chunks present",
                    (unsigned long long)ev->seq, (long long)g.seen, (long long)n);
        goto out;
    }
    if (off != (size_t)bytes) {
        r = err_set(err, TERN_EPARSE, "journal seq %llu: chunks hold %zu of %lld bytes",
                    (unsigned long long)ev->seq, off, (long long)bytes);
        goto out;
    }
    const cJSON *h = json_get(chunks, "sha256");
    if (cJSON_IsString(h)) { /* heads written before the hash have none */
        char got[65];
        journal__sha256_hex(buf, off, got);
        if (strcmp(got, h->valuestring) != 0) {
            r = err_set(err, TERN_EPARSE, "journal seq %llu: chunked data does not match its sha256",
                        (unsigned long long)ev->seq);
            goto out;
        }
    }
    cJSON *d = NULL;
    struct json_parse_opts po = {.max_bytes = TERN_JOURNAL_MAX_DATA};
    if (json_parse_opts(buf, off, &po, &d, err) || !cJSON_IsObject(d)) {
        cJSON_Delete(d);
        r = err_set(err, TERN_EPARSE, "journal seq %llu: chunked data is not a JSON object",
                    (unsigned long long)ev->seq);
        goto out;
    }
    cJSON_Delete(ev->data);
    ev->data = d;
out:
    free(buf);
    return r;
}

/* Decodes a stored head kv (key must be ev/<seq>), fetching chunks. */
static int decode_kv(struct etcd *c, const char *prefix, const struct etcd_kv *kv,
                     struct journal_event *ret, struct tern_err *err)
{
    uint64_t kseq = journal__key_seq(prefix, kv->key);
    if (kseq == 0)
        return err_set(err, TERN_EPARSE, "journal: unexpected key %s", kv->key);
    cJSON *chunks = NULL;
    struct journal_event ev;
    int r = journal_event_decode(kv->value, kv->value_len, &ev, &chunks, err);
    if (r)
        return err_wrap(err, r, "journal key %s", kv->key);
    if (ev.seq != kseq) {
        journal_event_done(&ev);
        cJSON_Delete(chunks);
        return err_set(err, TERN_EPARSE, "journal key %s holds seq %llu", kv->key,
                       (unsigned long long)ev.seq);
    }
    if (chunks)
        r = load_chunks(c, prefix, &ev, chunks, err);
    cJSON_Delete(chunks);
    if (r) {
        journal_event_done(&ev);
        return r;
    }
    *ret = ev;
    return 0;
}

/* One page fetch [from, stop), run inline or on a prefetch thread. */
struct page_fetch {
    struct etcd *c;
    const char *prefix;
    uint64_t from, stop;
    size_t page;
    struct etcd_range_resp rr;
    int r;
    struct tern_err err;
    pthread_t th;
    bool running;
};

static void *page_fetch_main(void *arg)
{
    struct page_fetch *f = arg;
    char *start = journal__ev_key(f->prefix, f->from), *end = journal__ev_key(f->prefix, f->stop);
    f->r = etcd_range(f->c,
                      &(struct etcd_range_req){.keys = {.key = start, .range_end = end},
                                               .limit = (int64_t)f->page},
                      &f->rr, &f->err);
    free(start);
    free(end);
    return NULL;
}

static void page_fetch_start(struct page_fetch *f, struct etcd *c, const char *prefix,
                             uint64_t from, uint64_t upto, size_t page, bool async)
{
    memset(f, 0, sizeof *f);
    f->c = c;
    f->prefix = prefix;
    f->from = from;
    f->stop = from + page;
    if (upto && f->stop > upto + 1)
        f->stop = upto + 1;
    f->page = page;
    f->running = async && pthread_create(&f->th, NULL, page_fetch_main, f) == 0;
    if (!f->running)
        page_fetch_main(f);
}

static void page_fetch_wait(struct page_fetch *f)
{
    if (f->running)
        pthread_join(f->th, NULL);
    f->running = false;
}

/* Reads events from seq `from` (inclusive) up to `upto` (0 = end) in pages,
 * calling visit for each. *ret_rev: header revision of the last page read.
 * *ret_next: the seq after the last visited event.
 *
 * Pages are key ranges [ev/n, ev/n+page): seq keys are fixed width, so a
 * page holds at most `page` events, and etcd never walks (and counts) the
 * rest of the journal for each page, as it does for a limit-only range. A
 * short page is the end. While one page is decoded, the next one (if the
 * current page was full) is already being fetched on a helper thread, so
 * etcd's work and ours overlap. */
int journal__scan(struct etcd *c, const char *prefix, size_t page, uint64_t from, uint64_t upto,
                  journal__visit_fn visit, void *ctx, int64_t *ret_rev, uint64_t *ret_next,
                  struct tern_err *err)
{
    uint64_t next = from;
    int r = 0;
    struct page_fetch *cur = xcalloc(1, sizeof *cur), *ahead = xcalloc(1, sizeof *ahead);
    page_fetch_start(cur, c, prefix, next, upto, page, false);
    for (;;) {
        page_fetch_wait(cur);
        if (cur->r) {
            r = cur->r;
            if (err)
                *err = cur->err;
            break;
        }
        struct etcd_range_resp *rr = &cur->rr;
        bool full =
            rr->nkvs == page && cur->stop == cur->from + page && !(upto && cur->stop > upto);
        if (full)
            page_fetch_start(ahead, c, prefix, cur->stop, upto, page, true);
        if (ret_rev)
            *ret_rev = rr->header.revision;
        for (size_t i = 0; i < rr->nkvs && !r; i++) {
            struct journal_event ev;
            r = decode_kv(c, prefix, &rr->kvs[i], &ev, err);
            if (r)
                break;
            if (ev.seq != next) {
                r = ev.seq > next && next == from
                        ? err_set(err, TERN_ECOMPACTED,
                                  "journal: seq %llu no longer stored (oldest is %llu)",
                                  (unsigned long long)next, (unsigned long long)ev.seq)
                        : err_set(err, TERN_EINVALID, "journal: gap: seq %llu after %llu",
                                  (unsigned long long)ev.seq, (unsigned long long)next - 1);
                journal_event_done(&ev);
                break;
            }
            r = visit ? visit(ctx, &ev, &rr->kvs[i]) : 0;
            next = ev.seq + 1;
            journal_event_done(&ev);
        }
        etcd_range_resp_done(rr);
        if (r || !full || next != cur->stop) {
            if (full) {
                page_fetch_wait(ahead);
                etcd_range_resp_done(&ahead->rr);
            }
            break;
        }
        struct page_fetch *t = cur;
        cur = ahead;
        ahead = t;
    }
    free(cur);
    free(ahead);
    if (!r && ret_next)
        *ret_next = next;
    return r;
}

struct replay_ctx {
    journal_event_fn fn;
    void *ctx;
    struct journal_summary sum;
    bool first;
};

static int replay_visit(void *ctx, const struct journal_event *ev, const struct etcd_kv *kv)
{
    (void)kv;
    struct replay_ctx *rc = ctx;
    /* a replay that starts mid-journal at something other than a snapshot
     * folds from that event on (counters then cover only the tail) */
    if (rc->first && ev->type != JOURNAL_EV_SNAPSHOT)
        rc->sum.last_seq = ev->seq - 1;
    rc->first = false;
    if (journal_summary_apply(&rc->sum, ev))
        return TERN_EINVALID;
    return rc->fn ? rc->fn(rc->ctx, ev) : 0;
}

/* The first seq to read for JOURNAL_FROM_SNAPSHOT. */
static int snapshot_start(struct journal *j, uint64_t *ret, struct tern_err *err)
{
    struct journal_summary s;
    int64_t rev;
    bool present;
    int r = journal__read_sum(j->c, j->sum_key, &s, &rev, &present, err);
    if (r)
        return r;
    *ret = s.snapshot_seq ? s.snapshot_seq : 1;
    journal_summary_done(&s);
    return 0;
}

int journal_replay(struct journal *j, uint64_t from_seq, journal_event_fn fn, void *ctx,
                   struct journal_summary *ret_sum, struct tern_err *err)
{
    uint64_t from = from_seq;
    int r = 0;
    if (from == JOURNAL_FROM_SNAPSHOT) {
        r = snapshot_start(j, &from, err);
        if (r)
            return r;
    }
    struct replay_ctx rc = {.fn = fn, .ctx = ctx, .first = true};
    journal_summary_init(&rc.sum);
    r = journal__scan(j->c, j->prefix, j->page, from, 0, replay_visit, &rc, NULL, NULL, err);
    if (r == 0 && ret_sum) {
        *ret_sum = rc.sum;
        journal_summary_init(&rc.sum);
    }
    journal_summary_done(&rc.sum);
    return r;
}

/* ---- tail --------------------------------------------------------------- */

struct tail_ctx {
    struct journal *j;
    journal_event_fn fn;
    void *ctx;
    uint64_t next; /* the next seq to deliver */
    int user_rc;   /* fn's non-zero return */
};

#define TAIL_RELIST 0x7e11157 /* internal: a gap in the watch, relist */

static int tail_visit(void *ctx, const struct journal_event *ev, const struct etcd_kv *kv)
{
    (void)kv;
    struct tail_ctx *t = ctx;
    int r = t->fn(t->ctx, ev);
    t->next = ev->seq + 1;
    if (r)
        t->user_rc = r;
    return r;
}

static int tail_batch(void *ctx, const struct etcd_watch_batch *b)
{
    struct tail_ctx *t = ctx;
    for (size_t i = 0; i < b->nevents; i++) {
        const struct etcd_event *we = &b->events[i];
        if (we->type != ETCD_EVENT_PUT)
            continue; /* deletions come from compaction or journal_delete */
        uint64_t seq = journal__key_seq(t->j->prefix, we->kv.key);
        if (seq == 0 || seq < t->next)
            continue; /* chunk keys, already delivered */
        if (seq > t->next)
            return TAIL_RELIST;
        struct journal_event ev;
        struct tern_err e = {0};
        int r = decode_kv(t->j->c, t->j->prefix, &we->kv, &ev, &e);
        if (r)
            return r;
        r = tail_visit(t, &ev, &we->kv);
        journal_event_done(&ev);
        if (r)
            return r;
    }
    return 0;
}

int journal_tail(struct journal *j, uint64_t from_seq, journal_event_fn fn, void *ctx,
                 atomic_bool *cancel, struct tern_err *err)
{
    struct tail_ctx t = {.j = j, .fn = fn, .ctx = ctx, .next = from_seq};
    int r = 0;
    if (t.next == JOURNAL_FROM_SNAPSHOT) {
        r = snapshot_start(j, &t.next, err);
        if (r)
            return r;
    }
    char *evp = xasprintf("%sev/", j->prefix);
    long fail_since = 0;
    for (;;) {
        if (cancel && atomic_load(cancel)) {
            r = err_set(err, -ECANCELED, "journal tail: cancelled");
            break;
        }
        /* list what is stored from next on, then watch from after the list */
        int64_t rev = 0;
        uint64_t nx = t.next;
        r = journal__scan(j->c, j->prefix, j->page, t.next, 0, tail_visit, &t, &rev, &nx, err);
        if (t.user_rc) {
            r = t.user_rc;
            break;
        }
        if (r) {
            /* etcd unreachable while listing: retry within the budget */
            if (transient(r) && (fail_since == 0 || now_ms() - fail_since < j->retry_ms)) {
                if (fail_since == 0)
                    fail_since = now_ms();
                sleep_ms(100);
                continue;
            }
            break;
        }
        fail_since = 0;
        int64_t crev = 0;
        r = etcd_watch(j->c,
                       &(struct etcd_watch_req){.keys = {.key = evp, .prefix = true},
                                                .start_revision = rev + 1,
                                                .give_up_ms = j->retry_ms},
                       tail_batch, &t, cancel, &crev, err);
        if (t.user_rc) {
            r = t.user_rc;
            break;
        }
        if (r == TERN_ECOMPACTED || r == TAIL_RELIST)
            continue; /* relist from t.next */
        break;
    }
    free(evp);
    return r;
}
