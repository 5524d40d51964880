/* apiwatch.h - one shared etcd watch fanned out to many watchers.
 *
 * The hub runs one etcd watch on the whole /registry/ prefix (with previous
 * values) in a background thread and keeps the recent events in a bounded
 * ring, like kube-apiserver's watch cache. A subscriber starts after a
 * revision and receives, in revision order, every event under its key
 * prefix with a greater revision. A start revision older than the ring's
 * window (or events evicted before a slow subscriber read them) is answered
 * with TERN_ECOMPACTED, which the REST layer turns into 410 Expired.
 *
 * Thread-safe. Events returned are owned by the caller.
 */
#ifndef TERN_APIWATCH_H
#define TERN_APIWATCH_H

#include "base/err.h"
#include "etcd/etcd.h"

#include <stdbool.h>
#include <stdint.h>

struct apiwatch_hub;
struct apiwatch_sub;

struct apiwatch_event {
    bool deleted;          /* etcd DELETE (else PUT) */
    char *key;
    char *value;           /* PUT: the new value; NULL for DELETE */
    size_t value_len;
    char *prev_value;      /* the previous value, or NULL (created) */
    size_t prev_len;
    int64_t revision;      /* mod_revision of the event */
};

void apiwatch_event_free(struct apiwatch_event *e);

/* Starts the hub: it delivers every event after revision from_rev under
 * prefix. max_events bounds the ring (0 = default). Returns 0 and *ret or
 * an error from pthread_create. */
int apiwatch_hub_start(struct etcd *etcd, const char *prefix, int64_t from_rev, size_t max_events,
                       struct apiwatch_hub **ret, struct tern_err *err);
/* Stops the thread, wakes every subscriber (they get -ECANCELED) and frees
 * the hub once they are gone. Subscribers must be released before. */
void apiwatch_hub_stop(struct apiwatch_hub *h);

/* The newest revision the hub has seen (events or progress). */
int64_t apiwatch_hub_revision(struct apiwatch_hub *h);
/* Waits until the hub has seen revision rev or timeout_ms passed; returns
 * true when seen. Lets writers make their own writes visible to watches. */
bool apiwatch_hub_wait(struct apiwatch_hub *h, int64_t rev, long timeout_ms);

/* Subscribes to events under prefix with revision > after_rev. Returns 0
 * and *ret, or TERN_ECOMPACTED when after_rev is older than the window. */
int apiwatch_subscribe(struct apiwatch_hub *h, const char *prefix, int64_t after_rev,
                       struct apiwatch_sub **ret);
void apiwatch_unsubscribe(struct apiwatch_sub *s);

/* The next event: 0 and *ret; -ETIMEDOUT when none came within timeout_ms;
 * -ECANCELED when the hub stopped; TERN_ECOMPACTED when the subscriber fell
 * out of the window. */
int apiwatch_next(struct apiwatch_sub *s, long timeout_ms, struct apiwatch_event **ret);
/* A revision up to which the subscriber has seen every event (for
 * bookmarks). */
int64_t apiwatch_sub_progress(struct apiwatch_sub *s);
/* The oldest revision a new subscription may start after. */
int64_t apiwatch_hub_oldest(struct apiwatch_hub *h);

#endif
