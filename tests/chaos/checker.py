"""checker - the chaos campaign's invariants, over what the components
recorded (never over what the campaign believes it did).

For one session it takes
  - the journal as stored in etcd: the events (a compacted journal starts
    with a snapshot, whose data.state is the runner's agent state),
  - tern-sandboxd's execution records (GET /v1/executions),
  - the workspace's effect log (every exec of the chaos script appends one
    tag line to working/effects.log) and the files the script writes,
  - the final status (the standalone supervisor's verdict, or the
    AgentSession's phase, conditions and result),
and the same journal of an uninterrupted run of the same script (the
reference). It reports:
  - duplicated side effects: an effect tag seen more than once, a sandboxd
    record whose runs is not 1, a record for a call the journal never
    started;
  - lost events: an event of the reference missing from the session
    (identities: model_response by step, tool_call and tool_result by call
    id, user_message by index, turn_started / turn_finished by turn), a
    completed call whose effect is not there, a gap in the seqs;
  - duplicated events: an identity recorded twice;
  - whether the session settled to the reference's result, or to a visible
    failure (the supervisor gave up after retries / the AgentSession is
    Failed with a reason): both count as clean; anything else does not.
Pure functions over plain data; standard library only.
"""
import json

EFFECT_TAGS = {"call_0_0": "s0", "call_2_0": "s2", "call_3_0": "s3", "call_6_0": "s6"}
WRITES = {"call_1_0": "working/notes.txt", "call_4_0": "output/result.md"}


class View:
    """What a journal says happened, compacted part included."""

    def __init__(self):
        self.seqs = []
        self.identities = {}     # identity -> count
        self.calls = {}          # call id -> {"name", "status", "started"}
        self.answers = []        # turn_finished summaries, in order
        self.outcomes = []
        self.first_seq = 0
        self.persisted = 0       # artifacts_persisted records (the operator's, after the answer)
        self.problems = []


def _ident(ev):
    t, d = ev.get("type"), ev.get("data") or {}
    if t == "model_response":
        return ("model_response", d.get("step"))
    if t == "model_request":
        return ("model_request", d.get("step"))
    if t in ("tool_call", "tool_result"):
        return (t, d.get("callId"))
    if t == "user_message":
        return ("user_message", d.get("index", d.get("source")))
    if t in ("turn_started", "turn_finished"):
        return (t, ev.get("turn"))
    if t in ("approval_requested", "approval_decided"):
        return (t, d.get("id"))
    if t == "artifacts_persisted":  # one record per set (docs/operator.md)
        return (t, "%s/%s" % (ev.get("turn"), d.get("request") or ""))
    return None  # snapshot, error, limit_reached, unknown: not identities


def _status_of_tool_message(content):
    """A tool_result's status from the text the model got (what a snapshot
    keeps of a compacted result)."""
    c = content or ""
    if c.startswith("interrupted"):
        return "interrupted"
    if c.startswith("error"):
        return "error"
    if c.startswith("timed out"):
        return "timeout"
    if c.startswith("exit code: ") and not c.startswith("exit code: 0\n"):
        return "failed"
    return "completed"


def view_of(events):
    """A View of a session's stored events (sorted by seq)."""
    v = View()
    if not events:
        return v
    v.first_seq = events[0]["seq"]
    if v.first_seq != 1 and events[0].get("type") != "snapshot":
        v.problems.append("the journal starts at seq %d without a snapshot" % v.first_seq)
    prev = None
    for ev in events:
        s = ev["seq"]
        if prev is not None and s != prev + 1:
            v.problems.append("gap: seq %d after %d" % (s, prev))
        prev = s
        v.seqs.append(s)
        if ev.get("type") == "snapshot" and s == v.first_seq:
            _fold_snapshot(v, (ev.get("data") or {}).get("state") or {})
            continue
        if ev.get("type") == "artifacts_persisted":
            v.persisted += 1
        i = _ident(ev)
        if i:
            v.identities[i] = v.identities.get(i, 0) + 1
        d = ev.get("data") or {}
        if ev["type"] == "tool_call":
            v.calls.setdefault(d.get("callId"), {"name": d.get("tool")})["started"] = True
        elif ev["type"] == "tool_result":
            c = v.calls.setdefault(d.get("callId"), {"name": d.get("tool")})
            c["status"] = d.get("status")
        elif ev["type"] == "turn_finished":
            v.outcomes.append(d.get("outcome"))
            v.answers.append(d.get("summary"))
    return v


def _fold_snapshot(v, st):
    """The identities the compacted events had, rebuilt from the state."""
    steps = st.get("modelSteps", 0)
    for i in range(steps):
        v.identities[("model_response", i)] = 1
        v.identities[("model_request", i)] = 1
    started = 0
    for m in st.get("conv", []):
        if m.get("role") == "assistant":
            for c in m.get("toolCalls") or []:
                v.calls.setdefault(c["id"], {"name": c.get("name")})["started"] = True
                v.identities[("tool_call", c["id"])] = 1
                started += 1
        elif m.get("role") == "tool":
            cid = m.get("toolCallId")
            v.calls.setdefault(cid, {})["status"] = _status_of_tool_message(m.get("content"))
            v.identities[("tool_result", cid)] = 1
    if st.get("toolCalls", 0) != started:
        v.problems.append("snapshot counts %s tool calls for %d started" %
                          (st.get("toolCalls"), started))
    if st.get("modelTurns", 0) != steps:
        v.problems.append("snapshot counts %s model turns for %d steps" %
                          (st.get("modelTurns"), steps))
    if st.get("turnFinished") and st.get("outcome"):
        v.outcomes.append(st.get("outcome"))
        v.answers.append(st.get("finalText"))


class Verdict:
    def __init__(self, name):
        self.name = name
        self.duplicated_effects = 0
        self.lost_events = 0
        self.duplicated_events = 0
        self.problems = []
        self.settled = None      # "reference" | "visible failure" | None
        self.interrupted = 0

    @property
    def clean(self):
        return (not self.problems and self.duplicated_effects == 0 and self.lost_events == 0
                and self.duplicated_events == 0 and self.settled is not None)

    def describe(self):
        return "%s: %s" % (self.name, "; ".join(self.problems) or "ok")


def check(name, events, reference, executions, effects, files, final, expect_files,
          strict=False):
    """Checks one session. events / reference: stored events (lists of
    dicts); executions: sandboxd's records [{key, op, status, runs}] of this
    session only (key "<uid>/<callId>"); effects: the lines of
    working/effects.log; files: {path: content or None}; final:
    {"state": "completed"|"failed", "reason": ..., "answer": ...};
    expect_files: {path: content} the script writes. strict: a visible
    failure is not acceptable either (where nothing can legitimately fail a
    session, failing is the system not recovering)."""
    r = Verdict(name)
    v, ref = view_of(events), view_of(reference)
    r.problems += v.problems
    if ref.problems:
        r.problems.append("reference: " + "; ".join(ref.problems))
    failed = final.get("state") == "failed"

    # each identity at most once
    for i, n in v.identities.items():
        if n > 1:
            r.duplicated_events += n - 1
            r.problems.append("%s %s recorded %d times" % (i[0], i[1], n))
    # nothing of the reference missing (unless the session visibly failed
    # before getting there: then only what it has must be clean)
    if not failed:
        for i in ref.identities:
            # (the operator records the answer's files after it: a trial
            # read just before that has not lost it)
            if i not in v.identities and i[0] != "artifacts_persisted":
                r.lost_events += 1
                r.problems.append("lost: %s %s" % i)
    for i in v.identities:
        # (what a snapshot cannot tell apart is left to the seq count below)
        if i[0] in ("model_request", "model_response", "tool_call", "tool_result") and \
                i not in ref.identities:
            r.duplicated_events += 1
            r.problems.append("an event the uninterrupted run does not have: %s %s" % i)
    # the same number of events as the uninterrupted run (compaction lands
    # at the same seq when nothing is lost or repeated)
    if not failed and v.seqs and ref.seqs and \
            v.seqs[-1] - v.persisted != ref.seqs[-1] - ref.persisted:
        n, m = v.seqs[-1] - v.persisted, ref.seqs[-1] - ref.persisted
        if n < m:
            r.lost_events += m - n
        else:
            r.duplicated_events += n - m
        r.problems.append("the journal ends at seq %d, the uninterrupted run's at %d" % (n, m))

    # side effects: each tag at most once; a completed call's exactly once
    counts = {}
    for line in effects:
        line = line.strip()
        if line:
            counts[line] = counts.get(line, 0) + 1
    for tag, n in counts.items():
        if n > 1:
            r.duplicated_effects += n - 1
            r.problems.append("effect %s ran %d times" % (tag, n))
    for cid, tag in EFFECT_TAGS.items():
        c = v.calls.get(cid)
        if c is None:
            if counts.get(tag):
                r.duplicated_effects += counts[tag]
                r.problems.append("effect %s ran without a tool_call" % tag)
            continue
        st = c.get("status")
        if st in ("interrupted", "timeout"):
            r.interrupted += st == "interrupted"  # at most once: checked above
        elif st in ("completed", "failed") and counts.get(tag, 0) != 1:
            r.lost_events += 1
            r.problems.append("call %s completed but its effect ran %d times" %
                              (cid, counts.get(tag, 0)))
        elif st is None and not failed:
            r.lost_events += 1
            r.problems.append("call %s has no result" % cid)
    for cid, path in WRITES.items():
        c = v.calls.get(cid)
        if c and c.get("status") == "completed" and files.get(path) != expect_files[path]:
            r.lost_events += 1
            r.problems.append("write %s completed but %s holds %s" %
                              (cid, path, "nothing" if files.get(path) is None else
                               "%d other bytes" % len(files[path])))
        if c and c.get("status") == "interrupted":
            r.interrupted += 1

    # sandboxd: a key is never started twice, and only for started calls
    for e in executions:
        cid = e["key"].split("/", 1)[1] if "/" in e["key"] else e["key"]
        if e.get("runs", 1) != 1:
            r.duplicated_effects += e["runs"] - 1
            r.problems.append("sandboxd ran %s %d times" % (e["key"], e["runs"]))
        if cid not in v.calls or not v.calls[cid].get("started"):
            r.problems.append("sandboxd record %s for a call never journaled" % e["key"])

    # how it settled
    if failed:
        if strict:
            r.problems.append("failed: %s" % final.get("reason"))
        elif final.get("reason"):
            r.settled = "visible failure"
        else:
            r.problems.append("failed without a visible reason")
    elif final.get("state") == "completed":
        want = ref.answers[-1] if ref.answers else None
        if final.get("answer") == want and v.outcomes and v.outcomes[-1] == "completed":
            r.settled = "reference"
        else:
            r.problems.append("settled to %r, the uninterrupted run to %r" %
                              (final.get("answer"), want))
    else:
        r.problems.append("did not settle: %s" % json.dumps(final))
    return r
