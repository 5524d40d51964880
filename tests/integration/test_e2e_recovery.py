"""End-to-end, off the happy path (issue 16): sessions that fail, get stuck
or hit a limit, through the real kubectl and `kubectl tern` on a running
cluster (Local: etcd, the cluster, the scripted model servers, the
operator). Every scenario checks what a user sees (the PHASE and REASON
columns, -o wide's MESSAGE, conditions, Warning Events, the plugin's exit
code and words) and that the session can be carried to completion once the
cause is removed; the journal shows that nothing was done twice.

Run: /usr/bin/python3 tests/integration/test_e2e_recovery.py [name-substring]
"""
# runs on: terndev kube
import json
import os
import re
import socket
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, condition, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT
DATA = os.path.join(ROOT, "tests", "data")


def manifest(name, base, model, extra="", ns="default", secret="model"):
    """An AgentSession; extra is YAML lines under spec (two-space indent)."""
    key = "apiKeySecretRef: {name: %s, key: api-key}" % secret if secret else ""
    return ("apiVersion: tern.dev/v1alpha1\nkind: AgentSession\n"
            "metadata: {name: %s, namespace: %s}\n"
            "spec:\n  objective: do the thing\n"
            "  model: {name: %s, baseURL: %s, %s}\n%s") % (name, ns, model, base, key, extra)


def apply(t, text):
    t.kubectl("apply", "-f", "-", input=text)


def status(s):
    return s.get("status") or {}


def cond(s, t):
    for c in status(s).get("conditions", []):
        if c.get("type") == t:
            return c
    return {}


def journal(t, name, ns="default"):
    return ternlocal.journal_events(t.journal, t.session(name, ns)["metadata"]["uid"])


def types(evs):
    return [e["type"] for e in evs]


def warnings(t, name, ns="default"):
    """(reason, note) of the Warning Events on the session, through the
    events.k8s.io API."""
    out = json.loads(t.kubectl("get", "events.v1.events.k8s.io", "-n", ns, "-o", "json"))
    return [(e.get("reason"), e.get("note", "")) for e in out.get("items", [])
            if (e.get("regarding") or {}).get("name") == name and e.get("type") == "Warning"]


def warned(t, name, reason, text, ns="default", timeout=60):
    return wait_for("Warning %s on %s" % (reason, name), lambda: [
        n for r, n in warnings(t, name, ns) if r == reason and text in n], timeout)


def columns(t, name, wide=False, ns="default"):
    """`kubectl get ags NAME` as {COLUMN: value}, cut at the header's
    column starts (values may hold spaces)."""
    args = ["get", "ags", name, "-n", ns] + (["-o", "wide"] if wide else [])
    lines = t.kubectl(*args).rstrip("\n").split("\n")
    head, row = lines[0], lines[1]
    starts = [m.start() for m in re.finditer(r"\S+", head)]
    names = head.split()
    out = {}
    for i, n in enumerate(names):
        end = starts[i + 1] if i + 1 < len(starts) else len(row)
        out[n] = row[starts[i]:end].strip()
    return out


def reached(t, name, want_phase, timeout=180, ns="default"):
    return t.wait_session(name, "phase %s" % want_phase, lambda s: phase(s) == want_phase,
                          timeout, ns=ns)


def succeeded(t, name, timeout=240, ns="default", after=None):
    """Waits for the session to end; after: the status it was Failed with
    before the fix (so that state, still shown until the operator acts on
    the fix, is not taken for the end)."""
    def what(m):  # the failure, without the hint after "; " (which follows the spec)
        return (m or "").split("; ")[0]
    old = what((after or {}).get("message")) if after else None

    def done(s):
        if phase(s) == "Succeeded":
            return True
        return phase(s) == "Failed" and what(status(s).get("message")) != old
    s = t.wait_session(name, "Succeeded", done, timeout, ns=ns)
    eq((phase(s), status(s).get("reason"), status(s).get("message")),
       ("Succeeded", None, None), "%s ended" % name)
    return s


def start_model(t, name, script):
    p = ternlocal.Proc(name, [os.path.join(ternlocal.BIN, "tern-fakellm"), "--script", script,
                              "--listen", "127.0.0.1:0", "--record",
                              os.path.join(t.dir, name + ".jsonl")], t.logs, stdout_pipe=True)
    line = p.read_line(20)
    t.procs[name] = p
    return "http://%s/v1" % line.split()[-1]


def requests(t, model):
    """The request bodies a scripted model received."""
    with open(os.path.join(t.dir, model + ".jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def apply_json(t, obj):
    t.kubectl("apply", "-f", "-", input=json.dumps(obj))


def patch(t, name, spec, ns="default"):
    t.kubectl("patch", "agentsession", name, "-n", ns, "--type=merge", "-p",
              json.dumps({"spec": spec}))


def metrics(t):
    return urllib.request.urlopen("http://%s/metrics" % t.metrics_addr, timeout=10).read().decode()


def metric(text, name, labels=""):
    """The value of one series (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + labels + " ") or (not labels and line.startswith(name + " ")):
            return float(line.split()[-1])
    return 0.0


# ---- dead ends ---------------------------------------------------------------

def scenario_limit_says_which_and_raising_it_continues(t):
    apply(t, manifest("lim", t.limit_base, "fake-limit", "  limits: {maxTokens: 1500}\n"))
    s = reached(t, "lim", "Failed")
    st = status(s)
    eq(st.get("reason"), "LimitReached", "status.reason")
    contains(st.get("message", ""), "maxTokens: used 1686 of 1500", "status.message")
    contains(st.get("message", ""), "raise spec.limits.maxTokens above 1686", "how to go on")
    eq(cond(s, "Failed").get("reason"), "LimitReached", "Failed condition reason")
    contains(cond(s, "Failed").get("message", ""), "used 1686 of 1500", "Failed condition")
    eq(st["failure"]["limit"], "maxTokens", "status.failure.limit")
    # the columns: PHASE and REASON by default, MESSAGE with -o wide
    cols = columns(t, "lim")
    eq((cols.get("PHASE"), cols.get("REASON")), ("Failed", "LimitReached"), "columns")
    contains(columns(t, "lim", wide=True).get("MESSAGE", ""), "maxTokens: used 1686 of 1500",
             "-o wide MESSAGE")
    warned(t, "lim", "LimitReached", "maxTokens: used 1686 of 1500")
    # say and retry refuse, saying why; nothing is added
    r2 = subprocess_tern(t, "say", "lim", "go on")
    eq(r2.returncode, 1, "say exit code")
    contains(r2.stderr, "raise spec.limits.maxTokens above 1686", "say says why")
    eq("messages" in t.session("lim")["spec"], False, "no message added")
    r3 = subprocess_tern(t, "retry", "lim")
    eq(r3.returncode, 1, "retry exit code")
    contains(r3.stderr, "stopped at a limit", "retry says why")
    # raising the limit continues the same turn's work from the journal
    patch(t, "lim", {"limits": {"maxTokens": 10000}})
    s = succeeded(t, "lim", after=st)
    contains(s["status"]["result"]["summary"], "Done after the limit was raised", "result")
    evs = journal(t, "lim")
    eq([e["data"].get("reason") for e in evs if e["type"] == "retry"], ["LimitRaised"], "retry")
    eq(len([e for e in evs if e["type"] == "tool_call"]), 1, "the tool ran once")
    eq(len([e for e in evs if e["type"] == "model_response"]), 2, "no model step repeated")
    eq(cond(s, "Failed").get("status"), "False", "Failed cleared")


def subprocess_tern(t, *args):
    import subprocess
    env = dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig,
               PATH=ternlocal.BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
    return subprocess.run([ternlocal.KUBECTL, "tern", *args], capture_output=True, text=True,
                          env=env, timeout=60)


def scenario_model_error_is_told_and_retry_continues(t):
    apply(t, manifest("merr", t.error_base, "fake-error"))
    s = reached(t, "merr", "Failed")
    eq(status(s).get("reason"), "ModelError", "reason")
    contains(status(s).get("message", ""), "the model answered HTTP 400 invalid_prompt: the "
             "prompt was flagged by a filter that has since been fixed", "the model's words")
    warned(t, "merr", "ModelError", "flagged by a filter")
    r = subprocess_tern(t, "retry", "merr")
    eq(r.returncode, 0, "retry: %s" % r.stderr)
    contains(r.stdout, "retry requested: turn 1 failed (ModelError", "retry output")
    s = succeeded(t, "merr", after=status(s))
    contains(s["status"]["result"]["summary"], "Done on the second try", "result")
    evs = journal(t, "merr")
    eq(types(evs).count("retry"), 1, "one retry event")
    eq(types(evs).count("turn_started"), 2, "a second turn")


def scenario_approval_timeout_fail_then_retry(t):
    apply(t, manifest("aptf", t.approval_base, "fake-approval",
                      "  permissions: {requiresApproval: [\"exec_command:git push*\"]}\n"
                      "  approval: {timeoutSeconds: 3, onTimeout: Fail}\n"))
    s = reached(t, "aptf", "Failed")
    eq(status(s).get("reason"), "ApprovalTimeout", "reason")
    contains(status(s).get("message", ""), "timed out after 3 s", "message")
    r = subprocess_tern(t, "retry", "aptf")
    eq(r.returncode, 0, "retry: %s" % r.stderr)
    s = succeeded(t, "aptf", after=status(s))
    # the model was told why the call was not run
    contains(s["status"]["result"]["summary"], "Not pushed; the reason was noted", "result")


def scenario_runner_config_error_before_turn_start(t):
    # an identity that may not read its session: the runner exits 78 before
    # it journals the turn's start
    apply_json(t, {"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "norights", "namespace": "default"}})
    apply(t, manifest("norbac", t.fast_base, "fake-fast",
                      "  identity: {serviceAccountName: norights}\n"))
    s = reached(t, "norbac", "Failed", timeout=180)
    eq(status(s).get("reason"), "RunnerConfigError", "reason")
    msg = status(s).get("message", "")
    contains(msg, "before its turn started", "message")
    contains(msg, "exited 78: ConfigError: reading AgentSession default/norbac", "runner's words")
    contains(msg, "forbidden", "the API server's answer")
    eq(columns(t, "norbac").get("REASON"), "RunnerConfigError", "REASON column")
    # fix the RBAC, then retry
    apply_json(t, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "norights", "namespace": "default"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                               "name": "tern-runner"},
                   "subjects": [{"kind": "ServiceAccount", "name": "norights",
                                 "namespace": "default"}]})
    r = subprocess_tern(t, "retry", "norbac")
    eq(r.returncode, 0, "retry: %s" % r.stderr)
    succeeded(t, "norbac", after=status(s))


def scenario_fork_of_a_failed_session_starts_from_its_last_good_point(t):
    apply(t, manifest("fpar", t.limit_base, "fake-limit", "  limits: {maxTokens: 1500}\n"))
    reached(t, "fpar", "Failed")
    pev = journal(t, "fpar")
    t.tern("fork", "fpar", "fchild")
    child = t.wait_session("fchild", "created", lambda s: s.get("spec", {}).get("forkFrom"), 60)
    at = child["spec"]["forkFrom"]["atSeq"]
    eq("limit_reached" in types(pev[:at]), False, "the failure is not copied")
    eq(pev[at]["type"] in ("limit_reached", "turn_finished"), True, "cut before the failure")
    # the child goes on from there (with room for it)
    before = status(t.session("fchild"))
    patch(t, "fchild", {"limits": {"maxTokens": 10000}})
    s = succeeded(t, "fchild", after=before)
    contains(s["status"]["result"]["summary"], "Done after the limit was raised", "child result")
    eq(phase(t.session("fpar")), "Failed", "the parent is unchanged")


# ---- forks --------------------------------------------------------------------

def scenario_fork_into_a_taken_name_is_refused(t):
    apply(t, manifest("fa", t.fast_base, "fake-fast"))
    apply(t, manifest("fb", t.fast_base, "fake-fast"))
    succeeded(t, "fa")
    before = t.session("fb")
    t.tern("fork", "fa", "fb")
    note = warned(t, "fa", "ForkRejected", "agentsession fb already exists")
    contains(note[0], "not a fork of fa", "event text")
    s = t.wait_session("fa", "annotation removed", lambda s: "tern.dev/fork" not in
                       (s["metadata"].get("annotations") or {}), 60)
    eq(cond(s, "ForkRejected").get("status"), "True", "ForkRejected condition")
    eq(cond(s, "ForkRejected").get("reason"), "NameInUse", "reason")
    after = t.session("fb")
    eq(after["metadata"]["uid"], before["metadata"]["uid"], "fb untouched")
    eq("forkFrom" in after["spec"], False, "fb not adopted")
    eq("forks" in status(s), False, "fa lists no fork")


def scenario_fork_while_an_approval_waits(t):
    m = manifest("apar", t.approval_base, "fake-approval",
                 "  permissions: {requiresApproval: [\"exec_command:git push*\"]}\n")
    apply(t, m)
    s = reached(t, "apar", "WaitingForApproval")
    pid = s["status"]["pendingApproval"]["id"]
    t.tern("fork", "apar", "achild")
    c = t.wait_session("achild", "waiting for the inherited approval",
                       lambda s: phase(s) == "WaitingForApproval", 180)
    eq(c["status"]["pendingApproval"]["id"], pid, "the child inherits the approval")
    # approve here, deny there (with a reason the model is told)
    out = t.tern("approve", "achild", pid, "--as-user", "alice")
    contains(out, "approved " + pid, "approve output")
    t.tern("deny", "apar", pid, "--reason", "not on Fridays")
    cs, ps = succeeded(t, "achild"), succeeded(t, "apar")
    eq(cs["status"]["result"]["summary"], "Pushed.", "child ran it")
    contains(ps["status"]["result"]["summary"], "Not pushed; the reason was noted", "parent")
    cev, pev = journal(t, "achild"), journal(t, "apar")
    eq([e["data"]["decision"] for e in cev if e["type"] == "approval_decided"], ["approved"],
       "child decision")
    eq([e["data"]["decision"] for e in pev if e["type"] == "approval_decided"], ["denied"],
       "parent decision")
    eq(len([e for e in cev if e["type"] == "tool_call"]), 1, "child ran the call once")
    eq([e for e in pev if e["type"] == "tool_call"], [], "the parent did not")
    # the model saw the reason, bounded, in the denial
    told = [m for body in requests(t, "model-approval") for m in body.get("messages", [])
            if m.get("role") == "tool" and "Their reason: not on Fridays" in
            (m.get("content") or "")]
    eq(len(told) >= 1, True, "the deny reason reached the model")


# ---- silence: stuck sessions ------------------------------------------------------

def scenario_missing_model_secret_blocks_then_goes_on(t):
    apply(t, manifest("nosec", t.fast_base, "fake-fast", secret="nosec-key"))
    s = reached(t, "nosec", "Blocked", timeout=120)
    eq(status(s).get("reason"), "SecretNotFound", "reason")
    contains(status(s).get("message", ""), 'Secret "nosec-key"', "message")
    eq(columns(t, "nosec").get("PHASE"), "Blocked", "PHASE column")
    eq(cond(s, "Ready").get("reason"), "SecretNotFound", "Ready condition")
    warned(t, "nosec", "SecretNotFound", 'Secret "nosec-key"')
    eq(t.kubectl("get", "job", "nosec-t1", check=False).strip(), "", "no Job that cannot run")
    t.create_secret("nosec-key", "api-key", "test")
    succeeded(t, "nosec")


def scenario_missing_configmap_blocks_then_goes_on(t):
    apply(t, manifest("nocm", t.fast_base, "fake-fast",
                      "  context: {files: [{configMapRef: {name: nocm-input}}]}\n"))
    s = reached(t, "nocm", "Blocked", timeout=120)
    eq(status(s).get("reason"), "ConfigMapNotFound", "reason")
    contains(status(s).get("message", ""), 'ConfigMap "nocm-input" (spec.context.files[0])',
             "message")
    eq(cond(s, "SandboxReady").get("reason"), "ConfigMapNotFound", "SandboxReady")
    warned(t, "nocm", "ConfigMapNotFound", "nocm-input")
    apply_json(t, {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "nocm-input", "namespace": "default"},
                   "data": {"notes.txt": "hello"}})
    succeeded(t, "nocm")


def scenario_namespace_without_runner_identity_blocks_then_goes_on(t):
    apply_json(t, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bare"}})
    t.create_secret("model", "api-key", "test", ns="bare")
    apply(t, manifest("nosa", t.fast_base, "fake-fast", ns="bare"))
    s = reached(t, "nosa", "Blocked", timeout=120, ns="bare")
    eq(status(s).get("reason"), "ServiceAccountNotFound", "reason")
    contains(status(s).get("message", ""), "deploy/runner-rbac.yaml", "how to fix")
    warned(t, "nosa", "ServiceAccountNotFound", '"tern-runner"', ns="bare")
    t.apply_runner_rbac("bare")
    succeeded(t, "nosa", ns="bare")


def scenario_bad_image_and_unschedulable_sandbox_are_told(t):
    apply(t, manifest("badimg", t.fast_base, "fake-fast",
                      "  sandbox: {image: \"tern-sandbox:Bad Tag\"}\n"))
    apply(t, manifest("toobig", t.fast_base, "fake-fast", "  limits: {cpu: \"100000\"}\n"))
    s = reached(t, "badimg", "Blocked")
    eq(status(s).get("reason"), "InvalidImageName", "reason")
    contains(status(s).get("message", ""), "sandbox pod badimg-sandbox: InvalidImageName",
             "message")
    warned(t, "badimg", "InvalidImageName", "invalid reference format")
    s = reached(t, "toobig", "Blocked")
    eq(status(s).get("reason"), "Unschedulable", "reason")
    contains(status(s).get("message", ""), "Insufficient cpu", "scheduler's words")
    warned(t, "toobig", "Unschedulable", "Insufficient cpu")
    # fixed: the sandbox is recreated and the sessions go on
    patch(t, "badimg", {"sandbox": {"image": "tern-sandbox:local"}})
    patch(t, "toobig", {"limits": {"cpu": "1"}})
    succeeded(t, "badimg")
    succeeded(t, "toobig")


def scenario_unreachable_model_is_told_and_fixing_it_goes_on(t):
    with socket.socket() as sk:  # a port nothing listens on
        sk.bind(("127.0.0.1", 0))
        dead = "http://127.0.0.1:%d/v1" % sk.getsockname()[1]
    apply(t, manifest("down", dead, "fake-fast"))
    s = reached(t, "down", "Blocked", timeout=180)
    eq(status(s).get("reason"), "ModelUnreachable", "reason")
    msg = status(s).get("message", "")
    contains(msg, "failed (exit 75): ModelUnreachable:", "runner's class")
    contains(msg, "onnect", "the transport error")
    eq(cond(s, "TurnRunning").get("reason"), "Retrying", "TurnRunning")
    warned(t, "down", "ModelUnreachable", "exit 75")
    # the endpoint fixed: the Job's next attempt uses it
    patch(t, "down", {"model": {"baseURL": t.fast_base}})
    succeeded(t, "down")
    eq(metric(metrics(t), "tern_model_errors_total", '{class="unreachable"}') >= 1, True,
       "model errors by class")


def scenario_timeout_during_a_tool_call_is_the_limit(t):
    apply(t, manifest("slowtool", t.timeout_base, "fake-timeout",
                      "  limits: {timeoutSeconds: 25}\n"))
    s = reached(t, "slowtool", "Failed", timeout=120)
    eq(status(s).get("reason"), "LimitReached", "reason (not a Job failure)")
    contains(status(s).get("message", ""), "timeoutSeconds:", "which limit")
    eq(status(s)["failure"]["limit"], "timeoutSeconds", "failure.limit")
    res = [e for e in journal(t, "slowtool") if e["type"] == "tool_result"]
    eq([e["data"]["status"] for e in res], ["timeout"], "the tool call timed out")
    patch(t, "slowtool", {"limits": {"timeoutSeconds": 3600}})
    s = succeeded(t, "slowtool", after=status(s))
    contains(s["status"]["result"]["summary"], "timed out; stopping here", "result")


# ---- smaller things -----------------------------------------------------------------

def scenario_suspending_a_finished_session_keeps_it_completed(t):
    apply(t, manifest("donesusp", t.fast_base, "fake-fast"))
    succeeded(t, "donesusp")
    t.tern("suspend", "donesusp")
    t.wait_session("donesusp", "suspend seen", lambda s: status(s).get("observedGeneration") ==
                   s["metadata"]["generation"], 60)
    wait_for("sandbox removed", lambda: t.kubectl("get", "pod", "donesusp-sandbox",
                                                  check=False).strip() == "", 120)
    s = t.session("donesusp")
    eq(cond(s, "Completed").get("status"), "True", "Completed stays True")
    eq(phase(s), "Succeeded", "phase")
    t.kubectl("wait", "--for=condition=Completed", "--timeout=10s", "agentsession/donesusp")


def scenario_approve_with_a_wrong_id_fails(t):
    apply(t, manifest("wrongap", t.approval_base, "fake-approval",
                      "  permissions: {requiresApproval: [\"exec_command:git push*\"]}\n"))
    s = reached(t, "wrongap", "WaitingForApproval")
    pid = s["status"]["pendingApproval"]["id"]
    r = subprocess_tern(t, "approve", "wrongap", "ap-0000000000000000")
    eq(r.returncode, 1, "exit code")
    contains(r.stderr, "ap-0000000000000000 is not the pending approval of agentsession "
             "wrongap (pending: %s); nothing was changed" % pid, "message")
    eq("tern.dev/approve" in (t.session("wrongap")["metadata"].get("annotations") or {}), False,
       "nothing annotated")
    t.tern("approve", "wrongap", pid)
    succeeded(t, "wrongap")


def scenario_task_md_and_the_prompt_agree(t):
    apply(t, manifest("taskmd", t.fast_base, "fake-fast",
                      "  messages: [\"a follow-up in the conversation\"]\n"))
    succeeded(t, "taskmd")
    # task.md as the sandbox mounts it: its ConfigMap (there while the pod is,
    # idleSuspendSeconds 600 after the turn)
    task = t.get_json("configmap", "taskmd-task")["data"]["task.md"]
    eq("a follow-up" in task, False, "task.md holds the objective, not the follow-ups")
    contains(task, "do the thing", "the objective")
    bodies = requests(t, "model-fast")
    mine = [b for b in bodies if any("a follow-up in the conversation" in (m.get("content") or "")
                                     for m in b.get("messages", []))]
    eq(len(mine) >= 1, True, "the follow-up reached the model as a message")
    system = mine[0]["messages"][0]["content"]
    contains(system, "follow-up messages come in this conversation, not in task.md",
             "the system prompt says so")


def scenario_unpriced_model_with_a_cost_limit_is_refused(t):
    apply(t, manifest("unpriced", t.fast_base, "fake-unpriced",
                      "  limits: {maxCostMicroUSD: 1000}\n"))
    s = reached(t, "unpriced", "Failed", timeout=60)
    eq(status(s).get("reason"), "InvalidSpec", "reason")
    contains(status(s).get("message", ""), 'model "fake-unpriced" has no price in the price '
             "table (ConfigMap default/tern-prices)", "message")
    eq(t.kubectl("get", "pod", "unpriced-sandbox", check=False).strip(), "", "nothing ran")
    # a priced model with a cost limit of 1 micro-USD: the limit is real
    apply(t, manifest("costly", t.fast_base, "fake-fast", "  limits: {maxCostMicroUSD: 1}\n"))
    s = reached(t, "costly", "Failed", timeout=120)
    eq(status(s).get("reason"), "LimitReached", "reason")
    eq(status(s)["failure"]["limit"], "maxCostMicroUSD", "the cost limit")
    eq(s["status"]["usage"]["costMicroUSD"] > 1, True, "cost counted")
    # price the unpriced model: the session is taken within the table's refresh
    cm = t.get_json("configmap", "tern-prices")
    table = json.loads(cm["data"]["prices.json"])
    table["prices"]["fake-unpriced"] = {"input": 1, "cachedInput": 1, "output": 1}
    cm["data"]["prices.json"] = json.dumps(table)
    t.kubectl("apply", "-f", "-", input=json.dumps(cm))
    succeeded(t, "unpriced", timeout=180, after=status(t.session("unpriced")))


def scenario_signals_metrics_and_logs(t):
    text = metrics(t)
    for fam in ("tern_reconcile_conflicts_total", "tern_first_model_request_seconds",
                "tern_approval_wait_seconds", "tern_model_errors_total",
                "tern_sessions_ended_total"):
        contains(text, "# TYPE %s " % fam, "family %s" % fam)
    eq(metric(text, "tern_first_model_request_seconds_count") >= 1, True, "latency observed")
    eq(metric(text, "tern_approval_wait_seconds_count") >= 1, True, "approval wait observed")
    eq(metric(text, "tern_sessions_ended_total", '{phase="Succeeded",reason="Completed"}') >= 1,
       True, "ended by reason")
    eq(metric(text, "tern_sessions_ended_total", '{phase="Failed",reason="LimitReached"}') >= 1,
       True, "failed by reason")
    # the census (kept by the informer's handlers, not counted per scrape)
    # agrees with the API's sessions by phase, and the caches say their size
    def census_matches():
        items = json.loads(t.kubectl("get", "agentsessions", "-A", "-o", "json"))["items"]
        want = {}
        for s in items:
            p = s.get("status", {}).get("phase") or "Unknown"
            want[p] = want.get(p, 0) + 1
        text = metrics(t)
        got = {m.group(1): int(float(m.group(2))) for m in re.finditer(
            r'^tern_sessions\{phase="([^"]*)"\} (\S+)$', text, re.M) if float(m.group(2))}
        seen[:] = [got, want]
        return got == want
    seen = []
    try:
        wait_for("the census to match the API", census_matches, 60)
    except ternlocal.Failed:
        raise AssertionError("census %s, API %s" % (seen[0], seen[1]) if seen else "no census")
    eq(metric(metrics(t), "tern_cache_bytes", '{resource="agentsessions"}') > 0, True,
       "the sessions cache's bytes")
    # conflicts are not errors: every reconcile error here would be a real one
    eq(metric(text, "tern_reconcile_errors_total"), 0.0, "no reconcile errors counted")
    # the operator's log says what happened to each session, in JSON lines
    with open(t.procs["tern-operator"].log, errors="replace") as f:
        lines = [json.loads(x) for x in f.read().splitlines() if x.startswith("{")]
    phases = [(x.get("from"), x.get("to")) for x in lines
              if x.get("msg") == "session phase" and x.get("session") == "default/lim"]
    eq(("Failed", "Provisioning") in phases or ("Failed", "Running") in phases, True,
       "lim's phases logged: %r" % phases)
    eq(any(x.get("msg") == "session event" and x.get("reason") == "TurnStarted" and
           x.get("session") == "default/lim" for x in lines), True, "turns logged")
    # numbers are numbers (the runner's summary line, through kubectl logs)
    log = t.kubectl("logs", "job/lim-t1")
    ended = [json.loads(x) for x in log.splitlines() if '"turn ended"' in x]
    eq(len(ended) >= 1 and isinstance(ended[-1]["steps"], int), True,
       "runner numbers are JSON numbers: %r" % ended[-1:])


SCENARIOS = [
    ("limit_says_which_and_raising_it_continues",
     scenario_limit_says_which_and_raising_it_continues),
    ("model_error_is_told_and_retry_continues", scenario_model_error_is_told_and_retry_continues),
    ("approval_timeout_fail_then_retry", scenario_approval_timeout_fail_then_retry),
    ("runner_config_error_before_turn_start", scenario_runner_config_error_before_turn_start),
    ("fork_of_a_failed_session_starts_from_its_last_good_point",
     scenario_fork_of_a_failed_session_starts_from_its_last_good_point),
    ("fork_into_a_taken_name_is_refused", scenario_fork_into_a_taken_name_is_refused),
    ("fork_while_an_approval_waits", scenario_fork_while_an_approval_waits),
    # sessions that wait (for a requeue of what is not watched: references
    # 10 s, the price table 30 s; for a time limit): run together, each
    # with its own sessions, models and names
    [
        ("missing_model_secret_blocks_then_goes_on",
         scenario_missing_model_secret_blocks_then_goes_on),
        ("missing_configmap_blocks_then_goes_on", scenario_missing_configmap_blocks_then_goes_on),
        ("namespace_without_runner_identity_blocks_then_goes_on",
         scenario_namespace_without_runner_identity_blocks_then_goes_on),
        ("bad_image_and_unschedulable_sandbox_are_told",
         scenario_bad_image_and_unschedulable_sandbox_are_told),
        ("unreachable_model_is_told_and_fixing_it_goes_on",
         scenario_unreachable_model_is_told_and_fixing_it_goes_on),
        ("timeout_during_a_tool_call_is_the_limit",
         scenario_timeout_during_a_tool_call_is_the_limit),
        ("unpriced_model_with_a_cost_limit_is_refused",
         scenario_unpriced_model_with_a_cost_limit_is_refused),
    ],
    ("suspending_a_finished_session_keeps_it_completed",
     scenario_suspending_a_finished_session_keeps_it_completed),
    ("approve_with_a_wrong_id_fails", scenario_approve_with_a_wrong_id_fails),
    ("task_md_and_the_prompt_agree", scenario_task_md_and_the_prompt_agree),
    # last: it reads what the scenarios before it left in metrics and logs
    ("signals_metrics_and_logs", scenario_signals_metrics_and_logs),
]


def price_table_with_fake_prices():
    """The shipped price table (deploy/base/prices.yaml) plus prices for the
    scripted models these sessions use (fake-unpriced deliberately not)."""
    import yaml
    with open(os.path.join(ROOT, "deploy", "base", "prices.yaml")) as f:
        cm = yaml.safe_load(f)
    table = json.loads(cm["data"]["prices.json"])
    for m in ("fake-fast", "fake-limit", "fake-error", "fake-timeout", "fake-approval"):
        table["prices"][m] = {"input": 1000000, "cachedInput": 500000, "output": 2000000}
    cm["metadata"]["namespace"] = "default"
    cm["data"]["prices.json"] = json.dumps(table)
    return cm


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.fast_base = start_model(t, "model-fast", os.path.join(DATA, "e2e-fast-script.json"))
        t.limit_base = start_model(t, "model-limit", os.path.join(DATA,
                                                                  "recovery-limit-script.json"))
        t.error_base = start_model(t, "model-error", os.path.join(DATA,
                                                                  "recovery-error-script.json"))
        t.timeout_base = start_model(t, "model-timeout",
                                     os.path.join(DATA, "recovery-timeout-script.json"))
        t.approval_base = start_model(t, "model-approval",
                                      os.path.join(DATA, "recovery-approval-script.json"))
        t.apply_crd()
        t.apply_runner_rbac()
        t.create_secret("model", "api-key", "test")
        apply_json(t, price_table_with_fake_prices())
        t.metrics_addr = "127.0.0.1:%d" % ternlocal.free_port()
        t.start_operator(extra=("--metrics-addr", t.metrics_addr,
                                "--prices-configmap", "default/tern-prices"))
        for entry in SCENARIOS:
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
