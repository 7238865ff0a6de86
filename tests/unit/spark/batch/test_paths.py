"""The write path's one switch (pipeline/spark/batch/paths.py): every combination of the
reader's arrow input, the decode engine, who writes the tables' files and whether the
batch's start is known names exactly one adapter."""

from __future__ import annotations

import itertools

import pytest

from pipeline.source.arrow_input import ArrowInput
from pipeline.spark.batch.paths import TableWriter, WritePath, reread_path, write_path

ROWS, RANGES = ArrowInput.BATCH_ROWS, ArrowInput.OFFSET_RANGES
TASKS, ENGINE = TableWriter.TASKS, TableWriter.FORMAT_ENGINE

# (arrow input, engine, start known) -> the path, for tables written by the tasks
TASK_PATHS = {
    (ROWS, "spark", True): WritePath.SQL_DECODE,
    (ROWS, "spark", False): WritePath.SQL_DECODE,
    (ROWS, "arrow", True): WritePath.ARROW_ROWS,
    (ROWS, "arrow", False): WritePath.ARROW_ROWS,
    (RANGES, "spark", True): WritePath.SQL_DECODE,
    (RANGES, "spark", False): WritePath.SQL_DECODE,
    (RANGES, "arrow", True): WritePath.READ_RANGES,
    (RANGES, "arrow", False): WritePath.SQL_DECODE,  # no known start: no ranges to read
}


@pytest.mark.parametrize(("key", "path"), sorted(TASK_PATHS.items(), key=str))
def test_tables_written_by_the_tasks(key: tuple, path: WritePath) -> None:
    arrow_input, engine, start_known = key
    assert write_path(arrow_input, engine, TASKS, start_known) is path


@pytest.mark.parametrize(
    ("arrow_input", "engine", "start_known"),
    list(itertools.product(ArrowInput, ("arrow", "spark"), (True, False))),
)
def test_a_format_with_its_own_engine_writes_every_batch(
    arrow_input: ArrowInput, engine: str, start_known: bool
) -> None:
    assert write_path(arrow_input, engine, ENGINE, start_known) is WritePath.FORMAT_ENGINE  # type: ignore[arg-type]


def test_only_the_range_reading_path_reads_kafka_in_its_tasks() -> None:
    assert [p for p in WritePath if p.reads_ranges] == [WritePath.READ_RANGES]


def test_a_reread_reads_ranges_unless_the_format_writes_with_its_own_engine() -> None:
    assert reread_path(TASKS) is WritePath.READ_RANGES
    assert reread_path(ENGINE) is None
