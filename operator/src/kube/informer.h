/* informer.h - list+watch cache of one resource, with event handlers.
 *
 * An informer runs one thread with its own kclient: it lists (paged), then
 * watches from the list's resourceVersion with allowWatchBookmarks, tracking
 * the resourceVersion of every event (bookmarks included). A stream that the
 * server ends cleanly (timeoutSeconds) is re-opened from the tracked version;
 * 410 Expired, a stream error or a failed list lead to a relist after a
 * backoff (backoff_ms doubling to max_backoff_ms, reset once a watch
 * delivers events). A relist is diffed against the cache by resourceVersion:
 * only objects that were added, changed or removed while the watch was down
 * produce handler calls.
 *
 * The cache holds each object as compact JSON text (metadata.managedFields
 * stripped unless keep_managed_fields), indexed by "namespace/name" (or
 * "name" for cluster-scoped objects) and by owner UID
 * (metadata.ownerReferences[].uid). Memory is the objects' JSON plus a small
 * fixed overhead per object and owner reference (about 1.1x the JSON of an
 * AgentSession; a cJSON tree would be 10x, see docs/kube-client.md); readers
 * pay a parse (a few microseconds per kB) instead.
 *
 * Handlers run on the informer thread, one at a time, without the cache lock
 * held; the objects they get are borrowed for the call. They should be quick
 * (typically: compute a key, add it to a work queue). The cache readers below
 * take a read lock and may be used from any thread, including handlers.
 */
#ifndef TERN_INFORMER_H
#define TERN_INFORMER_H

#include "base/err.h"
#include "kube/kclient.h"
#include "kube/kubeconfig.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

struct informer;

struct informer_handlers {
    void (*on_add)(void *ctx, const cJSON *obj);
    /* old == new when called by informer_resync */
    void (*on_update)(void *ctx, const cJSON *old_obj, const cJSON *new_obj);
    /* obj is the last state (from the DELETED event, or the cache on relist) */
    void (*on_delete)(void *ctx, const cJSON *obj);
    void *ctx;
};

struct informer_opts {
    struct kgvr gvr;              /* strings copied */
    const char *namespace;        /* NULL/"" = all namespaces */
    const char *label_selector;
    const char *field_selector;
    long page_size;               /* default 100 */
    long watch_timeout_s;         /* server-side watch timeout; default 300..600 random */
    long backoff_ms;              /* default 800 */
    long max_backoff_ms;          /* default 30000 */
    bool keep_managed_fields;
    /* Called on every object before it is cached and handed to the
     * handlers (may be NULL): it may remove what its users never read, so
     * that the cache holds only that (what a controller keeps of 10,000
     * objects is its memory). It must keep metadata.name, namespace,
     * resourceVersion and ownerReferences. */
    void (*transform)(void *ctx, cJSON *obj);
    void *transform_ctx;
    struct kclient_opts client;   /* for the informer's own kclient */
};

struct informer_stats {
    unsigned long lists;          /* list calls (pages) made */
    unsigned long relists;        /* full lists after the first */
    unsigned long watches;        /* watch streams opened */
    unsigned long events;         /* watch events received (bookmarks included) */
    unsigned long bookmarks;
    unsigned long errors;         /* failed lists/watches */
};

/* cfg is borrowed and must outlive the informer. Not started. */
struct informer *informer_new(struct kubeconfig *cfg, const struct informer_opts *opts,
                              const struct informer_handlers *h);
/* Starts the thread. Returns 0 or -errno. */
int informer_start(struct informer *inf);
/* Stops the thread (aborting a running request) and joins it. Idempotent. */
void informer_stop(struct informer *inf);
/* Asks the thread to stop without waiting for it (informer_stop or
 * informer_free joins it). A running request notices within about a
 * second (libcurl's progress callback), so asking every informer first and
 * then joining them takes one such wait, not one per informer. Accepts
 * NULL; idempotent. */
void informer_cancel(struct informer *inf);
/* Stops if running and frees the cache. Accepts NULL. */
void informer_free(struct informer *inf);

/* Whether the first list has been cached. */
bool informer_has_synced(struct informer *inf);
/* Waits up to timeout_ms for the first list: 0 or TERN_ETIMEOUT. */
int informer_wait_synced(struct informer *inf, long timeout_ms);

/* A deep copy of the cached object (owned by the caller), or NULL. */
cJSON *informer_get(struct informer *inf, const char *ns, const char *name);
size_t informer_len(struct informer *inf);
/* The bytes the cache's entries hold (text, keys, owner UIDs and the entry
 * records; not the allocator's overhead nor the indexes' tables). */
size_t informer_cache_bytes(struct informer *inf);
/* Calls fn for each cached object (a tree made for the call and freed after
 * it; the read lock is held: fn must not block for long and must not stop
 * the informer). A non-zero return stops the walk and is returned. */
int informer_each(struct informer *inf, int (*fn)(void *ctx, const cJSON *obj), void *ctx);
/* The same over the objects whose cached JSON text contains needle (a
 * cheap filter before the parse: e.g. an annotation key few objects have). */
int informer_each_containing(struct informer *inf, const char *needle,
                             int (*fn)(void *ctx, const cJSON *obj), void *ctx);
/* The same over the objects whose ownerReferences name uid. */
int informer_each_owned(struct informer *inf, const char *owner_uid,
                        int (*fn)(void *ctx, const cJSON *obj), void *ctx);
/* The last resourceVersion seen (owned by the caller; "" before the list). */
char *informer_resource_version(struct informer *inf);
void informer_get_stats(struct informer *inf, struct informer_stats *ret);

/* Calls on_update(obj, obj) for every cached object, on the calling thread
 * (so handlers must be thread-safe when this is used). No request is made. */
void informer_resync(struct informer *inf);

/* The cache key of obj: "namespace/name" or "name"; owned by the caller, or
 * NULL when metadata.name is missing. */
char *informer_key(const cJSON *obj);

#endif
