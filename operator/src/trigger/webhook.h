/* webhook.h - one webhook delivery to an AgentTrigger: signature, bounds,
 * filter and mapping decided without I/O (the shell, trigger/tctl, reads
 * the Secret, creates the session and writes status).
 *
 * A delivery is accepted only with a valid `X-Hub-Signature-256:
 * sha256=<hex HMAC-SHA256 of the raw body under the Secret's key>` (GitHub's
 * form), compared in constant time (CRYPTO_memcmp). The order of checks is
 * fixed so that nothing about the payload is looked at before the
 * signature holds: size, signature, suspend, delivery id, JSON, filter,
 * mapping. Messages never contain the key, the signature or payload values.
 */
#ifndef TERN_TRIGGER_WEBHOOK_H
#define TERN_TRIGGER_WEBHOOK_H

#include "base/err.h"
#include "trigger/tspec.h"

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#define WEBHOOK_SIGNATURE_HEADER "X-Hub-Signature-256"

enum webhook_outcome {
    WEBHOOK_CREATED = 0, /* a session to create (or found created) */
    WEBHOOK_TOO_LARGE,
    WEBHOOK_BAD_SIGNATURE,
    WEBHOOK_SUSPENDED,
    WEBHOOK_MALFORMED, /* no/bad delivery id, not JSON, a mapped field missing */
    WEBHOOK_FILTERED,
    WEBHOOK_NOUTCOMES
};

/* "Created", "TooLarge", "BadSignature", "Suspended", "Malformed",
 * "Filtered": the status counts' and metrics' names. */
const char *webhook_outcome_name(enum webhook_outcome o);

/* Verifies sig ("sha256=" + 64 hex digits, any case) against
 * HMAC-SHA256(key, body). 0 or TERN_EAUTH (missing, malformed or wrong). */
int webhook_verify(const unsigned char *key, size_t keylen, const char *body, size_t len,
                   const char *sig);

struct webhook_delivery {
    const char *body;
    size_t len;
    bool too_large; /* the body was over TERN_WEBHOOK_MAX_BODY and dropped */
    const char *(*header)(void *ctx, const char *name);
    void *hctx;
};

struct webhook_result {
    enum webhook_outcome outcome;
    int http_status;   /* the answer to the sender */
    char reason[64];   /* CamelCase, for the Event */
    char message[512]; /* for the Event and the answer's body */
    char *delivery_id; /* when read (owned) */
    char *session_name; /* WEBHOOK_CREATED (owned) */
    cJSON *session;     /* WEBHOOK_CREATED: the AgentSession to create (owned) */
};

/* Decides one delivery for trigger t with the Secret's key. Pure. */
void webhook_decide(const struct tspec *t, const unsigned char *key, size_t keylen,
                    const struct webhook_delivery *d, struct webhook_result *ret);
void webhook_result_done(struct webhook_result *r);

/* Whether a delivery id is usable: 1..TERN_WEBHOOK_MAX_DELIVERY_ID bytes of
 * [A-Za-z0-9._:-]. */
bool webhook_delivery_id_ok(const char *id);

#endif
