"""The chaos campaign's invariant checker (tests/chaos/checker.py) on
synthetic records: an uninterrupted journal is clean against itself, and
each kind of damage the campaign exists to find is reported (a repeated
side effect, a call sandboxd ran twice, a repeated or missing event, a gap,
a write reported as done that is not there, a compacted journal whose
snapshot counts a call twice, a session that settled elsewhere)."""
import copy
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))
sys.path.insert(0, HERE)
import checker  # noqa: E402
from terndev import Suite, eq  # noqa: E402

FILES = {"working/notes.txt": "notes", "output/result.md": "result"}
CALLS = [("call_0_0", "exec_command"), ("call_1_0", "write_file"), ("call_2_0", "exec_command"),
         ("call_3_0", "exec_command"), ("call_4_0", "write_file")]


def journal():
    ev = [{"type": "turn_started", "turn": 1, "data": {"turn": 1}}]
    for step, (cid, tool) in enumerate(CALLS):
        ev += [{"type": "model_request", "turn": 1, "data": {"step": step}},
               {"type": "model_response", "turn": 1, "data": {"step": step}},
               {"type": "tool_call", "turn": 1, "data": {"callId": cid, "tool": tool}},
               {"type": "tool_result", "turn": 1,
                "data": {"callId": cid, "tool": tool, "status": "completed"}}]
    ev += [{"type": "model_request", "turn": 1, "data": {"step": 5}},
           {"type": "model_response", "turn": 1, "data": {"step": 5}},
           {"type": "turn_finished", "turn": 1, "data": {"outcome": "completed",
                                                          "summary": "done"}}]
    for i, e in enumerate(ev):
        e["seq"] = i + 1
    return ev


def records():
    return [{"key": "u/" + cid, "op": "exec" if t == "exec_command" else "put", "runs": 1}
            for cid, t in CALLS]


EFFECTS = ["s0", "s2", "s3"]
FINAL = {"state": "completed", "answer": "done"}


def check(events=None, ex=None, eff=None, files=None, final=None, strict=False):
    ref = journal()
    return checker.check("s", events if events is not None else journal(), ref,
                         ex if ex is not None else records(),
                         eff if eff is not None else list(EFFECTS),
                         files if files is not None else dict(FILES),
                         final or FINAL, FILES, strict=strict)


def t_clean():
    v = check()
    eq(v.clean, True, v.describe())
    eq(v.settled, "reference", "settled")


def t_repeated_effect():
    v = check(eff=EFFECTS + ["s2"])
    eq(v.duplicated_effects, 1, "duplicated effects")
    eq(v.clean, False, "clean")


def t_sandboxd_ran_twice():
    ex = records()
    ex[2]["runs"] = 2
    v = check(ex=ex)
    eq(v.duplicated_effects, 1, "duplicated effects")


def t_record_without_tool_call():
    ex = records() + [{"key": "u/call_9_0", "op": "exec", "runs": 1}]
    eq(check(ex=ex).clean, False, "clean")


def t_repeated_event():
    ev = journal()
    dup = copy.deepcopy(ev[3])  # a tool_call again
    ev.insert(4, dup)
    for i, e in enumerate(ev):
        e["seq"] = i + 1
    v = check(events=ev)
    eq(v.duplicated_events >= 1, True, "duplicated events")
    eq(v.clean, False, "clean")


def t_lost_event():
    ev = [e for e in journal() if not (e["type"] == "tool_result" and
                                       e["data"]["callId"] == "call_3_0")]
    for i, e in enumerate(ev):
        e["seq"] = i + 1
    v = check(events=ev)
    eq(v.lost_events >= 1, True, "lost events")


def t_gap():
    ev = journal()
    del ev[5]
    eq(check(events=ev).clean, False, "clean")


def t_completed_effect_missing():
    v = check(eff=["s0", "s3"])
    eq(v.lost_events, 1, "lost events")


def t_write_not_there():
    v = check(files={"working/notes.txt": None, "output/result.md": "result"})
    eq(v.lost_events, 1, "lost events")


def t_interrupted_write_may_be_missing():
    ev = journal()
    for e in ev:
        if e["type"] == "tool_result" and e["data"]["callId"] == "call_1_0":
            e["data"]["status"] = "interrupted"
    v = check(events=ev, files={"working/notes.txt": None, "output/result.md": "result"})
    eq(v.clean, True, v.describe())
    eq(v.interrupted, 1, "interrupted")


def t_snapshot_counts_twice():
    ev = journal()
    conv = []
    for cid, tool in CALLS:
        conv += [{"role": "assistant", "toolCalls": [{"id": cid, "name": tool}]},
                 {"role": "tool", "toolCallId": cid, "content": "exit code: 0\n"}]
    st = {"conv": conv, "toolCalls": 6, "modelSteps": 5, "modelTurns": 5}
    snap = [{"seq": 21, "type": "snapshot", "data": {"state": st}}] + ev[20:]
    v = check(events=snap)
    eq(v.clean, False, "clean")


def t_settled_elsewhere():
    v = check(final={"state": "completed", "answer": "something else"})
    eq(v.clean, False, "clean")


def t_visible_failure():
    fin = {"state": "failed", "reason": "BackoffLimitExceeded: the Job failed"}
    ev = journal()[:9]
    v = check(events=ev, eff=["s0"], ex=records()[:2], final=fin)
    eq(v.clean, True, v.describe())
    eq(v.settled, "visible failure", "settled")
    eq(check(events=ev, eff=["s0"], ex=records()[:2], final=fin, strict=True).clean, False,
       "strict")
    eq(check(events=ev, eff=["s0"], ex=records()[:2], final={"state": "failed"}).clean, False,
       "a failure without a reason")


def t_artifacts_recorded_once():
    rec = {"type": "artifacts_persisted", "turn": 1,
           "data": {"turn": 1, "configMap": "s-artifacts-t1", "artifacts": []}}
    ev = journal() + [copy.deepcopy(rec)]
    for i, e in enumerate(ev):
        e["seq"] = i + 1
    # the record may come after the trial was read: neither lost nor extra
    eq(check(events=ev).clean, True, "a record the reference lacks")
    ev2 = ev + [dict(copy.deepcopy(rec), seq=len(ev) + 1)]
    v = check(events=ev2)
    eq(v.duplicated_events >= 1, True, "recorded twice")
    eq(v.clean, False, "clean")


def main():
    s = Suite()
    for name, fn in sorted(globals().items()):
        if name.startswith("t_"):
            s.run(name[2:], fn)
    s.finish()


if __name__ == "__main__":
    main()
