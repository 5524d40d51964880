/* libFuzzer target: the strict JSON parser and printer round trip. */
#include "json/json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *j = NULL;
    struct json_parse_opts o = {.dups = (size & 1) ? JSON_DUPS_LAST_WINS : JSON_DUPS_REJECT};
    if (json_parse_opts((const char *)data, size, &o, &j, NULL) != 0)
        return 0;
    /* whatever parses must print and re-parse to the same text */
    char *s = json_print(j);
    cJSON *k = NULL;
    if (json_parse(s, strlen(s), &k, NULL) != 0)
        abort();
    char *t = json_print(k);
    if (strcmp(s, t) != 0)
        abort();
    free(t);
    free(s);
    cJSON_Delete(k);
    cJSON_Delete(j);
    return 0;
}
