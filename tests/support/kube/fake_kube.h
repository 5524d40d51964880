/* fake_kube.h - an in-process fake Kubernetes API server for tests.
 *
 * libmicrohttpd, thread per connection, plain HTTP on 127.0.0.1 (port 0 =
 * any free port; a restart reuses the port). State is kept across
 * fake_kube_stop/fake_kube_restart, as tern-dev keeps it in etcd. It serves
 * the generic object paths (/api/v1/..., /apis/G/V/..., namespaced or not)
 * for any resource: get, list (labelSelector k=v[,k=v], fieldSelector
 * metadata.name/namespace, limit/continue), watch (resourceVersion,
 * allowWatchBookmarks, timeoutSeconds; 410 ERROR event for a version older
 * than the compaction floor), create, update (resourceVersion required,
 * 409 Conflict on mismatch; the main path keeps status, /status changes only
 * status), patch (merge, apply with fieldManager, JSON patch add/replace/
 * remove/test; strategic -> 415), delete (preconditions, finalizers,
 * propagationPolicy recorded). Faults and auth are scriptable.
 *
 * Include the .c file into a test (the Makefile builds single-file tests).
 */
#ifndef TERN_FAKE_KUBE_H
#define TERN_FAKE_KUBE_H

#include <cJSON.h>
#include <stdbool.h>

struct fake_kube;

struct fake_kube *fake_kube_start(void);
/* Stops listening and ends every connection (watch streams are cut). */
void fake_kube_stop(struct fake_kube *fk);
/* Listens again on the same port with the same state. 0 or -1. */
int fake_kube_restart(struct fake_kube *fk);
void fake_kube_free(struct fake_kube *fk);
int fake_kube_port(struct fake_kube *fk);
/* "http://127.0.0.1:PORT" (owned by fk). */
const char *fake_kube_url(struct fake_kube *fk);

/* Requires "Authorization: Bearer <token>" (NULL: no auth). */
void fake_kube_require_token(struct fake_kube *fk, const char *token);
/* The next `times` requests whose method matches (NULL = any) and whose path
 * starts with prefix get status/body (body NULL = a Status for the code),
 * with Retry-After when retry_after >= 0. */
void fake_kube_inject(struct fake_kube *fk, const char *method, const char *prefix, int status,
                      const char *body, int retry_after, int times);
/* Watch lines are written in two pieces with a pause between them. */
void fake_kube_split_watch(struct fake_kube *fk, bool on);
/* Compaction: the version moves on by one and watches or continue tokens
 * from any older version get 410 Expired; open watches end cleanly (as at
 * their timeoutSeconds) and are resumed by clients from their old version. */
void fake_kube_compact(struct fake_kube *fk);
/* Open watches hold back events until fake_kube_compact/close_watches. */
void fake_kube_pause_watches(struct fake_kube *fk);
/* Closes open watch streams abruptly (connection reset mid-stream). */
void fake_kube_close_watches(struct fake_kube *fk);
/* Sends a BOOKMARK (current version) to every watch that asked for them. */
void fake_kube_bookmark(struct fake_kube *fk);

/* Server-side writes, as another client would make them (obj borrowed;
 * metadata.name required). coll is a collection path such as
 * "/apis/tern.dev/v1alpha1/namespaces/a/agentsessions". Returns the new
 * resourceVersion (>0) or -1. */
long long fake_kube_upsert(struct fake_kube *fk, const char *coll, const cJSON *obj);
long long fake_kube_remove(struct fake_kube *fk, const char *coll, const char *name);
/* A copy of the stored object at an object path, or NULL. */
cJSON *fake_kube_object(struct fake_kube *fk, const char *path);
long long fake_kube_rv(struct fake_kube *fk);

/* Requests received whose method matches (NULL = any) and whose path starts
 * with prefix; the query of the last one (owned by fk until the next
 * request) through last_query, its body through last_body. */
int fake_kube_count(struct fake_kube *fk, const char *method, const char *prefix);
char *fake_kube_last(struct fake_kube *fk, const char *method, const char *prefix,
                     char **ret_query, char **ret_ctype);
/* Open watch streams. */
int fake_kube_watchers(struct fake_kube *fk);

/* A TLS terminator in front of a plain server: accepts TLS on a free port
 * with cert/key (PEM files), requires a client certificate signed by
 * client_ca (PEM file) when it is non-NULL, and relays to backend_port. */
struct fake_tls;
struct fake_tls *fake_tls_start(int backend_port, const char *cert, const char *key,
                                const char *client_ca);
int fake_tls_port(struct fake_tls *t);
void fake_tls_free(struct fake_tls *t);

#endif
