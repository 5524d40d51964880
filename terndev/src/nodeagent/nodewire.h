/* nodewire.h - tern-node's wiring: the local kubelet (kubelet/kubelet.h,
 * the same code tern-dev runs in-process) as the node agent of any
 * Kubernetes API server, over HTTPS with a kubeconfig (normally a client
 * certificate for system:node:<name> in group system:nodes, which the Node
 * authorizer and NodeRestriction admission expect).
 *
 * What runs:
 *  - the kubelet in scheduled_only mode (kubelet_run on its own thread):
 *    registers the Node, renews its Lease, runs the pods the scheduler binds
 *    to it, writes their status; projected service-account tokens come from
 *    the TokenRequest API, bound to the pod;
 *  - the local-path provisioner (nodeagent/localpv.h) on a second thread,
 *    with its volumes under DIR/volumes;
 *  - the kubelet endpoint (nodeagent/kubeletapi.h) for `kubectl logs`,
 *    authorizing each caller with a SubjectAccessReview.
 * Each of the three has its own connection to the API server.
 */
#ifndef TERN_NODEWIRE_H
#define TERN_NODEWIRE_H

#include "base/err.h"

#include <stdbool.h>

struct nodewire_cfg {
    const char *kubeconfig;      /* path (required) */
    const char *dir;             /* the node's directory (absolute) */
    const char *node;            /* Node name */
    const char *listen;          /* kubelet endpoint "host:port" */
    const char *cert_file;       /* its serving certificate and key */
    const char *key_file;
    const char *client_ca_file;  /* CA of the API server's client certificate */
    const char *bin_dir;         /* bound at /opt/tern/bin in pods; NULL: none */
    const char *pod_network;     /* kubelet_cfg.pod_network (NULL: its default) */
    bool netpol_unenforced;      /* kubelet_cfg.netpol_unenforced */
    int register_timeout_ms;     /* wait for the Node object; 30000 when 0 */
    /* errors of the kubelet's passes and of the provisioner (may be NULL;
     * called from their threads) */
    void (*on_error)(void *ctx, const char *what, const char *msg);
    void *on_error_ctx;
};

struct nodewire;

/* Starts everything and returns once the Node object exists. 0 and *ret,
 * or an error (kubeconfig, TLS files, address, registration). */
int nodewire_start(const struct nodewire_cfg *cfg, struct nodewire **ret, struct tern_err *err);
/* The kubelet endpoint's port. */
int nodewire_port(const struct nodewire *w);
/* Stops the endpoint and the provisioner, then the kubelet: running pods
 * get SIGTERM and grace_ms before SIGKILL (their objects stay as they are,
 * as with a kubelet that stops). Accepts NULL. */
void nodewire_stop(struct nodewire *w, int grace_ms);

#endif
