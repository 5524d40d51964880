"""local_tier - the chaos campaign on processes alone: no Kubernetes, many
sessions at once, each with its own tern-sandboxd and workspace, one etcd
(the journal) and one scripted model. tern-runner runs in standalone mode
(TERN_SESSION_SPEC_FILE) under a supervisor that behaves like the turn's
Job: it starts the runner again after an exit 75 or a crash, fails the
session visibly after too many attempts or an exit 78, and starts turn 2
(a spec.messages entry) after turn 1.

Kill points of a trial, all from its seed:
  - random: SIGKILL of a session's runner, of a session's tern-sandboxd
    (restarted on the same port and workspace after a pause) or of the etcd
    (restarted on the same ports and data), at random moments;
  - aimed (TERN_TEST_HOOK on one attempt of a session):
      upload:stop + kill the runner       (mid-upload, the client dies)
      upload:stop + kill sandboxd, then the runner   (mid-upload, sandboxd dies)
      tool_call:kill                      (journaled, sandboxd not called)
      tool_result:kill                    (sandboxd answered, not journaled)
      model_response:kill                 (model answered, not journaled)
A kill point counts only when it hit a live process."""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import ternlocal  # noqa: E402
import common  # noqa: E402
import checker  # noqa: E402

BIN = ternlocal.BIN
TOKEN = "chaos-sandbox-token-0123456789"
MEMORY = "Be careful with the chaos."  # every session's simple.md
AIMED = [("upload", "stop", "runner"), ("upload", "stop", "sandboxd"),
         ("tool_call", "kill", None), ("tool_result", "kill", None),
         ("model_response", "kill", None)]
# which attempt's hooks can fire: the script's points (turn 1 has writes,
# exec calls and model steps; turn 2 has an exec and model steps)
SPEC = ('{"metadata":{"uid":"%s"},"spec":{"objective":"Run the chaos script.",'
        '"model":{"name":"fake-chaos"},"messages":%s,'
        '"permissions":{"tools":["exec_command","read_file","write_file","list_files"]},'
        '"limits":{"maxTokens":100000000}}}')


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, fn, timeout, interval=0.05):
    return ternlocal.wait_for(what, fn, timeout, interval)


class Spawner:
    """Starts processes from one long-lived thread: bwrap's --die-with-parent
    (PR_SET_PDEATHSIG) fires when the *thread* that started it ends, so a
    sandboxd restarted from a short-lived thread would die with it."""

    def __init__(self):
        import queue
        self.q = queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            fn, box, done = self.q.get()
            try:
                box.append(fn())
            except Exception as e:  # handed back to the caller
                box.append(e)
            done.set()

    def call(self, fn):
        box, done = [], threading.Event()
        self.q.put((fn, box, done))
        done.wait()
        if isinstance(box[0], Exception):
            raise box[0]
        return box[0]


SPAWNER = Spawner()


class Server:
    """A server process restarted with the same command line (same ports)."""

    def __init__(self, name, argv, logdir, ready):
        self.name, self.argv, self.logdir, self.ready = name, argv, logdir, ready
        self.p = None
        self.lock = threading.RLock()

    def start(self):
        with self.lock:
            self.p = SPAWNER.call(lambda: ternlocal.Proc(self.name, self.argv, self.logdir,
                                                         stdout_pipe=False))
            wait_for(self.name + " ready", lambda: self.p.alive() and self.ready(), 30)

    def kill(self):
        """SIGKILL; True when it was running."""
        with self.lock:
            if self.p and self.p.alive():
                os.killpg(self.p.p.pid, signal.SIGKILL)
                self.p.p.wait()
                self.p.logf.close()
                return True
            return False

    def restart(self):
        """Starts it again unless it runs (two restarts racing start one)."""
        with self.lock:
            for _ in range(20):  # the port may linger for a moment
                if self.p and self.p.alive():
                    return
                try:
                    self.start()
                    return
                except ternlocal.Failed:
                    if self.p:
                        self.p.stop(signal.SIGKILL)
                    time.sleep(0.1)
            raise ternlocal.Failed("%s would not restart" % self.name)

    def stop(self):
        if self.p:
            self.p.stop()


def http_ok(url, token=None):
    h = {"Authorization": "Bearer " + token} if token else {}
    try:
        return urllib.request.urlopen(urllib.request.Request(url, headers=h), timeout=1).status == 200
    except Exception:
        return False


class Env:
    """The campaign's shared processes: the journal's etcd, the model."""

    def __init__(self, workdir):
        self.dir = workdir
        self.logs = os.path.join(workdir, "logs")
        os.makedirs(self.logs, exist_ok=True)
        cport, pport = free_port(), free_port()
        self.etcd_url = "http://127.0.0.1:%d" % cport
        self.etcd = Server("etcd", [
            ternlocal.ETCD, "--data-dir", os.path.join(workdir, "etcd"), "--name", "chaos",
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", "http://127.0.0.1:%d" % pport,
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % pport,
            "--initial-cluster", "chaos=http://127.0.0.1:%d" % pport],
            self.logs, lambda: http_ok(self.etcd_url + "/health"))
        self.etcd.start()
        self.record = os.path.join(workdir, "model-requests.jsonl")
        self.model = ternlocal.Proc("tern-fakellm", [
            os.path.join(BIN, "tern-fakellm"), "--script", common.script_path(workdir),
            "--listen", "127.0.0.1:0", "--record", self.record], self.logs, stdout_pipe=True)
        self.record_off = 0
        line = self.model.read_line(20)
        self.model_url = "http://%s/v1" % line.split()[-1]
        self.token_file = os.path.join(workdir, "token")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")

    def degraded_prompts(self):
        """Model requests since the last call whose system prompt lacks the
        session's simple.md (a prompt built without a part it has)."""
        bad = 0
        with open(self.record, "rb") as f:
            f.seek(self.record_off)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.record_off += end
        for line in data[:end].splitlines():
            try:
                msgs = json.loads(line).get("messages") or []
            except ValueError:
                continue
            sys_msg = msgs[0].get("content") if msgs else ""
            if MEMORY not in (sys_msg or ""):
                bad += 1
        return bad

    def stop(self):
        self.model.stop()
        self.etcd.stop()


class Session:
    """One session: its workspace, its tern-sandboxd, its runner attempts."""

    def __init__(self, env, uid, hook=None, max_attempts=40):
        self.env, self.uid, self.hook = env, uid, hook
        self.dir = os.path.join(env.dir, "s", uid)
        self.ws = os.path.join(self.dir, "ws")
        os.makedirs(os.path.join(self.ws, "input"), exist_ok=True)
        with open(os.path.join(self.ws, "simple.md"), "w") as f:
            f.write(MEMORY + "\n")
        self.port = free_port()
        self.addr = "127.0.0.1:%d" % self.port
        # in a PID namespace of its own, as in a pod: when sandboxd dies, so
        # does everything its commands left (the kernel ends the namespace)
        self.sandboxd = Server("sandboxd-" + uid, [
            "/usr/bin/bwrap", "--unshare-pid", "--die-with-parent", "--dev-bind", "/", "/",
            "--proc", "/proc", "--",
            os.path.join(BIN, "tern-sandboxd"), "--listen", self.addr, "--token-file",
            env.token_file, "--workspace", self.ws, "--log-level", "warn"],
            env.logs, lambda: http_ok("http://%s/healthz" % self.addr, TOKEN))
        self.sandboxd.start()
        self.max_attempts = max_attempts
        self.runner = None          # the live runner Popen, or None
        self.runner_lock = threading.Lock()
        self.attempts = 0
        self.exits = []
        self.final = None
        self.aimed_fired = None     # the aimed kill point, once it fired
        self.thread = None

    def spec(self, turn):
        path = os.path.join(self.dir, "spec.json")
        msgs = '["Now the second turn."]' if turn > 1 else "[]"
        with open(path, "w") as f:
            f.write(SPEC % (self.uid, msgs))
        return path

    def env_for(self, turn, hook):
        e = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TERN_NAMESPACE": "chaos", "TERN_SESSION": "s-" + self.uid,
            "TERN_SESSION_UID": self.uid, "TERN_TURN": str(turn),
            "TERN_ETCD_ENDPOINTS": self.env.etcd_url,
            "TERN_SANDBOX_TOKEN_FILE": self.env.token_file,
            "TERN_SESSION_SPEC_FILE": self.spec(turn), "TERN_SANDBOX_ADDR": self.addr,
            "OPENAI_BASE_URL": self.env.model_url, "OPENAI_API_KEY": "sk-chaos",
            "TERN_LOCK_TTL_SECONDS": "1", "TERN_SNAPSHOT_EVENTS": "20",
            "TERN_RUNNER_OWNER": "chaos-%s-%d" % (self.uid, self.attempts),
            "TERN_LOG_LEVEL": "warn",
        }
        if hook:
            e["TERN_TEST_HOOK"] = "%s:%s" % (hook[0], hook[1])
        return e

    def kill_runner(self):
        """SIGKILL the live (not stopped) runner; True when one was hit."""
        with self.runner_lock:
            p = self.runner
            if p is None or getattr(p, "stopped", False):
                return False
            try:
                os.kill(p.pid, signal.SIGKILL)
                return True
            except ProcessLookupError:
                return False

    def _upload_started(self, timeout=3.0):
        """True once sandboxd holds a started PUT record of this session."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ex = common.executions(self.addr, TOKEN, self.uid)
                if any(e.get("op") == "put" and e.get("status") == "started" for e in ex):
                    return True
            except Exception:
                pass
            time.sleep(0.02)
        return False

    def _attempt(self, turn, hook, log):
        p = subprocess.Popen([os.path.join(BIN, "tern-runner"), "turn"], stdout=log,
                             stderr=log, env=self.env_for(turn, hook), start_new_session=True)
        with self.runner_lock:
            self.runner = p
        try:
            while True:
                pid, st = os.waitpid(p.pid, os.WUNTRACED)
                if os.WIFSTOPPED(st):
                    # an aimed hook stopped it mid-upload: once sandboxd holds
                    # the started record, what dies now decides the path
                    with self.runner_lock:
                        p.stopped = True
                    if not self._upload_started():
                        p.stopped = False  # the body had not left the runner yet
                        os.kill(p.pid, signal.SIGCONT)
                        continue
                    self.aimed_fired = hook
                    if hook[2] == "sandboxd":
                        self.sandboxd.kill()
                        self.sandboxd.restart()
                    os.kill(p.pid, signal.SIGKILL)
                    continue
                p.returncode = (os.WEXITSTATUS(st) if os.WIFEXITED(st)
                                else -os.WTERMSIG(st))
                return p.returncode
        finally:
            with self.runner_lock:
                self.runner = None

    def supervise(self, rng):
        """Runs turns 1 and 2 like a Job would; sets self.final."""
        log = open(os.path.join(self.dir, "runner.log"), "ab")
        try:
            for turn in (1, 2):
                while True:
                    if self.attempts >= self.max_attempts:
                        self.final = {"state": "failed",
                                      "reason": "gave up after %d attempts (exits %s)" %
                                      (self.attempts, self.exits[-5:])}
                        return
                    hook = None
                    if self.hook and self.aimed_fired is None and self.hook_turn == turn:
                        hook = self.hook
                    self.attempts += 1
                    rc = self._attempt(turn, hook, log)
                    self.exits.append(rc)
                    if hook and rc == -signal.SIGKILL and hook[1] == "kill":
                        self.aimed_fired = hook
                    if rc == 0:
                        break
                    if rc == 78:
                        self.final = {"state": "failed", "reason": "configuration error (78)"}
                        return
                    time.sleep(rng.uniform(0.05, 0.3))  # the Job's backoff, shortened
            self.final = {"state": "completed"}
        finally:
            log.close()

    def start(self, rng, hook_turn=1):
        self.hook_turn = hook_turn
        self.thread = threading.Thread(target=self.supervise, args=(rng,), daemon=True)
        self.thread.start()

    def collect(self):
        ex, eff, files = common.sandbox_view(self.addr, TOKEN, self.uid)
        return ex, eff, files

    def orphans(self):
        """Processes still running in the workspace (a command's leftovers)."""
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cwd = os.readlink("/proc/%s/cwd" % pid)
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            if cwd == self.ws or cwd.startswith(self.ws + "/"):
                out.append("%s (%s)" % (pid, cmd))
        return out

    def stop(self):
        self.sandboxd.stop()


def final_answer(events):
    for e in reversed(events):
        if e["type"] == "turn_finished":
            return (e.get("data") or {}).get("summary")
        if e["type"] == "snapshot":
            return ((e.get("data") or {}).get("state") or {}).get("finalText")
    return None


class LocalTier:
    name = "local"

    def __init__(self, workdir, sessions=6, kills=10, log=print):
        self.workdir = workdir
        self.sessions = sessions
        self.kills = kills
        self.log = log
        self.env = Env(workdir)
        self.reference = None
        self.ref_seconds = 5.0

    def close(self):
        self.env.stop()

    def make_reference(self):
        """An uninterrupted run of the script: what every session must give."""
        t0 = time.monotonic()
        s = Session(self.env, "reference")
        s.start(random.Random(0))
        s.thread.join(120)
        if s.final != {"state": "completed"}:
            raise ternlocal.Failed("the reference session did not complete: %s; exits %s" %
                                   (s.final, s.exits))
        self.ref_seconds = time.monotonic() - t0
        if self.env.degraded_prompts():
            raise ternlocal.Failed("the reference run sent a prompt without simple.md")
        self.reference = common.journal_events(self.env.etcd_url, "reference")
        ex, eff, files = s.collect()
        v = checker.check("reference", self.reference, self.reference, ex, eff, files,
                          {"state": "completed", "answer": final_answer(self.reference)},
                          common.EXPECT_FILES, strict=True)
        for o in s.orphans():
            v.problems.append("a process outlived its command: " + o)
        s.stop()
        if not v.clean:
            raise ternlocal.Failed("the reference run is not clean: " + v.describe())

    def run_trial(self, trial):
        """One trial: sessions at once, the seed's kills, then the checks."""
        rng = random.Random(trial.seed)
        t0 = time.monotonic()
        n = self.sessions
        sess = []
        for i in range(n):
            hook = rng.choice(AIMED) if rng.random() < 0.6 else None
            s = Session(self.env, "c%08x-%d" % (trial.seed, i), hook=hook)
            sess.append(s)
        for s in sess:
            s.start(random.Random(rng.getrandbits(32)),
                    hook_turn=2 if s.hook and s.hook[0] != "upload" and rng.random() < 0.3 else 1)
        # random kills over roughly the time the sessions run
        horizon = max(2.0, self.ref_seconds * 2.5)
        plan = sorted((rng.uniform(0, horizon), rng.choices(
            ["runner", "sandboxd", "etcd"], weights=[6, 3, 1])[0], rng.randrange(n),
            rng.uniform(0.0, 0.6)) for _ in range(self.kills))
        pending = []
        for at, target, idx, pause in plan:
            delay = at - (time.monotonic() - t0)
            if delay > 0:
                time.sleep(delay)
            if all(not s.thread.is_alive() for s in sess):
                break
            now = time.monotonic() - t0
            if target == "runner":
                # the chosen session's runner, else any live one
                order = [idx] + [j for j in range(n) if j != idx]
                for j in order:
                    if sess[j].kill_runner():
                        trial.kills.append((now, "runner", sess[j].uid))
                        break
            elif target == "sandboxd":
                s = sess[idx]
                if s.thread.is_alive() and s.sandboxd.kill():
                    trial.kills.append((now, "sandboxd", s.uid))
                    th = threading.Thread(target=lambda s=s, p=pause: (time.sleep(p),
                                                                       s.sandboxd.restart()))
                    th.start()
                    pending.append(th)
            elif target == "etcd":
                if self.env.etcd.kill():
                    trial.kills.append((now, "etcd", "journal"))
                    time.sleep(pause * 2)
                    self.env.etcd.restart()
        for th in pending:
            th.join(60)
        deadline = time.monotonic() + 240
        for s in sess:
            s.thread.join(max(1, deadline - time.monotonic()))
        for s in sess:
            if s.aimed_fired:
                trial.kills.append((time.monotonic() - t0, "aimed:%s:%s" %
                                    (s.aimed_fired[0], s.aimed_fired[2] or "runner"), s.uid))
        # the checks read what the components recorded
        for s in sess:
            if s.thread.is_alive():
                s.final = {"state": "running", "exits": s.exits}
            if not s.sandboxd.p.alive():
                s.sandboxd.restart()
            events = common.journal_events(self.env.etcd_url, s.uid)
            ex, eff, files = s.collect()
            fin = dict(s.final or {"state": "unknown"})
            if fin.get("state") == "completed":
                fin["answer"] = final_answer(events)
            v = checker.check(s.uid, events, self.reference, ex, eff, files, fin,
                              common.EXPECT_FILES, strict=True)
            for o in s.orphans():
                v.problems.append("a process outlived its command: " + o)
            trial.verdicts.append(v)
            s.stop()
            if v.clean:
                shutil.rmtree(s.dir, ignore_errors=True)
        bad = self.env.degraded_prompts()
        if bad:
            trial.verdicts[0].problems.append(
                "%d model requests of this trial were sent without simple.md" % bad)
        trial.seconds = time.monotonic() - t0
