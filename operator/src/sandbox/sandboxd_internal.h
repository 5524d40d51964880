/* sandboxd_internal.h - what tern-sandboxd's HTTP layer (sandboxd.h) shares
 * between its files; not part of its interface, included only by them.
 *
 *   sandboxd.c           the server shell: start/stop, the listening socket,
 *                        the writable roots, bearer-token auth, and the
 *                        libmicrohttpd request callback (headers, body
 *                        chunks, end) that bounds and routes each request
 *   sandboxd_reply.c     answering: JSON and error bodies, errno -> API
 *                        error, query parameters, idempotent finishing
 *   sandboxd_exec.c      POST /v1/exec, GET /v1/executions
 *   sandboxd_files.c     GET/PUT/DELETE /v1/files/<path>, GET /v1/list/<path>
 *   sandboxd_snapshot.c  POST /v1/snapshot, the answer to POST /v1/restore
 *
 * The handlers take the server, the connection, the request's state
 * (struct req: made on the first call, freed by the shell when the request
 * completes), the path after the route's prefix where it has one, and the
 * method and URL for the access log; they queue exactly one response and
 * return MHD_queue_response's result. Symbols named sandboxd__* are shared
 * between these files only (libuv's uv__ convention); everything else a
 * file does not share is static.
 */
#ifndef TERN_SANDBOXD_INTERNAL_H
#define TERN_SANDBOXD_INTERNAL_H

#include "sandboxd.h"

#include "base/buf.h"
#include "sandbox/idem.h"
#include "sandbox/restore.h"
#include "sandbox/sblive.h"
#include "sandbox/wspath.h"

#include <cJSON.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

struct sandboxd {
    struct sandboxd_config cfg;
    unsigned char token_sha[32];
    int wsfd;
    char *ws_abs;
    struct wspath_rules rules;
    struct idem_store idem;
    struct MHD_Daemon *mhd;
    int listen_fd;
    unsigned port;
    size_t interrupted;
    atomic_uint active_execs;
    atomic_flag restoring;
    bool landlock;
    char **landlock_dirs;
    struct sblive *live;        /* output of running execs (sblive.h) */
    atomic_bool stopping;       /* ends live streams */
    atomic_int in_flight;       /* requests being served */
    atomic_llong last_done_ms;  /* when the last one ended */
};

enum kind { K_NONE, K_EXEC, K_PUT, K_RESTORE, K_DISCARD };

struct req {
    enum kind kind;
    int64_t t0;
    /* a response decided before the body was read, sent at the end */
    unsigned err_status;
    int err_rc;
    const char *err_code;
    char *err_msg;
    uint64_t body_bytes;
    /* exec */
    struct buf body;
    bool exec_slot;
    /* put */
    char norm[WSPATH_BUF];
    int tmpfd;
    char tmpname[80];
    bool append;
    bool replaying;
    mode_t mode;
    bool mode_set;
    /* idempotency */
    char *key;
    char req_hash[65];
    bool ticketed;
    struct idem_ticket ticket;
    cJSON *replay;
    int replay_http;
    /* restore */
    struct restore *rs;
};

/* ---- sandboxd_reply.c -------------------------------------------------- */

/* Sends j (borrowed) as the JSON body with status. */
enum MHD_Result sandboxd__send_json(struct sandboxd *d, struct MHD_Connection *c, unsigned status,
                                    const cJSON *j, struct req *r, const char *method,
                                    const char *url);
/* Sends {"error": {"code", "message"}} with status. */
enum MHD_Result sandboxd__send_error(struct sandboxd *d, struct MHD_Connection *c, unsigned status,
                                     const char *code, const char *msg, struct req *r,
                                     const char *method, const char *url);
/* Sends the error for a negative code (status and API code mapped from it;
 * msg, or the code's text when msg is NULL or empty). */
enum MHD_Result sandboxd__send_rc(struct sandboxd *d, struct MHD_Connection *c, int rc,
                                  const char *msg, struct req *r, const char *method,
                                  const char *url);
/* The message for a path that failed validation or resolution (static). */
const char *sandboxd__path_msg(int rc);
/* Remembers an error to send once the body has been read (the first one
 * wins). */
void sandboxd__defer_rc(struct req *r, int rc, const char *msg);

/* Query parameter k, when present, into *v: an integer in [min, max], or
 * true/1/false/0/"". Return 0 or TERN_EINVALID with the reason. */
int sandboxd__query_i64(struct MHD_Connection *c, const char *k, int64_t min, int64_t max,
                        int64_t *v, struct tern_err *err);
int sandboxd__query_bool(struct MHD_Connection *c, const char *k, bool *v, struct tern_err *err);

/* Writes all n bytes (retrying EINTR). Returns 0 or -errno. */
int sandboxd__write_all(int fd, const void *p, size_t n);

/* Starts the idempotent part of a request (op plus the request's material
 * hashed). Returns 0 (go ahead, ticket held if a key was given), 1
 * (r->replay set: answer with sandboxd__send_replay), or a negative code. */
int sandboxd__idem_start(struct sandboxd *d, struct req *r, const char *op, const char *material,
                         size_t mlen, struct tern_err *err);
/* Records body (if ticketed) and sends it with "replayed": false; takes
 * body over. */
enum MHD_Result sandboxd__finish_json(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                      const char *op, unsigned status, cJSON *body,
                                      const char *method, const char *url);
/* Sends the recorded answer in r->replay with "replayed": true. */
enum MHD_Result sandboxd__send_replay(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                      const char *method, const char *url);
/* An error after the ticket was taken: recorded too, so a retry sees the
 * same outcome instead of running again; then sent like sandboxd__send_rc. */
enum MHD_Result sandboxd__finish_error(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                       const char *op, int rc, const char *msg, const char *method,
                                       const char *url);

/* ---- the handlers ------------------------------------------------------ */

/* sandboxd_exec.c: POST /v1/exec once its body (r->body) is read, holding
 * an exec slot; GET /v1/executions. */
enum MHD_Result sandboxd__do_exec(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                  const char *method, const char *url);
enum MHD_Result sandboxd__do_executions(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                        const char *method, const char *url);
/* GET /v1/executions/live?key=K[&follow=true][&stdoutOffset=N][&stderrOffset=N]:
 * the output of a running (or just ended) exec as NDJSON (sblive.h). */
enum MHD_Result sandboxd__do_live(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                  const char *method, const char *url);

/* sandboxd_files.c: GET and DELETE /v1/files/<rel>; PUT in two parts:
 * sandboxd__put_begin on the first call (validates, takes the ticket, opens
 * the staging file r->tmpfd that the shell writes the body to; failures are
 * deferred) and sandboxd__do_put_end after the body; GET /v1/list/<rel>. */
enum MHD_Result sandboxd__do_get_file(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                      const char *rel, const char *method, const char *url);
void sandboxd__put_begin(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                         const char *rel, const char *url);
enum MHD_Result sandboxd__do_put_end(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                     const char *method, const char *url);
enum MHD_Result sandboxd__do_delete(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                    const char *rel, const char *method, const char *url);
enum MHD_Result sandboxd__do_list(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                  const char *rel, const char *method, const char *url);

/* sandboxd_snapshot.c: POST /v1/snapshot (a streamed tar of the
 * workspace); the answer to POST /v1/restore once the shell has fed the
 * whole body to r->rs: commits it, releases it and the restoring flag. */
enum MHD_Result sandboxd__do_snapshot(struct sandboxd *d, struct MHD_Connection *c, struct req *r,
                                      const char *method, const char *url);
enum MHD_Result sandboxd__do_restore_end(struct sandboxd *d, struct MHD_Connection *c,
                                         struct req *r, const char *method, const char *url);

/* ---- small helpers (static inline: each file gets its own) ------------- */

static inline int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Query parameter k, or NULL. */
static inline const char *query(struct MHD_Connection *c, const char *k)
{
    return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
}

/* True when commands run as their own uid (run_uid set, and we are root). */
static inline bool uid_set(const struct sandboxd *d)
{
    return d->cfg.run_uid != (uid_t)-1 && geteuid() == 0;
}

#endif
