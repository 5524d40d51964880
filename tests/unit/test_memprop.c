/* Unit tests for memory proposals: memory/memprop (arguments, section
 * replacement, ids), the journal summary's fold of proposals, and the
 * operator's decision on tern.dev/memory-approve|reject (reconcile). */
#include "harness.h"

#include "base/mem.h"
#include "controller/reconcile.h"
#include "journal/journal.h"
#include "json/json.h"
#include "memory/memprop.h"
#include "yaml/yamljson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *json, struct memprop_args *a, struct tern_err *e)
{
    return memprop_parse_args(json, strlen(json), a, e);
}

TEST(arguments_parse_and_are_bounded)
{
    struct memprop_args a = {0};
    struct tern_err e = {0};
    ASSERT_EQ_INT(parse("{\"reason\":\"faster\",\"replace_section\":{\"heading\":\"## Build  \","
                        "\"content\":\"make -j2\\n### Flags\\n-O2\\n\"}}",
                        &a, &e),
                  0);
    ASSERT_EQ_STR(a.reason, "faster");
    ASSERT_EQ_STR(a.heading, "## Build"); /* trailing blanks dropped */
    ASSERT_EQ_STR(a.content, "make -j2\n### Flags\n-O2\n");
    memprop_args_done(&a);

    static const struct {
        const char *json, *want;
    } bad[] = {
        {"[]", "must be a JSON object"},
        {"{\"reason\":\"r\"}", "replace_section"},
        {"{\"replace_section\":{\"heading\":\"# A\",\"content\":\"\"}}", "reason"},
        {"{\"reason\":\"r\",\"diff\":\"x\",\"replace_section\":{\"heading\":\"# A\","
         "\"content\":\"\"}}",
         "unknown member \"diff\""},
        {"{\"reason\":\"r\",\"replace_section\":{\"heading\":\"# A\",\"content\":\"\","
         "\"x\":1}}",
         "unknown member \"x\""},
        {"{\"reason\":\"\",\"replace_section\":{\"heading\":\"# A\",\"content\":\"\"}}",
         "reason: must be 1.."},
        {"{\"reason\":\"r\",\"replace_section\":{\"heading\":\"Build\",\"content\":\"\"}}",
         "heading"},
        {"{\"reason\":\"r\",\"replace_section\":{\"heading\":\"####### A\",\"content\":\"\"}}",
         "heading"},
        {"{\"reason\":\"r\",\"replace_section\":{\"heading\":\"## \",\"content\":\"\"}}",
         "heading"},
        {"{\"reason\":\"r\",\"replace_section\":{\"heading\":\"## A\\nB\",\"content\":\"\"}}",
         "heading"},
        {"{\"reason\":\"r\",\"replace_section\":{\"heading\":\"## A\",\"content\":\"x\\n## B\\n\"}}",
         "level 2 or above"},
        {"{\"reason\":\"r\",\"replace_section\":{\"heading\":\"## A\",\"content\":\"x\\u0001\"}}",
         "content"},
        {"{\"reason\":\"r\",\"replace_section\":{\"heading\":\"## A\",\"content\":5}}",
         "content"},
        {"{\"reason\":", "not valid JSON"},
        {"{\"reason\":\"r\",\"replace_section\":{\"heading\":\"## A\",\"content\":\"```\\nx\\n\"}}",
         "left open"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        ASSERT_EQ_INT(parse(bad[i].json, &a, &e), TERN_EINVALID);
        ASSERT_CONTAINS(e.msg, bad[i].want);
    }
    /* a heading inside a code fence of the content is text */
    ASSERT_EQ_INT(parse("{\"reason\":\"r\",\"replace_section\":{\"heading\":\"## A\","
                        "\"content\":\"```\\n# not a heading\\n```\\n\"}}",
                        &a, &e),
                  0);
    memprop_args_done(&a);
    /* the bounds */
    char *big = xmalloc(TERN_MEMORY_MAX_SECTION + 200);
    snprintf(big, 100, "{\"reason\":\"r\",\"replace_section\":{\"heading\":\"## A\",\"content\":\"");
    size_t n = strlen(big);
    memset(big + n, 'x', TERN_MEMORY_MAX_SECTION + 1);
    memcpy(big + n + TERN_MEMORY_MAX_SECTION + 1, "\"}}", 4);
    ASSERT_EQ_INT(parse(big, &a, &e), TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "at most 4096 bytes");
    memcpy(big + n + TERN_MEMORY_MAX_SECTION, "\"}}", 4); /* exactly the bound */
    ASSERT_EQ_INT(parse(big, &a, &e), 0);
    memprop_args_done(&a);
    free(big);
}

static char *replaced(const char *doc, const char *heading, const char *content, int want_rc,
                      const char *want_msg)
{
    char *out = NULL;
    struct tern_err e = {0};
    int rc = memprop_replace_section(doc, strlen(doc), heading, content, &out, &e);
    if (rc != want_rc)
        th_fail(__FILE__, __LINE__, "rc %d (%s), want %d", rc, e.msg, want_rc);
    if (want_msg && !strstr(e.msg, want_msg))
        th_fail(__FILE__, __LINE__, "message \"%s\" lacks \"%s\"", e.msg, want_msg);
    return out;
}

TEST(section_replacement)
{
    const char *doc = "# Notes\n\nintro\n\n## Build\nmake\n### Flags\n-O2\n\n## Style\ntabs\n";
    char *r = replaced(doc, "## Build", "ninja\n", 0, NULL);
    ASSERT_EQ_STR(r, "# Notes\n\nintro\n\n## Build\nninja\n\n## Style\ntabs\n");
    free(r);
    /* the last section, content without a final newline */
    r = replaced(doc, "## Style", "spaces", 0, NULL);
    ASSERT_EQ_STR(r, "# Notes\n\nintro\n\n## Build\nmake\n### Flags\n-O2\n\n## Style\nspaces\n");
    free(r);
    /* a deeper section ends at the next heading of its level or above */
    r = replaced(doc, "### Flags", "-O3\n", 0, NULL);
    ASSERT_EQ_STR(r, "# Notes\n\nintro\n\n## Build\nmake\n### Flags\n-O3\n\n## Style\ntabs\n");
    free(r);
    /* a new heading is appended as a section */
    r = replaced(doc, "## Tests", "make test\n", 0, NULL);
    ASSERT_EQ_STR(r, "# Notes\n\nintro\n\n## Build\nmake\n### Flags\n-O2\n\n## Style\ntabs\n\n"
                     "## Tests\nmake test\n");
    free(r);
    r = replaced("", "# A", "x", 0, NULL);
    ASSERT_EQ_STR(r, "# A\nx\n");
    free(r);
    /* empty content removes the section */
    r = replaced(doc, "## Build", "", 0, NULL);
    ASSERT_EQ_STR(r, "# Notes\n\nintro\n\n## Style\ntabs\n");
    free(r);
    /* what does not apply */
    free(replaced(doc, "## Nothing", "", TERN_EINVALID, "no section"));
    free(replaced(doc, "## Style", "tabs\n", TERN_EINVALID, "leaves simple.md as it is"));
    free(replaced("## A\nx\n## A\ny\n", "## A", "z", TERN_EINVALID, "appears 2 times"));
    char nul[] = "## A\nx\0y\n";
    char *out = NULL;
    struct tern_err e = {0};
    ASSERT_EQ_INT(memprop_replace_section(nul, sizeof nul - 1, "## A", "z", &out, &e),
                  TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "NUL");
    free(replaced("x\n```\n", "## A", "y", TERN_EINVALID, "open code fence"));
    /* headings inside code fences are not sections */
    r = replaced("## A\n```\n## B\n```\nend\n## B\nb\n", "## B", "c\n", 0, NULL);
    ASSERT_EQ_STR(r, "## A\n```\n## B\n```\nend\n## B\nc\n");
    free(r);
    /* the size bound */
    char *big = xmalloc(TERN_MEMORY_MAX_FILE + 2);
    memset(big, 'x', TERN_MEMORY_MAX_FILE + 1);
    big[TERN_MEMORY_MAX_FILE + 1] = 0;
    free(replaced(big, "## A", "y", TERN_EINVALID, "over the"));
    big[TERN_MEMORY_MAX_FILE - 2] = 0;
    free(replaced(big, "## A", "y", TERN_EINVALID, "larger than"));
    free(big);
}

TEST(ids_hashes_previews)
{
    char a[MEMPROP_ID_LEN + 1], b[MEMPROP_ID_LEN + 1], c[MEMPROP_ID_LEN + 1];
    memprop_id("uid-1", "call_0_0", a);
    memprop_id("uid-1", "call_0_0", b);
    memprop_id("uid-1", "call_0_1", c);
    ASSERT_EQ_STR(a, b);
    ASSERT_TRUE(strcmp(a, c) != 0);
    ASSERT_TRUE(memprop_id_ok(a));
    ASSERT_FALSE(memprop_id_ok("mp-00000000000g"));
    ASSERT_FALSE(memprop_id_ok("mp-0"));
    char h[65];
    memprop_sha256_hex("", 0, h);
    ASSERT_EQ_STR(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    char *p = memprop_preview("## A", "short");
    ASSERT_EQ_STR(p, "## A\nshort");
    free(p);
    char *longc = xmalloc(2000);
    memset(longc, 'x', 1999);
    longc[1999] = 0;
    longc[TERN_MEMORY_MAX_PREVIEW - 9] = (char)0xc3; /* a two-byte character at the cut */
    longc[TERN_MEMORY_MAX_PREVIEW - 8] = (char)0xa9;
    p = memprop_preview("## A", longc);
    ASSERT_CMP_INT(strlen(p), <=, TERN_MEMORY_MAX_PREVIEW);
    ASSERT_CONTAINS(p, "...");
    free(p);
    free(longc);
}

/* ---- the summary's fold ------------------------------------------------ */

static uint64_t fold(struct journal_summary *s, const char *type, int64_t turn, const char *data)
{
    struct journal_event ev = {.v = 1, .seq = s->last_seq + 1, .turn = turn};
    ev.type = journal_type_parse(type);
    ev.type_name = (char *)type;
    ev.time = (char *)"2026-12-01T10:00:00.000000000Z";
    ev.data = cJSON_Parse(data);
    if (journal_summary_apply(s, &ev) != 0)
        th_fail(__FILE__, __LINE__, "fold %s", type);
    cJSON_Delete(ev.data);
    return s->last_seq;
}

#define BASE "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static char *proposal_result(const char *id, const char *call)
{
    return xasprintf("{\"callId\":\"%s\",\"tool\":\"propose_memory_update\",\"status\":"
                     "\"completed\",\"output\":\"ok\",\"memoryProposal\":{\"id\":\"%s\","
                     "\"reason\":\"why\",\"baseSha256\":\"" BASE "\",\"heading\":\"## A\","
                     "\"content\":\"x\\n\",\"sha256\":\"" BASE "\"}}",
                     call, id);
}

static const char *state_of(const struct journal_summary *s, const char *id)
{
    const cJSON *p = journal_memory_find(s, id);
    const cJSON *st = json_get(p, "state");
    return cJSON_IsString(st) ? st->valuestring : "absent";
}

TEST(summary_folds_proposals_once_and_their_decisions)
{
    struct journal_summary s;
    journal_summary_init(&s);
    char *r1 = proposal_result("mp-000000000001", "c1");
    fold(&s, "tool_result", 1, r1);
    fold(&s, "tool_result", 1, r1); /* the same proposal again: one */
    free(r1);
    ASSERT_EQ_INT(cJSON_GetArraySize(s.memory), 1);
    ASSERT_EQ_STR(state_of(&s, "mp-000000000001"), "Pending");
    ASSERT_EQ_INT(journal_memory_pending(&s), 1);
    const cJSON *p = journal_memory_find(&s, "mp-000000000001");
    ASSERT_EQ_STR(json_get(p, "toolCallId")->valuestring, "c1");
    ASSERT_EQ_STR(json_get(p, "baseSha256")->valuestring, BASE);
    /* a tool result without a valid proposal adds none */
    fold(&s, "tool_result", 1, "{\"callId\":\"c2\",\"memoryProposal\":{\"id\":\"mp-x\","
                               "\"baseSha256\":\"short\",\"heading\":\"## A\",\"content\":\"\","
                               "\"reason\":\"r\"}}");
    fold(&s, "tool_result", 1, "{\"callId\":\"c3\",\"output\":\"plain\"}");
    ASSERT_EQ_INT(cJSON_GetArraySize(s.memory), 1);
    /* applied before decided: ignored; decided; decided again: ignored */
    fold(&s, "memory_applied", 1, "{\"id\":\"mp-000000000001\",\"result\":\"applied\"}");
    ASSERT_EQ_STR(state_of(&s, "mp-000000000001"), "Pending");
    fold(&s, "memory_decided", 1, "{\"id\":\"mp-000000000001\",\"decision\":\"approved\","
                                  "\"decidedBy\":\"alice\"}");
    ASSERT_EQ_STR(state_of(&s, "mp-000000000001"), "Approved");
    fold(&s, "memory_decided", 1, "{\"id\":\"mp-000000000001\",\"decision\":\"rejected\"}");
    ASSERT_EQ_STR(state_of(&s, "mp-000000000001"), "Approved");
    ASSERT_EQ_INT(journal_memory_pending(&s), 1);
    fold(&s, "memory_applied", 1, "{\"id\":\"mp-000000000001\",\"result\":\"conflict\","
                                  "\"message\":\"changed\"}");
    ASSERT_EQ_STR(state_of(&s, "mp-000000000001"), "Conflict");
    ASSERT_EQ_STR(json_get(journal_memory_find(&s, "mp-000000000001"), "message")->valuestring,
                  "changed");
    ASSERT_EQ_STR(json_get(journal_memory_find(&s, "mp-000000000001"), "decidedBy")->valuestring,
                  "alice");
    ASSERT_EQ_INT(journal_memory_pending(&s), 0);
    /* no intent: a decision starts no turn */
    ASSERT_FALSE(s.intent);

    /* the JSON round trip keeps them */
    cJSON *j = journal_summary_to_json(&s);
    char *txt = json_print(j);
    struct journal_summary back;
    ASSERT_EQ_INT(journal_summary_decode(txt, strlen(txt), &back, NULL), 0);
    ASSERT_TRUE(json_equal(back.memory, s.memory));
    journal_summary_done(&back);
    free(txt);
    cJSON_Delete(j);

    /* bounded: a full list drops the oldest decided one, never a pending one */
    for (int i = 2; i <= TERN_MEMORY_MAX_PROPOSALS + 1; i++) {
        char id[32], call[16];
        snprintf(id, sizeof id, "mp-%012d", i);
        snprintf(call, sizeof call, "c%d", i);
        char *r = proposal_result(id, call);
        fold(&s, "tool_result", 2, r);
        free(r);
    }
    ASSERT_EQ_INT(cJSON_GetArraySize(s.memory), TERN_MEMORY_MAX_PROPOSALS);
    ASSERT_NULL(journal_memory_find(&s, "mp-000000000001")); /* the decided one made room */
    ASSERT_EQ_STR(state_of(&s, "mp-000000000009"), "Pending");
    char *r = proposal_result("mp-000000000010", "c10");
    fold(&s, "tool_result", 2, r); /* all pending: not recorded (the runner refuses it) */
    free(r);
    ASSERT_NULL(journal_memory_find(&s, "mp-000000000010"));
    ASSERT_EQ_INT(journal_memory_pending(&s), TERN_MEMORY_MAX_PROPOSALS);
    journal_summary_done(&s);
}

/* ---- the operator's decision -------------------------------------------- */

static const struct children_config cfg = {
    .runner_image = "tern:test",
    .sandbox_image = "sandbox:default",
    .etcd_endpoints = "http://127.0.0.1:2379",
    .runner_service_account = "tern-runner",
    .turn_backoff_limit = 4,
    .job_ttl_seconds = 3600,
};

static struct session_spec *spec_with_memory(bool memory)
{
    const char *yaml = memory ? "apiVersion: tern.dev/v1alpha1\nkind: AgentSession\n"
                                "metadata: {name: s1, namespace: ns, uid: u-1}\n"
                                "spec:\n  objective: do it\n"
                                "  memory: {configMapRef: {name: team-memory}}\n"
                              : "apiVersion: tern.dev/v1alpha1\nkind: AgentSession\n"
                                "metadata: {name: s1, namespace: ns, uid: u-1}\n"
                                "spec:\n  objective: do it\n";
    cJSON *obj = NULL;
    struct session_spec *s = NULL;
    if (yamljson_parse_one(yaml, strlen(yaml), NULL, &obj, NULL) ||
        session_spec_parse(obj, &s, NULL))
        th_fail(__FILE__, __LINE__, "spec");
    cJSON_Delete(obj);
    return s;
}

static int count(const struct reconcile_output *o, enum reconcile_action_kind k, const char *what)
{
    int n = 0;
    for (size_t i = 0; i < o->nactions; i++) {
        const struct reconcile_action *a = &o->actions[i];
        const char *s = k == RA_JOURNAL_APPEND ? a->type_name : k == RA_EVENT ? a->reason : a->name;
        n += a->kind == k && (!what || (s && strcmp(s, what) == 0));
    }
    return n;
}

static const struct reconcile_action *find(const struct reconcile_output *o,
                                           enum reconcile_action_kind k)
{
    for (size_t i = 0; i < o->nactions; i++)
        if (o->actions[i].kind == k)
            return &o->actions[i];
    return NULL;
}

static struct reconcile_input finished(const struct session_spec *s, const cJSON *memory)
{
    struct reconcile_input in = {
        .name = "s1", .ns = "ns", .uid = "u-1", .generation = 1, .has_finalizer = true,
        .spec = s, .pvc_exists = true, .token_exists = true, .task_exists = true,
        .netpol_exists = true, .now = 1000000, .cfg = &cfg,
    };
    in.journal.last_seq = 9;
    in.journal.turn = 1;
    in.journal.messages = 1;
    in.journal.outcome = "completed";
    in.journal.result_summary = "done";
    in.journal.memory = memory;
    return in;
}

#define PROPOSALS                                                                                  \
    "[{\"id\":\"mp-000000000001\",\"turn\":1,\"toolCallId\":\"c1\",\"reason\":\"why\","           \
    "\"baseSha256\":\"" BASE "\",\"heading\":\"## A\",\"content\":\"x\\n\",\"state\":\"%s\","     \
    "\"proposedAt\":\"2026-12-01T10:00:00Z\"}]"

static cJSON *proposals(const char *state)
{
    char *t = xasprintf(PROPOSALS, state);
    cJSON *j = cJSON_Parse(t);
    free(t);
    return j;
}

TEST(an_approval_is_journaled_once_then_applied)
{
    struct session_spec *s = spec_with_memory(true);
    cJSON *mem = proposals("Pending");
    struct reconcile_input in = finished(s, mem);
    in.ann_memory_approve = "mp-000000000001";
    in.ann_decided_by = "alice";
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "memory_decided"), 1);
    const struct reconcile_action *a = NULL;
    for (size_t i = 0; i < o.nactions; i++)
        if (o.actions[i].kind == RA_JOURNAL_APPEND)
            a = &o.actions[i];
    ASSERT_EQ_STR(a->key, "memory/mp-000000000001/decision");
    ASSERT_EQ_STR(json_get(a->data, "decision")->valuestring, "approved");
    ASSERT_EQ_STR(json_get(a->data, "decidedBy")->valuestring, "alice");
    const struct reconcile_action *ap = find(&o, RA_MEMORY_APPLY);
    ASSERT_NOT_NULL(ap);
    ASSERT_EQ_STR(ap->name, "team-memory");
    ASSERT_EQ_STR(ap->key, "mp-000000000001");
    ASSERT_EQ_STR(json_get(ap->data, "decidedBy")->valuestring, "alice");
    ASSERT_EQ_INT(count(&o, RA_EVENT, "MemoryProposalApproved"), 1);
    const struct reconcile_action *rm = find(&o, RA_REMOVE_ANNOTATIONS);
    ASSERT_EQ_STR(rm->keys[0], RECONCILE_ANN_MEMORY_APPROVE);
    ASSERT_EQ_STR(rm->keys[1], RECONCILE_ANN_DECIDED_BY);
    ASSERT_EQ_INT(count(&o, RA_CREATE, NULL), 0); /* no turn for a decision */
    /* status: provenance and a preview, not the content */
    const cJSON *sp = cJSON_GetArrayItem(json_get(o.status, "memoryProposals"), 0);
    ASSERT_EQ_STR(json_get(sp, "session")->valuestring, "s1");
    ASSERT_EQ_STR(json_get(sp, "state")->valuestring, "Pending");
    ASSERT_EQ_STR(json_get(sp, "preview")->valuestring, "## A\nx\n");
    ASSERT_NULL(json_get(sp, "content"));
    reconcile_output_done(&o);
    cJSON_Delete(mem);

    /* decided (a crash before it was applied): applied again, no new decision;
     * the annotation still there is removed silently */
    mem = proposals("Approved");
    in.journal.memory = mem;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "memory_decided"), 0);
    ASSERT_EQ_INT(count(&o, RA_MEMORY_APPLY, NULL), 1);
    ASSERT_EQ_INT(count(&o, RA_EVENT, NULL) - count(&o, RA_EVENT, "Completed"), 0);
    ASSERT_EQ_INT(count(&o, RA_REMOVE_ANNOTATIONS, NULL), 1);
    reconcile_output_done(&o);

    /* while a turn runs: nothing is decided or applied */
    in.job = (struct observed_job){.exists = true, .turn = 2};
    in.journal.outcome = NULL;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_MEMORY_APPLY, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_REMOVE_ANNOTATIONS, NULL), 0);
    reconcile_output_done(&o);
    cJSON_Delete(mem);
    session_spec_free(s);
}

TEST(rejections_unknown_ids_and_no_memory)
{
    struct session_spec *s = spec_with_memory(true);
    cJSON *mem = proposals("Pending");
    struct reconcile_input in = finished(s, mem);
    in.ann_memory_reject = "mp-000000000001";
    in.ann_reason = "not now";
    struct reconcile_output o;
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "memory_decided"), 1);
    ASSERT_EQ_INT(count(&o, RA_MEMORY_APPLY, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "MemoryProposalRejected"), 1);
    reconcile_output_done(&o);

    in.ann_memory_reject = NULL;
    in.ann_memory_approve = "mp-00000000dead";
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "MemoryProposalUnknown"), 1);
    ASSERT_EQ_INT(count(&o, RA_REMOVE_ANNOTATIONS, NULL), 1);
    reconcile_output_done(&o);
    cJSON_Delete(mem);

    /* approving a rejected one is refused with a Warning */
    mem = proposals("Rejected");
    in.journal.memory = mem;
    in.ann_memory_approve = "mp-000000000001";
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "MemoryDecisionRejected"), 1);
    reconcile_output_done(&o);
    cJSON_Delete(mem);

    /* spec.memory removed since: an approved proposal is a conflict */
    struct session_spec *s2 = spec_with_memory(false);
    mem = proposals("Approved");
    in = finished(s2, mem);
    reconcile_decide(&in, &o);
    ASSERT_EQ_INT(count(&o, RA_MEMORY_APPLY, NULL), 0);
    ASSERT_EQ_INT(count(&o, RA_JOURNAL_APPEND, "memory_applied"), 1);
    ASSERT_EQ_INT(count(&o, RA_EVENT, "MemoryConflict"), 1);
    reconcile_output_done(&o);
    cJSON_Delete(mem);
    session_spec_free(s2);
    session_spec_free(s);
}
