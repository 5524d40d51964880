/* conditions.h - metav1.Condition lists, as the operator writes them.
 *
 * A condition list is a cJSON array of objects {type, status, observedGeneration,
 * lastTransitionTime, reason, message} owned by the caller. conditions_set
 * keeps lastTransitionTime when the status did not change (so a reconcile
 * that changes nothing produces an identical list and no API write), and sets
 * it to `now` when the status changes or the condition is new.
 */
#ifndef TERN_CONDITIONS_H
#define TERN_CONDITIONS_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>

enum cond_status { COND_FALSE = 0, COND_TRUE, COND_UNKNOWN };

/* Sets (adds or updates) condition `type` in the array `list`. reason must
 * match metav1's pattern (CamelCase); message is truncated to 32 KiB.
 * now is an RFC 3339 timestamp ("2026-11-30T00:00:00Z"). */
void conditions_set(cJSON *list, const char *type, enum cond_status status, const char *reason,
                    const char *message, int64_t observed_generation, const char *now);

/* The condition object of `type`, or NULL (borrowed). */
const cJSON *conditions_find(const cJSON *list, const char *type);

/* True if condition `type` exists with status "True". */
bool conditions_is_true(const cJSON *list, const char *type);

/* True if reason matches ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$ (<= 1024). */
bool conditions_reason_valid(const char *reason);

/* Formats a time as RFC 3339 UTC with seconds ("...Z") into out[32]. */
const char *conditions_time(int64_t unix_seconds, char out[32]);

#endif
