"""``ingest status``: what the table says was ingested, and how far behind Kafka it is."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from pipeline.config import PipelineConfig
from pipeline.errors import PipelineError
from pipeline.source.offsets import TopicPartition


def print_status(cfg: PipelineConfig, console: Console) -> None:
    if cfg.sink.format == "hudi":
        from pipeline.hudi.status import print_hudi_status

        return print_hudi_status(cfg, console)
    from pipeline.iceberg.sinks import IcebergSinks

    sinks = IcebergSinks.from_config(cfg)
    table = sinks.main.table()
    _print_journal(cfg, sinks, console)
    if table is None:
        console.print(f"table {cfg.sink.table} does not exist yet (nothing committed)")
        return
    cp = sinks.main.sink.latest_checkpoint(cfg.id)
    snaps = table.snapshots()
    console.print(f"table {cfg.sink.table}: {len(snaps)} snapshots at {table.location()}")
    if cp is None:
        console.print(f"no commit of pipeline {cfg.id!r} in the table's history")
        return
    head = table.current_snapshot()
    when = (
        datetime.fromtimestamp(head.timestamp_ms / 1000, tz=UTC).isoformat(timespec="seconds")
        if head
        else "-"
    )
    console.print(
        f"pipeline {cp.pipeline_id}: last batch {cp.batch_id} (incarnation {cp.incarnation}, "
        f"writer epoch {cp.epoch}), committed at {when}"
    )
    print_offsets_and_lag(cfg, cp.committed_offsets, console)


def print_offsets_and_lag(
    cfg: PipelineConfig, committed: Mapping[TopicPartition, int], console: Console
) -> None:
    """The table's committed offsets per partition, the broker's end, and the lag."""
    from pipeline.kafka.client import KafkaMetadata, consumer_config

    s = cfg.source
    ends: dict[tuple[str, int], int] = {}
    try:
        md = KafkaMetadata(
            consumer_config(s.bootstrap_servers, s.kafka, isolation_level=s.isolation_level),
            timeout_s=10,
        )
        tps = [TopicPartition(t, p) for (t, p) in committed]
        ends = {(tp.topic, tp.partition): b.high for tp, b in md.offsets(tps).items()}
    except PipelineError as e:
        console.print(f"[yellow]lag unknown: {e.message}[/]")
    rt = RichTable(title="committed offsets")
    for col in ("topic", "partition", "committed next offset", "broker end", "lag"):
        rt.add_column(col, justify="right")
    for (topic, part), off in sorted(committed.items()):
        end = ends.get((topic, part))
        lag = "-" if end is None else str(max(0, end - off))
        rt.add_row(topic, str(part), str(off), "-" if end is None else str(end), lag)
    console.print(rt)


def _print_journal(cfg: PipelineConfig, sinks: Any, console: Console) -> None:
    if cfg.commit.mode != "exactly-once":
        console.print("commit mode at-least-once: no instant journal, no fencing")
        return
    timeline = sinks.timeline(cfg.id)
    epochs = timeline.epochs()
    console.print(f"writer epoch: {epochs[-1] if epochs else 'none acquired yet'}")
    pending = timeline.pending()
    if not pending:
        console.print("pending instants: none")
        return
    rt = RichTable(title="pending instants (finished by the next run's recovery)")
    rt.add_column("instant", no_wrap=True, min_width=17)
    rt.add_column("state", no_wrap=True)
    rt.add_column("batch")
    rt.add_column("incarnation", overflow="fold")
    rt.add_column("epoch")
    rt.add_column("staged files")
    for inst in pending:
        b = inst.batch
        files = len(inst.inflight.files) if inst.inflight else "-"
        rt.add_row(
            inst.time,
            inst.state.value,
            str(b.batch_id) if b else "?",
            b.incarnation if b else "?",
            str(inst.epoch),
            str(files),
        )
    console.print(rt)
