"""The journal behind a locked door (docs/journal.md, "The locked door"):
the journal's etcd serves only TLS with client certificates of the
journal's CA, and etcd auth gives every session's runner a user that
reaches its own journal and nothing else. Escape attempts from the host and
from pods: without a certificate nothing connects; with a runner's
certificate and session A's credentials, session B's journal and lock
cannot be read, appended to or deleted, and no user or role can be
changed. A deleted session's user is gone, a parked one (no pod, no Job)
has none and no Secret until its next turn, which gets a new password; a
rotated runner certificate reaches the next turn.

Run: /usr/bin/python3 tests/integration/test_journal_door.py [name-substring]
"""
# runs on: terndev kube
import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import phase, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402
import test_e2e_operator as e2e  # noqa: E402


def secret_files(t, session):
    """The Secret <session>-journal, decoded: what that session's runner
    pods mount."""
    sec = t.get_json("secret", session + "-journal")
    return {k: base64.b64decode(v).decode() for k, v in sec["data"].items()}


def as_runner(t, files, d):
    """A JournalEtcd client with a runner's certificate and a session's
    credentials, as a compromised runner would hold them."""
    os.makedirs(d, exist_ok=True)
    for k in ("ca.crt", "tls.crt", "tls.key"):
        with open(os.path.join(d, k), "w") as f:
            f.write(files[k])
    j = ternlocal.JournalEtcd(t.etcd_url, os.path.join(d, "ca.crt"), os.path.join(d, "tls.crt"),
                              os.path.join(d, "tls.key"))
    return j.login(files["username"], files["password"])


def denied(fn):
    """The etcd error of fn() ('permission denied' ...), or None when it
    worked."""
    try:
        fn()
        return None
    except urllib.error.HTTPError as e:
        return "%d %s" % (e.code, e.read().decode()[:200])


b64 = ternlocal._b64

# Run inside a pod: tries the journal with what the pod has (argv: url,
# then optional certificate directory, user, password) and prints one JSON
# line of outcomes.
POD_SCRIPT = r'''
import base64, json, ssl, sys, urllib.request
url, d = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None
out = {}
ctx = ssl.create_default_context(cafile=d + "/ca.crt" if d else None)
if not d:
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
else:
    ctx.load_cert_chain(d + "/tls.crt", d + "/tls.key")
tok = None
def call(path, body):
    h = {"Content-Type": "application/json"}
    if tok:
        h["Authorization"] = tok
    r = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers=h)
    return json.loads(urllib.request.urlopen(r, context=ctx, timeout=10).read())
def b(s):
    return base64.b64encode(s.encode()).decode()
def attempt(name, path, body):
    try:
        call(path, body)
        out[name] = "ok"
    except urllib.error.HTTPError as e:
        out[name] = "HTTP %d %s" % (e.code, e.read().decode()[:120])
    except Exception as e:
        out[name] = "error " + repr(e)[:160]
if d:
    user = open(d + "/username").read().strip()
    pw = open(d + "/password").read().strip()
    try:
        tok = call("/v3/auth/authenticate", {"name": user, "password": pw})["token"]
        out["login"] = "ok"
    except Exception as e:
        out["login"] = "error " + repr(e)[:160]
own, other = sys.argv[3], sys.argv[4]
attempt("read_own", "/v3/kv/range", {"key": b("/tern/v1/s/%s/sum" % own)})
attempt("read_other", "/v3/kv/range", {"key": b("/tern/v1/s/%s/sum" % other)})
attempt("delete_other_journal", "/v3/kv/deleterange",
        {"key": b("/tern/v1/s/%s/" % other), "range_end": b("/tern/v1/s/%s0" % other)})
attempt("delete_other_lock", "/v3/kv/deleterange", {"key": b("/tern/v1/s/%s/lock" % other)})
print(json.dumps(out), flush=True)
'''


def run_pod(t, name, args, secret=None):
    """A pod running POD_SCRIPT; returns its JSON line."""
    vols, mounts = [], []
    if secret:
        vols = [{"name": "j", "secret": {"secretName": secret}}]
        mounts = [{"name": "j", "mountPath": "/j", "readOnly": True}]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                    "containers": [{"name": "c", "image": "python:3", "command": [
                        "python3", "-c", POD_SCRIPT, *args], "volumeMounts": mounts}],
                    "volumes": vols}}
    t.kubectl("apply", "-f", "-", input=json.dumps(pod))
    wait_for("pod %s done" % name, lambda: phase(t.get_json("pod", name)) in
             ("Succeeded", "Failed"), 120, interval=0.5)
    log = t.kubectl("logs", name)
    lines = [ln for ln in log.splitlines() if ln.startswith("{")]
    if not lines:
        raise AssertionError("pod %s printed no result: %s" % (name, log[-2000:]))
    return json.loads(lines[-1])


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.base = t.start_fakellm(e2e.SCRIPT)
        t.apply_crd()
        t.create_secret("model", "api-key", "test")
        t.apply_runner_rbac()
        t.start_operator()
        t.kubectl("apply", "-f", "-", input=e2e.manifest(t, "sa"))
        t.kubectl("apply", "-f", "-", input=e2e.manifest(t, "sb"))
        e2e.waiting(t, "sa")
        e2e.waiting(t, "sb")
        uid_a = t.session("sa")["metadata"]["uid"]
        uid_b = t.session("sb")["metadata"]["uid"]
        work = os.path.join(t.dir, "door")

        def no_certificate_no_connection():
            ctx = ssl.create_default_context(cafile=t.journal_pki.path("ca.crt"))
            try:
                urllib.request.urlopen(t.etcd_url + "/v3/kv/range", data=b"{}", context=ctx,
                                       timeout=5).read()
                raise AssertionError("a client without a certificate was served")
            except urllib.error.HTTPError as e:
                raise AssertionError("served without a certificate: %s" % e)
            except (ssl.SSLError, urllib.error.URLError, ConnectionError) as e:
                contains(repr(e).lower(), "ssl", "the TLS handshake refused it")
            # a certificate of another CA: refused the same way
            other = ternlocal.kubecluster_pki(os.path.join(work, "other-ca"))
            other.ca("ca", None, subj="/O=intruder")
            other.cert("c", "ca", None, orgs=("intruder",))
            ctx.load_cert_chain(other.path("c.crt"), other.path("c.key"))
            try:
                urllib.request.urlopen(t.etcd_url + "/v3/kv/range", data=b"{}", context=ctx,
                                       timeout=5).read()
                raise AssertionError("a certificate of another CA was accepted")
            except urllib.error.HTTPError as e:
                raise AssertionError("served with another CA's certificate: %s" % e)
            except (ssl.SSLError, urllib.error.URLError, ConnectionError):
                pass
            # plain http to the same port: nothing either
            try:
                urllib.request.urlopen(t.etcd_url.replace("https:", "http:") + "/health",
                                       timeout=5).read()
                raise AssertionError("plain http was served")
            except (urllib.error.URLError, ConnectionError, OSError):
                pass

        def certificate_without_user_is_refused():
            j = ternlocal.JournalEtcd(t.etcd_url, t.journal_pki.path("ca.crt"),
                                      t.journal_pki.path("runner.crt"),
                                      t.journal_pki.path("runner.key"))
            err = denied(lambda: j.range("/tern/v1/s/%s/" % uid_a))
            contains(err or "", "permission denied", "no user, no keys")

        def pod_without_certificate_cannot_connect():
            out = run_pod(t, "door-nocert", [t.etcd_url, "", uid_a, uid_b])
            for k in ("read_own", "read_other", "delete_other_journal", "delete_other_lock"):
                eq(out[k].startswith("error "), True, "%s: no HTTP answer (%s)" % (k, out[k]))
                contains(out[k].lower(), "ssl", "%s: the TLS handshake refused it" % k)

        def runner_of_a_reaches_only_a():
            files = secret_files(t, "sa")
            eq(files["username"], "tern-s-" + uid_a, "the session's own user")
            j = as_runner(t, files, os.path.join(work, "a"))
            eq(len(j.range("/tern/v1/s/%s/ev/" % uid_a)) > 0, True, "reads its own journal")
            # session b: no read, no approval of its pending call, no delete
            # of its journal or its lock, no lease revoke
            contains(denied(lambda: j.range("/tern/v1/s/%s/" % uid_b)) or "",
                     "permission denied", "read b")
            forged = {"v": 1, "seq": 99, "type": "approval_decided", "turn": 1,
                      "time": "2026-12-01T00:00:00.000000000Z",
                      "data": {"id": "ap-x", "decision": "approved", "decidedBy": "intruder"}}
            contains(denied(lambda: j.put("/tern/v1/s/%s/ev/%016x" % (uid_b, 99),
                                          json.dumps(forged))) or "",
                     "permission denied", "append to b")
            contains(denied(lambda: j.call("/v3/kv/deleterange", {
                "key": b64("/tern/v1/s/%s/" % uid_b),
                "range_end": b64("/tern/v1/s/%s0" % uid_b)})) or "", "permission denied",
                "delete b's journal")
            contains(denied(lambda: j.call("/v3/kv/deleterange", {
                "key": b64("/tern/v1/s/%s/lock" % uid_b)})) or "", "permission denied",
                "delete b's lock")
            contains(denied(lambda: j.call("/v3/kv/deleterange", {
                "key": b64("/tern/v1/s/"), "range_end": b64("/tern/v1/s0")})) or "",
                "permission denied", "delete every journal")
            contains(denied(lambda: j.call("/v3/auth/user/add", {
                "name": "intruder", "password": "x"})) or "", "permission denied",
                "add a user")
            contains(denied(lambda: j.call("/v3/auth/role/grant", {
                "name": "tern-s-" + uid_a, "perm": {"permType": "READWRITE", "key": b64("/"),
                                                    "range_end": b64("\0")}})) or "",
                "permission denied", "widen its role")
            contains(denied(lambda: j.call("/v3/auth/disable", {})) or "",
                     "permission denied", "disable auth")
            # (what etcd's lease API allows besides differs between 3.4 and
            # 3.6: test_journal_access.c, docs/journal.md)
            # b is untouched
            evb = ternlocal.journal_events(t.journal, uid_b)
            eq([e for e in evb if e["type"] == "approval_decided"], [], "no forged decision")
            eq(phase(t.session("sb")), "WaitingForApproval", "b still waits")

        def pod_with_runner_credentials_of_a():
            out = run_pod(t, "door-runner", [t.etcd_url, "/j", uid_a, uid_b], secret="sa-journal")
            eq(out["login"], "ok", "logs in as a's user")
            eq(out["read_own"], "ok", "reads a's summary")
            for k in ("read_other", "delete_other_journal", "delete_other_lock"):
                contains(out[k], "permission denied", k)

        def deleted_session_loses_its_user():
            files = secret_files(t, "sa")
            t.kubectl("delete", "agentsession", "sa", "--wait=false")
            wait_for("sa gone", lambda: t.kubectl("get", "agentsession", "sa", check=False)
                     .strip() == "", 60, interval=0.5)
            users = t.journal.call("/v3/auth/user/list", {}).get("users", [])
            eq("tern-s-" + uid_a in users, False, "a's etcd user removed")
            eq("tern-s-" + uid_b in users, True, "b's stays")
            try:
                as_runner(t, files, os.path.join(work, "a2"))
                raise AssertionError("a deleted session's password still logs in")
            except urllib.error.HTTPError as e:
                contains(e.read().decode(), "authentication failed", "login refused")

        def rotated_runner_certificate_reaches_the_next_turn():
            before = secret_files(t, "sb")["tls.crt"]
            pki = t.journal_pki
            pki.cert("runner-next", "ca", None, orgs=("tern",), ous=("journal-runner",))
            os.replace(pki.path("runner-next.key"), pki.path("runner.key"))
            os.replace(pki.path("runner-next.crt"), pki.path("runner.crt"))
            with open(pki.path("runner.crt")) as f:
                new = f.read()
            eq(new != before, True, "a new certificate")
            # the operator notices at the session's next reconcile: approving
            # starts the next turn, whose Job mounts the refreshed Secret
            t.tern("approve", "sb")
            s = e2e.completed(t, "sb")
            eq(phase(s), "Succeeded", "the next turn ran with the new certificate")
            eq(secret_files(t, "sb")["tls.crt"], new, "the Secret holds the new certificate")

        def parked_session_holds_no_user():
            # a session whose sandbox pod was given up (idle suspend) has no
            # etcd user, and the old password opens nothing; approving
            # brings the user back for the turn, which runs to the end
            t.kubectl("apply", "-f", "-", input=e2e.manifest(t, "sp", idle=2))
            e2e.waiting(t, "sp")
            uid = t.session("sp")["metadata"]["uid"]
            files = secret_files(t, "sp")

            def users():
                return t.journal.call("/v3/auth/user/list", {}).get("users", [])
            wait_for("sp's sandbox pod given up", lambda: t.kubectl(
                "get", "pod", "sp-sandbox", "--ignore-not-found", "-o", "name").strip() == "",
                120, interval=0.5)
            wait_for("sp's etcd user removed while parked",
                     lambda: "tern-s-" + uid not in users(), 60, interval=0.3)
            eq("tern-s-" + uid_b in users(), True, "a session with its pod keeps its user")
            try:
                as_runner(t, files, os.path.join(work, "sp"))
                raise AssertionError("a parked session's password logs in")
            except urllib.error.HTTPError as e:
                contains(e.read().decode(), "authentication failed", "login refused")
            # parked, it holds only its workspace claim: no credentials at all
            wait_for("sp's Secrets, task ConfigMap and NetworkPolicy removed while parked",
                     lambda: t.kubectl("get", "secret/sp-journal", "secret/sp-sandbox-token",
                                       "configmap/sp-task", "networkpolicy/sp-sandbox",
                                       "--ignore-not-found", "-o", "name").strip() == "",
                     60, interval=0.3)
            eq(t.kubectl("get", "pvc", "sp-workspace", "-o", "name").strip(),
               "persistentvolumeclaim/sp-workspace", "the workspace claim stays")
            t.tern("approve", "sp")
            s = e2e.completed(t, "sp")
            eq(phase(s), "Succeeded", "the turn after the wake ran (its runner logged in)")
            # the wake made a new Secret with a new password, granted once:
            # it logs in, the old one still does not
            woke = secret_files(t, "sp")
            eq(woke["password"] != files["password"], True, "a new password after the wake")
            as_runner(t, woke, os.path.join(work, "sp-woke")).range("/tern/v1/s/%s/" % uid)
            try:
                as_runner(t, files, os.path.join(work, "sp-old"))
                raise AssertionError("the password of before the park logs in")
            except urllib.error.HTTPError as e:
                contains(e.read().decode(), "authentication failed", "old login refused")
            # finished and idle again: parked again, the user and the
            # children go again
            wait_for("sp parked again", lambda: "tern-s-" + uid not in users() and t.kubectl(
                "get", "secret/sp-journal", "secret/sp-sandbox-token", "pod/sp-sandbox",
                "--ignore-not-found", "-o", "name").strip() == "", 120, interval=0.5)

        for name, fn in [
            ("no_certificate_no_connection", no_certificate_no_connection),
            ("certificate_without_user_is_refused", certificate_without_user_is_refused),
            ("pod_without_certificate_cannot_connect", pod_without_certificate_cannot_connect),
            ("runner_of_a_reaches_only_a", runner_of_a_reaches_only_a),
            ("pod_with_runner_credentials_of_a", pod_with_runner_credentials_of_a),
            ("deleted_session_loses_its_user", deleted_session_loses_its_user),
            ("rotated_runner_certificate_reaches_the_next_turn",
             rotated_runner_certificate_reaches_the_next_turn),
            ("parked_session_holds_no_user", parked_session_holds_no_user),
        ]:
            if only and not any(o in name for o in only):
                continue
            suite.run(name, fn)
        if suite.failed:
            print("---- tern-operator log (tail)")
            print(t.logs_of("tern-operator")[-4000:])
    suite.finish()


if __name__ == "__main__":
    main()
