/* Unit tests for the kubelet's pure parts: podplan (sandbox argv, env,
 * volume files, quantities, $(VAR) expansion), podstatus (phase,
 * conditions) and kubelet_log_path. */
#include "harness.h"

#include "base/buf.h"
#include "base/mem.h"
#include "devctl/kobj.h"
#include "json/json.h"
#include "devctl/fsutil.h"
#include "kubelet/kubelet.h"
#include "kubelet/podlog.h"
#include "kubelet/podplan.h"
#include "kubelet/podstatus.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>

static cJSON *parse(const char *s)
{
    cJSON *j = NULL;
    struct tern_err e;
    if (json_parse(s, strlen(s), &j, &e) != 0)
        th_fail(__FILE__, __LINE__, "bad json: %s: %s", e.msg, s);
    return j;
}

/* argv joined with spaces */
static char *joined(char **v)
{
    struct buf b;
    buf_init(&b, 1u << 20);
    for (char **p = v; *p; p++)
        buf_printf(&b, "%s ", *p);
    return buf_steal(&b);
}

static const char *env_of(char **envp, const char *k)
{
    size_t kl = strlen(k);
    for (char **p = envp; *p; p++)
        if (strncmp(*p, k, kl) == 0 && (*p)[kl] == '=')
            return *p + kl + 1;
    return NULL;
}

struct fixture {
    cJSON *pod, *cms, *secrets, *pvcs;
    struct podplan_in in;
};

static void fixture(struct fixture *f, const char *pod)
{
    f->pod = parse(pod);
    f->cms = parse("[{\"metadata\":{\"name\":\"cfg\"},\"data\":{\"a\":\"1\",\"b\":\"2\"}}]");
    f->secrets = parse("[{\"metadata\":{\"name\":\"sec\"},\"data\":{\"k\":\"czNjcjN0\"}}]");
    f->pvcs = parse("[{\"metadata\":{\"name\":\"ws\",\"uid\":\"pvc-uid\"},\"status\":{\"phase\":"
                    "\"Bound\"}},{\"metadata\":{\"name\":\"pending\",\"uid\":\"u2\"}}]");
    f->in = (struct podplan_in){.pod = f->pod,
                                .configmaps = f->cms,
                                .secrets = f->secrets,
                                .pvcs = f->pvcs,
                                .pod_dir = "/d/pods/P",
                                .volume_root = "/d/volumes",
                                .pod_ip = "127.1.0.9",
                                .host_ip = "127.0.0.1",
                                .sa_token = "TOKEN",
                                .api_host = "127.0.0.1",
                                .api_port = 6443,
                                .bin_dir = "/b",
                                .bwrap = "/usr/bin/bwrap"};
}

static void fixture_done(struct fixture *f)
{
    cJSON_Delete(f->pod);
    cJSON_Delete(f->cms);
    cJSON_Delete(f->secrets);
    cJSON_Delete(f->pvcs);
}

#define POD(spec, c)                                                                               \
    "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"U\",\"labels\":{\"a\":\"b\"}},"  \
    "\"spec\":{" spec "\"containers\":[" c "]}}"

TEST(sandbox_argv_follows_the_spec)
{
    struct fixture f;
    fixture(&f, POD("\"securityContext\":{\"runAsNonRoot\":true},\"volumes\":[{\"name\":\"ws\","
                    "\"persistentVolumeClaim\":{\"claimName\":\"ws\"}},{\"name\":\"c\","
                    "\"configMap\":{\"name\":\"cfg\"}},{\"name\":\"e\",\"emptyDir\":{}}],",
                    "{\"name\":\"m\",\"command\":[\"run\",\"$(MODE)\"],\"args\":[\"--x=$$(MODE)\"],"
                    "\"workingDir\":\"/ws\",\"securityContext\":{\"readOnlyRootFilesystem\":true},"
                    "\"env\":[{\"name\":\"MODE\",\"value\":\"fast\"}],\"volumeMounts\":[{\"name\":"
                    "\"ws\",\"mountPath\":\"/ws\"},{\"name\":\"c\",\"mountPath\":\"/cfg\"},{\"name\":"
                    "\"e\",\"mountPath\":\"/e\",\"readOnly\":true,\"subPath\":\"sub\"}],"
                    "\"resources\":{\"limits\":{\"memory\":\"64Mi\",\"cpu\":\"500m\"}}}"));
    f.in.isolate_net = true;
    struct podplan_exec x;
    struct tern_err err;
    ASSERT_OK(podplan_exec(&f.in, cJSON_GetArrayItem(kobj_at(f.pod, "spec.containers"), 0), NULL,
                           &x, &err));
    char *a = joined(x.argv);
    ASSERT_EQ_STR(x.argv[0], "/usr/bin/bwrap");
    ASSERT_CONTAINS(a, "--unshare-pid --unshare-ipc --unshare-uts --die-with-parent --new-session "
                       "--cap-drop ALL --hostname p ");
    ASSERT_CONTAINS(a, "--unshare-user --uid 65532 --gid 65532 --unshare-net ");
    ASSERT_CONTAINS(a, "--ro-bind /usr /usr ");
    ASSERT_CONTAINS(a, "--ro-bind /b /opt/tern/bin ");
    ASSERT_CONTAINS(a, "--bind /d/volumes/ns/pvc-uid /ws ");
    ASSERT_CONTAINS(a, "--ro-bind /d/pods/P/volumes/c /cfg ");
    ASSERT_CONTAINS(a, "--ro-bind /d/pods/P/volumes/e/sub /e ");
    ASSERT_CONTAINS(a, "--ro-bind /d/pods/P/sa /var/run/secrets/kubernetes.io/serviceaccount ");
    ASSERT_CONTAINS(a, "--chdir /ws --remount-ro / -- run fast --x=$(MODE) ");
    ASSERT_EQ_INT(x.mem_limit, 64 << 20);
    ASSERT_EQ_INT(x.cpu_millis, 500);
    ASSERT_EQ_INT(x.uid, 65532);
    ASSERT_EQ_STR(env_of(x.envp, "MODE"), "fast");
    ASSERT_EQ_STR(env_of(x.envp, "KUBERNETES_SERVICE_HOST"), "127.0.0.1");
    ASSERT_EQ_STR(env_of(x.envp, "KUBERNETES_SERVICE_PORT"), "6443");
    ASSERT_CONTAINS(env_of(x.envp, "PATH"), "/opt/tern/bin:");
    free(a);
    podplan_exec_done(&x);
    fixture_done(&f);
}

TEST(env_sources_and_their_errors)
{
    struct fixture f;
    fixture(&f, POD("\"serviceAccountName\":\"bot\",",
                    "{\"name\":\"m\",\"command\":[\"x\"],\"envFrom\":[{\"configMapRef\":{\"name\":"
                    "\"cfg\"},\"prefix\":\"C_\"}],\"env\":[{\"name\":\"S\",\"valueFrom\":{"
                    "\"secretKeyRef\":{\"name\":\"sec\",\"key\":\"k\"}}},{\"name\":\"IP\","
                    "\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"status.podIP\"}}},{\"name\":\"L\","
                    "\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"metadata.labels['a']\"}}},"
                    "{\"name\":\"SA\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":"
                    "\"spec.serviceAccountName\"}}},{\"name\":\"O\",\"valueFrom\":{"
                    "\"configMapKeyRef\":{\"name\":\"none\",\"key\":\"k\",\"optional\":true}}},"
                    "{\"name\":\"MEM\",\"valueFrom\":{\"resourceFieldRef\":{\"resource\":"
                    "\"limits.memory\",\"divisor\":\"1Mi\"}}}],\"resources\":{\"limits\":{"
                    "\"memory\":\"128Mi\"}}}"));
    struct podplan_exec x;
    const cJSON *c = cJSON_GetArrayItem(kobj_at(f.pod, "spec.containers"), 0);
    ASSERT_OK(podplan_exec(&f.in, c, NULL, &x, NULL));
    ASSERT_EQ_STR(env_of(x.envp, "C_a"), "1");
    ASSERT_EQ_STR(env_of(x.envp, "S"), "s3cr3t");
    ASSERT_EQ_STR(env_of(x.envp, "IP"), "127.1.0.9");
    ASSERT_EQ_STR(env_of(x.envp, "L"), "b");
    ASSERT_EQ_STR(env_of(x.envp, "SA"), "bot");
    ASSERT_NULL(env_of(x.envp, "O"));
    ASSERT_EQ_STR(env_of(x.envp, "MEM"), "128");
    char *a = joined(x.argv);
    ASSERT_FALSE(strstr(a, "--unshare-user") != NULL); /* no uid asked: root, no caps */
    ASSERT_FALSE(strstr(a, "--unshare-net") != NULL);
    free(a);
    podplan_exec_done(&x);
    /* a missing key, a missing command */
    cJSON *bad = parse("{\"name\":\"m\",\"command\":[\"x\"],\"env\":[{\"name\":\"S\",\"valueFrom\":"
                       "{\"secretKeyRef\":{\"name\":\"sec\",\"key\":\"nope\"}}}]}");
    struct tern_err err;
    ASSERT_EQ_INT(podplan_exec(&f.in, bad, NULL, &x, &err), TERN_ENOTFOUND);
    ASSERT_CONTAINS(err.msg, "secret \"sec\": key \"nope\" not found");
    cJSON_Delete(bad);
    bad = parse("{\"name\":\"m\",\"image\":\"busybox\"}");
    ASSERT_EQ_INT(podplan_exec(&f.in, bad, NULL, &x, &err), TERN_EINVALID);
    ASSERT_CONTAINS(err.msg, "set command");
    /* an exec probe overrides the command */
    cJSON *probe = parse("[\"cat\",\"/tmp/ready\"]");
    ASSERT_OK(podplan_exec(&f.in, c, probe, &x, NULL));
    a = joined(x.argv);
    ASSERT_CONTAINS(a, "-- cat /tmp/ready ");
    free(a);
    podplan_exec_done(&x);
    cJSON_Delete(probe);
    cJSON_Delete(bad);
    fixture_done(&f);
}

TEST(volume_files)
{
    struct fixture f;
    fixture(&f, POD("\"volumes\":[{\"name\":\"c\",\"configMap\":{\"name\":\"cfg\",\"items\":[{"
                    "\"key\":\"a\",\"path\":\"dir/a.txt\",\"mode\":384}]}},{\"name\":\"s\","
                    "\"secret\":{\"secretName\":\"sec\"}},{\"name\":\"d\",\"downwardAPI\":{\"items\":"
                    "[{\"path\":\"name\",\"fieldRef\":{\"fieldPath\":\"metadata.name\"}}]}},"
                    "{\"name\":\"pr\",\"projected\":{\"sources\":[{\"serviceAccountToken\":{"
                    "\"path\":\"tok\"}},{\"configMap\":{\"name\":\"cfg\"}}]}}],",
                    "{\"name\":\"m\",\"command\":[\"x\"]}"));
    struct podplan_volumes v;
    ASSERT_OK(podplan_volumes(&f.in, &v, NULL));
    int seen = 0;
    for (size_t i = 0; i < v.nfiles; i++) {
        const struct podplan_file *fl = &v.files[i];
        if (!strcmp(fl->path, "/d/pods/P/volumes/c/dir/a.txt")) {
            ASSERT_EQ_STR(fl->data, "1");
            ASSERT_EQ_INT(fl->mode, 0600);
            seen |= 1;
        } else if (!strcmp(fl->path, "/d/pods/P/volumes/s/k")) {
            ASSERT_EQ_STR(fl->data, "s3cr3t");
            seen |= 2;
        } else if (!strcmp(fl->path, "/d/pods/P/volumes/d/name")) {
            ASSERT_EQ_STR(fl->data, "p");
            seen |= 4;
        } else if (!strcmp(fl->path, "/d/pods/P/volumes/pr/tok")) {
            ASSERT_EQ_STR(fl->data, "TOKEN");
            seen |= 8;
        } else if (!strcmp(fl->path, "/d/pods/P/sa/namespace")) {
            ASSERT_EQ_STR(fl->data, "ns");
            seen |= 16;
        }
    }
    ASSERT_EQ_INT(seen, 31);
    podplan_volumes_done(&v);
    fixture_done(&f);
    struct tern_err err;
    fixture(&f, POD("\"volumes\":[{\"name\":\"c\",\"configMap\":{\"name\":\"nope\"}}],",
                    "{\"name\":\"m\",\"command\":[\"x\"]}"));
    ASSERT_EQ_INT(podplan_volumes(&f.in, &v, &err), TERN_ENOTFOUND);
    ASSERT_CONTAINS(err.msg, "configmap \"nope\" not found");
    fixture_done(&f);
    fixture(&f, POD("\"volumes\":[{\"name\":\"c\",\"configMap\":{\"name\":\"cfg\",\"items\":[{"
                    "\"key\":\"a\",\"path\":\"../escape\"}]}}],",
                    "{\"name\":\"m\",\"command\":[\"x\"]}"));
    ASSERT_EQ_INT(podplan_volumes(&f.in, &v, NULL), TERN_EINVALID);
    fixture_done(&f);
    fixture(&f, POD("\"volumes\":[{\"name\":\"h\",\"hostPath\":{\"path\":\"/\"}}],",
                    "{\"name\":\"m\",\"command\":[\"x\"]}"));
    ASSERT_EQ_INT(podplan_volumes(&f.in, &v, NULL), TERN_EINVALID);
    char *src;
    ASSERT_EQ_INT(podplan_volume_source(&f.in, "h", &src, NULL), TERN_EINVALID);
    fixture_done(&f);
    fixture(&f, POD("\"volumes\":[{\"name\":\"w\",\"persistentVolumeClaim\":{\"claimName\":"
                    "\"pending\"}}],",
                    "{\"name\":\"m\",\"command\":[\"x\"]}"));
    ASSERT_EQ_INT(podplan_volume_source(&f.in, "w", &src, NULL), TERN_ENOTFOUND);
    fixture_done(&f);
}

TEST(quantities_and_expansion)
{
    int64_t v;
    ASSERT_OK(podplan_quantity("512Mi", 1, &v));
    ASSERT_EQ_INT(v, 512 << 20);
    ASSERT_OK(podplan_quantity("1G", 1, &v));
    ASSERT_EQ_INT(v, 1000000000);
    ASSERT_OK(podplan_quantity("1.5Gi", 1, &v));
    ASSERT_EQ_INT(v, 3LL << 29);
    ASSERT_OK(podplan_quantity("250m", 1000, &v));
    ASSERT_EQ_INT(v, 250);
    ASSERT_OK(podplan_quantity("2", 1000, &v));
    ASSERT_EQ_INT(v, 2000);
    ASSERT_EQ_INT(podplan_quantity("12Qi", 1, &v), TERN_EINVALID);
    ASSERT_EQ_INT(podplan_quantity("-1", 1, &v), TERN_EINVALID);
    ASSERT_EQ_INT(podplan_quantity("99999999999999999999Ti", 1, &v), TERN_EINVALID);
    char *env[] = {"A=1", "B=two", "A=3"};
    char *s = podplan_expand("$(A)-$(B)-$(C)-$$(A)-$(", env, 3);
    ASSERT_EQ_STR(s, "3-two-$(C)-$(A)-$(");
    free(s);
}

static struct podstatus_container C(const char *name, bool init, enum podstatus_state st,
                                    int code, bool done, bool ready)
{
    struct podstatus_container c = {.name = name, .init = init, .state = st, .done = done,
                                    .ready = ready};
    c.term.exit_code = code;
    return c;
}

TEST(phases)
{
    struct podstatus_container a[3];
    a[0] = C("i", true, PODSTATUS_TERMINATED, 0, true, false);
    a[1] = C("m", false, PODSTATUS_WAITING, 0, false, false);
    ASSERT_EQ_STR(podstatus_phase(a, 2), "Pending");
    a[1] = C("m", false, PODSTATUS_RUNNING, 0, false, true);
    ASSERT_EQ_STR(podstatus_phase(a, 2), "Running");
    a[1] = C("m", false, PODSTATUS_TERMINATED, 0, true, false);
    ASSERT_EQ_STR(podstatus_phase(a, 2), "Succeeded");
    a[2] = C("n", false, PODSTATUS_TERMINATED, 1, true, false);
    ASSERT_EQ_STR(podstatus_phase(a, 3), "Failed");
    a[2] = C("n", false, PODSTATUS_TERMINATED, 1, false, false); /* will restart */
    ASSERT_EQ_STR(podstatus_phase(a, 3), "Running");
    a[0] = C("i", true, PODSTATUS_TERMINATED, 2, true, false);
    ASSERT_EQ_STR(podstatus_phase(a, 1), "Failed");
    a[0] = C("i", true, PODSTATUS_RUNNING, 0, false, false);
    ASSERT_EQ_STR(podstatus_phase(a, 1), "Pending");
    a[0] = C("m", false, PODSTATUS_WAITING, 0, true, false); /* deleted before it started */
    ASSERT_EQ_STR(podstatus_phase(a, 1), "Failed");
}

TEST(status_object_and_conditions)
{
    cJSON *pod = parse("{\"metadata\":{\"name\":\"p\",\"uid\":\"U\"},\"spec\":{\"containers\":[{"
                       "\"name\":\"m\",\"image\":\"img\",\"resources\":{\"limits\":{\"cpu\":\"1\","
                       "\"memory\":\"1Gi\"}}}]}}");
    struct podstatus_container c = C("m", false, PODSTATUS_RUNNING, 0, false, false);
    c.started_at = 100;
    c.pid = 42;
    cJSON *st = podstatus_build(pod, &c, 1, "127.1.0.2", "127.0.0.1", true, 100);
    kobj_set_item(pod, "status", st);
    ASSERT_EQ_STR(kobj_str(pod, "status.phase"), "Running");
    ASSERT_EQ_STR(kobj_str(pod, "status.podIP"), "127.1.0.2");
    ASSERT_EQ_STR(kobj_str(pod, "status.qosClass"), "Guaranteed"); /* requests default to limits */
    ASSERT_FALSE(kobj_cond_true(pod, "Ready"));
    ASSERT_EQ_STR(kobj_str(kobj_cond(pod, "Ready"), "message"),
                  "containers with unready status: [m]");
    const cJSON *cs = cJSON_GetArrayItem(kobj_at(pod, "status.containerStatuses"), 0);
    ASSERT_EQ_STR(kobj_str(cs, "containerID"), "bwrap://42");
    ASSERT_EQ_STR(kobj_str(cs, "state.running.startedAt"), "1970-01-01T00:01:40Z");
    ASSERT_EQ_STR(kobj_str(cs, "image"), "img");
    c.ready = true;
    st = podstatus_build(pod, &c, 1, "127.1.0.2", "127.0.0.1", true, 200);
    kobj_set_item(pod, "status", st);
    ASSERT_TRUE(kobj_cond_true(pod, "Ready"));
    ASSERT_EQ_STR(kobj_str(kobj_cond(pod, "Ready"), "lastTransitionTime"), "1970-01-01T00:03:20Z");
    ASSERT_EQ_STR(kobj_str(kobj_cond(pod, "PodScheduled"), "lastTransitionTime"),
                  "1970-01-01T00:01:40Z"); /* unchanged status keeps its time */
    /* logs: current and previous */
    char *path;
    ASSERT_OK(kubelet_log_path("/D", pod, NULL, false, &path, NULL));
    ASSERT_EQ_STR(path, "/D/pods/U/logs/m/0.log");
    free(path);
    cs = cJSON_GetArrayItem(kobj_at(pod, "status.containerStatuses"), 0);
    kobj_set_int((cJSON *)cs, "restartCount", 2);
    ASSERT_OK(kubelet_log_path("/D", pod, "m", true, &path, NULL));
    ASSERT_EQ_STR(path, "/D/pods/U/logs/m/1.log");
    free(path);
    ASSERT_TRUE(kubelet_log_running(pod, "m", 2));
    ASSERT_FALSE(kubelet_log_running(pod, "m", 1));
    ASSERT_EQ_INT(kubelet_log_path("/D", pod, "nope", false, &path, NULL), TERN_ENOTFOUND);
    ASSERT_EQ_INT(kubelet_log_path("/D", pod, "../x", false, &path, NULL), TERN_EINVALID);
    cJSON_Delete(pod);
}

TEST(pod_logs_read_tail_limit_previous_and_follow)
{
    char *dir = xasprintf("%s", th_tmpdir());
    char *ldir = xasprintf("%s/pods/U/logs/m", dir);
    ASSERT_OK(fsutil_mkdirs(ldir, 0755, NULL));
    char *p0 = xasprintf("%s/0.log", ldir), *p1 = xasprintf("%s/1.log", ldir);
    ASSERT_OK(fsutil_write(p0, "a\nb\n", 4, 0644, NULL));
    ASSERT_OK(fsutil_write(p1, "x\ny\nz\n", 6, 0644, NULL));
    cJSON *pod = parse("{\"metadata\":{\"name\":\"p\",\"uid\":\"U\"},\"spec\":{\"containers\":[{"
                       "\"name\":\"m\"}]},\"status\":{\"containerStatuses\":[{\"name\":\"m\","
                       "\"restartCount\":1,\"state\":{\"running\":{}}}]}}");
    struct buf b;
    buf_init(&b, 1 << 20);
    struct podlog_opts o = {.tail_lines = -1, .limit_bytes = -1};
    ASSERT_OK(podlog_read(dir, pod, &o, &b, NULL));
    ASSERT_EQ_STR(buf_str(&b), "x\ny\nz\n");
    buf_reset(&b);
    o.tail_lines = 2;
    ASSERT_OK(podlog_read(dir, pod, &o, &b, NULL));
    ASSERT_EQ_STR(buf_str(&b), "y\nz\n");
    buf_reset(&b);
    o.tail_lines = -1;
    o.limit_bytes = 3;
    ASSERT_OK(podlog_read(dir, pod, &o, &b, NULL));
    ASSERT_EQ_STR(buf_str(&b), "x\ny");
    buf_reset(&b);
    o = (struct podlog_opts){.container = "m", .previous = true, .tail_lines = -1, .limit_bytes = -1};
    ASSERT_OK(podlog_read(dir, pod, &o, &b, NULL));
    ASSERT_EQ_STR(buf_str(&b), "a\nb\n");
    buf_reset(&b);
    /* follow from the last line, see an append, end when the container stops */
    o = (struct podlog_opts){.tail_lines = 1, .limit_bytes = -1};
    struct podlog_follow *f;
    ASSERT_OK(podlog_follow_open(dir, pod, &o, &f, NULL));
    bool done = true;
    ASSERT_OK(podlog_follow_next(f, pod, &b, &done, NULL));
    ASSERT_EQ_STR(buf_str(&b), "z\n");
    ASSERT_FALSE(done);
    int fd = open(p1, O_WRONLY | O_APPEND);
    ASSERT_EQ_INT(write(fd, "w\n", 2), 2);
    close(fd);
    ASSERT_OK(podlog_follow_next(f, pod, &b, &done, NULL));
    ASSERT_EQ_STR(buf_str(&b), "z\nw\n");
    ASSERT_FALSE(done);
    cJSON *cs = (cJSON *)cJSON_GetArrayItem(kobj_at(pod, "status.containerStatuses"), 0);
    kobj_del(cs, "state.running");
    kobj_obj(cs, "state.terminated");
    ASSERT_OK(podlog_follow_next(f, pod, &b, &done, NULL));
    ASSERT_TRUE(done);
    podlog_follow_free(f);
    buf_done(&b);
    cJSON_Delete(pod);
    free(p0);
    free(p1);
    free(ldir);
    free(dir);
}

TEST(image_references_as_a_kubelet_parses_them)
{
    static const char *good[] = {"busybox", "busybox:1.36", "tern-runner:local",
                                 "ghcr.io/tern-dev/tern-sandbox-python:0.1.0",
                                 "localhost:5000/a/b_c__d-e:v1.2-rc_3", "Registry.Example/x/y",
                                 "x@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"};
    static const char *bad[] = {"", "Busybox", "ghcr.io/Tern/x:1", "a//b", "x:", ":tag",
                                "x:tag with space", "x y", "-x", "x-", "x@sha256:12",
                                "registry:port/x"};
    char why[512];
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (!podplan_image_valid(good[i], why, sizeof why))
            th_fail(__FILE__, __LINE__, "refused %s: %s", good[i], why);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (podplan_image_valid(bad[i], why, sizeof why))
            th_fail(__FILE__, __LINE__, "accepted \"%s\"", bad[i]);
    ASSERT_TRUE(!podplan_image_valid("ghcr.io/Tern/x:1", why, sizeof why));
    ASSERT_EQ_STR(why, "Failed to apply default image tag \"ghcr.io/Tern/x:1\": couldn't parse "
                       "image name \"ghcr.io/Tern/x:1\": invalid reference format: repository "
                       "name must be lowercase");
}

TEST(pods_that_cannot_fit_are_unschedulable)
{
    cJSON *pod = NULL;
    const char *j = "{\"spec\":{\"containers\":[{\"name\":\"a\",\"resources\":{\"requests\":"
                    "{\"cpu\":\"1500m\",\"memory\":\"1Gi\"}}},{\"name\":\"b\",\"resources\":"
                    "{\"limits\":{\"cpu\":\"1\"}}}],\"initContainers\":[{\"name\":\"i\","
                    "\"resources\":{\"requests\":{\"memory\":\"3Gi\"}}}]}}";
    ASSERT_OK(json_parse(j, strlen(j), &pod, NULL));
    char why[256];
    /* 2.5 cpu (limits count as requests), max(1Gi, 3Gi) memory */
    ASSERT_TRUE(podplan_fits(pod, 2500, 3LL << 30, why, sizeof why));
    ASSERT_FALSE(podplan_fits(pod, 2000, 3LL << 30, why, sizeof why));
    ASSERT_EQ_STR(why, "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are "
                       "available: 1 No preemption victims found for incoming pod.");
    ASSERT_FALSE(podplan_fits(pod, 2000, 1LL << 30, why, sizeof why));
    ASSERT_CONTAINS(why, "1 Insufficient cpu, 1 Insufficient memory.");
    cJSON *st = podstatus_unschedulable(pod, why, 1000);
    ASSERT_EQ_STR(kobj_str(st, "phase"), "Pending");
    const cJSON *c = cJSON_GetArrayItem(kobj_at(st, "conditions"), 0);
    ASSERT_EQ_STR(kobj_str(c, "type"), "PodScheduled");
    ASSERT_EQ_STR(kobj_str(c, "status"), "False");
    ASSERT_EQ_STR(kobj_str(c, "reason"), "Unschedulable");
    cJSON_Delete(st);
    cJSON_Delete(pod);
}

TEST(termination_message_file_then_log_tail)
{
    char dir[] = "/tmp/tern-podplan-XXXXXX";
    ASSERT_NOT_NULL(mkdtemp(dir));
    char tf[128], lf[128], out[4097];
    snprintf(tf, sizeof tf, "%s/term", dir);
    snprintf(lf, sizeof lf, "%s/log", dir);
    FILE *f = fopen(lf, "w");
    for (int i = 0; i < 200; i++)
        fprintf(f, "line %d\n", i);
    fclose(f);
    f = fopen(tf, "w");
    fclose(f);
    /* empty file, a failure, the policy: the last 80 lines */
    size_t n = podlog_termination_message(tf, lf, true, 1, out, sizeof out);
    ASSERT_TRUE(n > 0);
    ASSERT_TRUE(strncmp(out, "line 120\n", 9) == 0);
    ASSERT_CONTAINS(out, "line 199\n");
    /* without the policy, or a success: nothing */
    ASSERT_EQ_INT(podlog_termination_message(tf, lf, false, 1, out, sizeof out), 0);
    ASSERT_EQ_INT(podlog_termination_message(tf, lf, true, 0, out, sizeof out), 0);
    /* the file wins, at most 4096 bytes */
    f = fopen(tf, "w");
    for (int i = 0; i < 5000; i++)
        fputc('x', f);
    fclose(f);
    ASSERT_EQ_INT(podlog_termination_message(tf, lf, true, 1, out, sizeof out), 4096);
    unlink(tf);
    unlink(lf);
    rmdir(dir);
}
