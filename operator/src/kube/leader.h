/* leader.h - leader election on a coordination.k8s.io/v1 Lease.
 *
 * client-go's algorithm. Every retry period a candidate reads the Lease. A
 * record that differs from the last one it saw is "observed" at the local
 * monotonic time of reading; the holder's claim is valid while
 * observed_time + leaseDurationSeconds (from the record) is in the future.
 * Clocks of different machines are never compared: renewTime is written for
 * humans and other clients, not trusted. A candidate takes the Lease when it
 * is absent, has no holder, or the claim has expired, by an update carrying
 * the resourceVersion it read (the server's optimistic concurrency makes at
 * most one of several candidates win); acquireTime and leaseTransitions change
 * on takeover. The leader renews every retry period; if it cannot renew for
 * renew_deadline it stops leading (on_stopped) and becomes a candidate again.
 * leader_stop releases the Lease (empty holder, duration 1 s) when leading,
 * so a successor does not wait out the lease.
 *
 * Defaults: lease 15 s, renew deadline 10 s, retry 2 s (must satisfy
 * lease > renew deadline > retry). One thread with its own kclient; callbacks
 * run on that thread.
 */
#ifndef TERN_LEADER_H
#define TERN_LEADER_H

#include "kube/kclient.h"
#include "kube/kubeconfig.h"

#include <stdbool.h>

struct leader;

struct leader_opts {
    const char *namespace;       /* of the Lease */
    const char *name;            /* of the Lease */
    const char *identity;        /* this candidate (e.g. pod name + random suffix) */
    long lease_ms;               /* default 15000 (written in whole seconds, >= 1) */
    long renew_deadline_ms;      /* default 10000 */
    long retry_ms;               /* default 2000 */
    void (*on_started)(void *ctx);   /* became leader */
    void (*on_stopped)(void *ctx);   /* lost or gave up leadership */
    void (*on_new_leader)(void *ctx, const char *identity); /* observed holder changed */
    void *ctx;
    struct kclient_opts client;
};

/* cfg borrowed. Returns NULL (and -EINVAL in *ret_err) on bad durations or
 * a missing name/identity. Not started. */
struct leader *leader_new(struct kubeconfig *cfg, const struct leader_opts *opts, int *ret_err);
int leader_start(struct leader *l);
/* Stops the elector; releases the Lease if leading (on_stopped is called).
 * Idempotent. */
void leader_stop(struct leader *l);
/* Stops without releasing (as a crashed process would). For tests. */
void leader_abandon(struct leader *l);
void leader_free(struct leader *l);
bool leader_is_leader(struct leader *l);
/* The holder last observed (owned by the caller; "" if none). */
char *leader_holder(struct leader *l);

#endif
