/* pki.h - the certificates of Tern's own TLS (docs/journal.md, "The locked
 * door"; docs/stream-api.md): the journal etcd's CA, its serving and peer
 * certificate, the operator's and the runners' client certificates, and
 * the aggregated API's CA and serving certificate.
 *
 * Keys are EC P-256, signatures SHA-256. A subject holds O=tern and one OU
 * naming the certificate's use, never a CommonName: etcd's JSON gateway
 * refuses a client certificate with a CommonName once auth is on (the
 * user comes from a login instead). PEM text in and out; no files.
 *
 * Ownership: a struct pki_pair owns its two strings (pki_pair_done wipes
 * the key and frees both; it accepts a zeroed struct). Errors: TERN_EINVALID
 * (bad input: a SAN list that is not "DNS:x,IP:y,...", PEM that does not
 * parse) or -EIO (OpenSSL failed), with the reason in err.
 */
#ifndef TERN_PKI_H
#define TERN_PKI_H

#include "base/err.h"

#include <stdint.h>

struct pki_pair {
    char *cert_pem;
    char *key_pem;
};

enum pki_usage {
    PKI_SERVER = 1, /* extendedKeyUsage serverAuth */
    PKI_CLIENT = 2, /* clientAuth */
};

/* A self-signed CA (O=tern, OU=ou) valid for days. Returns 0 and *ret. */
int pki_ca_new(const char *ou, int days, struct pki_pair *ret, struct tern_err *err);

/* A certificate signed by ca for usage (PKI_SERVER | PKI_CLIENT), with the
 * subjectAltNames sans ("DNS:a,DNS:b,IP:127.0.0.1", or NULL/"" for none),
 * valid for days. Returns 0 and *ret. */
int pki_leaf_new(const struct pki_pair *ca, const char *ou, unsigned usage, const char *sans,
                 int days, struct pki_pair *ret, struct tern_err *err);

/* Seconds until cert_pem's notAfter (negative once expired) into *ret_s.
 * With ca_pem, also checks that ca_pem's key signed it (TERN_EINVALID when
 * it did not: the CA was replaced). */
int pki_cert_remaining(const char *cert_pem, const char *ca_pem, int64_t *ret_s,
                       struct tern_err *err);

void pki_pair_done(struct pki_pair *p);

#endif
