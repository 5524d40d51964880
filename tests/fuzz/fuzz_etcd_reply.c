/* libFuzzer target: the etcd client's gateway reply decoders (range, put,
 * delete, txn, watch lines, error bodies). The first byte picks the kind. */
#include "etcd/etcd.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    enum etcd_reply_kind kind = (enum etcd_reply_kind)(data[0] % 6);
    etcd_check_reply(kind, (const char *)data + 1, size - 1, NULL);
    return 0;
}
