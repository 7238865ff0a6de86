"""Dead letters are committed at most once in every recovery combination, on the real
table formats.

A batch commits its dead letters first, then the main table (docs/design.md, operator 7).
A driver that dies between the two leaves the dead-letter table holding the batch while
the main table does not. Every way the next driver can find that instant is covered:

* format: Iceberg (pyiceberg, SQLite catalog under ``tmp_path``) or Hudi (the project's
  native copy-on-write writer under ``tmp_path``);
* main files: the instant's staged main-table files still there (``intact``: recovery
  rolls it forward) or deleted from storage (``lost``: recovery rolls it back, keeps the
  committed dead letters and the coordinator repairs the batch -- re-reads its ranges
  and commits the main rows alone);
* incarnation: Spark replays the batch (``same-query``: same query id, batch id and
  planned end) or the checkpoint is gone (``new-query``: a new query id whose first batch
  starts from the table's committed offsets, read before recovery, as the source does).

Each case: batch 0 commits; batch 1 dies at ``after-dead-letter-commit``; optionally its
staged main files are deleted; fresh objects (a new process in spirit) recover and run
to the same end. Then, counting ``(topic, partition, offset)`` read back through the
tables (pyiceberg scans; hudi-rs for Hudi): every record below the end is in the main
table or the dead-letter table exactly once, each dead letter is in the dead-letter table
exactly once, no table references a missing file, no staged file is left unreferenced
and the journal holds no pending instant.

Two more cases, each failing before its fix: the Hudi repair must not leave its instant
pending on the dead-letter table's own timeline (the repair aborts it there), and a
repair that fails before its precommit must not be forgotten (the lost instant stays
pending until its repair committed), or a new query commits the batch's dead letters a
second time.

No Spark and no mocks: the real ``Coordinator``, the real format committers and the
worker loop Spark tasks run (``pipeline.spark.writer.run_task`` staging real Parquet
files), fed by a small deterministic record generator.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.drivers import Coord, hudi_coords, iceberg_coords

from pipeline.commit.coordinator import Coordinator
from pipeline.commit.faults import FaultInjected, FaultPoints
from pipeline.commit.instant import BatchIdentity, Instant
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.types import DEAD_LETTER, MAIN, BatchOutcome, StagedBatch, WriteFn
from pipeline.config import PipelineConfig, parse_config
from pipeline.decode.spark import ERROR_COL
from pipeline.formats.base import PipelineTables
from pipeline.formats.registry import open_tables
from pipeline.spark.writer import collect_staged, run_task

PIPE = "dl-once"
X, Y = "query-x", "query-y"  # Spark query ids: the checkpoint's incarnation, and a new one
T0, T1 = TopicPartition("events", 0), TopicPartition("events", 1)
# planned end offsets of batches 0, 1, 2 (Spark's offset log)
E = [
    PartitionOffsets({T0: 30, T1: 20}),
    PartitionOffsets({T0: 70, T1: 45}),
    PartitionOffsets({T0: 100, T1: 70}),
]
END = E[-1]
CRASH = "after-dead-letter-commit:raise@1"


def is_bad(tp: TopicPartition, offset: int) -> bool:
    """The generator's undecodable records (several in every batch of both partitions)."""
    return offset % 7 == 3 if tp.partition == 0 else offset % 5 == 1


def records(end: Mapping[TopicPartition, int]) -> Counter[Coord]:
    return Counter((tp.topic, tp.partition, o) for tp, e in end.items() for o in range(e))


def dead_letters(end: Mapping[TopicPartition, int]) -> Counter[Coord]:
    return Counter(
        {c: n for c, n in records(end).items() if is_bad(TopicPartition(c[0], c[1]), c[2])}
    )


def decoded(tp: TopicPartition, first: int, last: int) -> pa.RecordBatch:
    """What the decode step hands a task for offsets [first, last) of ``tp``: the data
    columns, the Kafka coordinates, ``_error`` and the raw bytes of undecodable records."""
    offs = list(range(first, last))
    n = len(offs)
    bad = [is_bad(tp, o) for o in offs]
    hdr = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.record_batch(
        {
            "id": pa.array([None if b else f"{tp}-{o}" for o, b in zip(offs, bad, strict=True)]),
            "amount": pa.array(
                [None if b else o * 3 for o, b in zip(offs, bad, strict=True)], pa.int64()
            ),
            "_kafka_topic": pa.array([tp.topic] * n),
            "_kafka_partition": pa.array([tp.partition] * n, pa.int32()),
            "_kafka_offset": pa.array(offs, pa.int64()),
            "_kafka_timestamp": pa.array([None] * n, pa.timestamp("us", tz="UTC")),
            ERROR_COL: pa.array(["malformed json" if b else None for b in bad], pa.string()),
            "_raw_key": pa.array(
                [f"k{o}".encode() if b else None for o, b in zip(offs, bad, strict=True)],
                pa.binary(),
            ),
            "_raw_value": pa.array([b"{oops" if b else None for b in bad], pa.binary()),
            "_raw_headers": pa.nulls(n, hdr),
        }
    )


def workers(
    tables: PipelineTables, read_from: Mapping[TopicPartition, int] | None, end: PartitionOffsets
) -> WriteFn:
    """The coordinator's ``write``: Spark's tasks reduced to the loop they run
    (``run_task``), one task per partition reading ``[read_from, end)``."""

    def write(write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
        plan = tables.task_plan(write_id, drop_below)
        rows: list[dict[str, Any]] = []
        for seed, tp in enumerate(sorted(end), start=1):
            first = (read_from or {}).get(tp, 0)
            if end[tp] > first:
                rows += run_task(plan, iter([decoded(tp, first, end[tp])]), seed)
        return collect_staged(rows)

    return write


def count(ranges: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
    """The coverage check's oracle: the generator's log has every offset."""
    return {tp: max(0, e - s) for tp, (s, e) in ranges.items()}


def local(path: str) -> str:
    """A local path for a table's file location (``file://`` URI or plain path)."""
    return path.removeprefix("file://")


class Rig:
    """One pipeline's tables on ``tmp_path`` in one format, opened afresh per "process"."""

    def __init__(self, tmp: Path, fmt: str) -> None:
        if fmt == "hudi":
            pytest.importorskip("hudi")  # hudi-rs, the independent reader
        self.tmp, self.fmt = tmp, fmt
        sink: dict[str, Any] = {"table": "db.events"}
        if fmt == "iceberg":
            sink["catalog"] = {"warehouse": str(tmp / "warehouse")}
        else:
            sink |= {"format": "hudi", "hudi": {"basePath": str(tmp / "events")}}
        self.cfg: PipelineConfig = parse_config(
            {
                "id": PIPE,
                "source": {"bootstrapServers": "unused:9092", "topics": [T0.topic]},
                "decode": {
                    "schema": [{"name": "id", "type": "string"}, {"name": "amount", "type": "long"}]
                },
                "sink": sink,
                "checkpointLocation": str(tmp / "checkpoint"),
            }
        )

    def open(self) -> PipelineTables:
        return open_tables(self.cfg)

    def driver(self, tables: PipelineTables, faults: str = "") -> Coordinator:
        """A (re)started driver: fresh coordinator over the tables' journal, a new writer
        epoch acquired."""
        c = Coordinator(
            PIPE,
            tables.commit_tables(),
            timeline=tables.timeline(PIPE),
            faults=FaultPoints(faults),
        )
        c.acquire_epoch(owner="test")
        return c

    @staticmethod
    def run(
        c: Coordinator,
        tables: PipelineTables,
        incarnation: str,
        batch_id: int,
        start: PartitionOffsets | None,
        end: PartitionOffsets,
        read_from: Mapping[TopicPartition, int] | None = None,
    ) -> BatchOutcome:
        """One Spark batch, as the runner drives it (re-reads possible, broker counted)."""
        return c.run_batch(
            incarnation,
            batch_id,
            start,
            end,
            workers(tables, read_from if read_from is not None else start, end),
            reread=lambda s, e: workers(tables, s, e),
            count=count,
        )

    # -- reading back ------------------------------------------------------------------
    def coords(self, tables: PipelineTables) -> tuple[Counter[Coord], Counter[Coord]]:
        """(main, dead-letter) coordinates with multiplicity, read through the format's
        reader: pyiceberg scans, hudi-rs."""
        if self.fmt == "iceberg":
            return iceberg_coords(tables.main), iceberg_coords(tables.dead_letter)
        return hudi_coords(self.tmp / "events"), hudi_coords(self.tmp / "events_dead_letter")

    def referenced(self, tables: PipelineTables) -> list[str]:
        """Local paths of every data file the tables' current state references."""
        out: list[str] = []
        committers: tuple[Any, ...] = (tables.main, tables.dead_letter)  # format's own types
        for committer in committers:
            if self.fmt == "iceberg":
                table = committer.table()
                if table is not None and table.current_snapshot() is not None:
                    out += [local(t.file.file_path) for t in table.scan().plan_files()]
            else:
                hudi = committer.hudi
                if hudi.exists():
                    out += [
                        os.path.join(hudi.base, s["path"])
                        for ts in hudi.completed_commits()
                        for stats in hudi.commit_metadata(ts)["partitionToWriteStats"].values()
                        for s in stats
                    ]
        return [local(p) for p in out]

    def data_files(self) -> set[str]:
        """Every Parquet data file on storage, outside hidden directories (``.hoodie``)."""
        return {
            str(p)
            for p in self.tmp.rglob("*.parquet")
            if not any(x.startswith(".") for x in p.relative_to(self.tmp).parts)
        }

    def pending_format_instants(self, tables: PipelineTables) -> dict[str, list[str]]:
        """Hudi: instants left requested/inflight on each table's own timeline."""
        if self.fmt != "hudi":
            return {}
        out = {}
        named: tuple[tuple[str, Any], ...] = (
            (MAIN, tables.main),
            (DEAD_LETTER, tables.dead_letter),
        )
        for name, committer in named:
            hudi = committer.hudi
            if hudi.exists() and hudi.pending_times():
                out[name] = hudi.pending_times()
        return out


def ledger(main: Counter[Coord], dead: Counter[Coord]) -> dict[str, int]:
    """What differs from "every record below END once, dead letters in the dead-letter
    table": counts per kind of problem (empty: exactly once)."""
    want_dead = dead_letters(END)
    want_main = records(END) - want_dead
    both = main + dead
    problems = {
        "main rows twice or more": sum(n - 1 for n in main.values() if n > 1),
        "dead letters twice or more": sum(n - 1 for n in dead.values() if n > 1),
        "records missing": sum(1 for c in records(END) if both[c] == 0),
        "dead letters missing": sum(1 for c in want_dead if dead[c] == 0),
        "main rows missing": sum(1 for c in want_main if main[c] == 0),
        "rows not below the end or in the wrong table": sum(
            n for c, n in main.items() if c not in want_main
        )
        + sum(n for c, n in dead.items() if c not in want_dead),
    }
    return {k: v for k, v in problems.items() if v}


@dataclass
class Recovered:
    """The state a case ends in: the instant batch 1 left pending, and what the new
    driver's first batch reported."""

    rig: Rig
    pending: Instant
    first: BatchOutcome


def crash_and_recover(tmp: Path, fmt: str, main_files: str, incarnation: str) -> Recovered:
    """Batch 0 commits; batch 1 dies right after its dead-letter commit; the staged main
    files of its instant are deleted (``lost``) or not; a new driver recovers and runs to
    ``END`` in the same query (Spark replays batch 1) or a new one (batch 0 from the
    table's committed offsets)."""
    rig = Rig(tmp, fmt)

    # -- the first driver: batch 0 commits, batch 1 dies after its dead-letter commit ----
    tables = rig.open()
    c1 = rig.driver(tables, CRASH)
    assert rig.run(c1, tables, X, 0, None, E[0]).outcome == "committed"
    with pytest.raises(FaultInjected):
        rig.run(c1, tables, X, 1, E[0], E[1])
    assert tables.dead_letter is not None
    b1 = BatchIdentity(PIPE, X, 1)
    assert tables.dead_letter.is_committed(b1, E[1]) and not tables.main.is_committed(b1, E[1])
    [pending] = tables.timeline(PIPE).pending()
    inflight = pending.inflight
    assert inflight is not None and inflight.files_of(DEAD_LETTER) and inflight.files_of(MAIN)
    main_before, dead_before = rig.coords(tables)
    assert main_before == records(E[0]) - dead_letters(E[0])
    assert dead_before == dead_letters(E[1])  # batch 1's dead letters are visible already

    if main_files == "lost":  # storage lost the staged main-table files of the instant
        for f in inflight.files_of(MAIN):
            os.remove(local(f.path))

    # -- a new driver (fresh objects) recovers and runs to the same end ------------------
    tables = rig.open()
    # the source's start of a new checkpoint: the table's offsets, read before recovery
    table_offsets = tables.main.committed_offsets(PIPE)
    assert table_offsets == E[0]
    c2 = rig.driver(tables)
    if incarnation == "same-query":  # Spark replays batch 1, then plans batch 2
        first = rig.run(c2, tables, X, 1, E[0], E[1])
        rig.run(c2, tables, X, 2, E[1], E[2])
    else:  # a new query: its batch 0 reads from the table's offsets to the end
        first = rig.run(c2, tables, Y, 0, None, END, read_from=table_offsets)
    return Recovered(rig, pending, first)


CASES = pytest.mark.parametrize(
    ("fmt", "main_files", "incarnation"),
    [
        pytest.param(fmt, lost, inc, id=f"{fmt}-{lost}-{inc}")
        for fmt in ("iceberg", "hudi")
        for lost in ("intact", "lost")
        for inc in ("same-query", "new-query")
    ],
)


@CASES
def test_dead_letters_committed_at_most_once_after_a_crash_between_the_table_commits(
    tmp_path: Path, fmt: str, main_files: str, incarnation: str
) -> None:
    done = crash_and_recover(tmp_path, fmt, main_files, incarnation)
    rig = done.rig

    # -- read back through the real tables -----------------------------------------------
    tables = rig.open()
    main, dead = rig.coords(tables)
    problems = ledger(main, dead)
    assert problems == {}, (
        f"{fmt}/{main_files}/{incarnation}: {problems}; main {sum(main.values())} rows "
        f"(want {sum((records(END) - dead_letters(END)).values())}), dead letters "
        f"{sum(dead.values())} (want {sum(dead_letters(END).values())})"
    )
    referenced = rig.referenced(tables)
    missing = [p for p in referenced if not os.path.isfile(p)]
    assert missing == [], f"tables reference missing files: {missing}"
    # nothing staged is left behind (a repair's own dead-letter copies included)
    assert sorted(rig.data_files() - set(referenced)) == []
    assert tables.main.committed_offsets(PIPE) == END
    assert tables.timeline(PIPE).pending() == []

    # how recovery got there: rolled forward when intact; rolled back (dead letters kept)
    # and repaired when lost -- batch 1's main rows committed under its own identity
    action = "recommitted" if main_files == "intact" else "rolled_back"
    assert done.first.recovered == [(done.pending.time, action)]
    assert tables.main.is_committed(BatchIdentity(PIPE, X, 1), E[1])


@pytest.mark.parametrize("incarnation", ["same-query", "new-query"])
def test_hudi_repair_leaves_no_pending_instant_on_either_table(
    tmp_path: Path, incarnation: str
) -> None:
    done = crash_and_recover(tmp_path, "hudi", "lost", incarnation)
    assert done.rig.pending_format_instants(done.rig.open()) == {}


@pytest.mark.core
@pytest.mark.parametrize("fmt", ["iceberg", "hudi"])
def test_dead_letters_once_when_the_repair_fails_before_its_precommit(
    tmp_path: Path, fmt: str
) -> None:
    """Lost main files; the same query's replay starts the repair, whose re-read fails
    (broker unreachable); then the checkpoint is lost too and a new query runs to END."""
    rig = Rig(tmp_path, fmt)
    tables = rig.open()
    c1 = rig.driver(tables, CRASH)
    rig.run(c1, tables, X, 0, None, E[0])
    with pytest.raises(FaultInjected):
        rig.run(c1, tables, X, 1, E[0], E[1])
    [pending] = tables.timeline(PIPE).pending()
    assert pending.inflight is not None
    for f in pending.inflight.files_of(MAIN):
        os.remove(local(f.path))

    def unreachable(start: PartitionOffsets, end: PartitionOffsets) -> WriteFn:
        def write(write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
            raise ConnectionError("broker unreachable")

        return write

    tables = rig.open()
    c2 = rig.driver(tables)
    with pytest.raises(ConnectionError):
        c2.run_batch(X, 1, E[0], E[1], workers(tables, E[0], E[1]), reread=unreachable, count=count)

    tables = rig.open()
    table_offsets = tables.main.committed_offsets(PIPE)
    rig.run(rig.driver(tables), tables, Y, 0, None, END, read_from=table_offsets)
    main, dead = rig.coords(rig.open())
    assert ledger(main, dead) == {}
