/* num.h - strict number parsing and formatting.
 *
 * The parsers accept the whole input or nothing: no leading/trailing spaces,
 * no trailing garbage, no empty input, overflow detected. They return 0 and
 * set *ret, or -EINVAL (not a number) / -ERANGE (out of range) and leave
 * *ret untouched. Use these instead of atoi/strtol.
 */
#ifndef TERN_NUM_H
#define TERN_NUM_H

#include <stddef.h>
#include <stdint.h>

/* Decimal signed 64-bit: optional '-', digits. */
int num_parse_i64(const char *s, int64_t *ret);
/* Same, for the first n bytes of s (s need not be NUL-terminated). */
int num_parse_i64n(const char *s, size_t n, int64_t *ret);
/* Decimal unsigned 64-bit: digits only. */
int num_parse_u64(const char *s, uint64_t *ret);
/* Decimal signed int64 within [min, max] (else -ERANGE). */
int num_parse_range(const char *s, int64_t min, int64_t max, int64_t *ret);
/* Hexadecimal unsigned 64-bit (no 0x prefix), as in journal keys. */
int num_parse_hex64(const char *s, size_t n, uint64_t *ret);
/* Formats v into out (at least 21 bytes); returns out. */
char *num_fmt_i64(int64_t v, char out[21]);

#endif
