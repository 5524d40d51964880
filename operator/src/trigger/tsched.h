/* tsched.h - the schedule decision of an AgentTrigger (pure, CronJob's
 * semantics, the clock an input).
 *
 * From the trigger's last recorded slot (status.lastScheduleTime, else its
 * creation time) to now, only the latest slot is considered: after downtime
 * one session starts for the most recent missed slot, not one per slot
 * (missed_count says how many there were, up to TERN_CRON_MAX_MISSED). A
 * slot older than startingDeadlineSeconds is missed (recorded, no
 * session). With sessions of the schedule still active, Forbid skips the
 * slot without recording it, so it still starts late if they finish within
 * the deadline and before the next slot (as a CronJob's Job does); Replace
 * deletes them first; Allow runs alongside. Suspended: nothing starts;
 * after resuming, the deadline decides about the slots missed meanwhile.
 */
#ifndef TERN_TRIGGER_TSCHED_H
#define TERN_TRIGGER_TSCHED_H

#include "budget/tzwin.h"
#include "trigger/tspec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tsched_input {
    const struct tspec *t;
    const struct tzwin_zone *z;
    int64_t now;
    int64_t last_schedule; /* status.lastScheduleTime, 0 = none */
    int64_t last_skipped;  /* status.lastSkippedTime, 0 = none */
    int64_t created;       /* metadata.creationTimestamp */
    size_t nactive;        /* the schedule's sessions not Succeeded or Failed */
};

enum tsched_action {
    TSCHED_NONE = 0,
    TSCHED_CREATE,    /* start a session for slot (replace: delete the active first) */
    TSCHED_MISSED,    /* slot is past startingDeadlineSeconds */
    TSCHED_FORBIDDEN, /* slot waits for the active sessions (Forbid) */
};

struct tsched_output {
    enum tsched_action action;
    int64_t slot;
    bool replace;
    bool record_slot;     /* write slot to status.lastScheduleTime */
    bool new_skip;        /* FORBIDDEN for a slot not counted before */
    int missed_count;     /* slots in (last, now] */
    bool too_many_missed; /* missed_count reached TERN_CRON_MAX_MISSED */
    int64_t next;         /* the first slot after now, 0 = none */
};

void tsched_decide(const struct tsched_input *in, struct tsched_output *out);

/* "None", "Create", "Missed", "Forbidden". */
const char *tsched_action_name(enum tsched_action a);

#endif
