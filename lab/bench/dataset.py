"""The benchmark's broker and pre-produced data sets.

* :class:`BenchBroker` — one Apache Kafka node (:class:`~lab.broker.KafkaCluster`,
  KRaft, its own JVM process on loopback) started by the bench, or an external cluster
  (``--bootstrap``). The node runs on the same host as the pipeline under test and shares
  its cores; the raw ceiling reads from the same broker, so the ratio stays fair. Its CPU
  is sampled from its process (:meth:`BenchBroker.cpu_seconds`), so every run can report
  what serving it cost the broker.
* :func:`produce_dataset` writes ``N`` generated events (lab/generator.py,
  ~270 B JSON each, no malformed records) round-robin over the partitions, zstd-compressed
  by the producer, into a topic that keeps everything (``retention.ms`` /
  ``retention.bytes`` -1), and checks that every partition starts at offset 0 and that
  the topic holds exactly what was produced.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psutil
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from lab.broker import await_leaders
from lab.generator import GeneratorSpec, produce
from pipeline.errors import PipelineError
from pipeline.kafka.client import consumer_config

PRODUCER_CONFIG = {"compression.type": "zstd", "linger.ms": "20", "batch.size": "1000000"}
#: Bench topics keep every record for the whole run, on any cluster.
TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1"}
#: Kafka nodes the bench starts itself: one (a single broker on the pipeline's host).
BENCH_BROKERS = 1


class RetentionError(PipelineError):
    code = "bench-retention"


class BenchBroker:
    """The bench's own one-node Apache Kafka (default) or an external cluster at
    ``bootstrap``."""

    def __init__(self, bootstrap: str | None = None) -> None:
        self.cluster: Any = None  # lab.broker.KafkaCluster when the bench owns it
        self._procs: list[psutil.Process] = []
        if bootstrap is None:
            from lab.broker import KafkaCluster

            self.cluster = KafkaCluster(BENCH_BROKERS).start()
            try:
                self._procs = _node_processes(self.cluster)
            except BaseException:
                self.cluster.stop()
                raise
            self.bootstrap_servers: str = self.cluster.bootstrap_servers
        else:
            self.bootstrap_servers = bootstrap

    @property
    def kind(self) -> str:
        return "apache" if self.cluster is not None else "external"

    def describe(self) -> dict[str, Any]:
        """``report["meta"]["broker"]``: kind, Kafka version, nodes, replication factor."""
        if self.cluster is not None:
            from lab.broker import KAFKA_VERSION

            return {
                "kind": "apache",
                "kafka_version": KAFKA_VERSION,
                "brokers": self.cluster.num_brokers,
                "replication_factor": self.cluster.replication_factor,
                "placement": "KRaft broker+controller, its own JVM process on this host "
                "(loopback), started by the bench",
                "bootstrap_servers": self.bootstrap_servers,
            }
        brokers: int | None = None
        with contextlib.suppress(Exception):
            admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
            brokers = len(admin.describe_cluster(request_timeout=10).result(10).nodes)
        return {
            "kind": "external",
            "kafka_version": None,
            "brokers": brokers,
            "replication_factor": "the cluster's default.replication.factor",
            "bootstrap_servers": self.bootstrap_servers,
        }

    def cpu_seconds(self) -> float | None:
        """CPU seconds (user + system) the bench's Kafka node processes used so far; None
        for an external broker (not measurable from here)."""
        if self.cluster is None:
            return None
        total = 0.0
        for p in self._procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
        return total

    def create_topic(self, topic: str, partitions: int) -> None:
        if self.cluster is not None:
            self.cluster.create_topic(topic, partitions, config=TOPIC_CONFIG)
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        # replication factor -1: the cluster's default.replication.factor
        new = NewTopic(topic, partitions, -1, config=dict(TOPIC_CONFIG))
        for fut in admin.create_topics([new], operation_timeout=30).values():
            fut.result(timeout=30)
        await_leaders(admin, topic, partitions)

    def watermarks(self, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        consumer = Consumer(consumer_config(self.bootstrap_servers, client_id="bench-check"))
        try:
            return {
                p: consumer.get_watermark_offsets(KTopicPartition(topic, p), timeout=30)
                for p in range(partitions)
            }
        finally:
            consumer.close()

    def delete_topic(self, topic: str) -> None:
        """Free the disk of a data set no longer needed (its own broker; external: kept)."""
        if self.cluster is not None:
            # best effort: a topic left behind costs disk until stop(), nothing else
            with contextlib.suppress(KafkaException, TimeoutError):
                self.cluster.delete_topic(topic)

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


def _node_processes(cluster: Any) -> list[psutil.Process]:
    """The cluster's Kafka JVMs: this process's children started on its data directory."""
    home = str(cluster.data_dir)
    found = []
    for child in psutil.Process().children(recursive=False):
        with contextlib.suppress(psutil.Error):
            cmd = child.cmdline()
            if "kafka.Kafka" in cmd and cmd[-1].startswith(home):
                found.append(child)
    if len(found) != cluster.num_brokers:
        raise PipelineError(
            f"found {len(found)} Kafka node process(es) of {cluster.num_brokers} under {home}"
        )
    return found


@dataclass(frozen=True)
class Dataset:
    topic: str
    partitions: int
    records: int
    produce_seconds: float
    payload_bytes: int = 0  # GeneratorSpec.payload_bytes: 0 = ~270 B events, 940 = ~1.2 KB

    def check_retained(self, broker: BenchBroker) -> None:
        """Every partition still starts at 0 and holds what was produced."""
        marks = broker.watermarks(self.topic, self.partitions)
        lost = {p: lo for p, (lo, _) in marks.items() if lo > 0}
        if lost:
            raise RetentionError(
                f"topic {self.topic}: the broker already deleted the head of partition(s) "
                f"{sorted(lost)} (log start {max(lost.values())}) although the topic was "
                "created with retention.ms/retention.bytes -1; check the cluster's policies"
            )
        total = sum(hi for _, hi in marks.values())
        if total != self.records:
            raise RetentionError(
                f"topic {self.topic} holds {total} records, {self.records} were produced"
            )


def produce_dataset(
    broker: BenchBroker,
    records: int,
    partitions: int,
    seed: int = 7,
    payload_bytes: int = 0,
) -> Dataset:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions)
    spec = GeneratorSpec(count=records, seed=seed, payload_bytes=payload_bytes)
    t0 = time.monotonic()
    result = produce(
        broker.bootstrap_servers, topic, spec, partitions=partitions, extra_config=PRODUCER_CONFIG
    )
    elapsed = time.monotonic() - t0
    if result.produced != records:
        raise PipelineError(f"produced {result.produced} of {records} bench records")
    ds = Dataset(topic, partitions, records, elapsed, payload_bytes)
    ds.check_retained(broker)
    return ds
