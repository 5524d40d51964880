/* devwire.c - controllers and kubelet over tern-dev's REST layer. See
 * devwire.h. */
#include "devwire.h"

#include "base/buf.h"
#include "base/mem.h"
#include "base/num.h"
#include "devctl/fsutil.h"
#include "devctl/objrest.h"
#include "devctl/satoken.h"
#include "apiserver/apiwatch.h"
#include "kubelet/devrun.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct devwire {
    struct objrest *objrest;
    struct devrun *run;
};

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decodes s in place ('+' is a space in queries). */
static void unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (*p == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
            *o++ = (char)(hexval(p[1]) * 16 + hexval(p[2]));
            p += 2;
        } else {
            *o++ = *p == '+' ? ' ' : *p;
        }
    }
    *o = 0;
}

static int inproc(void *ctx, const char *method, const char *path, const char *body,
                  size_t body_len, int *ret_status, char **ret_body, size_t *ret_len,
                  struct tern_err *err)
{
    (void)err;
    struct apirest *rest = ctx;
    char *p = xstrdup(path);
    char *q = strchr(p, '?');
    struct apirest_arg args[8];
    size_t nargs = 0;
    if (q) {
        *q++ = 0;
        for (char *a = q; a && *a && nargs < 8;) {
            char *amp = strchr(a, '&');
            if (amp)
                *amp = 0;
            char *eq = strchr(a, '=');
            if (eq)
                *eq = 0;
            unescape(a);
            if (eq)
                unescape(eq + 1);
            args[nargs++] = (struct apirest_arg){a, eq ? eq + 1 : ""};
            a = amp ? amp + 1 : NULL;
        }
    }
    struct apirest_req req = {.method = method,
                              .path = p,
                              .args = args,
                              .nargs = nargs,
                              .content_type = body ? "application/json" : NULL,
                              .accept = "application/json",
                              .body = body,
                              .body_len = body_len};
    struct apirest_resp resp = {0};
    apirest_handle(rest, &req, &resp);
    if (resp.watch) { /* never asked for; do not leak it */
        apirest_watch_free(resp.watch);
        resp.watch = NULL;
    }
    *ret_status = resp.status;
    *ret_len = resp.body.len;
    *ret_body = buf_steal(&resp.body);
    apirest_resp_done(&resp);
    free(p);
    return 0;
}

/* The store's revision is the hub's: a wait ends with the write that
 * passes after, not at the next poll. */
static int hub_wait(void *ctx, int64_t after, int timeout_ms)
{
    struct apirest *rest = ctx;
    return apiwatch_hub_wait(rest->hub, after + 1, timeout_ms) ? 0 : TERN_ETIMEOUT;
}

static int add_change(void *ctx, size_t which, bool deleted, int64_t rev, cJSON *obj)
{
    objstore_changes_add(ctx, which, deleted, rev, obj);
    return 0;
}

/* The controllers' and the kubelet's caches follow the hub: a pass reads
 * what changed since the last one (and every write before it began). */
static int hub_changes(void *ctx, const char *const *gvrs, size_t n, const char *after_rv,
                       struct objstore_changes *ret, struct tern_err *err)
{
    struct apirest *rest = ctx;
    int64_t after = 0, upto = 0;
    if (n == 0)
        return 0;
    if (!after_rv || num_parse_i64(after_rv, &after) != 0)
        return err_set(err, TERN_EINVALID, "bad resourceVersion \"%s\"",
                       after_rv ? after_rv : "");
    int rc = apirest_changes(rest, gvrs, n, after, 2000, add_change, ret, &upto, err);
    if (rc == 0)
        num_fmt_i64(upto, ret->rv);
    return rc;
}

int devwire_start(const struct devwire_cfg *cfg, struct devwire **ret, struct tern_err *err)
{
    struct devwire *w = xcalloc(1, sizeof *w);
    unsigned char key[SATOKEN_KEY_LEN];
    char *keypath = xasprintf("%s/sa.key", cfg->dir);
    char *vol = xasprintf("%s/volumes", cfg->dir);
    char *exe = NULL;
    int rc = satoken_key_load(keypath, key, err);
    if (rc)
        goto out;
    const char *bin = cfg->bin_dir;
    if (!bin)
        bin = exe = fsutil_exe_dir();
    struct objrest_transport t = {inproc, cfg->rest};
    w->objrest = objrest_new(&t);
    objrest_set_wait_fn(w->objrest, hub_wait, cfg->rest);
    objrest_set_changes_fn(w->objrest, hub_changes, cfg->rest);
    static const char *const extra[] = {"tern.dev/v1alpha1/agentsessions=AgentSession"};
    struct devrun_cfg dc = {
        .store = objrest_objstore(w->objrest),
        .ctl = {.volume_dir = vol,
                .job = {cfg->job_backoff_s == 0 ? 10 : cfg->job_backoff_s < 0 ? 0 : cfg->job_backoff_s,
                        600},
                .extra = extra,
                .nextra = 1},
        .kubelet = {.dir = cfg->dir,
                    .api_host = "127.0.0.1",
                    .api_port = cfg->port,
                    .ca_pem = cfg->ca_pem,
                    .sa_key = key,
                    .bin_dir = bin && *bin ? bin : NULL,
                    .pod_network = cfg->pod_network,
                    .netpol_unenforced = cfg->netpol_unenforced},
        .period_ms = 1000,
    };
    rc = devrun_start(&dc, &w->run, err);
out:
    free(exe);
    free(keypath);
    free(vol);
    if (rc) {
        objrest_free(w->objrest);
        free(w);
    } else {
        *ret = w;
    }
    return rc;
}

void devwire_stop(struct devwire *w, int grace_ms)
{
    if (!w)
        return;
    devrun_stop(w->run, grace_ms);
    objrest_free(w->objrest);
    free(w);
}
