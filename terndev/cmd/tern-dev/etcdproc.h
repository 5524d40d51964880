/* etcdproc.h - the etcd child process of tern-dev.
 *
 * Starts /usr/bin/etcd (or $TERN_ETCD_BIN) on two free loopback ports with
 * its data in a given directory, its output in <data>.log, and the parent's
 * death signal set, and waits until it answers.
 */
#ifndef TERN_DEV_ETCDPROC_H
#define TERN_DEV_ETCDPROC_H

#include "base/err.h"

#include <sys/types.h>

struct etcdproc {
    pid_t pid; /* 0 when not running */
    char url[64];
};

/* Returns 0 once etcd serves, or -errno / TERN_ETIMEOUT with err set. */
int etcdproc_start(struct etcdproc *p, const char *data_dir, struct tern_err *err);
/* SIGTERM, up to 10 s, then SIGKILL; reaps. No-op when not running. */
void etcdproc_stop(struct etcdproc *p);

#endif
