"""End-to-end: AgentSessionTemplate and spec.templateRef (issue 22). A session
naming a template runs with the template's model, limits and permissions
(the template's baseURL is the only way it can reach the scripted model);
the template's spec is recorded in status.template once, so a later edit of
the template does not change the session; a missing template leaves the
session Pending with a Warning until it exists; a merged spec that breaks a
rule fails the session exactly like a hand-written one; templateRef is
immutable (kube-apiserver refuses the change with the CRD's CEL rule;
tern-dev evaluates no CEL, and the operator fails the session instead).

Run: /usr/bin/python3 tests/integration/test_templates.py [name-substring]
"""
# runs on: terndev kube
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
SCRIPT = os.path.join(ROOT, "tests", "data", "e2e-fast-script.json")

TEMPLATE = """apiVersion: tern.dev/v1alpha1
kind: AgentSessionTemplate
metadata: {name: %(name)s}
spec:
  model: {name: fake-fast, baseURL: %(base)s, apiKeySecretRef: {name: model, key: api-key}}
  limits: {maxToolCalls: %(tools)d, timeoutSeconds: 300}
  permissions: {tools: [%(perm)s]}
  sandbox: {idleSuspendSeconds: 0}
"""

SESSION = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: %(name)s}
spec:
  objective: run true and stop
  templateRef: {name: %(template)s}
%(extra)s"""


def kubectl_rc(t, *args, input=None):
    """kubectl without raising: the CompletedProcess."""
    env = dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig)
    return subprocess.run([ternlocal.KUBECTL, *args], input=input, capture_output=True,
                          text=True, env=env, timeout=120)


def template(t, name, tools=9, perm="exec_command, read_file, write_file, list_files"):
    t.kubectl("apply", "-f", "-", input=TEMPLATE % {"name": name, "base": t.base,
                                                    "tools": tools, "perm": perm})


def session(t, name, tmpl, extra=""):
    t.kubectl("apply", "-f", "-", input=SESSION % {"name": name, "template": tmpl,
                                                   "extra": extra})


def done(t, name, timeout=240):
    return t.wait_session(name, "Completed or Failed",
                          lambda s: condition(s, "Completed") == "True" or phase(s) == "Failed",
                          timeout)


def session_events(t, name):
    evs = t.get_json("events", "--field-selector", "involvedObject.name=" + name)
    return [(e.get("type"), e.get("reason"), e.get("message") or e.get("note") or "")
            for e in evs.get("items", [])]


def scenario_session_runs_with_the_template(t):
    template(t, "tpl-run", tools=9)
    session(t, "from-tpl", "tpl-run", "  limits: {maxModelTurns: 7}\n")
    s = done(t, "from-tpl")
    eq(phase(s), "Succeeded", "phase (message %r)" % s["status"].get("message"))
    rec = s["status"]["template"]
    eq(rec["name"], "tpl-run", "status.template.name")
    eq(rec["spec"]["model"]["name"], "fake-fast", "recorded model")
    eq(rec["spec"]["limits"]["maxToolCalls"], 9, "recorded limit")
    # the session's own spec still holds only what it wrote plus the CRD's
    # defaults: the merge is not written back into spec (GitOps sees no drift)
    eq(s["spec"]["model"]["name"], "gpt-5.6-mini", "spec.model.name stays the default")
    eq(s["spec"]["limits"]["maxModelTurns"], 7, "the session's own field")
    reasons = [r for _, r, _ in session_events(t, "from-tpl")]
    contains(reasons, "TemplateResolved", "Normal Event")


def scenario_template_edit_does_not_change_a_session(t):
    template(t, "tpl-edit", tools=9)
    session(t, "frozen", "tpl-edit")
    s = t.wait_session("frozen", "template recorded",
                       lambda s: (s.get("status") or {}).get("template"))
    rv = s["status"]["template"]["resourceVersion"]
    template(t, "tpl-edit", tools=1)
    s = done(t, "frozen")
    eq(phase(s), "Succeeded", "phase (message %r)" % s["status"].get("message"))
    eq(s["status"]["template"]["resourceVersion"], rv, "recorded resourceVersion")
    eq(s["status"]["template"]["spec"]["limits"]["maxToolCalls"], 9, "recorded spec unchanged")
    # a new session takes the edited template
    session(t, "after-edit", "tpl-edit")
    s = t.wait_session("after-edit", "template recorded",
                       lambda s: (s.get("status") or {}).get("template"))
    eq(s["status"]["template"]["spec"]["limits"]["maxToolCalls"], 1, "new session, new spec")


def scenario_missing_template_waits(t):
    session(t, "early", "tpl-late")
    s = t.wait_session("early", "TemplateNotFound",
                       lambda s: (s.get("status") or {}).get("reason") == "TemplateNotFound")
    eq(phase(s), "Pending", "phase while the template is missing")
    contains(s["status"]["message"], "tpl-late", "message")
    wait_for("Warning TemplateNotFound",
             lambda: any(ty == "Warning" and r == "TemplateNotFound"
                         for ty, r, _ in session_events(t, "early")), 60)
    template(t, "tpl-late")
    s = done(t, "early")
    eq(phase(s), "Succeeded", "phase once the template exists (message %r)"
       % s["status"].get("message"))


def scenario_merged_spec_validated(t):
    # each alone is valid; merged, requiresApproval names a tool the
    # template does not allow (the CRD's rule, checked on the merge)
    template(t, "tpl-narrow", perm="read_file")
    session(t, "bad-merge", "tpl-narrow",
            "  permissions:\n    requiresApproval: [\"exec_command:git push*\"]\n")
    s = t.wait_session("bad-merge", "Failed", lambda s: phase(s) == "Failed")
    eq(s["status"]["reason"], "InvalidSpec", "reason")
    contains(s["status"]["message"], "requiresApproval", "message names the field")
    contains(s["status"]["message"], "agentsessiontemplate tpl-narrow", "message names the template")


def scenario_template_ref_immutable(t):
    template(t, "tpl-a")
    template(t, "tpl-b")
    session(t, "pinned", "tpl-a")
    r = kubectl_rc(t, "patch", "agentsession", "pinned", "--type=merge", "-p",
                   json.dumps({"spec": {"templateRef": {"name": "tpl-b"}}}))
    if t.cluster == "kube":
        # kube-apiserver evaluates the CRD's CEL rules
        eq(r.returncode != 0, True, "changing templateRef is refused")
        contains(r.stderr, "templateRef is immutable", "the API server's message")
        r = kubectl_rc(t, "patch", "agentsession", "pinned", "--type=json", "-p",
                       json.dumps([{"op": "remove", "path": "/spec/templateRef"}]))
        eq(r.returncode != 0, True, "removing templateRef is refused")
        eq(t.session("pinned")["spec"]["templateRef"]["name"], "tpl-a", "templateRef")
    else:
        # tern-dev does not evaluate CEL (apischema.h); the operator is the
        # second line: the recorded template no longer matches
        eq(r.returncode, 0, "tern-dev takes the patch")
        s = t.wait_session("pinned", "Failed", lambda s: phase(s) == "Failed")
        contains(s["status"]["message"], "cannot change once the session started", "message")
        eq(s["status"]["template"]["name"], "tpl-a", "the record keeps the first template")


def scenario_template_rejects_session_fields(t):
    bad = """apiVersion: tern.dev/v1alpha1
kind: AgentSessionTemplate
metadata: {name: tpl-bad}
spec:
  limits: {maxToolCalls: 0}
"""
    r = kubectl_rc(t, "apply", "-f", "-", input=bad)
    eq(r.returncode != 0, True, "a template out of the CRD's bounds is refused")
    contains(r.stderr, "maxToolCalls", "error names the field")


def scenario_template_with_trusted_tools(t):
    """A template may hold trusted tools and the approval rules that name
    them (the CRD's CEL rules, on kube-apiserver, as for a session); a session
    from it gets both."""
    tpl = """apiVersion: tern.dev/v1alpha1
kind: AgentSessionTemplate
metadata: {name: tpl-publish}
spec:
  permissions:
    tools: [exec_command, read_file]
    requiresApproval: ["publish_branch:*", "exec_command:git *"]
  tools:
    publish:
      remotes:
      - {name: origin, url: "https://git.example/app.git", tokenSecretRef: {name: push, key: token}}
  model: {name: fake-fast, baseURL: %s, apiKeySecretRef: {name: model, key: api-key}}
""" % t.base
    r = kubectl_rc(t, "apply", "-f", "-", input=tpl)
    eq(r.returncode, 0, "template accepted (%s)" % r.stderr.strip())
    session(t, "from-publish", "tpl-publish", "  suspend: true\n")
    s = t.wait_session("from-publish", "template recorded",
                       lambda s: (s.get("status") or {}).get("template"))
    rec = s["status"]["template"]["spec"]
    eq(rec["tools"]["publish"]["remotes"][0]["name"], "origin", "recorded tools")
    eq(rec["permissions"]["requiresApproval"], ["publish_branch:*", "exec_command:git *"],
       "recorded rules")


def scenario_gitops_repo_applies(t):
    """examples/gitops/repo, as Argo CD or Flux would apply it: the API server
    takes every object; the operator makes the triggers Ready and records
    the one-off session's template."""
    t.kubectl("create", "namespace", "gitops")
    out = t.kubectl("apply", "-n", "gitops", "-k", os.path.join(ROOT, "examples", "gitops", "repo"))
    for o in ("agentsessiontemplate.tern.dev/reviewer", "agenttrigger.tern.dev/pr-review",
              "agenttrigger.tern.dev/nightly", "agentsession.tern.dev/audit-deps"):
        contains(out, o + " created", "apply -k")
    for name in ("pr-review", "nightly"):
        wait_for("%s Ready" % name, lambda: any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (t.get_json("agenttrigger", name, "-n", "gitops").get("status") or {})
            .get("conditions", [])), 60, interval=0.3)
    s = t.wait_session("audit-deps", "template recorded",
                       lambda s: (s.get("status") or {}).get("template"), ns="gitops")
    eq(s["status"]["template"]["name"], "reviewer", "template")
    # the Argo CD and Flux manifests point at this directory
    import yaml
    for f in ("argocd-application.yaml", "flux-kustomization.yaml"):
        with open(os.path.join(ROOT, "examples", "gitops", f)) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        paths = [d["spec"].get("source", {}).get("path") or d["spec"].get("path")
                 for d in docs if d["kind"] in ("Application", "Kustomization")]
        eq([p.lstrip("./") for p in paths], ["examples/gitops/repo"], f + " path")


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.base = t.start_fakellm(SCRIPT)
        t.apply_crd()
        t.create_secret("model", "api-key", "test")
        t.apply_runner_rbac()
        t.start_operator()
        for name, fn in [
            ("session_runs_with_the_template", scenario_session_runs_with_the_template),
            ("template_edit_does_not_change_a_session",
             scenario_template_edit_does_not_change_a_session),
            ("missing_template_waits", scenario_missing_template_waits),
            ("merged_spec_validated", scenario_merged_spec_validated),
            ("template_ref_immutable", scenario_template_ref_immutable),
            ("template_rejects_session_fields", scenario_template_rejects_session_fields),
            ("template_with_trusted_tools", scenario_template_with_trusted_tools),
            ("gitops_repo_applies", scenario_gitops_repo_applies),
        ]:
            if only and not any(o in name for o in only):
                continue
            suite.run(name, fn, t)
        if suite.failed:
            for n in ("tern-operator", "tern-dev"):
                print("---- %s log (tail)" % n)
                print(t.logs_of(n)[-4000:])
    suite.finish()


if __name__ == "__main__":
    main()
