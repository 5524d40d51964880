/* test_pki.c - certificates for Tern's own TLS (pki/pki.h). */
#include "harness.h"

#include "pki/pki.c"

#include <openssl/x509.h>

static X509 *parse(const char *pem)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    X509 *c = PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    return c;
}

TEST(leaf_is_signed_by_its_ca_and_has_no_common_name)
{
    struct tern_err e = {0};
    struct pki_pair ca = {0}, leaf = {0}, other = {0};
    ASSERT_OK(pki_ca_new("journal-ca", 3650, &ca, &e));
    ASSERT_OK(pki_leaf_new(&ca, "journal-etcd", PKI_SERVER | PKI_CLIENT,
                           "DNS:tern-etcd,DNS:*.tern-etcd.ns.svc,IP:127.0.0.1", 365, &leaf, &e));
    int64_t left = 0;
    ASSERT_OK(pki_cert_remaining(leaf.cert_pem, ca.cert_pem, &left, &e));
    ASSERT_TRUE(left > 364 * 86400 && left <= 365 * 86400);
    ASSERT_OK(pki_ca_new("other-ca", 10, &other, &e));
    ASSERT_EQ_INT(pki_cert_remaining(leaf.cert_pem, other.cert_pem, &left, &e), TERN_EINVALID);
    X509 *c = parse(leaf.cert_pem);
    ASSERT_TRUE(c != NULL);
    char buf[256];
    ASSERT_TRUE(X509_NAME_get_text_by_NID(X509_get_subject_name(c), NID_commonName, buf,
                                          sizeof buf) < 0);
    ASSERT_TRUE(X509_NAME_get_text_by_NID(X509_get_subject_name(c), NID_organizationalUnitName,
                                          buf, sizeof buf) > 0);
    ASSERT_EQ_STR(buf, "journal-etcd");
    ASSERT_EQ_INT(X509_check_ip_asc(c, "127.0.0.1", 0), 1);
    ASSERT_EQ_INT(X509_check_host(c, "etcd-0.tern-etcd.ns.svc", 0, 0, NULL), 1);
    ASSERT_TRUE(X509_get_extension_flags(c) & EXFLAG_XKUSAGE);
    ASSERT_TRUE(X509_get_extended_key_usage(c) & XKU_SSL_SERVER);
    ASSERT_TRUE(X509_get_extended_key_usage(c) & XKU_SSL_CLIENT);
    X509_free(c);
    pki_pair_done(&ca);
    pki_pair_done(&leaf);
    pki_pair_done(&other);
}

TEST(client_only_and_bad_input)
{
    struct tern_err e = {0};
    struct pki_pair ca = {0}, leaf = {0};
    ASSERT_OK(pki_ca_new("ca", 1, &ca, &e));
    ASSERT_OK(pki_leaf_new(&ca, "journal-runner", PKI_CLIENT, NULL, 30, &leaf, &e));
    X509 *c = parse(leaf.cert_pem);
    ASSERT_FALSE(X509_get_extended_key_usage(c) & XKU_SSL_SERVER);
    ASSERT_TRUE(X509_get_extended_key_usage(c) & XKU_SSL_CLIENT);
    X509_free(c);
    pki_pair_done(&leaf);
    ASSERT_EQ_INT(pki_leaf_new(&ca, "x", PKI_SERVER, "URI:http://x", 1, &leaf, &e), TERN_EINVALID);
    ASSERT_EQ_INT(pki_leaf_new(&ca, "x", PKI_SERVER, "DNS:a b", 1, &leaf, &e), TERN_EINVALID);
    ASSERT_EQ_INT(pki_leaf_new(&ca, "Bad OU", PKI_SERVER, NULL, 1, &leaf, &e), TERN_EINVALID);
    ASSERT_EQ_INT(pki_leaf_new(&ca, "x", 0, NULL, 1, &leaf, &e), TERN_EINVALID);
    struct pki_pair broken = {.cert_pem = ca.cert_pem, .key_pem = (char *)"garbage"};
    ASSERT_EQ_INT(pki_leaf_new(&broken, "x", PKI_SERVER, NULL, 1, &leaf, &e), TERN_EINVALID);
    int64_t left;
    ASSERT_EQ_INT(pki_cert_remaining("not pem", NULL, &left, &e), TERN_EINVALID);
    pki_pair_done(&ca);
}
