/* Unit tests of the sandbox modules: workspace paths and globs, exec request
 * parsing, UTF-8 sanitising, the tar writer/reader, restore, the
 * idempotency record store and the exec runner. */
#include "harness.h"

#include "base/buf.h"
#include "base/mem.h"
#include "json/json.h"
#include "sandbox/idem.h"
#include "sandbox/restore.h"
#include "sandbox/sbapi.h"
#include "sandbox/sbexec.h"
#include "sandbox/tarball.h"
#include "sandbox/wspath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* openat2 is missing under valgrind (and old kernels): the fallback walk
 * never follows symlinks, so following reads report -ELOOP instead. */
static bool have_openat2(void)
{
    return syscall(SYS_openat2, -1, "", NULL, 0) < 0 && errno != ENOSYS;
}

static bool under_valgrind(void)
{
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload");
}

static char *path_in(const char *dir, const char *rel)
{
    return xasprintf("%s/%s", dir, rel);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    ASSERT_TRUE(fd >= 0);
    ASSERT_EQ_INT(write(fd, text, strlen(text)), (long long)strlen(text));
    close(fd);
    chmod(path, mode);
}

/* Runs a shell command with every "{}" replaced by dir. */
static void sh(const char *tmpl, const char *dir)
{
    struct buf cmd;
    buf_init(&cmd, 1 << 16);
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '{' && p[1] == '}') {
            buf_puts(&cmd, dir);
            p++;
        } else {
            buf_putc(&cmd, *p);
        }
    }
    ASSERT_EQ_INT(system(buf_str(&cmd)), 0);
    buf_done(&cmd);
}

/* ---------------------------------------------------------------- wspath */

TEST(wspath_normalize_accepts_and_cleans)
{
    char out[WSPATH_BUF];
    ASSERT_OK(wspath_normalize("working/a.txt", out));
    ASSERT_EQ_STR(out, "working/a.txt");
    ASSERT_OK(wspath_normalize("./working//b/./c/", out));
    ASSERT_EQ_STR(out, "working/b/c");
    ASSERT_OK(wspath_normalize("", out));
    ASSERT_EQ_STR(out, "");
    ASSERT_OK(wspath_normalize("working/.ternx", out));
    ASSERT_OK(wspath_normalize("working/.tern", out)); /* only the top-level one is reserved */
}

TEST(wspath_normalize_rejects_escapes)
{
    char out[WSPATH_BUF];
    ASSERT_EQ_INT(wspath_normalize("/etc/passwd", out), -EXDEV);
    ASSERT_EQ_INT(wspath_normalize("..", out), -EXDEV);
    ASSERT_EQ_INT(wspath_normalize("working/../../etc", out), -EXDEV);
    ASSERT_EQ_INT(wspath_normalize("working/..", out), -EXDEV);
    ASSERT_EQ_INT(wspath_normalize(".tern/idem", out), -EACCES);
    ASSERT_EQ_INT(wspath_normalize("./.tern", out), -EACCES);
    ASSERT_EQ_INT(wspath_normalize("working/a\x01" "b", out), -EINVAL);
    ASSERT_EQ_INT(wspath_normalize("working/a\nb", out), -EINVAL);
    char *longname = xcalloc(300, 1);
    memset(longname, 'a', 299);
    ASSERT_EQ_INT(wspath_normalize(longname, out), -ENAMETOOLONG);
    free(longname);
    char *longpath = xcalloc(5000, 1);
    for (int i = 0; i < 4998; i += 2)
        memcpy(longpath + i, "a/", 2);
    ASSERT_EQ_INT(wspath_normalize(longpath, out), -ENAMETOOLONG);
    free(longpath);
}

TEST(wspath_globs_and_read_only_parts)
{
    struct wspath_rules r;
    struct tern_err err = {0};
    ASSERT_OK(wspath_rules_parse("working/**, output/**,notes/*.md", &r, &err));
    ASSERT_EQ_INT(r.nglobs, 3);
    ASSERT_EQ_INT(r.nroots, 3);
    ASSERT_OK(wspath_check_write(&r, "working/a"));
    ASSERT_OK(wspath_check_write(&r, "working/a/b/c.txt"));
    ASSERT_OK(wspath_check_write(&r, "output/report.md"));
    ASSERT_OK(wspath_check_write(&r, "notes/x.md"));
    ASSERT_EQ_INT(wspath_check_write(&r, "notes/x.txt"), -EROFS);
    ASSERT_EQ_INT(wspath_check_write(&r, "notes/sub/x.md"), -EROFS);
    ASSERT_EQ_INT(wspath_check_write(&r, "working"), -EROFS);
    ASSERT_EQ_INT(wspath_check_write(&r, "input/x"), -EROFS);
    ASSERT_EQ_INT(wspath_check_write(&r, "task.md"), -EROFS);
    ASSERT_EQ_INT(wspath_check_write(&r, "simple.md"), -EROFS);
    ASSERT_EQ_INT(wspath_check_write(&r, "skills/a/SKILL.md"), -EROFS);
    ASSERT_EQ_INT(wspath_check_write(&r, ""), -EROFS);
    ASSERT_EQ_INT(wspath_check_write(&r, "other.txt"), -EROFS);
    ASSERT_OK(wspath_check_write(&r, "working/.git/config"));   /* ** covers hidden entries */
    ASSERT_EQ_INT(wspath_check_write(&r, "notes/.x.md"), -EROFS); /* GLOB_PERIOD */
    wspath_rules_done(&r);
    ASSERT_OK(wspath_rules_parse("a/**/z", &r, &err));
    ASSERT_OK(wspath_check_write(&r, "a/z"));
    ASSERT_OK(wspath_check_write(&r, "a/b/c/z"));
    ASSERT_EQ_INT(wspath_check_write(&r, "a/b/c/y"), -EROFS);
    wspath_rules_done(&r);
    ASSERT_EQ_INT(wspath_rules_parse("working/[x", &r, &err), -EINVAL); /* malformed glob */
    ASSERT_EQ_INT(wspath_rules_parse("input/**", &r, &err), -EINVAL);
    ASSERT_EQ_INT(wspath_rules_parse("**", &r, &err), -EINVAL);
    ASSERT_EQ_INT(wspath_rules_parse("../x/**", &r, &err), -EINVAL);
    ASSERT_EQ_INT(wspath_rules_parse("/abs/**", &r, &err), -EINVAL);
    ASSERT_EQ_INT(wspath_rules_parse(".tern/**", &r, &err), -EINVAL);
    ASSERT_EQ_INT(wspath_rules_parse("task.md", &r, &err), -EINVAL);
}

TEST(wspath_open_stays_beneath)
{
    const char *ws = th_tmpdir();
    sh("mkdir -p {}/working/d {}/input {}/.tern/idem", ws);
    char *p = path_in(ws, "input/x.txt");
    write_file(p, "in", 0644);
    free(p);
    p = path_in(ws, ".tern/idem/rec");
    write_file(p, "rec", 0600);
    free(p);
    sh("ln -s /etc {}/working/etc && ln -s ../input {}/working/in && ln -s ../.tern {}/working/st",
       ws);
    int wsfd = open(ws, O_RDONLY | O_DIRECTORY);
    int fd = -1;
    bool o2 = have_openat2();
    ASSERT_EQ_INT(wspath_open(wsfd, "working/etc/passwd", O_RDONLY, 0, WSPATH_FOLLOW, &fd),
                  o2 ? -EXDEV : -ELOOP);
    if (o2) {
        ASSERT_OK(wspath_open(wsfd, "working/in/x.txt", O_RDONLY, 0, WSPATH_FOLLOW, &fd));
        close(fd);
    }
    ASSERT_EQ_INT(wspath_open(wsfd, "working/in/x.txt", O_RDONLY, 0, WSPATH_NOFOLLOW, &fd),
                  -ELOOP);
    ASSERT_EQ_INT(wspath_open(wsfd, "working/st/idem/rec", O_RDONLY, 0, WSPATH_FOLLOW, &fd),
                  o2 ? -EACCES : -ELOOP);
    ASSERT_EQ_INT(wspath_open(wsfd, "working/st", O_RDONLY, 0, WSPATH_FOLLOW, &fd),
                  o2 ? -EACCES : -ELOOP);
    /* parents through a symlink are refused for writes */
    int pfd;
    const char *name;
    ASSERT_EQ_INT(wspath_open_parent(wsfd, "working/in/new.txt", true, -1, -1, &pfd, &name),
                  -ELOOP);
    ASSERT_OK(wspath_open_parent(wsfd, "working/d/e/f/new.txt", true, -1, -1, &pfd, &name));
    ASSERT_EQ_STR(name, "new.txt");
    close(pfd);
    struct stat st;
    p = path_in(ws, "working/d/e/f");
    ASSERT_OK(stat(p, &st));
    free(p);
    ASSERT_TRUE(S_ISDIR(st.st_mode));
    /* remove_tree removes symlinks, never their targets */
    ASSERT_OK(wspath_remove_tree(wsfd, "working"));
    p = path_in(ws, "input/x.txt");
    ASSERT_OK(stat(p, &st));
    free(p);
    close(wsfd);
}

/* ---------------------------------------------------------------- sbapi */

TEST(sbapi_parse_exec_valid)
{
    struct sbapi_exec ex;
    struct tern_err err = {0};
    const char *b = "{\"cmd\":\"echo hi\",\"cwd\":\"working/./x\",\"env\":{\"A\":\"1\",\"_B2\":\"two\"},"
                    "\"timeoutMs\":5000,\"stdin\":\"data\"}";
    ASSERT_OK(sbapi_parse_exec(b, strlen(b), 100, &ex, &err));
    ASSERT_EQ_STR(ex.argv[0], "/bin/sh");
    ASSERT_EQ_STR(ex.argv[2], "echo hi");
    ASSERT_NULL(ex.argv[3]);
    ASSERT_EQ_STR(ex.cwd, "working/x");
    ASSERT_EQ_STR(ex.env[0], "A=1");
    ASSERT_EQ_STR(ex.env[1], "_B2=two");
    ASSERT_EQ_INT(ex.timeout_ms, 5000);
    ASSERT_EQ_INT(ex.stdin_len, 4);
    sbapi_exec_done(&ex);
    b = "{\"argv\":[\"ls\",\"-l\"]}";
    ASSERT_OK(sbapi_parse_exec(b, strlen(b), 100, &ex, &err));
    ASSERT_EQ_STR(ex.argv[1], "-l");
    ASSERT_EQ_INT(ex.timeout_ms, 100);
    ASSERT_EQ_STR(ex.cwd, "");
    sbapi_exec_done(&ex);
}

TEST(sbapi_parse_exec_rejects)
{
    struct sbapi_exec ex;
    struct tern_err err = {0};
    const char *bad[] = {
        "", "[]", "{", "{}", "{\"cmd\":\"\"}", "{\"cmd\":\"a\",\"argv\":[\"a\"]}",
        "{\"argv\":[]}", "{\"argv\":[1]}", "{\"argv\":[\"\"]}", "{\"cmd\":\"a\",\"timeout\":1}",
        "{\"cmd\":\"a\",\"timeoutMs\":0}", "{\"cmd\":\"a\",\"timeoutMs\":1.5}",
        "{\"cmd\":\"a\",\"timeoutMs\":999999999999999}", "{\"cmd\":\"a\",\"env\":{\"A=B\":\"x\"}}",
        "{\"cmd\":\"a\",\"env\":{\"A\":1}}", "{\"cmd\":\"a\",\"env\":[]}",
        "{\"cmd\":\"a\",\"cwd\":\"../x\"}", "{\"cmd\":\"a\",\"cwd\":\"/etc\"}",
        "{\"cmd\":\"a\",\"cwd\":\".tern\"}", "{\"cmd\":\"a\",\"cmd\":\"b\"}",
        "{\"cmd\":\"a\",\"stdin\":\"\\u0000\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&err, 0, sizeof err);
        int rc = sbapi_parse_exec(bad[i], strlen(bad[i]), 100, &ex, &err);
        if (rc == 0)
            th_fail(__FILE__, __LINE__, "accepted: %s", bad[i]);
    }
    char *big = xcalloc(TERN_SANDBOX_MAX_EXEC_BODY + 2, 1);
    memset(big, ' ', TERN_SANDBOX_MAX_EXEC_BODY + 1);
    ASSERT_EQ_INT(sbapi_parse_exec(big, TERN_SANDBOX_MAX_EXEC_BODY + 1, 1, &ex, &err),
                  TERN_ETOOLARGE);
    free(big);
}

TEST(sbapi_utf8_sanitize_replaces_invalid)
{
    struct buf b;
    buf_init(&b, 1024);
    ASSERT_OK(sbapi_utf8_sanitize("ok \xc3\xa9 \xff x \xe2\x82", 12, &b));
    ASSERT_EQ_STR(buf_str(&b), "ok \xc3\xa9 \xef\xbf\xbd x \xef\xbf\xbd\xef\xbf\xbd");
    buf_reset(&b);
    ASSERT_OK(sbapi_utf8_sanitize("a\0b", 3, &b));
    ASSERT_EQ_STR(buf_str(&b), "a\xef\xbf\xbd" "b");
    buf_reset(&b);
    ASSERT_OK(sbapi_utf8_sanitize("\xed\xa0\x80", 3, &b)); /* a surrogate */
    ASSERT_EQ_STR(buf_str(&b), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    buf_done(&b);
    char *e = sbapi_error_body("read_only", "x \"y\"");
    ASSERT_EQ_STR(e, "{\"error\":{\"code\":\"read_only\",\"message\":\"x \\\"y\\\"\"}}");
    free(e);
}

/* ---------------------------------------------------------------- tar */

struct collect {
    struct buf log;
    struct buf data;
};

static int c_entry(void *ctx, const struct tar_entry *e)
{
    struct collect *c = ctx;
    buf_printf(&c->log, "%c %s %o %llu %s|", (char)e->type, e->path, (unsigned)e->mode,
               (unsigned long long)e->size, e->link);
    return 0;
}
static int c_data(void *ctx, const void *p, size_t n)
{
    struct collect *c = ctx;
    return buf_append(&c->data, p, n);
}
static int c_end(void *ctx)
{
    (void)ctx;
    return 0;
}
static const struct tarr_ops collect_ops = {c_entry, c_data, c_end};

/* Snapshots dir into a buffer with small, odd-sized reads. */
static void snapshot(int dfd, struct buf *out)
{
    static const char *const skip[] = {".tern", NULL};
    struct tarw *w;
    ASSERT_OK(tarw_new(dfd, skip, &w));
    char chunk[777];
    size_t n;
    do {
        ASSERT_OK(tarw_read(w, chunk, sizeof chunk, &n));
        ASSERT_OK(buf_append(out, chunk, n));
    } while (n);
    tarw_free(w);
    ASSERT_EQ_INT(out->len % 512, 0);
}

static int feed_all(struct tarr *r, const char *p, size_t n, size_t step, struct tern_err *err)
{
    for (size_t off = 0; off < n; off += step) {
        size_t k = n - off < step ? n - off : step;
        int rc = tarr_feed(r, p + off, k, err);
        if (rc)
            return rc;
    }
    return tarr_finish(r, err);
}

TEST(tar_writer_reader_round_trip)
{
    const char *ws = th_tmpdir();
    sh("mkdir -p {}/working/empty {}/working/deep && mkdir -p {}/.tern", ws);
    char *p = path_in(ws, "working/run.sh");
    write_file(p, "#!/bin/sh\necho hi\n", 0755);
    free(p);
    char longname[300];
    memset(longname, 'n', 150);
    longname[150] = '\0';
    char *lp = xasprintf("%s/working/deep/%s", ws, longname);
    write_file(lp, "long", 0600);
    free(lp);
    sh("ln -s run.sh {}/working/link && echo secret > {}/.tern/rec", ws);
    int dfd = open(ws, O_RDONLY | O_DIRECTORY);
    struct buf t;
    buf_init(&t, 1 << 20);
    snapshot(dfd, &t);
    close(dfd);
    /* GNU tar agrees with our writer */
    char *tarfile = path_in(ws, "../snap.tar");
    FILE *f = fopen(tarfile, "wb");
    fwrite(t.data, 1, t.len, f);
    fclose(f);
    char *cmd = xasprintf("tar tvf %s > %s.list 2>&1", tarfile, tarfile);
    ASSERT_EQ_INT(system(cmd), 0);
    free(cmd);
    struct collect c;
    buf_init(&c.log, 1 << 16);
    buf_init(&c.data, 1 << 16);
    struct tarr *r = tarr_new(&collect_ops, &c);
    struct tern_err err = {0};
    ASSERT_OK(feed_all(r, t.data, t.len, 13, &err));
    tarr_free(r);
    ASSERT_CONTAINS(buf_str(&c.log), "5 working/empty 755 0 |");
    ASSERT_CONTAINS(buf_str(&c.log), "0 working/run.sh 755 18 |");
    ASSERT_CONTAINS(buf_str(&c.log), "2 working/link 777 0 run.sh|");
    char *want = xasprintf("0 working/deep/%s 600 4 |", longname);
    ASSERT_CONTAINS(buf_str(&c.log), want);
    free(want);
    ASSERT_TRUE(strstr(buf_str(&c.log), ".tern") == NULL);
    ASSERT_CONTAINS(buf_str(&c.data), "echo hi");
    unlink(tarfile);
    free(tarfile);
    buf_done(&c.log);
    buf_done(&c.data);
    buf_done(&t);
}

/* Builds a one-entry tar with GNU tar from a prepared tree (name as given). */
static void make_header(char *h, const char *name, char type, const char *link, unsigned size)
{
    memset(h, 0, 512);
    memcpy(h, name, strlen(name));
    snprintf(h + 100, 8, "%07o", 0644);
    snprintf(h + 108, 8, "%07o", 0);
    snprintf(h + 116, 8, "%07o", 0);
    snprintf(h + 124, 12, "%011o", size);
    snprintf(h + 136, 12, "%011o", 0);
    h[156] = type;
    if (link)
        memcpy(h + 157, link, strlen(link));
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
}

static int parse_one(const char *name, char type, const char *link, struct tern_err *err)
{
    char tar[512 * 4] = {0};
    make_header(tar, name, type, link, 0);
    struct collect c;
    buf_init(&c.log, 4096);
    buf_init(&c.data, 4096);
    struct tarr *r = tarr_new(&collect_ops, &c);
    int rc = feed_all(r, tar, sizeof tar, 512, err);
    tarr_free(r);
    buf_done(&c.log);
    buf_done(&c.data);
    return rc;
}

TEST(tar_reader_rejects_escapes_and_garbage)
{
    struct tern_err err = {0};
    ASSERT_OK(parse_one("working/ok.txt", '0', NULL, &err));
    ASSERT_EQ_INT(parse_one("/etc/passwd", '0', NULL, &err), -EXDEV);
    ASSERT_EQ_INT(parse_one("../x", '0', NULL, &err), -EXDEV);
    ASSERT_EQ_INT(parse_one("working/../../x", '5', NULL, &err), -EXDEV);
    ASSERT_EQ_INT(parse_one(".tern/idem/x", '0', NULL, &err), -EACCES);
    ASSERT_EQ_INT(parse_one("working/h", '1', "/etc/shadow", &err), -EXDEV);
    ASSERT_EQ_INT(parse_one("working/h", '1', "../../etc/shadow", &err), -EXDEV);
    ASSERT_EQ_INT(parse_one("working/dev", '3', NULL, &err), TERN_EPARSE);
    /* bad checksum */
    char tar[512 * 3] = {0};
    make_header(tar, "working/a", '0', NULL, 0);
    tar[0] = 'x';
    struct collect c;
    buf_init(&c.log, 4096);
    buf_init(&c.data, 4096);
    struct tarr *r = tarr_new(&collect_ops, &c);
    ASSERT_EQ_INT(feed_all(r, tar, sizeof tar, 512, &err), TERN_EPARSE);
    tarr_free(r);
    /* truncated: header promises data that never comes */
    make_header(tar, "working/a", '0', NULL, 5000);
    r = tarr_new(&collect_ops, &c);
    ASSERT_EQ_INT(feed_all(r, tar, 1024, 512, &err), TERN_EPARSE);
    tarr_free(r);
    /* no end blocks */
    make_header(tar, "working/a", '5', NULL, 0);
    r = tarr_new(&collect_ops, &c);
    ASSERT_EQ_INT(feed_all(r, tar, 512, 512, &err), TERN_EPARSE);
    tarr_free(r);
    buf_done(&c.log);
    buf_done(&c.data);
}

/* ---------------------------------------------------------------- restore */

static int restore_bytes(int wsfd, int tmpfd, const struct wspath_rules *rules, const char *p,
                         size_t n, struct restore_stats *st, struct tern_err *err)
{
    struct restore *rs;
    int rc = restore_begin(wsfd, tmpfd, rules, -1, -1, &rs, err);
    if (rc == 0)
        rc = restore_feed(rs, p, n, err);
    if (rc == 0)
        rc = restore_commit(rs, st, err);
    restore_free(rs);
    return rc;
}

TEST(restore_round_trip_replaces_writable_part_only)
{
    const char *ws = th_tmpdir();
    sh("mkdir -p {}/working/empty {}/working/ro {}/output", ws);
    sh("mkdir -p {}/input {}/.tern/tmp && echo orig > {}/input/a.txt", ws);
    char *p = path_in(ws, "working/x.sh");
    write_file(p, "x", 0750);
    free(p);
    sh("ln -s x.sh {}/working/l && ln -s ../../input {}/working/ro/up && chmod 555 {}/working/ro",
       ws);
    int wsfd = open(ws, O_RDONLY | O_DIRECTORY);
    char *tp = path_in(ws, ".tern/tmp");
    int tmpfd = open(tp, O_RDONLY | O_DIRECTORY);
    free(tp);
    struct buf t;
    buf_init(&t, 1 << 20);
    snapshot(wsfd, &t);
    /* change everything, then restore */
    sh("chmod 755 {}/working/ro && rm -rf {}/working/* && echo new > {}/working/junk", ws);
    sh("echo changed > {}/input/a.txt", ws);
    struct wspath_rules rules;
    struct tern_err err = {0};
    ASSERT_OK(wspath_rules_parse("working/**,output/**", &rules, &err));
    struct restore_stats st;
    ASSERT_OK(restore_bytes(wsfd, tmpfd, &rules, t.data, t.len, &st, &err));
    ASSERT_CMP_INT(st.skipped, >=, 2); /* input/ and input/a.txt */
    struct stat sb;
    p = path_in(ws, "working/x.sh");
    ASSERT_OK(lstat(p, &sb));
    ASSERT_EQ_INT(sb.st_mode & 07777, 0750);
    free(p);
    p = path_in(ws, "working/empty");
    ASSERT_OK(lstat(p, &sb));
    ASSERT_TRUE(S_ISDIR(sb.st_mode));
    free(p);
    p = path_in(ws, "working/ro");
    ASSERT_OK(lstat(p, &sb));
    ASSERT_EQ_INT(sb.st_mode & 07777, 0555);
    free(p);
    char target[64];
    p = path_in(ws, "working/l");
    ssize_t n = readlink(p, target, sizeof target - 1);
    free(p);
    ASSERT_EQ_INT(n, 4);
    target[n] = '\0';
    ASSERT_EQ_STR(target, "x.sh");
    p = path_in(ws, "working/junk");
    ASSERT_EQ_INT(lstat(p, &sb), -1); /* replaced, not merged */
    free(p);
    /* the read-only part was not restored */
    p = path_in(ws, "input/a.txt");
    FILE *f = fopen(p, "r");
    char line[32] = {0};
    ASSERT_NOT_NULL(fgets(line, sizeof line, f));
    fclose(f);
    free(p);
    ASSERT_EQ_STR(line, "changed\n");
    /* a bad stream leaves the workspace untouched */
    sh("chmod 755 {}/working/ro && echo keep > {}/working/keep", ws);
    char bad[512 * 4] = {0};
    make_header(bad, "working/new", '0', NULL, 0);
    make_header(bad + 512, "working/../../escape", '0', NULL, 0);
    ASSERT_EQ_INT(restore_bytes(wsfd, tmpfd, &rules, bad, sizeof bad, &st, &err), -EXDEV);
    p = path_in(ws, "working/keep");
    ASSERT_OK(lstat(p, &sb));
    free(p);
    p = path_in(ws, "working/new");
    ASSERT_EQ_INT(lstat(p, &sb), -1);
    free(p);
    /* hardlink to a file outside the stream (input/a.txt) is rejected */
    make_header(bad, "working/h", '1', "input/a.txt", 0);
    memset(bad + 512, 0, 512);
    ASSERT_EQ_INT(restore_bytes(wsfd, tmpfd, &rules, bad, sizeof bad, &st, &err), -EXDEV);
    /* a path through a symlink of the same stream is rejected */
    make_header(bad, "working/s", '2', "/etc", 0);
    make_header(bad + 512, "working/s/passwd", '0', NULL, 0);
    ASSERT_EQ_INT(restore_bytes(wsfd, tmpfd, &rules, bad, sizeof bad, &st, &err), -ELOOP);
    /* hardlink within the stream works */
    make_header(bad, "working/f", '0', NULL, 0);
    make_header(bad + 512, "working/g", '1', "working/f", 0);
    ASSERT_OK(restore_bytes(wsfd, tmpfd, &rules, bad, sizeof bad, &st, &err));
    struct stat s1, s2;
    p = path_in(ws, "working/f");
    char *q = path_in(ws, "working/g");
    ASSERT_OK(lstat(p, &s1));
    ASSERT_OK(lstat(q, &s2));
    ASSERT_EQ_INT(s1.st_ino, s2.st_ino);
    free(p);
    free(q);
    /* staging is cleaned up */
    sh("test -z \"$(ls -A {}/.tern/tmp)\"", ws);
    wspath_rules_done(&rules);
    buf_done(&t);
    close(tmpfd);
    close(wsfd);
}

/* ---------------------------------------------------------------- idem */

TEST(idem_begin_finish_replay_recover)
{
    const char *ws = th_tmpdir();
    int wsfd = open(ws, O_RDONLY | O_DIRECTORY);
    struct idem_store s;
    struct tern_err err = {0};
    ASSERT_OK(idem_open(wsfd, &s, &err));
    struct idem_ticket t;
    cJSON *resp = NULL;
    int http = 0;
    ASSERT_OK(idem_key_valid("uid-1/call_7"));
    ASSERT_EQ_INT(idem_key_valid(""), -EINVAL);
    ASSERT_EQ_INT(idem_key_valid("a b"), -EINVAL);
    ASSERT_OK(idem_begin(&s, "k1", "exec", "h1", &t, &resp, &http, &err));
    /* while running: busy; other request: mismatch */
    ASSERT_EQ_INT(idem_begin(&s, "k1", "exec", "h1", &t, &resp, &http, &err), -EBUSY);
    ASSERT_EQ_INT(idem_begin(&s, "k1", "exec", "h2", &t, &resp, &http, &err), -EEXIST);
    ASSERT_EQ_INT(idem_begin(&s, "k1", "put", "h1", &t, &resp, &http, &err), -EEXIST);
    cJSON *body = cJSON_CreateObject();
    json_add_string(body, "stdout", "once");
    ASSERT_OK(idem_finish(&s, &t, "k1", "exec", "h1", 200, body, &err));
    cJSON_Delete(body);
    ASSERT_EQ_INT(idem_begin(&s, "k1", "exec", "h1", &t, &resp, &http, &err), 1);
    ASSERT_EQ_INT(http, 200);
    ASSERT_EQ_STR(cJSON_GetObjectItemCaseSensitive(resp, "stdout")->valuestring, "once");
    cJSON_Delete(resp);
    /* a started record found at startup becomes interrupted */
    ASSERT_OK(idem_begin(&s, "k2", "exec", "h", &t, &resp, &http, &err));
    idem_close(&s);
    ASSERT_OK(idem_open(wsfd, &s, &err));
    size_t n = 0;
    ASSERT_OK(idem_recover(&s, &n, &err));
    ASSERT_EQ_INT(n, 1);
    ASSERT_EQ_INT(idem_begin(&s, "k2", "exec", "h", &t, &resp, &http, &err), 1);
    ASSERT_EQ_STR(cJSON_GetObjectItemCaseSensitive(resp, "status")->valuestring, "interrupted");
    ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(resp, "exitCode")));
    cJSON_Delete(resp);
    cJSON *list = NULL;
    ASSERT_OK(idem_list(&s, &list, &err));
    ASSERT_EQ_INT(cJSON_GetArraySize(list), 2);
    char *txt = json_print(list);
    ASSERT_CONTAINS(txt, "\"key\":\"k1\"");
    ASSERT_CONTAINS(txt, "\"status\":\"interrupted\"");
    ASSERT_CONTAINS(txt, "\"runs\":1");
    free(txt);
    cJSON_Delete(list);
    struct stat st;
    char *p = path_in(ws, ".tern");
    ASSERT_OK(stat(p, &st));
    ASSERT_EQ_INT(st.st_mode & 0777, 0700);
    free(p);
    idem_close(&s);
    close(wsfd);
}

/* ---------------------------------------------------------------- sbexec */

static struct sbexec_opts exec_opts(char **argv, int cwd)
{
    return (struct sbexec_opts){.argv = argv,
                                .cwd_fd = cwd,
                                .timeout_ms = 10000,
                                .kill_grace_ms = 300,
                                .max_output = 1000,
                                .uid = (uid_t)-1,
                                .gid = (gid_t)-1};
}

TEST(sbexec_runs_with_scrubbed_env_and_stdin)
{
    setenv("SECRET_FROM_PARENT", "leak", 1);
    int cwd = open(th_tmpdir(), O_RDONLY | O_DIRECTORY);
    char *argv[] = {"/bin/sh", "-c", "cat; echo \"[$SECRET_FROM_PARENT][$X][$HOME]\"; pwd; exit 4",
                    NULL};
    char *env[] = {"X=y", NULL};
    struct sbexec_opts o = exec_opts(argv, cwd);
    o.env_add = env;
    o.stdin_data = "in-data\n";
    o.stdin_len = 8;
    struct sbexec_result r;
    ASSERT_OK(sbexec_run(&o, &r, NULL));
    ASSERT_EQ_INT(r.status, SBEXEC_COMPLETED);
    ASSERT_TRUE(r.exited);
    ASSERT_EQ_INT(r.exit_code, 4);
    ASSERT_CONTAINS(buf_str(&r.out), "in-data\n[][y][/tmp]\n");
    ASSERT_CONTAINS(buf_str(&r.out), th_tmpdir());
    sbexec_result_done(&r);
    char *nf[] = {"no-such-program-xyz", NULL};
    o = exec_opts(nf, cwd);
    ASSERT_OK(sbexec_run(&o, &r, NULL));
    ASSERT_EQ_INT(r.exit_code, 127);
    ASSERT_CONTAINS(buf_str(&r.err), "cannot execute");
    sbexec_result_done(&r);
    close(cwd);
}

TEST(sbexec_passes_base_env_under_the_request_env)
{
    int cwd = open(th_tmpdir(), O_RDONLY | O_DIRECTORY);
    char *argv[] = {"/bin/sh", "-c", "echo \"[$HTTPS_PROXY][$NO_PROXY][$PATH][$HOME]\"", NULL};
    char *base[] = {"HTTPS_PROXY=http://10.0.0.1:3128", "NO_PROXY=localhost", "PATH=/bin", NULL};
    char *add[] = {"NO_PROXY=mine", NULL};
    struct sbexec_opts o = exec_opts(argv, cwd);
    o.base_env = base;
    o.env_add = add;
    struct sbexec_result r;
    ASSERT_OK(sbexec_run(&o, &r, NULL));
    ASSERT_CONTAINS(buf_str(&r.out), "[http://10.0.0.1:3128][mine][/bin][/tmp]\n");
    sbexec_result_done(&r);
    close(cwd);
}

TEST(sbexec_caps_output_and_counts_totals)
{
    int cwd = open(th_tmpdir(), O_RDONLY | O_DIRECTORY);
    char *argv[] = {"/bin/sh", "-c", "head -c 300000 /dev/zero; echo e >&2", NULL};
    struct sbexec_opts o = exec_opts(argv, cwd);
    struct sbexec_result r;
    ASSERT_OK(sbexec_run(&o, &r, NULL));
    ASSERT_EQ_INT(r.out_total, 300000);
    ASSERT_EQ_INT(r.out.len, 1000);
    ASSERT_EQ_INT(r.err_total, 2);
    ASSERT_TRUE(r.truncated);
    sbexec_result_done(&r);
    close(cwd);
}

TEST_T(sbexec_timeout_kills_group_even_ignoring_sigterm, 20)
{
    int cwd = open(th_tmpdir(), O_RDONLY | O_DIRECTORY);
    /* the child and a grandchild both ignore SIGTERM */
    char *argv[] = {"/bin/sh", "-c",
                    "trap '' TERM; (trap '' TERM; sleep 60; echo grandchild) & sleep 60", NULL};
    struct sbexec_opts o = exec_opts(argv, cwd);
    o.timeout_ms = 300;
    struct sbexec_result r;
    ASSERT_OK(sbexec_run(&o, &r, NULL));
    ASSERT_EQ_INT(r.status, SBEXEC_TIMEOUT);
    ASSERT_FALSE(r.exited);
    ASSERT_EQ_INT(r.term_signal, SIGKILL);
    ASSERT_CMP_INT(r.duration_ms, <, 5000);
    ASSERT_TRUE(strstr(buf_str(&r.out), "grandchild") == NULL);
    sbexec_result_done(&r);
    /* a background process is killed when the main process exits */
    char *bg[] = {"/bin/sh", "-c", "sleep 60 & echo started", NULL};
    o = exec_opts(bg, cwd);
    ASSERT_OK(sbexec_run(&o, &r, NULL));
    ASSERT_EQ_INT(r.exit_code, 0);
    ASSERT_CMP_INT(r.duration_ms, <, 3000);
    sbexec_result_done(&r);
    close(cwd);
}

TEST(sbexec_rlimits_apply)
{
    if (under_valgrind())
        TH_SKIP("valgrind refuses the child's setrlimit(RLIMIT_NOFILE)");
    int cwd = open(th_tmpdir(), O_RDONLY | O_DIRECTORY);
    char *argv[] = {"/bin/sh", "-c", "ulimit -n; ulimit -f; ulimit -t; ulimit -c", NULL};
    struct sbexec_opts o = exec_opts(argv, cwd);
    o.lim = (struct sbexec_limits){.nproc = 0, .fsize = 1024 * 1024, .nofile = 77, .cpu_seconds = 9};
    struct sbexec_result r;
    ASSERT_OK(sbexec_run(&o, &r, NULL));
    if (strcmp(buf_str(&r.out), "77\n2048\n9\n0\n") != 0)
        th_fail(__FILE__, __LINE__, "got \"%s\", stderr \"%s\", exit %d", buf_str(&r.out),
                buf_str(&r.err), r.exit_code);
    sbexec_result_done(&r);
    close(cwd);
}

TEST(sbexec_landlock_limits_writes)
{
    if (sbexec_landlock_abi() <= 0)
        TH_SKIP("no Landlock in this kernel");
    const char *ws = th_tmpdir();
    sh("mkdir -p {}/working {}/input", ws);
    int cwd = open(ws, O_RDONLY | O_DIRECTORY);
    char *allowed = path_in(ws, "working");
    const char *dirs[] = {allowed, NULL};
    char *argv[] = {"/bin/sh", "-c",
                    "echo a > working/ok && echo ok1; echo b > input/no 2>/dev/null || echo denied",
                    NULL};
    struct sbexec_opts o = exec_opts(argv, cwd);
    o.landlock_dirs = dirs;
    struct sbexec_result r;
    ASSERT_OK(sbexec_run(&o, &r, NULL));
    ASSERT_TRUE(r.landlocked);
    ASSERT_EQ_STR(buf_str(&r.out), "ok1\ndenied\n");
    sbexec_result_done(&r);
    free(allowed);
    close(cwd);
}

TEST_T(sbexec_endless_output_still_times_out, 20)
{
    int cwd = open(th_tmpdir(), O_RDONLY | O_DIRECTORY);
    char *argv[] = {"yes", NULL};
    struct sbexec_opts o = exec_opts(argv, cwd);
    o.timeout_ms = 300;
    struct sbexec_result r;
    ASSERT_OK(sbexec_run(&o, &r, NULL));
    ASSERT_EQ_INT(r.status, SBEXEC_TIMEOUT);
    ASSERT_TRUE(r.truncated);
    ASSERT_CMP_INT(r.out_total, >, 1000);
    ASSERT_CMP_INT(r.duration_ms, <, 5000);
    sbexec_result_done(&r);
    close(cwd);
}

TEST(sbapi_canonical_form_ignores_order_and_defaults)
{
    const char *a = "{\"cmd\":\"x\",\"env\":{\"B\":\"2\",\"A\":\"1\"}}";
    const char *b = "{ \"env\": {\"A\":\"1\", \"B\":\"2\"}, \"timeoutMs\": 100, \"cmd\": \"x\" }";
    const char *c = "{\"cmd\":\"x\",\"env\":{\"A\":\"1\",\"B\":\"3\"}}";
    struct sbapi_exec ea, eb, ec;
    ASSERT_OK(sbapi_parse_exec(a, strlen(a), 100, &ea, NULL));
    ASSERT_OK(sbapi_parse_exec(b, strlen(b), 100, &eb, NULL));
    ASSERT_OK(sbapi_parse_exec(c, strlen(c), 100, &ec, NULL));
    struct buf x, y, z;
    buf_init(&x, 1 << 20);
    buf_init(&y, 1 << 20);
    buf_init(&z, 1 << 20);
    ASSERT_OK(sbapi_exec_canonical(&ea, &x));
    ASSERT_OK(sbapi_exec_canonical(&eb, &y));
    ASSERT_OK(sbapi_exec_canonical(&ec, &z));
    ASSERT_EQ_STR(buf_str(&x), buf_str(&y));
    ASSERT_TRUE(strcmp(buf_str(&x), buf_str(&z)) != 0);
    buf_done(&x);
    buf_done(&y);
    buf_done(&z);
    sbapi_exec_done(&ea);
    sbapi_exec_done(&eb);
    sbapi_exec_done(&ec);
}
