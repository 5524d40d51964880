/* bench/devctl - figures for tern-dev's controllers beside many parked
 * sessions, over the in-memory store: N AgentSessions, each with the bound
 * workspace claim it owns (what a parked session holds), then the time of
 * the controllers' pass that binds one new claim and of the pass that gives
 * one new Job its pod, and how long a pass over an unchanged cache takes.
 * Prints figures; asserts nothing.
 *
 *   build/bench/devctl [N ...]     (default 0 2000 10000)
 */
#include "base/mem.h"
#include "base/num.h"
#include "devctl/devctl.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "devctl/objstore.h"
#include "json/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SESSIONS "tern.dev/v1alpha1/agentsessions"
#define IDLE_PASSES 20 /* passes after an unrelated change, averaged */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static cJSON *parse(const char *text)
{
    cJSON *o = NULL;
    if (json_parse(text, strlen(text), &o, NULL) != 0) {
        fprintf(stderr, "bench/devctl: cannot parse %s\n", text);
        exit(1);
    }
    return o;
}

/* A session and its claim, owned by it (exits on failure). */
static void add_session(struct objstore *s, const char *name, bool bound)
{
    char *text = xasprintf("{\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\","
                           "\"metadata\":{\"name\":\"%s\",\"finalizers\":[\"tern.dev/journal\"]},"
                           "\"spec\":{\"task\":\"parked\"},\"status\":{\"phase\":"
                           "\"WaitingForApproval\"}}",
                           name);
    cJSON *o = parse(text), *made = NULL;
    free(text);
    if (objstore_create(s, SESSIONS, "default", o, &made, NULL) != 0) {
        fprintf(stderr, "bench/devctl: cannot create session %s\n", name);
        exit(1);
    }
    cJSON_Delete(o);
    text = xasprintf(
        "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{\"name\":"
        "\"%s-workspace\",\"labels\":{\"tern.dev/session\":\"%s\"},\"ownerReferences\":[{"
        "\"apiVersion\":\"tern.dev/v1alpha1\",\"kind\":\"AgentSession\",\"name\":\"%s\","
        "\"uid\":\"%s\",\"controller\":true,\"blockOwnerDeletion\":true}]},\"spec\":{"
        "\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":\"1Gi\"}}}%s}",
        name, name, name, kobj_str(made, "metadata.uid"),
        bound ? ",\"status\":{\"phase\":\"Bound\"}" : "");
    cJSON_Delete(made);
    o = parse(text);
    free(text);
    if (objstore_create(s, "v1/persistentvolumeclaims", "default", o, NULL, NULL) != 0) {
        fprintf(stderr, "bench/devctl: cannot create the claim of %s\n", name);
        exit(1);
    }
    cJSON_Delete(o);
}

static const char *phase_of(struct objstore *s, const char *gvr, const char *name)
{
    static char out[64];
    cJSON *o = NULL;
    out[0] = 0;
    if (objstore_get(s, gvr, "default", name, &o, NULL) == 0 && kobj_str(o, "status.phase"))
        snprintf(out, sizeof out, "%s", kobj_str(o, "status.phase"));
    cJSON_Delete(o);
    return out;
}

static int count_pods(struct objstore *s)
{
    cJSON *l = NULL;
    objstore_list(s, "v1/pods", "default", &l, NULL);
    int n = cJSON_GetArraySize(kobj_at(l, "items"));
    cJSON_Delete(l);
    return n;
}

/* Passes until done() holds (at most 50); the time of each, in ms. */
static int passes_until(struct devctl *d, bool (*done)(struct objstore *), struct objstore *s,
                        double *total_ms, double *last_ms)
{
    int n = 0;
    *total_ms = 0;
    while (!done(s) && n < 50) {
        double t0 = now_ms();
        devctl_sync(d, (int64_t)time(NULL), NULL, NULL);
        *last_ms = now_ms() - t0;
        *total_ms += *last_ms;
        n++;
    }
    return n;
}

static bool claim_bound(struct objstore *s)
{
    return strcmp(phase_of(s, "v1/persistentvolumeclaims", "live-workspace"), "Bound") == 0;
}

static bool job_has_pod(struct objstore *s)
{
    return count_pods(s) > 0;
}

static void run(int64_t n)
{
    char dir[] = "/tmp/tern-bench-devctl-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    struct memstore *m = memstore_new(NULL, NULL);
    struct objstore s = memstore_objstore(m);
    char *vol = xasprintf("%s/volumes", dir);
    static const char *const extra[] = {SESSIONS "=AgentSession"};
    struct devctl_cfg dc = {.volume_dir = vol, .job = {0, 600}, .extra = extra, .nextra = 1};
    cJSON *ns = parse("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{"
                      "\"name\":\"default\"}}");
    objstore_create(&s, "v1/namespaces", "", ns, NULL, NULL);
    cJSON_Delete(ns);
    double t0 = now_ms();
    for (int64_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "parked-%05lld", (long long)i);
        add_session(&s, name, true);
    }
    double seeded = now_ms() - t0;
    struct devctl *d = devctl_new(&s, &dc);
    t0 = now_ms();
    devctl_sync(d, (int64_t)time(NULL), NULL, NULL);
    double first = now_ms() - t0;
    /* a pass over an unchanged cache is skipped for 10 s: force one by a
     * change nobody acts on */
    double idle = 0;
    for (int i = 0; i < IDLE_PASSES; i++) {
        char *text = xasprintf("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{"
                               "\"name\":\"noise-%d\"},\"data\":{\"a\":\"b\"}}",
                               i);
        cJSON *cm = parse(text);
        free(text);
        objstore_create(&s, "v1/configmaps", "default", cm, NULL, NULL);
        cJSON_Delete(cm);
        t0 = now_ms();
        devctl_sync(d, (int64_t)time(NULL), NULL, NULL);
        idle += now_ms() - t0;
    }
    idle /= IDLE_PASSES;

    add_session(&s, "live", false);
    double bind_total = 0, bind_last = 0;
    int bind_passes = passes_until(d, claim_bound, &s, &bind_total, &bind_last);

    cJSON *job = parse("{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":"
                       "\"live-turn-1\"},\"spec\":{\"backoffLimit\":3,\"template\":{\"spec\":{"
                       "\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"runner\","
                       "\"image\":\"tern\",\"command\":[\"true\"]}]}}}}");
    objstore_create(&s, "batch/v1/jobs", "default", job, NULL, NULL);
    cJSON_Delete(job);
    double job_total = 0, job_last = 0;
    int job_passes = passes_until(d, job_has_pod, &s, &job_total, &job_last);

    printf("N=%lld parked (session + bound claim; seeded in %.0f ms): first pass %.1f ms, "
           "a pass after an unrelated change %.2f ms (mean of %d)\n",
           (long long)n, seeded, first, idle, IDLE_PASSES);
    printf("  new claim bound: %.2f ms in %d pass(es); new Job's pod: %.2f ms in %d pass(es)%s\n",
           bind_total, bind_passes, job_total, job_passes,
           claim_bound(&s) && job_has_pod(&s) ? "" : " (NOT DONE within 50 passes)");
    devctl_free(d);
    memstore_free(m);
    fsutil_rmtree(dir, NULL);
    free(vol);
}

int main(int argc, char **argv)
{
    int64_t def[] = {0, 2000, 10000};
    if (argc < 2) {
        for (size_t i = 0; i < sizeof def / sizeof def[0]; i++)
            run(def[i]);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        int64_t n;
        if (num_parse_range(argv[i], 0, 100000, &n) != 0) {
            fprintf(stderr, "usage: %s [N 0..100000 ...]\n", argv[0]);
            return 2;
        }
        run(n);
    }
    return 0;
}
