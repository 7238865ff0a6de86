"""What the run exports: the metrics observer (Prometheus registry, HTTP endpoint, lag
thread) and the JSON batch log line, attached as observers; and the run info observers
start from (the committed state as the main table holds it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipeline.commit.journal import InstantTimeline
from pipeline.commit.protocol import BatchCoordinator
from pipeline.commit.table_set import CommitTables
from pipeline.config import PipelineConfig
from pipeline.formats.routes import table_routes
from pipeline.observe.base import Observers, PipelineObserver, RunInfo

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from pipeline.observe.metrics import PipelineMetrics

log = logging.getLogger(__name__)


class Telemetry:
    def __init__(
        self,
        cfg: PipelineConfig,
        *,
        format_name: str,
        tables: CommitTables,
        timeline: InstantTimeline | None,
        coordinator: BatchCoordinator,
        observers: Observers,
        consumer_conf: Callable[[], dict[str, Any]],
    ) -> None:
        self.cfg = cfg
        self.format_name = format_name
        self.tables = tables
        self.timeline = timeline
        self.coordinator = coordinator
        self.observers = observers
        self.consumer_conf = consumer_conf
        self.metrics: PipelineMetrics | None = None  # while attached
        self._attached: list[PipelineObserver] = []

    def run_info(self, query: StreamingQuery | None = None) -> RunInfo:
        """The pipeline's committed state as its main table(s) hold it (any format)."""
        return RunInfo(
            self.cfg.id,
            committed=self.tables.committed_offsets(self.cfg.id) or {},
            last_commit_time=self.tables.last_commit_time(self.cfg.id),
            epoch=self.coordinator.epoch,
            query=query,
        )

    def start_info(self, query: StreamingQuery) -> RunInfo:
        try:
            return self.run_info(query)
        except Exception as e:  # observers must never fail the run
            log.warning("observers: the table's committed state is unknown at start: %s", e)
            return RunInfo(self.cfg.id, epoch=self.coordinator.epoch, query=query)

    def attach(self, *, serve: bool | None = None) -> PipelineMetrics:
        """A ``PipelineMetrics`` fed by a metrics observer, plus the JSON batch log line;
        ``serve`` (default ``cfg.metrics.enabled``): also the HTTP endpoint and lag thread."""
        from pipeline.observe.observers import BatchLogObserver, MetricsObserver

        observer = MetricsObserver.from_config(
            self.cfg, format_name=self.format_name, journal=self.timeline
        )
        observer.metrics.set_writer_epoch(self.coordinator.epoch)
        routes = table_routes(self.cfg)
        if routes is not None:  # every table of the set gets its series from the start
            observer.metrics.declare_tables({t.name: t.identifier for t in routes.tables})
        batch_log = BatchLogObserver(self.cfg.id, epoch=self.coordinator.epoch)
        if self.cfg.metrics.enabled if serve is None else serve:
            observer.serve(self.cfg, self.consumer_conf(), initial=self.run_info)
        for o in (observer, batch_log):
            self.observers.add(o)
        self._attached = [observer, batch_log]
        self.metrics = observer.metrics
        return observer.metrics

    def detach(self) -> None:
        for o in self._attached:
            self.observers.remove(o)
        self._attached = []
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None

    def record_running(self) -> None:
        """``ingest status`` reads this (and the metrics URL, when serving) after we die."""
        from pipeline.observe.runstate import record_run_state

        m = self.metrics
        url = m.url if m is not None and m.port else None
        record_run_state(self.cfg, "running", None, metrics_url=url)
