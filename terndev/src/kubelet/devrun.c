/* devrun.c - controller and kubelet threads. See devrun.h. */
#include "devrun.h"

#include "base/mem.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct devrun {
    struct objstore store;
    struct devctl *ctl;
    struct kubelet_cfg kcfg;
    int period_ms, grace_ms;
    volatile int stop_ctl, stop_kubelet;
    pthread_t ctl_thread, kubelet_thread;
    bool ctl_started, kubelet_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int kubelet_rc; /* 1 = starting */
    struct tern_err kerr;
};

static void *ctl_main(void *arg)
{
    struct devrun *r = arg;
    devctl_run(r->ctl, &r->stop_ctl, r->period_ms);
    return NULL;
}

static void *kubelet_main(void *arg)
{
    struct devrun *r = arg;
    struct kubelet *k = NULL;
    int rc = kubelet_new(&r->store, &r->kcfg, &k, &r->kerr);
    pthread_mutex_lock(&r->mu);
    r->kubelet_rc = rc;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (rc)
        return NULL;
    kubelet_run(k, &r->stop_kubelet, r->period_ms);
    kubelet_shutdown(k, r->grace_ms);
    kubelet_free(k);
    return NULL;
}

int devrun_start(const struct devrun_cfg *cfg, struct devrun **ret, struct tern_err *err)
{
    struct devrun *r = xcalloc(1, sizeof *r);
    r->store = cfg->store;
    r->kcfg = cfg->kubelet; /* strings are copied by kubelet_new on its thread */
    r->period_ms = cfg->period_ms > 0 ? cfg->period_ms : 1000;
    r->grace_ms = 30000;
    r->kubelet_rc = 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (!cfg->kubelet_only)
        r->ctl = devctl_new(&r->store, &cfg->ctl);
    if (pthread_create(&r->kubelet_thread, NULL, kubelet_main, r) != 0) {
        devrun_stop(r, 0);
        return err_set(err, -EAGAIN, "cannot start the kubelet thread");
    }
    r->kubelet_started = true;
    pthread_mutex_lock(&r->mu);
    while (r->kubelet_rc == 1)
        pthread_cond_wait(&r->cv, &r->mu);
    int rc = r->kubelet_rc;
    pthread_mutex_unlock(&r->mu);
    if (rc) {
        if (err)
            *err = r->kerr;
        devrun_stop(r, 0);
        return rc;
    }
    if (!r->ctl) {
        *ret = r;
        return 0;
    }
    if (pthread_create(&r->ctl_thread, NULL, ctl_main, r) != 0) {
        devrun_stop(r, 0);
        return err_set(err, -EAGAIN, "cannot start the controller thread");
    }
    r->ctl_started = true;
    *ret = r;
    return 0;
}

void devrun_stop(struct devrun *r, int grace_ms)
{
    if (!r)
        return;
    r->stop_ctl = 1;
    if (r->ctl_started)
        pthread_join(r->ctl_thread, NULL);
    r->grace_ms = grace_ms;
    r->stop_kubelet = 1;
    if (r->kubelet_started)
        pthread_join(r->kubelet_thread, NULL);
    devctl_free(r->ctl);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
