/* sandboxd_snapshot.c - tern-sandboxd's workspace transfer: POST
 * /v1/snapshot streams a tar of the workspace (without the state
 * directory) through a callback response; the answer to POST /v1/restore
 * commits the restore the shell fed the body to (restore.h) and reports
 * its counts.
 */
#include "sandboxd_internal.h"

#include "json/json.h"
#include "sandbox/sandbox_contract.h"
#include "sandbox/tarball.h"

#define SNAPSHOT_BLOCK (256u << 10)

static ssize_t snap_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct tarw *w = cls;
    size_t n = 0;
    if (tarw_read(w, buf, max, &n) != 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

static void snap_free(void *cls)
{
    tarw_free(cls);
}

enum MHD_Result sandboxd__do_snapshot(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                      const char *method, const char *url)
{
    static const char *const skip[] = {SANDBOX_STATE_DIR, NULL};
    struct tarw *w = NULL;
    int rc = tarw_new(d->wsfd, skip, &w);
    if (rc != 0)
        return sandboxd__send_rc(d, c, rc, "snapshot", r, method, url);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SNAPSHOT_BLOCK, snap_read, w, snap_free);
    MHD_add_response_header(resp, "Content-Type", "application/x-tar");
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    if (d->cfg.on_request)
        d->cfg.on_request(d->cfg.log_ctx, method, url, 200, now_ms() - r->t0);
    return ok;
}

enum MHD_Result sandboxd__do_restore_end(struct sandboxd *d, struct MHD_Connection *c,
                                         struct req *r, const char *method, const char *url)
{
    struct tern_err err = {0};
    struct restore_stats st;
    int rc = restore_commit(r->rs, &st, &err);
    restore_free(r->rs);
    r->rs = NULL;
    atomic_flag_clear(&d->restoring);
    if (rc != 0)
        return sandboxd__send_rc(d, c, rc, err.msg, r, method, url);
    cJSON *body = cJSON_CreateObject();
    json_add_string(body, "status", "completed");
    json_add_int64(body, "entries", (int64_t)st.entries);
    json_add_int64(body, "files", (int64_t)st.files);
    json_add_int64(body, "bytes", (int64_t)st.bytes);
    json_add_int64(body, "skipped", (int64_t)st.skipped);
    enum MHD_Result ok = sandboxd__send_json(d, c, 200, body, r, method, url);
    cJSON_Delete(body);
    return ok;
}
