/* children.h - the objects a session owns, built from its spec (pure).
 *
 * Every builder returns a new cJSON object (owned by the caller) ready to be
 * created through the API: apiVersion, kind, metadata (name, namespace,
 * labels, an ownerReference to the session with controller=true and
 * blockOwnerDeletion=true) and spec. Names are derived from the session name
 * (<= SESSION_MAX_NAME characters, so every child name stays within the
 * 63-character label limit Jobs need):
 *
 *   <s>-workspace      PersistentVolumeClaim (the workspace, outlives pods;
 *                      the only child of a parked session)
 *   <s>-sandbox-token  Secret (sandboxd's bearer token; runner, sandbox, viewer)
 *   <s>-journal        Secret (the runner's journal credentials; runner only,
 *                      when the journal is locked: controller/jaccess.h)
 *   <s>-task           ConfigMap (task.md: objective, context, references)
 *   <s>-sandbox        NetworkPolicy and Pod (tern-sandboxd)
 *   <s>-t<n>           Job (turn n, runs tern-runner)
 *   <s>-files-xxxxx    Job (a read-only file viewer while the sandbox is parked)
 *
 * Labels on everything: tern.dev/session=<name>, tern.dev/session-uid=<uid>,
 * tern.dev/role=workspace|sandbox|runner|task|token|journal|viewer, app.kubernetes.io/managed-by=tern.
 * The sandbox pod carries tern.dev/sandbox-hash, a hash of the spec fields
 * that shape it: a change means "recreate at the next turn boundary".
 */
#ifndef TERN_CHILDREN_H
#define TERN_CHILDREN_H

#include "base/err.h"
#include "spec/session_spec.h"

#include <cJSON.h>
#include <stdint.h>

/* A namespace's default time to live of finished sessions (0: keep). */
struct children_ns_ttl {
    char *ns;
    int64_t seconds;
};

#define CHILDREN_MAX_NS_TTLS 256

/* Operator-wide settings that fill what a session leaves unset. */
struct children_config {
    const char *runner_image;
    const char *sandbox_image;        /* default for spec.sandbox.image */
    const char *etcd_endpoints;       /* passed to runners */
    bool journal_locked;              /* turn Jobs mount <s>-journal (jaccess.h) */
    const char *runner_service_account; /* default for spec.identity */
    const char *runtime_class;        /* default, or NULL */
    const char *storage_class;        /* default, or NULL */
    const char *image_pull_policy;    /* NULL = cluster default */
    const char *model_secret;         /* default API-key Secret, or NULL */
    const char *model_secret_key;
    int64_t turn_backoff_limit;       /* Job backoffLimit (retryable failures) */
    int64_t job_ttl_seconds;          /* ttlSecondsAfterFinished */
    /* sessions without spec.ttlSecondsAfterFinished are deleted this long
     * after they finished; <= 0: kept (--ttl-seconds-after-finished) */
    int64_t session_ttl_seconds;
    /* namespace defaults that take precedence over session_ttl_seconds
     * (--namespace-ttl-seconds-after-finished; children_parse_ns_ttls) */
    const struct children_ns_ttl *ns_ttls;
    size_t nns_ttls;
    /* The egress proxy sandboxes use (docs/egress.md); NULL = none, and
     * then host entries of networkAllowlist allow nothing. */
    const char *egress_proxy;           /* "HOST:PORT" for HTTP(S)_PROXY (HOST an IP literal) */
    const char *egress_proxy_namespace; /* with _labels: the NetworkPolicy admits the proxy */
    const char *egress_proxy_labels;    /* pods by selector ("k=v,k2=v2"); NULL: by address */
};

#define CHILDREN_LABEL_SESSION     "tern.dev/session"
#define CHILDREN_LABEL_SESSION_UID "tern.dev/session-uid"
#define CHILDREN_LABEL_ROLE        "tern.dev/role"
#define CHILDREN_LABEL_TURN        "tern.dev/turn"
#define CHILDREN_ANN_SANDBOX_HASH  "tern.dev/sandbox-hash"
#define CHILDREN_RUNNER_EXIT_CONFIG 78 /* tern-runner: configuration error */

/* Parses "NS=SECONDS[,NS=SECONDS...]" (namespaces DNS labels, each once;
 * seconds 0..SESSION_MAX_TTL_SECONDS; at most CHILDREN_MAX_NS_TTLS; "" is
 * none). Returns 0 with a new array (children_ns_ttls_free), or
 * TERN_EINVALID naming the bad entry. */
int children_parse_ns_ttls(const char *text, struct children_ns_ttl **ret, size_t *ret_n,
                           struct tern_err *err);
void children_ns_ttls_free(struct children_ns_ttl *v, size_t n);
/* The time to live of s's finished state: spec.ttlSecondsAfterFinished,
 * else its namespace's default, else the operator's; -1: kept. */
int64_t children_session_ttl(const struct session_spec *s, const struct children_config *c);

/* Child names, newly allocated. */
char *children_name(const char *session, const char *suffix);
char *children_job_name(const char *session, int64_t turn);

/* The sandbox hash of a spec: 16 hex digits into out[17]. */
const char *children_sandbox_hash(const struct session_spec *s, const struct children_config *c,
                                  char out[17]);

cJSON *children_pvc(const struct session_spec *s, const struct children_config *c);
/* token: the sandbox bearer token (random, chosen by the caller once). */
cJSON *children_token_secret(const struct session_spec *s, const char *token);
cJSON *children_task_configmap(const struct session_spec *s);
/* Ingress only from the session's runners (and its forks' copy Jobs) on
 * sandboxd's port; egress only to the egress proxy's port (when c has one)
 * and to the CIDR entries of networkAllowlist. */
cJSON *children_network_policy(const struct session_spec *s, const struct children_config *c);
/* With an egress proxy the container's environment has HTTP_PROXY,
 * HTTPS_PROXY (and their lower-case forms) = http://<proxy>, and NO_PROXY
 * = localhost,127.0.0.1,::1 plus the CIDR entries, which tern-sandboxd
 * passes on to every command (SANDBOX_PASS_ENV). */
cJSON *children_sandbox_pod(const struct session_spec *s, const struct children_config *c);
/* The NO_PROXY value for s (new string). */
char *children_no_proxy(const struct session_spec *s);
/* The Job of turn n (tern-runner turn). prices_json (may be NULL): the
 * price of the session's model as a one-entry price table; it becomes the
 * pod annotation tern.dev/prices, projected by the downward API to
 * CHILDREN_PRICES_FILE, which TERN_PRICES_FILE names (so an edited price
 * table applies from the next turn, with no object per session). The
 * runner container's termination message falls back to its log. The
 * Secrets of spec.tools (MCP headers, publish tokens) are mounted under
 * CHILDREN_TRUSTED_DIR, in this pod only. */
cJSON *children_turn_job(const struct session_spec *s, const struct children_config *c,
                         int64_t turn, const char *prices_json);
/* The runner pod's mounts of spec.tools' Secrets (the runner's
 * RUNNER_TRUSTED_DIR; the sandbox pod never mounts them). */
#define CHILDREN_TRUSTED_DIR   "/var/run/tern/trusted"
#define CHILDREN_DEADLINE_GRACE 60 /* s past timeoutSeconds before a turn Job is killed */
#define CHILDREN_ANN_PRICES    "tern.dev/prices"
#define CHILDREN_PRICES_DIR    "/var/run/tern/prices"
#define CHILDREN_PRICES_FILE   CHILDREN_PRICES_DIR "/prices.json"
/* The fork copy Job <child>-copy (tern-runner copy --from --to), owned by
 * the child session: streams the parent sandbox's snapshot into the
 * child's. from_token_secret: the parent's token Secret (same namespace),
 * mounted at CHILDREN_FROM_TOKEN_DIR. Its pod carries the label
 * tern.dev/copy-from-uid=<parent uid>, which the parent's NetworkPolicy
 * admits. */
cJSON *children_copy_job(const struct session_spec *child, const struct children_config *c,
                         const char *from_addr, const char *to_addr,
                         const char *from_token_secret);
/* The file viewer of a parked session (Job <s>-files-xxxxx, role viewer):
 * tern-sandboxd --read-only --idle-exit 120 over the workspace volume
 * mounted read-only, for the aggregated API's files and content
 * (streamapi/sapi_kube.h) while there is no sandbox pod. Made with
 * spec.suspend: the reconcile creates the token Secret and the
 * NetworkPolicy it needs (a parked session has neither), then resumes it. */
cJSON *children_viewer_job(const struct session_spec *s, const struct children_config *c);
#define CHILDREN_FROM_TOKEN_DIR   "/var/run/tern/from-token"
/* where turn Jobs mount <s>-journal: ca.crt, tls.crt, tls.key, username, password */
#define CHILDREN_JOURNAL_DIR      "/var/run/tern/journal"
#define CHILDREN_LABEL_COPY_FROM  "tern.dev/copy-from-uid"

#endif
