/* libFuzzer target: tern-sandboxd's exec request body parser. Whatever it
 * accepts must satisfy the bounds and invariants the runner relies on. */
#include "sandbox/sbapi.h"
#include "sandbox/wspath.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbapi_exec ex;
    struct tern_err err = {0};
    if (sbapi_parse_exec((const char *)data, size, 1000, &ex, &err) != 0)
        return 0;
    if (!ex.argv || !ex.argv[0] || !ex.argv[0][0])
        abort();
    size_t n = 0;
    while (ex.argv[n])
        n++;
    if (n > TERN_SANDBOX_MAX_ARGV + 2)
        abort();
    if (ex.timeout_ms < 1 || ex.timeout_ms > TERN_SANDBOX_MAX_TIMEOUT_MS)
        abort();
    if (ex.stdin_len > TERN_SANDBOX_MAX_STDIN)
        abort();
    char norm[WSPATH_BUF];
    if (ex.cwd[0] == '/' || wspath_normalize(ex.cwd, norm) != 0 || strcmp(norm, ex.cwd) != 0)
        abort();
    for (size_t i = 0; ex.env && ex.env[i]; i++)
        if (!strchr(ex.env[i], '=') || ex.env[i][0] == '=')
            abort();
    struct buf canon;
    buf_init(&canon, 2 * TERN_SANDBOX_MAX_EXEC_BODY + 4096);
    if (sbapi_exec_canonical(&ex, &canon) != 0) /* the documented bound must hold */
        abort();
    buf_done(&canon);
    sbapi_exec_done(&ex);
    return 0;
}
