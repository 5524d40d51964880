/* buf.c - bounded growable byte buffer. See buf.h. */
#include "buf.h"

#include "err.h"

#include <errno.h>
#include "mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

void buf_init(struct buf *b, size_t max)
{
    *b = (struct buf){.max = max};
}

void buf_done(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

/* Ensures room for `extra` more bytes plus the terminator. */
static int reserve(struct buf *b, size_t extra)
{
    if (extra > b->max || b->len > b->max - extra)
        return TERN_ETOOLARGE;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
    int r = reserve(b, n);
    if (r)
        return r;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_putc(struct buf *b, char c)
{
    return buf_append(b, &c, 1);
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return -EINVAL;
    int r = reserve(b, (size_t)n);
    if (r)
        return r;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return r;
}

int buf_put_json_string(struct buf *b, const char *s)
{
    int r = buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p && !r; p++) {
        switch (*p) {
        case '"': r = buf_puts(b, "\\\""); break;
        case '\\': r = buf_puts(b, "\\\\"); break;
        case '\b': r = buf_puts(b, "\\b"); break;
        case '\f': r = buf_puts(b, "\\f"); break;
        case '\n': r = buf_puts(b, "\\n"); break;
        case '\r': r = buf_puts(b, "\\r"); break;
        case '\t': r = buf_puts(b, "\\t"); break;
        default:
            r = *p < 0x20 ? buf_printf(b, "\\u%04x", *p) : buf_putc(b, (char)*p);
        }
    }
    return r ? r : buf_putc(b, '"');
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

char *buf_steal(struct buf *b)
{
    char *s = b->data ? b->data : xstrdup("");
    b->data = NULL;
    b->len = b->cap = 0;
    return s;
}

const char *buf_str(const struct buf *b)
{
    return b->data ? b->data : "";
}
