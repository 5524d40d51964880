/* idem.c - the idempotency record store. See idem.h. */
#include "idem.h"

#include "base/buf.h"
#include "base/mem.h"
#include "json/json.h"
#include "sandbox/sandbox_contract.h"
#include "sandbox/wspath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void idem_sha256_hex(const void *p, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL);
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hx[md[i] >> 4];
        out[2 * i + 1] = hx[md[i] & 15];
    }
    out[64] = '\0';
}

int idem_key_valid(const char *key)
{
    size_t n = strnlen(key, TERN_SANDBOX_MAX_KEY + 1);
    if (n == 0 || n > TERN_SANDBOX_MAX_KEY)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)key[i] < 0x21 || (unsigned char)key[i] > 0x7e)
            return -EINVAL;
    return 0;
}

void idem_now_rfc3339(char out[32])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ts.tv_nsec / 1000000) % 1000);
}

static int open_subdir(int parent, const char *name, int *ret)
{
    if (mkdirat(parent, name, 0700) != 0 && errno != EEXIST)
        return -errno;
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    /* make sure an existing directory is not open to others */
    struct stat st;
    if (fstat(fd, &st) != 0 || (st.st_uid == geteuid() && (st.st_mode & 077) && fchmod(fd, 0700) != 0)) {
        int e = errno;
        close(fd);
        return -e;
    }
    *ret = fd;
    return 0;
}

static int empty_dir(int dfd)
{
    int fd = dup(dfd);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    struct dirent *e;
    int r = 0;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        /* staging trees are removed as trees */
        if (unlinkat(dfd, e->d_name, 0) != 0 && (errno == EISDIR || errno == EPERM)) {
            r = wspath_remove_tree(dfd, e->d_name);
        }
    }
    closedir(d);
    return r;
}

void idem_close(struct idem_store *s)
{
    if (s->dirfd >= 0)
        close(s->dirfd);
    if (s->tmpfd >= 0)
        close(s->tmpfd);
    if (s->statefd >= 0)
        close(s->statefd);
    s->dirfd = s->tmpfd = s->statefd = -1;
}

int idem_open(int wsfd, struct idem_store *ret, struct tern_err *err)
{
    struct idem_store s = {-1, -1, -1};
    int r = open_subdir(wsfd, SANDBOX_STATE_DIR, &s.statefd);
    if (r == 0)
        r = open_subdir(s.statefd, "idem", &s.dirfd);
    if (r == 0)
        r = open_subdir(s.statefd, "tmp", &s.tmpfd);
    if (r == 0)
        r = empty_dir(s.tmpfd);
    if (r != 0) {
        idem_close(&s);
        return err_set(err, r, "state directory %s: %s", SANDBOX_STATE_DIR, err_str(r));
    }
    *ret = s;
    return 0;
}

/* Reads a record file (bounded) and parses it. */
static int read_record(int dfd, const char *name, cJSON **ret)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int r = 0;
    char *data = NULL;
    if (fstat(fd, &st) != 0) {
        r = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > (off_t)TERN_JSON_MAX_BYTES) {
        r = TERN_EPARSE;
        goto out;
    }
    size_t n = (size_t)st.st_size, got = 0;
    data = xmalloc(n + 1);
    while (got < n) {
        ssize_t k = read(fd, data + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            r = k < 0 ? -errno : TERN_EPARSE;
            goto out;
        }
        got += (size_t)k;
    }
    cJSON *j = NULL;
    if (json_parse(data, n, &j, NULL) != 0 || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        r = TERN_EPARSE;
        goto out;
    }
    *ret = j;
out:
    free(data);
    close(fd);
    return r;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Writes j as a fsynced draft in tmp/; sets ret_name[80]. */
static int write_draft(struct idem_store *s, const char *hash, const cJSON *j, char ret_name[80])
{
    static atomic_uint seq;
    char name[80];
    snprintf(name, sizeof name, "%.16s.%d.%u.draft", hash, (int)getpid(),
             atomic_fetch_add(&seq, 1));
    int fd = openat(s->tmpfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    char *text = json_print(j);
    int r = write_all(fd, text, strlen(text));
    if (r == 0 && fsync(fd) != 0)
        r = -errno;
    free(text);
    close(fd);
    if (r != 0)
        unlinkat(s->tmpfd, name, 0);
    else
        memcpy(ret_name, name, sizeof name);
    return r;
}

static cJSON *new_record(const char *key, const char *op, const char *req, const char *status,
                         const char *started_at)
{
    cJSON *j = cJSON_CreateObject();
    json_add_int64(j, "v", 1);
    json_add_string(j, "key", key);
    json_add_string(j, "op", op);
    json_add_string(j, "req", req);
    json_add_string(j, "status", status);
    json_add_string(j, "startedAt", started_at);
    json_add_int64(j, "runs", 1);
    return j;
}

static const char *str_of(const cJSON *j, const char *k)
{
    const cJSON *it = json_get(j, k);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

int idem_begin(struct idem_store *s, const char *key, const char *op, const char *req,
               struct idem_ticket *ret_ticket, cJSON **ret_response, int *ret_http,
               struct tern_err *err)
{
    struct idem_ticket t;
    idem_sha256_hex(key, strlen(key), t.hash);
    idem_now_rfc3339(t.started_at);
    char final[80], draft[80];
    snprintf(final, sizeof final, "%s.json", t.hash);
    cJSON *rec = new_record(key, op, req, "started", t.started_at);
    int r = write_draft(s, t.hash, rec, draft);
    cJSON_Delete(rec);
    rec = NULL;
    if (r != 0)
        return err_set(err, r, "idempotency record: %s", err_str(r));
    r = linkat(s->tmpfd, draft, s->dirfd, final, 0) == 0 ? 0 : -errno;
    unlinkat(s->tmpfd, draft, 0);
    if (r == 0) {
        if (fsync(s->dirfd) != 0) {
            r = -errno;
            return err_set(err, r, "idempotency record: fsync: %s", err_str(r));
        }
        *ret_ticket = t;
        return 0;
    }
    if (r != -EEXIST)
        return err_set(err, r, "idempotency record: %s", err_str(r));
    r = read_record(s->dirfd, final, &rec);
    if (r != 0)
        return err_set(err, r, "idempotency record for this key is unreadable: %s", err_str(r));
    const char *rkey = str_of(rec, "key"), *rop = str_of(rec, "op"), *rreq = str_of(rec, "req");
    const char *st = str_of(rec, "status");
    const cJSON *resp = json_get(rec, "response");
    if (!rkey || strcmp(rkey, key) != 0 || !rop || strcmp(rop, op) != 0 || !rreq ||
        strcmp(rreq, req) != 0) {
        r = err_set(err, -EEXIST, "Idempotency-Key was used for a different request");
    } else if (st && strcmp(st, "started") == 0) {
        r = err_set(err, -EBUSY, "the request with this Idempotency-Key is still running");
    } else if (!cJSON_IsObject(resp)) {
        r = err_set(err, TERN_EPARSE, "idempotency record has no response");
    } else {
        int64_t http = 200;
        json_item_int64(json_get(rec, "httpStatus"), &http);
        *ret_response = json_dup(resp);
        *ret_http = (int)http;
        r = 1;
    }
    cJSON_Delete(rec);
    return r;
}

static int replace_record(struct idem_store *s, const char *hash, const cJSON *rec)
{
    char final[80], draft[80];
    snprintf(final, sizeof final, "%s.json", hash);
    int r = write_draft(s, hash, rec, draft);
    if (r != 0)
        return r;
    if (renameat(s->tmpfd, draft, s->dirfd, final) != 0) {
        r = -errno;
        unlinkat(s->tmpfd, draft, 0);
        return r;
    }
    return fsync(s->dirfd) == 0 ? 0 : -errno;
}

int idem_finish(struct idem_store *s, const struct idem_ticket *t, const char *key,
                const char *op, const char *req, int http_status, const cJSON *response,
                struct tern_err *err)
{
    cJSON *rec = new_record(key, op, req, "completed", t->started_at);
    char now[32];
    idem_now_rfc3339(now);
    json_add_string(rec, "finishedAt", now);
    json_add_int64(rec, "httpStatus", http_status);
    cJSON_AddItemToObject(rec, "response", json_dup(response));
    int r = replace_record(s, t->hash, rec);
    cJSON_Delete(rec);
    if (r != 0)
        return err_set(err, r, "idempotency record: %s", err_str(r));
    return 0;
}

int idem_withdraw(struct idem_store *s, const struct idem_ticket *t, struct tern_err *err)
{
    char final[80];
    snprintf(final, sizeof final, "%s.json", t->hash);
    cJSON *rec = NULL;
    int r = read_record(s->dirfd, final, &rec);
    if (r == -ENOENT)
        return 0;
    if (r != 0)
        return err_set(err, r, "idempotency record: %s", err_str(r));
    const char *st = str_of(rec, "status"), *at = str_of(rec, "startedAt");
    bool ours = st && strcmp(st, "started") == 0 && at && strcmp(at, t->started_at) == 0;
    cJSON_Delete(rec);
    if (!ours)
        return 0;
    if (unlinkat(s->dirfd, final, 0) != 0 && errno != ENOENT) {
        r = -errno;
        return err_set(err, r, "idempotency record: %s", err_str(r));
    }
    if (fsync(s->dirfd) != 0) {
        r = -errno;
        return err_set(err, r, "idempotency record: fsync: %s", err_str(r));
    }
    return 0;
}

static cJSON *interrupted_response(const char *op)
{
    cJSON *j = cJSON_CreateObject();
    json_add_string(j, "status", "interrupted");
    if (strcmp(op, "exec") == 0) {
        cJSON_AddNullToObject(j, "exitCode");
        cJSON_AddNullToObject(j, "signal");
        json_add_string(j, "stdout", "");
        json_add_string(j, "stderr", "");
        json_add_int64(j, "stdoutBytes", 0);
        json_add_int64(j, "stderrBytes", 0);
        cJSON_AddFalseToObject(j, "truncated");
        cJSON_AddNullToObject(j, "durationMs");
    }
    return j;
}

/* Calls fn for every record file; stops on a non-zero return. */
static int each_record(struct idem_store *s, int (*fn)(struct idem_store *, const char *, cJSON *, void *),
                       void *ctx, struct tern_err *err)
{
    int fd = dup(s->dirfd);
    if (fd < 0)
        return err_set(err, -errno, "records: dup");
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return err_set(err, -e, "records: opendir");
    }
    rewinddir(d);
    int r = 0;
    struct dirent *e;
    while (r == 0 && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n != 64 + 5 || strcmp(e->d_name + 64, ".json") != 0)
            continue;
        cJSON *rec = NULL;
        if (read_record(s->dirfd, e->d_name, &rec) != 0)
            continue; /* unreadable records are skipped, never fatal */
        r = fn(s, e->d_name, rec, ctx);
        cJSON_Delete(rec);
    }
    closedir(d);
    return r;
}

static int recover_one(struct idem_store *s, const char *name, cJSON *rec, void *ctx)
{
    const char *st = str_of(rec, "status"), *op = str_of(rec, "op");
    if (!st || strcmp(st, "started") != 0 || !op)
        return 0;
    char hash[65];
    memcpy(hash, name, 64);
    hash[64] = '\0';
    cJSON_ReplaceItemInObjectCaseSensitive(rec, "status", cJSON_CreateString("interrupted"));
    char now[32];
    idem_now_rfc3339(now);
    json_add_string(rec, "finishedAt", now);
    json_add_int64(rec, "httpStatus", 200);
    cJSON_DeleteItemFromObjectCaseSensitive(rec, "response");
    cJSON_AddItemToObject(rec, "response", interrupted_response(op));
    int r = replace_record(s, hash, rec);
    if (r == 0)
        (*(size_t *)ctx)++;
    return r;
}

int idem_recover(struct idem_store *s, size_t *ret_count, struct tern_err *err)
{
    size_t n = 0;
    int r = each_record(s, recover_one, &n, err);
    if (r != 0)
        return err_set(err, r, "recovering records: %s", err_str(r));
    *ret_count = n;
    return 0;
}

struct list_ctx {
    cJSON *arr;
    size_t n;
};

static int list_one(struct idem_store *s, const char *name, cJSON *rec, void *ctx)
{
    (void)s;
    (void)name;
    struct list_ctx *l = ctx;
    if (l->n >= TERN_SANDBOX_MAX_RECORDS)
        return 1;
    cJSON *e = cJSON_CreateObject();
    static const char *const keys[] = {"key", "op", "status", "startedAt"};
    for (size_t i = 0; i < 4; i++) {
        const char *v = str_of(rec, keys[i]);
        json_add_string(e, keys[i], v ? v : "");
    }
    int64_t runs = 1;
    json_item_int64(json_get(rec, "runs"), &runs);
    json_add_int64(e, "runs", runs);
    cJSON_AddItemToArray(l->arr, e);
    l->n++;
    return 0;
}

static int by_started(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    int c = strcmp(str_of(x, "startedAt"), str_of(y, "startedAt"));
    return c ? c : strcmp(str_of(x, "key"), str_of(y, "key"));
}

int idem_list(struct idem_store *s, cJSON **ret, struct tern_err *err)
{
    struct list_ctx l = {cJSON_CreateArray(), 0};
    int r = each_record(s, list_one, &l, err);
    if (r < 0) {
        cJSON_Delete(l.arr);
        return r;
    }
    /* sort: detach into an array, sort, re-attach */
    cJSON **items = xcalloc(l.n ? l.n : 1, sizeof *items);
    for (size_t i = 0; i < l.n; i++)
        items[i] = cJSON_DetachItemFromArray(l.arr, 0);
    qsort(items, l.n, sizeof *items, by_started);
    for (size_t i = 0; i < l.n; i++)
        cJSON_AddItemToArray(l.arr, items[i]);
    free(items);
    *ret = l.arr;
    return 0;
}
