/* jaccess.c - each session's access to its journal. See jaccess.h. */
#include "jaccess.h"

#include "base/base64.h"
#include "base/mem.h"
#include "controller/children.h"
#include "journal/journal.h"
#include "json/json.h"
#include "kube/kmap.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#define PEM_MAX (64u << 10)

struct pem_file {
    char *path;
    char *text; /* the contents last read */
    struct timespec mtime;
    off_t size;
};

struct jaccess {
    struct etcd *admin;
    pthread_mutex_t mu; /* guards the files and verified */
    struct pem_file ca, cert, key;
    /* uids whose etcd user was seen or made since start, each with the
     * generation of the runner material its Secret was last checked against
     * (as a pointer: gen + 1) */
    struct kmap *verified;
    struct kmap *parked; /* uids whose user was removed by jaccess_park since start */
    uintptr_t gen; /* bumped when a re-read file's content changed */
};

/* Re-reads f when its mtime or size changed (a rotated Secret volume swaps
 * the file). Returns 0, or TERN_EINVALID. */
static int refresh(struct pem_file *f, uintptr_t *gen, struct tern_err *err)
{
    struct stat st;
    if (stat(f->path, &st) != 0)
        return err_set(err, TERN_EINVALID, "journal access: %s: %s", f->path, strerror(errno));
    if (f->text && st.st_mtim.tv_sec == f->mtime.tv_sec &&
        st.st_mtim.tv_nsec == f->mtime.tv_nsec && st.st_size == f->size)
        return 0;
    FILE *fp = fopen(f->path, "re");
    if (!fp)
        return err_set(err, TERN_EINVALID, "journal access: %s: %s", f->path, strerror(errno));
    char *b = xmalloc(PEM_MAX + 1);
    size_t n = fread(b, 1, PEM_MAX + 1, fp);
    fclose(fp);
    if (n == 0 || n > PEM_MAX || memchr(b, 0, n) || !strstr((b[n] = 0, b), "-----BEGIN")) {
        explicit_bzero(b, PEM_MAX + 1);
        free(b);
        return err_set(err, TERN_EINVALID, "journal access: %s is not a PEM file of at most %u "
                                           "bytes",
                       f->path, PEM_MAX);
    }
    if (!f->text || strcmp(f->text, b) != 0)
        (*gen)++;
    if (f->text) {
        explicit_bzero(f->text, strlen(f->text));
        free(f->text);
    }
    f->text = b;
    f->mtime = st.st_mtim;
    f->size = st.st_size;
    return 0;
}

static void pem_done(struct pem_file *f)
{
    if (f->text)
        explicit_bzero(f->text, strlen(f->text));
    free(f->text);
    free(f->path);
}

int jaccess_new(const struct jaccess_config *cfg, struct jaccess **ret, struct tern_err *err)
{
    if (!cfg || !cfg->admin || !cfg->ca_file || !cfg->runner_cert_file || !cfg->runner_key_file)
        return err_set(err, TERN_EINVALID,
                       "journal access: the root client, the CA and the runner's certificate "
                       "and key are required");
    struct jaccess *a = xcalloc(1, sizeof *a);
    a->admin = cfg->admin;
    pthread_mutex_init(&a->mu, NULL);
    a->ca.path = xstrdup(cfg->ca_file);
    a->cert.path = xstrdup(cfg->runner_cert_file);
    a->key.path = xstrdup(cfg->runner_key_file);
    a->verified = kmap_new();
    a->parked = kmap_new();
    int r = refresh(&a->ca, &a->gen, err);
    if (!r)
        r = refresh(&a->cert, &a->gen, err);
    if (!r)
        r = refresh(&a->key, &a->gen, err);
    if (r) {
        jaccess_free(a);
        return r;
    }
    *ret = a;
    return 0;
}

void jaccess_free(struct jaccess *a)
{
    if (!a)
        return;
    pem_done(&a->ca);
    pem_done(&a->cert);
    pem_done(&a->key);
    kmap_free(a->verified);
    kmap_free(a->parked);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

cJSON *jaccess_secret(const struct session_spec *s, const char *password, const char *ca,
                      const char *cert, const char *key)
{
    cJSON *o = cJSON_CreateObject();
    json_add_string(o, "apiVersion", "v1");
    json_add_string(o, "kind", "Secret");
    cJSON *meta = cJSON_AddObjectToObject(o, "metadata");
    char *name = children_name(s->name, "journal");
    json_add_string(meta, "name", name);
    free(name);
    json_add_string(meta, "namespace", s->namespace);
    cJSON *l = cJSON_AddObjectToObject(meta, "labels");
    json_add_string(l, CHILDREN_LABEL_SESSION, s->name);
    json_add_string(l, CHILDREN_LABEL_SESSION_UID, s->uid);
    json_add_string(l, CHILDREN_LABEL_ROLE, "journal");
    json_add_string(l, "app.kubernetes.io/managed-by", "tern");
    cJSON *owner = cJSON_CreateObject();
    json_add_string(owner, "apiVersion", "tern.dev/v1alpha1");
    json_add_string(owner, "kind", "AgentSession");
    json_add_string(owner, "name", s->name);
    json_add_string(owner, "uid", s->uid);
    cJSON_AddTrueToObject(owner, "controller");
    cJSON_AddTrueToObject(owner, "blockOwnerDeletion");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(meta, "ownerReferences"), owner);
    json_add_string(o, "type", "Opaque");
    cJSON *d = cJSON_AddObjectToObject(o, "stringData");
    json_add_string(d, "ca.crt", ca);
    json_add_string(d, "tls.crt", cert);
    json_add_string(d, "tls.key", key);
    char *user = journal_session_user(s->uid);
    json_add_string(d, "username", user ? user : "");
    free(user);
    json_add_string(d, "password", password);
    return o;
}

/* data[key] of a Secret, decoded (newly allocated), or NULL. */
static char *secret_value(const cJSON *secret, const char *key)
{
    const cJSON *v = json_get(json_get(secret, "data"), key);
    if (!cJSON_IsString(v))
        return NULL;
    unsigned char *raw = NULL;
    size_t n = 0;
    if (base64_decode(v->valuestring, strlen(v->valuestring), &raw, &n) != 0)
        return NULL;
    char *s = xmalloc(n + 1);
    memcpy(s, raw, n);
    s[n] = 0;
    explicit_bzero(raw, n);
    free(raw);
    if (strlen(s) != n) {
        free(s);
        return NULL;
    }
    return s;
}

static bool same(const cJSON *secret, const char *key, const char *want)
{
    char *have = secret_value(secret, key);
    bool eq = have && strcmp(have, want) == 0;
    if (have)
        explicit_bzero(have, strlen(have));
    free(have);
    return eq;
}

static void forget(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

int jaccess_ensure(struct jaccess *a, struct kclient *kc, const struct session_spec *s,
                   const cJSON *secret, struct tern_err *err)
{
    char *ca = NULL, *cert = NULL, *key = NULL, *password = NULL;
    cJSON *body = NULL, *fetched = NULL;
    int r;
    pthread_mutex_lock(&a->mu);
    r = refresh(&a->ca, &a->gen, err);
    if (!r)
        r = refresh(&a->cert, &a->gen, err);
    if (!r)
        r = refresh(&a->key, &a->gen, err);
    if (!r) {
        ca = xstrdup(a->ca.text);
        cert = xstrdup(a->cert.text);
        key = xstrdup(a->key.text);
    }
    uintptr_t gen = a->gen;
    bool verified = kmap_has(a->verified, s->uid);
    bool current = verified && (uintptr_t)kmap_get(a->verified, s->uid) == gen + 1;
    kmap_del(a->parked, s->uid); /* a runner needs it again: the user comes back below */
    pthread_mutex_unlock(&a->mu);
    if (r)
        goto out;
    static const struct kgvr secrets = {"", "v1", "secrets"};
    struct kclient_err ke = {0};
    if (secret && !current && !json_get(secret, "data")) {
        /* the informer's cache keeps no Secret's data (controller.c): read
         * this one, once per session and per change of the runner material */
        char *name = children_name(s->name, "journal");
        r = kclient_get(kc, &secrets, s->namespace, name, &fetched, &ke);
        free(name);
        if (r == TERN_ENOTFOUND) {
            r = 0;
            secret = NULL; /* deleted while parked, the cache behind: a new one */
        } else if (r) {
            err_set(err, r, "get secret %s-journal: %s", s->name, ke.e.msg);
            goto out;
        } else {
            secret = fetched;
        }
    }
    if (!secret) {
        /* a new password: the Secret first (its password is the truth),
         * then the user; an interrupted pass is completed by the next one,
         * which sees the Secret and makes or repairs the user */
        unsigned char b[32];
        char hex[65];
        if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
            r = err_set(err, -EIO, "journal access: no random bytes");
            goto out;
        }
        for (size_t i = 0; i < sizeof b; i++)
            snprintf(hex + 2 * i, 3, "%02x", b[i]);
        explicit_bzero(b, sizeof b);
        password = xstrdup(hex);
        explicit_bzero(hex, sizeof hex);
        body = jaccess_secret(s, password, ca, cert, key);
        r = kclient_create(kc, &secrets, s->namespace, body, NULL, &ke);
        if (r == -EEXIST) {
            /* the cache is behind: decide on the next pass, with the Secret */
            r = err_set(err, TERN_ECONFLICT, "secret %s-journal exists but is not in the cache "
                                             "yet",
                        s->name);
            goto out;
        }
        if (r) {
            err_set(err, r, "create secret %s-journal: %s", s->name, ke.e.msg);
            goto out;
        }
        if ((r = journal_access_grant(a->admin, s->uid, s->namespace, password, err)))
            goto out;
        goto out_verified;
    }
    if (current)
        goto out; /* checked since the runner material last changed */
    password = secret_value(secret, "password");
    if (!password || !*password) {
        r = err_set(err, TERN_EINVALID, "secret %s-journal has no password", s->name);
        goto out;
    }
    if (!same(secret, "tls.crt", cert) || !same(secret, "tls.key", key) ||
        !same(secret, "ca.crt", ca)) {
        /* a rotated runner certificate or CA: the next turn mounts it */
        cJSON *p = cJSON_CreateObject();
        cJSON *d = cJSON_AddObjectToObject(p, "stringData");
        json_add_string(d, "ca.crt", ca);
        json_add_string(d, "tls.crt", cert);
        json_add_string(d, "tls.key", key);
        char *text = json_print(p);
        cJSON_Delete(p);
        char *name = children_name(s->name, "journal");
        r = kclient_patch(kc, &secrets, s->namespace, name, KCLIENT_PATCH_MERGE, text,
                          strlen(text), NULL, NULL, &ke);
        forget(text);
        free(name);
        if (r) {
            err_set(err, r, "patch secret %s-journal: %s", s->name, ke.e.msg);
            goto out;
        }
    }
    if (!verified) {
        bool ok = false;
        if ((r = journal_access_check(a->admin, s->uid, &ok, err)))
            goto out;
        if (!ok && (r = journal_access_grant(a->admin, s->uid, s->namespace, password, err)))
            goto out;
    }
out_verified:
    pthread_mutex_lock(&a->mu);
    kmap_put(a->verified, s->uid, (void *)(gen + 1));
    pthread_mutex_unlock(&a->mu);
out:
    cJSON_Delete(fetched);
    cJSON_Delete(body);
    forget(ca);
    forget(cert);
    forget(key);
    forget(password);
    return r;
}

int jaccess_revoke(struct jaccess *a, const char *uid, struct tern_err *err)
{
    int r = journal_access_revoke(a->admin, uid, err);
    if (r == 0) {
        pthread_mutex_lock(&a->mu);
        kmap_del(a->verified, uid);
        kmap_del(a->parked, uid);
        pthread_mutex_unlock(&a->mu);
    }
    return r;
}

int jaccess_park(struct jaccess *a, const char *uid, struct tern_err *err)
{
    pthread_mutex_lock(&a->mu);
    bool parked = kmap_has(a->parked, uid);
    /* only a user this process made or checked: asking etcd about every
     * parked session after a restart cost two auth requests each (51 s for
     * 10,000); one that parked under an earlier process lost its user then */
    bool known = kmap_has(a->verified, uid);
    if (!parked && !known)
        kmap_put(a->parked, uid, (void *)1);
    pthread_mutex_unlock(&a->mu);
    if (parked || !known)
        return 0;
    int r = journal_access_revoke(a->admin, uid, err);
    if (r == 0) {
        pthread_mutex_lock(&a->mu);
        kmap_del(a->verified, uid);
        kmap_put(a->parked, uid, (void *)1);
        pthread_mutex_unlock(&a->mu);
    }
    return r;
}
