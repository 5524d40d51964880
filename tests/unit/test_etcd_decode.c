/* Unit tests for etcd/: request encoding and reply decoding with canned
 * gateway replies (the codec through etcd_internal.h; the watch stream state
 * machine, which is static, by including watch.c). */
#include "harness.h"

#include "etcd/watch.c"

static cJSON *J(const char *s)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    if (json_parse(s, strlen(s), &j, &e))
        th_fail(__FILE__, __LINE__, "bad canned JSON: %s", e.msg);
    return j;
}

TEST(range_reply_with_exact_int64_and_uint64_ids)
{
    cJSON *j = J("{\"header\":{\"cluster_id\":\"15118495548433857066\",\"member_id\":"
                 "\"13668033151171901709\","
                 "\"revision\":\"9007199254740993\",\"raft_term\":\"2\"},"
                 "\"kvs\":[{\"key\":\"L3AvYQ==\",\"create_revision\":\"2\",\"mod_revision\":"
                 "\"9007199254740993\","
                 "\"version\":\"3\",\"value\":\"AAEC\",\"lease\":\"7587869727212519945\"},"
                 "{\"key\":\"L3AvYg==\"}],\"more\":true,\"count\":\"5\"}");
    struct etcd_range_resp r;
    struct tern_err e = {0};
    ASSERT_OK(etcd__dec_range(j, &r, &e));
    ASSERT_TRUE(r.header.cluster_id == 15118495548433857066ull);
    ASSERT_EQ_INT(r.header.revision, 9007199254740993ll);
    ASSERT_EQ_INT(r.nkvs, 2);
    ASSERT_EQ_STR(r.kvs[0].key, "/p/a");
    ASSERT_EQ_INT(r.kvs[0].value_len, 3);
    ASSERT_MEM_EQ(r.kvs[0].value, "\x00\x01\x02", 3);
    ASSERT_EQ_INT(r.kvs[0].lease, 7587869727212519945ll);
    ASSERT_EQ_INT(r.kvs[0].mod_revision, 9007199254740993ll);
    /* defaults omitted by the gateway read as zero/empty */
    ASSERT_EQ_STR(r.kvs[1].value, "");
    ASSERT_EQ_INT(r.kvs[1].version, 0);
    ASSERT_TRUE(r.more);
    ASSERT_EQ_INT(r.count, 5);
    etcd_range_resp_done(&r);
    cJSON_Delete(j);

    /* an empty range: no kvs, no count */
    j = J("{\"header\":{\"revision\":\"4\"}}");
    ASSERT_OK(etcd__dec_range(j, &r, &e));
    ASSERT_EQ_INT(r.nkvs, 0);
    ASSERT_EQ_INT(r.count, 0);
    ASSERT_FALSE(r.more);
    etcd_range_resp_done(&r);
    cJSON_Delete(j);
}

TEST(malformed_replies_are_parse_errors)
{
    const char *bad[] = {
        "{\"kvs\":[{\"key\":\"!!!\"}]}",        /* bad base64 */
        "{\"kvs\":{\"key\":\"YQ==\"}}",         /* kvs not an array */
        "{\"kvs\":[7]}",                        /* kv not an object */
        "{\"header\":{\"revision\":\"12x\"}}",  /* not a number */
        "{\"header\":{\"cluster_id\":\"-1\"}}", /* not unsigned */
        "{\"count\":true}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = J(bad[i]);
        struct etcd_range_resp r;
        struct tern_err e = {0};
        int rc = etcd__dec_range(j, &r, &e);
        if (rc != TERN_EPARSE)
            th_fail(__FILE__, __LINE__, "%s: got %d, expected TERN_EPARSE", bad[i], rc);
        cJSON_Delete(j);
    }
}

TEST(txn_failed_has_no_succeeded_and_mixed_responses)
{
    /* a failed txn: "succeeded" absent (false), failure-branch range */
    cJSON *j = J("{\"header\":{\"revision\":\"4\"},\"responses\":[{\"response_range\":{\"header\":{"
                 "\"revision\":\"4\"},"
                 "\"kvs\":[{\"key\":\"YQ==\",\"create_revision\":\"2\",\"mod_revision\":\"3\","
                 "\"version\":\"2\",\"value\":\"Mw==\"}],\"count\":\"1\"}}]}");
    struct etcd_txn_resp t;
    struct tern_err e = {0};
    ASSERT_OK(etcd__dec_txn(j, &t, &e));
    ASSERT_FALSE(t.succeeded);
    ASSERT_EQ_INT(t.nresponses, 1);
    ASSERT_EQ_INT(t.responses[0].type, ETCD_OP_RANGE);
    ASSERT_EQ_STR(t.responses[0].range.kvs[0].value, "3");
    etcd_txn_resp_done(&t);
    cJSON_Delete(j);

    j = J("{\"header\":{\"revision\":\"3\"},\"succeeded\":true,\"responses\":["
          "{\"response_put\":{\"header\":{\"revision\":\"3\"},\"prev_kv\":{\"key\":\"YQ==\",\"mod_"
          "revision\":\"2\",\"value\":\"MQ==\"}}},"
          "{\"response_delete_range\":{\"header\":{\"revision\":\"3\"},\"deleted\":\"2\",\"prev_"
          "kvs\":[{\"key\":\"Yg==\"},{\"key\":\"Yw==\"}]}},"
          "{\"response_put\":{\"header\":{\"revision\":\"3\"}}}]}");
    ASSERT_OK(etcd__dec_txn(j, &t, &e));
    ASSERT_TRUE(t.succeeded);
    ASSERT_EQ_INT(t.nresponses, 3);
    ASSERT_EQ_STR(t.responses[0].put.prev_kv->value, "1");
    ASSERT_EQ_INT(t.responses[1].del.deleted, 2);
    ASSERT_EQ_STR(t.responses[1].del.prev_kvs[1].key, "c");
    ASSERT_NULL(t.responses[2].put.prev_kv);
    etcd_txn_resp_done(&t);
    cJSON_Delete(j);

    j = J("{\"responses\":[{\"response_what\":{}}]}");
    ASSERT_EQ_INT(etcd__dec_txn(j, &t, &e), TERN_EPARSE);
    cJSON_Delete(j);
}

TEST(error_bodies_map_to_typed_codes)
{
    struct {
        long status;
        const char *body;
        int code;
        bool unavailable;
    } cases[] = {
        {400, "{\"error\":\"etcdserver: mvcc: required revision has been compacted\",\"code\":11}",
         TERN_ECOMPACTED, false},
        {400,
         "{\"error\":\"etcdserver: mvcc: required revision is a future revision\",\"code\":11}",
         TERN_EINVALID, false},
        {400,
         "{\"error\":\"etcdserver: request is too large\",\"message\":\"etcdserver: request is too "
         "large\",\"code\":3}",
         TERN_ETOOLARGE, false},
        {404, "{\"error\":\"etcdserver: requested lease not found\",\"code\":5}", TERN_ENOTFOUND,
         false},
        {401, "{\"error\":\"etcdserver: invalid auth token\",\"code\":16}", TERN_EAUTH, false},
        {403, "{\"error\":\"etcdserver: permission denied\",\"code\":7}", TERN_EAUTH, false},
        {503, "{\"error\":\"etcdserver: no leader\",\"code\":14}", TERN_EUNREACHABLE, true},
        {504, "{\"error\":\"context deadline exceeded\",\"code\":4}", TERN_ETIMEOUT, true},
        {500, "{\"error\":\"something\",\"code\":2}", TERN_EHTTP, false},
        {400, "{\"error\":\"etcdserver: user name is empty\",\"code\":3}", TERN_EAUTH, false},
        {400,
         "{\"error\":\"etcdserver: authentication failed, invalid user ID or "
         "password\",\"code\":3}",
         TERN_EAUTH, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *j = J(cases[i].body);
        bool un = false;
        struct tern_err e = {0};
        int r = etcd__map_error(cases[i].status, j, &un, &e);
        if (r != cases[i].code || un != cases[i].unavailable)
            th_fail(__FILE__, __LINE__, "%s: got %d/%d", cases[i].body, r, un);
        cJSON_Delete(j);
    }
    bool un;
    ASSERT_EQ_INT(etcd__map_error(502, NULL, &un, NULL), TERN_EHTTP);
}

static struct watch_msg decode_line(const char *s, int want)
{
    cJSON *j = J(s);
    struct watch_msg m;
    struct tern_err e = {0};
    int r = etcd__dec_watch_line(j, &m, &e);
    if (r != want)
        th_fail(__FILE__, __LINE__, "%s: got %d (%s)", s, r, e.msg);
    m.cancel_reason = NULL; /* borrowed from j */
    cJSON_Delete(j);
    return m;
}

TEST(watch_lines)
{
    struct watch_msg m =
        decode_line("{\"result\":{\"header\":{\"revision\":\"2\"},\"created\":true}}", 0);
    ASSERT_TRUE(m.created);
    ASSERT_EQ_INT(m.nevents, 0);
    etcd__watch_msg_done(&m);

    m = decode_line("{\"result\":{\"header\":{\"revision\":\"4\"},\"events\":[{\"kv\":{\"key\":"
                    "\"YQ==\",\"mod_revision\":\"3\",\"value\":\"Mw==\"},"
                    "\"prev_kv\":{\"key\":\"YQ==\",\"value\":\"MQ==\"}},{\"type\":\"DELETE\","
                    "\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"4\"}}]}}",
                    0);
    ASSERT_EQ_INT(m.nevents, 2);
    ASSERT_EQ_INT(m.events[0].type, ETCD_EVENT_PUT);
    ASSERT_TRUE(m.events[0].has_prev_kv);
    ASSERT_EQ_STR(m.events[0].prev_kv.value, "1");
    ASSERT_EQ_INT(m.events[1].type, ETCD_EVENT_DELETE);
    ASSERT_FALSE(m.events[1].has_prev_kv);
    ASSERT_EQ_INT(m.events[1].kv.mod_revision, 4);
    etcd__watch_msg_done(&m);

    /* compaction: canceled + compact_revision; the header has no revision */
    m = decode_line("{\"result\":{\"header\":{\"raft_term\":\"2\"},\"canceled\":true,\"compact_"
                    "revision\":\"7\"}}",
                    0);
    ASSERT_TRUE(m.canceled);
    ASSERT_EQ_INT(m.compact_revision, 7);
    etcd__watch_msg_done(&m);

    m = decode_line("{\"error\":{\"grpc_code\":16,\"http_code\":401,\"message\":\"etcdserver: "
                    "invalid auth token\"}}",
                    0);
    ASSERT_TRUE(m.is_error);
    ASSERT_EQ_INT(m.error_code, TERN_EAUTH);
    etcd__watch_msg_done(&m);

    m = decode_line("{\"result\":{\"events\":[{\"type\":\"PATCH\",\"kv\":{}}]}}", TERN_EPARSE);
    m = decode_line("{\"result\":{\"events\":[{\"type\":\"PUT\"}]}}", TERN_EPARSE);
    m = decode_line("{\"hello\":1}", TERN_EPARSE);
}

/* The watch state machine over a canned stream: dedup after reconnect,
 * progress, compaction, and the caller's stop value. */
static int count_batches(void *ctx, const struct etcd_watch_batch *b)
{
    int *n = ctx;
    *n += (int)b->nevents;
    return b->nevents && b->events[b->nevents - 1].kv.mod_revision == 9 ? 5 : 0;
}

TEST(watch_stream_state)
{
    int n = 0;
    struct tern_err e = {0};
    struct watch_state st = {.fn = count_batches, .ctx = &n, .next_rev = 5, .err = &e};
    const char *created = "{\"result\":{\"header\":{\"revision\":\"6\"},\"created\":true}}";
    ASSERT_OK(watch_on_line(&st, created, strlen(created)));
    ASSERT_TRUE(st.created);
    const char *l1 =
        "{\"result\":{\"header\":{\"revision\":\"6\"},\"events\":[{\"kv\":{\"key\":\"YQ==\",\"mod_"
        "revision\":\"4\"}},{\"kv\":{\"key\":\"YQ==\",\"mod_revision\":\"6\"}}]}}";
    ASSERT_OK(watch_on_line(&st, l1, strlen(l1)));
    ASSERT_EQ_INT(n, 1); /* revision 4 was delivered before */
    ASSERT_EQ_INT(st.next_rev, 7);
    const char *prog = "{\"result\":{\"header\":{\"revision\":\"8\"}}}";
    ASSERT_OK(watch_on_line(&st, prog, strlen(prog)));
    ASSERT_EQ_INT(st.next_rev, 9);
    ASSERT_OK(watch_on_line(&st, "  ", 2));
    const char *l2 = "{\"result\":{\"header\":{\"revision\":\"9\"},\"events\":[{\"kv\":{\"key\":"
                     "\"YQ==\",\"mod_revision\":\"9\"}}]}}";
    ASSERT_EQ_INT(watch_on_line(&st, l2, strlen(l2)), 5);
    ASSERT_EQ_INT(st.stop, WATCH_STOP_CALLER);
    const char *cmp = "{\"result\":{\"canceled\":true,\"compact_revision\":\"12\"}}";
    ASSERT_EQ_INT(watch_on_line(&st, cmp, strlen(cmp)), TERN_ECOMPACTED);
    ASSERT_EQ_INT(st.compact_rev, 12);
    ASSERT_EQ_INT(watch_on_line(&st, "{bad", 4), TERN_EPARSE);
}

TEST(request_encoding)
{
    struct tern_err e = {0};
    cJSON *o = NULL;
    /* prefix: key and range end ("/p/" -> "/p0") */
    ASSERT_OK(etcd__enc_range(&(struct etcd_range_req){.keys = {.key = "/p/", .prefix = true},
                                                       .limit = 10,
                                                       .revision = 9007199254740993ll,
                                                       .keys_only = true},
                              &o, &e));
    char *s = json_print(o);
    ASSERT_CONTAINS(s, "\"key\":\"L3Av\"");
    ASSERT_CONTAINS(s, "\"range_end\":\"L3Aw\"");
    ASSERT_CONTAINS(s, "\"revision\":\"9007199254740993\"");
    ASSERT_CONTAINS(s, "\"keys_only\":true");
    free(s);
    cJSON_Delete(o);
    /* empty prefix = the whole keyspace: key "\0", range_end "\0" */
    ASSERT_OK(
        etcd__enc_range(&(struct etcd_range_req){.keys = {.key = "", .prefix = true}}, &o, &e));
    s = json_print(o);
    ASSERT_CONTAINS(s, "\"key\":\"AA==\",\"range_end\":\"AA==\"");
    free(s);
    cJSON_Delete(o);
    /* trailing 0xff bytes are dropped before incrementing */
    char end[8];
    ASSERT_EQ_INT(etcd__prefix_end("a\xff\xff", end), 1);
    ASSERT_EQ_INT(end[0], 'b');
    ASSERT_EQ_INT(etcd__prefix_end("\xff", end), 0);

    struct etcd_compare cmps[] = {
        {.keys = {.key = "k"}, .target = ETCD_CMP_CREATE, .number = 0},
        {.keys = {.key = "s"}, .target = ETCD_CMP_MOD, .result = ETCD_CMP_LESS, .number = 12},
        {.keys = {.key = "v"},
         .target = ETCD_CMP_VALUE,
         .result = ETCD_CMP_NOT_EQUAL,
         .value = "x",
         .value_len = 1},
    };
    struct etcd_op ops[] = {
        {.type = ETCD_OP_PUT, .put = {.key = "k", .value = "1", .value_len = 1, .lease = 5}},
        {.type = ETCD_OP_DELETE, .del = {.keys = {.key = "d"}, .prev_kv = true}}};
    ASSERT_OK(etcd__enc_txn(&(struct etcd_txn_req){cmps, 3, ops, 2, ops, 1}, &o, &e));
    s = json_print(o);
    ASSERT_CONTAINS(
        s,
        "{\"key\":\"aw==\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}");
    ASSERT_CONTAINS(s, "\"target\":\"MOD\",\"result\":\"LESS\",\"mod_revision\":\"12\"");
    ASSERT_CONTAINS(s, "\"target\":\"VALUE\",\"result\":\"NOT_EQUAL\",\"value\":\"eA==\"");
    ASSERT_CONTAINS(s, "\"request_put\":{\"key\":\"aw==\",\"value\":\"MQ==\",\"lease\":\"5\"}");
    ASSERT_CONTAINS(s, "\"request_delete_range\":{\"key\":\"ZA==\",\"prev_kv\":true}");
    free(s);
    cJSON_Delete(o);
    ASSERT_EQ_INT(etcd__enc_put(&(struct etcd_put_req){.key = ""}, &o, &e), TERN_EINVALID);
}

TEST(config_validation)
{
    struct etcd *c = NULL;
    struct tern_err e = {0};
    const char *bad[] = {"tcp://x:1"};
    ASSERT_EQ_INT(etcd_new(&(struct etcd_config){.endpoints = bad, .nendpoints = 1}, &c, &e),
                  TERN_EINVALID);
    ASSERT_EQ_INT(etcd_new(&(struct etcd_config){.endpoints = bad, .nendpoints = 0}, &c, &e),
                  TERN_EINVALID);
    const char *good[] = {"http://127.0.0.1:1/"};
    ASSERT_EQ_INT(
        etcd_new(&(struct etcd_config){.endpoints = good, .nendpoints = 1, .username = "u"}, &c,
                 &e),
        TERN_EINVALID);
    ASSERT_OK(etcd_new(&(struct etcd_config){.endpoints = good, .nendpoints = 1}, &c, &e));
    ASSERT_EQ_STR(c->eps[0], "http://127.0.0.1:1");
    etcd_free(c);
}
