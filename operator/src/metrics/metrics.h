/* metrics.h - a small thread-safe Prometheus metrics registry.
 *
 * Families are declared once (metrics_declare) with a type and help text;
 * series are addressed by a label string the caller builds with
 * metrics_labels ("phase=\"Running\"", or "" for none). metrics_render
 * produces the text exposition format (version 0.0.4), families in
 * declaration order. All functions may be called from any thread.
 * Using an undeclared family name is a programming error (abort).
 */
#ifndef TERN_METRICS_H
#define TERN_METRICS_H

#include <stddef.h>

enum metrics_type { METRICS_COUNTER, METRICS_GAUGE, METRICS_HISTOGRAM };

struct metrics;

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);

/* Declares a family. For histograms, buckets are the upper bounds (ascending,
 * n <= 16); NULL selects 5 ms .. 10 s. Returns 0, or -EEXIST. */
int metrics_declare(struct metrics *m, const char *name, enum metrics_type type, const char *help,
                    const double *buckets, size_t nbuckets);

void metrics_add(struct metrics *m, const char *name, const char *labels, double v);
void metrics_set(struct metrics *m, const char *name, const char *labels, double v);
void metrics_observe(struct metrics *m, const char *name, const char *labels, double v);
/* Sets every series of a gauge family to 0 (before re-counting a census). */
void metrics_zero(struct metrics *m, const char *name);

/* Formats k1="v1",k2="v2" from NULL-terminated key, value pairs, escaping
 * values; the result is owned by the caller. */
char *metrics_labels(const char *key, ...) __attribute__((sentinel));

/* The exposition text; owned by the caller. */
char *metrics_render(struct metrics *m);

#endif
