/* watch.c - etcd_watch: one long streamed POST per connection, each line
 * decoded (codec.c) and fed to a small state machine (watch_on_line) that
 * drops what an earlier stream already delivered, turns progress
 * notifications into empty batches and stops on compaction; the loop around
 * it reconnects with backoff, moving to the next endpoint when one gives no
 * stream, until the caller stops, cancels or gives up.
 */
#include "etcd_internal.h"

#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct watch_state {
    etcd_watch_fn fn;
    void *ctx;
    int64_t next_rev; /* first revision not yet delivered */
    int64_t compact_rev;
    bool created; /* this stream was created */
    int stop;     /* why on_line stopped the stream */
    struct tern_err *err;
};

#define WATCH_STOP_CALLER 1 /* fn returned non-zero (value in user_rc) */

static int watch_on_line(void *ctx, const char *line, size_t len)
{
    struct watch_state *st = ctx;
    cJSON *j = NULL;
    struct watch_msg m = {0};
    int r = 0;
    while (len && (line[len - 1] == ' ' || line[len - 1] == '\r'))
        len--;
    if (len == 0)
        return 0;
    if (json_parse(line, len, &j, st->err)) {
        r = err_wrap(st->err, TERN_EPARSE, "watch line");
        goto out;
    }
    r = etcd__dec_watch_line(j, &m, st->err);
    if (r)
        goto out;
    if (m.is_error) {
        r = m.error_code;
        goto out;
    }
    if (m.canceled) {
        if (m.compact_revision > 0) {
            st->compact_rev = m.compact_revision;
            r = err_set(st->err, TERN_ECOMPACTED,
                        "watch: revision %lld compacted (oldest available %lld)",
                        (long long)st->next_rev, (long long)m.compact_revision);
        } else {
            r = err_set(st->err, TERN_EINVALID, "watch canceled by etcd: %s",
                        m.cancel_reason ? m.cancel_reason : "no reason given");
        }
        goto out;
    }
    if (m.created) {
        st->created = true;
        goto out;
    }
    /* drop what a previous stream already delivered */
    size_t first = 0;
    while (first < m.nevents && m.events[first].kv.mod_revision < st->next_rev)
        first++;
    struct etcd_watch_batch b = {.header = m.header};
    if (m.nevents == 0) {
        b.progress = true;
    } else if (first == m.nevents) {
        goto out;
    } else {
        b.events = m.events + first;
        b.nevents = m.nevents - first;
    }
    int ur = st->fn(st->ctx, &b);
    if (b.nevents)
        st->next_rev = m.events[m.nevents - 1].kv.mod_revision + 1;
    if (b.progress && m.header.revision + 1 > st->next_rev)
        st->next_rev = m.header.revision + 1;
    if (ur) {
        st->stop = WATCH_STOP_CALLER;
        r = ur;
    }
out:
    etcd__watch_msg_done(&m);
    cJSON_Delete(j);
    return r;
}

int etcd_watch(struct etcd *c, const struct etcd_watch_req *req, etcd_watch_fn fn, void *ctx,
               atomic_bool *cancel, int64_t *ret_compact_revision, struct tern_err *err)
{
    struct watch_state st = {.fn = fn, .ctx = ctx, .err = err};
    long give_up = req->give_up_ms ? req->give_up_ms : 30000;
    long backoff = 100;
    long last_good = now_ms();
    int r = 0;
    if (req->start_revision < 0)
        return err_set(err, TERN_EINVALID, "watch: negative start revision");
    if (req->start_revision == 0) {
        /* pin "now" so that a reconnect resumes without a gap (read within
         * the watched keys: a client with a prefix role may read only them) */
        int64_t rev;
        r = etcd_revision_in(c, &req->keys, &rev, err);
        if (r)
            return r;
        st.next_rev = rev + 1;
    } else {
        st.next_rev = req->start_revision;
    }
    for (;;) {
        if (cancelled(cancel))
            return err_set(err, -ECANCELED, "watch: cancelled");
        cJSON *cr = cJSON_CreateObject();
        cJSON *q = cJSON_AddObjectToObject(cr, "create_request");
        r = etcd__add_keys(q, &req->keys, err);
        if (r) {
            cJSON_Delete(cr);
            return r;
        }
        etcd__add_i64s(q, "start_revision", st.next_rev);
        if (req->progress_notify)
            cJSON_AddTrueToObject(q, "progress_notify");
        if (req->prev_kv)
            cJSON_AddTrueToObject(q, "prev_kv");
        if (req->no_put || req->no_delete) {
            cJSON *f = cJSON_AddArrayToObject(q, "filters");
            if (req->no_put)
                cJSON_AddItemToArray(f, cJSON_CreateString("NOPUT"));
            if (req->no_delete)
                cJSON_AddItemToArray(f, cJSON_CreateString("NODELETE"));
        }
        char *body = json_print(cr);
        cJSON_Delete(cr);

        size_t idx = atomic_load(&c->cur) % c->neps;
        struct httpc *h = etcd__conn_get(c);
        char *url = NULL, *auth = NULL;
        struct httpc_response resp = {0};
        if (etcd__need_token(c)) {
            r = etcd__authenticate(c, h, c->eps[idx], cancel, err);
            if (r)
                goto stream_done;
        }
        url = xasprintf("%s/v3/watch", c->eps[idx]);
        auth = etcd__auth_header(c);
        const char *hdrs[] = {"Content-Type: application/json", auth, NULL};
        struct httpc_request hr = {
            .method = "POST",
            .url = url,
            .headers = hdrs,
            .body = body,
            .body_len = strlen(body),
            .connect_timeout_ms = c->connect_timeout_ms,
            .idle_timeout_ms = req->idle_timeout_ms,
            .tls = c->has_tls ? &c->tls : NULL,
            .on_line = watch_on_line,
            .ctx = &st,
            .max_line = TERN_HTTP_MAX_LINE,
            .cancel = cancel,
        };
        st.created = false;
        st.stop = 0;
        r = httpc_do(h, &hr, &resp, err);
        if (r == 0 && resp.status != 200) {
            cJSON *ej = NULL;
            bool un;
            json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &ej, NULL);
            r = etcd__map_error(resp.status, ej, &un, err);
            cJSON_Delete(ej);
        } else if (r == 0) {
            r = err_set(err, TERN_EUNREACHABLE, "watch: stream ended");
        }
    stream_done:
        free(body);
        free(url);
        free(auth);
        httpc_response_done(&resp);
        etcd__conn_put(c, h, true);
        if (st.stop == WATCH_STOP_CALLER)
            return r;
        if (r == -ECANCELED || cancelled(cancel))
            return err_set(err, -ECANCELED, "watch: cancelled");
        if (r == TERN_ECOMPACTED) {
            if (ret_compact_revision)
                *ret_compact_revision = st.compact_rev;
            return r;
        }
        if (r == TERN_EAUTH && c->user) {
            pthread_mutex_lock(&c->mu);
            free(c->token);
            c->token = NULL;
            pthread_mutex_unlock(&c->mu);
        } else if (r == TERN_EINVALID || r == TERN_EPARSE || r == TERN_ETOOLARGE) {
            return r;
        }
        if (st.created) {
            last_good = now_ms();
            backoff = 100;
        } else {
            /* this endpoint did not give us a stream: try the next one */
            size_t exp = idx;
            atomic_compare_exchange_strong(&c->cur, &exp, (idx + 1) % c->neps);
        }
        if (give_up >= 0 && now_ms() - last_good >= give_up)
            return r;
        if (etcd__sleep_cancellable(backoff, cancel))
            return err_set(err, -ECANCELED, "watch: cancelled");
        backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
    }
}
