/* apirest_validate.c - object rules of the API (pure): metadata
 * validation (names, labels, annotations, ownerReferences, finalizers),
 * validation of the built-in kinds (a subset of the API validation
 * packages) and their defaulting, Secret stringData, the status a new
 * object starts with. See apirest_internal.h. */
#include "apirest_internal.h"

#include "apicrd.h"
#include "apiselector.h"
#include "apistatus.h"
#include "base/base64.h"
#include "base/mem.h"
#include "json/json.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- metadata ------------------------------------------------------------ */

static const char *check_name(const struct apires *res, const char *name)
{
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return "may not be '.' or '..'";
    if (strchr(name, '/') || strchr(name, '%'))
        return "may not contain '/' or '%'";
    if (!res->crd && strcmp(res->kind, "Namespace") == 0)
        return apicrd_check_label(name);
    if (!res->crd && (strcmp(res->kind, "Role") == 0 || strcmp(res->kind, "ClusterRole") == 0 ||
                      strcmp(res->kind, "RoleBinding") == 0 ||
                      strcmp(res->kind, "ClusterRoleBinding") == 0))
        return NULL; /* path segment names */
    if (!res->crd && strcmp(res->kind, "Service") == 0) {
        const char *e = apicrd_check_label(name);
        if (!e && !(name[0] >= 'a' && name[0] <= 'z'))
            return "a DNS-1035 label must consist of lower case alphanumeric characters or "
                   "'-', start with an alphabetic character, and end with an alphanumeric "
                   "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                   "'[a-z]([-a-z0-9]*[a-z0-9])?')";
        return e;
    }
    return apicrd_check_subdomain(name);
}

void apirest__validate_meta(const struct apires *res, const cJSON *obj, struct apistatus_fields *f)
{
    const cJSON *md = json_get(obj, "metadata");
    const cJSON *name = json_get(md, "name");
    if (cJSON_IsString(name)) {
        const char *e = check_name(res, name->valuestring);
        if (e)
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.name", name, e);
    }
    const cJSON *labels = json_get(md, "labels");
    if (labels && !cJSON_IsObject(labels))
        apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.labels", labels,
                             "must be a map of strings");
    for (const cJSON *l = cJSON_IsObject(labels) ? labels->child : NULL; l; l = l->next) {
        const char *ke = apisel_check_label_key(l->string);
        if (ke) {
            cJSON *k = cJSON_CreateString(l->string);
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.labels", k, ke);
            cJSON_Delete(k);
        }
        if (!cJSON_IsString(l)) {
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.labels", l,
                                 "must be a string");
            continue;
        }
        const char *ve = apisel_check_label_value(l->valuestring);
        if (ve)
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.labels", l, ve);
    }
    const cJSON *ann = json_get(md, "annotations");
    size_t total = 0;
    for (const cJSON *a = cJSON_IsObject(ann) ? ann->child : NULL; a; a = a->next) {
        const char *ke = apisel_check_label_key(a->string);
        if (ke) {
            cJSON *k = cJSON_CreateString(a->string);
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.annotations", k, ke);
            cJSON_Delete(k);
        }
        if (!cJSON_IsString(a))
            apistatus_fields_add(f, APISTATUS_F_INVALID, "metadata.annotations", a,
                                 "must be a string");
        else
            total += strlen(a->string) + strlen(a->valuestring);
    }
    if (total > 256 * 1024)
        apistatus_fields_addv(f, APISTATUS_F_TOOLONG, "metadata.annotations", NULL,
                              "may not be more than 262144 bytes");
    const cJSON *owners = json_get(md, "ownerReferences");
    int i = 0, controllers = 0;
    for (const cJSON *o = cJSON_IsArray(owners) ? owners->child : NULL; o; o = o->next, i++) {
        static const char *req[] = {"apiVersion", "kind", "name", "uid"};
        for (size_t k = 0; k < 4; k++) {
            const char *v = apirest__jstr(o, req[k]);
            if (!v || !*v) {
                char *p = xasprintf("metadata.ownerReferences[%d].%s", i, req[k]);
                apistatus_fields_addv(f, APISTATUS_F_INVALID, p, "\"\"",
                                      k == 3 ? "uid must not be empty"
                                             : k == 2 ? "name must not be empty"
                                             : k == 1 ? "kind must not be empty"
                                                      : "version must not be empty");
                free(p);
            }
        }
        if (cJSON_IsTrue(json_get(o, "controller")))
            controllers++;
    }
    if (controllers > 1)
        apistatus_fields_addv(f, APISTATUS_F_INVALID, "metadata.ownerReferences", NULL,
                              "Only one reference can have Controller set to true");
    const cJSON *fin = json_get(md, "finalizers");
    i = 0;
    for (const cJSON *c = cJSON_IsArray(fin) ? fin->child : NULL; c; c = c->next, i++) {
        if (!cJSON_IsString(c) || apisel_check_label_key(c->valuestring)) {
            char *p = xasprintf("metadata.finalizers[%d]", i);
            apistatus_fields_add(f, APISTATUS_F_INVALID, p, c,
                                 "name part must consist of alphanumeric characters, '-', '_' "
                                 "or '.', and must start and end with an alphanumeric "
                                 "character");
            free(p);
        }
    }
}

/* ---- built-in validation (a subset of the API validation packages) ------- */

static const char config_key_msg[] =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
    "'[-._a-zA-Z0-9]+')";

static void validate_config_keys(const cJSON *obj, const char *field, struct apistatus_fields *f)
{
    const cJSON *m = json_get(obj, field);
    for (const cJSON *c = cJSON_IsObject(m) ? m->child : NULL; c; c = c->next) {
        bool ok = *c->string && strlen(c->string) <= 253 && strcmp(c->string, ".") &&
                  strcmp(c->string, "..");
        for (const char *p = c->string; ok && *p; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 *p == '-' || *p == '_' || *p == '.';
        char *path = xasprintf("%s[%s]", field, c->string);
        if (!ok) {
            cJSON *k = cJSON_CreateString(c->string);
            apistatus_fields_add(f, APISTATUS_F_INVALID, path, k, config_key_msg);
            cJSON_Delete(k);
        } else if (!cJSON_IsString(c)) {
            apistatus_fields_add(f, APISTATUS_F_INVALID, path, c, "must be a string");
        }
        free(path);
    }
}

static void validate_containers(const cJSON *spec, const char *path, const char *list,
                                bool required, struct apistatus_fields *f)
{
    const cJSON *cs = json_get(spec, list);
    char *lp = xasprintf("%s.%s", path, list);
    if (required && (!cJSON_IsArray(cs) || !cs->child))
        apistatus_fields_addv(f, APISTATUS_F_REQUIRED, lp, NULL, NULL);
    int i = 0;
    for (const cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next, i++) {
        const char *name = apirest__jstr(c, "name"), *image = apirest__jstr(c, "image");
        char *np = xasprintf("%s[%d].name", lp, i), *ip = xasprintf("%s[%d].image", lp, i);
        if (!name || !*name) {
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, np, NULL, NULL);
        } else {
            const char *e = apicrd_check_label(name);
            if (e)
                apistatus_fields_add(f, APISTATUS_F_INVALID, np, json_get(c, "name"), e);
            for (const cJSON *d = cs->child; d != c; d = d->next) {
                const char *dn = apirest__jstr(d, "name");
                if (dn && strcmp(dn, name) == 0) {
                    apistatus_fields_add(f, APISTATUS_F_DUPLICATE, np, json_get(c, "name"), NULL);
                    break;
                }
            }
        }
        if (!image || !*image)
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, ip, NULL, NULL);
        free(np);
        free(ip);
    }
    free(lp);
}

static void validate_pod_spec(const cJSON *spec, const char *path, bool job,
                              struct apistatus_fields *f)
{
    if (!cJSON_IsObject(spec)) {
        apistatus_fields_addv(f, APISTATUS_F_REQUIRED, path, NULL, NULL);
        return;
    }
    validate_containers(spec, path, "containers", true, f);
    validate_containers(spec, path, "initContainers", false, f);
    const char *rp = apirest__jstr(spec, "restartPolicy");
    char *rpp = xasprintf("%s.restartPolicy", path);
    if (job) {
        if (!rp || (strcmp(rp, "Never") && strcmp(rp, "OnFailure"))) {
            if (!rp || strcmp(rp, "Always") == 0)
                apistatus_fields_addv(f, APISTATUS_F_REQUIRED, rpp, NULL,
                                      "valid values: \"OnFailure\", \"Never\"");
            else
                apistatus_fields_add(f, APISTATUS_F_UNSUPPORTED, rpp, json_get(spec, "restartPolicy"),
                                     "supported values: \"OnFailure\", \"Never\"");
        }
    } else if (rp && strcmp(rp, "Always") && strcmp(rp, "Never") && strcmp(rp, "OnFailure")) {
        apistatus_fields_add(f, APISTATUS_F_UNSUPPORTED, rpp, json_get(spec, "restartPolicy"),
                             "supported values: \"Always\", \"Never\", \"OnFailure\"");
    }
    free(rpp);
}

/* The pod spec fields an update may change (ValidatePodUpdate): container
 * images, activeDeadlineSeconds, tolerations (additions), and the grace
 * period. Returns true when something else changed. */
static bool pod_spec_changed(const cJSON *old, const cJSON *neu)
{
    cJSON *a = json_dup(old), *b = json_dup(neu);
    static const char *lists[] = {"containers", "initContainers"};
    for (size_t l = 0; l < 2; l++) {
        cJSON *ca = cJSON_GetObjectItemCaseSensitive(a, lists[l]);
        cJSON *cb = cJSON_GetObjectItemCaseSensitive(b, lists[l]);
        for (cJSON *x = cJSON_IsArray(ca) ? ca->child : NULL; x; x = x->next)
            cJSON_DeleteItemFromObjectCaseSensitive(x, "image");
        for (cJSON *x = cJSON_IsArray(cb) ? cb->child : NULL; x; x = x->next)
            cJSON_DeleteItemFromObjectCaseSensitive(x, "image");
    }
    static const char *mutable_fields[] = {"activeDeadlineSeconds", "tolerations",
                                           "terminationGracePeriodSeconds"};
    for (size_t i = 0; i < 3; i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(a, mutable_fields[i]);
        cJSON_DeleteItemFromObjectCaseSensitive(b, mutable_fields[i]);
    }
    bool changed = !cJSON_Compare(a, b, 1);
    cJSON_Delete(a);
    cJSON_Delete(b);
    return changed;
}

/* EndpointSlice addresses as kube-apiserver checks them
 * (pkg/apis/discovery/validation): the address type, and for IPv4 a valid
 * address that is not unspecified, loopback or link-local. */
static void validate_endpoint_slice(const cJSON *obj, struct apistatus_fields *f)
{
    const cJSON *at = json_get(obj, "addressType");
    const char *t = cJSON_IsString(at) ? at->valuestring : NULL;
    if (!t) {
        apistatus_fields_addv(f, APISTATUS_F_REQUIRED, "addressType", NULL, NULL);
        return;
    }
    if (strcmp(t, "IPv4") != 0 && strcmp(t, "IPv6") != 0 && strcmp(t, "FQDN") != 0) {
        apistatus_fields_add(f, APISTATUS_F_UNSUPPORTED, "addressType", at,
                             "supported values: \"FQDN\", \"IPv4\", \"IPv6\"");
        return;
    }
    int i = 0;
    const cJSON *ep;
    cJSON_ArrayForEach(ep, json_get(obj, "endpoints"))
    {
        const cJSON *addrs = json_get(ep, "addresses");
        char path[64];
        if (!cJSON_IsArray(addrs) || !addrs->child) {
            snprintf(path, sizeof path, "endpoints[%d].addresses", i);
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, path, NULL,
                                  "must contain at least 1 address");
        }
        int j = 0;
        const cJSON *a;
        cJSON_ArrayForEach(a, addrs)
        {
            snprintf(path, sizeof path, "endpoints[%d].addresses[%d]", i, j++);
            struct in_addr v4;
            if (strcmp(t, "IPv4") != 0)
                continue;
            if (!cJSON_IsString(a) || inet_pton(AF_INET, a->valuestring, &v4) != 1) {
                apistatus_fields_add(f, APISTATUS_F_INVALID, path, a, "must be a valid IP address");
                continue;
            }
            uint32_t h = ntohl(v4.s_addr);
            if (h == 0)
                apistatus_fields_add(f, APISTATUS_F_INVALID, path, a, "may not be unspecified (0.0.0.0)");
            else if ((h >> 24) == 127)
                apistatus_fields_add(f, APISTATUS_F_INVALID, path, a,
                                     "may not be in the loopback range (127.0.0.0/8, ::1/128)");
            else if ((h >> 16) == 0xa9fe)
                apistatus_fields_add(f, APISTATUS_F_INVALID, path, a,
                                     "may not be in the link-local range (169.254.0.0/16, "
                                     "fe80::/10)");
        }
        i++;
    }
}

void apirest__validate_builtin(const struct apires *res, const cJSON *obj, const cJSON *old,
                               const char *sub, struct apistatus_fields *f)
{
    if (res->crd || (sub && *sub))
        return;
    const char *k = res->kind;
    const cJSON *spec = json_get(obj, "spec");
    if (strcmp(k, "ConfigMap") == 0) {
        validate_config_keys(obj, "data", f);
        validate_config_keys(obj, "binaryData", f);
    } else if (strcmp(k, "Secret") == 0) {
        validate_config_keys(obj, "data", f);
    } else if (strcmp(k, "Pod") == 0) {
        validate_pod_spec(spec, "spec", false, f);
        if (old && cJSON_IsObject(spec) && pod_spec_changed(json_get(old, "spec"), spec))
            apistatus_fields_addv(
                f, APISTATUS_F_FORBIDDEN, "spec", NULL,
                "pod updates may not change fields other than `spec.containers[*].image`,"
                "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                "(allow it to be set to 1 if it was previously negative)");
    } else if (strcmp(k, "Job") == 0) {
        const cJSON *tmpl = json_get(spec, "template");
        if (!cJSON_IsObject(tmpl))
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, "spec.template", NULL, NULL);
        else
            validate_pod_spec(json_get(tmpl, "spec"), "spec.template.spec", true, f);
        /* kube-apiserver: with a podFailurePolicy only Failed is allowed */
        const cJSON *prp = json_get(spec, "podReplacementPolicy");
        if (cJSON_IsString(prp)) {
            if (json_get(spec, "podFailurePolicy")) {
                if (strcmp(prp->valuestring, "Failed") != 0)
                    apistatus_fields_add(f, APISTATUS_F_UNSUPPORTED, "spec.podReplacementPolicy",
                                         prp, "supported values: \"Failed\"");
            } else if (strcmp(prp->valuestring, "Failed") != 0 &&
                       strcmp(prp->valuestring, "TerminatingOrFailed") != 0) {
                apistatus_fields_add(f, APISTATUS_F_UNSUPPORTED, "spec.podReplacementPolicy", prp,
                                     "supported values: \"Failed\", \"TerminatingOrFailed\"");
            }
        }
        if (old) {
            const cJSON *os = json_get(old, "spec");
            static const char *immutable[] = {"selector", "completions", "completionMode",
                                              "podFailurePolicy"};
            for (size_t i = 0; i < 4; i++) {
                const cJSON *a = json_get(os, immutable[i]), *b = json_get(spec, immutable[i]);
                if ((a || b) && !(a && b && cJSON_Compare(a, b, 1))) {
                    char *p = xasprintf("spec.%s", immutable[i]);
                    apistatus_fields_add(f, APISTATUS_F_INVALID, p, b, "field is immutable");
                    free(p);
                }
            }
            const cJSON *ot = json_get(os, "template");
            if (tmpl && ot && !cJSON_Compare(ot, tmpl, 1) &&
                !cJSON_IsTrue(json_get(os, "suspend")))
                apistatus_fields_addv(f, APISTATUS_F_INVALID, "spec.template", NULL,
                                      "field is immutable");
        }
    } else if (strcmp(k, "EndpointSlice") == 0) {
        validate_endpoint_slice(obj, f);
    } else if (strcmp(k, "PersistentVolumeClaim") == 0) {
        const cJSON *am = json_get(spec, "accessModes");
        if (!cJSON_IsArray(am) || !am->child)
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, "spec.accessModes", NULL,
                                  "at least 1 access mode is required");
        if (!json_get(json_get(json_get(spec, "resources"), "requests"), "storage") && !old)
            apistatus_fields_addv(f, APISTATUS_F_REQUIRED, "spec.resources[storage]", NULL, NULL);
    }
}

/* ---- built-in defaulting ------------------------------------------------- */

/* SetDefaults_ObjectFieldSelector: fieldRef.apiVersion "v1" */
static void default_field_ref(cJSON *ref)
{
    if (cJSON_IsObject(ref) && !json_get(ref, "apiVersion"))
        cJSON_AddStringToObject(ref, "apiVersion", "v1");
}

static void default_downward_items(cJSON *src)
{
    cJSON *items = cJSON_GetObjectItemCaseSensitive(src, "items");
    for (cJSON *it = cJSON_IsArray(items) ? items->child : NULL; it; it = it->next)
        default_field_ref(cJSON_GetObjectItemCaseSensitive(it, "fieldRef"));
}

/* SetDefaults_Probe and SetDefaults_HTTPGetAction */
static void default_probe(cJSON *p)
{
    if (!cJSON_IsObject(p))
        return;
    static const char *const k[] = {"timeoutSeconds", "periodSeconds", "successThreshold",
                                    "failureThreshold"};
    static const int64_t v[] = {1, 10, 1, 3};
    for (size_t i = 0; i < 4; i++) {
        int64_t x = 0;
        const cJSON *c = json_get(p, k[i]);
        if (!c || (json_item_int64(c, &x) == 0 && x == 0)) {
            cJSON_DeleteItemFromObjectCaseSensitive(p, k[i]);
            json_add_int64(p, k[i], v[i]);
        }
    }
    cJSON *h = cJSON_GetObjectItemCaseSensitive(p, "httpGet");
    if (cJSON_IsObject(h)) {
        const char *path = apirest__jstr(h, "path"), *scheme = apirest__jstr(h, "scheme");
        if (!path || !*path)
            apirest__set_str(h, "path", "/");
        if (!scheme || !*scheme)
            apirest__set_str(h, "scheme", "HTTP");
    }
}

static void default_container(cJSON *c)
{
    if (!cJSON_IsObject(c))
        return;
    static const char *const probes[] = {"livenessProbe", "readinessProbe", "startupProbe"};
    for (size_t i = 0; i < 3; i++)
        default_probe(cJSON_GetObjectItemCaseSensitive(c, probes[i]));
    cJSON *env = cJSON_GetObjectItemCaseSensitive(c, "env");
    for (cJSON *v = cJSON_IsArray(env) ? env->child : NULL; v; v = v->next)
        default_field_ref(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(v, "valueFrom"),
                                             "fieldRef"));
    if (!json_get(c, "terminationMessagePath"))
        cJSON_AddStringToObject(c, "terminationMessagePath", "/dev/termination-log");
    if (!json_get(c, "terminationMessagePolicy"))
        cJSON_AddStringToObject(c, "terminationMessagePolicy", "File");
    if (!json_get(c, "imagePullPolicy")) {
        const char *img = apirest__jstr(c, "image");
        bool latest = img && (!strchr(img, ':') || strstr(img, ":latest"));
        cJSON_AddStringToObject(c, "imagePullPolicy", latest ? "Always" : "IfNotPresent");
    }
    if (!json_get(c, "resources"))
        cJSON_AddObjectToObject(c, "resources");
    cJSON *ports = cJSON_GetObjectItemCaseSensitive(c, "ports");
    for (cJSON *p = cJSON_IsArray(ports) ? ports->child : NULL; p; p = p->next)
        if (cJSON_IsObject(p) && !json_get(p, "protocol"))
            cJSON_AddStringToObject(p, "protocol", "TCP");
}

static void default_pod_spec(cJSON *spec)
{
    if (!cJSON_IsObject(spec))
        return;
    if (!json_get(spec, "restartPolicy"))
        cJSON_AddStringToObject(spec, "restartPolicy", "Always");
    if (!json_get(spec, "terminationGracePeriodSeconds"))
        json_add_int64(spec, "terminationGracePeriodSeconds", 30);
    if (!json_get(spec, "dnsPolicy"))
        cJSON_AddStringToObject(spec, "dnsPolicy", "ClusterFirst");
    if (!json_get(spec, "securityContext"))
        cJSON_AddObjectToObject(spec, "securityContext");
    if (!json_get(spec, "schedulerName"))
        cJSON_AddStringToObject(spec, "schedulerName", "default-scheduler");
    /* the v1 conversion mirrors serviceAccountName into the deprecated
     * serviceAccount (and takes the old field when only it is set) */
    const char *san = apirest__jstr(spec, "serviceAccountName");
    const char *sa = apirest__jstr(spec, "serviceAccount");
    if ((!san || !*san) && sa && *sa) {
        char *v = xstrdup(sa);
        apirest__set_str(spec, "serviceAccountName", v);
        free(v);
    } else if (san && *san) {
        char *v = xstrdup(san);
        apirest__set_str(spec, "serviceAccount", v);
        free(v);
    }
    const char *lists[] = {"containers", "initContainers"};
    for (size_t i = 0; i < 2; i++) {
        cJSON *cs = cJSON_GetObjectItemCaseSensitive(spec, lists[i]);
        for (cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next)
            default_container(c);
    }
    /* volume sources: defaultMode 0644 (420) for secret, configMap,
     * downwardAPI and projected; hostPath type "" */
    cJSON *vols = cJSON_GetObjectItemCaseSensitive(spec, "volumes");
    for (cJSON *v = cJSON_IsArray(vols) ? vols->child : NULL; v; v = v->next) {
        static const char *const moded[] = {"secret", "configMap", "downwardAPI", "projected"};
        for (size_t i = 0; i < 4; i++) {
            cJSON *src = cJSON_GetObjectItemCaseSensitive(v, moded[i]);
            if (cJSON_IsObject(src) && !json_get(src, "defaultMode"))
                json_add_int64(src, "defaultMode", 420);
        }
        default_downward_items(cJSON_GetObjectItemCaseSensitive(v, "downwardAPI"));
        cJSON *srcs = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(v, "projected"), "sources");
        for (cJSON *s = cJSON_IsArray(srcs) ? srcs->child : NULL; s; s = s->next)
            default_downward_items(cJSON_GetObjectItemCaseSensitive(s, "downwardAPI"));
        cJSON *hp = cJSON_GetObjectItemCaseSensitive(v, "hostPath");
        if (cJSON_IsObject(hp) && !json_get(hp, "type"))
            cJSON_AddStringToObject(hp, "type", "");
    }
}

/* requests default to limits, per resource (SetDefaults_Pod; not for
 * templates) */
static void default_requests_from_limits(cJSON *cs)
{
    for (cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next) {
        cJSON *res = cJSON_GetObjectItemCaseSensitive(c, "resources");
        const cJSON *lim = json_get(res, "limits");
        if (!cJSON_IsObject(lim) || !lim->child)
            continue;
        cJSON *req = cJSON_GetObjectItemCaseSensitive(res, "requests");
        if (!cJSON_IsObject(req)) {
            cJSON_DeleteItemFromObjectCaseSensitive(res, "requests");
            req = cJSON_AddObjectToObject(res, "requests");
        }
        for (const cJSON *l = lim->child; l; l = l->next)
            if (!cJSON_GetObjectItemCaseSensitive(req, l->string))
                cJSON_AddItemToObject(req, l->string, json_dup(l));
    }
}

/* Whether a toleration already tolerates the NoExecute taint key. */
static bool tolerates(const cJSON *tols, const char *key)
{
    for (const cJSON *t = cJSON_IsArray(tols) ? tols->child : NULL; t; t = t->next) {
        const char *k = apirest__jstr(t, "key"), *e = apirest__jstr(t, "effect");
        const char *op = apirest__jstr(t, "operator");
        bool key_ok = (k && strcmp(k, key) == 0) || ((!k || !*k) && op && strcmp(op, "Exists") == 0);
        if (key_ok && (!e || !*e || strcmp(e, "NoExecute") == 0))
            return true;
    }
    return false;
}

/* What kube-apiserver's defaulting and default admission plugins add to a
 * pod on create (pkg/apis/core/v1/defaults.go SetDefaults_Pod; the
 * ServiceAccount, Priority and DefaultTolerationSeconds plugins): requests
 * from limits, enableServiceLinks true, serviceAccountName "default" (and
 * the deprecated serviceAccount mirroring it), priority 0 with
 * preemptionPolicy PreemptLowerPriority (no PriorityClass named; tern-dev
 * has none), and tolerations of the not-ready and unreachable NoExecute
 * taints for 300 s. Not added: the kube-api-access-* projected volume (the
 * kubelet mounts the token itself; docs/tern-dev.md, "Differences from
 * kube-apiserver"). */
static void default_pod_admission(cJSON *spec)
{
    if (!cJSON_IsObject(spec))
        return;
    default_requests_from_limits(cJSON_GetObjectItemCaseSensitive(spec, "containers"));
    default_requests_from_limits(cJSON_GetObjectItemCaseSensitive(spec, "initContainers"));
    if (!json_get(spec, "enableServiceLinks"))
        cJSON_AddTrueToObject(spec, "enableServiceLinks");
    const char *sa = apirest__jstr(spec, "serviceAccountName");
    if (!sa || !*sa)
        sa = apirest__jstr(spec, "serviceAccount"); /* the deprecated field, as conversion */
    char *san = xstrdup(sa && *sa ? sa : "default");
    apirest__set_str(spec, "serviceAccountName", san);
    apirest__set_str(spec, "serviceAccount", san);
    free(san);
    const char *pc = apirest__jstr(spec, "priorityClassName");
    if (!pc || !*pc) {
        if (!json_get(spec, "priority"))
            json_add_int64(spec, "priority", 0);
        if (!json_get(spec, "preemptionPolicy"))
            cJSON_AddStringToObject(spec, "preemptionPolicy", "PreemptLowerPriority");
    }
    static const char *const taints[] = {"node.kubernetes.io/not-ready",
                                         "node.kubernetes.io/unreachable"};
    for (size_t i = 0; i < 2; i++) {
        cJSON *tols = cJSON_GetObjectItemCaseSensitive(spec, "tolerations");
        if (tolerates(tols, taints[i]))
            continue;
        if (!cJSON_IsArray(tols)) {
            cJSON_DeleteItemFromObjectCaseSensitive(spec, "tolerations");
            tols = cJSON_AddArrayToObject(spec, "tolerations");
        }
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "key", taints[i]);
        cJSON_AddStringToObject(t, "operator", "Exists");
        cJSON_AddStringToObject(t, "effect", "NoExecute");
        json_add_int64(t, "tolerationSeconds", 300);
        cJSON_AddItemToArray(tols, t);
    }
}

/* Built-in defaulting (a subset of pkg/apis/.../defaults.go) on create. */
void apirest__default_builtin(const struct apires *res, cJSON *obj, const char *uid)
{
    const char *k = res->kind;
    /* a template's "creationTimestamp": null (kubectl sends it) is not kept:
     * kube-apiserver omits a zero time there */
    cJSON *tmpl_md = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(obj, "spec"),
                                         "template"),
        "metadata");
    if (cJSON_IsNull(json_get(tmpl_md, "creationTimestamp")))
        cJSON_DeleteItemFromObjectCaseSensitive(tmpl_md, "creationTimestamp");
    if (strcmp(k, "Pod") == 0) {
        default_pod_spec(cJSON_GetObjectItemCaseSensitive(obj, "spec"));
        default_pod_admission(cJSON_GetObjectItemCaseSensitive(obj, "spec"));
    } else if (strcmp(k, "Secret") == 0) {
        if (!json_get(obj, "type"))
            cJSON_AddStringToObject(obj, "type", "Opaque");
    } else if (strcmp(k, "Namespace") == 0) {
        cJSON *spec = apirest__ensure_obj(obj, "spec");
        if (!json_get(spec, "finalizers")) {
            cJSON *f = cJSON_AddArrayToObject(spec, "finalizers");
            cJSON_AddItemToArray(f, cJSON_CreateString("kubernetes"));
        }
        cJSON *md = apirest__ensure_obj(obj, "metadata");
        cJSON *labels = apirest__ensure_obj(md, "labels");
        apirest__set_str(labels, "kubernetes.io/metadata.name", apirest__jstr(md, "name"));
    } else if (strcmp(k, "Job") == 0) {
        cJSON *spec = apirest__ensure_obj(obj, "spec");
        if (!json_get(spec, "parallelism"))
            json_add_int64(spec, "parallelism", 1);
        if (!json_get(spec, "completions") && !json_get(spec, "completionMode"))
            json_add_int64(spec, "completions", 1);
        if (!json_get(spec, "backoffLimit"))
            json_add_int64(spec, "backoffLimit", 6);
        if (!json_get(spec, "completionMode"))
            cJSON_AddStringToObject(spec, "completionMode", "NonIndexed");
        if (!json_get(spec, "suspend"))
            cJSON_AddFalseToObject(spec, "suspend");
        if (!json_get(spec, "podReplacementPolicy")) /* as kube-apiserver defaults it */
            cJSON_AddStringToObject(spec, "podReplacementPolicy",
                                    json_get(spec, "podFailurePolicy") ? "Failed"
                                                                       : "TerminatingOrFailed");
        if (!json_get(spec, "manualSelector"))
            cJSON_AddFalseToObject(spec, "manualSelector");
        if (!cJSON_IsTrue(json_get(spec, "manualSelector")) && uid) {
            const char *name = apirest__jstr(json_get(obj, "metadata"), "name");
            cJSON *sel = cJSON_CreateObject();
            cJSON *ml = cJSON_AddObjectToObject(sel, "matchLabels");
            cJSON_AddStringToObject(ml, "batch.kubernetes.io/controller-uid", uid);
            apirest__set_item(spec, "selector", sel);
            cJSON *tmd = apirest__ensure_obj(apirest__ensure_obj(spec, "template"), "metadata");
            cJSON *tl = apirest__ensure_obj(tmd, "labels");
            /* generateSelector: the labels the user set stay */
            const char *add[][2] = {{"job-name", name ? name : ""},
                                    {"batch.kubernetes.io/job-name", name ? name : ""},
                                    {"controller-uid", uid},
                                    {"batch.kubernetes.io/controller-uid", uid}};
            for (size_t i = 0; i < 4; i++)
                if (!json_get(tl, add[i][0]))
                    apirest__set_str(tl, add[i][0], add[i][1]);
        }
        /* SetDefaults_Job gives a job without labels its template's labels;
         * kube-apiserver runs the defaulters again when it decodes the
         * stored object, after the selector generation added its labels,
         * so a job created without labels has the template's, generated
         * ones included */
        cJSON *jmd = apirest__ensure_obj(obj, "metadata");
        const cJSON *jl = json_get(jmd, "labels");
        const cJSON *tl0 = json_get(json_get(json_get(spec, "template"), "metadata"), "labels");
        if (cJSON_IsObject(tl0) && tl0->child && (!cJSON_IsObject(jl) || !jl->child))
            apirest__set_item(jmd, "labels", json_dup(tl0));
        cJSON *tspec = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(spec, "template"), "spec");
        default_pod_spec(tspec);
    } else if (strcmp(k, "Deployment") == 0) {
        cJSON *spec = apirest__ensure_obj(obj, "spec");
        if (!json_get(spec, "replicas"))
            json_add_int64(spec, "replicas", 1);
        if (!json_get(spec, "revisionHistoryLimit"))
            json_add_int64(spec, "revisionHistoryLimit", 10);
        if (!json_get(spec, "progressDeadlineSeconds"))
            json_add_int64(spec, "progressDeadlineSeconds", 600);
        if (!json_get(spec, "strategy")) {
            cJSON *s = cJSON_AddObjectToObject(spec, "strategy");
            cJSON_AddStringToObject(s, "type", "RollingUpdate");
            cJSON *ru = cJSON_AddObjectToObject(s, "rollingUpdate");
            cJSON_AddStringToObject(ru, "maxUnavailable", "25%");
            cJSON_AddStringToObject(ru, "maxSurge", "25%");
        }
        default_pod_spec(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(spec, "template"), "spec"));
    } else if (strcmp(k, "Service") == 0) {
        cJSON *spec = apirest__ensure_obj(obj, "spec");
        if (!json_get(spec, "type"))
            cJSON_AddStringToObject(spec, "type", "ClusterIP");
        if (!json_get(spec, "sessionAffinity"))
            cJSON_AddStringToObject(spec, "sessionAffinity", "None");
        cJSON *ports = cJSON_GetObjectItemCaseSensitive(spec, "ports");
        for (cJSON *p = cJSON_IsArray(ports) ? ports->child : NULL; p; p = p->next) {
            if (!json_get(p, "protocol"))
                cJSON_AddStringToObject(p, "protocol", "TCP");
            if (!json_get(p, "targetPort") && json_get(p, "port"))
                cJSON_AddItemToObject(p, "targetPort", json_dup(json_get(p, "port")));
        }
    } else if (strcmp(k, "PersistentVolumeClaim") == 0) {
        cJSON *spec = apirest__ensure_obj(obj, "spec");
        if (!json_get(spec, "volumeMode"))
            cJSON_AddStringToObject(spec, "volumeMode", "Filesystem");
    }
}

/* Empty lists and maps that kube-apiserver's Go structs omit (omitempty):
 * in every object's metadata (labels, annotations, finalizers,
 * ownerReferences), and a NetworkPolicy's ingress and egress rules. */
void apirest__omit_empty(const struct apires *res, cJSON *obj)
{
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    static const char *const f[] = {"labels", "annotations", "finalizers", "ownerReferences"};
    for (size_t i = 0; i < 4; i++) {
        const cJSON *v = json_get(md, f[i]);
        if ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child)
            cJSON_DeleteItemFromObjectCaseSensitive(md, f[i]);
    }
    if (!res->crd && strcmp(res->kind, "NetworkPolicy") == 0) {
        cJSON *spec = cJSON_GetObjectItemCaseSensitive(obj, "spec");
        static const char *const r[] = {"ingress", "egress"};
        for (size_t i = 0; i < 2; i++) {
            const cJSON *v = json_get(spec, r[i]);
            if (cJSON_IsArray(v) && !v->child)
                cJSON_DeleteItemFromObjectCaseSensitive(spec, r[i]);
        }
    }
}

/* Secret stringData is merged into data (base64) on every write. */
void apirest__secret_string_data(const struct apires *res, cJSON *obj)
{
    if (res->crd || strcmp(res->kind, "Secret") != 0)
        return;
    cJSON *sd = cJSON_DetachItemFromObjectCaseSensitive(obj, "stringData");
    if (!cJSON_IsObject(sd)) {
        cJSON_Delete(sd);
        return;
    }
    cJSON *data = apirest__ensure_obj(obj, "data");
    for (cJSON *c = sd->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            continue;
        char *b = base64_encode(c->valuestring, strlen(c->valuestring));
        apirest__set_str(data, c->string, b);
        free(b);
    }
    cJSON_Delete(sd);
}

/* qos.GetPodQOS: BestEffort without any cpu/memory request or limit;
 * Guaranteed when every container has cpu and memory limits and requests
 * equal to them (requests default to limits before this); else Burstable.
 * Quantities are compared as written. */
static const char *pod_qos(const cJSON *spec)
{
    bool any = false, guaranteed = true;
    static const char *const lists[] = {"containers", "initContainers"};
    for (size_t l = 0; l < 2; l++) {
        const cJSON *cs = json_get(spec, lists[l]);
        for (const cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next) {
            const cJSON *req = json_get(json_get(c, "resources"), "requests");
            const cJSON *lim = json_get(json_get(c, "resources"), "limits");
            static const char *const rs[] = {"cpu", "memory"};
            for (size_t i = 0; i < 2; i++) {
                const cJSON *r = json_get(req, rs[i]), *m = json_get(lim, rs[i]);
                if (r || m)
                    any = true;
                if (!r || !m || !cJSON_Compare(r, m, 1))
                    guaranteed = false;
            }
        }
    }
    if (!any)
        return "BestEffort";
    return guaranteed ? "Guaranteed" : "Burstable";
}

/* Status set by the server on create (PrepareForCreate). */
void apirest__initial_status(const struct apires *res, cJSON *obj)
{
    if (res->crd) {
        if (res->has_status)
            cJSON_DeleteItemFromObjectCaseSensitive(obj, "status");
        return;
    }
    const char *k = res->kind;
    if (strcmp(k, "Pod") == 0) {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddStringToObject(st, "phase", "Pending");
        cJSON_AddStringToObject(st, "qosClass", pod_qos(json_get(obj, "spec")));
        apirest__set_item(obj, "status", st);
    } else if (strcmp(k, "Namespace") == 0) {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddStringToObject(st, "phase", "Active");
        apirest__set_item(obj, "status", st);
    } else if (strcmp(k, "Job") == 0 || strcmp(k, "Deployment") == 0 ||
               strcmp(k, "Service") == 0) {
        apirest__set_item(obj, "status", cJSON_CreateObject());
    } else if (strcmp(k, "PersistentVolumeClaim") == 0) {
        cJSON *st = cJSON_CreateObject();
        cJSON_AddStringToObject(st, "phase", "Pending");
        apirest__set_item(obj, "status", st);
    }
}
