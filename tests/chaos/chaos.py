#!/usr/bin/python3
"""chaos - Tern's chaos campaign: SIGKILL at random and at aimed moments,
then an invariant checker over what the components recorded.

    tests/chaos/chaos.py [--tier local|terndev|kube|all] [--kill-points N]
                         [--budget SECONDS] [--sessions N] [--kills N]
                         [--seed S] [--keep]

Tiers (tests/chaos/local_tier.py, cluster_tier.py):
  local    processes alone: runners in standalone mode under a Job-like
           supervisor, a tern-sandboxd per session, the journal's etcd;
           random kills of runners, sandboxd and etcd, plus aimed kills
           through TERN_TEST_HOOK (mid-upload, between the journal append
           and the sandbox call, between the sandbox answer or the model
           response and its journaling)
  terndev  the whole product on tern-dev: two leader-elected operators,
           sessions as AgentSessions; kills of runner pods' processes, each
           operator replica, tern-sandboxd, the journal's etcd, and tern-dev
           itself (the API server and the node are one process there)
  kube     the same on the real control plane (make kube): kube-apiserver
           and tern-node are killed separately
Trials run until --kill-points kill points have landed or --budget
seconds have passed (whichever first; at least one trial per tier). Each
trial's kills, hooks and pauses come from its seed alone; --seed S runs
that one trial again (on the tier given, default local) to replay a
failure.

The checker (checker.py) reads sandboxd's execution records, the
workspace's effect log, the journal and the final status, and the last
line printed is exactly

    N/M trials clean, D duplicated side effects, L lost events

preceded by the seed and the replay command of every trial that was not
clean. Exit 0 when every trial was clean.
"""
import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402


def make_tier(name, workdir, args, log):
    if name == "local":
        import local_tier
        return local_tier.LocalTier(os.path.join(workdir, "local"), sessions=args.sessions,
                                    kills=args.kills, log=log)
    import cluster_tier
    return cluster_tier.ClusterTier(os.path.join(workdir, name), cluster=name,
                                    sessions=args.cluster_sessions, kills=args.cluster_kills,
                                    log=log)


def per_tier(spec, conv):
    """"N" -> N for every tier; "local=N,kube=M" -> per tier (0 elsewhere)."""
    if "=" not in spec:
        v = conv(spec)
        return lambda tier: v
    m = {}
    for part in spec.split(","):
        k, _, v = part.partition("=")
        if k not in ("local", "terndev", "kube"):
            raise ValueError("unknown tier %s in %s" % (k, spec))
        m[k] = conv(v)
    return lambda tier: m.get(tier, conv("0"))


def describe(trial):
    kc = trial.kill_counts()
    kills = ", ".join("%s %d" % (k, v) for k, v in sorted(kc.items())) or "none"
    inter = sum(v.interrupted for v in trial.verdicts)
    vis = sum(1 for v in trial.verdicts if v.settled == "visible failure")
    return ("%-7s seed %10d: %s in %.0f s; %d sessions (%d visible failures, %d interrupted "
            "calls); kills: %s" % (trial.tier, trial.seed, "clean" if trial.clean else "NOT CLEAN",
                                   trial.seconds, len(trial.verdicts), vis, inter, kills))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", default="local", help="local, terndev, kube, all, or a list")
    ap.add_argument("--kill-points", default="0",
                    help="stop a tier once this many kill points landed (0: only the budget); "
                         "N for every tier, or TIER=N,... per tier")
    ap.add_argument("--budget", default="120",
                    help="seconds per tier (no new trial after it): N, or TIER=N,...")
    ap.add_argument("--sessions", type=int, default=6, help="sessions per local trial")
    ap.add_argument("--kills", type=int, default=10, help="random kills per local trial")
    ap.add_argument("--cluster-sessions", type=int, default=4, help="sessions per cluster trial")
    ap.add_argument("--cluster-kills", type=int, default=8, help="kills per cluster trial")
    ap.add_argument("--seed", type=int, default=None, help="run this one trial again")
    ap.add_argument("--campaign-seed", type=int, default=None,
                    help="derive the trials' seeds from this (default: the clock)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    tiers = ["local", "terndev", "kube"] if args.tier == "all" else args.tier.split(",")
    try:
        want_points = per_tier(args.kill_points, int)
        budgets = per_tier(args.budget, float)
    except ValueError as e:
        ap.error(str(e))
    for t in tiers:
        if t not in ("local", "terndev", "kube"):
            ap.error("unknown tier %s" % t)
    if "kube" in tiers:
        sys.path.insert(0, os.path.join(common.ROOT, "scripts"))
        import kubecluster
        gone = kubecluster.missing_binaries()
        if gone:
            if args.tier == "all":
                print("SKIP tier kube: the real control plane is not built (missing %s; "
                      "run make kube)" % ", ".join(gone))
                tiers.remove("kube")
            else:
                ap.error("tier kube needs make kube (missing %s)" % ", ".join(gone))
    cseed = args.campaign_seed if args.campaign_seed is not None else int(time.time())
    seeds = random.Random(cseed)
    workdir = tempfile.mkdtemp(prefix="tern-chaos-")
    print("chaos: work directory %s, campaign seed %d" % (workdir, cseed), flush=True)
    trials = []
    t_start = time.monotonic()

    def log(msg):
        print(msg, flush=True)

    for name in tiers:
        tier = None
        t0 = time.monotonic()
        try:
            tier = make_tier(name, workdir, args, log)
            tier.make_reference()
            log("%s: reference run in %.1f s" % (name, tier.ref_seconds))
            points = 0
            while True:
                seed = args.seed if args.seed is not None else seeds.getrandbits(31)
                trial = common.Trial(name, seed)
                try:
                    tier.run_trial(trial)
                except Exception as e:  # a trial that cannot finish is not clean
                    trial.error = "%s: %s" % (type(e).__name__, e)
                    traceback.print_exc()
                trials.append(trial)
                points += len(trial.kills)
                log(describe(trial))
                for v in trial.verdicts:
                    if not v.clean:
                        log("    " + v.describe())
                if trial.error:
                    log("    error: " + trial.error)
                if args.seed is not None:
                    break
                if want_points(name) and points >= want_points(name):
                    break
                if time.monotonic() - t0 > budgets(name):
                    break
            log("%s: %d kill points in %.0f s" % (name, points, time.monotonic() - t0))
        except Exception as e:
            traceback.print_exc()
            t = common.Trial(name, -1)
            t.error = "the tier could not start: %s" % e
            trials.append(t)
        finally:
            if tier:
                tier.close()

    clean = sum(1 for t in trials if t.clean)
    dup = sum(v.duplicated_effects for t in trials for v in t.verdicts)
    lost = sum(v.lost_events for t in trials for v in t.verdicts)
    dup_ev = sum(v.duplicated_events for t in trials for v in t.verdicts)
    points = sum(len(t.kills) for t in trials)
    by = {}
    for t in trials:
        for k, n in t.kill_counts().items():
            key = k.split(":")[0] if not k.startswith("aimed") else k
            by[key] = by.get(key, 0) + n
    print()
    print("kill points: %d in %.0f s (%s)" % (points, time.monotonic() - t_start,
                                             ", ".join("%s %d" % kv for kv in sorted(by.items()))))
    print("sessions: %d, settled as the uninterrupted run: %d, as a visible failure: %d; "
          "duplicated events: %d" % (
              sum(len(t.verdicts) for t in trials),
              sum(1 for t in trials for v in t.verdicts if v.settled == "reference"),
              sum(1 for t in trials for v in t.verdicts if v.settled == "visible failure"),
              dup_ev))
    for t in trials:
        if not t.clean and t.seed < 0:
            print("FAILED tier %s: %s" % (t.tier, t.error))
        elif not t.clean:
            print("FAILED trial: tier %s seed %d; replay: tests/chaos/chaos.py --tier %s --seed %d"
                  % (t.tier, t.seed, t.tier, t.seed))
    if clean == len(trials) and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print("work directory kept: %s" % workdir)
    print("%d/%d trials clean, %d duplicated side effects, %d lost events" %
          (clean, len(trials), dup, lost))
    return 0 if clean == len(trials) and trials else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
