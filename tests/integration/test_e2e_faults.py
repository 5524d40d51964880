"""End-to-end faults (issue 9): a runner pod killed in the middle of a turn,
the sandbox pod deleted mid-session, and two operator replicas with leader
election. Each checks the journal in etcd and tern-sandboxd's own record of
what ran, not only the status."""
# runs on: terndev kube
import base64
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, condition, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT

SESSION = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: %(name)s}
spec:
  objective: do the thing
  limits: {timeoutSeconds: 300}
  model: {name: fake, baseURL: %(base)s, apiKeySecretRef: {name: model, key: api-key}}
"""


def events(t, name):
    return ternlocal.journal_events(t.journal, t.session(name)["metadata"]["uid"])


def token(t, name):
    return base64.b64decode(t.get_json("secret", name + "-sandbox-token")["data"]["token"]).decode()


def sandbox_get(t, name, path):
    import urllib.request
    addr = t.session(name)["status"]["sandbox"]["address"]
    req = urllib.request.Request("http://%s/v1/files/%s" % (addr, path),
                                 headers={"Authorization": "Bearer " + token(t, name)})
    return urllib.request.urlopen(req, timeout=10).read().decode()


def completed(t, name, timeout=240):
    return t.wait_session(name, "Completed",
                          lambda s: condition(s, "Completed") == "True" or phase(s) == "Failed",
                          timeout)


def runner_pids(name):
    """Host pids of `tern-runner turn` processes of session `name`."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv = f.read().split(b"\0")
            if not argv or not argv[0].endswith(b"tern-runner") or b"turn" not in argv:
                continue
            with open("/proc/%s/environ" % p, "rb") as f:
                env = f.read().split(b"\0")
            if ("TERN_SESSION=%s" % name).encode() in env:
                pids.append(int(p))
        except OSError:
            continue
    return pids


def scenario_runner_killed_mid_turn(t):
    t.kubectl("apply", "-f", "-", input=SESSION % {"name": "crash", "base": t.slow_base})
    # the first model call of step 1 is slow: kill the runner while it waits
    wait_for("step 0's tool result", lambda: any(
        e["type"] == "tool_result" for e in events(t, "crash")), 120)
    pids = wait_for("the runner process", lambda: runner_pids("crash"), 30)
    for p in pids:
        os.kill(p, signal.SIGKILL)
    s = completed(t, "crash", timeout=300)
    eq(phase(s), "Succeeded", "phase")
    evs = events(t, "crash")
    calls = [e for e in evs if e["type"] == "tool_call"]
    eq(len(calls), 2, "each tool call journaled once")
    eq(len(set(e["data"]["callId"] for e in calls)), 2, "distinct calls")
    eq(sandbox_get(t, "crash", "working/count.txt").strip(), "ran", "the command ran once")
    eq([e["seq"] for e in evs], list(range(1, len(evs) + 1)), "no gap, no repeat")
    job = t.get_json("job", "crash-t1")
    eq(job["status"].get("failed", 0) >= 1, True, "the Job retried a failed pod")


def scenario_sandbox_deleted_mid_session(t):
    t.kubectl("apply", "-f", "-", input=SESSION % {"name": "sbx", "base": t.slow_base})
    s = completed(t, "sbx", timeout=300)
    before = sandbox_get(t, "sbx", "output/after.md")
    t.kubectl("delete", "pod", "sbx-sandbox", "--wait=true", "--timeout=60s")
    # a new message brings a new turn, which needs the sandbox back
    t.kubectl("patch", "agentsession", "sbx", "--type=merge", "-p",
              '{"spec":{"messages":["once more"]}}')
    t.wait_session("sbx", "turn 2 completed", lambda s: (s["status"].get("turn") or {}).get(
        "number") == 2 and condition(s, "Completed") == "True", 180)
    # (the turn may end before the new pod's readiness probe has passed: the
    # runner connects as soon as tern-sandboxd answers)
    t.wait_session("sbx", "the sandbox back and ready", lambda s: s["status"]["sandbox"].get(
        "ready") is True, 60)
    eq(sandbox_get(t, "sbx", "output/after.md"), before, "workspace intact")
    eq(sandbox_get(t, "sbx", "working/count.txt").strip(), "ran", "nothing re-ran")


def scenario_sandbox_switch_recreates_the_pod(t):
    t.kubectl("apply", "-f", "-", input=SESSION % {"name": "switch", "base": t.fast_base})
    completed(t, "switch")
    old = t.get_json("pod", "switch-sandbox")
    old_hash = old["metadata"]["annotations"]["tern.dev/sandbox-hash"]
    t.kubectl("patch", "agentsession", "switch", "--type=merge", "-p",
              '{"spec":{"sandbox":{"image":"tern-sandbox:other"}}}')
    wait_for("the switch journaled", lambda: any(
        e["type"] == "sandbox_switched" for e in events(t, "switch")), 60)
    # the next turn brings the new sandbox on the same workspace
    t.kubectl("patch", "agentsession", "switch", "--type=merge", "-p",
              '{"spec":{"messages":["again"]}}')
    t.wait_session("switch", "the sandbox back", lambda s: (s["status"].get("sandbox") or {})
                   .get("ready"), 120)
    new = t.get_json("pod", "switch-sandbox")
    eq(new["metadata"]["annotations"]["tern.dev/sandbox-hash"] != old_hash, True, "new sandbox")
    eq(new["spec"]["containers"][0]["image"], "tern-sandbox:other", "new image")
    t.wait_session("switch", "turn 2 done", lambda s: (s["status"].get("turn") or {}).get(
        "number") == 2 and condition(s, "Completed") == "True", 120)
    sw = [e for e in events(t, "switch") if e["type"] == "sandbox_switched"]
    eq(len(sw), 1, "one switch journaled")
    eq(sw[0]["data"]["from"], old_hash, "from the old sandbox")


def lease_holder(t):
    lease = t.get_json("lease", "tern-operator", "-n", "default")
    return lease["spec"].get("holderIdentity")


def scenario_two_replicas_one_leads(t):
    t.stop("tern-operator")
    a = t.start_operator("op-a", extra=("--leader-elect",))
    b = t.start_operator("op-b", extra=("--leader-elect",))
    holder = wait_for("a leader", lambda: lease_holder(t), 60)
    eq(holder in ("op-a", "op-b"), True, "leader is one of them")
    t.kubectl("apply", "-f", "-", input=SESSION % {"name": "ha1", "base": t.fast_base})
    completed(t, "ha1")
    # only the leader reconciled
    other = "op-b" if holder == "op-a" else "op-a"
    contains(t.logs_of(holder), "leading", "leader log")
    eq("leading: starting" in t.logs_of(other), False, "the other never led")
    # the leader goes away (releasing the Lease); the other takes over
    t.stop(holder)
    wait_for("takeover", lambda: lease_holder(t) == other, 60)
    t.kubectl("apply", "-f", "-", input=SESSION % {"name": "ha2", "base": t.fast_base})
    s = completed(t, "ha2")
    eq(phase(s), "Succeeded", "the new leader runs sessions")
    del a, b


def start_model(t, name, script):
    p = ternlocal.Proc(name, [os.path.join(ternlocal.BIN, "tern-fakellm"), "--script", script,
                              "--listen", "127.0.0.1:0"], t.logs, stdout_pipe=True)
    line = p.read_line(20)
    t.procs[name] = p
    return "http://%s/v1" % line.split()[-1]


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.slow_base = start_model(t, "model-slow", os.path.join(ROOT, "tests", "data",
                                                                 "e2e-slow-script.json"))
        t.fast_base = start_model(t, "model-fast", os.path.join(ROOT, "tests", "data",
                                                                 "e2e-fast-script.json"))
        t.apply_crd()
        t.apply_runner_rbac()
        t.create_secret("model", "api-key", "test")
        t.start_operator()
        for name, fn in [("runner_killed_mid_turn", scenario_runner_killed_mid_turn),
                         ("sandbox_deleted_mid_session", scenario_sandbox_deleted_mid_session),
                         ("sandbox_switch_recreates_the_pod",
                          scenario_sandbox_switch_recreates_the_pod),
                         ("two_replicas_one_leads", scenario_two_replicas_one_leads)]:
            if only and not any(o in name for o in only):
                continue
            suite.run(name, fn, t)
        if suite.failed:
            for n in list(t.procs):
                if n.startswith("op-") or n == "tern-operator":
                    print("---- %s log (tail)" % n)
                    print(t.logs_of(n)[-3000:])
    suite.finish()


if __name__ == "__main__":
    main()
