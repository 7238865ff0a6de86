#!/usr/bin/env bash
# Real pods on one real node (scripts/k8s-control-plane.sh start + node already run):
# Kafka as a hostNetwork pod, the chart (helm/ingest, local Spark, state on a hostPath PV),
# the driver pod Ready and scraped, then the driver SIGKILLed mid-batch KILLS times from the
# host while a producer runs; Kubernetes restarts it; at the end the project's verifier
# counts missing/duplicated records. One transcript per phase (pods-NN-*.txt) into OUT.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
HERE="$ROOT/docs/drills/kubernetes"
OUT="${OUT:-$HERE}"
KILLS="${KILLS:-3}"
COUNT="${COUNT:-60000}"     # records produced during the kills
RATE="${RATE:-800}"         # records/s
PY="$ROOT/.venv/bin/python"
RUN="$ROOT/.tools/k8s/run"
eval "$("$ROOT/scripts/k8s-control-plane.sh" env)"
ctr_() { ctr --address "$RUN/containerd/containerd.sock" -n k8s.io "$@"; }
NODE_IP="$(kubectl get node -o 'jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}')"
BOOT="$NODE_IP:19092"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# shellcheck source=transcript.sh
source "$HERE/transcript.sh"
note() { echo "## $* ($(date -u +%T))" | tee -a "$T"; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs() { printf '%d.%01d' $(( $1 / 1000 )) $(( $1 % 1000 / 100 )); }
pod() { kubectl get pod -l app.kubernetes.io/component=driver -o 'jsonpath={.items[0].metadata.name}'; }
ready() { kubectl get pod -l app.kubernetes.io/component=driver \
  -o 'jsonpath={.items[0].status.containerStatuses[0].ready}' 2>/dev/null | grep -qx true; }
restarts() { kubectl get pod -l app.kubernetes.io/component=driver \
  -o 'jsonpath={.items[0].status.containerStatuses[0].restartCount}'; }
pod_ip() { kubectl get pod -l app.kubernetes.io/component=driver -o 'jsonpath={.items[0].status.podIP}'; }
metric() { curl -s --max-time 3 "http://$(pod_ip):9108/metrics" | awk -v m="$1" '$1 ~ "^"m {s+=$2} END {print s+0}'; }
driver_pids() {  # host pids: the container's PID 1 (tini), the ingest Python process, the JVM
  local c pid1=""   # the driver container whose task runs (an exited one may still be listed)
  for c in $(ctr_ tasks ls | awk '$3 == "RUNNING" {print $1}'); do
    ctr_ containers info "$c" 2>/dev/null | grep -q '"io.kubernetes.container.name": "driver"' &&
      pid1="$(ctr_ tasks ls | awk -v c="$c" '$1 == c {print $2}')"
  done
  local py; py="$(pgrep -P "$pid1" | head -1)"
  echo "$pid1 $py $(pgrep -P "$py" java | head -1)"
}

phase pods-00-node "the node: kubelet + containerd + runc"
run kubectl version
run kubelet --version
run containerd --version
run runc --version
run kubectl get nodes -o wide
run kubectl get node drill-node -o 'jsonpath={range .status.conditions[*]}{.type}={.status} {.reason}{"\n"}{end}'
run kubectl get node drill-node -o 'jsonpath={.status.allocatable}{"\n"}{.status.nodeInfo}{"\n"}'

phase pods-01-images "images: podman's store → containerd (no registry)"
t=$(ms)
run "$ROOT/scripts/k8s-control-plane.sh" import localhost/kafka-lakehouse-ingest:test localhost/ingest-kafka:4.1.1
note "import took $(secs $(( $(ms) - t ))) s"
run ctr_ images ls

phase pods-02-kafka "Kafka as a hostNetwork pod, advertised at $BOOT"
t=$(ms)
sed "s#NODE_IP#$NODE_IP#" "$HERE/pods-kafka.yaml" >"$WORK/kafka.yaml"
run kubectl apply -f "$WORK/kafka.yaml"
run kubectl wait --for condition=Ready pod/kafka --timeout 180s
note "kafka pod Ready $(secs $(( $(ms) - t ))) s after apply"
run kubectl get pod kafka -o wide
run "$PY" -m pipeline produce --bootstrap "$BOOT" --topic events --count 5000 --partitions 2

phase pods-03-install "helm install (local Spark, hostPath PV), the driver pod Ready, /metrics"
mkdir -p "$RUN/pv/state" && chown 10001:10001 "$RUN/pv/state"
sed "s#HOST_PATH#$RUN/pv/state#" "$HERE/pods-pv.yaml" >"$WORK/pv.yaml"
run kubectl apply -f "$WORK/pv.yaml"
t=$(ms)
run helm install rel "$ROOT/helm/ingest" -f "$HERE/pods-values.yaml" --set pipeline.source.bootstrapServers="$BOOT"
until ready; do [ $(( $(ms) - t )) -lt 600000 ] || break; sleep 1; done
note "driver Ready $(secs $(( $(ms) - t ))) s after helm install"
run kubectl get pv,pvc,pods -o wide
run kubectl get events --sort-by .lastTimestamp -o custom-columns='TIME:.lastTimestamp,OBJ:.involvedObject.name,REASON:.reason,MSG:.message'
run bash -c "curl -s http://$(pod_ip):9108/metrics | grep -E '^ingest_(ready|query_active|last_batch_id|records_total|commits_total|consumer_lag_records|build_info)'"
run curl -s -w ' [http %{http_code}]\n' "http://$(pod_ip):9108/readyz"
run kubectl logs "$(pod)" --tail 15

phase pods-04-kills "SIGKILL from the host mid-batch, $KILLS times, a producer running ($COUNT records at $RATE/s)"
"$PY" -m pipeline produce --bootstrap "$BOOT" --topic events --count "$COUNT" --rate "$RATE" \
  --partitions 2 --seed 7 >"$WORK/producer.log" 2>&1 &
producer=$!
CKPT="$RUN/pv/state/checkpoints/pods-drill"
last() { find "$CKPT/$1" -maxdepth 1 -regex '.*/[0-9]+' -printf '%f\n' 2>/dev/null | sort -n | tail -1; }
for k in $(seq "$KILLS"); do
  # mid-batch, as seen on the state volume from the host: Spark has written the batch's
  # offsets file (batch started) but not yet its commits file (batch not finished)
  b0="$(metric ingest_last_batch_id)"
  until [ "$(metric ingest_last_batch_id)" -ge $(( b0 + 2 )) ] 2>/dev/null; do sleep 0.5; done
  until o="$(last offsets)" c="$(last commits)"; [ -n "$o" ] && [ "$o" -gt "${c:--1}" ]; do sleep 0.02; done
  read -r pid1 ingest jvm <<<"$(driver_pids)"
  [ -n "$jvm" ] || { note "driver processes not found: '$pid1' '$ingest' '$jvm'"; exit 1; }
  case $((k % 3)) in
    1) victim=$pid1 what="the container's PID 1 (tini)";;
    2) victim=$ingest what="the ingest driver (Python)";;
    0) victim=$jvm what="the driver JVM";;
  esac
  r0="$(restarts)"
  t=$(ms)
  kill -9 "$victim"
  note "kill $k: SIGKILL $what (host pid $victim); Spark checkpoint: offsets/$o written, last commits/$c; restarts before: $r0"
  until [ "$(restarts)" -gt "$r0" ] 2>/dev/null; do sleep 0.2; done
  t1=$(ms)
  until ready; do sleep 0.5; done
  note "kill $k: restartCount $(restarts) after $(secs $(( t1 - t ))) s, Ready again after $(secs $(( $(ms) - t ))) s"
  run kubectl get pod "$(pod)" -o 'jsonpath={.status.containerStatuses[0].lastState}{"\n"}'
  run bash -c "kubectl logs $(pod) | grep -E 'writer epoch|rolled back|recommitting|resuming from' | cut -c1-220"
done
note "waiting for the producer"
wait "$producer"; echo "producer exit $?" | tee -a "$T"; tail -3 "$WORK/producer.log" | tee -a "$T"
run kubectl get pods -o wide
run kubectl get events --field-selector involvedObject.kind=Pod --sort-by .lastTimestamp -o custom-columns='TIME:.lastTimestamp,OBJ:.involvedObject.name,REASON:.reason,MSG:.message'

phase pods-05-verify "drain, then the project's verifier in the driver pod against the table on the hostPath volume"
# drained: the lag (refreshed every metrics.lagRefreshSeconds) 0 twice in a row, 20 s apart
until [ "$(metric ingest_consumer_lag_records)" = 0 ] && sleep 20 && [ "$(metric ingest_consumer_lag_records)" = 0 ]; do sleep 2; done
run bash -c "curl -s http://$(pod_ip):9108/metrics | grep -E '^ingest_(last_batch_id|records_total|commits_total|consumer_lag_records)'"
run kubectl exec "$(pod)" -- ingest verify --config /etc/ingest/pipeline.yaml --require-full
run kubectl exec "$(pod)" -- ingest status --config /etc/ingest/pipeline.yaml
run ls -la "$RUN/pv/state" "$RUN/pv/state/lake/warehouse"
