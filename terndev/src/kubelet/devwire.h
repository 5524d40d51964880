/* devwire.h - tern-dev's in-process wiring of the controllers and the local
 * kubelet (devrun.h) to its REST layer (apiserver/apirest.h): an objrest
 * transport that hands each request to apirest_handle, so the components
 * see exactly the semantics kubectl sees.
 *
 * DIR/sa.key (created on first start) keys the service-account tokens
 * (satoken.h) the kubelet mounts into pods and the API server verifies
 * (apiserver/apiauth.h).
 */
#ifndef TERN_DEVWIRE_H
#define TERN_DEVWIRE_H

#include "apiserver/apirest.h"
#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

struct devwire_cfg {
    struct apirest *rest;   /* borrowed; must outlive devwire_stop */
    const char *dir;        /* tern-dev's DIR (absolute) */
    uint16_t port;          /* the API server's port (KUBERNETES_SERVICE_PORT) */
    const char *ca_pem;     /* the CA pods get as ca.crt */
    const char *bin_dir;    /* NULL: the directory of /proc/self/exe */
    int job_backoff_s;      /* Job pod-failure backoff base; 0 = Kubernetes' 10 s,
                             * negative = none (tests) */
    const char *pod_network; /* kubelet_cfg.pod_network (NULL: its default) */
    bool netpol_unenforced;  /* kubelet_cfg.netpol_unenforced */
};

struct devwire;

/* Starts controllers and kubelet. 0 and *ret, or an error (-errno). */
int devwire_start(const struct devwire_cfg *cfg, struct devwire **ret, struct tern_err *err);
/* Stops them; running pods get SIGTERM and grace_ms before SIGKILL. */
void devwire_stop(struct devwire *w, int grace_ms);

#endif
