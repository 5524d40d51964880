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
#define TERN_HTTP_CA_CACHE_S       60          /* a CA file is re-read at least this often */

/* Kubernetes objects (kube-apiserver's own request limit is 3 MiB) */
#define TERN_KUBE_MAX_IMPERSONATE  17          /* --as-group values + 1 */
#define TERN_KUBE_MAX_OBJECT       (3u << 20)
#define TERN_KUBE_MAX_NAME         253
#define TERN_KUBE_MAX_LABEL_VALUE  63

/* etcd (its default --max-request-bytes is 1.5 MiB) */
#define TERN_ETCD_MAX_REQUEST      (1536u << 10)
#define TERN_ETCD_MAX_VALUE        (1u << 20)   /* a single value we write */

/* Journal */
#define TERN_JOURNAL_MAX_EVENT     (512u << 10) /* larger payloads are chunked */
#define TERN_JOURNAL_MAX_RESULT    (32u << 10)  /* the final answer kept in the summary
                                                 * (status.result.summary maxLength) */

/* Errors */
#define TERN_ERRMSG_MAX            512

/* yaml/yamljson */
#define TERN_YAML_MAX_EXPANDED_BYTES (64u << 20) /* scalar+key bytes after alias expansion */

/* Model client (model/) */
#define TERN_MODEL_MAX_REQUEST     (8u << 20)  /* one chat completion request body */
#define TERN_MODEL_MAX_RESPONSE    (4u << 20)  /* one chat completion response body */
#define TERN_MODEL_MAX_TOOL_CALLS  64          /* tool calls in one model message */
#define TERN_MODEL_MAX_PRICES      1024        /* entries of a price table */
#define TERN_MODEL_MAX_RETRIES     20          /* configurable retry count cap */

/* Tool policy (policy/) */
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
#define TERN_RUNNER_MAX_ARTIFACTS  100         /* output/ files listed in turn_finished */
#define TERN_APPROVAL_MAX_REASON   1024        /* an approver's reason (tern.dev/reason) */
/* Memory proposals (memory/memprop, docs/tools.md "propose_memory_update") */
#define TERN_MEMORY_MAX_FILE       (256u << 10) /* simple.md a proposal may change */
#define TERN_MEMORY_MAX_REASON     1024        /* a proposal's reason */
#define TERN_MEMORY_MAX_HEADING    200         /* replace_section.heading */
#define TERN_MEMORY_MAX_SECTION    4096        /* replace_section.content */
#define TERN_MEMORY_MAX_PREVIEW    512         /* status.memoryProposals[].preview */
#define TERN_MEMORY_MAX_PROPOSALS  8           /* kept in the summary and status */
#define TERN_MEMORY_MAX_HISTORY    10          /* trail entries on the memory ConfigMap */
#define TERN_RUNNER_MAX_DETAIL     512         /* model error / refusal text in a turn's end */
#define TERN_TERMINATION_MAX       4096        /* a container's termination message (kubelet's) */

/* etcd client (etcd module) */
#define TERN_ETCD_MAX_ENDPOINTS    16
#define TERN_ETCD_POOL_IDLE        8            /* idle connections kept per client */
#define TERN_ETCD_MAX_RESPONSE     (64u << 20)  /* one unary response body */
#define TERN_ETCD_MAX_KEY          4096         /* one key we send */
#define TERN_ETCD_MAX_USER         128          /* an etcd user or role name */
#define TERN_ETCD_MAX_PASSWORD     128          /* an etcd password (file) */
#define TERN_ETCD_MAX_USERS        100000       /* users or roles listed */

/* the operator's aggregated API (streamapi/) */
#define TERN_SAPI_MAX_HEAD         16384        /* a request's head */
#define TERN_SAPI_MAX_HEADERS      64
#define TERN_SAPI_MAX_GROUPS       32           /* X-Remote-Group values */
#define TERN_SAPI_MAX_EXTRA        16           /* X-Remote-Extra-* values */
#define TERN_SAPI_MAX_CONNS        64           /* connections served at once */
#define TERN_SAPI_IO_TIMEOUT_S     30           /* reading a request, one write */
#define TERN_SAPI_PAGE             500          /* events per list page by default */
#define TERN_SAPI_MAX_PAGE         5000
#define TERN_SAPI_MAX_LIST_BYTES   (8u << 20)   /* a page of events is cut here (continue) */
#define TERN_SAPI_VIEWER_WAIT_MS   60000        /* waiting for a parked session's file viewer */
#define TERN_SAPI_SAR_CACHE        1024         /* access review answers kept (10 s) */

/* Sandbox (tern-sandboxd, operator/src/sandbox/) */
#define TERN_SANDBOX_MAX_PATH        4095        /* a workspace-relative path */
#define TERN_SANDBOX_MAX_NAME        255         /* one path component */
#define TERN_SANDBOX_MAX_EXEC_BODY   (4u << 20)  /* POST /v1/exec JSON body */
#define TERN_SANDBOX_MAX_ARGV        4096        /* argv entries */
#define TERN_SANDBOX_MAX_ENV         256         /* env additions */
#define TERN_SANDBOX_MAX_ENV_VALUE   (64u << 10) /* a variable sandboxd passes on */
#define TERN_SANDBOX_MAX_STDIN       (2u << 20)  /* "stdin" bytes */
#define TERN_SANDBOX_MAX_OUTPUT      (1u << 20)  /* kept stdout / stderr bytes, each */
#define TERN_SANDBOX_MAX_TIMEOUT_MS  (24LL * 3600 * 1000)
#define TERN_SANDBOX_MAX_PUT         (256ULL << 20) /* PUT /v1/files body */
#define TERN_SANDBOX_MAX_READ        (256ULL << 20) /* one GET /v1/files range */
#define TERN_SANDBOX_MAX_LIST        10000       /* entries per list answer */
#define TERN_SANDBOX_MAX_LIST_DEPTH  32
#define TERN_SANDBOX_MAX_TREE_DEPTH  256         /* directory nesting walked (delete, snapshot) */
#define TERN_SANDBOX_MAX_RESTORE     (16ULL << 30) /* a restore tar stream */
#define TERN_SANDBOX_MAX_TAR_ENTRIES 1000000
#define TERN_SANDBOX_MAX_PAX         (64u << 10) /* one pax extended header */
#define TERN_SANDBOX_MAX_KEY         256         /* Idempotency-Key bytes */
#define TERN_SANDBOX_MAX_RECORDS     100000      /* records listed by /v1/executions */
#define TERN_SANDBOX_MAX_GLOBS       64          /* --writable globs */
#define TERN_SANDBOX_LIVE_RING       (256u << 10) /* live output kept per stream of a running exec */
#define TERN_SANDBOX_LIVE_KEEP_S     120         /* an ended exec stays readable live */
#define TERN_SANDBOX_LIVE_MAX        16          /* ended execs kept readable */

/* journal module */
#define TERN_JOURNAL_MAX_DATA      (16u << 20)  /* one event's data, chunked */
#define TERN_JOURNAL_CHUNK         (384u << 10) /* one chunk of an oversize event */
#define TERN_JOURNAL_MAX_UID       128
#define TERN_JOURNAL_MAX_PAGE      10000        /* events per replay page */
#define TERN_JOURNAL_MAX_REASON    1024         /* summary.message: why a turn ended */
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


/* tern-dev controllers and local kubelet (devctl/, kubelet/) */
#define TERN_KUBELET_MAX_PROC_FILE   8192        /* a /proc/<pid>/stat or cgroup file */
#define TERN_KUBELET_MAX_PIDS_FILE   (64u << 10) /* DIR/pods/<uid>/pids */
#define TERN_KUBELET_MAX_VALUE       (1u << 20)  /* one expanded env value / downward file */
#define TERN_KUBELET_MAX_KEY_FILE    4096        /* the service-account key file */

/* tern-node (nodeagent/): its kubelet endpoint and TokenRequest tokens */
#define TERN_KUBELETAPI_MAX_CONNS    32          /* connections served at once */
#define TERN_KUBELETAPI_MAX_HEAD     16384       /* request line + headers, bytes */
#define TERN_KUBELETAPI_IO_TIMEOUT_S 30          /* TLS handshake, reading the head, one write */
#define TERN_KUBELETAPI_CHUNK        (64u << 10) /* log bytes per write */
#define TERN_NODE_MAX_TOKEN          (64u << 10) /* a TokenRequest's token */

/* tern-egress-proxy (egress/) */
#define TERN_EGRESS_MAX_HEAD         16384       /* a proxy request's line + headers, bytes */
#define TERN_EGRESS_MAX_HEADERS      100         /* header fields in one request */
#define TERN_EGRESS_MAX_ADDRS        16          /* addresses kept from one name lookup */
#define TERN_EGRESS_MAX_CONNECTIONS  4096        /* --max-connections cap */
#define TERN_EGRESS_MAX_HOSTS_FILE   (1u << 20)  /* the static name map (--hosts-file) */
#define TERN_EGRESS_MAX_HOSTS        4096        /* names in that map */
#define TERN_EGRESS_MAX_RATE_KEYS    4096        /* sessions whose refusal Events are rate-limited */
#define TERN_EGRESS_MAX_PODS         65536       /* sandbox pods / sessions indexed */
/* Trusted tools: credentials the runner uses outside the sandbox
 * (trusted/sanitize, mcp/, runner/mcp, runner/publish; docs/tools.md) */
#define TERN_SANITIZE_MAX_SECRETS  64          /* credential values registered */
#define TERN_SANITIZE_MAX_SECRET   8192        /* one credential value, bytes */
#define TERN_SANITIZE_MIN_SECRET   4           /* shorter values are refused (they would match anywhere) */
#define TERN_SANITIZE_MIN_FORM     8           /* a derived form (base64 core) is only searched from this length */
#define TERN_SANITIZE_MIN_PARTIAL  6           /* a form cut off at the end of a text is removed from this length */
#define TERN_SANITIZE_MAX_INPUT    (16u << 20) /* one text sanitized */
#define TERN_MCP_MAX_SERVERS       8           /* spec.tools.mcpServers */
#define TERN_MCP_MAX_ALLOWED       64          /* allowedTools of one server */
#define TERN_MCP_MAX_OFFERED       64          /* MCP tools offered to the model in total */
#define TERN_MCP_MAX_LISTED        1000        /* tools read from one server's tools/list, all pages */
#define TERN_MCP_MAX_PAGES         20          /* tools/list pages followed */
#define TERN_MCP_MAX_RESPONSE      (8u << 20)  /* one HTTP response: a JSON body or a whole SSE stream */
#define TERN_MCP_MAX_MESSAGE       (4u << 20)  /* one JSON-RPC message (an SSE event's data) */
#define TERN_MCP_MAX_SSE_LINE      (4u << 20)  /* one SSE line */
#define TERN_MCP_MAX_SSE_EVENTS    10000       /* SSE events in one response */
#define TERN_MCP_MAX_SCHEMA        (16u << 10) /* a tool's inputSchema, as compact JSON */
#define TERN_MCP_MAX_SCHEMA_DEPTH  16          /* nesting of an inputSchema */
#define TERN_MCP_MAX_DESCRIPTION   2048        /* a tool's description, bytes */
#define TERN_MCP_MAX_SERVER_NAME   16          /* spec.tools.mcpServers[].name */
#define TERN_MCP_MAX_TOOL_NAME     46          /* an MCP tool name (<server>__<tool> fits 64) */
#define TERN_MCP_MAX_ARGS          (256u << 10) /* a call's arguments, bytes */
#define TERN_MCP_MAX_ARGS_DEPTH    32          /* nesting of a call's arguments */
#define TERN_MCP_MAX_HEADERS       32          /* headers from a server's Secret */
#define TERN_MCP_MAX_HEADER_VALUE  8192        /* one header value */
#define TERN_MCP_MAX_SESSION_ID    1024        /* Mcp-Session-Id */
#define TERN_MCP_MAX_TIMEOUT_S     600         /* spec.tools.mcpServers[].timeoutSeconds */
#define TERN_PUBLISH_MAX_REMOTES   8           /* spec.tools.publish.remotes */
#define TERN_PUBLISH_MAX_REF       200         /* a branch name, bytes */
#define TERN_PUBLISH_MAX_BUNDLE    (1ULL << 30) /* a repository bundle fetched from the sandbox */
#define TERN_PUBLISH_MAX_GIT_OUTPUT (64u << 10) /* kept stdout/stderr of one git command */
#define TERN_PUBLISH_MAX_TOKEN     8192        /* a remote's token */

/* base/glob (policy approval/writable globs, spec globs, sandboxd --writable) */
#define TERN_GLOB_MAX_PATTERN 4096 /* one glob, bytes */


/* team budgets (budget/: AgentBudget, time zones, counters in etcd) */
#define TERN_TZ_MAX_NAME             64          /* an IANA time zone name */
#define TERN_TZ_MAX_FILE             (256u << 10) /* one TZif file */
#define TERN_TZ_MAX_TRANSITIONS      4096        /* transitions of one zone */
#define TERN_TZ_MAX_TYPES            256         /* local time types of one zone */
#define TERN_BUDGET_MAX_NAME         63          /* an AgentBudget's name (a DNS label) */
#define TERN_BUDGET_MAX_PER_NS       32          /* AgentBudgets in one namespace (one txn
                                                  * compares 2 keys per budget, etcd allows 128) */
#define TERN_BUDGET_MAX_SELECTOR     32          /* matchLabels + matchExpressions entries */
#define TERN_BUDGET_MAX_VALUES       64          /* values of one matchExpression */
#define TERN_BUDGET_MAX_HOLDERS      4096        /* sessions in one concurrency ledger */
#define TERN_BUDGET_MAX_VALUE        (512u << 10) /* one budget value in etcd */
#define TERN_BUDGET_MAX_LIMIT        1000000000000000LL /* tokens / micro-USD per window */
#define TERN_BUDGET_MAX_CONCURRENT   10000       /* concurrentSessions */
#define TERN_BUDGET_MAX_STARTED      1000000     /* sessionsStarted per window */
#define TERN_BUDGET_YIELD_CLAIM_MS   60000       /* an idle holder's claim to give its slot up,
                                                  * if its slot is not released by then */
#define TERN_BUDGET_TXN_ATTEMPTS     64          /* compare-and-swap rounds before giving up */
#define TERN_BUDGET_DEFAULT_COMPLETION 4096      /* max_completion_tokens sent under a budget
                                                  * when TERN_MAX_COMPLETION_TOKENS is 0 */

/* triggers (trigger/: AgentTrigger schedules and webhooks) */
#define TERN_CRON_MAX_TEXT           256         /* spec.schedule.cron */
#define TERN_CRON_MAX_YEARS          5           /* how far cron_next searches */
#define TERN_CRON_MAX_MISSED         100         /* missed slots counted after downtime */
#define TERN_TRIGGER_MAX_NAME        30          /* an AgentTrigger's name: <name>-<16 hex> <= 48 */
#define TERN_WEBHOOK_MAX_BODY        (1u << 20)  /* one delivery's body (GitHub sends <= 25 MB;
                                                  * bigger ones are refused with 413) */
#define TERN_WEBHOOK_MAX_DELIVERY_ID 128         /* the delivery id header's value */
#define TERN_WEBHOOK_MAX_SECRET      4096        /* the HMAC key from the Secret */
#define TERN_WEBHOOK_MAX_CONNECTIONS 64          /* concurrent webhook connections */
#define TERN_TMAP_MAX_PATH           256         /* one field path in a mapping or filter */
#define TERN_TMAP_MAX_SEGMENTS       32          /* segments of one field path */
#define TERN_TMAP_MAX_TEMPLATE       8192        /* one mapping template (objective, context) */
#define TERN_TMAP_MAX_PLACEHOLDERS   64          /* {{ }} in one template */
#define TERN_TMAP_MAX_FILTERS        16          /* filter entries of one trigger */
#define TERN_TMAP_MAX_VALUES         16          /* values one filter entry accepts */
#define TERN_TMAP_MAX_VALUE          256         /* one such value */
#define TERN_TMAP_MAX_JSON_DEPTH     64          /* nesting of a delivery's JSON */

/* result schemas (json/jschema: spec.result.schema) and validated results */
#define TERN_JSCHEMA_MAX_BYTES       (64u << 10) /* a schema, compact JSON */
#define TERN_JSCHEMA_MAX_DEPTH       32          /* nesting of subschemas */
#define TERN_JSCHEMA_MAX_NODES       1024        /* subschemas in one schema */
#define TERN_JSCHEMA_MAX_PATTERN     256         /* one pattern (POSIX ERE) */
#define TERN_JSCHEMA_MAX_ENUM        256         /* members of enum / required */
#define TERN_JSCHEMA_MAX_INSTANCE_DEPTH 32       /* nesting of an answer validated */
#define TERN_JSCHEMA_MAX_ERRORS      16          /* errors reported for one answer */
#define TERN_JSCHEMA_MAX_ERROR_LEN   300         /* one error line */
#define TERN_RESULT_MAX_ANSWER       (4u << 20)  /* a final answer parsed as JSON */
#define TERN_RESULT_MAX_VALUE        (16u << 10) /* status.result.value (compact JSON); larger
                                                  * results go to output/result.json */
#define TERN_RESULT_MAX_ATTEMPTS     20          /* spec.limits.maxResultAttempts */
/* artifacts that outlive the pod (controller/artstore, docs/operator.md,
 * "Artifacts"): the files under output/ copied into ConfigMaps */
#define TERN_ARTIFACTS_MAX_FILE      (256u << 10) /* one file, by default (--artifact-max-file) */
#define TERN_ARTIFACTS_MAX_TOTAL     (768u << 10) /* one persisted set, by default
                                                   * (--artifact-max-total) */
#define TERN_ARTIFACTS_TOTAL_CAP     (900u << 10) /* the most either flag may say: a ConfigMap's
                                                   * data is at most 1 MiB on kube-apiserver */
#define TERN_ARTIFACTS_MAX_FILES     100         /* files of one set (= TERN_RUNNER_MAX_ARTIFACTS) */
#define TERN_ARTIFACTS_MAX_MANIFEST  (64u << 10) /* the manifest.json of a stored set */
#define TERN_ARTIFACTS_MAX_ATTEMPTS  5           /* failed tries before the failure is recorded */
#define TERN_ARTIFACTS_MAX_REQUEST   128         /* the tern.dev/persist-artifacts value */
#define TERN_ARTIFACTS_MAX_SETS      64          /* stored sets of one session read by the API */
#define TERN_ARTIFACTS_SWEEP_S       5           /* how often expired retained sets are looked for */

#endif
