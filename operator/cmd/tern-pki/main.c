/* tern-pki - makes and renews the certificates of Tern's install (the Job
 * of charts/tern and deploy/base; docs/journal.md, "The locked door").
 *
 *   tern-pki [--namespace NS] [--prefix P] [--etcd-service NAME] [--etcd-san SANS]
 *            [--api-service NAME] [--api-san SANS] [--days N] [--ca-days N]
 *            [--rotate] [--kubeconfig FILE]
 *
 * Secrets in NS, named after the prefix P (default "tern"; the chart passes
 * its full name) (created when missing, a leaf renewed when --rotate is
 * given, when a third of its lifetime is left, or when its CA changed):
 *   P-journal-ca           ca.crt ca.key        the journal's CA (only here)
 *   P-journal-server      ca.crt tls.crt tls.key   etcd's serving and peer
 *                          certificate (DNS of the etcd Service and its pods,
 *                          127.0.0.1, localhost, --etcd-san)
 *   P-journal-operator    ca.crt tls.crt tls.key root-password operator-password
 *                          the operator's client certificate and the etcd
 *                          passwords (32 random bytes each, never renewed here)
 *   P-journal-runner      ca.crt tls.crt tls.key   the runners' client
 *                          certificate (the operator copies it per session)
 *   P-api-ca              ca.crt ca.key        the aggregated API's CA
 *   P-api-serving         ca.crt tls.crt tls.key   the operator's serving
 *                          certificate for the APIService (DNS of the
 *                          --api-service Service, --api-san); only with
 *                          --api-service (default tern-operator; "" = none)
 * It prints one JSON line per Secret (created, renewed or kept) and exits 0,
 * 1 on failure, 2 on bad usage. The CA itself is never replaced here: a new
 * CA takes a restart of etcd (docs/journal.md, "Rotation").
 */
#include "base/base64.h"
#include "base/err.h"
#include "base/mem.h"
#include "base/num.h"
#include "base/tlog.h"
#include "json/json.h"
#include "kube/kclient.h"
#include "kube/kubeconfig.h"
#include "pki/pki.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

static const struct kgvr secrets = {"", "v1", "secrets"};

struct opts {
    const char *ns, *prefix, *etcd_service, *etcd_san, *api_service, *api_san, *kubeconfig;
    int64_t days, ca_days;
    bool rotate;
};

struct ctx {
    struct opts o;
    struct kclient *kc;
};

static int usage(void)
{
    fputs("usage: tern-pki [--namespace NS] [--prefix P] [--etcd-service NAME] [--etcd-san SANS] "
          "[--api-service NAME] [--api-san SANS] [--days N] [--ca-days N] [--rotate] "
          "[--kubeconfig FILE]\n",
          stderr);
    return 2;
}

/* data[key] of a Secret, decoded (newly allocated), or NULL. */
static char *get_data(const cJSON *s, const char *key)
{
    const cJSON *v = json_get(json_get(s, "data"), key);
    if (!cJSON_IsString(v))
        return NULL;
    unsigned char *raw = NULL;
    size_t n = 0;
    if (base64_decode(v->valuestring, strlen(v->valuestring), &raw, &n) != 0)
        return NULL;
    char *t = xmalloc(n + 1);
    memcpy(t, raw, n);
    t[n] = 0;
    explicit_bzero(raw, n);
    free(raw);
    return t;
}

static void set_data(cJSON *s, const char *key, const char *value)
{
    cJSON *d = (cJSON *)json_get(s, "data");
    if (!d)
        d = cJSON_AddObjectToObject(s, "data");
    char *b = base64_encode(value, strlen(value));
    cJSON_DeleteItemFromObjectCaseSensitive(d, key);
    json_add_string(d, key, b);
    free(b);
}

static void wipe(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

/* The Secret name, or a new one (owned by the caller, *ret_new). */
static int load(struct ctx *c, const char *name, cJSON **ret, bool *ret_new, struct tern_err *err)
{
    struct kclient_err ke = {0};
    int r = kclient_get(c->kc, &secrets, c->o.ns, name, ret, &ke);
    if (r == TERN_ENOTFOUND) {
        cJSON *s = cJSON_CreateObject();
        json_add_string(s, "apiVersion", "v1");
        json_add_string(s, "kind", "Secret");
        cJSON *m = cJSON_AddObjectToObject(s, "metadata");
        json_add_string(m, "name", name);
        json_add_string(m, "namespace", c->o.ns);
        cJSON *l = cJSON_AddObjectToObject(m, "labels");
        json_add_string(l, "app.kubernetes.io/name", "tern");
        json_add_string(l, "app.kubernetes.io/component", "pki");
        json_add_string(s, "type", "Opaque");
        *ret = s;
        *ret_new = true;
        return 0;
    }
    if (r)
        return err_set(err, r, "get secret %s/%s: %s", c->o.ns, name, ke.e.msg);
    *ret_new = false;
    return 0;
}

static int store(struct ctx *c, cJSON *s, bool is_new, const char *name, struct tern_err *err)
{
    struct kclient_err ke = {0};
    int r = is_new ? kclient_create(c->kc, &secrets, c->o.ns, s, NULL, &ke)
                   : kclient_update(c->kc, &secrets, c->o.ns, s, NULL, &ke);
    if (r)
        return err_set(err, r, "%s secret %s/%s: %s", is_new ? "create" : "update", c->o.ns,
                       name, ke.e.msg);
    return 0;
}

static void say(const char *name, const char *what, const char *why)
{
    tlog_info("secret", "name", name, "action", what, "reason", why);
}

/* The CA of Secret name: loaded, or made once. */
static int ensure_ca(struct ctx *c, const char *name, const char *ou, struct pki_pair *ret,
                     struct tern_err *err)
{
    cJSON *s = NULL;
    bool is_new = false;
    int r = load(c, name, &s, &is_new, err);
    if (r)
        return r;
    char *crt = get_data(s, "ca.crt"), *key = get_data(s, "ca.key");
    if (crt && key) {
        ret->cert_pem = crt;
        ret->key_pem = key;
        say(name, "kept", "present");
        cJSON_Delete(s);
        return 0;
    }
    free(crt);
    wipe(key);
    if (!is_new) {
        cJSON_Delete(s);
        return err_set(err, TERN_EINVALID,
                       "secret %s/%s exists without ca.crt and ca.key; not replacing a CA", c->o.ns,
                       name);
    }
    r = pki_ca_new(ou, (int)c->o.ca_days, ret, err);
    if (!r) {
        set_data(s, "ca.crt", ret->cert_pem);
        set_data(s, "ca.key", ret->key_pem);
        r = store(c, s, is_new, name, err);
        if (!r)
            say(name, "created", "missing");
    }
    cJSON_Delete(s);
    return r;
}

static char *random_password(void)
{
    unsigned char b[32];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        return NULL;
    char *h = xmalloc(65);
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(h + 2 * i, 3, "%02x", b[i]);
    explicit_bzero(b, sizeof b);
    return h;
}

/* A leaf in Secret name, issued or renewed as needed; passwords: keys that
 * get 32 random bytes once. */
static int ensure_leaf(struct ctx *c, const char *name, const struct pki_pair *ca,
                       const char *ou, unsigned usage, const char *sans,
                       const char *const *passwords, struct tern_err *err)
{
    cJSON *s = NULL;
    bool is_new = false;
    int r = load(c, name, &s, &is_new, err);
    if (r)
        return r;
    char *crt = get_data(s, "tls.crt"), *cab = get_data(s, "ca.crt");
    const char *why = NULL;
    int64_t left = 0;
    struct tern_err e2 = {0};
    if (!crt)
        why = "missing";
    else if (c->o.rotate)
        why = "--rotate";
    else if (pki_cert_remaining(crt, ca->cert_pem, &left, &e2))
        why = "signed by another CA";
    else if (left < c->o.days * 86400 / 3)
        why = "a third of its lifetime left";
    else if (!cab || strcmp(cab, ca->cert_pem) != 0)
        why = "CA bundle differs";
    bool changed = false;
    if (why) {
        struct pki_pair leaf = {0};
        if ((r = pki_leaf_new(ca, ou, usage, sans, (int)c->o.days, &leaf, err)))
            goto out;
        set_data(s, "ca.crt", ca->cert_pem);
        set_data(s, "tls.crt", leaf.cert_pem);
        set_data(s, "tls.key", leaf.key_pem);
        pki_pair_done(&leaf);
        changed = true;
    }
    for (const char *const *p = passwords; p && *p; p++) {
        char *have = get_data(s, *p);
        if (!have || !*have) {
            char *pw = random_password();
            if (!pw) {
                wipe(have);
                r = err_set(err, -EIO, "no random bytes");
                goto out;
            }
            set_data(s, *p, pw);
            wipe(pw);
            changed = true;
            if (!why)
                why = "password missing";
        }
        wipe(have);
    }
    if (changed) {
        r = store(c, s, is_new, name, err);
        if (!r)
            say(name, is_new ? "created" : "renewed", why);
    } else {
        say(name, "kept", "valid");
    }
out:
    free(crt);
    free(cab);
    cJSON_Delete(s);
    return r;
}

static char *join_sans(const char *base, const char *extra)
{
    return extra && *extra ? xasprintf("%s,%s", base, extra) : xstrdup(base);
}

int main(int argc, char **argv)
{
    struct ctx c = {.o = {.prefix = "tern",
                          .etcd_service = "tern-etcd",
                          .api_service = "tern-operator",
                          .days = 365,
                          .ca_days = 3650}};
    for (int i = 1; i < argc; i++) {
        /* --flag value or --flag=value */
        char flag[32];
        const char *a = argv[i], *eq = strchr(a, '=');
        const char *v = eq ? eq + 1 : i + 1 < argc ? argv[i + 1] : NULL;
        size_t fl = eq ? (size_t)(eq - a) : strlen(a);
        if (fl >= sizeof flag)
            return usage();
        memcpy(flag, a, fl);
        flag[fl] = 0;
        a = flag;
        int step = eq ? 0 : 1;
#define TAKE(name, field)                                                                          \
    if (strcmp(a, name) == 0 && v) {                                                               \
        c.o.field = v;                                                                             \
        i += step;                                                                                 \
        continue;                                                                                  \
    }
        TAKE("--namespace", ns);
        TAKE("--prefix", prefix);
        TAKE("--etcd-service", etcd_service);
        TAKE("--etcd-san", etcd_san);
        TAKE("--api-service", api_service);
        TAKE("--api-san", api_san);
        TAKE("--kubeconfig", kubeconfig);
#undef TAKE
        if ((strcmp(a, "--days") == 0 || strcmp(a, "--ca-days") == 0) && v) {
            int64_t n;
            if (num_parse_range(v, 1, 36500, &n))
                return usage();
            *(strcmp(a, "--days") == 0 ? &c.o.days : &c.o.ca_days) = n;
            i += step;
        } else if (strcmp(a, "--rotate") == 0 && !eq) {
            c.o.rotate = true;
        } else {
            return usage();
        }
    }
    tlog_init("tern-pki", TLOG_INFO);
    struct tern_err err = {0};
    struct kubeconfig *kc = NULL;
    int rc = 1;
    struct pki_pair jca = {0}, aca = {0};
    char *esans = NULL, *asans = NULL;
    if (kubeconfig_load_auto(c.o.kubeconfig, NULL, NULL, &kc, &err)) {
        tlog_error("no Kubernetes configuration", "error", err.msg);
        goto out;
    }
    if (!c.o.ns || !*c.o.ns)
        c.o.ns = kc->namespace && *kc->namespace ? kc->namespace : "default";
    c.kc = kclient_new(kc, NULL);
    const char *ns = c.o.ns, *es = c.o.etcd_service;
    char *base = xasprintf("DNS:%s,DNS:%s.%s,DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local,"
                           "DNS:*.%s.%s.svc,DNS:*.%s.%s.svc.cluster.local,DNS:localhost,"
                           "IP:127.0.0.1",
                           es, es, ns, es, ns, es, ns, es, ns, es, ns);
    esans = join_sans(base, c.o.etcd_san);
    free(base);
    static const char *const passwords[] = {"root-password", "operator-password", NULL};
    const char *p = c.o.prefix;
    char *n_jca = xasprintf("%s-journal-ca", p), *n_srv = xasprintf("%s-journal-server", p);
    char *n_op = xasprintf("%s-journal-operator", p), *n_run = xasprintf("%s-journal-runner", p);
    char *n_aca = xasprintf("%s-api-ca", p), *n_api = xasprintf("%s-api-serving", p);
    int bad = ensure_ca(&c, n_jca, "journal-ca", &jca, &err) ||
              ensure_leaf(&c, n_srv, &jca, "journal-etcd", PKI_SERVER | PKI_CLIENT, esans, NULL,
                          &err) ||
              ensure_leaf(&c, n_op, &jca, "journal-operator", PKI_CLIENT, NULL, passwords, &err) ||
              ensure_leaf(&c, n_run, &jca, "journal-runner", PKI_CLIENT, NULL, NULL, &err);
    if (bad)
        tlog_error("journal certificates", "error", err.msg);
    if (!bad && c.o.api_service && *c.o.api_service) {
        const char *as = c.o.api_service;
        base = xasprintf("DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local,DNS:%s.%s", as, ns, as, ns,
                         as, ns);
        asans = join_sans(base, c.o.api_san);
        free(base);
        bad = ensure_ca(&c, n_aca, "stream-api-ca", &aca, &err) ||
              ensure_leaf(&c, n_api, &aca, "stream-api", PKI_SERVER, asans, NULL, &err);
        if (bad)
            tlog_error("API certificates", "error", err.msg);
    }
    free(n_jca);
    free(n_srv);
    free(n_op);
    free(n_run);
    free(n_aca);
    free(n_api);
    if (bad)
        goto out;
    rc = 0;
out:
    pki_pair_done(&jca);
    pki_pair_done(&aca);
    free(esans);
    free(asans);
    kclient_free(c.kc);
    kubeconfig_free(kc);
    return rc;
}
