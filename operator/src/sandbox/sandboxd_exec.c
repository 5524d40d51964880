/* sandboxd_exec.c - tern-sandboxd's command endpoints: POST /v1/exec (parse
 * the body, open cwd in the workspace, take the idempotency ticket, run with
 * sbexec under the configured uid, limits and Landlock, record and answer)
 * and GET /v1/executions (the idempotency records).
 */
#include "sandboxd_internal.h"

#include "json/json.h"
#include "sandbox/sbapi.h"

#include <fcntl.h>
#include <stdio.h>

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
    struct sbexec_result res;
    rc = sbexec_run(&o, &res, &err);
    if (rc != 0) {
        ok = sandboxd__finish_error(d, c, r, "exec", rc, err.msg, method, url);
        goto out;
    }
    cJSON *body = sbapi_exec_response(&res);
    sbexec_result_done(&res);
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
