/* test_journal.c - the session journal against a real etcd. */
#include "harness.h"

#include "../support/etcd_fixture.h"
#include "base/mem.h"
#include "etcd/etcd.h"
#include "journal/journal.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct etcd_fixture fx;

static struct etcd *client(void)
{
    const char *eps[] = {fx.url};
    struct etcd *c = NULL;
    struct tern_err e = {0};
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1}, &c, &e));
    return c;
}

static struct etcd *start(void)
{
    struct tern_err e = {0};
    if (etcd_fixture_start(&fx, th_tmpdir(), NULL, &e))
        th_fail(__FILE__, __LINE__, "etcd fixture: %s", e.msg);
    return client();
}

static struct journal *jopen(struct etcd *c, const char *uid)
{
    struct journal *j = NULL;
    struct tern_err e = {0};
    int r = journal_open(c, uid, NULL, &j, &e);
    if (r)
        th_fail(__FILE__, __LINE__, "journal_open %s: %d %s", uid, r, e.msg);
    return j;
}

static uint64_t append_i(struct journal *j, enum journal_type t, int64_t i)
{
    cJSON *d = cJSON_CreateObject();
    json_add_int64(d, "i", i);
    uint64_t seq = 0;
    struct tern_err e = {0};
    int r =
        journal_append(j, &(struct journal_append_req){.type = t, .turn = 1, .data = d}, &seq, &e);
    cJSON_Delete(d);
    if (r)
        th_fail(__FILE__, __LINE__, "append %lld: %d %s", (long long)i, r, e.msg);
    return seq;
}

/* Collects replayed events. */
struct collect {
    uint64_t seqs[4096];
    int64_t is[4096];
    char types[4096][24];
    size_t n;
    pthread_mutex_t mu;
    int stop_at;           /* stop (return 7) after this many, 0 = never */
    atomic_bool block;     /* tail: hold the callback while raised */
    atomic_int blocked_at; /* tail: block when n reaches this */
};

static int collect_fn(void *ctx, const struct journal_event *ev)
{
    struct collect *c = ctx;
    pthread_mutex_lock(&c->mu);
    if (c->n < 4096) {
        c->seqs[c->n] = ev->seq;
        int64_t i = -1;
        const cJSON *it = json_get(ev->data, "i");
        if (it)
            json_item_int64(it, &i);
        c->is[c->n] = i;
        snprintf(c->types[c->n], sizeof c->types[0], "%s", ev->type_name);
    }
    c->n++;
    size_t n = c->n;
    pthread_mutex_unlock(&c->mu);
    if ((int)n == atomic_load(&c->blocked_at)) {
        while (atomic_load(&c->block)) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    }
    return c->stop_at && (int)n >= c->stop_at ? 7 : 0;
}

static size_t collected(struct collect *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

static void wait_collected(struct collect *c, size_t n, long ms)
{
    for (long t = 0; t < ms && collected(c) < n; t += 10) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_EQ_INT(collected(c), n);
}

/* Each test runs in its own process: a static pool avoids freeing. */
static struct collect collects[2];
static int ncollects;

static struct collect *new_collect(void)
{
    struct collect *c = &collects[ncollects++ % 2];
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

TEST(append_replay_summary_and_fence)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    struct journal *j = jopen(c, "u1");
    ASSERT_OK(journal_create_meta(j, "team-a", "review-42", &e));
    ASSERT_OK(journal_create_meta(j, "team-a", "review-42", &e)); /* idempotent */
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "text", "hello");
    ASSERT_OK(journal_append(
        j, &(struct journal_append_req){.type = JOURNAL_EV_USER_MESSAGE, .data = d}, NULL, &e));
    cJSON_Delete(d);
    d = cJSON_Parse(
        "{\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":7,\"cost_micro_usd\":3}}");
    uint64_t seq = 0;
    ASSERT_OK(journal_append(
        j, &(struct journal_append_req){.type = JOURNAL_EV_MODEL_RESPONSE, .turn = 1, .data = d},
        &seq, &e));
    cJSON_Delete(d);
    ASSERT_EQ_INT(seq, 2);
    d = cJSON_Parse("{\"id\":\"ap-1\",\"tool\":\"exec_command\",\"summary\":\"git push\"}");
    ASSERT_OK(journal_append(
        j,
        &(struct journal_append_req){
            .type = JOURNAL_EV_APPROVAL_REQUESTED, .turn = 1, .key = "u1/call-1", .data = d},
        &seq, &e));
    cJSON_Delete(d);
    const struct journal_summary *s = journal_summary(j);
    ASSERT_EQ_INT(s->last_seq, 3);
    ASSERT_EQ_INT(s->usage.prompt_tokens, 100);
    ASSERT_EQ_STR(s->pending.id, "ap-1");

    /* a second handle sees the same summary; the first is now fenced */
    struct journal *k = jopen(c, "u1");
    ASSERT_EQ_INT(journal_summary(k)->last_seq, 3);
    ASSERT_EQ_STR(journal_summary(k)->pending.tool, "exec_command");
    d = cJSON_Parse("{\"id\":\"ap-1\",\"decision\":\"approve\"}");
    ASSERT_OK(journal_append(
        k, &(struct journal_append_req){.type = JOURNAL_EV_APPROVAL_DECIDED, .data = d}, &seq, &e));
    cJSON_Delete(d);
    ASSERT_NULL(journal_summary(k)->pending.id);
    ASSERT_EQ_INT(
        journal_append(j, &(struct journal_append_req){.type = JOURNAL_EV_TOOL_CALL, .turn = 1},
                       &seq, &e),
        TERN_EFENCED);
    ASSERT_CONTAINS(e.msg, "another writer");
    ASSERT_OK(journal_refresh(j, &e));
    ASSERT_EQ_INT(append_i(j, JOURNAL_EV_TOOL_CALL, 0), 5);

    struct collect *col = new_collect();
    struct journal_summary rs;
    ASSERT_OK(journal_replay(k, 1, collect_fn, col, &rs, &e));
    ASSERT_EQ_INT(col->n, 5);
    for (size_t i = 0; i < 5; i++)
        ASSERT_EQ_INT(col->seqs[i], i + 1);
    ASSERT_EQ_STR(col->types[4], "tool_call");
    ASSERT_EQ_INT(rs.last_seq, 5);
    ASSERT_EQ_INT(rs.usage.tool_calls, 1);
    ASSERT_EQ_INT(rs.usage.model_turns, 1);
    ASSERT_EQ_INT(rs.messages, 1);
    /* the stored summary equals the fold */
    cJSON *sa = journal_summary_to_json(&rs), *sj = journal_summary_to_json(journal_summary(j));
    char *a = json_print(sa), *b = json_print(sj);
    cJSON_Delete(sa);
    cJSON_Delete(sj);
    ASSERT_EQ_STR(a, b);
    free(a);
    free(b);
    journal_summary_done(&rs);
    /* stop early */
    col->n = 0;
    col->stop_at = 2;
    ASSERT_EQ_INT(journal_replay(k, 1, collect_fn, col, NULL, &e), 7);

    /* bad input */
    struct journal *bad = NULL;
    ASSERT_EQ_INT(journal_open(c, "a/b", NULL, &bad, &e), TERN_EINVALID);
    ASSERT_EQ_INT(
        journal_append(j, &(struct journal_append_req){.type = JOURNAL_EV_UNKNOWN}, NULL, &e),
        TERN_EINVALID);

    ASSERT_OK(journal_delete(c, "u1", &e));
    struct journal *z = jopen(c, "u1");
    ASSERT_EQ_INT(journal_summary(z)->last_seq, 0);
    journal_free(z);
    journal_free(j);
    journal_free(k);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

/* Two processes race to append the same seq, many rounds: both open the
 * journal (so both will append seq N+1 against the same summary revision),
 * then both are released at once. Exactly one wins; the other is fenced. */
TEST_T(two_processes_race_same_seq, 60)
{
    struct etcd *c = start();
    enum { ROUNDS = 25 };
    int ctl[2][2], res[2][2];
    pid_t pids[2];
    for (int p = 0; p < 2; p++) {
        ASSERT_OK(pipe(ctl[p]));
        ASSERT_OK(pipe(res[p]));
        pids[p] = fork();
        ASSERT_TRUE(pids[p] >= 0);
        if (pids[p] == 0) {
            struct etcd *cc = client();
            for (int round = 0; round < ROUNDS; round++) {
                char b;
                if (read(ctl[p][0], &b, 1) != 1) /* "open" */
                    _exit(2);
                struct journal *j = jopen(cc, "race");
                char ready = 'R';
                if (write(res[p][1], &ready, 1) != 1)
                    _exit(3);
                if (read(ctl[p][0], &b, 1) != 1) /* "go" */
                    _exit(2);
                struct tern_err e = {0};
                cJSON *d = cJSON_CreateObject();
                json_add_int64(d, "writer", p);
                json_add_int64(d, "round", round);
                int r = journal_append(
                    j, &(struct journal_append_req){.type = JOURNAL_EV_TOOL_CALL, .data = d}, NULL,
                    &e);
                cJSON_Delete(d);
                char out = r == 0 ? 'W' : r == TERN_EFENCED ? 'F' : 'E';
                if (write(res[p][1], &out, 1) != 1)
                    _exit(3);
                journal_free(j);
            }
            etcd_free(cc);
            _exit(0);
        }
    }
    int wins[2] = {0, 0};
    for (int round = 0; round < ROUNDS; round++) {
        char r[2];
        for (int p = 0; p < 2; p++)
            ASSERT_EQ_INT(write(ctl[p][1], "o", 1), 1);
        for (int p = 0; p < 2; p++) {
            ASSERT_EQ_INT(read(res[p][0], &r[p], 1), 1);
            ASSERT_EQ_INT(r[p], 'R');
        }
        for (int p = 0; p < 2; p++)
            ASSERT_EQ_INT(write(ctl[p][1], "g", 1), 1);
        for (int p = 0; p < 2; p++)
            ASSERT_EQ_INT(read(res[p][0], &r[p], 1), 1);
        /* exactly one winner, and the loser is told it was fenced */
        ASSERT_TRUE((r[0] == 'W' && r[1] == 'F') || (r[0] == 'F' && r[1] == 'W'));
        wins[0] += r[0] == 'W';
        wins[1] += r[1] == 'W';
    }
    for (int p = 0; p < 2; p++) {
        int st;
        ASSERT_EQ_INT(waitpid(pids[p], &st, 0), pids[p]);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    struct journal *j = jopen(c, "race");
    struct collect *col = new_collect();
    struct tern_err e = {0};
    struct journal_summary rs;
    ASSERT_OK(journal_replay(j, 1, collect_fn, col, &rs, &e));
    /* one event per round, no gaps, no duplicates */
    ASSERT_EQ_INT(col->n, ROUNDS);
    ASSERT_EQ_INT(rs.last_seq, ROUNDS);
    ASSERT_EQ_INT(rs.usage.tool_calls, ROUNDS);
    fprintf(stderr, "wins: process 0: %d, process 1: %d\n", wins[0], wins[1]);
    journal_summary_done(&rs);
    journal_free(j);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

/* Same seq, deterministic: both handles opened before either appends. */
TEST(stale_writer_is_fenced)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    struct journal *a = jopen(c, "f"), *b = jopen(c, "f");
    append_i(a, JOURNAL_EV_TOOL_CALL, 1);
    ASSERT_EQ_INT(
        journal_append(b, &(struct journal_append_req){.type = JOURNAL_EV_TOOL_CALL}, NULL, &e),
        TERN_EFENCED);
    ASSERT_EQ_INT(journal_summary(b)->last_seq, 0);
    journal_free(a);
    journal_free(b);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

/* Summaries read ahead, many in one request: each is the one journal_open
 * reads, absent ones say so, a handle opened from a read appends against its
 * revision, and one opened from an older read is fenced like any stale
 * handle. */
TEST(summaries_read_in_one_request)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    struct journal *a = jopen(c, "sa"), *b = jopen(c, "sb");
    append_i(a, JOURNAL_EV_TOOL_CALL, 1);
    append_i(a, JOURNAL_EV_TOOL_CALL, 2);
    append_i(b, JOURNAL_EV_TOOL_CALL, 3);
    const char *uids[] = {"sa", "none", "sb"};
    struct journal_sum_read got[3];
    int64_t rev = 0;
    ASSERT_OK(journal_read_sums(c, uids, 3, got, &rev, &e));
    ASSERT_TRUE(got[0].present && got[2].present);
    ASSERT_FALSE(got[1].present);
    ASSERT_EQ_INT(got[0].mod_revision, journal_seen_revision(a));
    ASSERT_EQ_INT(got[2].mod_revision, journal_seen_revision(b));
    ASSERT_TRUE(rev >= got[0].mod_revision && rev >= got[2].mod_revision);

    struct journal *ra = NULL, *rn = NULL;
    ASSERT_OK(journal_open_read(c, "sa", NULL, &got[0], &ra, &e));
    ASSERT_EQ_INT(journal_summary(ra)->last_seq, 2);
    ASSERT_EQ_INT(journal_seen_revision(ra), journal_seen_revision(a));
    cJSON *x = journal_summary_to_json(journal_summary(ra));
    cJSON *y = journal_summary_to_json(journal_summary(a));
    ASSERT_TRUE(json_equal(x, y));
    cJSON_Delete(x);
    cJSON_Delete(y);
    ASSERT_OK(journal_open_read(c, "none", NULL, &got[1], &rn, &e)); /* opened as new */
    ASSERT_EQ_INT(journal_summary(rn)->last_seq, 0);
    /* the read is current: ra appends; a's handle is now stale */
    ASSERT_EQ_INT(append_i(ra, JOURNAL_EV_TOOL_CALL, 4), 3);
    ASSERT_EQ_INT(
        journal_append(a, &(struct journal_append_req){.type = JOURNAL_EV_TOOL_CALL}, NULL, &e),
        TERN_EFENCED);
    /* a handle from the same (now old) read is fenced too: no gap, no dup */
    struct journal *old = NULL;
    ASSERT_OK(journal_open_read(c, "sa", NULL, &got[0], &old, &e));
    ASSERT_EQ_INT(
        journal_append(old, &(struct journal_append_req){.type = JOURNAL_EV_TOOL_CALL}, NULL, &e),
        TERN_EFENCED);
    struct journal *fresh = jopen(c, "sa");
    ASSERT_EQ_INT(journal_summary(fresh)->last_seq, 3);
    /* a summary that does not decode is an error, not an empty journal */
    struct journal_sum_read junk = {.present = true, .value = xstrdup("{not json"),
                                    .value_len = 9, .mod_revision = 1};
    struct journal *bad = NULL;
    ASSERT_EQ_INT(journal_open_read(c, "sa", NULL, &junk, &bad, &e), TERN_EPARSE);
    ASSERT_NULL(bad);
    journal_sum_read_done(&junk);
    /* bounds: 0 or too many sessions, a bad uid */
    const char *many[JOURNAL_SUM_BATCH + 1];
    for (size_t i = 0; i <= JOURNAL_SUM_BATCH; i++)
        many[i] = "sa";
    ASSERT_EQ_INT(journal_read_sums(c, many, 0, got, NULL, &e), TERN_EINVALID);
    ASSERT_EQ_INT(journal_read_sums(c, many, JOURNAL_SUM_BATCH + 1, got, NULL, &e),
                  TERN_EINVALID);
    const char *slash[] = {"sa", "a/b"};
    ASSERT_EQ_INT(journal_read_sums(c, slash, 2, got, NULL, &e), TERN_EINVALID);
    /* a full batch: the same session 32 times reads 32 equal answers */
    struct journal_sum_read full[JOURNAL_SUM_BATCH];
    ASSERT_OK(journal_read_sums(c, many, JOURNAL_SUM_BATCH, full, NULL, &e));
    for (size_t i = 0; i < JOURNAL_SUM_BATCH; i++) {
        ASSERT_TRUE(full[i].present);
        ASSERT_EQ_INT(full[i].mod_revision, journal_seen_revision(fresh));
        journal_sum_read_done(&full[i]);
    }
    for (size_t i = 0; i < 3; i++)
        journal_sum_read_done(&got[i]);
    journal_free(a);
    journal_free(b);
    journal_free(ra);
    journal_free(rn);
    journal_free(old);
    journal_free(fresh);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

struct appender {
    struct etcd *c;
    int n;
    atomic_int done;
    int unknowns;
    struct journal_stats st;
    int fail;
    char msg[700];
};

static void *appender_main(void *arg)
{
    struct appender *ap = arg;
    struct journal *j = NULL;
    struct tern_err e = {0};
    struct journal_opts o = {.retry_ms = 20000};
    if (journal_open(ap->c, "crash", &o, &j, &e)) {
        ap->fail = 1;
        snprintf(ap->msg, sizeof ap->msg, "open: %s", e.msg);
        return NULL;
    }
    for (int i = 0; i < ap->n;) {
        cJSON *d = cJSON_CreateObject();
        json_add_int64(d, "i", i);
        int r = journal_append(
            j, &(struct journal_append_req){.type = JOURNAL_EV_TOOL_RESULT, .data = d}, NULL, &e);
        cJSON_Delete(d);
        if (r == 0) {
            i++;
            atomic_store(&ap->done, i);
            continue;
        }
        if (r == TERN_EUNKNOWN) {
            ap->unknowns++;
            bool committed = false;
            while (journal_resolve(j, &committed, NULL, &e) != 0) {
                struct timespec ts = {0, 50000000};
                nanosleep(&ts, NULL);
            }
            if (committed) {
                i++;
                atomic_store(&ap->done, i);
            }
            continue;
        }
        ap->fail = 1;
        snprintf(ap->msg, sizeof ap->msg, "append %d: %d %s", i, r, e.msg);
        break;
    }
    journal_get_stats(j, &ap->st);
    journal_free(j);
    return NULL;
}

/* etcd is SIGKILLed three times in the middle of a stream of appends and
 * restarted: the journal holds every event exactly once, in order. */
TEST_T(kill_etcd_mid_appends_no_dup_no_gap, 90)
{
    struct etcd *c = start();
    struct appender ap = {.c = c, .n = 150};
    atomic_init(&ap.done, 0);
    pthread_t th;
    ASSERT_OK(pthread_create(&th, NULL, appender_main, &ap));
    struct tern_err e = {0};
    for (int k = 1; k <= 3; k++) {
        for (int t = 0; t < 20000 && atomic_load(&ap.done) < k * 30 && !ap.fail; t += 2) {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
        ASSERT_FALSE(ap.fail);
        etcd_fixture_kill(&fx);
        if (etcd_fixture_restart(&fx, &e))
            th_fail(__FILE__, __LINE__, "restart: %s", e.msg);
    }
    pthread_join(th, NULL);
    if (ap.fail)
        th_fail(__FILE__, __LINE__, "appender: %s", ap.msg);
    struct journal *j = jopen(c, "crash");
    struct collect *col = new_collect();
    struct journal_summary rs;
    ASSERT_OK(journal_replay(j, 1, collect_fn, col, &rs, &e));
    ASSERT_EQ_INT(col->n, 150);
    for (size_t i = 0; i < col->n; i++) {
        ASSERT_EQ_INT(col->seqs[i], i + 1);
        ASSERT_EQ_INT(col->is[i], (int64_t)i);
    }
    ASSERT_EQ_INT(rs.last_seq, 150);
    fprintf(stderr,
            "lost replies resolved by read-back: %llu (re-sent: %llu, retries: %llu, "
            "unresolved after budget: %d)\n",
            (unsigned long long)ap.st.unknown_outcomes, (unsigned long long)ap.st.resends,
            (unsigned long long)ap.st.retries, ap.unknowns);
    journal_summary_done(&rs);
    journal_free(j);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

static void *cont_later(void *arg)
{
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL); /* longer than the client timeout: the reply is lost */
    kill(*(pid_t *)arg, SIGCONT);
    return NULL;
}

/* Deterministic lost replies: etcd is frozen (SIGSTOP) while an append is in
 * flight, so the client times out after sending. The journal must decide
 * by reading back, whether etcd then applies the txn (thawed) or loses it
 * (killed and restarted): exactly one event either way. */
TEST_T(lost_reply_resolved_by_read_back, 60)
{
    struct etcd *c0 = start();
    etcd_free(c0);
    struct tern_err e = {0};
    const char *eps[] = {fx.url};
    struct etcd *c = NULL;
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = eps, .nendpoints = 1, .timeout_ms = 300},
                       &c, &e));
    struct journal *j = jopen(c, "lost");
    append_i(j, JOURNAL_EV_TOOL_CALL, 0);

    /* 1: frozen, then thawed */
    kill(fx.pid, SIGSTOP);
    pthread_t th;
    ASSERT_OK(pthread_create(&th, NULL, cont_later, &fx.pid));
    ASSERT_EQ_INT(append_i(j, JOURNAL_EV_TOOL_CALL, 1), 2);
    pthread_join(th, NULL);
    struct journal_stats st;
    journal_get_stats(j, &st);
    fprintf(stderr, "stats: unknown %llu resends %llu retries %llu\n",
            (unsigned long long)st.unknown_outcomes, (unsigned long long)st.resends,
            (unsigned long long)st.retries);
    ASSERT_CMP_INT(st.unknown_outcomes, >=, 1);

    /* 2: frozen until the append's budget runs out (undecided: the handle
     * refuses further appends), then killed and restarted: resolve decides */
    struct journal_opts o = {.retry_ms = 700};
    struct journal *short_j = NULL;
    ASSERT_OK(journal_open(c, "lost", &o, &short_j, &e));
    cJSON *d = cJSON_CreateObject();
    json_add_int64(d, "i", 2);
    kill(fx.pid, SIGSTOP);
    ASSERT_EQ_INT(
        journal_append(short_j,
                       &(struct journal_append_req){.type = JOURNAL_EV_TOOL_CALL, .data = d}, NULL,
                       &e),
        TERN_EUNKNOWN);
    ASSERT_EQ_INT(
        journal_append(short_j,
                       &(struct journal_append_req){.type = JOURNAL_EV_TOOL_CALL, .data = d}, NULL,
                       &e),
        TERN_EUNKNOWN);
    ASSERT_CONTAINS(e.msg, "journal_resolve");
    cJSON_Delete(d);
    etcd_fixture_kill(&fx);
    if (etcd_fixture_restart(&fx, &e))
        th_fail(__FILE__, __LINE__, "restart: %s", e.msg);
    bool committed = true;
    uint64_t seq = 0;
    ASSERT_OK(journal_resolve(short_j, &committed, &seq, &e));
    uint64_t expect = committed ? 3 : 2;
    ASSERT_EQ_INT(journal_summary(short_j)->last_seq, expect);
    ASSERT_EQ_INT(append_i(short_j, JOURNAL_EV_TOOL_CALL, 3), expect + 1);

    struct collect *col = new_collect();
    ASSERT_OK(journal_replay(short_j, 1, collect_fn, col, NULL, &e));
    ASSERT_EQ_INT(col->n, expect + 1);
    for (size_t i = 0; i < col->n; i++)
        ASSERT_EQ_INT(col->seqs[i], i + 1);
    fprintf(stderr, "frozen+killed append was %s\n", committed ? "committed" : "not committed");
    journal_free(short_j);
    journal_free(j);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

struct tailer {
    struct etcd *c;
    struct collect *col;
    atomic_bool cancel;
    int rc;
    struct tern_err e;
};

static void *tail_main(void *arg)
{
    struct tailer *t = arg;
    struct journal *j = NULL;
    if (journal_open(t->c, "tail", NULL, &j, &t->e)) {
        t->rc = -999;
        return NULL;
    }
    t->rc = journal_tail(j, 1, collect_fn, t->col, &t->cancel, &t->e);
    journal_free(j);
    return NULL;
}

/* The tail's watch falls behind an etcd compaction (etcd restarted and
 * compacted while the consumer was busy): it relists and still delivers
 * every event exactly once, in order. */
TEST_T(tail_survives_compaction, 60)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    struct journal *j = jopen(c, "tail");
    for (int i = 0; i < 5; i++)
        append_i(j, JOURNAL_EV_TOOL_CALL, i);
    struct tailer t = {.c = client(), .col = new_collect()};
    atomic_init(&t.cancel, false);
    atomic_store(&t.col->block, true);
    atomic_store(&t.col->blocked_at, 10);
    pthread_t th;
    ASSERT_OK(pthread_create(&th, NULL, tail_main, &t));
    wait_collected(t.col, 5, 10000); /* listed */
    for (int i = 5; i < 10; i++)
        append_i(j, JOURNAL_EV_TOOL_CALL, i);
    wait_collected(t.col, 10, 10000); /* watched; the consumer now blocks */
    /* meanwhile: etcd restarts (the watch stream breaks), more events, and
     * the history is compacted past the watch's resume revision */
    etcd_fixture_kill(&fx);
    if (etcd_fixture_restart(&fx, &e))
        th_fail(__FILE__, __LINE__, "restart: %s", e.msg);
    for (int i = 10; i < 40; i++)
        append_i(j, JOURNAL_EV_TOOL_CALL, i);
    int64_t rev;
    ASSERT_OK(etcd_revision(c, &rev, &e));
    ASSERT_OK(etcd_compact(c, rev, true, &e));
    atomic_store(&t.col->block, false);
    wait_collected(t.col, 40, 20000);
    for (int i = 40; i < 45; i++)
        append_i(j, JOURNAL_EV_TOOL_CALL, i);
    wait_collected(t.col, 45, 10000);
    atomic_store(&t.cancel, true);
    pthread_join(th, NULL);
    ASSERT_EQ_INT(t.rc, -ECANCELED);
    for (size_t i = 0; i < 45; i++) {
        ASSERT_EQ_INT(t.col->seqs[i], i + 1);
        ASSERT_EQ_INT(t.col->is[i], (int64_t)i);
    }
    journal_free(j);
    etcd_free(t.c);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

/* A journal written by the pre-release schema v0 (no "v", kind/ts/idem/
 * payload, "tool_output", token counts in payload.tokens, no summary key). */
TEST(replay_old_schema_v0)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    const char *v0[] = {
        "{\"seq\":1,\"kind\":\"user_message\",\"ts\":1700000000123,\"turn\":0,\"payload\":{"
        "\"text\":\"hi\"}}",
        "{\"seq\":2,\"kind\":\"turn_started\",\"ts\":1700000001000,\"turn\":1}",
        "{\"seq\":3,\"kind\":\"model_response\",\"ts\":1700000002000,\"turn\":1,\"payload\":{"
        "\"tokens\":{\"in\":50,\"out\":5},\"tool_calls\":[{\"id\":\"c1\"}]}}",
        "{\"seq\":4,\"kind\":\"tool_call\",\"ts\":1700000003000,\"turn\":1,\"idem\":\"old/"
        "c1\",\"payload\":{\"name\":\"exec_command\"}}",
        "{\"seq\":5,\"kind\":\"tool_output\",\"ts\":1700000004000,\"turn\":1,\"idem\":\"old/"
        "c1\",\"payload\":{\"stdout\":\"ok\"}}",
        "{\"seq\":6,\"kind\":\"turn_finished\",\"ts\":1700000005000,\"turn\":1,\"payload\":{"
        "\"outcome\":\"completed\"}}",
    };
    for (int i = 0; i < 6; i++) {
        char key[80];
        snprintf(key, sizeof key, "/tern/v1/s/old/ev/%016x", i + 1);
        struct etcd_put_resp pr;
        ASSERT_OK(etcd_put(
            c, &(struct etcd_put_req){.key = key, .value = v0[i], .value_len = strlen(v0[i])}, &pr,
            &e));
        etcd_put_resp_done(&pr);
    }
    struct journal *j = jopen(c, "old"); /* no sum: folded from the events */
    const struct journal_summary *s = journal_summary(j);
    ASSERT_EQ_INT(s->last_seq, 6);
    ASSERT_EQ_INT(s->usage.prompt_tokens, 50);
    ASSERT_EQ_INT(s->usage.completion_tokens, 5);
    ASSERT_EQ_INT(s->usage.tool_calls, 1);
    ASSERT_EQ_STR(s->outcome, "completed");
    ASSERT_EQ_INT(journal_seen_revision(j), 0);
    /* a v1 writer continues the old journal */
    ASSERT_EQ_INT(append_i(j, JOURNAL_EV_USER_MESSAGE, 7), 7);
    struct collect *col = new_collect();
    struct journal_summary rs;
    ASSERT_OK(journal_replay(j, 1, collect_fn, col, &rs, &e));
    ASSERT_EQ_INT(col->n, 7);
    ASSERT_EQ_STR(col->types[4], "tool_result");
    ASSERT_EQ_INT(rs.messages, 2);
    ASSERT_EQ_INT(rs.usage.model_turns, 1);
    journal_summary_done(&rs);
    journal_free(j);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

static int keep_data(void *ctx, const struct journal_event *ev)
{
    if (ev->seq == 2)
        *(char **)ctx = json_print(ev->data);
    return 0;
}

struct keep_last {
    char *content;
};

static int keep_last_fn(void *ctx, const struct journal_event *ev)
{
    struct keep_last *k = ctx;
    const cJSON *c = json_get(ev->data, "content");
    free(k->content);
    k->content = cJSON_IsString(c) ? xstrdup(c->valuestring) : NULL;
    return 0;
}

TEST_T(oversize_event_chunked_and_truncation, 90)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    struct journal *j = jopen(c, "big");
    append_i(j, JOURNAL_EV_TOOL_CALL, 0);
    size_t n = 1300000; /* more than one etcd request can carry */
    char *big = xmalloc(n + 1);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('a' + i % 26);
    big[n] = 0;
    cJSON *d = cJSON_CreateObject();
    json_add_string(d, "stdout", big);
    uint64_t seq = 0;
    ASSERT_OK(journal_append(
        j, &(struct journal_append_req){.type = JOURNAL_EV_TOOL_RESULT, .data = d}, &seq, &e));
    ASSERT_EQ_INT(seq, 2);
    append_i(j, JOURNAL_EV_TOOL_CALL, 3);
    char *want = json_print(d);
    char *got = NULL;
    struct journal *k = jopen(c, "big");
    ASSERT_OK(journal_replay(k, 1, keep_data, &got, NULL, &e));
    ASSERT_NOT_NULL(got);
    ASSERT_EQ_INT(strlen(got), strlen(want));
    ASSERT_TRUE(strcmp(got, want) == 0);
    free(got);
    /* the head carries the data's hash; a chunk that changed is refused */
    struct etcd_kv *head = NULL;
    ASSERT_OK(etcd_get(c, "/tern/v1/s/big/ev/0000000000000002", &head, NULL, &e));
    ASSERT_CONTAINS(head->value, "\"sha256\":\"");
    cJSON *hj = cJSON_Parse(head->value);
    const char *cid = json_get(json_get(hj, "chunks"), "id")->valuestring;
    char *ck = xasprintf("/tern/v1/s/big/ch/0000000000000002/%s/0001", cid);
    struct etcd_kv *chunk = NULL;
    ASSERT_OK(etcd_get(c, ck, &chunk, NULL, &e));
    char *bad = xmemdup(chunk->value, chunk->value_len + 1);
    bad[10] = bad[10] == 'a' ? 'b' : 'a';
    struct etcd_put_resp pr;
    ASSERT_OK(etcd_put(c, &(struct etcd_put_req){.key = ck, .value = bad,
                                                 .value_len = chunk->value_len}, &pr, &e));
    etcd_put_resp_done(&pr);
    ASSERT_EQ_INT(journal_replay(k, 1, NULL, NULL, NULL, &e), TERN_EPARSE);
    ASSERT_CONTAINS(e.msg, "sha256");
    ASSERT_OK(etcd_put(c, &(struct etcd_put_req){.key = ck, .value = chunk->value,
                                                 .value_len = chunk->value_len}, &pr, &e));
    etcd_put_resp_done(&pr);
    ASSERT_OK(journal_replay(k, 1, NULL, NULL, NULL, &e));
    free(bad);
    free(ck);
    cJSON_Delete(hj);
    etcd_kv_free(chunk);
    etcd_kv_free(head);

    /* just under TERN_JOURNAL_MAX_DATA: written in 40-odd chunk requests,
     * read back in pages (one reply could not hold its base64) */
    size_t nn = TERN_JOURNAL_MAX_DATA - 1024;
    char *near = xmalloc(nn + 1);
    for (size_t i = 0; i < nn; i++)
        near[i] = (char)('A' + i % 26);
    near[nn] = 0;
    cJSON *nd = cJSON_CreateObject();
    json_add_string(nd, "content", near);
    ASSERT_OK(journal_append(
        j, &(struct journal_append_req){.type = JOURNAL_EV_MODEL_RESPONSE, .data = nd}, &seq, &e));
    struct journal *k2 = jopen(c, "big");
    struct keep_last kl = {0};
    ASSERT_OK(journal_replay(k2, seq, keep_last_fn, &kl, NULL, &e));
    ASSERT_NOT_NULL(kl.content);
    ASSERT_EQ_INT(strlen(kl.content), nn);
    ASSERT_TRUE(memcmp(kl.content, near, nn) == 0);
    free(kl.content);
    journal_free(k2);
    cJSON_Delete(nd);
    free(near);

    /* past TERN_JOURNAL_MAX_DATA: refused, nothing written; truncation
     * leaves an explicit marker */
    cJSON *huge = cJSON_CreateObject();
    char *h = xmalloc(TERN_JOURNAL_MAX_DATA + 2);
    memset(h, 'x', TERN_JOURNAL_MAX_DATA + 1);
    h[TERN_JOURNAL_MAX_DATA + 1] = 0;
    json_add_string(huge, "stdout", h);
    free(h);
    ASSERT_EQ_INT(journal_append(
                      j, &(struct journal_append_req){.type = JOURNAL_EV_TOOL_RESULT, .data = huge},
                      NULL, &e),
                  TERN_ETOOLARGE);
    cJSON *tr = journal_truncate_data(huge, 0);
    ASSERT_OK(journal_append(
        j, &(struct journal_append_req){.type = JOURNAL_EV_TOOL_RESULT, .data = tr}, &seq, &e));
    ASSERT_EQ_INT(seq, 5);
    ASSERT_TRUE(cJSON_IsTrue(json_get(tr, "truncated")));
    cJSON_Delete(tr);
    cJSON_Delete(huge);

    /* a fork copies the chunks with the head; a tail reassembles them */
    uint64_t copied = 0;
    ASSERT_OK(journal_copy_until(c, "big", "bigfork", 5, &copied, &e));
    ASSERT_EQ_INT(copied, 5);
    struct journal *f = jopen(c, "bigfork");
    got = NULL;
    ASSERT_OK(journal_replay(f, 1, keep_data, &got, NULL, &e));
    ASSERT_NOT_NULL(got);
    ASSERT_TRUE(strcmp(got, want) == 0);
    free(got);
    got = NULL;
    struct collect *col = new_collect();
    col->stop_at = 5;
    ASSERT_EQ_INT(journal_tail(f, 1, collect_fn, col, NULL, &e), 7);
    ASSERT_EQ_INT(col->n, 5);
    journal_free(f);
    cJSON_Delete(d);
    free(want);
    free(big);
    journal_free(j);
    journal_free(k);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST(compaction_snapshot_and_fork_copy)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    struct journal *j = jopen(c, "src");
    for (int i = 1; i <= 30; i++)
        append_i(j, i % 3 ? JOURNAL_EV_TOOL_CALL : JOURNAL_EV_USER_MESSAGE, i);

    /* fork at 20 (resumable: first 10, then the rest) */
    uint64_t copied = 0;
    ASSERT_OK(journal_copy_until(c, "src", "dst", 10, &copied, &e));
    ASSERT_EQ_INT(copied, 10);
    ASSERT_OK(journal_copy_until(c, "src", "dst", 20, &copied, &e));
    ASSERT_EQ_INT(copied, 10);
    ASSERT_OK(journal_copy_until(c, "src", "dst", 20, &copied, &e));
    ASSERT_EQ_INT(copied, 0);
    ASSERT_EQ_INT(journal_copy_until(c, "src", "dst", 15, &copied, &e), TERN_ECONFLICT);
    struct journal *d = jopen(c, "dst");
    ASSERT_EQ_INT(journal_summary(d)->last_seq, 20);
    struct etcd_kv *a = NULL, *b = NULL;
    ASSERT_OK(etcd_get(c, "/tern/v1/s/src/ev/0000000000000014", &a, NULL, &e));
    ASSERT_OK(etcd_get(c, "/tern/v1/s/dst/ev/0000000000000014", &b, NULL, &e));
    ASSERT_EQ_STR(a->value, b->value);
    etcd_kv_free(a);
    etcd_kv_free(b);
    /* the child diverges: copying more of the parent now conflicts */
    append_i(d, JOURNAL_EV_FORKED_FROM, 0);
    ASSERT_EQ_INT(journal_copy_until(c, "src", "dst", 25, &copied, &e), TERN_ECONFLICT);

    /* compaction: snapshot at 31, older events dropped */
    struct journal_summary before;
    journal_summary_copy(&before, journal_summary(j));
    cJSON *state = cJSON_Parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    uint64_t snap = 0;
    ASSERT_OK(journal_compact(j, state, true, &snap, &e));
    ASSERT_EQ_INT(snap, 31);
    append_i(j, JOURNAL_EV_TOOL_CALL, 32);
    struct collect *col = new_collect();
    struct journal_summary rs;
    ASSERT_OK(journal_replay(j, JOURNAL_FROM_SNAPSHOT, collect_fn, col, &rs, &e));
    ASSERT_EQ_INT(col->n, 2);
    ASSERT_EQ_STR(col->types[0], "snapshot");
    ASSERT_EQ_INT(rs.last_seq, 32);
    ASSERT_EQ_INT(rs.snapshot_seq, 31);
    ASSERT_EQ_INT(rs.usage.tool_calls, before.usage.tool_calls + 1);
    ASSERT_EQ_INT(rs.messages, before.messages);
    journal_summary_done(&rs);
    ASSERT_EQ_INT(journal_replay(j, 1, NULL, NULL, NULL, &e), TERN_ECOMPACTED);
    /* a tail from the snapshot starts there too */
    col = new_collect();
    col->stop_at = 2;
    ASSERT_EQ_INT(journal_tail(j, JOURNAL_FROM_SNAPSHOT, collect_fn, col, NULL, &e), 7);
    ASSERT_EQ_INT(col->seqs[0], 31);
    ASSERT_EQ_INT(col->seqs[1], 32);
    /* a fresh handle resumes from the stored summary */
    struct journal *k = jopen(c, "src");
    ASSERT_EQ_INT(journal_summary(k)->last_seq, 32);
    /* forking a compacted journal starts at its snapshot; before it: gone */
    ASSERT_EQ_INT(journal_copy_until(c, "src", "dst2", 20, &copied, &e), TERN_ECOMPACTED);
    ASSERT_OK(journal_copy_until(c, "src", "dst2", 32, &copied, &e));
    ASSERT_EQ_INT(copied, 2);
    struct journal *d2 = jopen(c, "dst2");
    ASSERT_EQ_INT(journal_summary(d2)->last_seq, 32);
    ASSERT_EQ_INT(journal_summary(d2)->usage.tool_calls, before.usage.tool_calls + 1);
    journal_summary_done(&before);
    cJSON_Delete(state);
    journal_free(d2);
    journal_free(k);
    journal_free(d);
    journal_free(j);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}

TEST(turn_lock_lease)
{
    struct etcd *c = start();
    struct tern_err e = {0};
    struct journal_lock *l = NULL, *m = NULL;
    ASSERT_OK(journal_lock_acquire(c, "lk", "runner-a", 2, &l, &e));
    ASSERT_EQ_INT(journal_lock_acquire(c, "lk", "runner-b", 2, &m, &e), TERN_ECONFLICT);
    ASSERT_CONTAINS(e.msg, "runner-a");
    ASSERT_FALSE(journal_lock_lost(l));
    ASSERT_OK(journal_lock_release(l, &e));
    ASSERT_OK(journal_lock_acquire(c, "lk", "runner-b", 2, &m, &e));
    /* the lease is revoked behind the owner's back: it notices */
    ASSERT_OK(etcd_lease_revoke(c, journal_lock_lease(m), &e));
    for (int i = 0; i < 400 && !journal_lock_lost(m); i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_TRUE(journal_lock_lost(m));
    ASSERT_OK(journal_lock_release(m, &e));
    struct etcd_kv *kv = NULL;
    ASSERT_EQ_INT(etcd_get(c, "/tern/v1/s/lk/lock", &kv, NULL, &e), TERN_ENOTFOUND);
    etcd_free(c);
    etcd_fixture_stop(&fx);
}
