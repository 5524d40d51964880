/* sandboxd_reply.c - how tern-sandboxd answers: JSON and error bodies (with
 * the access log hook), the mapping of negative codes to HTTP statuses and
 * API error codes, path error messages, errors deferred until the body has
 * been read, query parameters, and the idempotent finish (record, then
 * send; or send the recorded answer again).
 */
#include "sandboxd_internal.h"

#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"
#include "sandbox/sbapi.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ responses */

static enum MHD_Result send_body(struct sandboxd *d, struct MHD_Connection *c, unsigned status,
                                 char *body, const char *ctype, struct req *r, const char *method,
                                 const char *url)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", ctype);
    enum MHD_Result ok = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    if (d->cfg.on_request)
        d->cfg.on_request(d->cfg.log_ctx, method, url, status, r ? now_ms() - r->t0 : 0);
    return ok;
}

enum MHD_Result sandboxd__send_json(struct sandboxd *d, struct MHD_Connection *c, unsigned status,
                                    const cJSON *j, struct req *r, const char *method,
                                    const char *url)
{
    return send_body(d, c, status, json_print(j), "application/json", r, method, url);
}

enum MHD_Result sandboxd__send_error(struct sandboxd *d, struct MHD_Connection *c, unsigned status,
                                     const char *code, const char *msg, struct req *r,
                                     const char *method, const char *url)
{
    return send_body(d, c, status, sbapi_error_body(code, msg), "application/json", r, method,
                     url);
}

/* Maps a negative code to an HTTP status and API error code. */
static unsigned api_error(int rc, const char **code)
{
    switch (rc) {
    case -EXDEV:
    case -EACCES:
    case -ELOOP:
    case -EPERM:
        *code = "forbidden_path";
        return 403;
    case -EROFS:
        *code = "read_only";
        return 403;
    case -ENOENT:
    case -ENOTDIR:
    case TERN_ENOTFOUND:
        *code = "not_found";
        return 404;
    case TERN_ETOOLARGE:
    case -ENAMETOOLONG:
    case -EFBIG:
        *code = "too_large";
        return 413;
    case -ENOSPC:
    case -EDQUOT:
        *code = "too_large";
        return 507;
    case -EBUSY:
        *code = "busy";
        return 409;
    case -EEXIST:
        *code = "bad_request";
        return 422;
    case -EINVAL:
    case -EISDIR:
    case -ENOTEMPTY:
    case TERN_EINVALID:
    case TERN_EPARSE:
        *code = "bad_request";
        return 400;
    default:
        *code = "internal";
        return 500;
    }
}

enum MHD_Result sandboxd__send_rc(struct sandboxd *d, struct MHD_Connection *c, int rc,
                                  const char *msg, struct req *r, const char *method,
                                  const char *url)
{
    const char *code;
    unsigned st = api_error(rc, &code);
    return sandboxd__send_error(d, c, st, code, msg && msg[0] ? msg : err_str(rc), r, method, url);
}

/* The message for a path that failed validation or resolution. */
const char *sandboxd__path_msg(int rc)
{
    switch (rc) {
    case -EXDEV:
        return "path escapes the workspace";
    case -EACCES:
        return "path is in the sandbox's state directory";
    case -ELOOP:
        return "path goes through a symlink where none may be followed";
    case -EROFS:
        return "path is not writable";
    case -EINVAL:
        return "path contains control bytes";
    case -ENAMETOOLONG:
        return "path too long";
    case -ENOENT:
        return "no such file or directory";
    case -ENOTDIR:
        return "a path component is not a directory";
    default:
        return err_str(rc);
    }
}

/* Remembers an error to send once the body has been read. */
void sandboxd__defer_rc(struct req *r, int rc, const char *msg)
{
    if (r->err_status)
        return;
    r->err_status = api_error(rc, &r->err_code);
    r->err_rc = rc;
    r->err_msg = xstrdup(msg && msg[0] ? msg : err_str(rc));
}

/* ------------------------------------------------------------ helpers */

int sandboxd__query_i64(struct MHD_Connection *c, const char *k, int64_t min, int64_t max,
                        int64_t *v, struct tern_err *err)
{
    const char *s = query(c, k);
    if (!s)
        return 0;
    if (num_parse_range(s, min, max, v) != 0)
        return err_set(err, TERN_EINVALID, "%s: must be an integer in [%lld, %lld]", k,
                       (long long)min, (long long)max);
    return 0;
}

int sandboxd__query_bool(struct MHD_Connection *c, const char *k, bool *v, struct tern_err *err)
{
    const char *s = query(c, k);
    if (!s)
        return 0;
    if (strcmp(s, "true") == 0 || strcmp(s, "1") == 0)
        *v = true;
    else if (strcmp(s, "false") == 0 || strcmp(s, "0") == 0 || !s[0])
        *v = false;
    else
        return err_set(err, TERN_EINVALID, "%s: must be true or false", k);
    return 0;
}

int sandboxd__write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Starts the idempotent part of a request. Returns 0 (go ahead, ticket held
 * if a key was given), 1 (r->replay set), or a negative code. */
int sandboxd__idem_start(struct sandboxd *d, struct req *r, const char *op, const char *material,
                         size_t mlen, struct tern_err *err)
{
    if (!r->key)
        return 0;
    struct buf m;
    buf_init(&m, mlen + 16);
    buf_printf(&m, "%s\n", op);
    buf_append(&m, material, mlen);
    idem_sha256_hex(m.data, m.len, r->req_hash);
    buf_done(&m);
    int rc = idem_begin(&d->idem, r->key, op, r->req_hash, &r->ticket, &r->replay,
                        &r->replay_http, err);
    if (rc == 0)
        r->ticketed = true;
    return rc;
}

/* Records (if ticketed) and sends a JSON response. */
enum MHD_Result sandboxd__finish_json(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                      const char *op, unsigned status, cJSON *body,
                                      const char *method, const char *url)
{
    if (r->ticketed) {
        struct tern_err err = {0};
        int rc = idem_finish(&d->idem, &r->ticket, r->key, op, r->req_hash, (int)status, body,
                             &err);
        r->ticketed = false;
        if (rc != 0) {
            cJSON_Delete(body);
            return sandboxd__send_rc(d, c, rc, err.msg, r, method, url);
        }
    }
    cJSON_AddFalseToObject(body, "replayed");
    enum MHD_Result ok = sandboxd__send_json(d, c, status, body, r, method, url);
    cJSON_Delete(body);
    return ok;
}

enum MHD_Result sandboxd__send_replay(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                      const char *method, const char *url)
{
    cJSON_DeleteItemFromObjectCaseSensitive(r->replay, "replayed");
    cJSON_AddTrueToObject(r->replay, "replayed");
    enum MHD_Result ok =
        sandboxd__send_json(d, c, (unsigned)r->replay_http, r->replay, r, method, url);
    return ok;
}

/* An error that happened after the ticket was taken: record it too, so a
 * retry sees the same outcome instead of running again. */
enum MHD_Result sandboxd__finish_error(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                       const char *op, int rc, const char *msg, const char *method,
                                       const char *url)
{
    if (!r->ticketed)
        return sandboxd__send_rc(d, c, rc, msg, r, method, url);
    const char *code;
    unsigned st = api_error(rc, &code);
    char *t = sbapi_error_body(code, msg && msg[0] ? msg : err_str(rc));
    cJSON *body = NULL;
    json_parse(t, strlen(t), &body, NULL);
    free(t);
    struct tern_err err = {0};
    int frc = idem_finish(&d->idem, &r->ticket, r->key, op, r->req_hash, (int)st, body, &err);
    r->ticketed = false;
    cJSON_Delete(body);
    if (frc != 0)
        return sandboxd__send_rc(d, c, frc, err.msg, r, method, url);
    return sandboxd__send_error(d, c, st, code, msg && msg[0] ? msg : err_str(rc), r, method, url);
}
