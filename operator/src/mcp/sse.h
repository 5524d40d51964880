/* sse.h - a bounded, incremental parser of Server-Sent Events (pure).
 *
 * The event stream format of the HTML standard ("text/event-stream"), as
 * MCP servers use it to answer a POST: bytes are fed in chunks of any size
 * (a line or a CRLF may be split between two chunks); lines end with CRLF,
 * LF or CR; a leading UTF-8 BOM is dropped; `:` starts a comment; a field
 * is `name: value` (one space after the colon removed) or a bare name;
 * `data` lines are joined with LF; `event` sets the type (default
 * "message"), `id` the last event id (ignored when it holds a NUL), `retry`
 * is ignored; a blank line dispatches the event if it has data. An event
 * not terminated by a blank line when the stream ends is discarded, as the
 * standard says.
 *
 * Every size is bounded: one line (max_line), one event's data (max_data),
 * the events of a stream (max_events); exceeding one is TERN_ETOOLARGE and
 * the parser stops (later feeds return the same error).
 */
#ifndef TERN_MCP_SSE_H
#define TERN_MCP_SSE_H

#include "base/buf.h"
#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>

struct sse_event {
    const char *type; /* "message" unless an event field said otherwise */
    const char *data; /* the joined data lines (NUL-terminated, no final LF) */
    size_t data_len;
    const char *id; /* the last event id seen so far ("" if none) */
};

/* Called for each dispatched event (strings valid during the call). A
 * non-zero return stops the parser and is returned by sse_feed. */
typedef int (*sse_event_fn)(void *ctx, const struct sse_event *ev);

struct sse_parser {
    struct buf line; /* the current line */
    struct buf data; /* the current event's data */
    struct buf type; /* the current event's type */
    struct buf id;   /* the last event id */
    size_t max_events;
    size_t events;   /* dispatched so far */
    bool started;    /* past the optional BOM */
    bool skip_lf;    /* the previous byte was a CR ending a line */
    int failed;      /* sticky error, 0 while parsing */
    size_t bom_seen; /* BOM bytes matched at the very start */
};

/* max_line, max_data: bytes; max_events: events dispatched. */
void sse_init(struct sse_parser *p, size_t max_line, size_t max_data, size_t max_events);
void sse_done(struct sse_parser *p);

/* Feeds n bytes. Returns 0, TERN_ETOOLARGE (a bound was exceeded), or the
 * non-zero value fn returned (the parser stops either way). */
int sse_feed(struct sse_parser *p, const char *bytes, size_t n, sse_event_fn fn, void *ctx);

#endif
