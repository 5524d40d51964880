/* base64.h - standard base64 (RFC 4648, with padding), as etcd's JSON gateway
 * and Kubernetes Secrets use it.
 *
 * Both functions return a newly allocated NUL-terminated result owned by the
 * caller (decode also reports the exact decoded length, padding excluded).
 */
#ifndef TERN_BASE64_H
#define TERN_BASE64_H

#include <stddef.h>

/* Encodes n bytes; never fails. */
char *base64_encode(const void *p, size_t n);
/* Decodes n characters of s. Returns 0 with *ret and *ret_len set, or -EINVAL for
 * bad length, bad characters or misplaced padding. */
int base64_decode(const char *s, size_t n, unsigned char **ret, size_t *ret_len);

#endif
