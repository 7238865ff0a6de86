"""Reads exact offset ranges from Kafka into Arrow record batches (runs in Spark tasks).

Invariants
  * Every record of ``[start, end)`` that the broker still has is emitted exactly once,
    in offset order per partition; nothing at or beyond ``end`` is emitted.
  * A range ends when a record at ``end - 1`` was seen *or* the consumer's position
    reached ``end``: offsets taken by transaction control records, aborted records
    (read_committed) or compaction never appear as messages, and waiting for them would
    stall the task forever.
  * The consumer is leased from the worker process's pool (``source/consumers.py``) and
    handed back unassigned after a read that ended normally; a record a kept consumer
    delivers twice (a fetch of its previous assignment) is skipped by the per-partition
    next-offset check, so the guarantee above does not rest on librdkafka alone.
  * Offsets that vanished (retention) raise ``DataLossError`` unless ``fail_on_data_loss``
    is false; then the reader jumps to the log start and the gap shows in the output
    (the first offset emitted is above the range start).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KTopicPartition

from pipeline.commit.offsets import OffsetRange, TopicPartition
from pipeline.errors import BrokerUnavailableError, DataLossError
from pipeline.kafka.client import fetch_sizing
from pipeline.source.consumers import POOL

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
# bound on the wake-up request of a read (brokers down: the read's stall timeout applies)
_WAKE_TIMEOUT_S = 1.0  # the stall it saves is 1 s: never wait longer than that


def record_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


Payloads: TypeAlias = Sequence[bytes | None] | pa.Array  # Python bytes or an Arrow array


def records_at(values: Payloads, keys: Payloads | None = None) -> pa.RecordBatch:
    """``values`` (and ``keys``) as a batch the reader could give, to decode them alone
    (the verifier, the decode benchmark, the decoder's tests): topic ``t``, partition 0,
    offsets from 0, no timestamps."""
    n = len(values)
    schema = record_schema(False)
    return pa.RecordBatch.from_arrays(
        [
            pa.nulls(n, pa.binary()) if keys is None else _binary(keys),
            _binary(values),
            pa.repeat(pa.scalar("t"), n),
            pa.array(np.zeros(n, np.int32)),
            pa.array(np.arange(n, dtype=np.int64)),
            pa.nulls(n, schema.field("timestamp").type),
            pa.array(np.zeros(n, np.int32)),
        ],
        schema=schema,
    )


def _binary(payloads: Payloads) -> pa.Array:
    if isinstance(payloads, pa.Array):
        return payloads.cast(pa.binary())
    return pa.array(payloads, pa.binary())


class _Columns:
    """Column builders for one Arrow batch (plain lists: the fastest path from
    confluent-kafka's Message objects; docs/bench.md, "Figures behind the code's choices")."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.reset()

    def reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.topics: list[str] = []
        self.partitions: list[int] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []  # raw Kafka values, converted in to_batch
        self.ts_types: list[int] = []  # raw confluent-kafka TIMESTAMP_* codes
        self.headers: list[list[dict[str, Any]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def to_batch(self, schema: pa.Schema) -> pa.RecordBatch:
        arrays: list[pa.Array] = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array(self.topics, pa.string()),
            pa.array(self.partitions, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            *_timestamp_columns(
                pa.array(self.timestamps, pa.int64()), pa.array(self.ts_types, pa.int32())
            ),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, HEADER_TYPE))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        self.reset()
        return batch


def _timestamp_columns(ts: pa.Array, ts_type: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(timestamp, timestampType) like Spark's Kafka source, vectorised: confluent-kafka
    codes 0 = none (null, -1), 1 = CreateTime (0), 2 = LogAppendTime (1); ms -> us."""
    known = pc.and_(pc.not_equal(ts_type, 0), pc.greater_equal(ts, 0))
    micros = pc.if_else(known, pc.multiply(ts, 1000), pa.scalar(None, pa.int64()))
    kind = pc.if_else(pc.equal(ts_type, 0), -1, pc.subtract(ts_type, 1)).cast(pa.int32())
    return micros.cast(pa.timestamp("us", tz="UTC")), kind


def read_ranges(
    consumer_conf: Mapping[str, Any],
    ranges: Sequence[OffsetRange],
    *,
    include_headers: bool = False,
    fail_on_data_loss: bool = True,
    batch_rows: int = 20_000,
    poll_batch: int = 5_000,
    stall_timeout_s: float = 120.0,
) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches with exactly the records of ``ranges`` (one consumer)."""
    todo = {r.tp: r for r in ranges if r.size > 0}
    if not todo:
        return
    schema = record_schema(include_headers)
    conf = {**fetch_sizing(max(r.size for r in todo.values())), **consumer_conf}
    with POOL.lease(conf) as consumer:
        assignment = [KTopicPartition(tp.topic, tp.partition, r.start) for tp, r in todo.items()]
        consumer.assign(assignment)
        consumer.resume(assignment)  # a kept consumer's partitions may still be paused
        # Wake every leader's broker thread: a kept consumer's have been idle since its
        # last read and only notice the new fetch positions at their next wake-up, up to
        # 1 s later (librdkafka debug log: "start fetching", then "fetchable" exactly 1 s
        # after). One ListOffsets request per leader does it; the answer is not needed.
        # Measured on Apache Kafka 4.1, 76 reads of 4 x 500 records each way: without it
        # 6 reads took over 1 s, with it none. ListOffsets needs only Describe on the
        # topic, which Read implies; a slow leader holds it at most _WAKE_TIMEOUT_S.
        with contextlib.suppress(KafkaException):
            consumer.offsets_for_times(
                [KTopicPartition(p.topic, p.partition, OFFSET_END) for p in assignment],
                timeout=_WAKE_TIMEOUT_S,
            )
        # next offset to emit per partition: a record delivered twice (a fetch of an earlier
        # assignment) is skipped, so the range's records come out once, in order
        nxt: dict[tuple[str, int], int] = {tp: r.start for tp, r in todo.items()}
        cols = _Columns(include_headers)
        last_progress = time.monotonic()
        while todo:
            # consume(n) blocks until n messages or the timeout: asking for no more than
            # the records still due returns the moment the last one arrives instead of
            # idling out the timeout at the end of every read (gaps such as control
            # records only make it wait the timeout, then _finish_by_position closes them)
            due = sum(r.end - nxt[tp] for tp, r in todo.items())
            msgs = consumer.consume(max(1, min(poll_batch, due)), timeout=0.1)
            progressed = False
            # the per-record loop: plain list appends only (the rest is vectorised)
            keys, values, topics = cols.keys.append, cols.values.append, cols.topics.append
            parts, offs = cols.partitions.append, cols.offsets.append
            stamps, kinds = cols.timestamps.append, cols.ts_types.append
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    _handle_error(consumer, err, msg, todo, fail_on_data_loss)
                    for tp, r in todo.items():
                        nxt[tp] = max(nxt[tp], r.start)
                    continue
                # set on messages without error; (topic, partition) == its TopicPartition
                key: tuple[str, int] = (msg.topic(), msg.partition())  # type: ignore[assignment]
                off = msg.offset()
                r = todo.get(key)  # type: ignore[call-overload]
                if r is None or off is None or off >= r.end or off < nxt[key]:
                    continue
                nxt[key] = off + 1
                keys(msg.key())
                values(msg.value())
                topics(key[0])
                parts(key[1])
                offs(off)
                kind, stamp = msg.timestamp()
                kinds(kind)
                stamps(stamp)
                if include_headers:
                    hs = msg.headers()
                    cols.headers.append([{"key": h[0], "value": h[1]} for h in hs] if hs else None)
                progressed = True
                if off >= r.end - 1:
                    _finish(consumer, todo, r.tp)
            if len(cols) >= batch_rows:
                yield cols.to_batch(schema)
            if progressed:
                last_progress = time.monotonic()
            elif todo:
                _finish_by_position(consumer, todo)
                if todo and time.monotonic() - last_progress > stall_timeout_s:
                    missing = ", ".join(f"{tp}@{consumer_position(consumer, tp)}" for tp in todo)
                    raise BrokerUnavailableError(
                        f"no progress for {stall_timeout_s:.0f}s reading {missing} "
                        "(broker down or partition leader unavailable; limit "
                        "source.brokerRetrySeconds)"
                    )
        if len(cols):
            yield cols.to_batch(schema)


def consumer_position(consumer: Consumer, tp: TopicPartition) -> int:
    pos = consumer.position([KTopicPartition(tp.topic, tp.partition)])
    return int(pos[0].offset) if pos else -1


def _finish(
    consumer: Consumer, todo: dict[TopicPartition, OffsetRange], tp: TopicPartition
) -> None:
    del todo[tp]
    consumer.pause([KTopicPartition(tp.topic, tp.partition)])


def _finish_by_position(consumer: Consumer, todo: dict[TopicPartition, OffsetRange]) -> None:
    """Close ranges whose remaining offsets are not records (control records, gaps)."""
    positions = consumer.position([KTopicPartition(tp.topic, tp.partition) for tp in todo])
    for p in positions:
        tp = TopicPartition(p.topic, p.partition)
        r = todo.get(tp)
        if r is not None and p.offset is not None and p.offset >= r.end:
            _finish(consumer, todo, tp)


def _handle_error(
    consumer: Consumer,
    err: KafkaError,
    msg: Message,
    todo: dict[TopicPartition, OffsetRange],
    fail_on_data_loss: bool,
) -> None:
    code = err.code()
    if code == KafkaError._PARTITION_EOF:
        return
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        topic, partition = msg.topic(), msg.partition()
        if topic is None or partition is None:
            raise DataLossError(f"offset out of range: {err.str()}")
        tp = TopicPartition(topic, partition)
        r = todo.get(tp)
        if r is None:
            return
        low, high = consumer.get_watermark_offsets(
            KTopicPartition(topic, partition), timeout=30, cached=False
        )
        if fail_on_data_loss or low <= r.start:
            raise DataLossError(
                f"partition {tp}: offsets from {r.start} are no longer available "
                f"(log start offset {low}, end {high}); records were deleted by retention "
                "before they were ingested (set failOnDataLoss=false to skip them)"
            )
        if low >= r.end:
            _finish(consumer, todo, tp)
            return
        # Skip the lost prefix; the gap is visible to the coordinator as first offset > start.
        todo[tp] = OffsetRange(tp.topic, tp.partition, low, r.end)
        # After an offset-reset error the partition cannot be seek()ed: re-assign it.
        consumer.incremental_unassign([KTopicPartition(topic, partition)])
        consumer.incremental_assign([KTopicPartition(topic, partition, low)])
        return
    if err.fatal() or code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._AUTHENTICATION):
        raise KafkaException(err)
    # Transient (broker down, leader change): librdkafka retries by itself.


__all__ = [
    "OFFSET_END",
    "read_ranges",
    "record_schema",
    "records_at",
]
