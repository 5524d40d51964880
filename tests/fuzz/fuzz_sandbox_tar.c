/* libFuzzer target: the streaming tar reader used by POST /v1/restore.
 * Every entry it reports must have a normalised path that stays beneath the
 * workspace, and the data it delivers must match the announced size. The
 * first byte picks the feed chunk size, so header splits are exercised. */
#include "sandbox/tarball.h"
#include "sandbox/wspath.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct st {
    uint64_t want, got;
    bool open;
};

static void check_path(const char *p)
{
    char norm[WSPATH_BUF];
    if (p[0] == '/' || wspath_normalize(p, norm) != 0 || strcmp(norm, p) != 0)
        abort();
}

static int on_entry(void *ctx, const struct tar_entry *e)
{
    struct st *s = ctx;
    if (s->open)
        abort();
    check_path(e->path);
    if (e->type == TAR_HARDLINK)
        check_path(e->link);
    if (e->type != TAR_FILE && e->size)
        abort();
    s->want = e->size;
    s->got = 0;
    s->open = true;
    return 0;
}

static int on_data(void *ctx, const void *p, size_t n)
{
    struct st *s = ctx;
    (void)p;
    s->got += n;
    if (!s->open || s->got > s->want)
        abort();
    return 0;
}

static int on_end(void *ctx)
{
    struct st *s = ctx;
    if (!s->open || s->got != s->want)
        abort();
    s->open = false;
    return 0;
}

static const struct tarr_ops ops = {on_entry, on_data, on_end};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t step = (size_t)data[0] * 7 + 1;
    data++;
    size--;
    struct st s = {0};
    struct tarr *r = tarr_new(&ops, &s);
    int rc = 0;
    for (size_t off = 0; off < size && rc == 0; off += step) {
        size_t k = size - off < step ? size - off : step;
        rc = tarr_feed(r, data + off, k, NULL);
    }
    if (rc == 0 && tarr_finish(r, NULL) == 0 && s.open)
        abort();
    tarr_free(r);
    return 0;
}
