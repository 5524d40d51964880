/* apievent.h - the two shapes of a Kubernetes Event (core/v1 and
 * events.k8s.io/v1) converted into each other.
 *
 * kube-apiserver stores one kind of Event, in the core shape, and serves it
 * under both APIs (k8s.io/kubernetes pkg/apis/events/v1 conversion). The
 * conversion is a renaming of top-level fields:
 *
 *   events.k8s.io/v1           core/v1
 *   regarding                  involvedObject
 *   note                       message
 *   reportingController        reportingComponent
 *   deprecatedSource           source
 *   deprecatedFirstTimestamp   firstTimestamp
 *   deprecatedLastTimestamp    lastTimestamp
 *   deprecatedCount            count
 *   metadata, eventTime, series, reportingInstance, action, reason,
 *   related, type              (same names)
 *
 * apiVersion becomes the target's, kind "Event"; any other top-level field
 * (not part of the source shape) is dropped, as a typed conversion would.
 * Values are moved as they are (whatever their JSON type), so
 * to_v1(to_core(x)) == x for an object holding only v1 fields, and the
 * other way round. Pure: no I/O, no allocation beyond the renamed keys.
 */
#ifndef TERN_APIEVENT_H
#define TERN_APIEVENT_H

#include <cJSON.h>

/* Converts obj (a core/v1 Event as stored) in place to the events.k8s.io/v1
 * shape. An object whose apiVersion is already "events.k8s.io/v1" only
 * loses the fields outside that shape (so serving an object twice is
 * harmless). Returns 0, or -EINVAL if obj is not a JSON object (then it is
 * unchanged). */
int apievent_to_v1(cJSON *obj);

/* Converts obj (an events.k8s.io/v1 Event) in place to the core/v1 shape,
 * whatever its apiVersion says. Returns 0, or -EINVAL if obj is not a JSON
 * object (then it is unchanged). */
int apievent_to_core(cJSON *obj);

/* The fields kube-apiserver always serializes, added where absent: its Go
 * structs marshal a zero metav1.Time or MicroTime as null and a zero
 * struct as {} (omitempty omits neither). core (1: core/v1 shape, 0:
 * events.k8s.io/v1). For answers only; nothing stored changes. */
void apievent_fill_zero(cJSON *obj, int core);

/* The core field-selector label for an events.k8s.io/v1 one ("regarding.name"
 * -> "involvedObject.name", "reportingController" -> "reportingComponent",
 * "reason", "type", "metadata.name", "metadata.namespace" unchanged), or NULL
 * when the label is not selectable on events.k8s.io/v1 Events. Static
 * string. */
const char *apievent_field_to_core(const char *v1_field);

#endif
