/* price.c - price table parsing and cost arithmetic (pure). */
#include "model/price.h"

#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define PRICE_MAX 1000000000000LL /* 1e12 micro-USD per 1M tokens: $1M */

void price_table_done(struct price_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        free(t->e[i].model);
    free(t->e);
    memset(t, 0, sizeof *t);
}

int price_table_parse(const char *json, size_t len, struct price_table *ret,
                      struct tern_err *err)
{
    cJSON *root = NULL;
    struct price_table t = {0};
    const cJSON *prices = NULL;
    int rc = json_parse(json, len, &root, err);
    if (rc)
        return rc;
    if (!cJSON_IsObject(root)) {
        rc = err_set(err, TERN_EINVALID, "price table: must be an object");
        goto out;
    }
    rc = json_get_object(root, "", "prices", JSON_REQUIRED, &prices, err);
    if (rc)
        goto out;
    size_t n = (size_t)cJSON_GetArraySize(prices);
    if (n > TERN_MODEL_MAX_PRICES) {
        rc = err_set(err, TERN_ETOOLARGE, "prices: more than %d entries", TERN_MODEL_MAX_PRICES);
        goto out;
    }
    t.e = n ? xcalloc(n, sizeof *t.e) : NULL;
    for (const cJSON *it = prices->child; it; it = it->next) {
        char path[300];
        snprintf(path, sizeof path, "prices.%.250s", it->string);
        struct price_entry *p = &t.e[t.n];
        if (!cJSON_IsObject(it) || !*it->string) {
            rc = err_set(err, TERN_EINVALID, "%s: must be an object with a non-empty key", path);
            goto out;
        }
        p->cached_input = -1;
        if ((rc = json_get_int_range(it, path, "input", JSON_REQUIRED, 0, PRICE_MAX, &p->input,
                                     err)) ||
            (rc = json_get_int_range(it, path, "output", JSON_REQUIRED, 0, PRICE_MAX, &p->output,
                                     err)) ||
            (rc = json_get_int_range(it, path, "cachedInput", JSON_OPTIONAL, 0, PRICE_MAX,
                                     &p->cached_input, err)))
            goto out;
        if (p->cached_input < 0)
            p->cached_input = p->input;
        p->model = xstrdup(it->string);
        t.n++;
    }
    *ret = t;
    t = (struct price_table){0};
out:
    price_table_done(&t);
    cJSON_Delete(root);
    return rc;
}

const struct price_entry *price_lookup(const struct price_table *t, const char *model)
{
    const struct price_entry *best = NULL, *fallback = NULL;
    size_t best_len = 0;
    if (!t || !model)
        return NULL;
    for (size_t i = 0; i < t->n; i++) {
        const char *k = t->e[i].model;
        size_t kl = strlen(k);
        if (strcmp(k, model) == 0)
            return &t->e[i];
        if (strcmp(k, "*") == 0) {
            fallback = &t->e[i];
        } else if (kl > 1 && k[kl - 1] == '*' && strncmp(k, model, kl - 1) == 0 &&
                   kl - 1 > best_len) {
            best = &t->e[i];
            best_len = kl - 1;
        }
    }
    return best ? best : fallback;
}

int price_cost(const struct price_entry *p, const struct chat_usage *u, int64_t *ret)
{
    if (u->prompt_tokens < 0 || u->completion_tokens < 0 || u->cached_tokens < 0)
        return -ERANGE;
    int64_t cached = u->cached_tokens > u->prompt_tokens ? u->prompt_tokens : u->cached_tokens;
    __int128 total = (__int128)(u->prompt_tokens - cached) * p->input +
                     (__int128)cached * p->cached_input +
                     (__int128)u->completion_tokens * p->output;
    __int128 cost = (total + 999999) / 1000000;
    if (cost > INT64_MAX)
        return -ERANGE;
    *ret = (int64_t)cost;
    return 0;
}
