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

/* Model client (model/) */
#define TERN_MODEL_MAX_REQUEST     (8u << 20)  /* one chat completion request body */
#define TERN_MODEL_MAX_RESPONSE    (4u << 20)  /* one chat completion response body */
#define TERN_MODEL_MAX_TOOL_CALLS  64          /* tool calls in one model message */
#define TERN_MODEL_MAX_PRICES      1024        /* entries of a price table */
#define TERN_MODEL_MAX_RETRIES     20          /* configurable retry count cap */

/* Tool policy (policy/) */
#define TERN_POLICY_MAX_PATTERN    256         /* one glob */
#define TERN_POLICY_MAX_PATTERNS   64          /* requiresApproval / writablePaths entries */
#define TERN_POLICY_MAX_PATH       4096        /* a tool's path argument */
#define TERN_POLICY_MAX_CMD        65536       /* exec_command cmd */
#define TERN_POLICY_MAX_WRITE      (4u << 20)  /* write_file content */
#define TERN_POLICY_MAX_DEPTH      32          /* list_files depth */

/* Runner (runner/) */
#define TERN_RUNNER_MAX_MEMORY     (64u << 10) /* simple.md inlined in the system prompt */
#define TERN_RUNNER_MAX_SKILLS     200         /* skills index entries in the prompt */
#define TERN_RUNNER_MAX_OUTPUT     (32u << 10) /* a tool result sent to the model / journaled */
#define TERN_RUNNER_MAX_EVENTS     (1u << 20)  /* events replayed for one session */
#define TERN_RUNNER_MAX_SANDBOX_BODY (16u << 20) /* one sandboxd response */

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

#endif
