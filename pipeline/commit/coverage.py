"""The two checks that no offset is skipped (docs/design.md invariant 8), pure functions.

  * :func:`gaps`       -- before anything is staged: per partition, a batch starts exactly
                          at the table's committed next offset. A start above it (table
                          rolled back, checkpoint from another pipeline, a batch Spark
                          logged as done without our commit) would jump over records.
  * :func:`coverage`   -- before the precommit: the tasks read what the batch planned,
                          per partition first offset >= start, last < end, no offset
                          twice, and as many records as the broker has in the range.

Committed offsets already include the data-loss ranges a commit recorded (they move to the
batch's end), so "the committed offset" is the only start that is not a gap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.table_ranges import consumed_ranges
from pipeline.commit.types import PartitionStats, Range, RecordCounter
from pipeline.errors import CoverageError, GapError

__all__ = [
    "Range",
    "ReadIssue",
    "RecordCounter",
    "coverage",
    "coverage_error",
    "gap_error",
    "gaps",
    "planned_reads",
]


def gaps(
    start: Mapping[TopicPartition, int] | None, committed: Mapping[TopicPartition, int]
) -> dict[TopicPartition, Range]:
    """``[committed, start)`` of every partition whose batch starts above the table's
    committed next offset. Partitions the table does not list (new ones) have no gap."""
    out = {}
    for tp, s in (start or {}).items():
        c = committed.get(tp)
        if c is not None and s > c:
            out[tp] = (c, s)
    return out


def gap_error(batch_id: int, found: Mapping[TopicPartition, Range]) -> GapError:
    parts = ", ".join(f"{tp} [{s}, {e})" for tp, (s, e) in sorted(found.items())[:8])
    more = f" and {len(found) - 8} more" if len(found) > 8 else ""
    return GapError(
        f"batch {batch_id} starts above the table's committed offsets; never committed: "
        f"{parts}{more} (table rolled back or checkpoint from elsewhere?); "
        "commit.onGap=rewind re-reads them, or delete the Spark checkpoint"
    )


@dataclass(frozen=True)
class ReadIssue:
    tp: TopicPartition
    planned: Range
    detail: str

    def __str__(self) -> str:
        return f"{self.tp} planned [{self.planned[0]}, {self.planned[1]}): {self.detail}"


def _read(s: PartitionStats) -> int:
    return s.records + s.dropped  # dropped overlap was read too


def coverage(
    planned: Mapping[TopicPartition, Range],
    stats: list[PartitionStats],
    count: RecordCounter | None = None,
) -> list[ReadIssue]:
    """What the tasks read that does not match ``planned``. Holes (fewer records than
    offsets) are legitimate only where the broker has no record either: ``count`` asks it
    (without a counter holes are not judged)."""
    seen = {TopicPartition(s.topic, s.partition): s for s in stats}
    issues = []
    holes: dict[TopicPartition, Range] = {}
    for tp, seen_st in seen.items():
        if tp not in planned:
            n = _read(seen_st)
            issues.append(ReadIssue(tp, (0, 0), f"read {n} records of no planned range"))
    for tp, (s, e) in planned.items():
        st = seen.get(tp)
        if e <= s:
            continue
        if st is not None and (st.min_offset < s or st.max_offset >= e):
            issues.append(
                ReadIssue(tp, (s, e), f"read offsets {st.min_offset}..{st.max_offset} outside it")
            )
        elif st is not None and _read(st) > st.max_offset - st.min_offset + 1:
            issues.append(
                ReadIssue(
                    tp, (s, e), f"read {_read(st)} records in {st.min_offset}..{st.max_offset}"
                )
            )
        elif (_read(st) if st else 0) < e - s:
            holes[tp] = (s, e)
    if holes and count is not None:
        have = count(holes)
        for tp, r in sorted(holes.items()):
            hole_st = seen.get(tp)
            n = _read(hole_st) if hole_st else 0
            if have.get(tp, 0) != n:
                last = hole_st.max_offset if hole_st else None
                issues.append(
                    ReadIssue(tp, r, f"read {n} records (last {last}), the broker has {have[tp]}")
                )
    return issues


def coverage_error(batch_id: int, issues: list[ReadIssue]) -> CoverageError:
    more = f" and {len(issues) - 1} more" if len(issues) > 1 else ""
    return CoverageError(
        f"batch {batch_id}: the tasks did not read the batch's ranges: {issues[0]}{more}; "
        "nothing was committed (a reader or consumer defect: report it)"
    )


def planned_reads(
    start: PartitionOffsets | None,
    end: PartitionOffsets,
    stats: list[PartitionStats],
    committed: PartitionOffsets,
) -> dict[TopicPartition, Range]:
    """The ranges the tasks were to read, the ones :func:`coverage` judges them by."""
    planned = consumed_ranges(start, end, stats, committed, clip=False)
    if start is None:  # a checkpoint's first batch starts where Spark's source did:
        # at or below the table (the workers drop what the table holds), and may end
        # below it too (checkpoint lost, small batches): then its whole range is overlap
        first = {TopicPartition(s.topic, s.partition): s.min_offset for s in stats}
        for tp, e in end.items():
            s = planned.get(tp, (e, e))[0]
            planned[tp] = (min(s, first.get(tp, s)), e)
    return planned
