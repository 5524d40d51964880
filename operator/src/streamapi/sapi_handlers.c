/* sapi_handlers.c - the routes of the aggregated API. See sapi.h and
 * docs/stream-api.md. */
#include "sapi_internal.h"

#include "base/mem.h"
#include "controller/artstore.h"
#include "http/httpc.h"
#include "journal/journal.h"
#include "json/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GV SAPI_GROUP "/" SAPI_VERSION

/* ---- discovery ------------------------------------------------------------ */

static cJSON *group_doc(void)
{
    cJSON *g = cJSON_CreateObject();
    json_add_string(g, "kind", "APIGroup");
    json_add_string(g, "apiVersion", "v1");
    json_add_string(g, "name", SAPI_GROUP);
    cJSON *v = cJSON_CreateObject();
    json_add_string(v, "groupVersion", GV);
    json_add_string(v, "version", SAPI_VERSION);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(g, "versions"), v);
    cJSON_AddItemToObject(g, "preferredVersion", cJSON_Duplicate(v, 1));
    return g;
}

static void add_resource(cJSON *list, const char *name, const char *kind, bool namespaced,
                         const char *const *verbs)
{
    cJSON *r = cJSON_CreateObject();
    json_add_string(r, "name", name);
    json_add_string(r, "singularName", strchr(name, '/') ? "" : "session");
    cJSON_AddBoolToObject(r, "namespaced", namespaced);
    json_add_string(r, "kind", kind);
    cJSON *v = cJSON_AddArrayToObject(r, "verbs");
    for (const char *const *p = verbs; *p; p++)
        cJSON_AddItemToArray(v, cJSON_CreateString(*p));
    if (!strchr(name, '/')) {
        cJSON_AddItemToArray(cJSON_AddArrayToObject(r, "categories"),
                             cJSON_CreateString("tern"));
    }
    cJSON_AddItemToArray(list, r);
}

static void discovery(struct sapi_conn *c)
{
    cJSON *doc = NULL;
    switch (c->req.route) {
    case SAPI_APIS: {
        doc = cJSON_CreateObject();
        json_add_string(doc, "kind", "APIGroupList");
        json_add_string(doc, "apiVersion", "v1");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(doc, "groups"), group_doc());
        break;
    }
    case SAPI_GROUP_DOC: doc = group_doc(); break;
    case SAPI_VERSION_DOC: {
        doc = cJSON_CreateObject();
        json_add_string(doc, "kind", "APIResourceList");
        json_add_string(doc, "apiVersion", "v1");
        json_add_string(doc, "groupVersion", GV);
        cJSON *rs = cJSON_AddArrayToObject(doc, "resources");
        static const char *const getlist[] = {"get", "list", NULL};
        static const char *const get[] = {"get", NULL};
        add_resource(rs, "sessions", "SessionStream", true, getlist);
        add_resource(rs, "sessions/events", "SessionEventList", true, get);
        add_resource(rs, "sessions/log", "SessionStream", true, get);
        add_resource(rs, "sessions/output", "SessionOutput", true, get);
        add_resource(rs, "sessions/files", "SessionFileList", true, get);
        add_resource(rs, "sessions/content", "SessionStream", true, get);
        add_resource(rs, "sessions/artifacts", "SessionArtifactList", true, get);
        break;
    }
    case SAPI_OPENAPI_V2: {
        /* no schemas: kubectl's client-side validation then leaves it to us */
        static const char v2[] = "{\"swagger\":\"2.0\",\"info\":{\"title\":\"" SAPI_GROUP
                                 "\",\"version\":\"" SAPI_VERSION "\"},\"paths\":{}}";
        sapi__reply(c, 200, "application/json", v2, sizeof v2 - 1);
        return;
    }
    case SAPI_OPENAPI_V3: {
        static const char v3[] = "{\"paths\":{}}";
        sapi__reply(c, 200, "application/json", v3, sizeof v3 - 1);
        return;
    }
    default: break;
    }
    sapi__reply_json(c, 200, doc);
    cJSON_Delete(doc);
}

/* ---- sessions ------------------------------------------------------------- */

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = json_get(o, a);
    if (b)
        v = json_get(v, b);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool terminal(const cJSON *session)
{
    const char *ph = str_at(json_get(session, "status"), "phase", NULL);
    return ph && (strcmp(ph, "Succeeded") == 0 || strcmp(ph, "Failed") == 0);
}

/* The SessionStream view of an AgentSession. */
static cJSON *stream_object(const cJSON *s)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "apiVersion", GV);
    json_add_string(o, "kind", "SessionStream");
    const cJSON *m = json_get(s, "metadata");
    cJSON *om = cJSON_AddObjectToObject(o, "metadata");
    static const char *const keep[] = {"name", "namespace", "uid", "creationTimestamp"};
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
        if (str_at(m, keep[i], NULL))
            json_add_string(om, keep[i], str_at(m, keep[i], NULL));
    const cJSON *st = json_get(s, "status");
    cJSON *os = cJSON_AddObjectToObject(o, "status");
    if (str_at(st, "phase", NULL))
        json_add_string(os, "phase", str_at(st, "phase", NULL));
    int64_t last = 0;
    json_get_int64(json_get(st, "journal"), "", "lastSeq", JSON_OPTIONAL, &last, NULL);
    json_add_int64(os, "lastSeq", last);
    const cJSON *sb = json_get(st, "sandbox");
    cJSON_AddBoolToObject(os, "sandboxRunning", cJSON_IsTrue(json_get(sb, "ready")));
    const cJSON *res = json_get(st, "result");
    if (cJSON_IsArray(json_get(res, "artifacts")))
        cJSON_AddItemToObject(os, "artifacts", cJSON_Duplicate(json_get(res, "artifacts"), 1));
    return o;
}

static cJSON *find_session(struct sapi_conn *c)
{
    const struct sapi_backend *b = &c->s->cfg.backend;
    cJSON *s = b->session(b->ctx, c->req.ns, c->req.name);
    if (!s)
        sapi__status(c, 404, "NotFound", "sessions.%s \"%s\" not found", SAPI_GROUP,
                     c->req.name);
    return s;
}

struct list_ctx {
    cJSON *items;
};

static int list_one(void *ctx, const cJSON *s)
{
    struct list_ctx *l = ctx;
    cJSON_AddItemToArray(l->items, stream_object(s));
    return 0;
}

static void sessions(struct sapi_conn *c)
{
    if (c->req.route == SAPI_SESSIONS) {
        if (!sapi__allowed(c, "list", "", ""))
            return;
        cJSON *l = cJSON_CreateObject();
        json_add_string(l, "apiVersion", GV);
        json_add_string(l, "kind", "SessionStreamList");
        cJSON_AddObjectToObject(l, "metadata");
        struct list_ctx lc = {.items = cJSON_AddArrayToObject(l, "items")};
        const struct sapi_backend *b = &c->s->cfg.backend;
        b->each_session(b->ctx, c->req.ns, list_one, &lc);
        sapi__reply_json(c, 200, l);
        cJSON_Delete(l);
        return;
    }
    if (!sapi__allowed(c, "get", c->req.name, ""))
        return;
    cJSON *s = find_session(c);
    if (!s)
        return;
    cJSON *o = stream_object(s);
    sapi__reply_json(c, 200, o);
    cJSON_Delete(o);
    cJSON_Delete(s);
}

/* ---- the journal ---------------------------------------------------------- */

/* Opens the session's journal (answering the error itself). */
static struct journal *open_journal(struct sapi_conn *c, const cJSON *s)
{
    const char *uid = str_at(json_get(s, "metadata"), "uid", NULL);
    struct journal *j = NULL;
    struct tern_err e = {0};
    int rc = uid ? journal_open(c->s->cfg.backend.etcd, uid, NULL, &j, &e)
                 : err_set(&e, TERN_EINVALID, "the session has no uid");
    if (rc) {
        sapi__status_rc(c, rc, "the session's journal", e.msg);
        return NULL;
    }
    return j;
}

struct page {
    struct buf *out;
    int64_t limit, n;
    uint64_t last;
    bool more;
};

static int page_event(void *ctx, const struct journal_event *ev)
{
    struct page *p = ctx;
    if (p->n == p->limit || p->out->len > TERN_SAPI_MAX_LIST_BYTES) {
        p->more = true;
        return 1; /* the rest is the next page */
    }
    char *t = journal_event_encode(ev);
    if (p->n)
        buf_putc(p->out, ',');
    buf_puts(p->out, t);
    free(t);
    p->n++;
    p->last = ev->seq;
    return 0;
}

/* ---- where a read of the journal starts ---------------------------------- */

static int stop_at_first(void *ctx, const struct journal_event *ev)
{
    (void)ctx;
    (void)ev;
    return 1;
}

/* sinceSeq when given; else seq 1, or the latest snapshot when the events
 * before it were compacted away (the runner's compaction, journal.md): the
 * snapshot event, first in the answer, says up to where. An explicit
 * sinceSeq below the oldest stored event is 410 Expired. */
static uint64_t start_seq(const struct sapi_conn *c, struct journal *j)
{
    if (c->req.since_seq)
        return c->req.since_seq;
    const struct journal_summary *sum = journal_summary(j);
    if (sum && sum->snapshot_seq) {
        struct tern_err e = {0};
        if (journal_replay(j, 1, stop_at_first, NULL, NULL, &e) == TERN_ECOMPACTED)
            return JOURNAL_FROM_SNAPSHOT;
    }
    return 1;
}

static void events_list(struct sapi_conn *c, struct journal *j)
{
    struct buf items;
    buf_init(&items, TERN_SAPI_MAX_LIST_BYTES + TERN_JOURNAL_MAX_DATA + 4096);
    struct page p = {.out = &items, .limit = c->req.limit ? c->req.limit : TERN_SAPI_PAGE};
    uint64_t from = start_seq(c, j);
    struct tern_err e = {0};
    int rc = journal_replay(j, from, page_event, &p, NULL, &e);
    if (rc && rc != 1) {
        buf_done(&items);
        sapi__status_rc(c, rc, "reading the journal", e.msg);
        return;
    }
    struct buf out;
    buf_init(&out, items.len + 1024);
    buf_printf(&out,
               "{\"apiVersion\":\"" GV "\",\"kind\":\"SessionEventList\",\"metadata\":{%s%llu%s},"
               "\"lastSeq\":%llu,\"items\":[",
               p.more ? "\"continue\":\"" : "\"next\":\"",
               (unsigned long long)(p.n ? p.last + 1 : from), "\"",
               (unsigned long long)journal_summary(j)->last_seq);
    buf_append(&out, items.data ? items.data : "", items.len);
    buf_puts(&out, "]}");
    sapi__reply(c, 200, "application/json", out.data, out.len);
    buf_done(&out);
    buf_done(&items);
}

/* ---- streams: events as they are appended, command output ------------------ */

struct follow;

/* The output of one running exec, followed from sandboxd on its own thread. */
struct outf {
    struct follow *f;
    char *call_id, *key, *addr, *token;
    pthread_t th;
    bool running;
    atomic_bool cancel;  /* stop reading now */
    atomic_bool finish;  /* the result is journaled: read to the end, briefly */
    atomic_bool ended;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* the reader's place, for a reconnect to the same exec (out_main) */
    uint64_t off[2];
    bool got_data; /* the current attempt delivered output */
    bool done;     /* the done line was delivered */
};

struct follow {
    struct sapi_conn *c;
    cJSON *session;      /* as it was when the stream started */
    bool log;            /* the log stream (with output and an end line) */
    atomic_bool cancel;  /* ends the journal tail */
    atomic_uint_fast64_t delivered; /* the last seq written */
    atomic_bool ended;   /* the session finished: everything written */
    struct outf *out;    /* the exec being followed, or NULL */
    long start_ms;
};

static int out_line(void *ctx, const char *line, size_t len)
{
    struct outf *o = ctx;
    if (len == 0 || strstr(line, "\"heartbeat\""))
        return 0;
    cJSON *j = NULL;
    if (json_parse(line, len, &j, NULL) != 0)
        return 0; /* not ours to judge: skip a line sandboxd got wrong */
    bool done = cJSON_IsTrue(json_get(j, "done"));
    const char *stream = str_at(j, "stream", NULL);
    if (!done && !stream) {
        cJSON_Delete(j); /* an error body (404 before the exec registers) */
        return 0;
    }
    int si = stream && strcmp(stream, "stderr") == 0 ? 1 : 0;
    int64_t at = 0;
    const char *data = str_at(j, "data", NULL);
    if (stream && data && json_get_int64(j, "", "offset", JSON_OPTIONAL, &at, NULL) == 0 &&
        at >= 0)
        o->off[si] = (uint64_t)at + strlen(data);
    int64_t skipped = 0;
    if (stream && json_get_int64(j, "", "skipped", JSON_OPTIONAL, &skipped, NULL) == 0 &&
        skipped > 0)
        o->off[si] += (uint64_t)skipped;
    o->got_data = true;
    o->done = o->done || done;
    cJSON *w = cJSON_CreateObject();
    json_add_string(w, "type", "output");
    json_add_string(w, "callId", o->call_id);
    cJSON_AddItemToObject(w, "output", j);
    char *t = json_print(w);
    cJSON_Delete(w);
    bool ok = sapi__stream_line(o->f->c, t);
    free(t);
    return !ok ? -EPIPE : done ? 1 : 0;
}

/* Follows the exec's live output until its done line, the result (finish)
 * or cancel. The exec registers a moment after its tool_call is journaled
 * (404 until then); a sandbox that is restarting (unreachable, or not ready
 * in the session's status) is waited for, and its address looked up again,
 * because the runner repeats the exec there under the same key. A stream
 * cut in the middle resumes at the offsets read; a new attempt of the exec
 * (after a failed connect) starts from its beginning. */
static void *out_main(void *arg)
{
    struct outf *o = arg;
    const struct sapi_backend *b = &o->f->c->s->cfg.backend;
    char *ek = httpc_escape(o->key);
    struct httpc *h = httpc_new();
    long start = sapi__now_ms();
    bool resume = false;
    while (!atomic_load(&o->cancel) && !atomic_load(&o->finish) && !o->done) {
        if (!o->addr) {
            char *addr = NULL, *token = NULL;
            if (b->sandbox(b->ctx, o->f->session, false, &addr, &token, NULL) == 0) {
                o->addr = addr;
                if (o->token)
                    explicit_bzero(o->token, strlen(o->token));
                free(o->token);
                o->token = token;
            } else {
                free(addr);
                free(token);
            }
        }
        if (o->addr) {
            char *url = resume ? xasprintf("http://%s/v1/executions/live?key=%s&follow=true"
                                           "&stdoutOffset=%llu&stderrOffset=%llu",
                                           o->addr, ek, (unsigned long long)o->off[0],
                                           (unsigned long long)o->off[1])
                               : xasprintf("http://%s/v1/executions/live?key=%s&follow=true",
                                           o->addr, ek);
            char *auth = xasprintf("Authorization: Bearer %s", o->token ? o->token : "");
            const char *hdrs[] = {auth, NULL};
            struct httpc_request rq = {.url = url,
                                       .headers = hdrs,
                                       .connect_timeout_ms = 3000,
                                       .idle_timeout_ms = 30000,
                                       .on_line = out_line,
                                       .ctx = o,
                                       .cancel = &o->cancel};
            struct httpc_response resp = {0};
            o->got_data = false;
            int rc = httpc_do(h, &rq, &resp, NULL);
            long st = resp.status;
            httpc_response_done(&resp);
            explicit_bzero(auth, strlen(auth));
            free(auth);
            free(url);
            if (rc == -EPIPE || rc == -ECANCELED || o->done)
                break; /* the client is gone, or everything was read */
            if (rc != 0 && st == 0) {
                /* no connection: the sandbox is away; look it up again, and
                 * read the next attempt of the exec from its start */
                free(o->addr);
                o->addr = NULL;
                resume = false;
                o->off[0] = o->off[1] = 0;
            } else if (st == 200) {
                resume = resume || o->got_data; /* cut in the middle: go on from there */
            } else if (st != 404) {
                break; /* refused (token, read-only viewer): the result will say it */
            }
        }
        /* quick while the exec is about to register, then patient */
        long nap = sapi__now_ms() - start < 15000 ? 100 : 1000;
        for (long t = 0; t < nap && !atomic_load(&o->cancel) && !atomic_load(&o->finish);
             t += 50) {
            struct timespec ts = {0, 50 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    httpc_free(h);
    free(ek);
    pthread_mutex_lock(&o->mu);
    atomic_store(&o->ended, true);
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

/* Ends the follower: lets it read what is left for up to wait_ms (the
 * result is in), then cancels; joins. */
static void out_stop(struct follow *f, long wait_ms)
{
    struct outf *o = f->out;
    if (!o)
        return;
    f->out = NULL;
    if (o->running) {
        atomic_store(&o->finish, true);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (wait_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&o->mu);
        while (!atomic_load(&o->ended))
            if (pthread_cond_timedwait(&o->cv, &o->mu, &until) != 0)
                break;
        pthread_mutex_unlock(&o->mu);
        atomic_store(&o->cancel, true);
        pthread_join(o->th, NULL);
    }
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
    free(o->call_id);
    free(o->key);
    free(o->addr);
    if (o->token)
        explicit_bzero(o->token, strlen(o->token));
    free(o->token);
    free(o);
}

static void out_start(struct follow *f, const struct journal_event *ev)
{
    const char *call = str_at(ev->data, "callId", NULL), *tool = str_at(ev->data, "tool", NULL);
    if (!call || !ev->key || !tool || strcmp(tool, "exec_command") != 0)
        return;
    const struct sapi_backend *b = &f->c->s->cfg.backend;
    char *addr = NULL, *token = NULL;
    if (b->sandbox(b->ctx, f->session, false, &addr, &token, NULL) != 0) {
        /* no sandbox now (restarting): out_main looks again */
        free(addr);
        free(token);
        addr = token = NULL;
    }
    struct outf *o = xcalloc(1, sizeof *o);
    o->f = f;
    o->call_id = xstrdup(call);
    o->key = xstrdup(ev->key);
    o->addr = addr;
    o->token = token;
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->running = pthread_create(&o->th, NULL, out_main, o) == 0;
    f->out = o;
}

static int follow_event(void *ctx, const struct journal_event *ev)
{
    struct follow *f = ctx;
    if (f->log && ev->type == JOURNAL_EV_TOOL_RESULT)
        out_stop(f, 2000); /* the last of its output before the result */
    char *t = journal_event_encode(ev);
    struct buf line;
    buf_init(&line, strlen(t) + 64);
    buf_printf(&line, "{\"type\":\"%s\",\"%s\":%s}", f->log ? "event" : "ADDED",
               f->log ? "event" : "object", t);
    free(t);
    bool ok = sapi__stream_line(f->c, buf_str(&line));
    buf_done(&line);
    if (!ok)
        return -EPIPE;
    atomic_store(&f->delivered, ev->seq);
    if (f->log && ev->type == JOURNAL_EV_TOOL_CALL) {
        out_stop(f, 0);
        out_start(f, ev);
    }
    return 0;
}

/* Watches over a stream once a second: the client gone, the server
 * stopping, the timeout, the session finished (and every event written). */
static void *monitor_main(void *arg)
{
    struct follow *f = arg;
    const struct sapi_backend *b = &f->c->s->cfg.backend;
    long last_beat = sapi__now_ms();
    while (!atomic_load(&f->cancel)) {
        struct timespec ts = {0, 250 * 1000000L};
        nanosleep(&ts, NULL);
        long now = sapi__now_ms();
        if (sapi__client_gone(f->c) || atomic_load(&f->c->s->stop) ||
            (f->c->req.timeout_s && now - f->start_ms >= f->c->req.timeout_s * 1000)) {
            atomic_store(&f->cancel, true);
            break;
        }
        if (f->log && now - last_beat >= 15000) {
            /* keeps proxies from closing an idle stream, and finds dead clients */
            sapi__stream_line(f->c, "{\"type\":\"heartbeat\"}");
            last_beat = now;
        }
        cJSON *s = b->session(b->ctx, f->c->req.ns, f->c->req.name);
        int64_t last = 0;
        json_get_int64(json_get(json_get(s, "status"), "journal"), "", "lastSeq",
                       JSON_OPTIONAL, &last, NULL);
        const char *uid = str_at(json_get(s, "metadata"), "uid", NULL);
        const char *uid0 = str_at(json_get(f->session, "metadata"), "uid", NULL);
        bool gone = !s || !uid || !uid0 || strcmp(uid, uid0) != 0;
        bool finished = s && terminal(s) && (uint64_t)last <= atomic_load(&f->delivered);
        cJSON_Delete(s);
        if (gone || finished) {
            atomic_store(&f->ended, true);
            atomic_store(&f->cancel, true);
            break;
        }
    }
    return NULL;
}

static void follow_stream(struct sapi_conn *c, const cJSON *s, struct journal *j, bool log)
{
    struct follow f = {.c = c, .session = cJSON_Duplicate(s, 1), .log = log,
                       .start_ms = sapi__now_ms()};
    if (!sapi__stream_begin(c, log ? "application/x-ndjson" : "application/json;stream=watch")) {
        cJSON_Delete(f.session);
        return;
    }
    pthread_t mon;
    bool mon_ok = pthread_create(&mon, NULL, monitor_main, &f) == 0;
    struct tern_err e = {0};
    uint64_t from = start_seq(c, j);
    int rc = mon_ok ? journal_tail(j, from, follow_event, &f, &f.cancel, &e) : -EAGAIN;
    atomic_store(&f.cancel, true);
    if (mon_ok)
        pthread_join(mon, NULL);
    out_stop(&f, 0);
    if (rc && rc != -ECANCELED && rc != -EPIPE)
        sapi__status_rc(c, rc, "following the journal", e.msg);
    else if (log && atomic_load(&f.ended)) {
        cJSON *sn = c->s->cfg.backend.session(c->s->cfg.backend.ctx, c->req.ns, c->req.name);
        const char *ph = str_at(json_get(sn, "status"), "phase", NULL);
        char line[128];
        snprintf(line, sizeof line, "{\"type\":\"end\",\"phase\":\"%s\"}",
                 ph ? ph : (sn ? "" : "Deleted"));
        sapi__stream_line(c, line);
        cJSON_Delete(sn);
    }
    sapi__stream_end(c);
    cJSON_Delete(f.session);
}

/* GET .../log without follow: every event from sinceSeq as a line. */
struct lines_ctx {
    struct sapi_conn *c;
};

static int line_event(void *ctx, const struct journal_event *ev)
{
    struct lines_ctx *l = ctx;
    char *t = journal_event_encode(ev);
    struct buf line;
    buf_init(&line, strlen(t) + 64);
    buf_printf(&line, "{\"type\":\"event\",\"event\":%s}", t);
    free(t);
    bool ok = sapi__stream_line(l->c, buf_str(&line));
    buf_done(&line);
    return ok ? 0 : -EPIPE;
}

static void journal_routes(struct sapi_conn *c)
{
    if (!sapi__allowed(c, "get", c->req.name, ""))
        return;
    cJSON *s = find_session(c);
    if (!s)
        return;
    struct journal *j = open_journal(c, s);
    if (!j) {
        cJSON_Delete(s);
        return;
    }
    if (c->req.route == SAPI_EVENTS && !c->req.watch) {
        events_list(c, j);
    } else if (c->req.route == SAPI_EVENTS || c->req.follow) {
        follow_stream(c, s, j, c->req.route == SAPI_LOG);
    } else {
        /* log without follow */
        if (sapi__stream_begin(c, "application/x-ndjson")) {
            struct lines_ctx l = {c};
            struct tern_err e = {0};
            int rc = journal_replay(j, start_seq(c, j), line_event, &l,
                                    NULL, &e);
            if (rc && rc != -EPIPE)
                sapi__status_rc(c, rc, "reading the journal", e.msg);
            sapi__stream_end(c);
        }
    }
    journal_free(j);
    cJSON_Delete(s);
}

/* ---- the running command's output -------------------------------------------- */

struct last_call {
    char *call_id, *key, *tool;
    bool running;
};

static int scan_calls(void *ctx, const struct journal_event *ev)
{
    struct last_call *l = ctx;
    if (ev->type == JOURNAL_EV_TOOL_CALL) {
        free(l->call_id);
        free(l->key);
        free(l->tool);
        l->call_id = str_at(ev->data, "callId", NULL) ? xstrdup(str_at(ev->data, "callId", NULL))
                                                      : NULL;
        l->key = ev->key ? xstrdup(ev->key) : NULL;
        l->tool = str_at(ev->data, "tool", NULL) ? xstrdup(str_at(ev->data, "tool", NULL)) : NULL;
        l->running = true;
    } else if (ev->type == JOURNAL_EV_TOOL_RESULT || ev->type == JOURNAL_EV_TURN_FINISHED) {
        l->running = false;
    }
    return 0;
}

struct collect_out {
    struct buf out, err;
    cJSON *done;
    uint64_t skipped;
};

static int collect_line(void *ctx, const char *line, size_t len)
{
    struct collect_out *co = ctx;
    cJSON *j = NULL;
    if (len == 0 || json_parse(line, len, &j, NULL) != 0)
        return 0;
    const char *stream = str_at(j, "stream", NULL), *data = str_at(j, "data", NULL);
    int64_t sk = 0;
    if (cJSON_IsTrue(json_get(j, "done"))) {
        cJSON_Delete(co->done);
        co->done = j;
        return 0;
    }
    if (json_item_int64(json_get(j, "skipped"), &sk) == 0)
        co->skipped += (uint64_t)sk;
    if (stream && data)
        buf_puts(strcmp(stream, "stderr") == 0 ? &co->err : &co->out, data);
    cJSON_Delete(j);
    return 0;
}

static void output(struct sapi_conn *c)
{
    if (!sapi__allowed(c, "get", c->req.name, ""))
        return;
    cJSON *s = find_session(c);
    if (!s)
        return;
    struct journal *j = open_journal(c, s);
    struct last_call lc = {0};
    char *addr = NULL, *token = NULL, *url = NULL, *auth = NULL;
    if (!j)
        goto out;
    uint64_t last = journal_summary(j)->last_seq;
    struct tern_err e = {0};
    /* the running call, if any, is among the last events (a tool_call is
     * journaled right before the command starts) */
    int rc = journal_replay(j, last > 20 ? last - 20 : 1, scan_calls, &lc, NULL, &e);
    if (rc == TERN_ECOMPACTED) { /* fewer than 20 events since a compaction: at the
                                  * first one, before any was visited */
        e = (struct tern_err){0};
        rc = journal_replay(j, JOURNAL_FROM_SNAPSHOT, scan_calls, &lc, NULL, &e);
    }
    if (rc) {
        sapi__status_rc(c, rc, "reading the journal", e.msg);
        goto out;
    }
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "apiVersion", GV);
    json_add_string(o, "kind", "SessionOutput");
    cJSON_AddBoolToObject(o, "running", lc.running);
    if (lc.call_id)
        json_add_string(o, "callId", lc.call_id);
    if (lc.tool)
        json_add_string(o, "tool", lc.tool);
    const struct sapi_backend *b = &c->s->cfg.backend;
    if (!lc.running || !lc.key || !lc.tool || strcmp(lc.tool, "exec_command") != 0 ||
        b->sandbox(b->ctx, s, false, &addr, &token, NULL) != 0) {
        sapi__reply_json(c, 200, o);
        cJSON_Delete(o);
        goto out;
    }
    char *ek = httpc_escape(lc.key);
    url = xasprintf("http://%s/v1/executions/live?key=%s%s", addr, ek,
                    c->req.follow ? "&follow=true" : "");
    free(ek);
    auth = xasprintf("Authorization: Bearer %s", token);
    const char *hdrs[] = {auth, NULL};
    struct httpc *h = httpc_new();
    if (c->req.follow) {
        /* the live lines as they come, wrapped like the log stream's */
        cJSON_Delete(o);
        struct follow f = {.c = c};
        struct outf of = {.f = &f, .call_id = lc.call_id};
        if (sapi__stream_begin(c, "application/x-ndjson")) {
            struct httpc_request rq = {.url = url, .headers = hdrs, .on_line = out_line,
                                       .ctx = &of, .connect_timeout_ms = 3000,
                                       .idle_timeout_ms = 30000};
            struct httpc_response resp = {0};
            httpc_do(h, &rq, &resp, NULL);
            httpc_response_done(&resp);
            sapi__stream_end(c);
        }
        httpc_free(h);
        goto out;
    }
    struct collect_out co;
    buf_init(&co.out, TERN_SANDBOX_LIVE_RING * 4 + 16);
    buf_init(&co.err, TERN_SANDBOX_LIVE_RING * 4 + 16);
    co.done = NULL;
    co.skipped = 0;
    struct httpc_request rq = {.url = url, .headers = hdrs, .on_line = collect_line, .ctx = &co,
                               .timeout_ms = 10000, .connect_timeout_ms = 3000};
    struct httpc_response resp = {0};
    rc = httpc_do(h, &rq, &resp, &e);
    if (rc == 0 && resp.status == 200) {
        json_add_string(o, "stdout", buf_str(&co.out));
        json_add_string(o, "stderr", buf_str(&co.err));
        if (co.skipped)
            json_add_int64(o, "skippedBytes", (int64_t)co.skipped);
        if (co.done) {
            cJSON_AddItemToObject(o, "result", co.done);
            co.done = NULL;
        }
    } else {
        json_add_string(o, "note", "the sandbox has no live output for this call");
    }
    httpc_response_done(&resp);
    httpc_free(h);
    cJSON_Delete(co.done);
    buf_done(&co.out);
    buf_done(&co.err);
    sapi__reply_json(c, 200, o);
    cJSON_Delete(o);
out:
    free(lc.call_id);
    free(lc.key);
    free(lc.tool);
    free(addr);
    if (token)
        explicit_bzero(token, strlen(token));
    free(token);
    free(url);
    if (auth)
        explicit_bzero(auth, strlen(auth));
    free(auth);
    journal_free(j);
    cJSON_Delete(s);
}

/* ---- the workspace ---------------------------------------------------------- */

/* Relays a file's bytes as they come from sandboxd (never held whole); an
 * error answer is kept (bounded) to be told as a Status. */
struct relay {
    struct sapi_conn *c;
    bool started;
    long status;
    struct buf err;
};

static int relay_data(void *ctx, long status, const char *p, size_t n)
{
    struct relay *r = ctx;
    r->status = status;
    if (status != 200) {
        buf_append(&r->err, p, n); /* bounded; the rest is dropped */
        return 0;
    }
    if (!r->started) {
        r->started = true;
        if (!sapi__stream_begin(r->c, "application/octet-stream"))
            return -EPIPE;
    }
    return sapi__stream_write(r->c, p, n) ? 0 : -EPIPE;
}

/* The sandbox's error body as a Status (its code and message). */
static void sandbox_error(struct sapi_conn *c, long status, const char *body, size_t len)
{
    cJSON *j = NULL;
    const char *code = NULL, *msg = NULL;
    if (json_parse(body ? body : "", len, &j, NULL) == 0) {
        code = str_at(json_get(j, "error"), "code", NULL);
        msg = str_at(json_get(j, "error"), "message", NULL);
    }
    int st = status == 404 ? 404 : status == 403 ? 403 : status == 413 ? 413 : status == 400 ? 400
                                                                                             : 502;
    sapi__status(c, st,
                 st == 404   ? "NotFound"
                 : st == 403 ? "Forbidden"
                 : st == 413 ? "RequestEntityTooLarge"
                 : st == 400 ? "BadRequest"
                             : "InternalError",
                 "workspace: %s%s%s", code ? code : "sandbox error", msg ? ": " : "",
                 msg ? msg : "");
    cJSON_Delete(j);
}

static void workspace(struct sapi_conn *c)
{
    bool content = c->req.route == SAPI_CONTENT;
    /* file contents are a permission of their own */
    if (!sapi__allowed(c, "get", c->req.name, content ? "workspace" : ""))
        return;
    if (content && !c->req.path[0]) {
        sapi__status(c, 400, "BadRequest", "content: path= names a file of the workspace");
        return;
    }
    cJSON *s = find_session(c);
    if (!s)
        return;
    const struct sapi_backend *b = &c->s->cfg.backend;
    char *addr = NULL, *token = NULL;
    struct tern_err e = {0};
    int rc = b->sandbox(b->ctx, s, true, &addr, &token, &e);
    if (rc) {
        sapi__status_rc(c, rc == TERN_ENOTFOUND ? TERN_EUNREACHABLE : rc, "the session's sandbox",
                        e.msg);
        cJSON_Delete(s);
        return;
    }
    char *ep = httpc_escape_path(c->req.path);
    char *url = content ? xasprintf("http://%s/v1/files/%s", addr, ep)
                        : xasprintf("http://%s/v1/list/%s?depth=%lld", addr, ep,
                                    (long long)(c->req.depth >= 0 ? c->req.depth : 1));
    free(ep);
    char *auth = xasprintf("Authorization: Bearer %s", token);
    const char *hdrs[] = {auth, NULL};
    struct httpc *h = httpc_new();
    struct relay rl = {.c = c};
    buf_init(&rl.err, 64u << 10);
    struct httpc_request rq = {.url = url, .headers = hdrs, .timeout_ms = content ? 0 : 60000,
                               .idle_timeout_ms = 60000, .connect_timeout_ms = 3000,
                               .max_body = (size_t)TERN_RUNNER_MAX_SANDBOX_BODY,
                               .on_data = content ? relay_data : NULL, .ctx = &rl};
    struct httpc_response resp = {0};
    rc = httpc_do(h, &rq, &resp, &e);
    if (content && rl.started) {
        /* the head went out: a cut transfer can only end the stream short */
        if (rc == 0)
            sapi__stream_end(c);
    } else if (rc && rc != -EPIPE) {
        sapi__status_rc(c, rc == TERN_ETOOLARGE ? rc : TERN_EUNREACHABLE, "the session's sandbox",
                        e.msg);
    } else if (rc) {
        /* the client went away */
    } else if (resp.status != 200) {
        if (content)
            sandbox_error(c, resp.status, rl.err.data, rl.err.len);
        else
            sandbox_error(c, resp.status, resp.body.data, resp.body.len);
    } else if (content) {
        sapi__reply(c, 200, "application/octet-stream", "", 0); /* an empty file */
    } else {
        cJSON *j = NULL;
        if (json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &j, &e) != 0) {
            sapi__status(c, 502, "InternalError", "the sandbox's listing: %s", e.msg);
        } else {
            cJSON *o = cJSON_CreateObject();
            json_add_string(o, "apiVersion", GV);
            json_add_string(o, "kind", "SessionFileList");
            json_add_string(o, "path", c->req.path);
            const cJSON *en = json_get(j, "entries");
            cJSON_AddItemToObject(o, "entries", en ? cJSON_Duplicate(en, 1) : cJSON_CreateArray());
            cJSON_AddBoolToObject(o, "truncated", cJSON_IsTrue(json_get(j, "truncated")));
            sapi__reply_json(c, 200, o);
            cJSON_Delete(o);
        }
        cJSON_Delete(j);
    }
    httpc_response_done(&resp);
    httpc_free(h);
    buf_done(&rl.err);
    free(url);
    explicit_bzero(auth, strlen(auth));
    free(auth);
    explicit_bzero(token, strlen(token));
    free(token);
    free(addr);
    cJSON_Delete(s);
}

/* The set to serve among a session's stored sets: the one the journal
 * recorded (configMap) when the session is there, else the latest of the
 * newest session of that name (highest turn, then the latest created). */
static const cJSON *pick_set(const cJSON *sets, const char *recorded)
{
    const cJSON *best = NULL, *it;
    const char *best_uid = NULL, *best_created = "";
    int64_t best_turn = -1;
    cJSON_ArrayForEach(it, sets)
    {
        const cJSON *md = json_get(it, "metadata");
        const char *name = str_at(md, "name", NULL);
        if (recorded) {
            if (name && strcmp(name, recorded) == 0)
                return it;
            continue;
        }
        const char *created = str_at(md, "creationTimestamp", NULL);
        const char *uid = str_at(json_get(md, "labels"), "tern.dev/session-uid", NULL);
        int64_t turn = -1;
        const char *t = str_at(json_get(md, "labels"), "tern.dev/turn", NULL);
        if (t) {
            turn = 0;
            for (const char *p = t; *p >= '0' && *p <= '9' && turn < INT64_MAX / 10 - 10; p++)
                turn = turn * 10 + (*p - '0');
        }
        if (!created)
            created = "";
        /* RFC 3339 UTC times order as strings */
        bool newer_session = best && uid && best_uid && strcmp(uid, best_uid) != 0 &&
                             strcmp(created, best_created) > 0;
        bool same_session = best && uid && best_uid && strcmp(uid, best_uid) == 0;
        if (!best || newer_session ||
            (same_session && (turn > best_turn ||
                              (turn == best_turn && strcmp(created, best_created) > 0)))) {
            best = it;
            best_uid = uid;
            best_created = created;
            best_turn = turn;
        }
    }
    return best;
}

static void artifacts(struct sapi_conn *c)
{
    bool content = c->req.path[0] != 0;
    /* a file's bytes are a permission of their own, as for content */
    if (!sapi__allowed(c, "get", c->req.name, content ? "workspace" : ""))
        return;
    const struct sapi_backend *b = &c->s->cfg.backend;
    cJSON *s = b->session(b->ctx, c->req.ns, c->req.name);
    cJSON *sets = NULL, *items = NULL, *man = NULL;
    struct journal *j = NULL;
    struct tern_err e = {0};
    const char *recorded = NULL, *summary = NULL;
    if (s) {
        if (!(j = open_journal(c, s)))
            goto out;
        const struct journal_summary *sum = journal_summary(j);
        items = artstore_status_list(sum->artifacts, sum->result_turn, sum->persisted);
        recorded = str_at(sum->persisted, "configMap", NULL);
        summary = sum->result;
        if (!content)
            goto reply;
        if (!recorded) {
            sapi__status(c, 404, "NotFound",
                         "%s: no artifacts of session %s are persisted (yet); without a "
                         "persisted set, content?path= reads the workspace",
                         c->req.path, c->req.name);
            goto out;
        }
    }
    if (!b->artifact_sets ||
        b->artifact_sets(b->ctx, c->req.ns, c->req.name, recorded, &sets, &e)) {
        sapi__status_rc(c, b->artifact_sets ? e.code : TERN_ENOTFOUND, "the artifact store",
                        b->artifact_sets ? e.msg : "no artifact store");
        goto out;
    }
    const cJSON *set = pick_set(sets, recorded);
    if (!set) {
        sapi__status(c, 404, "NotFound", "sessions.%s \"%s\" not found%s", SAPI_GROUP,
                     c->req.name, s ? ": its persisted set is not in the store" : "");
        goto out;
    }
    if (content) {
        unsigned char *raw = NULL;
        size_t n = 0;
        char sha[65];
        int rc = artstore_file(set, c->req.path, &raw, &n, sha, &e);
        if (rc == TERN_ENOTFOUND)
            sapi__status(c, 404, "NotFound", "%s", e.msg);
        else if (rc)
            sapi__status(c, 500, "InternalError", "the artifact store: %s", e.msg);
        else
            sapi__reply(c, 200, "application/octet-stream", (const char *)raw, n);
        free(raw);
        goto out;
    }
    /* the session is gone: the set's own manifest */
    const cJSON *mt = json_get(json_get(set, "data"), ARTSTORE_MANIFEST);
    if (!cJSON_IsString(mt) ||
        artstore_parse_manifest(mt->valuestring, strlen(mt->valuestring), &man, &e)) {
        sapi__status(c, 500, "InternalError", "the artifact store: %s",
                     cJSON_IsString(mt) ? e.msg : "a set without a manifest");
        goto out;
    }
    items = json_dup(json_get(man, "artifacts"));
reply: {
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "apiVersion", GV);
    json_add_string(o, "kind", "SessionArtifactList");
    cJSON_AddItemToObject(o, "items", items ? items : cJSON_CreateArray());
    items = NULL;
    if (summary)
        json_add_string(o, "summary", summary);
    if (!s)
        cJSON_AddTrueToObject(o, "sessionDeleted");
    sapi__reply_json(c, 200, o);
    cJSON_Delete(o);
}
out:
    cJSON_Delete(man);
    cJSON_Delete(items);
    cJSON_Delete(sets);
    journal_free(j);
    cJSON_Delete(s);
}

void sapi__handle(struct sapi_conn *c)
{
    switch (c->req.route) {
    case SAPI_APIS:
    case SAPI_GROUP_DOC:
    case SAPI_VERSION_DOC:
    case SAPI_OPENAPI_V2:
    case SAPI_OPENAPI_V3: discovery(c); break;
    case SAPI_SESSIONS:
    case SAPI_SESSION: sessions(c); break;
    case SAPI_EVENTS:
    case SAPI_LOG: journal_routes(c); break;
    case SAPI_OUTPUT: output(c); break;
    case SAPI_FILES:
    case SAPI_CONTENT: workspace(c); break;
    case SAPI_ARTIFACTS: artifacts(c); break;
    default: sapi__status(c, 404, "NotFound", "the server could not find the requested resource");
    }
}
