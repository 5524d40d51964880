/* apipki.h - the certificates and token of a tern-dev instance.
 *
 * On first start, generates with OpenSSL (libcrypto) an EC P-256 CA and a
 * serving certificate for 127.0.0.1/localhost signed by it (10 years), and a
 * random bearer token; later starts reuse the files, so kubeconfigs stay
 * valid across restarts. Files (mode 0600) in dir: ca.crt, ca.key,
 * server.crt, server.key, token.
 */
#ifndef TERN_APIPKI_H
#define TERN_APIPKI_H

#include "base/err.h"

struct apipki {
    char *ca_pem;
    char *cert_pem;
    char *key_pem;
    char *token;
};

/* Loads or creates the material in dir (which must exist). Returns 0 and
 * fills p (release with apipki_done), or a negative errno / TERN_EINVALID
 * (OpenSSL failure) with context in err. */
int apipki_ensure(const char *dir, struct apipki *p, struct tern_err *err);
void apipki_done(struct apipki *p);

#endif
