/* mem.h - allocation that cannot fail.
 *
 * Out-of-memory aborts the process (one place, one message): callers never
 * check for NULL. Sizes derived from input must be bounded (limits.h) before
 * they reach these functions; the *_array forms also abort on overflow.
 */
#ifndef TERN_MEM_H
#define TERN_MEM_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
void *xreallocarray(void *p, size_t nmemb, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
void *xmemdup(const void *p, size_t n);
/* A newly allocated printf result. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
