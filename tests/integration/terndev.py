"""Shared fixture of the tern-dev integration suites (not a suite itself).

TernDev starts build/bin/tern-dev up --dir <tmp> --port 0 (its own etcd),
waits for the one ready line with a deadline, and stops it by pid (SIGTERM,
then SIGKILL). kubectl() runs the real kubectl with the instance's
kubeconfig and a fresh HOME/cache dir. Suite() collects checks and prints
"N passed, N failed".
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("TERN_BUILD", os.path.join(ROOT, "build"))
BIN = os.path.join(BUILD, "bin", "tern-dev")
KUBECTL = os.environ.get("TERN_KUBECTL", "/usr/bin/kubectl")
# The differential test (test_differential.py) runs the tern-dev suites
# through its tee proxy: with TERN_DIFF_KUBECONFIG set, TernDev starts no
# process and hands out that kubeconfig (the proxy sends every request to
# tern-dev and to kube-apiserver); stop() and restarts are not available.
DIFF_KUBECONFIG = os.environ.get("TERN_DIFF_KUBECONFIG")


class TernDev:
    def __init__(self, tmp=None):
        self.tmp = tmp or tempfile.mkdtemp(prefix="tern-dev-test-")
        self.dir = os.path.join(self.tmp, "dev")
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.home, exist_ok=True)
        self.proc = None
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")

    def start(self, extra=(), timeout=40):
        if DIFF_KUBECONFIG:
            self.kubeconfig = DIFF_KUBECONFIG
            self.diff = True
            return self
        out = open(os.path.join(self.tmp, "tern-dev.out"), "ab")
        err = open(os.path.join(self.tmp, "tern-dev.err"), "ab")
        self.proc = subprocess.Popen([BIN, "up", "--dir", self.dir, "--port", "0", *extra],
                                     stdout=subprocess.PIPE, stderr=err)
        deadline = time.time() + timeout
        line = b""
        os.set_blocking(self.proc.stdout.fileno(), False)
        while time.time() < deadline:
            chunk = self.proc.stdout.read()
            if chunk:
                line += chunk
                out.write(chunk)
                out.flush()
            if line.endswith(b"\n"):
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        out.close()
        err.close()
        expect = ("tern-dev ready kubeconfig=%s/kubeconfig\n" % self.dir).encode()
        if line != expect:
            self.stop()
            raise RuntimeError("tern-dev did not become ready: %r; stderr: %s" %
                               (line, self.stderr()[-2000:]))
        return self

    def stderr(self):
        try:
            with open(os.path.join(self.tmp, "tern-dev.err"), "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM):
        """Stops tern-dev; returns its exit status (None if it was not running)."""
        if getattr(self, "diff", False):
            raise RuntimeError("tern-dev is behind the differential proxy: no stop/restart")
        rc = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                rc = self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                rc = "killed after SIGTERM timeout"
        elif self.proc:
            rc = "exited early with %r" % self.proc.returncode
        self.proc = None
        return rc

    def check_clean_stop(self):
        """SIGTERM ends tern-dev with status 0 and no sanitizer report."""
        if getattr(self, "diff", False):
            return
        rc = self.stop()
        err = self.stderr()
        if rc != 0 or "Sanitizer" in err or "runtime error" in err:
            raise AssertionError("unclean stop: status %r; stderr tail: %s" % (rc, err[-3000:]))

    def cleanup(self):
        if getattr(self, "diff", False):
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def kubectl(self, *args, input=None, check=True, timeout=60):
        env = dict(os.environ, HOME=self.home, KUBECONFIG=self.kubeconfig)
        p = subprocess.run([KUBECTL, "--cache-dir", os.path.join(self.home, "cache"), *args],
                           input=input.encode() if isinstance(input, str) else input,
                           capture_output=True, env=env, timeout=timeout)
        out, err = p.stdout.decode(), p.stderr.decode()
        if check and p.returncode != 0:
            raise AssertionError("kubectl %s failed (%d): %s%s" % (" ".join(args), p.returncode,
                                                                 out, err))
        return p.returncode, out, err

    def kubectl_bg(self, *args):
        env = dict(os.environ, HOME=self.home, KUBECONFIG=self.kubeconfig)
        return subprocess.Popen([KUBECTL, "--cache-dir", os.path.join(self.home, "cache"), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)

    def api_client(self):
        from kubernetes import client, config
        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)
        return client.ApiClient(cfg)


def wait_for(cond, timeout=10.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


class Suite:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def run(self, name, fn, *args):
        t = time.time()
        try:
            fn(*args)
            self.passed += 1
            print("ok   %s (%.1fs)" % (name, time.time() - t), flush=True)
        except Exception:
            self.failed += 1
            print("FAIL %s" % name, flush=True)
            for line in traceback.format_exc().splitlines():
                print("    " + line, flush=True)

    def run_together(self, cases, *args):
        """Runs independent scenarios at once, one thread each, and reports
        them like run() in the order given once all have ended. For
        scenarios that mostly wait (for a phase, a requeue, a time limit)
        and touch nothing the others look at: their own sessions, models
        and namespaces, counters read as "at least". cases: [(name, fn)]."""
        import threading
        results = [None] * len(cases)

        def one(i, fn):
            t = time.time()
            try:
                fn(*args)
                results[i] = (time.time() - t, None)
            except Exception:
                results[i] = (time.time() - t, traceback.format_exc())
        threads = [threading.Thread(target=one, args=(i, fn), daemon=True)
                   for i, (_, fn) in enumerate(cases)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for (name, _), (secs, tb) in zip(cases, results):
            if tb is None:
                self.passed += 1
                print("ok   %s (%.1fs, concurrently)" % (name, secs), flush=True)
                continue
            self.failed += 1
            print("FAIL %s" % name, flush=True)
            for line in tb.splitlines():
                print("    " + line, flush=True)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed), flush=True)
        sys.exit(1 if self.failed else 0)


def eq(a, b, what=""):
    if a != b:
        raise AssertionError("%s: got %r, expected %r" % (what, a, b))


def contains(hay, needle, what=""):
    if needle not in hay:
        raise AssertionError("%s: %r not in %r" % (what, needle, hay[:3000]))
