/* sbx.c - tern-sandboxd client and tool-message rendering. */
#include "runner/sbx.h"

#include "base/limits.h"
#include "base/mem.h"
#include "http/httpc.h"
#include "json/json.h"
#include "runner/testhook.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sbx {
    char *base;   /* "http://HOST:PORT" */
    char *auth;   /* "Authorization: Bearer ..." */
    long connect_timeout_ms, extra_timeout_ms;
    struct httpc *http;
};

struct sbx *sbx_new(const struct sbx_config *cfg)
{
    struct sbx *s = xcalloc(1, sizeof *s);
    s->base = xasprintf("http://%s", cfg->address ? cfg->address : "127.0.0.1:8080");
    s->auth = xasprintf("Authorization: Bearer %s", cfg->token ? cfg->token : "");
    s->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 5000;
    s->extra_timeout_ms = cfg->extra_timeout_ms > 0 ? cfg->extra_timeout_ms : 15000;
    s->http = httpc_new();
    return s;
}

void sbx_free(struct sbx *s)
{
    if (!s)
        return;
    httpc_free(s->http);
    free(s->base);
    free(s->auth);
    free(s);
}

void sbx_result_done(struct sbx_result *r)
{
    if (!r)
        return;
    free(r->body);
    memset(r, 0, sizeof *r);
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sbx_wait_ready(struct sbx *s, int64_t timeout_ms, struct tern_err *err)
{
    char *url = xasprintf("%s/readyz", s->base);
    const char *headers[] = {s->auth, NULL};
    int64_t deadline = mono_ms() + timeout_ms;
    struct tern_err last = {0};
    int rc = TERN_ETIMEOUT;
    for (;;) {
        struct httpc_request req = {.method = "GET",
                                    .url = url,
                                    .headers = headers,
                                    .timeout_ms = 2000,
                                    .connect_timeout_ms = 1000,
                                    .max_body = 4096};
        struct httpc_response resp = {0};
        int r = httpc_do(s->http, &req, &resp, &last);
        long status = resp.status;
        httpc_response_done(&resp);
        if (r == 0 && status == 200) {
            rc = 0;
            break;
        }
        if (r == 0)
            err_set(&last, TERN_EHTTP, "GET /readyz: HTTP %ld", status);
        if (mono_ms() >= deadline)
            break;
        struct timespec pause = {0, 20 * 1000000L}; /* polling a peer that is starting */
        nanosleep(&pause, NULL);
    }
    free(url);
    if (rc)
        rc = err_set(err, TERN_ETIMEOUT, "tern-sandboxd at %s not ready after %lld ms: %s",
                     s->base, (long long)timeout_ms, last.msg[0] ? last.msg : "no answer");
    return rc;
}

/* "/v1/files/" + each path segment percent-encoded ("." = the root). */
static char *path_url(const struct sbx *s, const char *prefix, const char *path)
{
    struct buf b;
    buf_init(&b, TERN_HTTP_MAX_URL);
    buf_printf(&b, "%s%s", s->base, prefix);
    if (path && strcmp(path, ".") != 0) {
        char *esc = httpc_escape_path(path);
        buf_puts(&b, esc);
        free(esc);
    }
    return buf_steal(&b);
}

static void upload_hook(void *ctx, size_t sent, size_t total)
{
    (void)ctx;
    (void)sent;
    (void)total;
    testhook_at("upload");
}

int sbx_call(struct sbx *s, const char *key, const struct policy_args *a, int64_t timeout_ms,
             struct sbx_result *ret, struct tern_err *err)
{
    char *url = NULL, *body = NULL, *keyhdr = NULL;
    const char *headers[5] = {s->auth, NULL, NULL, NULL, NULL};
    size_t nh = 1;
    const char *method = "GET";
    size_t body_len = 0;
    int rc;

    if (key && (a->tool == POLICY_EXEC || a->tool == POLICY_WRITE)) {
        keyhdr = xasprintf("Idempotency-Key: %s", key);
        headers[nh++] = keyhdr;
    }
    switch (a->tool) {
    case POLICY_EXEC: {
        cJSON *o = cJSON_CreateObject();
        json_add_string(o, "cmd", a->cmd);
        if (a->cwd && strcmp(a->cwd, ".") != 0)
            json_add_string(o, "cwd", a->cwd);
        json_add_int64(o, "timeoutMs", timeout_ms);
        body = json_print(o);
        cJSON_Delete(o);
        body_len = strlen(body);
        method = "POST";
        headers[nh++] = "Content-Type: application/json";
        url = xasprintf("%s/v1/exec", s->base);
        break;
    }
    case POLICY_READ: {
        char *u = path_url(s, "/v1/files/", a->path);
        int64_t limit = a->limit >= 0 && a->limit < TERN_RUNNER_MAX_OUTPUT
                            ? a->limit
                            : (int64_t)TERN_RUNNER_MAX_OUTPUT + 1;
        url = xasprintf("%s?offset=%lld&limit=%lld", u, (long long)(a->offset > 0 ? a->offset : 0),
                        (long long)limit);
        free(u);
        break;
    }
    case POLICY_WRITE: {
        char *u = path_url(s, "/v1/files/", a->path);
        url = a->append ? xasprintf("%s?append=true", u) : xstrdup(u);
        free(u);
        method = "PUT";
        body = xstrdup(a->content ? a->content : "");
        body_len = strlen(body);
        headers[nh++] = "Content-Type: application/octet-stream";
        break;
    }
    case POLICY_LIST: {
        char *u = path_url(s, "/v1/list/", a->path);
        url = xasprintf("%s?depth=%lld", u, (long long)(a->depth > 0 ? a->depth : 1));
        free(u);
        break;
    }
    default: return err_set(err, TERN_EINVALID, "unknown tool");
    }

    struct httpc_request req = {
        .method = method,
        .url = url,
        .headers = headers,
        .body = body,
        .body_len = body_len,
        .timeout_ms = (long)timeout_ms + s->extra_timeout_ms,
        .connect_timeout_ms = s->connect_timeout_ms,
        .max_body = TERN_RUNNER_MAX_SANDBOX_BODY,
        .on_upload = a->tool == POLICY_WRITE && testhook_armed("upload") ? upload_hook : NULL,
    };
    struct httpc_response resp = {0};
    rc = httpc_do(s->http, &req, &resp, err);
    if (rc == 0) {
        struct sbx_result r = {.tool = a->tool, .http_status = resp.status};
        r.body_len = resp.body.len;
        r.body = buf_steal(&resp.body);
        if (a->tool == POLICY_EXEC || a->tool == POLICY_WRITE) {
            cJSON *j = NULL;
            if (json_parse(r.body, r.body_len, &j, NULL) == 0)
                r.replayed = cJSON_IsTrue(json_get(j, "replayed"));
            cJSON_Delete(j);
        }
        *ret = r;
    }
    httpc_response_done(&resp);
    free(url);
    free(body);
    free(keyhdr);
    return rc;
}

/* ---- files for the trusted tools --------------------------------------- */

struct fetch_ctx {
    int fd;
    uint64_t got, max;
};

static int fetch_data(void *ctx, long status, const char *p, size_t n)
{
    (void)status; /* the caller checks it */
    struct fetch_ctx *f = ctx;
    if (f->got + n > f->max)
        return TERN_ETOOLARGE;
    for (size_t off = 0; off < n;) {
        ssize_t w = write(f->fd, p + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -EIO;
        off += (size_t)w;
    }
    f->got += n;
    return 0;
}

int sbx_fetch_file(struct sbx *s, const char *path, int fd, uint64_t max, int64_t timeout_ms,
                   uint64_t *ret_size, long *ret_status, struct tern_err *err)
{
    const uint64_t range = 64u << 20;
    const char *headers[] = {s->auth, NULL};
    char *base = path_url(s, "/v1/files/", path);
    struct fetch_ctx f = {.fd = fd, .max = max};
    int rc = 0;
    *ret_status = 0;
    for (;;) {
        char *url = xasprintf("%s?offset=%" PRIu64 "&limit=%" PRIu64, base, f.got, range);
        uint64_t before = f.got;
        struct httpc_request req = {.url = url,
                                    .headers = headers,
                                    .timeout_ms = (long)timeout_ms,
                                    .connect_timeout_ms = s->connect_timeout_ms,
                                    .on_data = fetch_data,
                                    .ctx = &f};
        struct httpc_response resp = {0};
        rc = httpc_do(s->http, &req, &resp, err);
        *ret_status = resp.status;
        const char *size_h = httpc_header(&resp, "x-tern-file-size");
        uint64_t total = 0;
        bool sized = size_h && *size_h;
        for (const char *c = size_h; sized && *c; c++) {
            if (*c < '0' || *c > '9' || total > UINT64_MAX / 10 - 10) {
                sized = false;
                break;
            }
            total = total * 10 + (uint64_t)(*c - '0');
        }
        httpc_response_done(&resp);
        free(url);
        if (rc == TERN_ETOOLARGE) {
            rc = err_set(err, rc, "%s: larger than %" PRIu64 " bytes", path, max);
            break;
        }
        if (rc)
            break;
        if (*ret_status == 404) {
            rc = err_set(err, TERN_ENOTFOUND, "%s: not found in the sandbox", path);
            break;
        }
        if (*ret_status != 200) {
            rc = err_set(err, TERN_EHTTP, "GET %s: HTTP %ld", path, *ret_status);
            break;
        }
        if (!sized || total > max) {
            rc = err_set(err, sized ? TERN_ETOOLARGE : TERN_EHTTP,
                         sized ? "%s: larger than the bound" : "%s: no file size in the answer",
                         path);
            break;
        }
        if (f.got >= total || f.got == before)
            break; /* all of it (or a file that shrank: what there was) */
    }
    free(base);
    if (rc == 0)
        *ret_size = f.got;
    return rc;
}

int sbx_delete_file(struct sbx *s, const char *path, long *ret_status, struct tern_err *err)
{
    const char *headers[] = {s->auth, NULL};
    char *url = path_url(s, "/v1/files/", path);
    struct httpc_request req = {.method = "DELETE",
                                .url = url,
                                .headers = headers,
                                .timeout_ms = 30000,
                                .connect_timeout_ms = s->connect_timeout_ms,
                                .max_body = 65536};
    struct httpc_response resp = {0};
    int rc = httpc_do(s->http, &req, &resp, err);
    *ret_status = resp.status;
    httpc_response_done(&resp);
    free(url);
    return rc;
}

/* ---- rendering (pure) -------------------------------------------------- */

int sbx_utf8_append(struct buf *out, const char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len = 0;
        unsigned cp = 0;
        if (c < 0x80) {
            len = 1;
            cp = c;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4;
            cp = c & 0x07;
        }
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                ok = false;
            else
                cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
                   (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
                   (cp >= 0xd800 && cp <= 0xdfff)))
            ok = false;
        if (ok && cp == 0)
            ok = false; /* NUL would cut C strings */
        int rc = ok ? buf_append(out, s + i, len) : buf_puts(out, "\xef\xbf\xbd");
        if (rc)
            return rc;
        i += ok ? len : 1;
    }
    return 0;
}

/* Appends text with the output bound; returns false once it is reached. */
static bool put_bounded(struct buf *b, const char *p, size_t n)
{
    size_t room = TERN_RUNNER_MAX_OUTPUT > b->len ? TERN_RUNNER_MAX_OUTPUT - b->len : 0;
    bool cut = n > room;
    if (cut) {
        /* do not split a UTF-8 sequence at the cut */
        while (room > 0 && ((unsigned char)p[room] & 0xc0) == 0x80)
            room--;
        n = room;
    }
    sbx_utf8_append(b, p, n);
    return !cut;
}

static char *render_error(const struct sbx_result *r, const char **ret_status)
{
    cJSON *j = NULL;
    const char *code = NULL, *msg = NULL;
    if (json_parse(r->body ? r->body : "", r->body_len, &j, NULL) == 0) {
        const cJSON *e = json_get(j, "error");
        const cJSON *c = json_get(e, "code"), *m = json_get(e, "message");
        code = cJSON_IsString(c) ? c->valuestring : NULL;
        msg = cJSON_IsString(m) ? m->valuestring : NULL;
    }
    struct buf b;
    buf_init(&b, TERN_RUNNER_MAX_OUTPUT * 2);
    buf_printf(&b, "error: %s (HTTP %ld)", code ? code : "sandbox_error", r->http_status);
    if (msg) {
        buf_puts(&b, ": ");
        put_bounded(&b, msg, strlen(msg));
    }
    cJSON_Delete(j);
    *ret_status = "error";
    return buf_steal(&b);
}

static char *render_exec(const struct sbx_result *r, const char **ret_status)
{
    cJSON *j = NULL;
    struct buf b;
    buf_init(&b, TERN_RUNNER_MAX_OUTPUT * 2);
    if (json_parse(r->body ? r->body : "", r->body_len, &j, NULL) != 0 || !cJSON_IsObject(j)) {
        buf_puts(&b, "error: the sandbox sent an unreadable exec result");
        *ret_status = "error";
        goto out;
    }
    const cJSON *st = json_get(j, "status");
    const char *status = cJSON_IsString(st) ? st->valuestring : "completed";
    int64_t code = -1, sig = 0, dur = 0;
    bool has_code = json_item_int64(json_get(j, "exitCode"), &code) == 0;
    json_item_int64(json_get(j, "signal"), &sig);
    json_item_int64(json_get(j, "durationMs"), &dur);
    if (strcmp(status, "timeout") == 0) {
        buf_printf(&b, "timed out after %lld ms (killed)\n", (long long)dur);
        *ret_status = "timeout";
    } else if (strcmp(status, "interrupted") == 0) {
        buf_puts(&b, "interrupted: the sandbox restarted while this command ran; it was not "
                     "re-run and its effects are unknown. Check the workspace before retrying.\n");
        *ret_status = "interrupted";
    } else if (has_code) {
        buf_printf(&b, "exit code: %lld\n", (long long)code);
        *ret_status = code == 0 ? "completed" : "failed";
    } else {
        buf_printf(&b, "killed by signal %lld\n", (long long)sig);
        *ret_status = "failed";
    }
    bool truncated = cJSON_IsTrue(json_get(j, "truncated"));
    static const char *const streams[] = {"stdout", "stderr"};
    bool cut = false;
    for (int i = 0; i < 2 && !cut; i++) {
        const cJSON *s = json_get(j, streams[i]);
        if (!cJSON_IsString(s) || !*s->valuestring)
            continue;
        buf_printf(&b, "%s:\n", streams[i]);
        cut = !put_bounded(&b, s->valuestring, strlen(s->valuestring));
        if (!cut && b.len && buf_str(&b)[b.len - 1] != '\n')
            buf_putc(&b, '\n');
    }
    if (cut || truncated)
        buf_puts(&b, "\n[output truncated]\n");
out:
    cJSON_Delete(j);
    return buf_steal(&b);
}

static char *render_list(const struct sbx_result *r, const char **ret_status)
{
    cJSON *j = NULL;
    struct buf b;
    buf_init(&b, TERN_RUNNER_MAX_OUTPUT * 2);
    *ret_status = "completed";
    const cJSON *entries = NULL;
    if (json_parse(r->body ? r->body : "", r->body_len, &j, NULL) != 0 ||
        !cJSON_IsArray(entries = json_get(j, "entries"))) {
        buf_puts(&b, "error: the sandbox sent an unreadable listing");
        *ret_status = "error";
        goto out;
    }
    size_t n = 0;
    for (const cJSON *e = entries->child; e; e = e->next, n++) {
        const cJSON *p = json_get(e, "path"), *t = json_get(e, "type");
        int64_t size = 0;
        json_item_int64(json_get(e, "size"), &size);
        const char *path = cJSON_IsString(p) ? p->valuestring : "?";
        char *line = cJSON_IsString(t) && strcmp(t->valuestring, "dir") == 0
                         ? xasprintf("%s/\n", path)
                         : xasprintf("%s  (%lld bytes)\n", path, (long long)size);
        bool fit = put_bounded(&b, line, strlen(line));
        free(line);
        if (!fit) {
            buf_puts(&b, "\n[listing truncated]\n");
            break;
        }
    }
    if (n == 0)
        buf_puts(&b, "(empty)\n");
out:
    cJSON_Delete(j);
    return buf_steal(&b);
}

/* A write's answer says what happened: "completed", or "interrupted" when a
 * sandbox restart cut the upload off (replayed from the record; the file
 * may or may not have been written), never assumed from the HTTP status. */
static char *render_write(const struct sbx_result *r, const char **ret_status)
{
    cJSON *j = NULL;
    char *out;
    const cJSON *st = NULL;
    if (json_parse(r->body ? r->body : "", r->body_len, &j, NULL) == 0)
        st = json_get(j, "status");
    const char *status = cJSON_IsString(st) ? st->valuestring : NULL;
    if (status && strcmp(status, "completed") == 0) {
        *ret_status = "completed";
        out = xstrdup(r->replayed ? "ok: written (recorded earlier)" : "ok: written");
    } else if (status && strcmp(status, "interrupted") == 0) {
        *ret_status = "interrupted";
        out = xstrdup("interrupted: the sandbox restarted while this file was being written; "
                      "it was not written again and may be missing, partial or complete. Read "
                      "it back (or write it again) before relying on it.");
    } else {
        *ret_status = "error";
        out = xstrdup("error: the sandbox sent an unreadable write result");
    }
    cJSON_Delete(j);
    return out;
}

char *sbx_render(const struct sbx_result *r, const char **ret_status)
{
    if (r->http_status < 200 || r->http_status > 299)
        return render_error(r, ret_status);
    switch (r->tool) {
    case POLICY_EXEC: return render_exec(r, ret_status);
    case POLICY_LIST: return render_list(r, ret_status);
    case POLICY_WRITE: return render_write(r, ret_status);
    case POLICY_READ: {
        struct buf b;
        buf_init(&b, TERN_RUNNER_MAX_OUTPUT * 2);
        *ret_status = "completed";
        if (!put_bounded(&b, r->body ? r->body : "", r->body_len))
            buf_printf(&b, "\n[truncated at %u bytes; read on with offset]\n",
                       TERN_RUNNER_MAX_OUTPUT);
        else if (r->body_len == 0)
            buf_puts(&b, "(empty file)");
        return buf_steal(&b);
    }
    default: break;
    }
    *ret_status = "error";
    return xstrdup("error: unknown tool");
}
