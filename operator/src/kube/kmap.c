/* kmap.c - string-keyed hash map. See kmap.h. */
#include "kmap.h"

#include "base/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct kmap_ent {
    struct kmap_ent *next;
    uint64_t hash;
    void *value;
    char key[]; /* NUL-terminated */
};

struct kmap {
    struct kmap_ent **slots;
    size_t nslots; /* power of two */
    size_t len;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

struct kmap *kmap_new(void)
{
    struct kmap *m = xcalloc(1, sizeof *m);
    m->nslots = 16;
    m->slots = xcalloc(m->nslots, sizeof *m->slots);
    return m;
}

void kmap_free(struct kmap *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nslots; i++) {
        struct kmap_ent *e = m->slots[i];
        while (e) {
            struct kmap_ent *n = e->next;
            free(e);
            e = n;
        }
    }
    free(m->slots);
    free(m);
}

static struct kmap_ent **find(const struct kmap *m, const char *key, uint64_t h)
{
    struct kmap_ent **pp = &m->slots[h & (m->nslots - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && strcmp((*pp)->key, key) == 0)
            return pp;
    return pp;
}

void *kmap_get(const struct kmap *m, const char *key)
{
    struct kmap_ent **pp = find(m, key, hash_str(key));
    return *pp ? (*pp)->value : NULL;
}

bool kmap_has(const struct kmap *m, const char *key)
{
    return *find(m, key, hash_str(key)) != NULL;
}

static void grow(struct kmap *m)
{
    size_t n = m->nslots * 2;
    struct kmap_ent **slots = xcalloc(n, sizeof *slots);
    for (size_t i = 0; i < m->nslots; i++) {
        struct kmap_ent *e = m->slots[i];
        while (e) {
            struct kmap_ent *next = e->next;
            e->next = slots[e->hash & (n - 1)];
            slots[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(m->slots);
    m->slots = slots;
    m->nslots = n;
}

void *kmap_put(struct kmap *m, const char *key, void *value)
{
    uint64_t h = hash_str(key);
    struct kmap_ent **pp = find(m, key, h);
    if (*pp) {
        void *old = (*pp)->value;
        (*pp)->value = value;
        return old;
    }
    size_t klen = strlen(key);
    struct kmap_ent *e = xmalloc(sizeof *e + klen + 1);
    memcpy(e->key, key, klen + 1);
    e->hash = h;
    e->value = value;
    e->next = NULL;
    *pp = e;
    m->len++;
    if (m->len > m->nslots)
        grow(m);
    return NULL;
}

void *kmap_del(struct kmap *m, const char *key)
{
    struct kmap_ent **pp = find(m, key, hash_str(key));
    if (!*pp)
        return NULL;
    struct kmap_ent *e = *pp;
    void *v = e->value;
    *pp = e->next;
    free(e);
    m->len--;
    return v;
}

size_t kmap_len(const struct kmap *m)
{
    return m->len;
}

int kmap_each(struct kmap *m, int (*fn)(void *ctx, const char *key, void *value), void *ctx)
{
    for (size_t i = 0; i < m->nslots; i++) {
        struct kmap_ent *e = m->slots[i];
        while (e) {
            struct kmap_ent *next = e->next; /* fn may delete e */
            int r = fn(ctx, e->key, e->value);
            if (r)
                return r;
            e = next;
        }
    }
    return 0;
}
