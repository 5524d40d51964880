/* client.c - POST /chat/completions with retries (decisions pure, I/O thin). */
#include "model/client.h"

#include "base/limits.h"
#include "base/mem.h"
#include "http/httpc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdint.h>
#include <time.h>

void model_retry_defaults(struct model_retry_policy *p)
{
    if (p->max_retries == 0)
        p->max_retries = 2;
    if (p->max_retries < 0)
        p->max_retries = 0;
    if (p->max_retries > TERN_MODEL_MAX_RETRIES)
        p->max_retries = TERN_MODEL_MAX_RETRIES;
    if (p->initial_ms <= 0)
        p->initial_ms = 500;
    if (p->max_backoff_ms <= 0)
        p->max_backoff_ms = 8000;
    if (p->max_server_delay_ms <= 0)
        p->max_server_delay_ms = 60000;
    if (p->max_total_ms <= 0)
        p->max_total_ms = 120000;
}

bool model_retry_wanted(long status, const char *x_should_retry)
{
    if (x_should_retry) {
        if (strcmp(x_should_retry, "true") == 0)
            return true;
        if (strcmp(x_should_retry, "false") == 0)
            return false;
    }
    if (status == 0)
        return true; /* transport error: connection refused, reset, timeout */
    return status == 408 || status == 409 || status == 429 || status >= 500;
}

/* A non-negative decimal ("1", "1.5"); returns 0 or -EINVAL. */
static int parse_decimal(const char *s, double *ret)
{
    if (!s || !*s || (*s != '.' && (*s < '0' || *s > '9')))
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !end || *end || !isfinite(v) || v < 0)
        return -EINVAL;
    *ret = v;
    return 0;
}

static const char *const month_names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

static int two_digits(const char *s, int *ret)
{
    if (s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9')
        return -EINVAL;
    *ret = (s[0] - '0') * 10 + (s[1] - '0');
    return 0;
}

int model_parse_http_date(const char *s, int64_t *ret_unix_ms)
{
    /* "Sun, 06 Nov 1994 08:49:37 GMT": exactly 29 characters */
    if (!s || strlen(s) != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' ||
        s[16] != ' ' || s[19] != ':' || s[22] != ':' || s[25] != ' ' || strcmp(s + 26, "GMT"))
        return -EINVAL;
    struct tm tm = {0};
    int mon = -1, y1, y2;
    for (int i = 0; i < 12; i++)
        if (strncasecmp(s + 8, month_names[i], 3) == 0)
            mon = i;
    if (mon < 0 || two_digits(s + 5, &tm.tm_mday) || two_digits(s + 12, &y1) ||
        two_digits(s + 14, &y2) || two_digits(s + 17, &tm.tm_hour) ||
        two_digits(s + 20, &tm.tm_min) || two_digits(s + 23, &tm.tm_sec))
        return -EINVAL;
    if (tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return -EINVAL;
    tm.tm_mon = mon;
    tm.tm_year = y1 * 100 + y2 - 1900;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -EINVAL;
    *ret_unix_ms = (int64_t)t * 1000;
    return 0;
}

long model_retry_delay_ms(const struct model_retry_policy *p, int retries_done,
                          const char *retry_after_ms, const char *retry_after, int64_t now_unix_ms,
                          double jitter01)
{
    double server = -1, v;
    int64_t when;
    if (parse_decimal(retry_after_ms, &v) == 0)
        server = v;
    else if (parse_decimal(retry_after, &v) == 0)
        server = v * 1000.0;
    else if (retry_after && model_parse_http_date(retry_after, &when) == 0)
        server = (double)(when - now_unix_ms);
    if (server > 0 && server <= (double)p->max_server_delay_ms)
        return (long)ceil(server);

    double d = (double)p->initial_ms;
    for (int i = 0; i < retries_done && d < (double)p->max_backoff_ms; i++)
        d *= 2;
    if (d > (double)p->max_backoff_ms)
        d = (double)p->max_backoff_ms;
    if (jitter01 < 0)
        jitter01 = 0;
    if (jitter01 >= 1)
        jitter01 = 0.999999;
    return (long)(d * (1.0 - 0.25 * jitter01));
}

/* ---- shell ------------------------------------------------------------- */

struct model_client {
    struct model_client_config cfg;
    struct httpc *http;
    char *url;
    char *hdr_auth, *hdr_org, *hdr_proj;
    unsigned seed; /* jitter state when no rand01 is injected */
};

static int64_t real_mono_ms(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t real_wall_ms(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void real_sleep_ms(void *ctx, long ms)
{
    (void)ctx;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The default jitter source: a per-client rand_r state (no cryptographic
 * quality needed). */
static double client_rand01(struct model_client *c)
{
    if (c->cfg.rand01)
        return c->cfg.rand01(c->cfg.ctx);
    return (double)rand_r(&c->seed) / ((double)RAND_MAX + 1.0);
}

static int64_t mono(const struct model_client *c)
{
    return c->cfg.mono_ms ? c->cfg.mono_ms(c->cfg.ctx) : real_mono_ms(NULL);
}

static int64_t wall(const struct model_client *c)
{
    return c->cfg.wall_ms ? c->cfg.wall_ms(c->cfg.ctx) : real_wall_ms(NULL);
}

/* Sleeps ms in slices so a raised cancel flag ends the wait early. Returns 0
 * or -ECANCELED. */
static int client_sleep(const struct model_client *c, long ms)
{
    if (c->cfg.sleep_ms) {
        c->cfg.sleep_ms(c->cfg.ctx, ms);
        return c->cfg.cancel && atomic_load(c->cfg.cancel) ? -ECANCELED : 0;
    }
    while (ms > 0) {
        if (c->cfg.cancel && atomic_load(c->cfg.cancel))
            return -ECANCELED;
        long slice = ms < 100 ? ms : 100;
        real_sleep_ms(NULL, slice);
        ms -= slice;
    }
    return c->cfg.cancel && atomic_load(c->cfg.cancel) ? -ECANCELED : 0;
}

struct model_client *model_client_new(const struct model_client_config *cfg)
{
    struct model_client *c = xcalloc(1, sizeof *c);
    c->cfg = *cfg;
    model_retry_defaults(&c->cfg.retry);
    if (c->cfg.timeout_ms <= 0)
        c->cfg.timeout_ms = 600000;
    if (c->cfg.connect_timeout_ms <= 0)
        c->cfg.connect_timeout_ms = 10000;
    const char *base = cfg->base_url ? cfg->base_url : "https://api.openai.com/v1";
    size_t bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/')
        bl--;
    c->url = xasprintf("%.*s/chat/completions", (int)bl, base);
    if (cfg->api_key && *cfg->api_key)
        c->hdr_auth = xasprintf("Authorization: Bearer %s", cfg->api_key);
    if (cfg->organization && *cfg->organization)
        c->hdr_org = xasprintf("OpenAI-Organization: %s", cfg->organization);
    if (cfg->project && *cfg->project)
        c->hdr_proj = xasprintf("OpenAI-Project: %s", cfg->project);
    c->seed = (unsigned)real_wall_ms(NULL) ^ (unsigned)(uintptr_t)c;
    c->http = httpc_new();
    return c;
}

void model_client_free(struct model_client *c)
{
    if (!c)
        return;
    httpc_free(c->http);
    free(c->url);
    free(c->hdr_auth);
    free(c->hdr_org);
    free(c->hdr_proj);
    free(c);
}

void model_call_result_done(struct model_call_result *r)
{
    if (!r)
        return;
    free(r->body);
    free(r->request_id);
    memset(r, 0, sizeof *r);
}

int model_client_call(struct model_client *c, const char *body, size_t body_len,
                      struct model_call_result *ret, struct tern_err *err)
{
    const char *headers[8];
    size_t nh = 0;
    headers[nh++] = "Content-Type: application/json";
    headers[nh++] = "Accept: application/json";
    if (c->hdr_auth)
        headers[nh++] = c->hdr_auth;
    if (c->hdr_org)
        headers[nh++] = c->hdr_org;
    if (c->hdr_proj)
        headers[nh++] = c->hdr_proj;
    headers[nh] = NULL;

    const int64_t start = mono(c);
    long waited = 0;
    int retries = 0;
    for (;;) {
        struct httpc_request req = {
            .method = "POST",
            .url = c->url,
            .headers = headers,
            .body = body,
            .body_len = body_len,
            .timeout_ms = c->cfg.timeout_ms,
            .connect_timeout_ms = c->cfg.connect_timeout_ms,
            .max_body = TERN_MODEL_MAX_RESPONSE,
            .cancel = c->cfg.cancel,
        };
        struct httpc_response resp = {0};
        struct tern_err herr = {0};
        int rc = httpc_do(c->http, &req, &resp, &herr);
        long status = rc == 0 ? resp.status : 0;
        const char *should = rc == 0 ? httpc_header(&resp, "x-should-retry") : NULL;
        bool retryable = rc != -ECANCELED && rc != TERN_ETOOLARGE &&
                         model_retry_wanted(status, should);
        long delay = 0;
        if (retryable && retries < c->cfg.retry.max_retries) {
            delay = model_retry_delay_ms(
                &c->cfg.retry, retries, rc == 0 ? httpc_header(&resp, "retry-after-ms") : NULL,
                rc == 0 ? httpc_header(&resp, "retry-after") : NULL, wall(c), client_rand01(c));
            if (mono(c) + delay - start > c->cfg.retry.max_total_ms)
                retryable = false;
        } else {
            retryable = false;
        }
        if (!retryable) {
            if (rc != 0) {
                int code = rc;
                if (err) {
                    *err = herr;
                    err_wrap(err, code, "POST %s (attempt %d)", c->url, retries + 1);
                }
                httpc_response_done(&resp);
                return code;
            }
            struct model_call_result r = {0};
            r.status = resp.status;
            r.body_len = resp.body.len;
            r.body = buf_steal(&resp.body);
            const char *rid = httpc_header(&resp, "x-request-id");
            r.request_id = rid ? xstrdup(rid) : NULL;
            r.attempts = retries + 1;
            r.elapsed_ms = (long)(mono(c) - start);
            r.waited_ms = waited;
            httpc_response_done(&resp);
            *ret = r;
            return 0;
        }
        httpc_response_done(&resp);
        int src = client_sleep(c, delay);
        if (src)
            return err_set(err, src, "POST %s: cancelled", c->url);
        waited += delay;
        retries++;
    }
}
