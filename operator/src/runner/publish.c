/* publish.c - publish_branch from the runner pod. See publish.h. */
#include "runner/publish.h"

#include "base/base64.h"
#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"
#include "runner/trusted.h"
#include "sandbox/sbexec.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void publish_outcome_done(struct publish_outcome *o)
{
    if (!o)
        return;
    free(o->text);
    free(o->commit);
    memset(o, 0, sizeof *o);
}

char *publish_bundle_dir(const char *const *writable, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *g = writable[i];
        size_t lit = strcspn(g, "*?[\\");
        /* back to the last whole component */
        while (lit > 0 && g[lit] && g[lit - 1] != '/')
            lit--;
        while (lit > 0 && g[lit - 1] == '/')
            lit--;
        if (lit > 0)
            return xstrndup(g, lit);
    }
    return xstrdup("working");
}

char *publish_shell_quote(const char *s)
{
    struct buf b;
    buf_init(&b, 4 * strlen(s) + 3);
    buf_putc(&b, '\'');
    for (; *s; s++) {
        if (*s == '\'')
            buf_puts(&b, "'\\''");
        else
            buf_putc(&b, *s);
    }
    buf_putc(&b, '\'');
    return buf_steal(&b);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t left_ms(int64_t deadline)
{
    int64_t l = deadline - now_ms();
    return l < 1000 ? 1000 : l;
}

static void hex16(const char *in, char out[17])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_Digest(in, strlen(in), md, &n, EVP_sha256(), NULL);
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 8; i++) {
        out[2 * i] = hx[md[i] >> 4];
        out[2 * i + 1] = hx[md[i] & 15];
    }
    out[16] = 0;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type == FTW_DP)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

/* The last lines of a command's stderr (and stdout), bounded. */
static char *git_said(const struct sbexec_result *r)
{
    const char *e = buf_str(&r->err);
    const char *o = buf_str(&r->out);
    const char *t = *e ? e : o;
    size_t n = strlen(t);
    const char *from = n > 2048 ? t + n - 2048 : t;
    char *s = xstrdup(from);
    size_t l = strlen(s);
    while (l > 0 && (s[l - 1] == '\n' || s[l - 1] == '\r'))
        s[--l] = 0;
    return s;
}

struct git {
    const char *dir;                  /* the temporary directory (HOME, cwd) */
    const struct runner_remote *auth; /* or NULL */
    int64_t deadline;
};

/* Runs git argv (argv[0] is "git") in g->dir. Returns 0 with *r (release
 * with sbexec_result_done), or an error when git could not be started. */
static int run_git(const struct git *g, char *const *argv, struct sbexec_result *r,
                   struct tern_err *err)
{
    static const char *const base[][2] = {
        {"protocol.allow", "never"},       {"protocol.file.allow", "always"},
        {"protocol.http.allow", "always"}, {"protocol.https.allow", "always"},
        {"core.hooksPath", "/dev/null"},   {"transfer.fsckObjects", "true"},
        {"init.defaultBranch", "main"},    {"http.followRedirects", "false"},
        {"credential.helper", ""},
    };
    const size_t nbase = sizeof base / sizeof *base;
    char *env[2 * (sizeof base / sizeof *base) + 16];
    size_t ne = 0;
    env[ne++] = xstrdup("GIT_CONFIG_NOSYSTEM=1");
    env[ne++] = xstrdup("GIT_CONFIG_GLOBAL=/dev/null");
    env[ne++] = xstrdup("GIT_TERMINAL_PROMPT=0");
    env[ne++] = xstrdup("GIT_PROTOCOL_FROM_USER=0");
    size_t count = nbase + (g->auth ? 1 : 0);
    env[ne++] = xasprintf("GIT_CONFIG_COUNT=%zu", count);
    for (size_t i = 0; i < nbase; i++) {
        env[ne++] = xasprintf("GIT_CONFIG_KEY_%zu=%s", i, base[i][0]);
        env[ne++] = xasprintf("GIT_CONFIG_VALUE_%zu=%s", i, base[i][1]);
    }
    if (g->auth) {
        char *value;
        if (g->auth->bearer) {
            value = xasprintf("Authorization: Bearer %s", g->auth->token);
        } else {
            char *up = xasprintf("%s:%s", g->auth->username, g->auth->token);
            char *b64 = base64_encode(up, strlen(up));
            value = xasprintf("Authorization: Basic %s", b64);
            memset(up, 0, strlen(up));
            free(up);
            memset(b64, 0, strlen(b64));
            free(b64);
        }
        env[ne++] = xasprintf("GIT_CONFIG_KEY_%zu=http.extraHeader", nbase);
        env[ne++] = xasprintf("GIT_CONFIG_VALUE_%zu=%s", nbase, value);
        memset(value, 0, strlen(value));
        free(value);
    }
    env[ne] = NULL;
    int dfd = open(g->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc;
    if (dfd < 0) {
        rc = err_set(err, -errno, "%s: %s", g->dir, strerror(errno));
    } else {
        struct sbexec_opts o = {
            .argv = argv,
            .env_add = env,
            .cwd_fd = dfd,
            .home = g->dir,
            .timeout_ms = left_ms(g->deadline),
            .max_output = TERN_PUBLISH_MAX_GIT_OUTPUT,
            .uid = (uid_t)-1,
            .gid = (gid_t)-1,
        };
        rc = sbexec_run(&o, r, err);
        close(dfd);
    }
    for (size_t i = 0; i < ne; i++) {
        memset(env[i], 0, strlen(env[i]));
        free(env[i]);
    }
    return rc;
}

static bool git_ok(const struct sbexec_result *r)
{
    return r->status == SBEXEC_COMPLETED && r->exited && r->exit_code == 0;
}

static void fail(struct publish_outcome *o, const char *step, const struct sbexec_result *r)
{
    char *said = git_said(r);
    o->status = "error";
    if (r->status == SBEXEC_TIMEOUT)
        o->text = xasprintf("error: %s timed out; nothing was published. %s", step, said);
    else
        o->text = xasprintf("error: %s failed (exit %d); nothing was published.\n%s", step,
                            r->exited ? r->exit_code : 128 + r->term_signal, said);
    free(said);
}

/* Step 1: the bundle, written in the sandbox. Returns 0 (o->status set on
 * a failure to tell the model) or a retryable error. */
static int make_bundle(struct sbx *sbx, const struct policy_args *a, const char *bundle,
                       int64_t deadline, struct publish_outcome *o, struct tern_err *err)
{
    char *repo = publish_shell_quote(a->path);
    char *file = publish_shell_quote(bundle);
    char *ref = xasprintf("refs/heads/%s", a->branch);
    char *qref = publish_shell_quote(ref);
    struct policy_args ex = {
        .tool = POLICY_EXEC, .timeout_ms = -1, .offset = -1, .limit = -1, .depth = -1};
    char *bdir = xstrdup(bundle);
    *strrchr(bdir, '/') = 0;
    char *qdir = publish_shell_quote(bdir);
    ex.cmd = xasprintf("mkdir -p %s && git -c safe.directory='*' -C %s bundle create "
                       "\"$PWD\"/%s %s",
                       qdir, repo, file, qref);
    free(qdir);
    free(bdir);
    struct sbx_result r = {0};
    int64_t t = left_ms(deadline);
    int rc = sbx_call(sbx, NULL, &ex, t > 120000 ? 120000 : t, &r, err);
    free(ex.cmd);
    free(repo);
    free(file);
    free(ref);
    free(qref);
    if (rc)
        return err_wrap(err, rc, "sandboxd (the bundle of the branch)");
    if (r.http_status == 409 || r.http_status == 429 || r.http_status >= 500) {
        rc = err_set(err, TERN_EHTTP, "sandboxd: HTTP %ld (the bundle of the branch)",
                     r.http_status);
        sbx_result_done(&r);
        return rc;
    }
    cJSON *j = NULL;
    int64_t code = -1;
    const char *st = NULL, *se = "";
    if (r.http_status == 200 && json_parse(r.body, r.body_len, &j, NULL) == 0) {
        json_item_int64(json_get(j, "exitCode"), &code);
        const cJSON *s = json_get(j, "status"), *e = json_get(j, "stderr");
        st = cJSON_IsString(s) ? s->valuestring : NULL;
        se = cJSON_IsString(e) ? e->valuestring : "";
    }
    if (r.http_status != 200 || !st || strcmp(st, "completed") != 0 || code != 0) {
        o->status = "error";
        size_t n = strlen(se);
        o->text = xasprintf("error: git bundle create in the sandbox failed (%s %lld); nothing "
                            "was published%s\n%s",
                            r.http_status != 200 ? "HTTP"
                            : st                 ? st
                                                 : "exit",
                            r.http_status != 200 ? (long long)r.http_status : (long long)code,
                            code == 127 ? " (the sandbox image needs git)" : "",
                            n > 2048 ? se + n - 2048 : se);
    }
    cJSON_Delete(j);
    sbx_result_done(&r);
    return 0;
}

/* "<sha>\trefs/heads/x" lines: the sha of ref, or NULL. */
static char *remote_sha(const char *out, const char *ref)
{
    for (const char *l = out; l && *l;) {
        const char *end = strchr(l, '\n');
        size_t n = end ? (size_t)(end - l) : strlen(l);
        const char *tab = memchr(l, '\t', n);
        if (tab && (size_t)(l + n - tab - 1) == strlen(ref) &&
            strncmp(tab + 1, ref, strlen(ref)) == 0)
            return xstrndup(l, (size_t)(tab - l));
        l = end ? end + 1 : NULL;
    }
    return NULL;
}

int publish_run(const struct runner_config *cfg, struct sbx *sbx, const char *call_id,
                const struct policy_args *a, int64_t timeout_ms, struct publish_outcome *ret,
                struct tern_err *err)
{
    const struct runner_spec *sp = &cfg->spec;
    const struct runner_remote *remote = NULL;
    for (size_t i = 0; i < sp->nremotes && !remote; i++)
        if (strcmp(sp->remotes[i].name, a->remote) == 0)
            remote = &sp->remotes[i];
    struct publish_outcome o = {0};
    if (!remote) {
        *ret = (struct publish_outcome){"error", xstrdup("error: no such remote"), NULL, false};
        return 0;
    }
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : POLICY_PUBLISH_TIMEOUT_MS);
    char *key = xasprintf("%s/%s", cfg->uid, call_id);
    char h[17];
    hex16(key, h);
    free(key);
    char *dir = publish_bundle_dir((const char *const *)sp->writable, sp->nwritable);
    char *bundle = xasprintf("%s/.tern-publish-%s.bundle", dir, h);
    free(dir);
    const char *tmproot = getenv("TMPDIR");
    char *tmp = xasprintf("%s/tern-publish-XXXXXX", tmproot && *tmproot ? tmproot : "/tmp");
    bool made_tmp = false;
    char *local = NULL, *ref = xasprintf("refs/heads/%s", a->remote_branch);
    int rc = 0;
    struct sbexec_result r = {0};

    /* 1. the bundle, in the sandbox */
    if ((rc = make_bundle(sbx, a, bundle, deadline, &o, err)) || o.status)
        goto out;
    /* 2. fetched into a directory of our own */
    if (!mkdtemp(tmp)) {
        rc = err_set(err, -errno, "mkdtemp %s: %s", tmp, strerror(errno));
        goto out;
    }
    made_tmp = true;
    local = xasprintf("%s/branch.bundle", tmp);
    int fd = open(local, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = err_set(err, -errno, "%s: %s", local, strerror(errno));
        goto out;
    }
    uint64_t size = 0;
    long status = 0;
    struct tern_err fe = {0};
    rc = sbx_fetch_file(sbx, bundle, fd, TERN_PUBLISH_MAX_BUNDLE, left_ms(deadline), &size, &status,
                        &fe);
    if (close(fd) != 0 && rc == 0)
        rc = err_set(&fe, -EIO, "%s: %s", local, strerror(errno));
    long dstatus = 0;
    struct tern_err de = {0};
    sbx_delete_file(sbx, bundle, &dstatus, &de); /* best effort: a temporary file */
    if (rc == TERN_ETOOLARGE || rc == TERN_ENOTFOUND || rc == -EIO ||
        (rc == TERN_EHTTP && status < 500 && status != 409 && status != 429)) {
        o.status = "error";
        o.text = xasprintf("error: the bundle could not be taken from the sandbox: %s", fe.msg);
        rc = 0;
        goto out;
    }
    if (rc) {
        if (err)
            *err = fe;
        goto out;
    }
    trusted_crash_point(cfg, "publish-after-bundle");

    /* 3. the commit, from the bundle's objects only */
    struct git g = {.dir = tmp, .deadline = deadline};
    char *init[] = {"git", "init", "-q", "--bare", "repo", NULL};
    if ((rc = run_git(&g, init, &r, err)))
        goto out;
    if (!git_ok(&r)) {
        fail(&o, "git init", &r);
        goto out;
    }
    sbexec_result_done(&r);
    char *spec_ref = xasprintf("+refs/heads/%s:refs/tern/publish", a->branch);
    char *fetch[] = {"git", "-C",     "repo", "fetch", "-q", "--no-tags", "--no-write-fetch-head",
                     local, spec_ref, NULL};
    rc = run_git(&g, fetch, &r, err);
    free(spec_ref);
    if (rc)
        goto out;
    if (!git_ok(&r)) {
        fail(&o, "reading the branch from its bundle (git fetch)", &r);
        goto out;
    }
    sbexec_result_done(&r);
    char *parse[] = {
        "git", "-C", "repo", "rev-parse", "--verify", "-q", "refs/tern/publish^{commit}", NULL};
    if ((rc = run_git(&g, parse, &r, err)))
        goto out;
    if (!git_ok(&r)) {
        fail(&o, "git rev-parse", &r);
        goto out;
    }
    char *commit = xstrdup(buf_str(&r.out));
    commit[strcspn(commit, "\r\n")] = 0;
    sbexec_result_done(&r);
    o.commit = commit;

    /* 4. the remote already there? (a retry after a crash stops here) */
    g.auth = remote;
    char *url = xstrdup(remote->url);
    char *lsr[] = {"git", "-C", "repo", "ls-remote", url, ref, NULL};
    rc = run_git(&g, lsr, &r, err);
    if (rc) {
        free(url);
        goto out;
    }
    if (!git_ok(&r)) {
        free(url);
        fail(&o, "git ls-remote", &r);
        goto out;
    }
    char *there = remote_sha(buf_str(&r.out), ref);
    sbexec_result_done(&r);
    if (there && strcmp(there, commit) == 0) {
        free(there);
        o.status = "completed";
        o.pushed = false;
        o.text = xasprintf("%s already has %s at %s (%s): nothing to push; the branch %s of %s "
                           "is published.",
                           remote->name, ref, commit, remote->url, a->branch, a->path);
        free(url);
        goto out;
    }
    free(there);
    /* 5. the push (never forced: a remote branch elsewhere is refused) */
    char *refspec = xasprintf("%s:%s", commit, ref);
    char *push[] = {"git", "-C", "repo", "push", "--porcelain", url, refspec, NULL};
    rc = run_git(&g, push, &r, err);
    free(refspec);
    free(url);
    if (rc)
        goto out;
    if (!git_ok(&r)) {
        fail(&o, "git push", &r);
        goto out;
    }
    sbexec_result_done(&r);
    trusted_crash_point(cfg, "publish-after-push");
    o.status = "completed";
    o.pushed = true;
    o.text = xasprintf("pushed %s (branch %s of %s) to %s (%s) as %s.", commit, a->branch, a->path,
                       remote->name, remote->url, ref);
out:
    sbexec_result_done(&r);
    if (made_tmp)
        nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(tmp);
    free(local);
    free(bundle);
    free(ref);
    if (rc) {
        publish_outcome_done(&o);
        return rc;
    }
    *ret = o;
    return 0;
}
