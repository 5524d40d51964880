"""End-to-end: the operator with many parked sessions (journals seeded as
after a turn that asked for an approval), on a running cluster:

  - a first start reconciles every one to WaitingForApproval;
  - a restart relists them and writes nothing (every session's
    resourceVersion is the same after it), reading the journal summaries of
    sessions queued behind each other in batches (the
    tern_journal_summary_reads_total counters);
  - journals that change while the operator restarts (a step appended to
    some of them right after it starts, as a runner would, while it lists
    and reads summaries ahead) show in those sessions' status, and so do
    journals changed while it was down: a summary read ahead never hides
    a newer one.

Run: /usr/bin/python3 tests/integration/test_operator_scale.py [name-substring]
"""
# runs on: terndev kube
import json
import os
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, wait_for  # noqa: E402
from terndev import Suite, eq  # noqa: E402

N = 64        # parked sessions
CHANGED = 8   # journals changed during a restart (and again while it is down)
READS = 'tern_journal_summary_reads_total{how="%s"}'


def metrics(t):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % t.metrics_port,
                                  timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        k, _, v = line.rpartition(" ")
        out[k] = float(v)
    return out


def start_operator(t):
    t.metrics_port = ternlocal.free_port()
    return t.start_operator(extra=("--metrics-addr", "127.0.0.1:%d" % t.metrics_port))


def sessions(t):
    """name -> session, one list."""
    items = json.loads(t.kubectl("get", "agentsessions", "-o", "json"))["items"]
    return {s["metadata"]["name"]: s for s in items}


def prompt_tokens(s):
    return ((s.get("status") or {}).get("usage") or {}).get("promptTokens")


def append_model_response(t, uid, summ, tokens):
    """A runner's next step in a parked journal: one model_response event
    with its usage and the summary folded over it, in one txn that creates
    the event only if its seq is free. Returns the new summary."""
    pre = "/tern/v1/s/%s/" % uid
    seq = summ["lastSeq"] + 1
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ev = {"v": 1, "seq": seq, "type": "model_response", "time": now, "turn": 1,
          "data": {"usage": {"prompt_tokens": tokens - summ["usage"]["promptTokens"],
                             "completion_tokens": 0}}}
    new = json.loads(json.dumps(summ))
    new["lastSeq"] = seq
    new["usage"]["promptTokens"] = tokens
    new["usage"]["modelTurns"] += 1
    new["updated"] = now
    key = ternlocal._b64(pre + "ev/%016x" % seq)
    out = t.journal.call("/v3/kv/txn", {
        "compare": [{"key": key, "target": "CREATE", "create_revision": "0"}],
        "success": [{"request_put": {"key": key, "value": ternlocal._b64(json.dumps(ev))}},
                    {"request_put": {"key": ternlocal._b64(pre + "sum"),
                                     "value": ternlocal._b64(json.dumps(new))}}]})
    if not out.get("succeeded"):
        raise AssertionError("journal %s: seq %d was taken" % (uid, seq))
    return new


class Parked:
    """The parked sessions: names, uids and their journals' summaries."""

    def __init__(self, t):
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
        items = [{"apiVersion": "tern.dev/v1alpha1", "kind": "AgentSession",
                  "metadata": {"name": "parked-%03d" % i},
                  "spec": {"objective": "scale", "approval": {"timeoutSeconds": 2592000}}}
                 for i in range(N)]
        t.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": items}))
        self.uid, self.summ = {}, {}
        for name, s in sessions(t).items():
            uid = s["metadata"]["uid"]
            self.uid[name] = uid
            self.summ[name] = ternlocal.seed_parked_journal(t.journal, uid, now, "scale",
                                                            prompt_tokens=100)
        eq(len(self.uid), N, "sessions created")


def all_parked(t, want_tokens):
    """Every session WaitingForApproval with the prompt tokens its journal
    says (want_tokens: name -> tokens)."""
    def done():
        ss = sessions(t)
        return all(phase(ss.get(n, {})) == "WaitingForApproval" and
                   prompt_tokens(ss[n]) == want for n, want in want_tokens.items())
    wait_for("%d sessions parked with their journals' usage" % len(want_tokens), done, 300,
             interval=0.5)
    return sessions(t)


def scenario_start_restart_and_journals_changing(t):
    parked = Parked(t)
    want = {n: 100 for n in parked.uid}
    op = start_operator(t)
    before = all_parked(t, want)
    m = metrics(t)
    reads = sum(m.get(READS % h, 0) for h in ("alone", "batched", "read_ahead"))
    if reads < N:
        raise AssertionError("%d journal summaries read for %d sessions" % (reads, N))

    # a restart: nothing to write, the summaries read in batches
    t.stop("tern-operator")
    op = start_operator(t)
    wait_for("the restart's reconciles", lambda: metrics(t).get("tern_reconciles_total", 0) >= N,
             120, interval=0.1)
    m = metrics(t)
    after = sessions(t)
    changed = [n for n in before if after[n]["metadata"]["resourceVersion"] !=
               before[n]["metadata"]["resourceVersion"]]
    eq(changed, [], "sessions written by a restart with nothing changed")
    eq(m.get("tern_api_writes_total", 0), 0, "API writes of the restart")
    if m.get(READS % "read_ahead", 0) < 1 or m.get(READS % "batched", 0) < 1:
        raise AssertionError("a restart with %d queued read no summary ahead: %r" %
                             (N, {h: m.get(READS % h, 0) for h in
                                  ("alone", "batched", "read_ahead")}))

    # journals move while the operator starts: right after its start, a
    # runner-like writer appends a step to some; their status must follow
    t.stop("tern-operator")
    names = sorted(parked.uid)
    moving = names[::N // CHANGED][:CHANGED]
    op = start_operator(t)
    for n in moving:
        parked.summ[n] = append_model_response(t, parked.uid[n], parked.summ[n], 777)
        want[n] = 777
    all_parked(t, want)

    # ... and while it is down
    t.stop("tern-operator")
    for n in moving:
        parked.summ[n] = append_model_response(t, parked.uid[n], parked.summ[n], 901)
        want[n] = 901
    op = start_operator(t)
    final = all_parked(t, want)
    eq(sorted(n for n in final if prompt_tokens(final[n]) != 100), moving,
       "the sessions whose journals moved")
    del op


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.apply_crd()
        t.apply_runner_rbac()
        t.create_secret("model", "api-key", "test")
        for name, fn in [("start_restart_and_journals_changing",
                          scenario_start_restart_and_journals_changing)]:
            if not only or any(o in name for o in only):
                suite.run(name, fn, t)
        if suite.failed:
            for n in ("tern-operator", "tern-dev"):
                print("---- %s log (tail)" % n)
                print(t.logs_of(n)[-4000:])
    suite.finish()


if __name__ == "__main__":
    main()
