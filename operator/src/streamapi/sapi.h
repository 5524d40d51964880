/* sapi.h - the operator's aggregated API: stream.tern.dev/v1alpha1, the
 * data of each AgentSession as Kubernetes API (docs/stream-api.md), so no
 * user ever needs the journal's etcd or the sandbox.
 *
 * The API server proxies to it (an APIService); this server trusts only
 * the API server's front-proxy client certificate (requestheader: the
 * front-proxy CA and allowed names from kube-system's
 * extension-apiserver-authentication ConfigMap), takes the user from the
 * X-Remote-User / X-Remote-Group / X-Remote-Extra-* headers it sets, and
 * authorizes every request with a SubjectAccessReview on the AgentSession:
 * get (or list) agentsessions for reading, get agentsessions/workspace for
 * file contents.
 *
 *   GET /apis/stream.tern.dev/v1alpha1/namespaces/NS/sessions[/NAME]
 *        SessionStream objects (list: the namespace's sessions)
 *   .../sessions/NAME/events?sinceSeq=N&limit=M        SessionEventList
 *   .../sessions/NAME/events?watch=true&sinceSeq=N     one JSON line per event
 *   .../sessions/NAME/log[?follow=true][&sinceSeq=N]   events as lines; with
 *        follow, the running command's output as it is produced and an end
 *        line once the session has finished (a long-running request for the
 *        API server, like pods/log)
 *   .../sessions/NAME/output[?follow=true]             the running tool
 *        call's output so far (sandboxd's live view)
 *   .../sessions/NAME/files?path=P&depth=D             the workspace listing
 *   .../sessions/NAME/content?path=P                   a file's bytes
 *   .../sessions/NAME/artifacts                        the last answer's files
 *   .../sessions/NAME/artifacts?path=P                 a persisted file's bytes
 *        (from the artifact store: also after the pod and, when retained,
 *        the session are gone)
 * plus discovery (/apis, /apis/stream.tern.dev, .../v1alpha1) and empty
 * OpenAPI documents. Files come from the session's sandboxd while its pod
 * runs, else from a short-lived read-only viewer (sapi_backend.sandbox).
 *
 * One thread accepts; each connection gets a thread (at most
 * TERN_SAPI_MAX_CONNS), one request per connection.
 */
#ifndef TERN_SAPI_H
#define TERN_SAPI_H

#include "base/err.h"
#include "base/limits.h"
#include "etcd/etcd.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SAPI_GROUP   "stream.tern.dev"
#define SAPI_VERSION "v1alpha1"

/* Who the API server says asked. */
struct sapi_user {
    char name[256];
    char groups[TERN_SAPI_MAX_GROUPS][256];
    size_t ngroups;
    struct {
        char key[64];
        char value[256];
    } extra[TERN_SAPI_MAX_EXTRA];
    size_t nextra;
};

enum sapi_route {
    SAPI_NOT_FOUND = 0,
    SAPI_APIS,        /* /apis */
    SAPI_GROUP_DOC,   /* /apis/stream.tern.dev */
    SAPI_VERSION_DOC, /* /apis/stream.tern.dev/v1alpha1 */
    SAPI_OPENAPI_V2,
    SAPI_OPENAPI_V3,
    SAPI_SESSIONS,    /* list (ns "" = all namespaces) */
    SAPI_SESSION,
    SAPI_EVENTS,
    SAPI_LOG,
    SAPI_OUTPUT,
    SAPI_FILES,
    SAPI_CONTENT,
    SAPI_ARTIFACTS,
};

struct sapi_header {
    char name[64]; /* lower-cased */
    char value[1024];
};

/* A parsed request head (pure: sapi_parse). */
struct sapi_req {
    char method[8];
    enum sapi_route route;
    char ns[64];
    char name[254];
    /* query */
    uint64_t since_seq;  /* 0 = from the start */
    int64_t limit;       /* 0 = the default page */
    bool watch, follow;
    char path[TERN_SANDBOX_MAX_PATH + 1]; /* files/content; "" = the workspace root */
    int64_t depth;       /* files; -1 = default (1) */
    int64_t timeout_s;   /* watch/follow; 0 = none */
    struct sapi_header headers[TERN_SAPI_MAX_HEADERS];
    size_t nheaders;
};

/* Parses the head of an HTTP/1.x request (through the blank line, len
 * bytes). Returns 0 and *ret, TERN_ENOTFOUND for a path that is not served,
 * TERN_EINVALID for anything malformed (the reason in err): request line,
 * header syntax or count, a name that is not a DNS name, a query value. */
int sapi_parse(const char *head, size_t len, struct sapi_req *ret, struct tern_err *err);
/* The value of header name (lower-case) in r, the index-th occurrence, or NULL. */
const char *sapi_header(const struct sapi_req *r, const char *name, size_t index);

/* The front-proxy trust (kube-system/extension-apiserver-authentication). */
struct sapi_trust {
    const char *ca_pem;               /* requestheader-client-ca-file */
    const char *const *allowed_names; /* NULL-terminated; empty: any CN the CA signed */
    const char *user_header;          /* "X-Remote-User" */
    const char *group_header;         /* "X-Remote-Group" */
    const char *extra_prefix;         /* "X-Remote-Extra-" */
};

/* What the server asks the operator (docs/stream-api.md, "Wiring"). Every
 * callback may be called from many threads at once. */
struct sapi_backend {
    struct etcd *etcd; /* the journal (borrowed) */
    /* May user do verb on tern.dev agentsessions[/sub] (name may be "" for
     * a list, ns "" for all namespaces)? 0 allowed, TERN_EAUTH denied (why
     * in reason), another code: it could not be told (err). */
    int (*authorize)(void *ctx, const struct sapi_user *u, const char *verb, const char *ns,
                     const char *name, const char *sub, char *reason, size_t reason_size,
                     struct tern_err *err);
    /* The AgentSession ns/name (owned by the caller), or NULL. */
    cJSON *(*session)(void *ctx, const char *ns, const char *name);
    /* Calls fn for each AgentSession of ns ("" = all); a non-zero return stops. */
    void (*each_session)(void *ctx, const char *ns, int (*fn)(void *fctx, const cJSON *s),
                         void *fctx);
    /* The address ("ip:port") and bearer token of a sandboxd serving the
     * session's workspace (both owned by the caller): its sandbox pod when
     * it runs, else (viewer) a read-only viewer started for the purpose,
     * waited for up to TERN_SAPI_VIEWER_WAIT_MS. TERN_ENOTFOUND: no
     * sandbox (and no viewer asked); other codes with err. */
    int (*sandbox)(void *ctx, const cJSON *session, bool viewer, char **ret_addr,
                   char **ret_token, struct tern_err *err);
    /* The artifact store's sets of session ns/name (ConfigMaps labelled
     * tern.dev/role=artifacts, tern.dev/session=name, at most
     * TERN_ARTIFACTS_MAX_SETS, whole), or with configmap only that set
     * (a fork's journal may name its parent's): a JSON array owned by the
     * caller. Also after the session is gone (retained sets). May be NULL. */
    int (*artifact_sets)(void *ctx, const char *ns, const char *name, const char *configmap,
                         cJSON **ret, struct tern_err *err);
    void *ctx;
};

struct sapi_config {
    const char *listen;    /* "host:port" (port 0: any) */
    const char *cert_file; /* serving certificate chain and key: re-read when they change */
    const char *key_file;
    struct sapi_backend backend;
};

struct sapi;

/* Loads the serving certificate, binds and starts serving (401 to every
 * request until sapi_set_trust). Returns 0 and *ret, or an error naming
 * the file or the address. */
int sapi_start(const struct sapi_config *cfg, struct sapi **ret, struct tern_err *err);
/* Replaces the front-proxy trust (copied). Returns 0, or TERN_EINVALID
 * when the CA does not parse (the old trust stays). */
int sapi_set_trust(struct sapi *s, const struct sapi_trust *t, struct tern_err *err);
int sapi_port(const struct sapi *s);
/* Stops accepting, ends every stream, waits for the connection threads,
 * frees. Accepts NULL. */
void sapi_stop(struct sapi *s);

#endif
