/* jaccess.h - each session's access to its journal (docs/journal.md, "The
 * locked door").
 *
 * With the journal's etcd locked (client-certificate TLS and etcd auth), a
 * session's runner logs in as its own etcd user tern-s-<uid>, whose role
 * reaches /tern/v1/s/<uid>/ only. The operator gives each session:
 *   - that user and role (journal_access_grant, through the root client),
 *   - the Secret <s>-journal in the session's namespace (owned by the
 *     session, label tern.dev/role=journal) that the turn Jobs mount at
 *     CHILDREN_JOURNAL_DIR: ca.crt (the journal's CA), tls.crt and tls.key
 *     (the runner's client certificate: the door, shared by all runners, it
 *     names no user), username and password (the session's own).
 * The runner certificate is read from the operator's files whenever they
 * change, and a Secret holding an older one is patched, so a rotated
 * certificate reaches the next turn of every session. On deletion the user
 * and role go with the journal; while a session is parked it has neither
 * (jaccess_park).
 *
 * Thread-safe: reconcile workers call it concurrently.
 */
#ifndef TERN_JACCESS_H
#define TERN_JACCESS_H

#include "base/err.h"
#include "etcd/etcd.h"
#include "kube/kclient.h"
#include "spec/session_spec.h"

#include <cJSON.h>

struct jaccess_config {
    struct etcd *admin;          /* a client of the journal's root user (borrowed) */
    const char *ca_file;         /* the journal's CA bundle */
    const char *runner_cert_file;
    const char *runner_key_file;
};

struct jaccess;

/* Reads the files once to check them. Returns 0 and *ret, or TERN_EINVALID
 * naming the file. Free with jaccess_free (accepts NULL). */
int jaccess_new(const struct jaccess_config *cfg, struct jaccess **ret, struct tern_err *err);
void jaccess_free(struct jaccess *a);

/* The Secret <s>-journal as it should be (pure; owned by the caller). */
cJSON *jaccess_secret(const struct session_spec *s, const char *password, const char *ca,
                      const char *cert, const char *key);

/* Makes sure session s can reach its journal: given the Secret <s>-journal
 * as observed (NULL when absent), creates the user and the Secret, patches
 * a Secret whose certificate is outdated, and re-creates the user if etcd
 * lost it. The observed Secret may lack its data (the informer keeps none):
 * it is then read from the API, once per session and per change of the
 * runner material (a pass in between does nothing); one the API no longer
 * has (deleted while parked, the cache behind) counts as absent. Returns 0 or the first
 * failure (etcd or the API; TERN_ECONFLICT when the Secret exists but was
 * not observed yet: retry). */
int jaccess_ensure(struct jaccess *a, struct kclient *kc, const struct session_spec *s,
                   const cJSON *secret, struct tern_err *err);

/* A parked session (no turn Job, none about to start, no sandbox pod):
 * its user and role are removed (the shell then deletes the Secret, and
 * jaccess_ensure makes a new Secret and password, then the user, when a
 * turn needs it). etcd
 * rebuilds its permission cache over every user on each change of any
 * user or role, so users of parked sessions made every grant cost more as
 * sessions accumulated (quadratic: 10,000 parked sessions took most of an
 * hour to start); parked ones now hold none, and a leaked Secret of a
 * parked session opens nothing. Only users this process made or checked
 * are removed (a session parked under an earlier operator lost its user
 * then; after a restart nothing is asked of etcd for parked sessions), once
 * per uid until jaccess_ensure is called for it again. Returns 0 or etcd's
 * error. */
int jaccess_park(struct jaccess *a, const char *uid, struct tern_err *err);

/* Removes the session's user and role. Returns 0 or etcd's error. */
int jaccess_revoke(struct jaccess *a, const char *uid, struct tern_err *err);

#endif
