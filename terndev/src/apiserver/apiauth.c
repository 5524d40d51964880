/* apiauth.c - authentication, RBAC and the ownerReference admission check
 * for tern-dev. See apiauth.h. */
#include "apiauth.h"

#include "apistatus.h"
#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "devctl/satoken.h"
#include "json/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define POLICY_TTL_MS 1000

static const char *const POLICY_KINDS[4] = {"roles", "rolebindings", "clusterroles",
                                            "clusterrolebindings"};

struct apiauth {
    struct apirest *rest;
    char *admin_token;
    unsigned char sa_key[SATOKEN_KEY_LEN];
    bool have_key;
    pthread_mutex_t mu;      /* guards the policy */
    cJSON *policy[4];        /* arrays, in POLICY_KINDS order; NULL until loaded */
    long long loaded_ms;
    pthread_mutex_t log_mu;
    FILE *log;
};

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int apiauth_new(const struct apiauth_config *cfg, struct apiauth **ret, struct tern_err *err)
{
    FILE *log = NULL;
    if (cfg->log_path) {
        log = fopen(cfg->log_path, "ae");
        if (!log)
            return err_set(err, -errno, "cannot open %s", cfg->log_path);
    }
    struct apiauth *a = xcalloc(1, sizeof *a);
    a->rest = cfg->rest;
    a->admin_token = xstrdup(cfg->admin_token);
    if (cfg->sa_key) {
        memcpy(a->sa_key, cfg->sa_key, SATOKEN_KEY_LEN);
        a->have_key = true;
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_mutex_init(&a->log_mu, NULL);
    a->log = log;
    *ret = a;
    return 0;
}

void apiauth_free(struct apiauth *a)
{
    if (!a)
        return;
    for (int i = 0; i < 4; i++)
        cJSON_Delete(a->policy[i]);
    if (a->log)
        fclose(a->log);
    pthread_mutex_destroy(&a->mu);
    pthread_mutex_destroy(&a->log_mu);
    explicit_bzero(a->sa_key, sizeof a->sa_key);
    free(a->admin_token);
    free(a);
}

/* ---- authentication ------------------------------------------------------ */

static bool same_secret(const char *t, const char *want)
{
    size_t a = strlen(t), b = strlen(want);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < a && i < b; i++)
        diff |= (unsigned)(t[i] ^ want[i]);
    return diff == 0;
}

/* The stored object of a built-in resource, or NULL. */
static cJSON *stored(struct apiauth *a, const char *group, const char *plural, const char *ns,
                     const char *name)
{
    struct apires_table *t = apires_get(&a->rest->reg);
    const struct apires *res = apires_find(t, group, "v1", plural);
    cJSON *obj = NULL;
    if (res) {
        char *key = apires_key(res, ns, name);
        if (apistore_get(&a->rest->store, key, &obj, NULL, NULL))
            obj = NULL;
        free(key);
    }
    apires_put(&a->rest->reg, t);
    return obj;
}

/* Points id->user at id's name and its first n groups. */
static void identity(struct apiauth_identity *id, size_t n)
{
    id->user = (struct rbac_user){.name = id->name, .ngroups = n};
    for (size_t i = 0; i < n; i++)
        id->user.groups[i] = id->groups[i];
}

static void sa_groups(struct apiauth_identity *id, const char *ns)
{
    snprintf(id->groups[0], sizeof id->groups[0], "system:serviceaccounts");
    snprintf(id->groups[1], sizeof id->groups[1], "system:serviceaccounts:%s", ns);
    snprintf(id->groups[2], sizeof id->groups[2], "system:authenticated");
    identity(id, 3);
}

int apiauth_authenticate(struct apiauth *a, const char *authorization,
                         struct apiauth_identity *ret)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return TERN_EAUTH; /* the scheme is case-insensitive */
    const char *t = authorization + 7;
    memset(ret, 0, sizeof *ret);
    ret->auth = a;
    if (same_secret(t, a->admin_token)) {
        ret->admin = true;
        snprintf(ret->name, sizeof ret->name, "%s", APIAUTH_ADMIN_USER);
        snprintf(ret->groups[0], sizeof ret->groups[0], "system:masters");
        snprintf(ret->groups[1], sizeof ret->groups[1], "system:authenticated");
        identity(ret, 2);
        return 0;
    }
    struct satoken_claims c;
    if (!a->have_key || satoken_verify(a->sa_key, t, &c, NULL))
        return TERN_EAUTH;
    cJSON *sa = stored(a, "", "serviceaccounts", c.ns, c.name);
    const cJSON *uid = json_get(json_get(sa, "metadata"), "uid");
    bool ok = cJSON_IsString(uid) && strcmp(uid->valuestring, c.uid) == 0;
    cJSON_Delete(sa);
    if (!ok)
        return TERN_EAUTH;
    snprintf(ret->name, sizeof ret->name, "system:serviceaccount:%s:%s", c.ns, c.name);
    sa_groups(ret, c.ns);
    return 0;
}

/* ---- the policy ------------------------------------------------------------ */

/* Reads the four kinds into fresh arrays; on error keeps the old ones (a
 * read error denies nothing it allowed before and allows nothing new). */
static void policy_load(struct apiauth *a)
{
    cJSON *fresh[4] = {0};
    struct apires_table *t = apires_get(&a->rest->reg);
    bool ok = true;
    for (int i = 0; i < 4 && ok; i++) {
        const struct apires *res = apires_find(t, "rbac.authorization.k8s.io", "v1",
                                               POLICY_KINDS[i]);
        if (!res) {
            ok = false;
            break;
        }
        char *prefix = apires_key(res, NULL, NULL);
        struct apistore_list l = {0};
        fresh[i] = cJSON_CreateArray();
        if (apistore_list(&a->rest->store, prefix, NULL, 0, 0, &l, NULL)) {
            ok = false;
        } else {
            for (size_t k = 0; k < l.n; k++) {
                cJSON_AddItemToArray(fresh[i], l.objs[k]);
                l.objs[k] = NULL;
            }
        }
        apistore_list_done(&l);
        free(prefix);
    }
    apires_put(&a->rest->reg, t);
    if (!ok) {
        for (int i = 0; i < 4; i++)
            cJSON_Delete(fresh[i]);
        return;
    }
    for (int i = 0; i < 4; i++) {
        cJSON_Delete(a->policy[i]);
        a->policy[i] = fresh[i];
    }
    a->loaded_ms = now_ms();
}

static bool decide(struct apiauth *a, const struct rbac_user *u, const struct rbac_request *r,
                   char *reason, size_t reason_len)
{
    pthread_mutex_lock(&a->mu);
    bool fresh = false;
    if (!a->policy[0] || now_ms() - a->loaded_ms >= POLICY_TTL_MS) {
        policy_load(a);
        fresh = true;
    }
    struct rbac_policy p = {a->policy[0], a->policy[1], a->policy[2], a->policy[3]};
    bool ok = rbac_allows(&p, u, r, reason, reason_len);
    if (!ok && !fresh) { /* a binding written a moment ago counts at once */
        policy_load(a);
        p = (struct rbac_policy){a->policy[0], a->policy[1], a->policy[2], a->policy[3]};
        ok = rbac_allows(&p, u, r, reason, reason_len);
    }
    pthread_mutex_unlock(&a->mu);
    return ok;
}

static const char *or_empty(const char *s)
{
    return s ? s : "";
}

static void log_decision(struct apiauth *a, const struct rbac_user *u,
                         const struct rbac_request *r, bool allowed, const char *reason)
{
    if (!a->log)
        return;
    struct buf b;
    buf_init(&b, 64u << 10);
    const char *keys[] = {"user", "verb", "apiGroup", "resource", "subresource",
                          "namespace", "name", "path", "reason"};
    const char *vals[] = {u->name, r->verb, r->group, r->resource, r->subresource,
                          r->ns, r->name, r->path, reason};
    buf_putc(&b, '{');
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        buf_printf(&b, "%s\"%s\":", i ? "," : "", keys[i]);
        buf_put_json_string(&b, or_empty(vals[i]));
    }
    buf_printf(&b, ",\"allowed\":%s}\n", allowed ? "true" : "false");
    pthread_mutex_lock(&a->log_mu);
    fwrite(b.data, 1, b.len, a->log);
    fflush(a->log);
    pthread_mutex_unlock(&a->log_mu);
    buf_done(&b);
}

/* ---- authorization ----------------------------------------------------------- */

static const char *arg(const struct apirest_req *req, const char *key)
{
    for (size_t i = 0; i < req->nargs; i++)
        if (strcmp(req->args[i].key, key) == 0)
            return req->args[i].value;
    return NULL;
}

/* The object a list or watch is narrowed to by fieldSelector
 * metadata.name=NAME (k8s.io/apiserver's RequestInfo does the same), into
 * buf; NULL when none. */
static const char *selected_name(const struct apirest_req *req, char *buf, size_t len)
{
    const char *fs = arg(req, "fieldSelector");
    static const char pre[] = "metadata.name=";
    if (!fs || strncmp(fs, pre, sizeof pre - 1) != 0 || strchr(fs, ','))
        return NULL;
    snprintf(buf, len, "%s", fs + sizeof pre - 1);
    return buf;
}

static cJSON *forbidden(const struct rbac_user *u, const struct rbac_request *r)
{
    char *why = rbac_denial(u, r);
    cJSON *st = r->resource_request ? apistatus_forbidden(r->group, r->resource, r->name, why)
                                    : apistatus_forbidden(NULL, NULL, NULL, why);
    free(why);
    return st;
}

/* The OwnerReferencesPermissionEnforcement check of a create or update
 * body. Returns 0 or TERN_EAUTH with *ret_status. */
static int owner_refs_allowed(struct apiauth *a, const struct apiauth_identity *id,
                              const struct rbac_request *req, const char *body, size_t len,
                              cJSON **ret_status)
{
    cJSON *obj = NULL;
    if (json_parse(body, len, &obj, NULL))
        return 0; /* not JSON (protobuf, or broken): the REST layer answers */
    int rc = 0;
    const cJSON *ref;
    cJSON_ArrayForEach(ref, json_get(json_get(obj, "metadata"), "ownerReferences"))
    {
        if (!cJSON_IsTrue(json_get(ref, "blockOwnerDeletion")))
            continue;
        const cJSON *av = json_get(ref, "apiVersion"), *kind = json_get(ref, "kind"),
                    *name = json_get(ref, "name");
        if (!cJSON_IsString(av) || !cJSON_IsString(kind) || !cJSON_IsString(name))
            continue; /* the REST layer's validation answers */
        char group[256] = "", version[64];
        const char *slash = strchr(av->valuestring, '/');
        if (slash) {
            snprintf(group, sizeof group, "%.*s", (int)(slash - av->valuestring),
                     av->valuestring);
            snprintf(version, sizeof version, "%s", slash + 1);
        } else {
            snprintf(version, sizeof version, "%s", av->valuestring);
        }
        char plural[256] = "";
        struct apires_table *t = apires_get(&a->rest->reg);
        for (size_t i = 0; i < t->n; i++) {
            const struct apires *res = &t->v[i];
            if (strcmp(res->group, group) == 0 && strcmp(res->version, version) == 0 &&
                strcmp(res->kind, kind->valuestring) == 0)
                snprintf(plural, sizeof plural, "%s", res->plural);
        }
        apires_put(&a->rest->reg, t);
        struct rbac_request fin = {.verb = "update", .resource_request = true, .group = group,
                                   .resource = plural, .subresource = "finalizers",
                                   .ns = req->ns, .name = name->valuestring,
                                   .path = req->path};
        char reason[1024] = "";
        bool ok = plural[0] && decide(a, &id->user, &fin, reason, sizeof reason);
        log_decision(a, &id->user, &fin, ok, reason);
        if (ok)
            continue;
        if (!plural[0]) {
            char *m = xasprintf("cannot set blockOwnerDeletion in this case because cannot find "
                                "RESTMapping for APIVersion %s Kind %s",
                                av->valuestring, kind->valuestring);
            *ret_status = apistatus_forbidden(req->group, req->resource, req->name, m);
            free(m);
        } else {
            /* the Status names the object being written, the text the owner */
            char *why = rbac_denial(&id->user, &fin);
            char *m = xasprintf("cannot set blockOwnerDeletion if an ownerReference refers to "
                                "a resource you can't set finalizers on: %s",
                                why);
            *ret_status = apistatus_forbidden(req->group, req->resource, req->name, m);
            free(why);
            free(m);
        }
        rc = TERN_EAUTH;
        break;
    }
    cJSON_Delete(obj);
    return rc;
}

bool apiauth_can(void *idp, const struct rbac_request *r, char *reason, size_t reason_len)
{
    const struct apiauth_identity *id = idp;
    if (id->admin) {
        if (reason_len)
            reason[0] = 0; /* as kube-apiserver's privileged-group authorizer */
        return true;
    }
    return decide(id->auth, &id->user, r, reason, reason_len);
}

bool apiauth_review(void *auth, const struct rbac_user *u, const struct rbac_request *r,
                    char *reason, size_t reason_len)
{
    for (size_t i = 0; i < u->ngroups; i++)
        if (u->groups[i] && strcmp(u->groups[i], "system:masters") == 0) {
            snprintf(reason, reason_len, "member of system:masters");
            return true;
        }
    return decide(auth, u, r, reason, reason_len);
}

static const char SA_PREFIX[] = "system:serviceaccount:";

/* May id impersonate resource/name (ns for service accounts)? Logged like
 * any decision. */
static int may_impersonate(struct apiauth *a, const struct apiauth_identity *id,
                           const char *resource, const char *ns, const char *name,
                           cJSON **ret_status)
{
    if (id->admin)
        return 0;
    struct rbac_request r = {.verb = "impersonate", .resource_request = true, .group = "",
                             .resource = resource, .ns = ns, .name = name, .path = ""};
    char reason[1024] = "";
    bool ok = decide(a, &id->user, &r, reason, sizeof reason);
    log_decision(a, &id->user, &r, ok, reason);
    if (ok)
        return 0;
    *ret_status = forbidden(&id->user, &r);
    return TERN_EAUTH;
}

int apiauth_impersonate(struct apiauth *a, struct apiauth_identity *id, const char *user,
                        const char *const *groups, size_t ngroups, cJSON **ret_status)
{
    if (!user && ngroups == 0)
        return 0;
    const char *bad = NULL;
    if (!user || !*user)
        bad = "requested impersonation of groups without impersonating a user";
    else if (ngroups + 1 > RBAC_MAX_GROUPS)
        bad = "too many impersonated groups";
    else if (strlen(user) >= sizeof id->name)
        bad = "impersonated user name too long";
    for (size_t i = 0; !bad && i < ngroups; i++)
        if (strlen(groups[i]) >= sizeof id->groups[0])
            bad = "impersonated group name too long";
    if (bad) {
        *ret_status = apistatus_bad_request(bad);
        return TERN_EINVALID;
    }
    /* a service account is "system:serviceaccount:NS:NAME" */
    char ns[256] = "", sa[256] = "";
    const char *rest = strncmp(user, SA_PREFIX, sizeof SA_PREFIX - 1) == 0
                           ? user + sizeof SA_PREFIX - 1 : NULL;
    const char *colon = rest ? strchr(rest, ':') : NULL;
    bool is_sa = colon && colon > rest && colon[1] && !strchr(colon + 1, ':') &&
                 (size_t)(colon - rest) < sizeof ns && strlen(colon + 1) < sizeof sa;
    int rc;
    if (is_sa) {
        snprintf(ns, sizeof ns, "%.*s", (int)(colon - rest), rest);
        snprintf(sa, sizeof sa, "%s", colon + 1);
        rc = may_impersonate(a, id, "serviceaccounts", ns, sa, ret_status);
    } else {
        rc = may_impersonate(a, id, "users", NULL, user, ret_status);
    }
    for (size_t i = 0; rc == 0 && i < ngroups; i++)
        rc = may_impersonate(a, id, "groups", NULL, groups[i], ret_status);
    if (rc)
        return rc;
    id->admin = false;
    snprintf(id->name, sizeof id->name, "%s", user);
    if (is_sa && ngroups == 0) {
        sa_groups(id, ns);
        return 0;
    }
    size_t n = 0;
    bool authenticated = false;
    for (size_t i = 0; i < ngroups; i++) {
        snprintf(id->groups[n++], sizeof id->groups[0], "%s", groups[i]);
        authenticated |= strcmp(groups[i], "system:authenticated") == 0;
    }
    if (!authenticated)
        snprintf(id->groups[n++], sizeof id->groups[0], "system:authenticated");
    identity(id, n);
    /* an impersonated system:masters member is an admin again */
    for (size_t i = 0; i < n; i++)
        id->admin |= strcmp(id->groups[i], "system:masters") == 0;
    return 0;
}

int apiauth_authorize(struct apiauth *a, const struct apiauth_identity *id,
                      const struct apirest_req *req, cJSON **ret_status)
{
    if (id->admin)
        return 0;
    struct apirest_path p;
    bool parsed = apirest_parse_path(req->path, &p) == 0;
    struct rbac_request r = {.path = req->path};
    char method[16], name[256];
    if (parsed && p.kind == APIREST_P_RESOURCE) {
        const char *w = arg(req, "watch");
        bool watch = w && strcmp(w, "false") != 0 && strcmp(w, "0") != 0;
        r.resource_request = true;
        r.group = p.group;
        r.resource = p.resource;
        r.subresource = p.sub;
        r.ns = p.ns;
        r.name = p.name;
        if (!r.name && (strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0))
            r.name = selected_name(req, name, sizeof name);
        if (!r.ns && p.name && strcmp(p.resource, "namespaces") == 0)
            r.ns = p.name; /* a namespace is in itself, as RequestInfo has it */
        r.verb = rbac_verb(req->method, p.name != NULL, watch);
    } else {
        size_t i = 0;
        for (; req->method[i] && i < sizeof method - 1; i++)
            method[i] = (char)(req->method[i] | 0x20);
        method[i] = 0;
        r.verb = method;
    }
    char reason[1024] = "";
    bool ok = decide(a, &id->user, &r, reason, sizeof reason);
    log_decision(a, &id->user, &r, ok, reason);
    int rc = 0;
    if (!ok) {
        *ret_status = forbidden(&id->user, &r);
        rc = TERN_EAUTH;
    } else if (r.resource_request &&
               (strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0) &&
               !req->body_too_large && req->body_len > 0) {
        rc = owner_refs_allowed(a, id, &r, req->body, req->body_len, ret_status);
    }
    if (parsed)
        apirest_path_done(&p);
    return rc;
}
