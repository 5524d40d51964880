"""charts/tern installed with the real Helm (build/kube/bin/helm, `make kube`)
on the real control plane, as a cluster user would, with the values for
tern-node's world (deploy/helm/tern-node-values.yaml: the journal's etcd on a
loopback address, /metrics and probes on the pod's IP; pods run their
`command` from tern-node's --bin-dir):

  - values.schema.json: a value of the wrong type fails `helm install` with
    Helm's own message, and no release is made (the CRD is: Helm installs
    crds/ before it renders and validates values);
  - `helm install --wait`: the CRD (from crds/), the operator Deployment
    Ready, RBAC, the approval ValidatingAdmissionPolicy and its binding;
  - the demo session through the Helm-installed operator, approved with
    `kubectl tern approve` by a user of the approver group (a client
    certificate of the cluster CA, as a person would have), to Succeeded;
  - `helm upgrade` with a changed value (logLevel debug): the Deployment
    rolls to a new operator pod with the new value, and a session that was
    waiting for approval before the upgrade completes after it;
  - `helm uninstall`: what Helm removes (everything it rendered from
    templates/) and what stays by Helm's rules: the CRD (crds/ files are
    installed once and never upgraded or deleted), so the AgentSessions and
    their children (owned by the sessions) stay, the journal in its etcd
    (outside the release), the namespace (--create-namespace makes it, no
    release owns it); a session deleted while no operator runs waits on its
    finalizer, and a second `helm install` (the CRD already there: Helm
    skips it) finishes the deletion and the journal's cleanup.

The real control plane only: tern-dev does not serve admissionregistration
(the chart's policy) and Helm is judged here against kube-apiserver.

Run: TERN_CLUSTER=kube /usr/bin/python3 tests/integration/test_helm.py
"""
# runs on: kube
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, condition, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT
CHART = os.path.join(ROOT, "charts", "tern")
VALUES = os.path.join(ROOT, "deploy", "helm", "tern-node-values.yaml")
HELM = os.path.join(ROOT, "build", "kube", "bin", "helm")
SYS_NS = "tern-system"
NS = "sessions"
APPROVER = "alice"
APPROVER_GROUP = "tern-approvers"


def demo_manifest(t, name):
    with open(os.path.join(ROOT, "examples", "demo.yaml")) as f:
        m = f.read()
    return (m.replace("http://127.0.0.1:0/v1", t.base).replace("name: demo\n", "name: %s\n" % name)
            .replace("http://127.0.0.1:0/demo.git", t.remote))


class Run:
    def __init__(self, t):
        self.t = t
        self.alice = None  # alice's kubeconfig

    def helm(self, *args, check=True):
        env = dict(os.environ, HOME=self.t.home, KUBECONFIG=self.t.kubeconfig,
                   HELM_CACHE_HOME=os.path.join(self.t.home, "helm-cache"),
                   HELM_CONFIG_HOME=os.path.join(self.t.home, "helm-config"),
                   HELM_DATA_HOME=os.path.join(self.t.home, "helm-data"))
        r = subprocess.run([HELM, *args], capture_output=True, text=True, env=env, timeout=300)
        # charts/tern/crds/ is a symlink to crds/ (one source); Helm says so on
        # every load and includes the file's contents
        err = "\n".join(x for x in r.stderr.splitlines() if "found symbolic link" not in x)
        if check and r.returncode != 0:
            raise AssertionError("helm %s: exit %d: %s" % (" ".join(args), r.returncode, err))
        return r.returncode, r.stdout, err

    def journal_secrets(self):
        """The locked journal's Secrets the chart mounts, made from the PKI
        the journal etcd outside the cluster serves with (pki.create=false,
        as the chart's values say for an etcd of your own): the operator's
        certificate and passwords, the runners' certificate, and the
        aggregated API's serving certificate."""
        t = self.t
        if not t.kubectl("get", "namespace", SYS_NS, "--ignore-not-found", "-o",
                         "name").strip():
            t.kubectl("create", "namespace", SYS_NS)
        jp, ap = t.journal_pki.path, t.make_api_pki().path

        def read(path):
            with open(path) as f:
                return f.read()
        secrets = {
            "tern-journal-operator": {"ca.crt": jp("ca.crt"), "tls.crt": jp("operator.crt"),
                                      "tls.key": jp("operator.key"),
                                      "root-password": jp("root-password"),
                                      "operator-password": jp("operator-password")},
            "tern-journal-runner": {"ca.crt": jp("ca.crt"), "tls.crt": jp("runner.crt"),
                                    "tls.key": jp("runner.key")},
            "tern-api-serving": {"ca.crt": ap("ca.crt"), "tls.crt": ap("serving.crt"),
                                 "tls.key": ap("serving.key")},
        }
        items = [{"apiVersion": "v1", "kind": "Secret",
                  "metadata": {"name": n, "namespace": SYS_NS},
                  "stringData": {k: read(v) for k, v in files.items()}}
                 for n, files in secrets.items()]
        t.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                       "items": items}))

    def install(self, *extra):
        self.journal_secrets()
        try:
            return self.helm("install", "tern", CHART, "-n", SYS_NS, "--create-namespace",
                             "-f", VALUES, "--set", "etcd.external.endpoints=" + self.t.etcd_url,
                             "--set", "pki.create=false",
                             "--wait", "--timeout", "180s", *extra)
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.what_the_cluster_shows())) from None

    def what_the_cluster_shows(self):
        """What a user would look at when helm --wait times out."""
        out = []
        for args in (("get", "pods,jobs,deployments", "-A", "-o", "wide"),
                     ("get", "events", "-A", "--sort-by=.lastTimestamp"),
                     ("describe", "pods", "-n", SYS_NS),
                     ("logs", "-n", SYS_NS, "-l", "app.kubernetes.io/component=operator",
                      "--tail=40")):
            r = subprocess.run([ternlocal.KUBECTL, "--kubeconfig", self.t.kubeconfig, *args],
                               capture_output=True, text=True, timeout=60)
            out.append("$ kubectl %s\n%s%s" % (" ".join(args), r.stdout[-6000:], r.stderr[-2000:]))
        return "\n".join(out)

    def operator_pods(self):
        pods = self.t.get_json("pods", "-n", SYS_NS, "-l",
                               "app.kubernetes.io/component=operator")["items"]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def tern_as_alice(self, *args):
        env = dict(os.environ, HOME=self.t.home, KUBECONFIG=self.alice,
                   PATH=ternlocal.BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
        r = subprocess.run([ternlocal.KUBECTL, "tern", *args], capture_output=True, text=True,
                           env=env, timeout=60)
        if r.returncode != 0:
            raise AssertionError("kubectl tern %s (as %s): exit %d: %s" %
                                 (" ".join(args), APPROVER, r.returncode, r.stderr.strip()))
        return r.stdout

    def waiting(self, name, timeout=90):
        return self.t.wait_session(name, "WaitingForApproval", lambda s: phase(s) in (
            "WaitingForApproval", "Failed"), timeout, ns=NS)

    def completed(self, name, timeout=90):
        return self.t.wait_session(name, "Completed", lambda s: condition(s, "Completed") == "True"
                                   or phase(s) == "Failed", timeout, ns=NS)


def pod_ready(p):
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in p.get("status", {}).get("conditions", []))


def env_of(pod, name):
    for e in pod["spec"]["containers"][0].get("env", []):
        if e["name"] == name:
            return e.get("value")
    return None


def step_lint_and_template(r):
    rc, out, err = r.helm("lint", CHART, "-f", VALUES, "--strict")
    contains(out, "1 chart(s) linted, 0 chart(s) failed", "helm lint")
    rc, out, err = r.helm("template", "tern", CHART, "-n", SYS_NS, "-f", VALUES,
                          "--set", "etcd.external.endpoints=" + r.t.etcd_url)
    contains(out, "--etcd-endpoints=" + r.t.etcd_url, "external etcd endpoints in the args")
    contains(out, "--metrics-addr=$(POD_IP):8080", "metrics on the pod IP")
    eq("kind: StatefulSet" in out, False, "no etcd StatefulSet with etcd.deploy=false")


def step_schema_refuses(r):
    rc, out, err = r.helm("install", "tern", CHART, "-n", SYS_NS, "--create-namespace",
                          "-f", VALUES, "--set", "operator.replicas=two", check=False)
    eq(rc != 0, True, "helm install with operator.replicas=two fails")
    contains(err, "values don't meet the specifications of the schema(s)", "Helm's message")
    contains(err, "at '/operator/replicas': got string, want integer", "the field and the types")
    rc, out, err = r.helm("install", "tern", CHART, "-n", SYS_NS, "-f", VALUES,
                          "--set", "approvals.policy=yes", check=False)
    contains(err, "at '/approvals/policy': got string, want boolean", "a boolean as a string")
    rc, out, err = r.helm("list", "-A", "-o", "json")
    eq(json.loads(out), [], "no release after the refused installs")
    # Helm installs crds/ before it renders and validates the values (its
    # install action), so the CRD is there even though the release is not
    eq(r.t.kubectl("get", "crd", "agentsessions.tern.dev", "--ignore-not-found", "-o", "name")
       .strip(), "customresourcedefinition.apiextensions.k8s.io/agentsessions.tern.dev",
       "the CRD, installed before the values were checked")
    eq(r.t.kubectl("get", "deployment", "-n", SYS_NS, "--ignore-not-found", "-o", "name")
       .strip(), "", "no Deployment after the refused installs")


def step_install(r):
    t = r.t
    rc, out, err = r.install()
    contains(out, "STATUS: deployed", "helm install")
    contains(out, "its journal etcd is\n" + t.etcd_url, "NOTES name the journal")
    crd = t.get_json("crd", "agentsessions.tern.dev")
    eq(crd["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by"), None,
       "the CRD comes from crds/ (not a templated, release-owned object)")
    for kind, name in [("deployment", "tern-operator"), ("serviceaccount", "tern-operator"),
                       ("role", "tern-operator-leader-election")]:
        o = t.get_json(kind, name, "-n", SYS_NS)
        eq(o["metadata"]["annotations"].get("meta.helm.sh/release-name"), "tern", kind)
    for kind in ("clusterrole", "clusterrolebinding", "validatingadmissionpolicy",
                 "validatingadmissionpolicybinding"):
        name = "tern-approvals" if "admission" in kind else "tern-operator"
        o = t.get_json(kind, name)
        eq(o["metadata"]["labels"].get("app.kubernetes.io/managed-by"), "Helm", kind)
    pods = r.operator_pods()
    eq(len(pods), 1, "one operator pod (tern-node-values: replicas 1)")
    eq(pod_ready(pods[0]), True, "operator pod Ready (helm --wait)")
    c = pods[0]["spec"]["containers"][0]
    eq(c["command"], ["tern-operator"], "the container's command (tern-node runs it)")
    contains(c["args"], "--etcd-endpoints=" + t.etcd_url, "args")
    r.first_pod = pods[0]["metadata"]["name"]
    # the operator's own endpoints on its pod IP
    import urllib.request
    ip = pods[0]["status"]["podIP"]
    body = urllib.request.urlopen("http://%s:8081/readyz" % ip, timeout=5).read().decode()
    eq(body.strip(), "ok", "/readyz on the pod IP")


def step_demo(r):
    t = r.t
    t.kubectl("create", "namespace", NS)
    t.apply_runner_rbac(NS)
    t.create_secret("demo-model", "api-key", "not-a-real-key", ns=NS)
    # the demo publishes its fix branch to a git remote that requires a token
    # (examples/demo.yaml: Secret demo-git)
    t.create_secret("demo-git", "token", t.remote_token, ns=NS)
    # the approver: a user of the approver group, allowed to read and
    # annotate sessions in the namespace (RBAC is the cluster admin's part;
    # the chart's policy then checks who may decide)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "session-approver", "namespace": NS},
            "rules": [{"apiGroups": ["tern.dev"], "resources": ["agentsessions"],
                       "verbs": ["get", "list", "watch", "patch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "session-approver", "namespace": NS},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "session-approver"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                             "name": APPROVER_GROUP}]}
    t.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                    "items": [role, binding]}))
    r.alice = t.kube.user_kubeconfig(APPROVER, (APPROVER_GROUP,))
    t.kubectl("apply", "-n", NS, "-f", "-", input=demo_manifest(t, "demo"))
    s = r.waiting("demo")
    eq(phase(s), "WaitingForApproval", "phase (%s)" % json.dumps(s.get("status"))[:800])
    # the cluster admin is not an approver: the chart's policy refuses it
    rc = subprocess.run([ternlocal.KUBECTL, "tern", "approve", "demo", "-n", NS],
                        capture_output=True, text=True, timeout=60,
                        env=dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig,
                                 PATH=ternlocal.BIN + ":" + os.environ["PATH"]))
    eq(rc.returncode != 0, True, "kubectl tern approve as the admin (not an approver): " +
       rc.stdout)
    contains(rc.stderr, "only members of group %s may approve" % APPROVER_GROUP, "refusal")
    out = r.tern_as_alice("approve", "demo", "-n", NS)
    contains(out, "approved " + s["status"]["pendingApproval"]["id"], "kubectl tern approve")
    s = r.completed("demo")
    eq(phase(s), "Succeeded", "phase (%s)" % json.dumps(s.get("status"))[:800])
    contains(s["status"]["result"]["summary"], "published", "result")
    approved = [e for e in ternlocal.journal_events(t.journal, s["metadata"]["uid"])
                if e["type"] == "approval_decided"]
    eq(len(approved), 1, "one approval_decided event")
    eq(json.dumps(approved[0]).count('"%s"' % APPROVER) >= 1, True,
       "the journal names the approver: %s" % json.dumps(approved[0])[:400])


def step_upgrade(r):
    t = r.t
    t.kubectl("apply", "-n", NS, "-f", "-", input=demo_manifest(t, "across"))
    s = r.waiting("across")
    eq(phase(s), "WaitingForApproval", "phase before the upgrade")
    rc, out, err = r.helm("upgrade", "tern", CHART, "-n", SYS_NS, "-f", VALUES,
                          "--set", "etcd.external.endpoints=" + t.etcd_url, "--set", "pki.create=false",
                          "--set", "operator.logLevel=debug", "--wait", "--timeout", "180s")
    contains(out, "has been upgraded", "helm upgrade")
    contains(out, "REVISION: 2", "revision")
    t.kubectl("rollout", "status", "-n", SYS_NS, "deployment/tern-operator", "--timeout=120s")
    pods = wait_for("one operator pod, the new one", lambda: (lambda ps: ps if len(ps) == 1 and
                    ps[0]["metadata"]["name"] != r.first_pod and pod_ready(ps[0]) else None)(
                        r.operator_pods()), 120, interval=0.3)
    eq(env_of(pods[0], "TERN_LOG_LEVEL"), "debug", "the new pod has the new value")
    wait_for("the old operator pod gone", lambda: t.kubectl(
        "get", "pod", "-n", SYS_NS, r.first_pod, "--ignore-not-found", "-o", "name")
        .strip() == "", 60, interval=0.3)
    rc, out, err = r.helm("history", "tern", "-n", SYS_NS, "-o", "json")
    eq([(h["revision"], h["status"]) for h in json.loads(out)],
       [(1, "superseded"), (2, "deployed")], "helm history")
    s = t.session("across", NS)
    eq(phase(s), "WaitingForApproval", "still waiting after the upgrade")
    out = r.tern_as_alice("approve", "across", "-n", NS)
    contains(out, "approved " + s["status"]["pendingApproval"]["id"], "approve after upgrade")
    s = r.completed("across")
    eq(phase(s), "Succeeded", "the session completes under the new operator (%s)" %
       json.dumps(s.get("status"))[:800])
    r.uid = s["metadata"]["uid"]


def step_uninstall(r):
    t = r.t
    rc, out, err = r.helm("uninstall", "tern", "-n", SYS_NS, "--wait", "--timeout", "120s")
    contains(out, 'release "tern" uninstalled', "helm uninstall")
    gone = [("deployment", "tern-operator", SYS_NS), ("serviceaccount", "tern-operator", SYS_NS),
            ("role", "tern-operator-leader-election", SYS_NS),
            ("clusterrole", "tern-operator", None), ("clusterrolebinding", "tern-operator", None),
            ("validatingadmissionpolicy", "tern-approvals", None),
            ("validatingadmissionpolicybinding", "tern-approvals", None)]
    for kind, name, ns in gone:
        args = ["get", kind, name, "--ignore-not-found", "-o", "name"] + (["-n", ns] if ns else [])
        eq(t.kubectl(*args).strip(), "", "%s/%s removed" % (kind, name))
    wait_for("the operator pod gone", lambda: r.operator_pods() == [], 60, interval=0.3)
    eq(t.kubectl("get", "secrets", "-n", SYS_NS, "-l", "owner=helm", "-o", "name").strip(), "",
       "Helm's release records removed")
    # what stays, by Helm's rules
    eq(t.kubectl("get", "crd", "agentsessions.tern.dev", "-o", "name").strip(),
       "customresourcedefinition.apiextensions.k8s.io/agentsessions.tern.dev", "the CRD stays")
    names = t.kubectl("get", "agentsessions", "-n", NS, "-o", "name").split()
    eq(sorted(names), ["agentsession.tern.dev/across", "agentsession.tern.dev/demo"],
       "the sessions stay")
    eq(bool(ternlocal.journal_keys(t.journal, r.uid)), True, "the journal stays")
    eq(bool(t.kubectl("get", "pvc", "-n", NS, "-l", "tern.dev/session-uid=" + r.uid,
                      "-o", "name").strip()), True, "the session's workspace PVC stays")
    eq(t.kubectl("get", "namespace", SYS_NS, "-o", "name").strip(), "namespace/" + SYS_NS,
       "the release namespace stays")
    # deleting a session without an operator waits on its finalizer ...
    t.kubectl("delete", "agentsession", "across", "-n", NS, "--wait=false")
    s = t.session("across", NS)
    eq(bool(s["metadata"].get("deletionTimestamp")), True, "deletion started")
    contains(s["metadata"].get("finalizers", []), "tern.dev/journal", "finalizer held")
    # ... until the operator is back: a second install skips the existing CRD
    rc, out, err = r.install()
    contains(out, "STATUS: deployed", "helm install again")
    wait_for("the session deleted by the reinstalled operator", lambda: t.kubectl(
        "get", "agentsession", "across", "-n", NS, "--ignore-not-found", "-o", "name")
        .strip() == "", 90, interval=0.3)
    wait_for("its journal deleted", lambda: ternlocal.journal_keys(t.journal, r.uid) == [], 60)


def main():
    suite = Suite()
    with ternlocal.Local() as t:
        if t.cluster != "kube":
            print("test_helm runs on the real control plane only (TERN_CLUSTER=kube)")
            suite.finish()
        t.start_etcd()
        t.start_cluster()
        t.base = t.start_fakellm(os.path.join(ROOT, "examples", "demo-script.json"))
        t.remote_token = "demo-" + os.urandom(12).hex()
        t.remote = t.start_gitremote(t.remote_token, repo="demo.git")
        r = Run(t)
        done = set()
        for name, fn, needs in [
            ("helm_lint_and_template_tern_node_values", step_lint_and_template, None),
            ("values_schema_refuses_wrong_types", step_schema_refuses, None),
            ("helm_install", step_install, None),
            ("demo_session_through_helm_operator", step_demo, "helm_install"),
            ("helm_upgrade_rolls_operator_session_carries_on", step_upgrade,
             "demo_session_through_helm_operator"),
            ("helm_uninstall_what_remains", step_uninstall, "helm_upgrade_rolls_operator_session_carries_on"),
        ]:
            def run(fn=fn, needs=needs):
                if needs and needs not in done:
                    raise AssertionError("needs step %s, which failed" % needs)
                fn(r)
            before = suite.failed
            suite.run(name, run)
            if suite.failed == before:
                done.add(name)
        if suite.failed:
            pods = r.operator_pods() if "helm_install" in done else []
            for p in pods:
                print("---- operator pod %s log (tail)" % p["metadata"]["name"])
                print(t.kubectl("logs", "-n", SYS_NS, p["metadata"]["name"], check=False)[-3000:])
            print("---- tern-node log (tail)")
            print(t.logs_of("tern-node")[-3000:])
        t.stop("tern-fakellm")
        t.stop("tern-node")
    suite.finish()


if __name__ == "__main__":
    main()
