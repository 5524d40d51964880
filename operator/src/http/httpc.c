/* httpc.c - HTTP client over libcurl. See httpc.h. */
#include "httpc.h"

#include "base/mem.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct httpc {
    CURL *curl;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;

static void global_init(void)
{
    curl_global_init(CURL_GLOBAL_ALL);
}

struct httpc *httpc_new(void)
{
    pthread_once(&global_once, global_init);
    struct httpc *c = xcalloc(1, sizeof *c);
    c->curl = curl_easy_init();
    if (!c->curl)
        abort();
    return c;
}

void httpc_free(struct httpc *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->curl);
    free(c);
}

struct xfer {
    CURL *curl;
    const struct httpc_request *req;
    struct httpc_response *resp;
    struct buf line;
    size_t max_body;
    int cb_err; /* why a callback stopped the transfer */
    size_t up_off; /* on_upload: body bytes handed to curl so far */
};

/* The body in two parts with the on_upload hook between them. */
static size_t on_read(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t total = x->req->body_len, room = size * nmemb;
    if (x->up_off >= total)
        return 0;
    size_t half = total / 2 ? total / 2 : total;
    size_t end = x->up_off < half ? half : total;
    if (x->up_off == half && half < total)
        x->req->on_upload(x->req->upload_ctx, x->up_off, total);
    size_t n = end - x->up_off < room ? end - x->up_off : room;
    memcpy(p, (const char *)x->req->body + x->up_off, n);
    x->up_off += n;
    return n;
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    if (!x->req->on_line && x->req->on_data) {
        long status = 0;
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
        int r = x->req->on_data(x->req->ctx, status, p, n);
        if (r) {
            x->cb_err = r;
            return 0;
        }
        return n;
    }
    if (!x->req->on_line) {
        if (x->resp->body.len + n > x->max_body) {
            x->cb_err = TERN_ETOOLARGE;
            return 0;
        }
        buf_append(&x->resp->body, p, n);
        return n;
    }
    /* split into lines, keeping a partial line for the next chunk */
    size_t off = 0;
    while (off < n) {
        char *nl = memchr(p + off, '\n', n - off);
        size_t take = nl ? (size_t)(nl - (p + off)) : n - off;
        if (buf_append(&x->line, p + off, take)) {
            x->cb_err = TERN_ETOOLARGE;
            return 0;
        }
        off += take;
        if (!nl)
            break;
        off++; /* the '\n' */
        size_t len = x->line.len;
        if (len && x->line.data[len - 1] == '\r')
            len--;
        int r = x->req->on_line(x->req->ctx, buf_str(&x->line), len);
        buf_reset(&x->line);
        if (r) {
            x->cb_err = r;
            return 0;
        }
    }
    return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    size_t len = n;
    while (len && (p[len - 1] == '\n' || p[len - 1] == '\r'))
        len--;
    if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        /* a new response (redirect, 100-continue): forget earlier headers */
        for (size_t i = 0; i < x->resp->nheaders; i++)
            free(x->resp->headers[i]);
        x->resp->nheaders = 0;
        return n;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon || len > TERN_HTTP_MAX_HEADER || x->resp->nheaders >= 256)
        return n;
    char *h = xstrndup(p, len);
    for (char *q = h; *q && *q != ':'; q++)
        *q = (char)tolower((unsigned char)*q);
    x->resp->headers =
        xreallocarray(x->resp->headers, x->resp->nheaders + 1, sizeof *x->resp->headers);
    x->resp->headers[x->resp->nheaders++] = h;
    return n;
}

static int on_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    struct xfer *x = ud;
    if (x->req->cancel && atomic_load(x->req->cancel)) {
        x->cb_err = -ECANCELED;
        return 1;
    }
    return 0;
}

static void set_tls(CURL *h, const struct httpc_tls *t)
{
    if (!t)
        return;
    if (t->ca_file) {
        curl_easy_setopt(h, CURLOPT_CAINFO, t->ca_file);
#if LIBCURL_VERSION_NUM >= 0x075700 /* 7.87: libcurl caches the CA store, 24 h by default */
        curl_easy_setopt(h, CURLOPT_CA_CACHE_TIMEOUT, (long)TERN_HTTP_CA_CACHE_S);
#endif
    }
    if (t->cert_file) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, t->cert_file);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (t->key_file) {
        curl_easy_setopt(h, CURLOPT_SSLKEY, t->key_file);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (t->ca_pem) {
        struct curl_blob blob = {(void *)t->ca_pem, t->ca_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    }
    if (t->cert_pem) {
        struct curl_blob blob = {(void *)t->cert_pem, t->cert_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (t->key_pem) {
        struct curl_blob blob = {(void *)t->key_pem, t->key_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (t->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
}

int httpc_do(struct httpc *c, const struct httpc_request *req, struct httpc_response *resp,
             struct tern_err *err)
{
    CURL *h = c->curl;
    struct curl_slist *hdrs = NULL;
    struct xfer x = {.curl = h, .req = req, .resp = resp};
    int r = 0;

    memset(resp, 0, sizeof *resp);
    x.max_body = req->max_body ? req->max_body : TERN_HTTP_MAX_BODY;
    buf_init(&resp->body, x.max_body);
    buf_init(&x.line, req->max_line ? req->max_line : TERN_HTTP_MAX_LINE);

    if (strlen(req->url) > TERN_HTTP_MAX_URL) {
        r = err_set(err, TERN_ETOOLARGE, "URL longer than %d bytes", TERN_HTTP_MAX_URL);
        goto out;
    }
    curl_easy_reset(h);
    const char *method = req->method ? req->method : "GET";
    curl_easy_setopt(h, CURLOPT_URL, req->url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, req->cancel ? 0L : 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     req->connect_timeout_ms ? req->connect_timeout_ms : 10000L);
    if (req->timeout_ms)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, req->timeout_ms);
    if (req->idle_timeout_ms) {
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (req->idle_timeout_ms + 999) / 1000);
    }
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (req->body || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
            strcmp(method, "PATCH") == 0) {
            if (req->on_upload && req->body_len) {
                curl_easy_setopt(h, CURLOPT_POST, 1L);
                curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
                curl_easy_setopt(h, CURLOPT_READDATA, &x);
            } else {
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body ? req->body : "");
            }
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        }
    }
    for (const char *const *p = req->headers; p && *p; p++)
        hdrs = curl_slist_append(hdrs, *p);
    hdrs = curl_slist_append(hdrs, "Expect:"); /* no 100-continue round trip */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    set_tls(h, req->tls);

    CURLcode cr = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    curl_off_t uploaded = 0;
    curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &uploaded);
    resp->sent = resp->status > 0 || (curl_off_t)req->body_len == uploaded;
    if (cr == CURLE_OK) {
        /* a stream that ended with an unterminated final line */
        if (req->on_line && x.line.len) {
            int lr = req->on_line(req->ctx, buf_str(&x.line), x.line.len);
            if (lr)
                r = lr;
        }
        goto out;
    }
    if (x.cb_err) {
        r = x.cb_err;
        if (r == TERN_ETOOLARGE)
            err_set(err, r, "%s %s: response exceeds %zu bytes", method, req->url,
                    req->on_line ? x.line.max : x.max_body);
        else if (r == -ECANCELED)
            err_set(err, r, "%s %s: cancelled", method, req->url);
        goto out;
    }
    switch (cr) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        resp->sent = false;
        r = err_set(err, TERN_EUNREACHABLE, "%s %s: %s", method, req->url, curl_easy_strerror(cr));
        break;
    case CURLE_OPERATION_TIMEDOUT:
        r = err_set(err, TERN_ETIMEOUT, "%s %s: %s", method, req->url, curl_easy_strerror(cr));
        break;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
        resp->sent = false;
        r = err_set(err, TERN_EUNREACHABLE, "%s %s: TLS: %s", method, req->url,
                    curl_easy_strerror(cr));
        break;
    default:
        r = err_set(err, -EIO, "%s %s: %s", method, req->url, curl_easy_strerror(cr));
        break;
    }
out:
    curl_slist_free_all(hdrs);
    buf_done(&x.line);
    return r;
}

const char *httpc_header(const struct httpc_response *resp, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = resp->nheaders; i-- > 0;) {
        const char *h = resp->headers[i];
        if (strncasecmp(h, name, n) == 0 && h[n] == ':') {
            const char *v = h + n + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            return v;
        }
    }
    return NULL;
}

void httpc_response_done(struct httpc_response *resp)
{
    buf_done(&resp->body);
    for (size_t i = 0; i < resp->nheaders; i++)
        free(resp->headers[i]);
    free(resp->headers);
    resp->headers = NULL;
    resp->nheaders = 0;
}

static char *escape(const char *s, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = xmalloc(3 * n + 1), *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' ||
            (keep_slash && *p == '/')) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}

char *httpc_escape(const char *s)
{
    return escape(s, false);
}

char *httpc_escape_path(const char *s)
{
    return escape(s, true);
}
