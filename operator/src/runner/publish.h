/* publish.h - publish_branch: push a branch of a repository in the
 * workspace from the runner pod (docs/tools.md).
 *
 *   1. in the sandbox, through sandboxd's exec: `git bundle create` of
 *      refs/heads/<branch> into a file under the first writable root
 *      (working/.tern-publish-<hash>.bundle); the sandbox needs git, not
 *      network or credentials;
 *   2. the runner fetches that file (sandboxd's files API, streamed to a
 *      temporary directory, at most TERN_PUBLISH_MAX_BUNDLE) and deletes
 *      it in the sandbox;
 *   3. here: a fresh bare repository, `git fetch` from the bundle (objects
 *      checked: transfer.fsckObjects), the commit the branch names;
 *   4. `git ls-remote` of the remote branch: already at that commit means
 *      done (a retried call after a crash pushes nothing);
 *   5. `git push <commit>:refs/heads/<remoteBranch>` (never forced).
 * git runs with no system or global configuration, hooks off, only the
 * file, http and https protocols, no redirects followed, no credential
 * helper and no prompt; the token reaches it as an Authorization header
 * in its environment (GIT_CONFIG_*), never on a command line or in a
 * file. Only a repository's objects cross from the sandbox, never its
 * configuration or hooks.
 */
#ifndef TERN_RUNNER_PUBLISH_H
#define TERN_RUNNER_PUBLISH_H

#include "base/err.h"
#include "policy/policy.h"
#include "runner/config.h"
#include "runner/sbx.h"

#include <stdbool.h>
#include <stdint.h>

struct publish_outcome {
    const char *status; /* completed | error */
    char *text;         /* for the model (unsanitized: the caller sanitizes), owned */
    char *commit;       /* the commit published (or found there), or NULL; owned */
    bool pushed;        /* false: the remote already had it (or nothing happened) */
};

void publish_outcome_done(struct publish_outcome *o);

/* Runs publish_branch a (POLICY_PUBLISH) of call call_id within
 * timeout_ms. cfg (spec, uid, the crash hook) and sbx are borrowed. Returns
 * 0 with *ret for every outcome worth telling the model (also a failed
 * bundle, fetch or push), or a retryable error when sandboxd could not be
 * reached or was busy. */
int publish_run(const struct runner_config *cfg, struct sbx *sbx, const char *call_id,
                const struct policy_args *a, int64_t timeout_ms, struct publish_outcome *ret,
                struct tern_err *err);

/* The directory of the first writable glob before any glob character
 * (working/ and two stars -> "working"), where the bundle is written; "working"
 * when none has one. A new string. Pure. */
char *publish_bundle_dir(const char *const *writable, size_t n);

/* s in single quotes for sh (a new string). Pure. */
char *publish_shell_quote(const char *s);

#endif
