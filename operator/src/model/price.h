/* price.h - per-model price table and the cost of one model call.
 *
 * Prices are integers in micro-USD per one million tokens, for uncached
 * input, cached input and output (reasoning tokens are billed as output and
 * are already counted in completion_tokens). The table is JSON:
 *
 *   {"prices": {
 *      "gpt-4o-mini": {"input": 150000, "cachedInput": 75000, "output": 600000},
 *      "gpt-4o*":     {"input": 2500000, "cachedInput": 1250000, "output": 10000000},
 *      "*":           {"input": 0, "cachedInput": 0, "output": 0}}}
 *
 * A key is an exact model name, a prefix ending in "*" (longest wins), or
 * "*" alone (the fallback). cachedInput defaults to input. See docs/model.md.
 */
#ifndef TERN_MODEL_PRICE_H
#define TERN_MODEL_PRICE_H

#include "base/err.h"
#include "model/chat.h"

#include <stddef.h>
#include <stdint.h>

struct price_entry {
    char *model;          /* key as written (owned) */
    int64_t input;        /* micro-USD per 1M uncached input tokens */
    int64_t cached_input; /* micro-USD per 1M cached input tokens */
    int64_t output;       /* micro-USD per 1M output tokens */
};

struct price_table {
    struct price_entry *e; /* owned */
    size_t n;
};

/* Parses a table. Returns 0 and *ret (free with price_table_done), or
 * TERN_EPARSE / TERN_EINVALID (field path in err) / TERN_ETOOLARGE (more
 * than TERN_MODEL_MAX_PRICES entries). Prices must be in [0, 1e12]. */
int price_table_parse(const char *json, size_t len, struct price_table *ret,
                      struct tern_err *err);
void price_table_done(struct price_table *t);

/* The entry for model (exact, then longest "prefix*", then "*"), or NULL. */
const struct price_entry *price_lookup(const struct price_table *t, const char *model);

/* Cost of one call in micro-USD, rounded up. Returns 0 and *ret, or -ERANGE
 * if it does not fit in int64. Token counts must be >= 0. */
int price_cost(const struct price_entry *p, const struct chat_usage *u, int64_t *ret);

#endif
