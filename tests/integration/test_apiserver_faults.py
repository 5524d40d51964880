#!/usr/bin/python3
"""tern-dev under faults, spoken to over raw HTTPS.

tern-dev runs against an etcd this suite starts itself (--etcd), so the
suite can compact etcd under a watch. Checks: malformed JSON/YAML, oversize
bodies, deep nesting, invalid names, unknown and duplicate fields (Strict and
Warn), bad tokens, bad paths, methods and media types each get the real
Status error and never a crash; 100 concurrent read-modify-write writers on
one object get exactly the conflicts optimistic concurrency implies (no lost
update); etcd compaction under a watch (the watch continues, an old continue
token gets 410); garbage requests; SIGTERM stops tern-dev and the etcd it
started.
"""
import base64
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from terndev import Suite, TernDev, contains, eq, wait_for  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Etcd:
    def __init__(self, tmp):
        self.cport, self.pport = free_port(), free_port()
        self.url = "http://127.0.0.1:%d" % self.cport
        purl = "http://127.0.0.1:%d" % self.pport
        self.log = open(os.path.join(tmp, "etcd.log"), "ab")
        self.proc = subprocess.Popen(
            ["/usr/bin/etcd", "--name", "t", "--data-dir", os.path.join(tmp, "etcd"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", "t=" + purl, "--log-level", "warn", "--logger", "zap"],
            stdout=self.log, stderr=self.log)
        wait_for(self.healthy, 20, "etcd")

    def healthy(self):
        try:
            return b"true" in urllib.request.urlopen(self.url + "/health", timeout=1).read()
        except Exception:
            return False

    def post(self, path, body):
        r = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST")
        return json.loads(urllib.request.urlopen(r, timeout=10).read())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Raw:
    """Minimal HTTPS client with the kubeconfig's CA and token."""

    def __init__(self, kubeconfig):
        text = open(kubeconfig).read()
        self.port = int(re.search(r"server: https://127.0.0.1:(\d+)", text).group(1))
        ca = base64.b64decode(re.search(r"certificate-authority-data: (\S+)", text).group(1))
        self.token = re.search(r"token: (\S+)", text).group(1)
        self.ctx = ssl.create_default_context(cadata=ca.decode())

    def conn(self, timeout=30):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx,
                                           timeout=timeout)

    def req(self, method, path, body=None, ctype="application/json", token=True, headers=None):
        c = self.conn()
        h = {"Content-Type": ctype}
        if token:
            h["Authorization"] = "Bearer " + (self.token if token is True else token)
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        try:
            j = json.loads(data) if data else None
        except ValueError:
            j = None
        return r.status, j, r


CM = "/api/v1/namespaces/default/configmaps"


def cm(name, **extra):
    o = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"n": "0"}}
    o.update(extra)
    return o


def main():
    s = Suite()
    tmp = tempfile.mkdtemp(prefix="tern-dev-faults-")
    etcd = Etcd(tmp)
    td = TernDev(os.path.join(tmp, "td"))
    os.makedirs(td.tmp, exist_ok=True)
    try:
        td.start(extra=("--etcd", etcd.url))
    except Exception as e:
        print("FAIL start: %s" % e)
        print("0 passed, 1 failed")
        etcd.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(1)
    raw = Raw(td.kubeconfig)

    def status_of(code, j, reason):
        eq(j is not None and j.get("kind"), "Status", "a Status body")
        eq(j["code"], code, "Status.code")
        eq(j["reason"], reason, "Status.reason")

    def t_malformed():
        code, j, _ = raw.req("POST", CM, '{"apiVersion": "v1", "kind": ')
        eq(code, 400, "malformed JSON")
        status_of(400, j, "BadRequest")
        contains(j["message"], "json parse error")
        code, j, _ = raw.req("POST", CM, "kind: ConfigMap\n  bad: [indent", ctype="application/yaml")
        eq(code, 400, "malformed YAML")
        status_of(400, j, "BadRequest")
        code, j, _ = raw.req("POST", CM, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fromyaml}\n",
                             ctype="application/yaml")
        eq(code, 201, "YAML body")
        code, j, _ = raw.req("POST", CM, "[" * 100000 + "]" * 100000)
        eq(code, 400, "deep nesting")
        status_of(400, j, "BadRequest")
        code, j, _ = raw.req("POST", CM, json.dumps(cm("big", data={"x": "a" * (4 << 20)})))
        eq(code, 413, "oversize body")
        status_of(413, j, "RequestEntityTooLarge")
        code, j, _ = raw.req("POST", CM, "")
        eq(code, 400, "empty body")
        code, j, _ = raw.req("POST", CM, b"\x0a\x02v1", ctype="application/vnd.kubernetes.protobuf")
        eq(code, 400, "protobuf body without the envelope")
        job = b"k8s\x00\x0a\x0f\x0a\x08batch/v1\x12\x03Job\x12\x00"
        code, j, _ = raw.req("POST", "/apis/batch/v1/namespaces/default/jobs", job,
                             ctype="application/vnd.kubernetes.protobuf")
        eq(code, 415, "protobuf Job body")
        status_of(415, j, "UnsupportedMediaType")
        code, j, _ = raw.req("POST", CM, '"just a string"')
        eq(code, 400, "non-object body")

    def t_validation():
        code, j, _ = raw.req("POST", CM, cm("Bad_Name"))
        eq(code, 422, "invalid name")
        status_of(422, j, "Invalid")
        c = j["details"]["causes"][0]
        eq((c["reason"], c["field"]), ("FieldValueInvalid", "metadata.name"), "cause")
        contains(j["message"], 'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"')
        code, j, _ = raw.req("POST", CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
        eq(code, 422, "missing name")
        contains(j["message"], "metadata.name: Required value: name or generateName is required")
        code, j, _ = raw.req("POST", CM, {"apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"generateName": "gen-"}})
        eq(code, 201, "generateName")
        eq(j["metadata"]["name"].startswith("gen-") and len(j["metadata"]["name"]) == 9, True,
           "generated name")
        code, j, _ = raw.req("POST", CM, cm("badkey", data={"bad key": "v"}))
        eq(code, 422, "bad configmap key")
        eq(j["details"]["causes"][0]["field"], "data[bad key]", "key field path")
        code, j, _ = raw.req("POST", "/api/v1/namespaces/default/pods",
                             {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nopod"},
                              "spec": {"containers": [{"name": "c"}, {"name": "c", "image": "x"}]}})
        eq(code, 422, "invalid pod")
        contains(j["message"], "spec.containers[0].image: Required value")
        contains(j["message"], 'spec.containers[1].name: Duplicate value: "c"')
        code, j, _ = raw.req("POST", CM, cm("lbl", metadata={"name": "lbl", "labels": {"a": "b c"}}))
        eq(code, 422, "bad label value")
        code, j, _ = raw.req("POST", CM + "?fieldValidation=Strict", cm("unk", bogus=1))
        eq(code, 400, "unknown field Strict")
        contains(j["message"], 'strict decoding error: unknown field "bogus"')
        code, j, r = raw.req("POST", CM, cm("unk", bogus=1))
        eq(code, 201, "unknown field Warn")
        contains(r.getheader("Warning") or "", 'unknown field \\"bogus\\"')
        eq("bogus" in j, False, "unknown field dropped")
        code, j, _ = raw.req("POST", CM + "?fieldValidation=Strict",
                             '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d1","name":"d2"}}')
        eq(code, 400, "duplicate field Strict")
        contains(j["message"], "duplicate field")
        code, j, _ = raw.req("POST", "/api/v1/namespaces/other/configmaps", cm("x"))
        eq(code, 404, "namespace missing")
        contains(j["message"], 'namespaces "other" not found')
        code, j, _ = raw.req("POST", CM, cm("x", metadata={"name": "x", "namespace": "kube-system"}))
        eq(code, 400, "namespace mismatch")
        code, j, _ = raw.req("POST", CM, {"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "v"}})
        eq(code, 400, "wrong apiVersion")
        code, j, _ = raw.req("GET", CM + "?labelSelector=a%20in%20(b")
        eq(code, 400, "bad label selector")
        code, j, _ = raw.req("PATCH", CM + "/unk", '{"data":{"a":"b"}}', ctype="text/plain")
        eq(code, 415, "unknown patch type")
        code, j, _ = raw.req("PATCH", CM + "/unk", '[{"op":"remove","path":"/nope"}]',
                             ctype="application/json-patch+json")
        eq(code, 422, "json patch on a missing path")
        code, j, _ = raw.req("PATCH", CM + "/unk", '{"x"', ctype="application/merge-patch+json")
        eq(code, 400, "malformed merge patch")
        code, j, _ = raw.req("PATCH", CM + "/nope", '{}', ctype="application/merge-patch+json")
        eq(code, 404, "patch of a missing object")
        code, j, _ = raw.req("DELETE", CM + "/unk", {"propagationPolicy": "Sideways"})
        eq(code, 422, "bad propagationPolicy")
        contains(j["message"], 'propagationPolicy: Unsupported value: "Sideways"')
        code, j, _ = raw.req("DELETE", CM + "/unk", {"preconditions": {"uid": "not-it"}})
        eq(code, 409, "delete precondition")
        contains(j["message"], "Precondition failed: UID in precondition: not-it")

    def t_auth_paths():
        code, j, _ = raw.req("GET", CM, token=False)
        eq(code, 401, "no token")
        status_of(401, j, "Unauthorized")
        code, j, _ = raw.req("GET", CM, token="wrong")
        eq(code, 401, "wrong token")
        for p in ("/api/v1/nothings", "/apis/nope.io/v1/things", "/bogus", "/api/v1/namespaces/default/configmaps/a/b/c"):
            code, j, _ = raw.req("GET", p)
            eq(code, 404, p)
            status_of(404, j, "NotFound")
        code, j, _ = raw.req("POST", CM + "/unk", cm("unk"))
        eq(code, 405, "POST on an object")
        status_of(405, j, "MethodNotAllowed")
        code, _, r = raw.req("GET", "/openapi/v2")
        eq(code, 200, "openapi v2")
        contains(r.getheader("Content-Type"), "protobuf")
        code, idx, _ = raw.req("GET", "/openapi/v3")
        eq(code, 200, "openapi v3 index")
        url = idx["paths"]["api/v1"]["serverRelativeURL"]
        code, doc, _ = raw.req("GET", url)
        eq(code, 200, "openapi v3 api/v1")
        patch = doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
        eq(patch["x-kubernetes-group-version-kind"],
           {"group": "", "kind": "ConfigMap", "version": "v1"}, "patch GVK")
        eq([p["name"] for p in patch["parameters"]], ["fieldValidation"], "fieldValidation param")
        code, _, _ = raw.req("GET", "/openapi/v3/apis/nope.io/v1")
        eq(code, 404, "unknown group version")

    def t_garbage():
        rnd = random.Random(42)
        paths = [CM, CM + "/x", "/apis/tern.dev/v1alpha1/namespaces/default/agentsessions",
                 "/api/v1/namespaces", "/apis/batch/v1/namespaces/default/jobs"]
        for i in range(150):
            n = rnd.randrange(0, 300)
            body = bytes(rnd.randrange(256) for _ in range(n))
            if i % 3 == 0:
                body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "g%d" % i, "labels": {"k": rnd.choice(["", "x", "!", "a" * 70])}},
                                   "data": {str(rnd.random()): [1, {"a": None}]}}).encode()
            method = rnd.choice(["POST", "PUT", "PATCH", "DELETE", "GET"])
            ctype = rnd.choice(["application/json", "application/merge-patch+json",
                                "application/json-patch+json", "application/strategic-merge-patch+json",
                                "application/apply-patch+yaml", "application/yaml"])
            code, j, _ = raw.req(method, rnd.choice(paths) + rnd.choice(["", "?watch=0", "?limit=-1", "?fieldManager=x"]),
                                 body, ctype=ctype)
            if code >= 500:
                raise AssertionError("%s %d: %r" % (method, code, j))
        code, j, _ = raw.req("GET", "/version")
        eq(code, 200, "still serving")
        code, j, _ = raw.req("GET", "/api/v1/namespaces/default")
        eq(code, 200, "no deletecollection of namespaces")

    def t_concurrent_writers():
        code, j, _ = raw.req("POST", CM, cm("hot"))
        eq(code, 201, "create")
        results = []
        lock = threading.Lock()
        barrier = threading.Barrier(100)

        def writer():
            code, cur, _ = raw.req("GET", CM + "/hot")
            barrier.wait(30)
            cur["data"]["n"] = str(int(cur["data"]["n"]) + 1)
            code, body, _ = raw.req("PUT", CM + "/hot", cur)
            with lock:
                results.append((code, body))
        ts = [threading.Thread(target=writer) for _ in range(100)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        ok = [b for c, b in results if c == 200]
        conflicts = [b for c, b in results if c == 409]
        eq(len(results), 100, "all writers answered")
        eq(len(ok) + len(conflicts), 100, "only 200 or 409: %r" % sorted(set(c for c, _ in results)))
        for b in conflicts:
            eq(b["reason"], "Conflict", "conflict reason")
            contains(b["message"], "the object has been modified")
        code, final, _ = raw.req("GET", CM + "/hot")
        # every writer read the same version, so exactly one wins
        eq(len(ok), 1, "exactly one writer wins a race on one resourceVersion")
        eq(final["data"]["n"], "1", "no lost or doubled update")
        # now writers that retry on conflict: all succeed, none lost
        def retrying():
            for _ in range(200):
                code, cur, _ = raw.req("GET", CM + "/hot")
                cur["data"]["n"] = str(int(cur["data"]["n"]) + 1)
                code, _, _ = raw.req("PUT", CM + "/hot", cur)
                if code == 200:
                    return
                assert code == 409, code
        ts = [threading.Thread(target=retrying) for _ in range(20)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        code, final, _ = raw.req("GET", CM + "/hot")
        eq(final["data"]["n"], "21", "20 retrying writers, 20 increments")

    def t_compaction_under_watch():
        for i in range(3):
            raw.req("POST", CM, cm("cmp-%d" % i, metadata={"name": "cmp-%d" % i, "labels": {"cmp": "y"}}))
        code, page, _ = raw.req("GET", CM + "?labelSelector=cmp%3Dy&limit=1")
        token = page["metadata"]["continue"]
        rv = page["metadata"]["resourceVersion"]
        lines = []
        c = raw.conn(timeout=30)
        c.request("GET", CM + "?watch=true&timeoutSeconds=3&labelSelector=cmp%3Dy&resourceVersion=" + rv,
                  headers={"Authorization": "Bearer " + raw.token})
        resp = c.getresponse()
        eq(resp.status, 200, "watch status")

        def reader():
            for line in resp:
                lines.append(json.loads(line))
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        raw.req("POST", CM, cm("cmp-3", metadata={"name": "cmp-3", "labels": {"cmp": "y"}}))
        wait_for(lambda: len(lines) >= 1, 10, "first watch event")
        head = etcd.post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        etcd.post("/v3/kv/compaction", {"revision": head["header"]["revision"], "physical": True})
        raw.req("POST", CM, cm("cmp-4", metadata={"name": "cmp-4", "labels": {"cmp": "y"}}))
        wait_for(lambda: len(lines) >= 2, 10, "event after compaction")
        eq([(e["type"], e["object"]["metadata"]["name"]) for e in lines[:2]],
           [("ADDED", "cmp-3"), ("ADDED", "cmp-4")], "watch survives compaction")
        code, j, _ = raw.req("GET", CM + "?labelSelector=cmp%3Dy&limit=1&continue=" + token)
        eq(code, 410, "continue after compaction")
        status_of(410, j, "Expired")
        t.join(10)
        eq(t.is_alive(), False, "watch ended at timeoutSeconds")
        c.close()

    def t_expired_watch_event():
        # a restarted server's window starts at the current revision; older
        # versions get one ERROR event with a 410 Status, then the stream ends
        nonlocal raw
        td.stop()
        td.start(extra=("--etcd", etcd.url))
        raw = Raw(td.kubeconfig)
        code, j, _ = raw.req("GET", CM + "/hot")
        eq(code, 200, "objects kept across a restart")
        c = raw.conn()
        c.request("GET", CM + "?watch=true&resourceVersion=1",
                  headers={"Authorization": "Bearer " + raw.token})
        resp = c.getresponse()
        body = resp.read().decode()
        ev = json.loads(body.splitlines()[0])
        eq(ev["type"], "ERROR", "event type")
        eq((ev["object"]["code"], ev["object"]["reason"]), (410, "Expired"), "410 Expired")
        contains(ev["object"]["message"], "too old resource version: 1")
        c.close()

    def t_watch_object_path():
        raw.req("POST", CM, cm("one"))
        raw.req("POST", CM, cm("two"))
        c = raw.conn()
        c.request("GET", CM + "/one?watch=true&timeoutSeconds=2",
                  headers={"Authorization": "Bearer " + raw.token})
        resp = c.getresponse()
        evs = [json.loads(l) for l in resp.read().decode().splitlines() if l.strip()]
        c.close()
        eq([(e["type"], e["object"]["metadata"]["name"]) for e in evs], [("ADDED", "one")],
           "watch on an object path")

    def t_delete_collection():
        for n in ("dc1", "dc2"):
            raw.req("POST", CM, cm(n, metadata={"name": n, "labels": {"dc": "y"}}))
        raw.req("PATCH", CM + "/dc2", '{"metadata":{"finalizers":["x.io/hold"]}}',
                ctype="application/merge-patch+json")
        code, j, _ = raw.req("DELETE", CM + "?labelSelector=dc%3Dy")
        eq(code, 200, "deletecollection")
        eq(sorted(i["metadata"]["name"] for i in j["items"]), ["dc1", "dc2"], "deleted items")
        code, _, _ = raw.req("GET", CM + "/dc1")
        eq(code, 404, "dc1 gone")
        code, o, _ = raw.req("GET", CM + "/dc2")
        eq(code, 200, "dc2 held by its finalizer")
        eq("deletionTimestamp" in o["metadata"], True, "dc2 marked")
        raw.req("PATCH", CM + "/dc2", '{"metadata":{"finalizers":null}}',
                ctype="application/merge-patch+json")
        code, _, _ = raw.req("GET", CM + "/dc2")
        eq(code, 404, "dc2 gone with its finalizer")

    def t_pod_binding():
        pods = "/api/v1/namespaces/default/pods"
        code, _, _ = raw.req("POST", pods, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bp"},
                                            "spec": {"schedulerName": "test-binds-it",
                                                     "containers": [{"name": "c", "image": "x"}]}})
        eq(code, 201, "pod")
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bp"},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}
        code, j, _ = raw.req("POST", pods + "/bp/binding", binding)
        eq(code, 201, "binding")
        eq(j["status"], "Success", "binding status")
        code, pod, _ = raw.req("GET", pods + "/bp")
        eq(pod["spec"]["nodeName"], "node-1", "nodeName")
        eq([c["type"] for c in pod["status"]["conditions"]], ["PodScheduled"], "PodScheduled")
        code, j, _ = raw.req("POST", pods + "/bp/binding", binding)
        eq(code, 409, "second binding")
        contains(j["message"], 'pod bp is already assigned to node "node-1"')
        pod["spec"]["nodeName"] = "node-2"
        code, j, _ = raw.req("PUT", pods + "/bp", pod)
        eq(code, 422, "nodeName is immutable")
        binding["metadata"]["name"] = "nope"
        code, j, _ = raw.req("POST", pods + "/nope/binding", binding)
        eq(code, 404, "binding of a missing pod")

    def t_timeout_seconds():
        t0 = time.time()
        c = raw.conn()
        c.request("GET", CM + "?watch=true&timeoutSeconds=1",
                  headers={"Authorization": "Bearer " + raw.token})
        resp = c.getresponse()
        resp.read()
        c.close()
        dt = time.time() - t0
        eq(dt < 4, True, "timeoutSeconds=1 ended after %.1fs" % dt)

    def t_sigterm_stops_own_etcd():
        other = TernDev(os.path.join(tmp, "own"))
        os.makedirs(other.tmp, exist_ok=True)
        other.start()
        pid = other.proc.pid
        eq(open(os.path.join(other.dir, "tern-dev.pid")).read().strip(), str(pid), "pid file")
        children = open("/proc/%d/task/%d/children" % (pid, pid)).read().split()
        eq(len(children), 1, "one etcd child")
        etcd_pid = int(children[0])
        contains(open("/proc/%d/cmdline" % etcd_pid, "rb").read().decode(errors="replace"), "etcd")
        other.proc.send_signal(signal.SIGTERM)
        eq(other.proc.wait(20), 0, "exit status")

        def gone():
            try:
                os.kill(etcd_pid, 0)
                st = open("/proc/%d/stat" % etcd_pid).read().split()[2]
                return st == "Z"
            except (ProcessLookupError, FileNotFoundError):
                return True
        wait_for(gone, 10, "etcd stopped")
        eq(os.path.exists(os.path.join(other.dir, "tern-dev.pid")), False, "pid file removed")
        other.proc = None

    s.run("malformed, oversize, deeply nested bodies", t_malformed)
    s.run("validation errors and field validation", t_validation)
    s.run("authentication, paths, methods", t_auth_paths)
    s.run("garbage requests never crash", t_garbage)
    s.run("100 concurrent writers on one object", t_concurrent_writers)
    s.run("etcd compaction under a watch", t_compaction_under_watch)
    s.run("watch from an expired resourceVersion", t_expired_watch_event)
    s.run("watch timeoutSeconds", t_timeout_seconds)
    s.run("watch on an object path", t_watch_object_path)
    s.run("pods/binding", t_pod_binding)
    s.run("deletecollection", t_delete_collection)
    s.run("SIGTERM stops tern-dev and its etcd", t_sigterm_stops_own_etcd)
    s.run("clean SIGTERM stop", td.check_clean_stop)
    etcd.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    s.finish()


if __name__ == "__main__":
    main()
