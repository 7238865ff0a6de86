"""The coverage check's oracle on the driver: how many records the broker delivers in
offset ranges (docs/design.md invariant 8).

Asked only for ranges the tasks read with holes (transaction markers, aborted records
under read_committed, compacted offsets, or a defect): a fresh consumer, never the
workers' pooled ones, so a consumer defect cannot vouch for itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as KTopicPartition

from pipeline.commit.offsets import TopicPartition
from pipeline.errors import BrokerUnavailableError


def count_records(
    conf: Mapping[str, Any],
    ranges: Mapping[TopicPartition, tuple[int, int]],
    timeout_s: float = 120.0,
) -> dict[TopicPartition, int]:
    """Records in ``[start, end)`` per partition (from the log start when retention
    deleted the head: data loss is judged elsewhere)."""
    counts = {tp: 0 for tp in ranges}
    consumer = Consumer({**conf, "enable.partition.eof": False})
    try:
        todo: dict[TopicPartition, tuple[int, int]] = {}
        for tp, (s, e) in ranges.items():
            low, _ = consumer.get_watermark_offsets(
                KTopicPartition(tp.topic, tp.partition), timeout=timeout_s, cached=False
            )
            if max(s, low) < e:
                todo[tp] = (max(s, low), e)
        if not todo:
            return counts
        consumer.assign([KTopicPartition(t.topic, t.partition, s) for t, (s, _) in todo.items()])
        deadline = time.monotonic() + timeout_s
        while todo:
            for msg in consumer.consume(500, timeout=0.2):
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    if err.fatal():
                        raise BrokerUnavailableError(f"counting records: {err.str()}")
                    continue
                key = TopicPartition(str(msg.topic()), int(msg.partition() or 0))
                off = msg.offset()
                r = todo.get(key)
                if err is None and r is not None and off is not None and r[0] <= off < r[1]:
                    counts[key] += 1
            for p in consumer.position([KTopicPartition(t.topic, t.partition) for t in todo]):
                tp = TopicPartition(p.topic, p.partition)
                if p.offset is not None and p.offset >= todo[tp][1]:
                    del todo[tp]
            if todo and time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"counting records of {', '.join(map(str, todo))}: no end after "
                    f"{timeout_s:.0f}s (limit source.brokerRetrySeconds)"
                )
        return counts
    finally:
        consumer.close()
