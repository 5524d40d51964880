"""In-cluster install (on tern-dev and on the real control plane): `kubectl apply -k
deploy/overlays/tern-dev` installs the base's CRD, ServiceAccount, RBAC and
Deployment; tern-dev's kubelet runs tern-operator as a pod with the in-cluster
configuration and its service-account token; the demo session runs to
completion (approved with `kubectl tern approve`), is forked, gets a rejected
approval twice (an aggregated Event), is suspended and deleted.

Then the base's RBAC is checked against the cluster's record of its
authorization decisions: tern-dev's authorization log (`tern-dev up
--authz-log`, one JSON line per decision for a non-admin user), or the real
kube-apiserver's audit log (a Metadata entry for every request, with the
authorizer's decision in the annotation authorization.k8s.io/decision):
  - no denial for the operator's or the runner's service account;
  - EXCESS: every (apiGroup, resource[/subresource], verb) that
    deploy/base/rbac.yaml (deploy/runner-rbac.yaml) grants was used;
  - MISSING: with `create` on batch jobs removed from the ClusterRole, a new
    session is denied its turn Job (logged), does not progress, and the
    operator reports the Forbidden error; it recovers once the rule is back.
The operator also tells the session: a Warning Event "ReconcileError" with
the same message.

Run: /usr/bin/python3 tests/integration/test_incluster_install.py
     (TERN_CLUSTER=kube: on the real control plane)
"""
# runs on: terndev kube
import copy
import json
import os
import re
import sys
from urllib.error import HTTPError

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, condition, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT
OVERLAY = os.path.join(ROOT, "deploy", "overlays", "tern-dev")
SYS_NS = "tern-system"
NS = "sessions"
OPERATOR_USER = "system:serviceaccount:tern-system:tern-operator"
PKI_USER = "system:serviceaccount:tern-system:tern-pki"
RUNNER_USER = "system:serviceaccount:%s:tern-runner" % NS
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


# ---- RBAC rules as triples ------------------------------------------------
GIT_TOKEN = "not-a-real-git-token"  # the demo's publish remote (tests/fakes/gitremote.py)

def rule_triples(path, kinds=("ClusterRole", "Role")):
    """{(apiGroup, resource[/subresource], verb): "Kind/name"} of every rule
    of the Roles/ClusterRoles in a manifest file."""
    out = {}
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if not doc or doc.get("kind") not in kinds:
                continue
            for rule in doc.get("rules", []):
                for g in rule.get("apiGroups", []):
                    for r in rule.get("resources", []):
                        for v in rule.get("verbs", []):
                            out[(g, r, v)] = "%s/%s" % (doc["kind"], doc["metadata"]["name"])
    return out


def decision_triple(d):
    r = d["resource"] + ("/" + d["subresource"] if d.get("subresource") else "")
    return (d["apiGroup"], r, d["verb"])


def fmt(triples):
    return "\n".join("  %-20s %-28s %s" % ("%r" % g, r, v) for g, r, v in sorted(triples))


# ---- the operator pod -----------------------------------------------------
def operator_pod(t):
    pods = t.get_json("pods", "-n", SYS_NS, "-l", "app.kubernetes.io/component=operator")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return live[0] if len(live) == 1 else None


def pod_ready(p):
    return p and any(c["type"] == "Ready" and c["status"] == "True"
                     for c in p.get("status", {}).get("conditions", []))


def descendants(pid):
    """pid and every process below it (the container's process tree)."""
    out, pending = [], [pid]
    while pending:
        p = pending.pop()
        out.append(p)
        try:
            for task in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, task)) as f:
                    pending.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def operator_process(pod):
    """The host pid of the tern-operator process of the pod (the kubelet's
    containerID is bwrap://<pid>)."""
    cid = pod["status"]["containerStatuses"][0]["containerID"]
    eq(cid.startswith("bwrap://"), True, "containerID %s" % cid)
    for p in descendants(int(cid[len("bwrap://"):])):
        try:
            with open("/proc/%d/comm" % p) as f:
                if f.read().strip() == "tern-operator":
                    return p
        except OSError:
            pass
    raise AssertionError("no tern-operator process under %s" % cid)


# ---- sessions ---------------------------------------------------------------
def demo_manifest(t, name):
    with open(os.path.join(ROOT, "examples", "demo.yaml")) as f:
        m = f.read()
    m = m.replace("http://127.0.0.1:0/v1", t.base).replace("name: demo\n", "name: %s\n" % name)
    return m.replace("http://127.0.0.1:0/demo.git", t.remote)


def waiting(t, name, timeout=60):
    return t.wait_session(name, "WaitingForApproval",
                          lambda s: phase(s) in ("WaitingForApproval", "Failed"), timeout, ns=NS)


def completed(t, name, timeout=60):
    return t.wait_session(name, "Completed",
                          lambda s: condition(s, "Completed") == "True" or phase(s) == "Failed",
                          timeout, ns=NS)


def annotation_gone(t, name, key, timeout=30):
    wait_for("%s removed from %s" % (key, name), lambda: key not in
             t.session(name, NS)["metadata"].get("annotations", {}), timeout, interval=0.1)


def from_audit(e):
    """A kube-apiserver audit entry as a decision of tern-dev's log, or None
    (entries without a decision: unauthenticated, non-resource requests)."""
    decision = (e.get("annotations") or {}).get("authorization.k8s.io/decision")
    ref = e.get("objectRef") or {}
    if not decision or not ref.get("resource"):
        return None
    return {"user": e["user"]["username"], "allowed": decision == "allow",
            "apiGroup": ref.get("apiGroup", ""), "resource": ref["resource"],
            "subresource": ref.get("subresource", ""), "verb": e["verb"],
            "namespace": ref.get("namespace", ""), "path": e["requestURI"].split("?")[0]}


def non_admin(user):
    """Users the check is about: service accounts of the cluster's users, not
    the control plane's own (kube-system) nor the node and the components."""
    return (user.startswith("system:serviceaccount:") and
            not user.startswith("system:serviceaccount:kube-system:"))


class Run:
    """State shared by the steps (they run in order; a failed step makes the
    later ones that need it fail with its name)."""

    def __init__(self, t, authz_log, audit):
        self.t = t
        self.authz_log = authz_log  # tern-dev's authorization log or the audit log
        self.audit = audit          # True: kube-apiserver's audit log
        self.good_run_lines = None  # log lines of the good run

    def decisions_since(self, start):
        out = [json.loads(x) for x in self.lines()[start:]]
        if self.audit:
            out = [d for d in map(from_audit, out) if d and non_admin(d["user"])]
        return out

    def lines(self):
        with open(self.authz_log) as f:
            return f.read().splitlines()

    def decisions(self, upto=None):
        lines = self.lines()
        out = [json.loads(x) for x in (lines[:upto] if upto is not None else lines)]
        if self.audit:
            out = [d for d in map(from_audit, out) if d and non_admin(d["user"])]
        return out


def secret_data(t, name, ns=SYS_NS):
    import base64
    sec = t.get_json("secret", name, "-n", ns)
    return {k: base64.b64decode(v).decode() for k, v in sec["data"].items()}


def export_pki(t, d):
    """The journal's certificates from the tern-pki Job's Secrets, as files
    (the etcd outside the cluster serves with them; the test's own view of
    the journal uses the operator's certificate and root's password)."""
    os.makedirs(d, exist_ok=True)
    srv, op = secret_data(t, "tern-journal-server"), secret_data(t, "tern-journal-operator")
    files = {"ca.crt": srv["ca.crt"], "server.crt": srv["tls.crt"], "server.key": srv["tls.key"],
             "operator.crt": op["tls.crt"], "operator.key": op["tls.key"],
             "root-password": op["root-password"]}
    for name, text in files.items():
        path = os.path.join(d, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.chmod(path + ".tmp", 0o600)
        os.replace(path + ".tmp", path)  # etcd reads its certificate per handshake
    return ternlocal.kubecluster_pki(d)


def pki_job_done(t, name):
    return wait_for("Job %s complete" % name, lambda: any(
        c["type"] == "Complete" and c["status"] == "True" for c in
        t.get_json("job", name, "-n", SYS_NS).get("status", {}).get("conditions", [])), 90,
        interval=0.3)


def step_install(r):
    t = r.t
    t.kubectl("create", "namespace", SYS_NS)
    out = t.kubectl("apply", "-k", OVERLAY)
    for obj in ["customresourcedefinition.apiextensions.k8s.io/agentsessions.tern.dev",
                "serviceaccount/tern-operator", "clusterrole.rbac.authorization.k8s.io/tern-operator",
                "deployment.apps/tern-operator", "job.batch/tern-pki",
                "apiservice.apiregistration.k8s.io/v1alpha1.stream.tern.dev",
                "clusterrole.rbac.authorization.k8s.io/tern-session-viewer"]:
        contains(out, obj + " created", "apply -k output")
    eq("statefulset" in out or "ValidatingAdmissionPolicy" in out or "networkpolicy" in out,
       False, "dropped by the overlay: " + out)
    # the Job makes the journal's certificates; the journal etcd (outside
    # the cluster here) serves with them, and the operator pod, which waited
    # for its Secrets and the ConfigMap, locks it at its first start
    pki_job_done(t, "tern-pki")
    r.pki_dir = os.path.join(t.dir, "journal-pki-from-secrets")
    t.start_etcd(pki=export_pki(t, r.pki_dir))
    t.kubectl("create", "configmap", "tern-journal", "-n", SYS_NS,
              "--from-literal=endpoints=" + t.etcd_url)
    t.kubectl("wait", "--for=condition=established", "--timeout=30s", "crd/agentsessions.tern.dev",
              "crd/agentbudgets.tern.dev")
    pod = wait_for("the operator pod Ready", lambda: (lambda p: p if pod_ready(p) else None)(
        operator_pod(t)), 60, interval=0.2)
    r.pod = pod
    t.kubectl("rollout", "status", "-n", SYS_NS, "deployment/tern-operator", "--timeout=30s")


def step_in_cluster_config(r):
    t, pod = r.t, r.pod
    c = pod["spec"]["containers"][0]
    argv = c.get("command", []) + c.get("args", [])
    eq([a for a in argv if "kubeconfig" in a], [], "no --kubeconfig in the pod")
    eq([a for a in argv if a.startswith("--etcd-endpoints")], [], "etcd from the ConfigMap")
    eq(pod["spec"]["serviceAccountName"], "tern-operator", "serviceAccountName")
    pid = operator_process(pod)
    with open("/proc/%d/environ" % pid, "rb") as f:
        env = dict(kv.split("=", 1) for kv in f.read().decode().split("\0") if "=" in kv)
    eq("KUBECONFIG" in env, False, "no KUBECONFIG in the operator's environment")
    eq(bool(env.get("KUBERNETES_SERVICE_HOST")), True, "KUBERNETES_SERVICE_HOST set")
    eq(env.get("TERN_ETCD_ENDPOINTS"), t.etcd_url, "TERN_ETCD_ENDPOINTS from the ConfigMap")
    ip = pod["status"]["podIP"]
    eq(env.get("POD_IP"), ip, "POD_IP")
    # the token as the operator sees it (its own mount namespace)
    root = "/proc/%d/root%s" % (pid, SA_DIR)
    with open(root + "/namespace") as f:
        eq(f.read().strip(), SYS_NS, "mounted namespace file")
    with open(root + "/token") as f:
        eq(len(f.read().strip()) > 0, True, "mounted token")
    eq(os.path.exists(root + "/ca.crt"), True, "mounted ca.crt")
    # the journal's credentials, mounted from the tern-pki Job's Secrets
    jroot = "/proc/%d/root/var/run/tern" % pid
    for f in ("journal-operator/tls.crt", "journal-operator/root-password",
              "journal-operator/operator-password", "journal-runner/tls.crt"):
        eq(os.path.exists(os.path.join(jroot, f)), True, "mounted " + f)
    eq(env.get("TERN_ETCD_ROOT_PASSWORD_FILE"),
       "/var/run/tern/journal-operator/root-password", "the journal locked")
    logs = t.kubectl("logs", "-n", SYS_NS, pod["metadata"]["name"])
    locked = [json.loads(x) for x in logs.splitlines() if '"journal locked"' in x]
    # "enabled now" at the pod's first start; a container restarted since
    # (a loaded machine: a probe) finds it on and says "was enabled"
    eq(len(locked), 1, "one 'journal locked' line in:\n" + logs[:2000])
    eq(locked[0].get("auth") in ("enabled now", "was enabled"), True, "journal locked: %s" %
       locked[0])
    # and it is on: the operator's certificate without a user's token reads nothing
    anon = ternlocal.JournalEtcd(t.etcd_url, r.pki_dir + "/ca.crt", r.pki_dir + "/operator.crt",
                                 r.pki_dir + "/operator.key")
    try:
        anon.range("/tern/v1/s/")
        raise AssertionError("the journal answered a client without a user")
    except HTTPError as e:
        msg = e.read().decode().lower()
        eq("permission denied" in msg or "user name is empty" in msg, True,
           "etcd auth is on: %s" % msg[:200])
    cfg = [json.loads(x) for x in logs.splitlines() if '"kubernetes config"' in x]
    eq(len(cfg), 1, "one 'kubernetes config' log line in:\n" + logs[:2000])
    eq(cfg[0].get("source"), "in-cluster", "config source")
    eq(cfg[0].get("tokenFile"), SA_DIR + "/token", "token file")
    eq(cfg[0].get("server"), "https://%s:%s" % (env["KUBERNETES_SERVICE_HOST"],
                                                env["KUBERNETES_SERVICE_PORT"]), "server")
    # metrics and health listen on the pod's own address
    import urllib.request
    body = urllib.request.urlopen("http://%s:8080/metrics" % ip, timeout=5).read().decode()
    contains(body, "tern_reconciles_total", "metrics on the pod IP")

    def synced():
        text = urllib.request.urlopen("http://%s:8080/metrics" % ip, timeout=5).read().decode()
        m = re.search(r"^tern_cache_sync_seconds (\S+)$", text, re.M)
        return m and float(m.group(1)) > 0
    wait_for("tern_cache_sync_seconds set once the workers run", synced, 60)
    users = {d["user"] for d in r.decisions()}
    contains(users, OPERATOR_USER, "the operator's requests are made as its service account")


def step_demo_session(r):
    t = r.t
    t.kubectl("create", "namespace", NS)
    t.apply_runner_rbac(NS)
    t.create_secret("demo-model", "api-key", "not-a-real-key", ns=NS)
    t.create_secret("demo-git", "token", GIT_TOKEN, ns=NS)
    # a team budget over the namespace (its status is the operator's to write)
    t.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps({
        "apiVersion": "tern.dev/v1alpha1", "kind": "AgentBudget",
        "metadata": {"name": "team", "namespace": NS},
        "spec": {"limits": {"concurrentSessions": 4, "tokens": 100000000}}}))
    t.kubectl("apply", "-n", NS, "-f", "-", input=demo_manifest(t, "demo"))
    s = waiting(t, "demo")
    eq(phase(s), "WaitingForApproval", "phase (%s)" % json.dumps(s.get("status"))[:800])
    out = t.tern("approve", "demo", "-n", NS)
    contains(out, "approved " + s["status"]["pendingApproval"]["id"], "kubectl tern approve")
    s = completed(t, "demo")
    eq(phase(s), "Succeeded", "phase (%s)" % json.dumps(s.get("status"))[:800])
    contains(s["status"]["result"]["summary"], "published", "result")
    # the budget counted the demo's model calls and holds its sandbox's slot
    used = sum(e["data"]["usage"]["prompt_tokens"] + e["data"]["usage"]["completion_tokens"]
               for e in ternlocal.journal_events(t.journal, s["metadata"]["uid"])
               if e["type"] == "model_response")
    b = wait_for("the budget's status", lambda: (lambda o: o if (o.get("status") or {}).get(
        "used", {}).get("tokens") == used else None)(t.get_json("agentbudget", "team", "-n", NS)),
        60, interval=0.2)
    eq(b["status"]["display"]["tokens"], "%d/100000000" % used, "used/limit")
    eq(b["status"]["display"]["concurrentSessions"], "1/4", "the demo holds a slot")
    if t.cluster == "terndev":
        # the session read through the aggregated API the operator pod serves
        # (the base's APIService and Service; tern-dev proxies to the pod it
        # selects). The real control plane cannot route to a pod here: its
        # EndpointSlices refuse tern-node's loopback pod addresses.
        out = t.tern("logs", "demo", "-n", NS)
        contains(out, "turn finished: completed", "kubectl tern logs, in-cluster")
        contains(out, "approval ap-", "the approval")


def subprocess_tern(t, *args):
    import subprocess
    env = dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig,
               PATH=ternlocal.BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
    return subprocess.run([ternlocal.KUBECTL, "tern", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def step_fork_and_events(r):
    t = r.t
    # a rejected approval, twice with the same note: one Event, then its
    # series is patched (the recorder flushes at the latest at shutdown).
    # kubectl tern refuses a wrong id itself, so the annotation is set
    # directly, as another client could
    r0 = subprocess_tern(t, "approve", "demo", "ap-stale", "-n", NS)
    eq(r0.returncode, 1, "kubectl tern approve refuses an id that is not pending")
    for _ in range(2):
        t.kubectl("annotate", "--overwrite", "agentsession", "demo", "-n", NS,
                  "tern.dev/approve=ap-stale")
        annotation_gone(t, "demo", "tern.dev/approve")
    out = t.tern("fork", "demo", "demo-alt", "-n", NS)
    contains(out, "demo-alt", "kubectl tern fork")
    child = t.wait_session("demo-alt", "forked", lambda s: any(
        e["type"] == "forked_from" for e in ternlocal.journal_events(
            t.journal, s["metadata"]["uid"])), 60, ns=NS)
    eq(child["spec"]["forkFrom"]["session"], "demo", "forkFrom")


def step_rotate_certificates(r):
    """tern-pki --rotate renews every certificate; etcd takes its new one at
    the next handshake, the operator its own when its pod restarts (tern-dev
    writes Secret volumes at pod start), and every session's Secret gets the
    new runner certificate at its next reconcile: a new session runs its
    turn with all three."""
    t = r.t
    before = {n: secret_data(t, n)["tls.crt"] for n in
              ("tern-journal-server", "tern-journal-operator", "tern-journal-runner")}
    with open(os.path.join(ROOT, "deploy", "base", "pki.yaml")) as f:
        job = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "Job"][0]
    job["metadata"]["name"] = "tern-pki-rotate"
    job["spec"]["template"]["spec"]["containers"][0]["args"].append("--rotate")
    t.kubectl("apply", "-n", SYS_NS, "-f", "-", input=json.dumps(job))
    pki_job_done(t, "tern-pki-rotate")
    after = {n: secret_data(t, n)["tls.crt"] for n in before}
    for n in before:
        eq(after[n] != before[n], True, "%s renewed" % n)
    eq(secret_data(t, "tern-journal-operator")["root-password"],
       open(os.path.join(r.pki_dir, "root-password")).read(), "passwords kept")
    export_pki(t, r.pki_dir)  # etcd's new serving certificate, in place
    old = r.pod["metadata"]["name"]
    t.kubectl("delete", "pod", "-n", SYS_NS, old, "--timeout=60s")
    r.pod = wait_for("a new operator pod Ready", lambda: (lambda p: p if pod_ready(p) and
                     p["metadata"]["name"] != old else None)(operator_pod(t)), 60, interval=0.2)
    runner = after["tern-journal-runner"]
    wait_for("demo's journal Secret patched with the new runner certificate", lambda: secret_data(
        t, "demo-journal", NS)["tls.crt"] == runner, 60, interval=0.3)
    t.kubectl("apply", "-n", NS, "-f", "-", input=demo_manifest(t, "rotated"))
    s = waiting(t, "rotated")
    eq(phase(s), "WaitingForApproval", "a turn after the rotation")


def step_suspend_and_delete(r):
    t = r.t
    # suspend deletes the sandbox pod (the operator's own pod delete)
    eq(t.kubectl("get", "pod", "demo-sandbox", "-n", NS, "-o", "name").strip(),
       "pod/demo-sandbox", "sandbox pod before suspend")
    t.tern("suspend", "demo", "-n", NS)
    wait_for("demo's sandbox removed", lambda: t.kubectl(
        "get", "pod", "demo-sandbox", "-n", NS, "--ignore-not-found", "-o", "name")
        .strip() == "", 60, interval=0.2)
    # parked, it keeps only its workspace claim (the operator's deletes of
    # Secrets, ConfigMaps and NetworkPolicies)
    wait_for("demo's token and journal Secrets, task ConfigMap and NetworkPolicy removed",
             lambda: t.kubectl("get", "secret/demo-sandbox-token", "secret/demo-journal",
                               "configmap/demo-task", "networkpolicy/demo-sandbox", "-n", NS,
                               "--ignore-not-found", "-o", "name").strip() == "", 60,
             interval=0.2)
    eq(t.kubectl("get", "pvc", "demo-workspace", "-n", NS, "-o", "name").strip(),
       "persistentvolumeclaim/demo-workspace", "the workspace claim stays")
    uids = {n: t.session(n, NS)["metadata"]["uid"] for n in ("demo", "demo-alt")}
    # the fork has finished: with a time to live of 0 the operator deletes it
    wait_for("demo-alt finished", lambda: phase(t.session("demo-alt", NS)) == "Succeeded", 60,
             interval=0.2)
    t.kubectl("patch", "agentsession", "demo-alt", "-n", NS, "--type=merge", "-p",
              '{"spec":{"ttlSecondsAfterFinished":0}}')
    wait_for("demo-alt deleted by the operator (ttlSecondsAfterFinished)", lambda: t.kubectl(
        "get", "agentsession", "demo-alt", "-n", NS, "--ignore-not-found", "-o", "name")
        .strip() == "", 60, interval=0.2)
    t.kubectl("delete", "agentsession", "demo", "-n", NS, "--timeout=60s")
    for n, uid in uids.items():
        wait_for("journal of %s deleted" % n,
                 lambda: ternlocal.journal_keys(t.journal, uid) == [], 30)
        wait_for("children of %s deleted" % n, lambda: t.kubectl(
            "get", "pods,jobs,pvc,secrets,configmaps,networkpolicies", "-n", NS,
            "-l", "tern.dev/session-uid=" + uid, "-o", "name").strip() == "", 60, interval=0.2)


TICK = """apiVersion: tern.dev/v1alpha1
kind: AgentTrigger
metadata: {name: tick}
spec:
  templateRef: {name: demo-tpl}
  objective: "%s (slot {{ scheduledTime }})"
  schedule: {cron: "* * * * *", concurrencyPolicy: Replace}
"""


def demo_template(t):
    """examples/demo.yaml's spec without its objective, as a template (its
    trusted tools included): the demo session's behaviour, from a trigger."""
    demo = yaml.safe_load(demo_manifest(t, "demo"))
    spec = demo["spec"]
    objective = " ".join(spec.pop("objective").split())
    tpl = {"apiVersion": "tern.dev/v1alpha1", "kind": "AgentSessionTemplate",
           "metadata": {"name": "demo-tpl"}, "spec": spec}
    return json.dumps(tpl), objective


def step_templates_and_triggers(r):
    """The template and trigger grants: a session naming a template (get
    agentsessiontemplates); an every-minute trigger with Replace whose
    first session (the demo's, which waits for approval to publish) is
    still running at the next slot, which deletes it (delete agentsessions)
    and then finds its name taken by a session that is not the trigger's
    (get agentsessions, a Warning NameInUse)."""
    t = r.t
    tpl, objective = demo_template(t)
    t.kubectl("apply", "-n", NS, "-f", "-", input=tpl)
    t.kubectl("apply", "-n", NS, "-f", "-", input="""apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: templated}
spec:
  objective: look around
  templateRef: {name: demo-tpl}
  suspend: true
""")
    s = t.wait_session("templated", "template recorded",
                       lambda s: (s.get("status") or {}).get("template"), 60, ns=NS)
    eq(s["status"]["template"]["spec"]["model"]["name"], "fake-demo", "recorded template")
    import time as _time
    m1 = int(_time.time() // 60) + 1
    if m1 * 60 - _time.time() < 10:
        _time.sleep(m1 * 60 - _time.time() + 1)  # clear of a minute boundary
        m1 += 1
    t.kubectl("apply", "-n", NS, "-f", "-", input=TICK % objective.replace('"', "'"))
    for m in (m1 + 1, m1 + 2):  # names the trigger will want after its first
        t.kubectl("apply", "-n", NS, "-f", "-", input="""apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: tick-%d}
spec: {objective: a squatter, suspend: true}
""" % m)
    first = "tick-%d" % m1
    s = t.wait_session(first, "created by the trigger", lambda s: s, 150, ns=NS)
    eq(s["spec"]["templateRef"]["name"], "demo-tpl", "the trigger's first session")
    wait_for("%s deleted by Replace" % first, lambda: t.kubectl(
        "get", "agentsession", first, "-n", NS, "--ignore-not-found", "-o", "name").strip() == "",
        150, interval=0.5)

    def name_in_use():
        evs = t.get_json("events", "-n", NS, "--field-selector", "involvedObject.name=tick")
        return any(e.get("reason") == "NameInUse" for e in evs.get("items", []))
    wait_for("Warning NameInUse on tick", name_in_use, 60, interval=0.5)
    t.kubectl("delete", "agenttrigger", "tick", "-n", NS, "--timeout=60s")
    t.kubectl("delete", "agentsession", "templated", "tick-%d" % (m1 + 1), "tick-%d" % (m1 + 2),
              "-n", NS, "--ignore-not-found", "--timeout=60s")


def step_shutdown_flush(r):
    """Ends the good run: the operator pod is deleted (SIGTERM: the recorder
    flushes its Event series, the leader releases its Lease) and the
    Deployment's next pod takes over. The log up to here is the good run."""
    t = r.t
    old = r.pod["metadata"]["name"]
    t.kubectl("delete", "pod", "-n", SYS_NS, old, "--timeout=60s")
    pod = wait_for("a new operator pod Ready", lambda: (lambda p: p if pod_ready(p) and
                   p["metadata"]["name"] != old else None)(operator_pod(t)), 60, interval=0.2)
    r.pod = pod
    r.good_run_lines = len(r.lines())


def step_no_denials(r):
    ds = r.decisions(r.good_run_lines)
    ours = [d for d in ds if d["user"] in (OPERATOR_USER, RUNNER_USER)]
    eq(bool([d for d in ours if d["user"] == OPERATOR_USER]), True, "operator decisions logged")
    eq(bool([d for d in ours if d["user"] == RUNNER_USER]), True, "runner decisions logged")
    denied = [d for d in ours if not d["allowed"]]
    eq(denied, [], "denied requests in the good run")
    other = sorted({d["user"] for d in ds} - {OPERATOR_USER, RUNNER_USER, PKI_USER})
    eq([d for d in ds if d["user"] == PKI_USER and not d["allowed"]], [], "tern-pki denied")
    # sandbox pods mount no token; nobody else should talk to the API
    eq(other, [], "other non-admin users")


# Grants that kube-apiserver checks inside admission, not as a request of
# their own, so its audit log shows no decision for them (tern-dev's log
# records the check): OwnerReferencesPermissionEnforcement authorizes the
# finalizers update that an ownerReference with blockOwnerDeletion needs.
ADMISSION_CHECKED = {("tern.dev", "agentsessions/finalizers", "update")}
# Grants the in-cluster run on the real control plane cannot use: the
# operator's access reviews come with requests to its aggregated API, which
# kube-apiserver cannot route to a pod of tern-node (its EndpointSlices
# refuse loopback pod addresses); tern-dev's run uses them.
KUBE_UNROUTABLE = {("authorization.k8s.io", "subjectaccessreviews", "create")}
# grants used only on paths a good run may not take: the runner watches its
# session only while the sandbox's address is not published yet (a runner
# slower than its sandbox reads it with its first get); the operator updates
# a ConfigMap only to apply an approved memory proposal or to replace an
# artifact set a crash left unrecorded, and deletes one only when a retained
# set's TTL has passed (test_memory, test_artifacts; the rules themselves are
# checked by test_install_manifests); it patches a Job only to resume the
# file viewer of a parked session whose files are asked for (test_stream_api)
USED_WHEN_NEEDED = {("tern.dev", "agentsessions", "watch"), ("", "configmaps", "update"),
                    ("", "configmaps", "delete"), ("batch", "jobs", "patch")}


def excess(r, user, manifest):
    granted = rule_triples(manifest)
    used = {decision_triple(d) for d in r.decisions(r.good_run_lines)
            if d["user"] == user and d["allowed"] and d["resource"]}
    if r.audit:
        used |= ADMISSION_CHECKED & set(granted)
        used |= KUBE_UNROUTABLE & set(granted)
    unused = set(granted) - used - USED_WHEN_NEEDED
    print("    %s used:\n%s" % (user, fmt(used)), flush=True)
    if unused:
        raise AssertionError("%s never used these grants of %s (excess permission?):\n%s" %
                             (user, os.path.relpath(manifest, ROOT), fmt(unused)))
    outside = used - set(granted)
    eq(sorted(outside), [], "used but not granted")


def step_excess_operator(r):
    excess(r, OPERATOR_USER, os.path.join(ROOT, "deploy", "base", "rbac.yaml"))


def step_excess_pki(r):
    excess(r, PKI_USER, os.path.join(ROOT, "deploy", "base", "pki.yaml"))


def step_excess_runner(r):
    excess(r, RUNNER_USER, os.path.join(ROOT, "deploy", "runner-rbac.yaml"))


def operator_role(t):
    """The operator's ClusterRole twice, ready to apply: one to edit, one to
    put back."""
    role = t.get_json("clusterrole", "tern-operator")
    for k in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        role["metadata"].pop(k, None)
    return role, copy.deepcopy(role)


def operator_may(t, verb, resource, ns, *more):
    """kubectl auth can-i as the operator's ServiceAccount: RBAC changes
    reach an API server's authorizer through its informers, a moment after
    the write, so a test waits for the answer it set up before relying on
    it."""
    return t.kubectl("auth", "can-i", verb, resource, "-n", ns, "--as", OPERATOR_USER, *more,
                     check=False).strip()


def step_missing_rule(r):
    t = r.t
    role, original = operator_role(t)
    n = 0
    for rule in role["rules"]:
        if rule["apiGroups"] == ["batch"] and "jobs" in rule["resources"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
            n += 1
    eq(n, 1, "one batch/jobs rule")
    t.kubectl("apply", "-f", "-", input=json.dumps(role))
    wait_for("the authorizer without the rule", lambda: operator_may(
        t, "create", "jobs.batch", NS) == "no", 60, interval=0.2)
    start = len(r.lines())
    t.kubectl("apply", "-n", NS, "-f", "-", input=demo_manifest(t, "blocked"))

    def denial():
        return [d for d in r.decisions_since(start) if d["user"] == OPERATOR_USER and
                not d["allowed"] and d["verb"] == "create" and d["resource"] == "jobs"]
    d = wait_for("the denied Job create in the authz log", denial, 60, interval=0.2)[0]
    eq((d["apiGroup"], d["namespace"], d["path"]),
       ("batch", NS, "/apis/batch/v1/namespaces/%s/jobs" % NS), "denied request")
    # the operator reports it and retries; the session does not progress
    msg = ('jobs.batch is forbidden: User "%s" cannot create resource "jobs" in API group '
           '"batch" in the namespace "%s"' % (OPERATOR_USER, NS))
    name = r.pod["metadata"]["name"]

    def logged():
        for line in t.kubectl("logs", "-n", SYS_NS, name).splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("msg") == "reconcile failed" and msg in e.get("error", ""):
                return e
        return None
    e = wait_for("the Forbidden error in the operator log", logged, 30, interval=0.2)
    eq(e.get("session"), NS + "/blocked", "session of the logged error")
    wait_for("a second denied attempt (the operator retries)", lambda: len(denial()) >= 2, 30,
             interval=0.2)

    def warned():
        evs = json.loads(t.kubectl("get", "events.events.k8s.io", "-n", NS, "-o", "json"))
        return [e for e in evs["items"] if e.get("reason") == "ReconcileError" and
                e.get("regarding", {}).get("name") == "blocked" and msg in e.get("note", "")]
    ev = wait_for("a Warning Event on the session", warned, 30, interval=0.2)[0]
    eq(ev["type"], "Warning", "event type")
    s = t.session("blocked", NS)
    eq(phase(s) in ("WaitingForApproval", "Succeeded"), False, "blocked session progressed")
    eq(t.kubectl("get", "jobs", "-n", NS, "-l", "tern.dev/session-uid=" + s["metadata"]["uid"],
                 "-o", "name").strip(), "", "no turn Job")
    # the rule back: the retry goes through and the session runs its turn
    t.kubectl("apply", "-f", "-", input=json.dumps(original))
    s = waiting(t, "blocked")
    eq(phase(s), "WaitingForApproval", "recovered after the rule came back")


def step_finalizers_rule_needed(r):
    """The one grant the audit log cannot show in use (ADMISSION_CHECKED):
    without update on agentsessions/finalizers the owner-reference check
    refuses the session's children, with a Warning Event; with it back the
    session runs its turn."""
    t = r.t
    role, original = operator_role(t)
    before = len(role["rules"])
    role["rules"] = [x for x in role["rules"] if x.get("resources") != ["agentsessions/finalizers"]]
    eq(len(role["rules"]), before - 1, "one agentsessions/finalizers rule")
    t.kubectl("apply", "-f", "-", input=json.dumps(role))
    wait_for("the authorizer without the rule", lambda: operator_may(
        t, "update", "agentsessions.tern.dev", NS, "--subresource=finalizers") == "no", 60, interval=0.2)
    t.kubectl("apply", "-n", NS, "-f", "-", input=demo_manifest(t, "noowner"))

    def warned():
        evs = json.loads(t.kubectl("get", "events.events.k8s.io", "-n", NS, "-o", "json"))
        return [e for e in evs["items"] if e.get("reason") == "ReconcileError" and
                e.get("regarding", {}).get("name") == "noowner" and
                "blockOwnerDeletion" in e.get("note", "")]
    ev = wait_for("a Warning Event naming blockOwnerDeletion", warned, 60, interval=0.2)[0]
    eq(ev["type"], "Warning", "event type")
    t.kubectl("apply", "-f", "-", input=json.dumps(original))
    s = waiting(t, "noowner")
    eq(phase(s), "WaitingForApproval", "recovered after the rule came back")


def main():
    suite = Suite()
    with ternlocal.Local() as t:
        # the journal etcd starts in step_install, with the certificates the
        # install's tern-pki Job makes
        authz_log = os.path.join(t.dir, "authz.jsonl")
        t.start_cluster(terndev_extra=("--authz-log", authz_log))
        if t.cluster == "kube":
            authz_log = t.kube.audit_log
        t.base = t.start_fakellm(os.path.join(ROOT, "examples", "demo-script.json"))
        t.remote = t.start_gitremote(GIT_TOKEN, repo="demo.git")
        r = Run(t, authz_log, audit=t.cluster == "kube")
        done = set()
        for name, fn, needs in [
            ("install_with_apply_k", step_install, None),
            ("operator_uses_in_cluster_config", step_in_cluster_config, "install_with_apply_k"),
            ("demo_session_completes", step_demo_session, "install_with_apply_k"),
            ("fork_and_repeated_event", step_fork_and_events, "demo_session_completes"),
            ("certificates_rotate", step_rotate_certificates, "fork_and_repeated_event"),
            ("suspend_and_delete", step_suspend_and_delete, "fork_and_repeated_event"),
            ("templates_and_triggers", step_templates_and_triggers, "demo_session_completes"),
            ("operator_pod_restart", step_shutdown_flush, "install_with_apply_k"),
            ("rbac_no_denials", step_no_denials, "operator_pod_restart"),
            ("rbac_no_excess_operator", step_excess_operator, "operator_pod_restart"),
            ("rbac_no_excess_runner", step_excess_runner, "operator_pod_restart"),
            ("rbac_no_excess_pki", step_excess_pki, "operator_pod_restart"),
            ("rbac_missing_rule_fails_cleanly", step_missing_rule, "operator_pod_restart"),
            ("rbac_finalizers_rule_needed", step_finalizers_rule_needed, "operator_pod_restart"),
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
            for n in ("tern-dev", "tern-node"):
                if n in t.procs:
                    print("---- %s log (tail)" % n)
                    print(t.logs_of(n)[-3000:])
            pod = operator_pod(t) if "install_with_apply_k" in done else None
            if pod:
                print("---- operator pod log (tail)")
                print(t.kubectl("logs", "-n", SYS_NS, pod["metadata"]["name"], check=False)[-3000:])
        # stopping the node gracefully stops the operator pod's processes
        t.stop("tern-fakellm")
        t.stop("tern-dev")
        t.stop("tern-node")
    suite.finish()


if __name__ == "__main__":
    main()
