/* libFuzzer target: trigger/tmap and the webhook filter over untrusted JSON.
 * Input: a template, a NUL, a JSON payload (a delivery's body). The
 * template is checked and rendered, its text also taken as a field path;
 * a render must fail exactly when the check fails or a field is missing,
 * not a string/number/bool, or the result is over the bound. */
#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"
#include "trigger/tmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    char *buf = xmalloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = '\0';
    const char *tmpl = buf;
    size_t tl = strlen(tmpl);
    const char *body = tl < size ? buf + tl + 1 : "";
    size_t bl = tl < size ? size - tl - 1 : 0;
    cJSON *payload = NULL;
    struct json_parse_opts po = {.max_bytes = TERN_WEBHOOK_MAX_BODY,
                                 .max_depth = TERN_TMAP_MAX_JSON_DEPTH};
    if (json_parse_opts(body, bl, &po, &payload, NULL))
        payload = NULL;
    struct tern_err e = {0};
    int checked = tmap_template_check(tmpl, &e);
    char *out = NULL;
    int r = tmap_render(tmpl, payload, 4096, "objective", &out, &e);
    if (checked && !r)
        abort(); /* a template that does not check never renders */
    if (!r && strlen(out) > 4096)
        abort();
    free(out);
    if (tmap_path_check(tmpl, NULL) == 0)
        (void)tmap_lookup(payload, tmpl);
    cJSON_Delete(payload);
    free(buf);
    return 0;
}
