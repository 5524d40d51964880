/* apistore.h - Kubernetes objects in etcd, as kube-apiserver keeps them.
 *
 * One object per key (see apires_key), stored as JSON without
 * metadata.resourceVersion; on every read the resourceVersion is set to the
 * key's etcd mod_revision, and a list's resourceVersion is the store
 * revision it was read at. Writes are single-key transactions:
 *   create: create_revision(key) == 0      (else TERN_ECONFLICT: exists)
 *   update: mod_revision(key) == expected  (else TERN_ECONFLICT, or
 *                                          TERN_ENOTFOUND when absent)
 *   delete: mod_revision(key) == expected  (expected 0: unconditional)
 *
 * This is also the in-process client API for controllers living in the
 * same process as the server (they see exactly what the REST layer stores).
 * The store borrows the etcd client; it is safe to use from many threads.
 * Objects passed in are borrowed; objects returned are owned by the caller.
 */
#ifndef TERN_APISTORE_H
#define TERN_APISTORE_H

#include "base/err.h"
#include "etcd/etcd.h"

#include <cJSON.h>
#include <stdint.h>

struct apistore {
    struct etcd *etcd;
};

struct apistore_list {
    cJSON **objs;       /* n objects, in key order, resourceVersion set */
    size_t n;
    int64_t revision;   /* the store revision the list was read at */
    char *next_key;     /* first key of the next page, or NULL at the end */
};

void apistore_init(struct apistore *s, struct etcd *etcd);

/* Reads one object. Returns 0 with *ret (and *ret_rev, may be NULL),
 * TERN_ENOTFOUND, TERN_EPARSE for a stored value that is not JSON, or an
 * etcd error. */
int apistore_get(struct apistore *s, const char *key, cJSON **ret, int64_t *ret_rev,
                 struct tern_err *err);

/* Lists the keys under prefix (which ends in '/') starting at start_key (or
 * the prefix) at revision (0 = latest), at most limit objects (0 = all).
 * TERN_ECOMPACTED when revision is gone. Release with apistore_list_done. */
int apistore_list(struct apistore *s, const char *prefix, const char *start_key,
                  int64_t revision, int64_t limit, struct apistore_list *ret,
                  struct tern_err *err);
void apistore_list_done(struct apistore_list *l);

/* Creates key with obj. Returns 0 and *ret_rev (the new resourceVersion),
 * TERN_ECONFLICT if the key exists, TERN_ETOOLARGE, etcd errors. */
int apistore_create(struct apistore *s, const char *key, const cJSON *obj, int64_t *ret_rev,
                    struct tern_err *err);
/* Replaces key if its mod_revision is expect_rev. Returns 0 and *ret_rev,
 * TERN_ECONFLICT or TERN_ENOTFOUND. */
int apistore_update(struct apistore *s, const char *key, const cJSON *obj, int64_t expect_rev,
                    int64_t *ret_rev, struct tern_err *err);
/* Deletes key (if its mod_revision is expect_rev, unless 0). Returns 0 and
 * *ret_rev (the deletion's revision), TERN_ECONFLICT or TERN_ENOTFOUND. */
int apistore_delete(struct apistore *s, const char *key, int64_t expect_rev, int64_t *ret_rev,
                    struct tern_err *err);
/* Deletes every key under prefix. Returns 0 or an etcd error. */
int apistore_delete_prefix(struct apistore *s, const char *prefix, struct tern_err *err);

/* Parses a stored value and sets metadata.resourceVersion = rev. Returns 0
 * and *ret or TERN_EPARSE. */
int apistore_decode(const char *value, size_t len, int64_t rev, cJSON **ret,
                    struct tern_err *err);

/* The current store revision. */
int apistore_revision(struct apistore *s, int64_t *ret, struct tern_err *err);

#endif
