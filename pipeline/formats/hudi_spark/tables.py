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
from dataclasses import dataclass
from typing import Any

from pipeline.columns import data_columns, dead_letter_columns, spark_ddl, table_columns
from pipeline.columns.evolution import Change
from pipeline.commit.instant import next_instant_time
from pipeline.commit.journal import InstantTimeline, JournalStore
from pipeline.commit.maintenance import TableMaintenance
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.table_set import CommitTables
from pipeline.config import PipelineConfig
from pipeline.errors import ConfigError, PipelineError
from pipeline.formats.hudi.layout import META_DIR, PROPERTIES, TablePaths, parse_properties
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
    s3: S3Settings | None  # the store, when either table is on S3

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
        base = table_base(hudi.base_path)
        dead_base = table_base(
            hudi.dead_letter_base_path or base.rstrip("/") + "_dead_letter",
            "sink.hudi.deadLetterBasePath",
        )
        if dead_base == base:
            raise ConfigError("sink.hudi.deadLetterBasePath must differ from sink.hudi.basePath")
        properties = dict(hudi.properties)
        on_s3 = is_object_store(base) or is_object_store(dead_base)
        s3 = S3Settings.from_properties(properties) if on_s3 else None
        if s3 is not None:
            s3.hadoop_conf()  # refuses, in one line, what Hadoop's S3A client cannot take
        columns = table_columns(cfg.decode.field_specs(), raw=cfg.decode.raw)
        names = tuple(c.name for c in columns)
        keys = tuple(hudi.record_key_fields) or KAFKA_KEY_FIELDS
        for field in (*keys, *hudi.partition_fields):
            if field not in names:
                raise ConfigError(f"sink.hudi: {field!r} is not a column of the table ({names})")
        main_files, dead_files = (
            open_location(base, properties),
            open_location(dead_base, properties),
        )
        check_table_version(main_files)
        check_table_version(dead_files)
        main_name = cfg.sink.table.rpartition(".")[2]
        dead_name = cfg.sink.dead_letter_identifier.rpartition(".")[2]
        dead_cols = dead_letter_columns()
        main_client = HudiSparkClient(
            spark,
            base,
            table_options(main_name, keys, hudi.partition_fields, is_object_store(base)),
        )
        dead_client = HudiSparkClient(
            spark,
            dead_base,
            table_options(dead_name, KAFKA_KEY_FIELDS, (), is_object_store(dead_base)),
        )
        data_ddl = spark_ddl(data_columns(columns)) if not cfg.decode.raw else ""
        main_ddl, dead_ddl = spark_ddl(columns), spark_ddl(dead_cols)

        def schema_of(client: HudiSparkClient, ddl: str) -> Callable[[], str]:
            return lambda: client.schema_of(client.session().createDataFrame([], ddl))

        timeline_reads = reader_options(s3)  # hudi-rs's storage options
        return cls(
            main=HudiSparkCommitter(
                main_client, main_files, timeline_reads, schema_of(main_client, main_ddl)
            ),
            dead_letter=HudiSparkCommitter(
                dead_client, dead_files, timeline_reads, schema_of(dead_client, dead_ddl)
            ),
            data_ddl=data_ddl,
            main_columns=names,
            dead_letter_columns=tuple(c.name for c in dead_cols),
            operation=hudi.operation,
            cfg=cfg,
            properties=properties,
            s3=s3,
        )

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
        return SparkTimeline(store, [self.main.files, self.dead_letter.files])

    def journal_pipelines(self) -> list[str]:
        names = self.main.files.listdir(TablePaths.own(META_DIR, "journal")) or []
        return sorted(n for n in names if not n.startswith("."))

    # -- what this writer leaves to Hudi -----------------------------------------------------

    def commit_tables(self) -> CommitTables:
        return CommitTables(self.main, self.dead_letter)

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
            dead_letter=self.dead_letter.client,
            dead_letter_columns=self.dead_letter_columns,
            operation=self.operation,
        )

    def task_plan(
        self, write_uuid: str, drop_below: PartitionOffsets | None = None, faults: str | None = None
    ) -> TaskPlan:
        raise PipelineError("sink.hudi.writer: spark writes batches through Hudi, not tasks")
