"""The at-least-once baseline (``commit.mode: at-least-once``; benchmark baseline).

Operators, per batch: write (workers stage files), then commit -- dead letters, then
each main table, every commit carrying the checkpoint. No journal, no writer epoch (no
fencing), no dedupe, no recovery: a batch Spark replays after a crash is appended again,
and a checkpoint restarted from earlier offsets appends duplicates (nothing
self-corrects).

Invariants it still keeps
  * Each commit carries the consumption checkpoint, so cumulative committed offsets are
    readable from the table and never move backwards.
  * Its outcomes count as committed batches (``Outcome.COMMITTED``) for observers.
"""

from __future__ import annotations

import time

from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.table_ranges import consumed_ranges
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import (
    DEAD_LETTER,
    BatchOutcome,
    Outcome,
    RecordCounter,
    RereadFn,
    WriteFn,
)
from pipeline.errors import CommitError


class AtLeastOnceCoordinator:
    """Commits Spark batches as plain appends into a set of tables (its main tables and
    a dead-letter table), in the set's commit order."""

    def __init__(self, pipeline_id: str, tables: CommitTables) -> None:
        self.pipeline_id = pipeline_id
        self.tables = tables
        self.epoch = 0  # checkpoints carry epoch 0: no writer epoch in this mode

    @property
    def exactly_once(self) -> bool:
        return False

    def acquire_epoch(self, owner: str = "") -> int:
        raise CommitError(
            f"pipeline {self.pipeline_id!r}: at-least-once mode has no writer epoch to acquire"
        )

    def check_epoch(self) -> None:
        """Nothing to check: no journal, no fencing."""

    def run_batch(
        self,
        incarnation: str,
        batch_id: int,
        start: PartitionOffsets | None,
        end: PartitionOffsets,
        write: WriteFn,
        *,
        reread: RereadFn | None = None,
        count: RecordCounter | None = None,
    ) -> BatchOutcome:
        """No journal, no fencing, no dedupe: plain appends. Nor the gap and coverage
        checks (docs/design.md invariant 8) that ``reread`` and ``count`` serve: this
        mode never asks them."""
        t1 = time.monotonic()
        staged = write(f"alo-{incarnation[:8]}-{batch_id}", PartitionOffsets())
        t2 = time.monotonic()
        previous = self.tables.committed_offsets(self.pipeline_id) or PartitionOffsets()
        ranges = consumed_ranges(start, end, staged.stats, previous)
        committed = previous.updated(dict(end))
        checkpoint = CommitCheckpoint(
            pipeline_id=self.pipeline_id,
            incarnation=incarnation,
            batch_id=batch_id,
            epoch=0,
            ranges=ranges,
            committed_offsets=committed,
            records=staged.records - staged.dead_letter_records,
            dead_letter_records=staged.dead_letter_records,
            batch_end=end,
        )
        files: dict[str, list[bytes]] = {name: [] for name, _ in self.tables}
        for name, descriptor in self.tables.staged_files(staged):
            files.setdefault(name, []).append(descriptor)
        sizes = dict.fromkeys(files, 0)
        per_table: dict[str, int] = {}
        for name, table in self.tables:
            if name == DEAD_LETTER and not files[name]:
                continue  # the main tables commit every batch: their commit is the checkpoint
            described = [table.describe(d) for d in files[name]]
            sizes[name] = sum(size for _, size, _ in described)
            if name != DEAD_LETTER:
                per_table[name] = sum(records for _, _, records in described)
            table.commit(files[name], checkpoint)
        dead_files = len(files[DEAD_LETTER]) if self.tables.get(DEAD_LETTER) else 0
        return BatchOutcome(
            batch_id,
            Outcome.COMMITTED,
            records=checkpoint.records,
            dead_letter_records=staged.dead_letter_records,
            files=len(staged.data_files) + len(staged.routed_files) + len(staged.dead_letter_files),
            ranges=ranges,
            committed=committed,
            timings={"write": t2 - t1, "commit": time.monotonic() - t2},
            bytes=sum(n for name, n in sizes.items() if name != DEAD_LETTER),
            dead_letter_files=dead_files,
            dead_letter_bytes=sizes.get(DEAD_LETTER, 0),
            unknown_field_records=staged.unknown_field_records,
            unknown_fields=list(staged.unknown_fields),
            table_records=per_table,
        )
