/* kclient.h - dynamic Kubernetes API client over JSON.
 *
 * One struct kclient per thread (it owns one httpc, hence one connection
 * pool); the struct kubeconfig it uses is shared and must outlive it. Objects
 * go in and out as cJSON trees: inputs are borrowed, results (*ret) are owned
 * by the caller (cJSON_Delete). Any group/version/resource is addressed with
 * a struct kgvr; ns NULL or "" means cluster-scoped (or all namespaces for
 * list and watch).
 *
 * Errors are a struct kclient_err (may be NULL): the return code plus, when
 * the server answered, the HTTP status and the Status object's reason,
 * message and details. Codes: TERN_ENOTFOUND (404), -EEXIST (409
 * AlreadyExists), TERN_ECONFLICT (409 Conflict, also failed preconditions),
 * TERN_ECOMPACTED (410 Expired/Gone), TERN_EAUTH (401/403), TERN_EINVALID
 * (400/422), -EOPNOTSUPP (405/415), TERN_EHTTP (other statuses), TERN_EPARSE
 * (a body that is not JSON), and the transport errors of httpc.h.
 *
 * Retries: a request answered 429, or 5xx with Retry-After, is retried for any
 * verb; 5xx without Retry-After and transport failures before the request was
 * sent are retried for GET only (a repeated POST could act twice). The wait
 * is Retry-After (capped at TERN_KUBE_MAX_RETRY_AFTER s and at
 * max_backoff_ms) or an exponential backoff from backoff_ms capped at
 * max_backoff_ms. A 401 with an exec-plugin credential re-runs the plugin
 * once and repeats the request.
 */
#ifndef TERN_KCLIENT_H
#define TERN_KCLIENT_H

#include "base/err.h"
#include "kube/kubeconfig.h"

#include <cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

struct kclient;

struct kgvr {
    const char *group;    /* "" for the core group */
    const char *version;
    const char *resource; /* plural, lowercase */
};

struct kclient_err {
    struct tern_err e;    /* code and a one-line message */
    long http_status;     /* 0 when no response was received */
    char reason[64];      /* Status.reason ("Conflict", "NotFound", ...) or "" */
    char message[256];    /* Status.message or "" */
    long retry_after_s;   /* Retry-After of the last answer, or 0 */
};

struct kclient_opts {
    int max_retries;      /* default 5; 0 = default; -1 = none */
    long backoff_ms;      /* default 100 */
    long max_backoff_ms;  /* default 10000 */
    long timeout_ms;      /* one request (not watches); default 30000 */
    const char *user_agent; /* default: kclient_set_default_user_agent's, else "tern" */
};

/* The User-Agent of every client made without opts->user_agent, e.g.
 * "tern-operator/0.1.0": kube-apiserver records a client's writes in
 * managedFields under the manager named by the part before the '/', so each
 * program names itself. Call once in main() before any client is made (not
 * synchronised); ua is borrowed for the program's life. */
void kclient_set_default_user_agent(const char *ua);

/* A client over cfg (borrowed). opts may be NULL. Free with kclient_free. */
struct kclient *kclient_new(struct kubeconfig *cfg, const struct kclient_opts *opts);
void kclient_free(struct kclient *c);
struct kubeconfig *kclient_config(const struct kclient *c);
/* A flag that, once raised, aborts requests, retries and watches of c with
 * -ECANCELED. Borrowed; may be NULL. */
void kclient_set_cancel(struct kclient *c, atomic_bool *cancel);

/* The URL path of a collection or object (owned by the caller):
 * /api/v1[/namespaces/NS]/RES[/NAME[/SUB]] or /apis/G/V/... */
char *kclient_path(const struct kgvr *gvr, const char *ns, const char *name, const char *sub);

/* One request with retries and auth. path includes the query. body may be
 * NULL. On 2xx returns 0 and *ret (NULL for an empty body; ret may be NULL). */
int kclient_request(struct kclient *c, const char *method, const char *path,
                    const char *content_type, const char *body, size_t body_len, size_t max_body,
                    cJSON **ret, struct kclient_err *err);

int kclient_get(struct kclient *c, const struct kgvr *gvr, const char *ns, const char *name,
                cJSON **ret, struct kclient_err *err);

struct kclient_list_opts {
    const char *label_selector;
    const char *field_selector;
    long limit;                   /* page size; 0 = server default (one page) */
    const char *continue_token;   /* for kclient_list only */
    const char *resource_version; /* "" / NULL = most recent; "0" = any (cache) */
    long timeout_seconds;         /* watches: server-side stream timeout */
    bool allow_bookmarks;         /* watches */
};

/* One page: the List object as returned. */
int kclient_list(struct kclient *c, const struct kgvr *gvr, const char *ns,
                 const struct kclient_list_opts *o, cJSON **ret, struct kclient_err *err);

/* Every page (following continue tokens); on_item receives each item, owned
 * (it must free or keep it); a non-zero return stops the list and is
 * returned. On success *ret_rv is the list's resourceVersion (owned). A 410
 * on a continue token is returned as TERN_ECOMPACTED (list again). */
int kclient_list_each(struct kclient *c, const struct kgvr *gvr, const char *ns,
                      const struct kclient_list_opts *o,
                      int (*on_item)(void *ctx, cJSON *item), void *ctx, char **ret_rv,
                      struct kclient_err *err);

/* All pages merged into one List object (items array + metadata). */
int kclient_list_all(struct kclient *c, const struct kgvr *gvr, const char *ns,
                     const struct kclient_list_opts *o, cJSON **ret, struct kclient_err *err);

int kclient_create(struct kclient *c, const struct kgvr *gvr, const char *ns, const cJSON *obj,
                   cJSON **ret, struct kclient_err *err);
/* PUT of obj (metadata.name and resourceVersion taken from it). */
int kclient_update(struct kclient *c, const struct kgvr *gvr, const char *ns, const cJSON *obj,
                   cJSON **ret, struct kclient_err *err);
/* PUT to the status subresource. */
int kclient_update_status(struct kclient *c, const struct kgvr *gvr, const char *ns,
                          const cJSON *obj, cJSON **ret, struct kclient_err *err);

enum kclient_patch_type {
    KCLIENT_PATCH_MERGE,     /* application/merge-patch+json */
    KCLIENT_PATCH_JSON,      /* application/json-patch+json */
    KCLIENT_PATCH_STRATEGIC, /* application/strategic-merge-patch+json (built-ins only) */
    KCLIENT_PATCH_APPLY,     /* application/apply-patch+yaml (JSON is YAML) */
};

struct kclient_patch_opts {
    const char *field_manager; /* required for APPLY */
    bool force;                /* APPLY only */
    const char *subresource;   /* e.g. "status", or NULL */
};

int kclient_patch(struct kclient *c, const struct kgvr *gvr, const char *ns, const char *name,
                  enum kclient_patch_type type, const char *patch, size_t patch_len,
                  const struct kclient_patch_opts *o, cJSON **ret, struct kclient_err *err);

struct kclient_delete_opts {
    const char *precondition_uid;
    const char *precondition_rv;
    const char *propagation;      /* "Foreground", "Background", "Orphan" or NULL */
    bool grace_period_set;        /* send grace_period_seconds (0 = delete now) */
    long grace_period_seconds;
};

/* Deletes; *ret (ret may be NULL) is the object (still present with a
 * deletionTimestamp when finalizers remain) or the Status. */
int kclient_delete(struct kclient *c, const struct kgvr *gvr, const char *ns, const char *name,
                   const struct kclient_delete_opts *o, cJSON **ret, struct kclient_err *err);

/* Get, mutate, update; repeated on 409 Conflict up to max_attempts (0 = 10).
 * mutate returns 0 to write the object, 1 to leave it (no write; *ret is the
 * object read), or a negative code that aborts and is returned. subresource
 * is NULL or "status". */
int kclient_update_retry(struct kclient *c, const struct kgvr *gvr, const char *ns,
                         const char *name, const char *subresource,
                         int (*mutate)(void *ctx, cJSON *obj), void *ctx, int max_attempts,
                         cJSON **ret, struct kclient_err *err);

/* A GET whose answer is read as it arrives: on_data gets each chunk of the
 * body with the response's status (an error answer too: the callback sees
 * its status and keeps what it needs); a non-zero return stops and is
 * returned. accept NULL = application/json. Returns 0 when the answer
 * ended, or the transport error (not retried once bytes have arrived). */
int kclient_stream(struct kclient *c, const char *path, const char *accept,
                   int (*on_data)(void *ctx, long status, const char *p, size_t n), void *ctx,
                   struct kclient_err *err);

/* ---- watches ---- */

enum kwatch_type {
    KWATCH_ADDED = 1,
    KWATCH_MODIFIED,
    KWATCH_DELETED,
    KWATCH_BOOKMARK,
    KWATCH_ERROR,
};

/* Parses one watch line {"type":T,"object":{...}}. Pure. Returns 0 with
 * *ret_type and *ret_obj (owned), or TERN_EPARSE / TERN_EINVALID (unknown
 * type, object not an object) / TERN_ETOOLARGE. */
int kclient_parse_event(const char *line, size_t len, enum kwatch_type *ret_type,
                        cJSON **ret_obj, struct tern_err *err);

/* Streams a watch (opts: resource_version, selectors, allow_bookmarks,
 * timeout_seconds). on_event gets each event's object, owned; a non-zero
 * return ends the watch and is returned. An ERROR event is not passed on: it
 * ends the watch with its Status mapped to a code (410 -> TERN_ECOMPACTED).
 * Returns 0 when the server closed the stream cleanly. Lines are bounded by
 * TERN_KUBE_MAX_WATCH_LINE; one cut across chunks is reassembled. */
int kclient_watch(struct kclient *c, const struct kgvr *gvr, const char *ns,
                  const struct kclient_list_opts *o,
                  int (*on_event)(void *ctx, enum kwatch_type type, cJSON *obj), void *ctx,
                  struct kclient_err *err);

/* Maps an HTTP status and Status body to a code and fills err (pure). */
int kclient_status_error(long http_status, const char *body, size_t len, const char *what,
                         struct kclient_err *err);

/* Formats t (UTC, microseconds) as a MicroTime
 * "2006-01-02T15:04:05.000000Z" into out (at least 32 bytes); returns out. */
char *kclient_microtime(const struct timespec *t, char out[32]);

#endif
