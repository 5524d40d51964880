/* bspec.h - an AgentBudget: its spec, validated as the CRD
 * (crds/agentbudgets.tern.dev.yaml) says, the copy the operator mirrors
 * into etcd for the runners, and the label selector over sessions (pure).
 *
 *   spec.selector   a metav1.LabelSelector over the AgentSessions of the
 *                   budget's namespace (matchLabels, matchExpressions with
 *                   In, NotIn, Exists, DoesNotExist); absent: all of them
 *   spec.window     {period: Hour|Day|Month (Day), timeZone: IANA name (UTC)}
 *   spec.limits     concurrentSessions, sessionsStarted (per window),
 *                   tokens (per window), costMicroUSD (per window); an
 *                   absent limit does not limit, 0 allows nothing
 *
 * The mirror (the value of /tern/v1/bs/<ns>/<name>) is
 *   {"metadata": {"namespace", "name", "uid", "generation"}, "spec": {...}}
 * with the spec in normal form (defaults filled in), and bspec_parse reads it
 * back with the same rules.
 *
 * Ownership: struct bspec owns its strings (bspec_done). Errors:
 * TERN_EINVALID with the field path ("spec.limits.tokens: must be >= 0").
 */
#ifndef TERN_BUDGET_BSPEC_H
#define TERN_BUDGET_BSPEC_H

#include "base/err.h"
#include "budget/tzwin.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum bspec_dim {
    BSPEC_CONCURRENT = 0, /* sessions running a turn or holding a sandbox */
    BSPEC_STARTED,        /* sessions started in the window */
    BSPEC_TOKENS,         /* prompt + completion tokens in the window */
    BSPEC_COST,           /* model cost in micro-USD in the window */
    BSPEC_NDIMS
};

enum bspec_op { BSPEC_IN = 0, BSPEC_NOT_IN, BSPEC_EXISTS, BSPEC_NOT_EXISTS };

struct bspec_req {
    char *key;
    enum bspec_op op;
    char **values;
    size_t nvalues;
};

struct bspec_selector {
    bool set;       /* spec.selector was given */
    char **keys, **values; /* matchLabels */
    size_t nlabels;
    struct bspec_req *reqs; /* matchExpressions */
    size_t nreqs;
};

struct bspec {
    char *ns, *name;         /* metadata */
    char *uid;               /* or NULL */
    int64_t generation;
    enum tzwin_period period;
    char *time_zone;         /* validated by tzwin_name_valid, not loaded */
    int64_t limit[BSPEC_NDIMS]; /* -1 = not limited */
    struct bspec_selector selector;
};

/* Parses an AgentBudget object (or a mirror). Returns 0 and *ret (release
 * with bspec_done), or TERN_EINVALID naming the field. Pure. */
int bspec_parse(const cJSON *obj, struct bspec *ret, struct tern_err *err);
void bspec_done(struct bspec *b);

/* The mirror of b (a new tree). */
cJSON *bspec_mirror(const struct bspec *b);

/* Whether a session with these labels (an object of strings, or NULL for
 * none) is one the budget applies to. */
bool bspec_matches(const struct bspec *b, const cJSON *labels);

/* Whether a limit is set on dimension d. */
bool bspec_limited(const struct bspec *b, enum bspec_dim d);

/* "concurrentSessions", "sessionsStarted", "tokens", "costMicroUSD". */
const char *bspec_dim_name(enum bspec_dim d);
/* The condition-reason form: "ConcurrentSessions", "SessionsStarted",
 * "Tokens", "CostMicroUSD". */
const char *bspec_dim_reason(enum bspec_dim d);
/* The dimension with that name (-EINVAL if none). */
int bspec_dim_parse(const char *s, enum bspec_dim *ret);

/* An amount for people into out: "1234" or, for cost, "$1.23" /
 * "$0.001234" (micro-USD); "-" for a negative amount. Returns out. */
char *bspec_format(enum bspec_dim d, int64_t v, char out[40]);

/* A DNS-1123 label of 1..max characters. */
bool bspec_dns_label(const char *s, size_t max);

#endif
