"""Artifacts that outlive the pod (docs/operator.md, "Artifacts"): after a
completed turn the operator copies the files under output/ from the
sandbox into ConfigMaps of the session's namespace (before idle suspend may
park the pod), records the set in the journal (artifacts_persisted) and
publishes each file's size and sha256 in status.result.artifacts;
`kubectl tern cp` then fetches them through the session API
(stream.tern.dev), checking the sha256, after the pod is gone and, with
spec.retainArtifacts, after the session is gone (until the TTL).

One cluster, operator, etcd and model for every case.

Run: /usr/bin/python3 tests/integration/test_artifacts.py [name-substring]
"""
# runs on: terndev kube
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT
SCRIPT = os.path.join(ROOT, "tests", "data", "artifacts-script.json")
GV = "/apis/stream.tern.dev/v1alpha1"
KEPT_TTL = 30

SESSION = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: %(name)s}
spec:
  objective: %(case)s, then answer
  permissions:
    tools: [exec_command, read_file, write_file, list_files]
  limits: {timeoutSeconds: 300}
  model: {name: fake-artifacts, baseURL: %(base)s, apiKeySecretRef: {name: model, key: api-key}}
  sandbox: {idleSuspendSeconds: %(idle)d}
%(extra)s"""

REPORT = b"# Report\n\nartifacts outlive the pod\n"
DATA = b"\x00\x01\xffbinary\n"


def ts(rfc3339):
    """Unix seconds of a journal time (nanoseconds, UTC)."""
    import datetime
    base, frac = rfc3339.rstrip("Z").split(".")
    t = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    return t + float("0." + frac)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def tern(t, *args, check=True):
    env = dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig,
               PATH=ternlocal.BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))
    r = subprocess.run([ternlocal.KUBECTL, "tern", *args], capture_output=True, text=True,
                       env=env, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError("kubectl tern %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                               r.stderr))
    return r


def apply(t, name, case, idle=600, extra=""):
    t.kubectl("apply", "-f", "-", input=SESSION % {"name": name, "case": case, "base": t.base,
                                                   "idle": idle, "extra": extra})


def condition(s, type_):
    """The whole condition type_ of session s, or None."""
    for c in (s.get("status") or {}).get("conditions", []):
        if c.get("type") == type_:
            return c
    return None


def persisted(t, name, timeout=120):
    """The session once ArtifactsPersisted is decided (True or False, not Pending)."""
    return t.wait_session(name, "ArtifactsPersisted", lambda s: (condition(
        s, "ArtifactsPersisted") or {}).get("reason") not in (None, "Pending"), timeout)


def sets(t, name):
    return t.get_json("configmap", "-l", "tern.dev/role=artifacts,tern.dev/session=" + name)[
        "items"]


def journal_sets(t, uid):
    return [e for e in ternlocal.journal_events(t.journal, uid)
            if e["type"] == "artifacts_persisted"]


def pod_gone(t, name):
    r = t.kubectl("get", "pod", name + "-sandbox", "--ignore-not-found", "-o", "name")
    return r.strip() == ""


def events(t, name, reason):
    evs = t.get_json("events", "--field-selector", "involvedObject.name=" + name)["items"]
    return [e for e in evs if e.get("reason") == reason]


def cp(t, src, check=True):
    d = tempfile.mkdtemp(dir=t.dir)
    dest = os.path.join(d, "out")
    r = tern(t, "cp", src, dest, check=check)
    data = None
    if os.path.exists(dest):
        with open(dest, "rb") as f:
            data = f.read()
    return r, data


def main():
    only = sys.argv[1:]
    suite = Suite()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.base = t.start_fakellm(SCRIPT)
        t.apply_crd()
        t.create_secret("model", "api-key", "test")
        t.apply_runner_rbac()
        t.start_operator()
        t.wait_api()
        # every session at once: they run side by side
        apply(t, "kept", "case-kept",
              extra="  retainArtifacts: {ttlSeconds: %d}\n" % KEPT_TTL)
        apply(t, "report", "case-report", idle=2)
        apply(t, "owned", "case-owned")
        apply(t, "full", "case-full")
        state = {}

        def stored_before_the_pod_is_parked():
            s = persisted(t, "report")
            cond = condition(s, "ArtifactsPersisted")
            eq((cond["status"], cond["reason"]), ("False", "NotAllStored"), "condition: %s" % cond)
            contains(cond["message"], "2 of 4 files not stored", "says how many")
            arts = {a["path"]: a for a in s["status"]["result"]["artifacts"]}
            eq(sorted(arts), ["output/big.bin", "output/link.md", "output/report.md",
                              "output/sub/data.bin"], "every file of output/")
            eq((arts["output/link.md"]["stored"], arts["output/link.md"]["reason"]),
               (False, "NotAFile"), "a symlink is listed, not followed")
            eq((arts["output/report.md"]["size"], arts["output/report.md"]["sha256"],
                arts["output/report.md"]["stored"]), (len(REPORT), sha(REPORT), True),
               "report.md's size and sha256")
            eq((arts["output/sub/data.bin"]["sha256"], arts["output/sub/data.bin"]["stored"]),
               (sha(DATA), True), "a binary file's sha256")
            big = arts["output/big.bin"]
            eq((big["stored"], big["reason"], big["size"]), (False, "TooLarge", 300000),
               "the file over the bound: %s" % big)
            wait_for("a Warning ArtifactTooLarge", lambda: events(t, "report", "ArtifactTooLarge"),
                     60)
            ev = events(t, "report", "ArtifactTooLarge")[0]
            eq(ev["type"], "Warning", "its type")
            contains(ev.get("message") or ev.get("note") or "", "output/big.bin", "its message")
            cms = sets(t, "report")
            eq([c["metadata"]["name"] for c in cms], ["report-artifacts-t1"], "one ConfigMap")
            eq(cms[0]["metadata"]["ownerReferences"][0]["uid"], s["metadata"]["uid"],
               "owned by the session")
            state["report_uid"] = s["metadata"]["uid"]
            # a figure, not a bound: the answer -> its files recorded
            evs = ternlocal.journal_events(t.journal, s["metadata"]["uid"])
            fin = [e["time"] for e in evs if e["type"] == "turn_finished"][-1]
            rec = [e["time"] for e in evs if e["type"] == "artifacts_persisted"][0]
            print("    figure: report's set (2 files stored, %d bytes; 2 listed only) recorded "
                  "%.0f ms after its answer"
                  % (len(REPORT) + len(DATA), (ts(rec) - ts(fin)) * 1000))

        def a_full_set_fits_one_configmap():
            # 850000 bytes under output/, 786432 the set's bound: three of
            # the four files (at least 600000 bytes) in one ConfigMap
            s = persisted(t, "full")
            arts = s["status"]["result"]["artifacts"]
            stored = [a for a in arts if a["stored"]]
            eq((len(arts), len(stored)), (4, 3), "three of four stored: %s" % arts)
            eq([a["reason"] for a in arts if not a["stored"]], ["SetTooLarge"], "the one left")
            eq(sum(a["size"] for a in stored) >= 600000, True, "bytes stored")
            eq(len(sets(t, "full")), 1, "one ConfigMap")
            a = stored[0]
            r, data = cp(t, "full:" + a["path"])
            eq((len(data), sha(data)), (a["size"], a["sha256"]), "a copy of " + a["path"])

        def cp_after_the_pod_is_parked():
            wait_for("report's sandbox pod parked", lambda: pod_gone(t, "report"), 90,
                     interval=0.3)
            r, data = cp(t, "report:output/report.md")
            eq(data, REPORT, "the copy")
            contains(r.stderr, "sha256 %s verified" % sha(REPORT), "checked: " + r.stderr)
            r, data = cp(t, "report:output/sub/data.bin")
            eq(data, DATA, "the binary copy")
            # from the store: no viewer Job was started for it
            jobs = t.get_json("jobs")["items"]
            eq([j["metadata"]["name"] for j in jobs if "-files-" in j["metadata"]["name"]], [],
               "no file viewer")
            eq(pod_gone(t, "report"), True, "the sandbox stays parked")
            r, _ = cp(t, "report:output/big.bin", check=False)
            eq(r.returncode != 0 or "persisted artifact" not in r.stderr, True,
               "big.bin is not served from the store: " + r.stderr)

        def a_tampered_copy_is_refused():
            # the stored bytes no longer match the manifest's sha256
            cm = t.get_json("configmap", "report-artifacts-t1")
            man = json.loads(cm["data"]["manifest.json"])
            key = [a for a in man["artifacts"] if a["path"] == "output/report.md"][0]["key"]
            patch = {"binaryData": {key: "dGFtcGVyZWQK"}}
            t.kubectl("patch", "configmap", "report-artifacts-t1", "--type", "merge", "-p",
                      json.dumps(patch))
            r, data = cp(t, "report:output/report.md", check=False)
            eq(r.returncode, 1, "refused: " + r.stderr)
            eq(data, None, "nothing written")
            t.kubectl("patch", "configmap", "report-artifacts-t1", "--type", "merge", "-p",
                      json.dumps({"binaryData": {key: cm["binaryData"][key]}}))
            r, data = cp(t, "report:output/report.md")
            eq(data, REPORT, "restored")

        def persist_on_demand():
            # refused, saying why, where the operator would not take a set
            tern(t, "suspend", "report")
            r = tern(t, "persist", "report", check=False)
            eq(r.returncode, 1, "refused while suspended: " + r.stdout)
            contains(r.stderr, "suspended", "why")
            eq("tern.dev/persist-artifacts" in (t.session("report")["metadata"].get(
                "annotations") or {}), False, "nothing was changed")
            tern(t, "resume", "report")
            tern(t, "persist", "report")
            uid = state["report_uid"]
            wait_for("a second recorded set", lambda: len(journal_sets(t, uid)) == 2, 120,
                     interval=0.3)
            names = sorted(c["metadata"]["name"] for c in sets(t, "report"))
            eq(len(names), 2, "two sets: %s" % names)
            eq(names[0], "report-artifacts-t1", "the turn's")
            eq(names[1].startswith("report-artifacts-t1-"), True, "the request's: %s" % names[1])
            s = persisted(t, "report")
            rep = [a for a in s["status"]["result"]["artifacts"] if a["path"] == "output/report.md"]
            eq(rep[0]["configMap"], names[1], "status names it")
            r, data = cp(t, "report:output/report.md")
            eq(data, REPORT, "the copy from the new set")

        def retained_after_the_session_is_deleted():
            s = persisted(t, "kept")
            eq(condition(s, "ArtifactsPersisted")["status"], "True", "persisted")
            cm = sets(t, "kept")[0]
            eq(cm["metadata"].get("ownerReferences"), None, "no owner")
            contains(cm["metadata"]["annotations"].get("tern.dev/artifacts-expire-at", ""), "T",
                     "an expiry")
            t.kubectl("delete", "agentsession", "kept", "--wait=false")
            wait_for("kept deleted", lambda: t.kubectl(
                "get", "agentsession", "kept", "--ignore-not-found", "-o", "name").strip() == "",
                90, interval=0.3)
            r, data = cp(t, "kept:output/keep.txt")
            eq(data, b"kept after the session\n", "fetched after the session is gone")
            contains(r.stderr, "verified", "sha256 checked")
            lst = json.loads(t.kubectl("get", "--raw",
                                       GV + "/namespaces/default/sessions/kept/artifacts"))
            eq((lst.get("sessionDeleted"), [a["path"] for a in lst["items"]]),
               (True, ["output/keep.txt"]), "the list from the store")

        def not_retained_goes_with_its_session():
            s = persisted(t, "owned")
            eq(condition(s, "ArtifactsPersisted")["status"], "True", "persisted")
            eq(len(sets(t, "owned")), 1, "stored")
            t.kubectl("delete", "agentsession", "owned", "--wait=false")
            wait_for("owned's set garbage-collected", lambda: sets(t, "owned") == [], 120,
                     interval=0.5)
            r, _ = cp(t, "owned:output/owned.txt", check=False)
            eq(r.returncode, 1, "nothing to fetch: " + r.stdout)

        def operator_killed_between_store_and_record():
            t.stop("tern-operator")
            op = t.start_operator(extra=["--fault", "artifacts-kill-after-store"], api=False)
            apply(t, "crash", "case-crash")
            wait_for("the operator killed after the store write", lambda: not op.alive(), 150,
                     interval=0.3)
            eq(op.p.returncode, -9, "killed by SIGKILL")
            cms = sets(t, "crash")
            eq([c["metadata"]["name"] for c in cms], ["crash-artifacts-t1"], "stored")
            rv = cms[0]["metadata"]["resourceVersion"]
            uid = t.session("crash")["metadata"]["uid"]
            eq(journal_sets(t, uid), [], "not recorded yet")
            t.stop("tern-operator")
            t.start_operator()
            t.wait_api()
            s = persisted(t, "crash")
            eq(condition(s, "ArtifactsPersisted")["status"], "True", "persisted after restart")
            cms = sets(t, "crash")
            eq(len(cms), 1, "stored once")
            eq(cms[0]["metadata"]["resourceVersion"], rv, "the same object, not written again")
            eq(len(journal_sets(t, uid)), 1, "recorded once")
            r, data = cp(t, "crash:output/once.txt")
            eq(data, b"stored once, recorded once\n", "fetched")

        def retained_set_expires():
            wait_for("kept's set deleted after its TTL", lambda: sets(t, "kept") == [],
                     KEPT_TTL + 60, interval=0.5)
            r, _ = cp(t, "kept:output/keep.txt", check=False)
            eq(r.returncode, 1, "gone: " + r.stderr)

        for name, fn in [
            ("stored_before_the_pod_is_parked", stored_before_the_pod_is_parked),
            ("a_full_set_fits_one_configmap", a_full_set_fits_one_configmap),
            ("cp_after_the_pod_is_parked", cp_after_the_pod_is_parked),
            ("a_tampered_copy_is_refused", a_tampered_copy_is_refused),
            ("persist_on_demand", persist_on_demand),
            ("retained_after_the_session_is_deleted", retained_after_the_session_is_deleted),
            ("not_retained_goes_with_its_session", not_retained_goes_with_its_session),
            ("operator_killed_between_store_and_record",
             operator_killed_between_store_and_record),
            ("retained_set_expires", retained_set_expires),
        ]:
            if only and not any(o in name for o in only):
                continue
            suite.run(name, fn)
        if suite.failed:
            print("---- tern-operator log (tail)")
            print(t.logs_of("tern-operator")[-6000:])
    suite.finish()


if __name__ == "__main__":
    main()
