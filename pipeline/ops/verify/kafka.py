"""Reads offset windows of one partition with a plain assign-only consumer.

No consumer group, no commits, no offset storing: the consumer is assigned one partition at
a time, at an explicit offset, and reads forward window after window (records fetched past
a window's end are carried into the next one). Control records and aborted transactions
(with ``read_committed``) never surface as messages: a window also ends when the
consumer's position has reached its end.

Per-message Python is unavoidable here: confluent-kafka hands out one ``Message`` object
per record; the columns are built from plain lists (the fastest path measured).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KTopicPartition

from pipeline.commit.offsets import TopicPartition
from pipeline.errors import BrokerUnavailableError, ConfigError

# kafka.* options that would make the consumer join a group or commit offsets
_REFUSED = {"group.instance.id", "enable.auto.commit", "enable.auto.offset.store"}


@dataclass
class KafkaWindow:
    """Records of one window, in offset order."""

    offsets: np.ndarray  # int64, sorted, unique
    keys: pa.Array  # large_binary
    values: pa.Array  # large_binary
    timestamps: pa.Array  # timestamp[us, UTC] (null: no timestamp)


class LogStartMoved(Exception):
    """Retention deleted records while we were reading: re-plan with the new log start."""

    def __init__(self, low: int) -> None:
        super().__init__(low)
        self.low = low


def verifier_consumer_config(
    bootstrap: str, kafka: Mapping[str, str], isolation_level: str
) -> dict[str, Any]:
    bad = sorted(k for k in kafka if k in _REFUSED or k == "group.id")
    if bad:
        raise ConfigError(f"source.kafka option(s) {', '.join(bad)} are not allowed")
    return {
        "bootstrap.servers": bootstrap,
        **dict(kafka),
        "client.id": "ingest-verify",
        "group.id": f"ingest-verify-{uuid.uuid4().hex}",  # required by the client, never used
        "isolation.level": isolation_level,
        "enable.auto.commit": "false",
        "enable.auto.offset.store": "false",
        "auto.offset.reset": "error",
        "enable.partition.eof": "false",
        "fetch.queue.backoff.ms": "10",
        "fetch.wait.max.ms": "10",
        "log_level": "2",
    }


class KafkaWindowReader:
    """One consumer for the whole verification; partitions are read one after another."""

    def __init__(self, conf: Mapping[str, Any], stall_timeout_s: float = 120.0) -> None:
        self.conf = dict(conf)
        self.stall_timeout_s = max(5.0, stall_timeout_s)
        self._consumer = Consumer(self.conf)
        self._tp: TopicPartition | None = None
        self._next: int | None = None  # offset the assigned partition continues from
        self._carry: list[Message] = []

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> KafkaWindowReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_reachable(self, topics: list[str]) -> set[str]:
        """The topics that exist; BrokerUnavailableError when no broker answers."""
        try:
            md = self._consumer.list_topics(timeout=15)
        except KafkaException as e:
            raise BrokerUnavailableError(
                f"Kafka at {self.conf['bootstrap.servers']} did not answer: {e}"
            ) from None
        return {t for t in topics if t in md.topics and md.topics[t].error is None}

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        try:
            low, high = self._consumer.get_watermark_offsets(
                KTopicPartition(tp.topic, tp.partition), timeout=30, cached=False
            )
        except KafkaException as e:
            raise BrokerUnavailableError(
                f"cannot list offsets of {tp.topic}/{tp.partition}: {e}"
            ) from None
        return int(low), int(high)

    def read(self, tp: TopicPartition, start: int, end: int) -> KafkaWindow:
        """Every record Kafka returns in ``[start, end)`` of ``tp``."""
        offsets: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        stamps: list[int | None] = []
        if end <= start:
            return _window(offsets, keys, values, stamps)
        if self._tp != tp or self._next != start:
            self._consumer.assign([KTopicPartition(tp.topic, tp.partition, start)])
            self._tp, self._carry = tp, []
        self._next = end
        pending, self._carry = self._carry, []
        last_progress = time.monotonic()
        while True:
            done = False
            for msg in pending:
                err = msg.error()
                if err is not None:
                    self._on_error(tp, err)
                    continue
                off = msg.offset()
                if off is None or off < start:
                    continue
                if off >= end:
                    self._carry.append(msg)
                    done = True
                    continue
                offsets.append(off)
                keys.append(msg.key())
                values.append(msg.value())
                ts_type, ts = msg.timestamp()
                stamps.append(ts * 1000 if ts_type != 0 and ts >= 0 else None)
                if off >= end - 1:
                    done = True
            if done:
                break
            if pending:
                last_progress = time.monotonic()
            elif self._position(tp) >= end:
                break  # the rest of the window is control records / aborted records
            elif time.monotonic() - last_progress > self.stall_timeout_s:
                raise BrokerUnavailableError(
                    f"no progress for {self.stall_timeout_s:.0f}s reading {tp.topic}/"
                    f"{tp.partition} at offset {offsets[-1] + 1 if offsets else start} "
                    f"(window ends at {end})"
                )
            want = max(1, min(end - (offsets[-1] + 1 if offsets else start), 10_000))
            pending = self._consumer.consume(want, timeout=0.2)
        return _window(offsets, keys, values, stamps)

    def _position(self, tp: TopicPartition) -> int:
        pos = self._consumer.position([KTopicPartition(tp.topic, tp.partition)])
        return int(pos[0].offset) if pos and pos[0].offset is not None else -1

    def _on_error(self, tp: TopicPartition, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            self._tp = self._next = None
            raise LogStartMoved(self.watermarks(tp)[0])
        if err.fatal() or err.code() in (
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError._AUTHENTICATION,
        ):
            raise BrokerUnavailableError(f"reading {tp.topic}/{tp.partition}: {err.str()}")
        # transient (leader change, broker restart): librdkafka retries by itself


def _window(
    offsets: list[int],
    keys: list[bytes | None],
    values: list[bytes | None],
    stamps: list[int | None],
) -> KafkaWindow:
    return KafkaWindow(
        offsets=np.asarray(offsets, dtype=np.int64),
        keys=pa.array(keys, pa.large_binary()),  # large: a window may exceed 2 GiB
        values=pa.array(values, pa.large_binary()),
        timestamps=pa.array(stamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
    )
