/* recorder.h - Kubernetes Events (events.k8s.io/v1) with series aggregation.
 *
 * recorder_event never blocks on the network: it copies the event into a
 * bounded queue (TERN_KUBE_MAX_EVENT_QUEUE; when full the event is dropped
 * and counted) that a recorder thread with its own kclient writes out.
 *
 * Repeats are aggregated as events.k8s.io intends: events with the same
 * regarding object, type, reason, action and note (after truncation to
 * TERN_KUBE_MAX_EVENT_NOTE bytes) within series_window_ms of the last one are
 * one Event object whose series.count and series.lastObservedTime grow. The
 * first occurrence is created at once; later ones are merged into a single
 * merge-patch at most every series_flush_ms per series (and at shutdown), so
 * a hot loop producing the same event costs one write per flush interval.
 * The series table is bounded (TERN_KUBE_MAX_EVENT_SERIES; the oldest series
 * are forgotten first).
 */
#ifndef TERN_RECORDER_H
#define TERN_RECORDER_H

#include "kube/kclient.h"
#include "kube/kubeconfig.h"

#include <cJSON.h>
#include <stdbool.h>

struct recorder;

struct recorder_opts {
    const char *controller;       /* reportingController, e.g. "tern.dev/operator" */
    const char *instance;         /* reportingInstance, e.g. the pod name */
    long series_flush_ms;         /* default 30000 */
    long series_window_ms;        /* default 360000 (6 min) */
    struct kclient_opts client;
};

/* The object an event is about (strings borrowed for the call). */
struct recorder_ref {
    const char *api_version;
    const char *kind;
    const char *namespace;        /* "" for cluster-scoped objects */
    const char *name;
    const char *uid;
};

struct recorder_stats {
    unsigned long created, patched, dropped, failed;
};

/* cfg borrowed; the thread starts at once. NULL if controller/instance are
 * missing. */
struct recorder *recorder_new(struct kubeconfig *cfg, const struct recorder_opts *opts);
/* Writes what is queued and pending, stops the thread, frees. Accepts NULL. */
void recorder_free(struct recorder *r);

/* Queues an event. type is "Normal" or "Warning"; reason and action are
 * CamelCase words (<= 128 bytes); note is printf-formatted and truncated to
 * TERN_KUBE_MAX_EVENT_NOTE bytes (on a UTF-8 boundary). Returns 0,
 * -EINVAL (bad arguments) or TERN_ETOOLARGE (queue full: dropped). */
int recorder_event(struct recorder *r, const struct recorder_ref *regarding, const char *type,
                   const char *reason, const char *action, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Fills ref from an object's apiVersion, kind and metadata (borrowed). */
void recorder_ref_of(const cJSON *obj, struct recorder_ref *ref);

/* Waits until everything queued so far has been written or has failed, and
 * flushes pending series counts. For tests and shutdown paths. */
void recorder_flush(struct recorder *r);
void recorder_get_stats(struct recorder *r, struct recorder_stats *ret);

/* Truncates s in place to at most max bytes without splitting a UTF-8
 * sequence; returns the new length. Pure. */
size_t recorder_truncate_utf8(char *s, size_t max);

#endif
