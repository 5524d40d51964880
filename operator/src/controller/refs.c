/* refs.c - references checked before children are created. See refs.h. */
#include "controller/refs.h"

#include "base/mem.h"
#include "json/json.h"

#include <stdlib.h>
#include <string.h>

static const struct kgvr configmaps = {"", "v1", "configmaps"};
static const struct kgvr secrets = {"", "v1", "secrets"};
static const struct kgvr serviceaccounts = {"", "v1", "serviceaccounts"};

/* 1: missing, 0: there (or cannot tell); *ret_obj the object when there. */
static int missing(struct kclient *kc, const struct kgvr *g, const char *ns, const char *name,
                   cJSON **ret_obj)
{
    cJSON *obj = NULL;
    struct kclient_err ke = {0};
    int r = kclient_get(kc, g, ns, name, &obj, &ke);
    if (r == TERN_ENOTFOUND) {
        cJSON_Delete(obj);
        return 1;
    }
    if (ret_obj && r == 0)
        *ret_obj = obj;
    else
        cJSON_Delete(obj);
    return 0;
}

static void set(struct observed_blocker *b, const char *reason, char *msg)
{
    b->reason = reason;
    b->message = msg;
}

void refs_check(struct kclient *kc, const struct session_spec *s,
                const struct children_config *cfg, struct refs_result *r)
{
    memset(r, 0, sizeof *r);
    const char *ns = s->namespace;
    /* the sandbox's ConfigMaps */
    for (size_t i = 0; i < s->context.nfiles && !r->sandbox.reason; i++)
        if (missing(kc, &configmaps, ns, s->context.files[i], NULL))
            set(&r->sandbox, "ConfigMapNotFound",
                xasprintf("ConfigMap \"%s\" (spec.context.files[%zu]) not found in namespace %s: "
                          "the sandbox pod cannot mount it; create it and the session goes on",
                          s->context.files[i], i, ns));
    for (size_t i = 0; i < s->nskills && !r->sandbox.reason; i++)
        if (missing(kc, &configmaps, ns, s->skills[i], NULL))
            set(&r->sandbox, "ConfigMapNotFound",
                xasprintf("ConfigMap \"%s\" (spec.skills[%zu]) not found in namespace %s: the "
                          "sandbox pod cannot mount it; create it and the session goes on",
                          s->skills[i], i, ns));
    if (s->memory && !r->sandbox.reason && missing(kc, &configmaps, ns, s->memory, NULL))
        set(&r->sandbox, "ConfigMapNotFound",
            xasprintf("ConfigMap \"%s\" (spec.memory) not found in namespace %s: the sandbox pod "
                      "cannot mount it; create it and the session goes on",
                      s->memory, ns));

    /* the runner's identity and model key */
    const char *sa = s->service_account ? s->service_account : cfg->runner_service_account;
    if (sa && missing(kc, &serviceaccounts, ns, sa, NULL)) {
        set(&r->runner, "ServiceAccountNotFound",
            xasprintf("ServiceAccount \"%s\" (%s) not found in namespace %s: turn Jobs cannot "
                      "create their pods; apply deploy/runner-rbac.yaml there (kubectl apply -n "
                      "%s -f deploy/runner-rbac.yaml) or set spec.identity.serviceAccountName",
                      sa,
                      s->service_account ? "spec.identity.serviceAccountName"
                                         : "the operator's default runner identity",
                      ns, ns));
        return;
    }
    const char *secret = s->model.api_key_secret ? s->model.api_key_secret : cfg->model_secret;
    const char *key = s->model.api_key_secret ? s->model.api_key_key : cfg->model_secret_key;
    if (!key)
        key = "api-key";
    if (secret) {
        const char *where = s->model.api_key_secret ? "spec.model.apiKeySecretRef"
                                                    : "the operator's --model-secret-name";
        cJSON *obj = NULL;
        if (missing(kc, &secrets, ns, secret, &obj)) {
            set(&r->runner, "SecretNotFound",
                xasprintf("Secret \"%s\" (%s) not found in namespace %s: the runner needs the "
                          "model API key from it; create it (key \"%s\") and the session goes on",
                          secret, where, ns, key));
        } else if (obj && !json_get(json_get(obj, "data"), key) &&
                   !json_get(json_get(obj, "stringData"), key)) {
            set(&r->runner, "SecretKeyNotFound",
                xasprintf("Secret \"%s\" (%s) has no key \"%s\": the runner needs the model API "
                          "key there",
                          secret, where, key));
        }
        cJSON_Delete(obj);
    }
    /* the trusted tools' credentials (mounted in the runner pod only) */
    for (size_t i = 0; i < s->tools.nmcp && !r->runner.reason; i++) {
        const struct session_mcp_server *m = &s->tools.mcp[i];
        if (m->headers_secret && missing(kc, &secrets, ns, m->headers_secret, NULL))
            set(&r->runner, "SecretNotFound",
                xasprintf("Secret \"%s\" (spec.tools.mcpServers[%zu].headersSecretRef) not found "
                          "in namespace %s: the runner sends its keys as the headers of MCP "
                          "server %s; create it and the session goes on",
                          m->headers_secret, i, ns, m->name));
    }
    for (size_t i = 0; i < s->tools.nremotes && !r->runner.reason; i++) {
        const struct session_publish_remote *p = &s->tools.remotes[i];
        cJSON *obj = NULL;
        if (missing(kc, &secrets, ns, p->token_secret, &obj))
            set(&r->runner, "SecretNotFound",
                xasprintf("Secret \"%s\" (spec.tools.publish.remotes[%zu].tokenSecretRef) not "
                          "found in namespace %s: the runner pushes to remote %s with its token; "
                          "create it (key \"%s\") and the session goes on",
                          p->token_secret, i, ns, p->name, p->token_key));
        else if (obj && !json_get(json_get(obj, "data"), p->token_key) &&
                 !json_get(json_get(obj, "stringData"), p->token_key))
            set(&r->runner, "SecretKeyNotFound",
                xasprintf("Secret \"%s\" (spec.tools.publish.remotes[%zu].tokenSecretRef) has no "
                          "key \"%s\": the runner needs the token of remote %s there",
                          p->token_secret, i, p->token_key, p->name));
        cJSON_Delete(obj);
    }
}

void refs_result_done(struct refs_result *r)
{
    free((char *)r->sandbox.message);
    free((char *)r->runner.message);
    memset(r, 0, sizeof *r);
}
