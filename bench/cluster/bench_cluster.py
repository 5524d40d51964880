#!/usr/bin/python3
"""bench/cluster: the two clusters side by side (figures only, asserts
nothing). For tern-dev and for the real control plane (when `make kube` has
built it): the RSS of every process idle and at its peak while the demo
session runs, and the demo session's time from `kubectl apply` to the
first model request, to WaitingForApproval and, once approved, to
Completed.

Run: /usr/bin/python3 bench/cluster/bench_cluster.py [terndev|kube ...]
"""
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import ternlocal  # noqa: E402
from ternlocal import phase, condition, wait_for  # noqa: E402

ROOT = ternlocal.ROOT


def rss_kib(pid):
    """RSS of a process and all its descendants (KiB)."""
    total, pending = 0, [pid]
    while pending:
        p = pending.pop()
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            for task in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, task)) as f:
                    pending.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return total


def sample(t):
    return {n: rss_kib(p.p.pid) for n, p in t.procs.items() if p.alive()}


def run(cluster):
    out = {"cluster": cluster}
    with ternlocal.Local(cluster=cluster) as t:
        t0 = time.monotonic()
        t.start_etcd()
        t.start_cluster()
        base = t.start_fakellm(os.path.join(ROOT, "examples", "demo-script.json"))
        t.apply_crd()
        t.create_secret("demo-model", "api-key", "not-a-real-key")
        t.create_secret("demo-git", "token", "not-a-real-git-token")
        remote = t.start_gitremote("not-a-real-git-token", repo="demo.git")
        t.apply_runner_rbac()
        t.start_operator()
        out["start_s"] = time.monotonic() - t0
        # idle: everything up, nothing to do (10 s to settle)
        settle = time.monotonic() + 10
        while time.monotonic() < settle:
            time.sleep(0.5)
        out["idle"] = sample(t)
        peak = dict(out["idle"])
        stop = []

        def sampler():
            while not stop:
                for n, v in sample(t).items():
                    peak[n] = max(peak.get(n, 0), v)
                time.sleep(0.2)
        th = threading.Thread(target=sampler)
        th.start()
        with open(os.path.join(ROOT, "examples", "demo.yaml")) as f:
            manifest = f.read().replace("http://127.0.0.1:0/v1", base).replace(
                "http://127.0.0.1:0/demo.git", remote)
        record = os.path.join(t.dir, "model-requests.jsonl")
        t1 = time.monotonic()
        t.kubectl("apply", "-f", "-", input=manifest)
        wait_for("first model request", lambda: os.path.exists(record) and
                 os.path.getsize(record) > 0, 120, interval=0.01)
        out["first_request_s"] = time.monotonic() - t1
        s = t.wait_session("demo", "WaitingForApproval",
                           lambda s: phase(s) in ("WaitingForApproval", "Failed"), 120)
        out["waiting_s"] = time.monotonic() - t1
        t.tern("approve", "demo")
        t2 = time.monotonic()
        s = t.wait_session("demo", "Completed", lambda s: condition(s, "Completed") == "True" or
                           phase(s) == "Failed", 120)
        out["approved_to_completed_s"] = time.monotonic() - t2
        out["phase"] = phase(s)
        stop.append(1)
        th.join()
        out["peak"] = peak
    return out


def main():
    clusters = sys.argv[1:] or ["terndev", "kube"]
    import kubecluster
    results = []
    for c in clusters:
        if c == "kube" and kubecluster.missing_binaries():
            print("kube: skipped, not built (make kube)")
            continue
        results.append(run(c))
    for r in results:
        print("\n== %s: started in %.1f s; demo: apply -> first model request %.2f s, "
              "-> WaitingForApproval %.2f s; approved -> Completed %.2f s (%s)" %
              (r["cluster"], r["start_s"], r["first_request_s"], r["waiting_s"],
               r["approved_to_completed_s"], r["phase"]))
        print("   %-26s %12s %12s" % ("process (with children)", "idle MiB", "peak MiB"))
        for n in sorted(r["idle"], key=lambda n: -r["peak"].get(n, 0)):
            print("   %-26s %12.1f %12.1f" % (n, r["idle"][n] / 1024, r["peak"].get(n, 0) / 1024))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
