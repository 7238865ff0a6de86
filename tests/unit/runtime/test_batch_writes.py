"""The run's write adapters (pipeline/runtime/batch_writes.py) and the batch runner's use
of them (``BatchRunner._writer``, ``BatchRunner._reread``), built without Spark: which
adapter a batch gets, with which ranges, plan and rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from pipeline.commit.continuity import check_gaps
from pipeline.commit.faults import FaultPoints
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.config import PipelineConfig, parse_config
from pipeline.errors import GapError, PipelineError
from pipeline.formats.hudi_spark.batch import HudiSparkBatchWriter
from pipeline.observe.base import Observers
from pipeline.runtime.batch_writes import BatchWrites, planned_path
from pipeline.runtime.batches import BatchRunner
from pipeline.runtime.source_settings import SourceSettings
from pipeline.runtime.stats import RunStats
from pipeline.spark.batch.paths import WritePath
from pipeline.spark.batch.ranges import RangeReadWrite
from pipeline.spark.batch.rows import ArrowRowsWrite, SqlDecodeWrite

TP = TopicPartition("t", 0)
START, END = PartitionOffsets({TP: 10}), PartitionOffsets({TP: 20})


def _cfg(reader: str = "python", engine: str = "arrow", **source: Any) -> PipelineConfig:
    return parse_config(
        {
            "id": "p",
            "source": {"bootstrapServers": "127.0.0.1:9", "topics": ["t"], "reader": reader}
            | source,
            "sink": {"table": "db.events", "catalog": {"warehouse": "/tmp/w"}},
            "decode": {"engine": engine, "schema": [{"name": "id", "type": "long"}]},
            "checkpointLocation": "/tmp/ck",
        }
    )


@dataclass
class _TaskTables:
    """Tables written by the pipeline's tasks: records the plans asked for."""

    data_ddl: str = "id BIGINT"
    plans: list[tuple[Any, ...]] = field(default_factory=list)

    def task_plan(self, write_uuid: str, drop_below: Any = None, faults: Any = None) -> Any:
        self.plans.append((write_uuid, drop_below, faults))
        return "plan"


@dataclass
class _EngineTables(_TaskTables):
    """Tables written by an engine of their own (as Hudi's Spark writer's)."""

    cfg: PipelineConfig | None = None

    def spark_needs(self) -> tuple[list[str], dict[str, str]]:
        return [], {}

    def batch_writer(self, df: Any) -> HudiSparkBatchWriter:
        assert self.cfg is not None
        return HudiSparkBatchWriter(
            df=df,
            decode=self.cfg.decode,
            include_headers=False,
            data_ddl=self.data_ddl,
            main=None,  # type: ignore[arg-type]
            main_columns=("id",),
            dead_letter=None,
            dead_letter_columns=(),
        )


def _writes(cfg: PipelineConfig, tables: Any, faults: str | None = None) -> BatchWrites:
    return BatchWrites(cfg, tables, SourceSettings(cfg, tables), faults)


class _Frame:
    """A batch DataFrame's surface the readers' ``batch_rows`` touch."""

    def __init__(self, cores: int) -> None:
        self.sparkSession = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=cores))
        self.coalesced: list[int] = []

    def coalesce(self, n: int) -> str:
        self.coalesced.append(n)
        return f"coalesced to {n}"


def test_the_python_source_with_the_arrow_engine_only_plans_the_tasks_ranges() -> None:
    cfg, tables = _cfg(), _TaskTables()
    write = _writes(cfg, tables, faults="mid-write:fail").planned(None, START, END)
    assert isinstance(write, RangeReadWrite)
    assert (write.start, write.end) == (START, END)
    assert write.plan("w", END) == "plan"
    assert tables.plans == [("w", END, "mid-write:fail")]  # the armed points reach the tasks


def test_a_first_batch_reads_ranges_from_explicit_initial_offsets_else_decodes_its_rows() -> None:
    cfg = _cfg()
    writes = _writes(cfg, _TaskTables())
    assert isinstance(writes.planned(None, None, END), SqlDecodeWrite)  # start not known
    writes.source.starting_offsets = START.to_json()
    write = writes.planned(None, None, END)
    assert isinstance(write, RangeReadWrite) and write.start == START


def test_the_python_sources_rows_are_read_as_planned_by_the_spark_engine() -> None:
    frame = _Frame(cores=4)
    write = _writes(_cfg(engine="spark"), _TaskTables()).planned(frame, START, END)
    assert isinstance(write, SqlDecodeWrite)
    assert write.rows() is frame and not frame.coalesced


@pytest.mark.parametrize(
    ("engine", "adapter"), [("arrow", ArrowRowsWrite), ("spark", SqlDecodeWrite)]
)
def test_spark_kafka_sources_rows_are_what_the_tasks_decode(engine: str, adapter: type) -> None:
    frame = _Frame(cores=4)
    cfg = _cfg(reader="spark", engine=engine, minPartitions=6)
    write = _writes(cfg, _TaskTables()).planned(frame, START, END)
    assert isinstance(write, adapter)
    assert write.rows() == "coalesced to 6" and frame.coalesced == [6]  # a task per core at least


def test_a_format_with_its_own_engine_writes_every_batch_and_rereads_none() -> None:
    cfg = _cfg()
    tables = _EngineTables(cfg=cfg)
    writes = _writes(cfg, tables)
    assert planned_path(cfg, writes.source.reader, tables, True) is WritePath.FORMAT_ENGINE
    write = writes.planned("df", START, END)
    assert isinstance(write, HudiSparkBatchWriter) and write.df == "df"
    assert writes.reread_path() is None


def test_a_reread_reads_ranges_whatever_the_reader_and_engine() -> None:
    for cfg in (_cfg(reader="spark"), _cfg(engine="spark")):
        writes = _writes(cfg, _TaskTables())
        assert writes.reread_path() is WritePath.READ_RANGES
        assert isinstance(writes.named(WritePath.READ_RANGES, None, START, END), RangeReadWrite)
        with pytest.raises(PipelineError, match="only from a known start"):
            writes.named(WritePath.READ_RANGES, None, None, END)


def _runner(cfg: PipelineConfig, tables: Any) -> BatchRunner:
    return BatchRunner(
        cfg,
        tables=tables,
        coordinator=SimpleNamespace(exactly_once=False),
        timeline=None,
        faults=FaultPoints(""),
        source=SourceSettings(cfg, tables),
        stats=RunStats(),
        observers=Observers(),
        fence=None,  # type: ignore[arg-type]
        stop=None,  # type: ignore[arg-type]
        spark=lambda: None,
    )


def test_a_gap_rewind_through_a_formats_own_engine_is_refused_in_one_line() -> None:
    """A format writing through its own engine has no task plan to read ranges with: the
    rewind says so (``GapError``) instead of failing on the adapter's fields."""
    cfg = _cfg()
    runner = _runner(cfg, _EngineTables(cfg=cfg))
    committed = PartitionOffsets({TP: 5})
    with pytest.raises(GapError, match="cannot be re-read"):
        check_gaps(1, START, END, committed, lambda w, d: None, runner._reread(None), "rewind")


def test_a_gap_rewind_reads_the_rewound_ranges_in_tasks() -> None:
    cfg, tables = _cfg(reader="spark"), _TaskTables()
    runner = _runner(cfg, tables)
    committed = PartitionOffsets({TP: 5})
    start, write = check_gaps(
        1, START, END, committed, lambda w, d: None, runner._reread(None), "rewind"
    )
    assert start == committed
    adapter = write.__self__  # type: ignore[attr-defined]
    assert isinstance(adapter, RangeReadWrite) and (adapter.start, adapter.end) == (committed, END)
