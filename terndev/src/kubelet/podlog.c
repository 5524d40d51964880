/* podlog.c - pods/log data from the kubelet's files. See podlog.h. */
#include "podlog.h"

#include "base/mem.h"
#include "devctl/kobj.h"
#include "kubelet/kubelet.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct podlog_follow {
    char *path;
    char *container;
    int64_t restart_count;
    off_t offset;
    int64_t left; /* limit_bytes remaining, -1 none */
};

/* The offset where the last n lines of fd (size bytes) start. */
static off_t tail_offset(int fd, off_t size, int64_t n)
{
    if (n < 0)
        return 0;
    if (n == 0)
        return size;
    char buf[4096];
    off_t pos = size;
    int64_t lines = 0;
    bool first = true;
    while (pos > 0) {
        size_t chunk = pos > (off_t)sizeof buf ? sizeof buf : (size_t)pos;
        pos -= (off_t)chunk;
        ssize_t r = pread(fd, buf, chunk, pos);
        if (r != (ssize_t)chunk)
            return 0;
        for (size_t i = chunk; i-- > 0;) {
            if (buf[i] != '\n')
                continue;
            if (first && pos + (off_t)i == size - 1) { /* the final newline */
                first = false;
                continue;
            }
            first = false;
            if (++lines == n)
                return pos + (off_t)i + 1;
        }
    }
    return 0;
}

/* Appends [from, EOF) of path, at most *left bytes (-1 none) and at most
 * chunk bytes (0: no bound); returns the new offset in *ret_off and whether
 * the end of the file was reached in *ret_eof (may be NULL). A missing file
 * is empty. */
static int append_from(const char *path, off_t from, int64_t *left, size_t chunk,
                       struct buf *out, off_t *ret_off, bool *ret_eof, struct tern_err *err)
{
    if (ret_eof)
        *ret_eof = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            *ret_off = from;
            if (ret_eof)
                *ret_eof = true;
            return 0;
        }
        return err_set(err, -errno, "open %s: %s", path, strerror(errno));
    }
    char buf[65536];
    off_t pos = from;
    int rc = 0;
    size_t taken = 0;
    for (;;) {
        size_t want = sizeof buf;
        if (*left >= 0 && (int64_t)want > *left)
            want = (size_t)*left;
        if (chunk && want > chunk - taken)
            want = chunk - taken;
        if (want == 0)
            break;
        ssize_t r = pread(fd, buf, want, pos);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = err_set(err, -errno, "read %s: %s", path, strerror(errno));
            break;
        }
        if (r == 0) {
            if (ret_eof)
                *ret_eof = true;
            break;
        }
        if ((rc = buf_append(out, buf, (size_t)r)))
            break;
        pos += r;
        taken += (size_t)r;
        if (*left >= 0)
            *left -= r;
    }
    close(fd);
    *ret_off = pos;
    return rc;
}

static int start(const char *dir, const cJSON *pod, const struct podlog_opts *o, char **ret_path,
                 off_t *ret_off, struct tern_err *err)
{
    char *path;
    int rc = kubelet_log_path(dir, pod, o->container, o->previous, &path, err);
    if (rc)
        return rc;
    off_t off = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0)
            off = tail_offset(fd, st.st_size, o->tail_lines);
        close(fd);
    }
    *ret_path = path;
    *ret_off = off;
    return 0;
}

int podlog_read(const char *dir, const cJSON *pod, const struct podlog_opts *o, struct buf *out,
                struct tern_err *err)
{
    char *path;
    off_t off;
    int rc = start(dir, pod, o, &path, &off, err);
    if (rc)
        return rc;
    int64_t left = o->limit_bytes;
    rc = append_from(path, off, &left, 0, out, &off, NULL, err);
    free(path);
    return rc;
}

int podlog_follow_open(const char *dir, const cJSON *pod, const struct podlog_opts *o,
                       struct podlog_follow **ret, struct tern_err *err)
{
    char *path;
    off_t off;
    int rc = start(dir, pod, o, &path, &off, err);
    if (rc)
        return rc;
    struct podlog_follow *f = xcalloc(1, sizeof *f);
    f->path = path;
    f->offset = off;
    f->left = o->limit_bytes;
    const char *c = o->container;
    if (!c) { /* the name kubelet_log_path chose: the file's directory */
        const char *end = strrchr(path, '/');
        const char *beg = end;
        while (beg > path && beg[-1] != '/')
            beg--;
        f->container = xstrndup(beg, (size_t)(end - beg));
    } else {
        f->container = xstrdup(c);
    }
    /* the run being followed: the number in the file name */
    const char *base = strrchr(path, '/') + 1;
    f->restart_count = 0;
    for (const char *p = base; *p >= '0' && *p <= '9'; p++)
        f->restart_count = f->restart_count * 10 + (*p - '0');
    *ret = f;
    return 0;
}

int podlog_follow_next(struct podlog_follow *f, const cJSON *pod_now, struct buf *out,
                       bool *ret_done, struct tern_err *err)
{
    return podlog_follow_chunk(f, pod_now, 0, out, ret_done, err);
}

int podlog_follow_chunk(struct podlog_follow *f, const cJSON *pod_now, size_t chunk,
                        struct buf *out, bool *ret_done, struct tern_err *err)
{
    bool running = pod_now && kubelet_log_running(pod_now, f->container, f->restart_count);
    bool eof = false;
    int rc = append_from(f->path, f->offset, &f->left, chunk, out, &f->offset, &eof, err);
    if (rc)
        return rc;
    /* read once more after it stopped so nothing written last is lost */
    *ret_done = (!running && eof) || f->left == 0;
    return 0;
}

void podlog_follow_free(struct podlog_follow *f)
{
    if (!f)
        return;
    free(f->path);
    free(f->container);
    free(f);
}

/* Reads up to max bytes of path from offset (-1: the last max bytes). */
static size_t read_part(const char *path, off_t from_end, size_t max, char *out)
{
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return 0;
    off_t start = 0;
    if (from_end) {
        struct stat st;
        if (fstat(fd, &st) == 0 && st.st_size > (off_t)max)
            start = st.st_size - (off_t)max;
    }
    size_t n = 0;
    while (n < max) {
        ssize_t r = pread(fd, out + n, max - n, start + (off_t)n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    return n;
}

size_t podlog_termination_message(const char *term_file, const char *log_file,
                                  bool fallback_to_logs, int exit_code, char *out, size_t outsz)
{
    enum { MAX_MSG = 4096, MAX_LOG_BYTES = 2048, MAX_LOG_LINES = 80 };
    if (outsz == 0)
        return 0;
    size_t cap = outsz - 1 < MAX_MSG ? outsz - 1 : MAX_MSG;
    size_t n = read_part(term_file, 0, cap, out);
    if (n == 0 && fallback_to_logs && exit_code != 0) {
        size_t lcap = cap < MAX_LOG_BYTES ? cap : MAX_LOG_BYTES;
        n = read_part(log_file, 1, lcap, out);
        /* the last 80 lines of that */
        int lines = 0;
        for (size_t i = n; i > 0; i--) {
            if (out[i - 1] == '\n' && i != n && ++lines >= MAX_LOG_LINES) {
                memmove(out, out + i, n - i);
                n -= i;
                break;
            }
        }
    }
    /* no half character at the end (nor at the start of a log tail) */
    size_t end = n;
    if (end > 0 && ((unsigned char)out[end - 1] & 0x80)) {
        size_t k = end;
        while (k > 0 && ((unsigned char)out[k - 1] & 0xC0) == 0x80)
            k--;
        if (k > 0) {
            unsigned char lead = (unsigned char)out[k - 1];
            size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
            if (end - (k - 1) < need)
                end = k - 1;
        }
    }
    size_t start = 0;
    while (start < end && ((unsigned char)out[start] & 0xC0) == 0x80)
        start++;
    memmove(out, out + start, end - start);
    n = end - start;
    out[n] = 0;
    return n;
}
