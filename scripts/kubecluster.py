"""kubecluster - the real Kubernetes control plane on one machine, as a judge.

Starts, on free loopback ports in one directory: etcd 3.6, the official
kube-apiserver, kube-controller-manager and kube-scheduler (built by
`make kube` into build/kube/bin), and Tern's own node agent `tern-node` (the
same kubelet code as tern-dev's, registered as a Node of this API server and
running the pods the scheduler binds to it under bubblewrap). Writes an admin
kubeconfig (client certificate, O=system:masters) and, used as a command,
prints one ready line like tern-dev's:

    /usr/bin/python3 scripts/kubecluster.py up [--dir DIR]
    -> tern-kube ready kubeconfig=DIR/kubeconfig

As a library (scripts/ternlocal.py uses it for TERN_CLUSTER=kube):

    c = KubeCluster(workdir, logs, procs)   # procs: name -> Proc, stopped by the caller
    c.start()                               # returns the kubeconfig path

What is configured, and why:
- kube-apiserver: --authorization-mode=Node,RBAC, client-certificate
  authentication (one cluster CA), service-account issuer and keys, the
  default admission plugins plus NodeRestriction and
  OwnerReferencesPermissionEnforcement (ValidatingAdmissionPolicy is among
  the defaults), an audit log with a Metadata policy for every
  request (DIR/audit.log, read by tests), --advertise-address 127.0.0.1 (no
  default route here), OwnerReferencesPermissionEnforcement (off by
  default, on in hardened clusters and OpenShift: an owner reference that
  blocks the owner's deletion needs update on the owner's finalizers, the
  check tern-dev makes too), --endpoint-reconciler-type=none (no kube-proxy, no
  Service VIPs: pods reach the API server at 127.0.0.1), the kubelet client
  certificate for `kubectl logs`, and the front-proxy (aggregation) flags.
- kube-controller-manager: every default controller, its own kubeconfig,
  --use-service-account-credentials, the service-account key and root CA
  (published to every namespace as kube-root-ca.crt, which pods mount).
- kube-scheduler: its own kubeconfig.
- tern-node: its kubeconfig as system:node:tern-node (group system:nodes);
  a ClusterRole for what a node agent of this kind needs beyond the Node
  authorizer (NetworkPolicies, which it enforces as a network plugin would,
  and PersistentVolumes for the local-path provisioner it runs); a default
  StorageClass served by that provisioner.
Readiness is always polled with a deadline, never a fixed sleep.
"""
import base64
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ternlocal import Failed, free_port, wait_for  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("TERN_BUILD", os.path.join(ROOT, "build"))
TERN_BIN = os.path.join(BUILD, "bin")
KUBE_BIN = os.environ.get("TERN_KUBE_BIN", os.path.join(ROOT, "build", "kube", "bin"))
NODE_NAME = "tern-node"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def missing_binaries():
    """The judges `make kube` has not built (empty when all are there)."""
    need = [os.path.join(KUBE_BIN, c) for c in COMPONENTS]
    need.append(os.path.join(TERN_BIN, "tern-node"))
    return [p for p in need if not os.access(p, os.X_OK)]


# ---- PKI (openssl CLI) --------------------------------------------------------
class PKI:
    """A cluster CA, a front-proxy CA and the certificates the components
    need, in dir. Keys are EC P-256 (fast to make)."""

    def __init__(self, d):
        self.d = d
        os.makedirs(d, exist_ok=True)

    def path(self, name):
        return os.path.join(self.d, name)

    def _run(self, *args, input=None):
        r = subprocess.run(["openssl", *args], input=input, capture_output=True, text=True)
        if r.returncode != 0:
            raise Failed("openssl %s: %s" % (" ".join(args[:2]), r.stderr.strip()))

    def key(self, name):
        self._run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                  "-out", self.path(name + ".key"))
        os.chmod(self.path(name + ".key"), 0o600)

    def ca(self, name, cn, subj=None):
        self.key(name)
        self._run("req", "-x509", "-new", "-key", self.path(name + ".key"),
                  "-subj", subj or ("/CN=" + cn),
                  "-days", "3650", "-sha256", "-out", self.path(name + ".crt"),
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")

    def cert(self, name, ca, cn, orgs=(), client=True, server=False, sans=(), ous=(), days=3650):
        """A certificate signed by ca for cn (O= each of orgs, OU= each of
        ous); cn None: no CommonName (the journal's etcd refuses gateway
        clients whose certificate has one)."""
        self.key(name)
        subj = "".join("/O=" + o for o in orgs) + "".join("/OU=" + u for u in ous)
        subj += ("/CN=" + cn) if cn else ""
        csr = self.path(name + ".csr")
        self._run("req", "-new", "-key", self.path(name + ".key"), "-subj", subj, "-out", csr)
        usage = [u for u, on in (("clientAuth", client), ("serverAuth", server)) if on]
        ext = ["basicConstraints=critical,CA:FALSE",
               "keyUsage=critical,digitalSignature,keyEncipherment",
               "extendedKeyUsage=" + ",".join(usage)]
        if sans:
            ext.append("subjectAltName=" + ",".join(sans))
        extfile = self.path(name + ".ext")
        with open(extfile, "w") as f:
            f.write("\n".join(ext) + "\n")
        self._run("x509", "-req", "-in", csr, "-CA", self.path(ca + ".crt"), "-CAkey",
                  self.path(ca + ".key"), "-CAcreateserial", "-days", str(days), "-sha256",
                  "-extfile", extfile, "-out", self.path(name + ".crt"))
        os.unlink(csr)
        os.unlink(extfile)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()


def write_kubeconfig(path, server, ca_pem, cert_pem, key_pem, user):
    """A kubeconfig with everything inline (client certificate auth)."""
    b64 = lambda b: base64.b64encode(b).decode()
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "tern-kube",
        "clusters": [{"name": "tern-kube", "cluster": {
            "server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": "tern-kube", "context": {"cluster": "tern-kube", "user": user}}],
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    os.chmod(path, 0o600)
    return path


AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"""

# What tern-node needs beyond the Node authorizer's grants: it enforces
# NetworkPolicy for its pods (what a network plugin's node agent reads: the
# policies, and the pods and namespaces their selectors pick) and
# provisions local volumes for claims of the tern-local StorageClass (what a
# local-path provisioner does).
NODE_RBAC = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "tern-node"},
     "rules": [
         {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
          "verbs": ["get", "list", "watch"]},
         # egress rules with pod and namespace selectors name other nodes'
         # pods too (a network plugin's node agent reads them all)
         {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]},
         {"apiGroups": [""], "resources": ["persistentvolumes"],
          "verbs": ["get", "list", "watch", "create", "delete"]},
         {"apiGroups": [""], "resources": ["persistentvolumeclaims"],
          "verbs": ["get", "list", "watch"]},
         {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"],
          "verbs": ["get", "list", "watch"]},
     ]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "tern-node"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "tern-node"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                   "name": "system:node:" + NODE_NAME}]},
    {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
     "metadata": {"name": "tern-local",
                  "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
     "provisioner": "tern.dev/local-path", "reclaimPolicy": "Delete",
     "volumeBindingMode": "Immediate"},
]


class KubeCluster:
    def __init__(self, workdir, logs, procs, proc_class):
        self.dir = os.path.join(workdir, "kube")
        self.logs = logs
        self.procs = procs
        self.Proc = proc_class
        self.pki = PKI(os.path.join(self.dir, "pki"))
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.server = None
        self.etcd_url = None
        self.audit_log = os.path.join(self.dir, "audit.log")
        os.makedirs(self.dir, exist_ok=True)

    # ---- the pieces ---------------------------------------------------------
    def make_pki(self):
        p = self.pki
        p.ca("ca", "tern-kube-ca")
        p.ca("front-proxy-ca", "tern-kube-front-proxy-ca")
        p.cert("apiserver", "ca", "kube-apiserver", client=False, server=True,
               sans=("IP:127.0.0.1", "DNS:localhost", "DNS:kubernetes",
                     "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                     "DNS:kubernetes.default.svc.cluster.local", "IP:10.96.0.1"))
        p.cert("admin", "ca", "tern-admin", orgs=("system:masters",))
        p.cert("controller-manager", "ca", "system:kube-controller-manager")
        p.cert("scheduler", "ca", "system:kube-scheduler")
        p.cert("node", "ca", "system:node:" + NODE_NAME, orgs=("system:nodes",))
        p.cert("node-serving", "ca", NODE_NAME, client=False, server=True,
               sans=("IP:127.0.0.1", "DNS:" + NODE_NAME))
        p.cert("apiserver-kubelet-client", "ca", "kube-apiserver-kubelet-client",
               orgs=("system:masters",))
        p.cert("front-proxy-client", "front-proxy-ca", "front-proxy-client")
        # service-account token signing key pair
        subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt",
                        "rsa_keygen_bits:2048", "-out", p.path("sa.key")], check=True,
                       capture_output=True)
        subprocess.run(["openssl", "pkey", "-in", p.path("sa.key"), "-pubout", "-out",
                        p.path("sa.pub")], check=True, capture_output=True)

    def start_etcd(self):
        for _ in range(5):
            cport, pport = free_port(), free_port()
            url = "http://127.0.0.1:%d" % cport
            p = self.Proc("kube-etcd", [
                os.path.join(KUBE_BIN, "etcd"), "--data-dir", os.path.join(self.dir, "etcd"),
                "--name", "kube", "--listen-client-urls", url, "--advertise-client-urls", url,
                "--listen-peer-urls", "http://127.0.0.1:%d" % pport,
                "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pport,
                "--initial-cluster", "kube=http://127.0.0.1:%d" % pport,
                "--listen-metrics-urls", "http://127.0.0.1:%d" % free_port(),
                "--quota-backend-bytes", str(2 << 30)], self.logs)
            try:
                wait_for("kube etcd /health", lambda: p.alive() and b"true" in
                         urllib.request.urlopen(url + "/health", timeout=1).read(), 30)
            except Failed:
                p.stop()
                continue
            self.procs["kube-etcd"] = p
            self.etcd_url = url
            return url
        raise Failed("the control plane's etcd did not start")

    def _https_get(self, url, cert="admin"):
        ctx = ssl.create_default_context(cafile=self.pki.path("ca.crt"))
        ctx.load_cert_chain(self.pki.path(cert + ".crt"), self.pki.path(cert + ".key"))
        return urllib.request.urlopen(url, context=ctx, timeout=5).read()

    def start_apiserver(self):
        p = self.pki.path
        with open(os.path.join(self.dir, "audit-policy.yaml"), "w") as f:
            f.write(AUDIT_POLICY)
        for _ in range(3):
            port = free_port()
            server = "https://127.0.0.1:%d" % port
            proc = self.Proc("kube-apiserver", [
                os.path.join(KUBE_BIN, "kube-apiserver"),
                "--etcd-servers", self.etcd_url,
                "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
                "--secure-port", str(port),
                "--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
                "--client-ca-file", p("ca.crt"),
                "--authorization-mode", "Node,RBAC",
                "--enable-admission-plugins",
                "NodeRestriction,OwnerReferencesPermissionEnforcement",
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file", p("sa.pub"),
                "--service-account-signing-key-file", p("sa.key"),
                "--service-cluster-ip-range", "10.96.0.0/16",
                "--endpoint-reconciler-type", "none",
                "--audit-log-path", self.audit_log,
                "--audit-policy-file", os.path.join(self.dir, "audit-policy.yaml"),
                "--audit-log-format", "json", "--audit-log-maxsize", "0",
                "--kubelet-client-certificate", p("apiserver-kubelet-client.crt"),
                "--kubelet-client-key", p("apiserver-kubelet-client.key"),
                "--kubelet-certificate-authority", p("ca.crt"),
                "--kubelet-preferred-address-types", "InternalIP",
                "--requestheader-client-ca-file", p("front-proxy-ca.crt"),
                "--requestheader-allowed-names", "front-proxy-client",
                "--requestheader-username-headers", "X-Remote-User",
                "--requestheader-group-headers", "X-Remote-Group",
                "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
                "--proxy-client-cert-file", p("front-proxy-client.crt"),
                "--proxy-client-key-file", p("front-proxy-client.key"),
                "--enable-aggregator-routing=true",
                # /debug/pprof for bench/operator --perf (the binary is
                # stripped: perf sees addresses only)
                "--profiling=%s" % ("true" if os.environ.get("TERN_KUBE_PROFILING") == "1"
                                    else "false"),
            ], self.logs)
            try:
                wait_for("kube-apiserver /readyz", lambda: proc.alive() and
                         self._https_get(server + "/readyz") == b"ok", 90, interval=0.25)
            except Failed as e:
                tail = proc.tail()
                proc.stop()
                if "address already in use" in tail:
                    continue
                raise Failed("%s\n%s" % (e, tail[-2000:]))
            self.procs["kube-apiserver"] = proc
            self.server = server
            return server
        raise Failed("kube-apiserver did not start (ports taken?)")

    def component_kubeconfig(self, name, cert):
        return write_kubeconfig(os.path.join(self.dir, name + ".kubeconfig"), self.server,
                                self.pki.read("ca.crt"), self.pki.read(cert + ".crt"),
                                self.pki.read(cert + ".key"), name)

    def start_controller_manager(self):
        kc = self.component_kubeconfig("controller-manager", "controller-manager")
        p = self.pki.path
        self.procs["kube-controller-manager"] = self.Proc("kube-controller-manager", [
            os.path.join(KUBE_BIN, "kube-controller-manager"),
            "--kubeconfig", kc, "--authentication-kubeconfig", kc,
            "--authorization-kubeconfig", kc,
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--leader-elect=false", "--use-service-account-credentials=true",
            "--service-account-private-key-file", p("sa.key"),
            "--root-ca-file", p("ca.crt"),
            "--cluster-signing-cert-file", p("ca.crt"), "--cluster-signing-key-file", p("ca.key"),
            "--controllers", "*",
            # each controller's client at 200 requests/s instead of 20 (as
            # large clusters set it): binding 10,000 claims at 20/s took
            # kube's PV binder over 20 minutes, every new claim queued behind
            "--kube-api-qps", "200", "--kube-api-burst", "400",
        ], self.logs)

    def start_scheduler(self):
        kc = self.component_kubeconfig("scheduler", "scheduler")
        self.procs["kube-scheduler"] = self.Proc("kube-scheduler", [
            os.path.join(KUBE_BIN, "kube-scheduler"),
            "--kubeconfig", kc, "--authentication-kubeconfig", kc,
            "--authorization-kubeconfig", kc,
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
            "--leader-elect=false",
        ], self.logs)

    def kubectl(self, *args, input=None, check=True):
        env = dict(os.environ, KUBECONFIG=self.kubeconfig, HOME=self.dir)
        r = subprocess.run(["/usr/bin/kubectl", *args], input=input, capture_output=True,
                           text=True, env=env, timeout=120)
        if check and r.returncode != 0:
            raise Failed("kubectl %s: %s" % (" ".join(args), r.stderr.strip()))
        return r.stdout

    def start_node(self):
        kc = self.component_kubeconfig("node", "node")
        p = self.pki.path
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": NODE_RBAC}))
        env = dict(os.environ, PATH=TERN_BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
        proc = self.Proc("tern-node", [
            os.path.join(TERN_BIN, "tern-node"), "--kubeconfig", kc,
            "--dir", os.path.join(self.dir, "node"), "--node-name", NODE_NAME,
            "--listen", "127.0.0.1:0",
            "--tls-cert", p("node-serving.crt"), "--tls-key", p("node-serving.key"),
            "--client-ca", p("ca.crt"), "--bin-dir", TERN_BIN,
        ], self.logs, env=env, stdout_pipe=True)
        line = proc.read_line(60)
        if not line.startswith("tern-node ready "):
            proc.stop()
            raise Failed("tern-node said %r" % line)
        self.procs["tern-node"] = proc

        def node_ready():
            n = json.loads(self.kubectl("get", "node", NODE_NAME, "-o", "json"))
            taints = (n.get("spec") or {}).get("taints") or []
            ready = [c for c in n.get("status", {}).get("conditions", [])
                     if c.get("type") == "Ready" and c.get("status") == "True"]
            return ready and not taints
        wait_for("node %s Ready and untainted" % NODE_NAME, node_ready, 90, interval=0.5)

    def start(self, node=True):
        """Starts everything; node=False: the control plane without tern-node
        (no pod runs; the differential test's secondary)."""
        self.make_pki()
        self.start_etcd()
        self.start_apiserver()
        write_kubeconfig(self.kubeconfig, self.server, self.pki.read("ca.crt"),
                         self.pki.read("admin.crt"), self.pki.read("admin.key"), "tern-admin")
        self.start_controller_manager()
        self.start_scheduler()
        # tern-node starts while the controller-manager does (its Ready
        # wait covers the controller-manager's start: the node lifecycle
        # controller lifts the not-ready taint)
        if node:
            self.start_node()
        # the default ServiceAccount appears once the controller-manager runs
        wait_for("ServiceAccount default/default", lambda: self.kubectl(
            "get", "serviceaccount", "default", "-n", "default", check=False).strip(), 90,
            interval=0.25)
        return self.kubeconfig

    def user_kubeconfig(self, user, groups=()):
        """A kubeconfig for a user of this cluster (a client certificate the
        cluster CA signs: CN=user, O=each group), as a person would be given;
        RBAC decides what the user may do. Returns its path."""
        name = "user-" + "".join(c if c.isalnum() else "-" for c in user)
        self.pki.cert(name, "ca", user, orgs=groups)
        return write_kubeconfig(os.path.join(self.dir, name + ".kubeconfig"), self.server,
                                self.pki.read("ca.crt"), self.pki.read(name + ".crt"),
                                self.pki.read(name + ".key"), user)

    def stop_order(self):
        return ["tern-node", "kube-scheduler", "kube-controller-manager", "kube-apiserver",
                "kube-etcd"]


def main(argv):
    import argparse
    import signal
    from ternlocal import Proc
    ap = argparse.ArgumentParser(prog="kubecluster.py")
    ap.add_argument("cmd", choices=["up"])
    ap.add_argument("--dir", default=None, help="work directory (default: a new temp dir)")
    a = ap.parse_args(argv)
    gone = missing_binaries()
    if gone:
        print("kubecluster: missing %s (run `make kube` and `make`)" % ", ".join(gone),
              file=sys.stderr)
        return 3
    d = os.path.abspath(a.dir or tempfile.mkdtemp(prefix="tern-kube-"))
    logs = os.path.join(d, "logs")
    os.makedirs(logs, exist_ok=True)
    procs = {}
    c = KubeCluster(d, logs, procs, Proc)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    try:
        kc = c.start()
        print("tern-kube ready kubeconfig=%s" % kc, flush=True)
        while not stop:
            time.sleep(0.5)
            dead = [n for n, p in procs.items() if not p.alive()]
            if dead:
                print("kubecluster: %s exited; logs in %s" % (", ".join(dead), logs),
                      file=sys.stderr)
                return 1
    finally:
        for n in c.stop_order():
            if n in procs:
                procs.pop(n).stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
