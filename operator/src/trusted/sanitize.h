/* sanitize.h - credentials kept out of what trusted tools return (pure).
 *
 * The runner holds credentials the sandbox never sees: the headers of MCP
 * servers and the tokens of publish remotes (docs/tools.md). Everything a
 * trusted tool returns goes through sanitize_text before it reaches the
 * journal, the logs or the model: every occurrence of a registered value,
 * in the forms an accidental echo takes, becomes SANITIZE_MARK, and the
 * text is bounded.
 *
 * The forms of one value V:
 *   - V itself;
 *   - its base64, standard and URL-safe alphabet, padded or not, and at
 *     each of the three alignments V can have inside a longer encoded text
 *     (the characters that depend on V's bytes alone), so the token inside
 *     base64("user:" V) of a Basic header is found too;
 *   - its percent-encoding (RFC 3986 unreserved characters kept; upper- and
 *     lower-case hex), and its JSON string escaping, when they differ.
 * Derived forms shorter than TERN_SANITIZE_MIN_FORM are not searched (they
 * would match ordinary text). A text that ends with the first
 * TERN_SANITIZE_MIN_PARTIAL or more bytes of a form (a value cut off by an
 * earlier bound) loses that tail too.
 *
 * This is a safety net for echoes (a header in an error message, a URL
 * with a token, debug output), not a boundary: a server that wants to leak
 * its own credential can encode it any way it likes.
 *
 * Ownership: a struct sanitize owns copies of everything added; free with
 * sanitize_done (accepts a zeroed struct).
 */
#ifndef TERN_TRUSTED_SANITIZE_H
#define TERN_TRUSTED_SANITIZE_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>

#define SANITIZE_MARK "[redacted]"

struct sanitize {
    char **forms; /* searched longest first */
    size_t *lens;
    size_t nforms;
    size_t nvalues;
};

void sanitize_init(struct sanitize *s);
void sanitize_done(struct sanitize *s);

/* Registers a credential value (n bytes, NUL-free). Returns 0, or
 * TERN_EINVALID for a value shorter than TERN_SANITIZE_MIN_SECRET (it
 * would match ordinary text: the caller refuses such a credential) or
 * longer than TERN_SANITIZE_MAX_SECRET, or TERN_ETOOLARGE past
 * TERN_SANITIZE_MAX_SECRETS values. Adding a value twice is harmless. */
int sanitize_add(struct sanitize *s, const char *value, size_t n, struct tern_err *err);

struct sanitize_stats {
    size_t replaced; /* occurrences replaced (a cut-off tail counts as one) */
    bool truncated;  /* the result was cut at max */
};

/* The text in[0..n) with every form replaced by SANITIZE_MARK, then cut to
 * at most max bytes (0 = TERN_SANITIZE_MAX_INPUT) on a UTF-8 boundary with
 * "\n[truncated]" appended when cut. Input beyond TERN_SANITIZE_MAX_INPUT
 * is dropped first (and counts as truncated). Returns a new NUL-terminated
 * string (owned by the caller); st may be NULL. */
char *sanitize_text(const struct sanitize *s, const char *in, size_t n, size_t max,
                    struct sanitize_stats *st);

/* The same for a NUL-terminated string, unbounded but for the input bound;
 * NULL in gives NULL. */
char *sanitize_str(const struct sanitize *s, const char *in);

/* True when in[0..n) contains any form (for checks and tests). */
bool sanitize_contains(const struct sanitize *s, const char *in, size_t n);

#endif
