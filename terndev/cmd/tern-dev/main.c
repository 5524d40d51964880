/* tern-dev - a single-machine Kubernetes API server on etcd.
 *
 *   tern-dev up [--dir DIR] [--port N] [--etcd URL] [--authz-log FILE]
 *
 * Runs in the foreground (docs/design.md, "Contracts between the parts"):
 * starts its own etcd (Debian's /usr/bin/etcd, data in DIR/etcd, free
 * loopback ports) unless --etcd is given, serves HTTPS on 127.0.0.1:N (0 =
 * any free port) with a CA and serving certificate generated on first start
 * (DIR/pki), writes DIR/kubeconfig (server, CA, bearer token) and
 * DIR/tern-dev.pid, prints exactly one line
 * "tern-dev ready kubeconfig=DIR/kubeconfig" once serving,
 * authenticates the kubeconfig's token as an unrestricted admin and the
 * service-account tokens its kubelet mounts into pods as their accounts,
 * which RBAC then authorizes (apiserver/apiauth.h; --authz-log appends each
 * decision for those accounts to FILE), runs the controllers and the local
 * kubelet (TERN_DEV_KUBELET=0: not) in-process (docs/tern-dev-kubelet.md),
 * and on SIGTERM/SIGINT stops the pods gracefully, stops serving, then stops
 * the etcd it started.
 */
#include "apiserver/apiauth.h"
#include "apiserver/apipki.h"
#include "apiserver/apirest.h"
#include "apiserver/apiserver.h"
#include "apiserver/apiwatch.h"
#include "base/base64.h"
#include "base/mem.h"
#include "base/num.h"
#include "base/tlog.h"
#include "devctl/satoken.h"
#include "etcd/etcd.h"
#include "etcdproc.h"
#include "json/json.h"
#include "kubelet/devwire.h"
#include "kubelet/kubelet.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(void)
{
    fprintf(stderr, "usage: tern-dev up [--dir DIR] [--port N] [--etcd URL] [--authz-log FILE]\n");
}

static int write_text(const char *path, const char *text)
{
    char *tmp = xasprintf("%s.tmp", path);
    int rc = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        off += (size_t)n;
    }
    close(fd);
    if (!rc && rename(tmp, path))
        rc = -errno;
out:
    free(tmp);
    return rc;
}

static char *kubeconfig_text(uint16_t port, const char *ca_pem, const char *token)
{
    char *ca = base64_encode(ca_pem, strlen(ca_pem));
    char *s = xasprintf("apiVersion: v1\n"
                        "kind: Config\n"
                        "clusters:\n"
                        "- name: tern-dev\n"
                        "  cluster:\n"
                        "    server: https://127.0.0.1:%u\n"
                        "    certificate-authority-data: %s\n"
                        "users:\n"
                        "- name: tern-dev\n"
                        "  user:\n"
                        "    token: %s\n"
                        "contexts:\n"
                        "- name: tern-dev\n"
                        "  context:\n"
                        "    cluster: tern-dev\n"
                        "    user: tern-dev\n"
                        "    namespace: default\n"
                        "current-context: tern-dev\n",
                        (unsigned)port, ca, token);
    free(ca);
    return s;
}

/* The port of a previous run's kubeconfig (0 if none), so that with --port 0
 * a restarted tern-dev keeps its address and running clients reconnect. */
static uint16_t previous_port(const char *kc_path)
{
    FILE *f = fopen(kc_path, "re");
    if (!f)
        return 0;
    char line[512];
    uint16_t port = 0;
    static const char key[] = "    server: https://127.0.0.1:";
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, sizeof(key) - 1) != 0)
            continue;
        char *p = line + sizeof(key) - 1;
        size_t n = strcspn(p, "\r\n");
        p[n] = 0;
        int64_t v;
        if (num_parse_range(p, 1, 65535, &v) == 0)
            port = (uint16_t)v;
    }
    fclose(f);
    return port;
}

static int pod_log_path(void *ctx, const cJSON *pod, const char *container, bool previous,
                        char **ret, struct tern_err *err)
{
    return kubelet_log_path(ctx, pod, container, previous, ret, err);
}

static bool pod_log_running(void *ctx, const cJSON *pod, const char *container,
                            int64_t restart_count)
{
    (void)ctx;
    return kubelet_log_running(pod, container, restart_count);
}

/* kube-system/extension-apiserver-authentication, as kube-apiserver
 * publishes it: how aggregated API servers recognise tern-dev's proxied
 * requests (the front-proxy CA, its client's name, the identity headers). */
static int publish_front_proxy(struct apirest *rest, const char *ca_pem, struct tern_err *err)
{
    cJSON *cm = cJSON_CreateObject();
    cJSON_AddStringToObject(cm, "apiVersion", "v1");
    cJSON_AddStringToObject(cm, "kind", "ConfigMap");
    cJSON *m = cJSON_AddObjectToObject(cm, "metadata");
    cJSON_AddStringToObject(m, "name", "extension-apiserver-authentication");
    cJSON_AddStringToObject(m, "namespace", "kube-system");
    cJSON *d = cJSON_AddObjectToObject(cm, "data");
    cJSON_AddStringToObject(d, "requestheader-client-ca-file", ca_pem);
    cJSON_AddStringToObject(d, "requestheader-allowed-names", "[\"front-proxy-client\"]");
    cJSON_AddStringToObject(d, "requestheader-username-headers", "[\"X-Remote-User\"]");
    cJSON_AddStringToObject(d, "requestheader-group-headers", "[\"X-Remote-Group\"]");
    cJSON_AddStringToObject(d, "requestheader-extra-headers-prefix", "[\"X-Remote-Extra-\"]");
    char *body = json_print(cm);
    cJSON_Delete(cm);
    cJSON *out = NULL;
    int st = apirest_do(rest, "PATCH",
                        "/api/v1/namespaces/kube-system/configmaps/"
                        "extension-apiserver-authentication?fieldManager=tern-dev&force=true",
                        "application/apply-patch+yaml", body, &out);
    free(body);
    int rc = 0;
    if (st != 200 && st != 201) {
        char *t = out ? json_print(out) : NULL;
        rc = err_set(err, TERN_EINVALID, "publishing extension-apiserver-authentication: HTTP %d %s",
                     st, t ? t : "");
        free(t);
    }
    cJSON_Delete(out);
    return rc;
}

int main(int argc, char **argv)
{
    tlog_init("tern-dev", TLOG_INFO);
    if (argc < 2 || strcmp(argv[1], "up") != 0) {
        usage();
        return 2;
    }
    const char *dir = ".tern-dev", *etcd_url = NULL, *authz_log = NULL;
    int64_t port = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
            if (num_parse_range(argv[++i], 0, 65535, &port)) {
                usage();
                return 2;
            }
        } else if (strcmp(argv[i], "--etcd") == 0 && i + 1 < argc) {
            etcd_url = argv[++i];
        } else if (strcmp(argv[i], "--authz-log") == 0 && i + 1 < argc) {
            authz_log = argv[++i];
        } else {
            usage();
            return 2;
        }
    }
    /* signals are taken synchronously by the main thread; every thread
     * started later inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    int status = 1;
    struct tern_err err = {0};
    struct etcdproc ep = {0};
    struct etcd *etcd = NULL;
    struct apiwatch_hub *hub = NULL;
    struct apirest rest;
    bool rest_up = false;
    struct apipki pki = {0};
    struct apiserver *srv = NULL;
    struct apiauth *auth = NULL;
    struct apiagg *agg = NULL;
    struct devwire *cluster = NULL;
    char *abs_dir = NULL, *kc_path = NULL, *pid_path = NULL, *pki_dir = NULL;

    if (mkdir(dir, 0700) && errno != EEXIST) {
        tlog_error("cannot create directory", "dir", dir, "error", strerror(errno));
        goto out;
    }
    abs_dir = realpath(dir, NULL);
    if (!abs_dir) {
        tlog_error("cannot resolve directory", "dir", dir, "error", strerror(errno));
        goto out;
    }
    if (!etcd_url) {
        char *data = xasprintf("%s/etcd", abs_dir);
        int rc = etcdproc_start(&ep, data, &err);
        free(data);
        if (rc) {
            tlog_error("cannot start etcd", "error", err.msg);
            goto out;
        }
        etcd_url = ep.url;
    }
    const char *eps[] = {etcd_url};
    struct etcd_config ec = {.endpoints = eps, .nendpoints = 1, .timeout_ms = 10000};
    if (etcd_new(&ec, &etcd, &err)) {
        tlog_error("bad etcd endpoint", "error", err.msg);
        goto out;
    }
    int64_t rev = 0;
    if (etcd_revision(etcd, &rev, &err)) {
        tlog_error("etcd unavailable", "error", err.msg);
        goto out;
    }
    if (apiwatch_hub_start(etcd, "/registry/", rev, 0, &hub, &err)) {
        tlog_error("cannot start watch", "error", err.msg);
        goto out;
    }
    pki_dir = xasprintf("%s/pki", abs_dir);
    if (mkdir(pki_dir, 0700) && errno != EEXIST) {
        tlog_error("cannot create directory", "dir", pki_dir, "error", strerror(errno));
        goto out;
    }
    if (apipki_ensure(pki_dir, &pki, &err)) {
        tlog_error("cannot set up certificates", "error", err.msg);
        goto out;
    }
    unsigned char sa_key[SATOKEN_KEY_LEN];
    char *key_path = xasprintf("%s/sa.key", abs_dir);
    int krc = satoken_key_load(key_path, sa_key, &err);
    free(key_path);
    if (krc) {
        tlog_error("cannot load the service-account key", "error", err.msg);
        goto out;
    }
    struct apiserver_config sc = {.rest = &rest, .cert_pem = pki.cert_pem,
                                  .key_pem = pki.key_pem, .port = (uint16_t)port};
    /* the REST layer needs the address for /api; start it first with a
     * placeholder and fix it once the port is known */
    if (apirest_init(&rest, etcd, hub, "127.0.0.1", &err)) {
        tlog_error("cannot initialise", "error", err.msg);
        goto out;
    }
    rest_up = true;
    if (apirest_bootstrap(&rest, &err)) {
        tlog_error("cannot create the default namespaces", "error", err.msg);
        goto out;
    }
    struct apiauth_config ac = {.rest = &rest, .admin_token = pki.token, .sa_key = sa_key,
                                .log_path = authz_log};
    int arc = apiauth_new(&ac, &auth, &err);
    explicit_bzero(sa_key, sizeof sa_key);
    if (arc) {
        tlog_error("cannot open the authorization log", "error", err.msg);
        goto out;
    }
    sc.auth = auth;
    /* aggregated APIs (APIService): proxied with the front-proxy client
     * certificate, whose CA aggregated servers read from kube-system */
    struct apiagg_config gc = {.rest = &rest, .client_cert_pem = pki.fp_cert_pem,
                               .client_key_pem = pki.fp_key_pem};
    if (apiagg_new(&gc, &agg, &err) || publish_front_proxy(&rest, pki.fp_ca_pem, &err)) {
        tlog_error("cannot set up API aggregation", "error", err.msg);
        goto out;
    }
    sc.agg = agg;
    kc_path = xasprintf("%s/kubeconfig", dir);
    if (port == 0)
        sc.port = previous_port(kc_path);
    if (apiserver_start(&sc, &srv, &err) && sc.port && port == 0) {
        sc.port = 0; /* the old port is taken: any free one */
        err = (struct tern_err){0};
        if (apiserver_start(&sc, &srv, &err))
            srv = NULL;
    }
    if (!srv) {
        tlog_error("cannot serve", "error", err.msg);
        goto out;
    }
    free(rest.server_address);
    rest.server_address = xasprintf("127.0.0.1:%u", (unsigned)apiserver_port(srv));
    char *kc = kubeconfig_text(apiserver_port(srv), pki.ca_pem, pki.token);
    int wrc = write_text(kc_path, kc);
    free(kc);
    if (wrc) {
        tlog_error("cannot write kubeconfig", "path", kc_path, "error", strerror(-wrc));
        goto out;
    }
    pid_path = xasprintf("%s/tern-dev.pid", dir);
    char pidtxt[32];
    snprintf(pidtxt, sizeof(pidtxt), "%ld\n", (long)getpid());
    if ((wrc = write_text(pid_path, pidtxt))) {
        tlog_error("cannot write pid file", "path", pid_path, "error", strerror(-wrc));
        goto out;
    }
    /* the controllers and the local kubelet (docs/tern-dev-kubelet.md) */
    struct devwire_cfg dw = {.rest = &rest, .dir = abs_dir, .port = apiserver_port(srv),
                             .ca_pem = pki.ca_pem};
    /* test knob: TERN_DEV_JOB_BACKOFF_SECONDS (default Kubernetes' 10, 0 = none) */
    const char *bo = getenv("TERN_DEV_JOB_BACKOFF_SECONDS");
    int64_t bov;
    if (bo && num_parse_range(bo, 0, 600, &bov) == 0)
        dw.job_backoff_s = bov == 0 ? -1 : (int)bov;
    /* NetworkPolicy egress (docs/tern-dev-kubelet.md): pods whose egress is
     * restricted get a network namespace on TERN_DEV_POD_NETWORK (a /16,
     * default 10.213.0.0/16), which needs root;
     * TERN_DEV_NETWORK_POLICY=unenforced runs them in the host's namespace
     * with their egress unrestricted instead */
    const char *pn = getenv("TERN_DEV_POD_NETWORK");
    dw.pod_network = pn && *pn ? pn : NULL;
    const char *npe = getenv("TERN_DEV_NETWORK_POLICY");
    if (npe && *npe && strcmp(npe, "unenforced") != 0 && strcmp(npe, "enforced") != 0) {
        tlog_error("TERN_DEV_NETWORK_POLICY must be enforced or unenforced", "value", npe);
        goto out;
    }
    dw.netpol_unenforced = npe && strcmp(npe, "unenforced") == 0;
    /* they run unless TERN_DEV_KUBELET=0 (an API server alone, for tests
     * of the API); with them, deletions follow the lifecycle rules that need
     * a garbage collector and namespace controller, and pods/log is served */
    const char *kon = getenv("TERN_DEV_KUBELET");
    if (!(kon && strcmp(kon, "0") == 0)) {
        rest.lifecycle_controllers = true;
        rest.log_path = pod_log_path;
        rest.log_running = pod_log_running;
        rest.log_ctx = abs_dir;
        if (devwire_start(&dw, &cluster, &err)) {
            tlog_error("cannot start the controllers and kubelet", "error", err.msg);
            goto out;
        }
    }
    printf("tern-dev ready kubeconfig=%s\n", kc_path);
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    tlog_info("stopping", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    status = 0;
out:
    devwire_stop(cluster, 10000); /* pods: SIGTERM, 10 s, SIGKILL */
    apiserver_stop(srv);
    apiagg_free(agg);
    apiauth_free(auth);
    if (rest_up)
        apirest_done(&rest);
    apiwatch_hub_stop(hub);
    etcd_free(etcd);
    etcdproc_stop(&ep);
    apipki_done(&pki);
    if (pid_path)
        unlink(pid_path);
    free(pid_path);
    free(kc_path);
    free(pki_dir);
    free(abs_dir);
    return status;
}
