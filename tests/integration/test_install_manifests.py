"""The Helm chart (charts/tern) and the kustomize base (deploy/base) must
install the same thing. The chart is rendered by the real Helm
(build/kube/bin/helm, built by `make kube`): `helm lint --strict` and `helm
template` with the default values and with non-default ones.

Checked: the same kinds and names; identical RBAC rules (least privilege must
not drift); identical operator args, env names, probes and security
contexts; identical admission-policy expressions; the etcd StatefulSet's
command; values.yaml valid against values.schema.json; the chart's CRD is the
crds/ file (one source); non-default values render what they say
(etcd.deploy=false with external TLS endpoints: no StatefulSet, the TLS
Secret mounted and named in the env; approvals.policy=false: no policy;
operator.listenOnPodIP; a wrong type refused by the schema with Helm's
message). tests/integration/test_helm.py installs the chart for real.

Without Go there is no helm: the Helm checks are skipped with one line
saying so, and the rest runs.
"""
import json
import os
import subprocess
import sys

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from terndev import Suite, eq, contains  # noqa: E402

CHART = os.path.join(ROOT, "charts", "tern")
HELM = os.path.join(ROOT, "build", "kube", "bin", "helm")
RELEASE, NAMESPACE = "tern", "tern-system"


def values():
    with open(os.path.join(CHART, "values.yaml")) as f:
        return yaml.safe_load(f)


def helm(*args, check=True):
    """Runs helm with a private HOME (no repositories, no cluster); returns
    (exit code, stdout, stderr without Helm's note on the crds/ symlink)."""
    home = os.path.join(os.environ.get("TMPDIR", "/tmp"), "tern-helm-home-%d" % os.getuid())
    env = dict(os.environ, HOME=home, HELM_CACHE_HOME=home + "/cache",
               HELM_CONFIG_HOME=home + "/config", HELM_DATA_HOME=home + "/data",
               KUBECONFIG=os.path.join(home, "no-cluster"))
    r = subprocess.run([HELM, *args], capture_output=True, text=True, env=env, timeout=120)
    err = "\n".join(x for x in r.stderr.splitlines() if "found symbolic link" not in x)
    if check and r.returncode != 0:
        raise AssertionError("helm %s: exit %d: %s" % (" ".join(args), r.returncode, err))
    return r.returncode, r.stdout, err


def template(*sets):
    argv = ["template", RELEASE, CHART, "-n", NAMESPACE, "--include-crds"]
    for kv in sets:
        argv += ["--set", kv]
    return [d for d in yaml.safe_load_all(helm(*argv)[1]) if d]


def chart_objects():
    objs = template()
    for o in objs:
        if o["kind"] not in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                             "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            o["metadata"].setdefault("namespace", NAMESPACE)
    return objs


def kustomize_objects():
    env = dict(os.environ, HOME=os.environ.get("HOME", "/tmp"))
    r = subprocess.run(["/usr/bin/kubectl", "kustomize", os.path.join(ROOT, "deploy", "base")],
                       capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        raise AssertionError("kubectl kustomize: " + r.stderr)
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def index(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def main():
    suite = Suite()
    state = {}

    def render_both():
        state["chart"] = index(chart_objects())
        state["kust"] = index(kustomize_objects())

    def same_objects():
        eq(sorted(state["chart"]), sorted(state["kust"]), "kinds and names")

    def same_rbac():
        for key, o in state["chart"].items():
            if key[0] in ("ClusterRole", "Role"):
                eq(o["rules"], state["kust"][key]["rules"], "%s rules" % (key,))
            if key[0] in ("ClusterRoleBinding", "RoleBinding"):
                eq(o["subjects"], state["kust"][key]["subjects"], "%s subjects" % (key,))
                eq(o["roleRef"], state["kust"][key]["roleRef"], "%s roleRef" % (key,))

    def rules_are_whole():
        # kube-apiserver refuses a PolicyRule without verbs (tern-dev took
        # one, and a merge once left the chart and the base with one)
        for src in ("chart", "kust"):
            for key, o in state[src].items():
                if key[0] in ("ClusterRole", "Role"):
                    for i, rule in enumerate(o.get("rules") or []):
                        eq(bool(rule.get("verbs")), True, "%s %s rules[%d].verbs" % (src, key, i))
                        eq(bool(rule.get("resources") or rule.get("nonResourceURLs")), True,
                           "%s %s rules[%d].resources" % (src, key, i))

    def operator_updates_memory():
        # an approved memory proposal is applied with a PUT of the memory
        # ConfigMap (controller.c memory_apply): both installs grant it
        for src in ("chart", "kust"):
            ok = False
            for key, o in state[src].items():
                if key[0] == "ClusterRole" and "operator" in key[1]:
                    ok = ok or any("configmaps" in (r.get("resources") or []) and
                                   "update" in r.get("verbs", []) and not r.get("resourceNames")
                                   for r in o.get("rules") or [])
            eq(ok, True, "%s: the operator may update ConfigMaps" % src)

    def same_operator():
        a = state["chart"][("Deployment", "tern-operator")]["spec"]["template"]["spec"]
        b = state["kust"][("Deployment", "tern-operator")]["spec"]["template"]["spec"]
        ca, cb = a["containers"][0], b["containers"][0]
        for k in ("image", "command", "args", "ports", "livenessProbe", "readinessProbe",
                  "resources", "securityContext"):
            eq(ca.get(k), cb.get(k), "operator container " + k)
        eq(sorted(e["name"] for e in ca["env"]), sorted(e["name"] for e in cb["env"]), "env")
        eq(a["securityContext"], b["securityContext"], "pod securityContext")
        eq(a["serviceAccountName"], b["serviceAccountName"], "service account")

    def same_egress_proxy():
        a = state["chart"][("Deployment", "tern-egress-proxy")]["spec"]
        b = state["kust"][("Deployment", "tern-egress-proxy")]["spec"]
        eq(a["replicas"], b["replicas"], "proxy replicas")
        eq(a["selector"], b["selector"], "proxy selector")
        pa, pb = a["template"]["spec"], b["template"]["spec"]
        ca, cb = pa["containers"][0], pb["containers"][0]
        for k in ("image", "command", "args", "ports", "livenessProbe", "readinessProbe",
                  "resources", "securityContext"):
            eq(ca.get(k), cb.get(k), "proxy container " + k)
        eq(sorted(e["name"] for e in ca["env"]), sorted(e["name"] for e in cb["env"]), "env")
        eq(pa["securityContext"], pb["securityContext"], "proxy pod securityContext")
        eq(pa["serviceAccountName"], pb["serviceAccountName"], "proxy service account")
        sa, sb = (state[k][("Service", "tern-egress-proxy")]["spec"] for k in ("chart", "kust"))
        eq(sa, sb, "proxy Service")
        # what the operator puts in sandbox NetworkPolicies selects these pods
        args = state["kust"][("Deployment", "tern-operator")]["spec"]["template"]["spec"][
            "containers"][0]["args"]
        lab = [x.split("=", 1)[1] for x in args if x.startswith("--egress-proxy-labels=")][0]
        want = dict(kv.split("=", 1) for kv in lab.split(","))
        for k, v in want.items():
            eq(pb["containers"] and b["template"]["metadata"]["labels"].get(k), v,
               "proxy pod label %s" % k)
        port = [x for x in args if x.startswith("--egress-proxy=")][0].rsplit(":", 1)[1]
        eq(int(port), sb["ports"][0]["port"], "the operator's proxy port is the Service's")

    def same_policy():
        a = state["chart"][("ValidatingAdmissionPolicy", "tern-approvals")]["spec"]
        b = state["kust"][("ValidatingAdmissionPolicy", "tern-approvals")]["spec"]
        eq(a, b, "admission policy")

    def same_etcd():
        a = state["chart"][("StatefulSet", "tern-etcd")]["spec"]["template"]["spec"]
        b = state["kust"][("StatefulSet", "tern-etcd")]["spec"]["template"]["spec"]
        eq(a["containers"][0]["command"], b["containers"][0]["command"], "etcd command")

    def same_prices():
        a = state["chart"][("ConfigMap", "tern-prices")]["data"]["prices.json"]
        b = state["kust"][("ConfigMap", "tern-prices")]["data"]["prices.json"]
        eq(json.loads(a), json.loads(b), "price table")
        table = json.loads(a)["prices"]
        eq("*" in table, False, "no fallback price: unknown models stay unpriced")
        for model, p in table.items():
            eq(sorted(p), ["cachedInput", "input", "output"], "%s fields" % model)
            eq(all(isinstance(v, int) and 0 <= v <= 10**12 for v in p.values()), True,
               "%s prices are micro-USD integers" % model)
        # the operator is pointed at it
        args = state["kust"][("Deployment", "tern-operator")]["spec"]["template"]["spec"][
            "containers"][0]["args"]
        eq("--prices-configmap=tern-system/tern-prices" in args, True, "operator flag")

    def values_schema():
        with open(os.path.join(CHART, "values.schema.json")) as f:
            jsonschema.validate(values(), json.load(f))

    def one_crd_source():
        for name in ("agentsessions.tern.dev.yaml", "agentbudgets.tern.dev.yaml"):
            eq(os.path.realpath(os.path.join(CHART, "crds", name)),
               os.path.join(ROOT, "crds", name), "chart CRD %s is crds/" % name)
        eq(sorted(os.listdir(os.path.join(CHART, "crds"))),
           sorted(n for n in os.listdir(os.path.join(ROOT, "crds")) if n.endswith(".tern.dev.yaml")),
           "every CRD in the chart")

    def lint():
        rc, out, err = helm("lint", CHART, "--strict")
        contains(out, "1 chart(s) linted, 0 chart(s) failed", "helm lint --strict")

    def rendered_crd_is_the_file():
        with open(os.path.join(ROOT, "crds", "agentsessions.tern.dev.yaml")) as f:
            want = yaml.safe_load(f)
        eq(state["chart"][("CustomResourceDefinition", "agentsessions.tern.dev")], want,
           "the CRD helm renders")

    def external_etcd_with_tls():
        # an etcd of your own: the journal is locked the same way (the
        # operator's and the runners' certificates and the passwords from
        # the Secrets the pki hook makes, or you make), nothing of etcd's
        objs = index(template("etcd.deploy=false",
                              "etcd.external.endpoints=https://e0:2379\\,https://e1:2379"))
        eq([k for k in objs if k[0] in ("StatefulSet", "Service", "NetworkPolicy") and
            "etcd" in k[1]], [], "no etcd objects")
        pod = objs[("Deployment", "tern-operator")]["spec"]["template"]["spec"]
        c = pod["containers"][0]
        contains(c["args"], "--etcd-endpoints=https://e0:2379,https://e1:2379", "args")
        env = {e["name"]: e.get("value") for e in c["env"]}
        eq(env.get("TERN_ETCD_CA_FILE"), "/var/run/tern/journal-operator/ca.crt", "CA file env")
        eq(env.get("TERN_ETCD_CERT_FILE"), "/var/run/tern/journal-operator/tls.crt",
           "cert file env")
        eq(env.get("TERN_ETCD_ROOT_PASSWORD_FILE"),
           "/var/run/tern/journal-operator/root-password", "the journal is locked")
        eq(env.get("TERN_ETCD_RUNNER_CERT_FILE"), "/var/run/tern/journal-runner/tls.crt",
           "the runners' certificate")
        vols = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        eq(vols.get("journal-operator"), "tern-journal-operator", "operator Secret")
        eq(vols.get("journal-runner"), "tern-journal-runner", "runner Secret")
        eq(("Job", "tern-pki") in objs, True, "the pki hook makes them")
        objs = index(template("etcd.deploy=false", "etcd.external.endpoints=https://e0:2379",
                              "pki.create=false"))
        eq(("Job", "tern-pki") in objs, False, "pki.create=false: Secrets of your own")
        rc, out, err = helm("template", RELEASE, CHART, "--set", "etcd.deploy=false", check=False)
        eq(rc != 0, True, "etcd.deploy=false without endpoints fails")
        contains(err, "etcd.external.endpoints is required when etcd.deploy is false", "message")

    def webhook_receiver():
        objs = index(template("webhook.enabled=true", "webhook.tlsSecretName=hook-tls"))
        pod = objs[("Deployment", "tern-operator")]["spec"]["template"]["spec"]
        c = pod["containers"][0]
        for a in ("--webhook-addr=:9443", "--webhook-tls-cert=/var/run/tern/webhook-tls/tls.crt",
                  "--webhook-tls-key=/var/run/tern/webhook-tls/tls.key"):
            contains(c["args"], a, "args")
        contains(c["ports"], {"name": "webhook", "containerPort": 9443}, "port")
        eq(len({p["containerPort"] for p in c["ports"]}), len(c["ports"]), "distinct ports")
        contains(c["volumeMounts"], {"name": "webhook-tls", "mountPath": "/var/run/tern/webhook-tls",
                                     "readOnly": True}, "TLS mount")
        contains(pod["volumes"], {"name": "webhook-tls", "secret": {"secretName": "hook-tls"}},
                 "TLS volume")
        svc = objs[("Service", "tern-webhook")]["spec"]
        eq(svc["ports"], [{"name": "https", "port": 443, "targetPort": "webhook"}], "Service")
        eq(svc["selector"]["app.kubernetes.io/component"], "operator", "selects every replica")
        rc, out, err = helm("template", RELEASE, CHART, "--set", "webhook.enabled=true",
                            check=False)
        eq(rc != 0, True, "webhook.enabled without a TLS Secret fails")
        contains(err, "webhook.tlsSecretName is required", "message")
        eq(("Service", "tern-webhook") in index(template()), False, "off by default")

    def policy_off_and_pod_ip():
        objs = index(template("approvals.policy=false", "operator.listenOnPodIP=true",
                              "approvals.approverGroup=leads"))
        eq([k for k in objs if k[0].startswith("ValidatingAdmissionPolicy")], [], "no policy")
        c = objs[("Deployment", "tern-operator")]["spec"]["template"]["spec"]["containers"][0]
        contains(c["args"], "--metrics-addr=$(POD_IP):8080", "metrics on the pod IP")
        contains(c["args"], "--health-addr=$(POD_IP):8081", "health on the pod IP")
        contains(c["args"], "--api-addr=$(POD_IP):8443",
                 "the aggregated API on the pod IP (a rolling update's two pods on one node)")
        eq([e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if e["name"] == "POD_IP"],
           ["status.podIP"], "POD_IP from status.podIP")
        objs = index(template("approvals.approverGroup=leads"))
        v = objs[("ValidatingAdmissionPolicy", "tern-approvals")]["spec"]["validations"][0]
        contains(v["expression"], "g == 'leads'", "approver group in the policy")

    def schema_refuses_wrong_type():
        rc, out, err = helm("template", RELEASE, CHART, "--set", "operator.replicas=two",
                            check=False)
        eq(rc != 0, True, "helm template with operator.replicas=two fails")
        contains(err, "values don't meet the specifications of the schema(s)", "Helm's message")
        contains(err, "at '/operator/replicas': got string, want integer", "field and types")

    def kube_version_floor():
        rc, out, err = helm("template", RELEASE, CHART, "--kube-version", "1.31.0", check=False)
        eq(rc != 0, True, "helm template for Kubernetes 1.31 fails")
        contains(err, "chart requires kubeVersion: >=1.32.0-0 which is incompatible with "
                 "Kubernetes v1.31.0", "Helm's message")
        helm("template", RELEASE, CHART, "--kube-version", "1.32.0")

    if not os.access(HELM, os.X_OK):
        why = ("Go is not installed, so make kube cannot build it" if not
               any(os.access(os.path.join(d, "go"), os.X_OK)
                   for d in os.environ.get("PATH", "").split(":"))
               else "run make kube")
        print("SKIP helm checks: no %s (%s)" % (os.path.relpath(HELM, ROOT), why), flush=True)
    else:
        suite.run("helm_lint_strict", lint)
        suite.run("render_chart_and_kustomize", render_both)
        if "chart" in state:
            for name, fn in [("same_objects", same_objects), ("same_rbac", same_rbac),
                             ("rbac_rules_are_whole", rules_are_whole),
                             ("operator_updates_memory", operator_updates_memory),
                             ("same_operator", same_operator),
                             ("same_egress_proxy", same_egress_proxy), ("same_policy", same_policy),
                             ("same_etcd", same_etcd), ("same_prices", same_prices),
                             ("rendered_crd_is_the_file", rendered_crd_is_the_file)]:
                suite.run(name, fn)
        suite.run("values_external_etcd_with_tls", external_etcd_with_tls)
        suite.run("values_policy_off_pod_ip_group", policy_off_and_pod_ip)
        suite.run("values_webhook_receiver", webhook_receiver)
        suite.run("values_schema_refuses_wrong_type", schema_refuses_wrong_type)
        suite.run("kube_version_floor_1_32", kube_version_floor)
    suite.run("values_schema", values_schema)
    suite.run("one_crd_source", one_crd_source)
    suite.finish()


if __name__ == "__main__":
    main()
