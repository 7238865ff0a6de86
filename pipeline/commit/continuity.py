"""Operator 3: does a batch continue the table? (docs/design.md invariants 5, 8 and 14)

A batch starts exactly at the table's committed next offsets. A start above them is a
gap: the batch fails (``GapError``) or, under ``onGap: rewind``, is re-read from them. A
start below them is an overlap: the workers drop what the table holds, or the batch fails
under ``onOverlap: fail``. Spark-free and format-free; the coordinator calls these on
committed offsets read fresh whenever :func:`starts_exactly_at` is false.
"""

from __future__ import annotations

import logging
from typing import Literal

from pipeline.commit.coverage import gap_error, gaps
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.table_ranges import consumed_ranges, overlap
from pipeline.commit.types import RereadFn, StagedBatch, WriteFn
from pipeline.errors import GapError, OverlapError

log = logging.getLogger(__name__)

#: ``commit.onGap``: refuse a batch that starts above the table, or re-read from the table
OnGap = Literal["fail", "rewind"]
#: ``commit.onOverlap``: drop what the table already holds, or refuse the batch
OnOverlap = Literal["drop", "fail"]


def starts_exactly_at(
    start: PartitionOffsets | None, end: PartitionOffsets, committed: PartitionOffsets
) -> bool:
    """Whether the batch continues ``committed`` with neither gap nor overlap (a first
    batch, with no logged start, never does: its workers' first offsets decide)."""
    if start is None:
        return False
    planned = consumed_ranges(start, end, [], committed, clip=False)
    return not gaps(start, committed) and not overlap(planned, committed)


def check_gaps(
    batch_id: int,
    start: PartitionOffsets | None,
    end: PartitionOffsets,
    committed: PartitionOffsets,
    write: WriteFn,
    reread: RereadFn | None,
    on_gap: OnGap,
) -> tuple[PartitionOffsets | None, WriteFn]:
    """The gap check, before anything is staged: (start, write) unchanged, or a failure,
    or (``on_gap="rewind"``) the start moved down to ``committed`` and its re-read."""
    found = gaps(start, committed)
    if not found:
        return start, write
    if on_gap != "rewind":
        raise gap_error(batch_id, found)
    if reread is None or start is None:
        raise GapError(f"batch {batch_id}: onGap=rewind but this batch cannot be re-read")
    rewound = start.updated({tp: s for tp, (s, _) in found.items()})
    log.warning(
        "batch %d: re-reading %s skipped by the checkpoint (onGap=rewind)",
        batch_id,
        ", ".join(f"{tp} [{s}, {e})" for tp, (s, e) in sorted(found.items())),
    )
    return rewound, reread(rewound, end)


def planned_overlap(
    batch_id: int,
    start: PartitionOffsets | None,
    end: PartitionOffsets,
    committed: PartitionOffsets,
    on_overlap: OnOverlap,
) -> dict[TopicPartition, tuple[int, int]]:
    """Before anything is written: the planned ranges below ``committed`` (the workers
    drop them), or ``OverlapError`` under ``on_overlap="fail"``."""
    planned = consumed_ranges(start, end, [], committed, clip=False)
    lapped = overlap(planned, committed)
    if lapped and on_overlap == "fail":
        tp, (s, e) = next(iter(sorted(lapped.items())))
        raise OverlapError(
            f"partition {tp}: batch {batch_id} re-reads offsets [{s}, {e}) that the table "
            f"already committed (checkpoint older than the table?); onOverlap=fail. "
            f"{len(lapped)} partition(s) overlap"
        )
    return lapped


def check_staged_overlap(
    batch_id: int, staged: StagedBatch, committed: PartitionOffsets, on_overlap: OnOverlap
) -> None:
    """After the write: ``OverlapError`` under ``on_overlap="fail"`` when the workers
    dropped records the table already holds (a first batch's overlap is known only here)."""
    if not staged.dropped or on_overlap != "fail":
        return
    s0 = next(s for s in staged.stats if s.dropped)
    tp = TopicPartition(s0.topic, s0.partition)
    raise OverlapError(
        f"partition {tp}: batch {batch_id} re-read {s0.dropped} records in "
        f"[{s0.min_offset}, {committed.get(tp)}) that the table already committed; "
        "onOverlap=fail "
        f"({sum(1 for s in staged.stats if s.dropped)} partition(s) overlap)"
    )
