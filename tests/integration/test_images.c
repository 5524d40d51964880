/* Integration tests of the image archives `make images` builds
 * (docs/images.md): each archive carries the name the chart deploys and the
 * image config the pod specs rely on, unpacks with umoci, and its programs
 * run under runc as the image's non-root user:
 *
 *   - tern-sandboxd from each sandbox image's own ENTRYPOINT (docker-run
 *     semantics: writable root, the token and the workspace bind-mounted),
 *     and from the sandbox pod the operator builds (children_sandbox_pod of
 *     examples/context-skills-memory.yaml) turned into an OCI runtime config
 *     the way a kubelet would (command and args with $(VAR) expansion, env,
 *     runAsUser/runAsGroup/fsGroup, read-only root, no capabilities, no new
 *     privileges; the PVC, Secret, ConfigMap, projected and emptyDir volumes
 *     materialised from the objects the operator and the example create).
 *     The test joins the container's network namespace (sandboxd listens on
 *     its fixed port there, nothing on the host) and drives the API: /healthz
 *     with and without the token, exec as the contract's uid, files, the
 *     read-only parts; in the python image also python3, gcc and git;
 *   - tern-runner from the turn Job's spec (it runs as the Job's user with the
 *     Job's environment and stops at "no Kubernetes configuration", exit 75:
 *     there is no API server here) and bare (its usage, exit 78);
 *   - the tern image's entrypoint (tern-operator --help) and its other
 *     binaries.
 * Not reproduced: seccomp RuntimeDefault, resource limits, the pod network.
 * Skips with one line when the archives are not built (make images), umoci
 * or runc is missing (scripts/install-deps images), or not running as root
 * (runc and umoci unpack are run as root here). */
#include "harness.h"

#include "base/buf.h"
#include "base/mem.h"
#include "controller/children.h"
#include "http/httpc.h"
#include "json/json.h"
#include "sandbox/sandbox_contract.h"
#include "spec/session_spec.h"
#include "yaml/yamljson.h"

#include "../support/proc_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOKEN           "image-test-token"
#define STR2(x)         #x
#define STR(x)          STR2(x)
#define SANDBOX_USER_ID STR(SANDBOX_UID)
/* prints "root <mount options of />" from inside a container */
#define ROOT_MOUNT                                                                                 \
    "while read -r id parent dev root mnt opts rest; do "                                          \
    "[ \"$mnt\" = / ] && echo \"root $opts\"; done < /proc/self/mountinfo; true"

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *vfmt(const char *fmt, va_list ap)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    ASSERT_OK(buf_vprintf(&b, fmt, ap));
    return buf_steal(&b);
}

/* Runs a shell command line; fails the test when it does not exit 0. */
__attribute__((format(printf, 1, 2))) static void sh(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *cmd = vfmt(fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0)
        th_fail(__FILE__, __LINE__, "command failed (status %d): %s", rc, cmd);
    free(cmd);
}

/* The standard output of a shell command line (which must exit 0). */
__attribute__((format(printf, 1, 2))) static char *sh_out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *cmd = vfmt(fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    ASSERT_NOT_NULL(p);
    struct buf b;
    buf_init(&b, 64u << 20);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, p)) > 0)
        ASSERT_OK(buf_append(&b, chunk, n));
    int rc = pclose(p);
    if (rc != 0)
        th_fail(__FILE__, __LINE__, "command failed (status %d): %s", rc, cmd);
    free(cmd);
    return buf_steal(&b);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        th_fail(__FILE__, __LINE__, "cannot open %s: %s", path, strerror(errno));
    struct buf b;
    buf_init(&b, 16u << 20);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        ASSERT_OK(buf_append(&b, chunk, n));
    fclose(f);
    return buf_steal(&b);
}

static void spit(const char *path, const char *text, mode_t mode, gid_t gid)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        th_fail(__FILE__, __LINE__, "cannot create %s: %s", path, strerror(errno));
    size_t len = strlen(text);
    ASSERT_EQ_INT(write(fd, text, len), (long long)len);
    ASSERT_OK(fchown(fd, 0, gid));
    ASSERT_OK(fchmod(fd, mode));
    close(fd);
}

static cJSON *yaml_docs(const char *path)
{
    char *text = slurp(path);
    cJSON *docs = NULL;
    struct tern_err e = {0};
    if (yamljson_parse_stream(text, strlen(text), NULL, &docs, &e))
        th_fail(__FILE__, __LINE__, "%s: %s", path, e.msg);
    free(text);
    return docs;
}

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *it = json_get(o, k);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* ---- which images, under which names -------------------------------- */

/* <chart image.repository><suffix>:<image.tag or appVersion>: the tern image
 * for "", the sandbox images for "-sandbox-<name>". */
static char *image_ref(const char *suffix)
{
    cJSON *values = yaml_docs("charts/tern/values.yaml");
    cJSON *chart = yaml_docs("charts/tern/Chart.yaml");
    const cJSON *img = json_get(cJSON_GetArrayItem(values, 0), "image");
    const char *repo = jstr(img, "repository");
    const char *tag = jstr(img, "tag");
    if (!tag || !*tag)
        tag = jstr(cJSON_GetArrayItem(chart, 0), "appVersion");
    ASSERT_NOT_NULL(repo);
    ASSERT_NOT_NULL(tag);
    char *ref = xasprintf("%s%s:%s", repo, suffix, tag);
    cJSON_Delete(values);
    cJSON_Delete(chart);
    return ref;
}

/* build/images/<last path part of the name>-<tag>.oci.tar */
static char *archive_path(const char *ref)
{
    const char *colon = strrchr(ref, ':');
    const char *slash = strrchr(ref, '/');
    ASSERT_TRUE(colon && slash && slash < colon);
    return xasprintf("%s/images/%.*s-%s.oci.tar", proc_build_dir(), (int)(colon - slash - 1),
                     slash + 1, colon + 1);
}

static bool on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char *copy = xstrdup(path && *path ? path : "/usr/bin:/bin");
    bool found = false;
    for (char *dir = copy, *next; dir && !found; dir = next) {
        next = strchr(dir, ':');
        if (next)
            *next++ = '\0';
        char *p = xasprintf("%s/%s", *dir ? dir : ".", prog);
        found = access(p, X_OK) == 0;
        free(p);
    }
    free(copy);
    return found;
}

static void need_archive(const char *ref)
{
    char *a = archive_path(ref);
    if (access(a, R_OK) != 0) {
        char *why = xasprintf("%s not built: run make images", a);
        TH_SKIP(why);
    }
    free(a);
}

static void need_runtime(void)
{
    if (geteuid() != 0)
        TH_SKIP("runc and umoci unpack run as root here: not root");
    if (!on_path("umoci") || !on_path("runc"))
        TH_SKIP("umoci or runc missing: scripts/install-deps images");
}

/* A JSON member of the archive (tar -xO). */
static cJSON *archive_json(const char *archive, const char *member)
{
    char *text = sh_out("tar -xOf '%s' '%s'", archive, member);
    cJSON *j = NULL;
    if (json_parse(text, strlen(text), &j, NULL))
        th_fail(__FILE__, __LINE__, "%s in %s is not JSON", member, archive);
    free(text);
    return j;
}

static cJSON *archive_blob(const char *archive, const char *digest)
{
    ASSERT_TRUE(strncmp(digest, "sha256:", 7) == 0);
    char *member = xasprintf("blobs/sha256/%s", digest + 7);
    cJSON *j = archive_json(archive, member);
    free(member);
    return j;
}

/* The image config (the "config" member of the config blob) of the one image
 * in the archive, after checking that its index names it ref. */
static cJSON *image_config(const char *ref)
{
    char *a = archive_path(ref);
    cJSON *index = archive_json(a, "index.json");
    const cJSON *mans = json_get(index, "manifests");
    ASSERT_EQ_INT(cJSON_GetArraySize(mans), 1);
    const cJSON *m = cJSON_GetArrayItem(mans, 0);
    const cJSON *ann = json_get(m, "annotations");
    ASSERT_EQ_STR(jstr(ann, "org.opencontainers.image.ref.name"), ref);
    ASSERT_EQ_STR(jstr(ann, "io.containerd.image.name"), ref);
    cJSON *manifest = archive_blob(a, jstr(m, "digest"));
    cJSON *blob = archive_blob(a, jstr(json_get(manifest, "config"), "digest"));
    ASSERT_EQ_STR(jstr(blob, "os"), "linux");
    cJSON *cfg = cJSON_DetachItemFromObjectCaseSensitive(blob, "config");
    ASSERT_NOT_NULL(cfg);
    struct stat st;
    ASSERT_OK(stat(a, &st));
    printf("    %s: %s, %.1f MiB\n", ref, a, (double)st.st_size / 1048576.0);
    cJSON_Delete(blob);
    cJSON_Delete(manifest);
    cJSON_Delete(index);
    free(a);
    return cfg;
}

static char *joined(const cJSON *arr)
{
    struct buf b;
    buf_init(&b, 1 << 16);
    const cJSON *it;
    cJSON_ArrayForEach(it, arr)
    {
        ASSERT_TRUE(cJSON_IsString(it));
        buf_printf(&b, "%s[%s]", b.len ? " " : "", it->valuestring);
    }
    return buf_steal(&b);
}

/* ---- bundles and containers ------------------------------------------ */

/* Unpacked root filesystems (up to 480 MiB each) are removed when the test
 * process exits, also after a failure (which keeps th_tmpdir's logs). */
static char *unpacked[4];
static size_t nunpacked;

static void remove_unpacked(void)
{
    for (size_t i = 0; i < nunpacked; i++) {
        char *cmd = xasprintf("rm -rf '%s/rootfs'", unpacked[i]);
        if (system(cmd) != 0) {
            /* nothing more to do at exit */
        }
        free(cmd);
    }
}

/* Unpacks ref's archive into <tmp>/<name>/bundle (config.json + rootfs) and
 * returns the bundle directory. */
static char *unpack(const char *ref, const char *name)
{
    char *a = archive_path(ref);
    char *dir = xasprintf("%s/%s", th_tmpdir(), name);
    char *bundle = xasprintf("%s/bundle", dir);
    ASSERT_TRUE(nunpacked < sizeof unpacked / sizeof unpacked[0]);
    if (nunpacked == 0)
        atexit(remove_unpacked);
    unpacked[nunpacked++] = xstrdup(bundle);
    int64_t t0 = mono_ms();
    sh("mkdir -p '%s/layout' && tar -xf '%s' -C '%s/layout' && "
       "umoci unpack --image '%s/layout:%s' '%s' >/dev/null && rm -rf '%s/layout'",
       dir, a, dir, dir, ref, bundle, dir);
    printf("    unpacked %s in %lld ms\n", ref, (long long)(mono_ms() - t0));
    free(a);
    free(dir);
    return bundle;
}

static cJSON *proc_of(cJSON *cfg)
{
    cJSON *p = (cJSON *)json_get(cfg, "process");
    ASSERT_NOT_NULL(p);
    return p;
}

static cJSON *bundle_config(const char *bundle)
{
    char *p = xasprintf("%s/config.json", bundle);
    char *text = slurp(p);
    cJSON *c = NULL;
    ASSERT_OK(json_parse(text, strlen(text), &c, NULL));
    free(text);
    free(p);
    /* no terminal: the test reads the container's stdout through a pipe */
    cJSON_ReplaceItemInObjectCaseSensitive(proc_of(c), "terminal", cJSON_CreateFalse());
    return c;
}

static void bundle_save(const char *bundle, const cJSON *cfg)
{
    char *p = xasprintf("%s/config.json", bundle);
    char *text = json_print(cfg);
    spit(p, text, 0644, 0);
    free(text);
    free(p);
}

static void add_bind(cJSON *cfg, const char *dest, const char *src, bool ro)
{
    cJSON *m = cJSON_CreateObject();
    json_add_string(m, "destination", dest);
    json_add_string(m, "type", "bind");
    json_add_string(m, "source", src);
    cJSON *o = cJSON_AddArrayToObject(m, "options");
    cJSON_AddItemToArray(o, cJSON_CreateString("rbind"));
    cJSON_AddItemToArray(o, cJSON_CreateString(ro ? "ro" : "rw"));
    cJSON_AddItemToArray((cJSON *)json_get(cfg, "mounts"), m);
}

static void set_args(cJSON *cfg, const char *const *argv)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; argv[i]; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(argv[i]));
    cJSON_ReplaceItemInObjectCaseSensitive(proc_of(cfg), "args", a);
}

struct ctr {
    char id[64];
    char root[600]; /* runc --root: this test's own state directory */
    char pidfile[600];
    char errlog[600]; /* runc's and the container's stderr */
    pid_t runc;       /* `runc run`, our child */
    int pidfd;
    int out; /* the container's stdout */
    bool done;
    int status; /* runc run's exit code once done */
};

/* Containers still running when the test process exits (a failed assertion
 * exits through th_fail): killed and deleted by atexit. */
static struct ctr *live[8];
static size_t nlive;

static void ctr_reap_all(void)
{
    for (size_t i = 0; i < nlive; i++) {
        struct ctr *c = live[i];
        if (!c)
            continue;
        char *cmd = xasprintf("runc --root '%s' kill '%s' KILL >/dev/null 2>&1; "
                              "runc --root '%s' delete --force '%s' >/dev/null 2>&1",
                              c->root, c->id, c->root, c->id);
        if (system(cmd) != 0) {
            /* already gone */
        }
        free(cmd);
        waitpid(c->runc, NULL, 0);
    }
}

static void ctr_forget(const struct ctr *c)
{
    for (size_t i = 0; i < nlive; i++)
        if (live[i] == c)
            live[i] = NULL;
}

static void ctr_start(struct ctr *c, const char *bundle, const char *name)
{
    memset(c, 0, sizeof *c);
    snprintf(c->id, sizeof c->id, "tern-image-test-%d-%s", (int)getpid(), name);
    snprintf(c->root, sizeof c->root, "%s/runc-state", th_tmpdir());
    snprintf(c->pidfile, sizeof c->pidfile, "%s/%s.pid", th_tmpdir(), name);
    snprintf(c->errlog, sizeof c->errlog, "%s/%s.stderr", th_tmpdir(), name);
    int p[2];
    ASSERT_OK(pipe2(p, O_CLOEXEC));
    if (nlive == 0)
        atexit(ctr_reap_all);
    size_t slot = 0;
    while (slot < nlive && live[slot])
        slot++;
    ASSERT_TRUE(slot < sizeof live / sizeof live[0]);
    live[slot] = c;
    if (slot == nlive)
        nlive++;
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int err = open(c->errlog, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (err < 0 || null < 0)
            _exit(127);
        dup2(null, 0);
        dup2(p[1], 1);
        dup2(err, 2);
        execlp("runc", "runc", "--root", c->root, "run", "--bundle", bundle, "--pid-file",
               c->pidfile, c->id, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    c->runc = pid;
    c->out = p[0];
    c->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    ASSERT_TRUE(c->pidfd >= 0);
}

static char *ctr_stderr(const struct ctr *c)
{
    return access(c->errlog, R_OK) == 0 ? slurp(c->errlog) : xstrdup("");
}

/* Waits up to ms for runc run to exit; returns its exit code (the
 * container's, or 128+signal), or -1 on timeout. */
static int ctr_wait(struct ctr *c, long ms)
{
    if (c->done)
        return c->status;
    struct pollfd pf = {c->pidfd, POLLIN, 0};
    if (poll(&pf, 1, (int)ms) <= 0)
        return -1;
    int st = 0;
    ASSERT_EQ_INT(waitpid(c->runc, &st, 0), c->runc);
    c->done = true;
    c->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    close(c->pidfd);
    close(c->out);
    ctr_forget(c);
    return c->status;
}

/* Reads the container's stdout until a line containing marker (returned,
 * newly allocated) or until ms pass (fails with what came and stderr). */
static char *ctr_wait_line(struct ctr *c, const char *marker, long ms)
{
    struct buf b;
    buf_init(&b, 1 << 20);
    int64_t deadline = mono_ms() + ms;
    for (;;) {
        const char *hit = b.len ? strstr(buf_str(&b), marker) : NULL;
        if (hit && strchr(hit, '\n')) {
            const char *start = hit;
            while (start > buf_str(&b) && start[-1] != '\n')
                start--;
            char *line = xstrndup(start, (size_t)(strchr(hit, '\n') - start));
            buf_done(&b);
            return line;
        }
        int64_t left = deadline - mono_ms();
        struct pollfd pf = {c->out, POLLIN, 0};
        if (left <= 0 || poll(&pf, 1, (int)left) <= 0)
            break;
        char chunk[4096];
        ssize_t n = read(c->out, chunk, sizeof chunk);
        if (n <= 0)
            break;
        ASSERT_OK(buf_append(&b, chunk, (size_t)n));
    }
    th_fail(__FILE__, __LINE__,
            "no \"%s\" from %s (it closed its stdout, or %ld ms passed); stdout \"%s\"; "
            "stderr \"%s\"",
            marker, c->id, ms, buf_str(&b), ctr_stderr(c));
}

/* Runs the bundle to completion; returns the exit code, stdout in *out and
 * stderr in *err (both newly allocated). */
static int ctr_run(const char *bundle, const char *name, long ms, char **out, char **err)
{
    struct ctr *c = xcalloc(1, sizeof *c);
    ctr_start(c, bundle, name);
    struct buf b;
    buf_init(&b, 1 << 20);
    int64_t deadline = mono_ms() + ms;
    for (;;) {
        int64_t left = deadline - mono_ms();
        struct pollfd pf = {c->out, POLLIN, 0};
        if (left <= 0 || poll(&pf, 1, (int)left) <= 0)
            th_fail(__FILE__, __LINE__, "%s did not finish within %ld ms", name, ms);
        char chunk[4096];
        ssize_t n = read(c->out, chunk, sizeof chunk);
        if (n <= 0)
            break; /* EOF: the container's process closed its stdout */
        ASSERT_OK(buf_append(&b, chunk, (size_t)n));
    }
    int64_t left = deadline - mono_ms();
    int rc = ctr_wait(c, left < 1000 ? 1000 : (long)left);
    if (rc < 0)
        th_fail(__FILE__, __LINE__, "%s did not exit within %ld ms", name, ms);
    *out = buf_steal(&b);
    *err = ctr_stderr(c);
    free(c);
    return rc;
}

/* Joins the container's network namespace (this test process only). runc
 * writes its pid file (atomically, by rename) after starting the process, so
 * the ready line can come first: poll for the file, with a deadline. */
static void ctr_join_net(const struct ctr *c)
{
    int64_t deadline = mono_ms() + 10000;
    while (access(c->pidfile, R_OK) != 0) {
        if (mono_ms() > deadline)
            th_fail(__FILE__, __LINE__, "runc wrote no %s within 10 s", c->pidfile);
        struct timespec tick = {0, 5 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    char *pid = slurp(c->pidfile);
    char *ns = xasprintf("/proc/%s/ns/net", pid);
    int fd = open(ns, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        th_fail(__FILE__, __LINE__, "open %s: %s", ns, strerror(errno));
    ASSERT_OK(setns(fd, CLONE_NEWNET));
    close(fd);
    free(ns);
    free(pid);
}

/* SIGTERM to the container; tern-sandboxd must exit 0 within 10 s. */
static void ctr_stop(struct ctr *c)
{
    sh("runc --root '%s' kill '%s' TERM", c->root, c->id);
    int rc = ctr_wait(c, 10000);
    if (rc != 0)
        th_fail(__FILE__, __LINE__, "%s: exit %d after SIGTERM; stderr \"%s\"", c->id, rc,
                ctr_stderr(c));
}

/* ---- a kubelet's part: pod spec -> OCI runtime config ---------------- */

static const cJSON *find_obj(const cJSON *objs, const char *kind, const char *name)
{
    const cJSON *o;
    cJSON_ArrayForEach(o, objs)
    {
        const char *k = jstr(o, "kind");
        const char *n = jstr(json_get(o, "metadata"), "name");
        if (k && n && name && strcmp(k, kind) == 0 && strcmp(n, name) == 0)
            return o;
    }
    th_fail(__FILE__, __LINE__, "no %s %s among the objects", kind, name);
}

/* Writes a ConfigMap's or Secret's data (stringData for Secrets) as files. */
static void write_data(const char *dir, const cJSON *obj, mode_t mode, gid_t gid)
{
    static const char *const members[] = {"data", "stringData"};
    for (size_t i = 0; i < 2; i++) {
        const cJSON *kv;
        cJSON_ArrayForEach(kv, json_get(obj, members[i]))
        {
            ASSERT_TRUE(cJSON_IsString(kv));
            if (strcmp(jstr(obj, "kind"), "Secret") == 0 && i == 0)
                th_fail(__FILE__, __LINE__, "base64 Secret data is not needed here");
            char *p = xasprintf("%s/%s", dir, kv->string);
            spit(p, kv->valuestring, mode, gid);
            free(p);
        }
    }
}

static int64_t num(const cJSON *o, const char *k, int64_t dflt)
{
    const cJSON *it = json_get(o, k);
    int64_t v = dflt;
    if (it)
        ASSERT_OK(json_item_int64(it, &v));
    return v;
}

/* Creates the host side of every volume of the pod under dir, as a kubelet
 * would with fsGroup: returns a JSON object volume name -> host path. */
static cJSON *materialise_volumes(const cJSON *podspec, const cJSON *objs, const char *dir,
                                  gid_t fsgroup)
{
    cJSON *paths = cJSON_CreateObject();
    const cJSON *v;
    cJSON_ArrayForEach(v, json_get(podspec, "volumes"))
    {
        const char *name = jstr(v, "name");
        char *host = xasprintf("%s/vol-%s", dir, name);
        ASSERT_OK(mkdir(host, 0755));
        const cJSON *src;
        if (json_get(v, "persistentVolumeClaim")) {
            /* a fresh volume, group-owned by fsGroup with the setgid bit */
            ASSERT_OK(chown(host, 0, fsgroup));
            ASSERT_OK(chmod(host, 02775));
        } else if (json_get(v, "emptyDir")) {
            ASSERT_OK(chmod(host, 0777));
        } else if ((src = json_get(v, "secret"))) {
            const cJSON *s = find_obj(objs, "Secret", jstr(src, "secretName"));
            write_data(host, s, (mode_t)num(src, "defaultMode", 0644), fsgroup);
        } else if ((src = json_get(v, "configMap"))) {
            write_data(host, find_obj(objs, "ConfigMap", jstr(src, "name")), 0644, fsgroup);
        } else if ((src = json_get(v, "projected"))) {
            const cJSON *s;
            cJSON_ArrayForEach(s, json_get(src, "sources"))
            {
                const cJSON *cm = json_get(s, "configMap");
                ASSERT_NOT_NULL(cm);
                write_data(host, find_obj(objs, "ConfigMap", jstr(cm, "name")), 0644, fsgroup);
            }
        } else {
            th_fail(__FILE__, __LINE__, "volume %s: a source this test does not know", name);
        }
        json_add_string(paths, name, host);
        free(host);
    }
    return paths;
}

static const char *env_value(const cJSON *e, const cJSON *pod_meta, const cJSON *objs)
{
    const char *v = jstr(e, "value");
    if (v)
        return v;
    const cJSON *from = json_get(e, "valueFrom");
    const cJSON *f;
    if ((f = json_get(from, "fieldRef"))) {
        const char *path = jstr(f, "fieldPath");
        if (strcmp(path, "status.podIP") == 0)
            return "127.0.0.1"; /* the container's own network namespace */
        if (strcmp(path, "metadata.name") == 0 || strcmp(path, "metadata.namespace") == 0)
            return jstr(pod_meta, path + strlen("metadata."));
        th_fail(__FILE__, __LINE__, "fieldRef %s is not known here", path);
    }
    if ((f = json_get(from, "secretKeyRef"))) {
        const cJSON *s = find_obj(objs, "Secret", jstr(f, "name"));
        v = jstr(json_get(s, "stringData"), jstr(f, "key"));
        ASSERT_NOT_NULL(v);
        return v;
    }
    th_fail(__FILE__, __LINE__, "env %s: a source this test does not know", jstr(e, "name"));
}

/* Kubernetes' $(VAR) expansion over the container's own env ($$ is $). */
static char *expand(const char *s, const cJSON *env_obj)
{
    struct buf b;
    buf_init(&b, 1 << 16);
    while (*s) {
        if (s[0] == '$' && s[1] == '$') {
            buf_putc(&b, '$');
            s += 2;
        } else if (s[0] == '$' && s[1] == '(' && strchr(s, ')')) {
            const char *end = strchr(s, ')');
            char *name = xstrndup(s + 2, (size_t)(end - s - 2));
            const char *v = jstr(env_obj, name);
            if (v)
                buf_puts(&b, v);
            else
                buf_append(&b, s, (size_t)(end - s + 1));
            free(name);
            s = end + 1;
        } else {
            buf_putc(&b, *s++);
        }
    }
    return buf_steal(&b);
}

/* Rewrites the image's runtime config (umoci's) into what a kubelet runs for
 * container ctr of the pod. */
static void apply_pod(cJSON *cfg, const cJSON *pod_meta, const cJSON *podspec, const cJSON *ctr,
                      const cJSON *objs, const char *dir)
{
    cJSON *proc = proc_of(cfg);
    const cJSON *psc = json_get(podspec, "securityContext");
    const cJSON *csc = json_get(ctr, "securityContext");
    int64_t uid = num(csc, "runAsUser", num(psc, "runAsUser", -1));
    int64_t gid = num(csc, "runAsGroup", num(psc, "runAsGroup", -1));
    int64_t fsgroup = num(psc, "fsGroup", -1);
    ASSERT_TRUE(uid >= 0 && gid >= 0 && fsgroup >= 0); /* Tern's specs set them all */
    if (cJSON_IsTrue(json_get(psc, "runAsNonRoot")) || cJSON_IsTrue(json_get(csc, "runAsNonRoot")))
        ASSERT_NE_INT(uid, 0);
    cJSON *user = cJSON_CreateObject();
    cJSON_AddNumberToObject(user, "uid", (double)uid);
    cJSON_AddNumberToObject(user, "gid", (double)gid);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(user, "additionalGids"),
                         cJSON_CreateNumber((double)fsgroup));
    cJSON_ReplaceItemInObjectCaseSensitive(proc, "user", user);

    /* env: the image's, then the container's (which wins) */
    cJSON *cenv = cJSON_CreateObject();
    const cJSON *e;
    cJSON_ArrayForEach(e, json_get(ctr, "env"))
        json_add_string(cenv, jstr(e, "name"), env_value(e, pod_meta, objs));
    cJSON *env = cJSON_CreateArray();
    cJSON_ArrayForEach(e, json_get(proc, "env"))
    {
        size_t n = strcspn(e->valuestring, "=");
        char *name = xstrndup(e->valuestring, n);
        if (!json_get(cenv, name))
            cJSON_AddItemToArray(env, cJSON_CreateString(e->valuestring));
        free(name);
    }
    cJSON_ArrayForEach(e, cenv)
    {
        char *kv = xasprintf("%s=%s", e->string, e->valuestring);
        cJSON_AddItemToArray(env, cJSON_CreateString(kv));
        free(kv);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(proc, "env", env);

    /* command + args replace the image's entrypoint and cmd */
    const cJSON *cmd = json_get(ctr, "command");
    ASSERT_TRUE(cJSON_GetArraySize(cmd) > 0); /* Tern's specs always name the program */
    cJSON *args = cJSON_CreateArray();
    const cJSON *a;
    cJSON_ArrayForEach(a, cmd) cJSON_AddItemToArray(args, cJSON_CreateString(a->valuestring));
    cJSON_ArrayForEach(a, json_get(ctr, "args"))
    {
        char *x = expand(a->valuestring, cenv);
        cJSON_AddItemToArray(args, cJSON_CreateString(x));
        free(x);
    }
    cJSON_ReplaceItemInObjectCaseSensitive(proc, "args", args);
    cJSON_Delete(cenv);

    /* securityContext: no capabilities, no new privileges, read-only root */
    const cJSON *drop = json_get(json_get(csc, "capabilities"), "drop");
    ASSERT_EQ_INT(cJSON_GetArraySize(drop), 1);
    ASSERT_EQ_STR(cJSON_GetArrayItem(drop, 0)->valuestring, "ALL");
    cJSON *caps = cJSON_CreateObject();
    static const char *const sets[] = {"bounding", "effective", "inheritable", "permitted",
                                       "ambient"};
    for (size_t i = 0; i < 5; i++)
        cJSON_AddArrayToObject(caps, sets[i]);
    cJSON_ReplaceItemInObjectCaseSensitive(proc, "capabilities", caps);
    ASSERT_TRUE(cJSON_IsFalse(json_get(csc, "allowPrivilegeEscalation")));
    cJSON_ReplaceItemInObjectCaseSensitive(proc, "noNewPrivileges", cJSON_CreateTrue());
    cJSON *root = (cJSON *)json_get(cfg, "root");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "readonly");
    cJSON_AddBoolToObject(root, "readonly", cJSON_IsTrue(json_get(csc, "readOnlyRootFilesystem")));

    /* volumes and mounts, in the pod's order */
    cJSON *paths = materialise_volumes(podspec, objs, dir, (gid_t)fsgroup);
    const cJSON *m;
    cJSON_ArrayForEach(m, json_get(ctr, "volumeMounts"))
    {
        const char *host = jstr(paths, jstr(m, "name"));
        ASSERT_NOT_NULL(host);
        const char *sub = jstr(m, "subPath");
        char *src = sub ? xasprintf("%s/%s", host, sub) : xstrdup(host);
        add_bind(cfg, jstr(m, "mountPath"), src, cJSON_IsTrue(json_get(m, "readOnly")));
        free(src);
    }
    cJSON_Delete(paths);
}

/* The session of examples/<file> (uid as the API server would set it), and
 * the example's other objects appended to objs. */
static struct session_spec *load_session(const char *path, cJSON *objs)
{
    cJSON *docs = yaml_docs(path);
    cJSON *obj = NULL;
    cJSON *d;
    cJSON_ArrayForEach(d, docs)
    {
        const char *kind = jstr(d, "kind");
        if (kind && strcmp(kind, "AgentSession") == 0)
            obj = d;
        else
            cJSON_AddItemToArray(objs, json_dup(d));
    }
    ASSERT_NOT_NULL(obj);
    cJSON *meta = (cJSON *)json_get(obj, "metadata");
    json_add_string(meta, "uid", "5e55-10n-u1d");
    if (!json_get(meta, "namespace"))
        json_add_string(meta, "namespace", "default");
    struct session_spec *s = NULL;
    struct tern_err e = {0};
    if (session_spec_parse(obj, &s, &e))
        th_fail(__FILE__, __LINE__, "%s: %s", path, e.msg);
    cJSON_Delete(docs);
    return s;
}

static const struct children_config children_cfg = {
    .runner_image = "unused:here",
    .sandbox_image = "unused:here",
    .etcd_endpoints = "http://127.0.0.1:2379",
    .runner_service_account = "tern-runner",
    .turn_backoff_limit = 4,
    .job_ttl_seconds = 3600,
};

/* ---- the sandbox API -------------------------------------------------- */

struct reply {
    long status;
    char *body;
    cJSON *json;
};

static void reply_done(struct reply *r)
{
    free(r->body);
    cJSON_Delete(r->json);
    memset(r, 0, sizeof *r);
}

static long call(const char *method, const char *path, const char *body, const char *token,
                 struct reply *out)
{
    struct httpc *c = httpc_new();
    char *url = xasprintf("http://127.0.0.1:%d%s", SANDBOX_PORT, path);
    char *auth = token ? xasprintf("Authorization: Bearer %s", token) : NULL;
    const char *hdrs[2] = {auth, NULL};
    struct httpc_request rq = {.method = method,
                               .url = url,
                               .headers = hdrs,
                               .body = body,
                               .body_len = body ? strlen(body) : 0,
                               .timeout_ms = 60000};
    struct httpc_response resp = {0};
    struct tern_err err = {0};
    int rc = httpc_do(c, &rq, &resp, &err);
    if (rc != 0)
        th_fail(__FILE__, __LINE__, "%s %s: %s", method, url, err.msg);
    memset(out, 0, sizeof *out);
    out->status = resp.status;
    out->body = xstrndup(resp.body.data ? resp.body.data : "", resp.body.len);
    if (resp.body.len && out->body[0] == '{')
        json_parse(out->body, resp.body.len, &out->json, NULL);
    httpc_response_done(&resp);
    free(auth);
    free(url);
    httpc_free(c);
    return out->status;
}

/* POST /v1/exec of a shell command; returns the answer (status 200 and
 * "completed" checked). */
static void exec_sh(const char *cmd, struct reply *r)
{
    cJSON *body = cJSON_CreateObject();
    json_add_string(body, "cmd", cmd);
    char *text = json_print(body);
    long st = call("POST", "/v1/exec", text, TOKEN, r);
    if (st != 200 || !jstr(r->json, "status") || strcmp(jstr(r->json, "status"), "completed") != 0)
        th_fail(__FILE__, __LINE__, "exec %s: %ld %s", cmd, st, r->body);
    free(text);
    cJSON_Delete(body);
}

static int64_t exit_code(const struct reply *r)
{
    return num(r->json, "exitCode", -999);
}

/* Runs cmd and checks its exit code and (when want_out is not NULL) that its
 * stdout contains want_out. */
static void expect_exec(const char *cmd, int64_t want_exit, const char *want_out)
{
    struct reply r;
    exec_sh(cmd, &r);
    if (exit_code(&r) != want_exit)
        th_fail(__FILE__, __LINE__, "exec %s: exit %lld, expected %lld; stderr \"%s\"", cmd,
                (long long)exit_code(&r), (long long)want_exit, jstr(r.json, "stderr"));
    if (want_out)
        ASSERT_CONTAINS(jstr(r.json, "stdout"), want_out);
    reply_done(&r);
}

/* What every sandbox image must do: authenticate, run commands as the
 * contract's user, serve files, keep the read-only parts read-only. task is
 * a line of task.md; input_file a file under input/ with input_text in it. */
static void smoke(const char *task, const char *input_file, const char *input_text)
{
    struct reply r;
    ASSERT_EQ_INT(call("GET", "/healthz", NULL, NULL, &r), 401);
    ASSERT_EQ_STR(jstr(json_get(r.json, "error"), "code"), "unauthorized");
    reply_done(&r);
    ASSERT_EQ_INT(call("GET", "/healthz", NULL, "not-" TOKEN, &r), 401);
    reply_done(&r);
    ASSERT_EQ_INT(call("GET", "/healthz", NULL, TOKEN, &r), 200);
    reply_done(&r);
    expect_exec("id -u && id -g", 0, SANDBOX_USER_ID "\n" STR(SANDBOX_GID) "\n");
    expect_exec("cat task.md", 0, task);
    char *cmd = xasprintf("cat input/%s", input_file);
    expect_exec(cmd, 0, input_text);
    free(cmd);
    expect_exec("echo made in the image > output/smoke.txt && cat output/smoke.txt", 0,
                "made in the image\n");
    ASSERT_EQ_INT(call("GET", "/v1/files/output/smoke.txt", NULL, TOKEN, &r), 200);
    ASSERT_EQ_STR(r.body, "made in the image\n");
    reply_done(&r);
    ASSERT_EQ_INT(call("PUT", "/v1/files/input/planted.txt", "x", TOKEN, &r), 403);
    ASSERT_EQ_STR(jstr(json_get(r.json, "error"), "code"), "read_only");
    reply_done(&r);
    /* a command cannot write there either (a read-only mount, or Landlock) */
    struct reply x;
    exec_sh("echo x > input/planted.txt", &x);
    ASSERT_NE_INT(exit_code(&x), 0);
    reply_done(&x);
    ASSERT_EQ_INT(call("GET", "/v1/files/input/planted.txt", NULL, TOKEN, &r), 404);
    reply_done(&r);
}

/* The python image's tools, run the way an agent runs them. */
static void python_tools(void)
{
    expect_exec("python3 -c 'import sys, venv; print(6 * 7, sys.version_info[0])'", 0, "42 3\n");
    expect_exec("printf 'int main(void) { return 7; }\\n' > output/seven.c && "
                "gcc -O2 -o output/seven output/seven.c && ./output/seven",
                7, NULL);
    expect_exec("printf 'int main() {}\\n' > output/e.cc && g++ -o output/e output/e.cc && "
                "make --version",
                0, "GNU Make");
    expect_exec("git init -q output/repo && cd output/repo && echo hi > f && git add f && "
                "git -c user.name=t -c user.email=t@e commit -qm one && git log --format=%s",
                0, "one\n");
}

/* ---- the tests -------------------------------------------------------- */

static void check_sandbox_config(const char *ref)
{
    cJSON *cfg = image_config(ref);
    ASSERT_EQ_STR(jstr(cfg, "User"), SANDBOX_USER_ID ":" STR(SANDBOX_GID));
    ASSERT_EQ_STR(jstr(cfg, "WorkingDir"), SANDBOX_WORKSPACE);
    ASSERT_NOT_NULL(json_get(json_get(cfg, "ExposedPorts"), STR(SANDBOX_PORT) "/tcp"));
    char *ep = joined(json_get(cfg, "Entrypoint"));
    ASSERT_EQ_STR(ep, "[" SANDBOX_BINARY
                      "] [--listen] [:" STR(SANDBOX_PORT) "] [--token-file] "
                                                          "[" SANDBOX_TOKEN_FILE
                                                          "] [--workspace] [" SANDBOX_WORKSPACE "] "
                                                          "[--writable] [" SANDBOX_WRITABLE_DEFAULT
                                                          "]");
    char *env = joined(json_get(cfg, "Env"));
    ASSERT_CONTAINS(env, ":/usr/local/bin:"); /* the pod's command is a bare tern-sandboxd */
    free(env);
    free(ep);
    cJSON_Delete(cfg);
}

TEST(archives_carry_the_names_and_config_the_deployments_use)
{
    char *tern = image_ref("");
    char *base = image_ref("-sandbox-base");
    char *python = image_ref("-sandbox-python");
    need_archive(tern);
    need_archive(base);
    need_archive(python);
    /* the chart's default sandbox image is the python image, same version */
    cJSON *values = yaml_docs("charts/tern/values.yaml");
    ASSERT_EQ_STR(jstr(json_get(cJSON_GetArrayItem(values, 0), "sandbox"), "image"), python);
    cJSON_Delete(values);
    /* and the kustomize base deploys the same names */
    char *kbase = slurp("deploy/base/operator.yaml");
    char *s = xasprintf("image: %s\n", tern);
    ASSERT_CONTAINS(kbase, s);
    free(s);
    s = xasprintf("--runner-image=%s\n", tern);
    ASSERT_CONTAINS(kbase, s);
    free(s);
    s = xasprintf("--sandbox-image=%s\n", python);
    ASSERT_CONTAINS(kbase, s);
    free(s);
    free(kbase);

    cJSON *cfg = image_config(tern);
    ASSERT_EQ_STR(jstr(cfg, "User"), "65532:65532"); /* the Deployment's and Jobs' runAsUser */
    char *ep = joined(json_get(cfg, "Entrypoint"));
    ASSERT_EQ_STR(ep, "[/usr/local/bin/tern-operator]");
    free(ep);
    char *env = joined(json_get(cfg, "Env"));
    ASSERT_CONTAINS(env, ":/usr/local/bin:"); /* command: [tern-operator], [tern-runner] */
    free(env);
    cJSON_Delete(cfg);
    check_sandbox_config(base);
    check_sandbox_config(python);
    free(tern);
    free(base);
    free(python);
}

/* The image's ENTRYPOINT as `docker run` would start it, with a token and a
 * workspace (task.md and input/ root-owned, as mounted read-only parts are)
 * bind-mounted at the contract's paths. */
static void sandbox_entrypoint(const char *image, bool tools)
{
    need_runtime();
    char *ref = image_ref(image);
    need_archive(ref);
    char *bundle = unpack(ref, "img");
    cJSON *cfg = bundle_config(bundle);
    const char *tmp = th_tmpdir();
    char *tokdir = xasprintf("%s/token", tmp);
    char *ws = xasprintf("%s/workspace", tmp);
    ASSERT_OK(mkdir(tokdir, 0755));
    char *tokfile = xasprintf("%s/token", tokdir);
    spit(tokfile, TOKEN "\n", 0440, SANDBOX_GID);
    sh("mkdir -p '%s/input' && echo 'Fix the flaky test' > '%s/task.md' && "
       "echo 'the diff' > '%s/input/pr.diff' && chown %d:%d '%s' && chmod 0755 '%s'",
       ws, ws, ws, SANDBOX_UID, SANDBOX_GID, ws, ws);
    add_bind(cfg, SANDBOX_TOKEN_DIR, tokdir, true);
    add_bind(cfg, SANDBOX_WORKSPACE, ws, false);
    bundle_save(bundle, cfg);
    cJSON_Delete(cfg);

    struct ctr c;
    ctr_start(&c, bundle, "sandboxd");
    char *line = ctr_wait_line(&c, "tern-sandboxd ready addr=", 20000);
    ASSERT_CONTAINS(line, ":" STR(SANDBOX_PORT));
    free(line);
    ctr_join_net(&c);
    smoke("Fix the flaky test", "pr.diff", "the diff");
    expect_exec(ROOT_MOUNT, 0, "root rw,"); /* docker run: a writable root */
    if (tools)
        python_tools();
    ctr_stop(&c);
    free(tokfile);
    free(ws);
    free(tokdir);
    free(bundle);
    free(ref);
}

/* The sandbox pod the operator creates for examples/context-skills-memory.yaml,
 * with this image, run as a kubelet would. */
static void sandbox_pod(const char *image, bool tools)
{
    need_runtime();
    char *ref = image_ref(image);
    need_archive(ref);
    cJSON *objs = cJSON_CreateArray();
    struct session_spec *s = load_session("examples/context-skills-memory.yaml", objs);
    cJSON_AddItemToArray(objs, children_token_secret(s, TOKEN));
    cJSON_AddItemToArray(objs, children_task_configmap(s));
    cJSON *pod = children_sandbox_pod(s, &children_cfg);
    const cJSON *podspec = json_get(pod, "spec");
    const cJSON *ctr = cJSON_GetArrayItem(json_get(podspec, "containers"), 0);

    char *bundle = unpack(ref, "img");
    cJSON *cfg = bundle_config(bundle);
    apply_pod(cfg, json_get(pod, "metadata"), podspec, ctr, objs, th_tmpdir());
    bundle_save(bundle, cfg);
    cJSON_Delete(cfg);

    struct ctr c;
    ctr_start(&c, bundle, "sandbox-pod");
    char *line = ctr_wait_line(&c, "tern-sandboxd ready addr=", 20000);
    ASSERT_CONTAINS(line, "addr=127.0.0.1:" STR(SANDBOX_PORT));
    free(line);
    ctr_join_net(&c);
    smoke("Review PR 42 and propose fixes", "pr-42.diff", "strtol");
    /* the other read-only mounts; the example makes only output/ writable */
    expect_exec("cat skills/review-skill/SKILL.md simple.md", 0, "Team A conventions");
    struct reply r;
    ASSERT_EQ_INT(call("PUT", "/v1/files/working/notes.txt", "x", TOKEN, &r), 403);
    reply_done(&r);
    /* the root filesystem is mounted read-only; /tmp (an emptyDir) is writable */
    expect_exec(ROOT_MOUNT " && touch /tmp/ok && echo tmp-ok", 0, "root ro,");
    expect_exec("touch /tmp/ok && echo tmp-ok", 0, "tmp-ok\n");
    if (tools)
        python_tools();
    ctr_stop(&c);
    cJSON_Delete(pod);
    session_spec_free(s);
    cJSON_Delete(objs);
    free(bundle);
    free(ref);
}

TEST_T(sandbox_base_serves_from_its_entrypoint, 120)
{
    sandbox_entrypoint("-sandbox-base", false);
}

TEST_T(sandbox_base_serves_as_the_operator_pod, 120)
{
    sandbox_pod("-sandbox-base", false);
}

TEST_T(sandbox_python_serves_from_its_entrypoint_with_its_tools, 180)
{
    sandbox_entrypoint("-sandbox-python", true);
}

TEST_T(sandbox_python_serves_as_the_operator_pod_with_its_tools, 180)
{
    sandbox_pod("-sandbox-python", true);
}

TEST_T(runner_runs_as_the_turn_job_and_prints_its_usage, 120)
{
    need_runtime();
    char *ref = image_ref("");
    need_archive(ref);
    cJSON *objs = cJSON_CreateArray();
    struct session_spec *s = load_session("examples/demo.yaml", objs);
    cJSON_AddItemToArray(objs, children_token_secret(s, TOKEN));
    cJSON *key = cJSON_CreateObject();
    json_add_string(key, "kind", "Secret");
    json_add_string(cJSON_AddObjectToObject(key, "metadata"), "name", "demo-model");
    json_add_string(cJSON_AddObjectToObject(key, "stringData"), "api-key", "not-a-real-key");
    cJSON_AddItemToArray(objs, key);
    cJSON *gitkey = cJSON_CreateObject(); /* the demo's publish remote's token */
    json_add_string(gitkey, "kind", "Secret");
    json_add_string(cJSON_AddObjectToObject(gitkey, "metadata"), "name", "demo-git");
    json_add_string(cJSON_AddObjectToObject(gitkey, "stringData"), "token", "not-a-real-token");
    cJSON_AddItemToArray(objs, gitkey);
    cJSON *job = children_turn_job(s, &children_cfg, 1, NULL);
    const cJSON *tmpl = json_get(json_get(job, "spec"), "template");
    const cJSON *podspec = json_get(tmpl, "spec");
    const cJSON *ctr = cJSON_GetArrayItem(json_get(podspec, "containers"), 0);

    char *bundle = unpack(ref, "img");
    cJSON *cfg = bundle_config(bundle);
    apply_pod(cfg, json_get(job, "metadata"), podspec, ctr, objs, th_tmpdir());
    bundle_save(bundle, cfg);
    char *out = NULL, *err = NULL;
    /* no API server here: the turn stops where it looks for one, retryably */
    int rc = ctr_run(bundle, "turn", 60000, &out, &err);
    if (rc != 75)
        th_fail(__FILE__, __LINE__, "tern-runner turn: exit %d, expected 75; stderr \"%s\"", rc,
                err);
    ASSERT_CONTAINS(err, "\"comp\":\"tern-runner\"");
    ASSERT_CONTAINS(err, "no Kubernetes configuration");
    free(out);
    free(err);

    /* the same container without arguments: the usage, exit 78 */
    const char *bare[] = {"tern-runner", NULL};
    set_args(cfg, bare);
    bundle_save(bundle, cfg);
    rc = ctr_run(bundle, "bare", 60000, &out, &err);
    ASSERT_EQ_INT(rc, CHILDREN_RUNNER_EXIT_CONFIG);
    ASSERT_CONTAINS(err, "usage: tern-runner turn | copy --from ADDR --to ADDR");
    free(out);
    free(err);

    /* git, for publish_branch (pushed from the runner pod), and the
     * remote's token where the runner reads it */
    const char *git[] = {"sh", "-c",
                         "git --version && cat /var/run/tern/trusted/publish/origin/token && "
                         "touch /tmp/w",
                         NULL};
    set_args(cfg, git);
    bundle_save(bundle, cfg);
    rc = ctr_run(bundle, "git", 60000, &out, &err);
    if (rc != 0)
        th_fail(__FILE__, __LINE__, "git in the runner container: exit %d: %s", rc, err);
    ASSERT_CONTAINS(out, "git version");
    ASSERT_CONTAINS(out, "not-a-real-token");
    free(out);
    free(err);
    cJSON_Delete(cfg);
    cJSON_Delete(job);
    session_spec_free(s);
    cJSON_Delete(objs);
    free(bundle);
    free(ref);
}

TEST_T(tern_image_entrypoint_is_the_operator_and_its_binaries_run, 120)
{
    need_runtime();
    char *ref = image_ref("");
    need_archive(ref);
    char *bundle = unpack(ref, "img");
    cJSON *cfg = bundle_config(bundle);
    const cJSON *uid = json_get(json_get(proc_of(cfg), "user"), "uid");
    ASSERT_EQ_INT(uid ? uid->valuedouble : -1, 65532);
    /* the image's ENTRYPOINT with one argument, as `docker run IMAGE --help` */
    cJSON *args = (cJSON *)json_get(proc_of(cfg), "args");
    ASSERT_EQ_INT(cJSON_GetArraySize(args), 1);
    cJSON_AddItemToArray(args, cJSON_CreateString("--help"));
    bundle_save(bundle, cfg);
    char *out = NULL, *err = NULL;
    ASSERT_EQ_INT(ctr_run(bundle, "operator", 60000, &out, &err), 0);
    ASSERT_CONTAINS(out, "usage: tern-operator");
    ASSERT_CONTAINS(out, "--sandbox-image");
    free(out);
    free(err);

    const char *kubectl_tern[] = {"kubectl-tern", "--help", NULL};
    set_args(cfg, kubectl_tern);
    bundle_save(bundle, cfg);
    ASSERT_EQ_INT(ctr_run(bundle, "kubectl-tern", 60000, &out, &err), 0);
    ASSERT_CONTAINS(out, "kubectl tern");
    free(out);
    free(err);

    const char *pki[] = {"tern-pki", "--no-such-flag", NULL};
    set_args(cfg, pki);
    bundle_save(bundle, cfg);
    ASSERT_EQ_INT(ctr_run(bundle, "pki", 60000, &out, &err), 2);
    ASSERT_CONTAINS(err, "usage: tern-pki");
    free(out);
    free(err);

    const char *fakellm[] = {"tern-fakellm", NULL};
    set_args(cfg, fakellm);
    bundle_save(bundle, cfg);
    ASSERT_EQ_INT(ctr_run(bundle, "fakellm", 60000, &out, &err), 2);
    ASSERT_CONTAINS(err, "usage: tern-fakellm");
    free(out);
    free(err);
    cJSON_Delete(cfg);
    free(bundle);
    free(ref);
}
