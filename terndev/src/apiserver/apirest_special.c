/* apirest_special.c - requests that are not plain object storage:
 * pods/log (tailLines, limitBytes, previous; follow as a stream),
 * pods/binding, and the reviews that are answered and never stored
 * (SelfSubjectAccessReview, SelfSubjectReview). See apirest_internal.h. */
#include "apirest_internal.h"

#include "apistatus.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- pods/log ------------------------------------------------------------ */

static int64_t restart_count(const cJSON *pod, const char *container)
{
    const cJSON *cs = json_get(json_get(pod, "status"), "containerStatuses");
    int64_t n = 0;
    for (const cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next) {
        const char *name = apirest__jstr(c, "name");
        if (name && container && strcmp(name, container) == 0)
            json_item_int64(json_get(c, "restartCount"), &n);
    }
    return n;
}

/* The container a log request means, or NULL with *st set. */
static const char *log_container(const cJSON *pod, const char *want, const char *podname,
                                 cJSON **st)
{
    const cJSON *cs = json_get(json_get(pod, "spec"), "containers");
    if (want && *want) {
        static const char *lists[] = {"containers", "initContainers"};
        for (size_t l = 0; l < 2; l++) {
            const cJSON *arr = json_get(json_get(pod, "spec"), lists[l]);
            for (const cJSON *c = cJSON_IsArray(arr) ? arr->child : NULL; c; c = c->next)
                if (apirest__jstr(c, "name") && strcmp(apirest__jstr(c, "name"), want) == 0)
                    return want;
        }
        char *m = xasprintf("container %s is not valid for pod %s", want, podname);
        *st = apistatus_bad_request(m);
        free(m);
        return NULL;
    }
    const char *def = apirest__jstr(json_get(json_get(pod, "metadata"), "annotations"),
                                    "kubectl.kubernetes.io/default-container");
    if (def)
        return def;
    if (cJSON_GetArraySize(cs) == 1)
        return apirest__jstr(cs->child, "name");
    struct buf b;
    buf_init(&b, 1u << 16);
    for (const cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next)
        buf_printf(&b, "%s%s", c == cs->child ? "" : " ",
                   apirest__jstr(c, "name") ? apirest__jstr(c, "name") : "");
    char *m = xasprintf("a container name must be specified for pod %s, choose one of: [%s]",
                        podname, buf_str(&b));
    *st = apistatus_bad_request(m);
    free(m);
    buf_done(&b);
    return NULL;
}

void apirest__handle_log(struct rq *q)
{
    cJSON *st = NULL, *pod = NULL;
    char *key = apirest__obj_key(q), *path = NULL;
    struct tern_err e = {0};
    int fd = -1;
    int rc = apistore_get(&q->s->store, key, &pod, NULL, &e);
    if (rc) {
        st = apirest__status_from_store(rc, q->res, q->name, &e);
        goto out;
    }
    const char *container = log_container(pod, apirest__arg(q->req, "container"), q->name, &st);
    if (!container)
        goto out;
    bool previous = apirest__arg_true(q->req, "previous");
    rc = q->s->log_path(q->s->log_ctx, pod, container, previous, &path, &e);
    if (rc) {
        char *m = previous ? xasprintf("previous terminated container \"%s\" in pod \"%s\" not "
                                       "found",
                                       container, q->name)
                           : xasprintf("container \"%s\" in pod \"%s\" is waiting to start: %s",
                                       container, q->name, e.msg[0] ? e.msg : "no log yet");
        st = apistatus_bad_request(m);
        free(m);
        goto out;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        char *m = xasprintf("container \"%s\" in pod \"%s\" is waiting to start: no log file",
                            container, q->name);
        st = apistatus_bad_request(m);
        free(m);
        goto out;
    }
    int64_t tail = -1, limit = -1;
    const char *ts = apirest__arg(q->req, "tailLines"), *lb = apirest__arg(q->req, "limitBytes");
    if (ts && (num_parse_i64(ts, &tail) || tail < 0))
        tail = -1;
    if (lb && (num_parse_i64(lb, &limit) || limit <= 0))
        limit = -1;
    off_t size = lseek(fd, 0, SEEK_END);
    off_t start = size > (off_t)TERN_KUBE_MAX_OBJECT * 4 ? size - (off_t)TERN_KUBE_MAX_OBJECT * 4 : 0;
    struct buf b;
    buf_init(&b, (size_t)TERN_KUBE_MAX_OBJECT * 4 + 1);
    char tmp[65536];
    ssize_t n;
    while ((n = pread(fd, tmp, sizeof(tmp), start + (off_t)b.len)) > 0 && buf_append(&b, tmp, (size_t)n) == 0)
        ;
    size_t from = 0;
    if (tail >= 0) {
        /* the last tail lines */
        size_t i = b.len;
        int64_t lines = 0;
        if (i && b.data[i - 1] == '\n')
            i--;
        while (i > 0) {
            if (b.data[i - 1] == '\n' && ++lines == tail)
                break;
            i--;
        }
        from = tail == 0 ? b.len : i;
    }
    size_t len = b.len - from;
    if (limit > 0 && (size_t)limit < len)
        len = (size_t)limit;
    buf_reset(&q->resp->body);
    buf_append(&q->resp->body, b.data ? b.data + from : "", len);
    buf_done(&b);
    q->resp->status = 200;
    q->resp->content_type = "text/plain";
    if (apirest__arg_true(q->req, "follow") && !previous && q->s->log_running) {
        struct apirest_watch *w = xcalloc(1, sizeof(*w));
        w->s = q->s;
        w->log_mode = true;
        w->log_fd = fd;
        fd = -1;
        w->log_key = key;
        key = NULL;
        w->log_container = xstrdup(container);
        w->log_restarts = restart_count(pod, container);
        w->deadline = time(NULL) + 24 * 3600;
        /* the first chunk is what was read above; continue after it */
        lseek(w->log_fd, start + (off_t)(from + len), SEEK_SET);
        w->final_line = q->resp->body.len ? xstrndup(q->resp->body.data, q->resp->body.len) : NULL;
        buf_reset(&q->resp->body);
        q->resp->watch = w;
    }
out:
    if (fd >= 0)
        close(fd);
    free(path);
    free(key);
    cJSON_Delete(pod);
    if (st)
        apirest__respond_status(q->resp, st);
}

int apirest__log_next(struct apirest_watch *w, struct buf *out, long timeout_ms)
{
    if (w->final_line) {
        buf_puts(out, w->final_line);
        free(w->final_line);
        w->final_line = NULL;
        return 0;
    }
    char tmp[65536];
    long waited = 0;
    for (;;) {
        ssize_t n = read(w->log_fd, tmp, sizeof(tmp));
        if (n > 0) {
            buf_append(out, tmp, (size_t)n);
            return 0;
        }
        time_t now = time(NULL);
        if (now >= w->log_next_check) {
            w->log_next_check = now + 1;
            cJSON *pod = NULL;
            bool running = false;
            if (apistore_get(&w->s->store, w->log_key, &pod, NULL, NULL) == 0)
                running = w->s->log_running(w->s->log_ctx, pod, w->log_container,
                                            w->log_restarts);
            cJSON_Delete(pod);
            if (!running) {
                /* drain what the container wrote before it stopped */
                while ((n = read(w->log_fd, tmp, sizeof(tmp))) > 0 &&
                       buf_append(out, tmp, (size_t)n) == 0)
                    ;
                return 1;
            }
        }
        if (waited >= timeout_ms)
            return 0;
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        waited += 200;
    }
}

/* ---- pods/binding -------------------------------------------------------- */

/* POST pods/NAME/binding: what the scheduler does (pkg/registry/core/pod
 * BindingREST): sets spec.nodeName once and the PodScheduled condition. */
void apirest__handle_binding(struct rq *q)
{
    cJSON *b = NULL;
    char dup[256];
    cJSON *st = apirest__decode_body(q, &b, dup, false);
    if (st) {
        apirest__respond_status(q->resp, st);
        return;
    }
    const char *node = apirest__jstr(json_get(b, "target"), "name");
    const char *bname = apirest__jstr(json_get(b, "metadata"), "name");
    if (!node || !*node || (bname && strcmp(bname, q->name) != 0)) {
        struct apistatus_fields f = {0};
        if (!node || !*node)
            apistatus_fields_addv(&f, APISTATUS_F_REQUIRED, "target.name", NULL, NULL);
        else
            apistatus_fields_add(&f, APISTATUS_F_INVALID, "metadata.name",
                                 json_get(json_get(b, "metadata"), "name"),
                                 "must match the pod name");
        st = apistatus_invalid("", "Binding", q->name, &f);
        apistatus_fields_done(&f);
        goto out;
    }
    char *key = apirest__obj_key(q);
    for (int attempt = 0; attempt < MAX_RETRIES && !st; attempt++) {
        cJSON *pod = NULL;
        int64_t rev = 0;
        struct tern_err e = {0};
        int rc = apistore_get(&q->s->store, key, &pod, &rev, &e);
        if (rc) {
            st = apirest__status_from_store(rc, q->res, q->name, &e);
            break;
        }
        cJSON *spec = apirest__ensure_obj(pod, "spec");
        const char *cur = apirest__jstr(spec, "nodeName");
        if (cur && *cur) {
            char *msg = xasprintf("pod %s is already assigned to node \"%s\"", q->name, cur);
            st = apistatus_conflict("", "pods/binding", q->name, msg);
            free(msg);
            cJSON_Delete(pod);
            break;
        }
        if (apirest__jstr(json_get(pod, "metadata"), "deletionTimestamp")) {
            char *msg = xasprintf("pod %s is being deleted, cannot be assigned to a host", q->name);
            st = apistatus_conflict("", "pods/binding", q->name, msg);
            free(msg);
            cJSON_Delete(pod);
            break;
        }
        apirest__set_str(spec, "nodeName", node);
        cJSON *status = apirest__ensure_obj(pod, "status");
        cJSON *conds = cJSON_GetObjectItemCaseSensitive(status, "conditions");
        if (!cJSON_IsArray(conds)) {
            cJSON_DeleteItemFromObjectCaseSensitive(status, "conditions");
            conds = cJSON_AddArrayToObject(status, "conditions");
        }
        cJSON *c = cJSON_CreateObject();
        char now[32];
        apirest__now_str(now);
        cJSON_AddStringToObject(c, "type", "PodScheduled");
        cJSON_AddStringToObject(c, "status", "True");
        cJSON_AddNullToObject(c, "lastProbeTime");
        cJSON_AddStringToObject(c, "lastTransitionTime", now);
        cJSON_AddItemToArray(conds, c);
        int64_t nrev = 0;
        rc = q->dry_run ? 0 : apistore_update(&q->s->store, key, pod, rev, &nrev, &e);
        cJSON_Delete(pod);
        if (rc == TERN_ECONFLICT)
            continue;
        if (rc)
            st = apirest__status_from_store(rc, q->res, q->name, &e);
        else
            apirest__respond_json(q->resp, 201, apistatus_new(201, NULL, NULL, NULL, NULL, NULL));
        free(key);
        goto out;
    }
    if (!st)
        st = apistatus_conflict(q->res->group, q->res->plural, q->name, NULL);
    free(key);
out:
    cJSON_Delete(b);
    if (st)
        apirest__respond_status(q->resp, st);
}

/* ---- reviews ------------------------------------------------------------- */

/* SelfSubjectReview (kubectl auth whoami): the requesting user. */
static void handle_whoami(struct rq *q)
{
    static const struct rbac_user in_process = {"system:apiserver", {"system:masters"}, 1};
    const struct rbac_user *u = q->req->user ? q->req->user : &in_process;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "kind", q->res->kind);
    cJSON_AddStringToObject(out, "apiVersion", "authentication.k8s.io/v1");
    char now[32];
    apirest__now_str(now); /* kube-apiserver stamps the review it answers */
    cJSON_AddStringToObject(cJSON_AddObjectToObject(out, "metadata"), "creationTimestamp", now);
    cJSON *ui = cJSON_AddObjectToObject(cJSON_AddObjectToObject(out, "status"), "userInfo");
    cJSON_AddStringToObject(ui, "username", u->name);
    cJSON *groups = cJSON_AddArrayToObject(ui, "groups");
    for (size_t i = 0; i < u->ngroups; i++)
        cJSON_AddItemToArray(groups, cJSON_CreateString(u->groups[i]));
    apirest__respond_json(q->resp, 201, out);
}

/* POST of a review: SelfSubjectAccessReview (the answer for the requesting
 * user, computed from the spec) or SelfSubjectReview; never stored. */
void apirest__handle_review(struct rq *q)
{
    if (strcmp(q->res->kind, "SelfSubjectReview") == 0) {
        handle_whoami(q);
        return;
    }
    cJSON *obj = NULL;
    char dup[256];
    cJSON *st = apirest__decode_body(q, &obj, dup, false);
    if (st) {
        apirest__respond_status(q->resp, st);
        return;
    }
    const cJSON *spec = json_get(obj, "spec");
    const cJSON *ra = json_get(spec, "resourceAttributes");
    const cJSON *na = json_get(spec, "nonResourceAttributes");
    if (!cJSON_IsObject(ra) == !cJSON_IsObject(na)) {
        struct apistatus_fields f = {0};
        apistatus_fields_addv(&f, APISTATUS_F_INVALID, "spec.resourceAttributes", "null",
                              "exactly one of nonResourceAttributes or resourceAttributes must "
                              "be specified");
        apirest__respond_status(q->resp, apistatus_invalid(q->res->group, q->res->kind, "", &f));
        apistatus_fields_done(&f);
        cJSON_Delete(obj);
        return;
    }
    struct rbac_request r = {0};
    if (ra) {
        r.resource_request = true;
        r.verb = apirest__jstr(ra, "verb");
        r.group = apirest__jstr(ra, "group") ? apirest__jstr(ra, "group") : "";
        r.resource = apirest__jstr(ra, "resource") ? apirest__jstr(ra, "resource") : "";
        r.subresource = apirest__jstr(ra, "subresource");
        r.ns = apirest__jstr(ra, "namespace");
        r.name = apirest__jstr(ra, "name");
    } else {
        r.verb = apirest__jstr(na, "verb");
        r.path = apirest__jstr(na, "path") ? apirest__jstr(na, "path") : "";
    }
    char reason[1024] = "";
    bool allowed = true;
    if (strcmp(q->res->kind, "SubjectAccessReview") == 0) {
        /* for the user the spec names (an aggregated server asking about
         * its caller); the requester's own right to ask was authorized as
         * create subjectaccessreviews */
        const char *user = apirest__jstr(spec, "user");
        if (!user || !*user) {
            struct apistatus_fields f = {0};
            apistatus_fields_addv(&f, APISTATUS_F_INVALID, "spec.user", "\"\"",
                                  "at least one of user or group must be specified");
            apirest__respond_status(q->resp,
                                    apistatus_invalid(q->res->group, q->res->kind, "", &f));
            apistatus_fields_done(&f);
            cJSON_Delete(obj);
            return;
        }
        struct rbac_user u = {.name = user};
        const cJSON *g;
        cJSON_ArrayForEach(g, json_get(spec, "groups"))
        {
            if (cJSON_IsString(g) && u.ngroups < RBAC_MAX_GROUPS)
                u.groups[u.ngroups++] = g->valuestring;
        }
        if (q->req->review)
            allowed = q->req->review(q->req->review_ctx, &u, &r, reason, sizeof reason);
    } else if (q->req->can) {
        allowed = q->req->can(q->req->can_ctx, &r, reason, sizeof reason);
    }
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "kind", q->res->kind);
    cJSON_AddStringToObject(out, "apiVersion", "authorization.k8s.io/v1");
    cJSON_AddObjectToObject(out, "metadata"); /* no creationTimestamp, as kube-apiserver */
    cJSON_AddItemToObject(out, "spec", json_dup(spec));
    cJSON *status = cJSON_AddObjectToObject(out, "status");
    cJSON_AddBoolToObject(status, "allowed", allowed);
    if (reason[0])
        cJSON_AddStringToObject(status, "reason", reason);
    apirest__respond_json(q->resp, 201, out);
    cJSON_Delete(obj);
}
