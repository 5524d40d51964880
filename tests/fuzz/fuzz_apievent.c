/* libFuzzer target: the Event shape conversion over arbitrary JSON (stored
 * events and request bodies reach apievent as any JSON value). Nothing may
 * crash or leak, and once converted an object must round-trip exactly:
 * to_v1(to_core(v)) == v for v = to_v1(x), and the same from the core side. */
#include "apiserver/apievent.h"
#include "json/json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_round_trip(cJSON *x, int (*first)(cJSON *), int (*there)(cJSON *),
                             int (*back)(cJSON *))
{
    if (first(x) != 0)
        return;
    cJSON *y = cJSON_Duplicate(x, 1);
    if (there(y) != 0 || back(y) != 0)
        abort();
    /* compared as printed: cJSON_Compare fails on infinities (1e400) */
    char *px = json_print(x), *py = json_print(y);
    if (strcmp(px, py) != 0)
        abort();
    free(px);
    free(py);
    cJSON_Delete(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    cJSON *doc = NULL;
    if (json_parse((const char *)data, size, &doc, NULL))
        return 0;
    cJSON *a = cJSON_Duplicate(doc, 1);
    check_round_trip(a, apievent_to_v1, apievent_to_core, apievent_to_v1);
    cJSON_Delete(a);
    check_round_trip(doc, apievent_to_core, apievent_to_v1, apievent_to_core);
    cJSON_Delete(doc);
    return 0;
}
