"""A batch's write adapter, built with the run's settings: the inputs of the one switch
(pipeline/spark/batch/paths.py: the reader's ``arrow_input``, ``decode.engine``, who
writes the tables' files) and the adapter it names.

    BatchWrites.planned(df, start, end)      the adapter ``write_path`` names for a batch
                                             Spark planned (``start`` None: not logged)
    BatchWrites.named(path, df, start, end)  the adapter of ``path``: a gap rewind's or a
                                             repair's ``reread_path`` (READ_RANGES)

Each adapter is the coordinator's ``WriteFn`` through its ``write``; none is built
around a scan: the batch DataFrame is asked for its rows or session when written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, assert_never

from pipeline.commit.offsets import PartitionOffsets
from pipeline.config import PipelineConfig
from pipeline.errors import PipelineError
from pipeline.formats.base import BatchWrite, PipelineTables, WritesBatches
from pipeline.runtime.source_settings import SourceSettings
from pipeline.source.choice import SourceReader
from pipeline.spark.batch import TaskPlanner
from pipeline.spark.batch.paths import TableWriter, WritePath, reread_path, write_path
from pipeline.spark.writer import TaskPlan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["BatchWrites", "planned_path", "table_writer"]


def table_writer(tables: PipelineTables) -> TableWriter:
    """Who writes the batch's files: the format's own engine (Hudi's Spark writer) or the
    pipeline's tasks through the format's task plan."""
    if isinstance(tables, WritesBatches):
        return TableWriter.FORMAT_ENGINE
    return TableWriter.TASKS


def planned_path(
    cfg: PipelineConfig, reader: SourceReader, tables: PipelineTables, start_known: bool
) -> WritePath:
    """The path of a batch Spark planned, from the run's reader, engine and tables."""
    return write_path(reader.arrow_input, cfg.decode.engine, table_writer(tables), start_known)


@dataclass(frozen=True)
class BatchWrites:
    """The write adapters of one run's batches (see the module docstring)."""

    cfg: PipelineConfig
    tables: PipelineTables
    source: SourceSettings
    faults: str | None = None  # armed "mid-write" fault points, for the tasks

    def planned(
        self, df: DataFrame, start: PartitionOffsets | None, end: PartitionOffsets
    ) -> BatchWrite:
        """The adapter of a batch Spark planned: ``start`` its logged start, else the
        source's explicit initial offsets when it is a checkpoint's first batch."""
        if start is None:
            start = self.source.explicit_start(end)
        path = planned_path(self.cfg, self.source.reader, self.tables, start is not None)
        return self.named(path, df, start, end)

    def reread_path(self) -> WritePath | None:
        """The path that writes ranges Spark did not plan; None: none can."""
        return reread_path(table_writer(self.tables))

    def named(
        self, path: WritePath, df: DataFrame, start: PartitionOffsets | None, end: PartitionOffsets
    ) -> BatchWrite:
        from pipeline.spark.batch.ranges import RangeReadWrite
        from pipeline.spark.batch.rows import ArrowRowsWrite, SqlDecodeWrite

        s, decode, reader = self.cfg.source, self.cfg.decode, self.source.reader

        def rows() -> DataFrame:  # the reader's view of the batch DataFrame, when written
            return reader.batch_rows(df, s.min_partitions)

        match path:
            case WritePath.SQL_DECODE:
                ddl = self.tables.data_ddl
                return SqlDecodeWrite(rows, self._plan, decode, s.include_headers, ddl)
            case WritePath.ARROW_ROWS:
                return ArrowRowsWrite(rows, self._plan, decode, s.include_headers)
            case WritePath.READ_RANGES:
                if start is None:
                    raise PipelineError("a batch's ranges are read only from a known start")
                return RangeReadWrite(
                    spark=lambda: df.sparkSession,
                    start=start,
                    end=end,
                    plan=self._plan,
                    decode=decode,
                    source=s,
                    consumer_conf=self.source.consumer_conf(),
                )
            case WritePath.FORMAT_ENGINE:
                if not isinstance(self.tables, WritesBatches):
                    raise PipelineError(f"{type(self.tables).__name__} has no engine of its own")
                return self.tables.batch_writer(df)
        assert_never(path)

    @property
    def _plan(self) -> TaskPlanner:
        def plan(write_id: str, drop_below: PartitionOffsets) -> TaskPlan:
            return self.tables.task_plan(write_id, drop_below, self.faults)

        return plan
