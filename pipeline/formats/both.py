"""The ``both`` table format: one query, one instant, an Iceberg table and a Hudi table.

The two main tables are a table set of two (:class:`~pipeline.commit.table_set.CommitTables`,
:meth:`DualTables.commit_tables`): the Iceberg dead letters, the Iceberg main table
(``main``), then the Hudi one (``hudi``).

* Workers write every decoded row twice (Iceberg data files and Hudi base files) in the
  same task and tag each descriptor ``I``/``H``: a descriptor is opaque bytes only its
  own format can parse (a serialized Iceberg ``DataFile``, a Hudi write stat), and one
  task returns both. The driver routes them (:func:`route_both`) before the precommit,
  so the journal lists each table's files under its own name, untagged. An INFLIGHT an
  earlier release journaled lists both under ``main``, tagged: recovery routes them the
  same way (:meth:`CommitTables.upgraded <pipeline.commit.table_set.CommitTables.upgraded>`).
* The instant is minted and journaled by the Hudi side's timeline (it must also be above
  the Hudi table's own timeline); Iceberg keeps no pending state of its own.
* Commit = Iceberg commit, then Hudi commit, both idempotent per batch identity and both
  fenced by the writer epoch. A crash between the two leaves the batch *partly*
  committed: the set's roll-forward rule finishes it, never rolls it back (that would
  delete files the Iceberg table references).
* Dead letters go to the Iceberg dead-letter table only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.columns.evolution import Change
from pipeline.commit.faults import FaultPoints
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.maintenance import TableMaintenance
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import MAIN
from pipeline.config import PipelineConfig
from pipeline.errors import ConfigError
from pipeline.formats.base import PipelineTables, TableSet, TableStatus
from pipeline.formats.hudi.format import HudiFormat
from pipeline.formats.hudi.pipeline_tables import HudiTables
from pipeline.formats.hudi.status import hudi_table_status
from pipeline.formats.hudi.writer import write_base_files
from pipeline.formats.iceberg.format import IcebergFormat
from pipeline.formats.iceberg.pipeline_tables import IcebergTables
from pipeline.formats.iceberg.status import iceberg_table_status
from pipeline.formats.iceberg.writer import write_data_files
from pipeline.spark.writer import TaskPlan

#: The name of the Hudi main table in the set (the Iceberg one is ``main``).
HUDI_MAIN = "hudi"

# Worker -> driver only: which table a main file descriptor belongs to. Untagged
# descriptors (an Iceberg one starts with its codec's magic, a Hudi one with ``{``) are
# already routed.
_ICEBERG_TAG, _HUDI_TAG = b"I", b"H"


def write_both(ctx: tuple[Any, Any], batches: Iterable[pa.RecordBatch], seed: int) -> list[bytes]:
    """Worker: the same rows as Iceberg data files and as Hudi base files."""
    iceberg_ctx, hudi_ctx = ctx
    rows = list(batches)  # one flush's worth (TaskPlan.flush_bytes bounds it)
    out = [_ICEBERG_TAG + d for d in write_data_files(iceberg_ctx, rows, seed)]
    out += [_HUDI_TAG + d for d in write_base_files(hudi_ctx, rows, seed)]
    return out


def route_both(descriptor: bytes) -> tuple[str, bytes]:
    """The set's :class:`~pipeline.commit.table_set.StagedRoute`: a tagged descriptor
    to its table; an untagged one is an Iceberg descriptor already routed to ``main``."""
    tag = descriptor[:1]
    if tag == _ICEBERG_TAG:
        return MAIN, descriptor[1:]
    if tag == _HUDI_TAG:
        return HUDI_MAIN, descriptor[1:]
    return MAIN, descriptor


@dataclass
class DualTables:
    iceberg: IcebergTables
    hudi: HudiTables
    data_ddl: str
    router: None = None  # both takes no routes

    @classmethod
    def from_config(cls, cfg: PipelineConfig) -> DualTables:
        # at-least-once: no journal; the Hudi writer mints a fresh instant per batch
        iceberg = IcebergTables.from_config(cfg)
        # sink.partitionBy partitions the Iceberg table only; dead letters live in the
        # Iceberg dead-letter table
        hudi = HudiTables.open(cfg, own_dead_letters=False)
        return cls(iceberg=iceberg, hudi=hudi, data_ddl=iceberg.data_ddl)

    def commit_tables(self) -> CommitTables:
        """The Iceberg dead letters, the Iceberg main table, then the Hudi one."""
        return CommitTables(
            self.iceberg.main,
            self.iceberg.dead_letter,
            more_mains=[(HUDI_MAIN, self.hudi.main)],
            route=route_both,
            # one after the other: the Hudi table's commit is the one that may fail on its
            # own timeline, and then the Iceberg one stands alone until recovery
            commit_threads=1,
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
        return DualTables.from_config(cfg)

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
