"""End-to-end: team budgets (AgentBudget, docs/budgets.md) on a running
cluster (Local: etcd, the cluster, scripted models, the operator), through
kubectl and the journal:

  - twenty sessions racing a token budget that allows a few calls: what was spent
    never passes the limit, the budget's counters equal the sum of the
    journals, the sessions turned away are Queued with BudgetExhausted (no
    pod, no Job) and the budget is used up (the next call would not fit);
  - a raised limit resumes the parked sessions by themselves;
  - a concurrency cap queues new sessions (phase Queued, their place in
    line in status.queue) and admits them in creation order, also across
    operator restarts (one stopped while all wait, one killed mid-way); an
    idle sandbox gives its slot up to a waiting session;
  - window rollover with the operator's test clock (--test-clock-file):
    a parked session continues in the next window by itself;
  - a runner SIGKILLed between reserve and settle (its model call in
    flight): the retried pod releases the reservation on replay and makes
    the call again, counted once;
  - sessionsStarted holds a new session back (Queued, BudgetExhausted
    SessionsStarted) until the limit is raised; cost counted;
  - `kubectl get agentbudgets` shows used/limit per dimension; Events on
    the session and the budget; tern_budget_* metrics.

Run: /usr/bin/python3 tests/integration/test_e2e_budgets.py [name-substring]
"""
# runs on: terndev kube
import json
import os
import re
import signal
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT


def status(s):
    return s.get("status") or {}


def cond(s, t):
    for c in status(s).get("conditions", []):
        if c.get("type") == t:
            return c
    return {}


def apply_json(t, obj):
    t.kubectl("apply", "-f", "-", input=json.dumps(obj))


def namespace(t, ns):
    t.kubectl("create", "namespace", ns)
    t.apply_runner_rbac(ns)
    t.create_secret("model", "api-key", "test", ns=ns)


def session(t, name, ns, base, labels=None, idle=1):
    """idle: spec.sandbox.idleSuspendSeconds (None: the default, 600)."""
    spec = {"objective": "do the thing",
            "model": {"name": "fake-budget", "baseURL": base,
                      "apiKeySecretRef": {"name": "model", "key": "api-key"}}}
    if idle is not None:
        spec["sandbox"] = {"idleSuspendSeconds": idle}
    apply_json(t, {"apiVersion": "tern.dev/v1alpha1", "kind": "AgentSession",
                   "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
                   "spec": spec})


def budget(t, name, ns, limits, period="Day", tz="UTC", selector=None):
    spec = {"limits": limits, "window": {"period": period, "timeZone": tz}}
    if selector:
        spec["selector"] = selector
    apply_json(t, {"apiVersion": "tern.dev/v1alpha1", "kind": "AgentBudget",
                   "metadata": {"name": name, "namespace": ns}, "spec": spec})


def get_budget(t, name, ns):
    return t.get_json("agentbudget", name, "-n", ns)


def journal(t, name, ns):
    return ternlocal.journal_events(t.journal, t.session(name, ns)["metadata"]["uid"])


def spent(evs):
    tokens = cost = 0
    for e in evs:
        if e["type"] == "model_response":
            u = e["data"].get("usage", {})
            tokens += u.get("prompt_tokens", 0) + u.get("completion_tokens", 0)
            cost += u.get("cost_micro_usd", 0)
    return tokens, cost


def counters(t, ns, name, window):
    """The counters of one budget window, from etcd (read as the test's root)."""
    key = "/tern/v1/b/%s/%s/w/%s" % (ns, name, window)
    for k, v in t.journal.range(key):
        if k == key:
            return json.loads(v)
    return {}


def events(t, ns, regarding, type_=None):
    out = json.loads(t.kubectl("get", "events.v1.events.k8s.io", "-n", ns, "-o", "json"))
    return [(e.get("reason"), e.get("note", "")) for e in out.get("items", [])
            if (e.get("regarding") or {}).get("name") == regarding and
            (type_ is None or e.get("type") == type_)]


def columns(t, kind, name, ns, wide=False):
    args = ["get", kind, name, "-n", ns] + (["-o", "wide"] if wide else [])
    lines = t.kubectl(*args).rstrip("\n").split("\n")
    head, row = lines[0], lines[1]
    starts = [m.start() for m in re.finditer(r"\S+", head)]
    names = head.split()
    out = {}
    for i, n in enumerate(names):
        end = starts[i + 1] if i + 1 < len(starts) else len(row)
        out[n] = row[starts[i]:end].strip()
    return out


def metrics(t):
    return urllib.request.urlopen("http://%s/metrics" % t.metrics_addr, timeout=10).read().decode()


def metric(text, name, **labels):
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all('%s="%s"' % kv in line for kv in labels.items()):
            return float(line.split()[-1])
    return None


def start_model(t, name, script):
    path = os.path.join(t.dir, name + ".json")
    with open(path, "w") as f:
        json.dump(script, f)
    p = ternlocal.Proc(name, [os.path.join(ternlocal.BIN, "tern-fakellm"), "--script", path,
                              "--listen", "127.0.0.1:0"], t.logs, stdout_pipe=True)
    line = p.read_line(20)
    t.procs[name] = p
    return "http://%s/v1" % line.split()[-1]


# one model step, a final answer with a fixed use
USE = {"prompt_tokens": 3000, "completion_tokens": 100, "total_tokens": 3100}
ONE_STEP = {"model": "fake-budget", "steps": [{"reply": {"content": "Done.", "usage": USE}}]}


def ended(t, name, ns, timeout=240):
    return t.wait_session(name, "Succeeded or Queued", lambda s: phase(s) in (
        "Succeeded", "Queued", "Failed"), timeout, ns=ns)


def probe_worst_case(t, ns, base):
    """What one call of ONE_STEP reserves (its body's bytes plus the
    completion bound): a session under a roomy budget, measured from its
    journal."""
    budget(t, "probe", ns, {"tokens": 100000000})
    session(t, "probe", ns, base)
    s = ended(t, "probe", ns)
    eq(phase(s), "Succeeded", "the probe session (%s)" % json.dumps(status(s))[:600])
    evs = journal(t, "probe", ns)
    res = [e for e in evs if e["type"] == "budget_reserved"]
    eq(len(res), 1, "one reservation")
    t.kubectl("delete", "agentbudget", "probe", "-n", ns)
    t.kubectl("delete", "agentsession", "probe", "-n", ns, "--timeout=60s")
    return res[0]["data"]["tokens"]


# ---- scenarios -----------------------------------------------------------------

def scenario_race_a_budget_of_a_few_calls_then_raise_it(t):
    ns = "race"
    namespace(t, ns)
    worst = probe_worst_case(t, ns, t.base)
    # room for two calls in all (after the first settles at 3100, the
    # second fits; a third does not), and only sessions with team=a count
    limit = 3100 + worst + worst // 2
    budget(t, "team", ns, {"tokens": limit}, selector={"matchLabels": {"team": "a"}})
    budget(t, "others", ns, {"tokens": 1}, selector={"matchLabels": {"team": "b"}})
    wait_for("the budget's status", lambda: status(get_budget(t, "team", ns)).get("window"), 60)
    names = ["r%d" % i for i in range(20)]  # twenty sessions race
    for n in names:
        session(t, n, ns, t.base, labels={"team": "a"})

    # parked sessions resume by themselves whenever the counters have room:
    # the race is over when every session Succeeded or waits, nothing is
    # reserved and the budget has no room for another call
    def settled():
        now = {n: t.session(n, ns) for n in names}
        if any(phase(now[n]) not in ("Succeeded", "Queued") for n in names):
            return None
        w = status(get_budget(t, "team", ns)).get("window", {}).get("key")
        c = counters(t, ns, "team", w) if w else {}
        done = [n for n in names if phase(now[n]) == "Succeeded"]
        if c.get("reservedTokens", 0) or c.get("calls", 0) != len(done):
            return None
        if len(done) < len(names) and c.get("tokens", 0) + worst <= limit:
            return None
        return now, w, c
    final, window, c = wait_for("the race settles", settled, 400, interval=0.5)
    done = [n for n in names if phase(final[n]) == "Succeeded"]
    parked = [n for n in names if phase(final[n]) == "Queued"]
    eq(len(done) >= 2 and len(parked) >= 1, True, "a few calls made, the rest turned away: "
       "%s done" % done)
    tokens = cost = responses = refusals = 0
    for n in names:
        evs = journal(t, n, ns)
        tk, co = spent(evs)
        tokens += tk
        cost += co
        responses += sum(e["type"] == "model_response" for e in evs)
        for e in evs:
            if e["type"] == "budget_refused":
                refusals += 1
                d = e["data"]
                eq(d["used"] + d["reserved"] + d["want"] > d["limit"], True,
                   "a refusal that was right: %s" % d)
    eq((c.get("tokens"), c.get("costMicroUSD"), c.get("calls")), (tokens, cost, responses),
       "the counters are the sum of the journals")
    eq(c.get("refused"), refusals, "refusals counted")
    eq(tokens <= limit, True, "spent %d of %d" % (tokens, limit))
    eq(tokens + worst > limit, True, "used up: the next call would not fit")
    eq(counters(t, ns, "others", window).get("calls", 0), 0, "the other team's budget")
    print("    limit %d tokens, worst case %d: %d calls made (%d tokens), %d parked, %d refusals"
          % (limit, worst, len(done), tokens, len(parked), refusals))
    # a parked session: no pod, no Job running, the condition names budget and window
    p = final[parked[0]]
    st = status(p)
    eq((st.get("reason"), st.get("queue", {}).get("budget")), ("BudgetExhausted", "team"),
       "status.reason and queue")
    bc = cond(p, "BudgetExhausted")
    eq((bc.get("status"), bc.get("reason")), ("True", "Tokens"), "BudgetExhausted condition")
    contains(bc.get("message", ""), "AgentBudget team: tokens per Day in window %s" % window,
             "names the budget and the window")
    contains(bc.get("message", ""), "continues by itself when the window ends", "how it goes on")
    wait_for("no sandbox pod of %s" % parked[0], lambda: t.kubectl(
        "get", "pod", parked[0] + "-sandbox", "-n", ns, "--ignore-not-found", "-o",
        "name").strip() == "", 60, interval=0.2)
    running = [j for j in t.get_json("jobs", "-n", ns)["items"]
               if j["metadata"]["name"].startswith(parked[0] + "-t") and
               not (j.get("status") or {}).get("completionTime") and
               not any(x.get("type") in ("Complete", "Failed") and x.get("status") == "True"
                       for x in (j.get("status") or {}).get("conditions", []))]
    eq(running, [], "no turn Job of a parked session runs")
    eq(columns(t, "ags", parked[0], ns).get("PHASE"), "Queued", "PHASE column")
    wait_for("Warning BudgetExhausted on %s" % parked[0], lambda: [
        x for x in events(t, ns, parked[0], "Warning") if x[0] == "BudgetExhausted"], 60)
    wait_for("Warning SessionRefused on the budget", lambda: [
        x for x in events(t, ns, "team", "Warning") if x[0] == "SessionRefused"], 60)
    # kubectl get agentbudgets: used/limit per dimension
    b = wait_for("the budget's status shows the use", lambda: (lambda o: o if (
        status(o).get("used", {}).get("tokens"), status(o).get("queued")) == (
        tokens, len(parked)) else None)(get_budget(t, "team", ns)), 60)
    cols = columns(t, "agentbudgets", "team", ns)
    eq(cols.get("TOKENS"), "%d/%d" % (tokens, limit), "TOKENS column")
    eq((cols.get("CONCURRENT"), cols.get("STARTED"), cols.get("COST")), ("-", "-", "-"),
       "columns of dimensions without a limit: %s" % cols)
    eq(cols.get("QUEUED"), str(len(parked)), "QUEUED column")
    eq(columns(t, "agentbudgets", "team", ns, wide=True).get("WINDOW"), window, "WINDOW column")
    eq(status(b).get("queued"), len(parked), "status.queued")
    m = metrics(t)
    eq(metric(m, "tern_budget_used", namespace=ns, budget="team", dimension="tokens"),
       float(tokens), "tern_budget_used")
    eq(metric(m, "tern_budget_reserved", namespace=ns, budget="team", dimension="tokens"), 0.0,
       "tern_budget_reserved")
    eq(metric(m, "tern_budget_refused", namespace=ns, budget="team"), float(refusals),
       "tern_budget_refused")
    eq((metric(m, "tern_budget_turned_away_total", namespace=ns, budget="team",
               reason="Tokens") or 0) >= len(parked), True, "tern_budget_turned_away_total")
    # raising the limit resumes the parked sessions by themselves
    t.kubectl("patch", "agentbudget", "team", "-n", ns, "--type=merge", "-p",
              json.dumps({"spec": {"limits": {"tokens": 100 * limit}}}))
    for n in parked:
        s = t.wait_session(n, "Succeeded", lambda s: phase(s) == "Succeeded", 240, ns=ns)
        evs = journal(t, n, ns)
        eq([e["data"].get("reason") for e in evs if e["type"] == "retry"][-1:],
           ["BudgetAvailable"], "%s resumed by a retry" % n)
        eq(sum(e["type"] == "model_response" for e in evs), 1, "%s: one model call" % n)
        eq(cond(s, "BudgetExhausted").get("status"), "False", "condition cleared")
    evs = [e for n in names for e in journal(t, n, ns)]
    c = counters(t, ns, "team", window)
    eq(c.get("tokens"), spent(evs)[0], "counters equal the journals after the resume")
    eq(c.get("calls"), len(names), "one call per session")


def scenario_concurrency_queue_in_creation_order_across_restarts(t):
    ns = "queue"
    namespace(t, ns)
    budget(t, "cap", ns, {"concurrentSessions": 2})
    wait_for("the budget's status", lambda: status(get_budget(t, "cap", ns)).get("window"), 60)
    # created in this order, a second apart (the order of creation is not
    # the order of the names)
    # (idle sandboxes are kept 600 s by default: they give their slot up
    # as soon as someone waits)
    order = ["q-e", "q-d", "q-c", "q-b", "q-a"]
    for n in order:
        session(t, n, ns, t.slow_base, idle=None)
        time.sleep(1.1)  # creationTimestamp has second resolution
    # the first two run (slowly); the others wait in line, in creation order
    for i, n in enumerate(order[2:]):
        s = t.wait_session(n, "Queued at %d of 3" % (i + 1), lambda s: phase(s) == "Queued" and
                           status(s).get("queue", {}).get("position") == i + 1 and
                           status(s).get("queue", {}).get("waiting") == 3, 90, ns=ns)
        q = status(s)["queue"]
        eq((q.get("budget"), q.get("reason"), q.get("waiting")), ("cap", "ConcurrentSessions", 3),
           "%s's queue" % n)
        eq(status(s).get("reason"), "ConcurrencyLimit", "reason")
        contains(cond(s, "Ready").get("message", ""), "position %d of 3" % (i + 1),
                 "the place in line in the Ready condition")
        eq(t.kubectl("get", "pod", n + "-sandbox", "-n", ns, "--ignore-not-found",
                     "-o", "name").strip(), "", "no sandbox pod while queued")
    wait_for("Queued Event", lambda: [x for x in events(t, ns, "q-a") if x[0] == "Queued"], 60)
    # the operator restarts while they wait: the same line afterwards
    t.stop("tern-operator")
    t.start_operator(extra=t.operator_extra)
    admitted_seen = []

    def progress():
        now = {n: t.session(n, ns) for n in order}
        held = [n for n in order if phase(now[n]) != "Queued"]
        # at any moment the admitted ones are a prefix of the creation order
        eq(held, order[:len(held)], "admitted in creation order")
        pods = [p for p in t.get_json("pods", "-n", ns)["items"]
                if p["metadata"]["name"].endswith("-sandbox") and
                not p["metadata"].get("deletionTimestamp")]
        eq(len(pods) <= 2, True, "at most 2 sandboxes: %s" % [p["metadata"]["name"]
                                                              for p in pods])
        for n in held:
            if n not in admitted_seen:
                admitted_seen.append(n)
        return all(phase(now[n]) == "Succeeded" for n in order)
    # ... and once more, killed, after the first waiter was admitted
    wait_for("q-c admitted", lambda: progress() is not None and "q-c" in admitted_seen, 400,
             interval=0.3)
    t.stop("tern-operator", signal.SIGKILL)
    t.start_operator(extra=t.operator_extra)
    wait_for("every session Succeeded, two at a time", progress, 400, interval=0.3)
    eq(admitted_seen, order, "the order sessions were admitted in")
    b = get_budget(t, "cap", ns)
    # the last two keep their idle sandboxes (nobody waits any more)
    def two_held():
        o = get_budget(t, "cap", ns)
        used = status(o).get("used", {}).get("concurrentSessions")
        if used != 2:  # say what it is instead, should it never be 2
            pods = [p["metadata"]["name"] for p in t.get_json("pods", "-n", ns)["items"]
                    if p["metadata"]["name"].endswith("-sandbox")]
            raise AssertionError("concurrentSessions %s, sandbox pods %s" % (used, pods))
        return o
    b = wait_for("two slots held", two_held, 90)
    eq(columns(t, "agentbudgets", "cap", ns).get("CONCURRENT"), "2/2", "CONCURRENT column")
    # one holder gave its slot up per waiter (whichever was idle first), and
    # no more: the last one admitted found nobody waiting
    parked = [n for n in order if [x for x in events(t, ns, n) if x[0] == "SandboxParked"
                                   and "waits for a slot" in x[1]]]
    eq(len(parked), 3, "three slots given up for three waiters: %s" % parked)
    eq(order[-1] in parked, False, "the last admitted kept its sandbox: %s" % parked)
    eq(status(b).get("used", {}).get("sessionsStarted"), None, "starts are not counted without "
       "a limit")


def scenario_window_rollover_with_the_test_clock(t):
    ns = "clock"
    namespace(t, ns)
    worst = probe_worst_case(t, ns, t.base)
    # an hourly budget in a zone with a half-hour offset, room for one call
    budget(t, "hourly", ns, {"tokens": 3100 + worst - 1}, period="Hour", tz="Asia/Kolkata")
    b = wait_for("the budget's status", lambda: (lambda o: o if status(o).get("window")
                                                 else None)(get_budget(t, "hourly", ns)), 60)
    first = status(b)["window"]["key"]
    contains(first, "+0530", "an hour of Asia/Kolkata")
    session(t, "c1", ns, t.base)
    eq(phase(ended(t, "c1", ns)), "Succeeded", "c1 made its call")
    session(t, "c2", ns, t.base)
    s = ended(t, "c2", ns)
    eq(phase(s), "Queued", "c2 turned away in this hour")
    contains(cond(s, "BudgetExhausted").get("message", ""), "window %s (Asia/Kolkata)" % first,
             "the window")
    # an hour later (the test clock): a new window, c2 goes on by itself
    with open(t.clock_file, "w") as f:
        f.write("%d\n" % (t.clock_offset + 3600))
    b = wait_for("the next window", lambda: (lambda o: o if status(o).get("window", {}).get(
        "key") not in (None, first) else None)(get_budget(t, "hourly", ns)), 90)
    second = status(b)["window"]["key"]
    s = t.wait_session("c2", "Succeeded", lambda s: phase(s) == "Succeeded", 180, ns=ns)
    evs = journal(t, "c2", ns)
    res = [e["data"]["budgets"][0]["window"] for e in evs if e["type"] == "budget_reserved"]
    eq(res, [first, second], "c2 reserved in the first window, then in the next")
    eq(counters(t, ns, "hourly", second).get("calls"), 1, "one call in the new window")
    eq(counters(t, ns, "hourly", first).get("calls"), 1, "one in the old")
    with open(t.clock_file, "w") as f:
        f.write("%d\n" % t.clock_offset)


def scenario_sessions_started_and_cost(t):
    ns = "starts"
    namespace(t, ns)
    # two starts a day and a dollar: the third session waits for a start;
    # a raised limit lets it go
    budget(t, "daily", ns, {"sessionsStarted": 2, "costMicroUSD": 1000000})
    wait_for("the budget's status", lambda: status(get_budget(t, "daily", ns)).get("window"), 60)
    for n in ("s1", "s2"):
        session(t, n, ns, t.base)
        eq(phase(ended(t, n, ns)), "Succeeded", "%s started and ran" % n)
    session(t, "s3", ns, t.base)
    s = t.wait_session("s3", "Queued on sessionsStarted", lambda s: phase(s) == "Queued" and
                       status(s).get("queue", {}).get("reason") == "SessionsStarted", 90, ns=ns)
    eq(status(s).get("reason"), "BudgetExhausted", "status.reason")
    bc = cond(s, "BudgetExhausted")
    eq((bc.get("status"), bc.get("reason")), ("True", "SessionsStarted"), "the condition")
    contains(bc.get("message", ""), "AgentBudget daily", "names the budget")
    eq(t.kubectl("get", "pod", "s3-sandbox", "-n", ns, "--ignore-not-found", "-o",
                 "name").strip(), "", "no sandbox pod")
    wait_for("Warning BudgetExhausted on s3", lambda: [
        x for x in events(t, ns, "s3", "Warning") if x[0] == "BudgetExhausted"], 60)
    evs = journal(t, "s1", ns) + journal(t, "s2", ns)
    cost = spent(evs)[1]
    # dollars with at least two decimals, as exact as the micro-dollars
    frac = ("%06d" % (cost % 1000000)).rstrip("0").ljust(2, "0")
    want_cost = "$%d.%s/$1.00" % (cost // 1000000, frac)
    seen = {}

    def cols_now():
        seen.update(columns(t, "agentbudgets", "daily", ns))
        return (seen.get("STARTED"), seen.get("COST"), seen.get("TOKENS"),
                seen.get("QUEUED")) == ("2/2", want_cost, "-", "1")
    try:
        wait_for("STARTED and COST columns", cols_now, 60, interval=0.5)
    except ternlocal.Failed:
        raise AssertionError("columns %s, expected STARTED 2/2, COST %s, TOKENS -, QUEUED 1"
                             % (seen, want_cost))
    m = metrics(t)
    eq(metric(m, "tern_budget_used", namespace=ns, budget="daily", dimension="sessionsStarted"),
       2.0, "tern_budget_used sessionsStarted")
    eq(metric(m, "tern_budget_used", namespace=ns, budget="daily", dimension="costMicroUSD"),
       float(cost), "tern_budget_used costMicroUSD")
    eq((metric(m, "tern_budget_turned_away_total", namespace=ns, budget="daily",
               reason="SessionsStarted") or 0) >= 1, True, "turned away, counted")
    t.kubectl("patch", "agentbudget", "daily", "-n", ns, "--type=merge", "-p",
              json.dumps({"spec": {"limits": {"sessionsStarted": 3}}}))
    eq(phase(t.wait_session("s3", "Succeeded", lambda s: phase(s) == "Succeeded", 180, ns=ns)),
       "Succeeded", "s3 started once the limit was raised")
    wait_for("STARTED 3/3", lambda: columns(t, "agentbudgets", "daily", ns).get(
        "STARTED") == "3/3", 60)


def runner_pids(name):
    """Host pids of the `tern-runner turn` processes of session `name` (pods
    are host processes on tern-dev's kubelet and on tern-node)."""
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
                env = f.read().split(b"\0")
            if ("TERN_SESSION=%s" % name).encode() in env:
                pids.append(int(p))
        except OSError:
            continue
    return pids


def scenario_runner_killed_between_reserve_and_settle(t):
    ns = "kill"
    namespace(t, ns)
    # the first request hangs a minute: the runner has reserved and waits
    base = start_model(t, "model-hang", {"model": "fake-budget", "steps": [
        {"faults": [{"type": "slow", "ms": 60000}], "reply": {"content": "Done.", "usage": USE}}]})
    budget(t, "team", ns, {"tokens": 1000000})
    b = wait_for("the budget's status", lambda: (lambda o: o if status(o).get("window")
                                                 else None)(get_budget(t, "team", ns)), 60)
    window = status(b)["window"]["key"]
    session(t, "killed-mid-call", ns, base)
    wait_for("a reservation and the call in flight", lambda: counters(
        t, ns, "team", window).get("reservedTokens", 0) > 0 and [
        e for e in journal(t, "killed-mid-call", ns) if e["type"] == "budget_reserved"], 120)
    # the call in flight is reserved: the metric and the RESERVED column show it,
    # within a second or so of the counters (the operator watches them); 15 s,
    # not more: without the watch only the 30 s refresh would show it
    worst = counters(t, ns, "team", window)["reservedTokens"]
    wait_for("tern_budget_reserved while the call is in flight", lambda: metric(
        metrics(t), "tern_budget_reserved", namespace=ns, budget="team",
        dimension="tokens") == float(worst), 15, interval=0.5)
    wait_for("the RESERVED column", lambda: columns(t, "agentbudgets", "team", ns, wide=True).get(
        "RESERVED") == str(worst), 15, interval=0.5)
    pids = wait_for("the runner process", lambda: runner_pids("killed-mid-call"), 30)
    for p in pids:
        os.kill(p, signal.SIGKILL)
    s = t.wait_session("killed-mid-call", "Succeeded", lambda s: phase(s) == "Succeeded", 300,
                       ns=ns)
    evs = journal(t, "killed-mid-call", ns)
    eq(sum(e["type"] == "budget_reserved" for e in evs), 2,
       "reserved again after the crash (the first one released on replay)")
    eq(sum(e["type"] == "model_response" for e in evs), 1, "one response journaled")
    c = wait_for("nothing reserved", lambda: (lambda c: c if c.get("reservedTokens") == 0
                                              else None)(counters(t, ns, "team", window)), 60)
    tokens, cost = spent(evs)
    eq((c.get("tokens"), c.get("costMicroUSD"), c.get("calls")), (tokens, cost, 1),
       "counted once: the counters are the journal's")
    wait_for("tern_budget_reserved back to 0", lambda: metric(
        metrics(t), "tern_budget_reserved", namespace=ns, budget="team",
        dimension="tokens") == 0.0, 15, interval=0.5)
    eq(tokens, USE["total_tokens"], "the call's use")
    job = t.get_json("job", "killed-mid-call-t1", "-n", ns)
    eq(job["status"].get("failed", 0) >= 1, True, "the killed runner's pod failed, the Job "
       "retried it")


SCENARIOS = [
    ("race_a_budget_of_a_few_calls_then_raise_it",
     scenario_race_a_budget_of_a_few_calls_then_raise_it),
    ("concurrency_queue_in_creation_order_across_restarts",
     scenario_concurrency_queue_in_creation_order_across_restarts),
    ("window_rollover_with_the_test_clock", scenario_window_rollover_with_the_test_clock),
    ("runner_killed_between_reserve_and_settle",
     scenario_runner_killed_between_reserve_and_settle),
    ("sessions_started_and_cost", scenario_sessions_started_and_cost),
]


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.base = start_model(t, "model-budget", ONE_STEP)
        # the first two requests wait a few seconds (the first two sessions
        # hold their slots while the others queue)
        t.slow_base = start_model(t, "model-slow", {"model": "fake-budget", "steps": [
            {"faults": [{"type": "slow", "ms": 20000}] * 2,
             "reply": {"content": "Done.", "usage": USE}}]})
        t.apply_crd()
        prices = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "tern-prices", "namespace": "default"},
                  "data": {"prices.json": json.dumps({"prices": {"fake-budget": {
                      "input": 1000000, "cachedInput": 500000, "output": 2000000}}})}}
        apply_json(t, prices)
        # the test clock: half past the hour of Asia/Kolkata (+05:30), so no
        # hour ends by itself during the suite; the rollover scenario moves
        # it an hour on
        t.clock_file = os.path.join(t.dir, "clock")
        local = time.time() + 19800
        t.clock_offset = int((local // 3600) * 3600 + 1800 - local)
        with open(t.clock_file, "w") as f:
            f.write("%d\n" % t.clock_offset)
        t.metrics_addr = "127.0.0.1:%d" % ternlocal.free_port()
        t.operator_extra = ("--metrics-addr", t.metrics_addr, "--prices-configmap",
                            "default/tern-prices", "--test-clock-file", t.clock_file)
        t.start_operator(extra=t.operator_extra)
        for name, fn in SCENARIOS:
            if only and not any(o in name for o in only):
                continue
            suite.run(name, fn, t)
        if suite.failed:
            for n in ("tern-operator", "tern-dev"):
                print("---- %s log (tail)" % n)
                print(t.logs_of(n)[-4000:])
    suite.finish()


if __name__ == "__main__":
    main()
