/* satoken.c - service-account tokens. See satoken.h. */
#include "satoken.h"

#include "base/buf.h"
#include "base/mem.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdbool.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static void mac_hex(const unsigned char *key, const char *msg, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    if (!HMAC(EVP_sha256(), key, SATOKEN_KEY_LEN, (const unsigned char *)msg, n, md, &mdlen) ||
        mdlen != 32)
        abort();
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hx[md[i] >> 4];
        out[2 * i + 1] = hx[md[i] & 15];
    }
    out[64] = 0;
}

static bool field_ok(const char *s, size_t max, bool allow_dot)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n >= max)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
              (allow_dot && c == '.')))
            return false;
    }
    return true;
}

int satoken_mint(const unsigned char key[SATOKEN_KEY_LEN], const char *ns, const char *name,
                 const char *uid, char **ret, struct tern_err *err)
{
    if (!field_ok(ns, 254, false) || !field_ok(name, 254, true) || !field_ok(uid, 64, false))
        return err_set(err, TERN_EINVALID, "service account token: bad namespace/name/uid");
    char *body = xasprintf("ternsa1_%s_%s_%s", ns, name, uid);
    char mac[65];
    mac_hex(key, body, strlen(body), mac);
    *ret = xasprintf("%s.%s", body, mac);
    free(body);
    return 0;
}

static int copy_field(char *dst, size_t max, const char *s, size_t n)
{
    if (n == 0 || n >= max)
        return -1;
    memcpy(dst, s, n);
    dst[n] = 0;
    return 0;
}

int satoken_verify(const unsigned char key[SATOKEN_KEY_LEN], const char *token,
                   struct satoken_claims *ret, struct tern_err *err)
{
    size_t len = token ? strlen(token) : 0;
    if (len < 8 + 65 || len > 1024 || strncmp(token, "ternsa1_", 8) != 0)
        return err_set(err, TERN_EAUTH, "not a tern service-account token");
    const char *dot = strrchr(token, '.');
    if (!dot || strlen(dot + 1) != 64)
        return err_set(err, TERN_EAUTH, "malformed service-account token");
    char mac[65];
    size_t blen = (size_t)(dot - token);
    mac_hex(key, token, blen, mac);
    if (CRYPTO_memcmp(mac, dot + 1, 64) != 0)
        return err_set(err, TERN_EAUTH, "service-account token signature mismatch");
    struct satoken_claims c;
    const char *p = token + 8;
    const char *u1 = memchr(p, '_', (size_t)(dot - p));
    const char *u2 = u1 ? memchr(u1 + 1, '_', (size_t)(dot - u1 - 1)) : NULL;
    if (!u1 || !u2 || memchr(u2 + 1, '_', (size_t)(dot - u2 - 1)) ||
        copy_field(c.ns, sizeof c.ns, p, (size_t)(u1 - p)) ||
        copy_field(c.name, sizeof c.name, u1 + 1, (size_t)(u2 - u1 - 1)) ||
        copy_field(c.uid, sizeof c.uid, u2 + 1, (size_t)(dot - u2 - 1)))
        return err_set(err, TERN_EAUTH, "malformed service-account token");
    *ret = c;
    return 0;
}

int satoken_key_load(const char *path, unsigned char ret[SATOKEN_KEY_LEN], struct tern_err *err)
{
    unsigned char k[SATOKEN_KEY_LEN + 1];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, k, sizeof k);
        int e = errno;
        close(fd);
        if (n < 0)
            return err_set(err, -e, "read %s: %s", path, strerror(e));
        if (n != SATOKEN_KEY_LEN)
            return err_set(err, TERN_EINVALID, "%s: expected %d bytes", path, SATOKEN_KEY_LEN);
        memcpy(ret, k, SATOKEN_KEY_LEN);
        return 0;
    }
    if (errno != ENOENT)
        return err_set(err, -errno, "open %s: %s", path, strerror(errno));
    if (getrandom(k, SATOKEN_KEY_LEN, 0) != SATOKEN_KEY_LEN)
        return err_set(err, -EIO, "getrandom failed");
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return err_set(err, -errno, "create %s: %s", path, strerror(errno));
    ssize_t w = write(fd, k, SATOKEN_KEY_LEN);
    int e = errno;
    close(fd);
    if (w != SATOKEN_KEY_LEN)
        return err_set(err, w < 0 ? -e : -EIO, "write %s", path);
    memcpy(ret, k, SATOKEN_KEY_LEN);
    return 0;
}
