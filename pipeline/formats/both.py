"""The ``both`` table format: one query, one instant, an Iceberg table and a Hudi table.

The two main tables act as one ``TableCommitter`` for the coordinator:

* Workers write every decoded row twice (Iceberg data files and Hudi base files) in the
  same task; descriptors are tagged ``I``/``H`` so one staged-file list covers both. The
  tags stay because a descriptor is opaque bytes only its own format can parse (a
  serialized Iceberg ``DataFile``, a Hudi write stat): the list must be split before
  either side reads it. Paths (``file_size``, ``delete_files``) carry no tag: each goes
  to the committer that :meth:`owns <HudiCommitter.owns>` it.
* The instant is minted and journaled by the Hudi side's timeline (it must also be above
  the Hudi table's own timeline); Iceberg keeps no pending state of its own.
* Commit = Iceberg commit, then Hudi commit, both idempotent per batch identity and both
  fenced by the writer epoch. A crash between the two leaves the batch *partially*
  committed: ``any_committed`` tells recovery to finish it (roll forward), never to roll
  it back (that would delete files the Iceberg table references).
* Dead letters go to the Iceberg dead-letter table only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipeline.columns.evolution import Change
from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.faults import FaultPoint, FaultPoints
from pipeline.commit.instant import BatchIdentity
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.maintenance import TableMaintenance
from pipeline.commit.offsets import PartitionOffsets
from pipeline.config import PipelineConfig
from pipeline.errors import ConfigError
from pipeline.formats.base import PipelineTables, TableSet, TableStatus
from pipeline.formats.hudi.format import HudiFormat
from pipeline.formats.hudi.pipeline_tables import HudiTables
from pipeline.formats.hudi.status import hudi_table_status
from pipeline.formats.hudi.writer import write_base_files
from pipeline.formats.iceberg.format import IcebergFormat
from pipeline.formats.iceberg.pipeline_tables import IcebergCommitter, IcebergTables
from pipeline.formats.iceberg.status import iceberg_table_status
from pipeline.formats.iceberg.writer import write_data_files
from pipeline.spark.writer import TaskPlan

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from pipeline.formats.hudi.committer import HudiCommitter

ICEBERG, HUDI = b"I", b"H"


def write_both(ctx: tuple[Any, Any], batches: Iterable[pa.RecordBatch], seed: int) -> list[bytes]:
    """Worker: the same rows as Iceberg data files and as Hudi base files."""
    iceberg_ctx, hudi_ctx = ctx
    rows = list(batches)  # one flush's worth (TaskPlan.flush_bytes bounds it)
    out = [ICEBERG + d for d in write_data_files(iceberg_ctx, rows, seed)]
    out += [HUDI + d for d in write_base_files(hudi_ctx, rows, seed)]
    return out


class DualCommitter:
    """Iceberg + Hudi main tables committed as one (see module docstring)."""

    def __init__(self, iceberg: IcebergCommitter, hudi: HudiCommitter, faults: FaultPoints) -> None:
        self.iceberg = iceberg
        self.hudi = hudi
        self.faults = faults

    def _split(self, files: Iterable[bytes]) -> tuple[list[bytes], list[bytes]]:
        ice: list[bytes] = []
        hud: list[bytes] = []
        for f in files:
            (ice if f[:1] == ICEBERG else hud).append(f[1:])
        return ice, hud

    def _owner(self, path: str) -> IcebergCommitter | HudiCommitter:
        """The committer of the table holding ``path`` (Iceberg: any path outside the
        Hudi table; Iceberg files may live anywhere in the warehouse or object store)."""
        return self.hudi if self.hudi.owns(path) else self.iceberg

    def refresh(self) -> None:
        self.iceberg.refresh()
        self.hudi.refresh()

    def is_committed(self, batch: BatchIdentity, end: PartitionOffsets | None = None) -> bool:
        return self.iceberg.is_committed(batch, end) and self.hudi.is_committed(batch, end)

    def any_committed(self, batch: BatchIdentity, end: PartitionOffsets | None = None) -> bool:
        return self.iceberg.is_committed(batch, end) or self.hudi.is_committed(batch, end)

    def committed_offsets(self, pipeline_id: str) -> PartitionOffsets | None:
        # the tables commit in order (Iceberg first): Hudi's offsets are never ahead
        ice = self.iceberg.committed_offsets(pipeline_id)
        hud = self.hudi.committed_offsets(pipeline_id)
        if not ice or not hud:
            return hud or ice
        return PartitionOffsets({tp: min(off, hud.get(tp, off)) for tp, off in ice.items()})

    def last_commit_time(self, pipeline_id: str) -> float | None:
        """The newer of the two tables' last commit times of the pipeline."""
        times = [
            t
            for t in (
                self.iceberg.last_commit_time(pipeline_id),
                self.hudi.last_commit_time(pipeline_id),
            )
            if t is not None
        ]
        return max(times) if times else None

    def latest_epoch(self, pipeline_id: str) -> int | None:
        epochs = [
            e
            for e in (self.iceberg.latest_epoch(pipeline_id), self.hudi.latest_epoch(pipeline_id))
            if e is not None
        ]
        return max(epochs) if epochs else None

    def commit(self, files: list[bytes], checkpoint: CommitCheckpoint) -> None:
        ice, hud = self._split(files)
        self.iceberg.commit(ice, checkpoint)
        self.faults.hit(FaultPoint.BETWEEN_TABLE_COMMITS, checkpoint.batch_id)
        self.hudi.commit(hud, checkpoint)

    def fence(self, pipeline_id: str, epoch: int, *, create: bool = False) -> None:
        self.iceberg.fence(pipeline_id, epoch, create=create)
        self.hudi.fence(pipeline_id, epoch, create=create)

    def describe(self, descriptor: bytes) -> tuple[str, int, int]:
        tag, body = descriptor[:1], descriptor[1:]
        return (self.iceberg if tag == ICEBERG else self.hudi).describe(body)

    def file_size(self, path: str) -> int | None:
        return self._owner(path).file_size(path)

    def delete_files(self, paths: Iterable[str]) -> list[str]:
        paths = list(paths)
        hud = [p for p in paths if self._owner(p) is self.hudi]
        ice = [p for p in paths if self._owner(p) is self.iceberg]
        return self.iceberg.delete_files(ice) + list(self.hudi.delete_files(hud))

    def orphan_files(self, write_id: str) -> list[str]:
        return self.iceberg.orphan_files(write_id) + list(self.hudi.orphan_files(write_id))

    def begin(self, instant: str) -> None:
        self.iceberg.begin(instant)
        self.hudi.begin(instant)

    def abort(self, instant: str) -> None:
        self.iceberg.abort(instant)
        self.hudi.abort(instant)

    def table(self) -> Table | None:
        return self.iceberg.table()


@dataclass
class DualTables:
    main: DualCommitter
    dead_letter: IcebergCommitter | None
    iceberg: IcebergTables
    hudi: HudiTables
    data_ddl: str

    @classmethod
    def from_config(cls, cfg: PipelineConfig, faults: FaultPoints) -> DualTables:
        # at-least-once: no journal; the Hudi writer mints a fresh instant per batch
        iceberg = IcebergTables.from_config(cfg)
        # sink.partitionBy partitions the Iceberg table only; dead letters live in the
        # Iceberg dead-letter table
        hudi = HudiTables.open(cfg, own_dead_letters=False)
        return cls(
            main=DualCommitter(iceberg.main, hudi.main, faults),
            dead_letter=iceberg.dead_letter,
            iceberg=iceberg,
            hudi=hudi,
            data_ddl=iceberg.data_ddl,
        )

    def maintenance(self) -> list[TableMaintenance]:
        return [*self.iceberg.maintenance(), *self.hudi.maintenance()]

    def schema_changes(self) -> list[Change]:
        """Both tables' plans (each refuses what its readers cannot follow; Hudi's rules
        are the narrower); the Iceberg table's changes, which Hudi's next commit repeats."""
        self.hudi.schema_changes()
        return self.iceberg.schema_changes()

    def evolve_schema(self) -> list[Change]:
        """The Iceberg table's one schema commit; the Hudi table's next commit carries the
        new schema. A crash in between is finished by the restart (both are re-planned)."""
        self.hudi.schema_changes()
        return self.iceberg.evolve_schema()

    def timeline(self, pipeline_id: str) -> InstantTimeline:
        return self.hudi.timeline(pipeline_id)  # mints above the Hudi table's timeline

    def journal_pipelines(self) -> list[str]:
        return self.hudi.journal_pipelines()  # the journals live in the Hudi table

    def task_plan(
        self, write_uuid: str, drop_below: PartitionOffsets | None = None, faults: str | None = None
    ) -> TaskPlan:
        ice = self.iceberg.task_plan(write_uuid, drop_below, faults)
        hudi_ctx = self.hudi.main.write_context(write_uuid, self.hudi.target_file_size_bytes)
        return TaskPlan(
            write_files=write_both,
            main_ctx=(ice.main_ctx, hudi_ctx),
            main_columns=ice.main_columns,
            dead_letter_ctx=ice.dead_letter_ctx,
            dead_letter_columns=ice.dead_letter_columns,
            flush_bytes=ice.flush_bytes,
            drop_below=ice.drop_below,
            faults=faults,
            dead_letter_write_files=write_data_files,
        )


class DualFormat:
    """The ``both`` :class:`~pipeline.formats.base.TableFormat`: an Iceberg and a Hudi main
    table, one Iceberg dead-letter table."""

    name = "both"

    def open_tables(self, cfg: PipelineConfig, faults: FaultPoints | None = None) -> DualTables:
        if cfg.sink.hudi is not None and cfg.sink.hudi.writer == "spark":
            raise ConfigError(
                "sink.format both writes its Hudi table with the native writer; "
                "sink.hudi.writer: spark is for sink.format hudi"
            )
        return DualTables.from_config(cfg, faults if faults is not None else FaultPoints())

    def writable_paths(self, cfg: PipelineConfig) -> list[tuple[str, str]]:
        return IcebergFormat().writable_paths(cfg) + HudiFormat().writable_paths(cfg)

    def table_sets(self, cfg: PipelineConfig) -> list[TableSet]:
        iceberg = IcebergFormat().table_sets(cfg)[0]
        hudi = HudiFormat().table_sets(cfg)[0]
        return [iceberg, TableSet(hudi.main, iceberg.dead_letter)]

    def status(self, tables: PipelineTables, pipeline_id: str) -> list[TableStatus]:
        assert isinstance(tables, DualTables)  # open_tables' own
        return [
            iceberg_table_status(tables.iceberg.main, pipeline_id),
            hudi_table_status(tables.hudi.main, pipeline_id),
        ]

    def local_sink(self, workdir: Path) -> dict[str, Any]:
        return HudiFormat().local_sink(workdir)
