"""Sessions read through the Kubernetes API (docs/stream-api.md): the
aggregated API stream.tern.dev/v1alpha1 that the operator serves, proxied
by the API server (kube-apiserver's aggregator, or tern-dev's APIService
proxying) and authorized there with RBAC and in the operator with
SubjectAccessReviews on the AgentSession. kubectl tern logs/ls/cp use only
it: nothing here talks to the journal's etcd or to a sandbox.

Run: /usr/bin/python3 tests/integration/test_stream_api.py [name-substring]
"""
# runs on: terndev kube
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT
SCRIPT = os.path.join(ROOT, "tests", "data", "stream-script.json")
GV = "/apis/stream.tern.dev/v1alpha1"

SESSION = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: %(name)s}
spec:
  objective: run the slow check, write output/report.md, publish it
  permissions:
    tools: [exec_command, read_file, write_file, list_files]
    requiresApproval: ["exec_command:git push*"]
  limits: {timeoutSeconds: 300}
  model: {name: fake-stream, baseURL: %(base)s, apiKeySecretRef: {name: model, key: api-key}}
  sandbox: {idleSuspendSeconds: 600}
"""


def tern_env(t):
    return dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig,
                PATH=ternlocal.BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))


def tern(t, *args, check=True, timeout=120):
    r = subprocess.run([ternlocal.KUBECTL, "tern", *args], capture_output=True, text=True,
                       env=tern_env(t), timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("kubectl tern %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                               r.stderr))
    return r


def raw(t, path, check=True, as_user=None):
    args = ["get", "--raw", path] + (["--as", as_user] if as_user else [])
    return t.kubectl(*args, check=check)


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
        t.wait_api()
        t.kubectl("apply", "-f", os.path.join(ROOT, "deploy", "base", "session-roles.yaml"))
        state = {}

        def discovery_lists_the_api():
            out = t.kubectl("api-resources", "--api-group=stream.tern.dev")
            contains(out, "sessions", "kubectl api-resources")
            contains(out, "stream.tern.dev/v1alpha1", "its group version")
            doc = json.loads(raw(t, GV))
            names = sorted(r["name"] for r in doc["resources"])
            eq(names, ["sessions", "sessions/artifacts", "sessions/content", "sessions/events",
                       "sessions/files", "sessions/log", "sessions/output"], "resources")
            groups = json.loads(raw(t, "/apis"))["groups"]
            eq("stream.tern.dev" in [g["name"] for g in groups], True, "/apis lists the group")

        def follow_shows_a_running_command_and_ends():
            t.kubectl("apply", "-f", "-", input=SESSION % {"name": "live", "base": t.base})
            wait_for("live has a journal", lambda: json.loads(raw(
                t, GV + "/namespaces/default/sessions/live", check=False) or "{}").get(
                "status", {}).get("lastSeq", 0) > 0, 60, interval=0.2)
            p = subprocess.Popen([ternlocal.KUBECTL, "tern", "logs", "-f", "live"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=tern_env(t))
            lines = []  # (time, line)
            t0 = time.monotonic()
            output_seen = None
            try:
                for line in p.stdout:
                    lines.append((time.monotonic() - t0, line.rstrip("\n")))
                    if "approval requested" in line:
                        break
            finally:
                state["follower"] = (p, lines)
            text = "\n".join(ln for _, ln in lines)
            step1 = [tm for tm, ln in lines if "| step 1 of 6" in ln]
            result = [tm for tm, ln in lines if "tool result" in ln and "exec_command" in ln]
            eq(bool(step1) and bool(result), True, "live output and the result:\n" + text)
            # the first step showed up while the command still had ~5 s to run
            eq(result[0] - step1[0] > 3, True, "output as it ran (%.1f s before the result)\n%s" %
               (result[0] - step1[0], text))
            contains(text, "|! the check failed on purpose", "stderr, live")
            contains(text, "exit code: 3", "the exit code")
            contains(text, "y" * 3000, "a 3000-character line, whole")
            contains(text, "approval requested", "the approval")
            output_seen = True
            eq(p.poll(), None, "still following while the session waits")
            state["live"] = output_seen

        def follow_ends_when_the_session_finishes():
            p, lines = state["follower"]
            # the status follows the journal: wait until it shows the request
            t.wait_session("live", "WaitingForApproval",
                           lambda s: phase(s) == "WaitingForApproval", 60)
            tern(t, "deny", "live", "--reason", "not this week")
            out, err = p.communicate(timeout=120)
            eq(p.returncode, 0, "logs -f exit code (%s)" % err)
            contains(err, "session live has finished: Succeeded", "the end")
            contains(out, "denied by %s: not this week" % t.admin_user, "the deny reason")
            contains(out, "turn finished: completed", "the last turn")

        def logs_json_and_full_history():
            r = tern(t, "logs", "live", "-o", "json")
            evs = [json.loads(ln) for ln in r.stdout.splitlines()]
            seqs = [e["seq"] for e in evs]
            eq(seqs, list(range(1, len(seqs) + 1)), "every event once, in order")
            types = [e["type"] for e in evs]
            for ty in ("user_message", "tool_call", "tool_result", "approval_requested",
                       "approval_decided", "turn_finished"):
                eq(ty in types, True, "%s in -o json" % ty)
            dec = [e for e in evs if e["type"] == "approval_decided"][0]
            eq(dec["data"].get("reason"), "not this week", "reason recorded")
            plain = tern(t, "logs", "live").stdout
            contains(plain, "stdout:", "tool output in the plain form")
            contains(plain, "step 6 of 6", "all of it")

        def events_list_pages_and_watch():
            page = json.loads(raw(t, GV + "/namespaces/default/sessions/live/events?limit=2"))
            eq(len(page["items"]), 2, "a page of 2")
            eq(page["metadata"].get("continue"), "3", "continue at seq 3")
            rest = json.loads(raw(t, GV + "/namespaces/default/sessions/live/events?sinceSeq=3"))
            eq(rest["items"][0]["seq"], 3, "from seq 3")
            eq(rest["lastSeq"], rest["items"][-1]["seq"], "to the end")
            w = raw(t, GV + "/namespaces/default/sessions/live/events?watch=true&sinceSeq=2"
                    "&timeoutSeconds=2")
            first = json.loads(w.splitlines()[0])
            eq((first["type"], first["object"]["seq"]), ("ADDED", 2), "watch from seq 2")

        def ls_and_cp_an_artifact():
            r = tern(t, "ls", "live", "output")
            contains(r.stdout, "output/report.md", "kubectl tern ls")
            d = tempfile.mkdtemp(dir=t.dir)
            r = tern(t, "cp", "live:output/report.md", d)
            contains(r.stderr, "live:output/report.md -> %s/report.md" % d, "cp says what")
            with open(os.path.join(d, "report.md")) as f:
                contains(f.read(), "ran six steps", "the artifact")
            r = tern(t, "cp", "live:output/nope.md", d, check=False)
            eq(r.returncode, 1, "a missing file")
            contains(r.stderr, "not_found", "its error")
            art = json.loads(raw(t, GV + "/namespaces/default/sessions/live/artifacts"))
            eq([a["path"] for a in art["items"]], ["output/report.md"], "artifacts")

        def cp_while_the_sandbox_is_parked():
            tern(t, "suspend", "live")
            wait_for("live's sandbox pod gone", lambda: t.kubectl(
                "get", "pod", "live-sandbox", "--ignore-not-found", "-o", "name").strip() == "",
                60, interval=0.3)
            d = tempfile.mkdtemp(dir=t.dir)
            # a persisted artifact comes from the artifact store (no viewer:
            # tests/integration/test_artifacts.py), a workspace file from
            # a viewer
            r = tern(t, "cp", "live:output/report.md", os.path.join(d, "copy.md"), timeout=180)
            with open(os.path.join(d, "copy.md")) as f:
                contains(f.read(), "ran six steps", "the artifact, from the store")
            contains(r.stderr, "persisted artifact", "cp says where from")
            eq(t.get_json("jobs", "-l", "tern.dev/role=viewer")["items"], [],
               "no viewer for a persisted artifact")
            # parked: no token Secret, task ConfigMap or NetworkPolicy; the
            # viewer is made suspended and resumed once the operator made
            # the Secret and the policy it needs
            def pod_children():
                return t.kubectl("get", "secret/live-sandbox-token", "configmap/live-task",
                                 "networkpolicy/live-sandbox", "--ignore-not-found",
                                 "-o", "name").split()
            wait_for("live's pod children removed", lambda: pod_children() == [], 60,
                     interval=0.3)
            contains(tern(t, "ls", "live", timeout=180).stdout, "output/", "ls, from the viewer")
            jobs = t.get_json("jobs", "-l", "tern.dev/role=viewer")["items"]
            eq(len(jobs) >= 1, True, "a viewer Job was made")
            eq([j["spec"].get("suspend") for j in jobs], [False] * len(jobs), "resumed")
            eq(sorted(pod_children()), ["networkpolicy.networking.k8s.io/live-sandbox",
                                        "secret/live-sandbox-token"],
               "the viewer's Secret and policy, no task ConfigMap")
            eq(t.kubectl("get", "pod", "live-sandbox", "--ignore-not-found", "-o", "name")
               .strip(), "", "the sandbox stayed parked")

        def rbac_decides_who_reads_what():
            r = tern(t, "logs", "live", "--as", "alice", check=False)
            eq(r.returncode, 1, "alice, unbound")
            contains(r.stderr, "forbidden", "refused")
            t.kubectl("create", "rolebinding", "alice-views", "--clusterrole=tern-session-viewer",
                      "--user=alice", "-n", "default")
            wait_for("alice may read logs", lambda: tern(t, "logs", "live", "--as", "alice",
                                                         check=False).returncode == 0, 30,
                     interval=0.5)
            contains(tern(t, "logs", "live", "--as", "alice").stdout, "step 6 of 6",
                     "alice reads the log")
            d = tempfile.mkdtemp(dir=t.dir)
            r = tern(t, "cp", "live:output/report.md", d + "/", "--as", "alice", timeout=180)
            contains(r.stderr, "-> %s/report.md (" % d, "a directory given with its slash")
            # a Role with the logs but not the files: the operator's own
            # check (agentsessions/workspace) refuses the contents
            role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": "logs-only", "namespace": "default"},
                    "rules": [{"apiGroups": ["tern.dev"], "resources": ["agentsessions"],
                               "verbs": ["get"]},
                              {"apiGroups": ["stream.tern.dev"],
                               "resources": ["sessions/log", "sessions/files",
                                             "sessions/content"], "verbs": ["get"]}]}
            t.kubectl("apply", "-f", "-", input=json.dumps(role))
            t.kubectl("create", "rolebinding", "bob-logs", "--role=logs-only", "--user=bob",
                      "-n", "default")
            wait_for("bob may read logs", lambda: tern(t, "logs", "live", "--as", "bob",
                                                       check=False).returncode == 0, 30,
                     interval=0.5)
            r = tern(t, "cp", "live:output/report.md", d, "--as", "bob", check=False)
            eq(r.returncode, 1, "bob may not read files")
            contains(r.stderr, 'cannot get resource "agentsessions/workspace"', "why")
            eq(tern(t, "ls", "live", "--as", "bob", check=False).returncode, 0,
               "but may list them")
            r = tern(t, "logs", "live", "--as", "carol", check=False)
            contains(r.stderr, "forbidden", "carol, unbound")

        def a_compacted_journal_starts_at_its_snapshot():
            # what the runner's compaction leaves (journal_compact): a
            # snapshot event after the last one, the summary pointing at it,
            # the events before it deleted
            uid = t.session("live")["metadata"]["uid"]
            base = "/tern/v1/s/%s/" % uid
            sum_ = json.loads(dict(t.journal.range(base + "sum"))[base + "sum"])
            last = sum_["lastSeq"]
            snap = {"v": 1, "seq": last + 1, "type": "snapshot", "turn": 0,
                    "time": "2026-12-01T00:00:00.000000000Z",
                    "data": {"upto": last, "summary": sum_, "state": None}}
            t.journal.put(base + "ev/%016x" % (last + 1), json.dumps(snap))
            t.journal.put(base + "sum", json.dumps(dict(sum_, lastSeq=last + 1,
                                                        snapshotSeq=last + 1)))
            t.journal.call("/v3/kv/deleterange", {
                "key": ternlocal._b64(base + "ev/"),
                "range_end": ternlocal._b64(base + "ev/%016x" % (last + 1))})
            eq([e["seq"] for e in ternlocal.journal_events(t.journal, uid)], [last + 1],
               "only the snapshot is stored")
            r = tern(t, "logs", "live")
            contains(r.stdout, "snapshot of the session up to seq %d" % last, "logs says so")
            eq(len(r.stdout.strip().splitlines()), 1, "and shows what is stored:\n" + r.stdout)
            page = json.loads(raw(t, GV + "/namespaces/default/sessions/live/events"))
            eq([e["seq"] for e in page["items"]], [last + 1], "events from the snapshot")
            r = subprocess.run([ternlocal.KUBECTL, "get", "--raw", GV +
                                "/namespaces/default/sessions/live/events?sinceSeq=1"],
                               capture_output=True, text=True, env=tern_env(t), timeout=60)
            eq(r.returncode != 0, True, "an explicit sinceSeq below it: " + r.stdout)
            contains(r.stderr.lower(), "expired", "410 Expired")

        def the_operator_serves_only_the_api_server():
            host, port = ternlocal.local_ip(), t.api_port
            ctx = ssl.create_default_context(cafile=t.api_pki.path("ca.crt"))
            ctx.check_hostname = False
            try:
                with socket.create_connection((host, port), timeout=5) as s, \
                        ctx.wrap_socket(s) as tls:
                    tls.sendall(b"GET " + GV.encode() + b"/namespaces/default/sessions/live/log "
                                b"HTTP/1.1\r\nHost: x\r\nX-Remote-User: tern-admin\r\n"
                                b"X-Remote-Group: system:masters\r\n\r\n")
                    got = tls.recv(200)
                    raise AssertionError("served without the front-proxy certificate: %r" % got)
            except (ssl.SSLError, ConnectionError, OSError) as e:
                if isinstance(e, AssertionError):
                    raise
            # a certificate of another CA is refused the same way
            other = ternlocal.kubecluster_pki(os.path.join(t.dir, "intruder"))
            other.ca("ca", "intruder-ca")
            other.cert("c", "ca", "front-proxy-client")
            ctx.load_cert_chain(other.path("c.crt"), other.path("c.key"))
            try:
                with socket.create_connection((host, port), timeout=5) as s, \
                        ctx.wrap_socket(s) as tls:
                    tls.sendall(b"GET " + GV.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                                b"X-Remote-User: tern-admin\r\n\r\n")
                    got = tls.recv(200)
                    if got.startswith(b"HTTP/1.1 200"):
                        raise AssertionError("served a stranger's certificate")
            except (ssl.SSLError, ConnectionError, OSError):
                pass

        for name, fn in [
            ("discovery_lists_the_api", discovery_lists_the_api),
            ("follow_shows_a_running_command", follow_shows_a_running_command_and_ends),
            ("follow_ends_when_the_session_finishes", follow_ends_when_the_session_finishes),
            ("logs_json_and_full_history", logs_json_and_full_history),
            ("events_list_pages_and_watch", events_list_pages_and_watch),
            ("ls_and_cp_an_artifact", ls_and_cp_an_artifact),
            ("cp_while_the_sandbox_is_parked", cp_while_the_sandbox_is_parked),
            ("rbac_decides_who_reads_what", rbac_decides_who_reads_what),
            ("a_compacted_journal_starts_at_its_snapshot",
             a_compacted_journal_starts_at_its_snapshot),
            ("the_operator_serves_only_the_api_server", the_operator_serves_only_the_api_server),
        ]:
            if only and not any(o in name for o in only):
                continue
            suite.run(name, fn)
        if suite.failed:
            print("---- tern-operator log (tail)")
            print(t.logs_of("tern-operator")[-5000:])
    suite.finish()


if __name__ == "__main__":
    main()
