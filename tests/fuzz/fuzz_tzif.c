/* libFuzzer target: a TZif file -> tzwin_zone_parse -> offsets and windows
 * at a spread of instants (windows contain their instant, keys are short);
 * the same bytes as a POSIX TZ string -> tzwin_rule_parse. */
#include "budget/tzwin.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tzwin_zone z;
    struct tern_err e = {0};
    if (tzwin_zone_parse(data, size, &z, &e) == 0) {
        static const int64_t at[] = {-2208988800LL, 0, 1700000000, 1711846800, 2147483647,
                                     4102444800LL, 7258118400LL};
        for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
            int32_t off = tzwin_offset(&z, at[i]);
            if (off < -93599 || off > 93599)
                abort();
            for (int p = TZWIN_HOUR; p <= TZWIN_MONTH; p++) {
                struct tzwin_window w;
                if (tzwin_window(&z, (enum tzwin_period)p, at[i], &w) == 0 &&
                    (w.start > at[i] || w.end <= at[i] || strlen(w.key) >= TZWIN_KEY_MAX))
                    abort();
            }
        }
        tzwin_zone_done(&z);
    } else if (!e.msg[0]) {
        abort(); /* every failure says why */
    }
    struct tzwin_rule r;
    if (tzwin_rule_parse((const char *)data, size, &r) == 0 &&
        (r.std_off < -93599 || r.std_off > 93599))
        abort();
    return 0;
}
