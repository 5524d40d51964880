/* probe.h - network probes of the local kubelet (I/O).
 *
 * Both connect from the host to ip:port with a deadline. Return 0 on
 * success, TERN_ETIMEOUT, -ECONNREFUSED (or another -errno), or TERN_EHTTP
 * for an HTTP status outside 200..399.
 */
#ifndef TERN_PROBE_H
#define TERN_PROBE_H

#include "base/err.h"

/* TCP connect succeeds. */
int probe_tcp(const char *ip, int port, int timeout_ms);
/* GET path answers 200..399 (only the status line is read). */
int probe_http(const char *ip, int port, const char *path, int timeout_ms);

#endif
