/* objstore.c - object-store wrappers and the in-memory store. See objstore.h. */
#include "objstore.h"

#include "base/mem.h"
#include "base/num.h"
#include "devctl/kobj.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

int objstore_get(const struct objstore *s, const char *gvr, const char *ns, const char *name,
                 cJSON **ret, struct tern_err *err)
{
    return s->ops->get(s->ctx, gvr, ns, name, ret, err);
}

int objstore_list(const struct objstore *s, const char *gvr, const char *ns, cJSON **ret,
                  struct tern_err *err)
{
    return s->ops->list(s->ctx, gvr, ns, ret, err);
}

int objstore_create(const struct objstore *s, const char *gvr, const char *ns, const cJSON *obj,
                    cJSON **ret, struct tern_err *err)
{
    return s->ops->create(s->ctx, gvr, ns, obj, ret, err);
}

int objstore_update(const struct objstore *s, const char *gvr, const char *ns, const cJSON *obj,
                    cJSON **ret, struct tern_err *err)
{
    return s->ops->update(s->ctx, gvr, ns, obj, ret, err);
}

int objstore_update_status(const struct objstore *s, const char *gvr, const char *ns,
                           const cJSON *obj, cJSON **ret, struct tern_err *err)
{
    return s->ops->update_status(s->ctx, gvr, ns, obj, ret, err);
}

int objstore_remove(const struct objstore *s, const char *gvr, const char *ns, const char *name,
                    const struct objstore_delete_opts *opts, cJSON **ret_obj,
                    struct tern_err *err)
{
    struct objstore_delete_opts def = {.grace_seconds = -1};
    return s->ops->remove(s->ctx, gvr, ns, name, opts ? opts : &def, ret_obj, err);
}

int objstore_wait(const struct objstore *s, const char *after_rv, int timeout_ms,
                  struct tern_err *err)
{
    return s->ops->wait(s->ctx, after_rv, timeout_ms, err);
}

int objstore_bind(const struct objstore *s, const char *ns, const char *name, const char *node,
                  struct tern_err *err)
{
    return s->ops->bind(s->ctx, ns, name, node, err);
}

int objstore_changes(const struct objstore *s, const char *const *gvrs, size_t n,
                     const char *after_rv, struct objstore_changes *ret, struct tern_err *err)
{
    if (!s->ops->changes)
        return err_set(err, -ENOTSUP, "the store keeps no changes");
    return s->ops->changes(s->ctx, gvrs, n, after_rv, ret, err);
}

bool objstore_has_changes(const struct objstore *s)
{
    struct objstore_changes c = {0};
    int rc = objstore_changes(s, NULL, 0, "0", &c, NULL);
    objstore_changes_done(&c);
    return rc == 0;
}

void objstore_changes_add(struct objstore_changes *c, size_t which, bool deleted, int64_t rev,
                          cJSON *obj)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->v = xreallocarray(c->v, c->cap, sizeof *c->v);
    }
    c->v[c->n++] = (struct objstore_change){which, deleted, rev, obj};
}

void objstore_changes_done(struct objstore_changes *c)
{
    for (size_t i = 0; i < c->n; i++)
        cJSON_Delete(c->v[i].obj);
    free(c->v);
    memset(c, 0, sizeof *c);
}

static const struct {
    const char *kind, *plural;
} kinds[] = {
    {"Pod", "pods"},
    {"Namespace", "namespaces"},
    {"Secret", "secrets"},
    {"ConfigMap", "configmaps"},
    {"Service", "services"},
    {"ServiceAccount", "serviceaccounts"},
    {"PersistentVolumeClaim", "persistentvolumeclaims"},
    {"PersistentVolume", "persistentvolumes"},
    {"Node", "nodes"},
    {"Event", "events"},
    {"Job", "jobs"},
    {"Deployment", "deployments"},
    {"ReplicaSet", "replicasets"},
    {"Lease", "leases"},
    {"NetworkPolicy", "networkpolicies"},
    {"Role", "roles"},
    {"ClusterRole", "clusterroles"},
    {"RoleBinding", "rolebindings"},
    {"ClusterRoleBinding", "clusterrolebindings"},
    {"CustomResourceDefinition", "customresourcedefinitions"},
    {"AgentSession", "agentsessions"},
};

const char *objstore_gvr_of(const cJSON *obj, char out[256])
{
    const char *av = kobj_str(obj, "apiVersion"), *kind = kobj_str(obj, "kind");
    if (!av || !kind)
        return NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strcmp(kinds[i].kind, kind) == 0) {
            int n = snprintf(out, 256, "%s/%s", av, kinds[i].plural);
            return n > 0 && n < 256 ? out : NULL;
        }
    }
    return NULL;
}

/* ---- in-memory store ---- */

struct mentry {
    char *gvr, *ns, *name;
    cJSON *obj;
};

/* A change kept for objstore_changes. */
struct mchange {
    char *gvr;
    bool deleted;
    int64_t rev;
    cJSON *obj;
};

struct memstore {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t rev;
    struct mentry *v;
    size_t n, cap;
    struct mchange *log;  /* ring of the last log_cap changes */
    size_t log_cap, log_n, log_head; /* log_head: the oldest */
    int64_t log_oldest;   /* every change after this revision is in the log */
    uint64_t lists;
    int64_t (*now_fn)(void *);
    void *now_ctx;
};

struct memstore *memstore_new(int64_t (*now_fn)(void *), void *now_ctx)
{
    struct memstore *m = xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    m->rev = 1;
    m->log_cap = 4096;
    m->log = xcalloc(m->log_cap, sizeof *m->log);
    m->log_oldest = 1;
    m->now_fn = now_fn;
    m->now_ctx = now_ctx;
    return m;
}

void memstore_free(struct memstore *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].gvr);
        free(m->v[i].ns);
        free(m->v[i].name);
        cJSON_Delete(m->v[i].obj);
    }
    free(m->v);
    for (size_t i = 0; i < m->log_n; i++) {
        struct mchange *c = &m->log[(m->log_head + i) % m->log_cap];
        free(c->gvr);
        cJSON_Delete(c->obj);
    }
    free(m->log);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int64_t mnow(struct memstore *m)
{
    return m->now_fn ? m->now_fn(m->now_ctx) : (int64_t)time(NULL);
}

static const char *nsv(const char *ns)
{
    return ns ? ns : "";
}

static struct mentry *find(struct memstore *m, const char *gvr, const char *ns, const char *name)
{
    for (size_t i = 0; i < m->n; i++) {
        struct mentry *e = &m->v[i];
        if (strcmp(e->gvr, gvr) == 0 && strcmp(e->ns, nsv(ns)) == 0 &&
            strcmp(e->name, name) == 0)
            return e;
    }
    return NULL;
}

static void log_pop(struct memstore *m)
{
    struct mchange *c = &m->log[m->log_head];
    m->log_oldest = c->rev;
    free(c->gvr);
    cJSON_Delete(c->obj);
    m->log_head = (m->log_head + 1) % m->log_cap;
    m->log_n--;
}

/* A new revision: obj (the object after the change, or the last state of a
 * deleted one) gets it as resourceVersion unless deleted, and a copy goes
 * to the log of changes. */
static void bump(struct memstore *m, const char *gvr, cJSON *obj, bool deleted)
{
    m->rev++;
    char d[21];
    if (!deleted)
        kobj_set_str(obj, "metadata.resourceVersion", num_fmt_i64(m->rev, d));
    if (m->log_n == m->log_cap)
        log_pop(m);
    cJSON *c = json_dup(obj);
    kobj_set_str(c, "metadata.resourceVersion", num_fmt_i64(m->rev, d));
    m->log[(m->log_head + m->log_n++) % m->log_cap] =
        (struct mchange){xstrdup(gvr), deleted, m->rev, c};
    pthread_cond_broadcast(&m->cv);
}

static void drop(struct memstore *m, struct mentry *e)
{
    bump(m, e->gvr, e->obj, true);
    free(e->gvr);
    free(e->ns);
    free(e->name);
    cJSON_Delete(e->obj);
    *e = m->v[--m->n];
}

static void rand_suffix(char *out, size_t n)
{
    static const char al[] = "bcdfghjklmnpqrstvwxz2456789";
    unsigned char r[64];
    if (n > sizeof r)
        n = sizeof r;
    if (getrandom(r, n, 0) != (ssize_t)n)
        memset(r, 7, n);
    for (size_t i = 0; i < n; i++)
        out[i] = al[r[i] % (sizeof al - 1)];
    out[n] = 0;
}

static void new_uid(char out[37])
{
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        abort();
    r[6] = (r[6] & 0x0f) | 0x40;
    r[8] = (r[8] & 0x3f) | 0x80;
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12],
             r[13], r[14], r[15]);
}

static bool is_ns_scoped(const char *gvr)
{
    return strcmp(gvr, "v1/namespaces") != 0 && strcmp(gvr, "v1/nodes") != 0 &&
           strcmp(gvr, "v1/persistentvolumes") != 0 &&
           strstr(gvr, "clusterrole") == NULL && strstr(gvr, "customresourcedefinitions") == NULL;
}

static int m_get(void *ctx, const char *gvr, const char *ns, const char *name, cJSON **ret,
                 struct tern_err *err)
{
    struct memstore *m = ctx;
    pthread_mutex_lock(&m->mu);
    struct mentry *e = find(m, gvr, ns, name);
    int rc = 0;
    if (!e)
        rc = err_set(err, TERN_ENOTFOUND, "%s \"%s\" not found", gvr, name);
    else if (ret)
        *ret = json_dup(e->obj);
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int m_list(void *ctx, const char *gvr, const char *ns, cJSON **ret, struct tern_err *err)
{
    (void)err;
    struct memstore *m = ctx;
    cJSON *l = cJSON_CreateObject();
    cJSON *items = cJSON_AddArrayToObject(l, "items");
    pthread_mutex_lock(&m->mu);
    m->lists++;
    for (size_t i = 0; i < m->n; i++) {
        struct mentry *e = &m->v[i];
        if (strcmp(e->gvr, gvr) == 0 && (!ns || strcmp(e->ns, ns) == 0))
            cJSON_AddItemToArray(items, json_dup(e->obj));
    }
    char d[21];
    kobj_set_str(l, "metadata.resourceVersion", num_fmt_i64(m->rev, d));
    pthread_mutex_unlock(&m->mu);
    *ret = l;
    return 0;
}

static int m_create(void *ctx, const char *gvr, const char *ns, const cJSON *obj, cJSON **ret,
                    struct tern_err *err)
{
    struct memstore *m = ctx;
    int rc = 0;
    if (!cJSON_IsObject(obj))
        return err_set(err, TERN_EINVALID, "not an object");
    cJSON *o = json_dup(obj);
    const char *name = kobj_str(o, "metadata.name");
    if (!name || !*name) {
        const char *gen = kobj_str(o, "metadata.generateName");
        if (!gen || !*gen || strlen(gen) > 200) {
            rc = err_set(err, TERN_EINVALID, "metadata.name: Required value");
            goto out;
        }
        char suf[8], full[256];
        rand_suffix(suf, 5);
        snprintf(full, sizeof full, "%s%s", gen, suf);
        kobj_set_str(o, "metadata.name", full);
        name = kobj_str(o, "metadata.name");
    }
    if (!is_ns_scoped(gvr))
        ns = "";
    else if (!ns || !*ns)
        ns = "default";
    pthread_mutex_lock(&m->mu);
    if (*ns && !find(m, "v1/namespaces", "", ns)) {
        pthread_mutex_unlock(&m->mu);
        rc = err_set(err, TERN_ENOTFOUND, "namespaces \"%s\" not found", ns);
        goto out;
    }
    if (find(m, gvr, ns, name)) {
        pthread_mutex_unlock(&m->mu);
        rc = err_set(err, -EEXIST, "%s \"%s\" already exists", gvr, name);
        goto out;
    }
    if (*ns)
        kobj_set_str(o, "metadata.namespace", ns);
    char uid[37], ts[32];
    new_uid(uid);
    kobj_set_str(o, "metadata.uid", uid);
    kobj_set_str(o, "metadata.creationTimestamp", kobj_fmt_time(mnow(m), ts));
    kobj_set_int(o, "metadata.generation", 1);
    kobj_del(o, "metadata.deletionTimestamp");
    if (strcmp(gvr, "v1/namespaces") == 0) {
        cJSON *fs = cJSON_CreateArray();
        cJSON_AddItemToArray(fs, cJSON_CreateString("kubernetes"));
        kobj_set_item(o, "spec.finalizers", fs);
        kobj_set_str(o, "status.phase", "Active");
    }
    bump(m, gvr, o, false);
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->v = xreallocarray(m->v, m->cap, sizeof *m->v);
    }
    m->v[m->n++] = (struct mentry){xstrdup(gvr), xstrdup(ns), xstrdup(name), o};
    if (ret)
        *ret = json_dup(o);
    o = NULL;
    pthread_mutex_unlock(&m->mu);
out:
    cJSON_Delete(o);
    return rc;
}

static int fin_count(const cJSON *o)
{
    return cJSON_GetArraySize(kobj_at(o, "metadata.finalizers"));
}

/* Removes e when it is deleting and nothing holds it. Returns true if gone. */
static bool maybe_remove(struct memstore *m, struct mentry *e)
{
    if (!kobj_deleting(e->obj) || fin_count(e->obj) > 0)
        return false;
    if (strcmp(e->gvr, "v1/pods") == 0 &&
        kobj_int(e->obj, "metadata.deletionGracePeriodSeconds", 0) > 0)
        return false;
    if (strcmp(e->gvr, "v1/namespaces") == 0 && cJSON_GetArraySize(kobj_at(e->obj, "spec.finalizers")) > 0)
        return false;
    drop(m, e);
    return true;
}

static bool has_new_finalizer(const cJSON *old, const cJSON *nu)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, kobj_at(nu, "metadata.finalizers"))
    {
        if (cJSON_IsString(f) && !kobj_has_finalizer(old, f->valuestring))
            return true;
    }
    return false;
}

static int m_write(struct memstore *m, const char *gvr, const char *ns, const cJSON *obj,
                   bool status, cJSON **ret, struct tern_err *err)
{
    const char *name = kobj_str(obj, "metadata.name");
    if (!cJSON_IsObject(obj) || !name)
        return err_set(err, TERN_EINVALID, "metadata.name: Required value");
    if (!is_ns_scoped(gvr))
        ns = "";
    pthread_mutex_lock(&m->mu);
    int rc = 0;
    struct mentry *e = find(m, gvr, ns, name);
    if (!e) {
        rc = err_set(err, TERN_ENOTFOUND, "%s \"%s\" not found", gvr, name);
        goto out;
    }
    const char *rv = kobj_str(obj, "metadata.resourceVersion");
    if (rv && strcmp(rv, kobj_str(e->obj, "metadata.resourceVersion")) != 0) {
        rc = err_set(err, TERN_ECONFLICT,
                     "Operation cannot be fulfilled on %s \"%s\": the object has been modified; "
                     "please apply your changes to the latest version and try again",
                     gvr, name);
        goto out;
    }
    cJSON *nu;
    if (status) {
        nu = json_dup(e->obj);
        const cJSON *st = kobj_at(obj, "status");
        if (st)
            kobj_set_item(nu, "status", json_dup(st));
        else
            kobj_del(nu, "status");
    } else {
        if (kobj_deleting(e->obj) && has_new_finalizer(e->obj, obj)) {
            rc = err_set(err, TERN_EINVALID,
                         "metadata.finalizers: Forbidden: no new finalizers can be added if the "
                         "object is being deleted");
            goto out;
        }
        nu = json_dup(obj);
        const cJSON *st = kobj_at(e->obj, "status");
        if (st)
            kobj_set_item(nu, "status", json_dup(st));
        else
            kobj_del(nu, "status");
        /* immutable / server-owned metadata */
        static const char *const keep[] = {"metadata.uid", "metadata.creationTimestamp",
                                           "metadata.deletionTimestamp",
                                           "metadata.deletionGracePeriodSeconds",
                                           "metadata.namespace"};
        for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
            const cJSON *k = kobj_at(e->obj, keep[i]);
            if (k)
                kobj_set_item(nu, keep[i], json_dup(k));
            else
                kobj_del(nu, keep[i]);
        }
        int64_t gen = kobj_int(e->obj, "metadata.generation", 1);
        if (!kobj_equal(kobj_at(e->obj, "spec"), kobj_at(nu, "spec")))
            gen++;
        kobj_set_int(nu, "metadata.generation", gen);
    }
    kobj_set_str(nu, "metadata.resourceVersion", kobj_str(e->obj, "metadata.resourceVersion"));
    if (kobj_equal(nu, e->obj)) { /* a no-op write stores nothing */
        if (ret)
            *ret = nu;
        else
            cJSON_Delete(nu);
        goto out;
    }
    cJSON_Delete(e->obj);
    e->obj = nu;
    bump(m, e->gvr, nu, false);
    if (ret)
        *ret = json_dup(nu);
    maybe_remove(m, e);
out:
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int m_update(void *ctx, const char *gvr, const char *ns, const cJSON *obj, cJSON **ret,
                    struct tern_err *err)
{
    return m_write(ctx, gvr, ns, obj, false, ret, err);
}

static int m_update_status(void *ctx, const char *gvr, const char *ns, const cJSON *obj,
                           cJSON **ret, struct tern_err *err)
{
    return m_write(ctx, gvr, ns, obj, true, ret, err);
}

static int m_remove(void *ctx, const char *gvr, const char *ns, const char *name,
                    const struct objstore_delete_opts *o, cJSON **ret_obj, struct tern_err *err)
{
    struct memstore *m = ctx;
    if (!is_ns_scoped(gvr))
        ns = "";
    pthread_mutex_lock(&m->mu);
    int rc = 0;
    struct mentry *e = find(m, gvr, ns, name);
    if (!e) {
        rc = err_set(err, TERN_ENOTFOUND, "%s \"%s\" not found", gvr, name);
        goto out;
    }
    if ((o->uid && strcmp(o->uid, kobj_str(e->obj, "metadata.uid")) != 0) ||
        (o->resource_version &&
         strcmp(o->resource_version, kobj_str(e->obj, "metadata.resourceVersion")) != 0)) {
        rc = err_set(err, TERN_ECONFLICT, "Precondition failed for %s \"%s\"", gvr, name);
        goto out;
    }
    int64_t now = mnow(m);
    char ts[32];
    bool is_pod = strcmp(gvr, "v1/pods") == 0;
    cJSON *obj = e->obj;
    bool changed = false;
    if (is_pod) {
        int64_t grace = o->grace_seconds >= 0
                            ? o->grace_seconds
                            : kobj_int(obj, "spec.terminationGracePeriodSeconds", 30);
        const char *phase = kobj_str(obj, "status.phase");
        if (!kobj_str(obj, "spec.nodeName") ||
            (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed"))))
            grace = 0;
        int64_t cur = kobj_int(obj, "metadata.deletionGracePeriodSeconds", -1);
        if (!kobj_deleting(obj) || grace < cur) {
            kobj_set_str(obj, "metadata.deletionTimestamp", kobj_fmt_time(now + grace, ts));
            kobj_set_int(obj, "metadata.deletionGracePeriodSeconds", grace);
            changed = true;
        }
    }
    if (o->propagation && strcmp(o->propagation, "Foreground") == 0 &&
        !kobj_has_finalizer(obj, "foregroundDeletion") && !kobj_deleting(obj)) {
        kobj_add_finalizer(obj, "foregroundDeletion");
        changed = true;
    } else if (o->propagation && strcmp(o->propagation, "Orphan") == 0 &&
               !kobj_has_finalizer(obj, "orphan") && !kobj_deleting(obj)) {
        kobj_add_finalizer(obj, "orphan");
        changed = true;
    }
    if (strcmp(gvr, "v1/namespaces") == 0 && !kobj_deleting(obj)) {
        kobj_set_str(obj, "status.phase", "Terminating");
        changed = true;
    }
    if (!kobj_deleting(obj)) {
        kobj_set_str(obj, "metadata.deletionTimestamp", kobj_fmt_time(now, ts));
        kobj_set_int(obj, "metadata.deletionGracePeriodSeconds", 0);
        changed = true;
    }
    if (changed) {
        int64_t gen = kobj_int(obj, "metadata.generation", 1);
        kobj_set_int(obj, "metadata.generation", gen + 1);
        bump(m, e->gvr, obj, false);
    }
    cJSON *copy = json_dup(obj);
    if (maybe_remove(m, e)) {
        cJSON_Delete(copy);
        copy = NULL;
    }
    if (ret_obj)
        *ret_obj = copy;
    else
        cJSON_Delete(copy);
out:
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int m_wait(void *ctx, const char *after_rv, int timeout_ms, struct tern_err *err)
{
    struct memstore *m = ctx;
    int64_t after = 0;
    if (after_rv && num_parse_i64(after_rv, &after) != 0)
        return err_set(err, TERN_EINVALID, "bad resourceVersion \"%s\"", after_rv);
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    while (m->rev <= after) {
        if (pthread_cond_timedwait(&m->cv, &m->mu, &dl) != 0) {
            rc = m->rev > after ? 0 : TERN_ETIMEOUT;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int m_bind(void *ctx, const char *ns, const char *name, const char *node,
                  struct tern_err *err)
{
    struct memstore *m = ctx;
    pthread_mutex_lock(&m->mu);
    int rc = 0;
    struct mentry *e = find(m, "v1/pods", ns, name);
    if (!e) {
        rc = err_set(err, TERN_ENOTFOUND, "pods \"%s\" not found", name);
    } else if (kobj_str(e->obj, "spec.nodeName")) {
        if (strcmp(kobj_str(e->obj, "spec.nodeName"), node) != 0)
            rc = err_set(err, TERN_ECONFLICT, "pod %s is already assigned to node \"%s\"", name,
                         kobj_str(e->obj, "spec.nodeName"));
    } else {
        kobj_set_str(e->obj, "spec.nodeName", node);
        bump(m, e->gvr, e->obj, false);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static int m_changes(void *ctx, const char *const *gvrs, size_t n, const char *after_rv,
                     struct objstore_changes *ret, struct tern_err *err)
{
    struct memstore *m = ctx;
    int64_t after = 0;
    if (n == 0)
        return 0;
    if (!after_rv || num_parse_i64(after_rv, &after) != 0)
        return err_set(err, TERN_EINVALID, "bad resourceVersion \"%s\"", after_rv ? after_rv : "");
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    if (after < m->log_oldest) {
        rc = err_set(err, TERN_ECOMPACTED, "too old resource version: %lld (%lld)",
                     (long long)after, (long long)m->log_oldest);
        goto out;
    }
    for (size_t i = 0; i < m->log_n; i++) {
        const struct mchange *c = &m->log[(m->log_head + i) % m->log_cap];
        if (c->rev <= after)
            continue;
        for (size_t w = 0; w < n; w++) {
            if (strcmp(gvrs[w], c->gvr) == 0) {
                objstore_changes_add(ret, w, c->deleted, c->rev, json_dup(c->obj));
                break;
            }
        }
    }
    num_fmt_i64(m->rev, ret->rv);
out:
    pthread_mutex_unlock(&m->mu);
    return rc;
}

static const struct objstore_ops mem_ops = {
    .changes = m_changes,
    .bind = m_bind,
    .get = m_get,
    .list = m_list,
    .create = m_create,
    .update = m_update,
    .update_status = m_update_status,
    .remove = m_remove,
    .wait = m_wait,
};

struct objstore memstore_objstore(struct memstore *m)
{
    return (struct objstore){&mem_ops, m};
}

int64_t memstore_revision(struct memstore *m)
{
    pthread_mutex_lock(&m->mu);
    int64_t r = m->rev;
    pthread_mutex_unlock(&m->mu);
    return r;
}

void memstore_set_window(struct memstore *m, size_t max)
{
    pthread_mutex_lock(&m->mu);
    while (m->log_n > (max ? max : 1))
        log_pop(m);
    struct mchange *nl = xcalloc(max ? max : 1, sizeof *nl);
    for (size_t i = 0; i < m->log_n; i++)
        nl[i] = m->log[(m->log_head + i) % m->log_cap];
    free(m->log);
    m->log = nl;
    m->log_cap = max ? max : 1;
    m->log_head = 0;
    pthread_mutex_unlock(&m->mu);
}

uint64_t memstore_lists(struct memstore *m)
{
    pthread_mutex_lock(&m->mu);
    uint64_t n = m->lists;
    pthread_mutex_unlock(&m->mu);
    return n;
}

int memstore_count(struct memstore *m, const char *gvr)
{
    pthread_mutex_lock(&m->mu);
    int c = 0;
    for (size_t i = 0; i < m->n; i++)
        c += strcmp(m->v[i].gvr, gvr) == 0;
    pthread_mutex_unlock(&m->mu);
    return c;
}
