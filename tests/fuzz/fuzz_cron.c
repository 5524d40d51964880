/* libFuzzer target: trigger/cron. Input: a schedule text. A schedule that
 * parses gives slots that strictly increase, in UTC and in Europe/Berlin
 * (DST both ways) when the zone is installed. */
#include "base/mem.h"
#include "trigger/cron.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 512)
        return 0;
    char *s = xstrndup((const char *)data, size);
    struct cron c;
    if (cron_parse(s, &c, NULL) == 0) {
        struct tzwin_zone z;
        if (tzwin_load(NULL, "Europe/Berlin", &z, NULL))
            tzwin_zone_utc(&z);
        int64_t t = 1774738800 - 86400; /* the day before a spring-forward */
        for (int i = 0; i < 8; i++) {
            int64_t u;
            if (cron_next(&c, &z, t, &u))
                break;
            if (u <= t)
                abort();
            t = u;
        }
        tzwin_zone_done(&z);
    }
    free(s);
    return 0;
}
