/* bench/budget - what a team budget costs a model call, on one throwaway
 * etcd: the reserve and settle transactions (budget/bstore) one writer at a
 * time, then with 1, 4, 10 and 20 writers racing one budget's counters
 * (each a session reserving and settling in a loop): calls per second,
 * median and p99 latency of reserve + settle, and how many compare-and-swap
 * rounds lost to another writer. Also the pure window computation.
 * Prints figures only; asserts nothing. Usage: build/bench/budget [SECONDS]
 * (per writer count, default 3).
 */
#include "../../tests/support/etcd_fixture.h"
#include "base/mem.h"
#include "budget/bstore.h"
#include "etcd/etcd.h"
#include "json/json.h"

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct writer {
    const char *url;
    const struct bstore_budget *b;
    char uid[32];
    double until;
    double *lat;
    size_t n, cap;
    long refused;
};

static void *run(void *arg)
{
    struct writer *w = arg;
    const char *eps[] = {w->url};
    struct etcd_config ec = {.endpoints = eps, .nendpoints = 1};
    struct etcd *c = NULL;
    if (etcd_new(&ec, &c, NULL))
        return NULL;
    struct ledger_ref ref;
    snprintf(ref.name, sizeof ref.name, "%s", w->b->spec.name);
    snprintf(ref.window, sizeof ref.window, "%s", w->b->win.key);
    for (uint64_t id = 1; now_ms() < w->until; id++) {
        struct ledger_reservation r = {.id = id, .amount = {5000, 100}, .refs = &ref, .nrefs = 1};
        bool refused = false;
        double t0 = now_ms();
        if (bstore_reserve(c, "bench", w->uid, &r, w->b, &refused, NULL, NULL, NULL))
            break;
        if (refused) {
            w->refused++;
            continue;
        }
        struct ledger_amount used = {1200, 30};
        if (bstore_settle(c, "bench", w->uid, id, &used, NULL, NULL))
            break;
        if (w->n == w->cap) {
            w->cap = w->cap ? 2 * w->cap : 1024;
            w->lat = xreallocarray(w->lat, w->cap, sizeof *w->lat);
        }
        w->lat[w->n++] = now_ms() - t0;
    }
    etcd_free(c);
    return NULL;
}

static int rm_entry(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)st;
    (void)type;
    (void)f;
    return remove(p);
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 3;
    if (secs <= 0)
        secs = 3;
    char dir[] = "/tmp/tern-bench-budget-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    struct etcd_fixture f;
    struct tern_err err = {0};
    if (etcd_fixture_start(&f, dir, NULL, &err)) {
        fprintf(stderr, "etcd: %s\n", err.msg);
        return 1;
    }
    const char *eps[] = {f.url};
    struct etcd_config ec = {.endpoints = eps, .nendpoints = 1};
    struct etcd *c = NULL;
    etcd_new(&ec, &c, &err);
    /* a budget that never runs out in the run */
    const char *spec = "{\"metadata\":{\"namespace\":\"bench\",\"name\":\"team\"},\"spec\":"
                       "{\"limits\":{\"tokens\":1000000000000,\"costMicroUSD\":1000000000000}}}";
    cJSON *j = NULL;
    struct bspec bs;
    json_parse(spec, strlen(spec), &j, NULL);
    bspec_parse(j, &bs, NULL);
    bstore_put_mirror(c, &bs, NULL, &err);
    struct bstore_zones *z = bstore_zones_new();
    struct bstore_budget *b = NULL;
    size_t nb = 0;
    if (bstore_load(c, z, "bench", NULL, true, time(NULL), &b, &nb, &err) || nb != 1) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 1;
    }
    printf("reserve + settle of one model call against one budget (etcd %s, default fsync)\n",
           f.url);
    printf("%8s %10s %10s %10s %12s\n", "writers", "calls/s", "p50 ms", "p99 ms", "refused");
    static const int counts[] = {1, 4, 10, 20};
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
        int n = counts[k];
        struct writer *w = xcalloc((size_t)n, sizeof *w);
        pthread_t *th = xcalloc((size_t)n, sizeof *th);
        double t0 = now_ms(), until = t0 + secs * 1000;
        for (int i = 0; i < n; i++) {
            w[i] = (struct writer){.url = f.url, .b = &b[0], .until = until};
            snprintf(w[i].uid, sizeof w[i].uid, "w%d-%d", n, i);
            pthread_create(&th[i], NULL, run, &w[i]);
        }
        size_t total = 0;
        long refused = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
            total += w[i].n;
            refused += w[i].refused;
        }
        double dt = (now_ms() - t0) / 1000;
        double *all = xcalloc(total + 1, sizeof *all);
        size_t m = 0;
        for (int i = 0; i < n; i++) {
            memcpy(all + m, w[i].lat, w[i].n * sizeof *all);
            m += w[i].n;
            free(w[i].lat);
        }
        qsort(all, m, sizeof *all, cmp_d);
        printf("%8d %10.0f %10.2f %10.2f %12ld\n", n, (double)m / dt, m ? all[m / 2] : 0,
               m ? all[(size_t)(0.99 * (double)(m - 1))] : 0, refused);
        free(all);
        free(w);
        free(th);
    }
    /* the window computation (pure) */
    struct tzwin_zone zone;
    if (tzwin_load(NULL, "Europe/Berlin", &zone, NULL) == 0) {
        double t0 = now_ms();
        int64_t at = 1700000000;
        struct tzwin_window win;
        for (int i = 0; i < 200000; i++)
            tzwin_window(&zone, (enum tzwin_period)(i % 3), at + (int64_t)i * 7919, &win);
        printf("tzwin_window (Europe/Berlin): %.2f us per call\n", (now_ms() - t0) * 1000 / 200000);
        tzwin_zone_done(&zone);
    }
    bstore_budgets_free(b, nb);
    bstore_zones_free(z);
    bspec_done(&bs);
    cJSON_Delete(j);
    etcd_free(c);
    etcd_fixture_stop(&f);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
