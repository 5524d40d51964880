/* buf.h - bounded growable byte buffer.
 *
 * A struct buf owns its bytes. The contents are always NUL-terminated (the
 * terminator is not counted in len), so text can be used as a C string.
 * Every buffer has a maximum size set at init: appends that would exceed it
 * fail with TERN_ETOOLARGE and leave the buffer unchanged, so data from the
 * network can be accumulated without trusting its length.
 */
#ifndef TERN_BUF_H
#define TERN_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
    char *data; /* NULL until the first append; owned */
    size_t len;
    size_t cap;
    size_t max; /* bound on len */
};

/* Initialises an empty buffer that will hold at most max bytes. */
void buf_init(struct buf *b, size_t max);
/* Frees the contents; the buffer may be re-initialised. Accepts a zeroed buf. */
void buf_done(struct buf *b);
/* Empties the buffer, keeping its allocation and bound. */
void buf_reset(struct buf *b);

/* Append bytes / a string / a char / printf output.
 * Return 0, or TERN_ETOOLARGE if the result would exceed max (unchanged). */
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_putc(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Appends s as a quoted JSON string (escaping quotes, backslashes and
 * control characters; other bytes as they are). Returns 0 or
 * TERN_ETOOLARGE (then the buffer may hold part of it). */
int buf_put_json_string(struct buf *b, const char *s);

/* Removes the first n bytes (n <= len). */
void buf_consume(struct buf *b, size_t n);

/* Transfers ownership of the contents to the caller (a NUL-terminated string,
 * never NULL) and leaves the buffer empty. */
char *buf_steal(struct buf *b);

/* The contents as a C string ("" when empty). Valid until the next change. */
const char *buf_str(const struct buf *b);

#endif
