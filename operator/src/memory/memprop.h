/* memprop.h - memory proposals: the pure parts (docs/tools.md,
 * "propose_memory_update").
 *
 * A session whose spec.memory names a ConfigMap sees it read-only as
 * simple.md. The agent may propose a change of one markdown section of it
 * (replace_section {heading, content}) with a reason; a human approves or
 * rejects it; the operator applies an approved one to the ConfigMap when
 * the file is still the one the proposal was made against (its sha256).
 *
 * This module holds what both sides share, without I/O: the arguments'
 * parser, the section replacement, the proposal id, sha256 in hex and the
 * preview shown in status. Returned strings are owned by the caller.
 */
#ifndef TERN_MEMORY_MEMPROP_H
#define TERN_MEMORY_MEMPROP_H

#include "base/err.h"

#include <stddef.h>

#define MEMPROP_TOOL "propose_memory_update"
#define MEMPROP_ID_LEN 15 /* "mp-" and 12 hex digits */

struct memprop_args {
    char *reason;  /* 1..TERN_MEMORY_MAX_REASON bytes */
    char *heading; /* an ATX heading line: "## Build" (1-6 '#', a space, text) */
    char *content; /* the section's new body, 0..TERN_MEMORY_MAX_SECTION bytes;
                    * "" removes the section */
};

/* Parses the tool's arguments {"reason", "replace_section": {"heading",
 * "content"}} (JSON text of len bytes): no other members, strings within
 * the bounds, no control characters but newline and tab, a heading that is
 * one ATX heading line, content without a heading of the section's level
 * or above (outside code fences) and without a code fence left open. Returns 0 and *ret, or TERN_EINVALID with
 * a message for the model. */
int memprop_parse_args(const char *json, size_t len, struct memprop_args *ret,
                       struct tern_err *err);
void memprop_args_done(struct memprop_args *a);

/* The level (1..6) of an ATX heading line, or 0 when line (len bytes, no
 * newline) is not one. */
int memprop_heading_level(const char *line, size_t len);

/* Replaces the section of doc (len bytes) that starts with the line equal
 * to heading (trailing blanks ignored, outside code fences) and runs to the
 * next heading of the same level or above, with heading and content; a
 * heading not in doc is appended as a new section; empty content removes
 * the section. Returns 0 and *ret (the new document, NUL-terminated), or
 * TERN_EINVALID when it does not apply: the heading appears more than once,
 * there is no section to remove, a new section would follow an open code
 * fence, doc holds a NUL or is over
 * TERN_MEMORY_MAX_FILE, the result would be, or would equal doc. */
int memprop_replace_section(const char *doc, size_t len, const char *heading,
                            const char *content, char **ret, struct tern_err *err);

/* SHA-256 of n bytes at p as 64 lowercase hex digits into out[65]. */
void memprop_sha256_hex(const void *p, size_t n, char out[65]);

/* The proposal id of a tool call: "mp-" and the first 12 hex digits of
 * SHA-256("<uid>/<callId>") into out[MEMPROP_ID_LEN + 1] (stable across
 * replays of the same call). */
void memprop_id(const char *uid, const char *call_id, char out[MEMPROP_ID_LEN + 1]);

/* Whether s is a proposal id as memprop_id makes them. */
int memprop_id_ok(const char *s);

/* What status shows of a change: the heading, a newline and the start of
 * the content, at most TERN_MEMORY_MAX_PREVIEW bytes (cut on a UTF-8
 * boundary, "..." when cut). */
char *memprop_preview(const char *heading, const char *content);

#endif
