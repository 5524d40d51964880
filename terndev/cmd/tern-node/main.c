/* tern-node - Tern's kubelet as the node agent of any Kubernetes API server.
 *
 *   tern-node --kubeconfig FILE [--dir DIR] [--node-name NAME]
 *             [--listen HOST:PORT] --tls-cert F --tls-key F --client-ca F
 *             [--bin-dir DIR]
 *
 * The same kubelet code tern-dev runs in-process, wired to a real API server
 * over HTTPS (nodeagent/nodewire.h): registers the Node NAME (default
 * tern-node) and renews its Lease, runs the pods the scheduler binds to it
 * as bubblewrap sandboxes (files under DIR, default .tern-node), provisions
 * local volumes for claims of the tern.dev/local-path StorageClass, and
 * serves the kubelet endpoint for `kubectl logs` on --listen (default
 * 127.0.0.1:10250; port 0 = any free port) with the serving certificate
 * --tls-cert/--tls-key to clients whose certificate --client-ca signed.
 * --bin-dir (default: this binary's directory) is bound at /opt/tern/bin
 * in every pod, so images are not pulled (docs/tern-node.md).
 *
 * Prints exactly one line "tern-node ready node=NAME kubelet=HOST:PORT" once
 * the Node exists; on SIGTERM/SIGINT stops the pods (SIGTERM, 10 s, SIGKILL)
 * and exits 0. Exit 1: could not start; 2: bad usage.
 */
#include "base/mem.h"
#include "base/tlog.h"
#include "devctl/fsutil.h"
#include "nodeagent/nodewire.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Logs a component's error when it differs from the last one it reported
 * or a minute has passed (a failing pass repeats every second). */
static void log_error(void *ctx, const char *what, const char *msg)
{
    (void)ctx;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char last[2][512];
    static time_t at[2];
    int i = strcmp(what, "kubelet") == 0 ? 0 : 1;
    time_t now = time(NULL);
    pthread_mutex_lock(&mu);
    bool again = strcmp(last[i], msg) != 0 || now - at[i] >= 60;
    if (again) {
        snprintf(last[i], sizeof last[i], "%s", msg);
        at[i] = now;
    }
    pthread_mutex_unlock(&mu);
    if (again)
        tlog_warn("pass failed", "component", what, "error", msg);
}

static void usage(void)
{
    fprintf(stderr, "usage: tern-node --kubeconfig FILE [--dir DIR] [--node-name NAME]\n"
                    "                 [--listen HOST:PORT] --tls-cert F --tls-key F --client-ca F\n"
                    "                 [--bin-dir DIR] [--pod-network CIDR/16]\n"
                    "                 [--network-policy enforced|unenforced]\n");
}

int main(int argc, char **argv)
{
    tlog_init("tern-node", TLOG_INFO);
    const char *kubeconfig = NULL, *dir = ".tern-node", *node = "tern-node";
    const char *listen = "127.0.0.1:10250", *cert = NULL, *key = NULL, *client_ca = NULL;
    const char *bin_dir = NULL, *pod_network = NULL, *netpol = "enforced";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = strcmp(a, "--kubeconfig") == 0  ? &kubeconfig
                           : strcmp(a, "--dir") == 0       ? &dir
                           : strcmp(a, "--node-name") == 0 ? &node
                           : strcmp(a, "--listen") == 0    ? &listen
                           : strcmp(a, "--tls-cert") == 0  ? &cert
                           : strcmp(a, "--tls-key") == 0   ? &key
                           : strcmp(a, "--client-ca") == 0 ? &client_ca
                           : strcmp(a, "--bin-dir") == 0   ? &bin_dir
                           : strcmp(a, "--pod-network") == 0 ? &pod_network
                           : strcmp(a, "--network-policy") == 0 ? &netpol
                                                           : NULL;
        if (!dst || i + 1 >= argc) {
            usage();
            return 2;
        }
        *dst = argv[++i];
    }
    if (!kubeconfig || !cert || !key || !client_ca || !*node ||
        (strcmp(netpol, "enforced") != 0 && strcmp(netpol, "unenforced") != 0)) {
        usage();
        return 2;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    int status = 1;
    char *abs_dir = NULL, *exe = NULL;
    struct nodewire *w = NULL;
    if (mkdir(dir, 0700) && errno != EEXIST) {
        tlog_error("cannot create directory", "dir", dir, "error", strerror(errno));
        goto out;
    }
    abs_dir = realpath(dir, NULL);
    if (!abs_dir) {
        tlog_error("cannot resolve directory", "dir", dir, "error", strerror(errno));
        goto out;
    }
    if (!bin_dir)
        bin_dir = exe = fsutil_exe_dir();
    struct nodewire_cfg cfg = {.kubeconfig = kubeconfig,
                               .dir = abs_dir,
                               .node = node,
                               .listen = listen,
                               .cert_file = cert,
                               .key_file = key,
                               .client_ca_file = client_ca,
                               .bin_dir = bin_dir,
                               .pod_network = pod_network,
                               .netpol_unenforced = strcmp(netpol, "unenforced") == 0,
                               .on_error = log_error};
    struct tern_err err = {0};
    if (nodewire_start(&cfg, &w, &err)) {
        tlog_error("cannot start", "error", err.msg);
        goto out;
    }
    char port[16];
    snprintf(port, sizeof port, "%d", nodewire_port(w));
    const char *colon = strrchr(listen, ':');
    printf("tern-node ready node=%s kubelet=%.*s:%s\n", node, (int)(colon - listen), listen, port);
    fflush(stdout);
    tlog_info("registered", "node", node, "kubelet_port", port);
    int sig = 0;
    sigwait(&set, &sig);
    tlog_info("stopping", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    status = 0;
out:
    nodewire_stop(w, 10000);
    free(exe);
    free(abs_dir);
    return status;
}
