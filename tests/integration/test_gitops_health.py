"""deploy/gitops/argocd-health.lua, the Argo
CD health checks, run by a real Lua 5.4 on AgentSession, AgentTrigger,
AgentSessionTemplate and AgentBudget objects in each state the operator
writes (the `obj` global and the returned `hs` table are what Argo CD
provides and reads)."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from terndev import Suite, eq, contains  # noqa: E402

SCRIPT = os.path.join(ROOT, "deploy", "gitops", "argocd-health.lua")


def lua(v):
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # JSON string escapes are valid Lua escapes for this data
    if isinstance(v, list):
        return "{" + ",".join(lua(x) for x in v) + "}"
    return "{" + ",".join("[%s]=%s" % (json.dumps(k), lua(x)) for k, x in v.items()) + "}"


def health(obj, script=SCRIPT):
    prog = ("obj = %s\nlocal f = assert(loadfile(%s))\nlocal hs = f()\n"
            "io.write(hs.status, '\\n', hs.message or '')\n") % (lua(obj), json.dumps(script))
    r = subprocess.run(["lua5.4", "-"], input=prog, capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        raise AssertionError("lua: " + r.stderr)
    status, _, message = r.stdout.partition("\n")
    return status, message


def session(gen=2, **status):
    return {"metadata": {"name": "s", "generation": gen}, "status": status or None}


def cond(t, s, reason="R", message=""):
    return {"type": t, "status": s, "reason": reason, "message": message}


def main():
    suite = Suite()
    cases = [
        ("no_status_is_progressing", {"metadata": {"generation": 1}}, "Progressing", "waiting"),
        ("old_generation_is_progressing",
         session(gen=3, observedGeneration=2, phase="Succeeded",
                 conditions=[cond("Completed", "True")]), "Progressing", "latest spec"),
        ("completed_is_healthy",
         session(observedGeneration=2, phase="Succeeded", result={"summary": "all done"},
                 conditions=[cond("Completed", "True"), cond("Failed", "False")]),
         "Healthy", "all done"),
        ("failed_is_degraded",
         session(observedGeneration=2, phase="Failed",
                 conditions=[cond("Failed", "True", "LimitReached", "maxToolCalls reached")]),
         "Degraded", "maxToolCalls reached"),
        ("blocked_is_degraded",
         session(observedGeneration=2, phase="Blocked", reason="SecretNotFound",
                 message='Secret "openai" not found', conditions=[cond("Failed", "False")]),
         "Degraded", 'SecretNotFound: Secret "openai" not found'),
        ("approval_is_suspended",
         session(observedGeneration=2, phase="WaitingForApproval",
                 pendingApproval={"id": "ap-1", "summary": "git push origin fix"},
                 conditions=[cond("ApprovalPending", "True")]),
         "Suspended", "ap-1: git push origin fix"),
        ("suspend_is_suspended",
         session(observedGeneration=2, phase="Suspended", conditions=[cond("Failed", "False")]),
         "Suspended", "spec.suspend"),
        ("running_is_progressing",
         session(observedGeneration=2, phase="Running",
                 conditions=[cond("TurnRunning", "True"), cond("Completed", "False")]),
         "Progressing", "Running"),
        ("queued_on_a_budget_is_suspended",
         session(observedGeneration=2, phase="Queued", reason="ConcurrencyLimit",
                 message="AgentBudget team: 3 of 3 concurrent sessions run; position 2 of 4",
                 conditions=[cond("Failed", "False")]),
         "Suspended", "queued: ConcurrencyLimit: AgentBudget team: 3 of 3"),
        ("template_missing_is_degraded",
         session(phase="Pending", reason="TemplateNotFound",
                 message="agentsessiontemplate reviewer not found in namespace dev"),
         "Degraded", "TemplateNotFound: agentsessiontemplate reviewer"),
        ("template_kind_is_healthy",
         {"kind": "AgentSessionTemplate", "metadata": {"name": "t"}, "spec": {}},
         "Healthy", "template"),
        ("trigger_without_status_is_progressing",
         {"kind": "AgentTrigger", "metadata": {"generation": 1}, "spec": {}},
         "Progressing", "pick the trigger up"),
        ("trigger_ready_is_healthy",
         dict(session(observedGeneration=2, lastSession="pr-review-0123456789abcdef",
                      active=["pr-review-0123456789abcdef"],
                      conditions=[cond("Ready", "True", "Ready")]),
              kind="AgentTrigger", spec={}),
         "Healthy", "last session pr-review-0123456789abcdef, 1 active"),
        ("trigger_invalid_is_degraded",
         dict(session(observedGeneration=2,
                      conditions=[cond("Ready", "False", "InvalidTimeZone",
                                       "Mars/Olympus: no such zone")]),
              kind="AgentTrigger", spec={}),
         "Degraded", "InvalidTimeZone: Mars/Olympus"),
        ("trigger_suspended",
         dict(session(observedGeneration=2, conditions=[cond("Ready", "True", "Ready")]),
              kind="AgentTrigger", spec={"suspend": True}),
         "Suspended", "spec.suspend"),
        ("trigger_old_generation_is_progressing",
         dict(session(gen=3, observedGeneration=2, conditions=[cond("Ready", "True", "Ready")]),
              kind="AgentTrigger", spec={}),
         "Progressing", "latest spec"),
    ]
    budget = {"kind": "AgentBudget", "metadata": {"name": "team", "generation": 2}}
    budget_cases = [
        ("budget_without_status_is_progressing", dict(budget), "Progressing", "waiting"),
        ("budget_of_an_old_generation_is_progressing",
         dict(budget, status={"observedGeneration": 1, "conditions": [cond("Ready", "True")]}),
         "Progressing", "latest spec"),
        ("enforced_budget_is_healthy",
         dict(budget, status={"observedGeneration": 2, "queued": 2,
                              "window": {"key": "2026-12-01"},
                              "display": {"concurrentSessions": "3/3", "tokens": "900/1000",
                                          "sessionsStarted": "4/-", "cost": "$0.00/-"},
                              "conditions": [cond("Ready", "True", "Enforced"),
                                             cond("Exhausted", "True", "LimitUsed")]}),
         "Healthy", "window 2026-12-01: concurrent 3/3, started 4/-, tokens 900/1000"),
        ("invalid_budget_is_degraded",
         dict(budget, status={"observedGeneration": 2,
                              "conditions": [cond("Ready", "False", "InvalidTimeZone",
                                                  "spec.window.timeZone: Mars/Base")]}),
         "Degraded", "InvalidTimeZone: spec.window.timeZone: Mars/Base"),
    ]
    cases += budget_cases
    cases = [c if len(c) == 5 else c + (SCRIPT,) for c in cases]
    for name, obj, want, msg, script in cases:
        def check(obj=obj, want=want, msg=msg, script=script):
            status, message = health(obj, script)
            eq(status, want, "health status")
            contains(message, msg, "health message")
        suite.run(name, check)
    suite.finish()


if __name__ == "__main__":
    main()
