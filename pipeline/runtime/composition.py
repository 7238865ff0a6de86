"""What a pipeline is made of: :func:`compose` builds the driver's parts from a
``PipelineConfig`` (tables, coordinator, observers, the runtime's jobs), and
:func:`check_locally` refuses what can be refused before any of them exists.

:class:`~pipeline.app.Pipeline` runs what this module builds; nothing here starts a query.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.commit.coordinator import make_coordinator
from pipeline.commit.faults import FaultPoints
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.protocol import BatchCoordinator
from pipeline.config import PipelineConfig
from pipeline.formats.base import PipelineTables, TableFormat, WritesBatches
from pipeline.observe.base import Observers
from pipeline.runtime.batches import BatchRunner
from pipeline.runtime.checkpoint_probe import probe_checkpoint_location
from pipeline.runtime.fencing import FenceGuard
from pipeline.runtime.source_settings import SourceSettings
from pipeline.runtime.stats import RunStats
from pipeline.runtime.stopping import StopControl
from pipeline.runtime.streams import SparkHandle
from pipeline.runtime.telemetry import Telemetry
from pipeline.runtime.warm_standby import LeaseHolder

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipeline.decode.registry.watch import SchemaWatch

__all__ = ["PipelineParts", "check_locally", "compose"]


def check_locally(cfg: PipelineConfig, spark: SparkSession | None = None) -> None:
    """What can be refused without the network, before anything is created or an epoch
    taken: the declared column types, every local path the run writes, a local checkpoint
    location (created, written, removed). The CLI runs it before the broker check."""
    from pipeline.columns import table_columns
    from pipeline.formats.registry import table_format
    from pipeline.preflight import check_paths
    from pipeline.source.choice import reader_name

    reader_name(cfg.source.reader)  # a reader this Spark cannot run: refused in one line
    if not cfg.decode.registry_format or cfg.decode.schema_:  # else: from the registry, later
        table_columns(cfg.decode.field_specs(), raw=cfg.decode.raw)
    check_paths(cfg, table_format(cfg).writable_paths(cfg))
    probe_checkpoint_location(cfg.checkpoint_location, spark=spark)  # local: no JVM


@dataclass
class PipelineParts:
    """A pipeline's driver-side parts, one job each (see :mod:`pipeline.runtime`)."""

    cfg: PipelineConfig  # as resolved (a registry format: its columns pinned)
    format: TableFormat
    faults: FaultPoints
    tables: PipelineTables
    source: SourceSettings
    session: SparkHandle
    stats: RunStats
    observers: Observers  # metrics exporter, batch log, progress displays
    timeline: InstantTimeline | None  # None: at-least-once (no journal)
    coordinator: BatchCoordinator
    telemetry: Telemetry
    fence: FenceGuard
    stopping: StopControl
    batches: BatchRunner
    lease: LeaseHolder


def _before_batch(
    watch: SchemaWatch | None, new_topics: Callable[[PartitionOffsets], None] | None
) -> list[Callable[[PartitionOffsets], None]]:
    """The checks of a batch's end offsets that may start the run again."""
    checks: list[Callable[[PartitionOffsets], None]] = []
    if watch is not None:
        checks.append(lambda _end: watch.check())
    if new_topics is not None:
        checks.append(new_topics)
    return checks


def compose(given: PipelineConfig, spark: SparkSession | None = None) -> PipelineParts:
    """The parts of the pipeline ``given`` describes: its tables opened, its coordinator
    chosen by ``commit.mode``; refused first by :func:`check_locally`."""
    from pipeline.decode.registry.table_schema import resolve_registry_schema
    from pipeline.decode.registry.watch import schema_watch
    from pipeline.formats.registry import table_format
    from pipeline.formats.routes import new_topic_check

    cfg = resolve_registry_schema(given)  # a registry format: columns, pinned
    fmt = table_format(cfg)
    check_locally(cfg, spark)
    faults = FaultPoints(cfg.commit.faults)  # config, else INGEST_FAULT
    tables = fmt.open_tables(cfg, faults)
    committers = tables.commit_tables()
    source = SourceSettings(cfg, committers)
    needs = tables.spark_needs if isinstance(tables, WritesBatches) else None
    session = SparkHandle(cfg, source.reader, spark, needs)
    stats, observers = RunStats(), Observers()
    timeline = tables.timeline(cfg.id) if cfg.commit.mode == "exactly-once" else None
    coordinator = make_coordinator(
        cfg.id,
        committers,
        timeline=timeline,
        on_overlap=cfg.commit.on_overlap,
        faults=faults,
        data_loss=source.data_loss,
        on_gap=cfg.commit.on_gap,  # docs/design.md invariant 8
    )
    telemetry = Telemetry(
        cfg,
        format_name=fmt.name,
        tables=committers,
        timeline=timeline,
        coordinator=coordinator,
        observers=observers,
        consumer_conf=source.consumer_conf,
    )
    fence = FenceGuard(stats, observers, coordinator.check_epoch)
    stopping = StopControl(stats, cfg.run.stop_timeout_seconds)
    watch = schema_watch(given, cfg)
    batches = BatchRunner(
        cfg,
        tables=tables,
        coordinator=coordinator,
        timeline=timeline,
        faults=faults,
        source=source,
        stats=stats,
        observers=observers,
        fence=fence,
        stop=stopping,
        spark=session.get,
        before_batch=_before_batch(watch, new_topic_check(cfg, tables.router)),
    )
    lease = LeaseHolder(
        cfg,
        timeline=timeline,
        spark=session.get,
        source=source,
        open_table=telemetry.run_info,
        stop=stopping,
        fence=fence,
    )
    return PipelineParts(
        cfg=cfg,
        format=fmt,
        faults=faults,
        tables=tables,
        source=source,
        session=session,
        stats=stats,
        observers=observers,
        timeline=timeline,
        coordinator=coordinator,
        telemetry=telemetry,
        fence=fence,
        stopping=stopping,
        batches=batches,
        lease=lease,
    )
