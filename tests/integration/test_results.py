"""Validated results (spec.result.schema, issue 23): a final answer the model
gets wrong twice (not JSON, then against the schema) and then right; one it
never gets right (Failed, LimitReached maxResultAttempts); an invalid schema
(InvalidSpec); a valid result too large for the status (output/result.json
and status.result.valueRef), and one that cannot be written there (an
error that says so); and the runner killed -9 between a journaled
invalid attempt and the next model request. Every case shares one cluster,
etcd and operator; the sessions run side by side. Each checks what the
scripted model was sent (its --record) and the journal, not only the status."""
# runs on: terndev kube
import base64
import hashlib
import json
import os
import signal
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, condition, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

SCHEMA = {"type": "object", "required": ["verdict", "confidence"],
          "additionalProperties": False,
          "properties": {"verdict": {"enum": ["flaky", "regression"]},
                         "confidence": {"type": "number", "minimum": 0, "maximum": 1}}}
PROSE = "I think the test is flaky."
WRONG = '{"verdict": "maybe", "confidence": 1.5}'
RIGHT = '{"verdict": "flaky", "confidence": 0.8}'
# what the runner tells the model about WRONG (json/jschema's wording)
TOLD_WRONG = ('Your final answer (attempt 2 of 3) does not match the result schema (2 errors):\n'
              'at "/verdict": enum: expected one of ["flaky","regression"], got "maybe"\n'
              'at "/confidence": maximum: expected a number <= 1, got 1.5\n'
              'Answer again with exactly one JSON value that matches the result schema, '
              'and nothing else.')
TOLD_PROSE = 'Your final answer (attempt 1 of 3) is not valid JSON: invalid JSON at offset 0: '
BIG = {"lines": ["line %04d %s" % (i, "x" * 50) for i in range(400)]}
HOOK_SESSION = "res-kill"


def session(name, base, schema=SCHEMA, attempts=None):
    spec = {"objective": "classify the failure",
            "limits": {"timeoutSeconds": 300},
            "model": {"name": "fake", "baseURL": base,
                      "apiKeySecretRef": {"name": "model", "key": "api-key"}},
            "result": {"schema": schema}}
    if attempts:
        spec["limits"]["maxResultAttempts"] = attempts
    return json.dumps({"apiVersion": "tern.dev/v1alpha1", "kind": "AgentSession",
                       "metadata": {"name": name}, "spec": spec})


def start_model(t, name, answers):
    """A scripted model answering step i with answers[i]; returns (base URL,
    the file its requests are recorded in)."""
    script = os.path.join(t.dir, name + "-script.json")
    with open(script, "w") as f:
        json.dump({"model": "fake", "steps": [{"reply": a if isinstance(a, dict) else {"content": a}}
                                              for a in answers]}, f)
    record = os.path.join(t.dir, name + "-requests.jsonl")
    p = ternlocal.Proc(name, [os.path.join(ternlocal.BIN, "tern-fakellm"), "--script", script,
                              "--listen", "127.0.0.1:0", "--record", record],
                       t.logs, stdout_pipe=True)
    line = p.read_line(20)
    t.procs[name] = p
    return "http://%s/v1" % line.split()[-1], record


def requests_of(record):
    if not os.path.exists(record):
        return []
    with open(record) as f:
        return [json.loads(x) for x in f if x.strip()]


def last_user(req):
    return [m for m in req["messages"] if m["role"] == "user"][-1]["content"]


def journal(t, name):
    return ternlocal.journal_events(t.journal, t.session(name)["metadata"]["uid"])


def kube_events(t, name, type_):
    out = json.loads(t.kubectl("get", "events.v1.events.k8s.io", "-o", "json"))
    return [(e.get("reason"), e.get("note", "")) for e in out.get("items", [])
            if (e.get("regarding") or {}).get("name") == name and e.get("type") == type_]


def finished(t, name, timeout=240):
    return t.wait_session(name, "finished",
                          lambda s: condition(s, "Completed") == "True" or phase(s) == "Failed",
                          timeout)


def sandbox_get(t, name, path):
    tok = base64.b64decode(t.get_json("secret", name + "-sandbox-token")["data"]["token"])
    addr = t.session(name)["status"]["sandbox"]["address"]
    req = urllib.request.Request("http://%s/v1/files/%s" % (addr, path),
                                 headers={"Authorization": "Bearer " + tok.decode()})
    return urllib.request.urlopen(req, timeout=10).read()


def runner_pids(name):
    """Host pids of `tern-runner turn` processes of session name."""
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
                if ("TERN_SESSION=%s" % name).encode() in f.read().split(b"\0"):
                    pids.append(int(p))
        except OSError:
            continue
    return pids


def stopped_runner(name, not_pid=None):
    for pid in runner_pids(name):
        try:
            with open("/proc/%d/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "T" and pid != not_pid:
            return pid
    return None


def invalid_attempts(evs):
    return [e["data"].get("attempt") for e in evs if e["type"] == "result_invalid"]


def check_wrong_twice_then_right(t):
    s = finished(t, "res-ok")
    eq(phase(s), "Succeeded", "phase")
    eq(s["status"]["result"].get("value"), json.loads(RIGHT), "status.result.value")
    eq("valueRef" in s["status"]["result"], False, "no valueRef for a small result")
    reqs = requests_of(t.rec_ok)
    eq(len(reqs), 3, "three answers asked for")
    sysmsg = reqs[0]["messages"][0]["content"]
    shown = [x for x in sysmsg.split("\n") if x.startswith("Result schema: ")]
    eq([json.loads(x[len("Result schema: "):]) for x in shown], [SCHEMA],
       "the system prompt carries the schema")
    contains(last_user(reqs[1]), TOLD_PROSE, "the model was told the answer is not JSON")
    eq(last_user(reqs[2]), TOLD_WRONG, "the model was told exactly what is wrong")
    evs = journal(t, "res-ok")
    eq(invalid_attempts(evs), [1, 2], "two invalid attempts journaled")
    fin = [e for e in evs if e["type"] == "turn_finished"]
    eq(len(fin), 1, "one turn_finished")
    eq(fin[0]["data"].get("result"), json.loads(RIGHT), "the result in turn_finished")
    # kubectl tern shows the value and, in the journal, the failed attempts
    out = t.tern("get", "res-ok")
    value = [x for x in out.split("\n") if x.startswith("Value:")]
    eq([json.loads(x[len("Value:"):]) for x in value], [json.loads(RIGHT)], "kubectl tern get")
    log = t.tern("logs", "res-ok")
    contains(log, "result invalid (attempt 1): the answer is not valid JSON", "kubectl tern logs")
    contains(log, 'result invalid (attempt 2): the answer does not match the schema: '
             'at "/verdict": enum:', "kubectl tern logs")


def check_never_satisfied(t):
    s = finished(t, "res-never")
    eq(phase(s), "Failed", "phase")
    eq(s["status"].get("reason"), "LimitReached", "reason")
    contains(s["status"].get("message", ""), "maxResultAttempts: used 3 of 3", "message")
    contains(s["status"].get("message", ""), "the last answer is not valid JSON", "last errors")
    eq(len(requests_of(t.rec_never)), 3, "maxResultAttempts answers asked for, no more")
    eq(invalid_attempts(journal(t, "res-never")), [1, 2, 3], "each failed attempt journaled")
    lim = [e for e in journal(t, "res-never") if e["type"] == "limit_reached"]
    eq([(e["data"]["limit"], e["data"]["used"], e["data"]["max"]) for e in lim],
       [("maxResultAttempts", 3, 3)], "limit_reached")
    wait_for("Warning LimitReached", lambda: [
        x for x in kube_events(t, "res-never", "Warning")
        if x[0] == "LimitReached" and "maxResultAttempts: used 3 of 3" in x[1]], 60)


def check_invalid_schema(t):
    s = t.wait_session("res-bad", "InvalidSpec", lambda s: phase(s) == "Failed", 60)
    eq(s["status"].get("reason"), "InvalidSpec", "reason")
    contains(s["status"].get("message", ""),
             'spec.result.schema: at "/properties/verdict/oneOf": keyword "oneOf" is not '
             'supported', "the validator's message")
    wait_for("Warning InvalidSpec", lambda: [
        x for x in kube_events(t, "res-bad", "Warning") if x[0] == "InvalidSpec"], 60)


def check_large_result(t):
    s = finished(t, "res-big")
    eq(phase(s), "Succeeded", "phase")
    r = s["status"]["result"]
    eq("value" in r, False, "no value in the status")
    eq(r.get("valueRef"), "output/result.json", "valueRef")
    body = sandbox_get(t, "res-big", "output/result.json")
    eq(r.get("valueSize"), len(body), "valueSize")
    eq(r.get("valueSha256"), hashlib.sha256(body).hexdigest(), "valueSha256")
    eq(json.loads(body), BIG, "the file holds the result")


def check_result_not_written(t):
    # output/result.json is a directory: the valid result cannot be kept
    s = finished(t, "res-nowrite")
    eq(phase(s), "Failed", "phase")
    contains(s["status"].get("message", ""), "the valid result (", "message")
    contains(s["status"].get("message", ""), "could not be written to output/result.json: "
             "sandboxd answered HTTP 4", "message")
    fin = [e for e in journal(t, "res-nowrite") if e["type"] == "turn_finished"]
    eq([(e["data"]["outcome"], e["data"].get("reason")) for e in fin],
       [("error", "result_not_written")], "turn_finished")
    wait_for("a Warning Event", lambda: [
        x for x in kube_events(t, "res-nowrite", "Warning") if "could not be written" in x[1]], 60)


def check_killed_between_attempts(t):
    # the runner stops itself right after journaling attempt 1 (TERN_TEST_HOOK
    # result_invalid:stop, through the operator's --test-runner-hook)
    pid = wait_for("runner stopped after attempt 1", lambda: stopped_runner(HOOK_SESSION), 180)
    evs = journal(t, HOOK_SESSION)
    eq(evs[-1]["type"], "result_invalid", "stopped right after result_invalid")
    eq(invalid_attempts(evs), [1], "attempt 1 journaled")
    eq(len(requests_of(t.rec_kill)), 1, "no second request yet")
    os.kill(pid, signal.SIGKILL)
    # a new runner resumes at attempt 2 (it stops there too: let it go on)
    pid2 = wait_for("runner stopped after attempt 2",
                    lambda: stopped_runner(HOOK_SESSION, not_pid=pid), 180)
    eq(invalid_attempts(journal(t, HOOK_SESSION)), [1, 2], "attempt 2 journaled once")
    os.kill(pid2, signal.SIGCONT)
    s = finished(t, HOOK_SESSION)
    eq(phase(s), "Succeeded", "phase")
    eq(s["status"]["result"].get("value"), json.loads(RIGHT), "status.result.value")
    evs = journal(t, HOOK_SESSION)
    eq(invalid_attempts(evs), [1, 2], "no attempt repeated or lost")
    eq(len([e for e in evs if e["type"] == "model_response"]), 3, "three answers journaled")
    reqs = requests_of(t.rec_kill)
    eq(len(reqs), 3, "no attempt asked twice")
    eq(last_user(reqs[2]), TOLD_WRONG, "the restarted runner told the model about attempt 2")
    fin = [e for e in evs if e["type"] == "turn_finished"]
    eq([e["data"].get("outcome") for e in fin], ["completed"], "the result applied once")


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        base_ok, t.rec_ok = start_model(t, "model-ok", [PROSE, WRONG, RIGHT])
        base_never, t.rec_never = start_model(t, "model-never", [PROSE, PROSE, PROSE])
        base_kill, t.rec_kill = start_model(t, "model-kill", [PROSE, WRONG, RIGHT])
        base_big, _ = start_model(t, "model-big", [json.dumps(BIG)])
        base_nowrite, _ = start_model(t, "model-nowrite", [
            {"toolCalls": [{"name": "exec_command",
                            "arguments": {"cmd": "mkdir -p output/result.json"}}]},
            json.dumps(BIG)])
        t.apply_crd()
        t.apply_runner_rbac()
        t.create_secret("model", "api-key", "test")
        t.start_operator(extra=["--test-runner-hook", HOOK_SESSION + "=result_invalid:stop"])
        bad = json.loads(json.dumps(SCHEMA))
        bad["properties"]["verdict"] = {"oneOf": [{"const": "flaky"}]}
        big_schema = {"type": "object", "required": ["lines"],
                      "properties": {"lines": {"type": "array", "items": {"type": "string"}}}}
        for doc in (session("res-ok", base_ok), session("res-never", base_never),
                    session(HOOK_SESSION, base_kill), session("res-bad", base_ok, schema=bad),
                    session("res-big", base_big, schema=big_schema),
                    session("res-nowrite", base_nowrite, schema=big_schema)):
            t.kubectl("apply", "-f", "-", input=doc)
        for name, fn in [("invalid_schema_is_invalid_spec", check_invalid_schema),
                         ("wrong_twice_then_right", check_wrong_twice_then_right),
                         ("never_satisfied_reaches_the_limit", check_never_satisfied),
                         ("large_result_goes_to_output", check_large_result),
                         ("result_not_written_is_an_error", check_result_not_written),
                         ("runner_killed_between_attempts", check_killed_between_attempts)]:
            if only and not any(o in name for o in only):
                continue
            suite.run(name, fn, t)
        if suite.failed:
            print("---- tern-operator log (tail)")
            print(t.logs_of("tern-operator")[-3000:])
    suite.finish()


if __name__ == "__main__":
    main()
