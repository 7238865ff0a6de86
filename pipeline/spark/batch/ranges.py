"""Writes whose tasks read the batch's offset ranges from Kafka themselves.

    RangeReadWrite.write
        planned_ranges(start, end) -> split_ranges -> pack_ranges (a group per task)
        parallelize(range(groups)).mapPartitions(read_ranges -> Arrow decode -> run_task)
                                                    -> collect_staged -> StagedBatch

A plain RDD job, not a DataFrame: nothing to analyse, optimise or code-generate per
batch. The batch's own DataFrame is never scanned (the reader only planned its offsets),
which is also what lets a gap rewind or a repair write ranges Spark did not plan.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.commit.offsets import PartitionOffsets, pack_ranges, planned_ranges, split_ranges
from pipeline.commit.types import StagedBatch
from pipeline.config import DecodeConfig, SourceConfig
from pipeline.spark.batch import TaskPlanner
from pipeline.spark.writer import ReadPlan, collect_staged, make_read_task_function

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RangeReadWrite"]


@dataclass(frozen=True)
class RangeReadWrite:
    """``WritePath.READ_RANGES``: one task per packed group of ``[start, end)``'s ranges."""

    spark: Callable[[], SparkSession]  # the session, asked when the batch is written
    start: PartitionOffsets
    end: PartitionOffsets
    plan: TaskPlanner
    decode: DecodeConfig
    source: SourceConfig
    consumer_conf: dict[str, Any]

    def write(self, write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
        from pipeline.decode.arrow import ArrowDecoder

        plan = self.plan(write_id, drop_below)
        s = self.source
        pieces = split_ranges(planned_ranges(self.start, self.end), s.min_partitions)
        if not pieces:
            return StagedBatch()
        spark = self.spark()
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
