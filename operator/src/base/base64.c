/* base64.c - base64 over OpenSSL's EVP block coder. See base64.h.
 *
 * EVP_DecodeBlock returns the length including the bytes that padding stands
 * for; we validate the padding ourselves and subtract it. */
#include "base64.h"

#include "mem.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

char *base64_encode(const void *p, size_t n)
{
    size_t out = 4 * ((n + 2) / 3);
    char *s = xmalloc(out + 1);
    if (n)
        EVP_EncodeBlock((unsigned char *)s, p, (int)n);
    s[out] = '\0';
    return s;
}

static int is_b64(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '+' || c == '/';
}

int base64_decode(const char *s, size_t n, unsigned char **ret, size_t *ret_len)
{
    if (n % 4 != 0 || n > (size_t)0x7fffffff)
        return -EINVAL;
    size_t pad = 0;
    if (n >= 1 && s[n - 1] == '=')
        pad++;
    if (n >= 2 && s[n - 2] == '=')
        pad++;
    for (size_t i = 0; i < n - pad; i++)
        if (!is_b64((unsigned char)s[i]))
            return -EINVAL;
    unsigned char *out = xmalloc(n / 4 * 3 + 1);
    int r = n ? EVP_DecodeBlock(out, (const unsigned char *)s, (int)n) : 0;
    if (r < 0) {
        free(out);
        return -EINVAL;
    }
    size_t len = (size_t)r - pad;
    out[len] = '\0';
    *ret = out;
    *ret_len = len;
    return 0;
}
