/* libFuzzer target: a model's arguments for an MCP tool checked against the
 * tool's inputSchema (mcpwire_check_args). Input: schema, a NUL, arguments.
 * Invariant (abort otherwise): accepted arguments come back as a compact
 * JSON object that is accepted again and prints the same. */
#include "mcp/mcpwire.h"

#include "base/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    char *buf = xmalloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    const char *schema = buf;
    size_t sl = strlen(schema);
    const char *args = sl < size ? buf + sl + 1 : "";
    char *canon = NULL;
    if (mcpwire_check_args(schema, args, &canon, NULL) == 0) {
        if (!canon || canon[0] != '{')
            abort();
        char *again = NULL;
        if (mcpwire_check_args(schema, canon, &again, NULL) != 0 || strcmp(again, canon) != 0)
            abort();
        free(again);
    }
    free(canon);
    free(buf);
    return 0;
}
