"""A kept (pooled) consumer re-reading a lower range of a partition it just read
higher up -- a task retry, or two ``minPartitions`` pieces on one worker -- delivers exactly
that range, once, in order (docs/design.md invariant 8; ``source/reader.py``); and a small
range does not fetch far past its end (``kafka/client.py``, ``fetch_sizing``)."""

from __future__ import annotations

import json
import os
import time

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
    assert _offsets(conf, [OffsetRange(topic, 0, 50, 90)]) == list(range(50, 90))
    assert POOL.created == created + 1  # one consumer served every read


def test_a_small_range_fetches_little_past_its_end(kafka_broker: KafkaTestBroker) -> None:
    """A read of a few records per partition must not fetch thousands: every record
    fetched is decompressed and parsed in the task, so the overshoot was CPU paid per
    partition per batch (docs/bench.md, "The fixed cost of a batch")."""
    partitions, per_partition, take = 8, 1_500, 16
    topic = kafka_broker.new_topic("fetch-size", partitions)
    # compressed batches of 50 records, as a producer under light load makes them
    producer = Producer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "compression.type": "zstd",
            "batch.num.messages": 50,
            "linger.ms": 5,
        }
    )
    for i in range(per_partition):
        for p in range(partitions):
            pad = os.urandom(120).hex().encode()  # compresses about as JSON events do
            producer.produce(topic, value=b'{"n": %d, "pad": "%s"}' % (i, pad), partition=p)
    producer.flush(60)
    fetched: list[int] = []
    conf = {
        **consumer_config(kafka_broker.bootstrap_servers),
        "statistics.interval.ms": 1000,
        "stats_cb": lambda stats: fetched.append(json.loads(stats)["rxmsgs"]),
    }
    delivered = 0
    deadline = time.monotonic() + 30
    start = 0
    while not fetched and time.monotonic() < deadline:  # statistics come once a second
        ranges = [OffsetRange(topic, p, start, start + take) for p in range(partitions)]
        delivered += len(_offsets(conf, ranges))
        start += take
        time.sleep(0.2)
    assert fetched, "librdkafka reported no statistics"
    # measured: 83x before the small buckets (256 KiB a partition), 2.5x after
    assert fetched[-1] <= 10 * delivered, (fetched[-1], delivered)
