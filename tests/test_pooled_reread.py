"""A kept (pooled) consumer re-reading a lower range of a partition it just read
higher up -- a task retry, or two ``minPartitions`` pieces on one worker -- delivers exactly
that range, once, in order (docs/design.md invariant 8; ``source/reader.py``)."""

from __future__ import annotations

from confluent_kafka import Producer
from support.kafka_fixtures import KafkaTestBroker

from pipeline.commit.offsets import OffsetRange
from pipeline.kafka.client import consumer_config
from pipeline.source.consumers import POOL
from pipeline.source.reader import read_ranges


def _offsets(conf: dict, ranges: list[OffsetRange]) -> list[int]:
    return [o for b in read_ranges(conf, ranges) for o in b.column("offset").to_pylist()]


def test_a_reused_consumer_re_reads_a_lower_range_exactly(kafka_broker: KafkaTestBroker) -> None:
    topic = kafka_broker.new_topic("reread", 1)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(300):
        producer.produce(topic, value=b"%d" % i, partition=0)
    producer.flush(30)
    conf = consumer_config(kafka_broker.bootstrap_servers)
    created = POOL.created
    assert _offsets(conf, [OffsetRange(topic, 0, 200, 300)]) == list(range(200, 300))
    # the same consumer, now lower: a retry of the first piece, then the second piece
    assert _offsets(conf, [OffsetRange(topic, 0, 0, 100)]) == list(range(100))
    assert _offsets(conf, [OffsetRange(topic, 0, 100, 200)]) == list(range(100, 200))
    assert _offsets(conf, [OffsetRange(topic, 0, 50, 60)]) == list(range(50, 60))
    assert POOL.created == created + 1  # one consumer served every read
