"""The project's Apache Kafka cluster (``lab.broker``) and the event generator,
end to end: real KRaft nodes, real clients over real sockets.

Faults on the broker processes themselves (SIGKILL of a leader, SIGSTOP) use the shared
three-node cluster; the rest use the session's single node.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from support.kafka_fixtures import KafkaTestBroker, unique_topic

from lab.broker import KAFKA_VERSION, KafkaCluster, run_broker_forever
from lab.generator import (
    GeneratorSpec,
    event_schema_fields,
    event_types,
    generate_events,
    is_valid_event,
    produce,
)


@pytest.fixture(scope="module")
def broker(kafka_broker: KafkaTestBroker) -> KafkaCluster:
    return kafka_broker.own()


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


def test_produce_and_read_back_exactly_once(broker: KafkaCluster) -> None:
    topic = unique_topic("roundtrip")
    broker.create_topic(topic, 4)
    spec = GeneratorSpec(count=2_000, malformed_fraction=0.1, seed=7)
    result = produce(broker.bootstrap_servers, topic, spec)

    assert result.produced == 2_000
    assert result.malformed == 200
    assert sum(result.per_partition.values()) == 2_000
    assert {p for _, p in result.per_partition} == {0, 1, 2, 3}  # keys spread by hash
    for tp, (first, last) in result.offsets.items():
        assert first == 0 and last == result.per_partition[tp] - 1

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

    # the reader never took part in group management: the broker knows no group of it
    groups = broker.admin().list_consumer_groups(request_timeout=10).result()
    assert not [g for g in groups.valid if g.group_id.startswith("reader-")]


def test_uncommitted_group_has_no_offsets(broker: KafkaCluster) -> None:
    """An assign-only reader stores no offsets; a commit does (the contrast)."""
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


# in the rotation: tests/integration/commit/test_outages.py does the same under a running
# pipeline
@pytest.mark.slow
@pytest.mark.extended
def test_leader_killed_and_paused_loses_nothing(kafka_cluster3: KafkaTestBroker) -> None:
    """SIGKILL of a partition leader, then SIGSTOP of another: an assigned consumer and an
    acks=all idempotent producer carry on with no loss and no duplicate."""
    cluster = kafka_cluster3.own()
    topic = unique_topic("faults")
    cluster.create_topic(topic, 4)
    bootstrap = cluster.bootstrap_servers
    first = produce(bootstrap, topic, GeneratorSpec(count=800, seed=1), 4)
    consumer = _consumer(bootstrap, **{"socket.timeout.ms": "6000"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(4)])
    msgs = _read(consumer, 400, timeout_s=10)

    killed = cluster.leader(topic, 0)
    cluster.kill(killed)
    second = produce(bootstrap, topic, GeneratorSpec(count=800, seed=2), 4)
    assert cluster.leader(topic, 0) not in (killed, -1)
    cluster.restart(killed)  # two of three controllers must live for the quorum
    paused = cluster.leader(topic, 1)
    cluster.pause(paused)
    try:
        third = produce(bootstrap, topic, GeneratorSpec(count=400, seed=3), 4)
        msgs += _read(consumer, 2_000 - len(msgs), timeout_s=60)
    finally:
        cluster.resume(paused)
    consumer.close()
    expected = {
        tp: first.per_partition[tp] + second.per_partition[tp] + third.per_partition[tp]
        for tp in first.per_partition
    }
    _assert_no_duplicates_and_counts(msgs, expected)


def test_delete_records_moves_low_watermark(broker: KafkaCluster) -> None:
    topic = unique_topic("retention")
    broker.create_topic(topic, 1)
    produce(broker.bootstrap_servers, topic, GeneratorSpec(count=100))
    broker.delete_records(topic, 0, 40)
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
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


def test_topic_create_errors(broker: KafkaCluster) -> None:
    topic = unique_topic("twice")
    broker.create_topic(topic, 2)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        broker.create_topic(topic, 4)
    broker.add_partitions(topic, 4)  # growing one is how partitions are added
    md = broker.admin().list_topics(topic, timeout=5)
    assert len(md.topics[topic].partitions) == 4


def test_produce_round_robin_and_rate(broker: KafkaCluster) -> None:
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


def test_transactions_take_offsets_and_read_committed_hides_aborted_and_open(
    broker: KafkaCluster,
) -> None:
    """Markers take an offset; read_committed sees committed records only and stops at
    the last stable offset while a transaction is open; read_uncommitted sees all."""
    topic = unique_topic("txn")
    broker.create_topic(topic, 1)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": unique_topic("tx")}
    )
    producer.init_transactions(30)
    for commit in (True, False, True):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=str(i).encode(), partition=0)
        producer.flush(30)  # abort_transaction purges what was not sent yet
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    producer.begin_transaction()  # left open: offsets 12-13
    for _ in range(2):
        producer.produce(topic, value=b"open", partition=0)
    producer.flush(30)
    try:
        committed = _consumer(broker.bootstrap_servers, **{"isolation.level": "read_committed"})
        committed.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        msgs = _read(committed, 6)
        assert [m.offset() for m in msgs] == [0, 1, 2, 8, 9, 10]
        # the end a read_committed client sees is the last stable offset, before the open
        # transaction; its position stops there
        assert committed.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1] == 12
        assert committed.position([TopicPartition(topic, 0)])[0].offset == 12
        committed.close()
        everything = _consumer(broker.bootstrap_servers, **{"isolation.level": "read_uncommitted"})
        assert everything.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1] == 14
        everything.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert [m.offset() for m in _read(everything, 11)] == [0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13]
        everything.close()
    finally:
        producer.abort_transaction(30)


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


def test_run_broker_forever_stops_cleanly_and_external_brokers_skip_faults() -> None:
    ready: list[KafkaCluster] = []
    stop = threading.Event()
    topic = unique_topic("cli")
    thread = threading.Thread(
        target=run_broker_forever,
        args=(1, {topic: 2}),
        kwargs={"on_ready": ready.append, "stop_event": stop},
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + 30
    while not ready and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready, "broker never became ready"
    try:
        cluster = ready[0]
        md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(
            topic, timeout=5
        )
        assert len(md.topics[topic].partitions) == 2
        data = cluster.data_dir
        assert (data / "node-1" / "data" / "meta.properties").is_file()
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert not data.exists()  # its own temporary directory is removed on a clean stop
    assert KAFKA_VERSION.startswith("4.")

    external = KafkaTestBroker("127.0.0.1:9", kind="external")
    with pytest.raises(pytest.skip.Exception, match="external"):
        external.own()


def test_reader_reuses_one_consumer_and_emits_each_offset_once(broker: KafkaCluster) -> None:
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

    # ranges of the loop's size (one fetch bucket): the kept consumer takes the failed read
    beyond = [OffsetRange(topic, 0, 10_000, 10_100)]  # beyond the log: the read raises
    with pytest.raises(DataLossError):
        list(read_ranges(conf, beyond, stall_timeout_s=10))
    assert POOL.created == created + 1
    list(read_ranges(conf, [OffsetRange(topic, 0, 0, 100)], stall_timeout_s=10))
    assert POOL.created == created + 2  # the failed read's consumer was not reused
    POOL.close()
