/* client.h - the HTTP side of the model client: POST {base}/chat/completions
 * with retries.
 *
 * The retry rules follow the official OpenAI SDK: retry transport errors and
 * HTTP 408, 409, 429 and >= 500, unless the response says
 * `x-should-retry: false` (and retry any status when it says `true`). The
 * delay is the server's `retry-after-ms`, else `retry-after` (seconds or an
 * HTTP date) when it is within (0, max_server_delay_ms]; otherwise a capped
 * exponential backoff initial_ms * 2^n (n = retries so far), capped at
 * max_backoff_ms, times a jitter factor in [0.75, 1]. Retries stop after
 * max_retries or when the next wait would end past max_total_ms since the
 * first attempt started.
 *
 * The decision functions are pure (model_retry_*); model_client_call is the
 * shell. Time, sleeping and randomness are injectable for tests.
 */
#ifndef TERN_MODEL_CLIENT_H
#define TERN_MODEL_CLIENT_H

#include "base/err.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct model_retry_policy {
    int max_retries;          /* retries after the first attempt; 0 = default 2, < 0 = none */
    long initial_ms;          /* first backoff; default 500 */
    long max_backoff_ms;      /* backoff cap; default 8000 */
    long max_server_delay_ms; /* longest server-requested delay honoured; default 60000 */
    long max_total_ms;        /* bound on first start .. last retry start; default 120000 */
};

/* Fills zero fields of p with the defaults above. */
void model_retry_defaults(struct model_retry_policy *p);

/* Whether an attempt that ended with HTTP status (0 = transport error, no
 * response) and the given x-should-retry header value (or NULL) should be
 * retried, budget permitting. Pure. */
bool model_retry_wanted(long status, const char *x_should_retry);

/* The delay before retry number retries_done+1, from the response headers
 * (each may be NULL), the current wall-clock time (Unix ms, for an HTTP-date
 * retry-after) and jitter01 in [0, 1). Pure. */
long model_retry_delay_ms(const struct model_retry_policy *p, int retries_done,
                          const char *retry_after_ms, const char *retry_after, int64_t now_unix_ms,
                          double jitter01);

/* Parses an HTTP date (IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT")
 * into Unix ms. Returns 0 or -EINVAL. */
int model_parse_http_date(const char *s, int64_t *ret_unix_ms);

struct model_client_config {
    const char *base_url;     /* e.g. "https://api.openai.com/v1" (no trailing path) */
    const char *api_key;      /* sent as "Authorization: Bearer"; NULL = none */
    const char *organization; /* OpenAI-Organization, or NULL */
    const char *project;      /* OpenAI-Project, or NULL */
    long timeout_ms;          /* per attempt; default 600000 */
    long connect_timeout_ms;  /* default 10000 */
    struct model_retry_policy retry;
    /* Injectable environment; NULL = the real clock / nanosleep / random. */
    int64_t (*mono_ms)(void *ctx);  /* monotonic ms */
    int64_t (*wall_ms)(void *ctx);  /* Unix ms */
    void (*sleep_ms)(void *ctx, long ms);
    double (*rand01)(void *ctx);    /* [0, 1) */
    void *ctx;
    atomic_bool *cancel;            /* raise to abort (sleeps check it too), or NULL */
};

struct model_client;

/* A client; the config's strings are borrowed and must outlive it. Free with
 * model_client_free (accepts NULL). */
struct model_client *model_client_new(const struct model_client_config *cfg);
void model_client_free(struct model_client *c);

struct model_call_result {
    long status;        /* HTTP status of the last attempt */
    char *body;         /* its body (NUL-terminated), owned */
    size_t body_len;
    char *request_id;   /* its x-request-id, or NULL; owned */
    int attempts;       /* requests sent, >= 1 */
    long elapsed_ms;    /* first attempt start .. end */
    long waited_ms;     /* total time spent sleeping between attempts */
};

/* Sends body (a chat_build_request result) with retries. Returns 0 and *ret
 * when some attempt got an HTTP response that is final (2xx, a non-retryable
 * status, or a retryable one with the budget spent: check ret->status);
 * returns TERN_EUNREACHABLE / TERN_ETIMEOUT / TERN_ETOOLARGE (from the last
 * attempt) when no response could be had, or -ECANCELED. *ret is set only on
 * success; release it with model_call_result_done. */
int model_client_call(struct model_client *c, const char *body, size_t body_len,
                      struct model_call_result *ret, struct tern_err *err);
void model_call_result_done(struct model_call_result *r);

#endif
