"""The windowed exactly-once check of one table (plus its dead-letter table) against Kafka.

Memory is bounded by the window: per partition, offsets are processed in windows of
``window`` offsets; each window holds the Kafka records of that window and the table rows
with offsets in it, nothing else. Two streaming passes over the coordinates come first
(rows outside every committed range are counted there, per row, without being kept).

Per window ``[a, b)`` of a partition:
  expected   = records Kafka returns in ``[max(a, log start), min(b, log end))`` that lie
               in a committed range and not in recorded data loss
  present    = main + dead-letter rows with offsets in ``[a, b)`` (every copy)
  counts     = :func:`pipeline.ops.verify.range_ledger.count_window`
  payload    = main rows against the decoded record, dead letters against the raw bytes
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.commit.maintenance import COMPACTION_KEY
from pipeline.commit.offsets import TopicPartition
from pipeline.config import PipelineConfig
from pipeline.ops.verify.checkpoint import checkpoint_gaps
from pipeline.ops.verify.kafka import KafkaWindow, KafkaWindowReader, LogStartMoved
from pipeline.ops.verify.model import (
    BELOW_LOG_START,
    TOPIC_GONE,
    PartitionVerdict,
    RangeIssue,
    VerifyReport,
    _add_samples,
)
from pipeline.ops.verify.payload import ValueDecoder, differs
from pipeline.ops.verify.range_ledger import (
    CommitRanges,
    PartitionPlan,
    count_window,
    inside,
    intersect,
    plan_partitions,
    range_issues,
    size,
    subtract,
    windows,
)
from pipeline.ops.verify.tables import COORDS, TableSource

Progress = Callable[[str, int], None]
TIMESTAMP = "_kafka_timestamp"


@dataclass
class _Outside:
    rows: int = 0
    offsets: list[int] | None = None


def _coordinate_pass(
    sources: Iterable[TableSource], plans: dict[TopicPartition, PartitionPlan]
) -> dict[TopicPartition, PartitionVerdict]:
    """Rows outside every committed/lost range, per partition (streamed, counted only)."""
    out: dict[TopicPartition, PartitionVerdict] = {}
    for src in sources:
        for batch in src.coordinates():
            if batch.num_rows == 0:
                continue
            t = pa.Table.from_batches([batch]).select(list(COORDS))
            keys = t.group_by(["_kafka_topic", "_kafka_partition"]).aggregate([]).to_pylist()
            for key in keys:
                tp = TopicPartition(key["_kafka_topic"], key["_kafka_partition"])
                mask = pc.and_(
                    pc.equal(t["_kafka_topic"], tp.topic),
                    pc.equal(t["_kafka_partition"], tp.partition),
                )
                offs = np.asarray(t.filter(mask)["_kafka_offset"].to_numpy(), dtype=np.int64)
                plan = plans.get(tp)
                outside = offs if plan is None else offs[~inside(offs, plan.scan)]
                if outside.size:
                    v = out.setdefault(tp, PartitionVerdict())
                    v.present += int(outside.size)
                    v.unexpected += int(outside.size)
                    _add_samples(v.unexpected_offsets, np.sort(outside))
    return out


class TableCheck:
    """Checks one main table and its dead-letter table against Kafka."""

    def __init__(
        self,
        report: VerifyReport,
        main: TableSource,
        dead: TableSource | None,
        cfg: PipelineConfig,
        kafka: KafkaWindowReader,
        *,
        payload: bool,
        window: int,
        on_progress: Progress | None,
    ) -> None:
        self.report = report
        self.main = main
        self.dead = dead
        self.cfg = cfg
        self.kafka = kafka
        self.payload = payload
        self.window = max(1, int(window))
        self.on_progress = on_progress
        self.checked = 0
        self.raw = cfg.decode.raw
        self.decoder = ValueDecoder(cfg.decode) if payload and not self.raw else None
        self.main_cols = self._columns(main, self._main_payload_cols())
        report.payload_columns = [c for c in self.main_cols if c not in COORDS]
        self.dead_cols = (
            self._columns(dead, ["key", "value", TIMESTAMP])
            if dead is not None and payload
            else list(COORDS)
        )

    def _main_payload_cols(self) -> list[str]:
        if not self.payload:
            return []
        data = ["key", "value"] if self.raw else [f.name for f in self.cfg.decode.schema_]
        return [*data, TIMESTAMP]

    def _columns(self, src: TableSource, wanted: list[str]) -> list[str]:
        have = set(src.column_names())
        gone = [c for c in wanted if c not in have]
        if gone:
            self.report.notes.append(
                f"{src.name}: column(s) {', '.join(gone)} not in the table; not compared"
            )
        return [*COORDS, *[c for c in wanted if c in have]]

    # -- the whole table ------------------------------------------------------------------

    def run(self) -> VerifyReport:
        started = time.monotonic()
        commits: list[CommitRanges] = []
        foreign = rewrites = 0
        for commit_id, meta in self.main.commits():
            c = CommitRanges.from_metadata(commit_id, meta)
            if c is None and COMPACTION_KEY in meta:
                rewrites += 1  # the same rows in fewer files: nothing to check against Kafka
            elif c is None:
                foreign += 1
            elif not c.fence:
                commits.append(c)
        self.report.commits = len(commits)
        if foreign:
            self.report.notes.append(
                f"{foreign} commit(s) of {self.main.name} carry no ingest checkpoint "
                "(written by another tool)"
            )
        if rewrites:
            self.report.notes.append(
                f"{rewrites} compaction commit(s) of {self.main.name} rewrote files (no rows added)"
            )
        plans = plan_partitions(commits)
        self.report.range_issues.extend(range_issues(commits))
        newest = next((c.committed for c in commits if c.committed), {})
        self.report.range_issues.extend(checkpoint_gaps(self.cfg.checkpoint_location, newest))
        if self.dead is not None:
            self.dead = self.dead.at_most(newest)
        sources = [s for s in (self.main, self.dead) if s is not None]
        self._progress(f"{self.report.table}: counting rows outside the committed ranges")
        outside = _coordinate_pass(sources, plans)
        existing = self.kafka.check_reachable(sorted({tp.topic for tp in plans}))
        for tp, plan in plans.items():
            verdict = self._partition(tp, plan, tp.topic in existing)
            self.report.add_unverifiable(
                BELOW_LOG_START if tp.topic in existing else TOPIC_GONE, verdict.unverifiable
            )
            if tp in outside:
                verdict.add(outside.pop(tp))
            self.report.partitions[tp] = verdict
        for tp, extra in outside.items():  # partitions no commit mentions
            self.report.partitions[tp] = extra
        self.report.partitions = dict(sorted(self.report.partitions.items()))
        self.report.seconds = time.monotonic() - started
        return self.report

    def _progress(self, label: str) -> None:
        if self.on_progress is not None:
            self.on_progress(label, self.checked)

    # -- one partition ----------------------------------------------------------------------

    def _partition(self, tp: TopicPartition, plan: PartitionPlan, exists: bool) -> PartitionVerdict:
        verdict = PartitionVerdict(ranges=list(plan.committed), lost=size(plan.lost))
        if exists:
            low, high = self.kafka.watermarks(tp)
        else:
            note = f"topic {tp.topic!r} no longer exists: its offsets are unverifiable"
            if note not in self.report.notes:
                self.report.notes.append(note)
            low = high = max((e for _, e in plan.scan), default=0)
        beyond = intersect(
            plan.expected, high, max(high, plan.expected[-1][1] if plan.expected else high)
        )
        if exists:
            for s, e in beyond:
                self.report.range_issues.append(
                    RangeIssue(
                        "beyond-log-end",
                        tp,
                        s,
                        e,
                        f"committed, but the partition ends at {high} (topic recreated or "
                        "truncated?)",
                    )
                )
        for a, b in windows(plan.scan, self.window):
            while True:
                try:
                    self._window(tp, plan, a, b, low, high, verdict)
                    break
                except LogStartMoved as moved:  # retention ran meanwhile: redo this window
                    low = max(low, moved.low)
        return verdict

    def _window(
        self,
        tp: TopicPartition,
        plan: PartitionPlan,
        a: int,
        b: int,
        low: int,
        high: int,
        verdict: PartitionVerdict,
    ) -> None:
        expected_iv = intersect(plan.expected, a, b)
        below_start = intersect(plan.expected, a, min(b, low))
        kafka = self.kafka.read(tp, max(a, low), min(b, high))
        keep = inside(kafka.offsets, subtract(expected_iv, below_start))
        kafka = _take(kafka, np.nonzero(keep)[0])
        main_rows = self.main.window_rows(tp, a, b, self.main_cols)
        dead_rows = (
            self.dead.window_rows(tp, a, b, self.dead_cols) if self.dead is not None else None
        )
        present = [_offsets(main_rows)]
        if dead_rows is not None:
            present.append(_offsets(dead_rows))
        wv = count_window(kafka.offsets, np.concatenate(present), below_start)
        wv.unverifiable = size(below_start)
        if self.payload:
            self._payload(kafka, main_rows, dead_rows, wv)
        self._rows_seen(tp, kafka, main_rows, dead_rows, below_start)
        verdict.add(wv)
        self.checked += b - a
        self._progress(f"{self.report.table} {tp.topic}/{tp.partition}")

    def _rows_seen(
        self,
        tp: TopicPartition,
        kafka: KafkaWindow,
        main_rows: pa.Table,
        dead_rows: pa.Table | None,
        excused: list[tuple[int, int]],
    ) -> None:
        """Called per window with the expected records and every row read (a routed set
        counts its tables here)."""

    # -- payload ---------------------------------------------------------------------------

    def _payload(
        self,
        kafka: KafkaWindow,
        main_rows: pa.Table,
        dead_rows: pa.Table | None,
        wv: PartitionVerdict,
    ) -> None:
        bad: list[np.ndarray] = []
        fields: dict[str, int] = {}
        if main_rows.num_rows:
            bad.append(self._compare_main(kafka, main_rows, fields))
        if dead_rows is not None and dead_rows.num_rows:
            bad.append(self._compare_raw(kafka, dead_rows, ["key", "value"], fields))
        wv.mismatched_fields = {k: v for k, v in fields.items() if v}
        offsets = np.unique(np.concatenate(bad)) if bad else np.empty(0, np.int64)
        wv.mismatched = int(offsets.size)
        _add_samples(wv.mismatched_offsets, offsets)

    def _compare_main(
        self, kafka: KafkaWindow, rows: pa.Table, fields: dict[str, int]
    ) -> np.ndarray:
        if self.raw:
            return self._compare_raw(kafka, rows, ["key", "value"], fields)
        assert self.decoder is not None
        rows, idx = _align(kafka, rows)
        if rows.num_rows == 0:
            return np.empty(0, np.int64)
        uniq, pos = np.unique(idx, return_inverse=True)
        at = pa.array(uniq)
        decoded, ok = self.decoder.decode(kafka.values.take(at), kafka.keys.take(at))
        row_ok = ok[pos]
        bad = ~row_ok
        fields["_decode"] = fields.get("_decode", 0) + int(bad.sum())
        take = pa.array(pos)
        for name in self.main_cols:
            if name in COORDS or name == TIMESTAMP or name not in decoded.column_names:
                continue
            diff = differs(rows[name], decoded[name].take(take)) & row_ok
            fields[name] = fields.get(name, 0) + int(diff.sum())
            bad |= diff
        bad |= self._timestamps(kafka, rows, idx, fields)
        return np.asarray(rows["_kafka_offset"].to_numpy(), dtype=np.int64)[bad]

    def _compare_raw(
        self, kafka: KafkaWindow, rows: pa.Table, columns: list[str], fields: dict[str, int]
    ) -> np.ndarray:
        rows, idx = _align(kafka, rows)
        if rows.num_rows == 0:
            return np.empty(0, np.int64)
        take = pa.array(idx)
        bad = np.zeros(rows.num_rows, dtype=bool)
        source = {"key": kafka.keys, "value": kafka.values}
        for name in columns:
            if name not in rows.column_names:
                continue
            diff = differs(rows[name], source[name].take(take))
            fields[name] = fields.get(name, 0) + int(diff.sum())
            bad |= diff
        bad |= self._timestamps(kafka, rows, idx, fields)
        return np.asarray(rows["_kafka_offset"].to_numpy(), dtype=np.int64)[bad]

    @staticmethod
    def _timestamps(
        kafka: KafkaWindow, rows: pa.Table, idx: np.ndarray, fields: dict[str, int]
    ) -> np.ndarray:
        if TIMESTAMP not in rows.column_names:
            return np.zeros(rows.num_rows, dtype=bool)
        diff = differs(rows[TIMESTAMP], kafka.timestamps.take(pa.array(idx)))
        fields[TIMESTAMP] = fields.get(TIMESTAMP, 0) + int(diff.sum())
        return diff


def _offsets(rows: pa.Table) -> np.ndarray:
    if rows.num_rows == 0:
        return np.empty(0, np.int64)
    return np.asarray(rows["_kafka_offset"].to_numpy(), dtype=np.int64)


def _take(kafka: KafkaWindow, idx: np.ndarray) -> KafkaWindow:
    if idx.size == kafka.offsets.size:
        return kafka
    take = pa.array(idx, pa.int64())
    return KafkaWindow(
        offsets=kafka.offsets[idx],
        keys=kafka.keys.take(take),
        values=kafka.values.take(take),
        timestamps=kafka.timestamps.take(take),
    )


def _align(kafka: KafkaWindow, rows: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """The rows whose offset Kafka returned, and each one's index into ``kafka``."""
    offs = _offsets(rows)
    idx = np.searchsorted(kafka.offsets, offs)
    found = idx < kafka.offsets.size
    found[found] = kafka.offsets[idx[found]] == offs[found]
    return rows.filter(pa.array(found)), idx[found]
