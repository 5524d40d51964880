/* libFuzzer target: YAML -> JSON. Whatever converts must print as JSON that
 * our strict JSON parser accepts and that prints back to the same text. Small
 * bounds keep each run fast while still exercising the limit paths. */
#include "json/json.h"
#include "yaml/yamljson.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct yamljson_opts o = {
        .max_nodes = 20000,
        .max_expanded_bytes = 1u << 20,
        .max_aliases = 200,
        .max_depth = (size & 1) ? 0 : 16,
    };
    cJSON *docs = NULL;
    if (yamljson_parse_stream((const char *)data, size, &o, &docs, NULL) != 0)
        return 0;
    char *s = json_print(docs);
    cJSON *k = NULL;
    struct tern_err e = {0};
    if (json_parse(s, strlen(s), &k, &e) != 0)
        abort();
    char *t = json_print(k);
    if (strcmp(s, t) != 0)
        abort();
    free(t);
    free(s);
    cJSON_Delete(k);
    cJSON_Delete(docs);
    /* the single-document entry point agrees on one-document streams */
    cJSON *one = NULL;
    if (yamljson_parse_one((const char *)data, size, &o, &one, NULL) == 0)
        cJSON_Delete(one);
    return 0;
}
