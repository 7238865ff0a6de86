"""Commit-cost growth: many small commits to one table through the real protocol.

A :class:`~pipeline.app.Pipeline` is built from a bench configuration *without* Spark; its
coordinator runs batch after batch (``Coordinator.run_batch``: recover/dedupe checks,
REQUESTED, staging, INFLIGHT precommit, the table commit, COMPLETED) and each batch's
files are staged by the real worker code (``pipeline.spark.writer.run_task`` with the
tables' task plan: tiny Parquet / Hudi base files of ``ROWS`` rows). The journal is
purged every 50 batches as ``Pipeline.process_batch`` does.

Per commit it records the protocol time (everything but staging) and the ``precommit``
and ``commit`` phases; the report compares window medians (commits 1-20 against
990-1010 in the full preset) because single commits are noisy. Flat means the late window
stays within 1.5x of the early one.

Drift control: a host's speed drifts over the minutes between commit 10 and commit 1,000
(seen here: the same early window measured 28 ms and 37 ms in two runs). So the late
window is measured *interleaved* with the early window of a second, fresh table of the
same configuration: aged commit 990, young commit 1, aged 991, young 2, ... -- both see
the same host. The verdict compares those two windows; the aged table's own commits 1-20
(measured minutes earlier) are reported too. Staging the same tiny file is the same work
every time, so its window ratio is a second control.
"""

from __future__ import annotations

import math
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from lab.bench import stats
from lab.bench.context import Context
from lab.bench.context import rounded as _round
from lab.bench.runs import RunSpec, pipeline_config
from pipeline.columns import HEADERS_TYPE_NAME  # noqa: F401  (documents the column)
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.types import StagedBatch
from pipeline.decode.spark import ERROR_COL
from pipeline.formats.registry import table_format

ROWS = 20
TOPIC = "bench-commits"
PURGE_EVERY = 50

_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@dataclass(frozen=True)
class CatalogUnderTest:
    """An Iceberg catalog the commits go through: ``label`` in the report, ``settings``
    the ``sink.catalog`` block (its name made unique per table, and its warehouse the
    table's work directory unless it names one)."""

    label: str
    settings: dict[str, Any]

    def block(self, workdir: Path) -> dict[str, Any]:
        return {
            "warehouse": str(workdir / "warehouse"),
            **self.settings,
            "name": f"bench_{uuid.uuid4().hex[:8]}",
        }


@dataclass
class CommitSeries:
    """Per-commit seconds, in commit order (commit 1 first)."""

    format: str
    catalog: str
    protocol: list[float] = field(default_factory=list)  # run_batch minus staging
    precommit: list[float] = field(default_factory=list)
    commit: list[float] = field(default_factory=list)
    staging: list[float] = field(default_factory=list)  # constant work: the load control
    diagnostics: dict[str, int] = field(default_factory=dict)  # what a commit has to read


def _decoded_rows(first_offset: int, rows: int) -> pa.RecordBatch:
    """Rows shaped like ``pipeline.decode.spark.decode``'s output for well-formed events."""
    ts = datetime(2024, 6, 1, tzinfo=UTC)
    n = rows
    cols: dict[str, pa.Array] = {
        "event_id": pa.array([str(uuid.uuid4()) for _ in range(n)]),
        "user_id": pa.array([f"user-{i % 1000:06d}" for i in range(n)]),
        "event_type": pa.array(["view"] * n),
        "amount": pa.array([None] * n, pa.float64()),
        "currency": pa.array([None] * n, pa.string()),
        "ts": pa.array([ts] * n, pa.timestamp("us", tz="UTC")),
        "session_id": pa.array([str(uuid.uuid4())] * n),
        "page": pa.array(["/"] * n),
        "device": pa.array(["desktop"] * n),
        "country": pa.array(["DE"] * n),
        "_kafka_topic": pa.array([TOPIC] * n),
        "_kafka_partition": pa.array([0] * n, pa.int32()),
        "_kafka_offset": pa.array(range(first_offset, first_offset + n), pa.int64()),
        "_kafka_timestamp": pa.array([ts] * n, pa.timestamp("us", tz="UTC")),
        ERROR_COL: pa.array([None] * n, pa.string()),
        "_raw_key": pa.array([None] * n, pa.binary()),
        "_raw_value": pa.array([None] * n, pa.binary()),
        "_raw_headers": pa.array([None] * n, _HEADERS),
    }
    return pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))


class _CommitRunner:
    """One fresh table of ``fmt`` driven batch by batch through the real coordinator."""

    def __init__(self, fmt: str, workdir: Path, catalog: CatalogUnderTest | None) -> None:
        from pipeline.app import Pipeline
        from pipeline.config import parse_config

        name = f"commits-{fmt}-{uuid.uuid4().hex[:6]}"
        raw_cfg: dict[str, Any] = pipeline_config(
            RunSpec(format=fmt), name, workdir, "127.0.0.1:9", TOPIC
        )
        raw_cfg["metrics"] = {"enabled": False}
        self.catalog = "sqlite"
        if catalog is not None:
            raw_cfg["sink"]["catalog"] = catalog.block(workdir)
            self.catalog = catalog.label
        self.fmt = fmt
        self.pipe = Pipeline(parse_config(raw_cfg))
        if _main_kind(self.pipe.cfg) == "hudi":
            self.catalog = "hudi timeline"
        self.coordinator = self.pipe.coordinator
        self.coordinator.acquire_epoch(owner="bench")
        self.incarnation = str(uuid.uuid4())
        self.done = 0
        self.start: PartitionOffsets | None = None

    def step(self, series: CommitSeries) -> None:
        """One batch of ``ROWS`` rows; its timings appended to ``series``."""
        from pipeline.spark.writer import collect_staged, run_task

        i = self.done
        tp = TopicPartition(TOPIC, 0)
        end = PartitionOffsets({tp: (i + 1) * ROWS})
        rows = _decoded_rows(i * ROWS, ROWS)
        staging: list[float] = []

        def write(write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
            t0 = time.perf_counter()
            plan = self.pipe.tables.task_plan(write_id, drop_below)
            out = run_task(plan, iter([rows]), i)
            staged = collect_staged(out)
            staging.append(time.perf_counter() - t0)
            return staged

        t0 = time.perf_counter()
        outcome = self.coordinator.run_batch(self.incarnation, i, self.start, end, write)
        total = time.perf_counter() - t0
        if outcome.outcome != "committed" or outcome.records != ROWS:
            raise RuntimeError(f"commit {i + 1}: {outcome.outcome} with {outcome.records} rows")
        series.protocol.append(total - sum(staging))
        series.staging.append(sum(staging))
        series.precommit.append(outcome.timings.get("precommit", 0.0))
        series.commit.append(outcome.timings.get("commit", 0.0))
        if self.pipe.timeline is not None and i % PURGE_EVERY == 0:
            self.pipe.timeline.purge_finished(self.pipe.cfg.commit.journal_retention)
        self.start = end
        self.done += 1


def run_commit_series(
    fmt: str,
    commits: int,
    workdir: Path,
    catalog: CatalogUnderTest | None = None,
    on_progress: Callable[[int], None] | None = None,
    control_window: int = 0,
) -> tuple[CommitSeries, CommitSeries | None]:
    """``commits`` batches into one fresh table of ``fmt``; returns its per-commit timings
    and, with ``control_window`` > 0, those of a second fresh table whose first
    ``control_window`` commits alternate with the aged table's last ones (drift control).
    """
    aged = _CommitRunner(fmt, workdir / "aged", catalog)
    series = CommitSeries(fmt, aged.catalog)
    young: CommitSeries | None = None
    paired_from = commits - control_window if control_window > 0 else commits
    control = _CommitRunner(fmt, workdir / "young", catalog) if control_window > 0 else None
    for i in range(commits):
        if control is not None and i >= paired_from:
            if young is None:
                young = CommitSeries(fmt, control.catalog)
            control.step(young)
        aged.step(series)
        if on_progress is not None:
            on_progress(i + 1)
    series.diagnostics = _diagnostics(aged.pipe, fmt)
    return series, young


def _main_kind(cfg: Any) -> str:
    """How the (first) main table of ``cfg`` is stored: ``iceberg`` or ``hudi``."""
    return table_format(cfg).table_sets(cfg)[0].main.kind


def _diagnostics(pipe: Any, fmt: str) -> dict[str, int]:
    """Sizes that grow with the commit count and that each commit reads or rewrites."""
    if _main_kind(pipe.cfg) == "hudi":
        table = pipe.tables.commit_tables().main.hudi
        return {"timeline_files": len(table.files.listdir(table.paths.meta) or [])}
    table = pipe.tables.commit_tables().main.table()
    location = str(table.metadata_location)
    size = (
        os.path.getsize(location.removeprefix("file://"))
        if "://" not in location or (location.startswith("file://"))
        else -1
    )
    head = table.current_snapshot()
    return {
        "snapshots": len(table.metadata.snapshots),
        "metadata_json_bytes": size,
        "manifests_in_head": len(head.manifests(table.io)) if head is not None else 0,
    }


# -- commit growth ------------------------------------------------------------------------


def commit_growth(ctx: Context, postgres_uri: str | None) -> dict[str, Any]:
    p = ctx.preset
    targets: list[tuple[str, CatalogUnderTest | None]] = [("iceberg", None), ("hudi", None)]
    if p.postgres and postgres_uri:
        targets.append(("iceberg", CatalogUnderTest("postgresql", {"uri": postgres_uri})))
    series_out = []
    for fmt, catalog in targets:
        ctx.say(
            f"commit growth: {p.commits:,} commits to one {fmt} table"
            + (" (PostgreSQL catalog)" if catalog else "")
        )
        workdir = ctx.work / ctx.next_name(f"commits-{fmt}")
        t0 = time.monotonic()

        def progress(n: int, t0: float = t0) -> None:
            if n % 200 == 0:
                ctx.say(f"  {n:,} commits, {time.monotonic() - t0:.0f}s")

        late_lo = p.late_window[0]
        s, young = run_commit_series(
            fmt, p.commits, workdir, catalog, on_progress=progress,
            control_window=p.commits - late_lo + 1,
        )  # fmt: skip
        shutil.rmtree(workdir, ignore_errors=True)
        row: dict[str, Any] = {
            "format": fmt,
            "catalog": s.catalog,
            "commits": len(s.protocol),
            "early_window": list(p.early_window),
            "late_window": list(p.late_window),
        }
        # the verdict: the aged table's late window against a fresh table's early window,
        # measured interleaved (same host state); the same table's own early window (run
        # minutes before) is kept as `same_table`
        n_young = len(young.protocol) if young is not None else 0
        young_window = (p.early_window[0], min(p.early_window[1], n_young))
        for key, vals, yvals in (
            ("protocol", s.protocol, young.protocol if young else []),
            ("precommit", s.precommit, young.precommit if young else []),
            ("commit", s.commit, young.commit if young else []),
            ("staging_control", s.staging, young.staging if young else []),
        ):
            late = stats.window_median(vals, *p.late_window)
            own_early = stats.window_median(vals, *p.early_window)
            early = stats.window_median(yvals, *young_window) if yvals else own_early
            row[key] = {
                "early_median_s": _round(early, 5),
                "late_median_s": _round(late, 5),
                "ratio": _round(stats.growth_ratio(early, late), 3),
                "same_table": {
                    "early_median_s": _round(own_early, 5),
                    "ratio": _round(stats.growth_ratio(own_early, late), 3),
                },
            }
        row["early_from"] = (
            f"a fresh table's commits {young_window[0]}-{young_window[1]}, interleaved with "
            f"the late window"
            if young is not None
            else "the same table"
        )
        control = row["staging_control"]["ratio"] or 1.0
        row["load_corrected_ratio"] = _round((row["protocol"]["ratio"] or math.inf) / control, 3)
        row["flat"] = bool(row["protocol"]["ratio"] is not None and row["protocol"]["ratio"] <= 1.5)
        corrected = row["load_corrected_ratio"]
        row["flat_load_corrected"] = bool(corrected is not None and corrected <= 1.5)
        row["after_last_commit"] = s.diagnostics
        row["per_commit_s"] = [round(x, 5) for x in s.protocol]
        series_out.append(row)
        ctx.say(
            f"  median {row['protocol']['early_median_s']}s (commits "
            f"{p.early_window[0]}-{p.early_window[1]}) → {row['protocol']['late_median_s']}s "
            f"({p.late_window[0]}-{p.late_window[1]}): x{row['protocol']['ratio']}"
        )
    return {
        "what": "protocol time per commit (run_batch minus file staging): journal "
        "REQUESTED/INFLIGHT/COMPLETED, dedupe check, table commit",
        "limit_ratio": 1.5,
        "series": series_out,
    }
