/* Unit tests: controller/sumcache, the journal summaries read ahead. A read
 * is kept only while the summary watch will tell of a later change, is
 * taken once, and a claimed one is waited for. */
#include "harness.h"

#include "base/mem.h"
#include "controller/sumcache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static struct journal_sum_read sum_of(const char *text, int64_t rev)
{
    return (struct journal_sum_read){.present = true, .value = xstrdup(text),
                                     .value_len = strlen(text), .mod_revision = rev};
}

static bool put(struct sumcache *sc, const char *uid, const char *text, int64_t read_rev)
{
    struct journal_sum_read r = sum_of(text, read_rev);
    bool kept = sumcache_put(sc, uid, &r, read_rev);
    if (kept)
        ASSERT_NULL(r.value); /* moved */
    journal_sum_read_done(&r);
    return kept;
}

TEST(a_read_is_kept_only_while_the_watch_runs)
{
    struct sumcache *sc = sumcache_new(16);
    struct journal_sum_read got = {0};
    /* no watch yet: a change could be missed */
    ASSERT_FALSE(sumcache_claim(sc, "u1"));
    ASSERT_FALSE(put(sc, "u1", "{}", 5));
    ASSERT_FALSE(sumcache_take(sc, "u1", &got, 0));
    sumcache_watch_started(sc, 10);
    /* a read older than what the watch starts after may have missed one */
    ASSERT_TRUE(sumcache_claim(sc, "u1"));
    ASSERT_FALSE(put(sc, "u1", "{}", 9));
    ASSERT_EQ_INT(sumcache_len(sc), 0);
    ASSERT_TRUE(sumcache_claim(sc, "u1"));
    ASSERT_TRUE(put(sc, "u1", "{\"lastSeq\":3}", 10));
    ASSERT_EQ_INT(sumcache_len(sc), 1);
    ASSERT_FALSE(sumcache_claim(sc, "u1")); /* kept: nothing to read */
    /* taken once */
    ASSERT_TRUE(sumcache_take(sc, "u1", &got, 0));
    ASSERT_EQ_STR(got.value, "{\"lastSeq\":3}");
    ASSERT_EQ_INT(got.mod_revision, 10);
    journal_sum_read_done(&got);
    ASSERT_FALSE(sumcache_take(sc, "u1", &got, 0));
    /* the watch ends: what is kept goes, and nothing more is kept */
    ASSERT_TRUE(put(sc, "u2", "{}", 11));
    sumcache_watch_stopped(sc);
    ASSERT_EQ_INT(sumcache_len(sc), 0);
    ASSERT_FALSE(put(sc, "u2", "{}", 12));
    /* a new watch drops reads from before it */
    sumcache_watch_started(sc, 20);
    ASSERT_FALSE(put(sc, "u2", "{}", 19));
    ASSERT_TRUE(put(sc, "u2", "{}", 20));
    sumcache_free(sc);
}

TEST(a_change_the_watch_delivers_drops_or_refuses_a_read)
{
    struct sumcache *sc = sumcache_new(16);
    sumcache_watch_started(sc, 100);
    ASSERT_TRUE(put(sc, "a", "{}", 100));
    ASSERT_TRUE(put(sc, "b", "{}", 100));
    sumcache_changed(sc, "a", 101);
    struct journal_sum_read got = {0};
    ASSERT_FALSE(sumcache_take(sc, "a", &got, 0));
    ASSERT_TRUE(sumcache_take(sc, "b", &got, 0)); /* another session's change: b stays */
    journal_sum_read_done(&got);
    /* a read made before a delivered change (of any session: it may have
     * been this one's) is refused; one made after it is kept */
    ASSERT_TRUE(sumcache_claim(sc, "c"));
    sumcache_changed(sc, "c", 105);
    ASSERT_FALSE(put(sc, "c", "{}", 104));
    ASSERT_TRUE(put(sc, "c", "{}", 105));
    sumcache_free(sc);
}

TEST(the_cache_is_bounded)
{
    struct sumcache *sc = sumcache_new(2);
    sumcache_watch_started(sc, 1);
    ASSERT_TRUE(put(sc, "a", "{}", 1));
    ASSERT_TRUE(put(sc, "b", "{}", 1));
    ASSERT_TRUE(put(sc, "b", "{\"again\":1}", 1)); /* replacing is not growing */
    ASSERT_EQ_INT(sumcache_len(sc), 2);
    ASSERT_TRUE(sumcache_claim(sc, "z"));
    ASSERT_TRUE(put(sc, "c", "{}", 1)); /* full: the reads left untaken go */
    ASSERT_EQ_INT(sumcache_len(sc), 1);
    struct journal_sum_read got = {0};
    ASSERT_FALSE(sumcache_take(sc, "a", &got, 0));
    ASSERT_FALSE(sumcache_claim(sc, "z")); /* a claim is not dropped with them */
    sumcache_release(sc, "z");
    ASSERT_TRUE(sumcache_claim(sc, "z"));
    sumcache_free(sc); /* frees the claim and the entry */
    struct sumcache *none = sumcache_new(0);
    sumcache_watch_started(none, 1);
    ASSERT_FALSE(sumcache_claim(none, "a"));
    ASSERT_FALSE(put(none, "a", "{}", 1));
    sumcache_free(none);
}

struct taker {
    struct sumcache *sc;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool waiting, done, got;
    struct journal_sum_read sum;
};

static void *take_main(void *arg)
{
    struct taker *t = arg;
    pthread_mutex_lock(&t->mu);
    t->waiting = true;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->mu);
    bool got = sumcache_take(t->sc, "w", &t->sum, 60000);
    pthread_mutex_lock(&t->mu);
    t->got = got;
    t->done = true;
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void run_taker(struct sumcache *sc, bool by_put)
{
    struct taker t = {.sc = sc};
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.cond, NULL);
    ASSERT_TRUE(sumcache_claim(sc, "w"));
    pthread_t th;
    ASSERT_EQ_INT(pthread_create(&th, NULL, take_main, &t), 0);
    pthread_mutex_lock(&t.mu);
    while (!t.waiting)
        pthread_cond_wait(&t.cond, &t.mu);
    pthread_mutex_unlock(&t.mu);
    /* the claim holds it back (whether or not it is waiting yet: it cannot
     * return before the claim ends, having 60 s) */
    pthread_mutex_lock(&t.mu);
    ASSERT_FALSE(t.done);
    pthread_mutex_unlock(&t.mu);
    if (by_put)
        ASSERT_TRUE(put(sc, "w", "{\"w\":1}", 1));
    else
        sumcache_release(sc, "w");
    pthread_join(th, NULL);
    ASSERT_TRUE(t.done);
    ASSERT_EQ_INT(t.got, by_put);
    if (by_put)
        ASSERT_EQ_STR(t.sum.value, "{\"w\":1}");
    journal_sum_read_done(&t.sum);
    pthread_cond_destroy(&t.cond);
    pthread_mutex_destroy(&t.mu);
}

TEST(a_claimed_read_is_waited_for)
{
    struct sumcache *sc = sumcache_new(16);
    sumcache_watch_started(sc, 1);
    run_taker(sc, true);  /* the put wakes it with the summary */
    run_taker(sc, false); /* a failed read wakes it with none */
    /* a claim that never ends is waited for no longer than asked */
    ASSERT_TRUE(sumcache_claim(sc, "x"));
    struct journal_sum_read got = {0};
    ASSERT_FALSE(sumcache_take(sc, "x", &got, 20));
    sumcache_free(sc);
}
