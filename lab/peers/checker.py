"""One exactly-once count for every system: the (topic, partition, offset) triples a system's
table holds against the offsets Kafka holds for the topic.

Kafka is the truth: per partition, every offset in ``[low, high)`` of the watermarks read
after the producer finished is a record that must appear exactly once (the bench's
producers are idempotent and not transactional, so a topic's offsets have no gaps and no
control records). Vectorised with Arrow: one ``group_by`` over the rows, no per-row Python.
A system writing many topics into a table each is counted table by table
(:func:`tally_routed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Tally:
    expected: int
    present: int  # distinct expected triples found
    missing: int
    duplicated: int  # rows beyond the first of each triple
    unexpected: int  # rows whose triple Kafka does not hold (another topic, beyond high)

    @property
    def exactly_once(self) -> bool:
        return self.missing == 0 and self.duplicated == 0 and self.unexpected == 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exactly_once": self.exactly_once}


def tally(rows: pa.Table, topic: str, ranges: Mapping[int, tuple[int, int]]) -> Tally:
    """Count ``rows`` (``topic``, ``partition``, ``offset`` columns) against ``ranges``
    (partition -> (low, high) watermarks of ``topic``)."""
    expected = sum(hi - lo for lo, hi in ranges.values())
    counts = (
        rows.select(["topic", "partition", "offset"])
        .group_by(["topic", "partition", "offset"])
        .aggregate([([], "count_all")])
    )
    inside = pc.equal(counts["topic"], topic)
    in_range: pa.ChunkedArray | pa.Array = pa.array([False] * counts.num_rows, pa.bool_())
    for p, (lo, hi) in ranges.items():
        mask = pc.and_(
            pc.equal(counts["partition"], p),
            pc.and_(pc.greater_equal(counts["offset"], lo), pc.less(counts["offset"], hi)),
        )
        in_range = pc.or_(in_range, mask)
    ok = pc.and_(inside, in_range)
    n = counts["count_all"]
    present = int(pc.sum(pc.cast(ok, pa.int64())).as_py() or 0)
    duplicated = int(pc.sum(pc.filter(pc.subtract(n, 1), ok)).as_py() or 0)
    unexpected = int(pc.sum(pc.filter(n, pc.invert(ok))).as_py() or 0)
    return Tally(expected, present, expected - present, duplicated, unexpected)


def tally_routed(
    rows_by_topic: Mapping[str, pa.Table], ranges: Mapping[str, Mapping[int, tuple[int, int]]]
) -> dict[str, Tally]:
    """Per topic, the rows of the table that topic is routed to against the topic's own
    ``ranges``: a record written to another topic's table is missing from its own and
    unexpected in the other, so every tally exactly once means each record sits once in
    its topic's table and nowhere else."""
    return {topic: tally(rows_by_topic[topic], topic, r) for topic, r in ranges.items()}


def total(tallies: Mapping[str, Tally]) -> Tally:
    """Many tallies added up (exactly once iff each is)."""
    parts = list(tallies.values())
    return Tally(
        expected=sum(t.expected for t in parts),
        present=sum(t.present for t in parts),
        missing=sum(t.missing for t in parts),
        duplicated=sum(t.duplicated for t in parts),
        unexpected=sum(t.unexpected for t in parts),
    )
