/* sandboxd_exec.c - tern-sandboxd's command endpoints: POST /v1/exec (parse
 * the body, open cwd in the workspace, take the idempotency ticket, run with
 * sbexec under the configured uid, limits and Landlock, record and answer)
 * and GET /v1/executions (the idempotency records).
 */
#include "sandboxd_internal.h"

#include "base/mem.h"
#include "json/json.h"
#include "sandbox/sbapi.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void live_write(void *ctx, int stream, const char *p, size_t n)
{
    sblive_write(ctx, stream, p, n);
}

enum MHD_Result sandboxd__do_exec(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                  const char *method, const char *url)
{
    struct tern_err err = {0};
    struct sbapi_exec ex = {0};
    int cwdfd = -1;
    enum MHD_Result ok;
    int rc = sbapi_parse_exec(r->body.data ? r->body.data : "", r->body.len,
                              d->cfg.default_timeout_ms, &ex, &err);
    if (rc != 0) {
        ok = sandboxd__send_rc(d, c, rc, err.msg, r, method, url);
        goto out;
    }
    rc = wspath_open(d->wsfd, ex.cwd, O_RDONLY | O_DIRECTORY, 0, WSPATH_FOLLOW, &cwdfd);
    if (rc != 0) {
        char msg[WSPATH_BUF + 64];
        snprintf(msg, sizeof msg, "cwd \"%s\": %s", ex.cwd, err_str(rc));
        ok = sandboxd__send_rc(d, c, rc, msg, r, method, url);
        goto out;
    }
    struct buf canon;
    buf_init(&canon, 2 * TERN_SANDBOX_MAX_EXEC_BODY + 4096);
    rc = sbapi_exec_canonical(&ex, &canon);
    if (rc == 0)
        rc = sandboxd__idem_start(d, r, "exec", canon.data ? canon.data : "", canon.len, &err);
    buf_done(&canon);
    if (rc == 1) {
        ok = sandboxd__send_replay(d, c, r, method, url);
        goto out;
    }
    if (rc < 0) {
        ok = sandboxd__send_rc(d, c, rc, err.msg, r, method, url);
        goto out;
    }
    struct sbexec_opts o = {
        .argv = ex.argv,
        .base_env = d->cfg.pass_env,
        .env_add = ex.env,
        .cwd_fd = cwdfd,
        .home = "/tmp",
        .stdin_data = ex.stdin_data,
        .stdin_len = ex.stdin_len,
        .timeout_ms = ex.timeout_ms,
        .kill_grace_ms = d->cfg.kill_grace_ms,
        .max_output = d->cfg.max_output,
        .uid = uid_set(d) ? d->cfg.run_uid : (uid_t)-1,
        .gid = uid_set(d) ? d->cfg.run_gid : (gid_t)-1,
        .lim = d->cfg.lim,
        .landlock_dirs = d->landlock ? (const char *const *)d->landlock_dirs : NULL,
    };
    /* with a key, the output can be followed while it runs */
    struct sblive_exec *live = r->key ? sblive_begin(d->live, r->key) : NULL;
    if (live) {
        o.on_output = live_write;
        o.output_ctx = live;
    }
    struct sbexec_result res;
    rc = sbexec_run(&o, &res, &err);
    if (rc != 0) {
        cJSON *f = cJSON_CreateObject();
        json_add_string(f, "status", "error");
        sblive_end(live, f);
        cJSON_Delete(f);
        sblive_put(live);
        ok = sandboxd__finish_error(d, c, r, "exec", rc, err.msg, method, url);
        goto out;
    }
    cJSON *body = sbapi_exec_response(&res);
    sbexec_result_done(&res);
    sblive_end(live, body);
    sblive_put(live);
    ok = sandboxd__finish_json(d, c, r, "exec", 200, body, method, url);
out:
    if (cwdfd >= 0)
        close(cwdfd);
    sbapi_exec_done(&ex);
    return ok;
}

enum MHD_Result sandboxd__do_executions(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                        const char *method, const char *url)
{
    cJSON *arr = NULL;
    struct tern_err err = {0};
    int rc = idem_list(&d->idem, &arr, &err);
    if (rc != 0)
        return sandboxd__send_rc(d, c, rc, err.msg, r, method, url);
    cJSON *body = cJSON_CreateObject();
    cJSON_AddItemToObject(body, "executions", arr);
    enum MHD_Result ok = sandboxd__send_json(d, c, 200, body, r, method, url);
    cJSON_Delete(body);
    return ok;
}

/* ---- GET /v1/executions/live ---------------------------------------------- */

struct live_reader {
    struct sandboxd *d;
    struct sblive_exec *e;
    uint64_t off[2];
    bool follow, done;
    struct buf pending;
    size_t sent;
    int64_t last_line_ms;
};

static ssize_t live_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    struct live_reader *lr = cls;
    while (lr->sent == lr->pending.len) {
        if (lr->done || atomic_load(&lr->d->stopping))
            return MHD_CONTENT_READER_END_OF_STREAM;
        buf_reset(&lr->pending);
        lr->sent = 0;
        /* one thread per connection: blocking here is what libmicrohttpd
         * expects; wake every second to notice a stop */
        size_t n = sblive_read(lr->e, lr->off, 64u << 10, lr->follow ? 1000 : 0, &lr->pending,
                               &lr->done);
        if (n) {
            lr->last_line_ms = now_ms();
        } else if (!lr->follow) {
            return MHD_CONTENT_READER_END_OF_STREAM;
        } else if (now_ms() - lr->last_line_ms >= 10000) {
            /* a heartbeat: a client that went away is noticed at the write */
            buf_puts(&lr->pending, "{\"heartbeat\":true}\n");
            lr->last_line_ms = now_ms();
        }
    }
    size_t n = lr->pending.len - lr->sent;
    if (n > max)
        n = max;
    memcpy(out, lr->pending.data + lr->sent, n);
    lr->sent += n;
    return (ssize_t)n;
}

static void live_free(void *cls)
{
    struct live_reader *lr = cls;
    sblive_put(lr->e);
    buf_done(&lr->pending);
    free(lr);
}

enum MHD_Result sandboxd__do_live(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                  const char *method, const char *url)
{
    struct tern_err err = {0};
    const char *key = query(c, "key");
    bool follow = false;
    int64_t o0 = 0, o1 = 0;
    if (!key || idem_key_valid(key) != 0)
        return sandboxd__send_error(d, c, 400, "bad_request", "key: the exec's Idempotency-Key",
                                    r, method, url);
    if (sandboxd__query_bool(c, "follow", &follow, &err) ||
        sandboxd__query_i64(c, "stdoutOffset", 0, INT64_MAX, &o0, &err) ||
        sandboxd__query_i64(c, "stderrOffset", 0, INT64_MAX, &o1, &err))
        return sandboxd__send_error(d, c, 400, "bad_request", err.msg, r, method, url);
    struct sblive_exec *e = sblive_find(d->live, key);
    if (!e)
        return sandboxd__send_error(d, c, 404, "not_found",
                                    "no exec under this key is running or ended recently", r,
                                    method, url);
    struct live_reader *lr = xcalloc(1, sizeof *lr);
    lr->d = d;
    lr->e = e;
    lr->off[0] = (uint64_t)o0;
    lr->off[1] = (uint64_t)o1;
    lr->follow = follow;
    lr->last_line_ms = now_ms();
    buf_init(&lr->pending, 4u * TERN_SANDBOX_LIVE_RING + 4096);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16u << 10, live_read, lr, live_free);
    if (!resp) {
        live_free(lr);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/x-ndjson");
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    if (d->cfg.on_request)
        d->cfg.on_request(d->cfg.log_ctx, method, url, 200, now_ms() - r->t0);
    return ok;
}
