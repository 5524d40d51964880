#!/usr/bin/python3
"""bench/operator: tern-operator at scale on tern-dev (figures only, asserts
nothing). Run: /usr/bin/python3 bench/operator/bench_operator.py [N] (default
10000; `make bench` runs it with TERN_BENCH_SESSIONS or 10000).

1. N sessions parked waiting for approval: created through the API with their
   journals seeded in etcd (user message, turn started, approval requested,
   turn finished) before the operator starts, so the operator finds them
   exactly as after days of waiting: no sandbox pod, no Job.
2. First start: time until every session's status says WaitingForApproval
   (the operator also creates each one's PVC, token Secret, task ConfigMap and
   NetworkPolicy: 4 N creates).
3. Idle: the operator's RSS and CPU over 20 s with nothing changing.
4. Restart: time to relist and reconcile all N, and the API writes it made
   (goal: none).
5. Steady idle after the restart (no first-start echoes left).
6. One live session with the scripted model: API writes over its lifecycle
   and the time from `kubectl apply` to the first model request.
"""
import base64
import json
import os
import ssl
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import ternlocal  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("TERN_BENCH_SESSIONS", "10000"))


class Api:
    def __init__(self, kubeconfig):
        import yaml
        with open(kubeconfig) as f:
            kc = yaml.safe_load(f)
        self.server = kc["clusters"][0]["cluster"]["server"]
        ca = base64.b64decode(kc["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
        self.token = kc["users"][0]["user"]["token"]
        self.ctx = ssl.create_default_context(cadata=ca)

    def req(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Authorization": "Bearer " + self.token, "Content-Type": ctype})
        with urllib.request.urlopen(r, context=self.ctx, timeout=60) as resp:
            return json.loads(resp.read() or b"null")


def b64(s):
    return base64.b64encode(s.encode()).decode()


def seed_journal(etcd, uid, now):
    pre = "/tern/v1/s/%s/" % uid
    evs = [
        ("user_message", 0, {"source": "objective", "text": "bench"}),
        ("turn_started", 1, {"turn": 1}),
        ("approval_requested", 1, {"id": "ap-" + uid[:8], "tool": "exec_command",
                                   "summary": "git push origin main", "callId": "call_0"}),
        ("turn_finished", 1, {"outcome": "approval_requested"}),
    ]
    puts = []
    for i, (ty, turn, data) in enumerate(evs, 1):
        ev = {"v": 1, "seq": i, "type": ty, "time": now, "turn": turn, "data": data}
        puts.append({"request_put": {"key": b64(pre + "ev/%016x" % i), "value": b64(json.dumps(ev))}})
    summ = {"v": 1, "lastSeq": 4, "turn": 1, "messages": 1,
            "usage": {"modelTurns": 1, "toolCalls": 0},
            "pendingApproval": {"id": "ap-" + uid[:8], "tool": "exec_command",
                                "summary": "git push origin main", "requestedAt": now},
            "outcome": "approval_requested", "updated": now}
    puts.append({"request_put": {"key": b64(pre + "sum"), "value": b64(json.dumps(summ))}})
    etcd.call("/v3/kv/txn", {"success": puts})


def metrics(t, name):
    port = t.metrics_port
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        k, _, v = line.rpartition(" ")
        out[k] = float(v)
    return out


def proc_stats(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(parts[11]) + int(parts[12])) / ticks
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    return cpu, rss


def start_operator(t, name):
    t.metrics_port = ternlocal.free_port()
    return t.start_operator(name, extra=("--metrics-addr", "127.0.0.1:%d" % t.metrics_port))


def main():
    print("bench/operator: %d parked sessions" % N, flush=True)
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_terndev()
        base = t.start_fakellm(os.path.join(ternlocal.ROOT, "examples", "demo-script.json"))
        t.apply_crd()
        t.apply_runner_rbac()
        t.create_secret("model", "api-key", "bench")
        t.create_secret("demo-git", "token", "not-a-real-git-token")
        remote = t.start_gitremote("not-a-real-git-token", repo="demo.git")
        api = Api(t.kubeconfig)
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
        t0 = time.monotonic()
        for i in range(N):
            s = api.req("POST", "/apis/tern.dev/v1alpha1/namespaces/default/agentsessions", {
                "apiVersion": "tern.dev/v1alpha1", "kind": "AgentSession",
                "metadata": {"name": "parked-%05d" % i},
                "spec": {"objective": "bench", "approval": {"timeoutSeconds": 2592000}}})
            seed_journal(t.journal, s["metadata"]["uid"], now)
        print("  setup: %d sessions created and journals seeded in %.1f s" %
              (N, time.monotonic() - t0), flush=True)

        key = 'tern_sessions{phase="WaitingForApproval"}'
        t0 = time.monotonic()
        op = start_operator(t, "tern-operator")
        ternlocal.wait_for("all parked", lambda: metrics(t, key).get(key, 0) >= N,
                           max(600, N / 5), interval=1)
        first = time.monotonic() - t0
        m = metrics(t, key)
        print("  first start: %d sessions reconciled to WaitingForApproval in %.1f s "
              "(%d reconciles, %d API writes: children and status)" %
              (N, first, m.get("tern_reconciles_total", 0), m.get("tern_api_writes_total", 0)),
              flush=True)

        cpu0, _ = proc_stats(op.p.pid)
        w0 = metrics(t, key).get("tern_status_writes_total", 0)
        time.sleep(20)  # a measurement window, not synchronisation
        cpu1, rss = proc_stats(op.p.pid)
        w1 = metrics(t, key).get("tern_status_writes_total", 0)
        print("  idle: RSS %.1f MiB (%.1f KiB per session), CPU %.2f%% of one core over 20 s, "
              "%d status writes" % (rss / 1024, rss / N, (cpu1 - cpu0) / 20 * 100, w1 - w0),
              flush=True)

        t.stop("tern-operator")
        t0 = time.monotonic()
        op = start_operator(t, "tern-operator")
        ternlocal.wait_for("relisted", lambda: metrics(t, key).get(
            "tern_reconciles_total", 0) >= N, max(600, N / 5), interval=0.5)
        relist = time.monotonic() - t0
        m = metrics(t, key)
        print("  restart: relist + reconcile of %d sessions in %.1f s; API writes when nothing "
              "changed: %d (%d status), %d errors" %
              (N, relist, m.get("tern_api_writes_total", 0), m.get("tern_status_writes_total", 0),
               m.get("tern_reconcile_errors_total", 0)), flush=True)

        # the initial list enqueues each session once per informer that sees
        # one of its objects (5): wait until those echoes are done
        def quiet():
            a = metrics(t, key).get("tern_reconciles_total", 0)
            time.sleep(3)
            return metrics(t, key).get("tern_reconciles_total", 0) == a
        ternlocal.wait_for("the queue to drain", quiet, 600, interval=0)
        cpu0, _ = proc_stats(op.p.pid)
        r0 = metrics(t, key).get("tern_reconciles_total", 0)
        time.sleep(20)  # a measurement window, not synchronisation
        cpu1, rss = proc_stats(op.p.pid)
        r1 = metrics(t, key).get("tern_reconciles_total", 0)
        print("  steady idle after the restart: RSS %.1f MiB, CPU %.2f%% of one core over 20 s, "
              "%d reconciles in that window" % (rss / 1024, (cpu1 - cpu0) / 20 * 100, r1 - r0),
              flush=True)

        w_before = m.get("tern_api_writes_total", 0)
        rec = os.path.join(t.dir, "model-requests.jsonl")
        size0 = os.path.getsize(rec) if os.path.exists(rec) else 0
        man = open(os.path.join(ternlocal.ROOT, "examples", "demo.yaml")).read().replace(
            "http://127.0.0.1:0/v1", base).replace("demo-model", "model").replace(
            "http://127.0.0.1:0/demo.git", remote)
        t0 = time.monotonic()
        t.kubectl("apply", "-f", "-", input=man)
        ternlocal.wait_for("first model request", lambda: os.path.exists(rec) and
                           os.path.getsize(rec) > size0, 600, interval=0.01)
        to_model = time.monotonic() - t0
        # later stages wait on tern-dev's controllers and kubelet, which
        # relist everything each pass: report how long they took, or that
        # they did not finish, instead of failing the bench
        try:
            s = t.wait_session("demo", "approval", lambda s: ternlocal.phase(s) ==
                               "WaitingForApproval", 600)
            to_approval = time.monotonic() - t0
            t.kubectl("annotate", "agentsession", "demo",
                      "tern.dev/approve=" + s["status"]["pendingApproval"]["id"])
            t.wait_session("demo", "done", lambda s: ternlocal.condition(s, "Completed") == "True",
                           600)
        except ternlocal.Failed as e:
            print("  one session: %.2f s from kubectl apply to the first model request; then %s"
                  % (to_model, e), flush=True)
            return
        to_done = time.monotonic() - t0
        w_after = metrics(t, key).get("tern_api_writes_total", 0)
        print("  one session: from kubectl apply %.2f s to the first model request, %.2f s to "
              "WaitingForApproval, %.2f s to Completed (approved at once); %d API writes by the "
              "operator over its life (2 turns, 1 approval)" %
              (to_model, to_approval, to_done, w_after - w_before), flush=True)

if __name__ == "__main__":
    main()
