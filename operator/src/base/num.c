/* num.c - strict number parsing. See num.h. */
#include "num.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int num_parse_i64n(const char *s, size_t n, int64_t *ret)
{
    if (!s || n == 0)
        return -EINVAL;
    size_t i = 0;
    int neg = 0;
    if (s[0] == '-') {
        neg = 1;
        i = 1;
        if (n == 1)
            return -EINVAL;
    }
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (limit - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *ret = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return 0;
}

int num_parse_i64(const char *s, int64_t *ret)
{
    if (!s)
        return -EINVAL;
    return num_parse_i64n(s, strlen(s), ret);
}

int num_parse_u64(const char *s, uint64_t *ret)
{
    if (!s || !*s)
        return -EINVAL;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *ret = v;
    return 0;
}

int num_parse_range(const char *s, int64_t min, int64_t max, int64_t *ret)
{
    int64_t v;
    int r = num_parse_i64(s, &v);
    if (r)
        return r;
    if (v < min || v > max)
        return -ERANGE;
    *ret = v;
    return 0;
}

int num_parse_hex64(const char *s, size_t n, uint64_t *ret)
{
    if (!s || n == 0 || n > 16)
        return n > 16 ? -ERANGE : -EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -EINVAL;
        v = (v << 4) | d;
    }
    *ret = v;
    return 0;
}

char *num_fmt_i64(int64_t v, char out[21])
{
    snprintf(out, 21, "%lld", (long long)v);
    return out;
}
