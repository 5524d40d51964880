/* libFuzzer target: watch streams. The input is split into lines as httpc
 * delivers them (a line may have been cut across chunks; httpc reassembles
 * it, so each complete line reaches the parser whole) and every line goes
 * through kclient_parse_event and the Status-to-error mapping. */
#include "json/json.h"
#include "kube/kclient.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        enum kwatch_type t;
        cJSON *obj = NULL;
        struct tern_err e = {0};
        if (kclient_parse_event(p, len, &t, &obj, &e) == 0) {
            if (!cJSON_IsObject(obj) || t < KWATCH_ADDED || t > KWATCH_ERROR)
                abort();
            if (t == KWATCH_ERROR) {
                char *s = json_print(obj);
                struct kclient_err ke;
                if (kclient_status_error(200, s, strlen(s), "watch", &ke) == 0)
                    abort();
                free(s);
            }
            cJSON_Delete(obj);
        } else if (obj) {
            abort();
        }
        p += len + (nl ? 1 : 0);
    }
    return 0;
}
