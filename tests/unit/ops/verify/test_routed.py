"""A routed set verified as one: records once across its tables, each in its route's table.

The tables and the broker are in memory here (the readers' contract, ``TableSource`` and
the window reader, is what the check sees); tests/integration/ops/test_routed_ops.py
runs the same check on real tables built by the pipeline.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
from rich.console import Console

from pipeline.commit.offsets import TopicPartition
from pipeline.config import parse_config
from pipeline.ops.verify.kafka import KafkaWindow, KafkaWindowReader
from pipeline.ops.verify.model import VerifyReport
from pipeline.ops.verify.range_ledger import COMMITTED_KEY, PIPELINE_KEY, RANGES_KEY
from pipeline.ops.verify.render import print_report
from pipeline.ops.verify.routed import ROUTE_COL, TABLE_COL, RoutedCheck, SetSource
from pipeline.spark.routes import Router

Row = tuple[str, int, int, str]  # topic, partition, offset, kind
ROUTER = Router("_kafka_topic", exact={"a": 1, "b": 2}, default=0)
N = 6  # offsets per partition: topics a, b, c with one partition each


class MemorySource:
    """A table in memory at one commit whose checkpoint covers ``[0, committed)`` of the
    topics (every table of a set commits every batch with the full checkpoint)."""

    def __init__(self, name: str, rows: list[Row], committed: int = N) -> None:
        self.name = name
        self.rows = rows
        self.committed = committed
        self.commit_id: str | None = "1"

    def column_names(self) -> list[str]:
        return ["_kafka_topic", "_kafka_partition", "_kafka_offset", "kind"]

    def at_most(self, committed: Mapping[TopicPartition, int]) -> MemorySource:
        return self

    def commits(self) -> list[tuple[str, Mapping[str, Any]]]:
        ranges = {t: {"0": [0, self.committed]} for t in "abc"}
        offsets = {t: {"0": self.committed} for t in "abc"}
        meta = {
            PIPELINE_KEY: "p1",
            RANGES_KEY: json.dumps(ranges),
            COMMITTED_KEY: json.dumps(offsets),
        }
        return [("1", meta)]

    def _table(self) -> pa.Table:
        names = self.column_names()
        cols = list(zip(*self.rows, strict=True)) if self.rows else [[], [], [], []]
        types = [pa.string(), pa.int32(), pa.int64(), pa.string()]
        return pa.table([pa.array(c, t) for c, t in zip(cols, types, strict=True)], names=names)

    def coordinates(self) -> Iterator[pa.RecordBatch]:
        yield from (
            self._table().select(["_kafka_topic", "_kafka_partition", "_kafka_offset"]).to_batches()
        )

    def window_rows(self, tp: TopicPartition, start: int, end: int, columns: list[str]) -> pa.Table:
        keep = [
            i
            for i, (t, p, o, _) in enumerate(self.rows)
            if (t, p) == (tp.topic, tp.partition) and start <= o < end
        ]
        return self._table().take(pa.array(keep, pa.int64())).select(columns)


class MemoryKafka:
    """Topics a, b, c with offsets ``0..N-1`` each."""

    def check_reachable(self, topics: list[str]) -> set[str]:
        return set(topics)

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        return 0, N

    def read(self, tp: TopicPartition, start: int, end: int) -> KafkaWindow:
        offsets = np.arange(start, end, dtype=np.int64)
        blobs = pa.array([b"x"] * offsets.size, pa.large_binary())
        stamps = pa.array([None] * offsets.size, pa.timestamp("us", tz="UTC"))
        return KafkaWindow(offsets, blobs, blobs, stamps)


def _rows(topic: str, offsets: range) -> list[Row]:
    return [(topic, 0, o, topic) for o in offsets]


def _check(tmp_path: Path, mains: list[MemorySource], dead: MemorySource) -> VerifyReport:
    cfg = parse_config(
        {
            "id": "p1",
            "source": {"bootstrapServers": "localhost:9092", "topics": ["a", "b", "c"]},
            "decode": {"schema": [{"name": "kind", "type": "string"}]},
            "sink": {"table": "db.c"},
            "checkpointLocation": str(tmp_path / "ckpt"),
        }
    )
    union = SetSource([(i, m.name, m) for i, m in enumerate(mains)], ROUTER)
    report = VerifyReport("iceberg", union.name, dead_letter_table=dead.name)
    kafka = cast(KafkaWindowReader, MemoryKafka())
    check = RoutedCheck(
        report, union, dead, dead.name, cfg, kafka, payload=False, window=4, on_progress=None
    )
    return check.run()


def _tables(report: VerifyReport) -> dict[str, dict[str, int]]:
    keys = ("records", "missing", "duplicated", "misrouted", "unexpected")
    return {t.table: {k: getattr(t, k) for k in keys} for t in report.tables}


def test_each_record_once_across_the_tables_is_exactly_once(tmp_path: Path) -> None:
    c = MemorySource("db.c", _rows("c", range(N)))
    a = MemorySource("db.a", _rows("a", range(1, N)))
    b = MemorySource("db.b", _rows("b", range(N)))
    dead = MemorySource("db.dead", _rows("a", range(1)))  # a/0@0 did not decode
    report = _check(tmp_path, [c, a, b], dead)
    assert report.ok, report.verdict()
    assert report.verdict().startswith("EXACTLY ONCE for all 18 committed records")
    counts = _tables(report)
    assert [counts[t]["records"] for t in ("db.c", "db.a", "db.b", "db.dead")] == [6, 5, 6, 1]
    assert report.totals().present == 18  # the dead letter counted once, not per table
    assert report.to_dict()["tables"][3]["dead_letter"] is True


def test_a_record_in_the_wrong_table_a_missing_one_and_a_copy_name_their_table(
    tmp_path: Path,
) -> None:
    c = MemorySource("db.c", [*_rows("c", range(N)), ("b", 0, 5, "b")])  # b/0@5: misrouted
    a = MemorySource("db.a", _rows("a", range(N - 1)))  # a/0@5: missing
    b = MemorySource("db.b", _rows("b", range(N - 1)) + _rows("b", range(2, 3)))  # b@2 twice
    dead = MemorySource("db.dead", [])
    report = _check(tmp_path, [c, a, b], dead)
    assert not report.ok
    counts = _tables(report)
    assert counts["db.c"] == {
        "records": 7,
        "missing": 0,
        "duplicated": 0,
        "misrouted": 1,
        "unexpected": 0,
    }
    assert counts["db.a"]["missing"] == 1 and counts["db.a"]["records"] == 5
    assert counts["db.b"]["duplicated"] == 2 and counts["db.b"]["misrouted"] == 0
    by_name = {t.table: t for t in report.tables}
    assert by_name["db.c"].misrouted_offsets == ["b/0@5"]
    assert by_name["db.a"].missing_offsets == ["a/0@5"]
    verdict = report.verdict()
    assert verdict.startswith("NOT EXACTLY ONCE")
    assert "db.c (1 misrouted)" in verdict and "db.a (1 missing)" in verdict
    assert "db.b (2 duplicated)" in verdict
    out = io.StringIO()
    print_report(Console(file=out, width=300), report)
    text = out.getvalue()
    assert "routed set of 3 tables: records per table" in text
    assert "db.c: misrouted e.g. b/0@5" in text and "db.a: missing e.g. a/0@5" in text


def test_a_table_behind_the_first_is_a_range_issue_naming_it(tmp_path: Path) -> None:
    c = MemorySource("db.c", _rows("c", range(N)))
    a = MemorySource("db.a", _rows("a", range(N - 2)), committed=N - 2)
    b = MemorySource("db.b", _rows("b", range(N)))
    report = _check(tmp_path, [c, a, b], MemorySource("db.dead", []))
    behind = [i for i in report.range_issues if i.kind == "table-behind"]
    assert behind and all("db.a" in i.detail for i in behind)
    assert {(i.tp.topic, i.start, i.end) for i in behind} >= {("a", N - 2, N)}
    assert _tables(report)["db.a"]["missing"] == 2 and not report.ok


def test_the_set_reads_rows_tagged_with_their_table_and_route() -> None:
    c = MemorySource("db.c", [("a", 0, 0, "a")])  # topic a routes to index 1
    a = MemorySource("db.a", [("a", 0, 1, "a")])
    union = SetSource([(1, "db.a", a), (0, "db.c", c)], ROUTER)
    assert union.name == "routed set of 2 tables" and union.commits() == c.commits()
    rows = union.window_rows(TopicPartition("a", 0), 0, 4, ["_kafka_offset"])
    assert rows.column_names == ["_kafka_offset", TABLE_COL, ROUTE_COL]
    assert sorted(zip(*(rows[n].to_pylist() for n in rows.column_names), strict=True)) == [
        (0, 0, 1),
        (1, 1, 1),
    ]
    empty = union.window_rows(TopicPartition("z", 0), 0, 4, ["_kafka_offset"])
    assert empty.num_rows == 0 and TABLE_COL in empty.column_names
