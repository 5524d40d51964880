/* artstore.h - artifacts that outlive the pod (pure): the ConfigMaps that
 * hold a persisted set of the files under output/, their names, their
 * manifest, and what status.result.artifacts says (docs/operator.md,
 * "Artifacts").
 *
 * A set is one ConfigMap <session>-artifacts-t<turn> (or, asked for with
 * tern.dev/persist-artifacts, <session>-artifacts-t<turn>-<8 hex of the
 * request>): binaryData f0, f1, ... the files' bytes, data manifest.json
 * {"session","uid","turn","request","artifacts":[{path,size,sha256,stored,
 * key | reason,message}]}. Names are deterministic so a retry after a crash
 * finds the object it wrote.
 *
 * Ownership: inputs are borrowed; every returned tree or string is owned by
 * the caller. Nothing here does I/O.
 */
#ifndef TERN_ARTSTORE_H
#define TERN_ARTSTORE_H

#include "base/err.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARTSTORE_ROLE        "artifacts"                    /* tern.dev/role */
#define ARTSTORE_MANIFEST    "manifest.json"
#define ARTSTORE_ANN_EXPIRES "tern.dev/artifacts-expire-at"  /* RFC 3339, retained sets */
#define ARTSTORE_ANN_PERSIST "tern.dev/persist-artifacts"    /* on the session: a request */
#define ARTSTORE_EVENT       "artifacts_persisted"           /* the journal's record */

/* One file read from the sandbox (or not). */
struct artstore_file {
    const char *path;          /* "output/..." */
    const unsigned char *data; /* its bytes when read, else NULL */
    size_t len;                /* bytes read, or the size the listing said */
    const char *reason;        /* not read: CamelCase why ("TooLarge", "Gone"), else NULL */
    const char *message;       /* ... for people */
};

struct artstore_in {
    const char *session, *ns, *uid;
    int64_t turn;
    const char *request;       /* the on-demand request, or NULL (a turn's completion) */
    bool retain;               /* spec.retainArtifacts: no owner, an expiry instead */
    int64_t ttl_seconds;       /* with retain */
    int64_t now;               /* unix seconds */
    size_t max_file, max_total;
    const struct artstore_file *files;
    size_t nfiles;
};

/* The set's ConfigMap name for (session, turn, request), newly allocated. */
char *artstore_name(const char *session, int64_t turn, const char *request);

/* Builds the ConfigMap of a set and the artifact list the journal records
 * (each {path, size, sha256, stored:true, configMap} or {path, size,
 * stored:false, reason, message}). A file over max_file, or one that would
 * take the set over max_total, is listed as not stored (reason TooLarge /
 * SetTooLarge); files are taken in the order given. *ret_stored counts the
 * files stored. Never fails. */
void artstore_build(const struct artstore_in *in, cJSON **ret_configmap, cJSON **ret_artifacts,
                    size_t *ret_stored);

/* True when two ConfigMaps of a set hold the same files and manifest. */
bool artstore_same(const cJSON *a, const cJSON *b);

/* Parses and checks a stored set's manifest (the text of data.manifest.json;
 * a ConfigMap anyone with edit rights may have changed): at most
 * TERN_ARTIFACTS_MAX_MANIFEST bytes, an object whose "artifacts" is an array
 * of at most TERN_ARTIFACTS_MAX_FILES entries, each a path under output/
 * without "." or ".." segments, a size, and when stored a sha256 (64 lower
 * hex digits) and a key [a-z0-9]{1,16}. Returns 0 and *ret (the manifest
 * object), TERN_ETOOLARGE or TERN_EINVALID with the reason. */
int artstore_parse_manifest(const char *text, size_t len, cJSON **ret, struct tern_err *err);

/* The bytes of the stored artifact at path in the ConfigMap cm: its
 * binaryData decoded and checked against the manifest's size and sha256.
 * Returns 0 and *ret, *ret_len (owned), *ret_sha (65 bytes); TERN_ENOTFOUND
 * (no such stored path), TERN_EINVALID (a manifest or content that does not
 * check out). */
int artstore_file(const cJSON *cm, const char *path, unsigned char **ret, size_t *ret_len,
                  char ret_sha[65], struct tern_err *err);

/* Lower-case hex sha256 of p[n] into out[65]. */
void artstore_sha256(const void *p, size_t n, char out[65]);

/* status.result.artifacts: the recorded set's list when it covers the
 * result's turn (persisted->turn >= result_turn), else the result's paths
 * (array of strings) as {path, stored:false, reason:"Pending"} ("NotPersisted"
 * for an answer without its turn: recorded before the store). NULL when
 * there is nothing to list. */
cJSON *artstore_status_list(const cJSON *result_paths, int64_t result_turn,
                            const cJSON *persisted);

/* Whether a persisted set is still wanted: the turn's completion (result
 * paths not empty and no record for result_turn), or a request (an
 * annotation value not yet recorded). *ret_request is the request to serve
 * (borrowed from ann) or NULL. */
bool artstore_wanted(const cJSON *result_paths, int64_t result_turn, const cJSON *persisted,
                     const char *last_request, const char *ann, const char **ret_request);

#endif
