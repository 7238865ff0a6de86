"""Table readers for the verifier: pyiceberg for Iceberg, hudi-rs for Hudi.

Independent of the pipeline's writers: tables are read only through the table formats'
own readers, and commit metadata only through their snapshot summaries / timelines.

Every source is pinned at construction (an Iceberg snapshot id, a Hudi instant), so a
pipeline committing meanwhile cannot make the commit walk and the row reads disagree.
Per partition, the files that can hold it are planned once (pruned by column statistics:
files are written per Kafka partition per batch); each offset window then reads only the
files whose ``_kafka_offset`` bounds overlap it, filtered to the window's rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.commit.offsets import TopicPartition

COORDS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


class TableSource(Protocol):
    name: str
    commit_id: str | None  # the pinned snapshot / instant (None: empty table)

    def column_names(self) -> list[str]: ...

    def at_most(self, committed: Mapping[TopicPartition, int]) -> TableSource:
        """This table at its newest commit whose committed offsets do not go beyond
        ``committed`` (the dead-letter table commits before the main table)."""
        ...

    def commits(self) -> list[tuple[str, Mapping[str, Any]]]:
        """``(commit id, ingest metadata)`` of the pinned history, newest first."""
        ...

    def coordinates(self) -> Iterator[pa.RecordBatch]:
        """``_kafka_topic``, ``_kafka_partition``, ``_kafka_offset`` of every row."""
        ...

    def window_rows(self, tp: TopicPartition, start: int, end: int, columns: list[str]) -> pa.Table:
        """``columns`` of the rows of ``tp`` with ``start <= _kafka_offset < end``."""
        ...


def _iceberg_filter(tp: TopicPartition, start: int | None = None, end: int | None = None) -> Any:
    """``_kafka_topic = t AND _kafka_partition = p [AND start <= _kafka_offset < end]``."""
    from pyiceberg import expressions as ex

    # pyiceberg's predicate constructors take (name, literal) at runtime; their pydantic
    # signatures confuse type checkers, hence Any
    eq: Any = ex.EqualTo
    ge: Any = ex.GreaterThanOrEqual
    lt: Any = ex.LessThan
    expr: Any = ex.And(eq("_kafka_topic", tp.topic), eq("_kafka_partition", tp.partition))
    if start is not None and end is not None:
        expr = ex.And(expr, ex.And(ge("_kafka_offset", start), lt("_kafka_offset", end)))
    return expr


def _window_mask(t: pa.Table, tp: TopicPartition, start: int, end: int) -> pa.Array:
    return pc.and_(
        pc.and_(
            pc.equal(t["_kafka_topic"], tp.topic),
            pc.equal(t["_kafka_partition"], tp.partition),
        ),
        pc.and_(pc.greater_equal(t["_kafka_offset"], start), pc.less(t["_kafka_offset"], end)),
    )


def _concat(batches: list[pa.RecordBatch], columns: list[str]) -> pa.Table:
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return pa.table({c: pa.array([], pa.null()) for c in columns}).select(columns)
    return pa.Table.from_batches(batches).select(columns)


# -- Iceberg ----------------------------------------------------------------------------


class IcebergSource:
    """An Iceberg table at one snapshot of its ``main`` lineage."""

    def __init__(self, table: Any, snapshot_id: int | None = None) -> None:
        from pyiceberg.table.snapshots import ancestors_of

        self.table = table
        self.name = ".".join(table.name())
        current = table.current_snapshot()
        if snapshot_id is not None:
            current = table.snapshot_by_id(snapshot_id)
        self._snapshot = current
        self.commit_id = str(current.snapshot_id) if current is not None else None
        self._ancestry = list(ancestors_of(current, table.metadata)) if current else []
        self._tasks: dict[TopicPartition, list[tuple[Any, int | None, int | None]]] = {}

    def at_most(self, committed: Mapping[TopicPartition, int]) -> IcebergSource:
        """The newest ancestor whose committed offsets do not go beyond ``committed``
        (the dead-letter table commits first: skip a batch the main table lacks)."""
        from pipeline.ops.verify.range_ledger import COMMITTED_KEY, parse_offsets

        for snap in self._ancestry:
            meta = _summary(snap)
            text = meta.get(COMMITTED_KEY)
            if text:
                offs = parse_offsets(text)
                if any(off > committed.get(tp, -1) for tp, off in offs.items()):
                    continue
            if snap is self._snapshot:
                return self
            return IcebergSource(self.table, snap.snapshot_id)
        return IcebergSource.empty(self.table)

    @classmethod
    def empty(cls, table: Any) -> IcebergSource:
        src = cls(table)
        src._snapshot, src.commit_id, src._ancestry = None, None, []
        return src

    def column_names(self) -> list[str]:
        return [f.name for f in self.table.schema().fields]

    def commits(self) -> list[tuple[str, Mapping[str, Any]]]:
        from pipeline.ops.verify.range_ledger import expired_history

        own = [(str(s.snapshot_id), _summary(s)) for s in self._ancestry]
        return [*own, *expired_history(own)]  # history expired before the oldest retained

    def coordinates(self) -> Iterator[pa.RecordBatch]:
        if self._snapshot is None:
            return
        scan = self.table.scan(snapshot_id=self._snapshot.snapshot_id, selected_fields=COORDS)
        yield from scan.to_arrow_batch_reader()

    def _partition_tasks(self, tp: TopicPartition) -> list[tuple[Any, int | None, int | None]]:
        from pyiceberg.conversions import from_bytes
        from pyiceberg.types import LongType

        if tp not in self._tasks:
            self._tasks.clear()  # one partition at a time: bounded planning state
            assert self._snapshot is not None
            scan = self.table.scan(
                snapshot_id=self._snapshot.snapshot_id,
                row_filter=_iceberg_filter(tp),
            )
            field_id = self.table.schema().find_field("_kafka_offset").field_id
            tasks = []
            for task in scan.plan_files():
                lo = (task.file.lower_bounds or {}).get(field_id)
                hi = (task.file.upper_bounds or {}).get(field_id)
                tasks.append(
                    (
                        task,
                        int(from_bytes(LongType(), lo)) if lo is not None else None,
                        int(from_bytes(LongType(), hi)) if hi is not None else None,
                    )
                )
            self._tasks[tp] = tasks
        return self._tasks[tp]

    def window_rows(self, tp: TopicPartition, start: int, end: int, columns: list[str]) -> pa.Table:
        from pyiceberg.io.pyarrow import ArrowScan

        if self._snapshot is None:
            return _concat([], columns)
        tasks = [
            t
            for t, lo, hi in self._partition_tasks(tp)
            if (lo is None or lo < end) and (hi is None or hi >= start)
        ]
        if not tasks:
            return _concat([], columns)
        row_filter = _iceberg_filter(tp, start, end)
        schema = self.table.schemas().get(self._snapshot.schema_id, self.table.schema())
        scan = ArrowScan(self.table.metadata, self.table.io, schema.select(*columns), row_filter)
        return _concat(list(scan.to_record_batches(tasks)), columns)


def _summary(snapshot: Any) -> Mapping[str, Any]:
    return snapshot.summary.additional_properties if snapshot.summary is not None else {}


# -- Hudi -------------------------------------------------------------------------------


class HudiSource:
    """A Hudi copy-on-write table as of one completed commit, read with hudi-rs."""

    def __init__(
        self, base: str, options: Mapping[str, str] | None = None, as_of: str | None = None
    ) -> None:
        import hudi

        self.base = base
        self.options = dict(options or {})
        builder = hudi.HudiTableBuilder.from_base_uri(base).with_storage_options(self.options)
        self._table = builder.build()
        self.name = base
        timeline = self._table.get_timeline()
        self._timeline = timeline
        instants = [
            i
            for i in timeline.get_completed_commits(desc=True)
            if as_of is None or i.timestamp <= as_of
        ]
        self._instants = instants
        self.commit_id = instants[0].timestamp if instants else None
        self._slices: dict[TopicPartition, list[tuple[Any, int | None, int | None]]] = {}

    def at_most(self, committed: Mapping[TopicPartition, int]) -> HudiSource:
        from pipeline.ops.verify.range_ledger import COMMITTED_KEY, parse_offsets

        for instant, meta in self._own_commits():
            text = meta.get(COMMITTED_KEY)
            if text and any(off > committed.get(tp, -1) for tp, off in parse_offsets(text).items()):
                continue
            if instant == self.commit_id:
                return self
            return HudiSource(self.base, self.options, instant)
        src = HudiSource(self.base, self.options)
        src._instants, src.commit_id = [], None
        return src

    def column_names(self) -> list[str]:
        return list(self._table.get_schema().names)

    def _own_commits(self) -> list[tuple[str, Mapping[str, Any]]]:
        out: list[tuple[str, Mapping[str, Any]]] = []
        for instant in self._instants:
            doc = json.loads(self._timeline.get_instant_metadata_in_json(instant))
            out.append((instant.timestamp, dict(doc.get("extraMetadata") or {})))
        return out

    def commits(self) -> list[tuple[str, Mapping[str, Any]]]:
        from pipeline.ops.verify.range_ledger import expired_history

        own = self._own_commits()
        return [*own, *expired_history(own)]  # commits trimmed off the active timeline

    def _options(self, filters: list[tuple[str, str, str]], projection: list[str] | None) -> Any:
        import hudi

        assert self.commit_id is not None
        return hudi.HudiReadOptions(filters=filters, projection=projection).with_as_of_timestamp(
            self.commit_id
        )

    def coordinates(self) -> Iterator[pa.RecordBatch]:
        if self.commit_id is None:
            return
        yield from self._table.read_stream(self._options([], list(COORDS)))

    def _partition_slices(self, tp: TopicPartition) -> list[tuple[Any, int | None, int | None]]:
        if tp not in self._slices:
            self._slices.clear()
            opts = self._options(
                [("_kafka_topic", "=", tp.topic), ("_kafka_partition", "=", str(tp.partition))],
                None,
            )
            out = []
            for s in self._table.get_file_slices(opts):
                stats = (s.base_file_column_stats() or {}).get("_kafka_offset")
                lo = stats[0][0].as_py() if stats and stats[0] is not None else None
                hi = stats[1][0].as_py() if stats and stats[1] is not None else None
                out.append((s, lo, hi))
            self._slices[tp] = out
        return self._slices[tp]

    def window_rows(self, tp: TopicPartition, start: int, end: int, columns: list[str]) -> pa.Table:
        if self.commit_id is None:
            return _concat([], columns)
        slices = [
            s
            for s, lo, hi in self._partition_slices(tp)
            if (lo is None or lo < end) and (hi is None or hi >= start)
        ]
        if not slices:
            return _concat([], columns)
        need = list(dict.fromkeys([*columns, *COORDS]))
        opts = self._options(
            [
                ("_kafka_topic", "=", tp.topic),
                ("_kafka_partition", "=", str(tp.partition)),
                ("_kafka_offset", ">=", str(start)),
                ("_kafka_offset", "<", str(end)),
            ],
            need,
        )
        reader = self._table.create_file_group_reader_with_options(opts)
        batches = [b for s in slices for b in reader.read_file_slice_stream(s, opts)]
        t = _concat(batches, need)
        if t.num_rows:  # the filters are pushed down; keep the window exact regardless
            t = t.filter(_window_mask(t, tp, start, end))
        return t.select(columns)
