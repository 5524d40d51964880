/* tsched.c - the schedule decision. See tsched.h. */
#include "trigger/tsched.h"

#include "base/limits.h"

#include <string.h>

const char *tsched_action_name(enum tsched_action a)
{
    static const char *const n[] = {"None", "Create", "Missed", "Forbidden"};
    return (unsigned)a < 4 ? n[a] : "None";
}

void tsched_decide(const struct tsched_input *in, struct tsched_output *out)
{
    memset(out, 0, sizeof *out);
    const struct tspec *t = in->t;
    if (!t->schedule.set)
        return;
    int64_t next;
    if (cron_next(&t->schedule.cron, in->z, in->now, &next) == 0)
        out->next = next;
    if (t->suspend)
        return;
    int64_t since = in->last_schedule ? in->last_schedule : in->created;
    int64_t slot;
    int count;
    if (cron_last_in(&t->schedule.cron, in->z, since, in->now, TERN_CRON_MAX_MISSED, &slot,
                     &count))
        return;
    out->slot = slot;
    out->missed_count = count;
    out->too_many_missed = count >= TERN_CRON_MAX_MISSED;
    if (t->schedule.starting_deadline >= 0 && in->now - slot > t->schedule.starting_deadline) {
        out->action = TSCHED_MISSED;
        out->record_slot = true;
        return;
    }
    if (in->nactive && t->schedule.policy == TSPEC_FORBID) {
        out->action = TSCHED_FORBIDDEN;
        out->new_skip = slot != in->last_skipped;
        return;
    }
    out->action = TSCHED_CREATE;
    out->replace = in->nactive && t->schedule.policy == TSPEC_REPLACE;
    out->record_slot = true;
}
