/* store.c - the journal's etcd store for one writer (struct journal): open
 * (reading sum, or folding the events when there is none), the exactly-once
 * append (one txn: create ev/<seq> + CAS on sum's revision; chunks for
 * oversize data; read-back resolution of lost replies), journal_resolve,
 * refresh, meta, compaction and delete. Reading events is read.c.
 */
#include "journal_internal.h"

#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

void journal_get_stats(const struct journal *j, struct journal_stats *ret)
{
    *ret = j->stats;
}

static int load_state(struct journal *j, struct tern_err *err)
{
    struct journal_summary s;
    int64_t rev = 0;
    bool present = false;
    int r;
    long deadline = now_ms() + j->retry_ms;
    while ((r = journal__read_sum(j->c, j->sum_key, &s, &rev, &present, err)) && transient(r) &&
           now_ms() < deadline)
        sleep_ms(100);
    if (r)
        return r;
    if (!present) {
        /* new, or written by schema v0 (no summary): fold the events */
        journal_summary_done(&s);
        r = journal_replay(j, 1, NULL, NULL, &s, err);
        if (r == TERN_ECOMPACTED)
            r = journal_replay(j, JOURNAL_FROM_SNAPSHOT, NULL, NULL, &s, err);
        if (r)
            return r;
    }
    journal_summary_done(&j->sum);
    j->sum = s;
    j->seen = rev;
    return 0;
}

static struct journal *handle_new(struct etcd *c, const char *uid,
                                  const struct journal_opts *opts)
{
    struct journal *j = xcalloc(1, sizeof *j);
    j->c = c;
    j->uid = xstrdup(uid);
    j->prefix = journal_prefix(uid);
    j->sum_key = xasprintf("%ssum", j->prefix);
    j->retry_ms = opts && opts->retry_ms > 0 ? opts->retry_ms : JOURNAL_RETRY_MS;
    j->page = opts && opts->page_size > 0 ? opts->page_size : 1000;
    if (j->page > TERN_JOURNAL_MAX_PAGE)
        j->page = TERN_JOURNAL_MAX_PAGE;
    journal_summary_init(&j->sum);
    return j;
}

int journal_open(struct etcd *c, const char *uid, const struct journal_opts *opts,
                 struct journal **ret, struct tern_err *err)
{
    if (!journal__valid_uid(uid))
        return err_set(err, TERN_EINVALID, "journal: bad session uid");
    struct journal *j = handle_new(c, uid, opts);
    int r = load_state(j, err);
    if (r) {
        journal_free(j);
        return r;
    }
    *ret = j;
    return 0;
}

int journal_open_read(struct etcd *c, const char *uid, const struct journal_opts *opts,
                      const struct journal_sum_read *sum, struct journal **ret,
                      struct tern_err *err)
{
    if (!sum->present)
        return journal_open(c, uid, opts, ret, err);
    if (!journal__valid_uid(uid))
        return err_set(err, TERN_EINVALID, "journal: bad session uid");
    struct journal *j = handle_new(c, uid, opts);
    int r = journal_summary_decode(sum->value, sum->value_len, &j->sum, err);
    if (r) {
        journal_free(j);
        return r;
    }
    j->seen = sum->mod_revision;
    *ret = j;
    return 0;
}

static void clear_pending(struct journal *j)
{
    j->unresolved = false;
    free(j->pend_value);
    j->pend_value = NULL;
    journal_summary_done(&j->pend_sum);
}

void journal_free(struct journal *j)
{
    if (!j)
        return;
    clear_pending(j);
    journal_summary_done(&j->sum);
    free(j->uid);
    free(j->prefix);
    free(j->sum_key);
    free(j);
}

const struct journal_summary *journal_summary(const struct journal *j)
{
    return &j->sum;
}

int64_t journal_seen_revision(const struct journal *j)
{
    return j->seen;
}

int journal_refresh(struct journal *j, struct tern_err *err)
{
    if (j->unresolved)
        return err_set(err, TERN_EUNKNOWN, "journal: resolve the pending append first");
    return load_state(j, err);
}

int journal_create_meta(struct journal *j, const char *ns, const char *name, struct tern_err *err)
{
    cJSON *m = cJSON_CreateObject();
    json_add_string(m, "namespace", ns ? ns : "");
    json_add_string(m, "name", name ? name : "");
    char *t = journal__now_time();
    json_add_string(m, "createdAt", t);
    free(t);
    char *val = json_print(m);
    cJSON_Delete(m);
    char *key = xasprintf("%smeta", j->prefix);
    struct etcd_compare cmp = {.keys = {.key = key}, .target = ETCD_CMP_CREATE, .number = 0};
    struct etcd_op put = {.type = ETCD_OP_PUT,
                          .put = {.key = key, .value = val, .value_len = strlen(val)}};
    struct etcd_txn_resp tr;
    int r;
    long deadline = now_ms() + j->retry_ms;
    /* create-if-absent is idempotent: an unknown outcome is simply retried */
    while ((r = etcd_txn(j->c, &(struct etcd_txn_req){&cmp, 1, &put, 1, NULL, 0}, &tr, err)) &&
           (transient(r) || r == TERN_EUNKNOWN) && now_ms() < deadline)
        sleep_ms(100);
    etcd_txn_resp_done(&tr);
    free(key);
    free(val);
    return r;
}

/* The final append txn. The failure branch reads ev/<seq> and sum so that a
 * failed compare can tell "our own earlier attempt committed" from "fenced". */
struct commit {
    const char *ev_key;
    const char *ev_value;
    size_t ev_len;
    const char *sum_value;
    size_t sum_len;
    uint64_t seq;
};

enum outcome { OUT_COMMITTED, OUT_ABSENT_UNCHANGED, OUT_FENCED };

/* Classifies what is stored at ev/<seq> and sum. */
static enum outcome classify(const struct journal *j, const struct commit *cm,
                             const struct etcd_range_resp *ev, const struct etcd_range_resp *sum,
                             int64_t *ret_rev)
{
    if (ev->nkvs == 1) {
        const struct etcd_kv *kv = &ev->kvs[0];
        if (kv->value_len == cm->ev_len && memcmp(kv->value, cm->ev_value, cm->ev_len) == 0) {
            *ret_rev = kv->mod_revision;
            return OUT_COMMITTED;
        }
        return OUT_FENCED;
    }
    int64_t sum_rev = sum->nkvs ? sum->kvs[0].mod_revision : 0;
    return sum_rev == j->seen ? OUT_ABSENT_UNCHANGED : OUT_FENCED;
}

/* Reads ev/<seq> and sum back in one read-only txn. */
static int read_back(struct journal *j, const struct commit *cm, enum outcome *ret,
                     int64_t *ret_rev, struct tern_err *err)
{
    struct etcd_op ops[] = {
        {.type = ETCD_OP_RANGE, .range = {.keys = {.key = cm->ev_key}}},
        {.type = ETCD_OP_RANGE, .range = {.keys = {.key = j->sum_key}}},
    };
    struct etcd_txn_resp tr;
    int r = etcd_txn(j->c, &(struct etcd_txn_req){NULL, 0, ops, 2, NULL, 0}, &tr, err);
    if (r)
        return r;
    if (tr.nresponses != 2) {
        etcd_txn_resp_done(&tr);
        return err_set(err, TERN_EPARSE, "journal read-back: %zu responses", tr.nresponses);
    }
    *ret = classify(j, cm, &tr.responses[0].range, &tr.responses[1].range, ret_rev);
    etcd_txn_resp_done(&tr);
    return 0;
}

/* Sends the commit txn until it is decided or the budget runs out.
 * Returns 0 (committed, *ret_rev = the revision), TERN_EFENCED,
 * TERN_EUNKNOWN (undecided), or a hard error. */
static int commit_txn(struct journal *j, const struct commit *cm, int64_t *ret_rev,
                      struct tern_err *err)
{
    struct etcd_compare cmps[] = {
        {.keys = {.key = cm->ev_key}, .target = ETCD_CMP_CREATE, .number = 0},
        {.keys = {.key = j->sum_key}, .target = ETCD_CMP_MOD, .number = j->seen},
    };
    struct etcd_op succ[] = {
        {.type = ETCD_OP_PUT,
         .put = {.key = cm->ev_key, .value = cm->ev_value, .value_len = cm->ev_len}},
        {.type = ETCD_OP_PUT,
         .put = {.key = j->sum_key, .value = cm->sum_value, .value_len = cm->sum_len}},
    };
    struct etcd_op fail[] = {
        {.type = ETCD_OP_RANGE, .range = {.keys = {.key = cm->ev_key}}},
        {.type = ETCD_OP_RANGE, .range = {.keys = {.key = j->sum_key}}},
    };
    struct etcd_txn_req req = {cmps, 2, succ, 2, fail, 2};
    long deadline = now_ms() + j->retry_ms;
    long backoff = 50;
    bool must_read_back = false;
    bool had_unknown = false; /* some attempt may still land later */
    int r = 0;
    for (;;) {
        if (must_read_back) {
            enum outcome oc;
            int64_t rev = 0;
            r = read_back(j, cm, &oc, &rev, err);
            if (r == 0) {
                if (oc == OUT_COMMITTED) {
                    *ret_rev = rev;
                    return 0;
                }
                if (oc == OUT_FENCED)
                    return err_set(err, TERN_EFENCED,
                                   "journal %s: seq %llu: another writer appended first", j->uid,
                                   (unsigned long long)cm->seq);
                must_read_back = false; /* not applied: send it again */
                j->stats.resends++;
                continue;
            }
            if (!transient(r) && r != TERN_EUNKNOWN)
                return r;
        } else {
            struct etcd_txn_resp tr;
            r = etcd_txn(j->c, &req, &tr, err);
            if (r == 0) {
                if (tr.succeeded) {
                    *ret_rev = tr.header.revision;
                    etcd_txn_resp_done(&tr);
                    return 0;
                }
                enum outcome oc = OUT_FENCED;
                int64_t rev = 0;
                if (tr.nresponses == 2)
                    oc = classify(j, cm, &tr.responses[0].range, &tr.responses[1].range, &rev);
                etcd_txn_resp_done(&tr);
                if (oc == OUT_COMMITTED) { /* an earlier attempt of ours landed */
                    *ret_rev = rev;
                    return 0;
                }
                return err_set(err, TERN_EFENCED,
                               "journal %s: seq %llu: another writer appended first", j->uid,
                               (unsigned long long)cm->seq);
            }
            etcd_txn_resp_done(&tr);
            if (r == TERN_EUNKNOWN) {
                must_read_back = true;
                had_unknown = true;
                j->stats.unknown_outcomes++;
            } else if (!transient(r)) {
                return r;
            } else {
                j->stats.retries++;
            }
        }
        if (now_ms() + backoff > deadline)
            break;
        sleep_ms(backoff);
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
    }
    /* a read-back that found nothing is not final (a delayed attempt can
     * still commit): undecided unless resolved by journal_resolve */
    if (had_unknown || r == TERN_EUNKNOWN)
        return err_set(err, TERN_EUNKNOWN, "journal %s: seq %llu: outcome unknown after %ld ms",
                       j->uid, (unsigned long long)cm->seq, j->retry_ms);
    return r;
}

/* Writes the chunks of an oversize event, each fenced like the append. */
static int put_chunks(struct journal *j, uint64_t seq, const char *ev_k, const char *id,
                      const char *data, size_t n, struct tern_err *err)
{
    unsigned nchunks = (unsigned)((n + TERN_JOURNAL_CHUNK - 1) / TERN_JOURNAL_CHUNK);
    for (unsigned i = 0; i < nchunks; i++) {
        size_t off = (size_t)i * TERN_JOURNAL_CHUNK;
        size_t len = n - off < TERN_JOURNAL_CHUNK ? n - off : TERN_JOURNAL_CHUNK;
        char *ck = journal__chunk_key(j->prefix, seq, id, i);
        struct etcd_compare cmps[] = {
            {.keys = {.key = ev_k}, .target = ETCD_CMP_CREATE, .number = 0},
            {.keys = {.key = j->sum_key}, .target = ETCD_CMP_MOD, .number = j->seen},
        };
        struct etcd_op put = {.type = ETCD_OP_PUT,
                              .put = {.key = ck, .value = data + off, .value_len = len}};
        long deadline = now_ms() + j->retry_ms;
        int r;
        struct etcd_txn_resp tr;
        /* re-putting the same chunk bytes is harmless: retry until decided */
        while ((r = etcd_txn(j->c, &(struct etcd_txn_req){cmps, 2, &put, 1, NULL, 0}, &tr, err)) &&
               (transient(r) || r == TERN_EUNKNOWN) && now_ms() < deadline) {
            etcd_txn_resp_done(&tr);
            sleep_ms(100);
        }
        bool ok = r == 0 && tr.succeeded;
        etcd_txn_resp_done(&tr);
        free(ck);
        if (r)
            return r;
        if (!ok)
            return err_set(err, TERN_EFENCED, "journal %s: seq %llu: fenced while writing chunks",
                           j->uid, (unsigned long long)seq);
    }
    return 0;
}

static void random_id(char out[17])
{
    unsigned char b[8];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
        memcpy(b, &x, sizeof b);
    }
    for (int i = 0; i < 8; i++) {
        static const char hex[] = "0123456789abcdef";
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[16] = 0;
}

int journal_append(struct journal *j, const struct journal_append_req *req, uint64_t *ret_seq,
                   struct tern_err *err)
{
    if (j->unresolved)
        return err_set(err, TERN_EUNKNOWN, "journal %s: seq %llu unresolved; call journal_resolve",
                       j->uid, (unsigned long long)j->pend_seq);
    const char *tname = req->type_name ? req->type_name : journal_type_name(req->type);
    if (!tname || !journal__valid_type_name(tname))
        return err_set(err, TERN_EINVALID, "journal append: bad event type");
    if (req->key && strlen(req->key) > 1024)
        return err_set(err, TERN_EINVALID, "journal append: key longer than 1024");
    if (req->turn < 0)
        return err_set(err, TERN_EINVALID, "journal append: negative turn");
    if (req->data && !cJSON_IsObject(req->data))
        return err_set(err, TERN_EINVALID, "journal append: data must be an object");

    struct journal_event ev = {
        .v = JOURNAL_SCHEMA_VERSION,
        .seq = j->sum.last_seq + 1,
        .type = journal_type_parse(tname),
        .type_name = (char *)tname,
        .time = journal__now_time(),
        .turn = req->turn,
        .key = (char *)req->key,
        .data = (cJSON *)req->data,
    };
    cJSON *empty = NULL;
    if (!ev.data)
        ev.data = empty = cJSON_CreateObject();
    char *data_txt = NULL, *value = NULL, *sum_txt = NULL, *k = journal__ev_key(j->prefix, ev.seq);
    struct journal_summary ns;
    journal_summary_copy(&ns, &j->sum);
    int r = 0;

    value = journal_event_encode(&ev);
    size_t vlen = strlen(value);
    if (vlen > TERN_JOURNAL_MAX_EVENT) {
        data_txt = json_print(ev.data);
        size_t dlen = strlen(data_txt);
        if (dlen > TERN_JOURNAL_MAX_DATA) {
            r = err_set(err, TERN_ETOOLARGE,
                        "journal append: data of %zu bytes exceeds %u (truncate it first)", dlen,
                        TERN_JOURNAL_MAX_DATA);
            goto out;
        }
        char id[17];
        random_id(id);
        cJSON *head = journal__event_json(&ev, false);
        cJSON *ch = cJSON_AddObjectToObject(head, "chunks");
        json_add_string(ch, "id", id);
        json_add_int64(ch, "n", (int64_t)((dlen + TERN_JOURNAL_CHUNK - 1) / TERN_JOURNAL_CHUNK));
        json_add_int64(ch, "bytes", (int64_t)dlen);
        char hash[65];
        journal__sha256_hex(data_txt, dlen, hash);
        json_add_string(ch, "sha256", hash);
        free(value);
        value = json_print(head);
        cJSON_Delete(head);
        vlen = strlen(value);
        r = put_chunks(j, ev.seq, k, id, data_txt, dlen, err);
        if (r)
            goto out;
        j->stats.chunked++;
    }
    if (journal_summary_apply(&ns, &ev)) {
        r = err_set(err, TERN_EINVALID, "journal append: summary fold failed");
        goto out;
    }
    cJSON *sj = journal_summary_to_json(&ns);
    sum_txt = json_print(sj);
    cJSON_Delete(sj);

    struct commit cm = {.ev_key = k,
                        .ev_value = value,
                        .ev_len = vlen,
                        .sum_value = sum_txt,
                        .sum_len = strlen(sum_txt),
                        .seq = ev.seq};
    int64_t rev = 0;
    r = commit_txn(j, &cm, &rev, err);
    if (r == 0) {
        journal_summary_done(&j->sum);
        j->sum = ns;
        journal_summary_init(&ns);
        j->seen = rev;
        j->stats.appends++;
        if (ret_seq)
            *ret_seq = ev.seq;
    } else if (r == TERN_EUNKNOWN) {
        j->unresolved = true;
        j->pend_seq = ev.seq;
        j->pend_value = value;
        value = NULL;
        j->pend_sum = ns;
        journal_summary_init(&ns);
    }
out:
    journal_summary_done(&ns);
    cJSON_Delete(empty);
    free((char *)ev.time);
    free(data_txt);
    free(value);
    free(sum_txt);
    free(k);
    return r;
}

int journal_resolve(struct journal *j, bool *ret_committed, uint64_t *ret_seq, struct tern_err *err)
{
    if (!j->unresolved) {
        *ret_committed = false;
        return 0;
    }
    char *k = journal__ev_key(j->prefix, j->pend_seq);
    struct commit cm = {.ev_key = k,
                        .ev_value = j->pend_value,
                        .ev_len = strlen(j->pend_value),
                        .seq = j->pend_seq};
    enum outcome oc;
    int64_t rev = 0;
    int r = read_back(j, &cm, &oc, &rev, err);
    if (r)
        goto out;
    if (oc == OUT_COMMITTED) {
        journal_summary_done(&j->sum);
        j->sum = j->pend_sum;
        journal_summary_init(&j->pend_sum);
        j->seen = rev;
        *ret_committed = true;
        if (ret_seq)
            *ret_seq = j->pend_seq;
        clear_pending(j);
        goto out;
    }
    if (oc == OUT_ABSENT_UNCHANGED) {
        /* make "not committed" definitive: rewrite sum unchanged under the
         * same compares, so a late copy of the lost txn can never apply */
        cJSON *sj = journal_summary_to_json(&j->sum);
        char *txt = json_print(sj);
        cJSON_Delete(sj);
        struct etcd_compare cmps[] = {
            {.keys = {.key = k}, .target = ETCD_CMP_CREATE, .number = 0},
            {.keys = {.key = j->sum_key}, .target = ETCD_CMP_MOD, .number = j->seen},
        };
        struct etcd_op put = {.type = ETCD_OP_PUT,
                              .put = {.key = j->sum_key, .value = txt, .value_len = strlen(txt)}};
        struct etcd_txn_resp tr;
        r = etcd_txn(j->c, &(struct etcd_txn_req){cmps, 2, &put, 1, NULL, 0}, &tr, err);
        bool ok = r == 0 && tr.succeeded;
        int64_t hrev = tr.header.revision;
        etcd_txn_resp_done(&tr);
        free(txt);
        if (r)
            goto out; /* still unresolved */
        if (!ok) {
            r = -EAGAIN; /* something moved: read back again */
            err_set(err, r, "journal resolve: state changed, retry");
            goto out;
        }
        j->seen = hrev;
        *ret_committed = false;
        clear_pending(j);
        goto out;
    }
    /* fenced: not ours, and another writer moved on */
    *ret_committed = false;
    clear_pending(j);
    r = load_state(j, err);
out:
    free(k);
    return r;
}

/* ---- compaction --------------------------------------------------------- */

int journal_compact(struct journal *j, const cJSON *state, bool drop_old, uint64_t *ret_seq,
                    struct tern_err *err)
{
    cJSON *d = cJSON_CreateObject();
    json_add_int64(d, "upto", (int64_t)j->sum.last_seq);
    cJSON_AddItemToObject(d, "summary", journal_summary_to_json(&j->sum));
    cJSON_AddItemToObject(d, "state", state ? json_dup(state) : cJSON_CreateObject());
    uint64_t seq = 0;
    int r = journal_append(
        j,
        &(struct journal_append_req){.type = JOURNAL_EV_SNAPSHOT, .turn = j->sum.turn, .data = d},
        &seq, err);
    cJSON_Delete(d);
    if (r)
        return r;
    if (drop_old)
        r = journal_drop_before(j, seq, err);
    if (!r && ret_seq)
        *ret_seq = seq;
    return r;
}

int journal_drop_before(struct journal *j, uint64_t seq, struct tern_err *err)
{
    if (seq == 0 || seq > j->sum.last_seq)
        return err_set(err, TERN_EINVALID, "journal drop: seq %llu is not a stored event",
                       (unsigned long long)seq);
    int r = 0;
    /* events and chunks before seq; idempotent, so retried */
    const char *kinds[] = {"ev/", "ch/"};
    for (int i = 0; i < 2 && !r; i++) {
        char *from = xasprintf("%s%s", j->prefix, kinds[i]);
        char *to = xasprintf("%s%s%016llx", j->prefix, kinds[i], (unsigned long long)seq);
        struct etcd_delete_resp dr;
        long deadline = now_ms() + j->retry_ms;
        while ((r = etcd_delete(j->c,
                                &(struct etcd_delete_req){.keys = {.key = from, .range_end = to}},
                                &dr, err)) &&
               (transient(r) || r == TERN_EUNKNOWN) && now_ms() < deadline)
            sleep_ms(100);
        etcd_delete_resp_done(&dr);
        free(from);
        free(to);
    }
    return r;
}

/* ---- delete ------------------------------------------------------------- */

int journal_delete(struct etcd *c, const char *uid, struct tern_err *err)
{
    char *p = journal_prefix(uid);
    if (!p)
        return err_set(err, TERN_EINVALID, "journal delete: bad uid");
    struct etcd_delete_resp dr;
    int r = etcd_delete(c, &(struct etcd_delete_req){.keys = {.key = p, .prefix = true}}, &dr, err);
    etcd_delete_resp_done(&dr);
    free(p);
    return r;
}
