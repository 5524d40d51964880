"""Trusted tools, tern-runner alone (standalone mode: etcd, tern-sandboxd,
tern-fakellm, the scripted MCP server and the git remote of tests/fakes/).

A turn calls MCP tools (one that echoes its request headers, one the spec
does not allow, a side effect, a slow one, a failing one) and publishes a
branch. Checks: each call reaches the MCP server once (its own log) with the
idempotency key, the disallowed one never; the remote gets exactly one
update of the branch, to the sandbox's commit, which the journal records;
the credentials appear nowhere in the journal, the model's requests or the
runner's log. Then the same turn killed (SIGKILL) at every step of every
trusted call, and in the middle of the slow call, then run again: the same
journal, still one call per key at the server and one push. Also: the
stateless revision and JSON answers, a session the server forgets, a
refused MCP credential (the turn ends saying so), an unreachable server
(exit 75, ToolServerUnreachable), a refused push token.
"""
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import wait_for, read_jsonl, mcp_idempotency_key  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT
BIN = ternlocal.BIN
MCP_TOKEN = "mcp-Secr3t-Value-7f1c2a"
GIT_TOKEN = "git-Secr3t-Value-9d4e8b"
SANDBOX_TOKEN = "sandbox-token-for-the-test"
SCRIPT = os.path.join(ROOT, "tests", "data", "trusted-script.json")
TRUSTED_CALLS = ("tracker__headers", "tracker__create_issue", "tracker__slow", "tracker__fail",
                 "publish_branch")


class Env:
    def __init__(self, t):
        self.t = t
        self.n = 0
        self.ws = os.path.join(t.dir, "ws")
        os.makedirs(os.path.join(self.ws, "input"), exist_ok=True)
        self.token_file = os.path.join(t.dir, "sandbox-token")
        with open(self.token_file, "w") as f:
            f.write(SANDBOX_TOKEN + "\n")
        t.start_etcd()
        p = ternlocal.Proc("sandboxd", [os.path.join(BIN, "tern-sandboxd"), "--listen",
                                        "127.0.0.1:0", "--token-file", self.token_file,
                                        "--workspace", self.ws, "--log-level", "warn"],
                           t.logs, stdout_pipe=True)
        line = p.read_line(20)
        t.procs["sandboxd"] = p
        self.sandbox = line.split("addr=")[1].split()[0]
        self.model = t.start_fakellm(SCRIPT)
        self.mcp = {}

    def mcp_server(self, *flags, token=MCP_TOKEN):
        key = (flags, token)
        if key not in self.mcp:
            name = "fakemcp%d" % len(self.mcp)
            url = self.t.start_fakemcp(MCP_TOKEN, *flags, name=name)
            self.mcp[key] = (url, os.path.join(self.t.dir, name + ".jsonl"))
        return self.mcp[key]

    def session(self, mcp_flags=(), mcp_header=None, git_token=GIT_TOKEN, mcp_url=None):
        """A fresh session (uid) with its own git remote and credentials."""
        self.n += 1
        uid = "uid-%d" % self.n
        url, log = self.mcp_server(*mcp_flags)
        remote = self.t.start_gitremote(GIT_TOKEN, repo="r%d.git" % self.n, name="git%d" % self.n)
        trusted = os.path.join(self.t.dir, "trusted-%s" % uid)
        os.makedirs(os.path.join(trusted, "mcp", "tracker"))
        with open(os.path.join(trusted, "mcp", "tracker", "Authorization"), "w") as f:
            f.write((mcp_header or "Bearer " + MCP_TOKEN) + "\n")
        os.makedirs(os.path.join(trusted, "publish", "origin"))
        with open(os.path.join(trusted, "publish", "origin", "token"), "w") as f:
            f.write(git_token + "\n")
        spec = {"metadata": {"uid": uid}, "spec": {
            "objective": "Review working/repo, file the bug, publish the fix branch.",
            "model": {"name": "fake-model"},
            "tools": {"mcpServers": [{"name": "tracker", "url": mcp_url or url,
                                      "headersSecretRef": {"name": "tracker-mcp"},
                                      "allowedTools": ["headers", "create_issue", "slow", "fail",
                                                       "echo", "missing"],
                                      "timeoutSeconds": 20}],
                      "publish": {"remotes": [{"name": "origin", "url": remote,
                                               "tokenSecretRef": {"name": "git", "key": "t"}}]}}}}
        spec_file = os.path.join(self.t.dir, "spec-%s.json" % uid)
        with open(spec_file, "w") as f:
            json.dump(spec, f)
        # a fresh workspace repository per session
        subprocess.run(["rm", "-rf", os.path.join(self.ws, "working", "repo")], check=True)
        return {"uid": uid, "spec": spec_file, "trusted": trusted, "mcp_log": log,
                "git_log": os.path.join(self.t.dir, "git%d.jsonl" % self.n), "remote": remote,
                "runs": 0}

    def runner(self, s, extra=None, wait=True):
        s["runs"] += 1
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "TERN_NAMESPACE": "team-a", "TERN_SESSION": "s-" + s["uid"],
               "TERN_SESSION_UID": s["uid"], "TERN_TURN": "1",
               **self.t.journal_env(),
               "TERN_SANDBOX_TOKEN_FILE": self.token_file,
               "TERN_SESSION_SPEC_FILE": s["spec"], "TERN_SANDBOX_ADDR": self.sandbox,
               "OPENAI_BASE_URL": self.model, "OPENAI_API_KEY": "sk-test",
               "TERN_TRUSTED_DIR": s["trusted"], "TERN_LOCK_TTL_SECONDS": "1",
               "TMPDIR": self.t.dir, "TERN_TERMINATION_LOG": s["spec"] + ".term"}
        open(env["TERN_TERMINATION_LOG"], "w").close()
        env.update(extra or {})
        log = open(os.path.join(self.t.logs, "runner-%s.log" % s["uid"]), "ab")
        p = subprocess.Popen([os.path.join(BIN, "tern-runner"), "turn"], env=env, stdout=log,
                             stderr=log, start_new_session=True)
        if not wait:
            return p
        try:
            return p.wait(timeout=120)
        finally:
            log.close()

    def events(self, s):
        return ternlocal.journal_events(self.t.journal, s["uid"])


def executed(s, tool=None):
    """The calls the MCP server ran for session s (its log), by key."""
    out = {}
    for e in mine(s, read_jsonl(s["mcp_log"])):
        if e.get("executed") and e.get("phase") == "started" and (not tool or
                                                                  e["tool"] == tool):
            out.setdefault(e["key"], []).append(e)
    return out


def mine(s, entries):
    keys = {mcp_idempotency_key(s["uid"], "call_%d_0" % i) for i in range(10)}
    return [e for e in entries if e.get("key") in keys]


def updates(s):
    return [e for e in read_jsonl(s["git_log"]) if "update" in e]


def sandbox_commit(env):
    return subprocess.run(["git", "-C", os.path.join(env.ws, "working", "repo"), "rev-parse",
                           "fix"], capture_output=True, text=True, check=True).stdout.strip()


def no_credentials(env, s, evs):
    blob = json.dumps(evs)
    with open(os.path.join(env.t.dir, "model-requests.jsonl")) as f:
        model = f.read()
    with open(os.path.join(env.t.logs, "runner-%s.log" % s["uid"])) as f:
        log = f.read()
    import base64
    forms = [MCP_TOKEN, GIT_TOKEN, base64.b64encode(("x-access-token:" + GIT_TOKEN).encode())
             .decode()]
    for what, text in (("journal", blob), ("model requests", model), ("runner log", log)):
        for v in forms:
            eq(v in text, False, "a credential in the %s" % what)


def check_done(env, s, evs, want_types=None):
    """The turn's outcome: one call per trusted call at the server, one push."""
    types = [e["type"] for e in evs]
    eq(types[-1], "turn_finished", "the turn finished")
    eq(evs[-1]["data"]["outcome"], "completed", "outcome (%s)" % json.dumps(evs[-1]["data"]))
    if want_types is not None:
        eq(types, want_types, "the same journal as an uninterrupted run")
    eq([e["seq"] for e in evs], list(range(1, len(evs) + 1)), "no gap, no repeat")
    runs = executed(s)
    mine_keys = {mcp_idempotency_key(s["uid"], "call_%d_0" % i) for i in (1, 3, 4, 5)}
    eq(set(runs), mine_keys, "one key per MCP call that ran")
    for k, v in runs.items():
        eq(len(v), 1, "the server ran call %s once (%r)" % (k, v))
    eq([e for e in read_jsonl(s["mcp_log"]) if e.get("tool") in ("secret_tool", "missing")], [],
       "a tool the spec does not allow is never called")
    ups = updates(s)
    commit = sandbox_commit(env)
    eq([(u["update"], u["new"]) for u in ups], [("refs/heads/fix", commit)], "exactly one push")
    pub = [e for e in evs if e["type"] == "tool_result" and e["data"]["tool"] == "publish_branch"]
    eq(len(pub), 1, "one publish result")
    eq(pub[0]["data"]["commit"], commit, "the commit recorded")
    eq(pub[0]["data"]["status"], "completed", "publish status")
    no_credentials(env, s, evs)


def scenario_full_turn(env):
    s = env.session()
    eq(env.runner(s), 0, "runner exit")
    evs = env.events(s)
    check_done(env, s, evs)
    res = {e["data"]["tool"]: e["data"] for e in evs if e["type"] == "tool_result"}
    # the header-echoing tool's output has the credential redacted
    h = res["tracker__headers"]
    contains(h["output"], "Authorization: [redacted]", "echoed headers")
    eq(h.get("redacted"), True, "marked redacted")
    eq(res["tracker__secret_tool"]["status"], "invalid", "not allowed: refused")
    contains(res["tracker__secret_tool"]["output"], "unknown tool", "refusal text")
    contains(res["tracker__create_issue"]["output"], "created issue #", "side effect")
    eq(res["tracker__create_issue"]["server"], "tracker", "server recorded")
    eq(res["tracker__fail"]["status"], "failed", "a tool error")
    eq(res["tracker__slow"]["output"], "slept 1500 ms", "slow tool")
    contains(res["publish_branch"]["output"], "pushed ", "pushed")
    eq(res["publish_branch"]["pushed"], True, "pushed flag")
    # the key went as a header and in _meta
    calls = mine(s, [e for e in read_jsonl(s["mcp_log"]) if e.get("phase") == "started"])
    for c in calls:
        eq(c["keyHeader"], c["keyMeta"], "key in the header and in _meta")
    # the tools offered: allowed and listed only (echo is allowed but never
    # called; missing is allowed but not listed; secret_tool not allowed)
    with open(os.path.join(env.t.dir, "model-requests.jsonl")) as f:
        req = json.loads(f.readline())
    names = sorted(t["function"]["name"] for t in req["tools"])
    eq([n for n in names if "__" in n], ["tracker__create_issue", "tracker__echo",
                                         "tracker__fail", "tracker__headers", "tracker__slow"],
       "MCP tools offered")
    contains(names, "publish_branch", "publish offered")
    with open(os.path.join(env.t.logs, "runner-%s.log" % s["uid"])) as f:
        contains(f.read(), "tracker/missing: not listed by the server", "note in the log")
    env.reference = [e["type"] for e in evs]
    env.reference_events = evs


def crash_points(evs):
    """Append counts right after which a trusted call's steps end: its model
    response, its tool_call, its tool_result."""
    out = []
    for i, e in enumerate(evs):
        d = e["data"]
        if e["type"] == "model_response":
            names = [c["name"] for c in d.get("toolCalls", [])]
            if any(n in TRUSTED_CALLS for n in names):
                out.append(i + 1)
        if e["type"] in ("tool_call", "tool_result") and d.get("tool") in TRUSTED_CALLS:
            out.append(i + 1)
    return out


def scenario_killed_at_every_step(env):
    ref = env.reference
    points = crash_points(env.reference_events)
    eq(len(points) >= 14, True, "crash points %r" % points)
    for n in points:
        s = env.session()
        rc = env.runner(s, {"TERN_TEST_CRASH_AFTER_APPENDS": str(n)})
        eq(rc, -signal.SIGKILL, "killed after append %d" % n)
        eq(env.runner(s), 0, "rerun after a kill after append %d" % n)
        check_done(env, s, env.events(s), ref)
    for point in ("mcp-after-call", "publish-after-bundle", "publish-after-push"):
        s = env.session()
        eq(env.runner(s, {"TERN_TEST_CRASH_AT": point}), -signal.SIGKILL, "killed at " + point)
        eq(env.runner(s), 0, "rerun after " + point)
        evs = env.events(s)
        check_done(env, s, evs, ref)
        if point == "publish-after-push":
            pub = [e for e in evs if e["type"] == "tool_result" and
                   e["data"]["tool"] == "publish_branch"][0]
            eq(pub["data"]["pushed"], False, "the retry found the commit there")
            contains(pub["data"]["output"], "already has", "said so")


def scenario_killed_in_the_middle_of_a_call(env):
    s = env.session()
    p = env.runner(s, wait=False)
    key = mcp_idempotency_key(s["uid"], "call_4_0")
    wait_for("the slow call at the server", lambda: any(
        e.get("key") == key and e.get("phase") == "started" for e in read_jsonl(s["mcp_log"])),
        60)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    eq(env.runner(s), 0, "rerun")
    evs = env.events(s)
    check_done(env, s, evs, env.reference)
    seen = [e for e in read_jsonl(s["mcp_log"]) if e.get("key") == key and
            e.get("method") == "tools/call" and e.get("phase") != "finished"]
    eq(len(seen), 2, "the call was sent twice (%r)" % seen)
    eq([bool(e.get("replayed")) for e in seen], [False, True],
       "and answered from the record the second time")


def scenario_stateless_json_and_forgotten_sessions(env):
    for flags in (("--stateless", "--json"), ("--expire-session-after", "3")):
        s = env.session(mcp_flags=flags)
        eq(env.runner(s), 0, "runner exit with %s" % (flags,))
        check_done(env, s, env.events(s), env.reference)
        log = read_jsonl(s["mcp_log"])
        if "--stateless" in flags:
            eq(any(e.get("error") for e in log), False, "every request had the stateless _meta")
        else:
            inits = [e for e in log if e.get("method") == "initialize"]
            eq(len(inits) >= 2, True, "initialized again after the server forgot the session")


def scenario_refused_mcp_credential(env):
    s = env.session(mcp_header="Bearer not-the-right-token-123")
    eq(env.runner(s), 0, "the turn ends, recorded")
    evs = env.events(s)
    last = evs[-1]["data"]
    eq(last["outcome"], "error", "outcome")
    eq(last["reason"], "tool_server_refused", "reason")
    contains(last["message"], "HTTP 401", "message")
    contains(last["message"], "tracker", "names the server")
    eq("not-the-right-token-123" in json.dumps(evs), False, "the wrong credential is redacted too")
    eq([e["type"] for e in evs if e["type"] == "model_request"], [], "no model call")


def scenario_unreachable_mcp_server(env):
    s = env.session(mcp_url="http://127.0.0.1:%d/mcp" % ternlocal.free_port())
    rc = env.runner(s)
    eq(rc, 75, "retryable exit")
    with open(s["spec"] + ".term") as f:
        term = f.read()
    contains(term, "ToolServerUnreachable: ", "termination message")
    contains(term, "MCP server tracker", "names the server")


def scenario_finishing_needs_no_server(env):
    """A turn cut off after its final answer finishes without the MCP
    servers (they are only listed when tools are needed)."""
    last = max(i for i, e in enumerate(env.reference_events) if e["type"] == "model_response")
    s = env.session()
    eq(env.runner(s, {"TERN_TEST_CRASH_AFTER_APPENDS": str(last + 1)}), -signal.SIGKILL,
       "killed after the final answer")
    with open(s["spec"]) as f:
        spec = json.load(f)
    spec["spec"]["tools"]["mcpServers"][0]["url"] = "http://127.0.0.1:%d/mcp" % \
        ternlocal.free_port()
    with open(s["spec"], "w") as f:
        json.dump(spec, f)
    eq(env.runner(s), 0, "the turn finishes with the server gone")
    evs = env.events(s)
    eq([e["type"] for e in evs], env.reference, "the same journal")


def scenario_refused_push_token(env):
    s = env.session(git_token="wrong-git-token-abcdef")
    eq(env.runner(s), 0, "runner exit")
    evs = env.events(s)
    pub = [e for e in evs if e["type"] == "tool_result" and e["data"]["tool"] == "publish_branch"]
    eq(pub[0]["data"]["status"], "error", "publish refused")
    contains(pub[0]["data"]["output"], "nothing was published", "said so")
    eq(updates(s), [], "no push")
    blob = json.dumps(evs)
    eq("wrong-git-token-abcdef" in blob, False, "the token is redacted")


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        env = Env(t)
        for name, fn in [("full_turn", scenario_full_turn),
                         ("killed_at_every_step", scenario_killed_at_every_step),
                         ("killed_in_the_middle_of_a_call", scenario_killed_in_the_middle_of_a_call),
                         ("stateless_json_and_forgotten_sessions",
                          scenario_stateless_json_and_forgotten_sessions),
                         ("finishing_needs_no_server", scenario_finishing_needs_no_server),
                         ("refused_mcp_credential", scenario_refused_mcp_credential),
                         ("unreachable_mcp_server", scenario_unreachable_mcp_server),
                         ("refused_push_token", scenario_refused_push_token)]:
            if only and not any(o in name for o in only) and name != "full_turn":
                continue
            suite.run(name, fn, env)
    suite.finish()


if __name__ == "__main__":
    main()
