/* session_sim.c - a long session's journal, written as the runner writes
 * it. See session_sim.h. */
#include "session_sim.h"

#include "base/buf.h"
#include "base/mem.h"
#include "etcd/etcd.h"
#include "http/httpc.h"
#include "journal/journal.h"
#include "json/json.h"
#include "runner/replay.h"
#include "runner/snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

struct sim {
    const struct sim_opts *o;
    struct etcd *c;
    struct journal *j;
    struct replay_state s;
    uint64_t snapshots;
    struct tern_err *err;
};

/* Appends one event and folds it, as turn.c's append() does. */
static int put(struct sim *m, const char *type, int64_t turn, const char *key, cJSON *data)
{
    uint64_t seq = 0;
    struct journal_append_req req = {.type = journal_type_parse(type),
                                     .type_name = type,
                                     .turn = turn,
                                     .key = key,
                                     .data = data};
    int rc = journal_append(m->j, &req, &seq, m->err);
    if (rc == 0) {
        struct replay_event ev = {seq, type, turn, key, data, NULL};
        rc = replay_apply(&m->s, &ev, m->err);
    }
    cJSON_Delete(data);
    return rc;
}

/* turn.c's maybe_compact, step for step. */
static int compact(struct sim *m, int64_t turn)
{
    uint64_t prev = journal_summary(m->j)->snapshot_seq;
    bool started = m->s.turn > turn || (m->s.turn == turn && m->s.turn_started);
    if (started || !snapshot_due(&m->s, prev, m->o->snapshot_every))
        return 0;
    cJSON *st = snapshot_encode(&m->s);
    uint64_t seq = 0;
    int rc = journal_compact(m->j, st, false, &seq, m->err);
    cJSON_Delete(st);
    if (rc)
        return rc;
    m->snapshots++;
    cJSON *empty = cJSON_CreateObject();
    struct replay_event ev = {seq, "snapshot", journal_summary(m->j)->turn, NULL, empty, NULL};
    rc = replay_apply(&m->s, &ev, m->err);
    cJSON_Delete(empty);
    if (rc == 0)
        rc = journal_drop_before(m->j, seq, m->err);
    return rc;
}

static int one_turn(struct sim *m, int t)
{
    char text[256], key[160], id[48];
    int rc;
    cJSON *d = cJSON_CreateObject();
    if (t == 1) {
        json_add_string(d, "source", "objective");
        json_add_string(d, "text", "Keep the service green: fix what the nightly run finds.");
    } else {
        json_add_string(d, "source", "spec.messages");
        json_add_int64(d, "index", t - 2);
        snprintf(text, sizeof text, "Night %d: the nightly run failed again, have a look.", t);
        json_add_string(d, "text", text);
    }
    char mkey[32];
    snprintf(mkey, sizeof mkey, "message/%d", t - 2); /* as the operator keys it */
    if ((rc = put(m, "user_message", 0, t == 1 ? NULL : mkey, d)))
        return rc;
    if ((rc = compact(m, t)))
        return rc;
    d = cJSON_CreateObject();
    json_add_int64(d, "turn", t);
    json_add_string(d, "owner", "sim-runner");
    if ((rc = put(m, "turn_started", t, NULL, d)))
        return rc;
    for (int step = 0; step < 2; step++) {
        d = cJSON_CreateObject();
        json_add_int64(d, "step", m->s.model_steps);
        json_add_int64(d, "messages", (int64_t)m->s.conv.n + 2);
        if ((rc = put(m, "model_request", t, NULL, d)))
            return rc;
        d = cJSON_CreateObject();
        json_add_int64(d, "step", m->s.model_steps);
        json_add_string(d, "kind", "ok");
        json_add_string(d, "finishReason", step ? "stop" : "tool_calls");
        snprintf(id, sizeof id, "call_%lld_0", (long long)m->s.model_steps);
        if (step == 0) {
            json_add_string(d, "content", "Running the tests to see what broke.");
            cJSON *arr = cJSON_AddArrayToObject(d, "toolCalls");
            cJSON *c = cJSON_CreateObject();
            json_add_string(c, "id", id);
            json_add_string(c, "name", "exec_command");
            snprintf(text, sizeof text, "{\"cmd\":\"make test 2>&1 | tail -n 40 # night %d\"}", t);
            json_add_string(c, "arguments", text);
            json_add_string(c, "status", "ok");
            cJSON_AddItemToArray(arr, c);
        } else {
            snprintf(text, sizeof text,
                     "Night %d: the flaky test is quarantined and a fix is in output/.", t);
            json_add_string(d, "content", text);
        }
        cJSON *u = cJSON_AddObjectToObject(d, "usage");
        json_add_int64(u, "prompt_tokens", 900 + t);
        json_add_int64(u, "completion_tokens", 60);
        json_add_int64(u, "cost_micro_usd", 9);
        if ((rc = put(m, "model_response", t, NULL, d)))
            return rc;
        if (step == 1)
            break;
        snprintf(key, sizeof key, "%s/%s", m->o->uid, id);
        d = cJSON_CreateObject();
        json_add_string(d, "callId", id);
        json_add_string(d, "tool", "exec_command");
        json_add_string(d, "arguments", text);
        json_add_int64(d, "timeoutMs", 120000);
        if ((rc = put(m, "tool_call", t, key, d)))
            return rc;
        struct buf out;
        buf_init(&out, m->o->output_bytes + 64);
        buf_puts(&out, "exit code: 0\nstdout:\n");
        for (size_t i = 0; out.len < m->o->output_bytes; i++)
            buf_printf(&out, "ok %zu - test case %d.%zu\n", i, t, i);
        d = cJSON_CreateObject();
        json_add_string(d, "callId", id);
        json_add_string(d, "tool", "exec_command");
        json_add_string(d, "status", "completed");
        json_add_string(d, "output", buf_str(&out));
        json_add_int64(d, "httpStatus", 200);
        buf_done(&out);
        if ((rc = put(m, "tool_result", t, key, d)))
            return rc;
    }
    d = cJSON_CreateObject();
    json_add_string(d, "outcome", "completed");
    json_add_string(d, "summary", m->s.final_text ? m->s.final_text : "");
    cJSON *arts = cJSON_AddArrayToObject(d, "artifacts");
    cJSON_AddItemToArray(arts, cJSON_CreateString("output/fix.patch"));
    return put(m, "turn_finished", t, NULL, d);
}

/* etcd's backend size and its part in use (POST /v3/maintenance/status). */
static void db_size(const char *url, int64_t *size, int64_t *in_use)
{
    struct httpc *h = httpc_new();
    char *u = xasprintf("%s/v3/maintenance/status", url);
    const char *hdrs[] = {"Content-Type: application/json", NULL};
    struct httpc_request req = {.method = "POST", .url = u, .headers = hdrs, .body = "{}",
                                .body_len = 2, .timeout_ms = 10000};
    struct httpc_response resp = {0};
    struct tern_err err = {0};
    *size = *in_use = 0;
    if (httpc_do(h, &req, &resp, &err) == 0 && resp.status == 200) {
        cJSON *j = NULL;
        if (json_parse(buf_str(&resp.body), resp.body.len, &j, NULL) == 0) {
            json_item_int64(json_get(j, "dbSize"), size);
            json_item_int64(json_get(j, "dbSizeInUse"), in_use);
        }
        cJSON_Delete(j);
    }
    httpc_response_done(&resp);
    httpc_free(h);
    free(u);
}

/* Keys, bytes and the largest value under the session's prefix (paged). */
static int keyspace(struct sim *m, struct sim_point *p)
{
    char *from = xasprintf("/tern/v1/s/%s/", m->o->uid);
    char *end = xasprintf("/tern/v1/s/%s0", m->o->uid);
    int rc = 0;
    for (bool more = true; more && rc == 0;) {
        struct etcd_range_resp rr = {0};
        rc = etcd_range(m->c,
                        &(struct etcd_range_req){.keys = {.key = from, .range_end = end},
                                                 .limit = 64},
                        &rr, m->err);
        for (size_t i = 0; rc == 0 && i < rr.nkvs; i++) {
            p->bytes += strlen(rr.kvs[i].key) + rr.kvs[i].value_len;
            if (rr.kvs[i].value_len > p->max_value)
                p->max_value = rr.kvs[i].value_len;
        }
        p->keys += rr.nkvs;
        more = rc == 0 && rr.more && rr.nkvs;
        if (more) {
            free(from);
            from = xasprintf("%s\x01", rr.kvs[rr.nkvs - 1].key);
        }
        etcd_range_resp_done(&rr);
    }
    free(from);
    free(end);
    return rc;
}

struct refold {
    struct replay_state s;
    size_t n;
    struct tern_err *err;
};

static int refold_fn(void *ctx, const struct journal_event *ev)
{
    struct refold *r = ctx;
    r->n++;
    if (ev->type == JOURNAL_EV_SNAPSHOT && r->s.last_seq == 0) {
        struct replay_state ns;
        int rc = snapshot_decode(json_get(ev->data, "state"), ev->seq, &ns, r->err);
        if (rc)
            return rc;
        replay_state_done(&r->s);
        r->s = ns;
        return 0;
    }
    struct replay_event e = {ev->seq, ev->type_name, ev->turn, ev->key, ev->data, ev->time};
    return replay_apply(&r->s, &e, r->err);
}

/* What a runner starting now does (turn.c's replay_all), timed, and
 * whether it ends up with the writer's state. */
static int replay_check(struct sim *m, struct sim_point *p)
{
    double t0 = mono_ms();
    struct journal *j = NULL;
    struct refold r = {.err = m->err};
    replay_state_init(&r.s);
    int rc = journal_open(m->c, m->o->uid, NULL, &j, m->err);
    if (rc == 0)
        rc = journal_replay(j, JOURNAL_FROM_SNAPSHOT, refold_fn, &r, NULL, m->err);
    p->replay_ms = mono_ms() - t0;
    p->replay_events = r.n;
    if (rc == 0) {
        cJSON *a = snapshot_encode(&m->s), *b = snapshot_encode(&r.s);
        /* the writer folds without the journal's event times (a runner uses
         * its clock for the first one): the session's start is the one
         * field allowed to differ */
        cJSON_DeleteItemFromObjectCaseSensitive(a, "firstTimeMs");
        cJSON_DeleteItemFromObjectCaseSensitive(b, "firstTimeMs");
        char *ta = json_print(a), *tb = json_print(b);
        p->state_bytes = strlen(ta);
        if (strcmp(ta, tb) != 0 || r.s.last_seq != m->s.last_seq)
            rc = err_set(m->err, TERN_EINVALID,
                         "turn %d: a replay from the snapshot differs from the writer's state",
                         p->turn);
        free(ta);
        free(tb);
        cJSON_Delete(a);
        cJSON_Delete(b);
    }
    replay_state_done(&r.s);
    journal_free(j);
    return rc;
}

static int measure(struct sim *m, int turn, double since, int turns_since, struct sim_point *p)
{
    memset(p, 0, sizeof *p);
    p->turn = turn;
    p->last_seq = journal_summary(m->j)->last_seq;
    p->snapshot_seq = journal_summary(m->j)->snapshot_seq;
    p->snapshots = m->snapshots;
    p->ms_per_turn = turns_since ? (mono_ms() - since) / turns_since : 0;
    db_size(m->o->etcd_url, &p->db_size, &p->db_in_use);
    p->db_in_use_compacted = p->db_in_use;
    int64_t rev = 0, dummy = 0;
    if (m->o->keep_revisions > 0 && etcd_revision(m->c, &rev, m->err) == 0 &&
        rev > m->o->keep_revisions &&
        etcd_compact(m->c, rev - m->o->keep_revisions, true, m->err) == 0)
        db_size(m->o->etcd_url, &dummy, &p->db_in_use_compacted);
    int rc = keyspace(m, p);
    if (rc == 0)
        rc = replay_check(m, p);
    return rc;
}

int sim_run(const struct sim_opts *o, struct sim_point *ret_final, struct tern_err *err)
{
    struct sim m = {.o = o, .err = err};
    replay_state_init(&m.s);
    const char *eps[] = {o->etcd_url};
    int rc = etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1}, &m.c, err);
    if (rc == 0)
        rc = journal_open(m.c, o->uid, NULL, &m.j, err);
    double since = mono_ms();
    int last = 0;
    struct sim_point p = {0};
    for (int t = 1; rc == 0 && t <= o->turns; t++) {
        rc = one_turn(&m, t);
        bool due = t == o->turns || (o->report_every > 0 && t % o->report_every == 0);
        if (rc == 0 && due) {
            rc = measure(&m, t, since, t - last, &p);
            if (rc == 0 && o->report)
                o->report(o->ctx, &p);
            since = mono_ms();
            last = t;
        }
    }
    if (rc == 0 && ret_final)
        *ret_final = p;
    replay_state_done(&m.s);
    journal_free(m.j);
    etcd_free(m.c);
    return rc;
}
