"""tern-node as the node of the real control plane (docs/real-control-plane.md):
judged by the official kube-apiserver, kube-controller-manager and
kube-scheduler, through the real kubectl.

  - the Node: Ready, untainted, its labels and nodeInfo; its Lease renewed;
  - a pod the scheduler bound runs; `kubectl logs` (whole, --tail,
    --limit-bytes, --previous) and `kubectl logs -f` (to the container's
    end) go from the API server to tern-node's kubelet endpoint;
  - the endpoint authenticates and authorizes: no client certificate, a
    certificate of another CA, and a user without nodes/proxy are refused;
  - a projected service-account token from TokenRequest authenticates the
    pod to the API server;
  - a claim of the default StorageClass gets a volume from tern-node's
    provisioner, the pod writes to it, and the volume and its directory go
    with the claim.

Run: /usr/bin/python3 tests/integration/test_tern_node.py (needs `make kube`)
"""
# runs on: kube
import json
import os
import socket
import ssl
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import ternlocal  # noqa: E402
from ternlocal import wait_for  # noqa: E402
from terndev import Suite, eq, contains  # noqa: E402

NODE = "tern-node"


def apply(t, doc):
    t.kubectl("apply", "-f", "-", input=json.dumps(doc))


def pod(name, command, restart="Never", volumes=None, mounts=None):
    c = {"name": "c", "image": "not-pulled", "command": ["sh", "-c", command]}
    if mounts:
        c["volumeMounts"] = mounts
    spec = {"restartPolicy": restart, "containers": [c], "terminationGracePeriodSeconds": 2}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def phase_of(t, name):
    return t.get_json("pod", name).get("status", {}).get("phase")


def test_node(t):
    n = t.get_json("node", NODE)
    ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"][0]
    eq(ready["status"], "True", "Ready")
    eq(n["spec"].get("taints"), None, "no taints once Ready")
    labels = n["metadata"]["labels"]
    eq(labels.get("kubernetes.io/hostname"), NODE, "hostname label")
    eq(labels.get("kubernetes.io/os"), "linux", "os label")
    info = n["status"]["nodeInfo"]
    eq(info["architecture"], "amd64", "architecture in Kubernetes' names")
    eq(all(info.get(k) for k in ("bootID", "machineID", "systemUUID")), True,
       "bootID, machineID, systemUUID: %s" % info)
    contains(info["kubeletVersion"], "-tern", "kubeletVersion")
    eq(n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0, True, "kubelet port")
    lease = t.get_json("lease", NODE, "-n", "kube-node-lease")
    eq(lease["spec"]["holderIdentity"], NODE, "lease holder")
    eq(lease["metadata"]["ownerReferences"][0]["kind"], "Node", "lease owned by the Node")
    first = lease["spec"]["renewTime"]
    wait_for("the lease renewed", lambda: t.get_json("lease", NODE, "-n", "kube-node-lease")
             ["spec"]["renewTime"] != first, 30, interval=0.5)


def test_logs(t):
    apply(t, pod("talker", "for i in 1 2 3 4 5; do echo line-$i; done; sleep 1; echo last"))
    wait_for("talker Succeeded", lambda: phase_of(t, "talker") == "Succeeded", 60, interval=0.2)
    eq(t.get_json("pod", "talker")["spec"]["nodeName"], NODE, "bound by the scheduler")
    eq(t.kubectl("logs", "talker"), "line-1\nline-2\nline-3\nline-4\nline-5\nlast\n", "logs")
    eq(t.kubectl("logs", "talker", "--tail=2"), "line-5\nlast\n", "--tail=2")
    eq(t.kubectl("logs", "talker", "--limit-bytes=7"), "line-1\n", "--limit-bytes=7")
    # follow: started while the container runs, ends when it ends
    apply(t, pod("follower", "echo start; sleep 2; echo middle; sleep 1; echo end"))
    wait_for("follower Running", lambda: phase_of(t, "follower") == "Running", 60, interval=0.1)
    t0 = time.monotonic()
    out = t.kubectl("logs", "-f", "follower", timeout=60)
    eq(out, "start\nmiddle\nend\n", "logs -f")
    eq(time.monotonic() - t0 >= 1.0, True, "logs -f waited for the container")
    # previous: a container that fails once, then succeeds
    apply(t, pod("twice", "if [ -e /tmp/ran ]; then echo second; else touch /tmp/ran; "
                 "echo first; exit 1; fi", restart="OnFailure"))
    wait_for("twice restarted and Succeeded", lambda: phase_of(t, "twice") == "Succeeded",
             60, interval=0.2)
    eq(t.kubectl("logs", "twice", "--previous"), "first\n", "--previous")
    eq(t.kubectl("logs", "twice"), "second\n", "current")


def kubelet_get(t, path, cert):
    """GET on tern-node's endpoint with a client certificate of the launcher's
    PKI (None: none). Returns (status, body) or raises ssl.SSLError."""
    port = t.get_json("node", NODE)["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    ctx = ssl.create_default_context(cafile=t.kube.pki.path("ca.crt"))
    ctx.check_hostname = False
    if cert:
        ctx.load_cert_chain(t.kube.pki.path(cert + ".crt"), t.kube.pki.path(cert + ".key"))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as s:
            s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode(errors="replace")


def test_endpoint_auth(t):
    path = "/containerLogs/default/talker/c"
    status, body = kubelet_get(t, path, "apiserver-kubelet-client")
    eq(status, 200, "the API server's client certificate: " + body)
    contains(body, "line-1", "log body (chunked)")
    # no certificate: the handshake fails
    try:
        kubelet_get(t, path, None)
        raise AssertionError("a client without a certificate was served")
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        pass
    # a certificate the cluster CA did not sign
    other = os.path.join(t.dir, "other-ca")
    import kubecluster
    p = kubecluster.PKI(other)
    p.ca("ca", "someone-else")
    p.cert("intruder", "ca", "system:masters-wannabe", orgs=("system:masters",))
    ctx = ssl.create_default_context(cafile=t.kube.pki.path("ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(p.path("intruder.crt"), p.path("intruder.key"))
    port = t.get_json("node", NODE)["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
                if s.recv(100):
                    raise AssertionError("a certificate of another CA was served")
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        pass
    # a cluster identity without nodes/proxy (the scheduler's): 403
    status, body = kubelet_get(t, path, "scheduler")
    eq(status, 403, "scheduler's certificate")
    contains(body, "subresource=proxy", "the refusal names what was missing")
    status, _ = kubelet_get(t, "/exec/default/talker/c", "apiserver-kubelet-client")
    eq(status, 404, "exec is not served")


def test_projected_token(t):
    # the default ServiceAccount may not list pods: 403 (authenticated),
    # not 401 (a token the API server does not know)
    script = ("T=$(cat /var/run/secrets/kubernetes.io/serviceaccount/token); "
              "python3 -c \"import ssl,urllib.request,os; "
              "c=ssl.create_default_context(cafile='/var/run/secrets/kubernetes.io/serviceaccount/ca.crt'); "
              "r=urllib.request.Request('https://%s:%s/api/v1/namespaces/default/pods' % "
              "(os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']), "
              "headers={'Authorization': 'Bearer $T'}); "
              "exec('try:\\\\n urllib.request.urlopen(r, context=c)\\\\nexcept Exception as e:\\\\n print(e)')\"")
    apply(t, pod("token", script))
    wait_for("token pod done", lambda: phase_of(t, "token") in ("Succeeded", "Failed"), 60,
             interval=0.2)
    out = t.kubectl("logs", "token")
    contains(out, "403", "the pod's token authenticates (403, not 401): " + out)
    spec = t.get_json("pod", "token")["spec"]
    vols = [v["name"] for v in spec["volumes"] if "projected" in v]
    eq(any(v.startswith("kube-api-access-") for v in vols), True,
       "the API server's admission added the projected token volume: %s" % vols)


def test_volumes(t):
    apply(t, {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "ws"},
              "spec": {"accessModes": ["ReadWriteOnce"],
                       "resources": {"requests": {"storage": "1Gi"}}}})
    claim = wait_for("claim Bound", lambda: (lambda c: c if c.get("status", {}).get("phase") ==
                     "Bound" else None)(t.get_json("pvc", "ws")), 60, interval=0.2)
    eq(claim["spec"]["storageClassName"], "tern-local", "the default StorageClass")
    pv = t.get_json("pv", claim["spec"]["volumeName"])
    eq(pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"], "tern.dev/local-path",
       "provisioned by tern-node")
    path = pv["spec"]["hostPath"]["path"]
    apply(t, pod("writer", "echo kept > /ws/f; cat /ws/f",
                 volumes=[{"name": "ws", "persistentVolumeClaim": {"claimName": "ws"}}],
                 mounts=[{"name": "ws", "mountPath": "/ws"}]))
    wait_for("writer Succeeded", lambda: phase_of(t, "writer") == "Succeeded", 60, interval=0.2)
    with open(os.path.join(path, "f")) as f:
        eq(f.read(), "kept\n", "the file on the volume")
    t.kubectl("delete", "pod", "writer")
    t.kubectl("delete", "pvc", "ws")
    wait_for("PV deleted", lambda: t.kubectl("get", "pv", pv["metadata"]["name"],
                                               "--ignore-not-found", "-o", "name").strip() == "",
             60, interval=0.2)
    eq(os.path.exists(path), False, "the volume's directory removed")


def main():
    suite = Suite()
    with ternlocal.Local(cluster="kube") as t:
        t.start_cluster()
        for name, fn in [("node_registered_with_a_lease", test_node),
                         ("logs_through_the_api_server", test_logs),
                         ("kubelet_endpoint_authenticates_and_authorizes", test_endpoint_auth),
                         ("projected_token_from_token_request", test_projected_token),
                         ("local_volumes_provisioned_and_reclaimed", test_volumes)]:
            suite.run(name, fn, t)
        if suite.failed:
            print("---- tern-node log (tail)")
            print(t.logs_of("tern-node")[-3000:])
    suite.finish()


if __name__ == "__main__":
    main()
