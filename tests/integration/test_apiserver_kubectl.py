#!/usr/bin/python3
"""tern-dev judged by the real kubectl (fresh HOME and cache dir).

One tern-dev instance (own etcd, temp dir, --port 0) serves every check:
discovery and version dispatch, the AgentSession CRD (apply, wait
established), custom resources (apply, Table columns, get -w, describe,
label, annotate, merge/json patches, strategic patch refused with 415,
status subresource + wait --for=condition, generation rules, finalizers,
-o json|yaml|jsonpath, server-side apply, schema errors with field paths),
and built-ins from -f manifests (configmap, secret, pod, job) including
strategic merge patches as kubectl apply sends them; RBAC objects from
kubectl's generators and `kubectl auth can-i --as` (impersonation and
SelfSubjectAccessReview); Events: one store served as core/v1 and
events.k8s.io/v1 (get, columns, field selectors, describe's Events).
"""
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from terndev import ROOT, Suite, TernDev, contains, eq, wait_for  # noqa: E402

CRD = os.path.join(ROOT, "crds", "agentsessions.tern.dev.yaml")

SESSION = """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata:
  name: %s
spec:
  objective: "test %s"
"""

CM = """apiVersion: v1
kind: ConfigMap
metadata:
  name: cm1
  labels: {app: demo}
data:
  a: "1"
"""

SECRET = """apiVersion: v1
kind: Secret
metadata: {name: s1}
type: Opaque
stringData: {token: hunter2}
"""

POD = """apiVersion: v1
kind: Pod
metadata: {name: p1, labels: {app: demo}}
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: [sleep, "3600"]
    env:
    - {name: A, value: "%s"}
    - {name: B, value: "b"}
    ports:
    - {containerPort: 8080}
"""

DEPLOY = """apiVersion: apps/v1
kind: Deployment
metadata: {name: d1}
spec:
  selector: {matchLabels: {app: d1}}
  template:
    metadata: {labels: {app: d1}}
    spec:
      containers:
      - name: main
        image: busybox:1.36
        env:
        - {name: A, value: "%s"}
        - {name: B, value: "b"}
        ports:
        - {containerPort: 8080}
"""

EVENT = """apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: ev1}
eventTime: "2026-11-30T03:00:00.123456Z"
reportingController: tern.dev/test
reportingInstance: test-0
action: Check
reason: TestReason
type: Warning
note: seen through both APIs
regarding: {apiVersion: v1, kind: ConfigMap, namespace: default, name: evcm, uid: "%s"}
"""

JOB = """apiVersion: batch/v1
kind: Job
metadata: {name: j1}
spec:
  backoffLimit: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: busybox:1.36, command: ["true"]}
"""


def main():
    s = Suite()
    td = TernDev()
    try:
        td.start()
    except Exception as e:
        print("FAIL start: %s" % e)
        print("0 passed, 1 failed")
        td.cleanup()
        sys.exit(1)
    k = td.kubectl

    def write(name, text):
        p = os.path.join(td.tmp, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def t_version_discovery():
        _, out, _ = k("version", "-o", "json")
        v = json.loads(out)
        eq(v["serverVersion"]["minor"], "32", "server minor")
        _, out, _ = k("api-resources", "--no-headers")
        contains(out, "configmaps", "api-resources")
        contains(out, "jobs", "api-resources")
        _, out, _ = k("get", "ns", "-o", "name")
        for ns in ("default", "kube-system"):
            contains(out, "namespace/" + ns)

    def t_crd():
        _, out, _ = k("apply", "-f", CRD)
        contains(out, "customresourcedefinition.apiextensions.k8s.io/agentsessions.tern.dev created")
        k("wait", "--for", "condition=established", "--timeout=20s", "crd/agentsessions.tern.dev")
        _, out, _ = k("api-resources", "--api-group=tern.dev", "--no-headers")
        contains(out, "ags", "short name")
        _, out, _ = k("apply", "-f", CRD)
        contains(out, "unchanged")

    def t_cr_apply_get():
        p = write("s1.yaml", SESSION % ("s1", "one"))
        _, out, _ = k("apply", "-f", p)
        contains(out, "agentsession.tern.dev/s1 created")
        _, out, _ = k("get", "ags")
        head = out.splitlines()[0].split()
        eq(head, ["NAME", "PHASE", "TURN", "TOOLS", "APPROVAL", "REASON", "AGE"], "printer columns")
        _, wide, _ = k("get", "ags", "-o", "wide")
        eq(wide.splitlines()[0].split(), ["NAME", "PHASE", "TURN", "TOOLS", "APPROVAL", "REASON",
                                          "AGE", "MESSAGE"], "wide printer columns (priority 1)")
        contains(out.splitlines()[1], "s1")
        _, out, _ = k("get", "agentsession", "s1", "-o", "json")
        o = json.loads(out)
        eq(o["metadata"]["generation"], 1, "generation")
        eq(o["spec"]["limits"]["maxToolCalls"], 200, "CRD default applied")
        _, out, _ = k("get", "ags", "s1", "-o", "yaml")
        contains(out, "objective: test one")
        _, out, _ = k("get", "ags", "s1", "-o", "jsonpath={.spec.model.name}")
        eq(out, "gpt-5.6-mini", "jsonpath")
        _, out, _ = k("apply", "-f", p)
        contains(out, "unchanged")
        _, out, _ = k("explain", "ags.spec.limits")
        contains(out, "maxModelTurns\t<integer>")
        _, out, _ = k("describe", "ags", "s1")
        contains(out, "Name:         s1")
        contains(out, "Objective:")

    def t_cr_label_annotate_patch():
        k("label", "ags", "s1", "team=a")
        k("annotate", "ags", "s1", "tern.dev/approve=ap-1")
        _, out, _ = k("get", "ags", "-l", "team=a", "-o", "name")
        eq(out.strip(), "agentsession.tern.dev/s1", "label selector")
        _, out, _ = k("get", "ags", "-l", "team in (b,c)", "-o", "name")
        eq(out.strip(), "", "set-based selector")
        k("patch", "ags", "s1", "--type", "merge", "-p", '{"spec":{"suspend":true}}')
        k("patch", "ags", "s1", "--type", "json", "-p",
          '[{"op":"replace","path":"/spec/objective","value":"changed"}]')
        _, out, _ = k("get", "ags", "s1", "-o", "json")
        o = json.loads(out)
        eq(o["spec"]["suspend"], True, "merge patch")
        eq(o["spec"]["objective"], "changed", "json patch")
        eq(o["metadata"]["generation"], 3, "generation bumped by spec changes")
        eq(o["metadata"]["annotations"]["tern.dev/approve"], "ap-1", "annotation")
        rc, out, err = k("patch", "ags", "s1", "-p", '{"spec":{"suspend":false}}', check=False)
        eq(rc != 0, True, "strategic patch on a CR must fail")
        contains(err, "application/strategic-merge-patch+json is not supported")
        rc, _, err = k("patch", "ags", "s1", "--type", "json", "-p",
                       '[{"op":"test","path":"/spec/suspend","value":false}]', check=False)
        eq(rc != 0, True, "failed json patch test")

    def t_status_and_wait():
        w = td.kubectl_bg("wait", "--for=condition=Completed", "--timeout=30s", "ags/s1")
        time.sleep(0.5)
        k("patch", "ags", "s1", "--subresource=status", "--type", "merge", "-p",
          json.dumps({"status": {"phase": "Succeeded", "observedGeneration": 3,
                                 "conditions": [{"type": "Completed", "status": "True",
                                                 "reason": "Done", "message": "ok",
                                                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
        out, err = w.communicate(timeout=40)
        eq(w.returncode, 0, "kubectl wait: %s" % err.decode())
        contains(out.decode(), "condition met")
        _, out, _ = k("get", "ags", "s1", "-o", "json")
        o = json.loads(out)
        eq(o["metadata"]["generation"], 3, "status change does not bump generation")
        eq(o["status"]["phase"], "Succeeded", "status stored")
        # the main endpoint ignores status
        k("patch", "ags", "s1", "--type", "merge", "-p", '{"status":{"phase":"Failed"}}')
        _, out, _ = k("get", "ags", "s1", "-o", "jsonpath={.status.phase}")
        eq(out, "Succeeded", "main endpoint must not change status")
        # the status endpoint ignores spec
        k("patch", "ags", "s1", "--subresource=status", "--type", "merge", "-p",
          '{"spec":{"objective":"nope"}}')
        _, out, _ = k("get", "ags", "s1", "-o", "jsonpath={.spec.objective}")
        eq(out, "changed", "status endpoint must not change spec")
        _, out, _ = k("get", "ags", "s1")
        contains(out.splitlines()[1], "Succeeded")

    def t_get_watch():
        w = td.kubectl_bg("get", "ags", "-w", "--output-watch-events")
        time.sleep(1.0)
        k("label", "ags", "s1", "watched=yes")
        p = write("s2.yaml", SESSION % ("s2", "two"))
        k("apply", "-f", p)
        k("delete", "ags", "s2")
        time.sleep(1.5)
        w.terminate()
        out, _ = w.communicate(timeout=10)
        lines = [l.split()[0] for l in out.decode().splitlines() if l.strip()]
        eq(lines[0], "EVENT", "header")
        for ev in ("ADDED", "MODIFIED", "DELETED"):
            contains(lines, ev, "watch events %r" % lines)

    def t_schema_errors():
        bad = write("bad.yaml", """apiVersion: tern.dev/v1alpha1
kind: AgentSession
metadata: {name: bad1}
spec:
  objective: x
  limits: {maxToolCalls: "many"}
""")
        rc, _, err = k("apply", "-f", bad, check=False)
        eq(rc != 0, True, "invalid object accepted")
        contains(err, 'spec.limits.maxToolCalls: Invalid value: "string": '
                      'spec.limits.maxToolCalls in body must be of type integer: "string"')
        n = 0
        for f in sorted(glob.glob(os.path.join(ROOT, "tests", "data", "invalid-sessions", "*.yaml"))):
            text = open(f).read()
            if "# schema: cel:" in text:
                continue  # CEL rules are not evaluated by tern-dev (docs/tern-dev.md)
            path = [l[len("# path: "):].strip() for l in text.splitlines() if l.startswith("# path: ")][0]
            rc, _, err = k("apply", "-f", f, check=False)
            if rc == 0:
                raise AssertionError("%s was accepted" % os.path.basename(f))
            contains(err, path.split("[")[0], os.path.basename(f))
            n += 1
        eq(n >= 20, True, "invalid sessions checked")

    def t_finalizers():
        p = write("s3.yaml", SESSION % ("s3", "three"))
        k("apply", "-f", p)
        k("patch", "ags", "s3", "--type", "merge", "-p",
          '{"metadata":{"finalizers":["tern.dev/cleanup"]}}')
        k("delete", "ags", "s3", "--wait=false")
        _, out, _ = k("get", "ags", "s3", "-o", "json")
        o = json.loads(out)
        eq("deletionTimestamp" in o["metadata"], True, "deletionTimestamp set")
        eq(o["metadata"]["generation"], 2, "generation bumped on delete")
        rc, _, err = k("patch", "ags", "s3", "--type", "merge", "-p",
                       '{"metadata":{"finalizers":["tern.dev/cleanup","x.io/y"]}}', check=False)
        eq(rc != 0, True, "new finalizer while deleting")
        contains(err, "no new finalizers can be added if the object is being deleted")
        k("patch", "ags", "s3", "--type", "json", "-p",
          '[{"op":"remove","path":"/metadata/finalizers"}]')
        rc, _, err = k("get", "ags", "s3", check=False)
        eq(rc != 0, True, "object removed with its last finalizer")
        contains(err, 'agentsessions.tern.dev "s3" not found')

    def t_builtins():
        for name, text in (("cm.yaml", CM), ("secret.yaml", SECRET), ("pod.yaml", POD % "1"),
                           ("job.yaml", JOB)):
            _, out, _ = k("apply", "-f", write(name, text))
            contains(out, "created")
        _, out, _ = k("get", "cm", "cm1")
        eq(out.splitlines()[0].split(), ["NAME", "DATA", "AGE"], "configmap columns")
        _, out, _ = k("get", "pods")
        eq(out.splitlines()[0].split(), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], "pod columns")
        contains(out, "/1 ")
        _, out, _ = k("get", "secret", "s1", "-o", "jsonpath={.data.token}")
        eq(out, "aHVudGVyMg==", "stringData merged into data")
        _, out, _ = k("get", "job", "j1", "-o", "json")
        j = json.loads(out)
        eq(j["spec"]["completions"], 1, "job defaults")
        eq(j["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"], "j1",
           "job template labels")
        _, out, _ = k("get", "jobs")
        eq(out.splitlines()[0].split(), ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
           "job columns")
        # a pod's spec is immutable but for images (ValidatePodUpdate)
        rc, _, err = k("apply", "-f", write("pod.yaml", POD % "2"), check=False)
        eq(rc != 0, True, "pod env change accepted")
        contains(err, "pod updates may not change fields other than `spec.containers[*].image`")
        k("patch", "pod", "p1", "-p", '{"spec":{"containers":[{"name":"main","image":"busybox:1.37"}]}}')
        _, out, _ = k("get", "pod", "p1", "-o", "json")
        c = json.loads(out)["spec"]["containers"]
        eq(len(c), 1, "keyed merge kept one container")
        eq(c[0]["image"], "busybox:1.37", "strategic patch image")
        eq(c[0]["env"], [{"name": "A", "value": "1"}, {"name": "B", "value": "b"}], "env kept")
        eq(c[0]["ports"], [{"containerPort": 8080, "protocol": "TCP"}], "ports kept")
        k("apply", "-f", write("pod.yaml", POD % "1"))
        # kubectl apply of a changed deployment: strategic merge with $setElementOrder
        _, out, _ = k("apply", "-f", write("deploy.yaml", DEPLOY % "1"))
        contains(out, "deployment.apps/d1 created")
        _, out, _ = k("apply", "-f", write("deploy.yaml", DEPLOY % "2"))
        contains(out, "deployment.apps/d1 configured")
        path = "jsonpath={.spec.template.spec.containers[0].env}"
        _, out, _ = k("get", "deploy", "d1", "-o", path)
        eq(json.loads(out), [{"name": "A", "value": "2"}, {"name": "B", "value": "b"}], "env merged")
        k("patch", "deploy", "d1", "-p", '{"spec":{"template":{"spec":{"containers":[{"name":"main","env":[{"name":"B","$patch":"delete"}]}]}}}}')
        _, out, _ = k("get", "deploy", "d1", "-o", "json")
        d = json.loads(out)
        eq(d["spec"]["template"]["spec"]["containers"][0]["env"], [{"name": "A", "value": "2"}],
           "$patch: delete")
        eq(d["metadata"]["generation"], 3, "deployment generation")
        _, out, _ = k("get", "deploy")
        eq(out.splitlines()[0].split(), ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
           "deployment columns")
        rc, _, err = k("apply", "-f", write("badjob.yaml", JOB.replace("j1", "j2").replace("Never", "Always")),
                       check=False)
        eq(rc != 0, True, "job with restartPolicy Always")
        contains(err, 'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"')
        k("label", "cm", "cm1", "x=y")
        k("annotate", "cm", "cm1", "note=hi")
        k("patch", "cm", "cm1", "--type", "merge", "-p", '{"data":{"b":"2"}}')
        k("patch", "cm", "cm1", "--type", "json", "-p", '[{"op":"add","path":"/data/c","value":"3"}]')
        _, out, _ = k("get", "cm", "cm1", "-o", "json")
        cm = json.loads(out)
        eq(cm["data"], {"a": "1", "b": "2", "c": "3"}, "configmap patches")
        eq(cm["metadata"]["labels"], {"app": "demo", "x": "y"}, "labels")
        _, out, _ = k("get", "pods,cm", "-l", "app=demo", "-o", "name")
        eq(sorted(out.split()), ["configmap/cm1", "pod/p1"], "multi-kind selector")
        # (stable whether or not a kubelet runs the pods; the Deployment's
        # pod also matches the first two requirements)
        _, out, _ = k("get", "pods", "--field-selector",
                      "spec.restartPolicy=Always,status.phase!=Bogus,metadata.name!=nope,"
                      "metadata.namespace=default", "-o", "name")
        out = "\n".join(n for n in out.split() if not n.startswith("pod/d1-"))
        eq(out.strip(), "pod/p1", "field selector")
        _, out, _ = k("get", "pods", "--field-selector", "status.phase=Bogus", "-o", "name")
        eq(out.strip(), "", "field selector, no match")
        rc, _, err = k("get", "pods", "--field-selector", "spec.bogus=1", check=False)
        eq(rc != 0, True, "unsupported field selector")
        contains(err, "field label not supported: spec.bogus")
        for name in ("cm.yaml", "secret.yaml", "pod.yaml", "job.yaml", "deploy.yaml"):
            _, out, _ = k("delete", "-f", os.path.join(td.tmp, name))
            contains(out, "deleted")
        # dependents (the Deployment's and Job's pods) go by the garbage
        # collector, after their owners, as on a real cluster
        deadline = time.time() + 60
        while True:
            _, out, _ = k("get", "cm,secret,pod,job,deploy", "-o", "name")
            if not out.strip() or time.time() > deadline:
                break
            time.sleep(0.2)  # polling a condition with a deadline
        eq(out.strip(), "", "all deleted")

    def t_generator_commands():
        # kubectl create ns|configmap|secret|serviceaccount send protobuf bodies
        _, out, _ = k("create", "namespace", "team-a")
        contains(out, "namespace/team-a created")
        _, out, _ = k("create", "configmap", "gen", "-n", "team-a", "--from-literal=k=v")
        contains(out, "configmap/gen created")
        _, out, _ = k("create", "secret", "generic", "openai", "-n", "team-a",
                      "--from-literal=api-key=sk-test")
        contains(out, "secret/openai created")
        _, out, _ = k("create", "serviceaccount", "robot", "-n", "team-a")
        contains(out, "serviceaccount/robot created")
        _, out, _ = k("get", "secret", "openai", "-n", "team-a", "-o", "jsonpath={.data.api-key}")
        eq(out, "c2stdGVzdA==", "secret data")
        _, out, _ = k("get", "cm", "gen", "-n", "team-a", "-o", "jsonpath={.data.k}")
        eq(out, "v", "configmap data")
        rc, _, err = k("create", "job", "gj", "--image=busybox", check=False)
        eq(rc != 0, True, "protobuf Job body is not decoded")
        contains(err, "unknown format")
        _, out, _ = k("delete", "namespace", "team-a")
        contains(out, 'namespace "team-a" deleted')
        rc, _, _ = k("get", "secret", "openai", "-n", "team-a", check=False)
        eq(rc != 0, True, "namespace content deleted")

    def t_server_side_apply():
        _, out, _ = k("apply", "--server-side", "-f", write("cm.yaml", CM))
        contains(out, "configmap/cm1 serverside-applied")
        _, out, _ = k("apply", "--server-side", "-f", write("cm.yaml", CM.replace('a: "1"', 'a: "9"')))
        contains(out, "serverside-applied")
        _, out, _ = k("get", "cm", "cm1", "-o", "jsonpath={.data.a}")
        eq(out, "9", "server-side apply updates")
        _, out, _ = k("apply", "--server-side", "-f", write("s4.yaml", SESSION % ("s4", "four")))
        contains(out, "agentsession.tern.dev/s4 serverside-applied")
        k("delete", "cm", "cm1")

    def t_strict_unknown_fields():
        p = write("unk.yaml", CM.replace("\ndata:", "\nbogus: 1\ndata:"))
        rc, _, err = k("apply", "-f", p, check=False)
        eq(rc != 0, True, "unknown field accepted under Strict")
        contains(err, 'strict decoding error: unknown field "bogus"')
        rc, _, err = k("create", "-f", write("unk2.yaml", SESSION % ("s5", "x") + "  bogus: 1\n"),
                       check=False)
        eq(rc != 0, True, "unknown CR field accepted under Strict")
        contains(err, 'unknown field "spec.bogus"')
        rc, _, err = k("create", "-f", write("dup.yaml", SESSION % ("s6", "x")), check=False)
        eq(rc, 0, "create: " + err)
        rc, _, err = k("create", "-f", os.path.join(td.tmp, "dup.yaml"), check=False)
        eq(rc != 0, True, "create twice")
        contains(err, 'agentsessions.tern.dev "s6" already exists')

    def t_crd_delete():
        _, out, _ = k("delete", "-f", CRD)
        contains(out, 'customresourcedefinition.apiextensions.k8s.io "agentsessions.tern.dev" deleted')
        rc, _, err = k("get", "agentsessions.tern.dev", check=False)
        eq(rc != 0, True, "resource still served after CRD deletion")
        k("apply", "-f", CRD)
        k("wait", "--for", "condition=established", "--timeout=20s", "crd/agentsessions.tern.dev")
        _, out, _ = k("get", "ags", "-o", "name")
        eq(out.strip(), "", "custom resources deleted with their CRD")

    def t_rbac():
        """RBAC judged by kubectl itself: kubectl create sa|role|rolebinding|
        clusterrole|clusterrolebinding (protobuf bodies), kubectl auth can-i
        --as (impersonation + SelfSubjectAccessReview) and a request made
        --as a service account, refused with kube-apiserver's message."""
        bot = "--as=system:serviceaccount:default:bot"
        k("create", "serviceaccount", "bot")
        rc, out, _ = k("auth", "can-i", "list", "pods", bot, check=False)
        eq((rc, out.strip()), (1, "no"), "can-i before any grant")
        rc, _, err = k("get", "pods", "-n", "kube-system", bot, check=False)
        eq(rc != 0, True, "list as bot without a grant")
        contains(err, 'Error from server (Forbidden): pods is forbidden: User '
                 '"system:serviceaccount:default:bot" cannot list resource "pods" in API group '
                 '"" in the namespace "kube-system"')
        k("create", "role", "pod-reader", "--verb=get,list", "--resource=pods")
        k("create", "rolebinding", "pod-reader", "--role=pod-reader",
          "--serviceaccount=default:bot")
        _, out, _ = k("get", "role", "pod-reader", "-o", "json")
        eq(json.loads(out)["rules"], [{"apiGroups": [""], "resources": ["pods"],
                                       "verbs": ["get", "list"]}], "rules from protobuf")
        _, out, _ = k("get", "rolebinding", "pod-reader", "-o", "json")
        rb = json.loads(out)
        eq(rb["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                           "name": "pod-reader"}, "roleRef from protobuf")
        eq(rb["subjects"], [{"kind": "ServiceAccount", "name": "bot", "namespace": "default"}],
           "subjects from protobuf")
        _, out, _ = k("auth", "can-i", "list", "pods", bot)
        eq(out.strip(), "yes", "can-i after the RoleBinding")
        rc, out, _ = k("auth", "can-i", "delete", "pods", bot, check=False)
        eq((rc, out.strip()), (1, "no"), "a verb not granted")
        rc, out, _ = k("auth", "can-i", "list", "pods", "-n", "kube-system", bot, check=False)
        eq((rc, out.strip()), (1, "no"), "another namespace")
        k("get", "pods", bot)
        k("create", "clusterrole", "cm-reader", "--verb=list", "--resource=configmaps")
        k("create", "clusterrolebinding", "cm-reader", "--clusterrole=cm-reader",
          "--serviceaccount=default:bot")
        _, out, _ = k("auth", "can-i", "list", "configmaps", "-n", "kube-system", bot)
        eq(out.strip(), "yes", "a ClusterRoleBinding grants in every namespace")
        # the admin may do anything; impersonating a user with no grant may not
        _, out, _ = k("auth", "can-i", "delete", "nodes")
        eq(out.strip(), "yes", "admin")
        rc, out, _ = k("auth", "can-i", "get", "pods", "--as=alice", check=False)
        eq((rc, out.strip()), (1, "no"), "an unknown user")
        # kubectl auth whoami (SelfSubjectReview), also impersonated
        _, out, _ = k("auth", "whoami", "-o", "json")
        eq(json.loads(out)["status"]["userInfo"]["username"], "tern-dev:admin", "whoami")
        _, out, _ = k("auth", "whoami", "-o", "json", bot)
        eq(json.loads(out)["status"]["userInfo"], {
            "username": "system:serviceaccount:default:bot",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:default",
                       "system:authenticated"]}, "whoami as the service account")
        # the admin may impersonate groups too; system:masters is everything
        _, out, _ = k("auth", "can-i", "delete", "nodes", bot, "--as-group=system:masters")
        eq(out.strip(), "yes", "impersonated system:masters")
        for r in ("clusterrolebinding/cm-reader", "clusterrole/cm-reader",
                  "rolebinding/pod-reader", "role/pod-reader", "serviceaccount/bot"):
            k("delete", r)

    def t_events():
        k("create", "configmap", "evcm", "--from-literal=a=b")
        _, uid, _ = k("get", "cm", "evcm", "-o", "jsonpath={.metadata.uid}")
        _, out, _ = k("apply", "-f", write("ev.yaml", EVENT % uid))
        contains(out, "event.events.k8s.io/ev1 created")
        cols = ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        for res in ("events", "events.v1.events.k8s.io"):
            _, out, _ = k("get", res)
            lines = out.splitlines()
            eq(lines[0].split(), cols, res + " columns")
            row = [ln for ln in lines if "configmap/evcm" in ln]
            eq(len(row), 1, res + " row")
            eq(row[0].split()[1:], ["Warning", "TestReason", "configmap/evcm", "seen", "through",
                                    "both", "APIs"], res + " cells")
        _, out, _ = k("get", "events", "-o", "wide", "--field-selector", "involvedObject.name=evcm")
        lines = out.splitlines()
        eq(lines[0].split(), ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE",
                              "MESSAGE", "FIRST", "SEEN", "COUNT", "NAME"], "wide columns")
        contains(lines[1], "tern.dev/test, test-0")
        eq(lines[1].split()[-2:], ["1", "ev1"], "count and name")
        _, out, _ = k("get", "events", "ev1", "-o", "json")
        core = json.loads(out)
        eq((core["apiVersion"], core["message"], core["reportingComponent"],
            core["involvedObject"]["name"]),
           ("v1", "seen through both APIs", "tern.dev/test", "evcm"), "core shape")
        _, out, _ = k("get", "events.v1.events.k8s.io", "ev1", "-o", "json")
        v1 = json.loads(out)
        want = {"eventTime": "2026-11-30T03:00:00.123456Z", "reportingController": "tern.dev/test",
                "reportingInstance": "test-0", "action": "Check", "reason": "TestReason",
                "type": "Warning", "note": "seen through both APIs",
                "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "default",
                              "name": "evcm", "uid": uid}}
        eq({f: v1.get(f) for f in want}, want, "events.k8s.io round trip")
        eq(v1["apiVersion"], "events.k8s.io/v1", "served apiVersion")
        eq(v1["metadata"]["uid"], core["metadata"]["uid"], "one object")
        _, out, _ = k("get", "events", "-o", "name", "--field-selector",
                      "involvedObject.kind=ConfigMap,involvedObject.name=evcm,reason=TestReason,"
                      "involvedObject.uid=" + uid)
        eq(out.strip(), "event/ev1", "core field selector")
        _, out, _ = k("get", "events.v1.events.k8s.io", "-o", "name", "--field-selector",
                      "regarding.name=evcm,reportingController=tern.dev/test")
        eq(out.strip(), "event.events.k8s.io/ev1", "events.k8s.io field selector")
        k("patch", "events.v1.events.k8s.io", "ev1", "--type", "merge", "-p",
          '{"series":{"count":3,"lastObservedTime":"2026-11-30T03:01:00.000000Z"}}')
        _, out, _ = k("get", "events", "ev1", "-o", "jsonpath={.series.count}")
        eq(out, "3", "series patched through events.k8s.io, read through core")
        _, out, _ = k("describe", "cm", "evcm")
        ev = out[out.index("Events:"):]
        contains(ev, "Warning  TestReason")
        contains(ev, "tern.dev/test")
        contains(ev, "seen through both APIs")
        _, out, _ = k("delete", "events.v1.events.k8s.io", "ev1")
        contains(out, "deleted")
        _, out, _ = k("get", "events", "-o", "name", "--field-selector", "involvedObject.name=evcm")
        eq(out.strip(), "", "deleted from both")
        k("delete", "cm", "evcm")

    s.run("version and discovery", t_version_discovery)
    s.run("CRD apply and wait established", t_crd)
    s.run("custom resource apply/get/describe", t_cr_apply_get)
    s.run("custom resource label/annotate/patch", t_cr_label_annotate_patch)
    s.run("status subresource and wait --for=condition", t_status_and_wait)
    s.run("get -w", t_get_watch)
    s.run("schema errors with field paths", t_schema_errors)
    s.run("finalizers and deletionTimestamp", t_finalizers)
    s.run("built-ins from manifests", t_builtins)
    s.run("generator commands (protobuf bodies)", t_generator_commands)
    s.run("server-side apply", t_server_side_apply)
    s.run("strict field validation and AlreadyExists", t_strict_unknown_fields)
    s.run("CRD deletion removes its resources", t_crd_delete)
    s.run("RBAC: create role/binding, auth can-i --as, Forbidden", t_rbac)
    s.run("events: one store for core/v1 and events.k8s.io/v1", t_events)
    s.run("clean SIGTERM stop", td.check_clean_stop)
    td.cleanup()
    s.finish()


if __name__ == "__main__":
    main()
