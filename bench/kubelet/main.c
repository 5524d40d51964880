/* bench/kubelet - figures for the local kubelet and the Job controller over
 * the in-memory store: time from pod creation to Running and to Succeeded
 * for a trivial command, pods started per second with N at once, and a Job
 * from creation to Complete; as root, the same for pods whose NetworkPolicy
 * restricts egress (each in a network namespace of its own with its packet
 * filter). Prints figures; asserts nothing.
 *
 *   build/bench/kubelet [N]     (default 20)
 */
#include "base/mem.h"
#include "base/num.h"
#include "devctl/devctl.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "devctl/objstore.h"
#include "json/json.h"
#include "kubelet/kubelet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int count_phase(struct objstore *s, const char *phase)
{
    cJSON *l = NULL;
    objstore_list(s, "v1/pods", "default", &l, NULL);
    int n = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, kobj_at(l, "items"))
    {
        const char *ph = kobj_str(p, "status.phase");
        n += ph && strcmp(ph, phase) == 0;
    }
    cJSON_Delete(l);
    return n;
}

int main(int argc, char **argv)
{
    int64_t n = 20;
    if (argc > 1 && num_parse_range(argv[1], 1, 500, &n) != 0) {
        fprintf(stderr, "usage: %s [N 1..500]\n", argv[0]);
        return 2;
    }
    char dir[] = "/tmp/tern-bench-kubelet-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    struct memstore *m = memstore_new(NULL, NULL);
    struct objstore s = memstore_objstore(m);
    char *vol = xasprintf("%s/volumes", dir);
    struct devctl_cfg dc = {.volume_dir = vol, .job = {0, 600}};
    struct devctl *d = devctl_new(&s, &dc);
    struct kubelet_cfg kc = {.dir = dir, .restart_backoff_ms = 100};
    struct kubelet *k;
    struct tern_err err;
    if (kubelet_new(&s, &kc, &k, &err)) {
        fprintf(stderr, "kubelet: %s\n", err.msg);
        return 1;
    }
    devctl_sync(d, now_ms() / 1000, NULL, NULL);
    devctl_sync(d, now_ms() / 1000, NULL, NULL);

    /* one pod: create -> Running -> Succeeded */
    const char *one = "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"one\"},"
                      "\"spec\":{\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"c\","
                      "\"command\":[\"sh\",\"-c\",\"sleep 0.2\"]}]}}";
    cJSON *o;
    json_parse(one, strlen(one), &o, NULL);
    int64_t t0 = now_ms(), t_run = -1, t_done = -1;
    objstore_create(&s, "v1/pods", "default", o, NULL, NULL);
    cJSON_Delete(o);
    while (t_done < 0 && now_ms() - t0 < 20000) {
        kubelet_sync(k, now_ms(), NULL);
        if (t_run < 0 && (count_phase(&s, "Running") || count_phase(&s, "Succeeded")))
            t_run = now_ms() - t0;
        if (count_phase(&s, "Succeeded"))
            t_done = now_ms() - t0;
    }
    printf("one pod (sh -c 'sleep 0.2'): create->Running %lld ms, create->Succeeded %lld ms\n",
           (long long)t_run, (long long)t_done);
    objstore_remove(&s, "v1/pods", "default", "one", NULL, NULL, NULL);
    kubelet_sync(k, now_ms(), NULL);

    /* N pods at once */
    for (int64_t i = 0; i < n; i++) {
        char *p = xasprintf("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p%lld\"},"
                            "\"spec\":{\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"c\","
                            "\"command\":[\"true\"]}]}}",
                            (long long)i);
        json_parse(p, strlen(p), &o, NULL);
        objstore_create(&s, "v1/pods", "default", o, NULL, NULL);
        cJSON_Delete(o);
        free(p);
    }
    t0 = now_ms();
    int passes = 0;
    while (count_phase(&s, "Succeeded") < n && now_ms() - t0 < 120000) {
        kubelet_sync(k, now_ms(), NULL);
        passes++;
    }
    int64_t el = now_ms() - t0;
    printf("%lld pods ('true') at once: all Succeeded in %lld ms (%.1f pods/s, %d kubelet passes)\n",
           (long long)n, (long long)el, el ? 1000.0 * (double)n / (double)el : 0.0, passes);

    /* a Job: creation -> Complete through controller + kubelet */
    const char *job = "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"j\"},"
                      "\"spec\":{\"template\":{\"spec\":{\"restartPolicy\":\"Never\","
                      "\"containers\":[{\"name\":\"c\",\"command\":[\"true\"]}]}}}}";
    json_parse(job, strlen(job), &o, NULL);
    t0 = now_ms();
    objstore_create(&s, "batch/v1/jobs", "default", o, NULL, NULL);
    cJSON_Delete(o);
    bool complete = false;
    while (!complete && now_ms() - t0 < 20000) {
        devctl_sync(d, now_ms() / 1000, NULL, NULL);
        kubelet_sync(k, now_ms(), NULL);
        cJSON *j = NULL;
        objstore_get(&s, "batch/v1/jobs", "default", "j", &j, NULL);
        complete = kobj_cond_true(j, "Complete");
        cJSON_Delete(j);
    }
    printf("Job ('true'): create->Complete %lld ms\n", (long long)(now_ms() - t0));

    /* pods in network namespaces of their own (root only) */
    if (geteuid() == 0) {
        const char *np = "{\"apiVersion\":\"networking.k8s.io/v1\",\"kind\":\"NetworkPolicy\","
                         "\"metadata\":{\"name\":\"fence\"},\"spec\":{\"podSelector\":{"
                         "\"matchLabels\":{\"fenced\":\"yes\"}},\"policyTypes\":[\"Egress\"],"
                         "\"egress\":[{\"to\":[{\"ipBlock\":{\"cidr\":\"10.213.0.1/32\"}}],"
                         "\"ports\":[{\"port\":3128}]}]}}";
        json_parse(np, strlen(np), &o, NULL);
        objstore_create(&s, "networking.k8s.io/v1/networkpolicies", "default", o, NULL, NULL);
        cJSON_Delete(o);
        for (int64_t i = 0; i < n; i++) {
            char *p = xasprintf("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":"
                                "\"f%lld\",\"labels\":{\"fenced\":\"yes\"}},\"spec\":{"
                                "\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"c\","
                                "\"command\":[\"true\"]}]}}",
                                (long long)i);
            json_parse(p, strlen(p), &o, NULL);
            objstore_create(&s, "v1/pods", "default", o, NULL, NULL);
            cJSON_Delete(o);
            free(p);
        }
        t0 = now_ms();
        passes = 0;
        while (count_phase(&s, "Succeeded") < 2 * n && now_ms() - t0 < 120000) {
            kubelet_sync(k, now_ms(), NULL);
            passes++;
        }
        el = now_ms() - t0;
        printf("%lld pods ('true') with an egress NetworkPolicy (a network namespace and filter "
               "each): all Succeeded in %lld ms (%.1f pods/s, %d kubelet passes)\n",
               (long long)n, (long long)el, el ? 1000.0 * (double)n / (double)el : 0.0, passes);
    } else {
        printf("pods with an egress NetworkPolicy: skipped (needs root)\n");
    }
    kubelet_free(k);
    devctl_free(d);
    memstore_free(m);
    fsutil_rmtree(dir, NULL);
    free(vol);
    return 0;
}
