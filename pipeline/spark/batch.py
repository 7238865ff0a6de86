"""Driver side of the worker path: one micro-batch's Spark job that stages files.

    BatchWriter.write(write_id, drop_below)
        ├─ decode.engine spark (or no explicit start): decode(df).mapInArrow(run_task)
        ├─ decode.engine arrow, the reader's rows (Spark's Kafka source):
        │                    df.mapInArrow(arrow decode → run_task)
        └─ decode.engine arrow: parallelize(range(n)).mapPartitions(read_ranges → decode → run_task)
                                                   → collect_staged → StagedBatch

The coordinator calls ``write`` once per attempt of a batch (``write_id`` names the
instant; ``drop_below`` the offsets the table already holds). The format's ``task_plan``
says which files the tasks write; nothing here knows the table format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.commit.offsets import PartitionOffsets, pack_ranges, planned_ranges, split_ranges
from pipeline.commit.types import StagedBatch
from pipeline.config import DecodeConfig, SourceConfig
from pipeline.decode.json_values import RecordParser
from pipeline.decode.spark import decode, decoded_columns
from pipeline.spark.writer import (
    RESULT_DDL,
    ReadPlan,
    TaskPlan,
    collect_staged,
    make_decode_task_function,
    make_read_task_function,
    make_task_function,
)

# (write id, offsets the table already holds, armed fault points) -> the tasks' plan
TaskPlanner = Callable[[str, PartitionOffsets, "str | None"], TaskPlan]


def tasks_read_ranges(engine: str, rows_are_records: bool) -> bool:
    """Whether a batch's tasks read its ranges from Kafka themselves (an RDD job over the
    packed ranges) rather than take the batch DataFrame's rows (a SQL ``mapInArrow``): the
    arrow engine on a reader whose rows are not the records, once the batch's start is
    known."""
    return engine == "arrow" and not rows_are_records


@dataclass(frozen=True)
class BatchWriter:
    """Stages one batch's files through Spark tasks; see the module docstring."""

    df: Any  # the batch's DataFrame (raw Kafka rows); unused by the arrow engine
    start: PartitionOffsets | None  # where the batch starts, when known on the driver
    end: PartitionOffsets
    plan: TaskPlanner
    decode: DecodeConfig
    source: SourceConfig
    consumer_conf: dict[str, Any]
    data_ddl: str  # the table's data columns, for the Spark engine's decode
    faults: str | None = None  # armed "mid-write" fault points, for the tasks
    # the DataFrame's rows are the batch's records for the arrow engine too (Spark's Kafka
    # source); else that engine's tasks read the batch's ranges themselves
    rows_are_records: bool = False

    def write(self, write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
        plan = self.plan(write_id, drop_below, self.faults)
        if self.decode.engine == "arrow" and self.rows_are_records:
            from pipeline.decode.arrow import ArrowDecoder

            decoder = ArrowDecoder(self.decode, self.source.include_headers)
            fn = make_decode_task_function(plan, decoder)
            rows = self._rows().mapInArrow(fn, RESULT_DDL).collect()
            return collect_staged(r.asDict() for r in rows)
        reads = tasks_read_ranges(self.decode.engine, self.rows_are_records)
        if reads and self.start is not None:
            # the DataFrame is never touched: tasks read the batch's ranges themselves
            return self._write_arrow(plan, self.start)
        # Decoded here, not in the streaming query: a plan Spark re-analyses every batch
        # even when the arrow engine never runs it.
        decoded = decode(self._rows(), self.decode, self.data_ddl, self.source.include_headers)
        parser = None if self.decode.raw else RecordParser(decoded_columns(self.decode))
        rows = decoded.mapInArrow(make_task_function(plan, parser), RESULT_DDL).collect()
        return collect_staged(r.asDict() for r in rows)

    def _rows(self) -> Any:
        """The batch's DataFrame. Spark's Kafka source plans a task per Kafka partition
        (or per ``minPartitions`` piece): coalesced to the cores (or ``minPartitions``),
        as our reader packs its ranges, a batch pays a Python task per core, not per
        partition (no shuffle: a task reads several partitions' ranges in turn)."""
        if not self.rows_are_records:
            return self.df
        cores = self.df.sparkSession.sparkContext.defaultParallelism
        return self.df.coalesce(max(cores, self.source.min_partitions or 0))

    def _write_arrow(self, plan: TaskPlan, start: PartitionOffsets) -> StagedBatch:
        """``decode.engine: arrow``: one task per packed group of the batch's ranges."""
        from pipeline.decode.arrow import ArrowDecoder

        s = self.source
        pieces = split_ranges(planned_ranges(start, self.end), s.min_partitions)
        if not pieces:
            return StagedBatch()
        spark = self.df.sparkSession
        tasks = max(spark.sparkContext.defaultParallelism, s.min_partitions or 0)
        read = ReadPlan(
            groups=pack_ranges(pieces, tasks),
            consumer_conf=self.consumer_conf,
            decoder=ArrowDecoder(self.decode, s.include_headers),
            include_headers=s.include_headers,
            fail_on_data_loss=s.fail_on_data_loss,
            stall_timeout_s=max(float(s.broker_retry_seconds), 1.0),
        )
        n = len(read.groups)
        fn = make_read_task_function(plan, read)
        rows = spark.sparkContext.parallelize(range(n), n).mapPartitions(fn).collect()
        return collect_staged(rows)
