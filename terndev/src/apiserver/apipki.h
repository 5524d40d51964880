/* apipki.h - the certificates and token of a tern-dev instance.
 *
 * On first start, generates with OpenSSL (libcrypto) an EC P-256 CA and a
 * serving certificate for 127.0.0.1/localhost signed by it (10 years), and a
 * random bearer token; later starts reuse the files, so kubeconfigs stay
 * valid across restarts. Files (mode 0600) in dir: ca.crt, ca.key,
 * server.crt, server.key, token; and the front-proxy CA and client
 * certificate, front-proxy-ca.crt/.key, front-proxy-client.crt/.key (made
 * when missing, also in a directory of an older tern-dev).
 */
#ifndef TERN_APIPKI_H
#define TERN_APIPKI_H

#include "base/err.h"

struct apipki {
    char *ca_pem;
    char *cert_pem;
    char *key_pem;
    char *token;
    /* the front-proxy CA and client certificate (CN front-proxy-client) that
     * aggregated API servers trust (apiagg.h), published in kube-system's
     * extension-apiserver-authentication ConfigMap */
    char *fp_ca_pem;
    char *fp_cert_pem;
    char *fp_key_pem;
};

/* Loads or creates the material in dir (which must exist). Returns 0 and
 * fills p (release with apipki_done), or a negative errno / TERN_EINVALID
 * (OpenSSL failure) with context in err. */
int apipki_ensure(const char *dir, struct apipki *p, struct tern_err *err);
void apipki_done(struct apipki *p);

#endif
