"""Kafka brokers for tests: real Apache Kafka (README, "Tests").

Not a conftest: ``conftest.py`` wraps these in session fixtures::

    @pytest.fixture(scope="session")
    def kafka_broker() -> Iterator[KafkaTestBroker]:
        yield from resolve_kafka_broker()

Order: ``KAFKA_BOOTSTRAP_SERVERS`` (an external cluster: tests that kill or pause brokers
skip, naming it) → testcontainers Kafka when a Docker engine answers (image overridable
with ``KAFKA_TEST_IMAGE``) → the project's own KRaft node (``lab.broker``),
the default everywhere here. Tests of broker faults take ``kafka_cluster3``: three nodes
with replication factor 3 and ``min.insync.replicas`` 2, whose processes they SIGKILL and
SIGSTOP.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from lab.broker import KafkaCluster, await_leaders
from lab.generator import GeneratorSpec, produce

__all__ = [
    "KafkaTestBroker",
    "await_condition",
    "docker_available",
    "log_start",
    "produce_in_segments",
    "resolve_kafka_broker",
    "start_cluster",
    "unique_topic",
]

_TOPIC_TIMEOUT_S = 30.0


@dataclass
class KafkaTestBroker:
    bootstrap_servers: str
    kind: str  # "external" | "testcontainers" | "apache"
    cluster: KafkaCluster | None = None  # the project's own nodes: faults on real processes

    def create_topic(
        self, topic: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> None:
        """Create ``topic`` and return once every partition has a leader."""
        if self.cluster is not None:
            self.cluster.create_topic(topic, partitions, config=config)
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        # replication_factor=-1: the broker's default.replication.factor
        futures = admin.create_topics(
            [NewTopic(topic, partitions, -1, config=dict(config or {}))],
            operation_timeout=_TOPIC_TIMEOUT_S,
            request_timeout=_TOPIC_TIMEOUT_S,
        )
        try:
            futures[topic].result(timeout=_TOPIC_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
        await_leaders(admin, topic, partitions)

    def new_topic(
        self, prefix: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> str:
        """A topic of ``partitions`` named from ``prefix`` that no other test uses, created."""
        topic = unique_topic(prefix)
        self.create_topic(topic, partitions, config)
        return topic

    def own(self) -> KafkaCluster:
        """The cluster's processes and admin helpers; skips on an external cluster."""
        if self.cluster is None:
            pytest.skip(f"needs the project's own Kafka processes, not the {self.kind} broker")
        return self.cluster


def docker_available(timeout_s: float = 3.0) -> bool:
    """Whether a Docker engine answers a ping within ``timeout_s``."""
    try:
        import docker

        client = docker.from_env(timeout=max(1, int(timeout_s)))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _kafka_container(image: str) -> Any:
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers < 4.14
        from testcontainers.kafka import KafkaContainer
    return KafkaContainer(image)


def start_cluster(num_brokers: int) -> Iterator[KafkaTestBroker]:
    """The project's own Apache Kafka with ``num_brokers`` KRaft nodes, for one scope."""
    cluster = KafkaCluster(num_brokers).start()
    try:
        yield KafkaTestBroker(cluster.bootstrap_servers, kind="apache", cluster=cluster)
    finally:
        cluster.stop()


def resolve_kafka_broker() -> Iterator[KafkaTestBroker]:
    """Yield one broker for the test session and tear it down afterwards."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        yield KafkaTestBroker(bootstrap_servers=external, kind="external")
        return
    if docker_available():
        image = os.environ.get("KAFKA_TEST_IMAGE", "apache/kafka:4.1.1")
        container = _kafka_container(image)
        container.start()
        try:
            yield KafkaTestBroker(container.get_bootstrap_server(), kind="testcontainers")
        finally:
            container.stop()
        return
    yield from start_cluster(1)


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other test uses (legal characters only)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def await_condition(what: str, done: Any, timeout_s: float = 90.0) -> None:
    """Poll ``done()`` until it holds; ``TimeoutError`` naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s:.0f}s")
        time.sleep(0.5)


def log_start(bootstrap: str, topic: str, partition: int) -> int:
    """The partition's first offset the broker still has."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return int(c.get_watermark_offsets(KafkaTopicPartition(topic, partition), timeout=10)[0])
    finally:
        c.close()


def produce_in_segments(bootstrap: str, topic: str, chunks: int, seed: int) -> list[Any]:
    """``chunks`` batches of 100 records into partition 0, each in a log segment of its own
    (the topic's ``segment.ms`` is 100)."""
    out = []
    for i in range(chunks):
        out.append(produce(bootstrap, topic, GeneratorSpec(count=100, seed=seed + i), 1))
        time.sleep(0.3)  # past segment.ms: the next append rolls a new segment
    return out
