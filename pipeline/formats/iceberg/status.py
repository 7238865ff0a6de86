"""What ``ingest status`` shows for an Iceberg table: its snapshots and the pipeline's
last batch there (plain data; ``pipeline.ops.status`` renders it)."""

from __future__ import annotations

from pipeline.formats.base import LastBatch, TableStatus
from pipeline.formats.iceberg.pipeline_tables import IcebergCommitter


def iceberg_table_status(committer: IcebergCommitter, pipeline_id: str) -> TableStatus:
    """The Iceberg table's snapshots and ``pipeline_id``'s last batch there."""
    name = f"table {committer.iceberg.name}"
    table = committer.table()
    if table is None:
        return TableStatus(name, "", exists=False)
    cp = committer.iceberg.latest_checkpoint(pipeline_id)
    last = None
    if cp is not None:
        head = table.current_snapshot()
        last = LastBatch.of(cp, head.timestamp_ms / 1000 if head else None, instant=False)
    return TableStatus(
        name,
        table.location(),
        exists=True,
        commits=f"{len(table.snapshots())} snapshots",
        last_batch=last,
    )
