/* apitable.h - server-side tables (meta.k8s.io/v1 Table) for kubectl get.
 *
 * Columns: for custom resources the CRD's additionalPrinterColumns (after
 * a leading Name column; a CRD without columns gets Age), evaluated with a
 * JSONPath subset (.a.b, [n], [*], [?(@.k=="v")], ['key']); for built-ins the
 * columns of kube-apiserver's printers (pods READY/STATUS/RESTARTS, jobs
 * STATUS/COMPLETIONS/DURATION, ...). Dates are printed as ages ("5m3s").
 */
#ifndef TERN_APITABLE_H
#define TERN_APITABLE_H

#include "apires.h"

#include <cJSON.h>
#include <time.h>

enum apitable_include { APITABLE_NONE, APITABLE_METADATA, APITABLE_OBJECT };

/* A Table of the objects (borrowed, may be empty); now is the current time;
 * list_rv (may be NULL) becomes metadata.resourceVersion. Caller owns it. */
cJSON *apitable_build(const struct apires *res, cJSON *const *objs, size_t n,
                      enum apitable_include inc, const char *list_rv, time_t now);

/* Evaluates a JSONPath of the subset on obj: the first result, or NULL. */
const cJSON *apitable_jsonpath(const cJSON *obj, const char *path);

/* "5m3s"-style age as kubectl prints it (duration.HumanDuration). */
void apitable_human_duration(long seconds, char *out, size_t n);
/* Parses an RFC 3339 time; returns 0 and *ret or -EINVAL. */
int apitable_parse_time(const char *s, time_t *ret);
/* Formats t as RFC 3339 UTC ("2006-01-02T15:04:05Z") into out (>= 21). */
void apitable_format_time(time_t t, char *out, size_t n);

#endif
