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

/* etcd client (etcd module) */
#define TERN_ETCD_MAX_ENDPOINTS    16
#define TERN_ETCD_POOL_IDLE        8            /* idle connections kept per client */
#define TERN_ETCD_MAX_RESPONSE     (64u << 20)  /* one unary response body */
#define TERN_ETCD_MAX_KEY          4096         /* one key we send */

/* journal module */
#define TERN_JOURNAL_MAX_DATA      (16u << 20)  /* one event's data, chunked */
#define TERN_JOURNAL_CHUNK         (384u << 10) /* one chunk of an oversize event */
#define TERN_JOURNAL_MAX_UID       128
#define TERN_JOURNAL_MAX_PAGE      10000        /* events per replay page */

/* yaml/yamljson */
#define TERN_YAML_MAX_EXPANDED_BYTES (64u << 20) /* scalar+key bytes after alias expansion */

/* tern-dev controllers and local kubelet (devctl/, kubelet/) */
#define TERN_KUBELET_MAX_PROC_FILE   8192        /* a /proc/<pid>/stat or cgroup file */
#define TERN_KUBELET_MAX_PIDS_FILE   (64u << 10) /* DIR/pods/<uid>/pids */
#define TERN_KUBELET_MAX_VALUE       (1u << 20)  /* one expanded env value / downward file */
#define TERN_KUBELET_MAX_KEY_FILE    4096        /* the service-account key file */

#endif
