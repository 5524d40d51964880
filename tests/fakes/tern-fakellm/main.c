/* tern-fakellm - a scripted OpenAI-compatible Chat Completions server.
 *
 *   tern-fakellm --script FILE --listen ADDR [--record FILE.jsonl]
 *
 * Serves POST /v1/chat/completions (and /chat/completions). Each request
 * body is appended to the record file as one JSON line; the reply comes from
 * the script (docs/fakellm.md). ADDR is HOST:PORT; port 0 picks a free port.
 * Once serving it prints exactly one line "tern-fakellm listening HOST:PORT"
 * on stdout. SIGTERM / SIGINT stop it (exit 0).
 */
#include "script.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FAKELLM_MAX_BODY (16u << 20)

struct server {
    struct script script;
    int record_fd;              /* -1 = no record */
    pthread_mutex_t mu;         /* guards hits, nreq and record writes */
    size_t *hits;               /* requests seen per step */
    unsigned long nreq;
};

struct conn {
    struct buf body;
    bool too_large;
};

static void record(struct server *sv, const char *body, size_t len)
{
    if (sv->record_fd < 0)
        return;
    cJSON *j = NULL;
    char *line;
    if (json_parse(body, len, &j, NULL) == 0) {
        char *p = json_print(j);
        line = xasprintf("%s\n", p);
        free(p);
    } else {
        cJSON *o = cJSON_CreateObject();
        char *raw = xstrndup(body, len);
        json_add_string(o, "_invalid_body", raw);
        free(raw);
        char *p = json_print(o);
        line = xasprintf("%s\n", p);
        free(p);
        cJSON_Delete(o);
    }
    cJSON_Delete(j);
    /* one write per line on an O_APPEND descriptor, under the lock */
    size_t n = strlen(line), off = 0;
    while (off < n) {
        ssize_t w = write(sv->record_fd, line + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    free(line);
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, const char *body,
                                 unsigned long reqno, const char *const *extra)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    char rid[64];
    snprintf(rid, sizeof rid, "req_fake_%lu", reqno);
    MHD_add_response_header(r, "x-request-id", rid);
    for (const char *const *h = extra; h && h[0]; h += 2)
        if (h[1])
            MHD_add_response_header(r, h[0], h[1]);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static char *error_body(const char *message, const char *type, const char *code)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    json_add_string(e, "message", message);
    json_add_string(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    if (code)
        json_add_string(e, "code", code);
    else
        cJSON_AddNullToObject(e, "code");
    char *s = json_print(o);
    cJSON_Delete(o);
    return s;
}

/* Builds the chat.completion body for a reply object. */
static char *reply_body(const struct server *sv, const cJSON *req, const cJSON *reply,
                        size_t step, size_t attempt, size_t req_len, bool bad_json)
{
    const cJSON *raw = json_get(reply, "raw");
    if (cJSON_IsString(raw))
        return xstrdup(raw->valuestring);

    cJSON *o = cJSON_CreateObject();
    char id[64];
    snprintf(id, sizeof id, "chatcmpl-fake-%zu-%zu", step, attempt);
    json_add_string(o, "id", id);
    json_add_string(o, "object", "chat.completion");
    json_add_int64(o, "created", 1767225600);
    const cJSON *rm = json_get(req, "model");
    json_add_string(o, "model",
                    sv->script.model ? sv->script.model
                                     : (cJSON_IsString(rm) ? rm->valuestring : "fake"));
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, ch);
    json_add_int64(ch, "index", 0);
    cJSON *msg = cJSON_AddObjectToObject(ch, "message");
    json_add_string(msg, "role", "assistant");
    const cJSON *content = json_get(reply, "content");
    size_t out_len = 0;
    if (cJSON_IsString(content)) {
        json_add_string(msg, "content", content->valuestring);
        out_len += strlen(content->valuestring);
    } else {
        cJSON_AddNullToObject(msg, "content");
    }
    const cJSON *refusal = json_get(reply, "refusal");
    if (cJSON_IsString(refusal))
        json_add_string(msg, "refusal", refusal->valuestring);
    else
        cJSON_AddNullToObject(msg, "refusal");
    const cJSON *calls = json_get(reply, "toolCalls");
    size_t ncalls = 0;
    if (cJSON_IsArray(calls) || bad_json) {
        cJSON *arr = cJSON_AddArrayToObject(msg, "tool_calls");
        size_t i = 0;
        for (const cJSON *c = cJSON_IsArray(calls) ? calls->child : NULL; c; c = c->next, i++) {
            cJSON *tc = cJSON_CreateObject();
            const cJSON *cid = json_get(c, "id");
            char defid[64];
            snprintf(defid, sizeof defid, "call_%zu_%zu", step, i);
            json_add_string(tc, "id", cJSON_IsString(cid) ? cid->valuestring : defid);
            json_add_string(tc, "type", "function");
            cJSON *f = cJSON_AddObjectToObject(tc, "function");
            const cJSON *name = json_get(c, "name");
            json_add_string(f, "name", cJSON_IsString(name) ? name->valuestring : "");
            const cJSON *args = json_get(c, "arguments");
            char *a = cJSON_IsString(args) ? xstrdup(args->valuestring)
                                           : (args ? json_print(args) : xstrdup("{}"));
            if (bad_json && i == 0 && strlen(a) > 1)
                a[strlen(a) - 1] = 0; /* cut the closing brace */
            out_len += strlen(a);
            json_add_string(f, "arguments", a);
            free(a);
            cJSON_AddItemToArray(arr, tc);
        }
        if (bad_json && i == 0) {
            cJSON *tc = cJSON_CreateObject();
            char defid[64];
            snprintf(defid, sizeof defid, "call_%zu_0", step);
            json_add_string(tc, "id", defid);
            json_add_string(tc, "type", "function");
            cJSON *f = cJSON_AddObjectToObject(tc, "function");
            json_add_string(f, "name", "exec_command");
            json_add_string(f, "arguments", "{\"cmd\": \"ls");
            cJSON_AddItemToArray(arr, tc);
            i = 1;
        }
        ncalls = i;
    }
    const cJSON *fr = json_get(reply, "finishReason");
    json_add_string(ch, "finish_reason",
                    cJSON_IsString(fr) ? fr->valuestring : (ncalls ? "tool_calls" : "stop"));
    cJSON_AddNullToObject(ch, "logprobs");

    const cJSON *usage = json_get(reply, "usage");
    if (cJSON_IsObject(usage)) {
        cJSON_AddItemToObject(o, "usage", json_dup(usage));
    } else {
        /* deterministic estimate: 4 bytes a token */
        int64_t pt = (int64_t)(req_len / 4), ct = (int64_t)(out_len / 4) + 5;
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        json_add_int64(u, "prompt_tokens", pt);
        json_add_int64(u, "completion_tokens", ct);
        json_add_int64(u, "total_tokens", pt + ct);
        cJSON *pd = cJSON_AddObjectToObject(u, "prompt_tokens_details");
        json_add_int64(pd, "cached_tokens", 0);
        cJSON *cd = cJSON_AddObjectToObject(u, "completion_tokens_details");
        json_add_int64(cd, "reasoning_tokens", 0);
    }
    char *s = json_print(o);
    cJSON_Delete(o);
    return s;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static enum MHD_Result handle_chat(struct server *sv, struct MHD_Connection *c, const char *body,
                                   size_t len)
{
    cJSON *req = NULL;
    char *out = NULL;
    enum MHD_Result ret;

    pthread_mutex_lock(&sv->mu);
    unsigned long reqno = ++sv->nreq;
    record(sv, body, len);
    pthread_mutex_unlock(&sv->mu);

    struct tern_err e = {0};
    if (json_parse(body, len, &req, &e) != 0 || !cJSON_IsObject(req)) {
        out = error_body(e.msg[0] ? e.msg : "body is not a JSON object",
                         "invalid_request_error", "invalid_json");
        ret = send_json(c, 400, out, reqno, NULL);
        goto done;
    }
    size_t step = 0, alt = 0;
    int rc = script_select(&sv->script, req, &step, &alt);
    if (rc) {
        char msg[256];
        size_t turns = script_assistant_turns(req);
        if (rc == -ENOENT)
            snprintf(msg, sizeof msg, "script exhausted: no step %zu (script has %zu)", turns,
                     sv->script.nsteps);
        else
            snprintf(msg, sizeof msg, "script step %zu: no alternative matches the input",
                     turns);
        out = error_body(msg, "invalid_request_error",
                         rc == -ENOENT ? "script_exhausted" : "script_mismatch");
        ret = send_json(c, 400, out, reqno, NULL);
        goto done;
    }
    const struct script_alt *a = &sv->script.steps[step].alts[alt];
    pthread_mutex_lock(&sv->mu);
    size_t attempt = sv->hits[step]++;
    pthread_mutex_unlock(&sv->mu);

    const struct script_fault *f = attempt < a->nfaults ? &a->faults[attempt] : NULL;
    bool bad_json = false;
    if (f) {
        const char *should = f->should_retry;
        switch (f->kind) {
        case FAULT_429: {
            out = error_body(f->message ? f->message : "Rate limit reached (scripted)",
                             "requests", "rate_limit_exceeded");
            const char *h[] = {"retry-after", f->retry_after, "retry-after-ms",
                               f->retry_after_ms, "x-should-retry", should, NULL, NULL};
            ret = send_json(c, 429, out, reqno, h);
            goto done;
        }
        case FAULT_500: {
            out = error_body(f->message ? f->message : "The server had an error (scripted)",
                             "server_error", NULL);
            const char *h[] = {"x-should-retry", should, NULL, NULL};
            ret = send_json(c, 500, out, reqno, h);
            goto done;
        }
        case FAULT_ERROR: {
            out = error_body(f->message ? f->message : "scripted error",
                             "invalid_request_error", f->code);
            const char *h[] = {"x-should-retry", should, NULL, NULL};
            ret = send_json(c, (unsigned)f->status, out, reqno, h);
            goto done;
        }
        case FAULT_DROP: ret = MHD_NO; goto done;
        case FAULT_SLOW: sleep_ms(f->ms); break;
        case FAULT_BAD_TOOL_JSON: bad_json = true; break;
        }
    }
    out = reply_body(sv, req, a->reply, step, attempt, len, bad_json);
    ret = send_json(c, 200, out, reqno, NULL);
done:
    free(out);
    cJSON_Delete(req);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    struct server *sv = cls;
    struct conn *cn = *con_cls;
    if (!cn) {
        cn = xcalloc(1, sizeof *cn);
        buf_init(&cn->body, FAKELLM_MAX_BODY);
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (buf_append(&cn->body, upload_data, *upload_data_size) != 0)
            cn->too_large = true;
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") == 0 && strcmp(url, "/healthz") == 0)
        return send_json(c, 200, "{\"ok\":true}", 0, NULL);
    if (strcmp(method, "POST") != 0 ||
        (strcmp(url, "/v1/chat/completions") != 0 && strcmp(url, "/chat/completions") != 0)) {
        char *out = error_body("not found", "invalid_request_error", "not_found");
        enum MHD_Result r = send_json(c, 404, out, 0, NULL);
        free(out);
        return r;
    }
    if (cn->too_large) {
        char *out = error_body("request too large", "invalid_request_error", "too_large");
        enum MHD_Result r = send_json(c, 413, out, 0, NULL);
        free(out);
        return r;
    }
    return handle_chat(sv, c, buf_str(&cn->body), cn->body.len);
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    struct conn *cn = *con_cls;
    if (cn) {
        buf_done(&cn->body);
        free(cn);
        *con_cls = NULL;
    }
}

static int read_file(const char *path, struct buf *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char chunk[65536];
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        if ((rc = buf_append(out, chunk, (size_t)n)))
            break;
    }
    close(fd);
    return rc;
}

static int parse_listen(const char *addr, struct sockaddr_in *sa)
{
    const char *colon = strrchr(addr, ':');
    int64_t port;
    if (!colon || num_parse_range(colon + 1, 0, 65535, &port))
        return -EINVAL;
    char host[64];
    size_t hl = (size_t)(colon - addr);
    if (hl >= sizeof host)
        return -EINVAL;
    memcpy(host, addr, hl);
    host[hl] = 0;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (hl == 0 || strcmp(host, "localhost") == 0)
        memcpy(host, "127.0.0.1", 10);
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return -EINVAL;
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: tern-fakellm --script FILE --listen HOST:PORT [--record FILE.jsonl]\n");
}

int main(int argc, char **argv)
{
    const char *script_path = NULL, *listen_addr = "127.0.0.1:0", *record_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--script") == 0 && i + 1 < argc)
            script_path = argv[++i];
        else if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc)
            listen_addr = argv[++i];
        else if (strcmp(argv[i], "--record") == 0 && i + 1 < argc)
            record_path = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (!script_path) {
        usage();
        return 2;
    }
    struct server sv = {.record_fd = -1};
    pthread_mutex_init(&sv.mu, NULL);
    struct buf text;
    buf_init(&text, FAKELLM_MAX_BODY);
    int rc = read_file(script_path, &text);
    if (rc) {
        fprintf(stderr, "tern-fakellm: %s: %s\n", script_path, strerror(-rc));
        return 2;
    }
    struct tern_err e = {0};
    if (script_parse(buf_str(&text), text.len, &sv.script, &e)) {
        fprintf(stderr, "tern-fakellm: %s: %s\n", script_path, e.msg);
        return 2;
    }
    buf_done(&text);
    sv.hits = xcalloc(sv.script.nsteps + 1, sizeof *sv.hits);
    if (record_path) {
        sv.record_fd = open(record_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (sv.record_fd < 0) {
            fprintf(stderr, "tern-fakellm: %s: %s\n", record_path, strerror(errno));
            return 2;
        }
    }
    struct sockaddr_in sa;
    if (parse_listen(listen_addr, &sa)) {
        fprintf(stderr, "tern-fakellm: --listen %s: want IPv4-HOST:PORT\n", listen_addr);
        return 2;
    }

    /* block the stop signals in every thread; the main thread waits for them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, 0,
        NULL, NULL, on_request, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
        MHD_OPTION_NOTIFY_COMPLETED, on_done, &sv, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)600, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "tern-fakellm: cannot listen on %s\n", listen_addr);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sa.sin_addr, host, sizeof host);
    printf("tern-fakellm listening %s:%u\n", host, info ? (unsigned)info->port : 0u);
    fflush(stdout);

    int sig = 0;
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    if (sv.record_fd >= 0)
        close(sv.record_fd);
    script_done(&sv.script);
    free(sv.hits);
    pthread_mutex_destroy(&sv.mu);
    return 0;
}
