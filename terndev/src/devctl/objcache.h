/* objcache.h - a watch-driven cache of whole resources over an objstore
 * (objstore.h), what tern-dev's controllers and kubelet decide from.
 *
 * Each resource is listed once, then kept current from the store's changes
 * (objstore_changes): a sync costs what changed, not what exists. It lists
 * again when the store lost the window of changes (TERN_ECOMPACTED), after
 * any other failure to read the changes, every resync_s seconds (a full
 * resync, as informers do), and at every sync when the store keeps no
 * changes (tern-node's REST store over HTTPS): the lists are then exactly
 * what a plain list gives. A resource the store does not serve (a CRD not
 * installed yet) is empty and listed again at each sync until it is.
 *
 * Read-your-writes: a sync sees every change the store made before the sync
 * began (objstore_changes' contract), so a controller's next pass sees its
 * own writes.
 *
 * Not thread-safe: one owner syncs and reads. Lists returned are borrowed
 * until the next sync or objcache_free.
 */
#ifndef TERN_OBJCACHE_H
#define TERN_OBJCACHE_H

#include "base/err.h"
#include "devctl/objstore.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A full resync every 5 minutes by default. */
#define OBJCACHE_RESYNC_S 300

struct objcache;

/* A cache of the resources gvrs[0..n) (copied) of s (borrowed; must outlive
 * the cache); resync_s <= 0 means OBJCACHE_RESYNC_S. Nothing is read until
 * the first sync. Never fails. */
struct objcache *objcache_new(const struct objstore *s, const char *const *gvrs, size_t n,
                              int resync_s);
void objcache_free(struct objcache *c);

/* Brings the cache up to date at time now (Unix seconds, for the periodic
 * resync). Returns 0, or the first error of a list (that resource is then
 * empty, see objcache_ok); the cache stays usable either way. */
int objcache_sync(struct objcache *c, int64_t now, struct tern_err *err);

/* Resource i as a list object {"items": [...]} (items in no particular
 * order, each with apiVersion and kind as objstore_list gives them). Never
 * NULL (empty before the first sync). */
const cJSON *objcache_list(const struct objcache *c, size_t i);
/* Whether resource i was read (its last list succeeded). */
bool objcache_ok(const struct objcache *c, size_t i);
/* The revision the cache is complete up to ("0" before the first sync):
 * objstore_wait(s, objcache_rv(c), ...) returns at the next change. */
const char *objcache_rv(const struct objcache *c);

struct objcache_stats {
    uint64_t relists; /* syncs that listed every resource */
    uint64_t changes;   /* changes applied */
    uint64_t deletions; /* of them: objects gone, or newly marked for deletion */
};
void objcache_stats(const struct objcache *c, struct objcache_stats *ret);

#endif
