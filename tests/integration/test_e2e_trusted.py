"""Trusted tools end to end (operator, turn Jobs, sandbox pod): an
AgentSession with an MCP server and a publish remote whose credentials are
Secrets. The agent (scripted) works in its sandbox, calls MCP tools (one
after an approval), is killed in the middle of a slow MCP call, and
publishes a branch after an approval.

The sandbox escape check: the credentials appear nowhere in the sandbox
pod (the environment and command line of every process in it, every file
it can see outside /usr, /proc, /sys and /dev: /proc/<pid>/root as the
kubelet made it), its spec, the journal, the session's status, the Events,
or any request the model server recorded, while the same scan of the
runner pod does find them (so the scan can see them). Exactly once: the
MCP server ran each call once (its own log), the slow call that was cut
off included, and the remote got exactly one push, the commit the journal
records.
"""
# runs on: terndev kube
import base64
import json
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, condition, wait_for, read_jsonl, mcp_idempotency_key  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT
MCP_TOKEN = "mcp-E2e-Secr3t-4b9f1d0c"
GIT_TOKEN = "git-E2e-Secr3t-8a2c6e1f"
SKIP_DIRS = {"usr", "proc", "sys", "dev", "opt", "bin", "sbin", "lib", "lib64"}

SESSION = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: %(name)s}
spec:
  objective: Review working/repo, file the bug in the tracker and publish the fix.
  permissions:
    requiresApproval: ["publish_branch:*", "mcp:tracker/create_*:*"]
  tools:
    mcpServers:
    - name: tracker
      url: %(mcp)s
      headersSecretRef: {name: tracker-mcp}
      allowedTools: [headers, create_issue, slow]
      timeoutSeconds: 60
    publish:
      remotes:
      - {name: origin, url: "%(remote)s", tokenSecretRef: {name: git-push, key: token}}
  limits: {timeoutSeconds: 600}
  model: {name: fake, baseURL: %(base)s, apiKeySecretRef: {name: model, key: api-key}}
"""


def forms():
    return [MCP_TOKEN, GIT_TOKEN, base64.b64encode(MCP_TOKEN.encode()).decode(),
            base64.b64encode(("x-access-token:" + GIT_TOKEN).encode()).decode()]


def leaks(text):
    return [f for f in forms() if f in text]


def descendants(pid):
    out, pending = [], [pid]
    while pending:
        p = pending.pop()
        out.append(p)
        try:
            for task in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, task)) as f:
                    pending.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def pod_processes(t, pod_name):
    pod = t.get_json("pod", pod_name)
    cid = pod["status"]["containerStatuses"][0]["containerID"]
    eq(cid.startswith("bwrap://"), True, "containerID %s" % cid)
    return descendants(int(cid[len("bwrap://"):]))


def scan_pod(pids):
    """Credentials found in the processes' environments, command lines and
    the files their root shows (outside /usr, /proc, /sys, /dev, /opt)."""
    found = []
    roots = set()
    for p in pids:
        for what in ("environ", "cmdline"):
            try:
                with open("/proc/%d/%s" % (p, what), "rb") as f:
                    data = f.read().decode(errors="replace")
            except OSError:
                continue
            found += ["%s of pid %d: %s" % (what, p, x) for x in leaks(data)]
        roots.add("/proc/%d/root" % p)
    files = 0
    # the files as the pod's processes see them: the roots of those in a
    # mount namespace of their own (the kubelet's bwrap, which is the
    # container's first process, sees the host's)
    host_ns = os.readlink("/proc/self/ns/mnt")
    roots = set()
    for p in pids:
        try:
            if os.readlink("/proc/%d/ns/mnt" % p) != host_ns:
                roots.add((os.readlink("/proc/%d/ns/mnt" % p), "/proc/%d/root" % p))
        except OSError:
            continue
    eq(len({ns for ns, _ in roots}), 1, "one mount namespace in the pod (%r)" % roots)
    for _, root in sorted(roots)[:1]:
        for top in os.listdir(root):
            if top in SKIP_DIRS:
                continue
            for d, dirs, names in os.walk(os.path.join(root, top)):
                for n in names:
                    path = os.path.join(d, n)
                    try:
                        if os.path.islink(path) or not os.path.isfile(path) or \
                                os.path.getsize(path) > (64 << 20):
                            continue
                        with open(path, "rb") as f:
                            data = f.read().decode(errors="replace")
                    except OSError:
                        continue
                    files += 1
                    found += ["file %s: %s" % (path[len(root):], x) for x in leaks(data)]
    return found, files


def runner_pids(name):
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


def events(t, name):
    return ternlocal.journal_events(t.journal, t.session(name)["metadata"]["uid"])


def waiting(t, name):
    return t.wait_session(name, "WaitingForApproval",
                          lambda s: phase(s) in ("WaitingForApproval", "Failed"), 240)


def scenario_review_and_publish(t):
    name = "review"
    t.kubectl("apply", "-f", "-", input=SESSION % {"name": name, "mcp": t.mcp_url,
                                                   "remote": t.remote, "base": t.base})
    s = waiting(t, name)
    eq(phase(s), "WaitingForApproval", "phase (%s)" % json.dumps(s.get("status"))[:600])
    pend = s["status"]["pendingApproval"]
    eq(pend["tool"], "tracker__create_issue", "the MCP call waits")
    contains(pend["summary"], 'tracker/create_issue {"title":"greeting typo"', "summary")

    # the sandbox while it runs: no credential anywhere in it
    sandbox = pod_processes(t, name + "-sandbox")
    found, files = scan_pod(sandbox)
    eq(found, [], "credentials in the sandbox pod")
    eq(files > 3, True, "the scan read the sandbox's files (%d)" % files)
    spec = json.dumps(t.get_json("pod", name + "-sandbox"))
    for secret in ("tracker-mcp", "git-push", "/var/run/tern/trusted"):
        eq(secret in spec, False, "the sandbox pod spec names %s" % secret)

    uid = t.session(name)["metadata"]["uid"]
    out = t.tern("approve", name)
    contains(out, "approved " + pend["id"], "approve")
    # the slow call: kill the runner while the server runs it
    slow_key = mcp_idempotency_key(uid, "call_4_0")
    wait_for("the slow call at the MCP server", lambda: any(
        e.get("key") == slow_key and e.get("phase") == "started"
        for e in read_jsonl(t.mcp_log)), 180)
    pids = wait_for("the runner process", lambda: runner_pids(name), 30)
    # the runner pod, for comparison: it does hold the credentials
    rfound, _ = scan_pod(descendants(pids[0]))
    eq(any(GIT_TOKEN in f for f in rfound) and any(MCP_TOKEN in f for f in rfound), True,
       "the scan finds the credentials in the runner pod (%r)" % rfound)
    for p in pids:
        os.kill(p, signal.SIGKILL)
    s = waiting(t, name)
    pend = s["status"]["pendingApproval"]
    eq(pend["tool"], "publish_branch", "the push waits (%s)" % json.dumps(s["status"])[:600])
    eq(pend["summary"], "push branch fix of working/repo to origin as review/fix", "summary")
    t.tern("approve", name)
    s = t.wait_session(name, "Completed", lambda s: condition(s, "Completed") == "True" or
                       phase(s) == "Failed", 240)
    eq(phase(s), "Succeeded", "phase (%s)" % json.dumps(s.get("status"))[:800])
    contains(s["status"]["result"]["summary"], "published review/fix", "result")

    evs = events(t, name)
    res = {e["data"]["tool"]: e["data"] for e in evs if e["type"] == "tool_result"}
    contains(res["tracker__headers"]["output"], "Authorization: [redacted]", "headers echoed")
    eq(res["tracker__secret_tool"]["status"], "invalid", "not allowed")
    eq(res["tracker__slow"]["output"], "slept 4000 ms", "the slow call's result")
    pub = res["publish_branch"]
    eq(pub["status"], "completed", "published")
    # exactly once, by the server's and the remote's own logs
    keys = {mcp_idempotency_key(uid, "call_%d_0" % i): tool for i, tool in
            ((1, "headers"), (3, "create_issue"), (4, "slow"))}
    log = [e for e in read_jsonl(t.mcp_log) if e.get("key") in keys]
    ran = [e["key"] for e in log if e.get("executed") and e.get("phase") == "started"]
    eq(sorted(ran), sorted(keys), "each MCP call ran once (%r)" % log)
    eq(any(e.get("replayed") and e["key"] == slow_key for e in log), True,
       "the cut-off call was sent again and answered from the record")
    eq([e for e in read_jsonl(t.mcp_log) if e.get("tool") == "secret_tool"], [],
       "the tool outside the allowlist was never called")
    ups = [e for e in read_jsonl(t.git_log) if "update" in e]
    eq([(u["update"], u["new"]) for u in ups], [("refs/heads/review/fix", pub["commit"])],
       "exactly one push, of the commit the journal records")
    job = t.get_json("job", name + "-t2")
    eq(job["status"].get("failed", 0) >= 1, True, "the killed attempt was retried")

    # nowhere the credentials: journal, status, Events, the model's requests
    eq(leaks(json.dumps(evs)), [], "credentials in the journal")
    eq(leaks(json.dumps(t.session(name))), [], "credentials in the session")
    eq(leaks(t.kubectl("get", "events", "-o", "json")), [], "credentials in the Events")
    with open(os.path.join(t.dir, "model-requests.jsonl")) as f:
        eq(leaks(f.read()), [], "credentials in the model's requests")


def scenario_missing_secret_blocks_with_a_reason(t):
    name = "nosecret"
    manifest = (SESSION % {"name": name, "mcp": t.mcp_url, "remote": t.remote, "base": t.base}
                ).replace("name: git-push", "name: git-absent")
    t.kubectl("apply", "-f", "-", input=manifest)
    s = t.wait_session(name, "Blocked", lambda s: (s.get("status") or {}).get("reason") ==
                       "SecretNotFound", 120)
    contains(s["status"]["message"], "spec.tools.publish.remotes[0].tokenSecretRef", "message")
    evs = t.kubectl("get", "events", "--field-selector", "involvedObject.name=" + name)
    contains(evs, "SecretNotFound", "a Warning Event")
    t.create_secret("git-absent", "token", GIT_TOKEN)
    t.wait_session(name, "going on", lambda s: phase(s) in ("WaitingForApproval", "Failed"), 240)
    eq(phase(t.session(name)), "WaitingForApproval", "it goes on once the Secret is there")


def scenario_refused_mcp_credential_fails_the_turn(t):
    name = "badmcp"
    t.create_secret("tracker-wrong", "Authorization", "Bearer not-the-token-0000")
    manifest = (SESSION % {"name": name, "mcp": t.mcp_url, "remote": t.remote, "base": t.base}
                ).replace("name: tracker-mcp", "name: tracker-wrong")
    t.kubectl("apply", "-f", "-", input=manifest)
    s = t.wait_session(name, "Failed", lambda s: phase(s) == "Failed", 240)
    msg = json.dumps(s["status"])
    contains(msg, "HTTP 401", "the status says why")
    contains(msg, "tracker", "and which server")
    eq("not-the-token-0000" in msg, False, "not the credential itself")


def scenario_cel_rules_on_kube(t):
    if t.cluster != "kube":
        return  # tern-dev evaluates no CEL (docs/tern-dev.md)
    import subprocess
    env = dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig)
    for f, says in (("approval-mcp-unknown-server.yaml", "a server of that name"),
                    ("approval-publish-not-offered.yaml", "needs spec.tools.publish")):
        path = os.path.join(ROOT, "tests", "data", "invalid-sessions", f)
        r = subprocess.run([ternlocal.KUBECTL, "apply", "-f", path], capture_output=True,
                           text=True, env=env, timeout=60)
        eq(r.returncode != 0, True, "kube-apiserver accepted %s" % f)
        contains(r.stderr, says, "the CEL rule's message for %s" % f)


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.base = t.start_fakellm(os.path.join(ROOT, "tests", "data", "e2e-trusted-script.json"))
        t.mcp_url = t.start_fakemcp(MCP_TOKEN)
        t.mcp_log = os.path.join(t.dir, "fakemcp.jsonl")
        t.remote = t.start_gitremote(GIT_TOKEN, repo="app.git")
        t.git_log = os.path.join(t.dir, "gitremote.jsonl")
        t.apply_crd()
        t.apply_runner_rbac()
        t.create_secret("model", "api-key", "test")
        t.create_secret("tracker-mcp", "Authorization", "Bearer " + MCP_TOKEN)
        t.create_secret("git-push", "token", GIT_TOKEN)
        t.start_operator()
        for name, fn in [("review_and_publish", scenario_review_and_publish),
                         ("missing_secret_blocks_with_a_reason",
                          scenario_missing_secret_blocks_with_a_reason),
                         ("refused_mcp_credential_fails_the_turn",
                          scenario_refused_mcp_credential_fails_the_turn),
                         ("cel_rules_on_kube", scenario_cel_rules_on_kube)]:
            if only and not any(o in name for o in only):
                continue
            suite.run(name, fn, t)
        if suite.failed:
            print("---- operator log (tail)")
            print(t.logs_of("tern-operator")[-3000:])
    suite.finish()


if __name__ == "__main__":
    main()
