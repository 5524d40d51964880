"""End-to-end: AgentTrigger webhooks and schedules (issue 22), on the
operator's HTTPS webhook receiver.

Webhook: a delivery signed with the Secret's key (X-Hub-Signature-256) starts
one session named from X-GitHub-Delivery that runs with its template; a bad
signature, a body over the bound (announced by Content-Length, and
chunked), a payload without the mapped field, a filtered event, a missing
Secret and a suspended trigger start none (each answered with its status,
counted in status.counts, told by an Event that never contains the key or
the signature); a replayed delivery and concurrent deliveries of one id (to
two operator replicas) make exactly one session; an operator that dies after
verifying a delivery but before creating its session (and one that dies
after creating it, before answering) leaves one session once the sender
redelivers.

Schedule: an every-minute trigger starts a session named by its slot; after
downtime (the schedules' clock moved two days ahead with
--trigger-clock-skew) one session starts for the latest missed slot and a
trigger with startingDeadlineSeconds misses it; Forbid waits while its
session runs.

Run: /usr/bin/python3 tests/integration/test_triggers.py [name-substring]
"""
# runs on: terndev kube
import hashlib
import hmac
import http.client
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, condition, wait_for, free_port  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT
SCRIPT = os.path.join(ROOT, "tests", "data", "e2e-fast-script.json")
KEY = "s3cr3t-webhook-key"
MAX_BODY = 1 << 20  # TERN_WEBHOOK_MAX_BODY

TEMPLATE = """apiVersion: tern.dev/v1alpha1
kind: AgentSessionTemplate
metadata: {name: %(name)s}
spec:
  model: {name: fake-fast, baseURL: %(base)s, apiKeySecretRef: {name: model, key: api-key}}
  limits: {maxToolCalls: 9, timeoutSeconds: 300}
  sandbox: {idleSuspendSeconds: 0}
%(extra)s"""

WEBHOOK_TRIGGER = """apiVersion: tern.dev/v1alpha1
kind: AgentTrigger
metadata: {name: %(name)s}
spec:
  templateRef: {name: reviewer}
  objective: "Review pull request #{{ number }}: {{ pull_request.title }}"
  context: "{{ pull_request.html_url }}"
  suspend: %(suspend)s
  webhook:
    secretRef: {name: %(secret)s, key: secret}
    filter:
    - {header: X-GitHub-Event, values: [pull_request]}
    - {field: action, values: [opened, reopened]}
"""


def pr_payload(number=7, title="Fix the parser", url=True):
    pr = {"title": title, "number": number}
    if url:
        pr["html_url"] = "https://git.example/pr/%d" % number
    return json.dumps({"action": "opened", "number": number, "pull_request": pr}).encode()


def sign(body, key=KEY):
    return "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


def session_name(trigger, delivery):
    return "%s-%s" % (trigger, hashlib.sha256(("webhook:" + delivery).encode()).hexdigest()[:16])


class Hook:
    """HTTPS client of one operator's webhook receiver (the test's CA)."""

    def __init__(self, port, cafile):
        self.port = port
        self.ctx = ssl.create_default_context(cafile=cafile)

    def post(self, trigger, body, delivery=None, sig=None, event="pull_request", chunked=False,
             timeout=60):
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx,
                                        timeout=timeout)
        h = {"Content-Type": "application/json", "X-GitHub-Event": event}
        if delivery:
            h["X-GitHub-Delivery"] = delivery
        if sig:
            h["X-Hub-Signature-256"] = sig
        try:
            if chunked:
                def gen():
                    for i in range(0, len(body), 65536):
                        yield body[i:i + 65536]
                c.request("POST", "/hooks/default/" + trigger, body=gen(), headers=h,
                          encode_chunked=True)
            else:
                c.request("POST", "/hooks/default/" + trigger, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, (json.loads(data) if data else {})
        finally:
            c.close()


def make_cert(dirpath):
    cert, key = os.path.join(dirpath, "hook.crt"), os.path.join(dirpath, "hook.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=tern-webhook", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


def start_op(t, name, cert, key, extra=()):
    port = free_port()
    t.start_operator(name=name, extra=["--leader-elect", "--lease-namespace", "default",
                                       "--webhook-addr", "127.0.0.1:%d" % port,
                                       "--webhook-tls-cert", cert, "--webhook-tls-key", key,
                                       *extra])
    hook = Hook(port, cert)
    wait_for("%s webhook receiver" % name, lambda: hook_ready(hook), 60, interval=0.2)
    args = t.procs[name].p.args
    ready = "http://%s/readyz" % args[args.index("--health-addr") + 1]
    wait_for("%s informers synced" % name, lambda: url_ok(ready), 60, interval=0.2)
    return hook


def url_ok(url):
    try:
        return urllib.request.urlopen(url, timeout=5).status == 200
    except OSError:
        return False


def hook_ready(hook):
    try:
        c = http.client.HTTPSConnection("127.0.0.1", hook.port, context=hook.ctx, timeout=5)
        c.request("GET", "/healthz")
        return c.getresponse().status == 200
    except OSError:
        return False


def trigger_sessions(t, trigger):
    items = t.get_json("agentsessions", "-l", "tern.dev/trigger=" + trigger)["items"]
    return sorted(i["metadata"]["name"] for i in items)


def trigger_status(t, name):
    return t.get_json("agenttrigger", name).get("status") or {}


def counts(t, name):
    return trigger_status(t, name).get("counts") or {}


def wait_count(t, name, outcome, n, timeout=60):
    return wait_for("%s counts.%s == %d" % (name, outcome, n),
                    lambda: counts(t, name).get(outcome, 0) == n, timeout, interval=0.2)


def trigger_events(t, name):
    evs = t.get_json("events", "--field-selector", "involvedObject.name=" + name)
    return [(e.get("type"), e.get("reason"), e.get("message") or e.get("note") or "")
            for e in evs.get("items", [])]


def wait_event(t, name, typ, reason, timeout=60):
    def check():
        for ty, r, m in trigger_events(t, name):
            if ty == typ and r == reason:
                return m
        return None
    return wait_for("%s Event %s %s" % (name, typ, reason), check, timeout, interval=0.3)


def assert_no_secret(msg, sig=None):
    if KEY in msg or (sig and sig[7:] in msg):
        raise AssertionError("an Event echoes the key or the signature: %r" % msg)


def apply_webhook_trigger(t, name, suspend="false", secret="hook"):
    t.kubectl("apply", "-f", "-", input=WEBHOOK_TRIGGER % {"name": name, "suspend": suspend,
                                                           "secret": secret})
    wait_for("%s Ready" % name,
             lambda: any(c.get("type") == "Ready" and c.get("status") == "True"
                         for c in trigger_status(t, name).get("conditions", [])), 60,
             interval=0.2)


# ---- webhook scenarios -------------------------------------------------------

def scenario_good_signature(t):
    apply_webhook_trigger(t, "pr-good")
    body, d = pr_payload(7), "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    st, ans = t.hook.post("pr-good", body, d, sign(body))
    eq(st, 201, "status (%r)" % ans)
    want = session_name("pr-good", d)
    eq(ans.get("session"), want, "the session is named from the delivery id")
    s = t.session(want)
    eq(s["spec"]["objective"], "Review pull request #7: Fix the parser", "objective")
    eq(s["spec"]["context"]["text"], "https://git.example/pr/7", "context")
    eq(s["spec"]["templateRef"]["name"], "reviewer", "templateRef")
    eq(s["metadata"]["annotations"]["tern.dev/delivery"], d, "delivery annotation")
    eq(s["metadata"]["ownerReferences"][0]["kind"], "AgentTrigger", "owned by the trigger")
    s = t.wait_session(want, "Succeeded", lambda s: phase(s) in ("Succeeded", "Failed"), 240)
    eq(phase(s), "Succeeded", "the session runs with its template (message %r)"
       % s["status"].get("message"))
    wait_count(t, "pr-good", "Created", 1)
    st = trigger_status(t, "pr-good")
    eq(st.get("lastSession"), want, "status.lastSession")
    eq(st.get("lastDelivery"), d, "status.lastDelivery")
    eq(st.get("webhookPath"), "/hooks/default/pr-good", "status.webhookPath")
    wait_event(t, "pr-good", "Normal", "SessionCreated")


def scenario_bad_signature(t):
    apply_webhook_trigger(t, "pr-bad")
    body = pr_payload(8)
    wrong = sign(body, "not-the-key")
    st, ans = t.hook.post("pr-bad", body, "bad-1", wrong)
    eq(st, 401, "status (%r)" % ans)
    st, _ = t.hook.post("pr-bad", body, "bad-2", None)
    eq(st, 401, "no signature at all")
    tampered = pr_payload(8, title="Something else")
    st, _ = t.hook.post("pr-bad", tampered, "bad-3", sign(body))
    eq(st, 401, "a body changed after signing")
    wait_count(t, "pr-bad", "BadSignature", 3)
    eq(trigger_sessions(t, "pr-bad"), [], "no session")
    msg = wait_event(t, "pr-bad", "Warning", "BadSignature")
    assert_no_secret(msg, wrong)
    for _, _, m in trigger_events(t, "pr-bad"):
        assert_no_secret(m, wrong)


def scenario_replayed_delivery(t):
    apply_webhook_trigger(t, "pr-replay")
    body, d = pr_payload(9), "replay-1"
    st, _ = t.hook.post("pr-replay", body, d, sign(body))
    eq(st, 201, "first delivery")
    for _ in range(3):
        st, ans = t.hook.post("pr-replay", body, d, sign(body))
        eq(st, 200, "redelivery (%r)" % ans)
        eq(ans.get("outcome"), "Duplicate", "outcome")
    eq(trigger_sessions(t, "pr-replay"), [session_name("pr-replay", d)], "one session")
    wait_count(t, "pr-replay", "Duplicate", 3)
    eq(counts(t, "pr-replay").get("Created"), 1, "Created")


def scenario_oversize_body(t):
    apply_webhook_trigger(t, "pr-big")
    big = b'{"action":"opened","pad":"' + b"x" * MAX_BODY + b'"}'
    st, ans = t.hook.post("pr-big", big, "big-1", sign(big))
    eq(st, 413, "announced by Content-Length (%r)" % ans)
    st, ans = t.hook.post("pr-big", big, "big-2", sign(big), chunked=True)
    eq(st, 413, "chunked (%r)" % ans)
    # a body of exactly the bound is read whole
    edge = b" " * (MAX_BODY - len(pr_payload(10))) + pr_payload(10)
    st, ans = t.hook.post("pr-big", edge, "big-3", sign(edge))
    eq(st, 201, "a body of exactly the bound (%r)" % ans)
    wait_count(t, "pr-big", "TooLarge", 2)
    wait_event(t, "pr-big", "Warning", "PayloadTooLarge")
    eq(trigger_sessions(t, "pr-big"), [session_name("pr-big", "big-3")], "only the one in bounds")


def scenario_missing_mapped_field(t):
    apply_webhook_trigger(t, "pr-map")
    body = pr_payload(11, url=False)
    st, ans = t.hook.post("pr-map", body, "map-1", sign(body))
    eq(st, 422, "status (%r)" % ans)
    contains(ans.get("message", ""), "pull_request.html_url", "names the field")
    msg = wait_event(t, "pr-map", "Warning", "MappedFieldMissing")
    contains(msg, "pull_request.html_url", "Event names the field")
    wait_count(t, "pr-map", "Malformed", 1)
    eq(trigger_sessions(t, "pr-map"), [], "no session")


def scenario_filtered_and_malformed(t):
    apply_webhook_trigger(t, "pr-filter")
    body = pr_payload(12)
    st, _ = t.hook.post("pr-filter", body, "f-1", sign(body), event="push")
    eq(st, 202, "another event is filtered")
    closed = json.dumps({"action": "closed", "number": 1,
                         "pull_request": {"title": "x", "html_url": "u"}}).encode()
    st, _ = t.hook.post("pr-filter", closed, "f-2", sign(closed))
    eq(st, 202, "another action is filtered")
    st, _ = t.hook.post("pr-filter", b"not json", "f-3", sign(b"not json"))
    eq(st, 400, "not JSON")
    st, _ = t.hook.post("pr-filter", body, None, sign(body))
    eq(st, 400, "no delivery id")
    wait_count(t, "pr-filter", "Filtered", 2)
    wait_count(t, "pr-filter", "Malformed", 2)
    wait_event(t, "pr-filter", "Normal", "Filtered")
    eq(trigger_sessions(t, "pr-filter"), [], "no session")


def scenario_secret_missing_and_suspend(t):
    apply_webhook_trigger(t, "pr-nosecret", secret="absent")
    body = pr_payload(13)
    st, ans = t.hook.post("pr-nosecret", body, "s-1", sign(body))
    eq(st, 503, "no Secret (%r)" % ans)
    wait_event(t, "pr-nosecret", "Warning", "SecretNotFound")
    apply_webhook_trigger(t, "pr-suspended", suspend="true")
    st, _ = t.hook.post("pr-suspended", body, "s-2", sign(body))
    eq(st, 503, "suspended")
    eq(trigger_sessions(t, "pr-suspended"), [], "no session while suspended")
    apply_webhook_trigger(t, "pr-suspended", suspend="false")
    st, _ = t.hook.post("pr-suspended", body, "s-2", sign(body))
    eq(st, 201, "the redelivery after resuming")
    st, _ = t.hook.post("http-404", body, "s-3", sign(body))
    eq(st, 404, "no such trigger")


def scenario_concurrent_same_delivery(t):
    apply_webhook_trigger(t, "pr-race")
    body, d = pr_payload(14), "race-1"
    hooks = [t.hook, t.hook_b]
    results, barrier = [], threading.Barrier(8)

    def one(i):
        barrier.wait()
        results.append(hooks[i % 2].post("pr-race", body, d, sign(body))[0])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    eq(sorted(results), [200] * 7 + [201], "one Created, the rest Duplicate")
    eq(trigger_sessions(t, "pr-race"), [session_name("pr-race", d)], "exactly one session")
    wait_count(t, "pr-race", "Duplicate", 7)
    eq(counts(t, "pr-race").get("Created"), 1, "Created")


def scenario_restart_between_receipt_and_creation(t):
    apply_webhook_trigger(t, "pr-crash")
    body = pr_payload(15)
    # dies after verifying, before creating: the sender sees no answer
    faulty = start_op(t, "op-fault-before", t.cert, t.key,
                      ["--fault", "webhook-exit-before-create"])
    try:
        faulty.post("pr-crash", body, "crash-1", sign(body), timeout=20)
        raise AssertionError("the faulty operator answered")
    except (OSError, http.client.HTTPException):
        pass
    wait_for("the faulty operator exited", lambda: not t.procs["op-fault-before"].alive(), 30)
    t.stop("op-fault-before")
    eq(trigger_sessions(t, "pr-crash"), [], "nothing created before the crash")
    st, _ = t.hook.post("pr-crash", body, "crash-1", sign(body))  # the sender's retry
    eq(st, 201, "the redelivery creates it")
    # dies after creating, before answering: the retry finds it
    faulty = start_op(t, "op-fault-after", t.cert, t.key, ["--fault", "webhook-exit-after-create"])
    try:
        faulty.post("pr-crash", body, "crash-2", sign(body), timeout=20)
        raise AssertionError("the faulty operator answered")
    except (OSError, http.client.HTTPException):
        pass
    wait_for("the faulty operator exited", lambda: not t.procs["op-fault-after"].alive(), 30)
    t.stop("op-fault-after")
    st, ans = t.hook.post("pr-crash", body, "crash-2", sign(body))
    eq((st, ans.get("outcome")), (200, "Duplicate"), "the redelivery finds the session")
    eq(trigger_sessions(t, "pr-crash"),
       sorted([session_name("pr-crash", "crash-1"), session_name("pr-crash", "crash-2")]),
       "one session per delivery")


def scenario_metrics(t):
    apply_webhook_trigger(t, "pr-metrics")
    body = pr_payload(16)
    eq(t.hook.post("pr-metrics", body, "m-1", sign(body, "wrong"))[0], 401, "bad signature")
    eq(t.hook.post("pr-metrics", body, "m-2", sign(body))[0], 201, "good signature")
    text = urllib.request.urlopen(t.metrics_url, timeout=10).read().decode()
    contains(text, 'tern_trigger_deliveries_total{outcome="Created"}', "metrics")
    contains(text, 'tern_trigger_deliveries_total{outcome="BadSignature"}', "metrics")


# ---- schedule scenarios ------------------------------------------------------

SCHEDULE_TRIGGER = """apiVersion: tern.dev/v1alpha1
kind: AgentTrigger
metadata: {name: %(name)s}
spec:
  templateRef: {name: %(template)s}
  objective: "nightly run for {{ scheduledTime }}"
  schedule:
    cron: "%(cron)s"
    timeZone: %(tz)s
    concurrencyPolicy: %(policy)s
%(extra)s"""


def apply_schedule(t, name, cron, tz="UTC", policy="Allow", template="reviewer", extra=""):
    t.kubectl("apply", "-f", "-", input=SCHEDULE_TRIGGER % {
        "name": name, "cron": cron, "tz": tz, "policy": policy, "template": template,
        "extra": extra})


def scenario_every_minute(t):
    apply_schedule(t, "tick", "* * * * *", tz="Europe/Berlin")
    names = wait_for("a session of the schedule", lambda: trigger_sessions(t, "tick"), 150,
                     interval=0.5)
    name = names[0]
    minute = int(name.rsplit("-", 1)[1])
    s = t.session(name)
    sched = s["metadata"]["annotations"]["tern.dev/scheduled-time"]
    eq(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(minute * 60)), sched,
       "the slot names the session")
    contains(s["spec"]["objective"], "nightly run for ", "objective")
    st = wait_for("lastScheduleTime", lambda: trigger_status(t, "tick").get("lastScheduleTime"),
                  30)
    eq(st, sched, "status.lastScheduleTime")
    t.kubectl("patch", "agenttrigger", "tick", "--type=merge", "-p", '{"spec":{"suspend":true}}')


def scenario_forbid_waits(t):
    extra = "  permissions:\n    requiresApproval: [\"exec_command:*\"]\n"
    t.kubectl("apply", "-f", "-", input=TEMPLATE % {"name": "blocking", "base": t.base,
                                                    "extra": extra})
    apply_schedule(t, "forbid", "* * * * *", policy="Forbid", template="blocking")
    first = wait_for("the first session", lambda: trigger_sessions(t, "forbid"), 150,
                     interval=0.5)[0]
    t.wait_session(first, "WaitingForApproval", lambda s: phase(s) == "WaitingForApproval", 180)
    wait_count(t, "forbid", "Skipped", 1, timeout=150)
    eq(trigger_sessions(t, "forbid"), [first], "no second session while the first runs")
    wait_event(t, "forbid", "Normal", "ConcurrencyForbid")
    eq(trigger_status(t, "forbid").get("active"), [first], "status.active")
    t.kubectl("patch", "agenttrigger", "forbid", "--type=merge", "-p", '{"spec":{"suspend":true}}')


def scenario_downtime(t):
    # created now; the daily 03:00 UTC slot comes twice in the next two days
    apply_schedule(t, "daily", "0 3 * * *")
    apply_schedule(t, "daily-deadline", "0 3 * * *", extra="    startingDeadlineSeconds: 60\n")
    wait_for("the triggers are seen", lambda: trigger_status(t, "daily-deadline").get(
        "conditions"), 60, interval=0.3)
    eq(trigger_sessions(t, "daily"), [], "nothing due yet")
    # the operators are down for two days: restart with the clock ahead
    for n in ("tern-operator", "op-b"):
        t.stop(n)
    t.hook = start_op(t, "op-late", t.cert, t.key, ["--trigger-clock-skew", str(2 * 86400)])
    names = wait_for("one session for the missed slots", lambda: trigger_sessions(t, "daily"), 90,
                     interval=0.3)
    eq(len(names), 1, "one session, not one per missed slot (%r)" % names)
    now = time.time() + 2 * 86400
    latest = int(now // 86400) * 86400 + 3 * 3600
    if latest > now:
        latest -= 86400
    eq(names[0], "daily-%d" % (latest // 60), "named by the latest missed slot")
    wait_count(t, "daily-deadline", "Missed", 1)
    wait_event(t, "daily-deadline", "Warning", "MissedSchedule")
    eq(trigger_sessions(t, "daily-deadline"), [], "past the deadline: no session")
    eq(counts(t, "daily").get("Created"), 1, "Created once")


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.base = t.start_fakellm(SCRIPT)
        t.apply_crd()
        t.create_secret("model", "api-key", "test")
        t.create_secret("hook", "secret", KEY)
        t.apply_runner_rbac()
        t.kubectl("apply", "-f", "-", input=TEMPLATE % {"name": "reviewer", "base": t.base,
                                                        "extra": ""})
        t.cert, t.key = make_cert(t.dir)
        t.hook = start_op(t, "tern-operator", t.cert, t.key)
        args = t.procs["tern-operator"].p.args
        t.metrics_url = "http://%s/metrics" % args[args.index("--metrics-addr") + 1]
        t.hook_b = start_op(t, "op-b", t.cert, t.key)
        for entry in [
            ("good_signature", scenario_good_signature),
            ("bad_signature", scenario_bad_signature),
            ("replayed_delivery", scenario_replayed_delivery),
            ("oversize_body", scenario_oversize_body),
            ("missing_mapped_field", scenario_missing_mapped_field),
            ("filtered_and_malformed", scenario_filtered_and_malformed),
            ("secret_missing_and_suspend", scenario_secret_missing_and_suspend),
            ("concurrent_same_delivery", scenario_concurrent_same_delivery),
            ("restart_between_receipt_and_creation",
             scenario_restart_between_receipt_and_creation),
            ("metrics", scenario_metrics),
            # both wait for minute boundaries of "* * * * *": together they
            # share them (one wait for the next minute, not two)
            [("schedule_every_minute", scenario_every_minute),
             ("schedule_forbid_waits", scenario_forbid_waits)],
            ("schedule_downtime", scenario_downtime),
        ]:
            group = entry if isinstance(entry, list) else [entry]
            group = [(n, f) for n, f in group if not only or any(o in n for o in only)]
            if len(group) > 1:
                suite.run_together(group, t)
            elif group:
                suite.run(group[0][0], group[0][1], t)
        if suite.failed:
            for n in ("tern-operator", "op-b", "op-late", "tern-dev"):
                print("---- %s log (tail)" % n)
                print(t.logs_of(n)[-4000:])
    suite.finish()


if __name__ == "__main__":
    main()
