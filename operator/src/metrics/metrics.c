/* metrics.c - Prometheus metrics registry. See metrics.h. */
#include "metrics.h"

#include "base/buf.h"
#include "base/mem.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define METRICS_MAX_BUCKETS 16

struct series {
    char *labels;
    double value;                           /* counter/gauge; histogram sum */
    unsigned long long count;               /* histogram */
    unsigned long long bucket[METRICS_MAX_BUCKETS];
};

struct family {
    char *name, *help;
    enum metrics_type type;
    double bounds[METRICS_MAX_BUCKETS];
    size_t nbounds;
    struct series *series;
    size_t nseries;
};

struct metrics {
    pthread_mutex_t mu;
    struct family *fam;
    size_t nfam;
};

static const double default_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                         0.5,   1,    2.5,   5,    10};

struct metrics *metrics_new(void)
{
    struct metrics *m = xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nfam; i++) {
        struct family *f = &m->fam[i];
        for (size_t j = 0; j < f->nseries; j++)
            free(f->series[j].labels);
        free(f->series);
        free(f->name);
        free(f->help);
    }
    free(m->fam);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static struct family *find_family(struct metrics *m, const char *name)
{
    for (size_t i = 0; i < m->nfam; i++)
        if (strcmp(m->fam[i].name, name) == 0)
            return &m->fam[i];
    return NULL;
}

int metrics_declare(struct metrics *m, const char *name, enum metrics_type type, const char *help,
                    const double *buckets, size_t nbuckets)
{
    pthread_mutex_lock(&m->mu);
    int r = 0;
    if (find_family(m, name)) {
        r = -EEXIST;
        goto out;
    }
    m->fam = xreallocarray(m->fam, m->nfam + 1, sizeof *m->fam);
    struct family *f = &m->fam[m->nfam++];
    *f = (struct family){.name = xstrdup(name), .help = xstrdup(help), .type = type};
    if (type == METRICS_HISTOGRAM) {
        if (!buckets) {
            buckets = default_buckets;
            nbuckets = sizeof default_buckets / sizeof default_buckets[0];
        }
        if (nbuckets > METRICS_MAX_BUCKETS)
            nbuckets = METRICS_MAX_BUCKETS;
        memcpy(f->bounds, buckets, nbuckets * sizeof *buckets);
        f->nbounds = nbuckets;
    }
out:
    pthread_mutex_unlock(&m->mu);
    return r;
}

/* Called with the lock held. */
static struct series *get_series(struct metrics *m, const char *name, const char *labels)
{
    struct family *f = find_family(m, name);
    if (!f)
        abort(); /* undeclared metric: a programming error */
    for (size_t i = 0; i < f->nseries; i++)
        if (strcmp(f->series[i].labels, labels) == 0)
            return &f->series[i];
    f->series = xreallocarray(f->series, f->nseries + 1, sizeof *f->series);
    struct series *s = &f->series[f->nseries++];
    *s = (struct series){.labels = xstrdup(labels)};
    return s;
}

void metrics_add(struct metrics *m, const char *name, const char *labels, double v)
{
    pthread_mutex_lock(&m->mu);
    get_series(m, name, labels ? labels : "")->value += v;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set(struct metrics *m, const char *name, const char *labels, double v)
{
    pthread_mutex_lock(&m->mu);
    get_series(m, name, labels ? labels : "")->value = v;
    pthread_mutex_unlock(&m->mu);
}

void metrics_observe(struct metrics *m, const char *name, const char *labels, double v)
{
    pthread_mutex_lock(&m->mu);
    struct family *f = find_family(m, name);
    struct series *s = get_series(m, name, labels ? labels : "");
    s->value += v;
    s->count++;
    for (size_t i = 0; i < f->nbounds; i++)
        if (v <= f->bounds[i])
            s->bucket[i]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_zero(struct metrics *m, const char *name)
{
    pthread_mutex_lock(&m->mu);
    struct family *f = find_family(m, name);
    for (size_t i = 0; f && i < f->nseries; i++)
        f->series[i].value = 0;
    pthread_mutex_unlock(&m->mu);
}

char *metrics_labels(const char *key, ...)
{
    struct buf b;
    buf_init(&b, 64 * 1024);
    va_list ap;
    va_start(ap, key);
    for (const char *k = key; k; k = va_arg(ap, const char *)) {
        const char *v = va_arg(ap, const char *);
        if (b.len)
            buf_putc(&b, ',');
        buf_printf(&b, "%s=\"", k);
        for (const char *p = v ? v : ""; *p; p++) {
            if (*p == '\\' || *p == '"')
                buf_putc(&b, '\\');
            if (*p == '\n') {
                buf_puts(&b, "\\n");
                continue;
            }
            buf_putc(&b, *p);
        }
        buf_putc(&b, '"');
    }
    va_end(ap);
    return buf_steal(&b);
}

static void put_num(struct buf *b, double v)
{
    if (isinf(v))
        buf_puts(b, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        buf_printf(b, "%.0f", v);
    else
        buf_printf(b, "%.9g", v);
}

static void put_sample(struct buf *b, const char *name, const char *suffix, const char *labels,
                       const char *extra, double v)
{
    buf_printf(b, "%s%s", name, suffix);
    if (*labels || extra) {
        buf_putc(b, '{');
        buf_puts(b, labels);
        if (extra)
            buf_printf(b, "%s%s", *labels ? "," : "", extra);
        buf_putc(b, '}');
    }
    buf_putc(b, ' ');
    put_num(b, v);
    buf_putc(b, '\n');
}

char *metrics_render(struct metrics *m)
{
    static const char *const type_names[] = {"counter", "gauge", "histogram"};
    struct buf b;
    buf_init(&b, 64u << 20);
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->nfam; i++) {
        const struct family *f = &m->fam[i];
        buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name,
                   type_names[f->type]);
        for (size_t j = 0; j < f->nseries; j++) {
            const struct series *s = &f->series[j];
            if (f->type != METRICS_HISTOGRAM) {
                put_sample(&b, f->name, "", s->labels, NULL, s->value);
                continue;
            }
            char le[64];
            for (size_t k = 0; k < f->nbounds; k++) {
                struct buf lb;
                buf_init(&lb, sizeof le);
                buf_puts(&lb, "le=\"");
                put_num(&lb, f->bounds[k]);
                buf_putc(&lb, '"');
                put_sample(&b, f->name, "_bucket", s->labels, buf_str(&lb), (double)s->bucket[k]);
                buf_done(&lb);
            }
            put_sample(&b, f->name, "_bucket", s->labels, "le=\"+Inf\"", (double)s->count);
            put_sample(&b, f->name, "_sum", s->labels, NULL, s->value);
            put_sample(&b, f->name, "_count", s->labels, NULL, (double)s->count);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return buf_steal(&b);
}
