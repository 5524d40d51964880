/* apipki.c - CA, serving certificate and token. See apipki.h. */
#include "apipki.h"

#include "base/buf.h"
#include "base/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void apipki_done(struct apipki *p)
{
    free(p->ca_pem);
    free(p->cert_pem);
    free(p->key_pem);
    free(p->token);
    free(p->fp_ca_pem);
    free(p->fp_cert_pem);
    free(p->fp_key_pem);
    memset(p, 0, sizeof(*p));
}

static int read_file(const char *path, char **ret)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct buf b;
    buf_init(&b, 1u << 20);
    char tmp[4096];
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, tmp, sizeof(tmp));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        if (buf_append(&b, tmp, (size_t)n)) {
            rc = -EFBIG;
            break;
        }
    }
    close(fd);
    if (rc) {
        buf_done(&b);
        return rc;
    }
    *ret = buf_steal(&b);
    return 0;
}

static int write_file(const char *path, const char *data)
{
    char *tmp = xasprintf("%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int rc = 0;
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    size_t len = strlen(data), off = 0;
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            break;
        }
        off += (size_t)n;
    }
    if (!rc && fsync(fd))
        rc = -errno;
    close(fd);
    if (!rc && rename(tmp, path))
        rc = -errno;
out:
    free(tmp);
    return rc;
}

static char *bio_string(BIO *b)
{
    char *data = NULL;
    long n = BIO_get_mem_data(b, &data);
    return xstrndup(data, n > 0 ? (size_t)n : 0);
}

static EVP_PKEY *new_key(void)
{
    return EVP_EC_gen("P-256");
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

static X509 *new_cert(EVP_PKEY *key, const char *cn, X509 *issuer, EVP_PKEY *issuer_key,
                      bool ca, bool client)
{
    X509 *c = X509_new();
    if (!c)
        return NULL;
    unsigned char serial[16];
    RAND_bytes(serial, sizeof(serial));
    serial[0] &= 0x7f;
    BIGNUM *bn = BN_bin2bn(serial, sizeof(serial), NULL);
    BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c));
    BN_free(bn);
    X509_set_version(c, 2);
    X509_gmtime_adj(X509_getm_notBefore(c), -3600);
    X509_gmtime_adj(X509_getm_notAfter(c), 10L * 365 * 24 * 3600);
    X509_set_pubkey(c, key);
    X509_NAME *name = X509_get_subject_name(c);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(c, issuer ? X509_get_subject_name(issuer) : name);
    X509 *iss = issuer ? issuer : c;
    int bad = 0;
    if (ca) {
        bad |= add_ext(c, iss, NID_basic_constraints, "critical,CA:TRUE");
        bad |= add_ext(c, iss, NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature");
        bad |= add_ext(c, iss, NID_subject_key_identifier, "hash");
    } else {
        bad |= add_ext(c, iss, NID_basic_constraints, "critical,CA:FALSE");
        bad |= add_ext(c, iss, NID_key_usage, "critical,digitalSignature,keyEncipherment");
        bad |= add_ext(c, iss, NID_ext_key_usage, client ? "clientAuth" : "serverAuth");
        if (!client)
            bad |= add_ext(c, iss, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
        bad |= add_ext(c, iss, NID_authority_key_identifier, "keyid:always");
    }
    if (bad || !X509_sign(c, issuer_key ? issuer_key : key, EVP_sha256())) {
        X509_free(c);
        return NULL;
    }
    return c;
}

static char *pem_cert(X509 *c)
{
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(b, c);
    char *s = bio_string(b);
    BIO_free(b);
    return s;
}

static char *pem_key(EVP_PKEY *k)
{
    BIO *b = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL);
    char *s = bio_string(b);
    BIO_free(b);
    return s;
}

static int generate(const char *dir, struct tern_err *err)
{
    EVP_PKEY *cak = new_key(), *sk = new_key();
    X509 *ca = NULL, *srv = NULL;
    int rc = 0;
    if (!cak || !sk) {
        rc = err_set(err, TERN_EINVALID, "EC key generation failed");
        goto out;
    }
    ca = new_cert(cak, "tern-dev-ca", NULL, NULL, true, false);
    srv = ca ? new_cert(sk, "tern-dev", ca, cak, false, false) : NULL;
    if (!ca || !srv) {
        rc = err_set(err, TERN_EINVALID, "certificate generation failed");
        goto out;
    }
    unsigned char t[24];
    if (RAND_bytes(t, sizeof(t)) != 1) {
        rc = err_set(err, TERN_EINVALID, "RAND_bytes failed");
        goto out;
    }
    char tok[49];
    for (size_t i = 0; i < sizeof(t); i++)
        snprintf(tok + 2 * i, 3, "%02x", t[i]);
    struct {
        const char *name;
        char *data;
    } files[] = {{"ca.crt", pem_cert(ca)},     {"ca.key", pem_key(cak)},
                 {"server.crt", pem_cert(srv)}, {"server.key", pem_key(sk)},
                 {"token", xstrdup(tok)}};
    for (size_t i = 0; i < 5; i++) {
        char *p = xasprintf("%s/%s", dir, files[i].name);
        if (!rc) {
            rc = write_file(p, files[i].data);
            if (rc)
                err_set(err, rc, "writing %s", p);
        }
        free(p);
        free(files[i].data);
    }
out:
    X509_free(ca);
    X509_free(srv);
    EVP_PKEY_free(cak);
    EVP_PKEY_free(sk);
    return rc;
}

/* The front-proxy CA and client certificate (CN front-proxy-client), made
 * once: what tern-dev presents to aggregated API servers (apiagg.h). */
static int generate_front_proxy(const char *dir, struct tern_err *err)
{
    EVP_PKEY *cak = new_key(), *k = new_key();
    X509 *ca = cak ? new_cert(cak, "tern-dev-front-proxy-ca", NULL, NULL, true, false) : NULL;
    X509 *cl = ca && k ? new_cert(k, "front-proxy-client", ca, cak, false, true) : NULL;
    int rc = 0;
    if (!cl) {
        rc = err_set(err, TERN_EINVALID, "front-proxy certificate generation failed");
        goto out;
    }
    struct {
        const char *name;
        char *data;
    } files[] = {{"front-proxy-ca.crt", pem_cert(ca)},
                 {"front-proxy-ca.key", pem_key(cak)},
                 {"front-proxy-client.crt", pem_cert(cl)},
                 {"front-proxy-client.key", pem_key(k)}};
    for (size_t i = 0; i < 4; i++) {
        char *p = xasprintf("%s/%s", dir, files[i].name);
        if (!rc && (rc = write_file(p, files[i].data)))
            err_set(err, rc, "writing %s", p);
        free(p);
        free(files[i].data);
    }
out:
    X509_free(ca);
    X509_free(cl);
    EVP_PKEY_free(cak);
    EVP_PKEY_free(k);
    return rc;
}

int apipki_ensure(const char *dir, struct apipki *p, struct tern_err *err)
{
    struct apipki r = {0};
    char *tokpath = xasprintf("%s/token", dir);
    int rc = 0;
    if (access(tokpath, R_OK) != 0) {
        rc = generate(dir, err);
        if (rc)
            goto out;
    }
    char *fp = xasprintf("%s/front-proxy-client.key", dir);
    if (access(fp, R_OK) != 0)
        rc = generate_front_proxy(dir, err);
    free(fp);
    if (rc)
        goto out;
    static const char *names[] = {"ca.crt", "server.crt", "server.key", "token",
                                  "front-proxy-ca.crt", "front-proxy-client.crt",
                                  "front-proxy-client.key"};
    char **dst[] = {&r.ca_pem, &r.cert_pem, &r.key_pem, &r.token,
                    &r.fp_ca_pem, &r.fp_cert_pem, &r.fp_key_pem};
    for (size_t i = 0; i < 7 && !rc; i++) {
        char *path = xasprintf("%s/%s", dir, names[i]);
        rc = read_file(path, dst[i]);
        if (rc)
            err_set(err, rc, "reading %s", path);
        free(path);
    }
    if (!rc) {
        size_t n = strlen(r.token);
        while (n && (r.token[n - 1] == '\n' || r.token[n - 1] == '\r'))
            r.token[--n] = 0;
        if (!n)
            rc = err_set(err, TERN_EINVALID, "%s is empty", tokpath);
    }
out:
    free(tokpath);
    if (rc) {
        apipki_done(&r);
        return rc;
    }
    *p = r;
    return 0;
}
