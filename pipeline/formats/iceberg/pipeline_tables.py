"""The pipeline's Iceberg tables (main + dead-letter) as the coordinator's commit targets:
:class:`IcebergCommitter` is the ``TableCommitter`` over one :class:`IcebergTable`;
:class:`IcebergTables` opens both from the config and plans the workers' tasks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from pipeline.columns import (
    data_columns,
    dead_letter_columns,
    spark_ddl,
    table_columns,
)
from pipeline.columns.evolution import Change
from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.instant import BatchIdentity
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.maintenance import TableMaintenance
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import MAIN
from pipeline.config import PipelineConfig
from pipeline.formats.iceberg.catalog import load_catalog
from pipeline.formats.iceberg.catalog_table import IcebergTable
from pipeline.formats.iceberg.compaction import IcebergMaintenance
from pipeline.formats.iceberg.data_file_codec import deserialize_data_file
from pipeline.formats.iceberg.schema import build_partition_spec, iceberg_schema
from pipeline.formats.iceberg.writer import write_data_files
from pipeline.formats.routes import RoutedTable, check_route_field, main_tables, table_routes
from pipeline.spark.routes import Router
from pipeline.spark.writer import TaskPlan
from pipeline.storage.fs import filesystem_for
from pipeline.storage.journal_stores import journal_store_for


class IcebergCommitter:
    """Adapts an ``IcebergTable`` to the coordinator's ``TableCommitter`` protocol."""

    def __init__(self, table: IcebergTable, properties: Mapping[str, str] | None = None) -> None:
        self.iceberg = table
        # FileIO-style properties (s3.endpoint, s3.access-key-id, ...) for file operations
        self.properties: dict[str, str] = dict(
            properties if properties is not None else getattr(table.catalog, "properties", {})
        )

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return filesystem_for(self.iceberg.table_location(), self.properties)

    def refresh(self) -> None:
        self.iceberg.refresh()

    def latest_epoch(self, pipeline_id: str) -> int | None:
        cp = self.iceberg.latest_checkpoint(pipeline_id)
        return cp.epoch if cp is not None else None

    def fence(self, pipeline_id: str, epoch: int, *, create: bool = False) -> None:
        self.iceberg.fence(pipeline_id, epoch, create=create)

    def describe(self, descriptor: bytes) -> tuple[str, int, int]:
        df = deserialize_data_file(descriptor)
        return df.file_path, int(df.file_size_in_bytes), int(df.record_count)

    def file_size(self, path: str) -> int | None:
        fs, local = filesystem_for(path, self.properties)
        info = fs.get_file_info(local)
        return int(info.size) if info.type == pafs.FileType.File and info.size is not None else None

    def delete_files(self, paths: Iterable[str]) -> list[str]:
        deleted = []
        for path in paths:
            fs, local = filesystem_for(path, self.properties)
            try:
                fs.delete_file(local)
                deleted.append(path)
            except FileNotFoundError:
                pass
        return deleted

    def orphan_files(self, write_id: str) -> list[str]:
        """Data files whose name carries ``-<write_id>-`` (our writer's naming)."""
        fs, root = self._fs()
        selector = pafs.FileSelector(f"{root}/data", recursive=True, allow_not_found=True)
        scheme = self.iceberg.table_location().split("://", 1)[0] + "://"
        marker = f"-{write_id}-"
        return [
            (scheme + i.path if scheme == "file://" else f"{scheme}{i.path}")
            for i in fs.get_file_info(selector)
            if i.type == pafs.FileType.File and marker in i.base_name
        ]

    def begin(self, instant: str) -> None:
        """Iceberg keeps no pending state of its own: unreferenced files are invisible."""

    def abort(self, instant: str) -> None:
        """Nothing beyond deleting the staged files (done by the coordinator)."""

    def journal_root(self, pipeline_id: str) -> str:
        return f"{self.iceberg.table_location()}/_ingest/{pipeline_id}"

    def is_committed(self, batch: BatchIdentity, end: PartitionOffsets | None = None) -> bool:
        return self.iceberg.is_committed(batch.pipeline_id, batch.incarnation, batch.batch_id, end)

    def committed_offsets(self, pipeline_id: str) -> PartitionOffsets | None:
        cp = self.iceberg.latest_checkpoint(pipeline_id)
        if cp is None:
            return None
        return PartitionOffsets(
            {TopicPartition(t, p): off for (t, p), off in cp.committed_offsets.items()}
        )

    def last_commit_time(self, pipeline_id: str) -> float | None:
        """Unix time of the newest snapshot carrying this pipeline's checkpoint (fencing
        snapshots excluded), or None."""
        from pipeline.commit.checkpoint import FENCE_KEY, PIPELINE_ID_KEY

        table = self.iceberg.load()
        if table is None:
            return None
        for snapshot in self.iceberg._ancestry(table):
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            if summary.get(PIPELINE_ID_KEY) == pipeline_id and FENCE_KEY not in summary:
                return float(snapshot.timestamp_ms) / 1000.0
        return None

    def commit(self, files: list[bytes], checkpoint: CommitCheckpoint) -> None:
        self.iceberg.commit(files, checkpoint)

    def table(self) -> Table | None:
        return self.iceberg.load()


@dataclass
class IcebergTables:
    main: IcebergCommitter
    dead_letter: IcebergCommitter | None
    main_schema: Schema
    data_ddl: str  # Spark DDL of the decoded (non-Kafka) columns
    flush_bytes: int
    # a routed set (sink.routes): every main table but ``main``, by set name, in set order
    more: list[tuple[str, IcebergCommitter]] = field(default_factory=list)
    router: Router | None = None
    commit_threads: int = 8

    @classmethod
    def from_config(cls, cfg: PipelineConfig) -> IcebergTables:
        sink = cfg.sink
        catalog = load_catalog(sink.catalog.name, sink.catalog.pyiceberg_properties())
        raw = cfg.decode.raw
        fields = cfg.decode.field_specs()
        columns = table_columns(fields, raw=raw)
        schema = iceberg_schema(columns)
        patience = cfg.commit.catalog_retry_seconds
        routes = table_routes(cfg)
        if routes is not None:
            check_route_field(routes, [c.name for c in columns])

        def main_table(t: RoutedTable) -> IcebergCommitter:
            spec = (
                build_partition_spec(schema, list(t.partition_by))
                if t.partition_by
                else UNPARTITIONED_PARTITION_SPEC
            )
            props = {
                "write.target-file-size-bytes": str(t.target_file_size_bytes),
                **t.table_properties,
            }
            table = IcebergTable(
                catalog,
                t.identifier,
                schema,
                spec,
                props,
                catalog_retry_s=patience,
                max_snapshots=sink.max_snapshots,
                columns=columns,
            )
            return IcebergCommitter(table)

        mains = [(t.name, main_table(t)) for t in main_tables(cfg, routes)]
        dead = IcebergTable(
            catalog,
            sink.dead_letter_identifier,
            iceberg_schema(dead_letter_columns()),
            UNPARTITIONED_PARTITION_SPEC,
            sink.table_properties,
            catalog_retry_s=patience,
            max_snapshots=sink.max_snapshots,
        )
        return cls(
            main=mains[0][1],
            dead_letter=IcebergCommitter(dead),
            main_schema=schema,
            data_ddl=spark_ddl(data_columns(columns)) if not raw else "",
            flush_bytes=min(sink.target_file_size_bytes, 256 * 1024 * 1024),
            more=mains[1:],
            router=routes.router if routes is not None else None,
            commit_threads=cfg.commit.table_commit_threads,
        )

    def mains(self) -> list[tuple[str, IcebergCommitter]]:
        """``(set name, committer)`` of every main table, in set order."""
        return [(MAIN, self.main), *self.more]

    def schema_changes(self) -> list[Change]:
        """The main tables' planned column changes (SchemaChangeRefused: none may apply);
        the tables of a routed set share their columns, so the first one's."""
        changes = [c.iceberg.schema_changes() for _, c in self.mains()]
        return changes[0]

    def evolve_schema(self) -> list[Change]:
        """Apply them, one catalog commit per table; the changes applied. A crash in
        between is finished by the restart (every table is re-planned)."""
        changes = [c.iceberg.evolve_schema() for _, c in self.mains()]
        return changes[0]

    def commit_tables(self) -> CommitTables:
        return CommitTables(
            self.main, self.dead_letter, more_mains=self.more, commit_threads=self.commit_threads
        )

    def maintenance(self) -> list[TableMaintenance]:
        """Compaction and orphan cleanup of the main tables, then the dead-letter table."""
        committers = [c for _, c in self.mains()]
        committers += [self.dead_letter] if self.dead_letter else []
        return [IcebergMaintenance(c.iceberg, c.properties) for c in committers]

    def timeline(self, pipeline_id: str) -> InstantTimeline:
        """The instant journal beside the main table, in ``<table>/_ingest/``
        (docs/design.md invariant 3)."""
        root = self.main.journal_root(pipeline_id)
        return InstantTimeline(journal_store_for(root, self.main.properties))

    def journal_pipelines(self) -> list[str]:
        """Pipelines with a journal in ``<table>/_ingest/`` (directories: listed through
        pyarrow, which also shows S3 prefixes as directories)."""
        root = self.main.journal_root("").rstrip("/")
        fs, base = filesystem_for(root, self.main.properties)
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=False, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def task_plan(
        self, write_uuid: str, drop_below: PartitionOffsets | None = None, faults: str | None = None
    ) -> TaskPlan:
        dead: Any = self.dead_letter
        routed = tuple((name, c.iceberg.write_context(write_uuid)) for name, c in self.mains())
        return TaskPlan(
            drop_below={(tp[0], tp[1]): off for tp, off in (drop_below or {}).items()},
            faults=faults,
            write_files=write_data_files,
            main_ctx=self.main.iceberg.write_context(write_uuid),
            main_columns=tuple(f.name for f in self.main_schema.fields),
            dead_letter_ctx=dead.iceberg.write_context(write_uuid) if dead else None,
            dead_letter_columns=tuple(c.name for c in dead_letter_columns()),
            flush_bytes=self.flush_bytes,
            router=self.router,
            routed=routed if self.router is not None else (),
        )
