/* Integration tests of the local kubelet: real processes under bubblewrap,
 * driven with the controllers (devctl) through the in-memory object store.
 * Each test polls for a condition with a bounded deadline. */
#include "harness.h"

#include "base/mem.h"
#include "base/num.h"
#include "devctl/devctl.h"
#include "devctl/fsutil.h"
#include "devctl/kobj.h"
#include "devctl/objstore.h"
#include "devctl/satoken.h"
#include "json/json.h"
#include "kubelet/devrun.h"
#include "kubelet/kubelet.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct env {
    struct memstore *m;
    struct objstore s;
    struct devctl *d;
    struct kubelet *k;
    char dir[512];
    unsigned char key[SATOKEN_KEY_LEN];
    struct kubelet_cfg kcfg;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void need_bwrap(void)
{
    if (access("/usr/bin/bwrap", X_OK) != 0)
        TH_SKIP("bwrap not installed");
    pid_t p = fork();
    if (p == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/usr/bin/bwrap", "bwrap", "--unshare-pid", "--ro-bind", "/usr", "/usr", "--symlink",
              "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
              "--proc", "/proc", "--dev", "/dev", "/bin/true", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        TH_SKIP("bwrap cannot create namespaces here");
}

static void env_start_kubelet(struct env *e)
{
    struct tern_err err;
    int r = kubelet_new(&e->s, &e->kcfg, &e->k, &err);
    if (r)
        th_fail(__FILE__, __LINE__, "kubelet_new: %s", err.msg);
}

static void env_init(struct env *e)
{
    need_bwrap();
    memset(e, 0, sizeof *e);
    e->m = memstore_new(NULL, NULL);
    e->s = memstore_objstore(e->m);
    snprintf(e->dir, sizeof e->dir, "%s", th_tmpdir());
    char *vol = xasprintf("%s/volumes", e->dir);
    struct devctl_cfg dc = {.volume_dir = vol, .job = {0, 600}};
    e->d = devctl_new(&e->s, &dc);
    free(vol);
    memset(e->key, 7, sizeof e->key);
    e->kcfg = (struct kubelet_cfg){.dir = e->dir,
                                   .api_host = "127.0.0.1",
                                   .api_port = 6443,
                                   .ca_pem = "-----BEGIN CERTIFICATE-----\nTEST\n",
                                   .sa_key = e->key,
                                   .restart_backoff_ms = 100,
                                   .restart_backoff_max_ms = 400};
    env_start_kubelet(e);
    devctl_sync(e->d, now_ms() / 1000, NULL, NULL);
    devctl_sync(e->d, now_ms() / 1000, NULL, NULL);
}

static void env_done(struct env *e)
{
    kubelet_free(e->k);
    devctl_free(e->d);
    memstore_free(e->m);
}

static void pump_once(struct env *e)
{
    devctl_sync(e->d, now_ms() / 1000, NULL, NULL);
    kubelet_sync(e->k, now_ms(), NULL);
}

typedef bool (*cond_fn)(struct env *e, const void *arg);

/* Drives the controllers and the kubelet until cond holds or timeout. */
static bool pump(struct env *e, cond_fn cond, const void *arg, int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    while (now_ms() < end) {
        pump_once(e);
        if (cond(e, arg))
            return true;
        struct timespec ts = {0, 30 * 1000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

static cJSON *parse(const char *s)
{
    cJSON *j;
    struct tern_err e;
    if (json_parse(s, strlen(s), &j, &e) != 0)
        th_fail(__FILE__, __LINE__, "bad json: %s: %s", e.msg, s);
    return j;
}

static void create(struct env *e, const char *gvr, const char *json)
{
    cJSON *o = parse(json);
    struct tern_err err;
    const char *ns = kobj_str(o, "metadata.namespace");
    int r = objstore_create(&e->s, gvr, ns ? ns : "default", o, NULL, &err);
    if (r)
        th_fail(__FILE__, __LINE__, "create: %s", err.msg);
    cJSON_Delete(o);
}

static cJSON *get_pod(struct env *e, const char *name)
{
    cJSON *o = NULL;
    if (objstore_get(&e->s, "v1/pods", "default", name, &o, NULL) != 0)
        return NULL;
    return o;
}

static bool pod_phase(struct env *e, const void *arg)
{
    const char *const *a = arg; /* {name, phase} */
    cJSON *p = get_pod(e, a[0]);
    bool ok = p && kobj_str(p, "status.phase") && strcmp(kobj_str(p, "status.phase"), a[1]) == 0;
    cJSON_Delete(p);
    return ok;
}

static bool pod_gone(struct env *e, const void *arg)
{
    cJSON *p = get_pod(e, arg);
    cJSON_Delete(p);
    return p == NULL;
}

static bool pod_ready(struct env *e, const void *arg)
{
    cJSON *p = get_pod(e, arg);
    bool ok = p && kobj_cond_true(p, "Ready");
    cJSON_Delete(p);
    return ok;
}

static char *pod_log(struct env *e, const char *name, const char *container, bool previous)
{
    cJSON *p = get_pod(e, name);
    ASSERT_NOT_NULL(p);
    char *path = NULL, *data = NULL;
    size_t len;
    struct tern_err err;
    if (kubelet_log_path(e->dir, p, container, previous, &path, &err) != 0)
        th_fail(__FILE__, __LINE__, "log path: %s", err.msg);
    if (fsutil_read(path, 1 << 20, &data, &len, &err) != 0)
        th_fail(__FILE__, __LINE__, "log: %s", err.msg);
    free(path);
    cJSON_Delete(p);
    return data;
}

static void wait_phase(struct env *e, const char *name, const char *phase, int ms)
{
    const char *a[] = {name, phase};
    if (!pump(e, pod_phase, a, ms)) {
        cJSON *p = get_pod(e, name);
        char *s = p ? json_print(kobj_at(p, "status")) : xstrdup("(gone)");
        th_fail(__FILE__, __LINE__, "pod %s not %s: %s", name, phase, s);
    }
}

/* A port nobody listens on right now (bound to port 0, then released). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t l = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &l) != 0)
        th_fail(__FILE__, __LINE__, "no free port");
    close(fd);
    return ntohs(sa.sin_port);
}

static bool log_has(struct env *e, const void *arg)
{
    const char *const *a = arg; /* {pod, needle} */
    cJSON *p = get_pod(e, a[0]);
    char *path = NULL, *data = NULL;
    size_t len;
    bool ok = p && kubelet_log_path(e->dir, p, NULL, false, &path, NULL) == 0 &&
              fsutil_read(path, 1 << 20, &data, &len, NULL) == 0 && strstr(data, a[1]);
    free(path);
    free(data);
    cJSON_Delete(p);
    return ok;
}

#define POD(name, extra_spec, containers)                                                          \
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"" name "\",\"namespace\":"   \
    "\"default\",\"labels\":{\"app\":\"" name "\"}},\"spec\":{" extra_spec "\"containers\":["     \
    containers "]}}"

TEST_T(pod_sees_its_volumes_and_env_but_not_the_host, 60)
{
    struct env e;
    env_init(&e);
    char *secret_file = xasprintf("%s/host-secret", e.dir);
    ASSERT_OK(fsutil_write(secret_file, "x", 1, 0644, NULL));
    create(&e, "v1/configmaps",
           "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cfg\"},"
           "\"data\":{\"greeting\":\"hello-from-cm\",\"mode\":\"fast\"}}");
    create(&e, "v1/secrets",
           "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"sec\"},"
           "\"data\":{\"token\":\"czNjcjN0\"}}"); /* s3cr3t */
    create(&e, "v1/persistentvolumeclaims",
           "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{\"name\":"
           "\"ws\"},\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{\"requests\":{"
           "\"storage\":\"1Gi\"}}}}");
    char *script = xasprintf(
        "echo cm=$(cat /etc/cfg/greeting); echo sec=$(cat /etc/sec/token); "
        "echo env_sec=$TOKEN env_cm=$MODE; echo name=$MY_NAME ns=$MY_NS ip=$MY_IP node=$MY_NODE "
        "sa=$MY_SA; echo uid=$(id -u) gid=$(id -g); echo wd=$(pwd); "
        "echo k8s=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; "
        "echo sans=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace); "
        "test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token=yes; "
        "test -e %s && echo host=visible || echo host=hidden; "
        "test -e /work && echo work=visible || echo work=hidden; "
        "echo data > /ws/out.txt && echo pvc=written; "
        "touch /etc/cfg/x 2>/dev/null && echo cm=writable || echo cm=readonly; "
        "touch /usr/x 2>/dev/null && echo usr=writable || echo usr=readonly; "
        "touch /rootfile 2>/dev/null && echo root=writable || echo root=readonly; "
        "cat /etc/labels/labels",
        secret_file);
    char *pod = xasprintf(
        POD("vols", "\"securityContext\":{\"runAsUser\":1000,\"runAsGroup\":3000},"
                    "\"volumes\":[{\"name\":\"cfg\",\"configMap\":{\"name\":\"cfg\"}},"
                    "{\"name\":\"sec\",\"secret\":{\"secretName\":\"sec\"}},"
                    "{\"name\":\"ws\",\"persistentVolumeClaim\":{\"claimName\":\"ws\"}},"
                    "{\"name\":\"labels\",\"downwardAPI\":{\"items\":[{\"path\":\"labels\","
                    "\"fieldRef\":{\"fieldPath\":\"metadata.labels\"}}]}}],"
                    "\"restartPolicy\":\"Never\",",
            "{\"name\":\"main\",\"image\":\"ignored:1\",\"workingDir\":\"/ws\","
            "\"securityContext\":{\"readOnlyRootFilesystem\":true},"
            "\"command\":[\"sh\",\"-c\"],\"args\":[\"%s\"],"
            "\"volumeMounts\":[{\"name\":\"cfg\",\"mountPath\":\"/etc/cfg\"},"
            "{\"name\":\"sec\",\"mountPath\":\"/etc/sec\"},{\"name\":\"ws\",\"mountPath\":\"/ws\"},"
            "{\"name\":\"labels\",\"mountPath\":\"/etc/labels\"}],"
            "\"env\":[{\"name\":\"TOKEN\",\"valueFrom\":{\"secretKeyRef\":{\"name\":\"sec\","
            "\"key\":\"token\"}}},{\"name\":\"MODE\",\"valueFrom\":{\"configMapKeyRef\":{\"name\":"
            "\"cfg\",\"key\":\"mode\"}}},{\"name\":\"MY_NAME\",\"valueFrom\":{\"fieldRef\":{"
            "\"fieldPath\":\"metadata.name\"}}},{\"name\":\"MY_NS\",\"valueFrom\":{\"fieldRef\":{"
            "\"fieldPath\":\"metadata.namespace\"}}},{\"name\":\"MY_IP\",\"valueFrom\":{"
            "\"fieldRef\":{\"fieldPath\":\"status.podIP\"}}},{\"name\":\"MY_NODE\",\"valueFrom\":{"
            "\"fieldRef\":{\"fieldPath\":\"spec.nodeName\"}}},{\"name\":\"MY_SA\",\"valueFrom\":{"
            "\"fieldRef\":{\"fieldPath\":\"spec.serviceAccountName\"}}}]}"),
        script);
    create(&e, "v1/pods", pod);
    wait_phase(&e, "vols", "Succeeded", 20000);
    char *log = pod_log(&e, "vols", "main", false);
    ASSERT_CONTAINS(log, "cm=hello-from-cm");
    ASSERT_CONTAINS(log, "sec=s3cr3t");
    ASSERT_CONTAINS(log, "env_sec=s3cr3t env_cm=fast");
    ASSERT_CONTAINS(log, "name=vols ns=default ip=127.1.");
    ASSERT_CONTAINS(log, "node=tern-dev sa=default");
    ASSERT_CONTAINS(log, "uid=1000 gid=3000");
    ASSERT_CONTAINS(log, "wd=/ws");
    ASSERT_CONTAINS(log, "k8s=127.0.0.1:6443");
    ASSERT_CONTAINS(log, "sans=default");
    ASSERT_CONTAINS(log, "token=yes");
    ASSERT_CONTAINS(log, "host=hidden");
    ASSERT_CONTAINS(log, "work=hidden");
    ASSERT_CONTAINS(log, "pvc=written");
    ASSERT_CONTAINS(log, "cm=readonly");
    ASSERT_CONTAINS(log, "usr=readonly");
    ASSERT_CONTAINS(log, "root=readonly");
    ASSERT_CONTAINS(log, "app=\"vols\"");
    /* the PVC's directory on the host holds what the pod wrote */
    cJSON *pvc = NULL;
    ASSERT_OK(objstore_get(&e.s, "v1/persistentvolumeclaims", "default", "ws", &pvc, NULL));
    char *out = xasprintf("%s/volumes/default/%s/out.txt", e.dir, kobj_str(pvc, "metadata.uid"));
    struct stat st;
    ASSERT_OK(stat(out, &st));
    cJSON *p = get_pod(&e, "vols");
    const cJSON *cs = cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0);
    ASSERT_EQ_INT(kobj_int(cs, "state.terminated.exitCode", -1), 0);
    ASSERT_EQ_STR(kobj_str(cs, "state.terminated.reason"), "Completed");
    ASSERT_EQ_STR(kobj_str(cs, "image"), "ignored:1");
    ASSERT_EQ_STR(kobj_str(kobj_cond(p, "Ready"), "reason"), "PodCompleted");
    ASSERT_TRUE(kobj_cond_true(p, "PodScheduled"));
    ASSERT_TRUE(kobj_cond_true(p, "Initialized"));
    cJSON_Delete(p);
    cJSON_Delete(pvc);
    free(out);
    free(log);
    free(pod);
    free(script);
    free(secret_file);
    env_done(&e);
}

TEST_T(missing_config_keeps_container_waiting_then_starts, 40)
{
    struct env e;
    env_init(&e);
    create(&e, "v1/pods",
           POD("late", "\"restartPolicy\":\"Never\",",
               "{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"echo v=$V\"],\"env\":[{\"name\":"
               "\"V\",\"valueFrom\":{\"configMapKeyRef\":{\"name\":\"later\",\"key\":\"k\"}}}]}"));
    for (int i = 0; i < 5; i++)
        pump_once(&e);
    cJSON *p = get_pod(&e, "late");
    const cJSON *cs = cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0);
    ASSERT_EQ_STR(kobj_str(cs, "state.waiting.reason"), "CreateContainerConfigError");
    ASSERT_CONTAINS(kobj_str(cs, "state.waiting.message"), "configmap \"later\" not found");
    ASSERT_EQ_STR(kobj_str(p, "status.phase"), "Pending");
    cJSON_Delete(p);
    create(&e, "v1/configmaps",
           "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"later\"},"
           "\"data\":{\"k\":\"now\"}}");
    wait_phase(&e, "late", "Succeeded", 15000);
    char *log = pod_log(&e, "late", NULL, false);
    ASSERT_CONTAINS(log, "v=now");
    free(log);
    env_done(&e);
}

TEST_T(readiness_probe_gates_ready_on_the_pod_ip, 60)
{
    struct env e;
    env_init(&e);
    if (access("/usr/bin/python3", X_OK) != 0)
        TH_SKIP("python3 missing");
    int port = free_port();
    char *pod = xasprintf(
        POD("web", "",
            "{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"sleep 1.5; exec python3 -m "
            "http.server --bind $POD_IP %d\"],\"ports\":[{\"name\":\"http\","
            "\"containerPort\":%d}],\"env\":[{\"name\":\"POD_IP\",\"valueFrom\":{"
            "\"fieldRef\":{\"fieldPath\":\"status.podIP\"}}}],\"readinessProbe\":{\"httpGet\":"
            "{\"path\":\"/\",\"port\":\"http\"},\"periodSeconds\":1}}"),
        port, port);
    create(&e, "v1/pods", pod);
    free(pod);
    wait_phase(&e, "web", "Running", 10000);
    cJSON *p = get_pod(&e, "web");
    ASSERT_FALSE(kobj_cond_true(p, "Ready")); /* not listening yet */
    ASSERT_EQ_STR(kobj_str(kobj_cond(p, "Ready"), "reason"), "ContainersNotReady");
    char ip[32];
    snprintf(ip, sizeof ip, "%s", kobj_str(p, "status.podIP"));
    cJSON_Delete(p);
    ASSERT_TRUE(pump(&e, pod_ready, "web", 20000));
    /* the server really listens on the pod IP, not on 127.0.0.1 */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &sa.sin_addr);
    ASSERT_OK(connect(fd, (struct sockaddr *)&sa, sizeof sa));
    close(fd);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ASSERT_EQ_INT(connect(fd, (struct sockaddr *)&sa, sizeof sa), -1);
    close(fd);
    ASSERT_OK(objstore_remove(&e.s, "v1/pods", "default", "web", NULL, NULL, NULL));
    ASSERT_TRUE(pump(&e, pod_gone, "web", 35000));
    env_done(&e);
}

TEST_T(graceful_deletion_waits_for_grace_then_kills, 60)
{
    struct env e;
    env_init(&e);
    create(&e, "v1/pods",
           POD("stubborn", "\"terminationGracePeriodSeconds\":2,",
               "{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"trap '' TERM; echo up; while "
               "true; do sleep 0.1; done\"]}"));
    create(&e, "v1/pods",
           POD("polite", "\"terminationGracePeriodSeconds\":30,",
               "{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"trap 'echo bye; exit 0' TERM; "
               "echo up; while true; do sleep 0.1; done\"]}"));
    wait_phase(&e, "stubborn", "Running", 10000);
    wait_phase(&e, "polite", "Running", 10000);
    /* the traps are set once "up" is printed */
    ASSERT_TRUE(pump(&e, log_has, (const char *const[]){"stubborn", "up"}, 10000));
    ASSERT_TRUE(pump(&e, log_has, (const char *const[]){"polite", "up"}, 10000));
    int64_t t0 = now_ms();
    ASSERT_OK(objstore_remove(&e.s, "v1/pods", "default", "polite", NULL, NULL, NULL));
    ASSERT_TRUE(pump(&e, pod_gone, "polite", 10000));
    ASSERT_CMP_INT(now_ms() - t0, <, 5000); /* exited on SIGTERM, long before 30 s */
    t0 = now_ms();
    ASSERT_OK(objstore_remove(&e.s, "v1/pods", "default", "stubborn", NULL, NULL, NULL));
    ASSERT_TRUE(pump(&e, pod_gone, "stubborn", 15000));
    int64_t took = now_ms() - t0;
    ASSERT_CMP_INT(took, >=, 1900); /* ignored SIGTERM: killed after the grace period */
    ASSERT_CMP_INT(took, <, 8000);
    env_done(&e);
}

TEST_T(restart_policies_and_previous_logs, 60)
{
    struct env e;
    env_init(&e);
    create(&e, "v1/pods",
           POD("onfail", "\"restartPolicy\":\"OnFailure\",\"volumes\":[{\"name\":\"d\","
                         "\"emptyDir\":{}}],",
               "{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"if test -e /d/once; then echo "
               "second; exit 0; fi; touch /d/once; echo first; exit 3\"],\"volumeMounts\":[{"
               "\"name\":\"d\",\"mountPath\":\"/d\"}]}"));
    create(&e, "v1/pods",
           POD("never", "\"restartPolicy\":\"Never\",",
               "{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"exit 3\"]}"));
    wait_phase(&e, "onfail", "Succeeded", 15000);
    wait_phase(&e, "never", "Failed", 15000);
    cJSON *p = get_pod(&e, "onfail");
    const cJSON *cs = cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0);
    ASSERT_EQ_INT(kobj_int(cs, "restartCount", -1), 1);
    ASSERT_EQ_INT(kobj_int(cs, "lastState.terminated.exitCode", -1), 3);
    ASSERT_EQ_STR(kobj_str(cs, "lastState.terminated.reason"), "Error");
    cJSON_Delete(p);
    char *cur = pod_log(&e, "onfail", "main", false), *prev = pod_log(&e, "onfail", "main", true);
    ASSERT_EQ_STR(cur, "second\n");
    ASSERT_EQ_STR(prev, "first\n");
    free(cur);
    free(prev);
    p = get_pod(&e, "never");
    cs = cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0);
    ASSERT_EQ_INT(kobj_int(cs, "restartCount", -1), 0);
    ASSERT_EQ_INT(kobj_int(cs, "state.terminated.exitCode", -1), 3);
    char *path;
    ASSERT_EQ_INT(kubelet_log_path(e.dir, p, "main", true, &path, NULL), TERN_ENOTFOUND);
    cJSON_Delete(p);
    env_done(&e);
}

TEST_T(termination_messages_from_the_file_or_the_log, 40)
{
    /* as a kubelet does: the file at terminationMessagePath (also with a
     * read-only root), else, with FallbackToLogsOnError and a failure, the
     * log's tail; a success without a message has none */
    struct env e;
    env_init(&e);
    create(&e, "v1/pods",
           POD("byfile", "\"restartPolicy\":\"Never\",\"securityContext\":{\"runAsUser\":"
                         "65532},",
               "{\"name\":\"main\",\"securityContext\":{\"readOnlyRootFilesystem\":true},"
               "\"command\":[\"sh\",\"-c\",\"echo noise; printf 'ConfigError: bad' > "
               "/dev/termination-log; exit 78\"]}"));
    create(&e, "v1/pods",
           POD("bylog", "\"restartPolicy\":\"Never\",",
               "{\"name\":\"main\",\"terminationMessagePolicy\":\"FallbackToLogsOnError\","
               "\"command\":[\"sh\",\"-c\",\"echo one; echo the last words >&2; exit 2\"]}"));
    create(&e, "v1/pods",
           POD("custom", "\"restartPolicy\":\"Never\",",
               "{\"name\":\"main\",\"terminationMessagePath\":\"/tmp/why\","
               "\"command\":[\"sh\",\"-c\",\"echo custom > /tmp/why; exit 1\"]}"));
    create(&e, "v1/pods",
           POD("fine", "\"restartPolicy\":\"Never\",",
               "{\"name\":\"main\",\"terminationMessagePolicy\":\"FallbackToLogsOnError\","
               "\"command\":[\"sh\",\"-c\",\"echo all good\"]}"));
    wait_phase(&e, "byfile", "Failed", 15000);
    wait_phase(&e, "bylog", "Failed", 15000);
    wait_phase(&e, "custom", "Failed", 15000);
    wait_phase(&e, "fine", "Succeeded", 15000);
    static const struct {
        const char *pod, *msg;
    } want[] = {{"byfile", "ConfigError: bad"}, {"bylog", "one\nthe last words\n"},
                {"custom", "custom\n"}, {"fine", NULL}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cJSON *p = get_pod(&e, want[i].pod);
        const cJSON *cs = cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0);
        const char *m = kobj_str(cs, "state.terminated.message");
        if (want[i].msg)
            ASSERT_EQ_STR(m, want[i].msg);
        else
            ASSERT_NULL(m);
        cJSON_Delete(p);
    }
    env_done(&e);
}

TEST_T(init_containers_run_in_order_first, 40)
{
    struct env e;
    env_init(&e);
    create(&e, "v1/pods",
           "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"init\",\"namespace\":"
           "\"default\"},\"spec\":{\"restartPolicy\":\"Never\",\"automountServiceAccountToken\":"
           "false,\"volumes\":[{\"name\":\"d\",\"emptyDir\":{}}],\"initContainers\":[{\"name\":"
           "\"a\",\"command\":[\"sh\",\"-c\",\"echo a >> /d/order\"],\"volumeMounts\":[{\"name\":"
           "\"d\",\"mountPath\":\"/d\"}]},{\"name\":\"b\",\"command\":[\"sh\",\"-c\",\"echo b >> "
           "/d/order\"],\"volumeMounts\":[{\"name\":\"d\",\"mountPath\":\"/d\"}]}],\"containers\":"
           "[{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"cat /d/order; test -e "
           "/var/run/secrets/kubernetes.io/serviceaccount/token && echo token || echo "
           "notoken\"],\"volumeMounts\":[{\"name\":\"d\",\"mountPath\":\"/d\"}]}]}}");
    wait_phase(&e, "init", "Succeeded", 20000);
    char *log = pod_log(&e, "init", "main", false);
    ASSERT_EQ_STR(log, "a\nb\nnotoken\n");
    free(log);
    cJSON *p = get_pod(&e, "init");
    ASSERT_EQ_INT(cJSON_GetArraySize(kobj_at(p, "status.initContainerStatuses")), 2);
    cJSON_Delete(p);
    env_done(&e);
}

static bool job_cond(struct env *e, const void *arg)
{
    cJSON *j = NULL;
    if (objstore_get(&e->s, "batch/v1/jobs", "default", "turn", &j, NULL) != 0)
        return false;
    bool ok = kobj_cond_true(j, arg);
    cJSON_Delete(j);
    return ok;
}

TEST_T(job_pod_fails_twice_then_succeeds_end_to_end, 60)
{
    struct env e;
    env_init(&e);
    create(&e, "v1/persistentvolumeclaims",
           "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{\"name\":"
           "\"count\"},\"spec\":{\"resources\":{\"requests\":{\"storage\":\"1Mi\"}}}}");
    create(&e, "batch/v1/jobs",
           "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"turn\"},"
           "\"spec\":{\"backoffLimit\":3,\"template\":{\"spec\":{\"restartPolicy\":\"Never\","
           "\"volumes\":[{\"name\":\"c\",\"persistentVolumeClaim\":{\"claimName\":\"count\"}}],"
           "\"containers\":[{\"name\":\"runner\",\"command\":[\"sh\",\"-c\",\"n=$(cat /c/n "
           "2>/dev/null || echo 0); n=$((n+1)); echo $n > /c/n; echo attempt $n; test $n -ge 3 "
           "|| exit 75\"],\"volumeMounts\":[{\"name\":\"c\",\"mountPath\":\"/c\"}]}]}}}}");
    ASSERT_TRUE(pump(&e, job_cond, "Complete", 40000));
    cJSON *j = NULL;
    ASSERT_OK(objstore_get(&e.s, "batch/v1/jobs", "default", "turn", &j, NULL));
    ASSERT_EQ_INT(kobj_int(j, "status.failed", 0), 2);
    ASSERT_EQ_INT(kobj_int(j, "status.succeeded", 0), 1);
    ASSERT_FALSE(kobj_cond_true(j, "Failed"));
    cJSON_Delete(j);
    ASSERT_EQ_INT(memstore_count(e.m, "v1/pods"), 3);
    env_done(&e);
}

TEST_T(job_pod_failure_policy_fails_fast_on_exit_78, 40)
{
    struct env e;
    env_init(&e);
    create(&e, "batch/v1/jobs",
           "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"turn\"},"
           "\"spec\":{\"backoffLimit\":6,\"podFailurePolicy\":{\"rules\":[{\"action\":\"FailJob\","
           "\"onExitCodes\":{\"operator\":\"In\",\"values\":[78]}}]},\"template\":{\"spec\":{"
           "\"restartPolicy\":\"Never\",\"containers\":[{\"name\":\"runner\",\"command\":[\"sh\","
           "\"-c\",\"echo bad config; exit 78\"]}]}}}}");
    ASSERT_TRUE(pump(&e, job_cond, "Failed", 30000));
    cJSON *j = NULL;
    ASSERT_OK(objstore_get(&e.s, "batch/v1/jobs", "default", "turn", &j, NULL));
    ASSERT_EQ_STR(kobj_str(kobj_cond(j, "Failed"), "reason"), "PodFailurePolicy");
    ASSERT_EQ_INT(kobj_int(j, "status.failed", 0), 1);
    cJSON_Delete(j);
    env_done(&e);
}

static bool deployment_available(struct env *e, const void *arg)
{
    (void)arg;
    cJSON *d = NULL;
    if (objstore_get(&e->s, "apps/v1/deployments", "default", "op", &d, NULL) != 0)
        return false;
    bool ok = kobj_cond_true(d, "Available") && kobj_int(d, "status.readyReplicas", 0) == 1;
    cJSON_Delete(d);
    return ok;
}

static bool new_pod_running(struct env *e, const void *arg)
{
    cJSON *l = NULL;
    objstore_list(&e->s, "v1/pods", "default", &l, NULL);
    const cJSON *p;
    bool ok = false;
    cJSON_ArrayForEach(p, kobj_at(l, "items"))
    {
        ok |= strcmp(kobj_str(p, "metadata.name"), arg) != 0 && !kobj_deleting(p) &&
              kobj_cond_true(p, "Ready");
    }
    cJSON_Delete(l);
    return ok && deployment_available(e, NULL);
}

TEST_T(deployment_pod_killed_comes_back, 60)
{
    struct env e;
    env_init(&e);
    create(&e, "apps/v1/deployments",
           "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"op\"},"
           "\"spec\":{\"replicas\":1,\"selector\":{\"matchLabels\":{\"app\":\"op\"}},"
           "\"template\":{\"metadata\":{\"labels\":{\"app\":\"op\"}},\"spec\":{"
           "\"terminationGracePeriodSeconds\":1,\"containers\":[{\"name\":\"op\",\"command\":["
           "\"sh\",\"-c\",\"trap 'exit 0' TERM; while true; do sleep 0.1; done\"]}]}}}}");
    ASSERT_TRUE(pump(&e, deployment_available, NULL, 15000));
    cJSON *l = NULL;
    objstore_list(&e.s, "v1/pods", "default", &l, NULL);
    char name[128];
    snprintf(name, sizeof name, "%s", kobj_str(cJSON_GetArrayItem(kobj_at(l, "items"), 0), "metadata.name"));
    cJSON_Delete(l);
    ASSERT_OK(objstore_remove(&e.s, "v1/pods", "default", name, NULL, NULL, NULL));
    ASSERT_TRUE(pump(&e, new_pod_running, name, 20000));
    env_done(&e);
}

static int listen_host(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    bind(fd, (struct sockaddr *)&sa, sizeof sa);
    listen(fd, 16);
    socklen_t l = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &l);
    *port = ntohs(sa.sin_port);
    return fd;
}

TEST_T(network_policy_without_egress_isolates_the_pod, 60)
{
    struct env e;
    env_init(&e);
    if (access("/usr/bin/python3", X_OK) != 0)
        TH_SKIP("python3 missing");
    int port;
    int lfd = listen_host(&port);
    create(&e, "networking.k8s.io/v1/networkpolicies",
           "{\"apiVersion\":\"networking.k8s.io/v1\",\"kind\":\"NetworkPolicy\",\"metadata\":{"
           "\"name\":\"deny\"},\"spec\":{\"podSelector\":{\"matchLabels\":{\"app\":\"closed\"}},"
           "\"policyTypes\":[\"Ingress\",\"Egress\"]}}");
    char *cmd = xasprintf("import socket\\ntry:\\n socket.create_connection(('127.0.0.1', %d), 2)"
                          "\\n print('connected')\\nexcept OSError as e:\\n print('refused')",
                          port);
    char *closed = xasprintf(POD("closed", "\"restartPolicy\":\"Never\",",
                                 "{\"name\":\"main\",\"command\":[\"python3\",\"-c\",\"%s\"]}"),
                             cmd);
    char *open_ = xasprintf(POD("open", "\"restartPolicy\":\"Never\",",
                                "{\"name\":\"main\",\"command\":[\"python3\",\"-c\",\"%s\"]}"),
                            cmd);
    create(&e, "v1/pods", closed);
    create(&e, "v1/pods", open_);
    wait_phase(&e, "closed", "Succeeded", 20000);
    wait_phase(&e, "open", "Succeeded", 20000);
    char *l1 = pod_log(&e, "closed", NULL, false), *l2 = pod_log(&e, "open", NULL, false);
    ASSERT_EQ_STR(l1, "refused\n");
    ASSERT_EQ_STR(l2, "connected\n");
    free(l1);
    free(l2);
    free(cmd);
    free(closed);
    free(open_);
    close(lfd);
    env_done(&e);
}

static int listen_on(const char *ip, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, ip, &sa.sin_addr);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 16))
        th_fail(__FILE__, __LINE__, "listen on %s: %s", ip, strerror(errno));
    socklen_t l = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &l);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* A pod whose policy allows some egress runs in a namespace of its own on
 * the pod network and reaches exactly what the rules allow: an address and
 * port of the node (ipBlock + port), a host-network pod's 127.1.x.y (the
 * crossing route), nothing else of the node, not the node's loopback; a
 * forged source address goes nowhere; the pod is reachable from the node at
 * its address (what the runner and the readiness probe need). */
TEST_T(network_policy_egress_rules_are_enforced_in_a_namespace_of_its_own, 90)
{
    if (geteuid() != 0)
        TH_SKIP("creating network namespaces needs root");
    if (access("/usr/bin/python3", X_OK) != 0 || access("/usr/sbin/ip", X_OK) != 0 ||
        access("/usr/sbin/iptables-restore", X_OK) != 0)
        TH_SKIP("python3, ip or iptables missing");
    struct env e;
    env_init(&e); /* the kubelet put the node's address 10.213.0.1 on lo */
    int pa, pb, pc;
    int la = listen_on("10.213.0.1", &pa), lb = listen_on("10.213.0.1", &pb);
    int lc = listen_on("127.1.255.250", &pc);
    char *np = xasprintf(
        "{\"apiVersion\":\"networking.k8s.io/v1\",\"kind\":\"NetworkPolicy\",\"metadata\":{"
        "\"name\":\"some\"},\"spec\":{\"podSelector\":{\"matchLabels\":{\"app\":\"fenced\"}},"
        "\"policyTypes\":[\"Ingress\",\"Egress\"],\"ingress\":[{}],\"egress\":["
        "{\"to\":[{\"ipBlock\":{\"cidr\":\"10.213.0.1/32\"}}],\"ports\":[{\"protocol\":\"TCP\","
        "\"port\":%d}]},{\"to\":[{\"ipBlock\":{\"cidr\":\"127.1.0.0/16\",\"except\":["
        "\"127.1.0.0/24\"]}}]}]}}",
        pa);
    create(&e, "networking.k8s.io/v1/networkpolicies", np);
    /* the pod tries each destination, then serves one connection on its own
     * address (the test connects from the node) */
    char *script = xasprintf(
        "import socket, os\\n"
        "def t(name, host, port, src=None):\\n"
        " try:\\n"
        "  s = socket.socket()\\n"
        "  s.settimeout(3)\\n"
        "  if src:\\n"
        "   s.setsockopt(socket.SOL_IP, 15, 1)\\n"
        "   s.bind((src, 0))\\n"
        "  s.connect((host, port)); print(name, 'connected', flush=True)\\n"
        " except OSError as e:\\n"
        "  print(name, 'refused', e.errno, flush=True)\\n"
        "t('allowed', '10.213.0.1', %d)\\n"
        "t('other-port', '10.213.0.1', %d)\\n"
        "t('host-pod', '127.1.255.250', %d)\\n"
        "t('loopback', '127.0.0.1', %d)\\n"
        "t('machine', '192.0.2.2', %d)\\n"
        "t('forged', '10.213.0.1', %d, '10.213.7.7')\\n"
        "l = socket.socket(); l.bind((os.environ['IP'], 8081)); l.listen(1)\\n"
        "print('listening', flush=True)\\n"
        "c, a = l.accept(); print('accepted', a[0], flush=True)\\n",
        pa, pb, pc, pa, pa, pa);
    char *pod = xasprintf(
        POD("fenced", "\"restartPolicy\":\"Never\",",
            "{\"name\":\"main\",\"command\":[\"python3\",\"-c\",\"%s\"],\"env\":[{\"name\":\"IP\","
            "\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"status.podIP\"}}}]}"),
        script);
    create(&e, "v1/pods", pod);
    wait_phase(&e, "fenced", "Running", 20000);
    cJSON *p = get_pod(&e, "fenced");
    char ip[32];
    snprintf(ip, sizeof ip, "%s", kobj_str(p, "status.podIP"));
    cJSON_Delete(p);
    ASSERT_TRUE(strncmp(ip, "10.213.", 7) == 0);
    /* wait for "listening", then connect from the node */
    char *log = NULL;
    int64_t end = now_ms() + 30000;
    while (now_ms() < end) {
        pump_once(&e);
        free(log);
        log = pod_log(&e, "fenced", NULL, false);
        if (strstr(log, "listening"))
            break;
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_CONTAINS(log, "listening");
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(8081)};
    inet_pton(AF_INET, ip, &sa.sin_addr);
    ASSERT_OK(connect(c, (struct sockaddr *)&sa, sizeof sa));
    close(c);
    wait_phase(&e, "fenced", "Succeeded", 20000);
    free(log);
    log = pod_log(&e, "fenced", NULL, false);
    ASSERT_CONTAINS(log, "allowed connected\n");
    ASSERT_CONTAINS(log, "other-port refused 113\n"); /* EHOSTUNREACH: rejected at once */
    ASSERT_CONTAINS(log, "host-pod connected\n");
    ASSERT_CONTAINS(log, "loopback refused 111\n");   /* its own loopback, not the node's */
    ASSERT_CONTAINS(log, "machine refused 113\n");
    ASSERT_FALSE(strstr(log, "forged connected"));
    ASSERT_CONTAINS(log, "accepted 10.213.0.1\n");
    /* the pod is gone: so are its namespace and its veth */
    unsigned char ipb[4];
    ASSERT_TRUE(inet_pton(AF_INET, ip, ipb) == 1);
    char *ns = xasprintf("/run/netns/tern-p%04x", (unsigned)(ipb[2] * 256 + ipb[3]));
    struct stat st;
    ASSERT_TRUE(stat(ns, &st) != 0);
    free(ns);
    free(log);
    free(pod);
    free(script);
    free(np);
    close(la);
    close(lb);
    close(lc);
    env_done(&e);
}

static bool waiting_with(struct env *e, const void *arg)
{
    const char *const *a = arg; /* {pod, text} */
    cJSON *p = get_pod(e, a[0]);
    const char *m = kobj_str(cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0),
                             "state.waiting.message");
    bool ok = m && strstr(m, a[1]) && !kobj_str(p, "status.podIP");
    cJSON_Delete(p);
    return ok;
}

/* A node that cannot make namespaces never runs a restricted pod without
 * its filter: the pod waits with the reason; and with enforcement turned off
 * it runs in the host's namespace (its egress unrestricted, as before). */
TEST_T(network_policy_egress_without_namespaces_waits_or_runs_unenforced, 60)
{
    struct env e;
    env_init(&e);
    kubelet_free(e.k);
    e.kcfg.ip_bin = "/nonexistent/ip";
    env_start_kubelet(&e);
    create(&e, "networking.k8s.io/v1/networkpolicies",
           "{\"apiVersion\":\"networking.k8s.io/v1\",\"kind\":\"NetworkPolicy\",\"metadata\":{"
           "\"name\":\"some\"},\"spec\":{\"podSelector\":{},\"policyTypes\":[\"Egress\"],"
           "\"egress\":[{\"to\":[{\"ipBlock\":{\"cidr\":\"10.213.0.1/32\"}}]}]}}");
    create(&e, "v1/pods",
           POD("fenced", "\"restartPolicy\":\"Never\",", "{\"name\":\"main\",\"command\":[\"true\"]}"));
    const char *a[] = {"fenced", geteuid() == 0 ? "/nonexistent/ip (not found" : "needs root"};
    if (!pump(&e, waiting_with, a, 10000)) {
        cJSON *p = get_pod(&e, "fenced");
        char *st = json_print(kobj_at(p, "status"));
        th_fail(__FILE__, __LINE__, "not waiting with the reason: %s", st);
    }
    wait_phase(&e, "fenced", "Pending", 1000);
    kubelet_free(e.k);
    e.kcfg.netpol_unenforced = true;
    env_start_kubelet(&e);
    wait_phase(&e, "fenced", "Succeeded", 20000);
    cJSON *p = get_pod(&e, "fenced");
    ASSERT_TRUE(strncmp(kobj_str(p, "status.podIP"), "127.1.", 6) == 0);
    cJSON_Delete(p);
    env_done(&e);
}

TEST_T(kubelet_restart_kills_leftovers_and_restarts_pods, 60)
{
    struct env e;
    env_init(&e);
    create(&e, "v1/pods",
           POD("always", "",
               "{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"echo run; while true; do sleep "
               "0.1; done\"]}"));
    wait_phase(&e, "always", "Running", 10000);
    cJSON *p = get_pod(&e, "always");
    char uid[64], ip[32];
    snprintf(uid, sizeof uid, "%s", kobj_str(p, "metadata.uid"));
    snprintf(ip, sizeof ip, "%s", kobj_str(p, "status.podIP"));
    cJSON_Delete(p);
    /* the old instance goes away (its processes with it) */
    kubelet_free(e.k);
    /* and a stray process group recorded as this pod's is still running */
    pid_t stray = fork();
    if (stray == 0) {
        setpgid(0, 0);
        execl("/bin/sleep", "sleep", "60", (char *)NULL);
        _exit(127);
    }
    setpgid(stray, stray);
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
    char *stat_path = xasprintf("/proc/%d/stat", (int)stray), *buf = NULL;
    size_t len;
    ASSERT_OK(fsutil_read(stat_path, 8192, &buf, &len, NULL));
    char *q = strrchr(buf, ')');
    for (int f = 2; q && f < 22; f++)
        q = strchr(q + 1, ' ');
    ASSERT_NOT_NULL(q);
    char *end = strchr(q + 1, ' ');
    *end = 0;
    char *rec = xasprintf("%d %s\n", (int)stray, q + 1);
    char *pids = xasprintf("%s/pods/%s/pids", e.dir, uid);
    ASSERT_OK(fsutil_write(pids, rec, strlen(rec), 0644, NULL));
    env_start_kubelet(&e);
    int st;
    ASSERT_EQ_INT(waitpid(stray, &st, 0), stray);
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* the pod is restarted by the new instance, same IP, one more restart */
    wait_phase(&e, "always", "Running", 10000);
    int64_t end_ms = now_ms() + 10000;
    bool ok = false;
    while (!ok && now_ms() < end_ms) {
        pump_once(&e);
        p = get_pod(&e, "always");
        const cJSON *cs = cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0);
        ok = kobj_int(cs, "restartCount", 0) == 1 && kobj_has(cs, "state.running");
        if (ok) {
            ASSERT_EQ_STR(kobj_str(cs, "lastState.terminated.message"), "tern-dev restarted");
            ASSERT_EQ_INT(kobj_int(cs, "lastState.terminated.exitCode", 0), 137);
            ASSERT_EQ_STR(kobj_str(p, "status.podIP"), ip);
        }
        cJSON_Delete(p);
    }
    ASSERT_TRUE(ok);
    free(stat_path);
    free(buf);
    free(rec);
    free(pids);
    env_done(&e);
}

TEST_T(devrun_threads_run_a_job_and_stop_pods_on_shutdown, 60)
{
    need_bwrap();
    struct memstore *m = memstore_new(NULL, NULL);
    struct objstore s = memstore_objstore(m);
    char *vol = xasprintf("%s/volumes", th_tmpdir());
    unsigned char key[SATOKEN_KEY_LEN];
    memset(key, 1, sizeof key);
    struct devrun_cfg cfg = {
        .store = s,
        .ctl = {.volume_dir = vol, .job = {0, 600}},
        .kubelet = {.dir = th_tmpdir(), .sa_key = key, .restart_backoff_ms = 100},
        .period_ms = 200,
    };
    struct devrun *r;
    struct tern_err err;
    ASSERT_OK(devrun_start(&cfg, &r, &err));
    struct env e = {.m = m, .s = s};
    /* wait for the default namespace, then run a Job and a long-running pod */
    int64_t end = now_ms() + 10000;
    while (objstore_get(&s, "v1/namespaces", "", "default", NULL, NULL) != 0 && now_ms() < end) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    create(&e, "batch/v1/jobs",
           "{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\",\"metadata\":{\"name\":\"turn\"},"
           "\"spec\":{\"template\":{\"spec\":{\"restartPolicy\":\"Never\",\"containers\":[{"
           "\"name\":\"r\",\"command\":[\"true\"]}]}}}}");
    create(&e, "v1/pods",
           POD("long", "", "{\"name\":\"main\",\"command\":[\"sleep\",\"600\"]}"));
    bool done = false;
    long pid = 0;
    end = now_ms() + 20000;
    while (!(done && pid > 0) && now_ms() < end) {
        done = job_cond(&e, "Complete");
        cJSON *p = get_pod(&e, "long");
        const char *id = kobj_str(cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0),
                                  "containerID");
        int64_t v;
        if (id && strncmp(id, "bwrap://", 8) == 0 && num_parse_i64(id + 8, &v) == 0)
            pid = (long)v;
        cJSON_Delete(p);
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_TRUE(done);
    ASSERT_CMP_INT(pid, >, 0);
    ASSERT_OK(kill((pid_t)pid, 0));
    devrun_stop(r, 2000);
    ASSERT_EQ_INT(kill((pid_t)pid, 0), -1); /* reaped: the pod's sandbox is gone */
    memstore_free(m);
    free(vol);
}

TEST_T(memory_limit_oom_kills_and_liveness_restarts, 60)
{
    struct env e;
    env_init(&e);
    if (access("/usr/bin/python3", X_OK) != 0)
        TH_SKIP("python3 missing");
    create(&e, "v1/pods",
           POD("hog", "\"restartPolicy\":\"Never\",",
               "{\"name\":\"main\",\"command\":[\"python3\",\"-c\",\"x = bytearray(200 << 20); "
               "x[::4096] = b'1' * len(x[::4096]); print('survived')\"],\"resources\":{\"limits\":"
               "{\"memory\":\"32Mi\"}}}"));
    /* a liveness probe that always fails: the container is restarted */
    create(&e, "v1/pods",
           POD("sick", "\"terminationGracePeriodSeconds\":1,",
               "{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"while true; do sleep 0.1; "
               "done\"],\"livenessProbe\":{\"exec\":{"
               "\"command\":[\"sh\",\"-c\",\"exit 1\"]},\"periodSeconds\":1,"
               "\"failureThreshold\":2}}"));
    wait_phase(&e, "hog", "Failed", 20000);
    cJSON *p = get_pod(&e, "hog");
    const cJSON *cs = cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0);
    const char *reason = kobj_str(cs, "state.terminated.reason");
    int64_t code = kobj_int(cs, "state.terminated.exitCode", 0);
    ASSERT_NE_INT(code, 0);
    if (access("/sys/fs/cgroup/memory/tern-dev", W_OK) == 0)
        ASSERT_EQ_STR(reason, "OOMKilled");
    cJSON_Delete(p);
    char *log = pod_log(&e, "hog", NULL, false);
    ASSERT_FALSE(strstr(log, "survived") != NULL);
    free(log);
    int64_t end = now_ms() + 20000;
    bool restarted = false;
    while (!restarted && now_ms() < end) {
        pump_once(&e);
        p = get_pod(&e, "sick");
        cs = cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0);
        restarted = kobj_int(cs, "restartCount", 0) >= 1;
        cJSON_Delete(p);
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_TRUE(restarted);
    env_done(&e);
}

/* containerStatuses[0] fields of a pod: started, ready, restartCount */
static void cstatus(struct env *e, const char *name, bool *started, bool *ready, int64_t *restarts)
{
    cJSON *p = get_pod(e, name);
    const cJSON *cs = cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0);
    *started = cJSON_IsTrue(kobj_at(cs, "started"));
    *ready = cJSON_IsTrue(kobj_at(cs, "ready"));
    *restarts = kobj_int(cs, "restartCount", 0);
    cJSON_Delete(p);
}

TEST_T(startup_probe_holds_start_ready_and_liveness, 60)
{
    struct env e;
    env_init(&e);
    /* "late": no readiness probe, a startup probe that passes once the
     * container made a file in its emptyDir (after 4 s), and a liveness
     * probe that fails before that: not started, not ready and not killed
     * until the startup probe passes */
    create(&e, "v1/pods",
           POD("late", "\"terminationGracePeriodSeconds\":1,\"volumes\":[{\"name\":\"w\","
                       "\"emptyDir\":{}}],",
               "{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"sleep 4; touch /w/up; while "
               "true; do sleep 0.1; done\"],\"volumeMounts\":[{\"name\":\"w\",\"mountPath\":"
               "\"/w\"}],\"startupProbe\":{\"exec\":{\"command\":[\"test\",\"-e\",\"/w/up\"]},"
               "\"periodSeconds\":1,\"failureThreshold\":60},\"livenessProbe\":{\"exec\":"
               "{\"command\":[\"test\",\"-e\",\"/w/up\"]},\"periodSeconds\":1,"
               "\"failureThreshold\":1}}"));
    /* "never": a startup probe that never passes: killed after
     * failureThreshold failures and restarted, never ready */
    create(&e, "v1/pods",
           POD("never", "\"terminationGracePeriodSeconds\":1,",
               "{\"name\":\"main\",\"command\":[\"sh\",\"-c\",\"while true; do sleep 0.1; "
               "done\"],\"startupProbe\":{\"exec\":{\"command\":[\"false\"]},"
               "\"periodSeconds\":1,\"failureThreshold\":2}}"));
    wait_phase(&e, "late", "Running", 20000);
    int64_t end = now_ms() + 2500;
    bool started, ready;
    int64_t restarts;
    while (now_ms() < end) { /* failing startup probes */
        pump_once(&e);
        cstatus(&e, "late", &started, &ready, &restarts);
        ASSERT_FALSE(started);
        ASSERT_FALSE(ready);
        ASSERT_EQ_INT(restarts, 0); /* the liveness probe waits for startup */
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_FALSE(pod_ready(&e, "late"));
    ASSERT_TRUE(pump(&e, pod_ready, "late", 20000));
    cstatus(&e, "late", &started, &ready, &restarts);
    ASSERT_TRUE(started);
    ASSERT_TRUE(ready);
    ASSERT_EQ_INT(restarts, 0);
    end = now_ms() + 20000;
    restarts = 0;
    while (restarts < 1 && now_ms() < end) {
        pump_once(&e);
        cstatus(&e, "never", &started, &ready, &restarts);
        ASSERT_FALSE(ready);
        struct timespec ts = {0, 50 * 1000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_TRUE(restarts >= 1);
    ASSERT_FALSE(pod_ready(&e, "never"));
    env_done(&e);
}

/* Number of processes whose command line contains marker. */
static int procs_with(const char *marker)
{
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int64_t pid;
        if (num_parse_i64(de->d_name, &pid) != 0)
            continue;
        char *path = xasprintf("/proc/%s/cmdline", de->d_name), *buf = NULL;
        size_t len;
        if (fsutil_read(path, 1 << 16, &buf, &len, NULL) == 0) {
            for (size_t i = 0; i < len; i++)
                if (!buf[i])
                    buf[i] = ' ';
            n += strstr(buf, marker) != NULL;
        }
        free(buf);
        free(path);
    }
    if (d)
        closedir(d);
    return n;
}

TEST_T(pods_die_with_a_crashed_kubelet, 40)
{
    need_bwrap();
    const char *marker = "4242.25";
    int sync[2];
    ASSERT_OK(pipe(sync));
    pid_t child = fork();
    if (child == 0) {
        struct env e;
        env_init(&e);
        char *pod = xasprintf(POD("victim", "", "{\"name\":\"main\",\"command\":[\"sleep\",\"%s\"]}"),
                              marker);
        create(&e, "v1/pods", pod);
        const char *a[] = {"victim", "Running"};
        if (pump(&e, pod_phase, a, 10000))
            (void)!write(sync[1], "r", 1);
        pause(); /* until killed: no cleanup at all */
        _exit(0);
    }
    char c = 0;
    ASSERT_EQ_INT(read(sync[0], &c, 1), 1);
    /* wait for the command itself: bwrap has finished setting up */
    char *cmd = xasprintf("sleep %s", marker);
    int64_t end = now_ms() + 5000;
    while (procs_with(cmd) == 0 && now_ms() < end) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_CMP_INT(procs_with(cmd), >, 0);
    /* bwrap ties its sandbox to itself only once set up: a crash in the
     * first moments is cleaned by the next kubelet instead (next test) */
    end = now_ms() + 700;
    while (now_ms() < end)
        (void)procs_with(cmd);
    kill(child, SIGKILL); /* the kubelet crashes */
    waitpid(child, NULL, 0);
    end = now_ms() + 5000;
    while (procs_with(marker) > 0 && now_ms() < end) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_EQ_INT(procs_with(marker), 0);
    free(cmd);
}

TEST_T(a_new_kubelet_kills_sandboxes_left_on_its_dir, 40)
{
    /* a sandbox killed mid-setup can lose its parent: the next kubelet on
     * the same DIR finds it by its command line */
    struct env e;
    env_init(&e);
    const char *marker = "4343.75";
    char *pod = xasprintf(POD("left", "", "{\"name\":\"main\",\"command\":[\"sleep\",\"%s\"]}"),
                          marker);
    create(&e, "v1/pods", pod);
    char *cmd = xasprintf("sleep %s", marker);
    int64_t end = now_ms() + 10000;
    while (procs_with(cmd) == 0 && now_ms() < end)
        pump_once(&e);
    ASSERT_CMP_INT(procs_with(cmd), >, 0);
    /* detach the sandbox from this kubelet (as if its parent were gone) */
    cJSON *p = get_pod(&e, "left");
    const char *id = kobj_str(cJSON_GetArrayItem(kobj_at(p, "status.containerStatuses"), 0),
                              "containerID");
    int64_t pid = 0;
    ASSERT_NOT_NULL(id);
    ASSERT_OK(num_parse_i64(id + 8, &pid));
    cJSON_Delete(p);
    struct kubelet *second;
    ASSERT_OK(kubelet_new(&e.s, &e.kcfg, &second, NULL));
    end = now_ms() + 5000;
    while (procs_with(marker) > 0 && now_ms() < end) {
        waitpid((pid_t)pid, NULL, WNOHANG);
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    ASSERT_EQ_INT(procs_with(marker), 0);
    kubelet_free(second);
    free(cmd);
    free(pod);
    env_done(&e);
}
