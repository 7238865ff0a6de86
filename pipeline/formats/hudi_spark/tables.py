"""The pipeline's Hudi tables when Hudi's own Spark writer writes them
(``sink.hudi.writer: spark``): main and dead-letter :class:`HudiSparkCommitter`s, the
instant journal, and the batch writer (:mod:`pipeline.formats.hudi_spark.batch`).

Where things are (the native writer's places, so the two writers' records meet):

* the journal: ``<basePath>/.hoodie/.ingest/journal/<pipeline id>/`` (Hudi ignores it);
* the fence records: ``<basePath>/.hoodie/.ingest/fence/<pipeline id>`` per table;
* instant times: minted by the journal in UTC, above every instant on both tables'
  timelines (Hudi's own rollbacks and cleans included), and the tables are created with
  ``hoodie.table.timeline.timezone`` UTC so Hudi's own instants sort with ours.

Table services are Hudi's own, with Hudi's defaults (cleaning and archival run inline
after commits); the pipeline's compaction and orphan cleanup are the native writer's and
do not run here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.columns import data_columns, dead_letter_columns, spark_ddl, table_columns
from pipeline.columns.evolution import Change
from pipeline.commit.instant import next_instant_time
from pipeline.commit.journal import InstantTimeline, JournalStore
from pipeline.commit.maintenance import TableMaintenance
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import MAIN
from pipeline.config import PipelineConfig
from pipeline.errors import ConfigError, PipelineError
from pipeline.formats.hudi.layout import META_DIR, PROPERTIES, TablePaths, parse_properties
from pipeline.formats.hudi.pipeline_tables import routed_bases
from pipeline.formats.hudi.schema import KAFKA_KEY_FIELDS
from pipeline.formats.hudi.storage import (
    TableFiles,
    is_object_store,
    open_location,
    reader_options,
    table_base,
)
from pipeline.formats.hudi_spark.batch import HudiSparkBatchWriter
from pipeline.formats.hudi_spark.client import (
    SESSION_SETTINGS,
    HudiSparkClient,
    check_line,
    jars,
    table_options,
)
from pipeline.formats.hudi_spark.committer import HudiSparkCommitter
from pipeline.formats.routes import check_route_field, table_routes
from pipeline.spark.routes import Router
from pipeline.spark.writer import TaskPlan
from pipeline.storage.journal_stores import journal_store_for
from pipeline.storage.s3_settings import S3Settings

__all__ = ["HudiSparkTables", "SparkTimeline"]


def check_table_version(files: TableFiles) -> None:
    """Refuse, in one line, a table the native writer made (version 6): Hudi's writer would
    upgrade it in place to version 9, which the native writer then cannot write."""
    data = files.read(f"{META_DIR}/{PROPERTIES}")
    if data is None:
        return
    version = parse_properties(data.decode("utf-8")).get("hoodie.table.version", "")
    if version.isdigit() and int(version) < 8:
        raise ConfigError(
            f"Hudi table at {files.uri()} was written by the native writer (table version "
            f"{version}); Hudi's writer would upgrade it to version 9, which the native writer "
            "cannot write back: keep sink.hudi.writer: native for it, or write a new table"
        )


def _latest_on_timeline(files: TableFiles) -> str | None:
    """The newest instant time named in the table's ``.hoodie/timeline`` (any action, any
    state; a completed instant's file starts with its requested time)."""
    names = files.listdir(f"{META_DIR}/timeline") or []
    times = [n[:17] for n in names if n[:17].isdigit() and len(n) > 17]
    return max(times, default=None)


class SparkTimeline(InstantTimeline):
    """The journal's timeline, minting above the Hudi tables' timelines too."""

    def __init__(self, store: JournalStore, tables: Sequence[TableFiles]) -> None:
        super().__init__(store)
        self.tables = list(tables)

    def mint(self) -> str:
        known = [t for t in (self.latest_time(), *map(_latest_on_timeline, self.tables)) if t]
        return next_instant_time(max(known) if known else None)


def _session() -> Any:
    """The driver's session (built by the pipeline with :meth:`HudiSparkTables.spark_needs`)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()


@dataclass
class HudiSparkTables:
    main: HudiSparkCommitter
    dead_letter: HudiSparkCommitter
    data_ddl: str  # Spark DDL of the decoded (non-Kafka) columns
    main_columns: tuple[str, ...]
    dead_letter_columns: tuple[str, ...]
    operation: str
    cfg: PipelineConfig
    properties: dict[str, str]  # sink.hudi.properties (s3.* for tables on S3)
    s3: S3Settings | None  # the store, when any table is on S3
    # a routed set (sink.routes): every main table but ``main``, by set name, in set order
    more: list[tuple[str, HudiSparkCommitter]] = field(default_factory=list)
    router: Router | None = None

    @classmethod
    def from_config(
        cls, cfg: PipelineConfig, spark: Callable[[], Any] = _session
    ) -> HudiSparkTables:
        from pipeline.source.spark_line import spark_version

        check_line(spark_version())
        hudi = cfg.sink.hudi
        if hudi is None:
            raise ConfigError("sink.hudi.basePath is required for a Hudi table")
        if cfg.sink.partition_by:
            raise ConfigError(
                "sink.partitionBy is for Iceberg tables; a Hudi table is partitioned by "
                "columns: use sink.hudi.partitionFields"
            )
        routes = table_routes(cfg)
        bases = routed_bases(cfg, routes)
        base = bases[0][1]
        dead_base = table_base(
            hudi.dead_letter_base_path or base.rstrip("/") + "_dead_letter",
            "sink.hudi.deadLetterBasePath",
        )
        if dead_base in {b for _, b in bases}:
            raise ConfigError(
                "sink.hudi.deadLetterBasePath must differ from the main tables' base paths"
            )
        properties = dict(hudi.properties)
        on_s3 = any(is_object_store(b) for b in (dead_base, *(b for _, b in bases)))
        s3 = S3Settings.from_properties(properties) if on_s3 else None
        if s3 is not None:
            s3.hadoop_conf()  # refuses, in one line, what Hadoop's S3A client cannot take
        columns = table_columns(cfg.decode.field_specs(), raw=cfg.decode.raw)
        names = tuple(c.name for c in columns)
        if routes is not None:
            check_route_field(routes, list(names))
        timeline_reads = reader_options(s3)  # hudi-rs's storage options
        main_ddl = spark_ddl(columns)

        def schema_of(client: HudiSparkClient, ddl: str) -> Callable[[], str]:
            return lambda: client.schema_of(client.session().createDataFrame([], ddl))

        def committer(
            location: str, name: str, keys: Sequence[str], parts: Sequence[str], ddl: str
        ) -> HudiSparkCommitter:
            files = open_location(location, properties)
            check_table_version(files)
            options = table_options(name, tuple(keys), tuple(parts), is_object_store(location))
            client = HudiSparkClient(spark, location, options)
            return HudiSparkCommitter(client, files, timeline_reads, schema_of(client, ddl))

        mains = []
        for table, location in bases:
            keys = table.record_key_fields or tuple(hudi.record_key_fields) or KAFKA_KEY_FIELDS
            parts = table.partition_fields
            parts = parts if parts is not None else tuple(hudi.partition_fields)
            for column in (*keys, *parts):
                if column not in names:
                    raise ConfigError(
                        f"sink.hudi: {column!r} is not a column of the table ({names})"
                    )
            name = table.identifier.rpartition(".")[2]
            mains.append((table.name, committer(location, name, keys, parts, main_ddl)))
        dead_cols = dead_letter_columns()
        dead_name = cfg.sink.dead_letter_identifier.rpartition(".")[2]
        dead = committer(dead_base, dead_name, KAFKA_KEY_FIELDS, (), spark_ddl(dead_cols))
        return cls(
            main=mains[0][1],
            dead_letter=dead,
            data_ddl=spark_ddl(data_columns(columns)) if not cfg.decode.raw else "",
            main_columns=names,
            dead_letter_columns=tuple(c.name for c in dead_cols),
            operation=hudi.operation,
            cfg=cfg,
            properties=properties,
            s3=s3,
            more=mains[1:],
            router=routes.router if routes is not None else None,
        )

    def mains(self) -> list[tuple[str, HudiSparkCommitter]]:
        """``(set name, committer)`` of every main table, in set order."""
        return [(MAIN, self.main), *self.more]

    # -- the session this writer needs ---------------------------------------------------

    def spark_needs(self) -> tuple[list[str], dict[str, str]]:
        """``(jars, conf)``: Hudi's Spark bundle, Hadoop's S3A client and our helper;
        Hudi's session settings, and S3A's for tables on S3."""
        s3a = self.s3.hadoop_conf() if self.s3 is not None else {}
        return jars(), {**SESSION_SETTINGS, **s3a}

    # -- the journal -----------------------------------------------------------------------

    def timeline(self, pipeline_id: str) -> InstantTimeline:
        root = self.main.files.uri(TablePaths.own(META_DIR, "journal", pipeline_id))
        store = journal_store_for(root, self.properties)
        tables = [c.files for _, c in self.mains()]
        return SparkTimeline(store, [*tables, self.dead_letter.files])

    def journal_pipelines(self) -> list[str]:
        names = self.main.files.listdir(TablePaths.own(META_DIR, "journal")) or []
        return sorted(n for n in names if not n.startswith("."))

    # -- what this writer leaves to Hudi -----------------------------------------------------

    def commit_tables(self) -> CommitTables:
        # one after another: each commit runs Hudi's own Spark jobs (its metadata table)
        # and inline table services in the one session, not tried beside each other
        return CommitTables(self.main, self.dead_letter, more_mains=self.more, commit_threads=1)

    def maintenance(self) -> list[TableMaintenance]:
        return []  # Hudi's own table services run inline, with Hudi's defaults

    def schema_changes(self) -> list[Change]:
        return []  # Hudi's writer reconciles a new column with the table's schema itself

    def evolve_schema(self) -> list[Change]:
        return []

    # -- the batch ---------------------------------------------------------------------------

    def batch_writer(self, df: Any) -> HudiSparkBatchWriter:
        """The writer of one batch's raw Kafka rows ``df``."""
        return HudiSparkBatchWriter(
            df=df,
            decode=self.cfg.decode,
            include_headers=self.cfg.source.include_headers,
            data_ddl=self.data_ddl,
            main=self.main.client,
            main_columns=self.main_columns,
            routed=tuple((name, c.client) for name, c in self.mains()) if self.router else (),
            router=self.router,
            dead_letter=self.dead_letter.client,
            dead_letter_columns=self.dead_letter_columns,
            operation=self.operation,
        )

    def task_plan(
        self, write_uuid: str, drop_below: PartitionOffsets | None = None, faults: str | None = None
    ) -> TaskPlan:
        raise PipelineError("sink.hudi.writer: spark writes batches through Hudi, not tasks")
