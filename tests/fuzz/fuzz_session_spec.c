/* libFuzzer target: AgentSession JSON -> session_spec_parse -> free. A spec
 * that parses must accept itself as an update and answer the policy helpers
 * without crashing. */
#include "json/json.h"
#include "spec/session_spec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *j = NULL;
    if (json_parse((const char *)data, size, &j, NULL) != 0)
        return 0;
    struct session_spec *s = NULL;
    struct tern_err e = {0};
    int r = session_spec_parse(j, &s, &e);
    if (r == 0) {
        if (session_spec_check_update(s, s, &e) != 0)
            abort();
        (void)session_spec_requires_approval(s, SESSION_TOOL_EXEC_COMMAND, "git push origin x");
        (void)session_spec_requires_approval(s, SESSION_TOOL_WRITE_FILE, "output/a/b");
        (void)session_spec_path_writable(s, "working/x/y.c");
        session_spec_free(s);
    } else if (r != TERN_EINVALID || s || !e.msg[0]) {
        abort(); /* every failure is a validation error with a message */
    }
    cJSON_Delete(j);
    return 0;
}
