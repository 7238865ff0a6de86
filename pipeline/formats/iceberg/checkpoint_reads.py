"""The consumption checkpoints in an Iceberg table's snapshots: :class:`SnapshotCheckpoints`.

Every commit is ONE snapshot whose summary carries the consumption checkpoint
(docs/design.md invariant 2; the ``ingest.*`` keys and their codec:
:mod:`pipeline.commit.checkpoint`, shared with the Hudi sink). The table alone therefore
tells what was ingested: these reads walk main's snapshot ancestry, head first, over the
whole retained history (docs/design.md invariant 12).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from pipeline.commit.checkpoint import (
    BATCH_END_KEY,
    BATCH_ID_KEY,
    FENCE_KEY,
    INCARNATION_KEY,
    PIPELINE_ID_KEY,
    CommitCheckpoint,
)
from pipeline.commit.checkpoint import parse_offsets as _parse_offsets
from pipeline.commit.offsets import TopicPartition
from pipeline.formats.iceberg.expiry import ancestry, summary_of
from pipeline.formats.iceberg.table_view import TableView

__all__ = ["SnapshotCheckpoints"]


class SnapshotCheckpoints(TableView):
    """Checkpoint reads of one table (the read-only checks of a batch use the read view)."""

    def _ancestry(self, table: Table) -> Iterator[Snapshot]:
        """Main's whole retained history, head first: no count bound, however many
        foreign commits and compactions follow ours (docs/design.md invariant 12)."""
        return ancestry(table)

    def _latest(self, table: Table, pipeline_id: str) -> CommitCheckpoint | None:
        for snapshot in self._ancestry(table):
            summary = summary_of(snapshot)
            if summary.get(PIPELINE_ID_KEY) == pipeline_id:
                return CommitCheckpoint.from_summary(summary)
        return None

    def _find_batch(
        self,
        table: Table,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None = None,
    ) -> Snapshot | None:
        for snapshot in self._ancestry(table):
            summary = summary_of(snapshot)
            if (
                summary.get(PIPELINE_ID_KEY) != pipeline_id
                or summary.get(INCARNATION_KEY) != incarnation
                or FENCE_KEY in summary
            ):
                continue
            try:
                found = int(summary.get(BATCH_ID_KEY, ""))
            except ValueError:
                continue
            if found == batch_id:
                if batch_end is not None and BATCH_END_KEY in summary:
                    logged = _parse_offsets(summary[BATCH_END_KEY], BATCH_END_KEY)
                    if logged != {(t, p): o for (t, p), o in batch_end.items()}:
                        continue  # same id, other range: a restored older checkpoint
                return snapshot
            if found < batch_id:
                return None  # batches of one incarnation commit in order: no need to look further
        return None

    def latest_checkpoint(self, pipeline_id: str) -> CommitCheckpoint | None:
        """The newest checkpoint of ``pipeline_id`` in the current snapshot's ancestry."""
        table = self._load_for_read()
        return self._latest(table, pipeline_id) if table is not None else None

    def committed_offsets(self, pipeline_id: str) -> dict[TopicPartition, int]:
        """Cumulative next offsets ``{(topic, partition): offset}`` (empty: none)."""
        checkpoint = self.latest_checkpoint(pipeline_id)
        return dict(checkpoint.committed_offsets) if checkpoint is not None else {}

    def committed_snapshot_id(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None = None,
    ) -> int | None:
        """The snapshot that committed this batch, if any."""
        table = self._load_for_read()
        if table is None:
            return None
        snapshot = self._find_batch(table, pipeline_id, incarnation, batch_id, batch_end)
        return snapshot.snapshot_id if snapshot is not None else None

    def is_committed(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None = None,
    ) -> bool:
        """True when a snapshot in the ancestry committed (pipeline, incarnation, batch)
        -- with the same planned end offsets, when both sides know them."""
        return self.committed_snapshot_id(pipeline_id, incarnation, batch_id, batch_end) is not None
