"""The chaos campaign's short form (tests/chaos/chaos.py; `make chaos` is the
long one): on tern-dev, the process tier (runners, sandboxd, etcd, aimed
kills) and the cluster tier; with TERN_CLUSTER=kube, the cluster tier on the
real control plane. Each tier is one check here: clean when every trial was.
The campaign's own summary line is printed last, as chaos.py prints it."""
# runs on: terndev kube
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def main():
    cluster = os.environ.get("TERN_CLUSTER", "terndev")
    if cluster == "kube":
        tiers = ["kube"]
        args = ["--kill-points", "kube=12", "--budget", "kube=90"]
    else:
        tiers = ["local", "terndev"]
        args = ["--kill-points", "local=60,terndev=12", "--budget", "local=60,terndev=90"]
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "chaos", "chaos.py"),
                        "--tier", ",".join(tiers), *args], capture_output=True, text=True,
                       timeout=600)
    out = r.stdout.rstrip("\n").split("\n")
    print("\n".join(out[:-1]))
    if r.stderr.strip():
        print(r.stderr.rstrip()[-4000:])
    passed = failed = 0
    for t in tiers:
        bad = [l for l in out if l.startswith(("FAILED trial: tier %s " % t, "FAILED tier %s:" % t))]
        ran = any(l.startswith("%s: " % t) and "kill points in" in l for l in out)
        if bad or not ran:
            print("FAIL chaos %s: %s" % (t, "; ".join(bad) or "did not run (exit %d)" %
                                         r.returncode))
            failed += 1
        else:
            print("ok   chaos %s" % t)
            passed += 1
    if r.returncode != 0 and failed == 0:
        print("FAIL chaos: exit %d" % r.returncode)
        failed += 1
    print("%d passed, %d failed" % (passed, failed))
    print(out[-1] if out else "0/0 trials clean, 0 duplicated side effects, 0 lost events")
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
