/* egmap.c - source address -> session. See egmap.h. */
#include "egress/egmap.h"

#include "base/limits.h"
#include "base/mem.h"
#include "controller/children.h"
#include "json/json.h"
#include "kube/kmap.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define MAX_IPS     2 /* status.podIPs: one per family */
#define MAX_CLAIMS  4 /* pods seen claiming one address */

struct pod_ent {
    char *ns, *name, *session, *suid;
    char *ips[MAX_IPS];
    size_t nips;
};

struct ip_ent {
    char *pods[MAX_CLAIMS]; /* pod keys "ns/name" */
    size_t n;
};

struct sess_ent {
    char *uid;
    char *invalid; /* the validation message, or NULL */
    struct session_cidr *cidrs;
    size_t ncidrs;
    struct session_host *hosts;
    size_t nhosts;
};

struct egmap {
    pthread_mutex_t mu;
    struct kmap *pods;     /* "ns/name" -> pod_ent */
    struct kmap *ips;      /* canonical address text -> ip_ent */
    struct kmap *sessions; /* "ns/name" -> sess_ent */
};

static const char *str_at(const cJSON *o, const char *a, const char *b)
{
    const cJSON *v = json_get(json_get(o, a), b);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *label(const cJSON *o, const char *key)
{
    const cJSON *v = json_get(json_get(json_get(o, "metadata"), "labels"), key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static char *key_of(const char *ns, const char *name)
{
    return xasprintf("%s/%s", ns, name);
}

/* Canonical text of an address string, or false. */
static bool canon_ip(const char *s, char out[INET6_ADDRSTRLEN])
{
    unsigned char a[16];
    if (inet_pton(AF_INET, s, a) == 1)
        return inet_ntop(AF_INET, a, out, INET6_ADDRSTRLEN) != NULL;
    if (inet_pton(AF_INET6, s, a) == 1)
        return inet_ntop(AF_INET6, a, out, INET6_ADDRSTRLEN) != NULL;
    return false;
}

struct egmap *egmap_new(void)
{
    struct egmap *m = xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->pods = kmap_new();
    m->ips = kmap_new();
    m->sessions = kmap_new();
    return m;
}

static void pod_ent_free(struct pod_ent *p)
{
    if (!p)
        return;
    free(p->ns);
    free(p->name);
    free(p->session);
    free(p->suid);
    for (size_t i = 0; i < p->nips; i++)
        free(p->ips[i]);
    free(p);
}

static void free_allow(struct session_cidr *c, size_t nc, struct session_host *h, size_t nh)
{
    for (size_t i = 0; i < nc; i++)
        free(c[i].text);
    free(c);
    for (size_t i = 0; i < nh; i++) {
        free(h[i].name);
        free(h[i].text);
    }
    free(h);
}

static void sess_ent_free(struct sess_ent *s)
{
    if (!s)
        return;
    free(s->uid);
    free(s->invalid);
    free_allow(s->cidrs, s->ncidrs, s->hosts, s->nhosts);
    free(s);
}

static int free_pod_cb(void *ctx, const char *key, void *v)
{
    (void)ctx;
    (void)key;
    pod_ent_free(v);
    return 0;
}

static int free_ip_cb(void *ctx, const char *key, void *v)
{
    (void)ctx;
    (void)key;
    struct ip_ent *e = v;
    for (size_t i = 0; i < e->n; i++)
        free(e->pods[i]);
    free(e);
    return 0;
}

static int free_sess_cb(void *ctx, const char *key, void *v)
{
    (void)ctx;
    (void)key;
    sess_ent_free(v);
    return 0;
}

void egmap_free(struct egmap *m)
{
    if (!m)
        return;
    kmap_each(m->pods, free_pod_cb, NULL);
    kmap_each(m->ips, free_ip_cb, NULL);
    kmap_each(m->sessions, free_sess_cb, NULL);
    kmap_free(m->pods);
    kmap_free(m->ips);
    kmap_free(m->sessions);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* ---- pods ---- */

static void unclaim(struct egmap *m, const char *ip, const char *pkey)
{
    struct ip_ent *e = kmap_get(m->ips, ip);
    if (!e)
        return;
    for (size_t i = 0; i < e->n; i++) {
        if (strcmp(e->pods[i], pkey) == 0) {
            free(e->pods[i]);
            e->pods[i] = e->pods[--e->n];
            break;
        }
    }
    if (e->n == 0) {
        kmap_del(m->ips, ip);
        free(e);
    }
}

static void claim(struct egmap *m, const char *ip, const char *pkey)
{
    struct ip_ent *e = kmap_get(m->ips, ip);
    if (!e) {
        e = xcalloc(1, sizeof *e);
        kmap_put(m->ips, ip, e);
    }
    for (size_t i = 0; i < e->n; i++)
        if (strcmp(e->pods[i], pkey) == 0)
            return;
    if (e->n < MAX_CLAIMS)
        e->pods[e->n++] = xstrdup(pkey);
}

static void remove_pod_locked(struct egmap *m, const char *pkey)
{
    struct pod_ent *p = kmap_del(m->pods, pkey);
    if (!p)
        return;
    for (size_t i = 0; i < p->nips; i++)
        unclaim(m, p->ips[i], pkey);
    pod_ent_free(p);
}

/* The pod as an entry if it qualifies (see egmap.h), else NULL. */
static struct pod_ent *qualify(const cJSON *pod)
{
    const char *ns = str_at(pod, "metadata", "namespace");
    const char *name = str_at(pod, "metadata", "name");
    const char *role = label(pod, CHILDREN_LABEL_ROLE);
    const char *sess = label(pod, CHILDREN_LABEL_SESSION);
    const char *suid = label(pod, CHILDREN_LABEL_SESSION_UID);
    const cJSON *meta = json_get(pod, "metadata");
    if (!ns || !name || !role || strcmp(role, "sandbox") != 0 || !sess || !suid ||
        json_get(meta, "deletionTimestamp"))
        return NULL;
    char *want = children_name(sess, "sandbox");
    bool named = strcmp(want, name) == 0;
    free(want);
    if (!named)
        return NULL;
    bool owned = false;
    const cJSON *o;
    cJSON_ArrayForEach(o, json_get(meta, "ownerReferences"))
    {
        const cJSON *ctl = json_get(o, "controller");
        const cJSON *kind = json_get(o, "kind"), *uid = json_get(o, "uid"),
                    *oname = json_get(o, "name"), *api = json_get(o, "apiVersion");
        if (cJSON_IsTrue(ctl) && cJSON_IsString(kind) && strcmp(kind->valuestring, "AgentSession") == 0 &&
            cJSON_IsString(api) && strncmp(api->valuestring, "tern.dev/", 9) == 0 &&
            cJSON_IsString(uid) && strcmp(uid->valuestring, suid) == 0 && cJSON_IsString(oname) &&
            strcmp(oname->valuestring, sess) == 0)
            owned = true;
    }
    if (!owned)
        return NULL;
    const char *phase = str_at(pod, "status", "phase");
    if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
        return NULL;
    struct pod_ent *p = xcalloc(1, sizeof *p);
    char ip[INET6_ADDRSTRLEN];
    const cJSON *ips = json_get(json_get(pod, "status"), "podIPs"), *it;
    cJSON_ArrayForEach(it, ips)
    {
        const cJSON *a = json_get(it, "ip");
        if (p->nips < MAX_IPS && cJSON_IsString(a) && canon_ip(a->valuestring, ip))
            p->ips[p->nips++] = xstrdup(ip);
    }
    const char *one = str_at(pod, "status", "podIP");
    if (p->nips == 0 && one && canon_ip(one, ip))
        p->ips[p->nips++] = xstrdup(ip);
    if (p->nips == 0) {
        pod_ent_free(p);
        return NULL;
    }
    p->ns = xstrdup(ns);
    p->name = xstrdup(name);
    p->session = xstrdup(sess);
    p->suid = xstrdup(suid);
    return p;
}

void egmap_put_pod(struct egmap *m, const cJSON *pod)
{
    const char *ns = str_at(pod, "metadata", "namespace");
    const char *name = str_at(pod, "metadata", "name");
    if (!ns || !name)
        return;
    char *pkey = key_of(ns, name);
    struct pod_ent *p = qualify(pod);
    pthread_mutex_lock(&m->mu);
    remove_pod_locked(m, pkey);
    if (p && kmap_len(m->pods) < TERN_EGRESS_MAX_PODS) {
        kmap_put(m->pods, pkey, p);
        for (size_t i = 0; i < p->nips; i++)
            claim(m, p->ips[i], pkey);
        p = NULL;
    }
    pthread_mutex_unlock(&m->mu);
    pod_ent_free(p);
    free(pkey);
}

void egmap_del_pod(struct egmap *m, const cJSON *pod)
{
    const char *ns = str_at(pod, "metadata", "namespace");
    const char *name = str_at(pod, "metadata", "name");
    if (!ns || !name)
        return;
    char *pkey = key_of(ns, name);
    pthread_mutex_lock(&m->mu);
    remove_pod_locked(m, pkey);
    pthread_mutex_unlock(&m->mu);
    free(pkey);
}

/* ---- sessions ---- */

static void copy_allow(const struct session_cidr *c, size_t nc, const struct session_host *h,
                       size_t nh, struct session_cidr **rc, size_t *rnc, struct session_host **rh,
                       size_t *rnh)
{
    *rc = xcalloc(nc ? nc : 1, sizeof **rc);
    for (size_t i = 0; i < nc; i++) {
        (*rc)[i] = c[i];
        (*rc)[i].text = xstrdup(c[i].text ? c[i].text : "");
    }
    *rnc = nc;
    *rh = xcalloc(nh ? nh : 1, sizeof **rh);
    for (size_t i = 0; i < nh; i++) {
        (*rh)[i] = h[i];
        (*rh)[i].name = xstrdup(h[i].name);
        (*rh)[i].text = xstrdup(h[i].text ? h[i].text : h[i].name);
    }
    *rnh = nh;
}

void egmap_put_session(struct egmap *m, const cJSON *session)
{
    const char *ns = str_at(session, "metadata", "namespace");
    const char *name = str_at(session, "metadata", "name");
    const char *uid = str_at(session, "metadata", "uid");
    if (!ns || !name || !uid)
        return;
    struct sess_ent *e = xcalloc(1, sizeof *e);
    e->uid = xstrdup(uid);
    struct session_spec *s = NULL;
    struct tern_err err = {0};
    if (session_spec_parse(session, &s, &err) == 0) {
        copy_allow(s->permissions.network, s->permissions.nnetwork, s->permissions.hosts,
                   s->permissions.nhosts, &e->cidrs, &e->ncidrs, &e->hosts, &e->nhosts);
    } else {
        e->invalid = xstrdup(err.msg);
    }
    session_spec_free(s);
    char *key = key_of(ns, name);
    pthread_mutex_lock(&m->mu);
    struct sess_ent *old = NULL;
    if (kmap_has(m->sessions, key) || kmap_len(m->sessions) < TERN_EGRESS_MAX_PODS) {
        old = kmap_put(m->sessions, key, e);
        e = NULL;
    }
    pthread_mutex_unlock(&m->mu);
    sess_ent_free(old);
    sess_ent_free(e);
    free(key);
}

void egmap_del_session(struct egmap *m, const cJSON *session)
{
    const char *ns = str_at(session, "metadata", "namespace");
    const char *name = str_at(session, "metadata", "name");
    if (!ns || !name)
        return;
    char *key = key_of(ns, name);
    pthread_mutex_lock(&m->mu);
    struct sess_ent *old = kmap_del(m->sessions, key);
    pthread_mutex_unlock(&m->mu);
    sess_ent_free(old);
    free(key);
}

/* ---- lookups ---- */

int egmap_lookup(struct egmap *m, const struct egpolicy_addr *src, struct egmap_client **ret,
                 struct tern_err *why)
{
    char ip[INET6_ADDRSTRLEN] = "";
    egpolicy_addr_str(src, ip, sizeof ip);
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    struct ip_ent *ie = kmap_get(m->ips, ip);
    struct pod_ent *p = ie && ie->n == 1 ? kmap_get(m->pods, ie->pods[0]) : NULL;
    struct sess_ent *s = NULL;
    char *skey = NULL;
    if (!ie) {
        rc = err_set(why, TERN_ENOTFOUND, "%s is not the address of a running sandbox pod", ip);
        goto out;
    }
    if (!p) {
        rc = err_set(why, TERN_ENOTFOUND,
                     "%s is claimed by %zu pods at once; refused until that is resolved", ip,
                     ie->n);
        goto out;
    }
    skey = key_of(p->ns, p->session);
    s = kmap_get(m->sessions, skey);
    if (!s || strcmp(s->uid, p->suid) != 0) {
        rc = err_set(why, TERN_ENOTFOUND, "pod %s/%s belongs to AgentSession %s (uid %s), which "
                     "does not exist",
                     p->ns, p->name, p->session, p->suid);
        goto out;
    }
    if (s->invalid) {
        rc = err_set(why, TERN_EINVALID, "AgentSession %s/%s has an invalid spec: %s", p->ns,
                     p->session, s->invalid);
        goto out;
    }
    struct egmap_client *c = xcalloc(1, sizeof *c);
    c->ns = xstrdup(p->ns);
    c->session = xstrdup(p->session);
    c->session_uid = xstrdup(p->suid);
    c->pod = xstrdup(p->name);
    copy_allow(s->cidrs, s->ncidrs, s->hosts, s->nhosts, &c->cidrs, &c->ncidrs, &c->hosts,
               &c->nhosts);
    *ret = c;
out:
    pthread_mutex_unlock(&m->mu);
    free(skey);
    return rc;
}

void egmap_client_free(struct egmap_client *c)
{
    if (!c)
        return;
    free(c->ns);
    free(c->session);
    free(c->session_uid);
    free(c->pod);
    free_allow(c->cidrs, c->ncidrs, c->hosts, c->nhosts);
    free(c);
}

struct egpolicy_allow egmap_client_allow(const struct egmap_client *c)
{
    return (struct egpolicy_allow){c->cidrs, c->ncidrs, c->hosts, c->nhosts};
}

void egmap_counts(struct egmap *m, size_t *ret_pods, size_t *ret_sessions)
{
    pthread_mutex_lock(&m->mu);
    *ret_pods = kmap_len(m->pods);
    *ret_sessions = kmap_len(m->sessions);
    pthread_mutex_unlock(&m->mu);
}
