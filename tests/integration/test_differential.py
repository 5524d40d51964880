"""tern-dev held to the real kube-apiserver: the same requests sent to both,
the answers compared (tests/integration/diffproxy.py says what is compared
and how server-made values are translated).

The requests come from:
  - the project's kubectl suite (test_apiserver_kubectl.py) run with every
    installed kubectl (/usr/bin/kubectl and
    /usr/lib/google-cloud-sdk/bin/kubectl.1.NN), tern-dev primary;
  - the official Python client's suite (test_apiserver_client.py,
    python3-kubernetes), tern-dev primary;
  - tern-operator's own traffic in an end-to-end run (the demo session, its
    approval with kubectl tern, its deletion), tern-dev primary: tern-dev's
    kubelet runs the pods, the real control plane has no node (its copies of
    the pods stay Pending, nothing runs twice);
  - tern-node's own traffic as the node of the real control plane, which is
    primary here: tern-node registers its Node and Lease, runs a pod created
    (with spec.nodeName) on both, writes its status, and deletes it.
Each source runs on a fresh pair of servers. Each difference found is either
listed in docs/tern-dev.md, "Differences from kube-apiserver" (a table of
keys with * wildcards, each with the reason it is acceptable), or fails this
suite; the Node tern-dev's kubelet registers is compared with tern-node's
on the real control plane the same way.

The suites are run for their traffic: their own checks that need the
tern-dev process (a restart under a watch) fail behind the proxy and are
not counted; their summaries are printed.

Needs `make kube`. Run: TERN_CLUSTER=kube /usr/bin/python3 tests/integration/test_differential.py
  TERN_DIFF_ONLY=kubectl-1.33,python-client,operator,node  runs some sources only
  TERN_DIFF_KUBECTLS=all  every installed kubectl (make differential); by
                          default the oldest and /usr/bin/kubectl
"""
# runs on: kube
import glob
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
import kubecluster  # noqa: E402
from ternlocal import phase, condition, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402
from kubeapi import Api  # noqa: E402
import diffproxy  # noqa: E402

ROOT = ternlocal.ROOT
DOC = os.path.join(ROOT, "docs", "tern-dev.md")
ADMIN = "tern-dev:admin"  # tern-dev's admin; the real server's client certificate says the same


def kubectls():
    """The oldest installed kubectl and /usr/bin/kubectl (the one matching
    the server); every installed version with TERN_DIFF_KUBECTLS=all (make
    differential): each version is a fresh pair of servers, a minute or
    more, and the versions between differ little."""
    out = []
    for p in sorted(glob.glob("/usr/lib/google-cloud-sdk/bin/kubectl.1.*"),
                    key=lambda p: int(p.rsplit(".", 1)[1])):
        out.append(("kubectl-" + p.split("kubectl.")[1], p))
    if os.environ.get("TERN_DIFF_KUBECTLS") != "all":
        out = out[:1]
    out.append(("kubectl-default", "/usr/bin/kubectl"))
    return out


def glob_match(key, pattern):
    """fnmatch-like, with * the only wildcard (keys hold [*] literally)."""
    rx = ".*".join(re.escape(piece) for piece in pattern.split("*"))
    return re.fullmatch(rx, key, re.S) is not None


def listed_patterns():
    """The keys of docs/tern-dev.md's "Differences from kube-apiserver" table."""
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"^## Differences from kube-apiserver\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        raise AssertionError("docs/tern-dev.md has no 'Differences from kube-apiserver' section")
    pats = []
    for line in m.group(1).splitlines():
        mm = re.match(r"^\|\s*`([^`]+)`\s*\|", line)
        if mm:
            pats.append(mm.group(1))
    return pats


class Pair:
    """A fresh tern-dev and a fresh real control plane, and the proxy."""

    def __init__(self, t, name, terndev_primary=True, kube_node=True, terndev_env=None):
        self.t = t
        self.name = name
        t.start_etcd()
        env = dict(os.environ, **(terndev_env or {}))
        old = os.environ.copy()
        os.environ.update(env)
        try:
            t.start_terndev()
        finally:
            os.environ.clear()
            os.environ.update(old)
        self.terndev_kubeconfig = t.kubeconfig
        self.kube = kubecluster.KubeCluster(t.dir, t.logs, t.procs, ternlocal.Proc)
        self.kube.start(node=kube_node)
        t.kube = self.kube
        self.kube_kubeconfig = self.kube.user_kubeconfig(ADMIN, ("system:masters",))
        td = diffproxy.Backend("tern-dev", Api(self.terndev_kubeconfig))
        kb = diffproxy.Backend("kube-apiserver", Api(self.kube_kubeconfig))
        log = open(os.path.join(os.environ.get("TERN_DIFF_LOG_DIR", t.dir),
                                "diffs-%s.jsonl" % name), "w")
        self.proxy = diffproxy.DiffProxy(td, kb, log) if terndev_primary else \
            diffproxy.DiffProxy(kb, td, log)
        self.proxy.source = name
        self.kubeconfig = self.proxy.kubeconfig(os.path.join(t.dir, "proxy.kubeconfig"))
        t.kubeconfig = self.kubeconfig

    def close(self):
        self.proxy.stop()


def run_suite(pair, script, kubectl=None):
    env = dict(os.environ, TERN_DIFF_KUBECONFIG=pair.kubeconfig)
    if kubectl:
        env["TERN_KUBECTL"] = kubectl
    r = subprocess.run(["/usr/bin/python3", os.path.join(HERE, script)], capture_output=True,
                       text=True, env=env, timeout=900)
    lines = r.stdout.splitlines()
    summary = next((x for x in reversed(lines) if re.match(r"^\d+ passed, \d+ failed", x)), None)
    failed = [x[5:] for x in lines if x.startswith("FAIL ")]
    return summary, failed, r.stdout + r.stderr


class Run:
    def __init__(self):
        self.diffs = []
        self.compared = {}
        self.notes = []


def source_suite(run, name, script, kubectl=None):
    with ternlocal.Local() as t:
        pair = Pair(t, name)
        try:
            summary, failed, out = run_suite(pair, script, kubectl)
        finally:
            time.sleep(0.5)
            pair.close()
        run.diffs += pair.proxy.diffs
        run.compared[name] = pair.proxy.compared
        if os.environ.get("TERN_DIFF_LOG_DIR"):
            with open(os.path.join(os.environ["TERN_DIFF_LOG_DIR"], "suite-%s.log" % name),
                      "w") as f:
                f.write(out)
        print("    %s: %d requests compared; the suite behind the proxy: %s%s" % (
            name, pair.proxy.compared, summary, ("; its failed checks: " + ", ".join(
                f.split(" (")[0] for f in failed)) if failed else ""), flush=True)
        if summary is None:
            raise AssertionError("%s printed no summary:\n%s" % (script, out[-3000:]))
        eq(pair.proxy.compared >= 50, True, "requests through the proxy (%d)" %
           pair.proxy.compared)


def demo_manifest(base, remote, name="demo"):
    with open(os.path.join(ROOT, "examples", "demo.yaml")) as f:
        m = f.read()
    return m.replace("http://127.0.0.1:0/v1", base).replace("name: demo\n", "name: %s\n" % name) \
        .replace("http://127.0.0.1:0/demo.git", remote)


def finish(run, pair, name):
    time.sleep(0.5)
    pair.close()
    run.diffs += pair.proxy.diffs
    run.compared[name] = pair.proxy.compared
    print("    %s: %d requests compared" % (name, pair.proxy.compared), flush=True)


def source_operator(run):
    """tern-operator's traffic: the demo session end to end, tern-dev primary
    (its kubelet runs the pods; the real control plane has no node)."""
    with ternlocal.Local() as t:
        pair = Pair(t, "operator", kube_node=False)
        try:
            base = t.start_fakellm(os.path.join(ROOT, "examples", "demo-script.json"))
            t.apply_crd()
            t.kubectl("create", "namespace", "team")
            t.apply_runner_rbac("team")
            t.create_secret("demo-model", "api-key", "not-a-real-key", ns="team")
            # the demo publishes through a token-guarded remote
            t.create_secret("demo-git", "token", "not-a-real-git-token", ns="team")
            remote = t.start_gitremote("not-a-real-git-token", repo="demo.git")
            t.start_operator()
            t.kubectl("apply", "-n", "team", "-f", "-", input=demo_manifest(base, remote))
            s = t.wait_session("demo", "WaitingForApproval", lambda s: phase(s) in (
                "WaitingForApproval", "Failed"), 120, ns="team")
            eq(phase(s), "WaitingForApproval", "phase (%s)" % json.dumps(s.get("status"))[:500])
            t.tern("approve", "demo", "-n", "team")
            s = t.wait_session("demo", "Completed", lambda s: condition(s, "Completed") == "True"
                               or phase(s) == "Failed", 120, ns="team")
            eq(phase(s), "Succeeded", "phase (%s)" % json.dumps(s.get("status"))[:500])
            t.kubectl("delete", "agentsession", "demo", "-n", "team", "--timeout=90s")
            t.stop("tern-operator")
        finally:
            finish(run, pair, "operator")
        eq(pair.proxy.compared >= 50, True, "requests through the proxy")


NODE_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "on-node", "namespace": "diffnode", "labels": {"app": "diff"}},
    "spec": {"nodeName": "tern-node", "terminationGracePeriodSeconds": 5,
             "containers": [{"name": "main", "image": "busybox:1.36",
                             "command": ["sh", "-c", "cat /cfg/k; sleep 3600"],
                             "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}],
                             "readinessProbe": {"exec": {"command": ["true"]},
                                                "periodSeconds": 1}}],
             "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]}}


def node_shape(a, b):
    """The Node tern-dev's kubelet registers (a) against tern-node's on the
    real control plane (b): the fields each has, and the values that name
    the platform."""
    out = []
    fa = {p: v for p, v in diffproxy.flatten(diffproxy.without_server_made(a)).items()
          if not p.startswith(diffproxy.IGNORED)}
    fb = {p: v for p, v in diffproxy.flatten(diffproxy.without_server_made(b)).items()
          if not p.startswith(diffproxy.IGNORED)}
    ga = {diffproxy.general(p) for p in fa}
    gb = {diffproxy.general(p) for p in fb}
    for p in sorted(ga - gb):
        out.append(("field %s only in tern-dev" % p, ""))
    for p in sorted(gb - ga):
        out.append(("field %s only in kube-apiserver" % p, ""))
    for p in ("status.nodeInfo.architecture", "status.nodeInfo.operatingSystem",
              "metadata.labels.kubernetes.io/arch", "metadata.labels.kubernetes.io/os"):
        if fa.get(p) != fb.get(p):
            out.append(("field %s differs" % p, "%r vs %r" % (fa.get(p), fb.get(p))))
    return out


def source_node(run):
    """tern-node's traffic as the node of the real control plane (primary):
    Node, Lease, a pod made on both with spec.nodeName, its volumes, token,
    status and deletion; then the Node tern-dev's kubelet registers against
    tern-node's."""
    with ternlocal.Local() as t:
        pair = Pair(t, "node", terndev_primary=False, kube_node=False)
        try:
            p = pair.kube.pki.path
            env = dict(os.environ, PATH=ternlocal.BIN + ":" + os.environ.get("PATH", ""))
            node = ternlocal.Proc("tern-node", [
                os.path.join(ternlocal.BIN, "tern-node"), "--kubeconfig", pair.kubeconfig,
                "--dir", os.path.join(t.dir, "node"), "--node-name", "tern-node",
                "--listen", "127.0.0.1:0", "--tls-cert", p("node-serving.crt"),
                "--tls-key", p("node-serving.key"), "--client-ca", p("ca.crt"),
                "--bin-dir", ternlocal.BIN], t.logs, env=env, stdout_pipe=True)
            t.procs["tern-node"] = node
            line = node.read_line(60)
            contains(line, "tern-node ready", "tern-node")
            t.kubectl("create", "namespace", "diffnode")
            t.kubectl("create", "configmap", "cfg", "-n", "diffnode", "--from-literal=k=v")
            t.kubectl("apply", "-f", "-", input=json.dumps(NODE_POD))

            def ready(kc):
                api = Api(kc)
                code, obj, _ = api.request("GET", "/api/v1/namespaces/diffnode/pods/on-node")
                return code == 200 and any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (obj.get("status") or {}).get("conditions") or [])
            wait_for("the pod Ready on the real control plane", lambda: ready(
                pair.kube_kubeconfig), 90, interval=0.3)
            wait_for("its status mirrored to tern-dev", lambda: ready(pair.terndev_kubeconfig),
                     30, interval=0.3)
            logs = t.kube.kubectl("logs", "-n", "diffnode", "on-node")
            eq(logs.strip(), "v", "the pod's log through the real API server")
            t.kubectl("delete", "pod", "on-node", "-n", "diffnode", "--timeout=60s")
            t.kubectl("delete", "namespace", "diffnode", "--wait=false")
            # the Node each kubelet registers, side by side
            a = Api(pair.terndev_kubeconfig).request("GET", "/api/v1/nodes")[1]["items"]
            names = [n["metadata"]["name"] for n in a if n["metadata"]["name"] != "tern-node"]
            eq(len(names), 1, "tern-dev's own Node")
            own = [Api(pair.terndev_kubeconfig).request("GET", "/api/v1/nodes/" + names[0])[1]]
            b = Api(pair.kube_kubeconfig).request("GET", "/api/v1/nodes/tern-node")[1]
            for what, d in node_shape(own[0], b):
                pair.proxy.diffs.append({"key": "node %s vs tern-node: %s" % (
                    own[0]["metadata"]["name"], what), "detail": d, "source": "node",
                    "request": "GET /api/v1/nodes/NAME"})
            t.stop("tern-node")
        finally:
            finish(run, pair, "node")
        eq(pair.proxy.compared >= 30, True, "requests through the proxy")


def main():
    only = [x for x in os.environ.get("TERN_DIFF_ONLY", "").split(",") if x]
    suite = Suite()
    if kubecluster.missing_binaries():
        print("SKIP the real control plane is not built: %s" %
              ", ".join(kubecluster.missing_binaries()))
        suite.finish()
    run = Run()
    sources = [(n, (lambda n=n, k=k: source_suite(run, n, "test_apiserver_kubectl.py", k)))
               for n, k in kubectls()]
    sources.append(("python-client", lambda: source_suite(run, "python-client",
                                                          "test_apiserver_client.py")))
    sources.append(("operator", lambda: source_operator(run)))
    sources.append(("node", lambda: source_node(run)))
    for name, fn in sources:
        if only and name not in only:
            continue
        suite.run("source " + name, fn)

    def verdict():
        pats = listed_patterns()
        by_key = {}
        for d in run.diffs:
            by_key.setdefault(d["key"], []).append(d)
        unlisted = {k: v for k, v in by_key.items()
                    if not any(glob_match(k, p) for p in pats)}
        used = {p for p in pats if any(glob_match(k, p) for k in by_key)}
        print("    %d differences (%d distinct keys) in %d requests; %d listed patterns, %d "
              "matched" % (len(run.diffs), len(by_key), sum(run.compared.values()), len(pats),
                           len(used)), flush=True)
        for k in sorted(by_key):
            if k in unlisted:
                continue
            print("    listed   %-90s x%d" % (k, len(by_key[k])))
        for p in pats:
            if p not in used:
                print("    not seen in this run: %s" % p)
        if unlisted:
            lines = []
            for k in sorted(unlisted):
                d = unlisted[k][0]
                lines.append("%s  (x%d; e.g. [%s] %s: %s)" % (k, len(unlisted[k]), d["source"],
                                                            d["request"], d["detail"][:300]))
            raise AssertionError("%d differences not listed in docs/tern-dev.md:\n  %s" % (
                len(unlisted), "\n  ".join(lines)))
    suite.run("every_difference_fixed_or_listed", verdict)
    suite.finish()


if __name__ == "__main__":
    main()
