/* strset.h - a set of borrowed strings (open addressing, FNV-1a), for
 * finding duplicate keys in O(1) per key while parsing JSON and YAML.
 *
 * The set stores pointers only: every string added must outlive the set.
 * Initialise with `struct strset s = {0};`, release with strset_done.
 */
#ifndef TERN_STRSET_H
#define TERN_STRSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct strset {
    const char **slots;
    size_t cap, n;
};

/* The set's string hash (64-bit FNV-1a), for callers' own tables. */
uint64_t strset_hash(const char *s);
/* True if s is in the set. */
bool strset_has(const struct strset *set, const char *s);
/* Adds s; returns true if it was already there (then nothing changes). */
bool strset_add(struct strset *set, const char *s);
/* Frees the table (not the strings); the set may be reused. */
void strset_done(struct strset *set);

#endif
