/* ktime.h - monotonic time and condition-variable deadlines for kube/.
 *
 * Every wait in kube/ is a pthread_cond_timedwait on a condition variable
 * that uses CLOCK_MONOTONIC (wall-clock steps never shorten or stretch a
 * lease, a backoff or a delayed add).
 */
#ifndef TERN_KTIME_H
#define TERN_KTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

/* Milliseconds of CLOCK_MONOTONIC. */
long long ktime_mono_ms(void);
/* *ret = now (CLOCK_MONOTONIC) + ms, for pthread_cond_timedwait. */
void ktime_deadline(long long ms, struct timespec *ret);
/* Waits on cond (under mu, which must not be held) for ms or until *stop is
 * raised (whoever raises it broadcasts cond under mu). Returns *stop. */
bool ktime_sleep_or_stop(pthread_mutex_t *mu, pthread_cond_t *cond, atomic_bool *stop, long long ms);
/* Initialises c to time its waits with CLOCK_MONOTONIC. */
void ktime_cond_init(pthread_cond_t *c);

#endif
