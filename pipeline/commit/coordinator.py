"""The batch coordinator: one atomic, checkpoint-carrying table commit per Spark batch.

Runs on the driver inside ``foreachBatch``; Spark-free so unit tests drive it directly.

Operators, per batch
  1. dedupe   -- a batch whose (checkpoint incarnation, batch id) is already committed to
                 the main table is skipped without running the write (invariant 5).
  2. write    -- ``write()`` runs the workers; they stage data files and return them with
                 per-(topic, partition) offset statistics. Nothing is visible yet.
  3. commit   -- dead-letter files first (own dedupe, same batch identity), then the main
                 table in ONE snapshot whose summary carries the consumption checkpoint:
                 pipeline id, incarnation, batch id, this batch's ranges and the cumulative
                 committed end offsets (invariant 2).

Invariants upheld here
  * The main commit is the last step; a failure before it leaves the table unchanged and
    Spark replays the same batch (same ranges), which commits once.
  * A replayed batch that was committed before the crash is detected and skipped.
  * Cumulative committed offsets only move forward per partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.source.offsets import PartitionOffsets, TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionStats:
    """What the workers wrote for one partition: offsets seen and records."""

    topic: str
    partition: int
    min_offset: int
    max_offset: int
    records: int


@dataclass
class StagedBatch:
    """Workers' answer: staged (invisible) files and what they cover."""

    data_files: list[bytes] = field(default_factory=list)
    dead_letter_files: list[bytes] = field(default_factory=list)
    stats: list[PartitionStats] = field(default_factory=list)
    dead_letter_records: int = 0

    @property
    def records(self) -> int:
        return sum(s.records for s in self.stats)


@dataclass(frozen=True)
class BatchIdentity:
    pipeline_id: str
    incarnation: str
    batch_id: int


@dataclass(frozen=True)
class Checkpoint:
    """The consumption checkpoint recorded with a commit (DESIGN invariant 2)."""

    pipeline_id: str
    incarnation: str
    batch_id: int
    epoch: int
    ranges: dict[TopicPartition, tuple[int, int]]
    committed: PartitionOffsets
    records: int
    dead_letter_records: int = 0
    data_loss: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)


class TableCommitter(Protocol):
    """What the coordinator needs from a table format adapter."""

    def is_committed(self, pipeline_id: str, incarnation: str, batch_id: int) -> bool: ...

    def committed_offsets(self, pipeline_id: str) -> PartitionOffsets | None: ...

    def commit(self, files: list[bytes], checkpoint: Checkpoint) -> None: ...


@dataclass
class BatchOutcome:
    batch_id: int
    outcome: str  # "committed" | "replay_skipped"
    records: int = 0
    dead_letter_records: int = 0
    files: int = 0
    ranges: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    committed: PartitionOffsets = field(default_factory=PartitionOffsets)
    timings: dict[str, float] = field(default_factory=dict)


def batch_ranges(
    start: Mapping[TopicPartition, int] | None,
    end: Mapping[TopicPartition, int],
    stats: list[PartitionStats],
    previous: Mapping[TopicPartition, int] | None,
) -> dict[TopicPartition, tuple[int, int]]:
    """``[start, end)`` per partition this batch consumed.

    Start is the previous batch's logged end; for the first batch of a checkpoint it is
    the table's committed offset, else the first offset a worker saw.
    """
    first = {TopicPartition(s.topic, s.partition): s.min_offset for s in stats}
    out = {}
    for tp, e in end.items():
        if start is not None and tp in start:
            s = start[tp]
        elif previous is not None and tp in previous:
            s = previous[tp]
        else:
            s = first.get(tp, e)
        s = min(s, e)
        if e > s:
            out[tp] = (s, e)
    return out


class Coordinator:
    """Commits Spark batches into a main table and a dead-letter table."""

    def __init__(
        self,
        pipeline_id: str,
        main: TableCommitter,
        dead_letter: TableCommitter | None = None,
        epoch: int = 0,
    ) -> None:
        self.pipeline_id = pipeline_id
        self.main = main
        self.dead_letter = dead_letter
        self.epoch = epoch

    def run_batch(
        self,
        incarnation: str,
        batch_id: int,
        start: PartitionOffsets | None,
        end: PartitionOffsets,
        write: Callable[[], StagedBatch],
        data_loss: Callable[
            [StagedBatch, dict[TopicPartition, tuple[int, int]]],
            dict[TopicPartition, tuple[int, int]],
        ]
        | None = None,
    ) -> BatchOutcome:
        t0 = time.monotonic()
        if self.main.is_committed(self.pipeline_id, incarnation, batch_id):
            log.info("batch %d of %s already committed: replay skipped", batch_id, incarnation)
            return BatchOutcome(batch_id, "replay_skipped")
        previous = self.main.committed_offsets(self.pipeline_id)
        t1 = time.monotonic()
        staged = write()
        t2 = time.monotonic()
        ranges = batch_ranges(start, end, staged.stats, previous)
        before = previous or PartitionOffsets()
        committed = before.updated({tp: max(off, before.get(tp, off)) for tp, off in end.items()})
        loss = data_loss(staged, ranges) if data_loss else {}
        checkpoint = Checkpoint(
            pipeline_id=self.pipeline_id,
            incarnation=incarnation,
            batch_id=batch_id,
            epoch=self.epoch,
            ranges=ranges,
            committed=committed,
            records=staged.records - staged.dead_letter_records,
            dead_letter_records=staged.dead_letter_records,
            data_loss=loss,
        )
        if (
            staged.dead_letter_files
            and self.dead_letter is not None
            and not self.dead_letter.is_committed(self.pipeline_id, incarnation, batch_id)
        ):
            self.dead_letter.commit(staged.dead_letter_files, checkpoint)
        self.main.commit(staged.data_files, checkpoint)
        t3 = time.monotonic()
        return BatchOutcome(
            batch_id,
            "committed",
            records=checkpoint.records,
            dead_letter_records=staged.dead_letter_records,
            files=len(staged.data_files) + len(staged.dead_letter_files),
            ranges=ranges,
            committed=committed,
            timings={"dedupe": t1 - t0, "write": t2 - t1, "commit": t3 - t2},
        )
