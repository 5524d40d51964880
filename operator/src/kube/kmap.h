/* kmap.h - string-keyed hash map (chained, grows by doubling).
 *
 * Keys are copied and owned by the map; values are opaque pointers owned by
 * the caller (the map never frees them). Not thread-safe: the owner locks.
 * Iteration order is unspecified; do not insert or delete while iterating
 * except through kmap_del of the current key inside kmap_each's callback
 * (which is allowed).
 */
#ifndef TERN_KMAP_H
#define TERN_KMAP_H

#include <stdbool.h>
#include <stddef.h>

struct kmap;

struct kmap *kmap_new(void);
/* Frees the map and its keys (not the values). Accepts NULL. */
void kmap_free(struct kmap *m);

/* The value stored under key, or NULL. */
void *kmap_get(const struct kmap *m, const char *key);
/* Whether key is present (values may be NULL). */
bool kmap_has(const struct kmap *m, const char *key);
/* Stores value under key; returns the previous value (NULL if none). */
void *kmap_put(struct kmap *m, const char *key, void *value);
/* Removes key; returns its value (NULL if absent). */
void *kmap_del(struct kmap *m, const char *key);
size_t kmap_len(const struct kmap *m);

/* Calls fn for every entry; a non-zero return stops and is returned. The key
 * is borrowed and valid only during the call. */
int kmap_each(struct kmap *m, int (*fn)(void *ctx, const char *key, void *value), void *ctx);

#endif
