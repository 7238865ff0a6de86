"""What ``ingest status`` shows for a Hudi table: its timeline and the pipeline's last
batch there (plain data; ``pipeline.ops.status`` renders it)."""

from __future__ import annotations

from pipeline.formats.base import LastBatch, TableStatus
from pipeline.formats.hudi.committer import HudiCommitter
from pipeline.formats.hudi.instant import State


def hudi_table_status(committer: HudiCommitter, pipeline_id: str) -> TableStatus:
    """The Hudi table's timeline and ``pipeline_id``'s last batch there."""
    table = committer.hudi
    name = f"Hudi table {table.spec.database}.{table.spec.name}"
    if not table.exists():
        return TableStatus(name, str(table.base), exists=False)
    commits = table.completed_commits()
    compactions = table.completed_replacecommits()
    pending = [i for i in table.instants() if i.state is not State.COMPLETED]
    cp = committer.latest_checkpoint(pipeline_id)
    last = None
    if cp is not None:
        last = LastBatch.of(cp, committer.last_commit_time(pipeline_id))
    return TableStatus(
        name,
        str(table.base),
        exists=True,
        commits=(
            f"{len(commits)} completed commits, "
            + (f"{len(compactions)} compactions, " if compactions else "")
            + f"{len(pending)} pending instant files"
        ),
        history="timeline",
        last_batch=last,
    )
