/* glob.h - fnmatch-like glob matching with "**", in linear space.
 *
 * Syntax: `*` any run of characters, `?` one character, `[abc]` / `[a-z]` /
 * `[!x]` (or `[^x]`) a character class, `\c` a literal c, `**` any run of
 * characters including '/'. In GLOB_PATH mode `*`, `?` and classes never
 * match '/'; a leading or inner "**" + "/" also matches no directory at all
 * ("**" "/x.md" matches "x.md") and a trailing "/" "**" also matches the
 * directory itself ("output/" "**" matches "output"). In GLOB_TEXT mode
 * (commands) `*` and `?` match '/' too.
 *
 * The matcher is a dynamic programme over (pattern token, input position):
 * O(pattern * input) time, O(input) space, no backtracking blow-up.
 */
#ifndef TERN_POLICY_GLOB_H
#define TERN_POLICY_GLOB_H

#include <stdbool.h>

enum glob_mode { GLOB_PATH = 0, GLOB_TEXT = 1 };

/* True when s matches pattern in full. A malformed pattern (unterminated
 * class, trailing backslash, longer than TERN_POLICY_MAX_PATTERN) matches
 * nothing. */
bool glob_match(const char *pattern, const char *s, enum glob_mode mode);

/* True when pattern is well-formed (for validating spec fields up front). */
bool glob_valid(const char *pattern);

#endif
