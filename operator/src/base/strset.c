/* strset.c - a set of borrowed strings. See strset.h. */
#include "strset.h"

#include "mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

uint64_t strset_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void grow(struct strset *set)
{
    size_t ncap = set->cap ? set->cap * 2 : 16;
    const char **ns = xcalloc(ncap, sizeof *ns);
    for (size_t i = 0; i < set->cap; i++) {
        if (!set->slots[i])
            continue;
        size_t j = strset_hash(set->slots[i]) & (ncap - 1);
        while (ns[j])
            j = (j + 1) & (ncap - 1);
        ns[j] = set->slots[i];
    }
    free(set->slots);
    set->slots = ns;
    set->cap = ncap;
}

bool strset_has(const struct strset *set, const char *s)
{
    if (!set->cap)
        return false;
    size_t j = strset_hash(s) & (set->cap - 1);
    while (set->slots[j]) {
        if (strcmp(set->slots[j], s) == 0)
            return true;
        j = (j + 1) & (set->cap - 1);
    }
    return false;
}

bool strset_add(struct strset *set, const char *s)
{
    if (strset_has(set, s))
        return true;
    if ((set->n + 1) * 2 > set->cap)
        grow(set);
    size_t j = strset_hash(s) & (set->cap - 1);
    while (set->slots[j])
        j = (j + 1) & (set->cap - 1);
    set->slots[j] = s;
    set->n++;
    return false;
}

void strset_done(struct strset *set)
{
    free(set->slots);
    *set = (struct strset){0};
}
