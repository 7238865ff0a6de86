"""The ``ingest_kafka`` streaming source against a live broker and real Spark.

Every test counts (topic, partition, offset): each produced record read exactly once.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from support.drivers import produced
from support.kafka_fixtures import KafkaTestBroker, unique_topic

from lab.generator import GeneratorSpec, produce

Coord = tuple[str, int, int]


class Collected:
    def __init__(self) -> None:
        self.batches: list[tuple[int, list[Coord], int]] = []  # (batch id, coords, tasks)

    def __call__(self, df: Any, batch_id: int) -> None:
        tasks = df.rdd.getNumPartitions()
        rows = df.select("topic", "partition", "offset").collect()
        self.batches.append((batch_id, [(r[0], r[1], r[2]) for r in rows], tasks))

    @property
    def coords(self) -> list[Coord]:
        return [c for _, cs, _ in self.batches for c in cs]


def run_stream(
    spark: Any,
    options: dict[str, str],
    checkpoint: Path,
    *,
    available_now: bool = True,
    collected: Collected | None = None,
    wait_s: float = 120,
) -> Collected:
    out = collected if collected is not None else Collected()
    reader = spark.readStream.format("ingest_kafka").options(**options)
    w = reader.load().writeStream.foreachBatch(out).option("checkpointLocation", str(checkpoint))
    q = (
        w.trigger(availableNow=True) if available_now else w.trigger(processingTime="1 second")
    ).start()
    q.awaitTermination(wait_s)
    if q.isActive:
        q.stop()
    exc = q.exception()
    if exc is not None:
        raise exc
    return out


def expected_coords(result: Any) -> list[Coord]:
    return sorted(produced(result))


def source_options(kafka_broker: KafkaTestBroker, **options: str) -> dict[str, str]:
    """``ingest_kafka`` options reading ``kafka_broker``: ``options``, from the earliest
    offsets unless they say where to start."""
    out = {"kafka.bootstrap.servers": kafka_broker.bootstrap_servers, **options}
    if "startingTimestamp" not in out:
        out.setdefault("startingOffsets", "earliest")
    return out


def assert_read_once_each(got: list[Coord], want: list[Coord]) -> None:
    """The coordinates read are exactly ``want`` (sorted): none twice, none missing."""
    dup = [c for c, n in Counter(got).items() if n > 1]
    assert not dup, f"{len(dup)} duplicated, e.g. {dup[:3]}"
    missing = sorted(set(want) - set(got))
    assert not missing, f"{len(missing)} missing, e.g. {missing[:3]}"
    assert sorted(got) == want


def test_max_records_bounds_batches_and_restart_continues(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("bounded", 4)
    first = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=3000, seed=1))
    opts = source_options(kafka_broker, topics=topic, maxRecordsPerTrigger="700")
    got = run_stream(spark, opts, tmp_path / "ckpt")
    sizes = [len(cs) for _, cs, _ in got.batches if cs]
    assert max(sizes) <= 700 and len(sizes) >= 5
    assert_read_once_each(got.coords, expected_coords(first))

    # restart on the same checkpoint: only the new records, none of the old ones
    second = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=1000, seed=2))
    again = run_stream(spark, opts, tmp_path / "ckpt")
    assert_read_once_each(again.coords, expected_coords(second))
    assert again.batches[0][0] > got.batches[-1][0]  # batch ids continue


def test_explicit_assignment_never_uses_consumer_groups(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("assign", 3)
    result = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=900, seed=3))
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    before = {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid}
    opts = source_options(kafka_broker, assign=json.dumps({topic: [0, 2]}))
    got = run_stream(spark, opts, tmp_path / "ckpt")
    # a JoinGroup or an OffsetCommit would leave a group on the broker
    after = {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid}
    assert after == before, after - before
    want = [c for c in expected_coords(result) if c[1] in (0, 2)]
    assert_read_once_each(got.coords, want)


def test_min_partitions_splits_one_partition_into_tasks(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("split", 1)
    result = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=2000, seed=4))
    opts = source_options(kafka_broker, topics=topic, minPartitions="5")
    got = run_stream(spark, opts, tmp_path / "ckpt")
    assert [tasks for _, cs, tasks in got.batches if cs] == [5]
    assert_read_once_each(got.coords, expected_coords(result))


def test_new_topics_matching_the_pattern_start_at_earliest(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    prefix = unique_topic("pat")
    t1 = f"{prefix}-a"
    kafka_broker.create_topic(t1, 2)
    r1 = produce(kafka_broker.bootstrap_servers, t1, GeneratorSpec(count=400, seed=5))
    opts = source_options(kafka_broker, topicPattern=f"{prefix}-.*")
    first = run_stream(spark, opts, tmp_path / "ckpt")
    t2 = f"{prefix}-b"
    kafka_broker.create_topic(t2, 3)
    r2 = produce(kafka_broker.bootstrap_servers, t2, GeneratorSpec(count=600, seed=6))
    r3 = produce(kafka_broker.bootstrap_servers, t1, GeneratorSpec(count=100, seed=7))
    second = run_stream(spark, opts, tmp_path / "ckpt")
    assert_read_once_each(first.coords, expected_coords(r1))
    assert_read_once_each(second.coords, sorted(expected_coords(r2) + expected_coords(r3)))


def test_retention_loss_fails_by_default_and_is_skipped_when_allowed(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("retention", 2)
    result = produce(
        kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=1000, seed=8), partitions=2
    )
    start = {topic: {"0": 0, "1": 0}}
    kafka_broker.own().delete_records(topic, 0, 100)
    opts = source_options(kafka_broker, topics=topic, startingOffsets=json.dumps(start))
    with pytest.raises(
        Exception,
        match=r"\[ingest:data-loss\] partition .*\[0\]: next offset 0 is "
        r"below the log start offset 100",
    ):
        run_stream(spark, opts, tmp_path / "ckpt-strict")
    got = run_stream(spark, {**opts, "failOnDataLoss": "false"}, tmp_path / "ckpt-lenient")
    want = [c for c in expected_coords(result) if not (c[1] == 0 and c[2] < 100)]
    assert_read_once_each(got.coords, want)


def test_transaction_markers_end_ranges(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("txn", 1)
    p = Producer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "transactional.id": f"tx-{topic}",
            "linger.ms": 5,
        }
    )
    p.init_transactions(30)
    for i in range(5):
        p.begin_transaction()
        for j in range(10):
            p.produce(topic, key=b"k", value=json.dumps({"i": i, "j": j}).encode(), partition=0)
        p.commit_transaction(30)
    # 5 transactions x (10 records + 1 commit marker): the last offset (54) is a marker
    opts = source_options(kafka_broker, topics=topic, maxRecordsPerTrigger="11")
    t0 = time.monotonic()
    got = run_stream(spark, opts, tmp_path / "ckpt", wait_s=90)
    assert time.monotonic() - t0 < 80, "a range ending on a control record stalled"
    want = [(topic, 0, t * 11 + j) for t in range(5) for j in range(10)]
    assert_read_once_each(got.coords, want)


def test_recreated_topic_stops_with_a_clear_error(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """Told by the topic id, also when the new topic has grown past the committed offset
    (its end alone looks normal there: reading on would skip the new topic's first 300
    records and take the rest as the old topic's)."""
    topic = kafka_broker.new_topic("recreate", 1)
    produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=9))
    opts = source_options(kafka_broker, topics=topic)
    run_stream(spark, opts, tmp_path / "ckpt")
    kafka_broker.own().delete_topic(topic)
    kafka_broker.create_topic(topic, 1)
    produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=400, seed=10))
    with pytest.raises(
        Exception,
        match=rf"\[ingest:topic-recreated\] topic {topic} was deleted and re-created "
        r"\(topic id \S+, now \S+\)",
    ):
        run_stream(spark, opts, tmp_path / "ckpt")


def test_topic_recreated_under_a_running_query_stops_it_reading_nothing_new(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """A running query (1 s trigger) whose topic is deleted and re-created with more
    records than it had: the next trigger stops the query -- re-created (its id changed) or,
    when a trigger falls between the delete and the create, vanished -- and not one record
    of the new topic is read."""
    topic = kafka_broker.new_topic("recreate-live", 1)
    first = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=11))
    out = Collected()
    q = (
        spark.readStream.format("ingest_kafka")
        .options(**source_options(kafka_broker, topics=topic))
        .load()
        .writeStream.foreachBatch(out)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        deadline = time.monotonic() + 90
        while len(out.coords) < 300:
            assert time.monotonic() < deadline and q.isActive, "first records not read"
            time.sleep(0.2)
        kafka_broker.own().delete_topic(topic)
        kafka_broker.create_topic(topic, 1)
        produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=400, seed=12))
        try:
            q.awaitTermination(60)  # raises the query's error once it stopped with one
        except Exception as e:  # pyspark's StreamingQueryException
            message = str(e)
        else:
            message = str(q.exception())
        assert not q.isActive, "the query kept running on the re-created topic"
        assert (
            f"[ingest:topic-recreated] topic {topic} was deleted and re-created" in message
            or f"[ingest:partition-state] topic {topic!r} does not exist" in message
        ), message[:500]
    finally:
        if q.isActive:
            q.stop()
    assert_read_once_each(out.coords, expected_coords(first))


def test_aborted_transactions_never_appear(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("abort", 1)
    p = Producer(
        {"bootstrap.servers": kafka_broker.bootstrap_servers, "transactional.id": f"tx-{topic}"}
    )
    p.init_transactions(30)
    for i in range(4):
        p.begin_transaction()
        for j in range(5):
            p.produce(topic, value=json.dumps({"i": i, "j": j}).encode(), partition=0)
        p.flush(30)
        if i % 2:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    got = run_stream(spark, source_options(kafka_broker, topics=topic), tmp_path / "ckpt")
    # committed transactions 0 and 2 occupy offsets 0-4 and 12-16
    assert_read_once_each(got.coords, [(topic, 0, o) for o in [*range(0, 5), *range(12, 17)]])


def test_starting_timestamp(spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path) -> None:
    """The first offset at or after the timestamp, per partition; a timestamp after every
    record is an error naming the partitions, or their ends with strategy ``latest``."""
    topic = kafka_broker.new_topic("ts", 2)
    # recent stamps: the broker's 7-day retention would delete older ones at once
    base = int(time.time() * 1000) - 60_000
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(10):
        p.produce(topic, value=b"{}", partition=0, timestamp=base + i * 1000)
        p.produce(topic, value=b"{}", partition=1, timestamp=base + i * 2000)
    p.flush(30)
    opts = source_options(kafka_broker, topics=topic, startingTimestamp=str(base + 4_000))
    got = run_stream(spark, opts, tmp_path / "ckpt")
    want = [(topic, 0, o) for o in range(4, 10)] + [(topic, 1, o) for o in range(2, 10)]
    assert_read_once_each(got.coords, want)

    late = {**opts, "startingTimestamp": str(base + 12_000)}  # after all of partition 0
    with pytest.raises(
        Exception,
        match=rf"\[ingest:config\] startingTimestamp={base + 12_000}: no record at or after "
        rf"it in 1 partition\(s\) \({topic}\[0\]\)",
    ):
        run_stream(spark, late, tmp_path / "ckpt-late")
    lenient = {**late, "startingOffsetsByTimestampStrategy": "latest"}
    got = run_stream(spark, lenient, tmp_path / "ckpt-lenient")
    assert_read_once_each(got.coords, [(topic, 1, o) for o in range(6, 10)])


def test_min_records_hold_triggers_until_enough_or_the_delay(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """``minRecordsPerTrigger``: no batch while fewer records are available, then one batch
    of everything; ``maxTriggerDelay``: the few records are admitted once it has passed;
    Trigger.AvailableNow reads everything regardless.
    Two queries at once (0.5 s triggers) keep the wall time to a few seconds. (A new
    checkpoint's batch 0 always runs, empty if held: Spark has nothing committed yet.)"""
    held, delayed = kafka_broker.new_topic("minrec", 1), kafka_broker.new_topic("mindelay", 1)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "linger.ms": 100})

    def wave(topic: str, n: int) -> None:  # one produce batch: visible all at once
        for i in range(n):
            p.produce(topic, value=json.dumps({"i": i}).encode(), partition=0)
        p.flush(30)

    def sizes(got: Collected) -> list[int]:
        return [len(cs) for _, cs, _ in got.batches if cs]

    def until(cond: Any, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.1)

    wave(held, 30)
    wave(delayed, 30)
    got_held, got_delayed = Collected(), Collected()
    queries = []
    t0 = time.monotonic()
    try:
        for topic, out, extra in (
            (delayed, got_delayed, {"maxTriggerDelay": "2 seconds"}),
            (held, got_held, {}),
        ):
            opts = source_options(kafka_broker, topics=topic, minRecordsPerTrigger="100", **extra)
            df = spark.readStream.format("ingest_kafka").options(**opts).load()
            w = df.writeStream.foreachBatch(out).trigger(processingTime="500 milliseconds")
            queries.append(w.option("checkpointLocation", str(tmp_path / topic)).start())

        until(lambda: sizes(got_delayed))
        waited = time.monotonic() - t0
        assert waited >= 2.0  # the delay runs from the reader's start, after t0
        assert sizes(got_delayed) == [30]
        # meanwhile nothing for the other query: 30 < 100, and the default delay is 15 min
        assert sizes(got_held) == []

        wave(held, 100)
        until(lambda: sizes(got_held))
        assert sizes(got_held) == [130]
        assert_read_once_each(got_held.coords, [(held, 0, o) for o in range(130)])
    finally:
        for q in queries:
            q.stop()
    for q in queries:
        assert q.exception() is None

    # Trigger.AvailableNow ignores the minimum: everything up to its target, at once
    opts = source_options(kafka_broker, topics=held, minRecordsPerTrigger="1000")
    got = run_stream(spark, opts, tmp_path / "available-now")
    assert sizes(got) == [130]
