/* testhook.c - named crash points of the runner. See testhook.h. */
#include "runner/testhook.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum testhook_action testhook_match(const char *spec, const char *point)
{
    size_t pl = strlen(point);
    for (const char *p = spec; p && *p;) {
        size_t n = strcspn(p, ",");
        if (n >= pl && strncmp(p, point, pl) == 0 && (n == pl || p[pl] == ':')) {
            const char *act = p + pl + (n > pl ? 1 : 0);
            size_t al = n > pl ? n - pl - 1 : 0;
            if (al == 0 || (al == 4 && strncmp(act, "kill", 4) == 0))
                return TESTHOOK_KILL;
            if (al == 4 && strncmp(act, "stop", 4) == 0)
                return TESTHOOK_STOP;
            return TESTHOOK_NONE;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return TESTHOOK_NONE;
}

bool testhook_armed(const char *point)
{
    return testhook_match(getenv("TERN_TEST_HOOK"), point) != TESTHOOK_NONE;
}

void testhook_at(const char *point)
{
    switch (testhook_match(getenv("TERN_TEST_HOOK"), point)) {
    case TESTHOOK_KILL: raise(SIGKILL); break;
    case TESTHOOK_STOP: raise(SIGSTOP); break;
    case TESTHOOK_NONE: break;
    }
}
