"""Protocol errors no real broker gives on demand, injected by librdkafka's mock cluster.

Everything else runs on real Apache Kafka. Only the mock (``support/mock_broker.py``) can
answer chosen requests with chosen error codes, so these two cases stay on it:
* Fetch answered with NOT_LEADER_OR_FOLLOWER three times: the consumer re-fetches and
  reads every record once.
* Produce answered with TOPIC_AUTHORIZATION_FAILED: the generator raises, naming it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from support.kafka_fixtures import unique_topic
from support.mock_broker import MockCluster

from lab.generator import GeneratorSpec, produce

API_PRODUCE, API_FETCH = 0, 1
NOT_LEADER_OR_FOLLOWER = 6
TOPIC_AUTHORIZATION_FAILED = 29


@pytest.fixture(scope="module")
def mock() -> Iterator[MockCluster]:
    with MockCluster(num_brokers=3) as m:
        yield m


def test_injected_fetch_errors_are_retried_without_loss(mock: MockCluster) -> None:
    topic = unique_topic("nl")
    mock.create_topic(topic, 2, replication_factor=3)
    sent = produce(mock.bootstrap_servers, topic, GeneratorSpec(count=400, seed=1), 2)
    consumer = Consumer(
        {
            "bootstrap.servers": mock.bootstrap_servers,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": "false",
            "fetch.wait.max.ms": "10",
        }
    )
    mock.push_request_errors(API_FETCH, [NOT_LEADER_OR_FOLLOWER] * 3)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
    seen: Counter[tuple[int, int]] = Counter()
    for _ in range(100):
        for msg in consumer.consume(500, timeout=0.2):
            if msg.error() is None:
                seen[(msg.partition(), msg.offset())] += 1  # type: ignore[index]
        if sum(seen.values()) >= 400:
            break
    consumer.close()
    assert max(seen.values()) == 1
    assert {p: sum(1 for q, _ in seen if q == p) for p in (0, 1)} == {
        p: sent.per_partition[(topic, p)] for p in (0, 1)
    }


def test_produce_raises_on_delivery_failure(mock: MockCluster) -> None:
    topic = unique_topic("denied")
    mock.create_topic(topic, 1)
    mock.push_request_errors(API_PRODUCE, [TOPIC_AUTHORIZATION_FAILED] * 20)
    try:
        with pytest.raises(RuntimeError, match="TOPIC_AUTHORIZATION_FAILED"):
            produce(mock.bootstrap_servers, topic, GeneratorSpec(count=10))
    finally:
        mock.clear_request_errors(API_PRODUCE)
