/* bench/triggers - figures for AgentTrigger's pure parts (prints, asserts
 * nothing): cron_next in UTC and in Europe/Berlin (every minute, a daily
 * job, a schedule that matches once a year), the latest missed slot after a
 * year of downtime of an every-minute schedule, webhook_decide on a GitHub
 * pull_request payload (HMAC-SHA256 + JSON + filter + mapping), and HMAC
 * alone over a 1 MiB body (the bound).
 * Usage: build/bench/triggers [iterations]   (default 20000)
 */
#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"
#include "trigger/cron.h"
#include "trigger/tspec.h"
#include "trigger/webhook.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void bench_next(const char *what, const char *expr, const struct tzwin_zone *z, long n)
{
    struct cron c;
    if (cron_parse(expr, &c, NULL))
        abort();
    int64_t t = 1774738800 - 86400 * 3, u;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        if (cron_next(&c, z, t, &u))
            break;
        t = u;
    }
    double dt = now_s() - t0;
    printf("cron_next %-28s %-14s %8.2f us/slot\n", expr, what, dt / (double)n * 1e6);
}

struct hdrs {
    const char *sig;
};

static const char *hget(void *ctx, const char *name)
{
    struct hdrs *h = ctx;
    if (strcasecmp(name, "X-Hub-Signature-256") == 0)
        return h->sig;
    if (strcasecmp(name, "X-GitHub-Event") == 0)
        return "pull_request";
    if (strcasecmp(name, "X-GitHub-Delivery") == 0)
        return "72d3162e-cc78-11e3-81ab-4c9367dc0958";
    return NULL;
}

static void sign(const char *key, const char *body, size_t len, char out[80])
{
    unsigned char md[32];
    unsigned int n = 0;
    HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)body, len, md, &n);
    memcpy(out, "sha256=", 7);
    for (int i = 0; i < 32; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
}

int main(int argc, char **argv)
{
    int64_t n = 20000;
    if (argc > 1 && num_parse_range(argv[1], 1, 100000000, &n)) {
        fprintf(stderr, "usage: %s [iterations]\n", argv[0]);
        return 2;
    }
    struct tzwin_zone utc, berlin;
    tzwin_zone_utc(&utc);
    if (tzwin_load(NULL, "Europe/Berlin", &berlin, NULL)) {
        fprintf(stderr, "no Europe/Berlin in /usr/share/zoneinfo\n");
        return 1;
    }
    bench_next("UTC", "* * * * *", &utc, n);
    bench_next("Europe/Berlin", "* * * * *", &berlin, n);
    bench_next("Europe/Berlin", "30 2 * * 1-5", &berlin, n / 10 + 1);
    bench_next("Europe/Berlin", "0 0 29 2 *", &berlin, 20);

    struct cron every;
    cron_parse("* * * * *", &every, NULL);
    int64_t slot;
    int count;
    double t0 = now_s();
    cron_last_in(&every, &berlin, 1774738800 - 366 * 86400, 1774738800, TERN_CRON_MAX_MISSED,
                 &slot, &count);
    printf("cron_last_in every minute, a year down:            %8.2f ms (%d counted)\n",
           (now_s() - t0) * 1e3, count);

    const char *tj =
        "{\"metadata\":{\"name\":\"pr-review\",\"namespace\":\"dev\",\"uid\":\"u\"},\"spec\":{"
        "\"templateRef\":{\"name\":\"reviewer\"},"
        "\"objective\":\"Review #{{ number }}: {{ pull_request.title }}\","
        "\"context\":\"{{ pull_request.html_url }}\",\"webhook\":{\"secretRef\":{\"name\":\"h\","
        "\"key\":\"k\"},\"filter\":[{\"header\":\"X-GitHub-Event\",\"values\":[\"pull_request\"]},"
        "{\"field\":\"action\",\"values\":[\"opened\"]}]}}}";
    cJSON *to = NULL;
    struct tspec *ts = NULL;
    if (json_parse(tj, strlen(tj), &to, NULL) || tspec_parse(to, &ts, NULL))
        abort();
    /* a pull_request payload of about 20 kB, as GitHub sends */
    struct buf b;
    buf_init(&b, 1 << 20);
    buf_puts(&b, "{\"action\":\"opened\",\"number\":42,\"pull_request\":{\"title\":\"Fix\","
                 "\"html_url\":\"https://x/pr/42\",\"body\":\"");
    for (int i = 0; i < 20000; i++)
        buf_putc(&b, 'a' + i % 26);
    buf_puts(&b, "\"}}");
    char sig[80];
    sign("k3y", buf_str(&b), b.len, sig);
    struct hdrs h = {sig};
    struct webhook_delivery d = {.body = buf_str(&b), .len = b.len, .header = hget, .hctx = &h};
    long m = (long)(n / 10 + 1);
    t0 = now_s();
    for (long i = 0; i < m; i++) {
        struct webhook_result r;
        webhook_decide(ts, (const unsigned char *)"k3y", 3, &d, &r);
        if (r.outcome != WEBHOOK_CREATED)
            abort();
        webhook_result_done(&r);
    }
    printf("webhook_decide, %zu-byte pull_request payload:      %8.2f us/delivery\n", b.len,
           (now_s() - t0) / (double)m * 1e6);
    char *big = xmalloc(TERN_WEBHOOK_MAX_BODY);
    memset(big, 'x', TERN_WEBHOOK_MAX_BODY);
    t0 = now_s();
    for (int i = 0; i < 50; i++)
        sign("k3y", big, TERN_WEBHOOK_MAX_BODY, sig);
    printf("HMAC-SHA256 over 1 MiB (the body bound):            %8.2f ms\n",
           (now_s() - t0) / 50 * 1e3);
    free(big);
    buf_done(&b);
    tspec_free(ts);
    cJSON_Delete(to);
    tzwin_zone_done(&berlin);
    tzwin_zone_done(&utc);
    return 0;
}
