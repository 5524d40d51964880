/* libFuzzer target: tern-dev's request decoding. The first byte picks the
 * decoder, the rest is the input: URL path, label selector, field selector,
 * a JSON body applied as merge / JSON / strategic patch to a fixed object,
 * a body pruned, defaulted and validated against a structural schema, a
 * YAML body, a CRD body through CRD validation, a protobuf body. Nothing may crash or leak;
 * patch results must be JSON objects or errors. */
#include "apiserver/apicrd.h"
#include "apiserver/apipatch.h"
#include "apiserver/apiproto.h"
#include "apiserver/apirest.h"
#include "apiserver/apischema.h"
#include "apiserver/apiselector.h"
#include "base/mem.h"
#include "json/json.h"
#include "yaml/yamljson.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char doc_text[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"labels\":{\"a\":\"b\"},"
    "\"finalizers\":[\"x/y\"]},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\",\"env\":"
    "[{\"name\":\"A\",\"value\":\"1\"}],\"ports\":[{\"containerPort\":80}]}],\"volumes\":[]}}";

static const char schema_text[] =
    "{\"type\":\"object\",\"properties\":{\"spec\":{\"type\":\"object\",\"required\":[\"o\"],"
    "\"properties\":{\"o\":{\"type\":\"string\",\"pattern\":\"^[a-z]+(?:-[a-z0-9]+)*$\","
    "\"maxLength\":10},\"n\":{\"type\":\"integer\",\"minimum\":0,\"default\":3},\"l\":{\"type\":"
    "\"array\",\"x-kubernetes-list-type\":\"map\",\"x-kubernetes-list-map-keys\":[\"k\"],"
    "\"items\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\"}}}},\"q\":"
    "{\"x-kubernetes-int-or-string\":true},\"m\":{\"type\":\"object\",\"additionalProperties\":"
    "{\"type\":\"number\",\"enum\":[1,2.5]}},\"any\":{\"anyOf\":[{\"minimum\":1},{\"maxLength\":1}]}}},"
    "\"status\":{\"type\":\"object\",\"x-kubernetes-preserve-unknown-fields\":true}}}";

static cJSON *parse(const char *s, size_t n)
{
    cJSON *j = NULL;
    struct json_parse_opts o = {.dups = JSON_DUPS_LAST_WINS};
    if (json_parse_opts(s, n, &o, &j, NULL))
        return NULL;
    return j;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 20))
        return 0;
    unsigned mode = data[0] % 10;
    size_t n = size - 1;
    char *in = xmalloc(n + 1); /* NUL-terminated copy; may hold NULs */
    memcpy(in, data + 1, n);
    in[n] = 0;
    struct tern_err e = {0};
    switch (mode) {
    case 0: {
        struct apirest_path p;
        if (apirest_parse_path(in, &p) == 0)
            apirest_path_done(&p);
        break;
    }
    case 1:
    case 2: {
        struct apisel *s = NULL;
        int rc = mode == 1 ? apisel_parse_labels(in, &s, &e) : apisel_parse_fields(in, &s, &e);
        if (rc == 0) {
            cJSON *doc = parse(doc_text, strlen(doc_text));
            (void)apisel_match_labels(s, json_get(json_get(doc, "metadata"), "labels"));
            (void)apisel_match_fields(s, doc);
            cJSON_Delete(doc);
            apisel_free(s);
        }
        break;
    }
    case 3:
    case 4:
    case 5: {
        cJSON *p = parse(in, n);
        if (!p)
            break;
        cJSON *doc = parse(doc_text, strlen(doc_text));
        cJSON *r = NULL;
        if (mode == 3)
            r = apipatch_merge(doc, p);
        else if (mode == 4)
            (void)apipatch_json(doc, p, &r, &e);
        else
            (void)apipatch_strategic(doc, p, &r, &e);
        if (r) {
            char *s = json_print(r);
            free(s);
        }
        cJSON_Delete(r);
        cJSON_Delete(doc);
        cJSON_Delete(p);
        break;
    }
    case 6:
    case 7: {
        cJSON *o = NULL;
        if (mode == 6)
            o = parse(in, n);
        else if (yamljson_parse_one(in, n, NULL, &o, NULL))
            o = NULL;
        if (!o)
            break;
        cJSON *schema = parse(schema_text, strlen(schema_text));
        struct apischema_paths pruned = {0};
        struct apistatus_fields f = {0};
        apischema_prune(schema, o, &pruned);
        apischema_default(schema, o);
        apischema_validate(schema, o, &f);
        if (f.n) {
            cJSON *st = apistatus_invalid("g.io", "K", "n", &f);
            cJSON_Delete(st);
        }
        apistatus_fields_done(&f);
        apischema_paths_done(&pruned);
        cJSON_Delete(schema);
        cJSON_Delete(o);
        break;
    }
    case 9: {
        cJSON *o = NULL;
        if (apiproto_decode(in, n, &o, &e) == 0)
            cJSON_Delete(o);
        break;
    }
    case 8: {
        cJSON *o = parse(in, n);
        if (!o)
            break;
        struct apistatus_fields f = {0};
        if (cJSON_IsObject(o))
            apicrd_prepare(o, NULL, "2026-01-01T00:00:00Z", &f);
        apistatus_fields_done(&f);
        cJSON_Delete(o);
        break;
    }
    }
    free(in);
    return 0;
}
