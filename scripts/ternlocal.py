"""ternlocal - run Tern on one machine: etcd, tern-dev, the scripted model
server and tern-operator, each on free loopback ports, in one work directory.

Used by `make demo` (scripts/demo) and by the end-to-end suites
(tests/integration/test_e2e_*.py). Standard library only; run it with
/usr/bin/python3.

The cluster is tern-dev (the embedded imitation) or, with
TERN_CLUSTER=kube (or Local(cluster="kube")), the real control plane
(official kube-apiserver, kube-controller-manager, kube-scheduler and etcd
built by `make kube`, with tern-node as the node; scripts/kubecluster.py).
Suites start it with start_cluster() and are written once for both.

    with Local(workdir) as t:
        t.start_all(script="examples/demo-script.json")
        t.kubectl("apply", "-f", "crds/agentsessions.tern.dev.yaml")
        ...

Every process is started with its output in workdir/logs/ and stopped by pid
(SIGTERM, then SIGKILL after a grace period) when the context exits. Readiness
is always a condition polled with a deadline (a ready line, /health, an
established CRD), never a fixed sleep.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("TERN_BUILD", os.path.join(ROOT, "build"))
BIN = os.path.join(BUILD, "bin")
KUBECTL = os.environ.get("KUBECTL", "/usr/bin/kubectl")
ETCD = "/usr/bin/etcd"
CLUSTER = os.environ.get("TERN_CLUSTER", "terndev")


class Failed(Exception):
    pass


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, fn, timeout, interval=0.05):
    """Polls fn() until it returns a true value; raises Failed after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # the condition may fail until it holds
            last = e
        time.sleep(interval)
    raise Failed("timed out after %ss waiting for %s%s" %
                 (timeout, what, (": %s" % last) if last else ""))


class Proc:
    def __init__(self, name, argv, logdir, env=None, stdout_pipe=False):
        self.name = name
        self.log = os.path.join(logdir, name + ".log")
        self.logf = open(self.log, "ab")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE if stdout_pipe else self.logf,
                                  stderr=self.logf, env=env, start_new_session=True)

    def read_line(self, timeout):
        """The first stdout line (for 'ready' lines), within timeout."""
        os.set_blocking(self.p.stdout.fileno(), False)
        buf = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = self.p.stdout.read()
            if chunk:
                buf += chunk
                if b"\n" in buf:
                    line, rest = buf.split(b"\n", 1)
                    self.logf.write(buf)
                    self.logf.flush()
                    return line.decode()
            elif self.p.poll() is not None:
                break
            time.sleep(0.02)
        raise Failed("%s printed no ready line within %ss (exit %s); log %s:\n%s" %
                     (self.name, timeout, self.p.poll(), self.log, self.tail()))

    def tail(self, n=3000):
        try:
            with open(self.log, "r", errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def alive(self):
        return self.p.poll() is None

    def stop(self, sig=signal.SIGTERM, grace=15):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.logf.close()


class Local:
    def __init__(self, workdir=None, keep=False, cluster=None):
        self.cluster = cluster or CLUSTER
        if self.cluster not in ("terndev", "kube"):
            raise Failed("unknown cluster %r (terndev or kube)" % self.cluster)
        self.kube = None
        self.own_dir = workdir is None
        self.dir = workdir or tempfile.mkdtemp(prefix="tern-local-")
        self.logs = os.path.join(self.dir, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.home = os.path.join(self.dir, "home")
        os.makedirs(self.home, exist_ok=True)
        self.keep = keep or os.environ.get("TERN_KEEP_WORKDIR") == "1"  # for a look afterwards
        self.procs = {}
        self.etcd_url = None
        self.kubeconfig = None
        self.model_addr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop_all()
        if self.own_dir and not self.keep and not exc[0]:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- processes ----------------------------------------------------
    def start_etcd(self):
        for _ in range(5):
            cport, pport = free_port(), free_port()
            url = "http://127.0.0.1:%d" % cport
            data = os.path.join(self.dir, "etcd")
            p = Proc("etcd", [ETCD, "--data-dir", data, "--name", "tern-local",
                              "--listen-client-urls", url, "--advertise-client-urls", url,
                              "--listen-peer-urls", "http://127.0.0.1:%d" % pport,
                              "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pport,
                              "--initial-cluster", "tern-local=http://127.0.0.1:%d" % pport],
                     self.logs)
            try:
                wait_for("etcd /health", lambda: p.alive() and
                         b"true" in urllib.request.urlopen(url + "/health", timeout=1).read(),
                         20)
            except Failed:
                p.stop()
                continue
            self.procs["etcd"] = p
            self.etcd_url = url
            return url
        raise Failed("etcd did not start (ports taken?)")

    def start_terndev(self, extra=()):
        """tern-dev up on the started etcd; extra: more flags for `up`.
        Raises Failed (and leaves no process) when it does not get ready."""
        d = os.path.join(self.dir, "tern-dev")
        env = dict(os.environ, PATH=BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
        p = Proc("tern-dev", [os.path.join(BIN, "tern-dev"), "up", "--dir", d, "--port", "0",
                              "--etcd", self.etcd_url, *extra], self.logs, env=env,
                 stdout_pipe=True)
        try:
            line = p.read_line(60)
        except Failed:
            p.stop()
            raise
        want = "tern-dev ready kubeconfig=%s/kubeconfig" % d
        if line != want:
            p.stop()
            raise Failed("tern-dev said %r, expected %r" % (line, want))
        self.procs["tern-dev"] = p
        self.kubeconfig = os.path.join(d, "kubeconfig")
        return self.kubeconfig

    def start_kube(self):
        """The real control plane with tern-node (scripts/kubecluster.py)."""
        import kubecluster
        gone = kubecluster.missing_binaries()
        if gone:
            raise Failed("the real control plane is not built: missing %s (run `make kube`)" %
                         ", ".join(gone))
        self.kube = kubecluster.KubeCluster(self.dir, self.logs, self.procs, Proc)
        self.kubeconfig = self.kube.start()
        return self.kubeconfig

    def start_cluster(self, terndev_extra=()):
        """The cluster this Local was made for: tern-dev, or the real control
        plane. Returns the kubeconfig path."""
        if self.cluster == "kube":
            return self.start_kube()
        return self.start_terndev(extra=terndev_extra)

    @property
    def admin_user(self):
        """Who the kubeconfig's credentials authenticate as."""
        return "tern-admin" if self.cluster == "kube" else "tern-dev:admin"

    def start_fakellm(self, script):
        p = Proc("tern-fakellm", [os.path.join(BIN, "tern-fakellm"), "--script", script,
                                  "--listen", "127.0.0.1:0", "--record",
                                  os.path.join(self.dir, "model-requests.jsonl")],
                 self.logs, stdout_pipe=True)
        line = p.read_line(20)
        if not line.startswith("tern-fakellm listening "):
            p.stop()
            raise Failed("tern-fakellm said %r" % line)
        self.procs["tern-fakellm"] = p
        self.model_addr = line.split()[-1]
        return "http://%s/v1" % self.model_addr

    def start_gitremote(self, token, repo="demo.git", name="gitremote"):
        """A git HTTP remote that requires token (tests/fakes/gitremote.py):
        returns the repository's URL; its log (requests, and one line per
        ref a push updated) is self.dir/<name>.jsonl."""
        root = os.path.join(self.dir, name)
        log = os.path.join(self.dir, name + ".jsonl")
        p = Proc(name, ["/usr/bin/python3", os.path.join(ROOT, "tests", "fakes", "gitremote.py"),
                        "--root", root, "--repo", repo, "--token", token, "--log", log],
                 self.logs, stdout_pipe=True)
        line = p.read_line(20)
        if not line.startswith("gitremote listening "):
            p.stop()
            raise Failed("gitremote said %r" % line)
        self.procs[name] = p
        return "http://%s/%s" % (line.split()[-1], repo)

    def start_fakemcp(self, token, *flags, name="fakemcp"):
        """The scripted MCP server (tests/fakes/fakemcp.py): returns its
        endpoint URL; its log of every request is self.dir/<name>.jsonl."""
        log = os.path.join(self.dir, name + ".jsonl")
        p = Proc(name, ["/usr/bin/python3", os.path.join(ROOT, "tests", "fakes", "fakemcp.py"),
                        "--token", token, "--log", log, *flags], self.logs, stdout_pipe=True)
        line = p.read_line(20)
        if not line.startswith("fakemcp listening "):
            p.stop()
            raise Failed("fakemcp said %r" % line)
        self.procs[name] = p
        return "http://%s/mcp" % line.split()[-1]

    def start_operator(self, name="tern-operator", extra=()):
        argv = [os.path.join(BIN, "tern-operator"), "--kubeconfig", self.kubeconfig,
                "--etcd-endpoints", self.etcd_url, "--metrics-addr", "127.0.0.1:%d" % free_port(),
                "--health-addr", "127.0.0.1:%d" % free_port(), "--runner-image", "tern-runner:local",
                "--sandbox-image", "tern-sandbox:local", "--id", name, *extra]
        p = Proc(name, argv, self.logs)
        self.procs[name] = p
        return p

    # The node's address on the pod network (kubelet_cfg.pod_network's
    # first address): pods of their own network namespace reach the host
    # there, so the egress proxy listens on it.
    NODE_POD_NET_ADDR = "10.213.0.1"

    def start_egress_proxy(self, hosts_file=None, assume_public=None, extra=(),
                           kubeconfig=None, name="tern-egress-proxy"):
        """tern-egress-proxy on the node's pod-network address (a free port),
        /metrics on loopback. Returns (proxy "HOST:PORT", metrics URL)."""
        maddr = "127.0.0.1:%d" % free_port()
        argv = [os.path.join(BIN, "tern-egress-proxy"), "--kubeconfig",
                kubeconfig or self.kubeconfig, "--listen", self.NODE_POD_NET_ADDR + ":0",
                "--metrics-addr", maddr, "--id", name, *extra]
        if hosts_file:
            argv += ["--hosts-file", hosts_file]
        if assume_public:
            argv += ["--assume-public", assume_public]
        p = Proc(name, argv, self.logs, stdout_pipe=True)
        line = p.read_line(60)
        if not line.startswith("tern-egress-proxy ready addr="):
            p.stop()
            raise Failed("tern-egress-proxy said %r" % line)
        self.procs[name] = p
        return line.split("addr=", 1)[1], "http://%s/metrics" % maddr

    def apply_runner_rbac(self, ns="default"):
        self.kubectl("apply", "-n", ns, "-f", os.path.join(ROOT, "deploy", "runner-rbac.yaml"))

    def start_all(self, script=None):
        self.start_etcd()
        self.start_cluster()
        if script:
            self.start_fakellm(script)
        self.apply_crd()
        self.apply_runner_rbac()
        self.start_operator()

    def stop(self, name, sig=signal.SIGTERM):
        p = self.procs.pop(name, None)
        if p:
            p.stop(sig)

    def stop_all(self):
        for name in ["op-a", "op-b", "tern-operator", "tern-egress-proxy", "tern-fakellm",
                     "model-slow", "model-fast",
                     "tern-dev", "tern-node", "kube-scheduler", "kube-controller-manager",
                     "kube-apiserver", "kube-etcd", "etcd"]:
            self.stop(name)
        for name in list(self.procs):
            self.stop(name)

    # ---- kubectl -----------------------------------------------------
    def kubectl(self, *args, input=None, check=True, timeout=120):
        env = dict(os.environ, HOME=self.home, KUBECONFIG=self.kubeconfig)
        r = subprocess.run([KUBECTL, *args], input=input, capture_output=True, text=True,
                           env=env, timeout=timeout)
        if check and r.returncode != 0:
            raise Failed("kubectl %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                     r.stderr.strip()))
        return r.stdout

    def tern(self, *args, check=True):
        """kubectl tern ... (kubectl finds the plugin on PATH)."""
        env = dict(os.environ, HOME=self.home, KUBECONFIG=self.kubeconfig,
                   PATH=BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
        r = subprocess.run([KUBECTL, "tern", *args], capture_output=True, text=True, env=env,
                           timeout=60)
        if check and r.returncode != 0:
            raise Failed("kubectl tern %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                          r.stderr.strip()))
        return r.stdout

    def get_json(self, *args):
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def create_secret(self, name, key, value, ns="default"):
        """A generic Secret, applied as JSON (tern-dev does not take the
        protobuf bodies `kubectl create secret` sends)."""
        import base64
        obj = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
               "type": "Opaque", "data": {key: base64.b64encode(value.encode()).decode()}}
        return self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def apply_crd(self):
        """Both CRDs: AgentSession and AgentBudget."""
        for name in ("agentsessions.tern.dev", "agentbudgets.tern.dev"):
            self.kubectl("apply", "-f", os.path.join(ROOT, "crds", name + ".yaml"))
        self.kubectl("wait", "--for=condition=established", "--timeout=60s",
                     "crd/agentsessions.tern.dev", "crd/agentbudgets.tern.dev")

    def session(self, name, ns="default"):
        return self.get_json("agentsession", name, "-n", ns)

    def wait_session(self, name, what, pred, timeout=120, ns="default"):
        def check():
            s = self.session(name, ns)
            return s if pred(s) else None
        return wait_for("%s %s" % (name, what), check, timeout, interval=0.2)

    def logs_of(self, name):
        p = self.procs.get(name)
        return p.tail() if p else ""


def phase(s):
    return (s.get("status") or {}).get("phase")


def condition(s, t):
    for c in (s.get("status") or {}).get("conditions", []):
        if c.get("type") == t:
            return c.get("status")
    return None


# ---- looking inside: the journal (etcd JSON gateway) and sandboxd ----------
def _b64(s):
    import base64
    return base64.b64encode(s.encode()).decode()


def _unb64(s):
    import base64
    return base64.b64decode(s).decode()


def journal_events(etcd_url, uid):
    """Every event of a session's journal, decoded, in seq order."""
    prefix = "/tern/v1/s/%s/ev/" % uid
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": _b64(prefix), "range_end": _b64(end)}).encode()
    req = urllib.request.Request(etcd_url + "/v3/kv/range", data=body,
                                 headers={"Content-Type": "application/json"})
    out = json.loads(urllib.request.urlopen(req, timeout=10).read())
    events = []
    for kv in out.get("kvs", []):
        key = _unb64(kv["key"])
        if "/c/" in key[len(prefix):]:
            continue  # chunks of an oversize event
        events.append(json.loads(_unb64(kv.get("value", ""))))
    events.sort(key=lambda e: e["seq"])
    return events


def journal_keys(etcd_url, uid):
    prefix = "/tern/v1/s/%s/" % uid
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": _b64(prefix), "range_end": _b64(end), "keys_only": True}).encode()
    req = urllib.request.Request(etcd_url + "/v3/kv/range", data=body,
                                 headers={"Content-Type": "application/json"})
    out = json.loads(urllib.request.urlopen(req, timeout=10).read())
    return [_unb64(kv["key"]) for kv in out.get("kvs", [])]


def read_jsonl(path):
    """The JSON lines of a fake's log ([] before it exists)."""
    try:
        with open(path) as f:
            return [json.loads(x) for x in f if x.strip()]
    except FileNotFoundError:
        return []


def mcp_idempotency_key(uid, call_id):
    """The key the runner sends an MCP server for a call (runner/trusted.h)."""
    import hashlib
    return "tern-" + hashlib.sha256(("%s/%s" % (uid, call_id)).encode()).hexdigest()[:32]


def sandbox_executions(addr, token):
    """tern-sandboxd's execution log: {key: record}."""
    req = urllib.request.Request("http://%s/v1/executions" % addr,
                                 headers={"Authorization": "Bearer " + token})
    out = json.loads(urllib.request.urlopen(req, timeout=10).read())
    return out.get("executions", [])
