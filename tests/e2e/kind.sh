#!/usr/bin/env bash
# The demo scenario on a real Kubernetes cluster: kind + Helm + Docker.
# It cannot run on Tern's development machines (no Docker engine there, which
# kind needs); run it as root (make images) where `docker`, `kind`, `helm`
# and `kubectl` work:
#   tests/e2e/kind.sh            # creates cluster "tern-e2e", deletes it at the end
#   KEEP=1 tests/e2e/kind.sh     # keeps the cluster for poking around
# Steps: build the tern and sandbox images (make images: OCI archives, no
# Docker needed for that part), load them into kind, helm install
# charts/tern, run the scripted model server in the cluster, apply the demo
# session with a git remote in the cluster (tests/fakes/gitremote.py in the
# python sandbox image, which has git and python3), approve its
# publish_branch, wait for Completed, check the remote has the branch,
# collect logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLUSTER=${CLUSTER:-tern-e2e}
NS=tern-system
TAG=$(sed -n 's/^appVersion: *"*\([^"]*\)"*$/\1/p' charts/tern/Chart.yaml)
logs=$(mktemp -d /tmp/tern-kind-XXXXXX)
for tool in docker kind helm kubectl; do
    command -v "$tool" >/dev/null || { echo "kind.sh needs $tool on PATH" >&2; exit 2; }
done
cleanup() {
    echo "== collecting logs into $logs"
    kubectl -n "$NS" logs deploy/tern-operator --all-containers >"$logs/operator.log" 2>&1 || true
    kubectl get agentsessions -A -o yaml >"$logs/sessions.yaml" 2>&1 || true
    kubectl get events -A >"$logs/events.txt" 2>&1 || true
    kubectl logs -l tern.dev/role=runner --all-containers --prefix >"$logs/runners.log" 2>&1 || true
    [ "${KEEP:-0}" = 1 ] || kind delete cluster --name "$CLUSTER"
}
trap cleanup EXIT

echo "== building images"
make -j2 images

echo "== kind cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --wait 120s
kind load image-archive --name "$CLUSTER" build/images/tern-$TAG.oci.tar
kind load image-archive --name "$CLUSTER" build/images/tern-sandbox-python-$TAG.oci.tar

echo "== helm install"
kubectl create namespace "$NS"
helm install tern charts/tern -n "$NS" --wait --timeout 5m \
    --set image.tag=$TAG --set image.pullPolicy=Never \
    --set sandbox.image=ghcr.io/tern-dev/tern-sandbox-python:$TAG \
    --set approvals.approverGroup=system:masters

echo "== the scripted model server"
kubectl create configmap demo-script --from-file=script.json=examples/demo-script.json
kubectl apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: fake-model}
spec:
  selector: {matchLabels: {app: fake-model}}
  template:
    metadata: {labels: {app: fake-model}}
    spec:
      containers:
      - name: model
        image: ghcr.io/tern-dev/tern:$TAG
        imagePullPolicy: Never
        command: [tern-fakellm, --script, /script/script.json, --listen, "0.0.0.0:8000"]
        volumeMounts: [{name: script, mountPath: /script}]
      volumes: [{name: script, configMap: {name: demo-script}}]
---
apiVersion: v1
kind: Service
metadata: {name: fake-model}
spec: {selector: {app: fake-model}, ports: [{port: 8000}]}
YAML
kubectl rollout status deploy/fake-model --timeout=120s
kubectl create secret generic demo-model --from-literal=api-key=not-a-real-key

echo "== the git remote (requires the token of Secret demo-git)"
git_token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
kubectl create secret generic demo-git --from-literal=token="$git_token"
kubectl create configmap git-remote --from-file=gitremote.py=tests/fakes/gitremote.py
kubectl apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: git-remote}
spec:
  selector: {matchLabels: {app: git-remote}}
  template:
    metadata: {labels: {app: git-remote}}
    spec:
      containers:
      - name: git
        image: ghcr.io/tern-dev/tern-sandbox-python:$TAG
        imagePullPolicy: Never
        command: [sh, -c, 'exec python3 /app/gitremote.py --listen 0.0.0.0:8080 --root /tmp/git
                  --repo demo.git --token "\$TOKEN" --log /tmp/git.log']
        env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: demo-git, key: token}}}]
        volumeMounts: [{name: app, mountPath: /app}]
      volumes: [{name: app, configMap: {name: git-remote}}]
---
apiVersion: v1
kind: Service
metadata: {name: git-remote}
spec: {selector: {app: git-remote}, ports: [{port: 8080}]}
YAML
kubectl rollout status deploy/git-remote --timeout=120s
kubectl apply -f deploy/runner-rbac.yaml

echo "== the demo session"
sed -e "s#http://127.0.0.1:0/v1#http://fake-model.default.svc:8000/v1#" \
    -e "s#http://127.0.0.1:0/demo.git#http://git-remote.default.svc:8080/demo.git#" \
    examples/demo.yaml | kubectl apply -f -
kubectl wait --for=jsonpath='{.status.phase}'=WaitingForApproval agentsession/demo --timeout=300s
id=$(kubectl get agentsession demo -o jsonpath='{.status.pendingApproval.id}')
kubectl annotate agentsession demo "tern.dev/approve=$id" \
    "tern.dev/decided-by=$(kubectl auth whoami -o jsonpath='{.status.userInfo.username}')"
kubectl wait --for=condition=Completed agentsession/demo --timeout=300s
kubectl get agentsessions
kubectl get agentsession demo -o jsonpath='{.status.result.summary}{"\n"}'
echo "== the remote has the branch"
kubectl exec deploy/git-remote -- git --git-dir /tmp/git/demo.git rev-parse refs/heads/fix
echo "== kind e2e passed"
