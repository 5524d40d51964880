"""End-to-end: memory proposals a human approves (issue 23). A session with
spec.memory proposes changes of simple.md with propose_memory_update; they
show in status.memoryProposals; `kubectl tern memory approve|reject`
decides; the operator applies an approved one to the memory ConfigMap (with
its annotation trail), refuses one whose base no longer matches (Conflict,
a Warning Event), and a later session's sandbox sees the new memory. The
runner is killed after a proposal is journaled (one proposal, not two) and
the operator between the ConfigMap update and its journal record (applied
once, recognised by its trail).

Run: /usr/bin/python3 tests/integration/test_memory.py [name-substring]
"""
# runs on: terndev kube
import hashlib
import json
import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

MEMORY = "# Team notes\n\n## Build\nmake\n\n## Style\ntabs\n"
BUILD_P1 = "make -j2 (two cores)\n"
BUILD_P2 = "ninja\n"


def propose(heading, content, reason):
    return {"name": "propose_memory_update",
            "arguments": {"reason": reason,
                          "replace_section": {"heading": heading, "content": content}}}


SCRIPT_MEM = {"model": "fake", "steps": [
    {"reply": {"toolCalls": [propose("## Build", BUILD_P1, "the machine has two cores"),
                             propose("## Build", BUILD_P2, "ninja is faster"),
                             propose("## Style", "spaces\n", "we changed our minds")]}},
    {"reply": {"content": "proposed three changes"}}]}

SCRIPT_KILL = {"model": "fake", "steps": [
    {"reply": {"toolCalls": [propose("## Tests", "make test\n", "say how to test")]}},
    # the first request after the proposal waits: the runner is killed then
    {"faults": [{"type": "slow", "ms": 300000}], "reply": {"content": "done"}}]}

SCRIPT_LATER = {"model": "fake", "steps": [
    {"reply": {"toolCalls": [{"name": "read_file",
                              "arguments": {"path": "simple.md", "offset": None,
                                            "limit": None}}]}},
    {"reply": {"content": "read it"}}]}


def session_yaml(name, base, extra=""):
    return ("apiVersion: tern.dev/v1alpha1\nkind: AgentSession\n"
            "metadata: {name: %s, namespace: default}\n"
            "spec:\n  objective: keep the team's notes current\n"
            "  model: {name: fake, baseURL: %s, apiKeySecretRef: {name: model, key: api-key}}\n"
            "  memory: {configMapRef: {name: team-memory}}\n"
            "  permissions: {tools: [read_file, list_files]}\n%s") % (name, base, extra)


def start_model(t, name, script):
    path = os.path.join(t.dir, name + ".json")
    with open(path, "w") as f:
        json.dump(script, f)
    p = ternlocal.Proc(name, [os.path.join(ternlocal.BIN, "tern-fakellm"), "--script", path,
                              "--listen", "127.0.0.1:0", "--record", model_record(t, name)],
                       t.logs, stdout_pipe=True)
    line = p.read_line(20)
    t.procs[name] = p
    return "http://%s/v1" % line.split()[-1]


def model_record(t, name):
    """The file model `name` appends each request it receives to."""
    return os.path.join(t.dir, name + "-requests.jsonl")


def model_requests(t, name):
    try:
        with open(model_record(t, name)) as f:
            return sum(1 for line in f if line.strip())
    except FileNotFoundError:
        return 0


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def events(t, name):
    return ternlocal.journal_events(t.journal, t.session(name)["metadata"]["uid"])


def proposals(s):
    return (s.get("status") or {}).get("memoryProposals") or []


def proposal(t, name, pid):
    for p in proposals(t.session(name)):
        if p["id"] == pid:
            return p
    return {}


def state_is(t, name, pid, want, timeout=90):
    return t.wait_session(name, "%s %s" % (pid, want), lambda s: any(
        p["id"] == pid and p.get("state") == want for p in proposals(s)), timeout)


def memory_cm(t):
    return t.get_json("configmap", "team-memory")


def events_of(t, name, kind):
    out = json.loads(t.kubectl("get", "events.v1.events.k8s.io", "-n", "default", "-o", "json"))
    return [(e.get("reason"), e.get("note", "")) for e in out.get("items", [])
            if (e.get("regarding") or {}).get("name") == name and e.get("type") == kind]


def warned(t, name, reason, text, timeout=60):
    return wait_for("Warning %s on %s" % (reason, name), lambda: [
        n for r, n in events_of(t, name, "Warning") if r == reason and text in n], timeout)


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


def succeeded(t, name, timeout=180):
    s = t.wait_session(name, "ended", lambda s: phase(s) in ("Succeeded", "Failed"), timeout)
    eq(phase(s), "Succeeded", "%s ended" % name)
    return s


def start_operator(t, hook=None):
    """The operator; with hook, TERN_TEST_HOOK in its environment."""
    if hook:
        os.environ["TERN_TEST_HOOK"] = hook
    try:
        return t.start_operator()
    finally:
        os.environ.pop("TERN_TEST_HOOK", None)


def scenario_proposed(t):
    """Three proposals of one turn: Pending, with provenance; the model is
    told the id and that a human reviews it."""
    s = succeeded(t, "mem")
    ps = proposals(s)
    eq(len(ps), 3, "three proposals")
    evs = events(t, "mem")
    results = [e for e in evs if e["type"] == "tool_result"]
    calls = [e["data"]["callId"] for e in evs if e["type"] == "tool_call"]
    for p, r in zip(ps, results):
        eq(p["state"], "Pending", p["id"] + " state")
        eq(p["session"], "mem", "session")
        eq(p["turn"], 1, "turn")
        eq(p["toolCallId"] in calls, True, "toolCallId is a journaled call")
        eq(p["baseSha256"], sha(MEMORY), "base is the ConfigMap's simple.md")
        contains(r["data"]["output"], "proposal %s recorded: a human will review it" % p["id"],
                 "told to the model")
        eq(r["data"]["memoryProposal"]["id"], p["id"], "journaled with the tool result")
    eq([p["heading"] for p in ps], ["## Build", "## Build", "## Style"], "headings")
    contains(ps[0]["preview"], BUILD_P1.strip(), "preview")
    eq(ps[0]["reason"], "the machine has two cores", "reason")
    t.ids = [p["id"] for p in ps]
    t.cm_rv = memory_cm(t)["metadata"]["resourceVersion"]
    out = t.tern("get", "mem")
    contains(out, "%s Pending: ## Build" % t.ids[0], "kubectl tern get shows proposals")


def scenario_rejected(t):
    t.tern("memory", "reject", "mem", t.ids[2], "--reason", "not now")
    state_is(t, "mem", t.ids[2], "Rejected")
    p = proposal(t, "mem", t.ids[2])
    eq(p.get("message"), "not now", "the reason")
    eq(bool(p.get("decidedBy")), True, "decidedBy")
    cm = memory_cm(t)
    eq(cm["data"]["simple.md"], MEMORY, "ConfigMap unchanged")
    eq(cm["metadata"]["resourceVersion"], t.cm_rv, "not written")
    # a second decision is refused by the plugin, saying why
    r = t.tern("memory", "approve", "mem", t.ids[2], check=False)
    eq(r, "", "refused")


def scenario_unknown_id(t):
    t.kubectl("annotate", "agentsession", "mem", "tern.dev/memory-approve=mp-000000000000")
    warned(t, "mem", "MemoryProposalUnknown", "mp-000000000000")
    wait_for("the annotation removed", lambda: "tern.dev/memory-approve" not in (
        t.session("mem")["metadata"].get("annotations") or {}), 60)
    eq(memory_cm(t)["metadata"]["resourceVersion"], t.cm_rv, "ConfigMap not written")


def scenario_operator_killed_after_update(t):
    """The operator (started with the crash hook) updates the ConfigMap and
    dies before the journal record; the next one finds its trail."""
    op = t.procs["tern-operator"]
    t.tern("memory", "approve", "mem", t.ids[0])
    wait_for("the operator killed at the hook", lambda: op.p.poll() is not None, 90)
    eq(op.p.returncode, -signal.SIGKILL, "killed by the hook")
    t.procs.pop("tern-operator", None)
    cm = memory_cm(t)
    want = MEMORY.replace("## Build\nmake\n", "## Build\n" + BUILD_P1)
    eq(cm["data"]["simple.md"], want, "applied before the crash")
    rv = cm["metadata"]["resourceVersion"]
    evs = events(t, "mem")
    eq([e["data"]["decision"] for e in evs if e["type"] == "memory_decided"
        and e["data"]["id"] == t.ids[0]], ["approved"], "the decision journaled")
    eq([e for e in evs if e["type"] == "memory_applied"], [], "its application not yet")
    start_operator(t)
    state_is(t, "mem", t.ids[0], "Applied")
    p = proposal(t, "mem", t.ids[0])
    contains(p.get("message", ""), "found in its trail", "recognised its own trail")
    cm = memory_cm(t)
    eq(cm["data"]["simple.md"], want, "applied once")
    eq(cm["metadata"]["resourceVersion"], rv, "not written again")
    anns = cm["metadata"]["annotations"]
    eq(anns["tern.dev/memory-applied-proposal"], t.ids[0], "trail: proposal")
    eq(anns["tern.dev/memory-proposed-by"], "default/mem", "trail: session")
    eq(anns["tern.dev/memory-previous-sha256"], sha(MEMORY), "trail: previous version")
    eq(anns["tern.dev/memory-approved-by"], p.get("decidedBy"), "trail: who approved")
    hist = json.loads(anns["tern.dev/memory-history"])
    eq([(h["proposal"], h["previousSha256"], h["sha256"]) for h in hist],
       [(t.ids[0], sha(MEMORY), sha(want))], "one application in the history")
    applied = [e for e in events(t, "mem") if e["type"] == "memory_applied"]
    eq(len(applied), 1, "one memory_applied record")
    logs = t.tern("logs", "mem")
    contains(logs, "memory proposal %s approved by" % t.ids[0], "kubectl tern logs: the decision")
    contains(logs, "memory proposal %s applied: applied to ConfigMap team-memory" % t.ids[0],
             "kubectl tern logs: its application")
    t.applied = want


def scenario_conflict(t):
    rv = memory_cm(t)["metadata"]["resourceVersion"]
    t.tern("memory", "approve", "mem", t.ids[1])
    state_is(t, "mem", t.ids[1], "Conflict")
    note = warned(t, "mem", "MemoryConflict", t.ids[1])[0]
    contains(note, sha(t.applied), "the current hash")
    contains(note, sha(MEMORY), "the proposal's base")
    cm = memory_cm(t)
    eq(cm["data"]["simple.md"], t.applied, "ConfigMap unchanged by the conflict")
    eq(cm["metadata"]["resourceVersion"], rv, "not written")


def sandbox_get(t, name, path):
    import base64
    import urllib.request
    tok = base64.b64decode(t.get_json("secret", name + "-sandbox-token")["data"]["token"]).decode()
    addr = t.session(name)["status"]["sandbox"]["address"]
    req = urllib.request.Request("http://%s/v1/files/%s" % (addr, path),
                                 headers={"Authorization": "Bearer " + tok})
    return urllib.request.urlopen(req, timeout=10).read().decode()


def scenario_running_sandbox_keeps_its_file(t):
    eq((t.session("mem")["status"].get("sandbox") or {}).get("ready"), True, "mem's sandbox up")
    eq(sandbox_get(t, "mem", "simple.md"), MEMORY, "the running pod's simple.md is unchanged")


def scenario_later_session_sees_it(t):
    t.kubectl("apply", "-f", "-", input=session_yaml("mem-later", t.later_base))
    succeeded(t, "mem-later")
    out = [e["data"]["output"] for e in events(t, "mem-later") if e["type"] == "tool_result"]
    eq(len(out), 1, "one read")
    contains(out[0], BUILD_P1.strip(), "the new memory in the later sandbox")


def scenario_runner_killed_after_proposal(t):
    wait_for("the proposal journaled", lambda: any(
        e["type"] == "tool_result" and "memoryProposal" in e["data"]
        for e in events(t, "memk")), 120)
    # killed while its request after the proposal is in flight (the script's
    # slow step): killed before sending it, the retry would get the slow reply
    wait_for("the request after the proposal", lambda: model_requests(t, "model-kill") >= 2, 60)
    pids = wait_for("the runner process", lambda: runner_pids("memk"), 60)
    for p in pids:
        os.kill(p, signal.SIGKILL)
    succeeded(t, "memk", timeout=240)
    evs = events(t, "memk")
    eq(len([e for e in evs if e["type"] == "tool_call"]), 1, "the call journaled once")
    eq(len([e for e in evs if e["type"] == "tool_result"]), 1, "its result once")
    ps = proposals(t.session("memk"))
    eq([(p["heading"], p["state"]) for p in ps], [("## Tests", "Pending")], "one proposal")
    eq(t.get_json("job", "memk-t1")["status"].get("failed", 0) >= 1, True,
       "the Job retried the killed pod")


SCENARIOS = [
    ("runner_killed_after_proposal_one_proposal", scenario_runner_killed_after_proposal),
    ("proposals_pending_with_provenance", scenario_proposed),
    ("rejected_leaves_configmap", scenario_rejected),
    ("unknown_id_refused", scenario_unknown_id),
    ("approved_operator_killed_after_update_applied_once",
     scenario_operator_killed_after_update),
    ("second_proposal_conflicts", scenario_conflict),
    ("running_sandbox_keeps_its_file", scenario_running_sandbox_keeps_its_file),
    ("later_session_sees_new_memory", scenario_later_session_sees_it),
]


def main():
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        mem_base = start_model(t, "model-mem", SCRIPT_MEM)
        kill_base = start_model(t, "model-kill", SCRIPT_KILL)
        t.later_base = start_model(t, "model-later", SCRIPT_LATER)
        t.apply_crd()
        t.apply_runner_rbac()
        t.create_secret("model", "api-key", "test")
        t.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "team-memory", "namespace": "default"},
            "data": {"simple.md": MEMORY}}))
        start_operator(t, hook="operator_memory_applied")
        # (its sandbox stays: the running pod's simple.md is checked after the change)
        t.kubectl("apply", "-f", "-", input=session_yaml(
            "mem", mem_base, "  sandbox: {idleSuspendSeconds: 0}\n"))
        t.kubectl("apply", "-f", "-", input=session_yaml("memk", kill_base))
        for name, fn in SCENARIOS:
            suite.run(name, fn, t)
            if suite.failed:
                break  # each scenario builds on the one before
        if suite.failed:
            for n in ("tern-operator", "tern-dev"):
                try:
                    print("---- %s log (tail)" % n)
                    print(t.logs_of(n)[-4000:])
                except (OSError, KeyError, subprocess.SubprocessError):
                    pass
    suite.finish()


if __name__ == "__main__":
    main()
