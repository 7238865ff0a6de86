"""The embedded broker (librdkafka mock cluster) and the event generator, end to end.

Real clients over real sockets; nothing is mocked in Python.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from support.kafka_fixtures import KafkaTestBroker, unique_topic

from pipeline.tools.broker import EmbeddedBroker, run_broker_forever
from pipeline.tools.generator import (
    GeneratorSpec,
    event_schema_fields,
    event_types,
    generate_events,
    is_valid_event,
    produce,
)

# Kafka protocol ApiKeys
API_PRODUCE, API_FETCH = 0, 1
API_OFFSET_COMMIT, API_JOIN_GROUP, API_HEARTBEAT, API_SYNC_GROUP = 8, 11, 12, 14
NOT_LEADER_OR_FOLLOWER = 6
TOPIC_AUTHORIZATION_FAILED = 29


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(num_brokers=3) as b:
        yield b


def _consumer(bootstrap: str, **extra: str) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        # The Python client refuses to build a Consumer without group.id. A fresh id that
        # is never subscribed or committed: assign() alone joins no group.
        "group.id": f"reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "auto.offset.reset": "error",
        "fetch.queue.backoff.ms": "10",
        "fetch.wait.max.ms": "10",
        "reconnect.backoff.max.ms": "500",
    }
    conf.update(extra)
    return Consumer(conf)


def _read(consumer: Consumer, expected: int, timeout_s: float = 15.0) -> list[Message]:
    """Poll until ``expected`` records arrived, then a little longer to catch extras."""
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=1000, timeout=0.2):
            err = msg.error()
            assert err is None, f"consumer error: {err}"
            out.append(msg)
    for msg in consumer.consume(num_messages=1000, timeout=0.3):
        assert msg.error() is None
        out.append(msg)
    return out


def _assert_no_duplicates_and_counts(
    msgs: list[Message], per_partition: dict[tuple[str, int], int]
) -> None:
    """No (topic, partition, offset) read twice, and ``per_partition`` records per partition."""
    positions = Counter((m.topic(), m.partition(), m.offset()) for m in msgs)
    dupes = [p for p, n in positions.items() if n > 1]
    assert not dupes, f"duplicates: {dupes[:5]}"
    got = Counter((m.topic(), m.partition()) for m in msgs)
    assert dict(got) == per_partition


def test_produce_and_read_back_exactly_once(broker: EmbeddedBroker) -> None:
    topic = unique_topic("roundtrip")
    broker.create_topic(topic, 4, replication_factor=3)
    spec = GeneratorSpec(count=2_000, malformed_fraction=0.1, seed=7)
    result = produce(broker.bootstrap_servers, topic, spec)

    assert result.produced == 2_000
    assert result.malformed == 200
    assert sum(result.per_partition.values()) == 2_000
    assert {p for _, p in result.per_partition} == {0, 1, 2, 3}  # keys spread by hash
    for tp, (first, last) in result.offsets.items():
        assert first == 0 and last == result.per_partition[tp] - 1

    broker.start_request_tracking()
    broker.clear_requests()
    consumer = _consumer(broker.bootstrap_servers)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(4)])
    msgs = _read(consumer, 2_000)
    for p in range(4):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
        assert (low, high) == (0, result.per_partition[(topic, p)])
    consumer.close()

    _assert_no_duplicates_and_counts(msgs, result.per_partition)
    # every record arrived intact, with its key, in per-key order
    sent = list(generate_events(spec))
    assert Counter((m.key(), m.value()) for m in msgs) == Counter(sent)
    by_key: dict[bytes, list[bytes]] = {}
    for key, value in sent:
        by_key.setdefault(key, []).append(value)
    for m in sorted(msgs, key=lambda m: (m.partition(), m.offset())):
        mkey, mvalue = m.key(), m.value()
        assert isinstance(mkey, bytes) and isinstance(mvalue, bytes)
        assert by_key[mkey].pop(0) == mvalue
    assert sum(not is_valid_event(m.value()) for m in msgs) == 200

    # the reader never took part in group management nor committed offsets
    api_keys = {r.api_key for r in broker.requests()}
    broker.stop_request_tracking()
    assert API_FETCH in api_keys
    assert not api_keys & {API_OFFSET_COMMIT, API_JOIN_GROUP, API_SYNC_GROUP, API_HEARTBEAT}


def test_uncommitted_group_has_no_offsets(broker: EmbeddedBroker) -> None:
    """ListConsumerGroupOffsets (OffsetFetch) works on the mock; ListGroups does not."""
    topic = unique_topic("groups")
    broker.create_topic(topic, 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})

    def committed(group: str) -> int:
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
        fut = admin.list_consumer_group_offsets([req], request_timeout=10)[group]
        parts = fut.result().topic_partitions
        assert parts is not None
        return int(parts[0].offset)

    reader = _consumer(broker.bootstrap_servers)
    reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    reader.poll(0.5)
    reader.close()
    assert committed("never-committed") == -1001  # OFFSET_INVALID: nothing stored

    committer = _consumer(broker.bootstrap_servers, **{"group.id": "committer"})
    committer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    committer.close()
    assert committed("committer") == 7


def test_broker_down_up_and_leader_moves_lose_nothing(broker: EmbeddedBroker) -> None:
    topic = unique_topic("faults")
    broker.create_topic(topic, 4, replication_factor=3)
    first = produce(broker.bootstrap_servers, topic, GeneratorSpec(count=800, seed=1), 4)
    consumer = _consumer(broker.bootstrap_servers)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(4)])
    msgs = _read(consumer, 400, timeout_s=10)

    broker.broker_down(1)
    broker.broker_down(2)
    time.sleep(0.5)
    broker.set_partition_leader(topic, 0, 3)
    broker.push_request_errors(API_FETCH, [NOT_LEADER_OR_FOLLOWER] * 3)
    broker.broker_up(1)
    broker.broker_up(2)
    broker.set_partition_leader(topic, 1, 2)
    second = produce(broker.bootstrap_servers, topic, GeneratorSpec(count=800, seed=2), 4)
    msgs += _read(consumer, 1_600 - len(msgs), timeout_s=15)
    consumer.close()

    expected = {
        tp: first.per_partition[tp] + second.per_partition[tp] for tp in first.per_partition
    }
    _assert_no_duplicates_and_counts(msgs, expected)


def test_delete_records_moves_low_watermark(broker: EmbeddedBroker) -> None:
    topic = unique_topic("retention")
    broker.create_topic(topic, 1)
    produce(broker.bootstrap_servers, topic, GeneratorSpec(count=100))
    broker.delete_records(topic, 0, 40)
    with pytest.raises(RuntimeError, match="OFFSET_OUT_OF_RANGE"):
        broker.delete_records(topic, 0, 1_000)

    consumer = _consumer(broker.bootstrap_servers)
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5) == (40, 100)
    # auto.offset.reset=error: reading deleted offsets surfaces as an error, not a skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    msg = consumer.poll(5)
    assert msg is not None
    err = msg.error()
    assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET
    consumer.assign([TopicPartition(topic, 0, 40)])
    msgs = _read(consumer, 60)
    consumer.close()
    assert [m.offset() for m in msgs] == list(range(40, 100))


def test_topic_create_errors(broker: EmbeddedBroker) -> None:
    topic = unique_topic("twice")
    broker.create_topic(topic, 2)
    # the mock cannot grow a topic: re-creating with more partitions is refused
    with pytest.raises(RuntimeError, match="TOPIC_ALREADY_EXISTS"):
        broker.create_topic(topic, 4)


def test_produce_raises_on_delivery_failure(broker: EmbeddedBroker) -> None:
    topic = unique_topic("denied")
    broker.create_topic(topic, 1)
    broker.push_request_errors(API_PRODUCE, [TOPIC_AUTHORIZATION_FAILED] * 20)
    try:
        with pytest.raises(RuntimeError, match="TOPIC_AUTHORIZATION_FAILED"):
            produce(broker.bootstrap_servers, topic, GeneratorSpec(count=10))
    finally:
        broker.clear_request_errors(API_PRODUCE)


def test_produce_round_robin_and_rate(broker: EmbeddedBroker) -> None:
    topic = unique_topic("paced")
    broker.create_topic(topic, 3)
    progress: list[int] = []
    t0 = time.monotonic()
    result = produce(
        broker.bootstrap_servers,
        topic,
        GeneratorSpec(count=300, rate=1_000.0),
        partitions=3,
        on_progress=progress.append,
    )
    elapsed = time.monotonic() - t0
    assert elapsed >= 0.29
    assert result.per_partition == {(topic, 0): 100, (topic, 1): 100, (topic, 2): 100}
    assert result.offsets == {(topic, p): (0, 99) for p in range(3)}
    assert progress[-1] == 300


def test_transactional_producer_leaves_offset_gaps(broker: EmbeddedBroker) -> None:
    """Commit markers take an offset on the mock too; isolation is not enforced there."""
    topic = unique_topic("txn")
    broker.create_topic(topic, 1)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": unique_topic("tx")}
    )
    producer.init_transactions(10)
    for _ in range(2):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=str(i).encode(), partition=0)
        producer.commit_transaction(10)
    consumer = _consumer(broker.bootstrap_servers)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    msgs = _read(consumer, 6)
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5) == (0, 8)
    consumer.close()
    assert [m.offset() for m in msgs] == [0, 1, 2, 4, 5, 6]


def test_consumer_needs_group_id() -> None:
    with pytest.raises(ValueError, match=r"group\.id"):
        Consumer({"bootstrap.servers": "127.0.0.1:1"})


def test_generator_is_deterministic_and_schema_shaped() -> None:
    spec = GeneratorSpec(count=500, key_cardinality=50, malformed_fraction=0.2, seed=3)
    events = list(generate_events(spec))
    assert events == list(generate_events(spec))
    assert events != list(generate_events(GeneratorSpec(count=500, key_cardinality=50)))
    assert len({k for k, _ in events}) <= 50
    assert sum(not is_valid_event(v) for _, v in events) == 100
    names = [f["name"] for f in event_schema_fields()]
    assert names == [
        "event_id",
        "user_id",
        "event_type",
        "amount",
        "currency",
        "ts",
        "session_id",
        "page",
        "device",
        "country",
    ]
    good = [(k, json.loads(v)) for k, v in events if is_valid_event(v)]
    assert len(good) == 400
    assert {e["event_type"] for _, e in good} <= set(event_types())
    assert all(e["ts"].endswith("Z") and len(e["ts"]) == 27 for _, e in good)
    assert all(k.decode() == e["user_id"] for k, e in good)
    assert sum(not is_valid_event(v) for _, v in generate_events(GeneratorSpec(count=0))) == 0


def test_run_broker_forever_and_test_broker_wrapper() -> None:
    ready: list[str] = []
    stop = threading.Event()
    topic = unique_topic("cli")
    thread = threading.Thread(
        target=run_broker_forever,
        args=(1, {topic: 2}),
        kwargs={"on_ready": ready.append, "stop_event": stop},
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not ready and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready, "broker never became ready"
    try:
        md = AdminClient({"bootstrap.servers": ready[0]}).list_topics(topic, timeout=5)
        assert len(md.topics[topic].partitions) == 2
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()

    with EmbeddedBroker(num_brokers=1) as emb:
        wrapper = KafkaTestBroker(emb.bootstrap_servers, kind="embedded", embedded=emb)
        assert not wrapper.supports_transactions_isolation
        assert not wrapper.supports_timestamp_lookup
        name = unique_topic()
        wrapper.create_topic(name, 3)
        md = AdminClient({"bootstrap.servers": wrapper.bootstrap_servers}).list_topics(
            name, timeout=5
        )
        assert len(md.topics[name].partitions) == 3


def test_reader_reuses_one_consumer_and_emits_each_offset_once(broker: EmbeddedBroker) -> None:
    """Consecutive reads keep one consumer (pipeline/source/consumers.py); records the
    consumer prefetched beyond one range's end are never emitted twice by the next read;
    a read that raises closes the consumer instead of handing it back."""
    from pipeline.commit.offsets import OffsetRange
    from pipeline.errors import DataLossError
    from pipeline.kafka.client import consumer_config
    from pipeline.source.consumers import POOL
    from pipeline.source.reader import read_ranges

    topic = unique_topic("kept")
    broker.create_topic(topic, 2)
    produce(broker.bootstrap_servers, topic, GeneratorSpec(count=4_000, seed=3))
    conf = consumer_config(broker.bootstrap_servers)
    POOL.close()
    created = POOL.created
    seen: list[tuple[int, int]] = []
    # small ranges of a long partition: each read's fetch runs ahead of its range's end
    for start in range(0, 1_000, 100):
        ranges = [
            OffsetRange(topic, 0, start, start + 100),
            OffsetRange(topic, 1, start, start + 50),
        ]
        # a config per read, as every batch of the pipeline builds (a fresh group.id each)
        per_read = consumer_config(broker.bootstrap_servers)
        for batch in read_ranges(per_read, ranges, stall_timeout_s=10):
            seen += zip(
                batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(),
                strict=True,
            )
    assert POOL.created == created + 1  # one consumer for ten reads
    expected = [(0, o) for o in range(1_000)] + [
        (1, o) for s in range(0, 1_000, 100) for o in range(s, s + 50)
    ]
    assert sorted(seen) == sorted(expected)  # every offset exactly once, nothing else
    assert [o for p, o in seen if p == 0] == list(range(1_000))  # in offset order

    beyond = [OffsetRange(topic, 0, 10_000, 10_001)]  # beyond the log: the read raises
    with pytest.raises(DataLossError):
        list(read_ranges(conf, beyond, stall_timeout_s=10))
    list(read_ranges(conf, [OffsetRange(topic, 0, 0, 10)], stall_timeout_s=10))
    assert POOL.created == created + 2  # the failed read's consumer was not reused
    POOL.close()
