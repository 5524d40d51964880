/* workqueue.h - rate-limited work queue of string keys (client-go's model).
 *
 * Thread-safe. A key is in at most one of: the queue (waiting), processing
 * (handed out by workqueue_get, not yet workqueue_done), and may also be
 * dirty while processing: adding a key that is being processed marks it, and
 * workqueue_done puts it back in the queue, so a key never runs on two
 * workers at once and a change during processing is never lost. Adding a key
 * that is already waiting does nothing (de-duplication).
 *
 * workqueue_add_after delays an add (the earliest pending time wins);
 * workqueue_add_rate_limited delays by the larger of the key's exponential
 * backoff (base_delay * 2^failures, capped at max_delay) and the overall
 * token bucket (qps, burst); workqueue_forget resets the key's failures.
 * Delayed adds are kept by the queue itself: workqueue_get sleeps on a
 * condition variable until the next one is due (no timer thread, no polling).
 *
 * Shutdown: workqueue_shutdown makes adds no-ops, drops delayed adds and
 * wakes every waiter; workqueue_get keeps handing out keys already queued and
 * then returns -ECANCELED. workqueue_drain waits until no key is processing.
 */
#ifndef TERN_WORKQUEUE_H
#define TERN_WORKQUEUE_H

#include <stdbool.h>
#include <stddef.h>

struct workqueue;

struct workqueue_opts {
    long base_delay_ms;  /* default 5 */
    long max_delay_ms;   /* default 1000 s */
    double qps;          /* token bucket refill; default 10 */
    int burst;           /* bucket size; default 100 */
};

/* opts may be NULL. Free with workqueue_free after shutdown and drain. */
struct workqueue *workqueue_new(const struct workqueue_opts *opts);
void workqueue_free(struct workqueue *q);

/* Adds key (copied). Returns 0, -ECANCELED after shutdown, or TERN_ETOOLARGE
 * when TERN_KUBE_MAX_QUEUE_ITEMS distinct keys are already tracked. */
int workqueue_add(struct workqueue *q, const char *key);
int workqueue_add_after(struct workqueue *q, const char *key, long delay_ms);
/* Adds after the key's backoff and returns the delay used (ms) through
 * ret_delay_ms (may be NULL); counts one failure for key. */
int workqueue_add_rate_limited(struct workqueue *q, const char *key, long *ret_delay_ms);
/* Forgets key's failure count (call after a success). */
void workqueue_forget(struct workqueue *q, const char *key);
/* The key's failure count. */
int workqueue_requeues(struct workqueue *q, const char *key);

/* Blocks until a key is ready; returns 0 and *ret (owned by the caller; pass
 * it to workqueue_done), or -ECANCELED once shut down and empty. */
int workqueue_get(struct workqueue *q, char **ret);
/* Marks key done; re-queues it if it was added while processing. */
void workqueue_done(struct workqueue *q, const char *key);

/* Keys waiting now (not delayed, not processing). */
size_t workqueue_len(struct workqueue *q);
/* Copies of the first keys waiting, at most max, in the order workqueue_get
 * will hand them out (each newly allocated); returns how many. For reading
 * ahead: the keys stay queued. */
size_t workqueue_peek(struct workqueue *q, char **ret, size_t max);
void workqueue_shutdown(struct workqueue *q);
/* Waits until no key is processing (call after shutdown). */
void workqueue_drain(struct workqueue *q);
bool workqueue_shutting_down(struct workqueue *q);

#endif
