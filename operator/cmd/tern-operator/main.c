/* tern-operator - reconciles AgentSessions (docs/design.md, "The reconcile";
 * docs/operator.md).
 *
 * Flags (each also readable from the TERN_* environment variable named in
 * the usage text): --kubeconfig (else $KUBECONFIG, in-cluster, then
 * ~/.kube/config), --etcd-endpoints, --namespace (empty = all),
 * --leader-elect, --metrics-addr, --health-addr, --runner-image,
 * --sandbox-image, plus --log-level, --workers, --runner-service-account,
 * --lease-namespace, --id. */
#include "base/buf.h"
#include "base/err.h"
#include "base/limits.h"
#include "base/mem.h"
#include "base/num.h"
#include "base/tlog.h"
#include "controller/controller.h"
#include "controller/jaccess.h"
#include "journal/journal.h"
#include "etcd/etcd.h"
#include "http/endpoint.h"
#include "kube/kclient.h"
#include "kube/kubeconfig.h"
#include "kube/leader.h"
#include "kube/recorder.h"
#include "metrics/metrics.h"
#include "streamapi/sapi.h"
#include "streamapi/sapi_kube.h"
#include "trigger/tctl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct opts {
    const char *kubeconfig, *etcd_endpoints, *namespace, *metrics_addr, *health_addr;
    const char *runner_image, *sandbox_image, *log_level, *runner_sa, *lease_ns, *id;
    const char *storage_class, *runtime_class, *pull_policy, *model_secret, *model_key;
    const char *etcd_ca, *etcd_cert, *etcd_key, *etcd_user, *etcd_pass_file, *etcd_root_pass_file;
    const char *runner_cert, *runner_key;
    const char *api_addr, *api_cert, *api_key, *api_ca, *apiservice;
    const char *prices_cm, *test_clock, *test_hook;
    const char *egress_proxy, *egress_proxy_ns, *egress_proxy_labels;
    const char *webhook_addr, *webhook_cert, *webhook_key, *zoneinfo, *fault;
    const char *ns_ttls;
    bool leader_elect, journal_init;
    int64_t workers, clock_skew;
    int64_t session_ttl;
    int64_t artifact_max_file, artifact_max_total;
};

static const struct flag {
    const char *name, *env, *help;
    size_t off;
    int kind; /* 0 string, 1 bool, 2 int (1..64), 3 seconds (0..31536000), 4 signed
                * seconds (a clock skew, +-10 years), 5 bytes (1..TERN_ARTIFACTS_TOTAL_CAP) */
} flags[] = {
#define F(n, e, k, field, h) {n, e, h, offsetof(struct opts, field), k}
    F("kubeconfig", "TERN_KUBECONFIG", 0, kubeconfig, "kubeconfig file (default: in-cluster)"),
    F("etcd-endpoints", "TERN_ETCD_ENDPOINTS", 0, etcd_endpoints, "journal etcd URLs, comma-separated"),
    F("etcd-ca-file", "TERN_ETCD_CA_FILE", 0, etcd_ca, "CA of the journal etcd's certificate"),
    F("etcd-cert-file", "TERN_ETCD_CERT_FILE", 0, etcd_cert, "client certificate for the journal"),
    F("etcd-key-file", "TERN_ETCD_KEY_FILE", 0, etcd_key, "its key"),
    F("etcd-username", "TERN_ETCD_USERNAME", 0, etcd_user,
      "the operator's etcd user (default tern-operator)"),
    F("etcd-password-file", "TERN_ETCD_PASSWORD_FILE", 0, etcd_pass_file, "its password"),
    F("etcd-root-password-file", "TERN_ETCD_ROOT_PASSWORD_FILE", 0, etcd_root_pass_file,
      "etcd root's password: locks the journal (one etcd user per session)"),
    F("etcd-runner-cert-file", "TERN_ETCD_RUNNER_CERT_FILE", 0, runner_cert,
      "the runners' client certificate (copied into each session's Secret)"),
    F("etcd-runner-key-file", "TERN_ETCD_RUNNER_KEY_FILE", 0, runner_key, "its key"),
    F("journal-init", "TERN_JOURNAL_INIT", 1, journal_init,
      "set up the journal etcd's users and auth, then exit"),
    F("api-addr", "TERN_API_ADDR", 0, api_addr,
      "HOST:PORT of the aggregated API stream.tern.dev (empty: off)"),
    F("api-cert-file", "TERN_API_CERT_FILE", 0, api_cert, "its serving certificate"),
    F("api-key-file", "TERN_API_KEY_FILE", 0, api_key, "its key"),
    F("api-ca-file", "TERN_API_CA_FILE", 0, api_ca,
      "the CA of that certificate, kept in the APIService's caBundle"),
    F("apiservice", "TERN_APISERVICE", 0, apiservice,
      "the APIService's name (default v1alpha1.stream.tern.dev)"),
    F("namespace", "TERN_NAMESPACE", 0, namespace, "watch one namespace (default: all)"),
    F("leader-elect", "TERN_LEADER_ELECT", 1, leader_elect, "elect a leader on a Lease"),
    F("metrics-addr", "TERN_METRICS_ADDR", 0, metrics_addr, "HOST:PORT for /metrics (empty: off)"),
    F("health-addr", "TERN_HEALTH_ADDR", 0, health_addr, "HOST:PORT for /healthz, /readyz"),
    F("runner-image", "TERN_RUNNER_IMAGE", 0, runner_image, "image of turn Jobs (tern-runner)"),
    F("sandbox-image", "TERN_SANDBOX_IMAGE", 0, sandbox_image, "default sandbox image"),
    F("runner-service-account", "TERN_RUNNER_SERVICE_ACCOUNT", 0, runner_sa,
      "default service account of runner pods"),
    F("storage-class", "TERN_SANDBOX_STORAGE_CLASS", 0, storage_class, "default workspace storage class"),
    F("runtime-class", "TERN_SANDBOX_RUNTIME_CLASS", 0, runtime_class, "default sandbox runtimeClassName"),
    F("image-pull-policy", "TERN_IMAGE_PULL_POLICY", 0, pull_policy, "imagePullPolicy of children"),
    F("model-secret-name", "TERN_MODEL_SECRET_NAME", 0, model_secret,
      "Secret with the model API key for sessions that name none"),
    F("model-secret-key", "TERN_MODEL_SECRET_KEY", 0, model_key, "key in that Secret"),
    F("prices-configmap", "TERN_PRICES_CONFIGMAP", 0, prices_cm,
      "NAMESPACE/NAME of the price table ConfigMap (key prices.json); without it, sessions "
      "with a cost limit are refused"),
    F("egress-proxy", "TERN_EGRESS_PROXY", 0, egress_proxy,
      "HOST:PORT of tern-egress-proxy for sandboxes (a name is resolved at start; empty: none)"),
    F("egress-proxy-namespace", "TERN_EGRESS_PROXY_NAMESPACE", 0, egress_proxy_ns,
      "namespace of the proxy pods (with --egress-proxy-labels)"),
    F("egress-proxy-labels", "TERN_EGRESS_PROXY_LABELS", 0, egress_proxy_labels,
      "k=v,... of the proxy pods: sandbox NetworkPolicies admit them (default: by address)"),
    F("webhook-addr", "TERN_WEBHOOK_ADDR", 0, webhook_addr,
      "HOST:PORT of the AgentTrigger webhook receiver, HTTPS (empty: off)"),
    F("webhook-tls-cert", "TERN_WEBHOOK_TLS_CERT", 0, webhook_cert,
      "PEM certificate file of the webhook receiver"),
    F("webhook-tls-key", "TERN_WEBHOOK_TLS_KEY", 0, webhook_key, "PEM key file of that certificate"),
    F("zoneinfo-dir", "TERN_ZONEINFO_DIR", 0, zoneinfo,
      "tz database of AgentTrigger schedules (default /usr/share/zoneinfo)"),
    F("trigger-clock-skew", "TERN_TRIGGER_CLOCK_SKEW", 4, clock_skew,
      "seconds added to the schedules' clock (tests only)"),
    F("fault", "TERN_FAULT", 0, fault,
      "tests only: webhook-exit-before-create | webhook-exit-after-create | "
      "artifacts-kill-after-store"),
    F("artifact-max-file", "TERN_ARTIFACT_MAX_FILE", 5, artifact_max_file,
      "bytes: a file of output/ larger than this is not stored (default 262144)"),
    F("artifact-max-total", "TERN_ARTIFACT_MAX_TOTAL", 5, artifact_max_total,
      "bytes: the files of one persisted set together (default 786432, at most 921600)"),
    F("lease-namespace", "TERN_POD_NAMESPACE", 0, lease_ns, "namespace of the leader Lease"),
    F("id", "TERN_POD_NAME", 0, id, "this replica's identity"),
    F("log-level", "TERN_LOG_LEVEL", 0, log_level, "debug|info|warn|error"),
    F("workers", "TERN_WORKERS", 2, workers, "reconcile workers (default 8)"),
    F("test-clock-file", "TERN_TEST_CLOCK_FILE", 0, test_clock,
      "tests only: a file with seconds to add to the clock of AgentBudget windows"),
    F("test-runner-hook", "TERN_TEST_RUNNER_HOOK", 0, test_hook,
      "tests only: SESSION=SPEC gives that session's turn Jobs TERN_TEST_HOOK=SPEC"),
    F("ttl-seconds-after-finished", "TERN_TTL_SECONDS_AFTER_FINISHED", 3, session_ttl,
      "delete finished sessions this long after they finished, unless their "
      "spec.ttlSecondsAfterFinished says otherwise (0: keep them)"),
    F("namespace-ttl-seconds-after-finished", "TERN_NAMESPACE_TTL_SECONDS_AFTER_FINISHED", 0,
      ns_ttls,
      "NS=SECONDS,...: per-namespace defaults over --ttl-seconds-after-finished (0: keep "
      "them there); spec.ttlSecondsAfterFinished still wins"),
#undef F
};

static void usage(FILE *f)
{
    fprintf(f, "usage: tern-operator [--flag=value ...]\n\n");
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        fprintf(f, "  --%-24s %s (env %s)\n", flags[i].name, flags[i].help, flags[i].env);
}

static int set_flag(struct opts *o, const struct flag *f, const char *v)
{
    char *base = (char *)o + f->off;
    if (f->kind == 0) {
        *(const char **)base = v;
    } else if (f->kind == 1) {
        if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
            *(bool *)base = true;
        else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
            *(bool *)base = false;
        else
            return -EINVAL;
    } else if (f->kind == 5) {
        if (num_parse_range(v, 1, TERN_ARTIFACTS_TOTAL_CAP, (int64_t *)base))
            return -EINVAL;
    } else if (f->kind == 4) {
        if (num_parse_range(v, -315360000, 315360000, (int64_t *)base))
            return -EINVAL;
    } else if (num_parse_range(v, f->kind == 3 ? 0 : 1, f->kind == 3 ? 31536000 : 64,
                               (int64_t *)base)) {
        return -EINVAL;
    }
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const char *v = getenv(flags[i].env);
        if (v && *v && set_flag(o, &flags[i], v)) {
            fprintf(stderr, "tern-operator: bad value in %s\n", flags[i].env);
            return -EINVAL;
        }
    }
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "tern-operator: unexpected argument %s\n", arg);
            return -EINVAL;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t n = eq ? (size_t)(eq - name) : strlen(name);
        const struct flag *f = NULL;
        for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
            if (strlen(flags[i].name) == n && strncmp(flags[i].name, name, n) == 0)
                f = &flags[i];
        if (!f) {
            fprintf(stderr, "tern-operator: unknown flag %s\n", arg);
            return -EINVAL;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v && f->kind == 1)
            v = "true";
        if (!v) {
            if (a + 1 >= argc) {
                fprintf(stderr, "tern-operator: %s needs a value\n", arg);
                return -EINVAL;
            }
            v = argv[++a];
        }
        if (set_flag(o, f, v)) {
            fprintf(stderr, "tern-operator: bad value for --%s: %s\n", f->name, v);
            return -EINVAL;
        }
    }
    return 0;
}

static bool set(const char *s)
{
    return s && *s;
}

/* The journal's clients: the operator's own and, on a locked journal
 * (--etcd-root-password-file), root's for the sessions' users, after
 * setting etcd's auth up or repairing it (journal_access_init). */
static int journal_clients(const struct opts *o, struct etcd **ret, struct etcd **ret_admin,
                           struct tern_err *err)
{
    bool locked = set(o->etcd_root_pass_file);
    const char *user = set(o->etcd_user)          ? o->etcd_user
                       : set(o->etcd_pass_file) ? JOURNAL_OPERATOR_USER
                                                : NULL;
    if (locked && (!set(o->etcd_pass_file) || !set(o->etcd_ca) || !set(o->etcd_cert) ||
                   !set(o->etcd_key) || !set(o->runner_cert) || !set(o->runner_key)))
        return err_set(err, TERN_EINVALID,
                       "a locked journal (--etcd-root-password-file) needs --etcd-ca-file, "
                       "--etcd-cert-file, --etcd-key-file, --etcd-password-file, "
                       "--etcd-runner-cert-file and --etcd-runner-key-file");
    struct etcd_settings es = {
        .endpoints = o->etcd_endpoints,
        .ca_file = set(o->etcd_ca) ? o->etcd_ca : NULL,
        .cert_file = set(o->etcd_cert) ? o->etcd_cert : NULL,
        .key_file = set(o->etcd_key) ? o->etcd_key : NULL,
        .username = user,
        .password_file = set(o->etcd_pass_file) ? o->etcd_pass_file : NULL,
    };
    int r = 0;
    char *root_pw = NULL, *op_pw = NULL;
    char **eps = NULL;
    size_t neps = 0;
    if (locked) {
        if ((r = etcd_read_secret_file(o->etcd_root_pass_file, &root_pw, err)) ||
            (r = etcd_read_secret_file(o->etcd_pass_file, &op_pw, err)) ||
            (r = etcd_endpoints_parse(o->etcd_endpoints, &eps, &neps, err)))
            goto out;
        struct httpc_tls t = {.ca_file = es.ca_file, .cert_file = es.cert_file,
                              .key_file = es.key_file};
        struct etcd_config base = {.endpoints = (const char *const *)eps, .nendpoints = neps,
                                   .tls = &t};
        bool enabled = false;
        r = journal_access_init(&(struct journal_access_init){.base = &base,
                                                              .root_password = root_pw,
                                                              .operator_user = user,
                                                              .operator_password = op_pw,
                                                              .ret_enabled = &enabled},
                                err);
        if (r)
            goto out;
        tlog_info("journal locked", "auth", enabled ? "enabled now" : "was enabled",
                  "operatorUser", user);
        struct etcd_settings as = es;
        as.username = JOURNAL_ROOT_USER;
        as.password_file = o->etcd_root_pass_file;
        if ((r = etcd_from_settings(&as, ret_admin, err)))
            goto out;
    }
    r = etcd_from_settings(&es, ret, err);
out:
    if (root_pw)
        explicit_bzero(root_pw, strlen(root_pw));
    if (op_pw)
        explicit_bzero(op_pw, strlen(op_pw));
    free(root_pw);
    free(op_pw);
    etcd_endpoints_free(eps);
    return r;
}

/* --egress-proxy with its host as an IP literal (sandboxes have no DNS):
 * a name is resolved here, retried for up to a minute (a Service created
 * with the operator may not resolve at once). Returns a new "IP:PORT" /
 * "[IPv6]:PORT", or NULL with a logged reason. */
static char *egress_proxy_address(const char *hp)
{
    const char *colon = strrchr(hp, ':');
    int64_t port;
    if (!colon || colon == hp || num_parse_range(colon + 1, 1, 65535, &port)) {
        tlog_error("bad --egress-proxy: want HOST:PORT", "value", hp);
        return NULL;
    }
    char *host = xstrndup(hp, (size_t)(colon - hp));
    if (host[0] == '[') {
        free(host);
        return xstrdup(hp);
    }
    unsigned char a[16];
    if (inet_pton(AF_INET, host, a) == 1) {
        free(host);
        return xstrdup(hp);
    }
    char *out = NULL;
    for (int attempt = 0; attempt < 30 && !out; attempt++) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        struct addrinfo *res = NULL;
        int g = getaddrinfo(host, NULL, &hints, &res);
        if (g == 0 && res) {
            char ip[INET6_ADDRSTRLEN];
            const void *src = res->ai_family == AF_INET
                                  ? (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr
                                  : (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr;
            inet_ntop(res->ai_family, src, ip, sizeof ip);
            out = res->ai_family == AF_INET ? xasprintf("%s:%lld", ip, (long long)port)
                                            : xasprintf("[%s]:%lld", ip, (long long)port);
            tlog_info("egress proxy resolved", "name", host, "address", out);
        } else {
            tlog_warn("egress proxy does not resolve yet", "name", host, "error",
                      gai_strerror(g));
            sleep(2);
        }
        if (res)
            freeaddrinfo(res);
    }
    if (!out)
        tlog_error("egress proxy does not resolve", "name", host);
    free(host);
    return out;
}

static atomic_bool leading;

static void on_api_error(void *ctx, const char *what, const struct tern_err *err)
{
    (void)ctx;
    tlog_warn("stream API", "what", what, "error", err->msg);
}

struct app {
    struct controller *ctl;
    struct tctl *triggers;
    struct metrics *metrics;
};

static int serve(void *ctx, const char *path, struct buf *body, const char **ct)
{
    struct app *app = ctx;
    if (strcmp(path, "/healthz") == 0) {
        buf_puts(body, "ok\n");
        return 200;
    }
    if (strcmp(path, "/readyz") == 0) {
        bool ok = controller_synced(app->ctl) && tctl_synced(app->triggers);
        buf_puts(body, ok ? "ok\n" : "informers not synced\n");
        return ok ? 200 : 503;
    }
    if (strcmp(path, "/metrics") == 0) {
        controller_census(app->ctl);
        char *t = metrics_render(app->metrics);
        buf_puts(body, t);
        free(t);
        *ct = "text/plain; version=0.0.4; charset=utf-8";
        return 200;
    }
    buf_puts(body, "not found\n");
    return 404;
}

static void on_started(void *ctx)
{
    struct app *app = ctx;
    atomic_store(&leading, true);
    tlog_info("leading: starting reconcile workers");
    controller_run_workers(app->ctl);
    tctl_run_workers(app->triggers);
}

static void on_stopped(void *ctx)
{
    struct app *app = ctx;
    if (atomic_exchange(&leading, false)) {
        tlog_info("lost leadership: stopping reconcile workers");
        controller_stop_workers(app->ctl);
        tctl_stop_workers(app->triggers);
    }
}

static void on_new_leader(void *ctx, const char *id)
{
    (void)ctx;
    tlog_info("leader observed", "identity", id);
}

static void on_reconcile_error(void *ctx, const char *key, const struct tern_err *err,
                               long retry_ms)
{
    (void)ctx;
    char d[32];
    snprintf(d, sizeof d, "%ld", retry_ms);
    /* a write against a cached object that has moved on: expected while
     * events are in flight, and decided again from fresh state */
    if (err->code == TERN_ECONFLICT)
        tlog_debug("reconcile conflict", "session", key, "error", err->msg, "#retryInMs", d);
    else
        tlog_warn("reconcile failed", "session", key, "error", err->msg, "#retryInMs", d);
}

/* What happened to each session, at info; warnings as warnings. */
static void on_session_event(void *ctx, const char *key, const char *type, const char *reason,
                             const char *note)
{
    (void)ctx;
    if (type && strcmp(type, "Warning") == 0)
        tlog_warn("session event", "session", key, "type", type, "reason", reason, "note", note);
    else
        tlog_info("session event", "session", key, "type", type, "reason", reason, "note", note);
}

static void on_session_phase(void *ctx, const char *key, const char *from, const char *to,
                             const char *reason, const char *message)
{
    (void)ctx;
    tlog_info("session phase", "session", key, "from", from ? from : "", "to", to, "reason",
              reason ? reason : "", "message", message ? message : "");
}

static void on_trigger_log(void *ctx, const char *level, const char *trigger, const char *what,
                           const char *detail)
{
    (void)ctx;
    if (strcmp(level, "warn") == 0)
        tlog_warn(what, "trigger", trigger, "detail", detail);
    else if (strcmp(level, "debug") == 0)
        tlog_debug(what, "trigger", trigger, "detail", detail);
    else
        tlog_info(what, "trigger", trigger, "detail", detail);
}

/* A whole PEM file (bounded), or NULL with a logged reason. */
static char *read_pem(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tlog_error("cannot open", "file", path, "error", strerror(errno));
        return NULL;
    }
    struct buf b;
    buf_init(&b, 1u << 20);
    char chunk[4096];
    size_t n;
    int r = 0;
    while (!r && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        r = buf_append(&b, chunk, n);
    fclose(f);
    if (r) {
        tlog_error("PEM file over 1 MiB", "file", path);
        buf_done(&b);
        return NULL;
    }
    return buf_steal(&b);
}

/* Why: what the decision did, at debug. */
static void on_session_decided(void *ctx, const char *key, const char *phase, size_t nactions,
                               int64_t requeue_s, bool refs_checked)
{
    (void)ctx;
    char n[24], q[24];
    snprintf(n, sizeof n, "%zu", nactions);
    snprintf(q, sizeof q, "%lld", (long long)requeue_s);
    tlog_debug("reconciled", "session", key, "phase", phase, "#actions", n, "#requeueSeconds", q,
               "refsChecked", refs_checked ? "true" : "false");
}

int main(int argc, char **argv)
{
    struct opts o = {
        .metrics_addr = ":8080",
        .health_addr = ":8081",
        .runner_image = "ghcr.io/tern-dev/tern:0.1.0",
        .sandbox_image = "ghcr.io/tern-dev/tern-sandbox-python:0.1.0",
        .runner_sa = "tern-runner",
        .log_level = "info",
        .workers = CONTROLLER_DEFAULT_WORKERS,
    };
    if (parse_args(argc, argv, &o)) {
        usage(stderr);
        return 2;
    }
    enum tlog_level lvl = TLOG_INFO;
    if (tlog_parse_level(o.log_level, &lvl)) {
        fprintf(stderr, "tern-operator: bad --log-level %s\n", o.log_level);
        return 2;
    }
    tlog_init("tern-operator", lvl);
    kclient_set_default_user_agent("tern-operator/0.1.0");
    if (!o.etcd_endpoints || !*o.etcd_endpoints) {
        fprintf(stderr, "tern-operator: --etcd-endpoints (or TERN_ETCD_ENDPOINTS) is required\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    mallopt(M_ARENA_MAX, 2); /* see the trim loop below */
    /* Fixed thresholds: glibc raises the mmap threshold each time a large
     * block is freed, after which list pages and response bodies come from
     * the heap and their holes pin it; at 256 KiB they are mapped and
     * unmapped whole. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
    /* block the stop signals before any thread exists (threads inherit the
     * mask), so the main thread alone receives them with sigwait */
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);

    int rc = 1;
    struct tern_err err = {0};
    struct kubeconfig *kube = NULL;
    struct etcd *etcd = NULL, *admin = NULL;
    struct jaccess *jacc = NULL;
    struct children_ns_ttl *ns_ttls = NULL;
    size_t nns_ttls = 0;
    struct sapi *api = NULL;
    struct sapi_kube *apik = NULL;
    struct metrics *metrics = metrics_new();
    struct recorder *rec = NULL;
    struct controller *ctl = NULL;
    struct leader *leader = NULL;
    struct endpoint *mep = NULL, *hep = NULL, *wep = NULL;
    struct tctl *trig = NULL;
    char *wcert = NULL, *wkey = NULL;
    struct app app = {.metrics = metrics};
    char *proxy = NULL;
    if (o.egress_proxy && *o.egress_proxy && !(proxy = egress_proxy_address(o.egress_proxy)))
        goto out;

    if (o.journal_init) {
        /* a setup step (tests, an init container): the journal only */
        if (!set(o.etcd_root_pass_file)) {
            tlog_error("--journal-init needs --etcd-root-password-file");
            goto out;
        }
        if (journal_clients(&o, &etcd, &admin, &err)) {
            tlog_error("journal", "error", err.msg);
            goto out;
        }
        rc = 0;
        goto out;
    }
    int r = kubeconfig_load_auto(o.kubeconfig, NULL, NULL, &kube, &err);
    if (r) {
        tlog_error("no Kubernetes configuration", "error", err.msg);
        goto out;
    }
    {
        /* which configuration kubeconfig_load_auto took (its order), so an
         * install can be checked from the log; the token itself is never
         * logged */
        const char *kenv = getenv("KUBECONFIG"), *khost = getenv("KUBERNETES_SERVICE_HOST");
        const char *src = o.kubeconfig && *o.kubeconfig ? "--kubeconfig"
                          : kenv && *kenv               ? "KUBECONFIG"
                          : khost && *khost             ? "in-cluster"
                                                        : "~/.kube/config";
        tlog_info("kubernetes config", "source", src, "server", kube->server ? kube->server : "",
                  "tokenFile", kube->token_file ? kube->token_file : "");
    }
    if (journal_clients(&o, &etcd, &admin, &err)) {
        tlog_error("journal", "error", err.msg);
        goto out;
    }
    if (admin) {
        struct jaccess_config jc = {.admin = admin,
                                    .ca_file = o.etcd_ca,
                                    .runner_cert_file = o.runner_cert,
                                    .runner_key_file = o.runner_key};
        if (jaccess_new(&jc, &jacc, &err)) {
            tlog_error("journal access", "error", err.msg);
            goto out;
        }
    }
    if (children_parse_ns_ttls(o.ns_ttls, &ns_ttls, &nns_ttls, &err)) {
        tlog_error("--namespace-ttl-seconds-after-finished", "error", err.msg);
        goto out;
    }
    char host[256] = "tern-operator";
    gethostname(host, sizeof host - 1);
    const char *id = o.id && *o.id ? o.id : host;
    struct recorder_opts ro = {.controller = "tern.dev/operator", .instance = id};
    rec = recorder_new(kube, &ro);
    struct controller_config cc = {
        .kube = kube,
        .etcd = etcd,
        .jaccess = jacc,
        .recorder = rec,
        .metrics = metrics,
        .namespace = o.namespace,
        .workers = (int)o.workers,
        .on_error = on_reconcile_error,
        .on_event = on_session_event,
        .on_phase = on_session_phase,
        .on_decided = on_session_decided,
        .prices_configmap = o.prices_cm && *o.prices_cm ? o.prices_cm : NULL,
        .test_clock_file = o.test_clock && *o.test_clock ? o.test_clock : NULL,
        .test_runner_hook = o.test_hook && *o.test_hook ? o.test_hook : NULL,
        .artifacts =
            {
                .max_file = (size_t)o.artifact_max_file,
                .max_total = (size_t)o.artifact_max_total,
                .kill_after_store = o.fault && strcmp(o.fault, "artifacts-kill-after-store") == 0,
            },
        .children =
            {
                .runner_image = o.runner_image,
                .sandbox_image = o.sandbox_image,
                .etcd_endpoints = o.etcd_endpoints,
                .journal_locked = jacc != NULL,
                .runner_service_account = o.runner_sa,
                .storage_class = o.storage_class && *o.storage_class ? o.storage_class : NULL,
                .runtime_class = o.runtime_class && *o.runtime_class ? o.runtime_class : NULL,
                .image_pull_policy = o.pull_policy && *o.pull_policy ? o.pull_policy : NULL,
                .model_secret = o.model_secret && *o.model_secret ? o.model_secret : NULL,
                .model_secret_key = o.model_key && *o.model_key ? o.model_key : "api-key",
                .turn_backoff_limit = 4,
                .job_ttl_seconds = 3600,
                .session_ttl_seconds = o.session_ttl,
                .ns_ttls = ns_ttls,
                .nns_ttls = nns_ttls,
                .egress_proxy = proxy,
                .egress_proxy_namespace =
                    o.egress_proxy_ns && *o.egress_proxy_ns ? o.egress_proxy_ns : NULL,
                .egress_proxy_labels =
                    o.egress_proxy_labels && *o.egress_proxy_labels ? o.egress_proxy_labels : NULL,
            },
    };
    if (controller_new(&cc, &ctl, &err) || controller_start(ctl, &err)) {
        tlog_error("controller", "error", err.msg);
        goto out;
    }
    app.ctl = ctl;
    if (set(o.api_addr)) {
        if (!set(o.api_cert) || !set(o.api_key)) {
            tlog_error("--api-addr needs --api-cert-file and --api-key-file");
            goto out;
        }
        struct sapi_kube_config kc = {.kube = kube,
                                      .ctl = ctl,
                                      .children = &cc.children,
                                      .ca_file = set(o.api_ca) ? o.api_ca : NULL,
                                      .apiservice = o.apiservice,
                                      .on_error = on_api_error};
        struct sapi_config sc = {.listen = o.api_addr, .cert_file = o.api_cert,
                                 .key_file = o.api_key};
        if (sapi_kube_new(&kc, &apik, &err)) {
            tlog_error("stream API", "error", err.msg);
            goto out;
        }
        sapi_kube_backend(apik, etcd, &sc.backend);
        if (sapi_start(&sc, &api, &err)) {
            tlog_error("stream API", "error", err.msg);
            goto out;
        }
        char port[16];
        snprintf(port, sizeof port, "%d", sapi_port(api));
        if (sapi_kube_start(apik, api, &err))
            tlog_warn("stream API: no front-proxy trust yet (every request is refused until "
                      "it is read)",
                      "error", err.msg);
        tlog_info("stream API serving", "addr", o.api_addr, "port", port);
    }
    {
        struct tctl_config tc = {
            .kube = kube,
            .recorder = rec,
            .metrics = metrics,
            .namespace = o.namespace,
            .zoneinfo_dir = o.zoneinfo && *o.zoneinfo ? o.zoneinfo : NULL,
            .clock_skew = o.clock_skew,
            .on_log = on_trigger_log,
        };
        if (o.fault && strcmp(o.fault, "webhook-exit-before-create") == 0)
            tc.fault = TCTL_FAULT_EXIT_BEFORE_CREATE;
        else if (o.fault && strcmp(o.fault, "webhook-exit-after-create") == 0)
            tc.fault = TCTL_FAULT_EXIT_AFTER_CREATE;
        else if (o.fault && *o.fault && strcmp(o.fault, "artifacts-kill-after-store") != 0) {
            tlog_error("unknown --fault", "value", o.fault);
            goto out;
        }
        if (tctl_new(&tc, &trig, &err) || tctl_start(trig, &err)) {
            tlog_error("triggers", "error", err.msg);
            goto out;
        }
        app.triggers = trig;
    }
    if (o.webhook_addr && *o.webhook_addr) {
        if (!o.webhook_cert || !*o.webhook_cert || !o.webhook_key || !*o.webhook_key) {
            tlog_error("--webhook-addr needs --webhook-tls-cert and --webhook-tls-key");
            goto out;
        }
        if (!(wcert = read_pem(o.webhook_cert)) || !(wkey = read_pem(o.webhook_key)))
            goto out;
        struct endpoint_opts eo = {.cert_pem = wcert,
                                   .key_pem = wkey,
                                   .max_body = TERN_WEBHOOK_MAX_BODY,
                                   .max_connections = TERN_WEBHOOK_MAX_CONNECTIONS,
                                   .fn = tctl_webhook,
                                   .ctx = trig};
        if (endpoint_start_opts(o.webhook_addr, &eo, &wep, &err)) {
            tlog_error("webhook endpoint", "error", err.msg);
            goto out;
        }
        char port[16];
        snprintf(port, sizeof port, "%d", endpoint_port(wep));
        tlog_info("webhook receiver listening", "addr", o.webhook_addr, "#port", port);
    }
    if (o.metrics_addr && *o.metrics_addr && endpoint_start(o.metrics_addr, serve, &app, &mep, &err)) {
        tlog_error("metrics endpoint", "error", err.msg);
        goto out;
    }
    if (o.health_addr && *o.health_addr && endpoint_start(o.health_addr, serve, &app, &hep, &err)) {
        tlog_error("health endpoint", "error", err.msg);
        goto out;
    }
    tlog_info("started", "identity", id, "namespace", o.namespace ? o.namespace : "",
              "leaderElect", o.leader_elect ? "true" : "false");
    if (o.leader_elect) {
        struct leader_opts lo = {
            .namespace = o.lease_ns && *o.lease_ns ? o.lease_ns : "default",
            .name = "tern-operator",
            .identity = id,
            .on_started = on_started,
            .on_stopped = on_stopped,
            .on_new_leader = on_new_leader,
            .ctx = &app,
        };
        int lerr = 0;
        leader = leader_new(kube, &lo, &lerr);
        if (!leader || leader_start(leader)) {
            tlog_error("leader election could not start");
            goto out;
        }
    } else {
        on_started(&app);
    }
    /* Memory: every informer, worker and watch thread would get its own
     * malloc arena, and a relist's transient peak (pages of objects parsed
     * at once) then stays resident in each; two arenas and a trim every
     * 30 s give it back (figures in docs/operator.md). */
    int sig = -1;
    while (sig < 0) {
        struct timespec every = {.tv_sec = 30};
        sig = sigtimedwait(&stop_set, NULL, &every);
        if (sig < 0)
            malloc_trim(0);
    }
    tlog_info("stopping", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    rc = 0;
out:
    if (leader) {
        leader_stop(leader); /* releases the Lease; on_stopped stops workers */
        leader_free(leader);
    }
    endpoint_stop(mep);
    endpoint_stop(hep);
    sapi_kube_free(apik);
    sapi_stop(api);
    endpoint_stop(wep);
    tctl_free(trig);
    free(wcert);
    free(wkey);
    controller_free(ctl);
    recorder_free(rec);
    jaccess_free(jacc);
    etcd_free(etcd);
    etcd_free(admin);
    kubeconfig_free(kube);
    metrics_free(metrics);
    free(proxy);
    children_ns_ttls_free(ns_ttls, nns_ttls);
    return rc;
}
