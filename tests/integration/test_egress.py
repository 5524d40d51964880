"""Egress a user can trust (docs/egress.md), end to end: tern-egress-proxy,
tern-operator and a session whose networkAllowlist names hosts and a CIDR,
on the cluster's own kubelet, which puts the sandbox in a network namespace
of its own with a packet filter from its NetworkPolicy.

Servers on loopback stand in for the internet: an HTTP server for
allowed.example (a PyPI simple index with a wheel, a git repository over
dumb HTTP, /hello), an HTTPS server for it (a certificate of our own CA), a
server for forbidden.example, and servers on 127.1.255.x for direct
connections (one a CIDR entry allows, one nothing allows). The proxy resolves
names through a static map (--hosts-file) and counts 127.0.0.1 as public
(--assume-public), so the loopback servers can play public hosts while
rebind.example (127.0.0.2) and metadata.example (169.254.169.254) are what
they are: private and metadata addresses.

Inside the sandbox (commands through tern-sandboxd, and one model turn whose
tool calls hit refusals):
  - allowed: curl over HTTP and HTTPS (CONNECT; our CA verifies the server's
    certificate, so TLS went through untouched), pip download from the
    index, git ls-remote, and a direct connection the CIDR entry allows;
  - refused by the proxy with a 403 the tool shows: a forbidden name, an
    allowed name on another port, a raw IP, a private address, the metadata
    address (raw and by name), DNS rebinding (an allowed name resolving to
    a private address);
  - refused by the namespace's filter: direct connections bypassing the
    proxy (another host address, the node's pod-network address on another
    port, the metadata address), and a forged source address;
  - refused as unidentified: a client that is not a sandbox, whatever its
    headers say (X-Forwarded-For, Forwarded, Proxy-Authorization).
The proxy runs as the ServiceAccount of deploy/base/egress-proxy.yaml with
exactly its ClusterRole (a token of it), so the install's grants are proven
enough. Every decision is counted (tern_egress_decisions_total by session, verdict
and reason); refusals are Warning Events EgressRefused on the session, at
most one per session per interval (the rest counted as suppressed); the
model's tool results carry the proxy's explanation. An invalid allowlist
entry is refused with its reason: by the CRD's CEL rule on the real control
plane, by the operator's validation (InvalidSpec) on tern-dev, which
evaluates no CEL.

Run: /usr/bin/python3 tests/integration/test_egress.py [name-substring]
     (TERN_CLUSTER=kube: on the real control plane with tern-node)
Needs root (the kubelet makes network namespaces), curl, git, python3-pip
and openssl.
"""
# runs on: terndev kube
import base64
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import condition, phase, wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

ROOT = ternlocal.ROOT
NODE = ternlocal.Local.NODE_POD_NET_ADDR
DIRECT_OK, DIRECT_NO = "127.1.255.241", "127.1.255.242"


# ---- the stand-in internet ------------------------------------------------
class Handler(http.server.SimpleHTTPRequestHandler):
    banner = b"hello"

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.server.seen.append(self.path)
        if self.path.startswith("/hello"):
            body = self.banner + b"\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


def serve(host, root=None, banner=b"hello", tls=None):
    class H(Handler):
        pass
    H.banner = banner

    def make(*a, **kw):
        return H(*a, directory=root or "/nonexistent", **kw)
    srv = http.server.ThreadingHTTPServer((host, 0), make)
    srv.seen = []
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def wheel(dirpath):
    """A minimal valid wheel ternprobe-1.0 and its simple-index page."""
    files = {
        "ternprobe/__init__.py": b"VALUE = 1\n",
        "ternprobe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: ternprobe\n"
                                            b"Version: 1.0\n",
        "ternprobe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tern-test\n"
                                         b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += "%s,sha256=%s,%d\n" % (name, digest, len(data))
    record += "ternprobe-1.0.dist-info/RECORD,,\n"
    files["ternprobe-1.0.dist-info/RECORD"] = record.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    whl = "ternprobe-1.0-py3-none-any.whl"
    os.makedirs(os.path.join(dirpath, "packages"))
    with open(os.path.join(dirpath, "packages", whl), "wb") as f:
        f.write(buf.getvalue())
    sha = hashlib.sha256(buf.getvalue()).hexdigest()
    os.makedirs(os.path.join(dirpath, "simple", "ternprobe"))
    with open(os.path.join(dirpath, "simple", "ternprobe", "index.html"), "w") as f:
        f.write('<html><body><a href="../../packages/%s#sha256=%s">%s</a></body></html>\n'
                % (whl, sha, whl))


def git_repo(dirpath):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org", HOME=dirpath)
    bare = os.path.join(dirpath, "repo.git")
    work = os.path.join(dirpath, "work")
    for cmd in (["git", "init", "-q", "--bare", bare],
                ["git", "init", "-q", "-b", "main", work],
                ["git", "-C", work, "commit", "-q", "--allow-empty", "-m", "first"],
                ["git", "-C", work, "push", "-q", bare, "main"],
                ["git", "--git-dir", bare, "update-server-info"]):
        subprocess.run(cmd, check=True, env=env, capture_output=True)
    head = subprocess.run(["git", "-C", work, "rev-parse", "HEAD"], check=True, env=env,
                          capture_output=True, text=True).stdout.strip()
    shutil.rmtree(work)
    return head


def tls_files(d):
    key, cert = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=allowed.example", "-addext",
                    "subjectAltName=DNS:allowed.example", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key


# ---- the proxy's own identity ----------------------------------------------
def proxy_kubeconfig(t):
    """The ServiceAccount, ClusterRole and binding of deploy/base/egress-proxy.yaml
    applied as they are, and a kubeconfig with a token of that account: the
    proxy then runs with exactly the grants an install gives it."""
    import yaml
    with open(os.path.join(ROOT, "deploy", "base", "egress-proxy.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    t.kubectl("create", "namespace", "tern-system")
    for d in docs:
        if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            if d["kind"] == "ServiceAccount":
                d["metadata"]["namespace"] = "tern-system"
            t.kubectl("apply", "-f", "-", input=json.dumps(d))
    if t.cluster == "kube":
        token = t.kubectl("create", "token", "tern-egress-proxy", "-n", "tern-system",
                          "--duration", "2h").strip()
    else:
        # tern-dev's service-account tokens (docs/tern-dev-kubelet.md)
        import hmac
        uid = wait_for("the proxy's ServiceAccount", lambda: t.get_json(
            "serviceaccount", "tern-egress-proxy", "-n", "tern-system")["metadata"]["uid"], 30)
        key = open(os.path.join(t.dir, "tern-dev", "sa.key"), "rb").read()
        body = "ternsa1_tern-system_tern-egress-proxy_%s" % uid
        token = body + "." + hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    with open(t.kubeconfig) as f:
        kc = yaml.safe_load(f)
    kc["users"] = [{"name": "egress-proxy", "user": {"token": token}}]
    for c in kc["contexts"]:
        c["context"]["user"] = "egress-proxy"
    path = os.path.join(t.dir, "egress-proxy.kubeconfig")
    with open(path, "w") as f:
        yaml.safe_dump(kc, f)
    return path


# ---- the sandbox -----------------------------------------------------------
class Box:
    def __init__(self, t, name):
        self.t, self.name = t, name
        s = t.session(name)
        self.addr = s["status"]["sandbox"]["address"]
        sec = t.get_json("secret", name + "-sandbox-token")
        self.token = base64.b64decode(sec["data"]["token"]).decode()

    def call(self, method, path, body=None, ctype="application/json"):
        req = urllib.request.Request("http://%s%s" % (self.addr, path), data=body, method=method,
                                     headers={"Authorization": "Bearer " + self.token,
                                              "Content-Type": ctype})
        return json.loads(urllib.request.urlopen(req, timeout=120).read())

    def sh(self, cmd, timeout_ms=60000):
        r = self.call("POST", "/v1/exec",
                      json.dumps({"cmd": cmd, "timeoutMs": timeout_ms}).encode())
        return r["exitCode"], r["stdout"] + r["stderr"]

    def put(self, path, data):
        return self.call("PUT", "/v1/files/" + path, data, "application/octet-stream")


def metric(url, **labels):
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith("tern_egress_decisions_total{") and \
           not (labels.get("_name") and line.startswith(labels["_name"])):
            continue
        if all('%s="%s"' % (k, v) in line for k, v in labels.items() if k != "_name"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def suppressed(url):
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    m = re.search(r"^tern_egress_events_suppressed_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


# ---- scenarios ---------------------------------------------------------------
def check_sandbox_network(t):
    pod = t.get_json("pod", "eg-sandbox")
    ip = pod["status"]["podIP"]
    eq(ip.startswith("10.213."), True, "the sandbox is on the pod network (its own namespace): %s"
       % ip)
    np = t.get_json("networkpolicy", "eg-sandbox")
    eg = np["spec"]["egress"]
    eq(eg[0]["to"][0]["ipBlock"]["cidr"], NODE + "/32", "the proxy is the first egress peer")
    eq(eg[0]["ports"][0]["port"], int(t.proxy.split(":")[1]), "on its port only")
    eq(eg[1]["to"][0]["ipBlock"]["cidr"], DIRECT_OK + "/32", "the CIDR entry")
    rc, out = t.box.sh("env")
    contains(out, "HTTPS_PROXY=http://%s\n" % t.proxy, "proxy in the command's environment")
    contains(out, "https_proxy=http://%s\n" % t.proxy)
    contains(out, "NO_PROXY=localhost,127.0.0.1,::1,%s/32\n" % DIRECT_OK)


def check_allowed(t):
    pa, pb = t.http.server_address[1], t.https.server_address[1]
    rc, out = t.box.sh("curl -sS http://allowed.example:%d/hello" % pa)
    eq((rc, out), (0, "hello from allowed\n"), "plain HTTP through the proxy")
    t.box.put("working/ca.pem", open(t.cert, "rb").read())
    rc, out = t.box.sh("curl -sS --cacert /workspace/working/ca.pem https://allowed.example:%d/hello"
                       % pb)
    eq((rc, out), (0, "hello over tls\n"),
       "HTTPS through CONNECT, verified against our CA (the proxy does not terminate TLS)")
    rc, out = t.box.sh("python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check"
                       " -d /tmp/dl --index-url http://allowed.example:%d/simple/ --trusted-host "
                       "allowed.example:%d ternprobe && ls /tmp/dl" % (pa, pa), 120000)
    eq(rc, 0, "pip download: %s" % out)
    contains(out, "ternprobe-1.0-py3-none-any.whl")
    rc, out = t.box.sh("git ls-remote http://allowed.example:%d/repo.git" % pa)
    eq(rc, 0, "git ls-remote: %s" % out)
    contains(out, "%s\trefs/heads/main" % t.head)
    rc, out = t.box.sh("curl -sS http://%s:%d/hello" % (DIRECT_OK, t.direct_ok.server_address[1]))
    eq((rc, out), (0, "direct ok\n"), "a direct connection the CIDR entry allows (NO_PROXY)")
    eq(any("/hello" in p for p in t.direct_ok.seen), True, "it reached the server")
    eq(metric(t.metrics, namespace="default", session="eg", verdict="allow",
              reason="allowed_host") >= 4, True, "allowed decisions counted")


def check_refused_by_the_proxy(t):
    pa, pc = t.http.server_address[1], t.forbidden.server_address[1]
    before = metric(t.metrics, session="eg", verdict="deny")
    cases = [
        ("a forbidden name", "curl -sS http://forbidden.example:%d/hello" % pc,
         "forbidden.example:%d is not in spec.permissions.networkAllowlist of AgentSession "
         "default/eg" % pc, "not_allowlisted"),
        ("an allowed name on another port", "curl -sS http://allowed.example:%d/hello" % pc,
         "allowed.example:%d is not in spec.permissions.networkAllowlist" % pc, "not_allowlisted"),
        ("a raw IP", "curl -sS -x $HTTP_PROXY --noproxy '' http://127.0.0.1:%d/hello" % pa,
         "127.0.0.1 is an IP address, which only a CIDR entry", "address_not_allowlisted"),
        ("a private address", "curl -sS -x $HTTP_PROXY --noproxy '' http://10.0.0.1/",
         "10.0.0.1 is an IP address", "address_not_allowlisted"),
        ("the metadata address", "curl -sS -x $HTTP_PROXY --noproxy '' "
         "http://169.254.169.254/latest/meta-data/", "169.254.169.254 is an IP address",
         "address_not_allowlisted"),
        ("DNS rebinding: an allowed name resolving to a private address",
         "curl -sS http://rebind.example/", "rebind.example resolves to 127.0.0.2 (loopback)",
         "private_address"),
        ("the metadata address by name", "curl -sS http://metadata.example/",
         "metadata.example resolves to 169.254.169.254 (cloud metadata)", "private_address"),
    ]
    for what, cmd, want, reason in cases:
        rc, out = t.box.sh(cmd)
        contains(out, "tern-egress-proxy: refused: ", what)
        contains(out, want, what)
        eq(metric(t.metrics, session="eg", verdict="deny", reason=reason) >= 1, True,
           "%s counted as %s" % (what, reason))
    # CONNECT refusals as the tools show them
    rc, out = t.box.sh("curl -sS https://forbidden.example:%d/" % pc)
    eq(rc, 56, "curl's CONNECT failure")
    contains(out, "CONNECT tunnel failed, response 403")
    rc, out = t.box.sh("git ls-remote http://forbidden.example:%d/repo.git" % pc)
    eq(rc != 0, True, "git refused")
    contains(out, "403")
    rc, out = t.box.sh("python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check"
                       " --retries 1 -d /tmp/dl2 --index-url https://forbidden.example:%d/simple/ "
                       "ternprobe" % pc, 120000)
    eq(rc != 0, True, "pip refused")
    # pip shows the status line of a refused CONNECT when it retries
    contains(out, "Tunnel connection failed: 403 Forbidden by Tern egress proxy: host not in the "
                  "session's networkAllowlist")
    eq(t.forbidden.seen, [], "the forbidden server saw nothing")
    eq(metric(t.metrics, session="eg", verdict="deny") >= before + len(cases) + 3, True,
       "every refusal counted")


def check_direct_connections_fail(t):
    for what, host, port in [
            ("a host address no rule allows", DIRECT_NO, t.direct_no.server_address[1]),
            ("the node's pod-network address off the proxy port", NODE,
             t.on_node.server_address[1]),
            ("the metadata address", "169.254.169.254", 80)]:
        rc, out = t.box.sh("curl -sS --max-time 5 --noproxy '*' http://%s:%d/hello" % (host, port))
        eq(rc, 7, "%s: curl exit (couldn't connect, at once): %s" % (what, out))
        contains(out, "Failed to connect to %s port %d after" % (host, port), what)
    eq(t.direct_no.seen + t.on_node.seen, [], "nothing reached those servers")


def check_forged_sources(t):
    host, port = t.proxy.rsplit(":", 1)
    pa = t.http.server_address[1]
    # not a sandbox: refused, whatever the headers claim
    ip = t.get_json("pod", "eg-sandbox")["status"]["podIP"]
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(("CONNECT allowed.example:%d HTTP/1.1\r\nX-Forwarded-For: %s\r\n"
               "Forwarded: for=%s\r\nProxy-Authorization: Basic ZGVmYXVsdDplZw==\r\n\r\n"
               % (pa, ip, ip)).encode())
    resp = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        resp += chunk
    s.close()
    contains(resp.decode(), "HTTP/1.1 403 ", "a client that is not a sandbox")
    contains(resp.decode(), "is not the address of a running sandbox pod")
    eq(metric(t.metrics, verdict="deny", reason="no_session") >= 1, True, "counted as no_session")
    # a sandbox process sending from another address: dropped in its namespace
    rc, out = t.box.sh(
        "python3 -c \"import socket; s=socket.socket(); s.settimeout(3); "
        "s.setsockopt(socket.SOL_IP, 15, 1); s.bind(('10.213.0.250', 0)); "
        "s.connect(('%s', %s)); print('connected')\"" % (host, port))
    eq("connected" in out, False, "a forged source address: %s" % out)


def check_events_and_rate_limit(t):
    pc = t.forbidden.server_address[1]
    s0 = suppressed(t.metrics)
    rc, out = t.box.sh("for i in 1 2 3 4 5 6 7 8 9 10; do curl -s -o /dev/null "
                       "http://forbidden.example:%d/x; done" % pc)

    def warnings():
        evs = t.get_json("events", "--field-selector",
                         "involvedObject.kind=AgentSession,involvedObject.name=eg")["items"]
        return [e for e in evs if e.get("reason") == "EgressRefused"]
    evs = wait_for("EgressRefused events on the session", warnings, 60, interval=0.5)
    eq(all(e["type"] == "Warning" for e in evs), True, "Warning events")
    contains(" ".join(e.get("message", "") for e in evs), "networkAllowlist")
    eq(suppressed(t.metrics) >= s0 + 8, True,
       "a burst of 10 refusals: at most 2 Events in a 30 s interval, the rest counted "
       "(suppressed %s -> %s)" % (s0, suppressed(t.metrics)))


def check_the_model_sees_the_refusal(t):
    uid = t.session("eg")["metadata"]["uid"]
    evs = ternlocal.journal_events(t.journal, uid)
    results = [json.dumps(e["data"]) for e in evs if e["type"] == "tool_result"]
    eq(len(results) >= 2, True, "the turn's tool results: %d" % len(results))
    contains(results[0], "tern-egress-proxy: refused: GET forbidden.example:%d"
             % t.forbidden.server_address[1], "curl's output in the first tool result")
    contains(results[1], "403", "git's error in the second")


def check_invalid_entries(t):
    bad = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: eg-bad}
spec:
  objective: x
  permissions: {networkAllowlist: ["PyPI.org"]}
"""
    r = subprocess.run([ternlocal.KUBECTL, "apply", "-f", "-"], input=bad, capture_output=True,
                       text=True, env=dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig))
    if t.cluster == "kube":
        eq(r.returncode != 0, True, "the CRD's CEL rule refuses it")
        contains(r.stderr, "spec.permissions.networkAllowlist[0]")
        contains(r.stderr, "must be a CIDR such as 10.0.0.0/8 or fd00::/8, or a host name")
        # every CEL-only case of tests/data/invalid-sessions is refused
        import glob
        n = 0
        for f in sorted(glob.glob(os.path.join(ROOT, "tests", "data", "invalid-sessions",
                                               "allow-*.yaml"))):
            r = subprocess.run([ternlocal.KUBECTL, "apply", "--dry-run=server", "-f", f],
                               capture_output=True, text=True,
                               env=dict(os.environ, HOME=t.home, KUBECONFIG=t.kubeconfig))
            eq(r.returncode != 0, True, "%s accepted by kube-apiserver" % os.path.basename(f))
            contains(r.stderr, "spec.permissions.networkAllowlist[1]", os.path.basename(f))
            n += 1
        eq(n >= 10, True, "allow-* cases checked")
    else:
        eq(r.returncode, 0, "tern-dev evaluates no CEL: stored")
        s = t.wait_session("eg-bad", "InvalidSpec", lambda s: phase(s) == "Failed", 60)
        msgs = " ".join(c.get("message", "") for c in s["status"]["conditions"])
        contains(msgs, "host names are written in lower case")
        t.kubectl("delete", "agentsession", "eg-bad", "--wait=false")


SESSION = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: eg}
spec:
  objective: fetch what is allowed
  permissions:
    tools: [exec_command, read_file, write_file, list_files]
    networkAllowlist: ["allowed.example:%(pa)d", "allowed.example:%(pb)d", "rebind.example",
                       "metadata.example", "%(direct)s/32"]
  limits: {timeoutSeconds: 600}
  model: {name: fake-egress, baseURL: %(base)s, apiKeySecretRef: {name: model, key: api-key}}
"""


def main():
    only = sys.argv[1:]
    suite = Suite()
    if os.geteuid() != 0:
        print("skip: needs root (the kubelet makes network namespaces)")
        suite.finish()
    with ternlocal.Local() as t:
        t.start_etcd()
        t.start_cluster()
        t.apply_crd()
        d = os.path.join(t.dir, "www")
        os.makedirs(d)
        wheel(d)
        t.head = git_repo(d)
        t.cert, key = tls_files(t.dir)
        t.http = serve("127.0.0.1", d, b"hello from allowed")
        t.https = serve("127.0.0.1", banner=b"hello over tls", tls=(t.cert, key))
        t.forbidden = serve("127.0.0.1", d, b"forbidden content")
        t.direct_ok = serve(DIRECT_OK, banner=b"direct ok")
        t.direct_no = serve(DIRECT_NO, banner=b"direct forbidden")
        t.on_node = serve(NODE, banner=b"on the node")
        hosts = os.path.join(t.dir, "hosts")
        with open(hosts, "w") as f:
            f.write("127.0.0.1 allowed.example forbidden.example\n"
                    "127.0.0.2 rebind.example\n"
                    "169.254.169.254 metadata.example\n")
        t.proxy, t.metrics = t.start_egress_proxy(hosts_file=hosts, assume_public="127.0.0.1/32",
                                                  extra=["--event-interval-seconds", "30"],
                                                  kubeconfig=proxy_kubeconfig(t))
        pc = t.forbidden.server_address[1]
        script = os.path.join(t.dir, "script.json")
        with open(script, "w") as f:
            json.dump({"model": "fake-egress", "steps": [
                {"reply": {"toolCalls": [{"name": "exec_command", "arguments": {
                    "cmd": "curl -sS http://forbidden.example:%d/hello" % pc}}]}},
                {"reply": {"toolCalls": [{"name": "exec_command", "arguments": {
                    "cmd": "git ls-remote http://forbidden.example:%d/repo.git" % pc}}]}},
                {"reply": {"content": "Both were refused by the egress proxy."}},
            ]}, f)
        t.base = t.start_fakellm(script)
        t.create_secret("model", "api-key", "test")
        t.apply_runner_rbac()
        t.start_operator(extra=["--egress-proxy", t.proxy])
        t.kubectl("apply", "-f", "-", input=SESSION % {
            "pa": t.http.server_address[1], "pb": t.https.server_address[1],
            "direct": DIRECT_OK, "base": t.base})
        try:
            t.wait_session("eg", "Completed", lambda s: condition(s, "Completed") == "True" or
                           phase(s) == "Failed", 240)
            t.wait_session("eg", "sandbox ready", lambda s: (s["status"].get("sandbox") or {})
                           .get("address"), 60)
            t.box = Box(t, "eg")
        except Exception:
            for n in ("tern-operator", "tern-egress-proxy", "tern-dev", "tern-node"):
                print("---- %s log (tail)" % n)
                print(t.logs_of(n)[-3000:])
            raise
        for name, fn in [
            ("sandbox_network_and_environment", check_sandbox_network),
            ("allowed_names_work_http_https_pip_git_and_the_cidr", check_allowed),
            ("refused_by_the_proxy_with_a_clear_403", check_refused_by_the_proxy),
            ("direct_connections_bypassing_the_proxy_fail", check_direct_connections_fail),
            ("forged_sources_are_refused", check_forged_sources),
            ("refusals_are_rate_limited_events", check_events_and_rate_limit),
            ("the_model_sees_the_refusal", check_the_model_sees_the_refusal),
            ("invalid_allowlist_entries_are_refused", check_invalid_entries),
        ]:
            if only and not any(o in name for o in only):
                continue
            suite.run(name, fn, t)
        if suite.failed:
            for n in ("tern-operator", "tern-egress-proxy"):
                print("---- %s log (tail)" % n)
                print(t.logs_of(n)[-4000:])
    suite.finish()


if __name__ == "__main__":
    main()
