"""What a table format provides: the :class:`TableFormat` protocol.

A format (Iceberg, Hudi, or ``both`` = one instant committed to an Iceberg and a Hudi
table) is picked by :mod:`pipeline.formats.registry`, the only place that looks at the
configured format name. Everything a caller needs to know about a format goes through
this protocol:

* :meth:`TableFormat.open_tables` -- the pipeline's tables for the driver
  (:class:`PipelineTables`: the set of main and dead-letter committers a batch commits
  to, the decoded columns' Spark DDL, the instant timeline, the workers' task plan);
* :meth:`TableFormat.writable_paths` -- the local directories preflight checks;
* :meth:`TableFormat.table_sets` -- where each main table and its dead letters are, for
  readers that work without the writer's code (``ingest verify``, drills, benchmarks);
* :meth:`TableFormat.status` -- what ``ingest status`` shows per table, as plain data
  (:class:`TableStatus`) the status tool renders;
* :meth:`TableFormat.local_sink` -- the sink settings a throw-away local pipeline needs.

Tables whose batches are not written by the pipeline's own tasks (Hudi's Spark writer)
also implement :class:`WritesBatches`: the session they need and the batch writer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pipeline.columns.evolution import Change
from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.faults import FaultPoints
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.maintenance import TableMaintenance
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import StagedBatch
from pipeline.config import PipelineConfig
from pipeline.spark.routes import Router
from pipeline.spark.writer import TaskPlan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "LastBatch",
    "PipelineTables",
    "TableFormat",
    "TableKind",
    "TableRef",
    "TableSet",
    "TableStatus",
    "WritesBatches",
]

#: How a table is read: through pyiceberg (a catalog identifier) or hudi-rs (a base path).
TableKind = Literal["iceberg", "hudi"]


@dataclass(frozen=True)
class TableRef:
    """One table as a reader finds it: an Iceberg identifier in ``sink.catalog``, or a
    Hudi base path (as configured: a local path or ``file://`` URI)."""

    kind: TableKind
    location: str


@dataclass(frozen=True)
class TableSet:
    """A main table and the dead-letter table holding the records it did not take
    (``both``: the Hudi main table shares the Iceberg dead-letter table).

    A routed set (``sink.routes``, docs/design.md invariant 16) is one ``TableSet`` per
    main table, all sharing one dead-letter table: ``route`` gives each decoded record its
    table's index, and this table takes the records routed to ``index``. Without a route
    the main table takes every decoded record."""

    main: TableRef
    dead_letter: TableRef
    route: Router | None = None
    index: int = 0


@dataclass(frozen=True)
class LastBatch:
    """The last batch of a pipeline committed to a table."""

    pipeline_id: str
    batch_id: int
    incarnation: str
    epoch: int
    instant: str | None  # shown when the table names its commits by instant (Hudi)
    committed_at: float | None  # seconds since the epoch
    committed_offsets: Mapping[TopicPartition, int]

    @classmethod
    def of(
        cls, cp: CommitCheckpoint, committed_at: float | None, *, instant: bool = True
    ) -> LastBatch:
        """The batch ``cp`` records (``instant``: the table names commits by instant)."""
        return cls(
            pipeline_id=cp.pipeline_id,
            batch_id=cp.batch_id,
            incarnation=cp.incarnation,
            epoch=cp.epoch,
            instant=cp.instant if instant else None,
            committed_at=committed_at,
            committed_offsets=cp.committed_offsets,
        )


@dataclass(frozen=True)
class TableStatus:
    """What ``ingest status`` shows for one table (``pipeline.ops.status`` renders it)."""

    table: str  # e.g. "table db.events", "Hudi table db.events"
    location: str  # "" when unknown (a table not created yet)
    exists: bool
    commits: str = ""  # e.g. "3 snapshots", "4 completed commits, 0 pending instant files"
    history: str = "history"  # where the table records its commits: history, timeline
    last_batch: LastBatch | None = None


class PipelineTables(Protocol):
    """A pipeline's opened tables (``IcebergTables``, ``HudiTables``, ``DualTables``)."""

    def commit_tables(self) -> CommitTables:
        """The tables a batch commits to: the main table(s) and the dead-letter table."""
        ...

    @property
    def data_ddl(self) -> str: ...  # Spark DDL of the decoded (non-Kafka) columns

    @property
    def router(self) -> Router | None: ...  # a routed set's workers' router (None: one table)

    def timeline(self, pipeline_id: str) -> InstantTimeline: ...  # the instant journal

    def journal_pipelines(self) -> list[str]:
        """Ids of every pipeline with an instant journal beside the main table (a shared
        table: several); orphan cleanup keeps all their pending instants' files."""
        ...

    def maintenance(self) -> list[TableMaintenance]: ...  # compaction, orphans, file stats

    def schema_changes(self) -> list[Change]:
        """The column changes the configuration makes to the main table(s), planned
        without a side effect; SchemaChangeRefused when one may not be made."""
        ...

    def evolve_schema(self) -> list[Change]:
        """Apply the planned changes, atomically per table; the changes applied."""
        ...

    def task_plan(
        self, write_uuid: str, drop_below: PartitionOffsets | None = None, faults: str | None = None
    ) -> TaskPlan:
        """The workers' plan for a write named ``write_uuid``; ``faults``: the faults the
        tasks act on, encoded by :func:`pipeline.commit.faults.format_faults`."""
        ...


class BatchWrite(Protocol):
    def write(self, write_id: str, drop_below: PartitionOffsets) -> StagedBatch: ...


@runtime_checkable
class WritesBatches(Protocol):
    """Tables that write each batch themselves, through an engine of their own."""

    def spark_needs(self) -> tuple[list[str], dict[str, str]]:
        """``(jars, conf)`` the driver's session must be built with."""
        ...

    def batch_writer(self, df: DataFrame) -> BatchWrite:
        """The writer of one batch's raw Kafka rows ``df`` (the coordinator's ``WriteFn``
        is its ``write``)."""
        ...


class TableFormat(Protocol):
    """A table format: one of the values the sink configuration's ``format`` takes."""

    name: str

    def open_tables(
        self, cfg: PipelineConfig, faults: FaultPoints | None = None
    ) -> PipelineTables: ...

    def writable_paths(self, cfg: PipelineConfig) -> list[tuple[str, str]]:
        """``(config key, location)`` of every directory the run writes tables to."""
        ...

    def table_sets(self, cfg: PipelineConfig) -> list[TableSet]:
        """One :class:`TableSet` per main table."""
        ...

    def status(self, tables: PipelineTables, pipeline_id: str) -> list[TableStatus]:
        """Per main table of ``tables`` (from :meth:`open_tables`): what ``ingest status``
        shows."""
        ...

    def local_sink(self, workdir: Path) -> dict[str, Any]:
        """``sink`` settings besides the format and the Iceberg catalog that a fresh
        pipeline writing under ``workdir`` needs (camelCase, as in the YAML)."""
        ...
