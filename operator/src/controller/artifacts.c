/* artifacts.c - the artifact store's shell. See artifacts.h. */
#include "artifacts.h"

#include "base/base64.h"
#include "base/limits.h"
#include "base/mem.h"
#include "controller/artstore.h"
#include "controller/children.h"
#include "http/httpc.h"
#include "json/json.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct kgvr secrets_gvr = {"", "v1", "secrets"};
static const struct kgvr configmaps_gvr = {"", "v1", "configmaps"};

static const char *mstr(const cJSON *obj, const char *key)
{
    const cJSON *v = json_get(json_get(obj, "metadata"), key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The session's sandbox token (owned), or NULL. */
static char *sandbox_token(struct kclient *kc, const char *ns, const char *session)
{
    char *name = children_name(session, "sandbox-token");
    cJSON *sec = NULL;
    struct kclient_err ke = {0};
    char *tok = NULL;
    unsigned char *raw = NULL;
    size_t n = 0;
    if (kclient_get(kc, &secrets_gvr, ns, name, &sec, &ke) != 0)
        goto out;
    const cJSON *b = json_get(json_get(sec, "data"), "token");
    if (!cJSON_IsString(b) || base64_decode(b->valuestring, strlen(b->valuestring), &raw, &n))
        goto out;
    while (n && (raw[n - 1] == '\n' || raw[n - 1] == ' '))
        n--;
    if (n == 0 || memchr(raw, 0, n))
        goto out;
    tok = xmalloc(n + 1);
    memcpy(tok, raw, n);
    tok[n] = 0;
out:
    if (raw)
        explicit_bzero(raw, n);
    free(raw);
    cJSON_Delete(sec);
    free(name);
    return tok;
}

/* GET url from sandboxd into resp (bounded by max). */
static int sandbox_get(struct httpc *h, const char *url, const char *auth, size_t max,
                       struct httpc_response *resp, struct tern_err *err)
{
    const char *hdrs[] = {auth, NULL};
    struct httpc_request rq = {.url = url, .headers = hdrs, .timeout_ms = 60000,
                               .connect_timeout_ms = 3000, .max_body = max};
    return httpc_do(h, &rq, resp, err);
}

struct fetched {
    struct artstore_file *files;
    unsigned char **bufs;
    char **paths;
    char **msgs;
    size_t n;
};

static void fetched_done(struct fetched *f)
{
    for (size_t i = 0; i < f->n; i++) {
        free(f->bufs[i]);
        free(f->paths[i]);
        free(f->msgs[i]);
    }
    free(f->files);
    free(f->bufs);
    free(f->paths);
    free(f->msgs);
    memset(f, 0, sizeof *f);
}

/* Lists output/ and reads every file that fits the bounds. */
static int read_output(const char *addr, const char *token, size_t max_file, size_t max_total,
                       struct fetched *f, struct tern_err *err)
{
    struct httpc *h = httpc_new();
    char *auth = xasprintf("Authorization: Bearer %s", token);
    char *url = xasprintf("http://%s/v1/list/output?depth=%d", addr, TERN_POLICY_MAX_DEPTH);
    struct httpc_response resp = {0};
    cJSON *list = NULL;
    int rc = sandbox_get(h, url, auth, (size_t)TERN_RUNNER_MAX_SANDBOX_BODY, &resp, err);
    if (rc) {
        rc = err_wrap(err, rc == TERN_ETOOLARGE ? rc : TERN_EUNREACHABLE,
                      "the sandbox's listing of output/");
        goto out;
    }
    if (resp.status == 404)
        goto out; /* no output/: an empty set */
    if (resp.status != 200) {
        rc = err_set(err, TERN_EHTTP, "the sandbox's listing of output/: HTTP %ld", resp.status);
        goto out;
    }
    if ((rc = json_parse(resp.body.data ? resp.body.data : "", resp.body.len, &list, err)))
        goto out;
    const cJSON *entries = json_get(list, "entries");
    size_t cap = (size_t)cJSON_GetArraySize(entries);
    if (cap > TERN_ARTIFACTS_MAX_FILES)
        cap = TERN_ARTIFACTS_MAX_FILES;
    f->files = xcalloc(cap + 1, sizeof *f->files);
    f->bufs = xcalloc(cap + 1, sizeof *f->bufs);
    f->paths = xcalloc(cap + 1, sizeof *f->paths);
    f->msgs = xcalloc(cap + 1, sizeof *f->msgs);
    size_t planned = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, entries)
    {
        const cJSON *p = json_get(e, "path"), *ty = json_get(e, "type");
        int64_t size = 0;
        if (f->n >= cap)
            break;
        if (!cJSON_IsString(p) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "dir") == 0 ||
            strlen(p->valuestring) > TERN_SANDBOX_MAX_PATH)
            continue;
        json_get_int64(e, "entry", "size", JSON_OPTIONAL, &size, NULL);
        size_t i = f->n++;
        struct artstore_file *af = &f->files[i];
        f->paths[i] = xstrdup(p->valuestring);
        af->path = f->paths[i];
        af->len = size > 0 ? (size_t)size : 0;
        if (strcmp(ty->valuestring, "file") != 0) {
            /* a symlink (or anything but a regular file) is listed, not followed */
            af->reason = "NotAFile";
            f->msgs[i] = xasprintf("a %s, not a regular file: not stored", ty->valuestring);
            af->message = f->msgs[i];
            continue;
        }
        if (af->len > max_file) {
            af->reason = "TooLarge";
            f->msgs[i] = xasprintf("%zu bytes, over the bound of %zu bytes per file", af->len,
                                   max_file);
            af->message = f->msgs[i];
            continue;
        }
        if (planned + af->len > max_total) {
            af->reason = "SetTooLarge";
            f->msgs[i] = xasprintf("%zu bytes would take the set over its bound of %zu bytes",
                                   af->len, max_total);
            af->message = f->msgs[i];
            continue;
        }
        char *ep = httpc_escape_path(af->path);
        char *furl = xasprintf("http://%s/v1/files/%s", addr, ep);
        free(ep);
        struct httpc_response fr = {0};
        struct tern_err fe = {0};
        int frc = sandbox_get(h, furl, auth, max_file, &fr, &fe);
        free(furl);
        if (frc == TERN_ETOOLARGE) {
            af->reason = "TooLarge";
            f->msgs[i] = xasprintf("grew over the bound of %zu bytes per file while read",
                                   max_file);
            af->message = f->msgs[i];
        } else if (frc) {
            rc = err_set(err, TERN_EUNREACHABLE, "reading %s from the sandbox: %s", af->path,
                         fe.msg);
        } else if (fr.status == 404) {
            af->reason = "Gone";
            af->message = "the file was removed before it could be read";
        } else if (fr.status != 200) {
            rc = err_set(err, TERN_EHTTP, "reading %s from the sandbox: HTTP %ld", af->path,
                         fr.status);
        } else {
            af->len = fr.body.len;
            f->bufs[i] = xmalloc(fr.body.len + 1);
            if (fr.body.len)
                memcpy(f->bufs[i], fr.body.data, fr.body.len);
            af->data = f->bufs[i];
            planned += af->len;
        }
        httpc_response_done(&fr);
        if (rc)
            goto out;
    }
out:
    cJSON_Delete(list);
    httpc_response_done(&resp);
    httpc_free(h);
    free(url);
    explicit_bzero(auth, strlen(auth));
    free(auth);
    return rc;
}

/* Creates the set's ConfigMap; one that exists already is this set from an
 * earlier try: the same content is success, other content is replaced (it
 * was never recorded). */
static int store(struct kclient *kc, const char *ns, cJSON *cm, struct tern_err *err)
{
    struct kclient_err ke = {0};
    int rc = kclient_create(kc, &configmaps_gvr, ns, cm, NULL, &ke);
    if (rc != -EEXIST) {
        if (rc)
            err_set(err, rc, "create configmap %s: %s", mstr(cm, "name"), ke.e.msg);
        return rc;
    }
    cJSON *cur = NULL;
    if ((rc = kclient_get(kc, &configmaps_gvr, ns, mstr(cm, "name"), &cur, &ke))) {
        err_set(err, rc, "get configmap %s: %s", mstr(cm, "name"), ke.e.msg);
        goto out;
    }
    if (artstore_same(cur, cm))
        goto out;
    json_add_string(cJSON_GetObjectItemCaseSensitive(cm, "metadata"), "resourceVersion",
                    mstr(cur, "resourceVersion") ? mstr(cur, "resourceVersion") : "");
    if ((rc = kclient_update(kc, &configmaps_gvr, ns, cm, NULL, &ke)))
        err_set(err, rc, "update configmap %s: %s", mstr(cm, "name"), ke.e.msg);
out:
    cJSON_Delete(cur);
    return rc;
}

static int record_set(struct journal *j, int64_t turn, const char *request, const cJSON *data,
                      struct tern_err *err)
{
    char h[65] = "";
    if (request)
        artstore_sha256(request, strlen(request), h);
    char *key = request ? xasprintf("artifacts/t%lld/%.8s", (long long)turn, h)
                        : xasprintf("artifacts/t%lld", (long long)turn);
    struct journal_append_req req = {.type = JOURNAL_EV_ARTIFACTS_PERSISTED,
                                     .type_name = ARTSTORE_EVENT, .turn = turn, .key = key,
                                     .data = data};
    int rc = journal_append(j, &req, NULL, err);
    if (rc == TERN_EUNKNOWN) {
        bool committed = false;
        rc = journal_resolve(j, &committed, NULL, err);
        if (!rc && !committed)
            rc = err_set(err, TERN_EUNKNOWN, "journal append of %s not committed",
                         ARTSTORE_EVENT);
    }
    free(key);
    return rc;
}

static void event(struct recorder *rec, const cJSON *session, const char *type,
                  const char *reason, const char *note)
{
    if (!rec)
        return;
    struct recorder_ref ref;
    recorder_ref_of(session, &ref);
    recorder_event(rec, &ref, type, reason, "PersistArtifacts", "%s", note);
}

int artifacts_persist(const struct artifacts_config *cfg, struct kclient *kc, struct journal *j,
                      struct recorder *rec, const cJSON *session,
                      const struct reconcile_action *a, int attempts, struct tern_err *err)
{
    const char *ns = mstr(session, "namespace"), *name = mstr(session, "name");
    const char *uid = mstr(session, "uid");
    size_t max_file = cfg && cfg->max_file ? cfg->max_file : TERN_ARTIFACTS_MAX_FILE;
    size_t max_total = cfg && cfg->max_total ? cfg->max_total : TERN_ARTIFACTS_MAX_TOTAL;
    struct fetched f = {0};
    cJSON *cm = NULL, *list = NULL, *data = NULL;
    char *token = NULL, *note = NULL;
    int rc = 0;
    if (!ns || !name || !uid || !j)
        return err_set(err, -EINVAL, "artifacts: a session with a journal is needed");
    token = sandbox_token(kc, ns, name);
    if (!token) {
        rc = err_set(err, TERN_ENOTFOUND, "the session's sandbox token is not there");
        goto failed;
    }
    if ((rc = read_output(a->name, token, max_file, max_total, &f, err)))
        goto failed;
    struct artstore_in in = {.session = name, .ns = ns, .uid = uid, .turn = a->turn,
                             .request = a->key,
                             .retain = cJSON_IsTrue(json_get(a->data, "retain")),
                             .now = (int64_t)time(NULL), .max_file = max_file,
                             .max_total = max_total, .files = f.files, .nfiles = f.n};
    json_get_int64(a->data, "data", "ttlSeconds", JSON_OPTIONAL, &in.ttl_seconds, NULL);
    size_t stored = 0;
    artstore_build(&in, &cm, &list, &stored);
    if ((rc = store(kc, ns, cm, err)))
        goto failed;
    if (cfg && cfg->kill_after_store)
        raise(SIGKILL); /* test hook: the set is stored, not recorded */
    data = cJSON_CreateObject();
    json_add_int64(data, "turn", a->turn);
    if (a->key)
        json_add_string(data, "request", a->key);
    json_add_string(data, "configMap", mstr(cm, "name"));
    cJSON_AddItemToObject(data, "artifacts", list);
    list = NULL;
    if ((rc = record_set(j, a->turn, a->key, data, err)))
        goto out; /* the store holds it; the next try finds it */
    const cJSON *it;
    cJSON_ArrayForEach(it, json_get(data, "artifacts"))
    {
        const cJSON *r = json_get(it, "reason");
        if (cJSON_IsString(r) && strstr(r->valuestring, "TooLarge")) {
            char *m = xasprintf("%s not stored: %s", json_get(it, "path")->valuestring,
                                cJSON_IsString(json_get(it, "message"))
                                    ? json_get(it, "message")->valuestring
                                    : "too large");
            event(rec, session, "Warning", "ArtifactTooLarge", m);
            free(m);
        }
    }
    note = xasprintf("%zu of %d files of turn %lld stored in ConfigMap %s", stored,
                     cJSON_GetArraySize(json_get(data, "artifacts")), (long long)a->turn,
                     mstr(cm, "name"));
    event(rec, session, "Normal", "ArtifactsPersisted", note);
    goto out;
failed:
    note = xasprintf("persisting the artifacts of turn %lld (try %d of %d): %s",
                     (long long)a->turn, attempts + 1, TERN_ARTIFACTS_MAX_ATTEMPTS,
                     err ? err->msg : "failed");
    event(rec, session, "Warning", "ArtifactsPersistFailed", note);
    if (attempts + 1 >= TERN_ARTIFACTS_MAX_ATTEMPTS) {
        /* given up: recorded as failed, so the session goes on (its answer
         * is in the journal whatever happens here) */
        struct tern_err why = {0};
        if (err)
            why = *err;
        data = cJSON_CreateObject();
        json_add_int64(data, "turn", a->turn);
        if (a->key)
            json_add_string(data, "request", a->key);
        cJSON *e = cJSON_AddObjectToObject(data, "error");
        json_add_string(e, "reason",
                        why.code == TERN_EUNREACHABLE || why.code == TERN_ENOTFOUND
                            ? "SandboxUnavailable"
                            : "StoreFailed");
        json_add_string(e, "message", note);
        cJSON_AddItemToObject(data, "artifacts", cJSON_CreateArray());
        rc = record_set(j, a->turn, a->key, data, err);
    }
out:
    free(note);
    cJSON_Delete(data);
    cJSON_Delete(list);
    cJSON_Delete(cm);
    if (token) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
    fetched_done(&f);
    return rc;
}

int artifacts_expire(struct kclient *kc, const cJSON *cm, int64_t now, struct tern_err *err)
{
    const cJSON *lb = json_get(json_get(cm, "metadata"), "labels");
    const cJSON *role = json_get(lb, CHILDREN_LABEL_ROLE);
    const cJSON *at = json_get(json_get(json_get(cm, "metadata"), "annotations"),
                               ARTSTORE_ANN_EXPIRES);
    if (!cJSON_IsString(role) || strcmp(role->valuestring, ARTSTORE_ROLE) != 0 ||
        !cJSON_IsString(at))
        return 0;
    struct tm tm = {0};
    if (!strptime(at->valuestring, "%Y-%m-%dT%H:%M:%S", &tm) || (int64_t)timegm(&tm) > now)
        return 0;
    struct kclient_delete_opts o = {.propagation = "Background"};
    struct kclient_err ke = {0};
    int rc = kclient_delete(kc, &configmaps_gvr, mstr(cm, "namespace"), mstr(cm, "name"), &o,
                            NULL, &ke);
    if (rc == TERN_ENOTFOUND)
        return 1;
    if (rc)
        return err_set(err, rc, "delete expired configmap %s: %s", mstr(cm, "name"), ke.e.msg);
    return 1;
}
