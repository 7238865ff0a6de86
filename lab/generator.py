"""The event generator's producing loop: :func:`produce` writes the stream of
:mod:`lab.events` to Kafka with an idempotent producer and reports the delivered offsets
per partition; :func:`send_paced` sends one record at its slot of a steady rate.

The record shapes (:class:`~lab.events.GeneratorSpec`, :func:`~lab.events.generate_events`,
:func:`~lab.events.event_schema_fields`, …) are importable from here too: most callers
take a spec and :func:`produce` together.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from lab.events import (
    DEFAULT_START_TS,
    GeneratorSpec,
    event_schema_fields,
    event_types,
    generate_events,
    generate_flagged,
    is_valid_event,
)

__all__ = [
    "DEFAULT_START_TS",
    "GeneratorSpec",
    "ProduceResult",
    "event_schema_fields",
    "event_types",
    "generate_events",
    "generate_flagged",
    "is_valid_event",
    "produce",
    "send_paced",
]


@dataclass
class ProduceResult:
    produced: int = 0  # records delivered (acknowledged by the broker)
    malformed: int = 0  # of which had a malformed value
    per_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # first, last

    @property
    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self.per_partition)


def send_paced(
    producer: Producer,
    topic: str,
    key: bytes,
    value: bytes,
    partition: int,
    on_delivery: Callable[[KafkaError | None, Message], None],
    next_slot: float,
    rate: float,
) -> float:
    """Send one record at its slot of a steady ``rate`` (records/s); returns the next slot.

    A producer that fell behind (stalled broker, full queue) resumes at the current time
    instead of bursting to catch up; a full local queue is drained, never dropped."""
    now = time.monotonic()
    if now > next_slot + 1.0:
        next_slot = now
    while (delay := next_slot - time.monotonic()) > 0:
        producer.poll(delay)
    while True:
        try:
            producer.produce(
                topic, key=key, value=value, partition=partition, on_delivery=on_delivery
            )
            break
        except BufferError:
            producer.poll(0.05)
    producer.poll(0)
    return next_slot + 1.0 / rate


def produce(
    bootstrap: str,
    topic: str,
    spec: GeneratorSpec,
    partitions: int | None = None,
    extra_config: dict[str, str] | None = None,
    on_progress: Callable[[int], None] | None = None,
    encode: Callable[[bytes, bool], bytes] | None = None,
) -> ProduceResult:
    """Produce ``generate_events(spec)`` to ``topic`` and wait for every delivery.

    Idempotent producer (``acks=all``), ``linger.ms=5``; ``extra_config`` overrides.
    With ``partitions`` given, records go round-robin to partitions ``0..partitions-1``;
    otherwise the default (key-hash) partitioner places them. ``rate`` is honoured by pacing
    each send to its slot ``start + i / rate``. ``on_progress(n)`` is called with the number
    of records handed to the producer so far (every 1,000 records or second, and at the end).
    ``encode(value, malformed)`` re-encodes each JSON value (Avro:
    :class:`lab.avro_events.AvroEventEncoder`).

    Raises ``RuntimeError`` naming the first delivery error if any record fails.
    """
    if partitions is not None and partitions < 1:
        raise ValueError("partitions must be >= 1")
    conf: dict[str, str] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": "true",
        "acks": "all",
        "linger.ms": "5",
        "client.id": "event-generator",
    }
    conf.update(extra_config or {})
    producer = Producer(conf)

    result = ProduceResult()
    failures: list[tuple[KafkaError, int, int]] = []  # (error, partition, index)

    def _report(err: KafkaError | None, msg: Message, idx: int, bad: bool) -> None:
        part = msg.partition()
        part = -1 if part is None else part
        if err is not None:
            failures.append((err, part, idx))
            return
        tp = (msg.topic() or topic, part)
        offset = msg.offset()
        offset = -1 if offset is None else offset
        result.produced += 1
        if bad:
            result.malformed += 1
        result.per_partition[tp] = result.per_partition.get(tp, 0) + 1
        first, last = result.offsets.get(tp, (offset, offset))
        result.offsets[tp] = (min(first, offset), max(last, offset))

    def _callback(idx: int, bad: bool) -> Callable[[KafkaError | None, Message], None]:
        return lambda err, msg: _report(err, msg, idx, bad)

    start = time.monotonic()
    last_progress = start
    sent = 0
    for i, (key, value, bad) in enumerate(generate_flagged(spec)):
        if spec.rate is not None:
            slot = start + i / spec.rate
            while (delay := slot - time.monotonic()) > 0:
                producer.poll(delay)  # serves delivery reports while waiting; may return early
        if encode is not None:
            value = encode(value, bad)
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": _callback(i, bad)}
        if partitions is not None:
            kwargs["partition"] = i % partitions
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)
        producer.poll(0)
        sent += 1
        if failures:
            break
        if on_progress is not None:
            now = time.monotonic()
            if sent % 1000 == 0 or now - last_progress >= 1.0:
                last_progress = now
                on_progress(sent)
    remaining = producer.flush()
    while remaining > 0:
        remaining = producer.flush(1.0)
    if on_progress is not None:
        on_progress(sent)
    if failures:
        err, part, idx = failures[0]
        raise RuntimeError(
            f"delivery to {topic!r} failed for {len(failures)} record(s); first: record {idx} "
            f"partition {part}: {err.name()}: {err.str()}"
        )
    return result
