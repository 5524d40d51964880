/* kube_test.h - helpers shared by the kube/ tests (included after
 * fake_kube.c, which provides now_ms()). */
#ifndef TERN_KUBE_TEST_H
#define TERN_KUBE_TEST_H

#include "harness.h"

#include "base/mem.h"
#include "kube/kubeconfig.h"

#include <stdlib.h>
#include <time.h>

/* Polls cond every 5 ms until true, failing the test after ms. */
#define WAIT_FOR(cond, ms)                                                                         \
    do {                                                                                           \
        long long wf_end_ = now_ms() + (ms);                                                       \
        while (!(cond)) {                                                                          \
            if (now_ms() > wf_end_)                                                                \
                th_fail(__FILE__, __LINE__, "timed out waiting for %s", #cond);                    \
            struct timespec wf_ts_ = {0, 5000000};                                                 \
            nanosleep(&wf_ts_, NULL);                                                              \
        }                                                                                          \
    } while (0)

/* A config for server with the given user object (JSON; NULL = no auth),
 * namespace team-a. */
static inline struct kubeconfig *kt_config(const char *server, const char *user_json)
{
    char *doc = xasprintf(
        "{\"current-context\":\"t\",\"contexts\":[{\"name\":\"t\",\"context\":{\"cluster\":\"c\","
        "\"user\":\"u\",\"namespace\":\"team-a\"}}],\"clusters\":[{\"name\":\"c\",\"cluster\":"
        "{\"server\":\"%s\"}}],\"users\":[{\"name\":\"u\",\"user\":%s}]}",
        server, user_json ? user_json : "{}");
    struct kubeconfig *c = NULL;
    struct tern_err e = {0};
    if (kubeconfig_parse(doc, strlen(doc), NULL, th_tmpdir(), &c, &e))
        th_fail(__FILE__, __LINE__, "kubeconfig: %s", e.msg);
    free(doc);
    return c;
}

#endif
