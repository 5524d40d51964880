/* limits.h - every bound on untrusted input, in one place.
 *
 * Each size, depth or count that comes from outside the process (HTTP bodies,
 * watch lines, JSON/YAML nesting, model output, tool output, file sizes) is
 * checked against one of these before anything is allocated for it. Add new
 * bounds here, never as literals next to the code that uses them.
 */
#ifndef TERN_LIMITS_H
#define TERN_LIMITS_H

/* JSON / YAML */
#define TERN_JSON_MAX_DEPTH        64          /* nesting of objects/arrays */
#define TERN_JSON_MAX_BYTES        (16u << 20) /* one JSON document */
#define TERN_YAML_MAX_DEPTH        64
#define TERN_YAML_MAX_BYTES        (8u << 20)  /* one YAML stream */
#define TERN_YAML_MAX_ALIASES      1000        /* alias references per stream */
#define TERN_YAML_MAX_NODES        (1u << 20)  /* nodes after alias expansion */
#define TERN_YAML_MAX_DOCS         1000        /* documents per stream */

/* HTTP */
#define TERN_HTTP_MAX_BODY         (16u << 20) /* default response body cap */
#define TERN_HTTP_MAX_LINE         (16u << 20) /* one streamed line (watch event) */
#define TERN_HTTP_MAX_HEADER       8192        /* one response header line kept */
#define TERN_HTTP_MAX_URL          8192

/* Kubernetes objects (kube-apiserver's own request limit is 3 MiB) */
#define TERN_KUBE_MAX_OBJECT       (3u << 20)
#define TERN_KUBE_MAX_NAME         253
#define TERN_KUBE_MAX_LABEL_VALUE  63

/* etcd (its default --max-request-bytes is 1.5 MiB) */
#define TERN_ETCD_MAX_REQUEST      (1536u << 10)
#define TERN_ETCD_MAX_VALUE        (1u << 20)   /* a single value we write */

/* Journal */
#define TERN_JOURNAL_MAX_EVENT     (512u << 10) /* larger payloads are chunked */

/* Errors */
#define TERN_ERRMSG_MAX            512

/* yaml/yamljson */
#define TERN_YAML_MAX_EXPANDED_BYTES (64u << 20) /* scalar+key bytes after alias expansion */

/* Kubernetes client (kube/) */
#define TERN_KUBE_MAX_KUBECONFIG   (1u << 20)  /* a kubeconfig file */
#define TERN_KUBE_MAX_TOKEN_FILE   (64u << 10) /* a service-account / tokenFile token */
#define TERN_KUBE_MAX_CERT_FILE    (256u << 10) /* a PEM file (CA bundle, cert, key) */
#define TERN_KUBE_MAX_EXEC_OUTPUT  (1u << 20)  /* an exec plugin's stdout */
#define TERN_KUBE_EXEC_TIMEOUT_MS  60000       /* an exec plugin's run time */
#define TERN_KUBE_MAX_LIST_BODY    (64u << 20) /* one list page */
#define TERN_KUBE_MAX_WATCH_LINE   (4u << 20)  /* one watch event line */
#define TERN_KUBE_MAX_LIST_PAGES   100000      /* continue tokens followed per list */
#define TERN_KUBE_MAX_RETRY_AFTER  30          /* seconds of Retry-After honoured */
#define TERN_KUBE_MAX_QUEUE_ITEMS  (1u << 20)  /* distinct keys in a work queue */
#define TERN_KUBE_MAX_EVENT_NOTE   1024        /* events.k8s.io note, bytes */
#define TERN_KUBE_MAX_EVENT_QUEUE  1000        /* events waiting to be written */
#define TERN_KUBE_MAX_EVENT_SERIES 4096        /* distinct events aggregated */

#endif
