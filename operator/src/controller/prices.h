/* prices.h - the price table the operator prices sessions with.
 *
 * The table is the key "prices.json" of a ConfigMap (the chart's and the
 * kustomize base's tern-prices, editable; format in model/price.h). The
 * operator reads it through the API when it is older than ttl_s seconds
 * (so an edit applies within that), and for each session:
 *   - refuses a cost limit (spec.limits.maxCostMicroUSD > 0) when the model
 *     has no price, or no table can be read (reconcile_decide);
 *   - hands the runner Job the model's price as a one-entry table
 *     (children_turn_job), which the runner reads from TERN_PRICES_FILE.
 * Thread-safe: workers share one struct prices.
 */
#ifndef TERN_PRICES_H
#define TERN_PRICES_H

#include "kube/kclient.h"
#include "model/price.h"

#include <stdint.h>

#define PRICES_KEY "prices.json"

struct prices;

/* ref: "namespace/name" of the ConfigMap, or NULL/"" for none (then every
 * lookup says there is no table). ttl_s <= 0: 30. */
struct prices *prices_new(const char *ref, int64_t ttl_s);
void prices_free(struct prices *p);

/* The price of model: *ret_json the one-entry table (newly allocated) or
 * NULL when the model has none; *ret_where "ConfigMap ns/name" (static for
 * the struct's life) or NULL without a table; *ret_error (newly allocated)
 * why the table could not be read, or NULL. Reads the ConfigMap with kc
 * when the cached copy is stale. */
void prices_lookup(struct prices *p, struct kclient *kc, const char *model, char **ret_json,
                   const char **ret_where, char **ret_error);

/* Pure: the one-entry table {"prices": {"<model>": {input, cachedInput,
 * output}}} for the entry price_lookup finds (newly allocated), or NULL. */
char *prices_entry_json(const struct price_table *t, const char *model);

#endif
