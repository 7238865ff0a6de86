"""The one switch of the write path: which adapter writes a batch.

    write_path(arrow_input, engine, table_writer, start_known) -> WritePath

    table_writer FORMAT_ENGINE                          -> FORMAT_ENGINE
    engine spark                                        -> SQL_DECODE
    engine arrow, the reader's batch rows               -> ARROW_ROWS
    engine arrow, offset ranges, start known            -> READ_RANGES
    engine arrow, offset ranges, start not known        -> SQL_DECODE

A batch whose start the driver does not know (a checkpoint's first batch when its
initial offsets are not explicit numbers) has no ranges to read: only its DataFrame's rows
are, and those are the planner's, read through it. Writes of other ranges than Spark
planned (gap rewind, repairs: ``reread_path``) are always tasks that read the ranges, and
there are none for a format writing through its own engine. Pure: no Spark, no I/O.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pipeline.source.arrow_input import ArrowInput

DecodeEngine = Literal["arrow", "spark"]  # decode.engine


class WritePath(Enum):
    """One way a batch is written (each an adapter: pipeline/spark/batch/__init__.py)."""

    SQL_DECODE = "sql-decode"  # the batch's rows: Spark SQL decode, then mapInArrow
    ARROW_ROWS = "arrow-rows"  # the batch's rows: Arrow decode in mapInArrow
    READ_RANGES = "read-ranges"  # tasks read the batch's ranges from Kafka, Arrow decode
    FORMAT_ENGINE = "format-engine"  # the format's own engine (Hudi's Spark writer)

    @property
    def reads_ranges(self) -> bool:
        """The tasks read Kafka themselves (an RDD job), not the batch's rows (SQL)."""
        return self is WritePath.READ_RANGES


class TableWriter(Enum):
    """Who writes a batch's files, as the format says."""

    TASKS = "tasks"  # the pipeline's tasks, through the format's task plan
    FORMAT_ENGINE = "format-engine"  # the format's own engine (Hudi's Spark writer)


def write_path(
    arrow_input: ArrowInput, engine: DecodeEngine, table_writer: TableWriter, start_known: bool
) -> WritePath:
    """The adapter that writes a batch Spark planned (see the module docstring)."""
    if table_writer is TableWriter.FORMAT_ENGINE:
        return WritePath.FORMAT_ENGINE
    if engine == "spark":
        return WritePath.SQL_DECODE
    if arrow_input is ArrowInput.BATCH_ROWS:
        return WritePath.ARROW_ROWS
    return WritePath.READ_RANGES if start_known else WritePath.SQL_DECODE


def reread_path(table_writer: TableWriter) -> WritePath | None:
    """The adapter that writes ranges Spark did not plan (gap rewind, repairs), whatever
    the reader and engine; None when the format writes through its own engine."""
    return WritePath.READ_RANGES if table_writer is TableWriter.TASKS else None
