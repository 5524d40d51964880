/* webhook.c - one webhook delivery, decided. See webhook.h. */
#include "trigger/webhook.h"

#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"
#include "spec/session_spec.h"
#include "trigger/tmap.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *webhook_outcome_name(enum webhook_outcome o)
{
    static const char *const names[WEBHOOK_NOUTCOMES] = {
        "Created", "TooLarge", "BadSignature", "Suspended", "Malformed", "Filtered"};
    return (unsigned)o < WEBHOOK_NOUTCOMES ? names[o] : "Unknown";
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int webhook_verify(const unsigned char *key, size_t keylen, const char *body, size_t len,
                   const char *sig)
{
    unsigned char want[32], got[EVP_MAX_MD_SIZE];
    unsigned int glen = 0;
    if (!sig || strncmp(sig, "sha256=", 7) != 0 || strlen(sig) != 7 + 64)
        return TERN_EAUTH;
    for (int i = 0; i < 32; i++) {
        int h = hexval(sig[7 + 2 * i]), l = hexval(sig[8 + 2 * i]);
        if (h < 0 || l < 0)
            return TERN_EAUTH;
        want[i] = (unsigned char)(h << 4 | l);
    }
    if (!HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)body, len, got, &glen) ||
        glen != 32)
        return TERN_EAUTH;
    return CRYPTO_memcmp(want, got, 32) == 0 ? 0 : TERN_EAUTH;
}

bool webhook_delivery_id_ok(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > TERN_WEBHOOK_MAX_DELIVERY_ID)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == ':' || c == '-'))
            return false;
    }
    return true;
}

__attribute__((format(printf, 5, 6))) static void refuse(struct webhook_result *r,
                                                         enum webhook_outcome o, int status,
                                                         const char *reason, const char *fmt,
                                                         ...)
{
    r->outcome = o;
    r->http_status = status;
    snprintf(r->reason, sizeof r->reason, "%s", reason);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
}

void webhook_decide(const struct tspec *t, const unsigned char *key, size_t keylen,
                    const struct webhook_delivery *d, struct webhook_result *ret)
{
    memset(ret, 0, sizeof *ret);
    cJSON *payload = NULL;
    char *objective = NULL, *context = NULL;
    struct tern_err e = {0};
    const char *hdr = t->webhook.delivery_header;
    if (d->too_large) {
        refuse(ret, WEBHOOK_TOO_LARGE, 413, "PayloadTooLarge",
               "the body is over %u bytes; nothing was read from it",
               (unsigned)TERN_WEBHOOK_MAX_BODY);
        goto out;
    }
    const char *sig = d->header(d->hctx, WEBHOOK_SIGNATURE_HEADER);
    if (webhook_verify(key, keylen, d->body, d->len, sig)) {
        refuse(ret, WEBHOOK_BAD_SIGNATURE, 401, "BadSignature",
               sig ? "the " WEBHOOK_SIGNATURE_HEADER " signature does not match the body under "
                     "the key of Secret %s"
                   : "no " WEBHOOK_SIGNATURE_HEADER " header (the key is in Secret %s)",
               t->webhook.secret_name);
        goto out;
    }
    if (t->suspend) {
        refuse(ret, WEBHOOK_SUSPENDED, 503, "Suspended",
               "the trigger is suspended; redeliver after it is resumed");
        goto out;
    }
    const char *id = d->header(d->hctx, hdr);
    if (!webhook_delivery_id_ok(id)) {
        refuse(ret, WEBHOOK_MALFORMED, 400, "BadDeliveryId",
               id ? "the %s header is not a usable delivery id (1..%d of [A-Za-z0-9._:-])"
                  : "no %s header: the delivery id names the session",
               hdr, TERN_WEBHOOK_MAX_DELIVERY_ID);
        goto out;
    }
    ret->delivery_id = xstrdup(id);
    struct json_parse_opts po = {.max_bytes = TERN_WEBHOOK_MAX_BODY,
                                 .max_depth = TERN_TMAP_MAX_JSON_DEPTH};
    if (json_parse_opts(d->body, d->len, &po, &payload, &e)) {
        refuse(ret, WEBHOOK_MALFORMED, 400, "MalformedPayload",
               "delivery %s: the body is not JSON within the bounds (%s)", id, e.msg);
        goto out;
    }
    const char *failed = NULL;
    if (!tspec_filter_match(t, payload, d->header, d->hctx, &failed)) {
        refuse(ret, WEBHOOK_FILTERED, 202, "Filtered",
               "delivery %s: filter on %s did not match; no session", id, failed);
        goto out;
    }
    if (tmap_render(t->objective, payload, SESSION_MAX_OBJECTIVE, "spec.objective", &objective,
                    &e) ||
        (t->context &&
         tmap_render(t->context, payload, SESSION_MAX_CONTEXT_TEXT, "spec.context", &context, &e))) {
        refuse(ret, WEBHOOK_MALFORMED, 422,
               e.code == TERN_ENOTFOUND ? "MappedFieldMissing" : "MappingFailed",
               "delivery %s: %s", id, e.msg);
        goto out;
    }
    if (!*objective) {
        refuse(ret, WEBHOOK_MALFORMED, 422, "MappingFailed",
               "delivery %s: spec.objective renders to an empty text", id);
        goto out;
    }
    ret->outcome = WEBHOOK_CREATED;
    ret->http_status = 201;
    snprintf(ret->reason, sizeof ret->reason, "SessionCreated");
    ret->session_name = tspec_webhook_session_name(t->name ? t->name : "trigger", id);
    ret->session = tspec_session(t, ret->session_name, objective, context, "webhook",
                                 TSPEC_ANN_DELIVERY, id);
    snprintf(ret->message, sizeof ret->message, "delivery %s: agentsession %s", id,
             ret->session_name);
out:
    cJSON_Delete(payload);
    free(objective);
    free(context);
}

void webhook_result_done(struct webhook_result *r)
{
    free(r->delivery_id);
    free(r->session_name);
    cJSON_Delete(r->session);
    memset(r, 0, sizeof *r);
}
