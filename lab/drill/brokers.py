"""The Kafka cluster a drill runs on (``DrillBroker``): real Apache Kafka, a KRaft cluster
started for the drill (``lab.broker.KafkaCluster``: JVM processes on loopback;
broker faults are SIGKILL / SIGSTOP of those processes) — one node, or three (replication
factor 3, ``min.insync.replicas`` 2) for the broker-fault drills — or an external cluster
(``--bootstrap``; broker-level faults are then unavailable)."""

from __future__ import annotations

from typing import Any

from lab.broker import KAFKA_VERSION, KafkaCluster, await_leaders
from lab.drill.model import DrillTimeout

# Drills of driver, executor and catalog faults run on one Kafka node; drills of broker
# faults on three (replication factor 3, min.insync.replicas 2), whose start, restarts and
# replication would otherwise cost every drill (and CI) minutes.
DRILL_BROKERS = 1
BROKER_FAULT_BROKERS = 3
BROKER_FAULT_SCENARIOS = frozenset({"broker-outage"})


def nodes_for(scenario: str) -> int:
    """Kafka nodes the drill of ``scenario`` starts."""
    return BROKER_FAULT_BROKERS if scenario in BROKER_FAULT_SCENARIOS else DRILL_BROKERS


_EXTERNAL_TIMEOUT_S = 30.0


class DrillBroker:
    """A :class:`KafkaCluster` of ``brokers`` nodes started for the drill (default;
    ``kafka`` is it, for broker faults) or an external cluster given by ``bootstrap``
    (``kafka`` is None)."""

    def __init__(self, bootstrap: str | None = None, brokers: int = DRILL_BROKERS) -> None:
        self.kafka: KafkaCluster | None = None
        if bootstrap is None:
            self.kafka = KafkaCluster(brokers).start()
            self.bootstrap_servers: str = self.kafka.bootstrap_servers
        else:
            self.bootstrap_servers = bootstrap

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic``; return once every partition has a leader. On the drill's own
        cluster with its replication factor; on an external one with the cluster's
        ``default.replication.factor``."""
        if self.kafka is not None:
            self.kafka.create_topic(topic, partitions)
            return
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        new = NewTopic(topic, partitions, -1)  # -1: the broker's default replication factor
        for fut in admin.create_topics([new], operation_timeout=_EXTERNAL_TIMEOUT_S).values():
            fut.result(timeout=_EXTERNAL_TIMEOUT_S)
        try:
            await_leaders(admin, topic, partitions, _EXTERNAL_TIMEOUT_S)
        except TimeoutError:
            raise DrillTimeout(f"topic {topic}: no leader for every partition in time") from None

    def stop(self) -> None:
        """SIGKILL every node and delete the cluster's data: the drill has counted what it
        needed, and a controlled shutdown of the whole cluster only costs time."""
        if self.kafka is not None:
            if self.kafka.running:
                for node in self.kafka.node_ids():
                    self.kafka.kill(node)
            self.kafka.stop()


def broker_info(bootstrap: str | None) -> dict[str, Any]:
    """The broker drills run on, as the report states it: the Kafka version, the number of
    brokers, the topics' replication factor and ``min.insync.replicas`` of the cluster a
    :class:`DrillBroker` starts, or "external" for ``bootstrap``. ``description``: the
    same in one line (table caption, report)."""
    if bootstrap is not None:
        return {
            "kind": "external",
            "bootstrap_servers": bootstrap,
            "kafka_version": "external",
            "brokers": "external",
            "replication_factor": "external",
            "description": f"external Kafka cluster {bootstrap} (broker faults skipped)",
        }
    c = KafkaCluster(DRILL_BROKERS)  # not started: their settings only
    f = KafkaCluster(BROKER_FAULT_BROKERS)
    return {
        "kind": "local",
        "kafka_version": KAFKA_VERSION,
        "brokers": c.num_brokers,
        "replication_factor": c.replication_factor,
        "min_insync_replicas": c.min_insync_replicas,
        "broker_fault_brokers": f.num_brokers,
        "broker_fault_replication_factor": f.replication_factor,
        "broker_fault_min_insync_replicas": f.min_insync_replicas,
        "description": (
            f"Apache Kafka {KAFKA_VERSION} (KRaft, local JVMs): {c.num_brokers} broker; "
            f"broker faults on {f.num_brokers} brokers, replication factor "
            f"{f.replication_factor}, min.insync.replicas {f.min_insync_replicas}"
        ),
    }
