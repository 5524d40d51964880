/* etcd_internal.h - what the etcd client's own files share; not part of the
 * client's interface (that is etcd.h), and included only from etcd/ (and
 * tests/unit/test_etcd_decode.c).
 *
 * The client is split along its seams:
 *   etcd.c   struct etcd's lifecycle, the connection pool and the call path
 *            (auth, endpoint failover, re-send rules)
 *   codec.c  the gateway's JSON, pure: request encoding, reply and watch
 *            line decoding, error mapping, etcd_check_reply
 *   kv.c     range, get, revision, put, delete, txn, compaction
 *   lease.c  leases and the keeper thread
 *   watch.c  etcd_watch: the stream state machine and the reconnect loop
 * Symbols named etcd__* are shared between these files only (libuv's uv__
 * convention); everything else a file does not share is static.
 */
#ifndef TERN_ETCD_INTERNAL_H
#define TERN_ETCD_INTERNAL_H

#include "etcd.h"

#include <cJSON.h>
#include <pthread.h>
#include <time.h>

struct etcd {
    char **eps;
    size_t neps;
    atomic_size_t cur; /* index of the endpoint that last answered */
    struct httpc_tls tls;
    bool has_tls;
    char *user;
    char *pass;
    char *pass_file; /* read at each authentication (rotation), or NULL */
    long timeout_ms;
    long connect_timeout_ms;

    pthread_mutex_t mu; /* guards pool and token */
    struct httpc *pool[TERN_ETCD_POOL_IDLE];
    size_t npool;
    char *token; /* auth token, or NULL */
};

/* ---- etcd.c: the call path --------------------------------------------- */

/* A read may be re-sent to another endpoint after a transport failure; a
 * write whose reply was lost fails with TERN_EUNKNOWN instead. */
enum call_kind { CALL_READ, CALL_WRITE };

/* Sleeps ms, waking early (returning true) when *cancel (may be NULL) is
 * raised. */
bool etcd__sleep_cancellable(long ms, atomic_bool *cancel);

/* A connection from the pool, or a new one. */
struct httpc *etcd__conn_get(struct etcd *c);
/* Returns a connection to the pool (accepts NULL); broken = drop it (its
 * state is unknown). */
void etcd__conn_put(struct etcd *c, struct httpc *h, bool broken);

/* Gets an auth token from endpoint ep over h and stores it in c->token.
 * Returns 0, TERN_EAUTH, or the transport's errors. */
int etcd__authenticate(struct etcd *c, struct httpc *h, const char *ep, atomic_bool *cancel,
                       struct tern_err *err);
/* The "Authorization: <token>" header line (newly allocated), or NULL
 * without a token. */
char *etcd__auth_header(struct etcd *c);
/* True when auth is configured and there is no token yet. */
bool etcd__need_token(struct etcd *c);

/* Sends req (borrowed) as JSON to path, failing over between endpoints as
 * kind allows. Returns 0 and the parsed 200 reply in *ret (the caller
 * deletes it), or an error (see etcd.h). */
int etcd__call_obj(struct etcd *c, const char *path, cJSON *req, enum call_kind kind,
                   atomic_bool *cancel, cJSON **ret, struct tern_err *err);

/* ---- codec.c: request encoding (pure) ---------------------------------- */

/* Adds an int64 member as the gateway wants it: a decimal string. */
void etcd__add_i64s(cJSON *o, const char *name, int64_t v);
/* The range end of a prefix into out (strlen(key) bytes): the prefix with
 * its last byte incremented after dropping trailing 0xff bytes. Returns its
 * length; 0 means "to the end of the keyspace". */
size_t etcd__prefix_end(const char *key, char *out);
/* Adds key and range_end (base64) for k. Returns 0 or TERN_ETOOLARGE. */
int etcd__add_keys(cJSON *o, const struct etcd_keys *k, struct tern_err *err);
/* Request bodies as new trees in *ret. Return 0, TERN_EINVALID or
 * TERN_ETOOLARGE. */
int etcd__enc_range(const struct etcd_range_req *q, cJSON **ret, struct tern_err *err);
int etcd__enc_put(const struct etcd_put_req *q, cJSON **ret, struct tern_err *err);
int etcd__enc_delete(const struct etcd_delete_req *q, cJSON **ret, struct tern_err *err);
int etcd__enc_txn(const struct etcd_txn_req *q, cJSON **ret, struct tern_err *err);

/* ---- codec.c: reply decoding (pure) ------------------------------------ */

/* An optional int64 member (a string or a number) into *ret; absent leaves
 * *ret alone. Returns 0 or TERN_EPARSE. */
int etcd__dec_i64(const cJSON *o, const char *path, const char *key, int64_t *ret,
                  struct tern_err *err);
/* Replies into *ret (filled only on success; release with the matching
 * *_done). Return 0 or TERN_EPARSE. */
int etcd__dec_range(const cJSON *o, struct etcd_range_resp *ret, struct tern_err *err);
int etcd__dec_put(const cJSON *o, struct etcd_put_resp *ret, struct tern_err *err);
int etcd__dec_delete(const cJSON *o, struct etcd_delete_resp *ret, struct tern_err *err);
int etcd__dec_txn(const cJSON *o, struct etcd_txn_resp *ret, struct tern_err *err);

/* Maps a gateway error body {"error","code","message"} (may be NULL) and
 * the HTTP status to a code (returned, and set in err). *unavailable: the
 * endpoint could not serve the request and another one may. */
int etcd__map_error(long status, const cJSON *body, bool *unavailable, struct tern_err *err);

/* What one watch line said. */
/* What one watch line said. */
struct watch_msg {
    struct etcd_header header;
    bool created;
    bool canceled;
    int64_t compact_revision;
    const char *cancel_reason; /* borrowed from the tree */
    struct etcd_event *events; /* owned */
    size_t nevents;
    bool is_error;  /* {"error": {...}} line */
    int error_code; /* mapped code for is_error */
};

/* Frees m's events and zeroes it. */
void etcd__watch_msg_done(struct watch_msg *m);
/* Decodes one parsed watch stream line into *m. The tree j must outlive m
 * (cancel_reason is borrowed). An error line is not a failure: it returns 0
 * with m->is_error and m->error_code. Returns 0 or TERN_EPARSE. */
int etcd__dec_watch_line(const cJSON *j, struct watch_msg *m, struct tern_err *err);

/* ---- small helpers (static inline: each file gets its own) ------------- */

static inline long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline bool cancelled(atomic_bool *cancel)
{
    return cancel && atomic_load(cancel);
}

#endif
