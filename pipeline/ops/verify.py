"""Exactly-once check by counting (topic, partition, offset) in tables.

Reads only the coordinate columns through ``to_arrow_batch_reader`` and keeps one int64
per record (8 bytes), so tables of tens of millions of records fit; the check is exact:
every expected offset present once, nothing else present.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.source.offsets import TopicPartition

COORDS = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]


@dataclass
class PartitionCount:
    expected: int = 0
    present: int = 0
    missing: int = 0
    duplicated: int = 0
    unexpected: int = 0


@dataclass
class VerifyReport:
    partitions: dict[TopicPartition, PartitionCount] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(
            c.missing == 0 and c.duplicated == 0 and c.unexpected == 0
            for c in self.partitions.values()
        )

    def totals(self) -> PartitionCount:
        t = PartitionCount()
        for c in self.partitions.values():
            t.expected += c.expected
            t.present += c.present
            t.missing += c.missing
            t.duplicated += c.duplicated
            t.unexpected += c.unexpected
        return t


def offsets_by_partition(batches: Iterable[pa.RecordBatch]) -> dict[TopicPartition, pa.Array]:
    parts: dict[TopicPartition, list[pa.Array]] = {}
    for b in batches:
        if b.num_rows == 0:
            continue
        t = pa.Table.from_batches([b.select(COORDS)])
        for key in t.group_by(["_kafka_topic", "_kafka_partition"]).aggregate([]).to_pylist():
            mask = pc.and_(
                pc.equal(t["_kafka_topic"], key["_kafka_topic"]),
                pc.equal(t["_kafka_partition"], key["_kafka_partition"]),
            )
            tp = TopicPartition(key["_kafka_topic"], key["_kafka_partition"])
            parts.setdefault(tp, []).append(t.filter(mask)["_kafka_offset"].combine_chunks())
    return {tp: pa.concat_arrays(arrs) for tp, arrs in parts.items()}


def compare(
    present: Mapping[TopicPartition, pa.Array],
    expected: Mapping[TopicPartition, Iterable[int]],
) -> VerifyReport:
    report = VerifyReport()
    for tp in sorted(set(present) | set(expected)):
        want = set(expected.get(tp, ()))
        got = present.get(tp, pa.array([], pa.int64()))
        counts = pc.value_counts(got) if len(got) else []
        seen: set[int] = set()
        dup = 0
        for item in counts:
            off, n = item["values"].as_py(), item["counts"].as_py()
            seen.add(off)
            dup += n - 1
        report.partitions[tp] = PartitionCount(
            expected=len(want),
            present=len(got),
            missing=len(want - seen),
            duplicated=dup,
            unexpected=len(seen - want),
        )
    return report
