"""End-to-end: tern-operator on tern-dev with etcd, the scripted model server,
tern-runner Jobs and tern-sandboxd pods (issue 9). Every scenario checks the
journal in etcd and tern-sandboxd's execution log, not only the status.

Run: /usr/bin/python3 tests/integration/test_e2e_operator.py [name-substring]
"""
# runs on: terndev kube
import base64
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, condition, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT
SCRIPT = os.path.join(ROOT, "tests", "data", "e2e-script.json")

SESSION = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: %(name)s}
spec:
  objective: review and push
  permissions:
    tools: [exec_command, read_file, write_file, list_files]
    requiresApproval: ["exec_command:git push*"]
  limits: {timeoutSeconds: 300, maxModelTurns: 20, maxToolCalls: 40}
  model: {name: fake-e2e, baseURL: %(base)s, apiKeySecretRef: {name: model, key: api-key}}
  sandbox: {idleSuspendSeconds: %(idle)d}
  approval: {timeoutSeconds: %(approval_timeout)d, onTimeout: %(on_timeout)s}
"""


def manifest(t, name, idle=600, approval_timeout=3600, on_timeout="Deny"):
    return SESSION % {"name": name, "base": t.base, "idle": idle,
                      "approval_timeout": approval_timeout, "on_timeout": on_timeout}


def events(t, name):
    uid = t.session(name)["metadata"]["uid"]
    return ternlocal.journal_events(t.journal, uid)


def artifacts_settled(s):
    """Whether the operator has stopped persisting the last answer's files
    (no ArtifactsPersisted condition, or one that is not Pending)."""
    c = [c for c in s.get("status", {}).get("conditions", []) if c["type"] == "ArtifactsPersisted"]
    return not c or c[0].get("reason") != "Pending"


def types(evs):
    return [e["type"] for e in evs]


def token(t, name):
    sec = t.get_json("secret", name + "-sandbox-token")
    return base64.b64decode(sec["data"]["token"]).decode()


def executions(t, name):
    s = t.session(name)
    addr = s["status"]["sandbox"].get("address")
    return ternlocal.sandbox_executions(addr, token(t, name)) if addr else None


def waiting(t, name, timeout=180):
    return t.wait_session(name, "WaitingForApproval",
                          lambda s: phase(s) in ("WaitingForApproval", "Failed"), timeout)


def completed(t, name, timeout=180):
    return t.wait_session(name, "Completed",
                          lambda s: condition(s, "Completed") == "True" or phase(s) == "Failed",
                          timeout)


def assert_exactly_once(evs):
    """Each model response and each tool call/result appears once per call id."""
    seen = {}
    for e in evs:
        if e["type"] in ("tool_call", "tool_result"):
            k = (e["type"], e.get("data", {}).get("id") or e.get("key"))
            seen[k] = seen.get(k, 0) + 1
    dups = {k: n for k, n in seen.items() if n > 1}
    if dups:
        raise AssertionError("journal has repeated steps: %r" % dups)
    seqs = [e["seq"] for e in evs]
    eq(seqs, list(range(1, len(seqs) + 1)), "journal seqs without gaps")


def scenario_approve(t):
    t.kubectl("apply", "-f", "-", input=manifest(t, "approve"))
    s = waiting(t, "approve")
    eq(phase(s), "WaitingForApproval", "phase")
    pid = s["status"]["pendingApproval"]["id"]
    contains(s["status"]["pendingApproval"].get("summary", ""), "git push", "approval summary")
    t.kubectl("annotate", "agentsession", "approve", "tern.dev/approve=" + pid,
              "tern.dev/decided-by=alice")
    s = completed(t, "approve")
    eq(phase(s), "Succeeded", "phase")
    contains(s["status"]["result"]["summary"], "pushed", "result")
    anns = s["metadata"].get("annotations", {})
    eq("tern.dev/approve" in anns, False, "approve annotation removed")
    evs = events(t, "approve")
    assert_exactly_once(evs)
    dec = [e for e in evs if e["type"] == "approval_decided"]
    eq(len(dec), 1, "one decision")
    eq(dec[0]["data"].get("decidedBy"), "alice", "approver recorded")
    eq(dec[0]["data"].get("decision"), "approved", "decision")
    # (the operator may have recorded the answer's files since: artifacts_persisted)
    eq([ty for ty in types(evs) if ty != "artifacts_persisted"][-1], "turn_finished",
       "last event of the turn")
    eq(types(evs).count("artifacts_persisted") <= 1, True, "files recorded at most once")
    # the pushed command ran exactly once in the sandbox (if it is up)
    ex = executions(t, "approve")
    if ex is not None:
        pushes = [x for x in ex if x.get("runs", 1) != 1]
        eq(pushes, [], "every execution ran once")


def scenario_deny(t):
    t.kubectl("apply", "-f", "-", input=manifest(t, "deny"))
    s = waiting(t, "deny")
    pid = s["status"]["pendingApproval"]["id"]
    t.kubectl("annotate", "agentsession", "deny", "tern.dev/deny=" + pid)
    s = completed(t, "deny")
    contains(s["status"]["result"]["summary"], "not approved", "result")
    evs = events(t, "deny")
    assert_exactly_once(evs)
    eq([e["data"]["decision"] for e in evs if e["type"] == "approval_decided"], ["denied"],
       "decision")


def scenario_wrong_approval_id(t):
    t.kubectl("apply", "-f", "-", input=manifest(t, "wrongid"))
    waiting(t, "wrongid")
    t.kubectl("annotate", "agentsession", "wrongid", "tern.dev/approve=ap-nope")
    wait_for("annotation removed", lambda: "tern.dev/approve" not in
             t.session("wrongid")["metadata"].get("annotations", {}), 60)
    s = t.session("wrongid")
    eq(phase(s), "WaitingForApproval", "still waiting")
    eq([e for e in events(t, "wrongid") if e["type"] == "approval_decided"], [], "no decision")
    # the operator writes events.k8s.io/v1 Events (the recorder aggregates
    # repeats); read them through that API
    evs = wait_for("the Warning event", lambda: (lambda o: o if "ApprovalRejected" in o else None)(
        t.kubectl("get", "events.v1.events.k8s.io", "-o", "json")), 30)
    contains(evs, "Warning", "event type")
    # tern-dev serves them through core/v1 too, as kube-apiserver does, so
    # kubectl describe lists them under the session
    out = t.kubectl("describe", "agentsession", "wrongid")
    contains(out[out.index("Events:"):], "ApprovalRejected", "describe's Events")


def scenario_approval_timeout(t):
    t.kubectl("apply", "-f", "-", input=manifest(t, "timeout", approval_timeout=3,
                                                 on_timeout="Deny"))
    s = completed(t, "timeout", timeout=240)
    evs = events(t, "timeout")
    dec = [e for e in evs if e["type"] == "approval_decided"]
    eq(len(dec), 1, "one decision")
    eq(dec[0]["data"]["decidedBy"], "tern.dev/approval-timeout", "decided by the timer")
    contains(s["status"]["result"]["summary"], "not approved", "result")


def scenario_reapply_starts_no_new_work(t):
    m = manifest(t, "gitops")
    t.kubectl("apply", "-f", "-", input=m)
    s = waiting(t, "gitops")
    pid = s["status"]["pendingApproval"]["id"]
    t.kubectl("annotate", "agentsession", "gitops", "tern.dev/approve=" + pid)
    completed(t, "gitops")
    # the answer's files are recorded after Completed (artifacts_persisted):
    # what the journal holds is counted once that is done
    wait_for("the answer's files recorded", lambda: artifacts_settled(t.session("gitops")), 60)
    before = events(t, "gitops")
    jobs_before = t.kubectl("get", "jobs", "-o", "name")
    t.kubectl("apply", "-f", "-", input=m)  # the GitOps sync loop, again
    # a barrier: once the operator has removed this (refused) annotation it
    # has reconciled the re-applied object
    t.kubectl("annotate", "agentsession", "gitops", "tern.dev/approve=barrier")
    wait_for("barrier handled", lambda: "tern.dev/approve" not in
             t.session("gitops")["metadata"].get("annotations", {}), 60)
    eq(types(events(t, "gitops")), types(before), "no new journal events")
    eq(t.kubectl("get", "jobs", "-o", "name"), jobs_before, "no new Job")
    eq(phase(t.session("gitops")), "Succeeded", "still done")


def scenario_invalid_manifest(t):
    bad = manifest(t, "invalid").replace("maxToolCalls: 40", "maxToolCalls: 0")
    out = t.kubectl("apply", "-f", "-", input=bad, check=False)
    # the CRD's schema refuses it before the operator sees it
    r = t.kubectl("get", "agentsession", "invalid", check=False)
    eq(r.strip() == "" or "NotFound" in r, True, "not stored: %s" % out)


def scenario_delete_cleans_up(t):
    t.kubectl("apply", "-f", "-", input=manifest(t, "gone"))
    s = waiting(t, "gone")
    uid = s["metadata"]["uid"]
    eq(bool(ternlocal.journal_keys(t.journal, uid)), True, "journal exists")
    t.kubectl("delete", "agentsession", "gone", "--timeout=120s")
    wait_for("journal deleted", lambda: ternlocal.journal_keys(t.journal, uid) == [], 60)
    wait_for("children deleted", lambda: t.kubectl(
        "get", "pods,jobs,pvc,secrets,configmaps", "-l", "tern.dev/session-uid=" + uid,
        "-o", "name").strip() == "", 120)


def scenario_operator_restart(t):
    t.kubectl("apply", "-f", "-", input=manifest(t, "restart"))
    # kill the operator as soon as the first turn's Job exists
    wait_for("turn Job", lambda: t.kubectl("get", "job", "restart-t1", check=False).strip(), 120)
    t.stop("tern-operator", signal.SIGKILL)
    t.start_operator()
    s = waiting(t, "restart")
    jobs = t.kubectl("get", "jobs", "-o", "name").split()
    eq(len([j for j in jobs if j.startswith("job.batch/restart-t")]), 1, "one Job per turn")
    assert_exactly_once(events(t, "restart"))


def pod_children(t, name):
    """The token Secret, task ConfigMap and NetworkPolicy of a session that
    exist (a parked session has none of them)."""
    return t.kubectl("get", "secret/%s-sandbox-token" % name, "configmap/%s-task" % name,
                     "networkpolicy/%s-sandbox" % name, "--ignore-not-found",
                     "-o", "name").split()


def scenario_suspend_resume(t):
    t.kubectl("apply", "-f", "-", input=manifest(t, "susp"))
    waiting(t, "susp")
    eq(len(pod_children(t, "susp")), 3, "with its pod: token Secret, task ConfigMap, policy")
    tok = token(t, "susp")
    wait_for("the sandbox ready", lambda: t.session("susp")["status"]["sandbox"].get("ready"),
             120)
    before = {x["key"] for x in executions(t, "susp")}
    eq(len(before) > 0, True, "commands ran before the suspension")
    t.kubectl("patch", "agentsession", "susp", "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for("sandbox removed", lambda: t.kubectl("get", "pod", "susp-sandbox", check=False)
             .strip() == "", 120)
    # parked: only the workspace claim is left
    wait_for("token Secret, task ConfigMap and NetworkPolicy removed",
             lambda: pod_children(t, "susp") == [], 60, interval=0.3)
    eq(bool(t.kubectl("get", "pvc", "susp-workspace", "-o", "name")), True, "workspace kept")
    t.kubectl("patch", "agentsession", "susp", "--type=merge", "-p", '{"spec":{"suspend":false}}')
    s = t.session("susp")
    pid = s["status"]["pendingApproval"]["id"]
    t.kubectl("annotate", "agentsession", "susp", "tern.dev/approve=" + pid)
    s = completed(t, "susp")
    eq(phase(s), "Succeeded", "phase")
    # woken: the three came back with the pod, the token is a new one and
    # works (the turn's runner used it; so does this read of sandboxd's
    # log, which lives in the workspace and kept what ran before)
    eq(len(pod_children(t, "susp")), 3, "the children back with the pod")
    eq(token(t, "susp") != tok, True, "a new token")
    wait_for("the sandbox ready", lambda: t.session("susp")["status"]["sandbox"].get("ready"),
             120)
    after = {x["key"] for x in executions(t, "susp")}
    eq(before <= after, True, "the workspace intact: %r not in %r" % (before, after))


def scenario_fork(t):
    t.kubectl("apply", "-f", "-", input=manifest(t, "parent"))
    s = waiting(t, "parent")
    pid = s["status"]["pendingApproval"]["id"]
    t.kubectl("annotate", "agentsession", "parent", "tern.dev/approve=" + pid)
    completed(t, "parent")
    t.kubectl("annotate", "agentsession", "parent", "tern.dev/fork=child")
    child = t.wait_session("child", "forked", lambda s: any(
        e["type"] == "forked_from" for e in events(t, "child")), 240)
    pev, cev = events(t, "parent"), events(t, "child")
    at = child["spec"]["forkFrom"]["atSeq"]
    eq([e["type"] for e in cev[:at]], [e["type"] for e in pev[:at]], "child journal copy")
    eq("fork_created" in types(pev), True, "parent records the fork")
    # the child diverges with a message of its own
    t.kubectl("patch", "agentsession", "child", "--type=merge", "-p",
              '{"spec":{"messages":["try the other approach"]}}')
    s = t.wait_session("child", "its own turn done", lambda s: (s["status"].get("turn") or {})
                       .get("number", 0) > child["status"]["turn"]["number"] and
                       condition(s, "Completed") == "True", 240)
    eq(phase(s), "Succeeded", "child phase")
    # they diverged: the child's journal has its own message and its own
    # write, the parent's has neither
    cev, pev = events(t, "child"), events(t, "parent")
    alt = [e for e in cev if e["type"] == "tool_call" and "output/alt.md" in
           e["data"].get("arguments", "")]
    eq(len(alt), 1, "the child wrote output/alt.md once")
    eq([e for e in pev if e["type"] == "tool_call" and "output/alt.md" in
        e["data"].get("arguments", "")], [], "the parent did not")
    eq(any(e["type"] == "user_message" and "other approach" in e["data"].get("text", "")
           for e in pev), False, "the child's message stayed in the child")
    eq("forks" in t.session("parent")["status"], True, "parent lists its fork")
    eq(phase(t.session("parent")), "Succeeded", "parent unaffected")


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
        for entry in [
            # sessions of their own, each waiting on its own phases: together
            [("approve", scenario_approve),
             ("deny", scenario_deny),
             ("wrong_approval_id", scenario_wrong_approval_id),
             ("approval_timeout", scenario_approval_timeout),
             ("invalid_manifest", scenario_invalid_manifest),
             ("delete_cleans_up", scenario_delete_cleans_up)],
            # alone: it compares every Job of the namespace before and after
            ("reapply_starts_no_new_work", scenario_reapply_starts_no_new_work),
            # alone: it kills the operator
            ("operator_restart", scenario_operator_restart),
            [("suspend_resume", scenario_suspend_resume),
             ("fork", scenario_fork)],
        ]:
            group = entry if isinstance(entry, list) else [entry]
            group = [(n, f) for n, f in group if not only or any(o in n for o in only)]
            if len(group) > 1:
                suite.run_together(group, t)
            elif group:
                suite.run(group[0][0], group[0][1], t)
        if suite.failed:
            for n in ("tern-operator", "tern-dev"):
                print("---- %s log (tail)" % n)
                print(t.logs_of(n)[-4000:])
    suite.finish()


if __name__ == "__main__":
    main()
