/* mcpclient.c - MCP over Streamable HTTP (the shell around mcpwire). */
#include "mcp/mcpclient.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "http/httpc.h"
#include "mcp/sse.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define STOP_FOUND 1 /* on_data: the response arrived; stop the transfer */

struct mcpclient {
    char *name, *url;
    char **headers;
    size_t nheaders;
    long connect_timeout_ms;
    atomic_bool *cancel;
    struct httpc *http;
    int64_t next_id;
    bool connected;
    bool stateless;
    char *version;
    char *session; /* Mcp-Session-Id, or NULL */
};

struct mcpclient *mcpclient_new(const struct mcpclient_config *cfg)
{
    struct mcpclient *c = xcalloc(1, sizeof *c);
    c->name = xstrdup(cfg->name ? cfg->name : "?");
    c->url = xstrdup(cfg->url ? cfg->url : "");
    c->nheaders = cfg->nheaders;
    c->headers = cfg->nheaders ? xcalloc(cfg->nheaders, sizeof *c->headers) : NULL;
    for (size_t i = 0; i < cfg->nheaders; i++)
        c->headers[i] = xstrdup(cfg->headers[i]);
    c->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 5000;
    c->cancel = cfg->cancel;
    c->http = httpc_new();
    c->next_id = 1;
    return c;
}

/* ---- one exchange ------------------------------------------------------- */

struct xchg {
    struct httpc_response *resp;
    int64_t want_id;
    int mode;        /* 0 undecided, 1 JSON body, 2 SSE */
    struct buf body; /* JSON mode: the whole body; SSE mode: unused */
    size_t total;    /* bytes received */
    struct sse_parser sse;
    struct mcpwire_reply reply;
    bool found;
    struct tern_err perr; /* why an event could not be read */
    int perr_code;
};

static int on_event(void *ctx, const struct sse_event *ev)
{
    struct xchg *x = ctx;
    if (strcmp(ev->type, "message") != 0)
        return 0;
    struct mcpwire_reply r = {0};
    int rc = mcpwire_find_reply(ev->data, ev->data_len, x->want_id, &r, &x->perr);
    if (rc) {
        x->perr_code = rc;
        return rc;
    }
    if (r.kind == MCPWIRE_NOT_OURS) {
        mcpwire_reply_done(&r);
        return 0;
    }
    x->reply = r;
    x->found = true;
    return STOP_FOUND;
}

static int on_data(void *ctx, long status, const char *p, size_t n)
{
    (void)status; /* judged once the exchange ends */
    struct xchg *x = ctx;
    if (x->total + n > TERN_MCP_MAX_RESPONSE)
        return TERN_ETOOLARGE;
    x->total += n;
    if (!x->mode) {
        const char *ct = httpc_header(x->resp, "content-type");
        x->mode = ct && strncasecmp(ct, "text/event-stream", 17) == 0 ? 2 : 1;
    }
    if (x->mode == 1)
        return buf_append(&x->body, p, n) ? TERN_ETOOLARGE : 0;
    return sse_feed(&x->sse, p, n, on_event, x);
}

static bool header_ok(const char *v, size_t max)
{
    size_t n = strlen(v);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] > 0x7e)
            return false;
    return true;
}

/* POSTs body (a request with id want_id, or a notification when want_id
 * is 0) and reads the answer into *ret (kind NOT_OURS for a notification
 * accepted with 202). *ret_status gets the HTTP status. */
static int exchange(struct mcpclient *c, const char *what, const char *body, int64_t want_id,
                    const char *idem_key, bool with_version, long timeout_ms,
                    struct mcpwire_reply *ret, long *ret_status, struct tern_err *err)
{
    const char *hdrs[TERN_MCP_MAX_HEADERS + 8];
    size_t nh = 0;
    char *session = NULL, *version = NULL, *idem = NULL;
    hdrs[nh++] = "Content-Type: application/json";
    hdrs[nh++] = "Accept: application/json, text/event-stream";
    for (size_t i = 0; i < c->nheaders && i < TERN_MCP_MAX_HEADERS; i++)
        hdrs[nh++] = c->headers[i];
    if (c->session)
        hdrs[nh++] = session = xasprintf("Mcp-Session-Id: %s", c->session);
    if (with_version && c->version)
        hdrs[nh++] = version = xasprintf("MCP-Protocol-Version: %s", c->version);
    if (idem_key)
        hdrs[nh++] = idem = xasprintf("Idempotency-Key: %s", idem_key);
    hdrs[nh] = NULL;

    struct httpc_response resp = {0};
    struct xchg x = {.resp = &resp, .want_id = want_id};
    buf_init(&x.body, TERN_MCP_MAX_RESPONSE);
    sse_init(&x.sse, TERN_MCP_MAX_SSE_LINE, TERN_MCP_MAX_MESSAGE, TERN_MCP_MAX_SSE_EVENTS);
    struct httpc_request req = {
        .method = "POST",
        .url = c->url,
        .headers = hdrs,
        .body = body,
        .body_len = strlen(body),
        .timeout_ms = timeout_ms,
        .connect_timeout_ms = c->connect_timeout_ms,
        .on_data = on_data,
        .ctx = &x,
        .cancel = c->cancel,
    };
    struct tern_err herr = {0};
    int rc = httpc_do(c->http, &req, &resp, &herr);
    *ret_status = resp.status;
    if (rc == STOP_FOUND) {
        rc = 0;
    } else if (rc == x.perr_code && rc) {
        rc = err_set(err, rc, "MCP server %s: %s: %s", c->name, what, x.perr.msg);
        goto out;
    } else if (rc == TERN_ETOOLARGE) {
        rc = err_set(err, rc,
                     "MCP server %s: %s: the answer exceeds a bound (%u bytes, or %u "
                     "bytes in one message)",
                     c->name, what, TERN_MCP_MAX_RESPONSE, TERN_MCP_MAX_MESSAGE);
        goto out;
    } else if (rc) {
        if (rc != TERN_EUNREACHABLE && rc != TERN_ETIMEOUT && rc != -ECANCELED)
            rc = -EIO;
        rc = err_set(err, rc, "MCP server %s: %s: %s", c->name, what, herr.msg);
        goto out;
    }
    /* the session id the server hands out (initialize) */
    const char *sid = httpc_header(&resp, "mcp-session-id");
    if (sid && !c->session && want_id && strcmp(what, "initialize") == 0 && resp.status == 200) {
        if (!header_ok(sid, TERN_MCP_MAX_SESSION_ID)) {
            rc = err_set(err, TERN_EPARSE, "MCP server %s: initialize: an invalid Mcp-Session-Id",
                         c->name);
            goto out;
        }
        c->session = xstrdup(sid);
    }
    if (!x.found && x.mode == 1 && x.body.len) {
        /* a JSON body (also for error statuses: a JSON-RPC error may come
         * with a 4xx); a body that is not JSON-RPC on an error status is
         * the status's problem, not a parse error */
        struct tern_err pe = {0};
        struct mcpwire_reply r = {0};
        int pr = mcpwire_find_reply(buf_str(&x.body), x.body.len, want_id, &r, &pe);
        if (pr == 0 && r.kind != MCPWIRE_NOT_OURS) {
            x.reply = r;
            x.found = true;
        } else {
            mcpwire_reply_done(&r);
            if (pr && resp.status >= 200 && resp.status <= 299) {
                rc = err_set(err, pr, "MCP server %s: %s: %s", c->name, what, pe.msg);
                goto out;
            }
        }
    }
    if (resp.status == 401 || resp.status == 403) {
        const char *how = httpc_header(&resp, "www-authenticate");
        rc = err_set(err, TERN_EAUTH,
                     "MCP server %s: %s: HTTP %ld: the server refused the credential%s%.200s",
                     c->name, what, resp.status, how ? " (WWW-Authenticate: " : "", how ? how : "");
        if (how && err)
            snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg), ")");
        goto out;
    }
    if (resp.status == 404 && c->session) {
        /* the session is gone (whatever the body says): the caller
         * initializes again */
        rc = err_set(err, TERN_EHTTP, "MCP server %s: %s: HTTP 404: the session ended", c->name,
                     what);
        goto out;
    }
    if (x.found) {
        *ret = x.reply;
        x.reply = (struct mcpwire_reply){0};
        rc = 0;
        goto out;
    }
    if (!want_id && (resp.status == 202 || resp.status == 200 || resp.status == 204)) {
        *ret = (struct mcpwire_reply){0};
        rc = 0;
        goto out;
    }
    if (resp.status >= 200 && resp.status <= 299)
        rc = err_set(err, TERN_EPARSE,
                     "MCP server %s: %s: HTTP %ld without the response to request %lld%s", c->name,
                     what, resp.status, (long long)want_id,
                     x.mode == 2 ? " (the event stream ended first)" : "");
    else
        rc = err_set(err, TERN_EHTTP, "MCP server %s: %s: HTTP %ld", c->name, what, resp.status);
out:
    mcpwire_reply_done(&x.reply);
    sse_done(&x.sse);
    buf_done(&x.body);
    httpc_response_done(&resp);
    free(session);
    free(version);
    free(idem);
    return rc;
}

/* ---- the session ------------------------------------------------------- */

static void forget_session(struct mcpclient *c)
{
    free(c->session);
    c->session = NULL;
    free(c->version);
    c->version = NULL;
    c->connected = false;
    c->stateless = false;
}

int mcpclient_connect(struct mcpclient *c, long timeout_ms, struct tern_err *err)
{
    if (c->connected)
        return 0;
    forget_session(c);
    int64_t id = c->next_id++;
    char *body = mcpwire_initialize(id);
    struct mcpwire_reply r = {0};
    long status = 0;
    int rc = exchange(c, "initialize", body, id, NULL, false, timeout_ms, &r, &status, err);
    free(body);
    bool refused = (rc == 0 && r.kind == MCPWIRE_ERROR) ||
                   (rc == TERN_EHTTP && (status == 400 || status == 404 || status == 405));
    if (refused) {
        /* a server of the stateless revision: no initialize, no session */
        mcpwire_reply_done(&r);
        free(c->session);
        c->session = NULL;
        c->version = xstrdup(MCPWIRE_VERSION_STATELESS);
        c->stateless = true;
        c->connected = true;
        if (err)
            *err = (struct tern_err){0};
        return 0;
    }
    if (rc)
        return rc;
    char *v = NULL;
    struct tern_err pe = {0};
    if ((rc = mcpwire_parse_initialize(r.result, &v, &pe))) {
        mcpwire_reply_done(&r);
        forget_session(c);
        return err_set(err, rc, "MCP server %s: %s", c->name, pe.msg);
    }
    mcpwire_reply_done(&r);
    c->version = v;
    body = mcpwire_initialized();
    rc =
        exchange(c, "notifications/initialized", body, 0, NULL, true, timeout_ms, &r, &status, err);
    free(body);
    mcpwire_reply_done(&r);
    if (rc) {
        forget_session(c);
        return rc;
    }
    c->connected = true;
    return 0;
}

const char *mcpclient_version(const struct mcpclient *c)
{
    return c->connected ? c->version : NULL;
}

/* One request with a session, re-initializing once when the server says
 * the session is gone (404). */
static int request(struct mcpclient *c, const char *what, char *(*build)(void *, int64_t),
                   void *bctx, const char *idem_key, long timeout_ms, struct mcpwire_reply *ret,
                   long *ret_status, struct tern_err *err)
{
    int rc;
    for (int attempt = 0;; attempt++) {
        if ((rc = mcpclient_connect(c, timeout_ms, err)))
            return rc;
        int64_t id = c->next_id++;
        char *body = build(bctx, id);
        rc = exchange(c, what, body, id, idem_key, true, timeout_ms, ret, ret_status, err);
        free(body);
        if (rc == TERN_EHTTP && *ret_status == 404 && c->session && attempt == 0) {
            forget_session(c);
            if (err)
                *err = (struct tern_err){0};
            continue;
        }
        return rc;
    }
}

struct list_ctx {
    const char *cursor;
    bool stateless;
};

static char *build_list(void *ctx, int64_t id)
{
    struct list_ctx *l = ctx;
    return mcpwire_tools_list(id, l->cursor, l->stateless);
}

int mcpclient_list_tools(struct mcpclient *c, long timeout_ms, struct mcpwire_tools *ret,
                         struct tern_err *err)
{
    struct mcpwire_tools acc = {0};
    char *cursor = NULL;
    int rc = 0;
    for (int page = 0; page < TERN_MCP_MAX_PAGES; page++) {
        if ((rc = mcpclient_connect(c, timeout_ms, err)))
            goto out;
        struct list_ctx l = {cursor, c->stateless};
        struct mcpwire_reply r = {0};
        long status = 0;
        if ((rc = request(c, "tools/list", build_list, &l, NULL, timeout_ms, &r, &status, err)))
            goto out;
        if (r.kind == MCPWIRE_ERROR) {
            rc = err_set(err, TERN_EPARSE, "MCP server %s: tools/list: error %lld: %s", c->name,
                         (long long)r.code, r.message);
            mcpwire_reply_done(&r);
            goto out;
        }
        struct tern_err pe = {0};
        rc = mcpwire_parse_tools(r.result, &acc, &pe);
        mcpwire_reply_done(&r);
        if (rc) {
            rc = err_set(err, rc, "MCP server %s: %s", c->name, pe.msg);
            goto out;
        }
        free(cursor);
        cursor = acc.next_cursor ? xstrdup(acc.next_cursor) : NULL;
        if (!cursor)
            break;
    }
    free(acc.next_cursor);
    acc.next_cursor = NULL;
    *ret = acc;
    acc = (struct mcpwire_tools){0};
out:
    free(cursor);
    mcpwire_tools_done(&acc);
    return rc;
}

void mcpclient_call_done(struct mcpclient_call *r)
{
    if (!r)
        return;
    mcpwire_call_result_done(&r->result);
    memset(r, 0, sizeof *r);
}

struct call_ctx {
    const char *tool, *args, *key;
    bool stateless;
};

static char *build_call(void *ctx, int64_t id)
{
    struct call_ctx *k = ctx;
    return mcpwire_tools_call(id, k->tool, k->args, k->key, k->stateless);
}

int mcpclient_call_tool(struct mcpclient *c, const char *tool, const char *args_json,
                        const char *idem_key, long timeout_ms, struct mcpclient_call *ret,
                        long *ret_status, struct tern_err *err)
{
    *ret_status = 0;
    int rc = mcpclient_connect(c, timeout_ms, err);
    if (rc)
        return rc;
    struct call_ctx k = {tool, args_json, idem_key, c->stateless};
    struct mcpwire_reply r = {0};
    rc = request(c, "tools/call", build_call, &k, idem_key, timeout_ms, &r, ret_status, err);
    if (rc)
        return rc;
    struct mcpclient_call out = {.http_status = *ret_status};
    if (r.kind == MCPWIRE_ERROR) {
        out.rpc_error = true;
        out.rpc_code = r.code;
        out.result.text = xasprintf("error: MCP error %lld: %s", (long long)r.code, r.message);
        out.result.is_error = true;
    } else {
        struct tern_err pe = {0};
        if ((rc = mcpwire_parse_call_result(r.result, &out.result, &pe))) {
            mcpwire_reply_done(&r);
            return err_set(err, TERN_EPARSE, "MCP server %s: tools/call: %s", c->name, pe.msg);
        }
    }
    mcpwire_reply_done(&r);
    *ret = out;
    return 0;
}

void mcpclient_free(struct mcpclient *c)
{
    if (!c)
        return;
    if (c->session) {
        /* end the session (best effort): DELETE with its id */
        char *sh = xasprintf("Mcp-Session-Id: %s", c->session);
        char *vh = c->version ? xasprintf("MCP-Protocol-Version: %s", c->version) : NULL;
        const char *hdrs[TERN_MCP_MAX_HEADERS + 4];
        size_t nh = 0;
        for (size_t i = 0; i < c->nheaders && i < TERN_MCP_MAX_HEADERS; i++)
            hdrs[nh++] = c->headers[i];
        hdrs[nh++] = sh;
        if (vh)
            hdrs[nh++] = vh;
        hdrs[nh] = NULL;
        struct httpc_request req = {.method = "DELETE",
                                    .url = c->url,
                                    .headers = hdrs,
                                    .timeout_ms = 2000,
                                    .connect_timeout_ms = 1000,
                                    .max_body = 4096};
        struct httpc_response resp = {0};
        httpc_do(c->http, &req, &resp, NULL);
        httpc_response_done(&resp);
        free(sh);
        free(vh);
    }
    httpc_free(c->http);
    for (size_t i = 0; i < c->nheaders; i++)
        free(c->headers[i]);
    free(c->headers);
    free(c->name);
    free(c->url);
    free(c->version);
    free(c->session);
    free(c);
}
