/* tern-egress-proxy - the trusted egress proxy of sandbox pods
 * (docs/egress.md).
 *
 * Serves HTTP CONNECT and plain-HTTP proxying on --listen; each connection
 * is decided against the networkAllowlist of the AgentSession whose sandbox
 * pod has the connection's source address (informers on sandbox pods and
 * AgentSessions). Every decision is counted in
 * tern_egress_decisions_total{namespace,session,verdict,reason}; a refusal
 * is a Warning Event EgressRefused on the session (at most one per session
 * per --event-interval-seconds, later ones counted into the next) and a 403
 * with the reason for the client.
 *
 * Flags (each also from the environment variable in the usage text):
 * --kubeconfig, --namespace (empty = all), --listen (default :3128),
 * --metrics-addr (default :8080: /metrics, /healthz, /readyz), --hosts-file
 * and --assume-public (tests: a static name map, and CIDRs counted as
 * public), --connect-timeout-ms, --idle-timeout-seconds, --max-connections,
 * --event-interval-seconds, --id, --log-level. Prints
 * "tern-egress-proxy ready addr=HOST:PORT" once it serves (after the
 * informers have listed). Exit 0 on SIGTERM/SIGINT, 2 on bad flags, 1 when
 * it cannot start. */
#include "base/err.h"
#include "base/mem.h"
#include "base/num.h"
#include "base/tlog.h"
#include "egress/egmap.h"
#include "egress/egproxy.h"
#include "egress/egrate.h"
#include "egress/egresolve.h"
#include "http/endpoint.h"
#include "kube/informer.h"
#include "kube/kubeconfig.h"
#include "kube/recorder.h"
#include "metrics/metrics.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct opts {
    const char *kubeconfig, *namespace, *listen, *metrics_addr, *hosts_file, *assume_public;
    const char *log_level, *id;
    int64_t connect_timeout_ms, idle_timeout_s, max_connections, event_interval_s;
};

static const struct flag {
    const char *name, *env, *help;
    size_t off;
    int kind; /* 0 string, 2 int */
    int64_t min, max;
} flags[] = {
#define S(n, e, field, h) {n, e, h, offsetof(struct opts, field), 0, 0, 0}
#define I(n, e, field, lo, hi, h) {n, e, h, offsetof(struct opts, field), 2, lo, hi}
    S("kubeconfig", "TERN_KUBECONFIG", kubeconfig, "kubeconfig file (default: in-cluster)"),
    S("namespace", "TERN_NAMESPACE", namespace, "serve one namespace's sessions (default: all)"),
    S("listen", "TERN_EGRESS_LISTEN", listen, "HOST:PORT of the proxy (default :3128)"),
    S("metrics-addr", "TERN_METRICS_ADDR", metrics_addr,
      "HOST:PORT for /metrics, /healthz, /readyz (empty: off)"),
    S("hosts-file", "TERN_EGRESS_HOSTS_FILE", hosts_file,
      "static name map (ADDRESS NAME... lines) instead of DNS; for tests"),
    S("assume-public", "TERN_EGRESS_ASSUME_PUBLIC", assume_public,
      "comma-separated CIDRs whose addresses count as public; for tests"),
    I("connect-timeout-ms", "TERN_EGRESS_CONNECT_TIMEOUT_MS", connect_timeout_ms, 100, 120000,
      "connecting to an upstream address"),
    I("idle-timeout-seconds", "TERN_EGRESS_IDLE_TIMEOUT_SECONDS", idle_timeout_s, 1, 86400,
      "a connection without traffic is closed"),
    I("max-connections", "TERN_EGRESS_MAX_CONNECTIONS", max_connections, 1,
      TERN_EGRESS_MAX_CONNECTIONS, "connections served at once"),
    I("event-interval-seconds", "TERN_EGRESS_EVENT_INTERVAL_SECONDS", event_interval_s, 0, 86400,
      "at most one refusal Event per session per interval"),
    S("id", "TERN_POD_NAME", id, "this replica's name (Events' reportingInstance)"),
    S("log-level", "TERN_LOG_LEVEL", log_level, "debug|info|warn|error"),
#undef S
#undef I
};
#define NFLAGS (sizeof flags / sizeof flags[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: tern-egress-proxy [--flag=value ...]\n\n");
    for (size_t i = 0; i < NFLAGS; i++)
        fprintf(f, "  --%-24s %s (env %s)\n", flags[i].name, flags[i].help, flags[i].env);
}

static int set_flag(struct opts *o, const struct flag *f, const char *v)
{
    char *base = (char *)o + f->off;
    if (f->kind == 0) {
        *(const char **)base = v;
        return 0;
    }
    return num_parse_range(v, f->min, f->max, (int64_t *)base) ? -EINVAL : 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    for (size_t i = 0; i < NFLAGS; i++) {
        const char *v = getenv(flags[i].env);
        if (v && *v && set_flag(o, &flags[i], v)) {
            fprintf(stderr, "tern-egress-proxy: bad value in %s\n", flags[i].env);
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
            fprintf(stderr, "tern-egress-proxy: unexpected argument %s\n", arg);
            return -EINVAL;
        }
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t n = eq ? (size_t)(eq - name) : strlen(name);
        const struct flag *f = NULL;
        for (size_t i = 0; i < NFLAGS; i++)
            if (strlen(flags[i].name) == n && strncmp(flags[i].name, name, n) == 0)
                f = &flags[i];
        if (!f) {
            fprintf(stderr, "tern-egress-proxy: unknown flag %s\n", arg);
            return -EINVAL;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (a + 1 >= argc) {
                fprintf(stderr, "tern-egress-proxy: %s needs a value\n", arg);
                return -EINVAL;
            }
            v = argv[++a];
        }
        if (set_flag(o, f, v)) {
            fprintf(stderr, "tern-egress-proxy: bad value for --%s: %s\n", f->name, v);
            return -EINVAL;
        }
    }
    return 0;
}

/* --assume-public "a/b,c/d" */
static int parse_cidrs(const char *s, struct session_cidr **ret, size_t *ret_n)
{
    struct session_cidr *v = NULL;
    size_t n = 0;
    for (const char *p = s; p && *p;) {
        size_t len = strcspn(p, ",");
        char *one = xstrndup(p, len);
        struct session_cidr c;
        int r = session_cidr_parse(one, &c);
        if (r) {
            fprintf(stderr, "tern-egress-proxy: --assume-public: \"%s\" is not a CIDR\n", one);
            free(one);
            for (size_t i = 0; i < n; i++)
                free(v[i].text);
            free(v);
            return -EINVAL;
        }
        c.text = one;
        v = xreallocarray(v, n + 1, sizeof *v);
        v[n++] = c;
        p += len;
        if (*p == ',')
            p++;
    }
    *ret = v;
    *ret_n = n;
    return 0;
}

struct app {
    struct egmap *map;
    struct egrate *rate;
    struct recorder *rec;
    struct metrics *metrics;
    struct informer *pods, *sessions;
    struct egproxy *proxy;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_decision(void *ctx, const struct egproxy_decision *d)
{
    struct app *app = ctx;
    bool ok = egpolicy_allowed(d->reason);
    const char *reason = egpolicy_reason_name(d->reason);
    const char *ns = d->client ? d->client->ns : "", *sess = d->client ? d->client->session : "";
    char *l = metrics_labels("namespace", ns, "session", sess, "verdict", ok ? "allow" : "deny",
                             "reason", reason, NULL);
    metrics_add(app->metrics, "tern_egress_decisions_total", l, 1);
    free(l);
    if (ok) {
        tlog_debug("allowed", "source", d->source, "namespace", ns, "session", sess, "method",
                   d->method, "target", d->target, "address", d->address, "reason", reason);
        return;
    }
    tlog_info("refused", "source", d->source, "namespace", ns, "session", sess, "method",
              d->method, "target", d->target, "reason", reason, "message", d->message);
    if (!d->client || !app->rec)
        return;
    char *key = xasprintf("%s/%s", d->client->ns, d->client->session);
    uint64_t held = 0;
    if (egrate_allow(app->rate, key, mono_ms(), &held)) {
        struct recorder_ref ref = {
            .api_version = "tern.dev/v1alpha1",
            .kind = "AgentSession",
            .namespace = d->client->ns,
            .name = d->client->session,
            .uid = d->client->session_uid,
        };
        if (held)
            recorder_event(app->rec, &ref, "Warning", "EgressRefused", "Connect",
                           "pod %s: %s (and %llu more refusals since the last Event)",
                           d->client->pod, d->message, (unsigned long long)held);
        else
            recorder_event(app->rec, &ref, "Warning", "EgressRefused", "Connect", "pod %s: %s",
                           d->client->pod, d->message);
    } else {
        metrics_add(app->metrics, "tern_egress_events_suppressed_total", "", 1);
    }
    free(key);
}

static void pod_add(void *ctx, const cJSON *o)
{
    egmap_put_pod(((struct app *)ctx)->map, o);
}
static void pod_update(void *ctx, const cJSON *old, const cJSON *o)
{
    (void)old;
    egmap_put_pod(((struct app *)ctx)->map, o);
}
static void pod_delete(void *ctx, const cJSON *o)
{
    egmap_del_pod(((struct app *)ctx)->map, o);
}
static void sess_add(void *ctx, const cJSON *o)
{
    egmap_put_session(((struct app *)ctx)->map, o);
}
static void sess_update(void *ctx, const cJSON *old, const cJSON *o)
{
    (void)old;
    egmap_put_session(((struct app *)ctx)->map, o);
}
static void sess_delete(void *ctx, const cJSON *o)
{
    egmap_del_session(((struct app *)ctx)->map, o);
}

static int serve_http(void *ctx, const char *path, struct buf *body, const char **ct)
{
    struct app *app = ctx;
    bool synced = informer_has_synced(app->pods) && informer_has_synced(app->sessions);
    if (strcmp(path, "/healthz") == 0) {
        buf_puts(body, "ok\n");
        return 200;
    }
    if (strcmp(path, "/readyz") == 0) {
        buf_puts(body, synced ? "ok\n" : "informers not synced\n");
        return synced ? 200 : 503;
    }
    if (strcmp(path, "/metrics") == 0) {
        size_t pods = 0, sessions = 0;
        egmap_counts(app->map, &pods, &sessions);
        metrics_set(app->metrics, "tern_egress_sandbox_pods", "", (double)pods);
        metrics_set(app->metrics, "tern_egress_sessions", "", (double)sessions);
        if (app->proxy)
            metrics_set(app->metrics, "tern_egress_connections_active", "",
                        (double)egproxy_active(app->proxy));
        char *t = metrics_render(app->metrics);
        buf_puts(body, t);
        free(t);
        *ct = "text/plain; version=0.0.4; charset=utf-8";
        return 200;
    }
    buf_puts(body, "not found\n");
    return 404;
}

int main(int argc, char **argv)
{
    struct opts o = {
        .listen = ":3128",
        .metrics_addr = ":8080",
        .log_level = "info",
        .connect_timeout_ms = 10000,
        .idle_timeout_s = 600,
        .max_connections = 1024,
        .event_interval_s = 30,
    };
    if (parse_args(argc, argv, &o)) {
        usage(stderr);
        return 2;
    }
    enum tlog_level lvl = TLOG_INFO;
    if (tlog_parse_level(o.log_level, &lvl)) {
        fprintf(stderr, "tern-egress-proxy: bad --log-level %s\n", o.log_level);
        return 2;
    }
    struct session_cidr *assume = NULL;
    size_t nassume = 0;
    if (parse_cidrs(o.assume_public, &assume, &nassume))
        return 2;
    tlog_init("tern-egress-proxy", lvl);
    signal(SIGPIPE, SIG_IGN);
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL);

    int rc = 1;
    struct tern_err err = {0};
    struct kubeconfig *kube = NULL;
    struct egresolve *res = NULL;
    struct endpoint *mep = NULL;
    struct app app = {.map = egmap_new(), .metrics = metrics_new()};
    app.rate = egrate_new(o.event_interval_s * 1000);
    struct metrics *m = app.metrics;
    metrics_declare(m, "tern_egress_decisions_total", METRICS_COUNTER,
                    "Egress connections decided, by session, verdict and reason.", NULL, 0);
    metrics_declare(m, "tern_egress_events_suppressed_total", METRICS_COUNTER,
                    "Refusal Events held back by the per-session rate limit.", NULL, 0);
    metrics_declare(m, "tern_egress_connections_active", METRICS_GAUGE,
                    "Connections being served.", NULL, 0);
    metrics_declare(m, "tern_egress_sandbox_pods", METRICS_GAUGE,
                    "Sandbox pods the proxy can identify by address.", NULL, 0);
    metrics_declare(m, "tern_egress_sessions", METRICS_GAUGE, "AgentSessions watched.", NULL, 0);

    if (egresolve_new(o.hosts_file && *o.hosts_file ? o.hosts_file : NULL, &res, &err)) {
        tlog_error("hosts file", "error", err.msg);
        goto out;
    }
    if (kubeconfig_load_auto(o.kubeconfig, NULL, NULL, &kube, &err)) {
        tlog_error("no Kubernetes configuration", "error", err.msg);
        goto out;
    }
    char host[256] = "tern-egress-proxy";
    gethostname(host, sizeof host - 1);
    struct recorder_opts ro = {.controller = "tern.dev/egress-proxy",
                               .instance = o.id && *o.id ? o.id : host};
    app.rec = recorder_new(kube, &ro);
    struct informer_opts po = {
        .gvr = {"", "v1", "pods"},
        .namespace = o.namespace,
        .label_selector = "tern.dev/role=sandbox",
    };
    struct informer_handlers ph = {pod_add, pod_update, pod_delete, &app};
    struct informer_opts so = {
        .gvr = {"tern.dev", "v1alpha1", "agentsessions"},
        .namespace = o.namespace,
    };
    struct informer_handlers sh = {sess_add, sess_update, sess_delete, &app};
    app.pods = informer_new(kube, &po, &ph);
    app.sessions = informer_new(kube, &so, &sh);
    if (informer_start(app.pods) || informer_start(app.sessions)) {
        tlog_error("informers could not start");
        goto out;
    }
    if (o.metrics_addr && *o.metrics_addr &&
        endpoint_start(o.metrics_addr, serve_http, &app, &mep, &err)) {
        tlog_error("metrics endpoint", "error", err.msg);
        goto out;
    }
    /* serve only once both caches hold the cluster's state: before that
     * every client would be refused as unknown */
    for (int waited = 0;
         informer_wait_synced(app.pods, 1000) || informer_wait_synced(app.sessions, 1000);
         waited++) {
        if (sigtimedwait(&stop_set, NULL, &(struct timespec){0, 0}) >= 0) {
            rc = 0;
            goto out;
        }
        if (waited % 10 == 0) /* e.g. the AgentSession CRD is not installed yet */
            tlog_info("waiting for the pod and AgentSession lists");
    }
    struct egproxy_config pc = {
        .listen = o.listen,
        .map = app.map,
        .resolver = res,
        .assume_public = assume,
        .nassume = nassume,
        .connect_timeout_ms = (int)o.connect_timeout_ms,
        .idle_timeout_s = (int)o.idle_timeout_s,
        .max_connections = (unsigned)o.max_connections,
        .on_decision = on_decision,
        .ctx = &app,
    };
    if (egproxy_start(&pc, &app.proxy, &err)) {
        tlog_error("proxy", "error", err.msg);
        goto out;
    }
    {
        char port[21];
        num_fmt_i64(egproxy_port(app.proxy), port);
        const char *colon = strrchr(o.listen, ':');
        tlog_info("serving", "listen", o.listen, "port", port, "namespace",
                  o.namespace ? o.namespace : "", "hostsFile", o.hosts_file ? o.hosts_file : "");
        printf("tern-egress-proxy ready addr=%.*s:%s\n", (int)(colon - o.listen), o.listen, port);
        fflush(stdout);
    }
    int sig = sigwaitinfo(&stop_set, NULL);
    tlog_info("stopping", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    rc = 0;
out:
    egproxy_stop(app.proxy);
    endpoint_stop(mep);
    informer_free(app.pods);
    informer_free(app.sessions);
    recorder_free(app.rec);
    egresolve_free(res);
    egrate_free(app.rate);
    egmap_free(app.map);
    metrics_free(app.metrics);
    kubeconfig_free(kube);
    for (size_t i = 0; i < nassume; i++)
        free(assume[i].text);
    free(assume);
    return rc;
}
