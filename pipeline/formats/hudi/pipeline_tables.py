"""The pipeline's Hudi tables (main + dead-letter) as coordinator commit targets.

Same surface as :class:`pipeline.formats.iceberg.pipeline_tables.IcebergTables`:
``from_config``, ``main``,
``dead_letter``, ``data_ddl``, ``timeline(pipeline_id)``, ``task_plan(...)``,
``maintenance()`` (:class:`~pipeline.formats.hudi.compaction.HudiMaintenance` per table).

The dead-letter table is a second Hudi table (unpartitioned, keyed by the Kafka
coordinates) at ``sink.hudi.deadLetterBasePath`` (default ``<basePath>_dead_letter``): a
Hudi user needs no Iceberg catalog, both tables share the storage, lock and fencing
mechanism, and the same instant time names a batch in both timelines.

Each table is self-contained (its own lock, fence records, commit checks), and the
worker-side writer takes only a :class:`~pipeline.formats.hudi.writer.HudiWriteContext`, so a
coordinator feeding several main tables can hold a ``HudiCommitter`` next to an
``IcebergCommitter`` and give each its own file writer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pipeline.columns import (
    data_columns,
    dead_letter_columns,
    spark_ddl,
    table_columns,
)
from pipeline.columns.evolution import Change
from pipeline.commit.maintenance import TableMaintenance
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import MAIN
from pipeline.config import PipelineConfig
from pipeline.errors import ConfigError
from pipeline.formats.hudi.committer import HudiCommitter
from pipeline.formats.hudi.compaction import HudiMaintenance
from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.journal import HudiInstantTimeline, HudiJournalStore
from pipeline.formats.hudi.layout import TablePaths, parse_write_id
from pipeline.formats.hudi.schema import KAFKA_KEY_FIELDS, HudiTableSpec
from pipeline.formats.hudi.storage import is_object_store, table_base
from pipeline.formats.hudi.writer import write_base_files
from pipeline.formats.routes import (
    RoutedTable,
    TableRoutes,
    check_route_field,
    main_tables,
    table_routes,
)
from pipeline.spark.routes import Router
from pipeline.spark.writer import TaskPlan
from pipeline.storage.s3_settings import S3Settings

__all__ = ["HudiTables"]


def _split_identifier(identifier: str) -> tuple[str, str]:
    database, _, name = identifier.rpartition(".")
    return database.split(".")[-1] or "default", name


def routed_bases(cfg: PipelineConfig, routes: TableRoutes | None) -> list[tuple[RoutedTable, str]]:
    """Each main table and its base path: ``sink.hudi.basePath`` for ``sink.table``, a
    route's own ``basePath``, else ``<the directory of sink.hudi.basePath>/<table name>``.
    ConfigError when two tables would share one."""
    hudi = cfg.sink.hudi
    assert hudi is not None
    main = table_base(hudi.base_path)
    parent = main.rstrip("/").rsplit("/", 1)[0]
    out: list[tuple[RoutedTable, str]] = []
    for table in main_tables(cfg, routes):
        if table.name == MAIN:
            base = main
        elif table.base_path is not None:
            base = table_base(table.base_path, f"sink.routes basePath of {table.identifier}")
        else:
            base = f"{parent}/{table.identifier.rsplit('.', 1)[-1]}"
        out.append((table, base))
    seen: dict[str, str] = {}
    for table, base in out:
        if base in seen:
            raise ConfigError(
                f"sink.routes: tables {seen[base]} and {table.identifier} would share the Hudi "
                f"base path {base}; give one of them its own basePath"
            )
        seen[base] = table.identifier
    return out


@dataclass
class HudiTables:
    main: HudiCommitter
    dead_letter: HudiCommitter | None
    data_ddl: str  # Spark DDL of the decoded (non-Kafka) columns
    flush_bytes: int
    target_file_size_bytes: int
    # a routed set (sink.routes): every main table but ``main``, by set name, in set order
    more: list[tuple[str, HudiCommitter]] = field(default_factory=list)
    router: Router | None = None
    file_sizes: dict[str, int] = field(default_factory=dict)  # by set name (routed)
    commit_threads: int = 8

    @classmethod
    def from_config(cls, cfg: PipelineConfig) -> HudiTables:
        if cfg.sink.partition_by:
            raise ConfigError(
                "sink.partitionBy is for Iceberg tables; a Hudi table is partitioned by "
                "columns: use sink.hudi.partitionFields"
            )
        return cls.open(cfg)

    @classmethod
    def open(cls, cfg: PipelineConfig, *, own_dead_letters: bool = True) -> HudiTables:
        """The tables of ``cfg.sink.hudi`` (and of ``sink.routes``); ``sink.partitionBy``
        (Iceberg partitioning) is not looked at. ``own_dead_letters`` False: the
        pipeline's dead letters go to another table (the ``both`` format: the Iceberg
        dead-letter table), so the dead-letter table here is not committed with the main
        table."""
        sink = cfg.sink
        hudi = sink.hudi
        if hudi is None:
            raise ConfigError("sink.hudi.basePath is required for a Hudi table")
        raw = cfg.decode.raw
        fields = cfg.decode.field_specs()
        columns = table_columns(fields, raw=raw)
        routes = table_routes(cfg)
        if routes is not None:
            check_route_field(routes, [c.name for c in columns])
        mains: list[tuple[str, HudiCommitter]] = []
        for table, base in routed_bases(cfg, routes):
            s3 = S3Settings.from_properties(hudi.properties) if is_object_store(base) else None
            database, name = _split_identifier(table.identifier)
            keys = table.record_key_fields or hudi.record_key_fields
            parts = table.partition_fields if table.partition_fields is not None else None
            spec = HudiTableSpec.build(
                base,
                database,
                name,
                columns,
                list(keys),
                list(parts if parts is not None else hudi.partition_fields),
                s3,
            )
            mains.append(
                (table.name, HudiCommitter(HudiTable(spec), max_commits=sink.max_snapshots))
            )
        base = mains[0][1].hudi.base
        dl_base = table_base(
            hudi.dead_letter_base_path or base.rstrip("/") + "_dead_letter",
            "sink.hudi.deadLetterBasePath",
        )
        if dl_base in {c.hudi.base for _, c in mains}:
            raise ConfigError(
                "sink.hudi.deadLetterBasePath must differ from the main tables' base paths"
            )
        dl_database, dl_name = _split_identifier(sink.dead_letter_identifier)
        dl_s3 = S3Settings.from_properties(hudi.properties) if is_object_store(dl_base) else None
        dead = HudiTableSpec.build(
            dl_base, dl_database, dl_name, dead_letter_columns(), KAFKA_KEY_FIELDS, (), dl_s3
        )
        main_committer = mains[0][1]
        dead_committer = HudiCommitter(HudiTable(dead), max_commits=sink.max_snapshots)
        # the coordinator commits dead letters first, then the main table: a main commit
        # of T ends the dead-letter table's T when it had no dead letters
        if own_dead_letters:
            main_committer.followers.append(dead_committer)
        return cls(
            main=main_committer,
            dead_letter=dead_committer,
            data_ddl=spark_ddl(data_columns(columns)) if not raw else "",
            flush_bytes=min(sink.target_file_size_bytes, 256 * 1024 * 1024),
            target_file_size_bytes=sink.target_file_size_bytes,
            more=mains[1:],
            router=routes.router if routes is not None else None,
            file_sizes={t.name: t.target_file_size_bytes for t in main_tables(cfg, routes)},
            commit_threads=cfg.commit.table_commit_threads,
        )

    def mains(self) -> list[tuple[str, HudiCommitter]]:
        """``(set name, committer)`` of every main table, in set order."""
        return [(MAIN, self.main), *self.more]

    def schema_changes(self) -> list[Change]:
        """The main tables' planned column changes (SchemaChangeRefused: none may apply);
        the tables of a routed set share their columns, so the first one's."""
        changes = [c.hudi.schema_changes() for _, c in self.mains()]  # each may refuse
        return changes[0]

    def evolve_schema(self) -> list[Change]:
        """Nothing to write now: the next commit carries the new schema (the table's
        schema is the newest commit's), so the planned changes are what it applies."""
        return self.schema_changes()

    def commit_tables(self) -> CommitTables:
        return CommitTables(
            self.main, self.dead_letter, more_mains=self.more, commit_threads=self.commit_threads
        )

    def maintenance(self) -> list[TableMaintenance]:
        """Compaction and orphan cleanup of the main tables, then the dead-letter table."""
        committers = [c for _, c in self.mains()]
        committers += [self.dead_letter] if self.dead_letter else []
        return [HudiMaintenance(c) for c in committers]

    def tables(self) -> list[HudiTable]:
        out = [c.hudi for _, c in self.mains()]
        if self.dead_letter is not None:
            out.append(self.dead_letter.hudi)
        return out

    def journal_pipelines(self) -> list[str]:
        """Pipelines with a journal in the main table's ``.hoodie/.ingest/journal/``."""
        table = self.main.hudi
        names = table.files.listdir(TablePaths.own(table.paths.current_meta(), "journal"))
        return sorted(n for n in names or () if not n.startswith("."))

    def timeline(self, pipeline_id: str) -> HudiInstantTimeline:
        """The instant journal inside the main table's ``.hoodie/.ingest/journal/``."""
        table = self.main.hudi
        store = HudiJournalStore(table, pipeline_id)
        paths = table.paths
        if (
            paths.staging != paths.meta
            and paths.exists()
            and os.path.isdir(table.files.uri(paths.staging))
            and store.has_entries(paths.staging)
        ):
            raise ConfigError(
                f"{table.files.uri(paths.staging)} holds instant-journal entries of pipeline "
                f"{pipeline_id!r} but the table {table.files.uri(paths.meta)} was created by "
                "another writer meanwhile; "
                "inspect both and remove the staging directory"
            )
        return HudiInstantTimeline(store, self.tables())

    def task_plan(
        self, write_uuid: str, drop_below: PartitionOffsets | None = None, faults: str | None = None
    ) -> TaskPlan:
        main_ctx = self.main.write_context(write_uuid, self.target_file_size_bytes)
        try:
            parse_write_id(write_uuid)
            dead_id = write_uuid
        except ValueError:  # at-least-once: both tables on the main table's fresh instant
            dead_id = main_ctx.instant
        dead = self.dead_letter
        routed = tuple(
            (
                name,
                c.write_context(write_uuid, self.file_sizes.get(name, self.target_file_size_bytes)),
            )
            for name, c in self.mains()
        )
        return TaskPlan(
            drop_below={(tp[0], tp[1]): off for tp, off in (drop_below or {}).items()},
            faults=faults,
            router=self.router,
            routed=routed if self.router is not None else (),
            write_files=write_base_files,
            main_ctx=main_ctx,
            main_columns=tuple(main_ctx.spec.arrow_schema.names),
            dead_letter_ctx=(
                dead.write_context(dead_id, self.target_file_size_bytes) if dead else None
            ),
            dead_letter_columns=tuple(dead.spec.arrow_schema.names) if dead else (),
            flush_bytes=self.flush_bytes,
        )
