/* copy.c - snapshot -> restore streaming between two sandboxd (libcurl,
 * one thread per side, joined by a pipe). */
#include "runner/copy.h"

#include "base/mem.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct side {
    CURL *h;
    struct curl_slist *hdrs;
    CURLcode cc;
    long status;
};

struct copy {
    const struct copy_config *cfg;
    atomic_bool *cancel;
    int fds[2];               /* pipe: snapshot writes [1], restore reads [0] */
    struct side snap, rest;
    atomic_bool snap_failed;  /* the snapshot did not end well: abort the upload */
    int64_t bytes;
    char body[512];           /* start of the restore answer */
    size_t body_len;
};

static bool cancelled(const struct copy *c)
{
    return c->cancel && atomic_load(c->cancel);
}

/* Snapshot bytes -> pipe. Refuses a non-200 body (it is an error object,
 * not tar). */
static size_t on_snapshot(char *p, size_t size, size_t n, void *ctx)
{
    struct copy *c = ctx;
    size_t len = size * n, off = 0;
    long status = 0;
    curl_easy_getinfo(c->snap.h, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200 || cancelled(c))
        return 0;
    while (off < len) {
        ssize_t w = write(c->fds[1], p + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0; /* the restore side has gone: stop */
        off += (size_t)w;
    }
    c->bytes += (int64_t)len;
    return len;
}

/* Pipe -> restore upload. EOF ends the upload only if the snapshot ended
 * well; otherwise the upload is aborted. */
static size_t on_restore_read(char *p, size_t size, size_t n, void *ctx)
{
    struct copy *c = ctx;
    for (;;) {
        if (cancelled(c))
            return CURL_READFUNC_ABORT;
        ssize_t r = read(c->fds[0], p, size * n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return CURL_READFUNC_ABORT;
        if (r == 0 && atomic_load(&c->snap_failed))
            return CURL_READFUNC_ABORT;
        return (size_t)r;
    }
}

static size_t on_restore_body(char *p, size_t size, size_t n, void *ctx)
{
    struct copy *c = ctx;
    size_t len = size * n;
    size_t room = sizeof c->body - 1 - c->body_len;
    size_t k = len < room ? len : room;
    memcpy(c->body + c->body_len, p, k);
    c->body_len += k;
    c->body[c->body_len] = 0;
    return len;
}

static void side_init(struct copy *c, struct side *s, const char *addr, const char *token,
                      const char *path)
{
    char url[512];
    snprintf(url, sizeof url, "http://%s%s", addr, path);
    s->h = curl_easy_init();
    if (!s->h)
        abort();
    char *auth = xasprintf("Authorization: Bearer %s", token ? token : "");
    s->hdrs = curl_slist_append(NULL, auth);
    free(auth);
    long connect = c->cfg->connect_timeout_ms > 0 ? c->cfg->connect_timeout_ms : 5000;
    long idle = c->cfg->idle_timeout_ms > 0 ? c->cfg->idle_timeout_ms : 60000;
    curl_easy_setopt(s->h, CURLOPT_URL, url);
    curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(s->h, CURLOPT_CONNECTTIMEOUT_MS, connect);
    curl_easy_setopt(s->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(s->h, CURLOPT_LOW_SPEED_TIME, (idle + 999) / 1000);
    curl_easy_setopt(s->h, CURLOPT_POST, 1L);
}

static void *snapshot_thread(void *arg)
{
    struct copy *c = arg;
    /* a write to the pipe after the restore side closed it must fail with
     * EPIPE, not kill the process: SIGPIPE from write() goes to this thread */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    c->snap.cc = curl_easy_perform(c->snap.h);
    curl_easy_getinfo(c->snap.h, CURLINFO_RESPONSE_CODE, &c->snap.status);
    if (c->snap.cc != CURLE_OK || c->snap.status != 200)
        atomic_store(&c->snap_failed, true);
    close(c->fds[1]); /* EOF for the reader */
    c->fds[1] = -1;
    return NULL;
}

static int transport_error(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST: return TERN_EUNREACHABLE;
    case CURLE_OPERATION_TIMEDOUT: return TERN_ETIMEOUT;
    case CURLE_ABORTED_BY_CALLBACK: return -ECANCELED;
    default: return -EIO;
    }
}

int copy_workspace(const struct copy_config *cfg, atomic_bool *cancel, struct copy_result *ret,
                   struct tern_err *err)
{
    struct copy c = {.cfg = cfg, .cancel = cancel, .fds = {-1, -1}};
    int rc = 0;
    memset(ret, 0, sizeof *ret);
    if (pipe2(c.fds, O_CLOEXEC) != 0)
        return err_set(err, -errno, "pipe: %s", strerror(errno));

    side_init(&c, &c.snap, cfg->from_addr, cfg->from_token, "/v1/snapshot");
    curl_easy_setopt(c.snap.h, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c.snap.h, CURLOPT_POSTFIELDSIZE, 0L);
    curl_easy_setopt(c.snap.h, CURLOPT_HTTPHEADER, c.snap.hdrs);
    curl_easy_setopt(c.snap.h, CURLOPT_WRITEFUNCTION, on_snapshot);
    curl_easy_setopt(c.snap.h, CURLOPT_WRITEDATA, &c);

    side_init(&c, &c.rest, cfg->to_addr, cfg->to_token, "/v1/restore");
    c.rest.hdrs = curl_slist_append(c.rest.hdrs, "Content-Type: application/x-tar");
    c.rest.hdrs = curl_slist_append(c.rest.hdrs, "Transfer-Encoding: chunked");
    c.rest.hdrs = curl_slist_append(c.rest.hdrs, "Expect:");
    curl_easy_setopt(c.rest.h, CURLOPT_HTTPHEADER, c.rest.hdrs);
    curl_easy_setopt(c.rest.h, CURLOPT_READFUNCTION, on_restore_read);
    curl_easy_setopt(c.rest.h, CURLOPT_READDATA, &c);
    curl_easy_setopt(c.rest.h, CURLOPT_WRITEFUNCTION, on_restore_body);
    curl_easy_setopt(c.rest.h, CURLOPT_WRITEDATA, &c);

    pthread_t th;
    if (pthread_create(&th, NULL, snapshot_thread, &c) != 0)
        abort();
    c.rest.cc = curl_easy_perform(c.rest.h);
    curl_easy_getinfo(c.rest.h, CURLINFO_RESPONSE_CODE, &c.rest.status);
    /* unblock a snapshot writer stuck on a full pipe nobody reads any more */
    close(c.fds[0]);
    c.fds[0] = -1;
    pthread_join(th, NULL);

    ret->bytes = c.bytes;
    ret->snapshot_status = c.snap.status;
    ret->restore_status = c.rest.status;
    memcpy(ret->restore_body, c.body, sizeof ret->restore_body);

    if (cancelled(&c))
        rc = err_set(err, -ECANCELED, "copy cancelled");
    else if (c.snap.status != 0 && c.snap.status != 200)
        rc = err_set(err, TERN_EHTTP, "snapshot from %s: HTTP %ld", cfg->from_addr,
                     c.snap.status);
    else if (c.snap.cc != CURLE_OK)
        rc = err_set(err, transport_error(c.snap.cc), "snapshot from %s: %s", cfg->from_addr,
                     curl_easy_strerror(c.snap.cc));
    else if (c.rest.cc != CURLE_OK)
        rc = err_set(err, transport_error(c.rest.cc), "restore to %s: %s", cfg->to_addr,
                     curl_easy_strerror(c.rest.cc));
    else if (c.rest.status != 200)
        rc = err_set(err, TERN_EHTTP, "restore to %s: HTTP %ld: %s", cfg->to_addr,
                     c.rest.status, c.body);

    curl_slist_free_all(c.snap.hdrs);
    curl_slist_free_all(c.rest.hdrs);
    curl_easy_cleanup(c.snap.h);
    curl_easy_cleanup(c.rest.h);
    return rc;
}
