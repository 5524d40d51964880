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

static void default_container(cJSON *c)
{
    if (!cJSON_IsObject(c))
        return;
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
    const char *lists[] = {"containers", "initContainers"};
    for (size_t i = 0; i < 2; i++) {
        cJSON *cs = cJSON_GetObjectItemCaseSensitive(spec, lists[i]);
        for (cJSON *c = cJSON_IsArray(cs) ? cs->child : NULL; c; c = c->next)
            default_container(c);
    }
}

/* Built-in defaulting (a subset of pkg/apis/.../defaults.go) on create. */
void apirest__default_builtin(const struct apires *res, cJSON *obj, const char *uid)
{
    const char *k = res->kind;
    if (strcmp(k, "Pod") == 0) {
        default_pod_spec(cJSON_GetObjectItemCaseSensitive(obj, "spec"));
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
            apirest__set_str(tl, "batch.kubernetes.io/controller-uid", uid);
            apirest__set_str(tl, "batch.kubernetes.io/job-name", name ? name : "");
            apirest__set_str(tl, "controller-uid", uid);
            apirest__set_str(tl, "job-name", name ? name : "");
        }
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
        cJSON_AddStringToObject(st, "qosClass", "BestEffort");
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
