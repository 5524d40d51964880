/* tspec.h - the AgentTrigger spec as a validated C struct, and the sessions
 * a trigger creates (pure).
 *
 * tspec_parse mirrors crds/agenttriggers.tern.dev.yaml (bounds, enums,
 * defaults, unknown fields refused) plus what a schema cannot say: the cron
 * syntax, the time zone's name, the templates' placeholders and field
 * paths. Errors name the field path ("spec.schedule.cron: ...").
 *
 * tspec_session builds the AgentSession a trigger creates: named
 * deterministically (tspec_webhook_session_name, tspec_schedule_session_name)
 * so that creating it is idempotent, owned by the trigger (garbage
 * collected with it), labelled tern.dev/trigger=<name>, naming the
 * trigger's template.
 *
 * Ownership: struct tspec owns its strings (tspec_free accepts NULL).
 */
#ifndef TERN_TRIGGER_TSPEC_H
#define TERN_TRIGGER_TSPEC_H

#include "base/err.h"
#include "trigger/cron.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TSPEC_LABEL_TRIGGER   "tern.dev/trigger"
#define TSPEC_LABEL_SOURCE    "tern.dev/trigger-source" /* webhook | schedule */
#define TSPEC_ANN_DELIVERY    "tern.dev/delivery"
#define TSPEC_ANN_SCHEDULED   "tern.dev/scheduled-time"
#define TSPEC_DEFAULT_DELIVERY_HEADER "X-GitHub-Delivery"
#define TSPEC_DEFAULT_SUCCESS_HISTORY 3
#define TSPEC_DEFAULT_FAILED_HISTORY  1

enum tspec_policy { TSPEC_ALLOW = 0, TSPEC_FORBID, TSPEC_REPLACE };

struct tspec_filter {
    bool header;   /* a request header (name) or a payload field path */
    char *name;
    char **values; /* accepted values, compared as text */
    size_t nvalues;
};

struct tspec {
    char *name, *namespace, *uid; /* metadata (NULL when absent) */
    char *template_name;          /* spec.templateRef.name */
    char *objective;              /* spec.objective: a tmap template */
    char *context;                /* spec.context: a tmap template, or NULL */
    bool suspend;
    int64_t success_history, failed_history;
    struct {
        bool set;
        char *cron_text;
        struct cron cron;
        char *time_zone;       /* "UTC" when absent */
        enum tspec_policy policy;
        int64_t starting_deadline; /* seconds, -1 = none */
    } schedule;
    struct {
        bool set;
        char *secret_name, *secret_key;
        char *delivery_header;
        struct tspec_filter *filters;
        size_t nfilters;
    } webhook;
};

/* Parses an AgentTrigger object. 0 and *ret, or TERN_EINVALID. */
int tspec_parse(const cJSON *obj, struct tspec **ret, struct tern_err *err);
void tspec_free(struct tspec *t);

/* "Allow", "Forbid", "Replace". */
const char *tspec_policy_name(enum tspec_policy p);

/* <trigger>-<first 16 hex digits of SHA-256("webhook:" delivery id)>; the
 * id is any byte string. New string. */
char *tspec_webhook_session_name(const char *trigger, const char *delivery_id);
/* <trigger>-<slot in Unix minutes>. New string. */
char *tspec_schedule_session_name(const char *trigger, int64_t slot);

/* The AgentSession object (new, owned by the caller) named name, with the
 * rendered objective and context (context may be NULL), source "webhook"
 * or "schedule", and one annotation (ann_key: ann_value). */
cJSON *tspec_session(const struct tspec *t, const char *name, const char *objective,
                     const char *context, const char *source, const char *ann_key,
                     const char *ann_value);

/* Whether the filters accept a delivery: every entry's header or field
 * has one of its values. header(ctx, name) returns a header's value or
 * NULL. */
bool tspec_filter_match(const struct tspec *t, const cJSON *payload,
                        const char *(*header)(void *ctx, const char *name), void *hctx,
                        const char **ret_failed);

#endif
