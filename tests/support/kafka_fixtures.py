"""Kafka broker resolution for tests (DESIGN.md, "Test infrastructure").

Not a conftest: ``conftest.py`` wraps :func:`resolve_kafka_broker` in a session fixture::

    @pytest.fixture(scope="session")
    def kafka_broker() -> Iterator[KafkaTestBroker]:
        yield from resolve_kafka_broker()

Order: ``KAFKA_BOOTSTRAP_SERVERS`` (external cluster) → testcontainers Kafka when a Docker
engine answers (image overridable with ``KAFKA_TEST_IMAGE``) → the embedded broker
(librdkafka mock cluster, 3 brokers).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.tools.broker import EmbeddedBroker

__all__ = [
    "KafkaTestBroker",
    "docker_available",
    "resolve_kafka_broker",
    "unique_topic",
]

EMBEDDED_NUM_BROKERS = 3
_TOPIC_TIMEOUT_S = 30.0


@dataclass
class KafkaTestBroker:
    bootstrap_servers: str
    kind: str  # "external" | "testcontainers" | "embedded"
    embedded: EmbeddedBroker | None = None  # fault injection; None for real brokers

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` and return once every partition has a leader."""
        if self.embedded is not None:
            replication = min(3, self.embedded.num_brokers)
            self.embedded.create_topic(topic, partitions, replication_factor=replication)
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        # replication_factor=-1: the broker's default.replication.factor
        futures = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=-1)],
            operation_timeout=_TOPIC_TIMEOUT_S,
            request_timeout=_TOPIC_TIMEOUT_S,
        )
        try:
            futures[topic].result(timeout=_TOPIC_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
        _wait_for_leaders(admin, topic, partitions)

    def new_topic(self, prefix: str, partitions: int) -> str:
        """A topic of ``partitions`` named from ``prefix`` that no other test uses, created."""
        topic = unique_topic(prefix)
        self.create_topic(topic, partitions)
        return topic

    @property
    def supports_transactions_isolation(self) -> bool:
        """False on the embedded broker: its read_committed consumers still see aborted
        and open-transaction records."""
        return self.kind != "embedded"

    @property
    def supports_timestamp_lookup(self) -> bool:
        """False on the embedded broker: ``offsets_for_times`` returns -1."""
        return self.kind != "embedded"


def _wait_for_leaders(admin: AdminClient, topic: str, partitions: int) -> None:
    deadline = time.monotonic() + _TOPIC_TIMEOUT_S
    while True:
        md = admin.list_topics(topic, timeout=5)
        tmd = md.topics.get(topic)
        if (
            tmd is not None
            and tmd.error is None
            and len(tmd.partitions) >= partitions
            and all(p.leader >= 0 and p.error is None for p in tmd.partitions.values())
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic!r} has no leader for every partition yet")
        time.sleep(0.1)


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


def resolve_kafka_broker() -> Iterator[KafkaTestBroker]:
    """Yield one broker for the test session and tear it down afterwards."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        yield KafkaTestBroker(bootstrap_servers=external, kind="external", embedded=None)
        return
    if docker_available():
        image = os.environ.get("KAFKA_TEST_IMAGE", "confluentinc/cp-kafka:7.6.0")
        container = _kafka_container(image)
        container.start()
        try:
            yield KafkaTestBroker(
                bootstrap_servers=container.get_bootstrap_server(),
                kind="testcontainers",
                embedded=None,
            )
        finally:
            container.stop()
        return
    broker = EmbeddedBroker(num_brokers=EMBEDDED_NUM_BROKERS).start()
    try:
        yield KafkaTestBroker(
            bootstrap_servers=broker.bootstrap_servers, kind="embedded", embedded=broker
        )
    finally:
        broker.stop()


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other test uses (legal characters only)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"
