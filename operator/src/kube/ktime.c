/* ktime.c - monotonic time helpers. See ktime.h. */
#include "ktime.h"

#include <errno.h>

long long ktime_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ktime_deadline(long long ms, struct timespec *ret)
{
    clock_gettime(CLOCK_MONOTONIC, ret);
    ret->tv_sec += (time_t)(ms / 1000);
    ret->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ret->tv_nsec >= 1000000000L) {
        ret->tv_sec++;
        ret->tv_nsec -= 1000000000L;
    }
}

void ktime_cond_init(pthread_cond_t *c)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

bool ktime_sleep_or_stop(pthread_mutex_t *mu, pthread_cond_t *cond, atomic_bool *stop, long long ms)
{
    struct timespec ts;
    ktime_deadline(ms, &ts);
    pthread_mutex_lock(mu);
    while (!atomic_load(stop))
        if (pthread_cond_timedwait(cond, mu, &ts) == ETIMEDOUT)
            break;
    bool s = atomic_load(stop);
    pthread_mutex_unlock(mu);
    return s;
}
