#!/usr/bin/env bash
# The chart against a real control plane (scripts/k8s-control-plane.sh, already started):
# install/upgrade/rollback without the Prometheus Operator's CRDs, then with them, then
# every ci/ value set through server-side dry-run admission. Writes one transcript per
# phase into OUT (default: this directory). Every command is echoed with its exit status;
# a failing command is recorded, not fatal: the transcripts say what the server answered.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="${OUT:-$ROOT/docs/drills/kubernetes}"
PO_VERSION="${PO_VERSION:-v0.85.0}"   # prometheus-operator, from the Go module proxy
CHART="$ROOT/helm/ingest"
eval "$("$ROOT/scripts/k8s-control-plane.sh" env)"
# shellcheck source=tools.sh
source "$ROOT/docs/drills/kubernetes/tools.sh"
need_chart_tools
need etcd "scripts/k8s-control-plane.sh build builds it (with the API server)"
need /usr/local/go/bin/go "phase 02 fetches the CRDs with Go, as scripts/k8s-control-plane.sh does"
serving
WORK="$(mktemp -d)"
trap 'chmod -R u+w "$WORK"; rm -rf "$WORK"' EXIT
# shellcheck source=transcript.sh
source "$ROOT/docs/drills/kubernetes/transcript.sh"
MONITORING=(--set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true
  --set metrics.grafanaDashboard.enabled=true)

objects() {  # objects NS REL: every object of the release's manifest, read back from the server
  helm get manifest "$2" -n "$1" >"$WORK/manifest.yaml"
  echo "manifest of $2: $(grep -c '^kind:' "$WORK/manifest.yaml") objects" | tee -a "$T"
  run kubectl get -n "$1" -f "$WORK/manifest.yaml" \
    -o custom-columns='KIND:.kind,NAME:.metadata.name,CREATED:.metadata.creationTimestamp,MANAGER:.metadata.managedFields[0].manager'
}

driver_state() {  # the Deployment's image, the ConfigMap's executor count, ReplicaSets, pods
  run kubectl -n "$1" get deploy -o 'custom-columns=NAME:.metadata.name,IMAGE:.spec.template.spec.containers[0].image,GENERATION:.metadata.generation,REVISION:.metadata.annotations.deployment\.kubernetes\.io/revision'
  run bash -c "kubectl -n $1 get configmap $2-ingest -o 'jsonpath={.data}' | grep -o 'spark.executor.instances[^\\\\]*'"
  run kubectl -n "$1" get rs,pods,pvc -o wide
}

phase 00-versions "versions"
run kubectl version
run helm version
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  command -v "$b" >/dev/null && run "$b" --version
done
run etcd --version
run kubectl get --raw '/readyz?verbose'

phase 01-without-crds "namespace drill-nocrd: the Prometheus Operator's CRDs NOT installed"
run kubectl get crd
run kubectl api-resources --api-group=monitoring.coreos.com
run helm install rel "$CHART" -n drill-nocrd --create-namespace "${MONITORING[@]}"
# helm refused before creating anything: not even the namespace, no release record
run kubectl get namespace drill-nocrd
run helm history rel -n drill-nocrd
run helm install rel "$CHART" -n drill-nocrd --create-namespace --set metrics.grafanaDashboard.enabled=true
objects drill-nocrd rel
run helm upgrade rel "$CHART" -n drill-nocrd --set metrics.grafanaDashboard.enabled=true \
  --set image.tag=0.1.1 --set spark.executor.instances=3
run helm rollback rel 1 -n drill-nocrd
run helm history rel -n drill-nocrd
objects drill-nocrd rel
driver_state drill-nocrd rel

phase 02-crds "the Prometheus Operator's CRDs (prometheus-operator $PO_VERSION, example/prometheus-operator-crd)"
# The Go module proxy serves prometheus-operator's repository as a module zip; only the two
# CRD files are used, the module cache is a throw-away one.
GOMODCACHE="$WORK/gomod" GOFLAGS=-mod=mod /usr/local/go/bin/go mod download -json \
  "github.com/prometheus-operator/prometheus-operator@$PO_VERSION" >"$WORK/po.json"
dir="$(sed -n 's/.*"Dir": "\(.*\)",*/\1/p' "$WORK/po.json")/example/prometheus-operator-crd"
cp "$dir"/monitoring.coreos.com_{servicemonitors,prometheusrules}.yaml "$WORK/"
echo "from the module zip: $(cd "$dir" && sha256sum monitoring.coreos.com_{servicemonitors,prometheusrules}.yaml)" | tee -a "$T"
run kubectl apply --server-side -f "$WORK/monitoring.coreos.com_servicemonitors.yaml" \
  -f "$WORK/monitoring.coreos.com_prometheusrules.yaml"
run kubectl wait --for condition=Established --timeout 60s \
  crd/servicemonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com
run kubectl api-resources --api-group=monitoring.coreos.com

phase 03-install "namespace drill: helm install with ServiceMonitor, PrometheusRule and dashboard"
run helm install rel "$CHART" -n drill --create-namespace "${MONITORING[@]}"
objects drill rel
driver_state drill rel
# the Role as the API server's RBAC authorizer evaluates it for the driver's ServiceAccount:
# what the driver may do, and an executor-like pod created as it (server-side dry run)
SA=system:serviceaccount:drill:rel-ingest
run kubectl auth can-i --list -n drill --as "$SA"
run kubectl auth can-i create pods -n other --as "$SA"
run kubectl run rel-ingest-exec-probe -n drill --as "$SA" --image kafka-lakehouse-ingest:0.1.0 \
  --restart Never --dry-run=server -o name

phase 04-upgrade "helm upgrade: image tag 0.1.1, 3 executors"
run helm upgrade rel "$CHART" -n drill "${MONITORING[@]}" --set image.tag=0.1.1 --set spark.executor.instances=3
objects drill rel
driver_state drill rel

phase 05-rollback "helm rollback to revision 1"
run helm rollback rel 1 -n drill
run helm history rel -n drill
objects drill rel
driver_state drill rel
run kubectl -n drill get events --field-selector involvedObject.kind=Pod --sort-by=.lastTimestamp

phase 06-upgrade-spark-mode "upgrades that change the claim's automatic access modes (spark.mode, ha.enabled)"
run kubectl -n drill get pvc rel-ingest-state -o jsonpath='{.spec.accessModes}{"\n"}'
# kubernetes -> local: the automatic choice would be ReadWriteOnce; the existing claim keeps ReadWriteMany
run helm upgrade rel "$CHART" -n drill "${MONITORING[@]}" --set spark.mode=local
run kubectl -n drill get pvc rel-ingest-state -o jsonpath='{.spec.accessModes}{"\n"}'
# warm standby: two driver pods and a PodDisruptionBudget on the same ReadWriteMany claim
run helm upgrade rel "$CHART" -n drill "${MONITORING[@]}" --set ha.enabled=true
objects drill rel
run helm rollback rel 1 -n drill
run helm history rel -n drill
objects drill rel
# the other way round: a ReadWriteOnce claim (spark.mode local) cannot become ReadWriteMany
run helm install rwo "$CHART" -n drill-rwo --create-namespace --set spark.mode=local
run kubectl -n drill-rwo get pvc rwo-ingest-state -o jsonpath='{.spec.accessModes}{"\n"}'
run helm upgrade rwo "$CHART" -n drill-rwo --set spark.mode=kubernetes
run helm history rwo -n drill-rwo
run kubectl -n drill-rwo get deploy rwo-ingest -o jsonpath='{.metadata.generation}{"\n"}'

phase 07-ci-values "every helm/ingest/ci value set: rendered, then admitted by server-side dry run"
run kubectl create namespace drill-ci
for v in "$CHART"/ci/*.yaml; do
  helm template "ci-$(basename "$v" .yaml)" "$CHART" -n drill-ci -f "$v" >"$WORK/ci.yaml"
  echo "$(basename "$v"): $(grep -c '^kind:' "$WORK/ci.yaml") objects" | tee -a "$T"
  run kubectl apply -n drill-ci --server-side --dry-run=server -f "$WORK/ci.yaml"
done

phase 08-ha-rollback "ha.enabled on and rolled back while the rollout cannot finish (no node: pods never Ready)"
RS_COLS='custom-columns=NAME:.metadata.name,DESIRED:.spec.replicas,DESIRED-ANNOTATION:.metadata.annotations.deployment\.kubernetes\.io/desired-replicas,REVISION:.metadata.annotations.deployment\.kubernetes\.io/revision'
run helm install ha "$CHART" -n drill-ha --create-namespace --hide-notes
sleep 3
run kubectl -n drill-ha get rs -o "$RS_COLS"
# Recreate/1 replica -> RollingUpdate/2 replicas (maxSurge 1, maxUnavailable 0)
run helm upgrade ha "$CHART" -n drill-ha --set ha.enabled=true --hide-notes
sleep 3
run kubectl -n drill-ha get rs -o "$RS_COLS"
# back to Recreate/1 replica while two ReplicaSets are active
run helm rollback ha 1 -n drill-ha
sleep 30
run kubectl -n drill-ha get deploy ha-ingest -o 'jsonpath={.spec.strategy.type} replicas={.spec.replicas} generation={.metadata.generation} observedGeneration={.status.observedGeneration} status.replicas={.status.replicas}{"\n"}'
run kubectl -n drill-ha get rs -o "$RS_COLS"
run kubectl -n drill-ha get pods
# the way out: scale the ReplicaSet that is not the rollback's template to 0 by hand
old="$(kubectl -n drill-ha get rs -o jsonpath='{range .items[?(@.spec.replicas>0)]}{.metadata.name} {.metadata.annotations.deployment\.kubernetes\.io/revision}{"\n"}{end}' | sort -k2 -n | head -1 | cut -d' ' -f1)"
run kubectl -n drill-ha scale rs "$old" --replicas=0
sleep 10
run kubectl -n drill-ha get rs -o "$RS_COLS"
run kubectl -n drill-ha get pods

phase 09-pods-pending "what became of the pods: no kubelet, no nodes"
run kubectl get nodes
run kubectl get pods -A -o wide
run kubectl get pvc -A
run kubectl get events -A --field-selector reason=FailedScheduling \
  -o custom-columns=NS:.metadata.namespace,OBJECT:.involvedObject.name,MESSAGE:.message
