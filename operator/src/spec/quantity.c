/* quantity.c - Kubernetes quantity parsing. See quantity.h. */
#include "quantity.h"

#include <errno.h>
#include <string.h>

typedef __int128 i128;

#define I128_LIMIT ((i128)1 << 120) /* headroom for one more *1024 or *10 */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* m * 10^p with overflow detection against I128_LIMIT. */
static int mul_pow10(i128 *m, int p)
{
    for (; p > 0; p--) {
        if (*m > I128_LIMIT / 10)
            return -ERANGE;
        *m *= 10;
    }
    return 0;
}

int quantity_parse(const char *s, struct quantity *ret)
{
    size_t len = strlen(s);
    if (len == 0 || len > QUANTITY_MAX_TEXT)
        return -EINVAL;
    const char *p = s;
    bool neg = false;
    if (*p == '+' || *p == '-') {
        neg = *p == '-';
        p++;
    }
    /* mantissa: digits, scale = number of fraction digits kept */
    i128 mant = 0;
    int scale = 0, ndigits = 0;
    bool any = false;
    while (is_digit(*p)) {
        if (mant > I128_LIMIT / 10)
            return -ERANGE;
        mant = mant * 10 + (*p - '0');
        p++;
        any = true;
        ndigits++;
    }
    if (*p == '.') {
        p++;
        while (is_digit(*p)) {
            if (mant > I128_LIMIT / 10)
                return -ERANGE;
            mant = mant * 10 + (*p - '0');
            scale++;
            p++;
            any = true;
        }
    }
    if (!any)
        return -EINVAL;
    /* suffix -> a power of ten (dec) or of 1024 (bin) */
    int dec = 0, bin = 0;
    if (*p) {
        static const char bins[] = "KMGTPE";
        const char *b = strchr(bins, *p);
        if (b && p[1] == 'i' && p[2] == '\0') {
            bin = (int)(b - bins) + 1;
        } else if ((*p == 'e' || *p == 'E') && p[1]) {
            const char *q = p + 1;
            bool eneg = false;
            if (*q == '+' || *q == '-') {
                eneg = *q == '-';
                q++;
            }
            if (!*q)
                return -EINVAL;
            int e = 0;
            for (; *q; q++) {
                if (!is_digit(*q))
                    return -EINVAL;
                if (e > 1000)
                    return -ERANGE;
                e = e * 10 + (*q - '0');
            }
            dec = eneg ? -e : e;
        } else if (p[1] == '\0') {
            switch (*p) {
            case 'n':
                dec = -9;
                break;
            case 'u':
                dec = -6;
                break;
            case 'm':
                dec = -3;
                break;
            case 'k':
                dec = 3;
                break;
            case 'M':
                dec = 6;
                break;
            case 'G':
                dec = 9;
                break;
            case 'T':
                dec = 12;
                break;
            case 'P':
                dec = 15;
                break;
            case 'E':
                dec = 18;
                break;
            default:
                return -EINVAL;
            }
        } else {
            return -EINVAL;
        }
    }
    (void)ndigits;
    /* milli = ceil(mant * 1024^bin * 10^(dec + 3 - scale)) */
    for (int i = 0; i < bin; i++) {
        if (mant > I128_LIMIT / 1024)
            return -ERANGE;
        mant *= 1024;
    }
    int pw = dec + 3 - scale;
    i128 milli;
    if (pw >= 0) {
        if (mant != 0 && mul_pow10(&mant, pw))
            return -ERANGE;
        milli = mant;
    } else {
        i128 div = 1;
        bool tiny = false;
        for (int i = 0; i < -pw; i++) {
            if (div > mant) { /* mant / div < 1 from here on */
                tiny = true;
                break;
            }
            div *= 10;
        }
        if (tiny)
            milli = mant ? 1 : 0;
        else
            milli = mant / div + (mant % div ? 1 : 0);
    }
    if (milli > (i128)INT64_MAX)
        return -ERANGE;
    int64_t v = (int64_t)milli;
    if (neg) {
        /* rounding towards +inf for negatives means truncating the magnitude */
        if (pw < 0 && milli != 0) {
            i128 div = 1;
            for (int i = 0; i < -pw && div <= mant; i++)
                div *= 10;
            v = (int64_t)(mant / div);
        }
        v = -v;
    }
    memcpy(ret->text, s, len + 1);
    ret->milli = v;
    return 0;
}

int64_t quantity_units(const struct quantity *q)
{
    int64_t u = q->milli / 1000;
    if (q->milli % 1000 > 0)
        u++;
    return u;
}
