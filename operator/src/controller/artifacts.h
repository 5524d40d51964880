/* artifacts.h - the artifact store's shell (docs/operator.md, "Artifacts"):
 * copies the files under output/ from a session's sandboxd into a ConfigMap
 * (controller/artstore.h), then records the set in the journal
 * (artifacts_persisted); and deletes retained sets past their expiry.
 *
 * Exactly once: the ConfigMap's name is deterministic (session, turn,
 * request), so a retry after a crash between the write and the record
 * finds it: the same content is success, other content (the set was never
 * recorded) is replaced; the journal append carries the idempotency key
 * artifacts/t<turn>[/<request hash>].
 *
 * The library does not log: Events go through the recorder, errors are
 * returned with context.
 */
#ifndef TERN_ARTIFACTS_H
#define TERN_ARTIFACTS_H

#include "base/err.h"
#include "controller/reconcile.h"
#include "journal/journal.h"
#include "kube/kclient.h"
#include "kube/recorder.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

struct artifacts_config {
    size_t max_file;  /* 0 = TERN_ARTIFACTS_MAX_FILE */
    size_t max_total; /* 0 = TERN_ARTIFACTS_MAX_TOTAL */
    /* test hook: exit the process (SIGKILL) right after the store write,
     * before the journal record (tests/integration/test_artifacts.py) */
    bool kill_after_store;
};

/* Performs a RA_PERSIST_ARTIFACTS action for session (the cached object)
 * through kc and the session's journal j. attempts is how many tries of
 * this set failed before; when this one fails too and attempts + 1 reaches
 * TERN_ARTIFACTS_MAX_ATTEMPTS, the failure itself is recorded (the set with
 * "error" and every file not stored) so the session goes on. Returns 0
 * (recorded), or the error of this try (*ret_recorded false). Events: a
 * Warning ArtifactTooLarge per file not stored for its size, Normal
 * ArtifactsPersisted, Warning ArtifactsPersistFailed. */
int artifacts_persist(const struct artifacts_config *cfg, struct kclient *kc, struct journal *j,
                      struct recorder *rec, const cJSON *session,
                      const struct reconcile_action *a, int attempts, struct tern_err *err);

/* Deletes the retained set cm (a cached ConfigMap: metadata) when its
 * tern.dev/artifacts-expire-at is at or before now. Returns 1 deleted, 0
 * not yet (or not a retained set), or an error. */
int artifacts_expire(struct kclient *kc, const cJSON *cm, int64_t now, struct tern_err *err);

#endif
