/* Unit tests for the watch-driven cache (objcache) and the changes the
 * in-memory store keeps for it (objstore_changes). */
#include "harness.h"

#include "devctl/kobj.h"
#include "devctl/objcache.h"
#include "devctl/objstore.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t fake_now = 1000;
static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return fake_now;
}

static void put_cm(const struct objstore *s, const char *ns, const char *name, const char *v)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "apiVersion", "v1");
    json_add_string(o, "kind", "ConfigMap");
    kobj_set_str(o, "metadata.name", name);
    kobj_set_str(o, "metadata.namespace", ns);
    kobj_set_str(o, "data.v", v);
    cJSON *cur = NULL;
    if (objstore_get(s, "v1/configmaps", ns, name, &cur, NULL) == 0) {
        kobj_set_str(cur, "data.v", v);
        ASSERT_OK(objstore_update(s, "v1/configmaps", ns, cur, NULL, NULL));
    } else {
        ASSERT_OK(objstore_create(s, "v1/configmaps", ns, o, NULL, NULL));
    }
    cJSON_Delete(cur);
    cJSON_Delete(o);
}

static void make_ns(const struct objstore *s, const char *name)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "apiVersion", "v1");
    json_add_string(o, "kind", "Namespace");
    kobj_set_str(o, "metadata.name", name);
    ASSERT_OK(objstore_create(s, "v1/namespaces", "", o, NULL, NULL));
    cJSON_Delete(o);
}

/* The value of ns/name in the cached list i, or NULL; also checks that the
 * list holds the name once and counts its items into *n. */
static const char *cached(const struct objcache *c, size_t i, const char *ns, const char *name,
                          int *n)
{
    const char *v = NULL;
    int seen = 0, count = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, kobj_at(objcache_list(c, i), "items"))
    {
        count++;
        const char *ins = kobj_str(it, "metadata.namespace");
        if (strcmp(kobj_str(it, "metadata.name"), name) == 0 && ins && strcmp(ins, ns) == 0) {
            seen++;
            v = kobj_str(it, "data.v");
            if (!v)
                v = "";
        }
    }
    if (seen > 1)
        th_fail(__FILE__, __LINE__, "%s/%s cached %d times", ns, name, seen);
    if (n)
        *n = count;
    return v;
}

TEST(memstore_keeps_changes_in_order_and_forgets_old_ones)
{
    struct memstore *m = memstore_new(clock_fn, NULL);
    struct objstore s = memstore_objstore(m);
    ASSERT_TRUE(objstore_has_changes(&s));
    make_ns(&s, "a");
    char rv0[24];
    snprintf(rv0, sizeof rv0, "%lld", (long long)memstore_revision(m));
    put_cm(&s, "a", "x", "1");
    put_cm(&s, "a", "x", "2");
    ASSERT_OK(objstore_remove(&s, "v1/configmaps", "a", "x", NULL, NULL, NULL));
    const char *gvrs[] = {"v1/secrets", "v1/configmaps"};
    struct objstore_changes ch = {0};
    ASSERT_OK(objstore_changes(&s, gvrs, 2, rv0, &ch, NULL));
    /* created, modified, deletionTimestamp set, deleted */
    ASSERT_EQ_INT(ch.n, 4);
    for (size_t i = 0; i < 4; i++) {
        ASSERT_EQ_INT(ch.v[i].which, 1);
        ASSERT_EQ_STR(kobj_str(ch.v[i].obj, "metadata.name"), "x");
        char r[24];
        snprintf(r, sizeof r, "%lld", (long long)ch.v[i].rev);
        ASSERT_EQ_STR(kobj_str(ch.v[i].obj, "metadata.resourceVersion"), r);
    }
    ASSERT_FALSE(ch.v[0].deleted);
    ASSERT_EQ_STR(kobj_str(ch.v[1].obj, "data.v"), "2");
    ASSERT_FALSE(ch.v[2].deleted);
    ASSERT_TRUE(ch.v[3].deleted);
    for (size_t i = 0; i + 1 < 4; i++)
        ASSERT_CMP_INT(ch.v[i].rev, <, ch.v[i + 1].rev);
    char want[24];
    snprintf(want, sizeof want, "%lld", (long long)memstore_revision(m));
    ASSERT_EQ_STR(ch.rv, want);
    objstore_changes_done(&ch);
    /* a window of two: the start is gone */
    memstore_set_window(m, 2);
    put_cm(&s, "a", "y", "1");
    struct tern_err e = {0};
    ASSERT_EQ_INT(objstore_changes(&s, gvrs, 2, rv0, &ch, &e), TERN_ECOMPACTED);
    objstore_changes_done(&ch);
    memstore_free(m);
}

/* A store without changes (tern-node's REST store over HTTPS). */
static struct objstore_ops plain_ops;

TEST(cache_lists_once_then_applies_changes)
{
    struct memstore *m = memstore_new(clock_fn, NULL);
    struct objstore s = memstore_objstore(m);
    make_ns(&s, "a");
    make_ns(&s, "b");
    for (int i = 0; i < 5; i++) {
        char n[16];
        snprintf(n, sizeof n, "cm%d", i);
        put_cm(&s, i % 2 ? "a" : "b", n, "0");
    }
    const char *gvrs[] = {"v1/configmaps", "v1/namespaces"};
    struct objcache *c = objcache_new(&s, gvrs, 2, 0);
    int n = -1;
    ASSERT_NULL(cached(c, 0, "b", "cm0", &n));
    ASSERT_EQ_INT(n, 0); /* nothing before the first sync */
    ASSERT_OK(objcache_sync(c, fake_now, NULL));
    uint64_t lists = memstore_lists(m);
    ASSERT_EQ_STR(cached(c, 0, "b", "cm0", &n), "0");
    ASSERT_EQ_INT(n, 5);
    ASSERT_TRUE(objcache_ok(c, 0));
    cached(c, 1, "", "a", &n);
    ASSERT_EQ_INT(n, 2);
    /* modify the last item and the first, add, delete, add again */
    put_cm(&s, "b", "cm4", "1");
    put_cm(&s, "b", "cm0", "1");
    put_cm(&s, "a", "new", "1");
    ASSERT_OK(objstore_remove(&s, "v1/configmaps", "a", "cm1", NULL, NULL, NULL));
    put_cm(&s, "a", "new2", "1");
    /* a name in two namespaces stays two objects */
    put_cm(&s, "b", "new", "2");
    for (int round = 0; round < 2; round++) {
        ASSERT_OK(objcache_sync(c, fake_now, NULL));
        ASSERT_EQ_STR(cached(c, 0, "b", "cm4", &n), "1");
        ASSERT_EQ_INT(n, 7);
        ASSERT_EQ_STR(cached(c, 0, "b", "cm0", NULL), "1");
        ASSERT_EQ_STR(cached(c, 0, "a", "new", NULL), "1");
        ASSERT_EQ_STR(cached(c, 0, "b", "new", NULL), "2");
        ASSERT_EQ_STR(cached(c, 0, "a", "new2", NULL), "1");
        ASSERT_NULL(cached(c, 0, "a", "cm1", NULL));
        ASSERT_EQ_STR(cached(c, 0, "a", "cm3", NULL), "0");
    }
    /* deleting everything empties it */
    const char *names[][2] = {{"b", "cm0"}, {"a", "cm3"},  {"b", "cm2"}, {"b", "cm4"},
                              {"a", "new"}, {"a", "new2"}, {"b", "new"}};
    for (size_t i = 0; i < 7; i++)
        ASSERT_OK(objstore_remove(&s, "v1/configmaps", names[i][0], names[i][1], NULL, NULL, NULL));
    put_cm(&s, "a", "last", "9");
    ASSERT_OK(objcache_sync(c, fake_now, NULL));
    ASSERT_EQ_STR(cached(c, 0, "a", "last", &n), "9");
    ASSERT_EQ_INT(n, 1);
    ASSERT_EQ_INT(memstore_lists(m), lists); /* no list after the first */
    struct objcache_stats st;
    objcache_stats(c, &st);
    ASSERT_EQ_INT(st.relists, 1);
    ASSERT_CMP_INT(st.changes, >=, 15);
    /* the revision it is complete up to is the store's */
    char want[24];
    snprintf(want, sizeof want, "%lld", (long long)memstore_revision(m));
    ASSERT_EQ_STR(objcache_rv(c), want);
    objcache_free(c);
    memstore_free(m);
}

TEST(cache_reads_its_own_writes_at_the_next_sync)
{
    struct memstore *m = memstore_new(clock_fn, NULL);
    struct objstore s = memstore_objstore(m);
    make_ns(&s, "a");
    const char *gvrs[] = {"v1/configmaps"};
    struct objcache *c = objcache_new(&s, gvrs, 1, 0);
    ASSERT_OK(objcache_sync(c, fake_now, NULL));
    for (int i = 0; i < 20; i++) {
        char v[16];
        snprintf(v, sizeof v, "%d", i);
        put_cm(&s, "a", "x", v); /* a write, then the next pass */
        ASSERT_OK(objcache_sync(c, fake_now, NULL));
        ASSERT_EQ_STR(cached(c, 0, "a", "x", NULL), v);
    }
    objcache_free(c);
    memstore_free(m);
}

TEST(cache_relists_after_compaction_and_at_the_resync_period)
{
    struct memstore *m = memstore_new(clock_fn, NULL);
    struct objstore s = memstore_objstore(m);
    make_ns(&s, "a");
    put_cm(&s, "a", "x", "0");
    const char *gvrs[] = {"v1/configmaps"};
    struct objcache *c = objcache_new(&s, gvrs, 1, 60);
    ASSERT_OK(objcache_sync(c, fake_now, NULL));
    memstore_set_window(m, 3);
    /* more changes than the window holds: a delete among them is lost to
     * the changes and found by the relist */
    put_cm(&s, "a", "y", "1");
    ASSERT_OK(objstore_remove(&s, "v1/configmaps", "a", "x", NULL, NULL, NULL));
    for (int i = 0; i < 5; i++)
        put_cm(&s, "a", "z", "2");
    uint64_t lists = memstore_lists(m);
    ASSERT_OK(objcache_sync(c, fake_now, NULL));
    ASSERT_EQ_INT(memstore_lists(m), lists + 1);
    int n = 0;
    ASSERT_NULL(cached(c, 0, "a", "x", &n));
    ASSERT_EQ_STR(cached(c, 0, "a", "y", NULL), "1");
    ASSERT_EQ_STR(cached(c, 0, "a", "z", NULL), "2");
    ASSERT_EQ_INT(n, 2);
    /* within the period and the window: changes only */
    put_cm(&s, "a", "y", "3");
    ASSERT_OK(objcache_sync(c, fake_now + 59, NULL));
    ASSERT_EQ_INT(memstore_lists(m), lists + 1);
    ASSERT_EQ_STR(cached(c, 0, "a", "y", NULL), "3");
    /* the full resync */
    ASSERT_OK(objcache_sync(c, fake_now + 60, NULL));
    ASSERT_EQ_INT(memstore_lists(m), lists + 2);
    ASSERT_EQ_STR(cached(c, 0, "a", "y", NULL), "3");
    struct objcache_stats st;
    objcache_stats(c, &st);
    ASSERT_EQ_INT(st.relists, 3);
    objcache_free(c);
    memstore_free(m);
}

TEST(cache_of_a_store_without_changes_lists_every_time)
{
    struct memstore *m = memstore_new(clock_fn, NULL);
    struct objstore ms = memstore_objstore(m);
    plain_ops = *ms.ops;
    plain_ops.changes = NULL;
    struct objstore s = {&plain_ops, ms.ctx};
    ASSERT_FALSE(objstore_has_changes(&s));
    struct objstore_changes ch = {0};
    ASSERT_EQ_INT(objstore_changes(&s, (const char *[]){"v1/pods"}, 1, "1", &ch, NULL), -ENOTSUP);
    objstore_changes_done(&ch);
    make_ns(&s, "a");
    const char *gvrs[] = {"v1/configmaps"};
    struct objcache *c = objcache_new(&s, gvrs, 1, 0);
    for (int i = 0; i < 3; i++) {
        char v[16];
        snprintf(v, sizeof v, "%d", i);
        put_cm(&s, "a", "x", v);
        uint64_t lists = memstore_lists(m);
        ASSERT_OK(objcache_sync(c, fake_now, NULL));
        ASSERT_EQ_INT(memstore_lists(m), lists + 1);
        ASSERT_EQ_STR(cached(c, 0, "a", "x", NULL), v);
    }
    objcache_free(c);
    memstore_free(m);
}
