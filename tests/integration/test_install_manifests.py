"""The Helm chart (charts/tern) and the kustomize base (deploy/base) must
install the same thing. There is no Helm binary here, so the chart's
templates are rendered by a small substitute that understands exactly the
template constructs they use (values, includes, quote, default, the
if/with/range blocks of the default values); anything else makes this test
fail, so a new construct cannot slip past unchecked.

Checked: the same kinds and names; identical RBAC rules (least privilege must
not drift); identical operator args, env names, probes and security
contexts; identical admission-policy expressions; the etcd StatefulSet's
command; values.yaml valid against values.schema.json; the chart's CRD is the
crds/ file (one source). Not checked without Helm: non-default values (for
example etcd.deploy=false with external TLS endpoints) and Helm's own
rendering quirks; tests/e2e/kind.sh covers a real `helm install`.
"""
import json
import os
import re
import subprocess
import sys

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from terndev import Suite, eq  # noqa: E402

CHART = os.path.join(ROOT, "charts", "tern")
RELEASE, NAMESPACE = "tern", "tern-system"


def values():
    with open(os.path.join(CHART, "values.yaml")) as f:
        return yaml.safe_load(f)


def chart_meta():
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        return yaml.safe_load(f)


def lookup(v, path):
    for p in path.split("."):
        v = v.get(p) if isinstance(v, dict) else None
    return v


class Unsupported(Exception):
    pass


def render(text, vals):
    """Renders the subset of Go templates the chart uses, with default values."""
    meta = chart_meta()
    image = "%s:%s" % (vals["image"]["repository"], vals["image"]["tag"] or meta["appVersion"])
    includes = {
        "tern.fullname": RELEASE if "tern" in RELEASE else RELEASE + "-tern",
        "tern.serviceAccount": "tern-operator",
        "tern.image": image,
        "tern.etcdEndpoints": "http://%s-etcd.%s.svc:2379" % (
            RELEASE if "tern" in RELEASE else RELEASE + "-tern", NAMESPACE),
    }
    labels = ("app.kubernetes.io/name: tern\napp.kubernetes.io/instance: %s\n"
              "app.kubernetes.io/version: %s\napp.kubernetes.io/managed-by: Helm"
              % (RELEASE, json.dumps(meta["appVersion"])))
    out = []
    skip = [False]
    for line in text.splitlines():
        stripped = line.strip()
        m = re.fullmatch(r"\{\{-? *(if|with) (.+?) *-?\}\}", stripped)
        if m:
            cond = m.group(2)
            if cond.startswith("and "):
                parts = re.findall(r"\(not \.Values\.([\w.]+)\)|\.Values\.([\w.]+)", cond)
                val = all((not lookup(vals, a)) if a else bool(lookup(vals, b)) for a, b in parts)
            elif cond.startswith(".Values."):
                val = bool(lookup(vals, cond[len(".Values."):]))
            else:
                raise Unsupported("condition %r" % cond)
            skip.append(skip[-1] or not val)
            continue
        if re.fullmatch(r"\{\{-? *end *-?\}\}", stripped):
            skip.pop()
            continue
        if skip[-1]:
            continue
        if "{{- include \"tern.labels\" . | nindent" in line:
            n = int(re.search(r"nindent (\d+)", line).group(1))
            line = line[:line.index("{{-")].rstrip() + "\n" + "\n".join(
                " " * n + ll for ll in labels.splitlines())
        elif "toYaml" in line:
            m = re.search(r"\{\{- toYaml \.Values\.([\w.]+) \| nindent (\d+) \}\}", line)
            if not m:
                raise Unsupported(line)
            n = int(m.group(2))
            dumped = yaml.safe_dump(lookup(vals, m.group(1)), default_flow_style=False).rstrip()
            line = line[:m.start()].rstrip() + "\n" + "\n".join(
                " " * n + ll for ll in dumped.splitlines())
        elif "range $i" in line:
            n = int(vals["etcd"]["replicas"])
            fn = includes["tern.fullname"]
            peers = ",".join("%s-etcd-%d=http://%s-etcd-%d.%s-etcd.%s.svc:2380" %
                             (fn, i, fn, i, fn, NAMESPACE) for i in range(n))
            line = re.sub(r"\{\{-? *range.*end *-?\}\}", peers, line)

        def expr(m):
            e = m.group(1).strip()
            quote = e.endswith("| quote")
            e = re.sub(r"\s*\| quote$", "", e)
            if e.startswith("include "):
                name = re.match(r'include "([\w.]+)"', e).group(1)
                v = includes[name]
            elif e == ".Release.Namespace":
                v = NAMESPACE
            elif e == ".Release.Name":
                v = RELEASE
            elif e == ".Chart.AppVersion":
                v = meta["appVersion"]
            elif e.startswith(".Values."):
                v = lookup(vals, e[len(".Values."):])
            else:
                raise Unsupported("expression %r" % e)
            if isinstance(v, bool):
                v = "true" if v else "false"
            return json.dumps(str(v)) if quote else str(v)
        line = re.sub(r"\{\{-? *(.+?) *-?\}\}", expr, line)
        out.append(line)
    return "\n".join(out)


def chart_objects():
    vals = values()
    objs = []
    tdir = os.path.join(CHART, "templates")
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".yaml"):
            continue
        with open(os.path.join(tdir, name)) as f:
            text = render(f.read(), vals)
        objs += [d for d in yaml.safe_load_all(text) if d]
    for name in sorted(os.listdir(os.path.join(CHART, "crds"))):
        with open(os.path.join(CHART, "crds", name)) as f:
            objs += [d for d in yaml.safe_load_all(f) if d]
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

    suite.run("render_chart_and_kustomize", render_both)
    if "chart" in state:
        for name, fn in [("same_objects", same_objects), ("same_rbac", same_rbac),
                         ("same_operator", same_operator), ("same_policy", same_policy),
                         ("same_etcd", same_etcd), ("same_prices", same_prices)]:
            suite.run(name, fn)
    suite.run("values_schema", values_schema)
    suite.run("one_crd_source", one_crd_source)
    suite.finish()


if __name__ == "__main__":
    main()
