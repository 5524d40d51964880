/* Unit tests for trigger/: field paths and templates (tmap), the AgentTrigger
 * spec (tspec), and webhook deliveries decided without I/O (signature,
 * order of checks, filter, mapping, deterministic session names). */
#include "harness.h"

#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"
#include "trigger/tmap.h"
#include "trigger/tspec.h"
#include "trigger/webhook.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static cJSON *parse(const char *s)
{
    cJSON *j = NULL;
    struct tern_err e = {0};
    if (json_parse(s, strlen(s), &j, &e))
        th_fail(__FILE__, __LINE__, "bad test JSON: %s", e.msg);
    return j;
}

static const char *PAYLOAD =
    "{\"action\":\"opened\",\"number\":42,\"draft\":false,"
    "\"pull_request\":{\"title\":\"Fix the parser\",\"html_url\":\"https://x/pr/42\","
    "\"labels\":[{\"name\":\"bug\"},{\"name\":\"p1\"}]},\"nested\":{\"o\":{}}}";

TEST(tmap_paths)
{
    cJSON *p = parse(PAYLOAD);
    struct buf b;
    buf_init(&b, 1024);
    ASSERT_OK(tmap_scalar(tmap_lookup(p, "pull_request.labels[1].name"), &b));
    ASSERT_EQ_STR(buf_str(&b), "p1");
    buf_reset(&b);
    ASSERT_OK(tmap_scalar(tmap_lookup(p, "number"), &b));
    ASSERT_EQ_STR(buf_str(&b), "42");
    buf_reset(&b);
    ASSERT_OK(tmap_scalar(tmap_lookup(p, "draft"), &b));
    ASSERT_EQ_STR(buf_str(&b), "false");
    ASSERT_NULL(tmap_lookup(p, "pull_request.labels[2].name"));
    ASSERT_NULL(tmap_lookup(p, "pull_request.title.x"));
    ASSERT_NULL(tmap_lookup(p, "number[0]"));
    ASSERT_EQ_INT(tmap_scalar(tmap_lookup(p, "nested.o"), &b), TERN_EINVALID);
    struct tern_err e = {0};
    const char *bad[] = {"", ".a", "a.", "a..b", "a[", "a[x]", "a[]", "a b", "a.$b", "[0]",
                         "a[1234567]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (tmap_path_check(bad[i], &e) != TERN_EINVALID)
            th_fail(__FILE__, __LINE__, "path \"%s\" accepted", bad[i]);
    ASSERT_OK(tmap_path_check("a-b_c.D9[0][12]", &e));
    buf_done(&b);
    cJSON_Delete(p);
}

TEST(tmap_templates)
{
    cJSON *p = parse(PAYLOAD);
    char *out = NULL;
    struct tern_err e = {0};
    ASSERT_OK(tmap_render("Review #{{number}}: {{ pull_request.title }} ({{action}})", p, 1000,
                          "objective", &out, &e));
    ASSERT_EQ_STR(out, "Review #42: Fix the parser (opened)");
    free(out);
    ASSERT_OK(tmap_render("no placeholders", p, 1000, "objective", &out, &e));
    ASSERT_EQ_STR(out, "no placeholders");
    free(out);
    ASSERT_EQ_INT(tmap_render("{{ pull_request.body }}", p, 1000, "objective", &out, &e),
                  TERN_ENOTFOUND);
    ASSERT_EQ_STR(e.msg, "objective: the payload has no field pull_request.body");
    ASSERT_EQ_INT(tmap_render("{{ nested }}", p, 1000, "objective", &out, &e), TERN_EINVALID);
    ASSERT_EQ_INT(tmap_render("{{ number }}{{ number }}", p, 3, "objective", &out, &e),
                  TERN_ETOOLARGE);
    ASSERT_EQ_INT(tmap_template_check("{{ a", &e), TERN_EINVALID);
    ASSERT_EQ_INT(tmap_template_check("{{ a b }}", &e), TERN_EINVALID);
    ASSERT_EQ_INT(tmap_template_check("{{}}", &e), TERN_EINVALID);
    ASSERT_OK(tmap_template_check("a }} b", &e));
    /* a value is inserted as text, never expanded again */
    cJSON *q = parse("{\"t\":\"{{ t }}\"}");
    ASSERT_OK(tmap_render("x{{t}}y", q, 100, "objective", &out, &e));
    ASSERT_EQ_STR(out, "x{{ t }}y");
    free(out);
    cJSON_Delete(q);
    cJSON_Delete(p);
}

static const char *TRIGGER =
    "{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentTrigger\","
    "\"metadata\":{\"name\":\"pr-review\",\"namespace\":\"dev\",\"uid\":\"uid-1\"},"
    "\"spec\":{\"templateRef\":{\"name\":\"reviewer\"},"
    "\"objective\":\"Review #{{ number }}: {{ pull_request.title }}\","
    "\"context\":\"{{ pull_request.html_url }}\","
    "\"webhook\":{\"secretRef\":{\"name\":\"hook\",\"key\":\"secret\"},"
    "\"filter\":[{\"header\":\"X-GitHub-Event\",\"values\":[\"pull_request\"]},"
    "{\"field\":\"action\",\"values\":[\"opened\",\"reopened\"]}]}}}";

static struct tspec *trigger(const char *json)
{
    cJSON *o = parse(json);
    struct tspec *t = NULL;
    struct tern_err e = {0};
    if (tspec_parse(o, &t, &e))
        th_fail(__FILE__, __LINE__, "trigger: %s", e.msg);
    cJSON_Delete(o);
    return t;
}

static int parse_err(const char *json, struct tern_err *e)
{
    cJSON *o = parse(json);
    struct tspec *t = NULL;
    int r = tspec_parse(o, &t, e);
    tspec_free(t);
    cJSON_Delete(o);
    return r;
}

TEST(tspec_parse_and_defaults)
{
    struct tspec *t = trigger(TRIGGER);
    ASSERT_EQ_STR(t->template_name, "reviewer");
    ASSERT_TRUE(t->webhook.set);
    ASSERT_FALSE(t->schedule.set);
    ASSERT_EQ_STR(t->webhook.delivery_header, "X-GitHub-Delivery");
    ASSERT_EQ_INT(t->webhook.nfilters, 2);
    ASSERT_EQ_INT(t->success_history, 3);
    ASSERT_EQ_INT(t->failed_history, 1);
    tspec_free(t);
    t = trigger("{\"metadata\":{\"name\":\"nightly\"},\"spec\":{\"templateRef\":{\"name\":\"t\"},"
                "\"objective\":\"run at {{ scheduledTime }}\",\"schedule\":{\"cron\":\"0 2 * * *\","
                "\"timeZone\":\"Europe/Berlin\",\"concurrencyPolicy\":\"Forbid\","
                "\"startingDeadlineSeconds\":300}}}");
    ASSERT_EQ_INT(t->schedule.policy, TSPEC_FORBID);
    ASSERT_EQ_INT(t->schedule.starting_deadline, 300);
    ASSERT_EQ_STR(t->schedule.time_zone, "Europe/Berlin");
    tspec_free(t);
    struct tern_err e = {0};
    ASSERT_EQ_INT(parse_err("{\"spec\":{\"templateRef\":{\"name\":\"t\"},\"objective\":\"x\"}}", &e),
                  TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "set schedule, webhook or both");
    ASSERT_EQ_INT(parse_err("{\"spec\":{\"templateRef\":{\"name\":\"t\"},\"objective\":\"x\","
                            "\"schedule\":{\"cron\":\"61 * * * *\"}}}",
                            &e),
                  TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "spec.schedule.cron: minute");
    ASSERT_EQ_INT(parse_err("{\"spec\":{\"templateRef\":{\"name\":\"t\"},\"objective\":\"{{ a.\","
                            "\"schedule\":{\"cron\":\"@daily\"}}}",
                            &e),
                  TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "spec.objective");
    ASSERT_EQ_INT(parse_err("{\"metadata\":{\"name\":\"a-name-that-is-longer-than-thirty\"},"
                            "\"spec\":{\"templateRef\":{\"name\":\"t\"},\"objective\":\"x\","
                            "\"schedule\":{\"cron\":\"@daily\"}}}",
                            &e),
                  TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "metadata.name");
    ASSERT_EQ_INT(parse_err("{\"spec\":{\"templateRef\":{\"name\":\"t\"},\"objective\":\"x\","
                            "\"schedule\":{\"cron\":\"@daily\",\"timeZone\":\"../etc\"}}}",
                            &e),
                  TERN_EINVALID);
    ASSERT_EQ_INT(parse_err("{\"spec\":{\"templateRef\":{\"name\":\"t\"},\"objective\":\"x\","
                            "\"webhook\":{\"secretRef\":{\"name\":\"s\",\"key\":\"k\"},"
                            "\"filter\":[{\"header\":\"X\",\"field\":\"a\",\"values\":[\"v\"]}]}}}",
                            &e),
                  TERN_EINVALID);
    ASSERT_CONTAINS(e.msg, "exactly one of header and field");
}

TEST(tspec_session_names_are_deterministic)
{
    char *a = tspec_webhook_session_name("pr-review", "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    char *b = tspec_webhook_session_name("pr-review", "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    char *c = tspec_webhook_session_name("pr-review", "72d3162e-cc78-11e3-81ab-4c9367dc0959");
    ASSERT_EQ_STR(a, b);
    ASSERT_TRUE(strcmp(a, c) != 0);
    ASSERT_EQ_INT(strlen(a), strlen("pr-review") + 17);
    /* the longest trigger name still gives a valid session name */
    char *l = tspec_webhook_session_name("abcdefghijabcdefghijabcdefghij", "x");
    ASSERT_CMP_INT(strlen(l), <=, 48);
    char *s = tspec_schedule_session_name("nightly", 1790000040);
    ASSERT_EQ_STR(s, "nightly-29833334");
    free(a);
    free(b);
    free(c);
    free(l);
    free(s);
}

struct hdrs {
    const char *names[8], *values[8];
};

static const char *hget(void *ctx, const char *name)
{
    struct hdrs *h = ctx;
    for (int i = 0; i < 8 && h->names[i]; i++)
        if (strcasecmp(h->names[i], name) == 0)
            return h->values[i];
    return NULL;
}

static void sign(const char *key, const char *body, char out[80])
{
    unsigned char md[32];
    unsigned int n = 0;
    HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)body, strlen(body), md, &n);
    memcpy(out, "sha256=", 7);
    for (int i = 0; i < 32; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
}

static void decide(const struct tspec *t, const char *key, const char *body, const char *sig,
                   const char *event, const char *id, struct webhook_result *r)
{
    struct hdrs h = {{"X-Hub-Signature-256", "X-GitHub-Event", "X-GitHub-Delivery"},
                     {sig, event, id}};
    struct webhook_delivery d = {.body = body, .len = strlen(body), .header = hget, .hctx = &h};
    webhook_decide(t, (const unsigned char *)key, strlen(key), &d, r);
}

TEST(webhook_signature)
{
    char sig[80];
    sign("It's a Secret to Everybody", "Hello, World!", sig);
    /* GitHub's documented example */
    ASSERT_EQ_STR(sig, "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17");
    const unsigned char *k = (const unsigned char *)"It's a Secret to Everybody";
    size_t kl = strlen((const char *)k);
    ASSERT_OK(webhook_verify(k, kl, "Hello, World!", 13, sig));
    sig[7] = 'A' == sig[7] ? 'B' : (sig[7] == '7' ? '8' : '7');
    ASSERT_EQ_INT(webhook_verify(k, kl, "Hello, World!", 13, sig), TERN_EAUTH);
    ASSERT_EQ_INT(webhook_verify(k, kl, "Hello, World!", 13, NULL), TERN_EAUTH);
    ASSERT_EQ_INT(webhook_verify(k, kl, "Hello, World!", 13, "sha1=abc"), TERN_EAUTH);
    ASSERT_EQ_INT(webhook_verify(k, kl, "Hello, World!", 13,
                                 "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1"),
                  TERN_EAUTH);
    /* upper-case hex is the same digest */
    ASSERT_OK(webhook_verify(k, kl, "Hello, World!", 13,
                             "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17"));
}

TEST(webhook_decisions)
{
    struct tspec *t = trigger(TRIGGER);
    struct webhook_result r;
    char sig[80];
    sign("k3y", PAYLOAD, sig);
    decide(t, "k3y", PAYLOAD, sig, "pull_request", "d-1", &r);
    ASSERT_EQ_INT(r.outcome, WEBHOOK_CREATED);
    ASSERT_EQ_INT(r.http_status, 201);
    const cJSON *spec = json_get(r.session, "spec");
    ASSERT_EQ_STR(json_get(spec, "objective")->valuestring, "Review #42: Fix the parser");
    ASSERT_EQ_STR(json_get(json_get(spec, "context"), "text")->valuestring, "https://x/pr/42");
    ASSERT_EQ_STR(json_get(json_get(spec, "templateRef"), "name")->valuestring, "reviewer");
    const cJSON *meta = json_get(r.session, "metadata");
    ASSERT_EQ_STR(json_get(meta, "name")->valuestring, r.session_name);
    ASSERT_EQ_STR(json_get(json_get(meta, "annotations"), TSPEC_ANN_DELIVERY)->valuestring, "d-1");
    ASSERT_EQ_STR(json_get(cJSON_GetArrayItem(json_get(meta, "ownerReferences"), 0), "uid")
                      ->valuestring,
                  "uid-1");
    char *first = xstrdup(r.session_name);
    webhook_result_done(&r);
    /* a redelivery: the same name */
    decide(t, "k3y", PAYLOAD, sig, "pull_request", "d-1", &r);
    ASSERT_EQ_STR(r.session_name, first);
    webhook_result_done(&r);
    free(first);
    /* wrong key: refused before anything else is looked at */
    decide(t, "other", PAYLOAD, sig, "pull_request", NULL, &r);
    ASSERT_EQ_INT(r.outcome, WEBHOOK_BAD_SIGNATURE);
    ASSERT_EQ_INT(r.http_status, 401);
    ASSERT_TRUE(strstr(r.message, "k3y") == NULL && strstr(r.message, sig + 7) == NULL);
    webhook_result_done(&r);
    /* a body changed after signing */
    decide(t, "k3y", "{\"action\":\"opened\"}", sig, "pull_request", "d-2", &r);
    ASSERT_EQ_INT(r.outcome, WEBHOOK_BAD_SIGNATURE);
    webhook_result_done(&r);
    /* filtered by header and by field */
    decide(t, "k3y", PAYLOAD, sig, "push", "d-3", &r);
    ASSERT_EQ_INT(r.outcome, WEBHOOK_FILTERED);
    ASSERT_EQ_INT(r.http_status, 202);
    webhook_result_done(&r);
    const char *closed = "{\"action\":\"closed\",\"number\":1,\"pull_request\":{\"title\":\"t\"}}";
    sign("k3y", closed, sig);
    decide(t, "k3y", closed, sig, "pull_request", "d-4", &r);
    ASSERT_EQ_INT(r.outcome, WEBHOOK_FILTERED);
    ASSERT_CONTAINS(r.message, "action");
    webhook_result_done(&r);
    /* the mapped field is missing */
    const char *nourl = "{\"action\":\"opened\",\"number\":1,\"pull_request\":{\"title\":\"t\"}}";
    sign("k3y", nourl, sig);
    decide(t, "k3y", nourl, sig, "pull_request", "d-5", &r);
    ASSERT_EQ_INT(r.outcome, WEBHOOK_MALFORMED);
    ASSERT_EQ_INT(r.http_status, 422);
    ASSERT_EQ_STR(r.reason, "MappedFieldMissing");
    ASSERT_CONTAINS(r.message, "pull_request.html_url");
    webhook_result_done(&r);
    /* no delivery id, a bad one, not JSON */
    sign("k3y", PAYLOAD, sig);
    decide(t, "k3y", PAYLOAD, sig, "pull_request", NULL, &r);
    ASSERT_EQ_INT(r.outcome, WEBHOOK_MALFORMED);
    ASSERT_EQ_INT(r.http_status, 400);
    webhook_result_done(&r);
    decide(t, "k3y", PAYLOAD, sig, "pull_request", "a b", &r);
    ASSERT_EQ_STR(r.reason, "BadDeliveryId");
    webhook_result_done(&r);
    sign("k3y", "not json", sig);
    decide(t, "k3y", "not json", sig, "pull_request", "d-6", &r);
    ASSERT_EQ_STR(r.reason, "MalformedPayload");
    webhook_result_done(&r);
    /* too large: refused whatever the rest says */
    struct hdrs h = {{NULL}, {NULL}};
    struct webhook_delivery d = {.body = "", .len = 0, .too_large = true, .header = hget,
                                 .hctx = &h};
    webhook_decide(t, (const unsigned char *)"k3y", 3, &d, &r);
    ASSERT_EQ_INT(r.outcome, WEBHOOK_TOO_LARGE);
    ASSERT_EQ_INT(r.http_status, 413);
    webhook_result_done(&r);
    /* suspended: after the signature */
    t->suspend = true;
    sign("k3y", PAYLOAD, sig);
    decide(t, "k3y", PAYLOAD, sig, "pull_request", "d-7", &r);
    ASSERT_EQ_INT(r.outcome, WEBHOOK_SUSPENDED);
    webhook_result_done(&r);
    tspec_free(t);
}

/* ---- schedules, with the clock as an input ------------------------------ */

#include "trigger/tsched.h"

/* digits of s[i..i+n) as a number (test input, fixed positions) */
static int digits(const char *s, int i, int n)
{
    int v = 0;
    for (int k = 0; k < n; k++) {
        if (s[i + k] < '0' || s[i + k] > '9')
            th_fail(__FILE__, __LINE__, "bad time %s", s);
        v = v * 10 + (s[i + k] - '0');
    }
    return v;
}

static int64_t at(const char *s) /* "2026-06-01T09:00:05" UTC */
{
    if (strlen(s) != 19)
        th_fail(__FILE__, __LINE__, "bad time %s", s);
    return tzwin_days_from_civil(digits(s, 0, 4), digits(s, 5, 2), digits(s, 8, 2)) * 86400 +
           digits(s, 11, 2) * 3600 + digits(s, 14, 2) * 60 + digits(s, 17, 2);
}

static struct tspec *sched(const char *cron, const char *policy, int deadline)
{
    char json[512];
    snprintf(json, sizeof json,
             "{\"metadata\":{\"name\":\"nightly\"},\"spec\":{\"templateRef\":{\"name\":\"t\"},"
             "\"objective\":\"x\",\"schedule\":{\"cron\":\"%s\",\"concurrencyPolicy\":\"%s\"%s}}}",
             cron, policy, deadline >= 0 ? ",\"startingDeadlineSeconds\":300" : "");
    return trigger(json);
}

static struct tsched_output run_sched(const struct tspec *t, const struct tzwin_zone *z,
                                      const char *created, const char *last, const char *now,
                                      size_t nactive, int64_t last_skipped)
{
    struct tsched_input in = {.t = t, .z = z, .now = at(now), .created = at(created),
                              .last_schedule = last ? at(last) : 0,
                              .last_skipped = last_skipped, .nactive = nactive};
    struct tsched_output out;
    tsched_decide(&in, &out);
    return out;
}

TEST(tsched_first_slot_and_next)
{
    struct tzwin_zone z;
    tzwin_zone_utc(&z);
    struct tspec *t = sched("0 9 * * *", "Allow", -1);
    struct tsched_output o = run_sched(t, &z, "2026-06-01T08:59:30", NULL, "2026-06-01T08:59:50",
                                       0, 0);
    ASSERT_EQ_INT(o.action, TSCHED_NONE);
    ASSERT_EQ_INT(o.next, at("2026-06-01T09:00:00"));
    o = run_sched(t, &z, "2026-06-01T08:59:30", NULL, "2026-06-01T09:00:05", 0, 0);
    ASSERT_EQ_INT(o.action, TSCHED_CREATE);
    ASSERT_EQ_INT(o.slot, at("2026-06-01T09:00:00"));
    ASSERT_TRUE(o.record_slot);
    ASSERT_EQ_INT(o.next, at("2026-06-02T09:00:00"));
    /* once recorded, the same slot is not taken again */
    o = run_sched(t, &z, "2026-06-01T08:59:30", "2026-06-01T09:00:00", "2026-06-01T09:30:00", 0,
                  0);
    ASSERT_EQ_INT(o.action, TSCHED_NONE);
    /* a clock that went back: nothing */
    o = run_sched(t, &z, "2026-06-01T08:59:30", "2026-06-01T09:00:00", "2026-06-01T08:00:00", 0,
                  0);
    ASSERT_EQ_INT(o.action, TSCHED_NONE);
    tspec_free(t);
    tzwin_zone_done(&z);
}

TEST(tsched_downtime_runs_the_latest_missed_slot_once)
{
    struct tzwin_zone z;
    tzwin_zone_utc(&z);
    struct tspec *t = sched("0 9 * * *", "Allow", -1);
    struct tsched_output o = run_sched(t, &z, "2026-05-01T00:00:00", "2026-06-01T09:00:00",
                                       "2026-06-04T10:00:00", 0, 0);
    ASSERT_EQ_INT(o.action, TSCHED_CREATE);
    ASSERT_EQ_INT(o.slot, at("2026-06-04T09:00:00"));
    ASSERT_EQ_INT(o.missed_count, 3);
    ASSERT_FALSE(o.too_many_missed);
    tspec_free(t);
    /* with a deadline the latest is too old: missed, recorded, no session */
    t = sched("0 9 * * *", "Allow", 300);
    o = run_sched(t, &z, "2026-05-01T00:00:00", "2026-06-01T09:00:00", "2026-06-04T09:10:00", 0,
                  0);
    ASSERT_EQ_INT(o.action, TSCHED_MISSED);
    ASSERT_TRUE(o.record_slot);
    o = run_sched(t, &z, "2026-05-01T00:00:00", "2026-06-01T09:00:00", "2026-06-04T09:04:59", 0,
                  0);
    ASSERT_EQ_INT(o.action, TSCHED_CREATE);
    tspec_free(t);
    /* every minute for a day down: counting stops at the bound */
    t = sched("* * * * *", "Allow", -1);
    o = run_sched(t, &z, "2026-05-01T00:00:00", "2026-06-03T10:00:00", "2026-06-04T10:00:30", 0,
                  0);
    ASSERT_EQ_INT(o.action, TSCHED_CREATE);
    ASSERT_TRUE(o.too_many_missed);
    ASSERT_EQ_INT(o.slot, at("2026-06-04T10:00:00"));
    tspec_free(t);
    tzwin_zone_done(&z);
}

TEST(tsched_concurrency_policies)
{
    struct tzwin_zone z;
    tzwin_zone_utc(&z);
    struct tspec *t = sched("*/10 * * * *", "Forbid", -1);
    struct tsched_output o = run_sched(t, &z, "2026-06-01T00:00:00", "2026-06-01T09:00:00",
                                       "2026-06-01T09:10:01", 1, 0);
    ASSERT_EQ_INT(o.action, TSCHED_FORBIDDEN);
    ASSERT_TRUE(o.new_skip);
    ASSERT_FALSE(o.record_slot);
    int64_t slot = o.slot;
    o = run_sched(t, &z, "2026-06-01T00:00:00", "2026-06-01T09:00:00", "2026-06-01T09:12:00", 1,
                  slot);
    ASSERT_EQ_INT(o.action, TSCHED_FORBIDDEN);
    ASSERT_FALSE(o.new_skip); /* counted once */
    /* the active session ended before the next slot: the slot starts late */
    o = run_sched(t, &z, "2026-06-01T00:00:00", "2026-06-01T09:00:00", "2026-06-01T09:15:00", 0,
                  slot);
    ASSERT_EQ_INT(o.action, TSCHED_CREATE);
    ASSERT_EQ_INT(o.slot, at("2026-06-01T09:10:00"));
    tspec_free(t);
    t = sched("*/10 * * * *", "Replace", -1);
    o = run_sched(t, &z, "2026-06-01T00:00:00", "2026-06-01T09:00:00", "2026-06-01T09:10:01", 2,
                  0);
    ASSERT_EQ_INT(o.action, TSCHED_CREATE);
    ASSERT_TRUE(o.replace);
    tspec_free(t);
    t = sched("*/10 * * * *", "Allow", -1);
    o = run_sched(t, &z, "2026-06-01T00:00:00", "2026-06-01T09:00:00", "2026-06-01T09:10:01", 2,
                  0);
    ASSERT_EQ_INT(o.action, TSCHED_CREATE);
    ASSERT_FALSE(o.replace);
    tspec_free(t);
    tzwin_zone_done(&z);
}

TEST(tsched_suspend_and_resume)
{
    struct tzwin_zone z;
    tzwin_zone_utc(&z);
    struct tspec *t = sched("0 * * * *", "Allow", 300);
    t->suspend = true;
    struct tsched_output o = run_sched(t, &z, "2026-06-01T00:00:00", "2026-06-01T09:00:00",
                                       "2026-06-01T12:00:10", 0, 0);
    ASSERT_EQ_INT(o.action, TSCHED_NONE);
    ASSERT_EQ_INT(o.next, at("2026-06-01T13:00:00"));
    /* resumed at 12:20: the 12:00 slot is past the deadline */
    t->suspend = false;
    o = run_sched(t, &z, "2026-06-01T00:00:00", "2026-06-01T09:00:00", "2026-06-01T12:20:00", 0,
                  0);
    ASSERT_EQ_INT(o.action, TSCHED_MISSED);
    ASSERT_EQ_INT(o.slot, at("2026-06-01T12:00:00"));
    tspec_free(t);
    tzwin_zone_done(&z);
}

TEST(tsched_dst_in_berlin)
{
    struct tzwin_zone z;
    struct tern_err e = {0};
    if (tzwin_load(NULL, "Europe/Berlin", &z, &e))
        th_fail(__FILE__, __LINE__, "zone: %s", e.msg);
    struct tspec *t = sched("30 2 * * *", "Allow", -1);
    /* spring forward: 02:30 does not exist; the slot is 03:00 CEST */
    struct tsched_output o = run_sched(t, &z, "2026-03-01T00:00:00", "2026-03-28T01:30:00",
                                       "2026-03-29T01:00:10", 0, 0);
    ASSERT_EQ_INT(o.action, TSCHED_CREATE);
    ASSERT_EQ_INT(o.slot, at("2026-03-29T01:00:00"));
    /* fall back: 02:30 CEST ran at 00:30 UTC; 02:30 CET an hour later is
     * the same label and starts nothing */
    o = run_sched(t, &z, "2026-03-01T00:00:00", "2026-10-25T00:30:00", "2026-10-25T01:31:00", 0,
                  0);
    ASSERT_EQ_INT(o.action, TSCHED_NONE);
    ASSERT_EQ_INT(o.next, at("2026-10-26T01:30:00"));
    tzwin_zone_done(&z);
    tspec_free(t);
}
