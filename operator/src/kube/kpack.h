/* kpack.h - lossless packing of compact JSON text for the informers' caches.
 *
 * An informer keeps every object it watches as compact JSON text (10,000
 * sessions and their children are most of the operator's memory), and most
 * of that text is the same few dozen keys again and again:
 * "lastTransitionTime", "observedGeneration", "resourceVersion", ...
 * kpack_pack replaces each occurrence of one of a fixed list of such
 * strings by one byte in 0x01..0x1f, which compact JSON never contains
 * (control characters inside strings are escaped, and there is no
 * whitespace), and kpack_unpack restores the text exactly. A parked session
 * shrinks by about a third.
 * Text that does contain such a byte (not compact JSON from the printer)
 * is not packed: kpack_pack returns NULL and the caller keeps it as it is.
 */
#ifndef TERN_KPACK_H
#define TERN_KPACK_H

#include <stddef.h>

/* The packed form of text (NUL-terminated, allocated to its size), or NULL
 * when text holds a byte in 0x01..0x1f (it cannot be packed losslessly). */
char *kpack_pack(const char *text);
/* The text packed holds (NUL-terminated; *ret_len its length, may be NULL). */
char *kpack_unpack(const char *packed, size_t *ret_len);

#endif
