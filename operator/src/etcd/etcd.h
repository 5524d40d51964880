/* etcd.h - etcd v3 client over the JSON gateway (grpc-gateway) with libcurl.
 *
 * Speaks etcd 3.4's /v3/... HTTP+JSON API: kv (range, put, deleterange, txn,
 * compaction), lease (grant, keepalive, revoke, timetolive), watch (one long
 * streamed POST) and auth (username/password -> token header). Keys and
 * values are sent and received as base64; int64 fields arrive as strings and
 * are parsed exactly; fields at their default value are omitted by the
 * gateway and read here as 0/false/empty (a failed txn has no "succeeded").
 *
 * Threads: a struct etcd is safe to share between threads. Every call borrows
 * an HTTP connection from the client's internal pool (created on demand, at
 * most TERN_ETCD_POOL_IDLE idle connections are kept), so unary calls and any
 * number of concurrent watches may run from different threads on one client.
 * A watch holds its connection for its whole life. Long calls (watches,
 * keepalive loops) are stopped from another thread by raising the
 * atomic_bool the caller passed in (see etcd_watch).
 *
 * Endpoints and failover: the client knows a list of endpoints
 * ("http://127.0.0.1:2379", "https://etcd-0:2379"); it sticks to the one that
 * last answered and moves to the next when one is unreachable, times out or
 * says it is unavailable. A request that may not have reached etcd is
 * re-sent to the next endpoint only if it is a read (range, read-only txn,
 * lease time-to-live) or was never sent; a write whose reply was lost fails
 * with TERN_EUNKNOWN (the caller resolves it by reading back).
 *
 * Ownership: request structs and everything they point to are borrowed for
 * the duration of the call. Response structs are filled by the call, own all
 * their memory (keys, values, nested responses) and are released with the
 * matching *_done function, which accepts a zeroed or half-filled struct.
 * As everywhere in Tern, a response struct is filled only when the call
 * returns 0; on error it is left zeroed (call *_done anyway, it is harmless).
 *
 * Errors (negative codes from base/err.h; err gets the context):
 *   TERN_EUNREACHABLE  no endpoint answered (connect/resolve failed everywhere)
 *   TERN_ETIMEOUT      a read timed out on every endpoint
 *   TERN_EUNKNOWN      a write was sent but its outcome is unknown (reply lost,
 *                      timeout after sending, connection cut)
 *   TERN_ECOMPACTED    the requested revision has been compacted (range at an
 *                      old revision, watch from an old revision, compaction of
 *                      an already compacted revision)
 *   TERN_ETXNFAILED    only from etcd_txn_must (compares failed); etcd_txn
 *                      itself returns 0 with resp.succeeded = false
 *   TERN_ETOOLARGE     the request exceeds TERN_ETCD_MAX_REQUEST (checked before
 *                      sending) or etcd said "request is too large", or a
 *                      response exceeded its bound
 *   TERN_EAUTH         authentication failed / permission denied
 *   TERN_ENOTFOUND     lease not found or expired (lease calls)
 *   TERN_EINVALID      etcd rejected the request (bad argument, future
 *                      revision, duplicate key in txn ...) or bad input here
 *   TERN_EPARSE        etcd's reply could not be decoded
 *   TERN_EHTTP         any other HTTP error status
 *   -ECANCELED         the cancel flag was raised
 */
#ifndef TERN_ETCD_H
#define TERN_ETCD_H

#include "base/err.h"
#include "http/httpc.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct etcd;

struct etcd_config {
    const char *const *endpoints; /* base URLs, no trailing path; required */
    size_t nendpoints;            /* >= 1, <= TERN_ETCD_MAX_ENDPOINTS */
    const struct httpc_tls *tls;  /* client cert / CA for https endpoints, or NULL;
                                   * its files are read per new connection */
    const char *username;         /* etcd auth; NULL = auth disabled */
    const char *password;         /* or: */
    const char *password_file;    /* read (trailing whitespace trimmed) at every
                                   * authentication, so a rotated password is used */
    long timeout_ms;         /* each unary request; 0 = 5000 */
    long connect_timeout_ms; /* 0 = 2000 */
};

/* Creates a client (copies cfg and everything it points to). Does not contact
 * etcd: authentication happens on first use. Returns 0 and *ret, or
 * TERN_EINVALID for a bad config. Free with etcd_free (accepts NULL); no call
 * on the client may be running when it is freed. */
int etcd_new(const struct etcd_config *cfg, struct etcd **ret, struct tern_err *err);
void etcd_free(struct etcd *c);

/* Reads a one-line secret (a password) from path into *ret (newly
 * allocated, NUL-terminated, trailing newline and spaces removed). Returns 0,
 * or TERN_EINVALID when the file cannot be read, is empty or longer than
 * TERN_ETCD_MAX_PASSWORD bytes. */
int etcd_read_secret_file(const char *path, char **ret, struct tern_err *err);

/* A client as the TERN_ETCD_* settings describe it (flags or environment
 * of every Tern binary; borrowed strings, NULL = not set):
 *   endpoints      TERN_ETCD_ENDPOINTS, comma-separated (required)
 *   ca_file        TERN_ETCD_CA_FILE      the CA that signed etcd's certificate
 *   cert_file      TERN_ETCD_CERT_FILE    client certificate (with key_file)
 *   key_file       TERN_ETCD_KEY_FILE
 *   username       TERN_ETCD_USERNAME     etcd user (with password_file)
 *   password_file  TERN_ETCD_PASSWORD_FILE
 * The files are read when used (connections, logins), so rotated ones take
 * effect without a restart. Returns 0 and *ret, or TERN_EINVALID naming the
 * setting. */
struct etcd_settings {
    const char *endpoints;
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
    const char *username;
    const char *password_file;
};
int etcd_from_settings(const struct etcd_settings *s, struct etcd **ret, struct tern_err *err);

/* Parses a comma-separated endpoint list ("http://a:2379,http://b:2379", as
 * in TERN_ETCD_ENDPOINTS) into a newly allocated NULL-terminated array of
 * strings; free with etcd_endpoints_free. Returns 0, or TERN_EINVALID for an
 * empty list, a non-http(s) URL or more than TERN_ETCD_MAX_ENDPOINTS. */
int etcd_endpoints_parse(const char *list, char ***ret, size_t *ret_n, struct tern_err *err);
void etcd_endpoints_free(char **eps);

/* ---- data ---------------------------------------------------------------- */

struct etcd_header {
    int64_t revision; /* the store's revision when the request was served */
    uint64_t cluster_id;
    uint64_t member_id;
    int64_t raft_term;
};

/* One key-value pair. key and value are NUL-terminated copies (the
 * terminator is not counted in the length), owned by the enclosing response.
 * With keys_only, value is "" and value_len 0. */
struct etcd_kv {
    char *key;
    size_t key_len;
    char *value;
    size_t value_len;
    int64_t create_revision;
    int64_t mod_revision;
    int64_t version;
    int64_t lease;
};

/* The key range selected by a request. Keys are text without NUL bytes.
 *   range_end == NULL and !prefix and !from_key: the single key `key`
 *   prefix:   every key starting with `key` (range_end is computed)
 *   from_key: every key >= key (range_end "\0")
 *   otherwise [key, range_end) */
struct etcd_keys {
    const char *key;
    const char *range_end;
    bool prefix;
    bool from_key;
};

/* ---- range ---------------------------------------------------------------- */

enum etcd_sort_order { ETCD_SORT_NONE = 0, ETCD_SORT_ASCEND, ETCD_SORT_DESCEND };
enum etcd_sort_target {
    ETCD_SORT_KEY = 0,
    ETCD_SORT_VERSION,
    ETCD_SORT_CREATE,
    ETCD_SORT_MOD,
    ETCD_SORT_VALUE
};

struct etcd_range_req {
    struct etcd_keys keys;
    int64_t limit;                   /* 0 = no limit (bounded by TERN_ETCD_MAX_RESPONSE) */
    int64_t revision;                /* 0 = latest; an older revision may be compacted */
    bool keys_only;                  /* omit values */
    bool count_only;                 /* only count, no kvs */
    bool serializable;               /* served by the local member without quorum */
    enum etcd_sort_order sort_order; /* default: by key ascending */
    enum etcd_sort_target sort_target;
    int64_t min_mod_revision; /* 0 = no filter */
    int64_t max_mod_revision;
};

struct etcd_range_resp {
    struct etcd_header header;
    struct etcd_kv *kvs; /* nkvs entries, in key order (or sort order) */
    size_t nkvs;
    bool more;     /* more keys exist beyond limit */
    int64_t count; /* number of keys in the range (ignores limit) */
};

/* Reads a range. Returns 0 and fills *ret; errors as above (TERN_ECOMPACTED
 * for a compacted revision, TERN_EINVALID for a future revision). Retried on
 * other endpoints on transport failure. */
int etcd_range(struct etcd *c, const struct etcd_range_req *req, struct etcd_range_resp *ret,
               struct tern_err *err);
void etcd_range_resp_done(struct etcd_range_resp *r);

/* Convenience: the single key `key`. Returns 0 with *ret_kv (a newly
 * allocated kv; free with etcd_kv_free) and *ret_rev (header revision, may be
 * NULL), or TERN_ENOTFOUND (then *ret_rev is still set if non-NULL). */
int etcd_get(struct etcd *c, const char *key, struct etcd_kv **ret_kv, int64_t *ret_rev,
             struct tern_err *err);
void etcd_kv_free(struct etcd_kv *kv);

/* The store's current revision (a count-only range on an empty range).
 * With etcd auth on, that range is outside most roles: a client with a
 * prefix role asks etcd_revision_in with keys it may read. */
int etcd_revision(struct etcd *c, int64_t *ret, struct tern_err *err);
/* The store's current revision, read with a one-key, keys-only range of
 * keys (the revision is the store's whatever the range holds). */
int etcd_revision_in(struct etcd *c, const struct etcd_keys *keys, int64_t *ret,
                     struct tern_err *err);

/* ---- put / delete ------------------------------------------------------- */

struct etcd_put_req {
    const char *key;
    const void *value;
    size_t value_len;
    int64_t lease;     /* 0 = none */
    bool prev_kv;      /* return the previous kv */
    bool ignore_value; /* keep the current value (update lease only) */
    bool ignore_lease; /* keep the current lease */
};

struct etcd_put_resp {
    struct etcd_header header;
    struct etcd_kv *prev_kv; /* NULL unless requested and the key existed */
};

/* Writes one key. Returns 0 and *ret, TERN_ETOOLARGE, TERN_EUNKNOWN, ... */
int etcd_put(struct etcd *c, const struct etcd_put_req *req, struct etcd_put_resp *ret,
             struct tern_err *err);
void etcd_put_resp_done(struct etcd_put_resp *r);

struct etcd_delete_req {
    struct etcd_keys keys;
    bool prev_kv; /* return the deleted kvs */
};

struct etcd_delete_resp {
    struct etcd_header header;
    int64_t deleted; /* number of keys deleted */
    struct etcd_kv *prev_kvs;
    size_t nprev_kvs;
};

int etcd_delete(struct etcd *c, const struct etcd_delete_req *req, struct etcd_delete_resp *ret,
                struct tern_err *err);
void etcd_delete_resp_done(struct etcd_delete_resp *r);

/* ---- txn --------------------------------------------------------------- */

enum etcd_cmp_target {
    ETCD_CMP_VERSION = 0, /* number of writes since creation; 0 = absent */
    ETCD_CMP_CREATE,      /* create_revision; 0 = absent */
    ETCD_CMP_MOD,         /* mod_revision; 0 = absent */
    ETCD_CMP_VALUE,       /* value bytes */
    ETCD_CMP_LEASE,       /* lease id */
};

enum etcd_cmp_result { ETCD_CMP_EQUAL = 0, ETCD_CMP_GREATER, ETCD_CMP_LESS, ETCD_CMP_NOT_EQUAL };

struct etcd_compare {
    struct etcd_keys keys; /* usually a single key */
    enum etcd_cmp_target target;
    enum etcd_cmp_result result;
    int64_t number;    /* for VERSION/CREATE/MOD/LEASE */
    const void *value; /* for VALUE */
    size_t value_len;
};

enum etcd_op_type { ETCD_OP_RANGE = 0, ETCD_OP_PUT, ETCD_OP_DELETE };

/* One operation of a txn branch: set type and the matching member. */
struct etcd_op {
    enum etcd_op_type type;
    struct etcd_range_req range;
    struct etcd_put_req put;
    struct etcd_delete_req del;
};

struct etcd_txn_req {
    const struct etcd_compare *cmps;
    size_t ncmps;
    const struct etcd_op *success;
    size_t nsuccess;
    const struct etcd_op *failure;
    size_t nfailure;
};

/* The response of one op, in branch order; the member matching type is set. */
struct etcd_op_resp {
    enum etcd_op_type type;
    struct etcd_range_resp range;
    struct etcd_put_resp put;
    struct etcd_delete_resp del;
};

struct etcd_txn_resp {
    struct etcd_header header;      /* header.revision: the store revision after the txn */
    bool succeeded;                 /* all compares held: the success branch ran */
    struct etcd_op_resp *responses; /* responses of the branch that ran */
    size_t nresponses;
};

/* Runs a transaction. Returns 0 whether or not the compares held (look at
 * ret->succeeded), TERN_EUNKNOWN if a txn containing a put/delete was sent
 * but not answered (a txn of ranges only is retried like a read), or another
 * error. The header revision of a succeeded write txn is the mod_revision of
 * every key it wrote. */
int etcd_txn(struct etcd *c, const struct etcd_txn_req *req, struct etcd_txn_resp *ret,
             struct tern_err *err);
/* The same, but a txn whose compares failed returns TERN_ETXNFAILED (and
 * *ret is still filled, so the failure branch's responses can be read; it
 * must be released with etcd_txn_resp_done in every case). */
int etcd_txn_must(struct etcd *c, const struct etcd_txn_req *req, struct etcd_txn_resp *ret,
                  struct tern_err *err);
void etcd_txn_resp_done(struct etcd_txn_resp *r);

/* ---- compaction -------------------------------------------------------- */

/* Compacts the key-value history up to revision (exclusive of later ones).
 * physical: wait until the compaction is applied on disk. Returns 0,
 * TERN_ECOMPACTED (already compacted at or beyond revision), TERN_EINVALID
 * (a future revision), ... */
int etcd_compact(struct etcd *c, int64_t revision, bool physical, struct tern_err *err);

/* ---- leases ------------------------------------------------------------ */

/* Grants a lease of ttl_s seconds (id 0 = etcd picks one). Returns 0 with
 * *ret_id and *ret_ttl (may be NULL) set. */
int etcd_lease_grant(struct etcd *c, int64_t ttl_s, int64_t id, int64_t *ret_id, int64_t *ret_ttl,
                     struct tern_err *err);
/* Revokes a lease, deleting every key attached to it. Returns 0 or
 * TERN_ENOTFOUND (already expired or revoked), ... */
int etcd_lease_revoke(struct etcd *c, int64_t id, struct tern_err *err);
/* Refreshes a lease once. Returns 0 with the renewed *ret_ttl (may be NULL),
 * or TERN_ENOTFOUND when the lease has expired (then it is gone for good). */
int etcd_lease_keepalive(struct etcd *c, int64_t id, int64_t *ret_ttl, struct tern_err *err);
/* Remaining TTL of a lease: 0 and *ret_ttl (seconds left) and *ret_granted,
 * or TERN_ENOTFOUND when it no longer exists. Either pointer may be NULL. */
int etcd_lease_ttl(struct etcd *c, int64_t id, int64_t *ret_ttl, int64_t *ret_granted,
                   struct tern_err *err);

/* A background thread that refreshes a lease every ttl/3 seconds until
 * stopped. It retries transient errors; when the lease is found expired it
 * stops and sets *lost (readable with etcd_keeper_lost) so the owner can
 * give up whatever the lease guarded. Returns 0 and *ret, or an error from
 * pthread_create. The keeper borrows c, which must outlive it. */
struct etcd_keeper;
int etcd_keeper_start(struct etcd *c, int64_t lease_id, int64_t ttl_s, struct etcd_keeper **ret,
                      struct tern_err *err);
/* The same, but an etcd that cannot be reached is retried for give_up_ms
 * (at least one TTL) before the lease counts as lost: etcd renews every
 * lease when it comes back, so an outage shorter than that loses nothing.
 * An answer that the lease is gone still ends it at once. */
int etcd_keeper_start_budget(struct etcd *c, int64_t lease_id, int64_t ttl_s, long give_up_ms,
                             struct etcd_keeper **ret, struct tern_err *err);
/* True once the lease was found expired (or could not be refreshed for a
 * whole TTL, or give_up_ms). Thread-safe. */
bool etcd_keeper_lost(const struct etcd_keeper *k);
/* Stops and joins the thread and frees the keeper (accepts NULL). It does
 * not revoke the lease. Returns within about one request timeout. */
void etcd_keeper_stop(struct etcd_keeper *k);

/* ---- watch ------------------------------------------------------------- */

enum etcd_event_type { ETCD_EVENT_PUT = 0, ETCD_EVENT_DELETE };

struct etcd_event {
    enum etcd_event_type type;
    struct etcd_kv kv; /* for DELETE: key and mod_revision (the delete's) only */
    bool has_prev_kv;
    struct etcd_kv prev_kv; /* with prev_kv requested and the key existed */
};

/* One watch response: a batch of events with the same header revision (all
 * events of one txn arrive in one batch), or a progress notification. */
struct etcd_watch_batch {
    struct etcd_header header;
    const struct etcd_event *events;
    size_t nevents;
    bool progress; /* no events: everything up to header.revision has been seen */
};

struct etcd_watch_req {
    struct etcd_keys keys;
    int64_t start_revision; /* first revision to deliver; 0 = from now */
    bool prev_kv;           /* include the previous kv of each event */
    bool progress_notify;   /* ask etcd for periodic progress notifications */
    bool no_put;            /* filter out puts */
    bool no_delete;         /* filter out deletes */
    /* reconnection: after the stream breaks, reconnect (on the next endpoint
     * when one fails) from the revision after the last one delivered, with
     * exponential backoff (100 ms doubling up to 5 s). Give up with the
     * last error after this long without a working stream; 0 = 30 s,
     * negative = never give up (until cancelled). */
    long give_up_ms;
    long idle_timeout_ms; /* a stream silent this long is reconnected; 0 = off */
};

/* Called for every batch, from the watching thread. The batch and
 * everything in it are valid only during the call. Return 0 to continue, or
 * a non-zero value to stop the watch: etcd_watch then returns that value. */
typedef int (*etcd_watch_fn)(void *ctx, const struct etcd_watch_batch *b);

/* Watches a key range, blocking the calling thread until:
 *   - fn returns non-zero: returns that value;
 *   - *cancel (may be NULL) is raised from another thread: returns -ECANCELED
 *     (promptly: the stream and the backoff sleeps check the flag);
 *   - the start revision (or the revision a reconnect resumes from) has been
 *     compacted: returns TERN_ECOMPACTED and sets *ret_compact_revision (may
 *     be NULL) to the oldest revision still available; the caller must relist
 *     (range, then watch from the list's header revision + 1);
 *   - the stream cannot be re-established within give_up_ms: returns
 *     TERN_EUNREACHABLE / TERN_ETIMEOUT / TERN_EAUTH ...
 * Every event is delivered at most once per call, in revision order, even
 * across reconnects. */
int etcd_watch(struct etcd *c, const struct etcd_watch_req *req, etcd_watch_fn fn, void *ctx,
               atomic_bool *cancel, int64_t *ret_compact_revision, struct tern_err *err);

/* ---- auth administration (auth.c) ----------------------------------------
 *
 * etcd's own users, roles and permissions (etcd's "auth"): a role holds
 * permissions (READ, WRITE or READWRITE on a key or a key range), a user
 * holds roles and a password; the role named "root" may do everything,
 * including these calls. Once enabled, every request needs a user (the
 * client authenticates with username/password and sends the token). These
 * calls need a client of a root user, or auth still disabled (the
 * bootstrap). Names are 1..TERN_ETCD_MAX_USER printable bytes.
 *
 * Errors besides the client's: -EEXIST (user or role already exists),
 * TERN_ENOTFOUND (no such user, role, permission or grant), -ENOTSUP
 * (authentication is not enabled: from etcd_authenticate_check),
 * TERN_EINVALID (enabling auth without a root user with the root role),
 * TERN_EAUTH (the client may not do this). */

enum etcd_perm { ETCD_PERM_READ = 0, ETCD_PERM_WRITE, ETCD_PERM_READWRITE };

struct etcd_perm_entry {
    enum etcd_perm perm;
    char *key;       /* the key or the range's start */
    char *range_end; /* "" = the single key; "\0" stored as "" too */
};

int etcd_auth_enable(struct etcd *c, struct tern_err *err);
int etcd_auth_disable(struct etcd *c, struct tern_err *err);
int etcd_user_add(struct etcd *c, const char *name, const char *password, struct tern_err *err);
int etcd_user_password(struct etcd *c, const char *name, const char *password,
                       struct tern_err *err);
int etcd_user_delete(struct etcd *c, const char *name, struct tern_err *err);
int etcd_user_grant(struct etcd *c, const char *user, const char *role, struct tern_err *err);
/* The roles of a user (NULL-terminated array, free with etcd_strings_free)
 * and their count (ret_n may be NULL); TERN_ENOTFOUND for no such user. */
int etcd_user_roles(struct etcd *c, const char *name, char ***ret, size_t *ret_n,
                    struct tern_err *err);
int etcd_user_list(struct etcd *c, char ***ret, size_t *ret_n, struct tern_err *err);
int etcd_role_add(struct etcd *c, const char *name, struct tern_err *err);
int etcd_role_delete(struct etcd *c, const char *name, struct tern_err *err);
/* Grants perm on keys (a single key, a prefix or [key, range_end)). */
int etcd_role_grant(struct etcd *c, const char *role, enum etcd_perm perm,
                    const struct etcd_keys *keys, struct tern_err *err);
/* A role's permissions (*ret_n entries, free with etcd_perms_free). */
int etcd_role_perms(struct etcd *c, const char *role, struct etcd_perm_entry **ret,
                    size_t *ret_n, struct tern_err *err);
void etcd_perms_free(struct etcd_perm_entry *v, size_t n);
int etcd_role_list(struct etcd *c, char ***ret, size_t *ret_n, struct tern_err *err);
void etcd_strings_free(char **v);
/* Authenticates now with the configured username and password: 0, TERN_EAUTH
 * (wrong user or password), -ENOTSUP (auth is not enabled) or a transport
 * error. */
int etcd_authenticate_check(struct etcd *c, struct tern_err *err);

/* ---- checking replies (tests, fuzzing) --------------------------------- */

enum etcd_reply_kind {
    ETCD_REPLY_RANGE = 0,
    ETCD_REPLY_PUT,
    ETCD_REPLY_DELETE,
    ETCD_REPLY_TXN,
    ETCD_REPLY_WATCH_LINE,
    ETCD_REPLY_ERROR, /* an error body: always 0, maps it */
};

/* Parses and decodes one gateway reply body of the given kind with the
 * client's own decoders, then discards it. Returns 0 if it is well-formed,
 * TERN_EPARSE (or the mapped code of an error body / error line) otherwise.
 * Pure; exists so the decoders can be fuzzed and tested from outside. */
int etcd_check_reply(enum etcd_reply_kind kind, const char *body, size_t len, struct tern_err *err);

#endif
