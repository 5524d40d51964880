/* tarball.c - ustar/pax writer and streaming reader. See tarball.h. */
#include "tarball.h"

#include "base/buf.h"
#include "base/mem.h"
#include "sandbox/wspath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 512
#define OCTAL_SIZE_MAX 077777777777ULL /* 11 octal digits */

/* ================================================================ writer */

struct frame {
    DIR *d;
    char *rel; /* "" for the root */
};

struct tarw {
    int rootfd;
    const char *const *skip;
    struct frame *stack;
    int depth;
    struct buf pending;
    size_t pend_off;
    int fd;             /* file being copied, or -1 */
    uint64_t remaining; /* its bytes still to send */
    uint64_t pad;       /* zero bytes after it */
    bool done;
    int error;
};

static void octal(char *field, size_t len, uint64_t v)
{
    field[len - 1] = '\0';
    for (size_t i = len - 1; i-- > 0;) {
        field[i] = (char)('0' + (v & 7));
        v >>= 3;
    }
}

static void put_str(char *field, size_t len, const char *s)
{
    size_t n = strlen(s);
    memcpy(field, s, n < len ? n : len);
}

static void finish_header(char *h)
{
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < BLOCK; i++)
        sum += (unsigned char)h[i];
    octal(h + 148, 7, sum);
    h[155] = ' ';
}

static void basic_header(char *h, const char *name, char type, uint64_t size, mode_t mode,
                         int64_t mtime, const char *link)
{
    memset(h, 0, BLOCK);
    put_str(h, 100, name);
    octal(h + 100, 8, mode & 07777);
    octal(h + 108, 8, 0);
    octal(h + 116, 8, 0);
    octal(h + 124, 12, size > OCTAL_SIZE_MAX ? 0 : size);
    octal(h + 136, 12, mtime < 0 ? 0 : (uint64_t)mtime);
    h[156] = type;
    if (link)
        put_str(h + 157, 100, link);
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    finish_header(h);
}

static size_t ndigits(size_t v)
{
    size_t d = 1;
    while (v >= 10)
        v /= 10, d++;
    return d;
}

static void pax_record(struct buf *b, const char *key, const char *val)
{
    size_t base = strlen(key) + strlen(val) + 3;
    size_t len = base + ndigits(base);
    if (ndigits(len) != ndigits(base))
        len++;
    buf_printf(b, "%zu %s=%s\n", len, key, val);
}

static void zeros(struct buf *b, size_t n)
{
    static const char z[BLOCK];
    while (n) {
        size_t k = n < BLOCK ? n : BLOCK;
        buf_append(b, z, k);
        n -= k;
    }
}

static void emit_header(struct tarw *w, const char *name, char type, uint64_t size, mode_t mode,
                        int64_t mtime, const char *link)
{
    char h[BLOCK];
    bool long_name = strlen(name) > 99, long_link = link && strlen(link) > 99;
    if (long_name || long_link || size > OCTAL_SIZE_MAX) {
        struct buf rec;
        buf_init(&rec, 3 * PATH_MAX + 256);
        if (long_name)
            pax_record(&rec, "path", name);
        if (long_link)
            pax_record(&rec, "linkpath", link);
        if (size > OCTAL_SIZE_MAX) {
            char num[24];
            snprintf(num, sizeof num, "%llu", (unsigned long long)size);
            pax_record(&rec, "size", num);
        }
        basic_header(h, "././@PaxHeader", 'x', rec.len, 0644, mtime, NULL);
        buf_append(&w->pending, h, BLOCK);
        buf_append(&w->pending, rec.data, rec.len);
        zeros(&w->pending, (BLOCK - rec.len % BLOCK) % BLOCK);
        buf_done(&rec);
    }
    basic_header(h, name, type, size, mode, mtime, link);
    buf_append(&w->pending, h, BLOCK);
}

int tarw_new(int rootfd, const char *const *skip_top, struct tarw **ret)
{
    int fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return -e;
    }
    struct tarw *w = xcalloc(1, sizeof *w);
    w->rootfd = rootfd;
    w->skip = skip_top;
    w->stack = xcalloc(TERN_SANDBOX_MAX_TREE_DEPTH + 1, sizeof *w->stack);
    w->stack[0] = (struct frame){d, xstrdup("")};
    w->depth = 1;
    w->fd = -1;
    /* pending holds at most a pax header, a header and padding */
    buf_init(&w->pending, 4 * PATH_MAX + 8 * BLOCK);
    *ret = w;
    return 0;
}

void tarw_free(struct tarw *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->depth; i++) {
        closedir(w->stack[i].d);
        free(w->stack[i].rel);
    }
    free(w->stack);
    if (w->fd >= 0)
        close(w->fd);
    buf_done(&w->pending);
    free(w);
}

static bool skipped(const struct tarw *w, const char *name)
{
    for (size_t i = 0; w->skip && w->skip[i]; i++)
        if (strcmp(w->skip[i], name) == 0)
            return true;
    return false;
}

/* Queues the next entry's header (and opens its data), or the end blocks. */
static int next_entry(struct tarw *w)
{
    while (w->depth > 0) {
        struct frame *f = &w->stack[w->depth - 1];
        errno = 0;
        struct dirent *e = readdir(f->d);
        if (!e) {
            if (errno)
                return -errno;
            closedir(f->d);
            free(f->rel);
            w->depth--;
            continue;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (w->depth == 1 && skipped(w, e->d_name))
            continue;
        int dfd = dirfd(f->d);
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT)
                continue; /* vanished meanwhile */
            return -errno;
        }
        char *rel = f->rel[0] ? xasprintf("%s/%s", f->rel, e->d_name) : xstrdup(e->d_name);
        int r = 0;
        if (strlen(rel) > TERN_SANDBOX_MAX_PATH) {
            r = -ENAMETOOLONG;
        } else if (S_ISDIR(st.st_mode)) {
            if (w->depth > TERN_SANDBOX_MAX_TREE_DEPTH) {
                r = -ENAMETOOLONG;
                goto done;
            }
            int fd = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
            if (!d) {
                r = -errno;
                if (fd >= 0)
                    close(fd);
                goto done;
            }
            char *name = xasprintf("%s/", rel);
            emit_header(w, name, '5', 0, st.st_mode, st.st_mtime, NULL);
            free(name);
            w->stack[w->depth++] = (struct frame){d, rel};
            return 0;
        } else if (S_ISREG(st.st_mode)) {
            int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0 || fstat(fd, &st) != 0) {
                r = -errno;
                if (fd >= 0)
                    close(fd);
                goto done;
            }
            emit_header(w, rel, '0', (uint64_t)st.st_size, st.st_mode, st.st_mtime, NULL);
            w->fd = fd;
            w->remaining = (uint64_t)st.st_size;
            w->pad = (BLOCK - w->remaining % BLOCK) % BLOCK;
        } else if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX + 1];
            ssize_t n = readlinkat(dfd, e->d_name, target, PATH_MAX);
            if (n < 0) {
                r = errno == ENOENT ? 0 : -errno;
                goto done;
            }
            target[n] = '\0';
            emit_header(w, rel, '2', 0, st.st_mode, st.st_mtime, target);
        } else {
            free(rel);
            continue; /* sockets, fifos, devices are not part of a workspace */
        }
    done:
        free(rel);
        return r;
    }
    zeros(&w->pending, 2 * BLOCK);
    w->done = true;
    return 0;
}

int tarw_read(struct tarw *w, char *out, size_t max, size_t *ret_n)
{
    size_t n = 0;
    if (w->error)
        return w->error;
    while (n < max) {
        if (w->pend_off < w->pending.len) {
            size_t k = w->pending.len - w->pend_off;
            if (k > max - n)
                k = max - n;
            memcpy(out + n, w->pending.data + w->pend_off, k);
            w->pend_off += k;
            n += k;
            continue;
        }
        buf_reset(&w->pending);
        w->pend_off = 0;
        if (w->fd >= 0) {
            size_t want = max - n;
            if (want > w->remaining)
                want = (size_t)w->remaining;
            ssize_t k = want ? read(w->fd, out + n, want) : 0;
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                w->error = -errno;
                return w->error;
            }
            if (k == 0 && want) { /* shrank: pad with zeros */
                memset(out + n, 0, want);
                k = (ssize_t)want;
            }
            n += (size_t)k;
            w->remaining -= (uint64_t)k;
            if (w->remaining == 0) {
                close(w->fd);
                w->fd = -1;
                zeros(&w->pending, w->pad);
            }
            continue;
        }
        if (w->done)
            break;
        int r = next_entry(w);
        if (r != 0) {
            w->error = r;
            return r;
        }
    }
    *ret_n = n;
    return 0;
}

/* ================================================================ reader */

enum rstate { R_HEADER, R_META, R_DATA, R_SKIP, R_PAD, R_END };

struct tarr {
    const struct tarr_ops *ops;
    void *ctx;
    enum rstate st;
    unsigned char block[BLOCK];
    size_t blen;
    struct buf meta;
    char meta_kind;
    uint64_t left; /* meta/data/skip bytes left */
    uint64_t pad;
    int zero_blocks;
    uint64_t entries;
    int err;
    /* overrides for the next entry */
    char *x_path, *x_link;
    bool x_size_set, x_mtime_set;
    uint64_t x_size;
    int64_t x_mtime;
};

struct tarr *tarr_new(const struct tarr_ops *ops, void *ctx)
{
    struct tarr *r = xcalloc(1, sizeof *r);
    r->ops = ops;
    r->ctx = ctx;
    buf_init(&r->meta, TERN_SANDBOX_MAX_PAX);
    return r;
}

static void clear_overrides(struct tarr *r)
{
    free(r->x_path);
    free(r->x_link);
    r->x_path = r->x_link = NULL;
    r->x_size_set = r->x_mtime_set = false;
}

void tarr_free(struct tarr *r)
{
    if (!r)
        return;
    clear_overrides(r);
    buf_done(&r->meta);
    free(r);
}

uint64_t tarr_entries(const struct tarr *r)
{
    return r->entries;
}

/* Octal field (NUL/space terminated, leading spaces allowed), or base-256. */
static int parse_num(const unsigned char *f, size_t len, uint64_t *ret)
{
    uint64_t v = 0;
    if (f[0] & 0x80) { /* base-256, positive only */
        if (f[0] != 0x80)
            return TERN_EPARSE;
        for (size_t i = 1; i < len; i++) {
            if (v >> 56)
                return TERN_EPARSE;
            v = (v << 8) | f[i];
        }
        *ret = v;
        return 0;
    }
    size_t i = 0;
    while (i < len && f[i] == ' ')
        i++;
    for (; i < len && f[i] != '\0' && f[i] != ' '; i++) {
        if (f[i] < '0' || f[i] > '7' || (v >> 61))
            return TERN_EPARSE;
        v = (v << 3) | (uint64_t)(f[i] - '0');
    }
    for (; i < len; i++)
        if (f[i] != '\0' && f[i] != ' ')
            return TERN_EPARSE;
    *ret = v;
    return 0;
}

static char *field_str(const unsigned char *f, size_t len)
{
    return xstrndup((const char *)f, strnlen((const char *)f, len));
}

static int parse_dec(const char *s, size_t n, bool allow_frac, uint64_t *ret)
{
    uint64_t v = 0;
    size_t i = 0;
    if (n == 0)
        return TERN_EPARSE;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10)
            return TERN_EPARSE;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == 0)
        return TERN_EPARSE;
    if (i < n) {
        if (!allow_frac || s[i] != '.')
            return TERN_EPARSE;
        for (i++; i < n; i++)
            if (s[i] < '0' || s[i] > '9')
                return TERN_EPARSE;
    }
    *ret = v;
    return 0;
}

static int parse_pax(struct tarr *r, struct tern_err *err)
{
    const char *p = r->meta.data ? r->meta.data : "";
    size_t n = r->meta.len, off = 0;
    while (off < n) {
        size_t i = off, len = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9' && i - off < 8)
            len = len * 10 + (size_t)(p[i++] - '0');
        if (i == off || i >= n || p[i] != ' ' || len < 5 || len > n - off ||
            p[off + len - 1] != '\n')
            return err_set(err, TERN_EPARSE, "tar: malformed pax record");
        const char *kv = p + i + 1, *end = p + off + len - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq || memchr(kv, '\0', (size_t)(end - kv)))
            return err_set(err, TERN_EPARSE, "tar: malformed pax record");
        size_t kl = (size_t)(eq - kv), vl = (size_t)(end - eq - 1);
        const char *v = eq + 1;
        if (r->meta_kind == 'x') {
            if (kl == 4 && memcmp(kv, "path", 4) == 0) {
                free(r->x_path);
                r->x_path = xstrndup(v, vl);
            } else if (kl == 8 && memcmp(kv, "linkpath", 8) == 0) {
                free(r->x_link);
                r->x_link = xstrndup(v, vl);
            } else if (kl == 4 && memcmp(kv, "size", 4) == 0) {
                if (parse_dec(v, vl, false, &r->x_size) != 0)
                    return err_set(err, TERN_EPARSE, "tar: bad pax size");
                r->x_size_set = true;
            } else if (kl == 5 && memcmp(kv, "mtime", 5) == 0) {
                uint64_t t;
                if (vl && v[0] == '-') { /* before 1970: keep 0 */
                    t = 0;
                } else if (parse_dec(v, vl, true, &t) != 0 || t > INT64_MAX) {
                    return err_set(err, TERN_EPARSE, "tar: bad pax mtime");
                }
                r->x_mtime = (int64_t)t;
                r->x_mtime_set = true;
            }
        }
        off += len;
    }
    return 0;
}

static int end_meta(struct tarr *r, struct tern_err *err)
{
    int rc = 0;
    if (r->meta_kind == 'x' || r->meta_kind == 'g') {
        rc = parse_pax(r, err);
    } else { /* GNU 'L' / 'K': the name, NUL-terminated */
        size_t n = strnlen(r->meta.data ? r->meta.data : "", r->meta.len);
        char *s = xstrndup(r->meta.data ? r->meta.data : "", n);
        if (r->meta_kind == 'L') {
            free(r->x_path);
            r->x_path = s;
        } else {
            free(r->x_link);
            r->x_link = s;
        }
    }
    buf_reset(&r->meta);
    return rc;
}

static int header(struct tarr *r, struct tern_err *err)
{
    const unsigned char *h = r->block;
    bool zero = true;
    for (int i = 0; i < BLOCK && zero; i++)
        zero = h[i] == 0;
    if (zero) {
        if (++r->zero_blocks >= 2)
            r->st = R_END;
        return 0;
    }
    if (r->zero_blocks)
        return err_set(err, TERN_EPARSE, "tar: data after an end block");
    uint64_t sum = 0, stored;
    for (int i = 0; i < BLOCK; i++)
        sum += (i >= 148 && i < 156) ? ' ' : h[i];
    if (parse_num(h + 148, 8, &stored) != 0 || stored != sum)
        return err_set(err, TERN_EPARSE, "tar: bad header checksum (entry %llu)",
                       (unsigned long long)r->entries);
    if (memcmp(h + 257, "ustar", 5) != 0)
        return err_set(err, TERN_EPARSE, "tar: not a ustar header");
    char type = (char)h[156];
    uint64_t size, mode, mtime;
    if (parse_num(h + 124, 12, &size) != 0 || parse_num(h + 100, 8, &mode) != 0 ||
        parse_num(h + 136, 12, &mtime) != 0)
        return err_set(err, TERN_EPARSE, "tar: bad numeric field");
    if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
        if (size > TERN_SANDBOX_MAX_PAX)
            return err_set(err, TERN_ETOOLARGE, "tar: extended header over %u bytes",
                           TERN_SANDBOX_MAX_PAX);
        r->meta_kind = type;
        r->left = size;
        r->pad = (BLOCK - size % BLOCK) % BLOCK;
        buf_reset(&r->meta);
        if (size == 0) {
            int rc = end_meta(r, err);
            r->st = r->pad ? R_PAD : R_HEADER;
            return rc;
        }
        r->st = R_META;
        return 0;
    }
    if (r->x_size_set)
        size = r->x_size;
    if (r->x_mtime_set)
        mtime = (uint64_t)r->x_mtime;
    enum tar_type t;
    switch (type) {
    case '0':
    case '\0':
    case '7':
        t = TAR_FILE;
        break;
    case '5':
        t = TAR_DIR;
        break;
    case '2':
        t = TAR_SYMLINK;
        break;
    case '1':
        t = TAR_HARDLINK;
        break;
    default:
        return err_set(err, TERN_EPARSE, "tar: unsupported entry type '%c'", type);
    }
    if (++r->entries > TERN_SANDBOX_MAX_TAR_ENTRIES)
        return err_set(err, TERN_ETOOLARGE, "tar: more than %d entries",
                       TERN_SANDBOX_MAX_TAR_ENTRIES);
    char *name;
    if (r->x_path) {
        name = xstrdup(r->x_path);
    } else if (memcmp(h + 257, "ustar\0", 6) == 0 && h[345]) {
        char *pre = field_str(h + 345, 155), *nm = field_str(h, 100);
        name = xasprintf("%s/%s", pre, nm);
        free(pre);
        free(nm);
    } else {
        name = field_str(h, 100);
    }
    char *link = r->x_link ? xstrdup(r->x_link) : field_str(h + 157, 100);
    char norm[WSPATH_BUF], lnorm[WSPATH_BUF];
    int rc = strlen(name) > TERN_SANDBOX_MAX_PATH ? -ENAMETOOLONG : wspath_normalize(name, norm);
    if (rc != 0) {
        err_set(err, rc, "tar: entry \"%.200s\": %s", name,
                rc == -EXDEV ? "escapes the workspace" : err_str(rc));
        goto out;
    }
    lnorm[0] = '\0';
    if (t == TAR_HARDLINK) {
        rc = strlen(link) > TERN_SANDBOX_MAX_PATH ? -ENAMETOOLONG : wspath_normalize(link, lnorm);
        if (rc == 0 && !lnorm[0])
            rc = -EXDEV;
        if (rc != 0) {
            err_set(err, rc, "tar: hardlink \"%.200s\" -> \"%.200s\": %s", name, link,
                    rc == -EXDEV ? "target escapes the workspace" : err_str(rc));
            goto out;
        }
    } else if (t == TAR_SYMLINK) {
        if (!link[0] || strlen(link) > TERN_SANDBOX_MAX_PATH) {
            rc = err_set(err, TERN_EPARSE, "tar: symlink \"%.200s\": bad target", name);
            goto out;
        }
        memcpy(lnorm, link, strlen(link) + 1);
    }
    struct tar_entry e = {t, norm, lnorm, t == TAR_FILE ? size : 0, (mode_t)(mode & 07777),
                          (int64_t)(mtime > INT64_MAX ? 0 : mtime)};
    rc = r->ops->entry(r->ctx, &e);
    if (rc != 0) {
        if (err && !err->msg[0])
            err_set(err, rc, "tar: entry \"%.200s\": %s", norm, err_str(rc));
        goto out;
    }
    r->left = size;
    r->pad = (BLOCK - size % BLOCK) % BLOCK;
    if (t == TAR_FILE && size) {
        r->st = R_DATA;
    } else {
        rc = r->ops->entry_end(r->ctx);
        r->st = size ? R_SKIP : (r->pad ? R_PAD : R_HEADER);
    }
out:
    clear_overrides(r);
    free(name);
    free(link);
    return rc;
}

int tarr_feed(struct tarr *r, const void *data, size_t n, struct tern_err *err)
{
    const unsigned char *p = data;
    while (n && !r->err) {
        size_t k;
        switch (r->st) {
        case R_HEADER:
            k = BLOCK - r->blen < n ? BLOCK - r->blen : n;
            memcpy(r->block + r->blen, p, k);
            r->blen += k;
            if (r->blen == BLOCK) {
                r->blen = 0;
                r->err = header(r, err);
            }
            break;
        case R_META:
        case R_DATA:
        case R_SKIP:
            k = r->left < n ? (size_t)r->left : n;
            if (r->st == R_META)
                r->err = buf_append(&r->meta, p, k);
            else if (r->st == R_DATA)
                r->err = r->ops->data(r->ctx, p, k);
            r->left -= k;
            if (!r->err && r->left == 0) {
                if (r->st == R_META)
                    r->err = end_meta(r, err);
                else if (r->st == R_DATA)
                    r->err = r->ops->entry_end(r->ctx);
                r->st = r->pad ? R_PAD : R_HEADER;
            }
            break;
        case R_PAD:
            k = r->pad < n ? (size_t)r->pad : n;
            r->pad -= k;
            if (r->pad == 0)
                r->st = R_HEADER;
            break;
        case R_END:
        default:
            k = n; /* trailing record padding */
            break;
        }
        p += k;
        n -= k;
    }
    if (r->err && err && !err->msg[0])
        err_set(err, r->err, "tar: %s", err_str(r->err));
    return r->err;
}

int tarr_finish(struct tarr *r, struct tern_err *err)
{
    if (r->err)
        return r->err;
    if (r->st == R_END || (r->st == R_HEADER && r->blen == 0 && r->zero_blocks == 1))
        return 0;
    r->err = err_set(err, TERN_EPARSE, "tar: truncated archive");
    return r->err;
}
