"""Admission and CEL evaluated by the real kube-apiserver (1.37).

tern-dev does not serve admissionregistration.k8s.io and evaluates no CEL
(docs/tern-dev.md, "Differences from kube-apiserver"), so this suite runs on
the real control plane only:

  - the approval ValidatingAdmissionPolicy, as the chart renders it (`helm
    template --show-only templates/approval-policy.yaml`) and then as the
    kustomize base has it (deploy/base/approval-policy.yaml), with users
    impersonated by the admin (`kubectl --as/--as-group`, and the raw API for
    the status codes); RBAC lets every one of them patch sessions, so what
    refuses is the policy: a decision by a user outside the approver group
    (403 Forbidden), a decision whose tern.dev/decided-by is not the
    requesting user (422 Invalid), a decision on create, a deny; allowed: a
    member deciding as themself, `kubectl tern approve` by a member with a
    kubeconfig of their own (a client certificate), the operator's service
    account, annotations that are not decisions;
  - every manifest in tests/data/invalid-sessions/ refused at the field its
    header names (`# path:`, or `# kube-field:` where the server names the
    CEL rule's fieldPath), with a 422 Invalid whose causes carry that field
    (an unknown field: 400 BadRequest from strict field validation, naming
    it); the examples accepted (kubectl apply --server-side);
  - the CRD's transition rules (oldSelf): messages append-only (change,
    removal of an entry, removal of the list refused; appending accepted),
    forkFrom immutable and settable only on create;
  - server-side apply of sessions and field managers: the user's apply under
    kubectl's manager (operation Apply), the operator's status writes under
    its own (tern-operator, Update of the status subresource), and a second
    applier's conflict on a field the first owns.

Run: TERN_CLUSTER=kube /usr/bin/python3 tests/integration/test_admission.py
"""
# runs on: kube
import glob
import json
import os
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402
from kubeapi import Api, causes  # noqa: E402

ROOT = ternlocal.ROOT
HELM = os.path.join(ROOT, "build", "kube", "bin", "helm")
SYS_NS = "tern-system"
NS = "team"
GROUP = "tern-approvers"
OPERATOR_SA = "system:serviceaccount:%s:tern-operator" % SYS_NS
SESSIONS = "/apis/tern.dev/v1alpha1/namespaces/%s/agentsessions" % NS


def session(name, **spec):
    s = {"apiVersion": "tern.dev/v1alpha1", "kind": "AgentSession",
         "metadata": {"name": name, "namespace": NS}, "spec": {"objective": "x"}}
    s["spec"].update(spec)
    return s


class Run:
    def __init__(self, t):
        self.t = t
        self.api = Api(t.kubeconfig)

    def kubectl_as(self, user, groups, *args, input=None):
        argv = ["--as", user] + [a for g in groups for a in ("--as-group", g)] + list(args)
        env = dict(os.environ, HOME=self.t.home, KUBECONFIG=self.t.kubeconfig)
        return subprocess.run([ternlocal.KUBECTL, *argv], input=input, capture_output=True,
                              text=True, env=env, timeout=60)

    def decide(self, user, groups, name, key="tern.dev/approve", value="ap-1", by=None):
        """Annotates a session with a decision as user: the raw API (status
        code, Status) and returns (code, body)."""
        anns = {key: value}
        if by is not None:
            anns["tern.dev/decided-by"] = by
        return self.api.request("PATCH", SESSIONS + "/" + name,
                                {"metadata": {"annotations": anns}}, impersonate=(user, groups),
                                content_type="application/merge-patch+json")[:2]

    def clear(self, name):
        self.t.kubectl("annotate", "agentsession", name, "-n", NS, "tern.dev/approve-",
                       "tern.dev/deny-", "tern.dev/decided-by-", "tern.dev/memory-approve-",
                       "tern.dev/memory-reject-")


def helm_policy():
    env = dict(os.environ, HOME="/tmp", HELM_CACHE_HOME="/tmp/tern-helm-cache",
               HELM_CONFIG_HOME="/tmp/tern-helm-config", HELM_DATA_HOME="/tmp/tern-helm-data")
    r = subprocess.run([HELM, "template", "tern", os.path.join(ROOT, "charts", "tern"), "-n",
                        SYS_NS, "--show-only", "templates/approval-policy.yaml"],
                       capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        raise AssertionError("helm template: " + r.stderr)
    return r.stdout


def step_setup(r):
    t = r.t
    t.apply_crd()
    t.kubectl("create", "namespace", NS)
    t.kubectl("create", "namespace", SYS_NS)
    # RBAC: everyone in this test may read and patch sessions, so that a
    # refusal can only come from the admission policy
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "session-editor", "namespace": NS},
            "rules": [{"apiGroups": ["tern.dev"], "resources": ["agentsessions"],
                       "verbs": ["get", "list", "watch", "create", "patch", "update"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "session-editor", "namespace": NS},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "session-editor"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u}
                            for u in ("mallory", "bob")] +
                           [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                             "name": GROUP},
                            {"kind": "ServiceAccount", "name": "tern-operator",
                             "namespace": SYS_NS}]}
    t.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                    "items": [role, binding]}))
    t.kubectl("apply", "-f", "-", input=json.dumps(session("s1")))


def install_policy(r, manifest):
    t = r.t
    t.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
              "tern-approvals", "--ignore-not-found")
    out = t.kubectl("apply", "-f", "-", input=manifest)
    contains(out, "validatingadmissionpolicy.admissionregistration.k8s.io/tern-approvals",
             "apply")
    # the policy is compiled and its binding observed asynchronously: wait
    # until a non-member's decision is refused (the typeChecking status
    # says the expressions compiled against the CRD's schema)
    def in_force():
        code, _ = r.decide("mallory", [], "s1", by="mallory")
        if code != 403:
            r.clear("s1")  # not yet: undo the decision that went through
        return code == 403
    wait_for("the policy in force", in_force, 60, interval=0.2)
    vap = t.get_json("validatingadmissionpolicy", "tern-approvals")
    eq((vap.get("status") or {}).get("typeChecking", {}).get("expressionWarnings"), None,
       "type checking warnings of the policy's expressions")


def policy_cases(r, full=True):
    t = r.t
    # not in the approver group: Forbidden (the policy's reason), 403
    code, st = r.decide("mallory", [], "s1", by="mallory")
    eq(code, 403, "non-member's approve: %s" % json.dumps(st)[:500])
    eq(st.get("reason"), "Forbidden", "reason")
    contains(st.get("message", ""), "ValidatingAdmissionPolicy 'tern-approvals' with binding "
             "'tern-approvals' denied request: only members of group %s may approve or deny "
             "tool calls or memory proposals; mallory is not one" % GROUP, "message")
    p = r.kubectl_as("mallory", [], "annotate", "agentsession", "s1", "-n", NS,
                     "tern.dev/deny=ap-1", "tern.dev/decided-by=mallory")
    eq(p.returncode != 0, True, "kubectl --as mallory annotate deny")
    contains(p.stderr, "only members of group %s may approve or deny" % GROUP, "kubectl stderr")
    # a member, but decided-by is somebody else: Invalid, 422
    code, st = r.decide("bob", [GROUP], "s1", by="alice")
    eq(code, 422, "decided-by another user: %s" % json.dumps(st)[:500])
    eq(st.get("reason"), "Invalid", "reason")
    contains(st.get("message", ""), "tern.dev/decided-by must be set to your own username (bob)",
             "message")
    p = r.kubectl_as("bob", [GROUP], "annotate", "agentsession", "s1", "-n", NS,
                     "tern.dev/approve=ap-1")
    eq(p.returncode != 0, True, "a member's approve without decided-by")
    contains(p.stderr, "tern.dev/decided-by must be set to your own username (bob)", "stderr")
    # the member as themself: allowed
    p = r.kubectl_as("bob", [GROUP], "annotate", "agentsession", "s1", "-n", NS,
                     "tern.dev/approve=ap-1", "tern.dev/decided-by=bob")
    eq(p.returncode, 0, "a member approving as themself: " + p.stderr)
    r.clear("s1")
    # memory proposals' decisions: the same rules
    for key in ("tern.dev/memory-approve", "tern.dev/memory-reject"):
        code, st = r.decide("mallory", [], "s1", key=key, value="mp-000000000001", by="mallory")
        eq(code, 403, "non-member's %s: %s" % (key, json.dumps(st)[:300]))
        code, st = r.decide("bob", [GROUP], "s1", key=key, value="mp-000000000001", by="alice")
        eq(code, 422, "%s decided-by another user: %s" % (key, json.dumps(st)[:300]))
        code, st = r.decide("bob", [GROUP], "s1", key=key, value="mp-000000000001", by="bob")
        eq(code, 200, "a member's %s as themself: %s" % (key, json.dumps(st)[:300]))
        r.clear("s1")
    if not full:
        return
    # a decision on create is a decision too
    s = session("s2")
    s["metadata"]["annotations"] = {"tern.dev/approve": "ap-1", "tern.dev/decided-by": "mallory"}
    code, st, _ = r.api.request("POST", SESSIONS, s, impersonate=("mallory", []))
    eq(code, 403, "create with a decision by a non-member: %s" % json.dumps(st)[:300])
    # annotations that are not decisions are anybody's (RBAC permitting)
    p = r.kubectl_as("mallory", [], "annotate", "agentsession", "s1", "-n", NS, "note=hello")
    eq(p.returncode, 0, "a non-decision annotation: " + p.stderr)
    # an unchanged decision is not a new one: a member's approval stays when
    # somebody else edits another annotation
    p = r.kubectl_as("bob", [GROUP], "annotate", "agentsession", "s1", "-n", NS,
                     "tern.dev/approve=ap-2", "tern.dev/decided-by=bob")
    eq(p.returncode, 0, "bob approves ap-2: " + p.stderr)
    p = r.kubectl_as("mallory", [], "annotate", "--overwrite", "agentsession", "s1", "-n", NS,
                     "note=again")
    eq(p.returncode, 0, "mallory edits another annotation: " + p.stderr)
    r.clear("s1")
    # the operator's service account is exempt (it removes annotations and
    # writes nothing else the policy checks, but may)
    code, st = r.decide(OPERATOR_SA, ["system:serviceaccounts",
                                      "system:serviceaccounts:" + SYS_NS], "s1")
    eq(code, 200, "the operator's service account: %s" % json.dumps(st)[:300])
    r.clear("s1")
    # kubectl tern approve by a member with a kubeconfig of their own; it
    # answers only the pending approval the status shows (written here as the
    # operator would: no operator runs in this suite)
    t.kubectl("patch", "agentsession", "s1", "-n", NS, "--subresource=status", "--type=merge",
              "-p", json.dumps({"status": {"pendingApproval": {"id": "ap-7", "tool": "bash",
                                                               "summary": "make deploy"}}}))
    alice = t.kube.user_kubeconfig("alice", (GROUP,))
    env = dict(os.environ, HOME=t.home, KUBECONFIG=alice,
               PATH=ternlocal.BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
    p = subprocess.run([ternlocal.KUBECTL, "tern", "approve", "s1", "ap-7", "-n", NS],
                       capture_output=True, text=True, env=env, timeout=60)
    eq(p.returncode, 0, "kubectl tern approve as alice: " + p.stderr)
    contains(p.stdout, "approved ap-7", "kubectl tern output")
    anns = t.session("s1", NS)["metadata"]["annotations"]
    eq((anns.get("tern.dev/approve"), anns.get("tern.dev/decided-by")), ("ap-7", "alice"),
       "the decision and who made it")
    r.clear("s1")
    # and kubectl tern as alice naming somebody else is refused
    p = subprocess.run([ternlocal.KUBECTL, "tern", "deny", "s1", "ap-7", "-n", NS,
                        "--as-user", "carol"], capture_output=True, text=True, env=env,
                       timeout=60)
    eq(p.returncode != 0, True, "kubectl tern deny --as-user carol as alice")
    contains(p.stderr, "tern.dev/decided-by must be set to your own username (alice)", "stderr")


def step_chart_policy(r):
    install_policy(r, helm_policy())
    policy_cases(r)


def step_kustomize_policy(r):
    with open(os.path.join(ROOT, "deploy", "base", "approval-policy.yaml")) as f:
        install_policy(r, f.read())
    policy_cases(r, full=False)


def header(path):
    h = {}
    with open(path) as f:
        for line in f:
            if not line.startswith("# "):
                break
            k, _, v = line[2:].partition(":")
            h[k.strip()] = v.strip()
    return h


def step_invalid_sessions(r):
    bad = []
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "invalid-sessions", "*.yaml")))
    eq(len(files) > 20, True, "invalid sessions found")
    for path in files:
        h = header(path)
        want = (h.get("kube-field") or h["path"]).split()[0]
        with open(path) as f:
            doc = yaml.safe_load(f)
        code, st, _ = r.api.request("POST", SESSIONS + "?fieldValidation=Strict", doc)
        fields = [f for _, f in causes(st) if f and f != "<nil>"]
        name = os.path.basename(path)
        if code == 400 and st.get("reason") == "BadRequest":
            ok = 'unknown field "%s"' % want in st.get("message", "")
        else:
            ok = code == 422 and st.get("reason") == "Invalid" and want in fields
        if not ok:
            bad.append("%s: want %s, got %d %s %s" % (name, want, code, st.get("reason")
                                                       if isinstance(st, dict) else st,
                                                       causes(st)))
        print("    %-32s %d %s" % (name, code, fields or st.get("message", "")[:100]), flush=True)
    eq(bad, [], "manifests not refused at their field")


def step_examples_accepted(r):
    t = r.t
    t.kubectl("create", "namespace", "examples")
    n = 0
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml"))):
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for d in docs:
            d.setdefault("metadata", {})["namespace"] = "examples"
        out = t.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": docs}))
        contains(out, "serverside-applied", os.path.basename(path))
        n += sum(1 for d in docs if d["kind"] == "AgentSession")
    eq(n >= 4, True, "AgentSessions applied from examples/")


def put_spec(r, name, mutate):
    """GET, mutate the spec, PUT: the update the CRD's transition rules
    judge. Returns (code, Status or object)."""
    code, obj, _ = r.api.request("GET", SESSIONS + "/" + name)
    mutate(obj["spec"])
    return r.api.request("PUT", SESSIONS + "/" + name, obj)[:2]


def refused(res, field, message, what):
    code, st = res
    eq(code, 422, "%s: %s" % (what, json.dumps(st)[:400]))
    contains([f for _, f in causes(st)], field, what + " field")
    contains(st.get("message", ""), message, what + " message")


def step_transition_rules(r):
    t = r.t
    t.kubectl("apply", "-f", "-", input=json.dumps(session("chat", messages=["one"])))
    refused(put_spec(r, "chat", lambda s: s.update(messages=["uno"])), "spec.messages",
            "messages is append-only; existing entries cannot be changed or removed",
            "changing an entry")
    refused(put_spec(r, "chat", lambda s: s.update(messages=[])), "spec.messages",
            "messages is append-only", "removing an entry")
    refused(put_spec(r, "chat", lambda s: s.pop("messages")), "spec",
            "messages is append-only and cannot be removed", "removing the list")
    code, obj = put_spec(r, "chat", lambda s: s.update(messages=["one", "two"]))
    eq(code, 200, "appending: %s" % json.dumps(obj)[:300])
    eq(obj["spec"]["messages"], ["one", "two"], "messages after append")
    refused(put_spec(r, "chat", lambda s: s.update(forkFrom={"session": "p", "uid": "u1", "atSeq": 3})),
            "spec", "forkFrom can only be set when the session is created", "adding forkFrom")
    t.kubectl("apply", "-f", "-", input=json.dumps(session(
        "child", forkFrom={"session": "chat", "uid": "u1", "atSeq": 3})))
    refused(put_spec(r, "child", lambda s: s["forkFrom"].update(uid="u2")), "spec.forkFrom",
            "forkFrom is immutable", "changing forkFrom")
    refused(put_spec(r, "child", lambda s: s.pop("forkFrom")), "spec",
            "forkFrom can only be set when the session is created", "removing forkFrom")
    code, obj = put_spec(r, "child", lambda s: s.update(objective="y"))
    eq(code, 200, "other changes pass: %s" % json.dumps(obj)[:300])
    # no operator has seen them (it starts in the next step)
    t.kubectl("delete", "agentsession", "chat", "child", "-n", NS)


def with_managed_fields(r, ns, name):
    """The session as the API server has it (kubectl get hides managedFields)."""
    code, obj, _ = r.api.request("GET", "/apis/tern.dev/v1alpha1/namespaces/%s/agentsessions/%s"
                                 % (ns, name))
    eq(code, 200, "GET %s/%s" % (ns, name))
    return obj


def managers(obj):
    return sorted((m["manager"], m["operation"], m.get("subresource", ""))
                  for m in obj["metadata"].get("managedFields", []))


def step_server_side_apply(r):
    t = r.t
    t.kubectl("create", "namespace", "ssa")
    t.apply_runner_rbac("ssa")
    t.create_secret("demo-model", "api-key", "not-a-real-key", ns="ssa")
    # the demo publishes through a token-guarded remote (its Secret must
    # exist before a turn Job is created)
    t.create_secret("demo-git", "token", "not-a-real-git-token", ns="ssa")
    remote = t.start_gitremote("not-a-real-git-token", repo="demo.git")
    with open(os.path.join(ROOT, "examples", "demo.yaml")) as f:
        m = f.read().replace("http://127.0.0.1:0/v1", r.base).replace(
            "http://127.0.0.1:0/demo.git", remote)
    out = t.kubectl("apply", "--server-side", "-n", "ssa", "-f", "-", input=m)
    contains(out, "agentsession.tern.dev/demo serverside-applied", "apply --server-side")
    s = with_managed_fields(r, "ssa", "demo")
    eq(managers(s), [("kubectl", "Apply", "")], "managers before the operator")
    t.start_operator()
    s = t.wait_session("demo", "WaitingForApproval", lambda s: phase(s) in (
        "WaitingForApproval", "Failed"), 90, ns="ssa")
    eq(phase(s), "WaitingForApproval", "phase")
    s = with_managed_fields(r, "ssa", "demo")
    ms = managers(s)
    contains(ms, ("kubectl", "Apply", ""), "the user's apply")
    contains(ms, ("tern-operator", "Update", "status"), "the operator's status writes")
    bad = [m for m in ms if m[0] not in ("kubectl", "tern-operator")]
    eq(bad, [], "no other managers")
    own = [m for m in s["metadata"]["managedFields"] if m["manager"] == "tern-operator" and
           m.get("subresource") == "status"][0]
    eq(list(own["fieldsV1"]), ["f:status"], "the operator's status entry owns status only")
    applied = [m for m in s["metadata"]["managedFields"] if m["manager"] == "kubectl"][0]
    contains(applied["fieldsV1"]["f:spec"], "f:objective", "kubectl owns the spec it applied")
    # the operator's other writes (finalizer) are its own too, never kubectl's
    for mf in s["metadata"]["managedFields"]:
        if "f:finalizers" in json.dumps(mf["fieldsV1"]):
            eq(mf["manager"], "tern-operator", "who owns the finalizer")
    # a second applier changing a field kubectl owns conflicts
    env = dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig)
    p = subprocess.run([ternlocal.KUBECTL, "apply", "--server-side", "--field-manager", "ci",
                        "-n", "ssa", "-f", "-"], input=m.replace("maxModelTurns: 20",
                                                                  "maxModelTurns: 21"),
                       capture_output=True, text=True, env=env, timeout=60)
    eq(p.returncode != 0, True, "a conflicting apply by another manager")
    contains(p.stderr, 'conflict with "kubectl"', "conflict message")
    contains(p.stderr, ".spec.limits.maxModelTurns", "conflicting field")
    # re-applying the same manifest as kubectl is a no-op
    out = t.kubectl("apply", "--server-side", "-n", "ssa", "-f", "-", input=m)
    contains(out, "serverside-applied", "re-apply")


def main():
    suite = Suite()
    with ternlocal.Local() as t:
        if t.cluster != "kube":
            print("test_admission runs on the real control plane only (TERN_CLUSTER=kube)")
            suite.finish()
        t.start_etcd()
        t.start_cluster()
        r = Run(t)
        r.base = t.start_fakellm(os.path.join(ROOT, "examples", "demo-script.json"))
        done = set()
        for name, fn, needs in [
            ("setup", step_setup, None),
            ("approval_policy_from_the_chart", step_chart_policy, "setup"),
            ("approval_policy_from_kustomize", step_kustomize_policy, "setup"),
            ("invalid_sessions_refused_at_their_field", step_invalid_sessions, "setup"),
            ("examples_accepted_server_side", step_examples_accepted, "setup"),
            ("cel_transition_rules", step_transition_rules, "setup"),
            ("server_side_apply_field_managers", step_server_side_apply, "setup"),
        ]:
            def run(fn=fn, needs=needs):
                if needs and needs not in done:
                    raise AssertionError("needs step %s, which failed" % needs)
                fn(r)
            before = suite.failed
            suite.run(name, run)
            if suite.failed == before:
                done.add(name)
        t.stop("tern-operator")
        t.stop("tern-fakellm")
        t.stop("tern-node")
    suite.finish()


if __name__ == "__main__":
    main()
