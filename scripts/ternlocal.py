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
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import sys
import urllib.error
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


def local_ip():
    """A global-scope IPv4 address of this machine, or None. An EndpointSlice
    may not name a loopback address (kube-apiserver refuses it, and tern-dev
    too), so an aggregated API served by a process on the host is reached at
    this address."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global", "up"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            return parts[parts.index("inet") + 1].split("/")[0]
    return None


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
        self.journal = None      # JournalEtcd: the test's own view (as root)
        self.journal_pki = None
        self.api_pki = None
        self.api_port = None
        self.kubeconfig = None
        self.model_addr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop_all()
        if self.own_dir and not self.keep and not exc[0]:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ---- processes ----------------------------------------------------
    def journal_etcd_binary(self):
        """The journal's etcd: Debian's 3.4 beside tern-dev (always there), the
        official 3.6 that `make kube` builds beside the real control plane (what
        a current cluster runs). docs/journal.md, "The locked door", says what
        differs between the two."""
        if self.cluster == "kube":
            import kubecluster
            return os.path.join(kubecluster.KUBE_BIN, "etcd")
        return ETCD

    def make_journal_pki(self):
        """The journal's PKI (docs/journal.md, "The locked door"): one CA; a
        serving certificate for 127.0.0.1 (also its peer certificate); client
        certificates of the operator and of the runners. No certificate has
        a CommonName: etcd's gateway refuses such clients once auth is on,
        and users log in with passwords (root's and the operator's, 32
        random bytes each)."""
        import kubecluster
        d = os.path.join(self.dir, "journal-pki")
        pki = kubecluster.PKI(d)
        pki.ca("ca", None, subj="/O=tern/OU=journal-ca")
        pki.cert("server", "ca", None, orgs=("tern",), ous=("journal-etcd",), server=True,
                 sans=("IP:127.0.0.1", "DNS:localhost"))
        pki.cert("operator", "ca", None, orgs=("tern",), ous=("journal-operator",))
        pki.cert("runner", "ca", None, orgs=("tern",), ous=("journal-runner",))
        for name in ("root-password", "operator-password"):
            with open(os.path.join(d, name), "w") as f:
                f.write(os.urandom(32).hex() + "\n")
            os.chmod(os.path.join(d, name), 0o600)
        self.journal_pki = pki
        return pki

    def journal_flags(self):
        """The operator's flags for the locked journal."""
        p = self.journal_pki.path
        return ["--etcd-endpoints", self.etcd_url, "--etcd-ca-file", p("ca.crt"),
                "--etcd-cert-file", p("operator.crt"), "--etcd-key-file", p("operator.key"),
                "--etcd-password-file", p("operator-password"),
                "--etcd-root-password-file", p("root-password"),
                "--etcd-runner-cert-file", p("runner.crt"),
                "--etcd-runner-key-file", p("runner.key")]

    def start_etcd(self, pki=None):
        """The journal's etcd, locked: HTTPS only with client certificates of
        the journal's CA (--client-cert-auth, peers too), then etcd auth set
        up by `tern-operator --journal-init` (root, the operator's user and
        role). --bcrypt-cost 4: every password is 32 random bytes, so the
        slow hash buys nothing. Returns the URL.

        pki: certificates made elsewhere (a PKI whose path(name) has ca.crt,
        server.crt/.key, operator.crt/.key and root-password, e.g. the
        Secrets of the tern-pki Job); then auth is left to the operator that
        uses them, and the test's own view logs in as root once it is on."""
        init = pki is None
        pki = pki or self.make_journal_pki()
        self.journal_pki = pki
        p = pki.path
        tls = ["--cert-file", p("server.crt"), "--key-file", p("server.key"),
               "--client-cert-auth", "--trusted-ca-file", p("ca.crt"),
               "--peer-cert-file", p("server.crt"), "--peer-key-file", p("server.key"),
               "--peer-client-cert-auth", "--peer-trusted-ca-file", p("ca.crt")]
        for _ in range(5):
            cport, pport = free_port(), free_port()
            url = "https://127.0.0.1:%d" % cport
            purl = "https://127.0.0.1:%d" % pport
            data = os.path.join(self.dir, "etcd")
            shutil.rmtree(data, ignore_errors=True)
            p_ = Proc("etcd", [self.journal_etcd_binary(), "--data-dir", data, "--name",
                               "tern-local", "--listen-client-urls", url,
                               "--advertise-client-urls", url, "--listen-peer-urls", purl,
                               "--initial-advertise-peer-urls", purl,
                               "--initial-cluster", "tern-local=" + purl,
                               "--bcrypt-cost", "4", *tls], self.logs)
            self.journal = JournalEtcd(url, p("ca.crt"), p("operator.crt"), p("operator.key"))
            try:
                wait_for("etcd /health", lambda: p_.alive() and
                         b"true" in self.journal.get("/health"), 20)
            except Failed:
                p_.stop()
                continue
            self.procs["etcd"] = p_
            self.etcd_url = url
            if init:
                self.journal_init()
            else:
                with open(p("root-password")) as f:
                    self.journal.credentials = ("root", f.read().strip())
            return url
        raise Failed("etcd did not start (ports taken?)")

    def journal_env(self):
        """The TERN_ETCD_* settings of a tern-runner started by a test
        itself (not as a turn Job of the operator): the runners'
        certificate, and the operator's user, whose role covers every
        session (the operator's Jobs get their session's own user)."""
        p = self.journal_pki.path
        return {"TERN_ETCD_ENDPOINTS": self.etcd_url, "TERN_ETCD_CA_FILE": p("ca.crt"),
                "TERN_ETCD_CERT_FILE": p("runner.crt"), "TERN_ETCD_KEY_FILE": p("runner.key"),
                "TERN_ETCD_USERNAME": "tern-operator",
                "TERN_ETCD_PASSWORD_FILE": p("operator-password")}

    def journal_init(self):
        """tern-operator --journal-init: the users, roles and auth."""
        r = subprocess.run([os.path.join(BIN, "tern-operator"), "--journal-init",
                            *self.journal_flags()], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise Failed("tern-operator --journal-init: exit %d: %s" % (r.returncode,
                                                                        r.stderr.strip()))
        with open(self.journal_pki.path("root-password")) as f:
            self.journal.credentials = ("root", f.read().strip())
        self.journal.login(*self.journal.credentials)

    def start_terndev(self, extra=()):
        """tern-dev up on the started etcd; extra: more flags for `up`.
        Raises Failed (and leaves no process) when it does not get ready."""
        d = os.path.join(self.dir, "tern-dev")
        env = dict(os.environ, PATH=BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
        # tern-dev keeps its objects in an etcd of its own (it starts it), as
        # a cluster keeps the journal apart from its own store
        p = Proc("tern-dev", [os.path.join(BIN, "tern-dev"), "up", "--dir", d, "--port", "0",
                              *extra], self.logs, env=env, stdout_pipe=True)
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

    def make_api_pki(self):
        """The aggregated API's serving certificate (docs/stream-api.md): a CA
        of its own and a certificate for the Service name the API server
        checks (tern-operator.tern-system.svc), made once per Local."""
        if self.api_pki:
            return self.api_pki
        import kubecluster
        pki = kubecluster.PKI(os.path.join(self.dir, "api-pki"))
        pki.ca("ca", None, subj="/O=tern/OU=stream-api-ca")
        pki.cert("serving", "ca", None, orgs=("tern",), ous=("stream-api",), client=False,
                 server=True, sans=("DNS:tern-operator.tern-system.svc",
                                    "DNS:tern-operator.tern-system.svc.cluster.local"))
        self.api_pki = pki
        return pki

    def register_api(self, name, addr, port):
        """The APIService v1alpha1.stream.tern.dev, backed by the Service
        tern-system/tern-operator without a selector and an EndpointSlice
        naming this operator's address (it runs on the host, not in a pod):
        the API server (kube-apiserver, or tern-dev) proxies
        /apis/stream.tern.dev/... to it. The operator fills in the caBundle."""
        if not self.kubectl("get", "namespace", "tern-system", "--ignore-not-found",
                            "-o", "name").strip():
            self.kubectl("create", "namespace", "tern-system")
        objs = [
            {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "tern-operator", "namespace": "tern-system"},
             "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                 "targetPort": port}]}},
            {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {"name": "tern-operator-" + name, "namespace": "tern-system",
                          "labels": {"kubernetes.io/service-name": "tern-operator",
                                     "endpointslice.kubernetes.io/managed-by": "ternlocal"}},
             "addressType": "IPv4",
             "endpoints": [{"addresses": [addr], "conditions": {"ready": True}}],
             "ports": [{"name": "https", "port": port, "protocol": "TCP"}]},
            {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
             "metadata": {"name": "v1alpha1.stream.tern.dev"},
             "spec": {"group": "stream.tern.dev", "version": "v1alpha1",
                      "service": {"namespace": "tern-system", "name": "tern-operator",
                                  "port": 443},
                      "groupPriorityMinimum": 1000, "versionPriority": 15}},
        ]
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": objs}))

    def wait_api(self, timeout=90):
        """Until the aggregated API answers discovery through the API server."""
        return wait_for("stream.tern.dev served through the API server", lambda: '"sessions"' in
                        self.kubectl("get", "--raw", "/apis/stream.tern.dev/v1alpha1",
                                     check=False), timeout, interval=0.3)

    def start_operator(self, name="tern-operator", extra=(), api=True):
        api_flags = []
        addr = local_ip() if api else None
        if addr:
            pki = self.make_api_pki()
            self.api_port = free_port()
            api_flags = ["--api-addr", "%s:%d" % (addr, self.api_port),
                         "--api-cert-file", pki.path("serving.crt"),
                         "--api-key-file", pki.path("serving.key"),
                         "--api-ca-file", pki.path("ca.crt")]
        argv = [os.path.join(BIN, "tern-operator"), "--kubeconfig", self.kubeconfig,
                *self.journal_flags(), *api_flags,
                "--metrics-addr", "127.0.0.1:%d" % free_port(),
                "--health-addr", "127.0.0.1:%d" % free_port(), "--runner-image", "tern-runner:local",
                "--sandbox-image", "tern-sandbox:local", "--id", name, *extra]
        if addr:
            # registered first, so the operator's first pass fills in the caBundle
            self.register_api(name, addr, self.api_port)
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
            if name.startswith("tern-operator") or name.startswith("op-"):
                # its address leaves the Service with it (best effort: the
                # cluster may be stopping too)
                try:
                    self.kubectl("delete", "endpointslice", "-n", "tern-system",
                                 "tern-operator-" + name, "--ignore-not-found", "--wait=false",
                                 check=False, timeout=20)
                except (subprocess.TimeoutExpired, OSError):
                    pass

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

    CRDS = ("agentsessions.tern.dev", "agentsessiontemplates.tern.dev", "agenttriggers.tern.dev",
            "agentbudgets.tern.dev")

    def apply_crd(self):
        """Every CRD of crds/ (AgentSession, AgentSessionTemplate, AgentTrigger, AgentBudget)."""
        for n in self.CRDS:
            path = os.path.join(ROOT, "crds", n + ".yaml")
            if os.path.exists(path):
                self.kubectl("apply", "-f", path)
                # (polled: kubectl wait fails at once on a CRD whose status has
                # no conditions yet, "accessor error: <nil>", on a loaded
                # machine right after the create)
                wait_for("crd %s established" % n, lambda n=n: self.kubectl(
                    "get", "crd/" + n, "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
                    check=False).strip() == "True", 60, interval=0.2)

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
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def _unb64(s):
    import base64
    return base64.b64decode(s).decode()


class JournalEtcd:
    """The locked journal etcd as a test sees it: HTTPS with a client
    certificate, then an etcd user's token (login)."""

    def __init__(self, url, ca, cert=None, key=None):
        import ssl
        self.url = url
        self.ctx = ssl.create_default_context(cafile=ca)
        if cert:
            self.ctx.load_cert_chain(cert, key)
        self.token = None
        self.credentials = None  # (user, password): log in once auth is on

    def get(self, path):
        return urllib.request.urlopen(self.url + path, context=self.ctx, timeout=5).read()

    def call(self, path, body):
        """POST body (JSON) to path; the reply as JSON, or urllib's HTTPError."""
        h = {"Content-Type": "application/json"}
        if not self.token and self.credentials and path != "/v3/auth/authenticate":
            try:
                self.login(*self.credentials)
            except urllib.error.HTTPError as e:
                if b"not enabled" not in e.read():
                    raise
        if self.token:
            h["Authorization"] = self.token
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), headers=h)
        try:
            return json.loads(urllib.request.urlopen(req, context=self.ctx, timeout=10).read())
        except urllib.error.HTTPError as e:
            # a restarted etcd forgot its tokens, or users changed since the
            # token was issued (the operator parks and makes journal users):
            # log in again, once (the body is read only for a 401 or 400
            # with a token; callers read the others' bodies themselves)
            if not (self.token and self.credentials and e.code in (400, 401)):
                raise
            answer = e.read()
            if not (b"invalid auth token" in answer or b"revision of auth store is old" in answer):
                raise urllib.error.HTTPError(e.url, e.code, e.msg, e.hdrs, io.BytesIO(answer))
            self.token = None
            return self.call(path, body)

    def login(self, user, password):
        self.token = None
        self.token = self.call("/v3/auth/authenticate",
                               {"name": user, "password": password})["token"]
        return self

    def range(self, prefix, keys_only=False):
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        out = self.call("/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(end),
                                         "keys_only": keys_only})
        return [(_unb64(kv["key"]), _unb64(kv.get("value", "")) if not keys_only else None)
                for kv in out.get("kvs", [])]

    def put(self, key, value):
        return self.call("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})


def kubecluster_pki(d):
    """An openssl-made PKI in d (scripts/kubecluster.py's PKI)."""
    import kubecluster
    return kubecluster.PKI(d)


def journal_events(j, uid):
    """Every event of a session's journal, decoded, in seq order."""
    prefix = "/tern/v1/s/%s/ev/" % uid
    events = [json.loads(v) for _, v in j.range(prefix)]
    events.sort(key=lambda e: e["seq"])
    return events


PARKED_EVENTS = 4  # what seed_parked_journal writes


def seed_parked_journal(j, uid, now, objective="bench", prompt_tokens=0):
    """Writes a session's journal as after a turn that asked for an approval
    (user message, turn started, approval requested, turn finished) and its
    summary, in one txn: a session found parked, as after days of waiting
    (bench/operator, test_operator_scale). now: an RFC 3339 time."""
    pre = "/tern/v1/s/%s/" % uid
    ap = "ap-" + uid[:8]
    evs = [
        ("user_message", 0, {"source": "objective", "text": objective}),
        ("turn_started", 1, {"turn": 1}),
        ("approval_requested", 1, {"id": ap, "tool": "exec_command",
                                   "summary": "git push origin main", "callId": "call_0"}),
        ("turn_finished", 1, {"outcome": "approval_requested"}),
    ]
    puts = []
    for i, (ty, turn, data) in enumerate(evs, 1):
        ev = {"v": 1, "seq": i, "type": ty, "time": now, "turn": turn, "data": data}
        puts.append({"request_put": {"key": _b64(pre + "ev/%016x" % i),
                                     "value": _b64(json.dumps(ev))}})
    summ = {"v": 1, "lastSeq": PARKED_EVENTS, "turn": 1, "messages": 1,
            "usage": {"modelTurns": 1, "toolCalls": 0, "promptTokens": prompt_tokens},
            "pendingApproval": {"id": ap, "tool": "exec_command",
                                "summary": "git push origin main", "requestedAt": now},
            "outcome": "approval_requested", "updated": now}
    puts.append({"request_put": {"key": _b64(pre + "sum"), "value": _b64(json.dumps(summ))}})
    j.call("/v3/kv/txn", {"success": puts})
    return summ


def journal_keys(j, uid):
    return [k for k, _ in j.range("/tern/v1/s/%s/" % uid, keys_only=True)]


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
