"""kubectl-tern against tern-dev, through the real kubectl's plugin mechanism
(kubectl finds kubectl-tern on PATH): approve/deny/say/fork/suspend/resume
change exactly the annotations and spec fields the operator reads; get shows
the status. No operator runs here, so every effect is checked on the stored
object; logs, ls and cp, which read through the operator's aggregated API,
are tested in test_stream_api.py (here: their error without it)."""
# runs on: terndev kube
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

SESSION = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: s1}
spec:
  objective: test the plugin
"""


def tern(t, *args, check=True):
    env = dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig,
               PATH=ternlocal.BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
    r = subprocess.run([ternlocal.KUBECTL, "tern", *args], capture_output=True, text=True,
                       env=env, timeout=60)
    if check and r.returncode != 0:
        raise AssertionError("kubectl tern %s: %d %s" % (" ".join(args), r.returncode, r.stderr))
    return r


def set_status(t, status):
    s = t.session("s1")
    s["status"] = status
    t.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(s))


def main():
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.apply_crd()
        t.kubectl("apply", "-f", "-", input=SESSION)
        set_status(t, {"phase": "WaitingForApproval",
                       "pendingApproval": {"id": "ap-1", "tool": "exec_command",
                                           "summary": "git push origin fix"}})

        def approve_defaults_to_pending():
            r = tern(t, "approve", "s1", "--as-user", "alice")
            contains(r.stdout, "approved ap-1", "output")
            a = t.session("s1")["metadata"]["annotations"]
            eq(a.get("tern.dev/approve"), "ap-1", "approve annotation")
            eq(a.get("tern.dev/decided-by"), "alice", "decided-by")

        def deny_with_reason():
            r = tern(t, "deny", "s1", "ap-1", "--reason", "not today")
            contains(r.stdout, "denied ap-1", "output")
            a = t.session("s1")["metadata"]["annotations"]
            eq(a.get("tern.dev/deny"), "ap-1", "deny annotation")
            eq(a.get("tern.dev/reason"), "not today", "reason")
            # without --as-user: who the API server says we are (SelfSubjectReview)
            eq(a.get("tern.dev/decided-by"), t.admin_user, "decided-by from whoami")

        def say_appends():
            r = tern(t, "say", "s1", "first")
            # it tells what happens to the message
            contains(r.stdout, "message added (spec.messages[0]); it is taken once approval "
                     "ap-1 is decided", "output")
            tern(t, "say", "s1", "second")
            eq(t.session("s1")["spec"]["messages"], ["first", "second"], "messages")

        def approve_wrong_id_fails():
            r = tern(t, "approve", "s1", "ap-wrong", check=False)
            eq(r.returncode, 1, "exit code")
            contains(r.stderr, "ap-wrong is not the pending approval of agentsession s1 "
                     "(pending: ap-1); nothing was changed", "message")
            eq(t.session("s1")["metadata"].get("annotations", {}).get("tern.dev/approve"),
               "ap-1", "annotation unchanged (still the earlier, right one)")
            set_status(t, {"phase": "Running"})
            r = tern(t, "deny", "s1", check=False)
            eq(r.returncode, 1, "exit code, nothing pending")
            contains(r.stderr, "agentsession s1 has no pending approval", "message")
            set_status(t, {"phase": "WaitingForApproval",
                           "pendingApproval": {"id": "ap-1", "tool": "exec_command",
                                               "summary": "git push origin fix"}})

        def say_refused_at_a_limit_and_retry():
            failed = {"phase": "Failed", "reason": "LimitReached",
                      "message": "turn 2: maxTokens: used 1686 of 1500",
                      "failure": {"turn": 2, "reason": "LimitReached",
                                  "message": "turn 2: maxTokens: used 1686 of 1500",
                                  "limit": "maxTokens", "used": 1686, "max": 1500,
                                  "blocked": True}}
            t.kubectl("patch", "agentsession", "s1", "--type=merge", "-p",
                      '{"spec":{"limits":{"maxTokens":1500}}}')
            set_status(t, failed)
            before = t.session("s1")["spec"]["messages"]
            r = tern(t, "say", "s1", "go on", check=False)
            eq(r.returncode, 1, "say refused")
            contains(r.stderr, "stopped at a limit: turn 2: maxTokens: used 1686 of 1500; raise "
                     "spec.limits.maxTokens above 1686 first", "why")
            contains(r.stderr, "the message was not added", "nothing changed")
            eq(t.session("s1")["spec"]["messages"], before, "messages unchanged")
            r = tern(t, "retry", "s1", check=False)
            eq(r.returncode, 1, "retry refused at the limit")
            contains(r.stderr, "raise spec.limits.maxTokens above 1686", "why")
            eq("tern.dev/retry" in t.session("s1")["metadata"].get("annotations", {}), False,
               "no retry annotation")
            # the limit raised: both go
            t.kubectl("patch", "agentsession", "s1", "--type=merge", "-p",
                      '{"spec":{"limits":{"maxTokens":3000}}}')
            r = tern(t, "say", "s1", "go on")
            contains(r.stdout, "continues it in a new turn", "say after raising")
            # a transient failure: retry annotates the failed turn
            set_status(t, {"phase": "Failed", "reason": "JobFailed",
                           "failure": {"turn": 3, "reason": "JobFailed",
                                       "message": "turn Job s1-t3 failed"}})
            r = tern(t, "retry", "s1", "--as-user", "bob")
            contains(r.stdout, "retry requested: turn 3 failed (JobFailed: turn Job s1-t3 "
                     "failed)", "output")
            a = t.session("s1")["metadata"]["annotations"]
            eq(a.get("tern.dev/retry"), "3", "retry annotation")
            eq(a.get("tern.dev/decided-by"), "bob", "who")
            # nothing failed: refused
            set_status(t, {"phase": "Succeeded"})
            r = tern(t, "retry", "s1", check=False)
            eq(r.returncode, 1, "exit code")
            contains(r.stderr, "agentsession s1 is Succeeded: there is nothing to retry", "why")
            # resume does not undo a failure, and says what does
            set_status(t, {"phase": "Failed", "reason": "JobFailed"})
            r = tern(t, "resume", "s1")
            contains(r.stdout, "resumed; it is Failed (JobFailed): kubectl tern retry", "resume")
            # an invalid spec: say is refused
            set_status(t, {"phase": "Failed", "reason": "InvalidSpec",
                           "message": "spec.limits.maxCostMicroUSD: model \"x\" has no price"})
            r = tern(t, "say", "s1", "hello", check=False)
            eq(r.returncode, 1, "say refused for an invalid spec")
            contains(r.stderr, "has an invalid spec", "why")

        def fork_annotates():
            tern(t, "fork", "s1", "s1-alt")
            eq(t.session("s1")["metadata"]["annotations"].get("tern.dev/fork"), "s1-alt", "fork")

        def suspend_resume():
            tern(t, "suspend", "s1")
            eq(t.session("s1")["spec"]["suspend"], True, "suspended")
            tern(t, "resume", "s1")
            eq(t.session("s1")["spec"]["suspend"], False, "resumed")

        def get_shows_status():
            r = tern(t, "get", "s1")
            contains(r.stdout, "WaitingForApproval", "phase")
            contains(r.stdout, "git push origin fix", "approval")

        def errors_are_clear():
            r = tern(t, "approve", "nope", check=False)
            eq(r.returncode, 1, "exit code")
            contains(r.stderr, "agentsession nope not found", "message")
            r = tern(t, "frobnicate", "s1", check=False)
            contains(r.stderr, "unknown command", "message")
            # no etcd flag any more: logs reads through the API server
            r = tern(t, "logs", "s1", "--etcd-endpoints", "http://127.0.0.1:1", check=False)
            contains(r.stderr, "unknown flag --etcd-endpoints", "no etcd flag")

        def logs_without_the_api_says_so():
            # the stream.tern.dev API is not installed (no operator here):
            # a message that says what is missing, not a bare 404
            r = tern(t, "logs", "s1", check=False)
            eq(r.returncode, 1, "exit code")
            contains(r.stderr, "stream.tern.dev", "names the API")
            r = tern(t, "cp", "s1:output/report.md", t.dir, check=False)
            eq(r.returncode, 1, "cp exit code")
            contains(r.stderr, "stream.tern.dev", "cp names the API")

        for name, fn in [("approve_defaults_to_pending", approve_defaults_to_pending),
                         ("deny_with_reason", deny_with_reason),
                         ("say_appends", say_appends),
                         ("approve_wrong_id_fails", approve_wrong_id_fails),
                         ("fork_annotates", fork_annotates),
                         ("suspend_resume", suspend_resume),
                         ("get_shows_status", get_shows_status),
                         ("errors_are_clear", errors_are_clear),
                         ("logs_without_the_api_says_so", logs_without_the_api_says_so),
                         ("say_refused_at_a_limit_and_retry", say_refused_at_a_limit_and_retry)]:
            suite.run(name, fn)
    suite.finish()


if __name__ == "__main__":
    main()
