/* bench/apiserver - figures for tern-dev's API server (prints, asserts
 * nothing).
 *
 * Starts a throwaway etcd (tests/support/etcd_fixture) and, in process, the
 * watch hub, the REST layer and the HTTPS server exactly as tern-dev does,
 * then measures over HTTPS with libcurl clients:
 *   - creates per second (1 client, then 8 concurrent clients), up to 10,000
 *     ConfigMaps;
 *   - one list of all 10,000 objects, and the same list paged by 500;
 *   - watch latency (write sent -> event line received) with 1 and with 100
 *     concurrent watchers, p50/p99/max.
 * Usage: build/bench/apiserver [objects]   (default 10000)
 */
#include "../../tests/support/etcd_fixture.h"
#include "apiserver/apipki.h"
#include "apiserver/apirest.h"
#include "apiserver/apiserver.h"
#include "apiserver/apiwatch.h"
#include "base/mem.h"
#include "base/num.h"
#include "etcd/etcd.h"
#include "http/httpc.h"
#include "json/json.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char base_url[64];
static struct httpc_tls tls;
static char auth_header[128];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long do_req(struct httpc *c, const char *method, const char *path, const char *body,
                   const char *ctype)
{
    char *url = xasprintf("%s%s", base_url, path);
    char ct[128];
    snprintf(ct, sizeof(ct), "Content-Type: %s", ctype ? ctype : "application/json");
    const char *hdrs[] = {auth_header, ct, NULL};
    struct httpc_request rq = {.method = method, .url = url, .headers = hdrs, .body = body,
                               .body_len = body ? strlen(body) : 0, .timeout_ms = 60000,
                               .max_body = 256u << 20, .tls = &tls};
    struct httpc_response rs = {0};
    long st = httpc_do(c, &rq, &rs, NULL) == 0 ? rs.status : -1;
    httpc_response_done(&rs);
    free(url);
    return st;
}

struct creator {
    int from, to;
};

static void *create_range(void *arg)
{
    struct creator *cr = arg;
    struct httpc *c = httpc_new();
    for (int i = cr->from; i < cr->to; i++) {
        char body[256];
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm-%05d\","
                 "\"labels\":{\"bench\":\"yes\"}},\"data\":{\"i\":\"%d\"}}",
                 i, i);
        if (do_req(c, "POST", "/api/v1/namespaces/default/configmaps", body, NULL) != 201)
            fprintf(stderr, "create %d failed\n", i);
    }
    httpc_free(c);
    return NULL;
}

/* ---- watch latency ---- */

#define MAX_WRITES 200

static double sent_at[MAX_WRITES];

struct watcher {
    pthread_t t;
    atomic_bool cancel;
    atomic_int ready;
    double lat[MAX_WRITES];
    int n;
};

static int on_line(void *ctx, const char *line, size_t len)
{
    struct watcher *w = ctx;
    double t = now_s();
    cJSON *ev = NULL;
    if (json_parse(line, len, &ev, NULL))
        return 0;
    const cJSON *seq = json_get(json_get(json_get(ev, "object"), "data"), "seq");
    int64_t s;
    if (cJSON_IsString(seq) && num_parse_i64(seq->valuestring, &s) == 0 && s >= 0 &&
        s < MAX_WRITES && w->n < MAX_WRITES)
        w->lat[w->n++] = t - sent_at[s];
    cJSON_Delete(ev);
    return 0;
}

static char watch_rv[32];

static void *watch_main(void *arg)
{
    struct watcher *w = arg;
    struct httpc *c = httpc_new();
    char *url = xasprintf("%s/api/v1/namespaces/default/configmaps?watch=true&fieldSelector="
                          "metadata.name%%3Dhot&resourceVersion=%s",
                          base_url, watch_rv);
    const char *hdrs[] = {auth_header, NULL};
    struct httpc_request rq = {.url = url, .headers = hdrs, .tls = &tls, .on_line = on_line,
                               .ctx = w, .cancel = &w->cancel};
    struct httpc_response rs = {0};
    atomic_store(&w->ready, 1);
    httpc_do(c, &rq, &rs, NULL);
    httpc_response_done(&rs);
    free(url);
    httpc_free(c);
    return NULL;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void current_rv(struct httpc *c)
{
    char *url = xasprintf("%s/api/v1/namespaces/default/configmaps/hot", base_url);
    const char *hdrs[] = {auth_header, NULL};
    struct httpc_request rq = {.url = url, .headers = hdrs, .timeout_ms = 10000, .tls = &tls};
    struct httpc_response rs = {0};
    if (httpc_do(c, &rq, &rs, NULL) == 0) {
        cJSON *o = NULL;
        if (json_parse(rs.body.data, rs.body.len, &o, NULL) == 0) {
            const cJSON *rv = json_get(json_get(o, "metadata"), "resourceVersion");
            snprintf(watch_rv, sizeof(watch_rv), "%s", cJSON_IsString(rv) ? rv->valuestring : "0");
            cJSON_Delete(o);
        }
    }
    httpc_response_done(&rs);
    free(url);
}

static void watch_latency(int nwatchers, int writes)
{
    struct httpc *c = httpc_new();
    current_rv(c);
    struct watcher *ws = xcalloc((size_t)nwatchers, sizeof(*ws));
    for (int i = 0; i < nwatchers; i++) {
        atomic_init(&ws[i].cancel, false);
        pthread_create(&ws[i].t, NULL, watch_main, &ws[i]);
    }
    for (int i = 0; i < nwatchers; i++)
        while (!atomic_load(&ws[i].ready))
            usleep(1000);
    usleep(300 * 1000); /* let the streams open */
    for (int i = 0; i < writes; i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"data\":{\"seq\":\"%d\"}}", i);
        sent_at[i] = now_s();
        do_req(c, "PATCH", "/api/v1/namespaces/default/configmaps/hot", body,
               "application/merge-patch+json");
        usleep(5000);
    }
    usleep(500 * 1000);
    size_t total = 0;
    for (int i = 0; i < nwatchers; i++)
        total += (size_t)ws[i].n;
    double *all = xcalloc(total ? total : 1, sizeof(double));
    size_t k = 0;
    for (int i = 0; i < nwatchers; i++)
        atomic_store(&ws[i].cancel, true);
    for (int i = 0; i < nwatchers; i++) {
        pthread_join(ws[i].t, NULL);
        for (int j = 0; j < ws[i].n; j++)
            all[k++] = ws[i].lat[j];
    }
    qsort(all, k, sizeof(double), cmpd);
    if (k)
        printf("watch latency, %3d watcher(s): %zu/%d events delivered, p50 %.2f ms, p99 %.2f ms, "
               "max %.2f ms\n",
               nwatchers, k, nwatchers * writes, all[k / 2] * 1e3, all[k * 99 / 100] * 1e3,
               all[k - 1] * 1e3);
    free(all);
    free(ws);
    httpc_free(c);
}

int main(int argc, char **argv)
{
    int64_t nobj = 10000;
    if (argc > 1 && num_parse_range(argv[1], 100, 1000000, &nobj)) {
        fprintf(stderr, "usage: %s [objects]\n", argv[0]);
        return 2;
    }
    char tmpl[] = "/tmp/tern-bench-XXXXXX";
    char *dir = mkdtemp(tmpl);
    struct tern_err err = {0};
    struct etcd_fixture fx = {0};
    char *edir = xasprintf("%s/etcd", dir);
    const char *quota[] = {"--quota-backend-bytes=4294967296", NULL};
    struct etcd_fixture_opts fo = {.extra_args = quota};
    if (etcd_fixture_start(&fx, edir, &fo, &err)) {
        fprintf(stderr, "etcd: %s\n", err.msg);
        return 1;
    }
    const char *eps[] = {fx.url};
    struct etcd_config ec = {.endpoints = eps, .nendpoints = 1, .timeout_ms = 20000};
    struct etcd *etcd = NULL;
    struct apiwatch_hub *hub = NULL;
    struct apirest rest;
    struct apipki pki = {0};
    struct apiserver *srv = NULL;
    int64_t rev = 0;
    char *pdir = xasprintf("%s/pki", dir);
    mkdir(pdir, 0700);
    if (etcd_new(&ec, &etcd, &err) || etcd_revision(etcd, &rev, &err) ||
        apiwatch_hub_start(etcd, "/registry/", rev, 0, &hub, &err) ||
        apirest_init(&rest, etcd, hub, "127.0.0.1", &err) || apirest_bootstrap(&rest, &err) ||
        apipki_ensure(pdir, &pki, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    struct apiserver_config sc = {.rest = &rest, .cert_pem = pki.cert_pem, .key_pem = pki.key_pem,
                                  .token = pki.token};
    if (apiserver_start(&sc, &srv, &err)) {
        fprintf(stderr, "serve: %s\n", err.msg);
        return 1;
    }
    snprintf(base_url, sizeof(base_url), "https://127.0.0.1:%u", apiserver_port(srv));
    tls.ca_pem = pki.ca_pem;
    tls.ca_pem_len = strlen(pki.ca_pem);
    snprintf(auth_header, sizeof(auth_header), "Authorization: Bearer %s", pki.token);

    /* creates: one client, then eight */
    int one = (int)(nobj / 10);
    double t0 = now_s();
    struct creator c1 = {0, one};
    create_range(&c1);
    double t1 = now_s();
    printf("creates, 1 client:   %d in %.2f s = %.0f creates/s\n", one, t1 - t0, one / (t1 - t0));
    pthread_t th[8];
    struct creator cr[8];
    int rest_n = (int)nobj - one;
    for (int i = 0; i < 8; i++) {
        cr[i].from = one + rest_n * i / 8;
        cr[i].to = one + rest_n * (i + 1) / 8;
        pthread_create(&th[i], NULL, create_range, &cr[i]);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    double t2 = now_s();
    printf("creates, 8 clients:  %d in %.2f s = %.0f creates/s\n", rest_n, t2 - t1,
           rest_n / (t2 - t1));

    struct httpc *c = httpc_new();
    double t3 = now_s();
    long st = do_req(c, "GET", "/api/v1/namespaces/default/configmaps", NULL, NULL);
    double t4 = now_s();
    printf("list of %lld objects: %.1f ms (status %ld)\n", (long long)nobj, (t4 - t3) * 1e3, st);
    char *cont = NULL;
    int pages = 0;
    double t5 = now_s();
    for (;;) {
        char *path = xasprintf("/api/v1/namespaces/default/configmaps?limit=500%s%s",
                               cont ? "&continue=" : "", cont ? cont : "");
        char *url = xasprintf("%s%s", base_url, path);
        const char *hdrs[] = {auth_header, NULL};
        struct httpc_request rq = {.url = url, .headers = hdrs, .timeout_ms = 60000,
                                   .max_body = 64u << 20, .tls = &tls};
        struct httpc_response rs = {0};
        free(cont);
        cont = NULL;
        if (httpc_do(c, &rq, &rs, NULL) == 0 && rs.status == 200) {
            cJSON *l = NULL;
            if (json_parse(rs.body.data, rs.body.len, &l, NULL) == 0) {
                const cJSON *ct = json_get(json_get(l, "metadata"), "continue");
                if (cJSON_IsString(ct) && *ct->valuestring)
                    cont = xstrdup(ct->valuestring);
                cJSON_Delete(l);
            }
        }
        httpc_response_done(&rs);
        free(url);
        free(path);
        pages++;
        if (!cont)
            break;
    }
    double t6 = now_s();
    printf("list of %lld objects in pages of 500: %d pages, %.1f ms\n", (long long)nobj, pages,
           (t6 - t5) * 1e3);

    do_req(c, "POST", "/api/v1/namespaces/default/configmaps",
           "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"hot\"}}", NULL);
    httpc_free(c);
    watch_latency(1, 200);
    watch_latency(100, 50);

    apiserver_stop(srv);
    apirest_done(&rest);
    apiwatch_hub_stop(hub);
    etcd_free(etcd);
    etcd_fixture_stop(&fx);
    apipki_done(&pki);
    char *rm = xasprintf("rm -rf '%s'", dir);
    if (system(rm) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    free(rm);
    free(edir);
    free(pdir);
    return 0;
}
