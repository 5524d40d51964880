/* sapi_internal.h - what the aggregated API's files share; not part of its
 * interface (sapi.h).
 *
 *   sapi_parse.c     the request head (pure)
 *   sapi_server.c    TLS, the front-proxy identity, connections, replies
 *   sapi_handlers.c  the routes: discovery, sessions, events, log, output,
 *                    files, content, artifacts
 */
#ifndef TERN_SAPI_INTERNAL_H
#define TERN_SAPI_INTERNAL_H

#include "sapi.h"

#include "base/buf.h"

#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

struct sapi {
    struct sapi_config cfg;
    char *listen, *cert_file, *key_file;
    pthread_mutex_t mu; /* guards ctx, the files' times, trust */
    SSL_CTX *ctx;
    struct timespec cert_mtime, key_mtime;
    time_t checked;     /* when the files were last looked at */
    char *ca_pem;       /* trust */
    char **allowed;     /* NULL-terminated */
    char *user_header, *group_header, *extra_prefix; /* lower-cased */
    int fd, port;
    pthread_t accept_thread;
    atomic_bool stop;
    atomic_int conns;
    pthread_cond_t cv;
    int live[TERN_SAPI_MAX_CONNS];
};

/* One connection: one request, its reply or stream. */
struct sapi_conn {
    struct sapi *s;
    int fd;
    SSL *ssl;
    struct sapi_req req;
    struct sapi_user user;
    pthread_mutex_t wmu; /* writers of one stream (events and command output) */
    bool streaming;
    atomic_bool broken;  /* a write failed: the client is gone */
};

/* ---- sapi_server.c: replies ----------------------------------------------- */

/* A complete reply: status, content type, body (n bytes). */
void sapi__reply(struct sapi_conn *c, int status, const char *content_type, const char *body,
                 size_t n);
void sapi__reply_json(struct sapi_conn *c, int status, const cJSON *j);
/* A Kubernetes Status error: code, reason ("NotFound", "Forbidden", ...), message. */
void sapi__status(struct sapi_conn *c, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The error for a code from the journal, sandboxd or the backend. */
void sapi__status_rc(struct sapi_conn *c, int rc, const char *what, const char *msg);

/* A streamed reply (chunked): the head, then chunks (thread-safe), then the
 * end. Writes return false once the client is gone. */
bool sapi__stream_begin(struct sapi_conn *c, const char *content_type);
bool sapi__stream_write(struct sapi_conn *c, const char *p, size_t n);
bool sapi__stream_line(struct sapi_conn *c, const char *line); /* line + "\n" */
void sapi__stream_end(struct sapi_conn *c);
/* True when the client closed its side (poll POLLRDHUP, no wait). */
bool sapi__client_gone(struct sapi_conn *c);

/* Authorizes the request (SubjectAccessReview through the backend):
 * returns true, or answers 403 (or 500) itself and returns false. */
bool sapi__allowed(struct sapi_conn *c, const char *verb, const char *name, const char *sub);

/* ---- sapi_handlers.c ------------------------------------------------------ */

/* Serves c->req for c->user. */
void sapi__handle(struct sapi_conn *c);

static inline long sapi__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
