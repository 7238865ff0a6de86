"""``ingest status`` for ``sink.format: hudi``: journal, timeline, committed offsets, lag."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table as RichTable

from pipeline.config import PipelineConfig
from pipeline.errors import PipelineError


def print_hudi_status(cfg: PipelineConfig, console: Console) -> None:
    from pipeline.hudi.sinks import HudiSinks
    from pipeline.kafka.client import KafkaMetadata, consumer_config
    from pipeline.ops.status import _print_journal
    from pipeline.source.offsets import TopicPartition

    sinks = HudiSinks.from_config(cfg)
    table = sinks.main.hudi
    _print_journal(cfg, sinks, console)
    if not table.exists():
        console.print(f"Hudi table at {table.base} does not exist yet (nothing committed)")
        return
    commits = table.completed_commits()
    pending = [i for i in table.instants() if i.state != "completed"]
    console.print(
        f"Hudi table {table.spec.database}.{table.spec.name} at {table.base}: "
        f"{len(commits)} completed commits, {len(pending)} pending instant files"
    )
    cp = sinks.main.latest_checkpoint(cfg.id)
    if cp is None:
        console.print(f"no commit of pipeline {cfg.id!r} in the table's timeline")
        return
    when = sinks.main.last_commit_time(cfg.id)
    at = datetime.fromtimestamp(when, tz=UTC).isoformat(timespec="seconds") if when else "-"
    console.print(
        f"pipeline {cp.pipeline_id}: last batch {cp.batch_id} (incarnation {cp.incarnation}, "
        f"writer epoch {cp.epoch}), instant {cp.instant}, committed at {at}"
    )
    s = cfg.source
    ends: dict[tuple[str, int], int] = {}
    try:
        md = KafkaMetadata(
            consumer_config(s.bootstrap_servers, s.kafka, isolation_level=s.isolation_level),
            timeout_s=10,
        )
        tps = [TopicPartition(t, p) for (t, p) in cp.committed_offsets]
        ends = {(tp.topic, tp.partition): b.high for tp, b in md.offsets(tps).items()}
    except PipelineError as e:
        console.print(f"[yellow]lag unknown: {e.message}[/]")
    rt = RichTable(title="committed offsets")
    for col in ("topic", "partition", "committed next offset", "broker end", "lag"):
        rt.add_column(col, justify="right")
    for (topic, part), off in sorted(cp.committed_offsets.items()):
        end = ends.get((topic, part))
        lag = "-" if end is None else str(max(0, end - off))
        rt.add_row(topic, str(part), str(off), "-" if end is None else str(end), lag)
    console.print(rt)
