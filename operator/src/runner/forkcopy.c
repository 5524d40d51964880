/* forkcopy.c - snapshot -> restore through a pipe. See forkcopy.h. */
#include "forkcopy.h"

#include "base/buf.h"
#include "base/mem.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct side {
    CURL *h;
    struct curl_slist *hdrs;
    int fd;            /* the pipe end this side uses */
    CURLcode rc;
    long status;
    struct buf body;   /* error body of the restore answer, bounded */
    uint64_t bytes;
};

/* download: snapshot bytes into the pipe */
static size_t to_pipe(char *p, size_t size, size_t n, void *ud)
{
    struct side *s = ud;
    size_t len = size * n, off = 0;
    long status = 0;
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) { /* keep an error body, do not forward it */
        buf_append(&s->body, p, len);
        return len;
    }
    while (off < len) {
        ssize_t w = write(s->fd, p + off, len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return 0; /* reader gone: abort */
        }
        off += (size_t)w;
    }
    s->bytes += len;
    return len;
}

/* upload: restore body from the pipe */
static size_t from_pipe(char *p, size_t size, size_t n, void *ud)
{
    struct side *s = ud;
    for (;;) {
        ssize_t r = read(s->fd, p, size * n);
        if (r >= 0)
            return (size_t)r; /* 0 = end of the snapshot */
        if (errno != EINTR)
            return CURL_READFUNC_ABORT;
    }
}

static size_t keep_body(char *p, size_t size, size_t n, void *ud)
{
    struct side *s = ud;
    buf_append(&s->body, p, size * n); /* bounded: excess is dropped */
    return size * n;
}

static void *run_side(void *arg)
{
    struct side *s = arg;
    s->rc = curl_easy_perform(s->h);
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->status);
    close(s->fd); /* EOF for the reader, EPIPE for the writer */
    s->fd = -1;
    return NULL;
}

static void setup(struct side *s, const char *addr, const char *path, const char *token,
                  long timeout_ms)
{
    char *url = xasprintf("http://%s%s", addr, path);
    char *auth = xasprintf("Authorization: Bearer %s", token);
    s->h = curl_easy_init();
    if (!s->h)
        abort();
    curl_easy_setopt(s->h, CURLOPT_URL, url);
    curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(s->h, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(s->h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(s->h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    s->hdrs = curl_slist_append(s->hdrs, auth);
    s->hdrs = curl_slist_append(s->hdrs, "Expect:");
    buf_init(&s->body, 64u << 10);
    free(url);
    free(auth);
}

static int side_error(const struct side *s, const char *what, struct tern_err *err)
{
    if (s->rc == CURLE_COULDNT_CONNECT || s->rc == CURLE_COULDNT_RESOLVE_HOST)
        return err_set(err, TERN_EUNREACHABLE, "%s: %s", what, curl_easy_strerror(s->rc));
    if (s->rc == CURLE_OPERATION_TIMEDOUT)
        return err_set(err, TERN_ETIMEOUT, "%s: %s", what, curl_easy_strerror(s->rc));
    if (s->status != 200)
        return err_set(err, TERN_EHTTP, "%s: HTTP %ld: %.300s", what, s->status,
                       buf_str(&s->body));
    return err_set(err, -EIO, "%s: %s", what, curl_easy_strerror(s->rc));
}

int forkcopy_run(const struct forkcopy_opts *o, uint64_t *ret_bytes, struct tern_err *err)
{
    long timeout = o->timeout_ms > 0 ? o->timeout_ms : 3600000L;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC))
        return err_set(err, -errno, "pipe: %s", strerror(errno));
    curl_global_init(CURL_GLOBAL_ALL);
    signal(SIGPIPE, SIG_IGN);
    struct side snap = {.fd = fds[1]}, rest = {.fd = fds[0]};
    setup(&snap, o->from_addr, "/v1/snapshot", o->from_token, timeout);
    curl_easy_setopt(snap.h, CURLOPT_POST, 1L);
    curl_easy_setopt(snap.h, CURLOPT_POSTFIELDSIZE, 0L);
    curl_easy_setopt(snap.h, CURLOPT_HTTPHEADER, snap.hdrs);
    curl_easy_setopt(snap.h, CURLOPT_WRITEFUNCTION, to_pipe);
    curl_easy_setopt(snap.h, CURLOPT_WRITEDATA, &snap);

    setup(&rest, o->to_addr, "/v1/restore", o->to_token, timeout);
    rest.hdrs = curl_slist_append(rest.hdrs, "Content-Type: application/x-tar");
    rest.hdrs = curl_slist_append(rest.hdrs, "Transfer-Encoding: chunked");
    curl_easy_setopt(rest.h, CURLOPT_POST, 1L);
    curl_easy_setopt(rest.h, CURLOPT_HTTPHEADER, rest.hdrs);
    curl_easy_setopt(rest.h, CURLOPT_READFUNCTION, from_pipe);
    curl_easy_setopt(rest.h, CURLOPT_READDATA, &rest);
    curl_easy_setopt(rest.h, CURLOPT_WRITEFUNCTION, keep_body);
    curl_easy_setopt(rest.h, CURLOPT_WRITEDATA, &rest);

    pthread_t a, b;
    int r = 0;
    if (pthread_create(&a, NULL, run_side, &snap)) {
        close(fds[0]);
        close(fds[1]);
        r = err_set(err, -EAGAIN, "thread");
        goto out;
    }
    if (pthread_create(&b, NULL, run_side, &rest)) {
        close(fds[0]); /* the writer gets EPIPE and stops */
        pthread_join(a, NULL);
        r = err_set(err, -EAGAIN, "thread");
        goto out;
    }
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (snap.rc != CURLE_OK || snap.status != 200)
        r = side_error(&snap, "snapshot of the parent sandbox", err);
    else if (rest.rc != CURLE_OK || rest.status != 200)
        r = side_error(&rest, "restore into the child sandbox", err);
    else if (ret_bytes)
        *ret_bytes = snap.bytes;
out:
    curl_easy_cleanup(snap.h);
    curl_easy_cleanup(rest.h);
    curl_slist_free_all(snap.hdrs);
    curl_slist_free_all(rest.hdrs);
    buf_done(&snap.body);
    buf_done(&rest.body);
    return r;
}
