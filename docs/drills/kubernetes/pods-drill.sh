#!/usr/bin/env bash
# Real pods on one real node (scripts/k8s-control-plane.sh start + node already run):
# Kafka as a hostNetwork pod, the chart (helm/ingest, local Spark, state on a hostPath PV),
# the driver pod Ready and scraped, then the driver SIGKILLed mid-batch KILLS times from the
# host while a producer runs; Kubernetes restarts it; at the end the project's verifier
# counts missing/duplicated records. One transcript per phase (pods-NN-*.txt) into OUT.
#
# SPARK_MODE=kubernetes (after a local run, or on a fresh node): the chart's spark.mode
# kubernetes (pods-k8s-values.yaml), the driver creating executor pods through the API;
# its own pipeline id, checkpoint and table; transcripts pods-k8s-NN-*.txt. One of the
# kills is then an executor's JVM (Spark replaces the executor pod), and the executors'
# process trees show they ran the batches' Python tasks.
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
# shellcheck source=tools.sh
source "$HERE/tools.sh"
need_chart_tools
need ctr "Debian's containerd provides it (scripts/k8s-control-plane.sh node runs it)"
need "$PY" "scripts/bootstrap.sh makes the venv (the runtime and the lab's ingest produce)"
serving
ctr_() { ctr --address "$RUN/containerd/containerd.sock" -n k8s.io "$@"; }
NODE_IP="$(kubectl get node -o 'jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}')"
BOOT="$NODE_IP:19092"
SPARK_MODE="${SPARK_MODE:-local}"
if [ "$SPARK_MODE" = kubernetes ]; then
  P=pods-k8s ID=pods-drill-k8s TABLE=lake.events_k8s
else
  P=pods ID=pods-drill TABLE=lake.events
fi
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
container_pid() {  # host pid of PID 1 (tini) of a running container named $1 (the last)
  local c pid1=""   # an exited container of a restarted pod may still be listed
  for c in $(ctr_ tasks ls | awk '$3 == "RUNNING" {print $1}'); do
    ctr_ containers info "$c" 2>/dev/null | grep -q "\"io.kubernetes.container.name\": \"$1\"" &&
      pid1="$(ctr_ tasks ls | awk -v c="$c" '$1 == c {print $2}')"
  done
  echo "$pid1"
}
driver_pids() {  # host pids: the container's PID 1 (tini), the ingest Python process, the JVM
  local pid1 py; pid1="$(container_pid driver)"
  py="$(pgrep -P "$pid1" | head -1)"
  echo "$pid1 $py $(pgrep -P "$py" java | head -1)"
}
executors() { kubectl get pod -l app.kubernetes.io/component=executor \
  --field-selector status.phase=Running -o 'jsonpath={.items[*].metadata.name}'; }
executor_trees() {  # each running executor's process tree: the JVM and the Python workers it
  local pid1        # forked for the batches' tasks, with their CPU time
  pid1="$(container_pid executor)"; [ -n "$pid1" ] || { echo "no executor container"; return; }
  ps -o pid,ppid,etime,time,args --forest -s "$(ps -o sid= -p "$pid1" | tr -d ' ')" | cut -c1-160
}

if kubectl get pod kafka >/dev/null 2>&1; then
  SHARED="node, images and Kafka of an earlier run kept (pods-00…02)"
else
SHARED=""
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
fi

values=(-f "$HERE/pods-values.yaml")
if [ "$SPARK_MODE" = kubernetes ]; then
  sed "s#API_ADDRESS#$NODE_IP:${K8S_API_PORT:-16443}#" "$HERE/pods-k8s-values.yaml" >"$WORK/k8s-values.yaml"
  values+=(-f "$WORK/k8s-values.yaml")
fi
phase "$P-03-install" "helm install (spark.mode $SPARK_MODE, hostPath PV), the driver pod Ready, /metrics"
[ -z "$SHARED" ] || note "$SHARED"
run "$PY" -m pipeline produce --bootstrap "$BOOT" --topic "$ID" --count 5000 --partitions 2
mkdir -p "$RUN/pv/state" && chown 10001:10001 "$RUN/pv/state"
sed "s#HOST_PATH#$RUN/pv/state#" "$HERE/pods-pv.yaml" >"$WORK/pv.yaml"
run kubectl apply -f "$WORK/pv.yaml"
t=$(ms)
run helm install rel "$ROOT/helm/ingest" "${values[@]}" --set pipeline.source.bootstrapServers="$BOOT" \
  --set "pipeline.id=$ID" --set "pipeline.source.topics={$ID}" --set "pipeline.sink.table=$TABLE" \
  --set "pipeline.checkpointLocation=/var/lib/ingest/checkpoints/$ID"
until ready; do [ $(( $(ms) - t )) -lt 600000 ] || break; sleep 1; done
note "driver Ready $(secs $(( $(ms) - t ))) s after helm install"
run kubectl get pv,pvc,pods -o wide
run kubectl get events --sort-by .lastTimestamp -o custom-columns='TIME:.lastTimestamp,OBJ:.involvedObject.name,REASON:.reason,MSG:.message'
run bash -c "curl -s http://$(pod_ip):9108/metrics | grep -E '^ingest_(ready|query_active|last_batch_id|records_total|commits_total|consumer_lag_records|build_info)'"
run curl -s -w ' [http %{http_code}]\n' "http://$(pod_ip):9108/readyz"
run kubectl logs "$(pod)" --tail 15
if [ "$SPARK_MODE" = kubernetes ]; then
  run bash -c "kubectl get pod $(executors | cut -d' ' -f1) -o jsonpath='{range .spec.containers[0].env[*]}{.name}={.value}{\"\\n\"}{end}' | grep -E 'SPARK_DRIVER_URL|SPARK_EXECUTOR_POD_IP|SPARK_APPLICATION_ID'"
  run kubectl get pod -l app.kubernetes.io/component=executor -o 'jsonpath={range .items[*]}{.metadata.name} owner={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} node={.spec.nodeName} phase={.status.phase}{"\n"}{end}'
  run executor_trees
fi

phase "$P-04-kills" "SIGKILL from the host mid-batch, $KILLS times, a producer running ($COUNT records at $RATE/s)"
"$PY" -m pipeline produce --bootstrap "$BOOT" --topic "$ID" --count "$COUNT" --rate "$RATE" \
  --partitions 2 --seed 7 >"$WORK/producer.log" 2>&1 &
producer=$!
CKPT="$RUN/pv/state/checkpoints/$ID"
last() { find "$CKPT/$1" -maxdepth 1 -regex '.*/[0-9]+' -printf '%f\n' 2>/dev/null | sort -n | tail -1; }
two_more_batches() {
  b0="$(metric ingest_last_batch_id)"
  until [ "$(metric ingest_last_batch_id)" -ge $(( b0 + 2 )) ] 2>/dev/null; do sleep 0.5; done
}
mid_batch() {
  # mid-batch, as seen on the state volume from the host: Spark has written the batch's
  # offsets file (batch started) but not yet its commits file (batch not finished)
  two_more_batches
  until o="$(last offsets)" c="$(last commits)"; [ -n "$o" ] && [ "$o" -gt "${c:--1}" ]; do sleep 0.02; done
}
for k in $(seq "$KILLS"); do
  mid_batch
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
  [ "$SPARK_MODE" != kubernetes ] || run kubectl get pod -l app.kubernetes.io/component=executor -o wide
done
if [ "$SPARK_MODE" = kubernetes ]; then
  mid_batch
  before="$(executors)"
  jvm="$(pgrep -P "$(container_pid executor)" java | head -1)"
  run executor_trees
  kill -9 "$jvm"
  note "kill $((KILLS + 1)): SIGKILL an executor's JVM (host pid $jvm) in $before; Spark checkpoint: offsets/$o written, last commits/$c"
  t=$(ms)
  until now="$(executors)"; [ -n "$now" ] && [ "$now" != "$before" ]; do [ $(( $(ms) - t )) -lt 300000 ] || break; sleep 0.5; done
  note "kill $((KILLS + 1)): executor pods now '$now', $(secs $(( $(ms) - t ))) s after the kill"
  two_more_batches
  note "two more batches committed (last batch id $(metric ingest_last_batch_id))"
  run kubectl get pod -l app.kubernetes.io/component=executor -o wide
  run executor_trees
fi
note "waiting for the producer"
wait "$producer"; echo "producer exit $?" | tee -a "$T"; tail -3 "$WORK/producer.log" | tee -a "$T"
run kubectl get pods -o wide
run kubectl get events --field-selector involvedObject.kind=Pod --sort-by .lastTimestamp -o custom-columns='TIME:.lastTimestamp,OBJ:.involvedObject.name,REASON:.reason,MSG:.message'

phase "$P-05-verify" "drain, then the project's verifier in the driver pod against the table on the hostPath volume"
# drained: the lag (refreshed every metrics.lagRefreshSeconds) 0 twice in a row, 20 s apart
until [ "$(metric ingest_consumer_lag_records)" = 0 ] && sleep 20 && [ "$(metric ingest_consumer_lag_records)" = 0 ]; do sleep 2; done
run bash -c "curl -s http://$(pod_ip):9108/metrics | grep -E '^ingest_(last_batch_id|records_total|commits_total|consumer_lag_records)'"
run kubectl exec "$(pod)" -- ingest verify --config /etc/ingest/pipeline.yaml --require-full
run kubectl exec "$(pod)" -- ingest status --config /etc/ingest/pipeline.yaml
[ "$SPARK_MODE" != kubernetes ] || run executor_trees
run ls -la "$RUN/pv/state" "$RUN/pv/state/lake/warehouse"
