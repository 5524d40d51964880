/* libFuzzer target: json/jschema. Input: a schema, a NUL byte, an instance
 * (the model's answer). Whatever the schema checker accepts must validate
 * any answer that parses without crashing, with a bounded report. */
#include "base/limits.h"
#include "json/jschema.h"
#include "json/json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t sl = nul ? (size_t)(nul - data) : size;
    const char *inst = nul ? (const char *)nul + 1 : "";
    size_t il = nul ? size - sl - 1 : 0;
    cJSON *s = NULL, *i = NULL;
    if (json_parse((const char *)data, sl, &s, NULL) != 0)
        return 0;
    struct tern_err e = {0};
    if (jschema_check(s, &e) == 0 && jschema_parse_answer(inst, il, &i, &e) == 0) {
        struct jschema_report r = {0};
        if (jschema_validate(s, i, &r) != 0)
            abort();
        if ((r.nerrors == 0) != (r.text[0] == 0))
            abort();
        if (strlen(r.text) > (size_t)(TERN_JSCHEMA_MAX_ERRORS + 1) * (TERN_JSCHEMA_MAX_ERROR_LEN + 1))
            abort();
        jschema_report_done(&r);
    }
    cJSON_Delete(i);
    cJSON_Delete(s);
    return 0;
}
