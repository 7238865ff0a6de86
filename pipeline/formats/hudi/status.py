"""``ingest status`` for ``sink.format: hudi``: journal, timeline, committed offsets, lag."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from pipeline.config import PipelineConfig


def print_hudi_status(cfg: PipelineConfig, console: Console) -> None:
    from pipeline.formats.hudi.sinks import HudiSinks
    from pipeline.tools.status import _print_journal, print_offsets_and_lag

    sinks = HudiSinks.from_config(cfg)
    _print_journal(cfg, sinks, console)
    cp = hudi_table_status(cfg, sinks, console)
    if cp is not None:
        print_offsets_and_lag(cfg, cp.committed_offsets, console)


def hudi_table_status(cfg: PipelineConfig, sinks: Any, console: Console) -> Any:
    """The Hudi table's timeline and the pipeline's last batch there; its checkpoint
    (None when nothing of this pipeline is committed)."""
    table = sinks.main.hudi
    if not table.exists():
        console.print(f"Hudi table at {table.base} does not exist yet (nothing committed)")
        return None
    commits = table.completed_commits()
    pending = [i for i in table.instants() if i.state != "completed"]
    console.print(
        f"Hudi table {table.spec.database}.{table.spec.name} at {table.base}: "
        f"{len(commits)} completed commits, {len(pending)} pending instant files"
    )
    cp = sinks.main.latest_checkpoint(cfg.id)
    if cp is None:
        console.print(f"no commit of pipeline {cfg.id!r} in the table's timeline")
        return None
    when = sinks.main.last_commit_time(cfg.id)
    at = datetime.fromtimestamp(when, tz=UTC).isoformat(timespec="seconds") if when else "-"
    console.print(
        f"pipeline {cp.pipeline_id}: last batch {cp.batch_id} (incarnation {cp.incarnation}, "
        f"writer epoch {cp.epoch}), instant {cp.instant}, committed at {at}"
    )
    return cp
