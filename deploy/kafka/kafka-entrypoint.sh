#!/bin/bash
# Entry point of the Kafka image (deploy/kafka/Containerfile), run under tini: write
# server.properties from the environment, format the storage once (KRaft), run the broker.
#
#   KAFKA_NODE_ID                   node id (default 1)
#   KAFKA_LISTENERS                 default PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093
#   KAFKA_ADVERTISED_LISTENERS      default PLAINTEXT://localhost:9092 (what clients are told)
#   KAFKA_CONTROLLER_QUORUM_VOTERS  default <node id>@localhost:<the CONTROLLER listener's port>
#   KAFKA_CLUSTER_ID                default: a fixed id (22 characters of URL-safe base64; a new data directory is formatted with it)
#   KAFKA_HEAP_OPTS                 default -Xms256m -Xmx512m
#   KAFKA_CFG_<NAME>=value          any other broker setting: <NAME> lower-cased, "_" -> "."
#                                   (e.g. KAFKA_CFG_NUM_PARTITIONS=4), written last: it wins
#
# KAFKA_ENTRYPOINT_DRY_RUN=1 prints server.properties and exits.
set -euo pipefail

home=/var/lib/kafka
data="$home/data"
props="$home/server.properties"
node_id="${KAFKA_NODE_ID:-1}"
listeners="${KAFKA_LISTENERS:-PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093}"
advertised="${KAFKA_ADVERTISED_LISTENERS:-PLAINTEXT://localhost:9092}"
controller_port="$(sed -n 's/.*CONTROLLER:\/\/[^,]*:\([0-9][0-9]*\).*/\1/p' <<<"$listeners")"
voters="${KAFKA_CONTROLLER_QUORUM_VOTERS:-$node_id@localhost:${controller_port:-9093}}"
cluster_id="${KAFKA_CLUSTER_ID:-aW5nZXN0LWthZmthLWltZw}"

config() {
  cat <<PROPS
process.roles=broker,controller
node.id=$node_id
controller.quorum.voters=$voters
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
  local var name
  while IFS= read -r var; do
    name="${var#KAFKA_CFG_}"
    name="${name,,}"
    printf '%s=%s\n' "${name//_/.}" "${!var}"
  done < <(compgen -e | grep '^KAFKA_CFG_' | sort)
}

if [ "${KAFKA_ENTRYPOINT_DRY_RUN:-}" = 1 ]; then
  config
  exit 0
fi
mkdir -p "$data"
config >"$props"
read -r -a heap <<<"${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
jvm=(java "${heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError
     -Djava.awt.headless=true -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties
     -Dkafka.logs.dir="$home" -cp '/opt/kafka/libs/*')
# --ignore-formatted: a data directory formatted before (a restarted container) is kept
"${jvm[@]}" kafka.tools.StorageTool format --ignore-formatted \
  --cluster-id="$cluster_id" -c "$props" >/dev/null
exec "${jvm[@]}" kafka.Kafka "$props"
