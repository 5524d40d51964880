/* kubeconfig.h - where the API server is and how to authenticate to it.
 *
 * A struct kubeconfig is built once (from a kubeconfig document, or from the
 * in-cluster service-account files) and then shared, read-only except for its
 * internal credential cache, by every thread's kclient: kubeconfig_creds is
 * thread-safe. Everything the struct points to is owned by it.
 *
 * Authentication sources, in kubectl's order of precedence for one user:
 * client certificate + key (PEM data or files, read into memory at load; the
 * key never touches another file), bearer token, tokenFile (re-read on every
 * call: projected service-account tokens rotate), exec credential plugin
 * (run on first use, again when its credential expires, and again when the
 * server answered 401: kubeconfig_creds with rejected_gen).
 *
 * Exec plugins are started with posix_spawnp and an argv array (never a
 * shell), get KUBERNETES_EXEC_INFO plus the configured env, have their stdout
 * bounded by TERN_KUBE_MAX_EXEC_OUTPUT and are killed after their timeout.
 */
#ifndef TERN_KUBECONFIG_H
#define TERN_KUBECONFIG_H

#include "base/err.h"
#include "base/limits.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

struct kubeconfig_exec {
    char *command;
    char **argv;        /* argv[0] = command; NULL-terminated */
    char **env;         /* "NAME=value" extra variables; NULL-terminated */
    char *api_version;  /* client.authentication.k8s.io/v1 or v1beta1 */
    bool provide_cluster_info;
    long timeout_ms;    /* default TERN_KUBE_EXEC_TIMEOUT_MS */
};

struct kubeconfig {
    char *server;       /* "https://host:port[/prefix]", no trailing '/' */
    char *namespace;    /* default namespace ("default" when unset) */
    char *context;      /* the context used, or NULL (in-cluster) */
    /* TLS */
    char *ca_file;      /* path, or NULL */
    char *ca_pem;       /* CA bundle PEM (certificate-authority-data), or NULL */
    size_t ca_pem_len;
    char *tls_server_name;
    bool insecure;      /* insecure-skip-tls-verify */
    char *cert_pem;     /* static client certificate PEM, or NULL */
    size_t cert_pem_len;
    char *key_pem;
    size_t key_pem_len;
    /* bearer tokens */
    char *token;        /* static token, or NULL */
    char *token_file;   /* re-read on every kubeconfig_creds call, or NULL */
    struct kubeconfig_exec *exec; /* or NULL */
    struct kubeconfig_cache *cache; /* exec credential cache (private, locked) */
    /* act as (kubectl's --as / --as-group): Impersonate-User/-Group headers */
    char *impersonate_user;            /* or NULL */
    char *impersonate_groups[TERN_KUBE_MAX_IMPERSONATE]; /* NULL-terminated */
};

/* Selections that override the document (kubectl's --context, --namespace,
 * --cluster, --user, --server). Any field may be NULL. */
struct kubeconfig_overrides {
    const char *context;
    const char *cluster;
    const char *user;
    const char *namespace;
    const char *server;
    const char *as;                /* --as */
    const char *const *as_groups;  /* --as-group, NULL-terminated (at most
                                    * TERN_KUBE_MAX_IMPERSONATE - 1), or NULL */
};

/* Credentials for one request, owned by the struct (free with
 * kubeconfig_creds_done). Any field may be NULL. */
struct kubeconfig_creds {
    unsigned gen;       /* exec credential generation (0 = not from exec) */
    char *token;
    char *cert_pem;
    size_t cert_pem_len;
    char *key_pem;
    size_t key_pem_len;
};

/* Builds a config from a parsed kubeconfig document (the JSON form of the
 * YAML). Relative file paths are resolved against base_dir (the kubeconfig
 * file's directory; NULL = the working directory). client-certificate and
 * client-key files are read into memory now; tokenFile is read per request;
 * certificate-authority is a path handed to TLS.
 * Returns 0 and *ret (free with kubeconfig_free), or TERN_EINVALID naming
 * the field, or the error of a file that could not be read. */
int kubeconfig_from_json(const cJSON *doc, const struct kubeconfig_overrides *ov,
                         const char *base_dir, struct kubeconfig **ret, struct tern_err *err);

/* Parses a kubeconfig document (YAML, which includes JSON) held in memory;
 * as kubeconfig_from_json otherwise. TERN_EPARSE for malformed text,
 * TERN_ETOOLARGE over TERN_KUBE_MAX_KUBECONFIG. */
int kubeconfig_parse(const char *text, size_t len, const struct kubeconfig_overrides *ov,
                     const char *base_dir, struct kubeconfig **ret, struct tern_err *err);

/* Reads and parses the file at path. */
int kubeconfig_load_file(const char *path, const struct kubeconfig_overrides *ov,
                         struct kubeconfig **ret, struct tern_err *err);

/* The first existing file of $KUBECONFIG (colon-separated; documents are not
 * merged), else $HOME/.kube/config. -ENOENT when there is none. */
int kubeconfig_load_default(const struct kubeconfig_overrides *ov, struct kubeconfig **ret,
                            struct tern_err *err);

/* In-cluster config: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
 * (IPv6 hosts bracketed), token, ca.crt and namespace files under dir
 * (NULL = /var/run/secrets/kubernetes.io/serviceaccount). The token file is
 * re-read per request. -ENOENT when the environment variables are unset or
 * the token file is missing. */
int kubeconfig_in_cluster(const char *dir, struct kubeconfig **ret, struct tern_err *err);

/* What a binary with a --kubeconfig flag does (client-go's
 * BuildConfigFromFlags order): path (non-empty) is loaded; else $KUBECONFIG
 * if set; else in-cluster config when KUBERNETES_SERVICE_HOST is set (with
 * sa_dir as in kubeconfig_in_cluster); else $HOME/.kube/config. Overrides
 * apply to the kubeconfig cases; in-cluster takes only ov->namespace. */
int kubeconfig_load_auto(const char *path, const struct kubeconfig_overrides *ov,
                         const char *sa_dir, struct kubeconfig **ret, struct tern_err *err);

void kubeconfig_free(struct kubeconfig *c);

/* Credentials to send now. After a 401, pass the gen of the credentials the
 * server rejected as rejected_gen (0 otherwise): if the exec plugin's cached
 * credential is still that generation the plugin is re-run, even if it has not
 * expired (so concurrent threads hitting 401 together run it once). Static
 * tokens cannot be refreshed and are returned as is. Thread-safe. Returns 0
 * and fills *ret, or the error of reading tokenFile or running the plugin. */
int kubeconfig_creds(struct kubeconfig *c, unsigned rejected_gen, struct kubeconfig_creds *ret,
                     struct tern_err *err);
void kubeconfig_creds_done(struct kubeconfig_creds *cr);

/* Whether a 401 is worth a retry with rejected_gen (an exec plugin is set). */
bool kubeconfig_can_refresh(const struct kubeconfig *c);

/* Parses an ExecCredential printed by a plugin: status.token or
 * status.clientCertificateData + clientKeyData, optional
 * status.expirationTimestamp (RFC 3339). Pure. Returns 0 with *ret and
 * *ret_expiry (0 = never), or TERN_EINVALID/TERN_EPARSE. */
int kubeconfig_parse_exec_credential(const char *text, size_t len, struct kubeconfig_creds *ret,
                                     time_t *ret_expiry, struct tern_err *err);

/* Reads a whole regular file of at most max bytes (NUL-terminated copy).
 * Returns 0, -errno or TERN_ETOOLARGE. */
int kubeconfig_read_file(const char *path, size_t max, char **ret, size_t *ret_len,
                         struct tern_err *err);

/* Parses RFC 3339 "YYYY-MM-DDTHH:MM:SS[.frac](Z|+hh:mm)" into epoch seconds. */
int kubeconfig_parse_time(const char *s, time_t *ret);

#endif
