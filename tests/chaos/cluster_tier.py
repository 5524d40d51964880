"""cluster_tier - the chaos campaign on a whole cluster: tern-dev, or the
real control plane (official kube-apiserver, controller-manager, scheduler
and etcd, with tern-node as the node), with two leader-elected operator
replicas, the journal's etcd and the scripted model; sessions are
AgentSessions applied with kubectl, turn 2 is a spec.messages entry.

Kill points of a trial, all from its seed, at random moments:
  runner        a session's tern-runner process (its Job makes a new pod)
  operator      one replica, the leader or the other (restarted after a pause)
  sandboxd      a session's tern-sandboxd (the kubelet restarts the container)
  etcd          the journal's etcd (on tern-dev also its store; restarted
                on the same ports and data)
  apiserver     tern-dev (the API server and the node are one process there,
                so its pods die with it) / kube-apiserver
  node          tern-node (kube only; its pods die with it)
A kill point counts only when it hit a live process. Sessions may end as a
visible failure (a Job out of retries is a Failed session with a reason):
that counts as settled, as the campaign's contract says."""
import base64
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import ternlocal  # noqa: E402
from ternlocal import wait_for, phase, condition  # noqa: E402
import common  # noqa: E402
import checker  # noqa: E402

MEMORY = "Be careful with the chaos."

SESSION = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: %(name)s}
spec:
  objective: Run the chaos script.
  memory: {configMapRef: {name: chaos-memory}}
  permissions: {tools: [exec_command, read_file, write_file, list_files]}
  limits: {timeoutSeconds: 900, maxTokens: 100000000}
  model: {name: fake-chaos, baseURL: %(base)s, apiKeySecretRef: {name: model, key: api-key}}
"""


def procs_where(pred):
    """Host pids whose (argv, environ) satisfy pred."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            with open("/proc/%s/environ" % p, "rb") as f:
                env = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if argv and pred(argv, env):
            out.append(int(p))
    return out


def kill_pids(pids):
    hit = False
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            hit = True
        except ProcessLookupError:
            pass
    return hit


class ClusterTier:
    def __init__(self, workdir, cluster, sessions=3, kills=6, log=print):
        self.name = cluster
        self.cluster = cluster
        self.sessions = sessions
        self.kills = kills
        self.log = log
        os.makedirs(workdir, exist_ok=True)
        self.t = t = ternlocal.Local(workdir, cluster=cluster)
        self.lock = threading.Lock()
        t.start_etcd()
        self.etcd_argv = list(t.procs["etcd"].p.args)
        t.start_cluster()
        self.model_base = t.start_fakellm(common.script_path(workdir))
        self.record = os.path.join(t.dir, "model-requests.jsonl")
        self.record_off = 0
        t.apply_crd()
        t.apply_runner_rbac()
        t.create_secret("model", "api-key", "sk-chaos")
        t.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "chaos-memory", "namespace": "default"},
            "data": {"simple.md": MEMORY + "\n"}}))
        self.ops = ["op-a", "op-b"]
        for n in self.ops:
            t.start_operator(n, extra=("--leader-elect",))
        self.reference = None
        self.ref_seconds = 30.0

    def close(self):
        self.t.__exit__(None, None, None)

    # ---- reading what happened ---------------------------------------------
    def token(self, name):
        s = self.t.get_json("secret", name + "-sandbox-token")
        return base64.b64decode(s["data"]["token"]).decode()

    def settled(self, name):
        """(final dict, session) once the session ended turn 2 or failed."""
        s = self.t.session(name)
        st = s.get("status") or {}
        if phase(s) == "Failed":
            reason = None
            for c in st.get("conditions", []):
                if c.get("type") == "Failed" and c.get("status") == "True":
                    reason = "%s: %s" % (c.get("reason"), c.get("message"))
            return {"state": "failed", "reason": reason}, s
        if (st.get("turn") or {}).get("number") == 2 and condition(s, "Completed") == "True" \
                and phase(s) == "Succeeded":
            return {"state": "completed",
                    "answer": (st.get("result") or {}).get("summary")}, s
        return None, s

    def collect(self, name, s):
        uid = s["metadata"]["uid"]
        # a fresh login: etcd's simple tokens expire (5 min) and a trial is
        # longer than that
        self.t.journal.token = None
        events = common.journal_events(self.t.journal, uid)
        addr = ((s.get("status") or {}).get("sandbox") or {}).get("address")
        token = self.token(name)
        # the sandbox may be parked (idle) or restarting: its records are on
        # the workspace volume, so wait for it to answer
        ex, eff, files = wait_for("%s's sandbox" % name, lambda: common.sandbox_view(
            self._addr(name) or addr, token, uid), 180, interval=1)
        return uid, events, ex, eff, files

    def _addr(self, name):
        s = self.t.session(name)
        sb = (s.get("status") or {}).get("sandbox") or {}
        return sb.get("address") if sb.get("ready") else None

    def degraded_prompts(self):
        bad = 0
        try:
            with open(self.record, "rb") as f:
                f.seek(self.record_off)
                data = f.read()
        except OSError:
            return 0
        end = data.rfind(b"\n") + 1
        self.record_off += end
        for line in data[:end].splitlines():
            try:
                msgs = json.loads(line).get("messages") or []
            except ValueError:
                continue
            if MEMORY not in ((msgs[0].get("content") if msgs else "") or ""):
                bad += 1
        return bad

    # ---- sessions ------------------------------------------------------------
    def apply(self, name):
        self.t.kubectl("apply", "-f", "-", input=SESSION % {"name": name,
                                                           "base": self.model_base})

    def drive(self, names, deadline):
        """Sends turn 2 when turn 1 is done; returns {name: (final, session)}."""
        sent, done = set(), {}
        while len(done) < len(names) and time.monotonic() < deadline:
            for n in names:
                if n in done:
                    continue
                try:
                    fin, s = self.settled(n)
                except Exception:
                    continue  # the API server may be down right now
                if fin:
                    done[n] = (fin, s)
                    continue
                st = s.get("status") or {}
                if n not in sent and (st.get("turn") or {}).get("number") == 1 and \
                        condition(s, "Completed") == "True":
                    try:
                        self.t.kubectl("patch", "agentsession", n, "--type=merge", "-p",
                                       '{"spec":{"messages":["Now the second turn."]}}')
                        sent.add(n)
                    except Exception:
                        pass
            time.sleep(0.5)
        return done

    def make_reference(self):
        t0 = time.monotonic()
        self.apply("reference")
        done = self.drive(["reference"], time.monotonic() + 300)
        if "reference" not in done or done["reference"][0]["state"] != "completed":
            raise ternlocal.Failed("the reference session did not complete: %s" %
                                   (done.get("reference"),))
        self.ref_seconds = time.monotonic() - t0
        fin, s = done["reference"]
        uid, events, ex, eff, files = self.collect("reference", s)
        if self.degraded_prompts():
            raise ternlocal.Failed("the reference run sent a prompt without simple.md")
        v = checker.check("reference", events, events, ex, eff, files, fin, common.EXPECT_FILES)
        if not v.clean:
            raise ternlocal.Failed("the reference run is not clean: " + v.describe())
        self.reference = events
        self.t.kubectl("delete", "agentsession", "reference", "--wait=false")

    # ---- kills -----------------------------------------------------------------
    def kill_runner(self, name):
        return kill_pids(procs_where(lambda a, e: a[0].endswith("tern-runner") and "turn" in a
                                     and ("TERN_SESSION=%s" % name) in e))

    def kill_sandboxd(self, name):
        addr = None
        try:
            addr = ((self.t.session(name).get("status") or {}).get("sandbox") or {}).get(
                "address")
        except Exception:
            return False
        if not addr:
            return False
        return kill_pids(procs_where(lambda a, e: a[0].endswith("tern-sandboxd") and
                                     addr in a))

    def restart_proc(self, key, argv, ready=None):
        p = ternlocal.Proc(key, argv, self.t.logs)
        self.t.procs[key] = p
        if ready:
            wait_for(key + " ready", lambda: p.alive() and ready(), 90, interval=0.1)

    def kill_etcd(self, pause):
        p = self.t.procs.get("etcd")
        if not p or not p.alive():
            return False
        os.killpg(p.p.pid, signal.SIGKILL)
        p.p.wait()
        time.sleep(pause)
        def healthy():
            try:
                return b"true" in self.t.journal.get("/health")
            except OSError:
                return False
        self.restart_proc("etcd", self.etcd_argv, healthy)
        return True

    def kill_operator(self, pause, rng):
        name = rng.choice(self.ops)
        p = self.t.procs.get(name)
        if not p or not p.alive():
            return None
        os.killpg(p.p.pid, signal.SIGKILL)
        p.p.wait()

        def back():
            time.sleep(pause)
            with self.lock:
                self.t.start_operator(name, extra=("--leader-elect",))
        threading.Thread(target=back, daemon=True).start()
        return name

    def kill_apiserver(self, pause):
        if self.cluster == "terndev":
            p = self.t.procs.get("tern-dev")
            if not p or not p.alive():
                return False
            os.killpg(p.p.pid, signal.SIGKILL)
            p.p.wait()
            self.t.procs.pop("tern-dev", None)
            time.sleep(pause)
            for _ in range(5):
                try:
                    self.t.start_terndev()
                    return True
                except ternlocal.Failed:
                    time.sleep(1)
            raise ternlocal.Failed("tern-dev would not restart")
        p = self.t.procs.get("kube-apiserver")
        if not p or not p.alive():
            return False
        argv = list(p.p.args)
        os.killpg(p.p.pid, signal.SIGKILL)
        p.p.wait()
        time.sleep(pause)
        k = self.t.kube
        self.restart_proc("kube-apiserver", argv,
                          lambda: k._https_get(k.server + "/readyz") == b"ok")
        return True

    def kill_node(self, pause):
        if self.cluster == "terndev":
            return self.kill_apiserver(pause)
        p = self.t.procs.get("tern-node")
        if not p or not p.alive():
            return False
        os.killpg(p.p.pid, signal.SIGKILL)
        p.p.wait()
        self.t.procs.pop("tern-node", None)
        time.sleep(pause)
        self.t.kube.start_node()
        return True

    # ---- a trial -----------------------------------------------------------------
    def run_trial(self, trial):
        rng = random.Random(trial.seed)
        t0 = time.monotonic()
        names = ["c%07x-%d" % (trial.seed & 0xfffffff, i) for i in range(self.sessions)]
        for n in names:
            self.apply(n)
        targets = ["runner", "operator", "sandboxd", "etcd", "apiserver"]
        weights = [5, 2, 3, 1, 1]
        if self.cluster == "kube":
            targets.append("node")
            weights.append(1)
        # kills land while the sessions run: after a random gap each, until
        # the trial's count is reached or every session has settled
        gap = max(1.0, self.ref_seconds / 2)
        shared = 0  # at most two kills of what every session depends on, so
                    # that a Job's retries (backoffLimit 4) are not all spent
        result = {}
        driver = threading.Thread(target=lambda: result.update(
            self.drive(names, time.monotonic() + 600)), daemon=True)
        driver.start()
        for _ in range(self.kills):
            time.sleep(rng.uniform(0.3, gap))
            target = rng.choices(targets, weights)[0]
            name, pause = rng.choice(names), rng.uniform(0.2, 2.0)
            if not driver.is_alive():
                break
            now = time.monotonic() - t0
            try:
                if target in ("runner", "sandboxd"):
                    # the chosen session's, else any; a runner comes and goes,
                    # so wait a little for one to be there
                    kill = self.kill_runner if target == "runner" else self.kill_sandboxd
                    order = [name] + [x for x in names if x != name]
                    until = time.monotonic() + 4
                    hit = None
                    while hit is None and time.monotonic() < until and driver.is_alive():
                        hit = next((n for n in order if kill(n)), None)
                        if hit is None:
                            time.sleep(0.1)
                    if hit:
                        trial.kills.append((time.monotonic() - t0, target, hit))
                elif target == "operator":
                    which = self.kill_operator(pause, rng)
                    if which:
                        trial.kills.append((now, "operator", which))
                elif shared < 2 and target == "etcd":
                    if self.kill_etcd(pause):
                        shared += 1
                        trial.kills.append((now, "etcd", "journal"))
                elif shared < 2 and target == "apiserver":
                    if self.kill_apiserver(pause):
                        shared += 1
                        trial.kills.append((now, "apiserver" if self.cluster == "kube" else
                                            "apiserver+node", self.cluster))
                elif shared < 2 and target == "node":
                    if self.kill_node(pause):
                        shared += 1
                        trial.kills.append((now, "node", "tern-node"))
            except Exception as e:
                raise ternlocal.Failed("killing %s: %s" % (target, e))
        driver.join(700)
        # operators that are still down come back before the checks
        for n in self.ops:
            p = self.t.procs.get(n)
            if not p or not p.alive():
                with self.lock:
                    if not (self.t.procs.get(n) and self.t.procs[n].alive()):
                        self.t.start_operator(n, extra=("--leader-elect",))
        for n in names:
            if n not in result:
                try:
                    s = self.t.session(n)
                except Exception:
                    s = {}
                st = s.get("status") or {}
                result[n] = ({"state": "running", "phase": st.get("phase"),
                              "turn": st.get("turn")}, s)
        for n in names:
            fin, s = result[n]
            if not s.get("metadata"):
                v = checker.Verdict(n)
                v.problems.append("no such session")
                trial.verdicts.append(v)
                continue
            uid, events, ex, eff, files = self.collect(n, s)
            v = checker.check(n, events, self.reference, ex, eff, files, fin,
                              common.EXPECT_FILES)
            trial.verdicts.append(v)
        bad = self.degraded_prompts()
        if bad and trial.verdicts:
            trial.verdicts[0].problems.append(
                "%d model requests of this trial were sent without simple.md" % bad)
        for n in names:
            self.t.kubectl("delete", "agentsession", n, "--wait=false", check=False)
        trial.seconds = time.monotonic() - t0
