"""Writes over the batch DataFrame's rows: a SQL ``mapInArrow`` job whose tasks stage files.

    SqlDecodeWrite.write   decode(rows) (Spark SQL, ``from_json``) .mapInArrow(run_task)
    ArrowRowsWrite.write   rows.mapInArrow(Arrow decode -> run_task)
                                                    -> collect_staged -> StagedBatch

``rows()`` is the reader's view of the batch DataFrame (``SourceReader.batch_rows``),
asked when the batch is written (a batch the table already holds is never scanned).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.types import StagedBatch
from pipeline.config import DecodeConfig
from pipeline.decode.json_values import RecordParser
from pipeline.decode.spark import decode, decoded_columns
from pipeline.spark.batch import TaskPlanner
from pipeline.spark.writer import (
    RESULT_DDL,
    collect_staged,
    make_decode_task_function,
    make_task_function,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ArrowRowsWrite", "SqlDecodeWrite"]


@dataclass(frozen=True)
class SqlDecodeWrite:
    """``WritePath.SQL_DECODE``: Spark SQL decodes the batch's rows, the tasks stage them."""

    rows: Callable[[], DataFrame]  # the batch's raw Kafka rows
    plan: TaskPlanner
    decode: DecodeConfig
    include_headers: bool
    data_ddl: str  # the table's data columns

    def write(self, write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
        plan = self.plan(write_id, drop_below)
        # Decoded here, not in the streaming query: a plan Spark re-analyses every batch
        # even when the arrow engine never runs it.
        decoded = decode(self.rows(), self.decode, self.data_ddl, self.include_headers)
        parser = None if self.decode.raw else RecordParser(decoded_columns(self.decode))
        rows = decoded.mapInArrow(make_task_function(plan, parser), RESULT_DDL).collect()
        return collect_staged(r.asDict() for r in rows)


@dataclass(frozen=True)
class ArrowRowsWrite:
    """``WritePath.ARROW_ROWS``: the tasks decode the batch's rows by Arrow and stage them."""

    rows: Callable[[], DataFrame]  # the batch's raw Kafka rows
    plan: TaskPlanner
    decode: DecodeConfig
    include_headers: bool

    def write(self, write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
        from pipeline.decode.arrow import ArrowDecoder

        decoder = ArrowDecoder(self.decode, self.include_headers)
        fn = make_decode_task_function(self.plan(write_id, drop_below), decoder)
        rows = self.rows().mapInArrow(fn, RESULT_DDL).collect()
        return collect_staged(r.asDict() for r in rows)
