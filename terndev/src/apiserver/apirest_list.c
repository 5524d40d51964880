/* apirest_list.c - lists: label and field selectors, pagination (limit
 * and continue tokens), and GET of a collection as a list, a Table or
 * PartialObjectMetadata. See apirest_internal.h. */
#include "apirest_internal.h"

#include "apievent.h"
#include "apiselector.h"
#include "apistatus.h"
#include "apitable.h"
#include "base/base64.h"
#include "base/mem.h"
#include "base/num.h"
#include "json/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- selectors ----------------------------------------------------------- */

void apirest__selectors_done(struct selectors *sel)
{
    apisel_free(sel->labels);
    apisel_free(sel->fields);
}

cJSON *apirest__parse_selectors(struct rq *q, struct selectors *sel)
{
    struct tern_err e = {0};
    memset(sel, 0, sizeof(*sel));
    if (apisel_parse_labels(apirest__arg(q->req, "labelSelector"), &sel->labels, &e))
        return apistatus_bad_request(e.msg);
    if (apisel_parse_fields(apirest__arg(q->req, "fieldSelector"), &sel->fields, &e)) {
        apirest__selectors_done(sel);
        return apistatus_bad_request(e.msg);
    }
    for (size_t i = 0; i < sel->fields->n; i++) {
        const char *k = sel->fields->r[i].key;
        bool ok = strcmp(k, "metadata.name") == 0 || strcmp(k, "metadata.namespace") == 0;
        for (size_t j = 0; q->res->fields && q->res->fields[j]; j++)
            ok |= strcmp(k, q->res->fields[j]) == 0;
        if (!ok) {
            char *m = q->res->crd
                          ? xasprintf("\"%s\" is not a known field selector: only "
                                      "\"metadata.name\", \"metadata.namespace\"",
                                      k)
                          : xasprintf("field label not supported: %s", k);
            cJSON *st = apistatus_bad_request(m);
            free(m);
            apirest__selectors_done(sel);
            return st;
        }
        /* selectors match stored objects: events.k8s.io labels as core ones */
        const char *ck = q->res->core_event ? apievent_field_to_core(k) : NULL;
        if (ck && strcmp(ck, k) != 0) {
            free(sel->fields->r[i].key);
            sel->fields->r[i].key = xstrdup(ck);
        }
    }
    return NULL;
}

bool apirest__sel_match(const struct selectors *sel, const cJSON *obj)
{
    return apisel_match_labels(sel->labels, json_get(json_get(obj, "metadata"), "labels")) &&
           apisel_match_fields(sel->fields, obj);
}

/* ---- continue tokens ----------------------------------------------------- */

static char *continue_token(int64_t rev, const char *start_rel)
{
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "v", "meta.k8s.io/v1");
    json_add_int64(t, "rv", rev);
    cJSON_AddStringToObject(t, "start", start_rel);
    char *s = json_print(t);
    cJSON_Delete(t);
    char *b = base64_encode(s, strlen(s));
    free(s);
    /* URL-safe without padding, like the real tokens */
    for (char *p = b; *p; p++) {
        if (*p == '+')
            *p = '-';
        else if (*p == '/')
            *p = '_';
    }
    char *eq = strchr(b, '=');
    if (eq)
        *eq = 0;
    return b;
}

static int parse_continue(const char *tok, int64_t *ret_rev, char **ret_start)
{
    size_t n = strlen(tok);
    if (n == 0 || n > 4096)
        return -EINVAL;
    char *b = xmalloc(n + 4);
    memcpy(b, tok, n);
    for (size_t i = 0; i < n; i++) {
        if (b[i] == '-')
            b[i] = '+';
        else if (b[i] == '_')
            b[i] = '/';
    }
    while (n % 4)
        b[n++] = '=';
    b[n] = 0;
    unsigned char *raw = NULL;
    size_t rawlen = 0;
    int rc = base64_decode(b, n, &raw, &rawlen);
    free(b);
    if (rc)
        return -EINVAL;
    cJSON *t = NULL;
    rc = json_parse((const char *)raw, rawlen, &t, NULL);
    free(raw);
    if (rc)
        return -EINVAL;
    int64_t rev = 0;
    const char *start = apirest__jstr(t, "start");
    const cJSON *rv = json_get(t, "rv");
    if (!start || !rv || json_item_int64(rv, &rev) || rev <= 0 || strstr(start, "..")) {
        cJSON_Delete(t);
        return -EINVAL;
    }
    *ret_rev = rev;
    *ret_start = xstrdup(start);
    cJSON_Delete(t);
    return 0;
}

/* ---- list ---------------------------------------------------------------- */

/* Reads the matching objects (all, or one page). */
cJSON *apirest__do_list(struct rq *q, const struct selectors *sel, int64_t limit, const char *cont,
                        struct apistore_list *out, char **ret_cont)
{
    char *prefix = apires_key(q->res, q->ns, NULL);
    int64_t rev = 0;
    char *start = NULL;
    cJSON *st = NULL;
    *ret_cont = NULL;
    if (cont && *cont) {
        char *rel = NULL;
        if (parse_continue(cont, &rev, &rel)) {
            free(prefix);
            return apistatus_bad_request("continue key is not valid: illegal base64 data");
        }
        start = xasprintf("%s%s", prefix, rel);
        free(rel);
    }
    struct apistore_list acc = {0};
    for (;;) {
        struct apistore_list page = {0};
        int64_t want = limit > 0 ? limit - (int64_t)acc.n : 0;
        struct tern_err e = {0};
        int rc = apistore_list(&q->s->store, prefix, start, rev, want, &page, &e);
        if (rc) {
            st = apirest__status_from_store(rc, q->res, NULL, &e);
            break;
        }
        rev = page.revision;
        for (size_t i = 0; i < page.n; i++) {
            if (apirest__sel_match(sel, page.objs[i])) {
                acc.objs = xreallocarray(acc.objs, acc.n + 1, sizeof(cJSON *));
                acc.objs[acc.n++] = page.objs[i];
            } else {
                cJSON_Delete(page.objs[i]);
            }
            page.objs[i] = NULL;
        }
        free(start);
        start = page.next_key ? xstrdup(page.next_key) : NULL;
        apistore_list_done(&page);
        if (!start)
            break;
        if (limit > 0 && (int64_t)acc.n >= limit) {
            *ret_cont = continue_token(rev, start + strlen(prefix));
            break;
        }
    }
    acc.revision = rev;
    free(start);
    free(prefix);
    if (st) {
        apistore_list_done(&acc);
        return st;
    }
    *out = acc;
    return NULL;
}

void apirest__handle_list(struct rq *q)
{
    struct selectors sel;
    cJSON *st = apirest__parse_selectors(q, &sel);
    if (st) {
        apirest__respond_status(q->resp, st);
        return;
    }
    int64_t limit = 0;
    const char *ls = apirest__arg(q->req, "limit");
    if (ls && *ls && (num_parse_i64(ls, &limit) || limit < 0))
        limit = 0;
    struct apistore_list l = {0};
    char *cont = NULL;
    st = apirest__do_list(q, &sel, limit, apirest__arg(q->req, "continue"), &l, &cont);
    apirest__selectors_done(&sel);
    if (st) {
        apirest__respond_status(q->resp, st);
        return;
    }
    char rvb[21];
    num_fmt_i64(l.revision, rvb);
    for (size_t i = 0; i < l.n; i++)
        apirest__to_served_version(q->res, l.objs[i]);
    cJSON *out;
    if (q->want == WANT_TABLE) {
        out = apitable_build(q->res, l.objs, l.n, q->include, rvb, time(NULL));
        if (cont)
            cJSON_AddStringToObject(json_get(out, "metadata") ? cJSON_GetObjectItemCaseSensitive(out, "metadata") : out,
                                    "continue", cont);
    } else {
        out = cJSON_CreateObject();
        bool partial = q->want == WANT_PARTIAL;
        cJSON_AddStringToObject(out, "kind", partial ? "PartialObjectMetadataList" : q->res->list_kind);
        char *av = apires_api_version(q->res);
        cJSON_AddStringToObject(out, "apiVersion", partial ? "meta.k8s.io/v1" : av);
        free(av);
        cJSON *md = cJSON_AddObjectToObject(out, "metadata");
        /* kube-apiserver: a custom resource list (unstructured) always
         * has continue, "" on the last page; a typed list omits it then */
        if (cont || q->res->crd)
            cJSON_AddStringToObject(md, "continue", cont ? cont : "");
        cJSON_AddStringToObject(md, "resourceVersion", rvb);
        cJSON *items = cJSON_AddArrayToObject(out, "items");
        for (size_t i = 0; i < l.n; i++) {
            if (partial) {
                cJSON_AddItemToArray(items, apirest__partial_of(l.objs[i]));
            } else {
                apirest__list_item(q->res, l.objs[i]);
                cJSON_AddItemToArray(items, l.objs[i]);
                l.objs[i] = NULL;
            }
        }
    }
    free(cont);
    apistore_list_done(&l);
    apirest__respond_json(q->resp, 200, out);
}
