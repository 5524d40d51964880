/* libFuzzer target: the model-response parser (chat_parse_response) and the
 * error-body parser. Whatever the bytes, parsing must not crash, leak or
 * trip a sanitizer, and the result must be internally consistent. */
#include "model/chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const KNOWN[] = {"exec_command", "read_file", "write_file", "list_files"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct chat_response r;
    if (chat_parse_response((const char *)data, size, KNOWN, 4, &r) != 0)
        return 0;
    size_t bad = 0;
    for (size_t i = 0; i < r.ncalls; i++) {
        if (!r.calls[i].id || !r.calls[i].name || !r.calls[i].arguments)
            abort();
        if ((r.calls[i].status != CHAT_CALL_OK) != (r.calls[i].problem != NULL))
            abort();
        bad += r.calls[i].status != CHAT_CALL_OK;
    }
    if (bad != r.nbad)
        abort();
    if ((r.kind == CHAT_RESP_MALFORMED) != (r.problem != NULL && r.kind != CHAT_RESP_EMPTY))
        abort();
    chat_response_done(&r);

    struct chat_api_error e;
    if (chat_parse_error((const char *)data, size, &e) == 0) {
        if (!e.message)
            abort();
        (void)chat_error_is_context_length(&e);
        chat_api_error_done(&e);
    }
    return 0;
}
