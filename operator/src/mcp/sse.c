/* sse.c - incremental Server-Sent Events parser (pure). See sse.h. */
#include "mcp/sse.h"

#include <string.h>

void sse_init(struct sse_parser *p, size_t max_line, size_t max_data, size_t max_events)
{
    memset(p, 0, sizeof *p);
    buf_init(&p->line, max_line);
    buf_init(&p->data, max_data);
    buf_init(&p->type, 256);
    buf_init(&p->id, 1024);
    p->max_events = max_events;
}

void sse_done(struct sse_parser *p)
{
    if (!p)
        return;
    buf_done(&p->line);
    buf_done(&p->data);
    buf_done(&p->type);
    buf_done(&p->id);
    memset(p, 0, sizeof *p);
}

static int dispatch(struct sse_parser *p, sse_event_fn fn, void *ctx)
{
    if (p->data.len == 0) {
        /* no data: nothing is dispatched, the type is reset */
        buf_reset(&p->type);
        return 0;
    }
    if (p->events >= p->max_events)
        return TERN_ETOOLARGE;
    p->events++;
    /* the data buffer ends with the LF of its last line */
    size_t len = p->data.len - 1;
    p->data.data[len] = 0;
    struct sse_event ev = {
        .type = p->type.len ? buf_str(&p->type) : "message",
        .data = p->data.data,
        .data_len = len,
        .id = buf_str(&p->id),
    };
    int r = fn ? fn(ctx, &ev) : 0;
    buf_reset(&p->data);
    buf_reset(&p->type);
    return r;
}

/* One complete line (without its end). */
static int line(struct sse_parser *p, sse_event_fn fn, void *ctx)
{
    const char *l = buf_str(&p->line);
    size_t n = p->line.len;
    if (n == 0)
        return dispatch(p, fn, ctx);
    if (l[0] == ':')
        return 0; /* a comment (keep-alive) */
    const char *colon = memchr(l, ':', n);
    size_t nl = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vl = colon ? n - nl - 1 : 0;
    if (vl && *v == ' ') {
        v++;
        vl--;
    }
    if (nl == 4 && memcmp(l, "data", 4) == 0) {
        if (buf_append(&p->data, v, vl) || buf_putc(&p->data, '\n'))
            return TERN_ETOOLARGE;
    } else if (nl == 5 && memcmp(l, "event", 5) == 0) {
        buf_reset(&p->type);
        if (buf_append(&p->type, v, vl))
            return TERN_ETOOLARGE;
    } else if (nl == 2 && memcmp(l, "id", 2) == 0) {
        if (!memchr(v, 0, vl)) {
            buf_reset(&p->id);
            if (buf_append(&p->id, v, vl))
                return TERN_ETOOLARGE;
        }
    }
    /* "retry" and unknown fields are ignored */
    return 0;
}

int sse_feed(struct sse_parser *p, const char *bytes, size_t n, sse_event_fn fn, void *ctx)
{
    static const unsigned char bom[3] = {0xef, 0xbb, 0xbf};
    if (p->failed)
        return p->failed;
    size_t i = 0;
    /* a BOM at the very start, possibly split across feeds */
    while (!p->started && i < n) {
        if ((unsigned char)bytes[i] == bom[p->bom_seen]) {
            p->bom_seen++;
            i++;
            if (p->bom_seen == 3)
                p->started = true;
            continue;
        }
        /* not a BOM after all: the bytes matched so far are text */
        p->started = true;
        if (p->bom_seen && buf_append(&p->line, bom, p->bom_seen))
            return p->failed = TERN_ETOOLARGE;
    }
    while (i < n) {
        char c = bytes[i];
        if (p->skip_lf) {
            p->skip_lf = false;
            if (c == '\n') {
                i++;
                continue;
            }
        }
        if (c == '\r' || c == '\n') {
            int r = line(p, fn, ctx);
            buf_reset(&p->line);
            if (r)
                return p->failed = r;
            p->skip_lf = c == '\r';
            i++;
            continue;
        }
        /* the rest of the line in this chunk at once */
        size_t j = i;
        while (j < n && bytes[j] != '\r' && bytes[j] != '\n')
            j++;
        if (buf_append(&p->line, bytes + i, j - i))
            return p->failed = TERN_ETOOLARGE;
        i = j;
    }
    return 0;
}
