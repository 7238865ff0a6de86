"""``ingest verify`` for a routed set (``sink.routes``): exactly once ACROSS its tables.

A routed set writes each record to one of several main tables (or the shared dead-letter
table), and every main table commits every batch with the full checkpoint. So the set is
checked as one table: :class:`SetSource` reads the main tables together (their rows
concatenated, each tagged with the table it was read from and the table its routing
column names), and the ordinary windowed check counts the set's records against Kafka
once. :class:`RoutedCheck` then counts, per window, what each table holds: its records,
the records routed to it that no table holds, rows the set holds twice, and rows lying in
a table their route does not name (:class:`~pipeline.ops.verify.model.TableVerdict`).

The committed ranges come from the set's first table (``sink.table``); every other table
is pinned at its newest commit within them (a pipeline committing meanwhile commits the
tables one after another) and a table whose committed offsets stop short of the first
one's is a range issue naming it (a crash between table commits not yet rolled forward).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.commit.offsets import TopicPartition
from pipeline.config import PipelineConfig
from pipeline.ops.verify.engine import Progress, TableCheck
from pipeline.ops.verify.kafka import KafkaWindow, KafkaWindowReader
from pipeline.ops.verify.model import SAMPLE_LIMIT, RangeIssue, TableVerdict, VerifyReport
from pipeline.ops.verify.payload import ValueDecoder
from pipeline.ops.verify.range_ledger import CommitRanges, inside
from pipeline.ops.verify.tables import TableSource, _concat
from pipeline.spark.routes import Router

__all__ = ["ROUTE_COL", "TABLE_COL", "RoutedCheck", "SetSource", "newest_committed"]

TABLE_COL = "_verify_table"  # the route index of the table a row was read from
ROUTE_COL = "_verify_route"  # the route index the row's routing column names
TOPIC_COLUMN = "_kafka_topic"
DEAD = -1  # a record the route sends to the dead-letter table (it does not decode)
UNKNOWN = -2  # a record whose route cannot be told (counted for the set only)

Member = tuple[int, str, TableSource]  # (route index, table name, its reader)


def newest_committed(src: TableSource) -> dict[TopicPartition, int]:
    """The cumulative committed offsets of ``src``'s newest checkpointed commit."""
    for commit_id, meta in src.commits():
        c = CommitRanges.from_metadata(commit_id, meta)
        if c is not None and c.committed and not c.fence:
            return dict(c.committed)
    return {}


def _route_indices(router: Router, column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    batch = pa.RecordBatch.from_arrays([column], [router.column])
    return np.asarray(router.table_indices(batch).to_numpy(zero_copy_only=False), dtype=np.int64)


class SetSource:
    """The main tables of a routed set read as one :class:`TableSource`: commits are the
    first table's, rows every table's, tagged with :data:`TABLE_COL` and :data:`ROUTE_COL`."""

    def __init__(self, members: Sequence[Member], router: Router) -> None:
        if not members:
            raise ValueError("a routed set has at least one main table")
        self.members = sorted(members, key=lambda m: m[0])
        self.router = router
        self.name = f"routed set of {len(self.members)} tables"
        self.commit_id = self.members[0][2].commit_id

    def column_names(self) -> list[str]:
        """The columns every table of the set has (in the first table's order)."""
        first, *rest = (m[2].column_names() for m in self.members)
        common = set(first).intersection(*rest)
        return [c for c in first if c in common]

    def at_most(self, committed: Mapping[TopicPartition, int]) -> SetSource:
        return SetSource([(i, n, s.at_most(committed)) for i, n, s in self.members], self.router)

    def pinned(self, committed: Mapping[TopicPartition, int]) -> SetSource:
        """The first table as it is, every other one at its newest commit within
        ``committed`` (the first table's)."""
        first, *rest = self.members
        return SetSource([first, *((i, n, s.at_most(committed)) for i, n, s in rest)], self.router)

    def commits(self) -> list[tuple[str, Mapping[str, Any]]]:
        return self.members[0][2].commits()

    def coordinates(self) -> Iterator[pa.RecordBatch]:
        for _, _, src in self.members:
            yield from src.coordinates()

    def window_rows(self, tp: TopicPartition, start: int, end: int, columns: list[str]) -> pa.Table:
        need = columns if self.router.column in columns else [*columns, self.router.column]
        parts: list[pa.Table] = []
        for index, _, src in self.members:
            rows = src.window_rows(tp, start, end, need)
            if rows.num_rows == 0:
                continue
            route = _route_indices(self.router, rows[self.router.column])
            tagged = rows.select(columns)
            tagged = tagged.append_column(TABLE_COL, pa.array(np.full(rows.num_rows, index)))
            parts.append(tagged.append_column(ROUTE_COL, pa.array(route)))
        if not parts:
            empty = _concat([], columns)
            empty = empty.append_column(TABLE_COL, pa.array([], pa.int64()))
            return empty.append_column(ROUTE_COL, pa.array([], pa.int64()))
        return pa.concat_tables(parts, promote_options="permissive")


def _samples(into: list[str], tp: TopicPartition, offsets: np.ndarray) -> None:
    room = SAMPLE_LIMIT - len(into)
    if room > 0:
        into.extend(f"{tp.topic}/{tp.partition}@{int(o)}" for o in offsets[:room])


def _offsets(rows: pa.Table | None) -> np.ndarray:
    if rows is None or rows.num_rows == 0:
        return np.empty(0, np.int64)
    return np.asarray(rows["_kafka_offset"].to_numpy(), dtype=np.int64)


class RoutedCheck(TableCheck):
    """The set's check against Kafka plus what each of its tables holds."""

    def __init__(
        self,
        report: VerifyReport,
        main: SetSource,
        dead: TableSource | None,
        dead_name: str | None,
        cfg: PipelineConfig,
        kafka: KafkaWindowReader,
        *,
        payload: bool,
        window: int,
        on_progress: Progress | None,
    ) -> None:
        super().__init__(
            report, main, dead, cfg, kafka, payload=payload, window=window, on_progress=on_progress
        )
        self.set = main
        self.router = main.router
        self.verdicts = {i: TableVerdict(name, i) for i, name, _ in main.members}
        self.dead_verdict = TableVerdict(dead_name or "dead letters", None)
        report.tables = [*self.verdicts.values(), *([self.dead_verdict] if dead else [])]
        self._route_decoder: ValueDecoder | None = None
        if self.router.column != TOPIC_COLUMN and not self.raw:
            self._route_decoder = self.decoder or ValueDecoder(self.cfg.decode)

    def run(self) -> VerifyReport:
        newest = newest_committed(self.set.members[0][2])
        for _, name, src in self.set.members[1:]:
            own = newest_committed(src)
            for tp, off in sorted(newest.items()):
                if own.get(tp, -1) < off:
                    self.report.range_issues.append(
                        RangeIssue(
                            "table-behind",
                            tp,
                            own.get(tp, 0),
                            off,
                            f"table {name} has not committed these offsets; "
                            f"{self.set.members[0][1]} has",
                        )
                    )
        self.main = self.set = self.set.pinned(newest)
        return super().run()

    def _rows_seen(
        self,
        tp: TopicPartition,
        kafka: KafkaWindow,
        main_rows: pa.Table,
        dead_rows: pa.Table | None,
        excused: list[tuple[int, int]],
    ) -> None:
        main_off, dead_off = _offsets(main_rows), _offsets(dead_rows)
        uniq, counts = np.unique(np.concatenate([main_off, dead_off]), return_counts=True)
        held_twice = uniq[counts > 1]
        tables = np.asarray(main_rows[TABLE_COL].to_numpy(), dtype=np.int64)
        routes = np.asarray(main_rows[ROUTE_COL].to_numpy(), dtype=np.int64)
        for index, v in self.verdicts.items():
            mine = tables == index
            self._count(v, tp, kafka, main_off[mine], held_twice, excused)
            wrong = main_off[mine & (routes != index)]
            v.misrouted += int(wrong.size)
            _samples(v.misrouted_offsets, tp, np.sort(wrong))
        if dead_rows is not None:
            self._count(self.dead_verdict, tp, kafka, dead_off, held_twice, excused)
        missing = kafka.offsets[~np.isin(kafka.offsets, uniq)]
        if missing.size:
            routed = self._routes_of(tp, kafka, missing)
            for index, v in [*self.verdicts.items(), (DEAD, self.dead_verdict)]:
                lacking = missing[routed == index]
                v.missing += int(lacking.size)
                _samples(v.missing_offsets, tp, lacking)

    @staticmethod
    def _count(
        v: TableVerdict,
        tp: TopicPartition,
        kafka: KafkaWindow,
        offsets: np.ndarray,
        held_twice: np.ndarray,
        excused: list[tuple[int, int]],
    ) -> None:
        v.records += int(offsets.size)
        twice = offsets[np.isin(offsets, held_twice)]
        v.duplicated += int(twice.size)
        _samples(v.duplicated_offsets, tp, np.unique(twice))
        extra = offsets[~np.isin(offsets, kafka.offsets)]
        if excused:
            extra = extra[~inside(extra, excused)]
        v.unexpected += int(extra.size)

    def _routes_of(self, tp: TopicPartition, kafka: KafkaWindow, missing: np.ndarray) -> np.ndarray:
        """The route index of each missing record (:data:`DEAD`: it does not decode;
        :data:`UNKNOWN`: the route cannot be told without the table's columns)."""
        if self.router.column == TOPIC_COLUMN:
            return np.full(missing.size, self.router.table_of(tp.topic), np.int64)
        if self._route_decoder is None:
            return np.full(missing.size, UNKNOWN, np.int64)
        at = pa.array(np.searchsorted(kafka.offsets, missing))
        decoded, ok = self._route_decoder.decode(kafka.values.take(at), kafka.keys.take(at))
        if self.router.column not in decoded.column_names:
            return np.full(missing.size, UNKNOWN, np.int64)
        routes = _route_indices(self.router, decoded[self.router.column])
        return np.where(ok, routes, DEAD)
