/* satoken.h - service-account tokens tern-dev mints and its API server
 * verifies.
 *
 * Format (all ASCII, valid as an HTTP bearer token):
 *     ternsa1_<namespace>_<name>_<uid>.<mac>
 * where <mac> is the lowercase hex HMAC-SHA256, keyed with tern-dev's 32-byte
 * service-account key (DIR/sa.key, created on first start, mode 0600), of
 * everything before the last '.'. Namespace, name and uid cannot contain '_'
 * (DNS names and UUIDs), so the fields split unambiguously.
 *
 * The API server authenticates such a token by satoken_verify and then must
 * check that the ServiceAccount ns/name still exists with that uid (a
 * deleted and re-created account invalidates old tokens); the user is
 * "system:serviceaccount:<ns>:<name>" with groups "system:serviceaccounts",
 * "system:serviceaccounts:<ns>", "system:authenticated". Tokens do not
 * expire (they are re-minted per pod start).
 */
#ifndef TERN_SATOKEN_H
#define TERN_SATOKEN_H

#include "base/err.h"

#include <stddef.h>

#define SATOKEN_KEY_LEN 32

struct satoken_claims {
    char ns[254];
    char name[254];
    char uid[64];
};

/* Returns 0 and a new token in *ret (caller frees), or TERN_EINVALID when a
 * field is empty, too long or contains '_' or '.' (ns, uid) / '_' (name). */
int satoken_mint(const unsigned char key[SATOKEN_KEY_LEN], const char *ns, const char *name,
                 const char *uid, char **ret, struct tern_err *err);

/* Returns 0 and the claims when token is well-formed and its MAC verifies
 * (constant-time compare), else TERN_EAUTH. */
int satoken_verify(const unsigned char key[SATOKEN_KEY_LEN], const char *token,
                   struct satoken_claims *ret, struct tern_err *err);

/* Reads the key from path, or creates it (random, mode 0600) when absent.
 * Returns 0, -errno, or TERN_EINVALID for a file of the wrong size. */
int satoken_key_load(const char *path, unsigned char ret[SATOKEN_KEY_LEN], struct tern_err *err);

#endif
