#!/usr/bin/python3
"""bench/operator: tern-operator with N parked sessions, on tern-dev and on the
real control plane (figures only, asserts nothing).

Run: /usr/bin/python3 bench/operator/bench_operator.py N [--cluster terndev|kube|both] [--perf]
(default N 10000, both clusters; `make bench` runs it with TERN_BENCH_SESSIONS).

Per cluster:
1. N sessions parked waiting for approval: created through the API with their
   journals seeded in etcd (user message, turn started, approval requested,
   turn finished) before the operator starts, so the operator finds them
   exactly as after days of waiting: no sandbox pod, no Job.
2. First start: time until every session's status says WaitingForApproval
   (the operator also adds each one's finalizer and creates its workspace
   PVC, the only child a parked session holds: 3 N writes with the status;
   the token Secret, task ConfigMap and NetworkPolicy come with a pod).
3. Settled: once the queue drained, until the cluster has bound every
   claim (kube's PV binder takes minutes for 10,000; tern-dev binds at
   once): then idle, the operator's RSS and CPU over 20 s with nothing
   changing.
4. Restart: time to relist and reconcile all N, and the API writes it made
   (goal: none), split into the caches' first lists and the reconciles, and
   how the reconciles read their journal summaries (alone, or read ahead
   in batches); then the steady idle RSS and CPU after it.
5. One live session beside them (the scripted model): from `kubectl apply`
   to the first model request, with the stages of that path as watches see
   them (the operator's first status, the sandbox pod and the turn Job
   created, each pod running, the sandbox ready), then to
   WaitingForApproval and, approved at once, to Completed; the API writes
   the operator made for it.
"""
import base64
import concurrent.futures
import json
import os
import ssl
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import ternlocal  # noqa: E402

NS = "default"


class Api:
    """A tiny client from a kubeconfig: bearer token (tern-dev) or client
    certificate (the real control plane)."""

    def __init__(self, kubeconfig):
        import yaml
        with open(kubeconfig) as f:
            kc = yaml.safe_load(f)
        self.server = kc["clusters"][0]["cluster"]["server"]
        ca = base64.b64decode(kc["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
        user = kc["users"][0]["user"]
        self.ctx = ssl.create_default_context(cadata=ca)
        self.headers = {"Content-Type": "application/json"}
        if user.get("token"):
            self.headers["Authorization"] = "Bearer " + user["token"]
        else:
            d = tempfile.mkdtemp(prefix="tern-bench-")
            cert, key = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
            with open(cert, "wb") as f:
                f.write(base64.b64decode(user["client-certificate-data"]))
            with open(key, "wb") as f:
                f.write(base64.b64decode(user["client-key-data"]))
            self.ctx.load_cert_chain(cert, key)

    def req(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.server + path, data=data, method=method,
                                   headers=self.headers)
        with urllib.request.urlopen(r, context=self.ctx, timeout=120) as resp:
            return json.loads(resp.read() or b"null")

    def watch(self, path, on_event, stop):
        """Streams a watch until stop is set; on_event(type, object)."""
        while not stop.is_set():
            try:
                rv = self.req("GET", path + ("&" if "?" in path else "?") + "limit=1")[
                    "metadata"]["resourceVersion"]
                sep = "&" if "?" in path else "?"
                r = urllib.request.Request(self.server + path + sep +
                                           "watch=1&timeoutSeconds=60&resourceVersion=" + rv,
                                           headers=self.headers)
                with urllib.request.urlopen(r, context=self.ctx, timeout=90) as resp:
                    for line in resp:
                        if stop.is_set():
                            return
                        e = json.loads(line)
                        on_event(e["type"], e["object"])
            except Exception:  # a stream that ends or fails: open it again
                time.sleep(0.05)


def metrics(t):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % t.metrics_port,
                                  timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        k, _, v = line.rpartition(" ")
        out[k] = float(v)
    return out


def print_reconcile_split(m, what):
    """Where a start's time went: the caches' first lists (the workers wait
    for them), then the reconciles, each one's mean time, on how many
    workers."""
    count = m.get("tern_reconcile_duration_seconds_count", 0)
    total = m.get("tern_reconcile_duration_seconds_sum", 0)
    workers = int(os.environ.get("TERN_WORKERS", "8"))
    print("      %s: caches listed %.2f s after the controller started; %d reconciles of "
          "%.1f ms each on average (%.2f s of reconciling on %d workers)" %
          (what, m.get("tern_cache_sync_seconds", 0), count,
           1000 * total / count if count else 0, total, workers), flush=True)
    reads = 'tern_journal_summary_reads_total{how="%s"}'
    print("      %s: journal summaries: %d read alone, %d read ahead by %d batched reads" %
          (what, m.get(reads % "alone", 0), m.get(reads % "read_ahead", 0),
           m.get(reads % "batched", 0)), flush=True)


def proc_stats(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(parts[11]) + int(parts[12])) / ticks
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
    return cpu, rss


def start_operator(t, name):
    t.metrics_port = ternlocal.free_port()
    return t.start_operator(name, extra=("--metrics-addr", "127.0.0.1:%d" % t.metrics_port))


WAITING = 'tern_sessions{phase="WaitingForApproval"}'


CLUSTER_PROCS = ("tern-dev", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                 "kube-etcd", "tern-node")


def cluster_cpu(t):
    """CPU seconds so far of each of the cluster's processes."""
    out = {}
    for name in CLUSTER_PROCS:
        p = t.procs.get(name)
        pid = getattr(getattr(p, "p", None), "pid", None) or getattr(p, "pid", None)
        if pid:
            try:
                out[name] = proc_stats(pid)[0]
            except OSError:
                pass
    return out


def measure_idle(t, op, what, n):
    cpu0, _ = proc_stats(op.p.pid)
    c0 = cluster_cpu(t)
    m0 = metrics(t)
    time.sleep(20)  # a measurement window, not synchronisation
    cpu1, rss = proc_stats(op.p.pid)
    c1 = cluster_cpu(t)
    m1 = metrics(t)
    per = " (%.1f KiB per session)" % (rss / n) if n else ""
    print("  %s: RSS %.1f MiB%s, CPU %.2f%% of one core over 20 s, %d reconciles, %d API writes"
          % (what, rss / 1024, per, (cpu1 - cpu0) / 20 * 100,
             m1.get("tern_reconciles_total", 0) - m0.get("tern_reconciles_total", 0),
             m1.get("tern_api_writes_total", 0) - m0.get("tern_api_writes_total", 0)), flush=True)
    print("      cluster CPU over the same 20 s: %s" % ", ".join(
        "%s %.1f%%" % (k, (c1[k] - c0[k]) / 20 * 100) for k in c1 if k in c0), flush=True)
    caches = sorted(((k.split('"')[1], v) for k, v in m1.items()
                     if k.startswith("tern_cache_bytes{")), key=lambda kv: -kv[1])
    objs = {k.split('"')[1]: v for k, v in m1.items() if k.startswith("tern_cache_objects{")}
    if caches:
        print("      operator caches: %.1f MiB in all: %s" % (
            sum(v for _, v in caches) / 1048576, ", ".join(
                "%s %d objects %.1f MiB" % (k, objs.get(k, 0), v / 1048576) for k, v in caches)),
            flush=True)
    return rss, (cpu1 - cpu0) / 20 * 100


class ApiPprof:
    """kube-apiserver's own CPU profile (/debug/pprof, its binary is
    stripped) while a stage runs: back-to-back 5 s profiles, merged by
    `go tool pprof` at the end."""

    def __init__(self, t, what):
        self.t, self.what, self.files = t, what, []
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        api = Api(self.t.kubeconfig)
        while not self.stop.is_set():
            r = urllib.request.Request(api.server + "/debug/pprof/profile?seconds=5",
                                       headers=api.headers)
            try:
                with urllib.request.urlopen(r, context=api.ctx, timeout=60) as resp:
                    data = resp.read()
            except OSError as e:
                print("      pprof of kube-apiserver: %s (start it with "
                      "TERN_KUBE_PROFILING=1)" % e, flush=True)
                return
            out = os.path.join(self.t.dir, "pprof-%s-%d.pb.gz" % (self.what, len(self.files)))
            with open(out, "wb") as f:
                f.write(data)
            self.files.append(out)

    def report(self):
        import subprocess
        self.stop.set()
        self.th.join(timeout=30)
        if not self.files:
            return
        rep = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=14"] + self.files,
                             capture_output=True, text=True)
        print("      pprof, kube-apiserver during %s (%d profiles of 5 s, %s):" %
              (self.what, len(self.files), self.files[0]), flush=True)
        for ln in (rep.stdout or rep.stderr).splitlines()[:22]:
            print("        " + ln.rstrip(), flush=True)
        cum = subprocess.run(["go", "tool", "pprof", "-top", "-cum", "-nodecount=25"] +
                             self.files, capture_output=True, text=True)
        print("      (by cumulative time):", flush=True)
        for ln in (cum.stdout or cum.stderr).splitlines()[6:31]:
            print("        " + ln.rstrip(), flush=True)


class Profile:
    """perf record -g of the operator (and the cluster's main process) while
    a stage runs; prints where the time went."""

    def __init__(self, t, op, enabled, what):
        self.procs, self.what = [], what
        if not enabled:
            return
        # perf -p follows the threads that exist when it attaches: wait until
        # the operator serves /metrics (its informers and workers run by then)
        self._wait_metrics(t)
        pids = [("tern-operator", op.p.pid)]
        main = t.procs.get("tern-dev")
        pid = getattr(getattr(main, "p", None), "pid", None) or getattr(main, "pid", None)
        if pid:
            pids.append(("tern-dev", pid))
        elif "kube-apiserver" in t.procs:
            self.pprof = ApiPprof(t, what)
        import subprocess
        for name, pid in pids:
            out = os.path.join(t.dir, "perf-%s-%s.data" % (what, name))
            self.procs.append((name, out, subprocess.Popen(
                ["perf", "record", "-g", "-F", "199", "-p", str(pid), "-o", out],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))

    @staticmethod
    def _wait_metrics(t):
        def up():
            try:
                metrics(t)
                return True
            except OSError:
                return False
        ternlocal.wait_for("the operator's metrics", up, 60, interval=0.05)

    def report(self):
        import signal
        import subprocess
        if getattr(self, "pprof", None):
            self.pprof.report()
        for name, out, p in self.procs:
            p.send_signal(signal.SIGINT)
            p.wait(timeout=60)
            rep = subprocess.run(["perf", "report", "-i", out, "--stdio", "--no-children",
                                  "--sort", "dso,symbol", "-g", "none", "--percent-limit", "2"],
                                 capture_output=True, text=True).stdout
            lines = [ln for ln in rep.splitlines() if ln.strip() and not ln.startswith("#")]
            print("      perf, %s during %s (%s):" % (name, self.what, out), flush=True)
            for ln in lines[:12]:
                print("        " + ln.strip(), flush=True)


def live_session(t, api, base, remote, n):
    """One session from kubectl apply to Completed, with the stages of the
    path to its first model request."""
    rec = os.path.join(t.dir, "model-requests.jsonl")
    size0 = os.path.getsize(rec) if os.path.exists(rec) else 0
    seen = {}
    stop = threading.Event()
    t0 = [None]

    def mark(stage):
        if stage not in seen and t0[0] is not None:
            seen[stage] = time.monotonic() - t0[0]

    def on_session(_ty, o):
        if o["metadata"]["name"] == "live" and (o.get("status") or {}).get("phase"):
            mark("operator wrote its first status")

    def on_pod(_ty, o):
        name = o["metadata"]["name"]
        st = o.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in st.get("conditions", []))
        if name == "live-sandbox":
            mark("sandbox pod created")
            on_pod_scheduled(o)
            if st.get("phase") == "Running":
                mark("sandbox pod running")
            if ready:
                mark("sandbox ready (probe passed)")
        elif name.startswith("live-t1-"):
            mark("runner pod created")
            if st.get("phase") == "Running":
                mark("runner pod running")

    def on_job(_ty, o):
        if o["metadata"]["name"] == "live-t1":
            mark("turn Job created")

    def on_claim(_ty, o):
        if o["metadata"]["name"] == "live-workspace":
            mark("workspace claim created")
            if (o.get("status") or {}).get("phase") == "Bound":
                mark("workspace claim bound")

    def on_pod_scheduled(o):
        if (o.get("spec") or {}).get("nodeName"):
            mark("sandbox pod scheduled")
    threads = [threading.Thread(target=api.watch, args=(p, f, stop), daemon=True) for p, f in [
        ("/apis/tern.dev/v1alpha1/namespaces/%s/agentsessions?fieldSelector=metadata.name%%3Dlive"
         % NS, on_session),
        ("/api/v1/namespaces/%s/pods" % NS, on_pod),
        ("/apis/batch/v1/namespaces/%s/jobs" % NS, on_job),
        ("/api/v1/namespaces/%s/persistentvolumeclaims" % NS, on_claim)]]
    for th in threads:
        th.start()
    time.sleep(1)  # the watches open (not synchronisation of the measured path)
    man = open(os.path.join(ternlocal.ROOT, "examples", "demo.yaml")).read().replace(
        "http://127.0.0.1:0/v1", base).replace("demo-model", "model").replace(
        "name: demo\n", "name: live\n").replace("http://127.0.0.1:0/demo.git", remote)
    w_before = metrics(t).get("tern_api_writes_total", 0)
    t0[0] = time.monotonic()
    t.kubectl("apply", "-f", "-", input=man)
    mark("kubectl apply returned")
    try:
        ternlocal.wait_for("first model request", lambda: os.path.exists(rec) and
                           os.path.getsize(rec) > size0, 600, interval=0.005)
        to_model = time.monotonic() - t0[0]
        s = t.wait_session("live", "approval", lambda s: ternlocal.phase(s) ==
                           "WaitingForApproval", 600)
        to_approval = time.monotonic() - t0[0]
        t.kubectl("annotate", "agentsession", "live",
                  "tern.dev/approve=" + s["status"]["pendingApproval"]["id"])
        t.wait_session("live", "done", lambda s: ternlocal.condition(s, "Completed") == "True", 600)
        to_done = time.monotonic() - t0[0]
    except ternlocal.Failed as e:
        print("  one live session did not finish: %s; the stages it reached:" % e, flush=True)
        for stage, at in sorted(seen.items(), key=lambda kv: kv[1]):
            print("      %6.3f s  %s" % (at, stage), flush=True)
        stop.set()
        return None
    stop.set()
    w_after = metrics(t).get("tern_api_writes_total", 0)
    print("  one live session beside %d parked: from kubectl apply %.2f s to the first model "
          "request, %.2f s to WaitingForApproval, %.2f s to Completed (approved at once); "
          "%d API writes by the operator" % (n, to_model, to_approval, to_done,
                                              w_after - w_before), flush=True)
    seen["first model request"] = to_model
    for stage, at in sorted(seen.items(), key=lambda kv: kv[1]):
        if at <= to_model + 1e-9:
            print("      %6.3f s  %s" % (at, stage), flush=True)
    return to_model


def bound_claims(api):
    """How many claims in NS are Bound (a paged list)."""
    bound, cont = 0, ""
    while True:
        page = api.req("GET", "/api/v1/namespaces/%s/persistentvolumeclaims?limit=500%s" %
                       (NS, "&continue=" + cont if cont else ""))
        bound += sum(1 for c in page["items"] if (c.get("status") or {}).get("phase") == "Bound")
        cont = page["metadata"].get("continue")
        if not cont:
            return bound


def wait_claims_bound(api, n, first_end):
    """Until the cluster has bound every parked session's claim (as after days
    of waiting): the idle, restart and live figures are of a settled cluster,
    not of one still binding (kube's PV binder takes minutes for 10,000)."""
    ternlocal.wait_for("the claims bound", lambda: bound_claims(api) >= n, max(1200, n / 5),
                       interval=5)
    print("  the cluster had bound all %d claims %.1f s after the first start" %
          (n, time.monotonic() - first_end), flush=True)


def wait_quiet(t):
    """Until the operator has run no reconcile for 3 s (its queue drained)."""
    def quiet():
        a = metrics(t).get("tern_reconciles_total", 0)
        time.sleep(3)  # the window that defines quiet, not synchronisation
        return metrics(t).get("tern_reconciles_total", 0) == a
    ternlocal.wait_for("the queue to drain", quiet, 600, interval=0)


def run(cluster, n, perf=False):
    print("bench/operator on %s: %d parked sessions" % (cluster, n), flush=True)
    with ternlocal.Local(cluster=cluster) as t:
        t.start_etcd()
        t.start_cluster()
        base = t.start_fakellm(os.path.join(ternlocal.ROOT, "examples", "demo-script.json"))
        t.apply_crd()
        t.apply_runner_rbac()
        t.create_secret("model", "api-key", "bench")
        t.create_secret("demo-git", "token", "not-a-real-git-token")
        remote = t.start_gitremote("not-a-real-git-token", repo="demo.git")
        api = Api(t.kubeconfig)
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
        t0 = time.monotonic()

        def make(i):
            s = api.req("POST", "/apis/tern.dev/v1alpha1/namespaces/%s/agentsessions" % NS, {
                "apiVersion": "tern.dev/v1alpha1", "kind": "AgentSession",
                "metadata": {"name": "parked-%05d" % i},
                "spec": {"objective": "bench", "approval": {"timeoutSeconds": 2592000}}})
            ternlocal.seed_parked_journal(t.journal, s["metadata"]["uid"], now)
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            list(ex.map(make, range(n)))
        print("  setup: %d sessions created and journals seeded in %.1f s" %
              (n, time.monotonic() - t0), flush=True)

        t0 = time.monotonic()
        op = start_operator(t, "tern-operator")
        prof = Profile(t, op, perf, "first-start")
        ternlocal.wait_for("all parked", lambda: metrics(t).get(WAITING, 0) >= n,
                           max(600, n / 5), interval=0.25)
        first_end = time.monotonic()
        first = first_end - t0
        m = metrics(t)
        print("  first start: %d sessions reconciled to WaitingForApproval in %.1f s "
              "(%d reconciles, %d API writes: finalizers, claims and status)" %
              (n, first, m.get("tern_reconciles_total", 0), m.get("tern_api_writes_total", 0)),
              flush=True)
        print_reconcile_split(m, "first start")
        prof.report()
        t0 = time.monotonic()
        wait_quiet(t)
        print("  the queue drained (no reconcile for 3 s) %.1f s later" % (time.monotonic() - t0),
              flush=True)
        wait_claims_bound(api, n, first_end)
        measure_idle(t, op, "idle", n)

        t.stop("tern-operator")
        t0 = time.monotonic()
        op = start_operator(t, "tern-operator")
        prof = Profile(t, op, perf, "restart")
        ternlocal.wait_for("relisted", lambda: metrics(t).get("tern_reconciles_total", 0) >= n,
                           max(600, n / 5), interval=0.1)
        relist = time.monotonic() - t0
        m = metrics(t)
        print("  restart: relist + reconcile of %d sessions in %.2f s; API writes when nothing "
              "changed: %d (%d status), %d errors" %
              (n, relist, m.get("tern_api_writes_total", 0), m.get("tern_status_writes_total", 0),
               m.get("tern_reconcile_errors_total", 0)), flush=True)
        print_reconcile_split(m, "restart")
        prof.report()

        wait_quiet(t)
        measure_idle(t, op, "steady idle after the restart", n)
        prof = Profile(t, op, perf, "live-session")
        live_session(t, api, base, remote, n)
        prof.report()


def main():
    import argparse
    ap = argparse.ArgumentParser(prog="bench_operator.py")
    ap.add_argument("n", nargs="?", type=int,
                    default=int(os.environ.get("TERN_BENCH_SESSIONS", "10000")))
    ap.add_argument("--cluster", choices=["terndev", "kube", "both"], default="both")
    ap.add_argument("--perf", action="store_true",
                    help="perf record -g the operator and tern-dev (kube-apiserver: its "
                         "/debug/pprof CPU profile) during the first start, the restart and "
                         "the live session, and print the top symbols")
    a = ap.parse_args()
    if a.perf:
        os.environ["TERN_KUBE_PROFILING"] = "1"  # kube-apiserver's /debug/pprof
    import kubecluster
    for c in (["terndev", "kube"] if a.cluster == "both" else [a.cluster]):
        if c == "kube" and kubecluster.missing_binaries():
            print("bench/operator on kube: skipped, the real control plane is not built "
                  "(make kube)")
            continue
        run(c, a.n, a.perf)


if __name__ == "__main__":
    main()
