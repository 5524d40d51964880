/* devrun.h - runs tern-dev's cluster components in-process: the
 * controllers (devctl.h) and the local kubelet (kubelet.h), each on its own
 * thread, acting through an objstore (objrest.h over the API server's REST
 * layer in tern-dev; the in-memory store in tests).
 *
 * The kubelet thread creates the kubelet (which kills processes a previous
 * instance left), runs it, and on stop shuts its pods down (SIGTERM, grace,
 * SIGKILL) before returning: pod processes are children of that thread.
 */
#ifndef TERN_DEVRUN_H
#define TERN_DEVRUN_H

#include "base/err.h"
#include "devctl/devctl.h"
#include "devctl/objstore.h"
#include "kubelet/kubelet.h"

#include <stdbool.h>

struct devrun_cfg {
    struct objstore store;   /* must be thread-safe (both threads use it) */
    struct devctl_cfg ctl;   /* borrowed until devrun_start returns */
    bool kubelet_only;       /* no controllers (a node of a cluster that runs its own) */
    struct kubelet_cfg kubelet;
    int period_ms;           /* resync period; 1000 when 0 */
};

struct devrun;

/* Starts both threads; returns once the kubelet is up. 0 and *ret, or the
 * kubelet's error (-errno) / -EAGAIN (threads). */
int devrun_start(const struct devrun_cfg *cfg, struct devrun **ret, struct tern_err *err);
/* Stops the controllers, then the kubelet (pods get grace_ms to exit after
 * SIGTERM), joins, frees. Accepts NULL. */
void devrun_stop(struct devrun *r, int grace_ms);

#endif
