/* apirest_internal.h - what the files of the REST layer share; not an
 * interface (everything outside the REST layer uses apirest.h).
 *
 *   apirest.c            entry points: path parsing, routing a request to
 *                        its handler, init/done/bootstrap, apirest_do
 *   apirest_common.c     query arguments, object helpers, responses (JSON,
 *                        Status, the representation asked for), bodies
 *   apirest_discovery.c  /version, discovery documents, OpenAPI v3
 *   apirest_validate.c   built-in validation and defaulting, metadata checks
 *   apirest_prepare.c    a write's object before it is stored: kind and
 *                        version, namespace, unknown fields, metadata on
 *                        create and update, status and finalize subresources
 *   apirest_crud.c       create, get, update (PUT), patches, CRD reloads
 *   apirest_list.c       selectors, pagination (continue tokens), list
 *   apirest_watch.c      watches (initial list, events, bookmarks)
 *   apirest_delete.c     delete (graceful, finalizers, propagation, CRDs,
 *                        namespaces) and deletecollection
 *   apirest_special.c    pods/log (and follow), pods/binding, reviews
 *
 * Functions are prefixed apirest__ (libuv's uv__); the types below keep
 * their short names and are seen only by these files. A struct rq lives
 * for one request on the caller's stack; everything it points to is
 * borrowed. Functions that "take" an object free it.
 */
#ifndef TERN_APIREST_INTERNAL_H
#define TERN_APIREST_INTERNAL_H

#include "apirest.h"
#include "apistatus.h"
#include "apitable.h"
#include "base/buf.h"
#include "base/err.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define CT_JSON "application/json"
#define MAX_RETRIES 16

struct apisel;

/* The representation a client asked for (Accept). */
enum want { WANT_OBJECT, WANT_TABLE, WANT_PARTIAL };

/* One request on a resource path. */
struct rq {
    struct apirest *s;
    const struct apirest_req *req;
    struct apirest_resp *resp;
    struct apires_table *tab;
    const struct apires *res;
    const char *ns, *name, *sub;
    enum want want;
    enum apitable_include include;
    bool dry_run;
    const char *field_validation; /* Strict, Warn, Ignore */
};

/* A request's label and field selectors (NULL: none). */
struct selectors {
    struct apisel *labels, *fields;
};

struct apirest_watch {
    struct apirest *s;
    struct apires_table *tab;
    const struct apires *res;
    struct selectors sel;
    enum want want;
    enum apitable_include include;
    bool bookmarks;
    struct apiwatch_sub *sub;
    cJSON **initial;
    size_t ninit, init_pos;
    time_t deadline;
    time_t next_bookmark;
    bool sent_columns;
    char *final_line;
    /* pods/log?follow=true streams a file instead of events */
    bool log_mode;
    int log_fd;
    char *log_key;
    char *log_container;
    int64_t log_restarts;
    time_t log_next_check;
};

/* ---- apirest_common.c ---- */

/* The value of query argument k ("" when given without one), or NULL. */
const char *apirest__arg(const struct apirest_req *r, const char *k);
/* True when query argument k is true, True or 1. */
bool apirest__arg_true(const struct apirest_req *r, const char *k);
/* The current time in RFC 3339 (UTC). */
void apirest__now_str(char out[32]);
/* A new random (version 4) UUID string, owned by the caller. */
char *apirest__uuid4(void);
/* The string member k of o, or NULL (absent or not a string). */
const char *apirest__jstr(const cJSON *o, const char *k);
/* The object member k of o, replacing a non-object or creating it. */
cJSON *apirest__ensure_obj(cJSON *o, const char *k);
/* Sets member k of o to the string v (a copy). */
void apirest__set_str(cJSON *o, const char *k, const char *v);
/* Sets member k of o to v (taken). */
void apirest__set_item(cJSON *o, const char *k, cJSON *v);
/* metadata.resourceVersion of obj as a number, or -1. */
int64_t apirest__rv_of(const cJSON *obj);
/* Responds with code and body (taken) as JSON. */
void apirest__respond_json(struct apirest_resp *resp, int code, cJSON *body);
/* Responds with a Status (taken) and its code. */
void apirest__respond_status(struct apirest_resp *resp, cJSON *status);
/* The Status for an apistore error rc on res/name (e: its context, may be
 * NULL). Caller owns it. */
cJSON *apirest__status_from_store(int rc, const struct apires *res, const char *name,
                                  const struct tern_err *e);
/* True for the built-in resource of that kind (never a custom resource). */
bool apirest__is_kind(const struct apires *res, const char *kind);
/* True for customresourcedefinitions. */
bool apirest__is_crd(const struct apires *res);
/* The etcd key of the request's object, owned by the caller. */
char *apirest__obj_key(struct rq *q);
/* Gives obj the served apiVersion (an events.k8s.io Event converted from
 * the stored core shape). */
void apirest__to_served_version(const struct apires *res, cJSON *obj);
void apirest__list_item(const struct apires *res, cJSON *obj);
void apirest__omit_empty(const struct apires *res, cJSON *obj);
/* Gives obj its stored shape (an events.k8s.io Event as a core one). */
void apirest__to_storage_version(const struct apires *res, cJSON *obj);
/* A PartialObjectMetadata of obj (borrowed). Caller owns it. */
cJSON *apirest__partial_of(const cJSON *obj);
/* Sends obj (taken) in the representation requested (object, Table or
 * PartialObjectMetadata). */
void apirest__respond_object(struct rq *q, int code, cJSON *obj);
/* Responds 404 NotFound for a path the server does not serve. */
void apirest__not_found_path(struct apirest_resp *resp);
/* Parses the request body (JSON, YAML or protobuf) as an object (or, with
 * allow_array, an array). Returns NULL and *ret, or an error Status. dup
 * receives the first duplicate key path ("" for none). */
cJSON *apirest__decode_body(struct rq *q, cJSON **ret, char dup[256], bool allow_array);

/* ---- apirest_discovery.c ---- */

/* GET /version. */
void apirest__handle_version(struct apirest_resp *resp);
/* GET /api, /apis, /apis/G, /api/v1, /apis/G/V. */
void apirest__handle_discovery(struct apirest *s, const struct apirest_path *p,
                               struct apirest_resp *resp);
/* GET /openapi/v3 (the index) and /openapi/v3/apis/G/V, /openapi/v3/api/v1. */
void apirest__handle_openapi_v3(struct apirest *s, const struct apirest_path *p,
                                struct apirest_resp *resp);

/* ---- apirest_validate.c ---- */

/* Adds to f what is wrong with obj's metadata (name, labels, annotations,
 * ownerReferences, finalizers). */
void apirest__validate_meta(const struct apires *res, const cJSON *obj,
                            struct apistatus_fields *f);
/* Adds to f what the validation of a built-in kind refuses in obj (old: the
 * current object on update, else NULL). Nothing for custom resources or a
 * subresource sub. */
void apirest__validate_builtin(const struct apires *res, const cJSON *obj, const cJSON *old,
                               const char *sub, struct apistatus_fields *f);
/* Built-in defaulting on create (uid: the new object's, for Job selectors). */
void apirest__default_builtin(const struct apires *res, cJSON *obj, const char *uid);
/* Merges a Secret's stringData into data (base64); other kinds unchanged. */
void apirest__secret_string_data(const struct apires *res, cJSON *obj);
/* Sets the status the server gives a new object (PrepareForCreate). */
void apirest__initial_status(const struct apires *res, cJSON *obj);

/* ---- apirest_prepare.c ---- */

/* Checks (and for built-ins defaults) the body's kind and apiVersion.
 * Returns NULL or a Status. */
cJSON *apirest__check_gvk(struct rq *q, cJSON *obj);
/* Turns a create body into the object to store (name, uid, timestamps,
 * defaults, schema, validation). Returns NULL or a Status; obj stays the
 * caller's. dup: the body's first duplicate key path. */
cJSON *apirest__prepare_create(struct rq *q, cJSON *obj, const char *dup);
/* The same for an update of cur to *objp (which it may replace): immutable
 * metadata, status and finalize subresources, generation, finalizers while
 * deleting. check_kind: check kind and apiVersion (PUT). */
cJSON *apirest__prepare_update(struct rq *q, const cJSON *cur, cJSON **objp, const char *dup,
                               bool check_kind);

/* ---- apirest_crud.c ---- */

/* Reloads the CRDs from etcd into a new resource table (call with
 * s->crd_mu held). */
void apirest__reload_crds(struct apirest *s);
/* What follows a write at revision rev: a CRD write reloads the CRDs. */
void apirest__after_write(struct rq *q, int64_t rev);
/* POST on a collection. */
void apirest__handle_create(struct rq *q);
/* GET of an object. */
void apirest__handle_get(struct rq *q);
/* PUT of an object (or its status / finalize subresource). */
void apirest__handle_put(struct rq *q);
/* PATCH: JSON patch, merge patch, strategic merge patch, apply. */
void apirest__handle_patch(struct rq *q);

/* ---- apirest_list.c ---- */

/* Frees the selectors (not sel itself). */
void apirest__selectors_done(struct selectors *sel);
/* Parses labelSelector and fieldSelector into sel. Returns NULL (release
 * sel with apirest__selectors_done) or a Status (nothing to release). */
cJSON *apirest__parse_selectors(struct rq *q, struct selectors *sel);
/* True when obj (stored shape) matches both selectors. */
bool apirest__sel_match(const struct selectors *sel, const cJSON *obj);
/* Reads the matching objects: all (limit 0) or one page from continue
 * token cont. Returns NULL with *out (release with apistore_list_done) and
 * *ret_cont (the next token or NULL, owned by the caller), or a Status. */
cJSON *apirest__do_list(struct rq *q, const struct selectors *sel, int64_t limit,
                        const char *cont, struct apistore_list *out, char **ret_cont);
/* GET of a collection. */
void apirest__handle_list(struct rq *q);

/* ---- apirest_watch.c ---- */

/* GET ?watch=true on a collection or an object: sets resp->watch. */
void apirest__handle_watch(struct rq *q);

/* ---- apirest_delete.c ---- */

/* True when a deleting object can go: no finalizers, for pods a grace
 * period run down to 0, for namespaces empty spec.finalizers. */
bool apirest__removable(const struct apires *res, const cJSON *obj);
/* Deletes obj (taken; read at revision rev) at key with what a CRD or a
 * namespace takes along (nothing under dry run), and replies with the
 * object (as_object, or a built-in) or a Status (a custom resource). */
void apirest__delete_and_reply(struct rq *q, const char *key, cJSON *obj, int64_t rev,
                               bool as_object);
/* DELETE of an object. */
void apirest__handle_delete(struct rq *q);
/* DELETE on a collection. */
void apirest__handle_delete_collection(struct rq *q);

/* ---- apirest_special.c ---- */

/* GET pods/NAME/log (with follow: sets resp->watch to a log stream). */
void apirest__handle_log(struct rq *q);
/* apirest_watch_next of a log stream. */
int apirest__log_next(struct apirest_watch *w, struct buf *out, long timeout_ms);
/* POST pods/NAME/binding. */
void apirest__handle_binding(struct rq *q);
/* POST of a SelfSubjectAccessReview or SelfSubjectReview. */
void apirest__handle_review(struct rq *q);

#endif
