/* pki.c - certificates with OpenSSL's libcrypto. See pki.h. */
#include "pki.h"

#include "base/mem.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int ossl_err(struct tern_err *err, const char *what)
{
    char msg[200];
    unsigned long e = ERR_get_error();
    ERR_error_string_n(e, msg, sizeof msg);
    ERR_clear_error();
    return err_set(err, -EIO, "pki: %s: %s", what, e ? msg : "failed");
}

static char *bio_text(BIO *b)
{
    char *data = NULL;
    long n = BIO_get_mem_data(b, &data);
    return xstrndup(data, n > 0 ? (size_t)n : 0);
}

static char *pem_cert(X509 *c)
{
    BIO *b = BIO_new(BIO_s_mem());
    char *s = b && PEM_write_bio_X509(b, c) ? bio_text(b) : NULL;
    BIO_free(b);
    return s;
}

static char *pem_key(EVP_PKEY *k)
{
    BIO *b = BIO_new(BIO_s_mem());
    char *s = b && PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL) ? bio_text(b) : NULL;
    BIO_free(b);
    return s;
}

static X509 *parse_cert(const char *pem)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    X509 *c = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    return c;
}

static EVP_PKEY *parse_key(const char *pem)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    return k;
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ex)
        return -1;
    int ok = X509_add_ext(cert, ex, -1);
    X509_EXTENSION_free(ex);
    return ok ? 0 : -1;
}

/* "DNS:a,IP:1.2.3.4": only those two kinds, names of [A-Za-z0-9.*-], IPs
 * of digits, dots and colons. */
static bool valid_sans(const char *s)
{
    if (!s || !*s)
        return true;
    if (strlen(s) > 4096)
        return false;
    const char *p = s;
    while (*p) {
        bool dns = strncmp(p, "DNS:", 4) == 0, ip = strncmp(p, "IP:", 3) == 0;
        if (!dns && !ip)
            return false;
        p += dns ? 4 : 3;
        const char *start = p;
        for (; *p && *p != ','; p++) {
            char c = *p;
            bool ok = dns ? ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                             (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '*')
                          : ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
                             (c >= 'A' && c <= 'F') || c == '.' || c == ':');
            if (!ok)
                return false;
        }
        if (p == start)
            return false;
        if (*p == ',')
            p++;
    }
    return true;
}

static X509 *new_cert(EVP_PKEY *key, const char *ou, X509 *issuer, EVP_PKEY *issuer_key,
                      bool ca, unsigned usage, const char *sans, int days)
{
    X509 *c = X509_new();
    if (!c)
        return NULL;
    unsigned char serial[16];
    if (RAND_bytes(serial, sizeof serial) != 1) {
        X509_free(c);
        return NULL;
    }
    serial[0] &= 0x7f;
    BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c));
    BN_free(bn);
    X509_set_version(c, 2);
    /* an hour of slack for clocks that are behind */
    X509_gmtime_adj(X509_getm_notBefore(c), -3600);
    X509_gmtime_adj(X509_getm_notAfter(c), (long)days * 24 * 3600);
    X509_set_pubkey(c, key);
    X509_NAME *name = X509_get_subject_name(c);
    X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"tern", -1, -1, 0);
    X509_NAME_add_entry_by_txt(name, "OU", MBSTRING_ASC, (const unsigned char *)ou, -1, -1, 0);
    X509_set_issuer_name(c, issuer ? X509_get_subject_name(issuer) : name);
    X509 *iss = issuer ? issuer : c;
    int bad = add_ext(c, iss, NID_subject_key_identifier, "hash");
    if (ca) {
        bad |= add_ext(c, iss, NID_basic_constraints, "critical,CA:TRUE");
        bad |= add_ext(c, iss, NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature");
    } else {
        bad |= add_ext(c, iss, NID_basic_constraints, "critical,CA:FALSE");
        bad |= add_ext(c, iss, NID_key_usage, "critical,digitalSignature,keyEncipherment");
        bad |= add_ext(c, iss, NID_ext_key_usage,
                       (usage & PKI_SERVER) && (usage & PKI_CLIENT) ? "serverAuth,clientAuth"
                       : (usage & PKI_SERVER)                       ? "serverAuth"
                                                                    : "clientAuth");
        if (sans && *sans)
            bad |= add_ext(c, iss, NID_subject_alt_name, sans);
        bad |= add_ext(c, iss, NID_authority_key_identifier, "keyid:always");
    }
    if (bad || !X509_sign(c, issuer_key ? issuer_key : key, EVP_sha256())) {
        X509_free(c);
        return NULL;
    }
    return c;
}

static bool valid_ou(const char *ou)
{
    size_t n = ou ? strlen(ou) : 0;
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((ou[i] >= 'a' && ou[i] <= 'z') || (ou[i] >= '0' && ou[i] <= '9') || ou[i] == '-'))
            return false;
    return true;
}

static int finish(X509 *c, EVP_PKEY *k, struct pki_pair *ret, struct tern_err *err)
{
    char *cp = pem_cert(c), *kp = pem_key(k);
    if (!cp || !kp) {
        free(cp);
        if (kp)
            explicit_bzero(kp, strlen(kp));
        free(kp);
        return ossl_err(err, "PEM encoding");
    }
    ret->cert_pem = cp;
    ret->key_pem = kp;
    return 0;
}

int pki_ca_new(const char *ou, int days, struct pki_pair *ret, struct tern_err *err)
{
    if (!valid_ou(ou) || days < 1 || days > 36500)
        return err_set(err, TERN_EINVALID, "pki: bad OU or lifetime");
    EVP_PKEY *k = EVP_EC_gen("P-256");
    if (!k)
        return ossl_err(err, "EC key");
    X509 *c = new_cert(k, ou, NULL, NULL, true, 0, NULL, days);
    int r = c ? finish(c, k, ret, err) : ossl_err(err, "CA certificate");
    X509_free(c);
    EVP_PKEY_free(k);
    return r;
}

int pki_leaf_new(const struct pki_pair *ca, const char *ou, unsigned usage, const char *sans,
                 int days, struct pki_pair *ret, struct tern_err *err)
{
    if (!valid_ou(ou) || days < 1 || days > 36500 || !(usage & (PKI_SERVER | PKI_CLIENT)))
        return err_set(err, TERN_EINVALID, "pki: bad OU, usage or lifetime");
    if (!valid_sans(sans))
        return err_set(err, TERN_EINVALID, "pki: bad subjectAltNames \"%.200s\"", sans);
    X509 *cac = parse_cert(ca->cert_pem);
    EVP_PKEY *cak = parse_key(ca->key_pem);
    EVP_PKEY *k = NULL;
    X509 *c = NULL;
    int r;
    if (!cac || !cak || X509_check_private_key(cac, cak) != 1) {
        ERR_clear_error();
        r = err_set(err, TERN_EINVALID, "pki: the CA's certificate and key do not parse or match");
        goto out;
    }
    if (!(k = EVP_EC_gen("P-256"))) {
        r = ossl_err(err, "EC key");
        goto out;
    }
    c = new_cert(k, ou, cac, cak, false, usage, sans, days);
    r = c ? finish(c, k, ret, err) : ossl_err(err, "certificate");
out:
    X509_free(c);
    X509_free(cac);
    EVP_PKEY_free(k);
    EVP_PKEY_free(cak);
    return r;
}

int pki_cert_remaining(const char *cert_pem, const char *ca_pem, int64_t *ret_s,
                       struct tern_err *err)
{
    X509 *c = parse_cert(cert_pem), *ca = ca_pem ? parse_cert(ca_pem) : NULL;
    int r = 0;
    if (!c || (ca_pem && !ca)) {
        ERR_clear_error();
        r = err_set(err, TERN_EINVALID, "pki: a certificate does not parse");
        goto out;
    }
    if (ca) {
        EVP_PKEY *pub = X509_get0_pubkey(ca);
        if (!pub || X509_verify(c, pub) != 1) {
            ERR_clear_error();
            r = err_set(err, TERN_EINVALID, "pki: the certificate was not signed by this CA");
            goto out;
        }
    }
    int days = 0, secs = 0;
    if (!ASN1_TIME_diff(&days, &secs, NULL, X509_get0_notAfter(c))) {
        r = ossl_err(err, "notAfter");
        goto out;
    }
    *ret_s = (int64_t)days * 86400 + secs;
out:
    X509_free(c);
    X509_free(ca);
    return r;
}

void pki_pair_done(struct pki_pair *p)
{
    if (!p)
        return;
    if (p->key_pem)
        explicit_bzero(p->key_pem, strlen(p->key_pem));
    free(p->key_pem);
    free(p->cert_pem);
    p->cert_pem = p->key_pem = NULL;
}
