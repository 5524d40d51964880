"""tern-dev with its controllers and local kubelet, judged by the real kubectl
and the official Python client: Jobs (retries, backoffLimit, podFailurePolicy),
a Deployment whose pod is deleted, an in-cluster client inside a pod, and a
tern-dev restart with a pod running. Prints "N passed, N failed"."""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from terndev import Suite, TernDev, contains, eq, wait_for  # noqa: E402

os.environ["TERN_DEV_KUBELET"] = "1"  # run the controllers and the local kubelet
os.environ["TERN_DEV_JOB_BACKOFF_SECONDS"] = "0"  # no 10 s/20 s pod-failure backoff


def get(td, *args):
    return json.loads(td.kubectl("get", *args, "-o", "json")[1])


def test_job_fails_twice_then_succeeds(td):
    td.kubectl("apply", "-f", "-", input="""
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: count}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Mi}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: turn}
spec:
  backoffLimit: 3
  template:
    spec:
      restartPolicy: Never
      volumes: [{name: c, persistentVolumeClaim: {claimName: count}}]
      containers:
      - name: runner
        image: tern-runner:dev
        command: [sh, -c, 'n=$(cat /c/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /c/n; test $n -ge 3 || exit 75']
        volumeMounts: [{name: c, mountPath: /c}]
""")
    td.kubectl("wait", "--for=condition=complete", "job/turn", "--timeout=60s", timeout=90)
    job = get(td, "job", "turn")
    eq(job["status"].get("failed"), 2, "failed")
    eq(job["status"].get("succeeded"), 1, "succeeded")
    pvc = get(td, "pvc", "count")
    eq(pvc["status"]["phase"], "Bound", "pvc phase")
    pods = get(td, "pods", "-l", "job-name=turn")["items"]
    eq(len(pods), 3, "pods")
    eq(sorted(p["status"]["phase"] for p in pods), ["Failed", "Failed", "Succeeded"], "phases")
    for p in pods:
        eq(p["metadata"].get("finalizers"), None, "tracking finalizer released")
    # deleting the Job collects its pods (background propagation)
    td.kubectl("delete", "job", "turn")
    wait_for(lambda: not get(td, "pods", "-l", "job-name=turn")["items"], 20, "pods collected")


def test_job_failure_modes(td):
    td.kubectl("apply", "-f", "-", input="""
apiVersion: batch/v1
kind: Job
metadata: {name: flaky}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: r, image: x, command: [sh, -c, "exit 1"]}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: misconfigured}
spec:
  backoffLimit: 6
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes: {containerName: r, operator: In, values: [78]}
  template:
    spec:
      restartPolicy: Never
      containers: [{name: r, image: x, command: [sh, -c, "exit 78"]}]
""")
    td.kubectl("wait", "--for=condition=failed", "job/flaky", "job/misconfigured",
               "--timeout=60s", timeout=90)
    flaky = get(td, "job", "flaky")
    reasons = {c["type"]: c.get("reason") for c in flaky["status"]["conditions"]}
    eq(reasons.get("Failed"), "BackoffLimitExceeded", "flaky reason")
    eq(flaky["status"].get("failed"), 2, "flaky failed")
    mis = get(td, "job", "misconfigured")
    reasons = {c["type"]: c.get("reason") for c in mis["status"]["conditions"]}
    eq(reasons.get("Failed"), "PodFailurePolicy", "podFailurePolicy reason")
    eq(mis["status"].get("failed"), 1, "fails fast")


def free_port():
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_deployment_pod_comes_back(td):
    port = free_port()
    td.kubectl("apply", "-f", "-", input="""
apiVersion: apps/v1
kind: Deployment
metadata: {name: op}
spec:
  replicas: 1
  selector: {matchLabels: {app: op}}
  template:
    metadata: {labels: {app: op}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: op
        image: tern-operator:dev
        command: [python3, -m, http.server, --bind, $(POD_IP), "%d"]
        env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]
        readinessProbe: {httpGet: {path: /, port: %d}, periodSeconds: 1}
""" % (port, port))
    td.kubectl("rollout", "status", "deployment/op", "--timeout=60s", timeout=90)
    pods = get(td, "pods", "-l", "app=op")["items"]
    eq(len(pods), 1, "one replica")
    first = pods[0]["metadata"]["name"]
    contains(pods[0]["status"]["podIP"], "127.1.", "pod IP")
    td.kubectl("delete", "pod", first, "--wait=false")

    def replaced():
        for p in get(td, "pods", "-l", "app=op")["items"]:
            ready = {c["type"]: c["status"] for c in p["status"].get("conditions", [])}
            if p["metadata"]["name"] != first and ready.get("Ready") == "True":
                return True
        return False
    wait_for(replaced, 40, "replacement pod ready")
    dep = get(td, "deployment", "op")
    wait_for(lambda: get(td, "deployment", "op")["status"].get("availableReplicas") == 1, 20,
             "available again")
    eq(dep["status"].get("observedGeneration"), dep["metadata"]["generation"], "observed")


def test_in_cluster_client_in_a_pod(td):
    """The official client in a pod, with its minted service-account token:
    RBAC first refuses the default account (403, kube-apiserver's message),
    then a Role and RoleBinding written with kubectl let the same token in."""
    td.kubectl("apply", "-f", "-", input="""
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true}
  containers:
  - name: c
    image: python
    command:
    - python3
    - -c
    - |
      import sys, time
      from kubernetes import client, config
      from kubernetes.client.exceptions import ApiException
      c = client.Configuration()
      config.load_incluster_config(client_configuration=c, try_refresh_token=False)
      v1 = client.CoreV1Api(client.ApiClient(c))
      ns = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
      said = False
      for _ in range(600):
          try:
              me = v1.read_namespaced_pod("client", ns)
              print("in-cluster ok", me.status.pod_ip, flush=True)
              sys.exit(0)
          except ApiException as e:
              if e.status != 403:
                  raise
              if not said:
                  print("refused", e.status, e.body, flush=True)
                  said = True
          time.sleep(0.1)  # the pod polls for its grant; the test waits on the log
      sys.exit(1)
""")
    pod = {}

    def log():
        p = get(td, "pod", "client")
        pod.update(p)
        uid = p["metadata"].get("uid")
        path = os.path.join(td.dir, "pods", uid, "logs", "c", "0.log")
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return ""
    wait_for(lambda: "refused 403" in log(), 60, "the default account refused")
    out = log()
    contains(out, 'pods \\"client\\" is forbidden: User \\"system:serviceaccount:default:default\\" '
             'cannot get resource \\"pods\\" in API group \\"\\" in the namespace \\"default\\"',
             "denial")
    td.kubectl("apply", "-f", "-", input="""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: pod-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {kind: ServiceAccount, name: default, namespace: default}
""")
    wait_for(lambda: get(td, "pod", "client")["status"].get("phase") in ("Succeeded", "Failed"),
             60, "client pod finished")
    out = log()
    eq(pod["status"]["phase"], "Succeeded", "phase (log: %s)" % out[-1500:])
    contains(out, "in-cluster ok 127.1.", "client output")


def test_restart_with_a_pod_running(td):
    td.kubectl("apply", "-f", "-", input="""
apiVersion: v1
kind: Pod
metadata: {name: sleeper}
spec:
  containers: [{name: s, image: x, command: [sh, -c, "while true; do sleep 0.2; done"]}]
""")
    wait_for(lambda: get(td, "pod", "sleeper")["status"].get("phase") == "Running", 30, "running")
    ip = get(td, "pod", "sleeper")["status"]["podIP"]
    td.stop()  # SIGTERM: pods stopped gracefully with tern-dev
    td.start()

    def restarted():
        p = get(td, "pod", "sleeper")
        cs = p["status"].get("containerStatuses", [{}])[0]
        return cs.get("restartCount") == 1 and "running" in cs.get("state", {}) and p
    p = wait_for(restarted, 30, "pod restarted by the new instance")
    cs = p["status"]["containerStatuses"][0]
    eq(cs["lastState"]["terminated"].get("message"), "tern-dev restarted", "last state")
    eq(p["status"]["podIP"], ip, "same pod IP")


def main():
    s = Suite()
    td = TernDev()
    try:
        td.start()
        s.run("job_fails_twice_then_succeeds", test_job_fails_twice_then_succeeds, td)
        s.run("job_failure_modes", test_job_failure_modes, td)
        s.run("deployment_pod_comes_back", test_deployment_pod_comes_back, td)
        s.run("in_cluster_client_in_a_pod", test_in_cluster_client_in_a_pod, td)
        s.run("restart_with_a_pod_running", test_restart_with_a_pod_running, td)
    except Exception as e:  # the instance did not start
        print("FAIL setup: %s" % e)
        s.failed += 1
    finally:
        td.cleanup()
    s.finish()


if __name__ == "__main__":
    main()
