/* glob.h - the one glob matcher (policy, AgentSession spec, tern-sandboxd).
 *
 * Syntax (docs/globs.md is the user-facing description of these rules):
 *   c       a literal character; `\c` is c literally (also inside classes)
 *   ?       one character
 *   [...]   one character of the class: `[abc]`, ranges `[a-z]`, negation
 *           `[!x]` or `[^x]`, a `]` first in the class is literal; no POSIX
 *           named classes (`[:alpha:]`)
 *   *       any run of characters
 *   **      any run of characters, '/' included
 * Patterns are anchored (the whole of s must match) and case-sensitive.
 *
 * Modes (bit flags):
 *   GLOB_TEXT (command lines, exec_command approvals): '/' is an ordinary
 *     character: `*`, `**`, `?` and classes all match it.
 *   GLOB_PATH (workspace-relative paths; the default, value 0): `*`, `?` and
 *     classes never match '/'; `**` does. A "**" + "/" at the start or after
 *     a '/' also matches no directory at all ("**" "/x.md" matches "x.md",
 *     "a/" "**" "/b" matches "a/b"); a trailing "/" "**" also matches the
 *     directory itself ("output/" "**" matches "output").
 *   GLOB_PERIOD (with GLOB_PATH; tern-sandboxd's --writable rules, as fnmatch
 *     FNM_PERIOD per component did there before): `*`, `?` and classes do
 *     not match a '.' that begins s or follows a '/' (hidden entries need an
 *     explicit '.'); the `**` forms do match it ("working/" "**" still
 *     covers "working/.git/config").
 *   GLOB_NO_DIR_SELF (with GLOB_PATH; tern-sandboxd): a trailing "/" "**"
 *     needs at least one character after the '/': "working/" "**" does not
 *     match "working", so a --writable rule never lets a request delete or
 *     replace the directory that restore treats as a unit. The runner's
 *     policy and the spec helpers keep the directory-itself match (their
 *     approval globs name a directory and everything in it).
 *
 * A pattern is malformed when it has a trailing lone `\`, an unterminated
 * class, a reversed range (`[z-a]`), or more than TERN_GLOB_MAX_PATTERN bytes.
 *
 * The matcher is a dynamic programme over (pattern token, input position):
 * O(len(pattern) * len(s)) time, O(len(pattern) + len(s)) space, no
 * recursion and no backtracking, so hostile patterns such as "*a*a*a...b"
 * against a long string stay fast.
 */
#ifndef TERN_BASE_GLOB_H
#define TERN_BASE_GLOB_H

#include <stdbool.h>

enum glob_mode {
    GLOB_PATH = 0,
    GLOB_TEXT = 1u << 0,
    GLOB_PERIOD = 1u << 1,
    GLOB_NO_DIR_SELF = 1u << 2,
};

/* True when s matches pattern in full under mode (an OR of enum glob_mode
 * flags; GLOB_PERIOD and GLOB_NO_DIR_SELF are ignored with GLOB_TEXT). A
 * malformed or NULL pattern, or a NULL s, matches nothing. Allocates
 * scratch memory (aborts on OOM); never fails otherwise. */
bool glob_match(const char *pattern, const char *s, unsigned mode);

/* True when pattern is well-formed (the same for every mode), for
 * validating configuration and spec fields up front. NULL is not. */
bool glob_valid(const char *pattern);

#endif
