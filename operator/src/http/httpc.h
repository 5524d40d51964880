/* httpc.h - HTTP client over libcurl.
 *
 * One struct httpc per thread (it owns a curl easy handle, so connections are
 * kept alive between requests); it is not thread-safe. A request describes
 * everything about one exchange; the response owns its body and headers.
 *
 * Bodies are bounded: a response larger than req.max_body fails with
 * TERN_ETOOLARGE. For streams (watches), set on_line: the body is delivered
 * line by line, reassembled across chunk boundaries in a buffer bounded by
 * max_line, and not accumulated. Never set a total timeout on a stream; use
 * idle_timeout_ms to notice a silent peer. on_data delivers raw chunks the
 * same way (for parsers of their own, such as SSE).
 *
 * Errors: TERN_EUNREACHABLE (connect/resolve failed), TERN_ETIMEOUT,
 * TERN_ETOOLARGE, -ECANCELED (cancel flag raised), TERN_EHTTP only from
 * helpers that require 2xx, or the non-zero value an on_line callback
 * returned. A transport error after the request was sent is reported with
 * resp->sent = true so callers of non-idempotent writes can say "outcome
 * unknown". HTTP error statuses are not errors here: check resp->status.
 */
#ifndef TERN_HTTPC_H
#define TERN_HTTPC_H

#include "base/buf.h"
#include "base/err.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct httpc;

/* TLS material: PEM blobs from memory (never written to files), or files.
 * Files are read again for every new connection (and the CA file at least
 * every TERN_HTTP_CA_CACHE_S seconds), so certificates rotated on disk take
 * effect without a restart; a connection already open keeps its session. */
struct httpc_tls {
    const char *ca_file;   /* CA bundle path, or NULL */
    const char *ca_pem;    /* CA PEM in memory, or NULL */
    size_t ca_pem_len;
    const char *cert_pem;  /* client certificate PEM, or NULL */
    size_t cert_pem_len;
    const char *key_pem;   /* client key PEM, or NULL */
    size_t key_pem_len;
    const char *cert_file; /* client certificate (PEM chain) path, or NULL */
    const char *key_file;  /* its key (PEM) path, or NULL */
    bool insecure;         /* skip server verification */
};

struct httpc_request {
    const char *method;            /* "GET" when NULL */
    const char *url;
    const char *const *headers;    /* "Name: value" strings, NULL-terminated, or NULL */
    const void *body;              /* request body, or NULL */
    size_t body_len;
    long timeout_ms;               /* whole exchange; 0 = none (streams) */
    long connect_timeout_ms;       /* 0 = 10 s */
    long idle_timeout_ms;          /* fail if no byte arrives for this long; 0 = off */
    size_t max_body;               /* response cap; 0 = TERN_HTTP_MAX_BODY */
    const struct httpc_tls *tls;   /* NULL = system defaults */
    /* streaming: when set, called for each complete line (without '\n');
     * a non-zero return stops the transfer and is returned by httpc_do. */
    int (*on_line)(void *ctx, const char *line, size_t len);
    /* raw streaming (an SSE stream, a file): when set (and on_line is not),
     * each chunk of the body as it arrives, with the response's status; a non-zero return stops
     * the transfer and is returned by httpc_do. The body is not kept. */
    int (*on_data)(void *ctx, long status, const char *p, size_t n);
    void *ctx;
    size_t max_line;               /* 0 = TERN_HTTP_MAX_LINE */
    atomic_bool *cancel;           /* raise to abort a running request, or NULL */
    /* tests: when set, the body is handed to the connection in two parts
     * (the first half, then the rest) and on_upload is called in between,
     * with the bytes handed over so far; it may stop or kill the process
     * (a crash in the middle of an upload). */
    void (*on_upload)(void *ctx, size_t sent, size_t total);
    void *upload_ctx;
};

struct httpc_response {
    long status;
    struct buf body;               /* empty for streamed requests */
    char **headers;                /* "name: value" with lowercased names */
    size_t nheaders;
    bool sent;                     /* the request was fully sent */
};

/* A new client; free with httpc_free (accepts NULL). */
struct httpc *httpc_new(void);
void httpc_free(struct httpc *c);

/* Performs one request. On return (success or not), resp holds whatever was
 * received and must be released with httpc_response_done. */
int httpc_do(struct httpc *c, const struct httpc_request *req, struct httpc_response *resp,
             struct tern_err *err);

/* The value of the last header named name (case-insensitive), or NULL. */
const char *httpc_header(const struct httpc_response *resp, const char *name);
void httpc_response_done(struct httpc_response *resp);

/* Percent-encodes s for use in a URL path segment or query value; the result
 * is owned by the caller. */
char *httpc_escape(const char *s);
/* The same for a path of segments: each segment escaped, slashes kept. */
char *httpc_escape_path(const char *s);

#endif
