"""Worker side of a batch: ``mapInArrow`` stages data files and reports what they cover.

Each task splits its decoded rows into table rows and dead-letter rows, writes them as
data files of the two tables (format adapter's writer, invisible until the coordinator
commits), and emits one result row per staged file plus one per (topic, partition) with
the offsets it saw. Memory stays bounded: rows are flushed to a file every
``flush_bytes`` of Arrow data.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.commit.offsets import OffsetRange
from pipeline.commit.types import PartitionStats, StagedBatch
from pipeline.decode.arrow import refine_batch
from pipeline.decode.json_values import RecordParser
from pipeline.decode.spark import ERROR_COL
from pipeline.decode.unknown_fields import MAX_NAMES, UNKNOWN_COL, tally
from pipeline.spark.routes import Router
from pipeline.spark.settle import settle

RESULT_DDL = (
    "kind STRING, payload BINARY, topic STRING, partition INT, "
    "min_offset BIGINT, max_offset BIGINT, records BIGINT, dropped BIGINT, table STRING"
)
RESULT_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("payload", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),
        ("records", pa.int64()),
        ("dropped", pa.int64()),
        ("table", pa.string()),  # a routed data file: the name of its table in the set
    ]
)

# (context, batches, unique file-name seed) -> serialized data files
FileWriter = Callable[[Any, Iterable[pa.RecordBatch], int], list[bytes]]


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task needs; pickled into the mapInArrow closure."""

    write_files: FileWriter
    main_ctx: Any
    main_columns: tuple[str, ...]
    dead_letter_ctx: Any | None
    dead_letter_columns: tuple[str, ...]
    flush_bytes: int = 128 * 1024 * 1024
    # (topic, partition) -> first offset not yet in the table; rows below are dropped
    drop_below: dict[tuple[str, int], int] = field(default_factory=dict)
    faults: str | None = None  # armed fault points (only "mid-write" acts here)
    # writer for the dead-letter table when it differs from the main table's
    dead_letter_write_files: FileWriter | None = None
    # several main tables: the router picks each row's table, an index into ``routed``
    # ((name in the set, write context) per table; ``main_ctx`` is unused)
    router: Router | None = None
    routed: tuple[tuple[str, Any], ...] = ()


class _Buffer:
    def __init__(self, plan: TaskPlan, ctx: Any, kind: str, seed: int) -> None:
        self.plan, self.ctx, self.kind, self.seed = plan, ctx, kind, seed
        self.batches: list[pa.RecordBatch] = []
        self.nbytes = 0
        self.flushes = 0
        self.out: list[bytes] = []

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.batches.append(batch)
        self.nbytes += batch.nbytes
        if self.nbytes >= self.plan.flush_bytes:
            self.flush()

    def flush(self) -> None:
        if not self.batches:
            return
        # 1,000 flushes per task attempt keep file-name seeds unique across retries.
        write = self.plan.write_files
        if self.kind == "dead_letter" and self.plan.dead_letter_write_files is not None:
            write = self.plan.dead_letter_write_files
        self.out += write(self.ctx, self.batches, self.seed * 1000 + self.flushes)
        self.flushes += 1
        self.batches, self.nbytes = [], 0


class _RoutedBuffers:
    """One buffer per main table of a routed set, opened on its first row."""

    def __init__(self, plan: TaskPlan, seed: int) -> None:
        assert plan.router is not None
        self.plan, self.router, self.seed = plan, plan.router, seed
        self.buffers: dict[int, _Buffer] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        columns = list(self.plan.main_columns)
        for index, rows in self.router.split(batch):
            buffer = self.buffers.get(index)
            if buffer is None:
                ctx = self.plan.routed[index][1]
                buffer = self.buffers[index] = _Buffer(self.plan, ctx, "data", self.seed)
            buffer.add(rows.select(columns))

    def flush(self) -> None:
        for buffer in self.buffers.values():
            buffer.flush()

    def out(self) -> list[tuple[str, bytes]]:
        """``(table name, descriptor)`` of every file staged."""
        names = self.plan.routed
        return [(names[i][0], d) for i, b in sorted(self.buffers.items()) for d in b.out]


def _stats(batch: pa.RecordBatch, acc: dict[tuple[str, int], list[int]], slot: int) -> None:
    """Per partition: [min offset, max offset, rows written, rows dropped]; ``slot`` 2 or 3."""
    if batch.num_rows == 0:
        return
    cols = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
    table = pa.Table.from_batches([batch.select(cols)])
    grouped = table.group_by(cols[:2]).aggregate(
        [("_kafka_offset", "min"), ("_kafka_offset", "max"), ("_kafka_offset", "count")]
    )
    for row in grouped.to_pylist():
        key = (row["_kafka_topic"], row["_kafka_partition"])
        lo, hi, n = row["_kafka_offset_min"], row["_kafka_offset_max"], row["_kafka_offset_count"]
        cur = acc.setdefault(key, [lo, hi, 0, 0])
        cur[0], cur[1] = min(cur[0], lo), max(cur[1], hi)
        cur[slot] += n


def _drop_committed(
    batch: pa.RecordBatch, drop_below: dict[tuple[str, int], int]
) -> tuple[pa.RecordBatch, pa.RecordBatch | None]:
    """Split off rows at offsets the table already holds (self-correction, invariant 5)."""
    if not drop_below:
        return batch, None
    offsets = batch.column("_kafka_offset")
    keep = None
    # one vectorised comparison per partition present in the batch (few per task)
    parts = pa.Table.from_batches([batch.select(["_kafka_topic", "_kafka_partition"])])
    for key in parts.group_by(["_kafka_topic", "_kafka_partition"]).aggregate([]).to_pylist():
        floor = drop_below.get((key["_kafka_topic"], key["_kafka_partition"]))
        if floor is None:
            continue
        mine = pc.and_(
            pc.equal(batch.column("_kafka_topic"), key["_kafka_topic"]),
            pc.equal(batch.column("_kafka_partition"), key["_kafka_partition"]),
        )
        below = pc.and_(mine, pc.less(offsets, floor))
        keep = pc.invert(below) if keep is None else pc.and_(keep, pc.invert(below))
    if keep is None or pc.all(keep).as_py():
        return batch, None
    return batch.filter(keep), batch.filter(pc.invert(keep))


def run_task(
    plan: TaskPlan, batches: Iterator[pa.RecordBatch], seed: int, faults: str | None = None
) -> list[dict[str, Any]]:
    """Stage ``batches`` as data files; the result rows (``RESULT_SCHEMA``) describe them."""
    main = _Buffer(plan, plan.main_ctx, "data", seed)
    routed = _RoutedBuffers(plan, seed) if plan.router is not None else None
    dead = (
        _Buffer(plan, plan.dead_letter_ctx, "dead_letter", seed) if plan.dead_letter_ctx else None
    )
    acc: dict[tuple[str, int], list[int]] = {}
    dead_rows = 0
    unknown_rows, unknown_names = 0, set[str]()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        batch, dropped = _drop_committed(batch, plan.drop_below)
        if dropped is not None:
            _stats(dropped, acc, 3)
        if batch.num_rows == 0:
            continue
        _stats(batch, acc, 2)
        if UNKNOWN_COL in batch.schema.names:
            carrying, seen = tally(batch.column(UNKNOWN_COL))
            unknown_rows += carrying
            unknown_names.update(seen)
        bad = pc.is_valid(batch.column(ERROR_COL))
        n_bad = pc.sum(bad).as_py() or 0
        good_batch = batch if n_bad == 0 else batch.filter(pc.invert(bad))
        if routed is not None:
            routed.add(good_batch)
        else:
            main.add(good_batch.select(list(plan.main_columns)))
        if n_bad:
            dead_rows += n_bad
            if dead is None:
                raise RuntimeError("undecodable records but no dead-letter table configured")
            dead.add(_dead_letter_rows(batch.filter(bad), plan.dead_letter_columns))
    main.flush()
    if routed is not None:
        routed.flush()
    if faults:
        from pipeline.commit.faults import FaultPoint, FaultPoints

        # files staged, result not returned: the task attempt dies, Spark retries it, and
        # only the retry's files reach the precommit (no duplicates)
        FaultPoints(faults).hit(FaultPoint.MID_WRITE, None)
    if dead is not None:
        dead.flush()
    rows: list[dict[str, Any]] = [{"kind": "data", "payload": p, "table": None} for p in main.out]
    if routed is not None:
        rows += [{"kind": "data", "payload": p, "table": t} for t, p in routed.out()]
    if dead is not None:
        rows += [{"kind": "dead_letter", "payload": p} for p in dead.out]
    rows += [
        {
            "kind": "stats",
            "topic": t,
            "partition": p,
            "min_offset": v[0],
            "max_offset": v[1],
            "records": v[2],
            "dropped": v[3],
        }
        for (t, p), v in sorted(acc.items())
    ]
    rows.append({"kind": "dead_letter_count", "records": dead_rows})
    if unknown_rows:
        listed = json.dumps(sorted(unknown_names)[:MAX_NAMES]).encode()
        rows.append({"kind": "unknown_fields", "records": unknown_rows, "payload": listed})
    return rows


#: dead-letter column -> the decoded column it is taken from (others: the same name)
DEAD_LETTER_SOURCES = {
    "key": "_raw_key",
    "value": "_raw_value",
    "headers": "_raw_headers",
    "error": ERROR_COL,
}


def _dead_letter_rows(batch: pa.RecordBatch, columns: tuple[str, ...]) -> pa.RecordBatch:
    arrays, names = [], []
    for name in columns:
        arrays.append(batch.column(DEAD_LETTER_SOURCES.get(name, name)))
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _attempt(plan: TaskPlan) -> tuple[int, str | None]:
    """(file-name seed, armed faults) of the running task attempt."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    # taskAttemptId is unique per attempt in the application: retried tasks never
    # overwrite (or get confused with) a failed attempt's files.
    seed = ctx.taskAttemptId() if ctx is not None else 0
    armed = plan.faults if ctx is not None and ctx.attemptNumber() == 0 else None
    return seed, armed


def _batches_task(
    plan: TaskPlan, prepare: Callable[[pa.RecordBatch], pa.RecordBatch] | None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` task: each incoming batch through ``prepare``, then staged files."""

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        seed, armed = _attempt(plan)
        if prepare is not None:
            batches = (prepare(b) for b in batches if b.num_rows)
        rows = run_task(plan, batches, seed, armed)
        settle()  # first task of this worker process: everything is imported by now
        yield pa.RecordBatch.from_pylist(rows, schema=RESULT_SCHEMA)

    return task


def make_task_function(
    plan: TaskPlan, parser: RecordParser | None = None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Task over the Spark decoder's output; ``parser``: the decoded columns' parser, which
    names the exact path in a dead letter's reason (``refine_batch``)."""
    return _batches_task(plan, None if parser is None else partial(refine_batch, parser=parser))


def rows_decoder(decoder: Any) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """The arrow engine's decode (``decoder``: an ``ArrowDecoder``) of a batch of raw Kafka
    rows as Spark hands them to ``mapInArrow``: its timestamps in the session's time zone,
    cast back to the reader's own schema, which the decoder expects."""
    from pipeline.source.reader import record_schema

    schema = record_schema(decoder.include_headers)
    return lambda b: decoder.decode(b.cast(schema))


def make_decode_task_function(
    plan: TaskPlan, decoder: Any
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Task over the batch DataFrame's raw rows (Spark's Kafka source): the arrow engine's
    decode (:func:`rows_decoder`), then staged files."""
    return _batches_task(plan, rows_decoder(decoder))


@dataclass(frozen=True)
class ReadPlan:
    """What a ``decode.engine: arrow`` task reads: its group of offset ranges, and how."""

    groups: list[list[OffsetRange]]  # task i reads groups[i] with one consumer
    consumer_conf: dict[str, Any]
    decoder: Any  # pipeline.decode.arrow.ArrowDecoder
    include_headers: bool = False
    fail_on_data_loss: bool = True
    stall_timeout_s: float = 120.0


def make_read_task_function(
    plan: TaskPlan, read: ReadPlan
) -> Callable[[Iterable[int]], Iterator[dict[str, Any]]]:
    """Task over ``parallelize(range(len(read.groups)))``: Kafka -> Arrow decode -> staged
    files, all in the Python worker. A plain RDD job, not a DataFrame: nothing to analyse,
    optimise or code-generate per batch, and the few result rows travel pickled."""

    def task(ids: Iterable[int]) -> Iterator[dict[str, Any]]:
        from pipeline.source.reader import read_ranges

        seed, armed = _attempt(plan)
        mine = list(ids)

        def decoded() -> Iterator[pa.RecordBatch]:
            for i in mine:
                for raw in read_ranges(
                    read.consumer_conf,
                    read.groups[i],
                    include_headers=read.include_headers,
                    fail_on_data_loss=read.fail_on_data_loss,
                    stall_timeout_s=read.stall_timeout_s,
                ):
                    yield read.decoder.decode(raw)

        rows = run_task(plan, decoded(), seed, armed)
        settle()
        yield from rows

    return task


def collect_staged(rows: Iterable[Any]) -> StagedBatch:
    staged = StagedBatch()
    for r in rows:
        kind = r["kind"]
        if kind == "data" and r["table"] is not None:
            staged.routed_files.append((r["table"], bytes(r["payload"])))
        elif kind == "data":
            staged.data_files.append(bytes(r["payload"]))
        elif kind == "dead_letter":
            staged.dead_letter_files.append(bytes(r["payload"]))
        elif kind == "stats":
            staged.stats.append(
                PartitionStats(
                    r["topic"],
                    r["partition"],
                    r["min_offset"],
                    r["max_offset"],
                    r["records"],
                    r["dropped"] or 0,
                )
            )
        elif kind == "dead_letter_count":
            staged.dead_letter_records += r["records"]
        elif kind == "unknown_fields":
            staged.unknown_field_records += r["records"]
            names = set(staged.unknown_fields) | set(json.loads(bytes(r["payload"])))
            staged.unknown_fields = sorted(names)[:MAX_NAMES]
    # Two tasks may read sub-ranges of one partition: merge their statistics.
    merged: dict[tuple[str, int], PartitionStats] = {}
    for s in staged.stats:
        k = (s.topic, s.partition)
        m = merged.get(k)
        merged[k] = (
            s
            if m is None
            else PartitionStats(
                s.topic,
                s.partition,
                min(m.min_offset, s.min_offset),
                max(m.max_offset, s.max_offset),
                m.records + s.records,
                m.dropped + s.dropped,
            )
        )
    staged.stats = [merged[k] for k in sorted(merged)]
    return staged
