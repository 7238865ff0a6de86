"""Schedules a pipeline's table maintenance: ``ingest compact`` and the driver's background
thread. (What compaction and orphan cleanup guarantee, their protocol and result types,
is :mod:`pipeline.commit.maintenance`; this module runs them for one pipeline.)

Operators (the guarantees are stated in :mod:`pipeline.commit.maintenance` and kept by
each format's implementation; this module only schedules and reports):

* :meth:`Maintenance.compact` -- every table of the pipeline (main, dead-letter; ``both``:
  the Iceberg and the Hudi table) compacted under one :class:`CompactionPolicy`.
* :meth:`Maintenance.remove_orphans` -- every table's unreferenced data files older than
  the safety interval removed; the files of the pending instants of every pipeline
  writing the tables (listed by an INFLIGHT entry, or staged under a pending instant's
  write id) are protected, read from the instant journals before any table is listed.
* :meth:`Maintenance.file_stats` -- live data files and bytes per table.
* :class:`BackgroundMaintenance` -- a daemon thread in the driver that runs the three on
  their intervals (``maintenance.*`` in the config). It holds the writer's epoch: a
  fenced compaction stops the thread (the pipeline itself stops at its next commit).
  Any other error is logged and retried at the next interval; maintenance never fails
  or delays a batch (its commits race the ingest's optimistically).

Every result goes to ``report`` (the driver passes its observers: metrics and logs).
Every run that changes a table logs one line: the format's compaction line for each
rewrite, the orphan sweep's line for each removal; an orphan cleanup that removes nothing
logs that it ran (what it kept and why), so a log always shows whether the cleanup runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pipeline.commit.faults import FaultPoint, FaultPoints
from pipeline.commit.instant import staged_write_id
from pipeline.commit.maintenance import (
    CompactionPolicy,
    CompactionResult,
    FileStats,
    OrphanResult,
    TableMaintenance,
    WriterFence,
)
from pipeline.config import PipelineConfig
from pipeline.errors import FencedError
from pipeline.formats.base import PipelineTables

log = logging.getLogger(__name__)

__all__ = ["BackgroundMaintenance", "Maintenance", "Report", "protected_paths"]

Report = Callable[[CompactionResult | OrphanResult | FileStats], None]


def protected_paths(tables: PipelineTables, pipeline_id: str) -> set[str]:
    """Files of the pending instants of EVERY pipeline writing these tables (this one and
    each other whose journal lies beside the main table): what a recovery may still
    commit. A journal that cannot be read fails the cleanup: nothing is deleted."""
    paths: set[str] = set()
    committers = [c for _, c in tables.commit_tables()]
    for writer in sorted({pipeline_id, *tables.journal_pipelines()}):
        for inst in tables.timeline(writer).pending():
            if inst.inflight is not None:
                paths.update(f.path for f in inst.inflight.files)
            write_id = staged_write_id(writer, inst.time)
            for committer in committers:
                paths.update(committer.orphan_files(write_id))
    return paths


def compaction_policy(cfg: PipelineConfig) -> CompactionPolicy:
    c = cfg.maintenance.compaction
    return CompactionPolicy(
        target_file_size_bytes=c.target_file_size_bytes or cfg.sink.target_file_size_bytes,
        min_input_files=c.min_input_files,
    )


def _ignore(_: Any) -> None:
    return None


class Maintenance:
    """The maintenance of one pipeline's tables."""

    def __init__(
        self,
        cfg: PipelineConfig,
        tables: PipelineTables,
        *,
        fence: WriterFence | None = None,
        report: Report = _ignore,
        faults: FaultPoints | None = None,
    ) -> None:
        self.cfg = cfg
        self.tables = tables
        self.fence = fence
        self.report = report
        self.faults = faults or FaultPoints("")
        self._each: list[TableMaintenance] = tables.maintenance()

    def compact(self, policy: CompactionPolicy | None = None) -> list[CompactionResult]:
        policy = policy or compaction_policy(self.cfg)
        results = []
        for table in self._each:
            result = table.compact(policy, self.fence, self._fault_point)
            self.report(result)
            results.append(result)
        return results

    def _fault_point(self, step: str) -> None:
        written = step == "written"
        self.faults.hit(
            FaultPoint.COMPACTION_AFTER_WRITE if written else FaultPoint.COMPACTION_AFTER_COMMIT
        )

    def remove_orphans(
        self, older_than_s: float | None = None, *, dry_run: bool = False
    ) -> list[OrphanResult]:
        older = self.cfg.maintenance.orphans.older_than if older_than_s is None else older_than_s
        protected = protected_paths(self.tables, self.cfg.id)
        results = []
        for table in self._each:
            result = table.remove_orphans(older, protected, dry_run=dry_run)
            if not result.removed and not result.errors:  # the sweep logs what it removes
                log.info(
                    "%s: orphan cleanup removed nothing (%d unreferenced files younger than "
                    "%g s kept, %d referenced)",
                    result.table,
                    result.too_young,
                    older,
                    result.referenced,
                )
            self.report(result)
            results.append(result)
        return results

    def file_stats(self) -> list[FileStats]:
        stats = []
        for table in self._each:
            s = table.file_stats()
            self.report(s)
            stats.append(s)
        return stats


def start_background(
    cfg: PipelineConfig,
    open_tables: Callable[[], PipelineTables],
    *,
    epoch: int | None,
    report: Report,
    file_stats: bool,
    faults: FaultPoints | None = None,
) -> BackgroundMaintenance | None:
    """The driver's background maintenance, started; None when nothing is to run.

    ``open_tables`` gives the thread tables of its own (own catalog connection and table
    views: the coordinator's are not shared across threads). ``epoch``: the writer epoch
    the driver holds (None in at-least-once mode: no fence to check)."""
    m = cfg.maintenance
    if not (m.compaction.enabled or m.orphans.enabled or (file_stats and m.file_stats_interval)):
        return None
    fence = WriterFence(cfg.id, epoch) if epoch is not None else None
    background = BackgroundMaintenance(
        Maintenance(cfg, open_tables(), fence=fence, report=report, faults=faults),
        file_stats=file_stats,
    )
    background.start()
    return background


class BackgroundMaintenance:
    """Runs compaction, orphan cleanup and file statistics on their intervals in a daemon
    thread until :meth:`stop` (or a fence)."""

    def __init__(self, maintenance: Maintenance, *, file_stats: bool = True) -> None:
        self.maintenance = maintenance
        m = maintenance.cfg.maintenance
        # (name, interval, job); an interval of 0 or a disabled job never runs
        self._jobs: list[tuple[str, float, Callable[[], object]]] = [
            (name, interval, job)
            for name, interval, job, on in (
                ("compaction", m.compaction.interval, maintenance.compact, m.compaction.enabled),
                (
                    "orphan cleanup",
                    m.orphans.interval,
                    maintenance.remove_orphans,
                    m.orphans.enabled,
                ),
                ("file statistics", m.file_stats_interval, maintenance.file_stats, file_stats),
            )
            if on and interval > 0
        ]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return bool(self._jobs)

    def start(self) -> None:
        if not self._jobs or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="ingest-maintenance", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        # the first compaction after one interval (a restart need not rewrite at once);
        # statistics at once
        now = time.monotonic()
        due = {
            name: now + (0.0 if name == "file statistics" else interval)
            for name, interval, _ in self._jobs
        }
        while not self._stop.is_set():
            name, interval, job = min(self._jobs, key=lambda j: due[j[0]])
            if self._stop.wait(max(0.0, due[name] - time.monotonic())):
                return
            try:
                job()
            except FencedError as e:
                log.error("background maintenance stops: %s", e)
                return
            except Exception as e:  # housekeeping: the next interval tries again
                log.warning("background %s failed, retried in %.0f s: %s", name, interval, e)
            due[name] = time.monotonic() + interval
