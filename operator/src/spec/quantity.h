/* quantity.h - Kubernetes resource quantities ("500m", "1Gi", "2", "1e3").
 *
 * Grammar (k8s.io/apimachinery resource.Quantity):
 *   [+-] (digits [. digits*] | . digits) [suffix]
 *   suffix: Ki Mi Gi Ti Pi Ei | n u m k M G T P E | (e|E) [+-] digits
 * ("1E" is 10^18, "1E3" is 1000). The value is kept as milli-units rounded
 * up (as Kubernetes rounds CPU to 1m), exact where it fits int64: cpu "1" =
 * 1000, memory "1Gi" = 1073741824000. Pure; no allocation.
 */
#ifndef TERN_QUANTITY_H
#define TERN_QUANTITY_H

#include <stdbool.h>
#include <stdint.h>

#define QUANTITY_MAX_TEXT 64 /* longer inputs are rejected */

struct quantity {
    char text[QUANTITY_MAX_TEXT + 1]; /* the input, verbatim */
    int64_t milli;                    /* value * 1000, rounded towards +inf */
};

/* Parses s. Returns 0 and *ret; -EINVAL when s is not a quantity (or longer
 * than QUANTITY_MAX_TEXT); -ERANGE when value * 1000 does not fit int64. */
int quantity_parse(const char *s, struct quantity *ret);

/* The value rounded up to whole units (bytes for memory, cores for CPU). */
int64_t quantity_units(const struct quantity *q);

#endif
