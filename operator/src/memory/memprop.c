/* memprop.c - memory proposals, the pure parts. See memprop.h. */
#include "memory/memprop.h"

#include "base/buf.h"
#include "base/limits.h"
#include "base/mem.h"
#include "json/json.h"

#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void memprop_args_done(struct memprop_args *a)
{
    if (!a)
        return;
    free(a->reason);
    free(a->heading);
    free(a->content);
    memset(a, 0, sizeof *a);
}

/* No control characters but newline (when lines) and tab. */
static bool text_ok(const char *s, bool lines)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p < 0x20 && *p != '\t' && !(lines && *p == '\n')) || *p == 0x7f)
            return false;
    return true;
}

int memprop_heading_level(const char *line, size_t len)
{
    size_t i = 0;
    while (i < len && i < 3 && line[i] == ' ')
        i++;
    size_t h = 0;
    while (i + h < len && line[i + h] == '#')
        h++;
    if (h < 1 || h > 6)
        return 0;
    if (i + h < len && line[i + h] != ' ' && line[i + h] != '\t')
        return 0;
    return (int)h;
}

/* A line opening or closing a code fence: up to 3 spaces, then ``` or ~~~. */
static char fence_of(const char *line, size_t len)
{
    size_t i = 0;
    while (i < len && i < 3 && line[i] == ' ')
        i++;
    if (i + 3 <= len && (line[i] == '`' || line[i] == '~') && line[i + 1] == line[i] &&
        line[i + 2] == line[i])
        return line[i];
    return 0;
}

static size_t rtrim_len(const char *s, size_t n)
{
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    return n;
}

/* The lowest heading level in text outside fences (7 when none); a code
 * fence left open at its end is -1. */
static int min_heading(const char *text)
{
    int lowest = 7;
    char fence = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char f = fence_of(p, n);
        if (fence) {
            if (f == fence)
                fence = 0;
        } else if (f) {
            fence = f;
        } else {
            int l = memprop_heading_level(p, n);
            if (l && l < lowest)
                lowest = l;
        }
        p += n + (nl ? 1 : 0);
    }
    return fence ? -1 : lowest;
}

int memprop_parse_args(const char *json, size_t len, struct memprop_args *ret,
                       struct tern_err *err)
{
    cJSON *root = NULL;
    struct memprop_args a = {0};
    const cJSON *rs = NULL;
    const char *reason = NULL, *heading = NULL, *content = NULL;
    int rc;
    if (!json)
        return err_set(err, TERN_EINVALID, "arguments: Required value");
    if ((rc = json_parse(json, len, &root, err))) {
        err_wrap(err, TERN_EINVALID, "arguments are not valid JSON");
        if (err)
            err->code = TERN_EINVALID;
        rc = TERN_EINVALID;
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        rc = err_set(err, TERN_EINVALID, "arguments: must be a JSON object");
        goto out;
    }
    for (const cJSON *m = root->child; m; m = m->next)
        if (strcmp(m->string, "reason") != 0 && strcmp(m->string, "replace_section") != 0) {
            rc = err_set(err, TERN_EINVALID,
                         "unknown member \"%.100s\" (allowed: reason, replace_section)",
                         m->string);
            goto out;
        }
    if ((rc = json_get_string(root, "", "reason", JSON_REQUIRED, &reason, err)) ||
        (rc = json_get_object(root, "", "replace_section", JSON_REQUIRED, &rs, err)))
        goto out;
    for (const cJSON *m = rs->child; m; m = m->next)
        if (strcmp(m->string, "heading") != 0 && strcmp(m->string, "content") != 0) {
            rc = err_set(err, TERN_EINVALID,
                         "replace_section: unknown member \"%.100s\" (allowed: heading, content)",
                         m->string);
            goto out;
        }
    if ((rc = json_get_string(rs, "replace_section", "heading", JSON_REQUIRED, &heading, err)) ||
        (rc = json_get_string(rs, "replace_section", "content", JSON_REQUIRED, &content, err)))
        goto out;
    size_t rl = strlen(reason), hl = strlen(heading), cl = strlen(content);
    if (rl == 0 || rl > TERN_MEMORY_MAX_REASON || !text_ok(reason, true)) {
        rc = err_set(err, TERN_EINVALID,
                     "reason: must be 1..%u bytes of text (no control characters)",
                     TERN_MEMORY_MAX_REASON);
        goto out;
    }
    hl = rtrim_len(heading, hl);
    int level = memprop_heading_level(heading, hl);
    bool has_text = false;
    for (size_t i = (size_t)level; level && i < hl; i++)
        has_text = has_text || (heading[i] != ' ' && heading[i] != '\t' && heading[i] != '#');
    if (hl == 0 || hl > TERN_MEMORY_MAX_HEADING || !text_ok(heading, false) || !level ||
        heading[0] == ' ' || !has_text) {
        rc = err_set(err, TERN_EINVALID,
                     "replace_section.heading: must be one markdown heading line such as "
                     "\"## Build\" (1 to 6 '#', a space, a title; at most %u bytes)",
                     TERN_MEMORY_MAX_HEADING);
        goto out;
    }
    if (cl > TERN_MEMORY_MAX_SECTION || !text_ok(content, true)) {
        rc = err_set(err, TERN_EINVALID,
                     "replace_section.content: must be at most %u bytes of text (no control "
                     "characters but newline and tab)",
                     TERN_MEMORY_MAX_SECTION);
        goto out;
    }
    int lowest = min_heading(content);
    if (lowest < 0) {
        rc = err_set(err, TERN_EINVALID,
                     "replace_section.content: a code fence (``` or ~~~) is left open");
        goto out;
    }
    if (lowest <= level) {
        rc = err_set(err, TERN_EINVALID,
                     "replace_section.content: holds a heading of level %d or above; a "
                     "proposal changes one section (use deeper headings inside it)",
                     level);
        goto out;
    }
    a.reason = xstrdup(reason);
    a.heading = xstrndup(heading, hl);
    a.content = xstrdup(content);
    *ret = a;
    a = (struct memprop_args){0};
out:
    memprop_args_done(&a);
    cJSON_Delete(root);
    return rc;
}

/* Appends heading, newline, content (ending in a newline). */
static void put_section(struct buf *b, const char *heading, const char *content)
{
    buf_puts(b, heading);
    buf_putc(b, '\n');
    buf_puts(b, content);
    size_t n = strlen(content);
    if (n && content[n - 1] != '\n')
        buf_putc(b, '\n');
}

int memprop_replace_section(const char *doc, size_t len, const char *heading,
                            const char *content, char **ret, struct tern_err *err)
{
    if (len > TERN_MEMORY_MAX_FILE)
        return err_set(err, TERN_EINVALID, "simple.md is %zu bytes, over the %u a proposal may "
                       "change", len, TERN_MEMORY_MAX_FILE);
    if (memchr(doc, 0, len))
        return err_set(err, TERN_EINVALID, "simple.md holds a NUL byte: not a text file");
    size_t hl = rtrim_len(heading, strlen(heading));
    int level = memprop_heading_level(heading, hl);
    if (!level)
        return err_set(err, TERN_EINVALID, "heading: not a markdown heading line");
    /* find the section: start/end byte offsets */
    size_t start = 0, end = len;
    int found = 0;
    bool in_section = false;
    char fence = 0;
    for (size_t off = 0; off < len;) {
        const char *p = doc + off;
        const char *nl = memchr(p, '\n', len - off);
        size_t n = nl ? (size_t)(nl - p) : len - off;
        char f = fence_of(p, n);
        if (fence) {
            if (f == fence)
                fence = 0;
        } else if (f) {
            fence = f;
        } else {
            int l = memprop_heading_level(p, n);
            if (l && in_section && l <= level) {
                end = off;
                in_section = false;
            }
            size_t tl = rtrim_len(p, n);
            if (l && tl == hl && memcmp(p, heading, hl) == 0) {
                found++;
                start = off;
                end = len;
                in_section = true;
            }
        }
        off += n + (nl ? 1 : 0);
    }
    if (found > 1)
        return err_set(err, TERN_EINVALID, "the heading \"%.200s\" appears %d times in "
                       "simple.md: a proposal must name a unique section", heading, found);
    if (!found && !*content)
        return err_set(err, TERN_EINVALID, "simple.md has no section \"%.200s\" to remove",
                       heading);
    if (!found && fence)
        return err_set(err, TERN_EINVALID, "simple.md ends inside an open code fence: a new "
                       "section cannot be added after it");
    struct buf b;
    buf_init(&b, 2 * TERN_MEMORY_MAX_FILE); /* never reached: doc and one section */
    if (found) {
        buf_append(&b, doc, start);
        if (*content) {
            put_section(&b, heading, content);
            /* a blank line before the section that follows */
            if (end < len && !(b.len >= 2 && b.data[b.len - 1] == '\n' && b.data[b.len - 2] == '\n'))
                buf_putc(&b, '\n');
        }
        buf_append(&b, doc + end, len - end);
    } else {
        buf_append(&b, doc, len);
        if (len && doc[len - 1] != '\n')
            buf_putc(&b, '\n');
        if (len && !(len >= 2 && doc[len - 2] == '\n' && doc[len - 1] == '\n'))
            buf_putc(&b, '\n');
        put_section(&b, heading, content);
    }
    int rc = 0;
    if (b.len > TERN_MEMORY_MAX_FILE)
        rc = err_set(err, TERN_EINVALID, "the change makes simple.md larger than %u bytes",
                     TERN_MEMORY_MAX_FILE);
    else if (b.len == len && memcmp(buf_str(&b), doc, len) == 0)
        rc = err_set(err, TERN_EINVALID, "the change leaves simple.md as it is");
    if (rc) {
        buf_done(&b);
        return rc;
    }
    *ret = buf_steal(&b);
    return 0;
}

void memprop_sha256_hex(const void *p, size_t n, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdn = 0;
    static const char hx[] = "0123456789abcdef";
    EVP_Digest(p, n, md, &mdn, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hx[md[i] >> 4];
        out[2 * i + 1] = hx[md[i] & 15];
    }
    out[64] = 0;
}

void memprop_id(const char *uid, const char *call_id, char out[MEMPROP_ID_LEN + 1])
{
    char *in = xasprintf("%s/%s", uid ? uid : "", call_id ? call_id : "");
    char hex[65];
    memprop_sha256_hex(in, strlen(in), hex);
    free(in);
    memcpy(out, "mp-", 3);
    memcpy(out + 3, hex, 12);
    out[MEMPROP_ID_LEN] = 0;
}

int memprop_id_ok(const char *s)
{
    if (!s || strlen(s) != MEMPROP_ID_LEN || strncmp(s, "mp-", 3) != 0)
        return 0;
    for (size_t i = 3; i < MEMPROP_ID_LEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

char *memprop_preview(const char *heading, const char *content)
{
    char *all = xasprintf("%s\n%s", heading ? heading : "", content ? content : "");
    size_t n = strlen(all);
    if (n <= TERN_MEMORY_MAX_PREVIEW)
        return all;
    size_t keep = TERN_MEMORY_MAX_PREVIEW - 3;
    while (keep > 0 && ((unsigned char)all[keep] & 0xc0) == 0x80)
        keep--;
    memcpy(all + keep, "...", 4);
    return all;
}
